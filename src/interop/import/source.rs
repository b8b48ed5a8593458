//! Sources: detecting a file's format from its content and finding the files of a directory.

use super::error::FileImportError;
use crate::interop::jsonl;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

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
/// end in one of `DIRECTORY_SUFFIXES`, in sorted order. Every file's format is detected from
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
