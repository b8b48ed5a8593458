//! dsh's JSONL format: fixtures dsh wrote (plain and zstd) read and written back byte for
//! byte, dsh's refusals reproduced, and the torn-tail, scanner and path vectors of
//! dsh-persistence-formats §4 and §9.

use crate::common::jsonl_fixtures as fx;

use sessionlog::event::{Event, Packing};
use sessionlog::interop::jsonl::{self, Compression, JsonlReadError, ReadOptions, WriteOptions};

#[test]
fn dsh_loadable_fixtures_round_trip_byte_for_byte() {
    let Some(dir) = fx::fixtures_dir() else {
        return;
    };
    let mut checked = 0;
    let mut torn = 0;
    let mut failures = Vec::new();
    for v in fx::index(&dir).iter().filter(|v| v.jsonl_ok) {
        let text = fx::fixture_text(&dir, &v.file);
        let log = match jsonl::read(text.as_bytes(), &ReadOptions::default()) {
            Ok(log) => log,
            Err(e) => {
                failures.push(format!("{}: refused: {e}", v.file));
                continue;
            }
        };
        let exp = fx::expected(&dir, &v.file);
        if Some(log.events.len() as u64) != exp["event_count"].as_u64() {
            failures.push(format!(
                "{}: {} events, dsh {}",
                v.file,
                log.events.len(),
                exp["event_count"]
            ));
        }
        if !log.non_canonical.is_empty() {
            failures.push(format!("{}: non-canonical {:?}", v.file, log.non_canonical));
        }
        // dsh loads some projected files as "ok" by cutting everything after the header as a
        // tolerated torn tail (no turn/end follows the first defect); the committed prefix is
        // then what a rewrite must reproduce.
        let committed = match &log.torn {
            Some(t) => {
                torn += 1;
                assert!(
                    t.reason
                        .starts_with("seq gap in committed region at line 1"),
                    "{}: {t:?}",
                    v.file
                );
                &text.as_bytes()[..t.truncate_to as usize]
            }
            None => text.as_bytes(),
        };
        let text = std::str::from_utf8(committed).unwrap();
        let out = jsonl::write(
            &log.header,
            &log.events,
            &log.batches,
            &WriteOptions::default(),
        )
        .unwrap();
        if out != text.as_bytes() {
            let at = out
                .iter()
                .zip(text.as_bytes())
                .take_while(|(a, b)| a == b)
                .count();
            failures.push(format!(
                "{}: rewrite differs at byte {at}: {:?} vs {:?}",
                v.file,
                String::from_utf8_lossy(
                    &text.as_bytes()[at.saturating_sub(40)..(at + 40).min(text.len())]
                ),
                String::from_utf8_lossy(&out[at.saturating_sub(40)..(at + 40).min(out.len())]),
            ));
        }
        checked += 1;
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 70, "only {checked} fixtures checked");
    assert_eq!(torn, 2, "two projected files load as header-only in dsh");
}

#[test]
fn dsh_refused_fixtures_are_refused_with_dsh_reason() {
    let Some(dir) = fx::fixtures_dir() else {
        return;
    };
    let mut failures = Vec::new();
    let mut checked = 0;
    for v in fx::index(&dir).iter().filter(|v| !v.jsonl_ok) {
        let text = fx::fixture_text(&dir, &v.file);
        let exp = fx::expected(&dir, &v.file);
        let dsh = exp["jsonl_load"]["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        match jsonl::read(text.as_bytes(), &ReadOptions::default()) {
            Ok(_) => failures.push(format!("{}: accepted, dsh refused: {dsh}", v.file)),
            Err(e) => {
                if !e.to_string().starts_with(&dsh) {
                    failures.push(format!("{}: ours: {e}\n   dsh: {dsh}", v.file));
                }
            }
        }
        checked += 1;
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 30, "only {checked} fixtures checked");
}

// ---------------------------------------------------------------------------------------------
// Zstd files written by dsh

/// Decompresses each frame of a zstd file separately.
fn frames_plaintext(bytes: &[u8]) -> Vec<Vec<u8>> {
    let (frames, torn) = jsonl::scan_zstd_frames(bytes).unwrap();
    assert_eq!(torn, None);
    frames
        .into_iter()
        .map(|r| zstd::stream::decode_all(&bytes[r]).unwrap())
        .collect()
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

#[test]
fn dsh_written_zstd_files_read_and_rewrite_identically() {
    let Some(dir) = fx::fixtures_dir() else {
        return;
    };
    let zdir = dir.join("dsh-written/jsonl-zstd");
    let mut names: Vec<String> = std::fs::read_dir(&zdir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".jsonl.zstd"))
        .collect();
    names.sort();
    assert!(names.len() >= 70, "found {} zstd files", names.len());
    let mut same_compressed = 0;
    let mut failures = Vec::new();
    for name in &names {
        let plain_name = name.strip_suffix(".zstd").unwrap();
        let bytes = std::fs::read(zdir.join(name)).unwrap();
        assert_eq!(jsonl::detect_compression(&bytes), Compression::Zstd);
        let log =
            jsonl::read(&bytes, &ReadOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(log.compression, Compression::Zstd);
        let exp = fx::expected(&dir, plain_name);
        assert_eq!(
            Some(log.events.len() as u64),
            exp["event_count"].as_u64(),
            "{name}"
        );
        assert!(
            log.torn.is_none() && log.non_canonical.is_empty(),
            "{name}: {:?} {:?}",
            log.torn,
            log.non_canonical
        );
        // The same logical events as the plain fixture dsh loaded.
        let text = fx::fixture_text(&dir, plain_name);
        let plain = jsonl::read(text.as_bytes(), &ReadOptions::default()).unwrap();
        assert_eq!(log.header, plain.header, "{name}");
        if without_packing(&log.events) != without_packing(&plain.events) {
            failures.push(format!("{name}: events differ from the plain fixture"));
        }
        // One frame per batch: rewriting gives the same frames' plaintext.
        let frames = frames_plaintext(&bytes);
        assert_eq!(log.batches.len(), frames.len() - 1, "{name}");
        let opts = WriteOptions {
            compression: Compression::Zstd,
            ..WriteOptions::default()
        };
        let out = jsonl::write(&log.header, &log.events, &log.batches, &opts).unwrap();
        let again = frames_plaintext(&out);
        if again != frames {
            failures.push(format!("{name}: rewritten frames differ"));
        }
        if out == bytes {
            same_compressed += 1;
        }
        // The plain rewrite is the concatenated plaintext.
        let plain_out = jsonl::write(
            &log.header,
            &log.events,
            &log.batches,
            &WriteOptions::default(),
        )
        .unwrap();
        assert_eq!(plain_out, frames.concat(), "{name}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!(
        "{same_compressed} of {} zstd files re-compressed to identical bytes",
        names.len()
    );
}

// ---------------------------------------------------------------------------------------------
// §9.2 torn-tail and scan vectors

const HEADER: &str = r#"{"type":"session","version":0,"id":"s","createdAt":1,"delegationDepth":0}"#;

fn file(lines: &[&str]) -> String {
    let mut s = format!("{HEADER}\n");
    for l in lines {
        s.push_str(l);
        s.push('\n');
    }
    s
}

fn ev(kind: &str, seq: u64) -> String {
    let data = match kind {
        "turn/end" => r#"{"turn":1,"reason":{"kind":"completed"}}"#,
        "step/start" => r#"{"turn":1,"step":1}"#,
        _ => r#"{"turn":1}"#,
    };
    format!(
        r#"{{"type":"{kind}","seq":{seq},"time":{},"data":{data}}}"#,
        seq + 1
    )
}

fn seqs(text: &str) -> Vec<u64> {
    let log = jsonl::read(text.as_bytes(), &ReadOptions::default()).unwrap();
    log.events.iter().map(|e| e.seq).collect()
}

fn refusal(text: &str) -> JsonlReadError {
    jsonl::read(text.as_bytes(), &ReadOptions::default()).unwrap_err()
}

#[test]
fn torn_tail_vectors() {
    // A gap with no later turn/end is a tolerated torn tail.
    let t = file(&[&ev("turn/start", 0), &ev("step/start", 2)]);
    assert_eq!(seqs(&t), [0]);
    let log = jsonl::read(t.as_bytes(), &ReadOptions::default()).unwrap();
    let torn = log.torn.unwrap();
    assert_eq!(torn.file_line, 3);
    assert_eq!(
        torn.reason,
        "seq gap in committed region at line 2 (expected 1, got 2)"
    );
    assert_eq!(
        torn.truncate_to as usize,
        HEADER.len() + 1 + ev("turn/start", 0).len() + 1
    );
    // ... followed by a turn/end: committed corruption.
    let e = refusal(&file(&[
        &ev("turn/start", 0),
        &ev("step/start", 2),
        &ev("turn/end", 3),
    ]));
    assert!(e.to_string().contains("seq gap in committed region"), "{e}");
    assert!(
        matches!(
            e,
            JsonlReadError::CommittedCorruption {
                file_line: 3,
                turn_end_line: 4,
                ..
            }
        ),
        "{e:?}"
    );
    let e = refusal(&file(&["{not json", &ev("turn/end", 1)]));
    assert!(
        e.to_string()
            .starts_with("corrupt session log: unparsable committed event at line 1"),
        "{e}"
    );
    // Header only.
    let t = file(&[]);
    let log = jsonl::read(t.as_bytes(), &ReadOptions::default()).unwrap();
    assert!(log.events.is_empty() && log.torn.is_none());
    assert_eq!(seqs(&file(&[&ev("turn/start", 0), "{not json"])), [0]);
    assert_eq!(
        seqs(&file(&[
            &ev("turn/start", 0),
            &ev("turn/end", 1),
            &ev("step/start", 9)
        ])),
        [0, 1]
    );
    // A packed row expands.
    let row = r#"{"type":"text-chunks","seq0":1,"time0":2,"data":{"turn":1,"step":1,"index":0,"dt":[1,1],"texts":["a","b","c"]}}"#;
    let t = file(&[&ev("turn/start", 0), row, &ev("turn/end", 4)]);
    let log = jsonl::read(t.as_bytes(), &ReadOptions::default()).unwrap();
    assert_eq!(
        log.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );
    assert_eq!(log.events[2].kind, "assistant/chunk");
    assert_eq!((log.events[2].seq, log.events[2].time), (2, 3));
    assert_eq!(
        log.events[2].data,
        r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"b"}}"#
    );
    assert_eq!(log.events[1].layout.packing, Packing::RowStart);
    assert_eq!(log.events[3].layout.packing, Packing::RowMember);
    assert_eq!(log.events[0].layout.packing, Packing::Scalar);
    assert_eq!(
        jsonl::write(&log.header, &log.events, &[], &WriteOptions::default()).unwrap(),
        t.as_bytes()
    );
    // A malformed row followed by turn/end.
    let bad_row = r#"{"type":"text-chunks","seq0":0,"time0":2,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a","b"]}}"#;
    let e = refusal(&file(&[bad_row, &ev("turn/end", 2)]));
    assert!(
        e.to_string()
            .contains("unparsable committed event at line 1"),
        "{e}"
    );
    assert!(
        e.to_string().contains("malformed text-chunks storage row"),
        "{e}"
    );
    // A row with a gap, no turn/end: cut after the turn/start line.
    let gap_row = row.replace(r#""seq0":1"#, r#""seq0":2"#);
    let t = file(&[&ev("turn/start", 0), &gap_row]);
    let log = jsonl::read(t.as_bytes(), &ReadOptions::default()).unwrap();
    assert_eq!(log.events.len(), 1);
    assert_eq!(
        log.torn.unwrap().truncate_to as usize,
        HEADER.len() + 1 + ev("turn/start", 0).len() + 1
    );
    // A torn fragment without newline.
    let t = format!("{HEADER}\n{}\nignored torn tail", ev("turn/start", 0));
    let log = jsonl::read(t.as_bytes(), &ReadOptions::default()).unwrap();
    assert_eq!(log.events.len(), 1);
    let torn = log.torn.unwrap();
    assert_eq!(
        torn.truncate_to as usize,
        HEADER.len() + 1 + ev("turn/start", 0).len() + 1
    );
    assert_eq!(
        (torn.reason.as_str(), torn.file_line, torn.bytes_cut),
        ("incomplete final line", 3, 17)
    );
    // A later valid line after a defect is ignored (and cut).
    let t = file(&[&ev("turn/start", 0), "{not json", &ev("step/start", 1)]);
    let log = jsonl::read(t.as_bytes(), &ReadOptions::default()).unwrap();
    assert_eq!(log.events.len(), 1);
    assert_eq!(
        log.torn.as_ref().unwrap().reason,
        "unparsable committed event at line 2"
    );
    // An empty line counts as unparsable.
    let e = refusal(&format!("{HEADER}\n\n{}\n", ev("turn/end", 0)));
    assert!(
        e.to_string()
            .contains("unparsable committed event at line 1"),
        "{e}"
    );
}

#[test]
fn header_vectors() {
    // A header without `delegationDepth` (dsh's JSONL writes and requires it) says what is
    // missing, not that a value is wrong; a present but negative one says that.
    let e = refusal("{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1}\n");
    assert!(
        e.to_string()
            .contains("delegationDepth is missing (dsh's JSONL header requires it)"),
        "{e}"
    );
    let e = refusal(
        "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":-1}\n",
    );
    assert!(
        e.to_string()
            .contains("delegationDepth is not a non-negative safe integer"),
        "{e}"
    );
    let e = refusal("42\n");
    assert!(matches!(e, JsonlReadError::NotAHeader { .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("corrupt session log: first line is not a session header")
    );
    let opts = ReadOptions {
        path: Some("/root/--work--/future-shape/session.jsonl".into()),
        ..ReadOptions::default()
    };
    let e = jsonl::read(
        b"{\"type\":\"session\",\"version\":42,\"id\":\"future-shape\",\"futureOnly\":true}\n",
        &opts,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "session \"future-shape\" uses log format v42, but this harness reads only v0: the log was written by a \
         newer harness — upgrade the harness to open it (raw log: /root/--work--/future-shape/session.jsonl)"
    );
    let e = refusal("{\"type\":\"session\",\"version\":42,\"id\":123}\n");
    assert!(
        e.to_string()
            .contains("session \"123\" uses log format v42"),
        "{e}"
    );
    let e = refusal("{\"type\":\"session\",\"version\":-1,\"id\":\"old\"}\n");
    assert!(
        e.to_string()
            .contains("older than the supported v0, and this build ships no upgrade path"),
        "{e}"
    );
    // The version refusal wins over any shape problem.
    let e = refusal("{\"version\":3}\n");
    assert!(
        e.to_string()
            .starts_with("session \"undefined\" uses log format v3"),
        "{e}"
    );
    for bad in [
        r#""createdAt":1.5,"delegationDepth":0"#,
        r#""createdAt":-1,"delegationDepth":0"#,
        r#""createdAt":9007199254740992,"delegationDepth":0"#,
        r#""createdAt":-0,"delegationDepth":0"#,
        r#""createdAt":1"#,
        r#""createdAt":1,"delegationDepth":"1""#,
        r#""createdAt":1,"delegationDepth":1.5"#,
        r#""createdAt":1,"delegationDepth":-1"#,
        r#""createdAt":1,"delegationDepth":-0"#,
        r#""createdAt":1,"delegationDepth":0,"agentPreset":7"#,
        r#""createdAt":1,"delegationDepth":0,"origin":"user""#,
        r#""createdAt":1,"delegationDepth":0,"owner":"""#,
    ] {
        let e = refusal(&format!(
            "{{\"type\":\"session\",\"version\":0,\"id\":\"s\",{bad}}}\n"
        ));
        assert!(e.to_string().contains("session header"), "{bad}: {e}");
    }
    for key in ["sandboxMode", "approvalPolicy"] {
        let e = refusal(&format!(
            "{{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0,\"{key}\":\"x\"}}\n"
        ));
        assert!(matches!(e, JsonlReadError::RetiredHeaderKey { .. }), "{e}");
    }
    // Unknown keys are dropped (and the line is reported as not reproducible).
    let t = "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"future\":[1],\"delegationDepth\":2}\n";
    let log = jsonl::read(t.as_bytes(), &ReadOptions::default()).unwrap();
    assert_eq!(log.header.delegation_depth, Some(2));
    assert!(log.header.extra.is_empty());
    assert_eq!(log.non_canonical.len(), 1);
    assert_eq!(log.non_canonical[0].file_line, 1);
    // Every header field, in dsh's order.
    let full = r#"{"type":"session","version":0,"id":"x","createdAt":1,"cwd":"/p","parentSession":"par","seedLength":4,"origin":"subagent","delegationDepth":1,"agentPreset":"minimal","owner":"alice"}"#;
    let log = jsonl::read(format!("{full}\n").as_bytes(), &ReadOptions::default()).unwrap();
    assert!(log.non_canonical.is_empty());
    assert_eq!(log.header.seed_length, Some(4));
    assert_eq!(jsonl::write_header_line(&log.header).unwrap(), full);
    // Bad types of fields the line guard does not check are refused by header validation.
    let e = refusal(
        "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0,\"cwd\":5}\n",
    );
    assert!(matches!(e, JsonlReadError::InvalidHeader { .. }), "{e}");
    assert!(matches!(refusal(""), JsonlReadError::NotAHeader { .. }));
    assert!(matches!(refusal(HEADER), JsonlReadError::NotAHeader { .. }));
}

#[test]
fn event_rules() {
    // Unknown types are refused with dsh's wording unless ignorable.
    let unknown = r#"{"type":"future/thing","seq":0,"time":1,"data":null}"#;
    let e = refusal(&file(&[unknown]));
    assert_eq!(
        e.to_string(),
        "session \"s\" contains event type \"future/thing\" (seq 0) unknown to this harness and not marked \
         ignorable; refusing to interpret the log — it was likely written by a newer harness"
    );
    let ignorable =
        r#"{"type":"future/thing","seq":0,"time":-5,"data":[1,"\ud800"],"ignorable":true}"#;
    let t = file(&[ignorable]);
    let log = jsonl::read(t.as_bytes(), &ReadOptions::default()).unwrap();
    assert!(log.events[0].ignorable);
    assert_eq!(log.events[0].time, -5);
    assert_eq!(log.events[0].data, r#"[1,"\ud800"]"#);
    assert_eq!(
        jsonl::write(&log.header, &log.events, &[], &WriteOptions::default()).unwrap(),
        t.as_bytes()
    );
    // Legacy steering/message is converted by dsh, so it is not unknown.
    let steering = r#"{"type":"steering/message","seq":0,"time":1,"data":{"turn":1,"message":{}}}"#;
    assert_eq!(seqs(&file(&[steering])), [0]);
    // Retired shapes.
    for (line, what) in [
        (
            r#"{"type":"request/header-delta","seq":0,"time":1,"data":{}}"#,
            "request/header-delta",
        ),
        (
            r#"{"type":"mode/set","seq":0,"time":1,"data":{}}"#,
            "mode/set",
        ),
        (
            r#"{"type":"request/header","seq":0,"time":1,"data":{"header":{},"reason":"fallback"}}"#,
            "fallback",
        ),
    ] {
        let e = refusal(&file(&[line]));
        assert!(
            matches!(e, JsonlReadError::RetiredEvent { seq: 0, .. }),
            "{e}"
        );
        assert!(e.to_string().contains(what), "{e}");
    }
    // Envelope rules.
    for (line, why) in [
        (
            r#"{"type":"turn/start","seq":0,"time":"1","data":{}}"#,
            "time must be a safe integer",
        ),
        (
            r#"{"type":"turn/start","seq":0,"time":1.5,"data":{}}"#,
            "time must be a safe integer",
        ),
        (
            r#"{"type":"turn/start","seq":0,"time":1}"#,
            "data is missing",
        ),
        (
            r#"{"type":"turn/start","seq":0,"time":1,"data":{},"extra":1}"#,
            "unexpected key \"extra\"",
        ),
        (
            r#"{"type":"turn/start","seq":0,"time":1,"data":{},"ignorable":false}"#,
            "ignorable must be exactly true",
        ),
        (
            r#"{"type":7,"seq":0,"time":1,"data":{}}"#,
            "type must be a string",
        ),
        (
            r#"{"type":"user/message","seq":0,"time":1,"data":{},"surfaceOp":"prepend"}"#,
            "surfaceOp",
        ),
        (
            r#"{"type":"user/message","seq":0,"time":1,"data":{},"surfaceOp":"append","sourceEventSeqs":[-1]}"#,
            "sourceEventSeqs",
        ),
    ] {
        let e = refusal(&file(&[line]));
        assert!(
            matches!(
                e,
                JsonlReadError::InvalidEnvelope {
                    index: 0,
                    file_line: 2,
                    ..
                }
            ),
            "{line}: {e}"
        );
        assert!(e.to_string().starts_with("stored session \"s\" failed validation: seed event at index 0 has an invalid event envelope"), "{e}");
        assert!(e.to_string().contains(why), "{line}: {e}");
    }
    // A type with a lone surrogate is legal for dsh but not representable here.
    let e = refusal(&file(&[
        r#"{"type":"x\ud800","seq":0,"time":1,"data":{},"ignorable":true}"#,
    ]));
    assert!(
        matches!(e, JsonlReadError::Unsupported { file_line: 2, .. }),
        "{e}"
    );
    // Invalid UTF-8 is replaced by U+FFFD as dsh's non-fatal decoder does, and reported.
    let mut t = file(&[]).into_bytes();
    t.extend_from_slice(
        b"{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"t\":\"\xff\"}}\n",
    );
    let log = jsonl::read(&t, &ReadOptions::default()).unwrap();
    assert_eq!(log.events[0].data, "{\"t\":\"\u{FFFD}\"}");
    assert_eq!(
        log.non_canonical[0].reason,
        "invalid UTF-8 replaced by U+FFFD"
    );
    // -0 is read as 0 (as dsh's loader does); data keeps its text.
    let t = file(&[r#"{"type":"turn/start","seq":-0,"time":-0,"data":{"x":-0}}"#]);
    let log = jsonl::read(t.as_bytes(), &ReadOptions::default()).unwrap();
    assert_eq!((log.events[0].seq, log.events[0].time), (0, 0));
    assert_eq!(log.events[0].data, r#"{"x":-0}"#);
    assert_eq!(log.non_canonical.len(), 1);
}

#[test]
fn key_orders_round_trip() {
    let lines = [
        r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#,
        r#"{"type":"user/message","seq":1,"time":2,"data":{"id":"u"},"sourceEventSeqs":[0],"surfaceOp":"append"}"#,
        r#"{"type":"tool/result","seq":2,"time":2,"data":{},"surfaceOp":"append","sourceEventSeqs":[1]}"#,
        r#"{"seq":3,"type":"assistant/message","data":{ "spaced" : true },"time":3,"surfaceOp":{"op":"replace","start":1,"end":1}}"#,
        r#"{"type":"todo/write","seq":4,"time":9007199254740991,"data":"text","ignorable":true}"#,
    ];
    let t = file(&lines);
    let log = jsonl::read(t.as_bytes(), &ReadOptions::default()).unwrap();
    use sessionlog::event::{EnvelopeKey::*, KeyOrder};
    assert_eq!(log.events[1].layout.key_order, KeyOrder::Canonical);
    assert_eq!(log.events[2].layout.key_order, KeyOrder::SurfaceOpFirst);
    assert_eq!(
        log.events[3].layout.key_order,
        KeyOrder::Custom(vec![Seq, Type, Data, Time, SurfaceOp])
    );
    assert!(log.non_canonical.is_empty(), "{:?}", log.non_canonical);
    assert_eq!(
        jsonl::write(&log.header, &log.events, &[], &WriteOptions::default()).unwrap(),
        t.as_bytes()
    );
    // Whitespace outside data is not reproducible: reported.
    let t = file(&[r#"{"type":"turn/start", "seq":0,"time":1,"data":{"turn":1}}"#]);
    let log = jsonl::read(t.as_bytes(), &ReadOptions::default()).unwrap();
    assert_eq!(log.non_canonical.len(), 1);
    assert_eq!(log.non_canonical[0].file_line, 2);
}

#[test]
fn writer_refusals() {
    let log = jsonl::read(
        file(&[&ev("turn/start", 0)]).as_bytes(),
        &ReadOptions::default(),
    )
    .unwrap();
    let mut events = log.events.clone();
    events.push(Event::new("text-chunks", 1, 1, "{}"));
    let e = jsonl::write(&log.header, &events, &[], &WriteOptions::default()).unwrap_err();
    assert!(
        matches!(e, jsonl::JsonlWriteError::ChunkTagCollision { seq: 1, .. }),
        "{e}"
    );
    let e = jsonl::write(
        &log.header,
        &[Event::new("turn/start", 3, 1, "{}")],
        &[],
        &WriteOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            jsonl::JsonlWriteError::NotContiguous { index: 0, seq: 3 }
        ),
        "{e}"
    );
    let e = jsonl::write(
        &log.header,
        &[Event::new("turn/start", 0, 1, "{bad")],
        &[],
        &WriteOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(e, jsonl::JsonlWriteError::InvalidEvent { seq: 0, .. }),
        "{e}"
    );
    let e = jsonl::write(&log.header, &log.events, &[2], &WriteOptions::default()).unwrap_err();
    assert!(
        matches!(
            e,
            jsonl::JsonlWriteError::BatchMismatch {
                total: 2,
                events: 1
            }
        ),
        "{e}"
    );
    let big = Event::new("user/message", 0, 1, "{}").with_surface_op(
        sessionlog::event::SurfaceOp::Replace {
            start: 1 << 53,
            end: 0,
        },
    );
    let e = jsonl::write(&log.header, &[big], &[], &WriteOptions::default()).unwrap_err();
    assert!(
        matches!(e, jsonl::JsonlWriteError::InvalidEvent { seq: 0, .. }),
        "{e}"
    );
    let mut h = log.header.clone();
    h.origin = Some("user".into());
    assert!(jsonl::write_header_line(&h).is_err());
}

#[test]
fn packing_modes_on_write() {
    // chunkRunLog: five text deltas, packed by default, unpacked with packing off.
    let mut lines = vec![ev("turn/start", 0), ev("step/start", 1)];
    for k in 0..5 {
        lines.push(format!(
            r#"{{"type":"assistant/chunk","seq":{},"time":{},"data":{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"t{k}"}}}}}}"#,
            2 + k,
            3 + k
        ));
    }
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let unpacked = file(&refs);
    let log = jsonl::read(unpacked.as_bytes(), &ReadOptions::default()).unwrap();
    // Imported scalar lines stay scalar.
    assert_eq!(
        jsonl::write(&log.header, &log.events, &[], &WriteOptions::default()).unwrap(),
        unpacked.as_bytes()
    );
    let maximal = WriteOptions {
        packing: Some(sessionlog::interop::chunk_rows::PackPolicy::Maximal),
        ..WriteOptions::default()
    };
    let packed =
        String::from_utf8(jsonl::write(&log.header, &log.events, &[], &maximal).unwrap()).unwrap();
    assert!(packed.ends_with(
        "{\"type\":\"text-chunks\",\"seq0\":2,\"time0\":3,\"data\":{\"turn\":1,\"step\":1,\"index\":0,\"dt\":[1,1,1,1],\"texts\":[\"t0\",\"t1\",\"t2\",\"t3\",\"t4\"]}}\n"
    ));
    let back = jsonl::read(packed.as_bytes(), &ReadOptions::default()).unwrap();
    assert_eq!(without_packing(&back.events), without_packing(&log.events));
    let off = WriteOptions {
        packing: None,
        ..WriteOptions::default()
    };
    assert_eq!(
        jsonl::write(&back.header, &back.events, &[], &off).unwrap(),
        unpacked.as_bytes()
    );
    // Engine-appended events (Auto) pack per batch: batches [3, 4] split the run into 1 + 4.
    let auto: Vec<Event> = without_packing(&log.events);
    let mut batched = auto.clone();
    batched[3].layout.packing = Packing::AutoBatchStart;
    let out = String::from_utf8(
        jsonl::write(&log.header, &batched, &[], &WriteOptions::default()).unwrap(),
    )
    .unwrap();
    assert_eq!(out.lines().count(), 1 + 3 + 1);
    assert!(out.contains(r#""seq0":3,"time0":4"#));
}

#[test]
fn replay_fixture_form_needs_the_option() {
    let t = "{\"type\":\"session\",\"version\":0,\"id\":\"r\",\"createdAt\":0}\n\
             {\"type\":\"turn/start\",\"data\":{\"turn\":1}}\n\
             {\"type\":\"text-chunks\",\"data\":{\"turn\":1,\"step\":1,\"index\":0,\"dt\":[0,0],\"texts\":[\"a\",\"b\",\"c\"]}}\n\
             {\"type\":\"turn/end\",\"data\":{\"turn\":1,\"reason\":{\"kind\":\"completed\"}}}\n";
    assert!(matches!(refusal(t), JsonlReadError::NotAHeader { .. }));
    let opts = ReadOptions {
        replay_fixture: true,
        ..ReadOptions::default()
    };
    let log = jsonl::read(t.as_bytes(), &opts).unwrap();
    let st: Vec<(u64, i64)> = log.events.iter().map(|e| (e.seq, e.time)).collect();
    assert_eq!(st, [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0)]);
    assert_eq!(log.header.delegation_depth, None);
}

#[test]
fn projected_fixtures_load_in_replay_mode() {
    let Some(dir) = fx::fixtures_dir() else {
        return;
    };
    let manifest = fx::manifest(&dir);
    let opts = ReadOptions {
        replay_fixture: true,
        ..ReadOptions::default()
    };
    let mut checked = 0;
    let mut failures = Vec::new();
    for v in fx::index(&dir) {
        // event_count comes from dsh's seeded session when its JSONL loader refused the file.
        if manifest.get(&v.file).map(String::as_str) != Some("projected")
            || !v.seed_ok
            || v.jsonl_ok
        {
            continue;
        }
        let text = fx::fixture_text(&dir, &v.file);
        let exp = fx::expected(&dir, &v.file);
        match jsonl::read(text.as_bytes(), &opts) {
            Ok(log) => {
                if Some(log.events.len() as u64) != exp["event_count"].as_u64() {
                    failures.push(format!(
                        "{}: {} events, dsh {}",
                        v.file,
                        log.events.len(),
                        exp["event_count"]
                    ));
                }
                assert!(log.torn.is_none(), "{}", v.file);
            }
            Err(e) => failures.push(format!("{}: {e}", v.file)),
        }
        checked += 1;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 15, "checked {checked}");
}

// ---------------------------------------------------------------------------------------------
// Zstd vectors

fn one_turn_lines() -> Vec<String> {
    vec![
        r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#.into(),
        r#"{"type":"user/message","seq":1,"time":2,"data":{"id":"one-turn-user","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}"#.into(),
        r#"{"type":"step/start","seq":2,"time":3,"data":{"turn":1,"step":1}}"#.into(),
        r#"{"type":"assistant/message","seq":3,"time":4,"data":{"turn":1,"step":1,"message":{"id":"one-turn-assistant","role":"assistant","content":[{"type":"text","text":"hello"}],"source":{"kind":"model","provider":"mock","model":"mock"}}},"surfaceOp":"append"}"#.into(),
        r#"{"type":"step/end","seq":4,"time":5,"data":{"turn":1,"step":1}}"#.into(),
        r#"{"type":"turn/end","seq":5,"time":6,"data":{"turn":1,"reason":{"kind":"completed"}}}"#.into(),
    ]
}

const META: &str = r#"{"type":"session","version":0,"id":"default-zstd","createdAt":1000,"cwd":"/work","delegationDepth":0}"#;

fn frame(text: &str) -> Vec<u8> {
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    enc.include_checksum(true).unwrap();
    std::io::Write::write_all(&mut enc, text.as_bytes()).unwrap();
    enc.finish().unwrap()
}

fn one_turn_zstd() -> Vec<u8> {
    let mut f = frame(&format!("{META}\n"));
    f.extend(frame(&(one_turn_lines().join("\n") + "\n")));
    f
}

fn zread(bytes: &[u8]) -> Result<jsonl::JsonlLog, JsonlReadError> {
    jsonl::read(bytes, &ReadOptions::default())
}

#[test]
fn zstd_contract_vectors() {
    let bytes = one_turn_zstd();
    let log = zread(&bytes).unwrap();
    assert_eq!(log.events.len(), 6);
    assert_eq!(log.batches, [6]);
    let zopts = WriteOptions {
        compression: Compression::Zstd,
        ..WriteOptions::default()
    };
    let ours = jsonl::write(&log.header, &log.events, &log.batches, &zopts).unwrap();
    assert_eq!(&ours[..4], &[0x28, 0xb5, 0x2f, 0xfd]);
    let frames = frames_plaintext(&ours);
    assert_eq!(frames.len(), 2);
    assert_eq!(
        frames.concat(),
        format!("{META}\n{}\n", one_turn_lines().join("\n")).into_bytes()
    );
    // A second append adds a third frame and keeps the old bytes as a prefix.
    let mut events = log.events.clone();
    let more = file(&[&ev("turn/start", 6), &ev("turn/end", 7)]);
    let extra = jsonl::read(
        more.replace("\"seq\":6", "\"seq\":0")
            .replace("\"seq\":7", "\"seq\":1")
            .as_bytes(),
        &ReadOptions::default(),
    )
    .unwrap();
    for (i, mut e) in extra.events.into_iter().enumerate() {
        e.seq = 6 + i as u64;
        events.push(e);
    }
    let appended = jsonl::write(&log.header, &events, &[6, 2], &zopts).unwrap();
    assert!(appended.starts_with(&ours));
    assert_eq!(frames_plaintext(&appended).len(), 3);
    assert_eq!(zread(&appended).unwrap().batches, [6, 2]);
}

#[test]
fn zstd_torn_and_corrupt_frames() {
    let good = one_turn_zstd();
    let header_len = frame(&format!("{META}\n")).len();
    // The event frame truncated by one byte (checksum torn): all its events recovered.
    let log = zread(&good[..good.len() - 1]).unwrap();
    assert_eq!(log.events.len(), 6);
    let torn = log.torn.unwrap();
    assert_eq!(
        (torn.truncate_to as usize, torn.recovered_events),
        (header_len, 6)
    );
    assert_eq!(torn.reason, "incomplete final Zstandard frame");
    // Two bytes of a new frame: the log is unchanged, truncated back to the committed bytes.
    let mut t = good.clone();
    t.extend([0x28, 0xb5]);
    let log = zread(&t).unwrap();
    assert_eq!(log.events.len(), 6);
    let torn = log.torn.unwrap();
    assert_eq!(
        (
            torn.truncate_to as usize,
            torn.bytes_cut,
            torn.recovered_events
        ),
        (good.len(), 2, 0)
    );
    // A complete frame that ends inside a record.
    let mut t = good.clone();
    t.extend(frame(r#"{"type":"turn/start""#));
    assert!(matches!(
        zread(&t),
        Err(JsonlReadError::ZstdTornRecord { .. })
    ));
    // A defect inside a complete frame is fatal even without a later turn/end.
    let mut t = good.clone();
    t.extend(frame("{not json\n"));
    let e = zread(&t).unwrap_err();
    assert!(
        e.to_string()
            .contains("complete frame contains a torn JSONL record"),
        "{e}"
    );
    // A garbage line followed by turn/end in one frame.
    let mut t = frame(&format!("{META}\n"));
    t.extend(frame(&format!(
        "{}\n{{garbage\n{}\n",
        ev("turn/start", 0),
        ev("turn/end", 1)
    )));
    let e = zread(&t).unwrap_err();
    assert!(
        matches!(
            e,
            JsonlReadError::CommittedCorruption {
                file_line: 3,
                turn_end_line: 4,
                ..
            }
        ),
        "{e}"
    );
    // A flipped checksum byte.
    let mut t = good.clone();
    let last = t.len() - 1;
    t[last] ^= 0xFF;
    assert!(matches!(zread(&t), Err(JsonlReadError::ZstdFrame { offset }) if offset == header_len));
    let mut t = good.clone();
    t[header_len - 1] ^= 0xFF;
    assert!(matches!(
        zread(&t),
        Err(JsonlReadError::ZstdFrame { offset: 0 })
    ));
    // Header frame rules.
    let mut t = frame(&format!("{META}\n{}\n", ev("turn/start", 0)));
    assert!(matches!(zread(&t), Err(JsonlReadError::ZstdHeaderFrame)));
    t = frame("");
    assert!(matches!(zread(&t), Err(JsonlReadError::ZstdHeaderFrame)));
    assert!(matches!(
        zread(&[0x28, 0xb5, 0x2f, 0xfd]),
        Err(JsonlReadError::ZstdEmpty)
    ));
    // Unknown version in a zstd header is a format refusal.
    let t = frame(
        "{\"type\":\"session\",\"version\":1,\"id\":\"z\",\"createdAt\":1,\"delegationDepth\":0}\n",
    );
    assert!(matches!(
        zread(&t),
        Err(JsonlReadError::FormatUnsupported { .. })
    ));
    // Decompression is bounded.
    let opts = ReadOptions {
        max_decompressed_bytes: 100,
        ..ReadOptions::default()
    };
    assert!(matches!(
        jsonl::read(&good, &opts),
        Err(JsonlReadError::DecompressedTooLarge { limit: 100 })
    ));
}

#[test]
fn zstd_torn_frame_recovers_complete_records() {
    // A frame large enough for several blocks (128 KiB each), cut inside its last block: the
    // complete lines of its decoded prefix are kept.
    let mut bytes = one_turn_zstd();
    let committed = bytes.len();
    let big: String = (0..400_000u32)
        .map(|i| char::from(b'a' + (i.wrapping_mul(2_654_435_761) >> 27) as u8 % 26))
        .collect();
    let batch = format!(
        "{}\n{}\n{{\"type\":\"assistant/chunk\",\"seq\":8,\"time\":9,\"data\":{{\"turn\":2,\"step\":1,\"chunk\":{{\"type\":\"text-delta\",\"index\":0,\"text\":\"{big}\"}}}}}}\n",
        ev("turn/start", 6).replace("\"turn\":1", "\"turn\":2"),
        ev("step/start", 7)
    );
    let f = frame(&batch);
    // Cut inside the last block: the final line cannot be complete.
    bytes.extend_from_slice(&f[..f.len() - 10]);
    let log = zread(&bytes).unwrap();
    assert_eq!(
        log.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (0..8).collect::<Vec<_>>()
    );
    assert_eq!(log.batches, [6, 2]);
    let torn = log.torn.unwrap();
    assert_eq!(
        (torn.truncate_to as usize, torn.recovered_events),
        (committed, 2)
    );
}

#[test]
fn zstd_frame_scanner_vectors() {
    const M: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
    assert_eq!(jsonl::scan_zstd_frames(&M[..2]).unwrap(), (vec![], Some(0)));
    assert_eq!(jsonl::scan_zstd_frames(&M).unwrap(), (vec![], Some(0)));
    assert!(matches!(
        jsonl::scan_zstd_frames(&[0, 0, 0, 0]),
        Err(JsonlReadError::ZstdStructure {
            reason: "invalid frame magic",
            ..
        })
    ));
    // Skippable frames are refused.
    assert!(matches!(
        jsonl::read(
            &[0x50, 0x2a, 0x4d, 0x18, 0, 0, 0, 0],
            &ReadOptions::default()
        ),
        Err(JsonlReadError::ZstdStructure {
            reason: "invalid frame magic",
            ..
        })
    ));
    let with = |rest: &[u8]| [&M[..], rest].concat();
    assert!(matches!(
        jsonl::scan_zstd_frames(&with(&[0x08])),
        Err(JsonlReadError::ZstdStructure { offset: 4, .. })
    ));
    // Empty frames (one empty raw block) for several descriptors.
    let empty_block = [0x01, 0x00, 0x00];
    for (fhd, header_rest) in [
        (0x00u8, vec![0x00]),                       // window
        (0x21, vec![0x00, 0x00]),                   // dict id 1 byte, FCS 1 byte
        (0x42, vec![0x00, 0, 0, 0, 0]),             // window, dict 2, FCS 2
        (0x83, vec![0x00, 0, 0, 0, 0, 0, 0, 0, 0]), // window, dict 4, FCS 4
        (0xE3, vec![0; 12]),                        // dict 4, FCS 8
    ] {
        let f = with(&[&[fhd][..], &header_rest, &empty_block].concat());
        assert_eq!(
            jsonl::scan_zstd_frames(&f).unwrap(),
            (std::iter::once(0..f.len()).collect(), None),
            "{fhd:#x}"
        );
    }
    assert!(matches!(
        jsonl::scan_zstd_frames(&with(&[0x20, 0x00, 0x07, 0x00, 0x00])),
        Err(JsonlReadError::ZstdStructure {
            reason: "reserved block type",
            ..
        })
    ));
    let rle = with(&[0x20, 0x01, 0x0b, 0x00, 0x00, 0x41]);
    assert_eq!(
        jsonl::scan_zstd_frames(&rle).unwrap(),
        (std::iter::once(0..rle.len()).collect(), None)
    );
    assert_eq!(
        jsonl::scan_zstd_frames(&rle[..rle.len() - 1]).unwrap(),
        (vec![], Some(0))
    );
}

// ---------------------------------------------------------------------------------------------
// Paths

#[test]
fn path_vectors() {
    for (id, enc) in [
        ("a/b", "a~002Fb"),
        ("/etc/passwd", "~002Fetc~002Fpasswd"),
        ("a\0b", "a~0000b"),
        ("a~b", "a~007Eb"),
        ("😀", "~D83D~DE00"),
        ("a b", "a~0020b"),
        ("plain-ID_1.2", "plain-ID_1.2"),
        (".", "~002E"),
        ("..", "~002E~002E"),
        ("...", "..."),
        ("~", "~007E"),
        ("a\\..\\b", "a~005C..~005Cb"),
    ] {
        assert_eq!(jsonl::encode_session_id(id).unwrap(), enc, "{id:?}");
    }
    assert!(jsonl::encode_session_id("").is_err());
    for (cwd, key) in [
        ("/work", "--work--"),
        (
            "/Users/qyj/work/deepseek-harness",
            "--Users-qyj-work-deepseek-harness--",
        ),
        ("C:\\work\\agent", "--C-work-agent--"),
        ("/开发/~agent", "--~5F00~53D1-~007Eagent--"),
        ("/", "--root--"),
        ("/a/b/", "--a-b---"),
        ("//srv//x", "--srv-x--"),
        ("/home/u/my proj", "--home-u-my~0020proj--"),
    ] {
        assert_eq!(jsonl::project_key(cwd).unwrap(), key, "{cwd:?}");
    }
    assert_eq!(
        jsonl::project_key("/a/b-c").unwrap(),
        jsonl::project_key("/a-b/c").unwrap()
    );
    assert_eq!(
        jsonl::project_key(&format!("/{}", "x".repeat(1000)))
            .unwrap()
            .len(),
        255
    );
    assert!(jsonl::project_key("").is_err());
    // No id or cwd can escape the root: every component is a plain name.
    let mut h = sessionlog::event::SessionHeader::new("../../etc", 1);
    for (id, cwd) in [
        ("..", Some("/..")),
        ("/", None),
        ("~/x", Some("~")),
        ("../../etc", Some("../..")),
    ] {
        h.id = id.into();
        h.cwd = cwd.map(Into::into);
        let p = jsonl::session_relative_path(&h, Compression::Zstd).unwrap();
        let parts: Vec<_> = p.components().collect();
        assert_eq!(parts.len(), 3, "{p:?}");
        assert!(
            parts
                .iter()
                .all(|c| matches!(c, std::path::Component::Normal(_))),
            "{p:?}"
        );
        assert!(p.ends_with("session.jsonl.zstd"));
    }
    h.id = "s1".into();
    h.cwd = None;
    assert_eq!(
        jsonl::session_path(std::path::Path::new("/root"), &h, Compression::None).unwrap(),
        std::path::Path::new("/root/_no-cwd/s1/session.jsonl")
    );
}
