//! Records: what a frame's payload holds, encoded with postcard.
//!
//! A frame payload is a concatenation of [`Record`]s, each a postcard-encoded value (postcard's
//! wire format is frozen and specified; see `format-spec.md` for the field-by-field layout).
//! Every event record names its session (by the store's internal session number) and its seq,
//! so the log alone is enough to rebuild the index.

use serde::{Deserialize, Serialize};

use crate::error::DecodeError;
use crate::event::{Event, Layout, Seq, SessionHeader, SurfaceOp};

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

impl Record {
    /// Appends the record's encoding to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), DecodeError> {
        let bytes = postcard::to_allocvec(self).map_err(DecodeError::Record)?;
        out.extend_from_slice(&bytes);
        Ok(())
    }

    /// The encoding of `Record::Event { session, event }`, without copying the event first:
    /// the same bytes as [`Record::encode_into`] on the owned record.
    pub fn encode_event(session: u64, event: &Event) -> Result<Vec<u8>, DecodeError> {
        // Sized for the strings plus the varints around them, so the buffer never regrows.
        let capacity = event.data.len() + event.kind.len() + 64;
        postcard::to_extend(
            &EventRecordRef { session, event },
            Vec::with_capacity(capacity),
        )
        .map_err(DecodeError::Record)
    }

    /// Decodes one record from the front of `bytes`, returning it and the rest.
    pub fn decode(bytes: &[u8]) -> Result<(Record, &[u8]), DecodeError> {
        postcard::take_from_bytes(bytes).map_err(DecodeError::Record)
    }

    /// Decodes every record of a frame payload, with each record's byte offset in the payload.
    pub fn decode_all(mut bytes: &[u8]) -> Result<Vec<(u32, Record)>, DecodeError> {
        let total = bytes.len();
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let offset = (total - bytes.len()) as u32;
            let (record, rest) = Record::decode(bytes)?;
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
            assert_eq!(Record::encode_event(42, &event).unwrap(), owned);
        }
    }
}
