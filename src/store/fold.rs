//! Loading a session's state and projection states before its first use: the checkpoints in
//! the index, then a replay of the events after them. When both must replay, the projections
//! ride along the state's replay ([`Riding`]): each event is read and decoded once.

use super::append::{projection_ops, set_surface, surface_ops};
use super::commit::Stage;
use crate::error::{AppendError, ReadError, ReplayFailure};
use crate::event::{Event, Seq};
use crate::index::{IndexOp, NO_NODE};
use crate::projection::{ApplyError, Checkpoint, ProjectionSet, ReplayError, Restored};
use crate::session::{InvariantMode, LookupError, SessionState};

use super::*;

/// Projection states restored from their checkpoints, folding the events a state replay reads
/// (as the rules see them: older shapes converted) from where the checkpoints end.
struct Riding<'a> {
    set: &'a ProjectionSet,
    restored: Restored,
    /// The seq the states need next; events before it are covered, one after it is a gap
    /// (the state replay started later): nothing more is folded.
    next: Seq,
    /// The first event that failed to fold (nothing more is folded).
    failed: Option<ApplyError>,
}

impl Riding<'_> {
    /// Folds `event` when it is the one the states need next.
    fn feed(&mut self, event: &Event) {
        if self.failed.is_some() || event.seq != self.next {
            return;
        }
        match self.set.apply(&mut self.restored.states, event) {
            Ok(_) => self.next += 1,
            Err(e) => self.failed = Some(e),
        }
    }
}

impl Store {
    /// Loads a session's state: its checkpoint, then a replay of the events after it (and,
    /// for events the surface table does not cover yet, the surface updates).
    /// A verbatim session has no state: its core's state stays `None`.
    pub(crate) fn ensure_state(&self, number: u64, core: &mut Core) -> Result<(), AppendError> {
        self.ensure_state_riding(number, core, None)
    }

    /// Loads a session's state ([`Store::ensure_state`]) and its projection states. When both
    /// replay events, the projections fold the events the state's replay reads, so that each
    /// is read and decoded once.
    pub(crate) fn ensure_folded(&self, number: u64, core: &mut Core) -> Result<(), AppendError> {
        let mut riding = None;
        if core.state.is_none() && core.projections.is_none() && !self.is_verbatim(number) {
            let len = self.registry().get(number).map_or(0, |r| r.next_seq);
            // Unreadable checkpoints: no ride, the projections restore on their own below.
            if let Ok(restored) = self.projection_checkpoints(number, len) {
                riding = Some(Riding {
                    set: &self.config.projections,
                    next: restored.replay_from,
                    restored,
                    failed: None,
                });
            }
        }
        self.ensure_state_riding(number, core, riding.as_mut())?;
        self.ensure_projections_ridden(number, core, riding)
    }

    /// [`Store::ensure_state`], feeding `riding` every event its replay reads.
    fn ensure_state_riding(
        &self,
        number: u64,
        core: &mut Core,
        mut riding: Option<&mut Riding<'_>>,
    ) -> Result<(), AppendError> {
        if core.state.is_some() || self.is_verbatim(number) {
            return Ok(());
        }
        let row = self
            .registry()
            .get(number)
            .cloned()
            .ok_or(AppendError::NoSuchSession(format!("#{number}")))?;
        // A checkpoint that cannot be read or decoded costs a replay from seq 0, never an error.
        let (covered, mut state) = match self.state_checkpoint(number, row.next_seq) {
            Some(checkpoint) => checkpoint,
            None => (0, SessionState::with_invariants(InvariantMode::Off)),
        };
        let replay_failed = |seq: Seq, e: ReplayFailure| AppendError::Replay {
            session: row.header.id.to_string(),
            seq,
            reason: Box::new(e),
        };
        let mut ops = Vec::new();
        if covered == 0 && row.next_seq > 0 {
            // No checkpoint (index rebuilt, or a crash during an import): load the whole log
            // the way dsh's loader does, then relink the whole surface.
            let mut cache = FrameCache::default();
            let mut events = Vec::with_capacity(row.next_seq.min(1 << 20) as usize);
            for seq in 0..row.next_seq {
                let mut event = self
                    .read_resolved(number, seq, &mut cache)
                    .map_err(|e| replay_failed(seq, ReplayFailure::Read(e)))?;
                // Replay accepts every type the engine accepted on append (unknown types
                // are legal in a live session; only dsh's import refuses them).
                if !crate::session::known::is_known_event_type(&event.kind) {
                    event.ignorable = true;
                }
                events.push(event);
            }
            let loaded = crate::session::load::load_stored(
                &row.header.id,
                &row.header,
                &events,
                InvariantMode::Off,
            )
            .map_err(|e| replay_failed(0, ReplayFailure::Load(e)))?;
            // The projections see the events as `StoreLookup` reads them (older shapes
            // converted): the events as stored are those when none has an older shape.
            if let Some(r) = riding.as_deref_mut().filter(|_| loaded.view.is_empty()) {
                events.iter().for_each(|e| r.feed(e));
            }
            state = loaded.state;
            state.set_invariant_mode(self.config.invariants);
            for (seq, _, _) in self.index.surface_links(number)? {
                ops.push(IndexOp::Unlink {
                    session: number,
                    seq,
                });
            }
            let nodes = state.surface().nodes();
            for (i, &seq) in nodes.iter().enumerate() {
                ops.push(IndexOp::Link {
                    session: number,
                    seq,
                    prev: if i == 0 { NO_NODE } else { nodes[i - 1] },
                    next: nodes.get(i + 1).copied().unwrap_or(NO_NODE),
                });
            }
        } else if covered < row.next_seq {
            let mode = state.invariant_mode();
            state.set_invariant_mode(InvariantMode::Off);
            let mut cache = FrameCache::default();
            for seq in covered..row.next_seq {
                let event = self
                    .read_resolved(number, seq, &mut cache)
                    .map_err(|e| replay_failed(seq, ReplayFailure::Read(e)))?;
                let lookup = StoreLookup::new(self, number, &[]);
                let applied = state
                    .append(&event, &lookup)
                    .map_err(|e| replay_failed(seq, ReplayFailure::Rule(e)))?;
                if seq >= row.surface_covered
                    && let Some(change) = &applied.surface
                {
                    surface_ops(number, state.surface().nodes(), change, &mut ops);
                }
                if let Some(r) = riding.as_deref_mut() {
                    r.feed(&lookup.as_current(event));
                }
            }
            state.set_invariant_mode(mode);
        }
        if row.surface_covered < row.next_seq && self.committer.is_some() {
            let mut row = row.clone();
            set_surface(&mut row, &state);
            self.registry_mut().put(row.clone());
            self.committer()?.stage(Stage {
                records: Default::default(),
                ops: ops.into(),
                rows: smallvec::smallvec![row],
            })?;
        }
        core.checkpointed = covered;
        core.state = Some(state);
        Ok(())
    }

    /// Loads a session's projection states: the checkpoints in the index, then a replay of
    /// the events after them (the restore ladder), taken from `riding` when it folded them
    /// all, else read from the log. Rebuilt units are checkpointed again.
    fn ensure_projections_ridden(
        &self,
        number: u64,
        core: &mut Core,
        riding: Option<Riding<'_>>,
    ) -> Result<(), AppendError> {
        if core.projections.is_some() || self.is_verbatim(number) {
            return Ok(());
        }
        let len = self.registry().get(number).map_or(0, |r| r.next_seq);
        let replay_failed = |e: ReadError| AppendError::Replay {
            session: format!("#{number}"),
            seq: 0,
            reason: Box::new(ReplayFailure::Projections(e)),
        };
        let (mut restored, replayed) = match riding {
            Some(Riding {
                failed: Some(e), ..
            }) => {
                let e = ReadError::Projections(Box::new(ReplayError::Apply(e)));
                return Err(replay_failed(e));
            }
            Some(r) if r.next == len => {
                let replayed = r.restored.replay_from < len;
                (r.restored, replayed)
            }
            _ => self
                .restore_projections(number, len)
                .map_err(replay_failed)?,
        };
        if (replayed || restored.rebuilt_any()) && self.committer.is_some() {
            let ops = projection_ops(&self.config.projections, number, &mut restored.states);
            self.committer()?.stage(Stage {
                records: Default::default(),
                ops: ops.into(),
                rows: Default::default(),
            })?;
        }
        core.projections = Some(restored.states);
        Ok(())
    }

    /// A session's projection states as their checkpoints in the index leave them, for a log
    /// of `len` events (see [`ProjectionSet::restore`]).
    fn projection_checkpoints(&self, number: u64, len: Seq) -> Result<Restored, ReadError> {
        let rows: Vec<Checkpoint> = self
            .index
            .projections(number)?
            .into_iter()
            .filter_map(|(key, record)| Checkpoint::from_record(key, &record).ok())
            .collect();
        Ok(self.config.projections.restore(rows, len))
    }

    /// Checkpoints + replay for one session, without touching the core. Returns whether any
    /// event had to be replayed (i.e. a segment was read).
    pub(super) fn restore_projections(
        &self,
        number: u64,
        len: Seq,
    ) -> Result<(Restored, bool), ReadError> {
        let mut restored = self.projection_checkpoints(number, len)?;
        let from = restored.replay_from;
        if from < len {
            let lookup = StoreLookup::new(self, number, &[]);
            let mut cache = FrameCache::default();
            let events = (from..len).map(|seq| match lookup.event_at_cached(seq, &mut cache) {
                Ok(Some(e)) => Ok(e.into_owned()),
                Ok(None) => Err(LookupError {
                    seq,
                    message: format!("session #{number} has no event at seq {seq}"),
                }),
                Err(e) => Err(e),
            });
            self.config
                .projections
                .replay(&mut restored.states, events)
                .map_err(|e| ReadError::Projections(Box::new(e)))?;
        }
        Ok((restored, from < len))
    }
}
