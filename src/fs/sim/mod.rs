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
//! an unsynced creation or removal may vanish or reappear, and an unsynced rename is kept or
//! undone whole (with the other renames its names take part in). Then the durable image becomes the
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
//!
//! [`FileSystem`]: crate::fs::FileSystem

mod file;
mod plan;
mod simfs;
mod state;

pub use file::SimFile;
pub use plan::{BitFlip, CrashReport, SimFaults, SimOptions, SimRng, SimStats};
pub use simfs::SimFs;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileSystem, OpenMode};
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

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
    fn a_rename_survives_a_crash_whole_or_not_at_all() {
        let (mut kept, mut undone) = (0, 0);
        for seed in 0..200 {
            let (sim, dir) = setup(seed, SimOptions::default());
            let (old, new) = (dir.join("n.seg"), dir.join("n.gc"));
            for (path, data) in [(&old, b"old"), (&new, b"new")] {
                let f = sim.open(path, OpenMode::CreateNew).unwrap();
                f.write_all_at(data, 0).unwrap();
                f.sync_data().unwrap();
            }
            sim.sync_dir(&dir).unwrap();
            // An unrelated unsynced creation keeps its own fate.
            sim.open(&dir.join("other"), OpenMode::CreateNew).unwrap();
            sim.rename(&new, &old).unwrap();
            sim.crash();
            match (sim.read_file(&old).as_deref(), sim.exists(&new)) {
                (Some(b"new"), false) => kept += 1,
                (Some(b"old"), true) => undone += 1,
                other => panic!("seed {seed}: half a rename survived: {other:?}"),
            }
        }
        assert!(kept > 0 && undone > 0, "{kept} kept, {undone} undone");
    }

    #[test]
    fn a_duplicate_is_independent_and_moved() {
        let (sim, dir) = setup(4, SimOptions::default());
        let f = sim.open(&dir.join("f"), OpenMode::CreateNew).unwrap();
        f.write_all_at(b"synced", 0).unwrap();
        f.sync_data().unwrap();
        sim.sync_dir(&dir).unwrap();
        f.write_all_at(b" pending", 6).unwrap();
        let copy = sim.duplicate(Path::new("/s"), Path::new("/t"));
        let moved = PathBuf::from("/t/segments/f");
        assert_eq!(copy.read_file(&moved).unwrap(), b"synced pending");
        assert!(!copy.exists(&dir.join("f")));
        f.write_all_at(b"X", 0).unwrap();
        assert_eq!(copy.read_file(&moved).unwrap()[0], b's');
        copy.crash();
        assert!(copy.read_file(&moved).unwrap().starts_with(b"synced"));
        // The original's handle still works: the copy's crash did not touch it.
        f.write_all_at(b"Y", 0).unwrap();
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
