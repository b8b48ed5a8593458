//! Errors, one enum per operation family, all convertible into [`Error`].
//!
//! Every message says what went wrong, where (segment and offset, session and seq, file) and,
//! where there is something to do, what to do next.

use std::path::PathBuf;

use crate::event::Seq;
use crate::json::JsonError;
use crate::projection::{ApplyError, ReplayError};
use crate::session::derive::DeriveError;
use crate::session::error::{HeaderError, LookupError, RuleViolation};
use crate::session::load::LoadError;
use crate::session::state::SeedError;

/// Where in the log something was found: a segment number and a byte offset in that segment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogPosition {
    /// Segment number (the file `segments/<number, 20 digits>.seg`).
    pub segment: u64,
    /// Byte offset inside the segment file.
    pub offset: u64,
}

impl std::fmt::Display for LogPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "segment {} offset {}", self.segment, self.offset)
    }
}

/// Why bytes read from the log could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer bytes than the structure needs.
    #[error("truncated: needed {needed} bytes, {available} available")]
    Truncated {
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        available: u64,
    },
    /// The checksum does not match the bytes.
    #[error("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Crc {
        /// CRC stored in the frame.
        stored: u32,
        /// CRC computed over the bytes.
        computed: u32,
    },
    /// A length field is out of the allowed range.
    #[error("bad length {length} (limit {limit})")]
    Length {
        /// The length read.
        length: u64,
        /// The largest length allowed.
        limit: u64,
    },
    /// A field holds a value this version does not define.
    #[error("bad field {field}: {detail}")]
    Field {
        /// The field's name.
        field: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// The record body did not decode (or encode).
    #[error("bad record encoding: {0}")]
    Record(#[source] postcard::Error),
    /// The compressed payload did not decompress to its declared size.
    #[error("bad compressed payload: {0}")]
    Compression(#[source] CompressionError),
}

/// Why a compressed frame payload could not be restored (see [`DecodeError::Compression`]).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CompressionError {
    /// zstd refused the payload.
    #[error("zstd: {0}")]
    Zstd(#[source] std::sync::Arc<std::io::Error>),
    /// The payload decompressed to another size than the frame header declares.
    #[error("decompressed {decompressed} bytes, header declares {declared}")]
    Size {
        /// Bytes zstd produced.
        decompressed: u64,
        /// Bytes the header declares.
        declared: u64,
    },
}

impl PartialEq for CompressionError {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            // An I/O error has no equality: the same kind and message count as the same.
            (Self::Zstd(a), Self::Zstd(b)) => {
                a.kind() == b.kind() && a.to_string() == b.to_string()
            }
            (
                Self::Size {
                    decompressed: a,
                    declared: b,
                },
                Self::Size {
                    decompressed: c,
                    declared: d,
                },
            ) => a == c && b == d,
            _ => false,
        }
    }
}

impl Eq for CompressionError {}

/// What is wrong with the log at the place an [`OpenError::Corruption`] or
/// [`OpenError::TornTail`] names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Damage {
    /// The frame does not decode (bad length, CRC, flags, compression).
    #[error(transparent)]
    Frame(DecodeError),
    /// The segment's header does not decode.
    #[error("segment header: {0}")]
    SegmentHeader(#[source] DecodeError),
    /// The frame passes its CRC but its records do not decode.
    #[error("frame passes its CRC but its records do not decode: {0}")]
    Records(#[source] DecodeError),
    /// A record does not apply to the sessions the log created before it.
    #[error(transparent)]
    Registry(crate::store::RegistryError),
    /// A record kind that the segment's format version does not have.
    #[error(
        "a {record} record in a version-{version} segment, whose format does not have it (Verbatim records: version 3 and later; lean event records: version 7 and later)"
    )]
    RecordNotInVersion {
        /// The record kind.
        record: &'static str,
        /// The segment's format version.
        version: u32,
    },
    /// A frame continues an operation whose earlier frames are missing.
    #[error("the frame continues an operation whose earlier frames are missing")]
    MissingEarlierFrames,
    /// An operation's frames end without its last frame.
    #[error("an operation's frames end without their last frame")]
    MissingLastFrame,
    /// An operation's frames run to the end of the log without its last frame.
    #[error("an operation of {frames} frame(s) never committed: its last frame is missing")]
    Uncommitted {
        /// Frames of the operation found.
        frames: usize,
    },
    /// The last frame of a multi-frame operation is torn.
    #[error("an operation of {frames} frame(s) whose last frame is torn ({source})")]
    TornOperation {
        /// Frames of the operation, the torn one included.
        frames: usize,
        /// Why the last frame does not decode.
        #[source]
        source: DecodeError,
    },
}

/// Errors opening (and recovering) a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// Another process holds the store's write lock.
    #[error(
        "store {path} is open for writing in another process{}; one process writes at a time: close that writer first (readers need no lock: Store::open_reader, or sessionlog list/show/export/verify, work beside it)",
        pid.map(|p| format!(" (process {p})")).unwrap_or_default()
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// The holder's process id, when it recorded one.
        pid: Option<u32>,
    },
    /// A file was written by a different on-disk format version.
    #[error(
        "{path} uses sessionlog format version {found}, this build reads only version {supported}; {}",
        if *found > *supported { "upgrade sessionlog to open it" } else { "export it with the sessionlog version that wrote it and import it again" }
    )]
    UnsupportedFormat {
        /// The file.
        path: PathBuf,
        /// Version found in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// A file does not start with sessionlog's magic bytes.
    #[error(
        "{path} is not a sessionlog segment (bad magic); remove it from segments/ if it does not belong there"
    )]
    NotASegment {
        /// The file.
        path: PathBuf,
    },
    /// A bad frame is followed by valid data: committed data is damaged.
    #[error(
        "corruption in the log at {position}: {reason}; valid frames follow, so this is not a torn write. \
         Reopen with RecoveryMode::SalvageSkippingBadFrames to skip damaged frames, or restore from a backup"
    )]
    Corruption {
        /// Where the damaged frame starts.
        position: LogPosition,
        /// What is wrong with it.
        #[source]
        reason: Damage,
    },
    /// The log ends before the position its last writer published as durable (`ACKED`,
    /// format-spec.md §7): frames that were acknowledged are gone (the last segment was
    /// truncated or removed, or the disk lost synced data). Not a torn write: nothing was cut.
    #[error(
        "the log ends at {end}, before {published}, up to which its last writer had published every frame as durable: acknowledged frames are missing (the last segment was truncated or removed, or the disk lost synced data); nothing was cut. Reopen with RecoveryMode::SalvageSkippingBadFrames to accept the loss and go on from {end}, or restore from a backup"
    )]
    AcknowledgedLost {
        /// Where the log's last whole operation ends.
        end: LogPosition,
        /// The position the last writer published in `ACKED`.
        published: LogPosition,
    },
    /// The log's tail is torn and the recovery mode does not tolerate it.
    #[error(
        "torn write at the log tail at {position}: {reason}; reopen with RecoveryMode::TolerateTornTail to truncate it"
    )]
    TornTail {
        /// Where the torn frame starts.
        position: LogPosition,
        /// What is wrong with it.
        #[source]
        reason: Damage,
    },
    /// Segment files are missing from the sequence.
    #[error(
        "segment {missing} is missing (segments run from {first} to {last}); the log cannot be read past it"
    )]
    MissingSegment {
        /// The first missing number.
        missing: u64,
        /// The first segment present.
        first: u64,
        /// The last segment present.
        last: u64,
    },
    /// A read-only open found an index that needs repair.
    #[error(
        "the index of {path} needs repair ({reason}); open the store read-write once to rebuild it"
    )]
    NeedsRepair {
        /// The store directory.
        path: PathBuf,
        /// Why.
        reason: String,
        /// The position the last writer published as durable (`ACKED`), when the log's files
        /// end before it: acknowledged frames are missing, and a read-write open refuses
        /// ([`OpenError::AcknowledgedLost`]) instead of rebuilding.
        acknowledged: Option<LogPosition>,
    },
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The index database failed.
    #[error("index error: {0}")]
    Index(#[from] IndexError),
    /// An I/O error.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Errors from the redb index.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// redb reported an error that is not damage to the file (I/O, ...).
    #[error("redb: {0}")]
    Redb(#[source] Box<redb::Error>),
    /// redb could not open the index file (for a reason other than damage).
    #[error("redb cannot open {path}: {source}")]
    Open {
        /// The index file.
        path: PathBuf,
        /// redb's error.
        source: Box<redb::Error>,
    },
    /// Reading the index file (to copy it into memory) failed.
    #[error("I/O error reading {path}: {source}")]
    Io {
        /// The index file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Copying the index into an in-memory backend failed.
    #[error("copying the index into memory: {0}")]
    Memory(#[source] std::io::Error),
    /// The index was closed.
    #[error("the index is closed")]
    Closed,
    /// The operation writes, and the index is open read-only.
    #[error(
        "{operation} needs a writable index (or an in-memory copy); the index is open read-only"
    )]
    ReadOnly {
        /// What was asked.
        operation: &'static str,
    },
    /// An index value does not decode.
    #[error(
        "index table {table} holds a malformed value: {detail}; delete index.redb and reopen to rebuild it"
    )]
    Malformed {
        /// The table.
        table: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// `index.redb` is damaged: an entry fails its CRC or does not decode, redb reports
    /// corruption, or redb panicked reading it. The index is derived from the log: a
    /// read-write open or `sessionlog recover` rebuilds it.
    #[error(
        "index damaged: run `sessionlog recover` (or open the store read-write) to rebuild it from the log; table {table}: {detail}"
    )]
    Damaged {
        /// The table (or `index.redb` for the file as a whole).
        table: &'static str,
        /// What is wrong.
        detail: String,
    },
}

/// A redb error as an [`IndexError`]: corruption (a bad page, a table of the wrong type, an
/// unknown file format) is [`IndexError::Damaged`], anything else (I/O) [`IndexError::Redb`].
fn classify_redb(e: redb::Error) -> IndexError {
    match e {
        redb::Error::Corrupted(_)
        | redb::Error::UpgradeRequired(_)
        | redb::Error::TableTypeMismatch { .. }
        | redb::Error::TypeDefinitionChanged { .. }
        | redb::Error::TableIsMultimap(_)
        | redb::Error::TableIsNotMultimap(_)
        | redb::Error::ValueTooLarge(_)
        | redb::Error::TableDoesNotExist(_)
        | redb::Error::RepairAborted => IndexError::Damaged {
            table: "index.redb",
            detail: format!("redb: {e}"),
        },
        redb::Error::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            IndexError::Damaged {
                table: "index.redb",
                detail: format!("redb read past the end of the file: {io}"),
            }
        }
        e => IndexError::Redb(Box::new(e)),
    }
}

macro_rules! redb_into_index_error {
    ($($t:ty),*) => {$(
        impl From<$t> for IndexError {
            fn from(e: $t) -> Self {
                classify_redb(e.into())
            }
        }
    )*};
}
redb_into_index_error!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);

/// Errors appending to a session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// No session with that id exists.
    #[error("session {0:?} does not exist")]
    NoSuchSession(String),
    /// A session with that id already exists.
    #[error("session {0:?} already exists")]
    SessionExists(String),
    /// The session id is not acceptable.
    #[error("invalid session id {id:?}: {reason}")]
    InvalidSessionId {
        /// The id.
        id: String,
        /// Why.
        reason: &'static str,
    },
    /// The session header is not acceptable.
    #[error("invalid session header for {id:?}: {reason}")]
    InvalidHeader {
        /// The session id.
        id: String,
        /// The header rule broken.
        #[source]
        reason: HeaderError,
    },
    /// The event's `seq` is not the session's next seq.
    #[error("session {session:?}: event seq {got} is not contiguous; expected {expected}")]
    WrongSeq {
        /// Session id.
        session: String,
        /// Seq given.
        got: Seq,
        /// Seq expected.
        expected: Seq,
    },
    /// `data` is not lossless JSON.
    #[error(
        "session {session:?} event {kind:?} (seq {seq}) carries data that is not lossless JSON: {reason}"
    )]
    BadData {
        /// Session id.
        session: String,
        /// Event type.
        kind: String,
        /// The seq it would get.
        seq: Seq,
        /// What the JSON validator found.
        #[source]
        reason: JsonError,
    },
    /// The envelope breaks a rule (surface op on a log-only type, retired type, ...).
    #[error("session {session:?} event {kind:?} (seq {seq}): {reason}")]
    Envelope {
        /// Session id.
        session: String,
        /// Event type.
        kind: String,
        /// The seq it would get.
        seq: Seq,
        /// Which rule.
        reason: String,
    },
    /// The event is larger than the configured limit.
    #[error(
        "session {session:?} event {kind:?} is {size} bytes, over the configured limit of {limit} bytes"
    )]
    TooLarge {
        /// Session id.
        session: String,
        /// Event type.
        kind: String,
        /// Its size.
        size: u64,
        /// The limit (`Config::max_event_bytes`).
        limit: u64,
    },
    /// One encoded record would not fit in a frame: refused before anything is written.
    #[error(
        "a {kind:?} record is {size} bytes encoded, over the frame limit of {limit} bytes (Config::max_frame_bytes); nothing was written"
    )]
    RecordTooLarge {
        /// Event type, or "session record" for a create/fork/delete record.
        kind: String,
        /// The encoded record's size.
        size: u64,
        /// The limit (`Config::max_frame_bytes`).
        limit: u64,
    },
    /// The session semantics refused the event (surface rules, invariants, ...).
    #[error("session {session:?} (seq {seq}): {reason}")]
    Semantics {
        /// Session id.
        session: String,
        /// The seq it would get.
        seq: Seq,
        /// The rule broken.
        #[source]
        reason: Box<RuleViolation>,
    },
    /// A registered projection refused an event the session rules accepted (its state is
    /// behind or belongs to another projection set); nothing was written.
    #[error("session {session:?} (seq {seq}): {reason}")]
    Projection {
        /// Session id.
        session: String,
        /// The event's seq.
        seq: Seq,
        /// What the projection set refused.
        #[source]
        reason: ApplyError,
    },
    /// The session registry refused an event the session rules accepted (the index and the
    /// session state disagree); nothing was written.
    #[error("session {session:?} (seq {seq}): {reason}")]
    Registry {
        /// Session id.
        session: String,
        /// The event's seq.
        seq: Seq,
        /// What the registry refused.
        #[source]
        reason: crate::store::RegistryError,
    },
    /// The session's state (or its projections) could not be rebuilt from what the store
    /// already holds, so nothing can be appended to it.
    #[error("session {session:?} (seq {seq}): {reason}")]
    Replay {
        /// Session id (`#<number>` when only the number is known).
        session: String,
        /// The seq where the replay failed (0 when it failed as a whole).
        seq: Seq,
        /// What failed.
        #[source]
        reason: Box<ReplayFailure>,
    },
    /// The store was opened read-only.
    #[error("the store is open read-only; reopen it read-write to append")]
    ReadOnly,
    /// A write, fsync or index commit failed and poisoned the writer: this one, or an earlier
    /// one (the same failure is reported to every later call).
    #[error(
        "a previous write or fsync failed ({0}); nothing more is written. Close the store and reopen it: recovery keeps every acknowledged event"
    )]
    PreviousIo(#[source] WriteFailure),
    /// The writer failed without an I/O error: it panicked (e.g. inside redb on a damaged
    /// index) or its own bookkeeping broke. Reported wrapped in [`AppendError::PreviousIo`].
    #[error("the writer failed: {0}")]
    Writer(String),
    /// The store closed cleanly, but its replicator (`Config::replicate`, feature
    /// `replicate`) could not ship everything acknowledged to the object store in time (the
    /// log on disk is complete).
    #[error(
        "the store is closed, but its replicator could not ship everything acknowledged ({0}); run `sessionlog replicate --to URL DIR` to ship the rest"
    )]
    ReplicationUnfinished(String),
    /// A record could not be encoded (nothing was written).
    #[error("encoding a log record failed: {0}")]
    Encode(#[source] DecodeError),
    /// The session's state could not be encoded for its checkpoint (nothing was written).
    #[error("encoding session state: {0}")]
    EncodeState(#[source] postcard::Error),
    /// Writing the log failed.
    #[error("I/O error writing the log: {0}")]
    Io(#[from] std::io::Error),
    /// The index failed.
    #[error("index error: {0}")]
    Index(#[from] IndexError),
}

/// The failure that poisoned the writer (see [`AppendError::PreviousIo`]): the first failed
/// write, fsync or index commit, shared by every later refusal. Its message and source are the
/// original error's.
#[derive(Debug, Clone)]
pub struct WriteFailure(std::sync::Arc<AppendError>);

impl WriteFailure {
    /// The original failure (an [`AppendError::Io`] keeps the OS error and its kind).
    pub fn error(&self) -> &AppendError {
        &self.0
    }
}

impl From<AppendError> for WriteFailure {
    fn from(e: AppendError) -> Self {
        match e {
            AppendError::PreviousIo(failure) => failure,
            e => WriteFailure(std::sync::Arc::new(e)),
        }
    }
}

/// A failure known only by its message (a simulated fault, a test double).
impl From<String> for WriteFailure {
    fn from(message: String) -> Self {
        WriteFailure(std::sync::Arc::new(AppendError::Writer(message)))
    }
}

impl std::fmt::Display for WriteFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for WriteFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Errors reading events.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// No session with that id exists.
    #[error("session {0:?} does not exist")]
    NoSuchSession(String),
    /// Stored bytes are damaged.
    #[error(
        "corruption at {position}: {detail}; run `sessionlog verify` for a full report, `sessionlog recover --salvage` to drop what the damaged frame held"
    )]
    Corruption {
        /// Where.
        position: LogPosition,
        /// What.
        detail: String,
    },
    /// Reading failed.
    #[error("I/O error reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The index failed.
    #[error("index error: {0}")]
    Index(#[from] IndexError),
    /// Deriving the session's messages failed, usually because an event could not be read
    /// (the message says where).
    #[error(transparent)]
    Derive(Box<DeriveError>),
    /// Replaying the session's stored events to rebuild its state failed.
    #[error("replaying seq {seq} failed: {reason}")]
    Replay {
        /// The event that could not be replayed.
        seq: Seq,
        /// The rule it broke.
        #[source]
        reason: Box<RuleViolation>,
    },
    /// Replaying stored events into the registered projections failed.
    #[error("replaying events into the projections failed: {0}")]
    Projections(#[source] Box<ReplayError<LookupError>>),
    /// A verbatim session (stored without session semantics) does not load the way dsh
    /// loads a session, so it has no surface or messages; its events still read.
    #[error("verbatim session {session:?} does not load as a dsh session: {reason}")]
    Verbatim {
        /// The session id.
        session: String,
        /// What dsh's load rules refuse.
        #[source]
        reason: Box<LoadError>,
    },
}

/// Why a session's state or projections could not be rebuilt from the stored log (see
/// [`AppendError::Replay`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayFailure {
    /// A stored event could not be read back.
    #[error("replaying the stored log failed: {0}")]
    Read(#[source] ReadError),
    /// dsh's loader refuses the stored log.
    #[error("replaying the stored log failed: {0}")]
    Load(#[source] LoadError),
    /// A stored event breaks a session rule on replay.
    #[error("replaying the stored log failed: {0}")]
    Rule(#[source] RuleViolation),
    /// The stored events do not replay as a seed (the prefix a fork inherits).
    #[error("replaying the stored log failed: {0}")]
    Seed(#[source] SeedError),
    /// The projections could not be restored from their checkpoints and the log.
    #[error("restoring projections failed: {0}")]
    Projections(#[source] ReadError),
    /// A projection refused a stored event.
    #[error("folding the stored log into the projections failed: {0}")]
    Fold(#[source] ApplyError),
}

/// Any sessionlog error: every operation family of the root API converts into it, so `?`
/// works in a `fn main() -> Result<(), sessionlog::Error>`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Opening, recovering or verifying the store.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Appending (creating, deleting, flushing, closing).
    #[error(transparent)]
    Append(#[from] AppendError),
    /// Reading.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The index.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// Forking a session.
    #[error(transparent)]
    Fork(#[from] crate::store::ForkFailure),
    /// Building a typed event.
    #[error(transparent)]
    TypedEvent(#[from] crate::typed::TypedEventError),
    /// Validating or parsing JSON.
    #[error(transparent)]
    Json(#[from] crate::json::JsonError),
    /// Importing dsh session files.
    #[cfg(feature = "interop")]
    #[error(transparent)]
    Import(#[from] crate::interop::import::FileImportError),
    /// Exporting sessions to dsh's files.
    #[cfg(feature = "interop")]
    #[error(transparent)]
    Export(#[from] crate::interop::export::ExportError),
}

/// Shorthand for results with the umbrella [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
#[path = "error/tests.rs"]
mod tests;
