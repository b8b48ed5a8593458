//! What a simulation is told: its random generator, options and injected faults, and what it
//! reports.

use std::path::PathBuf;

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
    /// default: the engine relies on it (see `tests/sim_crash/`, the ignored regression test).
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

/// Scheduled faults. Each countdown counts operations from when
/// [`SimFs::set_faults`](super::SimFs::set_faults) was
/// called; `Some(0)` makes the very next such operation fail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimFaults {
    /// The machine goes down after this many more mutating operations (writes, truncations,
    /// syncs, creations, removals): the operation that would exceed it fails (a write may
    /// leave part of its bytes pending) and so does every later one, until
    /// [`SimFs::crash`](super::SimFs::crash).
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
    /// [`SimFs::set_faults`](super::SimFs::set_faults), a crash or a process restart).
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
