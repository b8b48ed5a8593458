//! Multi-frame operations are all or nothing: an `append_batch` or an import larger than a
//! frame is written as continued frames (format-spec §3), and a crash at any byte of it
//! leaves either the whole operation or none of it after reopen. Frames stay within
//! `max_frame_bytes`; the writer never produces a frame its reader refuses.

use std::path::{Path, PathBuf};

use crate::common::{read_all, synthetic_event};
use sessionlog::error::{AppendError, Damage, OpenError};
use sessionlog::event::{Event, SessionHeader};
use sessionlog::log::frame::{
    FLAG_CONTINUATION, FLAG_CONTINUED, FLAG_DICTIONARY, FLAG_DICTIONARY_2, FLAG_ZSTD,
    FRAME_HEADER_LEN, FrameLimits,
};
use sessionlog::log::scan::RecoveryMode;
use sessionlog::log::segment::SEGMENT_HEADER_LEN;
use sessionlog::session::InvariantMode;
use sessionlog::store::{Config, Durability, Store};

fn small_frames() -> Config {
    Config::default()
        .durability(Durability::Sync)
        .segment_bytes(48 * 1024)
        .max_frame_bytes(8 * 1024)
        .max_event_bytes(4 * 1024)
        .compress_threshold(usize::MAX)
        .invariants(InvariantMode::Off)
}

/// An event whose data is about `size` bytes (a user message, so it is on the surface).
fn sized_event(seq: u64, size: usize) -> Event {
    let mut e = synthetic_event(seq, 7);
    e.data = format!(r#"{{"n":{seq},"pad":"{}"}}"#, "p".repeat(size));
    e.kind = "assistant/chunk".into();
    e.source_event_seqs = None;
    e.surface_op = None;
    e
}

/// A frame in the log: (segment, offset, length, flags).
#[derive(Debug, Clone, Copy)]
struct FrameAt {
    segment: u64,
    offset: u64,
    len: u64,
    flags: u8,
}

fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join("segments").join(format!("{n:020}.seg"))
}

fn segment_numbers(dir: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".seg")?.parse().ok()
        })
        .collect();
    v.sort_unstable();
    v
}

/// Walks every frame of every segment by its header's length.
fn frames(dir: &Path) -> Vec<FrameAt> {
    let mut out = Vec::new();
    for n in segment_numbers(dir) {
        let bytes = std::fs::read(segment_path(dir, n)).unwrap();
        let mut at = SEGMENT_HEADER_LEN as usize;
        while at + FRAME_HEADER_LEN <= bytes.len() {
            if bytes[at..].iter().all(|&b| b == 0) {
                break; // the zero tail a live writer preallocated (format-spec.md §2)
            }
            let stored = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            let len = FRAME_HEADER_LEN + stored;
            out.push(FrameAt {
                segment: n,
                offset: at as u64,
                len: len as u64,
                flags: bytes[at + 8],
            });
            at += len;
        }
    }
    out
}

/// Copies the segments of `from` into a fresh directory, cutting the log at `(segment,
/// offset)`: that segment is truncated there and every later one is left out. With
/// `keep_index`, the index is copied too (it then claims more than the log holds).
fn crashed_copy(from: &Path, segment: u64, offset: u64, keep_index: bool) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(to.path().join("segments")).unwrap();
    for n in segment_numbers(from).into_iter().filter(|&n| n <= segment) {
        let mut bytes = std::fs::read(segment_path(from, n)).unwrap();
        if n == segment {
            bytes.truncate(offset as usize);
        }
        std::fs::write(segment_path(to.path(), n), bytes).unwrap();
    }
    if keep_index {
        std::fs::copy(from.join("index.redb"), to.path().join("index.redb")).unwrap();
    }
    to
}

/// Every place a crash could leave the log inside the frames `range` of `all`: each frame
/// boundary and a few bytes into each frame.
fn cut_points(all: &[FrameAt], range: std::ops::Range<usize>) -> Vec<(u64, u64)> {
    let mut cuts = Vec::new();
    for f in &all[range] {
        for delta in [0, 1, FRAME_HEADER_LEN as u64, f.len / 2, f.len - 1] {
            cuts.push((f.segment, f.offset + delta));
        }
        cuts.push((f.segment, f.offset + f.len));
    }
    cuts
}

#[test]
fn a_batch_spanning_frames_and_segments_is_all_or_nothing_at_every_cut() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_frames()).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    let before: Vec<Event> = (0..5).map(|s| sized_event(s, 100)).collect();
    for e in &before {
        store.append("a", e.clone()).unwrap();
    }
    let frames_before = frames(dir.path()).len();
    let batch: Vec<Event> = (5..85).map(|s| sized_event(s, 1500)).collect();
    let receipt = store.append_batch("a", batch.clone()).unwrap();
    assert!(receipt.durable);
    store.close().unwrap();

    let all = frames(dir.path());
    let ops = &all[frames_before..];
    assert!(ops.len() >= 10, "the batch spans {} frames", ops.len());
    assert!(
        ops[..ops.len() - 1]
            .iter()
            .all(|f| f.flags & FLAG_CONTINUED != 0),
        "every frame but the batch's last is continued"
    );
    assert_eq!(ops[ops.len() - 1].flags & FLAG_CONTINUED, 0);
    assert_eq!(ops[0].flags & FLAG_CONTINUATION, 0);
    assert!(
        ops[1..].iter().all(|f| f.flags & FLAG_CONTINUATION != 0),
        "every frame but the batch's first continues it"
    );
    assert!(
        ops.iter()
            .all(|f| f.len <= 8 * 1024 + FRAME_HEADER_LEN as u64)
    );
    assert!(
        ops.first().unwrap().segment < ops.last().unwrap().segment,
        "the batch spans segments"
    );

    let mut whole = before.clone();
    whole.extend(batch);
    // The complete log reopens with everything.
    let copy = crashed_copy(dir.path(), u64::MAX, u64::MAX, false);
    let store = Store::open(copy.path(), small_frames()).unwrap();
    assert_eq!(read_all(&store, "a"), whole);
    drop(store);

    for (i, (segment, offset)) in cut_points(&all, frames_before..all.len())
        .into_iter()
        .enumerate()
    {
        let copy = crashed_copy(dir.path(), segment, offset, i % 2 == 0);
        let store = Store::open(copy.path(), small_frames())
            .unwrap_or_else(|e| panic!("cut at segment {segment} offset {offset}: {e}"));
        let got = read_all(&store, "a");
        let last = all[all.len() - 1];
        let complete = (segment, offset) == (last.segment, last.offset + last.len);
        if complete {
            assert_eq!(got, whole, "cut at segment {segment} offset {offset}");
        } else {
            assert_eq!(got, before, "cut at segment {segment} offset {offset}");
            let first = all[frames_before];
            if (segment, offset) != (first.segment, first.offset) {
                let report = store.recovery_report();
                assert!(report.truncated.is_some(), "the torn operation is reported");
                // The operation's whole frames before the cut name the session and the first
                // seq cut (dsh's torn marker); with none whole, nothing is named.
                let whole_frames = all[frames_before..]
                    .iter()
                    .filter(|f| (f.segment, f.offset + f.len) <= (segment, offset))
                    .count();
                let torn = &report.torn_sessions;
                if whole_frames == 0 {
                    assert!(torn.is_empty(), "cut at {segment}/{offset}: {torn:?}");
                } else {
                    assert_eq!(torn.len(), 1, "cut at {segment}/{offset}: {torn:?}");
                    assert_eq!((torn[0].id.as_str(), torn[0].first_seq), ("a", 5));
                    assert!((1..80).contains(&torn[0].events), "{torn:?}");
                }
            }
        }
        assert!(store.verify().unwrap().is_clean());
        // The store takes the batch again after the cut.
        if !complete {
            let again: Vec<Event> = (5..85).map(|s| sized_event(s, 1500)).collect();
            store.append_batch("a", again).unwrap();
            assert_eq!(read_all(&store, "a"), whole);
        }
        store.close().unwrap();
        let store = Store::open(copy.path(), small_frames()).unwrap();
        assert_eq!(read_all(&store, "a").len(), whole.len());
    }
}

#[test]
fn an_import_spanning_frames_is_all_or_nothing_at_every_cut() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_frames()).unwrap();
    store
        .create_session(SessionHeader::new("first", 1))
        .unwrap();
    store.append("first", sized_event(0, 10)).unwrap();
    let frames_before = frames(dir.path()).len();
    let events: Vec<Event> = (0..60).map(|s| sized_event(s, 1200)).collect();
    store
        .import_session(SessionHeader::new("big", 2), events.clone(), None)
        .unwrap();
    store.close().unwrap();
    let all = frames(dir.path());
    assert!(all.len() - frames_before >= 8);

    for (segment, offset) in cut_points(&all, frames_before..all.len()) {
        let copy = crashed_copy(dir.path(), segment, offset, true);
        let store = Store::open(copy.path(), small_frames()).unwrap();
        assert_eq!(read_all(&store, "first").len(), 1);
        match store.len("big") {
            None => {}
            Some(n) => {
                assert_eq!(
                    n, 60,
                    "cut at segment {segment} offset {offset}: half an import"
                );
                assert_eq!(read_all(&store, "big"), events);
            }
        }
        assert!(store.verify().unwrap().is_clean());
        drop(store);
        // A read-only open of the crashed copy agrees and modifies nothing.
        let listing = std::fs::read_dir(copy.path().join("segments"))
            .unwrap()
            .count();
        if let Ok(ro) = Store::open(copy.path(), small_frames().read_only(true)) {
            assert!(ro.len("big").is_none_or(|n| n == 60));
        }
        assert_eq!(
            std::fs::read_dir(copy.path().join("segments"))
                .unwrap()
                .count(),
            listing
        );
    }
}

#[test]
fn a_create_with_events_is_all_or_nothing_at_every_cut() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_frames()).unwrap();
    store
        .create_session(SessionHeader::new("first", 1))
        .unwrap();
    store.append("first", sized_event(0, 10)).unwrap();
    let frames_before = frames(dir.path()).len();
    let events: Vec<Event> = (0..40).map(|s| sized_event(s, 1200)).collect();
    store
        .create_with_events(SessionHeader::new("new", 2), events.clone())
        .unwrap();
    store.close().unwrap();
    let all = frames(dir.path());
    assert!(all.len() - frames_before >= 5, "the operation spans frames");

    let mut absent = 0;
    for (i, (segment, offset)) in cut_points(&all, frames_before..all.len())
        .into_iter()
        .enumerate()
    {
        let copy = crashed_copy(dir.path(), segment, offset, i % 2 == 0);
        let store = Store::open(copy.path(), small_frames()).unwrap();
        assert_eq!(read_all(&store, "first").len(), 1);
        match store.len("new") {
            None => {
                absent += 1;
                // The id is free again after the cut.
                store
                    .create_with_events(SessionHeader::new("new", 2), events.clone())
                    .unwrap();
            }
            Some(n) => assert_eq!(n, 40, "cut at segment {segment} offset {offset}: partial"),
        }
        assert_eq!(read_all(&store, "new"), events);
        assert!(store.verify().unwrap().is_clean());
    }
    assert!(absent > 0 && absent < cut_points(&all, frames_before..all.len()).len());
}

#[test]
fn a_read_only_open_ignores_an_unfinished_operation_and_a_writer_cuts_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_frames()).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    store.append("a", sized_event(0, 10)).unwrap();
    let n = frames(dir.path()).len();
    let batch: Vec<Event> = (1..30).map(|s| sized_event(s, 1500)).collect();
    store.append_batch("a", batch).unwrap();
    store.close().unwrap();
    let all = frames(dir.path());
    // Crash after the operation's second-to-last frame.
    let last = all[all.len() - 1];
    let copy = crashed_copy(dir.path(), last.segment, last.offset, false);
    assert!(all[n..all.len() - 1].len() >= 2);
    let store = Store::open(copy.path(), small_frames()).unwrap();
    let report = store.recovery_report().clone();
    assert_eq!(report.torn_operation_frames as usize, all.len() - 1 - n);
    let cut = report.truncated.expect("cut");
    assert_eq!(
        (cut.position.segment, cut.position.offset),
        (all[n].segment, all[n].offset)
    );
    assert_eq!(store.len("a"), Some(1));
    // Segments after the cut are gone; the next append lands right after the cut.
    assert_eq!(
        *segment_numbers(copy.path()).last().unwrap(),
        all[n].segment
    );
    store.append("a", sized_event(1, 10)).unwrap();
    store.close().unwrap();
    let store = Store::open(copy.path(), small_frames()).unwrap();
    assert_eq!(store.len("a"), Some(2));
}

#[test]
fn big_events_in_a_batch_are_acknowledged_and_recovered() {
    // A Sync batch of events far larger together than a frame: every frame stays within the
    // limit, and what was acknowledged is there after reopen.
    let config = || {
        Config::default()
            .durability(Durability::Sync)
            .max_frame_bytes(1 << 20)
            .max_event_bytes(512 << 10)
            .invariants(InvariantMode::Off)
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    let batch: Vec<Event> = (0..20).map(|s| sized_event(s, 500 << 10)).collect();
    assert!(store.append_batch("a", batch.clone()).unwrap().durable);
    store.abandon();
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(read_all(&store, "a"), batch);
    assert!(store.recovery_report().truncated.is_none());
    for f in frames(dir.path()) {
        assert!(f.len <= (1 << 20) + FRAME_HEADER_LEN as u64);
    }

    // An event over the event limit is refused before anything is written.
    let log_len = std::fs::metadata(segment_path(dir.path(), 1))
        .unwrap()
        .len();
    let err = store
        .append_batch("a", vec![sized_event(20, 10), sized_event(21, 600 << 10)])
        .unwrap_err();
    assert!(matches!(err, AppendError::TooLarge { .. }), "{err}");
    assert_eq!(store.len("a"), Some(20));
    assert_eq!(
        std::fs::metadata(segment_path(dir.path(), 1))
            .unwrap()
            .len(),
        log_len
    );
}

#[test]
fn a_record_larger_than_a_frame_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_frames()).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    store.append("a", sized_event(0, 10)).unwrap();
    // Data within the event limit, but a `type` so long the record outgrows the frame.
    let mut e = sized_event(1, 10);
    e.kind = format!("x/{}", "k".repeat(9000));
    e.ignorable = true;
    let log_len = std::fs::metadata(segment_path(dir.path(), 1))
        .unwrap()
        .len();
    let err = store.append("a", e).unwrap_err();
    assert!(matches!(err, AppendError::RecordTooLarge { .. }), "{err}");
    assert_eq!(store.len("a"), Some(1));
    assert_eq!(
        std::fs::metadata(segment_path(dir.path(), 1))
            .unwrap()
            .len(),
        log_len
    );
    store.append("a", sized_event(1, 10)).unwrap();
}

/// Rewrites a segment as a build before lean records (segment version 7) wrote it: every
/// event as postcard's tag-1 `Event` record, frames compressed without the dictionary, the
/// header at `version`; deletes the index (the frames moved), so the next open rebuilds it.
fn rewrite_as_version(path: &Path, version: u32) {
    use sessionlog::log::record::Record;
    let bytes = std::fs::read(path).unwrap();
    let mut out = bytes[..SEGMENT_HEADER_LEN as usize].to_vec();
    let mut at = SEGMENT_HEADER_LEN as usize;
    let mut encoder = sessionlog::log::frame::Encoder::without_dictionary(1);
    while at < bytes.len() {
        if bytes[at..].iter().all(|&b| b == 0) {
            break; // the zero tail a live writer preallocated (format-spec.md §2)
        }
        let (header, payload) =
            sessionlog::log::frame::decode(&bytes[at..], &FrameLimits::default()).unwrap();
        let mut raw = Vec::new();
        for (_, record) in Record::decode_all(&payload).unwrap() {
            record.encode_into(&mut raw).unwrap();
        }
        let flags = header.flags & (FLAG_CONTINUED | FLAG_CONTINUATION);
        out.extend(encoder.encode(&raw, 64, flags));
        at += header.frame_len() as usize;
    }
    std::fs::write(path, out).unwrap();
    set_segment_version(path, version);
    forget_derived_and_published(path);
}

/// Deletes the index (the frames of the segment at `path` moved, so the next open rebuilds
/// it) and `ACKED` (the position its writer published is in the old bytes).
fn forget_derived_and_published(path: &Path) {
    let store = path.parent().unwrap().parent().unwrap();
    let _ = std::fs::remove_file(store.join("index.redb"));
    let _ = std::fs::remove_file(store.join("ACKED"));
}

/// Rewrites a segment header's format version (and its CRC).
fn set_segment_version(path: &Path, version: u32) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[8..12].copy_from_slice(&version.to_le_bytes());
    let crc = crc32fast::hash(&bytes[0..28]);
    bytes[28..32].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn version_1_segments_are_read_and_never_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_frames()).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    for s in 0..3 {
        store.append("a", sized_event(s, 50)).unwrap();
    }
    store.close().unwrap();
    rewrite_as_version(&segment_path(dir.path(), 1), 1);
    let store = Store::open(dir.path(), small_frames()).unwrap();
    assert_eq!(store.len("a"), Some(3));
    store.append("a", sized_event(3, 50)).unwrap();
    store.close().unwrap();
    assert_eq!(segment_numbers(dir.path()), vec![1, 2]);
    let head = std::fs::read(segment_path(dir.path(), 2)).unwrap();
    assert_eq!(
        u32::from_le_bytes(head[8..12].try_into().unwrap()),
        sessionlog::log::segment::FORMAT_VERSION
    );
    let store = Store::open(dir.path(), small_frames()).unwrap();
    assert_eq!(read_all(&store, "a").len(), 4);
}

#[test]
fn version_2_segments_are_read_rolled_over_and_a_verbatim_record_in_one_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_frames()).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    for s in 0..3 {
        store.append("a", sized_event(s, 50)).unwrap();
    }
    store.close().unwrap();
    rewrite_as_version(&segment_path(dir.path(), 1), 2);
    let store = Store::open(dir.path(), small_frames()).unwrap();
    assert_eq!(read_all(&store, "a").len(), 3);
    store
        .create_verbatim(SessionHeader::new("v", 1), vec![sized_event(0, 10)])
        .unwrap();
    store.close().unwrap();
    // The verbatim session went to a new version-3 segment, never into the version-2 one.
    assert_eq!(segment_numbers(dir.path()), vec![1, 2]);
    let store = Store::open(dir.path(), small_frames()).unwrap();
    assert!(store.session_info("v").unwrap().verbatim);
    store.close().unwrap();
    // Marked version 2, the segment holding the Verbatim record is damage, named as such.
    set_segment_version(&segment_path(dir.path(), 2), 2);
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let err = Store::open(dir.path(), small_frames()).unwrap_err();
    assert!(
        matches!(
            &err,
            OpenError::Corruption {
                reason: Damage::RecordNotInVersion { version: 2, .. },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_continued_flag_in_a_version_1_segment_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_frames()).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    for s in 0..3 {
        store.append("a", sized_event(s, 50)).unwrap();
    }
    store.close().unwrap();
    let path = segment_path(dir.path(), 1);
    set_segment_version(&path, 1);
    // Set bit 1 on the second frame and fix its CRC: a version-1 reader never wrote it.
    let f = frames(dir.path())[1];
    let mut bytes = std::fs::read(&path).unwrap();
    let at = f.offset as usize;
    bytes[at + 8] |= FLAG_CONTINUED;
    let crc = crc32fast::hash(&bytes[at + 8..at + f.len as usize]);
    bytes[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let err = Store::open(dir.path(), small_frames()).unwrap_err();
    match err {
        OpenError::Corruption { position, reason } => {
            assert_eq!(position.offset, f.offset);
            assert!(reason.to_string().contains("continued"), "{reason}");
        }
        other => panic!("expected corruption, got {other}"),
    }
}

/// Rewrites a segment as the build before dictionary 2 (segment version 7) wrote it: the
/// same payloads, small frames compressed with dictionary 1; deletes the index (the frames
/// moved), so the next open rebuilds it.
fn rewrite_with_dictionary_1(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    let mut out = bytes[..SEGMENT_HEADER_LEN as usize].to_vec();
    let mut at = SEGMENT_HEADER_LEN as usize;
    let mut encoder = sessionlog::log::frame::Encoder::with_dictionary_1(1);
    while at < bytes.len() && !bytes[at..].iter().all(|&b| b == 0) {
        let (header, payload) =
            sessionlog::log::frame::decode(&bytes[at..], &FrameLimits::default()).unwrap();
        let flags = header.flags & (FLAG_CONTINUED | FLAG_CONTINUATION);
        out.extend(encoder.encode(&payload, 64, flags));
        at += header.frame_len() as usize;
    }
    std::fs::write(path, out).unwrap();
    set_segment_version(path, 7);
    forget_derived_and_published(path);
}

#[test]
fn a_dictionary_frame_outside_its_versions_is_damage_and_older_versions_roll_over() {
    let config = || small_frames().compress_threshold(64);
    let write = |dir: &Path, events: u64| {
        let store = Store::open(dir, config()).unwrap();
        store.create_session(SessionHeader::new("a", 1)).unwrap();
        for s in 0..events {
            store.append("a", sized_event(s, 200)).unwrap();
        }
        store.close().unwrap();
    };
    // Dictionary 2's frames in a segment marked version 7 (the build before it) or 3 (before
    // any dictionary) are damage, named as such, never decoded as another kind of frame.
    for (version, bit) in [(7, FLAG_DICTIONARY_2), (3, FLAG_DICTIONARY_2)] {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 3);
        let dictionary = frames(dir.path())
            .into_iter()
            .find(|f| f.flags & bit != 0)
            .expect("a frame compressed with dictionary 2");
        assert_eq!(dictionary.flags & (FLAG_ZSTD | FLAG_DICTIONARY), FLAG_ZSTD);
        set_segment_version(&segment_path(dir.path(), 1), version);
        std::fs::remove_file(dir.path().join("index.redb")).unwrap();
        let err = Store::open(dir.path(), config()).unwrap_err();
        match err {
            OpenError::Corruption { position, reason } => {
                assert_eq!(position.offset, dictionary.offset);
                assert!(
                    reason
                        .to_string()
                        .contains("dictionary-2 flag bit in a version-"),
                    "{reason}"
                );
            }
            other => panic!("expected corruption, got {other}"),
        }
    }
    // Dictionary 1's frames in a segment marked version 9 (this build's) are damage too.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), 3);
    rewrite_with_dictionary_1(&segment_path(dir.path(), 1));
    let one = frames(dir.path())
        .into_iter()
        .find(|f| f.flags & FLAG_DICTIONARY != 0)
        .expect("a frame compressed with dictionary 1");
    set_segment_version(&segment_path(dir.path(), 1), 9);
    let err = Store::open(dir.path(), config()).unwrap_err();
    match err {
        OpenError::Corruption { position, reason } => {
            assert_eq!(position.offset, one.offset);
            assert!(reason.to_string().contains("dictionary-1"), "{reason}");
        }
        other => panic!("expected corruption, got {other}"),
    }
    // A genuine version-7 segment (dictionary 1) and a genuine version-3 one (no dictionary)
    // are read, and the next write goes to a new segment of the current version, with
    // dictionary 2.
    for old_version in [7, 3] {
        let old = tempfile::tempdir().unwrap();
        write(old.path(), 2);
        if old_version == 7 {
            rewrite_with_dictionary_1(&segment_path(old.path(), 1));
            assert!(
                frames(old.path())
                    .iter()
                    .any(|f| f.flags & FLAG_DICTIONARY != 0)
            );
        } else {
            rewrite_as_version(&segment_path(old.path(), 1), 3);
        }
        let store = Store::open(old.path(), config()).unwrap();
        assert_eq!(read_all(&store, "a").len(), 2);
        store.append("a", sized_event(2, 200)).unwrap();
        store.close().unwrap();
        assert_eq!(segment_numbers(old.path()), vec![1, 2]);
        let head = std::fs::read(segment_path(old.path(), 2)).unwrap();
        assert_eq!(u32::from_le_bytes(head[8..12].try_into().unwrap()), 9);
        assert!(
            frames(old.path())
                .iter()
                .any(|f| f.segment == 2 && f.flags & FLAG_DICTIONARY_2 != 0)
        );
        assert!(
            frames(old.path())
                .iter()
                .all(|f| f.segment == 2 || f.flags & FLAG_DICTIONARY_2 == 0)
        );
        let store = Store::open(old.path(), config()).unwrap();
        assert_eq!(read_all(&store, "a").len(), 3);
        assert!(store.verify().unwrap().is_clean());
    }
}

#[test]
fn salvage_drops_an_operation_interrupted_by_a_damaged_frame_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = || small_frames().segment_bytes(1 << 20);
    let store = Store::open(dir.path(), config()).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    store.create_session(SessionHeader::new("b", 1)).unwrap();
    store.append("a", sized_event(0, 10)).unwrap();
    let n = frames(dir.path()).len();
    let batch: Vec<Event> = (1..30).map(|s| sized_event(s, 1500)).collect();
    store.append_batch("a", batch).unwrap();
    let m = frames(dir.path()).len();
    store.append("b", sized_event(0, 10)).unwrap();
    store.append("a", sized_event(30, 10)).unwrap();
    store.close().unwrap();
    assert!(m - n >= 4);
    // Damage a frame in the middle of the batch.
    let f = frames(dir.path())[n + 2];
    let path = segment_path(dir.path(), f.segment);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(f.offset + f.len / 2) as usize] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();

    let err = Store::open(dir.path(), config()).unwrap_err();
    assert!(matches!(err, OpenError::Corruption { .. }), "{err}");
    let store = Store::open(
        dir.path(),
        config().recovery(RecoveryMode::SalvageSkippingBadFrames),
    )
    .unwrap();
    // Nothing of the batch is visible; `b` is untouched; `a`'s later event has a gap.
    assert_eq!(store.len("a"), Some(1));
    assert_eq!(store.len("b"), Some(1));
    let ranges = store.recovery_report().dropped_ranges();
    assert!(
        ranges
            .iter()
            .any(|(id, first, last)| id == "a" && *first == 1 && *last > 1),
        "the frames before the damage are named: {ranges:?}"
    );
    assert!(
        ranges
            .iter()
            .any(|(id, first, last)| id == "a" && *first > 2 && *last == 30),
        "the frames after it, and the later append after the gap: {ranges:?}"
    );
}

#[test]
fn group_mode_appenders_write_staged_bytes_themselves_past_four_frames() {
    // With a group timer that never fires, staged bytes would grow without bound; the
    // backpressure writes them once four frames' worth (here 4 x 8 KiB) are staged.
    let dir = tempfile::tempdir().unwrap();
    let config = small_frames().durability(Durability::Group {
        max_delay: std::time::Duration::from_secs(3600),
    });
    let store = Store::open(dir.path(), config).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    let mut max_unwritten = 0u64;
    let mut appended = 0u64;
    for seq in 0..200 {
        store.append("a", sized_event(seq, 1000)).unwrap();
        appended += 1000;
        let on_disk: u64 = segment_numbers(dir.path())
            .into_iter()
            .map(|n| {
                std::fs::metadata(segment_path(dir.path(), n))
                    .unwrap()
                    .len()
            })
            .sum();
        max_unwritten = max_unwritten.max(appended.saturating_sub(on_disk));
    }
    assert!(
        max_unwritten < 40 * 1024,
        "at most four frames (and one event) stay staged: {max_unwritten} bytes"
    );
    store.close().unwrap();
    let store = Store::open(dir.path(), small_frames()).unwrap();
    assert_eq!(store.len("a"), Some(200));
}
