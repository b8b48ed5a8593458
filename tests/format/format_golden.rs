//! Golden bytes for every log record variant (format-spec §4): a change to a struct, a field
//! order or a serde attribute that would change what is on disk fails here, whatever the
//! round-trip tests say. Each case encodes a value with every optional field exercised,
//! compares with the bytes written down when the format was fixed, and decodes them back.

use sessionlog::event::{EnvelopeKey, Event, KeyOrder, Layout, Packing, SessionHeader, SurfaceOp};
use sessionlog::log::record::{EventRecord, Record};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Encodes `record`, checks it against `golden`, and decodes `golden` back to `record`.
fn check(record: Record, golden: &str) {
    let mut bytes = Vec::new();
    record.encode_into(&mut bytes).expect("encode");
    assert_eq!(
        hex(&bytes),
        hex(&unhex(golden)),
        "the encoding of {record:?} changed: this is an on-disk format change (bump the segment \
         format version and say so in format-spec.md)"
    );
    let (decoded, rest) = Record::decode(&bytes).expect("decode");
    assert!(rest.is_empty());
    assert_eq!(decoded, record);
}

fn full_header(id: &str) -> SessionHeader {
    SessionHeader {
        version: 0,
        id: id.into(),
        created_at: 1_767_225_600_000,
        cwd: Some("/w".into()),
        parent_session: Some("p".into()),
        seed_length: Some(3),
        origin: Some("subagent".into()),
        delegation_depth: Some(2),
        agent_preset: Some("a".into()),
        owner: Some("o".into()),
        extra: vec![("k".into(), "[1]".into())],
    }
}

#[test]
fn create_session_record() {
    check(
        Record::CreateSession {
            session: 1,
            header: SessionHeader::new("s1", 5),
        },
        "00 01 00 02 7331 05 00 00 00 00 00 00 00 00",
    );
    check(
        Record::CreateSession {
            session: 300,
            header: full_header("s"),
        },
        "00 ac02 00 01 73 80d0eab6b733 01 02 2f77 01 01 70 01 03 01 08 7375626167656e74 01 02 \
         01 01 61 01 01 6f 01 01 6b 03 5b315d",
    );
}

#[test]
fn event_record_plain_and_with_every_field() {
    check(
        Record::Event {
            session: 1,
            event: EventRecord::from(Event::new(
                "turn/start",
                0,
                1_767_225_600_000,
                r#"{"turn":1}"#,
            )),
        },
        "01 01 00 80a0d5edee66 0a 7475726e2f7374617274 0a 7b227475726e223a317d 00 00 00 00 00 00",
    );
    let mut e = Event::new("user/message", 7, -3, r#"{"x":1}"#)
        .with_surface_op(SurfaceOp::Replace { start: 1, end: 4 })
        .with_sources(vec![2, 3, 300]);
    e.ignorable = true;
    e.layout = Layout {
        key_order: KeyOrder::Custom(vec![
            EnvelopeKey::Type,
            EnvelopeKey::Seq,
            EnvelopeKey::Time,
            EnvelopeKey::Data,
            EnvelopeKey::SurfaceOp,
            EnvelopeKey::SourceEventSeqs,
            EnvelopeKey::Ignorable,
        ]),
        packing: Packing::RowMember,
        batch_start: true,
    };
    check(
        Record::Event {
            session: 2,
            event: EventRecord::from(e),
        },
        "01 02 07 05 0c 757365722f6d657373616765 07 7b2278223a317d 01 03 02 03 ac02 01 01 01 04 \
         01 02 07 00 01 02 03 05 04 06 04 01",
    );
    let mut e = Event::new("assistant/chunk", 1, 0, "{}").with_surface_op(SurfaceOp::Append);
    e.layout.key_order = KeyOrder::SurfaceOpFirst;
    e.layout.packing = Packing::AutoBatchStart;
    check(
        Record::Event {
            session: 1,
            event: EventRecord::from(e),
        },
        "01 01 01 00 0f 617373697374616e742f6368756e6b 02 7b7d 00 01 00 00 01 01 00",
    );
}

#[test]
fn fork_and_delete_records() {
    check(
        Record::ForkSession {
            session: 4,
            parent: 1,
            seed_length: 12,
            header: SessionHeader::new("f", 9),
        },
        "02 04 01 0c 00 01 66 09 00 00 00 00 00 00 00 00",
    );
    check(Record::DeleteSession { session: 4 }, "03 04");
    check(Record::Verbatim { session: 4 }, "04 04");
}

/// Golden bytes of the index's derived values whose layout is ours (format-spec §5): a session
/// row and a postcard `SessionState` checkpoint. A field reordered or retyped in the structs
/// would otherwise make old checkpoints decode into wrong values instead of failing.
#[test]
fn session_row_and_state_checkpoint() {
    use sessionlog::index::SessionRow;
    use sessionlog::session::{InvariantMode, SessionState};

    let mut row = SessionRow::new(7, full_header("r"));
    row.next_seq = 10;
    row.data_bytes = 1234;
    row.last_time = -5;
    row.parent = 2;
    row.seed_len = 3;
    row.surface_covered = 10;
    row.surface_head = 1;
    row.surface_tail = 9;
    row.surface_len = 4;
    row.replace_generation = 1;
    row.children = 2;
    row.flags = 1;
    assert_eq!(
        hex(&row.encode()),
        hex(&unhex(ROW_GOLDEN)),
        "session row layout changed"
    );
    assert_eq!(SessionRow::decode(&row.encode()).unwrap(), row);
    // Bit 1 is the verbatim flag; a bit this version does not define is damage.
    let mut verbatim = row.clone();
    verbatim.flags = 2;
    assert!(
        SessionRow::decode(&verbatim.encode())
            .unwrap()
            .is_verbatim()
    );
    let mut unknown = row.clone();
    unknown.flags = 4;
    assert!(SessionRow::decode(&unknown.encode()).is_err());

    let events: Vec<Event> = (0..10)
        .map(|s| sessionlog_bench::workload::synthetic_event(s, 3))
        .collect();
    let state = SessionState::rebuild(&events, InvariantMode::Off).unwrap();
    let bytes = state.to_bytes().unwrap();
    assert_eq!(
        hex(&bytes),
        hex(&unhex(STATE_GOLDEN)),
        "SessionState encoding changed"
    );
    assert_eq!(SessionState::from_bytes(&bytes).unwrap(), state);
}

const ROW_GOLDEN: &str = "07000000000000000a00000000000000d204000000000000fbffffffffffffff020000000000000003000000000000000a000000000000000100000000000000090000000000000004000000000000000100000000000000020000000100000000017280d0eab6b73301022f77010170010301087375626167656e74010201016101016f01016b035b315d";
const STATE_GOLDEN: &str = "0a0201060000010901046e756c6c046e756c6c01046e756c6c046e756c6c0301020422633322042263382201046e756c6c046e756c6c01046e756c6c046e756c6c000109fea0d5edee66010900010131013100000005";

#[test]
fn lean_event_records_with_every_field() {
    // format-spec §4.2: an EventStart record with every optional field, then an EventNext
    // record of the same session with a type the code table does not list.
    let mut e = Event::new("user/message", 7, -3, r#"{"x":1}"#)
        .with_surface_op(SurfaceOp::Replace { start: 1, end: 4 })
        .with_sources(vec![2, 3, 300]);
    e.ignorable = true;
    e.layout = Layout {
        key_order: KeyOrder::Custom(vec![
            EnvelopeKey::Type,
            EnvelopeKey::Seq,
            EnvelopeKey::Time,
            EnvelopeKey::Data,
            EnvelopeKey::SurfaceOp,
            EnvelopeKey::SourceEventSeqs,
            EnvelopeKey::Ignorable,
        ]),
        packing: Packing::RowMember,
        batch_start: true,
    };
    // tag 5, session 2, seq 7, time zigzag(-3); shape 0x14f (ignorable, sources, surfaceOp,
    // batch start, row member, custom order); type code 42; data; sources 2, 3, 300 as
    // zigzag deltas -5, +1, +297 from seq 7; replace 1..4; the custom order's 7 keys.
    let start = unhex(
        "05 02 07 05 cf02 2a 07 7b2278223a317d 03 09 02 d204 01 01 04 07 00 01 02 03 05 04 06",
    );
    assert_eq!(
        hex(&Record::encode_event(2, &e).unwrap()),
        hex(&start),
        "the EventStart encoding changed: this is an on-disk format change"
    );
    // tag 6, session 2, time delta zigzag(13) = 26; shape 0; type code 0 and the string;
    // data `{}`: seq 8, time 10.
    let next = unhex("06 02 1a 00 00 08 6d6f64652f736574 02 7b7d");
    let payload = [start.clone(), next].concat();
    let records = Record::decode_all(&payload).unwrap();
    let events: Vec<(u32, Record)> = records;
    assert_eq!(
        events,
        vec![
            (
                0,
                Record::Event {
                    session: 2,
                    event: EventRecord::from(e)
                }
            ),
            (
                start.len() as u32,
                Record::Event {
                    session: 2,
                    event: EventRecord::from(Event::new("mode/set", 8, 10, "{}"))
                }
            ),
        ]
    );
}
