//! Round trips through the store with `interop::import` and `interop::export`:
//! - every fixture dsh's JSONL loader accepts: JSONL file → store → JSONL is byte-identical,
//!   and JSONL → store → SQLite 15/17/18 → store → JSONL is byte-identical too;
//! - every file dsh itself wrote (`dsh-written/`) imports with dsh's events, surface and
//!   messages; a `.jsonl.zstd` exports with the same decompressed text and frame boundaries;
//!   an SQLite file imported and exported at its version is row-identical.

use crate::common::jsonl_fixtures;
use crate::common::sqlite_fixtures;

use std::path::{Path, PathBuf};

use sessionlog::event::Event;
use sessionlog::interop::export::{self, ExportFormat, ExportLayout, export_jsonl_file};
use sessionlog::interop::import::{
    CutAt, FileImportError, ImportOptions, ImportReport, import_paths,
};
use sessionlog::interop::jsonl::{self, Compression, ReadOptions};
use sessionlog::interop::sqlite::SchemaVersion;
use sessionlog::json::{JsonLimits, parse, stringify};
use sessionlog::store::{Config, Durability, Store};

fn config() -> Config {
    Config::default().durability(Durability::Buffered)
}

/// A fixture dsh's JSONL loader accepts, written (after placeholder substitution) to a file.
struct Case {
    file: String,
    id: String,
    path: PathBuf,
    text: String,
}

fn jsonl_cases(fx: &Path, dir: &Path) -> Vec<Case> {
    jsonl_fixtures::index(fx)
        .into_iter()
        .filter(|v| v.jsonl_ok)
        .map(|v| {
            let text = jsonl_fixtures::fixture_text(fx, &v.file);
            let id = jsonl::read(text.as_bytes(), &ReadOptions::default())
                .unwrap_or_else(|e| panic!("{}: {e}", v.file))
                .header
                .id;
            let path = dir.join(&v.file);
            std::fs::write(&path, &text).unwrap();
            Case {
                file: v.file,
                id,
                path,
                text,
            }
        })
        .collect()
}

/// Splits cases into groups with unique session ids (some fixtures share an id).
fn groups<T>(items: Vec<T>, id: impl Fn(&T) -> &str) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = Vec::new();
    for item in items {
        match out
            .iter_mut()
            .find(|g| g.iter().all(|c| id(c) != id(&item)))
        {
            Some(g) => g.push(item),
            None => out.push(vec![item]),
        }
    }
    out
}

/// A session exported as JSONL into memory.
fn jsonl_bytes(store: &Store, id: &str, compression: Compression) -> Vec<u8> {
    let mut out = Vec::new();
    export::write_jsonl(store, id, compression, &mut out).unwrap();
    out
}

/// Imports `path` into the first store of `stores` that does not hold its session ids yet
/// (fixtures share ids), opening a new store when none fits.
fn import_somewhere<'a>(
    stores: &'a mut Vec<Store>,
    root: &Path,
    path: &Path,
) -> (&'a Store, ImportReport) {
    // (Indexing, not iterating: the returned borrow must not outlive the loop's.)
    #[allow(clippy::needless_range_loop)]
    for i in 0..stores.len() {
        match import_paths(
            &stores[i],
            &[path.to_owned()],
            &ImportOptions::default(),
            &mut |_| {},
        ) {
            Ok(report) => return (&stores[i], report),
            Err(FileImportError::Exists { .. }) => continue,
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
    let store = Store::open(root.join(format!("store-{}", stores.len())), config()).unwrap();
    let report = import_paths(
        &store,
        &[path.to_owned()],
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    stores.push(store);
    (stores.last().unwrap(), report)
}

/// The first differing line of two texts, for readable failures.
fn first_difference(a: &[u8], b: &[u8]) -> String {
    let (a, b) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!("line {}:\n  got  {x}\n  want {y}", i + 1);
        }
    }
    format!("{} lines vs {} lines", a.lines().count(), b.lines().count())
}

#[test]
fn jsonl_fixtures_round_trip_byte_identical_directly_and_through_every_sqlite_version() {
    let Some(fx) = jsonl_fixtures::fixtures_dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let cases = jsonl_cases(&fx, &src);
    assert!(cases.len() >= 70, "only {} fixtures", cases.len());
    let before: Vec<Vec<u8>> = cases
        .iter()
        .map(|c| std::fs::read(&c.path).unwrap())
        .collect();
    let total = cases.len();
    let mut checked = 0;
    let mut cuts = 0;
    for (g, group) in groups(cases, |c| c.id.as_str()).into_iter().enumerate() {
        let store = Store::open(tmp.path().join(format!("store-{g}")), config()).unwrap();
        let paths: Vec<PathBuf> = group.iter().map(|c| c.path.clone()).collect();
        let report = import_paths(&store, &paths, &ImportOptions::default(), &mut |_| {})
            .unwrap_or_else(|e| panic!("group {g}: {e}"));
        assert_eq!(report.sessions.len(), group.len());
        let mut group = group;
        for (s, case) in report.sessions.iter().zip(group.iter_mut()) {
            assert_eq!(s.file, case.path);
            assert!(s.non_canonical_lines.is_empty(), "{}", s.file.display());
            // A torn tail dsh tolerates is cut and reported; the export is the kept prefix.
            if let Some(cut) = &s.cut {
                let CutAt::Line { line, bytes } = cut.at else {
                    panic!("{cut}")
                };
                eprintln!("{cut}");
                assert!(line > 1 && bytes > 0, "{cut}");
                let keep = case.text.len() - bytes as usize;
                case.text.truncate(keep);
                cuts += 1;
            }
        }
        // JSONL → store → JSONL (in memory; the atomic file path is the same writer, checked
        // for the first case of each group).
        for (k, case) in group.iter().enumerate() {
            let bytes = if k == 0 {
                let out = tmp.path().join(format!("out-{g}-{}", case.file));
                let n = export_jsonl_file(&store, &case.id, &out, Compression::None).unwrap();
                assert_eq!(Some(n), store.len(&case.id));
                std::fs::read(&out).unwrap()
            } else {
                jsonl_bytes(&store, &case.id, Compression::None)
            };
            assert!(
                bytes == case.text.as_bytes(),
                "{}: JSONL export differs: {}",
                case.file,
                first_difference(&bytes, case.text.as_bytes())
            );
            // zstd: a header frame and one frame with every event (the plain file was one
            // batch), decompressing to the same text.
            let z = jsonl_bytes(&store, &case.id, Compression::Zstd);
            let (frames, torn) = jsonl::scan_zstd_frames(&z).unwrap();
            assert_eq!(torn, None);
            let expect_frames = if store.len(&case.id) == Some(0) { 1 } else { 2 };
            assert_eq!(frames.len(), expect_frames, "{}", case.file);
            assert_eq!(
                zstd::decode_all(&z[..]).unwrap(),
                case.text.as_bytes(),
                "{}",
                case.file
            );
        }
        // JSONL → store → SQLite v → store → JSONL.
        let ids: Vec<String> = group.iter().map(|c| c.id.clone()).collect();
        for (v, name) in [
            (SchemaVersion::V15, "sqlite15"),
            (SchemaVersion::V17, "sqlite17"),
            (SchemaVersion::V18, "sqlite18"),
        ] {
            let db = tmp.path().join(format!("group-{g}.{name}.db"));
            export::export(
                &store,
                &ids,
                &db,
                ExportFormat::Sqlite(v),
                ExportLayout::File,
                &mut |_| {},
            )
            .unwrap_or_else(|e| panic!("group {g} {name}: {e}"));
            let back = Store::open(tmp.path().join(format!("store-{g}-{name}")), config()).unwrap();
            import_paths(&back, &[db], &ImportOptions::default(), &mut |_| {})
                .unwrap_or_else(|e| panic!("group {g} {name}: {e}"));
            for case in &group {
                if store.len(&case.id) == Some(0) {
                    // dsh's SQLite holds no session without events.
                    assert_eq!(back.len(&case.id), None, "{} {name}", case.file);
                    continue;
                }
                let bytes = jsonl_bytes(&back, &case.id, Compression::None);
                assert!(
                    bytes == case.text.as_bytes(),
                    "{} through {name}: JSONL export differs: {}",
                    case.file,
                    first_difference(&bytes, case.text.as_bytes())
                );
            }
        }
        checked += group.len();
    }
    assert_eq!(checked, total);
    assert!(cuts <= 3, "{cuts} fixtures with torn tails");
    // Import never modifies its sources.
    let after: Vec<Vec<u8>> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let (mut a, mut b) = (before, after);
    a.sort();
    b.sort();
    assert_eq!(a, b);
}

/// Events without their layout (key order and packing differ between formats).
fn logical(events: &[Event]) -> Vec<Event> {
    events
        .iter()
        .cloned()
        .map(|mut e| {
            e.layout = Default::default();
            e
        })
        .collect()
}

/// A message as a JSON value (lone surrogates go through the crate's own JSON).
fn js(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|_| {
        serde_json::Value::String(stringify(&parse(text, &JsonLimits::default()).unwrap()))
    })
}

fn read_all(store: &Store, id: &str) -> Vec<Event> {
    let n = store.len(id).unwrap();
    store
        .events(id, 0..n)
        .unwrap()
        .map(|e| e.unwrap())
        .collect()
}

/// The decompressed text of each zstd frame.
fn frame_texts(bytes: &[u8]) -> Vec<Vec<u8>> {
    let (frames, torn) = jsonl::scan_zstd_frames(bytes).unwrap();
    assert_eq!(torn, None);
    frames
        .into_iter()
        .map(|r| zstd::decode_all(&bytes[r]).unwrap())
        .collect()
}

fn dsh_written(dir: &str) {
    let Some(fx) = jsonl_fixtures::fixtures_dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let written = fx.join("dsh-written").join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&written)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 70, "{dir}: {} files", files.len());
    let (mut sessions, mut empty) = (0, 0);
    let mut stores = Vec::new();
    for (i, path) in files.iter().enumerate() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let base = name
            .strip_suffix(".jsonl.zstd")
            .or_else(|| name.strip_suffix(".db"))
            .unwrap()
            .to_owned();
        let expected = jsonl_fixtures::expected(&fx, &format!("{base}.jsonl"));
        let (store, report) = import_somewhere(&mut stores, tmp.path(), path);
        if report.sessions.is_empty() {
            assert_eq!(expected["event_count"], 0, "{dir}/{name}");
            empty += 1;
            continue;
        }
        sessions += 1;
        assert_eq!(report.sessions.len(), 1, "{dir}/{name}");
        let s = &report.sessions[0];
        assert!(s.cut.is_none(), "{dir}/{name}: nothing to cut");
        let id = s.id.clone();
        let events = read_all(store, &id);
        assert_eq!(
            events.len() as u64,
            expected["event_count"].as_u64().unwrap(),
            "{dir}/{name}"
        );
        // The same events as the JSONL fixture dsh wrote this file from.
        let text = jsonl_fixtures::fixture_text(&fx, &format!("{base}.jsonl"));
        let source = jsonl::read(text.as_bytes(), &ReadOptions::default()).unwrap();
        assert_eq!(
            logical(&events),
            logical(&source.events),
            "{dir}/{name} events"
        );
        let surface: Vec<u64> = expected["surface"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(store.surface(&id).unwrap(), surface, "{dir}/{name} surface");
        assert_eq!(
            store.replace_generation(&id).unwrap(),
            expected["replaceGeneration"].as_u64().unwrap(),
            "{dir}/{name}"
        );
        let messages: Vec<serde_json::Value> = store
            .messages(&id)
            .unwrap()
            .iter()
            .map(|m| js(&m.json))
            .collect();
        assert_eq!(
            &messages,
            expected["messages"].as_array().unwrap(),
            "{dir}/{name} messages"
        );
        if dir == "jsonl-zstd" {
            // Exported back: the same decompressed text, frame by frame.
            let out = tmp.path().join(format!("{i}.jsonl.zstd"));
            export_jsonl_file(store, &id, &out, Compression::Zstd).unwrap();
            let ours = frame_texts(&std::fs::read(&out).unwrap());
            let theirs = frame_texts(&std::fs::read(path).unwrap());
            assert!(theirs.len() >= 2, "{name}: {} frames", theirs.len());
            assert_eq!(ours, theirs, "{dir}/{name} frames");
        }
    }
    assert!(sessions >= 70, "{dir}: {sessions} sessions");
    assert!(empty <= 7, "{dir}: {empty} files without a session");
}

#[test]
fn dsh_written_sqlite15_imports_as_dsh_expected() {
    dsh_written("sqlite15");
}

#[test]
fn dsh_written_sqlite17_imports_as_dsh_expected() {
    dsh_written("sqlite17");
}

#[test]
fn dsh_written_sqlite18_imports_as_dsh_expected() {
    dsh_written("sqlite18");
}

#[test]
fn dsh_written_jsonl_zstd_imports_as_dsh_expected_and_exports_the_same_frames() {
    dsh_written("jsonl-zstd");
}

/// dsh's database → store → database of the same version: the same rows, storage classes
/// and schema; only the random `store_id` and `incarnation` differ.
fn sqlite_row_identical(dir: &str, version: SchemaVersion) {
    let Some(fx) = sqlite_fixtures::fixtures() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut compared = 0;
    let mut stores = Vec::new();
    for (i, (base, path)) in sqlite_fixtures::written_dbs(&fx, dir)
        .into_iter()
        .enumerate()
    {
        let (store, report) = import_somewhere(&mut stores, tmp.path(), &path);
        if report.sessions.is_empty() {
            continue;
        }
        let out = tmp.path().join(format!("{i}.db"));
        export::export(
            store,
            &[report.sessions[0].id.clone()],
            &out,
            ExportFormat::Sqlite(version),
            ExportLayout::File,
            &mut |_| {},
        )
        .unwrap_or_else(|e| panic!("{dir}/{base}: {e}"));
        let (ours, theirs) = (
            sqlite_fixtures::open_ro(&out),
            sqlite_fixtures::open_ro(&path),
        );
        assert_eq!(
            sqlite_fixtures::dump_schema(&ours),
            sqlite_fixtures::dump_schema(&theirs),
            "{dir}/{base} schema"
        );
        for (table, skip) in [
            ("persistence_state", &["store_id"][..]),
            ("sessions", &["incarnation"][..]),
            ("events", &[][..]),
        ] {
            assert_eq!(
                sqlite_fixtures::dump_table(&ours, table, skip),
                sqlite_fixtures::dump_table(&theirs, table, skip),
                "{dir}/{base} table {table}"
            );
        }
        for pragma in ["application_id", "user_version"] {
            let get = |c: &rusqlite::Connection| -> i64 {
                c.pragma_query_value(None, pragma, |r| r.get(0)).unwrap()
            };
            assert_eq!(get(&ours), get(&theirs), "{dir}/{base} {pragma}");
        }
        compared += 1;
    }
    assert!(compared >= 70, "{dir}: {compared}");
}

#[test]
fn sqlite15_store_round_trip_is_row_identical() {
    sqlite_row_identical("sqlite15", SchemaVersion::V15);
}

#[test]
fn sqlite17_store_round_trip_is_row_identical() {
    sqlite_row_identical("sqlite17", SchemaVersion::V17);
}

#[test]
fn sqlite18_store_round_trip_is_row_identical() {
    sqlite_row_identical("sqlite18", SchemaVersion::V18);
}

/// A long session of engine-laid-out events (packing `Auto`, batches marked by `batch_start`)
/// streams out in pieces exactly as the one-shot JSONL writer lays it out: packed runs per
/// batch, one zstd frame per batch.
#[test]
fn long_sessions_stream_out_like_the_one_shot_writer() {
    use sessionlog::event::SessionHeader;
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("store"), config()).unwrap();
    let mut events = vec![Event::new("turn/start", 0, 0, r#"{"turn":1}"#)];
    let mut batches = Vec::new();
    let mut batch_len = 1usize;
    for step in 1..=3000u64 {
        let seq = events.len() as u64;
        let mut start = Event::new(
            "step/start",
            seq,
            seq as i64,
            format!(r#"{{"turn":1,"step":{step}}}"#),
        );
        // A new append batch every 1000 steps (about 5000 events: written in pieces).
        if step % 1000 == 0 {
            start.layout.batch_start = true;
            batches.push(batch_len);
            batch_len = 0;
        }
        events.push(start);
        for k in 0..(step % 7) {
            let seq = seq + 1 + k;
            events.push(Event::new(
                "assistant/chunk",
                seq,
                seq as i64,
                format!(
                    r#"{{"turn":1,"step":{step},"chunk":{{"type":"text-delta","index":0,"text":"t{k}"}}}}"#
                ),
            ));
        }
        let seq = events.len() as u64;
        events.push(Event::new(
            "step/end",
            seq,
            seq as i64,
            format!(r#"{{"turn":1,"step":{step}}}"#),
        ));
        batch_len += 2 + (step % 7) as usize;
    }
    let seq = events.len() as u64;
    events.push(Event::new(
        "turn/end",
        seq,
        seq as i64,
        r#"{"turn":1,"reason":{"kind":"completed"}}"#,
    ));
    batch_len += 1;
    batches.push(batch_len);
    assert!(events.len() > 2 * 4096, "{} events", events.len());
    assert_eq!(batches.iter().sum::<usize>(), events.len());
    let mut header = SessionHeader::new("long", 1);
    header.cwd = Some("/work".into());
    store
        .import_session(header.clone(), events.clone(), None)
        .unwrap();
    for compression in [Compression::None, Compression::Zstd] {
        let ours = jsonl_bytes(&store, "long", compression);
        let theirs = jsonl::write(
            &header,
            &events,
            &batches,
            &jsonl::WriteOptions {
                compression,
                ..Default::default()
            },
        )
        .unwrap();
        match compression {
            Compression::None => assert!(ours == theirs, "{}", first_difference(&ours, &theirs)),
            Compression::Zstd => {
                assert_eq!(frame_texts(&ours), frame_texts(&theirs));
                assert_eq!(frame_texts(&ours).len(), 1 + batches.len());
            }
        }
    }
    // Packed rows are in the output (runs of 3 or more), and it reads back as the events.
    let plain = jsonl_bytes(&store, "long", Compression::None);
    assert!(String::from_utf8_lossy(&plain).contains(r#""type":"text-chunks""#));
    let back = jsonl::read(&plain, &ReadOptions::default()).unwrap();
    assert_eq!(logical(&back.events), logical(&events));
}
