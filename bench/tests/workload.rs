//! The benchmark workload: the dsh session generator and the fixture replay reader.

#[path = "../../tests/common/shared_fixtures.rs"]
mod shared_fixtures;

use std::collections::HashSet;

use sessionlog::event::{Event, SurfaceOp};
use sessionlog::json::{self, JsonLimits};
use sessionlog::store::{Config, Durability, Store};
use sessionlog_bench::workload::{
    FlushGroup, SessionGenerator, WorkloadConfig, event_json, flush_groups, generate_events,
    generate_session, is_flush_point, load_fixture_sessions, session_header, synthetic_event,
};

fn all_events(groups: &[FlushGroup]) -> Vec<Event> {
    groups
        .iter()
        .flat_map(|g| g.events.iter().cloned())
        .collect()
}

/// `synthetic_event` is what the crash harness relies on: pin a few of its bytes.
#[test]
fn synthetic_event_is_unchanged() {
    let e = synthetic_event(0, 7);
    assert_eq!(
        (e.kind.as_str(), e.time, e.data.as_str()),
        ("turn/start", 1_767_225_599_999, r#"{"turn":1}"#)
    );
    let e = synthetic_event(8, 1);
    assert_eq!(e.kind, "tool/call");
    assert_eq!(
        e.data.len(),
        r#"{"turn":1,"step":1,"callId":"c8","name":"bash","arguments":""}"#.len() + 1048
    );
    let e = synthetic_event(6, 3);
    assert_eq!(e.surface_op, Some(SurfaceOp::Append));
    assert!(e.data.contains(r#"hello 3 \u00e9\ud800 "#));
}

#[test]
fn generator_is_deterministic_and_seeded() {
    let config = WorkloadConfig {
        turns: 3,
        ..WorkloadConfig::default()
    };
    let a = generate_session(&config, 4);
    let b = generate_session(&config, 4);
    assert_eq!(a, b);
    let c = generate_session(&config, 5);
    assert_ne!(
        all_events(&a)[2].data,
        all_events(&c)[2].data,
        "sessions differ"
    );
    let d = generate_session(
        &WorkloadConfig {
            seed: 1,
            ..config.clone()
        },
        4,
    );
    assert_ne!(
        all_events(&a)[2].data,
        all_events(&d)[2].data,
        "seeds differ"
    );
}

/// One turn has the 58 events of the issue, in agent-loop order, with the flush points after
/// turn/start, user/message, tool/call and turn/end.
#[test]
fn turn_shape_and_flush_points() {
    let config = WorkloadConfig {
        turns: 2,
        compaction_every: 0,
        ..WorkloadConfig::default()
    };
    let groups = generate_session(&config, 0);
    let events = all_events(&groups);
    // Turn 1 carries the session title after its user message.
    assert_eq!(events.len(), 58 * 2 + 1);
    let turn2: Vec<&str> = events[59..].iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(turn2.len(), 58);
    assert_eq!(&turn2[..3], &["turn/start", "step/start", "user/message"]);
    assert!(turn2[3..53].iter().all(|k| *k == "assistant/chunk"));
    assert_eq!(
        &turn2[53..],
        &[
            "assistant/message",
            "tool/call",
            "tool/result",
            "step/end",
            "turn/end"
        ]
    );
    assert_eq!(events[3].kind, "session/title");
    // Four flush groups per turn (turn 1 has a fifth: the title), each ending at a flush point.
    assert_eq!(groups.len(), 9);
    for g in &groups {
        assert!(is_flush_point(&g.events.last().unwrap().kind));
    }
    assert!(
        flush_groups(events.clone()) == groups,
        "flush_groups splits like the generator"
    );
    // Seqs are contiguous from 0.
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64);
    }
}

/// Every event's data is valid JSON in dsh's shapes; chunk texts are 20-100 bytes plus the
/// separating space; results 2-8 KB (or large up to 50 KB); the assistant message cites its
/// chunks and its text is theirs; the result cites its call.
#[test]
fn event_shapes_are_dsh_shapes() {
    let config = WorkloadConfig {
        turns: 30,
        ..WorkloadConfig::default()
    };
    let events = all_events(&generate_session(&config, 1));
    let limits = JsonLimits::default();
    let mut chunk_texts: Vec<(u64, String)> = Vec::new();
    let mut large = 0;
    for e in &events {
        let v = json::parse(&e.data, &limits).unwrap_or_else(|err| panic!("seq {}: {err}", e.seq));
        match e.kind.as_str() {
            "assistant/chunk" => {
                let text = v
                    .pointer(&["chunk", "text"])
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert!(
                    (18..=101).contains(&text.len()),
                    "chunk of {} bytes",
                    text.len()
                );
                assert_eq!(
                    v.pointer(&["chunk", "type"]).unwrap().as_str(),
                    Some("text-delta")
                );
                chunk_texts.push((e.seq, text));
            }
            "assistant/message" => {
                let sources = e.source_event_seqs.clone().unwrap();
                let cited: Vec<u64> = chunk_texts.iter().map(|(s, _)| *s).collect();
                assert_eq!(sources, cited);
                let text: String = chunk_texts.iter().map(|(_, t)| t.as_str()).collect();
                let content = v
                    .pointer(&["message", "content"])
                    .unwrap()
                    .as_array()
                    .unwrap();
                assert_eq!(
                    content[0].get("text").unwrap().as_str(),
                    Some(text.as_str())
                );
                assert_eq!(content[1].get("type").unwrap().as_str(), Some("tool-call"));
                assert_eq!(
                    v.pointer(&["message", "source", "kind"]).unwrap().as_str(),
                    Some("model")
                );
                chunk_texts.clear();
            }
            "tool/result" => {
                let call = &events[e.source_event_seqs.as_ref().unwrap()[0] as usize];
                assert_eq!(call.kind, "tool/call");
                let call_id = json::parse(&call.data, &limits)
                    .unwrap()
                    .get("callId")
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert_eq!(
                    v.pointer(&["message", "source", "callId"])
                        .unwrap()
                        .as_str(),
                    Some(call_id.as_str())
                );
                let block = &v
                    .pointer(&["message", "content"])
                    .unwrap()
                    .as_array()
                    .unwrap()[0];
                assert_eq!(
                    block.get("toolCallId").unwrap().as_str(),
                    Some(call_id.as_str())
                );
                let text = block.get("content").unwrap().as_array().unwrap()[0]
                    .get("text")
                    .unwrap()
                    .as_str()
                    .unwrap();
                assert!(
                    (2048..=52 * 1024).contains(&text.len()),
                    "result of {} bytes",
                    text.len()
                );
                if text.len() > 10_000 {
                    large += 1;
                }
            }
            "user/message" => {
                assert_eq!(v.get("role").unwrap().as_str(), Some("user"));
                assert!(v.pointer(&["source", "kind"]).is_some());
            }
            _ => {}
        }
        assert_eq!(e.is_surface_type(), e.surface_op.is_some(), "seq {}", e.seq);
    }
    assert!(
        large < 10,
        "large results are the exception ({large} of 30)"
    );
}

/// A compaction replaces every surface node but the last turn's, citing all of them, and the
/// fold of the whole log gives the generator's own surface.
#[test]
fn compactions_replace_and_cite_every_shadowed_node() {
    let config = WorkloadConfig {
        turns: 25,
        compaction_every: 10,
        ..WorkloadConfig::default()
    };
    let mut generator = SessionGenerator::new(&config, 2);
    let events: Vec<Event> = generator.by_ref().flat_map(|g| g.events).collect();
    let mut nodes: Vec<u64> = Vec::new();
    let mut replaces = 0;
    for e in &events {
        match e.surface_op {
            Some(SurfaceOp::Append) => nodes.push(e.seq),
            Some(SurfaceOp::Replace { start, end }) => {
                replaces += 1;
                let a = nodes.iter().position(|s| *s == start).unwrap();
                let b = nodes.iter().position(|s| *s == end).unwrap();
                let sources: HashSet<u64> =
                    e.source_event_seqs.clone().unwrap().into_iter().collect();
                for s in &nodes[a..=b] {
                    assert!(sources.contains(s), "seq {}: shadowed {s} not cited", e.seq);
                }
                assert_eq!(nodes.len() - (b + 1), 3, "the last turn stays visible");
                assert_eq!(events[e.seq as usize - 2].kind, "compaction/start");
                assert_eq!(events[e.seq as usize + 1].kind, "compaction/end");
                nodes.splice(a..=b, [e.seq]);
            }
            None => {}
        }
        if let Some(s) = &e.source_event_seqs {
            assert!(s.iter().all(|x| *x < e.seq));
        }
    }
    assert_eq!(replaces, 2);
    assert_eq!(nodes, generator.surface());
    // Nested: the second compaction shadowed the first one's summary; what is left is its
    // summary, turn 20's three nodes and five more turns.
    assert_eq!(nodes.len(), 1 + 3 + 3 * 5);
}

/// The dsh workload averages about 354 bytes of JSON per event (the figure the issue's
/// targets were set with).
#[test]
fn average_event_size_matches_the_dsh_workload() {
    let config = WorkloadConfig {
        turns: 400,
        ..WorkloadConfig::default()
    };
    let events = all_events(&generate_session(&config, 0));
    let bytes: usize = events.iter().map(|e| event_json(e).len()).sum();
    let avg = bytes as f64 / events.len() as f64;
    eprintln!("{} events, {avg:.1} bytes of JSON per event", events.len());
    assert!((330.0..380.0).contains(&avg), "average {avg}");
}

#[test]
fn event_json_is_what_javascript_prints() {
    let e = Event::new("tool/result", 11, -5, r#"{"a":1}"#)
        .with_surface_op(SurfaceOp::Replace { start: 3, end: 5 })
        .with_sources(vec![3, 4, 5]);
    assert_eq!(
        event_json(&e),
        r#"{"type":"tool/result","seq":11,"time":-5,"data":{"a":1},"sourceEventSeqs":[3,4,5],"surfaceOp":{"op":"replace","start":3,"end":5}}"#
    );
    let e = Event::new("user/message", 0, 1, "{}").with_surface_op(SurfaceOp::Append);
    assert_eq!(
        event_json(&e),
        r#"{"type":"user/message","seq":0,"time":1,"data":{},"surfaceOp":"append"}"#
    );
    // Every generated line is valid JSON.
    for e in generate_events(&WorkloadConfig::default(), 3, 200) {
        json::validate(&event_json(&e), &JsonLimits::default()).unwrap();
    }
}

#[test]
fn generate_events_takes_a_prefix() {
    let config = WorkloadConfig::default();
    let events = generate_events(&config, 0, 1000);
    assert_eq!(events.len(), 1000);
    let whole = all_events(&generate_session(
        &WorkloadConfig {
            turns: 30,
            ..config
        },
        0,
    ));
    assert_eq!(&whole[..1000], &events[..]);
}

/// The store accepts every generated event (envelope, JSON, dsh's shapes, surface rules and
/// turn/step/tool invariants), and its surface and messages after a reopen are the
/// generator's surface.
#[test]
fn store_accepts_the_workload() {
    let dir = tempfile::tempdir().unwrap();
    let id = sessionlog_bench::workload::session_id(0);
    let config = WorkloadConfig {
        turns: 23,
        compaction_every: 10,
        ..WorkloadConfig::default()
    };
    let mut generator = SessionGenerator::new(&config, 0);
    let mut n = 0;
    {
        let store = Store::open(
            dir.path(),
            Config::default().durability(Durability::Buffered),
        )
        .unwrap();
        store.create_session(session_header(0)).unwrap();
        for g in generator.by_ref() {
            n += g.events.len() as u64;
            store.append_batch(&id, g.events).unwrap();
        }
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), Config::default()).unwrap();
    let session = store.resume(&id).unwrap();
    assert_eq!(session.len(), n);
    assert_eq!(session.surface().unwrap(), generator.surface());
    // Every node derives a message (the workload has no empty assistant messages).
    assert_eq!(session.messages().unwrap().len(), generator.surface().len());
}

/// The replay reader reads every fixture log: event counts match MANIFEST.tsv, seqs are
/// contiguous from 0, packed rows expand to chunk events.
#[test]
fn fixture_logs_replay() {
    let Some(root) = shared_fixtures::shared_fixtures("dsh-sessions") else {
        return;
    };
    let dir = root.join("dsh-sessions");
    let Some(sessions) = load_fixture_sessions(&dir).unwrap() else {
        shared_fixtures::skipped(&dir);
        return;
    };
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.tsv")).unwrap();
    let mut expected = std::collections::HashMap::new();
    for line in manifest.lines().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        expected.insert(cols[0].to_owned(), cols[4].parse::<usize>().unwrap());
    }
    assert_eq!(sessions.len(), expected.len());
    let mut chunks = 0;
    for s in &sessions {
        assert_eq!(s.events.len(), expected[&s.name], "{}", s.name);
        for (i, e) in s.events.iter().enumerate() {
            assert_eq!(e.seq, i as u64, "{} event {i}", s.name);
            json::validate(&e.data, &JsonLimits::default()).unwrap();
            if e.kind == "assistant/chunk" {
                chunks += 1;
            }
        }
    }
    assert!(chunks > 1000, "packed rows expanded ({chunks} chunks)");
}
