//! A catalogue of malformed appends: each gets a typed error and leaves the store unchanged.

use std::path::Path;

use sessionlog::error::AppendError;
use sessionlog::event::{Event, SessionHeader, SurfaceOp};
use sessionlog::json::JsonLimits;
use sessionlog::store::{Config, Store};

fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn ev(kind: &str, seq: u64, data: &str) -> Event {
    Event::new(kind, seq, 1_767_225_600_000, data)
}

#[test]
fn malformed_events_get_typed_errors_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::default()
        .max_event_bytes(4096)
        .json_limits(JsonLimits {
            max_depth: 64,
            ..JsonLimits::default()
        });
    let store = Store::open(dir.path(), cfg.clone()).unwrap();
    store.create_session(SessionHeader::new("s", 1)).unwrap();
    store
        .append("s", ev("turn/start", 0, r#"{"turn":1}"#))
        .unwrap();
    let before = snapshot(dir.path());

    type Check = fn(&AppendError) -> bool;
    let deep = format!("{}1{}", "[".repeat(65), "]".repeat(65));
    let big = format!(r#"{{"text":"{}"}}"#, "a".repeat(5000));
    let user = r#"{"id":"m1","role":"user","content":[],"source":{"kind":"user"}}"#;
    let cases: Vec<(&str, Event, Check)> = vec![
        ("bad JSON", ev("turn/start", 1, "{not json"), |e| {
            matches!(e, AppendError::BadData { .. })
        }),
        ("trailing garbage", ev("turn/start", 1, "{} x"), |e| {
            matches!(e, AppendError::BadData { .. })
        }),
        ("empty data", ev("turn/start", 1, ""), |e| {
            matches!(e, AppendError::BadData { .. })
        }),
        (
            "negative zero",
            ev("turn/start", 1, r#"{"turn":-0}"#),
            |e| matches!(e, AppendError::BadData { .. }),
        ),
        (
            "negative zero float",
            ev("turn/start", 1, r#"[-0.0]"#),
            |e| matches!(e, AppendError::BadData { .. }),
        ),
        (
            "negative zero exponent",
            ev("turn/start", 1, r#"{"a":{"b":-0e3}}"#),
            |e| matches!(e, AppendError::BadData { .. }),
        ),
        (
            "number overflowing to infinity",
            ev("turn/start", 1, r#"{"turn":1e400}"#),
            |e| matches!(e, AppendError::BadData { .. }),
        ),
        ("nesting over the limit", ev("x/y", 1, &deep), |e| {
            matches!(e, AppendError::BadData { .. })
        }),
        ("payload over the limit", ev("x/y", 1, &big), |e| {
            matches!(e, AppendError::TooLarge { limit: 4096, .. })
        }),
        ("seq gap", ev("turn/start", 5, "{}"), |e| {
            matches!(
                e,
                AppendError::WrongSeq {
                    got: 5,
                    expected: 1,
                    ..
                }
            )
        }),
        ("seq repeat", ev("turn/start", 0, "{}"), |e| {
            matches!(
                e,
                AppendError::WrongSeq {
                    got: 0,
                    expected: 1,
                    ..
                }
            )
        }),
        (
            "surfaceOp on a log-only type",
            ev("turn/start", 1, "{}").with_surface_op(SurfaceOp::Append),
            |e| matches!(e, AppendError::Semantics { .. }),
        ),
        (
            "surface type without surfaceOp",
            ev("user/message", 1, user),
            |e| matches!(e, AppendError::Semantics { .. }),
        ),
        (
            "sourceEventSeqs on a log-only type",
            ev("turn/start", 1, "{}").with_sources(vec![0]),
            |e| matches!(e, AppendError::Semantics { .. }),
        ),
        (
            "sourceEventSeqs pointing forward",
            ev("user/message", 1, user)
                .with_surface_op(SurfaceOp::Append)
                .with_sources(vec![1]),
            |e| matches!(e, AppendError::Semantics { .. }),
        ),
        (
            "duplicate sourceEventSeqs",
            ev("user/message", 1, user)
                .with_surface_op(SurfaceOp::Append)
                .with_sources(vec![0, 0]),
            |e| matches!(e, AppendError::Semantics { .. }),
        ),
        (
            "retired request/header-delta",
            ev("request/header-delta", 1, "{}"),
            |e| matches!(e, AppendError::Semantics { .. }),
        ),
        (
            "time beyond a safe integer",
            Event::new("turn/start", 1, i64::MAX, "{}"),
            |e| matches!(e, AppendError::Envelope { .. }),
        ),
        (
            // Fuzz finding: `i64::MIN.abs()` overflowed (a panic with overflow checks, and a
            // wrapped negative value that passed the store's check without them).
            "time i64::MIN",
            Event::new("turn/start", 1, i64::MIN, "{}"),
            |e| matches!(e, AppendError::Envelope { .. }),
        ),
    ];
    for (name, event, check) in cases {
        let err = store.append("s", event).expect_err(name);
        assert!(check(&err), "{name}: unexpected error {err:?}");
        assert!(!err.to_string().is_empty());
        assert_eq!(store.len("s"), Some(1), "{name}: session changed");
        assert_eq!(snapshot(dir.path()), before, "{name}: log changed");
    }
    let no_session = store.append("nope", ev("turn/start", 0, "{}")).unwrap_err();
    assert!(matches!(no_session, AppendError::NoSuchSession(_)));
    assert!(matches!(
        store.create_session(SessionHeader::new("", 1)),
        Err(AppendError::InvalidSessionId { .. })
    ));
    assert!(matches!(
        store.create_session(SessionHeader::new("s", 1)),
        Err(AppendError::SessionExists(_))
    ));
    let mut relative = SessionHeader::new("r", 1);
    relative.cwd = Some("relative/dir".into());
    assert!(matches!(
        store.create_session(relative),
        Err(AppendError::InvalidHeader { .. })
    ));
    assert_eq!(
        snapshot(dir.path()),
        before,
        "refused sessions changed the log"
    );

    // What dsh accepts is accepted: lone surrogate escapes, negative and non-monotonic time.
    store
        .append("s", ev("x/y", 1, r#"{"t":"\ud800 and \udfff"}"#))
        .unwrap();
    store.append("s", Event::new("x/y", 2, -5, "null")).unwrap();
    drop(store);
    let store = Store::open(dir.path(), cfg).unwrap();
    assert_eq!(store.len("s"), Some(3));
    assert_eq!(
        store.get("s", 1).unwrap().unwrap().data,
        r#"{"t":"\ud800 and \udfff"}"#
    );
    assert_eq!(store.get("s", 2).unwrap().unwrap().time, -5);
}

/// Options out of range are refused at open with a message naming the option, before
/// anything is created.
#[test]
fn options_out_of_range_are_refused_at_open() {
    let cases = [
        (Config::default().segment_bytes(100), "segment_bytes 100"),
        (
            Config::default().deferred_index_entries((1 << 20) + 1),
            "deferred_index_entries 1048577 is above the maximum of 1048576",
        ),
    ];
    for (config, message) in cases {
        let dir = tempfile::tempdir().unwrap();
        let store_dir = dir.path().join("store");
        match Store::open(&store_dir, config) {
            Err(sessionlog::error::OpenError::Config(m)) => assert!(m.contains(message), "{m}"),
            other => panic!("expected a config error, got {other:?}"),
        }
        assert!(!store_dir.join("index.redb").exists());
    }
    // The bounds themselves are accepted.
    for config in [
        Config::default().segment_bytes(4096),
        Config::default().deferred_index_entries(1 << 20),
        Config::default().deferred_index_entries(0),
    ] {
        let config = config.invariants(sessionlog::InvariantMode::Off);
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), config.clone()).unwrap();
        store.create_session(SessionHeader::new("s", 1)).unwrap();
        for seq in 0..6 {
            store
                .append("s", crate::common::synthetic_event(seq, 0))
                .unwrap();
        }
        store.close().unwrap();
        let store = Store::open(dir.path(), config).unwrap();
        assert_eq!(store.len("s"), Some(6));
        let read = crate::common::read_all(&store, "s");
        assert_eq!(
            read.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4, 5]
        );
        store.close().unwrap();
    }
}
