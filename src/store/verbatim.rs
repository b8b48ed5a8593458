//! Verbatim sessions: the events a caller hands over, stored exactly as given, with only
//! the checks dsh's own storage backends make (seq order, a matching start seq, the
//! envelope's numbers, lossless JSON `data`, the size limits). No session semantics: no
//! surface or turn rules at append, no surface table, no state or projection checkpoints.
//! Reads that need the surface (surface, messages, replace generation) load the whole
//! session the way dsh's loader does, in memory, and report what that load refuses.

use super::commit::Stage;
use crate::error::{AppendError, ReadError};
use crate::event::{Event, SessionHeader};
use crate::log::record::Record;
use crate::session::InvariantMode;
use crate::session::fork::{ForkError, ForkErrorCode};
use std::sync::Arc;

use super::*;

impl Store {
    /// Creates a **verbatim** session with its first events as one operation (after a crash
    /// at any byte the session is absent or present with all of `events`). A verbatim
    /// session stores events exactly as given and checks only what dsh's storage backends
    /// check: seqs `0, 1, ...` in order, `time` a safe integer, `data` lossless JSON, the
    /// size limits. Session semantics (surface and turn rules, legacy shapes) are left to
    /// the reader: [`Store::messages`] and [`Store::surface`] load the session as dsh does and
    /// report what that load refuses. Later appends ([`Session::append_batch`] with
    /// [`Event`]s) keep the same rules. For dsh's storage-backend interface (the Node
    /// binding's `dshBackend`), whose coordinator validates on load.
    ///
    /// ```
    /// use sessionlog::{Config, Event, SessionHeader, Store};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path(), Config::default())?;
    /// // A `user/message` without its `surfaceOp` would be refused by a checked session.
    /// let legacy = Event::new("user/message", 0, 5, r#"{"message":{"role":"user"}}"#);
    /// let (s, _) = store.create_verbatim(SessionHeader::new("v1", 5), vec![legacy.clone()])?;
    /// assert!(store.session_info("v1").unwrap().verbatim);
    /// let stored: Vec<Event> = s.events(0..1)?.collect::<Result<_, _>>()?;
    /// assert_eq!(stored, vec![legacy]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_verbatim(
        &self,
        header: SessionHeader,
        events: Vec<Event>,
    ) -> Result<(Session<'_>, Receipt), AppendError> {
        let committer = self.committer()?;
        validate_header(&header)?;
        let id = header.id.clone();
        for (seq, event) in events.iter().enumerate() {
            self.validate_event(&id, event, seq as Seq)?;
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
        let mut records = vec![
            (create, None),
            (encode(&Record::Verbatim { session: number })?, None),
        ];
        let events: Vec<Arc<Event>> = events.into_iter().map(Arc::new).collect();
        for e in &events {
            let bytes = self.encode_event_checked(number, e)?;
            records.push((bytes, Some((number, e.clone()))));
        }
        registry
            .create(number, header, None)
            .map_err(|_| AppendError::SessionExists(id.clone()))?;
        let registry_error = |seq: Seq, reason| AppendError::Registry {
            session: id.clone(),
            seq,
            reason,
        };
        registry
            .mark_verbatim(number)
            .map_err(|e| registry_error(0, e))?;
        for e in &events {
            registry
                .event(number, e.seq, e.time, e.data.len())
                .map_err(|reason| registry_error(e.seq, reason))?;
        }
        let row = registry
            .get(number)
            .cloned()
            .ok_or_else(|| AppendError::NoSuchSession(id.clone()))?;
        let lsn = committer.stage(Stage {
            records: records.into(),
            ops: Default::default(),
            rows: smallvec::smallvec![row],
        })?;
        drop(registry);
        self.publish(&id, &events);
        let receipt = self.finish(lsn, (events.len() as Seq).saturating_sub(1))?;
        let session = self
            .session(&id)
            .map_err(|_| AppendError::NoSuchSession(id))?;
        Ok((session, receipt))
    }

    /// Forks a **verbatim** session: the child (verbatim too) inherits the parent's first
    /// `seed_length` events (zero-copy, read through the parent; any length from 0 to the
    /// parent's event count, since no turn rules apply) and gets `child` as its header
    /// verbatim (dsh's coordinator writes `parentSession` and `seedLength` itself). One
    /// operation: after a crash the child is absent or whole. A checked session is forked with
    /// [`Store::fork`].
    pub fn fork_verbatim(
        &self,
        source: &str,
        child: SessionHeader,
        seed_length: Seq,
    ) -> Result<Session<'_>, ForkFailure> {
        let committer = self.committer()?;
        validate_header(&child)?;
        let child_id = child.id.clone();
        let mut registry = self.registry_mut();
        if registry.by_id(&child_id).is_some() {
            return Err(ForkError::already_exists(&child_id).into());
        }
        let Some(parent) = registry.by_id(source).cloned() else {
            return Err(ForkError::not_found(source).into());
        };
        if !parent.is_verbatim() {
            return Err(ForkError {
                code: ForkErrorCode::InvalidBoundary,
                message: format!(
                    "session \"{source}\" is not verbatim: fork it with Store::fork, which checks the turn boundary"
                ),
            }
            .into());
        }
        if seed_length > parent.next_seq {
            return Err(ForkError {
                code: ForkErrorCode::InvalidBoundary,
                message: format!(
                    "fork boundary for session \"{source}\" is {seed_length} events, but it has only {}",
                    parent.next_seq
                ),
            }
            .into());
        }
        let number = registry.next_number();
        let record = encode(&Record::ForkSession {
            session: number,
            parent: parent.number,
            seed_length,
            header: child.clone(),
        })?;
        self.check_fits(&record, "fork record")?;
        let mark = encode(&Record::Verbatim { session: number })?;
        let mut rows = registry
            .create(number, child, Some((parent.number, seed_length)))
            .map_err(|_| ForkError::already_exists(&child_id))?;
        let row = registry
            .mark_verbatim(number)
            .map_err(|e| AppendError::Registry {
                session: child_id.clone(),
                seq: seed_length,
                reason: e,
            })?;
        rows.retain(|r| r.number != number);
        rows.push(row);
        let lsn = committer.stage(Stage {
            records: smallvec::smallvec![(record, None), (mark, None)],
            ops: Default::default(),
            rows: rows.into(),
        })?;
        drop(registry);
        self.finish(lsn, seed_length.saturating_sub(1))?;
        self.session(&child_id)
            .map_err(|_| ForkError::not_found(&child_id).into())
    }

    /// True when session `number` is verbatim.
    pub(crate) fn is_verbatim(&self, number: u64) -> bool {
        self.registry().get(number).is_some_and(|r| r.is_verbatim())
    }

    /// The append pipeline of a verbatim session (the session's core is locked): the
    /// envelope, JSON and size checks of every event first, then one staged operation.
    pub(super) fn append_verbatim_locked(
        &self,
        session: &str,
        number: u64,
        events: Vec<Event>,
    ) -> Result<Receipt, AppendError> {
        let committer = self.committer()?;
        let first = self
            .registry()
            .get(number)
            .map(|r| r.next_seq)
            .ok_or_else(|| AppendError::NoSuchSession(session.to_owned()))?;
        let mut records = Vec::with_capacity(events.len());
        for (i, event) in events.iter().enumerate() {
            self.validate_event(session, event, first + i as Seq)?;
            records.push(self.encode_event_checked(number, event)?);
        }
        let events: Vec<Arc<Event>> = events.into_iter().map(Arc::new).collect();
        let mut registry = self.registry_mut();
        // Appends to one session are serialised by its core's lock, so the row cannot have
        // moved since `first` was read; the registry checks the seqs again.
        for e in &events {
            registry
                .event(number, e.seq, e.time, e.data.len())
                .map_err(|reason| AppendError::Registry {
                    session: session.to_owned(),
                    seq: e.seq,
                    reason,
                })?;
        }
        let row = registry
            .get(number)
            .cloned()
            .ok_or_else(|| AppendError::NoSuchSession(session.to_owned()))?;
        let last_seq = row.next_seq.saturating_sub(1);
        let lsn = committer.stage(Stage {
            records: records
                .into_iter()
                .zip(events.iter())
                .map(|(bytes, e)| (bytes, Some((number, e.clone()))))
                .collect(),
            ops: Default::default(),
            rows: smallvec::smallvec![row],
        })?;
        drop(registry);
        self.publish(session, &events);
        self.finish(lsn, last_seq)
    }

    /// A verbatim session loaded as dsh's loader loads it, from all its events: its state
    /// (the surface folded) and its events with legacy shapes converted (what messages are
    /// derived from).
    pub(super) fn verbatim_view(
        &self,
        number: u64,
    ) -> Result<(crate::session::SessionState, Vec<Event>), ReadError> {
        let row = self
            .registry()
            .get(number)
            .cloned()
            .ok_or_else(|| ReadError::NoSuchSession(format!("#{number}")))?;
        let mut cache = FrameCache::default();
        let mut events = Vec::with_capacity(row.next_seq.min(1 << 20) as usize);
        for seq in 0..row.next_seq {
            events.push(self.read_resolved(number, seq, &mut cache)?);
        }
        // Replay accepts every type (unknown types are legal in a live session).
        for event in &mut events {
            if !crate::session::known::is_known_event_type(&event.kind) {
                event.ignorable = true;
            }
        }
        let loaded = crate::session::load::load_stored(
            &row.header.id,
            &row.header,
            &events,
            InvariantMode::Off,
        )
        .map_err(|e| ReadError::Verbatim {
            session: row.header.id.to_string(),
            reason: Box::new(e),
        })?;
        let converted = loaded.view.apply(&events);
        Ok((loaded.state, converted))
    }
}
