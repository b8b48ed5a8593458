//! dsh's `request-header.spec.ts` (§11): canonical headers, equality, folds.

use sessionlog::event::Event;
use sessionlog::session::request::{
    canonical_header, fold_request_context, fold_request_header, header_equals,
};

fn eq(a: &str, b: &str) -> bool {
    header_equals(&canonical_header(a).unwrap(), &canonical_header(b).unwrap()).unwrap()
}

#[test]
fn canonicalization() {
    assert_eq!(
        canonical_header(r#"{"tools":[{"name":"t"}],"system":"s","config":{"provider":"p","model":"m"},"adapterDefaults":{"maxTokens":true}}"#).unwrap(),
        r#"{"config":{"provider":"p","model":"m"},"adapterDefaults":{"maxTokens":true},"system":"s","tools":[{"name":"t"}]}"#
    );
    assert_eq!(
        canonical_header(r#"{"config":{"provider":"p","model":"m"},"adapterDefaults":{"maxTokens":false},"system":""}"#).unwrap(),
        r#"{"config":{"provider":"p","model":"m"}}"#
    );
}

#[test]
fn header_equality_matrix() {
    let base = r#"{"config":{"provider":"p","model":"m","temperature":0.5,"stop":["x"]},"system":"s","tools":[{"name":"a","description":"d","parameters":{}}]}"#;
    assert!(eq(base, base));
    assert!(
        eq(base, &base.replace("0.5", "0.50")),
        "numbers compare by value"
    );
    for changed in [
        base.replace(r#""provider":"p""#, r#""provider":"q""#),
        base.replace(r#""model":"m""#, r#""model":"n""#),
        base.replace("0.5", "0.6"),
        base.replace(r#","stop":["x"]"#, ""),
        base.replace(r#"["x"]"#, r#"["x","y"]"#),
        base.replace(r#""system":"s""#, r#""system":"t""#),
        base.replace(
            r#""name":"a","description":"d""#,
            r#""description":"d","name":"a""#,
        ),
        base.replace(r#""m","temperature""#, r#""m","maxTokens":5,"temperature""#),
        base.replace(
            r#""m","temperature""#,
            r#""m","reasoningEffort":"high","temperature""#,
        ),
    ] {
        assert!(!eq(base, &changed), "{changed}");
    }
    // Absent tools ≡ []; absent stop ≠ [].
    let bare = r#"{"config":{"provider":"p","model":"m"}}"#;
    assert!(eq(
        bare,
        r#"{"config":{"provider":"p","model":"m"},"tools":[]}"#
    ));
    assert!(!eq(
        bare,
        r#"{"config":{"provider":"p","model":"m","stop":[]}}"#
    ));
    // Tool order matters.
    assert!(!eq(
        r#"{"config":{"provider":"p","model":"m"},"tools":[{"name":"a"},{"name":"b"}]}"#,
        r#"{"config":{"provider":"p","model":"m"},"tools":[{"name":"b"},{"name":"a"}]}"#
    ));
}

#[test]
fn folds_return_the_baseline_or_the_latest_snapshot() {
    let h = |seq: u64, model: &str| {
        Event::new(
            "request/header",
            seq,
            0,
            format!(
                r#"{{"header":{{"config":{{"provider":"p","model":"{model}"}},"system":""}},"reason":"initial"}}"#
            ),
        )
    };
    let baseline = Some("{\"config\":{}}".to_string());
    assert_eq!(
        fold_request_header(&[], baseline.clone()).unwrap(),
        baseline
    );
    let events = vec![h(0, "a"), Event::new("plan/mode", 1, 0, "{}"), h(2, "b")];
    assert_eq!(
        fold_request_header(&events, None).unwrap().as_deref(),
        Some(r#"{"config":{"provider":"p","model":"b"}}"#)
    );
    let ctx = |seq: u64, w: u32| {
        Event::new(
            "request/context",
            seq,
            0,
            format!(r#"{{"provider":"p","model":"m","contextWindow":{w}}}"#),
        )
    };
    assert_eq!(fold_request_context(&[], None), None);
    assert_eq!(
        fold_request_context(&[ctx(0, 1), ctx(1, 2)], None).as_deref(),
        Some(r#"{"provider":"p","model":"m","contextWindow":2}"#)
    );
}
