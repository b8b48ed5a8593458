//! `assistant/chunk`: streamed chunks.

use super::TypedEvent;
use super::values::{CallId, ContentBlock, LlmFailure, RawJson, TokenUsage};
use super::write::{Obj, turn_step};
use crate::store::Intent;

// ---------------------------------------------------------------------------------------------
// Stream chunks

/// The kind of block a `block-start` chunk opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockType {
    /// `"text"`.
    Text,
    /// `"reasoning"`.
    Reasoning,
    /// `"tool-call"`.
    ToolCall,
}

impl BlockType {
    fn as_str(self) -> &'static str {
        match self {
            BlockType::Text => "text",
            BlockType::Reasoning => "reasoning",
            BlockType::ToolCall => "tool-call",
        }
    }
}

/// Why a stream finished (dsh's `FinishReason`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// `{kind:"stop"}`.
    Stop,
    /// `{kind:"tool-calls"}`.
    ToolCalls,
    /// `{kind:"max-tokens"}`.
    MaxTokens,
    /// `{kind:"aborted", failure}`.
    Aborted(LlmFailure),
    /// `{kind:"error", failure}`.
    Error(LlmFailure),
}

impl FinishReason {
    fn to_json(&self) -> String {
        let kind = |k: &str| Obj::new().str("kind", k).done();
        let failed = |k: &str, f: &LlmFailure| {
            Obj::new()
                .str("kind", k)
                .raw("failure", &f.to_json())
                .done()
        };
        match self {
            FinishReason::Stop => kind("stop"),
            FinishReason::ToolCalls => kind("tool-calls"),
            FinishReason::MaxTokens => kind("max-tokens"),
            FinishReason::Aborted(f) => failed("aborted", f),
            FinishReason::Error(f) => failed("error", f),
        }
    }
}

/// One streamed chunk (dsh's `StreamChunk`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StreamChunk {
    /// `{type:"block-start", index, blockType}`.
    BlockStart {
        /// Block index.
        index: u32,
        /// Kind of block.
        block_type: BlockType,
    },
    /// `{type:"text-delta", index, text}`.
    TextDelta {
        /// Block index.
        index: u32,
        /// The text piece.
        text: String,
    },
    /// `{type:"reasoning-delta", index, text}`.
    ReasoningDelta {
        /// Block index.
        index: u32,
        /// The text piece.
        text: String,
    },
    /// `{type:"tool-call-delta", index, id, name?, argumentsDelta}`.
    ToolCallDelta {
        /// Block index.
        index: u32,
        /// The call id.
        id: CallId,
        /// The tool name (usually on the first delta only).
        name: Option<String>,
        /// The arguments text piece.
        arguments_delta: String,
    },
    /// `{type:"block-end", index, block}`.
    BlockEnd {
        /// Block index.
        index: u32,
        /// The complete block.
        block: ContentBlock,
    },
    /// `{type:"usage", usage}`.
    Usage(TokenUsage),
    /// `{type:"finish", reason, replayState?}`.
    Finish {
        /// Why the stream finished.
        reason: FinishReason,
        /// The provider's `replayState` (`{response, blocks?}`), omitted when `None`.
        replay_state: Option<RawJson>,
    },
}

impl StreamChunk {
    /// The chunk's JSON text.
    pub fn to_json(&self) -> String {
        let head = |t: &str, index: u32| Obj::new().str("type", t).uint("index", u64::from(index));
        match self {
            StreamChunk::BlockStart { index, block_type } => head("block-start", *index)
                .str("blockType", block_type.as_str())
                .done(),
            StreamChunk::TextDelta { index, text } => {
                head("text-delta", *index).str("text", text).done()
            }
            StreamChunk::ReasoningDelta { index, text } => {
                head("reasoning-delta", *index).str("text", text).done()
            }
            StreamChunk::ToolCallDelta {
                index,
                id,
                name,
                arguments_delta,
            } => head("tool-call-delta", *index)
                .str("id", id.as_str())
                .opt_str("name", name.as_deref())
                .str("argumentsDelta", arguments_delta)
                .done(),
            StreamChunk::BlockEnd { index, block } => head("block-end", *index)
                .raw("block", &block.to_json())
                .done(),
            StreamChunk::Usage(u) => Obj::new()
                .str("type", "usage")
                .raw("usage", &u.to_json())
                .done(),
            StreamChunk::Finish {
                reason,
                replay_state,
            } => Obj::new()
                .str("type", "finish")
                .raw("reason", &reason.to_json())
                .opt_raw("replayState", replay_state.as_ref().map(RawJson::as_str))
                .done(),
        }
    }
}

/// `assistant/chunk` `{turn, step, chunk}`: one raw stream chunk (log-only, never derived).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AssistantChunk {
    /// The open turn.
    pub turn: u32,
    /// The open step.
    pub step: u32,
    /// The chunk.
    pub chunk: StreamChunk,
}

impl AssistantChunk {
    /// A chunk of `turn`/`step`.
    pub fn new(turn: u32, step: u32, chunk: StreamChunk) -> Self {
        AssistantChunk { turn, step, chunk }
    }

    /// A `text-delta` chunk.
    pub fn text_delta(turn: u32, step: u32, index: u32, text: impl Into<String>) -> Self {
        let text = text.into();
        AssistantChunk::new(turn, step, StreamChunk::TextDelta { index, text })
    }
}

impl TypedEvent for AssistantChunk {
    fn kind(&self) -> &str {
        "assistant/chunk"
    }
    fn data_json(&self) -> String {
        turn_step(self.turn, self.step)
            .raw("chunk", &self.chunk.to_json())
            .done()
    }
    fn intent(&self) -> Intent {
        Intent::none()
    }
}
