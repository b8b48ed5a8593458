//! Turn and step boundaries, user and assistant messages.

use super::TypedEvent;
use super::values::{
    CallId, ContentBlock, LlmFailure, MessageId, ModelSource, TokenUsage, UserSource,
};
use super::write::{Obj, blocks_json, turn_step};
use crate::event::Seq;
use crate::store::Intent;

// ---------------------------------------------------------------------------------------------
// Turn and step boundaries

/// `turn/start` `{turn}`: opens turn `turn` (1, 2, ... per session).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TurnStart {
    /// The turn number.
    pub turn: u32,
}

impl TurnStart {
    /// Opens `turn`.
    pub fn new(turn: u32) -> Self {
        TurnStart { turn }
    }
}

impl TypedEvent for TurnStart {
    fn kind(&self) -> &str {
        "turn/start"
    }
    fn data_json(&self) -> String {
        Obj::new().uint("turn", u64::from(self.turn)).done()
    }
    fn intent(&self) -> Intent {
        Intent::none()
    }
}

/// Why a run was aborted (dsh's abort `Cause`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AbortCause {
    /// `{kind:"user"}`.
    User,
    /// `{kind:"parent"}`.
    Parent,
    /// `{kind:"hook", reason}`.
    Hook(String),
    /// `{kind:"disposed"}`.
    Disposed,
    /// `{kind:"legacy"}`.
    Legacy,
}

impl AbortCause {
    fn to_json(&self) -> String {
        let kind = |k: &str| Obj::new().str("kind", k).done();
        match self {
            AbortCause::User => kind("user"),
            AbortCause::Parent => kind("parent"),
            AbortCause::Hook(r) => Obj::new().str("kind", "hook").str("reason", r).done(),
            AbortCause::Disposed => kind("disposed"),
            AbortCause::Legacy => kind("legacy"),
        }
    }
}

/// Why a turn ended (dsh's `TurnEndReason`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TurnEndReason {
    /// `{kind:"completed"}`.
    Completed,
    /// `{kind:"aborted", reason}`.
    Aborted(AbortCause),
    /// `{kind:"blocked"}`.
    Blocked,
    /// `{kind:"error", error}`.
    Error(LlmFailure),
    /// `{kind:"max-tokens"}`.
    MaxTokens,
    /// `{kind:"interrupted"}` (what crash repair writes).
    Interrupted,
}

impl TurnEndReason {
    fn to_json(&self) -> String {
        let kind = |k: &str| Obj::new().str("kind", k).done();
        match self {
            TurnEndReason::Completed => kind("completed"),
            TurnEndReason::Aborted(c) => Obj::new()
                .str("kind", "aborted")
                .raw("reason", &c.to_json())
                .done(),
            TurnEndReason::Blocked => kind("blocked"),
            TurnEndReason::Error(f) => Obj::new()
                .str("kind", "error")
                .raw("error", &f.to_json())
                .done(),
            TurnEndReason::MaxTokens => kind("max-tokens"),
            TurnEndReason::Interrupted => kind("interrupted"),
        }
    }
}

/// `turn/end` `{turn, reason}`: closes the open turn.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TurnEnd {
    /// The turn number.
    pub turn: u32,
    /// Why it ended.
    pub reason: TurnEndReason,
}

impl TurnEnd {
    /// Closes `turn` with `reason`.
    pub fn new(turn: u32, reason: TurnEndReason) -> Self {
        TurnEnd { turn, reason }
    }

    /// Closes `turn` as completed.
    pub fn completed(turn: u32) -> Self {
        TurnEnd::new(turn, TurnEndReason::Completed)
    }
}

impl TypedEvent for TurnEnd {
    fn kind(&self) -> &str {
        "turn/end"
    }
    fn data_json(&self) -> String {
        Obj::new()
            .uint("turn", u64::from(self.turn))
            .raw("reason", &self.reason.to_json())
            .done()
    }
    fn intent(&self) -> Intent {
        Intent::none()
    }
}

/// `step/start` `{turn, step}`: opens step `step` (1, 2, ... per turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StepStart {
    /// The open turn.
    pub turn: u32,
    /// The step number.
    pub step: u32,
}

impl StepStart {
    /// Opens `step` of `turn`.
    pub fn new(turn: u32, step: u32) -> Self {
        StepStart { turn, step }
    }
}

/// `step/end` `{turn, step}`: closes the open step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StepEnd {
    /// The open turn.
    pub turn: u32,
    /// The open step.
    pub step: u32,
}

impl StepEnd {
    /// Closes `step` of `turn`.
    pub fn new(turn: u32, step: u32) -> Self {
        StepEnd { turn, step }
    }
}

impl TypedEvent for StepStart {
    fn kind(&self) -> &str {
        "step/start"
    }
    fn data_json(&self) -> String {
        turn_step(self.turn, self.step).done()
    }
    fn intent(&self) -> Intent {
        Intent::none()
    }
}

impl TypedEvent for StepEnd {
    fn kind(&self) -> &str {
        "step/end"
    }
    fn data_json(&self) -> String {
        turn_step(self.turn, self.step).done()
    }
    fn intent(&self) -> Intent {
        Intent::none()
    }
}

// ---------------------------------------------------------------------------------------------
// Messages

/// `user/message`: a user-role message appended to the surface (`data` is the message).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserMessage {
    id: MessageId,
    content: Vec<ContentBlock>,
    source: UserSource,
}

impl UserMessage {
    /// A message from the human with one text block and a freshly minted id.
    pub fn text(text: impl Into<String>) -> Self {
        UserMessage::new(vec![ContentBlock::text(text)])
    }

    /// A message from the human with `content` and a freshly minted id.
    pub fn new(content: Vec<ContentBlock>) -> Self {
        UserMessage {
            id: MessageId::mint(),
            content,
            source: UserSource::User,
        }
    }

    /// Sets the id.
    pub fn with_id(mut self, id: MessageId) -> Self {
        self.id = id;
        self
    }

    /// Sets the source (e.g. a plugin injecting context).
    pub fn with_source(mut self, source: UserSource) -> Self {
        self.source = source;
        self
    }

    /// Adds a content block.
    pub fn block(mut self, block: ContentBlock) -> Self {
        self.content.push(block);
        self
    }

    /// The id.
    pub fn id(&self) -> &MessageId {
        &self.id
    }

    /// The message JSON text (what `messages()` derives from it).
    pub fn message_json(&self) -> String {
        Obj::new()
            .str("id", self.id.as_str())
            .str("role", "user")
            .raw("content", &blocks_json(&self.content))
            .raw("source", &self.source.to_json())
            .done()
    }
}

impl TypedEvent for UserMessage {
    fn kind(&self) -> &str {
        "user/message"
    }
    fn data_json(&self) -> String {
        self.message_json()
    }
    fn intent(&self) -> Intent {
        Intent::append()
    }
}

/// `assistant/message` `{turn, step, message, usage?, interrupted?}`: the model's message for
/// a step, appended to the surface. An empty content list is legal (a step that only reports
/// usage); it stays on the surface but derives no message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AssistantMessage {
    turn: u32,
    step: u32,
    id: MessageId,
    content: Vec<ContentBlock>,
    source: ModelSource,
    usage: Option<TokenUsage>,
    interrupted: bool,
    chunks: Option<Vec<Seq>>,
}

impl AssistantMessage {
    /// An empty message of `turn`/`step` from `source`, with a freshly minted id.
    pub fn new(turn: u32, step: u32, source: ModelSource) -> Self {
        AssistantMessage {
            turn,
            step,
            id: MessageId::mint(),
            content: Vec::new(),
            source,
            usage: None,
            interrupted: false,
            chunks: None,
        }
    }

    /// Sets the id.
    pub fn with_id(mut self, id: MessageId) -> Self {
        self.id = id;
        self
    }

    /// Adds a text block.
    pub fn text(self, text: impl Into<String>) -> Self {
        self.block(ContentBlock::text(text))
    }

    /// Adds a reasoning block.
    pub fn reasoning(self, text: impl Into<String>) -> Self {
        self.block(ContentBlock::reasoning(text))
    }

    /// Adds a tool-call block (`arguments`: the model's raw JSON text).
    pub fn tool_call(
        self,
        id: CallId,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        self.block(ContentBlock::tool_call(id, name, arguments))
    }

    /// Adds a content block.
    pub fn block(mut self, block: ContentBlock) -> Self {
        self.content.push(block);
        self
    }

    /// Sets the step's `usage`.
    pub fn usage(mut self, usage: TokenUsage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Marks the message as the delivered prefix of a cancelled stream (`interrupted: true`).
    pub fn interrupted(mut self) -> Self {
        self.interrupted = true;
        self
    }

    /// Cites the `assistant/chunk` events this message was assembled from
    /// (`sourceEventSeqs`; an empty list means a known-empty stream).
    pub fn from_chunks(mut self, seqs: Vec<Seq>) -> Self {
        self.chunks = Some(seqs);
        self
    }

    /// The id.
    pub fn id(&self) -> &MessageId {
        &self.id
    }

    /// The message JSON text (what `messages()` derives from it when content is non-empty).
    pub fn message_json(&self) -> String {
        Obj::new()
            .str("id", self.id.as_str())
            .str("role", "assistant")
            .raw("content", &blocks_json(&self.content))
            .raw("source", &self.source.to_json())
            .done()
    }
}

impl TypedEvent for AssistantMessage {
    fn kind(&self) -> &str {
        "assistant/message"
    }
    fn data_json(&self) -> String {
        let o = turn_step(self.turn, self.step)
            .raw("message", &self.message_json())
            .opt_raw("usage", self.usage.map(|u| u.to_json()).as_deref());
        if self.interrupted {
            o.bool("interrupted", true).done()
        } else {
            o.done()
        }
    }
    fn intent(&self) -> Intent {
        match &self.chunks {
            Some(seqs) => Intent::append().sources(seqs.clone()),
            None => Intent::append(),
        }
    }
}
