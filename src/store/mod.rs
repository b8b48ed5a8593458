//! The store: a directory holding the log (`segments/`) and its index (`index.redb`).
//!
//! ```
//! use sessionlog::{Config, Event, SessionHeader, Store};
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path(), Config::default())?;
//! let s = store.create(SessionHeader::new("s1", 1_767_225_600_000))?;
//! // An `Event` appends verbatim: its seq must be the session's next.
//! let receipt = s.append(Event::new("turn/start", 0, 1_767_225_600_000, r#"{"turn":1}"#))?;
//! assert!(receipt.durable);
//! drop(s);
//! drop(store);
//!
//! let store = Store::open(dir.path(), Config::default())?;
//! let e = store.get("s1", 0)?.expect("event 0");
//! assert_eq!(e.data, r#"{"turn":1}"#);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod append;
mod catch_up;
mod commit;
mod config;
mod create;
mod erase;
mod fold;
mod follow;
mod frame_cache;
pub(crate) mod gc;
mod gc_background;
#[cfg(feature = "internals")]
mod internals;
pub(crate) mod live;
mod lock;
mod lookup;
mod open;
mod read;
pub mod recovery;
mod registry;
mod retention;
mod session;
mod space;
mod verbatim;
use open::open_index;
mod verify;

pub use erase::EraseError;
pub use gc::{GcError, GcOptions, GcReport};
pub use gc_background::{BackgroundGc, BackgroundGcStats};
pub use retention::{Eviction, EvictionReason, Retention};
pub use space::{GC_LIVE_FRACTION, SegmentSpace, SessionSpace, SpaceReport, SpaceTotals};
pub use verify::{InvariantCheck, Salvaged, VerifyReport};

pub use follow::{FollowError, FollowUpdate, Follower};
pub use live::{ACK_FILE, ReaderView};

pub use session::{ForkFailure, Intent, Session, now_ms};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{AppendError, IndexError, LogPosition, OpenError};
use crate::event::{Event, Seq, SessionHeader};
use crate::index::{Index, Location, NO_NODE, Run, SessionRow};
use crate::log::Segments;
use crate::log::frame::FrameLimits;
use crate::log::record::Record;
use crate::log::scan::{self, BadFrame, RecoveryMode};
use crate::log::segment::{SEGMENT_HEADER_LEN, SEGMENTS_DIR};
use crate::projection::{Checkpoint, SessionProjections};
use crate::session::derive::MessageCache;
use crate::session::{InvariantMode, SessionState};

use commit::{CommitConfig, Committer, Goal};
pub use recovery::{AcknowledgedLoss, RecoveryReport, TornSession};
use registry::Registry;

use config::validate_config;
pub use config::{Config, Durability};
pub use registry::RegistryError;

use append::{encode, projection_ops, set_surface, state_bytes, validate_header};
use frame_cache::FrameCache;
use lookup::StoreLookup;
pub use read::Events;

/// The index file's name inside the store directory.
pub const INDEX_FILE: &str = "index.redb";
/// The lock file's name inside the store directory.
pub const LOCK_FILE: &str = "LOCK";

/// What an append returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    /// The seq of the (last) appended event.
    pub seq: Seq,
    /// The log sequence number of the record, for [`Store::wait_durable`].
    pub lsn: u64,
    /// True when the event is durable already.
    pub durable: bool,
}

/// A session as listed by [`Store::sessions`] (one: [`Store::session_info`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionInfo {
    /// The header.
    pub header: SessionHeader,
    /// The store-internal number of this session (its incarnation): assigned when it is
    /// created and kept for its life, across reopens; a session deleted and created again
    /// with the same id gets a new number. With [`SessionInfo::event_count`] it identifies a
    /// state of the session's log, since every append (a repair included) adds events:
    /// `(incarnation, event_count)` is stable while nothing is written to the session and
    /// changes on every write to it.
    pub incarnation: u64,
    /// Number of events (= next seq).
    pub event_count: Seq,
    /// Total bytes of `data` text.
    pub data_bytes: u64,
    /// `time` of the last event the session appended itself (0 for a fork with none of its
    /// own yet: its last event is then its parent's, which retention reads).
    pub last_time: i64,
    /// Number of surface nodes (0 for a verbatim session: it keeps no surface index).
    pub surface_len: u64,
    /// Number of surface replacements (0 for a verbatim session).
    pub replace_generation: u64,
    /// The session stores its events verbatim, without session semantics
    /// ([`Store::create_verbatim`]).
    pub verbatim: bool,
}

/// A listed session: counters from the index and the projections' views.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Counters and header.
    pub info: SessionInfo,
    /// `(projection key, view JSON text)` for every registered projection.
    pub views: Vec<(String, String)>,
}

/// Options for a new session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionOptions {
    /// When the turn/step/tool invariants are enforced on this session's appends
    /// (`None`: the store's [`Config::invariants`]).
    pub invariants: Option<InvariantMode>,
}

/// Why a stored session could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// dsh's loader would refuse the log (format version, vocabulary, corruption), with
    /// dsh's wording.
    #[error(transparent)]
    Load(#[from] crate::session::load::LoadError),
    /// Writing it failed (or the id exists, or an event is over the size limit).
    #[error(transparent)]
    Append(#[from] AppendError),
}

/// A subscriber to appended events (dsh's `session/event` feed): called after each append
/// is staged, with the session id and the event. A panicking listener is caught and logged;
/// it never blocks the append or other listeners.
pub type Listener = Arc<dyn Fn(&str, &Event) + Send + Sync>;

/// Per-session semantic state, loaded on first use.
#[derive(Debug, Default)]
pub(crate) struct Core {
    pub(crate) state: Option<SessionState>,
    pub(crate) messages: MessageCache,
    /// The seq the last state checkpoint covers.
    pub(crate) checkpointed: Seq,
    /// The registered projections' states (loaded on first use).
    pub(crate) projections: Option<SessionProjections>,
}

/// An opened store. Cheap to share between threads (`&Store` is `Sync`).
pub struct Store {
    dir: PathBuf,
    pub(crate) config: Config,
    segments: Arc<Segments>,
    index: Arc<Index>,
    pub(crate) committer: Option<Arc<Committer>>,
    registry: RwLock<Registry>,
    cores: Mutex<crate::index::numhash::NumMap<u64, Arc<Mutex<Core>>>>,
    overlay: HashMap<(u64, Seq), Location>,
    report: RecoveryReport,
    limits: FrameLimits,
    timer: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
    listeners: RwLock<Vec<(u64, Listener)>>,
    next_listener: AtomicU64,
    listener_failures: AtomicU64,
    /// A reader's view of the log (`None` for a read-write store).
    view: Option<live::ReaderView>,
    /// A writer's published position (`ACKED`).
    publisher: Option<Arc<live::Publisher>>,
    /// A reader's states of sessions that grew at a refresh, folded on when next needed.
    grown: Mutex<HashMap<u64, SessionState>>,
    /// What [`Config::retention`] evicted when this store opened.
    evicted_at_open: Vec<Eviction>,
    /// Held by a running [`Store::gc`] (one at a time).
    gc_lock: Mutex<()>,
    /// Deletions committed, for [`Store::background_gc`].
    deletions: gc_background::DeletionClock,
    /// The replicator [`Config::replicate`] started at open.
    #[cfg(feature = "s3")]
    replicator: Mutex<Option<crate::replicate::Replicator>>,
    _lock: lock::StoreLock,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.dir)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed, unless read-only) the store in `dir`, running recovery.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<Store, OpenError> {
        let dir = dir.as_ref().to_path_buf();
        validate_config(&config)?;
        let io = |path: PathBuf| move |source| OpenError::Io { path, source };
        let writable = !config.read_only;
        if writable {
            config.fs.create_dir_all(&dir).map_err(io(dir.clone()))?;
        } else if !config.fs.exists(&dir) {
            return Err(OpenError::Io {
                path: dir.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "store directory does not exist",
                ),
            });
        } else if !config.fs.exists(&dir.join(SEGMENTS_DIR)) && !dir.join(INDEX_FILE).exists() {
            // Checked before the lock file is created: a read-only open of a directory that
            // is no store creates nothing in it.
            return Err(OpenError::Io {
                path: dir.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "not a sessionlog store (it has neither segments/ nor index.redb)",
                ),
            });
        }
        // A reader takes no lock: it must never keep a writer out (see `live`).
        let store_lock = if writable {
            lock::StoreLock::acquire(&dir.join(LOCK_FILE), true)?
        } else {
            lock::StoreLock::none()
        };
        let publisher = if writable {
            Some(Arc::new(live::Publisher::start(&dir)?))
        } else {
            None
        };
        let segments = Arc::new(
            Segments::new(config.fs.clone(), dir.join(SEGMENTS_DIR), writable)
                .map_err(io(dir.join(SEGMENTS_DIR)))?,
        );
        let limits = FrameLimits {
            max_frame_bytes: config.max_frame_bytes,
        };
        let (index, mut recovered, view) = if writable {
            let gc_finished =
                gc::finish_interrupted(config.fs.as_ref(), &dir, &dir.join(SEGMENTS_DIR))?;
            let acked = publisher
                .as_ref()
                .and_then(|p| p.previous())
                .map(|p| p.position);
            let (index, mut recovered) = open_index(&dir, &segments, &config, limits, acked)?;
            if gc_finished {
                recovered.report.index_rebuilt = true;
                recovered.report.rebuild_reason =
                    Some("a GC was interrupted: its compacted segments were put in place".into());
            }
            (index, recovered, None)
        } else {
            let r = live::open_reader_index(&dir, &segments, &config, limits)?;
            (r.index, r.recovered, Some(r.view))
        };
        let whole_log = recovered.whole_log || recovered.report.index_rebuilt;
        if let Some(p) = &publisher {
            p.make_durable(&mut recovered, &dir.join(SEGMENTS_DIR))?;
        }
        let index = Arc::new(index);
        let committer = writable.then(|| {
            Arc::new(Committer::new(
                segments.clone(),
                index.clone(),
                CommitConfig {
                    segment_bytes: config.segment_bytes,
                    preallocate: config.preallocate_bytes,
                    compress_threshold: config.compress_threshold,
                    zstd_level: config.zstd_level,
                    checkpoint_bytes: config.checkpoint_bytes,
                    deferred_index_entries: config.deferred_index_entries,
                    frame_bytes: FRAME_BYTES.min(config.max_frame_bytes as usize),
                    max_record_bytes: config.max_frame_bytes as usize,
                },
                recovered.active,
                recovered.next_segment,
                recovered.watermark,
            ))
        });
        if let (Some(c), Some(p)) = (&committer, &publisher) {
            p.publish(live::WriterState::Open, &recovered.watermark);
            c.set_publisher(p.clone());
        }
        if let Some(c) = &committer {
            // `segments/`, the store directory and (when this open created it) the store
            // directory's own entry; synced before the first frame is written.
            c.defer_dir_syncs(commit::DirSyncs {
                fs: config.fs.clone(),
                required: vec![dir.join(SEGMENTS_DIR), dir.clone()],
                best_effort: dir
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .map(Path::to_path_buf)
                    .into_iter()
                    .collect(),
            });
        }
        let timer = match (config.durability, &committer) {
            (Durability::Group { max_delay }, Some(c)) => {
                Some(spawn_group_timer(c.clone(), max_delay))
            }
            _ => None,
        };
        let overlay = recovered
            .overlay
            .into_iter()
            .map(|(s, q, l)| ((s, q), l))
            .collect();
        let mut store = Store {
            dir,
            config,
            segments,
            index,
            committer,
            registry: RwLock::new(recovered.registry),
            cores: Mutex::new(Default::default()),
            overlay,
            report: recovered.report,
            limits,
            timer,
            listeners: RwLock::new(Vec::new()),
            next_listener: AtomicU64::new(1),
            listener_failures: AtomicU64::new(0),
            view,
            publisher,
            grown: Mutex::new(HashMap::new()),
            evicted_at_open: Vec::new(),
            gc_lock: Mutex::new(()),
            deletions: gc_background::DeletionClock::default(),
            #[cfg(feature = "s3")]
            replicator: Mutex::new(None),
            _lock: store_lock,
        };
        if !writable {
            store.catch_up_in_memory();
        }
        if writable {
            // After a crash, sessions whose surface the index does not cover to their last
            // event (the tail recovery indexed) are folded when first used (`settle`), not
            // here: a crashed store reopens in the time of its tail's scan. An index rebuilt
            // from the log is caught up whole (it was built from the whole log anyway).
            if whole_log {
                let failures = store.catch_up().map_err(|e| OpenError::Io {
                    path: store.dir.clone(),
                    source: std::io::Error::other(format!(
                        "writing session state replayed after recovery failed: {e}"
                    )),
                })?;
                store.report.catch_up_failures = failures;
            } else if !store.behind().is_empty() {
                // What this open serves of a crashed process's tail may be only in the page
                // cache (that process wrote it without syncing, and its index commits
                // survived with the cache): it is synced now, as the eager catch-up's write
                // synced it, so nothing the store serves can vanish in a power loss
                // (`multiframe-restart` seed 722 of the simulator).
                let c = store.committer().map_err(|e| OpenError::Io {
                    path: store.dir.clone(),
                    source: std::io::Error::other(e.to_string()),
                })?;
                c.commit(c.staged_lsn(), Goal::Durable, false)
                    .map_err(|e| OpenError::Io {
                        path: store.dir.clone(),
                        source: std::io::Error::other(format!(
                            "syncing the log recovery read failed: {e}"
                        )),
                    })?;
            }
            if let Some(policy) = store.config.retention.clone() {
                store.evicted_at_open = store
                    .apply_retention(&policy, now_ms(), &mut |_| {})
                    .map_err(|e| OpenError::Io {
                        path: store.dir.clone(),
                        source: std::io::Error::other(format!(
                            "applying the retention policy at open failed: {e}"
                        )),
                    })?;
            }
            #[cfg(feature = "s3")]
            if let Some(target) = store.config.replicate.clone() {
                let url = target.url().to_owned();
                let replicator = store.replicate(target).map_err(|e| OpenError::Io {
                    path: store.dir.clone(),
                    source: std::io::Error::other(format!(
                        "starting replication to {url} failed: {e}"
                    )),
                })?;
                *lock(&store.replicator) = Some(replicator);
            }
        }
        Ok(store)
    }

    /// The sessions [`Config::retention`] evicted when this (writable) store opened, in
    /// eviction order (empty without a policy, and for a reader).
    pub fn evicted_at_open(&self) -> &[Eviction] {
        &self.evicted_at_open
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What recovery found and did when this store was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn committer(&self) -> Result<&Arc<Committer>, AppendError> {
        self.committer.as_ref().ok_or(AppendError::ReadOnly)
    }

    fn registry(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        self.registry.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn registry_mut(&self) -> std::sync::RwLockWriteGuard<'_, Registry> {
        self.registry.write().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn core(&self, number: u64) -> Arc<Mutex<Core>> {
        lock(&self.cores).entry(number).or_default().clone()
    }

    /// The live session number of `id`.
    pub(crate) fn number_of(&self, id: &str) -> Option<u64> {
        self.registry().by_id(id).map(|r| r.number)
    }

    /// Subscribes to appended events (dsh's `session/event` feed). Returns an id for
    /// [`Store::unsubscribe`].
    pub fn subscribe(&self, listener: Listener) -> u64 {
        let id = self.next_listener.fetch_add(1, Ordering::Relaxed);
        self.listeners
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, listener));
        id
    }

    /// Removes a listener.
    pub fn unsubscribe(&self, id: u64) {
        self.listeners
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(i, _)| *i != id);
    }

    /// Listener calls that panicked since the store was opened.
    pub fn listener_failures(&self) -> u64 {
        self.listener_failures.load(Ordering::Relaxed)
    }

    /// Blocks until the append behind `receipt` is durable (leading the sync if needed).
    pub fn wait_durable(&self, receipt: &Receipt) -> Result<(), AppendError> {
        self.committer()?.commit(receipt.lsn, Goal::Durable, false)
    }

    /// True when the append behind `receipt` is durable.
    pub fn is_durable(&self, receipt: &Receipt) -> bool {
        self.committer
            .as_ref()
            .is_none_or(|c| c.is_durable(receipt.lsn))
    }

    /// A barrier: returns once everything appended before the call is durable.
    pub fn flush(&self) -> Result<(), AppendError> {
        let c = self.committer()?;
        c.commit(c.staged_lsn(), Goal::Durable, false)
    }

    /// Flushes and commits the index durably, so the next open scans nothing.
    pub fn checkpoint(&self) -> Result<(), AppendError> {
        let c = self.committer()?;
        c.commit(c.staged_lsn(), Goal::Durable, true)
    }

    /// Syncs everything and commits the index durably. Dropping the store does the same,
    /// ignoring errors; call `close` to see them.
    pub fn close(mut self) -> Result<(), AppendError> {
        self.shutdown(std::time::Duration::from_secs(60))
    }

    /// Drops the store the way a crash would: staged records are not written and the index
    /// gets no final durable commit. For tests of recovery; real crashes are tested with
    /// killed processes.
    #[doc(hidden)]
    pub fn abandon(mut self) {
        self.stop_timer();
        self.committer = None;
    }

    fn stop_timer(&mut self) {
        if let Some((stop, handle)) = self.timer.take() {
            stop.store(true, Ordering::SeqCst);
            handle.thread().unpark();
            let _ = handle.join();
        }
    }

    /// Closes the writer, then stops the replicator ([`Config::replicate`]), giving it
    /// `patience` to ship what is acknowledged.
    fn shutdown(&mut self, patience: std::time::Duration) -> Result<(), AppendError> {
        let closed = self.close_writer();
        // Stopped after the writer's last durable commit published its position and before
        // `ACKED` says the writer closed (a reader waits while a live process's writer is
        // not open), so it ships all of it.
        #[cfg(feature = "s3")]
        if let Some(r) = lock(&self.replicator).take() {
            let stopped = r.stop_within(patience).map(|_| ());
            if closed.is_ok()
                && let Err(e) = stopped
            {
                self.publish_closed();
                return Err(AppendError::ReplicationUnfinished(e.to_string()));
            }
        }
        #[cfg(not(feature = "s3"))]
        let _ = patience;
        if closed.is_ok() {
            self.publish_closed();
        }
        closed
    }

    /// Publishes in `ACKED` that the writer closed, at its last position.
    fn publish_closed(&self) {
        if let (Some(p), Some(c)) = (&self.publisher, &self.committer) {
            p.publish(live::WriterState::Closed, &c.watermark());
        }
    }

    fn close_writer(&mut self) -> Result<(), AppendError> {
        self.stop_timer();
        let Some(c) = self.committer.clone() else {
            return Ok(());
        };
        if let Some(failure) = c.failure() {
            // Events staged since the failed write or sync are lost: say so.
            return Err(AppendError::PreviousIo(failure));
        }
        let cores: Vec<(u64, Arc<Mutex<Core>>)> = lock(&self.cores)
            .iter()
            .map(|(n, c)| (*n, c.clone()))
            .collect();
        for (number, core) in cores {
            if self.registry().get(number).is_some() {
                let mut core = lock(&core);
                self.checkpoint_state(number, &mut core)?;
            }
        }
        if c.needs_checkpoint() {
            c.commit(c.staged_lsn(), Goal::Durable, true)?;
        }
        c.release_reserve()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.shutdown(std::time::Duration::from_secs(5));
    }
}

/// Events between state checkpoints (besides one at every `turn/end` and at close).
const STATE_CHECKPOINT_EVENTS: Seq = 1024;

/// The payload size frames are filled to; a batch or import larger than this is written as
/// several frames, committed as one operation (`FLAG_CONTINUED`).
const FRAME_BYTES: usize = 8 << 20;

/// In `Group` mode, an appender that finds this many frames' worth of bytes staged writes them
/// itself before returning (backpressure: the staged bytes stay bounded when the disk is slow).
const GROUP_BACKPRESSURE_FRAMES: usize = 4;

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn spawn_group_timer(
    committer: Arc<Committer>,
    max_delay: Duration,
) -> (Arc<AtomicBool>, JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::spawn(move || {
        while !flag.load(Ordering::SeqCst) {
            match committer.oldest_unsynced() {
                Some(t) => {
                    let due = t + max_delay;
                    let now = std::time::Instant::now();
                    if now >= due {
                        if committer
                            .commit(committer.staged_lsn(), Goal::Durable, false)
                            .is_err()
                        {
                            return;
                        }
                    } else {
                        std::thread::park_timeout(due - now);
                    }
                }
                None => std::thread::park_timeout(max_delay.max(Duration::from_millis(1))),
            }
        }
    });
    (stop, handle)
}
