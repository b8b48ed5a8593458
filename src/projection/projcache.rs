//! dsh's projection-cache file `session_projcache.json` (persistence §7.3), as pure functions.
//!
//! With dsh's json storage backend the cache is one file, rewritten whole, pretty-printed with
//! 2-space indentation and a trailing newline:
//!
//! ```text
//! {"unit":{"name":"session_projcache","version":3},"global":null,
//!  "tables":{"sessions":{"<id>":{"identity":{"createdAt":N,"cwd":"…"},
//!                                "rows":{"<key>":{"ver":1,"seq":N,"val":…}}}}}}
//! ```
//!
//! A row is a fold shortcut, never authoritative: dsh uses a record only when its identity
//! equals the session header's `{createdAt, cwd}` and a row only when `ver` matches. A row's
//! `seq` is the last folded seq (`-1` for an empty log), i.e. [`Checkpoint::covered`]` - 1`,
//! and `val` is the state as JSON, which is exactly the built-ins' checkpoint bytes.

use super::Checkpoint;
use crate::event::SessionHeader;
use crate::json::{JsString, JsonLimits, JsonObject, JsonValue, parse, stringify};
use thiserror::Error;

/// The storage domain's name.
pub const DOMAIN_NAME: &str = "session_projcache";
/// The storage domain's version.
pub const DOMAIN_VERSION: u32 = 3;
/// The file name under dsh's storage root.
pub const FILE_NAME: &str = "session_projcache.json";

/// One session's record in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheRecord {
    /// The session id.
    pub id: String,
    /// `identity.createdAt` (the header's).
    pub created_at: u64,
    /// `identity.cwd` (the header's), when set.
    pub cwd: Option<String>,
    /// The rows, in the order to write them.
    pub rows: Vec<Checkpoint>,
}

impl CacheRecord {
    /// A record for a session with the given checkpoints.
    pub fn new(header: &SessionHeader, rows: Vec<Checkpoint>) -> CacheRecord {
        CacheRecord {
            id: header.id.clone(),
            created_at: header.created_at,
            cwd: header.cwd.clone(),
            rows,
        }
    }

    /// dsh's identity check: the record belongs to this header (`createdAt` and `cwd` equal).
    pub fn matches(&self, header: &SessionHeader) -> bool {
        self.id == header.id && self.created_at == header.created_at && self.cwd == header.cwd
    }
}

/// A cache file cannot be written or read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProjCacheError {
    /// A checkpoint's bytes are not JSON text, so they cannot be a row's `val`.
    #[error("session {id:?}, projection {key:?}: state bytes are not JSON text ({reason})")]
    NotJson {
        /// Session id.
        id: String,
        /// Projection key.
        key: String,
        /// Why.
        reason: String,
    },
    /// The file is not JSON.
    #[error("projection cache is not JSON: {0}")]
    Parse(String),
    /// The file is of another domain version (dsh fails with `version-mismatch`).
    #[error(
        "projection cache unit is {found}, expected {{\"name\":\"session_projcache\",\"version\":3}} (version-mismatch)"
    )]
    VersionMismatch {
        /// The `unit` found, as JSON text.
        found: String,
    },
    /// A part of the file does not have dsh's shape.
    #[error("projection cache: {0}")]
    Shape(String),
}

fn num(n: f64) -> JsonValue {
    JsonValue::number(n).unwrap_or(JsonValue::Null)
}

fn obj(entries: Vec<(&str, JsonValue)>) -> JsonValue {
    JsonValue::Object(JsonObject::from_entries(
        entries
            .into_iter()
            .map(|(k, v)| (JsString::from(k), v))
            .collect(),
    ))
}

/// Writes the whole cache file for `records` (in order; ids that are array indices come
/// first, as JavaScript orders object keys), exactly as dsh's json storage writes it.
pub fn write_projcache(records: &[CacheRecord]) -> Result<String, ProjCacheError> {
    let mut sessions = Vec::with_capacity(records.len());
    for r in records {
        let mut identity = vec![("createdAt", num(r.created_at as f64))];
        if let Some(cwd) = &r.cwd {
            identity.push(("cwd", JsonValue::string(cwd.as_str())));
        }
        let mut rows = Vec::with_capacity(r.rows.len());
        for cp in &r.rows {
            let val = std::str::from_utf8(&cp.bytes)
                .map_err(|e| e.to_string())
                .and_then(|t| parse(t, &JsonLimits::default()).map_err(|e| e.to_string()))
                .map_err(|reason| ProjCacheError::NotJson {
                    id: r.id.clone(),
                    key: cp.key.clone(),
                    reason,
                })?;
            let row = obj(vec![
                ("ver", num(f64::from(cp.version))),
                ("seq", num(cp.covered as f64 - 1.0)),
                ("val", val),
            ]);
            rows.push((JsString::from(cp.key.as_str()), row));
        }
        let record = obj(vec![
            ("identity", obj(identity)),
            ("rows", JsonValue::Object(JsonObject::from_entries(rows))),
        ]);
        sessions.push((JsString::from(r.id.as_str()), record));
    }
    let doc = obj(vec![
        (
            "unit",
            obj(vec![
                ("name", JsonValue::string(DOMAIN_NAME)),
                ("version", num(f64::from(DOMAIN_VERSION))),
            ]),
        ),
        ("global", JsonValue::Null),
        (
            "tables",
            obj(vec![(
                "sessions",
                JsonValue::Object(JsonObject::from_entries(sessions)),
            )]),
        ),
    ]);
    let mut out = stringify_pretty(&doc);
    out.push('\n');
    Ok(out)
}

/// Reads a cache file written by dsh (or [`write_projcache`]): one record per session, rows
/// as [`Checkpoint`]s (`covered = seq + 1`, bytes = `val` printed as `JSON.stringify` would).
/// Rows with a `seq` below -1 or not an integer are refused (dsh's schema).
pub fn read_projcache(text: &str) -> Result<Vec<CacheRecord>, ProjCacheError> {
    let doc =
        parse(text, &JsonLimits::default()).map_err(|e| ProjCacheError::Parse(e.to_string()))?;
    let unit = doc
        .get("unit")
        .ok_or_else(|| ProjCacheError::Shape("no unit".into()))?;
    if unit.get("name").and_then(JsonValue::as_str) != Some(DOMAIN_NAME)
        || unit.get("version").and_then(JsonValue::as_u64) != Some(u64::from(DOMAIN_VERSION))
    {
        return Err(ProjCacheError::VersionMismatch {
            found: stringify(unit),
        });
    }
    let sessions = doc
        .pointer(&["tables", "sessions"])
        .and_then(JsonValue::as_object)
        .ok_or_else(|| ProjCacheError::Shape("tables.sessions is not an object".into()))?;
    let mut out = Vec::with_capacity(sessions.len());
    for (id, record) in sessions.iter() {
        let id = id.to_string_lossy().into_owned();
        let shape = |what: &str| ProjCacheError::Shape(format!("session {id:?}: {what}"));
        let identity = record.get("identity").ok_or_else(|| shape("no identity"))?;
        let created_at = identity
            .get("createdAt")
            .and_then(JsonValue::as_u64)
            .ok_or_else(|| shape("identity.createdAt is not a non-negative integer"))?;
        let cwd = match identity.get("cwd") {
            None => None,
            Some(JsonValue::String(s)) => Some(s.to_string_lossy().into_owned()),
            Some(_) => return Err(shape("identity.cwd is not a string")),
        };
        let rows = record
            .get("rows")
            .and_then(JsonValue::as_object)
            .ok_or_else(|| shape("rows is not an object"))?;
        let mut checkpoints = Vec::with_capacity(rows.len());
        for (key, row) in rows.iter() {
            let key = key.to_string_lossy().into_owned();
            let version = row
                .get("ver")
                .and_then(JsonValue::as_u64)
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| shape(&format!("rows.{key}.ver is not a non-negative integer")))?;
            let seq = row
                .get("seq")
                .and_then(JsonValue::as_i64)
                .filter(|s| *s >= -1)
                .ok_or_else(|| shape(&format!("rows.{key}.seq is not an integer >= -1")))?;
            let val = row
                .get("val")
                .ok_or_else(|| shape(&format!("rows.{key} has no val")))?;
            checkpoints.push(Checkpoint {
                key,
                version,
                covered: (seq + 1) as u64,
                bytes: stringify(val).into_bytes(),
            });
        }
        out.push(CacheRecord {
            id,
            created_at,
            cwd,
            rows: checkpoints,
        });
    }
    Ok(out)
}

/// `JSON.stringify(value, null, 2)`: two-space indentation, `": "` after keys, empty
/// objects and arrays as `{}` and `[]`. Iterative (works on the compact printing).
pub fn stringify_pretty(value: &JsonValue) -> String {
    let compact = stringify(value);
    let b = compact.as_bytes();
    let mut out = String::with_capacity(compact.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut start = 0usize; // start of the pending run of bytes copied verbatim
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        match c {
            b'"' => {
                in_string = true;
                i += 1;
            }
            b'{' | b'[' => {
                out.push_str(&compact[start..=i]);
                let close = if c == b'{' { b'}' } else { b']' };
                if b.get(i + 1) == Some(&close) {
                    out.push(close as char);
                    i += 2;
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                    i += 1;
                }
                start = i;
            }
            b'}' | b']' => {
                out.push_str(&compact[start..i]);
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c as char);
                i += 1;
                start = i;
            }
            b',' => {
                out.push_str(&compact[start..=i]);
                newline(&mut out, depth);
                i += 1;
                start = i;
            }
            b':' => {
                out.push_str(&compact[start..=i]);
                out.push(' ');
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    out.push_str(&compact[start..]);
    out
}
