//! `Store::gc`: segment GC by compaction in place (format-spec.md §11). A filled store with
//! half its sessions deleted (and a deleted parent a live fork reads through) is collected;
//! every live event reads identically before and after, after a reopen, and after an index
//! rebuilt from the log; the log shrinks to within 1.2x of the live bytes; a crash at each
//! step of the GC leaves a store that opens with every event.

use std::collections::BTreeMap;
use std::path::Path;

use sessionlog::event::{Event, SessionHeader};
use sessionlog::store::{Config, Durability, Store};
use sessionlog::{GcOptions, InvariantMode};

use crate::common::{read_all, synthetic_event};

const T: i64 = 1_767_225_600_000;

fn config() -> Config {
    Config::default()
        .durability(Durability::Buffered)
        .segment_bytes(32 * 1024)
        .compress_threshold(usize::MAX)
        .invariants(InvariantMode::Off)
}

/// Every session's events, by id.
fn snapshot(store: &Store) -> BTreeMap<String, Vec<Event>> {
    store
        .sessions()
        .into_iter()
        .map(|s| {
            let id = s.header.id.clone();
            let events = read_all(store, &id);
            (id, events)
        })
        .collect()
}

fn segments_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// Twelve sessions written one after the other (each spans several segments), a verbatim
/// one; a fork of s1 after which s1 is deleted; every even session deleted.
fn fill(store: &Store) {
    fill_n(store, 12, 120);
}

fn fill_n(store: &Store, sessions: u64, events: u64) {
    for i in 0..sessions {
        let id = format!("s{i}");
        store
            .create_session(SessionHeader::new(id.clone(), 1000 + i))
            .unwrap();
        for seq in 0..events {
            store.append(&id, synthetic_event(seq, i)).unwrap();
            if seq % 5 == 4 {
                store.flush().unwrap();
            }
        }
    }
    let verbatim: Vec<Event> = (0..40)
        .map(|seq| {
            Event::new(
                "x/odd",
                seq,
                T,
                format!(r#"{{"n":{seq},"pad":"{}"}}"#, "v".repeat(300)),
            )
        })
        .collect();
    store
        .create_verbatim(SessionHeader::new("v", 7), verbatim)
        .unwrap();
    // A fork of s1 near its end, with events of its own; then s1 goes (its events stay
    // pinned by the fork).
    let n = store.len("s1").unwrap();
    store.fork("s1", Some(n - 1), Some("s1-fork")).unwrap();
    let m = store.len("s1-fork").unwrap();
    for seq in m..m + 5 {
        let mut e = synthetic_event(seq, 99);
        e.seq = seq;
        store.append("s1-fork", e).unwrap();
    }
    for i in (0..sessions).step_by(2).chain([1]) {
        store.delete_session(&format!("s{i}")).unwrap();
    }
    // Later sessions, so the deleted ones are not the newest.
    store
        .create_session(SessionHeader::new("late", 5000))
        .unwrap();
    for seq in 0..3 {
        store.append("late", synthetic_event(seq, 77)).unwrap();
    }
    store.checkpoint().unwrap();
}

#[test]
fn gc_frees_dead_segments_and_every_event_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    fill(&store);
    let before = snapshot(&store);
    assert!(before.contains_key("s1-fork") && !before.contains_key("s1"));
    let size_before = segments_size(dir.path());

    let plan = store
        .gc(GcOptions::default().dry_run(true), &mut |_, _| {})
        .unwrap();
    assert!(plan.freed > 0, "{plan:?}");
    assert_eq!(
        segments_size(dir.path()),
        size_before,
        "a dry run writes nothing"
    );

    let report = store.gc(GcOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!(report.compacted, plan.compacted);
    assert_eq!(report.freed, plan.freed);
    assert_eq!(segments_size(dir.path()), size_before - report.freed);
    assert_eq!(snapshot(&store), before);
    let verify = store.verify().unwrap();
    assert!(verify.is_clean(), "{verify:?}");

    let space = store.space(&mut |_, _| {}).unwrap();
    let kept = space.totals.live + space.totals.pinned;
    let size = segments_size(dir.path());
    assert!(
        (size as f64) <= 1.2 * kept as f64,
        "{size} bytes of segments for {kept} live bytes: {report:?}"
    );
    eprintln!(
        "gc: {size_before} -> {size} bytes of segments, {kept} live and pinned ({:.3}x), {} segments compacted",
        size as f64 / kept as f64,
        report.compacted.len()
    );
    // Appends still work after the GC, and a second GC finds nothing more to free.
    store.append("s3", synthetic_event(120, 3)).unwrap();
    let again = store.gc(GcOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!(again.freed, 0, "{again:?}");
    let before = snapshot(&store);
    store.close().unwrap();

    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(snapshot(&store), before);
    store.close().unwrap();

    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    assert!(
        store.recovery_report().frames_scanned > 0,
        "the index was rebuilt from the log"
    );
    assert_eq!(snapshot(&store), before);
    let verify = store.verify().unwrap();
    assert!(verify.is_clean(), "{verify:?}");
}

/// Copies the store directory (files only, two levels).
fn copy_store(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.join("segments")).unwrap();
    for sub in ["", "segments"] {
        for e in std::fs::read_dir(from.join(sub)).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                std::fs::copy(e.path(), to.join(sub).join(e.file_name())).unwrap();
            }
        }
    }
}

#[test]
fn a_crash_at_each_step_of_a_gc_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    fill(&store);
    let before = snapshot(&store);
    let pristine = tempfile::tempdir().unwrap();
    store.close().unwrap();
    copy_store(dir.path(), pristine.path());

    let store = Store::open(dir.path(), config()).unwrap();
    let report = store.gc(GcOptions::default(), &mut |_, _| {}).unwrap();
    assert!(!report.compacted.is_empty());
    store.close().unwrap();
    let compacted: Vec<(u64, Vec<u8>)> = report
        .compacted
        .iter()
        .map(|&n| {
            let name = format!("{n:020}.seg");
            (
                n,
                std::fs::read(dir.path().join("segments").join(name)).unwrap(),
            )
        })
        .collect();
    let seg =
        |root: &Path, n: u64, suffix: &str| root.join("segments").join(format!("{n:020}{suffix}"));

    // The states a crash can leave, built from the store before and after the GC.
    type Build<'a> = Box<dyn Fn(&Path) + 'a>;
    let cases: Vec<(&str, Build<'_>)> = vec![
        (
            "copy half written (.gc.tmp)",
            Box::new(|root: &Path| {
                let (n, bytes) = &compacted[0];
                std::fs::write(seg(root, *n, ".gc.tmp"), &bytes[..bytes.len() / 2]).unwrap();
            }),
        ),
        (
            "copies complete, index not repointed",
            Box::new(|root: &Path| {
                for (n, bytes) in &compacted {
                    std::fs::write(seg(root, *n, ".gc"), bytes).unwrap();
                }
            }),
        ),
        (
            "copies complete and committed, index not repointed",
            Box::new(|root: &Path| {
                for (n, bytes) in &compacted {
                    std::fs::write(seg(root, *n, ".gc"), bytes).unwrap();
                }
                std::fs::write(root.join("segments").join("gc.commit"), b"").unwrap();
            }),
        ),
        (
            "some copies written, not committed, index not repointed",
            Box::new(|root: &Path| {
                let (n, bytes) = &compacted[0];
                std::fs::write(seg(root, *n, ".gc"), bytes).unwrap();
            }),
        ),
        (
            "index repointed, some copies not renamed",
            Box::new(|root: &Path| {
                std::fs::write(root.join("segments").join("gc.commit"), b"").unwrap();
                std::fs::copy(dir.path().join("index.redb"), root.join("index.redb")).unwrap();
                for (i, (n, bytes)) in compacted.iter().enumerate() {
                    let suffix = if i % 2 == 0 { ".gc" } else { ".seg" };
                    std::fs::write(seg(root, *n, suffix), bytes).unwrap();
                }
            }),
        ),
    ];
    for (what, build) in cases {
        let root = tempfile::tempdir().unwrap();
        copy_store(pristine.path(), root.path());
        build(root.path());
        let store = Store::open(root.path(), config()).unwrap();
        assert_eq!(snapshot(&store), before, "{what}");
        let verify = store.verify().unwrap();
        assert!(verify.is_clean(), "{what}: {verify:?}");
        let leftovers: Vec<String> = std::fs::read_dir(root.path().join("segments"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(".seg"))
            .collect();
        assert!(leftovers.is_empty(), "{what}: {leftovers:?}");
        // A GC after recovery completes the job.
        store.gc(GcOptions::default(), &mut |_, _| {}).unwrap();
        assert_eq!(snapshot(&store), before, "{what}, after a GC");
    }
}

/// The GC on the simulated file system, crashed after each of its file-system operations in
/// turn (a power loss: unsynced writes and directory entries may be lost); every reopen reads
/// every event as before and verifies clean.
#[test]
fn a_simulated_power_loss_anywhere_in_a_gc_loses_nothing() {
    use sessionlog::fs::sim::{SimFaults, SimFs, SimOptions};
    let mut crashes = 0;
    for k in 0u64.. {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimFs::new(k, SimOptions::default());
        let config = config().with_fs(sim.clone());
        let store = Store::open(dir.path(), config.clone()).unwrap();
        fill_n(&store, 6, 60);
        let before = snapshot(&store);
        sim.set_faults(SimFaults {
            crash_after_ops: Some(k),
            ..SimFaults::default()
        });
        let result = store.gc(GcOptions::default(), &mut |_, _| {});
        let crashed = sim.is_down();
        assert_eq!(result.is_err(), crashed, "after {k} operations: {result:?}");
        store.abandon();
        sim.crash();
        sim.restart_process();
        let store = Store::open(dir.path(), config.clone()).unwrap();
        assert_eq!(snapshot(&store), before, "crash after {k} operations");
        let verify = store.verify().unwrap();
        assert!(verify.is_clean(), "crash after {k} operations: {verify:?}");
        if !crashed {
            let report = result.unwrap();
            assert!(!report.compacted.is_empty(), "{report:?}");
            break;
        }
        crashes += 1;
    }
    assert!(crashes > 5, "the GC crashed at only {crashes} points");
    eprintln!("gc: crashed and recovered at {crashes} points");
}

/// ENOSPC on each write of a GC in turn: the GC fails with nothing lost, the store (reopened
/// when the failure poisoned the writer) reads every event as before and verifies clean, and
/// a GC with room succeeds.
#[test]
fn a_full_disk_during_a_gc_loses_nothing() {
    use sessionlog::fs::sim::{SimFaults, SimFs, SimOptions};
    let mut failures = 0;
    for k in 0u64.. {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimFs::new(k, SimOptions::default());
        let config = config().with_fs(sim.clone());
        let store = Store::open(dir.path(), config.clone()).unwrap();
        fill_n(&store, 6, 60);
        let before = snapshot(&store);
        sim.set_faults(SimFaults {
            enospc_after_writes: Some(k),
            ..SimFaults::default()
        });
        let result = store.gc(GcOptions::default(), &mut |_, _| {});
        sim.set_faults(SimFaults::default());
        if let Ok(report) = result {
            assert!(!report.compacted.is_empty(), "{report:?}");
            assert_eq!(snapshot(&store), before);
            break;
        }
        failures += 1;
        assert_eq!(snapshot(&store), before, "ENOSPC after {k} writes");
        drop(store);
        let store = Store::open(dir.path(), config.clone()).unwrap();
        assert_eq!(
            snapshot(&store),
            before,
            "ENOSPC after {k} writes, reopened"
        );
        let verify = store.verify().unwrap();
        assert!(verify.is_clean(), "ENOSPC after {k} writes: {verify:?}");
        store.gc(GcOptions::default(), &mut |_, _| {}).unwrap();
        assert_eq!(
            snapshot(&store),
            before,
            "ENOSPC after {k} writes, GC again"
        );
    }
    assert!(failures > 0, "no write of the GC failed");
}

/// Readers opened before a GC, during it (between its steps is not reachable from here, so
/// before and after each), and after it read every live event the same; a reader that
/// opened before gives the replaced files back at its next refresh.
#[test]
fn readers_beside_a_gc_read_the_same_and_let_go_of_replaced_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    fill(&store);
    store.flush().unwrap();
    let before = snapshot(&store);
    let mut early = Store::open_reader(dir.path()).unwrap();
    assert_eq!(snapshot(&early), before);
    // A reader that has read nothing yet (no segment handle but those its scan opened).
    let mut idle = Store::open_reader(dir.path()).unwrap();
    let report = store
        .gc(GcOptions::default().live_fraction(1.0), &mut |_, _| {})
        .unwrap();
    assert!(!report.compacted.is_empty());
    assert_eq!(snapshot(&idle), before, "a reader opened before the GC");
    assert_eq!(snapshot(&early), before);
    // The writer goes on; the readers refresh and read old and new events alike.
    store.append("late", synthetic_event(3, 77)).unwrap();
    store.flush().unwrap();
    let after = snapshot(&store);
    assert!(early.refresh().unwrap());
    assert!(idle.refresh().unwrap());
    assert_eq!(snapshot(&early), after);
    assert_eq!(snapshot(&idle), after);
    let late = Store::open_reader(dir.path()).unwrap();
    assert_eq!(snapshot(&late), after, "a reader opened after the GC");
    // A second GC while the readers hold their views.
    store.delete_session("s3").unwrap();
    store.flush().unwrap();
    store
        .gc(GcOptions::default().live_fraction(1.0), &mut |_, _| {})
        .unwrap();
    let after2 = snapshot(&store);
    assert!(!after2.contains_key("s3"));
    assert_eq!(
        snapshot(&late),
        after,
        "a reader that did not refresh keeps its view"
    );
    drop(late);
    assert!(early.refresh().unwrap());
    assert!(idle.refresh().unwrap());
    assert_eq!(snapshot(&early), after2);
    assert_eq!(snapshot(&idle), after2);
    // The refreshed readers hold no replaced (deleted) segment file open: the GC's space
    // comes back while they live.
    #[cfg(target_os = "linux")]
    {
        let held: Vec<String> = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .map(|p| p.display().to_string())
            .filter(|p| {
                p.starts_with(&dir.path().display().to_string()) && p.ends_with("(deleted)")
            })
            .collect();
        assert!(held.is_empty(), "replaced segments still open: {held:?}");
    }
}

/// A reader that opened with no writer (its index a copy of the last writer's) holds the
/// files that index points into: a writer that opens later and GCs changes none of its
/// answers, and its next refresh lets the replaced files go.
#[test]
fn a_reader_of_a_closed_store_reads_the_same_across_a_later_writers_gc() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let store = Store::open(dir.path(), config()).unwrap();
        fill(&store);
        let before = snapshot(&store);
        store.close().unwrap();
        before
    };
    let mut r = Store::open_reader(dir.path()).unwrap();
    assert!(!r.reader_view().unwrap().writer_alive);
    let store = Store::open(dir.path(), config()).unwrap();
    let report = store
        .gc(GcOptions::default().live_fraction(1.0), &mut |_, _| {})
        .unwrap();
    assert!(!report.compacted.is_empty());
    assert_eq!(snapshot(&r), before, "read after the GC, before a refresh");
    store.append("late", synthetic_event(3, 77)).unwrap();
    store.flush().unwrap();
    let after = snapshot(&store);
    assert!(r.refresh().unwrap());
    assert_eq!(snapshot(&r), after);
    assert!(r.verify().unwrap().is_clean());
}

/// Polls `done` for up to a minute (a liveness bound for a background thread, not a speed
/// assertion).
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(60) {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

/// `Store::background_gc`: a thread compacts what deletions left while appends go on, runs a
/// pass only when something was deleted (or a segment holding deleted records was sealed),
/// and every event reads the same throughout and after a reopen.
#[test]
fn the_background_gc_collects_after_deletions_while_appends_go_on() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), config()).unwrap());
    let every = std::time::Duration::from_millis(20);
    let gc = store.background_gc(every, GcOptions::default());
    // The first pass (nothing deleted yet in this life) finds nothing to do.
    assert!(eventually(|| gc.stats().passes == 1));
    std::thread::sleep(every * 10);
    assert_eq!(gc.stats().passes, 1, "no deletion, no new pass");
    fill(&store);
    let size = segments_size(dir.path());
    let mut expected = snapshot(&store);
    // Appends beside the passes.
    for seq in 3..200 {
        store.append("late", synthetic_event(seq, 77)).unwrap();
        if seq % 10 == 0 {
            store.flush().unwrap();
        }
    }
    store.flush().unwrap();
    expected.insert("late".into(), read_all(&store, "late"));
    // Until the passes have compacted all that a GC would (a dry run plans nothing more).
    let settled = || {
        gc.stats().freed > 0
            && store
                .gc(GcOptions::default().dry_run(true), &mut |_, _| {})
                .unwrap()
                .compacted
                .is_empty()
    };
    assert!(eventually(settled), "{:?}", gc.stats());
    let stats = gc.stop();
    assert_eq!(stats.last_error, None);
    assert!(stats.freed > 0);
    assert!(segments_size(dir.path()) < size);
    assert_eq!(snapshot(&store), expected);
    drop(store);
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(snapshot(&store), expected);
    assert!(store.verify().unwrap().is_clean());
}

/// The background thread ends when the store is dropped (it holds no strong reference
/// between passes), and dropping the handle stops it.
#[test]
fn the_background_gc_never_keeps_a_store_open() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), config()).unwrap());
    let gc = store.background_gc(std::time::Duration::from_millis(5), GcOptions::default());
    assert!(eventually(|| gc.stats().passes >= 1));
    drop(store);
    // The lock is released: a writer opens.
    assert!(eventually(|| Store::open(dir.path(), config()).is_ok()));
    drop(gc);
}
