//! The byte layouts of the index's keys and values (format-spec.md §5): value CRCs, event
//! runs, surface links, the watermark, session rows, and the batches a commit writes.

use super::numhash::NumMap;
use super::*;
use crate::error::LogPosition;
use crate::event::{Seq, SessionHeader};

/// The key bytes a value's CRC covers (format-spec.md §5): a `u64` key as 8 bytes LE, a `&str`
/// key as its UTF-8 bytes, a byte-array key as is, a `(u64, &str)` key as both concatenated.
pub struct KeyBytes;

impl KeyBytes {
    /// A `u64` key.
    pub fn number(n: u64) -> [u8; 8] {
        n.to_le_bytes()
    }

    /// A `(u64, &str)` key.
    pub fn pair(n: u64, s: &str) -> Vec<u8> {
        let mut b = n.to_le_bytes().to_vec();
        b.extend_from_slice(s.as_bytes());
        b
    }
}

/// The CRC-32 of `key` ‖ `payload`.
pub fn value_crc(key: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(key);
    h.update(payload);
    h.finalize()
}

/// `payload` ‖ its CRC-32 (with `key`, LE): an index value.
pub fn seal(key: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(payload.len() + CRC_LEN);
    v.extend_from_slice(payload);
    v.extend_from_slice(&value_crc(key, payload).to_le_bytes());
    v
}

/// The payload of an index value after checking its CRC.
pub(super) fn unseal<'a>(
    table: &'static str,
    key: &[u8],
    value: &'a [u8],
) -> Result<&'a [u8], IndexError> {
    let Some(split) = value.len().checked_sub(CRC_LEN) else {
        return Err(damaged(
            table,
            format!(
                "the value of key {} is {} bytes, shorter than its CRC",
                hex(key),
                value.len()
            ),
        ));
    };
    let (payload, crc) = value.split_at(split);
    let stored = u32_le(crc);
    let computed = value_crc(key, payload);
    if stored != computed {
        return Err(damaged(
            table,
            format!(
                "the value of key {} fails its CRC (stored {stored:#010x}, computed {computed:#010x})",
                hex(key)
            ),
        ));
    }
    Ok(payload)
}

/// The `events` value of `session`'s `run`: [`Run::encode`] ‖ CRC.
pub fn run_value(session: u64, run: &Run) -> [u8; RUN_VALUE_LEN] {
    let key = event_key(session, run.first_seq);
    let payload = run.encode();
    let mut v = [0u8; RUN_VALUE_LEN];
    v[..RUN_LEN].copy_from_slice(&payload);
    v[RUN_LEN..].copy_from_slice(&value_crc(&key, &payload).to_le_bytes());
    v
}

/// The `surface` value of node `(session, seq)`: prev ‖ next ‖ CRC.
pub fn surface_value(session: u64, seq: Seq, prev: Seq, next: Seq) -> [u8; SURFACE_VALUE_LEN] {
    let mut v = [0u8; SURFACE_VALUE_LEN];
    v[0..8].copy_from_slice(&prev.to_le_bytes());
    v[8..16].copy_from_slice(&next.to_le_bytes());
    let crc = value_crc(&event_key(session, seq), &v[..16]);
    v[16..].copy_from_slice(&crc.to_le_bytes());
    v
}

/// Decodes an `events` entry (checking its CRC): (session number, run).
pub fn decode_run_entry(
    key: &[u8; 16],
    value: &[u8; RUN_VALUE_LEN],
) -> Result<(u64, Run), IndexError> {
    let payload = unseal("events", key, value)?;
    let mut b = [0u8; RUN_LEN];
    b.copy_from_slice(payload);
    Ok((u64_be(&key[0..8]), Run::decode(u64_be(&key[8..16]), &b)?))
}

/// "No node" in a surface link.
pub const NO_NODE: u64 = u64::MAX;

/// `meta` key: the index format version (u32 LE).
pub const META_FORMAT_VERSION: &str = "format_version";
/// `meta` key: the watermark ([`Watermark`], 24 bytes).
pub const META_WATERMARK: &str = "watermark";
/// `meta` key: the number the next created session gets (u64 LE), never lowered, so a purged
/// session's number is never reused.
pub const META_NEXT_SESSION: &str = "next_session";

/// Where a record is: its frame and its offset inside the decompressed payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Location {
    /// Segment number.
    pub segment: u64,
    /// Offset of the frame's first byte in the segment.
    pub frame_offset: u64,
    /// The frame's length on disk (header plus stored payload).
    pub frame_len: u32,
    /// Offset of the record inside the frame's decompressed payload.
    pub record_offset: u32,
}

impl Location {
    /// The frame's position in the log.
    pub fn position(&self) -> LogPosition {
        LogPosition {
            segment: self.segment,
            offset: self.frame_offset,
        }
    }

    /// True when both locations are in the same frame (segment, offset and length).
    pub fn same_frame(&self, other: &Location) -> bool {
        self.segment == other.segment
            && self.frame_offset == other.frame_offset
            && self.frame_len == other.frame_len
    }
}

/// An `events` entry: `count` consecutive seqs of one session, from `first_seq`, stored in one
/// frame. Other sessions' records may sit between them in the frame payload; the run's own
/// records are in seq order, the first at `location.record_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Run {
    /// The seq of the run's first event (the second half of its key).
    pub first_seq: Seq,
    /// Number of events in the run (at least 1).
    pub count: u32,
    /// The frame, and the offset of the run's first record in its payload.
    pub location: Location,
}

impl Run {
    /// A run of one event.
    pub fn single(seq: Seq, location: Location) -> Run {
        Run {
            first_seq: seq,
            count: 1,
            location,
        }
    }

    /// The seq just past the run.
    pub fn end(&self) -> Seq {
        self.first_seq.saturating_add(u64::from(self.count))
    }

    /// True when the run holds `seq`.
    pub fn contains(&self, seq: Seq) -> bool {
        seq >= self.first_seq && seq < self.end()
    }

    /// The [`RUN_LEN`]-byte index value: segment u64 LE ‖ frame_offset u64 LE ‖ frame_len u32
    /// LE ‖ record_offset u32 LE (of the first record) ‖ count u32 LE.
    pub fn encode(&self) -> [u8; RUN_LEN] {
        let l = &self.location;
        let mut b = [0u8; RUN_LEN];
        b[0..8].copy_from_slice(&l.segment.to_le_bytes());
        b[8..16].copy_from_slice(&l.frame_offset.to_le_bytes());
        b[16..20].copy_from_slice(&l.frame_len.to_le_bytes());
        b[20..24].copy_from_slice(&l.record_offset.to_le_bytes());
        b[24..28].copy_from_slice(&self.count.to_le_bytes());
        b
    }

    /// Decodes an index value whose key holds `first_seq`. A count of 0 is malformed.
    pub fn decode(first_seq: Seq, b: &[u8; RUN_LEN]) -> Result<Run, IndexError> {
        let count = u32_le(&b[24..28]);
        if count == 0 {
            return Err(malformed(
                "events",
                format!("the run at seq {first_seq} has a count of 0"),
            ));
        }
        Ok(Run {
            first_seq,
            count,
            location: Location {
                segment: u64_le(&b[0..8]),
                frame_offset: u64_le(&b[8..16]),
                frame_len: u32_le(&b[16..20]),
                record_offset: u32_le(&b[20..24]),
            },
        })
    }
}

/// Groups per-event locations into runs: consecutive seqs of one session in one frame (other
/// sessions' events may be interleaved). Runs are returned in the order they start; a run never
/// spans frames.
pub fn coalesce(events: &[(u64, Seq, Location)]) -> Vec<(u64, Run)> {
    let mut runs: Vec<(u64, Run)> = Vec::new();
    let mut open: NumMap<u64, usize> = NumMap::default();
    for &(session, seq, loc) in events {
        if let Some(&i) = open.get(&session) {
            let run = &mut runs[i].1;
            if run.location.same_frame(&loc)
                && run.end() == seq
                && run.count < u32::MAX
                && loc.record_offset > run.location.record_offset
            {
                run.count += 1;
                continue;
            }
        }
        open.insert(session, runs.len());
        runs.push((session, Run::single(seq, loc)));
    }
    runs
}

/// The `events` key of `(session, seq)`: both big-endian, so keys sort by session then seq.
pub fn event_key(session: u64, seq: Seq) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[0..8].copy_from_slice(&session.to_be_bytes());
    k[8..16].copy_from_slice(&seq.to_be_bytes());
    k
}

/// How far the index covers the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Watermark {
    /// Segment holding the end of the covered log (0: nothing covered yet).
    pub segment: u64,
    /// Offset just past the last covered frame.
    pub end: u64,
    /// Offset of the last covered frame in `segment` (`u64::MAX` when none), so recovery can
    /// check that the log still holds it.
    pub last_frame: u64,
}

impl Watermark {
    /// The 24-byte encoding: segment ‖ end ‖ last_frame, u64 LE each.
    pub fn encode(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[0..8].copy_from_slice(&self.segment.to_le_bytes());
        b[8..16].copy_from_slice(&self.end.to_le_bytes());
        b[16..24].copy_from_slice(&self.last_frame.to_le_bytes());
        b
    }

    pub(super) fn decode(b: &[u8]) -> Result<Self, IndexError> {
        if b.len() != 24 {
            return Err(malformed(
                "meta",
                format!("watermark is {} bytes, expected 24", b.len()),
            ));
        }
        Ok(Watermark {
            segment: u64_le(&b[0..8]),
            end: u64_le(&b[8..16]),
            last_frame: u64_le(&b[16..24]),
        })
    }
}

/// A `sessions` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    /// Store-internal session number.
    pub number: u64,
    /// The seq the next append gets (= event count, inherited events included).
    pub next_seq: Seq,
    /// Total bytes of `data` text in the session's own events.
    pub data_bytes: u64,
    /// `time` of the last event (0 when empty).
    pub last_time: i64,
    /// The parent's session number for a fork (0: not a fork).
    pub parent: u64,
    /// Seqs below this resolve through the parent (0: not a fork).
    pub seed_len: Seq,
    /// The `surface` table reflects the events with seq below this.
    pub surface_covered: Seq,
    /// First surface node ([`NO_NODE`] when empty).
    pub surface_head: Seq,
    /// Last surface node ([`NO_NODE`] when empty).
    pub surface_tail: Seq,
    /// Number of surface nodes.
    pub surface_len: u64,
    /// Number of surface replacements (dsh's `replaceGeneration`).
    pub replace_generation: u64,
    /// Live forks that inherit this session's events.
    pub children: u32,
    /// Bit 0: deleted (kept only because forks still inherit its events).
    pub flags: u32,
    /// The session header.
    pub header: std::sync::Arc<SessionHeader>,
}

/// [`SessionRow::flags`] bit: the session was deleted but forks still pin its events.
pub const FLAG_DELETED: u32 = 1;
/// [`SessionRow::flags`] bit: the session stores its events verbatim (no session semantics,
/// no surface table, no state or projection checkpoints).
pub const FLAG_VERBATIM: u32 = 2;
/// Every [`SessionRow::flags`] bit this version defines; any other bit is damage.
const KNOWN_FLAGS: u32 = FLAG_DELETED | FLAG_VERBATIM;

/// Bytes of the fixed part of a session row.
pub const SESSION_ROW_FIXED: usize = 96;

impl SessionRow {
    /// A fresh row for a new, empty session.
    pub fn new(number: u64, header: SessionHeader) -> Self {
        SessionRow {
            number,
            next_seq: 0,
            data_bytes: 0,
            last_time: 0,
            parent: 0,
            seed_len: 0,
            surface_covered: 0,
            surface_head: NO_NODE,
            surface_tail: NO_NODE,
            surface_len: 0,
            replace_generation: 0,
            children: 0,
            flags: 0,
            header: std::sync::Arc::new(header),
        }
    }

    /// True when the session was deleted (and is kept only for its forks).
    pub fn is_deleted(&self) -> bool {
        self.flags & FLAG_DELETED != 0
    }

    /// True when the session stores its events verbatim ([`FLAG_VERBATIM`]).
    pub fn is_verbatim(&self) -> bool {
        self.flags & FLAG_VERBATIM != 0
    }

    /// Encoding (format-spec.md §5): eleven u64/i64 LE fields, children u32, flags u32, then
    /// postcard(SessionHeader).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(SESSION_ROW_FIXED + 32);
        for v in [
            self.number,
            self.next_seq,
            self.data_bytes,
            self.last_time as u64,
            self.parent,
            self.seed_len,
            self.surface_covered,
            self.surface_head,
            self.surface_tail,
            self.surface_len,
            self.replace_generation,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.children.to_le_bytes());
        b.extend_from_slice(&self.flags.to_le_bytes());
        // Serialising an in-memory header cannot fail (no maps, no unsupported types).
        if let Ok(h) = postcard::to_allocvec(&*self.header) {
            b.extend_from_slice(&h);
        }
        b
    }

    /// Decodes a row.
    pub fn decode(b: &[u8]) -> Result<Self, IndexError> {
        if b.len() < SESSION_ROW_FIXED {
            return Err(malformed(
                "sessions",
                format!(
                    "row is {} bytes, at least {SESSION_ROW_FIXED} expected",
                    b.len()
                ),
            ));
        }
        let header: SessionHeader = postcard::from_bytes(&b[SESSION_ROW_FIXED..])
            .map_err(|e| malformed("sessions", format!("header: {e}")))?;
        let f = |i: usize| u64_le(&b[i * 8..i * 8 + 8]);
        let flags = u32_le(&b[92..96]);
        if flags & !KNOWN_FLAGS != 0 {
            return Err(malformed(
                "sessions",
                format!("flags {flags:#x} set bits this version does not define"),
            ));
        }
        Ok(SessionRow {
            number: f(0),
            next_seq: f(1),
            data_bytes: f(2),
            last_time: f(3) as i64,
            parent: f(4),
            seed_len: f(5),
            surface_covered: f(6),
            surface_head: f(7),
            surface_tail: f(8),
            surface_len: f(9),
            replace_generation: f(10),
            children: u32_le(&b[88..92]),
            flags,
            header: std::sync::Arc::new(header),
        })
    }
}

/// A change to the index besides event locations and session rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexOp {
    /// Insert or replace a surface node's links.
    Link {
        /// Session number.
        session: u64,
        /// The node.
        seq: Seq,
        /// Previous node ([`NO_NODE`] for the head).
        prev: Seq,
        /// Next node ([`NO_NODE`] for the tail).
        next: Seq,
    },
    /// Remove a surface node.
    Unlink {
        /// Session number.
        session: u64,
        /// The node.
        seq: Seq,
    },
    /// Store a session-state checkpoint covering the events below `covered`.
    State {
        /// Session number.
        session: u64,
        /// Events below this seq are folded in.
        covered: Seq,
        /// postcard `SessionState`.
        bytes: Vec<u8>,
    },
    /// Store a projection checkpoint record.
    Projection {
        /// Session number.
        session: u64,
        /// Projection key.
        key: String,
        /// The record (format byte, state version, covered seq, state bytes).
        record: Vec<u8>,
    },
    /// Remove everything of a session (its row, id, events, surface, state).
    Purge {
        /// Session number.
        session: u64,
        /// Its id.
        id: String,
    },
}

/// Changes to write to the index in one transaction.
#[derive(Debug, Default)]
pub struct IndexBatch {
    /// Session rows to insert or replace.
    pub sessions: Vec<SessionRow>,
    /// Event locations to insert, one per event (session, seq, exact location) in log order;
    /// [`Index::commit`] stores them as runs ([`coalesce`]).
    pub events: Vec<(u64, Seq, Location)>,
    /// Surface, state and purge operations, applied in order after the locations.
    pub ops: Vec<IndexOp>,
}

impl IndexBatch {
    /// True when there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty() && self.events.is_empty() && self.ops.is_empty()
    }

    /// Empties the batch, keeping its buffers' capacity.
    pub fn clear(&mut self) {
        self.sessions.clear();
        self.events.clear();
        self.ops.clear();
    }

    /// The entries the batch's buffers hold room for.
    pub fn capacity(&self) -> usize {
        self.sessions.capacity() + self.events.capacity() + self.ops.capacity()
    }

    /// The rows and operations that leave the index as applying all of them in order would:
    /// the last row of each session; of the operations on one key (a surface node, a
    /// session's state, a projection record) only the last; and no operation at all for a
    /// surface node that is an event of this batch and ends unlinked (the index never held
    /// it). A deferred batch links each node twice (as the tail, then with its successor) and
    /// often unlinks the node before it (a streamed message replaced): writing each key once
    /// saves most of its entries. A batch that purges a session is taken as it is.
    pub fn squashed(&self) -> (Vec<&SessionRow>, Vec<&IndexOp>) {
        #[derive(PartialEq, Eq, Hash)]
        enum Key<'a> {
            Node(u64, Seq),
            State(u64),
            Projection(u64, &'a str),
        }
        let mut last_row: NumMap<u64, usize> = NumMap::default();
        for (i, row) in self.sessions.iter().enumerate() {
            last_row.insert(row.number, i);
        }
        let rows = self
            .sessions
            .iter()
            .enumerate()
            .filter(|(i, row)| last_row.get(&row.number) == Some(i))
            .map(|(_, row)| row)
            .collect();
        // A batch holds a contiguous stretch of each session's events, appended since the
        // index was last committed: a seq at or past the first is new to the index.
        let mut first_new: NumMap<u64, Seq> = NumMap::default();
        for &(session, seq, _) in &self.events {
            first_new
                .entry(session)
                .and_modify(|s| *s = (*s).min(seq))
                .or_insert(seq);
        }
        let mut slots: Vec<Option<&IndexOp>> = Vec::with_capacity(self.ops.len());
        let mut at: NumMap<Key<'_>, usize> =
            NumMap::with_capacity_and_hasher(self.ops.len(), Default::default());
        for op in &self.ops {
            let key = match op {
                IndexOp::Link { session, seq, .. } | IndexOp::Unlink { session, seq } => {
                    Key::Node(*session, *seq)
                }
                IndexOp::State { session, .. } => Key::State(*session),
                IndexOp::Projection { session, key, .. } => Key::Projection(*session, key),
                IndexOp::Purge { .. } => return (rows, self.ops.iter().collect()),
            };
            if let Some(old) = at.insert(key, slots.len())
                && let Some(slot) = slots.get_mut(old)
            {
                *slot = None;
            }
            slots.push(Some(op));
        }
        let ops = slots
            .into_iter()
            .flatten()
            .filter(|op| match op {
                IndexOp::Unlink { session, seq } => {
                    first_new.get(session).is_none_or(|first| seq < first)
                }
                _ => true,
            })
            .collect();
        (rows, ops)
    }
}
