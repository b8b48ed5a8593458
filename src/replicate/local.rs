//! What the store directory holds now, read as a reader reads it (format-spec.md §10): the
//! segment files, whether a GC is installing copies, and how far the log may be shipped.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::ReplicateError;
use super::frames::{check_frames, check_header};
use crate::error::LogPosition;
use crate::log::segment::{self, SEGMENT_HEADER_LEN, SEGMENTS_DIR};
use crate::store::gc::{GC_COMMIT_FILE, GC_SUFFIX, GC_TMP_SUFFIX};

/// The segments directory of a store, listed.
#[derive(Debug)]
pub(crate) struct LocalLog {
    pub dir: PathBuf,
    /// Segment numbers, ascending and contiguous from 1.
    pub numbers: Vec<u64>,
    /// A GC's `gc.commit` or a `.gc` copy is there: its copies are being installed, and the
    /// files are not one consistent set until it finishes (format-spec.md §11.4).
    pub gc_installing: bool,
}

/// An open segment file: the handle (whatever renames happen to the path) and its identity.
#[derive(Debug)]
pub(crate) struct SegmentFile {
    pub file: File,
    pub path: PathBuf,
    /// (device, inode): a GC's copy renamed over the path is another file.
    pub id: (u64, u64),
    pub len: u64,
}

impl LocalLog {
    /// Lists `dir/segments`. A store with no `segments/` yet is an empty log.
    pub fn list(store: &Path) -> Result<LocalLog, ReplicateError> {
        let dir = store.join(SEGMENTS_DIR);
        let mut numbers = Vec::new();
        let mut gc_installing = false;
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(LocalLog {
                    dir,
                    numbers,
                    gc_installing,
                });
            }
            Err(e) => return Err(ReplicateError::io(&dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| ReplicateError::io(&dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(n) = segment::parse_file_name(name) {
                numbers.push(n);
            } else if name == GC_COMMIT_FILE
                || (name.ends_with(GC_SUFFIX) && !name.ends_with(GC_TMP_SUFFIX))
            {
                gc_installing = true;
            }
        }
        numbers.sort_unstable();
        for (i, n) in numbers.iter().enumerate() {
            if *n != i as u64 + 1 {
                return Err(ReplicateError::LocalDamage {
                    at: LogPosition {
                        segment: i as u64 + 1,
                        offset: 0,
                    },
                    detail: format!("segment {} is missing (found segment {n})", i + 1),
                });
            }
        }
        Ok(LocalLog {
            dir,
            numbers,
            gc_installing,
        })
    }

    pub fn last(&self) -> u64 {
        self.numbers.last().copied().unwrap_or(0)
    }

    /// Opens segment `n`.
    pub fn open(&self, n: u64) -> Result<SegmentFile, ReplicateError> {
        let path = segment::path(&self.dir, n);
        let file = File::open(&path).map_err(|e| ReplicateError::io(&path, e))?;
        let meta = file.metadata().map_err(|e| ReplicateError::io(&path, e))?;
        Ok(SegmentFile {
            file,
            path,
            id: (meta.dev(), meta.ino()),
            len: meta.len(),
        })
    }

    /// The identity of the file at segment `n`'s path now (`None` when it is gone).
    pub fn id_now(&self, n: u64) -> Option<(u64, u64)> {
        let meta = std::fs::metadata(segment::path(&self.dir, n)).ok()?;
        Some((meta.dev(), meta.ino()))
    }
}

impl SegmentFile {
    /// Reads bytes `start .. end` (fewer when the file is shorter).
    pub fn read(&self, start: u64, end: u64) -> Result<Vec<u8>, ReplicateError> {
        let end = end.min(self.len);
        let mut buf = vec![0u8; end.saturating_sub(start) as usize];
        let mut done = 0usize;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], start + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ReplicateError::io(&self.path, e)),
            }
        }
        buf.truncate(done);
        Ok(buf)
    }

    /// CRC-32 of bytes `0 .. len` (`None` when the file is shorter).
    pub fn crc_of_prefix(&self, len: u64) -> Result<Option<u32>, ReplicateError> {
        if self.len < len {
            return Ok(None);
        }
        let mut hasher = crc32fast::Hasher::new();
        let mut at = 0u64;
        while at < len {
            let chunk = self.read(at, (at + (8 << 20)).min(len))?;
            if chunk.is_empty() {
                return Ok(None);
            }
            at += chunk.len() as u64;
            hasher.update(&chunk);
        }
        Ok(Some(hasher.finalize()))
    }
}

/// How far the log may be shipped now: the live writer's published position; with no live
/// writer, the end of the log's last whole operation at or after `from` (a commit point
/// already shipped); `None` while a live writer has published nothing yet.
pub(crate) fn shippable_end(
    store: &Path,
    log: &LocalLog,
    from: LogPosition,
) -> Result<Option<LogPosition>, ReplicateError> {
    match crate::store::live::current_bound(store)? {
        None => Ok(None),
        Some(Some(p)) if p.segment == 0 => Ok(None),
        Some(Some(p)) => Ok(Some(p)),
        Some(None) => last_commit(log, from).map(Some),
    }
}

/// The end of the last whole operation in the log, scanning from `from` (a commit point, or
/// segment 0 for the start of the log). A frame that fails its checks in the last segment is
/// a torn tail (the scan ends there, as recovery would cut it); in an earlier segment it is
/// damage.
fn last_commit(log: &LocalLog, from: LogPosition) -> Result<LogPosition, ReplicateError> {
    let last = log.last();
    if last == 0 {
        return Ok(LogPosition::default());
    }
    let mut commit = from;
    let first = from.segment.max(1);
    let mut open = false;
    for n in first..=last {
        let f = log.open(n)?;
        let start = if n == from.segment {
            from.offset.max(SEGMENT_HEADER_LEN)
        } else {
            let head = f.read(0, SEGMENT_HEADER_LEN)?;
            if let Err(detail) = check_header(&head, n) {
                if n == last && head.len() < SEGMENT_HEADER_LEN as usize {
                    // A segment being created (recovery removes it): the log ends before.
                    break;
                }
                return Err(ReplicateError::LocalDamage {
                    at: LogPosition {
                        segment: n,
                        offset: 0,
                    },
                    detail,
                });
            }
            if !open {
                commit = LogPosition {
                    segment: n,
                    offset: SEGMENT_HEADER_LEN,
                };
            }
            SEGMENT_HEADER_LEN
        };
        let bytes = f.read(start, f.len)?;
        let c = check_frames(&bytes, start, open);
        if let Some(p) = c.commit {
            commit = LogPosition {
                segment: n,
                offset: p,
            };
        }
        open = c.open;
        if c.end != f.len {
            if n == last {
                break;
            }
            return Err(ReplicateError::LocalDamage {
                at: LogPosition {
                    segment: n,
                    offset: c.end,
                },
                detail: c
                    .damage
                    .map_or_else(|| "a frame cut short".to_owned(), |d| d.1),
            });
        }
    }
    Ok(commit)
}
