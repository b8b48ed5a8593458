//! Backward compatibility: a store written by each format version (segments 2 / index 3 under
//! `tests/data/store-s2-i3/`, segments 3 / index 4 with verbatim sessions under
//! `tests/data/store-s3-i4/`, and compacted segments (version 4, the GC's) beside version 3
//! ones with the live-reader position file `ACKED` under `tests/data/store-s4-i4/`, and the
//! same at segments 5 / 6, its frames compressed with the built-in dictionary, under
//! `tests/data/store-s6-i4/`, and at segments 7 / 8, its events lean records, under
//! `tests/data/store-s8-i4/`, and at segments 9 / 10, its frames compressed with dictionary
//! 2, under `tests/data/store-s10-i4/`) is checked in and must open, read and verify the same in every
//! later version (redb's backward-compatibility test is the model). Its expected content is
//! checked in beside it (`expected.txt`, one line per session), so a change that reads old
//! bytes differently fails here.
//!
//! `SESSIONLOG_WRITE_STORE_FIXTURE=1 cargo test --release --test format -- --ignored format_compat`
//! writes the current version's fixture; it is only ever written once per format version.

use std::path::{Path, PathBuf};

use crate::common::read_all;
use sessionlog::event::{Event, SessionHeader, SurfaceOp};
use sessionlog::session::InvariantMode;
use sessionlog::store::{Config, Durability, GcOptions, Store};

/// Every checked-in fixture, oldest first; the last is the current format version's.
const FIXTURES: [&str; 6] = [
    "store-s2-i3",
    "store-s3-i4",
    "store-s4-i4",
    "store-s6-i4",
    "store-s8-i4",
    "store-s10-i4",
];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
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
        let surface = store
            .surface(&id)
            .map_or_else(|_| "refused".to_owned(), |s| format!("{s:?}"));
        // A verbatim session that dsh's load refuses has no messages.
        let messages = store
            .messages(&id)
            .map_or_else(|_| "refused".to_owned(), |m| m.len().to_string());
        out.push_str(&format!(
            "{id} events={} surface={surface} messages={messages} crc={:08x}\n",
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
            letters(seq, pad)
        ),
    )
}

/// `n` pseudo-random lowercase letters (seeded by `seed`): text zstd shrinks by about a
/// third only, so the fixture's compressed segments still fill and roll over.
fn letters(seed: u64, n: usize) -> String {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect()
}

#[test]
#[ignore = "writes tests/data/store-s10-i4; run with SESSIONLOG_WRITE_STORE_FIXTURE=1"]
fn write_store_fixture() {
    let dir = fixture(FIXTURES[FIXTURES.len() - 1]);
    if std::env::var_os("SESSIONLOG_WRITE_STORE_FIXTURE").is_none() {
        eprintln!(
            "set SESSIONLOG_WRITE_STORE_FIXTURE=1 to write {}",
            dir.display()
        );
        return;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let config = Config::default()
        .durability(Durability::Sync)
        .segment_bytes(16 * 1024)
        .max_frame_bytes(4096)
        .max_event_bytes(2048)
        .invariants(InvariantMode::Off);
    let store = Store::open(&dir, config.clone()).unwrap();
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
    // Verbatim sessions (segments 3): one dsh's load accepts, one it refuses (a message
    // without its surfaceOp, a retired shape), and a verbatim fork of the latter.
    let ok: Vec<Event> = (0..3).map(|s| user(s, "verbatim")).collect();
    store
        .create_verbatim(SessionHeader::new("verbatim-ok", 4), ok)
        .unwrap();
    let odd = vec![
        Event::new("user/message", 0, 5, r#"{"id":"u","role":"user"}"#),
        Event::new("mode/set", 1, -5, r#"{"mode":"plan","n":1.50}"#),
    ];
    store
        .create_verbatim(SessionHeader::new("verbatim-odd", 5), odd)
        .unwrap();
    let mut child = SessionHeader::new("verbatim-fork", 6);
    child.parent_session = Some("verbatim-odd".into());
    child.seed_length = Some(1);
    store.fork_verbatim("verbatim-odd", child, 1).unwrap();
    store.close().unwrap();
    let store = Store::open(&dir, config).unwrap();
    store.fork("plain", None, Some("forked")).unwrap();
    store.delete_session("gone").unwrap();
    // The GC (segments 4): a parent deleted under its fork (pinned, kept), purged sessions
    // whose records are dropped, then every sealed segment compacted.
    store.fork("imported", None, Some("imported-fork")).unwrap();
    store.delete_session("imported").unwrap();
    for k in 0..4 {
        let id = format!("scratch-{k}");
        store
            .create_session(SessionHeader::new(&id, 7 + k))
            .unwrap();
        let events: Vec<Event> = (0..12).map(|s| user(s, &letters(s + 100, 1500))).collect();
        store.append_batch(&id, events).unwrap();
    }
    for k in 0..3 {
        store.delete_session(&format!("scratch-{k}")).unwrap();
    }
    // Enough after the deletes that their segments are sealed.
    let batch: Vec<Event> = (41..61).map(|s| chunk(s, 1500)).collect();
    store.append_batch("plain", batch).unwrap();
    let report = store
        .gc(GcOptions::default().live_fraction(1.0), &mut |_, _| {})
        .unwrap();
    assert!(
        !report.compacted.is_empty() && report.records_dropped > 0,
        "the fixture has compacted segments: {report:?}"
    );
    store.close().unwrap();
    let _ = std::fs::remove_file(dir.join("LOCK"));
    let store = Store::open(&dir, Config::default().read_only(true)).unwrap();
    std::fs::write(dir.join("expected.txt"), describe(&store)).unwrap();
}

#[test]
fn the_checked_in_stores_read_and_verify_the_same_forever() {
    for name in FIXTURES {
        check_fixture(name);
    }
}

fn check_fixture(name: &str) {
    let expected = std::fs::read_to_string(fixture(name).join("expected.txt")).unwrap();
    assert!(expected.lines().count() >= 3, "the fixture has sessions");
    let work = tempfile::tempdir().unwrap();
    copy_dir(&fixture(name), work.path());
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
    drop(store);

    // The index is derived: rebuilt from the fixture's log alone, the same answers.
    let rebuilt = tempfile::tempdir().unwrap();
    copy_dir(&fixture(name), rebuilt.path());
    std::fs::remove_file(rebuilt.path().join("index.redb")).unwrap();
    let store = Store::open(rebuilt.path(), Config::default()).unwrap();
    assert_eq!(describe(&store), expected, "{name}: rebuilt from the log");
    assert!(store.verify().unwrap().is_clean());
}

/// The segment format version in each segment header of fixture `name`.
fn segment_versions(name: &str) -> Vec<u32> {
    segment_files(name).into_iter().map(|(v, _)| v).collect()
}

/// Every segment file of fixture `name` in log order: its header's version and its bytes.
fn segment_files(name: &str) -> Vec<(u32, Vec<u8>)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixture(name).join("segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (u32::from_le_bytes(bytes[8..12].try_into().unwrap()), bytes)
        })
        .collect()
}

#[test]
fn each_fixture_holds_the_segment_versions_it_stands_for() {
    assert!(segment_versions("store-s2-i3").contains(&2));
    assert!(segment_versions("store-s3-i4").contains(&3));
    let s4 = segment_versions("store-s4-i4");
    assert!(s4.contains(&4), "compacted segments: {s4:?}");
    assert!(s4.contains(&3), "and a segment the GC left alone: {s4:?}");
    assert!(fixture("store-s4-i4").join("ACKED").exists());
    let s6 = segment_versions("store-s6-i4");
    assert!(s6.contains(&6), "compacted segments: {s6:?}");
    assert!(s6.contains(&5), "and a segment the GC left alone: {s6:?}");
    assert!(fixture("store-s6-i4").join("ACKED").exists());
    let flags = frame_flags("store-s6-i4");
    let dictionary = sessionlog::log::frame::FLAG_DICTIONARY;
    assert!(
        flags.iter().any(|f| f & dictionary != 0),
        "frames compressed with the dictionary: {flags:?}"
    );
    for old in ["store-s2-i3", "store-s3-i4", "store-s4-i4"] {
        assert!(frame_flags(old).iter().all(|f| f & dictionary == 0));
    }
    let s8 = segment_versions("store-s8-i4");
    assert!(s8.contains(&8), "compacted segments: {s8:?}");
    assert!(s8.contains(&7), "and a segment the GC left alone: {s8:?}");
    assert!(!s8.contains(&5) && !s8.contains(&6), "{s8:?}");
    assert!(fixture("store-s8-i4").join("ACKED").exists());
    // Its events are lean records, EventNext ones among them (also in compacted segments),
    // and the older fixtures hold none.
    let tags = event_tags("store-s8-i4");
    assert!(tags.contains(&(7, 5)) && tags.contains(&(7, 6)), "{tags:?}");
    assert!(tags.contains(&(8, 6)), "{tags:?}");
    assert!(tags.iter().all(|&(_, t)| t != 1), "{tags:?}");
    for old in ["store-s2-i3", "store-s3-i4", "store-s4-i4", "store-s6-i4"] {
        assert!(event_tags(old).iter().all(|&(_, t)| t == 1), "{old}");
    }
    // Segments 9 and 10: lean records, small frames compressed with dictionary 2 (in the
    // compacted segments too), and no frame of dictionary 1; the older fixtures hold none of
    // dictionary 2.
    let s10 = segment_versions("store-s10-i4");
    assert!(s10.contains(&10), "compacted segments: {s10:?}");
    assert!(s10.contains(&9), "and a segment the GC left alone: {s10:?}");
    assert!(s10.iter().all(|v| *v == 9 || *v == 10), "{s10:?}");
    assert!(fixture("store-s10-i4").join("ACKED").exists());
    let tags = event_tags("store-s10-i4");
    assert!(tags.contains(&(9, 5)) && tags.contains(&(9, 6)), "{tags:?}");
    assert!(tags.contains(&(10, 5)), "{tags:?}");
    let two = sessionlog::log::frame::FLAG_DICTIONARY_2;
    let by_version = frame_flags_by_version("store-s10-i4");
    for version in [9, 10] {
        assert!(
            by_version
                .iter()
                .any(|&(v, f)| v == version && f & two != 0),
            "dictionary-2 frames in version {version}: {by_version:?}"
        );
    }
    assert!(by_version.iter().all(|&(_, f)| f & dictionary == 0));
    for old in FIXTURES.iter().filter(|f| **f != "store-s10-i4") {
        assert!(frame_flags(old).iter().all(|f| f & two == 0), "{old}");
    }
}

/// (segment version, flags) of every frame in fixture `name`'s segments.
fn frame_flags_by_version(name: &str) -> Vec<(u32, u8)> {
    segment_files(name)
        .into_iter()
        .flat_map(|(version, bytes)| {
            frame_flags_of(&bytes)
                .into_iter()
                .map(move |f| (version, f))
        })
        .collect()
}

/// (segment version, record tag) of every event record in fixture `name`'s segments.
fn event_tags(name: &str) -> Vec<(u32, u8)> {
    use sessionlog::log::frame::{self, FrameLimits};
    use sessionlog::log::record::{FrameContext, Record};
    let mut out = Vec::new();
    for (version, bytes) in segment_files(name) {
        let mut at = 32;
        while at < bytes.len() {
            if bytes[at..].iter().all(|&b| b == 0) {
                break; // the zero tail a live writer preallocated (format-spec.md §2)
            }
            let (header, payload) = frame::decode(&bytes[at..], &FrameLimits::default()).unwrap();
            let mut context = FrameContext::new();
            let mut rest = &payload[..];
            while !rest.is_empty() {
                let tag = rest[0];
                let (record, after) = Record::decode_in(rest, &mut context).unwrap();
                if matches!(record, Record::Event { .. }) {
                    out.push((version, tag));
                }
                rest = after;
            }
            at += header.frame_len() as usize;
        }
    }
    out
}

/// The flags byte of every frame in fixture `name`'s segments.
fn frame_flags(name: &str) -> Vec<u8> {
    frame_flags_by_version(name)
        .into_iter()
        .map(|(_, f)| f)
        .collect()
}

/// The flags byte of every frame in the segment file `bytes`.
fn frame_flags_of(bytes: &[u8]) -> Vec<u8> {
    use sessionlog::log::frame::{FRAME_HEADER_LEN, FrameHeader, FrameLimits};
    let mut out = Vec::new();
    let mut at = 32;
    while at + FRAME_HEADER_LEN <= bytes.len() {
        if bytes[at..].iter().all(|&b| b == 0) {
            break; // the zero tail a live writer preallocated (format-spec.md §2)
        }
        let h: [u8; FRAME_HEADER_LEN] = bytes[at..at + FRAME_HEADER_LEN].try_into().unwrap();
        let header = FrameHeader::parse(&h, &FrameLimits::default()).unwrap();
        out.push(header.flags);
        at += header.frame_len() as usize;
    }
    out
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
