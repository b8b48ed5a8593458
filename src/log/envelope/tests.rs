//! Tests of the lean event records (`envelope.rs`).

use super::*;
use crate::log::peek::{Utf8, peek_event};
use crate::log::record::{FrameContext, Record};
use proptest::prelude::*;

fn event_strategy() -> impl Strategy<Value = (u64, Event)> {
    (
        1u64..4,
        prop::sample::select(vec![
            "assistant/chunk",
            "turn/start",
            "mode/set",
            "",
            "tool/result",
        ]),
        -3i64..3_000,
        "[a-z{}\":é]{0,40}",
        prop::option::of(prop::collection::vec(0u64..1 << 40, 0..5)),
        prop::option::of(prop_oneof![
            Just(SurfaceOp::Append),
            (0u64..1 << 33, 0u64..9).prop_map(|(start, end)| SurfaceOp::Replace { start, end }),
        ]),
        any::<bool>(),
        (0u8..5, 0u8..3, any::<bool>()),
    )
        .prop_map(
            |(session, kind, dt, data, sources, surface, ignorable, l)| {
                let mut e = Event::new(kind, 0, dt, data);
                e.source_event_seqs = sources;
                e.surface_op = surface;
                e.ignorable = ignorable;
                e.layout.packing = [
                    Packing::Auto,
                    Packing::AutoBatchStart,
                    Packing::Scalar,
                    Packing::RowStart,
                    Packing::RowMember,
                ][l.0 as usize];
                e.layout.key_order = match l.1 {
                    0 => KeyOrder::Canonical,
                    1 => KeyOrder::SurfaceOpFirst,
                    _ => KeyOrder::Custom(vec![EnvelopeKey::Data, EnvelopeKey::Type]),
                };
                e.layout.batch_start = l.2;
                (session, e)
            },
        )
}

/// Stages `records` as the committer does and cuts the batch as its plan does: the
/// frames' payloads.
/// A record's bytes and, for an event, (session, seq, time).
type Staged = (Vec<u8>, Option<(u64, Seq, i64)>);

fn stage(records: &[Staged], frame_bytes: usize) -> Vec<Vec<u8>> {
    let mut chains = Chains::default();
    let mut raw = Vec::new();
    let mut ends = Vec::new();
    for (bytes, head) in records {
        chains.push(&mut raw, bytes, *head, frame_bytes);
        ends.push(raw.len());
    }
    let (mut frames, mut start, mut end) = (Vec::new(), 0, 0);
    for record_end in ends {
        if cuts_before(start, end, record_end, frame_bytes) {
            frames.push(raw[start..end].to_vec());
            start = end;
        }
        end = record_end;
    }
    if end > start {
        frames.push(raw[start..end].to_vec());
    }
    frames
}

proptest! {
    #[test]
    fn staged_frames_decode_alone_to_the_events(
        events in prop::collection::vec(event_strategy(), 1..40),
        frame_bytes in 1usize..400,
        first_seq in prop_oneof![Just(0u64), Just(u64::MAX - 50), 0u64..1 << 50],
    ) {
        let mut next = std::collections::HashMap::new();
        let mut records = Vec::new();
        let mut expected = Vec::new();
        for (k, (session, mut e)) in events.into_iter().enumerate() {
            let seq = next.entry(session).or_insert(first_seq);
            e.seq = *seq;
            *seq = seq.saturating_add(1);
            if k % 7 == 3 {
                // Another record between events.
                let mut other = Vec::new();
                Record::DeleteSession { session: 9 }.encode_into(&mut other).unwrap();
                records.push((other, None));
            }
            records.push((Record::encode_event(session, &e).unwrap(), Some((session, e.seq, e.time))));
            expected.push((session, e));
        }
        let mut decoded = Vec::new();
        for frame in stage(&records, frame_bytes) {
            let all = Record::decode_all(&frame).unwrap();
            // The header reads agree with the full decode, record by record.
            let mut context = FrameContext::new();
            for (at, record) in &all {
                let bytes = &frame[*at as usize..];
                if let Record::Event { session, event } = record {
                    let head = peek_event(bytes, Utf8::Check).unwrap();
                    prop_assert_eq!(head.session, *session);
                    prop_assert_eq!(context.resolved(&head).unwrap(), (event.seq, event.time));
                    prop_assert_eq!(head.data_len, event.data.len());
                    // So does the borrowed read of the record's text.
                    let (text, text_len) = decode_text(bytes, |s| context.last(s)).unwrap();
                    context.note(*session, event.seq, event.time);
                    let len = all.iter().find(|(o, _)| o > at).map_or(frame.len(), |(o, _)| *o as usize) - *at as usize;
                    prop_assert_eq!(head.len, len);
                    prop_assert_eq!(text_len, len);
                    prop_assert_eq!(
                        (text.session, text.seq, text.time, text.kind, text.data),
                        (*session, event.seq, event.time, event.kind.as_str(), event.data.as_str())
                    );
                }
            }
            for (_, record) in all {
                if let Record::Event { session, event } = record {
                    decoded.push((session, Event::from(event)));
                }
            }
        }
        prop_assert_eq!(decoded, expected);
    }
}

#[test]
fn a_session_s_later_events_in_a_frame_are_event_next_records() {
    let events: Vec<Event> = (0..3)
        .map(|s| Event::new("step/start", 7 + s, 1_767_225_600_000 + 2 * s as i64, "{}"))
        .collect();
    let records: Vec<_> = events
        .iter()
        .map(|e| {
            (
                Record::encode_event(1, e).unwrap(),
                Some((1, e.seq, e.time)),
            )
        })
        .collect();
    let frames = stage(&records, 1 << 20);
    assert_eq!(frames.len(), 1);
    // EventStart: tag, session, seq 7, time, shape 0, code 46 (step/start), "{}".
    let start = [
        5, 1, 7, 0x80, 0xa0, 0xd5, 0xed, 0xee, 0x66, 0, 46, 2, b'{', b'}',
    ];
    // EventNext: tag, session, time delta +2 (zigzag 4), the same body.
    let next = [6, 1, 4, 0, 46, 2, b'{', b'}'];
    assert_eq!(frames[0], [&start[..], &next, &next].concat());
    // An EventNext record alone refers to a record that is not there.
    assert!(Record::decode(&next).is_err());
    assert!(Record::decode_all(&next).is_err());
    // A frame cut between them starts with an EventStart record again.
    let frames = stage(&records, start.len() + next.len());
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[1][0], TAG_START);
    assert_eq!(Record::decode_all(&frames[1]).unwrap().len(), 1);
}

#[test]
fn the_type_code_match_is_the_table() {
    for (i, name) in TYPE_CODES.iter().enumerate() {
        assert_eq!(type_code(name), i as u64 + 1, "{name}");
    }
    assert_eq!(type_code("mode/set"), 0);
    assert_eq!(type_code(""), 0);
}

/// The borrowed read refuses what the full decode refuses, with the same error.
#[test]
fn decode_text_checks_the_record_as_decode_does() {
    let e = Event::new("mode/set", 1, 5, r#"{"a":"é"}"#);
    let good = Record::encode_event(1, &e).unwrap();
    let (text, len) = decode_text(&good, |_| None).unwrap();
    assert_eq!(
        (text.kind, text.data, len),
        ("mode/set", e.data.as_str(), good.len())
    );
    let same = |bytes: &[u8]| {
        let full = decode(bytes, |_| None).map(|(_, _, len)| len);
        let text = decode_text(bytes, |_| None).map(|(_, len)| len);
        assert_eq!(
            full.map_err(|e| e.to_string()),
            text.map_err(|e| e.to_string())
        );
    };
    for cut in 0..good.len() {
        assert!(decode_text(&good[..cut], |_| None).is_err(), "cut at {cut}");
        same(&good[..cut]);
    }
    // `é` with its second byte replaced: not UTF-8.
    let mut bad = good.clone();
    let at = bad.len() - 3;
    assert_eq!(bad[at], 0xa9);
    bad[at] = b'(';
    let err = decode_text(&bad, |_| None).unwrap_err().to_string();
    assert!(err.contains("not UTF-8"), "{err}");
    same(&bad);
    // An EventNext record needs its session's previous event.
    let next = [6, 1, 4, 0, 46, 2, b'{', b'}'];
    same(&next);
    let (text, _) = decode_text(&next, |_| Some((7, 100))).unwrap();
    assert_eq!((text.seq, text.time, text.kind), (8, 102, "step/start"));
}

#[test]
fn malformed_lean_records_are_errors() {
    let e = Event::new("turn/start", 1, 5, r#"{"turn":1}"#);
    let good = Record::encode_event(1, &e).unwrap();
    for cut in 0..good.len() {
        assert!(Record::decode(&good[..cut]).is_err(), "cut at {cut}");
    }
    let mut shape = good.clone();
    shape[4] = 0x7f; // packing 7
    assert!(Record::decode(&shape).is_err());
    let mut code = good.clone();
    code[5] = 49; // no such type code
    assert!(Record::decode(&code).is_err());
    let overlong = [
        5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
    ];
    assert!(Record::decode(&overlong).is_err());
    // A huge source count over a short record allocates nothing.
    let mut e = e;
    e.source_event_seqs = Some(vec![]);
    let mut sources = Record::encode_event(1, &e).unwrap();
    sources.pop();
    sources.extend([0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert!(Record::decode(&sources).is_err());
}
