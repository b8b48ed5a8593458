//! The data that crosses the boundary: JSON text in (one `JSON.stringify` of a whole batch,
//! or JSONL text), JSON text out (one `JSON.parse` on the JavaScript side).
//!
//! An event's `data` is taken as the exact JSON text the caller produced (serde_json's
//! `RawValue` keeps the span); the engine then validates it with its own lossless-JSON rules
//! on append. Events go out through the engine's own line writer (`write_event_line`).

use std::fmt::Write as _;

use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use serde_json::value::RawValue;
use sessionlog::{EnvelopeKey, Event, KeyOrder, SessionHeader, SurfaceOp, write_event_line};

use crate::errors::Failure;

/// dsh's event envelope as JSON, with its keys in the order they came.
struct WireEvent<'a> {
    kind: String,
    seq: u64,
    time: i64,
    data: Option<&'a RawValue>,
    source_event_seqs: Option<Vec<u64>>,
    surface_op: Option<&'a RawValue>,
    ignorable: Option<bool>,
    /// The envelope keys in the caller's order (`JSON.stringify` keeps insertion order).
    order: Vec<EnvelopeKey>,
}

const EVENT_FIELDS: &[&str] = &[
    "type",
    "seq",
    "time",
    "data",
    "sourceEventSeqs",
    "surfaceOp",
    "ignorable",
];

impl<'de> Deserialize<'de> for WireEvent<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WireEvent<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a dsh event object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                use serde::de::Error as _;
                let mut kind = None;
                let mut seq = None;
                let mut time = None;
                let mut data = None;
                let mut source_event_seqs = None;
                let mut surface_op = None;
                let mut ignorable = None;
                let mut order = Vec::with_capacity(7);
                while let Some(key) = map.next_key::<String>()? {
                    let k = match key.as_str() {
                        "type" => EnvelopeKey::Type,
                        "seq" => EnvelopeKey::Seq,
                        "time" => EnvelopeKey::Time,
                        "data" => EnvelopeKey::Data,
                        "sourceEventSeqs" => EnvelopeKey::SourceEventSeqs,
                        "surfaceOp" => EnvelopeKey::SurfaceOp,
                        "ignorable" => EnvelopeKey::Ignorable,
                        other => return Err(A::Error::unknown_field(other, EVENT_FIELDS)),
                    };
                    if order.contains(&k) {
                        return Err(A::Error::custom(format_args!("duplicate field `{key}`")));
                    }
                    order.push(k);
                    match k {
                        EnvelopeKey::Type => kind = Some(map.next_value::<String>()?),
                        EnvelopeKey::Seq => seq = Some(map.next_value::<u64>()?),
                        EnvelopeKey::Time => time = Some(map.next_value::<i64>()?),
                        EnvelopeKey::Data => data = map.next_value::<Option<&'de RawValue>>()?,
                        EnvelopeKey::SourceEventSeqs => {
                            source_event_seqs = map.next_value::<Option<Vec<u64>>>()?;
                        }
                        EnvelopeKey::SurfaceOp => {
                            surface_op = map.next_value::<Option<&'de RawValue>>()?;
                        }
                        EnvelopeKey::Ignorable => ignorable = map.next_value::<Option<bool>>()?,
                    }
                }
                Ok(WireEvent {
                    kind: kind.ok_or_else(|| A::Error::missing_field("type"))?,
                    seq: seq.ok_or_else(|| A::Error::missing_field("seq"))?,
                    time: time.ok_or_else(|| A::Error::missing_field("time"))?,
                    data,
                    source_event_seqs,
                    surface_op,
                    ignorable,
                    order,
                })
            }
        }
        d.deserialize_map(V)
    }
}

/// The layout's key order for envelope keys that came in `order` (only the keys the event
/// has count, so `sourceEventSeqs: null` or an absent key changes nothing): the canonical
/// order, dsh's closers' order (`surfaceOp` before `sourceEventSeqs`), or the order as given.
fn key_order(event: &Event, order: &[EnvelopeKey]) -> KeyOrder {
    use EnvelopeKey as K;
    let present = |k: K| match k {
        K::Type | K::Seq | K::Time | K::Data => true,
        K::SourceEventSeqs => event.source_event_seqs.is_some(),
        K::SurfaceOp => event.surface_op.is_some(),
        K::Ignorable => event.ignorable,
    };
    let keys: Vec<K> = order.iter().copied().filter(|&k| present(k)).collect();
    let follows = |reference: &[K]| {
        reference
            .iter()
            .copied()
            .filter(|k| keys.contains(k))
            .eq(keys.iter().copied())
    };
    let canonical = [
        K::Type,
        K::Seq,
        K::Time,
        K::Data,
        K::SourceEventSeqs,
        K::SurfaceOp,
        K::Ignorable,
    ];
    let closers = [
        K::Type,
        K::Seq,
        K::Time,
        K::Data,
        K::SurfaceOp,
        K::SourceEventSeqs,
        K::Ignorable,
    ];
    if follows(&canonical) {
        KeyOrder::Canonical
    } else if follows(&closers) {
        KeyOrder::SurfaceOpFirst
    } else {
        KeyOrder::Custom(keys)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireReplace {
    op: String,
    start: u64,
    end: u64,
}

fn invalid(message: String) -> Failure {
    Failure::new("INVALID_EVENT", message)
}

fn to_event(w: WireEvent<'_>, index: usize) -> Result<Event, Failure> {
    let Some(data) = w.data else {
        return Err(Failure::new(
            "INVALID_JSON",
            format!(
                "event {} at index {index} (seq {}) has no data: data must be JSON",
                w.kind, w.seq
            ),
        ));
    };
    let mut event = Event::new(w.kind, w.seq, w.time, data.get());
    event.source_event_seqs = w.source_event_seqs;
    event.ignorable = w.ignorable == Some(true);
    if w.ignorable == Some(false) {
        return Err(invalid(format!(
            "event {} (seq {}): ignorable must be true or absent",
            event.kind, event.seq
        )));
    }
    if let Some(op) = w.surface_op {
        event.surface_op = Some(parse_surface_op(op.get()).map_err(|e| {
            invalid(format!(
                "event {} (seq {}): surfaceOp must be \"append\" or {{op:\"replace\",start,end}}: {e}",
                event.kind, event.seq
            ))
        })?);
    }
    event.layout.key_order = key_order(&event, &w.order);
    Ok(event)
}

fn parse_surface_op(text: &str) -> Result<SurfaceOp, String> {
    if text == "\"append\"" {
        return Ok(SurfaceOp::Append);
    }
    let r: WireReplace = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if r.op != "replace" {
        return Err(format!("unknown op {:?}", r.op));
    }
    Ok(SurfaceOp::Replace {
        start: r.start,
        end: r.end,
    })
}

/// Parses a JSON array of events (one `JSON.stringify` of the batch).
pub fn events_from_array(text: &str) -> Result<Vec<Event>, Failure> {
    let wire: Vec<WireEvent<'_>> = serde_json::from_str(text)
        .map_err(|e| invalid(format!("the batch is not an array of dsh events: {e}")))?;
    wire.into_iter()
        .enumerate()
        .map(|(i, w)| to_event(w, i))
        .collect()
}

/// Parses JSONL text: one event per non-empty line.
pub fn events_from_jsonl(text: &str) -> Result<Vec<Event>, Failure> {
    text.split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, line)| {
            let w: WireEvent<'_> = serde_json::from_str(line)
                .map_err(|e| invalid(format!("JSONL line {} is not a dsh event: {e}", i + 1)))?;
            to_event(w, i)
        })
        .collect()
}

/// Writes events as a JSON array of dsh envelopes.
pub fn write_events(out: &mut String, events: &[Event]) -> Result<(), Failure> {
    out.push('[');
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_event_line(out, e).map_err(|err| {
            Failure::new(
                "UNREPRESENTABLE",
                format!(
                    "event {} (seq {}) cannot be written as JSON: {err}",
                    e.kind, e.seq
                ),
            )
        })?;
    }
    out.push(']');
    Ok(())
}

/// A JSON object's members in their order, values as raw text.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, &'de RawValue>()? {
                    out.push((k, v));
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

fn bad_header(reason: impl Into<String>) -> Failure {
    Failure::new("INVALID_HEADER", reason.into())
}

fn opt_string(key: &str, raw: &RawValue) -> Result<Option<String>, Failure> {
    if raw.get() == "null" {
        return Ok(None);
    }
    serde_json::from_str::<String>(raw.get())
        .map(Some)
        .map_err(|_| bad_header(format!("header {key} must be a string")))
}

fn opt_u64(key: &str, raw: &RawValue) -> Result<Option<u64>, Failure> {
    if raw.get() == "null" {
        return Ok(None);
    }
    serde_json::from_str::<u64>(raw.get())
        .map(Some)
        .map_err(|_| bad_header(format!("header {key} must be a non-negative integer")))
}

/// Parses dsh's `SessionHeader` (as `JSON.stringify` writes it). `type: "session"` (the
/// JSONL header line's tag) is accepted and dropped; unknown keys are kept in order.
pub fn header_from_json(text: &str) -> Result<SessionHeader, Failure> {
    let members: Members<'_> = serde_json::from_str(text)
        .map_err(|e| bad_header(format!("the header is not a JSON object: {e}")))?;
    let mut h = SessionHeader::default();
    let mut id = None;
    let mut created = None;
    for (key, raw) in members.0 {
        match key.as_str() {
            "type" if raw.get() == "\"session\"" => {}
            "version" => {
                if raw.get() != "0" {
                    return Err(bad_header(format!(
                        "header version {} is not supported; dsh's format version is 0",
                        raw.get()
                    )));
                }
            }
            "id" => id = opt_string("id", raw)?,
            "createdAt" => created = opt_u64("createdAt", raw)?,
            "cwd" => h.cwd = opt_string("cwd", raw)?,
            "parentSession" => h.parent_session = opt_string("parentSession", raw)?,
            "seedLength" => h.seed_length = opt_u64("seedLength", raw)?,
            "origin" => h.origin = opt_string("origin", raw)?,
            "delegationDepth" => h.delegation_depth = opt_u64("delegationDepth", raw)?,
            "agentPreset" => h.agent_preset = opt_string("agentPreset", raw)?,
            "owner" => h.owner = opt_string("owner", raw)?,
            _ => h.extra.push((key, raw.get().to_owned())),
        }
    }
    h.id = id.ok_or_else(|| bad_header("header id must be a non-empty string"))?;
    h.created_at =
        created.ok_or_else(|| bad_header("header createdAt must be a non-negative integer"))?;
    Ok(h)
}

fn push_str(out: &mut String, s: &str) {
    // serde_json escapes as JSON.stringify does for valid Unicode; JSON.parse reads it back.
    out.push_str(&serde_json::Value::from(s).to_string());
}

fn opt(out: &mut String, key: &str, v: &Option<String>) {
    if let Some(v) = v {
        let _ = write!(out, ",\"{key}\":");
        push_str(out, v);
    }
}

/// Writes a header as a JSON object in dsh's in-memory key order (absent fields stay absent).
pub fn write_header(out: &mut String, h: &SessionHeader) {
    let _ = write!(out, "{{\"version\":{},\"id\":", h.version);
    push_str(out, &h.id);
    let _ = write!(out, ",\"createdAt\":{}", h.created_at);
    opt(out, "cwd", &h.cwd);
    opt(out, "parentSession", &h.parent_session);
    if let Some(n) = h.seed_length {
        let _ = write!(out, ",\"seedLength\":{n}");
    }
    opt(out, "origin", &h.origin);
    if let Some(n) = h.delegation_depth {
        let _ = write!(out, ",\"delegationDepth\":{n}");
    }
    opt(out, "agentPreset", &h.agent_preset);
    opt(out, "owner", &h.owner);
    for (k, v) in &h.extra {
        out.push(',');
        push_str(out, k);
        out.push(':');
        out.push_str(v);
    }
    out.push('}');
}

/// A JSON string literal.
pub fn string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}
