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
//! file, and the directory is synced. An existing target file is refused, never overwritten. A
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
//! use sessionlog::interop::export::{export_jsonl_file};
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

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::ReadError;
use crate::event::{Event, Packing, SessionHeader};
use crate::interop::chunk_rows::{CHUNK_EVENT_TYPE, PackPolicy};
use crate::interop::jsonl::{self, Compression, JsonlPathError, JsonlWriteError};
use crate::interop::sqlite::{self, SchemaVersion, SqliteError};
use crate::store::Store;

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
    pub fn compression(self) -> Option<Compression> {
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
    /// component over [`NAME_MAX`] bytes or a path over [`PATH_MAX`]): found before anything is
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
}

// ---------------------------------------------------------------------------------------------
// Atomic files
// ---------------------------------------------------------------------------------------------

/// A file written under a temporary name in its target directory and published atomically.
/// Dropped unpublished, the temporary file is removed.
#[derive(Debug)]
pub struct AtomicFile {
    temp: PathBuf,
    target: PathBuf,
    file: Option<File>,
}

fn io(path: &Path, context: &'static str) -> impl FnOnce(std::io::Error) -> ExportError {
    let path = path.to_owned();
    move |source| ExportError::Io {
        path,
        context,
        source,
    }
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

impl AtomicFile {
    /// Creates the temporary file next to `target` (mode 0600 on Unix). Refuses an existing
    /// `target`.
    pub fn create(target: &Path) -> Result<AtomicFile, ExportError> {
        if std::fs::symlink_metadata(target).is_ok() {
            return Err(ExportError::TargetExists {
                path: target.to_owned(),
            });
        }
        let dir = parent_of(target);
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "export".into());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut attempt = 0u32;
        loop {
            let temp = dir.join(format!(
                ".{name}.{}-{nanos:08x}-{attempt}.tmp",
                std::process::id()
            ));
            let mut opts = OpenOptions::new();
            opts.write(true).create_new(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                opts.mode(0o600);
            }
            match opts.open(&temp) {
                Ok(file) => {
                    return Ok(AtomicFile {
                        temp,
                        target: target.to_owned(),
                        file: Some(file),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => {
                    attempt += 1;
                }
                Err(e) => return Err(io(&temp, "cannot create a temporary file")(e)),
            }
        }
    }

    /// The temporary path being written.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// The open temporary file.
    pub fn file(&mut self) -> Result<&mut File, ExportError> {
        self.file.as_mut().ok_or_else(|| ExportError::Io {
            path: self.temp.clone(),
            context: "write",
            source: std::io::Error::other("the file was already published"),
        })
    }

    /// Syncs the file, links it under its final name (which fails rather than replace an
    /// existing file), removes the temporary name and syncs the directory.
    pub fn publish(mut self) -> Result<PathBuf, ExportError> {
        let file = self.file.take();
        if let Some(f) = file {
            f.sync_all().map_err(io(&self.temp, "cannot sync"))?;
        }
        match std::fs::hard_link(&self.temp, &self.target) {
            Ok(()) => {
                let _ = std::fs::remove_file(&self.temp);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(ExportError::TargetExists {
                    path: self.target.clone(),
                });
            }
            Err(_) => {
                // Filesystems without hard links: rename (checked just before).
                if std::fs::symlink_metadata(&self.target).is_ok() {
                    return Err(ExportError::TargetExists {
                        path: self.target.clone(),
                    });
                }
                std::fs::rename(&self.temp, &self.target)
                    .map_err(io(&self.target, "cannot rename the temporary file"))?;
            }
        }
        sync_dir(parent_of(&self.target))?;
        Ok(std::mem::take(&mut self.target))
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        // Either unpublished (remove the temp file) or already removed (harmless).
        let _ = std::fs::remove_file(&self.temp);
    }
}

fn sync_dir(dir: &Path) -> Result<(), ExportError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(dir, "cannot sync the directory"))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Creates `dir` and its missing parents (mode 0700 for the new ones, as dsh does).
fn create_dirs(dir: &Path) -> Result<(), ExportError> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
        .map_err(io(dir, "cannot create the directory"))
}

// ---------------------------------------------------------------------------------------------
// JSONL
// ---------------------------------------------------------------------------------------------

/// Events buffered before a piece of a batch is written (cut only where packing allows).
const PIECE_EVENTS: usize = 4096;

/// True when the exporter must start a new append batch (zstd frame) at `e`.
fn starts_batch(e: &Event) -> bool {
    e.layout.batch_start || e.layout.packing == Packing::AutoBatchStart
}

/// True when the records before `e` do not depend on `e` (no packed row spans the cut), so a
/// batch can be written in pieces there.
fn safe_cut(e: &Event) -> bool {
    matches!(e.layout.packing, Packing::Scalar | Packing::RowStart) || e.kind != CHUNK_EVENT_TYPE
}

fn zstd_encoder<W: Write>(w: W) -> std::io::Result<zstd::stream::Encoder<'static, W>> {
    let mut enc = zstd::stream::Encoder::new(w, jsonl::ZSTD_LEVEL)?;
    enc.include_checksum(true)?;
    enc.include_contentsize(false)?;
    Ok(enc)
}

/// Streams a session as dsh JSONL to `out`, reading the store in pieces (a zstd frame per
/// append batch). Returns the number of events written.
pub fn write_jsonl<W: Write>(
    store: &Store,
    id: &str,
    compression: Compression,
    out: &mut W,
) -> Result<u64, ExportError> {
    let header = store
        .header(id)
        .ok_or_else(|| ExportError::NoSuchSession(id.to_owned()))?;
    let n = store
        .len(id)
        .ok_or_else(|| ExportError::NoSuchSession(id.to_owned()))?;
    let jerr = |source| ExportError::Jsonl {
        id: id.to_owned(),
        source,
    };
    let werr = |source: std::io::Error| ExportError::Io {
        path: PathBuf::from(format!("<export of session \"{id}\">")),
        context: "write",
        source,
    };
    let mut head = jsonl::write_header_line(&header).map_err(jerr)?;
    head.push('\n');
    let mut writer = BatchWriter {
        compression,
        out,
        frame: None,
    };
    writer.header(head.as_bytes()).map_err(werr)?;
    let events = store.events(id, 0..n).map_err(|source| ExportError::Read {
        id: id.to_owned(),
        source,
    })?;
    let mut pending: Vec<Event> = Vec::new();
    let mut text = String::new();
    let mut expected = 0u64;
    let mut flush = |pending: &mut Vec<Event>,
                     writer: &mut BatchWriter<'_, W>,
                     end_batch: bool|
     -> Result<(), ExportError> {
        if !pending.is_empty() {
            text.clear();
            jsonl::write_batch(&mut text, pending, Some(PackPolicy::Remembered)).map_err(jerr)?;
            writer.piece(text.as_bytes()).map_err(werr)?;
            pending.clear();
        }
        if end_batch {
            writer.end_batch().map_err(werr)?;
        }
        Ok(())
    };
    for e in events {
        let e = e.map_err(|source| ExportError::Read {
            id: id.to_owned(),
            source,
        })?;
        if e.seq != expected {
            return Err(jerr(JsonlWriteError::NotContiguous {
                index: expected as usize,
                seq: e.seq,
            }));
        }
        expected += 1;
        if expected > 1 {
            if starts_batch(&e) {
                flush(&mut pending, &mut writer, true)?;
            } else if pending.len() >= PIECE_EVENTS && safe_cut(&e) {
                flush(&mut pending, &mut writer, false)?;
            }
        }
        pending.push(e);
    }
    flush(&mut pending, &mut writer, true)?;
    Ok(expected)
}

/// Writes the header and batches, plain or as zstd frames.
struct BatchWriter<'w, W: Write> {
    compression: Compression,
    out: &'w mut W,
    frame: Option<zstd::stream::Encoder<'static, Vec<u8>>>,
}

impl<W: Write> BatchWriter<'_, W> {
    fn header(&mut self, text: &[u8]) -> std::io::Result<()> {
        match self.compression {
            Compression::None => self.out.write_all(text),
            Compression::Zstd => {
                let mut enc = zstd_encoder(Vec::new())?;
                enc.write_all(text)?;
                self.out.write_all(&enc.finish()?)
            }
        }
    }

    fn piece(&mut self, text: &[u8]) -> std::io::Result<()> {
        match self.compression {
            Compression::None => self.out.write_all(text),
            Compression::Zstd => {
                if self.frame.is_none() {
                    self.frame = Some(zstd_encoder(Vec::new())?);
                }
                if let Some(enc) = self.frame.as_mut() {
                    enc.write_all(text)?;
                    // Hand finished compressed bytes on, keeping memory bounded.
                    let done = std::mem::take(enc.get_mut());
                    self.out.write_all(&done)?;
                }
                Ok(())
            }
        }
    }

    fn end_batch(&mut self) -> std::io::Result<()> {
        if let Some(enc) = self.frame.take() {
            let rest = enc.finish()?;
            self.out.write_all(&rest)?;
        }
        Ok(())
    }
}

/// Exports one session to the JSONL file `path`, atomically. Returns the number of events.
pub fn export_jsonl_file(
    store: &Store,
    id: &str,
    path: &Path,
    compression: Compression,
) -> Result<u64, ExportError> {
    if store.len(id).is_none() {
        return Err(ExportError::NoSuchSession(id.to_owned()));
    }
    let mut file = AtomicFile::create(path)?;
    let temp = file.temp_path().to_owned();
    let n = {
        let mut w = std::io::BufWriter::new(file.file()?);
        let n = write_jsonl(store, id, compression, &mut w).map_err(|e| match e {
            ExportError::Io {
                context, source, ..
            } => ExportError::Io {
                path: temp.clone(),
                context,
                source,
            },
            other => other,
        })?;
        w.flush().map_err(io(&temp, "write"))?;
        n
    };
    file.publish()?;
    Ok(n)
}

/// The path of `header`'s session in a dsh JSONL root.
pub fn tree_path(
    root: &Path,
    header: &SessionHeader,
    compression: Compression,
) -> Result<PathBuf, ExportError> {
    jsonl::session_path(root, header, compression).map_err(|source| ExportError::Path {
        id: header.id.clone(),
        source,
    })
}

/// The longest file name (path component) the file systems sessionlog exports to accept, in
/// bytes (Linux's `NAME_MAX`; dsh's encoded ids use it as their limit too).
pub const NAME_MAX: usize = 255;
/// The longest path the system calls accept, in bytes, including the final NUL (Linux's
/// `PATH_MAX`).
pub const PATH_MAX: usize = 4096;
/// Bytes the temporary file's name adds to the target's (`.<name>.<pid>-<nanos>-<n>.tmp`).
const TEMP_NAME_EXTRA: usize = 40;

/// An id as error messages show it: whole when short, else its start and its length.
fn short_id(id: &str) -> String {
    if id.len() <= 80 {
        id.to_owned()
    } else {
        let start: String = id.chars().take(60).collect();
        format!("{start}… ({} bytes)", id.len())
    }
}

/// Refuses a tree target the file system cannot hold: any component of the path relative to
/// the root (project directory, encoded id, file name, the temporary file's name) over
/// [`NAME_MAX`] bytes, or the whole path (with the temporary name) reaching [`PATH_MAX`].
pub fn check_tree_path(root: &Path, id: &str, target: &Path) -> Result<(), ExportError> {
    let too_long = |detail: String| ExportError::PathTooLong {
        id: short_id(id),
        detail,
    };
    let relative = target.strip_prefix(root).unwrap_or(target);
    let components: Vec<_> = relative.components().collect();
    for (i, c) in components.iter().enumerate() {
        let len = c.as_os_str().len();
        let last = i + 1 == components.len();
        let what = match (i, last) {
            (_, true) => "its file name",
            (0, false) => "its project directory name (from its cwd)",
            _ => "its directory name (the encoded session id)",
        };
        let limit = if last {
            NAME_MAX - TEMP_NAME_EXTRA
        } else {
            NAME_MAX
        };
        if len > limit {
            return Err(too_long(format!(
                "{what} would be {len} bytes, over the file system's limit of {NAME_MAX} bytes per name"
            )));
        }
    }
    let total = target.as_os_str().len() + TEMP_NAME_EXTRA;
    if total >= PATH_MAX {
        return Err(too_long(format!(
            "its path would be about {total} bytes, over the system's limit of {PATH_MAX} bytes per path (a shorter --out directory may do)"
        )));
    }
    Ok(())
}

/// Another project directory of `root` already holding a directory for this session id.
fn duplicate_in_root(root: &Path, target: &Path) -> Option<PathBuf> {
    let session_dir = target.parent()?;
    let encoded = session_dir.file_name()?;
    let own_project = session_dir.parent()?;
    for entry in std::fs::read_dir(root).ok()?.flatten() {
        let project = entry.path();
        if project == own_project || !project.is_dir() {
            continue;
        }
        let candidate = project.join(encoded);
        if candidate.is_dir() {
            return Some(candidate);
        }
    }
    None
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
    let mut report = ExportReport::default();
    let total = headers.len() as u64;
    for (i, (h, path)) in headers.iter().zip(&targets).enumerate() {
        let result = create_dirs(parent_of(path))
            .and_then(|()| export_jsonl_file(store, &h.id, path, compression));
        match result {
            Ok(n) => {
                report.events += n;
                report.sessions += 1;
                report.files.push(path.clone());
            }
            Err(e) if report.files.is_empty() => return Err(e),
            Err(e) => {
                return Err(ExportError::Partial {
                    written: report.files,
                    source: Box::new(e),
                });
            }
        }
        progress(ExportProgress {
            done: i as u64 + 1,
            total,
            session: &h.id,
        });
    }
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
            progress(ExportProgress {
                done: calls,
                total,
                session: &h.id,
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
    })
}
