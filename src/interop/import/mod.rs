//! Importing dsh session files into a [`Store`](crate::store::Store).
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
//!   atomically by [`Store::import_session`](crate::store::Store::import_session).)
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

mod error;
mod read;
mod run;
mod source;

pub use error::{FileImportError, MAX_LISTED};
pub use read::mark_batches;
pub use run::{import_paths, import_sources};
pub use source::{
    DIRECTORY_SUFFIXES, SQLITE_MAGIC, Source, SourceFormat, detect_bytes, detect_format, discover,
};

use std::fmt;
use std::path::PathBuf;

use crate::event::Seq;
use crate::session::InvariantMode;

/// Sessions held in memory between validation and writing, at most this many bytes of event
/// data; the others are read a second time for writing. 0: every session of a multi-session
/// import is read again, so memory is bounded by the largest session, not by the input.
pub const DEFAULT_HOLD_BYTES: u64 = 0;

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
    /// What to do when two different source files hold the same session id (the same file
    /// named twice is read once whatever this says; see [`ImportReport::named_twice`]).
    pub on_duplicate: OnDuplicate,
    /// Invariant enforcement for later appends to the imported sessions (`None`: the store's).
    pub invariants: Option<InvariantMode>,
    /// Event bytes (type and data) that may be kept in memory between validating and writing,
    /// to save reading those sessions twice; see `DEFAULT_HOLD_BYTES`. Peak memory is about
    /// the largest session plus this.
    pub hold_bytes: u64,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            replay_fixture: false,
            skip_existing: false,
            on_duplicate: OnDuplicate::Fail,
            invariants: None,
            hold_bytes: DEFAULT_HOLD_BYTES,
        }
    }
}

/// What an import does with a session id found in more than one source file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum OnDuplicate {
    /// Refuse the import ([`FileImportError::Duplicate`]); nothing is written.
    #[default]
    Fail,
    /// Import the copy in the first file (in the order given, directories in name order) and
    /// skip the others.
    FirstWins,
    /// Import no copy of the id; the others are imported.
    Skip,
}

impl OnDuplicate {
    /// The command line's name: `fail`, `first-wins` or `skip`.
    pub fn name(self) -> &'static str {
        match self {
            OnDuplicate::Fail => "fail",
            OnDuplicate::FirstWins => "first-wins",
            OnDuplicate::Skip => "skip",
        }
    }
}

impl std::str::FromStr for OnDuplicate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fail" => Ok(OnDuplicate::Fail),
            "first-wins" => Ok(OnDuplicate::FirstWins),
            "skip" => Ok(OnDuplicate::Skip),
            other => Err(format!(
                "unknown duplicate policy {other:?}; use fail, first-wins or skip"
            )),
        }
    }
}

/// A copy of a session that [`OnDuplicate::FirstWins`] or [`OnDuplicate::Skip`] left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedDuplicate {
    /// The session id.
    pub id: String,
    /// The file whose copy was skipped.
    pub file: PathBuf,
    /// The file whose copy was imported instead (`None` under [`OnDuplicate::Skip`]).
    pub kept: Option<PathBuf>,
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
    /// Copies of a session id found in several files and left out by
    /// [`ImportOptions::on_duplicate`], in source order.
    pub duplicates: Vec<SkippedDuplicate>,
    /// Files named more than once (directly or through a directory): each was read once.
    pub named_twice: Vec<PathBuf>,
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
    /// Events of the sessions done in this phase.
    pub events: u64,
    /// Event bytes (type and data) of the sessions done in this phase.
    pub bytes: u64,
    /// Events to write in all (`"importing"` only; 0 while checking, when it is not known
    /// yet).
    pub total_events: u64,
    /// Event bytes to write in all (`"importing"` only; 0 while checking).
    pub total_bytes: u64,
    /// The session just written, durable and in the store (`"importing"` only).
    pub imported: Option<&'a ImportedSession>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;
    use read::jsonl_line_of;

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
