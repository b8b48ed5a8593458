//! Malformed inputs to `interop::import` and refusals of `interop::export`: each is a clear
//! error naming the file and the line/row, and leaves the store unchanged (sessions and
//! segment bytes compared before and after). Also: torn tails are cut and reported, sources
//! are never modified, and session ids cannot escape an export directory.

use std::path::{Path, PathBuf};

use sessionlog::event::{Event, SessionHeader, SurfaceOp};
use sessionlog::interop::export::{
    self, ExportError, ExportFormat, ExportLayout, export_jsonl_file,
};
use sessionlog::interop::import::{CutAt, FileImportError, ImportOptions, import_paths};
use sessionlog::interop::jsonl::{self, Compression};
use sessionlog::interop::sqlite::{self, SchemaVersion, SqliteError};
use sessionlog::store::{Config, SessionInfo, Store};

const HEADER: &str = r#"{"type":"session","version":0,"id":"s1","createdAt":1000,"cwd":"/work","delegationDepth":0}"#;
const TURN_START: &str = r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#;
const USER: &str = r#"{"type":"user/message","seq":1,"time":2,"data":{"id":"u1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}"#;
const TURN_END: &str =
    r#"{"type":"turn/end","seq":2,"time":3,"data":{"turn":1,"reason":{"kind":"completed"}}}"#;

fn lines(ls: &[&str]) -> String {
    let mut s = ls.join("\n");
    s.push('\n');
    s
}

fn one_turn() -> String {
    lines(&[HEADER, TURN_START, USER, TURN_END])
}

fn one_turn_events() -> Vec<Event> {
    vec![
        Event::new("turn/start", 0, 1, r#"{"turn":1}"#),
        Event::new(
            "user/message",
            1,
            2,
            r#"{"id":"u1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}"#,
        )
        .with_surface_op(SurfaceOp::Append),
        Event::new(
            "turn/end",
            2,
            3,
            r#"{"turn":1,"reason":{"kind":"completed"}}"#,
        ),
    ]
}

/// A store that already holds a session `existing`, so "unchanged" is not trivially "empty".
fn store(dir: &Path) -> Store {
    let store = Store::open(dir.join("store"), Config::default()).unwrap();
    let mut h = SessionHeader::new("existing", 5);
    h.cwd = Some("/work".into());
    store.import_session(h, one_turn_events(), None).unwrap();
    store
}

/// The store's sessions and the bytes of every segment file.
fn snapshot(store: &Store) -> (Vec<SessionInfo>, Vec<(PathBuf, Vec<u8>)>) {
    store.flush().unwrap();
    let mut segs: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(store.dir().join("segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    segs.sort();
    (store.sessions(), segs)
}

/// Imports `bytes` written to `name`; asserts it fails, leaves the store and the file
/// unchanged, and that the message names the file and contains every `needles`.
fn refused(name: &str, bytes: &[u8], needles: &[&str]) -> FileImportError {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let path = tmp.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    refused_path(&store, &path, needles)
}

fn refused_path(store: &Store, path: &Path, needles: &[&str]) -> FileImportError {
    let source = std::fs::read(path).unwrap();
    let before = snapshot(store);
    let err = import_paths(
        store,
        &[path.to_owned()],
        &ImportOptions::default(),
        &mut |_| {},
    )
    .expect_err("must be refused");
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()),
        "names the file: {msg}"
    );
    for n in needles {
        assert!(msg.contains(n), "{n:?} not in: {msg}");
    }
    assert_eq!(snapshot(store), before, "store changed by: {msg}");
    assert_eq!(std::fs::read(path).unwrap(), source, "source modified");
    err
}

fn zstd_frame(text: &str) -> Vec<u8> {
    use std::io::Write;
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    enc.include_checksum(true).unwrap();
    enc.write_all(text.as_bytes()).unwrap();
    enc.finish().unwrap()
}

fn one_turn_zstd() -> (Vec<u8>, usize) {
    let mut file = zstd_frame(&lines(&[HEADER]));
    let header_len = file.len();
    file.extend(zstd_frame(&lines(&[TURN_START, USER, TURN_END])));
    (file, header_len)
}

#[test]
fn truncated_zstd_frames() {
    let (file, header_len) = one_turn_zstd();
    // Only part of the header frame: no complete frame at all.
    let e = refused(
        "a.jsonl.zstd",
        &file[..header_len - 3],
        &["empty or header-less Zstandard session log"],
    );
    assert!(matches!(e, FileImportError::Jsonl { .. }), "{e:?}");
    // A complete frame that fails its checksum, followed by another frame.
    let mut bad = file.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0xFF;
    bad.extend(zstd_frame(&lines(&[
        r#"{"type":"turn/start","seq":3,"time":4,"data":{"turn":2}}"#,
    ])));
    refused(
        "b.jsonl.zstd",
        &bad,
        &["frame at byte", "failed validation"],
    );
    // A truncated final frame is a torn tail: the complete frames import, the cut is reported.
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let path = tmp.path().join("c.jsonl.zstd");
    let mut torn = file.clone();
    torn.extend(
        &zstd_frame(&lines(&[
            r#"{"type":"turn/start","seq":3,"time":4,"data":{"turn":2}}"#,
        ]))[..10],
    );
    std::fs::write(&path, &torn).unwrap();
    let report = import_paths(
        &store,
        std::slice::from_ref(&path),
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(store.len("s1"), Some(3));
    let cut = report.sessions[0].cut.as_ref().unwrap();
    assert_eq!(cut.file, path);
    assert!(matches!(cut.at, CutAt::Line { line: 5, .. }), "{cut}");
    assert!(
        cut.to_string().contains("incomplete final Zstandard frame"),
        "{cut}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), torn, "source modified");
    // Exported again: the file without the torn frame.
    let out = tmp.path().join("again.jsonl.zstd");
    export_jsonl_file(&store, "s1", &out, Compression::Zstd).unwrap();
    assert_eq!(
        zstd::decode_all(&std::fs::read(&out).unwrap()[..]).unwrap(),
        zstd::decode_all(&file[..]).unwrap()
    );
}

#[test]
fn garbage_line_before_a_turn_end_is_committed_corruption() {
    let text = lines(&[HEADER, TURN_START, "{not json", USER, TURN_END]);
    let e = refused(
        "g.jsonl",
        text.as_bytes(),
        &["unparsable committed event", "file line 3", "restore"],
    );
    assert!(matches!(
        e,
        FileImportError::Jsonl {
            source: jsonl::JsonlReadError::CommittedCorruption { file_line: 3, .. },
            ..
        }
    ));
    // Without a later turn/end it is a torn tail: cut and reported.
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let path = tmp.path().join("t.jsonl");
    let text = lines(&[HEADER, TURN_START, "{not json", USER]);
    std::fs::write(&path, &text).unwrap();
    let report = import_paths(
        &store,
        std::slice::from_ref(&path),
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(store.len("s1"), Some(1));
    let cut = report.sessions[0].cut.clone().unwrap();
    let shown = cut.to_string();
    assert!(shown.contains(&path.display().to_string()), "{shown}");
    assert!(shown.contains("line 3"), "{shown}");
    assert!(shown.contains("unparsable committed event"), "{shown}");
    assert_eq!(
        cut.at,
        CutAt::Line {
            line: 3,
            bytes: (text.len() - HEADER.len() - TURN_START.len() - 2) as u64
        }
    );
}

#[test]
fn header_with_an_unknown_version_is_refused_with_dshs_words() {
    let header = HEADER.replace(r#""version":0"#, r#""version":42"#);
    refused(
        "v.jsonl",
        lines(&[&header, TURN_START]).as_bytes(),
        &["uses log format v42", "upgrade the harness", "raw log:"],
    );
    // A replay fixture is refused unless asked for.
    let projected = lines(&[
        HEADER,
        r#"{"type":"turn/start","data":{"turn":1}}"#,
        r#"{"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#,
    ]);
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let path = tmp.path().join("p.jsonl");
    std::fs::write(&path, &projected).unwrap();
    refused_path(&store, &path, &["seq gap in committed region"]);
    let options = ImportOptions {
        replay_fixture: true,
        ..ImportOptions::default()
    };
    import_paths(&store, &[path], &options, &mut |_| {}).unwrap();
    assert_eq!(store.len("s1"), Some(2));
}

#[test]
fn unknown_event_type_and_surface_errors_name_the_line() {
    let unknown = r#"{"type":"future/thing","seq":1,"time":2,"data":{}}"#;
    refused(
        "u.jsonl",
        lines(&[HEADER, TURN_START, unknown]).as_bytes(),
        &["future/thing", "not marked ignorable"],
    );
    // A surface event without surfaceOp: dsh's loader refuses it.
    let no_op = USER.replace(r#","surfaceOp":"append""#, "");
    let e = refused(
        "s.jsonl",
        lines(&[HEADER, TURN_START, &no_op, TURN_END]).as_bytes(),
        &["s1"],
    );
    let msg = e.to_string();
    assert!(msg.contains("line 3"), "{msg}");
}

fn sqlite_file(dir: &Path, version: SchemaVersion) -> PathBuf {
    let path = dir.join(format!("v{version}.db"));
    let mut h = SessionHeader::new("s1", 1000);
    h.cwd = Some("/work".into());
    let events = one_turn_events();
    sqlite::write(
        &path,
        version,
        [(&h, events.as_slice())],
        &sqlite::WriteOptions::default(),
    )
    .unwrap();
    path
}

fn set_pragma(path: &Path, pragma: &str, value: i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, pragma, value).unwrap();
}

#[test]
fn sqlite_with_a_foreign_application_id_or_user_version_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let app = sqlite_file(tmp.path(), SchemaVersion::V18);
    set_pragma(&app, "application_id", 12345);
    let e = refused_path(
        &store,
        &app,
        &["application id 12345", "another application"],
    );
    assert!(matches!(
        e,
        FileImportError::Sqlite(SqliteError::ForeignApplicationId { found: 12345, .. })
    ));
    let uv = sqlite_file(tmp.path(), SchemaVersion::V17);
    set_pragma(&uv, "user_version", 16);
    let e = refused_path(
        &store,
        &uv,
        &["schema version 16", "export the sessions to JSONL"],
    );
    assert!(matches!(
        e,
        FileImportError::Sqlite(SqliteError::IncompatibleVersion { found: 16, .. })
    ));
    // Not a session file at all.
    let junk = tmp.path().join("junk.db");
    std::fs::write(&junk, b"hello world, not a database").unwrap();
    let e = refused_path(&store, &junk, &["not a dsh session file"]);
    assert!(matches!(e, FileImportError::NotASessionFile { .. }));
}

#[test]
fn a_torn_sqlite_row_is_cut_and_reported_with_its_seq() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let path = sqlite_file(tmp.path(), SchemaVersion::V15);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "INSERT INTO events (session_id, seq, type, time, data) VALUES ('s1', 3, 'assistant/chunk', 99, '{not valid json')",
            [],
        )
        .unwrap();
    }
    let source = std::fs::read(&path).unwrap();
    let report = import_paths(
        &store,
        std::slice::from_ref(&path),
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(store.len("s1"), Some(3));
    let cut = report.sessions[0].cut.clone().unwrap();
    assert_eq!(cut.at, CutAt::Row { seq: 3, rows: 1 });
    assert!(cut.to_string().contains("seq 3"), "{cut}");
    assert_eq!(std::fs::read(&path).unwrap(), source, "source modified");
}

#[test]
fn all_or_nothing_across_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let good = tmp.path().join("good.jsonl");
    std::fs::write(&good, one_turn()).unwrap();
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        lines(&[&HEADER.replace("\"s1\"", "\"s2\""), "{not json", TURN_END]),
    )
    .unwrap();
    let dup = tmp.path().join("dup.jsonl");
    std::fs::write(&dup, one_turn()).unwrap();
    let exists = tmp.path().join("exists.jsonl");
    std::fs::write(&exists, one_turn().replace("\"s1\"", "\"existing\"")).unwrap();
    let before = snapshot(&store);
    let err = import_paths(
        &store,
        &[good.clone(), bad.clone(), dup.clone(), exists.clone()],
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap_err();
    let FileImportError::Rejected { errors } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(errors.len(), 3, "{err}");
    let msg = err.to_string();
    for n in [
        "nothing was imported",
        "bad.jsonl",
        "unparsable committed event",
        "in both",
        "dup.jsonl",
        "already exists",
        "--skip-existing",
    ] {
        assert!(msg.contains(n), "{n:?} not in {msg}");
    }
    assert_eq!(snapshot(&store), before);
    // Without the bad and duplicate files, --skip-existing imports the rest.
    let options = ImportOptions {
        skip_existing: true,
        ..ImportOptions::default()
    };
    let report = import_paths(&store, &[good, exists.clone()], &options, &mut |_| {}).unwrap();
    assert_eq!(report.sessions.len(), 1);
    assert_eq!(report.skipped, vec![("existing".to_owned(), exists)]);
    assert_eq!(store.len("s1"), Some(3));
}

#[test]
fn directories_are_searched_in_dsh_layout_and_any_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("store"), Config::default()).unwrap();
    let root = tmp.path().join("root");
    let put = |rel: &str, bytes: &[u8]| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    };
    put("--work--/s1/session.jsonl", one_turn().as_bytes());
    let h2 = HEADER.replace("\"s1\"", "\"s2\"");
    let mut zfile = zstd_frame(&lines(&[&h2]));
    zfile.extend(zstd_frame(&lines(&[TURN_START, USER, TURN_END])));
    put("--work--/s2/session.jsonl.zstd", &zfile);
    put(
        "elsewhere/deep/x.sqlite",
        &std::fs::read(sqlite_file(tmp.path(), SchemaVersion::V15)).unwrap(),
    );
    // Ignored: temp files, SQLite side files, other names.
    put("--work--/s1/session.jsonl.abc123.tmp", b"partial");
    put("notes.txt", b"hello");
    // The SQLite file holds "s1" too: refused as a duplicate, nothing imported.
    let err = import_paths(
        &store,
        std::slice::from_ref(&root),
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("in both"), "{err}");
    assert!(store.sessions().is_empty());
    std::fs::remove_file(root.join("elsewhere/deep/x.sqlite")).unwrap();
    let report = import_paths(&store, &[root], &ImportOptions::default(), &mut |_| {}).unwrap();
    let ids: Vec<&str> = report.sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["s1", "s2"]);
    // The zstd file's frames are kept as batches.
    let events: Vec<Event> = store
        .events("s2", 0..3)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert!(events[0].layout.batch_start);
    assert!(!events[1].layout.batch_start);
    // An empty directory is an error.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let err = import_paths(&store, &[empty], &ImportOptions::default(), &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("no session files found"), "{err}");
}

#[test]
fn session_ids_cannot_escape_the_export_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("store"), Config::default()).unwrap();
    let evil = ["../../escape", "/etc/passwd", "..", ".", "a\\..\\b", "ok"];
    for id in evil {
        let mut h = SessionHeader::new(id, 1);
        if id == "ok" {
            h.cwd = Some("/../..".into());
        }
        store.import_session(h, one_turn_events(), None).unwrap();
    }
    let before = snapshot(&store);
    let out = tmp.path().join("export");
    let report = export::export(
        &store,
        &[],
        &out,
        ExportFormat::Jsonl,
        ExportLayout::Tree,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(report.sessions, evil.len());
    let out_abs = out.canonicalize().unwrap();
    for f in &report.files {
        let f = f.canonicalize().unwrap();
        assert!(f.starts_with(&out_abs), "{} escapes", f.display());
        assert_eq!(f.components().count(), out_abs.components().count() + 3);
    }
    let names: Vec<String> = report
        .files
        .iter()
        .map(|f| f.strip_prefix(&out).unwrap().display().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "_no-cwd/..~002F..~002Fescape/session.jsonl",
            "_no-cwd/~002Fetc~002Fpasswd/session.jsonl",
            "_no-cwd/~002E~002E/session.jsonl",
            "_no-cwd/~002E/session.jsonl",
            "_no-cwd/a~005C..~005Cb/session.jsonl",
            "--..-..--/ok/session.jsonl",
        ]
    );
    // Nothing else was created next to the export directory.
    let mut siblings: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    siblings.sort();
    assert_eq!(siblings, ["export", "store"]);
    // Each file reads back as its session.
    let back = jsonl::read(
        &std::fs::read(&report.files[0]).unwrap(),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(back.header.id, "../../escape");
    assert_eq!(snapshot(&store), before);
    // Exporting again refuses to overwrite.
    let again = export::export(
        &store,
        &[],
        &out,
        ExportFormat::Jsonl,
        ExportLayout::Tree,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(matches!(again, ExportError::TargetExists { .. }), "{again}");
}

#[test]
fn export_refusals() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("store"), Config::default()).unwrap();
    let mut h = SessionHeader::new("owned", 1);
    h.cwd = Some("/work".into());
    h.owner = Some("alice".into());
    store.import_session(h, one_turn_events(), None).unwrap();
    let run = |format, out: &Path, ids: &[&str]| {
        let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        export::export(&store, &ids, out, format, ExportLayout::File, &mut |_| {})
    };
    // owner at 15 and 17 names schema 18.
    for v in [SchemaVersion::V15, SchemaVersion::V17] {
        let out = tmp.path().join(format!("o{v}.db"));
        let e = run(ExportFormat::Sqlite(v), &out, &[]).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("owner") && msg.contains("schema 18"), "{msg}");
        assert!(!out.exists());
    }
    // 18 holds it.
    let db = tmp.path().join("o18.db");
    run(ExportFormat::Sqlite(SchemaVersion::V18), &db, &[]).unwrap();
    let back = sqlite::read(&db, &Default::default()).unwrap();
    assert_eq!(back.sessions[0].header.owner.as_deref(), Some("alice"));
    // An existing SQLite target is refused and left alone.
    let bytes = std::fs::read(&db).unwrap();
    let e = run(ExportFormat::Sqlite(SchemaVersion::V18), &db, &[]).unwrap_err();
    assert!(matches!(e, ExportError::TargetExists { .. }), "{e}");
    assert_eq!(std::fs::read(&db).unwrap(), bytes);
    // So is an existing JSONL file.
    let j = tmp.path().join("x.jsonl");
    std::fs::write(&j, b"keep").unwrap();
    let e = run(ExportFormat::Jsonl, &j, &["owned"]).unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
    assert_eq!(std::fs::read(&j).unwrap(), b"keep");
    // Unknown sessions.
    let e = run(ExportFormat::Jsonl, &tmp.path().join("n.jsonl"), &["nope"]).unwrap_err();
    assert!(matches!(e, ExportError::NoSuchSession(_)), "{e}");
    // A chunk-tag typed event cannot be JSONL; nothing is left behind.
    let mut ev = one_turn_events();
    let mut tagged = Event::new("text-chunks", 3, 4, "{}");
    tagged.ignorable = true;
    ev.push(tagged);
    store
        .import_session(SessionHeader::new("tagged", 1), ev, None)
        .unwrap();
    let out = tmp.path().join("tagged.jsonl");
    let e = run(ExportFormat::Jsonl, &out, &["tagged"]).unwrap_err();
    assert!(e.to_string().contains("packed chunk row tag"), "{e}");
    assert!(!out.exists());
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn sqlite_write_each_loads_sessions_one_at_a_time_and_fails_cleanly() {
    use std::borrow::Cow;
    let tmp = tempfile::tempdir().unwrap();
    let headers: Vec<SessionHeader> = (0..3)
        .map(|i| {
            let mut h = SessionHeader::new(format!("s{i}"), 1);
            h.cwd = Some("/work".into());
            h
        })
        .collect();
    // Loaded in order: once to build, once to verify; an empty session is skipped.
    let mut calls = Vec::new();
    let out = tmp.path().join("a.db");
    let report = sqlite::write_each(
        &out,
        SchemaVersion::V17,
        &headers,
        &sqlite::WriteOptions::default(),
        |h: &SessionHeader| {
            calls.push(h.id.clone());
            let events = if h.id == "s1" {
                Vec::new()
            } else {
                one_turn_events()
            };
            Ok::<_, SqliteError>(Cow::Owned(events))
        },
    )
    .unwrap();
    assert_eq!(calls, ["s0", "s1", "s2", "s0", "s2"]);
    assert_eq!(report.sessions, 2);
    assert_eq!(report.skipped_empty, ["s1"]);
    let back = sqlite::read(&out, &Default::default()).unwrap();
    assert_eq!(back.sessions.len(), 2);
    // A loader error is returned as is and nothing is published.
    let out = tmp.path().join("b.db");
    let err = sqlite::write_each(
        &out,
        SchemaVersion::V18,
        &headers,
        &sqlite::WriteOptions::default(),
        |h: &SessionHeader| {
            if h.id == "s2" {
                Err(ExportError::NoSuchSession(h.id.clone()))
            } else {
                Ok(Cow::Owned(one_turn_events()))
            }
        },
    )
    .unwrap_err();
    assert!(matches!(err, ExportError::NoSuchSession(ref id) if id == "s2"));
    assert!(!out.exists());
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["a.db"], "no temporary file left");
}

#[test]
fn formats_are_detected_from_content_not_names() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("store"), Config::default()).unwrap();
    // A zstd log named .jsonl, a SQLite database named .jsonl.zstd, a plain log named .db.
    let (z, _) = one_turn_zstd();
    let a = tmp.path().join("a.jsonl");
    std::fs::write(&a, &z).unwrap();
    let db = sqlite_file(tmp.path(), SchemaVersion::V18);
    let b = tmp.path().join("b.jsonl.zstd");
    std::fs::write(&b, std::fs::read(&db).unwrap()).unwrap();
    let c = tmp.path().join("c.db");
    std::fs::write(&c, one_turn().replace("\"s1\"", "\"s3\"")).unwrap();
    // b holds "s1" like a: import them into separate stores.
    let report = import_paths(&store, &[a, c], &ImportOptions::default(), &mut |_| {}).unwrap();
    let formats: Vec<&str> = report.sessions.iter().map(|s| s.format.as_str()).collect();
    assert_eq!(formats, ["jsonl-zstd", "jsonl"]);
    let other = Store::open(tmp.path().join("other"), Config::default()).unwrap();
    let report = import_paths(&other, &[b], &ImportOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(report.sessions[0].format, "sqlite18");
    assert_eq!(other.len("s1"), Some(3));
}

#[test]
fn sessions_beyond_the_hold_budget_are_read_again_for_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("store"), Config::default()).unwrap();
    let a = tmp.path().join("a.jsonl");
    std::fs::write(&a, one_turn()).unwrap();
    let b = sqlite_file(tmp.path(), SchemaVersion::V17);
    let c = tmp.path().join("c.jsonl");
    std::fs::write(&c, one_turn().replace("\"s1\"", "\"s3\"")).unwrap();
    let options = ImportOptions {
        hold_bytes: 0,
        ..ImportOptions::default()
    };
    // a and b both hold "s1": refused before anything is written, as with the default budget.
    let err = import_paths(&store, &[a.clone(), b], &options, &mut |_| {}).unwrap_err();
    assert!(matches!(err, FileImportError::Duplicate { .. }), "{err}");
    assert!(store.sessions().is_empty());
    let mut phases = Vec::new();
    let report = import_paths(&store, &[a, c], &options, &mut |p| {
        phases.push((p.phase, p.done, p.total, p.session.to_owned()))
    })
    .unwrap();
    assert_eq!(report.sessions.len(), 2);
    assert_eq!(store.len("s1"), Some(3));
    assert_eq!(store.len("s3"), Some(3));
    assert_eq!(
        phases,
        [
            ("checking", 1, 2, "s1".to_owned()),
            ("checking", 2, 2, "s3".to_owned()),
            ("importing", 1, 2, "s1".to_owned()),
            ("importing", 2, 2, "s3".to_owned()),
        ]
    );
}
