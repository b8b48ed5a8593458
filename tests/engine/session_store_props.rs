//! Property test: random valid operation sequences (appends, compactions, forks, reopen)
//! through the store give the same events, surface and messages as a simple in-memory model
//! (the whole log kept in a `Vec`, the surface and messages refolded from scratch).

use proptest::prelude::*;
use sessionlog::event::{Event, Seq, SessionHeader, SurfaceOp};
use sessionlog::session::InvariantMode;
use sessionlog::session::derive::derive_messages;
use sessionlog::session::surface::fold_surface;
use sessionlog::store::{Config, Durability, Intent, Store};
use sessionlog::typed::Raw;

#[derive(Debug, Clone)]
enum Op {
    User(u8),
    Assistant(u8),
    LogOnly,
    /// Replace the surface range [a, b] (positions modulo the surface length).
    Compact(u8, u8),
    /// Fork the session into a new one (at its tail) and continue on the child.
    Fork,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u8>().prop_map(Op::User),
        3 => any::<u8>().prop_map(Op::Assistant),
        2 => Just(Op::LogOnly),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::Compact(a, b)),
        1 => Just(Op::Fork),
        1 => Just(Op::Reopen),
    ]
}

fn user(seq: u64, n: u8) -> String {
    format!(
        r#"{{"id":"u{seq}","role":"user","content":[{{"type":"text","text":"n{n} \ud83d"}}],"source":{{"kind":"user"}}}}"#
    )
}

fn assistant(seq: u64, n: u8) -> String {
    let content = if n.is_multiple_of(5) {
        String::new()
    } else {
        format!(r#"{{"type":"text","text":"a{n}"}}"#)
    };
    format!(
        r#"{{"turn":1,"step":1,"message":{{"id":"a{seq}","role":"assistant","content":[{content}],"source":{{"kind":"model","provider":"p","model":"m"}}}}}}"#
    )
}

/// The model's view of a log: surface and messages folded from scratch.
fn fold(events: &[Event]) -> (Vec<Seq>, Vec<String>) {
    let surface = fold_surface(events).expect("the model log is valid").nodes;
    let messages = derive_messages(&surface, &events.to_vec())
        .unwrap()
        .into_iter()
        .map(|m| m.json.to_string())
        .collect();
    (surface, messages)
}

fn config() -> Config {
    Config::default()
        .durability(Durability::Buffered)
        .invariants(InvariantMode::Off)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path(), config()).unwrap();
        let mut id = "s0".to_string();
        store.create_session(SessionHeader::new(id.clone(), 1)).unwrap();
        let mut model: Vec<Event> = Vec::new();
        let mut forks = 0;
        for op in ops {
            let seq = model.len() as u64;
            let s = store.session(&id).unwrap();
            match op {
                Op::User(n) => {
                    let r = s.append(Raw::new("user/message", user(seq, n), Intent::append()).at(seq as i64)).unwrap();
                    model.push(s.get(r.seq).unwrap().unwrap());
                }
                Op::Assistant(n) => {
                    let r = s.append(Raw::new("assistant/message", assistant(seq, n), Intent::append()).at(seq as i64)).unwrap();
                    model.push(s.get(r.seq).unwrap().unwrap());
                }
                Op::LogOnly => {
                    let r = s.append(Raw::new("x/note", "null", Intent::none()).at(-(seq as i64))).unwrap();
                    model.push(s.get(r.seq).unwrap().unwrap());
                }
                Op::Compact(a, b) => {
                    let (surface, _) = fold(&model);
                    if surface.is_empty() {
                        continue;
                    }
                    let (a, b) = (a as usize % surface.len(), b as usize % surface.len());
                    let (lo, hi) = (a.min(b), a.max(b));
                    let shadowed = surface[lo..=hi].to_vec();
                    let intent = Intent {
                        surface_op: Some(SurfaceOp::Replace { start: surface[lo], end: surface[hi] }),
                        source_event_seqs: Some(shadowed),
                    };
                    let r = s.append(Raw::new("user/message", user(seq, 0), intent).at(seq as i64)).unwrap();
                    model.push(s.get(r.seq).unwrap().unwrap());
                }
                Op::Fork => {
                    if model.is_empty() {
                        continue;
                    }
                    forks += 1;
                    let child = format!("s{forks}");
                    let c = store.fork(&id, None, Some(&child)).unwrap();
                    // dsh adds a `session/end-seed` marker unless the seed already ends with one.
                    let ends_with_marker = model.last().is_some_and(|e| e.kind == "session/end-seed");
                    prop_assert_eq!(c.len(), seq + u64::from(!ends_with_marker));
                    if !ends_with_marker {
                        let marker = c.get(seq).unwrap().unwrap();
                        prop_assert_eq!(&marker.kind, "session/end-seed");
                        model.push(marker);
                    }
                    id = child;
                }
                Op::Reopen => {
                    drop(s);
                    store.close().unwrap();
                    store = Store::open(dir.path(), config()).unwrap();
                }
            }
            let s = store.session(&id).unwrap();
            let stored: Vec<Event> = s.events(0..s.len()).unwrap().map(|e| e.unwrap()).collect();
            prop_assert_eq!(&stored, &model);
            let (surface, messages) = fold(&model);
            prop_assert_eq!(s.surface().unwrap(), surface);
            let got: Vec<String> = s.messages().unwrap().into_iter().map(|m| m.json.to_string()).collect();
            prop_assert_eq!(got, messages);
        }
        // And once more from a rebuilt index.
        drop(store);
        std::fs::remove_file(dir.path().join("index.redb")).unwrap();
        let store = Store::open(dir.path(), config()).unwrap();
        let s = store.session(&id).unwrap();
        let (surface, messages) = fold(&model);
        prop_assert_eq!(s.surface().unwrap(), surface);
        let got: Vec<String> = s.messages().unwrap().into_iter().map(|m| m.json.to_string()).collect();
        prop_assert_eq!(got, messages);
    }
}
