//! The redb index (`index.redb`): derived data that makes reads and resume cheap.
//!
//! Tables (byte layouts in `format-spec.md`):
//!
//! | table            | key                                 | value (then a CRC-32, see below)       |
//! |------------------|-------------------------------------|----------------------------------------|
//! | `meta`           | `&str` name                         | bytes (format version, watermark, ...) |
//! | `sessions`       | `u64` session number                | [`SessionRow`] (fixed fields + header) |
//! | `session_ids`    | `u64` session number                | session id (UTF-8)                     |
//! | `events`         | `[u8;16]` session BE ‖ first seq BE | [`Run`] (28 bytes; one per run)        |
//! | `surface`        | `[u8;16]` session BE ‖ seq BE       | prev ‖ next (u64 LE each, MAX = none)  |
//! | `session_state`  | `u64` session number                | covered seq u64 LE ‖ postcard state    |
//! | `projections`    | `(u64, &str)`                       | projection checkpoint record           |
//!
//! Every value ends with a CRC-32 (crc32fast, LE) of the entry's key bytes ([`KeyBytes`]) and
//! the value bytes before it, checked on every read: redb verifies its page checksums only in
//! an integrity check, so a flipped byte would otherwise be read as data. A mismatch, an entry
//! that does not decode, a redb corruption error or a panic inside redb is
//! [`IndexError::Damaged`]: the index is derived data, rebuilt from the log by a read-write open
//! or `sessionlog recover`.
//!
//! The log is the truth: the index records a watermark (how far into the log it covers), and
//! deleting `index.redb` rebuilds the same index from the segments.

use std::path::Path;

use std::cell::Cell;
use std::panic::AssertUnwindSafe;

use redb::{
    Builder, Database, Durability, ReadOnlyDatabase, ReadableDatabase, ReadableTable,
    StorageBackend, TableDefinition,
};

use crate::error::{IndexError, LogPosition};
use crate::event::{Seq, SessionHeader};

/// `meta`: name → bytes ‖ CRC.
pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// `sessions`: session number → [`SessionRow`] bytes ‖ CRC.
pub const SESSIONS: TableDefinition<u64, &[u8]> = TableDefinition::new("sessions");
/// `session_ids`: session number → session id (UTF-8) ‖ CRC.
pub const SESSION_IDS: TableDefinition<u64, &[u8]> = TableDefinition::new("session_ids");
/// `events`: (session number, first seq of a run) big-endian → [`Run`] value ([`RUN_LEN`] bytes)
/// ‖ CRC. One entry per run of a session's consecutive events in one frame (a sparse index).
pub const EVENTS: TableDefinition<&[u8; 16], &[u8; RUN_VALUE_LEN]> = TableDefinition::new("events");

/// Bytes of an encoded [`Run`] ([`Run::encode`]).
pub const RUN_LEN: usize = 28;
/// Bytes of an `events` value: the run and its CRC ([`run_value`]).
pub const RUN_VALUE_LEN: usize = RUN_LEN + CRC_LEN;
/// Bytes of a `surface` value: prev ‖ next ‖ CRC.
pub const SURFACE_VALUE_LEN: usize = 16 + CRC_LEN;
/// Bytes of the CRC-32 that ends every index value.
pub const CRC_LEN: usize = 4;

/// `surface`: (session number, seq) big-endian → prev seq ‖ next seq (u64 LE, `u64::MAX` = none)
/// ‖ CRC.
pub const SURFACE: TableDefinition<&[u8; 16], &[u8; SURFACE_VALUE_LEN]> =
    TableDefinition::new("surface");
/// `session_state`: session number → covered seq (u64 LE) ‖ postcard `SessionState` ‖ CRC.
pub const SESSION_STATE: TableDefinition<u64, &[u8]> = TableDefinition::new("session_state");

/// `projections`: (session number, projection key) → projection checkpoint record
/// (`crate::projection::Checkpoint::to_record`) ‖ CRC.
pub const PROJECTIONS: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("projections");

mod values;

pub use values::*;

enum Db {
    Write(Database),
    Read(ReadOnlyDatabase),
}

/// The opened index.
pub struct Index {
    /// `None` only while being dropped.
    db: Option<Db>,
}

impl Drop for Index {
    fn drop(&mut self) {
        // Closing a damaged file (or one redb panicked on before) can panic inside redb.
        if let Some(db) = self.db.take() {
            let _ = guarded("index.redb", move || {
                drop(db);
                Ok(())
            });
        }
    }
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index").finish_non_exhaustive()
    }
}

/// The index format version (stored under `meta/format_version`).
pub const INDEX_FORMAT_VERSION: u32 = 3;

/// What the index says when opened.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexState {
    /// The format version recorded (`None` for a fresh index).
    pub format_version: Option<u32>,
    /// How far the index covers the log.
    pub watermark: Watermark,
    /// Every session row.
    pub sessions: Vec<(String, SessionRow)>,
    /// The number the next created session gets (0 when not recorded).
    pub next_session: u64,
}

thread_local! {
    /// Depth of [`guarded`] calls on this thread: panics inside them are not printed.
    static GUARDED: Cell<u32> = const { Cell::new(0) };
}

/// Installs (once) a panic hook that stays quiet for panics [`guarded`] turns into errors and
/// hands every other panic to the hook that was installed before.
fn quiet_guarded_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.with(Cell::get) == 0 {
                previous(info);
            }
        }));
    });
}

/// Runs a redb call, turning a panic inside redb (a damaged file can make it hit an
/// `unreachable!` or index out of bounds) into [`IndexError::Damaged`].
fn guarded<T>(
    table: &'static str,
    f: impl FnOnce() -> Result<T, IndexError>,
) -> Result<T, IndexError> {
    quiet_guarded_panics();
    GUARDED.with(|g| g.set(g.get() + 1));
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(g.get().saturating_sub(1)));
    match result {
        Ok(r) => r,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            Err(damaged(table, format!("redb failed reading it: {message}")))
        }
    }
}

/// True when a redb error opening or checking the file means the file is unusable and is
/// best rebuilt from the log: anything but the file being in use or not accessible to us (a
/// damaged header can make redb read past the end, or call an empty file not a database).
fn damage_in(e: &redb::DatabaseError) -> bool {
    match e {
        redb::DatabaseError::Storage(redb::StorageError::Io(io)) => {
            io.kind() != std::io::ErrorKind::PermissionDenied
        }
        redb::DatabaseError::DatabaseAlreadyOpen => false,
        _ => true,
    }
}

fn open_error(path: &Path, e: redb::DatabaseError) -> IndexError {
    if damage_in(&e) {
        damaged(
            "index.redb",
            format!("redb cannot open {}: {e}", path.display()),
        )
    } else {
        IndexError::Open {
            path: path.to_path_buf(),
            source: Box::new(e.into()),
        }
    }
}

/// An in-memory redb backend holding `bytes`.
fn memory_backend(bytes: &[u8]) -> Result<redb::backends::InMemoryBackend, IndexError> {
    let backend = redb::backends::InMemoryBackend::new();
    backend
        .set_len(bytes.len() as u64)
        .and_then(|()| backend.write(0, bytes))
        .map_err(IndexError::Memory)?;
    Ok(backend)
}

impl Index {
    /// Opens (or creates) `index.redb` for writing. A file redb refuses as corrupt, or that
    /// makes redb panic, is [`IndexError::Damaged`].
    pub fn open(path: &Path) -> Result<Index, IndexError> {
        guarded("index.redb", || {
            let db = Database::create(path).map_err(|e| open_error(path, e))?;
            Index::init(db)
        })
    }

    /// [`Index::open`], then redb's integrity check (every page checksum of the committed
    /// trees) and a check of every entry's CRC ([`Index::check_entries`]). For `recover`.
    pub fn open_checked(path: &Path) -> Result<Index, IndexError> {
        guarded("index.redb", || {
            let db = Builder::new()
                .set_check_integrity_on_open(true)
                .create(path)
                .map_err(|e| open_error(path, e))?;
            let index = Index::init(db)?;
            if index.load()?.format_version == Some(INDEX_FORMAT_VERSION) {
                index.check_entries()?;
            }
            Ok(index)
        })
    }

    /// A new, empty index held in memory (nothing is written to disk).
    pub fn in_memory() -> Result<Index, IndexError> {
        guarded("index.redb", || {
            let db = Builder::new()
                .create_with_backend(redb::backends::InMemoryBackend::new())
                .map_err(|e| IndexError::Redb(Box::new(e.into())))?;
            Index::init(db)
        })
    }

    /// A copy of `index.redb` in memory, opened writable there: redb repairs a file whose
    /// writer crashed in memory, and later commits change only the copy. The file is only
    /// read.
    pub fn copy_in_memory(path: &Path) -> Result<Index, IndexError> {
        let bytes = std::fs::read(path).map_err(|source| IndexError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        guarded("index.redb", || {
            let db = Builder::new()
                .create_with_backend(memory_backend(&bytes)?)
                .map_err(|e| open_error(path, e))?;
            Index::init(db)
        })
    }

    /// Opens `index.redb` for a read-only store without modifying it: the file itself when
    /// its last writer closed it, otherwise (a writer crashed, leaving redb commits that need
    /// repair) a copy repaired in memory, with the reason.
    pub fn open_for_reading(path: &Path) -> Result<(Index, Option<String>), IndexError> {
        let opened = guarded("index.redb", || Ok(ReadOnlyDatabase::open(path)))?;
        match opened {
            Ok(db) => Ok((
                Index {
                    db: Some(Db::Read(db)),
                },
                None,
            )),
            Err(redb::DatabaseError::RepairAborted) => Ok((
                Index::copy_in_memory(path)?,
                Some("the last writer did not close the index (it crashed or was killed)".into()),
            )),
            Err(e) => Err(open_error(path, e)),
        }
    }

    fn init(db: Database) -> Result<Index, IndexError> {
        // An index of another format version keeps its tables as they are (their types may
        // differ): recovery refuses it or clears it for a rebuild.
        let version = {
            let txn = db.begin_read()?;
            match txn.open_table(META) {
                Ok(meta) => meta.get(META_FORMAT_VERSION)?.map(|v| v.value().to_vec()),
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(e.into()),
            }
        };
        if let Some(v) = version {
            if v.get(..4) == Some(&INDEX_FORMAT_VERSION.to_le_bytes()[..]) {
                // An index of this version has every table: a missing one was lost to
                // damage, and creating it empty would hide the loss.
                let txn = db.begin_read()?;
                txn.open_table(SESSIONS)?;
                txn.open_table(SESSION_IDS)?;
                txn.open_table(EVENTS)?;
                txn.open_table(SURFACE)?;
                txn.open_table(SESSION_STATE)?;
                txn.open_table(PROJECTIONS)?;
            }
            return Ok(Index {
                db: Some(Db::Write(db)),
            });
        }
        let mut txn = db.begin_write()?;
        // Creating missing tables need not be durable: a lost creation is redone next open.
        txn.set_durability(Durability::None)?;
        create_tables(&txn)?;
        txn.commit()?;
        Ok(Index {
            db: Some(Db::Write(db)),
        })
    }

    /// Opens an existing `index.redb` read-only (fails when a crashed writer left commits that
    /// need repair; [`Index::open_for_reading`] handles that).
    pub fn open_read_only(path: &Path) -> Result<Index, IndexError> {
        guarded("index.redb", || {
            Ok(Index {
                db: Some(Db::Read(
                    ReadOnlyDatabase::open(path).map_err(|e| open_error(path, e))?,
                )),
            })
        })
    }

    /// redb's integrity check (every page checksum; repairs in place, so use it on a writable
    /// index or an in-memory copy). `Ok(false)` when redb had to repair something.
    pub fn check_integrity(&mut self) -> Result<bool, IndexError> {
        let Some(Db::Write(db)) = &mut self.db else {
            return Err(IndexError::ReadOnly {
                operation: "the integrity check",
            });
        };
        guarded("index.redb", || match db.check_integrity() {
            Ok(clean) => Ok(clean),
            Err(e) if damage_in(&e) => Err(damaged(
                "index.redb",
                format!("redb's integrity check failed: {e}"),
            )),
            Err(e) => Err(IndexError::Redb(Box::new(e.into()))),
        })
    }

    /// True when the index accepts commits (a read-write file, or a copy in memory).
    pub fn is_writable(&self) -> bool {
        matches!(self.db, Some(Db::Write(_)))
    }

    /// Closes the index (a damaged file may make redb panic even while closing; that is
    /// caught).
    pub fn close(self) {
        drop(self);
    }

    fn begin_read(&self) -> Result<redb::ReadTransaction, IndexError> {
        Ok(match &self.db {
            Some(Db::Write(db)) => db.begin_read()?,
            Some(Db::Read(db)) => db.begin_read()?,
            None => return Err(IndexError::Closed),
        })
    }

    fn writer(&self) -> Result<&Database, IndexError> {
        match &self.db {
            Some(Db::Write(db)) => Ok(db),
            _ => Err(IndexError::ReadOnly {
                operation: "writing",
            }),
        }
    }

    /// Reads the meta table and every session row (checking their CRCs).
    pub fn load(&self) -> Result<IndexState, IndexError> {
        guarded("meta", || self.load_inner())
    }

    fn load_inner(&self) -> Result<IndexState, IndexError> {
        let txn = self.begin_read()?;
        let meta = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => {
                if holds_entries(&txn)? {
                    return Err(damaged(
                        "meta",
                        "the table is missing while other tables hold entries".into(),
                    ));
                }
                return Ok(IndexState {
                    format_version: None,
                    watermark: Watermark::default(),
                    sessions: Vec::new(),
                    next_session: 0,
                });
            }
            Err(e) => return Err(e.into()),
        };
        let format_version = match meta.get(META_FORMAT_VERSION)? {
            Some(v) => {
                // The version comes first in every version's layout (versions 1 and 2 stored
                // the 4 bytes alone, version 3 adds the CRC): a newer index is recognised
                // whatever else it changed.
                let v = v.value();
                if v.len() < 4 {
                    return Err(damaged("meta", "format_version is under 4 bytes".into()));
                }
                let version = u32_le(v);
                if version == INDEX_FORMAT_VERSION {
                    let payload = unseal("meta", META_FORMAT_VERSION.as_bytes(), v)?;
                    if payload.len() != 4 {
                        return Err(damaged("meta", "format_version is not 4 bytes".into()));
                    }
                }
                Some(version)
            }
            None => None,
        };
        if format_version.is_some_and(|v| v != INDEX_FORMAT_VERSION) {
            // Other tables may have other layouts: nothing else is read.
            return Ok(IndexState {
                format_version,
                watermark: Watermark::default(),
                sessions: Vec::new(),
                next_session: 0,
            });
        }
        if format_version.is_some() {
            // Every table exists in an index of this version (a missing one was lost).
            txn.open_table(SESSION_IDS)?;
            txn.open_table(EVENTS)?;
            txn.open_table(SURFACE)?;
            txn.open_table(SESSION_STATE)?;
            txn.open_table(PROJECTIONS)?;
        }
        let watermark = match meta.get(META_WATERMARK)? {
            Some(v) => Watermark::decode(unseal("meta", META_WATERMARK.as_bytes(), v.value())?)?,
            None => Watermark::default(),
        };
        let next_session = match meta.get(META_NEXT_SESSION)? {
            Some(v) => {
                let v = unseal("meta", META_NEXT_SESSION.as_bytes(), v.value())?;
                if v.len() != 8 {
                    return Err(damaged("meta", "next_session is not 8 bytes".into()));
                }
                u64_le(v)
            }
            None => 0,
        };
        if format_version.is_none() {
            let present =
                watermark != Watermark::default() || next_session != 0 || holds_entries(&txn)?;
            if present {
                return Err(damaged(
                    "meta",
                    "the format version is missing while other entries are present".into(),
                ));
            }
        }
        let mut sessions = Vec::new();
        let table = match txn.open_table(SESSIONS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) if format_version.is_none() => {
                return Ok(IndexState {
                    format_version,
                    watermark,
                    sessions,
                    next_session,
                });
            }
            Err(e) => return Err(e.into()),
        };
        for item in table.iter()? {
            let (k, v) = item?;
            let number = k.value();
            let row =
                SessionRow::decode(unseal("sessions", &KeyBytes::number(number), v.value())?)?;
            if row.number != number {
                return Err(damaged(
                    "sessions",
                    format!("row of session number {} is keyed {number}", row.number),
                ));
            }
            sessions.push((row.header.id.to_string(), row));
        }
        counted("sessions", sessions.len(), &table)?;
        if format_version.is_some() && meta.get(META_WATERMARK)?.is_none() {
            return Err(damaged("meta", "the watermark is missing".into()));
        }
        Ok(IndexState {
            format_version,
            watermark,
            sessions,
            next_session,
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
        guarded("events", || self.commit_inner(batch, watermark, durable))
    }

    fn commit_inner(
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
        let meta_value = |key: &str, payload: &[u8]| seal(key.as_bytes(), payload);
        {
            let mut meta = txn.open_table(META)?;
            meta.insert(
                META_FORMAT_VERSION,
                meta_value(META_FORMAT_VERSION, &INDEX_FORMAT_VERSION.to_le_bytes()).as_slice(),
            )?;
            meta.insert(
                META_WATERMARK,
                meta_value(META_WATERMARK, &watermark.encode()).as_slice(),
            )?;
            let purged = batch.ops.iter().filter_map(|op| match op {
                IndexOp::Purge { session, .. } => Some(*session),
                _ => None,
            });
            if let Some(max) = batch.sessions.iter().map(|r| r.number).chain(purged).max() {
                let stored = match meta.get(META_NEXT_SESSION)? {
                    Some(v) => {
                        let v = unseal("meta", META_NEXT_SESSION.as_bytes(), v.value())?;
                        if v.len() == 8 { u64_le(v) } else { 0 }
                    }
                    None => 0,
                };
                let next = stored.max(max.saturating_add(1));
                if next != stored {
                    meta.insert(
                        META_NEXT_SESSION,
                        meta_value(META_NEXT_SESSION, &next.to_le_bytes()).as_slice(),
                    )?;
                }
            }
            let mut sessions = txn.open_table(SESSIONS)?;
            let mut ids = txn.open_table(SESSION_IDS)?;
            for row in &batch.sessions {
                let key = KeyBytes::number(row.number);
                sessions.insert(row.number, seal(&key, &row.encode()).as_slice())?;
                ids.insert(row.number, seal(&key, row.header.id.as_bytes()).as_slice())?;
            }
            let mut events = txn.open_table(EVENTS)?;
            let mut seen = std::collections::HashSet::new();
            for (session, run) in coalesce(&batch.events) {
                let mut run = run;
                // The first run of a session in a batch may continue the session's last stored
                // run (same frame, next seq): extend it, so the index does not depend on how
                // the log was cut into commits.
                if seen.insert(session) {
                    let lo = event_key(session, 0);
                    let key = event_key(session, run.first_seq);
                    let prev = match events.range::<&[u8; 16]>(&lo..=&key)?.next_back() {
                        Some(item) => {
                            let (k, v) = item?;
                            Some(decode_run_entry(k.value(), v.value())?.1)
                        }
                        None => None,
                    };
                    if let Some(prev) = prev
                        && prev.location.same_frame(&run.location)
                        && prev.end() == run.first_seq
                        && let Some(count) = prev.count.checked_add(run.count)
                    {
                        run = Run { count, ..prev };
                    }
                }
                events.insert(
                    &event_key(session, run.first_seq),
                    &run_value(session, &run),
                )?;
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
                        surface.insert(
                            &event_key(*session, *seq),
                            &surface_value(*session, *seq, *prev, *next),
                        )?;
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
                        states
                            .insert(*session, seal(&KeyBytes::number(*session), &v).as_slice())?;
                    }
                    IndexOp::Projection {
                        session,
                        key,
                        record,
                    } => {
                        projections.insert(
                            (*session, key.as_str()),
                            seal(&KeyBytes::pair(*session, key), record).as_slice(),
                        )?;
                    }
                    IndexOp::Purge { session, .. } => {
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
                        sessions.remove(*session)?;
                    }
                }
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Removes every entry (used before a rebuild from the log).
    pub fn clear(&self) -> Result<(), IndexError> {
        guarded("index.redb", || {
            let db = self.writer()?;
            let txn = db.begin_write()?;
            txn.delete_table(META)?;
            txn.delete_table(SESSIONS)?;
            txn.delete_table(SESSION_IDS)?;
            txn.delete_table(EVENTS)?;
            txn.delete_table(SURFACE)?;
            txn.delete_table(SESSION_STATE)?;
            txn.delete_table(PROJECTIONS)?;
            create_tables(&txn)?;
            txn.commit()?;
            Ok(())
        })
    }

    /// Every projection checkpoint record of `session`: (key, record).
    pub fn projections(&self, session: u64) -> Result<Vec<(String, Vec<u8>)>, IndexError> {
        guarded("projections", || {
            let txn = self.begin_read()?;
            let table = match txn.open_table(PROJECTIONS) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(e.into()),
            };
            let mut out = Vec::new();
            for item in table.range::<(u64, &str)>((session, "")..(session + 1, ""))? {
                let (k, v) = item?;
                let (n, key) = k.value();
                let record = unseal("projections", &KeyBytes::pair(n, key), v.value())?;
                out.push((key.to_owned(), record.to_vec()));
            }
            Ok(out)
        })
    }

    /// Every surface node of `session` with its (prev, next) links.
    pub fn surface_links(&self, session: u64) -> Result<Vec<(Seq, Seq, Seq)>, IndexError> {
        guarded("surface", || {
            let txn = self.begin_read()?;
            let table = txn.open_table(SURFACE)?;
            let lo = event_key(session, 0);
            let hi = event_key(session, u64::MAX);
            let mut out = Vec::new();
            for item in table.range::<&[u8; 16]>(&lo..=&hi)? {
                let (k, v) = item?;
                let k = k.value();
                let v = unseal("surface", k, v.value())?;
                out.push((u64_be(&k[8..16]), u64_le(&v[0..8]), u64_le(&v[8..16])));
            }
            Ok(out)
        })
    }

    /// The session-state checkpoint of `session`: (covered seq, postcard bytes).
    pub fn state(&self, session: u64) -> Result<Option<(Seq, Vec<u8>)>, IndexError> {
        guarded("session_state", || {
            let txn = self.begin_read()?;
            let table = txn.open_table(SESSION_STATE)?;
            let Some(v) = table.get(session)? else {
                return Ok(None);
            };
            let v = unseal("session_state", &KeyBytes::number(session), v.value())?;
            if v.len() < 8 {
                return Err(damaged(
                    "session_state",
                    format!("the value of session number {session} is {} bytes", v.len()),
                ));
            }
            Ok(Some((u64_le(&v[0..8]), v[8..].to_vec())))
        })
    }

    /// The run holding `session`'s event `seq`: the entry with the largest key at or below
    /// `(session, seq)`, if it belongs to `session` and its count reaches `seq`.
    pub fn run(&self, session: u64, seq: Seq) -> Result<Option<Run>, IndexError> {
        guarded("events", || {
            let txn = self.begin_read()?;
            let table = txn.open_table(EVENTS)?;
            covering(&table, session, seq)
        })
    }

    /// The runs holding `session`'s events with seq in `from..to`, in seq order, at most
    /// `limit` of them: the run holding `from` (when there is one) and every run starting
    /// after it, below `to`.
    pub fn runs(
        &self,
        session: u64,
        from: Seq,
        to: Seq,
        limit: usize,
    ) -> Result<Vec<Run>, IndexError> {
        let mut out = Vec::new();
        if from >= to || limit == 0 {
            return Ok(out);
        }
        guarded("events", || {
            let txn = self.begin_read()?;
            let table = txn.open_table(EVENTS)?;
            out.extend(covering(&table, session, from)?);
            let lo = event_key(session, from + 1);
            let hi = event_key(session, to);
            for item in table.range::<&[u8; 16]>(&lo..&hi)? {
                if out.len() >= limit {
                    break;
                }
                let (k, v) = item?;
                let (_, run) = decode_run_entry(k.value(), v.value())?;
                out.push(run);
            }
            Ok(out)
        })
    }

    /// Every entry of every table, in key order, as bytes (values without their CRC, which
    /// is checked): for comparing two indexes.
    pub fn dump(&self) -> Result<Vec<DumpEntry>, IndexError> {
        guarded("index.redb", || self.dump_inner())
    }

    /// Checks every entry of every table (its CRC and, where it has one, its layout).
    /// Returns the number of entries.
    pub fn check_entries(&self) -> Result<u64, IndexError> {
        let entries = self.dump()?;
        for (table, key, value) in &entries {
            match table.as_str() {
                "sessions" => {
                    SessionRow::decode(value)?;
                }
                "events" => {
                    let mut b = [0u8; RUN_LEN];
                    if value.len() != RUN_LEN || key.len() != 16 {
                        return Err(damaged("events", "an entry has the wrong size".into()));
                    }
                    b.copy_from_slice(value);
                    Run::decode(u64_be(&key[8..16]), &b)?;
                }
                "session_ids" if std::str::from_utf8(value).is_err() => {
                    return Err(damaged("session_ids", "an id is not UTF-8".into()));
                }
                _ => {}
            }
        }
        Ok(entries.len() as u64)
    }

    fn dump_inner(&self) -> Result<Vec<DumpEntry>, IndexError> {
        let txn = self.begin_read()?;
        let mut out: Vec<DumpEntry> = Vec::new();
        // One table: every entry's CRC checked (over `crc_key`), the key as `out_key` bytes,
        // and the entry count compared with redb's.
        macro_rules! dump {
            ($def:expr, $name:literal, |$k:ident| $crc_key:expr, $out_key:expr) => {{
                let table = txn.open_table($def)?;
                let before = out.len();
                for item in table.iter()? {
                    let (k, v) = item?;
                    let $k = k.value();
                    let v = unseal($name, $crc_key, v.value())?;
                    out.push(($name.into(), $out_key, v.to_vec()));
                }
                counted($name, out.len() - before, &table)?;
            }};
        }
        dump!(META, "meta", |k| k.as_bytes(), k.as_bytes().to_vec());
        dump!(
            SESSIONS,
            "sessions",
            |k| &KeyBytes::number(k),
            k.to_be_bytes().to_vec()
        );
        dump!(
            SESSION_IDS,
            "session_ids",
            |k| &KeyBytes::number(k),
            k.to_be_bytes().to_vec()
        );
        dump!(EVENTS, "events", |k| k, k.to_vec());
        dump!(SURFACE, "surface", |k| k, k.to_vec());
        dump!(
            SESSION_STATE,
            "session_state",
            |k| &KeyBytes::number(k),
            k.to_be_bytes().to_vec()
        );
        dump!(PROJECTIONS, "projections", |k| &KeyBytes::pair(k.0, k.1), {
            let mut kb = k.0.to_be_bytes().to_vec();
            kb.extend_from_slice(k.1.as_bytes());
            kb
        });
        Ok(out)
    }
}

/// The run of `table` holding `(session, seq)`.
fn covering(
    table: &impl ReadableTable<&'static [u8; 16], &'static [u8; RUN_VALUE_LEN]>,
    session: u64,
    seq: Seq,
) -> Result<Option<Run>, IndexError> {
    let lo = event_key(session, 0);
    let key = event_key(session, seq);
    let Some(item) = table.range::<&[u8; 16]>(&lo..=&key)?.next_back() else {
        return Ok(None);
    };
    let (k, v) = item?;
    let (_, run) = decode_run_entry(k.value(), v.value())?;
    Ok(run.contains(seq).then_some(run))
}

/// One index entry as bytes: (table, key, value).
pub type DumpEntry = (String, Vec<u8>, Vec<u8>);

/// True when the `sessions` or `events` table exists and holds an entry.
fn holds_entries(txn: &redb::ReadTransaction) -> Result<bool, IndexError> {
    let mut present = false;
    match txn.open_table(SESSIONS) {
        Ok(t) => present |= t.iter()?.next().is_some(),
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(e.into()),
    }
    match txn.open_table(EVENTS) {
        Ok(t) => present |= t.iter()?.next().is_some(),
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(present)
}

/// Checks that iterating `table` gave as many entries as redb's table header records (a
/// damaged page can hide entries without failing any value's CRC).
fn counted(
    name: &'static str,
    iterated: usize,
    table: &impl redb::ReadableTableMetadata,
) -> Result<(), IndexError> {
    let recorded = table.len()?;
    if recorded != iterated as u64 {
        return Err(damaged(
            name,
            format!("the table records {recorded} entries but {iterated} were found"),
        ));
    }
    Ok(())
}

fn damaged(table: &'static str, detail: String) -> IndexError {
    IndexError::Damaged { table, detail }
}

/// Opens (creating when missing) every table of the index in `txn`.
fn create_tables(txn: &redb::WriteTransaction) -> Result<(), redb::TableError> {
    txn.open_table(META)?;
    txn.open_table(SESSIONS)?;
    txn.open_table(SESSION_IDS)?;
    txn.open_table(EVENTS)?;
    txn.open_table(SURFACE)?;
    txn.open_table(SESSION_STATE)?;
    txn.open_table(PROJECTIONS)?;
    Ok(())
}

fn malformed(table: &'static str, detail: String) -> IndexError {
    damaged(table, detail)
}

fn hex(b: &[u8]) -> String {
    let shown: String = b.iter().take(24).map(|x| format!("{x:02x}")).collect();
    if b.len() > 24 {
        format!("{shown}…")
    } else {
        shown
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(frame: u64, record_offset: u32) -> Location {
        Location {
            segment: 1,
            frame_offset: frame,
            frame_len: 100,
            record_offset,
        }
    }

    fn events_of(index: &Index) -> Vec<(u64, Run)> {
        index
            .dump()
            .unwrap()
            .into_iter()
            .filter(|(t, _, _)| t == "events")
            .map(|(_, k, v)| {
                let k: [u8; 16] = k.try_into().unwrap();
                let v: [u8; RUN_LEN] = v.try_into().unwrap();
                (
                    u64_be(&k[0..8]),
                    Run::decode(u64_be(&k[8..16]), &v).unwrap(),
                )
            })
            .collect()
    }

    /// Sessions 1 and 2 interleaved in frame 10, then both again in frame 20.
    fn interleaved() -> Vec<(u64, Seq, Location)> {
        vec![
            (1, 0, loc(10, 0)),
            (2, 0, loc(10, 7)),
            (1, 1, loc(10, 15)),
            (2, 1, loc(10, 22)),
            (1, 2, loc(10, 30)),
            (1, 3, loc(20, 0)),
            (2, 2, loc(20, 9)),
        ]
    }

    #[test]
    fn run_values_round_trip_and_a_zero_count_is_malformed() {
        let run = Run {
            first_seq: 42,
            count: 7,
            location: Location {
                segment: 3,
                frame_offset: 0x0102_0304_0506,
                frame_len: 999,
                record_offset: 17,
            },
        };
        let b = run.encode();
        assert_eq!(&b[0..8], &3u64.to_le_bytes());
        assert_eq!(&b[8..16], &0x0102_0304_0506u64.to_le_bytes());
        assert_eq!(&b[16..20], &999u32.to_le_bytes());
        assert_eq!(&b[20..24], &17u32.to_le_bytes());
        assert_eq!(&b[24..28], &7u32.to_le_bytes());
        assert_eq!(Run::decode(42, &b).unwrap(), run);
        let mut zero = b;
        zero[24..28].copy_from_slice(&0u32.to_le_bytes());
        assert!(matches!(
            Run::decode(42, &zero),
            Err(IndexError::Damaged {
                table: "events",
                ..
            })
        ));
        assert!(run.contains(42) && run.contains(48));
        assert!(!run.contains(41) && !run.contains(49));
    }

    #[test]
    fn coalesce_makes_one_run_per_session_and_frame() {
        let runs = coalesce(&interleaved());
        assert_eq!(
            runs,
            vec![
                (
                    1,
                    Run {
                        first_seq: 0,
                        count: 3,
                        location: loc(10, 0)
                    }
                ),
                (
                    2,
                    Run {
                        first_seq: 0,
                        count: 2,
                        location: loc(10, 7)
                    }
                ),
                (1, Run::single(3, loc(20, 0))),
                (2, Run::single(2, loc(20, 9))),
            ]
        );
        // A gap in the seqs starts a new run even in the same frame.
        let gap = coalesce(&[(1, 0, loc(10, 0)), (1, 2, loc(10, 5))]);
        assert_eq!(gap.len(), 2);
    }

    #[test]
    fn lookups_find_every_seq_of_interleaved_runs_and_nothing_past_them() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open(&dir.path().join("index.redb")).unwrap();
        let batch = IndexBatch {
            events: interleaved(),
            ..IndexBatch::default()
        };
        index.commit(&batch, Watermark::default(), true).unwrap();
        assert_eq!(events_of(&index).len(), 4, "4 runs for 7 events");
        for (session, seq, l) in interleaved() {
            let run = index.run(session, seq).unwrap().unwrap();
            assert!(run.contains(seq));
            assert!(run.location.same_frame(&l), "{session}/{seq}");
            assert!(run.location.record_offset <= l.record_offset);
        }
        // Past the end of a session's last run, before its first, and another session.
        assert_eq!(index.run(1, 4).unwrap(), None);
        assert_eq!(index.run(2, 3).unwrap(), None);
        assert_eq!(index.run(3, 0).unwrap(), None);
        assert_eq!(index.run(0, 0).unwrap(), None);
        // Range queries: the run holding `from`, then those starting below `to`.
        let runs = index.runs(1, 1, 4, 10).unwrap();
        assert_eq!(
            runs.iter()
                .map(|r| (r.first_seq, r.count))
                .collect::<Vec<_>>(),
            vec![(0, 3), (3, 1)]
        );
        assert_eq!(index.runs(1, 1, 3, 10).unwrap().len(), 1);
        assert_eq!(index.runs(1, 0, 4, 1).unwrap().len(), 1);
        assert!(index.runs(1, 4, 10, 10).unwrap().is_empty());
        assert!(index.runs(2, 2, 2, 10).unwrap().is_empty());
    }

    #[test]
    fn a_frame_split_across_commits_extends_the_stored_run() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open(&dir.path().join("index.redb")).unwrap();
        let commit = |events: Vec<(u64, Seq, Location)>| {
            let batch = IndexBatch {
                events,
                ..IndexBatch::default()
            };
            index.commit(&batch, Watermark::default(), false).unwrap();
        };
        commit(vec![(1, 0, loc(10, 0)), (1, 1, loc(10, 5))]);
        commit(vec![(1, 2, loc(10, 9)), (1, 3, loc(20, 0))]);
        assert_eq!(
            events_of(&index),
            vec![
                (
                    1,
                    Run {
                        first_seq: 0,
                        count: 3,
                        location: loc(10, 0)
                    }
                ),
                (1, Run::single(3, loc(20, 0))),
            ]
        );
    }

    #[test]
    fn purge_removes_every_run_of_the_session_only() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open(&dir.path().join("index.redb")).unwrap();
        let mut events = interleaved();
        events.extend((4..100).map(|s| (1, s, loc(100 + s, 0))));
        let batch = IndexBatch {
            events,
            ..IndexBatch::default()
        };
        index.commit(&batch, Watermark::default(), false).unwrap();
        assert_eq!(events_of(&index).len(), 4 + 96);
        let purge = IndexBatch {
            ops: vec![IndexOp::Purge {
                session: 1,
                id: "a".into(),
            }],
            ..IndexBatch::default()
        };
        index.commit(&purge, Watermark::default(), false).unwrap();
        let left = events_of(&index);
        assert!(left.iter().all(|(s, _)| *s == 2), "{left:?}");
        assert_eq!(left.len(), 2);
        assert_eq!(index.run(1, 0).unwrap(), None);
        assert_eq!(index.run(2, 1).unwrap().unwrap().first_seq, 0);
    }
}
