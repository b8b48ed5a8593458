//! Packing: member events, runs of them, and the packed rows that replace them.

use super::{
    CHUNK_EVENT_TYPE, ChunkKind, Codec, MAX_SAFE, MIN_RUN, PackPolicy, PackedRow, Record, is_safe,
};
use crate::event::{EnvelopeKey, Event, KeyOrder, Layout, Packing, Seq};
use crate::json::{
    self, JsString, JsonLimits, JsonValue, NegativeZero, write_js_js_string, write_js_number,
};

/// The fields of one packable chunk event.
#[derive(Debug, Clone)]
pub(super) struct Member {
    pub(super) kind: ChunkKind,
    pub(super) seq: Seq,
    pub(super) time: i64,
    pub(super) turn: f64,
    pub(super) step: f64,
    pub(super) index: f64,
    pub(super) id: Option<JsString>,
    pub(super) name: Option<JsString>,
    pub(super) payload: JsString,
}

/// The `data` text dsh's decoder rebuilds for a member (`JSON.stringify` of
/// `{turn,step,chunk:{type,index,text}}` or `{…,chunk:{type,index,id,name?,argumentsDelta}}`).
fn member_data(m: &Member) -> String {
    let mut out = String::with_capacity(m.payload.as_wtf8().len() + 80);
    out.push_str("{\"turn\":");
    write_js_number(&mut out, m.turn);
    out.push_str(",\"step\":");
    write_js_number(&mut out, m.step);
    out.push_str(",\"chunk\":{\"type\":\"");
    out.push_str(m.kind.delta_type());
    out.push_str("\",\"index\":");
    write_js_number(&mut out, m.index);
    match m.kind {
        ChunkKind::ToolCall => {
            out.push_str(",\"id\":");
            if let Some(id) = &m.id {
                write_js_js_string(&mut out, id);
            }
            if let Some(name) = &m.name {
                out.push_str(",\"name\":");
                write_js_js_string(&mut out, name);
            }
            out.push_str(",\"argumentsDelta\":");
        }
        _ => out.push_str(",\"text\":"),
    }
    write_js_js_string(&mut out, &m.payload);
    out.push_str("}}");
    out
}

pub(super) fn member_event(m: &Member, packing: Packing) -> Event {
    Event {
        kind: CHUNK_EVENT_TYPE.to_owned(),
        seq: m.seq,
        time: m.time,
        data: member_data(m),
        source_event_seqs: None,
        surface_op: None,
        ignorable: false,
        layout: Layout {
            key_order: KeyOrder::Canonical,
            packing,
            batch_start: false,
        },
    }
}

fn envelope_is_plain(e: &Event) -> bool {
    if e.surface_op.is_some() || e.source_event_seqs.is_some() || e.ignorable {
        return false;
    }
    match &e.layout.key_order {
        KeyOrder::Canonical | KeyOrder::SurfaceOpFirst => true,
        KeyOrder::Custom(keys) => {
            keys.as_slice()
                == [
                    EnvelopeKey::Type,
                    EnvelopeKey::Seq,
                    EnvelopeKey::Time,
                    EnvelopeKey::Data,
                ]
        }
    }
}

/// dsh's packing whitelist (plus the losslessness condition in the module docs).
fn packable(e: &Event) -> Option<Member> {
    if e.kind != CHUNK_EVENT_TYPE || !envelope_is_plain(e) {
        return None;
    }
    let time_ok = is_safe(e.time);
    let seq_ok = i64::try_from(e.seq).is_ok_and(|s| s <= MAX_SAFE);
    if !time_ok || !seq_ok {
        return None;
    }
    let data = json::parse_with(&e.data, &JsonLimits::default(), NegativeZero::Accept).ok()?;
    let d = data.as_object()?;
    if !d.has_exact_keys(&["turn", "step", "chunk"]) {
        return None;
    }
    let turn = d.get("turn")?.as_f64()?;
    let step = d.get("step")?.as_f64()?;
    let chunk = d.get("chunk")?.as_object()?;
    let index = chunk.get("index")?.as_f64()?;
    let kind = ChunkKind::from_delta_type(chunk.get("type")?.as_str()?)?;
    let string = |key: &str| chunk.get(key).and_then(JsonValue::as_js_string).cloned();
    let (id, name, payload) = match kind {
        ChunkKind::Text | ChunkKind::Reasoning => {
            if !chunk.has_exact_keys(&["type", "index", "text"]) {
                return None;
            }
            (None, None, string("text")?)
        }
        ChunkKind::ToolCall => {
            let with_name =
                chunk.has_exact_keys(&["type", "index", "id", "name", "argumentsDelta"]);
            if !with_name && !chunk.has_exact_keys(&["type", "index", "id", "argumentsDelta"]) {
                return None;
            }
            let name = if with_name {
                Some(string("name")?)
            } else {
                None
            };
            (Some(string("id")?), name, string("argumentsDelta")?)
        }
    };
    let m = Member {
        kind,
        seq: e.seq,
        time: e.time,
        turn,
        step,
        index,
        id,
        name,
        payload,
    };
    (member_data(&m) == e.data).then_some(m)
}

/// dsh's run-continuation rule.
fn continues(prev: &Member, next: &Member) -> bool {
    prev.kind == next.kind
        && next.seq == prev.seq + 1
        && next.time.checked_sub(prev.time).is_some_and(is_safe)
        && prev.turn == next.turn
        && prev.step == next.step
        && prev.index == next.index
        && prev.id == next.id
        && prev.name == next.name
}

/// The row `data` for a run of members (keys in dsh's order).
fn row_data(run: &[Member]) -> String {
    let Some(first) = run.first() else {
        return String::new();
    };
    let mut out = String::new();
    out.push_str("{\"turn\":");
    write_js_number(&mut out, first.turn);
    out.push_str(",\"step\":");
    write_js_number(&mut out, first.step);
    out.push_str(",\"index\":");
    write_js_number(&mut out, first.index);
    out.push_str(",\"dt\":[");
    for (k, pair) in run.windows(2).enumerate() {
        if k > 0 {
            out.push(',');
        }
        out.push_str(&(pair[1].time - pair[0].time).to_string());
    }
    out.push(']');
    if first.kind == ChunkKind::ToolCall {
        out.push_str(",\"id\":");
        if let Some(id) = &first.id {
            write_js_js_string(&mut out, id);
        }
        if let Some(name) = &first.name {
            out.push_str(",\"name\":");
            write_js_js_string(&mut out, name);
        }
    }
    out.push_str(",\"");
    out.push_str(first.kind.members_key());
    out.push_str("\":[");
    for (k, m) in run.iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        write_js_js_string(&mut out, &m.payload);
    }
    out.push_str("]}");
    out
}

fn make_row(run: &[Member], data: String) -> Option<PackedRow> {
    let first = run.first()?;
    Some(PackedRow {
        kind: first.kind,
        seq0: first.seq,
        time0: first.time,
        members: run.len(),
        data,
    })
}

// ---------------------------------------------------------------------------------------------
// Packing
// ---------------------------------------------------------------------------------------------

/// Packs `events` into storage records: packed rows for runs of chunk events, the events
/// themselves otherwise. Records come out in seq order and cover every event exactly once.
///
/// ```
/// use sessionlog::event::Event;
/// use sessionlog::interop::chunk_rows::{pack, Codec, PackPolicy, Record};
/// let chunk = |seq, time, text: &str| Event::new("assistant/chunk", seq, time, format!(
///     r#"{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"{text}"}}}}"#));
/// let events = vec![chunk(5, 1000, "He"), chunk(6, 1010, "ll"), chunk(7, 1020, "o")];
/// let records = pack(&events, Codec::Jsonl, PackPolicy::Maximal);
/// let Record::Row(row) = &records[0] else { panic!() };
/// assert_eq!(row.to_jsonl_line(), r#"{"type":"text-chunks","seq0":5,"time0":1000,"data":{"turn":1,"step":1,"index":0,"dt":[10,10],"texts":["He","ll","o"]}}"#);
/// ```
pub fn pack(events: &[Event], codec: Codec, policy: PackPolicy) -> Vec<Record<'_>> {
    let members: Vec<Option<Member>> = events.iter().map(packable).collect();
    let mut out = Vec::new();
    match policy {
        PackPolicy::Maximal => pack_batch(events, &members, 0, events.len(), codec, &mut out),
        PackPolicy::Remembered => {
            let mut i = 0;
            while i < events.len() {
                match events[i].layout.packing {
                    Packing::Scalar => {
                        out.push(Record::Event(&events[i]));
                        i += 1;
                    }
                    Packing::RowStart | Packing::RowMember => {
                        let mut j = i + 1;
                        while j < events.len() && events[j].layout.packing == Packing::RowMember {
                            j += 1;
                        }
                        match remembered_row(&members[i..j], codec) {
                            Some(row) => out.push(Record::Row(row)),
                            None => pack_batch(events, &members, i, j, codec, &mut out),
                        }
                        i = j;
                    }
                    Packing::Auto | Packing::AutoBatchStart => {
                        let mut j = i + 1;
                        while j < events.len() && events[j].layout.packing == Packing::Auto {
                            j += 1;
                        }
                        pack_batch(events, &members, i, j, codec, &mut out);
                        i = j;
                    }
                }
            }
        }
    }
    out
}

/// The remembered group as one row, if it is a valid run the codec can hold.
fn remembered_row(group: &[Option<Member>], codec: Codec) -> Option<PackedRow> {
    let run: Vec<Member> = group.iter().cloned().collect::<Option<Vec<_>>>()?;
    if run.len() < codec.min_members_read() || run.len() > codec.max_members() {
        return None;
    }
    if !run.windows(2).all(|p| continues(&p[0], &p[1])) {
        return None;
    }
    let data = row_data(&run);
    if data.len() > codec.max_bytes() {
        return None;
    }
    make_row(&run, data)
}

/// Packs events `[start, end)` as one append batch: maximal runs, split by the codec's rules.
fn pack_batch<'a>(
    events: &'a [Event],
    members: &[Option<Member>],
    start: usize,
    end: usize,
    codec: Codec,
    out: &mut Vec<Record<'a>>,
) {
    let mut i = start;
    while i < end {
        let Some(first) = &members[i] else {
            out.push(Record::Event(&events[i]));
            i += 1;
            continue;
        };
        let mut j = i + 1;
        let mut prev = first;
        while j < end {
            match &members[j] {
                Some(m) if continues(prev, m) => {
                    prev = m;
                    j += 1;
                }
                _ => break,
            }
        }
        let run: Vec<Member> = members[i..j].iter().flatten().cloned().collect();
        emit_run(&events[i..j], &run, codec, out);
        i = j;
    }
}

/// Emits one maximal run: dsh's splitting rule for the SQLite codec, one row for JSONL.
fn emit_run<'a>(events: &'a [Event], run: &[Member], codec: Codec, out: &mut Vec<Record<'a>>) {
    let n = run.len().min(events.len());
    let mut k = 0;
    while n - k >= MIN_RUN {
        let rest = &run[k..n];
        let hi = rest.len().min(codec.max_members());
        let fits = |m: usize| -> Option<String> {
            let data = row_data(&rest[..m]);
            (data.len() <= codec.max_bytes()).then_some(data)
        };
        let taken = match fits(hi) {
            Some(data) => Some((hi, data)),
            None => match fits(MIN_RUN) {
                None => None,
                Some(min_data) => {
                    // Largest m in [MIN_RUN, hi) that fits: lo fits, hi does not.
                    let (mut lo, mut lo_data, mut hi) = (MIN_RUN, min_data, hi);
                    while hi - lo > 1 {
                        let mid = lo + (hi - lo) / 2;
                        match fits(mid) {
                            Some(d) => {
                                lo = mid;
                                lo_data = d;
                            }
                            None => hi = mid,
                        }
                    }
                    Some((lo, lo_data))
                }
            },
        };
        match taken.and_then(|(m, data)| make_row(&rest[..m], data).map(|r| (m, r))) {
            Some((m, row)) => {
                out.push(Record::Row(row));
                k += m;
            }
            None => {
                out.push(Record::Event(&events[k]));
                k += 1;
            }
        }
    }
    out.extend(events[k..n].iter().map(Record::Event));
}
