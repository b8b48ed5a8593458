//! A simulated, fault-injecting file system for crash tests.
//!
//! [`SimFs`] implements [`FileSystem`] in memory. Every file keeps two images: the **durable**
//! image (what the disk holds) and the **current** image (what a reader sees: the disk plus
//! the writes still in the page cache). Writes, truncations, file creations and removals are
//! recorded as *pending* until `sync_data` (files) or `sync_dir` (directory entries) makes them
//! durable.
//!
//! [`SimFs::crash`] simulates a power loss: each pending write is kept, dropped, or torn at a
//! 512-byte or 4-KiB boundary or at an arbitrary byte; with [`SimOptions::reorder`] a later
//! write may survive an earlier one that is lost (the page cache writes back in any order);
//! an unsynced creation or removal may vanish or reappear. Then the durable image becomes the
//! current one and every handle opened before the crash stops working (the process died).
//!
//! Faults ([`SimFaults`]): the machine goes down after a given number of mutating operations
//! (a crash in the middle of an operation, say between a segment's creation and its directory
//! sync), a write fails with `ENOSPC` or `EFBIG` after writing part of its bytes, the disk
//! fills up ([`SimFaults::disk_free_bytes`]: every write past the free space fails with
//! `ENOSPC` until space is freed), a file-size limit is reached
//! ([`SimFaults::file_size_limit`], `RLIMIT_FSIZE` with `SIGXFSZ` ignored: `EFBIG`), an
//! `fsync` fails with `EIO` (and, as Linux does, the unsynced data may be lost while the cache
//! still shows it), and [`SimFs::flip_bit`] / [`SimFs::flip_random_synced_bit`] damage synced
//! data.
//!
//! Everything random comes from one seeded generator ([`SimRng`]): the same seed and the same
//! sequence of operations give the same crash image, so a failing seed replays exactly.
//!
//! ```
//! use std::path::Path;
//! use sessionlog::fs::sim::{SimFs, SimOptions};
//! use sessionlog::fs::{FileSystem, OpenMode};
//!
//! let sim = SimFs::new(42, SimOptions::default());
//! let dir = Path::new("/store/segments");
//! sim.create_dir_all(dir)?;
//! let f = sim.open(&dir.join("a"), OpenMode::CreateNew)?;
//! f.write_all_at(b"synced", 0)?;
//! f.sync_data()?;
//! sim.sync_dir(dir)?;
//! f.write_all_at(b" and not synced", 6)?;
//! sim.crash();
//! let image = sim.read_file(&dir.join("a")).expect("the file was synced");
//! assert!(image.starts_with(b"synced"));
//! # Ok::<(), std::io::Error>(())
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{FileSystem, OpenMode, StorageFile};

/// A small deterministic generator (SplitMix64): seeds everything the simulator does.
#[derive(Debug, Clone)]
pub struct SimRng {
    state: u64,
}

impl SimRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SimRng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
        }
    }

    /// A uniform number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// A uniformly chosen element of `items` (`None` when empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        items.get(self.below(items.len() as u64) as usize)
    }
}

/// What a crash may do to unsynced state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimOptions {
    /// Unsynced writes of a file may persist out of order (a later one kept, an earlier one
    /// lost or torn). Without it, a crash keeps a prefix of the pending writes, the first lost
    /// one possibly torn.
    pub reorder: bool,
    /// Unsynced file creations and removals (not followed by `sync_dir`) may be undone.
    pub volatile_dir_entries: bool,
    /// Directories made by `create_dir_all` may vanish if their parent was not synced. Off by
    /// default: the engine relies on it (see `tests/sim_crash.rs`, the ignored regression test).
    pub volatile_mkdir: bool,
    /// After a failed `fsync`, reads stop showing the lost data (the cache dropped it too).
    /// Off by default: Linux keeps the pages readable, marked clean, after a writeback error.
    pub eio_drops_cache: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            reorder: true,
            volatile_dir_entries: true,
            volatile_mkdir: false,
            eio_drops_cache: false,
        }
    }
}

/// Scheduled faults. Each countdown counts operations from when [`SimFs::set_faults`] was
/// called; `Some(0)` makes the very next such operation fail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimFaults {
    /// The machine goes down after this many more mutating operations (writes, truncations,
    /// syncs, creations, removals): the operation that would exceed it fails (a write may
    /// leave part of its bytes pending) and so does every later one, until [`SimFs::crash`].
    pub crash_after_ops: Option<u64>,
    /// The write after this many more writes fails with `ENOSPC`, after writing a random prefix
    /// of its bytes. One-shot.
    pub enospc_after_writes: Option<u64>,
    /// The `sync_data` after this many more syncs fails with `EIO`; the file's unsynced writes
    /// are then resolved as a crash would resolve them (kept, lost or torn). One-shot.
    pub eio_after_syncs: Option<u64>,
    /// The `sync_dir` after this many more directory syncs fails with `EIO`. One-shot.
    pub eio_after_dir_syncs: Option<u64>,
    /// The write after this many more writes fails with `EFBIG` ("file too large"), after
    /// writing a random prefix of its bytes. One-shot.
    pub efbig_after_writes: Option<u64>,
    /// A file-size limit (`RLIMIT_FSIZE` with `SIGXFSZ` ignored): a write that would make a
    /// file longer than this writes the bytes below the limit and fails with `EFBIG`; a write
    /// starting at or past it writes nothing. Lasts until the schedule is replaced.
    pub file_size_limit: Option<u64>,
    /// A full disk: how many more bytes all files together may grow by. A write that would
    /// grow past it writes what fits and fails with `ENOSPC`; shrinking a file frees space.
    /// Lasts until the schedule is replaced (space is freed by the next
    /// [`SimFs::set_faults`], a crash or a process restart).
    pub disk_free_bytes: Option<u64>,
}

/// One flipped bit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitFlip {
    /// The file.
    pub path: PathBuf,
    /// The byte offset.
    pub offset: u64,
    /// The bit (0 = least significant).
    pub bit: u8,
}

/// What a crash did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Pending writes and truncations kept whole.
    pub kept: u64,
    /// Pending writes and truncations lost.
    pub dropped: u64,
    /// Pending writes torn (part kept).
    pub torn: u64,
    /// Unsynced directory entries whose creation or removal was undone.
    pub entries_undone: u64,
}

/// Counters, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// `write_all_at` calls.
    pub writes: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// `sync_data` calls.
    pub syncs: u64,
    /// `sync_dir` calls.
    pub dir_syncs: u64,
    /// Crashes simulated.
    pub crashes: u64,
    /// Injected `ENOSPC`, `EIO` and `EFBIG` errors.
    pub injected_errors: u64,
    /// Of them, `EFBIG` (one-shot or a file-size limit).
    pub efbig_errors: u64,
    /// Of them, `ENOSPC` from a full disk ([`SimFaults::disk_free_bytes`]).
    pub disk_full_errors: u64,
}

#[derive(Debug, Clone)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Inode {
    durable: Vec<u8>,
    current: Vec<u8>,
    pending: Vec<Pending>,
}

#[derive(Debug, Default, Clone)]
struct Dir {
    entries: BTreeMap<String, u64>,
    durable_entries: BTreeMap<String, u64>,
    /// False while the directory's own creation is not durable.
    durable: bool,
}

#[derive(Debug)]
struct State {
    rng: SimRng,
    options: SimOptions,
    faults: SimFaults,
    down: bool,
    generation: u64,
    next_inode: u64,
    inodes: HashMap<u64, Inode>,
    dirs: BTreeMap<PathBuf, Dir>,
    stats: SimStats,
}

/// The simulated file system. Share it between a store ([`crate::store::Config::fs`]) and the
/// test through an `Arc`.
#[derive(Debug)]
pub struct SimFs {
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// `errno` values of the injected errors (Linux).
const EIO: i32 = 5;
const EFBIG: i32 = 27;
const ENOSPC: i32 = 28;

fn machine_down() -> io::Error {
    io::Error::other("simulated crash: the machine is down")
}

fn stale_handle() -> io::Error {
    io::Error::other("simulated crash: this handle was opened before the crash")
}

fn split(path: &Path) -> io::Result<(PathBuf, String)> {
    let parent = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    Ok((parent, name.to_owned()))
}

fn apply_write(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let Ok(start) = usize::try_from(offset) else {
        return;
    };
    let end = start.saturating_add(data.len());
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(data);
}

fn apply(image: &mut Vec<u8>, op: &Pending) {
    match op {
        Pending::Write { offset, data } => apply_write(image, *offset, data),
        Pending::SetLen(len) => image.resize(usize::try_from(*len).unwrap_or(usize::MAX), 0),
    }
}

impl State {
    /// Counts a mutating operation against the crash countdown.
    fn tick(&mut self) -> io::Result<()> {
        if self.down {
            return Err(machine_down());
        }
        if let Some(n) = self.faults.crash_after_ops.as_mut() {
            if *n == 0 {
                self.down = true;
                return Err(machine_down());
            }
            *n -= 1;
        }
        Ok(())
    }

    /// Chunks of a write at `boundary`-aligned file offsets.
    fn chunks(offset: u64, len: usize, boundary: u64) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut from = 0usize;
        while from < len {
            let abs = offset + from as u64;
            let next_boundary = (abs / boundary + 1) * boundary;
            let to = (from as u64 + (next_boundary - abs)).min(len as u64) as usize;
            out.push((from, to));
            from = to;
        }
        out
    }

    fn tear_boundary(&mut self) -> u64 {
        match self.rng.below(3) {
            0 => 512,
            1 => 4096,
            _ => 1,
        }
    }

    /// Resolves an inode's pending operations the way a power loss would, into its durable
    /// image. Returns (kept, dropped, torn).
    fn resolve(&mut self, id: u64) -> (u64, u64, u64) {
        let Some(mut inode) = self.inodes.remove(&id) else {
            return (0, 0, 0);
        };
        let pending = std::mem::take(&mut inode.pending);
        let (mut kept, mut dropped, mut torn) = (0, 0, 0);
        let n = pending.len();
        if self.options.reorder && self.rng.chance(1, 2) {
            // Independent fates: any subset persists, in any order.
            for op in &pending {
                match self.rng.below(10) {
                    0..=3 => {
                        apply(&mut inode.durable, op);
                        kept += 1;
                    }
                    4..=6 => dropped += 1,
                    _ => match op {
                        Pending::Write { offset, data } if data.len() > 1 => {
                            let boundary = self.tear_boundary();
                            let boundary = if boundary == 1 {
                                1 + self.rng.below(data.len() as u64)
                            } else {
                                boundary
                            };
                            for (from, to) in Self::chunks(*offset, data.len(), boundary) {
                                if self.rng.chance(1, 2) {
                                    apply_write(
                                        &mut inode.durable,
                                        offset + from as u64,
                                        &data[from..to],
                                    );
                                }
                            }
                            torn += 1;
                        }
                        _ => dropped += 1,
                    },
                }
            }
        } else {
            // In order: a prefix persists; the first lost operation may be torn.
            let keep = self.rng.below(n as u64 + 1) as usize;
            for op in &pending[..keep] {
                apply(&mut inode.durable, op);
                kept += 1;
            }
            if let Some(Pending::Write { offset, data }) = pending.get(keep)
                && self.rng.chance(1, 2)
            {
                let boundary = self.tear_boundary();
                let cut = if boundary == 1 {
                    self.rng.below(data.len() as u64) as usize
                } else {
                    let cuts: Vec<usize> = Self::chunks(*offset, data.len(), boundary)
                        .into_iter()
                        .map(|(from, _)| from)
                        .filter(|&from| from > 0)
                        .collect();
                    self.rng.pick(&cuts).copied().unwrap_or(0)
                };
                if cut > 0 {
                    apply_write(&mut inode.durable, *offset, &data[..cut]);
                    torn += 1;
                    dropped += (n - keep - 1) as u64;
                } else {
                    dropped += (n - keep) as u64;
                }
            } else {
                dropped += (n - keep) as u64;
            }
        }
        self.inodes.insert(id, inode);
        (kept, dropped, torn)
    }

    fn dir_mut(&mut self, dir: &Path) -> io::Result<&mut Dir> {
        self.dirs.get_mut(dir).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no directory {}", dir.display()),
            )
        })
    }

    fn lookup(&self, path: &Path) -> Option<u64> {
        let (parent, name) = split(path).ok()?;
        self.dirs.get(&parent)?.entries.get(&name).copied()
    }
}

impl SimFs {
    /// An empty simulated file system whose randomness is seeded with `seed`.
    pub fn new(seed: u64, options: SimOptions) -> Arc<SimFs> {
        Arc::new(SimFs {
            state: Arc::new(Mutex::new(State {
                rng: SimRng::new(seed),
                options,
                faults: SimFaults::default(),
                down: false,
                generation: 0,
                next_inode: 1,
                inodes: HashMap::new(),
                dirs: BTreeMap::new(),
                stats: SimStats::default(),
            })),
        })
    }

    /// Schedules faults (replacing any schedule still pending).
    pub fn set_faults(&self, faults: SimFaults) {
        lock(&self.state).faults = faults;
    }

    /// Changes what crashes may do.
    pub fn set_options(&self, options: SimOptions) {
        lock(&self.state).options = options;
    }

    /// True once a scheduled crash has taken the machine down.
    pub fn is_down(&self) -> bool {
        lock(&self.state).down
    }

    /// Counters so far.
    pub fn stats(&self) -> SimStats {
        lock(&self.state).stats
    }

    /// Bytes written but not yet synced, over all files.
    pub fn unsynced_writes(&self) -> usize {
        lock(&self.state)
            .inodes
            .values()
            .map(|i| i.pending.len())
            .sum()
    }

    /// Simulates a power loss: resolves every unsynced write and directory entry (see the
    /// module documentation), makes the result the current image, invalidates every open
    /// handle, clears the fault schedule and brings the machine back up.
    pub fn crash(&self) -> CrashReport {
        let mut st = lock(&self.state);
        let mut report = CrashReport::default();
        // Directory entries first: a file whose creation is undone takes its data with it.
        let volatile_entries = st.options.volatile_dir_entries;
        let volatile_mkdir = st.options.volatile_mkdir;
        let dir_paths: Vec<PathBuf> = st.dirs.keys().cloned().collect();
        for path in &dir_paths {
            let Some(dir) = st.dirs.get(path).cloned() else {
                continue;
            };
            let mut result = dir.durable_entries.clone();
            let names: BTreeSet<&String> = dir
                .entries
                .keys()
                .chain(dir.durable_entries.keys())
                .collect();
            for name in names {
                let now = dir.entries.get(name);
                let then = dir.durable_entries.get(name);
                if now == then {
                    continue;
                }
                let take_new = !volatile_entries || st.rng.chance(1, 2);
                if take_new {
                    match now {
                        Some(&id) => result.insert(name.clone(), id),
                        None => result.remove(name),
                    };
                } else {
                    report.entries_undone += 1;
                }
            }
            if let Some(d) = st.dirs.get_mut(path) {
                d.entries = result.clone();
                d.durable_entries = result;
            }
        }
        if volatile_mkdir {
            let doomed: Vec<PathBuf> = dir_paths
                .iter()
                .filter(|p| st.dirs.get(*p).is_some_and(|d| !d.durable))
                .cloned()
                .collect();
            for p in doomed {
                if st.rng.chance(1, 2) {
                    st.dirs.retain(|q, _| !q.starts_with(&p));
                    report.entries_undone += 1;
                }
            }
        }
        for d in st.dirs.values_mut() {
            d.durable = true;
        }
        // Unreferenced inodes are gone; the others lose or keep their unsynced writes.
        let live: BTreeSet<u64> = st
            .dirs
            .values()
            .flat_map(|d| d.entries.values().copied())
            .collect();
        st.inodes.retain(|id, _| live.contains(id));
        let ids: Vec<u64> = live.into_iter().collect();
        for id in ids {
            let (k, d, t) = st.resolve(id);
            report.kept += k;
            report.dropped += d;
            report.torn += t;
            if let Some(inode) = st.inodes.get_mut(&id) {
                inode.current = inode.durable.clone();
            }
        }
        st.down = false;
        st.faults = SimFaults::default();
        st.generation += 1;
        st.stats.crashes += 1;
        report
    }

    /// Simulates the process dying while the machine stays up: every open handle stops
    /// working and the fault schedule is cleared, but the page cache survives (unsynced writes
    /// and directory entries stay visible and pending). A later [`SimFs::crash`] may still
    /// lose them.
    pub fn restart_process(&self) {
        let mut st = lock(&self.state);
        st.down = false;
        st.faults = SimFaults::default();
        st.generation += 1;
    }

    /// Creates a directory and its parents as already durable: directories that existed
    /// before the test (a crash never undoes them, even with [`SimOptions::volatile_mkdir`]).
    pub fn create_durable_dir_all(&self, path: &Path) {
        let mut st = lock(&self.state);
        for p in path.ancestors().filter(|p| !p.as_os_str().is_empty()) {
            let d = st.dirs.entry(p.to_path_buf()).or_default();
            d.durable = true;
        }
    }

    /// The current contents of a file (what a reader sees), if it exists.
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let st = lock(&self.state);
        let id = st.lookup(path)?;
        st.inodes.get(&id).map(|i| i.current.clone())
    }

    /// The durable contents of a file (what a crash right now would keep for sure, plus at
    /// most its unsynced writes), if its entry exists.
    pub fn read_durable(&self, path: &Path) -> Option<Vec<u8>> {
        let st = lock(&self.state);
        let id = st.lookup(path)?;
        st.inodes.get(&id).map(|i| i.durable.clone())
    }

    /// Replaces a file's contents, durably (creating it, durably, if needed). For tests that
    /// build a damaged image by hand.
    pub fn write_file(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let mut st = lock(&self.state);
        let (parent, name) = split(path)?;
        let id = match st.lookup(path) {
            Some(id) => id,
            None => {
                let id = st.next_inode;
                st.next_inode += 1;
                let dir = st.dir_mut(&parent)?;
                dir.entries.insert(name.clone(), id);
                dir.durable_entries.insert(name, id);
                id
            }
        };
        st.inodes.insert(
            id,
            Inode {
                durable: data.to_vec(),
                current: data.to_vec(),
                pending: Vec::new(),
            },
        );
        Ok(())
    }

    /// Flips one bit of a file, in both the durable and the current image (the medium went
    /// bad). Fails when the offset is past the durable image.
    pub fn flip_bit(&self, path: &Path, offset: u64, bit: u8) -> io::Result<()> {
        let mut st = lock(&self.state);
        let id = st.lookup(path).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no file {}", path.display()),
            )
        })?;
        let inode = st
            .inodes
            .get_mut(&id)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no inode"))?;
        let at = usize::try_from(offset).unwrap_or(usize::MAX);
        let mask = 1u8 << (bit % 8);
        let byte = inode.durable.get_mut(at).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "offset past the synced data")
        })?;
        *byte ^= mask;
        if let Some(b) = inode.current.get_mut(at) {
            *b ^= mask;
        }
        Ok(())
    }

    /// Flips a random bit of the synced data of a random non-empty file directly in `dir`
    /// (optionally only at offsets `>= min_offset`). Returns what was flipped.
    pub fn flip_random_synced_bit(&self, dir: &Path, min_offset: u64) -> Option<BitFlip> {
        let (path, offset, bit) = {
            let mut st = lock(&self.state);
            let d = st.dirs.get(dir)?;
            let files: Vec<(String, u64)> = d
                .durable_entries
                .iter()
                .filter(|(_, id)| {
                    st.inodes
                        .get(id)
                        .is_some_and(|i| i.durable.len() as u64 > min_offset)
                })
                .map(|(n, id)| (n.clone(), *id))
                .collect();
            let (name, id) = st.rng.pick(&files).cloned()?;
            let len = st.inodes.get(&id).map_or(0, |i| i.durable.len() as u64);
            let offset = min_offset + st.rng.below(len - min_offset);
            let bit = st.rng.below(8) as u8;
            (dir.join(name), offset, bit)
        };
        self.flip_bit(&path, offset, bit).ok()?;
        Some(BitFlip { path, offset, bit })
    }

    /// A random number from the simulator's generator (for tests that want one stream).
    pub fn random(&self, n: u64) -> u64 {
        lock(&self.state).rng.below(n)
    }
}

/// An open file of a [`SimFs`].
#[derive(Debug)]
pub struct SimFile {
    state: Arc<Mutex<State>>,
    inode: u64,
    generation: u64,
    writable: bool,
}

impl SimFile {
    fn state(&self) -> io::Result<MutexGuard<'_, State>> {
        let st = lock(&self.state);
        if st.generation != self.generation {
            return Err(stale_handle());
        }
        if st.down {
            return Err(machine_down());
        }
        Ok(st)
    }

    fn check_writable(&self) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "file opened read-only",
            ))
        }
    }
}

impl StorageFile for SimFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let st = self.state()?;
        let inode = st
            .inodes
            .get(&self.inode)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "file is gone"))?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = start.saturating_add(buf.len());
        let src = inode.current.get(start..end).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the file",
            )
        })?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_writable()?;
        let mut st = self.state()?;
        let crashed_now = st.tick().is_err();
        st.stats.writes += 1;
        let mut data = buf.to_vec();
        let mut error = None;
        if crashed_now {
            // Died in the middle of the write: part of it may be in the cache.
            let cut = st.rng.below(data.len() as u64 + 1) as usize;
            data.truncate(cut);
            error = Some(machine_down());
        } else if let Some(n) = st.faults.enospc_after_writes.as_mut() {
            if *n == 0 {
                st.faults.enospc_after_writes = None;
                let cut = st.rng.below(data.len() as u64) as usize;
                data.truncate(cut);
                st.stats.injected_errors += 1;
                error = Some(io::Error::from_raw_os_error(ENOSPC));
            } else {
                *n -= 1;
            }
        }
        if error.is_none()
            && let Some(n) = st.faults.efbig_after_writes.as_mut()
        {
            if *n == 0 {
                st.faults.efbig_after_writes = None;
                let cut = st.rng.below(data.len() as u64) as usize;
                data.truncate(cut);
                st.stats.injected_errors += 1;
                st.stats.efbig_errors += 1;
                error = Some(io::Error::from_raw_os_error(EFBIG));
            } else {
                *n -= 1;
            }
        }
        if error.is_none()
            && let Some(limit) = st.faults.file_size_limit
        {
            let end = offset.saturating_add(data.len() as u64);
            if end > limit {
                data.truncate(limit.saturating_sub(offset) as usize);
                st.stats.injected_errors += 1;
                st.stats.efbig_errors += 1;
                error = Some(io::Error::from_raw_os_error(EFBIG));
            }
        }
        if error.is_none()
            && let Some(free) = st.faults.disk_free_bytes
        {
            let old_len = st
                .inodes
                .get(&self.inode)
                .map_or(0, |i| i.current.len() as u64);
            let end = offset.saturating_add(data.len() as u64);
            let growth = end.saturating_sub(old_len);
            if growth > free {
                // What fits: the overwritten part plus `free` bytes of growth.
                let fits = old_len.saturating_sub(offset) + free;
                data.truncate(usize::try_from(fits).unwrap_or(usize::MAX).min(data.len()));
                st.faults.disk_free_bytes = Some(0);
                st.stats.injected_errors += 1;
                st.stats.disk_full_errors += 1;
                error = Some(io::Error::from_raw_os_error(ENOSPC));
            } else {
                st.faults.disk_free_bytes = Some(free - growth);
            }
        }
        st.stats.bytes_written += data.len() as u64;
        if !data.is_empty() {
            let inode = st
                .inodes
                .get_mut(&self.inode)
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "file is gone"))?;
            apply_write(&mut inode.current, offset, &data);
            inode.pending.push(Pending::Write { offset, data });
        }
        match error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn len(&self) -> io::Result<u64> {
        let st = self.state()?;
        st.inodes
            .get(&self.inode)
            .map(|i| i.current.len() as u64)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "file is gone"))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        let mut st = self.state()?;
        st.tick()?;
        let old_len = st
            .inodes
            .get(&self.inode)
            .map_or(0, |i| i.current.len() as u64);
        if let Some(free) = st.faults.disk_free_bytes {
            if len > old_len && len - old_len > free {
                st.stats.injected_errors += 1;
                st.stats.disk_full_errors += 1;
                return Err(io::Error::from_raw_os_error(ENOSPC));
            }
            // Growing takes space, shrinking frees it.
            st.faults.disk_free_bytes = Some(if len >= old_len {
                free - (len - old_len)
            } else {
                free.saturating_add(old_len - len)
            });
        }
        if let Some(limit) = st.faults.file_size_limit
            && len > limit
            && len > old_len
        {
            st.stats.injected_errors += 1;
            st.stats.efbig_errors += 1;
            return Err(io::Error::from_raw_os_error(EFBIG));
        }
        let inode = st
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "file is gone"))?;
        let op = Pending::SetLen(len);
        apply(&mut inode.current, &op);
        inode.pending.push(op);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut st = self.state()?;
        st.tick()?;
        st.stats.syncs += 1;
        if let Some(n) = st.faults.eio_after_syncs.as_mut() {
            if *n == 0 {
                st.faults.eio_after_syncs = None;
                st.stats.injected_errors += 1;
                // The writeback failed: the unsynced data reached the disk or not, page by
                // page, and the kernel forgets it was dirty.
                st.resolve(self.inode);
                if st.options.eio_drops_cache
                    && let Some(inode) = st.inodes.get_mut(&self.inode)
                {
                    inode.current = inode.durable.clone();
                }
                return Err(io::Error::from_raw_os_error(EIO));
            }
            *n -= 1;
        }
        let inode = st
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "file is gone"))?;
        for op in std::mem::take(&mut inode.pending) {
            apply(&mut inode.durable, &op);
        }
        Ok(())
    }
}

impl FileSystem for SimFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>> {
        let mut st = lock(&self.state);
        if st.down {
            return Err(machine_down());
        }
        let (parent, name) = split(path)?;
        let id = match mode {
            OpenMode::Read | OpenMode::ReadWrite => st.lookup(path).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no file {}", path.display()),
                )
            })?,
            OpenMode::CreateNew => {
                if st.lookup(path).is_some() {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("{} exists", path.display()),
                    ));
                }
                st.dir_mut(&parent)?;
                st.tick()?;
                let id = st.next_inode;
                st.next_inode += 1;
                st.inodes.insert(id, Inode::default());
                st.dir_mut(&parent)?.entries.insert(name, id);
                id
            }
        };
        Ok(Arc::new(SimFile {
            state: self.state.clone(),
            inode: id,
            generation: st.generation,
            writable: mode != OpenMode::Read,
        }))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        if st.down {
            return Err(machine_down());
        }
        let mut missing: Vec<PathBuf> = path
            .ancestors()
            .filter(|p| !p.as_os_str().is_empty() && !st.dirs.contains_key(*p))
            .map(Path::to_path_buf)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        st.tick()?;
        missing.reverse();
        for p in missing {
            st.dirs.insert(
                p,
                Dir {
                    durable: false,
                    ..Dir::default()
                },
            );
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let st = lock(&self.state);
        if st.down {
            return Err(machine_down());
        }
        let d = st.dirs.get(dir).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no directory {}", dir.display()),
            )
        })?;
        Ok(d.entries.keys().cloned().collect())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        if st.down {
            return Err(machine_down());
        }
        let (parent, name) = split(path)?;
        if st.lookup(path).is_none() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no file {}", path.display()),
            ));
        }
        st.tick()?;
        st.dir_mut(&parent)?.entries.remove(&name);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        st.tick()?;
        st.stats.dir_syncs += 1;
        if let Some(n) = st.faults.eio_after_dir_syncs.as_mut() {
            if *n == 0 {
                st.faults.eio_after_dir_syncs = None;
                st.stats.injected_errors += 1;
                return Err(io::Error::from_raw_os_error(EIO));
            }
            *n -= 1;
        }
        let d = st.dir_mut(dir)?;
        d.durable_entries = d.entries.clone();
        let children: Vec<PathBuf> = st
            .dirs
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .cloned()
            .collect();
        for c in children {
            if let Some(cd) = st.dirs.get_mut(&c) {
                cd.durable = true;
            }
        }
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let st = lock(&self.state);
        st.dirs.contains_key(path) || st.lookup(path).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(seed: u64, options: SimOptions) -> (Arc<SimFs>, PathBuf) {
        let sim = SimFs::new(seed, options);
        let dir = PathBuf::from("/s/segments");
        sim.create_dir_all(&dir).unwrap();
        (sim, dir)
    }

    #[test]
    fn synced_data_survives_every_crash() {
        for seed in 0..200 {
            let (sim, dir) = setup(seed, SimOptions::default());
            let f = sim.open(&dir.join("f"), OpenMode::CreateNew).unwrap();
            f.write_all_at(&[7u8; 5000], 0).unwrap();
            f.sync_data().unwrap();
            sim.sync_dir(&dir).unwrap();
            f.write_all_at(&[9u8; 9000], 5000).unwrap();
            f.write_all_at(&[8u8; 100], 14000).unwrap();
            sim.crash();
            let img = sim.read_file(&dir.join("f")).unwrap();
            assert!(img.len() >= 5000 && img.len() <= 14100, "seed {seed}");
            assert!(img[..5000].iter().all(|&b| b == 7), "seed {seed}");
            // Old handles are dead.
            assert!(f.write_all_at(b"x", 0).is_err());
        }
    }

    #[test]
    fn in_order_crashes_keep_a_prefix_torn_at_boundaries() {
        let mut torn_lengths = BTreeSet::new();
        for seed in 0..300 {
            let (sim, dir) = setup(
                seed,
                SimOptions {
                    reorder: false,
                    ..SimOptions::default()
                },
            );
            let f = sim.open(&dir.join("f"), OpenMode::CreateNew).unwrap();
            f.sync_data().unwrap();
            sim.sync_dir(&dir).unwrap();
            let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8 + 1).collect();
            f.write_all_at(&data[..6000], 0).unwrap();
            f.write_all_at(&data[6000..], 6000).unwrap();
            sim.crash();
            let img = sim.read_file(&dir.join("f")).unwrap();
            // Always a prefix of what was written: no holes.
            assert_eq!(img[..], data[..img.len()], "seed {seed}");
            torn_lengths.insert(img.len());
        }
        assert!(
            torn_lengths.contains(&0)
                && torn_lengths.contains(&6000)
                && torn_lengths.contains(&10_000)
        );
        assert!(torn_lengths.contains(&4096) || torn_lengths.contains(&512));
        assert!(
            torn_lengths.iter().any(|l| l % 512 != 0),
            "arbitrary-byte tears happen"
        );
    }

    #[test]
    fn reordering_can_keep_a_later_write_and_lose_an_earlier_one() {
        let mut holes = 0;
        for seed in 0..200 {
            let (sim, dir) = setup(seed, SimOptions::default());
            let f = sim.open(&dir.join("f"), OpenMode::CreateNew).unwrap();
            f.sync_data().unwrap();
            sim.sync_dir(&dir).unwrap();
            f.write_all_at(&[1u8; 100], 0).unwrap();
            f.write_all_at(&[2u8; 100], 100).unwrap();
            sim.crash();
            let img = sim.read_file(&dir.join("f")).unwrap();
            if img.len() == 200 && img[0] == 0 && img[199] == 2 {
                holes += 1;
            }
        }
        assert!(holes > 0);
    }

    #[test]
    fn unsynced_creations_and_removals_may_be_undone() {
        let (mut vanished, mut reappeared) = (0, 0);
        for seed in 0..100 {
            let (sim, dir) = setup(seed, SimOptions::default());
            let old = sim.open(&dir.join("old"), OpenMode::CreateNew).unwrap();
            old.write_all_at(b"old", 0).unwrap();
            old.sync_data().unwrap();
            sim.sync_dir(&dir).unwrap();
            let new = sim.open(&dir.join("new"), OpenMode::CreateNew).unwrap();
            new.write_all_at(b"new", 0).unwrap();
            new.sync_data().unwrap();
            sim.remove_file(&dir.join("old")).unwrap();
            sim.crash();
            vanished += u32::from(!sim.exists(&dir.join("new")));
            if sim.exists(&dir.join("old")) {
                reappeared += 1;
                assert_eq!(sim.read_file(&dir.join("old")).unwrap(), b"old");
            }
        }
        assert!(vanished > 0 && vanished < 100 && reappeared > 0 && reappeared < 100);
    }

    #[test]
    fn faults_fire_on_schedule() {
        let (sim, dir) = setup(1, SimOptions::default());
        let f = sim.open(&dir.join("f"), OpenMode::CreateNew).unwrap();
        sim.set_faults(SimFaults {
            enospc_after_writes: Some(1),
            eio_after_syncs: Some(0),
            ..SimFaults::default()
        });
        f.write_all_at(b"ok", 0).unwrap();
        let e = f.write_all_at(b"full disk", 2).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(28));
        assert_eq!(f.sync_data().unwrap_err().raw_os_error(), Some(5));
        f.sync_data().unwrap();
        sim.set_faults(SimFaults {
            crash_after_ops: Some(2),
            ..SimFaults::default()
        });
        f.write_all_at(b"a", 0).unwrap();
        f.write_all_at(b"b", 0).unwrap();
        assert!(f.write_all_at(b"c", 0).is_err());
        assert!(sim.is_down());
        assert!(f.len().is_err());
        sim.crash();
        assert!(!sim.is_down());
    }

    #[test]
    fn efbig_and_full_disk_faults() {
        let (sim, dir) = setup(2, SimOptions::default());
        let f = sim.open(&dir.join("f"), OpenMode::CreateNew).unwrap();
        sim.set_faults(SimFaults {
            efbig_after_writes: Some(0),
            ..SimFaults::default()
        });
        let e = f.write_all_at(b"too large", 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(27));
        assert!(f.len().unwrap() < 9, "a prefix at most");
        f.write_all_at(b"one-shot", 0).unwrap();
        // A file-size limit: the part below the limit is written, then EFBIG, every time.
        sim.set_faults(SimFaults {
            file_size_limit: Some(100),
            ..SimFaults::default()
        });
        f.write_all_at(&[1u8; 90], 0).unwrap();
        let e = f.write_all_at(&[2u8; 20], 90).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(27));
        assert_eq!(f.len().unwrap(), 100);
        assert_eq!(
            f.write_all_at(b"x", 100).unwrap_err().raw_os_error(),
            Some(27)
        );
        assert_eq!(f.set_len(200).unwrap_err().raw_os_error(), Some(27));
        f.set_len(50).unwrap();
        // A full disk: 30 bytes free in all; overwrites cost nothing, shrinking frees space.
        sim.set_faults(SimFaults {
            disk_free_bytes: Some(30),
            ..SimFaults::default()
        });
        f.write_all_at(&[3u8; 40], 20).unwrap(); // grows 50 -> 60
        let g = sim.open(&dir.join("g"), OpenMode::CreateNew).unwrap();
        let e = g.write_all_at(&[4u8; 25], 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(28));
        assert_eq!(g.len().unwrap(), 20, "what fits is written");
        assert_eq!(
            g.write_all_at(b"y", 20).unwrap_err().raw_os_error(),
            Some(28)
        );
        g.write_all_at(b"overwrite", 0).unwrap();
        f.set_len(10).unwrap();
        g.write_all_at(&[5u8; 50], 20).unwrap();
        assert_eq!(
            g.write_all_at(b"z", 70).unwrap_err().raw_os_error(),
            Some(28)
        );
        let stats = sim.stats();
        assert_eq!((stats.efbig_errors, stats.disk_full_errors), (4, 3));
        // Space comes back with a new schedule.
        sim.set_faults(SimFaults::default());
        g.write_all_at(&[6u8; 1000], 70).unwrap();
    }

    #[test]
    fn same_seed_same_image() {
        let run = |seed| {
            let (sim, dir) = setup(seed, SimOptions::default());
            let f = sim.open(&dir.join("f"), OpenMode::CreateNew).unwrap();
            for i in 0..20u8 {
                f.write_all_at(&[i; 700], u64::from(i) * 700).unwrap();
            }
            sim.crash();
            sim.read_file(&dir.join("f"))
        };
        for seed in 0..20 {
            assert_eq!(run(seed), run(seed));
        }
    }

    #[test]
    fn bit_flips_hit_synced_bytes() {
        let (sim, dir) = setup(3, SimOptions::default());
        let f = sim.open(&dir.join("f"), OpenMode::CreateNew).unwrap();
        f.write_all_at(&[0u8; 64], 0).unwrap();
        f.sync_data().unwrap();
        sim.sync_dir(&dir).unwrap();
        let flip = sim.flip_random_synced_bit(&dir, 32).unwrap();
        assert!(flip.offset >= 32 && flip.offset < 64);
        let img = sim.read_file(&dir.join("f")).unwrap();
        assert_eq!(img[flip.offset as usize], 1 << flip.bit);
    }
}
