//! Lean event records (segment format versions 7 and 8, format-spec.md §4.2).
//!
//! Two record tags after postcard's five: **5** (`EventStart`) holds an event with its seq
//! and time; **6** (`EventNext`) holds the next event of a session whose previous event
//! record is earlier in the same frame payload: its seq is that record's plus one (never
//! written) and its time a zigzag delta from that record's. Both carry the rest of the event
//! as one `shape` varint (the option, flag and layout bits), the `type` as a code for dsh's
//! known type names (0 and the string for any other), the `data` string, and only the fields
//! the shape says are present. A frame payload still decodes alone: the first event record
//! of each session in a frame is always tag 5 (or postcard's tag 1).
//!
//! Appenders encode tag 5 ([`encode_start`]); the committer turns a session's later records
//! into tag 6 as it stages them into a batch ([`Chains`]), where it knows which records
//! share a frame.

use crate::error::DecodeError;
use crate::event::{EnvelopeKey, Event, KeyOrder, Layout, Packing, Seq, SurfaceOp};

use super::record::EventRecord;

/// Record tag of an event record with its seq and time.
pub const TAG_START: u8 = 5;
/// Record tag of the next event of a session whose previous event is earlier in the frame.
pub const TAG_NEXT: u8 = 6;

/// dsh's event type names, coded `1 + index` in a lean record's `type` field (0: the name
/// follows as a string). The order is dictionary 1's (format-spec.md §3.2). Immutable: a
/// change is a new segment format version.
pub const TYPE_CODES: [&str; 48] = [
    "agent-preset/selected",
    "agent/inbox/spliced",
    "approval/asked",
    "approval/decided",
    "approval/policy",
    "command/done",
    "command/run",
    "compaction/end",
    "compaction/prune",
    "compaction/start",
    "compaction/summary",
    "feedback/record",
    "goal/change",
    "hook/invoked",
    "hook/result",
    "llm/retry",
    "llm/retry-started",
    "permission/preset",
    "plan/mode",
    "sandbox/mode",
    "schedule/change",
    "session/end-seed",
    "session/title-llm-request",
    "subagent/descriptor",
    "team/member",
    "team/message/delivered",
    "team/message/queued",
    "team/task",
    "todo/write",
    "tool-workflow/agent-end",
    "tool-workflow/agent-start",
    "tool-workflow/run-end",
    "tool-workflow/run-start",
    "tool/code-dispatch",
    "tool/code-dispatch-start",
    "web/deepseek-search-llm-request",
    "request/context",
    "request/header",
    "session/title",
    "tool/result",
    "tool/call",
    "user/message",
    "assistant/message",
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "assistant/chunk",
];

/// The code of `kind` in [`TYPE_CODES`] (0: not listed). A `match`, which the compiler turns
/// into a switch on the length and a few comparisons, instead of a scan of the table.
fn type_code(kind: &str) -> u64 {
    match kind {
        "agent-preset/selected" => 1,
        "agent/inbox/spliced" => 2,
        "approval/asked" => 3,
        "approval/decided" => 4,
        "approval/policy" => 5,
        "command/done" => 6,
        "command/run" => 7,
        "compaction/end" => 8,
        "compaction/prune" => 9,
        "compaction/start" => 10,
        "compaction/summary" => 11,
        "feedback/record" => 12,
        "goal/change" => 13,
        "hook/invoked" => 14,
        "hook/result" => 15,
        "llm/retry" => 16,
        "llm/retry-started" => 17,
        "permission/preset" => 18,
        "plan/mode" => 19,
        "sandbox/mode" => 20,
        "schedule/change" => 21,
        "session/end-seed" => 22,
        "session/title-llm-request" => 23,
        "subagent/descriptor" => 24,
        "team/member" => 25,
        "team/message/delivered" => 26,
        "team/message/queued" => 27,
        "team/task" => 28,
        "todo/write" => 29,
        "tool-workflow/agent-end" => 30,
        "tool-workflow/agent-start" => 31,
        "tool-workflow/run-end" => 32,
        "tool-workflow/run-start" => 33,
        "tool/code-dispatch" => 34,
        "tool/code-dispatch-start" => 35,
        "web/deepseek-search-llm-request" => 36,
        "request/context" => 37,
        "request/header" => 38,
        "session/title" => 39,
        "tool/result" => 40,
        "tool/call" => 41,
        "user/message" => 42,
        "assistant/message" => 43,
        "turn/start" => 44,
        "turn/end" => 45,
        "step/start" => 46,
        "step/end" => 47,
        "assistant/chunk" => 48,
        _ => 0,
    }
}

// Shape bits.
const SHAPE_IGNORABLE: u64 = 1;
const SHAPE_SOURCES: u64 = 1 << 1;
const SHAPE_SURFACE: u64 = 1 << 2;
const SHAPE_BATCH_START: u64 = 1 << 3;
const SHAPE_PACKING_SHIFT: u32 = 4;
const SHAPE_ORDER_SHIFT: u32 = 7;
const SHAPE_KNOWN: u64 = (1 << 9) - 1;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn bad(field: &'static str, detail: impl Into<String>) -> DecodeError {
    DecodeError::Field {
        field,
        detail: detail.into(),
    }
}

/// A reader over a record's bytes.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    pub(crate) fn position(&self) -> usize {
        self.at
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *self.bytes.get(self.at).ok_or(DecodeError::Truncated {
            needed: self.at as u64 + 1,
            available: self.bytes.len() as u64,
        })?;
        self.at += 1;
        Ok(b)
    }

    /// A varint of at most 10 bytes whose value fits a `u64`.
    pub(crate) fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            if shift == 63 && b > 1 {
                return Err(bad("varint", "over 64 bits"));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(bad("varint", "over 10 bytes"))
    }

    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.varint()?;
        let rest = self.bytes.len() - self.at;
        if len > rest as u64 {
            return Err(DecodeError::Truncated {
                needed: (self.at as u64).saturating_add(len),
                available: self.bytes.len() as u64,
            });
        }
        let s = &self.bytes[self.at..self.at + len as usize];
        self.at += len as usize;
        Ok(s)
    }
}

/// What a header read of a lean event record learns (no string copied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeanHead<'a> {
    pub(crate) session: u64,
    /// `Some(seq)` for tag 5; `None` for tag 6 (the previous record's seq plus one).
    pub(crate) seq: Option<Seq>,
    /// The time (tag 5) or the delta from the previous record's time (tag 6).
    pub(crate) time: i64,
    pub(crate) shape: u64,
    pub(crate) kind: &'a [u8],
    pub(crate) data: &'a [u8],
}

/// Reads a lean event record's header and strings, leaving `r` after its `data`.
pub(crate) fn read_head<'a>(r: &mut Reader<'a>) -> Result<LeanHead<'a>, DecodeError> {
    let tag = r.byte()?;
    let session = r.varint()?;
    let seq = match tag {
        TAG_START => Some(r.varint()?),
        TAG_NEXT => None,
        other => return Err(bad("tag", format!("{other} is not a lean event record"))),
    };
    let time = unzigzag(r.varint()?);
    let shape = r.varint()?;
    if shape & !SHAPE_KNOWN != 0
        || (shape >> SHAPE_PACKING_SHIFT) & 7 > 4
        || (shape >> SHAPE_ORDER_SHIFT) & 3 > 2
    {
        return Err(bad("shape", format!("{shape:#x} has undefined bits")));
    }
    let code = r.varint()?;
    let kind: &'a [u8] = match code {
        0 => r.bytes()?,
        c => TYPE_CODES
            .get((c - 1) as usize)
            .ok_or_else(|| bad("type", format!("type code {c} is not defined")))?
            .as_bytes(),
    };
    let data = r.bytes()?;
    Ok(LeanHead {
        session,
        seq,
        time,
        shape,
        kind,
        data,
    })
}

/// Steps over the fields after `data` that `shape` says are present, returning them when
/// `collect` (else empty values).
#[allow(clippy::type_complexity)]
pub(crate) fn read_tail(
    r: &mut Reader<'_>,
    shape: u64,
    seq: Seq,
    collect: bool,
) -> Result<(Option<Vec<Seq>>, Option<SurfaceOp>, Layout), DecodeError> {
    let sources = if shape & SHAPE_SOURCES != 0 {
        let count = r.varint()?;
        let rest = (r.bytes.len() - r.at) as u64;
        if count > rest {
            return Err(DecodeError::Truncated {
                needed: (r.at as u64).saturating_add(count),
                available: r.bytes.len() as u64,
            });
        }
        let mut out = Vec::with_capacity(if collect { count as usize } else { 0 });
        let mut prev = seq;
        for _ in 0..count {
            let d = unzigzag(r.varint()?);
            if collect {
                // Differences are taken modulo 2^64 (any seq encodes).
                let s = prev.wrapping_add(d as u64);
                out.push(s);
                prev = s;
            }
        }
        Some(out)
    } else {
        None
    };
    let surface = if shape & SHAPE_SURFACE != 0 {
        Some(match r.varint()? {
            0 => SurfaceOp::Append,
            1 => SurfaceOp::Replace {
                start: r.varint()?,
                end: r.varint()?,
            },
            t => return Err(bad("surfaceOp", format!("tag {t} is not defined"))),
        })
    } else {
        None
    };
    let packing = match (shape >> SHAPE_PACKING_SHIFT) & 7 {
        0 => Packing::Auto,
        1 => Packing::AutoBatchStart,
        2 => Packing::Scalar,
        3 => Packing::RowStart,
        _ => Packing::RowMember,
    };
    let key_order = match (shape >> SHAPE_ORDER_SHIFT) & 3 {
        0 => KeyOrder::Canonical,
        1 => KeyOrder::SurfaceOpFirst,
        _ => {
            let count = r.varint()?;
            if count > 7 {
                return Err(bad("key order", format!("{count} keys")));
            }
            let mut keys = Vec::with_capacity(count as usize);
            for _ in 0..count {
                keys.push(match r.varint()? {
                    0 => EnvelopeKey::Type,
                    1 => EnvelopeKey::Seq,
                    2 => EnvelopeKey::Time,
                    3 => EnvelopeKey::Data,
                    4 => EnvelopeKey::SourceEventSeqs,
                    5 => EnvelopeKey::SurfaceOp,
                    6 => EnvelopeKey::Ignorable,
                    t => return Err(bad("key order", format!("key tag {t} is not defined"))),
                });
            }
            KeyOrder::Custom(keys)
        }
    };
    Ok((
        sources,
        surface,
        Layout {
            key_order,
            packing,
            batch_start: shape & SHAPE_BATCH_START != 0,
        },
    ))
}

/// Decodes the lean event record at the front of `bytes` given its session's previous
/// event (`prev`: seq and time, needed for tag 6), returning the session, the event and its
/// length.
pub(crate) fn decode(
    bytes: &[u8],
    prev: impl FnOnce(u64) -> Option<(Seq, i64)>,
) -> Result<(u64, EventRecord, usize), DecodeError> {
    let mut r = Reader::new(bytes);
    let head = read_head(&mut r)?;
    let (seq, time) = resolve(&head, prev)?;
    let (source_event_seqs, surface_op, layout) = read_tail(&mut r, head.shape, seq, true)?;
    let text = |b: &[u8], field| {
        String::from_utf8(b.to_vec()).map_err(|e| bad(field, format!("not UTF-8: {e}")))
    };
    Ok((
        head.session,
        EventRecord {
            seq,
            time,
            kind: text(head.kind, "type")?,
            data: text(head.data, "data")?,
            source_event_seqs,
            surface_op,
            ignorable: head.shape & SHAPE_IGNORABLE != 0,
            layout,
        },
        r.position(),
    ))
}

/// A lean event record's session, seq, time, `type` and `data`, the strings borrowed from
/// the frame payload (what a reader that wants only the text needs, without copying it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EventText<'a> {
    pub(crate) session: u64,
    pub(crate) seq: Seq,
    pub(crate) time: i64,
    pub(crate) kind: &'a str,
    pub(crate) data: &'a str,
}

/// [`decode`] without the copies: the same checks (header, tail, UTF-8 of `type` and
/// `data`, with the same errors), the strings borrowed from `bytes`. Returns the record's
/// text and length.
pub(crate) fn decode_text(
    bytes: &[u8],
    prev: impl FnOnce(u64) -> Option<(Seq, i64)>,
) -> Result<(EventText<'_>, usize), DecodeError> {
    let mut r = Reader::new(bytes);
    let head = read_head(&mut r)?;
    let (seq, time) = resolve(&head, prev)?;
    read_tail(&mut r, head.shape, seq, false)?;
    fn text<'a>(b: &'a [u8], field: &'static str) -> Result<&'a str, DecodeError> {
        // simdutf8 decides as `std::str::from_utf8` does; the latter words the error.
        simdutf8::basic::from_utf8(b)
            .or_else(|_| std::str::from_utf8(b))
            .map_err(|e| bad(field, format!("not UTF-8: {e}")))
    }
    Ok((
        EventText {
            session: head.session,
            seq,
            time,
            kind: text(head.kind, "type")?,
            data: text(head.data, "data")?,
        },
        r.position(),
    ))
}

/// The seq and time of a lean record, from its own fields (tag 5) or its session's previous
/// event record in the frame (tag 6; an error when there is none).
pub(crate) fn resolve(
    head: &LeanHead<'_>,
    prev: impl FnOnce(u64) -> Option<(Seq, i64)>,
) -> Result<(Seq, i64), DecodeError> {
    match head.seq {
        Some(seq) => Ok((seq, head.time)),
        None => {
            let (seq, time) = prev(head.session).ok_or_else(|| {
                bad(
                    "tag",
                    format!(
                        "an EventNext record of session number {} with no earlier event record of that session in the frame",
                        head.session
                    ),
                )
            })?;
            match (seq.checked_add(1), time.checked_add(head.time)) {
                (Some(s), Some(t)) => Ok((s, t)),
                _ => Err(bad("time", "the delta overflows")),
            }
        }
    }
}

/// Appends the tag-5 encoding of `event` of session `session` to `out`.
pub fn encode_start(out: &mut Vec<u8>, session: u64, event: &Event) {
    out.push(TAG_START);
    put_varint(out, session);
    put_varint(out, event.seq);
    put_varint(out, zigzag(event.time));
    let mut shape = 0u64;
    if event.ignorable {
        shape |= SHAPE_IGNORABLE;
    }
    if event.source_event_seqs.is_some() {
        shape |= SHAPE_SOURCES;
    }
    if event.surface_op.is_some() {
        shape |= SHAPE_SURFACE;
    }
    if event.layout.batch_start {
        shape |= SHAPE_BATCH_START;
    }
    let packing: u64 = match event.layout.packing {
        Packing::Auto => 0,
        Packing::AutoBatchStart => 1,
        Packing::Scalar => 2,
        Packing::RowStart => 3,
        Packing::RowMember => 4,
    };
    shape |= packing << SHAPE_PACKING_SHIFT;
    let order: u64 = match event.layout.key_order {
        KeyOrder::Canonical => 0,
        KeyOrder::SurfaceOpFirst => 1,
        KeyOrder::Custom(_) => 2,
    };
    shape |= order << SHAPE_ORDER_SHIFT;
    put_varint(out, shape);
    match type_code(&event.kind) {
        0 => {
            out.push(0);
            put_varint(out, event.kind.len() as u64);
            out.extend_from_slice(event.kind.as_bytes());
        }
        code => put_varint(out, code),
    }
    put_varint(out, event.data.len() as u64);
    out.extend_from_slice(event.data.as_bytes());
    if let Some(sources) = &event.source_event_seqs {
        put_varint(out, sources.len() as u64);
        let mut prev = event.seq;
        for &s in sources {
            put_varint(out, zigzag(s.wrapping_sub(prev) as i64));
            prev = s;
        }
    }
    match event.surface_op {
        None => {}
        Some(SurfaceOp::Append) => out.push(0),
        Some(SurfaceOp::Replace { start, end }) => {
            out.push(1);
            put_varint(out, start);
            put_varint(out, end);
        }
    }
    if let KeyOrder::Custom(keys) = &event.layout.key_order {
        put_varint(out, keys.len() as u64);
        for k in keys {
            out.push(match k {
                EnvelopeKey::Type => 0,
                EnvelopeKey::Seq => 1,
                EnvelopeKey::Time => 2,
                EnvelopeKey::Data => 3,
                EnvelopeKey::SourceEventSeqs => 4,
                EnvelopeKey::SurfaceOp => 5,
                EnvelopeKey::Ignorable => 6,
            });
        }
    }
}

/// True when a frame of `frame_bytes` that starts at `start` and holds records up to `end`
/// is cut before a record ending at `record_end` (the committer's frame plan: a frame is
/// filled to at most `frame_bytes`, a larger record goes alone).
pub(crate) fn cuts_before(start: usize, end: usize, record_end: usize, frame_bytes: usize) -> bool {
    end > start && record_end - start > frame_bytes
}

/// The committer's staging of event records into a batch: tracks where the batch's frames
/// will be cut ([`cuts_before`]) and each session's last event in the current frame, and
/// writes a session's later events of a frame as tag 6.
#[derive(Debug, Default)]
pub(crate) struct Chains {
    /// Where the current frame starts in the staged bytes.
    frame_start: usize,
    /// (session, seq, time) of each session's last event record in the current frame.
    last: Vec<(u64, Seq, i64)>,
}

impl Chains {
    /// Forgets everything (a new batch).
    pub(crate) fn clear(&mut self) {
        self.frame_start = 0;
        self.last.clear();
    }

    /// Appends `record` (as encoded by an appender: tag 5 for an event, any other record as
    /// it is) to `raw`; `event` is (session, seq, time) for an event record. A session's
    /// event that follows its previous one in the same frame is written as tag 6.
    pub(crate) fn push(
        &mut self,
        raw: &mut Vec<u8>,
        record: &[u8],
        event: Option<(u64, Seq, i64)>,
        frame_bytes: usize,
    ) {
        let end = raw.len();
        if let Some((session, seq, time)) = event
            && record.first() == Some(&TAG_START)
            && let Some(i) = self.last.iter().rposition(|l| l.0 == session)
            && self.last[i].1.checked_add(1) == Some(seq)
            && let Some(body) = start_body(record)
        {
            let delta = zigzag(time.wrapping_sub(self.last[i].2));
            let len = 1 + varint_len(session) + varint_len(delta) + body.len();
            if !cuts_before(self.frame_start, end, end + len, frame_bytes) {
                raw.push(TAG_NEXT);
                put_varint(raw, session);
                put_varint(raw, delta);
                raw.extend_from_slice(body);
                self.last[i] = (session, seq, time);
                return;
            }
        }
        if cuts_before(self.frame_start, end, end + record.len(), frame_bytes) {
            self.frame_start = end;
            self.last.clear();
        }
        raw.extend_from_slice(record);
        if let Some((session, seq, time)) = event
            && record.first() == Some(&TAG_START)
        {
            match self.last.iter().rposition(|l| l.0 == session) {
                Some(i) => self.last[i] = (session, seq, time),
                None => self.last.push((session, seq, time)),
            }
        }
    }
}

/// The bytes of a tag-5 record after its session, seq and time.
fn start_body(record: &[u8]) -> Option<&[u8]> {
    let mut r = Reader::new(record.get(1..)?);
    r.varint().ok()?;
    r.varint().ok()?;
    r.varint().ok()?;
    record.get(1 + r.position()..)
}

#[cfg(test)]
#[path = "envelope/tests.rs"]
mod tests;
