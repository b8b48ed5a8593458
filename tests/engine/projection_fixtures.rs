//! The built-in projections over every dsh fixture log that dsh's JSONL loader accepts
//! (`dsh-expected/INDEX.tsv`), read with `interop::jsonl::read` and legacy shapes converted as
//! dsh's readers present them.
//!
//! - invariants checked independently of the folds (step and turn counts, the last title,
//!   the listing counts, pending calls closed by the final `turn/end`);
//! - exact `sessionStats` values for four fixtures, computed by hand (arithmetic in comments);
//! - dsh's own fallback titles reproduced by `fallback_session_title`;
//! - checkpoint at every `turn/end` + replay of the rest = the full fold.

use crate::common::jsonl_fixtures;

use jsonl_fixtures::{fixture_text, fixtures_dir, index};
use sessionlog::event::{Event, Seq};
use sessionlog::interop::jsonl::{ReadOptions, read};
use sessionlog::projection::title::{eligible_text, fallback_session_title};
use sessionlog::projection::{
    ListingProjection, ProjectionSet, SessionStatsProjection, TitleProjection,
};
use sessionlog::session::legacy::LegacyView;
use std::collections::BTreeMap;
use std::convert::Infallible;

/// The fixtures dsh's JSONL loader accepts, as dsh's readers present their events.
fn accepted_logs() -> Option<Vec<(String, Vec<Event>)>> {
    let dir = fixtures_dir()?;
    let mut out = Vec::new();
    for v in index(&dir).into_iter().filter(|v| v.jsonl_ok) {
        let text = fixture_text(&dir, &v.file);
        let log = read(text.as_bytes(), &ReadOptions::default())
            .unwrap_or_else(|e| panic!("{}: dsh loads it, so must we: {e}", v.file));
        let view = LegacyView::convert(&log.header.id, &log.events)
            .unwrap_or_else(|e| panic!("{}: {e}", v.file));
        out.push((v.file, view.apply(&log.events)));
    }
    Some(out)
}

fn data(e: &Event) -> serde_json::Value {
    serde_json::from_str(&e.data).unwrap()
}

#[test]
fn every_accepted_fixture_folds_by_dshs_rules() {
    let Some(logs) = accepted_logs() else { return };
    assert_eq!(
        logs.len(),
        82,
        "INDEX.tsv lists 82 files dsh's JSONL loader accepts"
    );
    let set = ProjectionSet::builtin();
    let mut with_steps = 0;
    let mut with_title = 0;
    for (file, log) in &logs {
        let states = set.fold_all(log).unwrap();
        let stats = states
            .get::<SessionStatsProjection>("sessionStats")
            .unwrap();
        let title = states.get::<TitleProjection>("title").unwrap();
        let listing = states.get::<ListingProjection>("listing").unwrap();

        // Independent recount: steps are step/end events; turns are the runs of equal
        // `data.turn` among them.
        let step_ends: Vec<serde_json::Value> = log
            .iter()
            .filter(|e| e.kind == "step/end")
            .map(|e| data(e)["turn"].clone())
            .collect();
        let mut runs = 0;
        let mut last = serde_json::Value::Null;
        for t in &step_ends {
            if *t != last {
                runs += 1;
            }
            last = t.clone();
        }
        assert_eq!(stats.steps, step_ends.len() as f64, "{file}: steps");
        assert_eq!(stats.turns, runs as f64, "{file}: turns");
        let turn_ends = log.iter().filter(|e| e.kind == "turn/end").count();
        assert_eq!(
            listing.turns_ended, turn_ends as f64,
            "{file}: turn/end count"
        );
        // Each turn that ran a step ended (these logs are complete).
        assert!(
            stats.turns <= turn_ends as f64,
            "{file}: more turns than turn/end"
        );
        let messages = log.iter().filter(|e| e.kind == "assistant/message").count();
        assert!(
            stats.ttft_steps <= stats.steps.min(messages as f64),
            "{file}: ttftSteps"
        );
        if stats.decode_tokens > 0.0 {
            assert!(
                stats.ttft_steps > 0.0,
                "{file}: decode without a first token"
            );
        }
        for v in [stats.llm_ms, stats.tool_ms, stats.ttft_ms, stats.decode_ms] {
            assert!(v.is_finite() && v >= 0.0, "{file}");
        }
        // A log that ends with turn/end has no pending call left.
        if log.last().is_some_and(|e| e.kind == "turn/end") {
            assert!(
                stats.pending_calls.is_empty(),
                "{file}: pending calls after turn/end"
            );
            assert!(
                listing.open_turn.is_none(),
                "{file}: open turn after turn/end"
            );
        }
        // The title is the last session/title's data.title.
        let last_title = log
            .iter()
            .rev()
            .find(|e| e.kind == "session/title")
            .map(|e| data(e)["title"].clone());
        match &last_title {
            Some(serde_json::Value::String(s)) => {
                assert_eq!(title.as_str(), Some(s.as_str()), "{file}: title");
                with_title += 1;
            }
            None => assert_eq!(title.0, None, "{file}: no title event"),
            Some(other) => panic!("{file}: title {other}"),
        }
        let user_messages = log
            .iter()
            .filter(|e| e.kind == "user/message" && data(e)["source"]["kind"] == "user")
            .count();
        assert_eq!(listing.user_messages, user_messages as f64, "{file}");
        if stats.steps > 0.0 {
            with_steps += 1;
        }
    }
    assert!(with_steps >= 60, "{with_steps} fixtures with steps");
    assert!(with_title >= 60, "{with_title} fixtures with titles");
}

/// dsh wrote fallback titles into the fixtures; `fallback_session_title` with dsh's
/// configuration reproduces every one of them from the message it cites.
#[test]
fn dshs_fallback_titles_are_reproduced() {
    let Some(logs) = accepted_logs() else { return };
    let mut checked = 0;
    for (file, log) in &logs {
        for e in log.iter().filter(|e| e.kind == "session/title") {
            let d = data(e);
            if d["source"]["kind"] != "fallback" {
                continue;
            }
            let seqs = d["messageSeqs"].as_array().unwrap();
            assert_eq!(seqs.len(), 1, "{file}: a fallback cites one message");
            let cited = &log[seqs[0].as_u64().unwrap() as usize];
            let text = eligible_text(cited)
                .unwrap_or_else(|| panic!("{file}: seq {} is not eligible", cited.seq));
            assert_eq!(
                fallback_session_title(&text, FALLBACK_MAX_WORDS, FALLBACK_MAX_BYTES),
                d["title"].as_str().unwrap(),
                "{file}: fallback title of seq {}",
                cited.seq
            );
            checked += 1;
        }
    }
    assert!(checked >= 60, "{checked} fallback titles checked");
}

/// dsh's configuration as seen in the fixtures' fallback titles.
const FALLBACK_MAX_WORDS: usize = 5;
const FALLBACK_MAX_BYTES: usize = 40;

/// Exact `sessionStats` views for four fixtures, computed by hand from their events (times in
/// ms; packed chunk rows expand to members at `time0 + Σdt`, so a row's first member is at
/// `time0`).
#[test]
fn hand_computed_stats() {
    let Some(logs) = accepted_logs() else { return };
    let logs: BTreeMap<&str, &Vec<Event>> = logs.iter().map(|(f, l)| (f.as_str(), l)).collect();
    let expected = [
        // text-turn: one step. step/start s3 @1783600629542; first token: reasoning-chunks
        // seq0 10 @1783600630852 ("The"); assistant/message s37 @1785730415298, outputTokens 23.
        // llm = 1785730415298 - 1783600629542 = 2129785756; ttft = 1783600630852 -
        // 1783600629542 = 1310; decode = 1785730415298 - 1783600630852 = 2129784446.
        (
            "examples-acp-agent-tests-snapshots-text-turn-session.jsonl",
            r#"{"turns":1,"steps":1,"llmMs":2129785756,"toolMs":0,"ttftMs":1310,"ttftSteps":1,"decodeMs":2129784446,"decodeTokens":23}"#,
        ),
        // tool-call-turn: step 1 @1783352044773, first token reasoning row s10 @1783352045425,
        // message s63 @1785730417567 (89 tokens): llm 2378372794, ttft 652, decode 2378372142.
        // tool/call s64 @1785730417568 → tool/result s65 @1785730417585: tool 17.
        // step 2 @1785730417595, first token reasoning row s69 @1783352047010 (before the
        // step: ttft clamps to 0 but the step counts), message s101 @1785730417600 (28
        // tokens): llm 5, decode 1785730417600 - 1783352047010 = 2378370590.
        // Sums: llm 2378372799, ttft 652, ttftSteps 2, decode 4756742732, tokens 117.
        (
            "examples-acp-agent-tests-snapshots-tool-call-turn-session.jsonl",
            r#"{"turns":1,"steps":2,"llmMs":2378372799,"toolMs":17,"ttftMs":652,"ttftSteps":2,"decodeMs":4756742732,"decodeTokens":117}"#,
        ),
        // parallel-tool-calls: step 1 @0, first token tool-call-delta with a name s10 @0,
        // message s17 @1785730419899 (5 tokens): llm 1785730419899, ttft 0, decode
        // 1785730419899. Calls a @1785498766514 → result @1785498766528 (14), b
        // @1785730419900 → @1785730419909 (9): tool 23. Step 2 @1785730419918, first token
        // s25 @0 (ttft clamps to 0), message s29 @1785730419922 (1 token): llm 4, decode
        // 1785730419922. Sums: llm 1785730419903, decode 3571460839821, tokens 6.
        (
            "examples-acp-agent-tests-snapshots-parallel-tool-calls-session.jsonl",
            r#"{"turns":1,"steps":2,"llmMs":1785730419903,"toolMs":23,"ttftMs":0,"ttftSteps":2,"decodeMs":3571460839821,"decodeTokens":6}"#,
        ),
        // multi-turn: turn 1 step @1783352113767, first token row s10 @1783352114570, message
        // s34 @1785730439022 (20 tokens): llm 2378325255, ttft 803, decode 2378324452.
        // turn 2 step @1785730439033, first token row s43 @1783352115493 (ttft 0), message
        // s68 @1785730439038 (21 tokens): llm 5, decode 2378323545.
        // Sums: turns 2, llm 2378325260, ttft 803, decode 4756647997, tokens 41.
        (
            "examples-acp-agent-tests-snapshots-multi-turn-session.jsonl",
            r#"{"turns":2,"steps":2,"llmMs":2378325260,"toolMs":0,"ttftMs":803,"ttftSteps":2,"decodeMs":4756647997,"decodeTokens":41}"#,
        ),
    ];
    let set = ProjectionSet::builtin();
    for (file, view) in expected {
        let log = logs[file];
        let states = set.fold_all(log.iter()).unwrap();
        assert_eq!(set.view(&states, "sessionStats").unwrap(), view, "{file}");
    }
    let text_turn = logs["examples-acp-agent-tests-snapshots-text-turn-session.jsonl"];
    let states = set.fold_all(text_turn.iter()).unwrap();
    assert_eq!(
        set.view(&states, "title").unwrap(),
        r#""Reply with exactly the word:""#
    );
    assert_eq!(
        set.view(&states, "listing").unwrap(),
        r#"{"turnsEnded":1,"openTurn":null,"lastEnd":"completed","userMessages":1,"lastUserTime":1785498761313,"titleSource":"fallback"}"#
    );
}

/// The store checkpoints on every `turn/end`: restoring from any of those checkpoints and
/// replaying the rest of the log gives the full fold, for every accepted fixture.
#[test]
fn checkpoint_at_each_turn_end_then_replay_equals_full_fold() {
    let Some(logs) = accepted_logs() else { return };
    let set = ProjectionSet::builtin();
    let mut restores = 0;
    for (file, log) in &logs {
        let full = set.checkpoint(&set.fold_all(log).unwrap());
        let mut states = set.fresh();
        for e in log {
            set.apply(&mut states, e).unwrap();
            if e.kind != "turn/end" {
                continue;
            }
            let rows = set.checkpoint(&states);
            let mut r = set.restore(rows, log.len() as Seq);
            assert!(!r.rebuilt_any(), "{file}");
            assert_eq!(r.replay_from, e.seq + 1);
            let tail = log[(e.seq + 1) as usize..]
                .iter()
                .cloned()
                .map(Ok::<_, Infallible>);
            set.replay(&mut r.states, tail).unwrap();
            assert_eq!(
                set.checkpoint(&r.states),
                full,
                "{file}: restore after seq {}",
                e.seq
            );
            restores += 1;
        }
    }
    assert!(restores >= 82, "{restores} restores");
}
