//! Checkpoints: a projection's state as the index stores it (the record layout), and when to
//! write one.

use thiserror::Error;

use super::SessionProjections;
use crate::event::{Event, Seq};

/// A projection's state as the index stores it for one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The projection's key.
    pub key: String,
    /// The state version it was written under.
    pub version: u32,
    /// The state reflects exactly the events with seq below this (0: an empty log; dsh's
    /// row `seq` is `covered - 1`).
    pub covered: Seq,
    /// The encoded state ([`ProjectionState::encode`]).
    ///
    /// [`ProjectionState::encode`]: super::ProjectionState::encode
    pub bytes: Vec<u8>,
}

/// The first byte of a [`Checkpoint::to_record`] value.
pub const RECORD_FORMAT: u8 = 1;

/// A checkpoint record read from the index does not have the record layout.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RecordError {
    /// Shorter than the 13-byte prefix.
    #[error("projection record for {key:?} is {len} bytes, shorter than its 13-byte prefix")]
    Short {
        /// The key the record was stored under.
        key: String,
        /// Its length.
        len: usize,
    },
    /// An unknown record format byte.
    #[error("projection record for {key:?} has format {found}, expected {RECORD_FORMAT}")]
    Format {
        /// The key the record was stored under.
        key: String,
        /// The byte found.
        found: u8,
    },
}

impl Checkpoint {
    /// The value to store in the index under `(session, key)`:
    /// `[format: u8 = 1][version: u32 LE][covered: u64 LE][state bytes…]`.
    pub fn to_record(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(13 + self.bytes.len());
        out.push(RECORD_FORMAT);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.covered.to_le_bytes());
        out.extend_from_slice(&self.bytes);
        out
    }

    /// Reads a record written by [`Checkpoint::to_record`] (the state bytes are not decoded
    /// here; [`ProjectionSet::restore`] does that).
    ///
    /// [`ProjectionSet::restore`]: super::ProjectionSet::restore
    pub fn from_record(key: impl Into<String>, record: &[u8]) -> Result<Checkpoint, RecordError> {
        let key = key.into();
        let Some((&format, rest)) = record.split_first() else {
            return Err(RecordError::Short { key, len: 0 });
        };
        if rest.len() < 12 {
            return Err(RecordError::Short {
                key,
                len: record.len(),
            });
        }
        if format != RECORD_FORMAT {
            return Err(RecordError::Format { key, found: format });
        }
        let (version, rest) = rest.split_at(4);
        let (covered, bytes) = rest.split_at(8);
        let mut v = [0u8; 4];
        v.copy_from_slice(version);
        let mut c = [0u8; 8];
        c.copy_from_slice(covered);
        Ok(Checkpoint {
            key,
            version: u32::from_le_bytes(v),
            covered: u64::from_le_bytes(c),
            bytes: bytes.to_vec(),
        })
    }
}

/// When to write checkpoints. dsh writes its cache on every `turn/end` and after
/// `writeEveryEvents` committed events (its shipped web bundle uses 200).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointPolicy {
    /// Write after this many events folded since the last checkpoint (0: only on `turn/end`).
    pub every_events: u64,
}

impl Default for CheckpointPolicy {
    fn default() -> Self {
        CheckpointPolicy { every_events: 256 }
    }
}

impl CheckpointPolicy {
    /// True when a checkpoint should be written after folding `event`: it is a `turn/end`,
    /// or `every_events` events have been folded since the last checkpoint.
    pub fn due(&self, states: &SessionProjections, event: &Event) -> bool {
        event.kind == "turn/end"
            || (self.every_events > 0 && states.since_checkpoint >= self.every_events)
    }
}
