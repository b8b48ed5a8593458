//! The storage lifecycle in the workload of the families with `lifecycle` set: `Store::gc`
//! (thresholds 0.5, 0.9 and 1.0, some dry runs), `Store::apply_retention` (by count, idle
//! time or size, with pinned sessions), and `Config::retention` applied at writable opens.
//!
//! A GC that completes is a checkpoint (everything is durable), and every live session reads
//! as the model says right after it. A GC whose write, fsync or rename failed (`ENOSPC`,
//! `EFBIG`, `EIO`: `GcError::Io`) leaves the writer working: the workload goes on. A crash
//! inside a GC is a crash like any other (the round's reopen checks the model). A retention
//! run evicts exactly what `plan_retention` said, never a pinned session, least recently
//! active first (an idle limit aside), and leaves nothing more to evict.
//!
//! One scenario in eight also erases (`Store::erase`): it is refused, writing nothing, exactly
//! when a live fork not named reads a named session; otherwise the named sessions are gone,
//! everything is durable and every other session reads as the model says.

use super::*;

use std::collections::BTreeSet;

use sessionlog::{EraseError, Eviction, EvictionReason, GcError, GcOptions};

impl Scenario {
    /// A GC (two times in three) or a retention run.
    pub(crate) fn lifecycle_step(&mut self, store: &Store) -> Result<(), StepError> {
        if self.erases() && self.rng.chance(1, 3) {
            return self.workload_erase(store);
        }
        if self.rng.chance(2, 3) {
            self.workload_gc(store)
        } else {
            self.workload_retention(store)
        }
    }

    fn workload_gc(&mut self, store: &Store) -> Result<(), StepError> {
        let fraction = *self.rng.pick(&[0.5, 0.9, 1.0]).unwrap();
        let dry_run = self.rng.chance(1, 8);
        let options = GcOptions::default()
            .live_fraction(fraction)
            .dry_run(dry_run);
        if !dry_run {
            // An index copied before a GC points into the segments it replaces: no crash
            // brings such an index back (the GC's commit is durable).
            self.older_index = None;
        }
        self.tally.gc.workload_gcs += 1;
        let errors = self.sim.stats().injected_errors;
        let down = |e: String| StepError::Append(AppendError::PreviousIo(e.into()));
        match store.gc(options, &mut |_, _| {}) {
            Ok(report) => {
                if trace() {
                    eprintln!("workload GC ({fraction}, dry run {dry_run}): {report:?}");
                }
                if !dry_run {
                    self.count_gc(&report);
                }
                self.all_durable("gc (checkpoint)");
                self.check_live_reads(store)
            }
            Err(GcError::Write(e)) => Err(StepError::Append(e)),
            Err(e) if self.sim.is_down() => Err(down(format!("gc: {e}"))),
            Err(GcError::Io { .. }) if self.sim.stats().injected_errors > errors => {
                // The copy could not be written: the writer works on, nothing changed.
                self.tally.gc.enospc_io += 1;
                self.all_durable("gc (checkpoint)");
                self.check_live_reads(store)
            }
            Err(e) => Err(StepError::Fatal(format!("gc failed without a fault: {e}"))),
        }
    }

    /// True for one scenario in eight, drawn from the seed (not from `rng`, so that the seed
    /// replays in `regressions.rs` keep their paths).
    pub(crate) fn erases(&self) -> bool {
        self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61 == 5
    }

    /// The live sessions outside `named` that read (through any chain of forks, each with a
    /// non-empty seed) the events of a named session: what makes an erase refuse.
    fn erase_readers(&self, named: &[usize]) -> Vec<usize> {
        let ids: HashSet<&str> = named
            .iter()
            .map(|&i| self.model.sessions[i].id.as_str())
            .collect();
        self.model
            .live()
            .into_iter()
            .filter(|i| !named.contains(i))
            .filter(|&i| {
                let mut reads = u64::MAX;
                for (ancestor, seed) in &self.model.sessions[i].lineage {
                    reads = reads.min(*seed);
                    if reads == 0 {
                        return false;
                    }
                    if ids.contains(ancestor.as_str()) {
                        return true;
                    }
                }
                false
            })
            .collect()
    }

    /// `Store::erase` of one or two live sessions (sometimes with the forks that read them).
    fn workload_erase(&mut self, store: &Store) -> Result<(), StepError> {
        // An id minted twice (a deleted one reused) is left alone: the model's lineages name
        // ids, and could not tell the two sessions apart.
        let live: Vec<usize> = self
            .model
            .live()
            .into_iter()
            .filter(|&i| {
                let id = &self.model.sessions[i].id;
                self.model.sessions.iter().filter(|s| &s.id == id).count() == 1
            })
            .collect();
        let Some(&first) = self.rng.pick(&live) else {
            return Ok(());
        };
        let mut named = vec![first];
        if self.rng.chance(1, 3)
            && let Some(&second) = self.rng.pick(&live)
            && second != first
        {
            named.push(second);
        }
        let mut readers = self.erase_readers(&named);
        if !readers.is_empty() && self.rng.chance(1, 2) {
            named.append(&mut readers);
            readers = self.erase_readers(&named);
        }
        let ids: Vec<String> = named
            .iter()
            .map(|&i| self.model.sessions[i].id.clone())
            .collect();
        if trace() {
            eprintln!("erase {ids:?} (live readers not named: {readers:?})");
        }
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        for &i in &named {
            self.model.sessions[i].deleted = Some(false);
        }
        // An index copied before an erase points into the segments it replaces.
        self.older_index = None;
        let errors = self.sim.stats().injected_errors;
        let result = store.erase(&refs, &mut |_, _| {});
        let down = |e: String| StepError::Append(AppendError::PreviousIo(e.into()));
        match result {
            Ok(report) => {
                if !readers.is_empty() {
                    return Err(StepError::Fatal(format!(
                        "erase of {ids:?} succeeded, but live forks read them: {readers:?}"
                    )));
                }
                self.count_gc(&report);
                self.tally.gc.erases += 1;
                self.tally.deletes += ids.len() as u64;
                if let Some(id) = ids.iter().find(|id| store.len(id).is_some()) {
                    return Err(StepError::Fatal(format!("erased {id} still answers")));
                }
                self.all_durable("erase (checkpoint)");
                match store.verify() {
                    Ok(report) if report.is_clean() => {}
                    other => {
                        return Err(StepError::Fatal(format!(
                            "after erasing {ids:?}, verify is not clean: {other:?}"
                        )));
                    }
                }
                self.check_live_reads(store)
            }
            Err(EraseError::ForksRead { id, forks }) => {
                for &i in &named {
                    self.model.sessions[i].deleted = None;
                }
                let expected: BTreeSet<&str> = readers
                    .iter()
                    .map(|&i| self.model.sessions[i].id.as_str())
                    .collect();
                if !ids.contains(&id) || forks.iter().any(|f| !expected.contains(f.as_str())) {
                    return Err(StepError::Fatal(format!(
                        "erase of {ids:?} refused for {id}'s forks {forks:?}; the model's \
                         readers: {expected:?}"
                    )));
                }
                self.tally.gc.erases_refused += 1;
                Ok(())
            }
            Err(EraseError::Delete(e)) => {
                self.tally.gc.erases_failed += 1;
                Err(StepError::Append(e))
            }
            Err(EraseError::Gc(GcError::Write(e))) => {
                self.tally.gc.erases_failed += 1;
                Err(StepError::Append(e))
            }
            Err(e) if self.sim.is_down() => {
                self.tally.gc.erases_failed += 1;
                Err(down(format!("erase: {e}")))
            }
            Err(EraseError::Gc(GcError::Io { .. }))
                if self.sim.stats().injected_errors > errors =>
            {
                // The deletes are in (and the GC's opening checkpoint made everything durable);
                // their bytes could not be erased: the writer works on.
                self.tally.gc.erases_failed += 1;
                self.all_durable("erase (checkpoint)");
                self.check_live_reads(store)
            }
            Err(e) => Err(StepError::Fatal(format!(
                "erase of {ids:?} failed without a fault: {e}"
            ))),
        }
    }

    /// Every live session reads as the model says (after a GC replaced segments under it).
    fn check_live_reads(&mut self, store: &Store) -> Result<(), StepError> {
        for s in self.model.sessions.iter().filter(|s| s.deleted.is_none()) {
            let len = store.len(&s.id);
            if len != Some(s.events.len() as u64) {
                return Err(StepError::Fatal(format!(
                    "after a GC {} has {len:?} events, the model {}",
                    s.id,
                    s.events.len()
                )));
            }
            let read = store
                .events(&s.id, 0..s.events.len() as u64)
                .map_err(|e| StepError::Fatal(format!("after a GC, events({}): {e}", s.id)))?;
            for (k, e) in read.enumerate() {
                match e {
                    Ok(e) if same_event(&s.events[k], &e) => {}
                    other => {
                        return Err(StepError::Fatal(format!(
                            "after a GC {} seq {k} reads {other:?}, appended {:?}",
                            s.id, s.events[k]
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// The last activity retention sees for session `i`: the later of its last event's time
    /// (inherited ones included) and its creation time.
    fn last_activity(&mut self, store: &Store, i: usize) -> i64 {
        let s = &self.model.sessions[i];
        let created = store
            .header(&s.id)
            .map_or(0, |h| i64::try_from(h.created_at).unwrap_or(i64::MAX));
        let last = match s.events.last() {
            Some(e) if e.time == END_SEED_TIME_UNKNOWN => {
                let seq = s.events.len() as u64 - 1;
                match store.get(&s.id, seq) {
                    Ok(Some(got)) => {
                        let t = got.time;
                        self.model.sessions[i].events[seq as usize] = got;
                        t
                    }
                    _ => i64::MIN,
                }
            }
            Some(e) => e.time,
            None => return created,
        };
        last.max(created)
    }

    fn workload_retention(&mut self, store: &Store) -> Result<(), StepError> {
        let live = self.model.live();
        let mut policy = match self.rng.below(3) {
            0 => Retention::default().max_sessions(self.rng.below(live.len() as u64 + 2) as usize),
            1 => Retention::default().max_idle_ms(self.rng.below(1 << 49)),
            _ => Retention::default().max_bytes(self.rng.below(64 << 10)),
        };
        for _ in 0..self.rng.below(3) {
            if let Some(&i) = self.rng.pick(&live) {
                policy = policy.pin(self.model.sessions[i].id.clone());
            }
        }
        let now = self.rng.range(0, 1 << 50) as i64 - (1 << 48);
        let activity: HashMap<String, i64> = live
            .iter()
            .map(|&i| {
                (
                    self.model.sessions[i].id.clone(),
                    self.last_activity(store, i),
                )
            })
            .collect();
        let plan = store.plan_retention(&policy, now);
        if trace() {
            eprintln!("retention {policy:?} at {now}: {plan:?}");
        }
        let evicted: HashSet<&str> = plan.iter().map(|e| e.id.as_str()).collect();
        for e in &plan {
            if policy.pinned.contains(&e.id) {
                return Err(StepError::Fatal(format!(
                    "retention evicts pinned {}",
                    e.id
                )));
            }
            let Some(&t) = activity.get(&e.id) else {
                return Err(StepError::Fatal(format!(
                    "retention evicts {}, which the model does not hold live",
                    e.id
                )));
            };
            if e.last_activity != t {
                return Err(StepError::Fatal(format!(
                    "retention sees {} last active at {}, the model at {t}",
                    e.id, e.last_activity
                )));
            }
            // Least recently active first: a session kept (not pinned) is not older than
            // one evicted for count or size.
            if e.reason != EvictionReason::Idle
                && let Some((kept, _)) = activity.iter().find(|(id, kt)| {
                    !evicted.contains(id.as_str())
                        && !policy.pinned.contains(*id)
                        && (**kt, id.as_str()) < (t, e.id.as_str())
                })
            {
                return Err(StepError::Fatal(format!(
                    "retention evicts {} ({t}, {:?}) but keeps the less recently active {kept}",
                    e.id, e.reason
                )));
            }
        }
        for s in &mut self.model.sessions {
            if s.deleted.is_none() && evicted.contains(s.id.as_str()) {
                s.deleted = Some(false);
            }
        }
        self.tally.gc.retention_runs += 1;
        let mut seen: Vec<Eviction> = Vec::new();
        let done = store.apply_retention(&policy, now, &mut |e| seen.push(e.clone()))?;
        if done != plan || seen != plan {
            return Err(StepError::Fatal(format!(
                "retention planned {plan:?}, evicted {done:?}, reported {seen:?}"
            )));
        }
        self.tally.gc.evictions += done.len() as u64;
        let sync = matches!(self.config.durability, Durability::Sync);
        for e in &done {
            if store.len(&e.id).is_some() {
                return Err(StepError::Fatal(format!("evicted {} still answers", e.id)));
            }
            self.tally.deletes += 1;
            if sync {
                self.tally.deletes_acked += 1;
                for s in &mut self.model.sessions {
                    if s.id == e.id && s.deleted == Some(false) {
                        s.deleted = Some(true);
                    }
                }
            }
        }
        let again = store.plan_retention(&policy, now);
        if !again.is_empty() {
            return Err(StepError::Fatal(format!(
                "retention left more to evict: {again:?}"
            )));
        }
        Ok(())
    }

    /// What `Config::retention` would evict at the next open, when a fault is scheduled (an
    /// open that fails may have evicted it): planned by a read-only open, which writes nothing.
    pub(crate) fn evictable_at_open(&self) -> Vec<String> {
        let Some(policy) = &self.config.retention else {
            return Vec::new();
        };
        if self.sim.faults() == SimFaults::default() {
            return Vec::new();
        }
        let config = self.config.clone().read_only(true);
        // The open plans at the wall clock's time.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        match Store::open(self.dir.path(), config) {
            Ok(reader) => reader
                .plan_retention(policy, now)
                .into_iter()
                .map(|e| e.id)
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// `Config::retention` evicted sessions at this open: the model deletes them (durable as
    /// the store's deletes are). An eviction never hides a loss: the session held everything
    /// acknowledged.
    pub(crate) fn note_evictions_at_open(&mut self, store: &Store) {
        self.evicted_at_open.clear();
        let sync = matches!(self.config.durability, Durability::Sync);
        for e in store.evicted_at_open() {
            self.tally.gc.retention_runs += 1;
            self.tally.gc.evictions += 1;
            if let Some(s) = self
                .model
                .sessions
                .iter_mut()
                .find(|s| s.id == e.id && s.deleted.is_none())
            {
                assert!(
                    e.events as usize >= s.durable || self.volatile_reopen,
                    "retention at open evicted {} with {} events, {} were acknowledged",
                    e.id,
                    e.events,
                    s.durable
                );
                s.deleted = Some(sync);
            }
            self.evicted_at_open.push(e.id.clone());
        }
    }
}
