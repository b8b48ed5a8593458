//! Lean event records (segment format 7, format-spec.md §4.2): a session's later events in a
//! frame are `EventNext` records, every frame still decodes alone, and everything that reads
//! or copies records (reads at an index run, recovery, rebuilds, GC, verify) gets the same
//! events back.

use std::path::Path;

use crate::common::{read_all, synthetic_event};
use sessionlog::error::{Damage, OpenError};
use sessionlog::event::{Event, SessionHeader};
use sessionlog::log::frame::{self, FrameLimits};
use sessionlog::log::record::Record;
use sessionlog::log::segment::SEGMENT_HEADER_LEN;
use sessionlog::store::{Config, Durability, GcOptions, Store};

fn config() -> Config {
    Config::default()
        .durability(Durability::Buffered)
        .segment_bytes(4 * 1024)
        .compress_threshold(usize::MAX)
        .invariants(sessionlog::InvariantMode::Off)
}

/// Every frame payload of every segment, with the segment number.
fn payloads(dir: &Path) -> Vec<(u64, Vec<u8>)> {
    let mut paths: Vec<_> = std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for (k, p) in paths.iter().enumerate() {
        let bytes = std::fs::read(p).unwrap();
        let mut at = SEGMENT_HEADER_LEN as usize;
        while at < bytes.len() {
            if bytes[at..].iter().all(|&b| b == 0) {
                break; // the zero tail a live writer preallocated (format-spec.md §2)
            }
            let (header, payload) = frame::decode(&bytes[at..], &FrameLimits::default()).unwrap();
            out.push((k as u64 + 1, payload));
            at += header.frame_len() as usize;
        }
    }
    out
}

/// The tags of a payload's records, in order.
fn tags(payload: &[u8]) -> Vec<u8> {
    Record::decode_all(payload)
        .unwrap()
        .iter()
        .map(|(offset, _)| payload[*offset as usize])
        .collect()
}

fn all(store: &Store) -> Vec<(String, Vec<Event>)> {
    let mut ids: Vec<String> = store.sessions().into_iter().map(|s| s.header.id).collect();
    ids.sort();
    ids.into_iter()
        .map(|id| {
            let events = read_all(store, &id);
            (id, events)
        })
        .collect()
}

#[test]
fn interleaved_sessions_share_frames_and_survive_a_gc_of_one_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    for id in ["a", "b", "c"] {
        store.create_session(SessionHeader::new(id, 1)).unwrap();
    }
    // Three sessions appended in turns, flushed every few rounds: frames where each
    // session's events follow other sessions' records.
    for seq in 0..60u64 {
        for (k, id) in ["a", "b", "c"].iter().enumerate() {
            store.append(id, synthetic_event(seq, k as u64)).unwrap();
        }
        if seq % 4 == 3 {
            store.flush().unwrap();
        }
    }
    store.flush().unwrap();
    let frames = payloads(dir.path());
    let mixed = frames
        .iter()
        .filter(|(_, p)| {
            let t = tags(p);
            t.iter().filter(|&&t| t == 5).count() >= 3 && t.contains(&6)
        })
        .count();
    assert!(mixed > 5, "frames with several sessions' EventNext records");
    // A record of another session never breaks a chain; a read of any single event (at its
    // index run, not from the frame's start) gets it back.
    for (k, id) in ["a", "b", "c"].iter().enumerate() {
        for seq in [0, 1, 5, 31, 59] {
            assert_eq!(
                store.get(id, seq).unwrap(),
                Some(synthetic_event(seq, k as u64))
            );
        }
    }
    // More appends so the frames above are in sealed segments, then drop "b" and compact.
    for seq in 60..160u64 {
        store.append("a", synthetic_event(seq, 0)).unwrap();
    }
    store.delete_session("b").unwrap();
    store.flush().unwrap();
    let before = all(&store);
    let report = store
        .gc(GcOptions::default().live_fraction(1.0), &mut |_, _| {})
        .unwrap();
    assert!(report.records_dropped > 0, "{report:?}");
    assert_eq!(all(&store), before);
    assert!(store.verify().unwrap().is_clean());
    // The compacted frames still hold EventNext records and decode alone.
    let compacted: Vec<u8> = payloads(dir.path())
        .iter()
        .filter(|(n, _)| report.compacted.contains(n))
        .flat_map(|(_, p)| tags(p))
        .collect();
    assert!(compacted.contains(&6), "{compacted:?}");
    store.close().unwrap();
    // Rebuilt from the log alone: the same.
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(all(&store), before);
    assert!(store.verify().unwrap().is_clean());
}

#[test]
fn a_batch_cut_into_frames_starts_each_frame_with_an_event_start_record() {
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        config()
            .max_frame_bytes(2048)
            .max_event_bytes(1024)
            .segment_bytes(64 * 1024)
    };
    let store = Store::open(dir.path(), config()).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    let events: Vec<Event> = (0..200)
        .map(|s| {
            let data = format!(r#"{{"i":{s},"pad":"{}"}}"#, "x".repeat(100));
            Event::new("assistant/chunk", s, 1_767_225_600_000 + s as i64 * 3, data)
        })
        .collect();
    store.append_batch("a", events.clone()).unwrap();
    store.flush().unwrap();
    let frames = payloads(dir.path());
    assert!(frames.len() > 10, "{} frames", frames.len());
    for (_, p) in &frames {
        let t = tags(p);
        let first = t.iter().position(|&t| t == 5 || t == 6).unwrap();
        assert_eq!(
            t[first], 5,
            "a frame's first event record is an EventStart: {t:?}"
        );
    }
    assert!(frames.iter().any(|(_, p)| tags(p).contains(&6)));
    for seq in (0..200).step_by(7) {
        assert_eq!(
            store.get("a", seq).unwrap().as_ref(),
            Some(&events[seq as usize])
        );
    }
    assert_eq!(read_all(&store, "a"), events);
    store.close().unwrap();
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(read_all(&store, "a"), events);
}

#[test]
fn a_lean_record_in_a_version_6_segment_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    store.append("a", synthetic_event(0, 0)).unwrap();
    store.close().unwrap();
    let path = dir.path().join("segments/00000000000000000001.seg");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&6u32.to_le_bytes());
    let crc = crc32fast::hash(&bytes[0..28]);
    bytes[28..32].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let err = Store::open(dir.path(), config()).unwrap_err();
    assert!(
        matches!(
            &err,
            OpenError::Corruption {
                reason: Damage::RecordNotInVersion { version: 6, .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("lean event"), "{err}");
}
