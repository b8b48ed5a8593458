//! Event lines: envelope key order, writing one event, building an event from a record.

use super::types::JsonlWriteError;
use super::{MAX_SAFE, parse_value};
use crate::event::{EnvelopeKey, Event, KeyOrder, Layout, Packing, Seq, SurfaceOp};
use crate::interop::chunk_rows;
use crate::json::{self, JsonLimits, JsonValue, NegativeZero, write_js_string};
use crate::session::load::{envelope_key, key_order as key_order_of};

const CANONICAL_KEYS: [EnvelopeKey; 7] = [
    EnvelopeKey::Type,
    EnvelopeKey::Seq,
    EnvelopeKey::Time,
    EnvelopeKey::Data,
    EnvelopeKey::SourceEventSeqs,
    EnvelopeKey::SurfaceOp,
    EnvelopeKey::Ignorable,
];

const SURFACE_OP_FIRST_KEYS: [EnvelopeKey; 7] = [
    EnvelopeKey::Type,
    EnvelopeKey::Seq,
    EnvelopeKey::Time,
    EnvelopeKey::Data,
    EnvelopeKey::SurfaceOp,
    EnvelopeKey::SourceEventSeqs,
    EnvelopeKey::Ignorable,
];

fn present(e: &Event, k: EnvelopeKey) -> bool {
    match k {
        EnvelopeKey::Type | EnvelopeKey::Seq | EnvelopeKey::Time | EnvelopeKey::Data => true,
        EnvelopeKey::SourceEventSeqs => e.source_event_seqs.is_some(),
        EnvelopeKey::SurfaceOp => e.surface_op.is_some(),
        EnvelopeKey::Ignorable => e.ignorable,
    }
}

/// The envelope keys of `e` in the order they are written.
fn key_sequence(e: &Event) -> Vec<EnvelopeKey> {
    let from = |order: &[EnvelopeKey]| order.iter().copied().filter(|&k| present(e, k)).collect();
    match &e.layout.key_order {
        KeyOrder::Canonical => from(&CANONICAL_KEYS),
        KeyOrder::SurfaceOpFirst => from(&SURFACE_OP_FIRST_KEYS),
        KeyOrder::Custom(keys) => {
            let mut out: Vec<EnvelopeKey> = Vec::with_capacity(7);
            for &k in keys.iter().chain(CANONICAL_KEYS.iter()) {
                if present(e, k) && !out.contains(&k) {
                    out.push(k);
                }
            }
            out
        }
    }
}

fn write_seqs(out: &mut String, seqs: &[Seq]) {
    out.push('[');
    for (i, s) in seqs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&s.to_string());
    }
    out.push(']');
}

/// Appends one event as dsh writes it (`JSON.stringify(event)`, no `\n`), in the key order
/// recorded in its layout. Refuses chunk-tag types and values dsh could not read back.
///
/// ```
/// use sessionlog::event::{Event, SurfaceOp};
/// use sessionlog::interop::jsonl::write_event_line;
/// let e = Event::new("user/message", 1, 2, r#"{"id":"u1"}"#).with_surface_op(SurfaceOp::Append);
/// let mut out = String::new();
/// write_event_line(&mut out, &e).unwrap();
/// assert_eq!(out, r#"{"type":"user/message","seq":1,"time":2,"data":{"id":"u1"},"surfaceOp":"append"}"#);
/// ```
pub fn write_event_line(out: &mut String, e: &Event) -> Result<(), JsonlWriteError> {
    if chunk_rows::is_chunk_tag(&e.kind) {
        return Err(JsonlWriteError::ChunkTagCollision {
            seq: e.seq,
            kind: e.kind.clone(),
        });
    }
    let invalid = |reason: String| JsonlWriteError::InvalidEvent { seq: e.seq, reason };
    if e.seq > MAX_SAFE as u64 || !(-MAX_SAFE..=MAX_SAFE).contains(&e.time) {
        return Err(invalid("seq and time must be safe integers".into()));
    }
    let safe = |n: &u64| *n <= MAX_SAFE as u64;
    if !e
        .source_event_seqs
        .as_deref()
        .unwrap_or_default()
        .iter()
        .all(safe)
        || matches!(e.surface_op, Some(SurfaceOp::Replace { start, end }) if !safe(&start) || !safe(&end))
    {
        return Err(invalid(
            "sourceEventSeqs and surfaceOp seqs must be safe integers".into(),
        ));
    }
    json::validate_with(&e.data, &JsonLimits::default(), NegativeZero::Accept)
        .map_err(|err| invalid(format!("data is not valid JSON: {err}")))?;
    out.push('{');
    for (i, key) in key_sequence(e).into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match key {
            EnvelopeKey::Type => {
                out.push_str("\"type\":");
                write_js_string(out, &e.kind);
            }
            EnvelopeKey::Seq => {
                out.push_str("\"seq\":");
                out.push_str(&e.seq.to_string());
            }
            EnvelopeKey::Time => {
                out.push_str("\"time\":");
                out.push_str(&e.time.to_string());
            }
            EnvelopeKey::Data => {
                out.push_str("\"data\":");
                out.push_str(&e.data);
            }
            EnvelopeKey::SourceEventSeqs => {
                out.push_str("\"sourceEventSeqs\":");
                write_seqs(out, e.source_event_seqs.as_deref().unwrap_or_default());
            }
            EnvelopeKey::SurfaceOp => {
                out.push_str("\"surfaceOp\":");
                match e.surface_op {
                    Some(SurfaceOp::Replace { start, end }) => {
                        out.push_str(&format!(
                            "{{\"op\":\"replace\",\"start\":{start},\"end\":{end}}}"
                        ));
                    }
                    _ => out.push_str("\"append\""),
                }
            }
            EnvelopeKey::Ignorable => out.push_str("\"ignorable\":true"),
        }
    }
    out.push('}');
    Ok(())
}

/// Builds an [`Event`] from a scalar record's top-level members (dsh's envelope rules, §1.2).
pub(super) fn event_from_members(
    members: &[json::RawMember<'_>],
    replay: bool,
    expected: Seq,
) -> Result<Event, String> {
    let mut keys: Vec<EnvelopeKey> = Vec::new();
    let mut last: [Option<&str>; 7] = [None; 7];
    for m in members {
        let name = m.key.to_string_lossy();
        let key = envelope_key(&name).ok_or_else(|| format!("unexpected key \"{name}\""))?;
        if !keys.contains(&key) {
            keys.push(key);
        }
        last[key as usize] = Some(m.value);
    }
    let get = |k: EnvelopeKey| last[k as usize];
    let value = |k: EnvelopeKey| -> Result<Option<JsonValue>, String> {
        get(k)
            .map(|t| parse_value(t).map_err(|e| e.to_string()))
            .transpose()
    };
    // (A type with a lone surrogate is reported as unsupported before this is called.)
    let kind = match value(EnvelopeKey::Type)? {
        Some(v) => v.as_str().ok_or("type must be a string")?.to_owned(),
        None => return Err("type must be a string".into()),
    };
    let seq = match value(EnvelopeKey::Seq)? {
        Some(v) => v
            .as_u64()
            .ok_or("seq must be a non-negative safe integer")?,
        None if replay => expected,
        None => return Err("seq is missing".into()),
    };
    let time = match value(EnvelopeKey::Time)? {
        Some(v) => v.as_i64().ok_or("time must be a safe integer")?,
        None if replay => 0,
        None => return Err("time is missing".into()),
    };
    let data = get(EnvelopeKey::Data).ok_or("data is missing")?.to_owned();
    let source_event_seqs = match value(EnvelopeKey::SourceEventSeqs)? {
        None => None,
        Some(v) => Some(
            v.as_array()
                .and_then(|a| a.iter().map(JsonValue::as_u64).collect::<Option<Vec<_>>>())
                .ok_or("sourceEventSeqs must be an array of non-negative safe integers")?,
        ),
    };
    let surface_op = match value(EnvelopeKey::SurfaceOp)? {
        None => None,
        Some(v) if v.as_str() == Some("append") => Some(SurfaceOp::Append),
        Some(v) => {
            let o = v
                .as_object()
                .filter(|o| o.has_exact_keys(&["op", "start", "end"]))
                .filter(|o| o.get("op").and_then(JsonValue::as_str) == Some("replace"))
                .ok_or("surfaceOp must be \"append\" or {op:\"replace\",start,end}")?;
            let start = o.get("start").and_then(JsonValue::as_u64);
            let end = o.get("end").and_then(JsonValue::as_u64);
            match (start, end) {
                (Some(start), Some(end)) => Some(SurfaceOp::Replace { start, end }),
                _ => return Err("surfaceOp start/end must be non-negative safe integers".into()),
            }
        }
    };
    let ignorable = match value(EnvelopeKey::Ignorable)? {
        None => false,
        Some(JsonValue::Bool(true)) => true,
        Some(_) => return Err("ignorable must be exactly true".into()),
    };
    let mut key_order = key_order_of(&keys);
    if replay && (get(EnvelopeKey::Seq).is_none() || get(EnvelopeKey::Time).is_none()) {
        key_order = KeyOrder::Canonical;
    }
    Ok(Event {
        kind,
        seq,
        time,
        data,
        source_event_seqs,
        surface_op,
        ignorable,
        layout: Layout {
            key_order,
            packing: Packing::Scalar,
            batch_start: false,
        },
    })
}
