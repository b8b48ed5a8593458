//! Creating a session (alone or with its first events) and importing a whole stored session
//! as one operation.

use super::commit::Stage;
use crate::error::{AppendError, ReplayFailure};
use crate::event::{Event, SessionHeader};
use crate::index::{IndexOp, NO_NODE};
use crate::log::record::Record;
use crate::projection::ProjectionSet;
use crate::session::{InvariantMode, RuleViolation, SessionState};
use std::sync::Arc;

use super::*;

impl Store {
    /// Creates a session with per-session options. Its id must be new and non-empty.
    pub(crate) fn stage_create(
        &self,
        header: SessionHeader,
        options: SessionOptions,
    ) -> Result<Receipt, AppendError> {
        let committer = self.committer()?;
        validate_header(&header)?;
        let mut registry = self.registry_mut();
        let number = registry.next_number();
        let record = Record::CreateSession {
            session: number,
            header: header.clone(),
        };
        let bytes = encode(&record)?;
        self.check_fits(&bytes, "session record")?;
        let rows = registry
            .create(number, header.clone(), None)
            .map_err(|_| AppendError::SessionExists(header.id.clone()))?;
        let lsn = committer.stage(Stage {
            records: smallvec::smallvec![(bytes, None)],
            ops: Default::default(),
            rows: rows.into(),
        })?;
        drop(registry);
        let core = self.core(number);
        {
            let mut core = lock(&core);
            core.state = Some(SessionState::with_invariants(
                options.invariants.unwrap_or(self.config.invariants),
            ));
            core.projections = Some(self.config.projections.fresh());
        }
        self.finish(lsn, 0)
    }

    /// Creates a session and appends its first events as **one operation**: after a crash at
    /// any byte the session is either absent or present with all of `events`, never present
    /// and empty or partial. The events are verbatim [`Event`]s with seqs `0..n`, checked by
    /// the same rules as [`Session::append_batch`] (seq order, envelope, JSON, size, surface
    /// and, per [`Config::invariants`], the turn/step/tool invariants); on any refusal nothing
    /// is written and the id stays free. With no events this is [`Store::create`]. Returns
    /// the session's handle and the operation's [`Receipt`] (durability is the store's, as
    /// for an append: see [`Store::wait_durable`]).
    ///
    /// ```
    /// use sessionlog::{Config, Event, SessionHeader, Store};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path(), Config::default())?;
    /// let t: i64 = 1_767_225_600_000;
    /// let (s, receipt) = store.create_with_events(
    ///     SessionHeader::new("s1", t as u64),
    ///     vec![
    ///         Event::new("turn/start", 0, t, r#"{"turn":1}"#),
    ///         Event::new("turn/end", 1, t, r#"{"turn":1,"reason":{"kind":"completed"}}"#),
    ///     ],
    /// )?;
    /// assert_eq!(s.len(), 2);
    /// assert_eq!(receipt.seq, 1);
    /// assert!(receipt.durable); // the default durability is `sync`
    /// // A refused first batch writes nothing: the id stays free.
    /// let gap = vec![Event::new("turn/start", 1, t, r#"{"turn":1}"#)];
    /// assert!(store.create_with_events(SessionHeader::new("s2", t as u64), gap).is_err());
    /// assert!(store.session("s2").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_with_events(
        &self,
        header: SessionHeader,
        events: Vec<Event>,
    ) -> Result<(Session<'_>, Receipt), AppendError> {
        let id = header.id.clone();
        let receipt = if events.is_empty() {
            self.stage_create(header, SessionOptions::default())?
        } else {
            self.stage_create_with_events(header, events)?
        };
        let session = self
            .session(&id)
            .map_err(|_| AppendError::NoSuchSession(id))?;
        Ok((session, receipt))
    }

    /// [`Store::create_with_events`] with at least one event: plans the whole batch on a
    /// fresh state (the batch is its own lookup: a new session has no other events), then
    /// stages the create record and the events together.
    fn stage_create_with_events(
        &self,
        header: SessionHeader,
        events: Vec<Event>,
    ) -> Result<Receipt, AppendError> {
        let committer = self.committer()?;
        validate_header(&header)?;
        let id = header.id.clone();
        let semantics = |seq: Seq, e: RuleViolation| AppendError::Semantics {
            session: id.clone(),
            seq,
            reason: Box::new(e),
        };
        let mut state = SessionState::with_invariants(self.config.invariants);
        let mut projections = self.config.projections.fresh();
        let mut planned: Vec<Event> = Vec::with_capacity(events.len());
        for event in events {
            let expected = state.next_seq();
            let spans = self.validate_event(&id, &event, expected)?;
            // `validate_event` ran the lossless-JSON check with the store's limits.
            let plan = state
                .plan_append_prevalidated(&event, &planned, &spans)
                .map_err(|e| semantics(expected, e))?;
            state
                .apply(plan)
                .map_err(|e| semantics(expected, e.into()))?;
            self.config
                .projections
                .apply(&mut projections, &event)
                .map_err(|reason| AppendError::Projection {
                    session: id.clone(),
                    seq: event.seq,
                    reason,
                })?;
            planned.push(event);
        }
        let mut registry = self.registry_mut();
        if registry.by_id(&id).is_some() {
            return Err(AppendError::SessionExists(id));
        }
        let number = registry.next_number();
        // Encode (and size-check) every record before the registry changes.
        let create = encode(&Record::CreateSession {
            session: number,
            header: header.clone(),
        })?;
        self.check_fits(&create, "session record")?;
        let mut records = vec![(create, None)];
        let planned: Vec<Arc<Event>> = planned.into_iter().map(Arc::new).collect();
        for e in &planned {
            let bytes = self.encode_event_checked(number, e)?;
            records.push((bytes, Some((number, e.clone()))));
        }
        let mut rows = registry
            .create(number, header, None)
            .map_err(|_| AppendError::SessionExists(id.clone()))?;
        for e in &planned {
            // The seqs were checked above (0, 1, ...), so the registry cannot refuse them.
            registry
                .event(number, e.seq, e.time, e.data.len())
                .map_err(|reason| AppendError::Registry {
                    session: id.clone(),
                    seq: e.seq,
                    reason,
                })?;
        }
        let mut row = registry
            .get(number)
            .cloned()
            .ok_or_else(|| AppendError::NoSuchSession(id.clone()))?;
        set_surface(&mut row, &state);
        registry.put(row.clone());
        rows.push(row);
        let ops = new_session_ops(number, &state, &mut projections, &self.config.projections)?;
        let lsn = committer.stage(Stage {
            records: records.into(),
            ops: ops.into(),
            rows: rows.into(),
        })?;
        drop(registry);
        let core = self.core(number);
        let mut core = lock(&core);
        for e in &planned {
            let _ = core.messages.observe(state.surface(), e);
        }
        core.checkpointed = state.next_seq();
        let last = state.next_seq().saturating_sub(1);
        core.state = Some(state);
        core.projections = Some(projections);
        drop(core);
        self.publish(&id, &planned);
        self.finish(lsn, last)
    }

    /// Imports a whole stored session (e.g. read from a dsh file): validates it the way
    /// dsh's loader does (format version, vocabulary, legacy shapes, envelope, surface; not
    /// the turn/step invariants), then writes it as one operation: after a crash at any byte
    /// the session is either absent or complete. Nothing is written when validation fails.
    /// The session's later appends enforce `invariants` (default: the store's setting).
    pub(crate) fn import_stored(
        &self,
        header: SessionHeader,
        events: Vec<Event>,
        invariants: Option<InvariantMode>,
    ) -> Result<Receipt, ImportError> {
        let committer = self.committer()?;
        let id = header.id.clone();
        let loaded = crate::session::load::load_stored(&id, &header, &events, InvariantMode::Off)?;
        let mut state = loaded.state;
        let mut projections = self
            .config
            .projections
            .fold_all(loaded.view.apply(&events).iter())
            .map_err(|e| AppendError::Replay {
                session: id.clone(),
                seq: 0,
                reason: Box::new(ReplayFailure::Fold(e)),
            })?;
        validate_header(&header)?;
        for e in &events {
            let size = e.data.len() as u64;
            if size > self.config.max_event_bytes {
                return Err(ImportError::Append(AppendError::TooLarge {
                    session: id.clone(),
                    kind: e.kind.clone(),
                    size,
                    limit: self.config.max_event_bytes,
                }));
            }
        }
        state.set_invariant_mode(invariants.unwrap_or(self.config.invariants));
        let mut registry = self.registry_mut();
        let number = registry.next_number();
        // Encode (and size-check) every record before anything changes.
        let mut event_records = Vec::with_capacity(events.len());
        for e in events {
            let bytes = self.encode_event_checked(number, &e)?;
            event_records.push((bytes, Some((number, Arc::new(e)))));
        }
        let mut rows = registry
            .create(number, header.clone(), None)
            .map_err(|_| AppendError::SessionExists(id.clone()))?;
        let mut records = vec![(
            encode(&Record::CreateSession {
                session: number,
                header,
            })?,
            None,
        )];
        for (_, e) in &event_records {
            let Some((_, e)) = e else { continue };
            registry
                .event(number, e.seq, e.time, e.data.len())
                .map_err(|err| AppendError::WrongSeq {
                    session: id.clone(),
                    got: e.seq,
                    expected: match err {
                        registry::RegistryError::Gap { expected, .. } => expected,
                        _ => 0,
                    },
                })?;
        }
        let mut row = registry
            .get(number)
            .cloned()
            .ok_or_else(|| AppendError::NoSuchSession(id.clone()))?;
        set_surface(&mut row, &state);
        registry.put(row.clone());
        rows.push(row);
        let ops = new_session_ops(number, &state, &mut projections, &self.config.projections)?;
        // The whole session is one operation: the committer writes it as one frame or as
        // several continued frames, which recovery keeps whole or not at all.
        records.extend(event_records);
        let lsn = committer.stage(Stage {
            records: records.into(),
            ops: ops.into(),
            rows: rows.into(),
        })?;
        drop(registry);
        let core = self.core(number);
        let mut core = lock(&core);
        core.checkpointed = state.next_seq();
        let last = state.next_seq().saturating_sub(1);
        core.state = Some(state);
        core.projections = Some(projections);
        drop(core);
        Ok(self.finish(lsn, last)?)
    }
}

/// The index operations of a session written whole (import, create with events): its
/// surface links, a state checkpoint and the projections' checkpoints.
fn new_session_ops(
    number: u64,
    state: &SessionState,
    projections: &mut SessionProjections,
    set: &ProjectionSet,
) -> Result<Vec<IndexOp>, AppendError> {
    let nodes = state.surface().nodes();
    let mut ops: Vec<IndexOp> = nodes
        .iter()
        .enumerate()
        .map(|(i, &seq)| IndexOp::Link {
            session: number,
            seq,
            prev: if i == 0 { NO_NODE } else { nodes[i - 1] },
            next: nodes.get(i + 1).copied().unwrap_or(NO_NODE),
        })
        .collect();
    ops.push(IndexOp::State {
        session: number,
        covered: state.next_seq(),
        bytes: state_bytes(state)?,
    });
    ops.extend(projection_ops(set, number, projections));
    Ok(ops)
}
