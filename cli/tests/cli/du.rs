//! `sessionlog du [--json]`: live and dead bytes per session and per segment, the totals and
//! what a GC would free, on a store with deleted sessions and a deleted parent kept by a fork.

use std::path::Path;
use std::process::Command;

use crate::{ok, sessionlog};
use sessionlog::event::{Event, SessionHeader};
use sessionlog::store::{Config, Durability, Store};

const LONG: &str = "a-session-id-much-longer-than-the-table-column-allows-0123456789";

fn events(n: u64, pad: usize) -> Vec<Event> {
    (0..n)
        .map(|seq| {
            Event::new(
                "x/event",
                seq,
                1_767_225_600_000,
                format!(r#"{{"seq":{seq},"pad":"{}"}}"#, "p".repeat(pad)),
            )
        })
        .collect()
}

/// Six verbatim sessions (one with a long id), three deleted; `parent` forked, then deleted.
fn build(dir: &Path) {
    let config = Config::default()
        .durability(Durability::Sync)
        .segment_bytes(16 * 1024)
        .compress_threshold(usize::MAX);
    let store = Store::open(dir, config).unwrap();
    for i in 0..5 {
        store
            .create_verbatim(SessionHeader::new(format!("s{i}"), 1), events(20, 400))
            .unwrap();
    }
    store
        .create_verbatim(SessionHeader::new(LONG, 1), events(5, 10))
        .unwrap();
    store
        .create_verbatim(SessionHeader::new("parent", 1), events(10, 400))
        .unwrap();
    let mut child = SessionHeader::new("child", 2);
    child.parent_session = Some("parent".into());
    child.seed_length = Some(4);
    store.fork_verbatim("parent", child, 4).unwrap();
    for id in ["s0", "s1", "s2", "parent"] {
        store.delete_session(id).unwrap();
    }
    store.close().unwrap();
}

#[test]
fn du_reports_live_pinned_and_dead_bytes_and_what_gc_would_free() {
    let _serial = super::serial();
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let files: u64 = std::fs::read_dir(dir.path().join("segments"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let expected = Store::open(dir.path(), Config::default().read_only(true))
        .unwrap()
        .space(&mut |_, _| {})
        .unwrap();

    let json: serde_json::Value =
        serde_json::from_str(&ok(sessionlog(dir.path(), &["du", "--json"]))).unwrap();
    let t = &json["totals"];
    assert_eq!(t["size"], files);
    assert_eq!(t["live"], expected.totals.live);
    assert_eq!(t["pinned"], expected.totals.pinned);
    assert_eq!(t["dead"], expected.totals.dead);
    assert_eq!(
        t["live"].as_u64().unwrap()
            + t["pinned"].as_u64().unwrap()
            + t["dead"].as_u64().unwrap()
            + t["unindexed"].as_u64().unwrap()
            + t["overhead"].as_u64().unwrap(),
        files
    );
    assert!(t["dead"].as_u64().unwrap() > t["live"].as_u64().unwrap() / 2);
    let sessions = json["sessions"].as_array().unwrap();
    let ids: Vec<&str> = sessions.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["s3", "s4", LONG, "parent", "child"]);
    let parent = &sessions[3];
    assert_eq!(parent["state"], "pinned");
    assert_eq!(parent["events"], 4);
    assert!(parent["deadBytes"].as_u64().unwrap() > 0);
    let child = &sessions[4];
    assert_eq!(child["state"], "live");
    assert_eq!(child["parent"], "parent");
    assert_eq!(child["inheritedEvents"], 4);
    assert_eq!(child["events"], 0);
    assert_eq!(sessions[0]["events"], 20);
    let segments = json["segments"].as_array().unwrap();
    assert_eq!(segments.len(), expected.segments.len());
    assert!(segments.len() > 2);
    assert_eq!(json["gc"]["frees"], expected.gc_frees);
    assert_eq!(json["gc"]["threshold"], 0.5);
    assert!(expected.gc_frees > 0);
    assert_eq!(json["gc"]["implemented"], false);

    let text = ok(sessionlog(dir.path(), &["du"]));
    let cut: String = LONG.chars().take(31).collect::<String>() + "…";
    assert!(text.contains(&cut), "{text}");
    assert!(!text.contains(LONG), "{text}");
    assert!(
        text.contains(&format!("gc would free {} B", expected.gc_frees)),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "({} segment(s) below 50% live",
            expected.gc_segments.len()
        )),
        "{text}"
    );
    assert!(text.contains(&format!("total: {files} B")), "{text}");
    let parent_line = text.lines().find(|l| l.starts_with("parent ")).unwrap();
    assert!(parent_line.contains("pinned"), "{parent_line}");
    let child_line = text.lines().find(|l| l.starts_with("child ")).unwrap();
    assert!(child_line.trim_end().ends_with("parent"), "{child_line}");
    // Nothing was modified: the same figures again.
    let again: serde_json::Value =
        serde_json::from_str(&ok(sessionlog(dir.path(), &["du", "--json"]))).unwrap();
    assert_eq!(again, json);
}

#[test]
fn du_refuses_a_directory_that_is_no_store() {
    let _serial = super::serial();
    let dir = tempfile::tempdir().unwrap();
    let o = sessionlog(dir.path(), &["du"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not a sessionlog store"), "{err}");
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

fn tree(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            out.push((e.path().display().to_string(), m.len()));
        }
    }
    out.sort();
    out
}

/// Hostile ids are escaped in the table and exact in the JSON; `du` creates no file (not even
/// `LOCK`); a reader that closes the output early (`du | head -1`) ends it with status 0.
#[test]
fn du_is_safe_read_only_and_quiet_on_a_closed_stdout() {
    use std::io::Read;
    let _serial = super::serial();
    let dir = tempfile::tempdir().unwrap();
    let hostile = "evil\u{1b}]0;owned\u{7}\u{202e}";
    {
        let config = Config::default().durability(Durability::Buffered);
        let store = Store::open(dir.path(), config).unwrap();
        store
            .create_verbatim(SessionHeader::new(hostile, 1), events(3, 5))
            .unwrap();
        // Enough rows that the table is larger than a pipe's buffer.
        for i in 0..1500 {
            store
                .create_verbatim(SessionHeader::new(format!("s{i:05}"), 1), events(1, 1))
                .unwrap();
        }
        store.close().unwrap();
    }
    std::fs::remove_file(dir.path().join("LOCK")).unwrap();
    let before = tree(dir.path());
    let text = ok(sessionlog(dir.path(), &["du"]));
    assert!(
        text.contains("evil\\u{1b}]0;owned\\u{7}\\u{202e}"),
        "{text}"
    );
    assert!(!text.contains('\u{1b}') && !text.contains('\u{202e}'));
    let json = ok(sessionlog(dir.path(), &["du", "--json"]));
    assert!(!json.contains('\u{202e}'), "bidi controls are \\u escapes");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["sessions"][0]["id"], hostile);
    assert_eq!(v["sessions"].as_array().unwrap().len(), 1501);
    assert_eq!(tree(dir.path()), before, "du changed the store");

    let mut child = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .arg("--store")
        .arg(dir.path())
        .arg("du")
        .env_remove("SESSIONLOG_STORE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut out = child.stdout.take().unwrap();
        let mut byte = [0u8; 1];
        while out.read(&mut byte).map(|n| n == 1).unwrap_or(false) && byte[0] != b'\n' {}
    }
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}
