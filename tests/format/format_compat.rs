//! Backward compatibility: a store written by this version (segments format 2, index format 3)
//! is checked in under `tests/data/store-s2-i3/` and must open, read and verify the same in
//! every later version (redb's backward-compatibility test is the model). Its expected content
//! is checked in beside it (`expected.txt`, one line per session), so a change that reads old
//! bytes differently fails here.
//!
//! `SESSIONLOG_WRITE_STORE_FIXTURE=1 cargo test --release --test format -- --ignored format_compat`
//! writes the fixture; it is only ever written once per format version.

use std::path::{Path, PathBuf};

use crate::common::read_all;
use sessionlog::event::{Event, SessionHeader, SurfaceOp};
use sessionlog::session::InvariantMode;
use sessionlog::store::{Config, Durability, Store};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/store-s2-i3")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// One line per live session: id, event count, surface, and a CRC of every event's fields.
fn describe(store: &Store) -> String {
    let mut ids: Vec<String> = store.sessions().into_iter().map(|s| s.header.id).collect();
    ids.sort();
    let mut out = String::new();
    for id in ids {
        let events = read_all(store, &id);
        let mut h = crc32fast::Hasher::new();
        for e in &events {
            h.update(
                format!(
                    "{}|{}|{}|{}|{:?}|{:?}|{}\n",
                    e.kind, e.seq, e.time, e.data, e.source_event_seqs, e.surface_op, e.ignorable
                )
                .as_bytes(),
            );
        }
        let surface = store.surface(&id).unwrap();
        let messages = store.messages(&id).unwrap().len();
        out.push_str(&format!(
            "{id} events={} surface={surface:?} messages={messages} crc={:08x}\n",
            events.len(),
            h.finalize()
        ));
    }
    out
}

fn user(seq: u64, text: &str) -> Event {
    Event::new(
        "user/message",
        seq,
        1_767_225_600_000 + seq as i64,
        format!(
            r#"{{"id":"u{seq}","role":"user","content":[{{"type":"text","text":"{text}"}}],"source":{{"kind":"user"}}}}"#
        ),
    )
    .with_surface_op(SurfaceOp::Append)
}

fn chunk(seq: u64, pad: usize) -> Event {
    Event::new(
        "assistant/chunk",
        seq,
        1_767_225_600_000 + seq as i64,
        format!(
            r#"{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"{}"}}}}"#,
            "t".repeat(pad)
        ),
    )
}

#[test]
#[ignore = "writes tests/data/store-s2-i3; run with SESSIONLOG_WRITE_STORE_FIXTURE=1"]
fn write_store_fixture() {
    if std::env::var_os("SESSIONLOG_WRITE_STORE_FIXTURE").is_none() {
        eprintln!(
            "set SESSIONLOG_WRITE_STORE_FIXTURE=1 to write {}",
            fixture().display()
        );
        return;
    }
    let dir = fixture();
    let _ = std::fs::remove_dir_all(&dir);
    let config = Config::default()
        .durability(Durability::Sync)
        .segment_bytes(16 * 1024)
        .max_frame_bytes(4096)
        .max_event_bytes(2048)
        .compress_threshold(usize::MAX)
        .invariants(InvariantMode::Off);
    let store = Store::open(&dir, config).unwrap();
    // Small appends, a multi-frame batch (continued frames across segments), an import,
    // a compaction, a fork and a delete.
    store
        .create_session(SessionHeader::new("plain", 1))
        .unwrap();
    for seq in 0..6 {
        store
            .append("plain", user(seq, &format!("hello {seq}")))
            .unwrap();
    }
    let batch: Vec<Event> = (6..40).map(|s| chunk(s, 900)).collect();
    store.append_batch("plain", batch).unwrap();
    let replace = user(40, "summary")
        .with_surface_op(SurfaceOp::Replace { start: 0, end: 2 })
        .with_sources(vec![0, 1, 2]);
    store.append("plain", replace).unwrap();
    let mut header = SessionHeader::new("imported", 2);
    header.cwd = Some("/home/agent".into());
    let events: Vec<Event> = (0..20).map(|s| user(s, &"i".repeat(300))).collect();
    store.import_session(header, events, None).unwrap();
    store.create_session(SessionHeader::new("gone", 3)).unwrap();
    store.append("gone", user(0, "bye")).unwrap();
    store.close().unwrap();
    let store = Store::open(&dir, Config::default()).unwrap();
    store.fork("plain", None, Some("forked")).unwrap();
    store.delete_session("gone").unwrap();
    store.close().unwrap();
    let _ = std::fs::remove_file(dir.join("LOCK"));
    let store = Store::open(&dir, Config::default().read_only(true)).unwrap();
    std::fs::write(dir.join("expected.txt"), describe(&store)).unwrap();
}

#[test]
fn the_checked_in_store_reads_and_verifies_the_same_forever() {
    let expected = std::fs::read_to_string(fixture().join("expected.txt")).unwrap();
    assert!(expected.lines().count() >= 3, "the fixture has sessions");
    let work = tempfile::tempdir().unwrap();
    copy_dir(&fixture(), work.path());
    let before: Vec<(PathBuf, Vec<u8>)> = walk(work.path());

    // Read-only: the same answers, nothing modified.
    let store = Store::open(work.path(), Config::default().read_only(true)).unwrap();
    assert_eq!(describe(&store), expected);
    assert!(store.verify().unwrap().is_clean());
    drop(store);
    assert_eq!(
        walk(work.path()),
        before,
        "a read-only open modified the store"
    );

    // Read-write: the same answers, verify clean, and it takes new appends.
    let store = Store::open(work.path(), Config::default()).unwrap();
    assert_eq!(describe(&store), expected);
    assert!(store.verify().unwrap().is_clean());
    let n = store.len("plain").unwrap();
    store.append("plain", user(n, "later")).unwrap();
    store.close().unwrap();
    let store = Store::open(work.path(), Config::default()).unwrap();
    assert_eq!(store.len("plain"), Some(n + 1));
}

/// Every file under `dir` with its bytes, sorted (LOCK excluded: opens may create it).
fn walk(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let p = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(p);
            } else if entry.file_name() != "LOCK" {
                out.push((
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}
