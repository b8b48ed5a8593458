//! The store's internal operations, public only with the `internals` feature: appends of
//! caller-built events by session id, raw frame reads, and imports of whole stored sessions.
//! The fuzz bodies, the bench harness and the tests drive the engine through them; a library
//! user appends through [`Session::append`](super::Session::append).

use crate::error::{AppendError, LogPosition, ReadError};
use crate::event::{Event, SessionHeader};
use crate::session::InvariantMode;

use super::{ImportError, Receipt, SessionOptions, Store};

impl Store {
    /// Creates a session. Its id must be new and non-empty.
    pub fn create_session(&self, header: SessionHeader) -> Result<Receipt, AppendError> {
        self.stage_create(header, SessionOptions::default())
    }

    /// Creates a session with per-session options.
    pub fn create_session_with(
        &self,
        header: SessionHeader,
        options: SessionOptions,
    ) -> Result<Receipt, AppendError> {
        self.stage_create(header, options)
    }

    /// Appends one event to a session. `event.seq` must be the session's next seq. The
    /// event passes every session rule (envelope, lossless JSON, surface, invariants).
    pub fn append(&self, session: &str, event: Event) -> Result<Receipt, AppendError> {
        self.append_to(session, smallvec::smallvec![event])
    }

    /// Appends events to a session atomically (see [`Session::append_batch`](super::Session::append_batch)),
    /// with the seqs the caller gave them.
    pub fn append_batch(&self, session: &str, events: Vec<Event>) -> Result<Receipt, AppendError> {
        self.append_to(session, events.into())
    }

    /// Imports a whole stored session as one operation (see `interop::import`).
    pub fn import_session(
        &self,
        header: SessionHeader,
        events: Vec<Event>,
        invariants: Option<InvariantMode>,
    ) -> Result<Receipt, ImportError> {
        self.import_stored(header, events, invariants)
    }

    /// Frames read from segment files since the store was opened (resume-cost tests).
    pub fn frames_read(&self) -> u64 {
        self.segments.frames_read()
    }

    /// Reads the raw payload of the frame at `position`.
    pub fn read_frame(&self, position: LogPosition, frame_len: u32) -> Result<Vec<u8>, ReadError> {
        self.segments.read_frame(position, frame_len, &self.limits)
    }
}
