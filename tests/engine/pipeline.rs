//! The pipelined group commit (store/commit.rs): while one leader's fsync is in flight the
//! next batch is compressed, but never written. A file system that makes every segment sync
//! slow records, per file, whether a frame was written while a sync of that file was running
//! or while an earlier write was still unsynced (either would let the page cache persist a
//! later frame without an earlier one). Every acknowledged append reads back, in order, after
//! a reopen. Each test also runs with so few deferred index entries that nearly every batch's
//! index commit runs after its acknowledgement, beside the next batch's write: appenders read
//! their events back meanwhile.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sessionlog::event::SessionHeader;
use sessionlog::fs::{FileSystem, StorageFile};
use sessionlog::store::{Durability, Store};

use crate::common::wrap_fs::WrapFs;
use crate::common::{config, read_all, synthetic_event};

#[derive(Debug, Default)]
struct Log {
    /// A write was issued while a sync of the same file ran, or over an unsynced write.
    violations: Vec<String>,
    syncs: u64,
    writes: u64,
}

#[derive(Debug)]
struct SlowSyncFile {
    inner: Arc<dyn StorageFile>,
    segment: bool,
    name: String,
    log: Arc<Mutex<Log>>,
    /// Syncs of this file in flight.
    syncing: AtomicU64,
    /// Writes since the last completed sync.
    unsynced: AtomicU64,
}

impl StorageFile for SlowSyncFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        // The zeros preallocated after a frame (format-spec.md §2) are not a frame: written
        // with the frame before its sync, they never stand between two frames.
        let frame = offset > 0 && buf.iter().any(|&b| b != 0);
        if self.segment && (frame || offset == 0) {
            let mut log = self.log.lock().unwrap();
            log.writes += 1;
            if self.syncing.load(Ordering::SeqCst) > 0 {
                log.violations
                    .push(format!("{}: write at {offset} during a sync", self.name));
            }
            // The segment header is written at creation, before any sync.
            if offset > 0 && self.unsynced.load(Ordering::SeqCst) > 0 {
                log.violations.push(format!(
                    "{}: write at {offset} over an unsynced frame",
                    self.name
                ));
            }
        }
        let r = self.inner.write_all_at(buf, offset);
        if frame {
            self.unsynced.fetch_add(1, Ordering::SeqCst);
        }
        r
    }
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        if !self.segment {
            return self.inner.sync_data();
        }
        self.syncing.fetch_add(1, Ordering::SeqCst);
        let before = self.unsynced.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(3));
        let r = self.inner.sync_data();
        self.unsynced.fetch_sub(before, Ordering::SeqCst);
        self.syncing.fetch_sub(1, Ordering::SeqCst);
        self.log.lock().unwrap().syncs += 1;
        r
    }
}

/// The real file system, with every segment sync slowed and recorded in `log`.
fn slow_sync_fs(log: &Arc<Mutex<Log>>) -> Arc<dyn FileSystem> {
    let log = log.clone();
    WrapFs::shared(move |path, inner| {
        let segment = path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|d| d == "segments");
        Ok(Arc::new(SlowSyncFile {
            inner,
            segment,
            name: path.display().to_string(),
            log: log.clone(),
            syncing: AtomicU64::new(0),
            unsynced: AtomicU64::new(0),
        }))
    })
}

/// Deferred index entries per commit: the default, and so few that nearly every batch's
/// entries are committed after its acknowledgement, while the next batch is written.
const DEFERRALS: [usize; 3] = [4096, 1, 5];

#[test]
fn a_batch_is_written_only_after_the_previous_sync_and_nothing_acknowledged_is_lost() {
    for deferred in DEFERRALS {
        batches_in_order_nothing_lost(deferred);
    }
}

fn batches_in_order_nothing_lost(deferred: usize) {
    const THREADS: u64 = 16;
    const EVENTS: u64 = 40;
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Mutex::new(Log::default()));
    let fs = slow_sync_fs(&log);
    let store = Arc::new(
        Store::open(
            dir.path(),
            config(Durability::Sync)
                .with_fs(fs)
                .compress_threshold(64)
                .deferred_index_entries(deferred),
        )
        .unwrap(),
    );
    for t in 0..THREADS {
        store
            .create_session(SessionHeader::new(format!("p{t}"), 1))
            .unwrap();
    }
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let id = format!("p{t}");
                for seq in 0..EVENTS {
                    let r = store.append(&id, synthetic_event(seq, t)).unwrap();
                    assert!(r.durable);
                    // Read back at once and from earlier, while other threads' index
                    // commits run: from memory or the index, never missing.
                    for at in [seq, seq / 2] {
                        let read: Vec<_> = store.events(&id, at..at + 1).unwrap().collect();
                        assert_eq!(read.len(), 1, "{id} seq {at} (deferred {deferred})");
                        assert_eq!(read[0].as_ref().unwrap(), &synthetic_event(at, t));
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let log = std::mem::take(&mut *log.lock().unwrap());
    assert!(log.violations.is_empty(), "{:?}", log.violations);
    // Group commit shared the slow syncs (each append alone would need one each).
    assert!(
        log.syncs < THREADS * EVENTS,
        "{} syncs for {} appends",
        log.syncs,
        THREADS * EVENTS
    );
    drop(store);
    let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    for t in 0..THREADS {
        let events = read_all(&store, &format!("p{t}"));
        assert_eq!(events.len() as u64, EVENTS);
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e, &synthetic_event(i as u64, t));
        }
    }
}

/// Every kind of committer waiter at once (durable appends, buffered appends with `flush` and
/// `checkpoint`, and a GC, which leads exclusively): each is woken only when it can progress
/// (store/commit_wait.rs), so a lost wake-up would hang one of them. All must finish, and
/// every acknowledged event reads back after a reopen.
#[test]
fn every_kind_of_waiter_is_woken_and_nothing_acknowledged_is_lost() {
    for deferred in DEFERRALS {
        every_waiter_woken(deferred);
    }
}

fn every_waiter_woken(deferred: usize) {
    const THREADS: u64 = 12;
    const EVENTS: u64 = 60;
    let dir = tempfile::tempdir().unwrap();
    let slow = Arc::new(Mutex::new(Log::default()));
    let fs = slow_sync_fs(&slow);
    let store = Arc::new(
        Store::open(
            dir.path(),
            config(Durability::Sync)
                .with_fs(fs)
                .deferred_index_entries(deferred),
        )
        .unwrap(),
    );
    // `w12` is the GC's: deleted, and not the newest session (so its records may go).
    for name in (0..THREADS + 1)
        .map(|t| format!("w{t}"))
        .chain(["late".into()])
    {
        store.create_session(SessionHeader::new(name, 1)).unwrap();
    }
    let (done, finished) = std::sync::mpsc::channel::<&'static str>();
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let (store, done) = (store.clone(), done.clone());
        handles.push(std::thread::spawn(move || {
            for seq in 0..EVENTS {
                let r = store
                    .append(&format!("w{t}"), synthetic_event(seq, t))
                    .unwrap();
                assert!(r.durable);
                match (t % 3, seq % 7) {
                    (0, 0) => store.flush().unwrap(),
                    (1, 3) => store.checkpoint().unwrap(),
                    _ => {}
                }
            }
            done.send("appender").unwrap();
        }));
    }
    {
        // A session to delete, so the GC has something to collect, and GCs while appending.
        let (store, done) = (store.clone(), done.clone());
        handles.push(std::thread::spawn(move || {
            for seq in 0..EVENTS {
                store.append("w12", synthetic_event(seq, 99)).unwrap();
            }
            store.delete_session("w12").unwrap();
            let mut compacted = 0;
            let mut skipped = Vec::new();
            for _ in 0..4 {
                let report = store
                    .gc(sessionlog::GcOptions::default().erase(true), &mut |_, _| {})
                    .unwrap();
                compacted += report.compacted.len() + report.sessions_erased as usize;
                skipped.extend(report.skipped);
            }
            assert!(compacted > 0, "the erase compacted nothing: {skipped:?}");
            done.send("gc").unwrap();
        }));
    }
    drop(done);
    for _ in 0..THREADS + 1 {
        // A lost wake-up shows as a thread that never finishes.
        finished
            .recv_timeout(Duration::from_secs(120))
            .expect("a committer waiter was never woken");
    }
    for h in handles {
        h.join().unwrap();
    }
    let log = std::mem::take(&mut *slow.lock().unwrap());
    assert!(log.violations.is_empty(), "{:?}", log.violations);
    drop(store);
    let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    for t in 0..THREADS {
        let events = read_all(&store, &format!("w{t}"));
        assert_eq!(events.len() as u64, EVENTS);
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e, &synthetic_event(i as u64, t));
        }
    }
    assert!(
        store.session_info("w12").is_none(),
        "the deleted session is gone"
    );
}
