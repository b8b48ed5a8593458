//! dsh's `invariant.spec.ts` (§11) and the §6 rules, in Rust.

use crate::common::session_build;

use session_build::*;
use sessionlog::event::Event;
use sessionlog::session::error::{InvariantRule, InvariantViolation};
use sessionlog::session::invariants::{InvariantMode, Trace, verify};
use sessionlog::session::state::SeedError;
use sessionlog::session::{AppendError, SessionState};

const TS1: &str = r#"{"turn":1}"#;
const TE1: &str = r#"{"turn":1,"reason":{"kind":"completed"}}"#;
const SS11: &str = r#"{"turn":1,"step":1}"#;

fn strict() -> Sess {
    Sess::with_mode(InvariantMode::Always)
}

/// The detail of an invariant refusal.
fn violation(r: Result<sessionlog::session::AppliedAppend, AppendError>) -> InvariantViolation {
    match r {
        Err(AppendError::Invariant { source }) => source,
        other => panic!("expected an invariant refusal, got {other:?}"),
    }
}

fn not_started_result(turn: u64, step: u64, call: &str) -> String {
    format!(
        r#"{{"turn":{turn},"step":{step},"message":{{"id":"ns-{call}","role":"user","content":[{{"type":"tool-result","toolCallId":"{call}","content":[],"isError":true}}],"source":{{"kind":"tool","callId":"{call}"}}}},"error":{{"name":"ToolNotStartedError","code":"TOOL_NOT_STARTED"}}}}"#
    )
}

fn open_step(s: &mut Sess) {
    s.push("turn/start", TS1, None, None);
    s.push("step/start", SS11, None, None);
}

#[test]
fn well_formed_turn_step_tool_sequence_passes() {
    let mut s = strict();
    open_step(&mut s);
    s.push("user/message", &user_data("u", "go"), app(), None);
    s.push(
        "request/header",
        r#"{"header":{"config":{"provider":"p","model":"m"}},"reason":"initial"}"#,
        None,
        None,
    );
    s.push(
        "request/context",
        r#"{"provider":"p","model":"m"}"#,
        None,
        None,
    );
    s.push("assistant/chunk", &chunk_data(1, 1, "x"), None, None);
    s.push(
        "assistant/message",
        &assistant_calls(1, 1, "a", &["c1"]),
        app(),
        Some(vec![5]),
    );
    s.push("tool/call", &tool_call_data(1, 1, "c1"), None, None);
    s.push(
        "tool/result",
        &tool_result_data(1, 1, "c1", "ok"),
        app(),
        Some(vec![7]),
    );
    s.push("step/end", SS11, None, None);
    s.push("step/start", r#"{"turn":1,"step":2}"#, None, None);
    s.push(
        "assistant/message",
        &assistant_data(1, 2, "a2", "done"),
        app(),
        None,
    );
    s.push("step/end", r#"{"turn":1,"step":2}"#, None, None);
    s.push("todo/write", r#"{"todos":[]}"#, None, None);
    s.push("turn/end", TE1, None, None);
    assert!(verify(&s.log).is_empty());
    assert_eq!(s.state.admitted_violations(), 0);
}

#[test]
fn an_unapplied_plan_does_not_advance_the_trace() {
    // The store's pre-commit veto: a planned event that never becomes durable.
    let mut s = strict();
    let event = ev("turn/start", 0, TS1, None, None);
    let _vetoed = s.state.plan_append(&event, &s.log).unwrap();
    s.push("turn/start", TS1, None, None);
    assert_eq!(s.state.trace().open_turn().display(), "1");
}

#[test]
fn non_monotonic_seq_is_reported() {
    let mut trace = Trace::new();
    let (t, v) = trace.check(&Event::new("plan/mode", 5, 0, "{}"));
    assert!(v.is_none());
    trace.commit(t);
    let (_, v) = trace.check(&Event::new("plan/mode", 5, 0, "{}"));
    let v = v.unwrap();
    assert_eq!(v.rule, InvariantRule::Seq);
    assert_eq!(v.detail, "seq must strictly increase: saw 5 after 5");
}

#[test]
fn turn_rules() {
    let mut s = strict();
    s.push("turn/start", TS1, None, None);
    let v = violation(s.append("turn/start", r#"{"turn":2}"#, None, None));
    assert_eq!(v.detail, "turn/start 2 while turn 1 is still open");
    assert_eq!(v.seq, 1);
    let v = violation(s.append(
        "turn/end",
        r#"{"turn":2,"reason":{"kind":"completed"}}"#,
        None,
        None,
    ));
    assert_eq!(v.detail, "turn/end 2 does not match open turn 1");
    s.push("turn/end", TE1, None, None);
    let v = violation(s.append("turn/start", r#"{"turn":3}"#, None, None));
    assert_eq!(v.detail, "turn/start expected turn 2, got 3");
    assert_eq!(
        AppendError::Invariant { source: v }.to_string(),
        "append at seq 2 refused: invariant violated by \"@monotykamary/dsh-session\": turn/start expected turn 2, got 3"
    );
    // A zero-step turn is fine.
    s.push("turn/start", r#"{"turn":2}"#, None, None);
    s.push(
        "turn/end",
        r#"{"turn":2,"reason":{"kind":"completed"}}"#,
        None,
        None,
    );
    let v = violation(s.append(
        "turn/end",
        r#"{"turn":2,"reason":{"kind":"completed"}}"#,
        None,
        None,
    ));
    assert_eq!(v.detail, "turn/end 2 does not match open turn null");
}

#[test]
fn enclosed_and_unconstrained_types() {
    let mut s = strict();
    s.push(
        "user/message",
        &user_data("u", "between turns"),
        app(),
        None,
    );
    s.push("plugin/anything", "null", None, None);
    s.push("session/end-seed", "{}", None, None);
    for (kind, data) in [
        ("request/context", r#"{"provider":"p","model":"m"}"#),
        ("todo/write", r#"{"todos":[]}"#),
        (
            "request/header",
            r#"{"header":{"config":{"provider":"p","model":"m"}},"reason":"initial"}"#,
        ),
    ] {
        let v = violation(s.append(kind, data, None, None));
        assert_eq!(
            v.detail,
            format!(
                "{kind} appended outside any open turn (core execution events must be turn-enclosed)"
            )
        );
        assert_eq!(v.rule, InvariantRule::Enclosed);
    }
    s.push("turn/start", TS1, None, None);
    s.push(
        "request/context",
        r#"{"provider":"p","model":"m"}"#,
        None,
        None,
    );
    s.push("todo/write", r#"{"todos":[]}"#, None, None);
}

#[test]
fn step_rules() {
    let mut s = strict();
    let v = violation(s.append("step/start", SS11, None, None));
    assert_eq!(v.detail, "step/start in turn 1 but open turn is null");
    s.push("turn/start", TS1, None, None);
    let v = violation(s.append("step/start", r#"{"turn":2,"step":1}"#, None, None));
    assert_eq!(v.detail, "step/start in turn 2 but open turn is 1");
    let v = violation(s.append("step/start", r#"{"turn":1,"step":3}"#, None, None));
    assert_eq!(v.detail, "step/start expected step 1 in turn 1, got 3");
    let v = violation(s.append("assistant/chunk", &chunk_data(1, 1, "x"), None, None));
    assert_eq!(
        v.detail,
        "assistant/chunk names turn 1/step 1 but open is turn 1/step null"
    );
    s.push("step/start", SS11, None, None);
    let v = violation(s.append("step/start", r#"{"turn":1,"step":2}"#, None, None));
    assert_eq!(v.detail, "step/start 2 while step 1 is still open");
    let v = violation(s.append("turn/end", TE1, None, None));
    assert_eq!(v.detail, "turn/end 1 while step 1 is still open");
    let v = violation(s.append("step/end", r#"{"turn":1,"step":2}"#, None, None));
    assert_eq!(
        v.detail,
        "step/end names turn 1/step 2 but open is turn 1/step 1"
    );
    let v = violation(s.append(
        "assistant/message",
        &assistant_data(1, 2, "a", "x"),
        app(),
        None,
    ));
    assert_eq!(
        v.detail,
        "assistant/message names turn 1/step 2 but open is turn 1/step 1"
    );
    let v = violation(s.append("tool/call", &tool_call_data(1, 2, "c"), None, None));
    assert_eq!(v.rule, InvariantRule::InStep);
    s.push("step/end", SS11, None, None);
    let v = violation(s.append("step/start", r#"{"turn":1,"step":3}"#, None, None));
    assert_eq!(v.detail, "step/start expected step 2 in turn 1, got 3");
}

#[test]
fn tool_result_pairing() {
    let mut s = strict();
    let v = violation(s.append(
        "tool/result",
        &tool_result_data(1, 1, "c", "x"),
        app(),
        None,
    ));
    assert_eq!(
        v.detail,
        "tool/result names turn 1/step 1 but open is turn null/step null"
    );
    open_step(&mut s);
    let v = violation(s.append(
        "tool/result",
        &tool_result_data(1, 1, "c", "x"),
        app(),
        None,
    ));
    assert_eq!(
        v.detail,
        "tool/result for c with no prior tool/call in this step"
    );
    assert_eq!(v.rule, InvariantRule::ToolResult);
    // A synthetic not-started result needs no call.
    s.push(
        "tool/result",
        &not_started_result(1, 1, "never"),
        app(),
        None,
    );
    // A call left unanswered at step/end is fine; it cannot be answered in a later step.
    s.push("tool/call", &tool_call_data(1, 1, "c1"), None, None);
    s.push("step/end", SS11, None, None);
    s.push("step/start", r#"{"turn":1,"step":2}"#, None, None);
    let v = violation(s.append(
        "tool/result",
        &tool_result_data(1, 2, "c1", "late"),
        app(),
        None,
    ));
    assert_eq!(
        v.detail,
        "tool/result for c1 with no prior tool/call in this step"
    );
}

#[test]
fn tool_result_rewrites_need_only_an_open_turn() {
    let mut s = strict();
    open_step(&mut s);
    s.push("tool/call", &tool_call_data(1, 1, "c1"), None, None);
    s.push(
        "tool/result",
        &tool_result_data(1, 1, "c1", "big"),
        app(),
        Some(vec![2]),
    );
    s.push("step/end", SS11, None, None);
    s.push("turn/end", TE1, None, None);
    let pruned = tool_result_data(1, 1, "c1", "[pruned]");
    let v = violation(s.append("tool/result", &pruned, replace(3, 3), Some(vec![3])));
    assert_eq!(
        v.detail,
        "tool/result surface replacement appended outside any open turn"
    );
    s.push("turn/start", r#"{"turn":2}"#, None, None);
    s.push(
        "compaction/prune",
        r#"{"shadowedRange":{"start":3,"end":3},"shadowedSeqs":[3],"shadowedTokenCount":5}"#,
        None,
        None,
    );
    s.push("tool/result", &pruned, replace(3, 3), Some(vec![3]));
    assert_eq!(s.nodes(), vec![8]);
}

#[test]
fn a_bad_seed_is_refused_when_invariants_are_enforced() {
    let seed = vec![
        ev("turn/start", 0, TS1, None, None),
        ev("turn/start", 1, TS1, None, None),
    ];
    match SessionState::rebuild(&seed, InvariantMode::Always) {
        Err(SeedError::Invariant(v)) => {
            assert_eq!(v.seq, 1);
            assert_eq!(v.detail, "turn/start 1 while turn 1 is still open");
        }
        other => panic!("expected an invariant refusal, got {other:?}"),
    }
    // Import does not enforce them; the violations are counted.
    let state = SessionState::rebuild(&seed, InvariantMode::Off).unwrap();
    assert_eq!(state.admitted_violations(), 1);
    assert_eq!(verify(&seed).len(), 1);
}

#[test]
fn sessions_are_tracked_independently_and_rebuilt_traces_equal_incremental_ones() {
    let mut a = strict();
    let mut b = strict();
    a.push("turn/start", TS1, None, None);
    b.push("turn/start", TS1, None, None);
    a.push("turn/end", TE1, None, None);
    let v = violation(b.append("turn/start", r#"{"turn":2}"#, None, None));
    assert_eq!(v.detail, "turn/start 2 while turn 1 is still open");
    a.push("turn/start", r#"{"turn":2}"#, None, None);
    let rebuilt = SessionState::rebuild(&a.log, InvariantMode::Always).unwrap();
    assert_eq!(rebuilt.trace(), a.state.trace());
    assert_eq!(rebuilt, a.state);
}

#[test]
fn end_seed_is_accepted_inside_an_open_seeded_turn() {
    let seed = vec![
        ev("turn/start", 0, TS1, None, None),
        ev("session/end-seed", 1, "{}", None, None),
    ];
    let state = SessionState::rebuild(&seed, InvariantMode::Always).unwrap();
    assert!(state.turn_open());
    assert_eq!(state.trace().open_turn().display(), "1");
}

#[test]
fn modes_off_and_debug() {
    let mut off = Sess::with_mode(InvariantMode::Off);
    let applied = off.append("turn/end", TE1, None, None).unwrap();
    assert_eq!(
        applied.violation.unwrap().detail,
        "turn/end 1 does not match open turn null"
    );
    assert_eq!(off.state.admitted_violations(), 1);
    let mut debug = Sess::with_mode(InvariantMode::Debug);
    let refused = debug.append("turn/end", TE1, None, None).is_err();
    assert_eq!(refused, cfg!(debug_assertions));
    assert!(InvariantMode::Always.enforced());
    assert!(!InvariantMode::Off.enforced());
    // Switching on later checks against the maintained trace.
    off.state.set_invariant_mode(InvariantMode::Always);
    off.push("turn/start", r#"{"turn":2}"#, None, None);
    let v = violation(off.append("turn/start", r#"{"turn":3}"#, None, None));
    assert_eq!(v.detail, "turn/start 3 while turn 2 is still open");
}

#[test]
fn verify_reports_every_violation_with_its_seq() {
    let log = vec![
        ev(
            "request/context",
            0,
            r#"{"provider":"p","model":"m"}"#,
            None,
            None,
        ),
        ev("turn/start", 1, r#"{"turn":2}"#, None, None),
        ev("assistant/chunk", 2, &chunk_data(2, 1, "x"), None, None),
        ev(
            "turn/end",
            3,
            r#"{"turn":2,"reason":{"kind":"completed"}}"#,
            None,
            None,
        ),
        ev("turn/start", 4, r#"{"turn":"2"}"#, None, None),
        ev("turn/end", 5, "null", None, None),
    ];
    let found: Vec<(u64, InvariantRule, String)> = verify(&log)
        .into_iter()
        .map(|v| (v.seq, v.rule, v.detail))
        .collect();
    assert_eq!(
        found,
        vec![
            (0, InvariantRule::Enclosed, "request/context appended outside any open turn (core execution events must be turn-enclosed)".into()),
            (1, InvariantRule::TurnStart, "turn/start expected turn 1, got 2".into()),
            (2, InvariantRule::InStep, "assistant/chunk names turn 2/step 1 but open is turn 2/step null".into()),
            (4, InvariantRule::TurnStart, "turn/start expected turn 2, got 2".into()),
            (5, InvariantRule::Malformed, "cannot read properties of null (reading 'turn')".into()),
        ]
    );
}
