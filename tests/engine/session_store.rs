//! The session semantics on the engine: append with intents, compaction, resume with crash
//! repair, zero-copy fork, delete with reference counting, listeners, and O(surface) resume.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sessionlog::error::AppendError;
use sessionlog::event::{Event, Seq, SessionHeader};
use sessionlog::session::fork::ForkErrorCode;
use sessionlog::store::{Config, Durability, ForkFailure, Intent, Session, Store};
use sessionlog::typed::Raw;

fn user(id: &str, text: &str) -> String {
    format!(
        r#"{{"id":"{id}","role":"user","content":[{{"type":"text","text":"{text}"}}],"source":{{"kind":"user"}}}}"#
    )
}

fn assistant(turn: u64, id: &str, text: &str, call: Option<&str>) -> String {
    let call = call
        .map(|c| format!(r#",{{"type":"tool-call","id":"{c}","name":"bash","arguments":"{{}}"}}"#))
        .unwrap_or_default();
    format!(
        r#"{{"turn":{turn},"step":1,"message":{{"id":"{id}","role":"assistant","content":[{{"type":"text","text":"{text}"}}{call}],"source":{{"kind":"model","provider":"p","model":"m"}}}}}}"#
    )
}

fn tool_result(turn: u64, call: &str, text: &str) -> String {
    format!(
        r#"{{"turn":{turn},"step":1,"message":{{"id":"r-{call}","role":"user","content":[{{"type":"tool-result","toolCallId":"{call}","content":[{{"type":"text","text":"{text}"}}]}}],"source":{{"kind":"tool","callId":"{call}"}}}}}}"#
    )
}

/// One complete dsh turn with a tool call and `chunks` assistant/chunk deltas: 8 + chunks events.
fn turn(s: &Session<'_>, t: u64, chunks: u64) {
    s.append(Raw::new(
        "turn/start",
        format!(r#"{{"turn":{t}}}"#),
        Intent::none(),
    ))
    .unwrap();
    s.append(Raw::new(
        "step/start",
        format!(r#"{{"turn":{t},"step":1}}"#),
        Intent::none(),
    ))
    .unwrap();
    s.append(Raw::new(
        "user/message",
        user(&format!("u{t}"), &format!("question {t}")),
        Intent::append(),
    ))
    .unwrap();
    for i in 0..chunks {
        s.append(Raw::new("assistant/chunk", format!(r#"{{"turn":{t},"step":1,"chunk":{{"type":"text-delta","index":0,"text":"tok{i}"}}}}"#), Intent::none()))
        .unwrap();
    }
    let call = format!("c{t}");
    s.append(Raw::new(
        "assistant/message",
        assistant(t, &format!("a{t}"), "let me look", Some(&call)),
        Intent::append(),
    ))
    .unwrap();
    s.append(Raw::new(
        "tool/call",
        format!(r#"{{"turn":{t},"step":1,"callId":"{call}","name":"bash","arguments":"{{}}"}}"#),
        Intent::none(),
    ))
    .unwrap();
    s.append(Raw::new(
        "tool/result",
        tool_result(t, &call, "ok"),
        Intent::append(),
    ))
    .unwrap();
    s.append(Raw::new(
        "step/end",
        format!(r#"{{"turn":{t},"step":1}}"#),
        Intent::none(),
    ))
    .unwrap();
    s.append(Raw::new(
        "turn/end",
        format!(r#"{{"turn":{t},"reason":{{"kind":"completed"}}}}"#),
        Intent::none(),
    ))
    .unwrap();
}

/// Replaces every surface node but the last with a summary (a compaction).
fn compact(s: &Session<'_>) {
    let surface = s.surface().unwrap();
    if surface.len() < 3 {
        return;
    }
    let shadowed: Vec<Seq> = surface[..surface.len() - 1].to_vec();
    let (start, end) = (shadowed[0], *shadowed.last().unwrap());
    s.append(Raw::new(
        "user/message",
        user(&format!("sum{}", s.len()), "summary"),
        Intent::replace(start, end).sources(shadowed),
    ))
    .unwrap();
}

fn buffered() -> Config {
    Config::default().durability(Durability::Buffered)
}

#[test]
fn compaction_shadows_without_deleting_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (surface, messages) = {
        let store = Store::open(dir.path(), buffered()).unwrap();
        let s = store.create(SessionHeader::new("s", 1)).unwrap();
        for t in 1..=3 {
            turn(&s, t, 3);
        }
        assert_eq!(s.surface().unwrap().len(), 9);
        compact(&s);
        let surface = s.surface().unwrap();
        assert_eq!(surface.len(), 2);
        assert_eq!(s.replace_generation().unwrap(), 1);
        assert_eq!(s.len(), 3 * 11 + 1, "shadowed events stay in the log");
        (surface, s.messages().unwrap())
    };
    let store = Store::open(dir.path(), buffered()).unwrap();
    let s = store.session("s").unwrap();
    assert_eq!(s.surface().unwrap(), surface);
    assert_eq!(s.messages().unwrap(), messages);
    assert_eq!(s.replace_generation().unwrap(), 1);
    // A replace citing too little is refused and changes nothing.
    let before = s.len();
    let err = s
        .append(Raw::new(
            "user/message",
            user("bad", "x"),
            Intent::replace(surface[0], surface[1]).sources(vec![surface[0]]),
        ))
        .unwrap_err();
    assert!(matches!(err, AppendError::Semantics { .. }), "{err}");
    assert_eq!(s.len(), before);
}

#[test]
fn invariants_are_enforced_on_append_and_can_be_switched_off() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), buffered()).unwrap();
    let s = store.create(SessionHeader::new("s", 1)).unwrap();
    let err = s
        .append(Raw::new(
            "step/start",
            r#"{"turn":1,"step":1}"#,
            Intent::none(),
        ))
        .unwrap_err();
    assert!(err.to_string().contains("invariant"), "{err}");
    assert_eq!(s.len(), 0);
    store
        .create_session_with(
            SessionHeader::new("lenient", 1),
            sessionlog::store::SessionOptions {
                invariants: Some(sessionlog::session::InvariantMode::Off),
            },
        )
        .unwrap();
    let l = store.session("lenient").unwrap();
    l.append(Raw::new(
        "step/start",
        r#"{"turn":1,"step":1}"#,
        Intent::none(),
    ))
    .unwrap();
    assert_eq!(l.len(), 1);
}

#[test]
fn resume_closes_an_interrupted_turn_and_read_only_opens_do_not() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), buffered()).unwrap();
        let s = store.create(SessionHeader::new("s", 1)).unwrap();
        turn(&s, 1, 2);
        s.append(Raw::new("turn/start", r#"{"turn":2}"#, Intent::none()))
            .unwrap();
        s.append(Raw::new(
            "step/start",
            r#"{"turn":2,"step":1}"#,
            Intent::none(),
        ))
        .unwrap();
        s.append(Raw::new("user/message", user("u2", "go"), Intent::append()))
            .unwrap();
        s.append(Raw::new(
            "assistant/message",
            assistant(2, "a2", "running", Some("c9")),
            Intent::append(),
        ))
        .unwrap();
        s.append(Raw::new(
            "tool/call",
            r#"{"turn":2,"step":1,"callId":"c9","name":"bash","arguments":"{}"}"#,
            Intent::none(),
        ))
        .unwrap();
        // Crash here: the turn is open and c9 has no result.
    }
    let crashed_len = {
        let store = Store::open(dir.path(), buffered().read_only(true)).unwrap();
        let s = store.session("s").unwrap();
        s.len()
    };
    {
        let store = Store::open(dir.path(), buffered()).unwrap();
        assert_eq!(
            store.session("s").unwrap().len(),
            crashed_len,
            "a handle does not repair"
        );
        let s = store.resume("s").unwrap();
        let closers: Vec<Event> = s
            .events(crashed_len..s.len())
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        let kinds: Vec<&str> = closers.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["tool/result", "step/end", "turn/end"]);
        assert!(
            closers[0].data.contains("ToolOutcomeUnknownError"),
            "{}",
            closers[0].data
        );
        assert!(closers[2].data.contains(r#""kind":"interrupted""#));
        assert_eq!(closers[0].source_event_seqs, Some(vec![crashed_len - 1]));
        // Resuming again adds nothing: the turn is closed now.
        let again = store.resume("s").unwrap();
        assert_eq!(again.len(), crashed_len + 3);
        // The session is usable: a new turn appends cleanly.
        turn(&again, 3, 1);
    }
    let store = Store::open(dir.path(), buffered().repair_on_resume(false)).unwrap();
    assert_eq!(store.resume("s").unwrap().len(), crashed_len + 3 + 9);
}

#[test]
fn fork_is_zero_copy_and_inherits_the_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), buffered()).unwrap();
    let seg_bytes = || -> u64 {
        std::fs::read_dir(dir.path().join("segments"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    };
    let mut costs = Vec::new();
    for (name, turns) in [("small", 2u64), ("large", 60)] {
        let s = store.create(SessionHeader::new(name, 1)).unwrap();
        for t in 1..=turns {
            turn(&s, t, 20);
        }
        store.flush().unwrap();
        let before = seg_bytes();
        let child = store
            .fork(name, None, Some(&format!("{name}-child")))
            .unwrap();
        store.flush().unwrap();
        costs.push(seg_bytes() - before);
        // The child holds the parent's events, then dsh's end-seed marker.
        assert_eq!(child.len(), s.len() + 1);
        let parent_events: Vec<Event> = s.events(0..s.len()).unwrap().map(|e| e.unwrap()).collect();
        let child_events: Vec<Event> = child
            .events(0..s.len())
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        assert_eq!(parent_events, child_events);
        assert_eq!(
            child.get(s.len()).unwrap().unwrap().kind,
            "session/end-seed"
        );
        assert_eq!(child.surface().unwrap(), s.surface().unwrap());
        assert_eq!(child.messages().unwrap(), s.messages().unwrap());
        let header = child.header().unwrap();
        assert_eq!(header.parent_session.as_deref(), Some(name));
        assert_eq!(header.seed_length, Some(s.len()));
        // Parent and child diverge independently.
        turn(&child, turns + 1, 1);
        assert_eq!(s.len() + 1 + 9, child.len());
    }
    assert!(
        costs[1] <= costs[0] + 64,
        "fork cost grew with the prefix: {} bytes for 2 turns, {} for 60",
        costs[0],
        costs[1]
    );
}

#[test]
fn fork_inside_an_open_turn_is_refused_and_earlier_boundaries_work() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), buffered()).unwrap();
    let s = store.create(SessionHeader::new("p", 1)).unwrap();
    turn(&s, 1, 1);
    turn(&s, 2, 1);
    let first_turn_end = 8;
    assert_eq!(s.get(first_turn_end).unwrap().unwrap().kind, "turn/end");
    match store.fork("p", Some(3), Some("bad")) {
        Err(ForkFailure::Rule(e)) => assert_eq!(e.code, ForkErrorCode::OpenTurn),
        other => panic!("expected OPEN_TURN, got {other:?}"),
    }
    assert!(
        store.session("bad").is_err(),
        "a refused fork writes nothing"
    );
    let child = store.fork("p", Some(first_turn_end), None).unwrap();
    assert_eq!(child.id(), "session-1");
    assert_eq!(child.len(), first_turn_end + 2);
    let parent_surface_then: Vec<Seq> = s
        .surface()
        .unwrap()
        .into_iter()
        .filter(|&n| n <= first_turn_end)
        .collect();
    assert_eq!(child.surface().unwrap(), parent_surface_then);
}

#[test]
fn deleting_a_parent_keeps_its_forks_whole() {
    let dir = tempfile::tempdir().unwrap();
    let child_events = {
        let store = Store::open(dir.path(), buffered()).unwrap();
        let s = store.create(SessionHeader::new("p", 1)).unwrap();
        turn(&s, 1, 4);
        let child = store.fork("p", None, Some("c")).unwrap();
        let grandchild = store.fork("c", None, Some("g")).unwrap();
        turn(&grandchild, 2, 1);
        store.delete_session("p").unwrap();
        assert!(store.session("p").is_err());
        assert!(store.sessions().iter().all(|i| i.header.id != "p"));
        let events: Vec<Event> = child
            .events(0..child.len())
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        assert_eq!(events.len() as u64, child.len());
        // The id is free again.
        store.create(SessionHeader::new("p", 2)).unwrap();
        events
    };
    for round in 0..2 {
        let store = Store::open(dir.path(), buffered()).unwrap();
        let c = store.session("c").unwrap();
        let events: Vec<Event> = c.events(0..c.len()).unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(events, child_events, "round {round}");
        let g = store.session("g").unwrap();
        assert_eq!(g.events(0..g.len()).unwrap().count() as u64, g.len());
        assert_eq!(
            store.session("p").unwrap().len(),
            0,
            "the new p is a different session"
        );
        if round == 0 {
            // Deleting the last forks releases the old parent's events too.
            store.delete_session("g").unwrap();
            store.delete_session("c").unwrap();
            assert!(store.session("c").is_err());
            drop(store);
            std::fs::remove_file(dir.path().join("index.redb")).unwrap();
            let rebuilt = Store::open(dir.path(), buffered()).unwrap();
            assert!(rebuilt.session("c").is_err(), "deletes replay from the log");
            assert!(rebuilt.session("p").is_ok());
            return;
        }
    }
}

#[test]
fn listeners_see_every_append_and_a_panicking_one_is_contained() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), buffered()).unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    let counter = seen.clone();
    store.subscribe(Arc::new(|_, e: &Event| {
        if e.kind == "turn/start" {
            panic!("listener bug");
        }
    }));
    store.subscribe(Arc::new(move |id: &str, _e: &Event| {
        assert_eq!(id, "s");
        counter.fetch_add(1, Ordering::SeqCst);
    }));
    let s = store.create(SessionHeader::new("s", 1)).unwrap();
    turn(&s, 1, 2);
    assert_eq!(
        seen.load(Ordering::SeqCst),
        s.len(),
        "the second listener saw every event"
    );
    assert_eq!(store.listener_failures(), 1);
    assert_eq!(s.len(), 10, "the append stood");
}

/// A session of 1,000,000 events (mostly `assistant/chunk`) with periodic compactions
/// resumes reading only its surface frames (`SESSIONLOG_RESUME_EVENTS` changes the size).
#[test]
fn resume_reads_only_surface_frames() {
    let target: u64 = std::env::var("SESSIONLOG_RESUME_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    // Small batches: many frames, so reading them all would show.
    let config = buffered().batch_bytes(16 << 10);
    let (surface, messages, total_frames) = {
        let store = Store::open(dir.path(), config.clone()).unwrap();
        let s = store.create(SessionHeader::new("big", 1)).unwrap();
        let mut t = 1;
        while s.len() < target {
            turn(&s, t, 200);
            if t % 20 == 0 {
                compact(&s);
            }
            t += 1;
        }
        let surface = s.surface().unwrap();
        let messages = s.messages().unwrap();
        store.close().unwrap();
        let store = Store::open(dir.path(), config.clone()).unwrap();
        (surface, messages, store.verify().unwrap().frames)
    };
    let store = Store::open(dir.path(), config).unwrap();
    let before = store.frames_read();
    let s = store.resume("big").unwrap();
    assert!(s.len() >= target);
    assert_eq!(s.surface().unwrap(), surface);
    assert_eq!(s.messages().unwrap(), messages);
    let read = store.frames_read() - before;
    eprintln!(
        "{} events, {} frames in the log, surface of {} nodes, resume read {read} frames",
        s.len(),
        total_frames,
        surface.len()
    );
    assert!(
        read <= surface.len() as u64 + 2,
        "resume read {read} frames for a surface of {} nodes",
        surface.len()
    );
    assert!(
        total_frames > 20 * read,
        "the log ({total_frames} frames) dwarfs what resume read ({read})"
    );
}

/// A session written in big frames (buffered appends): deriving its messages after a reopen
/// decodes each frame once, not once per surface node (the lookup keeps its frame between
/// nodes).
#[test]
fn messages_decode_each_frame_once_however_the_session_was_written() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), buffered()).unwrap();
        let s = store.create(SessionHeader::new("big-frames", 1)).unwrap();
        for t in 1..=100 {
            turn(&s, t, 2);
        }
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), buffered()).unwrap();
    let s = store.session("big-frames").unwrap();
    let nodes = s.surface().unwrap().len() as u64;
    let before = store.frames_read();
    let messages = s.messages().unwrap();
    let frames = store.frames_read() - before;
    assert_eq!(messages.len() as u64, nodes);
    assert!(nodes >= 200, "{nodes} surface nodes");
    assert!(
        frames * 10 <= nodes,
        "{frames} frame reads for {nodes} surface nodes in a few big frames"
    );
}

/// The messages a resumed session hands out share their text with the store's message
/// cache: a second `messages()` gives the same `Arc<str>`s (the text is not copied again),
/// and messages appended later join the cache without copying the earlier ones.
#[test]
fn resumed_messages_share_the_cached_text() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), buffered()).unwrap();
        let s = store.create(SessionHeader::new("shared", 1)).unwrap();
        for t in 1..=3 {
            turn(&s, t, 2);
        }
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), buffered()).unwrap();
    let s = store.resume("shared").unwrap();
    let first = s.messages().unwrap();
    let again = s.messages().unwrap();
    assert_eq!(first.len(), 9, "3 messages a turn");
    assert_eq!(first, again);
    for (a, b) in first.iter().zip(&again) {
        assert!(Arc::ptr_eq(&a.json, &b.json), "seq {}: copied", a.seq);
    }
    turn(&s, 4, 2);
    let grown = s.messages().unwrap();
    assert_eq!(grown.len(), 12);
    for (a, b) in first.iter().zip(&grown) {
        assert!(Arc::ptr_eq(&a.json, &b.json), "seq {}: copied", a.seq);
    }
    assert!(grown[9].json.contains(r#""u4""#), "{}", grown[9].json);
}

/// A message stored in an older shape (a legacy `tool/result`: `{callId, content, isError}`)
/// is derived from its converted view, as dsh's loader presents it, while the messages of
/// the current shape beside it are read from their frame's text: the store gives what
/// deriving from the converted events gives.
#[test]
fn messages_of_older_shapes_are_derived_from_their_converted_view() {
    use sessionlog::event::SurfaceOp;
    use sessionlog::session::derive::derive_messages;
    use sessionlog::session::legacy::LegacyView;
    let log = vec![
        Event::new("turn/start", 0, 1000, r#"{"turn":1}"#),
        Event::new("step/start", 1, 1001, r#"{"turn":1,"step":1}"#),
        Event::new("user/message", 2, 1002, user("u1", "list files"))
            .with_surface_op(SurfaceOp::Append),
        Event::new("assistant/message", 3, 1003, assistant(1, "a1", "ls", Some("c1")))
            .with_surface_op(SurfaceOp::Append),
        Event::new("tool/call", 4, 1004, r#"{"turn":1,"step":1,"callId":"c1","name":"bash","arguments":{}}"#),
        Event::new(
            "tool/result",
            5,
            1005,
            r#"{"turn":1,"step":1,"callId":"c1","content":[{"type":"text","text":"ok"}],"isError":false}"#,
        )
        .with_surface_op(SurfaceOp::Append)
        .with_sources(vec![4]),
        Event::new("step/end", 6, 1006, r#"{"turn":1,"step":1}"#),
        Event::new("turn/end", 7, 1007, r#"{"turn":1,"reason":{"kind":"completed"}}"#),
    ];
    let view = LegacyView::convert("legacy", &log).unwrap();
    assert_eq!(view.len(), 1, "the tool result is of the older shape");
    let converted = view.apply(&log);
    let want = derive_messages(&[2, 3, 5], &converted).unwrap();
    assert!(
        want[2].json.contains(r#""callId":"c1""#),
        "{}",
        want[2].json
    );
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), buffered()).unwrap();
        store
            .import_session(SessionHeader::new("legacy", 1), log, None)
            .unwrap();
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), buffered()).unwrap();
    assert_eq!(store.messages("legacy").unwrap(), want, "a plain read");
    let s = store.resume("legacy").unwrap();
    assert_eq!(s.messages().unwrap(), want, "resumed");
}
