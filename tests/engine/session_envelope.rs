//! Envelope, payload-shape, receipt, vocabulary, header and legacy rules (§1, §2.2, §3,
//! §9, persistence §1.5–§1.6): dsh's `session.spec.ts` / `json.spec.ts` /
//! `request-header.spec.ts` matrices as far as they apply to JSON text.

use crate::common::session_build;

use session_build::*;
use sessionlog::event::{Event, SessionHeader};
use sessionlog::session::error::{HeaderError, ShapeError};
use sessionlog::session::header::validate_header;
use sessionlog::session::invariants::InvariantMode;
use sessionlog::session::known::KNOWN_SESSION_EVENT_TYPES;
use sessionlog::session::legacy::{LegacyError, LegacyView};
use sessionlog::session::load::{LoadError, load_stored, load_stored_raw, parse_stored_event};
use sessionlog::session::state::SeedError;
use sessionlog::session::{AppendError, EnvelopeDefect, RawDefects, SessionState};

fn header() -> SessionHeader {
    SessionHeader::new("s", 1)
}

/// Seeds one raw event text (dsh's `Session.create(id, [event])`), returning the error text.
fn seed_raw(text: &str) -> Result<SessionState, String> {
    let stored = parse_stored_event(text, None).expect("object");
    let state = SessionState::with_invariants(InvariantMode::Off);
    let plan = state
        .plan_seed(&stored.event, 0, &stored.defects, &Vec::new())
        .map_err(|e| e.to_string())?;
    let mut state = state;
    state.apply(plan).unwrap();
    Ok(state)
}

fn seed_one(kind: &str, data: &str) -> Result<SessionState, String> {
    let op = matches!(kind, "user/message" | "assistant/message" | "tool/result")
        .then_some(r#","surfaceOp":"append""#);
    seed_raw(&format!(
        r#"{{"type":"{kind}","seq":0,"time":0,"data":{data}{}}}"#,
        op.unwrap_or("")
    ))
}

fn append_one(kind: &str, data: &str) -> Result<(), AppendError> {
    let mut s = Sess::new();
    let op = matches!(kind, "user/message" | "assistant/message" | "tool/result")
        .then(app)
        .flatten();
    let before = s.state.clone();
    let r = s.append(kind, data, op, None).map(|_| ());
    if r.is_err() {
        assert_eq!(
            s.state, before,
            "a refused append leaves the state unchanged"
        );
    }
    r
}

fn load_one(kind: &str, data: &str) -> Result<(), String> {
    let mut e = Event::new(kind, 0, 0, data);
    if matches!(kind, "user/message" | "assistant/message" | "tool/result") {
        e.surface_op = app();
    }
    load_stored("s", &header(), &[e], InvariantMode::Off)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

// --- lossless JSON ---------------------------------------------------------------------------

#[test]
fn append_refuses_data_that_is_not_lossless_json() {
    for bad in [
        "-0",
        "[-0.0]",
        r#"{"a":-0e3}"#,
        "1e400",
        "{",
        "",
        "[1,]",
        "undefined",
        "NaN",
    ] {
        let err = append_one("plan/mode", bad).unwrap_err();
        assert!(
            err.to_string().starts_with("append at seq 0 refused: session event \"plan/mode\" carries non-JSON-serializable data"),
            "{bad}: {err}"
        );
        assert!(matches!(
            err,
            AppendError::Shape {
                source: ShapeError::NonJsonData { .. },
                ..
            }
        ));
    }
    for good in [
        "null",
        "true",
        r#""s""#,
        "1.25",
        r#"{"t":"\ud800"}"#,
        r#"{"a":1,"a":2}"#,
        "0",
        "-1e-7",
    ] {
        append_one("plan/mode", good).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
}

#[test]
fn deep_data_is_accepted_on_append_and_load() {
    let deep = format!("{}1{}", r#"{"a":"#.repeat(20_000), "}".repeat(20_000));
    append_one("plugin/deep", &deep).unwrap();
    load_one("plan/mode", &deep).unwrap();
    let arrays = format!("{}{}", "[".repeat(5_000), "]".repeat(5_000));
    append_one("plugin/deep", &arrays).unwrap();
}

#[test]
fn load_accepts_negative_zero_as_dsh_restore_does() {
    load_one("plan/mode", r#"{"active":true,"n":-0}"#).unwrap();
}

// --- envelope -----------------------------------------------------------------------------------

#[test]
fn seed_envelope_matrix() {
    let d = r#""data":{}"#;
    for (text, defect) in [
        (
            format!(r#"{{"type":"plan/mode","seq":0,"time":0,{d},"extra":1}}"#),
            Some(EnvelopeDefect::ExtraKey("extra".into())),
        ),
        (
            format!(r#"{{"type":7,"seq":0,"time":0,{d}}}"#),
            Some(EnvelopeDefect::TypeNotString),
        ),
        (
            format!(r#"{{"type":"plan/mode","seq":"0","time":0,{d}}}"#),
            Some(EnvelopeDefect::BadSeq),
        ),
        (
            format!(r#"{{"type":"plan/mode","seq":-1,"time":0,{d}}}"#),
            Some(EnvelopeDefect::BadSeq),
        ),
        (
            format!(r#"{{"type":"plan/mode","seq":0.5,"time":0,{d}}}"#),
            Some(EnvelopeDefect::BadSeq),
        ),
        (
            format!(r#"{{"type":"plan/mode","seq":0,"time":0.5,{d}}}"#),
            Some(EnvelopeDefect::BadTime),
        ),
        (
            format!(r#"{{"type":"plan/mode","seq":0,"time":"1",{d}}}"#),
            Some(EnvelopeDefect::BadTime),
        ),
        (
            r#"{"type":"plan/mode","seq":0,"time":0}"#.to_string(),
            Some(EnvelopeDefect::MissingData),
        ),
        (
            format!(r#"{{"type":"plan/mode","seq":0,"time":0,{d},"ignorable":false}}"#),
            Some(EnvelopeDefect::IgnorableNotTrue),
        ),
        (
            format!(r#"{{"type":"plan/mode","seq":0,"time":0,{d},"ignorable":"yes"}}"#),
            Some(EnvelopeDefect::IgnorableNotTrue),
        ),
    ] {
        let stored = parse_stored_event(&text, None).unwrap();
        assert_eq!(stored.defects.envelope, defect, "{text}");
        assert_eq!(
            seed_raw(&text).unwrap_err(),
            "seed event at index 0 has an invalid event envelope",
            "{text}"
        );
    }
    // Negative time is legal; ignorable:true is preserved.
    let stored = parse_stored_event(
        r#"{"type":"x/y","seq":0,"time":-5,"data":null,"ignorable":true}"#,
        None,
    )
    .unwrap();
    assert!(stored.defects.is_none());
    assert!(stored.event.ignorable);
    assert_eq!(stored.event.time, -5);
    seed_raw(r#"{"type":"x/y","seq":0,"time":-5,"data":null,"ignorable":true}"#).unwrap();
    assert_eq!(
        seed_raw(r#"{"type":"plan/mode","seq":1,"time":0,"data":{}}"#).unwrap_err(),
        "seed event at index 0 has seq 1 (expected 0); seed must be contiguous from 0"
    );
}

#[test]
fn parse_keeps_the_data_text_and_key_order() {
    let text = r#"{"seq":3,"type":"user/message","time":9,"surfaceOp":"append","data" : {"id":"u","role":"user","content":[],"source":{"kind":"user"},"n":1.50}}"#;
    let stored = parse_stored_event(text, None).unwrap();
    assert_eq!(
        stored.event.data,
        r#"{"id":"u","role":"user","content":[],"source":{"kind":"user"},"n":1.50}"#
    );
    assert!(matches!(
        stored.event.layout.key_order,
        sessionlog::event::KeyOrder::Custom(_)
    ));
    let canonical = parse_stored_event(
        r#"{"type":"a","seq":0,"time":0,"data":1,"sourceEventSeqs":[],"surfaceOp":"append"}"#,
        None,
    )
    .unwrap();
    assert_eq!(
        canonical.event.layout.key_order,
        sessionlog::event::KeyOrder::Canonical
    );
    let closer = parse_stored_event(
        r#"{"type":"a","seq":0,"time":0,"data":1,"surfaceOp":"append","sourceEventSeqs":[]}"#,
        None,
    )
    .unwrap();
    assert_eq!(
        closer.event.layout.key_order,
        sessionlog::event::KeyOrder::SurfaceOpFirst
    );
}

// --- message shapes ------------------------------------------------------------------------------

fn shape_cases() -> Vec<(&'static str, String, &'static str)> {
    let tool = |f: &dyn Fn(String) -> String| f(tool_result_data(1, 1, "c", "x"));
    vec![
        (
            "user/message",
            r#"{"role":"user","content":[],"source":{"kind":"user"}}"#.into(),
            "lacks an identified message",
        ),
        (
            "user/message",
            r#"{"id":"","role":"user","content":[],"source":{"kind":"user"}}"#.into(),
            "lacks an identified message",
        ),
        ("user/message", "[]".into(), "lacks an identified message"),
        (
            "user/message",
            r#"{"id":"u","role":"assistant","content":[],"source":{"kind":"user"}}"#.into(),
            "message must have role \"user\"",
        ),
        (
            "user/message",
            r#"{"id":"u","role":"user","content":[],"source":{"kind":""}}"#.into(),
            "message has invalid source",
        ),
        (
            "user/message",
            r#"{"id":"u","role":"user","content":"hi","source":{"kind":"user"}}"#.into(),
            "message has invalid content",
        ),
        (
            "assistant/message",
            r#"{"turn":1,"step":1}"#.into(),
            "lacks an identified message",
        ),
        (
            "assistant/message",
            assistant_data(1, 1, "a", "x").replace(r#""provider":"mock","#, ""),
            "message must have model source",
        ),
        (
            "assistant/message",
            assistant_data(1, 1, "a", "x").replace(r#""kind":"model""#, r#""kind":"user""#),
            "message must have model source",
        ),
        (
            "assistant/message",
            assistant_data(1, 1, "a", "x").replace(r#""role":"assistant""#, r#""role":"user""#),
            "message must have role \"assistant\"",
        ),
        (
            "tool/result",
            tool(&|d| d.replace(r#""kind":"tool","callId":"c""#, r#""kind":"tool""#)),
            "message must have tool source",
        ),
        (
            "tool/result",
            tool(&|d| d.replace(r#""type":"tool-result""#, r#""type":"text""#)),
            "message must contain one tool-result block",
        ),
        (
            "tool/result",
            tool(&|d| d.replace(r#""toolCallId":"c""#, r#""toolCallId":"d""#)),
            "message has mismatched tool call ids",
        ),
    ]
}

#[test]
fn message_shape_errors_on_seed_load_and_append() {
    for (kind, data, fragment) in shape_cases() {
        let seed = seed_one(kind, &data).unwrap_err();
        assert_eq!(seed, format!("seed {kind} at index 0 {fragment}"), "{data}");
        let load = load_one(kind, &data).unwrap_err();
        assert_eq!(
            load,
            format!(
                "stored session \"s\" failed validation: Error: session event at seq 0 {fragment}"
            )
        );
        let append = append_one(kind, &data).unwrap_err();
        assert_eq!(
            append.to_string(),
            format!("append at seq 0 refused: session event \"{kind}\" {fragment}")
        );
    }
    // Plugin blocks and sources are tolerated; plugin events may carry any JSON.
    seed_one("user/message", r#"{"id":"u","role":"user","content":[{"type":"future"}],"source":{"kind":"goal","goalId":"g"}}"#).unwrap();
    seed_one("plan/mode", "null").unwrap();
}

#[test]
fn request_header_rules() {
    let rh = |header: &str| format!(r#"{{"header":{header},"reason":"initial"}}"#);
    let bad = [
        (rh(r#"{}"#), "lacks provider/model"),
        (rh(r#"[]"#), "lacks provider/model"),
        (
            r#"{"reason":"initial"}"#.to_string(),
            "lacks provider/model",
        ),
        (
            rh(r#"{"config":{"provider":"","model":"m"}}"#),
            "lacks provider/model",
        ),
        (
            rh(r#"{"config":{"provider":"p","model":"m","reasoningEffort":""}}"#),
            "has an invalid reasoningEffort",
        ),
        (
            rh(r#"{"config":{"provider":"p","model":"m","reasoningEffort":1}}"#),
            "has an invalid reasoningEffort",
        ),
        (
            rh(r#"{"config":{"provider":"p","model":"m"},"adapterDefaults":null}"#),
            "has invalid adapterDefaults",
        ),
        (
            rh(r#"{"config":{"provider":"p","model":"m"},"adapterDefaults":[]}"#),
            "has invalid adapterDefaults",
        ),
        (
            rh(r#"{"config":{"provider":"p","model":"m"},"adapterDefaults":{"unknown":true}}"#),
            "has invalid adapterDefaults",
        ),
        (
            rh(
                r#"{"config":{"provider":"p","model":"m","maxTokens":5},"adapterDefaults":{"maxTokens":false}}"#,
            ),
            "has invalid adapterDefaults",
        ),
        (
            rh(
                r#"{"config":{"provider":"p","model":"m"},"adapterDefaults":{"reasoningEffort":true}}"#,
            ),
            "has invalid adapterDefaults",
        ),
    ];
    for (data, fragment) in bad {
        assert_eq!(
            seed_one("request/header", &data).unwrap_err(),
            format!("seed request/header at index 0 {fragment}"),
            "{data}"
        );
        assert!(
            append_one("request/header", &data)
                .unwrap_err()
                .to_string()
                .ends_with(fragment)
        );
    }
    for good in [
        rh(
            r#"{"config":{"provider":"p","model":"m","reasoningEffort":"high","maxTokens":9},"adapterDefaults":{"reasoningEffort":true,"maxTokens":true},"system":"s","tools":[]}"#,
        ),
        rh(r#"{"config":{"provider":"p","model":"m"},"tools":"ph-tools"}"#),
    ] {
        seed_one("request/header", &good).unwrap();
    }
}

#[test]
fn retired_vocabulary_is_refused_everywhere() {
    let err = append_one("request/header-delta", "{}").unwrap_err();
    assert_eq!(
        err.to_string(),
        "append at seq 0 refused: session event \"request/header-delta\" uses unsupported legacy request/header-delta format"
    );
    assert_eq!(
        seed_one("request/header-delta", "{}").unwrap_err(),
        "seed event at index 0 uses unsupported legacy request/header-delta format"
    );
    assert_eq!(
        load_one("request/header-delta", "{}").unwrap_err(),
        "stored session \"s\" failed validation: Error: session \"s\" contains unsupported legacy request/header-delta event at seq 0"
    );
    assert_eq!(
        load_one("mode/set", "{}").unwrap_err(),
        "stored session \"s\" failed validation: Error: session \"s\" contains unsupported legacy mode/set event at seq 0"
    );
    let fallback = r#"{"header":{"config":{"provider":"p","model":"m"}},"reason":"fallback"}"#;
    assert!(
        append_one("request/header", fallback)
            .unwrap_err()
            .to_string()
            .ends_with("uses unsupported legacy request/header reason \"fallback\"")
    );
    assert_eq!(
        seed_one("request/header", fallback).unwrap_err(),
        "seed event at index 0 uses unsupported legacy request/header reason \"fallback\""
    );
    assert_eq!(
        load_one("request/header", fallback).unwrap_err(),
        "stored session \"s\" failed validation: Error: session \"s\" contains unsupported legacy request/header reason \"fallback\" at seq 0"
    );
}

// --- file mutations ------------------------------------------------------------------------------

const SHA1: &str = "0123456789abcdef0123456789abcdef01234567";
const SHA256: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn receipt(order: u64, op: &str) -> String {
    let (b1, a1, b2, a2, diff) = match op {
        "create" => (
            "null".into(),
            format!("\"{SHA1}\""),
            "null".into(),
            format!("\"{SHA256}\""),
            r#"{"oldText":null,"newText":"x"}"#,
        ),
        "delete" => (
            format!("\"{SHA1}\""),
            "null".into(),
            format!("\"{SHA256}\""),
            "null".into(),
            r#"{"oldText":"x","newText":null}"#,
        ),
        _ => (
            format!("\"{SHA1}\""),
            format!("\"{SHA1}\""),
            format!("\"{SHA256}\""),
            format!("\"{SHA256}\""),
            r#"{"oldText":"a","newText":"b"}"#,
        ),
    };
    format!(
        r#"{{"version":1,"commitOrder":{order},"beforeSha1":{b1},"afterSha1":{a1},"beforeSha256":{b2},"afterSha256":{a2},"path":"a.txt","operation":"{op}","diffs":[{diff}]}}"#
    )
}

fn with_mutations(mutations: &str) -> String {
    tool_result_data(1, 1, "c", "x").replacen('{', &format!(r#"{{"mutations":{mutations},"#), 1)
}

#[test]
fn file_mutation_receipt_matrix() {
    for op in ["create", "modify", "delete"] {
        append_one(
            "tool/result",
            &with_mutations(&format!("[{}]", receipt(1, op))),
        )
        .unwrap();
    }
    let good = receipt(1, "modify");
    let invalid: Vec<(String, &str)> = vec![
        ("{}".into(), "has invalid file mutations"),
        ("[]".into(), "has invalid file mutations"),
        ("[1]".into(), "file mutation at index 0 is invalid"),
        (
            format!("[{}]", good.replace(r#""version":1"#, r#""version":2"#)),
            "file mutation at index 0 is invalid",
        ),
        (
            format!(
                "[{}]",
                good.replace(r#""commitOrder":1"#, r#""commitOrder":-1"#)
            ),
            "file mutation at index 0 is invalid",
        ),
        (
            format!(
                "[{}]",
                good.replace(r#""commitOrder":1"#, r#""commitOrder":0.5"#)
            ),
            "file mutation at index 0 is invalid",
        ),
        (
            format!(
                "[{}]",
                good.replacen("0123456789abcdef", "0123456789ABCDEF", 1)
            ),
            "file mutation at index 0 is invalid",
        ),
        (
            format!(
                "[{}]",
                good.replace(r#","path":"a.txt""#, r#","path":"  ""#)
            ),
            "file mutation at index 0 is invalid",
        ),
        (
            format!(
                "[{}]",
                good.replace(r#""operation":"modify""#, r#""operation":"rename""#)
            ),
            "file mutation at index 0 is invalid",
        ),
        (
            format!(
                "[{}]",
                receipt(1, "create")
                    .replace(r#""beforeSha1":null"#, &format!(r#""beforeSha1":"{SHA1}""#))
            ),
            "file mutation at index 0 is invalid",
        ),
        (
            format!(
                "[{}]",
                good.replacen(
                    &format!(r#""afterSha1":"{SHA1}""#),
                    r#""afterSha1":null"#,
                    1
                )
            ),
            "file mutation at index 0 is invalid",
        ),
        (
            format!(
                "[{}]",
                good.replace(
                    r#","diffs":[{"oldText":"a","newText":"b"}]"#,
                    r#","diffs":[]"#
                )
            ),
            "file mutation at index 0 is invalid",
        ),
        (
            format!(
                "[{}]",
                good.replace(r#""version":1,"#, r#""version":1,"extra":true,"#)
            ),
            "file mutation at index 0 is invalid",
        ),
        (
            format!("[{}]", good.replace(r#","path":"a.txt""#, "")),
            "file mutation at index 0 is invalid",
        ),
        (
            format!(
                "[{}]",
                good.replace(
                    r#"{"oldText":"a","newText":"b"}"#,
                    r#"{"oldText":null,"newText":null}"#
                )
            ),
            "file mutation at index 0 diff at index 0 is invalid",
        ),
        (
            format!(
                "[{}]",
                good.replace(
                    r#"{"oldText":"a","newText":"b"}"#,
                    r#"{"oldText":"a","newText":"b","x":1}"#
                )
            ),
            "file mutation at index 0 diff at index 0 is invalid",
        ),
        (
            format!(
                "[{}]",
                receipt(1, "create").replace(
                    r#"{"oldText":null,"newText":"x"}"#,
                    r#"{"oldText":"o","newText":"x"}"#
                )
            ),
            "file mutation at index 0 diff at index 0 is invalid",
        ),
        (
            format!(
                "[{}]",
                receipt(1, "delete").replace(
                    r#"{"oldText":"x","newText":null}"#,
                    r#"{"oldText":"x","newText":"n"}"#
                )
            ),
            "file mutation at index 0 diff at index 0 is invalid",
        ),
        (
            format!(
                "[{good},{}]",
                good.replace(r#""newText":"b""#, r#""newText":1"#)
            ),
            "file mutation at index 1 diff at index 0 is invalid",
        ),
    ];
    for (mutations, fragment) in invalid {
        let data = with_mutations(&mutations);
        let err = append_one("tool/result", &data).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("append at seq 0 refused: session event \"tool/result\" {fragment}"),
            "{mutations}"
        );
        assert_eq!(
            seed_one("tool/result", &data).unwrap_err(),
            format!("seed event at index 0 {fragment}")
        );
        let dispatch =
            format!(r#"{{"rootCallId":"r","isError":false,"content":[],"mutations":{mutations}}}"#);
        assert!(
            append_one("tool/code-dispatch", &dispatch)
                .unwrap_err()
                .to_string()
                .ends_with(fragment)
        );
    }
}

#[test]
fn commit_orders_are_unique_per_session() {
    let mut s = Sess::new();
    let twice = format!(
        r#"{{"mutations":[{},{}]}}"#,
        receipt(3, "create"),
        receipt(3, "modify")
    );
    let err = s
        .append("tool/code-dispatch", &twice, None, None)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "append at seq 0 refused: session event \"tool/code-dispatch\" reuses file mutation commit order 3"
    );
    s.push(
        "tool/code-dispatch",
        &format!(r#"{{"mutations":[{}]}}"#, receipt(3, "create")),
        None,
        None,
    );
    assert!(s.state.has_commit_order(3.0));
    let err = s
        .append(
            "tool/code-dispatch",
            &format!(r#"{{"mutations":[{}]}}"#, receipt(3, "modify")),
            None,
            None,
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("reuses file mutation commit order 3")
    );
    // Any event type's numeric commitOrder counts (validated only on the two receipt types).
    let err = s
        .append(
            "plugin/x",
            r#"{"mutations":[{"commitOrder":3}]}"#,
            None,
            None,
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("reuses file mutation commit order 3")
    );
    // Across seed events.
    let seed = vec![
        ev(
            "tool/code-dispatch",
            0,
            &format!(r#"{{"mutations":[{}]}}"#, receipt(7, "create")),
            None,
            None,
        ),
        ev(
            "tool/code-dispatch",
            1,
            &format!(r#"{{"mutations":[{}]}}"#, receipt(7, "modify")),
            None,
            None,
        ),
    ];
    assert_eq!(
        SessionState::rebuild(&seed, InvariantMode::Off)
            .unwrap_err()
            .to_string(),
        "seed event at index 1 reuses file mutation commit order 7"
    );
}

#[test]
fn pruning_a_result_with_mutations_is_refused_as_dsh_does() {
    // decisions.md keeps dsh's rule: the rewrite must copy `mutations`, which reuses orders.
    let mut s = Sess::new();
    let data = with_mutations(&format!("[{}]", receipt(1, "modify")));
    s.push("tool/result", &data, app(), None);
    let pruned = data.replace(r#""text":"x""#, r#""text":"[pruned]""#);
    let err = s
        .append("tool/result", &pruned, replace(0, 0), Some(vec![0]))
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("reuses file mutation commit order 1"),
        "{err}"
    );
}

// --- vocabulary ----------------------------------------------------------------------------------

#[test]
fn unknown_types_are_accepted_on_append_and_refused_on_load_unless_ignorable() {
    append_one("future/thing", r#"{"x":1}"#).unwrap();
    let err = load_one("future/thing", r#"{"x":1}"#).unwrap_err();
    assert_eq!(
        err,
        "session \"s\" contains event type \"future/thing\" (seq 0) unknown to this harness and not marked ignorable; refusing to interpret the log — it was likely written by a newer harness"
    );
    let mut e = Event::new("future/thing", 0, 0, "{}");
    e.ignorable = true;
    let loaded = load_stored("s", &header(), &[e], InvariantMode::Off).unwrap();
    assert_eq!(
        loaded.state.next_seq(),
        1,
        "ignorable unknown events are kept"
    );
    assert_eq!(KNOWN_SESSION_EVENT_TYPES.len(), 48);
}

#[test]
fn format_version_and_identity_refusals() {
    let mut h = header();
    h.version = 1;
    let err = load_stored("s", &h, &[], InvariantMode::Off).unwrap_err();
    assert!(matches!(err, LoadError::FormatUnsupported { .. }));
    assert_eq!(
        err.to_string(),
        "session \"s\" uses log format v1, but this harness reads only v0: the log was written by a newer harness — upgrade the harness to open it"
    );
    let err = load_stored("other", &header(), &[], InvariantMode::Off).unwrap_err();
    assert_eq!(
        err.to_string(),
        "stored session \"other\" failed validation: Error: stored session identity mismatch: requested \"other\", header contains \"s\""
    );
    let mut h = header();
    h.cwd = Some("rel".into());
    let err = load_stored("s", &h, &[], InvariantMode::Off).unwrap_err();
    assert_eq!(
        err.to_string(),
        "stored session \"s\" failed validation: Error: session header cwd must be an absolute path, got \"rel\""
    );
}

#[test]
fn header_matrix() {
    let ok = header();
    validate_header("s", &ok).unwrap();
    let mut cases: Vec<(SessionHeader, HeaderError)> = Vec::new();
    let mut h = ok.clone();
    h.version = 2;
    cases.push((h, HeaderError::Version("2".into())));
    let mut h = ok.clone();
    h.id = "t".into();
    cases.push((
        h,
        HeaderError::IdMismatch {
            header: "t".into(),
            session: "s".into(),
        },
    ));
    let mut h = ok.clone();
    h.created_at = 1 << 53;
    cases.push((h, HeaderError::CreatedAt));
    let mut h = ok.clone();
    h.seed_length = Some(1 << 53);
    cases.push((h, HeaderError::SeedLength));
    let mut h = ok.clone();
    h.origin = Some("parent".into());
    cases.push((h, HeaderError::Origin));
    let mut h = ok.clone();
    h.delegation_depth = Some(u64::MAX);
    cases.push((h, HeaderError::DelegationDepth));
    let mut h = ok.clone();
    h.owner = Some(String::new());
    cases.push((h, HeaderError::Owner));
    let mut h = ok.clone();
    h.extra = vec![("k".into(), "-0".into())];
    assert!(
        validate_header("s", &h).is_ok(),
        "restored extras follow JSON.parse"
    );
    h.extra = vec![("k".into(), "{".into())];
    assert!(matches!(
        validate_header("s", &h),
        Err(HeaderError::NotLossless { .. })
    ));
    for (h, expected) in cases {
        assert_eq!(validate_header("s", &h).unwrap_err(), expected);
    }
}

// --- legacy read-side conversion -------------------------------------------------------------------

fn convert(events: &[Event]) -> Result<Vec<Event>, LegacyError> {
    LegacyView::convert("s", events).map(|v| v.apply(events))
}

fn legacy(kind: &str, seq: u64, data: &str, op: Option<sessionlog::event::SurfaceOp>) -> Event {
    ev(kind, seq, data, op, None)
}

#[test]
fn legacy_turn_shapes() {
    let out = convert(&[legacy(
        "turn/start",
        0,
        r#"{"turn":1,"trigger":{"kind":"message","x":1}}"#,
        None,
    )])
    .unwrap();
    assert_eq!(out[0].data, r#"{"turn":1}"#);
    for (reason, converted) in [
        (
            r#"{"kind":"aborted"}"#,
            r#"{"kind":"aborted","reason":{"kind":"legacy"}}"#,
        ),
        (
            r#"{"kind":"disposed"}"#,
            r#"{"kind":"aborted","reason":{"kind":"disposed"}}"#,
        ),
        (
            r#"{"kind":"error","step":2,"failure":{"message":"m","code":"C","status":500}}"#,
            r#"{"kind":"error","error":{"message":"m","code":"C","status":500}}"#,
        ),
        (
            r#"{"kind":"error","step":0,"message":"m"}"#,
            r#"{"kind":"error","error":{"message":"m","code":"UNKNOWN"}}"#,
        ),
        (
            r#"{"kind":"error","step":0,"message":"m","code":"X"}"#,
            r#"{"kind":"error","error":{"message":"m","code":"X"}}"#,
        ),
        (
            r#"{"kind":"aborted","reason":{"kind":"user"}}"#,
            r#"{"kind":"aborted","reason":{"kind":"user"}}"#,
        ),
        (r#"{"kind":"future"}"#, r#"{"kind":"future"}"#),
    ] {
        let data = format!(r#"{{"reason":{reason},"turn":1}}"#);
        let out = convert(&[legacy("turn/end", 0, &data, None)]).unwrap();
        assert_eq!(
            out[0].data,
            format!(r#"{{"reason":{converted},"turn":1}}"#),
            "{reason}"
        );
    }
    for bad in [
        r#"{"turn":0,"reason":{"kind":"completed"}}"#,
        r#"{"turn":1,"reason":{"kind":"completed","extra":true}}"#,
        r#"{"turn":1,"reason":null}"#,
        r#"{"turn":1,"reason":{"kind":"completed"},"x":1}"#,
        r#"{"turn":1,"reason":{"kind":"error","step":-1,"message":"m"}}"#,
        r#"{"turn":1,"reason":{"kind":"error","step":1}}"#,
        r#"{"turn":1,"reason":{"kind":7}}"#,
    ] {
        let err = convert(&[legacy("turn/end", 4, bad, None)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "session \"s\" contains malformed pre-react-loop turn/end at seq 4",
            "{bad}"
        );
    }
    let err = convert(&[legacy(
        "turn/start",
        0,
        r#"{"turn":1,"trigger":{"kind":""}}"#,
        None,
    )])
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "session \"s\" contains malformed pre-react-loop turn/start at seq 0"
    );
}

#[test]
fn legacy_message_shapes() {
    let events = vec![
        legacy(
            "steering/message",
            0,
            r#"{"turn":1,"content":[{"type":"text","text":"s"}],"source":{"kind":"user"}}"#,
            app(),
        ),
        legacy(
            "steering/message",
            1,
            r#"{"turn":1,"message":{"id":"w","role":"user","content":[],"source":{"kind":"user"}}}"#,
            app(),
        ),
        legacy(
            "user/message",
            2,
            r#"{"content":[],"source":{"kind":"user"}}"#,
            app(),
        ),
        legacy(
            "assistant/message",
            3,
            r#"{"turn":1,"step":1,"content":[{"type":"text","text":"a"}],"provenance":{"kind":"x","provider":"p","model":"m"}}"#,
            app(),
        ),
        legacy(
            "tool/result",
            4,
            r#"{"turn":1,"step":1,"callId":"c","content":[],"isError":false}"#,
            app(),
        ),
        ev(
            "tool/result",
            5,
            r#"{"turn":1,"step":1,"callId":"c","content":[{"type":"text","text":"pruned"}],"isError":false}"#,
            replace(4, 4),
            Some(vec![4]),
        ),
    ];
    let out = convert(&events).unwrap();
    assert_eq!(out[0].kind, "user/message");
    assert_eq!(
        out[0].data,
        r#"{"content":[{"type":"text","text":"s"}],"source":{"kind":"user"},"id":"legacy-message:s:0","role":"user"}"#
    );
    assert_eq!(
        out[1].data,
        r#"{"id":"w","role":"user","content":[],"source":{"kind":"user"}}"#
    );
    assert_eq!(
        out[2].data,
        r#"{"content":[],"source":{"kind":"user"},"id":"legacy-message:s:2","role":"user"}"#
    );
    assert_eq!(
        out[3].data,
        r#"{"turn":1,"step":1,"message":{"id":"legacy-message:s:3","role":"assistant","content":[{"type":"text","text":"a"}],"source":{"kind":"model","provider":"p","model":"m"}}}"#
    );
    assert_eq!(
        out[4].data,
        r#"{"turn":1,"step":1,"message":{"id":"legacy-message:s:4","role":"user","content":[{"type":"tool-result","toolCallId":"c","content":[],"isError":false}],"source":{"kind":"tool","callId":"c"}}}"#
    );
    assert!(
        out[5].data.contains(r#""id":"legacy-message:s:4""#),
        "a rewrite keeps its target's id"
    );
    // The converted log is a valid session; the stored events are untouched.
    let loaded = load_stored("s", &header(), &events, InvariantMode::Off).unwrap();
    assert_eq!(loaded.state.surface().nodes(), &[0, 1, 2, 3, 5]);
    assert_eq!(loaded.view.len(), 6);
    assert_eq!(events[2].data, r#"{"content":[],"source":{"kind":"user"}}"#);
    let err = convert(&[legacy(
        "steering/message",
        0,
        r#"{"turn":1,"text":"x"}"#,
        app(),
    )])
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "session \"s\" contains malformed pre-react-loop steering/message at seq 0"
    );
    // A current-looking malformed message is not disguised as legacy.
    let err = convert(&[legacy(
        "user/message",
        0,
        r#"{"role":"user","content":[],"source":{"kind":"user"}}"#,
        app(),
    )])
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "session event at seq 0 lacks an identified message"
    );
}

#[test]
fn load_reports_raw_marker_defects_in_dsh_order() {
    let h = header();
    let lines = [
        format!(
            r#"{{"type":"user/message","seq":0,"time":0,"data":{},"surfaceOp":"append"}}"#,
            user_data("a", "x")
        ),
        format!(
            r#"{{"type":"user/message","seq":1,"time":0,"data":{},"surfaceOp":{{"op":"replace","start":9,"end":0}},"sourceEventSeqs":"x"}}"#,
            user_data("b", "x")
        ),
    ];
    let stored: Vec<_> = lines
        .iter()
        .map(|l| parse_stored_event(l, None).unwrap())
        .collect();
    // The replace range is checked before the source list.
    let err = load_stored_raw("s", &h, &stored, InvariantMode::Off).unwrap_err();
    assert_eq!(
        err.to_string(),
        "stored session \"s\" failed validation: Error: invalid seed event at index 1: surface replace: start seq 9 not found in surface"
    );
    assert!(matches!(
        err,
        LoadError::Corrupt {
            cause: sessionlog::session::load::LoadCause::Seed(SeedError::Surface { index: 1, .. }),
            ..
        }
    ));
    let _ = RawDefects::default();
}

#[test]
fn append_refuses_records_dsh_would_refuse_or_rewrite_on_load() {
    let err = append_one("mode/set", r#"{"mode":"plan"}"#).unwrap_err();
    assert_eq!(
        err.to_string(),
        "append at seq 0 refused: session event \"mode/set\" uses unsupported legacy mode/set format"
    );
    let err = append_one(
        "steering/message",
        r#"{"turn":1,"content":[],"source":{"kind":"user"}}"#,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("uses unsupported legacy steering/message format")
    );
    for bad in [
        r#"{"turn":0,"reason":{"kind":"completed"}}"#,
        r#"{"turn":1,"reason":{"kind":"completed","extra":1}}"#,
        r#"{"turn":1}"#,
    ] {
        let err = append_one("turn/end", bad).unwrap_err();
        assert_eq!(
            err.to_string(),
            "append at seq 0 refused: session event \"turn/end\" is a malformed pre-react-loop turn/end (dsh refuses to load it)",
            "{bad}"
        );
    }
    let err = append_one("turn/start", r#"{"turn":1,"trigger":{}}"#).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("malformed pre-react-loop turn/start (dsh refuses to load it)")
    );
    // Shapes dsh converts (and therefore loads) stay accepted.
    append_one("turn/start", r#"{"turn":1,"trigger":{"kind":"message"}}"#).unwrap();
    append_one("turn/end", r#"{"turn":1,"reason":{"kind":"disposed"}}"#).unwrap();
    append_one("turn/start", r#"{"turn":1}"#).unwrap();
}
