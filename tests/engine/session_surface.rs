//! dsh's `surface.spec.ts` (§11) and the surface rules of §4, in Rust.

use crate::common::session_build;

use session_build::*;
use sessionlog::event::{Event, SurfaceOp};
use sessionlog::session::error::SurfaceError;
use sessionlog::session::invariants::InvariantMode;
use sessionlog::session::load::parse_stored_event;
use sessionlog::session::surface::{
    Replacement, fold_surface, is_append_surface_event, is_replacement_surface_event,
    is_surface_eligible_type, is_surface_event,
};
use sessionlog::session::{AppendError, SessionState};

/// Folds raw event texts through the seed rules (dsh's `foldSurface` over JSON events).
fn fold_raw(texts: &[String]) -> Result<SessionState, String> {
    let mut state = SessionState::with_invariants(InvariantMode::Off);
    let mut log: Vec<Event> = Vec::new();
    for (i, t) in texts.iter().enumerate() {
        let stored = parse_stored_event(t, None).expect("event object");
        let plan = state
            .plan_seed(&stored.event, i as u64, &stored.defects, &log)
            .map_err(|e| e.to_string())?;
        log.push(stored.event);
        state.apply(plan).expect("fresh plan");
    }
    Ok(state)
}

fn raw_user(seq: u64, extra: &str) -> String {
    format!(
        r#"{{"type":"user/message","seq":{seq},"time":{seq},"data":{},"surfaceOp":"append"{extra}}}"#,
        user_data(&format!("u{seq}"), "x")
    )
}

fn surface_err(r: Result<SessionState, String>) -> String {
    match r {
        Ok(_) => panic!("expected a refusal"),
        Err(e) => e,
    }
}

fn user(seq: u64, sources: Option<Vec<u64>>) -> Event {
    ev(
        "user/message",
        seq,
        &user_data(&format!("u{seq}"), "x"),
        app(),
        sources,
    )
}

fn tool(seq: u64, call: &str, op: Option<SurfaceOp>, sources: Option<Vec<u64>>) -> Event {
    ev(
        "tool/result",
        seq,
        &tool_result_data(1, 1, call, &format!("result {seq}")),
        op,
        sources,
    )
}

// --- foldSurface source-event references ---------------------------------------------------

#[test]
fn accepts_absent_or_valid_source_event_references_and_complete_replacement_coverage() {
    let mut third = user(2, Some(vec![0, 1]));
    third.surface_op = replace(0, 1);
    let fold = fold_surface(&[user(0, None), user(1, None), third]).unwrap();
    assert_eq!(fold.nodes, vec![2]);
}

#[test]
fn rejects_source_event_references_on_a_non_surface_event() {
    let e = ev("turn/start", 0, r#"{"turn":1}"#, None, Some(vec![0]));
    let (_, err) = fold_surface(&[e]).unwrap_err();
    assert!(
        err.to_string().contains("cannot carry sourceEventSeqs"),
        "{err}"
    );
}

#[test]
fn accepts_an_explicit_empty_source_event_list_on_an_assistant_message() {
    let e = ev(
        "assistant/message",
        0,
        &assistant_data(1, 1, "a", ""),
        app(),
        Some(vec![]),
    );
    assert!(fold_surface(&[e]).is_ok());
}

#[test]
fn rejects_malformed_source_event_lists() {
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        (
            "a non-array",
            vec![raw_user(0, r#","sourceEventSeqs":"invalid""#)],
            "must be an array",
        ),
        (
            "an empty array",
            vec![raw_user(0, r#","sourceEventSeqs":[]"#)],
            "must not be empty",
        ),
        (
            "duplicates",
            vec![raw_user(0, ""), raw_user(1, r#","sourceEventSeqs":[0,0]"#)],
            "must not contain duplicates",
        ),
        (
            "a sparse array",
            vec![raw_user(0, r#","sourceEventSeqs":[null]"#)],
            "densely contain",
        ),
        (
            "a non-number",
            vec![raw_user(0, r#","sourceEventSeqs":["0"]"#)],
            "non-negative safe integers",
        ),
        (
            "a fractional number",
            vec![raw_user(0, r#","sourceEventSeqs":[0.5]"#)],
            "non-negative safe integers",
        ),
        (
            "a negative number",
            vec![raw_user(0, r#","sourceEventSeqs":[-1]"#)],
            "non-negative safe integers",
        ),
        (
            "an unsafe integer",
            vec![raw_user(0, r#","sourceEventSeqs":[9007199254740992]"#)],
            "non-negative safe integers",
        ),
        (
            "a self reference",
            vec![raw_user(0, r#","sourceEventSeqs":[0]"#)],
            "must reference earlier events: 0 >= current seq 0",
        ),
    ];
    for (name, texts, fragment) in cases {
        let err = surface_err(fold_raw(&texts));
        assert!(err.contains(fragment), "{name}: {err}");
        assert!(
            err.starts_with("invalid seed event at index"),
            "{name}: {err}"
        );
    }
}

#[test]
fn rejects_a_non_contiguous_event_seq() {
    let (index, err) = fold_surface(&[user(0, None), user(2, Some(vec![1]))]).unwrap_err();
    assert_eq!(index, 1);
    assert_eq!(
        err.to_string(),
        "session event seq 2 is not contiguous; expected 1"
    );
}

#[test]
fn rejects_incomplete_replacement_coverage() {
    let mut third = user(2, Some(vec![0]));
    third.surface_op = replace(0, 1);
    let (_, err) = fold_surface(&[user(0, None), user(1, None), third]).unwrap_err();
    assert_eq!(
        err,
        SurfaceError::SourcesMissingShadowed { missing: vec![1] }
    );
    assert!(err.to_string().ends_with("missing 1"));
    // An absent list with a non-empty shadow set fails the same check.
    let mut absent = user(2, None);
    absent.surface_op = replace(0, 1);
    let (_, err) = fold_surface(&[user(0, None), user(1, None), absent]).unwrap_err();
    assert!(err.to_string().ends_with("missing 0, 1"), "{err}");
}

#[test]
fn source_rules_apply_in_dsh_order() {
    // Duplicates are reported before a forward reference.
    let (_, err) = fold_surface(&[user(0, None), user(1, Some(vec![5, 5]))]).unwrap_err();
    assert_eq!(err, SurfaceError::SourcesDuplicate { seq: 1 });
    // The first non-earlier element in array order is named.
    let (_, err) = fold_surface(&[user(0, None), user(1, Some(vec![0, 7, 3]))]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "sourceEventSeqs must reference earlier events: 7 >= current seq 1"
    );
    // Sources may cite any earlier event, surface node or not.
    let fold = fold_surface(&[
        ev("turn/start", 0, r#"{"turn":1}"#, None, None),
        user(1, Some(vec![0])),
    ])
    .unwrap();
    assert_eq!(fold.nodes, vec![1]);
}

// --- foldSurface tool-result rewrites -------------------------------------------------------

#[test]
fn rejects_a_replacement_spanning_multiple_current_nodes() {
    let (_, err) = fold_surface(&[
        user(0, None),
        user(1, None),
        tool(2, "rewrite", replace(0, 1), Some(vec![0, 1])),
    ])
    .unwrap_err();
    assert_eq!(err, SurfaceError::RewriteNotSingle);
    assert_eq!(
        err.to_string(),
        "tool/result surface replacement must rewrite exactly one current node"
    );
}

#[test]
fn rejects_a_replacement_targeting_a_non_result_node() {
    let (_, err) = fold_surface(&[
        user(0, None),
        tool(1, "rewrite", replace(0, 0), Some(vec![0])),
    ])
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "tool/result surface replacement must target a current tool/result"
    );
}

#[test]
fn rejects_changes_outside_tool_result_content() {
    let (_, err) = fold_surface(&[
        tool(0, "original", app(), None),
        tool(1, "changed", replace(0, 0), Some(vec![0])),
    ])
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "tool/result surface replacement may change only content"
    );
}

#[test]
fn accepts_a_content_only_rewrite_and_rejects_block_field_changes() {
    let original = tool(0, "c1", app(), None);
    let content_only = ev(
        "tool/result",
        1,
        &original
            .data
            .replace(r#""text":"result 0""#, r#""text":"[pruned]""#),
        replace(0, 0),
        Some(vec![0]),
    );
    let fold = fold_surface(&[original.clone(), content_only]).unwrap();
    assert_eq!(fold.nodes, vec![1]);
    for (field, patched) in [
        (
            "toolCallId",
            original
                .data
                .replace(r#""toolCallId":"c1""#, r#""toolCallId":"changed""#),
        ),
        (
            "isError",
            original
                .data
                .replace(r#""isError":false"#, r#""isError":true"#),
        ),
        (
            "isError presence",
            original.data.replace(r#","isError":false"#, ""),
        ),
        (
            "message id",
            original.data.replace(r#""id":"r-c1""#, r#""id":"other""#),
        ),
        ("turn", original.data.replace(r#""turn":1"#, r#""turn":2"#)),
        (
            "extra key",
            original.data.replacen('{', r#"{"extra":1,"#, 1),
        ),
    ] {
        let replacement = ev("tool/result", 1, &patched, replace(0, 0), Some(vec![0]));
        let (_, err) = fold_surface(&[original.clone(), replacement]).unwrap_err();
        assert_eq!(err, SurfaceError::RewriteChanged, "{field}");
    }
}

#[test]
fn compares_array_valued_rest_fields_structurally() {
    let with_meta = |seq: u64, meta: &str, op: Option<SurfaceOp>, src: Option<Vec<u64>>| {
        let data =
            tool_result_data(1, 1, "c-meta", "x").replacen('{', &format!(r#"{{"meta":{meta},"#), 1);
        ev("tool/result", seq, &data, op, src)
    };
    let fold = |a: &str, b: &str| {
        fold_surface(&[
            with_meta(0, a, app(), None),
            with_meta(1, b, replace(0, 0), Some(vec![0])),
        ])
    };
    assert!(fold(r#"{"tags":["a",{"n":1}]}"#, r#"{"tags":["a",{"n":1.0}]}"#).is_ok());
    assert!(
        fold(r#"{"b":1,"a":2}"#, r#"{"a":2,"b":1}"#).is_ok(),
        "key order is not compared"
    );
    for (a, b) in [
        (r#"{"tags":["a"]}"#, r#"{"tags":["b"]}"#),
        (r#"{"tags":["a"]}"#, r#"{"tags":"a"}"#),
        (r#"{"left":1}"#, r#"{"right":1}"#),
        (r#"{"one":1}"#, r#"{"one":1,"two":2}"#),
    ] {
        assert_eq!(
            fold(a, b).unwrap_err().1,
            SurfaceError::RewriteChanged,
            "{a} vs {b}"
        );
    }
}

#[test]
fn append_refuses_a_rewrite_whose_target_or_replacement_lacks_its_block() {
    // decisions.md: a missing message or block is a proper error, never a crash. On append
    // the shape rules catch the replacement first.
    let mut s = Sess::new();
    s.push(
        "tool/result",
        &tool_result_data(1, 1, "c", "x"),
        app(),
        None,
    );
    let err = s
        .append(
            "tool/result",
            r#"{"turn":1,"step":1}"#,
            replace(0, 0),
            Some(vec![0]),
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("lacks an identified message"),
        "{err}"
    );
    // Two blocks are refused at append (exactly one tool-result block).
    let two = tool_result_data(1, 1, "c", "x").replace(
        r#""isError":false}]"#,
        r#""isError":false},{"type":"text","text":"extra"}]"#,
    );
    let err = s
        .append("tool/result", &two, replace(0, 0), Some(vec![0]))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("must contain one tool-result block"),
        "{err}"
    );
    // The raw comparison itself reports a malformed target instead of crashing.
    let (_, err) = fold_surface(&[
        ev(
            "tool/result",
            0,
            r#"{"message":{"content":[]}}"#,
            app(),
            None,
        ),
        tool(1, "c", replace(0, 0), Some(vec![0])),
    ])
    .unwrap_err();
    assert!(
        matches!(err, SurfaceError::RewriteMalformed { .. }),
        "{err}"
    );
}

// --- SurfaceManager windows -----------------------------------------------------------------

#[test]
fn folds_a_contiguous_window_without_materializing_earlier_event_sequences() {
    let b = 400_000;
    let mut state = SessionState::starting_at(b, InvariantMode::Off);
    let mut log = Vec::new();
    let mut third = user(b + 2, Some(vec![b]));
    third.surface_op = replace(b, b);
    for e in [user(b, None), user(b + 1, None), third] {
        let plan = state.plan_append(&e, &log).unwrap();
        log.push(e);
        state.apply(plan).unwrap();
    }
    assert_eq!(state.surface().nodes(), &[b + 2, b + 1]);
    assert_eq!(state.surface().replace_generation(), 1);
}

#[test]
fn validates_tool_result_rewrites_against_a_nonzero_window_offset() {
    let b = 400_000;
    let mut state = SessionState::starting_at(b, InvariantMode::Off);
    let original = tool(b, "call", app(), None);
    let mut rewrite = original.clone();
    rewrite.seq = b + 1;
    rewrite.surface_op = replace(b, b);
    rewrite.source_event_seqs = Some(vec![b]);
    let mut log = Vec::new();
    for e in [original, rewrite] {
        let plan = state.plan_append(&e, &log).unwrap();
        log.push(e);
        state.apply(plan).unwrap();
    }
    assert_eq!(state.surface().nodes(), &[b + 1]);
}

#[test]
fn rejects_a_replacement_that_crosses_a_loaded_window_head() {
    let b = 400_000;
    let mut state = SessionState::starting_at(b, InvariantMode::Off);
    let first = user(b, None);
    let plan = state.plan_append(&first, &Vec::new()).unwrap();
    let log = vec![first];
    state.apply(plan).unwrap();
    let mut second = user(b + 1, Some(vec![b - 1, b]));
    second.surface_op = replace(b - 1, b);
    let err = state.plan_append(&second, &log).unwrap_err();
    assert!(err.to_string().ends_with(&format!(
        "surface replace: start seq {} not found in surface",
        b - 1
    )));
}

#[test]
fn shares_ordered_entries_and_nested_replacement_ranges_with_fold_surface() {
    let mut s = Sess::new();
    s.push("user/message", &user_data("a", "a"), app(), None);
    s.push("user/message", &user_data("b", "b"), app(), None);
    s.push(
        "assistant/message",
        &assistant_data(1, 1, "s1", "summary"),
        replace(0, 0),
        Some(vec![0]),
    );
    s.push(
        "assistant/message",
        &assistant_data(1, 2, "s2", "summary 2"),
        replace(2, 1),
        Some(vec![2, 1]),
    );
    let folded = fold_surface(&s.log).unwrap();
    assert_eq!(folded.nodes, s.nodes());
    assert_eq!(
        folded.replacements,
        vec![
            Replacement {
                seq: 2,
                start: 0,
                end: 0,
                shadowed: vec![0]
            },
            Replacement {
                seq: 3,
                start: 2,
                end: 1,
                shadowed: vec![2, 1]
            },
        ]
    );
    assert_eq!(s.nodes(), vec![3]);
    assert_eq!(folded.replace_generation, 2);
    assert_eq!(s.state.surface().replace_generation(), 2);
}

#[test]
fn fold_surface_reports_the_same_invalid_replacement_failures_as_the_incremental_state() {
    let mut second = user(1, Some(vec![0]));
    second.surface_op = replace(42, 0);
    let (_, folded) = fold_surface(&[user(0, None), second.clone()]).unwrap_err();
    let err = SessionState::rebuild(&[user(0, None), second], InvariantMode::Off).unwrap_err();
    assert_eq!(
        folded.to_string(),
        "surface replace: start seq 42 not found in surface"
    );
    assert_eq!(
        err.to_string(),
        format!("invalid seed event at index 1: {folded}")
    );
}

#[test]
fn leaves_incremental_state_unchanged_when_candidate_validation_fails() {
    let mut s = Sess::new();
    s.push("user/message", &user_data("a", "a"), app(), None);
    let before = s.state.clone();
    let err = s
        .append(
            "assistant/message",
            &assistant_data(1, 1, "x", "invalid"),
            replace(0, 0),
            None,
        )
        .unwrap_err();
    assert!(matches!(err, AppendError::Surface { seq: 1, .. }));
    assert!(err.to_string().ends_with("missing 0"), "{err}");
    assert_eq!(s.state, before);
    assert_eq!(s.nodes(), vec![0]);
    s.push("user/message", &user_data("b", "b"), app(), None);
    assert_eq!(s.nodes(), vec![0, 1]);
    assert_eq!(s.state.surface().replace_generation(), 0);
    assert_eq!(fold_surface(&s.log).unwrap().nodes, s.nodes());
}

#[test]
fn rejects_surface_eligible_event_without_marker_and_surface_op_on_log_only_event() {
    let (_, err) =
        fold_surface(&[ev("user/message", 0, &user_data("u", "hidden"), None, None)]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "session event \"user/message\" is surface-eligible and requires a surfaceOp marker"
    );
    let (_, err) = fold_surface(&[ev("turn/start", 0, r#"{"turn":1}"#, app(), None)]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "session event \"turn/start\" is not surface-eligible and cannot carry surfaceOp"
    );
    // Raw markers that a typed op cannot hold.
    for (raw, fragment) in [
        (r#","surfaceOp":null"#, "carries an invalid surfaceOp"),
        (r#","surfaceOp":"prepend""#, "carries an invalid surfaceOp"),
        (r#","surfaceOp":[]"#, "carries an invalid surfaceOp"),
        (
            r#","surfaceOp":{"op":"replace","start":0}"#,
            "carries an invalid replace surfaceOp",
        ),
        (
            r#","surfaceOp":{"op":"replace","start":0,"end":0,"x":1}"#,
            "carries an invalid replace surfaceOp",
        ),
        (
            r#","surfaceOp":{"op":"replace","start":-1,"end":0}"#,
            "carries an invalid replace surfaceOp",
        ),
        (
            r#","surfaceOp":{"op":"splice","start":0,"end":0}"#,
            "carries an invalid replace surfaceOp",
        ),
    ] {
        let text = format!(
            r#"{{"type":"user/message","seq":0,"time":0,"data":{}{raw}}}"#,
            user_data("u", "x")
        );
        let err = surface_err(fold_raw(&[text]));
        assert!(err.contains(fragment), "{raw}: {err}");
    }
}

// --- node sets --------------------------------------------------------------------------------

fn surface_session() -> Sess {
    let mut s = Sess::new();
    s.push("turn/start", r#"{"turn":1}"#, None, None);
    s.push("user/message", &user_data("u1", "hello"), app(), None);
    s.push(
        "assistant/message",
        &assistant_data(1, 1, "a1", "hi"),
        app(),
        None,
    );
    s.push(
        "turn/end",
        r#"{"turn":1,"reason":{"kind":"completed"}}"#,
        None,
        None,
    );
    s
}

#[test]
fn folds_an_ordered_sequence_list_from_append_markers() {
    assert_eq!(surface_session().nodes(), vec![1, 2]);
}

#[test]
fn empty_surface_yields_empty_nodes_and_no_messages() {
    let mut s = Sess::new();
    s.push("turn/start", r#"{"turn":1}"#, None, None);
    s.push("step/start", r#"{"turn":1,"step":1}"#, None, None);
    s.push("step/end", r#"{"turn":1,"step":1}"#, None, None);
    s.push(
        "turn/end",
        r#"{"turn":1,"reason":{"kind":"completed"}}"#,
        None,
        None,
    );
    assert!(s.nodes().is_empty());
    assert!(s.messages().is_empty());
}

#[test]
fn picks_up_new_nodes_incrementally_and_replays_equal() {
    let mut s = surface_session();
    assert_eq!(s.messages().len(), 2);
    s.push("turn/start", r#"{"turn":2}"#, None, None);
    s.push("user/message", &user_data("u2", "again"), app(), None);
    assert_eq!(s.nodes(), vec![1, 2, 5]);
    assert_eq!(s.messages().len(), 3);
    let replay = SessionState::rebuild(&s.log, InvariantMode::Off).unwrap();
    assert_eq!(replay.surface(), s.state.surface());
}

#[test]
fn replaces_ranges_by_position() {
    // replace 1..2 after a turn → [4]
    let mut s = surface_session();
    s.push(
        "user/message",
        &user_data("c", "checkpoint"),
        replace(1, 2),
        Some(vec![1, 2]),
    );
    assert_eq!(s.nodes(), vec![4]);
    // 0..1 of three → [3, 2]
    let mut s = Sess::new();
    for i in 0..3 {
        s.push(
            "user/message",
            &user_data(&format!("m{i}"), "x"),
            app(),
            None,
        );
    }
    s.push(
        "user/message",
        &user_data("r", "x"),
        replace(0, 1),
        Some(vec![0, 1]),
    );
    assert_eq!(s.nodes(), vec![3, 2]);
    // 1..1 of [0, 1, 2] → [0, 3, 2], and a middle replace of two → [0, 4]
    let mut s = Sess::new();
    for i in 0..3 {
        s.push(
            "user/message",
            &user_data(&format!("m{i}"), "x"),
            app(),
            None,
        );
    }
    s.push(
        "user/message",
        &user_data("r", "x"),
        replace(1, 1),
        Some(vec![1]),
    );
    assert_eq!(s.nodes(), vec![0, 3, 2]);
    s.push(
        "user/message",
        &user_data("r2", "x"),
        replace(3, 2),
        Some(vec![3, 2]),
    );
    assert_eq!(s.nodes(), vec![0, 4]);
    // 1..1 of two → [0, 2]
    let mut s = Sess::new();
    s.push("user/message", &user_data("a", "x"), app(), None);
    s.push("user/message", &user_data("b", "x"), app(), None);
    s.push(
        "user/message",
        &user_data("r", "x"),
        replace(1, 1),
        Some(vec![1]),
    );
    assert_eq!(s.nodes(), vec![0, 2]);
    assert_eq!(s.state.surface().replace_generation(), 1);
}

#[test]
fn replace_errors_name_the_seqs_and_positions() {
    let mut s = Sess::new();
    s.push("user/message", &user_data("a", "x"), app(), None);
    s.push("user/message", &user_data("b", "x"), app(), None);
    let err = s
        .append(
            "user/message",
            &user_data("r", "x"),
            replace(5, 1),
            Some(vec![0]),
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("surface replace: start seq 5 not found in surface"),
        "{err}"
    );
    let err = s
        .append(
            "user/message",
            &user_data("r", "x"),
            replace(0, 99),
            Some(vec![0]),
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("surface replace: end seq 99 not found in surface"),
        "{err}"
    );
    let err = s
        .append(
            "user/message",
            &user_data("r", "x"),
            replace(1, 0),
            Some(vec![0, 1]),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "append at seq 2 refused: surface replace: start seq 1 (index 1) is after end seq 0 (index 0)"
    );
    // A shadowed node can no longer be named.
    s.push(
        "user/message",
        &user_data("r", "x"),
        replace(0, 0),
        Some(vec![0]),
    );
    let err = s
        .append(
            "user/message",
            &user_data("r", "x"),
            replace(0, 0),
            Some(vec![0]),
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("start seq 0 not found in surface"),
        "{err}"
    );
}

#[test]
fn surface_change_describes_the_splice_for_a_linked_list() {
    let mut s = Sess::new();
    for i in 0u64..4 {
        let applied = s
            .append(
                "user/message",
                &user_data(&format!("m{i}"), "x"),
                app(),
                None,
            )
            .unwrap();
        let change = applied.surface.unwrap();
        assert_eq!(change.after, i.checked_sub(1));
        assert_eq!(
            (change.before, change.position, change.replace),
            (None, i as usize, None)
        );
    }
    let change = s
        .append(
            "user/message",
            &user_data("r", "x"),
            replace(1, 2),
            Some(vec![1, 2]),
        )
        .unwrap()
        .surface
        .unwrap();
    assert_eq!(change.removed, vec![1, 2]);
    assert_eq!(
        (change.after, change.before, change.position),
        (Some(0), Some(3), 1)
    );
    assert_eq!(change.replace, Some((1, 2)));
    assert!(change.is_replace());
    let log_only = s.append("turn/start", r#"{"turn":1}"#, None, None).unwrap();
    assert!(log_only.surface.is_none());
}

// --- deriveMessages via the surface ------------------------------------------------------------

#[test]
fn derive_messages_skips_chunks_and_boundaries_and_follows_replaces() {
    let mut s = Sess::new();
    s.push("turn/start", r#"{"turn":1}"#, None, None);
    s.push("step/start", r#"{"turn":1,"step":1}"#, None, None);
    let u = user_data("u1", "hello");
    s.push("user/message", &u, app(), None);
    s.push("assistant/chunk", &chunk_data(1, 1, "He"), None, None);
    s.push("assistant/chunk", &chunk_data(1, 1, "llo"), None, None);
    let a = assistant_data(1, 1, "a1", "Hello");
    s.push("assistant/message", &a, app(), Some(vec![3, 4]));
    s.push("step/end", r#"{"turn":1,"step":1}"#, None, None);
    s.push(
        "turn/end",
        r#"{"turn":1,"reason":{"kind":"completed"}}"#,
        None,
        None,
    );
    let a_message = &a[a.find(r#""message":"#).unwrap() + 10..a.len() - 1];
    assert_eq!(s.messages(), vec![u.clone(), a_message.to_string()]);
    let plugin = r#"{"id":"p1","role":"user","content":[{"type":"text","text":"ctx"}],"source":{"kind":"plugin","plugin":"x","form":"notice","summary":"s"}}"#;
    s.push("user/message", plugin, replace(2, 5), Some(vec![2, 5]));
    assert_eq!(s.messages(), vec![plugin.to_string()]);
    s.push(
        "assistant/message",
        &assistant_data(2, 1, "empty", ""),
        app(),
        Some(vec![]),
    );
    assert_eq!(
        s.nodes().len(),
        2,
        "an empty assistant message stays on the surface"
    );
    assert_eq!(
        s.messages(),
        vec![plugin.to_string()],
        "… but derives nothing"
    );
}

// --- guards -------------------------------------------------------------------------------------

#[test]
fn surface_guards_truth_tables() {
    for t in ["user/message", "assistant/message", "tool/result"] {
        assert!(is_surface_eligible_type(t));
    }
    for t in [
        "turn/start",
        "assistant/chunk",
        "tool/call",
        "",
        "steering/message",
    ] {
        assert!(!is_surface_eligible_type(t));
    }
    let appended = ev("user/message", 0, "{}", app(), None);
    let replaced = ev("user/message", 0, "{}", replace(0, 0), None);
    let unmarked = ev("user/message", 0, "{}", None, None);
    let log_only = ev("turn/start", 0, "{}", app(), None);
    assert_eq!(
        [
            appended.clone(),
            replaced.clone(),
            unmarked.clone(),
            log_only.clone()
        ]
        .map(|e| is_surface_event(&e)),
        [true, true, false, false]
    );
    assert_eq!(
        [
            appended.clone(),
            replaced.clone(),
            unmarked.clone(),
            log_only.clone()
        ]
        .map(|e| is_append_surface_event(&e)),
        [true, false, false, false]
    );
    assert_eq!(
        [appended, replaced, unmarked, log_only].map(|e| is_replacement_surface_event(&e)),
        [false, true, false, false]
    );
}

#[test]
fn replace_generation_counts_replaces_only() {
    let mut s = Sess::new();
    s.push("user/message", &user_data("a", "x"), app(), None);
    s.push("turn/start", r#"{"turn":1}"#, None, None);
    assert_eq!(s.state.surface().replace_generation(), 0);
    s.push(
        "user/message",
        &user_data("b", "x"),
        replace(0, 0),
        Some(vec![0]),
    );
    s.push(
        "user/message",
        &user_data("c", "x"),
        replace(2, 2),
        Some(vec![2]),
    );
    s.push("user/message", &user_data("d", "x"), app(), None);
    assert_eq!(s.state.surface().replace_generation(), 2);
}
