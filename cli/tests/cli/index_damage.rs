//! The index is disposable, and readers work on a crashed store (format-spec.md §5, §7, §8):
//! damage anywhere in `index.redb` is either invisible (the answer is the truth) or reported as
//! "index damaged: run `sessionlog recover`", never a panic or a wrong answer; a read-write
//! open with the index check (what `recover` runs) rebuilds it to the exact truth; a read-only
//! open of a store whose writer was killed answers everything acknowledged without modifying a
//! file; `verify` finds an index entry that disagrees with the log.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::SystemTime;

use redb::ReadableTable;
use sessionlog::event::{Event, Seq, SessionHeader};
use sessionlog::index::{KeyBytes, PROJECTIONS, SESSIONS, SessionRow, seal};
use sessionlog::session::InvariantMode;
use sessionlog::store::{Config, Durability, Intent, Session, Store};
use sessionlog::typed::Raw;

fn user(id: &str, text: &str) -> String {
    format!(
        r#"{{"id":"{id}","role":"user","content":[{{"type":"text","text":"{text}"}}],"source":{{"kind":"user"}}}}"#
    )
}

fn assistant(turn: u64, id: &str, call: &str) -> String {
    format!(
        r#"{{"turn":{turn},"step":1,"message":{{"id":"{id}","role":"assistant","content":[{{"type":"text","text":"looking"}},{{"type":"tool-call","id":"{call}","name":"bash","arguments":"{{}}"}}],"source":{{"kind":"model","provider":"p","model":"m"}}}}}}"#
    )
}

fn tool_result(turn: u64, call: &str) -> String {
    format!(
        r#"{{"turn":{turn},"step":1,"message":{{"id":"r-{call}","role":"user","content":[{{"type":"tool-result","toolCallId":"{call}","content":[{{"type":"text","text":"ok"}}]}}],"source":{{"kind":"tool","callId":"{call}"}}}}}}"#
    )
}

/// One complete dsh turn with a tool call and `chunks` chunk deltas.
fn turn(s: &Session<'_>, t: u64, chunks: u64) {
    let p = s.id().to_owned();
    s.append(Raw::new(
        "turn/start",
        format!(r#"{{"turn":{t}}}"#),
        Intent::none(),
    ))
    .unwrap();
    s.append(Raw::new(
        "step/start",
        format!(r#"{{"turn":{t},"step":1}}"#),
        Intent::none(),
    ))
    .unwrap();
    s.append(Raw::new(
        "user/message",
        user(&format!("{p}-u{t}"), &format!("question {t}")),
        Intent::append(),
    ))
    .unwrap();
    for i in 0..chunks {
        s.append(Raw::new("assistant/chunk", format!(
                r#"{{"turn":{t},"step":1,"chunk":{{"type":"text-delta","index":0,"text":"tok{i}"}}}}"#
            ), Intent::none()))
        .unwrap();
    }
    let call = format!("{p}-c{t}");
    s.append(Raw::new(
        "assistant/message",
        assistant(t, &format!("{p}-a{t}"), &call),
        Intent::append(),
    ))
    .unwrap();
    s.append(Raw::new(
        "tool/call",
        format!(r#"{{"turn":{t},"step":1,"callId":"{call}","name":"bash","arguments":"{{}}"}}"#),
        Intent::none(),
    ))
    .unwrap();
    s.append(Raw::new(
        "tool/result",
        tool_result(t, &call),
        Intent::append(),
    ))
    .unwrap();
    s.append(Raw::new(
        "step/end",
        format!(r#"{{"turn":{t},"step":1}}"#),
        Intent::none(),
    ))
    .unwrap();
    s.append(Raw::new(
        "turn/end",
        format!(r#"{{"turn":{t},"reason":{{"kind":"completed"}}}}"#),
        Intent::none(),
    ))
    .unwrap();
}

/// Replaces every surface node but the last with a summary (a compaction).
fn compact(s: &Session<'_>) {
    let surface = s.surface().unwrap();
    let shadowed: Vec<Seq> = surface[..surface.len() - 1].to_vec();
    let (start, end) = (shadowed[0], *shadowed.last().unwrap());
    s.append(Raw::new(
        "user/message",
        user(&format!("{}-sum{}", s.id(), s.len()), "summary"),
        Intent::replace(start, end).sources(shadowed),
    ))
    .unwrap();
}

fn config() -> Config {
    Config::default()
        .durability(Durability::Buffered)
        .segment_bytes(16 * 1024)
}

fn read_only() -> Config {
    config().read_only(true)
}

/// Sessions with several turns, a compaction, forks (one of a deleted parent, so its row is
/// pinned) and a purged session, written over several frames and segments, then closed.
fn build(dir: &Path) {
    let store = Store::open(dir, config()).unwrap();
    for name in ["s0", "s1", "s2", "s3"] {
        let s = store
            .create(SessionHeader::new(name, 1_767_225_600_000))
            .unwrap();
        for t in 1..=3 {
            turn(&s, t, 3);
            store.flush().unwrap();
        }
    }
    compact(&store.session("s1").unwrap());
    turn(&store.session("s1").unwrap(), 4, 2);
    let child = store.fork("s1", None, Some("s1-fork")).unwrap();
    turn(&child, 5, 1);
    compact(&child);
    store.fork("s3", None, Some("s3-fork")).unwrap();
    store.delete_session("s3").unwrap();
    store.delete_session("s2").unwrap();
    turn(&store.session("s3-fork").unwrap(), 4, 4);
    store.close().unwrap();
}

/// One session as read: events, surface, replace generation, counters, projection views.
type SessionView = (Vec<Event>, Vec<Seq>, u64, String, Vec<(String, String)>);

/// Everything a reader can ask, per session.
#[derive(Debug, Clone, PartialEq)]
struct Snapshot {
    sessions: Vec<String>,
    per_session: BTreeMap<String, SessionView>,
}

fn observe(store: &Store) -> Result<Snapshot, String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let infos = store.sessions();
    let listed = store.list().map_err(|x| e(&x))?;
    let mut per_session = BTreeMap::new();
    for (info, l) in infos.iter().zip(&listed) {
        let id = info.header.id.clone();
        let events = store
            .events(&id, 0..info.event_count)
            .map_err(|x| e(&x))?
            .collect::<Result<Vec<Event>, _>>()
            .map_err(|x| e(&x))?;
        let surface = store.surface(&id).map_err(|x| e(&x))?;
        let messages = store.messages(&id).map_err(|x| e(&x))?;
        let counters = format!(
            "{} {} {} {} {}",
            info.event_count,
            info.data_bytes,
            info.last_time,
            info.surface_len,
            info.replace_generation
        );
        per_session.insert(
            id,
            (
                events,
                surface,
                store
                    .replace_generation(&info.header.id)
                    .map_err(|x| e(&x))?,
                format!("{counters} {}", messages.len()),
                l.views.clone(),
            ),
        );
    }
    Ok(Snapshot {
        sessions: infos.iter().map(|i| i.header.id.clone()).collect(),
        per_session,
    })
}

/// Opens and observes, turning a panic into an `Err` naming it.
fn open_and_observe(dir: &Path, config: Config) -> Result<(Snapshot, Option<String>), String> {
    match catch_unwind(AssertUnwindSafe(|| {
        let store = Store::open(dir, config).map_err(|e| e.to_string())?;
        let pending = store.recovery_report().recovery_pending.clone();
        Ok((observe(&store)?, pending))
    })) {
        Ok(r) => r,
        Err(p) => Err(format!(
            "PANIC: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

/// Every file of the store: (relative path, bytes, mtime).
fn files(dir: &Path) -> Vec<(String, Vec<u8>, SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((
                    path.strip_prefix(dir).unwrap().display().to_string(),
                    std::fs::read(&path).unwrap(),
                    entry.metadata().unwrap().modified().unwrap(),
                ));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn copy_store(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.join("segments")).unwrap();
    for (rel, bytes, _) in files(from) {
        std::fs::write(to.join(rel), bytes).unwrap();
    }
}

/// A tiny deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

use crate::serial;

fn is_damage_report(e: &str) -> bool {
    e.contains("index damaged") && e.contains("sessionlog recover")
}

#[test]
fn flipped_bytes_anywhere_in_the_index_give_the_truth_or_a_damage_error_and_recover_rebuilds_it() {
    let _serial = serial();
    let base = tempfile::tempdir().unwrap();
    let clean = base.path().join("clean");
    build(&clean);
    let (truth, pending) = open_and_observe(&clean, read_only()).unwrap();
    assert_eq!(pending, None, "a cleanly closed store needs no recovery");
    assert_eq!(truth.sessions, ["s0", "s1", "s1-fork", "s3-fork"]);
    let original = std::fs::read(clean.join("index.redb")).unwrap();
    let len = original.len() as u64;
    // DAMAGE_SEED=<n> runs another sequence of damage.
    let seed = std::env::var("DAMAGE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1dea);
    let mut rng = Rng(seed);
    let (mut equal, mut reported, mut rebuilt) = (0, 0, 0);
    let dir = base.path().join("damaged");
    for round in 0..300 {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
        copy_store(&clean, &dir);
        let mut bytes = original.clone();
        let flips = 1 + rng.below(4);
        let mut at = Vec::new();
        for _ in 0..flips {
            // A third of the flips hit the first 4 KiB (redb's header and commit slots).
            let pos = if rng.below(3) == 0 {
                rng.below(4096.min(len))
            } else {
                rng.below(len)
            } as usize;
            bytes[pos] ^= 1 + rng.below(255) as u8;
            at.push(pos);
        }
        std::fs::write(dir.join("index.redb"), &bytes).unwrap();
        match open_and_observe(&dir, read_only()) {
            Ok((seen, _)) => {
                assert_eq!(
                    seen, truth,
                    "round {round}: flips at {at:?} changed an answer"
                );
                equal += 1;
            }
            Err(e) => {
                assert!(
                    is_damage_report(&e),
                    "round {round}: flips at {at:?}: not a damage report: {e}"
                );
                reported += 1;
            }
        }
        assert_eq!(
            std::fs::read(dir.join("index.redb")).unwrap(),
            bytes,
            "round {round}: a read-only open modified index.redb"
        );
        // A plain read-write open: the truth, or damage reported on read.
        if round % 3 == 0 {
            match open_and_observe(&dir, config()) {
                Ok((seen, _)) => assert_eq!(seen, truth, "round {round}: flips at {at:?}"),
                Err(e) => assert!(is_damage_report(&e), "round {round}: flips at {at:?}: {e}"),
            }
        }
        // What `sessionlog recover` runs: the index is checked whole and rebuilt if damaged.
        let checked = config().check_index(true);
        let store = catch_unwind(AssertUnwindSafe(|| Store::open(&dir, checked)))
            .unwrap_or_else(|_| panic!("round {round}: flips at {at:?}: open panicked"))
            .unwrap_or_else(|e| panic!("round {round}: flips at {at:?}: {e}"));
        rebuilt += usize::from(store.recovery_report().index_rebuilt);
        assert_eq!(
            observe(&store),
            Ok(truth.clone()),
            "round {round}: flips at {at:?}: recover did not restore the truth"
        );
        let report = store.verify().unwrap();
        assert!(report.is_clean(), "round {round}: {report:?}");
        store.close().unwrap();
        let (seen, pending) = open_and_observe(&dir, read_only()).unwrap();
        assert_eq!(seen, truth, "round {round}");
        assert_eq!(pending, None, "round {round}");
    }
    eprintln!(
        "300 damaged indexes: {equal} read right, {reported} reported damage, {rebuilt} rebuilt by the checked open"
    );
    assert!(
        rebuilt > 0 && equal > 0,
        "the rounds did not exercise both outcomes"
    );
}

#[test]
fn truncated_zero_length_and_wrong_magic_indexes_are_rebuilt() {
    let _serial = serial();
    let base = tempfile::tempdir().unwrap();
    let clean = base.path().join("clean");
    build(&clean);
    let (truth, _) = open_and_observe(&clean, read_only()).unwrap();
    let original = std::fs::read(clean.join("index.redb")).unwrap();
    let mut magic = original.clone();
    magic[0..9].copy_from_slice(b"NOTREDB!!");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("zero-length", Vec::new()),
        ("100 bytes", original[..100].to_vec()),
        ("4 KiB", original[..4096].to_vec()),
        ("half", original[..original.len() / 2].to_vec()),
        ("one byte short", original[..original.len() - 1].to_vec()),
        ("wrong magic", magic),
    ];
    for (name, bytes) in cases {
        let dir = base.path().join(name.replace(' ', "-"));
        copy_store(&clean, &dir);
        std::fs::write(dir.join("index.redb"), &bytes).unwrap();
        let before = files(&dir);
        match open_and_observe(&dir, read_only()) {
            Ok((seen, pending)) => {
                assert_eq!(seen, truth, "{name}");
                assert!(pending.is_some(), "{name}: recovery pending not reported");
            }
            Err(e) => assert!(is_damage_report(&e), "{name}: {e}"),
        }
        assert_eq!(
            files(&dir),
            before,
            "{name}: a read-only open modified the store"
        );
        let store =
            Store::open(&dir, config().check_index(true)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let report = store.recovery_report().clone();
        if !bytes.is_empty() {
            assert!(report.index_rebuilt, "{name}: {report:?}");
            assert!(
                report
                    .rebuild_reason
                    .as_deref()
                    .is_some_and(|r| r.contains("index damaged")),
                "{name}: {report:?}"
            );
        }
        assert_eq!(observe(&store), Ok(truth.clone()), "{name}");
        assert!(store.verify().unwrap().is_clean(), "{name}");
        store.close().unwrap();
        // A plain read-write open rebuilds too (redb refuses the file, or panics on it).
        std::fs::write(dir.join("index.redb"), &bytes).unwrap();
        let (seen, _) = open_and_observe(&dir, config()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(seen, truth, "{name}");
    }
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_sessionlog")
}

/// Runs `sessionlog --store dir args..`: (exit code, stdout, stderr).
fn cli(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin())
        .arg("--store")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Starts `sessionlog crash-writer`, waits for `acks` acknowledged appends, kills it with
/// SIGKILL. Returns the last acknowledged seq per thread.
fn killed_writer(dir: &Path, threads: u64, acks: usize) -> BTreeMap<u64, Seq> {
    use std::io::BufRead;
    let mut child = Command::new(bin())
        .arg("--store")
        .arg(dir)
        .args(["crash-writer", "--threads", &threads.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut acked = BTreeMap::new();
    let mut lines = std::io::BufReader::new(stdout).lines();
    for _ in 0..acks {
        let line = lines.next().unwrap().unwrap();
        let mut parts = line.split_whitespace().skip(1);
        let t: u64 = parts.next().unwrap().parse().unwrap();
        let seq: Seq = parts.next().unwrap().parse().unwrap();
        acked.insert(t, seq);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Acks printed after the last one read may exist too; the ones read are a lower bound.
    acked
}

#[test]
fn a_read_only_open_of_a_killed_writers_store_answers_everything_acknowledged_and_changes_nothing()
{
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let mut acked = BTreeMap::new();
    for round in 0..3 {
        for (t, seq) in killed_writer(&store_dir, 3, 300 + 200 * round) {
            acked.insert(t, seq);
        }
        let before = files(&store_dir);
        let store = Store::open(&store_dir, read_only()).unwrap();
        let pending = store.recovery_report().recovery_pending.clone();
        assert!(
            pending.is_some(),
            "round {round}: no recovery pending reported"
        );
        for (&t, &last) in &acked {
            let id = format!("w{t}");
            let n = store.len(&id).unwrap();
            assert!(
                n > last,
                "round {round}: {id} has {n} events, seq {last} was acknowledged"
            );
            let events: Vec<Event> = store
                .events(&id, 0..n)
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            for (seq, e) in events.iter().enumerate() {
                assert_eq!(
                    *e,
                    sessionlog_bench::workload::synthetic_event(seq as u64, t),
                    "round {round}: {id} seq {seq}"
                );
            }
        }
        assert!(store.list().is_ok());
        drop(store);
        assert_eq!(
            files(&store_dir),
            before,
            "round {round}: a read-only open modified the store"
        );
        // The CLI's read commands answer too, with the note.
        let (code, out, err) = cli(&store_dir, &["list"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("w0"), "{out}");
        assert!(err.contains("recovery is pending"), "{err}");
        let (code, _, err) = cli(&store_dir, &["show", "w1", "--events"]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            files(&store_dir),
            before,
            "round {round}: the CLI modified the store"
        );
    }
    // The next read-write open repairs; then nothing is pending.
    let (code, out, err) = cli(&store_dir, &["recover"]);
    assert_eq!(code, 0, "{out}{err}");
    let store = Store::open(&store_dir, read_only()).unwrap();
    assert_eq!(store.recovery_report().recovery_pending, None);
    assert!(store.verify().unwrap().problems.is_empty());
    let (code, _, err) = cli(&store_dir, &["list"]);
    assert_eq!(code, 0);
    assert!(!err.contains("recovery is pending"), "{err}");
}

#[test]
fn an_abandoned_store_reads_the_same_read_only_and_after_repair() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        Config::default()
            .durability(Durability::Sync)
            .invariants(InvariantMode::Off),
    )
    .unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    let written: Vec<Event> = (0..200)
        .map(|s| sessionlog_bench::workload::synthetic_event(s, 0))
        .collect();
    for e in &written {
        store.append("a", e.clone()).unwrap();
    }
    // Dropped without a close: redb still closes its file, so unlike a killed process (the
    // test above) this may need no repair; the answers must be the same either way.
    store.abandon();
    let before = files(dir.path());
    let store = Store::open(dir.path(), read_only()).unwrap();
    let got: Vec<Event> = store
        .events("a", 0..200)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got, written);
    assert!(store.verify().unwrap().problems.is_empty());
    drop(store);
    assert_eq!(files(dir.path()), before);
}

/// Rewrites a `sessions` row in the index with a valid CRC (a wrong value redb and the CRC
/// cannot tell from a right one).
fn rewrite_row(dir: &Path, number: u64, change: impl Fn(&mut SessionRow)) {
    let db = redb::Database::open(dir.join("index.redb")).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut t = txn.open_table(SESSIONS).unwrap();
        let stored = t.get(number).unwrap().unwrap().value().to_vec();
        let mut row = SessionRow::decode(&stored[..stored.len() - 4]).unwrap();
        change(&mut row);
        let key = KeyBytes::number(number);
        t.insert(number, seal(&key, &row.encode()).as_slice())
            .unwrap();
    }
    txn.commit().unwrap();
}

#[test]
fn verify_reports_an_index_entry_that_disagrees_with_the_log() {
    let _serial = serial();
    let base = tempfile::tempdir().unwrap();
    let clean = base.path().join("clean");
    build(&clean);
    let store = Store::open(&clean, read_only()).unwrap();
    assert!(store.verify().unwrap().is_clean());
    drop(store);

    // A row whose counter is off (CRC valid): reads would believe it.
    let dir = base.path().join("row");
    copy_store(&clean, &dir);
    rewrite_row(&dir, 1, |r| r.data_bytes += 7);
    for config in [read_only(), config()] {
        let store = Store::open(&dir, config).unwrap();
        let report = store.verify().unwrap();
        assert_eq!(report.problems.len(), 1, "{report:?}");
        assert!(
            report.problems[0].contains("index disagrees with the log at sessions")
                && report.problems[0].contains("sessionlog recover"),
            "{report:?}"
        );
    }
    let (code, out, _) = cli(&dir, &["verify"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("index disagrees with the log"), "{out}");
    let (code, _, err) = cli(&dir, &["recover"]);
    assert_eq!(code, 0, "{err}");
    // A row that passes its CRC is not rebuilt by recover; verify still names it, and a
    // rebuild (deleting the index) clears it.
    std::fs::remove_file(dir.join("index.redb")).unwrap();
    let store = Store::open(&dir, config()).unwrap();
    assert!(store.verify().unwrap().is_clean());
    drop(store);

    // A surface summary that does not match the links.
    let dir = base.path().join("surface");
    copy_store(&clean, &dir);
    rewrite_row(&dir, 2, |r| r.surface_len += 1);
    let store = Store::open(&dir, read_only()).unwrap();
    let report = store.verify().unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("index disagrees with the log at surface")),
        "{report:?}"
    );
}

#[test]
fn cli_reads_of_a_damaged_index_exit_2_with_advice_never_101() {
    let _serial = serial();
    let base = tempfile::tempdir().unwrap();
    let clean = base.path().join("clean");
    build(&clean);
    let (code, truth, err) = cli(&clean, &["list", "--json"]);
    assert_eq!(code, 0, "{err}");
    // A projection checkpoint whose CRC fails: `list` reads it and reports the damage.
    let dir = base.path().join("bad-crc");
    copy_store(&clean, &dir);
    {
        let db = redb::Database::open(dir.join("index.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(PROJECTIONS).unwrap();
            let key = (1u64, "title");
            let mut v = t.get(key).unwrap().unwrap().value().to_vec();
            v[0] ^= 0x40;
            t.insert(key, v.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let (code, out, err) = cli(&dir, &["list", "--json"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(is_damage_report(&err), "{err}");
    let (code, out, err) = cli(&dir, &["recover"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("index rebuilt from the log"), "{out}");
    let (code, out, _) = cli(&dir, &["list", "--json"]);
    assert_eq!((code, out), (0, truth.clone()));

    // Random damage: exit 0 with the truth, or 2 with the advice; never 101.
    let original = std::fs::read(clean.join("index.redb")).unwrap();
    let mut rng = Rng(42);
    let dir = base.path().join("random");
    for round in 0..40 {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
        copy_store(&clean, &dir);
        let mut bytes = original.clone();
        for _ in 0..1 + rng.below(3) {
            let pos = rng.below(bytes.len() as u64) as usize;
            bytes[pos] ^= 1 + rng.below(255) as u8;
        }
        std::fs::write(dir.join("index.redb"), &bytes).unwrap();
        for args in [
            &["list", "--json"][..],
            &["show", "s1", "--events", "--json"][..],
        ] {
            let (code, out, err) = cli(&dir, args);
            match code {
                0 if args[0] == "list" => assert_eq!(out, truth, "round {round}"),
                0 => {}
                2 => assert!(is_damage_report(&err), "round {round}: {err}"),
                _ => panic!("round {round}: {args:?} exited {code}: {err}"),
            }
        }
        // verify reports damage once per kind: a damaged table fails every lookup the same
        // way, and that is one line, not one per event.
        let (code, out, err) = cli(&dir, &["verify"]);
        assert!(
            matches!(code, 0..=2),
            "round {round}: verify exited {code}: {err}"
        );
        let mut lines: Vec<&str> = out.lines().filter(|l| l.starts_with("log: ")).collect();
        let n = lines.len();
        lines.sort_unstable();
        lines.dedup();
        assert_eq!(lines.len(), n, "round {round}: repeated lines:\n{out}");
        let (code, _, err) = cli(&dir, &["recover"]);
        assert_eq!(code, 0, "round {round}: {err}");
        let (code, out, _) = cli(&dir, &["list", "--json"]);
        assert_eq!((code, &out), (0, &truth), "round {round}");
    }
}

/// format-spec.md §5: every value ends with the CRC-32 of key bytes ‖ value bytes.
#[test]
fn stored_values_carry_the_crc_the_spec_describes() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let db = redb::ReadOnlyDatabase::open(dir.path().join("index.redb")).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let meta = txn.open_table(sessionlog::index::META).unwrap();
    let v = meta
        .get("format_version")
        .unwrap()
        .unwrap()
        .value()
        .to_vec();
    let mut crc = crc32fast::Hasher::new();
    crc.update(b"format_version");
    crc.update(&4u32.to_le_bytes());
    let mut want = 4u32.to_le_bytes().to_vec();
    want.extend_from_slice(&crc.finalize().to_le_bytes());
    assert_eq!(v, want);
    let rows = txn.open_table(SESSIONS).unwrap();
    let v = rows.get(1).unwrap().unwrap().value().to_vec();
    let (payload, stored) = v.split_at(v.len() - 4);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&1u64.to_le_bytes());
    crc.update(payload);
    assert_eq!(stored, crc.finalize().to_le_bytes());
    assert_eq!(SessionRow::decode(payload).unwrap().header.id, "s0");
}

#[test]
fn read_commands_on_a_directory_that_is_no_store_create_nothing() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    for args in [&["list"][..], &["verify"][..], &["show", "x"][..]] {
        let (code, _, err) = cli(dir.path(), args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("not a sessionlog store"), "{args:?}: {err}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{args:?} created a file"
        );
    }
    assert!(Store::open(dir.path(), read_only()).is_err());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// Regression (found by `DAMAGE_SEED=35`, round 72: a flip in redb's header made redb fall
/// back to a root without the `sessions` table): a table missing from an index of this
/// version is damage; a read-write open used to create it empty and list no sessions.
#[test]
fn a_missing_table_is_damage_not_an_empty_table() {
    let _serial = serial();
    let base = tempfile::tempdir().unwrap();
    let clean = base.path().join("clean");
    build(&clean);
    let (truth, _) = open_and_observe(&clean, read_only()).unwrap();
    for table in ["sessions", "events", "meta"] {
        let dir = base.path().join(table);
        copy_store(&clean, &dir);
        {
            let db = redb::Database::open(dir.join("index.redb")).unwrap();
            let txn = db.begin_write().unwrap();
            let def: redb::TableDefinition<u64, u64> = redb::TableDefinition::new(table);
            assert!(txn.delete_table(def).unwrap());
            txn.commit().unwrap();
        }
        let (seen, pending) = open_and_observe(&dir, read_only()).unwrap();
        assert_eq!(seen, truth, "{table}");
        assert!(
            pending
                .as_deref()
                .is_some_and(|p| p.contains("index damaged")),
            "{table}: {pending:?}"
        );
        let store = Store::open(&dir, config()).unwrap();
        assert!(store.recovery_report().index_rebuilt, "{table}");
        assert_eq!(observe(&store), Ok(truth.clone()), "{table}");
    }
}
