//! `Store::erase` and the erase-mode GC (format-spec.md §11.6): after an erase no byte of
//! the erased sessions' events is in any file of the store (raw, and in every decompressed
//! frame), kept sessions read identically, the store reopens clean, `verify` is clean, and
//! an index rebuilt from the log equals the committed one; crashes lose nothing kept and a
//! rerun of the erase-mode GC finishes the job; a session forks read is refused.

use std::collections::BTreeMap;
use std::path::Path;

use sessionlog::event::{Event, SessionHeader};
use sessionlog::index::Index;
use sessionlog::log::frame::{FRAME_HEADER_LEN, FrameHeader, FrameLimits, decode_payload};
use sessionlog::store::{Config, Durability, Store};
use sessionlog::{DerivedMessage, EraseError, GcOptions, InvariantMode, Seq};

use crate::common::{read_all, synthetic_event};

pub(crate) const MARKER: &str = "ERASE-ME-7f3a9c-unique-marker";
const T: i64 = 1_767_225_600_000;

pub(crate) fn config() -> Config {
    Config::default()
        .durability(Durability::Buffered)
        .segment_bytes(32 * 1024)
        .max_event_bytes(6 * 1024)
        .max_frame_bytes(12 * 1024)
        .invariants(InvariantMode::Off)
}

/// An event of a session to erase: the marker in a user message (so the title holds it),
/// tool-call arguments and chunks; compressible padding so that frames are compressed.
pub(crate) fn marked(seq: u64) -> Event {
    let time = T + seq as i64;
    match seq % 5 {
        0 => Event::new("turn/start", seq, time, format!(r#"{{"turn":{}}}"#, seq / 5 + 1)),
        1 => Event::new(
            "user/message",
            seq,
            time,
            format!(
                r#"{{"id":"m-{seq}","role":"user","content":[{{"type":"text","text":"{MARKER} {}"}}],"source":{{"kind":"user"}}}}"#,
                noise(seq, (seq * 53 % 700) as usize)
            ),
        )
        .with_surface_op(sessionlog::SurfaceOp::Append),
        2 => Event::new(
            "tool/call",
            seq,
            time,
            format!(
                r#"{{"turn":1,"step":1,"callId":"c{seq}","name":"bash","arguments":"{MARKER}{}"}}"#,
                noise(seq + 1, (seq * 131 % 3000) as usize)
            ),
        ),
        4 => Event::new(
            "turn/end",
            seq,
            time,
            r#"{"turn":1,"reason":{"kind":"completed"}}"#,
        ),
        _ => Event::new(
            "assistant/chunk",
            seq,
            time,
            format!(
                r#"{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"{MARKER}"}}}}"#
            ),
        ),
    }
}

/// `len` hex digits from a generator seeded with `seed` (compresses to about half).
pub(crate) fn noise(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            char::from_digit(((x >> 33) % 16) as u32, 16).unwrap_or('0')
        })
        .collect()
}

/// What a kept session reads as: events, surface, messages.
pub(crate) type Read = (Vec<Event>, Vec<Seq>, Vec<DerivedMessage>);

pub(crate) fn snapshot(store: &Store) -> BTreeMap<String, Read> {
    store
        .sessions()
        .into_iter()
        .map(|s| {
            let id = s.header.id.clone();
            let events = read_all(store, &id);
            let surface = store.surface(&id).unwrap();
            let messages = store.messages(&id).unwrap();
            (id, (events, surface, messages))
        })
        .collect()
}

/// The store: kept sessions, and sessions to erase that share group-commit frames (and
/// multi-frame chains crossing segments) with kept ones, one written as one large batch,
/// a plain one; a fork of a kept session; a later session so the erased are not the newest.
pub(crate) fn fill(store: &Store) {
    for id in ["keep-a", "secret-shared", "secret-plain"] {
        store
            .create_session(SessionHeader::new(id, T as u64))
            .unwrap();
    }
    // keep-a and secret-shared interleaved: small flushes (shared frames) and large ones
    // (chains of continued frames mixing both sessions).
    for seq in 0..160u64 {
        store.append("keep-a", synthetic_event(seq, 1)).unwrap();
        store.append("secret-shared", marked(seq)).unwrap();
        if seq % 7 == 6 || (seq > 80 && seq % 40 == 0) {
            store.flush().unwrap();
        }
    }
    for seq in 0..60 {
        store.append("secret-plain", marked(seq)).unwrap();
    }
    store.flush().unwrap();
    // One large operation: a chain of frames crossing segments, staged between appends of
    // a kept session, so the chain's first and last frames hold kept records too.
    for seq in 160..163 {
        store.append("keep-a", synthetic_event(seq, 1)).unwrap();
    }
    store
        .create_with_events(
            SessionHeader::new("secret-big", T as u64),
            (0..120).map(marked).collect(),
        )
        .unwrap();
    for seq in 163..166 {
        store.append("keep-a", synthetic_event(seq, 1)).unwrap();
    }
    store.flush().unwrap();
    store.fork("keep-a", Some(49), Some("keep-fork")).unwrap();
    let m = store.len("keep-fork").unwrap();
    for seq in m..m + 10 {
        store.append("keep-fork", synthetic_event(seq, 9)).unwrap();
    }
    store
        .create_session(SessionHeader::new("late", T as u64))
        .unwrap();
    for seq in 0..30 {
        store.append("late", synthetic_event(seq, 3)).unwrap();
    }
    store.flush().unwrap();
}

pub(crate) const ERASED: [&str; 3] = ["secret-shared", "secret-plain", "secret-big"];

/// Every file under `dir` (recursively) whose raw bytes hold `needle`, and every frame of
/// every segment whose decompressed payload does.
pub(crate) fn marker_hits(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let bytes = std::fs::read(&p).unwrap();
            if bytes.windows(needle.len()).any(|w| w == needle) {
                hits.push(format!("{} (raw)", p.display()));
            }
            if p.extension().is_some_and(|x| x == "seg") {
                for (offset, payload) in frames(&bytes) {
                    if payload.windows(needle.len()).any(|w| w == needle) {
                        hits.push(format!("{} frame at {offset}", p.display()));
                    }
                }
            }
        }
    }
    hits
}

/// Frames with the CONTINUED flag in the store's segments, and segments whose first frame
/// continues a chain from the segment before.
fn chains(dir: &Path) -> (usize, usize) {
    let (mut continued, mut crossing) = (0, 0);
    for e in std::fs::read_dir(dir.join("segments")).unwrap() {
        let bytes = std::fs::read(e.unwrap().path()).unwrap();
        let mut at = 32usize;
        while at + FRAME_HEADER_LEN <= bytes.len() {
            if bytes[at..].iter().all(|&b| b == 0) {
                break; // the zero tail a live writer preallocated (format-spec.md §2)
            }
            let mut h = [0u8; FRAME_HEADER_LEN];
            h.copy_from_slice(&bytes[at..at + FRAME_HEADER_LEN]);
            let header = FrameHeader::parse(&h, &FrameLimits::default()).unwrap();
            continued += usize::from(header.continued());
            crossing += usize::from(at == 32 && header.continuation());
            at += header.frame_len() as usize;
        }
    }
    (continued, crossing)
}

/// Every frame's decompressed payload (stops at the first bytes that are not a frame).
pub(crate) fn frames(bytes: &[u8]) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 32usize;
    while at + FRAME_HEADER_LEN <= bytes.len() {
        if bytes[at..].iter().all(|&b| b == 0) {
            break; // the zero tail a live writer preallocated (format-spec.md §2)
        }
        let mut h = [0u8; FRAME_HEADER_LEN];
        h.copy_from_slice(&bytes[at..at + FRAME_HEADER_LEN]);
        let Ok(header) = FrameHeader::parse(&h, &FrameLimits::default()) else {
            break;
        };
        let end = at + header.frame_len() as usize;
        let Some(frame) = bytes.get(at..end) else {
            break;
        };
        let payload = decode_payload(&header, &frame[8..]).unwrap();
        out.push((at, payload));
        at = end;
    }
    out
}

/// The index's entries but the watermark: an erase that sealed the active segment leaves
/// the committed watermark at the start of the new, empty segment, where a rebuild puts it
/// at the end of the last frame (the same place in the log).
pub(crate) fn dump(path: &Path) -> Vec<sessionlog::index::DumpEntry> {
    Index::open_read_only(path)
        .unwrap()
        .dump()
        .unwrap()
        .into_iter()
        .filter(|(t, k, _)| !(t == "meta" && k == b"watermark"))
        .collect()
}

/// Checks that an index rebuilt from the log equals the committed one (the store is closed).
pub(crate) fn assert_rebuild_equal(dir: &Path) {
    let committed = dump(&dir.join("index.redb"));
    std::fs::remove_file(dir.join("index.redb")).unwrap();
    let store = Store::open(dir, config()).unwrap();
    assert!(store.recovery_report().frames_scanned > 0, "rebuilt");
    store.close().unwrap();
    let rebuilt = dump(&dir.join("index.redb"));
    let differ: Vec<_> = committed
        .iter()
        .zip(&rebuilt)
        .filter(|(a, b)| a != b)
        .take(3)
        .collect();
    assert!(differ.is_empty(), "the rebuilt index differs: {differ:?}");
    assert_eq!(committed.len(), rebuilt.len());
}

pub(crate) fn assert_erased(dir: &Path) {
    let hits = marker_hits(dir, MARKER.as_bytes());
    assert!(hits.is_empty(), "the marker is still in {hits:?}");
}

#[test]
fn erase_leaves_no_byte_of_the_sessions_and_kept_sessions_read_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    fill(&store);
    assert!(
        !marker_hits(dir.path(), MARKER.as_bytes()).is_empty(),
        "the scan finds the marker before the erase"
    );
    let (continued, crossing) = chains(dir.path());
    assert!(continued >= 4 && crossing >= 1, "{continued} {crossing}");
    let before: BTreeMap<String, Read> = snapshot(&store)
        .into_iter()
        .filter(|(id, _)| !ERASED.contains(&id.as_str()))
        .collect();
    let report = store.erase(&ERASED, &mut |_, _| {}).unwrap();
    assert!(report.erase && report.index_rewritten, "{report:?}");
    assert_eq!(report.sessions_erased, 3, "{report:?}");
    assert!(report.records_dropped > 300, "{report:?}");
    eprintln!(
        "erase: {report:?}; chains before: {continued} continued frames, {crossing} crossing"
    );
    let (continued_after, _) = chains(dir.path());
    assert!(
        continued_after >= 1,
        "a chain with kept records stays a chain"
    );
    eprintln!("after: {continued_after} continued frames");
    assert_eq!(snapshot(&store), before);
    let verify = store.verify().unwrap();
    assert!(verify.is_clean(), "{verify:?}");
    // Appends go on after an erase.
    let n = store.len("late").unwrap();
    store.append("late", synthetic_event(n, 3)).unwrap();
    let before = snapshot(&store);
    store.close().unwrap();
    assert_erased(dir.path());

    let store = Store::open(dir.path(), config()).unwrap();
    assert!(!store.recovery_report().index_rebuilt);
    assert_eq!(snapshot(&store), before);
    let verify = store.verify().unwrap();
    assert!(verify.is_clean(), "{verify:?}");
    // A second erase-mode GC finds nothing more.
    let again = store
        .gc(GcOptions::default().erase(true), &mut |_, _| {})
        .unwrap();
    assert_eq!(again.records_dropped, 0, "{again:?}");
    assert_eq!(again.sessions_erased, 0, "{again:?}");
    store.close().unwrap();
    assert_rebuild_equal(dir.path());
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(snapshot(&store), before);
    assert_erased(dir.path());
}

#[test]
fn erasing_the_newest_session_keeps_only_its_creation_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    store
        .create_session(SessionHeader::new("keep", T as u64))
        .unwrap();
    for seq in 0..40 {
        store.append("keep", synthetic_event(seq, 1)).unwrap();
    }
    store
        .create_session(SessionHeader::new("newest", T as u64))
        .unwrap();
    for seq in 0..40 {
        store.append("newest", marked(seq)).unwrap();
    }
    store.flush().unwrap();
    let before = snapshot(&store);
    store.erase(&["newest"], &mut |_, _| {}).unwrap();
    let mut expected = before.clone();
    expected.remove("newest");
    assert_eq!(snapshot(&store), expected);
    store.close().unwrap();
    assert_erased(dir.path());
    assert_rebuild_equal(dir.path());
    // The next session gets a new number (the creation record was kept).
    let store = Store::open(dir.path(), config()).unwrap();
    store
        .create_session(SessionHeader::new("after", T as u64))
        .unwrap();
    let info = store.session_info("after").unwrap();
    assert!(info.incarnation > 2, "{info:?}");
}

#[test]
fn a_session_a_live_fork_reads_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    store
        .create_session(SessionHeader::new("parent", T as u64))
        .unwrap();
    for seq in 0..20 {
        store.append("parent", marked(seq)).unwrap();
    }
    store.fork("parent", Some(9), Some("child")).unwrap();
    store.fork("child", Some(4), Some("grandchild")).unwrap();
    store.flush().unwrap();
    let before = snapshot(&store);
    match store.erase(&["parent"], &mut |_, _| {}) {
        Err(EraseError::ForksRead { id, forks }) => {
            assert_eq!(id, "parent");
            assert_eq!(forks, vec!["child".to_owned(), "grandchild".to_owned()]);
        }
        other => panic!("{other:?}"),
    }
    match store.erase(&["parent", "child"], &mut |_, _| {}) {
        Err(EraseError::ForksRead { forks, .. }) => assert_eq!(forks, vec!["grandchild"]),
        other => panic!("{other:?}"),
    }
    match store.erase(&["parent", "nope"], &mut |_, _| {}) {
        Err(e @ EraseError::NoSuchSession { .. }) => {
            assert!(e.to_string().contains("gc --erase"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(snapshot(&store), before);
    // Naming the whole family erases it.
    store
        .erase(&["grandchild", "parent", "child"], &mut |_, _| {})
        .unwrap();
    assert!(store.sessions().is_empty());
    store.close().unwrap();
    assert_erased(dir.path());
}

/// A crash after the delete committed (before the erase-mode GC): the sessions are gone,
/// their bytes are not; `gc --erase` erases them.
#[test]
fn an_erase_mode_gc_erases_sessions_deleted_before() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    fill(&store);
    for id in ERASED {
        store.delete_session(id).unwrap();
    }
    let before = snapshot(&store);
    store.close().unwrap();
    assert!(!marker_hits(dir.path(), MARKER.as_bytes()).is_empty());
    let store = Store::open(dir.path(), config()).unwrap();
    let dry = store
        .gc(
            GcOptions::default().erase(true).dry_run(true),
            &mut |_, _| {},
        )
        .unwrap();
    assert!(dry.dry_run && dry.sessions_erased == 3, "{dry:?}");
    assert!(!marker_hits(dir.path(), MARKER.as_bytes()).is_empty());
    let report = store
        .gc(GcOptions::default().erase(true), &mut |_, _| {})
        .unwrap();
    assert_eq!(report.sessions_erased, 3, "{report:?}");
    assert_eq!(snapshot(&store), before);
    store.close().unwrap();
    assert_erased(dir.path());
    assert_rebuild_equal(dir.path());
}
