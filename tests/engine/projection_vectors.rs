//! dsh's hand-checked projection and title vectors (persistence §9.6), and the fold rules of
//! §7.4/§7.5 on edge cases.

use sessionlog::event::Event;
use sessionlog::projection::projcache::{CacheRecord, read_projcache, write_projcache};
use sessionlog::projection::stats::SessionStats;
use sessionlog::projection::title::{
    SessionTitle, TitlePolicy, fallback_session_title, fold_session_title, normalize_session_title,
};
use sessionlog::projection::{
    Fold, FoldProjection, ProjectionSet, SessionStatsProjection, TitleProjection, TitleState,
};

/// dsh's `at(t, …)`: seq = time = t.
fn at(t: u64, kind: &str, data: &str) -> Event {
    Event::new(kind, t, t as i64, data)
}

fn stats_of(events: &[Event]) -> SessionStats {
    let mut s = SessionStats::default();
    for e in events {
        s.apply(e);
    }
    s
}

const ZERO: &str = r#"{"turns":0,"steps":0,"llmMs":0,"toolMs":0,"ttftMs":0,"ttftSteps":0,"decodeMs":0,"decodeTokens":0}"#;

#[test]
fn stats_step_timing_vector() {
    let s = stats_of(&[
        at(1000, "step/start", r#"{"turn":1,"step":1}"#),
        at(
            1800,
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"Hi"}}"#,
        ),
        at(
            4800,
            "assistant/message",
            r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[{"type":"text","text":"Hi"}],"source":{"kind":"model"}},"usage":{"inputTokens":10,"outputTokens":60}}"#,
        ),
        at(4900, "step/end", r#"{"turn":1,"step":1}"#),
    ]);
    assert_eq!(
        s.view(),
        r#"{"turns":1,"steps":1,"llmMs":3800,"toolMs":0,"ttftMs":800,"ttftSteps":1,"decodeMs":3000,"decodeTokens":60}"#
    );
}

#[test]
fn stats_retry_keeps_first_token() {
    let s = stats_of(&[
        at(1000, "step/start", r#"{"turn":1,"step":1}"#),
        at(
            1200,
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"reasoning-delta","index":0,"text":"hm"}}"#,
        ),
        at(
            2000,
            "llm/retry",
            r#"{"retryId":"r1","turn":1,"step":1,"provider":"p","mode":"always","policyKey":"k","retry":1,"delayMs":10,"failure":{"kind":"x"}}"#,
        ),
        at(
            3000,
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"ok"}}"#,
        ),
        at(
            5000,
            "assistant/message",
            r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model"}}}"#,
        ),
    ]);
    assert_eq!(s.llm_ms, 4000.0);
    assert_eq!(s.ttft_ms, 200.0);
    assert_eq!(s.ttft_steps, 1.0);
    // No usage: no decode time.
    assert_eq!((s.decode_ms, s.decode_tokens), (0.0, 0.0));
}

fn result(t: u64, call_id: &str) -> Event {
    at(
        t,
        "tool/result",
        &format!(
            r#"{{"turn":1,"step":1,"message":{{"id":"r{t}","role":"user","content":[{{"type":"tool-result","toolCallId":"{call_id}","isError":false,"content":[]}}],"source":{{"kind":"tool","callId":"{call_id}"}}}}}}"#
        ),
    )
}

fn call(t: u64, call_id: &str) -> Event {
    at(
        t,
        "tool/call",
        &format!(r#"{{"turn":1,"step":1,"callId":"{call_id}","name":"bash","arguments":{{}}}}"#),
    )
}

#[test]
fn stats_tool_pairing_vector() {
    let s = stats_of(&[
        call(1100, "a"),
        call(1200, "b"),
        result(4200, "b"),
        result(1600, "a"),
        result(5000, "ghost"),
    ]);
    // (4200 - 1200) + (1600 - 1100) = 3000 + 500; the ghost result has no call.
    assert_eq!(s.tool_ms, 3500.0);
    assert!(s.pending_calls.is_empty());
}

#[test]
fn stats_prototype_keys_are_not_calls() {
    let s = stats_of(&[
        result(1000, "toString"),
        result(1001, "constructor"),
        result(1002, "__proto__"),
    ]);
    assert_eq!(s.view(), ZERO);
}

#[test]
fn stats_message_before_step_start_is_clamped() {
    let s = stats_of(&[
        at(2000, "step/start", r#"{"turn":1,"step":1}"#),
        at(
            1000,
            "assistant/message",
            r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model"}}}"#,
        ),
    ]);
    assert_eq!(s.llm_ms, 0.0);
    // Clamped to +0, printed as 0.
    assert_eq!(s.view(), ZERO);
}

#[test]
fn stats_empty_and_blocked_turn_are_zero() {
    assert_eq!(stats_of(&[]).view(), ZERO);
    let s = stats_of(&[
        at(0, "turn/start", r#"{"turn":1}"#),
        at(1, "turn/end", r#"{"turn":1,"reason":{"kind":"blocked"}}"#),
    ]);
    assert_eq!(s.view(), ZERO);
}

#[test]
fn stats_duplicate_message_and_foreign_step_add_nothing() {
    let msg = r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model"}}}"#;
    let s = stats_of(&[
        at(1000, "step/start", r#"{"turn":1,"step":1}"#),
        // A chunk of another step does not count as the first token.
        at(
            1100,
            "assistant/chunk",
            r#"{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"x"}}"#,
        ),
        // Empty deltas and non-delta chunks do not count either.
        at(
            1200,
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":""}}"#,
        ),
        at(
            1250,
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"block-start","index":0,"blockType":"text"}}"#,
        ),
        // A tool-call delta with a name (even empty) is a token.
        at(
            1300,
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":0,"id":"c","name":"","argumentsDelta":""}}"#,
        ),
        at(2000, "assistant/message", msg),
        at(3000, "assistant/message", msg),
        at(3100, "step/end", r#"{"turn":1,"step":1}"#),
        at(3200, "step/start", r#"{"turn":1,"step":2}"#),
        at(3300, "step/end", r#"{"turn":1,"step":2}"#),
        at(3400, "step/start", r#"{"turn":2,"step":1}"#),
        at(3500, "step/end", r#"{"turn":2,"step":1}"#),
    ]);
    assert_eq!(
        s.view(),
        r#"{"turns":2,"steps":3,"llmMs":1000,"toolMs":0,"ttftMs":300,"ttftSteps":1,"decodeMs":0,"decodeTokens":0}"#
    );
}

#[test]
fn stats_decode_needs_a_finite_non_negative_output_count() {
    let run = |usage: &str| {
        stats_of(&[
            at(1000, "step/start", r#"{"turn":1,"step":1}"#),
            at(
                1100,
                "assistant/chunk",
                r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}"#,
            ),
            at(
                1500,
                "assistant/message",
                &format!(
                    r#"{{"turn":1,"step":1,"message":{{"id":"a","role":"assistant","content":[],"source":{{"kind":"model"}}}},"usage":{usage}}}"#
                ),
            ),
        ])
    };
    assert_eq!(run(r#"{"outputTokens":2.5}"#).decode_tokens, 2.5);
    assert_eq!(run(r#"{"outputTokens":2.5}"#).decode_ms, 400.0);
    assert_eq!(run(r#"{"outputTokens":-1}"#).decode_ms, 0.0);
    assert_eq!(run(r#"{"outputTokens":"7"}"#).decode_ms, 0.0);
    assert_eq!(run("null").decode_ms, 0.0);
    assert_eq!(run("null").ttft_ms, 100.0);
}

#[test]
fn stats_turn_end_clears_pending_calls_and_null_data_is_ignored() {
    let s = stats_of(&[
        call(1000, "a"),
        at(
            1001,
            "turn/end",
            r#"{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"user"}}}"#,
        ),
        result(2000, "a"),
        at(2001, "step/start", "null"),
        at(2002, "step/end", "null"),
    ]);
    assert_eq!(s.view(), ZERO);
    // A numeric callId and its string form are the same property key.
    let s = stats_of(&[at(1000, "tool/call", r#"{"callId":7}"#), result(1500, "7")]);
    assert_eq!(s.tool_ms, 500.0);
}

#[test]
fn stats_state_json_has_dshs_shape() {
    let s = stats_of(&[
        at(1000, "step/start", r#"{"turn":1,"step":1}"#),
        call(1100, "b"),
        call(1200, "10"),
        call(1300, "2"),
    ]);
    assert_eq!(
        s.to_json(),
        r#"{"turns":0,"steps":0,"llmMs":0,"toolMs":0,"ttftMs":0,"ttftSteps":0,"decodeMs":0,"decodeTokens":0,"lastTurn":null,"openStep":{"turn":1,"step":1,"startTime":1000,"firstTokenTime":null},"pendingCalls":{"2":1300,"10":1200,"b":1100}}"#
    );
    let back = SessionStats::from_json(&s.to_json()).unwrap();
    assert_eq!(back.to_json(), s.to_json());
}

// ---- titles -------------------------------------------------------------------------------

#[test]
fn title_normalization_vectors() {
    assert_eq!(
        normalize_session_title("\u{1b}]0;stolen\u{7}  Hello\t brave\nnew world  ", 80),
        "Hello brave new world"
    );
    assert_eq!(
        fallback_session_title("one two three four", 3, 80),
        "one two three"
    );
    assert_eq!(fallback_session_title("你好世界", 5, 7), "你好");
    let emoji = fallback_session_title("😀😀", 5, 5);
    assert_eq!(emoji.len(), 4);
    assert_eq!(emoji, "😀");
    // CSI, two-byte escapes, controls and bidi characters go; other text stays.
    assert_eq!(
        normalize_session_title(
            "\u{1b}[1;31mred\u{1b}[0m \u{1b}Mx\u{0}y\u{202e}z\u{200b}",
            80
        ),
        "red xyz"
    );
}

#[test]
fn fallback_title_is_scheduled_by_the_first_user_message() {
    let policy = TitlePolicy::new(8, 80, 120).unwrap();
    let set = ProjectionSet::dsh();
    let mut log = vec![
        Event::new("turn/start", 0, 10, r#"{"turn":1}"#),
        Event::new(
            "user/message",
            1,
            11,
            r#"{"id":"u1","role":"user","content":[{"type":"text","text":"  Build\nlog-backed session titles please  "}],"source":{"kind":"user"}}"#,
        ),
    ];
    let mut states = set.fresh();
    let mut title_event = None;
    for e in &log {
        set.apply(&mut states, e).unwrap();
        let current = states.get::<TitleProjection>("title").unwrap();
        if let Some(data) = policy.fallback_for(current, e) {
            title_event = Some(Event::new("session/title", e.seq + 1, e.time, data));
        }
    }
    let title_event = title_event.expect("a fallback is scheduled");
    assert_eq!(title_event.seq, 2);
    assert_eq!(
        title_event.data,
        r#"{"title":"Build log-backed session titles please","messageSeqs":[1],"source":{"kind":"fallback"}}"#
    );
    set.apply(&mut states, &title_event).unwrap();
    log.push(title_event);
    // Once titled, no further fallback.
    let later = Event::new(
        "user/message",
        3,
        12,
        r#"{"id":"u2","role":"user","content":[{"type":"text","text":"more"}],"source":{"kind":"user"}}"#,
    );
    assert_eq!(
        policy.fallback_for(states.get::<TitleProjection>("title").unwrap(), &later),
        None
    );
    assert_eq!(
        set.view(&states, "title").unwrap(),
        r#""Build log-backed session titles please""#
    );
}

#[test]
fn persisted_title_round_trip_vector() {
    let log = [
        Event::new("turn/start", 0, 1, r#"{"turn":1}"#),
        Event::new(
            "user/message",
            1,
            2,
            r#"{"id":"u1","role":"user","content":[{"type":"text","text":"Build log-backed session titles please"}],"source":{"kind":"user"}}"#,
        ),
        Event::new(
            "turn/end",
            2,
            3,
            r#"{"turn":1,"reason":{"kind":"completed"}}"#,
        ),
        Event::new(
            "session/title",
            3,
            4,
            r#"{"title":"Build log-backed session titles please","messageSeqs":[1],"source":{"kind":"fallback"}}"#,
        ),
    ];
    let t = fold_session_title(&log).unwrap();
    assert_eq!(t.event_seq, 3);
    assert_eq!(t.updated_at, 4);
    assert!(!t.is_pinned());
    assert_eq!(
        t.to_json(),
        r#"{"title":"Build log-backed session titles please","messageSeqs":[1],"source":{"kind":"fallback"},"eventSeq":3,"updatedAt":4}"#
    );
    let set = ProjectionSet::dsh();
    let states = set.fold_all(&log).unwrap();
    assert_eq!(
        states.get::<TitleProjection>("title").unwrap().as_str(),
        Some("Build log-backed session titles please")
    );
}

#[test]
fn user_rename_pins_the_title() {
    let policy = TitlePolicy::new(8, 80, 120).unwrap();
    let rename = policy.rename("  My\tsession ").unwrap();
    assert_eq!(
        rename,
        r#"{"title":"My session","messageSeqs":[],"source":{"kind":"user"}}"#
    );
    let log = [
        Event::new(
            "session/title",
            0,
            1,
            r#"{"title":"Auto","messageSeqs":[],"source":{"kind":"fallback"}}"#,
        ),
        Event::new("session/title", 1, 2, rename),
    ];
    let last = fold_session_title(&log);
    assert!(last.as_ref().is_some_and(SessionTitle::is_pinned));
    assert!(!TitlePolicy::may_revise(last.as_ref()));
    assert!(TitlePolicy::may_revise(
        fold_session_title(&log[..1]).as_ref()
    ));
    assert!(TitlePolicy::may_revise(None));
    assert!(TitlePolicy::new(8, 200, 120).is_err());
}

#[test]
fn title_unit_follows_the_last_event_and_reports_changes() {
    let p = TitleProjection;
    let mut s = p.init();
    let title = |seq, t: &str| {
        Event::new(
            "session/title",
            seq,
            0,
            format!(
                r#"{{"title":{t},"messageSeqs":[],"source":{{"kind":"provider","provider":"x"}}}}"#
            ),
        )
    };
    assert!(p.apply(&mut s, &title(0, r#""A""#)));
    assert!(
        !p.apply(&mut s, &title(1, r#""A""#)),
        "same string: same value"
    );
    assert!(p.apply(&mut s, &title(2, r#""B""#)));
    assert!(!p.apply(&mut s, &Event::new("user/message", 3, 0, "{}")));
    assert_eq!(p.view(&s), r#""B""#);
    // dsh's schema: a non-empty string or null.
    assert_eq!(p.decode(b"null").unwrap(), TitleState(None));
    assert!(p.decode(br#""""#).is_err());
    assert!(p.decode(b"5").is_err());
    assert!(p.decode(b"\xff").is_err());
}

// ---- projection cache -----------------------------------------------------------------------

#[test]
fn never_dirty_session_writes_an_init_row() {
    let set = ProjectionSet::new(vec![FoldProjection::arc(TitleProjection)]).unwrap();
    let states = set.fresh();
    let header = sessionlog::event::SessionHeader::new("s1", 5);
    let text = write_projcache(&[CacheRecord::new(&header, set.checkpoint(&states))]).unwrap();
    assert_eq!(
        text,
        "{\n  \"unit\": {\n    \"name\": \"session_projcache\",\n    \"version\": 3\n  },\n  \"global\": null,\n  \"tables\": {\n    \"sessions\": {\n      \"s1\": {\n        \"identity\": {\n          \"createdAt\": 5\n        },\n        \"rows\": {\n          \"title\": {\n            \"ver\": 1,\n            \"seq\": -1,\n            \"val\": null\n          }\n        }\n      }\n    }\n  }\n}\n"
    );
    let back = read_projcache(&text).unwrap();
    assert_eq!(back.len(), 1);
    assert!(back[0].matches(&header));
    assert_eq!(back[0].rows, set.checkpoint(&states));
}

#[test]
fn projcache_round_trips_stats_rows_and_checks_identity() {
    let set = ProjectionSet::dsh();
    let log = [
        Event::new("step/start", 0, 1000, r#"{"turn":1,"step":1}"#),
        Event::new("tool/call", 1, 1100, r#"{"callId":"c:1","name":"x"}"#),
    ];
    let states = set.fold_all(&log).unwrap();
    let mut header = sessionlog::event::SessionHeader::new("12", 7);
    header.cwd = Some("/home/u/p".into());
    let other = sessionlog::event::SessionHeader::new("a", 1);
    let text = write_projcache(&[
        CacheRecord::new(&other, vec![]),
        CacheRecord::new(&header, set.checkpoint(&states)),
    ])
    .unwrap();
    // An array-index id comes first, as JavaScript orders keys; empty rows print as {}.
    assert!(text.contains("\"sessions\": {\n      \"12\": {"));
    assert!(text.contains("\"rows\": {}"));
    assert!(text.contains("\"pendingCalls\": {\n                \"c:1\": 1100\n              }"));
    let back = read_projcache(&text).unwrap();
    let record = back.iter().find(|r| r.id == "12").unwrap();
    assert!(record.matches(&header));
    let mut moved = header.clone();
    moved.cwd = Some("/elsewhere".into());
    assert!(!record.matches(&moved));
    let restored = set.restore(record.rows.clone(), 2);
    assert!(!restored.rebuilt_any());
    assert_eq!(set.checkpoint(&restored.states), set.checkpoint(&states));
    // Another domain version is refused.
    assert!(read_projcache(&text.replace("\"version\": 3", "\"version\": 2")).is_err());
}

#[test]
fn zero_unit_topology_on_an_empty_log() {
    let set = ProjectionSet::new(vec![]).unwrap();
    let states = set.fresh();
    assert_eq!(set.snapshot(&states), r#"{"asOfSeq":-1,"values":{}}"#);
    let restored = set.restore(vec![], 0);
    assert_eq!(restored.replay_from, 0);
}

#[test]
fn snapshot_prints_views_by_key() {
    let set = ProjectionSet::dsh();
    let states = set
        .fold_all(&[Event::new("turn/start", 0, 1, r#"{"turn":1}"#)])
        .unwrap();
    assert_eq!(
        set.snapshot(&states),
        format!(r#"{{"asOfSeq":0,"values":{{"sessionStats":{ZERO},"title":null}}}}"#)
    );
    let _ = SessionStatsProjection;
}

/// The stats give the same state on a stored legacy `tool/result` (`{callId, content,
/// isError}`) as on dsh's converted view of it, so the store may feed either.
#[test]
fn legacy_tool_result_folds_like_its_converted_view() {
    use sessionlog::event::SurfaceOp;
    use sessionlog::session::legacy::LegacyView;
    let log = vec![
        Event::new("step/start", 0, 1000, r#"{"turn":1,"step":1}"#),
        Event::new("tool/call", 1, 1100, r#"{"turn":1,"step":1,"callId":"c1","name":"ls","arguments":{}}"#),
        Event::new(
            "tool/result",
            2,
            1350,
            r#"{"turn":1,"step":1,"callId":"c1","content":[{"type":"text","text":"ok"}],"isError":false}"#,
        )
        .with_surface_op(SurfaceOp::Append)
        .with_sources(vec![1]),
    ];
    let view = LegacyView::convert("s", &log).unwrap();
    assert_eq!(view.len(), 1, "the legacy result is converted");
    let converted = view.apply(&log);
    assert!(
        converted[2]
            .data
            .contains(r#""source":{"kind":"tool","callId":"c1"}"#)
    );
    let set = ProjectionSet::dsh();
    let stored = set.fold_all(&log).unwrap();
    assert_eq!(
        set.checkpoint(&stored),
        set.checkpoint(&set.fold_all(&converted).unwrap())
    );
    assert_eq!(
        stored
            .get::<SessionStatsProjection>("sessionStats")
            .unwrap()
            .tool_ms,
        250.0
    );
}
