//! The faithful peers: what dsh itself writes, built from the project's own interop writers,
//! so that the bytes on disk and the work per write are dsh's (the `dsh-jsonl` and
//! `sqlite-wal-*` peers stay as the "simplest thing" baselines).
//!
//! - `dsh-jsonl-zstd`: `session.jsonl.zstd` per session: the header line as the first zstd
//!   frame, then one frame per durable write (dsh's append batch / flush group) holding the
//!   group's lines with chunk runs packed into rows ([`jsonl::write_batch`] with
//!   [`PackPolicy::Maximal`]); level 3, content checksum, no content size, as dsh's files;
//!   one `write` + `fsync` per group.
//! - `dsh-sqlite-18`: dsh's schema-18 DDL and open pragmas, WAL, `synchronous=FULL`; per group
//!   one transaction inserting packed chunk rows ([`chunk_rows::pack`] with the SQLite codec),
//!   `data` of 4096 bytes or more as a zstd blob when smaller ([`sqlite::encode_data`]),
//!   `source_event_seqs` as varint blobs, then the revision bump.
//!
//! Loading: the zstd JSONL file is decompressed whole, each line parsed (`JSON.parse`) and
//! packed rows expanded ([`chunk_rows::decode_jsonl_record`]), then folded like the simple
//! JSONL peer; the schema-18 database is read through the interop reader (dsh's row decoding)
//! and every event's `data` parsed before the fold.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::types::Value;
use sessionlog::event::{Event, SessionHeader, SurfaceOp};
use sessionlog::interop::chunk_rows::{self, Codec, PackPolicy, Record};
use sessionlog::interop::jsonl;
use sessionlog::interop::sqlite::{self, DataValue, SchemaVersion};
use sessionlog::json::{self, JsonLimits};

use crate::fold::{Message, SurfaceFold};
use crate::peers::{BenchResult, Loaded, Writer};

/// The store identity of the schema-18 peer's database (a UUID, as dsh requires).
const STORE_ID: &str = "5e551017-0000-4000-8000-000000000018";

/// The database file of the schema-18 peer.
pub const SQLITE_18_FILE: &str = "sessions-18.sqlite";

/// The path of session `id`'s zstd JSONL file under `dir`.
pub fn jsonl_zstd_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(id).join(jsonl::ZSTD_FILE_NAME)
}

/// One zstd frame as dsh writes it (level 3, content checksum, no content size).
fn zstd_frame(text: &[u8]) -> BenchResult<Vec<u8>> {
    let mut enc = zstd::stream::Encoder::new(Vec::new(), jsonl::ZSTD_LEVEL)?;
    enc.include_checksum(true)?;
    enc.include_contentsize(false)?;
    enc.write_all(text)?;
    Ok(enc.finish()?)
}

/// dsh's JSONL backend with zstd and packed chunk rows: one frame per group, one `fsync`.
pub struct DshJsonlWriter {
    dir: PathBuf,
    sync: bool,
    files: Mutex<HashMap<usize, Arc<Mutex<File>>>>,
}

impl DshJsonlWriter {
    /// A writer of files under `dir`; without `sync`, nothing is fsynced (for building data
    /// sets quickly: the bytes are the same).
    pub fn open(dir: &Path, sync: bool) -> Self {
        DshJsonlWriter {
            dir: dir.to_path_buf(),
            sync,
            files: Mutex::new(HashMap::new()),
        }
    }
}

impl Writer for DshJsonlWriter {
    fn create(&self, index: usize, header: &SessionHeader) -> BenchResult<()> {
        let path = jsonl_zstd_path(&self.dir, &header.id);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        let mut head = jsonl::write_header_line(header)?;
        head.push('\n');
        file.write_all(&zstd_frame(head.as_bytes())?)?;
        if self.sync {
            file.sync_all()?;
        }
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(index, Arc::new(Mutex::new(file)));
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
        jsonl::write_batch(&mut text, &events, Some(PackPolicy::Maximal))?;
        let frame = zstd_frame(text.as_bytes())?;
        let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(&frame)?;
        if self.sync {
            file.sync_all()?;
        }
        Ok(())
    }

    fn close(self: Box<Self>) -> BenchResult<()> {
        Ok(())
    }
}

const UPSERT_18: &str = "INSERT INTO sessions (id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, owner, incarnation, revision)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)
ON CONFLICT(id) DO UPDATE SET version=excluded.version, created_at=excluded.created_at, cwd=excluded.cwd,
  parent_session=excluded.parent_session, seed_length=excluded.seed_length, origin=excluded.origin,
  delegation_depth=excluded.delegation_depth, agent_preset=excluded.agent_preset, owner=excluded.owner";

const INSERT_EVENT: &str = "INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";

/// dsh's SQLite backend, schema 18: packed rows, zstd blobs, WAL, `synchronous` FULL (or
/// NORMAL, for building data sets quickly). Concurrent sessions share one connection.
pub struct Sqlite18Writer {
    conn: Mutex<rusqlite::Connection>,
    ids: Mutex<HashMap<usize, String>>,
}

impl Sqlite18Writer {
    /// Creates the database in `dir` with dsh's open sequence for schema 18.
    pub fn open(dir: &Path, full: bool) -> BenchResult<Self> {
        let mut conn = rusqlite::Connection::open(dir.join(SQLITE_18_FILE))?;
        conn.execute_batch(
            "PRAGMA trusted_schema = OFF; PRAGMA mmap_size = 0; PRAGMA foreign_keys = ON",
        )?;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute_batch(sqlite::schema::ddl(SchemaVersion::V18))?;
        tx.execute(
            "INSERT INTO persistence_state (singleton, store_id) VALUES (1, ?)",
            [STORE_ID],
        )?;
        tx.execute_batch(&format!(
            "PRAGMA application_id = {}; PRAGMA user_version = 18",
            sqlite::APPLICATION_ID
        ))?;
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
        Ok(Sqlite18Writer {
            conn: Mutex::new(conn),
            ids: Mutex::new(HashMap::new()),
        })
    }
}

fn surface_op_json(op: SurfaceOp) -> String {
    match op {
        SurfaceOp::Append => "\"append\"".to_owned(),
        SurfaceOp::Replace { start, end } => {
            format!("{{\"op\":\"replace\",\"start\":{start},\"end\":{end}}}")
        }
    }
}

fn data_value(data: &str) -> BenchResult<Value> {
    Ok(match sqlite::encode_data(data)? {
        DataValue::Text(t) => Value::Text(t),
        DataValue::Zstd(b) => Value::Blob(b),
    })
}

impl Writer for Sqlite18Writer {
    fn create(&self, index: usize, header: &SessionHeader) -> BenchResult<()> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction()?;
        tx.execute(
            UPSERT_18,
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
                header.owner,
                format!("00000000-0000-4000-8000-{index:012}"),
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
        // Encoded before the lock, as dsh's codec runs before its transaction.
        let mut rows: Vec<[Value; 7]> = Vec::new();
        for record in chunk_rows::pack(&events, Codec::Sqlite, PackPolicy::Maximal) {
            rows.push(match record {
                Record::Event(e) => [
                    Value::Integer(e.seq as i64),
                    Value::Text(e.kind.clone()),
                    Value::Integer(e.time),
                    data_value(&e.data)?,
                    match &e.source_event_seqs {
                        Some(s) => Value::Blob(sqlite::encode_source_event_seqs(s)?),
                        None => Value::Null,
                    },
                    e.surface_op
                        .map_or(Value::Null, |op| Value::Text(surface_op_json(op))),
                    if e.ignorable {
                        Value::Integer(1)
                    } else {
                        Value::Null
                    },
                ],
                Record::Row(row) => [
                    Value::Integer(row.seq0 as i64),
                    Value::Text(row.tag().to_owned()),
                    Value::Integer(row.time0),
                    data_value(&row.data)?,
                    Value::Null,
                    Value::Null,
                    Value::Integer(0),
                ],
            });
        }
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction()?;
        {
            let mut insert = tx.prepare_cached(INSERT_EVENT)?;
            for [seq, kind, time, data, sources, op, ignorable] in rows {
                insert.execute(rusqlite::params![
                    id, seq, kind, time, data, sources, op, ignorable
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

/// The events of session `id` of the schema-18 peer, read back through the interop reader
/// (dsh's decoding: zstd blobs, packed rows, varint blobs, its torn-row rule).
pub fn read_events(dir: &Path, id: &str) -> BenchResult<Vec<Event>> {
    let s = sqlite::read_session(
        &dir.join(SQLITE_18_FILE),
        id,
        &sqlite::ReadOptions::default(),
    )?;
    Ok(s.events)
}

/// dsh's load of session `id` from the schema-18 peer: read back through the interop reader,
/// `JSON.parse` every event's `data`, fold the surface and derive the messages.
pub fn resume(dir: &Path, id: &str) -> BenchResult<Loaded> {
    let limits = JsonLimits::default();
    let mut fold = SurfaceFold::default();
    let events = read_events(dir, id)?;
    let n = events.len() as u64;
    for e in events {
        let data = json::parse(&e.data, &limits)?;
        fold.apply_value(e.seq, &e.kind, e.surface_op, Message::Value(data))?;
    }
    let (surface, messages) = fold.finish();
    Ok(Loaded {
        events: n,
        surface,
        messages,
    })
}
