//! `sessionlog delete --erase` and `sessionlog gc --erase`: the erased sessions' text is in
//! no file of the store afterwards (the segments are written uncompressed here, so a raw
//! scan sees every byte); kept sessions show the same; a session a fork reads is refused
//! with what to run; an unknown id names `gc --erase`.

use std::path::Path;
use std::process::Output;

use crate::{ok, sessionlog};
use sessionlog::event::{Event, SessionHeader};
use sessionlog::store::{Config, Durability, Store};

const MARKER: &str = "CLI-ERASE-MARKER-51d0";

fn failed(o: Output) -> String {
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    String::from_utf8(o.stderr).unwrap()
}

/// Files under `dir` holding the marker.
fn hits(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if std::fs::read(&p)
                .unwrap()
                .windows(MARKER.len())
                .any(|w| w == MARKER.as_bytes())
            {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

/// Verbatim sessions: `keep`, `secret-a`, `secret-b` (the marker in every event of the
/// secrets), and a fork `child` of `secret-b`.
fn build(dir: &Path) {
    let config = Config::default()
        .durability(Durability::Sync)
        .segment_bytes(16 * 1024)
        .compress_threshold(usize::MAX);
    let store = Store::open(dir, config).unwrap();
    for (id, text) in [("keep", "kept"), ("secret-a", MARKER), ("secret-b", MARKER)] {
        let events: Vec<Event> = (0..40)
            .map(|seq| {
                Event::new(
                    "x/event",
                    seq,
                    1_767_225_600_000,
                    format!(
                        r#"{{"seq":{seq},"text":"{text}","pad":"{}"}}"#,
                        "p".repeat(300)
                    ),
                )
            })
            .collect();
        store
            .create_verbatim(SessionHeader::new(id, 1), events)
            .unwrap();
    }
    store.fork("secret-b", Some(19), Some("child")).unwrap();
    store.close().unwrap();
}

#[test]
fn delete_erase_leaves_no_byte_and_refuses_a_session_a_fork_reads() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    assert!(!hits(dir.path()).is_empty());
    let shown = ok(sessionlog(dir.path(), &["show", "keep", "--events"]));

    let err = failed(sessionlog(dir.path(), &["delete", "--erase", "secret-b"]));
    assert!(
        err.contains("child") && err.contains("sessionlog delete --erase secret-b child"),
        "{err}"
    );
    let err = failed(sessionlog(dir.path(), &["delete", "--erase", "nope"]));
    assert!(err.contains("gc --erase"), "{err}");
    ok(sessionlog(dir.path(), &["show", "secret-a"]));

    let out = ok(sessionlog(
        dir.path(),
        &["delete", "--erase", "secret-a", "secret-b", "child"],
    ));
    assert!(out.contains("deleted and erased secret-a"), "{out}");
    assert!(out.contains("index file rewritten"), "{out}");
    assert_eq!(hits(dir.path()), Vec::<String>::new());
    assert_eq!(
        ok(sessionlog(dir.path(), &["show", "keep", "--events"])),
        shown
    );
    let list = ok(sessionlog(dir.path(), &["list"]));
    assert!(!list.contains("secret"), "{list}");
    ok(sessionlog(dir.path(), &["verify"]));
}

#[test]
fn gc_erase_erases_sessions_deleted_before() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    ok(sessionlog(dir.path(), &["delete", "secret-a"]));
    assert!(
        !hits(dir.path()).is_empty(),
        "a plain delete keeps the bytes"
    );
    let plan = ok(sessionlog(dir.path(), &["gc", "--erase", "--dry-run"]));
    assert!(plan.contains("1 deleted session(s) to erase"), "{plan}");
    let out = ok(sessionlog(dir.path(), &["gc", "--erase"]));
    assert!(out.contains("erased 1 deleted session(s)"), "{out}");
    // secret-b (with its fork) is still there and still holds the marker.
    let left = hits(dir.path());
    assert!(
        !left.is_empty() && left.iter().all(|h| h.ends_with(".seg")),
        "{left:?}"
    );
    ok(sessionlog(dir.path(), &["show", "secret-b"]));
    ok(sessionlog(dir.path(), &["verify"]));
}
