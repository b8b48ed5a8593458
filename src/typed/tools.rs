//! Tool calls and results, compaction, the session title.

use super::messages::UserMessage;
use super::values::{CallId, ContentBlock, MessageId, ModelSource, RawJson, TokenUsage};
use super::write::{Obj, array, blocks_json, seq_array, turn_step};
use super::{TypedEvent, TypedEventError};
use crate::event::Seq;
use crate::store::Intent;

// ---------------------------------------------------------------------------------------------
// Tools

/// `tool/call` `{turn, step, callId, name, arguments}`: a tool call actually started.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ToolCall {
    /// The open turn.
    pub turn: u32,
    /// The open step.
    pub step: u32,
    /// The call id (as in the assistant's tool-call block).
    pub call_id: CallId,
    /// The tool name.
    pub name: String,
    /// The raw arguments text from the model.
    pub arguments: String,
}

impl ToolCall {
    /// A started call.
    pub fn new(
        turn: u32,
        step: u32,
        call_id: CallId,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            turn,
            step,
            call_id,
            name: name.into(),
            arguments: arguments.into(),
        }
    }
}

impl TypedEvent for ToolCall {
    fn kind(&self) -> &str {
        "tool/call"
    }
    fn data_json(&self) -> String {
        turn_step(self.turn, self.step)
            .str("callId", self.call_id.as_str())
            .str("name", &self.name)
            .str("arguments", &self.arguments)
            .done()
    }
    fn intent(&self) -> Intent {
        Intent::none()
    }
}

/// The `error` of a tool result (`{name, code}`), e.g. `AbortError`/`ABORTED_BEFORE_DISPATCH`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ToolError {
    /// `name`.
    pub name: String,
    /// `code`.
    pub code: String,
}

/// `tool/result` `{turn, step, message, error?, meta?}`: a tool's result, appended to the
/// surface as a user-role message holding exactly one `tool-result` block whose
/// `toolCallId` is the message source's `callId` (both come from one [`CallId`], so they
/// cannot differ).
///
/// A result always names its call; a bare string is not a [`CallId`]:
///
/// ```compile_fail
/// use sessionlog::typed::ToolResult;
/// let r = ToolResult::text(1, 1, "call_1", "output");
/// ```
///
/// [`ToolResult::pruned`] builds dsh's content-only rewrite of an earlier result.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ToolResult {
    turn: u32,
    step: u32,
    id: MessageId,
    call_id: CallId,
    content: Vec<ContentBlock>,
    is_error: bool,
    error: Option<ToolError>,
    meta: Option<RawJson>,
    call_seq: Option<Seq>,
    rewrites: Option<Seq>,
}

impl ToolResult {
    /// The result of `call_id` with `content`, a freshly minted id and `isError: false`.
    pub fn new(turn: u32, step: u32, call_id: CallId, content: Vec<ContentBlock>) -> Self {
        ToolResult {
            turn,
            step,
            id: MessageId::mint(),
            call_id,
            content,
            is_error: false,
            error: None,
            meta: None,
            call_seq: None,
            rewrites: None,
        }
    }

    /// The result of `call_id` as one text block.
    pub fn text(turn: u32, step: u32, call_id: CallId, text: impl Into<String>) -> Self {
        ToolResult::new(turn, step, call_id, vec![ContentBlock::text(text)])
    }

    /// Sets the message id.
    pub fn with_id(mut self, id: MessageId) -> Self {
        self.id = id;
        self
    }

    /// Marks the result as an error (`isError: true`).
    pub fn failed(mut self) -> Self {
        self.is_error = true;
        self
    }

    /// Marks the result as an error with a typed `error` (`isError: true`).
    pub fn with_error(mut self, name: impl Into<String>, code: impl Into<String>) -> Self {
        self.is_error = true;
        self.error = Some(ToolError {
            name: name.into(),
            code: code.into(),
        });
        self
    }

    /// Sets the tool's opaque `meta`.
    pub fn with_meta(mut self, meta: RawJson) -> Self {
        self.meta = Some(meta);
        self
    }

    /// Cites the `tool/call` event this answers (`sourceEventSeqs: [seq]`, as dsh's loop does).
    pub fn answering(mut self, call_seq: Seq) -> Self {
        self.call_seq = Some(call_seq);
        self
    }

    /// A content-only rewrite of this result, already stored at `seq` (dsh's tool-result
    /// pruning): the same message id, call, turn, step, error flag, `error` and `meta`, with
    /// `content` replaced. It replaces node `seq` on the surface and cites it
    /// (`surfaceOp: {op:"replace", start: seq, end: seq}`, `sourceEventSeqs: [seq]`). The
    /// engine checks that `seq` is a current `tool/result` node that differs only in content
    /// and, with invariants on, that a turn is open.
    pub fn pruned(&self, seq: Seq, content: Vec<ContentBlock>) -> ToolResult {
        ToolResult {
            content,
            call_seq: None,
            rewrites: Some(seq),
            ..self.clone()
        }
    }

    /// The call id.
    pub fn call_id(&self) -> &CallId {
        &self.call_id
    }

    /// The message JSON text (what `messages()` derives from it).
    pub fn message_json(&self) -> String {
        let block = ContentBlock::ToolResult {
            tool_call_id: self.call_id.clone(),
            content: self.content.clone(),
            is_error: Some(self.is_error),
        };
        let source = Obj::new()
            .str("kind", "tool")
            .str("callId", self.call_id.as_str())
            .done();
        Obj::new()
            .str("id", self.id.as_str())
            .str("role", "user")
            .raw("content", &array([block.to_json()]))
            .raw("source", &source)
            .done()
    }
}

impl TypedEvent for ToolResult {
    fn kind(&self) -> &str {
        "tool/result"
    }
    fn data_json(&self) -> String {
        let error = self
            .error
            .as_ref()
            .map(|e| Obj::new().str("name", &e.name).str("code", &e.code).done());
        turn_step(self.turn, self.step)
            .raw("message", &self.message_json())
            .opt_raw("error", error.as_deref())
            .opt_raw("meta", self.meta.as_ref().map(RawJson::as_str))
            .done()
    }
    fn intent(&self) -> Intent {
        match (self.rewrites, self.call_seq) {
            (Some(seq), _) => Intent::replace(seq, seq).sources(vec![seq]),
            (None, Some(seq)) => Intent::append().sources(vec![seq]),
            (None, None) => Intent::append(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Compaction

/// A compaction checkpoint: a `user/message` (the summary) that replaces the surface nodes
/// from `start` to `end` (seqs, by surface position, inclusive) and cites every node it
/// shadows plus whatever else it was derived from (`sourceEventSeqs`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Compaction {
    summary: UserMessage,
    start: Seq,
    end: Seq,
    sources: Vec<Seq>,
}

impl Compaction {
    /// A summary replacing `start..=end`. `sources` must list `start` and `end` (and every
    /// node between them on the surface, which the engine checks on append) without
    /// duplicates.
    pub fn new(
        summary: UserMessage,
        start: Seq,
        end: Seq,
        sources: Vec<Seq>,
    ) -> Result<Self, TypedEventError> {
        let mut seen = std::collections::BTreeSet::new();
        for &seq in &sources {
            if !seen.insert(seq) {
                return Err(TypedEventError::DuplicateSource { seq });
            }
        }
        for missing in [start, end] {
            if !seen.contains(&missing) {
                return Err(TypedEventError::MissingSource {
                    start,
                    end,
                    missing,
                });
            }
        }
        Ok(Compaction {
            summary,
            start,
            end,
            sources,
        })
    }

    /// The summary message.
    pub fn summary(&self) -> &UserMessage {
        &self.summary
    }
}

impl TypedEvent for Compaction {
    fn kind(&self) -> &str {
        "user/message"
    }
    fn data_json(&self) -> String {
        self.summary.message_json()
    }
    fn intent(&self) -> Intent {
        Intent::replace(self.start, self.end).sources(self.sources.clone())
    }
}

/// `compaction/start` `{compactionId, sourceCommandId?, turn}` (log-only plugin event).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CompactionStart {
    /// `compactionId`.
    pub compaction_id: String,
    /// `sourceCommandId`, omitted when `None`.
    pub source_command_id: Option<String>,
    /// The turn it runs in (`null` between turns).
    pub turn: Option<u32>,
}

/// `compaction/end` `{compactionId, sourceCommandId?, turn, error?}` (log-only plugin event).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CompactionEnd {
    /// `compactionId`.
    pub compaction_id: String,
    /// `sourceCommandId`, omitted when `None`.
    pub source_command_id: Option<String>,
    /// The turn it ran in (`null` between turns).
    pub turn: Option<u32>,
    /// The failure text, omitted when `None`.
    pub error: Option<String>,
}

fn compaction_head(id: &str, command: Option<&str>, turn: Option<u32>) -> Obj {
    let o = Obj::new()
        .str("compactionId", id)
        .opt_str("sourceCommandId", command);
    match turn {
        Some(t) => o.uint("turn", u64::from(t)),
        None => o.raw("turn", "null"),
    }
}

impl TypedEvent for CompactionStart {
    fn kind(&self) -> &str {
        "compaction/start"
    }
    fn data_json(&self) -> String {
        compaction_head(
            &self.compaction_id,
            self.source_command_id.as_deref(),
            self.turn,
        )
        .done()
    }
    fn intent(&self) -> Intent {
        Intent::none()
    }
}

impl TypedEvent for CompactionEnd {
    fn kind(&self) -> &str {
        "compaction/end"
    }
    fn data_json(&self) -> String {
        compaction_head(
            &self.compaction_id,
            self.source_command_id.as_deref(),
            self.turn,
        )
        .opt_str("error", self.error.as_deref())
        .done()
    }
    fn intent(&self) -> Intent {
        Intent::none()
    }
}

/// The surface range a compaction or prune shadows, with what it cost.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Shadowed {
    /// `shadowedRange.start`: the first replaced surface node.
    pub start: Seq,
    /// `shadowedRange.end`: the last replaced surface node.
    pub end: Seq,
    /// `shadowedSeqs`: every replaced surface node, in surface order.
    pub seqs: Vec<Seq>,
    /// `shadowedTokenCount`: tokens the replaced nodes held.
    pub token_count: u64,
}

impl Shadowed {
    fn write(&self, o: Obj) -> Obj {
        let range = Obj::new()
            .uint("start", self.start)
            .uint("end", self.end)
            .done();
        o.raw("shadowedRange", &range)
            .raw("shadowedSeqs", &seq_array(&self.seqs))
            .uint("shadowedTokenCount", self.token_count)
    }
}

/// `compaction/summary` (log-only plugin event): the priced summary, written immediately
/// before the [`Compaction`] checkpoint that uses it. `{compactionId, sourceCommandId?,
/// summary, shadowedRange, shadowedSeqs, shadowedTokenCount, provider, model, maxTokens?,
/// usage?}` (the optional `rawOutput`/`llmStreamCall` pair is not written).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CompactionSummary {
    /// `compactionId`.
    pub compaction_id: String,
    /// `sourceCommandId`, omitted when `None`.
    pub source_command_id: Option<String>,
    /// `summary` content blocks.
    pub summary: Vec<ContentBlock>,
    /// What the checkpoint will shadow.
    pub shadowed: Shadowed,
    /// The model that wrote the summary.
    pub model: ModelSource,
    /// `maxTokens` of the summary request, omitted when `None`.
    pub max_tokens: Option<u64>,
    /// `usage` of the summary request, omitted when `None`.
    pub usage: Option<TokenUsage>,
}

impl TypedEvent for CompactionSummary {
    fn kind(&self) -> &str {
        "compaction/summary"
    }
    fn data_json(&self) -> String {
        let o = Obj::new()
            .str("compactionId", &self.compaction_id)
            .opt_str("sourceCommandId", self.source_command_id.as_deref())
            .raw("summary", &blocks_json(&self.summary));
        self.shadowed
            .write(o)
            .str("provider", self.model.provider())
            .str("model", self.model.model())
            .opt_uint("maxTokens", self.max_tokens)
            .opt_raw("usage", self.usage.map(|u| u.to_json()).as_deref())
            .done()
    }
    fn intent(&self) -> Intent {
        Intent::none()
    }
}

/// `compaction/prune` `{shadowedRange, shadowedSeqs, shadowedTokenCount}` (log-only plugin
/// event): prices a tool-result rewrite ([`ToolResult::pruned`]) written right after it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CompactionPrune {
    /// What the rewrite shadows.
    pub shadowed: Shadowed,
}

impl TypedEvent for CompactionPrune {
    fn kind(&self) -> &str {
        "compaction/prune"
    }
    fn data_json(&self) -> String {
        self.shadowed.write(Obj::new()).done()
    }
    fn intent(&self) -> Intent {
        Intent::none()
    }
}

// ---------------------------------------------------------------------------------------------
// Title

/// Where a session title came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TitleSource {
    /// `{kind:"fallback"}`: derived without a model.
    Fallback,
    /// `{kind:"provider", provider, model?:{provider, model}}`: generated by a model.
    Provider {
        /// The title provider.
        provider: String,
        /// The route `(provider, model)`, omitted when `None`.
        model: Option<(String, String)>,
    },
    /// `{kind:"user"}`: set by the user.
    User,
}

/// `session/title` `{title, messageSeqs, source}` (log-only plugin event).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionTitle {
    /// The title.
    pub title: String,
    /// The seqs of the messages it summarises.
    pub message_seqs: Vec<Seq>,
    /// Where it came from.
    pub source: TitleSource,
}

impl SessionTitle {
    /// A title.
    pub fn new(title: impl Into<String>, message_seqs: Vec<Seq>, source: TitleSource) -> Self {
        SessionTitle {
            title: title.into(),
            message_seqs,
            source,
        }
    }
}

impl TypedEvent for SessionTitle {
    fn kind(&self) -> &str {
        "session/title"
    }
    fn data_json(&self) -> String {
        let source = match &self.source {
            TitleSource::Fallback => Obj::new().str("kind", "fallback").done(),
            TitleSource::User => Obj::new().str("kind", "user").done(),
            TitleSource::Provider { provider, model } => {
                let route = model
                    .as_ref()
                    .map(|(p, m)| Obj::new().str("provider", p).str("model", m).done());
                Obj::new()
                    .str("kind", "provider")
                    .str("provider", provider)
                    .opt_raw("model", route.as_deref())
                    .done()
            }
        };
        Obj::new()
            .str("title", &self.title)
            .raw("messageSeqs", &seq_array(&self.message_seqs))
            .raw("source", &source)
            .done()
    }
    fn intent(&self) -> Intent {
        Intent::none()
    }
}
