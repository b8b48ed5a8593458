//! Records: what a frame's payload holds, encoded with postcard.
//!
//! A frame payload is a concatenation of [`Record`]s, each a postcard-encoded value (postcard's
//! wire format is frozen and specified; see `format-spec.md` for the field-by-field layout).
//! Every event record names its session (by the store's internal session number) and its seq,
//! so the log alone is enough to rebuild the index.

use serde::{Deserialize, Serialize};

use crate::error::DecodeError;
use crate::event::{Event, Layout, Seq, SessionHeader, SurfaceOp};
use crate::log::peek::EventHead;

/// One entry of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// A session was created. Postcard variant 0.
    CreateSession {
        /// The store-internal session number (dense, from 1).
        session: u64,
        /// The session header.
        header: SessionHeader,
    },
    /// An event was appended to a session. Postcard variant 1.
    Event {
        /// The store-internal session number.
        session: u64,
        /// The event.
        event: EventRecord,
    },
    /// A session was forked: its first `seed_length` events are the parent's (zero-copy).
    /// Postcard variant 2.
    ForkSession {
        /// The child's session number.
        session: u64,
        /// The parent's session number.
        parent: u64,
        /// Number of inherited events (seqs `0..seed_length` resolve through the parent).
        seed_length: u64,
        /// The child's header.
        header: SessionHeader,
    },
    /// A session was deleted. Postcard variant 3.
    DeleteSession {
        /// The session number.
        session: u64,
    },
    /// The session just created or forked (by the record before this one, in the same
    /// operation) stores its events verbatim: the engine checks seq order, the envelope's
    /// numbers and the JSON of `data`, and applies no session semantics. Postcard variant 4;
    /// segment format version 3 and later.
    Verbatim {
        /// The session number.
        session: u64,
    },
}

/// The stored form of an [`Event`]: the same fields in a fixed order. (Reachable only through
/// its `From` conversions with [`Event`]; not part of the API.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(unnameable_types)]
pub struct EventRecord {
    /// `seq`.
    pub seq: Seq,
    /// `time` (ms).
    pub time: i64,
    /// `type`.
    pub kind: String,
    /// Exact JSON text of `data`.
    pub data: String,
    /// `sourceEventSeqs`.
    pub source_event_seqs: Option<Vec<Seq>>,
    /// `surfaceOp`.
    pub surface_op: Option<SurfaceOp>,
    /// `ignorable`.
    pub ignorable: bool,
    /// Key order and packing.
    pub layout: Layout,
}

/// `Record::Event` borrowing its event (serialises exactly as the owned variant).
struct EventRecordRef<'a> {
    session: u64,
    event: &'a Event,
}

/// [`EventRecord`]'s fields, borrowed, in the same order.
#[derive(Serialize)]
struct EventFieldsRef<'a> {
    seq: Seq,
    time: i64,
    kind: &'a str,
    data: &'a str,
    source_event_seqs: &'a Option<Vec<Seq>>,
    surface_op: &'a Option<SurfaceOp>,
    ignorable: bool,
    layout: &'a Layout,
}

impl Serialize for EventRecordRef<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStructVariant;
        let e = self.event;
        // Variant 1 of `Record` (see its declaration order).
        let mut v = serializer.serialize_struct_variant("Record", 1, "Event", 2)?;
        v.serialize_field("session", &self.session)?;
        v.serialize_field(
            "event",
            &EventFieldsRef {
                seq: e.seq,
                time: e.time,
                kind: &e.kind,
                data: &e.data,
                source_event_seqs: &e.source_event_seqs,
                surface_op: &e.surface_op,
                ignorable: e.ignorable,
                layout: &e.layout,
            },
        )?;
        v.end()
    }
}

impl From<Event> for EventRecord {
    fn from(e: Event) -> Self {
        EventRecord {
            seq: e.seq,
            time: e.time,
            kind: e.kind,
            data: e.data,
            source_event_seqs: e.source_event_seqs,
            surface_op: e.surface_op,
            ignorable: e.ignorable,
            layout: e.layout,
        }
    }
}

impl From<EventRecord> for Event {
    fn from(r: EventRecord) -> Self {
        Event {
            kind: r.kind,
            seq: r.seq,
            time: r.time,
            data: r.data,
            source_event_seqs: r.source_event_seqs,
            surface_op: r.surface_op,
            ignorable: r.ignorable,
            layout: r.layout,
        }
    }
}

/// What decoding a frame payload's records one after another knows of the records before:
/// each session's last event (seq and time), which an `EventNext` record (tag 6,
/// format-spec.md §4.2) continues. A payload decodes alone from its first byte with a fresh
/// context.
#[derive(Debug, Clone, Default)]
pub struct FrameContext {
    last: Vec<(u64, Seq, i64)>,
}

impl FrameContext {
    /// A context knowing nothing (the start of a frame payload).
    pub fn new() -> Self {
        FrameContext::default()
    }

    /// A context knowing only that session `session`'s last event was `seq` at `time` (a
    /// reader resuming a walk of one session's records).
    pub fn with(session: u64, seq: Seq, time: i64) -> Self {
        FrameContext {
            last: vec![(session, seq, time)],
        }
    }

    /// The seq and time of session `session`'s last event so far.
    pub fn last(&self, session: u64) -> Option<(Seq, i64)> {
        self.last
            .iter()
            .rev()
            .find(|l| l.0 == session)
            .map(|l| (l.1, l.2))
    }

    /// Notes event `seq` at `time` of session `session` as its last.
    pub fn note(&mut self, session: u64, seq: Seq, time: i64) {
        match self.last.iter().rposition(|l| l.0 == session) {
            Some(i) => self.last[i] = (session, seq, time),
            None => self.last.push((session, seq, time)),
        }
    }

    /// The seq and time of the event record `head` read (its own for a record that carries
    /// them, else its session's last plus one and plus the delta); notes nothing.
    pub(crate) fn resolved(&self, head: &EventHead) -> Result<(Seq, i64), DecodeError> {
        if !head.next {
            return Ok((head.seq, head.time));
        }
        let (seq, time) = self.last(head.session).ok_or_else(|| DecodeError::Field {
            field: "tag",
            detail: format!(
                "an EventNext record of session number {} with no earlier event record of that session in the frame",
                head.session
            ),
        })?;
        match (seq.checked_add(1), time.checked_add(head.time)) {
            (Some(s), Some(t)) => Ok((s, t)),
            _ => Err(DecodeError::Field {
                field: "time",
                detail: "the delta overflows".into(),
            }),
        }
    }
}

impl Record {
    /// Appends the record's encoding to `out` (postcard's; an `Event` as tag 1, the
    /// encoding of segment versions 1-6).
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), DecodeError> {
        let bytes = postcard::to_allocvec(self).map_err(DecodeError::Record)?;
        out.extend_from_slice(&bytes);
        Ok(())
    }

    /// The encoding of `Record::Event { session, event }` as an `EventStart` record (tag 5,
    /// format-spec.md §4.2), which the committer may turn into an `EventNext` record when it
    /// follows its session's previous event in a frame.
    pub fn encode_event(session: u64, event: &Event) -> Result<Vec<u8>, DecodeError> {
        let mut out = Vec::new();
        Record::encode_event_into(&mut out, session, event);
        Ok(out)
    }

    /// [`Record::encode_event`] into `out` (cleared first), reusing its capacity.
    pub fn encode_event_into(out: &mut Vec<u8>, session: u64, event: &Event) {
        out.clear();
        // Sized for the strings plus the varints around them, so the buffer never regrows.
        out.reserve(event.data.len() + event.kind.len() + 48);
        super::envelope::encode_start(out, session, event);
    }

    /// The postcard encoding of `Record::Event { session, event }` (tag 1), as segment
    /// versions 1-6 hold it: the same bytes as [`Record::encode_into`] on the owned record.
    pub fn encode_event_v1(session: u64, event: &Event) -> Result<Vec<u8>, DecodeError> {
        let capacity = event.data.len() + event.kind.len() + 64;
        postcard::to_extend(
            &EventRecordRef { session, event },
            Vec::with_capacity(capacity),
        )
        .map_err(DecodeError::Record)
    }

    /// True when the record at the front of `bytes` is a lean event record (tags 5 and 6,
    /// segment versions 7 and 8).
    pub fn is_lean(bytes: &[u8]) -> bool {
        matches!(
            bytes.first(),
            Some(&super::envelope::TAG_START | &super::envelope::TAG_NEXT)
        )
    }

    /// Decodes one record from the front of `bytes`, returning it and the rest. An
    /// `EventNext` record needs the records before it: decoded alone, it is an error (see
    /// [`Record::decode_in`]).
    pub fn decode(bytes: &[u8]) -> Result<(Record, &[u8]), DecodeError> {
        Record::decode_in(bytes, &mut FrameContext::new())
    }

    /// Decodes one record from the front of `bytes`, the records of its frame payload before
    /// it being known to `context` (which learns this one), returning it and the rest.
    pub fn decode_in<'a>(
        bytes: &'a [u8],
        context: &mut FrameContext,
    ) -> Result<(Record, &'a [u8]), DecodeError> {
        if Record::is_lean(bytes) {
            let (session, event, len) =
                super::envelope::decode(bytes, |session| context.last(session))?;
            context.note(session, event.seq, event.time);
            return Ok((Record::Event { session, event }, &bytes[len..]));
        }
        let (record, rest) = postcard::take_from_bytes(bytes).map_err(DecodeError::Record)?;
        if let Record::Event { session, event } = &record {
            context.note(*session, event.seq, event.time);
        }
        Ok((record, rest))
    }

    /// Decodes every record of a frame payload, with each record's byte offset in the payload.
    pub fn decode_all(mut bytes: &[u8]) -> Result<Vec<(u32, Record)>, DecodeError> {
        let total = bytes.len();
        let mut out = Vec::new();
        let mut context = FrameContext::new();
        while !bytes.is_empty() {
            let offset = (total - bytes.len()) as u32;
            let (record, rest) = Record::decode_in(bytes, &mut context)?;
            out.push((offset, record));
            bytes = rest;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EnvelopeKey, KeyOrder, Packing};

    #[test]
    fn borrowed_event_encoding_matches_the_owned_record() {
        let mut events = vec![
            Event::new("assistant/chunk", 7, 1_700_000_000_000, r#"{"a":"\u00e9"}"#),
            Event::new("user/message", u64::MAX >> 11, -5, "{}"),
        ];
        let mut e = Event::new("tool/result", 3, 0, r#"{"x":[1,2.5,null]}"#);
        e.source_event_seqs = Some(vec![0, 1, 2]);
        e.surface_op = Some(SurfaceOp::Append);
        e.ignorable = true;
        e.layout.key_order = KeyOrder::Custom(vec![EnvelopeKey::Data, EnvelopeKey::Seq]);
        e.layout.packing = Packing::RowStart;
        e.layout.batch_start = true;
        events.push(e);
        for event in events {
            let mut owned = Vec::new();
            Record::Event {
                session: 42,
                event: EventRecord::from(event.clone()),
            }
            .encode_into(&mut owned)
            .unwrap();
            assert_eq!(Record::encode_event_v1(42, &event).unwrap(), owned);
        }
    }
}
