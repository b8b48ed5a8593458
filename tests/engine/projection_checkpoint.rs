//! The checkpoint and restore ladder: checkpoint + replay of the tail equals a full fold
//! (proptest over random logs and cut points), and checkpoints that cannot be trusted
//! (another state version, bytes that do not decode, more events than the log) are ignored,
//! reported and rebuilt, never misread.

use proptest::prelude::*;
use sessionlog::event::{Event, Seq};
use sessionlog::projection::{
    ApplyError, Checkpoint, CheckpointPolicy, DecodeError, Fold, FoldProjection, ProjectionSet,
    RebuildReason, RecordError, RegisterError, UnitSource,
};
use std::convert::Infallible;

/// A user projection: counts events per kind (shows the trait is usable from outside).
#[derive(Debug)]
struct KindCount;

impl Fold for KindCount {
    type State = Vec<(String, u64)>;
    fn key(&self) -> &str {
        "kindCount"
    }
    fn state_version(&self) -> u32 {
        3
    }
    fn init(&self) -> Self::State {
        Vec::new()
    }
    fn apply(&self, state: &mut Self::State, event: &Event) -> bool {
        match state.iter_mut().find(|(k, _)| *k == event.kind) {
            Some(slot) => slot.1 += 1,
            None => state.push((event.kind.clone(), 1)),
        }
        true
    }
    fn view(&self, state: &Self::State) -> String {
        serde_json::to_string(state).unwrap()
    }
    fn encode(&self, state: &Self::State) -> Vec<u8> {
        postcard::to_allocvec(state).unwrap()
    }
    fn decode(&self, bytes: &[u8]) -> Result<Self::State, DecodeError> {
        postcard::from_bytes(bytes).map_err(|e| DecodeError::new(e.to_string()))
    }
}

fn set_with_user_projection() -> ProjectionSet {
    let mut units = Vec::new();
    for key in ["sessionStats", "title", "listing"] {
        units.push(ProjectionSet::builtin().projection(key).unwrap().clone());
    }
    units.push(FoldProjection::arc(KindCount));
    ProjectionSet::new(units).unwrap()
}

fn final_bytes(set: &ProjectionSet, log: &[Event]) -> Vec<Checkpoint> {
    set.checkpoint(&set.fold_all(log).unwrap())
}

fn ok(events: &[Event]) -> impl Iterator<Item = Result<Event, Infallible>> + '_ {
    events.iter().cloned().map(Ok)
}

/// A small realistic log with every event type the built-ins read.
fn sample_log() -> Vec<Event> {
    let lines = [
        ("turn/start", r#"{"turn":1}"#),
        (
            "user/message",
            r#"{"id":"u1","role":"user","content":[{"type":"text","text":"List the files"}],"source":{"kind":"user"}}"#,
        ),
        (
            "session/title",
            r#"{"title":"List the files","messageSeqs":[1],"source":{"kind":"fallback"}}"#,
        ),
        ("step/start", r#"{"turn":1,"step":1}"#),
        (
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":0,"id":"c1","name":"ls","argumentsDelta":"{}"}}"#,
        ),
        (
            "assistant/message",
            r#"{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"tool-call","id":"c1","name":"ls","arguments":{}}],"source":{"kind":"model"}},"usage":{"inputTokens":5,"outputTokens":9}}"#,
        ),
        (
            "tool/call",
            r#"{"turn":1,"step":1,"callId":"c1","name":"ls","arguments":{}}"#,
        ),
        (
            "tool/result",
            r#"{"turn":1,"step":1,"message":{"id":"r1","role":"user","content":[{"type":"tool-result","toolCallId":"c1","isError":false,"content":[]}],"source":{"kind":"tool","callId":"c1"}}}"#,
        ),
        ("step/end", r#"{"turn":1,"step":1}"#),
        ("turn/end", r#"{"turn":1,"reason":{"kind":"completed"}}"#),
    ];
    lines
        .iter()
        .enumerate()
        .map(|(i, (k, d))| Event::new(*k, i as Seq, 1000 + 100 * i as i64, *d))
        .collect()
}

#[test]
fn records_round_trip_and_refuse_other_layouts() {
    let cp = Checkpoint {
        key: "title".into(),
        version: 7,
        covered: 1 << 40,
        bytes: b"\"x\"".to_vec(),
    };
    let rec = cp.to_record();
    assert_eq!(&rec[..5], &[1, 7, 0, 0, 0]);
    assert_eq!(Checkpoint::from_record("title", &rec).unwrap(), cp);
    assert!(matches!(
        Checkpoint::from_record("title", &rec[..12]),
        Err(RecordError::Short { len: 12, .. })
    ));
    assert!(matches!(
        Checkpoint::from_record("title", &[]),
        Err(RecordError::Short { len: 0, .. })
    ));
    let mut other = rec.clone();
    other[0] = 2;
    assert!(matches!(
        Checkpoint::from_record("title", &other),
        Err(RecordError::Format { found: 2, .. })
    ));
}

#[test]
fn restore_from_every_cut_point_of_a_sample_log() {
    let set = set_with_user_projection();
    let log = sample_log();
    let full = final_bytes(&set, &log);
    for cut in 0..=log.len() {
        let prefix = set.fold_all(&log[..cut]).unwrap();
        let rows: Vec<Checkpoint> = set
            .checkpoint(&prefix)
            .iter()
            .map(|c| Checkpoint::from_record(c.key.clone(), &c.to_record()).unwrap())
            .collect();
        let mut r = set.restore(rows, log.len() as Seq);
        assert!(!r.rebuilt_any(), "cut {cut}: {:?}", r.units);
        assert_eq!(r.replay_from, cut as Seq);
        set.replay(&mut r.states, ok(&log[cut..])).unwrap();
        assert_eq!(set.checkpoint(&r.states), full, "cut {cut}");
    }
    let states = set.fold_all(&log).unwrap();
    assert_eq!(
        set.view(&states, "sessionStats").unwrap(),
        r#"{"turns":1,"steps":1,"llmMs":200,"toolMs":100,"ttftMs":100,"ttftSteps":1,"decodeMs":100,"decodeTokens":9}"#
    );
    assert_eq!(
        set.view(&states, "listing").unwrap(),
        r#"{"turnsEnded":1,"openTurn":null,"lastEnd":"completed","userMessages":1,"lastUserTime":1100,"titleSource":"fallback"}"#
    );
}

#[test]
fn untrustworthy_checkpoints_are_rebuilt_never_misread() {
    let set = set_with_user_projection();
    let log = sample_log();
    let full = final_bytes(&set, &log);
    let good = set.checkpoint(&set.fold_all(&log[..6]).unwrap());
    let stats_bytes = good[0].bytes.clone();
    let title_bytes = good[1].bytes.clone();
    let garbage: Vec<(&str, Vec<u8>)> = vec![
        ("not JSON", b"garbage".to_vec()),
        ("not UTF-8", vec![0xff, 0xfe, 0x00]),
        ("empty", Vec::new()),
        ("another unit's state", title_bytes.clone()),
        ("truncated", stats_bytes[..stats_bytes.len() - 1].to_vec()),
        ("empty object", b"{}".to_vec()),
        (
            "an extra key",
            String::from_utf8(stats_bytes.clone())
                .unwrap()
                .replacen('{', r#"{"extra":1,"#, 1)
                .into_bytes(),
        ),
        (
            "a negative counter",
            String::from_utf8(stats_bytes.clone())
                .unwrap()
                .replacen(r#""steps":0"#, r#""steps":-1"#, 1)
                .into_bytes(),
        ),
    ];
    for (what, bytes) in garbage {
        let mut rows = good.clone();
        rows[0].bytes = bytes;
        let mut r = set.restore(rows, log.len() as Seq);
        assert!(
            matches!(
                &r.units[0].1,
                UnitSource::Rebuilt(RebuildReason::Undecodable(_))
            ),
            "{what}: {:?}",
            r.units[0]
        );
        // The other units still come from their checkpoints.
        assert_eq!(r.units[1].1, UnitSource::Checkpoint { covered: 6 });
        assert_eq!(r.replay_from, 0, "{what}");
        set.replay(&mut r.states, ok(&log)).unwrap();
        assert_eq!(set.checkpoint(&r.states), full, "{what}");
    }
    // The user projection's postcard bytes, garbled, are refused too.
    let mut rows = good.clone();
    rows[3].bytes = vec![0xff; 3];
    let r = set.restore(rows, log.len() as Seq);
    assert!(matches!(
        &r.units[3].1,
        UnitSource::Rebuilt(RebuildReason::Undecodable(_))
    ));

    // Another state version: ignored even though the bytes would decode.
    let mut rows = good.clone();
    rows[1].version = 2;
    let mut r = set.restore(rows, log.len() as Seq);
    assert_eq!(
        r.units[1].1,
        UnitSource::Rebuilt(RebuildReason::VersionMismatch {
            found: 2,
            expected: 1
        })
    );
    set.replay(&mut r.states, ok(&log)).unwrap();
    assert_eq!(set.checkpoint(&r.states), full);

    // A checkpoint covering more events than the log holds (the log was replaced).
    let mut r = set.restore(good.clone(), 4);
    assert!(r.units.iter().all(|(_, s)| matches!(
        s,
        UnitSource::Rebuilt(RebuildReason::Ahead {
            covered: 6,
            log_len: 4
        })
    )));
    set.replay(&mut r.states, ok(&log[..4])).unwrap();
    assert_eq!(
        set.checkpoint(&r.states),
        set.checkpoint(&set.fold_all(&log[..4]).unwrap())
    );

    // Missing rows and rows nobody owns.
    let mut rows = good[1..].to_vec();
    rows.push(Checkpoint {
        key: "retired".into(),
        version: 1,
        covered: 0,
        bytes: vec![],
    });
    let r = set.restore(rows, log.len() as Seq);
    assert_eq!(r.units[0].1, UnitSource::Rebuilt(RebuildReason::Missing));
    assert_eq!(r.unknown_keys, vec!["retired".to_string()]);
}

#[test]
fn apply_refuses_gaps_and_foreign_states() {
    let set = ProjectionSet::builtin();
    let log = sample_log();
    let mut states = set.fresh();
    set.apply(&mut states, &log[0]).unwrap();
    let before = set.checkpoint(&states);
    let err = set.apply(&mut states, &log[2]).unwrap_err();
    assert!(matches!(
        err,
        ApplyError::Gap {
            covered: 1,
            seq: 2,
            ..
        }
    ));
    assert!(err.to_string().contains("cannot fold seq 2"));
    assert_eq!(
        set.checkpoint(&states),
        before,
        "a refused event changes nothing"
    );
    // An event already folded is skipped.
    assert!(!set.apply(&mut states, &log[0]).unwrap());
    assert_eq!(set.checkpoint(&states), before);
    let other = ProjectionSet::dsh();
    assert!(matches!(
        other.apply(&mut states, &log[1]),
        Err(ApplyError::ForeignStates { .. })
    ));
    assert!(other.checkpoint(&states).is_empty());
}

#[test]
fn registration_refuses_duplicate_and_empty_keys() {
    let stats = ProjectionSet::dsh()
        .projection("sessionStats")
        .unwrap()
        .clone();
    assert_eq!(
        ProjectionSet::new(vec![stats.clone(), stats]).unwrap_err(),
        RegisterError::DuplicateKey("sessionStats".into())
    );
    #[derive(Debug)]
    struct Nameless;
    impl Fold for Nameless {
        type State = ();
        fn key(&self) -> &str {
            ""
        }
        fn state_version(&self) -> u32 {
            0
        }
        fn init(&self) {}
        fn apply(&self, _: &mut (), _: &Event) -> bool {
            false
        }
        fn view(&self, _: &()) -> String {
            "null".into()
        }
        fn encode(&self, _: &()) -> Vec<u8> {
            Vec::new()
        }
        fn decode(&self, _: &[u8]) -> Result<(), DecodeError> {
            Ok(())
        }
    }
    assert_eq!(
        ProjectionSet::new(vec![FoldProjection::arc(Nameless)]).unwrap_err(),
        RegisterError::EmptyKey
    );
}

#[test]
fn checkpoint_policy_fires_on_turn_end_and_every_n_events() {
    let set = ProjectionSet::builtin();
    let log = sample_log();
    let policy = CheckpointPolicy { every_events: 4 };
    let mut states = set.fresh();
    let mut due_at = Vec::new();
    for e in &log {
        set.apply(&mut states, e).unwrap();
        if policy.due(&states, e) {
            due_at.push(e.seq);
            states.mark_checkpointed();
        }
    }
    // After 4 events (seq 3), 4 more (seq 7), and the turn/end (seq 9).
    assert_eq!(due_at, vec![3, 7, 9]);
    assert_eq!(states.since_checkpoint(), 0);
}

// ---- proptest ------------------------------------------------------------------------------

type Piece = (u8, u8, u8, u8, i64);

fn event_strategy() -> impl Strategy<Value = Piece> {
    (0u8..24, 1u8..3, 1u8..3, 0u8..64, -50i64..5000)
}

/// Expands pieces into a log: kinds 0..16 are single events, 16..24 a whole step episode
/// (step/start, chunks, message, tool call and result, step/end) with parts left out by the
/// bits of `pick`, so first tokens, decode and tool timings occur often.
fn make_log(pieces: Vec<Piece>) -> Vec<Event> {
    let mut log = Vec::new();
    for (kind, turn, step, pick, time) in pieces {
        if kind < 16 {
            log.push(make_event(log.len() as Seq, (kind, turn, step, pick, time)));
            continue;
        }
        let mut t = time;
        let mut push = |log: &mut Vec<Event>, k: u8, p: u8, dt: i64| {
            t += dt;
            log.push(make_event(log.len() as Seq, (k, turn, step, p, t)));
        };
        push(&mut log, 2, 0, 0); // step/start
        if pick & 1 == 0 {
            push(&mut log, 4, 3, 5); // block-start: not a token
        }
        push(&mut log, 4, pick % 6, 40); // a chunk, mostly a token
        push(&mut log, 4, 0, 7); // a text token
        if pick & 2 == 0 {
            push(&mut log, 11, 0, 3); // llm/retry
        }
        if pick & 4 == 0 {
            push(&mut log, 6, pick >> 3, 300); // assistant/message
        }
        if pick & 8 == 0 {
            push(&mut log, 7, pick, 10); // tool/call
            push(
                &mut log,
                if pick & 16 == 0 { 8 } else { 13 },
                pick,
                90 - (pick as i64),
            ); // result
        }
        if pick & 32 == 0 {
            push(&mut log, 3, 0, 1); // step/end
        }
    }
    log
}

fn make_event(seq: Seq, (kind, turn, step, pick, time): (u8, u8, u8, u8, i64)) -> Event {
    let call_ids = ["a", "b", "c", "toString", "7", "a"];
    let id = call_ids[pick as usize % call_ids.len()];
    let (k, data): (&str, String) = match kind {
        0 => ("turn/start", format!(r#"{{"turn":{turn}}}"#)),
        1 => (
            "turn/end",
            format!(r#"{{"turn":{turn},"reason":{{"kind":"completed"}}}}"#),
        ),
        2 => ("step/start", format!(r#"{{"turn":{turn},"step":{step}}}"#)),
        3 => ("step/end", format!(r#"{{"turn":{turn},"step":{step}}}"#)),
        4 | 5 => {
            let chunk = match pick {
                0 => r#"{"type":"text-delta","index":0,"text":"x"}"#,
                1 => r#"{"type":"reasoning-delta","index":0,"text":""}"#,
                2 => r#"{"type":"tool-call-delta","index":0,"id":"c","argumentsDelta":"{"}"#,
                3 => r#"{"type":"block-start","index":0,"blockType":"text"}"#,
                4 => r#"{"type":"usage","usage":{"outputTokens":3}}"#,
                _ => {
                    r#"{"type":"tool-call-delta","index":0,"id":"c","name":"n","argumentsDelta":""}"#
                }
            };
            (
                "assistant/chunk",
                format!(r#"{{"turn":{turn},"step":{step},"chunk":{chunk}}}"#),
            )
        }
        6 => {
            let usage = match pick {
                0 => "",
                1 => r#","usage":{"inputTokens":1,"outputTokens":0}"#,
                2 => r#","usage":{"outputTokens":12.5}"#,
                _ => r#","usage":{"inputTokens":4,"outputTokens":40}"#,
            };
            (
                "assistant/message",
                format!(
                    r#"{{"turn":{turn},"step":{step},"message":{{"id":"m{seq}","role":"assistant","content":[],"source":{{"kind":"model"}}}}{usage}}}"#
                ),
            )
        }
        7 => (
            "tool/call",
            format!(
                r#"{{"turn":{turn},"step":{step},"callId":"{id}","name":"x","arguments":{{}}}}"#
            ),
        ),
        8 => (
            "tool/result",
            format!(
                r#"{{"turn":{turn},"step":{step},"message":{{"id":"r{seq}","role":"user","content":[],"source":{{"kind":"tool","callId":"{id}"}}}}}}"#
            ),
        ),
        9 => {
            let source = ["fallback", "user", "provider"][pick as usize % 3];
            (
                "session/title",
                format!(
                    r#"{{"title":"t{}","messageSeqs":[],"source":{{"kind":"{source}"}}}}"#,
                    pick % 2
                ),
            )
        }
        10 => {
            let source = if pick % 2 == 0 { "user" } else { "system" };
            (
                "user/message",
                format!(
                    r#"{{"id":"u{seq}","role":"user","content":[{{"type":"text","text":"hi"}}],"source":{{"kind":"{source}"}}}}"#
                ),
            )
        }
        11 => ("llm/retry", format!(r#"{{"turn":{turn},"step":{step}}}"#)),
        12 => ("step/start", "null".to_string()),
        13 => (
            "tool/result",
            format!(
                r#"{{"turn":{turn},"step":{step},"callId":"{id}","content":[],"isError":false}}"#
            ),
        ),
        _ => ("plan/mode", r#"{"active":true}"#.to_string()),
    };
    Event::new(k, seq, time, data)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Checkpoint after a random cut, store it as index records, restore, replay the tail:
    /// every unit's state and view equal a full fold's.
    #[test]
    fn checkpoint_plus_tail_equals_full_fold(
        raw in prop::collection::vec(event_strategy(), 0..40),
        cut_frac in 0.0f64..=1.0,
        drop_mask in 0u8..16,
    ) {
        let log = make_log(raw);
        let set = set_with_user_projection();
        let full = set.fold_all(&log).unwrap();
        let cut = ((log.len() as f64) * cut_frac).floor() as usize;
        let prefix = set.fold_all(&log[..cut]).unwrap();
        // Drop some rows (as if never written) to mix watermarks.
        let rows: Vec<Checkpoint> = set
            .checkpoint(&prefix)
            .into_iter()
            .enumerate()
            .filter(|(i, _)| drop_mask & (1 << i) == 0)
            .map(|(_, c)| Checkpoint::from_record(c.key.clone(), &c.to_record()).unwrap())
            .collect();
        let mut r = set.restore(rows, log.len() as Seq);
        let expected_from = if drop_mask & 0b1111 == 0 { cut as Seq } else { 0 };
        prop_assert_eq!(r.replay_from, expected_from);
        set.replay(&mut r.states, ok(&log[r.replay_from as usize..])).unwrap();
        prop_assert_eq!(set.checkpoint(&r.states), set.checkpoint(&full));
        prop_assert_eq!(set.views(&r.states), set.views(&full));
        prop_assert_eq!(r.states.covered(), log.len() as Seq);
    }

    /// Random bytes under a registered key never decode into a state that differs from the
    /// truth after the replay: either they are refused (rebuild) or they were a valid state
    /// for that unit, in which case the restore honours them as written.
    #[test]
    fn random_bytes_are_refused(bytes in prop::collection::vec(any::<u8>(), 0..64), unit in 0usize..3) {
        let set = ProjectionSet::builtin();
        let key = set.keys().nth(unit).unwrap().to_string();
        let r = set.restore(vec![Checkpoint { key, version: 1, covered: 0, bytes: bytes.clone() }], 0);
        match &r.units[unit].1 {
            UnitSource::Rebuilt(RebuildReason::Undecodable(_)) => {}
            UnitSource::Checkpoint { .. } => {
                // Only a valid encoding is accepted, and it holds the value the bytes spell.
                let limits = sessionlog::json::JsonLimits::default();
                let written = sessionlog::json::parse(std::str::from_utf8(&bytes).unwrap(), &limits).unwrap();
                let again = set.checkpoint(&r.states)[unit].bytes.clone();
                let reread = sessionlog::json::parse(std::str::from_utf8(&again).unwrap(), &limits).unwrap();
                prop_assert_eq!(written, reread);
            }
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }
}

/// The generated logs exercise every timing of `sessionStats` (so the property above can fail).
#[test]
fn generated_logs_exercise_every_timing() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = prop::collection::vec(event_strategy(), 0..40);
    let set = ProjectionSet::dsh();
    let mut seen = [0usize; 4];
    for _ in 0..100 {
        let log = make_log(strategy.new_tree(&mut runner).unwrap().current());
        let states = set.fold_all(&log).unwrap();
        let s = states
            .get::<sessionlog::projection::SessionStatsProjection>("sessionStats")
            .unwrap();
        for (i, v) in [s.ttft_steps, s.decode_ms, s.tool_ms, s.turns]
            .into_iter()
            .enumerate()
        {
            if v > 0.0 {
                seen[i] += 1;
            }
        }
    }
    assert!(seen.iter().all(|&n| n >= 30), "{seen:?}");
}
