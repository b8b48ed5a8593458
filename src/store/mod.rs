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

mod commit;
#[cfg(feature = "internals")]
mod internals;
mod lock;
mod open;
pub mod recovery;
mod registry;
mod session;
use open::open_index;
mod verify;

pub use verify::VerifyReport;

pub use session::{ForkFailure, Intent, Session, now_ms};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{AppendError, IndexError, LogPosition, OpenError, ReadError};
use crate::event::{Event, MAX_SAFE_INTEGER, Seq, SessionHeader};
use crate::fs::{FileSystem, StdFileSystem};
use crate::index::{Index, IndexOp, Location, NO_NODE, Run, SessionRow};
use crate::json::{self, JsonLimits};
use crate::log::Segments;
use crate::log::frame::FrameLimits;
use crate::log::record::Record;
use crate::log::scan::{self, BadFrame, RecoveryMode};
use crate::log::segment::{SEGMENT_HEADER_LEN, SEGMENTS_DIR};
use crate::projection::{Checkpoint, CheckpointPolicy, ProjectionSet, SessionProjections};
use crate::session::derive::{DerivedMessage, MessageCache};
use crate::session::{EventLookup, InvariantMode, LookupError, SessionState, SurfaceChange};

use commit::{CommitConfig, Committer, Goal, Stage};
pub use recovery::RecoveryReport;
use registry::Registry;

/// The index file's name inside the store directory.
pub const INDEX_FILE: &str = "index.redb";
/// The lock file's name inside the store directory.
pub const LOCK_FILE: &str = "LOCK";

/// When an append is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Records are buffered and written in batches; nothing is synced until [`Store::flush`],
    /// a checkpoint, or close. Fastest; a crash loses what was not flushed.
    Buffered,
    /// Appends return at once (not yet durable); a background leader writes and syncs
    /// everything staged at most `max_delay` after it was appended, one `fdatasync` for all.
    Group {
        /// The longest an append waits to become durable.
        max_delay: Duration,
    },
    /// Each append returns once it is durable. Concurrent appenders share one write and one
    /// `fdatasync` (group commit by a leader).
    Sync,
}

/// Store configuration: start from [`Config::default`] and set the fields you need.
///
/// ```
/// use sessionlog::{Config, Durability};
/// let config = Config::default().durability(Durability::Buffered).segment_bytes(8 << 20);
/// assert_eq!(config.segment_bytes, 8 << 20);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// When appends are durable. Default [`Durability::Sync`].
    pub durability: Durability,
    /// What recovery tolerates. Default [`RecoveryMode::TolerateTornTail`].
    pub recovery: RecoveryMode,
    /// Open read-only (shared; no recovery writes, no appends). Nothing is modified: a store
    /// whose writer crashed, or whose index is damaged or missing, is answered from an index
    /// repaired or rebuilt in memory, and `RecoveryReport::recovery_pending` says why.
    pub read_only: bool,
    /// A segment rolls over when the next frame would make it larger. Default 64 MiB.
    pub segment_bytes: u64,
    /// Largest `data` text of one event. Default 16 MiB.
    pub max_event_bytes: u64,
    /// Largest frame written or accepted when reading (no allocation exceeds it); a record
    /// larger than this is refused. Default 256 MiB.
    pub max_frame_bytes: u32,
    /// In `Buffered` mode, staged records are written once they reach this size. Default 1 MiB.
    pub batch_bytes: usize,
    /// Frames whose payload is at least this large are zstd-compressed. Default 512 bytes.
    pub compress_threshold: usize,
    /// zstd level for frames. Default 1.
    pub zstd_level: i32,
    /// After this many log bytes, a sync makes the index commit durable (bounds the tail
    /// recovery scans). Default 16 MiB.
    pub checkpoint_bytes: u64,
    /// Limits for validating event JSON.
    pub json_limits: JsonLimits,
    /// When dsh's turn/step/tool invariants are enforced on append. Default `Always`.
    pub invariants: InvariantMode,
    /// [`Store::resume`] appends dsh's crash closers when a session's log ends inside an
    /// open turn. Default true.
    pub repair_on_resume: bool,
    /// The projections folded on every append and checkpointed in the index
    /// (default: `sessionStats`, `title`, `listing`).
    pub(crate) projections: ProjectionSet,
    /// When projection states are checkpointed (besides close): every `turn/end` and every
    /// N events.
    pub(crate) projection_checkpoints: CheckpointPolicy,
    /// The file system (the seam for fault injection).
    pub(crate) fs: Arc<dyn FileSystem>,
    /// A read-write open also runs redb's integrity check over `index.redb` and checks every
    /// index entry's CRC (what `sessionlog recover` does), rebuilding a damaged index from the
    /// log. Reads the whole index. Default false (damage is still detected when read).
    pub check_index: bool,
}

impl Config {
    /// Sets [`Config::durability`].
    pub fn durability(mut self, durability: Durability) -> Config {
        self.durability = durability;
        self
    }

    /// Sets [`Config::recovery`].
    pub fn recovery(mut self, recovery: RecoveryMode) -> Config {
        self.recovery = recovery;
        self
    }

    /// Sets [`Config::read_only`].
    pub fn read_only(mut self, read_only: bool) -> Config {
        self.read_only = read_only;
        self
    }

    /// Sets [`Config::segment_bytes`].
    pub fn segment_bytes(mut self, segment_bytes: u64) -> Config {
        self.segment_bytes = segment_bytes;
        self
    }

    /// Sets [`Config::max_event_bytes`].
    pub fn max_event_bytes(mut self, max_event_bytes: u64) -> Config {
        self.max_event_bytes = max_event_bytes;
        self
    }

    /// Sets [`Config::max_frame_bytes`].
    pub fn max_frame_bytes(mut self, max_frame_bytes: u32) -> Config {
        self.max_frame_bytes = max_frame_bytes;
        self
    }

    /// Sets [`Config::batch_bytes`].
    pub fn batch_bytes(mut self, batch_bytes: usize) -> Config {
        self.batch_bytes = batch_bytes;
        self
    }

    /// Sets [`Config::compress_threshold`].
    pub fn compress_threshold(mut self, compress_threshold: usize) -> Config {
        self.compress_threshold = compress_threshold;
        self
    }

    /// Sets [`Config::zstd_level`].
    pub fn zstd_level(mut self, zstd_level: i32) -> Config {
        self.zstd_level = zstd_level;
        self
    }

    /// Sets [`Config::checkpoint_bytes`].
    pub fn checkpoint_bytes(mut self, checkpoint_bytes: u64) -> Config {
        self.checkpoint_bytes = checkpoint_bytes;
        self
    }

    /// Sets [`Config::json_limits`].
    pub fn json_limits(mut self, json_limits: JsonLimits) -> Config {
        self.json_limits = json_limits;
        self
    }

    /// Sets [`Config::invariants`].
    pub fn invariants(mut self, invariants: InvariantMode) -> Config {
        self.invariants = invariants;
        self
    }

    /// Sets [`Config::repair_on_resume`].
    pub fn repair_on_resume(mut self, repair_on_resume: bool) -> Config {
        self.repair_on_resume = repair_on_resume;
        self
    }

    /// Sets [`Config::check_index`].
    pub fn check_index(mut self, check_index: bool) -> Config {
        self.check_index = check_index;
        self
    }

    /// The same configuration on another file system (the simulator's, for fault injection).
    #[cfg(feature = "internals")]
    pub fn with_fs(mut self, fs: Arc<dyn FileSystem>) -> Config {
        self.fs = fs;
        self
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            durability: Durability::Sync,
            recovery: RecoveryMode::TolerateTornTail,
            read_only: false,
            segment_bytes: 64 << 20,
            max_event_bytes: 16 << 20,
            max_frame_bytes: 256 << 20,
            batch_bytes: 1 << 20,
            compress_threshold: 512,
            zstd_level: 1,
            checkpoint_bytes: 16 << 20,
            json_limits: JsonLimits::default(),
            invariants: InvariantMode::Always,
            repair_on_resume: true,
            projections: ProjectionSet::builtin(),
            projection_checkpoints: CheckpointPolicy::default(),
            fs: Arc::new(StdFileSystem),
            check_index: false,
        }
    }
}

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

/// A session as listed by [`Store::sessions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The header.
    pub header: SessionHeader,
    /// Number of events (= next seq).
    pub event_count: Seq,
    /// Total bytes of `data` text.
    pub data_bytes: u64,
    /// `time` of the last event.
    pub last_time: i64,
    /// Number of surface nodes.
    pub surface_len: u64,
    /// Number of surface replacements.
    pub replace_generation: u64,
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
    cores: Mutex<HashMap<u64, Arc<Mutex<Core>>>>,
    overlay: HashMap<(u64, Seq), Location>,
    report: RecoveryReport,
    limits: FrameLimits,
    timer: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
    listeners: RwLock<Vec<(u64, Listener)>>,
    next_listener: AtomicU64,
    listener_failures: AtomicU64,
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
        let store_lock = lock::StoreLock::acquire(&dir.join(LOCK_FILE), writable)?;
        let segments = Arc::new(
            Segments::new(config.fs.clone(), dir.join(SEGMENTS_DIR), writable)
                .map_err(io(dir.join(SEGMENTS_DIR)))?,
        );
        let limits = FrameLimits {
            max_frame_bytes: config.max_frame_bytes,
        };
        let (index, recovered) = open_index(&dir, &segments, &config, limits)?;
        let index = Arc::new(index);
        let committer = writable.then(|| {
            Arc::new(Committer::new(
                segments.clone(),
                index.clone(),
                CommitConfig {
                    segment_bytes: config.segment_bytes,
                    compress_threshold: config.compress_threshold,
                    zstd_level: config.zstd_level,
                    checkpoint_bytes: config.checkpoint_bytes,
                    frame_bytes: FRAME_BYTES.min(config.max_frame_bytes as usize),
                    max_record_bytes: config.max_frame_bytes as usize,
                },
                recovered.active,
                recovered.next_segment,
                recovered.watermark,
            ))
        });
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
            cores: Mutex::new(HashMap::new()),
            overlay,
            report: recovered.report,
            limits,
            timer,
            listeners: RwLock::new(Vec::new()),
            next_listener: AtomicU64::new(1),
            listener_failures: AtomicU64::new(0),
            _lock: store_lock,
        };
        if !writable {
            store.catch_up_in_memory();
        }
        if writable {
            // Damaged sessions are reported in `catch_up_failures`; what fails here is
            // writing the replayed state (an I/O error or a poisoned committer).
            store.catch_up().map_err(|e| OpenError::Io {
                path: store.dir.clone(),
                source: std::io::Error::other(format!(
                    "writing session state replayed after recovery failed: {e}"
                )),
            })?;
        }
        Ok(store)
    }

    /// Brings every session's surface table and state checkpoint up to its last event (after
    /// recovery indexed a tail without them), then checkpoints the index.
    fn catch_up(&mut self) -> Result<(), AppendError> {
        let mut failures = Vec::new();
        let result = self.catch_up_into(&mut failures);
        self.report.catch_up_failures = failures;
        result
    }

    /// A read-only open's catch-up: every session whose surface the index does not cover to
    /// its last event (a crashed writer's tail, or an index rebuilt in memory) gets its state
    /// folded in memory, so counters such as the surface length are right. Nothing is
    /// written; a session whose replay fails is reported in `catch_up_failures`.
    fn catch_up_in_memory(&mut self) {
        let behind: Vec<u64> = self
            .registry()
            .live()
            .iter()
            .filter(|r| r.surface_covered < r.next_seq)
            .map(|r| r.number)
            .collect();
        let mut failures = Vec::new();
        for number in behind {
            let mut core = Core::default();
            match self.load_state_read_only(number, &mut core) {
                Ok(()) => {
                    let row = self.registry().get(number).cloned();
                    if let (Some(mut row), Some(state)) = (row, core.state.as_ref()) {
                        set_surface(&mut row, state);
                        self.registry_mut().put(row);
                    }
                    lock(&self.cores).insert(number, Arc::new(Mutex::new(core)));
                }
                Err(e) => {
                    let id = self
                        .registry()
                        .get(number)
                        .map(|r| r.header.id.clone())
                        .unwrap_or_default();
                    failures.push((id, e.to_string()));
                }
            }
        }
        self.report.catch_up_failures = failures;
    }

    fn catch_up_into(&self, failures: &mut Vec<(String, String)>) -> Result<(), AppendError> {
        let behind: Vec<u64> = self
            .registry()
            .live()
            .iter()
            .filter(|r| {
                r.surface_covered < r.next_seq
                    || self.state_covered(r.number) < r.next_seq
                    || self.projections_covered(r.number) < r.next_seq
            })
            .map(|r| r.number)
            .collect();
        if behind.is_empty() {
            return Ok(());
        }
        for number in behind {
            let core = self.core(number);
            let mut core = lock(&core);
            // One damaged session must not keep the store from opening: its error is
            // reported and comes back when the session is used.
            match self
                .ensure_state(number, &mut core)
                .and_then(|()| self.ensure_projections(number, &mut core))
            {
                Ok(()) => self.checkpoint_state(number, &mut core)?,
                Err(e @ AppendError::PreviousIo(_)) => return Err(e),
                Err(e) => {
                    let id = self
                        .registry()
                        .get(number)
                        .map(|r| r.header.id.clone())
                        .unwrap_or_default();
                    failures.push((id, e.to_string()));
                }
            }
        }
        // Not durable: if this is lost in a crash, the next open catches up again.
        let c = self.committer()?;
        c.commit(c.staged_lsn(), Goal::Written, false)
    }

    /// The least seq the projection checkpoints of a session cover (0 when one is missing).
    fn projections_covered(&self, number: u64) -> Seq {
        let rows = self.index.projections(number).unwrap_or_default();
        let keys = self.config.projections.len();
        if rows.len() < keys {
            return 0;
        }
        rows.iter()
            .filter_map(|(key, record)| Checkpoint::from_record(key.clone(), record).ok())
            .map(|cp| cp.covered)
            .min()
            .unwrap_or(0)
    }

    fn state_covered(&self, number: u64) -> Seq {
        self.index
            .state(number)
            .ok()
            .flatten()
            .map_or(0, |(c, _)| c)
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

    /// Creates a session with per-session options. Its id must be new and non-empty.
    pub(crate) fn stage_create(
        &self,
        header: SessionHeader,
        options: SessionOptions,
    ) -> Result<Receipt, AppendError> {
        let committer = self.committer()?;
        validate_header(&header)?;
        let mut registry = self.registry_mut();
        let number = registry.next_number();
        let record = Record::CreateSession {
            session: number,
            header: header.clone(),
        };
        let bytes = encode(&record)?;
        self.check_fits(&bytes, "session record")?;
        let rows = registry
            .create(number, header.clone(), None)
            .map_err(|_| AppendError::SessionExists(header.id.clone()))?;
        let lsn = committer.stage(Stage {
            records: vec![(bytes, None)],
            ops: Vec::new(),
            rows,
        })?;
        drop(registry);
        let core = self.core(number);
        {
            let mut core = lock(&core);
            core.state = Some(SessionState::with_invariants(
                options.invariants.unwrap_or(self.config.invariants),
            ));
            core.projections = Some(self.config.projections.fresh());
        }
        self.finish(lsn, 0)
    }

    /// Imports a whole stored session (e.g. read from a dsh file): validates it the way
    /// dsh's loader does (format version, vocabulary, legacy shapes, envelope, surface; not
    /// the turn/step invariants), then writes it as one operation: after a crash at any byte
    /// the session is either absent or complete. Nothing is written when validation fails.
    /// The session's later appends enforce `invariants` (default: the store's setting).
    pub(crate) fn import_stored(
        &self,
        header: SessionHeader,
        events: Vec<Event>,
        invariants: Option<InvariantMode>,
    ) -> Result<Receipt, ImportError> {
        let committer = self.committer()?;
        let id = header.id.clone();
        let loaded = crate::session::load::load_stored(&id, &header, &events, InvariantMode::Off)?;
        let mut state = loaded.state;
        let mut projections = self
            .config
            .projections
            .fold_all(loaded.view.apply(&events).iter())
            .map_err(|e| AppendError::Semantics {
                session: id.clone(),
                seq: 0,
                reason: e.to_string(),
            })?;
        validate_header(&header)?;
        for e in &events {
            let size = e.data.len() as u64;
            if size > self.config.max_event_bytes {
                return Err(ImportError::Append(AppendError::TooLarge {
                    session: id.clone(),
                    kind: e.kind.clone(),
                    size,
                    limit: self.config.max_event_bytes,
                }));
            }
        }
        state.set_invariant_mode(invariants.unwrap_or(self.config.invariants));
        let mut registry = self.registry_mut();
        let number = registry.next_number();
        // Encode (and size-check) every record before anything changes.
        let mut event_records = Vec::with_capacity(events.len());
        for e in events {
            let bytes = self.encode_event_checked(number, &e)?;
            event_records.push((bytes, Some((number, Arc::new(e)))));
        }
        let mut rows = registry
            .create(number, header.clone(), None)
            .map_err(|_| AppendError::SessionExists(id.clone()))?;
        let mut records = vec![(
            encode(&Record::CreateSession {
                session: number,
                header,
            })?,
            None,
        )];
        for (_, e) in &event_records {
            let Some((_, e)) = e else { continue };
            registry
                .event(number, e.seq, e.time, e.data.len())
                .map_err(|err| AppendError::WrongSeq {
                    session: id.clone(),
                    got: e.seq,
                    expected: match err {
                        registry::RegistryError::Gap { expected, .. } => expected,
                        _ => 0,
                    },
                })?;
        }
        let mut row = registry
            .get(number)
            .cloned()
            .ok_or_else(|| AppendError::NoSuchSession(id.clone()))?;
        set_surface(&mut row, &state);
        registry.put(row.clone());
        rows.push(row);
        let nodes = state.surface().nodes();
        let mut ops: Vec<IndexOp> = nodes
            .iter()
            .enumerate()
            .map(|(i, &seq)| IndexOp::Link {
                session: number,
                seq,
                prev: if i == 0 { NO_NODE } else { nodes[i - 1] },
                next: nodes.get(i + 1).copied().unwrap_or(NO_NODE),
            })
            .collect();
        ops.push(IndexOp::State {
            session: number,
            covered: state.next_seq(),
            bytes: state_bytes(&state)?,
        });
        ops.extend(projection_ops(
            &self.config.projections,
            number,
            &mut projections,
        ));
        // The whole session is one operation: the committer writes it as one frame or as
        // several continued frames, which recovery keeps whole or not at all.
        records.extend(event_records);
        let lsn = committer.stage(Stage { records, ops, rows })?;
        drop(registry);
        let core = self.core(number);
        let mut core = lock(&core);
        core.checkpointed = state.next_seq();
        let last = state.next_seq().saturating_sub(1);
        core.state = Some(state);
        core.projections = Some(projections);
        drop(core);
        Ok(self.finish(lsn, last)?)
    }

    /// Appends events to a session atomically: all are validated first, then staged together
    /// as one operation (one frame, or continued frames when larger than a frame; recovery
    /// keeps an operation whole or drops it); on any error nothing is written and nothing
    /// changes. A record larger than `Config::max_frame_bytes` is refused
    /// ([`AppendError::RecordTooLarge`]).
    pub(crate) fn append_to(&self, session: &str, events: Vec<Event>) -> Result<Receipt, AppendError> {
        let number = self
            .number_of(session)
            .ok_or_else(|| AppendError::NoSuchSession(session.to_owned()))?;
        let core = self.core(number);
        let mut core = lock(&core);
        self.append_locked(session, number, &mut core, events)
    }

    /// The append pipeline, with the session's core locked.
    pub(crate) fn append_locked(
        &self,
        session: &str,
        number: u64,
        core: &mut Core,
        events: Vec<Event>,
    ) -> Result<Receipt, AppendError> {
        let committer = self.committer()?;
        self.ensure_state(number, core)?;
        self.ensure_projections(number, core)?;
        let Some(real) = core.state.as_mut() else {
            return Err(AppendError::NoSuchSession(session.to_owned()));
        };
        let semantics = |seq: Seq, e: String| AppendError::Semantics {
            session: session.to_owned(),
            seq,
            reason: e,
        };
        // A batch plans on a scratch copy so that a failure leaves the state untouched.
        let batched = events.len() > 1;
        let mut scratch = batched.then(|| real.clone());
        let mut ops = Vec::new();
        let mut records = Vec::with_capacity(events.len());
        let mut planned: Vec<Event> = Vec::with_capacity(events.len());
        let mut checkpoint_due = false;
        for event in events {
            let state = scratch.as_mut().unwrap_or(&mut *real);
            let expected = state.next_seq();
            self.validate_event(session, &event, expected)?;
            let lookup = StoreLookup {
                store: self,
                number,
                batch: &planned,
            };
            // `validate_event` ran the lossless-JSON check with the store's limits.
            let plan = state
                .plan_append_prevalidated(&event, &lookup)
                .map_err(|e| semantics(expected, e.to_string()))?;
            if !batched {
                // A single event: encode before applying, so an encoding error changes nothing.
                records.push(self.encode_event_checked(number, &event)?);
            }
            let applied = state
                .apply(plan)
                .map_err(|e| semantics(expected, e.to_string()))?;
            if let Some(change) = &applied.surface {
                surface_ops(number, state.surface().nodes(), change, &mut ops);
            }
            checkpoint_due |= event.kind == "turn/end";
            if batched {
                records.push(self.encode_event_checked(number, &event)?);
            }
            planned.push(event);
        }
        if let Some(s) = scratch {
            *real = s;
        }
        let state = &*real;
        checkpoint_due |= state.next_seq() >= core.checkpointed + STATE_CHECKPOINT_EVENTS;
        if checkpoint_due {
            ops.push(IndexOp::State {
                session: number,
                covered: state.next_seq(),
                bytes: state_bytes(state)?,
            });
        }
        if let Some(projections) = core.projections.as_mut() {
            let mut due = false;
            for e in &planned {
                self.config
                    .projections
                    .apply(projections, e)
                    .map_err(|err| semantics(e.seq, err.to_string()))?;
                due |= self.config.projection_checkpoints.due(projections, e);
            }
            if due {
                ops.extend(projection_ops(
                    &self.config.projections,
                    number,
                    projections,
                ));
            }
        }
        let mut registry = self.registry_mut();
        for e in &planned {
            registry
                .event(number, e.seq, e.time, e.data.len())
                .map_err(|err| semantics(e.seq, err.to_string()))?;
        }
        let row = match registry.get(number) {
            Some(r) => {
                let mut r = r.clone();
                set_surface(&mut r, state);
                r
            }
            None => return Err(AppendError::NoSuchSession(session.to_owned())),
        };
        registry.put(row.clone());
        let last_seq = planned
            .last()
            .map_or(state.next_seq().saturating_sub(1), |e| e.seq);
        let planned: Vec<Arc<Event>> = planned.into_iter().map(Arc::new).collect();
        let lsn = committer.stage(Stage {
            records: records
                .into_iter()
                .zip(planned.iter())
                .map(|(bytes, e)| (bytes, Some((number, e.clone()))))
                .collect(),
            ops,
            rows: vec![row],
        })?;
        drop(registry);
        if checkpoint_due {
            core.checkpointed = state.next_seq();
        }
        for e in &planned {
            let _ = core.messages.observe(state.surface(), e);
        }
        self.publish(session, &planned);
        self.finish(lsn, last_seq)
    }

    /// Loads a session's state: its checkpoint, then a replay of the events after it (and,
    /// for events the surface table does not cover yet, the surface updates).
    pub(crate) fn ensure_state(&self, number: u64, core: &mut Core) -> Result<(), AppendError> {
        if core.state.is_some() {
            return Ok(());
        }
        let row = self
            .registry()
            .get(number)
            .cloned()
            .ok_or(AppendError::NoSuchSession(format!("#{number}")))?;
        // A checkpoint that cannot be read or decoded costs a replay from seq 0, never an error.
        let (covered, mut state) = match self.state_checkpoint(number, row.next_seq) {
            Some(checkpoint) => checkpoint,
            None => (0, SessionState::with_invariants(InvariantMode::Off)),
        };
        let replay_failed = |seq: Seq, e: String| AppendError::Semantics {
            session: row.header.id.to_string(),
            seq,
            reason: format!("replaying the stored log failed: {e}"),
        };
        let mut ops = Vec::new();
        if covered == 0 && row.next_seq > 0 {
            // No checkpoint (index rebuilt, or a crash during an import): load the whole log
            // the way dsh's loader does, then relink the whole surface.
            let mut cache = FrameCache::default();
            let mut events = Vec::with_capacity(row.next_seq.min(1 << 20) as usize);
            for seq in 0..row.next_seq {
                let mut event = self
                    .read_resolved(number, seq, &mut cache)
                    .map_err(|e| replay_failed(seq, e.to_string()))?;
                // Replay accepts every type the engine accepted on append (unknown types
                // are legal in a live session; only dsh's import refuses them).
                if !crate::session::known::is_known_event_type(&event.kind) {
                    event.ignorable = true;
                }
                events.push(event);
            }
            let loaded = crate::session::load::load_stored(
                &row.header.id,
                &row.header,
                &events,
                InvariantMode::Off,
            )
            .map_err(|e| replay_failed(0, e.to_string()))?;
            state = loaded.state;
            state.set_invariant_mode(self.config.invariants);
            for (seq, prev, next) in self.index.surface_links(number)? {
                let _ = (prev, next);
                ops.push(IndexOp::Unlink {
                    session: number,
                    seq,
                });
            }
            let nodes = state.surface().nodes();
            for (i, &seq) in nodes.iter().enumerate() {
                ops.push(IndexOp::Link {
                    session: number,
                    seq,
                    prev: if i == 0 { NO_NODE } else { nodes[i - 1] },
                    next: nodes.get(i + 1).copied().unwrap_or(NO_NODE),
                });
            }
        } else if covered < row.next_seq {
            let mode = state.invariant_mode();
            state.set_invariant_mode(InvariantMode::Off);
            let mut cache = FrameCache::default();
            for seq in covered..row.next_seq {
                let event = self
                    .read_resolved(number, seq, &mut cache)
                    .map_err(|e| replay_failed(seq, e.to_string()))?;
                let lookup = StoreLookup {
                    store: self,
                    number,
                    batch: &[],
                };
                let applied = state
                    .append(&event, &lookup)
                    .map_err(|e| replay_failed(seq, e.to_string()))?;
                if seq >= row.surface_covered
                    && let Some(change) = &applied.surface
                {
                    surface_ops(number, state.surface().nodes(), change, &mut ops);
                }
            }
            state.set_invariant_mode(mode);
        }
        if row.surface_covered < row.next_seq && self.committer.is_some() {
            let mut row = row.clone();
            set_surface(&mut row, &state);
            self.registry_mut().put(row.clone());
            self.committer()?.stage(Stage {
                records: Vec::new(),
                ops,
                rows: vec![row],
            })?;
        }
        core.checkpointed = covered;
        core.state = Some(state);
        Ok(())
    }

    /// Loads a session's projection states: the checkpoints in the index, then a replay of
    /// the events after them (the restore ladder). Rebuilt units are checkpointed again.
    pub(crate) fn ensure_projections(
        &self,
        number: u64,
        core: &mut Core,
    ) -> Result<(), AppendError> {
        if core.projections.is_some() {
            return Ok(());
        }
        let len = self.registry().get(number).map_or(0, |r| r.next_seq);
        let (mut restored, replayed) =
            self.restore_projections(number, len)
                .map_err(|e| AppendError::Semantics {
                    session: format!("#{number}"),
                    seq: 0,
                    reason: format!("restoring projections failed: {e}"),
                })?;
        if (replayed || restored.rebuilt_any()) && self.committer.is_some() {
            let ops = projection_ops(&self.config.projections, number, &mut restored.states);
            self.committer()?.stage(Stage {
                records: Vec::new(),
                ops,
                rows: Vec::new(),
            })?;
        }
        core.projections = Some(restored.states);
        Ok(())
    }

    /// Checkpoints + replay for one session, without touching the core. Returns whether any
    /// event had to be replayed (i.e. a segment was read).
    fn restore_projections(
        &self,
        number: u64,
        len: Seq,
    ) -> Result<(crate::projection::Restored, bool), ReadError> {
        let rows: Vec<Checkpoint> = self
            .index
            .projections(number)?
            .into_iter()
            .filter_map(|(key, record)| Checkpoint::from_record(key, &record).ok())
            .collect();
        let mut restored = self.config.projections.restore(rows, len);
        let from = restored.replay_from;
        if from < len {
            let lookup = StoreLookup {
                store: self,
                number,
                batch: &[],
            };
            let mut cache = FrameCache::default();
            let events = (from..len).map(|seq| match lookup.event_at_cached(seq, &mut cache) {
                Ok(Some(e)) => Ok(e.into_owned()),
                Ok(None) => Err(ReadError::NoSuchSession(format!("#{number} seq {seq}"))),
                Err(e) => Err(ReadError::Corruption {
                    position: LogPosition::default(),
                    detail: e.to_string(),
                }),
            });
            self.config
                .projections
                .replay(&mut restored.states, events)
                .map_err(|e| ReadError::Corruption {
                    position: LogPosition::default(),
                    detail: e.to_string(),
                })?;
        }
        Ok((restored, from < len))
    }

    /// Every live session with its counters and the views of the registered projections
    /// (title, stats, ...). Reads only the in-memory registry and the index's checkpoints:
    /// after a clean close or a catch-up, no segment is opened.
    pub fn list(&self) -> Result<Vec<Listed>, ReadError> {
        let mut out = Vec::new();
        for info in self.sessions() {
            let Some(number) = self.number_of(&info.header.id) else {
                continue;
            };
            let core = self.core(number);
            let views = {
                let core = lock(&core);
                core.projections
                    .as_ref()
                    .map(|p| self.config.projections.views(p))
            };
            let views = match views {
                Some(v) => v,
                None => {
                    let (restored, _) = self.restore_projections(number, info.event_count)?;
                    self.config.projections.views(&restored.states)
                }
            };
            out.push(Listed { info, views });
        }
        Ok(out)
    }

    /// The views of the registered projections for one session.
    pub fn projection_views(&self, session: &str) -> Result<Vec<(String, String)>, ReadError> {
        let (number, len) = self.number(session)?;
        let core = self.core(number);
        if let Some(p) = lock(&core).projections.as_ref() {
            return Ok(self.config.projections.views(p));
        }
        let (restored, _) = self.restore_projections(number, len)?;
        Ok(self.config.projections.views(&restored.states))
    }

    /// Writes a state checkpoint for the session when it is behind.
    pub(crate) fn checkpoint_state(&self, number: u64, core: &mut Core) -> Result<(), AppendError> {
        if let Some(p) = core.projections.as_mut()
            && p.since_checkpoint() > 0
        {
            let ops = projection_ops(&self.config.projections, number, p);
            self.committer()?.stage(Stage {
                records: Vec::new(),
                ops,
                rows: Vec::new(),
            })?;
        }
        let Some(state) = core.state.as_ref() else {
            return Ok(());
        };
        if core.checkpointed >= state.next_seq() && self.state_covered(number) >= state.next_seq() {
            return Ok(());
        }
        self.committer()?.stage(Stage {
            records: Vec::new(),
            ops: vec![IndexOp::State {
                session: number,
                covered: state.next_seq(),
                bytes: state_bytes(state)?,
            }],
            rows: Vec::new(),
        })?;
        core.checkpointed = state.next_seq();
        Ok(())
    }

    fn publish(&self, session: &str, events: &[Arc<Event>]) {
        let listeners: Vec<Listener> = self
            .listeners
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(_, l)| l.clone())
            .collect();
        for listener in listeners {
            for e in events {
                let call = std::panic::AssertUnwindSafe(|| listener(session, e));
                if std::panic::catch_unwind(call).is_err() {
                    self.listener_failures.fetch_add(1, Ordering::Relaxed);
                    eprintln!(
                        "sessionlog: a session/event listener panicked on {session:?} seq {}; the append stands",
                        e.seq
                    );
                }
            }
        }
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

    /// Applies the durability mode after staging.
    pub(crate) fn finish(&self, lsn: u64, seq: Seq) -> Result<Receipt, AppendError> {
        let committer = self.committer()?;
        match self.config.durability {
            Durability::Sync => {
                committer.commit(lsn, Goal::Durable, false)?;
                Ok(Receipt {
                    seq,
                    lsn,
                    durable: true,
                })
            }
            Durability::Group { .. } => {
                let limit = GROUP_BACKPRESSURE_FRAMES
                    * FRAME_BYTES.min(self.config.max_frame_bytes as usize);
                if committer.staged_bytes() >= limit {
                    committer.commit(lsn, Goal::Written, false)?;
                }
                Ok(Receipt {
                    seq,
                    lsn,
                    durable: committer.is_durable(lsn),
                })
            }
            Durability::Buffered => {
                if committer.staged_bytes() >= self.config.batch_bytes {
                    committer.commit(lsn, Goal::Written, false)?;
                }
                Ok(Receipt {
                    seq,
                    lsn,
                    durable: committer.is_durable(lsn),
                })
            }
        }
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

    /// Encodes an event record, refusing one that would not fit in a frame.
    fn encode_event_checked(&self, number: u64, event: &Event) -> Result<Vec<u8>, AppendError> {
        let bytes = encode_event(number, event)?;
        self.check_fits(&bytes, &event.kind)?;
        Ok(bytes)
    }

    /// Refuses an encoded record that would not fit in a frame (`kind` names it).
    pub(crate) fn check_fits(&self, record: &[u8], kind: &str) -> Result<(), AppendError> {
        if record.len() > self.config.max_frame_bytes as usize {
            return Err(AppendError::RecordTooLarge {
                kind: kind.to_owned(),
                size: record.len() as u64,
                limit: u64::from(self.config.max_frame_bytes),
            });
        }
        Ok(())
    }

    fn validate_event(
        &self,
        session: &str,
        event: &Event,
        expected: Seq,
    ) -> Result<(), AppendError> {
        let envelope = |reason: String| AppendError::Envelope {
            session: session.to_owned(),
            kind: event.kind.clone(),
            seq: expected,
            reason,
        };
        if event.seq != expected {
            return Err(AppendError::WrongSeq {
                session: session.to_owned(),
                got: event.seq,
                expected,
            });
        }
        if event.time.unsigned_abs() > MAX_SAFE_INTEGER as u64 {
            return Err(envelope(format!(
                "time {} is not a safe integer",
                event.time
            )));
        }
        let size = event.data.len() as u64;
        if size > self.config.max_event_bytes {
            return Err(AppendError::TooLarge {
                session: session.to_owned(),
                kind: event.kind.clone(),
                size,
                limit: self.config.max_event_bytes,
            });
        }
        json::validate(&event.data, &self.config.json_limits).map_err(|e| AppendError::BadData {
            session: session.to_owned(),
            kind: event.kind.clone(),
            seq: expected,
            reason: e.to_string(),
        })
    }

    fn number(&self, session: &str) -> Result<(u64, Seq), ReadError> {
        let registry = self.registry();
        let row = registry
            .by_id(session)
            .ok_or_else(|| ReadError::NoSuchSession(session.to_owned()))?;
        Ok((row.number, row.next_seq))
    }

    /// Reads one event (`None` when `seq` is past the session's end).
    pub fn get(&self, session: &str, seq: Seq) -> Result<Option<Event>, ReadError> {
        let (number, next) = self.number(session)?;
        if seq >= next {
            return Ok(None);
        }
        self.read_resolved(number, seq, &mut FrameCache::default())
            .map(Some)
    }

    /// Reads `seq` of session `number`, following fork links to the session that stores it.
    pub(crate) fn read_resolved(
        &self,
        number: u64,
        seq: Seq,
        cache: &mut FrameCache,
    ) -> Result<Event, ReadError> {
        let owner = self.registry().resolve(number, seq);
        self.read_one(owner, seq, cache)
    }

    fn read_one(&self, number: u64, seq: Seq, cache: &mut FrameCache) -> Result<Event, ReadError> {
        if let Some(e) = self.committer.as_ref().and_then(|c| c.pending(number, seq)) {
            return Ok((*e).clone());
        }
        let run = match self.overlay.get(&(number, seq)) {
            Some(l) => Run::single(seq, *l),
            None => self.index.run(number, seq)?.ok_or_else(|| {
                ReadError::Index(IndexError::Damaged {
                    table: "events",
                    detail: format!("there is no location for session number {number} seq {seq}"),
                })
            })?,
        };
        self.read_at(number, seq, run, cache)
    }

    /// Reads event `seq` of session `number` from `run` (which holds it): decodes the run's
    /// frame (once, through `cache`) and walks its records from the run's first record, or
    /// from just past the previous event of the session read from that frame, to the record
    /// of `seq`. Reading a run in seq order decodes each of its records once.
    fn read_at(
        &self,
        number: u64,
        seq: Seq,
        run: Run,
        cache: &mut FrameCache,
    ) -> Result<Event, ReadError> {
        let loc = run.location;
        let position = loc.position();
        let payload = cache.get(&self.segments, loc, &self.limits)?;
        let corrupt = |detail: String| ReadError::Corruption { position, detail };
        let mut at = match cache.cursor {
            Some((session, last, end)) if session == number && last < seq => end,
            _ => loc.record_offset as usize,
        };
        loop {
            let bytes = payload.get(at..).ok_or_else(|| {
                corrupt(format!(
                    "record offset {at} is past the frame payload ({} bytes)",
                    payload.len()
                ))
            })?;
            if bytes.is_empty() {
                return Err(corrupt(format!(
                    "event seq {seq} of session number {number} is not in the frame (the index run starts at seq {} record offset {})",
                    run.first_seq, loc.record_offset
                )));
            }
            let (record, rest) =
                Record::decode(bytes).map_err(|e| corrupt(format!("record offset {at}: {e}")))?;
            let next = payload.len() - rest.len();
            if let Record::Event { session, event } = record
                && session == number
            {
                if event.seq == seq {
                    cache.cursor = Some((number, seq, next));
                    return Ok(Event::from(event));
                }
                if event.seq > seq {
                    return Err(corrupt(format!(
                        "the record at record offset {at} is event seq {} of session number {number}, past seq {seq} (the index run starts at seq {} record offset {})",
                        event.seq, run.first_seq, loc.record_offset
                    )));
                }
            }
            at = next;
        }
    }

    /// Reads a session's events with seq in `range`, in seq order, in bounded chunks (the whole
    /// log is never loaded).
    pub fn events(
        &self,
        session: &str,
        range: std::ops::Range<Seq>,
    ) -> Result<Events<'_>, ReadError> {
        let (number, next) = self.number(session)?;
        Ok(Events {
            store: self,
            number,
            next: range.start,
            end: range.end.min(next),
            buffered: std::collections::VecDeque::new(),
            cache: FrameCache::default(),
        })
    }

    /// Every live session with its counters, in creation order. Reads only the in-memory
    /// registry (no segment is opened).
    pub fn sessions(&self) -> Vec<SessionInfo> {
        self.registry()
            .live()
            .into_iter()
            .map(|r| SessionInfo {
                header: (*r.header).clone(),
                event_count: r.next_seq,
                data_bytes: r.data_bytes,
                last_time: r.last_time,
                surface_len: r.surface_len,
                replace_generation: r.replace_generation,
            })
            .collect()
    }

    /// The header of a session.
    pub fn header(&self, session: &str) -> Option<SessionHeader> {
        self.registry().by_id(session).map(|r| (*r.header).clone())
    }

    /// Number of events in a session.
    pub fn len(&self, session: &str) -> Option<Seq> {
        self.number(session).ok().map(|(_, n)| n)
    }

    /// The surface (model-visible node seqs, in order) of a session, walked from the index's
    /// linked list: no event is read.
    pub fn surface(&self, session: &str) -> Result<Vec<Seq>, ReadError> {
        let (number, _) = self.number(session)?;
        let core = self.core(number);
        let core = lock(&core);
        if let Some(state) = &core.state {
            return Ok(state.surface().nodes().to_vec());
        }
        drop(core);
        self.surface_from_index(number)
    }

    fn surface_from_index(&self, number: u64) -> Result<Vec<Seq>, ReadError> {
        let row = self
            .registry()
            .get(number)
            .cloned()
            .ok_or_else(|| ReadError::NoSuchSession(format!("#{number}")))?;
        if row.surface_covered < row.next_seq {
            // Only a read-only open after a crash gets here: fold the state in memory.
            let mut core = Core::default();
            self.load_state_read_only(number, &mut core)?;
            return Ok(core
                .state
                .map(|s| s.surface().nodes().to_vec())
                .unwrap_or_default());
        }
        let links: HashMap<Seq, (Seq, Seq)> = self
            .index
            .surface_links(number)?
            .into_iter()
            .map(|(seq, prev, next)| (seq, (prev, next)))
            .collect();
        let mut nodes = Vec::with_capacity(links.len());
        let mut at = row.surface_head;
        while at != NO_NODE {
            let Some(&(_, next)) = links.get(&at) else {
                return Err(ReadError::Index(IndexError::Damaged {
                    table: "surface",
                    detail: format!("surface node {at} of session number {number} is missing"),
                }));
            };
            nodes.push(at);
            if nodes.len() > links.len() {
                return Err(ReadError::Index(IndexError::Damaged {
                    table: "surface",
                    detail: format!("the surface list of session number {number} has a cycle"),
                }));
            }
            at = next;
        }
        Ok(nodes)
    }

    /// The session's state checkpoint `(covered seq, state)`, when there is a usable one.
    ///
    /// The checkpoint is derived data: any failure to read it from the index, to decode it (a
    /// bad length, checksum or encoding), or a `covered` seq beyond the session's log gives
    /// `None`, and the caller replays the session from seq 0 — as the projections fall back
    /// to a replay (`restore_projections`).
    fn state_checkpoint(&self, number: u64, next_seq: Seq) -> Option<(Seq, SessionState)> {
        let (covered, bytes) = self.index.state(number).ok().flatten()?;
        if covered > next_seq {
            return None;
        }
        let state = SessionState::from_bytes(&bytes).ok()?;
        Some((covered, state))
    }

    fn load_state_read_only(&self, number: u64, core: &mut Core) -> Result<(), ReadError> {
        let registry_row = self.registry().get(number).cloned();
        let Some(row) = registry_row else {
            return Err(ReadError::NoSuchSession(format!("#{number}")));
        };
        // As in `ensure_state`: an unusable checkpoint means a replay from seq 0.
        let (covered, mut state) = match self.state_checkpoint(number, row.next_seq) {
            Some(checkpoint) => checkpoint,
            None => (0, SessionState::with_invariants(InvariantMode::Off)),
        };
        state.set_invariant_mode(InvariantMode::Off);
        let mut cache = FrameCache::default();
        for seq in covered..row.next_seq {
            let event = self.read_resolved(number, seq, &mut cache)?;
            let lookup = StoreLookup {
                store: self,
                number,
                batch: &[],
            };
            state
                .append(&event, &lookup)
                .map_err(|e| ReadError::Derive(format!("replaying seq {seq} failed: {e}")))?;
        }
        core.state = Some(state);
        Ok(())
    }

    /// The session's messages as dsh's `deriveMessages` gives them, reading only the surface
    /// events (by offset from the index), never the whole log.
    pub fn messages(&self, session: &str) -> Result<Vec<DerivedMessage>, ReadError> {
        let (number, _) = self.number(session)?;
        let core = self.core(number);
        let mut core = lock(&core);
        if let Some(state) = core.state.take() {
            let lookup = StoreLookup {
                store: self,
                number,
                batch: &[],
            };
            let result = core.messages.refresh(state.surface(), &lookup);
            core.state = Some(state);
            result.map_err(derive_error)?;
            return Ok(core.messages.messages().to_vec());
        }
        drop(core);
        let nodes = self.surface_from_index(number)?;
        let lookup = StoreLookup {
            store: self,
            number,
            batch: &[],
        };
        crate::session::derive::derive_messages(&nodes, &lookup).map_err(derive_error)
    }

    /// The session's replace generation (number of surface replacements).
    pub fn replace_generation(&self, session: &str) -> Result<u64, ReadError> {
        let registry = self.registry();
        let row = registry
            .by_id(session)
            .ok_or_else(|| ReadError::NoSuchSession(session.to_owned()))?;
        if row.surface_covered < row.next_seq {
            let number = row.number;
            drop(registry);
            let mut core = Core::default();
            self.load_state_read_only(number, &mut core)?;
            return Ok(core.state.map_or(0, |s| s.surface().replace_generation()));
        }
        Ok(row.replace_generation)
    }

    /// Syncs everything and commits the index durably. Dropping the store does the same,
    /// ignoring errors; call `close` to see them.
    pub fn close(mut self) -> Result<(), AppendError> {
        self.shutdown()
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

    fn shutdown(&mut self) -> Result<(), AppendError> {
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
        if !c.needs_checkpoint() {
            return Ok(());
        }
        c.commit(c.staged_lsn(), Goal::Durable, true)
    }

}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Events between state checkpoints (besides one at every `turn/end` and at close).
const STATE_CHECKPOINT_EVENTS: Seq = 1024;

/// Checkpoint operations for every projection of a session (and marks them written).
pub(crate) fn projection_ops(
    set: &ProjectionSet,
    number: u64,
    states: &mut SessionProjections,
) -> Vec<IndexOp> {
    let ops = set
        .checkpoint(states)
        .into_iter()
        .map(|cp| IndexOp::Projection {
            session: number,
            record: cp.to_record(),
            key: cp.key,
        })
        .collect();
    states.mark_checkpointed();
    ops
}

/// The payload size frames are filled to; a batch or import larger than this is written as
/// several frames, committed as one operation (`FLAG_CONTINUED`).
const FRAME_BYTES: usize = 8 << 20;

/// In `Group` mode, an appender that finds this many frames' worth of bytes staged writes them
/// itself before returning (backpressure: the staged bytes stay bounded when the disk is slow).
const GROUP_BACKPRESSURE_FRAMES: usize = 4;

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn encode_event(session: u64, event: &Event) -> Result<Vec<u8>, AppendError> {
    Record::encode_event(session, event)
        .map_err(|e| AppendError::Io(std::io::Error::other(e.to_string())))
}

pub(crate) fn encode(record: &Record) -> Result<Vec<u8>, AppendError> {
    let mut bytes = Vec::new();
    record
        .encode_into(&mut bytes)
        .map_err(|e| AppendError::Io(std::io::Error::other(e.to_string())))?;
    Ok(bytes)
}

pub(crate) fn state_bytes(state: &SessionState) -> Result<Vec<u8>, AppendError> {
    state.to_bytes().map_err(|e| {
        AppendError::Io(std::io::Error::other(format!(
            "encoding session state: {e}"
        )))
    })
}

fn derive_error(e: crate::session::derive::DeriveError) -> ReadError {
    ReadError::Derive(e.to_string())
}

/// Copies the surface summary of `state` into a session row.
pub(crate) fn set_surface(row: &mut SessionRow, state: &SessionState) {
    let nodes = state.surface().nodes();
    row.surface_head = nodes.first().copied().unwrap_or(NO_NODE);
    row.surface_tail = nodes.last().copied().unwrap_or(NO_NODE);
    row.surface_len = nodes.len() as u64;
    row.replace_generation = state.surface().replace_generation();
    row.surface_covered = state.next_seq();
}

/// The index operations that turn the surface before `change` into `nodes` (after it): the
/// removed nodes are unlinked; the new node and its neighbours get their links.
fn surface_ops(number: u64, nodes: &[Seq], change: &SurfaceChange, ops: &mut Vec<IndexOp>) {
    for &seq in &change.removed {
        ops.push(IndexOp::Unlink {
            session: number,
            seq,
        });
    }
    let p = change.position;
    let lo = p.saturating_sub(1);
    let hi = (p + 1).min(nodes.len().saturating_sub(1));
    for i in lo..=hi {
        let Some(&seq) = nodes.get(i) else { continue };
        let prev = if i == 0 { NO_NODE } else { nodes[i - 1] };
        let next = nodes.get(i + 1).copied().unwrap_or(NO_NODE);
        ops.push(IndexOp::Link {
            session: number,
            seq,
            prev,
            next,
        });
    }
}

/// Earlier events of a session, as the semantics ask for them: the batch being appended
/// first, then the store (following fork links).
pub(crate) struct StoreLookup<'a> {
    pub(crate) store: &'a Store,
    pub(crate) number: u64,
    pub(crate) batch: &'a [Event],
}

impl EventLookup for StoreLookup<'_> {
    fn event_at(&self, seq: Seq) -> Result<Option<std::borrow::Cow<'_, Event>>, LookupError> {
        self.event_at_cached(seq, &mut FrameCache::default())
    }
}

impl StoreLookup<'_> {
    /// [`EventLookup::event_at`] reading through `cache`, so a caller walking seqs in order
    /// decodes each frame once.
    pub(crate) fn event_at_cached(
        &self,
        seq: Seq,
        cache: &mut FrameCache,
    ) -> Result<Option<std::borrow::Cow<'_, Event>>, LookupError> {
        if let Some(e) = self.batch.iter().find(|e| e.seq == seq) {
            return Ok(Some(std::borrow::Cow::Borrowed(e)));
        }
        let len = self
            .store
            .registry()
            .get(self.number)
            .map_or(0, |r| r.next_seq);
        if seq >= len {
            return Ok(None);
        }
        let event = self
            .store
            .read_resolved(self.number, seq, cache)
            .map_err(|e| LookupError {
                seq,
                message: e.to_string(),
            })?;
        // The rules see older record shapes converted, as dsh's loader presents them.
        let id = self
            .store
            .registry()
            .get(self.number)
            .map(|r| r.header.id.clone())
            .unwrap_or_default();
        let target_id = |target: Seq| -> Option<String> {
            let e = self.event_at(target).ok()??;
            let path: &[&str] = if e.kind == "user/message" {
                &["id"]
            } else {
                &["message", "id"]
            };
            crate::json::raw_member(&e.data, path)
                .ok()
                .flatten()
                .map(str::to_owned)
        };
        match crate::session::legacy::convert_event(&id, &event, &target_id) {
            Ok(Some(converted)) => Ok(Some(std::borrow::Cow::Owned(converted))),
            _ => Ok(Some(std::borrow::Cow::Owned(event))),
        }
    }
}

/// An iterator over a session's events (see [`Store::events`]).
#[derive(Debug)]
pub struct Events<'a> {
    store: &'a Store,
    number: u64,
    next: Seq,
    end: Seq,
    buffered: std::collections::VecDeque<Run>,
    cache: FrameCache,
}

impl Iterator for Events<'_> {
    type Item = Result<Event, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.end {
            return None;
        }
        let seq = self.next;
        self.next += 1;
        let owner = self.store.registry().resolve(self.number, seq);
        if owner != self.number {
            return Some(self.store.read_one(owner, seq, &mut self.cache));
        }
        if let Some(e) = self
            .store
            .committer
            .as_ref()
            .and_then(|c| c.pending(self.number, seq))
        {
            return Some(Ok((*e).clone()));
        }
        if let Some(l) = self.store.overlay.get(&(self.number, seq)) {
            let run = Run::single(seq, *l);
            return Some(self.store.read_at(self.number, seq, run, &mut self.cache));
        }
        // The run holding `seq` is the last one starting at or before it (as in a lookup).
        while self.buffered.front().is_some_and(|r| r.end() <= seq)
            || self.buffered.get(1).is_some_and(|r| r.first_seq <= seq)
        {
            self.buffered.pop_front();
        }
        if self.buffered.is_empty() {
            match self.store.index.runs(self.number, seq, self.end, 256) {
                Ok(v) => self.buffered.extend(v),
                Err(e) => return Some(Err(e.into())),
            }
        }
        match self.buffered.front() {
            Some(r) if r.contains(seq) => {
                let r = *r;
                Some(self.store.read_at(self.number, seq, r, &mut self.cache))
            }
            _ => Some(self.store.read_one(self.number, seq, &mut self.cache)),
        }
    }
}

/// Keeps the last decoded frame, so reading neighbouring events decodes it once.
#[derive(Debug, Default)]
pub(crate) struct FrameCache {
    key: Option<(u64, u64)>,
    payload: Arc<Vec<u8>>,
    /// The last event read from this frame: (session number, seq, offset just past its
    /// record), so reading the session's next seq continues the walk from there.
    cursor: Option<(u64, Seq, usize)>,
}

impl FrameCache {
    fn get(
        &mut self,
        segments: &Segments,
        loc: Location,
        limits: &FrameLimits,
    ) -> Result<Arc<Vec<u8>>, ReadError> {
        let key = (loc.segment, loc.frame_offset);
        if self.key != Some(key) {
            self.cursor = None;
            self.key = None;
            self.payload = Arc::new(segments.read_frame(loc.position(), loc.frame_len, limits)?);
            self.key = Some(key);
        }
        Ok(self.payload.clone())
    }
}

fn validate_config(c: &Config) -> Result<(), OpenError> {
    if c.segment_bytes < 4096 {
        return Err(OpenError::Config(format!(
            "segment_bytes {} is below the minimum of 4096",
            c.segment_bytes
        )));
    }
    if c.max_event_bytes > u64::from(c.max_frame_bytes) / 2 {
        return Err(OpenError::Config(
            "max_event_bytes must be at most half of max_frame_bytes".into(),
        ));
    }
    Ok(())
}

/// The store's checks on a header it is about to write (create, import): the id limits, then
/// the one header validator, [`crate::session::header::validate_header_for_write`] (dsh's
/// `validateSessionHeader` plus its lossless-JSON boundary), so the store never writes a header
/// its own import or dsh would refuse.
fn validate_header(h: &SessionHeader) -> Result<(), AppendError> {
    if h.id.is_empty() {
        return Err(AppendError::InvalidSessionId {
            id: h.id.clone(),
            reason: "session ids must not be empty",
        });
    }
    if h.id.len() > 4096 {
        return Err(AppendError::InvalidSessionId {
            id: h.id.chars().take(64).collect(),
            reason: "session ids are at most 4096 bytes",
        });
    }
    crate::session::header::validate_header_for_write(h).map_err(|e| AppendError::InvalidHeader {
        id: h.id.clone(),
        reason: e.to_string(),
    })
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
