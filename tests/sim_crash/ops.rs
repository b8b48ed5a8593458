//! The workload's steps: appends, batches, imports, flushes, checkpoints, reopens, faults.

use super::*;

impl Scenario {
    /// Runs random operations until `steps` are done or an operation fails. Returns the error
    /// of the failed operation, if any.
    pub(crate) fn workload(
        &mut self,
        store: &mut Option<Store>,
        steps: u64,
        fault_at: Option<u64>,
    ) -> Res<Option<AppendError>> {
        for step in 0..steps {
            if Some(step) == fault_at {
                self.inject_fault();
            }
            if trace() {
                eprintln!("step {step}: {:?}", self.sim.stats());
            }
            match self.step(store) {
                Ok(()) => {}
                Err(StepError::Append(e)) => return Ok(Some(e)),
                Err(StepError::Fatal(e)) => return Err(e),
            }
        }
        Ok(None)
    }

    pub(crate) fn inject_fault(&mut self) {
        if self.family.multiframe && self.rng.chance(1, 2) {
            // Faults that land inside multi-frame operations, and the persistent ones.
            let faults = match self.rng.below(6) {
                0 => SimFaults {
                    enospc_after_writes: Some(self.rng.below(24)),
                    ..SimFaults::default()
                },
                1 => SimFaults {
                    efbig_after_writes: Some(self.rng.below(24)),
                    ..SimFaults::default()
                },
                2 => SimFaults {
                    file_size_limit: Some(
                        self.rng
                            .range(SEGMENT_HEADER_LEN + 1, self.config.segment_bytes + 4096),
                    ),
                    ..SimFaults::default()
                },
                3 => SimFaults {
                    disk_free_bytes: Some(self.rng.below(128 << 10)),
                    ..SimFaults::default()
                },
                4 => SimFaults {
                    eio_after_syncs: Some(self.rng.below(4)),
                    ..SimFaults::default()
                },
                _ => SimFaults {
                    crash_after_ops: Some(self.rng.below(300)),
                    ..SimFaults::default()
                },
            };
            if trace() {
                eprintln!("faults: {faults:?}");
            }
            self.sim.set_faults(faults);
            return;
        }
        let n = self.rng.below(3);
        if trace() {
            eprintln!("inject fault");
        }
        let faults = match self.rng.below(4) {
            1 if self.family.faults => SimFaults {
                enospc_after_writes: Some(n),
                ..SimFaults::default()
            },
            2 if self.family.faults => SimFaults {
                eio_after_syncs: Some(n),
                ..SimFaults::default()
            },
            3 if self.family.dir_eio => SimFaults {
                eio_after_dir_syncs: Some(n),
                ..SimFaults::default()
            },
            _ => SimFaults {
                crash_after_ops: Some(self.rng.below(40)),
                ..SimFaults::default()
            },
        };
        if trace() {
            eprintln!("faults: {faults:?}");
        }
        self.sim.set_faults(faults);
    }

    /// One random operation. Appended events enter the model before the call (they may be
    /// present after a crash even if the call fails); so do forks and deletes.
    pub(crate) fn step(&mut self, slot: &mut Option<Store>) -> Result<(), StepError> {
        let store = slot.as_ref().ok_or(StepError::Fatal("no store".into()))?;
        let sync = matches!(self.config.durability, Durability::Sync);
        if self.family.new_ops
            && self
                .rng
                .chance(1, if self.family.multiframe { 3 } else { 10 })
        {
            let live = self.model.live();
            return if live.is_empty() || self.rng.chance(1, 2) {
                self.import(store)
            } else {
                let i = live[self.rng.below(live.len() as u64) as usize];
                self.big_batch(store, i)
            };
        }
        if self.family.lifecycle && self.rng.chance(1, 30) {
            return self.lifecycle_step(store);
        }
        let roll = self.rng.below(100);
        if trace() {
            eprintln!("op roll {roll}");
        }
        let live = self.model.live();
        if live.is_empty() || roll < 5 {
            let id = format!("s{}-{}", self.model.next_id, self.rng.below(1000));
            self.model.next_id += 1;
            let mut header = SessionHeader::new(id.clone(), self.rng.below(1 << 40));
            if self.rng.chance(1, 3) {
                header.cwd = Some("/work".into());
                header.extra = vec![("x-note".into(), r#"{"a":[1,2]}"#.into())];
            }
            self.model
                .sessions
                .push(ModelSession::new(id, Some(header.clone())));
            store.create_session(header)?;
            if sync {
                self.model.sessions.last_mut().unwrap().created_durable = true;
            }
            return Ok(());
        }
        let i = live[self.rng.below(live.len() as u64) as usize];
        match roll {
            5..=8 => return self.fork(store, i),
            9..=12 => return self.delete(store, i),
            // Compaction sends deliberately invalid replaces too, which a verbatim session
            // stores: only checked sessions are compacted.
            13..=20
                if !self.model.sessions[i].verbatim && !self.model_surface_of(i)?.is_empty() =>
            {
                return self.compact(store, i);
            }
            13..=62 => {
                let seq = self.model.sessions[i].events.len() as u64;
                let e = gen_event(&mut self.rng, seq, max_text(&self.config));
                self.model.sessions[i].events.push(e.clone());
                let id = self.model.sessions[i].id.clone();
                let receipt = match store.append(&id, e) {
                    Err(e) if refused(&e) => {
                        self.model.sessions[i].events.pop();
                        self.tally.refused += 1;
                        return Ok(());
                    }
                    r => r?,
                };
                self.tally.appends += 1;
                if !receipt.durable && self.rng.chance(1, 8) {
                    // Waiting for this receipt makes it, and everything before it, durable.
                    store.wait_durable(&receipt)?;
                    self.durable_to_end(i, "wait_durable");
                } else if receipt.durable {
                    self.durable_to_end(i, "durable receipt");
                }
            }
            63..=77 => {
                let n = self.rng.range(1, 8);
                let base = self.model.sessions[i].events.len() as u64;
                let batch: Vec<Event> = (0..n)
                    .map(|k| gen_event(&mut self.rng, base + k, max_text(&self.config)))
                    .collect();
                self.model.sessions[i].events.extend(batch.iter().cloned());
                self.model.sessions[i]
                    .atomic
                    .push((base as usize, (base + n) as usize));
                let id = self.model.sessions[i].id.clone();
                let receipt = match store.append_batch(&id, batch) {
                    Err(e) if refused(&e) => {
                        let s = &mut self.model.sessions[i];
                        s.events.truncate(base as usize);
                        self.tally.refused += 1;
                        return Ok(());
                    }
                    r => r?,
                };
                self.tally.appends += n;
                if receipt.durable {
                    self.durable_to_end(i, "durable receipt");
                }
            }
            78..=86 => {
                store.flush()?;
                self.all_durable("flush");
            }
            87..=92 => {
                store.checkpoint()?;
                self.all_durable("checkpoint");
            }
            93..=96 if self.rng.chance(1, 4) => return self.live_reader_check(),
            93..=96 => {
                // Read something back.
                let s = &self.model.sessions[i];
                if !s.events.is_empty() {
                    let seq = self.rng.below(s.events.len() as u64);
                    match store.get(&s.id, seq) {
                        Ok(Some(e)) if same_event(&s.events[seq as usize], &e) => {}
                        Ok(other) => {
                            return Err(StepError::Fatal(format!(
                                "{} seq {seq} read back as {other:?}",
                                s.id
                            )));
                        }
                        // Reads fail once the machine is down.
                        Err(e) if self.sim.is_down() => {
                            return Err(StepError::Append(AppendError::PreviousIo(
                                e.to_string().into(),
                            )));
                        }
                        Err(e) => return Err(StepError::Fatal(format!("read failed: {e}"))),
                    }
                }
            }
            _ => {
                // Clean close and reopen: nothing may be lost.
                if let Some(old) = slot.take() {
                    old.close()?;
                }
                if self.background_failure() {
                    return Err(StepError::Append(AppendError::PreviousIo(
                        "a background sync failed before close".to_owned().into(),
                    )));
                }
                self.all_durable("close");
                let before = self.counts();
                let faults_before = self.sim.stats().injected_errors;
                let evictable = self.evictable_at_open();
                let store = match self.open() {
                    Ok(s) => s,
                    // A crash or a fault during recovery: handled like any failed operation.
                    Err(e)
                        if self.sim.is_down()
                            || self.sim.stats().injected_errors > faults_before =>
                    {
                        // `Config::retention` may have evicted its plan (all of it or
                        // nothing) before the open failed.
                        for s in &mut self.model.sessions {
                            if s.deleted.is_none() && evictable.contains(&s.id) {
                                s.deleted = Some(false);
                            }
                        }
                        return Err(StepError::Append(AppendError::PreviousIo(
                            format!("open: {e}").into(),
                        )));
                    }
                    Err(e) => return Err(StepError::Fatal(format!("clean reopen failed: {e}"))),
                };
                if !self.evicted_at_open.is_empty() {
                    // `Config::retention` deleted sessions at the open: made durable here, so
                    // that a fault still scheduled fails this step, not `verify`'s catch-up.
                    store.flush()?;
                    self.all_durable("flush after retention at open");
                }
                self.check_against_model(&store, "clean reopen")
                    .map_err(StepError::Fatal)?;
                let mut before = before;
                before.retain(|id, _| !self.evicted_at_open.contains(id));
                if before != self.counts() {
                    return Err(StepError::Fatal("a clean close lost events".into()));
                }
                *slot = Some(store);
            }
        }
        Ok(())
    }

    /// Imports a new session (`Store::import_session`, or every other time
    /// `Store::create_with_events`): up to 80 events in the multi-frame families (many frames),
    /// a few otherwise.
    pub(crate) fn import(&mut self, store: &Store) -> Result<(), StepError> {
        let id = format!("i{}-{}", self.model.next_id, self.rng.below(1000));
        self.model.next_id += 1;
        let header = SessionHeader::new(id.clone(), self.rng.below(1 << 40));
        let n = if self.family.multiframe {
            self.rng.range(0, 80)
        } else {
            self.rng.range(0, 12)
        };
        let max = max_text(&self.config);
        let events: Vec<Event> = (0..n)
            .map(|seq| gen_event(&mut self.rng, seq, max))
            .collect();
        if trace() {
            eprintln!(
                "import {id}: {n} events, {} bytes of data",
                events.iter().map(|e| e.data.len()).sum::<usize>()
            );
        }
        // Every third new session is verbatim (`Store::create_verbatim`), every other one of
        // the rest goes through `Store::create_with_events`, the others are imports.
        let verbatim = self.model.next_id.is_multiple_of(3);
        let mut m = ModelSession::new(id.clone(), Some(header.clone()));
        m.events = events.clone();
        m.import_len = Some(n as usize);
        m.verbatim = verbatim;
        self.model.sessions.push(m);
        self.in_flight = Some(InFlight::Import {
            header: header.clone(),
            events: events.clone(),
        });
        // Every other new session goes through `Store::create_with_events` (header and first
        // batch in one operation, under the append rules) instead of an import: the same
        // all-or-nothing promise, a different write path.
        let result = if verbatim {
            store
                .create_verbatim(header, events)
                .map(|(_, receipt)| receipt)
                .map_err(ImportError::Append)
        } else if self.model.next_id.is_multiple_of(2) {
            store
                .create_with_events(header, events)
                .map(|(_, receipt)| receipt)
                .map_err(ImportError::Append)
        } else {
            store.import_session(header, events, None)
        };
        match result {
            Ok(receipt) => {
                self.in_flight = None;
                self.tally.imports += 1;
                self.tally.import_events += n;
                if receipt.durable {
                    self.tally.imports_acked += 1;
                    let m = self.model.sessions.last_mut().unwrap();
                    m.created_durable = true;
                    m.durable = m.events.len();
                    m.why = "import (durable receipt)";
                }
                Ok(())
            }
            Err(ImportError::Append(e)) if !refused(&e) => Err(StepError::Append(e)),
            Err(e) => Err(StepError::Fatal(format!(
                "import of {id} ({n} events) refused: {e}"
            ))),
        }
    }

    /// A large `append_batch` (2-40 events in the multi-frame families): all or nothing.
    pub(crate) fn big_batch(&mut self, store: &Store, i: usize) -> Result<(), StepError> {
        let n = self
            .rng
            .range(2, if self.family.multiframe { 40 } else { 12 });
        let base = self.model.sessions[i].events.len();
        let max = max_text(&self.config);
        let batch: Vec<Event> = (0..n)
            .map(|k| gen_event(&mut self.rng, base as u64 + k, max))
            .collect();
        let id = self.model.sessions[i].id.clone();
        if trace() {
            eprintln!(
                "big batch on {id} at {base}: {n} events, {} bytes of data",
                batch.iter().map(|e| e.data.len()).sum::<usize>()
            );
        }
        let s = &mut self.model.sessions[i];
        s.events.extend(batch.iter().cloned());
        s.atomic.push((base, base + n as usize));
        self.in_flight = Some(InFlight::Batch {
            id: id.clone(),
            base,
            events: batch.clone(),
        });
        match store.append_batch(&id, batch) {
            Err(e) if refused(&e) => {
                self.in_flight = None;
                let s = &mut self.model.sessions[i];
                s.events.truncate(base);
                s.atomic.pop();
                self.tally.refused += 1;
                Ok(())
            }
            Err(e) => Err(e.into()),
            Ok(receipt) => {
                self.in_flight = None;
                self.tally.big_batches += 1;
                self.tally.big_batch_events += n;
                self.tally.appends += n;
                if receipt.durable {
                    self.durable_to_end(i, "durable receipt");
                }
                Ok(())
            }
        }
    }

    /// After a fault and a reopen (the fault gone): the multi-frame operation that failed is
    /// whole or absent (checked by `check_against_model`); when absent, retrying it succeeds.
    pub(crate) fn retry_in_flight(&mut self, store: &Store, what: &str) -> Res {
        let Some(op) = self.in_flight.take() else {
            return Ok(());
        };
        match op {
            InFlight::Import { header, events } => {
                let id = header.id.clone();
                if store.len(&id).is_some() {
                    self.tally.retries_not_needed += 1;
                    return Ok(());
                }
                let mut m = ModelSession::new(id.clone(), Some(header.clone()));
                m.events = events.clone();
                m.import_len = Some(events.len());
                self.model.sessions.push(m);
                let receipt = store.import_session(header, events, None).map_err(|e| {
                    format!("{what}: retrying the import of {id} after the fault failed: {e}")
                })?;
                self.tally.retries += 1;
                if receipt.durable {
                    let m = self.model.sessions.last_mut().unwrap();
                    m.created_durable = true;
                    m.durable = m.events.len();
                    m.why = "import retried (durable receipt)";
                }
            }
            InFlight::Batch { id, base, events } => {
                let Some(i) = self
                    .model
                    .sessions
                    .iter()
                    .position(|s| s.id == id && s.deleted.is_none())
                else {
                    self.tally.retries_skipped += 1;
                    return Ok(());
                };
                let len = store.len(&id).map(|l| l as usize);
                if len == Some(base + events.len()) {
                    self.tally.retries_not_needed += 1;
                } else if len == Some(base) {
                    let n = events.len();
                    let s = &mut self.model.sessions[i];
                    s.events.extend(events.iter().cloned());
                    s.atomic.push((base, base + n));
                    let receipt = store.append_batch(&id, events).map_err(|e| {
                        format!(
                            "{what}: retrying the batch of {n} events on {id} after the fault failed: {e}"
                        )
                    })?;
                    self.tally.retries += 1;
                    if receipt.durable {
                        self.durable_to_end(i, "batch retried (durable receipt)");
                    }
                } else {
                    // Unacknowledged events before the batch were lost with the fault: its
                    // seqs no longer fit.
                    self.tally.retries_skipped += 1;
                }
            }
        }
        Ok(())
    }
}
