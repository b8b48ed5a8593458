//! Continuous replication of a store's log to S3-compatible object storage, and restore
//! (cargo feature `s3`; the remote layout is format-spec.md §12).
//!
//! Shipping is a reader: it follows the store's files (the position the writer publishes in
//! `ACKED`, or with no live writer the log's last whole operation), uploads sealed segments
//! whole and the active segment's new frames as immutable parts, verifies every frame's length
//! and CRC before upload, and writes a manifest naming a consistent prefix of the log after
//! every round that moved it. It takes no lock and never blocks appends. Now and then it ships
//! an index snapshot beside a manifest: a checked copy of `index.redb` and a descriptor naming
//! the log it covers. [`restore`] reads the newest manifest (at or before a time), downloads
//! and verifies the parts, and builds a store holding exactly that prefix, its index from the
//! newest matching snapshot caught up to the log's end (or rebuilt from the log).
//!
//! One file per concept: `target.rs` (where to ship: URL, endpoint, credentials), `layout.rs`
//! (object names and the manifest), `frames.rs` (checking frames), `local.rs` (what the store
//! directory holds now), `remote.rs` (the object-store calls), `lease.rs` (one replicator per
//! prefix), `ship.rs` (the shipping rounds), `retention.rs` (the remote's own retention),
//! `handle.rs` (the background thread, [`Replicator`] and [`ReplicaStats`]), `snapshot.rs`
//! (index snapshots: the descriptor, taking one), `snapshot_use.rs` (a restore's use of one)
//! and `restore.rs`.

mod frames;
mod handle;
mod layout;
mod lease;
mod local;
mod remote;
mod restore;
mod retention;
mod ship;
mod snapshot;
mod snapshot_use;
mod target;

use std::path::PathBuf;

pub use handle::{ReplicaStats, Replicator, replicate};
pub use layout::{Manifest, ManifestPosition, ManifestSegment};
pub use restore::{RestoreReport, restore};
pub use snapshot::{
    SNAPSHOT_FORMAT, SNAPSHOT_VERSION, SnapshotBody, SnapshotDescriptor, SnapshotSegment,
};
pub use target::ReplicaTarget;

use crate::error::{LogPosition, OpenError};

/// Why replication or a restore failed. Each message says what to do next.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicateError {
    /// The replica URL is not `s3://BUCKET[/PREFIX]`, or its prefix is not a valid object
    /// name.
    #[error("bad replica URL \"{url}\": {reason} (write it as s3://BUCKET/PREFIX)")]
    Url {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The object-store client could not be built (a bad endpoint or option).
    #[error(
        "cannot set up the S3 client: {0} (check --endpoint and the AWS_* environment variables)"
    )]
    Client(String),
    /// An object-store request failed (after the client's own retries).
    #[error("{op} {object}: {detail}")]
    Remote {
        /// What was being done.
        op: &'static str,
        /// The object or prefix.
        object: String,
        /// The object store's error.
        detail: String,
    },
    /// The bucket does not exist (an upload was answered "not found").
    #[error(
        "the bucket {bucket} does not exist there ({detail}): create it first, or check the bucket name and --endpoint"
    )]
    NoBucket {
        /// The bucket.
        bucket: String,
        /// The object store's answer.
        detail: String,
    },
    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A local segment holds a frame that fails its checks before what the writer published
    /// (or before the log's end, with no writer): it is not shipped.
    #[error(
        "segment {} offset {}: {detail}; nothing past it is shipped (run `sessionlog verify` on the store)",
        at.segment,
        at.offset
    )]
    LocalDamage {
        /// Where.
        at: LogPosition,
        /// What.
        detail: String,
    },
    /// An object in the replica fails its checks (a part's frames, a segment's CRC, a
    /// manifest that does not parse).
    #[error("replica object {object} is damaged: {detail} (restore at an earlier time with --at)")]
    Damaged {
        /// The object.
        object: String,
        /// What fails.
        detail: String,
    },
    /// The replica holds no manifest (at or before the time asked for).
    #[error("{0}")]
    NoManifest(String),
    /// A manifest of a format this build does not read.
    #[error(
        "replica manifest {object} is format {format:?} version {version}; this sessionlog reads version 1 (upgrade sessionlog)"
    )]
    UnsupportedManifest {
        /// The manifest object.
        object: String,
        /// Its `format` field.
        format: String,
        /// Its `version` field.
        version: u64,
    },
    /// Another replicator holds the prefix's lease (format-spec.md §12.5).
    #[error(
        "another replicator ships to this prefix (replicator {replicator} on {host}, pid {pid}, renewed {age_s} s ago); stop it first, or wait 30 s if it is gone"
    )]
    Leased {
        /// Its id.
        replicator: String,
        /// Its host name.
        host: String,
        /// Its process id.
        pid: u64,
        /// Seconds since it renewed the lease.
        age_s: u64,
    },
    /// The restore target directory is not empty (and not an interrupted restore).
    #[error(
        "{0} is not empty: restore into a new or empty directory (an interrupted restore's directory is resumed)"
    )]
    TargetNotEmpty(PathBuf),
    /// The restored store failed to open or verify.
    #[error(
        "the restored store at {path} does not verify: {detail} (restore again, or at an earlier time with --at)"
    )]
    Verify {
        /// The store.
        path: PathBuf,
        /// The problems.
        detail: String,
    },
    /// The store directory could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Shipping stopped before everything acknowledged was shipped.
    #[error(
        "stopped with {lag_bytes} acknowledged byte(s) not shipped (shipped up to {shipped}): {last_error}"
    )]
    Unfinished {
        /// What was shipped.
        shipped: LogPosition,
        /// Bytes acknowledged but not shipped.
        lag_bytes: u64,
        /// The last error met.
        last_error: String,
    },
}

impl ReplicateError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> ReplicateError {
        ReplicateError::Io {
            path: path.into(),
            source,
        }
    }
}
