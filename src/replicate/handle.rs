//! The replicator's background thread (it owns a tokio runtime), its handle and its stats.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::remote::Remote;
use super::retention::prune;
use super::ship::{Round, Shipper};
use super::snapshot::{Capture, capture};
use super::{ReplicaTarget, ReplicateError};
use crate::error::LogPosition;
use crate::store::{Store, now_ms};

/// How often the remote retention runs (more often when the window is shorter than 4 min:
/// a quarter of it, never more often than the shipping interval).
const RETENTION_EVERY: Duration = Duration::from_secs(60);
/// The longest wait between attempts while the object store fails.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What a replicator has done, and how far behind it is.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ReplicaStats {
    /// The replicator's id (16 hex digits; in manifests and the lease).
    pub replicator: String,
    /// The log is shipped up to here: the position of the last manifest written (or found at
    /// the start).
    pub shipped: LogPosition,
    /// When the last manifest was written by this replicator.
    pub shipped_at: Option<SystemTime>,
    /// How far the log may be shipped, as of the last round: the live writer's
    /// acknowledged position, or with none the log's last whole operation.
    pub acknowledged: LogPosition,
    /// Bytes between `shipped` and `acknowledged`.
    pub lag_bytes: u64,
    /// Since when acknowledged bytes have been waiting to be shipped (`None`: caught up).
    pub behind_since: Option<SystemTime>,
    /// Shipping rounds run (successful or not).
    pub rounds: u64,
    /// Manifests written.
    pub manifests: u64,
    /// Parts uploaded, and their bytes.
    pub parts: u64,
    /// Bytes uploaded in parts.
    pub bytes: u64,
    /// New generations started (a GC replaced a segment, or the remote did not match).
    pub generations: u64,
    /// Rounds that failed since the last one that succeeded (0: healthy).
    pub failing: u64,
    /// The last error met (kept after recovery, for the record).
    pub last_error: Option<String>,
    /// Manifests, parts and index snapshots removed by the remote retention.
    pub pruned: u64,
    /// Index snapshots shipped by this replicator (format-spec.md §12.7).
    pub snapshots: u64,
    /// The position the last one covers.
    pub snapshot_position: Option<LogPosition>,
    /// Why the last attempt at a snapshot shipped none (a copy taken while the writer
    /// committed, an upload that failed); cleared by the next one shipped.
    pub snapshot_error: Option<String>,
    /// The replicator stopped: `Some(None)` cleanly, `Some(Some(e))` on an error it cannot
    /// go past (another replicator took the prefix).
    pub stopped: Option<Option<String>>,
}

impl ReplicaStats {
    /// True when everything acknowledged (as of the last round) is shipped.
    pub fn caught_up(&self) -> bool {
        self.lag_bytes == 0 && self.shipped >= self.acknowledged
    }

    /// How long acknowledged bytes have been waiting (zero when caught up).
    pub fn lag(&self) -> Duration {
        self.behind_since
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .unwrap_or_default()
    }
}

#[derive(Debug, Default)]
struct Shared {
    stats: Mutex<ReplicaStats>,
    stop: AtomicBool,
    /// A stop that ships what is acknowledged first (false: stop at once).
    drain: AtomicBool,
    wake: tokio::sync::Notify,
}

/// A running replicator ([`replicate`], [`Store::replicate`]). Dropping it stops shipping
/// after the request in flight, if any (what the last round shipped stays consistent);
/// [`Replicator::stop`] ships what is acknowledged first.
#[derive(Debug)]
pub struct Replicator {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn lock(m: &Mutex<ReplicaStats>) -> std::sync::MutexGuard<'_, ReplicaStats> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn run_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// Starts shipping the store in `dir` (written by this process, another one, or none) to
/// `target`, on a thread of its own. Returns once the replicator holds the prefix's lease and
/// read the newest manifest, or with the error that keeps it from starting (another
/// replicator holds the prefix; a manifest this build cannot read). While the object store
/// cannot be reached it keeps trying (see [`ReplicaStats::failing`]).
pub fn replicate(
    dir: impl AsRef<Path>,
    target: ReplicaTarget,
) -> Result<Replicator, ReplicateError> {
    let dir = dir.as_ref().to_path_buf();
    if !dir.is_dir() {
        return Err(ReplicateError::io(
            &dir,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such store directory"),
        ));
    }
    let remote = Remote {
        store: target.build()?,
        prefix: target.prefix_path(),
        url: target.url().to_owned(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ReplicateError::io(&dir, e))?;
    let shared = Arc::new(Shared::default());
    let replicator = run_id();
    lock(&shared.stats).replicator = replicator.clone();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let thread_shared = Arc::clone(&shared);
    let interval = target.shipping_interval();
    let retain_ms = target.retention().as_millis() as u64;
    let policy = SnapshotPolicy {
        every: target.snapshot_bytes(),
        interval: target.snapshot_period(),
        since: 0,
        last: None,
    };
    let thread = std::thread::Builder::new()
        .name("sessionlog-replicate".into())
        .spawn(move || {
            runtime.block_on(run(
                remote,
                dir,
                replicator,
                interval,
                retain_ms,
                policy,
                thread_shared,
                started_tx,
            ));
        })
        .map_err(|e| ReplicateError::io(".", e))?;
    let handle = Replicator {
        shared,
        thread: Some(thread),
    };
    match started_rx.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => Err(e),
        // The thread ended without a word: it was stopped.
        Err(_) => Ok(handle),
    }
}

impl Store {
    /// Ships this store's log to `target` on a background thread ([`replicate`] on
    /// [`Store::dir`]): what the store makes durable (its published position) is shipped at
    /// each interval; appends never wait for it. Stop it with [`Replicator::stop`] (ships what
    /// is acknowledged, then stops) before closing the store to have everything shipped.
    pub fn replicate(&self, target: ReplicaTarget) -> Result<Replicator, ReplicateError> {
        replicate(self.dir(), target)
    }
}

impl Replicator {
    /// What it has done so far.
    pub fn stats(&self) -> ReplicaStats {
        lock(&self.shared.stats).clone()
    }

    /// Ships what is acknowledged now, then stops (waiting at most 60 s for the object store;
    /// see [`Replicator::stop_within`]).
    pub fn stop(self) -> Result<ReplicaStats, ReplicateError> {
        self.stop_within(Duration::from_secs(60))
    }

    /// Ships what is acknowledged now (retrying while the object store fails, for at most
    /// `patience`), then stops. Fails with [`ReplicateError::Unfinished`] when that could
    /// not be shipped.
    pub fn stop_within(mut self, patience: Duration) -> Result<ReplicaStats, ReplicateError> {
        let target = lock(&self.shared.stats).acknowledged;
        self.shared.drain.store(true, Ordering::SeqCst);
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake.notify_one();
        let deadline = Instant::now() + patience;
        while self.thread.as_ref().is_some_and(|t| !t.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if self.thread.as_ref().is_some_and(|t| t.is_finished())
            && let Some(t) = self.thread.take()
        {
            let _ = t.join();
        } else {
            // Give up draining: the thread ends after its current request, on its own.
            self.shared.drain.store(false, Ordering::SeqCst);
            drop(self.thread.take());
        }
        let stats = self.stats();
        if stats.shipped < target || stats.lag_bytes > 0 {
            return Err(ReplicateError::Unfinished {
                shipped: stats.shipped,
                lag_bytes: stats.lag_bytes,
                last_error: stats
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "stopped".to_owned()),
            });
        }
        Ok(stats)
    }
}

impl Drop for Replicator {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn record_round(shared: &Shared, round: &Round) {
    let mut s = lock(&shared.stats);
    if let Some(a) = round.acknowledged {
        s.acknowledged = a;
    }
    if let Some(p) = round.shipped {
        s.shipped = p;
        s.shipped_at = Some(SystemTime::now());
        s.manifests += 1;
    }
    s.lag_bytes = round.lag_bytes;
    if s.lag_bytes == 0 {
        s.behind_since = None;
    } else if s.behind_since.is_none() {
        s.behind_since = Some(SystemTime::now());
    }
}

/// When to ship an index snapshot (format-spec.md §12.7).
#[derive(Debug)]
struct SnapshotPolicy {
    /// Log bytes between two (0: never).
    every: u64,
    /// The shortest time between two while shipping.
    interval: Duration,
    /// Bytes shipped since the last one.
    since: u64,
    /// When the last one was shipped or tried.
    last: Option<Instant>,
}

impl SnapshotPolicy {
    /// A copy of the index to ship with this round's manifest, when one is due: enough
    /// bytes since the last and not too soon, or (`draining`) anything shipped since the
    /// last. A copy that fails its checks is reported and tried again later.
    fn take(&mut self, dir: &Path, draining: bool, shared: &Shared) -> Option<Capture> {
        let due = self.every > 0
            && self.since > 0
            && (draining
                || (self.since >= self.every
                    && self.last.is_none_or(|t| t.elapsed() >= self.interval)));
        if !due {
            return None;
        }
        self.last = Some(Instant::now());
        match capture(dir) {
            Ok(c) => c,
            Err(e) => {
                lock(&shared.stats).snapshot_error = Some(format!("index copy refused: {e}"));
                None
            }
        }
    }

    fn record(&mut self, round: &Round, shared: &Shared) {
        self.since = self.since.saturating_add(round.bytes);
        let Some(outcome) = &round.snapshot else {
            return;
        };
        self.last = Some(Instant::now());
        let mut s = lock(&shared.stats);
        match outcome {
            Ok(p) => {
                self.since = 0;
                s.snapshots += 1;
                s.snapshot_position = Some(*p);
                s.snapshot_error = None;
            }
            Err(e) => s.snapshot_error = Some(e.clone()),
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn run(
    remote: Remote,
    dir: PathBuf,
    replicator: String,
    interval: Duration,
    retain_ms: u64,
    mut policy: SnapshotPolicy,
    shared: Arc<Shared>,
    started: std::sync::mpsc::Sender<Result<(), ReplicateError>>,
) {
    let stopping = || shared.stop.load(Ordering::SeqCst);
    let mut started = Some(started);
    let mut backoff = interval;
    // Start: the lease and the newest manifest (retried while the store is unreachable).
    let mut shipper = loop {
        match Shipper::start(remote.clone(), dir.clone(), replicator.clone()).await {
            Ok(s) => break s,
            Err(e) => {
                // A missing bucket is the caller's to fix before starting.
                let fatal = !matches!(e, ReplicateError::Remote { .. });
                {
                    let mut s = lock(&shared.stats);
                    s.failing += 1;
                    s.last_error = Some(e.to_string());
                    if fatal {
                        s.stopped = Some(Some(e.to_string()));
                    }
                }
                if fatal {
                    if let Some(tx) = started.take() {
                        let _ = tx.send(Err(e));
                    }
                    return;
                }
                if let Some(tx) = started.take() {
                    let _ = tx.send(Ok(()));
                }
                if stopping() {
                    return;
                }
                let _ = tokio::time::timeout(backoff, shared.wake.notified()).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    };
    {
        let mut s = lock(&shared.stats);
        s.shipped = shipper.manifest_position;
        s.failing = 0;
    }
    if let Some(tx) = started.take() {
        let _ = tx.send(Ok(()));
    }
    // A replica with no snapshot yet gets one at the first round that can take it.
    policy.since = if shipper.has_snapshot { 0 } else { u64::MAX };
    let retention_every = RETENTION_EVERY
        .min(Duration::from_millis(retain_ms / 4))
        .max(interval);
    let mut last_retention = Instant::now();
    let mut backoff = interval;
    // After a failed round the remote is read again before shipping on: what it holds may
    // not be what this run believes (an object store that lost data, a lease taken over).
    let mut resync = false;
    loop {
        let draining = stopping();
        if draining && !shared.drain.load(Ordering::SeqCst) {
            break;
        }
        if resync {
            match Shipper::start(remote.clone(), dir.clone(), replicator.clone()).await {
                Ok(s) => {
                    shipper = s;
                    resync = false;
                }
                Err(e) => {
                    let fatal = matches!(e, ReplicateError::Leased { .. });
                    {
                        let mut s = lock(&shared.stats);
                        s.rounds += 1;
                        s.failing += 1;
                        s.last_error = Some(e.to_string());
                        if fatal {
                            s.stopped = Some(Some(e.to_string()));
                        }
                    }
                    if fatal {
                        return;
                    }
                    let wait = backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    if draining {
                        tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
                    } else {
                        let _ = tokio::time::timeout(wait, shared.wake.notified()).await;
                    }
                    continue;
                }
            }
        }
        let mut seen = None;
        let capture = policy.take(&dir, draining, &shared);
        let result = shipper.round(&mut seen, capture).await;
        if result.is_err()
            && let Some(r) = &seen
        {
            // How far it could have shipped, for the lag, though the round failed.
            record_round(&shared, r);
        }
        match result {
            Ok(r) => {
                record_round(&shared, &r);
                policy.record(&r, &shared);
                let mut s = lock(&shared.stats);
                s.rounds += 1;
                s.parts += r.parts;
                s.bytes += r.bytes;
                s.generations += r.generations;
                s.failing = 0;
                backoff = interval;
                if draining && r.acknowledged.is_none_or(|a| s.shipped >= a) {
                    break;
                }
            }
            Err(e) => {
                let fatal = matches!(e, ReplicateError::Leased { .. });
                resync = matches!(
                    e,
                    ReplicateError::Remote { .. } | ReplicateError::NoBucket { .. }
                );
                let mut s = lock(&shared.stats);
                s.rounds += 1;
                s.failing += 1;
                s.last_error = Some(e.to_string());
                if fatal {
                    s.stopped = Some(Some(e.to_string()));
                    return;
                }
            }
        }
        let failing = lock(&shared.stats).failing > 0;
        if !failing && !draining && last_retention.elapsed() >= retention_every {
            last_retention = Instant::now();
            let building: Vec<_> = shipper.current().collect();
            let renewed = shipper.lease.renew(&shipper.remote).await;
            if renewed.is_ok()
                && let Ok(p) = prune(
                    &shipper.remote,
                    now_ms().max(0) as u64,
                    retain_ms,
                    &building,
                )
                .await
            {
                lock(&shared.stats).pruned += p.manifests + p.parts + p.snapshots;
            }
        }
        let wait = if failing {
            let w = backoff;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            w
        } else {
            interval
        };
        if draining {
            if failing {
                tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
            }
            continue;
        }
        let _ = tokio::time::timeout(wait, shared.wake.notified()).await;
    }
    shipper.lease.release(&shipper.remote).await;
    lock(&shared.stats).stopped = Some(None);
}
