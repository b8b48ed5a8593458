//! `sessionlog delete SESSION...` and `sessionlog retain`: deletions by name (all or nothing)
//! and by a retention policy (idle, count, size; pinned never), dry runs that change nothing,
//! and clear refusals.

use std::path::Path;
use std::process::{Command, Output};

use sessionlog::event::{Event, SessionHeader};
use sessionlog::store::{Config, Durability, Store};

use crate::serial;

fn sessionlog(store: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("SESSIONLOG_STORE")
        .output()
        .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Sessions `old` (time 1,000), `mid` (2,000), `new` (now): one event each.
fn build(dir: &Path) {
    let store = Store::open(dir, Config::default().durability(Durability::Sync)).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for (id, time) in [("old", 1_000), ("mid", 2_000), ("new", now)] {
        store
            .create_verbatim(
                SessionHeader::new(id, 0),
                vec![Event::new("x/tick", 0, time, r#"{"n":1}"#)],
            )
            .unwrap();
    }
    store.close().unwrap();
}

fn ids(dir: &Path) -> Vec<String> {
    let store = Store::open_reader(dir).unwrap();
    let mut v: Vec<String> = store.sessions().into_iter().map(|s| s.header.id).collect();
    v.sort();
    v
}

#[test]
fn retain_evicts_by_policy_and_a_dry_run_changes_nothing() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    build(&store);
    let dry = sessionlog(&store, &["retain", "--max-idle", "1d", "--dry-run"]);
    let (out, err) = text(&dry);
    assert!(dry.status.success(), "{err}");
    assert!(
        out.contains("would evict old (idle") && out.contains("would evict mid (idle"),
        "{out}"
    );
    assert!(out.contains("2 session(s) would be evicted"), "{out}");
    // The last activity as a time, not raw milliseconds: `old`'s event is at 1,000 ms.
    assert!(
        out.contains("last active 1970-01-01T00:00:01.000Z)"),
        "{out}"
    );
    assert_eq!(ids(&store), ["mid", "new", "old"]);
    // Pinned `old` stays; `mid` goes.
    let run = sessionlog(
        &store,
        &["retain", "--max-idle", "1d", "--pin", "old", "--json"],
    );
    let (out, err) = text(&run);
    assert!(run.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["id"], "mid");
    assert_eq!(v[0]["reason"], "idle");
    assert_eq!(v[0]["evicted"], true);
    assert_eq!(ids(&store), ["new", "old"]);
    let count = sessionlog(&store, &["retain", "--max-sessions", "1"]);
    let (out, _) = text(&count);
    assert!(out.contains("evicted old (count"), "{out}");
    assert!(
        out.contains("last active 1970-01-01T00:00:01.000Z)"),
        "{out}"
    );
    assert_eq!(ids(&store), ["new"]);
    // No limit, or a bad one: exit 2 saying what to pass.
    let none = sessionlog(&store, &["retain"]);
    assert_eq!(none.status.code(), Some(2));
    assert!(
        text(&none).1.contains("--max-idle AGE"),
        "{}",
        text(&none).1
    );
    let bad = sessionlog(&store, &["retain", "--max-idle", "3 weeks"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad).1.contains("30d"), "{}", text(&bad).1);
}

#[test]
fn delete_removes_named_sessions_all_or_nothing() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    build(&store);
    let missing = sessionlog(&store, &["delete", "old", "nope"]);
    assert_eq!(missing.status.code(), Some(2));
    let (_, err) = text(&missing);
    assert!(
        err.contains("no session \"nope\"") && err.contains("nothing was deleted"),
        "{err}"
    );
    assert_eq!(ids(&store), ["mid", "new", "old"]);
    let ok = sessionlog(&store, &["delete", "old", "mid"]);
    let (out, err) = text(&ok);
    assert!(ok.status.success(), "{err}");
    assert_eq!(out, "deleted old\ndeleted mid\n");
    assert_eq!(ids(&store), ["new"]);
    // Not a store: refused, nothing created.
    let empty = dir.path().join("empty");
    let refused = sessionlog(&empty, &["delete", "x"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(!empty.exists());
}
