//! The simulated machine's state: inodes with durable and current images, directories, pending
//! writes.

use super::plan::{SimFaults, SimOptions, SimRng, SimStats};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

#[derive(Debug, Clone)]
pub(super) enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default, Clone)]
pub(super) struct Inode {
    pub(super) durable: Vec<u8>,
    pub(super) current: Vec<u8>,
    pub(super) pending: Vec<Pending>,
}

#[derive(Debug, Default, Clone)]
pub(super) struct Dir {
    pub(super) entries: BTreeMap<String, u64>,
    pub(super) durable_entries: BTreeMap<String, u64>,
    /// False while the directory's own creation is not durable.
    pub(super) durable: bool,
    /// Renames (from, to) since the last `sync_dir`: a crash keeps or undoes each group of
    /// names they link as one (a rename is atomic on a journaling file system).
    pub(super) renames: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
pub(super) struct State {
    pub(super) rng: SimRng,
    pub(super) options: SimOptions,
    pub(super) faults: SimFaults,
    pub(super) down: bool,
    pub(super) generation: u64,
    pub(super) next_inode: u64,
    pub(super) inodes: HashMap<u64, Inode>,
    pub(super) dirs: BTreeMap<PathBuf, Dir>,
    pub(super) stats: SimStats,
}

pub(super) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// `errno` values of the injected errors (Linux).
pub(super) const EIO: i32 = 5;
pub(super) const EFBIG: i32 = 27;
pub(super) const ENOSPC: i32 = 28;

pub(super) fn machine_down() -> io::Error {
    io::Error::other("simulated crash: the machine is down")
}

pub(super) fn stale_handle() -> io::Error {
    io::Error::other("simulated crash: this handle was opened before the crash")
}

pub(super) fn split(path: &Path) -> io::Result<(PathBuf, String)> {
    let parent = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    Ok((parent, name.to_owned()))
}

pub(super) fn apply_write(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let Ok(start) = usize::try_from(offset) else {
        return;
    };
    let end = start.saturating_add(data.len());
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(data);
}

pub(super) fn apply(image: &mut Vec<u8>, op: &Pending) {
    match op {
        Pending::Write { offset, data } => apply_write(image, *offset, data),
        Pending::SetLen(len) => image.resize(usize::try_from(*len).unwrap_or(usize::MAX), 0),
    }
}

impl State {
    /// Counts a mutating operation against the crash countdown.
    pub(super) fn tick(&mut self) -> io::Result<()> {
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
    pub(super) fn chunks(offset: u64, len: usize, boundary: u64) -> Vec<(usize, usize)> {
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

    pub(super) fn tear_boundary(&mut self) -> u64 {
        match self.rng.below(3) {
            0 => 512,
            1 => 4096,
            _ => 1,
        }
    }

    /// Resolves an inode's pending operations the way a power loss would, into its durable
    /// image. Returns (kept, dropped, torn).
    pub(super) fn resolve(&mut self, id: u64) -> (u64, u64, u64) {
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

    pub(super) fn dir_mut(&mut self, dir: &Path) -> io::Result<&mut Dir> {
        self.dirs.get_mut(dir).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no directory {}", dir.display()),
            )
        })
    }

    pub(super) fn lookup(&self, path: &Path) -> Option<u64> {
        let (parent, name) = split(path).ok()?;
        self.dirs.get(&parent)?.entries.get(&name).copied()
    }
}
