//! `interop::import` streams: sessions are validated one at a time and read again for
//! writing, so the memory an import needs is bounded by its largest session, not by its input
//! (measured here with a counting allocator); and a source that changes between the two
//! passes is refused, naming the file, with the sessions written before it kept.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use sessionlog::interop::import::{
    CutAt, FileImportError, ImportOptions, ImportReport, import_paths,
};
use sessionlog::interop::jsonl;
use sessionlog::interop::sqlite::{self, SchemaVersion};
use sessionlog::store::{Config, Store};

/// Counts the bytes allocated by the whole test binary, and the most there were at once.
struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = NOW.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(n: usize) {
    NOW.fetch_sub(n, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            grew(new_size);
            shrank(layout.size());
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Tests of this file run one at a time, so the allocator counts one import only.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A dsh JSONL session `id` of `turns` turns, each a `turn/start`, a user message of about
/// `text` bytes and a `turn/end`.
fn session(id: &str, turns: usize, text: usize) -> String {
    let mut out = format!(
        r#"{{"type":"session","version":0,"id":"{id}","createdAt":1000,"cwd":"/work","delegationDepth":0}}"#
    );
    out.push('\n');
    let mut seq = 0;
    for t in 1..=turns {
        let words: String = format!("turn {t} of {id} lorem ipsum ")
            .repeat(text / 20 + 1)
            .chars()
            .take(text)
            .collect();
        out.push_str(&format!(
            r#"{{"type":"turn/start","seq":{seq},"time":{seq},"data":{{"turn":{t}}}}}"#
        ));
        out.push('\n');
        seq += 1;
        out.push_str(&format!(
            r#"{{"type":"user/message","seq":{seq},"time":{seq},"data":{{"id":"u{t}","role":"user","content":[{{"type":"text","text":"{words}"}}],"source":{{"kind":"user"}}}},"surfaceOp":"append"}}"#
        ));
        out.push('\n');
        seq += 1;
        out.push_str(&format!(
            r#"{{"type":"turn/end","seq":{seq},"time":{seq},"data":{{"turn":{t},"reason":{{"kind":"completed"}}}}}}"#
        ));
        out.push('\n');
        seq += 1;
    }
    out
}

/// Writes `sessions` (id, turns, text bytes) as dsh's JSONL tree under `root`.
fn tree(root: &Path, sessions: &[(String, usize, usize)]) -> Vec<PathBuf> {
    sessions
        .iter()
        .map(|(id, turns, text)| {
            let dir = root.join("_no-cwd").join(id);
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join("session.jsonl");
            std::fs::write(&file, session(id, *turns, *text)).unwrap();
            file
        })
        .collect()
}

fn open(dir: &Path, name: &str) -> Store {
    Store::open(dir.join(name), Config::default()).unwrap()
}

/// Imports `root` and returns the report and the most heap bytes the import had allocated
/// at once beyond what was allocated before it.
fn measured_import(store: &Store, root: &Path, options: &ImportOptions) -> (ImportReport, usize) {
    let base = NOW.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let report = import_paths(store, &[root.to_owned()], options, &mut |_| {}).unwrap();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    (report, peak)
}

#[test]
fn memory_is_bounded_by_the_largest_session_not_by_the_input() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    // 48 sessions of ~0.4 MB and one of ~1.2 MB: ~21 MB of input.
    let mut sessions: Vec<(String, usize, usize)> =
        (0..48).map(|i| (format!("s{i:02}"), 16, 25_000)).collect();
    sessions.push(("largest".to_owned(), 48, 25_000));
    let files = tree(&tmp.path().join("src"), &sessions);
    let sizes: Vec<u64> = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .collect();
    let input: u64 = sizes.iter().sum();
    let largest = sizes.iter().copied().max().unwrap();
    assert!(input > 16 * largest, "input {input}, largest {largest}");

    let store = open(tmp.path(), "store");
    let (report, peak) =
        measured_import(&store, &tmp.path().join("src"), &ImportOptions::default());
    assert_eq!(report.sessions.len(), 49);
    assert_eq!(store.len("largest"), Some(144));
    assert_eq!(store.len("s00"), Some(48));
    // Sessions were held one at a time: the largest one at most.
    assert_eq!(report.peak_held_events, 144);
    assert!(
        report.peak_held_bytes <= largest,
        "{} event bytes held at once; the largest session file has {largest}",
        report.peak_held_bytes
    );
    // And the heap: a few times the largest session (its file, its events, their encoding)
    // plus a little for the store itself, far below the input.
    let bound = 6 * largest as usize + (2 << 20);
    eprintln!("input {input} B, largest session {largest} B, import heap peak {peak} B");
    assert!(
        peak < bound,
        "the import allocated {peak} bytes at once; the largest session is {largest} bytes (input {input})"
    );

    // The same import holding every session between the passes (as before streaming) needs
    // the whole input: the measure can tell the difference.
    let all = open(tmp.path(), "all");
    let options = ImportOptions {
        hold_bytes: u64::MAX,
        ..ImportOptions::default()
    };
    let (report, held_peak) = measured_import(&all, &tmp.path().join("src"), &options);
    eprintln!("holding every session: import heap peak {held_peak} B");
    assert_eq!(report.sessions.len(), 49);
    assert_eq!(report.peak_held_events, 48 * 48 + 144);
    assert!(
        held_peak as u64 > input / 2 && held_peak > 2 * bound,
        "holding everything peaked at {held_peak} bytes only (input {input})"
    );
}

#[test]
fn a_configured_hold_budget_bounds_what_is_kept_between_the_passes() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let sessions: Vec<(String, usize, usize)> =
        (0..10).map(|i| (format!("h{i}"), 10, 10_000)).collect();
    tree(&tmp.path().join("src"), &sessions);
    let store = open(tmp.path(), "store");
    // ~100 KB of event bytes per session: a budget of 250 KB holds two of them.
    let options = ImportOptions {
        hold_bytes: 250_000,
        ..ImportOptions::default()
    };
    let (report, _) = measured_import(&store, &tmp.path().join("src"), &options);
    assert_eq!(report.sessions.len(), 10);
    // Two held, plus the one being read.
    assert_eq!(report.peak_held_events, 3 * 30);
    for i in 0..10 {
        assert_eq!(store.len(&format!("h{i}")), Some(30));
    }
}

/// Imports `sources` into `store`, calling `between` once every session has been checked and
/// before the first is written.
fn import_changing(
    store: &Store,
    sources: &[PathBuf],
    options: &ImportOptions,
    between: &mut dyn FnMut(),
) -> Result<ImportReport, FileImportError> {
    let mut called = false;
    import_paths(store, sources, options, &mut |p| {
        if p.phase == "checking" && p.done == p.total && !called {
            called = true;
            between();
        }
    })
}

fn changed_error(err: &FileImportError) -> (&Path, &str, &str) {
    let inner = match err {
        FileImportError::Partial { source, .. } => source.as_ref(),
        other => other,
    };
    match inner {
        FileImportError::Changed {
            path,
            session,
            detail,
        } => (path.as_path(), session.as_str(), detail.as_str()),
        other => panic!("not a Changed error: {other}"),
    }
}

#[test]
fn a_source_changed_between_the_passes_is_refused_and_earlier_sessions_stay() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("src");
    let files = tree(
        &root,
        &[
            ("a".to_owned(), 3, 100),
            ("b".to_owned(), 3, 100),
            ("c".to_owned(), 3, 100),
        ],
    );
    let store = open(tmp.path(), "store");
    // dsh appends a turn to "b" while the import runs.
    let err = import_changing(
        &store,
        std::slice::from_ref(&root),
        &ImportOptions::default(),
        &mut || {
            std::fs::write(&files[1], session("b", 4, 100)).unwrap();
        },
    )
    .unwrap_err();
    let (path, id, detail) = changed_error(&err);
    assert_eq!((path, id), (files[1].as_path(), "b"));
    assert!(
        detail.contains("9 events") && detail.contains("12"),
        "{detail}"
    );
    let FileImportError::Partial { imported, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(imported, &["a"]);
    let msg = err.to_string();
    for needle in [
        files[1].display().to_string().as_str(),
        "changed during the import",
        "run the import again",
        "--skip-existing",
        "(\"a\")",
    ] {
        assert!(msg.contains(needle), "{needle:?} missing from: {msg}");
    }
    // "a" was written whole; "b" and "c" were not written at all.
    assert_eq!(store.len("a"), Some(9));
    assert_eq!(store.len("b"), None);
    assert_eq!(store.len("c"), None);
    // Rerunning as the message says imports the rest, with b as it is now.
    let options = ImportOptions {
        skip_existing: true,
        ..ImportOptions::default()
    };
    let report = import_paths(&store, &[root], &options, &mut |_| {}).unwrap();
    let ids: Vec<&str> = report.sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["b", "c"]);
    assert_eq!(store.len("b"), Some(12));
    assert_eq!(store.len("c"), Some(9));
}

/// A name, a change made to a source file, and what the error's detail then says.
type Change = (&'static str, fn(&Path), &'static str);

#[test]
fn every_kind_of_change_between_the_passes_is_caught() {
    let _serial = serial();
    let cases: [Change; 4] = [
        // Same length and event count, one byte of a message differs: only the CRC tells.
        (
            "a byte",
            |f| {
                let text = std::fs::read_to_string(f)
                    .unwrap()
                    .replacen("lorem", "LOREM", 1);
                std::fs::write(f, text).unwrap();
            },
            "CRC-32",
        ),
        // A torn tail appears: the same events, but a cut to report.
        (
            "a torn tail",
            |f| {
                let mut text = std::fs::read_to_string(f).unwrap();
                text.push_str(r#"{"type":"turn/sta"#);
                std::fs::write(f, text).unwrap();
            },
            "differs",
        ),
        (
            "another session",
            |f| std::fs::write(f, session("other", 3, 100)).unwrap(),
            "held session \"b\" when it was checked and \"other\" now",
        ),
        (
            "removed",
            |f| std::fs::remove_file(f).unwrap(),
            "no longer reads",
        ),
    ];
    for (name, change, needle) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("src");
        let files = tree(&root, &[("a".to_owned(), 3, 100), ("b".to_owned(), 3, 100)]);
        let store = open(tmp.path(), "store");
        let err = import_changing(&store, &[root], &ImportOptions::default(), &mut || {
            change(&files[1])
        })
        .unwrap_err();
        let (path, id, detail) = changed_error(&err);
        assert_eq!((path, id), (files[1].as_path(), "b"), "{name}");
        assert!(detail.contains(needle), "{name}: {detail}");
        assert_eq!(store.len("a"), Some(9), "{name}");
        assert_eq!(store.len("b"), None, "{name}");
        assert_eq!(store.len("other"), None, "{name}");
    }
}

#[test]
fn the_first_session_changed_leaves_the_store_unchanged() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("src");
    let files = tree(&root, &[("a".to_owned(), 3, 100), ("b".to_owned(), 3, 100)]);
    let store = open(tmp.path(), "store");
    let err = import_changing(&store, &[root], &ImportOptions::default(), &mut || {
        std::fs::write(&files[0], session("a", 2, 100)).unwrap();
    })
    .unwrap_err();
    // Nothing was imported, so no "import stopped after" wrapper.
    assert!(matches!(err, FileImportError::Changed { .. }), "{err}");
    assert!(store.sessions().is_empty());
}

#[test]
fn a_sqlite_session_changed_between_the_passes_is_refused() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let logs: Vec<jsonl::JsonlLog> = ["q1", "q2", "q3"]
        .iter()
        .map(|id| {
            jsonl::read(
                session(id, 3, 100).as_bytes(),
                &jsonl::ReadOptions::default(),
            )
            .unwrap()
        })
        .collect();
    for version in [SchemaVersion::V15, SchemaVersion::V17, SchemaVersion::V18] {
        let db = tmp.path().join(format!("v{version}.db"));
        sqlite::write(
            &db,
            version,
            logs.iter().map(|l| (&l.header, l.events.as_slice())),
            &sqlite::WriteOptions::default(),
        )
        .unwrap();
        let store = open(tmp.path(), &format!("store{version}"));
        let err = import_changing(
            &store,
            std::slice::from_ref(&db),
            &ImportOptions::default(),
            &mut || {
                let conn = rusqlite::Connection::open(&db).unwrap();
                conn.execute(
                    "UPDATE events SET time = time + 1 WHERE session_id = 'q2' AND seq = 0",
                    [],
                )
                .unwrap();
            },
        )
        .unwrap_err();
        let (path, id, detail) = changed_error(&err);
        assert_eq!((path, id), (db.as_path(), "q2"), "{version}");
        assert!(detail.contains("CRC-32"), "{version}: {detail}");
        assert_eq!(store.len("q1"), Some(9), "{version}");
        assert_eq!(store.len("q2"), None, "{version}");
        assert_eq!(store.len("q3"), None, "{version}");
        // Unchanged, the database imports whole, every session read twice.
        let other = open(tmp.path(), &format!("other{version}"));
        let report = import_paths(&other, &[db], &ImportOptions::default(), &mut |_| {}).unwrap();
        assert_eq!(report.sessions.len(), 3, "{version}");
        assert_eq!(report.peak_held_events, 9, "{version}");
        assert_eq!(other.len("q2"), Some(9), "{version}");
    }
}

#[test]
fn reports_survive_the_second_read() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("src");
    let files = tree(&root, &[("a".to_owned(), 3, 100), ("b".to_owned(), 3, 100)]);
    // b: a torn tail and a header line not in the form dsh writes.
    let text = std::fs::read_to_string(&files[1]).unwrap().replacen(
        r#"{"type":"session","#,
        r#"{"type": "session","#,
        1,
    ) + r#"{"type":"turn/sta"#;
    std::fs::write(&files[1], text).unwrap();
    let store = open(tmp.path(), "store");
    let report = import_paths(
        &store,
        std::slice::from_ref(&root),
        &ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    let b = &report.sessions[1];
    assert_eq!((b.id.as_str(), b.events), ("b", 9));
    let cut = b.cut.as_ref().unwrap();
    assert_eq!(cut.file, files[1]);
    assert!(matches!(cut.at, CutAt::Line { line: 11, .. }), "{cut}");
    assert_eq!(b.non_canonical_lines, [1]);
    // A second run with --skip-existing skips both.
    let options = ImportOptions {
        skip_existing: true,
        ..ImportOptions::default()
    };
    let report = import_paths(&store, &[root], &options, &mut |_| {}).unwrap();
    assert!(report.sessions.is_empty());
    assert_eq!(report.skipped.len(), 2);
}
