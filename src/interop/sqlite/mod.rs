//! dsh's SQLite persistence format (schemas 15, 17 and 18).
//!
//! dsh (the TypeScript reference system) keeps sessions in one SQLite database per store. Three
//! mutually exclusive layouts exist, told apart by `PRAGMA user_version`:
//!
//! - **15**: one row per event; `data`, `source_event_seqs` and `surface_op` are JSON text.
//! - **17** (upstream dsh): runs of `assistant/chunk` deltas are stored as packed rows
//!   (`text-chunks`, `reasoning-chunks`, `tool-call-chunks`, 3..=1024 members, at most 1 MiB of
//!   data); `data` of 4096 bytes or more is a zstd BLOB when that is smaller;
//!   `source_event_seqs` is a delta/ZigZag varint BLOB.
//! - **18** (the fork): 17 plus `sessions.owner`.
//!
//! [`read()`] and [`read_session`] import sessions the way dsh loads them (same open-time
//! validation, row decoding and torn-row rule, never modifying the file); [`write()`] exports
//! sessions to a new database of exactly one version, byte-compatible with what dsh writes.
//!
//! ```
//! use sessionlog::event::{Event, SessionHeader, SurfaceOp};
//! use sessionlog::interop::sqlite::{self, SchemaVersion, WriteOptions, ReadOptions};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("sessions.db");
//! let mut header = SessionHeader::new("s1", 1000);
//! header.cwd = Some("/work".into());
//! let events = vec![
//!     Event::new("turn/start", 0, 1, r#"{"turn":1}"#),
//!     Event::new("turn/end", 1, 2, r#"{"turn":1,"reason":{"kind":"completed"}}"#),
//! ];
//! sqlite::write(&path, SchemaVersion::V18, [(&header, events.as_slice())], &WriteOptions::default())
//!     .unwrap();
//! let imported = sqlite::read(&path, &ReadOptions::default()).unwrap();
//! assert_eq!(imported.version, SchemaVersion::V18);
//! assert_eq!(imported.sessions[0].header, header);
//! let back = &imported.sessions[0].events;
//! assert_eq!(back.len(), 2);
//! assert_eq!((back[1].kind.as_str(), back[1].data.as_str()), ("turn/end", events[1].data.as_str()));
//! ```

use std::fmt;
use std::path::PathBuf;

mod codec;
mod read;
mod rows;
pub mod schema;
mod write;

pub use codec::{
    DataError, DataValue, MAX_PACKED_DATA_BYTES, MAX_SCALAR_DATA_BYTES, VarintError,
    ZSTD_COMPRESSION_LEVEL, ZSTD_DATA_THRESHOLD_BYTES, decode_source_event_seqs, decode_zstd_data,
    encode_data, encode_source_event_seqs,
};
pub use read::{
    ImportedSession, ReadOptions, SqliteImport, SqliteReader, StoredSession, TornTail, read,
    read_session,
};
pub use schema::APPLICATION_ID;
pub use write::{WriteOptions, WriteReport, write, write_each};

/// One of dsh's SQLite layouts, named by its `PRAGMA user_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SchemaVersion {
    /// Schema 15: scalar rows, JSON text columns.
    V15,
    /// Schema 17 (upstream dsh): packed rows, zstd `data`, varint `source_event_seqs`.
    V17,
    /// Schema 18 (the fork): 17 plus `sessions.owner`.
    V18,
}

impl SchemaVersion {
    /// Every supported version.
    pub const ALL: [SchemaVersion; 3] =
        [SchemaVersion::V15, SchemaVersion::V17, SchemaVersion::V18];

    /// The `PRAGMA user_version` value.
    pub fn user_version(self) -> i64 {
        match self {
            SchemaVersion::V15 => 15,
            SchemaVersion::V17 => 17,
            SchemaVersion::V18 => 18,
        }
    }

    /// The version whose `user_version` is `v`, if supported.
    pub fn from_user_version(v: i64) -> Option<SchemaVersion> {
        match v {
            15 => Some(SchemaVersion::V15),
            17 => Some(SchemaVersion::V17),
            18 => Some(SchemaVersion::V18),
            _ => None,
        }
    }

    /// True for the packed/compressed layouts (17 and 18).
    pub fn is_packed_layout(self) -> bool {
        self != SchemaVersion::V15
    }

    /// True when `sessions` has an `owner` column.
    pub fn has_owner(self) -> bool {
        self == SchemaVersion::V18
    }
}

impl fmt::Display for SchemaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.user_version())
    }
}

fn list_versions(versions: &[SchemaVersion]) -> String {
    versions
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Everything that can go wrong importing or exporting a dsh SQLite database.
///
/// Messages name the file, and the session, seq or row concerned, and say what to do.
#[derive(Debug, thiserror::Error)]
pub enum SqliteError {
    /// A filesystem operation failed.
    #[error("{context} `{path}`: {source}")]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// What was being done.
        context: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
    /// SQLite reported an error.
    #[error("session database at \"{path}\": SQLite failed while {context}: {source}")]
    Sqlite {
        /// The database file.
        path: String,
        /// What was being done.
        context: &'static str,
        /// The underlying error.
        source: rusqlite::Error,
    },
    /// The file is not an SQLite database, or is truncated or damaged.
    #[error(
        "session database at \"{path}\" is not a readable SQLite database ({detail}); the file is truncated, damaged or of another kind — import it from a backup or an intact copy"
    )]
    NotADatabase {
        /// The file.
        path: String,
        /// SQLite's diagnosis.
        detail: String,
    },
    /// The database was left mid-transaction by a crash (a hot rollback journal or an
    /// unrecovered WAL) and a read-only import may not recover it.
    #[error(
        "session database at \"{path}\" was left mid-transaction by a crash and needs recovery, which a read-only import does not perform; open it once with dsh or `sqlite3` (which rolls the journal back), then import again"
    )]
    NeedsRecovery {
        /// The file.
        path: String,
    },
    /// The file does not exist.
    #[error("session database at \"{path}\" does not exist; check the path")]
    Missing {
        /// The path given.
        path: String,
    },
    /// `user_version` is 0: an empty or foreign database, not one dsh has initialised.
    #[error(
        "session database at \"{path}\" has an unversioned schema or application identity (user_version 0, application id {application_id}, {user_objects} schema objects); it is not a dsh session database"
    )]
    Unversioned {
        /// The file.
        path: String,
        /// Its application id.
        application_id: i64,
        /// Its number of user schema objects.
        user_objects: i64,
    },
    /// `user_version` is not an accepted dsh schema version.
    #[error(
        "session database at \"{path}\" has schema version {found}, incompatible with this reader (accepts {accepted}); dsh never migrates between versions — open it with the dsh build that wrote it and export the sessions to JSONL", accepted = list_versions(accepted)
    )]
    IncompatibleVersion {
        /// The file.
        path: String,
        /// Its `user_version`.
        found: i64,
        /// The versions that were acceptable.
        accepted: Vec<SchemaVersion>,
    },
    /// The application id is not dsh's.
    #[error(
        "session database at \"{path}\" has application id {found}, expected 1146308688 (0x44534850, \"DSHP\"); it belongs to another application"
    )]
    ForeignApplicationId {
        /// The file.
        path: String,
        /// Its application id.
        found: i64,
    },
    /// The schema objects are not the ones dsh requires.
    #[error(
        "session database at \"{path}\" does not contain the required schema objects for schema {version}: {detail}; dsh refuses such a file — restore the database dsh wrote"
    )]
    SchemaMismatch {
        /// The file.
        path: String,
        /// The version announced by `user_version`.
        version: SchemaVersion,
        /// What differs.
        detail: String,
    },
    /// The `persistence_state` store identity is missing or invalid.
    #[error("session database at \"{path}\" has no valid store identity: {detail}")]
    StoreIdentity {
        /// The file.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// The requested session is not in the database.
    #[error("session \"{id}\" not found in session database at \"{path}\"")]
    SessionNotFound {
        /// The file.
        path: String,
        /// The id asked for.
        id: String,
    },
    /// A `sessions` row fails dsh's metadata validation.
    #[error(
        "session database at \"{path}\": stored session metadata (row {rowid}, id {id:?}) is invalid: {detail}"
    )]
    SessionRow {
        /// The file.
        path: String,
        /// The row's rowid.
        rowid: i64,
        /// The row's id, as far as readable.
        id: String,
        /// What is wrong.
        detail: String,
    },
    /// The session uses a log format version other than 0 (dsh's `sessionFormatVersionRefusal`).
    #[error("session database at \"{path}\": {}", format_version_refusal(id, *version))]
    FormatVersion {
        /// The file.
        path: String,
        /// The session id.
        id: String,
        /// The stored version.
        version: i64,
    },
    /// An `events` row fails the row-level checks dsh applies before decoding; the whole read
    /// fails (this is never treated as a torn tail).
    #[error(
        "session database at \"{path}\": session \"{session}\" has an invalid event row at seq {seq}: {detail}"
    )]
    EventRow {
        /// The file.
        path: String,
        /// The session id.
        session: String,
        /// The row's seq column (as far as readable).
        seq: i64,
        /// What is wrong.
        detail: String,
    },
    /// A row that cannot be decoded, or a seq gap, before the last `turn/end`: committed
    /// corruption, which dsh refuses to load.
    #[error(
        "session database at \"{path}\": corrupt session log \"{session}\": {dsh_message} ({detail}); the damage precedes a committed turn end, so it is not a torn tail — restore the session from a backup"
    )]
    CommittedCorruption {
        /// The file.
        path: String,
        /// The session id.
        session: String,
        /// The seq column of the offending row.
        seq: i64,
        /// dsh's own wording.
        dsh_message: String,
        /// The decoding failure or gap.
        detail: String,
    },
    /// A decoded event cannot be represented (for example a `surface_op` that is neither
    /// `"append"` nor a replace object); dsh fails such a log at validation.
    #[error(
        "session database at \"{path}\": stored session \"{session}\" failed validation at seq {seq}: {detail}"
    )]
    InvalidEvent {
        /// The file.
        path: String,
        /// The session id.
        session: String,
        /// The event's seq.
        seq: u64,
        /// What is wrong.
        detail: String,
    },
    /// Export target already exists.
    #[error(
        "cannot export to \"{path}\": the file already exists{}; exporting never adds to or overwrites an existing database (that could mix schema versions) — choose a new path or remove the file", describe_existing(*existing)
    )]
    TargetExists {
        /// The target path.
        path: String,
        /// The existing file's schema version, when it is a dsh database.
        existing: Option<i64>,
    },
    /// The header has an `owner`, which only schema 18 can store.
    #[error(
        "cannot export session \"{id}\" to SQLite schema {version}: it has an owner ({owner:?}), which only schema 18 (the fork's format) can store — export to schema 18 instead"
    )]
    OwnerUnsupported {
        /// The session id.
        id: String,
        /// The requested version.
        version: SchemaVersion,
        /// The owner.
        owner: String,
    },
    /// A header field cannot be written to the requested version as dsh would read it back.
    #[error("cannot export session \"{id}\" to SQLite schema {version}: {detail}")]
    UnrepresentableHeader {
        /// The session id.
        id: String,
        /// The requested version.
        version: SchemaVersion,
        /// What is wrong.
        detail: String,
    },
    /// An event cannot be written so that dsh reads it back.
    #[error(
        "cannot export session \"{id}\" to SQLite schema {version}: event at index {index} (seq {seq}): {detail}"
    )]
    UnrepresentableEvent {
        /// The session id.
        id: String,
        /// The requested version.
        version: SchemaVersion,
        /// Position in the event list.
        index: usize,
        /// The event's seq.
        seq: u64,
        /// What is wrong.
        detail: String,
    },
    /// The export did not pass its own read-back checks (a bug; nothing was published).
    #[error("export to \"{path}\" failed its own check: {detail}; nothing was published")]
    ExportCheck {
        /// The temporary file.
        path: String,
        /// What differed.
        detail: String,
    },
    /// Two sessions with the same id were given to one export.
    #[error("cannot export: session id \"{id}\" appears more than once")]
    DuplicateSession {
        /// The id.
        id: String,
    },
}

fn describe_existing(existing: Option<i64>) -> String {
    match existing {
        Some(v) => format!(" (a dsh session database with user_version {v})"),
        None => String::new(),
    }
}

/// dsh's `sessionFormatVersionRefusal(id, v)` text.
pub fn format_version_refusal(id: &str, version: i64) -> String {
    if version > 0 {
        format!(
            "session \"{id}\" uses log format v{version}, but this harness reads only v0: the log was written by a newer harness — upgrade the harness to open it"
        )
    } else {
        format!(
            "session \"{id}\" uses log format v{version}, older than the supported v0, and this build ships no upgrade path for it"
        )
    }
}
