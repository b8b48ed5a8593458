//! Properties (dsh's `properties.spec.ts` and the incremental-state contract): random valid
//! operation sequences (surface and log-only appends, replaces, tool-result rewrites, forks)
//! give the same surface and messages as a naive model that refolds every event, and the
//! incrementally kept `SessionState` equals one rebuilt from the events.

use crate::common::session_build;

use proptest::prelude::*;
use session_build::*;
use sessionlog::event::SessionHeader;
use sessionlog::event::{Event, SurfaceOp};
use sessionlog::json::{JsonLimits, parse, raw_member};
use sessionlog::session::SessionState;
use sessionlog::session::fork::plan_fork;
use sessionlog::session::invariants::InvariantMode;

#[derive(Debug, Clone)]
enum Op {
    User(u8),
    Assistant {
        empty: bool,
    },
    Tool(u8),
    LogOnly(u8),
    Replace {
        start: usize,
        len: usize,
        assistant: bool,
    },
    Rewrite(usize),
    BadReplace(usize),
    Fork(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u8>().prop_map(Op::User),
        2 => any::<bool>().prop_map(|empty| Op::Assistant { empty }),
        2 => any::<u8>().prop_map(Op::Tool),
        3 => any::<u8>().prop_map(Op::LogOnly),
        2 => (any::<usize>(), any::<usize>(), any::<bool>())
            .prop_map(|(start, len, assistant)| Op::Replace { start, len, assistant }),
        1 => any::<usize>().prop_map(Op::Rewrite),
        1 => any::<usize>().prop_map(Op::BadReplace),
        1 => any::<usize>().prop_map(Op::Fork),
    ]
}

/// The naive model: refold the whole log.
fn naive(events: &[Event]) -> (Vec<u64>, u64, Vec<String>) {
    let mut nodes: Vec<u64> = Vec::new();
    let mut generation = 0;
    for e in events {
        match e.surface_op {
            None => {}
            Some(SurfaceOp::Append) => nodes.push(e.seq),
            Some(SurfaceOp::Replace { start, end }) => {
                let i = nodes.iter().position(|&s| s == start).expect("start");
                let j = nodes.iter().position(|&s| s == end).expect("end");
                nodes.splice(i..=j, [e.seq]);
                generation += 1;
            }
        }
    }
    let limits = JsonLimits::default();
    let mut messages = Vec::new();
    for &seq in &nodes {
        let e = &events[seq as usize];
        match e.kind.as_str() {
            "user/message" => messages.push(e.data.clone()),
            "assistant/message" | "tool/result" => {
                let message = raw_member(&e.data, &["message"]).unwrap().unwrap();
                let value = parse(message, &limits).unwrap();
                let empty = value
                    .get("content")
                    .and_then(|c| c.as_array())
                    .is_some_and(|c| c.is_empty());
                if !(e.kind == "assistant/message" && empty) {
                    messages.push(message.to_string());
                }
            }
            _ => {}
        }
    }
    (nodes, generation, messages)
}

fn check(s: &mut Sess) {
    let (nodes, generation, messages) = naive(&s.log);
    assert_eq!(s.nodes(), nodes);
    assert_eq!(s.state.surface().replace_generation(), generation);
    assert_eq!(s.messages(), messages);
    let rebuilt = SessionState::rebuild(&s.log, InvariantMode::Off).unwrap();
    assert_eq!(rebuilt, s.state);
    let bytes = s.state.to_bytes().unwrap();
    assert_eq!(SessionState::from_bytes(&bytes).unwrap(), s.state);
    for (i, e) in s.log.iter().enumerate() {
        assert_eq!(e.seq, i as u64);
    }
}

fn run(ops: Vec<Op>) {
    let mut s = Sess::new();
    let mut counter = 0u64;
    for op in ops {
        counter += 1;
        let surface = s.nodes();
        match op {
            Op::User(n) => {
                s.push(
                    "user/message",
                    &user_data(&format!("u{counter}"), &format!("t{n}")),
                    app(),
                    None,
                );
            }
            Op::Assistant { empty } => {
                let sources = Some((0..s.state.next_seq()).rev().take(2).collect());
                let text = if empty { "" } else { "a" };
                let applied = s
                    .append(
                        "assistant/message",
                        &assistant_data(1, 1, &format!("a{counter}"), text),
                        app(),
                        sources,
                    )
                    .unwrap();
                // The fast path projects the new node without a lookup.
                let event = s.log.last().unwrap().clone();
                assert!(applied.surface.is_some());
                s.cache.observe(s.state.surface(), &event).unwrap();
            }
            Op::Tool(n) => {
                s.push(
                    "tool/result",
                    &tool_result_data(1, 1, &format!("c{counter}"), &format!("r{n}")),
                    app(),
                    None,
                );
            }
            Op::LogOnly(n) => {
                let (kind, data) = match n % 4 {
                    0 => ("assistant/chunk", chunk_data(1, 1, "x")),
                    1 => ("plan/mode", r#"{"active":true}"#.to_string()),
                    2 => ("future/plugin", "null".to_string()),
                    _ => (
                        "session/title",
                        r#"{"title":"t","messageSeqs":[],"source":{"kind":"user"}}"#.to_string(),
                    ),
                };
                s.push(kind, &data, None, None);
            }
            Op::Replace {
                start,
                len,
                assistant,
            } if !surface.is_empty() => {
                let i = start % surface.len();
                let j = i + len % (surface.len() - i).min(3);
                let shadowed: Vec<u64> = surface[i..=j].to_vec();
                let op = replace(surface[i], surface[j]);
                if assistant {
                    s.push(
                        "assistant/message",
                        &assistant_data(1, 1, &format!("s{counter}"), "summary"),
                        op,
                        Some(shadowed),
                    );
                } else {
                    s.push(
                        "user/message",
                        &user_data(&format!("k{counter}"), "checkpoint"),
                        op,
                        Some(shadowed),
                    );
                }
            }
            Op::Rewrite(pick) => {
                let tools: Vec<u64> = surface
                    .iter()
                    .copied()
                    .filter(|&seq| s.log[seq as usize].kind == "tool/result")
                    .collect();
                if let Some(&target) = tools.get(pick % tools.len().max(1)) {
                    let data = s.log[target as usize].data.clone();
                    let start = data.find(r#""text":""#).unwrap() + 8;
                    let end = start + data[start..].find('"').unwrap();
                    let pruned = format!("{}[pruned {counter}]{}", &data[..start], &data[end..]);
                    s.push(
                        "tool/result",
                        &pruned,
                        replace(target, target),
                        Some(vec![target]),
                    );
                }
            }
            Op::BadReplace(pick) if !surface.is_empty() => {
                let target = surface[pick % surface.len()];
                let before = s.state.clone();
                // Missing coverage, a forward source, and an unknown start are all refused.
                assert!(
                    s.append(
                        "user/message",
                        &user_data("bad", "x"),
                        replace(target, target),
                        None
                    )
                    .is_err()
                );
                let forward = Some(vec![target, s.state.next_seq()]);
                assert!(
                    s.append(
                        "user/message",
                        &user_data("bad", "x"),
                        replace(target, target),
                        forward
                    )
                    .is_err()
                );
                assert!(
                    s.append(
                        "user/message",
                        &user_data("bad", "x"),
                        replace(u64::MAX >> 12, target),
                        Some(vec![target])
                    )
                    .is_err()
                );
                assert_eq!(s.state, before);
            }
            Op::Fork(pick) => {
                let len = s.state.next_seq();
                let boundary = if len == 0 {
                    None
                } else {
                    Some(pick as u64 % len)
                };
                let header = SessionHeader::new("p", 0);
                let plan = plan_fork("p", &header, &s.state, boundary, "c", 1, &s.log).unwrap();
                let prefix: Vec<Event> = match plan.boundary {
                    Some(b) => s.log[..=b as usize].to_vec(),
                    None => Vec::new(),
                };
                assert_eq!(plan.seed_length, prefix.len() as u64);
                let state = SessionState::rebuild(&prefix, InvariantMode::Off).unwrap();
                if let Some(child_state) = &plan.child_state {
                    assert_eq!(child_state, &state);
                }
                let mut child = Sess {
                    log: prefix,
                    state,
                    cache: Default::default(),
                };
                if plan.needs_end_seed {
                    child.push("session/end-seed", "{}", None, None);
                }
                s = child;
            }
            _ => {}
        }
        check(&mut s);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    #[test]
    fn incremental_state_and_messages_equal_the_naive_refold(ops in proptest::collection::vec(op(), 1..40)) {
        run(ops);
    }

    #[test]
    fn log_only_events_never_change_the_derivation(
        surface_ops in proptest::collection::vec(0u8..3, 1..12),
        noise in proptest::collection::vec(proptest::option::of(0u8..4), 1..12),
    ) {
        let build = |with_noise: bool| {
            let mut s = Sess::new();
            for (i, k) in surface_ops.iter().enumerate() {
                if with_noise
                    && let Some(Some(n)) = noise.get(i)
                {
                    s.push(["plan/mode", "assistant/chunk", "x/y", "turn/start"][*n as usize], r#"{"turn":1,"step":1,"active":true}"#, None, None);
                }
                match k {
                    0 => s.push("user/message", &user_data(&format!("u{i}"), "x"), app(), None),
                    1 => s.push("assistant/message", &assistant_data(1, 1, &format!("a{i}"), "y"), app(), None),
                    _ => s.push("tool/result", &tool_result_data(1, 1, &format!("c{i}"), "z"), app(), None),
                };
            }
            s.messages()
        };
        prop_assert_eq!(build(false), build(true));
    }
}

#[test]
fn replaying_a_seed_adds_one_end_seed_and_a_log_ending_in_it_adds_nothing() {
    let mut s = Sess::new();
    s.push("user/message", &user_data("u", "x"), app(), None);
    let resumed = s.state.resume_events(7);
    assert_eq!(resumed.len(), 1);
    for e in resumed {
        let plan = s.state.plan_append(&e, &s.log).unwrap();
        s.log.push(e);
        s.state.apply(plan).unwrap();
    }
    assert!(s.state.resume_events(8).is_empty());
    let derived = s.messages();
    let replay = SessionState::rebuild(&s.log, InvariantMode::Off).unwrap();
    assert_eq!(replay, s.state);
    assert_eq!(derived, vec![user_data("u", "x")]);
}

#[test]
fn a_stale_plan_is_refused() {
    let mut s = Sess::new();
    let e = ev("plan/mode", 0, "{}", None, None);
    let plan = s.state.plan_append(&e, &s.log).unwrap();
    s.push("plan/mode", "{}", None, None);
    let err = s.state.apply(plan).unwrap_err();
    assert_eq!(
        err.to_string(),
        "stale append plan: planned for seq 0, but the session's next seq is 1"
    );
}

#[test]
fn a_fixed_sequence_exercises_every_operation() {
    run(vec![
        Op::User(1),
        Op::Tool(2),
        Op::Assistant { empty: true },
        Op::LogOnly(0),
        Op::User(3),
        Op::Replace {
            start: 1,
            len: 1,
            assistant: false,
        },
        Op::Tool(4),
        Op::Rewrite(0),
        Op::Rewrite(0),
        Op::BadReplace(1),
        Op::Replace {
            start: 0,
            len: 2,
            assistant: true,
        },
        Op::Fork(3),
        Op::User(5),
        Op::Fork(usize::MAX),
        Op::LogOnly(3),
    ]);
}
