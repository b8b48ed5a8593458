//! CI's smoke test of the benchmark harness: `sessionlog bench --quick --json FILE` runs to the
//! end in a temporary directory and writes results of the documented structure. Nothing is
//! asserted about speed.

use std::process::Command;

use serde_json::Value;

fn num(v: &Value, key: &str) -> f64 {
    v.get(key)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{key} is not a string in {v}"))
}

fn rows<'a>(v: &'a Value, key: &str) -> &'a Vec<Value> {
    v.get(key)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{key} is not an array"))
}

#[test]
fn quick_bench_writes_structured_json() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("results.json");
    let charts = dir.path().join("charts");
    let out = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(["bench", "--quick", "--json"])
        .arg(&json)
        .arg("--charts")
        .arg(&charts)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("### Append throughput"),
        "the markdown report is printed"
    );
    // The temporary store directory is removed again.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".sessionlog-bench-"))
        .collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");

    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["format"], 1);
    assert_eq!(v["quick"], true);
    assert!(num(&v["machine"], "nproc") >= 1.0);
    assert!(!text(&v["machine"], "cpu").is_empty());
    let avg = num(&v["workload"], "avg_event_json_bytes");
    assert!((300.0..420.0).contains(&avg), "average event size {avg}");
    assert_eq!(num(&v["workload"], "events_per_turn"), 58.0);

    // Append: every peer in every mode, for 1 and 64 sessions, with positive figures.
    let append = rows(&v, "append");
    let peers = [
        "sessionlog",
        "sqlite-wal-full",
        "sqlite-wal-normal",
        "dsh-jsonl",
        "dsh-jsonl-zstd",
        "dsh-sqlite-18",
        "redb",
        "raw-disk",
    ];
    for sessions in [1.0, 64.0] {
        for mode in [
            "sync per event",
            "batch 16",
            "batch 256",
            "buffered, 4 flushes/turn",
        ] {
            for peer in peers {
                let row = append
                    .iter()
                    .find(|r| {
                        text(r, "peer") == peer
                            && num(r, "sessions") == sessions
                            && text(r, "mode") == mode
                    })
                    .unwrap_or_else(|| {
                        panic!("no append row for {peer}, {sessions} sessions, {mode}")
                    });
                assert!(num(row, "events_per_sec") > 0.0);
                assert!(num(row, "mb_per_sec") > 0.0);
                assert!(num(row, "p99_us") >= num(row, "p50_us"));
                assert!(num(row, "bytes_per_event") > 0.0);
                assert_eq!(row["durable"], peer != "sqlite-wal-normal");
            }
        }
    }
    // The same events went to every peer of a configuration.
    for r in append {
        let same = append
            .iter()
            .find(|o| {
                text(o, "peer") == "sessionlog"
                    && o["sessions"] == r["sessions"]
                    && o["mode"] == r["mode"]
            })
            .unwrap();
        assert_eq!(r["events"], same["events"]);
        assert_eq!(r["json_bytes"], same["json_bytes"]);
    }

    let latency = rows(&v, "latency");
    assert_eq!(latency.len(), peers.len());
    for r in latency {
        assert!(num(r, "p50_us") > 0.0 && num(r, "p99_us") >= num(r, "p90_us"));
    }

    // Resume: the peers agree on what they loaded.
    let resume = rows(&v, "resume");
    assert!(
        resume.len() >= 7,
        "sessionlog (writable and read-only), SQLite, JSONL, dsh's zstd JSONL and schema 18, redb"
    );
    let first = &resume[0];
    assert_eq!(text(first, "peer"), "sessionlog");
    assert!(
        text(first, "kind").contains("surface resume"),
        "says what was measured"
    );
    for r in resume {
        assert_eq!(r["events"], first["events"]);
        assert_eq!(r["surface"], first["surface"]);
        assert_eq!(r["messages"], first["messages"]);
        assert!(num(r, "ms") > 0.0 && num(r, "rss_mb") > 0.0);
    }

    for r in rows(&v, "read") {
        assert!(num(r, "events_per_sec") > 0.0);
    }
    let disk = rows(&v, "disk");
    assert_eq!(disk.len(), 6);
    for r in disk {
        assert!(num(r, "bytes_per_event") > 0.0);
    }
    // The faithful peers write what dsh writes: packed rows, zstd (far fewer bytes than the
    // simple JSONL and schema-15 peers).
    let per_event = |peer: &str| {
        let row = disk.iter().find(|r| text(r, "peer") == peer).unwrap();
        num(row, "bytes_per_event")
    };
    assert!(per_event("dsh-jsonl-zstd") < per_event("dsh-jsonl") / 2.0);
    assert!(per_event("dsh-sqlite-18") < per_event("sqlite-wal-full"));
    // Resume of sessions however written: every way, three measurements each.
    let written = rows(&v, "written");
    assert_eq!(
        written.len(),
        6,
        "flush points, import, 256, 1024, fork, big messages"
    );
    for r in written {
        assert!(num(r, "events") > 0.0 && num(r, "surface") > 0.0);
        for k in ["resume_ms", "read_once_ms", "dsh_ms"] {
            assert!(num(r, k) > 0.0, "{k} in {r}");
        }
    }
    assert!(text(&written[5], "written").contains("100 KB"));
    // Segment GC: both thresholds, space within what was there, and the append runs.
    let gc = rows(&v, "gc_space");
    assert_eq!(gc.len(), 2);
    for r in gc {
        assert!(num(r, "size_after") <= num(r, "size_before"));
        assert!(num(r, "live") > 0.0 && num(r, "ratio") >= 1.0);
    }
    assert!(
        num(&gc[0], "rewritten") > 0.0,
        "the first GC compacts: {}",
        gc[0]
    );
    assert!(num(&gc[0], "raw_mb_per_sec") > 0.0);
    let gc_append = rows(&v, "gc_append");
    let beside: Vec<&str> = gc_append.iter().map(|r| text(r, "beside")).collect();
    assert_eq!(beside, ["nothing", "gc", "spin"]);
    for r in gc_append {
        assert!(num(r, "events_per_sec") > 0.0 && num(r, "p99_us") >= num(r, "p50_us"));
    }
    assert!(
        num(&gc_append[1], "gcs") >= 1.0,
        "a GC ran beside the appends"
    );
    // Reopen after a crash scanned the unindexed tail.
    let reopen = rows(&v, "reopen");
    assert!(!reopen.is_empty());
    for r in reopen {
        assert!(
            num(r, "frames_scanned") > 0.0,
            "the crash left an unindexed tail: {r}"
        );
        assert_eq!(r["events_recovered"], r["events"]);
        assert!(num(r, "rebuild_ms") > 0.0);
    }
    // Replay runs when the fixtures are there.
    if crate::shared_fixtures::shared_fixtures("dsh-sessions").is_some() {
        assert_eq!(rows(&v, "replay").len(), peers.len());
    }
    // Targets: each has a verdict or says it was not measured.
    let targets = rows(&v, "targets");
    assert!(targets.len() >= 5);
    for t in targets {
        assert!(t["met"].is_boolean() || t["met"].is_null());
        assert!(!text(t, "measured").is_empty());
    }
    assert!(text(&v, "command").contains("bench --quick"));
    for chart in ["resume.svg", "append.svg"] {
        let svg = std::fs::read_to_string(charts.join(chart)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("sessionlog"),
            "{chart}"
        );
    }
}
