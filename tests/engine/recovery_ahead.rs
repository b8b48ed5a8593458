//! Recovery of a log long enough that the scan decodes its frames ahead on other threads
//! (from 256 KiB left in a segment, handed over in batches of 1 MiB of payload, two threads
//! taking the batches in turn): a torn tail, a damaged frame (in a batch of either thread, its
//! payload or its header) and a record that is not UTF-8, each deep in the log, are found and
//! reported at their frames exactly as the single-threaded scan does.

use std::path::Path;

use crate::common::{config, read_all};
use sessionlog::error::{LogPosition, OpenError};
use sessionlog::event::{Event, SessionHeader};
use sessionlog::index::Index;
use sessionlog::log::frame::{self, FRAME_HEADER_LEN, FrameHeader, FrameLimits};
use sessionlog::log::scan::RecoveryMode;
use sessionlog::log::segment::SEGMENT_HEADER_LEN;
use sessionlog::store::{Durability, Store};

const SEG: &str = "segments/00000000000000000001.seg";
/// Events per session; two sessions, 20 events per frame.
const EVENTS: u64 = 4000;

/// An event whose text barely compresses (hex of a simple hash), ~600 bytes.
fn event(seq: u64, salt: u64) -> Event {
    let mut x = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt;
    let mut text = String::new();
    for _ in 0..35 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        text.push_str(&format!("{x:016x}"));
    }
    Event::new(
        "assistant/chunk",
        seq,
        1_767_225_600_000 + seq as i64,
        format!(
            r#"{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"{text}"}}}}"#
        ),
    )
}

/// A store of one 8 MiB segment holding sessions `a` and `b`, [`EVENTS`] each, written in
/// batches of 20 events alternating between them, and no index (recovery scans it all).
/// Returns the offset of every frame, in log order, and of the frame of each of `a`'s events.
fn build(dir: &Path) -> (Vec<u64>, Vec<u64>) {
    let cfg = config(Durability::Sync).segment_bytes(8 << 20);
    let store = Store::open(dir, cfg).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    store.create_session(SessionHeader::new("b", 1)).unwrap();
    for start in (0..EVENTS).step_by(20) {
        for (id, salt) in [("a", 0), ("b", 1)] {
            let batch = (start..start + 20).map(|seq| event(seq, salt)).collect();
            store.append_batch(id, batch).unwrap();
        }
    }
    store.close().unwrap();
    let index = Index::open_read_only(&dir.join("index.redb")).unwrap();
    let of_a = (0..EVENTS)
        .map(|seq| index.run(1, seq).unwrap().unwrap().location.frame_offset)
        .collect();
    drop(index);
    std::fs::remove_file(dir.join("index.redb")).unwrap();
    let bytes = std::fs::read(dir.join(SEG)).unwrap();
    assert!(bytes.len() > 2 << 20, "the log spans several batches");
    let mut offsets = Vec::new();
    let mut at = SEGMENT_HEADER_LEN as usize;
    while at < bytes.len() {
        if bytes[at..].iter().all(|&b| b == 0) {
            break; // the zero tail a live writer preallocated (format-spec.md §2)
        }
        let header: &[u8; FRAME_HEADER_LEN] = bytes[at..at + FRAME_HEADER_LEN].try_into().unwrap();
        let header = FrameHeader::parse(header, &FrameLimits::default()).unwrap();
        offsets.push(at as u64);
        at += header.frame_len() as usize;
    }
    assert_eq!(at, bytes.len());
    (offsets, of_a)
}

fn at(offset: u64) -> LogPosition {
    LogPosition { segment: 1, offset }
}

#[test]
fn a_long_log_reads_back_whole_and_its_torn_tail_is_cut_at_the_last_frame() {
    let dir = tempfile::tempdir().unwrap();
    let (offsets, _) = build(dir.path());
    let last = *offsets.last().unwrap();
    let seg = dir.path().join(SEG);
    let len = std::fs::metadata(&seg).unwrap().len();
    // Without the writer's published position (a build before `ACKED`): with it, losing an
    // acknowledged frame is refused instead (tests/engine/recovery.rs).
    std::fs::remove_file(dir.path().join("ACKED")).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    let report = store.recovery_report().clone();
    assert_eq!(
        report.truncated.as_ref().map(|t| t.position),
        Some(at(last))
    );
    assert_eq!(report.frames_scanned, offsets.len() as u64 - 1);
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), last);
    // The last frame held b's last 20 events.
    assert_eq!(store.len("a"), Some(EVENTS));
    assert_eq!(store.len("b"), Some(EVENTS - 20));
    let a = read_all(&store, "a");
    assert!(a.iter().enumerate().all(|(i, e)| *e == event(i as u64, 0)));
    let b = read_all(&store, "b");
    assert!(b.iter().enumerate().all(|(i, e)| *e == event(i as u64, 1)));
}

#[test]
fn a_damaged_frame_deep_in_a_long_log_is_corruption_at_its_frame() {
    let base = tempfile::tempdir().unwrap();
    let (_, of_a) = build(base.path());
    let pristine = std::fs::read(base.path().join(SEG)).unwrap();
    // ~87 frames per batch: batches 0 to 4, so both decoding threads' batches; the payload
    // (the CRC fails) or the header's reserved bytes (the header does not parse, so the
    // thread that only steps over that frame stops there too). Never the last frame.
    let cases = [20, EVENTS / 4, EVENTS / 2, EVENTS * 3 / 4, EVENTS - 40]
        .into_iter()
        .flat_map(|seq| [(seq, FRAME_HEADER_LEN + 40), (seq, 10)]);
    for (seq, byte) in cases {
        let victim = of_a[seq as usize];
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("segments")).unwrap();
        let mut bytes = pristine.clone();
        bytes[victim as usize + byte] ^= 0x04;
        std::fs::write(dir.path().join(SEG), &bytes).unwrap();
        match Store::open(dir.path(), config(Durability::Sync)) {
            Err(OpenError::Corruption { position, .. }) => {
                assert_eq!(position, at(victim), "seq {seq}")
            }
            Err(other) => panic!("seq {seq}: expected corruption, got {other}"),
            Ok(_) => panic!("seq {seq}: corruption not detected"),
        }
        assert_eq!(std::fs::read(dir.path().join(SEG)).unwrap(), bytes);
        // Salvage skips that frame alone and keeps everything else that still applies.
        let cfg = config(Durability::Sync).recovery(RecoveryMode::SalvageSkippingBadFrames);
        let store = Store::open(dir.path(), cfg).unwrap();
        let report = store.recovery_report().clone();
        let skipped: Vec<_> = report.skipped_frames.iter().map(|f| f.position).collect();
        assert_eq!(skipped, vec![at(victim)], "seq {seq}");
        assert_eq!(store.len("a"), Some(seq), "seq {seq}");
        assert_eq!(store.len("b"), Some(EVENTS), "seq {seq}");
        assert_eq!(report.dropped_events.len() as u64, EVENTS - seq - 20);
    }
}

#[test]
fn a_record_that_is_not_utf8_deep_in_a_long_log_is_corruption_at_its_frame() {
    let base = tempfile::tempdir().unwrap();
    let (offsets, of_a) = build(base.path());
    let victim = of_a[(EVENTS * 3 / 4) as usize];
    let next = offsets[offsets.iter().position(|&o| o == victim).unwrap() + 1];
    let mut bytes = std::fs::read(base.path().join(SEG)).unwrap();
    let limits = FrameLimits::default();
    let (_, mut payload) = frame::decode(&bytes[victim as usize..], &limits).unwrap();
    let text = payload
        .windows(6)
        .position(|w| w == b"\"text\"")
        .expect("an event's text in the payload");
    payload[text + 9] = 0xff;
    // Re-sealed with a valid CRC (stored plainly: later frames move, which a scan without an
    // index does not mind).
    let mut damaged = bytes[..victim as usize].to_vec();
    damaged.extend(frame::encode(&payload, usize::MAX, 1));
    damaged.extend_from_slice(&bytes[next as usize..]);
    bytes = damaged;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("segments")).unwrap();
    std::fs::write(dir.path().join(SEG), &bytes).unwrap();
    match Store::open(dir.path(), config(Durability::Sync)) {
        Err(OpenError::Corruption { position, .. }) => assert_eq!(position, at(victim)),
        Err(other) => panic!("expected corruption, got {other}"),
        Ok(_) => panic!("a record that is not UTF-8 was accepted"),
    }
}
