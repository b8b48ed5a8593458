//! The store: a directory holding the log (`segments/`) and its index (`index.redb`).
//!
//! ```no_run
//! use sessionlog::event::{Event, SessionHeader};
//! use sessionlog::store::{Config, Store};
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path(), Config::default())?;
//! store.create_session(SessionHeader::new("s1", 1_767_225_600_000))?;
//! let receipt = store.append("s1", Event::new("turn/start", 0, 1_767_225_600_000, r#"{"turn":1}"#))?;
//! assert!(receipt.durable);
//! drop(store);
//!
//! let store = Store::open(dir.path(), Config::default())?;
//! let e = store.get("s1", 0)?.expect("event 0");
//! assert_eq!(e.data, r#"{"turn":1}"#);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod commit;
mod lock;
pub mod recovery;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{AppendError, LogPosition, OpenError, ReadError};
use crate::event::{Event, MAX_SAFE_INTEGER, Seq, SessionHeader};
use crate::fs::{FileSystem, StdFileSystem};
use crate::index::{Index, Location};
use crate::json::{self, JsonLimits};
use crate::log::Segments;
use crate::log::frame::FrameLimits;
use crate::log::record::{EventRecord, Record};
use crate::log::scan::{self, BadFrame, RecoveryMode};
use crate::log::segment::{SEGMENT_HEADER_LEN, SEGMENTS_DIR};

use commit::{CommitConfig, Committer, Counters, Goal};
pub use recovery::RecoveryReport;

/// The index file's name inside the store directory.
pub const INDEX_FILE: &str = "index.redb";
/// The lock file's name inside the store directory.
pub const LOCK_FILE: &str = "LOCK";

/// When an append is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Records are buffered and written in batches; nothing is synced until [`Store::flush`],
    /// a checkpoint, or close. Fastest; a crash loses what was not flushed.
    Buffered,
    /// Appends return at once (not yet durable); a background leader writes and syncs
    /// everything staged at most `max_delay` after it was appended, one `fdatasync` for all.
    Group {
        /// The longest an append waits to become durable.
        max_delay: Duration,
    },
    /// Each append returns once it is durable. Concurrent appenders share one write and one
    /// `fdatasync` (group commit by a leader).
    Sync,
}

/// Store configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// When appends are durable. Default [`Durability::Sync`].
    pub durability: Durability,
    /// What recovery tolerates. Default [`RecoveryMode::TolerateTornTail`].
    pub recovery: RecoveryMode,
    /// Open read-only (shared; no recovery writes, no appends).
    pub read_only: bool,
    /// A segment rolls over when the next frame would make it larger. Default 64 MiB.
    pub segment_bytes: u64,
    /// Largest `data` text of one event. Default 16 MiB.
    pub max_event_bytes: u64,
    /// Largest frame accepted when reading (no allocation exceeds it). Default 256 MiB.
    pub max_frame_bytes: u32,
    /// In `Buffered` mode, staged records are written once they reach this size. Default 1 MiB.
    pub batch_bytes: usize,
    /// Frames whose payload is at least this large are zstd-compressed. Default 512 bytes.
    pub compress_threshold: usize,
    /// zstd level for frames. Default 1.
    pub zstd_level: i32,
    /// After this many log bytes, a sync makes the index commit durable (bounds the tail
    /// recovery scans). Default 16 MiB.
    pub checkpoint_bytes: u64,
    /// Limits for validating event JSON.
    pub json_limits: JsonLimits,
    /// The file system (the seam for fault injection).
    pub fs: Arc<dyn FileSystem>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            durability: Durability::Sync,
            recovery: RecoveryMode::TolerateTornTail,
            read_only: false,
            segment_bytes: 64 << 20,
            max_event_bytes: 16 << 20,
            max_frame_bytes: 256 << 20,
            batch_bytes: 1 << 20,
            compress_threshold: 512,
            zstd_level: 1,
            checkpoint_bytes: 16 << 20,
            json_limits: JsonLimits::default(),
            fs: Arc::new(StdFileSystem),
        }
    }
}

/// What an append returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    /// The seq of the (last) appended event.
    pub seq: Seq,
    /// The log sequence number of the record, for [`Store::wait_durable`].
    pub lsn: u64,
    /// True when the event is durable already.
    pub durable: bool,
}

/// A session as listed by [`Store::sessions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The header.
    pub header: SessionHeader,
    /// Number of events (= next seq).
    pub event_count: Seq,
    /// Total bytes of `data` text.
    pub data_bytes: u64,
    /// `time` of the last event.
    pub last_time: i64,
}

#[derive(Debug)]
struct SessionSlot {
    number: u64,
    counters: Counters,
}

/// An opened store. Cheap to share between threads (`&Store` is `Sync`).
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    config: Config,
    segments: Arc<Segments>,
    index: Arc<Index>,
    committer: Option<Arc<Committer>>,
    sessions: RwLock<HashMap<String, Arc<Mutex<SessionSlot>>>>,
    numbers: RwLock<HashMap<u64, String>>,
    next_number: Mutex<u64>,
    overlay: HashMap<(u64, Seq), Location>,
    report: RecoveryReport,
    limits: FrameLimits,
    timer: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
    _lock: lock::StoreLock,
}

impl Store {
    /// Opens (creating if needed, unless read-only) the store in `dir`, running recovery.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<Store, OpenError> {
        let dir = dir.as_ref().to_path_buf();
        validate_config(&config)?;
        let io = |path: PathBuf| move |source| OpenError::Io { path, source };
        let writable = !config.read_only;
        if writable {
            config.fs.create_dir_all(&dir).map_err(io(dir.clone()))?;
        } else if !config.fs.exists(&dir) {
            return Err(OpenError::Io {
                path: dir.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "store directory does not exist",
                ),
            });
        }
        let store_lock = lock::StoreLock::acquire(&dir.join(LOCK_FILE), writable)?;
        let segments = Arc::new(
            Segments::new(config.fs.clone(), dir.join(SEGMENTS_DIR), writable)
                .map_err(io(dir.join(SEGMENTS_DIR)))?,
        );
        let index_path = dir.join(INDEX_FILE);
        let index = if writable {
            Index::open(&index_path)?
        } else if index_path.exists() {
            Index::open_read_only(&index_path)?
        } else {
            return Err(OpenError::NeedsRepair {
                path: dir.clone(),
                reason: "index.redb is missing".into(),
            });
        };
        let index = Arc::new(index);
        let limits = FrameLimits {
            max_frame_bytes: config.max_frame_bytes,
        };
        let recovered = recovery::recover(recovery::RecoveryInput {
            store_dir: &dir,
            segments: &segments,
            index: &index,
            mode: config.recovery,
            limits,
            writable,
        })?;
        let mut sessions = HashMap::new();
        let mut numbers = HashMap::new();
        let mut max_number = 0;
        for s in &recovered.sessions {
            max_number = max_number.max(s.number);
            numbers.insert(s.number, s.header.id.clone());
            sessions.insert(
                s.header.id.clone(),
                Arc::new(Mutex::new(SessionSlot {
                    number: s.number,
                    counters: s.counters,
                })),
            );
        }
        let committer = writable.then(|| {
            Arc::new(Committer::new(
                segments.clone(),
                index.clone(),
                CommitConfig {
                    segment_bytes: config.segment_bytes,
                    compress_threshold: config.compress_threshold,
                    zstd_level: config.zstd_level,
                    checkpoint_bytes: config.checkpoint_bytes,
                },
                recovered.active,
                recovered.next_segment,
                recovered.watermark,
                recovered
                    .sessions
                    .iter()
                    .map(|s| (s.number, s.header.clone(), s.counters)),
            ))
        });
        let timer = match (config.durability, &committer) {
            (Durability::Group { max_delay }, Some(c)) => {
                Some(spawn_group_timer(c.clone(), max_delay))
            }
            _ => None,
        };
        let overlay = recovered
            .overlay
            .into_iter()
            .map(|(s, q, l)| ((s, q), l))
            .collect();
        Ok(Store {
            dir,
            config,
            segments,
            index,
            committer,
            sessions: RwLock::new(sessions),
            numbers: RwLock::new(numbers),
            next_number: Mutex::new(max_number + 1),
            overlay,
            report: recovered.report,
            limits,
            timer,
            _lock: store_lock,
        })
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What recovery found and did when this store was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn committer(&self) -> Result<&Arc<Committer>, AppendError> {
        self.committer.as_ref().ok_or(AppendError::ReadOnly)
    }

    fn slot(&self, id: &str) -> Option<Arc<Mutex<SessionSlot>>> {
        self.sessions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// Creates a session. Its id must be new and non-empty.
    pub fn create_session(&self, header: SessionHeader) -> Result<Receipt, AppendError> {
        let committer = self.committer()?;
        validate_header(&header)?;
        let mut sessions = self.sessions.write().unwrap_or_else(|p| p.into_inner());
        if sessions.contains_key(&header.id) {
            return Err(AppendError::SessionExists(header.id));
        }
        let mut next = self.next_number.lock().unwrap_or_else(|p| p.into_inner());
        let number = *next;
        let record = Record::CreateSession {
            session: number,
            header: header.clone(),
        };
        let mut bytes = Vec::new();
        record
            .encode_into(&mut bytes)
            .map_err(|e| AppendError::InvalidHeader {
                id: header.id.clone(),
                reason: e.to_string(),
            })?;
        let lsn = committer.stage_session(number, header.clone(), &bytes)?;
        *next += 1;
        self.numbers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(number, header.id.clone());
        sessions.insert(
            header.id,
            Arc::new(Mutex::new(SessionSlot {
                number,
                counters: Counters {
                    next_seq: 0,
                    data_bytes: 0,
                    last_time: 0,
                },
            })),
        );
        drop(next);
        drop(sessions);
        self.finish(lsn, 0)
    }

    /// Appends one event to a session. `event.seq` must be the session's next seq.
    pub fn append(&self, session: &str, event: Event) -> Result<Receipt, AppendError> {
        self.append_batch(session, vec![event])
    }

    /// Appends events to a session atomically: all are validated first, then staged together
    /// into one frame; on any error nothing is written.
    pub fn append_batch(&self, session: &str, events: Vec<Event>) -> Result<Receipt, AppendError> {
        let committer = self.committer()?;
        let slot = self
            .slot(session)
            .ok_or_else(|| AppendError::NoSuchSession(session.to_owned()))?;
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        let mut counters = slot.counters;
        let mut records = Vec::with_capacity(events.len());
        for event in events {
            self.validate_event(session, &event, counters.next_seq)?;
            counters.next_seq += 1;
            counters.data_bytes += event.data.len() as u64;
            counters.last_time = event.time;
            let record = Record::Event {
                session: slot.number,
                event: EventRecord::from(event),
            };
            let mut bytes = Vec::new();
            record
                .encode_into(&mut bytes)
                .map_err(|e| AppendError::Envelope {
                    session: session.to_owned(),
                    kind: String::new(),
                    seq: counters.next_seq - 1,
                    reason: e.to_string(),
                })?;
            let Record::Event { event, .. } = record else {
                unreachable!("built as an event record above")
            };
            records.push((Event::from(event), bytes));
        }
        if records.is_empty() {
            return Ok(Receipt {
                seq: counters.next_seq.saturating_sub(1),
                lsn: committer.staged_lsn(),
                durable: true,
            });
        }
        let lsn = committer.stage_events(slot.number, records, counters)?;
        slot.counters = counters;
        drop(slot);
        self.finish(lsn, counters.next_seq - 1)
    }

    /// Applies the durability mode after staging.
    fn finish(&self, lsn: u64, seq: Seq) -> Result<Receipt, AppendError> {
        let committer = self.committer()?;
        match self.config.durability {
            Durability::Sync => {
                committer.commit(lsn, Goal::Durable, false)?;
                Ok(Receipt {
                    seq,
                    lsn,
                    durable: true,
                })
            }
            Durability::Group { .. } => Ok(Receipt {
                seq,
                lsn,
                durable: committer.is_durable(lsn),
            }),
            Durability::Buffered => {
                if committer.staged_bytes() >= self.config.batch_bytes {
                    committer.commit(lsn, Goal::Written, false)?;
                }
                Ok(Receipt {
                    seq,
                    lsn,
                    durable: committer.is_durable(lsn),
                })
            }
        }
    }

    /// Blocks until the append behind `receipt` is durable (leading the sync if needed).
    pub fn wait_durable(&self, receipt: &Receipt) -> Result<(), AppendError> {
        self.committer()?.commit(receipt.lsn, Goal::Durable, false)
    }

    /// True when the append behind `receipt` is durable.
    pub fn is_durable(&self, receipt: &Receipt) -> bool {
        self.committer
            .as_ref()
            .is_none_or(|c| c.is_durable(receipt.lsn))
    }

    /// A barrier: returns once everything appended before the call is durable.
    pub fn flush(&self) -> Result<(), AppendError> {
        let c = self.committer()?;
        c.commit(c.staged_lsn(), Goal::Durable, false)
    }

    /// Flushes and commits the index durably, so the next open scans nothing.
    pub fn checkpoint(&self) -> Result<(), AppendError> {
        let c = self.committer()?;
        c.commit(c.staged_lsn(), Goal::Durable, true)
    }

    fn validate_event(
        &self,
        session: &str,
        event: &Event,
        expected: Seq,
    ) -> Result<(), AppendError> {
        let envelope = |reason: String| AppendError::Envelope {
            session: session.to_owned(),
            kind: event.kind.clone(),
            seq: expected,
            reason,
        };
        if event.seq != expected {
            return Err(AppendError::WrongSeq {
                session: session.to_owned(),
                got: event.seq,
                expected,
            });
        }
        if event.time.abs() > MAX_SAFE_INTEGER {
            return Err(envelope(format!(
                "time {} is not a safe integer",
                event.time
            )));
        }
        if event.kind == "request/header-delta" {
            return Err(envelope(
                "unsupported legacy request/header-delta format".into(),
            ));
        }
        let size = event.data.len() as u64;
        if size > self.config.max_event_bytes {
            return Err(AppendError::TooLarge {
                session: session.to_owned(),
                kind: event.kind.clone(),
                size,
                limit: self.config.max_event_bytes,
            });
        }
        if event.is_surface_type() {
            if event.surface_op.is_none() {
                return Err(envelope("a surface event must carry a surfaceOp".into()));
            }
        } else if event.surface_op.is_some() || event.source_event_seqs.is_some() {
            return Err(envelope(
                "only surface events may carry surfaceOp or sourceEventSeqs".into(),
            ));
        }
        if let Some(sources) = &event.source_event_seqs {
            let mut seen = std::collections::HashSet::new();
            for &s in sources {
                if s >= expected {
                    return Err(envelope(format!(
                        "sourceEventSeqs entry {s} is not an earlier seq"
                    )));
                }
                if !seen.insert(s) {
                    return Err(envelope(format!("sourceEventSeqs entry {s} is duplicated")));
                }
            }
        }
        json::validate(&event.data, &self.config.json_limits).map_err(|e| AppendError::BadData {
            session: session.to_owned(),
            kind: event.kind.clone(),
            seq: expected,
            reason: e.to_string(),
        })
    }

    fn number(&self, session: &str) -> Result<(u64, Seq), ReadError> {
        let slot = self
            .slot(session)
            .ok_or_else(|| ReadError::NoSuchSession(session.to_owned()))?;
        let slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        Ok((slot.number, slot.counters.next_seq))
    }

    /// Reads one event (`None` when `seq` is past the session's end).
    pub fn get(&self, session: &str, seq: Seq) -> Result<Option<Event>, ReadError> {
        let (number, next) = self.number(session)?;
        if seq >= next {
            return Ok(None);
        }
        self.read_one(number, seq, &mut FrameCache::default())
            .map(Some)
    }

    fn read_one(&self, number: u64, seq: Seq, cache: &mut FrameCache) -> Result<Event, ReadError> {
        if let Some(e) = self.committer.as_ref().and_then(|c| c.pending(number, seq)) {
            return Ok((*e).clone());
        }
        let loc = match self.overlay.get(&(number, seq)) {
            Some(l) => *l,
            None => self.index.location(number, seq)?.ok_or_else(|| ReadError::Corruption {
                position: LogPosition::default(),
                detail: format!("the index has no location for session number {number} seq {seq}; delete index.redb and reopen to rebuild it"),
            })?,
        };
        self.read_at(number, seq, loc, cache)
    }

    fn read_at(
        &self,
        number: u64,
        seq: Seq,
        loc: Location,
        cache: &mut FrameCache,
    ) -> Result<Event, ReadError> {
        let position = loc.position();
        let payload = cache.get(&self.segments, loc, &self.limits)?;
        let corrupt = |detail: String| ReadError::Corruption { position, detail };
        let bytes = payload.get(loc.record_offset as usize..).ok_or_else(|| {
            corrupt(format!(
                "record offset {} is past the frame payload",
                loc.record_offset
            ))
        })?;
        let (record, _) = Record::decode(bytes).map_err(|e| corrupt(e.to_string()))?;
        match record {
            Record::Event { session, event } if session == number && event.seq == seq => {
                Ok(Event::from(event))
            }
            _ => Err(corrupt(format!(
                "the record at record offset {} is not event seq {seq} of session number {number}",
                loc.record_offset
            ))),
        }
    }

    /// Reads a session's events with seq in `range`, in seq order, in bounded chunks (the whole
    /// log is never loaded).
    pub fn events(
        &self,
        session: &str,
        range: std::ops::Range<Seq>,
    ) -> Result<Events<'_>, ReadError> {
        let (number, next) = self.number(session)?;
        Ok(Events {
            store: self,
            number,
            next: range.start,
            end: range.end.min(next),
            buffered: std::collections::VecDeque::new(),
            cache: FrameCache::default(),
        })
    }

    /// Every session with its counters, in session-number order.
    pub fn sessions(&self) -> Vec<SessionInfo> {
        let mut out = Vec::new();
        let state = match self.index.load() {
            Ok(s) => s,
            Err(_) => return out,
        };
        let rows: HashMap<String, _> = state.sessions.into_iter().collect();
        let numbers = self.numbers.read().unwrap_or_else(|p| p.into_inner());
        let mut ids: Vec<(&u64, &String)> = numbers.iter().collect();
        ids.sort();
        for (_, id) in ids {
            let Some(slot) = self.slot(id) else { continue };
            let counters = slot.lock().unwrap_or_else(|p| p.into_inner()).counters;
            let header = rows
                .get(id)
                .map(|r| r.header.clone())
                .or_else(|| {
                    self.committer
                        .as_ref()
                        .and_then(|c| c.header(slot_number(&slot)))
                })
                .unwrap_or_else(|| SessionHeader::new(id.clone(), 0));
            out.push(SessionInfo {
                header,
                event_count: counters.next_seq,
                data_bytes: counters.data_bytes,
                last_time: counters.last_time,
            });
        }
        out
    }

    /// The header of a session.
    pub fn header(&self, session: &str) -> Option<SessionHeader> {
        let slot = self.slot(session)?;
        let number = slot_number(&slot);
        if let Some(h) = self.committer.as_ref().and_then(|c| c.header(number)) {
            return Some(h);
        }
        self.index
            .load()
            .ok()?
            .sessions
            .into_iter()
            .find(|(id, _)| id == session)
            .map(|(_, r)| r.header)
    }

    /// Number of events in a session.
    pub fn len(&self, session: &str) -> Option<Seq> {
        self.number(session).ok().map(|(_, n)| n)
    }

    /// Reads every frame of the log and checks it (CRC, record decoding, seq contiguity, and
    /// that the index points at each event). Reports every problem found.
    pub fn verify(&self) -> Result<VerifyReport, OpenError> {
        let numbers = self.segments.list().map_err(|source| OpenError::Io {
            path: self.segments.dir().to_path_buf(),
            source,
        })?;
        let mut report = VerifyReport::default();
        let mut next: HashMap<u64, Seq> = HashMap::new();
        let index = &self.index;
        let mut problems = Vec::new();
        let mut visit = |frame: scan::ScannedFrame| -> Result<(), OpenError> {
            report.frames += 1;
            match Record::decode_all(&frame.payload) {
                Err(e) => problems.push(format!("{}: records do not decode: {e}", frame.position)),
                Ok(records) => {
                    for (record_offset, record) in records {
                        match record {
                            Record::CreateSession { session, .. } => {
                                next.insert(session, 0);
                            }
                            Record::Event { session, event } => {
                                report.events += 1;
                                let expected = next.entry(session).or_insert(0);
                                if event.seq != *expected {
                                    problems.push(format!(
                                        "{}: session number {session} seq {} (expected {})",
                                        frame.position, event.seq, expected
                                    ));
                                }
                                *expected = event.seq + 1;
                                let want = Location {
                                    segment: frame.position.segment,
                                    frame_offset: frame.position.offset,
                                    frame_len: frame.frame_len,
                                    record_offset,
                                };
                                match index.location(session, event.seq) {
                                    Ok(Some(l)) if l == want => {}
                                    Ok(other)
                                        if !self.overlay.contains_key(&(session, event.seq)) =>
                                    {
                                        if self
                                            .committer
                                            .as_ref()
                                            .and_then(|c| c.pending(session, event.seq))
                                            .is_none()
                                        {
                                            problems.push(format!(
                                                "{}: index entry for session number {session} seq {} is {other:?}",
                                                frame.position, event.seq
                                            ));
                                        }
                                    }
                                    Ok(_) => {}
                                    Err(e) => problems.push(format!("index lookup failed: {e}")),
                                }
                            }
                        }
                    }
                }
            }
            Ok(())
        };
        let start = LogPosition {
            segment: numbers.first().copied().unwrap_or(1),
            offset: SEGMENT_HEADER_LEN,
        };
        let scan = scan::scan(
            &self.segments,
            &numbers,
            start,
            RecoveryMode::SalvageSkippingBadFrames,
            &self.limits,
            &mut visit,
        )?;
        report.problems = problems;
        report.bad_frames = scan.skipped;
        if let Some(t) = scan.torn_tail {
            report.bad_frames.push(t);
        }
        Ok(report)
    }

    /// Syncs everything and commits the index durably. Dropping the store does the same,
    /// ignoring errors; call `close` to see them.
    pub fn close(mut self) -> Result<(), AppendError> {
        self.shutdown()
    }

    /// Drops the store the way a crash would: staged records are not written and the index
    /// gets no final durable commit. For tests of recovery; real crashes are tested with
    /// killed processes.
    #[doc(hidden)]
    pub fn abandon(mut self) {
        self.stop_timer();
        self.committer = None;
    }

    fn stop_timer(&mut self) {
        if let Some((stop, handle)) = self.timer.take() {
            stop.store(true, Ordering::SeqCst);
            handle.thread().unpark();
            let _ = handle.join();
        }
    }

    fn shutdown(&mut self) -> Result<(), AppendError> {
        self.stop_timer();
        match &self.committer {
            Some(c) if c.failure().is_none() => c.commit(c.staged_lsn(), Goal::Durable, true),
            _ => Ok(()),
        }
    }

    /// Reads frames from the position (for tools): the raw frame payload at a location.
    pub fn read_frame(&self, position: LogPosition, frame_len: u32) -> Result<Vec<u8>, ReadError> {
        self.segments.read_frame(position, frame_len, &self.limits)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn slot_number(slot: &Arc<Mutex<SessionSlot>>) -> u64 {
    slot.lock().unwrap_or_else(|p| p.into_inner()).number
}

/// The result of [`Store::verify`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Frames read.
    pub frames: u64,
    /// Events read.
    pub events: u64,
    /// Frames that failed their checks, with location and reason.
    pub bad_frames: Vec<BadFrame>,
    /// Other problems (seq gaps, index disagreements), one line each.
    pub problems: Vec<String>,
}

impl VerifyReport {
    /// True when nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.bad_frames.is_empty() && self.problems.is_empty()
    }
}

/// An iterator over a session's events (see [`Store::events`]).
#[derive(Debug)]
pub struct Events<'a> {
    store: &'a Store,
    number: u64,
    next: Seq,
    end: Seq,
    buffered: std::collections::VecDeque<(Seq, Location)>,
    cache: FrameCache,
}

impl Iterator for Events<'_> {
    type Item = Result<Event, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.end {
            return None;
        }
        let seq = self.next;
        self.next += 1;
        if let Some(e) = self
            .store
            .committer
            .as_ref()
            .and_then(|c| c.pending(self.number, seq))
        {
            return Some(Ok((*e).clone()));
        }
        if let Some(l) = self.store.overlay.get(&(self.number, seq)) {
            return Some(self.store.read_at(self.number, seq, *l, &mut self.cache));
        }
        while self.buffered.front().is_some_and(|(s, _)| *s < seq) {
            self.buffered.pop_front();
        }
        if self.buffered.is_empty() {
            match self.store.index.locations(self.number, seq, self.end, 1024) {
                Ok(v) => self.buffered.extend(v),
                Err(e) => return Some(Err(e.into())),
            }
        }
        match self.buffered.front() {
            Some((s, l)) if *s == seq => {
                let l = *l;
                self.buffered.pop_front();
                Some(self.store.read_at(self.number, seq, l, &mut self.cache))
            }
            _ => Some(self.store.read_one(self.number, seq, &mut self.cache)),
        }
    }
}

/// Keeps the last decoded frame, so reading neighbouring events decodes it once.
#[derive(Debug, Default)]
struct FrameCache {
    key: Option<(u64, u64)>,
    payload: Arc<Vec<u8>>,
}

impl FrameCache {
    fn get(
        &mut self,
        segments: &Segments,
        loc: Location,
        limits: &FrameLimits,
    ) -> Result<Arc<Vec<u8>>, ReadError> {
        let key = (loc.segment, loc.frame_offset);
        if self.key != Some(key) {
            self.payload = Arc::new(segments.read_frame(loc.position(), loc.frame_len, limits)?);
            self.key = Some(key);
        }
        Ok(self.payload.clone())
    }
}

fn validate_config(c: &Config) -> Result<(), OpenError> {
    if c.segment_bytes < 4096 {
        return Err(OpenError::Config(format!(
            "segment_bytes {} is below the minimum of 4096",
            c.segment_bytes
        )));
    }
    if c.max_event_bytes > u64::from(c.max_frame_bytes) / 2 {
        return Err(OpenError::Config(
            "max_event_bytes must be at most half of max_frame_bytes".into(),
        ));
    }
    Ok(())
}

fn validate_header(h: &SessionHeader) -> Result<(), AppendError> {
    let bad = |reason: &str| AppendError::InvalidHeader {
        id: h.id.clone(),
        reason: reason.to_owned(),
    };
    if h.id.is_empty() {
        return Err(AppendError::InvalidSessionId {
            id: h.id.clone(),
            reason: "session ids must not be empty",
        });
    }
    if h.id.len() > 4096 {
        return Err(AppendError::InvalidSessionId {
            id: h.id.chars().take(64).collect(),
            reason: "session ids are at most 4096 bytes",
        });
    }
    if h.version != crate::event::SESSION_FORMAT_VERSION {
        return Err(bad("session header version must be 0"));
    }
    if h.created_at > MAX_SAFE_INTEGER as u64 {
        return Err(bad("createdAt must be a non-negative safe integer"));
    }
    if h.owner.as_deref() == Some("") {
        return Err(bad("owner must be a non-empty string"));
    }
    if let Some(o) = &h.origin
        && o != "subagent"
    {
        return Err(bad("origin may only be \"subagent\""));
    }
    if let Some(cwd) = &h.cwd
        && !cwd.starts_with('/')
    {
        return Err(bad("cwd must be an absolute path"));
    }
    for (key, value) in &h.extra {
        json::validate(value, &JsonLimits::default())
            .map_err(|e| bad(&format!("extra key {key:?}: {e}")))?;
    }
    Ok(())
}

fn spawn_group_timer(
    committer: Arc<Committer>,
    max_delay: Duration,
) -> (Arc<AtomicBool>, JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::spawn(move || {
        while !flag.load(Ordering::SeqCst) {
            match committer.oldest_unsynced() {
                Some(t) => {
                    let due = t + max_delay;
                    let now = std::time::Instant::now();
                    if now >= due {
                        if committer
                            .commit(committer.staged_lsn(), Goal::Durable, false)
                            .is_err()
                        {
                            return;
                        }
                    } else {
                        std::thread::park_timeout(due - now);
                    }
                }
                None => std::thread::park_timeout(max_delay.max(Duration::from_millis(1))),
            }
        }
    });
    (stop, handle)
}
