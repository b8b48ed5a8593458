//! dsh packed chunk rows (`text-chunks`, `reasoning-chunks`, `tool-call-chunks`).
//!
//! A packed row is a storage-only record that holds a run of `assistant/chunk` delta events
//! (dsh-session-semantics §10, dsh-persistence-formats §3). Rows never enter a session's log:
//! readers expand them with [`decode_row`] / [`decode_jsonl_record`], writers build them with
//! [`pack`]. Two codecs exist ([`Codec`]): dsh's JSONL codec (any member count, no byte cap)
//! and its SQLite-17/18 codec (3..=1024 members and at most [`MAX_PACKED_DATA_BYTES`] bytes of
//! `data`, long runs split by dsh's rule).
//!
//! Row layout, keys in the order dsh writes them:
//! ```text
//! {"type":"text-chunks"|"reasoning-chunks","seq0":S,"time0":T,"data":{"turn","step","index","dt":[…],"texts":[…]}}
//! {"type":"tool-call-chunks","seq0":S,"time0":T,"data":{"turn","step","index","dt":[…],"id","name"?,"args":[…]}}
//! ```
//! Member `k` has seq `seq0 + k` and time `time0 + dt[0] + … + dt[k-1]`.
//!
//! **Losslessness.** Besides dsh's whitelist, an event is packed only if its envelope key
//! order is `type, seq, time, data` and its `data` text is exactly what decoding the row gives
//! back (the `JSON.stringify` form). That holds for everything dsh writes; it guarantees that
//! `decode(pack(batch))` reproduces every event byte for byte. Decoded events carry
//! [`Packing::RowStart`](crate::event::Packing::RowStart) /
//! [`Packing::RowMember`](crate::event::Packing::RowMember), so [`PackPolicy::Remembered`]
//! rebuilds the original rows.

mod decode;
mod pack;

pub use decode::{decode_jsonl_record, decode_row};
pub use pack::pack;

use crate::event::{Event, MAX_SAFE_INTEGER, Seq};
use crate::json::write_js_string;

/// dsh's `MIN_RUN`: runs shorter than this are written as individual events.
pub const MIN_RUN: usize = 3;

/// The SQLite codec's largest row (`MAX_PACKED_ROW_MEMBERS`).
pub const MAX_PACKED_ROW_MEMBERS: usize = 1024;

/// The SQLite codec's cap on the UTF-8 length of a row's `data` JSON (`MAX_PACKED_DATA_BYTES`).
pub const MAX_PACKED_DATA_BYTES: usize = 1_048_576;

/// The logical event type that packed rows hold.
pub const CHUNK_EVENT_TYPE: &str = "assistant/chunk";

/// The three packed-row tags.
pub const CHUNK_TAGS: [&str; 3] = ["text-chunks", "reasoning-chunks", "tool-call-chunks"];

/// True when `t` is a packed-row tag (such a type cannot be a logical event in JSONL).
pub fn is_chunk_tag(t: &str) -> bool {
    CHUNK_TAGS.contains(&t)
}

/// The kind of delta a packed row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChunkKind {
    /// `text-delta` events, row tag `text-chunks`.
    Text,
    /// `reasoning-delta` events, row tag `reasoning-chunks`.
    Reasoning,
    /// `tool-call-delta` events, row tag `tool-call-chunks`.
    ToolCall,
}

impl ChunkKind {
    /// The row tag (`text-chunks`, …).
    pub fn tag(self) -> &'static str {
        match self {
            ChunkKind::Text => "text-chunks",
            ChunkKind::Reasoning => "reasoning-chunks",
            ChunkKind::ToolCall => "tool-call-chunks",
        }
    }

    /// The kind whose row tag is `tag`.
    pub fn from_tag(tag: &str) -> Option<ChunkKind> {
        match tag {
            "text-chunks" => Some(ChunkKind::Text),
            "reasoning-chunks" => Some(ChunkKind::Reasoning),
            "tool-call-chunks" => Some(ChunkKind::ToolCall),
            _ => None,
        }
    }

    /// The chunk `type` of the member events (`text-delta`, …).
    pub fn delta_type(self) -> &'static str {
        match self {
            ChunkKind::Text => "text-delta",
            ChunkKind::Reasoning => "reasoning-delta",
            ChunkKind::ToolCall => "tool-call-delta",
        }
    }

    fn from_delta_type(t: &str) -> Option<ChunkKind> {
        match t {
            "text-delta" => Some(ChunkKind::Text),
            "reasoning-delta" => Some(ChunkKind::Reasoning),
            "tool-call-delta" => Some(ChunkKind::ToolCall),
            _ => None,
        }
    }

    /// The `data` key holding the member strings (`texts` or `args`).
    fn members_key(self) -> &'static str {
        match self {
            ChunkKind::ToolCall => "args",
            _ => "texts",
        }
    }
}

/// Which of dsh's two row codecs to follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    /// `core/session/src/chunk-rows.ts`: rows of any length (at least 1 member on read), no
    /// byte cap. Writers pack runs of [`MIN_RUN`] or more.
    Jsonl,
    /// `session-persistence-sqlite/src/codec.ts` (schemas 17 and 18): 3..=1024 members and at
    /// most [`MAX_PACKED_DATA_BYTES`] of `data`, on read and on write.
    Sqlite,
}

impl Codec {
    fn min_members_read(self) -> usize {
        match self {
            Codec::Jsonl => 1,
            Codec::Sqlite => MIN_RUN,
        }
    }

    fn max_members(self) -> usize {
        match self {
            Codec::Jsonl => usize::MAX,
            Codec::Sqlite => MAX_PACKED_ROW_MEMBERS,
        }
    }

    fn max_bytes(self) -> usize {
        match self {
            Codec::Jsonl => usize::MAX,
            Codec::Sqlite => MAX_PACKED_DATA_BYTES,
        }
    }
}

/// How [`pack`] decides row boundaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PackPolicy {
    /// Honour each event's [`Layout::packing`](crate::event::Layout::packing): `Scalar` events stay
    /// single records, a
    /// `RowStart` and the `RowMember`s after it become one row again (split by the codec's
    /// rules only if the codec cannot hold it as is), and runs of `Auto` events are packed
    /// maximally within their batch (a batch begins at each `AutoBatchStart` and at the first
    /// `Auto` after any other packing).
    Remembered,
    /// Treat the whole slice as one append batch and pack every eligible run maximally,
    /// ignoring the remembered layout (what dsh does with one append batch).
    Maximal,
}

/// A packed row: one storage record holding a run of chunk events.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PackedRow {
    /// What the row holds.
    pub kind: ChunkKind,
    /// Seq of the first member (the SQLite `seq` column).
    pub seq0: Seq,
    /// Time of the first member (the SQLite `time` column).
    pub time0: i64,
    /// Number of members.
    pub members: usize,
    /// The row's `data` as `JSON.stringify` writes it (the SQLite `data` column, before any
    /// compression).
    pub data: String,
}

impl PackedRow {
    /// The row tag (the SQLite `type` column).
    pub fn tag(&self) -> &'static str {
        self.kind.tag()
    }

    /// Seqs covered by the row.
    pub fn seqs(&self) -> std::ops::Range<Seq> {
        self.seq0..self.seq0 + self.members as Seq
    }

    /// Appends the row as dsh's JSONL writes it (no trailing newline):
    /// `{"type":…,"seq0":…,"time0":…,"data":…}`.
    pub fn write_jsonl(&self, out: &mut String) {
        out.push_str("{\"type\":");
        write_js_string(out, self.tag());
        out.push_str(",\"seq0\":");
        out.push_str(&self.seq0.to_string());
        out.push_str(",\"time0\":");
        out.push_str(&self.time0.to_string());
        out.push_str(",\"data\":");
        out.push_str(&self.data);
        out.push('}');
    }

    /// The row as one JSONL line (no trailing newline).
    pub fn to_jsonl_line(&self) -> String {
        let mut out = String::with_capacity(self.data.len() + 64);
        self.write_jsonl(&mut out);
        out
    }
}

/// One storage record produced by [`pack`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    /// An event stored as itself.
    Event(&'a Event),
    /// A packed row standing for several consecutive events.
    Row(PackedRow),
}

impl Record<'_> {
    /// Seq of the (first) event the record holds.
    pub fn seq(&self) -> Seq {
        match self {
            Record::Event(e) => e.seq,
            Record::Row(r) => r.seq0,
        }
    }

    /// Number of events the record holds.
    pub fn len(&self) -> usize {
        match self {
            Record::Event(_) => 1,
            Record::Row(r) => r.members,
        }
    }

    /// Always false (a record holds at least one event); present for symmetry with `len`.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// A packed row that dsh's decoder would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkRowError {
    /// dsh's `malformed <tag> storage row: …`.
    #[error("malformed {tag} storage row: {reason}")]
    Malformed {
        /// The row tag.
        tag: &'static str,
        /// What is wrong.
        reason: String,
    },
}

fn malformed(kind: ChunkKind, reason: impl Into<String>) -> ChunkRowError {
    ChunkRowError::Malformed {
        tag: kind.tag(),
        reason: reason.into(),
    }
}

const MAX_SAFE: i64 = MAX_SAFE_INTEGER;

fn is_safe(n: i64) -> bool {
    (-MAX_SAFE..=MAX_SAFE).contains(&n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Packing;

    fn chunk(seq: Seq, time: i64, text: &str) -> Event {
        Event::new(
            CHUNK_EVENT_TYPE,
            seq,
            time,
            format!(
                r#"{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"{text}"}}}}"#
            ),
        )
    }

    #[test]
    fn non_canonical_data_is_not_packed() {
        let mut events = vec![chunk(0, 0, "a"), chunk(1, 0, "b"), chunk(2, 0, "c")];
        assert!(matches!(
            pack(&events, Codec::Jsonl, PackPolicy::Maximal)[0],
            Record::Row(_)
        ));
        events[1].data =
            r#"{"step":1,"turn":1,"chunk":{"type":"text-delta","index":0,"text":"b"}}"#.into();
        let recs = pack(&events, Codec::Jsonl, PackPolicy::Maximal);
        assert_eq!(recs.len(), 3);
    }

    #[test]
    fn remembered_short_row_is_kept_for_jsonl_only() {
        let mut events = vec![chunk(0, 0, "a"), chunk(1, 5, "b")];
        events[0].layout.packing = Packing::RowStart;
        events[1].layout.packing = Packing::RowMember;
        let recs = pack(&events, Codec::Jsonl, PackPolicy::Remembered);
        assert!(matches!(&recs[..], [Record::Row(r)] if r.members == 2));
        let recs = pack(&events, Codec::Sqlite, PackPolicy::Remembered);
        assert_eq!(recs.len(), 2);
        assert!(recs.iter().all(|r| matches!(r, Record::Event(_))));
    }
}
