//! The event model: dsh's event envelope and session header, as the engine stores them.
//!
//! An [`Event`] is one entry of a session's append-only log. Its `data` is kept as the exact
//! JSON text it arrived as ([`Event::data`]), so an imported event exports byte for byte; the
//! engine parses it only to validate it and to read the few fields the session semantics need.
//!
//! The envelope's JSON key order and the packed-row layout an event was imported with
//! ([`Layout`]) are kept too: they carry no meaning, but they are needed to give back the bytes
//! we were given.

use serde::{Deserialize, Serialize};

/// A position in a session's log: `seq == index in the log`, contiguous from 0.
pub type Seq = u64;

/// The largest integer JavaScript represents exactly (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// The three event types that join the model-visible surface and must carry a [`SurfaceOp`].
pub const SURFACE_TYPES: [&str; 3] = ["user/message", "assistant/message", "tool/result"];

/// Returns true when `kind` is one of the three surface event types.
pub fn is_surface_type(kind: &str) -> bool {
    SURFACE_TYPES.contains(&kind)
}

/// How a surface event changes the surface (dsh's `surfaceOp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SurfaceOp {
    /// `"append"`: the event becomes the new last surface node.
    Append,
    /// `{"op":"replace","start":S,"end":E}`: the event replaces the surface nodes from the
    /// node with seq `start` to the node with seq `end` (by surface position, inclusive).
    Replace {
        /// Seq of the first replaced surface node.
        start: Seq,
        /// Seq of the last replaced surface node.
        end: Seq,
    },
}

/// A top-level key of the event envelope, used to record the key order of imported events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EnvelopeKey {
    /// `type`
    Type,
    /// `seq`
    Seq,
    /// `time`
    Time,
    /// `data`
    Data,
    /// `sourceEventSeqs`
    SourceEventSeqs,
    /// `surfaceOp`
    SurfaceOp,
    /// `ignorable`
    Ignorable,
}

/// The order of the envelope keys when the event is written as JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KeyOrder {
    /// `type, seq, time, data, sourceEventSeqs?, surfaceOp?, ignorable?`: what dsh's live
    /// `Session.append` and its SQLite decoder produce.
    #[default]
    Canonical,
    /// `type, seq, time, data, surfaceOp, sourceEventSeqs?, ignorable?`: dsh's crash closers.
    SurfaceOpFirst,
    /// Any other order, key by key (only keys present on the event).
    Custom(Vec<EnvelopeKey>),
}

/// How an event was (or may be) laid out as a packed chunk row in dsh's files.
///
/// Packed rows (`text-chunks`, `reasoning-chunks`, `tool-call-chunks`) are a storage-only
/// encoding of runs of `assistant/chunk` events. To export an imported file byte for byte the
/// engine remembers the original row boundaries; events appended through the engine are
/// packed by the exporter as dsh would (maximal runs of 3 or more within one append batch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Packing {
    /// Appended through the engine; may be packed with its neighbours of the same batch.
    #[default]
    Auto,
    /// Like `Auto`, but starts a new append batch (runs never cross a batch start).
    AutoBatchStart,
    /// Imported as a line/row of its own: never packed.
    Scalar,
    /// Imported as the first member of a packed row.
    RowStart,
    /// Imported as a later member of the packed row started by the nearest `RowStart` before it.
    RowMember,
}

/// Presentation details that carry no meaning but make exports byte-exact.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Layout {
    /// Envelope key order.
    pub key_order: KeyOrder,
    /// Packed-row membership.
    pub packing: Packing,
    /// The event starts an append batch (a zstd frame in dsh's `.jsonl.zstd`, a flush of
    /// dsh's write-behind queue). Packed rows never cross a batch start.
    pub batch_start: bool,
}

/// One event of a session log: dsh's envelope with `data` kept as JSON text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Event {
    /// The event type (JSON key `type`), e.g. `"user/message"`. An open vocabulary.
    pub kind: String,
    /// The event's position in its session's log.
    pub seq: Seq,
    /// Unix epoch milliseconds. May be negative; need not be monotonic.
    pub time: i64,
    /// The exact JSON text of `data`, byte for byte as received.
    pub data: String,
    /// `sourceEventSeqs`: the earlier events this one was derived from (surface types only).
    pub source_event_seqs: Option<Vec<Seq>>,
    /// `surfaceOp` (required on the surface types, forbidden on all others).
    pub surface_op: Option<SurfaceOp>,
    /// `ignorable: true`: a reader that does not know `kind` may skip the event.
    pub ignorable: bool,
    /// Key order and packed-row layout, for byte-exact export.
    pub layout: Layout,
}

impl Event {
    /// Builds an event with the canonical layout and no surface metadata.
    ///
    /// ```
    /// use sessionlog::Event;
    /// let e = Event::new("turn/start", 0, 1_767_225_600_000, r#"{"turn":1}"#);
    /// assert_eq!(e.kind, "turn/start");
    /// assert_eq!(e.data, r#"{"turn":1}"#);
    /// ```
    pub fn new(kind: impl Into<String>, seq: Seq, time: i64, data: impl Into<String>) -> Self {
        Event {
            kind: kind.into(),
            seq,
            time,
            data: data.into(),
            source_event_seqs: None,
            surface_op: None,
            ignorable: false,
            layout: Layout::default(),
        }
    }

    /// Sets the surface op (builder style).
    pub fn with_surface_op(mut self, op: SurfaceOp) -> Self {
        self.surface_op = Some(op);
        self
    }

    /// Sets `sourceEventSeqs` (builder style).
    pub fn with_sources(mut self, seqs: Vec<Seq>) -> Self {
        self.source_event_seqs = Some(seqs);
        self
    }

    /// True when the event's type is one of the three surface types.
    pub fn is_surface_type(&self) -> bool {
        is_surface_type(&self.kind)
    }
}

/// The session header: metadata stored beside (not inside) the log (dsh's `SessionHeader`).
///
/// Field order is dsh's in-memory order. `version` is always `SESSION_FORMAT_VERSION`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionHeader {
    /// dsh's session format version; always 0.
    pub version: u32,
    /// The session id (non-empty).
    pub id: String,
    /// Creation time, epoch milliseconds (non-negative safe integer).
    pub created_at: u64,
    /// Absolute working directory.
    pub cwd: Option<String>,
    /// Fork / delegation lineage.
    pub parent_session: Option<String>,
    /// Number of leading events inherited from the parent (durable fork boundary).
    pub seed_length: Option<u64>,
    /// `"subagent"` when set.
    pub origin: Option<String>,
    /// Delegation depth; absent means 0.
    pub delegation_depth: Option<u64>,
    /// Agent preset name.
    pub agent_preset: Option<String>,
    /// Owner identity partition (non-empty when set).
    pub owner: Option<String>,
    /// Unknown extra keys, as (key, JSON text) pairs in their original order.
    pub extra: Vec<(String, String)>,
}

/// dsh's `SESSION_FORMAT_VERSION`.
pub const SESSION_FORMAT_VERSION: u32 = 0;

impl SessionHeader {
    /// A header with only the required fields set.
    pub fn new(id: impl Into<String>, created_at: u64) -> Self {
        SessionHeader {
            version: SESSION_FORMAT_VERSION,
            id: id.into(),
            created_at,
            ..SessionHeader::default()
        }
    }
}
