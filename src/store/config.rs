//! The store's options: durability, recovery, limits and tuning, with their defaults.

use super::retention::Retention;
use std::sync::Arc;
use std::time::Duration;

use crate::error::OpenError;
use crate::fs::{FileSystem, StdFileSystem};
use crate::json::JsonLimits;
use crate::log::scan::RecoveryMode;
use crate::projection::{CheckpointPolicy, ProjectionSet};
use crate::session::InvariantMode;

/// When an append is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Records are buffered and written in batches; nothing is synced until [`Store::flush`](crate::Store::flush),
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
    /// Open as a reader ([`Store::open_reader`](crate::Store::open_reader)): no lock, no
    /// appends, nothing modified, beside a live writer in another process or none. A store
    /// whose writer crashed, or whose index is damaged or missing, is answered from an index
    /// repaired or rebuilt in memory, and `RecoveryReport::recovery_pending` says why.
    pub read_only: bool,
    /// A segment rolls over when the next frame would make it larger. Default 64 MiB.
    pub segment_bytes: u64,
    /// Zero bytes written ahead of the active segment's end, so that a sync after a frame
    /// written into them changes no file size and costs no file-system journal commit (about
    /// 1.7x faster on ext4). The zero tail is cut when the segment is sealed or the store
    /// closed, and by recovery after a crash (format-spec.md §2). Default 1 MiB; 0 turns it off.
    pub preallocate_bytes: u64,
    /// Largest `data` text of one event. Default 16 MiB.
    pub max_event_bytes: u64,
    /// Largest frame written or accepted when reading (no allocation exceeds it); a record
    /// larger than this is refused. Default 256 MiB.
    pub max_frame_bytes: u32,
    /// In `Buffered` mode, staged records are written once they reach this size. Default 1 MiB.
    pub batch_bytes: usize,
    /// Frames whose payload is at least this large are zstd-compressed (when that makes them
    /// smaller). Default 64 bytes: with the built-in dictionary even small flush groups pay.
    pub compress_threshold: usize,
    /// zstd level for frames. Default 1. Frames under 64 KiB are compressed with the built-in
    /// dictionary at this level or 3, whichever is higher (there level 3 is smaller and no
    /// slower; see `frame::DICTIONARY_FRAME_LIMIT` and benches/README.md).
    pub zstd_level: i32,
    /// After this many log bytes, a sync makes the index commit durable (bounds the tail
    /// recovery scans after a crash: about 30 ms at the scan's ~150 MB/s). Default 4 MiB.
    pub checkpoint_bytes: u64,
    /// Index entries of durable appends (`Sync`, `Group` syncs, flushes) that may wait for
    /// one redb commit: reads serve them from memory meanwhile, and a crash loses nothing
    /// (recovery indexes the log past the last checkpoint). The batch that fills them is
    /// acknowledged first and its thread commits them after, while the next batch is written.
    /// Fewer commits cost fewer instructions per event (benches/README.md, run 13); each
    /// commit takes longer. 0 commits the index with every batch. Default 4096, at most
    /// 1,048,576 (their events stay in memory until the commit).
    pub deferred_index_entries: usize,
    /// Limits for validating event JSON.
    pub json_limits: JsonLimits,
    /// When dsh's turn/step/tool invariants are enforced on append. Default `Always`.
    pub invariants: InvariantMode,
    /// [`Store::resume`](crate::Store::resume) appends dsh's crash closers when a session's log ends inside an
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
    /// A read-write open also checks every index entry's CRC (what `sessionlog recover`
    /// does), rebuilding a damaged index from the log. Every read-write open runs redb's
    /// integrity check (page checksums) anyway; this reads every entry besides. Default false
    /// (damage in an entry is still detected when it is read).
    pub check_index: bool,
    /// A retention policy applied when a writable store opens (after recovery); what it
    /// evicted is [`Store::evicted_at_open`](crate::Store::evicted_at_open). Apply it later
    /// with [`Store::apply_retention`](crate::Store::apply_retention). Default none.
    pub retention: Option<Retention>,
    /// Continuous replication of a writable store to S3-compatible object storage: started
    /// when the store opens ([`Store::replicate`](crate::Store::replicate)), stopped by
    /// [`Store::close`](crate::Store::close) once everything acknowledged is shipped.
    /// Default none (cargo feature `s3`).
    #[cfg(feature = "s3")]
    pub replicate: Option<crate::replicate::ReplicaTarget>,
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

    /// Sets [`Config::preallocate_bytes`].
    pub fn preallocate_bytes(mut self, preallocate_bytes: u64) -> Config {
        self.preallocate_bytes = preallocate_bytes;
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

    /// Sets [`Config::deferred_index_entries`].
    pub fn deferred_index_entries(mut self, entries: usize) -> Config {
        self.deferred_index_entries = entries;
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

    /// Sets [`Config::replicate`]: a writable store ships its log to `target` from its open
    /// to its close.
    #[cfg(feature = "s3")]
    pub fn replicate_to(mut self, target: crate::replicate::ReplicaTarget) -> Config {
        self.replicate = Some(target);
        self
    }

    /// Sets [`Config::retention`].
    pub fn retention(mut self, policy: Retention) -> Config {
        self.retention = Some(policy);
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

/// The default [`Config::preallocate_bytes`]: a sync that extends the file (one in every
/// 1 MiB of log) pays the journal commit the others avoid.
pub const PREALLOCATE_BYTES: u64 = 1 << 20;

/// The default of [`Config::deferred_index_entries`].
pub(crate) const DEFERRED_INDEX_ENTRIES: usize = 4096;

/// The most [`Config::deferred_index_entries`] accepts: the deferred entries' events are kept
/// in memory until their commit.
pub(crate) const MAX_DEFERRED_INDEX_ENTRIES: usize = 1 << 20;

impl Default for Config {
    fn default() -> Self {
        Config {
            durability: Durability::Sync,
            recovery: RecoveryMode::TolerateTornTail,
            read_only: false,
            segment_bytes: 64 << 20,
            preallocate_bytes: PREALLOCATE_BYTES,
            max_event_bytes: 16 << 20,
            max_frame_bytes: 256 << 20,
            batch_bytes: 1 << 20,
            compress_threshold: 64,
            zstd_level: 1,
            checkpoint_bytes: 4 << 20,
            deferred_index_entries: DEFERRED_INDEX_ENTRIES,
            json_limits: JsonLimits::default(),
            invariants: InvariantMode::Always,
            repair_on_resume: true,
            projections: ProjectionSet::builtin(),
            projection_checkpoints: CheckpointPolicy::default(),
            fs: Arc::new(StdFileSystem),
            check_index: false,
            retention: None,
            #[cfg(feature = "s3")]
            replicate: None,
        }
    }
}

/// Refuses a configuration the engine cannot run with.
pub(super) fn validate_config(c: &Config) -> Result<(), OpenError> {
    if c.segment_bytes < 4096 {
        return Err(OpenError::Config(format!(
            "segment_bytes {} is below the minimum of 4096",
            c.segment_bytes
        )));
    }
    if c.deferred_index_entries > MAX_DEFERRED_INDEX_ENTRIES {
        return Err(OpenError::Config(format!(
            "deferred_index_entries {} is above the maximum of {MAX_DEFERRED_INDEX_ENTRIES} \
             (their events stay in memory until the index commit)",
            c.deferred_index_entries
        )));
    }
    if c.max_event_bytes > u64::from(c.max_frame_bytes) / 2 {
        return Err(OpenError::Config(
            "max_event_bytes must be at most half of max_frame_bytes".into(),
        ));
    }
    Ok(())
}
