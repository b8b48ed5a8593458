//! Errors of the session semantics, one enum per rule family.
//!
//! Every message reproduces dsh's wording (the fragment dsh's own tests match), so a refusal
//! reads the same whether dsh or sessionlog reports it. The context wrappers
//! ([`RuleViolation`], [`LoadError`](super::load::LoadError)) add the seq or index where the rule failed.

use crate::event::Seq;
use crate::json::JsonError;
use std::fmt;
use thiserror::Error;

/// Where a shape or receipt rule failed: the subject dsh names in its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// A live append: `session event "<type>"` (the seq is added by [`RuleViolation`]).
    Append {
        /// The event type.
        kind: String,
    },
    /// A seed/restore event checked by type: `seed <type> at index <i>`.
    SeedType {
        /// The event type.
        kind: String,
        /// Index in the seed.
        index: u64,
    },
    /// A seed/restore event: `seed event at index <i>`.
    SeedIndex {
        /// Index in the seed.
        index: u64,
    },
    /// A stored event during load normalisation: `session event at seq <n>`.
    Stored {
        /// The event's seq.
        seq: Seq,
    },
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Append { kind } => write!(f, "session event \"{kind}\""),
            Subject::SeedType { kind, index } => write!(f, "seed {kind} at index {index}"),
            Subject::SeedIndex { index } => write!(f, "seed event at index {index}"),
            Subject::Stored { seq } => write!(f, "session event at seq {seq}"),
        }
    }
}

/// Envelope, payload-shape and receipt rules (§1.1, §1.5 steps 1–4, §2.2).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ShapeError {
    /// `data` (or the whole seed event) is not lossless JSON (§3).
    #[error("{subject} carries non-JSON-serializable data ({detail})")]
    NonJsonData {
        /// Where.
        subject: Subject,
        /// What the JSON validator found.
        #[source]
        detail: JsonError,
    },
    /// A seed event that is not lossless JSON as a whole.
    #[error("{subject} is not losslessly JSON-serializable ({detail})")]
    NotLossless {
        /// Where.
        subject: Subject,
        /// What the JSON validator found.
        #[source]
        detail: JsonError,
    },
    /// Extra key, non-string type, bad seq/time, missing data, `ignorable` not `true`.
    #[error("{subject} has an invalid event envelope")]
    InvalidEnvelope {
        /// Where.
        subject: Subject,
    },
    /// The retired `request/header-delta` type.
    #[error("{subject} uses unsupported legacy request/header-delta format")]
    LegacyHeaderDelta {
        /// Where.
        subject: Subject,
    },
    /// A retired record type dsh refuses or rewrites on load (`mode/set`,
    /// `steering/message`): refused on append so every stored log reloads.
    #[error("{subject} uses unsupported legacy {kind} format")]
    LegacyType {
        /// Where.
        subject: Subject,
        /// The retired type.
        kind: String,
    },
    /// A `turn/start`/`turn/end` dsh's loader refuses as a malformed pre-react-loop record
    /// (e.g. `turn` < 1, extra keys, an unknown-shaped reason): refused on append.
    #[error("{subject} is a malformed pre-react-loop {kind} (dsh refuses to load it)")]
    MalformedTurnRecord {
        /// Where.
        subject: Subject,
        /// `turn/start` or `turn/end`.
        kind: String,
    },
    /// `request/header` with `reason: "fallback"`.
    #[error("{subject} uses unsupported legacy request/header reason \"fallback\"")]
    LegacyFallback {
        /// Where.
        subject: Subject,
    },
    /// `request/header` whose `header.config` lacks non-empty `provider`/`model`.
    #[error("{subject} lacks provider/model")]
    HeaderLacksProviderModel {
        /// Where.
        subject: Subject,
    },
    /// `config.reasoningEffort` present but not a non-empty string.
    #[error("{subject} has an invalid reasoningEffort")]
    InvalidReasoningEffort {
        /// Where.
        subject: Subject,
    },
    /// `header.adapterDefaults` malformed.
    #[error("{subject} has invalid adapterDefaults")]
    InvalidAdapterDefaults {
        /// Where.
        subject: Subject,
    },
    /// Message missing or without a non-empty string `id`.
    #[error("{subject} lacks an identified message")]
    MessageLacksId {
        /// Where.
        subject: Subject,
    },
    /// Wrong message role.
    #[error("{subject} message must have role \"{expected}\"")]
    MessageRole {
        /// Where.
        subject: Subject,
        /// The required role.
        expected: &'static str,
    },
    /// `source` not an object with a non-empty string `kind`.
    #[error("{subject} message has invalid source")]
    MessageInvalidSource {
        /// Where.
        subject: Subject,
    },
    /// `content` not an array.
    #[error("{subject} message has invalid content")]
    MessageInvalidContent {
        /// Where.
        subject: Subject,
    },
    /// Assistant message without a `model` source carrying provider and model.
    #[error("{subject} message must have model source")]
    MessageModelSource {
        /// Where.
        subject: Subject,
    },
    /// Tool result without a `tool` source carrying a non-empty `callId`.
    #[error("{subject} message must have tool source")]
    MessageToolSource {
        /// Where.
        subject: Subject,
    },
    /// Tool result whose content is not exactly one `tool-result` block with array content.
    #[error("{subject} message must contain one tool-result block")]
    MessageToolResultBlock {
        /// Where.
        subject: Subject,
    },
    /// Tool result block `toolCallId` differs from `source.callId`.
    #[error("{subject} message has mismatched tool call ids")]
    MessageMismatchedToolCallIds {
        /// Where.
        subject: Subject,
    },
    /// `data.mutations` present but not a non-empty array.
    #[error("{subject} has invalid file mutations")]
    InvalidMutations {
        /// Where.
        subject: Subject,
    },
    /// One file mutation receipt breaks the receipt rules.
    #[error("{subject} file mutation at index {index} is invalid")]
    InvalidMutation {
        /// Where.
        subject: Subject,
        /// Index in `data.mutations`.
        index: usize,
    },
    /// One diff of a receipt breaks the diff rules.
    #[error("{subject} file mutation at index {index} diff at index {diff} is invalid")]
    InvalidMutationDiff {
        /// Where.
        subject: Subject,
        /// Index in `data.mutations`.
        index: usize,
        /// Index in `diffs`.
        diff: usize,
    },
    /// A `commitOrder` already used in this session (or twice in the event).
    #[error("{subject} reuses file mutation commit order {order}")]
    CommitOrderReused {
        /// Where.
        subject: Subject,
        /// The order, printed as JavaScript prints the number.
        order: String,
    },
}

/// Surface rules (§4.3–§4.7), with dsh's messages.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SurfaceError {
    /// §4.5 step 1.
    #[error("session event seq {seq} is not contiguous; expected {expected}")]
    NotContiguous {
        /// The event's seq.
        seq: Seq,
        /// The seq the log expects next.
        expected: Seq,
    },
    /// `surfaceOp` on a log-only type.
    #[error("session event \"{kind}\" is not surface-eligible and cannot carry surfaceOp")]
    SurfaceOpOnLogOnly {
        /// The event type.
        kind: String,
    },
    /// `sourceEventSeqs` on a log-only type.
    #[error("session event \"{kind}\" is not surface-eligible and cannot carry sourceEventSeqs")]
    SourcesOnLogOnly {
        /// The event type.
        kind: String,
    },
    /// A surface type without `surfaceOp`.
    #[error("session event \"{kind}\" is surface-eligible and requires a surfaceOp marker")]
    MissingSurfaceOp {
        /// The event type.
        kind: String,
    },
    /// `surfaceOp` is neither `"append"` nor an object.
    #[error("session event \"{kind}\" carries an invalid surfaceOp")]
    InvalidSurfaceOp {
        /// The event type.
        kind: String,
    },
    /// `surfaceOp` object that is not exactly `{op:"replace",start,end}`.
    #[error("session event \"{kind}\" carries an invalid replace surfaceOp")]
    InvalidReplaceOp {
        /// The event type.
        kind: String,
    },
    /// §4.4 rule 1.
    #[error("sourceEventSeqs on event at seq {seq} must be an array when present")]
    SourcesNotArray {
        /// The event's seq.
        seq: Seq,
    },
    /// §4.4 rule 2.
    #[error("sourceEventSeqs must not be empty except on assistant/message")]
    SourcesEmpty {
        /// The event's seq.
        seq: Seq,
    },
    /// §4.4 rule 3.
    #[error(
        "session event \"{kind}\" sourceEventSeqs must densely contain non-negative safe integers"
    )]
    SourcesNotDense {
        /// The event type.
        kind: String,
    },
    /// §4.4 rule 4.
    #[error("sourceEventSeqs must not contain duplicates")]
    SourcesDuplicate {
        /// The event's seq.
        seq: Seq,
    },
    /// §4.4 rule 5.
    #[error("sourceEventSeqs must reference earlier events: {source_seq} >= current seq {seq}")]
    SourcesNotEarlier {
        /// The first offending source.
        source_seq: Seq,
        /// The event's seq.
        seq: Seq,
    },
    /// §4.4 rule 6.
    #[error("surface replace: sourceEventSeqs must include every shadowed surface node; missing {}", join_seqs(.missing))]
    SourcesMissingShadowed {
        /// Shadowed seqs not cited, in surface order.
        missing: Vec<Seq>,
    },
    /// §4.5 4a.
    #[error("surface replace: start seq {start} not found in surface")]
    StartNotFound {
        /// The replace start.
        start: Seq,
    },
    /// §4.5 4b.
    #[error("surface replace: end seq {end} not found in surface")]
    EndNotFound {
        /// The replace end.
        end: Seq,
    },
    /// §4.5 4c.
    #[error(
        "surface replace: start seq {start} (index {start_index}) is after end seq {end} (index {end_index})"
    )]
    StartAfterEnd {
        /// The replace start.
        start: Seq,
        /// Its surface position.
        start_index: usize,
        /// The replace end.
        end: Seq,
        /// Its surface position.
        end_index: usize,
    },
    /// §4.7 rule 1.
    #[error("tool/result surface replacement must rewrite exactly one current node")]
    RewriteNotSingle,
    /// §4.7 rule 2.
    #[error("tool/result surface replacement must target a current tool/result")]
    RewriteTarget,
    /// §4.7 rule 3.
    #[error("tool/result surface replacement may change only content")]
    RewriteChanged,
    /// §4.7 on a replacement or target without `message.content[0]` (dsh crashes there).
    #[error("tool/result surface replacement is malformed: {detail}")]
    RewriteMalformed {
        /// What is missing.
        detail: String,
    },
    /// The event store could not provide an earlier event the rule needs.
    #[error(transparent)]
    Lookup(#[from] LookupError),
}

fn join_seqs(seqs: &[Seq]) -> String {
    seqs.iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The caller's event source failed to return an earlier event.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("event lookup failed at seq {seq}: {message}")]
pub struct LookupError {
    /// The seq asked for.
    pub seq: Seq,
    /// What went wrong.
    pub message: String,
}

/// A violated turn/step/tool relation (§6), with dsh's `InvariantError` text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invariant violated by \"@monotykamary/dsh-session\": {detail}")]
pub struct InvariantViolation {
    /// Seq of the offending event.
    pub seq: Seq,
    /// Which rule (a label of ours; dsh has none).
    pub rule: InvariantRule,
    /// dsh's detail message.
    pub detail: String,
}

/// Labels for the §6 rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum InvariantRule {
    /// INV-SEQ.
    Seq,
    /// INV-TURN-START.
    TurnStart,
    /// INV-TURN-END.
    TurnEnd,
    /// INV-STEP-START.
    StepStart,
    /// INV-STEP-END.
    StepEnd,
    /// INV-IN-STEP.
    InStep,
    /// INV-TOOL-RESULT.
    ToolResult,
    /// INV-ENCLOSED.
    Enclosed,
    /// An event whose `data` cannot be read as the rule requires (dsh would crash).
    Malformed,
}

/// Why an append was refused. The log and the state are unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RuleViolation {
    /// Envelope, payload shape or receipt rule.
    #[error("append at seq {seq} refused: {source}")]
    Shape {
        /// The candidate's seq.
        seq: Seq,
        /// The rule.
        source: ShapeError,
    },
    /// Envelope value out of range (time not a safe integer, seq too large).
    #[error(
        "append at seq {seq} refused: session event \"{kind}\" has an invalid event envelope ({detail})"
    )]
    Envelope {
        /// The candidate's seq.
        seq: Seq,
        /// The event type.
        kind: String,
        /// Which field.
        detail: String,
    },
    /// Surface rule.
    #[error("append at seq {seq} refused: {source}")]
    Surface {
        /// The candidate's seq.
        seq: Seq,
        /// The rule.
        source: SurfaceError,
    },
    /// Turn/step/tool invariant (only when invariants are enforced).
    #[error("append at seq {} refused: {source}", .source.seq)]
    Invariant {
        /// The rule.
        #[from]
        source: InvariantViolation,
    },
    /// The plan was made for another state (see `StalePlan`).
    #[error(transparent)]
    Stale(#[from] StalePlan),
}

impl RuleViolation {
    /// The seq of the refused candidate.
    pub fn seq(&self) -> Seq {
        match self {
            RuleViolation::Shape { seq, .. }
            | RuleViolation::Envelope { seq, .. }
            | RuleViolation::Surface { seq, .. } => *seq,
            RuleViolation::Invariant { source } => source.seq,
            RuleViolation::Stale(stale) => stale.planned,
        }
    }
}

/// A plan could not be applied because the state moved on since it was made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("stale append plan: planned for seq {planned}, but the session's next seq is {next}")]
pub struct StalePlan {
    /// The seq the plan was made for.
    pub planned: Seq,
    /// The state's next seq.
    pub next: Seq,
}

/// Header rules (§9.1), with dsh's messages.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HeaderError {
    /// `version != 0`.
    #[error("session header version must be 0, got {0}")]
    Version(String),
    /// `id` differs from the session id.
    #[error("session header id \"{header}\" does not match session id \"{session}\"")]
    IdMismatch {
        /// The header's id.
        header: String,
        /// The session's id.
        session: String,
    },
    /// `createdAt` not a non-negative safe integer.
    #[error("session header createdAt must be a non-negative safe integer")]
    CreatedAt,
    /// `cwd` not absolute.
    #[error("session header cwd must be an absolute path, got \"{0}\"")]
    CwdNotAbsolute(String),
    /// `cwd` not a string (raw headers only).
    #[error("session header cwd must be a string")]
    CwdNotString,
    /// `parentSession` not a string (raw headers only).
    #[error("session header parentSession must be a string")]
    ParentNotString,
    /// `seedLength` not a non-negative safe integer.
    #[error("session header seedLength must be a non-negative safe integer")]
    SeedLength,
    /// `origin` other than `"subagent"`.
    #[error("session header origin must be \"subagent\"")]
    Origin,
    /// `delegationDepth` not a non-negative safe integer.
    #[error("session header delegationDepth must be a non-negative safe integer")]
    DelegationDepth,
    /// `agentPreset` not a string (raw headers only).
    #[error("session header agentPreset must be a string")]
    AgentPresetNotString,
    /// `owner` empty or not a string.
    #[error("session header owner must be a non-empty string")]
    Owner,
    /// Not a JSON object (raw headers only).
    #[error("session header is not a plain JSON record")]
    NotRecord,
    /// An extra key's value is not lossless JSON.
    #[error("session header is not losslessly JSON-serializable (key {key:?}: {reason})")]
    NotLossless {
        /// The extra key.
        key: String,
        /// What the JSON validator found.
        #[source]
        reason: JsonError,
    },
}
