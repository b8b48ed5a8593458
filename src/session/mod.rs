//! Session semantics: surface, derived messages, invariants, crash repair, fork.
//!
//! This is dsh's session behaviour (`@monotykamary/dsh-session`) as pure, in-memory Rust over
//! [`Event`]s. Nothing here does I/O: the store keeps the log and calls
//! in.
//!
//! - [`SessionState`] is everything an append needs, kept incrementally (next seq, surface,
//!   commit orders, invariant trace, repair scan, turn marks) and serialisable with serde.
//! - Appends go [`SessionState::plan_append`] → (store writes the event) →
//!   [`SessionState::apply`]. A plan carries the [`SurfaceChange`] to persist.
//! - [`mod@derive`] projects the surface to messages ([`derive::MessageCache`] is the
//!   incremental form).
//! - [`load`] validates a stored log the way dsh's persistence load does (legacy shapes,
//!   vocabulary, envelope, surface) and builds the state; [`repair`] makes crash closers;
//!   [`fork`] plans a child session.
//!
//! # How the store drives it
//!
//! | step | call |
//! |---|---|
//! | create | [`SessionState::with_invariants`] (+ [`header::validate_header`]) |
//! | append | [`SessionState::plan_append`]`(&event, &lookup)` → write the event → [`SessionState::apply`]`(plan)`; persist [`AppendPlan::surface_change`] |
//! | import / cold load | [`load::load_stored`] / [`load::load_stored_raw`] (raw lines: [`load::parse_stored_event`]) |
//! | resume for writing | append [`SessionState::resume_events`]`(now)` (crash closers, then `session/end-seed`) |
//! | rebuild (recovery) | [`SessionState::rebuild`]`(&events, mode)` |
//! | checkpoint | [`SessionState::to_bytes`] / [`SessionState::from_bytes`] (postcard) |
//! | messages | [`derive::MessageCache::refresh`] (or [`derive::MessageCache::observe`] after an apply) |
//! | fork | [`fork::plan_fork`], then rebuild or reuse `child_state`, then the end-seed |
//! | verify | [`invariants::verify`] |
//!
//! `lookup` ([`EventLookup`]) answers "the event at seq N" with legacy shapes converted
//! ([`legacy::LegacyView::overlay`] for imported logs); it is asked only for a `tool/result`
//! rewrite's target and for surface nodes when deriving messages.
//!
//! ```
//! use sessionlog::event::{Event, SurfaceOp};
//! use sessionlog::session::{SessionState, derive::MessageCache};
//!
//! let mut log: Vec<Event> = Vec::new();
//! let mut state = SessionState::new();
//! for (kind, data, op) in [
//!     ("turn/start", r#"{"turn":1}"#, None),
//!     ("user/message", r#"{"id":"u1","role":"user","content":[],"source":{"kind":"user"}}"#, Some(SurfaceOp::Append)),
//!     ("turn/end", r#"{"turn":1,"reason":{"kind":"completed"}}"#, None),
//! ] {
//!     let mut event = Event::new(kind, state.next_seq(), 0, data);
//!     event.surface_op = op;
//!     let plan = state.plan_append(&event, &log).unwrap();
//!     log.push(event); // the store makes the event durable here
//!     state.apply(plan).unwrap();
//! }
//! assert_eq!(state.surface().nodes(), &[1]);
//! let mut cache = MessageCache::new();
//! cache.refresh(state.surface(), &log).unwrap();
//! assert_eq!(&*cache.messages()[0].json, r#"{"id":"u1","role":"user","content":[],"source":{"kind":"user"}}"#);
//! ```

pub mod derive;
pub mod error;
pub mod fork;
pub mod header;
pub mod invariants;
pub mod known;
pub mod legacy;
pub mod load;
pub mod repair;
#[cfg(feature = "internals")]
pub mod request;
pub(crate) mod shape;
pub mod state;
pub mod surface;

/// The old name of [`RuleViolation`] (it clashed with [`crate::error::AppendError`]).
#[doc(hidden)]
pub use error::RuleViolation as AppendError;
pub use error::{LookupError, RuleViolation, ShapeError, Subject, SurfaceError};
pub use invariants::InvariantMode;
pub use state::{AppendPlan, AppliedAppend, SessionState};
pub use surface::{Surface, SurfaceChange};

use crate::event::{Event, Seq};
use std::borrow::Cow;
use std::sync::Arc;

/// Read access to earlier events of the session, as the semantics see them (legacy record
/// shapes already converted, see [`legacy`]).
///
/// The session rules ask for an earlier event only to compare a `tool/result` rewrite with
/// its target and to derive messages of surface nodes; the store answers from its index.
pub trait EventLookup {
    /// The event with `seq`, or `None` when the session has no such event.
    fn event_at(&self, seq: Seq) -> Result<Option<Cow<'_, Event>>, LookupError>;

    /// The message surface node `seq` projects to ([`derive::derive_event_message`]), as
    /// shared text; `None` when its event projects to none; an error when the session has
    /// no event `seq`. The provided method copies the message out of [`Self::event_at`]'s
    /// event; a lookup that can read the text without building the event (the store, from
    /// a decoded frame) overrides it to copy the message once.
    fn message_at(&self, seq: Seq) -> Result<Option<Arc<str>>, derive::DeriveError> {
        let event = self
            .event_at(seq)?
            .ok_or(derive::DeriveError::MissingNode { seq })?;
        Ok(derive::derive_event_message(&event)?.map(Arc::from))
    }
}

impl EventLookup for [Event] {
    fn event_at(&self, seq: Seq) -> Result<Option<Cow<'_, Event>>, LookupError> {
        // Fast path: a log from seq 0 has `events[i].seq == i`; otherwise (a window) search.
        let direct = usize::try_from(seq)
            .ok()
            .and_then(|i| self.get(i))
            .filter(|e| e.seq == seq);
        let found = direct.or_else(|| {
            let first = self.first()?.seq;
            let i = usize::try_from(seq.checked_sub(first)?).ok()?;
            self.get(i).filter(|e| e.seq == seq)
        });
        Ok(found.map(Cow::Borrowed))
    }
}

impl EventLookup for &[Event] {
    fn event_at(&self, seq: Seq) -> Result<Option<Cow<'_, Event>>, LookupError> {
        (**self).event_at(seq)
    }
}

impl EventLookup for Vec<Event> {
    fn event_at(&self, seq: Seq) -> Result<Option<Cow<'_, Event>>, LookupError> {
        self.as_slice().event_at(seq)
    }
}

/// A lookup with no events (for sessions whose rules never need an earlier event).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEvents;

impl EventLookup for NoEvents {
    fn event_at(&self, _seq: Seq) -> Result<Option<Cow<'_, Event>>, LookupError> {
        Ok(None)
    }
}

/// Values of a raw (imported) event that a typed [`Event`] cannot hold. Each is reported at
/// the point of the seed rules where dsh reports it (envelope at §1.5 step 2, markers in the
/// surface rules).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawDefects {
    /// The envelope breaks §1.1 (extra key, non-string type, bad seq/time, no data,
    /// `ignorable` not `true`).
    pub envelope: Option<EnvelopeDefect>,
    /// `surfaceOp` present but malformed.
    pub surface_op: Option<SurfaceOpDefect>,
    /// `sourceEventSeqs` present but malformed.
    pub sources: Option<SourcesDefect>,
}

impl RawDefects {
    /// True when the event had no malformed marker.
    pub fn is_none(&self) -> bool {
        self.envelope.is_none() && self.surface_op.is_none() && self.sources.is_none()
    }
}

/// How a raw event envelope breaks §1.1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvelopeDefect {
    /// A key outside the seven allowed.
    ExtraKey(String),
    /// `type` is not a string.
    TypeNotString,
    /// `seq` is not a non-negative safe integer.
    BadSeq,
    /// `time` is not a safe integer.
    BadTime,
    /// `data` is absent.
    MissingData,
    /// `ignorable` present but not `true`.
    IgnorableNotTrue,
}

/// A malformed `surfaceOp` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SurfaceOpDefect {
    /// Null, a non-object, another string, or an array.
    Invalid,
    /// An object that is not exactly `{op:"replace",start,end}` with safe non-negative ints.
    InvalidReplace,
}

/// A malformed `sourceEventSeqs` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourcesDefect {
    /// Not an array.
    NotArray,
    /// An element that is not a non-negative safe integer.
    NotDense,
}
