//! One `events` row: its columns checked, decoded into logical events (schema 15 or 17/18), and the
//! small JSON values of its envelope.

use super::SchemaVersion;
use super::codec::{self, MAX_PACKED_DATA_BYTES, MAX_SCALAR_DATA_BYTES};
use crate::event::{Event, MAX_SAFE_INTEGER, Packing, Seq, SurfaceOp};
use crate::interop::chunk_rows::{self, ChunkKind, Codec};
use crate::json::{self, JsonError, JsonLimits, JsonValue, NegativeZero};
use rusqlite::types::ValueRef;

pub(super) fn safe_integer(v: ValueRef<'_>) -> Option<i64> {
    match v {
        ValueRef::Integer(i) if (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&i) => Some(i),
        ValueRef::Real(r) if r.fract() == 0.0 && r.abs() <= MAX_SAFE_INTEGER as f64 => {
            Some(r as i64)
        }
        _ => None,
    }
}

pub(super) fn nullable_text(v: ValueRef<'_>) -> Result<Option<String>, &'static str> {
    match v {
        ValueRef::Null => Ok(None),
        ValueRef::Text(t) => Ok(Some(String::from_utf8_lossy(t).into_owned())),
        other => Err(type_name(other)),
    }
}

pub(super) fn nullable_count(v: ValueRef<'_>) -> Result<Option<u64>, &'static str> {
    match v {
        ValueRef::Null => Ok(None),
        other => match safe_integer(other) {
            Some(n) if n >= 0 => Ok(Some(n as u64)),
            Some(_) => Err("a negative integer"),
            None => Err(type_name(other)),
        },
    }
}

fn type_name(v: ValueRef<'_>) -> &'static str {
    match v {
        ValueRef::Null => "null",
        ValueRef::Integer(_) => "an integer",
        ValueRef::Real(_) => "a real",
        ValueRef::Text(_) => "text",
        ValueRef::Blob(_) => "a blob",
    }
}

/// An `events` row after the row-level checks.
#[derive(Debug)]
pub(super) struct PhysicalRow {
    pub(super) seq: i64,
    pub(super) kind: String,
    pub(super) time: i64,
    pub(super) data: RawData,
    pub(super) sources: Option<RawSources>,
    pub(super) surface_op: Option<String>,
    pub(super) ignorable: Option<i64>,
}

#[derive(Debug)]
pub(super) enum RawData {
    Text(String),
    Blob(Vec<u8>),
}

#[derive(Debug)]
pub(super) enum RawSources {
    /// Schema 15: JSON text.
    Json(String),
    /// Schema 17/18: varint blob.
    Blob(Vec<u8>),
}

/// A logical event decoded from a row, before representability checks.
#[derive(Debug)]
pub(super) struct Decoded {
    pub(super) kind: String,
    pub(super) seq: i64,
    pub(super) time: i64,
    pub(super) data: String,
    pub(super) sources: Option<DecodedSources>,
    pub(super) surface_op: Option<SmallJson>,
    pub(super) ignorable: bool,
    pub(super) packing: Packing,
}

#[derive(Debug)]
pub(super) enum DecodedSources {
    Seqs(Vec<Seq>),
    Json(SmallJson),
}

/// Decodes one physical row into its logical events (dsh's `rowToEvent` at 15, `decodeRow` at
/// 17/18). An `Err` marks the row as undecodable for the torn-row rule.
pub(super) fn decode_row(
    version: SchemaVersion,
    row: &PhysicalRow,
) -> Result<Vec<Decoded>, String> {
    if !version.is_packed_layout() {
        let sources = match &row.sources {
            None => None,
            Some(RawSources::Json(text)) => {
                Some(DecodedSources::Json(parse_small(text).map_err(|e| {
                    format!("source_event_seqs is not JSON: {e}")
                })?))
            }
            Some(RawSources::Blob(_)) => return Err("source_event_seqs is a blob".into()),
        };
        let surface_op = surface_op_of(row)?;
        let data = match &row.data {
            RawData::Text(t) => t.clone(),
            RawData::Blob(_) => return Err("data is a blob".into()),
        };
        return scalar_row(row, data, sources, surface_op, Packing::Auto);
    }
    if row.ignorable != Some(0) {
        let sources = match &row.sources {
            None => None,
            Some(RawSources::Blob(b)) => Some(DecodedSources::Seqs(
                codec::decode_source_event_seqs(b).map_err(|e| e.to_string())?,
            )),
            Some(RawSources::Json(_)) => return Err("source_event_seqs is text".into()),
        };
        let surface_op = surface_op_of(row)?;
        let data = decode_data(&row.data, MAX_SCALAR_DATA_BYTES)?;
        return scalar_row(row, data, sources, surface_op, Packing::Scalar);
    }
    if !chunk_rows::is_chunk_tag(&row.kind) {
        return Err(format!(
            "malformed {} storage row: packed discriminator requires a chunk tag",
            row.kind
        ));
    }
    if row.sources.is_some() || row.surface_op.is_some() {
        return Err(format!(
            "malformed {} storage row: packed surface fields must be null",
            row.kind
        ));
    }
    let text = decode_data(&row.data, MAX_PACKED_DATA_BYTES)?;
    let members = decode_packed(&row.kind, row.seq, row.time, &text)?;
    Ok(members
        .into_iter()
        .map(|e| Decoded {
            kind: e.kind,
            seq: e.seq as i64,
            time: e.time,
            data: e.data,
            sources: None,
            surface_op: None,
            ignorable: false,
            packing: e.layout.packing,
        })
        .collect())
}

/// A row's `surface_op` column parsed as JSON (`None` when null).
fn surface_op_of(row: &PhysicalRow) -> Result<Option<SmallJson>, String> {
    match &row.surface_op {
        None => Ok(None),
        Some(text) => parse_small(text)
            .map(Some)
            .map_err(|e| format!("surface_op is not JSON: {e}")),
    }
}

/// The one event of a scalar row, once its `data` is checked to be JSON.
fn scalar_row(
    row: &PhysicalRow,
    data: String,
    sources: Option<DecodedSources>,
    surface_op: Option<SmallJson>,
    packing: Packing,
) -> Result<Vec<Decoded>, String> {
    check_json(&data).map_err(|e| format!("data is not JSON: {e}"))?;
    Ok(vec![Decoded {
        kind: row.kind.clone(),
        seq: row.seq,
        time: row.time,
        data,
        sources,
        surface_op,
        ignorable: row.ignorable == Some(1),
        packing,
    }])
}

fn decode_data(value: &RawData, max: usize) -> Result<String, String> {
    match value {
        RawData::Text(t) => Ok(t.clone()),
        RawData::Blob(b) => codec::decode_zstd_data(b, max).map_err(|e| e.to_string()),
    }
}

/// Expands a packed row with the SQLite-17/18 codec (3..=1024 members, at most 1 MiB of data).
fn decode_packed(tag: &str, seq0: i64, time0: i64, text: &str) -> Result<Vec<Event>, String> {
    let kind = ChunkKind::from_tag(tag).ok_or_else(|| {
        format!("malformed {tag} storage row: packed discriminator requires a chunk tag")
    })?;
    chunk_rows::decode_row(kind, seq0, time0, text, Codec::Sqlite).map_err(|e| e.to_string())
}

/// Limits for reading stored JSON: dsh (V8) has no nesting limit and its texts are bounded by
/// the decompression bound.
fn read_limits() -> JsonLimits {
    JsonLimits {
        max_depth: usize::MAX,
        max_bytes: MAX_SCALAR_DATA_BYTES,
    }
}

/// True for the refusal of the lossless boundary that `JSON.parse` itself accepts: numbers
/// that overflow to ±Infinity (`-0` is accepted through [`NegativeZero::Accept`]).
fn parse_accepts(e: &JsonError) -> bool {
    matches!(e, JsonError::NonFinite { .. })
}

/// Checks that `text` is JSON that `JSON.parse` accepts (lone surrogates, `-0` and overflowing
/// numbers included).
pub(super) fn check_json(text: &str) -> Result<(), String> {
    match json::validate_with(text, &read_limits(), NegativeZero::Accept) {
        Ok(()) => Ok(()),
        // The validator stops at the first overflowing number; finish the syntax check without
        // the lossless rules (serde_json's scanner accepts lone surrogates when ignoring
        // values).
        Err(e) if parse_accepts(&e) => serde_json::from_str::<serde::de::IgnoredAny>(text)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// A small JSON column (`surface_op`, 15's `source_event_seqs`) as `JSON.parse` would read it.
#[derive(Debug)]
pub(super) enum SmallJson {
    /// Parsed.
    Value(JsonValue),
    /// Valid for `JSON.parse` but holding a number that overflows to ±Infinity: never a valid
    /// seq list or surface op.
    Unrepresentable(String),
}

impl std::fmt::Display for SmallJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SmallJson::Value(v) => write!(f, "{v}"),
            SmallJson::Unrepresentable(t) => f.write_str(t),
        }
    }
}

fn parse_small(text: &str) -> Result<SmallJson, String> {
    match json::parse_with(text, &read_limits(), NegativeZero::Accept) {
        Ok(v) => Ok(SmallJson::Value(v)),
        Err(e) if parse_accepts(&e) => {
            check_json(text).map(|()| SmallJson::Unrepresentable(text.to_owned()))
        }
        Err(e) => Err(e.to_string()),
    }
}

pub(super) fn json_seq_array(v: &SmallJson) -> Option<Vec<Seq>> {
    let SmallJson::Value(v) = v else { return None };
    v.as_array()?.iter().map(JsonValue::as_u64).collect()
}

pub(super) fn surface_op_from_json(v: &SmallJson) -> Option<SurfaceOp> {
    let SmallJson::Value(v) = v else { return None };
    if v.as_str() == Some("append") {
        return Some(SurfaceOp::Append);
    }
    let map = v.as_object()?;
    if !map.has_exact_keys(&["op", "start", "end"]) || map.get("op")?.as_str()? != "replace" {
        return None;
    }
    Some(SurfaceOp::Replace {
        start: map.get("start")?.as_u64()?,
        end: map.get("end")?.as_u64()?,
    })
}
