//! Every dsh fixture log through the session layer, against what dsh itself derived
//! (`dsh-expected/<name>.json`): load verdicts, surface, replace generation, messages.
//!
//! dsh's `jsonl_load` path starts with the JSONL reader (header-line rules, torn tails),
//! which belongs to `interop::jsonl`; here the session layer is fed the same events that
//! reader hands dsh's coordinator. Refusals that come from that reader or from dsh's test
//! scaffold (`session "…" not found` for a header-only file) are listed as such.

use crate::common::session_fixtures;

use session_fixtures::{Fixture, expected, fixture_names, fixtures_root, load_fixture};
use sessionlog::event::Event;
use sessionlog::interop::jsonl::{ReadOptions, read};
use sessionlog::json::{JsonLimits, JsonValue, parse, stringify};
use sessionlog::session::derive::MessageCache;
use sessionlog::session::invariants::{InvariantMode, verify};
use sessionlog::session::load::{LoadError, LoadedSession, load_stored, load_stored_raw};
use sessionlog::session::{RawDefects, SessionState};
use std::collections::BTreeMap;

fn ok_of(v: &JsonValue) -> Result<(), String> {
    if v.get("ok").and_then(|o| o.as_bool()) == Some(true) {
        Ok(())
    } else {
        Err(v
            .get("error")
            .and_then(|e| e.as_str())
            .unwrap_or_default()
            .to_string())
    }
}

/// A refusal produced by the session layer (coordinator + Session), not by the JSONL
/// reader or the test scaffold.
fn is_session_layer_refusal(message: &str) -> bool {
    message.starts_with("stored session \"") || message.contains("\" contains ")
}

fn load(
    fx: &Fixture,
    events: &[sessionlog::session::load::StoredEvent],
) -> Result<LoadedSession, LoadError> {
    let header = fx
        .header
        .as_ref()
        .expect("fixture with events has a header");
    load_stored_raw(&header.id, header, events, InvariantMode::Off)
}

/// Appends dsh's load-time closers (none for the accepted fixtures, but applied as dsh does).
fn with_closers(loaded: &mut LoadedSession, events: &mut Vec<Event>) {
    for closer in loaded.state.closers() {
        let index = closer.seq;
        let plan = loaded
            .state
            .plan_seed(&closer, index, &RawDefects::default(), &events.as_slice())
            .expect("closers are valid");
        loaded.state.apply(plan).expect("fresh plan");
        events.push(closer);
    }
}

fn compare(base: &str, exp: &JsonValue, loaded: &mut LoadedSession, stored_events: &[Event]) {
    let mut view: Vec<Event> = loaded.view.apply(stored_events);
    with_closers(loaded, &mut view);
    let count = exp
        .get("event_count")
        .and_then(|c| c.as_f64())
        .expect("event_count") as usize;
    assert_eq!(stored_events.len(), count, "{base}: event count");
    let surface: Vec<u64> = exp
        .get("surface")
        .and_then(|s| s.as_array())
        .expect("surface")
        .iter()
        .map(|n| n.as_f64().expect("seq") as u64)
        .collect();
    assert_eq!(
        loaded.state.surface().nodes(),
        surface.as_slice(),
        "{base}: surface"
    );
    let generation = exp
        .get("replaceGeneration")
        .and_then(|g| g.as_f64())
        .expect("gen") as u64;
    assert_eq!(
        loaded.state.surface().replace_generation(),
        generation,
        "{base}: replaceGeneration"
    );
    let mut cache = MessageCache::new();
    cache
        .refresh(loaded.state.surface(), &view)
        .expect("derive");
    let messages = exp
        .get("messages")
        .and_then(|m| m.as_array())
        .expect("messages");
    assert_eq!(
        cache.messages().len(),
        messages.len(),
        "{base}: message count"
    );
    let limits = JsonLimits {
        max_depth: usize::MAX,
        max_bytes: usize::MAX,
    };
    for (i, (ours, theirs)) in cache.messages().iter().zip(messages).enumerate() {
        // As values with JS semantics (key order included, as JSON.stringify prints them) …
        let ours_value = parse(&ours.json, &limits).expect("our message is JSON");
        assert_eq!(
            stringify(&ours_value),
            stringify(theirs),
            "{base}: message {i} (value)"
        );
        // … and as text: our output is the stored slice, which dsh wrote with JSON.stringify.
        assert_eq!(*ours.json, *stringify(theirs), "{base}: message {i} (text)");
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Loaded; surface and messages equal dsh's.
    Matches(&'static str),
    /// Refused by the session layer with dsh's exact message.
    RefusedSame,
    /// Refused by dsh's JSONL reader or test scaffold (not the session layer).
    OutsideSessionLayer,
}

#[test]
fn every_fixture_matches_dsh() {
    let Some(root) = fixtures_root() else { return };
    let mut tally: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let names = fixture_names(&root);
    assert_eq!(names.len(), 120, "fixture count");
    for base in &names {
        let fx = load_fixture(&root, base);
        let exp = expected(&root, base);
        let jsonl = ok_of(exp.get("jsonl_load").expect("jsonl_load"));
        let seed = ok_of(exp.get("seed_load").expect("seed_load"));
        let derived_from = exp
            .get("derived_from")
            .and_then(|d| d.as_str())
            .map(str::to_string);
        let verdict = match derived_from.as_deref() {
            Some("jsonl_load") if fx.full_form => {
                let mut loaded = load(&fx, &fx.events).unwrap_or_else(|e| panic!("{base}: {e}"));
                let stored: Vec<Event> = fx.events.iter().map(|e| e.event.clone()).collect();
                compare(base, &exp, &mut loaded, &stored);
                Verdict::Matches("jsonl")
            }
            Some("jsonl_load") => {
                // A replay fixture through the JSONL reader: the first event line has no seq,
                // a seq gap with no later turn/end, so the whole body is a discarded torn tail.
                assert!(
                    !fx.events.iter().any(|e| e.event.kind == "turn/end"),
                    "{base}: torn-tail model does not apply"
                );
                let mut loaded = load(&fx, &[]).unwrap_or_else(|e| panic!("{base}: {e}"));
                compare(base, &exp, &mut loaded, &[]);
                Verdict::Matches("jsonl (torn tail)")
            }
            Some("seed_load") => {
                let mut loaded = load(&fx, &fx.events).unwrap_or_else(|e| panic!("{base}: {e}"));
                let stored: Vec<Event> = fx.events.iter().map(|e| e.event.clone()).collect();
                compare(base, &exp, &mut loaded, &stored);
                Verdict::Matches("seed")
            }
            Some(other) => panic!("{base}: unknown derived_from {other}"),
            None => {
                let mut same = false;
                for (path, refusal) in [("seed", &seed), ("jsonl", &jsonl)] {
                    let Err(message) = refusal else { continue };
                    if !is_session_layer_refusal(message) {
                        continue;
                    }
                    if path == "jsonl" && !fx.full_form {
                        continue;
                    }
                    let ours = load(&fx, &fx.events).err().unwrap_or_else(|| {
                        panic!("{base}: we accepted what dsh refused: {message}")
                    });
                    assert_eq!(&ours.to_string(), message, "{base}: refusal text");
                    same = true;
                }
                if same {
                    Verdict::RefusedSame
                } else {
                    Verdict::OutsideSessionLayer
                }
            }
        };
        // Whenever dsh's seed path accepted the file, ours accepts it too.
        if seed.is_ok() && !fx.events.is_empty() {
            load(&fx, &fx.events).unwrap_or_else(|e| panic!("{base}: seed path refused: {e}"));
        }
        tally
            .entry(format!("{verdict:?}"))
            .or_default()
            .push(base.clone());
    }
    for (verdict, files) in &tally {
        eprintln!("{verdict}: {}", files.len());
        if !verdict.starts_with("Matches") {
            for f in files {
                eprintln!("    {f}");
            }
        }
    }
    let count = |k: &str| tally.get(k).map_or(0, Vec::len);
    assert_eq!(
        count("Matches(\"jsonl\")")
            + count("Matches(\"jsonl (torn tail)\")")
            + count("Matches(\"seed\")"),
        104
    );
    assert_eq!(count("RefusedSame"), 10);
    assert_eq!(count("OutsideSessionLayer"), 6);
}

/// Invariant verdicts (§6) of every fixture dsh loads, as recorded by `verify`.
#[test]
fn invariant_verdicts_of_fixtures() {
    let Some(root) = fixtures_root() else { return };
    let mut table: Vec<(String, usize, String)> = Vec::new();
    let mut max_state = (0usize, 0usize);
    for base in fixture_names(&root) {
        let fx = load_fixture(&root, &base);
        let Some(header) = fx.header.as_ref() else {
            continue;
        };
        let Ok(loaded) = load_stored_raw(&header.id, header, &fx.events, InvariantMode::Off) else {
            continue;
        };
        let stored: Vec<Event> = fx.events.iter().map(|e| e.event.clone()).collect();
        let view = loaded.view.apply(&stored);
        // The incremental state round-trips through postcard and equals a rebuild of the view.
        let bytes = loaded.state.to_bytes().expect("serialise");
        assert_eq!(
            SessionState::from_bytes(&bytes).expect("deserialise"),
            loaded.state
        );
        assert_eq!(
            SessionState::rebuild(&view, InvariantMode::Off).expect("rebuild"),
            loaded.state,
            "{base}"
        );
        max_state = max_state.max((bytes.len(), view.len()));
        let violations = verify(&view);
        assert_eq!(
            violations.len() as u64,
            loaded.state.admitted_violations(),
            "{base}: incremental count"
        );
        let first = violations
            .first()
            .map(|v| format!("seq {}: {}", v.seq, v.detail))
            .unwrap_or_default();
        table.push((base, violations.len(), first));
    }
    eprintln!(
        "largest serialised state: {} bytes ({} events)",
        max_state.0, max_state.1
    );
    for (base, n, first) in &table {
        if *n > 0 {
            eprintln!("{n:>4} {base} {first}");
        }
    }
    // Recorded verdicts: every loadable fixture keeps dsh's turn/step/tool relations except
    // these replay fixtures, which hold chunks (or a whole turn body) without their
    // turn/step brackets.
    const VIOLATING: [(&str, usize, &str); 5] = [
        (
            "apps-web-tests-snapshots-minimal-preset-session",
            5,
            "seq 1: assistant/chunk names turn 1/step 1 but open is turn null/step null",
        ),
        (
            "apps-web-tests-snapshots-web-search-round-session",
            10,
            "seq 1: assistant/chunk names turn 1/step 1 but open is turn null/step null",
        ),
        (
            "examples-headless-agent-tests-snapshots-ralph-loop-session.1",
            5,
            "seq 0: assistant/chunk names turn 1/step 1 but open is turn null/step null",
        ),
        (
            "examples-headless-agent-tests-snapshots-ralph-loop-session.2",
            5,
            "seq 0: assistant/chunk names turn 1/step 1 but open is turn null/step null",
        ),
        (
            "examples-headless-agent-tests-snapshots-subagent-settlement-child.replay",
            5,
            "seq 0: assistant/chunk names turn 1/step 1 but open is turn null/step null",
        ),
    ];
    let violating: Vec<(&str, usize, &str)> = table
        .iter()
        .filter(|(_, n, _)| *n > 0)
        .map(|(b, n, f)| (b.as_str(), *n, f.as_str()))
        .collect();
    assert_eq!(violating, VIOLATING.to_vec());
    assert_eq!(table.len(), 110, "fixtures the session layer loads");
}

/// dsh's `jsonl_load` path end to end: `interop::jsonl::read` (header rules, torn tails,
/// packed rows) and then the session layer. The verdict must agree with dsh's on every file;
/// session-layer refusals must carry dsh's exact text; loaded files must derive dsh's surface
/// and messages.
#[test]
fn jsonl_reader_then_session_layer_agree_with_dsh() {
    let Some(root) = fixtures_root() else { return };
    let (mut loaded_count, mut refused_count) = (0, 0);
    for base in fixture_names(&root) {
        let raw = std::fs::read_to_string(root.join("dsh-sessions").join(format!("{base}.jsonl")))
            .expect("fixture");
        let text = session_fixtures::substitute(&raw, &base);
        let exp = expected(&root, &base);
        let dsh = ok_of(exp.get("jsonl_load").expect("jsonl_load"));
        let ours = match read(text.as_bytes(), &ReadOptions::default()) {
            Ok(log) => load_stored(&log.header.id, &log.header, &log.events, InvariantMode::Off)
                .map(|loaded| (log, loaded))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match (dsh, ours) {
            (Ok(()), Ok((log, mut loaded))) => {
                assert_eq!(
                    exp.get("derived_from").and_then(|d| d.as_str()),
                    Some("jsonl_load")
                );
                compare(&base, &exp, &mut loaded, &log.events);
                loaded_count += 1;
            }
            (Err(message), Err(ours)) => {
                if is_session_layer_refusal(&message) {
                    assert_eq!(ours, message, "{base}");
                } else {
                    assert!(
                        ours.starts_with("corrupt session log"),
                        "{base}: {ours} vs dsh {message}"
                    );
                }
                refused_count += 1;
            }
            (dsh, ours) => panic!("{base}: dsh {dsh:?}, ours {:?}", ours.map(|_| ())),
        }
    }
    assert_eq!((loaded_count, refused_count), (82, 38));
}
