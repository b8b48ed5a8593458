//! Forks, deletes and compactions in the workload.

use super::*;

impl Scenario {
    pub(crate) fn model_surface_of(&self, i: usize) -> Result<Vec<u64>, StepError> {
        model_surface(&self.model.sessions[i].events).map_err(StepError::Fatal)
    }

    /// Forks session `i` at a random boundary (or its tail), into a named or a minted id.
    pub(crate) fn fork(&mut self, store: &Store, i: usize) -> Result<(), StepError> {
        let parent = self.model.sessions[i].clone();
        let len = parent.events.len();
        let boundary = (len > 0 && self.rng.chance(2, 3)).then(|| self.rng.below(len as u64));
        let seed = boundary.map_or(len, |b| b as usize + 1);
        // dsh mints `session-<n>`, the first n not taken by a live session.
        let minted = (1u64..)
            .map(|n| format!("session-{n}"))
            .find(|id| {
                !self
                    .model
                    .sessions
                    .iter()
                    .any(|s| s.id == *id && s.deleted.is_none())
            })
            .unwrap_or_default();
        // The model keys sessions by id and keeps deleted ones as tombstones, so a minted id is
        // never reused here; reusing a deleted session's id is covered by the deterministic
        // `reusing_a_pinned_deleted_id_keeps_the_forks_prefix`.
        let mint = self.rng.chance(1, 4) && !self.model.minted.contains(&minted);
        let child = if mint {
            minted
        } else {
            self.model.next_id += 1;
            format!("f{}-{}", self.model.next_id, self.rng.below(1000))
        };
        // A verbatim session forks at any boundary, without an end-seed marker.
        let open_turn = !parent.verbatim && seed > 0 && open_turn_at(&parent.events, seed - 1);
        let mut model = ModelSession::new(child.clone(), None);
        model.events = parent.events[..seed].to_vec();
        model.verbatim = parent.verbatim;
        if !parent.verbatim && (seed == 0 || parent.events[seed - 1].kind != "session/end-seed") {
            model.events.push(Event::new(
                "session/end-seed",
                seed as u64,
                END_SEED_TIME_UNKNOWN,
                "{}",
            ));
        }
        model.fork = Some((parent.id.clone(), seed as u64));
        model.lineage = std::iter::once((parent.id.clone(), seed as u64))
            .chain(parent.lineage.iter().cloned())
            .collect();
        if trace() {
            eprintln!(
                "fork {} at {boundary:?} (seed {seed}, open turn {open_turn}) into {child}",
                parent.id
            );
        }
        if !open_turn {
            self.model.sessions.push(model);
        }
        if mint {
            self.model.minted.insert(child.clone());
        }
        let child_arg = if mint { None } else { Some(child.as_str()) };
        match store.fork(&parent.id, boundary, child_arg) {
            Ok(session) => {
                if open_turn {
                    return Err(StepError::Fatal(format!(
                        "fork of {} at {boundary:?} inside an open turn was accepted",
                        parent.id
                    )));
                }
                if session.id() != child {
                    return Err(StepError::Fatal(format!(
                        "fork minted {}, expected {child}",
                        session.id()
                    )));
                }
                let header = store.header(&child);
                let m = self.model.sessions.last_mut().unwrap();
                let ok = header.as_ref().is_some_and(|h| {
                    h.parent_session.as_deref() == Some(parent.id.as_str())
                        && h.seed_length == Some(seed as u64)
                        && h.cwd == parent.header.as_ref().and_then(|p| p.cwd.clone())
                });
                if !ok || store.len(&child) != Some(m.events.len() as u64) {
                    return Err(StepError::Fatal(format!(
                        "fork {child} of {} seed {seed}: header {header:?}, {:?} events (model {})",
                        parent.id,
                        store.len(&child),
                        m.events.len()
                    )));
                }
                m.header = header;
                self.tally.forks += 1;
                if matches!(self.config.durability, Durability::Sync) {
                    m.created_durable = true;
                    m.durable = m.events.len();
                    m.why = "fork (Sync)";
                    self.tally.forks_acked += 1;
                }
                let child = self.model.sessions.len() - 1;
                self.check_live_surface(store, child)
            }
            Err(ForkFailure::Rule(e)) if open_turn && e.code == ForkErrorCode::OpenTurn => {
                self.tally.forks_open_turn += 1;
                Ok(())
            }
            Err(ForkFailure::Rule(e)) => Err(StepError::Fatal(format!(
                "fork of {} at {boundary:?} into {child} refused: {e} (model: open turn {open_turn})",
                parent.id
            ))),
            // A read that failed because the machine went down is reported as a replay
            // failure.
            Err(ForkFailure::Append(e)) if refused(&e) && self.sim.is_down() => Err(
                StepError::Append(AppendError::PreviousIo(format!("fork: {e}").into())),
            ),
            Err(ForkFailure::Append(e)) if refused(&e) => Err(StepError::Fatal(format!(
                "fork of {} at {boundary:?} into {child} refused: {e}",
                parent.id
            ))),
            Err(ForkFailure::Append(e)) => Err(StepError::Append(e)),
        }
    }

    /// Deletes session `i`.
    pub(crate) fn delete(&mut self, store: &Store, i: usize) -> Result<(), StepError> {
        let id = self.model.sessions[i].id.clone();
        if trace() {
            eprintln!("delete {id}");
        }
        self.model.sessions[i].deleted = Some(false);
        let receipt = match store.delete_session(&id) {
            Err(e) if refused(&e) || matches!(e, AppendError::NoSuchSession(_)) => {
                return Err(StepError::Fatal(format!("delete {id} refused: {e}")));
            }
            r => r?,
        };
        self.tally.deletes += 1;
        if store.len(&id).is_some() || store.header(&id).is_some() {
            return Err(StepError::Fatal(format!(
                "{id} still answers after its delete"
            )));
        }
        // Its forks still read what they inherited.
        let fork = self.model.sessions.iter().position(|s| {
            s.deleted.is_none() && s.fork.as_ref().is_some_and(|f| f.0 == id && f.1 > 0)
        });
        if let Some(f) = fork {
            let seed = self.model.sessions[f].fork.as_ref().map_or(1, |f| f.1);
            let seq = self.rng.below(seed);
            let f = &self.model.sessions[f];
            match store.get(&f.id, seq) {
                Ok(Some(e)) if same_event(&f.events[seq as usize], &e) => {}
                Err(e) if self.sim.is_down() => {
                    return Err(StepError::Append(AppendError::PreviousIo(
                        e.to_string().into(),
                    )));
                }
                other => {
                    return Err(StepError::Fatal(format!(
                        "fork {} of deleted {id} reads seq {seq} as {other:?}",
                        f.id
                    )));
                }
            }
        }
        let durable = receipt.durable || {
            let wait = self.rng.chance(1, 4);
            if wait {
                store.wait_durable(&receipt)?;
            }
            wait
        };
        if durable {
            self.model.sessions[i].deleted = Some(true);
            self.tally.deletes_acked += 1;
        }
        Ok(())
    }

    /// A compaction of session `i` (whose surface is not empty): `compaction/start`,
    /// `compaction/summary`, a `user/message` replacing a random run of surface nodes and
    /// citing them, `compaction/end`; as one batch or as four appends. One in eight is an
    /// invalid replace, which must be refused with nothing written.
    pub(crate) fn compact(&mut self, store: &Store, i: usize) -> Result<(), StepError> {
        let nodes = self.model_surface_of(i)?;
        let id = self.model.sessions[i].id.clone();
        let base = self.model.sessions[i].events.len() as u64;
        let a = self.rng.below(nodes.len() as u64) as usize;
        let b = self.rng.range(a as u64, nodes.len() as u64 - 1) as usize;
        let (start, end) = (nodes[a], nodes[b]);
        let shadowed = &nodes[a..=b];
        let time = self.rng.range(0, 1 << 40) as i64;
        let k = base;
        let seqs = shadowed
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let len = (match self.rng.below(4) {
            0 => self.rng.range(1000, 6000),
            _ => self.rng.range(10, 400),
        } as usize)
            .min(max_text(&self.config));
        let summary = filler(&mut self.rng, len);
        let invalid = self.rng.chance(1, 8);
        let events = if invalid {
            // Alone; one of: a shadowed node not cited, start and end in the wrong order,
            // a start that is not a node.
            let seq = base;
            let mut sources: Vec<u64> = shadowed.to_vec();
            let op = match self.rng.below(3) {
                0 => {
                    sources.remove(self.rng.below(sources.len() as u64) as usize);
                    SurfaceOp::Replace { start, end }
                }
                1 if a < b => SurfaceOp::Replace {
                    start: end,
                    end: start,
                },
                _ => {
                    let log_only = (0..seq).find(|s| !nodes.contains(s)).unwrap_or(seq + 5);
                    SurfaceOp::Replace {
                        start: log_only,
                        end,
                    }
                }
            };
            let mut e = Event::new(
                "user/message",
                seq,
                time,
                format!(
                    r#"{{"id":"m-k{k}","role":"user","content":[{{"type":"text","text":"{summary}"}}],"source":{{"kind":"user"}}}}"#
                ),
            )
            .with_surface_op(op);
            if !sources.is_empty() {
                e = e.with_sources(sources);
            }
            if trace() {
                eprintln!(
                    "invalid replace on {id}: {:?} {:?}",
                    e.surface_op, e.source_event_seqs
                );
            }
            match store.append(&id, e) {
                Err(e) if refused(&e) => {}
                Err(e) => return Err(e.into()),
                Ok(r) => {
                    return Err(StepError::Fatal(format!(
                        "{id}: an invalid replace was accepted: {r:?}"
                    )));
                }
            }
            if store.len(&id) != Some(base) {
                return Err(StepError::Fatal(format!(
                    "{id}: a refused replace changed the length to {:?}",
                    store.len(&id)
                )));
            }
            self.tally.replaces_refused += 1;
            return Ok(());
        } else {
            let mut sources = vec![base, base + 1];
            sources.extend_from_slice(shadowed);
            vec![
                Event::new(
                    "compaction/start",
                    base,
                    time,
                    format!(r#"{{"compactionId":"k{k}","turn":null}}"#),
                ),
                Event::new(
                    "compaction/summary",
                    base + 1,
                    time,
                    format!(
                        r#"{{"compactionId":"k{k}","summary":[{{"type":"text","text":"{summary}"}}],"shadowedRange":{{"start":{start},"end":{end}}},"shadowedSeqs":[{seqs}],"shadowedTokenCount":{len},"provider":"deepseek","model":"deepseek-chat"}}"#
                    ),
                ),
                Event::new(
                    "user/message",
                    base + 2,
                    time,
                    format!(
                        r#"{{"id":"m-k{k}","role":"user","content":[{{"type":"text","text":"{summary}"}}],"source":{{"kind":"plugin","plugin":"compaction","form":"notice","summary":"conversation compacted"}}}}"#
                    ),
                )
                .with_surface_op(SurfaceOp::Replace { start, end })
                .with_sources(sources),
                Event::new(
                    "compaction/end",
                    base + 3,
                    time,
                    format!(r#"{{"compactionId":"k{k}","turn":null}}"#),
                ),
            ]
        };
        if events
            .iter()
            .any(|e| e.data.len() as u64 > self.config.max_event_bytes)
        {
            // A long shadowed list under a small event limit (multi-frame families).
            return Ok(());
        }
        if trace() {
            eprintln!(
                "compaction of {id}: replace {start}..{end} (positions {a}..={b}) at {}",
                base + 2
            );
        }
        self.model.sessions[i].events.extend(events.iter().cloned());
        let sim = self.sim.clone();
        let refusal = |e: &AppendError| {
            if sim.is_down() {
                StepError::Append(AppendError::PreviousIo(format!("compaction: {e}").into()))
            } else {
                StepError::Fatal(format!("{id}: a valid compaction was refused: {e}"))
            }
        };
        if self.rng.chance(1, 2) {
            self.model.sessions[i]
                .atomic
                .push((base as usize, base as usize + 4));
            let receipt = match store.append_batch(&id, events) {
                Err(e) if refused(&e) => return Err(refusal(&e)),
                r => r?,
            };
            if receipt.durable {
                self.durable_to_end(i, "durable receipt");
            }
        } else {
            // The model holds all four; only those appended so far may be acknowledged.
            let mut last = None;
            for (k, e) in events.into_iter().enumerate() {
                let receipt = match store.append(&id, e) {
                    Err(e) if refused(&e) => return Err(refusal(&e)),
                    r => r?,
                };
                if receipt.durable {
                    let s = &mut self.model.sessions[i];
                    s.durable = base as usize + k + 1;
                    s.why = "durable receipt";
                }
                last = Some(receipt);
            }
            if let Some(receipt) = last
                && !receipt.durable
                && self.rng.chance(1, 4)
            {
                store.wait_durable(&receipt)?;
                self.durable_to_end(i, "wait_durable");
            }
        }
        self.tally.compactions += 1;
        if self.model.sessions[i].durable as u64 > base + 2 {
            self.tally.compactions_acked += 1;
        }
        self.check_live_surface(store, i)
    }

    /// The open store's surface of session `i` is the model's.
    pub(crate) fn check_live_surface(&self, store: &Store, i: usize) -> Result<(), StepError> {
        let s = &self.model.sessions[i];
        let want = model_surface(&s.events).map_err(StepError::Fatal)?;
        match store.surface(&s.id) {
            Ok(got) if got == want => Ok(()),
            Ok(got) => Err(StepError::Fatal(format!(
                "live surface of {} is {got:?}, the model says {want:?}",
                s.id
            ))),
            Err(e) if self.sim.is_down() => Err(StepError::Append(AppendError::PreviousIo(
                e.to_string().into(),
            ))),
            Err(e) => Err(StepError::Fatal(format!("surface of {}: {e}", s.id))),
        }
    }
}
