//! dsh's JSONL persistence format (plain and zstd).
//!
//! Pure functions between file bytes and `(SessionHeader, Vec<Event>)`
//! (dsh-persistence-formats §4):
//!
//! - [`read`] parses a `session.jsonl` or `session.jsonl.zstd` file (the format is detected
//!   from the content), applying dsh's header rules, its envelope rules and its torn-tail rule:
//!   the longest valid prefix is kept and what was cut is reported ([`TornTail`]), unless a
//!   later line decodes to a `turn/end`, in which case the damage lies in committed history
//!   and the file is refused.
//! - [`write()`] produces the bytes dsh would write: the header line, one line per event (or
//!   packed chunk row) in each event's recorded key order, `\n` after every line; in zstd mode
//!   one frame for the header and one frame per append batch (level 3, checksum on).
//! - [`session_relative_path`] gives dsh's path layout
//!   `<project key | _no-cwd>/<encoded id>/session.jsonl[.zstd]`.
//!
//! Event `data` is kept as the exact JSON text of the line; an imported file written again is
//! byte-identical unless [`JsonlLog::non_canonical`] lists lines dsh did not write with
//! `JSON.stringify` (extra whitespace, unknown header keys, …).
//!
//! Line numbers: dsh's messages count lines after the header from 1 ("line k" is file line
//! k + 1); every error and report here also carries the 1-based file line number.

use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::event::{
    EnvelopeKey, Event, KeyOrder, Layout, MAX_SAFE_INTEGER, Packing, SESSION_FORMAT_VERSION, Seq,
    SessionHeader, SurfaceOp,
};
use crate::interop::chunk_rows::{self, ChunkKind, Codec, PackPolicy, Record};
use crate::json::{
    self, JsonError, JsonLimits, JsonValue, NegativeZero, js_number_to_string, write_js_string,
};

/// The zstd frame magic number (`0xFD2FB528`, little-endian).
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// The zstd level dsh uses (Node's default).
pub const ZSTD_LEVEL: i32 = 3;

/// File name of a plain session log.
pub const PLAIN_FILE_NAME: &str = "session.jsonl";

/// File name of a zstd session log.
pub const ZSTD_FILE_NAME: &str = "session.jsonl.zstd";

/// Project directory of sessions without a `cwd`.
pub const NO_CWD_DIR: &str = "_no-cwd";

/// dsh's `KNOWN_SESSION_EVENT_TYPES` at f56b34fae8 (48 types). A stored event of any other
/// type is refused on load unless it is marked `ignorable: true`.
pub const KNOWN_EVENT_TYPES: [&str; 48] = crate::session::known::KNOWN_SESSION_EVENT_TYPES;

/// Legacy types dsh converts on read (so they are not "unknown").
const LEGACY_CONVERTED_TYPES: [&str; 1] = ["steering/message"];

/// True when dsh's loader accepts events of type `t` without `ignorable` (a known type, or a
/// legacy type it converts on read).
pub fn is_known_event_type(t: &str) -> bool {
    KNOWN_EVENT_TYPES.contains(&t) || LEGACY_CONVERTED_TYPES.contains(&t)
}

/// How a session log file is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// `session.jsonl`: plain text (dsh's `compression: 'none'`).
    None,
    /// `session.jsonl.zstd`: a header frame and one zstd frame per append batch.
    Zstd,
}

impl Compression {
    /// The file name dsh uses for this compression.
    pub fn file_name(self) -> &'static str {
        match self {
            Compression::None => PLAIN_FILE_NAME,
            Compression::Zstd => ZSTD_FILE_NAME,
        }
    }
}

/// Detects the format from the content: zstd when the bytes start with (a prefix of) the zstd
/// magic or with a skippable-frame magic (which [`read`] then refuses), plain otherwise.
pub fn detect_compression(bytes: &[u8]) -> Compression {
    let n = bytes.len().min(4);
    let zstd_prefix = n > 0 && bytes[..n] == ZSTD_MAGIC[..n];
    let skippable =
        bytes.len() >= 4 && (bytes[0] & 0xF0) == 0x50 && bytes[1..4] == [0x2A, 0x4D, 0x18];
    if zstd_prefix || skippable {
        Compression::Zstd
    } else {
        Compression::None
    }
}

// ---------------------------------------------------------------------------------------------
// Errors and reports
// ---------------------------------------------------------------------------------------------

/// Why a JSONL session log was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonlReadError {
    /// dsh's `SessionFormatUnsupportedError` for a header `version` other than 0 (checked
    /// before anything else about the header).
    #[error("{message}")]
    FormatUnsupported {
        /// dsh's full message, including ` (raw log: <path>)` when a path was given.
        message: String,
    },
    /// dsh's `SessionFormatUnsupportedError` for an event type it does not know.
    #[error(
        "session \"{id}\" contains event type \"{kind}\" (seq {seq}) unknown to this harness and not \
         marked ignorable; refusing to interpret the log — it was likely written by a newer harness"
    )]
    UnknownEventType {
        /// Session id from the header.
        id: String,
        /// The unknown type.
        kind: String,
        /// Its seq.
        seq: Seq,
    },
    /// The first line is not a session header dsh accepts.
    #[error("corrupt session log: first line is not a session header ({reason})")]
    NotAHeader {
        /// What is wrong with it.
        reason: String,
    },
    /// The header carries a retired policy key (`sandboxMode`, `approvalPolicy`).
    #[error("corrupt session log: session header carries the retired key \"{key}\"")]
    RetiredHeaderKey {
        /// The key.
        key: &'static str,
    },
    /// A header field has a type the session layer refuses.
    #[error("stored session \"{id}\" failed validation: {reason}")]
    InvalidHeader {
        /// Session id from the header.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// A defect (unparsable line, malformed packed row or seq gap) followed by a line that
    /// decodes to a `turn/end`: committed history is damaged.
    #[error("corrupt session log: {dsh_reason} (file line {file_line}: {detail})")]
    CommittedCorruption {
        /// dsh's text, e.g. `unparsable committed event at line 3`.
        dsh_reason: String,
        /// 1-based file line of the defect.
        file_line: usize,
        /// Our detail (the parse error, the seqs, …).
        detail: String,
        /// 1-based file line of the later `turn/end` that makes the defect committed.
        turn_end_line: usize,
    },
    /// A stored event's envelope is invalid (dsh: `stored session "<id>" failed validation:
    /// seed event at index <i> has an invalid event envelope`).
    #[error(
        "stored session \"{id}\" failed validation: seed event at index {index} has an invalid \
         event envelope (file line {file_line}: {reason})"
    )]
    InvalidEnvelope {
        /// Session id from the header.
        id: String,
        /// Index (= seq) of the event.
        index: u64,
        /// 1-based file line.
        file_line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A retired event shape dsh refuses outright.
    #[error("stored session \"{id}\" failed validation: event seq {seq} uses {what}")]
    RetiredEvent {
        /// Session id from the header.
        id: String,
        /// Seq of the event.
        seq: Seq,
        /// e.g. `unsupported legacy request/header-delta format`.
        what: &'static str,
    },
    /// Something dsh accepts that this engine cannot represent (e.g. a lone surrogate in an
    /// event type or session id).
    #[error("unsupported session log content at file line {file_line}: {reason}")]
    Unsupported {
        /// 1-based file line.
        file_line: usize,
        /// What cannot be represented.
        reason: String,
    },
    /// The zstd container is structurally invalid.
    #[error("corrupt Zstandard session log: {reason} at byte {offset}")]
    ZstdStructure {
        /// Byte offset in the file.
        offset: usize,
        /// What is wrong (`invalid frame magic`, …).
        reason: &'static str,
    },
    /// A complete zstd frame does not decompress or fails its checksum.
    #[error("corrupt Zstandard session log: frame at byte {offset} failed validation")]
    ZstdFrame {
        /// Byte offset of the frame.
        offset: usize,
    },
    /// The first zstd frame is not exactly one header line.
    #[error("corrupt Zstandard session log: first frame is not exactly one header line")]
    ZstdHeaderFrame,
    /// No complete zstd frame.
    #[error("empty or header-less Zstandard session log")]
    ZstdEmpty,
    /// The complete frames do not end on a record boundary or contain a defect.
    #[error(
        "corrupt Zstandard session log: complete frame contains a torn JSONL record ({detail})"
    )]
    ZstdTornRecord {
        /// What was found.
        detail: String,
    },
    /// Decompression would exceed [`ReadOptions::max_decompressed_bytes`].
    #[error("decompressed session log exceeds the limit of {limit} bytes")]
    DecompressedTooLarge {
        /// The limit.
        limit: u64,
    },
}

/// Why a session could not be written as JSONL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonlWriteError {
    /// A logical event typed like a packed row cannot be stored in JSONL (a reader would decode
    /// it as a row).
    #[error(
        "event seq {seq} has type \"{kind}\", a packed chunk row tag; JSONL cannot store it \
         (dsh would read it back as a packed row)"
    )]
    ChunkTagCollision {
        /// Seq of the event.
        seq: Seq,
        /// Its type.
        kind: String,
    },
    /// Events must be contiguous from seq 0.
    #[error("event at index {index} has seq {seq}; a session log must be contiguous from 0")]
    NotContiguous {
        /// Index in the slice.
        index: usize,
        /// Its seq.
        seq: Seq,
    },
    /// A value dsh could not read back.
    #[error("event seq {seq}: {reason}")]
    InvalidEvent {
        /// Seq of the event.
        seq: Seq,
        /// What is wrong.
        reason: String,
    },
    /// A header dsh could not read back.
    #[error("session header: {reason}")]
    InvalidHeader {
        /// What is wrong.
        reason: String,
    },
    /// The batch sizes do not add up to the number of events.
    #[error("batch sizes add up to {total} but there are {events} events")]
    BatchMismatch {
        /// Sum of the batch sizes.
        total: usize,
        /// Number of events.
        events: usize,
    },
    /// The zstd library failed.
    #[error("zstd compression failed: {0}")]
    Zstd(String),
}

/// Why a session id or cwd has no JSONL path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonlPathError {
    /// dsh refuses an empty session id.
    #[error("session id must not be empty")]
    EmptyId,
    /// dsh refuses an empty cwd.
    #[error("cwd must not be empty")]
    EmptyCwd,
}

/// What the reader cut from the end of the log (dsh's torn-tail rule, §4.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// 1-based file line of the first record not kept (for zstd, counted in the decompressed
    /// text).
    pub file_line: usize,
    /// Where dsh would truncate the file (`truncateTo`): the end of the last kept line (plain),
    /// or the start of the incomplete final frame (zstd).
    pub truncate_to: u64,
    /// Bytes after `truncate_to`.
    pub bytes_cut: u64,
    /// Why: dsh's defect text (`unparsable committed event at line k`, `seq gap …`), or
    /// `incomplete final line` / `incomplete final Zstandard frame`.
    pub reason: String,
    /// Detail on the defect (parse error, seqs), if any.
    pub detail: Option<String>,
    /// zstd only: events recovered from the incomplete final frame (they are included in
    /// [`JsonlLog::events`] and form the last batch).
    pub recovered_events: usize,
}

/// A line that [`write()`] would not reproduce byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonCanonicalLine {
    /// 1-based file line (1 is the header).
    pub file_line: usize,
    /// Why (`not JSON.stringify output`, `invalid UTF-8 replaced by U+FFFD`, …).
    pub reason: &'static str,
}

/// A session read from a JSONL file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonlLog {
    /// The header (unknown keys dropped, as dsh does).
    pub header: SessionHeader,
    /// The events, contiguous from seq 0, with their key order and packed-row layout recorded.
    pub events: Vec<Event>,
    /// The file's format.
    pub compression: Compression,
    /// zstd: number of events in each frame after the header frame (dsh's append batches).
    /// Plain files keep no batch boundaries: one entry holding all events (none when empty).
    pub batches: Vec<usize>,
    /// What was cut from the end, if anything.
    pub torn: Option<TornTail>,
    /// Lines that would not be written back byte for byte.
    pub non_canonical: Vec<NonCanonicalLine>,
}

/// Options for [`read`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    /// Accept dsh's replay-fixture form: records without `seq`/`time` (`seq0`/`time0`) are
    /// numbered by position with time 0, and a header may lack `version` or
    /// `delegationDepth`. dsh's loader refuses such files; off by default.
    pub replay_fixture: bool,
    /// Limits for each line's JSON.
    pub line_limits: JsonLimits,
    /// Upper bound on the total decompressed size of a zstd file (default 4 GiB).
    pub max_decompressed_bytes: u64,
    /// The file's path, quoted in dsh's version-refusal message (` (raw log: <path>)`).
    pub path: Option<PathBuf>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            replay_fixture: false,
            line_limits: JsonLimits::default(),
            max_decompressed_bytes: 4 << 30,
            path: None,
        }
    }
}

/// Options for [`write()`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Plain or zstd.
    pub compression: Compression,
    /// How chunk events are packed into rows: `Some(Remembered)` (default) reproduces imported
    /// rows and packs engine-appended runs per batch as dsh does; `Some(Maximal)` packs every
    /// run of each batch; `None` writes every event as its own line (dsh's `packChunks:false`).
    pub packing: Option<PackPolicy>,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            compression: Compression::None,
            packing: Some(PackPolicy::Remembered),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Small JavaScript helpers
// ---------------------------------------------------------------------------------------------

const MAX_SAFE: i64 = MAX_SAFE_INTEGER;

/// JavaScript's `String(value)` (`None` is `undefined`), as dsh's messages print values.
fn js_display(value: Option<&JsonValue>) -> String {
    let Some(v) = value else {
        return "undefined".to_owned();
    };
    match v {
        JsonValue::Null => "null".to_owned(),
        JsonValue::Bool(b) => b.to_string(),
        JsonValue::Number(n) => js_number_to_string(n.value()),
        JsonValue::String(s) => s.to_string_lossy().into_owned(),
        JsonValue::Object(_) => "[object Object]".to_owned(),
        JsonValue::Array(items) => {
            // Array.prototype.join(","), nested arrays flattened, null/undefined empty.
            let mut stack: Vec<std::slice::Iter<'_, JsonValue>> = vec![items.iter()];
            let mut out = String::new();
            let mut first_stack: Vec<bool> = vec![true];
            while let Some(it) = stack.last_mut() {
                match it.next() {
                    Some(item) => {
                        if let Some(first) = first_stack.last_mut() {
                            if !*first {
                                out.push(',');
                            }
                            *first = false;
                        }
                        match item {
                            JsonValue::Array(inner) => {
                                stack.push(inner.iter());
                                first_stack.push(true);
                            }
                            JsonValue::Null => {}
                            other => out.push_str(&js_display(Some(other))),
                        }
                    }
                    None => {
                        stack.pop();
                        first_stack.pop();
                    }
                }
            }
            out
        }
    }
}

/// A number that is `-0` in the source text.
fn is_negative_zero(v: &JsonValue) -> bool {
    v.as_number()
        .is_some_and(|n| n.value() == 0.0 && n.text().starts_with('-'))
}

fn parse_value(text: &str) -> Result<JsonValue, JsonError> {
    json::parse_with(text, &JsonLimits::default(), NegativeZero::Accept)
}

// ---------------------------------------------------------------------------------------------
// Header
// ---------------------------------------------------------------------------------------------

fn version_refusal(id: &str, version: f64, path: Option<&Path>) -> String {
    let v = js_number_to_string(version);
    let mut message = if version > 0.0 {
        format!(
            "session \"{id}\" uses log format v{v}, but this harness reads only v0: the log was \
             written by a newer harness — upgrade the harness to open it"
        )
    } else {
        format!(
            "session \"{id}\" uses log format v{v}, older than the supported v0, and this build \
             ships no upgrade path for it"
        )
    };
    if let Some(p) = path {
        message.push_str(&format!(" (raw log: {})", p.display()));
    }
    message
}

fn not_header(reason: impl Into<String>) -> JsonlReadError {
    JsonlReadError::NotAHeader {
        reason: reason.into(),
    }
}

/// Parses the header line (without its `\n`) as dsh's JSONL reader does. Returns the header
/// and whether the line is exactly what [`write_header_line`] produces.
pub fn parse_header_line(
    line: &str,
    opts: &ReadOptions,
) -> Result<(SessionHeader, bool), JsonlReadError> {
    let value = json::parse_with(line, &opts.line_limits, NegativeZero::Accept)
        .map_err(|e| not_header(format!("not valid JSON: {e}")))?;
    let Some(obj) = value.as_object() else {
        return Err(not_header(format!(
            "a JSON {}, not an object",
            value.kind_name()
        )));
    };
    // Version refusal comes before any shape check and names String(id).
    if let Some(v) = obj.get("version").and_then(JsonValue::as_f64)
        && v != 0.0
    {
        return Err(JsonlReadError::FormatUnsupported {
            message: version_refusal(&js_display(obj.get("id")), v, opts.path.as_deref()),
        });
    }
    if obj.get("type").and_then(JsonValue::as_str) != Some("session") {
        return Err(not_header("type is not \"session\""));
    }
    match obj.get("version") {
        Some(v) if v.as_f64().is_some() => {}
        None if opts.replay_fixture => {}
        _ => return Err(not_header("version is not a number")),
    }
    let id = match obj.get("id") {
        Some(JsonValue::String(s)) => s
            .as_str()
            .ok_or_else(|| JsonlReadError::Unsupported {
                file_line: 1,
                reason: "the session id holds a lone UTF-16 surrogate".into(),
            })?
            .to_owned(),
        _ => return Err(not_header("id is not a string")),
    };
    let non_negative = |key: &str, required: bool| -> Result<Option<u64>, JsonlReadError> {
        match obj.get(key) {
            None if !required => Ok(None),
            Some(v) if !is_negative_zero(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| not_header(format!("{key} is not a non-negative safe integer"))),
            _ => Err(not_header(format!(
                "{key} is not a non-negative safe integer"
            ))),
        }
    };
    let created_at = non_negative("createdAt", true)?.unwrap_or(0);
    let delegation_depth = non_negative("delegationDepth", !opts.replay_fixture)?;
    let optional_string = |key: &str| -> Result<Option<String>, JsonlReadError> {
        match obj.get(key) {
            None => Ok(None),
            Some(JsonValue::String(s)) => {
                s.as_str()
                    .map(|s| Some(s.to_owned()))
                    .ok_or_else(|| JsonlReadError::Unsupported {
                        file_line: 1,
                        reason: format!("header {key} holds a lone UTF-16 surrogate"),
                    })
            }
            Some(_) => Err(not_header(format!("{key} is not a string"))),
        }
    };
    let origin = optional_string("origin")?;
    if origin.as_deref().is_some_and(|o| o != "subagent") {
        return Err(not_header("origin is not \"subagent\""));
    }
    let agent_preset = optional_string("agentPreset")?;
    let owner = optional_string("owner")?;
    if owner.as_deref() == Some("") {
        return Err(not_header("owner is empty"));
    }
    for key in ["sandboxMode", "approvalPolicy"] {
        if obj.contains_key(key) {
            return Err(JsonlReadError::RetiredHeaderKey { key });
        }
    }
    // Not checked by dsh's line guard, but refused by its session-header validation.
    let invalid = |reason: String| JsonlReadError::InvalidHeader {
        id: id.clone(),
        reason,
    };
    let string_field = |key: &str| -> Result<Option<String>, JsonlReadError> {
        match optional_string(key) {
            Err(JsonlReadError::NotAHeader { .. }) => {
                Err(invalid(format!("session header {key} must be a string")))
            }
            other => other,
        }
    };
    let cwd = string_field("cwd")?;
    let parent_session = string_field("parentSession")?;
    let seed_length = match obj.get("seedLength") {
        None => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            invalid("session header seedLength must be a non-negative safe integer".to_owned())
        })?),
    };
    let header = SessionHeader {
        version: SESSION_FORMAT_VERSION,
        id,
        created_at,
        cwd,
        parent_session,
        seed_length,
        origin,
        delegation_depth,
        agent_preset,
        owner,
        extra: Vec::new(),
    };
    let canonical = write_header_line(&header).is_ok_and(|l| l == line);
    Ok((header, canonical))
}

/// The header line exactly as dsh's `toHeaderLine` + `JSON.stringify` write it (no `\n`):
/// `{"type":"session","version":0,"id":…,"createdAt":…,"cwd"?,"parentSession"?,"seedLength"?,
/// "origin"?,"delegationDepth":<default 0>,"agentPreset"?,"owner"?}`. Extra keys are not
/// written (dsh drops them).
///
/// ```
/// use sessionlog::event::SessionHeader;
/// use sessionlog::interop::jsonl::write_header_line;
/// let mut h = SessionHeader::new("s1", 1000);
/// h.cwd = Some("/work".into());
/// assert_eq!(
///     write_header_line(&h).unwrap(),
///     r#"{"type":"session","version":0,"id":"s1","createdAt":1000,"cwd":"/work","delegationDepth":0}"#
/// );
/// ```
pub fn write_header_line(h: &SessionHeader) -> Result<String, JsonlWriteError> {
    let bad = |reason: &str| JsonlWriteError::InvalidHeader {
        reason: reason.to_owned(),
    };
    if h.version != SESSION_FORMAT_VERSION {
        return Err(bad("version must be 0"));
    }
    let safe = |n: u64| n <= MAX_SAFE as u64;
    if !safe(h.created_at) {
        return Err(bad("createdAt must be a non-negative safe integer"));
    }
    if h.origin.as_deref().is_some_and(|o| o != "subagent") {
        return Err(bad("origin must be \"subagent\""));
    }
    if h.owner.as_deref() == Some("") {
        return Err(bad("owner must not be empty"));
    }
    let depth = h.delegation_depth.unwrap_or(0);
    if !safe(depth) || !h.seed_length.is_none_or(safe) {
        return Err(bad(
            "delegationDepth and seedLength must be non-negative safe integers",
        ));
    }
    let mut out = String::with_capacity(128);
    out.push_str("{\"type\":\"session\",\"version\":0,\"id\":");
    write_js_string(&mut out, &h.id);
    out.push_str(",\"createdAt\":");
    out.push_str(&h.created_at.to_string());
    let opt_str = |out: &mut String, key: &str, v: &Option<String>| {
        if let Some(v) = v {
            out.push_str(",\"");
            out.push_str(key);
            out.push_str("\":");
            write_js_string(out, v);
        }
    };
    opt_str(&mut out, "cwd", &h.cwd);
    opt_str(&mut out, "parentSession", &h.parent_session);
    if let Some(n) = h.seed_length {
        out.push_str(",\"seedLength\":");
        out.push_str(&n.to_string());
    }
    opt_str(&mut out, "origin", &h.origin);
    out.push_str(",\"delegationDepth\":");
    out.push_str(&depth.to_string());
    opt_str(&mut out, "agentPreset", &h.agent_preset);
    opt_str(&mut out, "owner", &h.owner);
    out.push('}');
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Event lines
// ---------------------------------------------------------------------------------------------

const CANONICAL_KEYS: [EnvelopeKey; 7] = [
    EnvelopeKey::Type,
    EnvelopeKey::Seq,
    EnvelopeKey::Time,
    EnvelopeKey::Data,
    EnvelopeKey::SourceEventSeqs,
    EnvelopeKey::SurfaceOp,
    EnvelopeKey::Ignorable,
];

const SURFACE_OP_FIRST_KEYS: [EnvelopeKey; 7] = [
    EnvelopeKey::Type,
    EnvelopeKey::Seq,
    EnvelopeKey::Time,
    EnvelopeKey::Data,
    EnvelopeKey::SurfaceOp,
    EnvelopeKey::SourceEventSeqs,
    EnvelopeKey::Ignorable,
];

fn envelope_key(name: &str) -> Option<EnvelopeKey> {
    Some(match name {
        "type" => EnvelopeKey::Type,
        "seq" => EnvelopeKey::Seq,
        "time" => EnvelopeKey::Time,
        "data" => EnvelopeKey::Data,
        "sourceEventSeqs" => EnvelopeKey::SourceEventSeqs,
        "surfaceOp" => EnvelopeKey::SurfaceOp,
        "ignorable" => EnvelopeKey::Ignorable,
        _ => return None,
    })
}

fn present(e: &Event, k: EnvelopeKey) -> bool {
    match k {
        EnvelopeKey::Type | EnvelopeKey::Seq | EnvelopeKey::Time | EnvelopeKey::Data => true,
        EnvelopeKey::SourceEventSeqs => e.source_event_seqs.is_some(),
        EnvelopeKey::SurfaceOp => e.surface_op.is_some(),
        EnvelopeKey::Ignorable => e.ignorable,
    }
}

/// The envelope keys of `e` in the order they are written.
fn key_sequence(e: &Event) -> Vec<EnvelopeKey> {
    let from = |order: &[EnvelopeKey]| order.iter().copied().filter(|&k| present(e, k)).collect();
    match &e.layout.key_order {
        KeyOrder::Canonical => from(&CANONICAL_KEYS),
        KeyOrder::SurfaceOpFirst => from(&SURFACE_OP_FIRST_KEYS),
        KeyOrder::Custom(keys) => {
            let mut out: Vec<EnvelopeKey> = Vec::with_capacity(7);
            for &k in keys.iter().chain(CANONICAL_KEYS.iter()) {
                if present(e, k) && !out.contains(&k) {
                    out.push(k);
                }
            }
            out
        }
    }
}

/// The [`KeyOrder`] that reproduces `keys` (the keys of a line, in order).
fn key_order_of(keys: &[EnvelopeKey]) -> KeyOrder {
    let matches = |order: &[EnvelopeKey]| {
        let filtered: Vec<EnvelopeKey> =
            order.iter().copied().filter(|k| keys.contains(k)).collect();
        filtered == keys
    };
    if matches(&CANONICAL_KEYS) {
        KeyOrder::Canonical
    } else if matches(&SURFACE_OP_FIRST_KEYS) {
        KeyOrder::SurfaceOpFirst
    } else {
        KeyOrder::Custom(keys.to_vec())
    }
}

fn write_seqs(out: &mut String, seqs: &[Seq]) {
    out.push('[');
    for (i, s) in seqs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&s.to_string());
    }
    out.push(']');
}

/// Appends one event as dsh writes it (`JSON.stringify(event)`, no `\n`), in the key order
/// recorded in its layout. Refuses chunk-tag types and values dsh could not read back.
///
/// ```
/// use sessionlog::event::{Event, SurfaceOp};
/// use sessionlog::interop::jsonl::write_event_line;
/// let e = Event::new("user/message", 1, 2, r#"{"id":"u1"}"#).with_surface_op(SurfaceOp::Append);
/// let mut out = String::new();
/// write_event_line(&mut out, &e).unwrap();
/// assert_eq!(out, r#"{"type":"user/message","seq":1,"time":2,"data":{"id":"u1"},"surfaceOp":"append"}"#);
/// ```
pub fn write_event_line(out: &mut String, e: &Event) -> Result<(), JsonlWriteError> {
    if chunk_rows::is_chunk_tag(&e.kind) {
        return Err(JsonlWriteError::ChunkTagCollision {
            seq: e.seq,
            kind: e.kind.clone(),
        });
    }
    let invalid = |reason: String| JsonlWriteError::InvalidEvent { seq: e.seq, reason };
    if e.seq > MAX_SAFE as u64 || !(-MAX_SAFE..=MAX_SAFE).contains(&e.time) {
        return Err(invalid("seq and time must be safe integers".into()));
    }
    let safe = |n: &u64| *n <= MAX_SAFE as u64;
    if !e
        .source_event_seqs
        .as_deref()
        .unwrap_or_default()
        .iter()
        .all(safe)
        || matches!(e.surface_op, Some(SurfaceOp::Replace { start, end }) if !safe(&start) || !safe(&end))
    {
        return Err(invalid(
            "sourceEventSeqs and surfaceOp seqs must be safe integers".into(),
        ));
    }
    json::validate_with(&e.data, &JsonLimits::default(), NegativeZero::Accept)
        .map_err(|err| invalid(format!("data is not valid JSON: {err}")))?;
    out.push('{');
    for (i, key) in key_sequence(e).into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match key {
            EnvelopeKey::Type => {
                out.push_str("\"type\":");
                write_js_string(out, &e.kind);
            }
            EnvelopeKey::Seq => {
                out.push_str("\"seq\":");
                out.push_str(&e.seq.to_string());
            }
            EnvelopeKey::Time => {
                out.push_str("\"time\":");
                out.push_str(&e.time.to_string());
            }
            EnvelopeKey::Data => {
                out.push_str("\"data\":");
                out.push_str(&e.data);
            }
            EnvelopeKey::SourceEventSeqs => {
                out.push_str("\"sourceEventSeqs\":");
                write_seqs(out, e.source_event_seqs.as_deref().unwrap_or_default());
            }
            EnvelopeKey::SurfaceOp => {
                out.push_str("\"surfaceOp\":");
                match e.surface_op {
                    Some(SurfaceOp::Replace { start, end }) => {
                        out.push_str(&format!(
                            "{{\"op\":\"replace\",\"start\":{start},\"end\":{end}}}"
                        ));
                    }
                    _ => out.push_str("\"append\""),
                }
            }
            EnvelopeKey::Ignorable => out.push_str("\"ignorable\":true"),
        }
    }
    out.push('}');
    Ok(())
}

/// Builds an [`Event`] from a scalar record's top-level members (dsh's envelope rules, §1.2).
fn event_from_members(
    members: &[json::RawMember<'_>],
    replay: bool,
    expected: Seq,
) -> Result<Event, String> {
    let mut keys: Vec<EnvelopeKey> = Vec::new();
    let mut last: [Option<&str>; 7] = [None; 7];
    for m in members {
        let name = m.key.to_string_lossy();
        let key = envelope_key(&name).ok_or_else(|| format!("unexpected key \"{name}\""))?;
        if !keys.contains(&key) {
            keys.push(key);
        }
        last[key as usize] = Some(m.value);
    }
    let get = |k: EnvelopeKey| last[k as usize];
    let value = |k: EnvelopeKey| -> Result<Option<JsonValue>, String> {
        get(k)
            .map(|t| parse_value(t).map_err(|e| e.to_string()))
            .transpose()
    };
    // (A type with a lone surrogate is reported as unsupported before this is called.)
    let kind = match value(EnvelopeKey::Type)? {
        Some(v) => v.as_str().ok_or("type must be a string")?.to_owned(),
        None => return Err("type must be a string".into()),
    };
    let seq = match value(EnvelopeKey::Seq)? {
        Some(v) => v
            .as_u64()
            .ok_or("seq must be a non-negative safe integer")?,
        None if replay => expected,
        None => return Err("seq is missing".into()),
    };
    let time = match value(EnvelopeKey::Time)? {
        Some(v) => v.as_i64().ok_or("time must be a safe integer")?,
        None if replay => 0,
        None => return Err("time is missing".into()),
    };
    let data = get(EnvelopeKey::Data).ok_or("data is missing")?.to_owned();
    let source_event_seqs = match value(EnvelopeKey::SourceEventSeqs)? {
        None => None,
        Some(v) => Some(
            v.as_array()
                .and_then(|a| a.iter().map(JsonValue::as_u64).collect::<Option<Vec<_>>>())
                .ok_or("sourceEventSeqs must be an array of non-negative safe integers")?,
        ),
    };
    let surface_op = match value(EnvelopeKey::SurfaceOp)? {
        None => None,
        Some(v) if v.as_str() == Some("append") => Some(SurfaceOp::Append),
        Some(v) => {
            let o = v
                .as_object()
                .filter(|o| o.has_exact_keys(&["op", "start", "end"]))
                .filter(|o| o.get("op").and_then(JsonValue::as_str) == Some("replace"))
                .ok_or("surfaceOp must be \"append\" or {op:\"replace\",start,end}")?;
            let start = o.get("start").and_then(JsonValue::as_u64);
            let end = o.get("end").and_then(JsonValue::as_u64);
            match (start, end) {
                (Some(start), Some(end)) => Some(SurfaceOp::Replace { start, end }),
                _ => return Err("surfaceOp start/end must be non-negative safe integers".into()),
            }
        }
    };
    let ignorable = match value(EnvelopeKey::Ignorable)? {
        None => false,
        Some(JsonValue::Bool(true)) => true,
        Some(_) => return Err("ignorable must be exactly true".into()),
    };
    let mut key_order = key_order_of(&keys);
    if replay && (get(EnvelopeKey::Seq).is_none() || get(EnvelopeKey::Time).is_none()) {
        key_order = KeyOrder::Canonical;
    }
    Ok(Event {
        kind,
        seq,
        time,
        data,
        source_event_seqs,
        surface_op,
        ignorable,
        layout: Layout {
            key_order,
            packing: Packing::Scalar,
            batch_start: false,
        },
    })
}

// ---------------------------------------------------------------------------------------------
// Scanner (dsh's SessionLogScanner)
// ---------------------------------------------------------------------------------------------

/// One event kept by the scanner, with what the later load checks need.
struct Kept {
    file_line: usize,
    seq: Seq,
    kind: Option<String>,
    ignorable: bool,
    /// `data.reason` is the string `"fallback"` (retired `request/header` reason).
    fallback_reason: bool,
    event: Result<Event, Defect>,
}

/// Why a kept record is not a valid event.
enum Defect {
    /// dsh refuses it ("invalid event envelope").
    Invalid(String),
    /// dsh accepts it but this engine cannot represent it.
    Unsupported(String),
}

/// A decoded storage record.
struct Decoded {
    /// For each event: its JavaScript `seq` value (for the gap check) and whether it is a
    /// `turn/end`.
    seqs: Vec<Option<f64>>,
    turn_end: bool,
    kept: Vec<Kept>,
    canonical: bool,
}

struct Issue {
    dsh_reason: String,
    file_line: usize,
    detail: String,
}

struct Scanner<'o> {
    opts: &'o ReadOptions,
    expected: Seq,
    issue: Option<Issue>,
    kept: Vec<Kept>,
    /// Stream offset just after the last kept line.
    committed: usize,
    /// (stream offset after the line, events kept so far) for each kept line.
    line_ends: Vec<(usize, usize)>,
    non_canonical: Vec<NonCanonicalLine>,
}

impl<'o> Scanner<'o> {
    fn new(opts: &'o ReadOptions, committed: usize) -> Self {
        Scanner {
            opts,
            expected: 0,
            issue: None,
            kept: Vec::new(),
            committed,
            line_ends: Vec::new(),
            non_canonical: Vec::new(),
        }
    }

    /// Decodes one complete line (`k` is dsh's line number: file line − 1).
    fn decode(&self, text: &str, file_line: usize) -> Result<Decoded, String> {
        let limits = &self.opts.line_limits;
        let replay = self.opts.replay_fixture;
        let members = match json::raw_members_with_policy(text, limits, NegativeZero::Accept) {
            Ok(m) => m,
            Err(JsonError::NotAnObject { .. }) => {
                // A non-object record passes through undecoded; its seq is undefined.
                json::validate_with(text, limits, NegativeZero::Accept)
                    .map_err(|e| e.to_string())?;
                return Ok(Decoded {
                    seqs: vec![None],
                    turn_end: false,
                    kept: vec![Kept {
                        file_line,
                        seq: self.expected,
                        kind: None,
                        ignorable: false,
                        fallback_reason: false,
                        event: Err(Defect::Invalid("the record is not a JSON object".into())),
                    }],
                    canonical: false,
                });
            }
            Err(e) => return Err(e.to_string()),
        };
        let last = |name: &str| {
            members
                .iter()
                .rev()
                .find(|m| m.key == name)
                .map(|m| m.value)
        };
        let type_value = last("type")
            .map(parse_value)
            .transpose()
            .map_err(|e| e.to_string())?;
        let type_str = type_value
            .as_ref()
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        if let Some(kind) = type_str.as_deref().and_then(ChunkKind::from_tag) {
            let value =
                json::parse_with(text, limits, NegativeZero::Accept).map_err(|e| e.to_string())?;
            let mut obj = value.as_object().cloned().unwrap_or_default();
            if replay {
                if !obj.contains_key("seq0") {
                    obj.insert(
                        "seq0",
                        JsonValue::number(self.expected as f64).unwrap_or_default(),
                    );
                }
                if !obj.contains_key("time0") {
                    obj.insert("time0", JsonValue::number(0.0).unwrap_or_default());
                }
            }
            let events = chunk_rows::decode_jsonl_record(kind, &obj).map_err(|e| e.to_string())?;
            let rebuilt =
                match chunk_rows::pack(&events, Codec::Jsonl, PackPolicy::Remembered).as_slice() {
                    [Record::Row(row)] => row.to_jsonl_line() == text,
                    _ => false,
                };
            return Ok(Decoded {
                seqs: events.iter().map(|e| Some(e.seq as f64)).collect(),
                turn_end: false,
                kept: events
                    .into_iter()
                    .map(|e| Kept {
                        file_line,
                        seq: e.seq,
                        kind: Some(e.kind.clone()),
                        ignorable: false,
                        fallback_reason: false,
                        event: Ok(e),
                    })
                    .collect(),
                canonical: rebuilt,
            });
        }
        let seq_value = match last("seq")
            .map(parse_value)
            .transpose()
            .map_err(|e| e.to_string())?
        {
            Some(v) => v.as_f64(),
            None if replay => Some(self.expected as f64),
            None => None,
        };
        let lone_surrogate_type = type_value
            .as_ref()
            .and_then(JsonValue::as_js_string)
            .is_some_and(json::JsString::has_lone_surrogates);
        let event = if lone_surrogate_type {
            Err(Defect::Unsupported(
                "the event type holds a lone UTF-16 surrogate".into(),
            ))
        } else {
            event_from_members(&members, replay, self.expected).map_err(Defect::Invalid)
        };
        let canonical = match &event {
            Ok(e) => {
                let mut line = String::with_capacity(text.len());
                write_event_line(&mut line, e).is_ok() && line == text
            }
            Err(_) => false,
        };
        let fallback_reason = type_str.as_deref() == Some("request/header")
            && last("data")
                .and_then(|d| {
                    json::raw_member_with_policy(d, &["reason"], limits, NegativeZero::Accept)
                        .ok()
                        .flatten()
                })
                .and_then(|r| parse_value(r).ok())
                .is_some_and(|v| v.as_str() == Some("fallback"));
        let ignorable = matches!(
            last("ignorable").map(parse_value),
            Some(Ok(JsonValue::Bool(true)))
        );
        Ok(Decoded {
            seqs: vec![seq_value],
            turn_end: type_str.as_deref() == Some("turn/end"),
            kept: vec![Kept {
                file_line,
                seq: self.expected,
                kind: type_str,
                ignorable,
                fallback_reason,
                event,
            }],
            canonical,
        })
    }

    /// Feeds one complete line (without `\n`) that ends at stream offset `end`.
    fn feed(&mut self, line: &[u8], k: usize, end: usize) -> Result<(), JsonlReadError> {
        let file_line = k + 1;
        let text = String::from_utf8_lossy(line);
        let lossy = matches!(text, std::borrow::Cow::Owned(_));
        let decoded = self.decode(&text, file_line);
        let decoded = match decoded {
            Err(detail) => {
                if self.issue.is_none() {
                    self.issue = Some(Issue {
                        dsh_reason: format!("unparsable committed event at line {k}"),
                        file_line,
                        detail,
                    });
                }
                return Ok(());
            }
            Ok(d) => d,
        };
        if let Some(issue) = &self.issue {
            if decoded.turn_end {
                return Err(JsonlReadError::CommittedCorruption {
                    dsh_reason: issue.dsh_reason.clone(),
                    file_line: issue.file_line,
                    detail: issue.detail.clone(),
                    turn_end_line: file_line,
                });
            }
            return Ok(());
        }
        if let Some(&got) = decoded.seqs.first()
            && got != Some(self.expected as f64)
        {
            let got = got.map_or_else(|| "undefined".to_owned(), js_number_to_string);
            let issue = Issue {
                dsh_reason: format!(
                    "seq gap in committed region at line {k} (expected {}, got {got})",
                    self.expected
                ),
                file_line,
                detail: "the record does not continue the log".to_owned(),
            };
            if decoded.turn_end {
                return Err(JsonlReadError::CommittedCorruption {
                    dsh_reason: issue.dsh_reason,
                    file_line,
                    detail: issue.detail,
                    turn_end_line: file_line,
                });
            }
            self.issue = Some(issue);
            return Ok(());
        }
        let n = decoded.kept.len() as u64;
        self.kept.extend(decoded.kept);
        self.expected += n;
        self.committed = end;
        self.line_ends.push((end, self.kept.len()));
        if lossy {
            self.non_canonical.push(NonCanonicalLine {
                file_line,
                reason: "invalid UTF-8 replaced by U+FFFD",
            });
        } else if !decoded.canonical {
            self.non_canonical.push(NonCanonicalLine {
                file_line,
                reason: "not the JSON.stringify form dsh writes",
            });
        }
        Ok(())
    }

    /// Feeds every complete line of `body` (stream offsets start at `base`, dsh line numbers at
    /// `first_k`). Returns the offset after the last complete line and the next line number.
    fn feed_all(
        &mut self,
        body: &[u8],
        base: usize,
        first_k: usize,
    ) -> Result<(usize, usize), JsonlReadError> {
        let mut pos = 0;
        let mut k = first_k;
        while let Some(nl) = body[pos..].iter().position(|&c| c == b'\n') {
            self.feed(&body[pos..pos + nl], k, base + pos + nl + 1)?;
            pos += nl + 1;
            k += 1;
        }
        Ok((base + pos, k))
    }
}

// ---------------------------------------------------------------------------------------------
// Load checks after the scan
// ---------------------------------------------------------------------------------------------

fn finish_events(header: &SessionHeader, kept: Vec<Kept>) -> Result<Vec<Event>, JsonlReadError> {
    let id = &header.id;
    // 1. Retired shapes (during legacy normalisation).
    for k in &kept {
        let what = match k.kind.as_deref() {
            Some("request/header-delta") => Some("unsupported legacy request/header-delta format"),
            Some("mode/set") => Some("unsupported legacy mode/set event"),
            Some("request/header") if k.fallback_reason => {
                Some("unsupported legacy request/header reason \"fallback\"")
            }
            _ => None,
        };
        if let Some(what) = what {
            return Err(JsonlReadError::RetiredEvent {
                id: id.clone(),
                seq: k.seq,
                what,
            });
        }
    }
    // 2. Unknown types.
    for k in &kept {
        if let Some(kind) = &k.kind
            && !is_known_event_type(kind)
            && !k.ignorable
        {
            return Err(JsonlReadError::UnknownEventType {
                id: id.clone(),
                kind: kind.clone(),
                seq: k.seq,
            });
        }
    }
    // 3. Envelopes.
    let mut events = Vec::with_capacity(kept.len());
    for k in kept {
        match k.event {
            Ok(e) => events.push(e),
            Err(Defect::Unsupported(reason)) => {
                return Err(JsonlReadError::Unsupported {
                    file_line: k.file_line,
                    reason,
                });
            }
            Err(Defect::Invalid(reason)) => {
                return Err(JsonlReadError::InvalidEnvelope {
                    id: id.clone(),
                    index: k.seq,
                    file_line: k.file_line,
                    reason,
                });
            }
        }
    }
    Ok(events)
}

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

/// Reads a dsh JSONL session log, plain or zstd (detected from the content, see
/// [`detect_compression`]).
///
/// ```
/// use sessionlog::interop::jsonl::{read, write, ReadOptions, WriteOptions};
/// let file = concat!(
///     r#"{"type":"session","version":0,"id":"s1","createdAt":1000,"cwd":"/work","delegationDepth":0}"#, "\n",
///     r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#, "\n",
///     r#"{"type":"turn/end","seq":1,"time":2,"data":{"turn":1,"reason":{"kind":"completed"}}}"#, "\n",
///     r#"{"type":"step/sta"#, // torn tail
/// );
/// let log = read(file.as_bytes(), &ReadOptions::default()).unwrap();
/// assert_eq!(log.events.len(), 2);
/// let torn = log.torn.as_ref().unwrap();
/// assert_eq!((torn.file_line, torn.reason.as_str()), (4, "incomplete final line"));
/// // Written back: the committed prefix, byte for byte.
/// let again = write(&log.header, &log.events, &log.batches, &WriteOptions::default()).unwrap();
/// assert_eq!(again, &file.as_bytes()[..torn.truncate_to as usize]);
/// ```
pub fn read(bytes: &[u8], opts: &ReadOptions) -> Result<JsonlLog, JsonlReadError> {
    match detect_compression(bytes) {
        Compression::None => read_plain(bytes, opts),
        Compression::Zstd => read_zstd(bytes, opts),
    }
}

/// Parses the header line bytes and starts a scanner after it.
fn read_header<'o>(
    line: &[u8],
    after: usize,
    opts: &'o ReadOptions,
) -> Result<(SessionHeader, Scanner<'o>), JsonlReadError> {
    let text = String::from_utf8_lossy(line);
    let lossy = matches!(text, std::borrow::Cow::Owned(_));
    let (header, canonical) = parse_header_line(&text, opts)?;
    let mut scanner = Scanner::new(opts, after);
    if lossy {
        scanner.non_canonical.push(NonCanonicalLine {
            file_line: 1,
            reason: "invalid UTF-8 replaced by U+FFFD",
        });
    } else if !canonical {
        scanner.non_canonical.push(NonCanonicalLine {
            file_line: 1,
            reason: "header line is not the form dsh writes",
        });
    }
    Ok((header, scanner))
}

/// Reads a plain `session.jsonl`.
pub fn read_plain(bytes: &[u8], opts: &ReadOptions) -> Result<JsonlLog, JsonlReadError> {
    let Some(header_end) = bytes.iter().position(|&c| c == b'\n') else {
        return Err(not_header(if bytes.is_empty() {
            "the file is empty"
        } else {
            "the header line has no terminating newline"
        }));
    };
    let (header, mut scanner) = read_header(&bytes[..header_end], header_end + 1, opts)?;
    let body = &bytes[header_end + 1..];
    let (_, next_k) = scanner.feed_all(body, header_end + 1, 1)?;
    let committed = scanner.committed;
    let torn = if committed < bytes.len() {
        let (reason, detail, file_line) = match &scanner.issue {
            Some(issue) => (
                issue.dsh_reason.clone(),
                Some(issue.detail.clone()),
                issue.file_line,
            ),
            None => ("incomplete final line".to_owned(), None, next_k + 1),
        };
        Some(TornTail {
            file_line,
            truncate_to: committed as u64,
            bytes_cut: (bytes.len() - committed) as u64,
            reason,
            detail,
            recovered_events: 0,
        })
    } else {
        None
    };
    let non_canonical = std::mem::take(&mut scanner.non_canonical);
    let events = finish_events(&header, scanner.kept)?;
    let batches = if events.is_empty() {
        Vec::new()
    } else {
        vec![events.len()]
    };
    Ok(JsonlLog {
        header,
        events,
        compression: Compression::None,
        batches,
        torn,
        non_canonical,
    })
}

/// Splits a zstd file into complete frames (dsh's `scanZstdFrames`): returns their byte ranges
/// and the start of an incomplete final frame, if any.
pub fn scan_zstd_frames(
    bytes: &[u8],
) -> Result<(Vec<Range<usize>>, Option<usize>), JsonlReadError> {
    let mut frames = Vec::new();
    let mut pos = 0;
    let structure =
        |offset: usize, reason: &'static str| JsonlReadError::ZstdStructure { offset, reason };
    while pos < bytes.len() {
        let start = pos;
        let avail = &bytes[pos..];
        let n = avail.len().min(4);
        if avail[..n] != ZSTD_MAGIC[..n] {
            return Err(structure(start, "invalid frame magic"));
        }
        if n < 4 {
            return Ok((frames, Some(start)));
        }
        let Some(&fhd) = bytes.get(pos + 4) else {
            return Ok((frames, Some(start)));
        };
        if fhd & 0x18 != 0 {
            return Err(structure(
                start + 4,
                "reserved bit set in the frame header descriptor",
            ));
        }
        let single_segment = fhd & 0x20 != 0;
        let fcs_bytes = match fhd >> 6 {
            0 => usize::from(single_segment),
            1 => 2,
            2 => 4,
            _ => 8,
        };
        let dict_bytes = [0, 1, 2, 4][usize::from(fhd & 3)];
        let header_len = 1 + usize::from(!single_segment) + dict_bytes + fcs_bytes;
        pos += 4 + header_len;
        if pos > bytes.len() {
            return Ok((frames, Some(start)));
        }
        loop {
            let Some(h) = bytes.get(pos..pos + 3) else {
                return Ok((frames, Some(start)));
            };
            let block = u32::from(h[0]) | (u32::from(h[1]) << 8) | (u32::from(h[2]) << 16);
            let last = block & 1 != 0;
            let kind = (block >> 1) & 3;
            let size = (block >> 3) as usize;
            if kind == 3 {
                return Err(structure(pos, "reserved block type"));
            }
            pos += 3 + if kind == 1 { 1 } else { size };
            if pos > bytes.len() {
                return Ok((frames, Some(start)));
            }
            if last {
                break;
            }
        }
        if fhd & 0x04 != 0 {
            pos += 4;
            if pos > bytes.len() {
                return Ok((frames, Some(start)));
            }
        }
        frames.push(start..pos);
    }
    Ok((frames, None))
}

/// Decompresses one frame. `Ok((plaintext, complete))`; `complete` is false when the input
/// ended before the frame did. Errors when the data is corrupt (checksum included).
fn decompress_frame(
    frame: &[u8],
    budget: &mut u64,
    limit: u64,
) -> Result<Result<(Vec<u8>, bool), ()>, JsonlReadError> {
    use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};
    let Ok(mut decoder) = Decoder::new() else {
        return Ok(Err(()));
    };
    let mut input = InBuffer::around(frame);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let mut ob = OutBuffer::around(&mut buf[..]);
        let hint = match decoder.run(&mut input, &mut ob) {
            Ok(h) => h,
            Err(_) => return Ok(Err(())),
        };
        let produced = ob.pos();
        if produced as u64 > *budget {
            return Err(JsonlReadError::DecompressedTooLarge { limit });
        }
        *budget -= produced as u64;
        out.extend_from_slice(&buf[..produced]);
        if hint == 0 {
            return Ok(Ok((out, input.pos() == frame.len())));
        }
        if input.pos() == frame.len() && produced < buf.len() {
            return Ok(Ok((out, false)));
        }
    }
}

/// Reads a `session.jsonl.zstd`.
pub fn read_zstd(bytes: &[u8], opts: &ReadOptions) -> Result<JsonlLog, JsonlReadError> {
    let (frames, torn_start) = scan_zstd_frames(bytes)?;
    let Some(first) = frames.first() else {
        return Err(JsonlReadError::ZstdEmpty);
    };
    let limit = opts.max_decompressed_bytes;
    let mut budget = limit;
    let plain = |range: &Range<usize>, budget: &mut u64| -> Result<Vec<u8>, JsonlReadError> {
        match decompress_frame(&bytes[range.clone()], budget, limit)? {
            Ok((text, true)) => Ok(text),
            _ => Err(JsonlReadError::ZstdFrame {
                offset: range.start,
            }),
        }
    };
    let header_plain = plain(first, &mut budget)?;
    let newlines = header_plain.iter().filter(|&&c| c == b'\n').count();
    if newlines != 1 || header_plain.last() != Some(&b'\n') {
        return Err(JsonlReadError::ZstdHeaderFrame);
    }
    let base = header_plain.len();
    let (header, mut scanner) = read_header(&header_plain[..base - 1], base, opts)?;
    // All complete frames, as one stream.
    let mut stream = Vec::new();
    let mut frame_ends = Vec::with_capacity(frames.len());
    for range in &frames[1..] {
        stream.extend_from_slice(&plain(range, &mut budget)?);
        frame_ends.push(base + stream.len());
    }
    let (_, next_k) = scanner.feed_all(&stream, base, 1)?;
    let fed = base + stream.len();
    if let Some(issue) = &scanner.issue {
        return Err(JsonlReadError::ZstdTornRecord {
            detail: format!(
                "{} (file line {}: {})",
                issue.dsh_reason, issue.file_line, issue.detail
            ),
        });
    }
    if scanner.committed != fed {
        return Err(JsonlReadError::ZstdTornRecord {
            detail: format!(
                "the last frame ends inside a line (after byte {} of the text)",
                scanner.committed
            ),
        });
    }
    // Events per frame: the kept lines ending inside each frame.
    let mut batches = Vec::with_capacity(frame_ends.len());
    let mut counted = 0;
    for &end in &frame_ends {
        let upto = scanner
            .line_ends
            .iter()
            .take_while(|(e, _)| *e <= end)
            .last()
            .map_or(0, |&(_, n)| n);
        if upto > counted {
            batches.push(upto - counted);
            counted = upto;
        }
    }
    let mut torn = None;
    if let Some(start) = torn_start {
        // Recover the complete records of the incomplete final frame (flush-mode decode; a
        // decoder error yields no plaintext).
        let partial = match decompress_frame(&bytes[start..], &mut budget, limit)? {
            Ok((text, _)) => text,
            Err(()) => Vec::new(),
        };
        let before = scanner.kept.len();
        let (_, after_k) = scanner.feed_all(&partial, fed, next_k)?;
        let recovered = scanner.kept.len() - before;
        if recovered > 0 {
            batches.push(recovered);
        }
        let (reason, detail, file_line) = match &scanner.issue {
            Some(issue) => (
                format!("incomplete final Zstandard frame; {}", issue.dsh_reason),
                Some(issue.detail.clone()),
                issue.file_line,
            ),
            None => (
                "incomplete final Zstandard frame".to_owned(),
                None,
                after_k + 1,
            ),
        };
        torn = Some(TornTail {
            file_line,
            truncate_to: start as u64,
            bytes_cut: (bytes.len() - start) as u64,
            reason,
            detail,
            recovered_events: recovered,
        });
    }
    let non_canonical = std::mem::take(&mut scanner.non_canonical);
    let events = finish_events(&header, scanner.kept)?;
    Ok(JsonlLog {
        header,
        events,
        compression: Compression::Zstd,
        batches,
        torn,
        non_canonical,
    })
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

/// Appends the lines of one append batch, each followed by `\n` (dsh's `eventLines(batch) +
/// "\n"`), packing chunk runs as `packing` says.
pub fn write_batch(
    out: &mut String,
    events: &[Event],
    packing: Option<PackPolicy>,
) -> Result<(), JsonlWriteError> {
    if let Some(e) = events.iter().find(|e| chunk_rows::is_chunk_tag(&e.kind)) {
        return Err(JsonlWriteError::ChunkTagCollision {
            seq: e.seq,
            kind: e.kind.clone(),
        });
    }
    match packing {
        None => {
            for e in events {
                write_event_line(out, e)?;
                out.push('\n');
            }
        }
        Some(policy) => {
            for record in chunk_rows::pack(events, Codec::Jsonl, policy) {
                match record {
                    Record::Event(e) => write_event_line(out, e)?,
                    Record::Row(row) => row.write_jsonl(out),
                }
                out.push('\n');
            }
        }
    }
    Ok(())
}

fn batch_ranges(events: &[Event], batches: &[usize]) -> Result<Vec<Range<usize>>, JsonlWriteError> {
    if batches.is_empty() {
        let whole = 0..events.len();
        return Ok(if events.is_empty() {
            Vec::new()
        } else {
            Vec::from([whole])
        });
    }
    let total: usize = batches.iter().sum();
    if total != events.len() {
        return Err(JsonlWriteError::BatchMismatch {
            total,
            events: events.len(),
        });
    }
    let mut start = 0;
    Ok(batches
        .iter()
        .filter(|&&n| n > 0)
        .map(|&n| {
            let r = start..start + n;
            start += n;
            r
        })
        .collect())
}

fn compress_frame(text: &[u8]) -> Result<Vec<u8>, JsonlWriteError> {
    use std::io::Write;
    let zerr = |e: std::io::Error| JsonlWriteError::Zstd(e.to_string());
    let mut enc = zstd::stream::Encoder::new(Vec::new(), ZSTD_LEVEL).map_err(zerr)?;
    enc.include_checksum(true).map_err(zerr)?;
    enc.include_contentsize(false).map_err(zerr)?;
    enc.write_all(text).map_err(zerr)?;
    enc.finish().map_err(zerr)
}

/// Writes a whole session log as dsh would: the header line, then each append batch
/// (`batches` gives the number of events in each; empty means one batch of all events). Plain
/// mode concatenates the lines; zstd mode writes the header line as the first frame and each
/// batch as one further frame (level 3, content checksum, no content size, as dsh's files).
///
/// Events must be contiguous from seq 0. A logical event whose type is a chunk-row tag is
/// refused ([`JsonlWriteError::ChunkTagCollision`]).
pub fn write(
    header: &SessionHeader,
    events: &[Event],
    batches: &[usize],
    opts: &WriteOptions,
) -> Result<Vec<u8>, JsonlWriteError> {
    for (index, e) in events.iter().enumerate() {
        if e.seq != index as u64 {
            return Err(JsonlWriteError::NotContiguous { index, seq: e.seq });
        }
    }
    let ranges = batch_ranges(events, batches)?;
    let mut head = write_header_line(header)?;
    head.push('\n');
    match opts.compression {
        Compression::None => {
            let mut out = head;
            for r in ranges {
                write_batch(&mut out, &events[r], opts.packing)?;
            }
            Ok(out.into_bytes())
        }
        Compression::Zstd => {
            let mut out = compress_frame(head.as_bytes())?;
            for r in ranges {
                let mut text = String::new();
                write_batch(&mut text, &events[r], opts.packing)?;
                out.extend_from_slice(&compress_frame(text.as_bytes())?);
            }
            Ok(out)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------------------------------

fn safe_unit(u: u16) -> bool {
    matches!(u, 0x30..=0x39 | 0x41..=0x5A | 0x61..=0x7A | 0x2E | 0x5F | 0x2D)
}

fn push_escaped(out: &mut String, u: u16) {
    out.push_str(&format!("~{u:04X}"));
}

/// dsh's `encodeSegment(id)`: one path segment per session id. Each UTF-16 code unit in
/// `[A-Za-z0-9._-]` is kept, every other one (including `~`) becomes `~XXXX` (uppercase hex);
/// the segments `.` and `..` become `~002E` and `~002E~002E`; `""` is refused. Injective, and
/// no result can name a parent directory or contain a separator.
///
/// ```
/// use sessionlog::interop::jsonl::encode_session_id;
/// assert_eq!(encode_session_id("/etc/passwd").unwrap(), "~002Fetc~002Fpasswd");
/// assert_eq!(encode_session_id("..").unwrap(), "~002E~002E");
/// assert_eq!(encode_session_id("😀").unwrap(), "~D83D~DE00");
/// ```
pub fn encode_session_id(id: &str) -> Result<String, JsonlPathError> {
    match id {
        "" => return Err(JsonlPathError::EmptyId),
        "." => return Ok("~002E".to_owned()),
        ".." => return Ok("~002E~002E".to_owned()),
        _ => {}
    }
    let mut out = String::with_capacity(id.len());
    for u in id.encode_utf16() {
        if safe_unit(u) {
            out.push(char::from(u as u8));
        } else {
            push_escaped(&mut out, u);
        }
    }
    Ok(out)
}

/// dsh's `projectKey(cwd)`: runs of `/`, `\` and `:` become one `-`, safe units pass, others
/// become `~XXXX`, leading `-` are stripped (empty → `root`), truncated to 251 code units and
/// wrapped as `--<slug>--`. Lossy on purpose (different cwds may share a directory).
///
/// ```
/// use sessionlog::interop::jsonl::project_key;
/// assert_eq!(project_key("/Users/qyj/work/deepseek-harness").unwrap(), "--Users-qyj-work-deepseek-harness--");
/// assert_eq!(project_key("C:\\work\\agent").unwrap(), "--C-work-agent--");
/// assert_eq!(project_key("/").unwrap(), "--root--");
/// ```
pub fn project_key(cwd: &str) -> Result<String, JsonlPathError> {
    if cwd.is_empty() {
        return Err(JsonlPathError::EmptyCwd);
    }
    let mut slug = String::with_capacity(cwd.len());
    let mut in_separator = false;
    for u in cwd.encode_utf16() {
        if matches!(u, 0x2F | 0x5C | 0x3A) {
            if !in_separator {
                slug.push('-');
            }
            in_separator = true;
            continue;
        }
        in_separator = false;
        if safe_unit(u) {
            slug.push(char::from(u as u8));
        } else {
            push_escaped(&mut slug, u);
        }
    }
    let trimmed = slug.trim_start_matches('-');
    let body = if trimmed.is_empty() { "root" } else { trimmed };
    // The slug is ASCII: code units are bytes.
    let body = &body[..body.len().min(251)];
    Ok(format!("--{body}--"))
}

/// The project directory of a session: `_no-cwd` or [`project_key`]`(cwd)`.
pub fn project_dir(cwd: Option<&str>) -> Result<String, JsonlPathError> {
    match cwd {
        None => Ok(NO_CWD_DIR.to_owned()),
        Some(c) => project_key(c),
    }
}

/// Where dsh keeps a session, relative to its JSONL root:
/// `<project dir>/<encoded id>/session.jsonl[.zstd]`.
///
/// ```
/// use sessionlog::event::SessionHeader;
/// use sessionlog::interop::jsonl::{session_relative_path, Compression};
/// let mut h = SessionHeader::new("s1", 1000);
/// h.cwd = Some("/work".into());
/// assert_eq!(session_relative_path(&h, Compression::None).unwrap().to_str(), Some("--work--/s1/session.jsonl"));
/// ```
pub fn session_relative_path(
    header: &SessionHeader,
    compression: Compression,
) -> Result<PathBuf, JsonlPathError> {
    let mut p = PathBuf::from(project_dir(header.cwd.as_deref())?);
    p.push(encode_session_id(&header.id)?);
    p.push(compression.file_name());
    Ok(p)
}

/// [`session_relative_path`] under `root`.
pub fn session_path(
    root: &Path,
    header: &SessionHeader,
    compression: Compression,
) -> Result<PathBuf, JsonlPathError> {
    Ok(root.join(session_relative_path(header, compression)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_types_are_48_and_sorted() {
        assert_eq!(KNOWN_EVENT_TYPES.len(), 48);
        assert!(KNOWN_EVENT_TYPES.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn js_display_matches_string() {
        let v = |t: &str| parse_value(t).unwrap();
        assert_eq!(js_display(None), "undefined");
        assert_eq!(js_display(Some(&v("123"))), "123");
        assert_eq!(js_display(Some(&v("1e21"))), "1e+21");
        assert_eq!(js_display(Some(&v("[1,[2,null],\"a\"]"))), "1,2,,a");
        assert_eq!(js_display(Some(&v("{}"))), "[object Object]");
    }

    #[test]
    fn key_order_inference() {
        use EnvelopeKey::*;
        assert_eq!(key_order_of(&[Type, Seq, Time, Data]), KeyOrder::Canonical);
        assert_eq!(
            key_order_of(&[Type, Seq, Time, Data, SurfaceOp, SourceEventSeqs]),
            KeyOrder::SurfaceOpFirst
        );
        assert_eq!(
            key_order_of(&[Seq, Type, Time, Data]),
            KeyOrder::Custom(vec![Seq, Type, Time, Data])
        );
    }
}
