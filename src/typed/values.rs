//! Shared value types: ids, raw JSON, usage, failures, content blocks, message sources.

use std::sync::atomic::{AtomicU64, Ordering};

use super::TypedEventError;
use super::write::{Obj, array, blocks_json, non_empty};
use crate::json::{JsonLimits, JsonValue};
use crate::store::now_ms;

// ---------------------------------------------------------------------------------------------
// Raw JSON and ids

/// A JSON value given as text, validated as lossless JSON and kept as `JSON.stringify` would
/// write it. Used where dsh's payload is open (a plugin content block, `meta`, replay state).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawJson(String);

impl RawJson {
    /// Validates `text` (lossless JSON: no `-0`, no overflow; a repeated key keeps its last value, as `JSON.parse`)
    /// and keeps its canonical `JSON.stringify` form.
    pub fn new(text: &str) -> Result<Self, TypedEventError> {
        Self::parse(text, "raw JSON").map(|v| RawJson(crate::json::stringify(&v)))
    }

    /// Converts a `serde_json` value with JavaScript semantics.
    pub fn from_serde(value: &serde_json::Value) -> Result<Self, TypedEventError> {
        crate::json::stringify_serde(value)
            .map(RawJson)
            .map_err(|source| TypedEventError::InvalidJson {
                what: "raw JSON",
                source,
            })
    }

    fn parse(text: &str, what: &'static str) -> Result<JsonValue, TypedEventError> {
        let limits = JsonLimits::default();
        crate::json::parse(text, &limits)
            .map_err(|source| TypedEventError::InvalidJson { what, source })
    }

    /// The canonical JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A message id (dsh's `MessageId`): a non-empty string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MessageId(String);

impl MessageId {
    /// A message id; refuses the empty string (dsh's loader would refuse the message).
    pub fn new(id: impl Into<String>) -> Result<Self, TypedEventError> {
        non_empty(id.into(), "message id").map(MessageId)
    }

    /// A fresh id, unique within this process and very likely across processes:
    /// `msg-<unix ms, hex>-<pid, hex>-<counter>`.
    pub fn mint() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        MessageId(format!(
            "msg-{:x}-{:x}-{n}",
            now_ms().max(0),
            std::process::id()
        ))
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A tool call id (dsh's `CallId`): a non-empty string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallId(String);

impl CallId {
    /// A call id; refuses the empty string (dsh's loader refuses a tool result without one).
    pub fn new(id: impl Into<String>) -> Result<Self, TypedEventError> {
        non_empty(id.into(), "callId").map(CallId)
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for MessageId {
    type Error = TypedEventError;
    fn try_from(id: &str) -> Result<Self, Self::Error> {
        MessageId::new(id)
    }
}

impl TryFrom<&str> for CallId {
    type Error = TypedEventError;
    fn try_from(id: &str) -> Result<Self, Self::Error> {
        CallId::new(id)
    }
}

// ---------------------------------------------------------------------------------------------
// Shared value types

/// Token accounting (dsh's `TokenUsage`, disjoint counts). Counts above 2^53 print as
/// JavaScript would round them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct TokenUsage {
    /// `inputTokens`.
    pub input_tokens: u64,
    /// `outputTokens`.
    pub output_tokens: u64,
    /// `cacheReadTokens` (omitted when `None`).
    pub cache_read_tokens: Option<u64>,
    /// `cacheWriteTokens` (omitted when `None`).
    pub cache_write_tokens: Option<u64>,
    /// `reasoningTokens` (omitted when `None`).
    pub reasoning_tokens: Option<u64>,
}

impl TokenUsage {
    /// Input and output counts only.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        TokenUsage {
            input_tokens,
            output_tokens,
            ..TokenUsage::default()
        }
    }

    /// The JSON text.
    pub fn to_json(&self) -> String {
        Obj::new()
            .uint("inputTokens", self.input_tokens)
            .uint("outputTokens", self.output_tokens)
            .opt_uint("cacheReadTokens", self.cache_read_tokens)
            .opt_uint("cacheWriteTokens", self.cache_write_tokens)
            .opt_uint("reasoningTokens", self.reasoning_tokens)
            .done()
    }
}

/// An LLM failure (dsh's `LlmFailure`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LlmFailure {
    /// `message`.
    pub message: String,
    /// `code` (e.g. `RATE_LIMITED`; non-LLM errors use `UNKNOWN`).
    pub code: String,
    /// `status` (HTTP status), omitted when `None`.
    pub status: Option<u16>,
    /// `providerRetryAfterMs`, omitted when `None`.
    pub provider_retry_after_ms: Option<u64>,
    /// `requestId`, omitted when `None`.
    pub request_id: Option<String>,
}

impl LlmFailure {
    /// A failure with a message and a code.
    pub fn new(message: impl Into<String>, code: impl Into<String>) -> Self {
        LlmFailure {
            message: message.into(),
            code: code.into(),
            status: None,
            provider_retry_after_ms: None,
            request_id: None,
        }
    }

    /// The JSON text.
    pub fn to_json(&self) -> String {
        Obj::new()
            .str("message", &self.message)
            .str("code", &self.code)
            .opt_uint("status", self.status.map(u64::from))
            .opt_uint("providerRetryAfterMs", self.provider_retry_after_ms)
            .opt_str("requestId", self.request_id.as_deref())
            .done()
    }
}

/// An image attachment (dsh's image block `attachment`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageAttachment {
    /// `attachmentId`.
    pub attachment_id: String,
    /// `mediaType`, e.g. `image/png`.
    pub media_type: String,
    /// `bytes`: the attachment's size in bytes.
    pub bytes: u64,
    /// `width` in pixels.
    pub width: u32,
    /// `height` in pixels.
    pub height: u32,
    /// `name`, omitted when `None`.
    pub name: Option<String>,
    /// `originalDimensions` `(width, height)` before any resize, omitted when `None`.
    pub original_dimensions: Option<(u32, u32)>,
}

impl ImageAttachment {
    pub(super) fn to_json(&self) -> String {
        let dims = self.original_dimensions.map(|(w, h)| {
            Obj::new()
                .uint("width", u64::from(w))
                .uint("height", u64::from(h))
                .done()
        });
        Obj::new()
            .str("attachmentId", &self.attachment_id)
            .str("mediaType", &self.media_type)
            .uint("bytes", self.bytes)
            .uint("width", u64::from(self.width))
            .uint("height", u64::from(self.height))
            .opt_str("name", self.name.as_deref())
            .opt_raw("originalDimensions", dims.as_deref())
            .done()
    }
}

/// A content block of a message (dsh's `ContentBlock`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ContentBlock {
    /// `{type:"text", text}`.
    Text(String),
    /// `{type:"reasoning", text}`.
    Reasoning(String),
    /// `{type:"image", attachment}`.
    Image(ImageAttachment),
    /// `{type:"tool-call", id, name, arguments}`; `arguments` is the model's raw JSON text.
    ToolCall {
        /// `id`.
        id: CallId,
        /// `name` of the tool.
        name: String,
        /// `arguments`: raw text from the model (stored unparsed, as dsh does).
        arguments: String,
    },
    /// `{type:"tool-result", toolCallId, content, isError?}`.
    ToolResult {
        /// `toolCallId`.
        tool_call_id: CallId,
        /// `content`.
        content: Vec<ContentBlock>,
        /// `isError`, omitted when `None`.
        is_error: Option<bool>,
    },
    /// Any other (plugin) block: a JSON object with a non-empty string `type`.
    Other(RawJson),
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text(text.into())
    }

    /// A reasoning block.
    pub fn reasoning(text: impl Into<String>) -> Self {
        ContentBlock::Reasoning(text.into())
    }

    /// A tool-call block.
    pub fn tool_call(id: CallId, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        ContentBlock::ToolCall {
            id,
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// A block of another type given as JSON text: must be an object whose `type` is a
    /// non-empty string.
    pub fn other(json: &str) -> Result<Self, TypedEventError> {
        let v = RawJson::parse(json, "content block")?;
        let typed = v
            .as_object()
            .and_then(|o| o.get("type"))
            .and_then(JsonValue::as_str)
            .is_some_and(|t| !t.is_empty());
        if !typed {
            return Err(TypedEventError::Shape {
                what: "a content block",
                expected: "a JSON object with a non-empty string \"type\"",
            });
        }
        Ok(ContentBlock::Other(RawJson(crate::json::stringify(&v))))
    }

    /// The block's JSON text.
    pub fn to_json(&self) -> String {
        match self {
            ContentBlock::Text(t) => Obj::new().str("type", "text").str("text", t).done(),
            ContentBlock::Reasoning(t) => Obj::new().str("type", "reasoning").str("text", t).done(),
            ContentBlock::Image(a) => Obj::new()
                .str("type", "image")
                .raw("attachment", &a.to_json())
                .done(),
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => Obj::new()
                .str("type", "tool-call")
                .str("id", id.as_str())
                .str("name", name)
                .str("arguments", arguments)
                .done(),
            ContentBlock::ToolResult {
                tool_call_id,
                content,
                is_error,
            } => {
                let o = Obj::new()
                    .str("type", "tool-result")
                    .str("toolCallId", tool_call_id.as_str())
                    .raw("content", &blocks_json(content));
                match is_error {
                    Some(e) => o.bool("isError", *e).done(),
                    None => o.done(),
                }
            }
            ContentBlock::Other(raw) => raw.0.clone(),
        }
    }
}

/// A plugin message source form (dsh's `source.form`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PluginForm {
    /// `"instructions"`.
    Instructions,
    /// `"catalog"`.
    Catalog,
    /// `"snapshot"` with `sections: [{name, text}]`.
    Snapshot(Vec<(String, String)>),
    /// `"notice"` with a `summary`.
    Notice(String),
    /// `"relay"`.
    Relay,
    /// `"recall"`.
    Recall,
}

/// Who a user-role message comes from (dsh's `MessageSource` for `user/message`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum UserSource {
    /// `{kind:"user"}`: the human.
    User,
    /// `{kind:"plugin", plugin, form?}`: injected by a plugin.
    Plugin {
        /// The plugin name.
        plugin: String,
        /// The form, omitted when `None`.
        form: Option<PluginForm>,
    },
    /// Any other source: a JSON object with a non-empty string `kind`.
    Other(RawJson),
}

impl UserSource {
    /// A source of another kind given as JSON text (e.g. a goal round); must be an object
    /// whose `kind` is a non-empty string.
    pub fn other(json: &str) -> Result<Self, TypedEventError> {
        let v = RawJson::parse(json, "message source")?;
        let ok = v
            .as_object()
            .and_then(|o| o.get("kind"))
            .and_then(JsonValue::as_str)
            .is_some_and(|k| !k.is_empty());
        if !ok {
            return Err(TypedEventError::Shape {
                what: "a message source",
                expected: "a JSON object with a non-empty string \"kind\"",
            });
        }
        Ok(UserSource::Other(RawJson(crate::json::stringify(&v))))
    }

    pub(super) fn to_json(&self) -> String {
        match self {
            UserSource::User => Obj::new().str("kind", "user").done(),
            UserSource::Plugin { plugin, form } => {
                let o = Obj::new().str("kind", "plugin").str("plugin", plugin);
                match form {
                    None => o.done(),
                    Some(PluginForm::Instructions) => o.str("form", "instructions").done(),
                    Some(PluginForm::Catalog) => o.str("form", "catalog").done(),
                    Some(PluginForm::Relay) => o.str("form", "relay").done(),
                    Some(PluginForm::Recall) => o.str("form", "recall").done(),
                    Some(PluginForm::Notice(summary)) => {
                        o.str("form", "notice").str("summary", summary).done()
                    }
                    Some(PluginForm::Snapshot(sections)) => {
                        let sections = array(
                            sections
                                .iter()
                                .map(|(n, t)| Obj::new().str("name", n).str("text", t).done()),
                        );
                        o.str("form", "snapshot").raw("sections", &sections).done()
                    }
                }
            }
            UserSource::Other(raw) => raw.0.clone(),
        }
    }
}

/// The model an assistant message came from (`{kind:"model", provider, model, replayState?}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelSource {
    provider: String,
    model: String,
    replay_state: Option<RawJson>,
}

impl ModelSource {
    /// A model source; provider and model must be non-empty (dsh's loader requires both).
    pub fn new(
        provider: impl Into<String>,
        model: impl Into<String>,
    ) -> Result<Self, TypedEventError> {
        Ok(ModelSource {
            provider: non_empty(provider.into(), "provider")?,
            model: non_empty(model.into(), "model")?,
            replay_state: None,
        })
    }

    /// Sets the provider's opaque `replayState`.
    pub fn with_replay_state(mut self, state: RawJson) -> Self {
        self.replay_state = Some(state);
        self
    }

    /// The provider.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The model.
    pub fn model(&self) -> &str {
        &self.model
    }

    pub(super) fn to_json(&self) -> String {
        Obj::new()
            .str("kind", "model")
            .str("provider", &self.provider)
            .str("model", &self.model)
            .opt_raw(
                "replayState",
                self.replay_state.as_ref().map(RawJson::as_str),
            )
            .done()
    }
}
