//! The segmented append-only log: frames, records, segments and the scan recovery uses.
//!
//! One log stream holds every session's records (as in raft-engine): one `fdatasync` makes the
//! appends of all sessions durable. See `format-spec.md` for the bytes.

pub mod dictionary;
pub mod envelope;
pub mod frame;
pub(crate) mod peek;
pub mod record;
pub mod scan;
pub mod segment;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{DecodeError, LogPosition, ReadError};
use crate::fs::{FileSystem, OpenMode, StorageFile};
use frame::{FRAME_HEADER_LEN, FrameHeader, FrameLimits};

/// The segment files of one store: creation, cached handles, frame reads.
#[derive(Debug)]
pub struct Segments {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    writable: bool,
    handles: Mutex<BTreeMap<u64, Arc<dyn StorageFile>>>,
    /// Format versions of segments older than [`segment::FORMAT_VERSION`] (from their headers).
    old_versions: Mutex<BTreeMap<u64, u32>>,
    frames_read: std::sync::atomic::AtomicU64,
    /// Bumped each time a GC puts compacted segments in place (see [`Segments::generation`]).
    generation: std::sync::atomic::AtomicU64,
    /// Held shared by a read from its index lookup to its frame read, and exclusively by a
    /// GC while it repoints the index and installs compacted segments.
    swap: std::sync::RwLock<()>,
    /// A reader's end of the log: segments after it are not listed, and its segment reads
    /// as ending there (what a live writer has not published yet is not visible).
    bound: Mutex<Option<LogPosition>>,
    /// When [`Segments::release_replaced`] last looked, and the directory's mtime then.
    replaced_probe: Mutex<ReplacedProbe>,
}

/// What [`Segments::release_replaced`] saw when it last compared the open handles with the
/// files at their paths.
#[derive(Debug, Default)]
struct ReplacedProbe {
    dir_mtime: Option<std::time::SystemTime>,
    at: Option<std::time::Instant>,
}

/// [`Segments::release_replaced`] compares every open handle at least this often even when
/// the directory's mtime says nothing changed (its resolution is a clock tick).
const REPLACED_RECHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// A segment file seen only up to a reader's bound.
#[derive(Debug)]
struct Bounded {
    file: Arc<dyn StorageFile>,
    len: u64,
}

impl StorageFile for Bounded {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if offset.saturating_add(buf.len() as u64) > self.len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the published end of the log",
            ));
        }
        self.file.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, _: &[u8], _: u64) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "a reader never writes the log",
        ))
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.len()?.min(self.len))
    }
    fn set_len(&self, _: u64) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "a reader never writes the log",
        ))
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
}

impl Segments {
    /// Opens the segments directory `dir` (created when writable and missing).
    pub fn new(fs: Arc<dyn FileSystem>, dir: PathBuf, writable: bool) -> io::Result<Self> {
        if writable {
            fs.create_dir_all(&dir)?;
        }
        Ok(Segments {
            fs,
            dir,
            writable,
            handles: Mutex::new(BTreeMap::new()),
            old_versions: Mutex::new(BTreeMap::new()),
            frames_read: std::sync::atomic::AtomicU64::new(0),
            generation: std::sync::atomic::AtomicU64::new(0),
            swap: std::sync::RwLock::new(()),
            bound: Mutex::new(None),
            replaced_probe: Mutex::new(ReplacedProbe::default()),
        })
    }

    /// Sets a reader's end of the log (`None`: the whole log is visible).
    pub fn set_bound(&self, bound: Option<LogPosition>) {
        *self.bound.lock().unwrap_or_else(|p| p.into_inner()) = bound;
    }

    fn bound(&self) -> Option<LogPosition> {
        *self.bound.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The segments directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of segment `number`.
    pub fn path(&self, number: u64) -> PathBuf {
        segment::path(&self.dir, number)
    }

    /// The numbers of all segment files present, ascending.
    pub fn list(&self) -> io::Result<Vec<u64>> {
        if !self.fs.exists(&self.dir) {
            return Ok(Vec::new());
        }
        let mut numbers: Vec<u64> = self
            .fs
            .list(&self.dir)?
            .iter()
            .filter_map(|n| segment::parse_file_name(n))
            .collect();
        numbers.sort_unstable();
        if let Some(bound) = self.bound() {
            numbers.retain(|&n| n <= bound.segment);
        }
        Ok(numbers)
    }

    /// An open handle on segment `number` (cached).
    pub fn file(&self, number: u64) -> io::Result<Arc<dyn StorageFile>> {
        let file = self.raw_file(number)?;
        match self.bound() {
            Some(b) if b.segment == number => Ok(Arc::new(Bounded {
                file,
                len: b.offset,
            })),
            _ => Ok(file),
        }
    }

    fn raw_file(&self, number: u64) -> io::Result<Arc<dyn StorageFile>> {
        let mut handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = handles.get(&number) {
            return Ok(f.clone());
        }
        let mode = if self.writable {
            OpenMode::ReadWrite
        } else {
            OpenMode::Read
        };
        let f = self.fs.open(&self.path(number), mode)?;
        handles.insert(number, f.clone());
        Ok(f)
    }

    /// Opens (and caches) a handle on every listed segment, so a reader keeps the very files
    /// its view describes however a writer's GC replaces them later.
    pub fn open_all(&self) -> io::Result<()> {
        for number in self.list()? {
            self.raw_file(number)?;
        }
        Ok(())
    }

    /// Creates segment `number` with its header, syncs it and the directory.
    pub fn create(&self, number: u64) -> io::Result<Arc<dyn StorageFile>> {
        let path = self.path(number);
        let f = self.fs.open(&path, OpenMode::CreateNew)?;
        let written = f
            .write_all_at(&segment::encode_header(number), 0)
            .and_then(|()| f.sync_data())
            .and_then(|()| self.fs.sync_dir(&self.dir));
        if let Err(e) = written {
            // A segment whose header may not be durable must not be used after a reopen
            // (a failed fsync can leave the lost header readable until a power loss).
            let _ = self.fs.remove_file(&path);
            let _ = self.fs.sync_dir(&self.dir);
            return Err(e);
        }
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(number, f.clone());
        Ok(f)
    }

    /// Caches `file` as the handle of segment `number`: a GC renames its compacted copy of a
    /// segment over the old file, and every later read must see the copy.
    pub fn install_handle(&self, number: u64, file: Arc<dyn StorageFile>) {
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(number, file);
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// For a reader (whose view was built from the files it has open): drops the handles of
    /// segments whose file a writer's GC has since replaced (renamed a compacted copy over,
    /// format-spec.md §11), so their space goes back to the file system, and returns their
    /// numbers; the caller rebuilds its view. A replaced file is known by its length (a
    /// compacted copy is always shorter; the same file has the same length through any
    /// handle). Looks only when the segments directory changed (its mtime) or every
    /// [`REPLACED_RECHECK`].
    pub fn release_replaced(&self) -> io::Result<Vec<u64>> {
        {
            let mut probe = self
                .replaced_probe
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let mtime = std::fs::metadata(&self.dir).and_then(|m| m.modified()).ok();
            let due = probe.at.is_none_or(|at| at.elapsed() >= REPLACED_RECHECK);
            if mtime.is_some() && mtime == probe.dir_mtime && !due {
                return Ok(Vec::new());
            }
            probe.dir_mtime = mtime;
            probe.at = Some(std::time::Instant::now());
        }
        let open: Vec<(u64, Arc<dyn StorageFile>)> = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(n, f)| (*n, f.clone()))
            .collect();
        let mut replaced = Vec::new();
        for (number, handle) in open {
            let now = match self.fs.open(&self.path(number), OpenMode::Read) {
                Ok(f) => Some(f.len()?),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(e),
            };
            if now != Some(handle.len()?) {
                replaced.push(number);
            }
        }
        if !replaced.is_empty() {
            let mut handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
            for n in &replaced {
                handles.remove(n);
            }
            drop(handles);
            self.generation
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(replaced)
    }

    /// Changes whenever a GC installs a compacted segment: locations looked up before (and
    /// frames cached) are stale.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Held by a read from its index lookup to its frame read: no GC installs a compacted
    /// segment meanwhile.
    pub fn read_guard(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.swap.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Held by a GC while it repoints the index and installs compacted segments.
    pub fn swap_guard(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        self.swap.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The file system the segments live on.
    pub fn fs(&self) -> &Arc<dyn FileSystem> {
        &self.fs
    }

    /// Removes segment `number` and syncs the directory.
    pub fn remove(&self, number: u64) -> io::Result<()> {
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&number);
        self.fs.remove_file(&self.path(number))?;
        self.fs.sync_dir(&self.dir)
    }

    /// Records the format version read from segment `number`'s header.
    pub fn set_version(&self, number: u64, version: u32) {
        let mut old = self.old_versions.lock().unwrap_or_else(|p| p.into_inner());
        if version == segment::FORMAT_VERSION {
            old.remove(&number);
        } else {
            old.insert(number, version);
        }
    }

    /// The format version of segment `number` (the current one unless recorded otherwise).
    pub fn version(&self, number: u64) -> u32 {
        self.old_versions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&number)
            .copied()
            .unwrap_or(segment::FORMAT_VERSION)
    }

    /// The lowest-numbered segment a GC compacted (format version
    /// [`segment::COMPACTED_VERSION`]), if any: from it on, records of sessions whose
    /// creation the GC dropped are ignored (format-spec.md §11.3).
    pub fn first_compacted(&self) -> Option<u64> {
        self.old_versions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(_, v)| segment::is_compacted(**v))
            .map(|(n, _)| *n)
    }

    /// Checks the flags of a frame header against its segment's version: a version-1
    /// segment's frames never carry [`frame::FLAG_CONTINUED`], only frames of versions 5 to
    /// 8 carry [`frame::FLAG_DICTIONARY`] and only frames of versions 9 and 10
    /// [`frame::FLAG_DICTIONARY_2`].
    pub fn check_flags(&self, number: u64, header: &FrameHeader) -> Result<(), DecodeError> {
        let version = self.version(number);
        if header.flags & frame::FLAG_DICTIONARY != 0 && !segment::allows_dictionary(version) {
            return Err(DecodeError::Field {
                field: "flags",
                detail: format!("dictionary-1 flag bit in a version-{version} segment"),
            });
        }
        if header.flags & frame::FLAG_DICTIONARY_2 != 0 && !segment::allows_dictionary_2(version) {
            return Err(DecodeError::Field {
                field: "flags",
                detail: format!("dictionary-2 flag bit in a version-{version} segment"),
            });
        }
        if (header.continued() || header.continuation()) && self.version(number) < 2 {
            return Err(DecodeError::Field {
                field: "flags",
                detail: format!(
                    "operation flag bits (continued) in a version-{} segment",
                    self.version(number)
                ),
            });
        }
        Ok(())
    }

    /// Frames read by [`Segments::read_frame`] so far.
    pub fn frames_read(&self) -> u64 {
        self.frames_read.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reads and checks the frame at `position` whose on-disk length is `frame_len`, returning
    /// its decompressed payload.
    pub fn read_frame(
        &self,
        position: LogPosition,
        frame_len: u32,
        limits: &FrameLimits,
    ) -> Result<Vec<u8>, ReadError> {
        let (header, buf) = self.read_checked(position, frame_len, limits)?;
        frame::decode_payload(&header, &buf[8..]).map_err(|e| ReadError::Corruption {
            position,
            detail: e.to_string(),
        })
    }

    /// Checks the frame at `position` whose on-disk length is `frame_len` as
    /// [`Segments::read_frame`] does (header, flags, length, CRC over the stored bytes)
    /// without decompressing its payload.
    pub fn check_frame(
        &self,
        position: LogPosition,
        frame_len: u32,
        limits: &FrameLimits,
    ) -> Result<(), ReadError> {
        let (header, buf) = self.read_checked(position, frame_len, limits)?;
        let computed = crc32fast::hash(&buf[8..]);
        if computed != header.crc {
            return Err(ReadError::Corruption {
                position,
                detail: DecodeError::Crc {
                    stored: header.crc,
                    computed,
                }
                .to_string(),
            });
        }
        Ok(())
    }

    /// The frame's header and bytes, its length checked against the limits and the header.
    fn read_checked(
        &self,
        position: LogPosition,
        frame_len: u32,
        limits: &FrameLimits,
    ) -> Result<(FrameHeader, Vec<u8>), ReadError> {
        let io_err = |source| ReadError::Io {
            path: self.path(position.segment),
            source,
        };
        let corrupt = |e: DecodeError| ReadError::Corruption {
            position,
            detail: e.to_string(),
        };
        if (frame_len as usize) < FRAME_HEADER_LEN
            || frame_len
                > limits
                    .max_frame_bytes
                    .saturating_add(FRAME_HEADER_LEN as u32)
        {
            return Err(corrupt(DecodeError::Length {
                length: u64::from(frame_len),
                limit: u64::from(limits.max_frame_bytes),
            }));
        }
        let file = self.file(position.segment).map_err(io_err)?;
        self.frames_read
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut buf = vec![0u8; frame_len as usize];
        file.read_exact_at(&mut buf, position.offset).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                corrupt(DecodeError::Truncated {
                    needed: u64::from(frame_len),
                    available: 0,
                })
            } else {
                io_err(e)
            }
        })?;
        let header_bytes: [u8; FRAME_HEADER_LEN] =
            buf[..FRAME_HEADER_LEN].try_into().map_err(|_| {
                corrupt(DecodeError::Truncated {
                    needed: FRAME_HEADER_LEN as u64,
                    available: buf.len() as u64,
                })
            })?;
        let header = FrameHeader::parse(&header_bytes, limits).map_err(corrupt)?;
        self.check_flags(position.segment, &header)
            .map_err(corrupt)?;
        if header.frame_len() != u64::from(frame_len) {
            return Err(corrupt(DecodeError::Field {
                field: "stored_len",
                detail: format!(
                    "frame is {} bytes, the index says {frame_len}",
                    header.frame_len()
                ),
            }));
        }
        Ok((header, buf))
    }
}
