//! The redb index (`index.redb`): derived data that makes reads and resume cheap.
//!
//! Tables (byte layouts in `format-spec.md`):
//!
//! | table            | key                              | value                                   |
//! |------------------|----------------------------------|-----------------------------------------|
//! | `meta`           | `&str` name                      | bytes (format version, watermark, ...)  |
//! | `sessions`       | `&str` session id                | [`SessionRow`] (fixed fields + header)  |
//! | `session_ids`    | `u64` session number             | `&str` session id                       |
//! | `events`         | `[u8;16]` session BE ‖ seq BE    | [`Location`] (24 bytes)                 |
//! | `surface`        | `[u8;16]` session BE ‖ seq BE    | prev ‖ next (u64 LE each, MAX = none)   |
//! | `session_state`  | `u64` session number             | covered seq u64 LE ‖ postcard state     |
//!
//! The log is the truth: the index records a watermark (how far into the log it covers), and
//! deleting `index.redb` rebuilds the same index from the segments.

use std::path::Path;

use redb::{
    Database, Durability, ReadOnlyDatabase, ReadableDatabase, ReadableTable, TableDefinition,
};

use crate::error::{IndexError, LogPosition};
use crate::event::{Seq, SessionHeader};

/// `meta`: name → bytes.
pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// `sessions`: session id → [`SessionRow`] bytes.
pub const SESSIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("sessions");
/// `session_ids`: session number → session id.
pub const SESSION_IDS: TableDefinition<u64, &str> = TableDefinition::new("session_ids");
/// `events`: (session number, seq) big-endian → [`Location`].
pub const EVENTS: TableDefinition<&[u8; 16], &[u8; 24]> = TableDefinition::new("events");

/// `surface`: (session number, seq) big-endian → prev seq ‖ next seq (u64 LE, `u64::MAX` = none).
pub const SURFACE: TableDefinition<&[u8; 16], &[u8; 16]> = TableDefinition::new("surface");
/// `session_state`: session number → covered seq (u64 LE) ‖ postcard `SessionState`.
pub const SESSION_STATE: TableDefinition<u64, &[u8]> = TableDefinition::new("session_state");

/// `projections`: (session number, projection key) → projection checkpoint record
/// (`crate::projection::Checkpoint::to_record`).
pub const PROJECTIONS: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("projections");

/// "No node" in a surface link.
pub const NO_NODE: u64 = u64::MAX;

/// `meta` key: the index format version (u32 LE).
pub const META_FORMAT_VERSION: &str = "format_version";
/// `meta` key: the watermark ([`Watermark`], 24 bytes).
pub const META_WATERMARK: &str = "watermark";

/// Where an event's record is: its frame and its offset inside the decompressed payload.
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
    /// The 24-byte index value: segment u64 LE ‖ frame_offset u64 LE ‖ frame_len u32 LE ‖
    /// record_offset u32 LE.
    pub fn encode(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[0..8].copy_from_slice(&self.segment.to_le_bytes());
        b[8..16].copy_from_slice(&self.frame_offset.to_le_bytes());
        b[16..20].copy_from_slice(&self.frame_len.to_le_bytes());
        b[20..24].copy_from_slice(&self.record_offset.to_le_bytes());
        b
    }

    /// Decodes the 24-byte index value.
    pub fn decode(b: &[u8; 24]) -> Self {
        Location {
            segment: u64_le(&b[0..8]),
            frame_offset: u64_le(&b[8..16]),
            frame_len: u32_le(&b[16..20]),
            record_offset: u32_le(&b[20..24]),
        }
    }

    /// The frame's position in the log.
    pub fn position(&self) -> LogPosition {
        LogPosition {
            segment: self.segment,
            offset: self.frame_offset,
        }
    }
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

    fn decode(b: &[u8]) -> Result<Self, IndexError> {
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
            flags: u32_le(&b[92..96]),
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
    /// Event locations to insert.
    pub events: Vec<(u64, Seq, Location)>,
    /// Surface, state and purge operations, applied in order after the locations.
    pub ops: Vec<IndexOp>,
}

impl IndexBatch {
    /// True when there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty() && self.events.is_empty() && self.ops.is_empty()
    }
}

enum Db {
    Write(Database),
    Read(ReadOnlyDatabase),
}

/// The opened index.
pub struct Index {
    db: Db,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index").finish_non_exhaustive()
    }
}

/// The index format version (stored under `meta/format_version`).
pub const INDEX_FORMAT_VERSION: u32 = 1;

/// What the index says when opened.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexState {
    /// The format version recorded (`None` for a fresh index).
    pub format_version: Option<u32>,
    /// How far the index covers the log.
    pub watermark: Watermark,
    /// Every session row.
    pub sessions: Vec<(String, SessionRow)>,
}

impl Index {
    /// Opens (or creates) `index.redb` for writing.
    pub fn open(path: &Path) -> Result<Index, IndexError> {
        let db = Database::create(path)?;
        let mut txn = db.begin_write()?;
        // Creating missing tables need not be durable: a lost creation is redone next open.
        txn.set_durability(Durability::None)?;
        {
            txn.open_table(META)?;
            txn.open_table(SESSIONS)?;
            txn.open_table(SESSION_IDS)?;
            txn.open_table(EVENTS)?;
            txn.open_table(SURFACE)?;
            txn.open_table(SESSION_STATE)?;
            txn.open_table(PROJECTIONS)?;
        }
        txn.commit()?;
        Ok(Index { db: Db::Write(db) })
    }

    /// Opens an existing `index.redb` read-only.
    pub fn open_read_only(path: &Path) -> Result<Index, IndexError> {
        Ok(Index {
            db: Db::Read(ReadOnlyDatabase::open(path)?),
        })
    }

    fn begin_read(&self) -> Result<redb::ReadTransaction, IndexError> {
        Ok(match &self.db {
            Db::Write(db) => db.begin_read()?,
            Db::Read(db) => db.begin_read()?,
        })
    }

    fn writer(&self) -> Result<&Database, IndexError> {
        match &self.db {
            Db::Write(db) => Ok(db),
            Db::Read(_) => Err(IndexError::Redb("the index is open read-only".into())),
        }
    }

    /// Reads the meta table and every session row.
    pub fn load(&self) -> Result<IndexState, IndexError> {
        let txn = self.begin_read()?;
        let meta = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => {
                return Ok(IndexState {
                    format_version: None,
                    watermark: Watermark::default(),
                    sessions: Vec::new(),
                });
            }
            Err(e) => return Err(e.into()),
        };
        let format_version = match meta.get(META_FORMAT_VERSION)? {
            Some(v) => {
                let v = v.value();
                if v.len() != 4 {
                    return Err(malformed("meta", "format_version is not 4 bytes".into()));
                }
                Some(u32_le(v))
            }
            None => None,
        };
        let watermark = match meta.get(META_WATERMARK)? {
            Some(v) => Watermark::decode(v.value())?,
            None => Watermark::default(),
        };
        let mut sessions = Vec::new();
        let table = txn.open_table(SESSIONS)?;
        for item in table.iter()? {
            let (k, v) = item?;
            sessions.push((k.value().to_owned(), SessionRow::decode(v.value())?));
        }
        Ok(IndexState {
            format_version,
            watermark,
            sessions,
        })
    }

    /// Writes a batch and the new watermark in one transaction. `durable` selects a durable
    /// redb commit; otherwise the commit survives only if a later durable one follows.
    pub fn commit(
        &self,
        batch: &IndexBatch,
        watermark: Watermark,
        durable: bool,
    ) -> Result<(), IndexError> {
        let db = self.writer()?;
        let mut txn = db.begin_write()?;
        txn.set_durability(if durable {
            Durability::Immediate
        } else {
            Durability::None
        })?;
        {
            let mut meta = txn.open_table(META)?;
            meta.insert(
                META_FORMAT_VERSION,
                INDEX_FORMAT_VERSION.to_le_bytes().as_slice(),
            )?;
            meta.insert(META_WATERMARK, watermark.encode().as_slice())?;
            let mut sessions = txn.open_table(SESSIONS)?;
            let mut ids = txn.open_table(SESSION_IDS)?;
            for row in &batch.sessions {
                sessions.insert(row.header.id.as_str(), row.encode().as_slice())?;
                ids.insert(row.number, row.header.id.as_str())?;
            }
            let mut events = txn.open_table(EVENTS)?;
            for (session, seq, loc) in &batch.events {
                events.insert(&event_key(*session, *seq), &loc.encode())?;
            }
            let mut surface = txn.open_table(SURFACE)?;
            let mut states = txn.open_table(SESSION_STATE)?;
            let mut projections = txn.open_table(PROJECTIONS)?;
            for op in &batch.ops {
                match op {
                    IndexOp::Link {
                        session,
                        seq,
                        prev,
                        next,
                    } => {
                        let mut v = [0u8; 16];
                        v[0..8].copy_from_slice(&prev.to_le_bytes());
                        v[8..16].copy_from_slice(&next.to_le_bytes());
                        surface.insert(&event_key(*session, *seq), &v)?;
                    }
                    IndexOp::Unlink { session, seq } => {
                        surface.remove(&event_key(*session, *seq))?;
                    }
                    IndexOp::State {
                        session,
                        covered,
                        bytes,
                    } => {
                        let mut v = Vec::with_capacity(8 + bytes.len());
                        v.extend_from_slice(&covered.to_le_bytes());
                        v.extend_from_slice(bytes);
                        states.insert(*session, v.as_slice())?;
                    }
                    IndexOp::Projection {
                        session,
                        key,
                        record,
                    } => {
                        projections.insert((*session, key.as_str()), record.as_slice())?;
                    }
                    IndexOp::Purge { session, id } => {
                        projections.retain_in::<(u64, &str), _>(
                            (*session, "")..(*session + 1, ""),
                            |_, _| false,
                        )?;
                        let lo = event_key(*session, 0);
                        let hi = event_key(*session, u64::MAX);
                        events.retain_in::<&[u8; 16], _>(&lo..=&hi, |_, _| false)?;
                        surface.retain_in::<&[u8; 16], _>(&lo..=&hi, |_, _| false)?;
                        states.remove(*session)?;
                        ids.remove(*session)?;
                        let same = sessions.get(id.as_str())?.is_some_and(|v| {
                            v.value().get(0..8) == Some(&session.to_le_bytes()[..])
                        });
                        if same {
                            sessions.remove(id.as_str())?;
                        }
                    }
                }
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Removes every entry (used before a rebuild from the log).
    pub fn clear(&self) -> Result<(), IndexError> {
        let db = self.writer()?;
        let txn = db.begin_write()?;
        txn.delete_table(META)?;
        txn.delete_table(SESSIONS)?;
        txn.delete_table(SESSION_IDS)?;
        txn.delete_table(EVENTS)?;
        txn.delete_table(SURFACE)?;
        txn.delete_table(SESSION_STATE)?;
        txn.delete_table(PROJECTIONS)?;
        {
            txn.open_table(META)?;
            txn.open_table(SESSIONS)?;
            txn.open_table(SESSION_IDS)?;
            txn.open_table(EVENTS)?;
            txn.open_table(SURFACE)?;
            txn.open_table(SESSION_STATE)?;
            txn.open_table(PROJECTIONS)?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Every projection checkpoint record of `session`: (key, record).
    pub fn projections(&self, session: u64) -> Result<Vec<(String, Vec<u8>)>, IndexError> {
        let txn = self.begin_read()?;
        let table = match txn.open_table(PROJECTIONS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        for item in table.range::<(u64, &str)>((session, "")..(session + 1, ""))? {
            let (k, v) = item?;
            out.push((k.value().1.to_owned(), v.value().to_vec()));
        }
        Ok(out)
    }

    /// Every surface node of `session` with its (prev, next) links.
    pub fn surface_links(&self, session: u64) -> Result<Vec<(Seq, Seq, Seq)>, IndexError> {
        let txn = self.begin_read()?;
        let table = txn.open_table(SURFACE)?;
        let lo = event_key(session, 0);
        let hi = event_key(session, u64::MAX);
        let mut out = Vec::new();
        for item in table.range::<&[u8; 16]>(&lo..=&hi)? {
            let (k, v) = item?;
            let (k, v) = (k.value(), v.value());
            out.push((u64_be(&k[8..16]), u64_le(&v[0..8]), u64_le(&v[8..16])));
        }
        Ok(out)
    }

    /// The session-state checkpoint of `session`: (covered seq, postcard bytes).
    pub fn state(&self, session: u64) -> Result<Option<(Seq, Vec<u8>)>, IndexError> {
        let txn = self.begin_read()?;
        let table = txn.open_table(SESSION_STATE)?;
        let Some(v) = table.get(session)? else {
            return Ok(None);
        };
        let v = v.value();
        if v.len() < 8 {
            return Err(malformed(
                "session_state",
                format!("value is {} bytes", v.len()),
            ));
        }
        Ok(Some((u64_le(&v[0..8]), v[8..].to_vec())))
    }

    /// Looks up one event's location.
    pub fn location(&self, session: u64, seq: Seq) -> Result<Option<Location>, IndexError> {
        let txn = self.begin_read()?;
        let table = txn.open_table(EVENTS)?;
        Ok(table
            .get(&event_key(session, seq))?
            .map(|v| Location::decode(v.value())))
    }

    /// Locations of `session`'s events with seq in `from..to`, at most `limit` of them.
    pub fn locations(
        &self,
        session: u64,
        from: Seq,
        to: Seq,
        limit: usize,
    ) -> Result<Vec<(Seq, Location)>, IndexError> {
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        let txn = self.begin_read()?;
        let table = txn.open_table(EVENTS)?;
        let lo = event_key(session, from);
        let hi = event_key(session, to);
        for item in table.range::<&[u8; 16]>(&lo..&hi)? {
            let (k, v) = item?;
            let seq = u64_be(&k.value()[8..16]);
            out.push((seq, Location::decode(v.value())));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// Every entry of every table, in key order, as bytes: for comparing two indexes.
    pub fn dump(&self) -> Result<Vec<DumpEntry>, IndexError> {
        let txn = self.begin_read()?;
        let mut out = Vec::new();
        for item in txn.open_table(META)?.iter()? {
            let (k, v) = item?;
            out.push((
                "meta".into(),
                k.value().as_bytes().to_vec(),
                v.value().to_vec(),
            ));
        }
        for item in txn.open_table(SESSIONS)?.iter()? {
            let (k, v) = item?;
            out.push((
                "sessions".into(),
                k.value().as_bytes().to_vec(),
                v.value().to_vec(),
            ));
        }
        for item in txn.open_table(SESSION_IDS)?.iter()? {
            let (k, v) = item?;
            out.push((
                "session_ids".into(),
                k.value().to_be_bytes().to_vec(),
                v.value().as_bytes().to_vec(),
            ));
        }
        for item in txn.open_table(EVENTS)?.iter()? {
            let (k, v) = item?;
            out.push(("events".into(), k.value().to_vec(), v.value().to_vec()));
        }
        for item in txn.open_table(SURFACE)?.iter()? {
            let (k, v) = item?;
            out.push(("surface".into(), k.value().to_vec(), v.value().to_vec()));
        }
        for item in txn.open_table(SESSION_STATE)?.iter()? {
            let (k, v) = item?;
            out.push((
                "session_state".into(),
                k.value().to_be_bytes().to_vec(),
                v.value().to_vec(),
            ));
        }
        for item in txn.open_table(PROJECTIONS)?.iter()? {
            let (k, v) = item?;
            let (session, key) = k.value();
            let mut kb = session.to_be_bytes().to_vec();
            kb.extend_from_slice(key.as_bytes());
            out.push(("projections".into(), kb, v.value().to_vec()));
        }
        Ok(out)
    }
}

/// One index entry as bytes: (table, key, value).
pub type DumpEntry = (String, Vec<u8>, Vec<u8>);

fn malformed(table: &'static str, detail: String) -> IndexError {
    IndexError::Malformed { table, detail }
}

fn u64_le(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

fn u64_be(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

fn u32_le(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}
