//! Readers beside a live writer, as separate processes: `crash-writer` appends with `Sync`
//! durability to several sessions (printing `ack <thread> <seq>` after each durable append)
//! while other processes run `list --json`, `show --json`, `verify` and `show --follow --json`;
//! the writer is SIGKILLed mid-stream and a new one opens the store.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sessionlog_bench::workload::synthetic_event;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sessionlog"))
}

/// Highest acknowledged count (last seq + 1) per writer thread, shared with the ack readers.
type Acks = Arc<Mutex<HashMap<u64, u64>>>;

/// Starts a writer with `threads` sessions (`w0`..); its acks are folded into `acks`.
fn start_writer(store: &Path, threads: u64, acks: &Acks) -> Child {
    let mut child = bin()
        .args([
            "--store",
            store.to_str().unwrap(),
            "crash-writer",
            "--threads",
        ])
        .arg(threads.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let acks = acks.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut parts = line.split_whitespace().skip(1).map(|p| p.parse::<u64>());
            if let (Some(Ok(t)), Some(Ok(seq))) = (parts.next(), parts.next()) {
                let mut acks = acks.lock().unwrap();
                let e = acks.entry(t).or_insert(0);
                *e = (*e).max(seq + 1);
            }
        }
    });
    child
}

fn acked(acks: &Acks, t: u64) -> u64 {
    acks.lock().unwrap().get(&t).copied().unwrap_or(0)
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A `show SESSION --follow --json` process, its stdout lines and stderr lines collected.
struct Follower {
    child: Child,
    out: Arc<Mutex<Vec<String>>>,
    err: Arc<Mutex<Vec<String>>>,
}

fn follow(store: &Path, session: &str) -> Follower {
    let mut child = bin()
        .args([
            "--store",
            store.to_str().unwrap(),
            "show",
            session,
            "--follow",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let collect = |pipe: Box<dyn std::io::Read + Send>| {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        lines
    };
    let out = collect(Box::new(child.stdout.take().unwrap()));
    let err = collect(Box::new(child.stderr.take().unwrap()));
    Follower { child, out, err }
}

impl Drop for Follower {
    /// A failing test leaves no follower running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Follower {
    fn events(&self) -> usize {
        self.out.lock().unwrap().len().saturating_sub(1)
    }
    fn said(&self, text: &str) -> bool {
        self.err.lock().unwrap().iter().any(|l| l.contains(text))
    }
    /// Stops the follower and checks its output: the header line, then the session's events
    /// from seq 0, each exactly once and in order, each the event the writer appended.
    fn finish(mut self, session: &str, t: u64) -> usize {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(50));
        let out = self.out.lock().unwrap();
        let header: serde_json::Value = serde_json::from_str(&out[0]).unwrap();
        assert_eq!(header["type"], "session");
        assert_eq!(header["id"], session);
        // The workload's text holds a lone surrogate escape (dsh keeps it verbatim), which
        // serde_json refuses: the envelope's leading keys are compared as text.
        for (i, line) in out[1..].iter().enumerate() {
            let want = format!(
                "{{\"type\":\"{}\",\"seq\":{i},",
                synthetic_event(i as u64, t).kind
            );
            assert!(
                line.starts_with(&want),
                "{session}: event {i} missing, repeated or out of order: {line}"
            );
        }
        out.len() - 1
    }
}

fn run_json(store: &Path, args: &[&str]) -> serde_json::Value {
    let out = bin()
        .args(["--store", store.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?} exited {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn readers_and_followers_beside_a_writer_that_is_killed_and_replaced() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    let acks: Acks = Arc::default();
    let mut writer = start_writer(&store, 3, &acks);
    wait_for("the first acks", Duration::from_secs(20), || {
        (0..3).all(|t| acked(&acks, t) > 0)
    });
    // Two followers of one session at once, and one of another.
    let followers = [
        ("w0", 0, follow(&store, "w0")),
        ("w0", 0, follow(&store, "w0")),
        ("w1", 1, follow(&store, "w1")),
    ];
    // Every acknowledged event is visible to a reader started after the ack, and counts
    // never go back.
    let mut last = 0u64;
    let start = Instant::now();
    let mut rounds = 0;
    while start.elapsed() < Duration::from_millis(1500) || rounds < 5 {
        let before = acked(&acks, 2);
        let list = run_json(&store, &["list", "--json"]);
        let rows = list.as_array().unwrap();
        assert_eq!(rows.len(), 3, "{list}");
        let show = run_json(&store, &["show", "w2", "--json"]);
        let events = show["events"].as_u64().unwrap();
        assert!(
            events >= before,
            "show saw {events} events of w2, {before} were acknowledged"
        );
        assert!(
            events >= last,
            "w2 went back from {last} to {events} events"
        );
        last = events;
        rounds += 1;
    }
    let verify = bin()
        .args(["--store", store.to_str().unwrap(), "verify"])
        .output()
        .unwrap();
    // The synthetic workload ignores dsh's turn/step rules (exit 1 for those); the log and
    // index checks must pass.
    let report = String::from_utf8_lossy(&verify.stdout);
    assert!(
        matches!(verify.status.code(), Some(0 | 1)) && report.starts_with("checked "),
        "verify beside a writer: {report}{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    for line in report.lines().skip(1) {
        let log_clean = line.contains(" 0 bad frame(s)") && line.contains(" 0 other");
        assert!(
            line.contains(": INV-") || log_clean,
            "verify beside a writer found: {line}"
        );
    }
    // Export beside the writer: every event acknowledged before it started.
    let before = acked(&acks, 2);
    let exported = dir.path().join("w2.jsonl");
    let export = bin()
        .args([
            "--store",
            store.to_str().unwrap(),
            "export",
            "--format",
            "jsonl",
            "--out",
        ])
        .arg(&exported)
        .arg("w2")
        .output()
        .unwrap();
    assert!(
        export.status.success(),
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let lines = std::fs::read_to_string(&exported).unwrap().lines().count() as u64;
    assert!(
        lines > before,
        "the export holds {lines} lines, {before} events were acknowledged"
    );
    // A second writer is refused, in CLI words, naming the writer; no "open read-only".
    let import = bin()
        .args(["--store", store.to_str().unwrap(), "import"])
        .arg(&exported)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&import.stderr);
    assert_eq!(import.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "open for writing in another process (process {})",
            writer.id()
        )) && err.contains(
            "list, show, show --follow, export, verify, du and retain --dry-run work beside it"
        ) && !err.contains("read-only"),
        "{err}"
    );
    // Kill the writer mid-stream: the followers say so, and go on when a new one opens.
    writer.kill().unwrap();
    writer.wait().unwrap();
    for (_, _, f) in &followers {
        wait_for(
            "the followers to report the crash",
            Duration::from_secs(20),
            || f.said("stopped without closing"),
        );
    }
    let mut writer = start_writer(&store, 3, &acks);
    for (_, _, f) in &followers {
        wait_for(
            "the followers to see the new writer",
            Duration::from_secs(20),
            || f.said("a writer opened the store"),
        );
    }
    let resumed = acked(&acks, 0);
    wait_for("appends by the new writer", Duration::from_secs(20), || {
        acked(&acks, 0) > resumed + 50 && acked(&acks, 1) > 50
    });
    writer.kill().unwrap();
    writer.wait().unwrap();
    for (_, t, f) in &followers {
        let want = acked(&acks, *t) as usize;
        wait_for("the followers to catch up", Duration::from_secs(30), || {
            f.events() >= want
        });
    }
    for (session, t, f) in followers {
        let want = acked(&acks, t);
        let got = f.finish(session, t) as u64;
        assert!(
            got >= want,
            "{session}: followed {got} events, {want} acknowledged"
        );
    }
}

/// A small deterministic generator for kill delays.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn readers_never_fail_while_writers_are_killed_at_random_moments() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    let acks: Acks = Arc::default();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writer = start_writer(&store, 2, &acks);
    wait_for("the first acks", Duration::from_secs(20), || {
        acked(&acks, 1) > 0
    });
    let readers: Vec<_> = ["w0", "w1"]
        .into_iter()
        .enumerate()
        .map(|(t, id)| {
            let (store, acks, stop) = (store.clone(), acks.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut last = 0;
                let mut reads = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let before = acked(&acks, t as u64);
                    let v = run_json(&store, &["show", id, "--json"]);
                    let events = v["events"].as_u64().unwrap();
                    assert!(
                        events >= before && events >= last,
                        "{id}: {events} < {before} or {last}"
                    );
                    last = events;
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(20 + next(&mut rng) % 300));
        writer.kill().unwrap();
        writer.wait().unwrap();
        std::thread::sleep(Duration::from_millis(next(&mut rng) % 50));
        writer = start_writer(&store, 2, &acks);
    }
    writer.kill().unwrap();
    writer.wait().unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    // What the readers saw is what the store holds: every acknowledged event, whole.
    let store = sessionlog::store::Store::open_reader(&store).unwrap();
    for t in 0..2 {
        let id = format!("w{t}");
        let n = store.len(&id).unwrap();
        assert!(n >= acked(&acks, t));
        for (i, e) in store.events(&id, 0..n).unwrap().enumerate() {
            assert_eq!(e.unwrap(), synthetic_event(i as u64, t), "{id} seq {i}");
        }
    }
}

#[test]
fn a_reader_beside_an_import_never_fails_and_sees_whole_sessions() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let jsonl = dir.path().join("jsonl");
    {
        let store = sessionlog::store::Store::open(
            &src,
            sessionlog::store::Config::default()
                .durability(sessionlog::store::Durability::Buffered)
                .invariants(sessionlog::session::InvariantMode::Off),
        )
        .unwrap();
        for s in 0..200u64 {
            let id = format!("imp{s}");
            store
                .create_session(sessionlog::event::SessionHeader::new(id.clone(), 1))
                .unwrap();
            for seq in 0..40 {
                store.append(&id, synthetic_event(seq, s)).unwrap();
            }
        }
    }
    let export = bin()
        .args([
            "--store",
            src.to_str().unwrap(),
            "export",
            "--format",
            "jsonl",
            "--out",
        ])
        .arg(&jsonl)
        .output()
        .unwrap();
    assert!(
        export.status.success(),
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let target = dir.path().join("target");
    let mut import = bin()
        .args(["--store", target.to_str().unwrap(), "import"])
        .arg(&jsonl)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lists = 0;
    let mut seen = 0;
    loop {
        let done = import.try_wait().unwrap().is_some();
        if target.join("segments").exists() {
            let list = run_json(&target, &["list", "--json"]);
            let rows = list.as_array().unwrap();
            // Only whole sessions: every listed one has all its events.
            for row in rows {
                assert_eq!(row["events"], 40, "{row}");
            }
            assert!(
                rows.len() >= seen,
                "sessions went back from {seen} to {}",
                rows.len()
            );
            seen = rows.len();
            lists += 1;
        }
        if done {
            break;
        }
    }
    assert!(import.wait().unwrap().success());
    assert_eq!(
        run_json(&target, &["list", "--json"])
            .as_array()
            .unwrap()
            .len(),
        200
    );
    eprintln!("{lists} lists during the import");
}
