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
//! The raw path ([`Raw`], with `data` as JSON text) stays for every other event type.
//!
//! ```
//! use sessionlog::{Config, SessionHeader, Store};
//! use sessionlog::typed::*;
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path(), Config::default())?;
//! let s = store.create(SessionHeader::new("s1", 1_767_225_600_000))?;
//! let model = ModelSource::new("deepseek", "deepseek-chat")?;
//! s.append(TurnStart::new(1))?;
//! s.append(StepStart::new(1, 1))?;
//! s.append(UserMessage::text("hi").with_id(MessageId::new("u1")?))?;
//! s.append(AssistantMessage::new(1, 1, model).text("hello").with_id(MessageId::new("a1")?))?;
//! s.append(StepEnd::new(1, 1))?;
//! s.append(TurnEnd::completed(1))?;
//! assert_eq!(s.messages()?.len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::event::{Event, Seq};
use crate::json::JsonError;
use crate::store::Intent;

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
/// to append them with [`Session::append`](crate::Session::append).
pub trait TypedEvent {
    /// The event type (`type`), e.g. `"user/message"`.
    fn kind(&self) -> &str;
    /// The `data` JSON text, as dsh's `JSON.stringify` writes it.
    fn data_json(&self) -> String;
    /// The surface metadata (`surfaceOp`, `sourceEventSeqs`).
    fn intent(&self) -> Intent;

    /// The event at `seq` and `time` (ms), as [`Session::append`](crate::Session::append)
    /// stores it.
    fn to_event(&self, seq: Seq, time: i64) -> Event {
        let intent = self.intent();
        let mut event = Event::new(self.kind(), seq, time, self.data_json());
        event.surface_op = intent.surface_op;
        event.source_event_seqs = intent.source_event_seqs;
        event
    }

    /// This event stamped with `time` (ms since the Unix epoch) instead of the wall clock.
    fn at(self, time: i64) -> At<Self>
    where
        Self: Sized,
    {
        At { event: self, time }
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

/// A typed event with an explicit time (see [`TypedEvent::at`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct At<E> {
    event: E,
    time: i64,
}

impl<E: TypedEvent> TypedEvent for At<E> {
    fn kind(&self) -> &str {
        self.event.kind()
    }
    fn data_json(&self) -> String {
        self.event.data_json()
    }
    fn intent(&self) -> Intent {
        self.event.intent()
    }
    fn to_event(&self, seq: Seq, _time: i64) -> Event {
        self.event.to_event(seq, self.time)
    }
}

/// An event of any type, with `data` given as JSON text: the raw path for event types this
/// module has no builder for (plugins, dsh's newer kinds). The engine validates it like any
/// append (lossless JSON, envelope, surface, invariants).
///
/// ```
/// use sessionlog::typed::Raw;
/// use sessionlog::{Config, Intent, SessionHeader, Store};
///
/// let dir = tempfile::tempdir()?;
/// let store = Store::open(dir.path(), Config::default())?;
/// let s = store.create(SessionHeader::new("s1", 1_767_225_600_000))?;
/// let receipt = s.append(Raw::new("plugin/note", r#"{"text":"hi"}"#, Intent::none()))?;
/// assert_eq!(receipt.seq, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raw {
    kind: String,
    data: String,
    intent: Intent,
    time: Option<i64>,
}

impl Raw {
    /// An event of type `kind` with `data` (JSON text) joining the surface per `intent`.
    pub fn new(kind: impl Into<String>, data: impl Into<String>, intent: Intent) -> Raw {
        Raw {
            kind: kind.into(),
            data: data.into(),
            intent,
            time: None,
        }
    }

    /// Stamps the event with `time` (ms since the Unix epoch) instead of the wall clock.
    pub fn at(mut self, time: i64) -> Raw {
        self.time = Some(time);
        self
    }
}

impl TypedEvent for Raw {
    fn kind(&self) -> &str {
        &self.kind
    }
    fn data_json(&self) -> String {
        self.data.clone()
    }
    fn intent(&self) -> Intent {
        self.intent.clone()
    }
    fn to_event(&self, seq: Seq, time: i64) -> Event {
        let mut event = Event::new(&self.kind, seq, self.time.unwrap_or(time), &self.data);
        event.surface_op = self.intent.surface_op;
        event.source_event_seqs = self.intent.source_event_seqs.clone();
        event
    }
}

/// An [`Event`] appends verbatim: its own seq (which must be the session's next), time,
/// surface metadata and layout, as dsh's backends store what the coordinator built.
impl TypedEvent for Event {
    fn kind(&self) -> &str {
        &self.kind
    }
    fn data_json(&self) -> String {
        self.data.clone()
    }
    fn intent(&self) -> Intent {
        Intent {
            surface_op: self.surface_op,
            source_event_seqs: self.source_event_seqs.clone(),
        }
    }
    fn to_event(&self, _seq: Seq, _time: i64) -> Event {
        self.clone()
    }
}
