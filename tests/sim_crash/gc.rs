//! The `gc` family (issue 15): segment GC under crashes, full disks and readers.
//!
//! A scenario fills a store (the random workload, then forks whose parents are deleted so
//! pinned prefixes exist, then about half the other sessions deleted; verbatim sessions,
//! imports and large batches spanning many frames come with the workload), closes it, and
//! runs one GC (a threshold drawn from 0.5, 0.9 and 1.0) from that same state again and again
//! on copies of the simulated machine ([`SimFs::duplicate`]):
//!
//! - with a power loss after each file-system operation of the GC in turn (the write, fsync
//!   and rename of each compacted copy, the repointing commit's fsync, the renames over the
//!   segments, the directory fsyncs); a crash inside a write keeps part of it and the crash
//!   tears or drops what was not synced; `index.redb` is sometimes deleted too, and sometimes
//!   the reopen itself is crashed (in the middle of finishing the GC: removing `.gc.tmp`
//!   files, renaming `.gc` files) and reopened again;
//! - with `ENOSPC` at each write of the GC in turn, and with a full disk at growing sizes.
//!
//! After each: no `.gc`/`.gc.tmp` is left after the writable open; every acknowledged event
//! of every live session (a deleted parent's events read through its forks) reads as
//! appended, with the same surface and the same derived messages as before the GC; `verify`
//! is clean; and (at some points) an index rebuilt from the log equals the committed one,
//! entry for entry. A GC that failed with `GcError::Io` left the writer working (an append
//! succeeds), and a GC with room then succeeds.
//!
//! The run that completes carries on: more workload (appends, deletes, GCs in the mix), a
//! GC crashed at a random point, a reopen, a GC, a final reopen. Readers: one opened beside
//! the writer before its GC, one opened from `index.redb` before the writer (no writer
//! alive); both read every session after the GC. Wrong data fails the scenario; an error is
//! counted (`readers_failed_after_gc`; see format-spec §11.4 for why a reader opened from
//! the index file fails after a GC replaced a segment).

use super::*;

use std::collections::BTreeSet;

use sessionlog::index::{Index, NO_NODE, SessionRow};
use sessionlog::{DerivedMessage, GcError, GcOptions};

/// What the lifecycle parts of a scenario did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct GcTally {
    /// GCs that completed (in the sweeps and in the workload).
    pub(crate) gcs: u64,
    /// Segments they compacted.
    pub(crate) segments_compacted: u64,
    /// Records they dropped.
    pub(crate) records_dropped: u64,
    /// GCs crashed at one of their file-system operations, then reopened and checked.
    pub(crate) crash_points: u64,
    /// Of them, reopens that were crashed too (finishing the interrupted GC) and redone.
    pub(crate) crashed_reopens: u64,
    /// Reopens after a crashed GC that found `.gc` files and rebuilt the index.
    pub(crate) finished_at_open: u64,
    /// Unsynced writes a crash during a GC tore.
    pub(crate) torn_writes: u64,
    /// GCs that hit `ENOSPC` (a one-shot error or a full disk): failed with `GcError::Io`
    /// (the writer kept working) or with the writer failed (`PreviousIo`, reopened).
    pub(crate) enospc_io: u64,
    pub(crate) enospc_writer_failed: u64,
    /// A failed GC left `.gc` files of its finished copies behind (the next writable open
    /// installs them and rebuilds the index).
    pub(crate) enospc_left_copies: u64,
    /// Indexes rebuilt from the log and compared with the committed one (equal).
    pub(crate) index_compares: u64,
    /// Messages compared with the ones derived before the GC (equal).
    pub(crate) messages_checked: u64,
    /// Readers read every session after a GC: right, or failing with an error (never
    /// wrong data). `stale_*`: a reader opened from `index.redb` with no writer alive.
    pub(crate) readers_right_after_gc: u64,
    pub(crate) readers_failed_after_gc: u64,
    pub(crate) stale_readers_right_after_gc: u64,
    pub(crate) stale_readers_failed_after_gc: u64,
    /// In the workload of the other families: GCs tried (crashed or failed included), and
    /// retention policies applied (at open or by `apply_retention`) with what they evicted.
    pub(crate) workload_gcs: u64,
    pub(crate) retention_runs: u64,
    pub(crate) evictions: u64,
    /// Erase-mode GCs swept (gc family), and `Store::erase` calls in the workload: completed,
    /// refused because a live fork not named reads a named session, or failed by a fault.
    pub(crate) erase_gcs: u64,
    pub(crate) erases: u64,
    pub(crate) erases_refused: u64,
    pub(crate) erases_failed: u64,
}

impl GcTally {
    pub(crate) fn add(&mut self, o: &GcTally) {
        self.gcs += o.gcs;
        self.segments_compacted += o.segments_compacted;
        self.records_dropped += o.records_dropped;
        self.crash_points += o.crash_points;
        self.crashed_reopens += o.crashed_reopens;
        self.finished_at_open += o.finished_at_open;
        self.torn_writes += o.torn_writes;
        self.enospc_io += o.enospc_io;
        self.enospc_writer_failed += o.enospc_writer_failed;
        self.enospc_left_copies += o.enospc_left_copies;
        self.index_compares += o.index_compares;
        self.messages_checked += o.messages_checked;
        self.readers_right_after_gc += o.readers_right_after_gc;
        self.readers_failed_after_gc += o.readers_failed_after_gc;
        self.stale_readers_right_after_gc += o.stale_readers_right_after_gc;
        self.stale_readers_failed_after_gc += o.stale_readers_failed_after_gc;
        self.workload_gcs += o.workload_gcs;
        self.retention_runs += o.retention_runs;
        self.evictions += o.evictions;
        self.erase_gcs += o.erase_gcs;
        self.erases += o.erases;
        self.erases_refused += o.erases_refused;
        self.erases_failed += o.erases_failed;
    }

    /// The family did what it is for (so it cannot silently do nothing). `scenarios` is how
    /// many ran: choices drawn from the seed need a few to show up.
    pub(crate) fn assert_ran(&self, name: &str, family: &Family, scenarios: u64) {
        if family.gc_sweep {
            let checks = [
                ("gcs", self.gcs),
                ("segments_compacted", self.segments_compacted),
                ("records_dropped", self.records_dropped),
                ("crash_points", self.crash_points),
                ("crashed_reopens", self.crashed_reopens),
                ("finished_at_open", self.finished_at_open),
                ("torn_writes", self.torn_writes),
                ("enospc_io", self.enospc_io),
                ("index_compares", self.index_compares),
                ("messages_checked", self.messages_checked),
                ("readers_right_after_gc", self.readers_right_after_gc),
            ];
            for (what, n) in checks {
                assert!(n > 0, "{name}: {what} is 0: {self:?}");
            }
            // One seed in three (seed % 3 == 0) sweeps an erase-mode GC.
            assert!(
                self.erase_gcs > 0 || scenarios < 8,
                "{name}: no erase-mode GC swept: {self:?}"
            );
        }
        if family.lifecycle {
            assert!(self.workload_gcs > 0, "{name}: no GC in the workload");
            assert!(
                self.retention_runs > 0,
                "{name}: no retention in the workload"
            );
            // One scenario in eight erases (`Scenario::erases`).
            assert!(
                self.erases + self.erases_refused + self.erases_failed > 0 || scenarios < 100,
                "{name}: no erase in the workload"
            );
        }
    }
}

/// The GC family: the main workload's options, every durability, small segments.
pub(crate) const GC_FAMILY: Family = Family {
    options: SimOptions {
        reorder: true,
        volatile_dir_entries: true,
        volatile_mkdir: false,
        eio_drops_cache: true,
    },
    durabilities: &[0, 1, 2],
    faults: false,
    dir_eio: false,
    continue_after_fault: false,
    restarts: false,
    flips: false,
    new_ops: true,
    multiframe: false,
    index_damage: false,
    lifecycle: true,
    gc_sweep: true,
    gc_every_op: false,
};

/// An index's entries, without the caches a writer folds lazily (surface links, session
/// states, projections, and the surface fields of session rows: a rebuilt index folds a
/// session's surface when it is first read; `verify` compares the same way).
fn comparable(entries: Vec<sessionlog::index::DumpEntry>) -> BTreeSet<(String, Vec<u8>, Vec<u8>)> {
    entries
        .into_iter()
        .filter(|(table, _, _)| {
            !matches!(table.as_str(), "surface" | "session_state" | "projections")
        })
        .map(|(table, key, value)| {
            let value = match (table.as_str(), SessionRow::decode(&value)) {
                ("sessions", Ok(mut row)) => {
                    row.surface_covered = 0;
                    row.surface_head = NO_NODE;
                    row.surface_tail = NO_NODE;
                    row.surface_len = 0;
                    row.replace_generation = 0;
                    row.encode()
                }
                _ => value,
            };
            (table, key, value)
        })
        .collect()
}

/// The messages of each live session before the GC.
type Messages = HashMap<String, Vec<DerivedMessage>>;

fn step_error(e: StepError) -> String {
    match e {
        StepError::Append(e) => format!("{e}"),
        StepError::Fatal(e) => e,
    }
}

impl Scenario {
    /// The `gc` family's scenario (see the module documentation).
    pub(crate) fn run_gc(mut self) -> Res<Tally> {
        if self.rng.chance(1, 2) {
            // Small frames: imports and batches span many frames and segments.
            self.family.multiframe = true;
            let mut rng = SimRng::new(self.rng.next_u64());
            self.config = make_config(&mut rng, &self.sim, &self.family);
        }
        self.config.segment_bytes = *self.rng.pick(&[4096, 8192, 16_384]).unwrap();
        let mut slot = Some(self.open().map_err(|e| format!("first open: {e}"))?);
        self.gc_fill(&mut slot).map_err(|e| format!("fill: {e}"))?;
        let store = slot.take().ok_or("no store")?;
        store
            .close()
            .map_err(|e| format!("close after the fill: {e}"))?;
        self.all_durable("close");
        let fraction = *self.rng.pick(&[0.5, 0.9, 1.0]).unwrap();
        // One scenario in three sweeps an erase-mode GC (every purged record dropped).
        let erase = self.seed.is_multiple_of(3);
        let options = GcOptions::default().live_fraction(fraction).erase(erase);
        if erase {
            self.tally.gc.erase_gcs += 1;
        }
        // A reference run: the messages before the GC, and what the GC does.
        let (messages, plan) = {
            let mut b = self.branch(0);
            let store = b.open().map_err(|e| format!("reference open: {e}"))?;
            b.check_against_model(&store, "before the GC")?;
            let m = b.messages(&store)?;
            let plan = store
                .gc(options, &mut |_, _| {})
                .map_err(|e| format!("reference GC: {e}"))?;
            store.close().map_err(|e| format!("reference close: {e}"))?;
            (m, plan)
        };
        // CI sweeps about 40 crash points and 16 failing writes per GC, spread over all its
        // operations from an offset drawn per scenario; long runs
        // (`SESSIONLOG_SIM_GC_SCENARIOS`) sweep every one.
        let every_op = self.family.gc_every_op;
        let n = plan.compacted.len() as u64;
        let spread = |points: u64, ops: u64| {
            if every_op {
                1
            } else {
                ops.div_ceil(points).max(1)
            }
        };
        // A power loss after each file-system operation of the GC in turn.
        let stride = spread(40, 6 * n + 12);
        let mut done = None;
        let mut k = if every_op { 0 } else { self.rng.below(stride) };
        while k < 100_000 {
            let mut b = self.branch(k + 1);
            if let Some(store) = b.gc_crash_at(k, options, &messages).map_err(|e| {
                format!("GC (live fraction {fraction}) crashed after {k} operations: {e}")
            })? {
                done = Some((b, store));
                break;
            }
            self.tally.add(&b.tally);
            k += stride;
        }
        let (mut b, store) = done.ok_or("the GC never completed")?;
        // ENOSPC at each write of the GC in turn, then full disks of growing sizes.
        for disk_full in [false, true] {
            let (stride, unit) = match (disk_full, every_op) {
                (true, true) => (1, 1024),
                (true, false) => (1, (plan.rewritten / 12).max(512)),
                (false, _) => (spread(16, n + 4), 1),
            };
            let mut k = if every_op { 0 } else { self.rng.below(stride) };
            while k < 100_000 {
                let mut e = self.branch(20_000 + k);
                let completed = e
                    .gc_enospc_at(k * unit, disk_full, options, &messages)
                    .map_err(|e| {
                        format!("GC (live fraction {fraction}) with ENOSPC at write {k} (full disk: {disk_full}, {} bytes free): {e}", k * unit)
                    })?;
                self.tally.add(&e.tally);
                if completed {
                    break;
                }
                k += stride;
            }
        }
        // The run that completed carries on.
        let mut slot = Some(store);
        b.gc_carry_on(&mut slot, options)
            .map_err(|e| format!("after the GC: {e}"))?;
        self.tally.add(&b.tally);
        self.tally.crashes += self.tally.gc.crash_points;
        self.tally.scenarios = 1;
        Ok(self.tally)
    }

    /// The workload, then pinned prefixes (forks of sessions that are then deleted), then
    /// about half the other sessions deleted, then a little more workload.
    fn gc_fill(&mut self, slot: &mut Option<Store>) -> Res {
        let steps = if self.family.gc_every_op {
            self.rng.range(40, 120)
        } else {
            self.rng.range(30, 90)
        };
        if let Some(e) = self.workload(slot, steps, None)? {
            return Err(format!("workload: {e}"));
        }
        let store = slot.take().ok_or("no store")?;
        let r = self.gc_fill_deletes(&store);
        *slot = Some(store);
        r?;
        let steps = self.rng.range(5, 30);
        if let Some(e) = self.workload(slot, steps, None)? {
            return Err(format!("workload after the deletes: {e}"));
        }
        Ok(())
    }

    fn gc_fill_deletes(&mut self, store: &Store) -> Res {
        for _ in 0..self.rng.range(1, 3) {
            let parents: Vec<usize> = self
                .model
                .live()
                .into_iter()
                .filter(|&i| !self.model.sessions[i].events.is_empty())
                .collect();
            let Some(&i) = self.rng.pick(&parents) else {
                break;
            };
            let n = self.model.sessions.len();
            self.fork(store, i).map_err(step_error)?;
            if self.model.sessions.len() > n {
                self.delete(store, i).map_err(step_error)?;
            }
        }
        for i in self.model.live() {
            if self.rng.chance(1, 2) {
                self.delete(store, i).map_err(step_error)?;
            }
        }
        Ok(())
    }

    /// A copy of this scenario's machine and store directory, to run one future of it.
    fn branch(&self, salt: u64) -> Scenario {
        let dir = scratch_dir();
        if let Ok(entries) = std::fs::read_dir(self.dir.path()) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_file()) {
                    let _ = std::fs::copy(e.path(), dir.path().join(e.file_name()));
                }
            }
        }
        let sim = self.sim.duplicate(self.dir.path(), dir.path());
        let config = self.config.clone().with_fs(sim.clone());
        let mut rng = self.rng.clone();
        for _ in 0..=salt % 17 {
            rng.next_u64();
        }
        let rng = SimRng::new(rng.next_u64() ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        Scenario {
            seed: self.seed,
            rng,
            sim,
            dir,
            config,
            model: self.model.clone(),
            tally: Tally::default(),
            family: self.family,
            older_index: None,
            index_damaged: false,
            errors_at_open: 0,
            in_flight: None,
            volatile_reopen: false,
            evicted_at_open: Vec::new(),
        }
    }

    /// Every live session's derived messages (those that derive).
    fn messages(&self, store: &Store) -> Res<Messages> {
        let mut out = Messages::new();
        for s in self.model.sessions.iter().filter(|s| s.deleted.is_none()) {
            if let Ok(m) = store.messages(&s.id) {
                out.insert(s.id.clone(), m);
            }
        }
        Ok(out)
    }

    /// The messages read now are the ones derived before the GC.
    fn check_messages(&mut self, store: &Store, before: &Messages, what: &str) -> Res {
        for (id, want) in before {
            if self.evicted_at_open.contains(id) {
                // `Config::retention` evicted it at this open (the model knows).
                continue;
            }
            match store.messages(id) {
                Ok(got) if got == *want => self.tally.gc.messages_checked += 1,
                Ok(got) => {
                    return Err(format!(
                        "{what}: the messages of {id} changed: {got:?}, before {want:?}"
                    ));
                }
                Err(e) => return Err(format!("{what}: messages of {id}: {e}")),
            }
        }
        Ok(())
    }

    /// No compacted copy is left in `segments/` (after a writable open, or a failed GC).
    fn gc_files(&self) -> Vec<String> {
        sessionlog::fs::FileSystem::list(&*self.sim, &self.seg_dir())
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n.ends_with(".gc") || n.ends_with(".gc.tmp"))
            .collect()
    }

    /// The checks after a writable open: no `.gc` files, the model, the messages.
    fn check_after_gc(&mut self, store: &Store, before: &Messages, what: &str) -> Res {
        let left = self.gc_files();
        if !left.is_empty() {
            return Err(format!("{what}: a writable open left {left:?}"));
        }
        self.check_against_model(store, what)?;
        self.check_messages(store, before, what)
    }

    /// Closes the store, rebuilds its index from the log (the file deleted), and compares
    /// the two entry for entry. Returns the store reopened.
    fn check_rebuilt_index(&mut self, store: Store, what: &str) -> Res<Store> {
        store
            .close()
            .map_err(|e| format!("{what}: close before the rebuild: {e}"))?;
        let dump = |path: &Path| {
            Index::open_read_only(path)
                .and_then(|i| i.dump())
                .map_err(|e| format!("{what}: reading {}: {e}", path.display()))
        };
        let committed = comparable(dump(&self.index_path())?);
        std::fs::remove_file(self.index_path()).map_err(|e| format!("{what}: {e}"))?;
        let store = self
            .open()
            .map_err(|e| format!("{what}: open with the index deleted: {e}"))?;
        store
            .close()
            .map_err(|e| format!("{what}: close after the rebuild: {e}"))?;
        let mut rebuilt = comparable(dump(&self.index_path())?);
        // An erase seals the active segment and commits the watermark at the start of the
        // empty segment it created; a rebuild puts it at the end of the last frame, in the
        // segment before. Both say "everything is indexed".
        let key = |set: &BTreeSet<(String, Vec<u8>, Vec<u8>)>| {
            set.iter()
                .find(|(t, k, _)| t == "meta" && k.as_slice() == b"watermark")
                .cloned()
        };
        if let (Some(c), Some(r)) = (key(&committed), key(&rebuilt))
            && c != r
        {
            let word = |v: &[u8], i: usize| {
                v.get(i * 8..i * 8 + 8)
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map(u64::from_le_bytes)
            };
            let at_start =
                word(&c.2, 1) == Some(SEGMENT_HEADER_LEN) && word(&c.2, 2) == Some(u64::MAX);
            if at_start && word(&r.2, 0).map(|s| s + 1) == word(&c.2, 0) {
                rebuilt.remove(&r);
                rebuilt.insert(c);
            }
        }
        if committed != rebuilt {
            let only_committed: Vec<_> = committed.difference(&rebuilt).take(4).collect();
            let only_rebuilt: Vec<_> = rebuilt.difference(&committed).take(4).collect();
            return Err(format!(
                "{what}: the index rebuilt from the log differs from the committed one: only committed {only_committed:?}, only rebuilt {only_rebuilt:?}"
            ));
        }
        self.tally.gc.index_compares += 1;
        self.open()
            .map_err(|e| format!("{what}: reopen after the rebuild: {e}"))
    }

    /// Reads every session the model holds through `reader`: right, or an error; never wrong
    /// data. Returns true when everything read right.
    fn reader_reads_right(&self, reader: &Store, what: &str) -> Res<bool> {
        let mut right = true;
        for s in self.model.sessions.iter().filter(|s| s.deleted.is_none()) {
            let Some(len) = reader.len(&s.id) else {
                return Err(format!("{what}: the reader misses session {}", s.id));
            };
            if len as usize != s.events.len() {
                return Err(format!(
                    "{what}: the reader shows {len} events of {}, the model {}",
                    s.id,
                    s.events.len()
                ));
            }
            let events = match reader.events(&s.id, 0..len) {
                Ok(it) => it,
                Err(_) => {
                    right = false;
                    continue;
                }
            };
            for (k, e) in events.enumerate() {
                match e {
                    Ok(e) if same_event(&s.events[k], &e) => {}
                    Ok(e) => {
                        return Err(format!(
                            "{what}: the reader reads {} seq {k} as {e:?}, appended {:?}",
                            s.id, s.events[k]
                        ));
                    }
                    Err(_) => {
                        right = false;
                        break;
                    }
                }
            }
        }
        Ok(right)
    }

    /// Counts a finished GC's report.
    pub(crate) fn count_gc(&mut self, report: &sessionlog::GcReport) {
        if trace() {
            eprintln!("GC: {report:?}");
        }
        self.tally.gc.gcs += 1;
        self.tally.gc.segments_compacted += report.compacted.len() as u64;
        self.tally.gc.records_dropped += report.records_dropped;
    }

    /// Opens the store, runs the GC with a power loss after `k` file-system operations, and
    /// checks the reopened store. Returns the store when the GC completed (`k` was past its
    /// last operation), after checking it and readers beside it.
    fn gc_crash_at(&mut self, k: u64, options: GcOptions, before: &Messages) -> Res<Option<Store>> {
        let stale = if k == 0 || self.rng.chance(1, 3) {
            // A reader from `index.redb`, no writer alive.
            Some(
                Store::open(self.dir.path(), self.config.clone().read_only(true))
                    .map_err(|e| format!("a reader with no writer: {e}"))?,
            )
        } else {
            None
        };
        let store = self.open().map_err(|e| format!("open: {e}"))?;
        let beside = if stale.is_some() {
            Some(
                Store::open(self.dir.path(), self.config.clone().read_only(true))
                    .map_err(|e| format!("a reader beside the writer: {e}"))?,
            )
        } else {
            None
        };
        self.sim.set_faults(SimFaults {
            crash_after_ops: Some(k),
            ..SimFaults::default()
        });
        let result = store.gc(options, &mut |_, _| {});
        if !self.sim.is_down() {
            self.sim.set_faults(SimFaults::default());
            let report = result.map_err(|e| format!("the GC failed without a fault: {e}"))?;
            self.count_gc(&report);
            self.check_after_gc(&store, before, "after the GC")?;
            if let Some(reader) = beside {
                let right = self.reader_reads_right(&reader, "a reader beside the GC")?;
                if right {
                    self.tally.gc.readers_right_after_gc += 1;
                } else {
                    self.tally.gc.readers_failed_after_gc += 1;
                }
            }
            if let Some(reader) = stale {
                let right = self.reader_reads_right(&reader, "a reader from index.redb")?;
                if right {
                    self.tally.gc.stale_readers_right_after_gc += 1;
                } else {
                    self.tally.gc.stale_readers_failed_after_gc += 1;
                }
            }
            let store = self.check_rebuilt_index(store, "after the GC")?;
            return Ok(Some(store));
        }
        drop((stale, beside));
        if result.is_ok() {
            return Err("the GC returned Ok with the machine down".into());
        }
        self.tally.gc.crash_points += 1;
        store.abandon();
        if trace() {
            eprintln!(
                "GC crashed after {k} operations ({result:?}): {:?}",
                sessionlog::fs::FileSystem::list(&*self.sim, &self.seg_dir())
            );
        }
        let crash = self.sim.crash();
        if trace() {
            eprintln!(
                "crash {crash:?}: {:?}",
                sessionlog::fs::FileSystem::list(&*self.sim, &self.seg_dir())
            );
        }
        self.tally.gc.torn_writes += crash.torn;
        if self.rng.chance(1, 4) {
            let _ = std::fs::remove_file(self.index_path());
            self.tally.index_deleted += 1;
        }
        let had_copies = self.gc_files().iter().any(|n| n.ends_with(".gc"));
        if self.rng.chance(1, 3) {
            // The reopen itself is crashed (finishing the GC, recovering, catching up).
            self.sim.set_faults(SimFaults {
                crash_after_ops: Some(self.rng.below(12)),
                ..SimFaults::default()
            });
            match Store::open(self.dir.path(), self.config.clone()) {
                Ok(s) => s.abandon(),
                Err(_) if self.sim.is_down() => {}
                Err(e) => return Err(format!("a reopen that crashed failed with {e}")),
            }
            if self.sim.is_down() {
                self.tally.gc.crashed_reopens += 1;
            }
            self.sim.crash();
        }
        let store = self.open().map_err(|e| format!("reopen: {e}"))?;
        if had_copies && store.recovery_report().index_rebuilt {
            self.tally.gc.finished_at_open += 1;
        }
        self.check_after_gc(&store, before, "reopened")?;
        if self.rng.chance(1, 4) {
            let store = self.check_rebuilt_index(store, "reopened")?;
            store.close().map_err(|e| format!("close: {e}"))?;
        } else {
            store.close().map_err(|e| format!("close: {e}"))?;
        }
        Ok(None)
    }

    /// Opens the store and runs the GC with `ENOSPC` at its `k`-th write (or a full disk
    /// with `k` bytes free). Returns true when the GC completed without a fault.
    fn gc_enospc_at(
        &mut self,
        k: u64,
        disk_full: bool,
        options: GcOptions,
        before: &Messages,
    ) -> Res<bool> {
        let store = self.open().map_err(|e| format!("open: {e}"))?;
        let errors = self.sim.stats().injected_errors;
        self.sim.set_faults(if disk_full {
            SimFaults {
                disk_free_bytes: Some(k),
                ..SimFaults::default()
            }
        } else {
            SimFaults {
                enospc_after_writes: Some(k),
                ..SimFaults::default()
            }
        });
        let result = store.gc(options, &mut |_, _| {});
        self.sim.set_faults(SimFaults::default());
        let fired = self.sim.stats().injected_errors > errors;
        let writer_failed = match result {
            Ok(report) if !fired => {
                self.count_gc(&report);
                self.check_after_gc(&store, before, "after the GC")?;
                store.close().map_err(|e| format!("close: {e}"))?;
                return Ok(true);
            }
            Ok(report) => {
                return Err(format!(
                    "the GC returned Ok although a write failed with ENOSPC: {report:?}"
                ));
            }
            Err(GcError::Io { .. }) => {
                self.tally.gc.enospc_io += 1;
                if self.gc_files().iter().any(|n| n.ends_with(".gc")) {
                    self.tally.gc.enospc_left_copies += 1;
                }
                // Nothing else changed: every read is right and the writer works.
                self.check_against_model(&store, "after the failed GC")?;
                self.check_messages(&store, before, "after the failed GC")?;
                let live = self.model.live();
                if let Some(&i) = self.rng.pick(&live) {
                    let seq = self.model.sessions[i].events.len() as u64;
                    let e = Event::new(
                        "assistant/chunk",
                        seq,
                        1,
                        r#"{"chunk":{"type":"text-delta","text":"after a failed GC"}}"#,
                    );
                    let id = self.model.sessions[i].id.clone();
                    self.model.sessions[i].events.push(e.clone());
                    store
                        .append(&id, e)
                        .map_err(|e| format!("an append after a failed GC: {e}"))?;
                }
                false
            }
            Err(GcError::Write(AppendError::PreviousIo(_))) => {
                self.tally.gc.enospc_writer_failed += 1;
                true
            }
            Err(e) => return Err(format!("the GC failed with {e}")),
        };
        if writer_failed {
            store.abandon();
        } else {
            store
                .close()
                .map_err(|e| format!("close after the failed GC: {e}"))?;
            self.all_durable("close");
        }
        let store = self.open().map_err(|e| format!("reopen: {e}"))?;
        self.check_after_gc(&store, before, "reopened after the failed GC")?;
        let report = store
            .gc(options, &mut |_, _| {})
            .map_err(|e| format!("a GC with room after the failed one: {e}"))?;
        self.count_gc(&report);
        self.check_against_model(&store, "after a GC with room")?;
        store.close().map_err(|e| format!("close: {e}"))?;
        Ok(false)
    }

    /// After the GC completed: more workload (appends, deletes, GCs in the mix), more
    /// deletes, a GC crashed at a random operation, a reopen, a GC, a final reopen.
    fn gc_carry_on(&mut self, slot: &mut Option<Store>, options: GcOptions) -> Res {
        let steps = self.rng.range(10, 40);
        if let Some(e) = self.workload(slot, steps, None)? {
            return Err(format!("workload: {e}"));
        }
        let store = slot.take().ok_or("no store")?;
        self.gc_fill_deletes(&store)?;
        let messages = self.messages(&store)?;
        self.sim.set_faults(SimFaults {
            crash_after_ops: Some(self.rng.below(40)),
            ..SimFaults::default()
        });
        let result = store.gc(options, &mut |_, _| {});
        let store = if self.sim.is_down() {
            self.tally.gc.crash_points += 1;
            store.abandon();
            let crash = self.sim.crash();
            self.tally.gc.torn_writes += crash.torn;
            let store = self.open().map_err(|e| format!("reopen: {e}"))?;
            // Unacknowledged work may be gone: the model check decides, then messages are
            // compared for the sessions whose length did not change.
            self.check_against_model(&store, "the second GC crashed, reopened")?;
            store
        } else {
            self.sim.set_faults(SimFaults::default());
            let report = result.map_err(|e| format!("the second GC: {e}"))?;
            self.count_gc(&report);
            self.all_durable("gc");
            self.check_after_gc(&store, &messages, "after the second GC")?;
            store
        };
        let report = store
            .gc(GcOptions::default().live_fraction(1.0), &mut |_, _| {})
            .map_err(|e| format!("the last GC: {e}"))?;
        self.count_gc(&report);
        self.all_durable("gc");
        let messages = self.messages(&store)?;
        store.close().map_err(|e| format!("close: {e}"))?;
        let store = self.open().map_err(|e| format!("final reopen: {e}"))?;
        self.check_after_gc(&store, &messages, "final reopen")?;
        let store = self.check_rebuilt_index(store, "final")?;
        for s in self.model.sessions.iter().filter(|s| s.deleted.is_none()) {
            self.tally.acked_events += s.events.len() as u64;
        }
        store.close().map_err(|e| format!("final close: {e}"))?;
        Ok(())
    }
}
