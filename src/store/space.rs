//! `Store::space`: where the bytes of the log go (`sessionlog du`), and what a segment GC
//! would free (format-spec.md, "GC (not yet implemented)").
//!
//! Every segment is scanned the way `verify` scans it (CRC-checked frames, records decoded),
//! and each byte of each segment file is attributed to exactly one bucket:
//!
//! - **live**: records of live sessions (creation, fork, verbatim mark, events);
//! - **pinned**: records of deleted sessions that forks still read through (a fork's
//!   inherited events live in its parent's records), including the parent's creation and
//!   deletion records, which a rebuilt index needs;
//! - **dead**: records of sessions the index no longer holds (purged, or whose creation never
//!   committed), events of a deleted parent past what its forks inherit, records recovery did
//!   not index (dropped by salvage), and damaged or torn bytes;
//! - **unindexed**: records newer than this store's view of the index (a live writer's tail
//!   seen by a read-only store); neither live nor dead as far as this view can tell;
//! - **overhead**: the segment header and frame headers;
//! - **preallocated**: the zeros a writer wrote ahead of its last frame in the last segment
//!   (format-spec.md §2), which the next frames fill.
//!
//! A record's bytes are its share of its frame's stored payload: exactly its encoded length
//! in an uncompressed frame, pro rata by raw record bytes in a compressed one (the shares of a
//! frame's records add up to its stored payload exactly). So per segment
//! `live + pinned + dead + unindexed + overhead + preallocated == size`.

use super::*;
use crate::log::frame::FRAME_HEADER_LEN;

/// A sealed segment whose live fraction ([`SegmentSpace::live_fraction`]) is below this is a
/// GC candidate: its live and pinned records would be rewritten forward and the file deleted.
pub const GC_LIVE_FRACTION: f64 = 0.5;

/// Where one session's own records are (its inherited events are its parent's records).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionSpace {
    /// The session id.
    pub id: String,
    /// The store-internal session number ([`SessionInfo::incarnation`]).
    pub number: u64,
    /// Deleted, kept only because forks inherit its events: its bytes are pinned, not live.
    pub deleted: bool,
    /// The session stores its events verbatim.
    pub verbatim: bool,
    /// The parent's session number for a fork (its first `inherited_events` events are the
    /// parent's records).
    pub parent: Option<u64>,
    /// Events inherited from the parent (0 unless a fork).
    pub inherited_events: Seq,
    /// Bytes of its records that are kept: live (or pinned when `deleted`).
    pub bytes: u64,
    /// Its records that are kept (events and metadata records).
    pub records: u64,
    /// Its own event records that are kept.
    pub events: u64,
    /// Bytes of its records that are dead (a deleted parent's events past what its forks
    /// inherit; 0 for a live session).
    pub dead_bytes: u64,
}

/// Where the bytes of one segment file go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SegmentSpace {
    /// The segment number.
    pub number: u64,
    /// Bytes of the file.
    pub size: u64,
    /// Bytes of live sessions' records.
    pub live: u64,
    /// Bytes of deleted sessions' records that forks pin.
    pub pinned: u64,
    /// Dead bytes (records nothing reads, damaged and torn bytes).
    pub dead: u64,
    /// Of `dead`: damaged or torn bytes (no valid frame), and frames whose records do not
    /// decode.
    pub damaged: u64,
    /// Bytes of records newer than this store's view of the index.
    pub unindexed: u64,
    /// The segment header and frame headers.
    pub overhead: u64,
    /// Zero bytes written ahead of the last frame (the last segment of a live or crashed
    /// writer only; format-spec.md §2).
    pub preallocated: u64,
    /// Valid frames.
    pub frames: u64,
    /// Not the last segment: never written again, a GC may collect it.
    pub sealed: bool,
}

impl SegmentSpace {
    /// The share of the file that must be kept: `(live + pinned + unindexed) / size`
    /// (1 for an empty file).
    pub fn live_fraction(&self) -> f64 {
        if self.size == 0 {
            return 1.0;
        }
        (self.live + self.pinned + self.unindexed) as f64 / self.size as f64
    }

    /// A GC candidate: sealed, with a live fraction below [`GC_LIVE_FRACTION`].
    pub fn gc_candidate(&self) -> bool {
        self.sealed && self.live_fraction() < GC_LIVE_FRACTION
    }
}

/// Totals over every segment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SpaceTotals {
    /// Bytes of all segment files.
    pub size: u64,
    /// Live bytes.
    pub live: u64,
    /// Pinned bytes.
    pub pinned: u64,
    /// Dead bytes.
    pub dead: u64,
    /// Of `dead`: damaged or torn bytes.
    pub damaged: u64,
    /// Of `dead`: records of session numbers the index does not hold (purged sessions, and
    /// sessions whose creation never committed), deletion records included.
    pub orphaned: u64,
    /// Of `dead`: events of deleted sessions past what their forks inherit.
    pub unpinned: u64,
    /// Of `dead`: records recovery did not index (events after a gap, frames of an
    /// operation a damaged frame interrupted).
    pub dropped: u64,
    /// Bytes of records newer than this store's view.
    pub unindexed: u64,
    /// Segment and frame headers.
    pub overhead: u64,
    /// Zero bytes a writer wrote ahead of its last frame.
    pub preallocated: u64,
    /// Valid frames.
    pub frames: u64,
    /// Records decoded.
    pub records: u64,
}

/// The result of [`Store::space`].
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct SpaceReport {
    /// Every session the index holds (live, and deleted ones forks pin), by number.
    pub sessions: Vec<SessionSpace>,
    /// Every segment file, ascending.
    pub segments: Vec<SegmentSpace>,
    /// Totals.
    pub totals: SpaceTotals,
    /// The threshold the GC figures use ([`GC_LIVE_FRACTION`]).
    pub gc_threshold: f64,
    /// What a GC would free: the dead bytes of the candidate segments
    /// ([`SegmentSpace::gc_candidate`]).
    pub gc_frees: u64,
    /// What a GC would copy forward: the live and pinned bytes of the candidate segments.
    pub gc_rewrites: u64,
    /// The candidate segments' numbers.
    pub gc_segments: Vec<u64>,
}

/// A record's bucket.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Bucket {
    Live,
    Pinned,
    Orphaned,
    Unpinned,
    Dropped,
    Unindexed,
}

/// What the scan needs of a session row.
struct Known {
    deleted: bool,
    seed_len: Seq,
    next_seq: Seq,
    /// Seqs below this are read (by the session itself or through its forks).
    needed: Seq,
}

/// The share of a frame's stored payload of the raw bytes `from..to` of its `raw` bytes.
fn share(stored: u64, raw: u64, from: u64, to: u64) -> u64 {
    if raw == 0 {
        return 0;
    }
    let at = |x: u64| (u128::from(stored) * u128::from(x) / u128::from(raw)) as u64;
    at(to) - at(from)
}

/// Sees each frame [`Store::space_with`] scans, with its records (`None`: they do not decode).
pub(super) type FrameVisitor<'a> = dyn FnMut(&scan::ScannedFrame, Option<&[(u32, Record)]>) + 'a;

impl Store {
    /// Where the bytes of the log go: each segment scanned (every frame CRC-checked, its
    /// records decoded) and its bytes attributed to live sessions, deleted sessions that
    /// forks pin, dead records, and headers (see [`SpaceReport`]); with what a GC would free
    /// at [`GC_LIVE_FRACTION`]. Never modifies the store; works on a read-only open.
    ///
    /// `progress` is called with `(bytes scanned, bytes in all segments)` as the scan goes
    /// and at the end. On a writable store, call [`Store::flush`] first for exact figures: a
    /// frame being written while the scan reads it counts as torn. A read-only store beside a
    /// live writer counts the writer's records after its view as unindexed.
    ///
    /// ```
    /// use sessionlog::{Config, Event, SessionHeader, Store};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path(), Config::default())?;
    /// for id in ["kept", "gone"] {
    ///     let event = Event::new("x/note", 0, 5, r#"{"text":"hello"}"#);
    ///     store.create_verbatim(SessionHeader::new(id, 5), vec![event])?;
    /// }
    /// store.delete_session("gone")?;
    /// store.flush()?;
    /// let report = store.space(&mut |_, _| {})?;
    /// assert_eq!(report.sessions.len(), 1);
    /// let t = &report.totals;
    /// assert!(t.live > 0 && t.dead > 0);
    /// assert_eq!(t.live + t.pinned + t.dead + t.unindexed + t.overhead + t.preallocated, t.size);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn space(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<SpaceReport, OpenError> {
        self.space_with(progress, &mut |_, _| {})
    }

    /// [`Store::space`], also handing every scanned frame with its records (`None`: they do
    /// not decode) to `on_frame`, so the GC plans from the same single scan of the log.
    pub(super) fn space_with(
        &self,
        progress: &mut dyn FnMut(u64, u64),
        on_frame: &mut FrameVisitor<'_>,
    ) -> Result<SpaceReport, OpenError> {
        let io_err = |path: PathBuf| move |source| OpenError::Io { path, source };
        let numbers = self
            .segments
            .list()
            .map_err(io_err(self.segments.dir().to_path_buf()))?;
        let mut segments: Vec<SegmentSpace> = Vec::with_capacity(numbers.len());
        let mut before: Vec<u64> = Vec::with_capacity(numbers.len());
        let mut all = 0u64;
        for (i, &number) in numbers.iter().enumerate() {
            let size = self
                .segments
                .file(number)
                .and_then(|f| f.len())
                .map_err(io_err(self.segments.path(number)))?;
            before.push(all);
            all += size;
            segments.push(SegmentSpace {
                number,
                size,
                sealed: i + 1 < numbers.len(),
                ..SegmentSpace::default()
            });
        }
        let slot: HashMap<u64, usize> = numbers.iter().enumerate().map(|(i, &n)| (n, i)).collect();

        // The index's view: each row, and how far its events are read.
        let (mut sessions, known, next_number) = {
            let registry = self.registry();
            let mut rows: Vec<&SessionRow> = registry.rows().collect();
            rows.sort_by_key(|r| std::cmp::Reverse(r.number));
            let mut known: HashMap<u64, Known> = HashMap::with_capacity(rows.len());
            // Children have higher numbers than their parents: in descending order, a row's
            // `needed` is final before it is passed to its parent.
            for r in &rows {
                let own = if r.is_deleted() { 0 } else { r.next_seq };
                let needed = known.get(&r.number).map_or(own, |k| k.needed.max(own));
                known.insert(
                    r.number,
                    Known {
                        deleted: r.is_deleted(),
                        seed_len: r.seed_len,
                        next_seq: r.next_seq,
                        needed,
                    },
                );
                if r.parent != 0 {
                    let through = needed.min(r.seed_len);
                    let parent = known.entry(r.parent).or_insert(Known {
                        deleted: false,
                        seed_len: 0,
                        next_seq: 0,
                        needed: 0,
                    });
                    parent.needed = parent.needed.max(through);
                }
            }
            // A parent entry made above for a row that is missing (damage) reads nothing.
            known.retain(|n, _| registry.get(*n).is_some());
            let sessions: Vec<SessionSpace> = rows
                .iter()
                .rev()
                .map(|r| SessionSpace {
                    id: r.header.id.clone(),
                    number: r.number,
                    deleted: r.is_deleted(),
                    verbatim: r.is_verbatim(),
                    parent: (r.parent != 0).then_some(r.parent),
                    inherited_events: r.seed_len,
                    bytes: 0,
                    records: 0,
                    events: 0,
                    dead_bytes: 0,
                })
                .collect();
            (sessions, known, registry.next_number())
        };
        let session_slot: HashMap<u64, usize> = sessions
            .iter()
            .enumerate()
            .map(|(i, s)| (s.number, i))
            .collect();

        let mut totals = SpaceTotals::default();
        // The next seq each session's records must carry to be the ones the index holds.
        let mut expected: HashMap<u64, Seq> = HashMap::new();
        let mut last_report = 0u64;
        let mut visit = |frame: scan::ScannedFrame| -> Result<(), OpenError> {
            let decoded = Record::decode_all(&frame.payload);
            on_frame(&frame, decoded.as_deref().ok());
            let Some(&i) = slot.get(&frame.position.segment) else {
                return Ok(());
            };
            let seg = &mut segments[i];
            seg.frames += 1;
            seg.overhead += FRAME_HEADER_LEN as u64;
            let stored = u64::from(frame.frame_len).saturating_sub(FRAME_HEADER_LEN as u64);
            let raw = frame.payload.len() as u64;
            let records = match decoded {
                Ok(r) if !frame.dropped => r,
                Ok(_) => {
                    seg.dead += stored;
                    totals.dropped += stored;
                    return Ok(());
                }
                Err(_) => {
                    seg.dead += stored;
                    seg.damaged += stored;
                    return Ok(());
                }
            };
            for (k, (offset, record)) in records.iter().enumerate() {
                let end = records.get(k + 1).map_or(raw, |(o, _)| u64::from(*o));
                let bytes = share(stored, raw, u64::from(*offset), end);
                totals.records += 1;
                let (session, seq) = match record {
                    Record::CreateSession { session, .. } => {
                        expected.insert(*session, 0);
                        (*session, None)
                    }
                    Record::ForkSession {
                        session,
                        seed_length,
                        ..
                    } => {
                        expected.insert(*session, *seed_length);
                        (*session, None)
                    }
                    Record::DeleteSession { session } | Record::Verbatim { session } => {
                        (*session, None)
                    }
                    Record::Event { session, event } => (*session, Some(event.seq)),
                };
                let bucket = match (known.get(&session), seq) {
                    (None, _) if session >= next_number => Bucket::Unindexed,
                    (None, _) => Bucket::Orphaned,
                    (Some(k), None) if k.deleted => Bucket::Pinned,
                    (Some(_), None) => Bucket::Live,
                    (Some(k), Some(seq)) => {
                        let next = expected.entry(session).or_insert(k.seed_len);
                        if seq != *next {
                            Bucket::Dropped
                        } else {
                            *next += 1;
                            if seq >= k.next_seq {
                                Bucket::Unindexed
                            } else if seq < k.needed {
                                if k.deleted {
                                    Bucket::Pinned
                                } else {
                                    Bucket::Live
                                }
                            } else {
                                Bucket::Unpinned
                            }
                        }
                    }
                };
                match bucket {
                    Bucket::Live => seg.live += bytes,
                    Bucket::Pinned => seg.pinned += bytes,
                    Bucket::Unindexed => seg.unindexed += bytes,
                    Bucket::Orphaned => {
                        seg.dead += bytes;
                        totals.orphaned += bytes;
                    }
                    Bucket::Unpinned => {
                        seg.dead += bytes;
                        totals.unpinned += bytes;
                    }
                    Bucket::Dropped => {
                        seg.dead += bytes;
                        totals.dropped += bytes;
                    }
                }
                if let Some(s) = session_slot.get(&session).map(|&j| &mut sessions[j]) {
                    match bucket {
                        Bucket::Live | Bucket::Pinned => {
                            s.bytes += bytes;
                            s.records += 1;
                            s.events += u64::from(seq.is_some());
                        }
                        Bucket::Unpinned => s.dead_bytes += bytes,
                        _ => {}
                    }
                }
            }
            let done = before[i] + frame.position.offset + u64::from(frame.frame_len);
            if done - last_report >= 1 << 20 {
                last_report = done;
                progress(done.min(all), all);
            }
            Ok(())
        };
        let start = LogPosition {
            segment: numbers.first().copied().unwrap_or(1),
            offset: SEGMENT_HEADER_LEN,
        };
        let scanned = scan::scan(
            &self.segments,
            &numbers,
            start,
            RecoveryMode::SalvageSkippingBadFrames,
            &self.limits,
            &mut visit,
        )?;
        if let Some((at, len)) = scanned.zero_tail
            && let Some(&i) = slot.get(&at.segment)
        {
            segments[i].preallocated = len;
        }
        // Whatever no valid frame covers is damaged: frames the scan skipped, a torn tail and
        // an operation cut with it, a frame being written while the scan read.
        for seg in &mut segments {
            // A writer in this process may have sealed the last segment during the scan,
            // cutting its zeros: the file is then shorter than listed (format-spec.md §2).
            if let Ok(now) = self.segments.file(seg.number).and_then(|f| f.len()) {
                seg.size = seg.size.min(now);
            }
            let header = SEGMENT_HEADER_LEN.min(seg.size);
            seg.overhead += header;
            let accounted =
                seg.live + seg.pinned + seg.dead + seg.unindexed + seg.overhead + seg.preallocated;
            // The file may have grown while it was scanned (a live writer): its size is at
            // least what the scan read.
            seg.size = seg.size.max(accounted);
            let rest = seg.size - accounted;
            seg.dead += rest;
            seg.damaged += rest;
        }
        for seg in &segments {
            totals.size += seg.size;
            totals.live += seg.live;
            totals.pinned += seg.pinned;
            totals.dead += seg.dead;
            totals.damaged += seg.damaged;
            totals.unindexed += seg.unindexed;
            totals.overhead += seg.overhead;
            totals.preallocated += seg.preallocated;
            totals.frames += seg.frames;
        }
        let candidates: Vec<&SegmentSpace> = segments.iter().filter(|s| s.gc_candidate()).collect();
        let report = SpaceReport {
            gc_threshold: GC_LIVE_FRACTION,
            gc_frees: candidates.iter().map(|s| s.dead).sum(),
            gc_rewrites: candidates.iter().map(|s| s.live + s.pinned).sum(),
            gc_segments: candidates.iter().map(|s| s.number).collect(),
            sessions,
            segments,
            totals,
        };
        progress(report.totals.size, report.totals.size);
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn shares_of_a_frame_add_up_to_its_stored_bytes() {
        // Uncompressed: each record's share is its length.
        assert_eq!(share(100, 100, 10, 35), 25);
        for (stored, raw) in [(7u64, 100u64), (100, 7), (1, 3), (12_345, 98_765)] {
            let cuts = [0, raw / 3, raw / 3 + 1, raw / 2, raw];
            let total: u64 = cuts
                .windows(2)
                .map(|w| share(stored, raw, w[0], w[1]))
                .sum();
            assert_eq!(total, stored, "{stored}/{raw}");
        }
        assert_eq!(share(10, 0, 0, 0), 0);
    }
}
