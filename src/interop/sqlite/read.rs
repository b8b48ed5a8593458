//! Import: open a dsh SQLite database read-only, validate it as dsh does on open, and decode
//! its sessions with dsh's row decoders and torn-row rule (persistence spec §5.2, §5.3).

use super::rows::{
    Decoded, DecodedSources, PhysicalRow, RawData, RawSources, decode_row, json_seq_array,
    nullable_count, nullable_text, safe_integer, surface_op_from_json,
};
use super::schema::{self, is_uuid};
use super::{SchemaVersion, SqliteError};
use crate::event::{Event, KeyOrder, Layout, SESSION_FORMAT_VERSION, Seq, SessionHeader};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, Row};
use std::path::Path;

/// Options for [`read()`] and [`SqliteReader::open`].
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// Accept only this schema version (`None`: detect 15, 17 or 18 from `user_version`).
    pub version: Option<SchemaVersion>,
}

/// A dsh tail that was cut at import (dsh's torn-tail rule: a defect after the last committed
/// `turn/end` is tolerated and everything from it on is dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The seq dsh's repair would delete from (`tornFrom`): at 15 the first seq after the
    /// preserved prefix, at 17/18 the seq column of the first bad row.
    pub from_seq: Seq,
    /// Number of physical rows dropped.
    pub rows_cut: usize,
    /// Why the first dropped row was rejected.
    pub reason: String,
}

/// One session imported from a database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedSession {
    /// The header rebuilt from the `sessions` row (NULL columns are absent fields).
    pub header: SessionHeader,
    /// The preserved events, contiguous from seq 0, with [`KeyOrder::Canonical`] and the
    /// packed-row layout of the file.
    pub events: Vec<Event>,
    /// The tail that was cut, if any.
    pub torn: Option<TornTail>,
    /// The session row's `incarnation`.
    pub incarnation: String,
    /// The session row's `revision`.
    pub revision: u64,
}

/// A `sessions` row with its dsh bookkeeping columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    /// The header.
    pub header: SessionHeader,
    /// `incarnation`.
    pub incarnation: String,
    /// `revision`.
    pub revision: u64,
    rowid: i64,
}

/// Every session of one database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteImport {
    /// The database's schema version.
    pub version: SchemaVersion,
    /// `persistence_state.store_id`, when present.
    pub store_id: Option<String>,
    /// The sessions in `sessions` row order.
    pub sessions: Vec<ImportedSession>,
}

/// Imports every session of the database at `path`.
///
/// Fails on the first session dsh would refuse; use [`SqliteReader`] to import sessions one by
/// one instead.
pub fn read(path: &Path, options: &ReadOptions) -> Result<SqliteImport, SqliteError> {
    let reader = SqliteReader::open(path, options)?;
    let sessions = reader.read_all()?;
    Ok(SqliteImport {
        version: reader.version(),
        store_id: reader.store_id().map(str::to_owned),
        sessions,
    })
}

/// Imports the session `id` from the database at `path`.
pub fn read_session(
    path: &Path,
    id: &str,
    options: &ReadOptions,
) -> Result<ImportedSession, SqliteError> {
    SqliteReader::open(path, options)?.read_session(id)
}

/// A validated, read-only connection to a dsh session database.
///
/// ```
/// # use sessionlog::event::{Event, SessionHeader};
/// # use sessionlog::interop::sqlite::{self, SchemaVersion, WriteOptions};
/// use sessionlog::interop::sqlite::{ReadOptions, SqliteReader};
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("s.db");
/// # let h = SessionHeader::new("s1", 0);
/// # let ev = vec![Event::new("turn/start", 0, 0, r#"{"turn":1}"#)];
/// # sqlite::write(&path, SchemaVersion::V15, [(&h, ev.as_slice())], &WriteOptions::default()).unwrap();
/// let reader = SqliteReader::open(&path, &ReadOptions::default()).unwrap();
/// assert_eq!(reader.version(), SchemaVersion::V15);
/// let ids: Vec<String> = reader.list().unwrap().into_iter().map(|s| s.header.id).collect();
/// assert_eq!(ids, ["s1"]);
/// let session = reader.read_session("s1").unwrap();
/// assert_eq!(session.events.len(), 1);
/// ```
#[derive(Debug)]
pub struct SqliteReader {
    conn: Connection,
    path: String,
    version: SchemaVersion,
    store_id: Option<String>,
}

impl SqliteReader {
    /// Opens `path` read-only and validates it as dsh does on open: `application_id`
    /// 0x44534850, `user_version` 15, 17 or 18 (or exactly `options.version`), the required
    /// schema objects, and the store identity (a UUID at 17/18).
    pub fn open(path: &Path, options: &ReadOptions) -> Result<SqliteReader, SqliteError> {
        let display = path.display().to_string();
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_file() => {}
            Ok(_) => {
                return Err(SqliteError::NotADatabase {
                    path: display,
                    detail: "not a regular file".into(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SqliteError::Missing { path: display });
            }
            Err(source) => {
                return Err(SqliteError::Io {
                    path: path.to_owned(),
                    context: "cannot read",
                    source,
                });
            }
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| schema::classify_open_error(&display, e))?;
        conn.execute_batch("PRAGMA trusted_schema = OFF")
            .map_err(|e| schema::classify_open_error(&display, e))?;
        let version = schema::validate(&conn, &display, options.version)?;
        let store_id = read_store_id(&conn, &display, version)?;
        Ok(SqliteReader {
            conn,
            path: display,
            version,
            store_id,
        })
    }

    /// The database's schema version.
    pub fn version(&self) -> SchemaVersion {
        self.version
    }

    /// `persistence_state.store_id` (absent only in a schema-15 file that never had it written).
    pub fn store_id(&self) -> Option<&str> {
        self.store_id.as_deref()
    }

    /// Every session row, validated as dsh validates it, without reading events.
    pub fn list(&self) -> Result<Vec<StoredSession>, SqliteError> {
        self.session_rows(None)
    }

    /// Session rows (all, or the one with `id`), validated as dsh validates them.
    fn session_rows(&self, id: Option<&str>) -> Result<Vec<StoredSession>, SqliteError> {
        let owner = if self.version.has_owner() {
            ", owner"
        } else {
            ", NULL"
        };
        let filter = if id.is_some() { "WHERE id = ?1" } else { "" };
        let sql = format!(
            "SELECT rowid, id, version, created_at, cwd, parent_session, seed_length, origin, \
             delegation_depth, agent_preset, incarnation, revision{owner} FROM sessions {filter} \
             ORDER BY rowid"
        );
        let mut stmt = self
            .conn
            .prepare(&sql)
            .map_err(|e| self.sql_err("listing sessions", e))?;
        let mut rows = match id {
            Some(id) => stmt.query([id]),
            None => stmt.query([]),
        }
        .map_err(|e| self.sql_err("listing sessions", e))?;
        let mut out = Vec::new();
        while let Some(row) = rows
            .next()
            .map_err(|e| self.sql_err("listing sessions", e))?
        {
            out.push(self.decode_session_row(row)?);
        }
        Ok(out)
    }

    /// Imports one session by id (other session rows are not read, as in dsh).
    pub fn read_session(&self, id: &str) -> Result<ImportedSession, SqliteError> {
        self.in_read_transaction(|| {
            let stored = self
                .session_rows(Some(id))?
                .into_iter()
                .next()
                .ok_or_else(|| SqliteError::SessionNotFound {
                    path: self.path.clone(),
                    id: id.to_owned(),
                })?;
            self.import(stored)
        })
    }

    /// Imports every session, in `sessions` row order.
    pub fn read_all(&self) -> Result<Vec<ImportedSession>, SqliteError> {
        self.in_read_transaction(|| {
            self.list()?
                .into_iter()
                .map(|stored| self.import(stored))
                .collect()
        })
    }

    fn in_read_transaction<T>(
        &self,
        f: impl FnOnce() -> Result<T, SqliteError>,
    ) -> Result<T, SqliteError> {
        self.conn
            .execute_batch("BEGIN")
            .map_err(|e| self.sql_err("starting a read transaction", e))?;
        let result = f();
        let end = self.conn.execute_batch("COMMIT");
        let value = result?;
        end.map_err(|e| self.sql_err("ending a read transaction", e))?;
        Ok(value)
    }

    fn sql_err(&self, context: &'static str, source: rusqlite::Error) -> SqliteError {
        schema::classify(&self.path, context, source)
    }

    fn decode_session_row(&self, row: &Row<'_>) -> Result<StoredSession, SqliteError> {
        let v = |i: usize| {
            row.get_ref(i)
                .map_err(|e| self.sql_err("reading a session row", e))
        };
        let rowid = match v(0)? {
            ValueRef::Integer(i) => i,
            _ => 0,
        };
        let raw_id = v(1)?;
        let id_for_errors = match raw_id {
            ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
            other => format!("<{}>", other.data_type()),
        };
        let bad = |detail: String| SqliteError::SessionRow {
            path: self.path.clone(),
            rowid,
            id: id_for_errors.clone(),
            detail,
        };
        let strict = self.version.is_packed_layout();
        let id = match raw_id {
            ValueRef::Text(t) if !t.is_empty() => String::from_utf8_lossy(t).into_owned(),
            ValueRef::Text(_) => return Err(bad("stored id must not be empty".into())),
            _ => return Err(bad("stored id must be a string".into())),
        };
        let version = safe_integer(v(2)?)
            .ok_or_else(|| bad("stored version must be a safe integer".into()))?;
        let created_at = safe_integer(v(3)?).filter(|n| *n >= 0).ok_or_else(|| {
            bad("stored session createdAt must be a non-negative safe integer".into())
        })?;
        let cwd = nullable_text(v(4)?)
            .map_err(|t| bad(format!("stored cwd must be a string or null, got {t}")))?;
        if strict && cwd.as_deref().is_some_and(|c| !c.starts_with('/')) {
            return Err(bad("stored session cwd must be absolute".into()));
        }
        let parent_session = nullable_text(v(5)?).map_err(|t| {
            bad(format!(
                "stored parent_session must be a string or null, got {t}"
            ))
        })?;
        let seed_length = nullable_count(v(6)?).map_err(|t| {
            bad(format!(
                "stored seed_length must be a non-negative safe integer or null, got {t}"
            ))
        })?;
        let origin = nullable_text(v(7)?)
            .map_err(|t| bad(format!("stored origin must be a string or null, got {t}")))?;
        if strict && origin.as_deref().is_some_and(|o| o != "subagent") {
            return Err(bad("stored session origin must be subagent or null".into()));
        }
        let delegation_depth = nullable_count(v(8)?).map_err(|t| {
            bad(format!(
                "stored delegation_depth must be a non-negative safe integer or null, got {t}"
            ))
        })?;
        let agent_preset = nullable_text(v(9)?).map_err(|t| {
            bad(format!(
                "stored agent_preset must be a string or null, got {t}"
            ))
        })?;
        let incarnation = match v(10)? {
            ValueRef::Text(t) if !t.is_empty() => String::from_utf8_lossy(t).into_owned(),
            _ => return Err(bad("stored incarnation must be a non-empty string".into())),
        };
        if strict && !is_uuid(&incarnation) {
            return Err(bad("stored session incarnation must be a UUID".into()));
        }
        let revision = safe_integer(v(11)?)
            .filter(|n| *n >= 0)
            .ok_or_else(|| bad("stored revision must be a non-negative safe integer".into()))?;
        let owner = nullable_text(v(12)?)
            .map_err(|t| bad(format!("stored owner must be a string or null, got {t}")))?;
        if version != i64::from(SESSION_FORMAT_VERSION) {
            return Err(SqliteError::FormatVersion {
                path: self.path.clone(),
                id,
                version,
            });
        }
        let header = SessionHeader {
            version: SESSION_FORMAT_VERSION,
            id,
            created_at: created_at as u64,
            cwd,
            parent_session,
            seed_length,
            origin,
            delegation_depth,
            agent_preset,
            owner,
            extra: Vec::new(),
        };
        Ok(StoredSession {
            header,
            incarnation,
            revision: revision as u64,
            rowid,
        })
    }

    fn import(&self, stored: StoredSession) -> Result<ImportedSession, SqliteError> {
        let session = stored.header.id.clone();
        let mut stmt = self
            .conn
            .prepare(
                "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events \
                 WHERE session_id = (SELECT id FROM sessions WHERE rowid = ?1) ORDER BY seq",
            )
            .map_err(|e| self.sql_err("reading events", e))?;
        let mut rows = stmt
            .query([stored.rowid])
            .map_err(|e| self.sql_err("reading events", e))?;
        let mut physical = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.sql_err("reading events", e))? {
            physical.push(self.event_row(row, &session)?);
        }
        let decoded: Vec<Result<Vec<Decoded>, String>> = physical
            .iter()
            .map(|row| decode_row(self.version, row))
            .collect();
        let (preserved, torn) = self.scan(&session, &physical, decoded)?;
        let events = preserved
            .into_iter()
            .map(|d| self.finish(&session, d))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ImportedSession {
            header: stored.header,
            events,
            torn,
            incarnation: stored.incarnation,
            revision: stored.revision,
        })
    }

    /// Row-level validation before decoding (dsh's `decodeEventRow` at 17/18; the types node
    /// would hand to `rowToEvent` at 15). Failures here fail the whole read.
    fn event_row(&self, row: &Row<'_>, session: &str) -> Result<PhysicalRow, SqliteError> {
        let v = |i: usize| {
            row.get_ref(i)
                .map_err(|e| self.sql_err("reading events", e))
        };
        let seq_ref = v(0)?;
        let seq_for_errors = match seq_ref {
            ValueRef::Integer(i) => i,
            _ => -1,
        };
        let bad = |detail: &str| SqliteError::EventRow {
            path: self.path.clone(),
            session: session.to_owned(),
            seq: seq_for_errors,
            detail: detail.to_owned(),
        };
        let packed_layout = self.version.is_packed_layout();
        let seq = match safe_integer(seq_ref) {
            Some(s) if s >= 0 || !packed_layout => s,
            _ => return Err(bad("stored seq must be a non-negative safe integer")),
        };
        let kind = match v(1)? {
            ValueRef::Text(t) if !t.is_empty() => String::from_utf8_lossy(t).into_owned(),
            _ => return Err(bad("stored type must be a non-empty string")),
        };
        let time = safe_integer(v(2)?).ok_or_else(|| bad("stored time must be a safe integer"))?;
        let data = match v(3)? {
            ValueRef::Text(t) => RawData::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) if packed_layout => RawData::Blob(b.to_vec()),
            _ if packed_layout => return Err(bad("stored data must be a string or blob")),
            _ => return Err(bad("stored data must be a string")),
        };
        let sources = match v(4)? {
            ValueRef::Null => None,
            ValueRef::Blob(b) if packed_layout => Some(RawSources::Blob(b.to_vec())),
            ValueRef::Text(t) if !packed_layout => {
                Some(RawSources::Json(String::from_utf8_lossy(t).into_owned()))
            }
            _ if packed_layout => {
                return Err(bad("stored source_event_seqs must be a blob or null"));
            }
            _ => return Err(bad("stored source_event_seqs must be a string or null")),
        };
        let surface_op = match v(5)? {
            ValueRef::Null => None,
            ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
            _ => return Err(bad("stored surface_op must be a string or null")),
        };
        let ignorable = match v(6)? {
            ValueRef::Null => None,
            ValueRef::Integer(i) if !packed_layout || i == 0 || i == 1 => Some(i),
            ValueRef::Real(r) if !packed_layout => (r == 1.0).then_some(1),
            _ if !packed_layout => Some(-1),
            _ => return Err(bad("stored event ignorable must be 0, 1, or null")),
        };
        Ok(PhysicalRow {
            seq,
            kind,
            time,
            data,
            sources,
            surface_op,
            ignorable,
        })
    }

    /// dsh's `scanRows`: find the last row that decodes to a `turn/end`; walk forward; the first
    /// undecodable row or seq gap is committed corruption at or before that row, otherwise the
    /// start of a torn tail.
    fn scan(
        &self,
        session: &str,
        rows: &[PhysicalRow],
        decoded: Vec<Result<Vec<Decoded>, String>>,
    ) -> Result<(Vec<Decoded>, Option<TornTail>), SqliteError> {
        let v15 = !self.version.is_packed_layout();
        let last_turn_end = decoded.iter().enumerate().rev().find_map(|(i, d)| match d {
            Ok(events) if v15 && rows[i].kind == "turn/end" => Some(i),
            Ok(events) if !v15 && events.iter().any(|e| e.kind == "turn/end") => Some(i),
            _ => None,
        });
        let mut preserved: Vec<Decoded> = Vec::with_capacity(rows.len());
        let mut expected: i64 = 0;
        for (i, result) in decoded.into_iter().enumerate() {
            let row = &rows[i];
            let failure = match result {
                Err(reason) => Some((reason, true)),
                Ok(events) => {
                    let mut gap = None;
                    for e in &events {
                        if e.seq != expected {
                            gap = Some(format!("seq gap (expected {expected}, got {})", e.seq));
                            break;
                        }
                        expected += 1;
                    }
                    match gap {
                        Some(g) => Some((g, false)),
                        None => {
                            preserved.extend(events);
                            None
                        }
                    }
                }
            };
            let Some((reason, unparsable)) = failure else {
                continue;
            };
            if last_turn_end.is_some_and(|last| i <= last) {
                let dsh_message = if !v15 {
                    format!("invalid committed physical row at seq {}", row.seq)
                } else if unparsable {
                    format!("unparsable committed event at seq {}", row.seq)
                } else {
                    format!(
                        "seq gap in committed region (expected {}, got {})",
                        preserved.len(),
                        row.seq
                    )
                };
                return Err(SqliteError::CommittedCorruption {
                    path: self.path.clone(),
                    session: session.to_owned(),
                    seq: row.seq,
                    dsh_message,
                    detail: reason,
                });
            }
            let from_seq = if v15 {
                preserved.len() as u64
            } else {
                row.seq as u64
            };
            return Ok((
                preserved,
                Some(TornTail {
                    from_seq,
                    rows_cut: rows.len() - i,
                    reason: format!("row at seq {}: {reason}", row.seq),
                }),
            ));
        }
        Ok((preserved, None))
    }

    /// Turns a decoded event of the preserved prefix into an [`Event`], checking what dsh's
    /// session validation would refuse and the engine cannot represent.
    fn finish(&self, session: &str, d: Decoded) -> Result<Event, SqliteError> {
        let seq = d.seq as u64;
        let bad = |detail: String| SqliteError::InvalidEvent {
            path: self.path.clone(),
            session: session.to_owned(),
            seq,
            detail,
        };
        let source_event_seqs = match d.sources {
            None => None,
            Some(DecodedSources::Seqs(s)) => Some(s),
            Some(DecodedSources::Json(value)) => Some(json_seq_array(&value).ok_or_else(|| {
                bad(format!(
                    "sourceEventSeqs must be an array of non-negative safe integers, got {value}"
                ))
            })?),
        };
        let surface_op = match d.surface_op {
            None => None,
            Some(value) => Some(surface_op_from_json(&value).ok_or_else(|| {
                bad(format!(
                    "surfaceOp must be \"append\" or {{\"op\":\"replace\",\"start\":S,\"end\":E}}, got {value}"
                ))
            })?),
        };
        Ok(Event {
            kind: d.kind,
            seq,
            time: d.time,
            data: d.data,
            source_event_seqs,
            surface_op,
            ignorable: d.ignorable,
            layout: Layout {
                key_order: KeyOrder::Canonical,
                packing: d.packing,
                batch_start: false,
            },
        })
    }
}

fn read_store_id(
    conn: &Connection,
    path: &str,
    version: SchemaVersion,
) -> Result<Option<String>, SqliteError> {
    let bad = |detail: &str| SqliteError::StoreIdentity {
        path: path.to_owned(),
        detail: detail.to_owned(),
    };
    let value = conn
        .query_row(
            "SELECT store_id FROM persistence_state WHERE singleton = 1",
            [],
            |r| {
                Ok(match r.get_ref(0)? {
                    ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
                    _ => None,
                })
            },
        )
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            other => Err(SqliteError::Sqlite {
                path: path.to_owned(),
                context: "reading the store identity",
                source: other,
            }),
        })?;
    match (value, version) {
        // dsh 15 inserts the row on every open (`INSERT OR IGNORE`), so a 15 file without it
        // is one dsh would complete, not refuse.
        (None, SchemaVersion::V15) => Ok(None),
        (None, _) => Err(bad("persistence_state has no singleton row")),
        (Some(None), _) => Err(bad("stored store_id must be a string")),
        (Some(Some(id)), _) if id.is_empty() => Err(bad("stored store_id must not be empty")),
        (Some(Some(id)), v) if v.is_packed_layout() && !is_uuid(&id) => {
            Err(bad("stored store_id must be a UUID"))
        }
        (Some(Some(id)), _) => Ok(Some(id)),
    }
}
