//! Header-only reads of records: an event record's session, seq and length without copying
//! or UTF-8-checking its strings (what a walk past the records it does not want needs).
//!
//! The bytes are postcard's (format-spec.md §4): `Record::Event` is variant index 1 (one
//! byte), then its fields in order. [`peek_event`] reads them with borrowed, unchecked
//! strings; any other record (or bytes it cannot read) gives `None`, and the caller decodes
//! the record in full with [`super::record::Record::decode`].

use serde::Deserialize;
use serde::de::{Deserializer, SeqAccess, Visitor};

use crate::event::{Layout, Seq, SurfaceOp};

/// What [`peek_event`] learns about an event record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EventHead {
    /// The store-internal session number.
    pub(crate) session: u64,
    /// The event's seq (0 when `next`).
    pub(crate) seq: Seq,
    /// The event's `time` (when `next`: the delta from its session's previous event).
    pub(crate) time: i64,
    /// An `EventNext` record (format-spec.md §4.2): its seq and time follow from its
    /// session's previous event record in the frame ([`super::record::FrameContext`]).
    pub(crate) next: bool,
    /// A lean event record (tags 5 and 6, segment versions 7 and 8).
    pub(crate) lean: bool,
    /// Bytes of the event's `data`.
    pub(crate) data_len: usize,
    /// The record's length in bytes.
    pub(crate) len: usize,
}

/// Whether [`peek_event`] checks that the type and data are UTF-8, as a full decode does
/// (recovery, which must refuse what a full decode refuses), or not (a walk past records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Utf8 {
    /// Checked: `None` for a record whose strings are not UTF-8.
    Check,
    /// Not checked.
    Skip,
}

/// A string or byte string, borrowed and not checked: its bytes.
struct Skipped<'de>(&'de [u8]);

impl<'de: 'a, 'a> Deserialize<'de> for Skipped<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Skipped<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("borrowed bytes")
            }
            fn visit_borrowed_bytes<E>(self, b: &'de [u8]) -> Result<Skipped<'a>, E> {
                Ok(Skipped(b))
            }
        }
        // postcard encodes a string as a byte string: a varint length, then the bytes.
        d.deserialize_bytes(V(std::marker::PhantomData))
    }
}

/// A sequence of seqs, stepped over without collecting it.
struct SkippedSeqs;

impl<'de> Deserialize<'de> for SkippedSeqs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SkippedSeqs;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sequence of seqs")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SkippedSeqs, A::Error> {
                while seq.next_element::<Seq>()?.is_some() {}
                Ok(SkippedSeqs)
            }
        }
        d.deserialize_seq(V)
    }
}

/// `Record::Event`'s fields after the variant index, as `EventRecord` lays them out.
#[derive(Deserialize)]
#[allow(dead_code)]
struct EventFields<'a> {
    session: u64,
    seq: Seq,
    time: i64,
    #[serde(borrow)]
    kind: Skipped<'a>,
    #[serde(borrow)]
    data: Skipped<'a>,
    source_event_seqs: Option<SkippedSeqs>,
    surface_op: Option<SurfaceOp>,
    ignorable: bool,
    layout: Layout,
}

/// Postcard's variant index of `Record::Event`.
const EVENT_VARIANT: u8 = 1;

/// True when `bytes` are UTF-8, as `std::str::from_utf8` decides: ASCII (nearly every
/// string) checked a word at a time, anything else by simdutf8 (SIMD, same verdicts).
fn is_utf8(bytes: &[u8]) -> bool {
    bytes.is_ascii() || simdutf8::basic::from_utf8(bytes).is_ok()
}

/// The session, seq and length of the event record at the front of `bytes`; `None` when the
/// front is another kind of record or cannot be read this way (decode it in full then).
pub(crate) fn peek_event(bytes: &[u8], utf8: Utf8) -> Option<EventHead> {
    let (&variant, rest) = bytes.split_first()?;
    if super::record::Record::is_lean(bytes) {
        return peek_lean(bytes, utf8);
    }
    if variant != EVENT_VARIANT {
        return None;
    }
    let (fields, after) = postcard::take_from_bytes::<EventFields<'_>>(rest).ok()?;
    if utf8 == Utf8::Check && !(is_utf8(fields.kind.0) && is_utf8(fields.data.0)) {
        return None;
    }
    Some(EventHead {
        session: fields.session,
        seq: fields.seq,
        time: fields.time,
        data_len: fields.data.0.len(),
        len: bytes.len() - after.len(),
        next: false,
        lean: false,
    })
}

/// [`peek_event`] of a lean event record (tag 5 or 6).
fn peek_lean(bytes: &[u8], utf8: Utf8) -> Option<EventHead> {
    use super::envelope::{Reader, read_head, read_tail};
    let mut r = Reader::new(bytes);
    let head = read_head(&mut r).ok()?;
    if utf8 == Utf8::Check && !(is_utf8(head.kind) && is_utf8(head.data)) {
        return None;
    }
    // The source seqs are deltas from the event's own seq: their sum is not checked here
    // for a tag-6 record (its seq is not known yet); a full decode checks it.
    read_tail(&mut r, head.shape, head.seq.unwrap_or(0), false).ok()?;
    Some(EventHead {
        session: head.session,
        seq: head.seq.unwrap_or(0),
        time: head.time,
        data_len: head.data.len(),
        len: r.position(),
        next: head.seq.is_none(),
        lean: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EnvelopeKey, Event, KeyOrder, Packing, SessionHeader};
    use crate::log::record::Record;

    #[test]
    fn the_utf8_check_gives_std_verdicts() {
        let long = "é".repeat(40);
        let mut cases: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"plain ascii".to_vec(),
            "x".repeat(200).into_bytes(),
            long.clone().into_bytes(),
            vec![0xc0, 0x80],             // overlong
            vec![0xed, 0xa0, 0x80],       // a surrogate
            vec![0xf4, 0x90, 0x80, 0x80], // past U+10FFFF
            vec![0xe2, 0x82],             // cut short
            vec![0xff],
        ];
        let mut cut = long.into_bytes();
        cut.truncate(79);
        cases.push(cut);
        let mut late = "y".repeat(100).into_bytes();
        late.push(0x80);
        cases.push(late);
        for case in cases {
            assert_eq!(
                is_utf8(&case),
                std::str::from_utf8(&case).is_ok(),
                "{case:?}"
            );
        }
    }

    #[test]
    fn agrees_with_the_full_decode() {
        let mut events = vec![
            Event::new("assistant/chunk", 7, 1_700_000_000_000, r#"{"a":"\u00e9"}"#),
            Event::new("user/message", u64::MAX >> 11, -5, "{}"),
            Event::new("x", 300, 0, "y".repeat(100_000)),
        ];
        let mut e = Event::new("tool/result", 3, 0, r#"{"x":[1,2.5,null]}"#);
        e.source_event_seqs = Some(vec![0, 1, 2, 1 << 40]);
        e.surface_op = Some(SurfaceOp::Replace { start: 1, end: 2 });
        e.ignorable = true;
        e.layout.key_order = KeyOrder::Custom(vec![EnvelopeKey::Data, EnvelopeKey::Seq]);
        e.layout.packing = Packing::RowMember;
        e.layout.batch_start = true;
        events.push(e);
        let mut payload = Vec::new();
        for (i, event) in events.iter().enumerate() {
            payload.extend(Record::encode_event(40 + i as u64, event).unwrap());
        }
        Record::DeleteSession { session: 9 }
            .encode_into(&mut payload)
            .unwrap();
        let mut at = 0;
        for (i, event) in events.iter().enumerate() {
            let head = peek_event(&payload[at..], Utf8::Check).unwrap();
            assert_eq!(peek_event(&payload[at..], Utf8::Skip), Some(head));
            let (record, rest) = Record::decode(&payload[at..]).unwrap();
            assert_eq!(head.len, payload.len() - at - rest.len());
            assert_eq!((head.session, head.seq), (40 + i as u64, event.seq));
            assert_eq!((head.time, head.data_len), (event.time, event.data.len()));
            assert!(matches!(record, Record::Event { .. }));
            at += head.len;
        }
        // Not an event record, or cut short: the caller decodes in full.
        assert_eq!(peek_event(&payload[at..], Utf8::Skip), None);
        let header = SessionHeader::new("s", 0);
        let mut create = Vec::new();
        Record::CreateSession { session: 1, header }
            .encode_into(&mut create)
            .unwrap();
        assert_eq!(peek_event(&create, Utf8::Skip), None);
        let one = Record::encode_event(1, &events[0]).unwrap();
        assert_eq!(peek_event(&one[..one.len() - 1], Utf8::Skip), None);
        // Data that is not UTF-8: a full decode refuses it, and so does a checked peek.
        let mut bad = Record::encode_event(1, &Event::new("k", 0, 0, "{}")).unwrap();
        let at = bad.iter().position(|&b| b == b'{').unwrap();
        bad[at] = 0xff;
        assert!(Record::decode(&bad).is_err());
        assert_eq!(peek_event(&bad, Utf8::Check), None);
        assert!(peek_event(&bad, Utf8::Skip).is_some());
    }
}
