//! Reading one session from a source (JSONL or SQLite) and checking it as the store would.

use super::error::FileImportError;
use super::source::{Source, SourceFormat};
use super::{Cut, CutAt, ImportOptions};
use crate::event::{Event, Seq, SessionHeader};
use crate::interop::jsonl;
use crate::interop::sqlite::{self, SqliteError, SqliteReader};
use crate::session::InvariantMode;
use crate::store::{self, Store};
use std::path::{Path, PathBuf};

/// A session read from a source, ready to validate or import.
pub(super) struct ReadSession {
    pub(super) header: SessionHeader,
    pub(super) events: Vec<Event>,
    pub(super) format: String,
    pub(super) cut: Option<Cut>,
    pub(super) non_canonical_lines: Vec<usize>,
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
pub(super) fn jsonl_line_of(events: &[Event], seq: Seq) -> Option<usize> {
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
pub(super) enum Item {
    Jsonl { path: PathBuf },
    Sqlite { path: PathBuf, id: String },
}

impl Item {
    pub(super) fn path(&self) -> &Path {
        match self {
            Item::Jsonl { path } | Item::Sqlite { path, .. } => path,
        }
    }
}

/// Lists the sessions of the sources (one per JSONL file, every session row of a database).
pub(super) fn items(sources: &[Source]) -> Result<Vec<Item>, FileImportError> {
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
pub(super) struct Readers {
    open: Option<(PathBuf, SqliteReader)>,
}

impl Readers {
    pub(super) fn read(
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
pub(super) fn validate(store: &Store, path: &Path, s: &ReadSession) -> Result<(), FileImportError> {
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

pub(super) fn location_in(message: &str, events: &[Event]) -> Option<String> {
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
