//! dsh's `repair.spec.ts` (§11), the crash-closer vectors of persistence §9.3, and the
//! incremental closer scan.

use crate::common::session_build;

use session_build::*;
use sessionlog::event::{Event, KeyOrder, SurfaceOp};
use sessionlog::session::SessionState;
use sessionlog::session::invariants::{InvariantMode, verify};
use sessionlog::session::repair::{
    NOT_STARTED_TEXT, OUTCOME_UNKNOWN_TEXT, RepairScan, interrupted_turn_closers,
};

/// The event as dsh writes a line (envelope keys in the event's key order).
fn line(e: &Event) -> String {
    let mut parts = vec![
        format!("\"type\":\"{}\"", e.kind),
        format!("\"seq\":{}", e.seq),
        format!("\"time\":{}", e.time),
        format!("\"data\":{}", e.data),
    ];
    let op = e.surface_op.map(|op| match op {
        SurfaceOp::Append => "\"surfaceOp\":\"append\"".to_string(),
        SurfaceOp::Replace { start, end } => {
            format!("\"surfaceOp\":{{\"op\":\"replace\",\"start\":{start},\"end\":{end}}}")
        }
    });
    let src = e.source_event_seqs.as_ref().map(|s| {
        format!(
            "\"sourceEventSeqs\":[{}]",
            s.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
        )
    });
    match e.layout.key_order {
        KeyOrder::SurfaceOpFirst => parts.extend(op.into_iter().chain(src)),
        _ => parts.extend(src.into_iter().chain(op)),
    }
    format!("{{{}}}", parts.join(","))
}

fn log(events: &[(&str, String)]) -> Vec<Event> {
    events
        .iter()
        .enumerate()
        .map(|(i, (kind, data))| {
            let op = matches!(*kind, "user/message" | "assistant/message" | "tool/result")
                .then_some(SurfaceOp::Append);
            let mut e = ev(kind, i as u64, data, op, None);
            e.time = i as i64 + 1;
            e
        })
        .collect()
}

fn ts(n: u64) -> String {
    format!(r#"{{"turn":{n}}}"#)
}
fn te(n: u64) -> String {
    format!(r#"{{"turn":{n},"reason":{{"kind":"completed"}}}}"#)
}
fn ss(t: u64, s: u64) -> String {
    format!(r#"{{"turn":{t},"step":{s}}}"#)
}

fn kinds(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

#[test]
fn balanced_or_empty_logs_need_no_closers() {
    assert!(interrupted_turn_closers(&[]).is_empty());
    let balanced = log(&[
        ("turn/start", ts(1)),
        ("turn/end", te(1)),
        ("plan/mode", r#"{"active":true}"#.into()),
    ]);
    assert!(interrupted_turn_closers(&balanced).is_empty());
}

#[test]
fn an_open_turn_without_a_step_gets_an_interrupted_turn_end() {
    let closers = interrupted_turn_closers(&log(&[("turn/start", ts(1))]));
    assert_eq!(closers.len(), 1);
    assert_eq!(
        line(&closers[0]),
        r#"{"type":"turn/end","seq":1,"time":1,"data":{"turn":1,"reason":{"kind":"interrupted"}}}"#
    );
}

#[test]
fn an_open_step_is_closed_before_the_turn() {
    // persistence §9.3: oneTurnLog (6 events) + turn/start s6 t7, step/start s7 t8.
    let mut events = log(&[
        ("turn/start", ts(1)),
        ("step/start", ss(1, 1)),
        ("user/message", user_data("u", "x")),
        ("assistant/message", assistant_data(1, 1, "a", "y")),
        ("step/end", ss(1, 1)),
        ("turn/end", te(1)),
        ("turn/start", ts(2)),
        ("step/start", ss(2, 1)),
    ]);
    events[6].time = 7;
    events[7].time = 8;
    let closers = interrupted_turn_closers(&events);
    assert_eq!(
        closers.iter().map(line).collect::<Vec<_>>(),
        vec![
            r#"{"type":"step/end","seq":8,"time":8,"data":{"turn":2,"step":1}}"#,
            r#"{"type":"turn/end","seq":9,"time":8,"data":{"turn":2,"reason":{"kind":"interrupted"}}}"#,
        ]
    );
}

#[test]
fn an_assistant_tool_call_without_a_recorded_call_gets_a_not_started_result() {
    let mut events = log(&[
        ("turn/start", ts(1)),
        ("step/start", ss(1, 1)),
        ("user/message", user_data("u", "x")),
        ("assistant/message", assistant_data(1, 1, "a", "y")),
        ("step/end", ss(1, 1)),
        ("turn/end", te(1)),
        ("turn/start", ts(2)),
        ("step/start", ss(2, 1)),
        (
            "assistant/message",
            assistant_calls(2, 1, "a2", &["call-x"]),
        ),
    ]);
    events[8].time = 9;
    let closers = interrupted_turn_closers(&events);
    assert_eq!(kinds(&closers), vec!["tool/result", "step/end", "turn/end"]);
    assert_eq!(
        line(&closers[0]),
        format!(
            r#"{{"type":"tool/result","seq":9,"time":9,"data":{{"turn":2,"step":1,"message":{{"id":"interrupted-tool-result-call-x-9","role":"user","source":{{"kind":"tool","callId":"call-x"}},"content":[{{"type":"tool-result","toolCallId":"call-x","isError":true,"content":[{{"type":"text","text":"{NOT_STARTED_TEXT}"}}]}}]}},"error":{{"name":"ToolNotStartedError","code":"TOOL_NOT_STARTED"}}}},"surfaceOp":"append"}}"#
        )
    );
    assert_eq!((closers[1].seq, closers[1].time), (10, 9));
    assert_eq!((closers[2].seq, closers[2].time), (11, 9));
}

#[test]
fn a_recorded_tool_call_gets_an_outcome_unknown_result_citing_it() {
    let events = log(&[
        ("turn/start", ts(1)),
        ("step/start", ss(1, 1)),
        (
            "assistant/message",
            assistant_calls(1, 1, "a", &["call-risk"]),
        ),
        ("tool/call", tool_call_data(1, 1, "call-risk")),
    ]);
    let closers = interrupted_turn_closers(&events);
    assert_eq!(kinds(&closers), vec!["tool/result", "step/end", "turn/end"]);
    let result = &closers[0];
    assert_eq!(result.surface_op, Some(SurfaceOp::Append));
    assert_eq!(result.source_event_seqs, Some(vec![3]));
    assert_eq!(result.layout.key_order, KeyOrder::SurfaceOpFirst);
    assert!(
        result.data.contains(
            r#""error":{"name":"ToolOutcomeUnknownError","code":"TOOL_OUTCOME_UNKNOWN"}"#
        )
    );
    assert!(result.data.contains(OUTCOME_UNKNOWN_TEXT));
    assert!(
        OUTCOME_UNKNOWN_TEXT.contains("retry only if the operation is read-only or idempotent")
    );
    assert!(OUTCOME_UNKNOWN_TEXT.contains("first verify external state or ask the user"));
    assert!(line(result).ends_with(r#","surfaceOp":"append","sourceEventSeqs":[3]}"#));
}

#[test]
fn answered_calls_closed_steps_and_earlier_turns_need_no_results() {
    // Answered call → no result.
    let answered = log(&[
        ("turn/start", ts(1)),
        ("step/start", ss(1, 1)),
        ("assistant/message", assistant_calls(1, 1, "a", &["c1"])),
        ("tool/call", tool_call_data(1, 1, "c1")),
        ("tool/result", tool_result_data(1, 1, "c1", "ok")),
    ]);
    assert_eq!(
        kinds(&interrupted_turn_closers(&answered)),
        vec!["step/end", "turn/end"]
    );
    // A call whose step already closed → only turn/end (seq 4).
    let closed = log(&[
        ("turn/start", ts(1)),
        ("step/start", ss(1, 1)),
        ("assistant/message", assistant_calls(1, 1, "a", &["c1"])),
        ("step/end", ss(1, 1)),
    ]);
    let closers = interrupted_turn_closers(&closed);
    assert_eq!(kinds(&closers), vec!["turn/end"]);
    assert_eq!(closers[0].seq, 4);
    // Only the open turn's calls are repaired.
    let two_turns = log(&[
        ("turn/start", ts(1)),
        ("step/start", ss(1, 1)),
        ("assistant/message", assistant_calls(1, 1, "a", &["old"])),
        ("step/end", ss(1, 1)),
        ("turn/end", te(1)),
        ("turn/start", ts(2)),
        ("step/start", ss(2, 1)),
        ("assistant/message", assistant_calls(2, 1, "b", &["new"])),
    ]);
    let closers = interrupted_turn_closers(&two_turns);
    assert_eq!(kinds(&closers), vec!["tool/result", "step/end", "turn/end"]);
    assert!(closers[0].data.contains(r#""callId":"new""#));
    // A tool/call without an assistant block gets no result.
    let orphan = log(&[
        ("turn/start", ts(1)),
        ("step/start", ss(1, 1)),
        ("tool/call", tool_call_data(1, 1, "x")),
    ]);
    assert_eq!(
        kinds(&interrupted_turn_closers(&orphan)),
        vec!["step/end", "turn/end"]
    );
}

#[test]
fn multiple_calls_only_unanswered_ones_in_log_order() {
    let events = log(&[
        ("turn/start", ts(1)),
        ("step/start", ss(1, 1)),
        (
            "assistant/message",
            assistant_calls(1, 1, "a", &["c1", "c2", "c3"]),
        ),
        ("tool/call", tool_call_data(1, 1, "c2")),
        ("tool/result", tool_result_data(1, 1, "c1", "ok")),
    ]);
    let closers = interrupted_turn_closers(&events);
    assert_eq!(
        kinds(&closers),
        vec!["tool/result", "tool/result", "step/end", "turn/end"]
    );
    assert!(
        closers[0]
            .data
            .contains(r#""id":"interrupted-tool-result-c2-5""#)
    );
    assert_eq!(closers[0].source_event_seqs, Some(vec![3]));
    assert!(
        closers[1]
            .data
            .contains(r#""id":"interrupted-tool-result-c3-6""#)
    );
    assert_eq!(closers[1].source_event_seqs, None);
}

#[test]
fn closers_are_valid_appends_that_balance_the_log() {
    let events = log(&[
        ("turn/start", ts(1)),
        ("step/start", ss(1, 1)),
        (
            "assistant/message",
            assistant_calls(1, 1, "a", &["c1", "c2"]),
        ),
        ("tool/call", tool_call_data(1, 1, "c1")),
    ]);
    let mut state = SessionState::rebuild(&events, InvariantMode::Always).unwrap();
    let mut all = events.clone();
    for event in state.resume_events(1_000) {
        let plan = state.plan_append(&event, &all).unwrap();
        all.push(event);
        state.apply(plan).unwrap();
    }
    assert_eq!(
        kinds(&all[4..]),
        vec![
            "tool/result",
            "tool/result",
            "step/end",
            "turn/end",
            "session/end-seed"
        ]
    );
    assert_eq!(all.last().unwrap().time, 1_000);
    assert!(verify(&all).is_empty());
    assert!(!state.turn_open());
    assert!(state.closers().is_empty());
    // A second resume adds nothing: the log already ends with the marker.
    assert!(state.resume_events(2_000).is_empty());
    assert_eq!(state.last_end_seed(), Some(8));
}

#[test]
fn resume_of_a_balanced_or_empty_log_adds_only_the_marker() {
    let state = SessionState::new();
    let events = state.resume_events(5);
    assert_eq!(kinds(&events), vec!["session/end-seed"]);
    assert_eq!((events[0].seq, events[0].data.as_str()), (0, "{}"));
}

#[test]
fn the_incremental_scan_equals_the_pure_function_at_every_prefix() {
    let events = log(&[
        ("turn/start", ts(1)),
        ("step/start", ss(1, 1)),
        (
            "assistant/message",
            assistant_calls(1, 1, "a", &["c1", "c2"]),
        ),
        ("tool/call", tool_call_data(1, 1, "c2")),
        ("assistant/message", assistant_calls(1, 1, "b", &["c1"])),
        ("tool/result", tool_result_data(1, 1, "c2", "ok")),
        ("step/end", ss(1, 1)),
        ("turn/end", te(1)),
        ("turn/start", ts(2)),
    ]);
    let mut scan = RepairScan::new();
    let mut state = SessionState::with_invariants(InvariantMode::Off);
    for (i, e) in events.iter().enumerate() {
        scan.observe(e);
        let plan = state.plan_append(e, &events[..i].to_vec()).unwrap();
        state.apply(plan).unwrap();
        let pure = interrupted_turn_closers(&events[..=i]);
        assert_eq!(scan.closers(), pure, "prefix {i}");
        assert_eq!(state.closers(), pure, "prefix {i}");
    }
    // Re-registering c1 kept its first position.
    let at4 = interrupted_turn_closers(&events[..5]);
    assert!(at4[0].data.contains("c1") && at4[1].data.contains("c2"));
}
