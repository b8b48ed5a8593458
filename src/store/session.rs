//! Session handles on the store: create, resume (with crash repair), append with a surface
//! intent, read, derive messages, fork (zero-copy) and delete.
//!
//! ```
//! use sessionlog::typed::Raw;
//! use sessionlog::{Config, Intent, Seq, SessionHeader, Store};
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path(), Config::default())?;
//! let s = store.create(SessionHeader::new("s1", 1_767_225_600_000))?;
//! let user = |id: &str, text: &str| {
//!     format!(r#"{{"id":"{id}","role":"user","content":[{{"type":"text","text":"{text}"}}],"source":{{"kind":"user"}}}}"#)
//! };
//! s.append(Raw::new("turn/start", r#"{"turn":1}"#, Intent::none()))?;
//! s.append(Raw::new("user/message", user("u1", "hello"), Intent::append()))?;
//! s.append(Raw::new("user/message", user("u2", "more"), Intent::append()))?;
//! s.append(Raw::new("turn/end", r#"{"turn":1,"reason":{"kind":"completed"}}"#, Intent::none()))?;
//! // Compaction: a summary replaces surface nodes 1..2 (it must cite every node it shadows).
//! s.append(Raw::new("user/message", user("sum", "summary"), Intent::replace(1, 2).sources(vec![1, 2])))?;
//! drop(s);
//! drop(store);
//!
//! let store = Store::open(dir.path(), Config::default())?;
//! let s = store.resume("s1")?;
//! assert_eq!(s.surface()?, vec![4 as Seq]);
//! let messages = s.messages()?;
//! assert_eq!(messages.len(), 1);
//! assert!(messages[0].json.contains("summary"));
//! assert_eq!(s.len(), 5); // shadowed events stay in the log
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{AppendError, ReadError, ReplayFailure};
use crate::event::{Event, Seq, SessionHeader, SurfaceOp};
use crate::index::{IndexOp, NO_NODE};
use crate::log::record::Record;
use crate::session::SessionState;
use crate::session::derive::DerivedMessage;
use crate::session::fork::{ForkError, plan_fork};
use crate::typed::TypedEvent;

use super::commit::Stage;
use super::registry::Registry;
use super::{
    FrameCache, Receipt, SessionOptions, Store, StoreLookup, encode, lock, set_surface, state_bytes,
};

/// How an appended event joins the surface (dsh's surface metadata).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Intent {
    /// `surfaceOp` (required on `user/message`, `assistant/message`, `tool/result`).
    pub surface_op: Option<SurfaceOp>,
    /// `sourceEventSeqs`.
    pub source_event_seqs: Option<Vec<Seq>>,
}

impl Intent {
    /// A log-only event: no surface metadata.
    pub fn none() -> Self {
        Intent::default()
    }

    /// `surfaceOp: "append"`.
    pub fn append() -> Self {
        Intent {
            surface_op: Some(SurfaceOp::Append),
            source_event_seqs: None,
        }
    }

    /// `surfaceOp: {op: "replace", start, end}`.
    pub fn replace(start: Seq, end: Seq) -> Self {
        Intent {
            surface_op: Some(SurfaceOp::Replace { start, end }),
            source_event_seqs: None,
        }
    }

    /// Sets `sourceEventSeqs`.
    pub fn sources(mut self, seqs: Vec<Seq>) -> Self {
        self.source_event_seqs = Some(seqs);
        self
    }
}

/// Why a fork was refused.
#[derive(Debug, thiserror::Error)]
pub enum ForkFailure {
    /// dsh's fork rules (`SESSION_NOT_FOUND`, `INVALID_BOUNDARY`, `OPEN_TURN`, ...).
    #[error(transparent)]
    Rule(#[from] ForkError),
    /// Writing the child failed.
    #[error(transparent)]
    Append(#[from] AppendError),
}

/// A handle on one session of a store.
#[derive(Debug, Clone)]
pub struct Session<'s> {
    store: &'s Store,
    id: String,
    number: u64,
}

/// Milliseconds since the Unix epoch (dsh's `Date.now()`).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Store {
    /// Creates a session and returns its handle.
    pub fn create(&self, header: SessionHeader) -> Result<Session<'_>, AppendError> {
        let id = header.id.clone();
        self.stage_create(header, SessionOptions::default())?;
        self.session(&id)
            .map_err(|_| AppendError::NoSuchSession(id))
    }

    /// A handle on an existing session. Opening a handle never modifies anything.
    pub fn session(&self, id: &str) -> Result<Session<'_>, ReadError> {
        let number = self
            .number_of(id)
            .ok_or_else(|| ReadError::NoSuchSession(id.to_owned()))?;
        Ok(Session {
            store: self,
            id: id.to_owned(),
            number,
        })
    }

    /// Resumes a session for writing: loads its state (checkpoint plus the events after it)
    /// and, when its log ends inside an open turn (a crash mid-turn), appends dsh's crash
    /// closers (error results for unanswered tool calls, `step/end`, `turn/end` with reason
    /// `interrupted`) before handing it back — unless `Config::repair_on_resume` is off.
    pub fn resume(&self, id: &str) -> Result<Session<'_>, AppendError> {
        let session = self
            .session(id)
            .map_err(|_| AppendError::NoSuchSession(id.to_owned()))?;
        let core = self.core(session.number);
        let mut core = lock(&core);
        self.ensure_state(session.number, &mut core)?;
        if self.config.repair_on_resume
            && self.committer.is_some()
            && let Some(closers) = core.state.as_ref().map(SessionState::closers)
            && !closers.is_empty()
        {
            self.append_locked(id, session.number, &mut core, closers.into())?;
        }
        Ok(session)
    }

    /// Forks `source` after `boundary` (inclusive; `None`: its last event) into a new session
    /// `child_id` (`None`: a minted `session-<n>`). The boundary must not fall inside an open
    /// turn. Zero-copy: the child's first `seedLength` events are the parent's frames, read
    /// through the parent; only the child's surface (and a `session/end-seed` marker, as dsh
    /// writes) is written. A deleted parent keeps its events while forks inherit them
    /// (reference counting).
    pub fn fork(
        &self,
        source: &str,
        boundary: Option<Seq>,
        child_id: Option<&str>,
    ) -> Result<Session<'_>, ForkFailure> {
        let committer = self.committer()?;
        let child_id = match child_id {
            Some(c) => c.to_owned(),
            None => self.mint_id(),
        };
        if self.number_of(&child_id).is_some() {
            return Err(ForkError::already_exists(&child_id).into());
        }
        let number = self
            .number_of(source)
            .ok_or_else(|| ForkError::not_found(source))?;
        if self.is_verbatim(number) {
            let seed_length = match boundary {
                Some(b) => b.saturating_add(1),
                None => self.len(source).unwrap_or(0),
            };
            let mut header = self
                .header(source)
                .ok_or_else(|| ForkError::not_found(source))?;
            header.id = child_id;
            header.created_at = now_ms().max(0) as u64;
            header.parent_session = Some(source.to_owned());
            header.seed_length = Some(seed_length);
            return self.fork_verbatim(source, header, seed_length);
        }
        let core = self.core(number);
        let mut core = lock(&core);
        self.ensure_folded(number, &mut core)?;
        let Some(state) = core.state.as_ref() else {
            return Err(ForkError::not_found(source).into());
        };
        let source_header = self
            .header(source)
            .ok_or_else(|| ForkError::not_found(source))?;
        let lookup = ReadFailures {
            inner: StoreLookup::new(self, number, &[]),
            first: std::cell::RefCell::new(None),
        };
        let planned = plan_fork(
            source,
            &source_header,
            state,
            boundary,
            &child_id,
            now_ms().max(0) as u64,
            &lookup,
        );
        // The fork rules see a failed read as a missing event; report the read itself, so an
        // I/O error or damaged frame is not mistaken for an invalid boundary.
        if planned.is_err()
            && let Some(e) = lookup.first.into_inner()
        {
            return Err(AppendError::Io(std::io::Error::other(format!(
                "reading session {source:?} to plan the fork failed at seq {}: {}",
                e.seq, e.message
            )))
            .into());
        }
        let plan = planned?;
        let child_state = match plan.child_state {
            Some(s) => s,
            None => {
                let mut cache = FrameCache::default();
                let mut events = Vec::with_capacity(plan.seed_length.min(1 << 20) as usize);
                for seq in 0..plan.seed_length {
                    events.push(self.read_resolved(number, seq, &mut cache).map_err(|e| {
                        AppendError::Replay {
                            session: source.to_owned(),
                            seq,
                            reason: Box::new(ReplayFailure::Read(e)),
                        }
                    })?);
                }
                SessionState::rebuild(&events, state.invariant_mode()).map_err(|e| {
                    AppendError::Replay {
                        session: source.to_owned(),
                        seq: 0,
                        reason: Box::new(ReplayFailure::Seed(e)),
                    }
                })?
            }
        };
        // At the tail the child's projections are the parent's; at an earlier boundary they
        // are folded from the inherited prefix when first used.
        let mut child_projections = (plan.seed_length == state.next_seq())
            .then(|| core.projections.clone())
            .flatten();

        // The parent's core stays locked until the fork is staged: the fork changes the
        // parent's row (its count of children), and an append to the parent stages its row
        // without the registry's lock (see `append_locked`).
        let mut registry = self.registry_mut();
        let child = registry.next_number();
        let mut rows = registry
            .create(child, plan.header.clone(), Some((number, plan.seed_length)))
            .map_err(|_| ForkError::already_exists(&child_id))?;
        if let Some(row) = rows.iter_mut().find(|r| r.number == child) {
            set_surface(row, &child_state);
            registry.put(row.clone());
        }
        let nodes = child_state.surface().nodes();
        let mut ops: Vec<IndexOp> = nodes
            .iter()
            .enumerate()
            .map(|(i, &seq)| IndexOp::Link {
                session: child,
                seq,
                prev: if i == 0 { NO_NODE } else { nodes[i - 1] },
                next: nodes.get(i + 1).copied().unwrap_or(NO_NODE),
            })
            .collect();
        ops.push(IndexOp::State {
            session: child,
            covered: child_state.next_seq(),
            bytes: state_bytes(&child_state)?,
        });
        if let Some(p) = child_projections.as_mut() {
            ops.extend(super::projection_ops(&self.config.projections, child, p));
        }
        let record = encode(&Record::ForkSession {
            session: child,
            parent: number,
            seed_length: plan.seed_length,
            header: plan.header,
        })?;
        let lsn = committer.stage(Stage {
            records: smallvec::smallvec![(record, None)],
            ops: ops.into(),
            rows: rows.into(),
        })?;
        drop(registry);
        drop(core);
        let child_core = self.core(child);
        let mut child_core = lock(&child_core);
        child_core.checkpointed = child_state.next_seq();
        let seed = child_state.next_seq();
        child_core.state = Some(child_state);
        child_core.projections = child_projections;
        if plan.needs_end_seed {
            let marker = Event::new("session/end-seed", seed, now_ms(), "{}");
            self.append_locked(
                &child_id,
                child,
                &mut child_core,
                smallvec::smallvec![marker],
            )?;
        } else {
            self.finish(lsn, seed.saturating_sub(1))?;
        }
        drop(child_core);
        Ok(Session {
            store: self,
            id: child_id,
            number: child,
        })
    }

    /// Deletes a session. A session that forks still inherit from is hidden and its events
    /// are kept until the last such fork is deleted.
    pub fn delete_session(&self, id: &str) -> Result<Receipt, AppendError> {
        self.delete_sessions(&[id])
    }

    /// Deletes the sessions `ids` as one operation: after a crash at any byte every delete
    /// is in the log, or none (as a batch of appends). Refused with
    /// [`AppendError::NoSuchSession`], nothing written, when an id names no live session.
    pub fn delete_sessions(&self, ids: &[&str]) -> Result<Receipt, AppendError> {
        self.delete_all(ids, |_, _| Ok::<(), AppendError>(()))
    }

    /// Deletes `ids` in one staged operation; `check` sees the registry and the sessions'
    /// numbers under the registry lock first, and may refuse (nothing written).
    pub(super) fn delete_all<E: From<AppendError>>(
        &self,
        ids: &[&str],
        check: impl FnOnce(&Registry, &BTreeMap<u64, String>) -> Result<(), E>,
    ) -> Result<Receipt, E> {
        let committer = self.committer()?;
        let mut numbers = BTreeMap::new();
        for id in ids {
            let n = self
                .number_of(id)
                .ok_or_else(|| AppendError::NoSuchSession((*id).to_owned()))?;
            numbers.insert(n, (*id).to_owned());
        }
        // The live sessions a delete may change the row of: each deleted one, and its live
        // ancestors (the count of children of the parent of a fork it purges). Their cores are
        // held until the delete is staged, as an append to them stages its row without the
        // registry's lock (see `append_locked`); an ancestor's link never changes.
        let mut locked: BTreeSet<u64> = numbers.keys().copied().collect();
        {
            let registry = self.registry();
            for &n in numbers.keys() {
                let mut parent = registry.get(n).map_or(0, |r| r.parent);
                while parent != 0 {
                    let Some(row) = registry.get(parent) else {
                        break;
                    };
                    if !row.is_deleted() {
                        locked.insert(parent);
                    }
                    parent = row.parent;
                }
            }
        }
        // Cores in number order (as every multi-session operation takes them).
        let cores: Vec<_> = locked.iter().map(|n| self.core(*n)).collect();
        let _cores: Vec<_> = cores.iter().map(|c| lock(c)).collect();
        let mut registry = self.registry_mut();
        check(&registry, &numbers)?;
        let mut records = Vec::with_capacity(numbers.len());
        let mut ops = Vec::new();
        let mut touched = BTreeSet::new();
        for (&n, id) in &numbers {
            records.push((encode(&Record::DeleteSession { session: n })?, None));
            let (o, rows) = registry
                .delete(n)
                .map_err(|_| AppendError::NoSuchSession(id.clone()))?;
            ops.extend(o);
            touched.extend(rows.iter().map(|r| r.number));
        }
        let rows = touched
            .iter()
            .filter_map(|n| registry.get(*n).cloned())
            .collect();
        let lsn = committer.stage(Stage {
            records: records.into(),
            ops: ops.into(),
            rows,
        })?;
        drop(registry);
        for n in numbers.keys() {
            lock(&self.cores).remove(n);
        }
        let receipt = self.finish(lsn, 0)?;
        self.note_deletion();
        Ok(receipt)
    }

    /// dsh's store id minting: `session-<n>`, the first n from 1 not taken.
    fn mint_id(&self) -> String {
        (1u64..)
            .map(|n| format!("session-{n}"))
            .find(|id| self.number_of(id).is_none())
            .unwrap_or_else(|| "session-0".into())
    }
}

impl<'s> Session<'s> {
    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The store.
    pub fn store(&self) -> &'s Store {
        self.store
    }

    /// Appends one event at the session's next seq, stamped with the wall clock: a typed
    /// event of [`crate::typed`], a [`Raw`](crate::typed::Raw) event (any type, `data` as JSON
    /// text), or an [`Event`] stored verbatim (its seq must be the session's next). The event
    /// passes every session rule (envelope, lossless JSON, surface, invariants); on any error
    /// nothing is written. Returns the receipt (with the event's seq).
    pub fn append(&self, event: impl TypedEvent) -> Result<Receipt, AppendError> {
        self.append_events([event], false)
    }

    /// Appends events as one atomic batch at the session's next seqs, all stamped with the
    /// wall clock: all are written or none (one operation; recovery keeps it whole or drops
    /// it), and the first starts a dsh flush batch. Returns the receipt of the last event.
    /// Mix event types with `&dyn TypedEvent` items.
    pub fn append_batch<E: TypedEvent>(
        &self,
        events: impl IntoIterator<Item = E>,
    ) -> Result<Receipt, AppendError> {
        self.append_events(events, true)
    }

    /// Builds `events` at the next seqs and appends them as one operation; `batch` marks the
    /// first as the start of a dsh flush batch.
    fn append_events<E: TypedEvent>(
        &self,
        events: impl IntoIterator<Item = E>,
        batch: bool,
    ) -> Result<Receipt, AppendError> {
        let time = now_ms();
        let core = self.store.core(self.number);
        let mut core = lock(&core);
        self.store.ensure_state(self.number, &mut core)?;
        // A verbatim session has no state: its next seq is its row's.
        let first = match core.state.as_ref() {
            Some(state) => state.next_seq(),
            None => self.len(),
        };
        let mut events: super::commit::One<Event> = (first..)
            .zip(events)
            .map(|(seq, e)| e.to_event(seq, time))
            .collect();
        if let (true, Some(first)) = (batch, events.first_mut()) {
            first.layout.batch_start = true;
        }
        self.store
            .append_locked(&self.id, self.number, &mut core, events)
    }

    /// Number of events (inherited ones included).
    pub fn len(&self) -> Seq {
        self.store.len(&self.id).unwrap_or(0)
    }

    /// True when the session has no events.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The header.
    pub fn header(&self) -> Option<SessionHeader> {
        self.store.header(&self.id)
    }

    /// One event.
    pub fn get(&self, seq: Seq) -> Result<Option<Event>, ReadError> {
        self.store.get(&self.id, seq)
    }

    /// Events in `range`, in order.
    pub fn events(&self, range: std::ops::Range<Seq>) -> Result<super::Events<'s>, ReadError> {
        self.store.events(&self.id, range)
    }

    /// The surface: model-visible node seqs in order.
    pub fn surface(&self) -> Result<Vec<Seq>, ReadError> {
        self.store.surface(&self.id)
    }

    /// dsh's `deriveMessages()`.
    pub fn messages(&self) -> Result<Vec<DerivedMessage>, ReadError> {
        self.store.messages(&self.id)
    }

    /// The replace generation.
    pub fn replace_generation(&self) -> Result<u64, ReadError> {
        self.store.replace_generation(&self.id)
    }
}

/// A lookup that remembers the first read failure it passed on.
struct ReadFailures<'a> {
    inner: StoreLookup<'a>,
    first: std::cell::RefCell<Option<crate::session::LookupError>>,
}

impl crate::session::EventLookup for ReadFailures<'_> {
    fn event_at(
        &self,
        seq: crate::event::Seq,
    ) -> Result<Option<std::borrow::Cow<'_, crate::event::Event>>, crate::session::LookupError>
    {
        let result = self.inner.event_at(seq);
        if let Err(e) = &result
            && let Ok(mut slot) = self.first.try_borrow_mut()
            && slot.is_none()
        {
            *slot = Some(e.clone());
        }
        result
    }
}
