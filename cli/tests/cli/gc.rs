//! `sessionlog gc [--dry-run]`: what a GC would free, then the GC; every session lists and
//! shows the same afterwards.

use std::path::Path;

use crate::{ok, sessionlog};
use sessionlog::event::{Event, SessionHeader};
use sessionlog::store::{Config, Durability, Store};

fn segments_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// Eight verbatim sessions of several segments each; every other one deleted.
fn build(dir: &Path) {
    let config = Config::default()
        .durability(Durability::Sync)
        .segment_bytes(16 * 1024)
        .compress_threshold(usize::MAX);
    let store = Store::open(dir, config).unwrap();
    for i in 0..8 {
        let events: Vec<Event> = (0..60)
            .map(|seq| {
                Event::new(
                    "x/event",
                    seq,
                    1_767_225_600_000,
                    format!(r#"{{"seq":{seq},"pad":"{}"}}"#, "p".repeat(400)),
                )
            })
            .collect();
        store
            .create_verbatim(SessionHeader::new(format!("s{i}"), 1), events)
            .unwrap();
    }
    for i in (0..8).step_by(2) {
        store.delete_session(&format!("s{i}")).unwrap();
    }
    store
        .create_verbatim(SessionHeader::new("late", 1), Vec::new())
        .unwrap();
    store.close().unwrap();
}

#[test]
fn gc_dry_run_changes_nothing_then_gc_frees_the_space() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let size = segments_size(dir.path());
    let list = ok(sessionlog(dir.path(), &["list"]));
    let shown = ok(sessionlog(dir.path(), &["show", "s3"]));

    let plan = ok(sessionlog(dir.path(), &["gc", "--dry-run"]));
    assert!(
        plan.contains("gc would free"),
        "{plan}\n{}",
        ok(sessionlog(dir.path(), &["du"]))
    );
    assert_eq!(segments_size(dir.path()), size);

    let out = ok(sessionlog(dir.path(), &["gc"]));
    assert!(out.contains("freed"), "{out}");
    let after = segments_size(dir.path());
    assert!(after * 10 < size * 6, "{size} -> {after} bytes: {out}");
    assert_eq!(ok(sessionlog(dir.path(), &["list"])), list);
    assert_eq!(ok(sessionlog(dir.path(), &["show", "s3"])), shown);
    ok(sessionlog(dir.path(), &["verify"]));

    let again = ok(sessionlog(dir.path(), &["gc"]));
    assert!(again.contains("nothing to collect"), "{again}");
}

#[test]
fn gc_of_a_missing_store_says_what_to_do() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let o = sessionlog(&dir.path().join("nope"), &["gc"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("does not exist"), "{err}");
}
