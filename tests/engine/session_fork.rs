//! dsh's `fork.spec.ts` (§11) and §8: boundary rules, the child header, seedLength and the
//! end-seed marker.

use crate::common::session_build;

use session_build::*;
use sessionlog::event::{MAX_SAFE_INTEGER, SessionHeader};
use sessionlog::session::SessionState;
use sessionlog::session::derive::derive_messages;
use sessionlog::session::fork::{
    ForkError, ForkErrorCode, ForkPlan, boundary_from_number, plan_fork,
};
use sessionlog::session::invariants::InvariantMode;

fn parent_header() -> SessionHeader {
    let mut h = SessionHeader::new("parent", 10);
    h.cwd = Some("/work".into());
    h.origin = Some("subagent".into());
    h.delegation_depth = Some(1);
    h.agent_preset = Some("coder".into());
    h.owner = Some("alice".into());
    h.extra = vec![("x".into(), "1".into())];
    h
}

fn fork(s: &Sess, boundary: Option<u64>) -> Result<ForkPlan, ForkError> {
    plan_fork(
        "parent",
        &parent_header(),
        &s.state,
        boundary,
        "child",
        99,
        &s.log,
    )
}

fn completed_turn(s: &mut Sess, n: u64) {
    s.push("turn/start", &format!(r#"{{"turn":{n}}}"#), None, None);
    s.push(
        "user/message",
        &user_data(&format!("u{n}"), "q"),
        app(),
        None,
    );
    s.push(
        "step/start",
        &format!(r#"{{"turn":{n},"step":1}}"#),
        None,
        None,
    );
    s.push(
        "assistant/message",
        &assistant_data(n, 1, &format!("a{n}"), "a"),
        app(),
        None,
    );
    s.push(
        "step/end",
        &format!(r#"{{"turn":{n},"step":1}}"#),
        None,
        None,
    );
    s.push(
        "turn/end",
        &format!(r#"{{"turn":{n},"reason":{{"kind":"completed"}}}}"#),
        None,
        None,
    );
}

/// Builds the child as the store would: the seed prefix, then end-seed when needed.
fn child_of(s: &Sess, plan: &ForkPlan) -> Sess {
    let seed = match plan.boundary {
        Some(b) => s.log[..=b as usize].to_vec(),
        None => Vec::new(),
    };
    let state = match &plan.child_state {
        Some(state) => state.clone(),
        None => SessionState::rebuild(&seed, InvariantMode::Always).unwrap(),
    };
    assert_eq!(
        state,
        SessionState::rebuild(&seed, state.invariant_mode()).unwrap()
    );
    let mut child = Sess {
        log: seed,
        state,
        cache: Default::default(),
    };
    if plan.needs_end_seed {
        child.push("session/end-seed", "{}", None, None);
    }
    child
}

#[test]
fn empty_parent_forks_an_empty_child_with_lineage() {
    let s = Sess::with_mode(InvariantMode::Always);
    let plan = fork(&s, None).unwrap();
    assert_eq!(plan.boundary, None);
    assert_eq!(plan.seed_length, 0);
    let mut expected = SessionHeader::new("child", 99);
    expected.cwd = Some("/work".into());
    expected.parent_session = Some("parent".into());
    expected.seed_length = Some(0);
    assert_eq!(
        plan.header, expected,
        "origin, delegationDepth, agentPreset, owner and extras are not inherited"
    );
    let child = child_of(&s, &plan);
    assert_eq!(child.log.len(), 1);
    assert_eq!(child.log[0].kind, "session/end-seed");
}

#[test]
fn default_boundary_copies_the_whole_completed_log() {
    let mut s = Sess::with_mode(InvariantMode::Always);
    completed_turn(&mut s, 1);
    s.push("plan/mode", r#"{"active":true}"#, None, None);
    let plan = fork(&s, None).unwrap();
    assert_eq!(plan.boundary, Some(6));
    assert_eq!(plan.seed_length, 7);
    assert_eq!(plan.header.seed_length, Some(7));
    assert!(plan.child_state.is_some(), "tail fork needs no replay");
    let mut child = child_of(&s, &plan);
    assert_eq!(child.log.len(), 8);
    assert_eq!(child.messages(), s.messages());
    // The child keeps appending with its own seqs.
    child.push("turn/start", r#"{"turn":2}"#, None, None);
    assert_eq!(child.state.next_seq(), 9);
}

#[test]
fn an_explicit_earlier_boundary_while_the_source_has_an_open_tail() {
    let mut s = Sess::with_mode(InvariantMode::Always);
    s.push(
        "user/message",
        &user_data("first", "only this"),
        app(),
        None,
    );
    completed_turn(&mut s, 1);
    s.push("turn/start", r#"{"turn":2}"#, None, None);
    let err = fork(&s, None).unwrap_err();
    assert_eq!(err.code, ForkErrorCode::OpenTurn);
    assert_eq!(
        err.message,
        "fork boundary 7 in session \"parent\" ends inside open turn 2"
    );
    let plan = fork(&s, Some(0)).unwrap();
    assert!(
        plan.child_state.is_none(),
        "an earlier boundary is rebuilt from the prefix"
    );
    let child = child_of(&s, &plan);
    let messages = derive_messages(child.state.surface().nodes(), &child.log).unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(*messages[0].json, *user_data("first", "only this"));
}

#[test]
fn every_turn_end_reason_is_a_valid_boundary() {
    for reason in [
        r#"{"kind":"completed"}"#,
        r#"{"kind":"aborted","reason":{"kind":"user"}}"#,
        r#"{"kind":"blocked"}"#,
        r#"{"kind":"error","error":{"message":"m","code":"C"}}"#,
        r#"{"kind":"max-tokens"}"#,
        r#"{"kind":"interrupted"}"#,
    ] {
        let mut s = Sess::with_mode(InvariantMode::Always);
        s.push("turn/start", r#"{"turn":1}"#, None, None);
        s.push(
            "turn/end",
            &format!(r#"{{"turn":1,"reason":{reason}}}"#),
            None,
            None,
        );
        assert_eq!(fork(&s, None).unwrap().seed_length, 2, "{reason}");
    }
}

#[test]
fn a_bracket_opened_after_the_last_turn_becomes_seed_history() {
    let mut s = Sess::with_mode(InvariantMode::Always);
    completed_turn(&mut s, 1);
    let open = s.push(
        "compaction/start",
        r#"{"compactionId":"k1","turn":null}"#,
        None,
        None,
    );
    let plan = fork(&s, None).unwrap();
    let child = child_of(&s, &plan);
    assert_eq!(child.log[open as usize + 1].kind, "session/end-seed");
    assert_eq!(plan.seed_length, open + 1, "firstLiveSeq = open.seq + 1");
    assert!(
        !s.log.iter().any(|e| e.kind == "session/end-seed"),
        "the parent gets no marker"
    );
}

#[test]
fn a_seed_ending_in_end_seed_is_not_re_marked() {
    let mut s = Sess::with_mode(InvariantMode::Always);
    completed_turn(&mut s, 1);
    s.push("session/end-seed", "{}", None, None);
    assert!(!fork(&s, None).unwrap().needs_end_seed);
    s.push("plan/mode", r#"{"active":false}"#, None, None);
    assert!(
        !fork(&s, Some(6)).unwrap().needs_end_seed,
        "boundary on an earlier end-seed"
    );
    assert!(fork(&s, Some(5)).unwrap().needs_end_seed);
}

#[test]
fn boundary_errors_have_dsh_codes_and_messages() {
    let empty = Sess::with_mode(InvariantMode::Always);
    let err = fork(&empty, Some(0)).unwrap_err();
    assert_eq!(err.code, ForkErrorCode::InvalidBoundary);
    assert_eq!(
        err.message,
        "fork boundary 0 does not exist in session \"parent\" (last seq: none)"
    );
    assert_eq!(err.code.as_str(), "INVALID_BOUNDARY");
    for (n, shown) in [
        (-1.0, "-1"),
        (0.5, "0.5"),
        (MAX_SAFE_INTEGER as f64 + 1.0, "9007199254740992"),
    ] {
        let err = boundary_from_number("parent", n).unwrap_err();
        assert_eq!(err.code, ForkErrorCode::InvalidBoundary);
        assert_eq!(
            err.message,
            format!(
                "fork boundary for session \"parent\" must be a non-negative safe integer, got {shown}"
            )
        );
    }
    assert_eq!(boundary_from_number("parent", 3.0), Ok(3));
    let err = fork(&empty, Some(MAX_SAFE_INTEGER as u64 + 1)).unwrap_err();
    assert_eq!(err.code, ForkErrorCode::InvalidBoundary);
    let mut s = Sess::with_mode(InvariantMode::Always);
    completed_turn(&mut s, 1);
    let err = fork(&s, Some(6)).unwrap_err();
    assert_eq!(
        err.message,
        "fork boundary 6 does not exist in session \"parent\" (last seq: 5)"
    );
}

#[test]
fn boundaries_inside_turn_one_are_open_turn() {
    let mut s = Sess::with_mode(InvariantMode::Always);
    s.push("turn/start", r#"{"turn":1}"#, None, None);
    s.push("step/start", r#"{"turn":1,"step":1}"#, None, None);
    s.push("user/message", &user_data("u", "x"), app(), None);
    s.push(
        "assistant/message",
        &assistant_calls(1, 1, "a", &["c"]),
        app(),
        None,
    );
    s.push("tool/call", &tool_call_data(1, 1, "c"), None, None);
    s.push(
        "tool/result",
        &tool_result_data(1, 1, "c", "ok"),
        app(),
        None,
    );
    s.push("step/end", r#"{"turn":1,"step":1}"#, None, None);
    s.push(
        "turn/end",
        r#"{"turn":1,"reason":{"kind":"completed"}}"#,
        None,
        None,
    );
    for b in 0..=6 {
        let err = fork(&s, Some(b)).unwrap_err();
        assert_eq!(err.code, ForkErrorCode::OpenTurn, "boundary {b}");
        assert_eq!(
            err.message,
            format!("fork boundary {b} in session \"parent\" ends inside open turn 1")
        );
    }
    assert!(fork(&s, Some(7)).is_ok());
}

#[test]
fn id_errors_have_dsh_codes_and_messages() {
    let e = ForkError::already_exists("c");
    assert_eq!(
        (e.code.as_str(), e.to_string().as_str()),
        ("SESSION_ALREADY_EXISTS", "session \"c\" already exists")
    );
    let e = ForkError::not_found("p");
    assert_eq!(
        (e.code.as_str(), e.message.as_str()),
        ("SESSION_NOT_FOUND", "session \"p\" not found")
    );
    let e = ForkError::not_live("p");
    assert_eq!(
        (e.code.as_str(), e.message.as_str()),
        (
            "SESSION_NOT_LIVE",
            "session \"p\" is not the live store instance"
        )
    );
}
