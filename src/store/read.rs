//! Reads: events by seq (whole, or a lean record's text borrowed from its frame), ranges,
//! the surface, derived messages, listings. The frame cache is in `frame_cache.rs`, the
//! lookup the session layer reads through in `lookup.rs`.

use super::frame_cache::{RUN_BATCH, RunBatch, frame_key};
use crate::error::{IndexError, ReadError};
use crate::event::{Event, Seq, SessionHeader};
use crate::index::{NO_NODE, Run};
use crate::log::envelope::{EventText, decode_text};
use crate::log::peek::{Utf8, peek_event};
use crate::log::record::{FrameContext, Record};
use crate::session::derive::DerivedMessage;
use crate::session::{InvariantMode, SessionState};
use std::collections::HashMap;

use super::*;

impl Store {
    /// Every live session with its counters and the views of the registered projections
    /// (title, stats, ...). Reads only the in-memory registry and the index's checkpoints:
    /// after a clean close or a catch-up, no segment is opened. A verbatim session keeps no
    /// projection checkpoints, so it is listed without views (ask
    /// [`Store::projection_views`], which folds its events).
    pub fn list(&self) -> Result<Vec<Listed>, ReadError> {
        let mut out = Vec::new();
        for info in self.sessions() {
            let Some(number) = self.number_of(&info.header.id) else {
                continue;
            };
            if info.verbatim {
                out.push(Listed {
                    info,
                    views: Vec::new(),
                });
                continue;
            }
            let core = self.core(number);
            let views = {
                let core = lock(&core);
                core.projections
                    .as_ref()
                    .map(|p| self.config.projections.views(p))
            };
            let views = match views {
                Some(v) => v,
                None => {
                    let (restored, _) = self.restore_projections(number, info.event_count)?;
                    self.config.projections.views(&restored.states)
                }
            };
            out.push(Listed { info, views });
        }
        Ok(out)
    }

    /// The views of the registered projections for one session.
    pub fn projection_views(&self, session: &str) -> Result<Vec<(String, String)>, ReadError> {
        let (number, len) = self.number(session)?;
        let core = self.core(number);
        if let Some(p) = lock(&core).projections.as_ref() {
            return Ok(self.config.projections.views(p));
        }
        let (restored, _) = self.restore_projections(number, len)?;
        Ok(self.config.projections.views(&restored.states))
    }

    pub(super) fn number(&self, session: &str) -> Result<(u64, Seq), ReadError> {
        let registry = self.registry();
        let row = registry
            .by_id(session)
            .ok_or_else(|| ReadError::NoSuchSession(session.to_owned()))?;
        Ok((row.number, row.next_seq))
    }

    /// Reads one event (`None` when `seq` is past the session's end).
    pub fn get(&self, session: &str, seq: Seq) -> Result<Option<Event>, ReadError> {
        let (number, next) = self.number(session)?;
        if seq >= next {
            return Ok(None);
        }
        self.read_resolved(number, seq, &mut FrameCache::default())
            .map(Some)
    }

    /// Reads `seq` of session `number`, following fork links to the session that stores it.
    pub(crate) fn read_resolved(
        &self,
        number: u64,
        seq: Seq,
        cache: &mut FrameCache,
    ) -> Result<Event, ReadError> {
        let owner = self.registry().resolve(number, seq);
        self.read_one(owner, seq, cache)
    }

    /// [`Store::read_resolved`], handing the event's text to `text` when its record can be
    /// read as borrowed text (see [`Found`]).
    pub(crate) fn read_resolved_found<R>(
        &self,
        number: u64,
        seq: Seq,
        cache: &mut FrameCache,
        text: &mut dyn FnMut(EventText<'_>) -> R,
    ) -> Result<Found<R>, ReadError> {
        let owner = self.registry().resolve(number, seq);
        let _swap = self.segments.read_guard();
        cache.follow_generation(self.segments.generation());
        self.read_one_found(owner, seq, cache, Some(text))
    }

    pub(super) fn read_one(
        &self,
        number: u64,
        seq: Seq,
        cache: &mut FrameCache,
    ) -> Result<Event, ReadError> {
        let _swap = self.segments.read_guard();
        cache.follow_generation(self.segments.generation());
        self.read_one_once(number, seq, cache)
    }

    fn read_one_once(
        &self,
        number: u64,
        seq: Seq,
        cache: &mut FrameCache,
    ) -> Result<Event, ReadError> {
        match self.read_one_found::<std::convert::Infallible>(number, seq, cache, None)? {
            Found::Event(e) => Ok(e),
            Found::Text(never) => match never {},
        }
    }

    /// [`Store::read_one_once`], handing the event to `text` when its record can be read as
    /// borrowed text ([`Found::Text`]: a lean record in a frame), as an [`Event`] otherwise
    /// (or when `text` is `None`).
    fn read_one_found<R>(
        &self,
        number: u64,
        seq: Seq,
        cache: &mut FrameCache,
        text: Option<&mut dyn FnMut(EventText<'_>) -> R>,
    ) -> Result<Found<R>, ReadError> {
        if let Some(e) = self.committer.as_ref().and_then(|c| c.pending(number, seq)) {
            return Ok(Found::Event((*e).clone()));
        }
        let run = match self.overlay.get(&(number, seq)) {
            Some(l) => Run::single(seq, *l),
            // Runs are looked up in batches (a walk in seq order does one lookup per 256
            // runs, not one per event), answering as a lookup of `seq` would.
            None => match cache.cached_run(number, seq) {
                Some(run) => run,
                None => {
                    let to = self
                        .registry()
                        .get(number)
                        .map_or(0, |r| r.next_seq)
                        .max(seq + 1);
                    let runs = self.index.runs(number, seq, to, RUN_BATCH)?;
                    cache.runs = Some(RunBatch {
                        number,
                        from: seq,
                        to,
                        truncated: runs.len() >= RUN_BATCH,
                        runs,
                    });
                    match cache.cached_run(number, seq) {
                        Some(run) => run,
                        None => self.index.run(number, seq)?.ok_or_else(|| {
                            ReadError::Index(IndexError::Damaged {
                                table: "events",
                                detail: format!(
                                    "there is no location for session number {number} seq {seq}"
                                ),
                            })
                        })?,
                    }
                }
            },
        };
        self.read_at_found(number, seq, run, cache, text)
    }

    /// Reads event `seq` of session `number` from `run` (which holds it): decodes the run's
    /// frame (once, through `cache`) and walks its records from the run's first record, or
    /// from just past the previous event of the session read from that frame, to the record
    /// of `seq`. Reading a run in seq order decodes each of its records once.
    pub(super) fn read_at(
        &self,
        number: u64,
        seq: Seq,
        run: Run,
        cache: &mut FrameCache,
    ) -> Result<Event, ReadError> {
        match self.read_at_found::<std::convert::Infallible>(number, seq, run, cache, None)? {
            Found::Event(e) => Ok(e),
            Found::Text(never) => match never {},
        }
    }

    /// [`Store::read_at`], handing a lean record's text, borrowed from the decoded frame and
    /// checked as a full decode checks it, to `text` (when given) instead of copying it into
    /// an [`Event`].
    fn read_at_found<R>(
        &self,
        number: u64,
        seq: Seq,
        run: Run,
        cache: &mut FrameCache,
        mut text: Option<&mut dyn FnMut(EventText<'_>) -> R>,
    ) -> Result<Found<R>, ReadError> {
        let loc = run.location;
        let position = loc.position();
        let payload = cache.get(&self.segments, loc, &self.limits)?;
        let corrupt = |detail: String| ReadError::Corruption { position, detail };
        // The session's last event walked past (what an `EventNext` record continues).
        let (mut at, mut context) = match cache.cursor {
            Some((key, session, last, time, end))
                if key == frame_key(&loc) && session == number && last < seq =>
            {
                (end, FrameContext::with(number, last, time))
            }
            _ => (loc.record_offset as usize, FrameContext::new()),
        };
        loop {
            let bytes = payload.get(at..).ok_or_else(|| {
                corrupt(format!(
                    "record offset {at} is past the frame payload ({} bytes)",
                    payload.len()
                ))
            })?;
            if bytes.is_empty() {
                return Err(corrupt(format!(
                    "event seq {seq} of session number {number} is not in the frame (the index run starts at seq {} record offset {})",
                    run.first_seq, loc.record_offset
                )));
            }
            // Records before the wanted one are stepped over by their headers (no copy, no
            // UTF-8 check); the wanted one, and any record the peek cannot read, in full.
            if let Some(head) = peek_event(bytes, Utf8::Skip) {
                if head.session != number {
                    at += head.len;
                    continue;
                }
                let (s, time) = context
                    .resolved(&head)
                    .map_err(|e| corrupt(format!("record offset {at}: {e}")))?;
                if s < seq {
                    context.note(number, s, time);
                    at += head.len;
                    continue;
                }
            }
            if let Some(f) = text.as_mut()
                && Record::is_lean(bytes)
            {
                let (t, len) = decode_text(bytes, |session| context.last(session))
                    .map_err(|e| corrupt(format!("record offset {at}: {e}")))?;
                context.note(t.session, t.seq, t.time);
                let next = at + len;
                if t.session == number {
                    if t.seq == seq {
                        cache.cursor = Some((frame_key(&loc), number, seq, t.time, next));
                        return Ok(Found::Text(f(t)));
                    }
                    if t.seq > seq {
                        return Err(corrupt(format!(
                            "the record at record offset {at} is event seq {} of session number {number}, past seq {seq} (the index run starts at seq {} record offset {})",
                            t.seq, run.first_seq, loc.record_offset
                        )));
                    }
                }
                at = next;
                continue;
            }
            let (record, rest) = Record::decode_in(bytes, &mut context)
                .map_err(|e| corrupt(format!("record offset {at}: {e}")))?;
            let next = payload.len() - rest.len();
            if let Record::Event { session, event } = record
                && session == number
            {
                if event.seq == seq {
                    cache.cursor = Some((frame_key(&loc), number, seq, event.time, next));
                    return Ok(Found::Event(Event::from(event)));
                }
                if event.seq > seq {
                    return Err(corrupt(format!(
                        "the record at record offset {at} is event seq {} of session number {number}, past seq {seq} (the index run starts at seq {} record offset {})",
                        event.seq, run.first_seq, loc.record_offset
                    )));
                }
            }
            at = next;
        }
    }

    /// Reads a session's events with seq in `range`, in seq order, in bounded chunks (the whole
    /// log is never loaded).
    pub fn events(
        &self,
        session: &str,
        range: std::ops::Range<Seq>,
    ) -> Result<Events<'_>, ReadError> {
        let (number, next) = self.number(session)?;
        Ok(Events {
            store: self,
            number,
            next: range.start,
            end: range.end.min(next),
            buffered: std::collections::VecDeque::new(),
            cache: FrameCache::default(),
        })
    }

    /// Every live session with its counters, in creation order. Reads only the in-memory
    /// registry (no segment is opened).
    pub fn sessions(&self) -> Vec<SessionInfo> {
        self.settle(None);
        self.registry().live().into_iter().map(info_of).collect()
    }

    /// One live session's counters, as [`Store::sessions`] lists them (`None`: no such
    /// session). Reads only the in-memory registry.
    pub fn session_info(&self, session: &str) -> Option<SessionInfo> {
        if let Some(number) = self.number_of(session) {
            self.settle(Some(number));
        }
        self.registry().by_id(session).map(info_of)
    }

    /// The header of a session.
    pub fn header(&self, session: &str) -> Option<SessionHeader> {
        self.registry().by_id(session).map(|r| (*r.header).clone())
    }

    /// Number of events in a session.
    pub fn len(&self, session: &str) -> Option<Seq> {
        self.number(session).ok().map(|(_, n)| n)
    }

    /// The surface (model-visible node seqs, in order) of a session, walked from the index's
    /// linked list: no event is read.
    pub fn surface(&self, session: &str) -> Result<Vec<Seq>, ReadError> {
        let (number, _) = self.number(session)?;
        if self.is_verbatim(number) {
            let (state, _) = self.verbatim_view(number)?;
            return Ok(state.surface().nodes().to_vec());
        }
        self.settle(Some(number));
        let core = self.core(number);
        let core = lock(&core);
        if let Some(state) = &core.state {
            return Ok(state.surface().nodes().to_vec());
        }
        drop(core);
        self.surface_from_index(number)
    }

    pub(super) fn surface_from_index(&self, number: u64) -> Result<Vec<Seq>, ReadError> {
        let row = self
            .registry()
            .get(number)
            .cloned()
            .ok_or_else(|| ReadError::NoSuchSession(format!("#{number}")))?;
        if row.surface_covered < row.next_seq {
            // Only a read-only open after a crash gets here: fold the state in memory.
            let mut core = Core::default();
            self.load_state_read_only(number, &mut core)?;
            return Ok(core
                .state
                .map(|s| s.surface().nodes().to_vec())
                .unwrap_or_default());
        }
        let links: HashMap<Seq, (Seq, Seq)> = self
            .index
            .surface_links(number)?
            .into_iter()
            .map(|(seq, prev, next)| (seq, (prev, next)))
            .collect();
        let mut nodes = Vec::with_capacity(links.len());
        let mut at = row.surface_head;
        while at != NO_NODE {
            let Some(&(_, next)) = links.get(&at) else {
                return Err(ReadError::Index(IndexError::Damaged {
                    table: "surface",
                    detail: format!("surface node {at} of session number {number} is missing"),
                }));
            };
            nodes.push(at);
            if nodes.len() > links.len() {
                return Err(ReadError::Index(IndexError::Damaged {
                    table: "surface",
                    detail: format!("the surface list of session number {number} has a cycle"),
                }));
            }
            at = next;
        }
        Ok(nodes)
    }

    /// The session's state checkpoint `(covered seq, state)`, when there is a usable one.
    ///
    /// The checkpoint is derived data: any failure to read it from the index, to decode it (a
    /// bad length, checksum or encoding), or a `covered` seq beyond the session's log gives
    /// `None`, and the caller replays the session from seq 0 — as the projections fall back
    /// to a replay (`restore_projections`).
    pub(super) fn state_checkpoint(
        &self,
        number: u64,
        next_seq: Seq,
    ) -> Option<(Seq, SessionState)> {
        let (covered, bytes) = self.index.state(number).ok().flatten()?;
        if covered > next_seq {
            return None;
        }
        let state = SessionState::from_bytes(&bytes).ok()?;
        Some((covered, state))
    }

    pub(super) fn load_state_read_only(
        &self,
        number: u64,
        core: &mut Core,
    ) -> Result<(), ReadError> {
        let registry_row = self.registry().get(number).cloned();
        let Some(row) = registry_row else {
            return Err(ReadError::NoSuchSession(format!("#{number}")));
        };
        // A state already folded (a reader's refresh) continues from where it stopped. As in
        // `ensure_state`: an unusable checkpoint means a replay from seq 0.
        let folded = core
            .state
            .take()
            .or_else(|| lock(&self.grown).remove(&number))
            .filter(|s| s.next_seq() <= row.next_seq);
        let (covered, mut state) = match folded {
            Some(state) => (state.next_seq(), state),
            None => match self.state_checkpoint(number, row.next_seq) {
                Some(checkpoint) => checkpoint,
                None => (0, SessionState::with_invariants(InvariantMode::Off)),
            },
        };
        state.set_invariant_mode(InvariantMode::Off);
        let mut cache = FrameCache::default();
        for seq in covered..row.next_seq {
            let event = self.read_resolved(number, seq, &mut cache)?;
            let lookup = StoreLookup::new(self, number, &[]);
            state
                .append(&event, &lookup)
                .map_err(|e| ReadError::Replay {
                    seq,
                    reason: Box::new(e),
                })?;
        }
        core.state = Some(state);
        Ok(())
    }

    /// The session's messages as dsh's `deriveMessages` gives them, reading only the surface
    /// events (by offset from the index), never the whole log.
    pub fn messages(&self, session: &str) -> Result<Vec<DerivedMessage>, ReadError> {
        let (number, _) = self.number(session)?;
        if self.is_verbatim(number) {
            let (state, events) = self.verbatim_view(number)?;
            return crate::session::derive::derive_messages(state.surface().nodes(), &events)
                .map_err(derive_error);
        }
        let core = self.core(number);
        let mut core = lock(&core);
        if let Some(state) = core.state.take() {
            let lookup = StoreLookup::new(self, number, &[]);
            let result = core.messages.refresh(state.surface(), &lookup);
            core.state = Some(state);
            result.map_err(derive_error)?;
            // Clones of the cached messages share their text (no copy).
            return Ok(core.messages.messages().to_vec());
        }
        drop(core);
        let nodes = self.surface_from_index(number)?;
        let lookup = StoreLookup::new(self, number, &[]);
        crate::session::derive::derive_messages(&nodes, &lookup).map_err(derive_error)
    }

    /// The session's replace generation (number of surface replacements).
    pub fn replace_generation(&self, session: &str) -> Result<u64, ReadError> {
        let registry = self.registry();
        let row = registry
            .by_id(session)
            .ok_or_else(|| ReadError::NoSuchSession(session.to_owned()))?;
        if row.is_verbatim() {
            let number = row.number;
            drop(registry);
            let (state, _) = self.verbatim_view(number)?;
            return Ok(state.surface().replace_generation());
        }
        if row.surface_covered < row.next_seq {
            let number = row.number;
            drop(registry);
            let mut core = Core::default();
            self.load_state_read_only(number, &mut core)?;
            return Ok(core.state.map_or(0, |s| s.surface().replace_generation()));
        }
        Ok(row.replace_generation)
    }
}

pub(super) fn derive_error(e: crate::session::derive::DeriveError) -> ReadError {
    ReadError::Derive(Box::new(e))
}

/// An iterator over a session's events (see [`Store::events`]).
#[derive(Debug)]
pub struct Events<'a> {
    store: &'a Store,
    number: u64,
    next: Seq,
    end: Seq,
    buffered: std::collections::VecDeque<Run>,
    cache: FrameCache,
}

impl Iterator for Events<'_> {
    type Item = Result<Event, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.end {
            return None;
        }
        let seq = self.next;
        self.next += 1;
        // No GC repoints the index between the lookup and the frame read; runs looked up
        // before a GC installed compacted segments are looked up again.
        let _swap = self.store.segments.read_guard();
        if self
            .cache
            .follow_generation(self.store.segments.generation())
        {
            self.buffered.clear();
        }
        let owner = self.store.registry().resolve(self.number, seq);
        if owner != self.number {
            return Some(self.store.read_one_once(owner, seq, &mut self.cache));
        }
        if let Some(e) = self
            .store
            .committer
            .as_ref()
            .and_then(|c| c.pending(self.number, seq))
        {
            return Some(Ok((*e).clone()));
        }
        if let Some(l) = self.store.overlay.get(&(self.number, seq)) {
            let run = Run::single(seq, *l);
            return Some(self.store.read_at(self.number, seq, run, &mut self.cache));
        }
        // The run holding `seq` is the last one starting at or before it (as in a lookup).
        while self.buffered.front().is_some_and(|r| r.end() <= seq)
            || self.buffered.get(1).is_some_and(|r| r.first_seq <= seq)
        {
            self.buffered.pop_front();
        }
        if self.buffered.is_empty() {
            match self.store.index.runs(self.number, seq, self.end, 256) {
                Ok(v) => self.buffered.extend(v),
                Err(e) => return Some(Err(e.into())),
            }
        }
        match self.buffered.front() {
            Some(r) if r.contains(seq) => {
                let r = *r;
                Some(self.store.read_at(self.number, seq, r, &mut self.cache))
            }
            _ => Some(self.store.read_one_once(self.number, seq, &mut self.cache)),
        }
    }
}

/// An event read from the log: whole, or (a lean record read for its text) what the
/// reader's `text` callback made of its borrowed text.
pub(crate) enum Found<R> {
    Event(Event),
    Text(R),
}

fn info_of(r: &SessionRow) -> SessionInfo {
    SessionInfo {
        header: (*r.header).clone(),
        incarnation: r.number,
        event_count: r.next_seq,
        data_bytes: r.data_bytes,
        last_time: r.last_time,
        surface_len: r.surface_len,
        replace_generation: r.replace_generation,
        verbatim: r.is_verbatim(),
    }
}
