//! Every dsh log dsh's JSONL loader accepts goes into the store and comes out with identical
//! envelopes and byte-identical `data`, and the store derives exactly dsh's surface, replace
//! generation and messages (`dsh-expected/`) — after import, after close/reopen, and after
//! the index is deleted and rebuilt from the log.

use crate::common::jsonl_fixtures;

use std::path::Path;

use jsonl_fixtures::{expected, fixture_text, fixtures_dir, index};
use sessionlog::event::Event;
use sessionlog::interop::jsonl::{ReadOptions, read};
use sessionlog::json::{JsonLimits, parse, stringify};
use sessionlog::store::{Config, Durability, Store};

struct Case {
    file: String,
    id: String,
    events: Vec<Event>,
    expected: serde_json::Value,
}

fn cases(dir: &Path) -> Vec<Case> {
    index(dir)
        .into_iter()
        .filter(|v| v.jsonl_ok)
        .map(|v| {
            let text = fixture_text(dir, &v.file);
            let log = read(text.as_bytes(), &ReadOptions::default())
                .unwrap_or_else(|e| panic!("{}: {e}", v.file));
            Case {
                id: log.header.id.clone(),
                events: log.events,
                expected: expected(dir, &v.file),
                file: v.file,
            }
        })
        .collect()
}

/// A message as a JSON value (dsh-expected files were written with sorted keys; the
/// byte-exact message text is checked by the session tests).
fn js(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|_| {
        serde_json::Value::String(stringify(&parse(text, &JsonLimits::default()).unwrap()))
    })
}

fn check(store: &Store, case: &Case, when: &str) {
    let f = &case.file;
    let n = store
        .len(&case.id)
        .unwrap_or_else(|| panic!("{f} {when}: session missing"));
    assert_eq!(n as usize, case.events.len(), "{f} {when}: event count");
    let stored: Vec<Event> = store
        .events(&case.id, 0..n)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    for (a, b) in stored.iter().zip(&case.events) {
        assert_eq!(a, b, "{f} {when}: event {}", b.seq);
    }
    let surface: Vec<u64> = case.expected["surface"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(
        store.surface(&case.id).unwrap(),
        surface,
        "{f} {when}: surface"
    );
    assert_eq!(
        store.replace_generation(&case.id).unwrap(),
        case.expected["replaceGeneration"].as_u64().unwrap(),
        "{f} {when}: replace generation"
    );
    let messages: Vec<serde_json::Value> = store
        .messages(&case.id)
        .unwrap()
        .into_iter()
        .map(|m| js(&m.json))
        .collect();
    let want: Vec<serde_json::Value> = case.expected["messages"].as_array().unwrap().clone();
    assert_eq!(messages, want, "{f} {when}: messages");
}

#[test]
fn dsh_logs_import_and_derive_what_dsh_derives() {
    let Some(dir) = fixtures_dir() else { return };
    let all = cases(&dir);
    assert!(all.len() >= 70, "only {} fixtures", all.len());
    // Some fixtures share a session id: spread them over stores so ids stay unique.
    let mut groups: Vec<Vec<Case>> = Vec::new();
    for case in all {
        match groups
            .iter_mut()
            .find(|g| g.iter().all(|c| c.id != case.id))
        {
            Some(g) => g.push(case),
            None => groups.push(vec![case]),
        }
    }
    for cases in &groups {
        run_group(&dir, cases);
    }
}

fn run_group(dir: &Path, cases: &[Case]) {
    let store_dir = tempfile::tempdir().unwrap();
    let config = Config::default().durability(Durability::Buffered);
    {
        let store = Store::open(store_dir.path(), config.clone()).unwrap();
        for case in cases {
            let header = read(
                fixture_text(dir, &case.file).as_bytes(),
                &ReadOptions::default(),
            )
            .unwrap()
            .header;
            store
                .import_session(header, case.events.clone(), None)
                .unwrap_or_else(|e| panic!("{}: import refused: {e}", case.file));
            check(&store, case, "after import");
        }
        store.close().unwrap();
    }
    {
        let store = Store::open(store_dir.path(), config.clone()).unwrap();
        for case in cases {
            check(&store, case, "after reopen");
        }
    }
    {
        let read_only = config.clone().read_only(true);
        let store = Store::open(store_dir.path(), read_only).unwrap();
        for case in cases {
            check(&store, case, "read-only");
        }
    }
    std::fs::remove_file(store_dir.path().join("index.redb")).unwrap();
    let store = Store::open(store_dir.path(), config).unwrap();
    assert!(store.recovery_report().index_rebuilt || store.recovery_report().events_recovered > 0);
    for case in cases {
        check(&store, case, "after index rebuild");
    }
}
