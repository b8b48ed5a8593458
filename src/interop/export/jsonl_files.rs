//! JSONL output: streaming a session as dsh JSONL, one file or a dsh tree (paths and their limits).

use super::ExportError;
use super::atomic::io;
use crate::event::{Event, Packing, SessionHeader};
use crate::interop::atomic::{AtomicFile, TEMP_NAME_EXTRA};
use crate::interop::chunk_rows::{CHUNK_EVENT_TYPE, PackPolicy};
use crate::interop::jsonl::{self, Compression, JsonlWriteError};
use crate::store::Store;
use std::io::Write;
use std::path::{Path, PathBuf};

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
pub(super) fn duplicate_in_root(root: &Path, target: &Path) -> Option<PathBuf> {
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
