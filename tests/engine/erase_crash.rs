//! Erase under faults (format-spec.md §11.6): a simulated power loss after each file-system
//! operation of an erase, and ENOSPC on each of its writes, lose nothing kept; the named
//! sessions are deleted all or none; a rerun (`Store::erase` when the delete was lost, an
//! erase-mode GC when it was not) finishes the erase. A leftover `index.redb.tmp` (a crash
//! during the index rewrite) is deleted at open.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use sessionlog::GcOptions;
use sessionlog::fs::FileSystem;
use sessionlog::fs::sim::{SimFaults, SimFs, SimOptions};
use sessionlog::store::Store;

use crate::erase::{ERASED, MARKER, Read, config, fill, frames, snapshot};

fn kept(store: &Store) -> BTreeMap<String, Read> {
    snapshot(store)
        .into_iter()
        .filter(|(id, _)| !ERASED.contains(&id.as_str()))
        .collect()
}

/// The named sessions still in the store: all of them or none.
fn erased_present(store: &Store, what: &str) -> bool {
    let present = ERASED
        .iter()
        .filter(|id| store.session_info(id).is_some())
        .count();
    assert!(
        present == 0 || present == ERASED.len(),
        "{what}: {present} of the named sessions left: {:?} {:?}",
        ERASED.map(|id| store
            .session_info(id)
            .map(|i| (i.incarnation, i.event_count))),
        store.recovery_report()
    );
    present > 0
}

/// The marker is in no segment of the simulated file system (raw or decompressed) and not
/// in the real directory (the index).
fn assert_no_marker(sim: &Arc<SimFs>, dir: &Path, what: &str) {
    let needle = MARKER.as_bytes();
    let has = |b: &[u8]| b.windows(needle.len()).any(|w| w == needle);
    let segs = dir.join("segments");
    for name in sim.list(&segs).unwrap() {
        let bytes = sim.read_file(&segs.join(&name)).unwrap();
        assert!(!has(&bytes), "{what}: the marker is in {name}");
        if name.ends_with(".seg") {
            for (offset, payload) in frames(&bytes) {
                assert!(
                    !has(&payload),
                    "{what}: the marker is in {name} at {offset}"
                );
            }
        }
    }
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            assert!(!has(&std::fs::read(&p).unwrap()), "{what}: {}", p.display());
        }
    }
}

/// Reruns what an erase interrupted: the erase itself when the delete was lost, else the
/// erase-mode GC.
fn finish(store: &Store, what: &str) {
    if erased_present(store, what) {
        store.erase(&ERASED, &mut |_, _| {}).unwrap();
    } else {
        store
            .gc(GcOptions::default().erase(true), &mut |_, _| {})
            .unwrap();
    }
}

/// The simulated file system with crash-atomic renames: its default
/// `volatile_dir_entries` undoes each name's unsynced change on its own, so a rename can lose
/// the file (the old name's removal kept, the new name's entry undone), which no journaling
/// file system does; the GC's install (format-spec.md §11.4) relies on rename being atomic.
fn atomic_renames() -> SimOptions {
    SimOptions {
        volatile_dir_entries: false,
        ..SimOptions::default()
    }
}

#[test]
fn a_simulated_power_loss_anywhere_in_an_erase_loses_nothing_kept() {
    let mut crashes = 0;
    for k in 0u64.. {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimFs::new(k, atomic_renames());
        let config = config().with_fs(sim.clone());
        let store = Store::open(dir.path(), config.clone()).unwrap();
        fill(&store);
        store.checkpoint().unwrap();
        let before = kept(&store);
        sim.set_faults(SimFaults {
            crash_after_ops: Some(k),
            ..SimFaults::default()
        });
        let result = store.erase(&ERASED, &mut |_, _| {});
        let crashed = sim.is_down();
        assert_eq!(result.is_err(), crashed, "after {k} operations: {result:?}");
        store.abandon();
        sim.crash();
        sim.restart_process();
        let what = format!("crash after {k} operations");
        let store = Store::open(dir.path(), config.clone()).unwrap();
        assert_eq!(kept(&store), before, "{what}");
        let verify = store.verify().unwrap();
        assert!(verify.is_clean(), "{what}: {verify:?}");
        finish(&store, &what);
        assert_eq!(kept(&store), before, "{what}, rerun");
        assert!(!erased_present(&store, &what));
        store.close().unwrap();
        assert_no_marker(&sim, dir.path(), &what);
        let store = Store::open(dir.path(), config.clone()).unwrap();
        assert_eq!(kept(&store), before, "{what}, reopened");
        let verify = store.verify().unwrap();
        assert!(verify.is_clean(), "{what}, reopened: {verify:?}");
        drop(store);
        if !crashed {
            break;
        }
        crashes += 1;
    }
    assert!(crashes > 10, "the erase crashed at only {crashes} points");
    eprintln!("erase: crashed and recovered at {crashes} points");
}

#[test]
fn a_full_disk_during_an_erase_loses_nothing_kept() {
    let mut failures = 0;
    for k in 0u64.. {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimFs::new(k, SimOptions::default());
        let config = config().with_fs(sim.clone());
        let store = Store::open(dir.path(), config.clone()).unwrap();
        fill(&store);
        store.checkpoint().unwrap();
        let before = kept(&store);
        sim.set_faults(SimFaults {
            enospc_after_writes: Some(k),
            ..SimFaults::default()
        });
        let result = store.erase(&ERASED, &mut |_, _| {});
        sim.set_faults(SimFaults::default());
        let what = format!("ENOSPC after {k} writes");
        if result.is_ok() {
            assert_eq!(kept(&store), before);
            break;
        }
        failures += 1;
        drop(store);
        let store = Store::open(dir.path(), config.clone()).unwrap();
        assert_eq!(kept(&store), before, "{what}, reopened");
        let verify = store.verify().unwrap();
        assert!(verify.is_clean(), "{what}: {verify:?}");
        finish(&store, &what);
        assert_eq!(kept(&store), before, "{what}, rerun");
        store.close().unwrap();
        assert_no_marker(&sim, dir.path(), &what);
    }
    assert!(failures > 0, "no write of the erase failed");
}

#[test]
fn a_leftover_index_copy_is_deleted_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    fill(&store);
    for id in ERASED {
        store.delete_session(id).unwrap();
    }
    let before = kept(&store);
    store.close().unwrap();
    // A crash while the copy was written: a partial (here: the whole old) file.
    let tmp = dir.path().join("index.redb.tmp");
    std::fs::copy(dir.path().join("index.redb"), &tmp).unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    assert!(!tmp.exists(), "the leftover copy is deleted at open");
    assert!(!store.recovery_report().index_rebuilt);
    assert_eq!(kept(&store), before);
    store
        .gc(GcOptions::default().erase(true), &mut |_, _| {})
        .unwrap();
    assert_eq!(kept(&store), before);
    store.close().unwrap();
    crate::erase::assert_erased(dir.path());
}
