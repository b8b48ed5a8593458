//! Errors, one enum per operation family, all convertible into [`Error`].
//!
//! Every message says what went wrong, where (segment and offset, session and seq, file) and,
//! where there is something to do, what to do next.

use std::path::PathBuf;

use crate::event::Seq;

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
    /// The record body did not decode.
    #[error("bad record encoding: {0}")]
    Record(String),
    /// The compressed payload did not decompress to its declared size.
    #[error("bad compressed payload: {0}")]
    Compression(String),
}

/// Errors opening (and recovering) a store.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another process holds the store's write lock.
    #[error(
        "store {path} is locked by another writer{}; close it or open read-only",
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
        reason: String,
    },
    /// The log's tail is torn and the recovery mode does not tolerate it.
    #[error(
        "torn write at the log tail at {position}: {reason}; reopen with RecoveryMode::TolerateTornTail to truncate it"
    )]
    TornTail {
        /// Where the torn frame starts.
        position: LogPosition,
        /// What is wrong with it.
        reason: String,
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
pub enum IndexError {
    /// redb reported an error.
    #[error("redb: {0}")]
    Redb(String),
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
        e => IndexError::Redb(e.to_string()),
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
        /// Why.
        reason: String,
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
        /// Why.
        reason: String,
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
        reason: String,
    },
    /// The store was opened read-only.
    #[error("the store is open read-only; reopen it read-write to append")]
    ReadOnly,
    /// A previous I/O failure poisoned the writer.
    #[error(
        "a previous write or fsync failed ({0}); nothing more is written. Close the store and reopen it: recovery keeps every acknowledged event"
    )]
    PreviousIo(String),
    /// Writing the log failed.
    #[error("I/O error writing the log: {0}")]
    Io(#[from] std::io::Error),
    /// The index failed.
    #[error("index error: {0}")]
    Index(#[from] IndexError),
}

/// Errors reading events.
#[derive(Debug, thiserror::Error)]
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
    /// Deriving the session's view (messages, state) failed, usually because an event could
    /// not be read (the detail says where).
    #[error("{0}")]
    Derive(String),
}

/// Any sessionlog error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Opening the store.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Appending.
    #[error(transparent)]
    Append(#[from] AppendError),
    /// Reading.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The index.
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// Shorthand for results with the umbrella [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
