//! [`SimFs`]: the simulated file system's handle, its fault controls and its [`FileSystem`]
//! implementation.

use super::file::SimFile;
use super::plan::{BitFlip, CrashReport, SimFaults, SimOptions, SimRng, SimStats};
use super::state::{Dir, EIO, Inode, State, lock, machine_down, split};
use crate::fs::{FileSystem, OpenMode, StorageFile};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The simulated file system. Share it between a store ([`crate::store::Config::fs`]) and the
/// test through an `Arc`.
#[derive(Debug)]
pub struct SimFs {
    pub(super) state: Arc<Mutex<State>>,
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

    /// The faults still scheduled.
    pub fn faults(&self) -> SimFaults {
        lock(&self.state).faults
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
            // The names linked by unsynced renames share one fate: all their changes are
            // kept, or all undone (no state where a rename removed its source and lost its
            // target). No randomness is drawn when there are none.
            let mut fate: HashMap<&String, bool> = HashMap::new();
            for group in rename_groups(&dir.renames) {
                let take_new = !volatile_entries || st.rng.chance(1, 2);
                for name in group {
                    if let Some(n) = names.get(name) {
                        fate.insert(n, take_new);
                    }
                }
            }
            for name in names {
                let now = dir.entries.get(name);
                let then = dir.durable_entries.get(name);
                if now == then {
                    continue;
                }
                let take_new = match fate.get(name) {
                    Some(&f) => f,
                    None => !volatile_entries || st.rng.chance(1, 2),
                };
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
                d.renames.clear();
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

    /// A copy of the whole simulated machine (files, pending writes, directory entries, its
    /// random generator and fault schedule), with every path under `from` moved under `to`.
    /// Handles opened on `self` do not reach the copy. For tests that run many futures from
    /// one state (a crash at each operation of one call).
    pub fn duplicate(&self, from: &Path, to: &Path) -> Arc<SimFs> {
        let mut st = lock(&self.state).clone();
        st.dirs = std::mem::take(&mut st.dirs)
            .into_iter()
            .map(|(p, d)| match p.strip_prefix(from) {
                Ok(rest) => (to.join(rest), d),
                Err(_) => (p, d),
            })
            .collect();
        for p in to.ancestors().filter(|p| !p.as_os_str().is_empty()) {
            st.dirs.entry(p.to_path_buf()).or_insert_with(|| Dir {
                durable: true,
                ..Dir::default()
            });
        }
        Arc::new(SimFs {
            state: Arc::new(Mutex::new(st)),
        })
    }

    /// A random number from the simulator's generator (for tests that want one stream).
    pub fn random(&self, n: u64) -> u64 {
        lock(&self.state).rng.below(n)
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

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        if st.down {
            return Err(machine_down());
        }
        let (parent, from_name) = split(from)?;
        let (to_parent, to_name) = split(to)?;
        if parent != to_parent {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the simulated file system renames only within a directory",
            ));
        }
        st.tick()?;
        let d = st.dir_mut(&parent)?;
        let Some(id) = d.entries.remove(&from_name) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no file {}", from.display()),
            ));
        };
        d.entries.insert(to_name.clone(), id);
        d.renames.push((from_name, to_name));
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
        d.renames.clear();
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

/// The groups of names linked by `renames` (each rename links its source and its target), in
/// the order their first rename was made.
fn rename_groups(renames: &[(String, String)]) -> Vec<Vec<&String>> {
    let mut groups: Vec<Vec<&String>> = Vec::new();
    for (from, to) in renames {
        let hit: Vec<usize> = (0..groups.len())
            .filter(|&g| groups[g].contains(&from) || groups[g].contains(&to))
            .collect();
        let mut merged: Vec<&String> = Vec::new();
        for &g in hit.iter().rev() {
            merged.extend(groups.remove(g));
        }
        for name in [from, to] {
            if !merged.contains(&name) {
                merged.push(name);
            }
        }
        let at = hit
            .first()
            .copied()
            .unwrap_or(groups.len())
            .min(groups.len());
        groups.insert(at, merged);
    }
    groups
}
