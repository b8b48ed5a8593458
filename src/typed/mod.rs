//! Typed dsh events: builders for the event kinds an agent loop writes, so that a caller
//! cannot produce an invalid shape by accident.
//!
//! Each type knows its event `type`, whether it joins the surface (its [`Intent`]) and writes
//! its `data` as the exact JSON text dsh's `JSON.stringify` would produce (dsh's key order,
//! ECMAScript number printing, `JSON.stringify` string escaping). Rules that depend only on
//! the value (non-empty ids, a tool result naming its call, a model source naming provider and
//! model, a compaction citing the nodes it replaces) are enforced when a value is built, by the
//! types ([`CallId`], [`MessageId`], [`ModelSource`]) or by a [`TypedEventError`]. Rules that
//! depend on the log (turn and step numbering, which surface nodes exist) are checked by the
//! engine when the event is appended, as for any event.
//!
//! The raw path ([`Session::append`] with JSON text) stays for every other event type.
//!
//! ```
//! use sessionlog::event::SessionHeader;
//! use sessionlog::store::{Config, Store};
//! use sessionlog::typed::*;
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path(), Config::default())?;
//! let s = store.create(SessionHeader::new("s1", 1_767_225_600_000))?;
//! let model = ModelSource::new("deepseek", "deepseek-chat")?;
//! s.append_typed(TurnStart::new(1))?;
//! s.append_typed(StepStart::new(1, 1))?;
//! s.append_typed(UserMessage::text("hi").with_id(MessageId::new("u1")?))?;
//! s.append_typed(AssistantMessage::new(1, 1, model).text("hello").with_id(MessageId::new("a1")?))?;
//! s.append_typed(StepEnd::new(1, 1))?;
//! s.append_typed(TurnEnd::completed(1))?;
//! assert_eq!(s.messages()?.len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::error::AppendError;
use crate::event::{Event, Seq};
use crate::json::JsonError;
use crate::store::{Intent, Receipt, Session, now_ms};

mod messages;
mod stream;
mod tools;
mod values;
mod write;

pub use messages::{
    AbortCause, AssistantMessage, StepEnd, StepStart, TurnEnd, TurnEndReason, TurnStart,
    UserMessage,
};
pub use stream::{AssistantChunk, BlockType, FinishReason, StreamChunk};
pub use tools::{
    Compaction, CompactionEnd, CompactionPrune, CompactionStart, CompactionSummary, SessionTitle,
    Shadowed, TitleSource, ToolCall, ToolError, ToolResult,
};
pub use values::{
    CallId, ContentBlock, ImageAttachment, LlmFailure, MessageId, ModelSource, PluginForm, RawJson,
    TokenUsage, UserSource,
};

/// Why a typed event could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TypedEventError {
    /// A field that dsh requires to be a non-empty string was empty.
    #[error("{field} must be a non-empty string (dsh refuses an empty one); pass a real value")]
    Empty {
        /// The field, in dsh's words (e.g. `message id`, `callId`).
        field: &'static str,
    },
    /// A raw JSON value is not lossless JSON text.
    #[error("{what} is not lossless JSON: {source}; pass JSON text as dsh would store it")]
    InvalidJson {
        /// What the text was for.
        what: &'static str,
        /// The parse failure.
        #[source]
        source: JsonError,
    },
    /// A raw JSON value has the wrong shape.
    #[error("{what} must be {expected}")]
    Shape {
        /// What the value was for.
        what: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// A compaction does not cite a surface node it replaces.
    #[error(
        "compaction replacing {start}..{end} must cite seq {missing} in its sources (dsh requires every shadowed node); add it"
    )]
    MissingSource {
        /// First replaced node.
        start: Seq,
        /// Last replaced node.
        end: Seq,
        /// The seq that is missing.
        missing: Seq,
    },
    /// A source seq is listed twice.
    #[error("sources list seq {seq} twice (dsh refuses duplicates); list each once")]
    DuplicateSource {
        /// The repeated seq.
        seq: Seq,
    },
}
// ---------------------------------------------------------------------------------------------
// The trait and the session extension

/// A typed event: its `type`, its `data` as JSON text, and how it joins the surface.
///
/// Implemented by every builder of this module; implement it for your own plugin event types
/// to append them with [`AppendTyped::append_typed`].
pub trait TypedEvent {
    /// The event type (`type`), e.g. `"user/message"`.
    fn kind(&self) -> &str;
    /// The `data` JSON text, as dsh's `JSON.stringify` writes it.
    fn data_json(&self) -> String;
    /// The surface metadata (`surfaceOp`, `sourceEventSeqs`).
    fn intent(&self) -> Intent;

    /// The event at `seq` and `time` (ms), for [`crate::store::Store::append_batch`] or
    /// [`Session::append_events`].
    fn to_event(&self, seq: Seq, time: i64) -> Event {
        let intent = self.intent();
        let mut event = Event::new(self.kind(), seq, time, self.data_json());
        event.surface_op = intent.surface_op;
        event.source_event_seqs = intent.source_event_seqs;
        event
    }
}

impl<T: TypedEvent + ?Sized> TypedEvent for &T {
    fn kind(&self) -> &str {
        (**self).kind()
    }
    fn data_json(&self) -> String {
        (**self).data_json()
    }
    fn intent(&self) -> Intent {
        (**self).intent()
    }
}

/// Appending typed events to a [`Session`] handle.
pub trait AppendTyped {
    /// Appends `event` stamped with the wall clock; the engine validates it like any append
    /// (envelope, shape, surface and, per configuration, turn/step invariants).
    fn append_typed(&self, event: impl TypedEvent) -> Result<(Event, Receipt), AppendError>;
    /// Like [`AppendTyped::append_typed`] with an explicit `time` (ms).
    fn append_typed_at(
        &self,
        event: impl TypedEvent,
        time: i64,
    ) -> Result<(Event, Receipt), AppendError>;
    /// Appends `events` as one atomic batch at the session's next seqs, all stamped with the
    /// wall clock: all are written or none (one frame; a run of chunks in it may be stored
    /// packed, as dsh packs a flush). Returns the receipt of the last event. If another
    /// writer appended in between, the batch is refused ([`AppendError::WrongSeq`]) and
    /// nothing is written: build it again.
    fn append_typed_batch(&self, events: &[&dyn TypedEvent]) -> Result<Receipt, AppendError>;
}

impl AppendTyped for Session<'_> {
    fn append_typed(&self, event: impl TypedEvent) -> Result<(Event, Receipt), AppendError> {
        self.append_typed_at(event, now_ms())
    }

    fn append_typed_at(
        &self,
        event: impl TypedEvent,
        time: i64,
    ) -> Result<(Event, Receipt), AppendError> {
        self.append_at(event.kind(), &event.data_json(), event.intent(), time)
    }

    fn append_typed_batch(&self, events: &[&dyn TypedEvent]) -> Result<Receipt, AppendError> {
        let first = self.len();
        let time = now_ms();
        let events = (first..)
            .zip(events)
            .map(|(seq, e)| e.to_event(seq, time))
            .collect();
        self.append_events(events)
    }
}
