//! Index damage and readers: read-only opens of a damaged index, readers beside the live
//! writer.

use super::*;

impl Scenario {
    /// Damages `index.redb` (the store is closed): bytes xored (preferring bytes in use),
    /// truncated, a 4 KiB page overwritten with noise, the magic broken, a bit flipped in the
    /// first page, or the file deleted. Returns what was done.
    pub(crate) fn damage_index(&mut self) -> String {
        let path = self.index_path();
        let Ok(mut bytes) = std::fs::read(&path) else {
            return "no index".into();
        };
        if bytes.is_empty() {
            return "empty index".into();
        }
        let len = bytes.len() as u64;
        // Diagnostic: `SESSIONLOG_SIM_INDEX_DAMAGE=delete` only deletes the index (which the
        // engine rebuilt before the integrity work), to check the harness itself.
        let variant = if std::env::var("SESSIONLOG_SIM_INDEX_DAMAGE").as_deref() == Ok("delete") {
            6
        } else {
            self.rng.below(7)
        };
        let kind = match variant {
            6 => {
                std::fs::remove_file(&path).unwrap();
                return "deleted".into();
            }
            0 | 1 => {
                let n = self.rng.range(1, 8);
                for _ in 0..n {
                    let mut at = self.rng.below(len) as usize;
                    for _ in 0..64 {
                        if bytes[at] != 0 {
                            break;
                        }
                        at = self.rng.below(len) as usize;
                    }
                    bytes[at] ^= self.rng.range(1, 255) as u8;
                }
                format!("{n} bytes xored")
            }
            2 => {
                let to = self.rng.below(len);
                bytes.truncate(to as usize);
                format!("truncated to {to} of {len} bytes")
            }
            3 => {
                let page = self.rng.below(len.div_ceil(4096)) * 4096;
                let end = (page + 4096).min(len);
                for b in &mut bytes[page as usize..end as usize] {
                    *b = self.rng.below(256) as u8;
                }
                format!("page at {page} overwritten")
            }
            4 => {
                let at = self.rng.below(len.min(16)) as usize;
                bytes[at] ^= 0xff;
                format!("magic broken at {at}")
            }
            _ => {
                let at = self.rng.below(len.min(4096)) as usize;
                let bit = self.rng.below(8);
                bytes[at] ^= 1 << bit;
                format!("bit {bit} flipped at {at}")
            }
        };
        if trace() {
            eprintln!("index damage: {kind}");
        }
        std::fs::write(&path, &bytes).unwrap();
        kind
    }

    /// Opens the store read-only (what `list`, `show`, `export` and `verify` do) and reads
    /// every session. `exact`: the model is exact (everything was closed cleanly) and
    /// `reference` is the undamaged store's `list()`; otherwise any state the model allows
    /// after a crash. Every answer must be right, or a typed error where the API has one.
    /// Returns (answers right, typed errors), or `None` when the open refused (typed).
    pub(crate) fn read_only_check(
        &self,
        exact: bool,
        reference: Option<&[Listed]>,
    ) -> Res<Option<(u64, u64)>> {
        let config = self.config.clone().read_only(true);
        let store = match Store::open(self.dir.path(), config) {
            Ok(s) => s,
            Err(e) => {
                if trace() {
                    eprintln!("read-only open refused: {e}");
                }
                return Ok(None);
            }
        };
        let (mut right, mut errors) = (0u64, 0u64);
        let listable: HashSet<&str> = self
            .model
            .sessions
            .iter()
            .filter(|s| match s.deleted {
                None => true,
                Some(unacked) => !exact && !unacked,
            })
            .map(|s| s.id.as_str())
            .collect();
        for info in store.sessions() {
            if !listable.contains(info.header.id.as_str()) {
                return Err(format!(
                    "read-only open lists session {:?}, which the model does not hold",
                    info.header.id
                ));
            }
        }
        for s in self.model.sessions.iter().filter(|s| s.deleted.is_none()) {
            let len = match store.len(&s.id) {
                None if exact || s.created_durable => {
                    return Err(format!("read-only open: session {} is missing", s.id));
                }
                None => continue,
                Some(l) => l as usize,
            };
            if (exact && len != s.events.len()) || len < s.durable || len > s.events.len() {
                return Err(format!(
                    "read-only open: session {} has {len} events; the model has {} ({} durable)",
                    s.id,
                    s.events.len(),
                    s.durable
                ));
            }
            if s.atomic.iter().any(|&(a, b)| a < len && len < b)
                || s.import_len.is_some_and(|n| len < n)
            {
                return Err(format!(
                    "read-only open: session {} has {len} events, half of an all-or-nothing operation ({:?}, import {:?})",
                    s.id, s.atomic, s.import_len
                ));
            }
            if let Some(want) = &s.header {
                let got = store.header(&s.id);
                if got.as_ref() != Some(want) {
                    return Err(format!(
                        "read-only open: header of {} is {got:?}, want {want:?}",
                        s.id
                    ));
                }
            }
            match store.events(&s.id, 0..len as u64) {
                Err(_) => errors += 1,
                Ok(it) => {
                    for (k, e) in it.enumerate() {
                        match e {
                            Ok(e) if same_event(&s.events[k], &e) => right += 1,
                            Ok(e) => {
                                return Err(format!(
                                    "read-only open: {} seq {k} reads wrong data: {e:?}",
                                    s.id
                                ));
                            }
                            Err(_) => {
                                errors += 1;
                                break;
                            }
                        }
                    }
                }
            }
            match store.surface(&s.id) {
                Ok(got) => {
                    let want = model_surface(&s.events[..len])?;
                    if got != want {
                        return Err(format!(
                            "read-only open: surface of {} is {got:?}, want {want:?}",
                            s.id
                        ));
                    }
                    right += 1;
                }
                Err(_) => errors += 1,
            }
        }
        if let Some(reference) = reference {
            match store.list() {
                Ok(mut got) => {
                    got.sort_by(|a, b| a.info.header.id.cmp(&b.info.header.id));
                    if got != reference {
                        return Err(format!(
                            "read-only open: list() is {got:?}, the undamaged store said {reference:?}"
                        ));
                    }
                    right += 1;
                }
                Err(_) => errors += 1,
            }
        }
        let report = store.verify();
        if let Some(loss) = store
            .recovery_report()
            .acknowledged_lost
            .or_else(|| report.as_ref().ok().and_then(|r| r.acknowledged_lost))
        {
            // Crashes and index damage never take acknowledged frames from the log: only
            // damage to the log itself can (the flips, checked elsewhere).
            return Err(format!(
                "a read-only open or its verify reports acknowledged frames lost (log end {}, published {}) where none were",
                loss.end, loss.published
            ));
        }
        if let Ok(report) = report
            && report.is_clean()
            && errors > 0
            && exact
        {
            return Err(format!(
                "read-only open: verify says clean, but {errors} reads failed"
            ));
        }
        Ok(Some((right, errors)))
    }

    /// Between rounds: close cleanly, damage `index.redb`, then (1) a read-only open answers
    /// right or with typed errors, never a panic; (2) a writable open (`sessionlog recover`)
    /// rebuilds: the exact model, `verify` clean, `list()` as before the damage.
    pub(crate) fn index_damage_round(&mut self, slot: &mut Option<Store>, what: &str) -> Res {
        let Some(store) = slot.take() else {
            return Ok(());
        };
        let mut reference = store
            .list()
            .map_err(|e| format!("{what}: list before the index damage: {e}"))?;
        reference.sort_by(|a, b| a.info.header.id.cmp(&b.info.header.id));
        store
            .close()
            .map_err(|e| format!("{what}: close before the index damage: {e}"))?;
        self.all_durable("close");
        let kind = self.damage_index();
        self.tally.index_damages += 1;
        let what = format!("{what}, index.redb damaged ({kind})");
        let ro = std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.read_only_check(true, Some(&reference))
        }));
        match ro {
            Err(p) => {
                return Err(format!(
                    "{what}: a read-only open or read panicked: {}",
                    panic_message(&*p)
                ));
            }
            Ok(Err(e)) => return Err(format!("{what}: {e}")),
            Ok(Ok(None)) => self.tally.index_damage_open_errors += 1,
            Ok(Ok(Some((right, errors)))) => {
                self.tally.index_damage_reads_right += right;
                self.tally.index_damage_read_errors += errors;
            }
        }
        // `sessionlog recover` opens with `check_index` (redb's integrity check and every
        // entry's CRC), which rebuilds a damaged index whatever the damage.
        self.config.check_index = true;
        let opened = std::panic::catch_unwind(AssertUnwindSafe(|| self.open()));
        self.config.check_index = false;
        let store = match opened {
            Err(p) => {
                return Err(format!(
                    "{what}: the writable open (`sessionlog recover`) panicked: {}",
                    panic_message(&*p)
                ));
            }
            Ok(Err(e)) => {
                return Err(format!(
                    "{what}: the writable open (`sessionlog recover`) failed: {e}"
                ));
            }
            Ok(Ok(s)) => s,
        };
        if store.recovery_report().index_rebuilt {
            self.tally.index_damage_rebuilt += 1;
        }
        let before = self.counts();
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.check_against_model(&store, &what)))
        {
            Err(p) => {
                return Err(format!(
                    "{what}: reads after the rebuild panicked: {}",
                    panic_message(&*p)
                ));
            }
            Ok(r) => r?,
        }
        if before != self.counts() {
            return Err(format!(
                "{what}: the rebuilt store lost events: {before:?} -> {:?}",
                self.counts()
            ));
        }
        let mut got = store
            .list()
            .map_err(|e| format!("{what}: list after the rebuild: {e}"))?;
        got.sort_by(|a, b| a.info.header.id.cmp(&b.info.header.id));
        if got != reference {
            return Err(format!(
                "{what}: list() after the rebuild is {got:?}, before the damage {reference:?}"
            ));
        }
        *slot = Some(store);
        Ok(())
    }

    /// Opens a reader beside the live writer (what `list`/`show`/`show --follow` in another
    /// process do) and checks every session it shows: a prefix of what was appended, holding
    /// everything acknowledged durable, never half of an all-or-nothing operation, each event
    /// as appended.
    pub(crate) fn live_reader_check(&mut self) -> Result<(), StepError> {
        let config = self.config.clone().read_only(true);
        let reader = match Store::open(self.dir.path(), config) {
            Ok(r) => r,
            Err(e) if self.sim.is_down() => {
                return Err(StepError::Append(AppendError::PreviousIo(
                    format!("reader open: {e}").into(),
                )));
            }
            Err(e) => {
                return Err(StepError::Fatal(format!(
                    "a reader beside the live writer was refused: {e}"
                )));
            }
        };
        for s in self.model.sessions.iter().filter(|s| s.deleted.is_none()) {
            let len = match reader.len(&s.id) {
                None if s.created_durable => {
                    return Err(StepError::Fatal(format!(
                        "a reader beside the writer misses acknowledged session {}",
                        s.id
                    )));
                }
                None => continue,
                Some(l) => l as usize,
            };
            if len < s.durable || len > s.events.len() {
                return Err(StepError::Fatal(format!(
                    "a reader beside the writer shows {len} events of {}: {} acknowledged durable, {} appended",
                    s.id,
                    s.durable,
                    s.events.len()
                )));
            }
            if s.atomic.iter().any(|&(a, b)| a < len && len < b) {
                return Err(StepError::Fatal(format!(
                    "a reader beside the writer shows {len} events of {}: half of an all-or-nothing batch {:?}",
                    s.id, s.atomic
                )));
            }
            let read = match reader.events(&s.id, 0..len as u64) {
                Ok(r) => r,
                Err(e) if self.sim.is_down() => {
                    return Err(StepError::Append(AppendError::PreviousIo(
                        format!("reader read: {e}").into(),
                    )));
                }
                Err(e) => return Err(StepError::Fatal(format!("reader events({}): {e}", s.id))),
            };
            for (k, e) in read.enumerate() {
                match e {
                    Ok(e) if same_event(&s.events[k], &e) => {}
                    Ok(e) => {
                        return Err(StepError::Fatal(format!(
                            "a reader beside the writer reads {} seq {k} as {e:?}, appended {:?}",
                            s.id, s.events[k]
                        )));
                    }
                    Err(e) if self.sim.is_down() => {
                        return Err(StepError::Append(AppendError::PreviousIo(
                            format!("reader read: {e}").into(),
                        )));
                    }
                    Err(e) => {
                        return Err(StepError::Fatal(format!("reader {} seq {k}: {e}", s.id)));
                    }
                }
            }
        }
        self.tally.live_reader_checks += 1;
        Ok(())
    }
}
