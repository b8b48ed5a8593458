//! Recovery on open: check segment headers, validate the index watermark against the log, scan
//! only the unindexed tail, truncate a torn tail, and bring the index up to date.

use std::collections::BTreeSet;
use std::path::Path;

use crate::error::{Damage, LogPosition, OpenError};
use crate::event::Seq;
use crate::index::{Index, IndexBatch, Location, Watermark};
use crate::log::Segments;
use crate::log::frame::FrameLimits;
use crate::log::record::Record;
use crate::log::scan::{self, BadFrame, RecoveryMode, ScannedFrame};
use crate::log::segment::{self, HeaderCheck, SEGMENT_HEADER_LEN};

use super::commit::Active;
use super::registry::Registry;

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
    /// True when the index disagreed with the log and was rebuilt from scratch.
    pub index_rebuilt: bool,
    /// Why the index was rebuilt.
    pub rebuild_reason: Option<String>,
    /// An empty or torn-at-creation last segment that was removed.
    pub removed_segment: Option<u64>,
    /// Sessions whose state could not be replayed after recovery (session id, error); the
    /// error returns when the session is used (e.g. a damaged frame behind the watermark).
    pub catch_up_failures: Vec<(String, String)>,
    /// A read-only open of a store that needs recovery (its writer crashed: redb commits to
    /// repair, an unindexed or torn log tail, a damaged, missing or old index): why. The
    /// answers are still complete (the repair was done in memory); the next read-write open
    /// (`sessionlog recover`) repairs the files. Always `None` for a read-write open.
    pub recovery_pending: Option<String>,
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
}

/// Runs recovery.
pub(crate) fn recover(input: RecoveryInput<'_>) -> Result<Recovered, OpenError> {
    let RecoveryInput {
        store_dir,
        segments,
        index,
        mode,
        limits,
        writable,
        index_writable,
    } = input;
    let mut report = RecoveryReport::default();
    let io = |path: std::path::PathBuf| move |source| OpenError::Io { path, source };
    let mut numbers = segments.list().map_err(io(segments.dir().to_path_buf()))?;

    // Segment headers: every file must be ours and of this version; the numbers contiguous.
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
                if writable {
                    segments.remove(n).map_err(io(path))?;
                }
                report.removed_segment = Some(n);
            }
            HeaderCheck::OtherVersion(found) => {
                return Err(OpenError::UnsupportedFormat {
                    path,
                    found,
                    supported: segment::FORMAT_VERSION,
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
    numbers = good;
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

    // The index: its format version, and whether its watermark is still backed by the log.
    // An index of an older version is derived data: a writable open rebuilds it from the log
    // (a read-only open never gets here with one: it builds an index in memory instead). A
    // newer version is refused.
    let state = index.load()?;
    let mut old_version = None;
    if let Some(v) = state.format_version
        && v != crate::index::INDEX_FORMAT_VERSION
    {
        if v > crate::index::INDEX_FORMAT_VERSION {
            return Err(OpenError::UnsupportedFormat {
                path: store_dir.join(super::INDEX_FILE),
                found: v,
                supported: crate::index::INDEX_FORMAT_VERSION,
            });
        }
        old_version = Some(format!(
            "the index has format version {v}, this build uses version {}",
            crate::index::INDEX_FORMAT_VERSION
        ));
    }
    let mut watermark = state.watermark;
    let mut rows = state.sessions;
    let mut next_session = state.next_session;
    let problem = match old_version {
        Some(reason) => Some(reason),
        None => watermark_problem(segments, &numbers, &watermark, &limits)?,
    };
    if let Some(reason) = problem {
        // Read-only: an index that claims more than the log holds means acknowledged data is
        // damaged, not a crash; it is refused rather than silently rebuilt (an older version
        // was already replaced by an index built in memory, see `Store::open`).
        if !writable || !index_writable {
            return Err(OpenError::NeedsRepair {
                path: store_dir.to_path_buf(),
                reason,
            });
        }
        index.clear()?;
        rows.clear();
        next_session = 0;
        watermark = Watermark::default();
        report.index_rebuilt = true;
        report.rebuild_reason = Some(reason);
    }

    let mut registry = Registry::new(rows.into_iter().map(|(_, row)| row), next_session);

    // Scan the unindexed tail.
    let from = if watermark.segment == 0 {
        LogPosition {
            segment: numbers.first().copied().unwrap_or(1),
            offset: SEGMENT_HEADER_LEN,
        }
    } else {
        LogPosition {
            segment: watermark.segment,
            offset: watermark.end,
        }
    };
    report.scanned_from = from;
    let mut batch = IndexBatch::default();
    let mut overlay = Vec::new();
    let mut dirty: BTreeSet<u64> = BTreeSet::new();
    let mut running = watermark;
    let salvage = mode == RecoveryMode::SalvageSkippingBadFrames;
    let mut visit = |frame: ScannedFrame| -> Result<(), OpenError> {
        let records = match Record::decode_all(&frame.payload) {
            Ok(records) => records,
            Err(_) if frame.dropped => return Ok(()),
            Err(e) => {
                return Err(OpenError::Corruption {
                    position: frame.position,
                    reason: Damage::Records(e),
                });
            }
        };
        if frame.dropped {
            // A valid frame of an operation a damaged frame interrupted (salvage): name what
            // it held, index none of it.
            for (_, record) in records {
                if let Record::Event { session, event } = record {
                    let id = registry.get(session).map_or_else(
                        || format!("session number {session}"),
                        |r| r.header.id.clone(),
                    );
                    report.dropped_events.push((id, event.seq, frame.position));
                }
            }
            return Ok(());
        }
        let corrupt = |e: super::registry::RegistryError| OpenError::Corruption {
            position: frame.position,
            reason: Damage::Registry(e),
        };
        for (record_offset, record) in records {
            match record {
                Record::CreateSession { session, header } => {
                    let rows = registry.create(session, header, None).map_err(corrupt)?;
                    dirty.extend(rows.iter().map(|r| r.number));
                }
                Record::ForkSession {
                    session,
                    parent,
                    seed_length,
                    header,
                } => {
                    if salvage && registry.get(parent).is_none() {
                        // The parent's creation was lost: the fork cannot be read.
                        report
                            .dropped_events
                            .push((header.id.clone(), 0, frame.position));
                        continue;
                    }
                    let rows = registry
                        .create(session, header, Some((parent, seed_length)))
                        .map_err(corrupt)?;
                    dirty.extend(rows.iter().map(|r| r.number));
                }
                Record::DeleteSession { session } => {
                    if salvage && registry.get(session).is_none() {
                        continue;
                    }
                    let (ops, rows) = registry.delete(session).map_err(corrupt)?;
                    for r in &rows {
                        dirty.insert(r.number);
                    }
                    for op in &ops {
                        if let crate::index::IndexOp::Purge { session, .. } = op {
                            dirty.remove(session);
                            batch.events.retain(|(s, _, _)| s != session);
                        }
                    }
                    batch.ops.extend(ops);
                }
                Record::Event { session, event } => {
                    let data_len = event.data.len();
                    match registry.event(session, event.seq, event.time, data_len) {
                        Ok(_) => {}
                        Err(super::registry::RegistryError::Gap { id, got, .. }) if salvage => {
                            report.dropped_events.push((id, got, frame.position));
                            continue;
                        }
                        Err(super::registry::RegistryError::Unknown(n)) if salvage => {
                            // Its creation record was in a damaged frame.
                            report.dropped_events.push((
                                format!("session number {n}"),
                                event.seq,
                                frame.position,
                            ));
                            continue;
                        }
                        Err(e) => return Err(corrupt(e)),
                    }
                    let loc = Location {
                        segment: frame.position.segment,
                        frame_offset: frame.position.offset,
                        frame_len: frame.frame_len,
                        record_offset,
                    };
                    if index_writable {
                        batch.events.push((session, event.seq, loc));
                    } else {
                        overlay.push((session, event.seq, loc));
                    }
                    dirty.insert(session);
                    report.events_recovered += 1;
                }
            }
        }
        running = Watermark {
            segment: frame.position.segment,
            end: frame.position.offset + u64::from(frame.frame_len),
            last_frame: frame.position.offset,
        };
        if index_writable && !frame.continued && batch.events.len() >= 65_536 {
            flush_rows(&mut batch, &mut dirty, &registry);
            index.commit(&batch, running, false)?;
            batch = IndexBatch::default();
        }
        Ok(())
    };
    let scan_report = scan::scan(segments, &numbers, from, mode, &limits, &mut visit)?;
    report.frames_scanned = scan_report.frames;
    report.skipped_frames = scan_report.skipped.clone();
    report.torn_operation_frames = scan_report.torn_operation_frames;

    // Truncate a torn tail: a torn frame, or an operation whose last frame is missing (which
    // may have started in an earlier segment: the later segments hold only its frames).
    let mut end = scan_report.end;
    if let Some(torn) = &scan_report.torn_tail {
        let cut = torn.position;
        if writable {
            let path = segments.path(cut.segment);
            let file = segments.file(cut.segment).map_err(io(path.clone()))?;
            for &n in numbers.iter().rev().filter(|&&n| n > cut.segment) {
                segments.remove(n).map_err(io(segments.path(n)))?;
            }
            file.set_len(cut.offset).map_err(io(path.clone()))?;
            file.sync_data().map_err(io(path))?;
        }
        numbers.retain(|&n| n <= cut.segment);
        end = cut;
        report.truncated = Some(torn.clone());
    }
    let changed = scan_report.frames > 0
        || report.truncated.is_some()
        || report.index_rebuilt
        || report.removed_segment.is_some()
        || state.format_version.is_none();
    // What was read may exist only in the page cache: the previous process died before
    // syncing it, or a truncation after a failed write never reached the disk. Before the
    // index claims scanned frames durably, the scanned segments are synced; otherwise the
    // last segment is synced by the committer before anything is written after it (so a
    // clean open issues no fsync).
    if writable && changed {
        for &n in numbers.iter().filter(|&&n| n >= from.segment) {
            let path = segments.path(n);
            segments
                .file(n)
                .and_then(|f| {
                    f.sync_data().inspect_err(|_| {
                        // What the scan read may now be only in the page cache, marked clean
                        // by the failed sync: write it again so a later sync persists it.
                        let _ = f
                            .len()
                            .and_then(|len| super::commit::rewrite(&*f, len))
                            .and_then(|()| f.sync_data());
                    })
                })
                .map_err(io(path))?;
        }
    }
    if index_writable && changed {
        flush_rows(&mut batch, &mut dirty, &registry);
        index.commit(&batch, running, true)?;
    }

    let active = match numbers.last() {
        Some(&n) if writable => {
            let len = if end.segment == n {
                end.offset
            } else {
                segments
                    .file(n)
                    .and_then(|f| f.len())
                    .map_err(io(segments.path(n)))?
            };
            Some(Active {
                number: n,
                file: segments.file(n).map_err(io(segments.path(n)))?,
                len,
                last_frame: if running.segment == n && running.last_frame != u64::MAX {
                    Some(running.last_frame)
                } else {
                    None
                },
                // Durable once synced: above when recovery changed anything, else by the
                // committer before its first write (`unverified`).
                synced_len: len,
                unverified: !changed,
                sealed: segments.version(n) < segment::FORMAT_VERSION,
            })
        }
        _ => None,
    };
    // The next segment follows the last one kept (numbers stay contiguous after a cut removed
    // later segments); with none left, a removed segment's number is reused.
    let next_segment = numbers
        .last()
        .map_or(report.removed_segment.unwrap_or(1).max(1), |n| n + 1);
    Ok(Recovered {
        registry,
        active,
        next_segment,
        watermark: running,
        report,
        overlay,
    })
}

fn flush_rows(batch: &mut IndexBatch, dirty: &mut BTreeSet<u64>, registry: &Registry) {
    for n in std::mem::take(dirty) {
        if let Some(row) = registry.get(n) {
            batch.sessions.push(row.clone());
        }
    }
}

/// Why the index's watermark is not backed by the log (`None` when it is).
fn watermark_problem(
    segments: &Segments,
    numbers: &[u64],
    w: &Watermark,
    limits: &FrameLimits,
) -> Result<Option<String>, OpenError> {
    if w.segment == 0 {
        return Ok(None);
    }
    if !numbers.contains(&w.segment) {
        return Ok(Some(format!(
            "the index covers segment {}, which is not in the log",
            w.segment
        )));
    }
    let path = segments.path(w.segment);
    let file = segments.file(w.segment).map_err(|source| OpenError::Io {
        path: path.clone(),
        source,
    })?;
    let len = file
        .len()
        .map_err(|source| OpenError::Io { path, source })?;
    if len < w.end {
        return Ok(Some(format!(
            "the index covers segment {} up to offset {}, but the segment is only {len} bytes",
            w.segment, w.end
        )));
    }
    if w.last_frame == u64::MAX || w.last_frame >= w.end {
        return Ok(None);
    }
    let frame_len = w.end - w.last_frame;
    let ok = u32::try_from(frame_len)
        .ok()
        .map(|fl| {
            segments
                .read_frame(
                    LogPosition {
                        segment: w.segment,
                        offset: w.last_frame,
                    },
                    fl,
                    limits,
                )
                .is_ok()
        })
        .unwrap_or(false);
    Ok(if ok {
        None
    } else {
        Some(format!(
            "the last frame the index covers (segment {} offset {}) is not valid in the log",
            w.segment, w.last_frame
        ))
    })
}
