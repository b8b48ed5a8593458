//! Importing dsh session files into a [`Store`].
//!
//! A source is a dsh JSONL log (`session.jsonl`, or `session.jsonl.zstd`), a dsh SQLite
//! database (schema 15, 17 or 18), or a directory searched recursively for such files (dsh's
//! `<root>/<project key>/<encoded id>/session.jsonl[.zstd]` layout or any other tree). The format
//! of each file is detected from its content, not its name.
//!
//! Rules (see `format-spec.md` §9.2):
//! - dsh's load rules decide: what dsh's loader refuses is refused with dsh's reason, naming
//!   the file and the line (JSONL) or row/seq (SQLite).
//! - dsh's torn-tail rule is applied: the valid prefix is imported and the report says what
//!   was cut (file, line or row, reason). Damage followed by a committed `turn/end` is refused.
//! - All or nothing: every session of every source is read and validated before the first one
//!   is written, so a refused source leaves the store unchanged. (Each session is then written
//!   atomically by [`Store::import_session`].)
//! - Streaming: validation keeps only a fingerprint of each session and the sessions are read
//!   again for writing, so memory is bounded by the largest session, not by the input. A source
//!   that reads differently the second time is refused ([`FileImportError::Changed`]); the
//!   sessions written before it stay.
//! - The source is only ever opened for reading.
//! - Each event keeps the envelope key order and packed-row layout of its file, and the first
//!   event of every zstd frame (dsh append batch) is marked [`Layout::batch_start`](crate::event::Layout::batch_start), so an
//!   export reproduces the file.
//!
//! ```
//! use sessionlog::interop::import::{import_paths, ImportOptions};
//! use sessionlog::store::{Config, Store};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let file = dir.path().join("session.jsonl");
//! std::fs::write(&file, concat!(
//!     r#"{"type":"session","version":0,"id":"s1","createdAt":1000,"cwd":"/work","delegationDepth":0}"#, "\n",
//!     r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#, "\n",
//!     r#"{"type":"turn/end","seq":1,"time":2,"data":{"turn":1,"reason":{"kind":"completed"}}}"#, "\n",
//!     r#"{"type":"turn/sta"#, // a torn tail
//! )).unwrap();
//! let store = Store::open(dir.path().join("store"), Config::default()).unwrap();
//! let report = import_paths(&store, &[file], &ImportOptions::default(), &mut |_| {}).unwrap();
//! assert_eq!(report.sessions[0].events, 2);
//! assert_eq!(report.sessions[0].cut.as_ref().unwrap().to_string().contains("line 4"), true);
//! assert_eq!(store.len("s1"), Some(2));
//! ```

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::event::{Event, Seq, SessionHeader};
use crate::interop::jsonl::{self, JsonlReadError};
use crate::interop::sqlite::{self, SqliteError, SqliteReader};
use crate::session::InvariantMode;
use crate::store::{self, Store};

/// The first 16 bytes of every SQLite 3 database file.
pub const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// File names picked up when a directory is searched (the content still decides the format).
/// Anything else in a directory, including dsh's `*.tmp` leftovers and SQLite's `-wal`/`-shm`
/// side files, is ignored.
pub const DIRECTORY_SUFFIXES: [&str; 7] = [
    ".jsonl",
    ".jsonl.zstd",
    ".jsonl.zst",
    ".db",
    ".sqlite",
    ".sqlite3",
    ".db3",
];

/// Sessions held in memory between validation and writing, at most this many bytes of event
/// data; the others are read a second time for writing. 0: every session of a multi-session
/// import is read again, so memory is bounded by the largest session, not by the input.
pub const DEFAULT_HOLD_BYTES: u64 = 0;

/// A source file's format, as detected from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceFormat {
    /// A plain dsh JSONL log (`session.jsonl`).
    Jsonl,
    /// A zstd dsh JSONL log (`session.jsonl.zstd`).
    JsonlZstd,
    /// A dsh SQLite database (the schema version is checked when it is opened).
    Sqlite,
}

impl fmt::Display for SourceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SourceFormat::Jsonl => "jsonl",
            SourceFormat::JsonlZstd => "jsonl-zstd",
            SourceFormat::Sqlite => "sqlite",
        })
    }
}

/// Detects the format from a file's first bytes (at least 16 when the file is that long):
/// SQLite's header string, zstd's frame magic (or a skippable-frame magic, which the reader then
/// refuses), or `{` (a JSON header line). `None` for anything else.
pub fn detect_bytes(prefix: &[u8]) -> Option<SourceFormat> {
    if prefix.starts_with(SQLITE_MAGIC) {
        return Some(SourceFormat::Sqlite);
    }
    if prefix.is_empty() {
        return None;
    }
    match jsonl::detect_compression(prefix) {
        jsonl::Compression::Zstd => Some(SourceFormat::JsonlZstd),
        jsonl::Compression::None if prefix[0] == b'{' => Some(SourceFormat::Jsonl),
        jsonl::Compression::None => None,
    }
}

/// Detects the format of the file at `path` from its content.
pub fn detect_format(path: &Path) -> Result<SourceFormat, FileImportError> {
    let io = |source| FileImportError::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut prefix = Vec::with_capacity(16);
    (&mut file).take(16).read_to_end(&mut prefix).map_err(io)?;
    detect_bytes(&prefix).ok_or_else(|| FileImportError::NotASessionFile {
        path: path.to_owned(),
        reason: if prefix.is_empty() {
            "the file is empty".into()
        } else {
            format!(
                "it starts with bytes {} — neither a JSON header line, a zstd frame nor an SQLite database",
                hex(&prefix[..prefix.len().min(8)])
            )
        },
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One file to import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The file.
    pub path: PathBuf,
    /// Its detected format.
    pub format: SourceFormat,
}

/// Expands `paths` into the files to import: a file is taken whatever its name; a directory is
/// searched recursively (symbolic links to directories are not followed) for files whose names
/// end in one of [`DIRECTORY_SUFFIXES`], in sorted order. Every file's format is detected from
/// its content. A path that is missing, or a directory without any such file, is an error.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<Source>, FileImportError> {
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| FileImportError::Io {
            path: path.clone(),
            source,
        })?;
        if meta.is_dir() {
            let mut files = Vec::new();
            walk(path, &mut files)?;
            files.sort();
            if files.is_empty() {
                return Err(FileImportError::NothingFound { path: path.clone() });
            }
            for f in files {
                let format = detect_format(&f)?;
                out.push(Source { path: f, format });
            }
        } else {
            let format = detect_format(path)?;
            out.push(Source {
                path: path.clone(),
                format,
            });
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), FileImportError> {
    let io = |source| FileImportError::Io {
        path: dir.to_owned(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|source| FileImportError::Io {
            path: path.clone(),
            source,
        })?;
        if kind.is_dir() {
            walk(&path, out)?;
        } else if kind.is_file() || (kind.is_symlink() && path.is_file()) {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if DIRECTORY_SUFFIXES.iter().any(|s| name.ends_with(s)) {
                out.push(path);
            }
        }
    }
    Ok(())
}

/// Options for [`import_paths`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportOptions {
    /// Accept dsh's replay-fixture JSONL form (records without `seq`/`time`, numbered by
    /// position with time 0; headers without `version`/`delegationDepth`). dsh's loader refuses
    /// such files; off by default.
    pub replay_fixture: bool,
    /// Skip (and report) sessions whose id is already in the store instead of refusing the
    /// import.
    pub skip_existing: bool,
    /// Invariant enforcement for later appends to the imported sessions (`None`: the store's).
    pub invariants: Option<InvariantMode>,
    /// Event bytes (type and data) that may be kept in memory between validating and writing,
    /// to save reading those sessions twice; see [`DEFAULT_HOLD_BYTES`]. Peak memory is about
    /// the largest session plus this.
    pub hold_bytes: u64,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            replay_fixture: false,
            skip_existing: false,
            invariants: None,
            hold_bytes: DEFAULT_HOLD_BYTES,
        }
    }
}

/// Where a torn tail was cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CutAt {
    /// JSONL: the first line not kept (1-based, counting the header as line 1; in the
    /// decompressed text for zstd files) and the bytes of the file after the kept part.
    Line {
        /// 1-based line.
        line: usize,
        /// Bytes of the file not imported.
        bytes: u64,
    },
    /// SQLite: the seq dsh's repair would delete from and the number of rows dropped.
    Row {
        /// `tornFrom`.
        seq: Seq,
        /// Rows not imported.
        rows: usize,
    },
}

/// What dsh's torn-tail rule cut from a source (never modified: the cut part is just not
/// imported).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// The file.
    pub file: PathBuf,
    /// The session.
    pub session: String,
    /// Where.
    pub at: CutAt,
    /// Why (dsh's defect text or `incomplete final line`/`frame`).
    pub reason: String,
    /// More detail, when the reader has it.
    pub detail: Option<String>,
}

impl fmt::Display for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: session \"{}\": ", self.file.display(), self.session)?;
        match &self.at {
            CutAt::Line { line, bytes } => write!(
                f,
                "cut from line {line} on ({bytes} bytes not imported): {}",
                self.reason
            )?,
            CutAt::Row { seq, rows } => write!(
                f,
                "cut from the row at seq {seq} on ({rows} rows not imported): {}",
                self.reason
            )?,
        }
        if let Some(d) = &self.detail {
            write!(f, " ({d})")?;
        }
        Ok(())
    }
}

/// One imported session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedSession {
    /// The session id.
    pub id: String,
    /// The file it came from.
    pub file: PathBuf,
    /// The file's format (with the schema version for SQLite).
    pub format: String,
    /// Events imported.
    pub events: u64,
    /// What was cut from the end, if anything.
    pub cut: Option<Cut>,
    /// JSONL lines that an export will not reproduce byte for byte (not the form dsh writes,
    /// e.g. extra whitespace or unknown header keys), 1-based.
    pub non_canonical_lines: Vec<usize>,
}

/// What [`import_paths`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Imported sessions, in source order.
    pub sessions: Vec<ImportedSession>,
    /// Sessions skipped because their id exists ([`ImportOptions::skip_existing`]): id and file.
    pub skipped: Vec<(String, PathBuf)>,
    /// The most events held in memory at once (sessions are read one at a time: with the
    /// default [`ImportOptions::hold_bytes`] this is the largest session's event count).
    pub peak_held_events: u64,
    /// The most event bytes (type and data) held in memory at once.
    pub peak_held_bytes: u64,
}

impl ImportReport {
    /// The cuts, in source order.
    pub fn cuts(&self) -> impl Iterator<Item = &Cut> {
        self.sessions.iter().filter_map(|s| s.cut.as_ref())
    }
}

/// Progress of [`import_paths`], reported after each session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportProgress<'a> {
    /// `"checking"` (reading and validating) or `"importing"` (writing).
    pub phase: &'static str,
    /// Sessions done in this phase.
    pub done: u64,
    /// Sessions in all.
    pub total: u64,
    /// The session just handled.
    pub session: &'a str,
}

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
    /// (sessions are read twice unless they fit in [`ImportOptions::hold_bytes`]). The session
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

/// A session read from a source, ready to validate or import.
struct ReadSession {
    header: SessionHeader,
    events: Vec<Event>,
    format: String,
    cut: Option<Cut>,
    non_canonical_lines: Vec<usize>,
}

/// Sets [`Layout::batch_start`](crate::event::Layout::batch_start) on the first event of each
/// batch (`batches` = events per batch, as [`jsonl::JsonlLog::batches`]).
pub fn mark_batches(events: &mut [Event], batches: &[usize]) {
    let mut at = 0usize;
    for &n in batches {
        if n == 0 {
            continue;
        }
        if let Some(e) = events.get_mut(at) {
            e.layout.batch_start = true;
        }
        at = at.saturating_add(n);
    }
}

/// The 1-based file line of `seq` in a JSONL file read with its packed rows remembered (line 1
/// is the header; a packed row is one line).
fn jsonl_line_of(events: &[Event], seq: Seq) -> Option<usize> {
    use crate::event::Packing;
    let upto = usize::try_from(seq).ok()?;
    if upto >= events.len() {
        return None;
    }
    Some(
        1 + events[..=upto]
            .iter()
            .filter(|e| e.layout.packing != Packing::RowMember)
            .count(),
    )
}

fn read_jsonl(path: &Path, options: &ImportOptions) -> Result<ReadSession, FileImportError> {
    let bytes = std::fs::read(path).map_err(|source| FileImportError::Io {
        path: path.to_owned(),
        source,
    })?;
    let opts = jsonl::ReadOptions {
        replay_fixture: options.replay_fixture,
        path: Some(path.to_owned()),
        ..jsonl::ReadOptions::default()
    };
    let log = jsonl::read(&bytes, &opts).map_err(|source| FileImportError::Jsonl {
        path: path.to_owned(),
        source,
    })?;
    let mut events = log.events;
    mark_batches(&mut events, &log.batches);
    let cut = log.torn.map(|t| Cut {
        file: path.to_owned(),
        session: log.header.id.clone(),
        at: CutAt::Line {
            line: t.file_line,
            bytes: t.bytes_cut,
        },
        reason: t.reason,
        detail: t.detail,
    });
    Ok(ReadSession {
        header: log.header,
        events,
        format: match log.compression {
            jsonl::Compression::None => "jsonl",
            jsonl::Compression::Zstd => "jsonl-zstd",
        }
        .into(),
        cut,
        non_canonical_lines: log.non_canonical.iter().map(|l| l.file_line).collect(),
    })
}

fn sqlite_session(
    reader: &SqliteReader,
    path: &Path,
    id: &str,
) -> Result<ReadSession, FileImportError> {
    let s = reader.read_session(id)?;
    let cut = s.torn.map(|t| Cut {
        file: path.to_owned(),
        session: s.header.id.clone(),
        at: CutAt::Row {
            seq: t.from_seq,
            rows: t.rows_cut,
        },
        reason: t.reason,
        detail: None,
    });
    Ok(ReadSession {
        header: s.header,
        events: s.events,
        format: format!("sqlite{}", reader.version()),
        cut,
        non_canonical_lines: Vec::new(),
    })
}

/// One session to import: where it is.
#[derive(Debug, Clone)]
enum Item {
    Jsonl { path: PathBuf },
    Sqlite { path: PathBuf, id: String },
}

impl Item {
    fn path(&self) -> &Path {
        match self {
            Item::Jsonl { path } | Item::Sqlite { path, .. } => path,
        }
    }
}

/// Lists the sessions of the sources (one per JSONL file, every session row of a database).
fn items(sources: &[Source]) -> Result<Vec<Item>, FileImportError> {
    let mut out = Vec::new();
    for s in sources {
        match s.format {
            SourceFormat::Jsonl | SourceFormat::JsonlZstd => out.push(Item::Jsonl {
                path: s.path.clone(),
            }),
            SourceFormat::Sqlite => {
                let reader = SqliteReader::open(&s.path, &sqlite::ReadOptions::default())?;
                for row in reader.list()? {
                    out.push(Item::Sqlite {
                        path: s.path.clone(),
                        id: row.header.id,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// Reads sessions from items, keeping one SQLite connection open per file.
#[derive(Default)]
struct Readers {
    open: Option<(PathBuf, SqliteReader)>,
}

impl Readers {
    fn read(
        &mut self,
        item: &Item,
        options: &ImportOptions,
    ) -> Result<ReadSession, FileImportError> {
        match item {
            Item::Jsonl { path } => read_jsonl(path, options),
            Item::Sqlite { path, id } => {
                if self.open.as_ref().is_none_or(|(p, _)| p != path) {
                    self.open = Some((
                        path.clone(),
                        SqliteReader::open(path, &sqlite::ReadOptions::default())?,
                    ));
                }
                match &self.open {
                    Some((_, reader)) => sqlite_session(reader, path, id),
                    None => Err(FileImportError::Sqlite(SqliteError::Missing {
                        path: path.display().to_string(),
                    })),
                }
            }
        }
    }
}

/// Checks what [`Store::import_session`] would refuse, without writing.
fn validate(store: &Store, path: &Path, s: &ReadSession) -> Result<(), FileImportError> {
    let refused =
        |source: Box<store::ImportError>, location: Option<String>| FileImportError::Refused {
            path: path.to_owned(),
            session: s.header.id.clone(),
            location,
            source,
        };
    let id = &s.header.id;
    if let Err(e) = crate::session::load::load_stored(id, &s.header, &s.events, InvariantMode::Off)
    {
        let location = location_of(&e.to_string(), s);
        return Err(refused(Box::new(store::ImportError::Load(e)), location));
    }
    let limit = store.config().max_event_bytes;
    if let Some(e) = s.events.iter().find(|e| e.data.len() as u64 > limit) {
        let location = s
            .format
            .starts_with("jsonl")
            .then(|| jsonl_line_of(&s.events, e.seq))
            .flatten()
            .map(|l| format!(" (line {l})"));
        return Err(refused(
            Box::new(store::ImportError::Append(
                crate::error::AppendError::TooLarge {
                    session: id.clone(),
                    kind: e.kind.clone(),
                    size: e.data.len() as u64,
                    limit,
                },
            )),
            location,
        ));
    }
    if id.is_empty() || id.len() > 4096 {
        return Err(refused(
            Box::new(store::ImportError::Append(
                crate::error::AppendError::InvalidSessionId {
                    id: id.chars().take(64).collect(),
                    reason: "session ids must be 1 to 4096 bytes",
                },
            )),
            None,
        ));
    }
    Ok(())
}

/// ` (line N)` for a load error naming `seq N` or `index N` of a JSONL session.
fn location_of(message: &str, s: &ReadSession) -> Option<String> {
    if !s.format.starts_with("jsonl") {
        return None;
    }
    location_in(message, &s.events)
}

fn location_in(message: &str, events: &[Event]) -> Option<String> {
    let seq = ["seq ", "index "].iter().find_map(|key| {
        let at = message.find(key)? + key.len();
        let digits: String = message[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse::<Seq>().ok()
    })?;
    jsonl_line_of(events, seq).map(|l| format!(" (line {l})"))
}

/// Imports every session of `paths` (files or directories, see [`discover`]) into `store`.
///
/// All sessions are read and validated first (dsh's load rules, ids new to the store and
/// unique among the sources); if anything is refused, the error lists every problem and the
/// store is unchanged. Then each session is read again and written with
/// [`Store::import_session`] (see [`import_sources`]). Sources are never modified. `progress`
/// is called after each session of each phase.
pub fn import_paths(
    store: &Store,
    paths: &[PathBuf],
    options: &ImportOptions,
    progress: &mut dyn FnMut(ImportProgress<'_>),
) -> Result<ImportReport, FileImportError> {
    let sources = discover(paths)?;
    import_sources(store, &sources, options, progress)
}

/// [`import_paths`] for already discovered sources.
///
/// Two passes, so that memory is bounded by the largest session rather than by the input:
/// pass 1 reads and validates the sessions one at a time and keeps of each only a summary (id,
/// fingerprint of its content); pass 2 reads each session again and writes it. A session whose
/// source reads differently in pass 2 (changed, gone, or now refused) is not written and the
/// import stops with [`FileImportError::Changed`]; the sessions written before it stay. Up to
/// [`ImportOptions::hold_bytes`] of event data (and a single-session import) is kept between the
/// passes instead of being read again.
pub fn import_sources(
    store: &Store,
    sources: &[Source],
    options: &ImportOptions,
    progress: &mut dyn FnMut(ImportProgress<'_>),
) -> Result<ImportReport, FileImportError> {
    let items = items(sources)?;
    let total = items.len() as u64;
    let mut report = ImportReport::default();
    let mut errors = Vec::new();
    let mut seen: HashMap<String, PathBuf> = HashMap::new();
    let mut readers = Readers::default();
    let mut held = Held::default();
    // Pass 1: read and validate everything, one session at a time.
    let mut checked: Vec<Option<Checked>> = Vec::with_capacity(items.len());
    let mut budget = options.hold_bytes;
    for (i, item) in items.iter().enumerate() {
        let path = item.path();
        let s = match readers.read(item, options) {
            Ok(s) => s,
            Err(e) => {
                errors.push(e);
                checked.push(None);
                continue;
            }
        };
        let size = held.take(&s);
        let id = s.header.id.clone();
        let mut summary = Checked {
            id: id.clone(),
            skip: false,
            fingerprint: Fingerprint::of(&s),
            held: None,
        };
        if let Some(first) = seen.get(&id) {
            errors.push(FileImportError::Duplicate {
                session: id.clone(),
                first: first.clone(),
                second: path.to_owned(),
            });
        } else {
            seen.insert(id.clone(), path.to_owned());
            if store.len(&id).is_some() {
                if options.skip_existing {
                    report.skipped.push((id.clone(), path.to_owned()));
                    summary.skip = true;
                } else {
                    errors.push(FileImportError::Exists {
                        path: path.to_owned(),
                        session: id.clone(),
                    });
                }
            } else if let Err(e) = if total > 1 {
                validate(store, path, &s)
            } else {
                Ok(())
            } {
                // (A single session is validated by the import itself, atomically.)
                errors.push(e);
            } else if (size.bytes <= budget && errors.is_empty()) || total == 1 {
                budget = budget.saturating_sub(size.bytes);
                summary.held = Some(s);
            }
        }
        if summary.held.is_none() {
            held.release(size);
        }
        progress(ImportProgress {
            phase: "checking",
            done: i as u64 + 1,
            total,
            session: &id,
        });
        checked.push(Some(summary));
    }
    if !errors.is_empty() {
        return Err(if errors.len() == 1 {
            errors.remove(0)
        } else {
            FileImportError::Rejected { errors }
        });
    }
    // Pass 2: write, reading again every session not held.
    let mut imported: Vec<String> = Vec::new();
    let stop = |imported: Vec<String>, e: FileImportError| {
        if imported.is_empty() {
            e
        } else {
            FileImportError::Partial {
                imported,
                source: Box::new(e),
            }
        }
    };
    for (i, (item, summary)) in items.iter().zip(checked).enumerate() {
        let Some(summary) = summary else { continue };
        if summary.skip {
            continue;
        }
        let path = item.path();
        let s = match summary.held {
            Some(s) => s,
            None => {
                let changed = |detail: String| FileImportError::Changed {
                    path: path.to_owned(),
                    session: summary.id.clone(),
                    detail,
                };
                match readers.read(item, options) {
                    Ok(s) => {
                        held.take(&s);
                        let now = Fingerprint::of(&s);
                        if now != summary.fingerprint {
                            return Err(stop(
                                imported,
                                changed(summary.fingerprint.difference(
                                    &summary.id,
                                    &now,
                                    &s.header.id,
                                )),
                            ));
                        }
                        s
                    }
                    Err(e) => {
                        return Err(stop(
                            imported,
                            changed(format!("it no longer reads as when it was checked: {e}")),
                        ));
                    }
                }
            }
        };
        let size = Size::of(&s);
        let id = s.header.id.clone();
        let entry = ImportedSession {
            id: id.clone(),
            file: path.to_owned(),
            format: s.format.clone(),
            events: size.events,
            cut: s.cut.clone(),
            non_canonical_lines: s.non_canonical_lines.clone(),
        };
        // Enough of the layout to name the line of a refused event.
        let layout: Vec<Event> = if s.format.starts_with("jsonl") {
            s.events
                .iter()
                .map(|e| {
                    let mut l = Event::new("", e.seq, 0, "");
                    l.layout.packing = e.layout.packing;
                    l
                })
                .collect()
        } else {
            Vec::new()
        };
        let result = store.import_stored(s.header, s.events, options.invariants);
        held.release(size);
        if let Err(source) = result {
            let location = location_in(&source.to_string(), &layout);
            let e = FileImportError::Refused {
                path: path.to_owned(),
                session: id,
                location,
                source: Box::new(source),
            };
            return Err(stop(imported, e));
        }
        imported.push(id.clone());
        report.sessions.push(entry);
        progress(ImportProgress {
            phase: "importing",
            done: i as u64 + 1,
            total,
            session: &id,
        });
    }
    report.peak_held_events = held.peak.events;
    report.peak_held_bytes = held.peak.bytes;
    Ok(report)
}

/// What pass 1 keeps of a session it accepted.
struct Checked {
    id: String,
    /// Skipped: the id is in the store and [`ImportOptions::skip_existing`] is set.
    skip: bool,
    fingerprint: Fingerprint,
    /// The session itself, when it fits in [`ImportOptions::hold_bytes`].
    held: Option<ReadSession>,
}

/// Events and event bytes (type and data) of a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Size {
    events: u64,
    bytes: u64,
}

impl Size {
    fn of(s: &ReadSession) -> Size {
        Size {
            events: s.events.len() as u64,
            bytes: s
                .events
                .iter()
                .map(|e| (e.data.len() + e.kind.len()) as u64)
                .sum(),
        }
    }
}

/// The sessions in memory at once, and the most there ever were.
#[derive(Default)]
struct Held {
    now: Size,
    peak: Size,
}

impl Held {
    fn take(&mut self, s: &ReadSession) -> Size {
        let size = Size::of(s);
        self.now.events += size.events;
        self.now.bytes += size.bytes;
        self.peak.events = self.peak.events.max(self.now.events);
        self.peak.bytes = self.peak.bytes.max(self.now.bytes);
        size
    }

    fn release(&mut self, size: Size) {
        self.now.events = self.now.events.saturating_sub(size.events);
        self.now.bytes = self.now.bytes.saturating_sub(size.bytes);
    }
}

/// What a session read from a source amounts to: its size and a CRC-32 over everything that
/// would be written or reported (header, every event with its layout, format, cut, notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    size: Size,
    crc: u32,
}

impl Fingerprint {
    fn of(s: &ReadSession) -> Fingerprint {
        use std::hash::Hash;
        let mut h = crc32fast::Hasher::new();
        s.header.hash(&mut h);
        s.events.hash(&mut h);
        s.format.hash(&mut h);
        s.cut.as_ref().map(ToString::to_string).hash(&mut h);
        s.non_canonical_lines.hash(&mut h);
        Fingerprint {
            size: Size::of(s),
            crc: h.finalize(),
        }
    }

    /// Says how `now` (read again, holding session `now_id`) differs from `self` (`id`).
    fn difference(&self, id: &str, now: &Fingerprint, now_id: &str) -> String {
        let (a, b) = (self.size, now.size);
        if id != now_id {
            format!("it held session \"{id}\" when it was checked and \"{now_id}\" now")
        } else if a != b {
            format!(
                "\"{id}\" had {} events ({} bytes) when it was checked and has {} ({} bytes) now",
                a.events, a.bytes, b.events, b.bytes
            )
        } else {
            format!(
                "the content of \"{id}\" differs from when it was checked (CRC-32 {:08x}, now {:08x})",
                self.crc, now.crc
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_formats_from_content() {
        assert_eq!(
            detect_bytes(b"SQLite format 3\0xxxx"),
            Some(SourceFormat::Sqlite)
        );
        assert_eq!(
            detect_bytes(&[0x28, 0xB5, 0x2F, 0xFD, 0]),
            Some(SourceFormat::JsonlZstd)
        );
        assert_eq!(detect_bytes(b"{\"type\""), Some(SourceFormat::Jsonl));
        assert_eq!(detect_bytes(b"hello"), None);
        assert_eq!(detect_bytes(b""), None);
    }

    #[test]
    fn batches_mark_first_events() {
        let mut events: Vec<Event> = (0..5)
            .map(|i| Event::new("turn/start", i, 0, "{}"))
            .collect();
        mark_batches(&mut events, &[2, 0, 3]);
        let marks: Vec<bool> = events.iter().map(|e| e.layout.batch_start).collect();
        assert_eq!(marks, [true, false, true, false, false]);
    }

    #[test]
    fn line_numbers_count_packed_rows_once() {
        use crate::event::Packing;
        let mut events: Vec<Event> = (0..5)
            .map(|i| Event::new("assistant/chunk", i, 0, "{}"))
            .collect();
        events[1].layout.packing = Packing::RowStart;
        events[2].layout.packing = Packing::RowMember;
        events[3].layout.packing = Packing::RowMember;
        assert_eq!(jsonl_line_of(&events, 0), Some(2));
        assert_eq!(jsonl_line_of(&events, 3), Some(3));
        assert_eq!(jsonl_line_of(&events, 4), Some(4));
        assert_eq!(jsonl_line_of(&events, 5), None);
    }
}
