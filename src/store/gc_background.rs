//! A segment GC in the background of a writable store ([`Store::background_gc`]).
//!
//! A thread wakes every interval and runs [`Store::gc`] when dead bytes may have appeared
//! since its last pass: sessions were deleted (by [`Store::delete_session`], retention or an
//! erase), or a segment holding deleted sessions' records has been sealed since (a GC leaves
//! the active segment alone). Its first pass runs one interval after it starts (a store
//! reopened with dead bytes from an earlier life). A pass is the on-demand GC, so it is as
//! crash-safe as that one and appends wait only while it repoints the index.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{GcOptions, GcReport, Store};

/// What the background GC has done so far ([`BackgroundGc::stats`]).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct BackgroundGcStats {
    /// Passes run (a pass that found nothing to compact counts).
    pub passes: u64,
    /// Segments compacted, over all passes.
    pub compacted: u64,
    /// Bytes freed, over all passes.
    pub freed: u64,
    /// The last pass's report.
    pub last: Option<GcReport>,
    /// The last failed pass's error (the thread goes on; the next pass retries).
    pub last_error: Option<String>,
}

/// A running background GC. Dropping it (or [`BackgroundGc::stop`]) stops the thread after
/// the pass in progress, if any; it also stops by itself once the store is dropped.
#[derive(Debug)]
pub struct BackgroundGc {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    stop: Mutex<bool>,
    wake: Condvar,
    stats: Mutex<BackgroundGcStats>,
}

/// Counts deletions so that the background GC knows when dead bytes may have appeared.
#[derive(Debug, Default)]
pub(super) struct DeletionClock {
    /// Deletions since the store opened.
    count: std::sync::atomic::AtomicU64,
    /// The active segment when the latest deletion committed.
    segment: std::sync::atomic::AtomicU64,
}

impl DeletionClock {
    /// Records a deletion committed while `active_segment` was the active segment.
    pub(super) fn tick(&self, active_segment: u64) {
        self.segment.store(active_segment, Ordering::SeqCst);
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    fn read(&self) -> (u64, u64) {
        (
            self.count.load(Ordering::SeqCst),
            self.segment.load(Ordering::SeqCst),
        )
    }
}

impl Store {
    /// Starts a thread that runs the segment GC with `options` in the background of this
    /// writable store: every `every`, when sessions were deleted since its last pass or a
    /// segment holding their records was sealed since. Appends go on meanwhile (they wait
    /// only while a pass repoints the index). Errors are kept in
    /// [`BackgroundGcStats::last_error`] and the next pass retries.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// # use sessionlog::{GcOptions, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Arc::new(Store::open(dir.path(), Default::default())?);
    /// let gc = store.background_gc(Duration::from_secs(60), GcOptions::default());
    /// // ... appends, deletes ...
    /// let stats = gc.stop();
    /// assert_eq!(stats.last_error, None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn background_gc(self: &Arc<Self>, every: Duration, options: GcOptions) -> BackgroundGc {
        let shared = Arc::new(Shared::default());
        let store = Arc::downgrade(self);
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("sessionlog-gc".into())
                .spawn(move || run(store, every, options, &shared))
                .ok()
        };
        if thread.is_none() {
            let mut stats = shared.stats.lock().unwrap_or_else(|p| p.into_inner());
            stats.last_error = Some("the GC thread could not be started".into());
        }
        BackgroundGc { shared, thread }
    }

    /// The active segment's number (the one appends go to).
    fn active_segment(&self) -> u64 {
        self.committer.as_ref().map_or(0, |c| c.watermark().segment)
    }

    /// Notes a committed deletion for the background GC.
    pub(super) fn note_deletion(&self) {
        self.deletions.tick(self.active_segment());
    }
}

/// The thread: waits, decides, runs a pass; exits when stopped or the store is gone.
fn run(store: Weak<Store>, every: Duration, options: GcOptions, shared: &Shared) {
    // (deletions seen, active segment) at the last pass; `None` before the first.
    let mut last: Option<(u64, u64)> = None;
    loop {
        {
            let stop = shared.stop.lock().unwrap_or_else(|p| p.into_inner());
            let (stop, _) = shared
                .wake
                .wait_timeout_while(stop, every, |stop| !*stop)
                .unwrap_or_else(|p| p.into_inner());
            if *stop {
                return;
            }
        }
        let Some(store) = store.upgrade() else {
            return;
        };
        let (deletions, deleted_in) = store.deletions.read();
        let active = store.active_segment();
        let due = match last {
            None => true,
            Some((seen, active_then)) => {
                deletions != seen || (active_then <= deleted_in && active > deleted_in)
            }
        };
        if !due {
            continue;
        }
        let result = store.gc(options, &mut |_, _| {});
        last = Some((deletions, active));
        drop(store);
        let mut stats = shared.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.passes += 1;
        match result {
            Ok(report) => {
                stats.compacted += report.compacted.len() as u64;
                stats.freed += report.freed;
                stats.last = Some(report);
            }
            Err(e) => stats.last_error = Some(e.to_string()),
        }
    }
}

impl BackgroundGc {
    /// What the thread has done so far.
    pub fn stats(&self) -> BackgroundGcStats {
        self.shared
            .stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stops the thread (after the pass in progress) and returns what it did.
    pub fn stop(mut self) -> BackgroundGcStats {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for BackgroundGc {
    fn drop(&mut self) {
        self.halt();
    }
}
