//! dsh's SQLite test vectors (persistence spec §9.3, §9.5): column encodings, the torn-row
//! rule, schema rejections and malformed files, each giving a clear typed error.

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use rusqlite::types::Value;
use sessionlog::event::{Event, MAX_SAFE_INTEGER, SessionHeader};
use sessionlog::interop::sqlite::{
    self, DataValue, ReadOptions, SchemaVersion, SqliteError, VarintError, WriteOptions,
    decode_source_event_seqs, encode_data, encode_source_event_seqs,
};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn source_event_seqs_varint_vectors() {
    let max = MAX_SAFE_INTEGER as u64;
    let vectors: [(&[u64], &str); 8] = [
        (&[2, 3, 4, 5, 6], "0202020202"),
        (&[10, 5], "0a09"),
        (&[300], "ac02"),
        (&[5, 1000], "05c60f"),
        (&[7, 7], "0700"),
        (&[0], "00"),
        (&[], ""),
        (
            &[max - 1, 0, max - 2],
            "feffffffffffff0f fbffffffffffff1f faffffffffffff1f",
        ),
    ];
    for (seqs, blob) in vectors {
        assert_eq!(
            encode_source_event_seqs(seqs).unwrap(),
            hex(blob),
            "{seqs:?}"
        );
        assert_eq!(
            decode_source_event_seqs(&hex(blob)).unwrap(),
            seqs,
            "{blob}"
        );
    }
    let rejected = [
        ("80", VarintError::Truncated),
        ("80 00", VarintError::NonCanonical),
        ("00 01", VarintError::SeqOutOfRange),
        ("ff ff ff ff ff ff ff 0f 02", VarintError::SeqOutOfRange),
        ("80 80 80 80 80 80 80 10", VarintError::VarintOutOfRange),
        ("80 80 80 80 80 80 80 80 80", VarintError::VarintOutOfRange),
    ];
    for (blob, err) in rejected {
        assert_eq!(
            decode_source_event_seqs(&hex(blob)),
            Err(err.clone()),
            "{blob}"
        );
        assert!(
            err.to_string()
                .starts_with("malformed source_event_seqs storage value: ")
        );
    }
    // dsh's encoder throws a TypeError for seqs that are not non-negative safe integers; with
    // u64 seqs only the upper bound is expressible.
    assert_eq!(
        encode_source_event_seqs(&[max + 1]),
        Err(VarintError::UnsafeSeq(max + 1))
    );
}

#[test]
fn data_column_vectors() {
    let big = format!(r#"{{"text":"{}"}}"#, "x".repeat(8192));
    let DataValue::Zstd(blob) = encode_data(&big).unwrap() else {
        panic!("8 KiB of x must be stored as a zstd BLOB");
    };
    assert_eq!(&blob[..4], [0x28, 0xb5, 0x2f, 0xfd], "one zstd frame");
    assert!(blob.len() < big.len());
    assert_eq!(
        sqlite::decode_zstd_data(&blob, sqlite::MAX_SCALAR_DATA_BYTES).unwrap(),
        big
    );
    assert_eq!(
        encode_data(r#"{"turn":1}"#).unwrap(),
        DataValue::Text(r#"{"turn":1}"#.into())
    );
    // The threshold is on UTF-8 bytes: 4095 stays TEXT however compressible, 4096 is offered
    // to zstd.
    let at = |n: usize| format!(r#"["{}"]"#, "a".repeat(n - 4));
    assert!(matches!(
        encode_data(&at(4095)).unwrap(),
        DataValue::Text(_)
    ));
    assert!(matches!(
        encode_data(&at(4096)).unwrap(),
        DataValue::Zstd(_)
    ));
    // A packed row's blob may not inflate past 1 MiB.
    let huge = zstd::bulk::compress(&vec![b' '; sqlite::MAX_PACKED_DATA_BYTES + 1], 3).unwrap();
    assert_eq!(
        sqlite::decode_zstd_data(&huge, sqlite::MAX_PACKED_DATA_BYTES),
        Err(sqlite::DataError::TooLarge(sqlite::MAX_PACKED_DATA_BYTES))
    );
    // Fatal UTF-8.
    let bad = zstd::bulk::compress(b"{\"a\":\"\xff\"}", 3).unwrap();
    assert!(matches!(
        sqlite::decode_zstd_data(&bad, 100),
        Err(sqlite::DataError::Utf8(6))
    ));
}

/// A database of `version` holding session `s` whose `events` rows are exactly `rows`
/// (`seq, type, time, data, source_event_seqs, surface_op, ignorable`).
fn db_with_rows(dir: &Path, name: &str, version: SchemaVersion, rows: &[[Value; 7]]) -> PathBuf {
    let path = dir.join(name);
    let mut header = SessionHeader::new("s", 1000);
    header.cwd = Some("/work".into());
    let seed = [Event::new("turn/start", 0, 1, r#"{"turn":1}"#)];
    sqlite::write(
        &path,
        version,
        [(&header, seed.as_slice())],
        &WriteOptions::default(),
    )
    .unwrap();
    let conn = Connection::open(&path).unwrap();
    conn.execute("DELETE FROM events", []).unwrap();
    for row in rows {
        conn.execute(
            "INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable) VALUES ('s', ?, ?, ?, ?, ?, ?, ?)",
            rusqlite::params_from_iter(row.iter()),
        )
        .unwrap();
    }
    path
}

fn t(s: &str) -> Value {
    Value::Text(s.into())
}
fn i(n: i64) -> Value {
    Value::Integer(n)
}
const N: Value = Value::Null;

fn row(seq: i64, kind: &str, data: &str) -> [Value; 7] {
    [i(seq), t(kind), i(seq + 1), t(data), N, N, N]
}

fn read(path: &Path) -> Result<sqlite::ImportedSession, SqliteError> {
    sqlite::read_session(path, "s", &ReadOptions::default())
}

#[test]
fn torn_row_rule_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let turn_start = row(0, "turn/start", r#"{"turn":1}"#);
    let step_start = row(2, "step/start", r#"{"turn":1,"step":1}"#);
    let turn_end = row(3, "turn/end", r#"{"turn":1,"reason":{"kind":"completed"}}"#);
    for version in SchemaVersion::ALL {
        // A gap after the last turn/end is a torn tail. dsh 15 deletes from the end of the
        // preserved prefix, 17/18 from the first bad row's seq.
        let p = db_with_rows(
            dir.path(),
            &format!("gap-{version}.db"),
            version,
            &[turn_start.clone(), step_start.clone()],
        );
        let s = read(&p).unwrap();
        assert_eq!(s.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [0]);
        let torn = s.torn.unwrap();
        let expected_from = if version == SchemaVersion::V15 { 1 } else { 2 };
        assert_eq!(
            (torn.from_seq, torn.rows_cut),
            (expected_from, 1),
            "{version}"
        );
        assert!(
            torn.reason.contains("seq gap (expected 1, got 2)"),
            "{}",
            torn.reason
        );

        // The same gap before a turn/end is committed corruption.
        let p = db_with_rows(
            dir.path(),
            &format!("gap-committed-{version}.db"),
            version,
            &[turn_start.clone(), step_start.clone(), turn_end.clone()],
        );
        let err = read(&p).unwrap_err();
        let SqliteError::CommittedCorruption {
            seq, dsh_message, ..
        } = &err
        else {
            panic!("{err:?}");
        };
        assert_eq!(*seq, 2);
        if version == SchemaVersion::V15 {
            assert_eq!(
                dsh_message,
                "seq gap in committed region (expected 1, got 2)"
            );
        } else {
            assert_eq!(dsh_message, "invalid committed physical row at seq 2");
        }
        assert!(err.to_string().contains("corrupt session log"), "{err}");

        // §9.3: an unparsable chunk row after an open turn is a torn tail...
        let open_turn = [
            row(0, "turn/start", r#"{"turn":1}"#),
            row(1, "step/start", r#"{"turn":1,"step":1}"#),
            [
                i(2),
                t("assistant/chunk"),
                i(99),
                t("{not valid json"),
                N,
                N,
                N,
            ],
        ];
        let p = db_with_rows(
            dir.path(),
            &format!("json-{version}.db"),
            version,
            &open_turn,
        );
        let s = read(&p).unwrap();
        assert_eq!(s.events.len(), 2);
        let torn = s.torn.unwrap();
        assert_eq!(torn.from_seq, 2);
        assert!(torn.reason.contains("data is not JSON"), "{}", torn.reason);
        // ...and committed corruption once a turn/end follows it.
        let mut committed = open_turn.to_vec();
        committed.push(row(
            3,
            "turn/end",
            r#"{"turn":1,"reason":{"kind":"completed"}}"#,
        ));
        let p = db_with_rows(
            dir.path(),
            &format!("json-c-{version}.db"),
            version,
            &committed,
        );
        match read(&p).unwrap_err() {
            SqliteError::CommittedCorruption {
                seq, dsh_message, ..
            } => {
                assert_eq!(seq, 2);
                if version == SchemaVersion::V15 {
                    assert_eq!(dsh_message, "unparsable committed event at seq 2");
                }
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn malformed_packed_rows_follow_the_torn_rule() {
    let dir = tempfile::tempdir().unwrap();
    let bad_packed = [i(0), t("text-chunks"), i(1), t(r#"{"turn":1}"#), N, N, i(0)];
    for version in [SchemaVersion::V17, SchemaVersion::V18] {
        // A lone malformed packed row: nothing preserved, torn from 0.
        let p = db_with_rows(
            dir.path(),
            &format!("lone-{version}.db"),
            version,
            std::slice::from_ref(&bad_packed),
        );
        let s = read(&p).unwrap();
        assert!(s.events.is_empty());
        assert_eq!(s.torn.as_ref().map(|t| t.from_seq), Some(0));
        assert!(
            s.torn
                .unwrap()
                .reason
                .contains("malformed text-chunks storage row")
        );
        // Followed by a turn/end: committed corruption at seq 0.
        let p = db_with_rows(
            dir.path(),
            &format!("committed-{version}.db"),
            version,
            &[
                bad_packed.clone(),
                row(1, "turn/end", r#"{"turn":1,"reason":{"kind":"completed"}}"#),
            ],
        );
        assert!(matches!(
            read(&p),
            Err(SqliteError::CommittedCorruption { seq: 0, .. })
        ));
        // The packed discriminator on a non-chunk type, and surface fields on a packed row.
        let p = db_with_rows(
            dir.path(),
            &format!("disc-{version}.db"),
            version,
            &[[i(0), t("turn/start"), i(1), t(r#"{"turn":1}"#), N, N, i(0)]],
        );
        let reason = read(&p).unwrap().torn.unwrap().reason;
        assert!(
            reason.contains(
                "malformed turn/start storage row: packed discriminator requires a chunk tag"
            ),
            "{reason}"
        );
        let p = db_with_rows(
            dir.path(),
            &format!("surf-{version}.db"),
            version,
            &[[
                i(0),
                t("text-chunks"),
                i(1),
                t("{}"),
                N,
                t("\"append\""),
                i(0),
            ]],
        );
        let reason = read(&p).unwrap().torn.unwrap().reason;
        assert!(
            reason.contains("packed surface fields must be null"),
            "{reason}"
        );
        // A scalar row typed like a chunk tag (ignorable=1) decodes as itself.
        let p = db_with_rows(
            dir.path(),
            &format!("collide-{version}.db"),
            version,
            &[[i(0), t("text-chunks"), i(1), t(r#"{"x":1}"#), N, N, i(1)]],
        );
        let s = read(&p).unwrap();
        assert!(s.torn.is_none());
        assert_eq!(
            (s.events[0].kind.as_str(), s.events[0].ignorable),
            ("text-chunks", true)
        );
    }
}

#[test]
fn corrupt_zstd_blobs_are_undecodable_rows() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = Value::Blob(vec![0x28, 0xb5, 0x2f, 0xfd, 0xff, 0xff, 0x00, 0x13]);
    let not_utf8 = Value::Blob(zstd::bulk::compress(b"{\"a\":\"\xc3\x28\"}", 3).unwrap());
    for version in [SchemaVersion::V17, SchemaVersion::V18] {
        for (name, blob) in [("garbage", &garbage), ("utf8", &not_utf8)] {
            let rows = [
                row(0, "turn/start", r#"{"turn":1}"#),
                [i(1), t("session/title"), i(2), blob.clone(), N, N, N],
            ];
            let p = db_with_rows(dir.path(), &format!("{name}-{version}.db"), version, &rows);
            let s = read(&p).unwrap();
            assert_eq!(s.events.len(), 1);
            let reason = s.torn.unwrap().reason;
            assert!(reason.contains("data blob is not"), "{name}: {reason}");

            let mut committed = rows.to_vec();
            committed.push(row(
                2,
                "turn/end",
                r#"{"turn":1,"reason":{"kind":"completed"}}"#,
            ));
            let p = db_with_rows(
                dir.path(),
                &format!("{name}-c-{version}.db"),
                version,
                &committed,
            );
            let err = read(&p).unwrap_err();
            assert!(
                matches!(err, SqliteError::CommittedCorruption { seq: 1, .. }),
                "{err:?}"
            );
            assert!(err.to_string().contains("data blob is not"), "{err}");
        }
    }
}

#[test]
fn row_level_defects_fail_the_whole_read() {
    let dir = tempfile::tempdir().unwrap();
    for version in [SchemaVersion::V17, SchemaVersion::V18] {
        // A 15-style TEXT source_event_seqs is rejected at 17/18 even in the tail.
        let p = db_with_rows(
            dir.path(),
            &format!("text-sources-{version}.db"),
            version,
            &[[
                i(0),
                t("user/message"),
                i(1),
                t("{}"),
                t("[0]"),
                t("\"append\""),
                N,
            ]],
        );
        let err = read(&p).unwrap_err();
        assert!(
            matches!(&err, SqliteError::EventRow { seq: 0, detail, .. } if detail.contains("source_event_seqs must be a blob or null")),
            "{err:?}"
        );
        // A malformed varint is an undecodable row (torn here).
        let p = db_with_rows(
            dir.path(),
            &format!("varint-{version}.db"),
            version,
            &[[
                i(0),
                t("user/message"),
                i(1),
                t("{}"),
                Value::Blob(vec![0x80]),
                t("\"append\""),
                N,
            ]],
        );
        let reason = read(&p).unwrap().torn.unwrap().reason;
        assert!(reason.contains("truncated varint"), "{reason}");
    }
    // An unrepresentable surface op in the preserved prefix fails validation.
    for version in SchemaVersion::ALL {
        let p = db_with_rows(
            dir.path(),
            &format!("op-{version}.db"),
            version,
            &[[
                i(0),
                t("user/message"),
                i(1),
                t("{}"),
                N,
                t("\"prepend\""),
                N,
            ]],
        );
        let err = read(&p).unwrap_err();
        assert!(
            matches!(&err, SqliteError::InvalidEvent { seq: 0, .. }),
            "{version}: {err:?}"
        );
        assert!(
            err.to_string().contains("failed validation at seq 0"),
            "{err}"
        );
    }
}

fn written(dir: &Path, name: &str, version: SchemaVersion) -> PathBuf {
    db_with_rows(dir, name, version, &[row(0, "turn/start", r#"{"turn":1}"#)])
}

#[test]
fn schema_rejections() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // A database with only an unrelated table: unversioned.
    let p = d.join("unrelated.db");
    Connection::open(&p)
        .unwrap()
        .execute_batch("CREATE TABLE unrelated (x)")
        .unwrap();
    let err = read(&p).unwrap_err();
    assert!(
        matches!(
            err,
            SqliteError::Unversioned {
                user_objects: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("unversioned schema or application identity")
    );

    // An empty file is an empty SQLite database: unversioned too.
    let p = d.join("empty.db");
    std::fs::write(&p, b"").unwrap();
    assert!(matches!(read(&p), Err(SqliteError::Unversioned { .. })));

    // user_version 16 (the fork's short-lived 15 + owner) is incompatible.
    let p = written(d, "uv16.db", SchemaVersion::V18);
    Connection::open(&p)
        .unwrap()
        .execute_batch("PRAGMA user_version = 16")
        .unwrap();
    let err = read(&p).unwrap_err();
    assert!(
        matches!(err, SqliteError::IncompatibleVersion { found: 16, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("has schema version 16, incompatible"),
        "{err}"
    );

    // A version other than the one asked for.
    let p = written(d, "v17.db", SchemaVersion::V17);
    let err = sqlite::read(
        &p,
        &ReadOptions {
            version: Some(SchemaVersion::V18),
        },
    )
    .unwrap_err();
    assert!(
        matches!(&err, SqliteError::IncompatibleVersion { found: 17, accepted, .. } if accepted == &[SchemaVersion::V18]),
        "{err:?}"
    );

    // uv 18 with application id 12345.
    let p = written(d, "app.db", SchemaVersion::V18);
    Connection::open(&p)
        .unwrap()
        .execute_batch("PRAGMA application_id = 12345")
        .unwrap();
    let err = read(&p).unwrap_err();
    assert!(
        matches!(err, SqliteError::ForeignApplicationId { found: 12345, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("has application id 12345, expected 1146308688")
    );

    // An extra column, a non-STRICT events table, an extra index: not the required objects.
    let p = written(d, "alter.db", SchemaVersion::V18);
    Connection::open(&p)
        .unwrap()
        .execute_batch("ALTER TABLE events ADD COLUMN unexpected TEXT")
        .unwrap();
    let err = read(&p).unwrap_err();
    assert!(matches!(err, SqliteError::SchemaMismatch { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("does not contain the required schema objects")
    );

    let p = written(d, "index.db", SchemaVersion::V17);
    Connection::open(&p)
        .unwrap()
        .execute_batch("CREATE INDEX extra ON events(time)")
        .unwrap();
    let err = read(&p).unwrap_err();
    assert!(
        matches!(&err, SqliteError::SchemaMismatch { detail, .. } if detail.contains("unexpected index `extra`")),
        "{err:?}"
    );

    for (name, ddl) in [
        (
            "loose.db",
            sessionlog::interop::sqlite::schema::DDL_18.replace(") STRICT;", ");"),
        ),
        (
            "any.db",
            sessionlog::interop::sqlite::schema::DDL_18.replace(
                "type              TEXT NOT NULL",
                "type              ANY NOT NULL",
            ),
        ),
    ] {
        let p = d.join(name);
        let conn = Connection::open(&p).unwrap();
        conn.execute_batch(&ddl).unwrap();
        conn.execute_batch(
            "INSERT INTO persistence_state VALUES (1, '876d0f42-914f-47b7-881d-31badb7174eb');
             PRAGMA application_id = 1146308688; PRAGMA user_version = 18;",
        )
        .unwrap();
        drop(conn);
        let err = read(&p).unwrap_err();
        assert!(
            matches!(err, SqliteError::SchemaMismatch { .. }),
            "{name}: {err:?}"
        );
    }

    // Whitespace in the DDL is free at 17/18.
    let p = d.join("spaced.db");
    let conn = Connection::open(&p).unwrap();
    conn.execute_batch(&sessionlog::interop::sqlite::schema::DDL_18.replace("  ", "\t \t"))
        .unwrap();
    conn.execute_batch(
        "INSERT INTO persistence_state VALUES (1, '876d0f42-914f-47b7-881d-31badb7174eb');
         PRAGMA application_id = 1146308688; PRAGMA user_version = 18;",
    )
    .unwrap();
    drop(conn);
    let import = sqlite::read(&p, &ReadOptions::default()).unwrap();
    assert!(import.sessions.is_empty());

    // A store id that is not a UUID is refused at 18, accepted at 15.
    for version in [SchemaVersion::V15, SchemaVersion::V18] {
        let p = written(d, &format!("store-{version}.db"), version);
        Connection::open(&p)
            .unwrap()
            .execute_batch("UPDATE persistence_state SET store_id = 'store-1'")
            .unwrap();
        let got = sqlite::read(&p, &ReadOptions::default());
        if version == SchemaVersion::V15 {
            assert_eq!(got.unwrap().store_id.as_deref(), Some("store-1"));
        } else {
            assert!(
                matches!(got, Err(SqliteError::StoreIdentity { .. })),
                "{got:?}"
            );
        }
    }
}

#[test]
fn malformed_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(matches!(
        read(&d.join("absent.db")),
        Err(SqliteError::Missing { .. })
    ));
    assert!(matches!(read(d), Err(SqliteError::NotADatabase { .. })));

    let p = d.join("noise.db");
    std::fs::write(&p, vec![0x5a; 8192]).unwrap();
    let err = read(&p).unwrap_err();
    assert!(matches!(err, SqliteError::NotADatabase { .. }), "{err:?}");
    assert!(err.to_string().contains("noise.db"), "{err}");

    // Truncated copies of a real multi-page database.
    let full = d.join("full.db");
    let mut header = SessionHeader::new("s", 1);
    header.cwd = Some("/w".into());
    let events: Vec<Event> = (0..400)
        .map(|n| {
            Event::new(
                "session/title",
                n,
                n as i64,
                format!(r#"{{"title":"{}"}}"#, "t".repeat(200)),
            )
        })
        .collect();
    sqlite::write(
        &full,
        SchemaVersion::V18,
        [(&header, events.as_slice())],
        &WriteOptions::default(),
    )
    .unwrap();
    let bytes = std::fs::read(&full).unwrap();
    assert!(bytes.len() > 20 * 4096);
    for cut in [50, 4096 + 100, bytes.len() / 2] {
        let p = d.join(format!("cut-{cut}.db"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let err = read(&p).unwrap_err();
        assert!(
            matches!(err, SqliteError::NotADatabase { .. }),
            "cut at {cut}: {err:?}"
        );
    }

    // A session whose stored format version is not 0: dsh's refusal text.
    let p = written(d, "fmt.db", SchemaVersion::V18);
    Connection::open(&p)
        .unwrap()
        .execute_batch("UPDATE sessions SET version = 1")
        .unwrap();
    let err = read(&p).unwrap_err();
    assert!(
        matches!(err, SqliteError::FormatVersion { version: 1, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains(
        "session \"s\" uses log format v1, but this harness reads only v0: the log was written by a newer harness — upgrade the harness to open it"
    ));

    // Session-row validation at 18: relative cwd, foreign origin, non-UUID incarnation.
    for (sql, needle) in [
        (
            "UPDATE sessions SET cwd = 'rel/dir'",
            "cwd must be absolute",
        ),
        (
            "UPDATE sessions SET origin = 'fork'",
            "origin must be subagent or null",
        ),
        (
            "UPDATE sessions SET incarnation = 'inc'",
            "incarnation must be a UUID",
        ),
        (
            "UPDATE sessions SET created_at = -1",
            "createdAt must be a non-negative safe integer",
        ),
    ] {
        let p = written(d, "meta.db", SchemaVersion::V18);
        Connection::open(&p).unwrap().execute_batch(sql).unwrap();
        let err = read(&p).unwrap_err();
        assert!(
            matches!(&err, SqliteError::SessionRow { detail, .. } if detail.contains(needle)),
            "{sql}: {err:?}"
        );
        std::fs::remove_file(&p).unwrap();
    }
    // The same relative cwd is fine at 15, which only checks createdAt.
    let p = written(d, "meta15.db", SchemaVersion::V15);
    Connection::open(&p)
        .unwrap()
        .execute_batch("UPDATE sessions SET cwd = 'rel/dir'")
        .unwrap();
    assert_eq!(read(&p).unwrap().header.cwd.as_deref(), Some("rel/dir"));

    assert!(matches!(
        sqlite::read_session(&p, "nope", &ReadOptions::default()),
        Err(SqliteError::SessionNotFound { .. })
    ));
}

/// Stored JSON is judged as `JSON.parse` judges it: lone surrogate escapes, `-0` and numbers
/// that overflow are readable (not torn); a surface op bound that overflows is not a valid op.
#[test]
fn stored_json_follows_json_parse() {
    let dir = tempfile::tempdir().unwrap();
    for version in SchemaVersion::ALL {
        let rows = [
            row(
                0,
                "session/title",
                r#"{"title":"\ud800 lone","n":-0,"big":1e400}"#,
            ),
            row(1, "turn/start", r#"[{"deep":[[[[[[[[[[]]]]]]]]]]}]"#),
            row(2, "turn/end", r#"{"turn":1,"reason":{"kind":"completed"}}"#),
        ];
        let p = db_with_rows(dir.path(), &format!("js-{version}.db"), version, &rows);
        let s = read(&p).unwrap();
        assert!(s.torn.is_none());
        assert_eq!(
            s.events[0].data,
            r#"{"title":"\ud800 lone","n":-0,"big":1e400}"#
        );

        let rows = [[
            i(0),
            t("user/message"),
            i(1),
            t("{}"),
            N,
            t(r#"{"op":"replace","start":1e400,"end":1}"#),
            N,
        ]];
        let p = db_with_rows(dir.path(), &format!("js-op-{version}.db"), version, &rows);
        assert!(matches!(
            read(&p),
            Err(SqliteError::InvalidEvent { seq: 0, .. })
        ));
    }
}

/// dsh's default journal mode is WAL: an import sees every committed transaction, including
/// ones still only in the `-wal` file of a live writer, and leaves the database unchanged.
#[test]
fn imports_wal_databases_with_a_live_writer() {
    let dir = tempfile::tempdir().unwrap();
    let p = db_with_rows(
        dir.path(),
        "wal.db",
        SchemaVersion::V18,
        &[row(0, "turn/start", r#"{"turn":1}"#)],
    );
    let writer = Connection::open(&p).unwrap();
    let mode: String = writer
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    writer
        .execute_batch("PRAGMA wal_autocheckpoint = 0")
        .unwrap();
    writer
        .execute(
            "INSERT INTO events (session_id, seq, type, time, data) VALUES ('s', 1, 'turn/end', 2, ?)",
            [r#"{"turn":1,"reason":{"kind":"completed"}}"#],
        )
        .unwrap();
    assert!(
        std::fs::metadata(dir.path().join("wal.db-wal"))
            .unwrap()
            .len()
            > 0
    );
    let before = std::fs::read(&p).unwrap();
    let s = read(&p).unwrap();
    assert_eq!(s.events.len(), 2);
    assert_eq!(s.events[1].kind, "turn/end");
    assert_eq!(
        std::fs::read(&p).unwrap(),
        before,
        "import never writes the database"
    );
    drop(writer);
}

/// A database left by a crash in the middle of a rollback-journal transaction has a hot
/// journal that only a writer may roll back; the read-only import says so instead of guessing.
#[test]
fn hot_journal_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let p = db_with_rows(
        dir.path(),
        "hot.db",
        SchemaVersion::V15,
        &[row(0, "turn/start", r#"{"turn":1}"#)],
    );
    let conn = Connection::open(&p).unwrap();
    conn.execute_batch("PRAGMA cache_size = 1; BEGIN IMMEDIATE")
        .unwrap();
    for n in 1..200 {
        conn.execute(
            "INSERT INTO events (session_id, seq, type, time, data) VALUES ('s', ?1, 'session/title', 1, ?2)",
            rusqlite::params![n, format!(r#"{{"title":"{}"}}"#, "x".repeat(500))],
        )
        .unwrap();
    }
    let journal = dir.path().join("hot.db-journal");
    assert!(std::fs::metadata(&journal).unwrap().len() > 0);
    // Copy the mid-transaction state as a crash would leave it.
    let crashed = dir.path().join("crashed.db");
    std::fs::copy(&p, &crashed).unwrap();
    std::fs::copy(&journal, dir.path().join("crashed.db-journal")).unwrap();
    conn.execute_batch("ROLLBACK").unwrap();
    let err = read(&crashed).unwrap_err();
    assert!(matches!(err, SqliteError::NeedsRecovery { .. }), "{err:?}");
    assert!(err.to_string().contains("crashed.db"), "{err}");
}

/// Like dsh's `rowFor(id)`, reading one session validates only that session's row; importing
/// everything stops at the invalid one.
#[test]
fn one_bad_session_row_blocks_only_itself() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("two.db");
    let mut a = SessionHeader::new("a", 1);
    a.cwd = Some("/w".into());
    let mut b = a.clone();
    b.id = "b".into();
    let ev = [Event::new("turn/start", 0, 1, r#"{"turn":1}"#)];
    sqlite::write(
        &p,
        SchemaVersion::V18,
        [(&a, ev.as_slice()), (&b, ev.as_slice())],
        &WriteOptions::default(),
    )
    .unwrap();
    Connection::open(&p)
        .unwrap()
        .execute_batch("UPDATE sessions SET incarnation = 'x' WHERE id = 'b'")
        .unwrap();
    let opts = ReadOptions::default();
    assert_eq!(
        sqlite::read_session(&p, "a", &opts).unwrap().events.len(),
        1
    );
    assert!(matches!(
        sqlite::read_session(&p, "b", &opts),
        Err(SqliteError::SessionRow { .. })
    ));
    assert!(matches!(
        sqlite::read(&p, &opts),
        Err(SqliteError::SessionRow { rowid: 2, .. })
    ));
}
