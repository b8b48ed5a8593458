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

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::AppendError;
use crate::event::{Event, Seq};
use crate::json::{JsonError, JsonLimits, JsonValue, write_js_number, write_js_string};
use crate::store::{Intent, Receipt, Session, now_ms};

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
// JSON writing

/// An object written key by key in insertion order (every key here is non-numeric, so this
/// is also JavaScript's order).
struct Obj(String);

impl Obj {
    fn new() -> Self {
        Obj(String::from("{"))
    }

    fn key(mut self, key: &str) -> Self {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        write_js_string(&mut self.0, key);
        self.0.push(':');
        self
    }

    fn str(self, key: &str, value: &str) -> Self {
        let mut o = self.key(key);
        write_js_string(&mut o.0, value);
        o
    }

    fn opt_str(self, key: &str, value: Option<&str>) -> Self {
        match value {
            Some(v) => self.str(key, v),
            None => self,
        }
    }

    fn uint(self, key: &str, value: u64) -> Self {
        let mut o = self.key(key);
        write_js_number(&mut o.0, value as f64);
        o
    }

    fn opt_uint(self, key: &str, value: Option<u64>) -> Self {
        match value {
            Some(v) => self.uint(key, v),
            None => self,
        }
    }

    fn bool(self, key: &str, value: bool) -> Self {
        self.raw(key, if value { "true" } else { "false" })
    }

    fn raw(self, key: &str, json: &str) -> Self {
        let mut o = self.key(key);
        o.0.push_str(json);
        o
    }

    fn opt_raw(self, key: &str, json: Option<&str>) -> Self {
        match json {
            Some(v) => self.raw(key, v),
            None => self,
        }
    }

    fn done(mut self) -> String {
        self.0.push('}');
        self.0
    }
}

/// `[a,b,...]` from already-written JSON texts.
fn array(items: impl IntoIterator<Item = String>) -> String {
    let mut out = String::from("[");
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&item);
    }
    out.push(']');
    out
}

fn seq_array(seqs: &[Seq]) -> String {
    array(seqs.iter().map(|s| {
        let mut o = String::new();
        write_js_number(&mut o, *s as f64);
        o
    }))
}

fn blocks_json(blocks: &[ContentBlock]) -> String {
    array(blocks.iter().map(ContentBlock::to_json))
}

fn non_empty(value: String, field: &'static str) -> Result<String, TypedEventError> {
    if value.is_empty() {
        Err(TypedEventError::Empty { field })
    } else {
        Ok(value)
    }
}

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
    fn to_json(&self) -> String {
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

    fn to_json(&self) -> String {
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

    fn to_json(&self) -> String {
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
}

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

fn turn_step(turn: u32, step: u32) -> Obj {
    Obj::new()
        .uint("turn", u64::from(turn))
        .uint("step", u64::from(step))
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
        match self.call_seq {
            Some(seq) => Intent::append().sources(vec![seq]),
            None => Intent::append(),
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
