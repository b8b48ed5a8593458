//! Projections on the store: folded on every append, checkpointed in the index, listed
//! without opening a segment, and right after a crash between an append and its checkpoint.

use sessionlog::event::{Event, SessionHeader};
use sessionlog::projection::ProjectionSet;
use sessionlog::store::{Config, Durability, Intent, Session, Store};
use sessionlog::typed::Raw;

fn user(id: &str, text: &str) -> String {
    format!(
        r#"{{"id":"{id}","role":"user","content":[{{"type":"text","text":"{text}"}}],"source":{{"kind":"user"}}}}"#
    )
}

/// A short turn with a title event; `end` closes it.
fn titled_turn(s: &Session<'_>, t: u64, title: &str, end: bool) {
    let base = 1_767_225_600_000 + (t as i64) * 10_000;
    s.append(Raw::new("turn/start", format!(r#"{{"turn":{t}}}"#), Intent::none()).at(base))
        .unwrap();
    s.append(
        Raw::new(
            "step/start",
            format!(r#"{{"turn":{t},"step":1}}"#),
            Intent::none(),
        )
        .at(base + 10),
    )
    .unwrap();
    let msg = s
        .append(
            Raw::new(
                "user/message",
                user(&format!("u{t}"), title),
                Intent::append(),
            )
            .at(base + 20),
        )
        .unwrap();
    s.append(
        Raw::new(
            "session/title",
            format!(
                r#"{{"title":"{title}","messageSeqs":[{}],"source":{{"kind":"fallback"}}}}"#,
                msg.seq
            ),
            Intent::none(),
        )
        .at(base + 30),
    )
    .unwrap();
    if end {
        s.append(
            Raw::new(
                "step/end",
                format!(r#"{{"turn":{t},"step":1}}"#),
                Intent::none(),
            )
            .at(base + 900),
        )
        .unwrap();
        s.append(
            Raw::new(
                "turn/end",
                format!(r#"{{"turn":{t},"reason":{{"kind":"completed"}}}}"#),
                Intent::none(),
            )
            .at(base + 1000),
        )
        .unwrap();
    }
}

fn buffered() -> Config {
    Config::default().durability(Durability::Buffered)
}

fn view<'a>(views: &'a [(String, String)], key: &str) -> &'a str {
    &views.iter().find(|(k, _)| k == key).unwrap().1
}

/// The views a full fold over the session's events gives.
fn full_fold(store: &Store, id: &str) -> Vec<(String, String)> {
    let events: Vec<Event> = store
        .events(id, 0..store.len(id).unwrap())
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    let set = ProjectionSet::builtin();
    set.views(&set.fold_all(events.iter()).unwrap())
}

#[test]
fn listing_ten_thousand_sessions_opens_no_segment() {
    let dir = tempfile::tempdir().unwrap();
    const N: usize = 10_000;
    {
        let store = Store::open(dir.path(), buffered()).unwrap();
        for i in 0..N {
            let s = store
                .create(SessionHeader::new(format!("s{i:05}"), 1))
                .unwrap();
            titled_turn(&s, 1, &format!("Session number {i}"), i % 7 != 0);
        }
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), buffered()).unwrap();
    let before = store.frames_read();
    let listed = store.list().unwrap();
    assert_eq!(store.frames_read(), before, "listing read frames");
    assert_eq!(listed.len(), N);
    for (i, l) in listed.iter().enumerate() {
        assert_eq!(l.info.header.id, format!("s{i:05}"));
        assert_eq!(view(&l.views, "title"), format!(r#""Session number {i}""#));
        if i % 7 != 0 {
            let stats = view(&l.views, "sessionStats");
            assert!(
                stats.starts_with(r#"{"turns":1,"steps":1,"#),
                "session {i}: {stats}"
            );
        }
    }
    // And the listed views are exactly what a full fold of each log gives (open turns too).
    for l in listed.iter().step_by(499) {
        assert_eq!(l.views, full_fold(&store, &l.info.header.id));
    }
}

#[test]
fn a_crash_between_an_append_and_its_checkpoint_is_harmless() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), buffered()).unwrap();
        let s = store.create(SessionHeader::new("s", 1)).unwrap();
        titled_turn(&s, 1, "First title", true);
        titled_turn(&s, 2, "Second title", false);
        // The second turn is open: no checkpoint covers it. Make it durable, then crash.
        store.flush().unwrap();
        drop(s);
        store.abandon();
    }
    let store = Store::open(dir.path(), buffered()).unwrap();
    // The reopen folds nothing (a crashed store reopens in the time of its tail's scan):
    // the session catches up when first used.
    assert_eq!(
        store.frames_read(),
        0,
        "the reopen read no session's events"
    );
    let views = store.projection_views("s").unwrap();
    assert_eq!(view(&views, "title"), r#""Second title""#);
    assert_eq!(views, full_fold(&store, "s"));
    let listed = store.list().unwrap();
    assert_eq!(listed[0].views, views);
    // Once caught up, the checkpoints are current again: listing reads nothing.
    let before = store.frames_read();
    assert_eq!(store.list().unwrap()[0].views, views);
    assert_eq!(store.frames_read(), before);
}

#[test]
fn checkpoints_follow_appends_and_survive_index_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let views = {
        let store = Store::open(dir.path(), buffered()).unwrap();
        let s = store.create(SessionHeader::new("s", 1)).unwrap();
        for t in 1..=5 {
            titled_turn(&s, t, &format!("Title {t}"), true);
        }
        let child = store.fork("s", None, Some("child")).unwrap();
        titled_turn(&child, 6, "Child title", true);
        let views = store.projection_views("child").unwrap();
        assert_eq!(view(&views, "title"), r#""Child title""#);
        assert_eq!(views, full_fold(&store, "child"));
        views
    };
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let store = Store::open(dir.path(), buffered()).unwrap();
    assert_eq!(store.projection_views("child").unwrap(), views);
    let before = store.frames_read();
    store.list().unwrap();
    assert_eq!(
        store.frames_read(),
        before,
        "the rebuild caught the checkpoints up"
    );
}
