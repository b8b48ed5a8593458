//! `SessionInfo::incarnation` and `Store::session_info`: per-session facts that identify a
//! state of a session's log across reopens (what a binding builds a revision from).

use sessionlog::event::{Event, SessionHeader};
use sessionlog::store::{Config, Store};

fn start(seq: u64) -> Event {
    Event::new("turn/start", seq, 1, r#"{"turn":1}"#)
}

fn end(seq: u64) -> Event {
    Event::new(
        "turn/end",
        seq,
        1,
        r#"{"turn":1,"reason":{"kind":"completed"}}"#,
    )
}

#[test]
fn incarnations_are_stable_across_reopen_and_new_after_delete_and_recreate() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Config::default()).unwrap();
    store.create(SessionHeader::new("a", 1)).unwrap();
    store
        .create_with_events(SessionHeader::new("b", 1), vec![start(0)])
        .unwrap();
    let a = store.session_info("a").unwrap();
    let b = store.session_info("b").unwrap();
    assert_ne!(a.incarnation, b.incarnation);
    assert_eq!(store.sessions(), vec![a.clone(), b.clone()]);
    assert_eq!((a.event_count, b.event_count), (0, 1));
    assert!(store.session_info("nope").is_none());
    store.close().unwrap();

    let store = Store::open(dir.path(), Config::default()).unwrap();
    assert_eq!(store.session_info("a"), Some(a.clone()));
    assert_eq!(store.session_info("b"), Some(b.clone()));
    // A write changes the event count, not the incarnation.
    store.session("b").unwrap().append(end(1)).unwrap();
    let b2 = store.session_info("b").unwrap();
    assert_eq!(b2.incarnation, b.incarnation);
    assert_eq!(b2.event_count, 2);
    // Deleted and created again: a new incarnation, also after a reopen (the highest
    // number is the one deleted, so it must not be handed out again).
    store.delete_session("b").unwrap();
    assert!(store.session_info("b").is_none());
    store.close().unwrap();
    let store = Store::open(dir.path(), Config::default()).unwrap();
    store
        .create_with_events(SessionHeader::new("b", 1), vec![start(0), end(1)])
        .unwrap();
    let b3 = store.session_info("b").unwrap();
    assert_eq!(b3.event_count, b2.event_count);
    assert_ne!(b3.incarnation, b.incarnation);
    assert_ne!(b3.incarnation, a.incarnation);
}
