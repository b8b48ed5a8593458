//! A scenario: its opens, the model check after each reopen, its rounds and bit-flip checks.

use super::*;

impl Scenario {
    pub(crate) fn new(seed: u64, family: Family) -> Self {
        let mut rng = SimRng::new(seed);
        let sim = SimFs::new(rng.next_u64(), family.options);
        let mut config = make_config(&mut rng, &sim, &family);
        if family.lifecycle && !family.index_damage && rng.chance(1, 4) {
            // A retention policy applied at every writable open (a count: the same state
            // evicts nothing more at the next open).
            config = config.retention(Retention::default().max_sessions(rng.range(2, 12) as usize));
        }
        Scenario {
            seed,
            rng,
            sim,
            dir: scratch_dir(),
            config,
            model: Model::default(),
            tally: Tally {
                scenarios: 1,
                ..Tally::default()
            },
            family,
            older_index: None,
            index_damaged: false,
            errors_at_open: 0,
            in_flight: None,
            volatile_reopen: false,
            evicted_at_open: Vec::new(),
        }
    }

    /// True when a fault or crash fired since the last open without the test thread seeing
    /// it: the Group-commit background leader hit it. `close` then returns `Ok` although
    /// nothing more was synced (engine finding, `close_reports_a_failed_background_sync`), so
    /// its `Ok` acknowledges nothing.
    pub(crate) fn background_failure(&self) -> bool {
        self.sim.is_down() || self.sim.stats().injected_errors > self.errors_at_open
    }

    pub(crate) fn index_path(&self) -> PathBuf {
        self.dir.path().join("index.redb")
    }

    pub(crate) fn seg_dir(&self) -> PathBuf {
        self.dir.path().join("segments")
    }

    pub(crate) fn open(&mut self) -> Result<Store, OpenError> {
        // A damaged index is opened as `recover` opens it (every entry's CRC checked) in odd
        // seeds, and by a plain writable open (redb's page checksums only) in even ones:
        // both rebuild it from the log, and neither may abort the process.
        let checked = self.index_damaged && self.seed % 2 == 1;
        let config = self
            .config
            .clone()
            .check_index(self.config.check_index || checked);
        let store = Store::open(self.dir.path(), config).inspect_err(|e| {
            if trace() {
                eprintln!("open failed: {e}");
            }
        })?;
        self.index_damaged = false;
        self.errors_at_open = self.sim.stats().injected_errors;
        if trace() {
            eprintln!(
                "opened: {:?} segments {:?}",
                store.recovery_report(),
                sessionlog::fs::FileSystem::list(&*self.sim, &self.seg_dir())
            );
            for n in 1..20u64 {
                if let Some(b) = self
                    .sim
                    .read_file(&self.seg_dir().join(format!("{n:020}.seg")))
                {
                    eprintln!("  segment {n}: version {:?}, {} bytes", b.get(8), b.len());
                }
            }
        }
        if store.recovery_report().index_rebuilt {
            self.tally.index_rebuilt += 1;
        }
        if store.recovery_report().truncated.is_some() {
            self.tally.torn_tails += 1;
        }
        if self.rng.chance(1, 3) {
            self.older_index = std::fs::read(self.index_path()).ok();
        }
        self.note_evictions_at_open(&store);
        Ok(store)
    }

    /// Compares a freshly opened store with the model, then makes the model match it (what
    /// survived is durable now).
    pub(crate) fn check_against_model(&mut self, store: &Store, what: &str) -> Res {
        let mut keep = Vec::new();
        for mut s in std::mem::take(&mut self.model.sessions) {
            let Some(len) = store.len(&s.id) else {
                match s.deleted {
                    // Gone, as acknowledged (its forks are checked on their own), or a delete
                    // that reached the log. Kept as a tombstone: a bit flip that truncates the
                    // frame holding the delete brings the session back.
                    Some(_) => {
                        if !self.volatile_reopen {
                            s.deleted = Some(true);
                        }
                        keep.push(s.clone());
                    }
                    None if s.created_durable => {
                        return Err(format!("{what}: acknowledged session {} is missing", s.id));
                    }
                    None => {
                        self.tally.lost_unacked += s.events.len() as u64;
                        if s.import_len.is_some() {
                            self.tally.atomic_absent += 1;
                        }
                        if s.fork.is_some() {
                            self.tally.forks_lost_unacked += 1;
                        }
                    }
                }
                if store.header(&s.id).is_some() || store.surface(&s.id).is_ok() {
                    return Err(format!(
                        "{what}: session {} has no length but still answers",
                        s.id
                    ));
                }
                continue;
            };
            match s.deleted {
                Some(true) => {
                    return Err(format!(
                        "{what}: session {} was deleted (acknowledged durable) but has {len} events",
                        s.id
                    ));
                }
                Some(false) => {
                    // The delete did not survive: the session is live again.
                    self.tally.deletes_undone += 1;
                    s.deleted = None;
                }
                None => {}
            }
            let len = len as usize;
            if len < s.durable {
                return Err(format!(
                    "{what}: session {} has {len} events, {} were acknowledged durable (last by {}); recovery: {:?}; sim: {:?}",
                    s.id,
                    s.durable,
                    s.why,
                    store.recovery_report(),
                    self.sim.stats()
                ));
            }
            if len > s.events.len() {
                return Err(format!(
                    "{what}: session {} has {len} events, only {} were appended",
                    s.id,
                    s.events.len()
                ));
            }
            // All-or-nothing operations: whole or absent, never half.
            for &(a, b) in &s.atomic {
                if a < len && len < b {
                    return Err(format!(
                        "{what}: session {} has {len} events: the all-or-nothing append_batch of seqs {a}..{b} is half there; recovery: {:?}",
                        s.id,
                        store.recovery_report()
                    ));
                }
                if len >= b {
                    self.tally.atomic_whole += 1;
                } else {
                    self.tally.atomic_absent += 1;
                }
            }
            if let Some(n) = s.import_len {
                if len < n {
                    return Err(format!(
                        "{what}: imported session {} has {len} of its {n} events (half an import); recovery: {:?}",
                        s.id,
                        store.recovery_report()
                    ));
                }
                self.tally.atomic_whole += 1;
            }
            let verbatim = store.session_info(&s.id).map(|i| i.verbatim);
            if verbatim != Some(s.verbatim) {
                return Err(format!(
                    "{what}: session {} verbatim flag is {verbatim:?}, the model says {}",
                    s.id, s.verbatim
                ));
            }
            let header = store.header(&s.id);
            match (&s.header, &header, &s.fork) {
                (Some(want), Some(got), _) if want == got => {}
                // A fork whose call failed: the engine wrote its header.
                (None, Some(got), Some((parent, seed)))
                    if got.id == s.id
                        && got.parent_session.as_deref() == Some(parent.as_str())
                        && got.seed_length == Some(*seed) =>
                {
                    s.header = header.clone();
                }
                _ => {
                    return Err(format!(
                        "{what}: session {} header is {header:?}, the model says {:?} (fork of {:?})",
                        s.id, s.header, s.fork
                    ));
                }
            }
            let read = store
                .events(&s.id, 0..len as u64)
                .map_err(|e| format!("{what}: events({}): {e}", s.id))?;
            for (i, e) in read.enumerate() {
                let e = e.map_err(|e| format!("{what}: {} seq {i}: {e}", s.id))?;
                if !same_event(&s.events[i], &e) {
                    return Err(format!(
                        "{what}: {} seq {i} differs from what was appended (fork of {:?}): {e:?}, want {:?}",
                        s.id, s.fork, s.events[i]
                    ));
                }
                // A fork's end-seed marker is pinned once seen.
                s.events[i] = e;
            }
            // The surface (derived data kept in the index) matches the log folded by the
            // session rules (appends and compactions' replaces).
            let want = model_surface(&s.events[..len]).map_err(|e| format!("{what}: {e}"))?;
            let surface = store
                .surface(&s.id)
                .map_err(|e| format!("{what}: surface of {}: {e}", s.id))?;
            if surface != want {
                return Err(format!(
                    "{what}: surface of {} is {surface:?}, the log says {want:?}",
                    s.id
                ));
            }
            self.tally.lost_unacked += (s.events.len() - len) as u64;
            s.events.truncate(len);
            if self.volatile_reopen {
                // After a process restart the reopened store may show frames that are still
                // only in the page cache (recovery defers their sync to its first write), so
                // what it shows is not durable yet: a power loss may still take it, whole.
                s.atomic.retain(|&(a, _)| a < len);
                s.import_len = s.import_len.filter(|_| len > 0);
            } else {
                s.atomic.clear();
                s.import_len = None;
                if s.durable < len {
                    s.why = "survived a reopen";
                }
                s.durable = len;
                s.created_durable = true;
            }
            keep.push(s);
        }
        self.model.sessions = keep;
        let known: HashSet<&str> = self
            .model
            .sessions
            .iter()
            .filter(|s| s.deleted.is_none())
            .map(|s| s.id.as_str())
            .collect();
        for info in store.sessions() {
            if !known.contains(info.header.id.as_str()) {
                return Err(format!(
                    "{what}: session {} was never created or was deleted",
                    info.header.id
                ));
            }
        }
        let report = store
            .verify()
            .map_err(|e| format!("{what}: verify failed: {e}"))?;
        if !report.is_clean() {
            return Err(format!("{what}: verify is not clean: {report:?}"));
        }
        Ok(())
    }

    /// Everything the store holds is acknowledged durable (after a successful `flush`,
    /// `checkpoint` or `close`).
    pub(crate) fn all_durable(&mut self, why: &'static str) {
        for s in &mut self.model.sessions {
            if s.durable < s.events.len() {
                s.why = why;
            }
            s.durable = s.events.len();
            if !s.created_durable && s.fork.is_some() {
                self.tally.forks_acked += 1;
            }
            s.created_durable = true;
            if s.deleted == Some(false) {
                self.tally.deletes_acked += 1;
                s.deleted = Some(true);
            }
        }
    }

    /// Marks session `i` durable up to its end (a durable receipt or `wait_durable`).
    pub(crate) fn durable_to_end(&mut self, i: usize, why: &'static str) {
        let s = &mut self.model.sessions[i];
        s.durable = s.events.len();
        s.why = why;
    }

    pub(crate) fn counts(&self) -> BTreeMap<String, usize> {
        self.model
            .sessions
            .iter()
            .filter(|s| s.deleted.is_none())
            .map(|s| (s.id.clone(), s.events.len()))
            .collect()
    }

    /// Applies the chosen index variant after a crash.
    pub(crate) fn mangle_index(&mut self) {
        let variant = self.rng.below(4);
        if trace() {
            eprintln!("index variant {variant}");
        }
        match variant {
            0 => {
                let _ = std::fs::remove_file(self.index_path());
                self.tally.index_deleted += 1;
            }
            1 => {
                if let Some(old) = &self.older_index {
                    std::fs::write(self.index_path(), old).unwrap();
                    self.tally.index_older += 1;
                }
            }
            _ => {}
        }
        if self.family.index_damage && self.rng.chance(1, 3) {
            self.damage_index();
            self.tally.index_damages += 1;
            self.index_damaged = true;
        }
    }

    pub(crate) fn run(mut self) -> Res<Tally> {
        if self.family.gc_sweep {
            return self.run_gc();
        }
        if trace() {
            eprintln!(
                "config: {:?}, segment_bytes {}, batch_bytes {}, compress_threshold {}, checkpoint_bytes {}, deferred_index_entries {}",
                self.config.durability,
                self.config.segment_bytes,
                self.config.batch_bytes,
                self.config.compress_threshold,
                self.config.checkpoint_bytes,
                self.config.deferred_index_entries
            );
        }
        let mut slot = Some(self.open().map_err(|e| format!("first open: {e}"))?);
        let rounds = self.rng.range(1, 4);
        for round in 0..rounds {
            if self.family.index_damage && round > 0 {
                self.index_damage_round(&mut slot, &format!("before round {round}"))?;
            }
            let steps = self.rng.range(3, 60);
            let fault_at = self.rng.chance(2, 3).then(|| self.rng.below(steps));
            let failed = self
                .workload(&mut slot, steps, fault_at)
                .map_err(|e| format!("round {round}: {e}"))?;
            let what = format!("round {round}");
            // `None` when a clean close is what failed (the store is gone already).
            let store = slot.take();
            match failed {
                Some(e) if !self.sim.is_down() => {
                    // ENOSPC or EIO: the store must refuse every later write.
                    if !matches!(e, AppendError::PreviousIo(_)) {
                        return Err(format!(
                            "{what}: injected fault gave {e:?}, expected PreviousIo"
                        ));
                    }
                    self.tally.faults += 1;
                    if let Some(store) = &store
                        && let Some(s) = self
                            .model
                            .sessions
                            .iter()
                            .find(|s| s.deleted.is_none() && store.len(&s.id).is_some())
                    {
                        // A valid event at the store's next seq (a compaction's appends may
                        // have stopped half-way), twice: a refused append must leave nothing
                        // behind that turns the next one into another error.
                        for attempt in 0..2 {
                            let seq = store.len(&s.id).unwrap_or(0);
                            let r = store
                                .append(&s.id, Event::new("assistant/chunk", seq, 1, r#"{"n":1}"#));
                            if !matches!(r, Err(AppendError::PreviousIo(_))) {
                                return Err(format!(
                                    "{what}: append {attempt} after a failed write gave {r:?}"
                                ));
                            }
                        }
                    }
                    if let Some(store) = &store {
                        if !matches!(store.flush(), Err(AppendError::PreviousIo(_))) {
                            return Err(format!(
                                "{what}: flush after a failed write was not refused"
                            ));
                        }
                        if !matches!(
                            store.create_session(SessionHeader::new("late", 1)),
                            Err(AppendError::PreviousIo(_))
                        ) {
                            return Err(format!(
                                "{what}: create after a failed write was not refused"
                            ));
                        }
                    }
                    // Reopen without a crash: nothing acknowledged may be lost.
                    self.sim.set_faults(SimFaults::default());
                    drop(store);
                    let store = self
                        .open()
                        .map_err(|e| format!("{what}: reopen after fault: {e}"))?;
                    self.check_against_model(&store, &format!("{what} after fault"))?;
                    self.retry_in_flight(&store, &format!("{what} after fault"))?;
                    slot = Some(store);
                    if self.family.continue_after_fault {
                        continue;
                    }
                    break;
                }
                Some(_) => self.tally.mid_op_crashes += 1,
                None => {}
            }
            // A crash: the operation in flight is whole or absent after the reopen.
            self.in_flight = None;
            if self.family.restarts && self.rng.chance(1, 2) {
                // The process dies, the machine stays up: the page cache survives.
                self.sim.restart_process();
                self.tally.restarts += 1;
                drop(store);
                let store = self
                    .open()
                    .map_err(|e| format!("{what}: open after a process crash: {e}"))?;
                self.volatile_reopen = true;
                let checked =
                    self.check_against_model(&store, &format!("{what} after a process crash"));
                self.volatile_reopen = false;
                checked?;
                slot = Some(store);
                continue;
            }
            // Power loss (handles opened before it fail from now on), then drop the dead store.
            if trace() {
                eprintln!(
                    "before crash: {:?}",
                    sessionlog::fs::FileSystem::list(&*self.sim, &self.seg_dir())
                );
            }
            let crash = self.sim.crash();
            if trace() {
                eprintln!("crash: {crash:?}");
            }
            self.tally.crashes += 1;
            drop(store);
            self.mangle_index();
            // Not when a GC left compacted copies: the next open renames them over the
            // segments, and a flip in a replaced file is gone with it.
            let copies_pending = sessionlog::fs::FileSystem::list(&*self.sim, &self.seg_dir())
                .unwrap_or_default()
                .iter()
                .any(|n| n.ends_with(".gc"));
            if self.family.flips && self.rng.chance(1, 6) && !copies_pending {
                // Flip a bit of a segment header or of a whole frame (not of a torn tail:
                // that was never acknowledged).
                let (frames, numbers) = catalog(&self.sim, &self.seg_dir());
                if let Some(&n) = self.rng.pick(&numbers) {
                    let end = frames
                        .iter()
                        .filter(|f| f.segment == n)
                        .map(|f| f.offset + f.len)
                        .max()
                        .unwrap_or(SEGMENT_HEADER_LEN);
                    let len = self
                        .sim
                        .read_file(&segment::path(&self.seg_dir(), n))
                        .map_or(0, |b| b.len() as u64);
                    let offset = self.rng.below(end.min(len));
                    let flip = BitFlip {
                        path: segment::path(&self.seg_dir(), n),
                        offset,
                        bit: self.rng.below(8) as u8,
                    };
                    if self.sim.flip_bit(&flip.path, flip.offset, flip.bit).is_ok() {
                        self.tally.flips += 1;
                        return self.check_flip(&flip, &frames).map(|()| self.tally);
                    }
                }
            }
            if self.family.index_damage {
                // Readers right after a crash, before any writable open: right answers (a
                // state the model allows) or typed errors.
                match std::panic::catch_unwind(AssertUnwindSafe(|| {
                    self.read_only_check(false, None)
                })) {
                    Err(p) => {
                        return Err(format!(
                            "{what}: a read-only open after the crash panicked: {}",
                            panic_message(&*p)
                        ));
                    }
                    Ok(Err(e)) => return Err(format!("{what} after crash: {e}")),
                    Ok(Ok(None)) => self.tally.ro_after_crash_errors += 1,
                    Ok(Ok(Some(_))) => self.tally.ro_after_crash_ok += 1,
                }
            }
            let store = self
                .open()
                .map_err(|e| format!("{what}: open after crash: {e}"))?;
            self.check_against_model(&store, &format!("{what} after crash"))?;
            slot = Some(store);
        }
        if self.family.index_damage {
            self.index_damage_round(&mut slot, "after the last round")?;
        }
        let stats = self.sim.stats();
        self.tally.efbig_faults = stats.efbig_errors;
        self.tally.disk_full_faults = stats.disk_full_errors;
        let store = slot.take().ok_or("no store")?;
        store.close().map_err(|e| format!("final close: {e}"))?;
        if !self.background_failure() {
            self.all_durable("close");
        }
        let store = self.open().map_err(|e| format!("final open: {e}"))?;
        self.check_against_model(&store, "final")?;
        for s in self.model.sessions.iter().filter(|s| s.deleted.is_none()) {
            self.tally.acked_events += s.events.len() as u64;
            if s.fork.is_some() {
                self.tally.forks_final += 1;
            }
            self.tally.replaces_final += s.events[s.fork.as_ref().map_or(0, |f| f.1 as usize)..]
                .iter()
                .filter(|e| matches!(e.surface_op, Some(SurfaceOp::Replace { .. })))
                .count() as u64;
        }
        Ok(self.tally)
    }

    /// After a bit flip in synced data: the damage is reported at the right place, and nothing
    /// read is wrong.
    pub(crate) fn check_flip(&mut self, flip: &BitFlip, frames: &[FrameInfo]) -> Res {
        let name = flip.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let segment = segment::parse_file_name(name).ok_or(format!("flip in {name}"))?;
        let frame = frames.iter().find(|f| {
            f.segment == segment && flip.offset >= f.offset && flip.offset < f.offset + f.len
        });
        let expect = LogPosition {
            segment,
            offset: frame.map_or(0, |f| f.offset),
        };
        if frame.is_none() && flip.offset >= SEGMENT_HEADER_LEN {
            return Err(format!("flip {flip:?} is in no frame: {frames:?}"));
        }
        let what = format!("flip at {} bit {} (frame {expect})", flip.offset, flip.bit);
        // The flip may cut acknowledged events (checked below): a session that retention
        // evicts at this open may hold fewer than the model's acknowledged count.
        self.volatile_reopen = true;
        let opened = self.open();
        self.volatile_reopen = false;
        let store = match opened {
            Err(OpenError::Corruption { position, .. }) if position == expect => {
                self.tally.flips_open_error += 1;
                return Ok(());
            }
            // The last frame, which its writer had published as durable: not a torn write.
            Err(OpenError::AcknowledgedLost { end, .. })
                if end == expect
                    && frames.last().map(|f| (f.segment, f.offset))
                        == frame.map(|f| (f.segment, f.offset)) =>
            {
                self.tally.flips_open_error += 1;
                return Ok(());
            }
            Err(OpenError::NotASegment { .. } | OpenError::UnsupportedFormat { .. })
                if frame.is_none() =>
            {
                self.tally.flips_open_error += 1;
                return Ok(());
            }
            Err(e) => return Err(format!("{what}: open failed with {e}")),
            Ok(s) => s,
        };
        let report = store.recovery_report().clone();
        if frame.is_none() {
            // A header flip may pass only when it hit a header-only last segment, removed as
            // a segment torn at creation.
            if report.removed_segment != Some(segment) {
                return Err(format!(
                    "{what}: damaged segment header went unnoticed: {report:?}"
                ));
            }
            return self.check_against_model(&store, &what);
        }
        let frame = frame.unwrap();
        let damaged: HashSet<(String, u64)> = frame.events.iter().cloned().collect();
        let truncated = report.truncated.as_ref().map(|t| t.position) == Some(expect);
        if truncated {
            // Indistinguishable from a torn write: only the log's last frame may go this way,
            // and only its events are lost.
            let last = frames.last().map(|f| LogPosition {
                segment: f.segment,
                offset: f.offset,
            });
            if last != Some(expect) {
                return Err(format!(
                    "{what}: truncated a frame that is not the last: {report:?}"
                ));
            }
            self.tally.flips_truncated += 1;
            for s in &mut self.model.sessions {
                let lost = frame.events.iter().filter(|(id, _)| *id == s.id).count();
                s.durable = s.durable.saturating_sub(lost);
                if frame.creates.contains(&s.id) {
                    s.created_durable = false;
                }
                if frame.deletes.contains(&s.id) && s.deleted == Some(true) {
                    s.deleted = Some(false);
                }
            }
            return self.check_against_model(&store, &what);
        }
        let mut read_errors = 0;
        for s in &self.model.sessions {
            let Some(len) = store.len(&s.id) else {
                if s.created_durable && s.deleted.is_none() {
                    return Err(format!("{what}: session {} missing", s.id));
                }
                continue;
            };
            if s.deleted == Some(true) {
                return Err(format!("{what}: deleted session {} is back", s.id));
            }
            if (len as usize) < s.durable || len as usize > s.events.len() {
                return Err(format!(
                    "{what}: session {} has {len} events (durable {})",
                    s.id, s.durable
                ));
            }
            for seq in 0..len {
                match store.get(&s.id, seq) {
                    Ok(Some(e)) if same_event(&s.events[seq as usize], &e) => {}
                    Ok(other) => {
                        return Err(format!(
                            "{what}: {} seq {seq} read wrong data: {other:?}",
                            s.id
                        ));
                    }
                    Err(ReadError::Corruption { position, .. })
                        if position == expect
                            && damaged.contains(&(s.owner(seq).to_owned(), seq)) =>
                    {
                        read_errors += 1;
                    }
                    Err(e) => return Err(format!("{what}: {} seq {seq}: {e}", s.id)),
                }
            }
        }
        let verify = store.verify().map_err(|e| format!("{what}: verify: {e}"))?;
        if !verify.bad_frames.iter().any(|b| b.position == expect) {
            return Err(format!(
                "{what}: verify did not report the damaged frame: {verify:?}"
            ));
        }
        if read_errors > 0 {
            self.tally.flips_read_error += 1;
        }
        Ok(())
    }
}
