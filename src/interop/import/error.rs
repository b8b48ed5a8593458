//! Why an import was refused ([`FileImportError`]).

use super::source::DIRECTORY_SUFFIXES;
use crate::interop::jsonl::JsonlReadError;
use crate::interop::sqlite::SqliteError;
use crate::store;
use std::path::PathBuf;

/// Why an import was refused. Messages name the file, the line or row, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum FileImportError {
    /// Reading a file or directory failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is none of the formats dsh writes.
    #[error(
        "{}: not a dsh session file: {reason}; import session.jsonl, session.jsonl.zstd or SQLite session database files",
        path.display()
    )]
    NotASessionFile {
        /// The file.
        path: PathBuf,
        /// What it looks like.
        reason: String,
    },
    /// A directory without session files.
    #[error(
        "{}: no session files found (looked for names ending in {})",
        path.display(), DIRECTORY_SUFFIXES.join(", ")
    )]
    NothingFound {
        /// The directory.
        path: PathBuf,
    },
    /// dsh's JSONL reader refuses the file.
    #[error("{}: {source}{}", path.display(), jsonl_hint(source))]
    Jsonl {
        /// The file.
        path: PathBuf,
        /// The reader's error (with the line).
        source: JsonlReadError,
    },
    /// The SQLite reader refuses the file (its message names the file, the row or seq).
    #[error(transparent)]
    Sqlite(#[from] SqliteError),
    /// dsh's loader refuses the session (vocabulary, legacy shapes, envelope, surface), or
    /// writing it failed.
    #[error("{}: session \"{session}\": {source}{}", path.display(), location.as_deref().unwrap_or(""))]
    Refused {
        /// The file.
        path: PathBuf,
        /// The session.
        session: String,
        /// Where in the file, when known (` (line N)`).
        location: Option<String>,
        /// The store's error.
        source: Box<store::ImportError>,
    },
    /// The session id is in the store already.
    #[error(
        "{}: session \"{session}\" already exists in the store; nothing was imported — remove it from the sources, or pass --skip-existing to import the others",
        path.display()
    )]
    Exists {
        /// The file.
        path: PathBuf,
        /// The id.
        session: String,
    },
    /// Two sources hold the same session id.
    #[error(
        "session \"{session}\" is in both {} and {}; import them into different stores",
        first.display(), second.display()
    )]
    Duplicate {
        /// The id.
        session: String,
        /// The first file holding it.
        first: PathBuf,
        /// The second.
        second: PathBuf,
    },
    /// A source read differently when it was read again for writing than when it was checked
    /// (sessions are read twice unless they fit in
    /// [`ImportOptions::hold_bytes`](super::ImportOptions::hold_bytes)). The session
    /// was not written; sessions written before it stay.
    #[error(
        "{}: session \"{session}\" was not imported: the file changed during the import: {detail}; once nothing writes to it, run the import again (with --skip-existing if sessions were imported before this one)",
        path.display()
    )]
    Changed {
        /// The file.
        path: PathBuf,
        /// The session (as it was when checked).
        session: String,
        /// What changed.
        detail: String,
    },
    /// Validation found problems; nothing was imported.
    #[error("{} problem(s), nothing was imported:\n{}", errors.len(), list(errors))]
    Rejected {
        /// Every problem found.
        errors: Vec<FileImportError>,
    },
    /// Writing failed after some sessions were imported (they stay imported).
    #[error(
        "import stopped after {} session(s) were imported ({}): {source}",
        imported.len(), imported.join(", ")
    )]
    Partial {
        /// Ids imported before the failure.
        imported: Vec<String>,
        /// The failure.
        source: Box<FileImportError>,
    },
}

fn list(errors: &[FileImportError]) -> String {
    errors
        .iter()
        .map(|e| format!("  - {e}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn jsonl_hint(e: &JsonlReadError) -> &'static str {
    const REPLAY: &str = "; if this is a dsh replay fixture (records without seq/time), import it with --replay-fixture";
    match e {
        JsonlReadError::CommittedCorruption { dsh_reason, .. }
            if dsh_reason.contains("got undefined") =>
        {
            REPLAY
        }
        JsonlReadError::CommittedCorruption { .. } => {
            "; the damage precedes a committed turn end, so it is not a torn tail — restore the file from a backup"
        }
        JsonlReadError::NotAHeader { .. } => REPLAY,
        JsonlReadError::FormatUnsupported { .. } | JsonlReadError::UnknownEventType { .. } => {
            "; this build reads dsh's session format v0 and its event vocabulary only"
        }
        _ => "",
    }
}
