//! `Store::create_with_events`: the header and the first batch as one operation. It checks
//! the batch exactly as `Session::append_batch` does, writes nothing when it refuses, and
//! leaves a session that reads, resumes and reopens like one created and then appended to.

use sessionlog::SurfaceOp;
use sessionlog::error::AppendError;
use sessionlog::event::{Event, SessionHeader};
use sessionlog::session::InvariantMode;
use sessionlog::store::{Config, Durability, Store};

const T: i64 = 1_767_225_600_000;

/// Whether a refusal is the expected one.
type Expect = fn(&AppendError) -> bool;

fn config() -> Config {
    Config::default().durability(Durability::Sync)
}

/// One complete turn with a user message on the surface.
fn turn() -> Vec<Event> {
    let mut user = Event::new(
        "user/message",
        1,
        T,
        r#"{"id":"u1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}"#,
    );
    user.surface_op = Some(SurfaceOp::Append);
    vec![
        Event::new("turn/start", 0, T, r#"{"turn":1}"#),
        user,
        Event::new(
            "turn/end",
            2,
            T,
            r#"{"turn":1,"reason":{"kind":"completed"}}"#,
        ),
    ]
}

fn segment_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

#[test]
fn it_reads_like_create_then_append_batch_and_survives_reopen() {
    let one = tempfile::tempdir().unwrap();
    let two = tempfile::tempdir().unwrap();
    let a = Store::open(one.path(), config()).unwrap();
    let b = Store::open(two.path(), config()).unwrap();
    let (s, receipt) = a
        .create_with_events(SessionHeader::new("s", T as u64), turn())
        .unwrap();
    assert_eq!(receipt.seq, 2);
    assert!(receipt.durable);
    let r = b.create(SessionHeader::new("s", T as u64)).unwrap();
    r.append_batch(turn()).unwrap();
    assert_eq!(s.len(), 3);
    assert_eq!(s.header(), r.header());
    assert_eq!(s.surface().unwrap(), vec![1]);
    assert_eq!(s.surface().unwrap(), r.surface().unwrap());
    assert_eq!(s.messages().unwrap(), r.messages().unwrap());
    assert_eq!(a.sessions(), b.sessions());
    // The session continues with the next seq.
    s.append(Event::new("turn/start", 3, T, r#"{"turn":2}"#))
        .unwrap();
    drop(s);
    a.close().unwrap();
    let a = Store::open(one.path(), config()).unwrap();
    let s = a.session("s").unwrap();
    assert_eq!(s.len(), 4);
    let events: Vec<Event> = s.events(0..3).unwrap().map(|e| e.unwrap()).collect();
    assert_eq!(events, turn());
    assert_eq!(s.messages().unwrap(), r.messages().unwrap());
    assert!(a.verify().unwrap().is_clean());
}

#[test]
fn a_refused_first_batch_writes_nothing_and_leaves_the_id_free() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    store
        .create_with_events(SessionHeader::new("other", T as u64), turn())
        .unwrap();
    let before = segment_bytes(dir.path());
    let listed = store.sessions();

    // A gap inside the batch (the third event repeats seq 1).
    let mut gap = turn();
    gap[2].seq = 1;
    // A first seq other than 0.
    let mut late = turn();
    for e in &mut late {
        e.seq += 1;
    }
    // A surface rule: a user message without its surfaceOp.
    let mut no_surface = turn();
    no_surface[1].surface_op = None;
    // Data that is not JSON, in the last event.
    let mut bad_json = turn();
    bad_json[2].data = "{not json".into();
    // An invariant: turn/end for a turn that never started.
    let mut wrong_turn = turn();
    wrong_turn[2].data = r#"{"turn":7,"reason":{"kind":"completed"}}"#.into();

    let cases: Vec<(&str, Vec<Event>, Expect)> = vec![
        ("gap", gap, |e| {
            matches!(
                e,
                AppendError::WrongSeq {
                    got: 1,
                    expected: 2,
                    ..
                }
            )
        }),
        ("late", late, |e| {
            matches!(
                e,
                AppendError::WrongSeq {
                    got: 1,
                    expected: 0,
                    ..
                }
            )
        }),
        ("no_surface", no_surface, |e| {
            matches!(e, AppendError::Semantics { seq: 1, .. })
        }),
        ("bad_json", bad_json, |e| {
            matches!(e, AppendError::BadData { seq: 2, .. })
        }),
        ("wrong_turn", wrong_turn, |e| {
            matches!(e, AppendError::Semantics { seq: 2, .. })
        }),
    ];
    for (name, events, expected) in cases {
        // The same batch through create + append_batch is refused the same way.
        let err = store
            .create_with_events(SessionHeader::new("s", T as u64), events.clone())
            .err()
            .unwrap_or_else(|| panic!("{name}: accepted"));
        assert!(expected(&err), "{name}: {err:?}");
        assert!(store.session("s").is_err(), "{name}: the session exists");
        assert_eq!(segment_bytes(dir.path()), before, "{name}: bytes written");
        assert_eq!(store.sessions(), listed, "{name}");
    }
    // The other session's id is taken: refused, and it is unchanged.
    let err = store
        .create_with_events(SessionHeader::new("other", T as u64), turn())
        .err()
        .unwrap();
    assert!(
        matches!(err, AppendError::SessionExists(ref id) if id == "other"),
        "{err:?}"
    );
    assert_eq!(store.session("other").unwrap().len(), 3);
    assert_eq!(segment_bytes(dir.path()), before);
    // The id is still free.
    store
        .create_with_events(SessionHeader::new("s", T as u64), turn())
        .unwrap();
    store.close().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(store.session("s").unwrap().len(), 3);
    assert_eq!(store.sessions().len(), 2);
}

#[test]
fn the_store_invariant_setting_applies_and_no_events_is_create() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config().invariants(InvariantMode::Off)).unwrap();
    let mut wrong_turn = turn();
    wrong_turn[2].data = r#"{"turn":7,"reason":{"kind":"completed"}}"#.into();
    let (s, _) = store
        .create_with_events(SessionHeader::new("lenient", T as u64), wrong_turn)
        .unwrap();
    assert_eq!(s.len(), 3);
    let (empty, _) = store
        .create_with_events(SessionHeader::new("empty", T as u64), Vec::new())
        .unwrap();
    assert!(empty.is_empty());
    assert!(store.session("empty").is_ok());
}
