//! Readers: load a session back from each peer (resume: read, parse, fold; full read).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use redb::ReadableDatabase as _;

use sessionlog::event::{Event, Seq, SurfaceOp};
use sessionlog::interop::chunk_rows::{self, ChunkKind};
use sessionlog::json::{self, JsonLimits, JsonValue};
use sessionlog::log::record::Record;
use sessionlog::store::{Config, Store};

use crate::fold::{Message, SurfaceFold};
use crate::peers::{BenchResult, PeerKind, REDB_EVENTS, REDB_FILE, SQLITE_FILE, jsonl_path};

/// What loading a session produced (the same numbers from every peer, or something is wrong).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Loaded {
    /// Events read.
    pub events: u64,
    /// Surface nodes after folding.
    pub surface: usize,
    /// Messages derived from the surface.
    pub messages: usize,
}

/// What sessionlog's resume measures: the session layer's resume (checkpointed state plus
/// the surface's frames; no replay of the log).
pub const SESSIONLOG_RESUME_KIND: &str = "surface resume";

/// Resumes session `id` of sessionlog's store in `dir` through the session layer: a writable
/// open and [`Store::resume`] (which would also append crash closers to an open turn), or a
/// read-only open and a [`Store::session`] handle; then the surface and the derived messages.
/// The store is handed back open (a resumed session goes on appending; closing it, which
/// syncs, is not part of the resume).
pub fn resume_sessionlog(dir: &Path, id: &str, read_only: bool) -> BenchResult<(Loaded, Store)> {
    let store = Store::open(dir, Config::default().read_only(read_only))?;
    let loaded = {
        let session = if read_only {
            store.session(id)?
        } else {
            store.resume(id)?
        };
        let surface = session.surface()?;
        let messages = session.messages()?;
        Loaded {
            events: session.len(),
            surface: surface.len(),
            messages: messages.len(),
        }
    };
    Ok((loaded, store))
}

/// sessionlog without the session layer's resume: a read-only open, every event read and
/// folded like the peers do (what resume cost before the surface was indexed).
pub fn full_read_sessionlog(dir: &Path, id: &str) -> BenchResult<Loaded> {
    let mut fold = SurfaceFold::default();
    let mut events = 0u64;
    let store = Store::open(dir, Config::default().read_only(true))?;
    let n = store.len(id).ok_or_else(|| format!("no session {id}"))?;
    for e in store.events(id, 0..n)? {
        let e = e?;
        events += 1;
        fold.apply_text(&e)?;
    }
    let (surface, messages) = fold.finish();
    Ok(Loaded {
        events,
        surface,
        messages,
    })
}

/// Resumes session `id` of `peer` stored in `dir`: open, read every event, parse what the
/// peer must parse, fold the surface and derive the messages.
pub fn resume(peer: PeerKind, dir: &Path, id: &str, index: usize) -> BenchResult<Loaded> {
    let mut fold = SurfaceFold::default();
    let mut events = 0u64;
    match peer {
        PeerKind::Sessionlog => return resume_sessionlog(dir, id, false).map(|(loaded, _)| loaded),
        PeerKind::Redb => {
            let db = redb::Database::open(dir.join(REDB_FILE))?;
            let txn = db.begin_read()?;
            let table = txn.open_table(REDB_EVENTS)?;
            let s = index as u64 + 1;
            for item in table.range((s, 0)..(s + 1, 0))? {
                let (_, v) = item?;
                let (record, _) = Record::decode(v.value())?;
                let Record::Event { event, .. } = record else {
                    return Err("redb holds a non-event record".into());
                };
                events += 1;
                fold.apply_text(&Event::from(event))?;
            }
        }
        PeerKind::SqliteFull | PeerKind::SqliteNormal => {
            let conn = rusqlite::Connection::open_with_flags(
                dir.join(SQLITE_FILE),
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )?;
            let mut stmt = conn.prepare(
                "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events WHERE session_id = ? ORDER BY seq",
            )?;
            let mut rows = stmt.query([id])?;
            let limits = JsonLimits::default();
            while let Some(row) = rows.next()? {
                let seq: i64 = row.get(0)?;
                let kind: String = row.get(1)?;
                let data: String = row.get(3)?;
                let op: Option<String> = row.get(5)?;
                let data = json::parse(&data, &limits)?;
                let op = match op {
                    Some(text) => Some(parse_surface_op(&json::parse(&text, &limits)?)?),
                    None => None,
                };
                events += 1;
                fold.apply_value(seq as Seq, &kind, op, Message::Value(data))?;
            }
        }
        PeerKind::Jsonl | PeerKind::DshJsonlZstd => {
            let limits = JsonLimits::default();
            let mut first = true;
            for line in jsonl_lines(peer, dir, id)? {
                let line = line?;
                if std::mem::take(&mut first) {
                    continue; // the header line
                }
                let value = json::parse(&line, &limits)?;
                let obj = value.as_object().ok_or("a JSONL line is not an object")?;
                if let Some(members) = chunk_row(obj)? {
                    events += members.len() as u64; // chunks are not surface nodes
                    continue;
                }
                let seq = obj
                    .get("seq")
                    .and_then(JsonValue::as_u64)
                    .ok_or("line without seq")?;
                let kind = obj
                    .get("type")
                    .and_then(JsonValue::as_str)
                    .ok_or("line without type")?
                    .to_owned();
                let op = match obj.get("surfaceOp") {
                    Some(v) => Some(parse_surface_op(v)?),
                    None => None,
                };
                events += 1;
                fold.apply_value(seq, &kind, op, Message::Line(value))?;
            }
        }
        PeerKind::DshSqlite18 => return crate::faithful::resume(dir, id),
        PeerKind::RawDisk => return Err("the raw disk keeps no sessions to load".into()),
    }
    let (surface, messages) = fold.finish();
    Ok(Loaded {
        events,
        surface,
        messages,
    })
}

/// Reads every event of session `id` of `peer` as an [`Event`] (no fold), returning the count.
/// Stores are opened read-only.
pub fn read_all(peer: PeerKind, dir: &Path, id: &str, index: usize) -> BenchResult<u64> {
    let mut n = 0u64;
    let mut sink = |e: Event| {
        n += 1;
        std::hint::black_box(e);
    };
    match peer {
        PeerKind::Sessionlog => {
            let store = Store::open(dir, Config::default().read_only(true))?;
            let len = store.len(id).ok_or_else(|| format!("no session {id}"))?;
            for e in store.events(id, 0..len)? {
                sink(e?);
            }
        }
        PeerKind::Redb => {
            let db = redb::Database::open(dir.join(REDB_FILE))?;
            let txn = db.begin_read()?;
            let table = txn.open_table(REDB_EVENTS)?;
            let s = index as u64 + 1;
            for item in table.range((s, 0)..(s + 1, 0))? {
                let (_, v) = item?;
                if let (Record::Event { event, .. }, _) = Record::decode(v.value())? {
                    sink(Event::from(event));
                }
            }
        }
        PeerKind::SqliteFull | PeerKind::SqliteNormal => {
            let conn = rusqlite::Connection::open_with_flags(
                dir.join(SQLITE_FILE),
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )?;
            let mut stmt = conn.prepare(
                "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events WHERE session_id = ? ORDER BY seq",
            )?;
            let mut rows = stmt.query([id])?;
            let limits = JsonLimits::default();
            while let Some(row) = rows.next()? {
                let mut e = Event::new(
                    row.get::<_, String>(1)?,
                    row.get::<_, i64>(0)? as Seq,
                    row.get(2)?,
                    row.get::<_, String>(3)?,
                );
                if let Some(text) = row.get::<_, Option<String>>(4)? {
                    let v = json::parse(&text, &limits)?;
                    e.source_event_seqs = v
                        .as_array()
                        .map(|a| a.iter().filter_map(JsonValue::as_u64).collect());
                }
                if let Some(text) = row.get::<_, Option<String>>(5)? {
                    e.surface_op = Some(parse_surface_op(&json::parse(&text, &limits)?)?);
                }
                e.ignorable = row.get::<_, Option<i64>>(6)? == Some(1);
                sink(e);
            }
        }
        PeerKind::Jsonl | PeerKind::DshJsonlZstd => {
            let limits = JsonLimits::default();
            let mut first = true;
            for line in jsonl_lines(peer, dir, id)? {
                let line = line?;
                if std::mem::take(&mut first) {
                    continue;
                }
                if line.starts_with(r#"{"type":""#) && line.contains(r#""seq0":"#) {
                    let value = json::parse(&line, &limits)?;
                    let obj = value.as_object().ok_or("a JSONL line is not an object")?;
                    if let Some(members) = chunk_row(obj)? {
                        members.into_iter().for_each(&mut sink);
                        continue;
                    }
                }
                let members = json::raw_members_with(&line, &limits)?;
                let get = |k: &str| members.iter().rev().find(|m| m.key == *k).map(|m| m.value);
                let kind = json::parse(get("type").ok_or("line without type")?, &limits)?;
                let seq: Seq = get("seq").ok_or("line without seq")?.parse()?;
                let time: i64 = get("time").unwrap_or("0").parse()?;
                let mut e = Event::new(
                    kind.as_str().unwrap_or_default(),
                    seq,
                    time,
                    get("data").unwrap_or("null"),
                );
                if let Some(v) = get("sourceEventSeqs") {
                    let v = json::parse(v, &limits)?;
                    e.source_event_seqs = v
                        .as_array()
                        .map(|a| a.iter().filter_map(JsonValue::as_u64).collect());
                }
                if let Some(v) = get("surfaceOp") {
                    e.surface_op = Some(parse_surface_op(&json::parse(v, &limits)?)?);
                }
                sink(e);
            }
        }
        PeerKind::DshSqlite18 => {
            for e in crate::faithful::read_events(dir, id)? {
                sink(e);
            }
        }
        PeerKind::RawDisk => return Err("the raw disk keeps no sessions to read".into()),
    }
    Ok(n)
}

/// The lines of session `id`'s JSONL file: plain, or (dsh's zstd file) every frame
/// decompressed first, as dsh reads the whole file before splitting it.
fn jsonl_lines(
    peer: PeerKind,
    dir: &Path,
    id: &str,
) -> BenchResult<Box<dyn Iterator<Item = std::io::Result<String>>>> {
    Ok(if peer == PeerKind::DshJsonlZstd {
        let bytes = std::fs::read(crate::faithful::jsonl_zstd_path(dir, id))?;
        let text = zstd::stream::decode_all(bytes.as_slice())?;
        Box::new(std::io::Cursor::new(text).lines())
    } else {
        let file = File::open(jsonl_path(dir, id))?;
        Box::new(BufReader::with_capacity(1 << 20, file).lines())
    })
}

/// The member events of a packed chunk row (dsh's JSONL codec), or `None` for an event line.
fn chunk_row(obj: &sessionlog::json::JsonObject) -> BenchResult<Option<Vec<Event>>> {
    let Some(kind) = obj
        .get("type")
        .and_then(JsonValue::as_str)
        .and_then(ChunkKind::from_tag)
    else {
        return Ok(None);
    };
    Ok(Some(chunk_rows::decode_jsonl_record(kind, obj)?))
}

/// Parses dsh's `surfaceOp` JSON value.
pub fn parse_surface_op(v: &JsonValue) -> BenchResult<SurfaceOp> {
    if v.as_str() == Some("append") {
        return Ok(SurfaceOp::Append);
    }
    match (
        v.get("op").and_then(JsonValue::as_str),
        v.get("start"),
        v.get("end"),
    ) {
        (Some("replace"), Some(s), Some(e)) => Ok(SurfaceOp::Replace {
            start: s.as_u64().ok_or("bad replace start")?,
            end: e.as_u64().ok_or("bad replace end")?,
        }),
        _ => Err(format!("invalid surfaceOp {}", json::stringify(v)).into()),
    }
}

/// Bytes of every file under `dir` (apparent sizes).
pub fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => total += dir_bytes(&e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}
