//! Recovery on open: check segment headers, validate the index watermark against the log, scan
//! only the unindexed tail, truncate a torn tail, and bring the index up to date.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::error::{Damage, LogPosition, OpenError};
use crate::event::Seq;
use crate::index::{Index, IndexBatch, Location, Watermark};
use crate::log::Segments;
use crate::log::frame::FrameLimits;
use crate::log::peek::{Utf8, peek_event};
use crate::log::record::{FrameContext, Record};
use crate::log::scan::{self, BadFrame, RecoveryMode, ScanReport, ScannedFrame};
use crate::log::segment::{self, HeaderCheck, SEGMENT_HEADER_LEN};

use super::commit::Active;
use super::registry::{Registry, RegistryError};

mod load;
use load::load_index;

/// What recovery found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Where the unindexed tail scan started.
    pub scanned_from: LogPosition,
    /// Frames read by the tail scan.
    pub frames_scanned: u64,
    /// Events added to the index by the scan.
    pub events_recovered: u64,
    /// The torn frame truncated from the tail, if any.
    pub truncated: Option<BadFrame>,
    /// The log ends before the position its last writer had published as durable (`ACKED`):
    /// acknowledged frames are missing. A salvage goes on from where the log ends; a
    /// read-only open with no live writer reports it (and `recovery_pending` says it);
    /// a read-write open without salvage refuses
    /// ([`crate::error::OpenError::AcknowledgedLost`]).
    pub acknowledged_lost: Option<AcknowledgedLoss>,
    /// Zero bytes after the log's end that a writer preallocated and did not get to cut
    /// (it did not close; format-spec.md §2): not damage, and not counted in `truncated`.
    /// A read-write open cuts them; a read-only open reads the log up to them.
    pub preallocated_cut: u64,
    /// Bad frames skipped (salvage mode).
    pub skipped_frames: Vec<BadFrame>,
    /// Events dropped (salvage mode) because their session had a gap before them, their
    /// session's creation record was lost, or a damaged frame interrupted their operation:
    /// (session id, or `session number N` when the id was lost with its creation record; seq;
    /// frame position). See [`RecoveryReport::dropped_ranges`].
    pub dropped_events: Vec<(String, Seq, LogPosition)>,
    /// Frames of an operation cut at the tail because its last frame never reached the log
    /// (part of `truncated`).
    pub torn_operation_frames: u64,
    /// The sessions whose events were in those frames: what a crash cut from each (a session
    /// created by the cut operation itself is absent and not listed). A torn single frame
    /// fails its CRC and names no session; `truncated` still reports it by position.
    pub torn_sessions: Vec<TornSession>,
    /// True when the index disagreed with the log and was rebuilt from scratch.
    pub index_rebuilt: bool,
    /// Why the index was rebuilt.
    pub rebuild_reason: Option<String>,
    /// An empty or torn-at-creation last segment that was removed.
    pub removed_segment: Option<u64>,
    /// Sessions whose state could not be replayed after recovery (session id, error); the
    /// error returns when the session is used (e.g. a damaged frame behind the watermark).
    /// Filled by the opens that catch up (a read-only open, an index built from the whole
    /// log); a writable open after a crash leaves each session's catch-up to its first use.
    pub catch_up_failures: Vec<(String, String)>,
    /// A read-only open of a store that needs recovery (its writer crashed: redb commits to
    /// repair, an unindexed or torn log tail, a damaged, missing or old index): why. The
    /// answers are still complete (the repair was done in memory); the next read-write open
    /// (`sessionlog recover`) repairs the files. Always `None` for a read-write open.
    pub recovery_pending: Option<String>,
}

/// Acknowledged frames a salvage found missing ([`RecoveryReport::acknowledged_lost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AcknowledgedLoss {
    /// Where the log's last whole operation ends: where the store goes on.
    pub end: LogPosition,
    /// The position the last writer had published as durable.
    pub published: LogPosition,
}

/// The never-committed events of one session that recovery cut from the log's tail
/// ([`RecoveryReport::torn_sessions`]). None of them was acknowledged: an operation's frames
/// are acknowledged only once its last frame is in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TornSession {
    /// The session id.
    pub id: String,
    /// The first seq cut: the session's length after recovery.
    pub first_seq: Seq,
    /// How many of its events were in the cut operation's whole frames.
    pub events: u64,
}

impl RecoveryReport {
    /// [`RecoveryReport::dropped_events`] as ranges: (session, first seq, last seq), one per
    /// run of consecutive seqs of a session, in the order they were dropped.
    pub fn dropped_ranges(&self) -> Vec<(String, Seq, Seq)> {
        let mut ranges: Vec<(String, Seq, Seq)> = Vec::new();
        for (id, seq, _) in &self.dropped_events {
            if let Some(last) = ranges
                .iter_mut()
                .rev()
                .find(|(rid, _, _)| rid == id)
                .filter(|(_, _, end)| end.checked_add(1) == Some(*seq))
            {
                last.2 = *seq;
            } else {
                ranges.push((id.clone(), *seq, *seq));
            }
        }
        ranges
    }
}

/// Everything the store needs after recovery.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub registry: Registry,
    pub active: Option<Active>,
    pub next_segment: u64,
    pub watermark: Watermark,
    pub report: RecoveryReport,
    /// Read-only opens keep the unindexed tail in memory instead of writing it to the index.
    pub overlay: Vec<(u64, Seq, Location)>,
    /// The index was built from the whole log (new, missing, rebuilt), not from a tail.
    pub whole_log: bool,
}

pub(crate) struct RecoveryInput<'a> {
    pub store_dir: &'a Path,
    pub segments: &'a Segments,
    pub index: &'a Index,
    pub mode: RecoveryMode,
    pub limits: FrameLimits,
    /// Recovery may modify the log (truncate a torn tail, remove a torn segment, fsync).
    pub writable: bool,
    /// Recovery may write the index (a read-write open, or a read-only open whose index is an
    /// in-memory copy); otherwise the unindexed tail is kept in [`Recovered::overlay`].
    pub index_writable: bool,
    /// The position the store's last writer published as durable in `ACKED` (a read-write
    /// open; `None` when there is none or it is not to be checked): a log that ends before
    /// it lost acknowledged frames.
    pub acked: Option<LogPosition>,
}

/// Runs recovery: a sequence of phases, each of which states what it guarantees.
///
/// 1. [`check_segments`]: the segment files are ours, of a supported version, contiguous.
/// 2. [`load_index`]: the index's watermark is backed by the log (or the index is rebuilt).
/// 3. [`Tail::replay`]: the frames past the watermark are applied to the sessions.
/// 4. [`cut_torn_tail`]: a torn tail is cut from the log.
/// 5. [`make_durable`]: what the scan read is durable, and the index records it.
/// 6. [`active_segment`] and [`next_segment_number`]: where the next frame goes.
pub(crate) fn recover(input: RecoveryInput<'_>) -> Result<Recovered, OpenError> {
    let mut report = RecoveryReport::default();
    let mut numbers = check_segments(&input, &mut report)?;
    let loaded = load_index(&input, &numbers, &mut report)?;
    let from = scan_start(&loaded.watermark, &numbers);
    report.scanned_from = from;
    let salvage = input.mode == RecoveryMode::SalvageSkippingBadFrames;
    let mut tail = Tail::new(
        loaded.registry,
        loaded.watermark,
        input.index_writable,
        salvage,
    );
    let scanned = tail.replay(&input, &numbers, from, &mut report)?;
    report.torn_sessions = scanned
        .torn_events
        .iter()
        .filter_map(|&(number, first_seq, events)| {
            let row = tail.registry.get(number)?;
            (row.next_seq == first_seq).then(|| TornSession {
                id: row.header.id.to_string(),
                first_seq,
                events,
            })
        })
        .collect();
    let log_end = scanned
        .torn_tail
        .as_ref()
        .map_or(scanned.end, |torn| torn.position);
    if let Some(published) = input.acked
        && lost_acknowledged(input.segments, &numbers, published, log_end)
    {
        if !salvage && input.writable {
            return Err(OpenError::AcknowledgedLost {
                end: log_end,
                published,
            });
        }
        report.acknowledged_lost = Some(AcknowledgedLoss {
            end: log_end,
            published,
        });
    }
    let end = cut_torn_tail(&input, &mut numbers, &scanned, &mut report)?;
    // Whether recovery changed anything the files must record (else a clean open writes
    // nothing and issues no fsync).
    let changed = scanned.frames > 0
        || report.truncated.is_some()
        || report.preallocated_cut > 0
        || report.index_rebuilt
        || report.removed_segment.is_some()
        || loaded.fresh;
    make_durable(&input, &numbers, from, changed, &mut tail)?;
    let active = active_segment(&input, &numbers, end, &tail.running, changed)?;
    let next_segment = next_segment_number(&numbers, report.removed_segment);
    Ok(Recovered {
        registry: tail.registry,
        active,
        next_segment,
        watermark: tail.running,
        whole_log: loaded.fresh || report.index_rebuilt,
        report,
        overlay: tail.overlay,
    })
}

/// Whether a log of segments `numbers` that ends at `end` lost frames before `published`, a
/// position its last writer published as durable: `published` is past `end` in the last
/// segment (or in a segment after it, now missing) and past a segment header. A published
/// position in an earlier segment is always behind the log's end; one in a compacted segment
/// (whose offsets a GC changed) is not checked.
pub(crate) fn lost_acknowledged(
    segments: &Segments,
    numbers: &[u64],
    published: LogPosition,
    end: LogPosition,
) -> bool {
    let last = numbers.last().copied().unwrap_or(0);
    published > end
        && published.offset > SEGMENT_HEADER_LEN
        && published.segment >= last
        && !(published.segment == last && segment::is_compacted(segments.version(last)))
}

/// Maps an I/O error on `path` to [`OpenError::Io`].
fn io(path: PathBuf) -> impl FnOnce(std::io::Error) -> OpenError {
    move |source| OpenError::Io { path, source }
}

/// Phase 1: checks the segment files and returns the numbers of those kept, ascending.
///
/// Guarantees, on `Ok`: every segment kept has a valid header of a supported format version
/// (recorded in `segments` with [`Segments::set_version`]), and the numbers are contiguous.
/// A last segment torn at its creation (a crash mid-roll: no more than a header's bytes, each
/// either the expected one or zero) is dropped from the numbers, removed from disk when
/// `writable`, and reported in [`RecoveryReport::removed_segment`]. Any other bad header is
/// an error: [`OpenError::UnsupportedFormat`], [`OpenError::Corruption`] or
/// [`OpenError::NotASegment`]; a gap is [`OpenError::MissingSegment`].
fn check_segments(
    input: &RecoveryInput<'_>,
    report: &mut RecoveryReport,
) -> Result<Vec<u64>, OpenError> {
    let segments = input.segments;
    let numbers = segments.list().map_err(io(segments.dir().to_path_buf()))?;
    let last = numbers.last().copied();
    let mut good = Vec::with_capacity(numbers.len());
    for &n in &numbers {
        let path = segments.path(n);
        let file = segments.file(n).map_err(io(path.clone()))?;
        let len = file.len().map_err(io(path.clone()))?;
        let mut head = vec![0u8; (len.min(SEGMENT_HEADER_LEN)) as usize];
        file.read_exact_at(&mut head, 0).map_err(io(path.clone()))?;
        let expected = segment::encode_header(n);
        let torn_creation = Some(n) == last
            && len <= SEGMENT_HEADER_LEN
            && head
                .iter()
                .enumerate()
                .all(|(i, &b)| b == expected[i] || b == 0);
        match segment::check_header(&head, n) {
            HeaderCheck::Valid { version } => {
                segments.set_version(n, version);
                good.push(n);
            }
            _ if torn_creation => {
                // Created, but its header never fully reached the disk: a crash mid-roll.
                if input.writable {
                    segments.remove(n).map_err(io(path))?;
                }
                report.removed_segment = Some(n);
            }
            HeaderCheck::OtherVersion(found) => {
                return Err(OpenError::UnsupportedFormat {
                    path,
                    found,
                    supported: segment::NEWEST_READ_VERSION,
                });
            }
            HeaderCheck::Damaged(e) => {
                return Err(OpenError::Corruption {
                    position: LogPosition {
                        segment: n,
                        offset: 0,
                    },
                    reason: Damage::SegmentHeader(e),
                });
            }
            HeaderCheck::BadMagic => return Err(OpenError::NotASegment { path }),
        }
    }
    check_contiguous(&good)?;
    Ok(good)
}

/// Part of phase 1: `Ok` when `numbers` (ascending) has no gap, else the first missing one.
fn check_contiguous(numbers: &[u64]) -> Result<(), OpenError> {
    if let (Some(&first), Some(&last)) = (numbers.first(), numbers.last()) {
        for (i, &n) in numbers.iter().enumerate() {
            if n != first + i as u64 {
                return Err(OpenError::MissingSegment {
                    missing: first + i as u64,
                    first,
                    last,
                });
            }
        }
    }
    Ok(())
}

/// Where the unindexed tail starts: just past the watermark, or the first frame of the
/// first segment (segment 1 when there is none) for an empty watermark.
fn scan_start(watermark: &Watermark, numbers: &[u64]) -> LogPosition {
    if watermark.segment == 0 {
        LogPosition {
            segment: numbers.first().copied().unwrap_or(1),
            offset: SEGMENT_HEADER_LEN,
        }
    } else {
        LogPosition {
            segment: watermark.segment,
            offset: watermark.end,
        }
    }
}

/// Phase 3: the unindexed tail replayed onto the sessions the index recorded.
///
/// After [`Tail::replay`], `registry` holds every session as of the last whole operation of
/// the log, `running` is just past that operation's last frame, and everything the index
/// lacks up to `running` is in `batch` (plus `dirty` rows not yet flushed into it) or, when
/// the index may not be written, its event locations are in `overlay`.
struct Tail {
    registry: Registry,
    /// Index operations, session rows and event locations not yet committed.
    batch: IndexBatch,
    /// Event locations kept in memory instead (an index that may not be written).
    overlay: Vec<(u64, Seq, Location)>,
    /// Sessions whose rows changed since they were last put in `batch`.
    dirty: BTreeSet<u64>,
    /// The session last marked in `dirty` by an event, while it is still there.
    last_dirty: Option<u64>,
    /// Just past the last frame replayed: the index's watermark once `batch` is committed.
    running: Watermark,
    /// Events go to `batch` (else to `overlay`), and large batches are committed on the way.
    index_writable: bool,
    /// Salvage mode: records of lost sessions and events after a gap are dropped (and
    /// reported) instead of failing recovery.
    salvage: bool,
}

impl Tail {
    fn new(registry: Registry, watermark: Watermark, index_writable: bool, salvage: bool) -> Tail {
        Tail {
            registry,
            batch: IndexBatch::default(),
            overlay: Vec::new(),
            dirty: BTreeSet::new(),
            last_dirty: None,
            running: watermark,
            index_writable,
            salvage,
        }
    }

    /// Scans the log from `from` and applies every whole operation found (see [`Tail`]).
    /// Guarantees: when the batch holds 65,536 events or more at the end of an operation, it
    /// is committed to the index (not durably, with the watermark just past that operation);
    /// the scan's counts are in `report`. Returns the scan's report (its end and torn tail).
    fn replay(
        &mut self,
        input: &RecoveryInput<'_>,
        numbers: &[u64],
        from: LogPosition,
        report: &mut RecoveryReport,
    ) -> Result<ScanReport, OpenError> {
        let mut visit =
            |frame: ScannedFrame| self.frame(frame, input.index, input.segments, report);
        let scanned = scan::scan(
            input.segments,
            numbers,
            from,
            input.mode,
            &input.limits,
            &mut visit,
        )?;
        report.frames_scanned = scanned.frames;
        report.skipped_frames = scanned.skipped.clone();
        report.torn_operation_frames = scanned.torn_operation_frames;
        Ok(scanned)
    }

    /// The scan's visitor: applies one valid frame's records, then advances `running`.
    fn frame(
        &mut self,
        frame: ScannedFrame,
        index: &Index,
        segments: &Segments,
        report: &mut RecoveryReport,
    ) -> Result<(), OpenError> {
        let version = segments.version(frame.position.segment);
        if frame.dropped {
            if let Ok(records) = Record::decode_all(&frame.payload) {
                self.report_dropped(records, frame.position, report);
            }
            return Ok(());
        }
        let compacted = segments
            .first_compacted()
            .is_some_and(|c| c <= frame.position.segment);
        let payload = &frame.payload[..];
        let mut at = 0usize;
        let mut context = FrameContext::new();
        let damage = |reason| OpenError::Corruption {
            position: frame.position,
            reason,
        };
        while let Some(bytes) = payload.get(at..).filter(|b| !b.is_empty()) {
            let record_offset = at as u32;
            if Record::is_lean(bytes) && !segment::allows_lean_events(version) {
                return Err(damage(Damage::RecordNotInVersion {
                    record: "lean event",
                    version,
                }));
            }
            // An event record (nearly all of them) is read by its header: no copy of its
            // strings (their UTF-8 is still checked, as a full decode would).
            if let Some(head) = peek_event(bytes, Utf8::Check) {
                let (seq, time) = context
                    .resolved(&head)
                    .map_err(Damage::Records)
                    .map_err(damage)?;
                context.note(head.session, seq, time);
                at += head.len;
                if compacted && self.registry.get(head.session).is_none() {
                    continue;
                }
                let loc = Location {
                    segment: frame.position.segment,
                    frame_offset: frame.position.offset,
                    frame_len: frame.frame_len,
                    record_offset,
                };
                let (session, data_len) = (head.session, head.data_len);
                self.event(session, seq, time, data_len, loc, report)?;
                continue;
            }
            let (record, rest) =
                Record::decode_in(bytes, &mut context).map_err(|e| damage(Damage::Records(e)))?;
            at = payload.len() - rest.len();
            if compacted && super::gc::collected(&self.registry, &record) {
                continue;
            }
            self.apply(record_offset, record, &frame, version, report)?;
        }
        self.running = Watermark {
            segment: frame.position.segment,
            end: frame.position.offset + u64::from(frame.frame_len),
            last_frame: frame.position.offset,
        };
        if self.index_writable && !frame.continued && self.batch.events.len() >= 65_536 {
            self.commit(index, false)?;
        }
        Ok(())
    }

    /// A valid frame of an operation a damaged frame interrupted (salvage): names what it
    /// held in the report, indexes none of it.
    fn report_dropped(
        &self,
        records: Vec<(u32, Record)>,
        position: LogPosition,
        report: &mut RecoveryReport,
    ) {
        for (_, record) in records {
            if let Record::Event { session, event } = record {
                let id = self.registry.get(session).map_or_else(
                    || format!("session number {session}"),
                    |r| r.header.id.clone(),
                );
                report.dropped_events.push((id, event.seq, position));
            }
        }
    }

    /// Applies one record of a whole operation's frame.
    fn apply(
        &mut self,
        record_offset: u32,
        record: Record,
        frame: &ScannedFrame,
        version: u32,
        report: &mut RecoveryReport,
    ) -> Result<(), OpenError> {
        let position = frame.position;
        match record {
            Record::Verbatim { .. } if version < 3 => {
                return Err(OpenError::Corruption {
                    position,
                    reason: Damage::RecordNotInVersion {
                        record: "Verbatim",
                        version,
                    },
                });
            }
            Record::Verbatim { session } => {
                if self.salvage && self.registry.get(session).is_none() {
                    return Ok(());
                }
                let row = self
                    .registry
                    .mark_verbatim(session)
                    .map_err(|e| corrupt(position, e))?;
                self.dirty.insert(row.number);
            }
            Record::CreateSession { session, header } => {
                let rows = self
                    .registry
                    .create(session, header, None)
                    .map_err(|e| corrupt(position, e))?;
                self.dirty.extend(rows.iter().map(|r| r.number));
            }
            Record::ForkSession {
                session,
                parent,
                seed_length,
                header,
            } => {
                if self.salvage && self.registry.get(parent).is_none() {
                    // The parent's creation was lost: the fork cannot be read.
                    report.dropped_events.push((header.id.clone(), 0, position));
                    return Ok(());
                }
                let rows = self
                    .registry
                    .create(session, header, Some((parent, seed_length)))
                    .map_err(|e| corrupt(position, e))?;
                self.dirty.extend(rows.iter().map(|r| r.number));
            }
            Record::DeleteSession { session } => self.delete(session, position)?,
            Record::Event { session, event } => {
                let loc = Location {
                    segment: frame.position.segment,
                    frame_offset: frame.position.offset,
                    frame_len: frame.frame_len,
                    record_offset,
                };
                let data_len = event.data.len();
                self.event(session, event.seq, event.time, data_len, loc, report)?;
            }
        }
        Ok(())
    }

    /// A delete record: the index operations it implies join the batch, and events of a
    /// purged session still in the batch leave it.
    fn delete(&mut self, session: u64, position: LogPosition) -> Result<(), OpenError> {
        if self.salvage && self.registry.get(session).is_none() {
            return Ok(());
        }
        let (ops, rows) = self
            .registry
            .delete(session)
            .map_err(|e| corrupt(position, e))?;
        for r in &rows {
            self.dirty.insert(r.number);
        }
        for op in &ops {
            if let crate::index::IndexOp::Purge { session, .. } = op {
                self.dirty.remove(session);
                self.last_dirty = None;
                self.batch.events.retain(|(s, _, _)| s != session);
            }
        }
        self.batch.ops.extend(ops);
        Ok(())
    }

    /// An event record at `loc`: checked against its session (salvage drops one after a gap
    /// or of a lost session), then indexed (batch or overlay).
    fn event(
        &mut self,
        session: u64,
        seq: Seq,
        time: i64,
        data_len: usize,
        loc: Location,
        report: &mut RecoveryReport,
    ) -> Result<(), OpenError> {
        let position = LogPosition {
            segment: loc.segment,
            offset: loc.frame_offset,
        };
        match self.registry.event(session, seq, time, data_len) {
            Ok(_) => {}
            Err(RegistryError::Gap { id, got, .. }) if self.salvage => {
                report.dropped_events.push((id, got, position));
                return Ok(());
            }
            Err(RegistryError::Unknown(n)) if self.salvage => {
                // Its creation record was in a damaged frame.
                report
                    .dropped_events
                    .push((format!("session number {n}"), seq, position));
                return Ok(());
            }
            Err(e) => return Err(corrupt(position, e)),
        }
        if self.index_writable {
            self.batch.events.push((session, seq, loc));
        } else {
            self.overlay.push((session, seq, loc));
        }
        // Events come in runs of one session: its row is marked once per run.
        if self.last_dirty != Some(session) {
            self.dirty.insert(session);
            self.last_dirty = Some(session);
        }
        report.events_recovered += 1;
        Ok(())
    }

    /// Commits the batch (with the dirty sessions' rows) and the running watermark to the
    /// index, `durable` or not, and starts an empty batch.
    fn commit(&mut self, index: &Index, durable: bool) -> Result<(), OpenError> {
        flush_rows(&mut self.batch, &mut self.dirty, &self.registry);
        self.last_dirty = None;
        index.commit(&self.batch, self.running, durable)?;
        self.batch = IndexBatch::default();
        Ok(())
    }
}

/// A frame that passes its CRC but whose records do not apply: corruption at `position`.
fn corrupt(position: LogPosition, reason: super::registry::RegistryError) -> OpenError {
    OpenError::Corruption {
        position,
        reason: Damage::Registry(reason),
    }
}

/// Phase 4: cuts a torn tail: a torn frame, or an operation whose last frame is missing
/// (which may have started in an earlier segment: the later segments hold only its frames).
/// Without one, cuts the zero tail a writer preallocated ([`ScanReport::zero_tail`]).
///
/// Guarantees: with a torn tail, `numbers` ends at the segment of the cut and the tail is
/// reported in [`RecoveryReport::truncated`]; when `writable`, every later segment was
/// removed (last first), then the cut segment truncated at the cut and synced. Returns where
/// the log now ends.
fn cut_torn_tail(
    input: &RecoveryInput<'_>,
    numbers: &mut Vec<u64>,
    scanned: &ScanReport,
    report: &mut RecoveryReport,
) -> Result<LogPosition, OpenError> {
    let Some(torn) = &scanned.torn_tail else {
        if let Some((at, len)) = scanned.zero_tail {
            if input.writable {
                let path = input.segments.path(at.segment);
                let file = input.segments.file(at.segment).map_err(io(path.clone()))?;
                file.set_len(at.offset).map_err(io(path.clone()))?;
                file.sync_data().map_err(io(path))?;
            }
            report.preallocated_cut = len;
        }
        return Ok(scanned.end);
    };
    let segments = input.segments;
    let cut = torn.position;
    if input.writable {
        let path = segments.path(cut.segment);
        let file = segments.file(cut.segment).map_err(io(path.clone()))?;
        for &n in numbers.iter().rev().filter(|&&n| n > cut.segment) {
            segments.remove(n).map_err(io(segments.path(n)))?;
        }
        file.set_len(cut.offset).map_err(io(path.clone()))?;
        file.sync_data().map_err(io(path))?;
    }
    numbers.retain(|&n| n <= cut.segment);
    report.truncated = Some(torn.clone());
    Ok(cut)
}

/// Phase 5: makes what recovery read and changed durable, when it `changed` anything.
///
/// What was read may exist only in the page cache: the previous process died before syncing
/// it, or a truncation after a failed write never reached the disk. Before the index claims
/// scanned frames durably, the scanned segments (from `from`'s on) are synced; otherwise the
/// last segment is synced by the committer before anything is written after it (so a clean
/// open issues no fsync). Guarantees, on `Ok` with `changed`: when `writable`, every scanned
/// segment was synced (in order); then, when the index may be written, the tail's batch and
/// watermark were committed to it durably.
fn make_durable(
    input: &RecoveryInput<'_>,
    numbers: &[u64],
    from: LogPosition,
    changed: bool,
    tail: &mut Tail,
) -> Result<(), OpenError> {
    if input.writable && changed {
        for &n in numbers.iter().filter(|&&n| n >= from.segment) {
            sync_scanned(input.segments, n)?;
        }
    }
    if input.index_writable && changed {
        tail.commit(input.index, true)?;
    }
    Ok(())
}

/// Part of phase 5: syncs segment `n`. When the sync fails, what the scan read may now be
/// only in the page cache, marked clean by the failed sync: it is written again (and synced
/// once more) so a later sync persists it; the first error is returned either way.
fn sync_scanned(segments: &Segments, n: u64) -> Result<(), OpenError> {
    let path = segments.path(n);
    segments
        .file(n)
        .and_then(|f| {
            f.sync_data().inspect_err(|_| {
                let _ = f
                    .len()
                    .and_then(|len| super::commit::rewrite(&*f, len))
                    .and_then(|()| f.sync_data());
            })
        })
        .map_err(io(path))
}

/// Phase 6: the segment the next frame is appended to (read-write only): the last one kept,
/// at the log's `end` when the scan ended in it (else its length), with the last frame
/// replayed in it. Durable once synced: by [`make_durable`] when recovery `changed`
/// anything, else by the committer before its first write (`unverified`). A segment of an
/// older format version is sealed (the next frame rolls over).
fn active_segment(
    input: &RecoveryInput<'_>,
    numbers: &[u64],
    end: LogPosition,
    running: &Watermark,
    changed: bool,
) -> Result<Option<Active>, OpenError> {
    let segments = input.segments;
    let n = match numbers.last() {
        Some(&n) if input.writable => n,
        _ => return Ok(None),
    };
    let len = if end.segment == n {
        end.offset
    } else {
        segments
            .file(n)
            .and_then(|f| f.len())
            .map_err(io(segments.path(n)))?
    };
    Ok(Some(Active {
        number: n,
        file: segments.file(n).map_err(io(segments.path(n)))?,
        len,
        last_frame: if running.segment == n && running.last_frame != u64::MAX {
            Some(running.last_frame)
        } else {
            None
        },
        synced_len: len,
        reserved: len,
        unverified: !changed,
        sealed: segments.version(n) != segment::FORMAT_VERSION,
    }))
}

/// Phase 6: the number of the next segment: the one after the last kept (numbers stay
/// contiguous after a cut removed later segments); with none left, a `removed` segment's
/// number is reused (else 1).
fn next_segment_number(numbers: &[u64], removed: Option<u64>) -> u64 {
    numbers
        .last()
        .map_or(removed.unwrap_or(1).max(1), |n| n + 1)
}

fn flush_rows(batch: &mut IndexBatch, dirty: &mut BTreeSet<u64>, registry: &Registry) {
    for n in std::mem::take(dirty) {
        if let Some(row) = registry.get(n) {
            batch.sessions.push(row.clone());
        }
    }
}
