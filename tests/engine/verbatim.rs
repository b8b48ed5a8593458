//! Verbatim sessions (`Store::create_verbatim`): stored exactly as given with only the checks
//! dsh's storage backends make, kept verbatim across reopen, recovery and an index rebuild,
//! forked at any length, and read back (surface, messages) through dsh's load rules.

use sessionlog::SurfaceOp;
use sessionlog::error::{AppendError, ReadError};
use sessionlog::event::{Event, SessionHeader};
use sessionlog::store::{Config, Durability, Store};

use crate::common::read_all;

const T: i64 = 1_767_225_600_000;

/// Whether a refusal is the expected one.
type Expect = fn(&AppendError) -> bool;

/// `append_batch` marks its first event as the start of a dsh flush batch (layout only).
fn batch_start(mut e: Event) -> Event {
    e.layout.batch_start = true;
    e
}

fn config() -> Config {
    Config::default().durability(Durability::Sync)
}

fn header(id: &str) -> SessionHeader {
    SessionHeader::new(id, T as u64)
}

/// A valid dsh turn (what a checked session accepts too).
fn valid_turn(first: u64) -> Vec<Event> {
    let mut user = Event::new(
        "user/message",
        first + 1,
        T,
        r#"{"id":"u1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}"#,
    );
    user.surface_op = Some(SurfaceOp::Append);
    vec![
        Event::new("turn/start", first, T, r#"{"turn":1}"#),
        user,
        Event::new(
            "turn/end",
            first + 2,
            T,
            r#"{"turn":1,"reason":{"kind":"completed"}}"#,
        ),
    ]
}

/// Events a checked session refuses: a message without its surfaceOp, a retired legacy
/// shape, a surfaceOp on an event that may not have one, a turn/end with no turn.
fn malformed() -> Vec<Event> {
    let mut stray = Event::new("turn/start", 2, T, r#"{"turn":7}"#);
    stray.surface_op = Some(SurfaceOp::Append);
    vec![
        Event::new(
            "user/message",
            0,
            T,
            r#"{"id":"u1","role":"user","content":[],"source":{"kind":"user"}}"#,
        ),
        Event::new("mode/set", 1, T, r#"{"mode":"plan"}"#),
        stray,
        Event::new("turn/end", 3, -4, r#"{"zzz":[1,2.50,"\ud800"]}"#),
    ]
}

#[test]
fn malformed_events_are_stored_verbatim_and_survive_reopen_and_index_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let events = malformed();
    {
        let store = Store::open(dir.path(), config()).unwrap();
        // A checked session refuses the first of them.
        assert!(matches!(
            store.create_with_events(header("checked"), events.clone()),
            Err(AppendError::Semantics { .. })
        ));
        let (s, receipt) = store.create_verbatim(header("v"), events.clone()).unwrap();
        assert_eq!(receipt.seq, 3);
        assert!(receipt.durable);
        assert_eq!(s.len(), 4);
        let info = store.session_info("v").unwrap();
        assert!(info.verbatim);
        assert_eq!(info.surface_len, 0);
        assert_eq!(read_all(&store, "v"), events);
        // Appends keep the same rules: more malformed events are accepted.
        s.append_batch(vec![Event::new("request/header-delta", 4, T, "{}")])
            .unwrap();
        assert!(!store.session_info("checked").is_some_and(|i| i.verbatim));
    }
    let mut all = events.clone();
    all.push(batch_start(Event::new("request/header-delta", 4, T, "{}")));
    let store = Store::open(dir.path(), config()).unwrap();
    assert!(store.session_info("v").unwrap().verbatim);
    assert_eq!(read_all(&store, "v"), all);
    drop(store);
    // The flag comes from the log: a rebuilt index has it too.
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(
        store.recovery_report().events_recovered,
        5,
        "every event is indexed again from the log"
    );
    assert!(store.session_info("v").unwrap().verbatim);
    assert_eq!(read_all(&store, "v"), all);
    store
        .session("v")
        .unwrap()
        .append_batch(vec![Event::new("x/unknown", 5, T, "[]")])
        .unwrap();
    assert_eq!(store.len("v"), Some(6));
}

#[test]
fn only_seq_json_time_and_size_are_checked_and_a_refusal_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config().max_event_bytes(64)).unwrap();
    let refusals: Vec<(Vec<Event>, Expect)> = vec![
        (vec![Event::new("turn/start", 1, T, "{}")], |e| {
            matches!(
                e,
                AppendError::WrongSeq {
                    got: 1,
                    expected: 0,
                    ..
                }
            )
        }),
        (
            vec![
                Event::new("turn/start", 0, T, "{}"),
                Event::new("turn/start", 2, T, "{}"),
            ],
            |e| {
                matches!(
                    e,
                    AppendError::WrongSeq {
                        got: 2,
                        expected: 1,
                        ..
                    }
                )
            },
        ),
        (
            vec![Event::new("odd/kind", 0, T, "{not json")],
            |e| matches!(e, AppendError::BadData { kind, .. } if kind == "odd/kind"),
        ),
        (vec![Event::new("turn/start", 0, i64::MAX, "{}")], |e| {
            matches!(e, AppendError::Envelope { .. })
        }),
        (
            vec![Event::new("big", 0, T, format!("\"{}\"", "x".repeat(100)))],
            |e| matches!(e, AppendError::TooLarge { .. }),
        ),
    ];
    for (events, expected) in refusals {
        let before = std::fs::metadata(dir.path().join("segments/00000000000000000001.seg"))
            .map(|m| m.len())
            .unwrap_or(0);
        let err = store.create_verbatim(header("v"), events).unwrap_err();
        assert!(expected(&err), "unexpected refusal: {err:?}");
        assert!(store.session_info("v").is_none(), "nothing is created");
        let after = std::fs::metadata(dir.path().join("segments/00000000000000000001.seg"))
            .map(|m| m.len())
            .unwrap_or(0);
        assert_eq!(before, after, "nothing is written");
    }
    let (s, _) = store.create_verbatim(header("v"), Vec::new()).unwrap();
    // An append that starts at the wrong seq names both seqs, as dsh's backends do.
    let err = s
        .append_batch(vec![Event::new("turn/start", 3, T, "{}")])
        .unwrap_err();
    assert!(matches!(
        err,
        AppendError::WrongSeq {
            got: 3,
            expected: 0,
            ..
        }
    ));
    assert_eq!(s.len(), 0);
    assert!(matches!(
        store.create_verbatim(header("v"), Vec::new()),
        Err(AppendError::SessionExists(_))
    ));
}

#[test]
fn a_valid_verbatim_session_reads_like_a_checked_one_and_a_malformed_one_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    store
        .create_with_events(header("checked"), valid_turn(0))
        .unwrap();
    store.create_verbatim(header("v"), valid_turn(0)).unwrap();
    assert_eq!(
        store.surface("v").unwrap(),
        store.surface("checked").unwrap()
    );
    assert_eq!(store.surface("v").unwrap(), vec![1]);
    assert_eq!(
        store.messages("v").unwrap(),
        store.messages("checked").unwrap()
    );
    store.create_verbatim(header("bad"), malformed()).unwrap();
    match store.messages("bad") {
        Err(ReadError::Verbatim { session, .. }) => assert_eq!(session, "bad"),
        other => panic!("expected a verbatim load refusal, got {other:?}"),
    }
    // Its events still read, and the listing names it without reading them.
    assert_eq!(read_all(&store, "bad"), malformed());
    let listed = store.list().unwrap();
    let bad = listed.iter().find(|l| l.info.header.id == "bad").unwrap();
    assert!(bad.info.verbatim && bad.views.is_empty());
}

#[test]
fn a_verbatim_fork_takes_any_seed_length_and_its_header_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let events = malformed();
    store.create_verbatim(header("p"), events.clone()).unwrap();
    for seed in [0u64, 1, 4] {
        let mut child = header(&format!("c{seed}"));
        child.parent_session = Some("p".into());
        child.seed_length = Some(seed);
        child.delegation_depth = Some(2);
        let c = store.fork_verbatim("p", child.clone(), seed).unwrap();
        assert_eq!(c.len(), seed);
        assert_eq!(store.header(&child.id).unwrap(), child);
        assert!(store.session_info(&child.id).unwrap().verbatim);
        assert_eq!(
            read_all(&store, &child.id),
            events[..seed as usize].to_vec()
        );
        c.append_batch(vec![Event::new("anything", seed, T, "1")])
            .unwrap();
    }
    assert!(store.fork_verbatim("p", header("c9"), 5).is_err());
    assert!(store.fork_verbatim("p", header("c0"), 0).is_err());
    store
        .create_with_events(header("k"), valid_turn(0))
        .unwrap();
    assert!(store.fork_verbatim("k", header("ck"), 1).is_err());
    // The parent deleted: its events still read through the forks, across a reopen.
    store.delete_session("p").unwrap();
    drop(store);
    let store = Store::open(dir.path(), config()).unwrap();
    let mut want = events[..4].to_vec();
    want.push(batch_start(Event::new("anything", 4, T, "1")));
    assert_eq!(read_all(&store, "c4"), want);
    // `Store::fork` of a verbatim session forks verbatim too, at any boundary.
    let f = store.fork("c4", Some(1), Some("f")).unwrap();
    assert_eq!(f.len(), 2);
    assert!(store.session_info("f").unwrap().verbatim);
    assert_eq!(
        store.header("f").unwrap().parent_session.as_deref(),
        Some("c4")
    );
}

#[test]
fn verify_is_clean_with_verbatim_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    store.create_verbatim(header("v"), malformed()).unwrap();
    store
        .create_with_events(header("k"), valid_turn(0))
        .unwrap();
    let report = store.verify().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn a_reader_beside_the_writer_sees_verbatim_sessions_as_the_writer_does() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), config()).unwrap();
    writer.create_verbatim(header("v"), malformed()).unwrap();
    writer.create_verbatim(header("ok"), valid_turn(0)).unwrap();
    let mut reader = Store::open_reader(dir.path()).unwrap();
    assert!(reader.session_info("v").unwrap().verbatim);
    assert_eq!(read_all(&reader, "v"), malformed());
    assert_eq!(reader.surface("ok").unwrap(), writer.surface("ok").unwrap());
    // A later verbatim append becomes visible on refresh, still verbatim.
    writer
        .session("v")
        .unwrap()
        .append_batch(vec![Event::new("mode/set", 4, T, "{}")])
        .unwrap();
    assert!(reader.refresh().unwrap());
    assert_eq!(reader.len("v"), Some(5));
    assert!(reader.session_info("v").unwrap().verbatim);
}
