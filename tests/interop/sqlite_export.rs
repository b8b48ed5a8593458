//! SQLite export: refusals, hygiene, a second reader (Python's sqlite3) checking every file we
//! write, and round trips through all three schema versions.

use crate::common::sqlite_fixtures;

use std::path::Path;

use serde_json::Value as Json;
use sessionlog::event::{Event, SessionHeader, SurfaceOp};
use sessionlog::interop::sqlite::{
    self, ReadOptions, SchemaVersion, SqliteError, WriteOptions, schema,
};
use sqlite_fixtures::*;

fn header(id: &str) -> SessionHeader {
    let mut h = SessionHeader::new(id, 1_767_225_600_000);
    h.cwd = Some("/home/agent/project".into());
    h.delegation_depth = Some(0);
    h
}

/// A log exercising every column: surface ops, `sourceEventSeqs` including `[]`, ignorable,
/// negative and decreasing times, non-ASCII text, and data large enough for zstd.
fn sample_events() -> Vec<Event> {
    let big = format!(
        r#"{{"turn":1,"step":1,"message":{{"id":"a1","role":"assistant","content":[{{"type":"text","text":"{}"}}],"source":{{"kind":"model","provider":"p","model":"m"}}}}}}"#,
        "lorem ipsum ".repeat(600)
    );
    vec![
        Event::new("turn/start", 0, -5, r#"{"turn":1}"#),
        Event::new(
            "user/message",
            1,
            -4,
            r#"{"id":"u1","role":"user","content":[{"type":"text","text":"héllo \u2028 \"q\" 😀"}],"source":{"kind":"user"}}"#,
        )
        .with_surface_op(SurfaceOp::Append),
        Event::new("step/start", 2, 10, r#"{"turn":1,"step":1}"#),
        Event::new("assistant/message", 3, 9, big).with_surface_op(SurfaceOp::Append).with_sources(vec![]),
        Event::new(
            "assistant/message",
            4,
            11,
            r#"{"turn":1,"step":1,"message":{"id":"a2","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}}"#,
        )
        .with_surface_op(SurfaceOp::Replace { start: 3, end: 3 })
        .with_sources(vec![3, 1, 3]),
        {
            let mut e = Event::new("future/thing", 5, 12, r#"[1,2.5,-0.25,1e21,null,true]"#);
            e.ignorable = true;
            e
        },
        Event::new("step/end", 6, 13, r#"{"turn":1,"step":1}"#),
        Event::new("turn/end", 7, 14, r#"{"turn":1,"reason":{"kind":"completed"}}"#),
    ]
}

fn write(
    path: &Path,
    version: SchemaVersion,
    sessions: &[(SessionHeader, Vec<Event>)],
) -> Result<sqlite::WriteReport, SqliteError> {
    sqlite::write(
        path,
        version,
        sessions.iter().map(|(h, e)| (h, e.as_slice())),
        &WriteOptions::default(),
    )
}

fn same_events(a: &[Event], b: &[Event]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        let mut y = y.clone();
        y.layout.packing = x.layout.packing;
        assert_eq!(x, &y);
    }
}

#[test]
fn round_trip_every_version() {
    let dir = tempfile::tempdir().unwrap();
    let mut owned = header("owned");
    owned.owner = Some("alice@example.com".into());
    owned.parent_session = Some("parent".into());
    owned.origin = Some("subagent".into());
    owned.seed_length = Some(3);
    owned.agent_preset = Some("coder".into());
    owned.delegation_depth = Some(2);
    let mut bare = SessionHeader::new("bare", 0);
    bare.cwd = Some("/".into());
    for version in SchemaVersion::ALL {
        let mut sessions = vec![
            (header("first"), sample_events()),
            (bare.clone(), sample_events()[..1].to_vec()),
        ];
        if version.has_owner() {
            sessions.push((owned.clone(), sample_events()));
        }
        let path = dir.path().join(format!("rt-{version}.db"));
        let report = write(&path, version, &sessions).unwrap();
        assert_eq!(report.sessions, sessions.len());
        assert_eq!(
            report.events,
            sessions.iter().map(|s| s.1.len()).sum::<usize>()
        );
        let back = sqlite::read(&path, &ReadOptions::default()).unwrap();
        assert_eq!(back.version, version);
        assert!(schema::is_uuid(back.store_id.as_deref().unwrap()));
        assert_eq!(back.sessions.len(), sessions.len());
        for ((h, events), got) in sessions.iter().zip(&back.sessions) {
            assert_eq!(&got.header, h);
            assert_eq!(got.revision, 1);
            assert!(schema::is_uuid(&got.incarnation));
            assert!(got.torn.is_none());
            same_events(events, &got.events);
        }
        // Storage classes per version: the big message is a zstd BLOB and sourceEventSeqs a
        // varint BLOB at 17/18, JSON text at 15.
        let conn = open_ro(&path);
        let classes: Vec<(String, String, Option<String>)> = conn
            .prepare("SELECT typeof(data), typeof(source_event_seqs), surface_op FROM events WHERE session_id = 'first' AND seq IN (3, 4) ORDER BY seq")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let expected_class = if version == SchemaVersion::V15 {
            "text"
        } else {
            "blob"
        };
        assert_eq!(classes[0].0, expected_class);
        assert_eq!(classes[0].1, expected_class);
        assert_eq!(
            classes[1].2.as_deref(),
            Some(r#"{"op":"replace","start":3,"end":3}"#)
        );
        let sources: rusqlite::types::Value = conn
            .query_row(
                "SELECT source_event_seqs FROM events WHERE session_id = 'first' AND seq = 3",
                [],
                |r| r.get(0),
            )
            .unwrap();
        match version {
            SchemaVersion::V15 => assert_eq!(sources, rusqlite::types::Value::Text("[]".into())),
            _ => assert_eq!(sources, rusqlite::types::Value::Blob(vec![])),
        }
        let ignorable: Option<i64> = conn
            .query_row(
                "SELECT ignorable FROM events WHERE session_id = 'first' AND seq = 5",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(ignorable, Some(1));
    }
}

#[test]
fn export_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut owned = header("owned");
    owned.owner = Some("alice".into());
    for version in [SchemaVersion::V15, SchemaVersion::V17] {
        let err = write(
            &d.join("o.db"),
            version,
            &[(owned.clone(), sample_events())],
        )
        .unwrap_err();
        assert!(
            matches!(err, SqliteError::OwnerUnsupported { .. }),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("export to schema 18 instead"),
            "{err}"
        );
        assert!(!d.join("o.db").exists());
    }

    // An existing target is never touched, whatever it is.
    let target = d.join("existing.db");
    write(
        &target,
        SchemaVersion::V17,
        &[(header("a"), sample_events())],
    )
    .unwrap();
    let before = std::fs::read(&target).unwrap();
    for version in SchemaVersion::ALL {
        let err = write(&target, version, &[(header("b"), sample_events())]).unwrap_err();
        assert!(
            matches!(
                err,
                SqliteError::TargetExists {
                    existing: Some(17),
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("user_version 17"), "{err}");
    }
    assert_eq!(std::fs::read(&target).unwrap(), before);
    let other = d.join("notes.txt");
    std::fs::write(&other, "hello").unwrap();
    assert!(matches!(
        write(
            &other,
            SchemaVersion::V18,
            &[(header("b"), sample_events())]
        ),
        Err(SqliteError::TargetExists { existing: None, .. })
    ));

    let mut extra = header("x");
    extra.extra.push(("sandboxMode".into(), "\"x\"".into()));
    assert!(matches!(
        write(
            &d.join("x.db"),
            SchemaVersion::V18,
            &[(extra, sample_events())]
        ),
        Err(SqliteError::UnrepresentableHeader { .. })
    ));
    let mut relative = header("r");
    relative.cwd = Some("project".into());
    assert!(matches!(
        write(
            &d.join("r.db"),
            SchemaVersion::V18,
            &[(relative.clone(), sample_events())]
        ),
        Err(SqliteError::UnrepresentableHeader { .. })
    ));
    write(
        &d.join("r15.db"),
        SchemaVersion::V15,
        &[(relative, sample_events())],
    )
    .unwrap();

    let mut gap = sample_events();
    gap.remove(2);
    let err = write(&d.join("g.db"), SchemaVersion::V18, &[(header("g"), gap)]).unwrap_err();
    assert!(
        matches!(
            &err,
            SqliteError::UnrepresentableEvent {
                index: 2,
                seq: 3,
                ..
            }
        ),
        "{err:?}"
    );
    let mut bad_json = sample_events();
    bad_json[2].data = "{oops".into();
    assert!(matches!(
        write(
            &d.join("j.db"),
            SchemaVersion::V15,
            &[(header("j"), bad_json)]
        ),
        Err(SqliteError::UnrepresentableEvent { index: 2, .. })
    ));
    let mut late = sample_events();
    late[0].time = i64::MAX;
    assert!(matches!(
        write(&d.join("t.db"), SchemaVersion::V17, &[(header("t"), late)]),
        Err(SqliteError::UnrepresentableEvent { index: 0, .. })
    ));
    assert!(matches!(
        write(
            &d.join("dup.db"),
            SchemaVersion::V18,
            &[
                (header("d"), sample_events()),
                (header("d"), sample_events())
            ]
        ),
        Err(SqliteError::DuplicateSession { .. })
    ));

    // A session without events gets no row (dsh materializes on the first event).
    let report = write(
        &d.join("empty.db"),
        SchemaVersion::V18,
        &[(header("e"), vec![]), (header("f"), sample_events())],
    )
    .unwrap();
    assert_eq!(report.skipped_empty, ["e"]);
    let back = sqlite::read(&d.join("empty.db"), &ReadOptions::default()).unwrap();
    assert_eq!(back.sessions.len(), 1);

    // Refusals leave nothing behind: no target, no temporary file, no journal.
    let mut names: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["empty.db", "existing.db", "notes.txt", "r15.db"]);
}

#[cfg(unix)]
#[test]
fn exported_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    for version in SchemaVersion::ALL {
        let p = dir.path().join(format!("m{version}.db"));
        write(&p, version, &[(header("a"), sample_events())]).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}

/// dsh's normalized canonical schema rows (persistence spec §5.3) for 17/18, and the tables
/// 15 creates.
fn normalized_spec_sql(version: SchemaVersion, table: &str) -> String {
    let owner = if version.has_owner() {
        " owner TEXT,"
    } else {
        ""
    };
    match (version, table) {
        (SchemaVersion::V15, "events") => "CREATE TABLE events ( session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, seq INTEGER NOT NULL, type TEXT NOT NULL, time INTEGER NOT NULL, data TEXT NOT NULL, source_event_seqs TEXT, surface_op TEXT, ignorable INTEGER, PRIMARY KEY (session_id, seq) ) STRICT".into(),
        (_, "events") => "CREATE TABLE events ( session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, seq INTEGER NOT NULL, type TEXT NOT NULL, time INTEGER NOT NULL, data ANY NOT NULL, source_event_seqs ANY, surface_op TEXT, ignorable INTEGER CHECK (ignorable IS NULL OR ignorable IN (0, 1)), PRIMARY KEY (session_id, seq) ) STRICT".into(),
        (_, "persistence_state") => "CREATE TABLE persistence_state ( singleton INTEGER PRIMARY KEY CHECK (singleton = 1), store_id TEXT NOT NULL ) STRICT".into(),
        (_, _) => format!("CREATE TABLE sessions ( id TEXT PRIMARY KEY, version INTEGER NOT NULL, created_at INTEGER NOT NULL, cwd TEXT, parent_session TEXT, seed_length INTEGER, origin TEXT, delegation_depth INTEGER, agent_preset TEXT,{owner} incarnation TEXT NOT NULL, revision INTEGER NOT NULL ) STRICT"),
    }
}

/// A second, independent reader (CPython's sqlite3) checks the identity, pragmas, schema text
/// and integrity of every file we write; the raw DDL text is also compared with a file dsh
/// wrote when the fixtures are present.
#[test]
fn python_second_reader_checks_every_written_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for version in SchemaVersion::ALL {
        let p = dir.path().join(format!("py{version}.db"));
        let mut sessions = vec![
            (header("a"), sample_events()),
            (header("b"), sample_events()),
        ];
        if version.has_owner() {
            sessions[1].0.owner = Some("bob".into());
        }
        write(&p, version, &sessions).unwrap();
        paths.push((version, p));
    }
    let args: Vec<&str> = paths.iter().map(|(_, p)| p.to_str().unwrap()).collect();
    let Some(out) = python(PYTHON_CHECK, &args) else {
        return;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Json = serde_json::from_slice(&out.stdout).unwrap();
    let fx = fixtures();
    for (version, path) in &paths {
        let r = &report[path.to_str().unwrap()];
        assert_eq!(r["application_id"], 1_146_308_688);
        assert_eq!(r["user_version"], version.user_version());
        assert_eq!(r["journal_mode"], "delete");
        assert_eq!(r["page_size"], 4096);
        assert_eq!(r["encoding"], "UTF-8");
        assert_eq!(r["auto_vacuum"], 0);
        assert_eq!(r["integrity"], "ok");
        assert_eq!(r["foreign_key_violations"], 0);
        assert_eq!(r["sessions"], 2);
        let ids = r["store_ids"].as_array().unwrap();
        assert_eq!(ids.len(), 1);
        assert!(schema::is_uuid(ids[0].as_str().unwrap()));
        let objects = r["schema"].as_array().unwrap();
        let names: Vec<(&str, &str)> = objects
            .iter()
            .map(|o| (o[0].as_str().unwrap(), o[1].as_str().unwrap()))
            .collect();
        assert_eq!(
            names,
            [
                ("table", "persistence_state"),
                ("table", "sessions"),
                ("index", "sqlite_autoindex_sessions_1"),
                ("table", "events"),
                ("index", "sqlite_autoindex_events_1"),
            ],
            "{version}: no other schema objects"
        );
        for o in objects.iter().filter(|o| o[0] == "table") {
            let name = o[1].as_str().unwrap();
            let sql = o[3].as_str().unwrap();
            assert_eq!(
                schema::normalize_sql(sql),
                normalized_spec_sql(*version, name),
                "{version} {name}"
            );
            if let Some(fx) = &fx {
                let dir = format!("sqlite{version}");
                let (_, theirs) = &written_dbs(fx, &dir)[0];
                let dsh_sql: String = open_ro(theirs)
                    .query_row(
                        "SELECT sql FROM sqlite_master WHERE name = ?1",
                        [name],
                        |r| r.get(0),
                    )
                    .unwrap();
                assert_eq!(sql, dsh_sql, "{version} {name}: byte-identical DDL text");
            }
        }
    }
}

/// Every JSONL fixture dsh loads, taken to each SQLite version and back, gives the same
/// events (packing layout aside). Events keep the exact `data` text of their line and the row
/// boundaries of the file's packed rows, which the SQLite codec keeps or re-splits.
#[test]
fn jsonl_fixture_events_round_trip_through_every_version() {
    let Some(fx) = fixtures() else { return };
    let index = std::fs::read_to_string(fx.join("dsh-expected/INDEX.tsv")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (mut checked, mut packed_rows) = (0, 0);
    for line in index.lines().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        if cols[1] != "ok" {
            continue;
        }
        let base = cols[0].trim_end_matches(".jsonl");
        let (jh, _) = jsonl_events(&fx, base);
        let count = expected(&fx, base)["event_count"].as_u64().unwrap() as usize;
        let mut events = exact_jsonl_events(&fx, base);
        events.truncate(count);
        let mut h = SessionHeader::new(
            jh["id"].as_str().unwrap(),
            jh["createdAt"].as_u64().unwrap(),
        );
        h.cwd = jh["cwd"].as_str().map(str::to_owned);
        h.parent_session = jh["parentSession"].as_str().map(str::to_owned);
        h.origin = jh["origin"].as_str().map(str::to_owned);
        h.delegation_depth = jh["delegationDepth"].as_u64();
        h.seed_length = jh["seedLength"].as_u64();
        h.agent_preset = jh["agentPreset"].as_str().map(str::to_owned);
        for version in SchemaVersion::ALL {
            let p = dir.path().join(format!("{base}-{version}.db"));
            let report = write(&p, version, &[(h.clone(), events.clone())])
                .unwrap_or_else(|e| panic!("{base}: {e}"));
            packed_rows += report.packed_rows;
            let back = sqlite::read(&p, &ReadOptions::default()).unwrap();
            if events.is_empty() {
                assert!(back.sessions.is_empty());
                continue;
            }
            assert_eq!(back.sessions[0].header, h, "{base}");
            same_events(&events, &back.sessions[0].events);
            std::fs::remove_file(&p).unwrap();
        }
        checked += 1;
    }
    assert_eq!(checked, 82);
    // 103 packed rows per 17/18 file set (see the dsh-written fixtures).
    assert_eq!(packed_rows, 2 * 103);
}

/// The events of a JSONL fixture with each `data` as the exact text of its line, packed rows
/// expanded by the JSONL codec (members keep their row as `RowStart`/`RowMember`), other lines
/// `Scalar`.
fn exact_jsonl_events(fx: &Path, base: &str) -> Vec<Event> {
    use sessionlog::event::Packing;
    use sessionlog::interop::chunk_rows::{ChunkKind, decode_jsonl_record};
    use sessionlog::json::{JsonLimits, parse, raw_member};
    let text = substitute(
        &std::fs::read_to_string(fx.join(format!("dsh-sessions/{base}.jsonl"))).unwrap(),
        base,
    );
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()).skip(1) {
        let value = parse(line, &JsonLimits::default()).unwrap();
        let obj = value.as_object().unwrap();
        let kind = obj.get("type").and_then(|t| t.as_str()).unwrap();
        if let Some(chunk) = ChunkKind::from_tag(kind) {
            out.extend(decode_jsonl_record(chunk, obj).unwrap());
            continue;
        }
        let Some(seq) = obj.get("seq").and_then(|s| s.as_u64()) else {
            break; // a projected record without seq: dsh stops there
        };
        let data = raw_member(line, &["data"]).unwrap().unwrap();
        let mut e = Event::new(kind, seq, obj.get("time").unwrap().as_i64().unwrap(), data);
        e.source_event_seqs = obj.get("sourceEventSeqs").map(|s| {
            s.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect()
        });
        e.surface_op = obj.get("surfaceOp").map(|op| match op.as_str() {
            Some(_) => SurfaceOp::Append,
            None => SurfaceOp::Replace {
                start: op.get("start").unwrap().as_u64().unwrap(),
                end: op.get("end").unwrap().as_u64().unwrap(),
            },
        });
        e.ignorable = obj.get("ignorable").is_some();
        e.layout.packing = Packing::Scalar;
        out.push(e);
    }
    out
}

/// §9.1: dsh's `oneTurnLog()` with `meta(id, cwd)` round-trips through every version; the
/// stored columns are dsh's encodings (`surface_op` is the 8-byte JSON string `"append"`).
#[test]
fn one_turn_log_contract() {
    use sessionlog::json::raw_member;
    const LINES: [&str; 6] = [
        r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#,
        r#"{"type":"user/message","seq":1,"time":2,"data":{"id":"one-turn-user","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}"#,
        r#"{"type":"step/start","seq":2,"time":3,"data":{"turn":1,"step":1}}"#,
        r#"{"type":"assistant/message","seq":3,"time":4,"data":{"turn":1,"step":1,"message":{"id":"one-turn-assistant","role":"assistant","content":[{"type":"text","text":"hello"}],"source":{"kind":"model","provider":"mock","model":"mock"}}},"surfaceOp":"append"}"#,
        r#"{"type":"step/end","seq":4,"time":5,"data":{"turn":1,"step":1}}"#,
        r#"{"type":"turn/end","seq":5,"time":6,"data":{"turn":1,"reason":{"kind":"completed"}}}"#,
    ];
    let events: Vec<Event> = LINES
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let j: Json = serde_json::from_str(line).unwrap();
            let e = Event::new(
                j["type"].as_str().unwrap(),
                i as u64,
                j["time"].as_i64().unwrap(),
                raw_member(line, &["data"]).unwrap().unwrap(),
            );
            if j.get("surfaceOp").is_some() {
                e.with_surface_op(SurfaceOp::Append)
            } else {
                e
            }
        })
        .collect();
    let mut meta = SessionHeader::new("one-turn", 1000);
    meta.cwd = Some("/work".into());
    let dir = tempfile::tempdir().unwrap();
    for version in SchemaVersion::ALL {
        let p = dir.path().join(format!("one-{version}.db"));
        write(&p, version, &[(meta.clone(), events.clone())]).unwrap();
        let conn = open_ro(&p);
        let (op, len, data): (String, i64, String) = conn
            .query_row(
                "SELECT surface_op, length(surface_op), data FROM events WHERE seq = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!((op.as_str(), len), ("\"append\"", 8));
        assert_eq!(data, events[1].data);
        let (created, delegation): (i64, Option<i64>) = conn
            .query_row(
                "SELECT created_at, delegation_depth FROM sessions",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(
            (created, delegation),
            (1000, None),
            "absent fields are NULL"
        );
        let back = sqlite::read_session(&p, "one-turn", &ReadOptions::default()).unwrap();
        assert_eq!(back.header, meta);
        same_events(&events, &back.events);
        for (e, line) in back.events.iter().zip(LINES) {
            let j: Json = serde_json::from_str(line).unwrap();
            assert_eq!(event_json(e), j);
        }
    }
}
