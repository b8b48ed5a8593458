//! Fuzz-target bodies, shared by `fuzz/` (cargo fuzz) and the corpus-replay tests, so a
//! regression input fails `cargo test`. Not part of the stable API.
//!
//! Each function takes arbitrary bytes and **panics only when it finds a bug**: a panic inside
//! the engine, an error of the wrong kind, or data read back that was never written.
//!
//! - [`decode_log_bytes`]: frame, record and segment-header decoding, and the recovery scan,
//!   on arbitrary bytes.
//! - [`recover_damaged_store`]: a real store (segments on a [`SimFs`], the index in a temporary
//!   directory) whose segment files are truncated, overwritten or removed as the input says,
//!   then opened, read and verified.
//! - [`append_api`]: `create_session`, `append` and `append_batch` with arbitrary envelopes and
//!   JSON text; what is accepted must read back identically after a reopen.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use sessionlog::error::{AppendError, OpenError, ReadError};
use sessionlog::event::{EnvelopeKey, Event, KeyOrder, Layout, Packing, SessionHeader, SurfaceOp};
use sessionlog::fs::FileSystem;
use sessionlog::fs::sim::{SimFs, SimOptions};
use sessionlog::log::Segments;
use sessionlog::log::frame::{self, FRAME_HEADER_LEN, FrameHeader, FrameLimits};
use sessionlog::log::record::Record;
use sessionlog::log::scan::{self, RecoveryMode};
use sessionlog::log::segment::{self, SEGMENT_HEADER_LEN, SEGMENTS_DIR};
use sessionlog::store::{Config, Durability, INDEX_FILE, Store};

/// A cursor over fuzz input: every read succeeds (zeros past the end).
#[derive(Debug)]
pub struct Input<'a> {
    bytes: &'a [u8],
}

impl<'a> Input<'a> {
    /// Wraps `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Input { bytes }
    }

    /// True when everything was consumed.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// One byte.
    pub fn u8(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&b, rest)) => {
                self.bytes = rest;
                b
            }
            None => 0,
        }
    }

    /// A little-endian u32 (4 bytes).
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// A little-endian u64 (8 bytes).
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// Up to `n` bytes.
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.bytes.len());
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        head
    }

    /// A string whose byte length is given by one length byte (invalid UTF-8 is replaced).
    pub fn short_str(&mut self) -> String {
        let n = usize::from(self.u8());
        String::from_utf8_lossy(self.take(n)).into_owned()
    }

    /// A string whose byte length is given by two length bytes.
    pub fn long_str(&mut self) -> String {
        let n = usize::from(self.u8()) | (usize::from(self.u8()) << 8);
        String::from_utf8_lossy(self.take(n)).into_owned()
    }
}

/// Target (a): decode arbitrary bytes as a frame, as records, as a segment header, and as a
/// whole segment file scanned by recovery (in every mode). Nothing may panic; decoded frames
/// must re-encode to a frame that decodes to the same payload.
pub fn decode_log_bytes(data: &[u8]) {
    let limits = FrameLimits {
        max_frame_bytes: 1 << 20,
    };
    if let Ok((header, payload)) = frame::decode(data, &limits) {
        assert_eq!(payload.len(), header.raw_len as usize, "payload length");
        let again = frame::encode(&payload, usize::MAX, 1);
        let (_, decoded) = frame::decode(&again, &limits).expect("a re-encoded frame decodes");
        assert_eq!(decoded, payload);
        let _ = Record::decode_all(&payload);
    }
    if let Some(h) = data
        .get(..FRAME_HEADER_LEN)
        .and_then(|h| <&[u8; FRAME_HEADER_LEN]>::try_from(h).ok())
        && let Ok(header) = FrameHeader::parse(h, &limits)
    {
        assert!(header.stored_len >= 1 && header.stored_len <= limits.max_frame_bytes);
    }
    if let Ok(records) = Record::decode_all(data) {
        // What decodes re-encodes to the same bytes (postcard is canonical for our types,
        // except for non-minimal varints, which postcard rejects).
        let mut out = Vec::new();
        for (_, r) in &records {
            r.encode_into(&mut out).expect("a decoded record encodes");
        }
        let again = Record::decode_all(&out).expect("re-encoded records decode");
        assert_eq!(again.len(), records.len());
    }
    let _ = segment::check_header(data, 1);

    // The same bytes as the body of segment 1, scanned by recovery's scanner.
    let sim = SimFs::new(0, SimOptions::default());
    let dir = PathBuf::from("/fuzz/segments");
    if sim.create_dir_all(&dir).is_err() {
        return;
    }
    let mut file = segment::encode_header(1).to_vec();
    file.extend_from_slice(data);
    if sim.write_file(&segment::path(&dir, 1), &file).is_err() {
        return;
    }
    let Ok(segments) = Segments::new(sim, dir, false) else {
        return;
    };
    for mode in [
        RecoveryMode::TolerateTornTail,
        RecoveryMode::AbsoluteConsistency,
        RecoveryMode::SalvageSkippingBadFrames,
    ] {
        let mut frames = Vec::new();
        let from = sessionlog::error::LogPosition {
            segment: 1,
            offset: SEGMENT_HEADER_LEN,
        };
        let result = scan::scan(&segments, &[1], from, mode, &limits, &mut |f| {
            frames.push((f.position.offset, f.frame_len));
            Ok(())
        });
        if let Ok(report) = result {
            let mut at = SEGMENT_HEADER_LEN;
            for &(offset, len) in &frames {
                assert!(offset >= at, "frames overlap");
                at = offset + u64::from(len);
                assert!(at <= file.len() as u64);
            }
            if mode != RecoveryMode::SalvageSkippingBadFrames {
                // Without salvage, valid frames are back to back from the header on.
                let mut expect = SEGMENT_HEADER_LEN;
                for &(offset, len) in &frames {
                    assert_eq!(offset, expect);
                    expect += u64::from(len);
                }
                assert_eq!(report.end.offset, expect);
            }
        }
    }
}

/// The base store [`recover_damaged_store`] damages: segment images, the index file, and
/// what was written.
#[derive(Debug)]
struct BaseStore {
    segments: Vec<(u64, Vec<u8>)>,
    index: Vec<u8>,
    sessions: Vec<(SessionHeader, Vec<Event>)>,
}

fn base_event(seq: u64, salt: u64) -> Event {
    let mut e = sessionlog_bench::workload::synthetic_event(seq, salt);
    if salt == 2 && seq.is_multiple_of(3) {
        // Large enough to be compressed and to fill a segment alone.
        e.data = format!(r#"{{"blob":"{}"}}"#, "0123456789abcdef".repeat(400));
        e.kind = "tool/result-blob".into();
        e.surface_op = None;
        e.source_event_seqs = None;
    }
    e
}

fn fuzz_config(sim: &Arc<SimFs>) -> Config {
    Config::default()
        .durability(Durability::Sync)
        .segment_bytes(4096)
        .compress_threshold(256)
        .max_frame_bytes(1 << 20)
        .max_event_bytes(1 << 19)
        // Few deferred index entries: durable batches commit theirs after acknowledging.
        .deferred_index_entries(4)
        // The synthetic workload does not follow dsh's turn/step invariants.
        .invariants(sessionlog::session::InvariantMode::Off)
        .with_fs(sim.clone())
}

fn scratch() -> Option<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::tempdir_in(shm)
    {
        return Some(d);
    }
    tempfile::tempdir().ok()
}

fn build_base() -> BaseStore {
    let dir = scratch().expect("a temporary directory");
    let sim = SimFs::new(1, SimOptions::default());
    let mut sessions = Vec::new();
    {
        let store = Store::open(dir.path(), fuzz_config(&sim)).expect("base store opens");
        for salt in 0..3u64 {
            let mut h = SessionHeader::new(format!("session-{salt}"), 1_767_225_600_000 + salt);
            if salt == 1 {
                h.cwd = Some("/work".into());
                h.extra = vec![("x".into(), "[1,2,3]".into())];
            }
            store.create_session(h.clone()).expect("create");
            sessions.push((h, Vec::new()));
        }
        for seq in 0..14u64 {
            for salt in 0..3u64 {
                let e = base_event(seq, salt);
                store
                    .append(&sessions[salt as usize].0.id, e.clone())
                    .expect("append");
                sessions[salt as usize].1.push(e);
            }
        }
        // A batch, so one frame holds several events of one session.
        let base = sessions[0].1.len() as u64;
        let batch: Vec<Event> = (0..4).map(|k| base_event(base + k, 0)).collect();
        store
            .append_batch(&sessions[0].0.id, batch.clone())
            .expect("batch");
        sessions[0].1.extend(batch);
        store.close().expect("close");
    }
    let seg_dir = dir.path().join(SEGMENTS_DIR);
    let mut segments = Vec::new();
    for name in sim.list(&seg_dir).unwrap_or_default() {
        if let Some(n) = segment::parse_file_name(&name) {
            segments.push((n, sim.read_file(&seg_dir.join(&name)).unwrap_or_default()));
        }
    }
    segments.sort();
    let index = std::fs::read(dir.path().join(INDEX_FILE)).unwrap_or_default();
    BaseStore {
        segments,
        index,
        sessions,
    }
}

fn base() -> &'static BaseStore {
    static BASE: OnceLock<BaseStore> = OnceLock::new();
    BASE.get_or_init(build_base)
}

/// Target (b): damage the segment files of a real store as `data` says (truncate, overwrite
/// bytes, flip bits, remove a segment, append garbage), optionally drop the index, open it in
/// a recovery mode chosen by the input, then read everything and verify. The open returns
/// `Ok` or a typed error; when `Ok`, every event read is one that was written, at its seq, and
/// each session is a prefix of what was written; damaged events give `ReadError`s.
pub fn recover_damaged_store(data: &[u8]) {
    let base = base();
    let mut input = Input::new(data);
    let flags = input.u8();
    let mut images: Vec<(u64, Vec<u8>)> = base.segments.clone();
    let mut ops = 0;
    while !input.is_empty() && ops < 16 {
        ops += 1;
        let op = input.u8();
        let Some(which) = (!images.is_empty()).then(|| usize::from(input.u8()) % images.len())
        else {
            break;
        };
        let at = input.u32() as usize;
        let img = &mut images[which].1;
        match op % 6 {
            0 => {
                let len = img.len();
                img.truncate(at % (len + 1));
            }
            1 => {
                let v = input.u8();
                if !img.is_empty() {
                    let len = img.len();
                    img[at % len] ^= v.max(1);
                }
            }
            2 => {
                let n = usize::from(input_len(&mut input));
                let bytes = input.take(n);
                if !img.is_empty() {
                    let start = at % img.len();
                    for (i, b) in bytes.iter().enumerate() {
                        if let Some(slot) = img.get_mut(start + i) {
                            *slot = *b;
                        }
                    }
                }
            }
            3 => {
                let n = usize::from(input_len(&mut input));
                let extra = input.take(n);
                img.extend_from_slice(extra);
            }
            4 => {
                images.remove(which);
            }
            _ => {
                if !img.is_empty() {
                    let len = img.len();
                    img[at % len] ^= 1 << (input.u8() % 8);
                }
            }
        }
    }
    let Some(dir) = scratch() else { return };
    let sim = SimFs::new(2, SimOptions::default());
    let seg_dir = dir.path().join(SEGMENTS_DIR);
    if sim.create_dir_all(&seg_dir).is_err() {
        return;
    }
    for (n, img) in &images {
        if sim.write_file(&segment::path(&seg_dir, *n), img).is_err() {
            return;
        }
    }
    if flags & 1 == 0 && std::fs::write(dir.path().join(INDEX_FILE), &base.index).is_err() {
        return;
    }
    let mut config = fuzz_config(&sim);
    config.recovery = match (flags >> 1) % 3 {
        0 => RecoveryMode::TolerateTornTail,
        1 => RecoveryMode::AbsoluteConsistency,
        _ => RecoveryMode::SalvageSkippingBadFrames,
    };
    let store = match Store::open(dir.path(), config) {
        Ok(s) => s,
        Err(
            OpenError::Corruption { .. }
            | OpenError::TornTail { .. }
            | OpenError::MissingSegment { .. }
            | OpenError::NotASegment { .. }
            | OpenError::UnsupportedFormat { .. }
            | OpenError::Index(_),
        ) => return,
        Err(e) => panic!("unexpected open error on a damaged log: {e}"),
    };
    let by_id: HashMap<&str, &(SessionHeader, Vec<Event>)> =
        base.sessions.iter().map(|s| (s.0.id.as_str(), s)).collect();
    for info in store.sessions() {
        let Some((header, events)) = by_id.get(info.header.id.as_str()) else {
            panic!("session {:?} was never written", info.header.id);
        };
        assert!(
            info.event_count as usize <= events.len(),
            "session {} has {} events, {} were written",
            header.id,
            info.event_count,
            events.len()
        );
        if let Some(h) = store.header(&header.id) {
            assert_eq!(&h, header, "header of {}", header.id);
        }
        let Ok(iter) = store.events(&header.id, 0..info.event_count) else {
            continue;
        };
        for (seq, e) in iter.enumerate() {
            match e {
                Ok(e) => assert_eq!(e, events[seq], "{} seq {seq} read back wrong", header.id),
                Err(ReadError::Corruption { .. } | ReadError::Io { .. } | ReadError::Index(_)) => {}
                Err(e) => panic!("unexpected read error: {e}"),
            }
        }
    }
    let _ = store.verify();
    // The store still takes appends (or refuses them with a typed error).
    if let Some((header, _)) = base.sessions.first()
        && let Some(len) = store.len(&header.id)
    {
        match store.append(&header.id, Event::new("turn/start", len, 0, "{}")) {
            Ok(_)
            | Err(AppendError::PreviousIo(_) | AppendError::Io(_) | AppendError::Index(_)) => {}
            Err(e) => panic!("append after recovery: {e}"),
        }
    }
}

fn input_len(input: &mut Input<'_>) -> u8 {
    input.u8() % 64
}

fn arbitrary_event(input: &mut Input<'_>, seq: u64) -> Event {
    const KINDS: [&str; 8] = [
        "turn/start",
        "user/message",
        "assistant/message",
        "tool/result",
        "assistant/chunk",
        "request/header-delta",
        "",
        "x/custom",
    ];
    let k = input.u8();
    let kind = if k < 200 {
        KINDS[usize::from(k) % KINDS.len()].to_owned()
    } else {
        input.short_str()
    };
    let seq = match input.u8() % 8 {
        0 => input.u64(),
        1 => seq.wrapping_add(1),
        _ => seq,
    };
    let time = match input.u8() % 4 {
        0 => input.u64() as i64,
        1 => -(i64::from(input.u32())),
        _ => 1_767_225_600_000,
    };
    let data = input.long_str();
    let flags = input.u8();
    let surface_op = match flags & 3 {
        0 => None,
        1 => Some(SurfaceOp::Append),
        _ => Some(SurfaceOp::Replace {
            start: u64::from(input.u8()),
            end: u64::from(input.u8()),
        }),
    };
    let source_event_seqs =
        (flags & 4 != 0).then(|| (0..input.u8() % 5).map(|_| u64::from(input.u8())).collect());
    let key_order = match (flags >> 4) & 3 {
        0 => KeyOrder::Canonical,
        1 => KeyOrder::SurfaceOpFirst,
        _ => KeyOrder::Custom(
            (0..input.u8() % 8)
                .map(|_| match input.u8() % 7 {
                    0 => EnvelopeKey::Type,
                    1 => EnvelopeKey::Seq,
                    2 => EnvelopeKey::Time,
                    3 => EnvelopeKey::Data,
                    4 => EnvelopeKey::SourceEventSeqs,
                    5 => EnvelopeKey::SurfaceOp,
                    _ => EnvelopeKey::Ignorable,
                })
                .collect(),
        ),
    };
    let packing = match input.u8() % 5 {
        0 => Packing::Auto,
        1 => Packing::AutoBatchStart,
        2 => Packing::Scalar,
        3 => Packing::RowStart,
        _ => Packing::RowMember,
    };
    Event {
        kind,
        seq,
        time,
        data,
        source_event_seqs,
        surface_op,
        ignorable: flags & 8 != 0,
        layout: Layout {
            key_order,
            packing,
            batch_start: false,
        },
    }
}

/// Target (c): drive `create_session`, `append`, `append_batch`, `flush` and reopen with
/// arbitrary envelopes and JSON text. Every call returns `Ok` or a typed validation error (no
/// I/O error: the storage never fails here); a refused call changes nothing; after a reopen
/// every accepted event reads back identically and nothing else is there.
pub fn append_api(data: &[u8]) {
    let Some(dir) = scratch() else { return };
    let sim = SimFs::new(3, SimOptions::default());
    let mut config = fuzz_config(&sim);
    config.durability = Durability::Buffered;
    config.max_event_bytes = 4096;
    config.json_limits.max_depth = 64;
    let mut model: Vec<(SessionHeader, Vec<Event>)> = Vec::new();
    let mut input = Input::new(data);
    if input.u8() & 1 == 1 {
        config.invariants = sessionlog::session::InvariantMode::Always;
    }
    let mut store = match Store::open(dir.path(), config.clone()) {
        Ok(s) => s,
        Err(e) => panic!("fresh store does not open: {e}"),
    };
    let mut ops = 0;
    while !input.is_empty() && ops < 64 {
        ops += 1;
        match input.u8() % 8 {
            0 => {
                let mut h = SessionHeader::new(input.short_str(), u64::from(input.u32()));
                let f = input.u8();
                if f & 1 != 0 {
                    h.cwd = Some(input.short_str());
                }
                if f & 2 != 0 {
                    h.owner = Some(input.short_str());
                }
                if f & 4 != 0 {
                    h.origin = Some(input.short_str());
                }
                if f & 8 != 0 {
                    h.extra = vec![(input.short_str(), input.short_str())];
                }
                if f & 16 != 0 {
                    h.version = u32::from(input.u8());
                }
                match store.create_session(h.clone()) {
                    Ok(_) => model.push((h, Vec::new())),
                    Err(
                        AppendError::SessionExists(_)
                        | AppendError::InvalidSessionId { .. }
                        | AppendError::InvalidHeader { .. },
                    ) => {}
                    Err(e) => panic!("create_session: unexpected error {e}"),
                }
            }
            1..=4 => {
                let Some(i) = (!model.is_empty()).then(|| usize::from(input.u8()) % model.len())
                else {
                    continue;
                };
                let next = model[i].1.len() as u64;
                let batch = input.u8() % 4;
                let events: Vec<Event> = if batch == 0 {
                    vec![arbitrary_event(&mut input, next)]
                } else {
                    (0..batch)
                        .map(|k| arbitrary_event(&mut input, next + u64::from(k)))
                        .collect()
                };
                let id = model[i].0.id.clone();
                let result = if events.len() == 1 {
                    store.append(&id, events[0].clone())
                } else {
                    store.append_batch(&id, events.clone())
                };
                match result {
                    Ok(_) => {
                        for e in &events {
                            assert!(
                                sessionlog::json::validate(&e.data, &config.json_limits).is_ok(),
                                "accepted data that is not valid JSON: {:?}",
                                e.data
                            );
                        }
                        model[i].1.extend(events);
                    }
                    Err(
                        AppendError::WrongSeq { .. }
                        | AppendError::BadData { .. }
                        | AppendError::Envelope { .. }
                        | AppendError::TooLarge { .. }
                        | AppendError::Semantics { .. }
                        | AppendError::Replay { .. },
                    ) => {}
                    Err(e) => panic!("append: unexpected error {e}"),
                }
                assert_eq!(
                    store.len(&id),
                    Some(model[i].1.len() as u64),
                    "refused appends change nothing"
                );
            }
            5 => store.flush().expect("flush on healthy storage"),
            _ => {
                store.close().expect("close on healthy storage");
                store = Store::open(dir.path(), config.clone()).expect("reopen");
                check_model(&store, &model);
            }
        }
    }
    store.close().expect("close on healthy storage");
    let store = Store::open(dir.path(), config).expect("reopen");
    check_model(&store, &model);
    let report = store.verify().expect("verify");
    assert!(report.is_clean(), "verify: {report:?}");
}

fn check_model(store: &Store, model: &[(SessionHeader, Vec<Event>)]) {
    assert_eq!(store.sessions().len(), model.len(), "session count");
    for (h, events) in model {
        assert_eq!(
            store.header(&h.id).as_ref(),
            Some(h),
            "header of {:?}",
            h.id
        );
        assert_eq!(
            store.len(&h.id),
            Some(events.len() as u64),
            "length of {:?}",
            h.id
        );
        let read: Vec<Event> = store
            .events(&h.id, 0..events.len() as u64)
            .expect("events")
            .map(|e| e.expect("readable"))
            .collect();
        assert_eq!(&read, events, "events of {:?}", h.id);
    }
}

/// Target (d1): dsh's JSONL reader on arbitrary bytes (plain or zstd, detected from the
/// content). It returns a log or a typed error; a log's events are contiguous from seq 0, and
/// writing it back and reading that again gives the same header and events.
pub fn import_jsonl(data: &[u8]) {
    use sessionlog::interop::jsonl;
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let opts = jsonl::ReadOptions {
        replay_fixture: flags & 1 != 0,
        line_limits: sessionlog::json::JsonLimits {
            max_depth: 256,
            ..sessionlog::json::JsonLimits::default()
        },
        max_decompressed_bytes: 16 << 20,
        path: None,
    };
    let Ok(log) = jsonl::read(body, &opts) else {
        return;
    };
    for (i, e) in log.events.iter().enumerate() {
        assert_eq!(e.seq, i as u64, "events are contiguous from seq 0");
    }
    assert_eq!(
        log.batches.iter().sum::<usize>(),
        log.events.len(),
        "batches cover the events"
    );
    let write = jsonl::WriteOptions {
        compression: log.compression,
        ..jsonl::WriteOptions::default()
    };
    if let Ok(bytes) = jsonl::write(&log.header, &log.events, &log.batches, &write) {
        let again = jsonl::read(&bytes, &opts).expect("what the writer wrote reads back");
        // An absent delegationDepth means 0; the writer always writes it.
        let mut header = log.header.clone();
        header.delegation_depth.get_or_insert(0);
        assert_eq!(again.header, header, "header round trip");
        assert_eq!(again.events, log.events, "events round trip");
    }
}

/// Base databases for [`import_sqlite`]: one per schema version dsh writes.
fn sqlite_bases() -> &'static Vec<Vec<u8>> {
    use sessionlog::interop::sqlite::{self, SchemaVersion, WriteOptions};
    static BASES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    BASES.get_or_init(|| {
        let mut out = Vec::new();
        let mut h = SessionHeader::new("s1", 1_767_225_600_000);
        h.cwd = Some("/work".into());
        let events: Vec<Event> = (0..12)
            .map(|seq| sessionlog_bench::workload::synthetic_event(seq, 1))
            .collect();
        let h2 = SessionHeader::new("s2", 5);
        let events2: Vec<Event> = (0..3)
            .map(|seq| sessionlog_bench::workload::synthetic_event(seq, 2))
            .collect();
        for version in [SchemaVersion::V15, SchemaVersion::V17, SchemaVersion::V18] {
            let Some(dir) = scratch() else { continue };
            let path = dir.path().join("base.db");
            let sessions = [(&h, events.as_slice()), (&h2, events2.as_slice())];
            if sqlite::write(&path, version, sessions, &WriteOptions::default()).is_ok()
                && let Ok(bytes) = std::fs::read(&path)
            {
                out.push(bytes);
            }
        }
        out
    })
}

/// Target (d2): dsh's SQLite importer on damaged databases: a valid dsh database (schema 15,
/// 17 or 18) whose rows are rewritten with arbitrary values (text, blobs, integers, NULL) and
/// whose file bytes are then overwritten as the input says. Opening and reading return
/// sessions or typed errors; imported events are contiguous from seq 0.
pub fn import_sqlite(data: &[u8]) {
    use sessionlog::interop::sqlite::{ReadOptions, SqliteReader};
    let bases = sqlite_bases();
    let mut input = Input::new(data);
    let Some(base) = bases.get(usize::from(input.u8()) % bases.len().max(1)) else {
        return;
    };
    let Some(dir) = scratch() else { return };
    let path = dir.path().join("fuzz.db");
    if std::fs::write(&path, base).is_err() {
        return;
    }
    // Row edits through SQLite itself (so the file stays a database).
    if let Ok(conn) = rusqlite::Connection::open(&path) {
        const COLUMNS: [(&str, &str); 14] = [
            ("events", "seq"),
            ("events", "type"),
            ("events", "time"),
            ("events", "data"),
            ("events", "source_event_seqs"),
            ("events", "surface_op"),
            ("events", "ignorable"),
            ("events", "session_id"),
            ("sessions", "id"),
            ("sessions", "version"),
            ("sessions", "created_at"),
            ("sessions", "cwd"),
            ("sessions", "seed_length"),
            ("sessions", "delegation_depth"),
        ];
        let edits = input.u8() % 8;
        for _ in 0..edits {
            let (table, column) = COLUMNS[usize::from(input.u8()) % COLUMNS.len()];
            let row = i64::from(input.u8() % 16);
            let sql = format!(
                "UPDATE {table} SET {column} = ?1 WHERE rowid = (SELECT rowid FROM {table} LIMIT 1 OFFSET ?2)"
            );
            let value: rusqlite::types::Value = match input.u8() % 5 {
                0 => rusqlite::types::Value::Null,
                1 => rusqlite::types::Value::Integer(input.u64() as i64),
                2 => {
                    let n = usize::from(input.u8());
                    rusqlite::types::Value::Blob(input.take(n).to_vec())
                }
                3 => rusqlite::types::Value::Real(f64::from_bits(input.u64())),
                _ => rusqlite::types::Value::Text(input.short_str()),
            };
            let _ = conn.execute(&sql, rusqlite::params![value, row]);
        }
        if input.u8().is_multiple_of(4) {
            let _ = conn.execute_batch("DELETE FROM events WHERE rowid % 3 = 0");
        }
    }
    // Then raw byte damage.
    if let Ok(mut bytes) = std::fs::read(&path) {
        let damage = input.u8() % 4;
        for _ in 0..damage {
            let at = input.u32() as usize;
            let v = input.u8();
            if !bytes.is_empty() {
                let len = bytes.len();
                bytes[at % len] ^= v.max(1);
            }
        }
        if damage > 0 && std::fs::write(&path, &bytes).is_err() {
            return;
        }
    }
    let Ok(reader) = SqliteReader::open(&path, &ReadOptions::default()) else {
        return;
    };
    let Ok(list) = reader.list() else {
        return;
    };
    for stored in list {
        if let Ok(session) = reader.read_session(&stored.header.id) {
            for (i, e) in session.events.iter().enumerate() {
                assert_eq!(e.seq, i as u64, "imported events are contiguous from seq 0");
            }
        }
    }
    let _ = reader.read_all();
}
