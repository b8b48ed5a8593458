//! Exporting sessions from a [`Store`] to dsh's files.
//!
//! Formats ([`ExportFormat`]): dsh JSONL (`jsonl`, `jsonl-zstd`) and dsh SQLite databases of
//! schema 15, 17 or 18. Targets:
//! - one session to one file ([`export_jsonl_file`], or [`export`] with
//!   [`ExportLayout::File`]);
//! - several sessions as JSONL to a directory in dsh's layout
//!   `<out>/<project key | _no-cwd>/<encoded id>/session.jsonl[.zstd]` ([`ExportLayout::Tree`]),
//!   which dsh's JSONL backend can use as its root;
//! - any number of sessions to one SQLite database.
//!
//! Every file is written atomically: to a temporary file in the target directory (mode 0600),
//! synced, then published under its final name with a link that cannot replace an existing
//! file, and the directory is synced. A tree is staged whole first and then published (one
//! rename for a new `out`, one per project or session directory in an existing one; see
//! `staging.rs`): an interrupted tree export leaves only a hidden staging directory, which the
//! next export to the same place removes. An existing target file is refused, never overwritten. A
//! session id cannot escape the target directory: it is encoded with dsh's `encodeSegment`
//! (every `/`, `\`, `.`/`..` segment and other unsafe unit is escaped as `~XXXX`).
//!
//! JSONL is written as dsh writes it: each event in its recorded key order, imported packed
//! rows as they were, and in zstd files one frame per append batch (a batch starts at each
//! event marked [`Layout::batch_start`](crate::event::Layout::batch_start) or
//! [`Packing::AutoBatchStart`]). A session imported from a JSONL file exports byte for byte.
//!
//! ```
//! use sessionlog::event::{Event, SessionHeader};
//! use sessionlog::interop::export::export_jsonl_file;
//! use sessionlog::interop::jsonl::Compression;
//! use sessionlog::session::InvariantMode;
//! use sessionlog::store::{Config, Store};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path().join("store"), Config::default()).unwrap();
//! let events = vec![
//!     Event::new("turn/start", 0, 1, r#"{"turn":1}"#),
//!     Event::new("turn/end", 1, 2, r#"{"turn":1,"reason":{"kind":"completed"}}"#),
//! ];
//! store.import_session(SessionHeader::new("s1", 1000), events, None).unwrap();
//! let out = dir.path().join("s1.jsonl");
//! export_jsonl_file(&store, "s1", &out, Compression::None).unwrap();
//! assert_eq!(std::fs::read_to_string(&out).unwrap(), concat!(
//!     r#"{"type":"session","version":0,"id":"s1","createdAt":1000,"delegationDepth":0}"#, "\n",
//!     r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#, "\n",
//!     r#"{"type":"turn/end","seq":1,"time":2,"data":{"turn":1,"reason":{"kind":"completed"}}}"#, "\n",
//! ));
//! ```
//!
//! [`Packing::AutoBatchStart`]: crate::event::Packing::AutoBatchStart

mod atomic;
mod jsonl_files;
mod staging;

pub use jsonl_files::{
    NAME_MAX, PATH_MAX, check_tree_path, export_jsonl_file, tree_path, write_jsonl,
};

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::ReadError;
use crate::event::{Event, SessionHeader};
use crate::interop::jsonl::{Compression, JsonlPathError, JsonlWriteError};
use crate::interop::sqlite::{self, SchemaVersion, SqliteError};
use crate::store::Store;

use crate::interop::atomic::parent_of;
use atomic::create_dirs;
use jsonl_files::duplicate_in_root;

/// An export format (the CLI's `--format` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExportFormat {
    /// Plain dsh JSONL (`session.jsonl`).
    Jsonl,
    /// zstd dsh JSONL (`session.jsonl.zstd`).
    JsonlZstd,
    /// A dsh SQLite database of this schema version.
    Sqlite(SchemaVersion),
}

impl ExportFormat {
    /// Every format, with its name.
    pub const ALL: [(&'static str, ExportFormat); 5] = [
        ("jsonl", ExportFormat::Jsonl),
        ("jsonl-zstd", ExportFormat::JsonlZstd),
        ("sqlite15", ExportFormat::Sqlite(SchemaVersion::V15)),
        ("sqlite17", ExportFormat::Sqlite(SchemaVersion::V17)),
        ("sqlite18", ExportFormat::Sqlite(SchemaVersion::V18)),
    ];

    /// The name (`jsonl`, `jsonl-zstd`, `sqlite15`, `sqlite17`, `sqlite18`).
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .map_or("?", |(n, _)| n)
    }

    /// The JSONL compression, for the JSONL formats.
    pub(crate) fn compression(self) -> Option<Compression> {
        match self {
            ExportFormat::Jsonl => Some(Compression::None),
            ExportFormat::JsonlZstd => Some(Compression::Zstd),
            ExportFormat::Sqlite(_) => None,
        }
    }
}

impl std::fmt::Display for ExportFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ExportFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, f)| *f)
            .ok_or_else(|| {
                format!(
                    "unknown format \"{s}\"; use one of {}",
                    Self::ALL.map(|(n, _)| n).join(", ")
                )
            })
    }
}

/// Where JSONL sessions go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportLayout {
    /// Exactly one session, to the file `out`.
    File,
    /// dsh's JSONL layout under the directory `out` (created if missing).
    Tree,
}

/// Why an export failed. Nothing is left under a final name by a failed export (files already
/// published for earlier sessions of a tree export stay, and are listed).
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A filesystem operation failed.
    #[error("{}: {context}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// What was being done.
        context: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The session is not in the store.
    #[error("session \"{0}\" is not in the store; `sessionlog list` shows the sessions")]
    NoSuchSession(String),
    /// The same session was named twice.
    #[error("session \"{0}\" was named more than once")]
    DuplicateSession(String),
    /// Reading the session from the store failed.
    #[error("reading session \"{id}\" from the store failed: {source}; run `sessionlog verify`")]
    Read {
        /// The session.
        id: String,
        /// The error.
        source: ReadError,
    },
    /// The session cannot be written as dsh JSONL.
    #[error("session \"{id}\" cannot be exported as JSONL: {source}")]
    Jsonl {
        /// The session.
        id: String,
        /// The writer's error (names the seq).
        source: JsonlWriteError,
    },
    /// The session has no JSONL path (dsh's path rules).
    #[error("session \"{id}\" has no dsh JSONL path: {source}")]
    Path {
        /// The session.
        id: String,
        /// Why.
        source: JsonlPathError,
    },
    /// The SQLite writer refused (the message names the session, seq and what to do).
    #[error(transparent)]
    Sqlite(#[from] SqliteError),
    /// The target exists.
    #[error(
        "{}: the file already exists; an export never overwrites — choose a new path or remove the file",
        path.display()
    )]
    TargetExists {
        /// The target.
        path: PathBuf,
    },
    /// A one-file export was given several sessions.
    #[error(
        "{}: a single file holds one session but {count} were selected; export them to a directory (JSONL) or to one SQLite database",
        path.display()
    )]
    NotOneSession {
        /// The target.
        path: PathBuf,
        /// Sessions selected.
        count: usize,
    },
    /// dsh would find the session twice under the JSONL root (its id already has a directory
    /// in another project directory there).
    #[error(
        "{}: session \"{id}\" already exists in this JSONL root at {}; dsh refuses duplicate session ids — export to an empty directory",
        root.display(), existing.display()
    )]
    DuplicateInRoot {
        /// The root.
        root: PathBuf,
        /// The session.
        id: String,
        /// What is already there.
        existing: PathBuf,
    },
    /// A session's place in dsh's JSONL layout would exceed the file system's limits (a path
    /// component over `NAME_MAX` bytes or a path over `PATH_MAX`): found before anything is
    /// written.
    #[error(
        "session \"{id}\" cannot be exported to a JSONL directory: {detail}; nothing was written — export it alone to a file (`sessionlog export --format jsonl --out FILE ID`) or to a SQLite database (`--format sqlite18 --out FILE.db`)"
    )]
    PathTooLong {
        /// The session id (shortened when long, with its length in bytes).
        id: String,
        /// Which part is too long, and by how much.
        detail: String,
    },
    /// Failed after some files of a tree export were published (they stay).
    #[error("export stopped after writing {} file(s): {source}", written.len())]
    Partial {
        /// Files published before the failure.
        written: Vec<PathBuf>,
        /// The failure.
        source: Box<ExportError>,
    },
}

/// What an export wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// Files written (one per session for JSONL, one database for SQLite).
    pub files: Vec<PathBuf>,
    /// Sessions exported.
    pub sessions: usize,
    /// Events exported.
    pub events: u64,
    /// Sessions not written because they have no events (a dsh SQLite database never holds
    /// an empty session).
    pub skipped_empty: Vec<String>,
    /// Things that will stop dsh from using the file where it is (from the SQLite writer).
    pub warnings: Vec<String>,
    /// Staging directories of earlier tree exports to the same place that were interrupted
    /// (killed), removed before this one started.
    pub removed_stale: Vec<PathBuf>,
}

/// Progress of an export, reported after each session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportProgress<'a> {
    /// Sessions done.
    pub done: u64,
    /// Sessions in all.
    pub total: u64,
    /// The session just written.
    pub session: &'a str,
    /// Events written so far.
    pub events: u64,
    /// Events to write in all.
    pub total_events: u64,
    /// Bytes written so far (JSONL files; 0 for SQLite, whose size is known at the end).
    pub bytes: u64,
}

// ---------------------------------------------------------------------------------------------
// Entry point
// ---------------------------------------------------------------------------------------------

/// Exports `ids` (every session when empty) from `store` to `out` in `format`.
///
/// JSONL: [`ExportLayout::File`] writes exactly one session to the file `out`;
/// [`ExportLayout::Tree`] writes each session to its place in dsh's layout under the directory
/// `out`. SQLite: one new database at `out` holding every session (the layout is ignored);
/// sessions with an `owner` are refused at schema 15 and 17.
///
/// Every target file is checked first: nothing is written when one exists.
pub fn export(
    store: &Store,
    ids: &[String],
    out: &Path,
    format: ExportFormat,
    layout: ExportLayout,
    progress: &mut dyn FnMut(ExportProgress<'_>),
) -> Result<ExportReport, ExportError> {
    let ids: Vec<String> = if ids.is_empty() {
        store.sessions().into_iter().map(|s| s.header.id).collect()
    } else {
        let mut seen = std::collections::HashSet::new();
        for id in ids {
            if !seen.insert(id.as_str()) {
                return Err(ExportError::DuplicateSession(id.clone()));
            }
            if store.len(id).is_none() {
                return Err(ExportError::NoSuchSession(id.clone()));
            }
        }
        ids.to_vec()
    };
    let headers: Vec<SessionHeader> = ids
        .iter()
        .map(|id| {
            store
                .header(id)
                .ok_or_else(|| ExportError::NoSuchSession(id.clone()))
        })
        .collect::<Result<_, _>>()?;
    match format {
        ExportFormat::Sqlite(version) => export_sqlite(store, &headers, out, version, progress),
        ExportFormat::Jsonl | ExportFormat::JsonlZstd => {
            let compression = format.compression().unwrap_or(Compression::None);
            match layout {
                ExportLayout::File => {
                    if headers.len() != 1 {
                        return Err(ExportError::NotOneSession {
                            path: out.to_owned(),
                            count: headers.len(),
                        });
                    }
                    let id = &headers[0].id;
                    let events = export_jsonl_file(store, id, out, compression)?;
                    progress(ExportProgress {
                        done: 1,
                        total: 1,
                        session: id,
                        events,
                        total_events: events,
                        bytes: std::fs::metadata(out).map_or(0, |m| m.len()),
                    });
                    Ok(ExportReport {
                        files: vec![out.to_owned()],
                        sessions: 1,
                        events,
                        ..ExportReport::default()
                    })
                }
                ExportLayout::Tree => export_tree(store, &headers, out, compression, progress),
            }
        }
    }
}

fn export_tree(
    store: &Store,
    headers: &[SessionHeader],
    root: &Path,
    compression: Compression,
    progress: &mut dyn FnMut(ExportProgress<'_>),
) -> Result<ExportReport, ExportError> {
    // What an interrupted export to the same place left behind goes first (it would also look
    // like a project directory to the checks below).
    if std::fs::symlink_metadata(root).is_ok() && !root.is_dir() {
        // A tree goes into a directory; a file there is never replaced.
        return Err(ExportError::TargetExists {
            path: root.to_owned(),
        });
    }
    let removed_stale = staging::remove_stale(root);
    let mut targets = Vec::with_capacity(headers.len());
    for h in headers {
        let path = tree_path(root, h, compression)?;
        check_tree_path(root, &h.id, &path)?;
        let other = path.with_file_name(match compression {
            Compression::None => Compression::Zstd.file_name(),
            Compression::Zstd => Compression::None.file_name(),
        });
        for p in [&path, &other] {
            if std::fs::symlink_metadata(p).is_ok() {
                return Err(ExportError::TargetExists { path: p.clone() });
            }
        }
        if let Some(existing) = duplicate_in_root(root, &path) {
            return Err(ExportError::DuplicateInRoot {
                root: root.to_owned(),
                id: h.id.clone(),
                existing,
            });
        }
        targets.push(path);
    }
    let mut report = ExportReport {
        removed_stale,
        ..ExportReport::default()
    };
    let total = headers.len() as u64;
    let total_events: u64 = headers.iter().filter_map(|h| store.len(&h.id)).sum();
    let mut bytes = 0;
    // Everything is written into the staging directory (removed again on any failure) and
    // published at the end.
    let staging = staging::Staging::create(root)?;
    for (i, (h, path)) in headers.iter().zip(&targets).enumerate() {
        let staged = staging.staged(path);
        let n = create_dirs(parent_of(&staged))
            .and_then(|()| export_jsonl_file(store, &h.id, &staged, compression))?;
        bytes += std::fs::metadata(&staged).map_or(0, |m| m.len());
        report.events += n;
        report.sessions += 1;
        report.files.push(path.clone());
        progress(ExportProgress {
            done: i as u64 + 1,
            total,
            session: &h.id,
            events: report.events,
            total_events,
            bytes,
        });
    }
    staging.publish()?;
    Ok(report)
}

fn export_sqlite(
    store: &Store,
    headers: &[SessionHeader],
    out: &Path,
    version: SchemaVersion,
    progress: &mut dyn FnMut(ExportProgress<'_>),
) -> Result<ExportReport, ExportError> {
    // Refuse before reading any event.
    for h in headers {
        if let Some(owner) = &h.owner
            && !version.has_owner()
        {
            return Err(ExportError::Sqlite(SqliteError::OwnerUnsupported {
                id: h.id.clone(),
                version,
                owner: owner.clone(),
            }));
        }
    }
    if std::fs::symlink_metadata(out).is_ok() {
        return Err(ExportError::TargetExists {
            path: out.to_owned(),
        });
    }
    // One session in memory at a time: the writer loads each when it writes it, and again
    // when it reads the finished file back to check it.
    let total = headers.len() as u64;
    let total_events: u64 = headers.iter().filter_map(|h| store.len(&h.id)).sum();
    let mut events_done = 0u64;
    let mut calls = 0u64;
    let load = |h: &SessionHeader| -> Result<Cow<'static, [Event]>, ExportError> {
        let n = store
            .len(&h.id)
            .ok_or_else(|| ExportError::NoSuchSession(h.id.clone()))?;
        let read_err = |source| ExportError::Read {
            id: h.id.clone(),
            source,
        };
        let events: Vec<Event> = store
            .events(&h.id, 0..n)
            .map_err(read_err)?
            .collect::<Result<_, _>>()
            .map_err(read_err)?;
        calls += 1;
        if calls <= total {
            events_done += events.len() as u64;
            progress(ExportProgress {
                done: calls,
                total,
                session: &h.id,
                events: events_done,
                total_events,
                bytes: 0,
            });
        }
        Ok(Cow::Owned(events))
    };
    let written = sqlite::write_each(
        out,
        version,
        headers,
        &sqlite::WriteOptions::default(),
        load,
    )?;
    Ok(ExportReport {
        files: vec![out.to_owned()],
        sessions: written.sessions,
        events: written.events as u64,
        skipped_empty: written.skipped_empty,
        warnings: written.warnings,
        removed_stale: Vec::new(),
    })
}
