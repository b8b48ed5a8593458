//! Packed chunk rows in SQLite 17/18 files (persistence spec §3, §9.4, §9.5): the rows our
//! export writes, the rows our import accepts, and dsh's limits on both.

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use rusqlite::types::Value;
use sessionlog::event::{Event, Packing, SessionHeader};
use sessionlog::interop::sqlite::{self, ReadOptions, SchemaVersion, SqliteError, WriteOptions};

fn chunk(seq: u64, time: i64, delta: &str, text: &str) -> Event {
    Event::new(
        "assistant/chunk",
        seq,
        time,
        format!(r#"{{"turn":1,"step":1,"chunk":{{"type":"{delta}","index":0,"text":"{text}"}}}}"#),
    )
}

fn tool(seq: u64, name: Option<&str>, args: &str) -> Event {
    let name = name
        .map(|n| format!(r#","name":"{n}""#))
        .unwrap_or_default();
    Event::new(
        "assistant/chunk",
        seq,
        1000 + seq as i64,
        format!(
            r#"{{"turn":1,"step":1,"chunk":{{"type":"tool-call-delta","index":1,"id":"call-1"{name},"argumentsDelta":"{args}"}}}}"#
        ),
    )
}

fn texts(n: u64, text: &str) -> Vec<Event> {
    (0..n)
        .map(|s| chunk(s, 1000 + s as i64, "text-delta", text))
        .collect()
}

fn header() -> SessionHeader {
    let mut h = SessionHeader::new("s", 1);
    h.cwd = Some("/w".into());
    h
}

/// Writes `events` (one append batch) at `version`; returns the path and the `(type, seq,
/// ignorable)` of every physical row.
fn rows_of(
    dir: &Path,
    name: &str,
    version: SchemaVersion,
    events: &[Event],
) -> (PathBuf, Vec<(String, i64, Option<i64>)>) {
    let p = dir.join(name);
    let report =
        sqlite::write(&p, version, [(&header(), events)], &WriteOptions::default()).unwrap();
    let conn = Connection::open(&p).unwrap();
    let rows: Vec<(String, i64, Option<i64>)> = conn
        .prepare("SELECT type, seq, ignorable FROM events ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(report.rows, rows.len());
    assert_eq!(
        report.packed_rows,
        rows.iter().filter(|r| r.2 == Some(0)).count()
    );
    let back = sqlite::read(&p, &ReadOptions::default()).unwrap();
    let got = &back.sessions[0].events;
    assert_eq!(got.len(), events.len());
    for (a, b) in events.iter().zip(got) {
        assert_eq!(
            (&a.kind, a.seq, a.time, &a.data),
            (&b.kind, b.seq, b.time, &b.data)
        );
    }
    (p, rows)
}

fn kinds(rows: &[(String, i64, Option<i64>)]) -> Vec<&str> {
    rows.iter().map(|r| r.0.as_str()).collect()
}

#[test]
fn export_packs_with_the_sqlite_limits() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for version in [SchemaVersion::V17, SchemaVersion::V18] {
        // 100 chunks → 1 row; 1027 → 1024 + 3.
        let (_, rows) = rows_of(d, &format!("100-{version}.db"), version, &texts(100, "t"));
        assert_eq!(kinds(&rows), ["text-chunks"]);
        let (_, rows) = rows_of(d, &format!("1027-{version}.db"), version, &texts(1027, "t"));
        assert_eq!(rows.iter().map(|r| r.1).collect::<Vec<_>>(), [0, 1024]);
        assert!(rows.iter().all(|r| r.2 == Some(0)));

        // Byte cap: 4 × 300 000 → one row of 3 plus a scalar; 3 × 400 000 → all scalar;
        // 10 × 150 000 → several rows.
        let x300 = "x".repeat(300_000);
        let (p, rows) = rows_of(d, &format!("300k-{version}.db"), version, &texts(4, &x300));
        assert_eq!(kinds(&rows), ["text-chunks", "assistant/chunk"]);
        let max: i64 = Connection::open(&p)
            .unwrap()
            .query_row(
                "SELECT max(length(CAST(data AS BLOB))) FROM events",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(max <= 1_048_576);
        let (_, rows) = rows_of(
            d,
            &format!("400k-{version}.db"),
            version,
            &texts(3, &"y".repeat(400_000)),
        );
        assert_eq!(kinds(&rows), ["assistant/chunk"; 3]);
        let (_, rows) = rows_of(
            d,
            &format!("150k-{version}.db"),
            version,
            &texts(10, &"z".repeat(150_000)),
        );
        assert!(
            rows.iter().filter(|r| r.2 == Some(0)).count() > 1,
            "{rows:?}"
        );

        // Reasoning ×3, named tool call ×3, unnamed tool call ×3.
        let mut mixed: Vec<Event> = (0..3)
            .map(|s| chunk(s, 5, "reasoning-delta", "r"))
            .collect();
        mixed.extend((3..6).map(|s| tool(s, Some("read"), "{")));
        mixed.extend((6..9).map(|s| tool(s, None, "}")));
        let (_, rows) = rows_of(d, &format!("mixed-{version}.db"), version, &mixed);
        assert_eq!(
            kinds(&rows),
            ["reasoning-chunks", "tool-call-chunks", "tool-call-chunks"]
        );

        // Off-format deltas, gaps in time safety, a block change: left scalar.
        let mut off = texts(2, "a");
        off.push(Event::new(
            "assistant/chunk",
            2,
            1002,
            r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":1,"text":"b"}}"#,
        ));
        off.push(Event::new(
            "assistant/chunk",
            3,
            1003,
            r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":1,"text":"c","extra":1}}"#,
        ));
        let (_, rows) = rows_of(d, &format!("off-{version}.db"), version, &off);
        assert_eq!(kinds(&rows), ["assistant/chunk"; 4]);

        // Tag collision: ignorable logical events typed like packed rows are scalar rows.
        let collide: Vec<Event> = ["text-chunks", "reasoning-chunks", "tool-call-chunks"]
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut e = Event::new(
                    *t,
                    i as u64,
                    1,
                    r#"{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}"#,
                );
                e.ignorable = true;
                e
            })
            .collect();
        let (_, rows) = rows_of(d, &format!("collide-{version}.db"), version, &collide);
        assert_eq!(rows.iter().filter(|r| r.2 == Some(1)).count(), 3);
        assert_eq!(rows.iter().filter(|r| r.2 == Some(0)).count(), 0);
    }
    // Schema 15 never packs.
    let (_, rows) = rows_of(d, "100-15.db", SchemaVersion::V15, &texts(100, "t"));
    assert_eq!(rows.len(), 100);
}

#[test]
fn remembered_row_boundaries_are_kept_and_batches_respected() {
    let dir = tempfile::tempdir().unwrap();
    // Imported rows of 3 and 4 (from a file), then 5 appended events in two batches (2 + 3).
    let mut events = texts(12, "t");
    for (i, e) in events.iter_mut().enumerate() {
        e.layout.packing = match i {
            0 | 3 => Packing::RowStart,
            1 | 2 | 4 | 5 | 6 => Packing::RowMember,
            7 | 9 => Packing::AutoBatchStart,
            _ => Packing::Auto,
        };
    }
    let (p, rows) = rows_of(dir.path(), "remembered.db", SchemaVersion::V18, &events);
    assert_eq!(
        rows.iter().map(|r| (r.1, r.2)).collect::<Vec<_>>(),
        [
            (0, Some(0)),
            (3, Some(0)),
            (7, None),
            (8, None),
            (9, Some(0))
        ]
    );
    let back = sqlite::read(&p, &ReadOptions::default()).unwrap();
    let packing: Vec<Packing> = back.sessions[0]
        .events
        .iter()
        .map(|e| e.layout.packing)
        .collect();
    use Packing::*;
    assert_eq!(
        packing,
        [
            RowStart, RowMember, RowMember, RowStart, RowMember, RowMember, RowMember, Scalar,
            Scalar, RowStart, RowMember, RowMember
        ]
    );
}

fn db_with_row(dir: &Path, name: &str, data: Value) -> PathBuf {
    let p = dir.join(name);
    let seed = [Event::new("turn/start", 0, 1, r#"{"turn":1}"#)];
    sqlite::write(
        &p,
        SchemaVersion::V18,
        [(&header(), seed.as_slice())],
        &WriteOptions::default(),
    )
    .unwrap();
    let conn = Connection::open(&p).unwrap();
    conn.execute("DELETE FROM events", []).unwrap();
    conn.execute(
        "INSERT INTO events (session_id, seq, type, time, data, ignorable) VALUES ('s', 0, 'text-chunks', 90, ?, 0)",
        [data],
    )
    .unwrap();
    p
}

fn read(p: &Path) -> Result<sqlite::ImportedSession, SqliteError> {
    sqlite::read_session(p, "s", &ReadOptions::default())
}

#[test]
fn import_decodes_and_bounds_packed_rows() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // dsh's decode vector (shifted to seq 0): times 90, 92, 91.
    let data = r#"{"turn":2,"step":3,"index":1,"dt":[2,-1],"texts":["a","b","c"]}"#;
    let s = read(&db_with_row(d, "vector.db", Value::Text(data.into()))).unwrap();
    assert!(s.torn.is_none());
    assert_eq!(
        s.events.iter().map(|e| e.time).collect::<Vec<_>>(),
        [90, 92, 91]
    );
    assert_eq!(
        s.events[2].data,
        r#"{"turn":2,"step":3,"chunk":{"type":"text-delta","index":1,"text":"c"}}"#
    );
    // The same row compressed.
    let blob = zstd::bulk::compress(data.as_bytes(), 3).unwrap();
    let s = read(&db_with_row(d, "vector-blob.db", Value::Blob(blob))).unwrap();
    assert_eq!(s.events.len(), 3);

    // Over the byte cap as TEXT, and as a BLOB that inflates past 1 MiB; too few members.
    let long = format!(
        r#"{{"turn":1,"step":1,"index":0,"dt":[0,0],"texts":["{}","a","b"]}}"#,
        "x".repeat(1_048_576)
    );
    let s = read(&db_with_row(d, "long.db", Value::Text(long.clone()))).unwrap();
    assert!(s.events.is_empty());
    let reason = s.torn.unwrap().reason;
    assert!(
        reason.contains("data exceeds 1048576 UTF-8 bytes"),
        "{reason}"
    );
    let big_blob = zstd::bulk::compress(long.as_bytes(), 3).unwrap();
    let reason = read(&db_with_row(d, "long-blob.db", Value::Blob(big_blob)))
        .unwrap()
        .torn
        .unwrap()
        .reason;
    assert!(reason.contains("inflates past 1048576"), "{reason}");
    let two = r#"{"turn":1,"step":1,"index":0,"dt":[0],"texts":["a","b"]}"#;
    let reason = read(&db_with_row(d, "two.db", Value::Text(two.into())))
        .unwrap()
        .torn
        .unwrap()
        .reason;
    assert!(
        reason.contains("malformed text-chunks storage row"),
        "{reason}"
    );
}
