//! Decoding: a packed row (or a JSONL record) back into its member events.

use super::pack::{Member, member_event};
use super::{
    ChunkKind, ChunkRowError, Codec, MAX_PACKED_DATA_BYTES, MAX_PACKED_ROW_MEMBERS, MAX_SAFE,
    is_safe, malformed,
};
use crate::event::{Event, Packing, Seq};
use crate::json::{self, JsString, JsonLimits, JsonObject, JsonValue, NegativeZero};

/// Expands a packed row given as its parts (the SQLite-17/18 columns `type`, `seq`, `time` and
/// the decompressed `data` text) into its member events, validating it as dsh's decoder does.
/// The events carry [`Packing::RowStart`] / [`Packing::RowMember`].
///
/// ```
/// use sessionlog::interop::chunk_rows::{decode_row, ChunkKind, Codec};
/// let data = r#"{"turn":2,"step":3,"index":1,"dt":[2,-1],"texts":["a","b","c"]}"#;
/// let events = decode_row(ChunkKind::Text, 7, 90, data, Codec::Sqlite).unwrap();
/// let times: Vec<i64> = events.iter().map(|e| e.time).collect();
/// assert_eq!(times, [90, 92, 91]);
/// assert_eq!(events[1].data, r#"{"turn":2,"step":3,"chunk":{"type":"text-delta","index":1,"text":"b"}}"#);
/// ```
pub fn decode_row(
    kind: ChunkKind,
    seq0: i64,
    time0: i64,
    data: &str,
    codec: Codec,
) -> Result<Vec<Event>, ChunkRowError> {
    if data.len() > codec.max_bytes() {
        return Err(malformed(
            kind,
            format!("data exceeds {MAX_PACKED_DATA_BYTES} UTF-8 bytes"),
        ));
    }
    let value = json::parse_with(data, &JsonLimits::default(), NegativeZero::Accept)
        .map_err(|e| malformed(kind, format!("data is not valid JSON: {e}")))?;
    let seq0 = u64::try_from(seq0)
        .ok()
        .filter(|&s| s <= MAX_SAFE as u64)
        .ok_or_else(|| {
            malformed(
                kind,
                format!("seq0 {seq0} is not a non-negative safe integer"),
            )
        })?;
    if !is_safe(time0) {
        return Err(malformed(
            kind,
            format!("time0 {time0} is not a safe integer"),
        ));
    }
    decode_data(kind, seq0, time0, &value, codec)
}

/// Expands a parsed JSONL record whose `type` is a chunk tag (dsh's JSONL codec: any member
/// count ≥ 1), checking the envelope keys are exactly `type, seq0, time0, data`.
pub fn decode_jsonl_record(
    kind: ChunkKind,
    record: &JsonObject,
) -> Result<Vec<Event>, ChunkRowError> {
    if !record.has_exact_keys(&["type", "seq0", "time0", "data"]) {
        let keys: Vec<String> = record.keys().map(|k| k.to_string()).collect();
        return Err(malformed(
            kind,
            format!(
                "keys must be exactly type, seq0, time0, data (found {})",
                keys.join(", ")
            ),
        ));
    }
    let seq0 = record
        .get("seq0")
        .and_then(JsonValue::as_u64)
        .ok_or_else(|| malformed(kind, "seq0 must be a non-negative safe integer"))?;
    let time0 = record
        .get("time0")
        .and_then(JsonValue::as_i64)
        .ok_or_else(|| malformed(kind, "time0 must be a safe integer"))?;
    let null = JsonValue::Null;
    let data = record.get("data").unwrap_or(&null);
    decode_data(kind, seq0, time0, data, Codec::Jsonl)
}

fn decode_data(
    kind: ChunkKind,
    seq0: Seq,
    time0: i64,
    data: &JsonValue,
    codec: Codec,
) -> Result<Vec<Event>, ChunkRowError> {
    let d = data.as_object().ok_or_else(|| {
        malformed(
            kind,
            format!("data must be an object, found {}", data.kind_name()),
        )
    })?;
    let keys_ok = match kind {
        ChunkKind::ToolCall => {
            d.has_exact_keys(&["turn", "step", "index", "dt", "id", "args"])
                || d.has_exact_keys(&["turn", "step", "index", "dt", "id", "name", "args"])
        }
        _ => d.has_exact_keys(&["turn", "step", "index", "dt", "texts"]),
    };
    if !keys_ok {
        let expected = match kind {
            ChunkKind::ToolCall => "turn, step, index, dt, id, name?, args",
            _ => "turn, step, index, dt, texts",
        };
        return Err(malformed(
            kind,
            format!("data keys must be exactly {expected}"),
        ));
    }
    let number = |key: &str| {
        d.get(key)
            .and_then(JsonValue::as_f64)
            .ok_or_else(|| malformed(kind, format!("{key} must be a number")))
    };
    let (turn, step, index) = (number("turn")?, number("step")?, number("index")?);
    let string = |key: &str| {
        d.get(key)
            .and_then(JsonValue::as_js_string)
            .cloned()
            .ok_or_else(|| malformed(kind, format!("{key} must be a string")))
    };
    let (id, name) = match kind {
        ChunkKind::ToolCall => {
            let name = if d.contains_key("name") {
                Some(string("name")?)
            } else {
                None
            };
            (Some(string("id")?), name)
        }
        _ => (None, None),
    };
    let key = kind.members_key();
    let payloads: Vec<JsString> = d
        .get(key)
        .and_then(JsonValue::as_array)
        .filter(|a| !a.is_empty())
        .and_then(|a| {
            a.iter()
                .map(|v| v.as_js_string().cloned())
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| malformed(kind, format!("{key} must be a non-empty array of strings")))?;
    let n = payloads.len();
    if n < codec.min_members_read() || n > codec.max_members() {
        return Err(malformed(
            kind,
            format!(
                "{n} members, outside {}..={MAX_PACKED_ROW_MEMBERS}",
                codec.min_members_read()
            ),
        ));
    }
    let dt = d
        .get("dt")
        .and_then(JsonValue::as_array)
        .ok_or_else(|| malformed(kind, "dt must be an array"))?;
    if dt.len() != n - 1 {
        return Err(malformed(
            kind,
            format!(
                "dt has {} entries for {n} members (expected {})",
                dt.len(),
                n - 1
            ),
        ));
    }
    let last_seq = seq0
        .checked_add(n as u64 - 1)
        .filter(|&s| s <= MAX_SAFE as u64);
    if last_seq.is_none() {
        return Err(malformed(kind, "last member seq is not a safe integer"));
    }
    let mut events = Vec::with_capacity(n);
    let mut time = time0;
    for (k, payload) in payloads.into_iter().enumerate() {
        if k > 0 {
            let gap = dt[k - 1]
                .as_i64()
                .ok_or_else(|| malformed(kind, format!("dt[{}] is not a safe integer", k - 1)))?;
            time = time
                .checked_add(gap)
                .filter(|&t| is_safe(t))
                .ok_or_else(|| {
                    malformed(kind, format!("time of member {k} is not a safe integer"))
                })?;
        }
        let m = Member {
            kind,
            seq: seq0 + k as u64,
            time,
            turn,
            step,
            index,
            id: id.clone(),
            name: name.clone(),
            payload,
        };
        let packing = if k == 0 {
            Packing::RowStart
        } else {
            Packing::RowMember
        };
        events.push(member_event(&m, packing));
    }
    Ok(events)
}
