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
    #[error(
        "{}: {}{source}{}",
        path.display(),
        session_prefix(session, source),
        location.as_deref().unwrap_or("")
    )]
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
        "{}: session \"{session}\" already exists in the store; nothing was imported — remove it from the sources, or pass --skip-existing to import the others (and to finish an import that was interrupted)",
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
        "session \"{session}\" is in both {} and {}; pass --on-duplicate first-wins to import the first copy and skip the other, --on-duplicate skip to import neither, or import them into different stores",
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
    /// Writing failed after some sessions were imported (they stay imported). The message
    /// gives the cause first, then how many were imported with a few of their ids.
    #[error(
        "{source}\nthe import stopped there: {} session(s) were imported before it and stay in the store ({}); once the cause is fixed, run the same import again with --skip-existing to import the rest",
        imported.len(), examples(imported)
    )]
    Partial {
        /// Ids imported before the failure.
        imported: Vec<String>,
        /// The failure.
        source: Box<FileImportError>,
    },
}

/// The most problems (or ids) a message lists one by one; the rest are counted.
pub const MAX_LISTED: usize = 10;

/// `"a", "b", "c" and 12 more`: the first few of `ids`, quoted, and a count of the rest.
fn examples(ids: &[String]) -> String {
    let shown: Vec<String> = ids.iter().take(3).map(|id| format!("\"{id}\"")).collect();
    match ids.len().saturating_sub(shown.len()) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// `session "ID": `, unless the store's message names the session itself.
fn session_prefix(session: &str, source: &store::ImportError) -> String {
    if source.to_string().contains(&format!("\"{session}\"")) {
        String::new()
    } else {
        format!("session \"{session}\": ")
    }
}

/// The problems, one per line: ids already in the store are summed up in one line (an
/// interrupted import run again meets one per session it wrote), and past [`MAX_LISTED`] the
/// rest are counted.
fn list(errors: &[FileImportError]) -> String {
    let exists: Vec<String> = errors
        .iter()
        .filter_map(|e| match e {
            FileImportError::Exists { session, .. } => Some(session.clone()),
            _ => None,
        })
        .collect();
    let mut lines: Vec<String> = Vec::new();
    if exists.len() > 1 {
        lines.push(format!(
            "{} session(s) are already in the store ({}); if an earlier import of these files was interrupted, run the same import again with --skip-existing to import the rest",
            exists.len(),
            examples(&exists)
        ));
    }
    let others = errors
        .iter()
        .filter(|e| exists.len() <= 1 || !matches!(e, FileImportError::Exists { .. }));
    let mut more = 0;
    for e in others {
        if lines.len() < MAX_LISTED {
            lines.push(e.to_string());
        } else {
            more += 1;
        }
    }
    if more > 0 {
        lines.push(format!("… and {more} more problem(s) like these"));
    }
    lines
        .iter()
        .map(|l| format!("  - {l}"))
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
