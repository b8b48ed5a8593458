//! dsh packed chunk rows (`text-chunks`, `reasoning-chunks`, `tool-call-chunks`).
//!
//! A packed row is a storage-only record that holds a run of `assistant/chunk` delta events
//! (dsh-session-semantics §10, dsh-persistence-formats §3). Rows never enter a session's log:
//! readers expand them with [`decode_row`] / [`decode_jsonl_record`], writers build them with
//! [`pack`]. Two codecs exist ([`Codec`]): dsh's JSONL codec (any member count, no byte cap)
//! and its SQLite-17/18 codec (3..=1024 members and at most [`MAX_PACKED_DATA_BYTES`] bytes of
//! `data`, long runs split by dsh's rule).
//!
//! Row layout, keys in the order dsh writes them:
//! ```text
//! {"type":"text-chunks"|"reasoning-chunks","seq0":S,"time0":T,"data":{"turn","step","index","dt":[…],"texts":[…]}}
//! {"type":"tool-call-chunks","seq0":S,"time0":T,"data":{"turn","step","index","dt":[…],"id","name"?,"args":[…]}}
//! ```
//! Member `k` has seq `seq0 + k` and time `time0 + dt[0] + … + dt[k-1]`.
//!
//! **Losslessness.** Besides dsh's whitelist, an event is packed only if its envelope key
//! order is `type, seq, time, data` and its `data` text is exactly what decoding the row gives
//! back (the `JSON.stringify` form). That holds for everything dsh writes; it guarantees that
//! `decode(pack(batch))` reproduces every event byte for byte. Decoded events carry
//! [`Packing::RowStart`] / [`Packing::RowMember`], so [`PackPolicy::Remembered`] rebuilds the
//! original rows.

use crate::event::{EnvelopeKey, Event, KeyOrder, Layout, MAX_SAFE_INTEGER, Packing, Seq};
use crate::json::{
    self, JsString, JsonLimits, JsonObject, JsonValue, NegativeZero, write_js_js_string,
    write_js_number, write_js_string,
};

/// dsh's `MIN_RUN`: runs shorter than this are written as individual events.
pub const MIN_RUN: usize = 3;

/// The SQLite codec's largest row (`MAX_PACKED_ROW_MEMBERS`).
pub const MAX_PACKED_ROW_MEMBERS: usize = 1024;

/// The SQLite codec's cap on the UTF-8 length of a row's `data` JSON (`MAX_PACKED_DATA_BYTES`).
pub const MAX_PACKED_DATA_BYTES: usize = 1_048_576;

/// The logical event type that packed rows hold.
pub const CHUNK_EVENT_TYPE: &str = "assistant/chunk";

/// The three packed-row tags.
pub const CHUNK_TAGS: [&str; 3] = ["text-chunks", "reasoning-chunks", "tool-call-chunks"];

/// True when `t` is a packed-row tag (such a type cannot be a logical event in JSONL).
pub fn is_chunk_tag(t: &str) -> bool {
    CHUNK_TAGS.contains(&t)
}

/// The kind of delta a packed row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChunkKind {
    /// `text-delta` events, row tag `text-chunks`.
    Text,
    /// `reasoning-delta` events, row tag `reasoning-chunks`.
    Reasoning,
    /// `tool-call-delta` events, row tag `tool-call-chunks`.
    ToolCall,
}

impl ChunkKind {
    /// The row tag (`text-chunks`, …).
    pub fn tag(self) -> &'static str {
        match self {
            ChunkKind::Text => "text-chunks",
            ChunkKind::Reasoning => "reasoning-chunks",
            ChunkKind::ToolCall => "tool-call-chunks",
        }
    }

    /// The kind whose row tag is `tag`.
    pub fn from_tag(tag: &str) -> Option<ChunkKind> {
        match tag {
            "text-chunks" => Some(ChunkKind::Text),
            "reasoning-chunks" => Some(ChunkKind::Reasoning),
            "tool-call-chunks" => Some(ChunkKind::ToolCall),
            _ => None,
        }
    }

    /// The chunk `type` of the member events (`text-delta`, …).
    pub fn delta_type(self) -> &'static str {
        match self {
            ChunkKind::Text => "text-delta",
            ChunkKind::Reasoning => "reasoning-delta",
            ChunkKind::ToolCall => "tool-call-delta",
        }
    }

    fn from_delta_type(t: &str) -> Option<ChunkKind> {
        match t {
            "text-delta" => Some(ChunkKind::Text),
            "reasoning-delta" => Some(ChunkKind::Reasoning),
            "tool-call-delta" => Some(ChunkKind::ToolCall),
            _ => None,
        }
    }

    /// The `data` key holding the member strings (`texts` or `args`).
    fn members_key(self) -> &'static str {
        match self {
            ChunkKind::ToolCall => "args",
            _ => "texts",
        }
    }
}

/// Which of dsh's two row codecs to follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    /// `core/session/src/chunk-rows.ts`: rows of any length (at least 1 member on read), no
    /// byte cap. Writers pack runs of [`MIN_RUN`] or more.
    Jsonl,
    /// `session-persistence-sqlite/src/codec.ts` (schemas 17 and 18): 3..=1024 members and at
    /// most [`MAX_PACKED_DATA_BYTES`] of `data`, on read and on write.
    Sqlite,
}

impl Codec {
    fn min_members_read(self) -> usize {
        match self {
            Codec::Jsonl => 1,
            Codec::Sqlite => MIN_RUN,
        }
    }

    fn max_members(self) -> usize {
        match self {
            Codec::Jsonl => usize::MAX,
            Codec::Sqlite => MAX_PACKED_ROW_MEMBERS,
        }
    }

    fn max_bytes(self) -> usize {
        match self {
            Codec::Jsonl => usize::MAX,
            Codec::Sqlite => MAX_PACKED_DATA_BYTES,
        }
    }
}

/// How [`pack`] decides row boundaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PackPolicy {
    /// Honour each event's [`Layout::packing`]: `Scalar` events stay single records, a
    /// `RowStart` and the `RowMember`s after it become one row again (split by the codec's
    /// rules only if the codec cannot hold it as is), and runs of `Auto` events are packed
    /// maximally within their batch (a batch begins at each `AutoBatchStart` and at the first
    /// `Auto` after any other packing).
    Remembered,
    /// Treat the whole slice as one append batch and pack every eligible run maximally,
    /// ignoring the remembered layout (what dsh does with one append batch).
    Maximal,
}

/// A packed row: one storage record holding a run of chunk events.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PackedRow {
    /// What the row holds.
    pub kind: ChunkKind,
    /// Seq of the first member (the SQLite `seq` column).
    pub seq0: Seq,
    /// Time of the first member (the SQLite `time` column).
    pub time0: i64,
    /// Number of members.
    pub members: usize,
    /// The row's `data` as `JSON.stringify` writes it (the SQLite `data` column, before any
    /// compression).
    pub data: String,
}

impl PackedRow {
    /// The row tag (the SQLite `type` column).
    pub fn tag(&self) -> &'static str {
        self.kind.tag()
    }

    /// Seqs covered by the row.
    pub fn seqs(&self) -> std::ops::Range<Seq> {
        self.seq0..self.seq0 + self.members as Seq
    }

    /// Appends the row as dsh's JSONL writes it (no trailing newline):
    /// `{"type":…,"seq0":…,"time0":…,"data":…}`.
    pub fn write_jsonl(&self, out: &mut String) {
        out.push_str("{\"type\":");
        write_js_string(out, self.tag());
        out.push_str(",\"seq0\":");
        out.push_str(&self.seq0.to_string());
        out.push_str(",\"time0\":");
        out.push_str(&self.time0.to_string());
        out.push_str(",\"data\":");
        out.push_str(&self.data);
        out.push('}');
    }

    /// The row as one JSONL line (no trailing newline).
    pub fn to_jsonl_line(&self) -> String {
        let mut out = String::with_capacity(self.data.len() + 64);
        self.write_jsonl(&mut out);
        out
    }
}

/// One storage record produced by [`pack`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    /// An event stored as itself.
    Event(&'a Event),
    /// A packed row standing for several consecutive events.
    Row(PackedRow),
}

impl Record<'_> {
    /// Seq of the (first) event the record holds.
    pub fn seq(&self) -> Seq {
        match self {
            Record::Event(e) => e.seq,
            Record::Row(r) => r.seq0,
        }
    }

    /// Number of events the record holds.
    pub fn len(&self) -> usize {
        match self {
            Record::Event(_) => 1,
            Record::Row(r) => r.members,
        }
    }

    /// Always false (a record holds at least one event); present for symmetry with `len`.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// A packed row that dsh's decoder would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkRowError {
    /// dsh's `malformed <tag> storage row: …`.
    #[error("malformed {tag} storage row: {reason}")]
    Malformed {
        /// The row tag.
        tag: &'static str,
        /// What is wrong.
        reason: String,
    },
}

fn malformed(kind: ChunkKind, reason: impl Into<String>) -> ChunkRowError {
    ChunkRowError::Malformed {
        tag: kind.tag(),
        reason: reason.into(),
    }
}

const MAX_SAFE: i64 = MAX_SAFE_INTEGER;

fn is_safe(n: i64) -> bool {
    (-MAX_SAFE..=MAX_SAFE).contains(&n)
}

// ---------------------------------------------------------------------------------------------
// Member events
// ---------------------------------------------------------------------------------------------

/// The fields of one packable chunk event.
#[derive(Debug, Clone)]
struct Member {
    kind: ChunkKind,
    seq: Seq,
    time: i64,
    turn: f64,
    step: f64,
    index: f64,
    id: Option<JsString>,
    name: Option<JsString>,
    payload: JsString,
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

fn member_event(m: &Member, packing: Packing) -> Event {
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

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

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

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(seq: Seq, time: i64, text: &str) -> Event {
        Event::new(
            CHUNK_EVENT_TYPE,
            seq,
            time,
            format!(
                r#"{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"{text}"}}}}"#
            ),
        )
    }

    #[test]
    fn non_canonical_data_is_not_packed() {
        let mut events = vec![chunk(0, 0, "a"), chunk(1, 0, "b"), chunk(2, 0, "c")];
        assert!(matches!(
            pack(&events, Codec::Jsonl, PackPolicy::Maximal)[0],
            Record::Row(_)
        ));
        events[1].data =
            r#"{"step":1,"turn":1,"chunk":{"type":"text-delta","index":0,"text":"b"}}"#.into();
        let recs = pack(&events, Codec::Jsonl, PackPolicy::Maximal);
        assert_eq!(recs.len(), 3);
    }

    #[test]
    fn remembered_short_row_is_kept_for_jsonl_only() {
        let mut events = vec![chunk(0, 0, "a"), chunk(1, 5, "b")];
        events[0].layout.packing = Packing::RowStart;
        events[1].layout.packing = Packing::RowMember;
        let recs = pack(&events, Codec::Jsonl, PackPolicy::Remembered);
        assert!(matches!(&recs[..], [Record::Row(r)] if r.members == 2));
        let recs = pack(&events, Codec::Sqlite, PackPolicy::Remembered);
        assert_eq!(recs.len(), 2);
        assert!(recs.iter().all(|r| matches!(r, Record::Event(_))));
    }
}
