//! The lookup the session layer reads earlier events through ([`StoreLookup`]): the batch
//! being appended first, then the store, through a frame cache kept across lookups; and
//! the message of a surface node read from its decoded frame without copying the event.

use std::borrow::Cow;
use std::sync::Arc;

use super::Store;
use super::frame_cache::FrameCache;
use super::read::Found;
use crate::event::{Event, Seq};
use crate::log::envelope::EventText;
use crate::session::derive::{DeriveError, derive_event_message, derive_message_text};
use crate::session::{EventLookup, LookupError};

/// Earlier events of a session, as the semantics ask for them: the batch being appended
/// first, then the store (following fork links).
pub(crate) struct StoreLookup<'a> {
    pub(crate) store: &'a Store,
    pub(crate) number: u64,
    pub(crate) batch: &'a [Event],
    /// The last frame read, kept across lookups: a walk over the surface (resume, messages)
    /// decodes each frame once, not once per node.
    cache: std::cell::RefCell<FrameCache>,
}

impl<'a> StoreLookup<'a> {
    /// A lookup of session `number`'s events, seeing `batch` (events being appended) first.
    pub(crate) fn new(store: &'a Store, number: u64, batch: &'a [Event]) -> StoreLookup<'a> {
        StoreLookup {
            store,
            number,
            batch,
            cache: std::cell::RefCell::default(),
        }
    }
}

impl EventLookup for StoreLookup<'_> {
    fn event_at(&self, seq: Seq) -> Result<Option<Cow<'_, Event>>, LookupError> {
        match self.cache.try_borrow_mut() {
            Ok(mut cache) => self.event_at_cached(seq, &mut cache),
            // A lookup made while one is in progress (resolving a citation) reads on its own.
            Err(_) => self.event_at_cached(seq, &mut FrameCache::default()),
        }
    }

    fn message_at(&self, seq: Seq) -> Result<Option<Arc<str>>, DeriveError> {
        match self.cache.try_borrow_mut() {
            Ok(mut cache) => self.message_at_cached(seq, &mut cache),
            Err(_) => self.message_at_cached(seq, &mut FrameCache::default()),
        }
    }
}

impl StoreLookup<'_> {
    /// [`EventLookup::event_at`] reading through `cache`, so a caller walking seqs in order
    /// decodes each frame once.
    pub(crate) fn event_at_cached(
        &self,
        seq: Seq,
        cache: &mut FrameCache,
    ) -> Result<Option<Cow<'_, Event>>, LookupError> {
        if let Some(e) = self.batch.iter().find(|e| e.seq == seq) {
            return Ok(Some(Cow::Borrowed(e)));
        }
        if seq >= self.len() {
            return Ok(None);
        }
        let event = self
            .store
            .read_resolved(self.number, seq, cache)
            .map_err(|e| LookupError {
                seq,
                message: e.to_string(),
            })?;
        Ok(Some(Cow::Owned(self.as_current(event))))
    }

    /// `event` as the rules see it: older record shapes converted, as dsh's loader presents
    /// them. A message event that already names its identity is current: no parse.
    pub(crate) fn as_current(&self, event: Event) -> Event {
        if crate::session::legacy::current_message_shape(&event.kind, &event.data) {
            return event;
        }
        let id = self.store.id_of(self.number);
        let target_id = |target: Seq| -> Option<String> {
            let e = self.event_at(target).ok()??;
            let path: &[&str] = if e.kind == "user/message" {
                &["id"]
            } else {
                &["message", "id"]
            };
            crate::json::raw_member(&e.data, path)
                .ok()
                .flatten()
                .map(str::to_owned)
        };
        match crate::session::legacy::convert_event(&id, &event, &target_id) {
            Ok(Some(converted)) => converted,
            _ => event,
        }
    }

    /// [`EventLookup::message_at`] reading through `cache`. A message event of the current
    /// shape in a lean record is projected from its text in the decoded frame: the message
    /// is copied once, out of the frame, into the shared text. Anything else (an event being
    /// appended, one not yet in a frame, an older record or shape) is read as an event.
    pub(crate) fn message_at_cached(
        &self,
        seq: Seq,
        cache: &mut FrameCache,
    ) -> Result<Option<Arc<str>>, DeriveError> {
        let in_batch = self.batch.iter().any(|e| e.seq == seq);
        if !in_batch && seq < self.len() {
            let mut project = |t: EventText<'_>| {
                crate::session::legacy::current_message_shape(t.kind, t.data)
                    .then(|| derive_message_text(t.kind, t.seq, t.data).map(|m| m.map(Arc::from)))
            };
            let found = self
                .store
                .read_resolved_found(self.number, seq, cache, &mut project)
                .map_err(|e| LookupError {
                    seq,
                    message: e.to_string(),
                })?;
            match found {
                Found::Text(Some(message)) => return message,
                Found::Event(event) => {
                    let event = self.as_current(event);
                    return Ok(derive_event_message(&event)?.map(Arc::from));
                }
                // An older shape: converted from the event, read again (its frame is cached).
                Found::Text(None) => {}
            }
        }
        let event = self
            .event_at_cached(seq, cache)?
            .ok_or(DeriveError::MissingNode { seq })?;
        Ok(derive_event_message(&event)?.map(Arc::from))
    }

    /// The session's length (its next seq) in the registry.
    fn len(&self) -> Seq {
        self.store
            .registry()
            .get(self.number)
            .map_or(0, |r| r.next_seq)
    }
}
