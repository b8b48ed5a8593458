//! Recovery: torn tails are truncated to the last whole frame; damage followed by valid frames
//! is corruption reported with its segment and offset; salvage mode skips and reports.

use crate::common;

use std::path::Path;

use crate::common::{config, read_all, synthetic_event};
use sessionlog::error::{LogPosition, OpenError, ReadError};
use sessionlog::event::SessionHeader;
use sessionlog::index::{Index, Location};
use sessionlog::log::scan::RecoveryMode;
use sessionlog::store::{Durability, Store};

const SEG: &str = "segments/00000000000000000001.seg";

/// Builds a store with sessions `a` and `b` holding `n` events each, appended alternately with
/// `Sync` durability (one frame per append). Returns the location of every event, in log order.
fn build(dir: &Path, n: u64) -> Vec<(String, u64, Location)> {
    let store = Store::open(dir, config(Durability::Sync)).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    store.create_session(SessionHeader::new("b", 1)).unwrap();
    for seq in 0..n {
        store.append("a", small_event(seq, 0)).unwrap();
        store.append("b", small_event(seq, 1)).unwrap();
    }
    store.close().unwrap();
    let index = Index::open_read_only(&dir.join("index.redb")).unwrap();
    let mut locs = Vec::new();
    for seq in 0..n {
        for (number, id) in [(1, "a"), (2, "b")] {
            locs.push((
                id.to_owned(),
                seq,
                index.run(number, seq).unwrap().unwrap().location,
            ));
        }
    }
    locs.sort_by_key(|(_, _, l)| (l.segment, l.frame_offset));
    locs
}

/// Small events keep frames short, so every byte and bit can be tried.
fn small_event(seq: u64, salt: u64) -> sessionlog::event::Event {
    let mut e = synthetic_event(seq, salt);
    if e.data.len() > 120 {
        e = sessionlog::event::Event::new(
            "assistant/chunk",
            seq,
            e.time,
            format!(r#"{{"n":{seq},"s":{salt}}}"#),
        );
    }
    e
}

fn copy_segments(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.join("segments")).unwrap();
    for entry in std::fs::read_dir(from.join("segments")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join("segments").join(entry.file_name())).unwrap();
    }
}

fn copy_store(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.join("segments")).unwrap();
    for entry in std::fs::read_dir(from.join("segments")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join("segments").join(entry.file_name())).unwrap();
    }
    if from.join("index.redb").exists() {
        std::fs::copy(from.join("index.redb"), to.join("index.redb")).unwrap();
    }
}

#[test]
fn truncation_at_every_byte_of_the_last_frame_reopens_to_the_prefix() {
    let base = tempfile::tempdir().unwrap();
    // The index covers everything but the last frame: build with one event less, save the
    // index, then append the last event.
    build(base.path(), 6);
    let lagging_index = std::fs::read(base.path().join("index.redb")).unwrap();
    {
        let store = Store::open(base.path(), config(Durability::Sync)).unwrap();
        store.append("a", small_event(6, 0)).unwrap();
    }
    let seg_len = std::fs::metadata(base.path().join(SEG)).unwrap().len();
    let last = Index::open_read_only(&base.path().join("index.redb"))
        .unwrap()
        .run(1, 6)
        .unwrap()
        .unwrap()
        .location;
    assert_eq!(last.frame_offset + u64::from(last.frame_len), seg_len);
    for cut in last.frame_offset..seg_len {
        let dir = tempfile::tempdir().unwrap();
        copy_store(base.path(), dir.path());
        std::fs::write(dir.path().join("index.redb"), &lagging_index).unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join(SEG))
            .unwrap();
        f.set_len(cut).unwrap();
        drop(f);
        let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
        let report = store.recovery_report().clone();
        assert_eq!(store.len("a"), Some(6), "cut at {cut}");
        assert_eq!(store.len("b"), Some(6), "cut at {cut}");
        assert!(!report.index_rebuilt);
        if cut > last.frame_offset {
            let torn = report.truncated.as_ref().expect("torn tail reported");
            assert_eq!(
                torn.position,
                LogPosition {
                    segment: 1,
                    offset: last.frame_offset
                }
            );
        } else {
            assert!(report.truncated.is_none());
        }
        for seq in 0..6 {
            assert_eq!(store.get("a", seq).unwrap(), Some(small_event(seq, 0)));
        }
        drop(store);
        assert_eq!(
            std::fs::metadata(dir.path().join(SEG)).unwrap().len(),
            last.frame_offset,
            "cut at {cut}"
        );
        // The store stays writable after recovery, and appends land after the prefix.
        let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
        store.append("a", small_event(6, 0)).unwrap();
        assert_eq!(read_all(&store, "a").len(), 7);
    }
}

#[test]
fn absolute_consistency_refuses_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 3);
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let seg = dir.path().join(SEG);
    let len = std::fs::metadata(&seg).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let cfg = config(Durability::Sync).recovery(RecoveryMode::AbsoluteConsistency);
    let err = Store::open(dir.path(), cfg).unwrap_err();
    assert!(matches!(err, OpenError::TornTail { .. }), "{err}");
    // Nothing was modified: the default mode still sees the same torn tail.
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), len - 3);
}

#[test]
fn a_flipped_bit_in_a_non_final_frame_is_corruption_at_its_offset() {
    let base = tempfile::tempdir().unwrap();
    let locs = build(base.path(), 4);
    // Frame of event a/1 (a middle frame): try every bit.
    let (_, _, victim) = locs
        .iter()
        .find(|(id, seq, _)| id == "a" && *seq == 1)
        .unwrap()
        .clone();
    let pristine = std::fs::read(base.path().join(SEG)).unwrap();
    for bit in 0..(u64::from(victim.frame_len) * 8) {
        let dir = tempfile::tempdir().unwrap();
        copy_segments(base.path(), dir.path());
        let mut bytes = pristine.clone();
        let byte = (victim.frame_offset + bit / 8) as usize;
        bytes[byte] ^= 1 << (bit % 8);
        std::fs::write(dir.path().join(SEG), &bytes).unwrap();
        match Store::open(dir.path(), config(Durability::Sync)) {
            Err(OpenError::Corruption { position, .. }) => {
                assert_eq!(
                    position,
                    LogPosition {
                        segment: 1,
                        offset: victim.frame_offset
                    },
                    "bit {bit}"
                );
            }
            Err(other) => panic!("bit {bit}: expected corruption, got {other}"),
            Ok(_) => panic!("bit {bit}: corruption not detected"),
        }
        // Nothing was truncated or rewritten.
        assert_eq!(std::fs::read(dir.path().join(SEG)).unwrap(), bytes);
    }
}

#[test]
fn corruption_behind_the_watermark_is_reported_on_read_and_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let locs = build(dir.path(), 4);
    let (_, _, victim) = locs
        .iter()
        .find(|(id, seq, _)| id == "b" && *seq == 2)
        .unwrap()
        .clone();
    let mut bytes = std::fs::read(dir.path().join(SEG)).unwrap();
    bytes[(victim.frame_offset + 20) as usize] ^= 0x10;
    std::fs::write(dir.path().join(SEG), &bytes).unwrap();
    let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    match store.get("b", 2) {
        Err(ReadError::Corruption { position, .. }) => assert_eq!(position, victim.position()),
        other => panic!("expected corruption, got {other:?}"),
    }
    assert_eq!(store.get("b", 1).unwrap(), Some(small_event(1, 1)));
    let report = store.verify().unwrap();
    assert!(!report.is_clean());
    assert_eq!(report.bad_frames.len(), 1);
    assert_eq!(report.bad_frames[0].position, victim.position());
}

#[test]
fn salvage_mode_skips_the_bad_frame_and_reports_what_it_lost() {
    let dir = tempfile::tempdir().unwrap();
    let locs = build(dir.path(), 5);
    let (_, _, victim) = locs
        .iter()
        .find(|(id, seq, _)| id == "a" && *seq == 2)
        .unwrap()
        .clone();
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let mut bytes = std::fs::read(dir.path().join(SEG)).unwrap();
    bytes[(victim.frame_offset + 17) as usize] ^= 0x01;
    std::fs::write(dir.path().join(SEG), &bytes).unwrap();
    assert!(matches!(
        Store::open(dir.path(), config(Durability::Sync)),
        Err(OpenError::Corruption { .. })
    ));
    let cfg = config(Durability::Sync).recovery(RecoveryMode::SalvageSkippingBadFrames);
    let store = Store::open(dir.path(), cfg).unwrap();
    let report = store.recovery_report().clone();
    assert_eq!(report.skipped_frames.len(), 1);
    assert_eq!(report.skipped_frames[0].position, victim.position());
    // Session a keeps its prefix before the gap; its later events are dropped and reported.
    assert_eq!(store.len("a"), Some(2));
    assert_eq!(
        report
            .dropped_events
            .iter()
            .map(|(id, seq, _)| (id.as_str(), *seq))
            .collect::<Vec<_>>(),
        vec![("a", 3), ("a", 4)]
    );
    // Session b is untouched.
    assert_eq!(store.len("b"), Some(5));
    for seq in 0..5 {
        assert_eq!(store.get("b", seq).unwrap(), Some(small_event(seq, 1)));
    }
    // Verify, before and after a reopen, reports the damaged frame and names what the
    // salvage dropped as such, not as index entries gone missing.
    let check = |store: &Store| {
        let report = store.verify().unwrap();
        assert_eq!(report.bad_frames.len(), 1);
        assert_eq!(report.bad_frames[0].position, victim.position());
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert_eq!(
            report.salvaged,
            vec![sessionlog::Salvaged {
                session: "a".into(),
                first: 2,
                dropped_from: 3,
                last: 4,
                damaged: victim.position(),
            }]
        );
    };
    check(&store);
    store.close().unwrap();
    let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    check(&store);
    // The session goes on after the salvage, at the seqs the dropped events had: those are
    // checked against the index as any others, and the dropped ones stay one note.
    for seq in 2..6 {
        store.append("a", small_event(seq, 7)).unwrap();
    }
    check(&store);
    store.close().unwrap();
    let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    check(&store);
    assert_eq!(store.get("a", 5).unwrap(), Some(small_event(5, 7)));
}

#[test]
fn a_foreign_file_in_segments_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 1);
    std::fs::write(
        dir.path().join("segments/00000000000000000002.seg"),
        b"this is not a segment at all",
    )
    .unwrap();
    let err = Store::open(dir.path(), config(Durability::Sync)).unwrap_err();
    assert!(matches!(err, OpenError::NotASegment { .. }), "{err}");
}

#[test]
fn a_missing_middle_segment_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), config(Durability::Sync).segment_bytes(4096)).unwrap();
        common::fill(&store, 1, 200);
    }
    std::fs::remove_file(dir.path().join("segments/00000000000000000002.seg")).unwrap();
    let err = Store::open(dir.path(), config(Durability::Sync)).unwrap_err();
    assert!(
        matches!(err, OpenError::MissingSegment { missing: 2, .. }),
        "{err}"
    );
}

#[test]
fn salvage_behind_the_watermark_rebuilds_and_names_sessions_whose_creation_was_lost() {
    // Damage in a frame the index already covers is invisible to the tail scan; salvage
    // rescans the whole log, and names a session whose creation record was in the damaged
    // frame by the id the old index knew, with every seq it held.
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
        store
            .create_session(SessionHeader::new("doomed", 1))
            .unwrap();
        store.create_session(SessionHeader::new("fine", 1)).unwrap();
        for seq in 0..4 {
            store.append("doomed", small_event(seq, 0)).unwrap();
            store.append("fine", small_event(seq, 1)).unwrap();
        }
        store.close().unwrap();
    }
    // The first frame holds the creation of "doomed".
    let mut bytes = std::fs::read(dir.path().join(SEG)).unwrap();
    bytes[32 + 20] ^= 0x10;
    std::fs::write(dir.path().join(SEG), &bytes).unwrap();
    // A plain open does not read that frame: the index covers it.
    assert!(Store::open(dir.path(), config(Durability::Sync)).is_ok());
    let cfg = config(Durability::Sync).recovery(RecoveryMode::SalvageSkippingBadFrames);
    let store = Store::open(dir.path(), cfg).unwrap();
    let report = store.recovery_report().clone();
    assert!(report.index_rebuilt);
    assert_eq!(report.skipped_frames.len(), 1);
    assert_eq!(report.dropped_ranges(), vec![("doomed".to_owned(), 0, 3)]);
    assert_eq!(store.len("doomed"), None);
    assert_eq!(store.len("fine"), Some(4));
    assert!(
        store
            .verify()
            .unwrap()
            .bad_frames
            .iter()
            .all(|b| b.position.offset == 32),
        "only the damaged frame is reported; the index is consistent"
    );
}

/// Recovery reads event records by their headers; a record whose bytes are not UTF-8, in a
/// frame whose CRC holds (a writer's bug, not a torn write), still fails the open at the
/// frame's position, as a full decode of the record does.
#[test]
fn a_record_that_is_not_utf8_behind_a_valid_crc_is_corruption_at_its_frame() {
    let base = tempfile::tempdir().unwrap();
    let locs = build(base.path(), 3);
    let (id, seq, last) = locs.last().unwrap().clone();
    let data = small_event(seq, u64::from(id == "b")).data;
    let mut bytes = std::fs::read(base.path().join(SEG)).unwrap();
    let frame_end = (last.frame_offset + u64::from(last.frame_len)) as usize;
    assert_eq!(frame_end, bytes.len(), "the last frame ends the segment");
    let limits = sessionlog::log::frame::FrameLimits::default();
    let (_, mut payload) =
        sessionlog::log::frame::decode(&bytes[last.frame_offset as usize..], &limits).unwrap();
    let at = payload
        .windows(data.len())
        .position(|w| w == data.as_bytes())
        .expect("the event's data in the payload");
    payload[at] = 0xff;
    bytes.truncate(last.frame_offset as usize);
    bytes.extend(sessionlog::log::frame::encode(&payload, usize::MAX, 1));
    let dir = tempfile::tempdir().unwrap();
    copy_segments(base.path(), dir.path());
    std::fs::write(dir.path().join(SEG), &bytes).unwrap();
    // No index: recovery scans the whole log.
    match Store::open(dir.path(), config(Durability::Sync)) {
        Err(OpenError::Corruption { position, .. }) => assert_eq!(
            position,
            LogPosition {
                segment: 1,
                offset: last.frame_offset
            }
        ),
        Err(other) => panic!("expected corruption, got {other}"),
        Ok(_) => panic!("a record that is not UTF-8 was accepted"),
    }
}

/// Truncates segment 1 of `dir` to `len` bytes.
fn truncate_segment(dir: &Path, len: u64) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(SEG))
        .unwrap();
    f.set_len(len).unwrap();
}

#[test]
fn a_log_cut_below_the_position_its_writer_published_is_refused_and_salvage_accepts_it() {
    use sessionlog::store::Config;
    let base = tempfile::tempdir().unwrap();
    let locs = build(base.path(), 6);
    let seg_len = std::fs::metadata(base.path().join(SEG)).unwrap().len();
    let last = locs.last().unwrap().2;
    assert_eq!(last.frame_offset + u64::from(last.frame_len), seg_len);
    let published = LogPosition {
        segment: 1,
        offset: seg_len,
    };
    let end = LogPosition {
        segment: 1,
        offset: last.frame_offset,
    };
    // Mid-frame (what a torn write looks like) and at the frame's start (a clean end): both
    // lose the acknowledged last event, so neither is cut or opened as if nothing happened.
    for cut in [last.frame_offset + 5, last.frame_offset] {
        let dir = tempfile::tempdir().unwrap();
        copy_store(base.path(), dir.path());
        std::fs::copy(base.path().join("ACKED"), dir.path().join("ACKED")).unwrap();
        truncate_segment(dir.path(), cut);
        // Read-only, the index ahead of the log is refused, naming the published position.
        match Store::open(dir.path(), Config::default().read_only(true)) {
            Err(OpenError::NeedsRepair {
                acknowledged,
                reason,
                ..
            }) => {
                assert_eq!(acknowledged, Some(published), "cut at {cut}");
                assert!(
                    reason.contains("acknowledged frames are missing"),
                    "{reason}"
                );
            }
            Err(other) => panic!("cut at {cut}: expected NeedsRepair, got {other}"),
            Ok(_) => panic!("cut at {cut}: a read-only open served an index ahead of its log"),
        }
        match Store::open(dir.path(), config(Durability::Sync)) {
            Err(OpenError::AcknowledgedLost {
                end: e,
                published: p,
            }) => assert_eq!((e, p), (end, published), "cut at {cut}"),
            Err(other) => panic!("cut at {cut}: expected AcknowledgedLost, got {other}"),
            Ok(_) => panic!("cut at {cut}: opened a log that lost an acknowledged event"),
        }
        // Nothing was cut by the refusal.
        assert_eq!(std::fs::metadata(dir.path().join(SEG)).unwrap().len(), cut);
        // A read-only verify names the loss (not a pending cut of never-acknowledged bytes).
        let reader = Store::open(dir.path(), Config::default().read_only(true)).unwrap();
        let opened = reader.recovery_report();
        let seen = opened
            .acknowledged_lost
            .expect("the read-only open reports the loss");
        assert_eq!((seen.end, seen.published), (end, published), "cut at {cut}");
        assert!(
            opened
                .recovery_pending
                .as_deref()
                .is_some_and(|p| p.contains("acknowledged frames are missing")),
            "{opened:?}"
        );
        let report = reader.verify().unwrap();
        let lost = report.acknowledged_lost.expect("verify reports the loss");
        assert_eq!((lost.end, lost.published), (end, published), "cut at {cut}");
        assert!(report.pending_cut.is_none(), "{report:?}");
        assert!(!report.is_clean(), "{report:?}");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.contains("acknowledged frames are missing")),
            "{report:?}"
        );
        assert_eq!(
            report.bad_frames.len(),
            usize::from(cut > last.frame_offset),
            "a torn remainder is a bad frame: {report:?}"
        );
        drop(reader);
        // Salvage accepts the loss, says so, and the store goes on from the log's end.
        let salvage = config(Durability::Sync).recovery(RecoveryMode::SalvageSkippingBadFrames);
        let store = Store::open(dir.path(), salvage).unwrap();
        let lost = store
            .recovery_report()
            .acknowledged_lost
            .expect("the loss is reported");
        assert_eq!((lost.end, lost.published), (end, published));
        let (id, seq, _) = &locs[locs.len() - 1];
        assert_eq!(store.len(id), Some(*seq), "the lost event is gone");
        store.close().unwrap();
        let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
        assert!(store.recovery_report().acknowledged_lost.is_none());
        assert!(store.verify().unwrap().is_clean());
        // A read-only open never refuses for this: it changes nothing either way.
        drop(store);
        let reader = Store::open(dir.path(), Config::default().read_only(true)).unwrap();
        assert_eq!(reader.len(id), Some(*seq));
    }
}

#[test]
fn a_torn_write_after_the_published_position_is_still_cut() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 3);
    let seg_len = std::fs::metadata(dir.path().join(SEG)).unwrap().len();
    // Bytes of a frame that never finished, after everything acknowledged.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join(SEG))
        .unwrap();
    std::io::Write::write_all(&mut f, &[0x40, 0, 0, 0, 1, 2, 3]).unwrap();
    drop(f);
    let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    let report = store.recovery_report();
    assert!(report.acknowledged_lost.is_none());
    assert_eq!(
        report.truncated.as_ref().map(|t| t.position),
        Some(LogPosition {
            segment: 1,
            offset: seg_len
        })
    );
    assert_eq!(store.len("a"), Some(3));
}
