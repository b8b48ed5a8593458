//! Errors, reports and options of the JSONL reader and writer.

use super::Compression;
use crate::event::{Event, Seq, SessionHeader};
use crate::interop::chunk_rows::PackPolicy;
use crate::json::JsonLimits;
use std::path::PathBuf;

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
    /// Decompression would exceed the reader's limit on decompressed bytes
    /// (`ReadOptions::max_decompressed_bytes`).
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

/// A line that [`write()`](super::write()) would not reproduce byte for byte.
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

/// Options for [`read`](super::read()).
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

/// Options for [`write()`](super::write()).
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
