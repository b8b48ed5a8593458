//! The append pipeline: validation, the session state and projections, staging records
//! and index operations, and the receipt.

use super::commit::{Goal, One, Ops, Stage};
use crate::error::AppendError;
use crate::event::{Event, MAX_SAFE_INTEGER, Seq, SessionHeader};
use crate::index::{IndexOp, NO_NODE, SessionRow};
use crate::json::{self};
use crate::log::record::Record;
use crate::projection::{ProjectionSet, SessionProjections};
use crate::session::RuleViolation;
use crate::session::{SessionState, SurfaceChange};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::*;

impl Store {
    /// Appends events to a session atomically: all are validated first, then staged together
    /// as one operation (one frame, or continued frames when larger than a frame; recovery
    /// keeps an operation whole or drops it); on any error nothing is written and nothing
    /// changes. A record larger than `Config::max_frame_bytes` is refused
    /// ([`AppendError::RecordTooLarge`]).
    pub(crate) fn append_to(
        &self,
        session: &str,
        events: One<Event>,
    ) -> Result<Receipt, AppendError> {
        let number = self
            .number_of(session)
            .ok_or_else(|| AppendError::NoSuchSession(session.to_owned()))?;
        let core = self.core(number);
        let mut core = lock(&core);
        self.append_locked(session, number, &mut core, events)
    }

    /// The append pipeline, with the session's core locked.
    pub(crate) fn append_locked(
        &self,
        session: &str,
        number: u64,
        core: &mut Core,
        events: One<Event>,
    ) -> Result<Receipt, AppendError> {
        if self.is_verbatim(number) {
            return self.append_verbatim_locked(session, number, events.into_vec());
        }
        let committer = self.committer()?;
        committer.refuse_if_failed()?;
        self.ensure_folded(number, core)?;
        let Some(real) = core.state.as_mut() else {
            return Err(AppendError::NoSuchSession(session.to_owned()));
        };
        let semantics = |seq: Seq, e: RuleViolation| AppendError::Semantics {
            session: session.to_owned(),
            seq,
            reason: Box::new(e),
        };
        // A batch plans on a scratch copy so that a failure leaves the state untouched.
        let batched = events.len() > 1;
        let mut scratch = batched.then(|| real.clone());
        let mut ops = Ops::new();
        let mut records: One<Vec<u8>> = One::with_capacity(events.len());
        let mut planned: One<Event> = One::with_capacity(events.len());
        // The validator's spans of each event's data, for the projection folds.
        let mut planned_spans: One<json::Spans> = One::with_capacity(events.len());
        let mut checkpoint_due = false;
        for event in events {
            let state = scratch.as_mut().unwrap_or(&mut *real);
            let expected = state.next_seq();
            let spans = self.validate_event(session, &event, expected)?;
            let lookup = StoreLookup::new(self, number, &planned);
            // `validate_event` ran the lossless-JSON check with the store's limits.
            let plan = state
                .plan_append_prevalidated(&event, &lookup, &spans)
                .map_err(|e| semantics(expected, e))?;
            if !batched {
                // A single event: encode before applying, so an encoding error changes nothing.
                records.push(self.encode_event_checked(number, &event)?);
            }
            let applied = state
                .apply(plan)
                .map_err(|e| semantics(expected, e.into()))?;
            if let Some(change) = &applied.surface {
                surface_ops(number, state.surface().nodes(), change, &mut ops);
            }
            checkpoint_due |= event.kind == "turn/end";
            if batched {
                records.push(self.encode_event_checked(number, &event)?);
            }
            planned.push(event);
            planned_spans.push(spans);
        }
        if let Some(s) = scratch {
            *real = s;
        }
        let state = &*real;
        checkpoint_due |= state.next_seq() >= core.checkpointed + STATE_CHECKPOINT_EVENTS;
        if checkpoint_due {
            ops.push(IndexOp::State {
                session: number,
                covered: state.next_seq(),
                bytes: state_bytes(state)?,
            });
        }
        if let Some(projections) = core.projections.as_mut() {
            let mut due = false;
            for (e, spans) in planned.iter().zip(planned_spans.drain(..)) {
                let (applied, _) = json::with_span_hint(&e.data, spans, || {
                    self.config.projections.apply(projections, e)
                });
                applied.map_err(|reason| AppendError::Projection {
                    session: session.to_owned(),
                    seq: e.seq,
                    reason,
                })?;
                due |= self.config.projection_checkpoints.due(projections, e);
            }
            if due {
                ops.extend(projection_ops(
                    &self.config.projections,
                    number,
                    projections,
                ));
            }
        }
        // The session's row after these events. Every change to a live session's row is made
        // holding the session's core (appends, folds, and the forks and deletes that change a
        // parent's count of children), so it stays as read here until it is put back below:
        // staged first, then published in the registry. A reader never sees a length whose
        // events are not staged yet, and no append holds the registry while it stages (at 64
        // sessions every appender queued behind the one staging).
        let mut row = self
            .registry()
            .get(number)
            .cloned()
            .ok_or_else(|| AppendError::NoSuchSession(session.to_owned()))?;
        for e in &planned {
            super::registry::count_event(&mut row, e.seq, e.time, e.data.len()).map_err(
                |reason| AppendError::Registry {
                    session: session.to_owned(),
                    seq: e.seq,
                    reason,
                },
            )?;
        }
        set_surface(&mut row, state);
        let last_seq = planned
            .last()
            .map_or(state.next_seq().saturating_sub(1), |e| e.seq);
        let planned: One<Arc<Event>> = planned.into_iter().map(Arc::new).collect();
        let lsn = committer.stage(Stage {
            records: records
                .into_iter()
                .zip(planned.iter())
                .map(|(bytes, e)| (bytes, Some((number, e.clone()))))
                .collect(),
            ops,
            rows: smallvec::smallvec![row.clone()],
        })?;
        self.registry_mut().put(row);
        if checkpoint_due {
            core.checkpointed = state.next_seq();
        }
        for e in &planned {
            let _ = core.messages.observe(state.surface(), e);
        }
        self.publish(session, &planned);
        self.finish(lsn, last_seq)
    }

    /// Writes a state checkpoint for the session when it is behind.
    pub(crate) fn checkpoint_state(&self, number: u64, core: &mut Core) -> Result<(), AppendError> {
        if let Some(p) = core.projections.as_mut()
            && p.since_checkpoint() > 0
        {
            let ops = projection_ops(&self.config.projections, number, p);
            self.committer()?.stage(Stage {
                records: Default::default(),
                ops: ops.into(),
                rows: Default::default(),
            })?;
        }
        let Some(state) = core.state.as_ref() else {
            return Ok(());
        };
        if core.checkpointed >= state.next_seq() && self.state_covered(number) >= state.next_seq() {
            return Ok(());
        }
        self.committer()?.stage(Stage {
            records: Default::default(),
            ops: smallvec::smallvec![IndexOp::State {
                session: number,
                covered: state.next_seq(),
                bytes: state_bytes(state)?,
            }],
            rows: Default::default(),
        })?;
        core.checkpointed = state.next_seq();
        Ok(())
    }

    pub(super) fn publish(&self, session: &str, events: &[Arc<Event>]) {
        let listeners: Vec<Listener> = self
            .listeners
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(_, l)| l.clone())
            .collect();
        for listener in listeners {
            for e in events {
                let call = std::panic::AssertUnwindSafe(|| listener(session, e));
                if std::panic::catch_unwind(call).is_err() {
                    self.listener_failures.fetch_add(1, Ordering::Relaxed);
                    eprintln!(
                        "sessionlog: a session/event listener panicked on {session:?} seq {}; the append stands",
                        e.seq
                    );
                }
            }
        }
    }

    /// Applies the durability mode after staging.
    pub(crate) fn finish(&self, lsn: u64, seq: Seq) -> Result<Receipt, AppendError> {
        let committer = self.committer()?;
        match self.config.durability {
            Durability::Sync => {
                committer.commit(lsn, Goal::Durable, false)?;
                Ok(Receipt {
                    seq,
                    lsn,
                    durable: true,
                })
            }
            Durability::Group { .. } => {
                let limit = GROUP_BACKPRESSURE_FRAMES
                    * FRAME_BYTES.min(self.config.max_frame_bytes as usize);
                if committer.staged_bytes() >= limit {
                    committer.commit(lsn, Goal::Written, false)?;
                }
                Ok(Receipt {
                    seq,
                    lsn,
                    durable: committer.is_durable(lsn),
                })
            }
            Durability::Buffered => {
                if committer.staged_bytes() >= self.config.batch_bytes {
                    committer.commit(lsn, Goal::Written, false)?;
                }
                Ok(Receipt {
                    seq,
                    lsn,
                    durable: committer.is_durable(lsn),
                })
            }
        }
    }

    /// Encodes an event record, refusing one that would not fit in a frame.
    pub(super) fn encode_event_checked(
        &self,
        number: u64,
        event: &Event,
    ) -> Result<Vec<u8>, AppendError> {
        let bytes = encode_event(number, event)?;
        self.check_fits(&bytes, &event.kind)?;
        Ok(bytes)
    }

    /// Refuses an encoded record that would not fit in a frame (`kind` names it).
    pub(crate) fn check_fits(&self, record: &[u8], kind: &str) -> Result<(), AppendError> {
        if record.len() > self.config.max_frame_bytes as usize {
            return Err(AppendError::RecordTooLarge {
                kind: kind.to_owned(),
                size: record.len() as u64,
                limit: u64::from(self.config.max_frame_bytes),
            });
        }
        Ok(())
    }

    pub(super) fn validate_event(
        &self,
        session: &str,
        event: &Event,
        expected: Seq,
    ) -> Result<json::Spans, AppendError> {
        let envelope = |reason: String| AppendError::Envelope {
            session: session.to_owned(),
            kind: event.kind.clone(),
            seq: expected,
            reason,
        };
        if event.seq != expected {
            return Err(AppendError::WrongSeq {
                session: session.to_owned(),
                got: event.seq,
                expected,
            });
        }
        if event.time.unsigned_abs() > MAX_SAFE_INTEGER as u64 {
            return Err(envelope(format!(
                "time {} is not a safe integer",
                event.time
            )));
        }
        let size = event.data.len() as u64;
        if size > self.config.max_event_bytes {
            return Err(AppendError::TooLarge {
                session: session.to_owned(),
                kind: event.kind.clone(),
                size,
                limit: self.config.max_event_bytes,
            });
        }
        json::validate_spans(&event.data, &self.config.json_limits).map_err(|e| {
            AppendError::BadData {
                session: session.to_owned(),
                kind: event.kind.clone(),
                seq: expected,
                reason: e,
            }
        })
    }
}

/// Checkpoint operations for every projection of a session (and marks them written).
pub(crate) fn projection_ops(
    set: &ProjectionSet,
    number: u64,
    states: &mut SessionProjections,
) -> Vec<IndexOp> {
    let ops = set
        .checkpoint(states)
        .into_iter()
        .map(|cp| IndexOp::Projection {
            session: number,
            record: cp.to_record(),
            key: cp.key,
        })
        .collect();
    states.mark_checkpointed();
    ops
}

/// The event's record, encoded into the thread's spare record buffer when it has one
/// ([`super::commit::spare_record_buffer`]).
pub(super) fn encode_event(session: u64, event: &Event) -> Result<Vec<u8>, AppendError> {
    let mut out = super::commit::spare_record_buffer();
    Record::encode_event_into(&mut out, session, event);
    Ok(out)
}

pub(crate) fn encode(record: &Record) -> Result<Vec<u8>, AppendError> {
    let mut bytes = Vec::new();
    record
        .encode_into(&mut bytes)
        .map_err(AppendError::Encode)?;
    Ok(bytes)
}

pub(crate) fn state_bytes(state: &SessionState) -> Result<Vec<u8>, AppendError> {
    state.to_bytes().map_err(AppendError::EncodeState)
}

/// Copies the surface summary of `state` into a session row.
pub(crate) fn set_surface(row: &mut SessionRow, state: &SessionState) {
    let nodes = state.surface().nodes();
    row.surface_head = nodes.first().copied().unwrap_or(NO_NODE);
    row.surface_tail = nodes.last().copied().unwrap_or(NO_NODE);
    row.surface_len = nodes.len() as u64;
    row.replace_generation = state.surface().replace_generation();
    row.surface_covered = state.next_seq();
}

/// The index operations that turn the surface before `change` into `nodes` (after it): the
/// removed nodes are unlinked; the new node and its neighbours get their links.
pub(super) fn surface_ops(
    number: u64,
    nodes: &[Seq],
    change: &SurfaceChange,
    ops: &mut impl Extend<IndexOp>,
) {
    for &seq in &change.removed {
        ops.extend([IndexOp::Unlink {
            session: number,
            seq,
        }]);
    }
    let p = change.position;
    let lo = p.saturating_sub(1);
    let hi = (p + 1).min(nodes.len().saturating_sub(1));
    for i in lo..=hi {
        let Some(&seq) = nodes.get(i) else { continue };
        let prev = if i == 0 { NO_NODE } else { nodes[i - 1] };
        let next = nodes.get(i + 1).copied().unwrap_or(NO_NODE);
        ops.extend([IndexOp::Link {
            session: number,
            seq,
            prev,
            next,
        }]);
    }
}

/// The store's checks on a header it is about to write (create, import): the id limits, then
/// the one header validator, [`crate::session::header::validate_header_for_write`] (dsh's
/// `validateSessionHeader` plus its lossless-JSON boundary), so the store never writes a header
/// its own import or dsh would refuse.
pub(super) fn validate_header(h: &SessionHeader) -> Result<(), AppendError> {
    if h.id.is_empty() {
        return Err(AppendError::InvalidSessionId {
            id: h.id.clone(),
            reason: "session ids must not be empty",
        });
    }
    if h.id.len() > 4096 {
        return Err(AppendError::InvalidSessionId {
            id: h.id.chars().take(64).collect(),
            reason: "session ids are at most 4096 bytes",
        });
    }
    crate::session::header::validate_header_for_write(h).map_err(|e| AppendError::InvalidHeader {
        id: h.id.clone(),
        reason: e,
    })
}
