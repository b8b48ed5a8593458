//! Export: write sessions to a new dsh SQLite database of exactly one schema version, with that
//! version's DDL text, pragmas, column encodings, packed-row limits and hygiene, atomically.

use crate::interop::atomic::{AtomicError, AtomicFile};
use std::borrow::Cow;
use std::collections::HashSet;
use std::path::Path;

use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags, params_from_iter};

use super::codec::{self, DataValue};
use super::read::{ReadOptions, SqliteReader};
use super::schema::{self, APPLICATION_ID};
use super::{SchemaVersion, SqliteError};
use crate::event::{Event, MAX_SAFE_INTEGER, SessionHeader, SurfaceOp};
use crate::interop::chunk_rows::{self, Codec, PackPolicy, Record};

/// Options for [`write()`].
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// Read the finished file back with the importer before publishing it, and refuse to
    /// publish unless every event comes back identical (default `true`).
    pub verify: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions { verify: true }
    }
}

/// What [`write()`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// Sessions written (with their `sessions` row).
    pub sessions: usize,
    /// Ids of sessions without events, which get no row: dsh materializes a session with its
    /// first event, so a database never holds an empty session.
    pub skipped_empty: Vec<String>,
    /// Logical events written.
    pub events: usize,
    /// Physical `events` rows written.
    pub rows: usize,
    /// Of those, packed chunk rows.
    pub packed_rows: usize,
    /// Things that will stop dsh from opening the file where it is: dsh's schema-18 backend
    /// (and the upstream 17 one it derives from) requires a private parent directory, owned by
    /// the user and not group- or world-writable.
    pub warnings: Vec<String>,
}

/// Writes `sessions` to a new database at `path` in schema `version`.
///
/// The file is built under a temporary name in the target directory (mode 0600), synced, and
/// then moved to `path`; an existing `path` is refused, so an export never mixes versions nor
/// replaces data. Every session is validated first: `owner` is refused below schema 18, and
/// header or event values dsh could not read back are refused with the session and seq named.
pub fn write<'a, I>(
    path: &Path,
    version: SchemaVersion,
    sessions: I,
    options: &WriteOptions,
) -> Result<WriteReport, SqliteError>
where
    I: IntoIterator<Item = (&'a SessionHeader, &'a [Event])>,
{
    let sessions: Vec<Session<'a>> = sessions.into_iter().collect();
    let headers: Vec<SessionHeader> = sessions.iter().map(|(h, _)| (*h).clone()).collect();
    let mut next = 0usize;
    write_each(path, version, &headers, options, |h: &SessionHeader| {
        // Sessions are loaded in order (once to build, once to verify).
        let at = if sessions.get(next).is_some_and(|(x, _)| x.id == h.id) {
            next
        } else {
            sessions
                .iter()
                .position(|(x, _)| x.id == h.id)
                .unwrap_or(sessions.len())
        };
        next = at + 1;
        Ok::<_, SqliteError>(Cow::Borrowed(sessions.get(at).map_or(&[][..], |(_, e)| *e)))
    })
}

/// Like [`write()`], but loads each session's events only when it is written (and again when
/// the file is verified), so an export of many sessions holds one session in memory at a time.
/// `load` is called with each header in order; its errors are returned as they are.
pub fn write_each<'a, E, F>(
    path: &Path,
    version: SchemaVersion,
    headers: &[SessionHeader],
    options: &WriteOptions,
    mut load: F,
) -> Result<WriteReport, E>
where
    E: From<SqliteError>,
    F: FnMut(&SessionHeader) -> Result<Cow<'a, [Event]>, E>,
{
    let mut seen = HashSet::new();
    let mut report = WriteReport::default();
    for header in headers {
        if !seen.insert(header.id.as_str()) {
            return Err(SqliteError::DuplicateSession {
                id: header.id.clone(),
            }
            .into());
        }
        check_header(header, version)?;
    }

    refuse_existing(path)?;
    let temp = AtomicFile::create(path).map_err(|e| atomic_error(path, e))?;
    let temp_path = temp.temp_path().to_owned();
    let written = build_database(&temp_path, version, headers, &mut load, &mut report)?;
    if options.verify {
        verify(&temp_path, version, &written, &mut load)?;
    }
    if version.is_packed_layout() {
        report.warnings.extend(directory_warning(&temp_path));
    }
    temp.publish().map_err(|e| atomic_error(path, e))?;
    Ok(report)
}

/// dsh's schema-18 backend opens a database only in a directory owned by the current user that
/// is not group- or world-writable; says so when the export's directory is not one. (The temporary file we
/// just created tells us our uid.)
#[cfg(unix)]
fn directory_warning(temp: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dir = temp
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let ours = std::fs::metadata(temp).ok()?.uid();
    let meta = std::fs::metadata(dir).ok()?;
    if meta.uid() != ours || meta.mode() & 0o022 != 0 {
        Some(format!(
            "directory \"{}\" is not private to its owner (mode {:o}); dsh's SQLite backend refuses to open a session database there — move the file into a directory with mode 0700",
            dir.display(),
            meta.mode() & 0o7777
        ))
    } else {
        None
    }
}

#[cfg(not(unix))]
fn directory_warning(_temp: &Path) -> Option<String> {
    None
}

fn header_err(header: &SessionHeader, version: SchemaVersion, detail: String) -> SqliteError {
    SqliteError::UnrepresentableHeader {
        id: header.id.clone(),
        version,
        detail,
    }
}

fn check_header(header: &SessionHeader, version: SchemaVersion) -> Result<(), SqliteError> {
    if header.id.is_empty() {
        return Err(header_err(
            header,
            version,
            "the session id is empty".into(),
        ));
    }
    if let Some(owner) = &header.owner
        && !version.has_owner()
    {
        return Err(SqliteError::OwnerUnsupported {
            id: header.id.clone(),
            version,
            owner: owner.clone(),
        });
    }
    if !header.extra.is_empty() {
        let keys: Vec<&str> = header.extra.iter().map(|(k, _)| k.as_str()).collect();
        return Err(header_err(
            header,
            version,
            format!(
                "the header has keys the sessions table has no column for: {}",
                keys.join(", ")
            ),
        ));
    }
    let safe = |name: &str, v: Option<u64>| match v {
        Some(n) if n > MAX_SAFE_INTEGER as u64 => Err(header_err(
            header,
            version,
            format!("{name} {n} exceeds 2^53-1"),
        )),
        _ => Ok(()),
    };
    safe("createdAt", Some(header.created_at))?;
    safe("seedLength", header.seed_length)?;
    safe("delegationDepth", header.delegation_depth)?;
    if version.is_packed_layout() {
        if let Some(cwd) = &header.cwd
            && !cwd.starts_with('/')
        {
            return Err(header_err(
                header,
                version,
                format!("cwd {cwd:?} is not absolute; dsh refuses such a stored session"),
            ));
        }
        if let Some(origin) = &header.origin
            && origin != "subagent"
        {
            return Err(header_err(
                header,
                version,
                format!("origin {origin:?} is not \"subagent\"; dsh refuses such a stored session"),
            ));
        }
    }
    Ok(())
}

/// One physical `events` row, ready to bind.
#[derive(Debug, Clone)]
struct RowPlan {
    seq: u64,
    kind: String,
    time: i64,
    data: DataValue,
    sources: Option<Value>,
    surface_op: Option<String>,
    ignorable: Option<i64>,
}

/// `JSON.stringify(surfaceOp)`.
fn surface_op_json(op: SurfaceOp) -> String {
    match op {
        SurfaceOp::Append => "\"append\"".to_owned(),
        SurfaceOp::Replace { start, end } => {
            format!("{{\"op\":\"replace\",\"start\":{start},\"end\":{end}}}")
        }
    }
}

fn plan_rows(
    header: &SessionHeader,
    events: &[Event],
    version: SchemaVersion,
) -> Result<Vec<RowPlan>, SqliteError> {
    let bad = |index: usize, seq: u64, detail: String| SqliteError::UnrepresentableEvent {
        id: header.id.clone(),
        version,
        index,
        seq,
        detail,
    };
    for (index, e) in events.iter().enumerate() {
        if e.seq != index as u64 {
            return Err(bad(
                index,
                e.seq,
                format!("seqs must be contiguous from 0 (expected {index})"),
            ));
        }
        if e.kind.is_empty() {
            return Err(bad(index, e.seq, "the event type is empty".into()));
        }
        if e.time.unsigned_abs() > MAX_SAFE_INTEGER as u64 {
            return Err(bad(
                index,
                e.seq,
                format!("time {} is not a safe integer", e.time),
            ));
        }
        if let Some(s) = &e.source_event_seqs
            && let Some(big) = s.iter().find(|s| **s > MAX_SAFE_INTEGER as u64)
        {
            return Err(bad(
                index,
                e.seq,
                format!("sourceEventSeqs holds {big}, above 2^53-1"),
            ));
        }
        if let Some(SurfaceOp::Replace { start, end }) = e.surface_op
            && start.max(end) > MAX_SAFE_INTEGER as u64
        {
            return Err(bad(index, e.seq, "surfaceOp bounds exceed 2^53-1".into()));
        }
        super::rows::check_json(&e.data)
            .map_err(|err| bad(index, e.seq, format!("data is not JSON: {err}")))?;
    }
    let scalar = |index: usize, e: &Event| -> Result<RowPlan, SqliteError> {
        let (data, sources) = if version.is_packed_layout() {
            let data = codec::encode_data(&e.data)
                .map_err(|err| bad(index, e.seq, format!("zstd compression failed: {err}")))?;
            let sources = match &e.source_event_seqs {
                None => None,
                Some(s) => Some(Value::Blob(
                    codec::encode_source_event_seqs(s)
                        .map_err(|err| bad(index, e.seq, err.to_string()))?,
                )),
            };
            (data, sources)
        } else {
            let sources = e.source_event_seqs.as_ref().map(|s| {
                let items: Vec<String> = s.iter().map(u64::to_string).collect();
                Value::Text(format!("[{}]", items.join(",")))
            });
            (DataValue::Text(e.data.clone()), sources)
        };
        Ok(RowPlan {
            seq: e.seq,
            kind: e.kind.clone(),
            time: e.time,
            data,
            sources,
            surface_op: e.surface_op.map(surface_op_json),
            ignorable: e.ignorable.then_some(1),
        })
    };
    if !version.is_packed_layout() {
        return events
            .iter()
            .enumerate()
            .map(|(i, e)| scalar(i, e))
            .collect();
    }
    let mut rows = Vec::new();
    for record in chunk_rows::pack(events, Codec::Sqlite, PackPolicy::Remembered) {
        match record {
            Record::Event(e) => rows.push(scalar(e.seq as usize, e)?),
            Record::Row(row) => {
                let index = row.seq0 as usize;
                let data = codec::encode_data(&row.data).map_err(|err| {
                    bad(index, row.seq0, format!("zstd compression failed: {err}"))
                })?;
                rows.push(RowPlan {
                    seq: row.seq0,
                    kind: row.tag().to_owned(),
                    time: row.time0,
                    data,
                    sources: None,
                    surface_op: None,
                    ignorable: Some(0),
                });
            }
        }
    }
    Ok(rows)
}

fn refuse_existing(path: &Path) -> Result<(), SqliteError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Err(SqliteError::TargetExists {
            path: path.display().to_string(),
            existing: existing_user_version(path),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(SqliteError::Io {
            path: path.to_owned(),
            context: "cannot inspect export target",
            source,
        }),
    }
}

fn existing_user_version(path: &Path) -> Option<i64> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .ok()?;
    let app: i64 = conn
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .ok()?;
    let uv: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .ok()?;
    (app == APPLICATION_ID).then_some(uv)
}

/// An [`AtomicFile`] failure as the SQLite writer reports it.
fn atomic_error(target: &Path, e: AtomicError) -> SqliteError {
    match e {
        AtomicError::Exists(_) => SqliteError::TargetExists {
            path: target.display().to_string(),
            existing: existing_user_version(target),
        },
        AtomicError::Io {
            path,
            context,
            source,
        } => SqliteError::Io {
            path,
            context,
            source,
        },
    }
}

const UPSERT_15: &str = "INSERT INTO sessions (id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, incarnation, revision)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)
ON CONFLICT(id) DO UPDATE SET version=excluded.version, created_at=excluded.created_at, cwd=excluded.cwd,
  parent_session=excluded.parent_session, seed_length=excluded.seed_length, origin=excluded.origin,
  delegation_depth=excluded.delegation_depth, agent_preset=excluded.agent_preset";

const UPSERT_18: &str = "INSERT INTO sessions (id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, owner, incarnation, revision)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)
ON CONFLICT(id) DO UPDATE SET version=excluded.version, created_at=excluded.created_at, cwd=excluded.cwd,
  parent_session=excluded.parent_session, seed_length=excluded.seed_length, origin=excluded.origin,
  delegation_depth=excluded.delegation_depth, agent_preset=excluded.agent_preset, owner=excluded.owner";

const INSERT_EVENT: &str = "INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";

const UPDATE_REVISION: &str = "UPDATE sessions SET revision = revision + 1 WHERE id = ?";

type Session<'a> = (&'a SessionHeader, &'a [Event]);

/// Creates the schema, then writes each session (rows planned one session at a time, so only
/// one session's encoded rows are held in memory).
/// Builds the database; returns the headers of the sessions written (those with events).
fn build_database<'h, 'a, E, F>(
    path: &Path,
    version: SchemaVersion,
    headers: &'h [SessionHeader],
    load: &mut F,
    report: &mut WriteReport,
) -> Result<Vec<&'h SessionHeader>, E>
where
    E: From<SqliteError>,
    F: FnMut(&SessionHeader) -> Result<Cow<'a, [Event]>, E>,
{
    let mut written = Vec::new();
    let display = path.display().to_string();
    let err = |context: &'static str| {
        let path = display.clone();
        move |source| SqliteError::Sqlite {
            path,
            context,
            source,
        }
    };
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(err("opening the export file"))?;
    initialize(&conn, &display, version)?;

    conn.execute_batch(if version.is_packed_layout() {
        "BEGIN IMMEDIATE"
    } else {
        "BEGIN"
    })
    .map_err(err("starting the export transaction"))?;
    {
        let mut upsert = conn
            .prepare(if version.has_owner() {
                UPSERT_18
            } else {
                UPSERT_15
            })
            .map_err(err("preparing the session upsert"))?;
        let mut insert = conn
            .prepare(INSERT_EVENT)
            .map_err(err("preparing the event insert"))?;
        let mut revision = conn
            .prepare(UPDATE_REVISION)
            .map_err(err("preparing the revision update"))?;
        for header in headers {
            let events = load(header)?;
            if events.is_empty() {
                report.skipped_empty.push(header.id.clone());
                continue;
            }
            let rows = plan_rows(header, &events, version)?;
            let n_events = events.len();
            drop(events);
            written.push(header);
            report.sessions += 1;
            report.events += n_events;
            report.rows += rows.len();
            report.packed_rows += rows.iter().filter(|r| r.ignorable == Some(0)).count();
            let incarnation = schema::random_uuid(&conn).map_err(err("drawing an incarnation"))?;
            let count = |v: Option<u64>| v.map(|n| Value::Integer(n as i64)).unwrap_or(Value::Null);
            let text = |v: &Option<String>| v.clone().map(Value::Text).unwrap_or(Value::Null);
            let mut values = vec![
                Value::Text(header.id.clone()),
                Value::Integer(i64::from(header.version)),
                Value::Integer(header.created_at as i64),
                text(&header.cwd),
                text(&header.parent_session),
                count(header.seed_length),
                text(&header.origin),
                count(header.delegation_depth),
                text(&header.agent_preset),
            ];
            if version.has_owner() {
                values.push(text(&header.owner));
            }
            values.push(Value::Text(incarnation));
            upsert
                .execute(params_from_iter(values))
                .map_err(err("writing a session row"))?;
            for row in &rows {
                let data = match &row.data {
                    DataValue::Text(t) => Value::Text(t.clone()),
                    DataValue::Zstd(b) => Value::Blob(b.clone()),
                };
                insert
                    .execute(params_from_iter([
                        Value::Text(header.id.clone()),
                        Value::Integer(row.seq as i64),
                        Value::Text(row.kind.clone()),
                        Value::Integer(row.time),
                        data,
                        row.sources.clone().unwrap_or(Value::Null),
                        row.surface_op
                            .clone()
                            .map(Value::Text)
                            .unwrap_or(Value::Null),
                        row.ignorable.map(Value::Integer).unwrap_or(Value::Null),
                    ]))
                    .map_err(err("writing an event row"))?;
            }
            revision
                .execute([&header.id])
                .map_err(err("updating a session revision"))?;
        }
    }
    conn.execute_batch("COMMIT")
        .map_err(err("committing the export"))?;
    conn.close()
        .map_err(|(_, e)| e)
        .map_err(err("closing the export file"))?;
    Ok(written)
}

/// Runs dsh's open sequence for a pristine database of `version`.
fn initialize(conn: &Connection, path: &str, version: SchemaVersion) -> Result<(), SqliteError> {
    let err = |context: &'static str| {
        let path = path.to_owned();
        move |source| SqliteError::Sqlite {
            path,
            context,
            source,
        }
    };
    let pragma_check = |name: &'static str, expected: i64| -> Result<(), SqliteError> {
        let got: i64 = conn
            .pragma_query_value(None, name, |r| r.get(0))
            .map_err(err("reading back a pragma"))?;
        if got != expected {
            return Err(SqliteError::ExportCheck {
                path: path.to_owned(),
                detail: format!("PRAGMA {name} reads back {got}, expected {expected}"),
            });
        }
        Ok(())
    };
    // dsh sets `synchronous = FULL` on its long-lived connections. The export file is private
    // until it is published and is synced as a whole before that (`TempFile::publish`), so
    // SQLite's own syncs would only slow the build down; the setting is not stored in the file.
    conn.execute_batch("PRAGMA synchronous = OFF")
        .map_err(err("setting synchronous"))?;
    if version.is_packed_layout() {
        conn.execute_batch("PRAGMA trusted_schema = OFF")
            .map_err(err("setting trusted_schema"))?;
        pragma_check("trusted_schema", 0)?;
        conn.execute_batch("PRAGMA mmap_size = 0")
            .map_err(err("setting mmap_size"))?;
        pragma_check("mmap_size", 0)?;
    }
    conn.execute_batch("PRAGMA foreign_keys = ON")
        .map_err(err("enabling foreign keys"))?;
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(err("starting the schema transaction"))?;
    let identity = schema::read_identity(conn).map_err(err("reading the new file's identity"))?;
    if identity.user_version != 0 || identity.application_id != 0 || identity.user_objects != 0 {
        return Err(SqliteError::Unversioned {
            path: path.to_owned(),
            application_id: identity.application_id,
            user_objects: identity.user_objects,
        });
    }
    conn.execute_batch(schema::ddl(version))
        .map_err(err("creating the schema"))?;
    let store_id = schema::random_uuid(conn).map_err(err("drawing a store id"))?;
    let insert_state = if version.is_packed_layout() {
        "INSERT INTO persistence_state (singleton, store_id) VALUES (1, ?)"
    } else {
        "INSERT OR IGNORE INTO persistence_state (singleton, store_id) VALUES (1, ?)"
    };
    conn.execute(insert_state, [store_id])
        .map_err(err("writing the store identity"))?;
    conn.execute_batch(&format!(
        "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {}",
        version.user_version()
    ))
    .map_err(err("stamping the schema version"))?;
    if version.is_packed_layout() {
        let found = schema::schema_objects(conn).map_err(err("reading the schema"))?;
        let wanted = schema::expected_schema_objects(version)
            .map_err(err("building the canonical schema"))?;
        if found != wanted {
            return Err(SqliteError::SchemaMismatch {
                path: path.to_owned(),
                version,
                detail: "the freshly created schema differs from the canonical one".into(),
            });
        }
    }
    conn.execute_batch("COMMIT")
        .map_err(err("committing the schema"))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
        .map_err(err("setting journal_mode"))?;
    if !mode.eq_ignore_ascii_case("delete") {
        return Err(SqliteError::ExportCheck {
            path: path.to_owned(),
            detail: format!("PRAGMA journal_mode reads back {mode}, expected delete"),
        });
    }
    Ok(())
}

/// Reads the finished file back, one session at a time, and checks that it holds exactly the
/// sessions written and that every header and event survived unchanged (layout aside).
fn verify<'a, E, F>(
    path: &Path,
    version: SchemaVersion,
    sessions: &[&SessionHeader],
    load: &mut F,
) -> Result<(), E>
where
    E: From<SqliteError>,
    F: FnMut(&SessionHeader) -> Result<Cow<'a, [Event]>, E>,
{
    let reader = SqliteReader::open(
        path,
        &ReadOptions {
            version: Some(version),
        },
    )?;
    let check = |detail: String| {
        E::from(SqliteError::ExportCheck {
            path: path.display().to_string(),
            detail,
        })
    };
    let stored = reader.list()?;
    if stored.len() != sessions.len() {
        return Err(check(format!(
            "{} sessions read back, {} written",
            stored.len(),
            sessions.len()
        )));
    }
    for &header in sessions {
        let events = load(header)?;
        let got = reader.read_session(&header.id)?;
        if got.header != *header {
            return Err(check(format!(
                "the header of session \"{}\" does not read back identically",
                header.id
            )));
        }
        if let Some(torn) = &got.torn {
            return Err(check(format!(
                "session \"{}\" reads back with a torn tail: {}",
                header.id, torn.reason
            )));
        }
        if got.events.len() != events.len() {
            return Err(check(format!(
                "session \"{}\": {} of {} events read back",
                header.id,
                got.events.len(),
                events.len()
            )));
        }
        for (a, b) in events.iter().zip(&got.events) {
            let same = a.kind == b.kind
                && a.seq == b.seq
                && a.time == b.time
                && a.data == b.data
                && a.source_event_seqs == b.source_event_seqs
                && a.surface_op == b.surface_op
                && a.ignorable == b.ignorable;
            if !same {
                return Err(check(format!(
                    "session \"{}\": event seq {} does not read back identically",
                    header.id, a.seq
                )));
            }
        }
    }
    Ok(())
}
