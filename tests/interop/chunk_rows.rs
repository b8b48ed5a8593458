//! Packed chunk rows: dsh's packing vectors (persistence §9.4), the decoder's validation, and
//! the round trip `decode(pack(batch)) == batch`.

use proptest::prelude::*;
use sessionlog::event::{Event, Packing, Seq, SurfaceOp};
use sessionlog::interop::chunk_rows::{
    ChunkKind, ChunkRowError, Codec, MAX_PACKED_DATA_BYTES, PackPolicy, Record,
    decode_jsonl_record, decode_row, pack,
};
use sessionlog::json::{JsonLimits, JsonValue, parse, write_js_string};

fn js(s: &str) -> String {
    let mut out = String::new();
    write_js_string(&mut out, s);
    out
}

fn text(seq: Seq, time: i64, t: &str) -> Event {
    delta("text-delta", 1, 1, 0, seq, time, t)
}

fn delta(kind: &str, turn: u32, step: u32, index: u32, seq: Seq, time: i64, t: &str) -> Event {
    Event::new(
        "assistant/chunk",
        seq,
        time,
        format!(
            r#"{{"turn":{turn},"step":{step},"chunk":{{"type":"{kind}","index":{index},"text":{}}}}}"#,
            js(t)
        ),
    )
}

fn tool(seq: Seq, time: i64, id: &str, name: Option<&str>, args: &str) -> Event {
    let name = name
        .map(|n| format!(r#","name":{}"#, js(n)))
        .unwrap_or_default();
    Event::new(
        "assistant/chunk",
        seq,
        time,
        format!(
            r#"{{"turn":1,"step":1,"chunk":{{"type":"tool-call-delta","index":1,"id":{}{name},"argumentsDelta":{}}}}}"#,
            js(id),
            js(args)
        ),
    )
}

fn plain(kind: &str, seq: Seq, time: i64, data: &str) -> Event {
    Event::new(kind, seq, time, data)
}

/// Expands records back into events (what a reader does).
fn decode_all(records: &[Record<'_>], codec: Codec) -> Vec<Event> {
    let mut out = Vec::new();
    for r in records {
        match r {
            Record::Event(e) => out.push((*e).clone()),
            Record::Row(row) => {
                let v = parse(&row.to_jsonl_line(), &JsonLimits::default()).unwrap();
                let from_line = decode_jsonl_record(row.kind, v.as_object().unwrap()).unwrap();
                let from_parts =
                    decode_row(row.kind, row.seq0 as i64, row.time0, &row.data, codec).unwrap();
                assert_eq!(from_line, from_parts);
                assert_eq!(from_parts.len(), row.members);
                out.extend(from_parts);
            }
        }
    }
    out
}

fn without_packing(events: &[Event]) -> Vec<Event> {
    events
        .iter()
        .cloned()
        .map(|mut e| {
            e.layout.packing = Packing::Auto;
            e
        })
        .collect()
}

fn shape(records: &[Record<'_>]) -> Vec<String> {
    records
        .iter()
        .map(|r| match r {
            Record::Event(e) => e.kind.clone(),
            Record::Row(row) => format!("{}x{}", row.tag(), row.members),
        })
        .collect()
}

#[test]
fn jsonl_chunk_run_log_packs_as_dsh() {
    let mut events = vec![
        plain("turn/start", 0, 1, r#"{"turn":1}"#),
        plain("step/start", 1, 2, r#"{"turn":1,"step":1}"#),
    ];
    for k in 0..5 {
        events.push(text(2 + k, 3 + k as i64, &format!("t{k}")));
    }
    events.push(
        plain(
            "assistant/message",
            7,
            8,
            r#"{"turn":1,"step":1,"message":{}}"#,
        )
        .with_surface_op(SurfaceOp::Append)
        .with_sources(vec![2, 3, 4, 5, 6]),
    );
    events.push(plain("step/end", 8, 9, r#"{"turn":1,"step":1}"#));
    events.push(plain(
        "turn/end",
        9,
        10,
        r#"{"turn":1,"reason":{"kind":"completed"}}"#,
    ));
    let records = pack(&events, Codec::Jsonl, PackPolicy::Maximal);
    assert_eq!(
        shape(&records),
        [
            "turn/start",
            "step/start",
            "text-chunksx5",
            "assistant/message",
            "step/end",
            "turn/end"
        ]
    );
    let Record::Row(row) = &records[2] else {
        panic!()
    };
    assert_eq!(
        row.to_jsonl_line(),
        r#"{"type":"text-chunks","seq0":2,"time0":3,"data":{"turn":1,"step":1,"index":0,"dt":[1,1,1,1],"texts":["t0","t1","t2","t3","t4"]}}"#
    );
    let decoded = decode_all(&records, Codec::Jsonl);
    assert_eq!(without_packing(&decoded), events);
    assert_eq!(decoded[2].layout.packing, Packing::RowStart);
    assert_eq!(decoded[3].layout.packing, Packing::RowMember);
    assert_eq!(decoded[7].layout.packing, Packing::Auto);
}

#[test]
fn sqlite_decode_vector() {
    let data = r#"{"turn":2,"step":3,"index":1,"dt":[2,-1],"texts":["a","b","c"]}"#;
    let events = decode_row(ChunkKind::Text, 7, 90, data, Codec::Sqlite).unwrap();
    let st: Vec<(Seq, i64)> = events.iter().map(|e| (e.seq, e.time)).collect();
    assert_eq!(st, [(7, 90), (8, 92), (9, 91)]);
    assert_eq!(
        events[2].data,
        r#"{"turn":2,"step":3,"chunk":{"type":"text-delta","index":1,"text":"c"}}"#
    );
    assert!(
        events
            .iter()
            .all(|e| e.kind == "assistant/chunk" && e.surface_op.is_none())
    );
}

fn chunks(n: usize, size: usize) -> Vec<Event> {
    (0..n)
        .map(|k| text(k as Seq, 1000 + k as i64, &"x".repeat(size)))
        .collect()
}

fn rows(records: &[Record<'_>]) -> Vec<usize> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Row(row) => Some(row.members),
            Record::Event(_) => None,
        })
        .collect()
}

#[test]
fn sqlite_pack_limits() {
    let c = chunks(100, 1);
    let r = pack(&c, Codec::Sqlite, PackPolicy::Maximal);
    assert_eq!(r.len(), 1);
    let c = chunks(1027, 1);
    let r = pack(&c, Codec::Sqlite, PackPolicy::Maximal);
    assert_eq!(rows(&r), [1024, 3]);
    assert_eq!(r.len(), 2);
    // The JSONL codec has no cap.
    assert_eq!(rows(&pack(&c, Codec::Jsonl, PackPolicy::Maximal)), [1027]);

    let c = chunks(4, 300_000);
    let r = pack(&c, Codec::Sqlite, PackPolicy::Maximal);
    assert_eq!(r.len(), 2);
    assert_eq!(rows(&r), [3]);
    let c = chunks(3, 400_000);
    let r = pack(&c, Codec::Sqlite, PackPolicy::Maximal);
    assert_eq!(r.len(), 3);
    assert!(rows(&r).is_empty());
    let c = chunks(10, 150_000);
    let r = pack(&c, Codec::Sqlite, PackPolicy::Maximal);
    assert_eq!(rows(&r), [6, 4]);
    for rec in &r {
        if let Record::Row(row) = rec {
            assert!(row.data.len() <= MAX_PACKED_DATA_BYTES);
        }
    }
    assert_eq!(without_packing(&decode_all(&r, Codec::Sqlite)), c);
}

#[test]
fn ineligible_events_stay_scalar() {
    let three = |f: &dyn Fn(usize) -> Event| -> usize {
        let events: Vec<Event> = (0..3).map(f).collect();
        pack(&events, Codec::Sqlite, PackPolicy::Maximal).len()
    };
    assert_eq!(three(&|k| text(k as Seq, 0, "a")), 1, "control: packs");
    // Off-format delta (extra key).
    assert_eq!(
        three(&|k| plain(
            "assistant/chunk",
            k as Seq,
            0,
            r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"a","extra":1}}"#
        )),
        3
    );
    // Gap in seqs.
    assert_eq!(three(&|k| text(2 * k as Seq, 0, "a")), 3);
    // Step change / block change.
    assert_eq!(
        three(&|k| delta("text-delta", 1, k as u32, 0, k as Seq, 0, "a")),
        3
    );
    assert_eq!(
        three(&|k| delta("text-delta", 1, 1, k as u32, k as Seq, 0, "a")),
        3
    );
    // Unsafe time span.
    assert_eq!(
        three(&|k| text(k as Seq, if k == 1 { 1 << 53 } else { 0 }, "a")),
        3
    );
    // Mixed name presence.
    assert_eq!(
        three(&|k| tool(
            k as Seq,
            0,
            "c1",
            if k == 1 { Some("read") } else { None },
            "{"
        )),
        3
    );
    // Different names.
    assert_eq!(
        three(&|k| tool(k as Seq, 0, "c1", Some(if k == 1 { "a" } else { "b" }), "{")),
        3
    );
    // Fractional time is impossible (i64); an ignorable chunk or surface metadata is not packed.
    assert_eq!(
        three(&|k| {
            let mut e = text(k as Seq, 0, "a");
            e.ignorable = k == 1;
            e
        }),
        3
    );
    // Block-start and finish chunks are never packed.
    assert_eq!(
        three(&|k| plain(
            "assistant/chunk",
            k as Seq,
            0,
            r#"{"turn":1,"step":1,"chunk":{"type":"block-start","index":0,"blockType":"text"}}"#
        )),
        3
    );
}

#[test]
fn kinds_make_separate_rows() {
    let mut events = Vec::new();
    for k in 0..3 {
        events.push(delta("reasoning-delta", 1, 1, 0, k, 10 - k as i64, "r"));
    }
    for k in 3..6 {
        events.push(tool(k, 10, "call-1", Some("read"), "{"));
    }
    for k in 6..9 {
        events.push(tool(k, 10, "call-1", None, "}"));
    }
    let records = pack(&events, Codec::Sqlite, PackPolicy::Maximal);
    assert_eq!(
        shape(&records),
        [
            "reasoning-chunksx3",
            "tool-call-chunksx3",
            "tool-call-chunksx3"
        ]
    );
    let Record::Row(named) = &records[1] else {
        panic!()
    };
    assert_eq!(
        named.data,
        r#"{"turn":1,"step":1,"index":1,"dt":[0,0],"id":"call-1","name":"read","args":["{","{","{"]}"#
    );
    let Record::Row(reasoning) = &records[0] else {
        panic!()
    };
    assert!(reasoning.data.contains(r#""dt":[-1,-1]"#));
    assert_eq!(
        without_packing(&decode_all(&records, Codec::Sqlite)),
        events
    );
}

/// dsh's `chunkLog(n)`: turn/start, step/start, n text deltas, step/end, turn/end.
fn chunk_log(n: usize) -> Vec<Event> {
    let mut events = vec![
        plain("turn/start", 0, 0, r#"{"turn":1}"#),
        plain("step/start", 1, 0, r#"{"turn":1,"step":1}"#),
    ];
    for k in 0..n {
        events.push(text(2 + k as Seq, k as i64, "x"));
    }
    let s = events.len() as Seq;
    events.push(plain("step/end", s, 0, r#"{"turn":1,"step":1}"#));
    events.push(plain(
        "turn/end",
        s + 1,
        0,
        r#"{"turn":1,"reason":{"kind":"completed"}}"#,
    ));
    events
}

fn with_batches(mut events: Vec<Event>, starts: impl IntoIterator<Item = usize>) -> Vec<Event> {
    for s in starts {
        events[s].layout.packing = Packing::AutoBatchStart;
    }
    events
}

#[test]
fn packing_never_crosses_append_batches() {
    let events = with_batches(chunk_log(100), [0, 3, 4]);
    assert_eq!(events.len(), 104);
    let records = pack(&events, Codec::Sqlite, PackPolicy::Remembered);
    assert_eq!(records.len(), 7);
    assert_eq!(rows(&records), [98]);

    let starts: Vec<usize> = (0..1004).step_by(40).collect();
    let events = with_batches(chunk_log(1000), starts);
    let records = pack(&events, Codec::Sqlite, PackPolicy::Remembered);
    assert_eq!(records.len(), 31);
    assert!(
        records
            .iter()
            .all(|r| !matches!(r, Record::Row(row) if row.data.len() > MAX_PACKED_DATA_BYTES))
    );
    // Maximal ignores the batches: one row of 1000.
    assert_eq!(
        rows(&pack(&events, Codec::Sqlite, PackPolicy::Maximal)),
        [1000]
    );
}

#[test]
fn remembered_rows_are_rebuilt_exactly() {
    // A file whose writer split one run into rows of 4 and 3 plus a scalar.
    let line_a = r#"{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[1,1,1],"texts":["a","b","c","d"]}}"#;
    let line_b = r#"{"type":"text-chunks","seq0":4,"time0":9,"data":{"turn":1,"step":1,"index":0,"dt":[1,1],"texts":["e","f","g"]}}"#;
    let mut events = Vec::new();
    for line in [line_a, line_b] {
        let v = parse(line, &JsonLimits::default()).unwrap();
        events.extend(decode_jsonl_record(ChunkKind::Text, v.as_object().unwrap()).unwrap());
    }
    let mut scalar = text(7, 12, "h");
    scalar.layout.packing = Packing::Scalar;
    events.push(scalar);
    let records = pack(&events, Codec::Jsonl, PackPolicy::Remembered);
    let lines: Vec<String> = records
        .iter()
        .map(|r| match r {
            Record::Row(row) => row.to_jsonl_line(),
            Record::Event(e) => e.kind.clone(),
        })
        .collect();
    assert_eq!(lines, [line_a, line_b, "assistant/chunk"]);
    assert_eq!(rows(&pack(&events, Codec::Jsonl, PackPolicy::Maximal)), [8]);
    // A remembered JSONL row longer than the SQLite cap is split for SQLite.
    let long: Vec<Event> = decode_all(
        &pack(&chunks(1500, 1), Codec::Jsonl, PackPolicy::Maximal),
        Codec::Jsonl,
    );
    assert_eq!(
        rows(&pack(&long, Codec::Jsonl, PackPolicy::Remembered)),
        [1500]
    );
    assert_eq!(
        rows(&pack(&long, Codec::Sqlite, PackPolicy::Remembered)),
        [1024, 476]
    );
}

fn malformed(kind: ChunkKind, seq0: i64, time0: i64, data: &str, codec: Codec) -> String {
    match decode_row(kind, seq0, time0, data, codec) {
        Err(ChunkRowError::Malformed { tag, reason }) => {
            assert_eq!(tag, kind.tag());
            reason
        }
        other => panic!("expected malformed for {data}: {other:?}"),
    }
}

#[test]
fn malformed_rows_are_refused() {
    let t = ChunkKind::Text;
    let ok = r#"{"turn":1,"step":1,"index":0,"dt":[1,1],"texts":["a","b","c"]}"#;
    decode_row(t, 0, 0, ok, Codec::Sqlite).unwrap();
    let cases: &[(&str, &str)] = &[
        (
            r#"{"turn":1,"step":1,"index":0,"dt":[],"texts":["a","b"]}"#,
            "dt has 0 entries",
        ),
        (
            r#"{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a","b"],"x":1}"#,
            "data keys",
        ),
        (
            r#"{"turn":"1","step":1,"index":0,"dt":[1],"texts":["a","b"]}"#,
            "turn must be a number",
        ),
        (
            r#"{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a",2]}"#,
            "non-empty array of strings",
        ),
        (
            r#"{"turn":1,"step":1,"index":0,"dt":[],"texts":[]}"#,
            "non-empty array of strings",
        ),
        (
            r#"{"turn":1,"step":1,"index":0,"dt":[1.5],"texts":["a","b"]}"#,
            "dt[0]",
        ),
        (
            r#"{"turn":1,"step":1,"index":0,"dt":[9007199254740991],"texts":["a","b"]}"#,
            "time of member 1",
        ),
        (r#"[1]"#, "data must be an object"),
        (r#"{"turn":1"#, "not valid JSON"),
    ];
    for (data, want) in cases {
        let reason = malformed(t, 0, 5, data, Codec::Jsonl);
        assert!(reason.contains(want), "{data}: {reason}");
    }
    let err = decode_row(t, 0, 5, cases[0].0, Codec::Jsonl).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("malformed text-chunks storage row: "),
        "{err}"
    );
    assert!(malformed(t, -1, 0, ok, Codec::Sqlite).contains("seq0"));
    assert!(malformed(t, 1 << 53, 0, ok, Codec::Sqlite).contains("seq0"));
    assert!(malformed(t, (1 << 53) - 2, 0, ok, Codec::Sqlite).contains("last member seq"));
    assert!(malformed(t, 0, 1 << 53, ok, Codec::Sqlite).contains("time0"));
    // SQLite member-count bounds.
    let two = r#"{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a","b"]}"#;
    decode_row(t, 0, 0, two, Codec::Jsonl).unwrap();
    assert!(malformed(t, 0, 0, two, Codec::Sqlite).contains("2 members"));
    let big = format!(
        r#"{{"turn":1,"step":1,"index":0,"dt":[{}],"texts":[{}]}}"#,
        vec!["0"; 1024].join(","),
        vec!["\"a\""; 1025].join(",")
    );
    decode_row(t, 0, 0, &big, Codec::Jsonl).unwrap();
    assert!(malformed(t, 0, 0, &big, Codec::Sqlite).contains("1025 members"));
    let huge = format!(
        r#"{{"turn":1,"step":1,"index":0,"dt":[0,0],"texts":["{}","a","b"]}}"#,
        "x".repeat(MAX_PACKED_DATA_BYTES)
    );
    assert!(malformed(t, 0, 0, &huge, Codec::Sqlite).contains("exceeds 1048576"));
    // Tool rows.
    let tc = ChunkKind::ToolCall;
    let tool_ok = r#"{"turn":1,"step":1,"index":0,"dt":[0],"id":"c","name":"n","args":["a","b"]}"#;
    decode_row(tc, 0, 0, tool_ok, Codec::Jsonl).unwrap();
    assert!(
        malformed(
            tc,
            0,
            0,
            r#"{"turn":1,"step":1,"index":0,"dt":[0],"id":1,"args":["a","b"]}"#,
            Codec::Jsonl
        )
        .contains("id must be a string")
    );
    assert!(
        malformed(
            tc,
            0,
            0,
            r#"{"turn":1,"step":1,"index":0,"dt":[0],"id":"c","name":null,"args":["a","b"]}"#,
            Codec::Jsonl
        )
        .contains("name must be a string")
    );
    assert!(
        malformed(
            tc,
            0,
            0,
            r#"{"turn":1,"step":1,"index":0,"dt":[0],"id":"c","texts":["a","b"]}"#,
            Codec::Jsonl
        )
        .contains("data keys")
    );
    // JSONL envelope.
    let rec = |line: &str| {
        let v = parse(line, &JsonLimits::default()).unwrap();
        decode_jsonl_record(ChunkKind::Text, v.as_object().unwrap())
    };
    for (line, want) in [
        (
            r#"{"type":"text-chunks","seq":0,"time0":0,"data":{}}"#,
            "keys must be exactly",
        ),
        (
            r#"{"type":"text-chunks","seq0":0,"time0":0,"data":{},"x":1}"#,
            "keys must be exactly",
        ),
        (
            r#"{"type":"text-chunks","seq0":-1,"time0":0,"data":{}}"#,
            "seq0",
        ),
        (
            r#"{"type":"text-chunks","seq0":0.5,"time0":0,"data":{}}"#,
            "seq0",
        ),
        (
            r#"{"type":"text-chunks","seq0":0,"time0":"0","data":{}}"#,
            "time0",
        ),
    ] {
        let err = rec(line).unwrap_err().to_string();
        assert!(err.contains(want), "{line}: {err}");
    }
}

// ---------------------------------------------------------------------------------------------
// Property: decode(pack(batch)) == batch.

#[derive(Debug, Clone)]
enum Gen {
    Text(u8, u8, String),
    Reasoning(u8, String),
    Tool(u8, Option<u8>, String),
    Other,
    Ignorable,
}

fn arb_gen() -> impl Strategy<Value = Gen> {
    let s = "[a-c\"\\\\\n😀]{0,3}";
    prop_oneof![
        4 => (0u8..2, 0u8..2, s).prop_map(|(st, i, t)| Gen::Text(st, i, t)),
        2 => (0u8..2, s).prop_map(|(i, t)| Gen::Reasoning(i, t)),
        3 => (0u8..2, proptest::option::of(0u8..2), s).prop_map(|(id, n, a)| Gen::Tool(id, n, a)),
        1 => Just(Gen::Other),
        1 => Just(Gen::Ignorable),
    ]
}

fn build(gens: &[(Gen, i8, bool)]) -> Vec<Event> {
    let mut time = 0i64;
    gens.iter()
        .enumerate()
        .map(|(k, (g, dt, batch_start))| {
            time += i64::from(*dt);
            let seq = k as Seq;
            let mut e = match g {
                Gen::Text(step, index, t) => delta(
                    "text-delta",
                    1,
                    u32::from(*step),
                    u32::from(*index),
                    seq,
                    time,
                    t,
                ),
                Gen::Reasoning(index, t) => {
                    delta("reasoning-delta", 1, 1, u32::from(*index), seq, time, t)
                }
                Gen::Tool(id, name, a) => tool(
                    seq,
                    time,
                    &format!("call-{id}"),
                    name.map(|n| ["read", "write"][n as usize]),
                    a,
                ),
                Gen::Other => plain("step/start", seq, time, r#"{"turn":1,"step":1}"#),
                Gen::Ignorable => {
                    let mut e = text(seq, time, "i");
                    e.ignorable = true;
                    e
                }
            };
            if *batch_start {
                e.layout.packing = Packing::AutoBatchStart;
            }
            e
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn decode_of_pack_is_identity(gens in proptest::collection::vec((arb_gen(), -3i8..4, proptest::bool::weighted(0.1)), 0..60)) {
        let events = build(&gens);
        for codec in [Codec::Jsonl, Codec::Sqlite] {
            for policy in [PackPolicy::Maximal, PackPolicy::Remembered] {
                let records = pack(&events, codec, policy);
                let decoded = decode_all(&records, codec);
                prop_assert_eq!(without_packing(&decoded), without_packing(&events));
                // Records are in seq order and cover every event once.
                let mut next = 0;
                for r in &records {
                    prop_assert_eq!(r.seq(), next);
                    next += r.len() as Seq;
                }
                prop_assert_eq!(next as usize, events.len());
                // The decoded layout reproduces the same rows.
                // (Events stored as themselves are imported as `Scalar`.)
                let mut relabeled = decoded.clone();
                for d in relabeled.iter_mut() {
                    if d.layout.packing == Packing::Auto {
                        d.layout.packing = Packing::Scalar;
                    }
                }
                let again = pack(&relabeled, codec, PackPolicy::Remembered);
                prop_assert_eq!(shape(&again), shape(&records));
                let row_list = |rs: &[Record<'_>]| rs.iter().filter_map(|r| match r {
                    Record::Row(row) => Some(row.clone()),
                    Record::Event(_) => None,
                }).collect::<Vec<_>>();
                prop_assert_eq!(row_list(&again), row_list(&records));
            }
        }
    }
}

#[test]
fn kind_names() {
    for k in [ChunkKind::Text, ChunkKind::Reasoning, ChunkKind::ToolCall] {
        assert_eq!(ChunkKind::from_tag(k.tag()), Some(k));
    }
    assert!(sessionlog::interop::chunk_rows::is_chunk_tag(
        "tool-call-chunks"
    ));
    assert!(!sessionlog::interop::chunk_rows::is_chunk_tag(
        "assistant/chunk"
    ));
    let _ = JsonValue::Null;
}
