//! `deriveMessages` (§5): dsh's `derived-cache.spec.ts` and the derivation parts of
//! `session.spec.ts`, plus byte-exactness of the returned slices.

use crate::common::session_build;

use session_build::*;
use sessionlog::event::Event;
use sessionlog::session::SessionState;
use sessionlog::session::derive::{
    DerivedMessage, MessageCache, derive_event_message, derive_messages,
};
use sessionlog::session::invariants::InvariantMode;

fn role_of(json: &str) -> &'static str {
    if json.contains(r#""role":"assistant""#) {
        "assistant"
    } else {
        "user"
    }
}

#[test]
fn derivation_roles_exclude_chunks_and_boundaries() {
    let mut s = Sess::with_mode(InvariantMode::Always);
    s.push("turn/start", r#"{"turn":1}"#, None, None);
    s.push("step/start", r#"{"turn":1,"step":1}"#, None, None);
    s.push("user/message", &user_data("u", "list"), app(), None);
    s.push("assistant/chunk", &chunk_data(1, 1, "x"), None, None);
    s.push(
        "assistant/message",
        &assistant_calls(1, 1, "a", &["c1"]),
        app(),
        Some(vec![3]),
    );
    s.push("tool/call", &tool_call_data(1, 1, "c1"), None, None);
    s.push(
        "tool/result",
        &tool_result_data(1, 1, "c1", "a.txt"),
        app(),
        Some(vec![5]),
    );
    s.push("step/end", r#"{"turn":1,"step":1}"#, None, None);
    s.push(
        "todo/write",
        r#"{"todos":[{"content":"x","status":"pending"}]}"#,
        None,
        None,
    );
    s.push(
        "turn/end",
        r#"{"turn":1,"reason":{"kind":"max-tokens"}}"#,
        None,
        None,
    );
    let roles: Vec<&str> = s.messages().iter().map(|m| role_of(m)).collect();
    assert_eq!(roles, vec!["user", "assistant", "user"]);
    assert_eq!(s.nodes(), vec![2, 4, 6], "todo/write is not on the surface");
}

#[test]
fn messages_are_the_exact_stored_slices() {
    // Whitespace, escapes and a lone surrogate survive: the output is the stored text.
    let user = r#"{ "id" : "u", "role":"user", "content":[{"type":"text","text":"\ud800 \u0041"}], "source":{"kind":"user"} }"#;
    let assistant = r#"{"turn":1,"step":1,"message" :  {"id":"a","role":"assistant","content":[{"type":"text","text":"1.50"}],"source":{"kind":"model","provider":"p","model":"m"},"n":1.50} , "usage":{"inputTokens":1,"outputTokens":2}}"#;
    let mut s = Sess::new();
    s.push("user/message", user, app(), None);
    s.push("assistant/message", assistant, app(), None);
    assert_eq!(
        s.messages(),
        vec![
            user.to_string(),
            r#"{"id":"a","role":"assistant","content":[{"type":"text","text":"1.50"}],"source":{"kind":"model","provider":"p","model":"m"},"n":1.50}"#.to_string(),
        ]
    );
    // Duplicate keys: the last `message` wins, as JSON.parse keeps it.
    let dup = ev(
        "tool/result",
        0,
        &format!(r#"{{"message":1,"message":{}}}"#, "{\"id\":\"x\"}"),
        app(),
        None,
    );
    assert_eq!(derive_event_message(&dup).unwrap(), Some(r#"{"id":"x"}"#));
}

#[test]
fn derive_event_message_projection_table() {
    let user = ev("user/message", 0, &user_data("u", "x"), app(), None);
    assert_eq!(
        derive_event_message(&user).unwrap(),
        Some(user.data.as_str())
    );
    let empty = ev(
        "assistant/message",
        1,
        &assistant_data(1, 1, "e", ""),
        app(),
        None,
    );
    assert_eq!(derive_event_message(&empty).unwrap(), None);
    let interrupted =
        assistant_data(1, 1, "i", "partial").replacen('{', r#"{"interrupted":true,"#, 1);
    let interrupted = ev("assistant/message", 2, &interrupted, app(), None);
    assert!(
        derive_event_message(&interrupted)
            .unwrap()
            .unwrap()
            .contains("partial")
    );
    for kind in [
        "turn/start",
        "assistant/chunk",
        "tool/call",
        "x/y",
        "session/end-seed",
    ] {
        assert_eq!(
            derive_event_message(&Event::new(kind, 0, 0, "{}")).unwrap(),
            None,
            "{kind}"
        );
    }
    // The marker is not consulted.
    let unmarked = ev(
        "tool/result",
        3,
        &tool_result_data(1, 1, "c", "x"),
        None,
        None,
    );
    assert!(derive_event_message(&unmarked).unwrap().is_some());
    let broken = ev("assistant/message", 4, r#"{"turn":1}"#, app(), None);
    assert!(
        derive_event_message(&broken).is_err(),
        "missing message is an error, not a panic"
    );
}

#[test]
fn the_cache_equals_a_scratch_replay_while_growing_and_rebuilds_on_replace() {
    let mut s = Sess::new();
    let mut cache = MessageCache::new();
    let scratch = |s: &Sess| derive_messages(s.state.surface().nodes(), &s.log).unwrap();
    for i in 0..5u64 {
        s.push(
            "user/message",
            &user_data(&format!("u{i}"), "x"),
            app(),
            None,
        );
        s.push(
            "assistant/message",
            &assistant_data(1, 1, &format!("e{i}"), ""),
            app(),
            None,
        );
        cache.refresh(s.state.surface(), &s.log).unwrap();
        assert_eq!(cache.messages(), scratch(&s).as_slice());
        assert_eq!(
            cache.consumed(),
            s.nodes().len(),
            "nodes, not messages, are counted"
        );
    }
    s.push(
        "user/message",
        &user_data("k", "checkpoint"),
        replace(0, 7),
        Some((0..8).collect()),
    );
    assert_eq!(cache.generation(), 0);
    cache.refresh(s.state.surface(), &s.log).unwrap();
    assert_eq!(cache.generation(), 1);
    assert_eq!(cache.messages(), scratch(&s).as_slice());
    assert_eq!(
        cache.messages()[0],
        DerivedMessage {
            seq: 10,
            json: user_data("k", "checkpoint").into()
        }
    );
}

#[test]
fn observe_is_a_lookup_free_fast_path() {
    let mut s = Sess::new();
    let mut cache = MessageCache::new();
    for i in 0..3u64 {
        s.push(
            "user/message",
            &user_data(&format!("u{i}"), "x"),
            app(),
            None,
        );
        let last = s.log.last().unwrap().clone();
        assert!(cache.observe(s.state.surface(), &last).unwrap());
    }
    assert_eq!(cache.messages().len(), 3);
    // A log-only event leaves the cache current; a replace makes it stale until refresh.
    s.push("plan/mode", "{}", None, None);
    assert!(
        cache
            .observe(s.state.surface(), s.log.last().unwrap())
            .unwrap()
    );
    s.push(
        "user/message",
        &user_data("r", "x"),
        replace(0, 0),
        Some(vec![0]),
    );
    let last = s.log.last().unwrap().clone();
    assert!(!cache.observe(s.state.surface(), &last).unwrap());
    cache.refresh(s.state.surface(), &s.log).unwrap();
    assert_eq!(cache.messages().len(), 3);
}

#[test]
fn replay_from_seed_gives_equal_derivation() {
    let mut s = Sess::new();
    s.push("turn/start", r#"{"turn":1}"#, None, None);
    s.push("user/message", &user_data("u", "x"), app(), None);
    s.push(
        "assistant/message",
        &assistant_data(1, 1, "a", "y"),
        app(),
        None,
    );
    s.push(
        "turn/end",
        r#"{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"user"}}}"#,
        None,
        None,
    );
    let replay = SessionState::rebuild(&s.log, InvariantMode::Off).unwrap();
    let from_replay = derive_messages(replay.surface().nodes(), &s.log).unwrap();
    let live: Vec<String> = s.messages();
    assert_eq!(
        from_replay
            .into_iter()
            .map(|m| m.json.to_string())
            .collect::<Vec<_>>(),
        live
    );
    assert_eq!(replay.surface().nodes(), &[1, 2]);
}
