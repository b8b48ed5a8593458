//! The peers: sessionlog and the stores it is compared with, behind one writer and one
//! reader interface, so every peer is fed the same events in the same groups.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::workload::{write_event_json, write_seq_array, write_surface_op};
use sessionlog::event::{Event, SessionHeader};
use sessionlog::json;
use sessionlog::log::record::{EventRecord, Record};
use sessionlog::store::{Config, Durability, Store};

pub use crate::readers::*;

/// The error type of the harness (threads pass errors back, so it is `Send + Sync`).
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;
/// A harness result.
pub type BenchResult<T> = Result<T, BenchError>;

/// A store under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum PeerKind {
    /// sessionlog itself.
    Sessionlog,
    /// SQLite, dsh's schema 15, WAL, `synchronous=FULL`.
    SqliteFull,
    /// SQLite, dsh's schema 15, WAL, `synchronous=NORMAL` (a commit is not synced: not durable).
    SqliteNormal,
    /// dsh-style JSONL: one file per session, one line per event, fsync per batch.
    Jsonl,
    /// redb alone: one table keyed by (session, seq), one durable commit per batch.
    Redb,
    /// The raw disk: sequential write + fdatasync of the same JSON bytes (the ceiling).
    RawDisk,
    /// dsh's JSONL backend as it writes: zstd frame per write, packed chunk rows.
    DshJsonlZstd,
    /// dsh's SQLite backend, schema 18: packed rows, zstd blobs, WAL, `synchronous=FULL`.
    DshSqlite18,
}

impl PeerKind {
    /// Every peer, sessionlog first.
    pub const ALL: [PeerKind; 8] = [
        PeerKind::Sessionlog,
        PeerKind::SqliteFull,
        PeerKind::SqliteNormal,
        PeerKind::Jsonl,
        PeerKind::DshJsonlZstd,
        PeerKind::DshSqlite18,
        PeerKind::Redb,
        PeerKind::RawDisk,
    ];

    /// The peers that can load a session back (the raw disk keeps no structure).
    pub const READERS: [PeerKind; 6] = [
        PeerKind::Sessionlog,
        PeerKind::SqliteFull,
        PeerKind::Jsonl,
        PeerKind::DshJsonlZstd,
        PeerKind::DshSqlite18,
        PeerKind::Redb,
    ];

    /// The short name used in tables, JSON and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PeerKind::Sessionlog => "sessionlog",
            PeerKind::SqliteFull => "sqlite-wal-full",
            PeerKind::SqliteNormal => "sqlite-wal-normal",
            PeerKind::Jsonl => "dsh-jsonl",
            PeerKind::Redb => "redb",
            PeerKind::RawDisk => "raw-disk",
            PeerKind::DshJsonlZstd => "dsh-jsonl-zstd",
            PeerKind::DshSqlite18 => "dsh-sqlite-18",
        }
    }

    /// The peer of a name.
    pub fn from_name(name: &str) -> Option<PeerKind> {
        PeerKind::ALL.into_iter().find(|p| p.name() == name)
    }

    /// True when a write of this peer returns only once the data is durable.
    pub fn durable(self) -> bool {
        self != PeerKind::SqliteNormal
    }
}

/// How the benchmark groups and syncs appends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Each event is appended and made durable on its own.
    PerEvent,
    /// Events are appended in batches of this many, each batch made durable (one frame /
    /// transaction / write + fsync).
    Batch(usize),
    /// The dsh workload's flush points (4 per turn): events are appended as they come and made
    /// durable at each flush point (sessionlog: `Buffered` + `flush()`).
    FlushPoints,
}

impl Mode {
    /// The name used in tables and JSON.
    pub fn name(self) -> String {
        match self {
            Mode::PerEvent => "sync per event".into(),
            Mode::Batch(n) => format!("batch {n}"),
            Mode::FlushPoints => "buffered, 4 flushes/turn".into(),
        }
    }
}

/// A writer: sessions are numbered by index `0..`; `write` makes one group durable (as far as
/// the peer's durability goes).
pub trait Writer: Sync {
    /// Creates session `index`.
    fn create(&self, index: usize, header: &SessionHeader) -> BenchResult<()>;
    /// Appends one group of events of session `index` and makes it durable.
    fn write(&self, index: usize, events: Vec<Event>) -> BenchResult<()>;
    /// Closes the store cleanly.
    fn close(self: Box<Self>) -> BenchResult<()>;
}

/// Opens a writer of `peer` in the empty directory `dir` for `mode`.
pub fn open_writer(peer: PeerKind, dir: &Path, mode: Mode) -> BenchResult<Box<dyn Writer>> {
    std::fs::create_dir_all(dir)?;
    Ok(match peer {
        PeerKind::Sessionlog => Box::new(SessionlogWriter::open(dir, mode)?),
        PeerKind::SqliteFull => Box::new(SqliteWriter::open(dir, true)?),
        PeerKind::SqliteNormal => Box::new(SqliteWriter::open(dir, false)?),
        PeerKind::Jsonl => Box::new(JsonlWriter::open(dir)),
        PeerKind::Redb => Box::new(RedbWriter::open(dir)?),
        PeerKind::RawDisk => Box::new(RawWriter::open(dir)?),
        PeerKind::DshJsonlZstd => Box::new(crate::faithful::DshJsonlWriter::open(dir, true)),
        PeerKind::DshSqlite18 => Box::new(crate::faithful::Sqlite18Writer::open(dir, true)?),
    })
}

// ---------------------------------------------------------------------------------------------
// sessionlog
// ---------------------------------------------------------------------------------------------

/// How [`SessionlogWriter`] appends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionlogStyle {
    /// `Sync` store; `append` for one event, `append_batch` for several: each write durable.
    Sync,
    /// `Buffered` store; `append` each event, then `flush()` (the flush-point workload).
    BufferedFlush,
    /// `Buffered` store with `batch_bytes = 1`: each `append_batch` is written as its own frame
    /// at once, not synced itself (the store syncs the previous frame before it writes the
    /// next: one `fdatasync` per frame).
    FramesNoSync,
    /// `Buffered` store with the configuration's `batch_bytes`: `append_batch` without a
    /// flush, so frames of about `batch_bytes` hold the groups of several sessions, as group
    /// commit writes them (for filling large stores quickly).
    Staged,
}

/// sessionlog: `Sync` durability with `append`/`append_batch`, or `Buffered` with `flush()`
/// at flush points.
pub struct SessionlogWriter {
    store: Store,
    style: SessionlogStyle,
    ids: Mutex<HashMap<usize, String>>,
}

impl SessionlogWriter {
    /// Opens a store in `dir` configured for `mode`.
    pub fn open(dir: &Path, mode: Mode) -> BenchResult<Self> {
        let style = if mode == Mode::FlushPoints {
            SessionlogStyle::BufferedFlush
        } else {
            SessionlogStyle::Sync
        };
        Self::open_with(dir, Config::default(), style)
    }

    /// Opens a store in `dir` with an explicit configuration (its durability is set from
    /// `style`).
    pub fn open_with(dir: &Path, mut config: Config, style: SessionlogStyle) -> BenchResult<Self> {
        match style {
            SessionlogStyle::Sync => config.durability = Durability::Sync,
            SessionlogStyle::BufferedFlush => config.durability = Durability::Buffered,
            SessionlogStyle::FramesNoSync => {
                config.durability = Durability::Buffered;
                config.batch_bytes = 1;
            }
            SessionlogStyle::Staged => config.durability = Durability::Buffered,
        }
        Ok(SessionlogWriter {
            store: Store::open(dir, config)?,
            style,
            ids: Mutex::new(HashMap::new()),
        })
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The store (for tests of recovery).
    pub fn into_store(self) -> Store {
        self.store
    }

    fn id(&self, index: usize) -> BenchResult<String> {
        self.ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&index)
            .cloned()
            .ok_or_else(|| format!("session {index} was not created").into())
    }
}

impl Writer for SessionlogWriter {
    fn create(&self, index: usize, header: &SessionHeader) -> BenchResult<()> {
        self.store.create_session(header.clone())?;
        self.ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(index, header.id.clone());
        Ok(())
    }

    fn write(&self, index: usize, events: Vec<Event>) -> BenchResult<()> {
        let id = self.id(index)?;
        match self.style {
            SessionlogStyle::BufferedFlush => {
                for e in events {
                    self.store.append(&id, e)?;
                }
                self.store.flush()?;
            }
            SessionlogStyle::Sync if events.len() == 1 => {
                let receipt = self
                    .store
                    .append(&id, events.into_iter().next().ok_or("empty group")?)?;
                if !receipt.durable {
                    return Err("a Sync append returned before it was durable".into());
                }
            }
            SessionlogStyle::Sync | SessionlogStyle::FramesNoSync | SessionlogStyle::Staged => {
                self.store.append_batch(&id, events)?;
            }
        }
        Ok(())
    }

    fn close(self: Box<Self>) -> BenchResult<()> {
        Ok(self.store.close()?)
    }
}

// ---------------------------------------------------------------------------------------------
// SQLite, dsh's schema 15
// ---------------------------------------------------------------------------------------------

/// dsh's schema-15 DDL, exactly as the SQLite interop module writes it.
use sessionlog::interop::sqlite::schema::DDL_15 as SQLITE_15_DDL;

pub(crate) const SQLITE_FILE: &str = "sessions.sqlite";

/// Opens (creating) a schema-15 database in `dir` as dsh does: foreign keys on, the DDL and
/// identity in one transaction, then WAL; `synchronous` FULL or NORMAL.
pub fn open_sqlite(dir: &Path, full: bool) -> BenchResult<rusqlite::Connection> {
    let mut conn = rusqlite::Connection::open(dir.join(SQLITE_FILE))?;
    conn.execute_batch("PRAGMA foreign_keys = ON")?;
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute_batch(SQLITE_15_DDL)?;
    tx.execute(
        "INSERT OR IGNORE INTO persistence_state (singleton, store_id) VALUES (1, ?)",
        ["bench-store"],
    )?;
    tx.execute_batch("PRAGMA application_id = 1146308688; PRAGMA user_version = 15")?;
    tx.commit()?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(format!("SQLite refused WAL mode (got {mode})").into());
    }
    conn.execute_batch(if full {
        "PRAGMA synchronous = FULL"
    } else {
        "PRAGMA synchronous = NORMAL"
    })?;
    Ok(conn)
}

/// SQLite with dsh's schema 15; one transaction per group (insert the rows, bump the
/// session revision, commit). Concurrent sessions share the one connection (SQLite has one
/// writer at a time; a mutex is its best case).
pub struct SqliteWriter {
    conn: Mutex<rusqlite::Connection>,
    ids: Mutex<HashMap<usize, String>>,
}

impl SqliteWriter {
    /// Opens the database in `dir`.
    pub fn open(dir: &Path, full: bool) -> BenchResult<Self> {
        Ok(SqliteWriter {
            conn: Mutex::new(open_sqlite(dir, full)?),
            ids: Mutex::new(HashMap::new()),
        })
    }
}

/// The column texts dsh's schema 15 stores for an event's `sourceEventSeqs` and `surfaceOp`.
fn sqlite_columns(e: &Event) -> (Option<String>, Option<String>) {
    let sources = e.source_event_seqs.as_ref().map(|s| {
        let mut out = String::new();
        write_seq_array(&mut out, s);
        out
    });
    let op = e.surface_op.as_ref().map(|op| {
        let mut out = String::new();
        write_surface_op(&mut out, op);
        out
    });
    (sources, op)
}

impl Writer for SqliteWriter {
    fn create(&self, index: usize, header: &SessionHeader) -> BenchResult<()> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT INTO sessions (id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, incarnation, revision)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)
             ON CONFLICT(id) DO UPDATE SET version=excluded.version, created_at=excluded.created_at, cwd=excluded.cwd,
               parent_session=excluded.parent_session, seed_length=excluded.seed_length, origin=excluded.origin,
               delegation_depth=excluded.delegation_depth, agent_preset=excluded.agent_preset",
            rusqlite::params![
                header.id,
                header.version,
                header.created_at as i64,
                header.cwd,
                header.parent_session,
                header.seed_length.map(|s| s as i64),
                header.origin,
                header.delegation_depth.map(|d| d as i64),
                header.agent_preset,
                format!("incarnation-{index}"),
            ],
        )?;
        tx.commit()?;
        self.ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(index, header.id.clone());
        Ok(())
    }

    fn write(&self, index: usize, events: Vec<Event>) -> BenchResult<()> {
        let id = self
            .ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&index)
            .cloned()
            .ok_or("session not created")?;
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction()?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable) VALUES (?,?,?,?,?,?,?,?)",
            )?;
            for e in &events {
                let (sources, op) = sqlite_columns(e);
                insert.execute(rusqlite::params![
                    id,
                    e.seq as i64,
                    e.kind,
                    e.time,
                    e.data,
                    sources,
                    op,
                    e.ignorable.then_some(1i64),
                ])?;
            }
            tx.prepare_cached("UPDATE sessions SET revision = revision + 1 WHERE id = ?")?
                .execute([&id])?;
        }
        tx.commit()?;
        Ok(())
    }

    fn close(self: Box<Self>) -> BenchResult<()> {
        let conn = self.conn.into_inner().unwrap_or_else(|p| p.into_inner());
        conn.close().map_err(|(_, e)| e)?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// dsh-style JSONL
// ---------------------------------------------------------------------------------------------

/// The path of session `id`'s JSONL file under `dir` (one directory per session, as dsh).
pub fn jsonl_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(id).join("session.jsonl")
}

/// dsh-style JSONL, raw mode, one line per event (no packed rows): each group is one
/// `write` of its lines and one `fsync` of the session's file.
pub struct JsonlWriter {
    dir: PathBuf,
    files: Mutex<HashMap<usize, std::sync::Arc<Mutex<File>>>>,
}

impl JsonlWriter {
    /// A writer of files under `dir`.
    pub fn open(dir: &Path) -> Self {
        JsonlWriter {
            dir: dir.to_path_buf(),
            files: Mutex::new(HashMap::new()),
        }
    }
}

/// dsh's JSONL header line for `h` (`toHeaderLine` key order).
pub fn jsonl_header_line(h: &SessionHeader) -> String {
    let mut s = String::from(r#"{"type":"session","version":0,"id":"#);
    json::write_js_string(&mut s, &h.id);
    s.push_str(&format!(r#","createdAt":{}"#, h.created_at));
    if let Some(cwd) = &h.cwd {
        s.push_str(r#","cwd":"#);
        json::write_js_string(&mut s, cwd);
    }
    s.push_str(&format!(
        r#","delegationDepth":{}}}"#,
        h.delegation_depth.unwrap_or(0)
    ));
    s
}

impl Writer for JsonlWriter {
    fn create(&self, index: usize, header: &SessionHeader) -> BenchResult<()> {
        let path = jsonl_path(&self.dir, &header.id);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)?;
        file.write_all(format!("{}\n", jsonl_header_line(header)).as_bytes())?;
        file.sync_all()?;
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(index, std::sync::Arc::new(Mutex::new(file)));
        Ok(())
    }

    fn write(&self, index: usize, events: Vec<Event>) -> BenchResult<()> {
        let file = self
            .files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&index)
            .cloned()
            .ok_or("session not created")?;
        let mut text = String::with_capacity(events.iter().map(|e| e.data.len() + 96).sum());
        for e in &events {
            write_event_json(&mut text, e);
            text.push('\n');
        }
        let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        Ok(())
    }

    fn close(self: Box<Self>) -> BenchResult<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// redb alone
// ---------------------------------------------------------------------------------------------

pub(crate) const REDB_FILE: &str = "events.redb";
pub(crate) const REDB_EVENTS: redb::TableDefinition<(u64, u64), &[u8]> =
    redb::TableDefinition::new("events");

/// The record bytes redb stores for an event (sessionlog's own postcard record, uncompressed).
fn redb_value(session: u64, e: Event) -> BenchResult<Vec<u8>> {
    let mut out = Vec::new();
    Record::Event {
        session,
        event: EventRecord::from(e),
    }
    .encode_into(&mut out)?;
    Ok(out)
}

/// redb alone: one table keyed by (session number, seq) holding the event record; one
/// durable (`Immediate`) commit per group.
pub struct RedbWriter {
    db: redb::Database,
}

impl RedbWriter {
    /// Opens (creating) the database in `dir`.
    pub fn open(dir: &Path) -> BenchResult<Self> {
        Ok(RedbWriter {
            db: redb::Database::create(dir.join(REDB_FILE))?,
        })
    }
}

impl Writer for RedbWriter {
    fn create(&self, _index: usize, _header: &SessionHeader) -> BenchResult<()> {
        Ok(())
    }

    fn write(&self, index: usize, events: Vec<Event>) -> BenchResult<()> {
        let session = index as u64 + 1;
        let txn = self.db.begin_write()?;
        {
            let mut table = txn.open_table(REDB_EVENTS)?;
            for e in events {
                let seq = e.seq;
                table.insert((session, seq), redb_value(session, e)?.as_slice())?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn close(self: Box<Self>) -> BenchResult<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The raw disk
// ---------------------------------------------------------------------------------------------

/// The raw disk: appends bytes to one file and `fdatasync`s it; nothing else.
pub struct RawWriter {
    file: Mutex<(File, u64)>,
}

impl RawWriter {
    /// Creates the file `raw.log` in `dir`.
    pub fn open(dir: &Path) -> BenchResult<Self> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(dir.join("raw.log"))?;
        Ok(RawWriter {
            file: Mutex::new((file, 0)),
        })
    }

    /// Writes `bytes` at the end and syncs them.
    pub fn write_bytes(&self, bytes: &[u8]) -> BenchResult<()> {
        use std::os::unix::fs::FileExt;
        let mut guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let (file, len) = &mut *guard;
        file.write_all_at(bytes, *len)?;
        *len += bytes.len() as u64;
        file.sync_data()?;
        Ok(())
    }
}

/// The JSONL bytes of a group (what the raw disk writes).
pub fn group_bytes(events: &[Event]) -> Vec<u8> {
    let mut text = String::with_capacity(events.iter().map(|e| e.data.len() + 96).sum());
    for e in events {
        write_event_json(&mut text, e);
        text.push('\n');
    }
    text.into_bytes()
}

impl Writer for RawWriter {
    fn create(&self, _index: usize, _header: &SessionHeader) -> BenchResult<()> {
        Ok(())
    }

    fn write(&self, _index: usize, events: Vec<Event>) -> BenchResult<()> {
        self.write_bytes(&group_bytes(&events))
    }

    fn close(self: Box<Self>) -> BenchResult<()> {
        Ok(())
    }
}
