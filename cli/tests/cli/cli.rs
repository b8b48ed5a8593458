//! The `sessionlog` binary on temporary stores: import of dsh fixtures, `list --json`,
//! `show` (messages equal to dsh's), export in every format, `verify` exit codes (clean,
//! invariant violations, a corrupted segment), and errors that leave the store unchanged.

use crate::jsonl_fixtures;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sessionlog::json::{JsonLimits, parse, stringify};

fn sessionlog(store: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("SESSIONLOG_STORE")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout: {}\nstderr: {}",
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

fn js(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|_| {
        serde_json::Value::String(stringify(&parse(text, &JsonLimits::default()).unwrap()))
    })
}

/// A JSON array printed by the CLI whose elements may hold lone surrogates: parsed element by
/// element (each element is on its own line).
fn json_lines_array(text: &str) -> Vec<serde_json::Value> {
    let t = text.trim();
    assert!(t.starts_with('[') && t.ends_with(']'), "{t}");
    t[1..t.len() - 1]
        .lines()
        .map(|l| l.trim().trim_end_matches(','))
        .filter(|l| !l.is_empty())
        .map(js)
        .collect()
}

struct Fixture {
    file: String,
    id: String,
    text: String,
    expected: serde_json::Value,
}

/// Up to `n` fixtures dsh's loader accepts, with distinct ids and at least one message,
/// written (substituted) into `dir`.
fn fixtures(fx: &Path, dir: &Path, n: usize) -> Vec<Fixture> {
    let mut out: Vec<Fixture> = Vec::new();
    for v in jsonl_fixtures::index(fx).into_iter().filter(|v| v.jsonl_ok) {
        let text = jsonl_fixtures::fixture_text(fx, &v.file);
        let expected = jsonl_fixtures::expected(fx, &v.file);
        let log = sessionlog::interop::jsonl::read(text.as_bytes(), &Default::default()).unwrap();
        if log.torn.is_some()
            || expected["messages"].as_array().unwrap().is_empty()
            || out.iter().any(|f| f.id == log.header.id)
        {
            continue;
        }
        let path = dir.join(&v.file);
        std::fs::write(&path, &text).unwrap();
        out.push(Fixture {
            file: v.file,
            id: log.header.id,
            text,
            expected,
        });
        if out.len() == n {
            break;
        }
    }
    out
}

/// Every segment file's bytes.
fn segments(store: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = store.join("segments");
    if !dir.exists() {
        return Vec::new();
    }
    let mut v: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn import_list_show_export_verify() {
    let _serial = crate::serial();
    let Some(fx) = jsonl_fixtures::fixtures_dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let cases = fixtures(&fx, &src, 6);
    assert_eq!(cases.len(), 6);
    let store = tmp.path().join("store");

    // Import a directory and a file dsh wrote as SQLite 18.
    let db = fx.join("dsh-written/sqlite18/examples-acp-agent-tests-snapshots-fs-edit-session.db");
    let out = ok(sessionlog(
        &store,
        &["import", src.to_str().unwrap(), db.to_str().unwrap()],
    ));
    assert!(
        out.contains("\nimported 7 session(s)"),
        "import report: {out}"
    );

    // list --json.
    let list: serde_json::Value =
        serde_json::from_str(&ok(sessionlog(&store, &["list", "--json"]))).unwrap();
    let rows = list.as_array().unwrap();
    assert_eq!(rows.len(), 7);
    for c in &cases {
        let row = rows.iter().find(|r| r["id"] == c.id.as_str()).unwrap();
        assert_eq!(row["events"], c.expected["event_count"], "{}", c.file);
        assert_eq!(
            row["surfaceSize"].as_u64().unwrap() as usize,
            c.expected["surface"].as_array().unwrap().len(),
            "{}",
            c.file
        );
        assert_eq!(row["replaceGeneration"], c.expected["replaceGeneration"]);
        let log = sessionlog::interop::jsonl::read(c.text.as_bytes(), &Default::default()).unwrap();
        assert_eq!(
            row["lastActivity"].as_i64(),
            log.events.last().map(|e| e.time),
            "{}",
            c.file
        );
        // The title projection: the last `session/title` of the log (no fixture pins one).
        let want_title = log
            .events
            .iter()
            .rev()
            .find(|e| e.kind == "session/title")
            .and_then(|e| serde_json::from_str::<serde_json::Value>(&e.data).ok())
            .and_then(|v| v["title"].as_str().map(str::to_owned));
        assert_eq!(
            row["title"].as_str().map(str::to_owned),
            want_title,
            "{}",
            c.file
        );
        assert!(row["stats"]["turns"].is_number(), "{}", c.file);
    }
    // The plain listing names every session (long ids cut in the middle, with an ellipsis).
    let plain = ok(sessionlog(&store, &["list"]));
    for c in &cases {
        let start: String = c.id.chars().take(20).collect();
        let end: String =
            c.id.chars()
                .skip(c.id.chars().count().saturating_sub(8))
                .collect();
        assert!(
            plain
                .lines()
                .any(|l| l.starts_with(&start) && l.contains(&end)),
            "{plain}"
        );
    }

    // show: messages, surface, events, summary.
    for c in &cases {
        let messages = json_lines_array(&ok(sessionlog(
            &store,
            &["show", &c.id, "--messages", "--json"],
        )));
        assert_eq!(
            &messages,
            c.expected["messages"].as_array().unwrap(),
            "{} messages",
            c.file
        );
        let surface: serde_json::Value = serde_json::from_str(&ok(sessionlog(
            &store,
            &["show", &c.id, "--surface", "--json"],
        )))
        .unwrap();
        assert_eq!(surface, c.expected["surface"], "{} surface", c.file);
        let events = json_lines_array(&ok(sessionlog(
            &store,
            &["show", &c.id, "--events", "--json"],
        )));
        assert_eq!(
            events.len() as u64,
            c.expected["event_count"].as_u64().unwrap()
        );
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e["seq"].as_u64(), Some(i as u64));
        }
        let summary: serde_json::Value =
            serde_json::from_str(&ok(sessionlog(&store, &["show", &c.id, "--json"]))).unwrap();
        assert_eq!(summary["id"], c.id.as_str());
        assert_eq!(summary["header"]["type"], "session");
        assert_eq!(summary["events"], c.expected["event_count"]);
        let text = ok(sessionlog(&store, &["show", &c.id]));
        assert!(text.contains(&c.id), "{text}");
        let text = ok(sessionlog(&store, &["show", &c.id, "--messages"]));
        assert_eq!(
            text.lines().count(),
            c.expected["messages"].as_array().unwrap().len()
        );
    }

    // export one session to a file: the fixture, byte for byte.
    let c = &cases[0];
    let file = tmp.path().join("one.jsonl");
    ok(sessionlog(
        &store,
        &[
            "export",
            "--format",
            "jsonl",
            "--out",
            file.to_str().unwrap(),
            &c.id,
        ],
    ));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), c.text);
    // Exporting again refuses to overwrite (exit 2).
    let again = sessionlog(
        &store,
        &[
            "export",
            "--format",
            "jsonl",
            "--out",
            file.to_str().unwrap(),
            &c.id,
        ],
    );
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );

    // export everything as jsonl-zstd to dsh's layout; re-import into a new store.
    let tree = tmp.path().join("tree");
    let out = ok(sessionlog(
        &store,
        &[
            "export",
            "--format",
            "jsonl-zstd",
            "--out",
            tree.to_str().unwrap(),
        ],
    ));
    assert!(out.contains("exported 7 session(s)"), "{out}");
    let c_path = tree.join(
        sessionlog::interop::jsonl::session_relative_path(
            &sessionlog::interop::jsonl::read(c.text.as_bytes(), &Default::default())
                .unwrap()
                .header,
            sessionlog::interop::jsonl::Compression::Zstd,
        )
        .unwrap(),
    );
    assert_eq!(
        zstd::decode_all(&std::fs::read(&c_path).unwrap()[..]).unwrap(),
        c.text.as_bytes()
    );
    // Every SQLite version into one database each, re-imported: the same listing.
    let listing = |s: &Path| -> serde_json::Value {
        let mut v: serde_json::Value =
            serde_json::from_str(&ok(sessionlog(s, &["list", "--json"]))).unwrap();
        v.as_array_mut()
            .unwrap()
            .sort_by_key(|r| r["id"].as_str().unwrap().to_owned());
        v
    };
    let want = listing(&store);
    let store2 = tmp.path().join("store-tree");
    ok(sessionlog(&store2, &["import", tree.to_str().unwrap()]));
    assert_eq!(listing(&store2), want);
    for f in ["sqlite15", "sqlite17", "sqlite18"] {
        let db = tmp.path().join(format!("all.{f}.db"));
        ok(sessionlog(
            &store,
            &["export", "--format", f, "--out", db.to_str().unwrap()],
        ));
        let s = tmp.path().join(format!("store-{f}"));
        ok(sessionlog(&s, &["import", db.to_str().unwrap()]));
        assert_eq!(listing(&s), want, "{f}");
    }

    // verify: the store is clean.
    let v = sessionlog(&store, &["verify"]);
    assert_eq!(v.status.code(), Some(0), "{}{}", stdout(&v), stderr(&v));
    assert!(stdout(&v).contains("clean"));
    let v = sessionlog(&store, &["verify", &c.id]);
    assert_eq!(v.status.code(), Some(0), "{}", stdout(&v));
}

#[test]
fn verify_reports_invariant_violations_with_their_seq() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    // dsh's loader accepts a turn/start inside an open turn; the invariants do not.
    let file = tmp.path().join("s.jsonl");
    std::fs::write(
        &file,
        concat!(
            r#"{"type":"session","version":0,"id":"s1","createdAt":1000,"cwd":"/work","delegationDepth":0}"#, "\n",
            r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#, "\n",
            r#"{"type":"turn/start","seq":1,"time":2,"data":{"turn":2}}"#, "\n",
            r#"{"type":"turn/end","seq":2,"time":3,"data":{"turn":2,"reason":{"kind":"completed"}}}"#, "\n",
        ),
    )
    .unwrap();
    ok(sessionlog(&store, &["import", file.to_str().unwrap()]));
    let v = sessionlog(&store, &["verify"]);
    assert_eq!(v.status.code(), Some(1), "{}{}", stdout(&v), stderr(&v));
    let report = stdout(&v);
    assert!(
        report.contains("session \"s1\" seq 1: INV-TURN-START"),
        "{report}"
    );
    assert!(report.contains("1 invariant violation"), "{report}");
    // An unknown session is an error.
    let v = sessionlog(&store, &["verify", "nope"]);
    assert_eq!(v.status.code(), Some(2));
    assert!(
        stderr(&v).contains("\"nope\" is not in the store"),
        "{}",
        stderr(&v)
    );
}

#[test]
fn verify_reports_a_corrupted_segment_with_its_offset() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    for i in 0..3 {
        std::fs::write(
            src.join(format!("s{i}.jsonl")),
            format!(
                "{{\"type\":\"session\",\"version\":0,\"id\":\"s{i}\",\"createdAt\":1000,\"delegationDepth\":0}}\n{}\n{}\n",
                r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#,
                r#"{"type":"turn/end","seq":1,"time":2,"data":{"turn":1,"reason":{"kind":"completed"}}}"#,
            ),
        )
        .unwrap();
    }
    ok(sessionlog(&store, &["import", src.to_str().unwrap()]));
    assert_eq!(sessionlog(&store, &["verify"]).status.code(), Some(0));
    // Flip a byte inside the first frame's payload (segment header: 32 bytes, frame header:
    // 16); later frames stay valid.
    let seg = store.join("segments/00000000000000000001.seg");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[32 + 16 + 3] ^= 0x55;
    std::fs::write(&seg, &bytes).unwrap();
    let v = sessionlog(&store, &["verify"]);
    let (out, err) = (stdout(&v), stderr(&v));
    assert!(matches!(v.status.code(), Some(1) | Some(2)), "{out}{err}");
    assert!(
        (out.clone() + &err).contains("segment 1 offset 32"),
        "names the segment and offset: {out}{err}"
    );
    // verify did not touch the store.
    assert_eq!(std::fs::read(&seg).unwrap(), bytes);

    // Damage in the last frame instead: the index no longer matches the log. verify, list and
    // export refuse (exit 2, naming segment and offset) and change nothing; `recover` refuses
    // too (the import acknowledged that frame: not a torn write) and changes nothing;
    // `recover --salvage` cuts it, after which the store verifies clean.
    bytes[32 + 16 + 3] ^= 0x55;
    let last = bytes.len() - 3;
    bytes[last] ^= 0x55;
    std::fs::write(&seg, &bytes).unwrap();
    for args in [&["verify"][..], &["list"][..]] {
        let o = sessionlog(&store, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stdout(&o));
        let err = stderr(&o);
        assert!(err.contains("segment 1 offset"), "{err}");
        assert!(err.contains("sessionlog recover"), "{err}");
        assert_eq!(std::fs::read(&seg).unwrap(), bytes);
    }
    let o = sessionlog(&store, &["recover"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(
        err.contains("acknowledged frames are missing") && err.contains("recover --salvage"),
        "{err}"
    );
    assert_eq!(std::fs::read(&seg).unwrap(), bytes);
    let r = ok(sessionlog(&store, &["recover", "--salvage"]));
    assert!(r.contains("acknowledged frames were missing"), "{r}");
    assert!(r.contains("torn write cut at segment 1 offset"), "{r}");
    assert_eq!(sessionlog(&store, &["verify"]).status.code(), Some(0));
    let list: serde_json::Value =
        serde_json::from_str(&ok(sessionlog(&store, &["list", "--json"]))).unwrap();
    assert_eq!(
        list.as_array().unwrap().len(),
        2,
        "the last session's frame was cut"
    );
}

#[test]
fn bad_inputs_are_exit_2_and_leave_the_store_unchanged() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let good = tmp.path().join("good.jsonl");
    std::fs::write(
        &good,
        concat!(
            r#"{"type":"session","version":0,"id":"s1","createdAt":1000,"cwd":"/work","delegationDepth":0}"#, "\n",
            r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#, "\n",
            r#"{"type":"turn/end","seq":1,"time":2,"data":{"turn":1,"reason":{"kind":"completed"}}}"#, "\n",
        ),
    )
    .unwrap();
    ok(sessionlog(&store, &["import", good.to_str().unwrap()]));
    let list_before = ok(sessionlog(&store, &["list", "--json"]));
    let segs_before = segments(&store);
    let bad = |name: &str, bytes: &[u8], needles: &[&str]| {
        let p = tmp.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let o = sessionlog(&store, &["import", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stdout(&o));
        let err = stderr(&o);
        assert!(err.starts_with("sessionlog: error: "), "{err}");
        assert!(err.contains(&p.display().to_string()), "{name}: {err}");
        for n in needles {
            assert!(err.contains(n), "{name}: {n:?} not in {err}");
        }
        assert_eq!(ok(sessionlog(&store, &["list", "--json"])), list_before);
        assert_eq!(segments(&store), segs_before, "{name}");
    };
    bad(
        "garbage.jsonl",
        concat!(
            r#"{"type":"session","version":0,"id":"s2","createdAt":1000,"delegationDepth":0}"#, "\n",
            r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#, "\n",
            "garbage\n",
            r#"{"type":"turn/end","seq":1,"time":2,"data":{"turn":1,"reason":{"kind":"completed"}}}"#, "\n",
        )
        .as_bytes(),
        &["file line 3", "unparsable committed event"],
    );
    bad(
        "future.jsonl",
        concat!(
            r#"{"type":"session","version":3,"id":"s3","createdAt":1000,"delegationDepth":0}"#,
            "\n",
        )
        .as_bytes(),
        &["uses log format v3", "upgrade the harness"],
    );
    bad("empty.jsonl", b"", &["the file is empty"]);
    bad(
        "exists.jsonl",
        &std::fs::read(&good).unwrap(),
        &["\"s1\" already exists"],
    );
    let replay = concat!(
        r#"{"type":"session","version":0,"id":"r1","createdAt":1000,"delegationDepth":0}"#,
        "\n",
        r#"{"type":"turn/start","data":{"turn":1}}"#,
        "\n",
        r#"{"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#,
        "\n",
    );
    bad("replay.jsonl", replay.as_bytes(), &["--replay-fixture"]);
    // A missing path.
    let o = sessionlog(&store, &["import", "/nonexistent/x.jsonl"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("/nonexistent/x.jsonl"),
        "{}",
        stderr(&o)
    );
    // Export with an unknown format or session.
    let o = sessionlog(&store, &["export", "--format", "csv", "--out", "x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("jsonl-zstd"), "{}", stderr(&o));
    let o = sessionlog(
        &store,
        &[
            "export",
            "--format",
            "jsonl",
            "--out",
            tmp.path().join("n.jsonl").to_str().unwrap(),
            "nope",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("\"nope\" is not in the store"),
        "{}",
        stderr(&o)
    );
    // `--out -` is refused (export publishes whole files), and makes no file named `-`.
    let o = sessionlog(&store, &["export", "--format", "jsonl", "--out", "-"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("not standard output: pass a path"),
        "{}",
        stderr(&o)
    );
    assert!(!std::path::Path::new("-").exists());
    // A store that does not exist.
    let o = sessionlog(&tmp.path().join("nowhere"), &["list"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    assert!(!tmp.path().join("nowhere").exists());
    // Nothing was printed on stdout as progress when stderr is not a terminal.
    let o = sessionlog(&store, &["verify"]);
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    // The replay form imports when asked for (numbered by position, time 0).
    let p = tmp.path().join("replay.jsonl");
    let o = sessionlog(&store, &["import", "--replay-fixture", p.to_str().unwrap()]);
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    ok(o);
    let events = json_lines_array(&ok(sessionlog(
        &store,
        &["show", "r1", "--events", "--json"],
    )));
    assert_eq!(events.len(), 2);
    assert_eq!(
        (events[1]["seq"].as_u64(), events[1]["time"].as_i64()),
        (Some(1), Some(0))
    );
}

#[test]
fn store_comes_from_the_environment() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("env-store");
    let file = tmp.path().join("s.jsonl");
    std::fs::write(
        &file,
        concat!(
            r#"{"type":"session","version":0,"id":"env","createdAt":1000,"delegationDepth":0}"#,
            "\n",
        ),
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(["import", file.to_str().unwrap()])
        .env("SESSIONLOG_STORE", &store)
        .current_dir(tmp.path())
        .output()
        .unwrap();
    ok(o);
    assert!(store.join("segments").is_dir());
    let o = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(["list", "--json"])
        .env("SESSIONLOG_STORE", &store)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&ok(o)).unwrap();
    assert_eq!(v[0]["id"], "env");
    assert_eq!(v[0]["events"], 0);
    assert!(v[0]["lastActivity"].is_null());
}

/// A store in `dir/store` with session "s1" of 40 events, one frame each (flushed one by one),
/// its index intact, and one byte flipped in the middle frame of the log (segment header 32
/// bytes).
fn store_with_a_damaged_middle_frame(dir: &Path) -> std::path::PathBuf {
    let store = dir.join("store");
    let s = sessionlog::Store::open(&store, sessionlog::Config::default()).unwrap();
    s.create_session(sessionlog::SessionHeader::new("s1", 1000))
        .unwrap();
    for seq in 0..40 {
        let turn = seq / 2 + 1;
        let event = if seq % 2 == 0 {
            sessionlog::Event::new("turn/start", seq, 1, format!(r#"{{"turn":{turn}}}"#))
        } else {
            sessionlog::Event::new(
                "turn/end",
                seq,
                2,
                format!(r#"{{"turn":{turn},"reason":{{"kind":"completed"}}}}"#),
            )
        };
        s.append("s1", event).unwrap();
        s.flush().unwrap();
    }
    s.close().unwrap();
    let seg = store.join("segments/00000000000000000001.seg");
    let mut bytes = std::fs::read(&seg).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(&seg, &bytes).unwrap();
    store
}

/// After `recover --salvage`, verify still reports the damaged frame, and names the events
/// the salvage dropped in one note instead of one "missing index entry" line per event.
#[test]
fn verify_after_a_salvage_names_the_dropped_events_once() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = store_with_a_damaged_middle_frame(tmp.path());
    let r = ok(sessionlog(&store, &["recover", "--salvage"]));
    // The seqs the salvage reports lost (the damaged frame's own, which the old index held,
    // and the ones after it): verify's note must name the same ones.
    let dropped = r
        .split("dropped: session \"s1\" seqs ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("the salvage names what it dropped: {r}"))
        .trim_end_matches([',', '.', ':', ';'])
        .to_owned();
    assert!(dropped.ends_with("..=39"), "{dropped}");
    let v = sessionlog(&store, &["verify"]);
    let (out, err) = (stdout(&v), stderr(&v));
    assert_eq!(v.status.code(), Some(1), "{out}{err}");
    assert!(out.contains("1 problem(s): 1 bad frame(s)"), "{out}{err}");
    assert!(!out.contains("missing"), "{out}");
    let note = err
        .lines()
        .find(|l| l.starts_with("note: session \"s1\" seqs "))
        .unwrap_or_else(|| panic!("a note on the dropped events: {err}"));
    assert!(
        note.contains(&format!("seqs {dropped} are not in the index: ")),
        "{note} (the salvage reported {dropped})"
    );
    // One event per frame: the damaged frame held the first of them, and the salvage dropped
    // the rest, which follow it.
    let from: u64 = dropped.split("..=").next().unwrap().parse().unwrap();
    assert!(
        note.contains(&format!(
            "`sessionlog recover --salvage` dropped {}..=39, which follow the damaged frame at segment 1 offset",
            from + 1
        )),
        "{note}"
    );
    assert!(
        note.ends_with(&format!("and {from}..={from} were in that frame")),
        "{note}"
    );
}

/// A store with its index intact and one damaged frame in the log (no salvage ran): verify
/// names the seqs the frame held as unreadable, claims no salvage, and its exit code stays 1
/// when the reader closes the pipe before the report.
#[test]
fn verify_of_a_damaged_frame_the_index_covers_names_its_seqs_and_keeps_its_verdict() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = store_with_a_damaged_middle_frame(tmp.path());
    let v = sessionlog(&store, &["verify"]);
    let (out, err) = (stdout(&v), stderr(&v));
    assert_eq!(v.status.code(), Some(1), "{out}{err}");
    assert!(!err.contains("dropped"), "no salvage ran: {err}");
    // One event per frame: the damaged frame held one seq, and the index holds the rest.
    let line = out
        .lines()
        .find(|l| l.contains("are in this damaged frame and cannot be read"))
        .unwrap_or_else(|| panic!("a line naming the lost seqs: {out}"));
    let lost: u64 = line
        .split("seqs ")
        .nth(1)
        .and_then(|r| r.split("..=").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        line.contains(&format!("seqs {lost}..={lost} are in this damaged frame")),
        "{line}"
    );
    assert!(
        line.contains(&format!("holds the {} after them (..=39)", 39 - lost)),
        "{line}"
    );
    // The bad frame, the lost seqs, and the invariant check stopping at them.
    assert!(out.contains("3 problem(s): 1 bad frame(s)"), "{out}");
    // The reader goes away before verify prints: the verdict is still 1.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(["--store"])
        .arg(&store)
        .arg("verify")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    assert_eq!(child.wait().unwrap().code(), Some(1));
}

#[test]
fn verify_of_a_crashed_store_with_a_damaged_frame_names_each_gap_once() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    // A crashed agent's store: 8 sessions' flush groups filling 3 MB with the zeros the
    // writer preallocated after its last frame, nothing indexed, no close.
    let probe = store.to_str().unwrap();
    ok(sessionlog(
        tmp.path(),
        &["bench", "--probe-fill", "3", "--probe-dir", probe],
    ));
    // A frame a third of the way in (well inside the frames): the read-only open fails,
    // and verify opens again skipping it.
    let seg = store.join("segments/00000000000000000001.seg");
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.len() / 3;
    bytes[at] ^= 0x5a;
    std::fs::write(&seg, &bytes).unwrap();
    let v = sessionlog(&store, &["verify"]);
    let (out, err) = (stdout(&v), stderr(&v));
    assert_eq!(v.status.code(), Some(1), "{out}{err}");
    assert!(out.contains("the store does not open normally: corruption at segment 1 offset"));
    let gaps: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("follow a gap left by a bad frame"))
        .collect();
    // One line per session the damaged frame interrupted, never one per event.
    assert!(!gaps.is_empty() && gaps.len() <= 8, "{out}");
    assert!(
        gaps.iter()
            .all(|l| l.contains("seqs ") && l.contains("..=")),
        "{out}"
    );
    assert!(out.lines().count() < 20, "{out}");
    // Nothing was salvaged: verify must not say an earlier salvage dropped the events.
    assert!(!err.contains("dropped them"), "{err}");
    assert!(
        out.contains("`sessionlog recover --salvage` would drop them"),
        "{out}"
    );
}

/// The demo's sizes are checked when the arguments are parsed: no session count that aborts on
/// an allocation (4294967295) and none that fails after the timings (0).
#[test]
fn demo_refuses_sizes_out_of_range_before_running() {
    for args in [
        &["demo", "--sessions", "0"][..],
        &["demo", "--sessions", "4294967295"][..],
        &["demo", "--turns", "0"][..],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("is not in 1..="), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: nothing runs");
    }
}

/// A JSONL session of `turns` turns (two events each), for import tests.
fn turns_jsonl(path: &Path, id: &str, turns: u64) {
    let mut text = format!(
        r#"{{"type":"session","version":0,"id":"{id}","createdAt":1000,"delegationDepth":0}}"#
    );
    text.push('\n');
    for t in 0..turns {
        text.push_str(&format!(
            "{{\"type\":\"turn/start\",\"seq\":{},\"time\":1,\"data\":{{\"turn\":{}}}}}\n",
            2 * t,
            t + 1
        ));
        text.push_str(&format!(
            "{{\"type\":\"turn/end\",\"seq\":{},\"time\":2,\"data\":{{\"turn\":{},\"reason\":{{\"kind\":\"completed\"}}}}}}\n",
            2 * t + 1,
            t + 1
        ));
    }
    std::fs::write(path, text).unwrap();
}

/// Imports racing to create one store: one wins, the others say why they lost (the store is
/// busy, or the session is already there), and none removes what the winner wrote.
#[test]
fn racing_imports_into_a_new_directory_keep_the_winners_store() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("s.jsonl");
    turns_jsonl(&source, "s1", 2000);
    for round in 0..4 {
        let store = tmp.path().join(format!("race-{round}"));
        let children: Vec<_> = (0..5)
            .map(|_| {
                Command::new(env!("CARGO_BIN_EXE_sessionlog"))
                    .arg("--store")
                    .arg(&store)
                    .arg("import")
                    .arg(&source)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut won = 0;
        for child in children {
            let o = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            match o.status.code() {
                Some(0) => won += 1,
                Some(2) => assert!(
                    err.contains("already exists in the store")
                        || err.contains("open for writing in another process"),
                    "round {round}: {err}"
                ),
                other => panic!("round {round}: exit {other:?}: {err}"),
            }
        }
        assert_eq!(won, 1, "round {round}");
        let v: serde_json::Value =
            serde_json::from_str(&ok(sessionlog(&store, &["list", "--json"]))).unwrap();
        assert_eq!(v[0]["events"], 4000, "round {round}: {v}");
        assert!(ok(sessionlog(&store, &["verify"])).contains("clean"));
    }
}

/// A creation cut short before any data (killed, or a full disk) leaves `LOCK` alone in the
/// directory: reads say so and what to run, and an import creates the store there.
#[test]
fn a_directory_left_with_only_lock_is_created_again_by_import() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    std::fs::create_dir(&store).unwrap();
    std::fs::write(store.join("LOCK"), b"").unwrap();
    let o = sessionlog(&store, &["list"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("a creation was interrupted before any data was written; `sessionlog import` creates the store there"),
        "{}",
        stderr(&o)
    );
    let source = tmp.path().join("s.jsonl");
    turns_jsonl(&source, "s1", 3);
    ok(sessionlog(&store, &["import", source.to_str().unwrap()]));
    let v: serde_json::Value =
        serde_json::from_str(&ok(sessionlog(&store, &["list", "--json"]))).unwrap();
    assert_eq!(v[0]["events"], 6);
    // The demo, too, takes such a directory as empty.
    let kept = tmp.path().join("demo");
    std::fs::create_dir(&kept).unwrap();
    std::fs::write(kept.join("LOCK"), b"").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(["demo", "--turns", "1", "--sessions", "1", "--store"])
        .arg(&kept)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(ok(sessionlog(&kept, &["verify"])).contains("clean"));
}

/// An interrupted demo (SIGTERM) removes its temporary stores before it exits.
#[test]
fn a_demo_stopped_by_sigterm_leaves_no_temporary_store() {
    use std::io::BufRead as _;
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(["demo", "--turns", "100000", "--sessions", "2"])
        .env("TMPDIR", tmp.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let temp = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("store: ")
                .and_then(|r| r.split(" (temporary").next().map(str::to_owned))
        })
        .expect("the demo names its temporary store");
    assert!(Path::new(&temp).starts_with(tmp.path()), "{temp}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(Path::new(&temp).exists(), "the demo is still running");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    drop(lines);
    assert_eq!(child.wait().unwrap().code(), Some(143));
    assert!(!Path::new(&temp).exists(), "{temp} is left behind");
}
