//! The frame cache of a read ([`FrameCache`]): the last few decoded frames, the index runs
//! last looked up, and where the last read stopped in its frame.

use std::sync::Arc;

use crate::error::ReadError;
use crate::event::Seq;
use crate::index::{Location, Run};
use crate::log::Segments;
use crate::log::frame::FrameLimits;

/// Frames a [`FrameCache`] keeps at most (the most recently read first out of it last).
const CACHED_FRAMES: usize = 4;
/// Decoded bytes a [`FrameCache`] keeps at most (a single larger frame is still kept alone).
const CACHED_BYTES: usize = 24 << 20;

/// Keeps the last few decoded frames (at most [`CACHED_FRAMES`] and [`CACHED_BYTES`]), so a
/// walk that reads neighbouring events, or goes back and forth between a few frames (a fork
/// reading its parent's frames, a lookup of a cited event), decodes each frame once.
#[derive(Debug, Default)]
pub(crate) struct FrameCache {
    /// The segments' GC generation the cached frames were read at.
    generation: u64,
    /// (segment, frame offset) and payload, most recently used last.
    frames: Vec<(FrameKey, Arc<Vec<u8>>)>,
    /// The last event read: (its frame, session number, seq, time, offset just past its
    /// record),
    /// so reading the session's next seq from that frame continues the walk from there.
    pub(super) cursor: Option<(FrameKey, u64, Seq, i64, usize)>,
    /// The index runs last looked up (a frame's records never move but in a GC, which moves
    /// `generation` and empties the cache).
    pub(super) runs: Option<RunBatch>,
}

/// Runs a [`FrameCache`] looks up at once.
pub(super) const RUN_BATCH: usize = 256;

/// The runs of session `number` holding seqs `from..to`, as [`crate::index::Index::runs`]
/// gave them (at most [`RUN_BATCH`]; `truncated` when that many).
#[derive(Debug)]
pub(super) struct RunBatch {
    pub(super) number: u64,
    pub(super) from: Seq,
    pub(super) to: Seq,
    pub(super) runs: Vec<Run>,
    pub(super) truncated: bool,
}

impl FrameCache {
    /// The run an index lookup of `seq` gives (the last run starting at or before it, when
    /// it holds `seq`), answered from the cached batch when the batch holds every run that
    /// starts between its first seq and `seq`; `None` otherwise.
    pub(super) fn cached_run(&self, number: u64, seq: Seq) -> Option<Run> {
        let b = self.runs.as_ref()?;
        if b.number != number || seq < b.from || seq >= b.to {
            return None;
        }
        if b.truncated && seq > b.runs.last()?.first_seq {
            return None;
        }
        let i = b.runs.partition_point(|r| r.first_seq <= seq);
        let run = *b.runs.get(i.checked_sub(1)?)?;
        run.contains(seq).then_some(run)
    }

    /// Forgets the cached frames when a GC installed compacted segments since they were read
    /// (`generation` moved); returns true then.
    pub(crate) fn follow_generation(&mut self, generation: u64) -> bool {
        if self.generation == generation {
            return false;
        }
        *self = FrameCache {
            generation,
            ..FrameCache::default()
        };
        true
    }

    pub(super) fn get(
        &mut self,
        segments: &Segments,
        loc: Location,
        limits: &FrameLimits,
    ) -> Result<Arc<Vec<u8>>, ReadError> {
        let key = frame_key(&loc);
        if let Some(i) = self.frames.iter().position(|(k, _)| *k == key) {
            let entry = self.frames.remove(i);
            let payload = entry.1.clone();
            self.frames.push(entry);
            return Ok(payload);
        }
        let payload = Arc::new(segments.read_frame(loc.position(), loc.frame_len, limits)?);
        let mut bytes = payload.len();
        let mut keep = 0;
        for (_, p) in self.frames.iter().rev() {
            if keep + 1 >= CACHED_FRAMES || bytes + p.len() > CACHED_BYTES {
                break;
            }
            bytes += p.len();
            keep += 1;
        }
        let drop = self.frames.len() - keep;
        self.frames.drain(..drop);
        self.frames.push((key, payload.clone()));
        Ok(payload)
    }
}

/// A frame: (segment, frame offset).
pub(super) type FrameKey = (u64, u64);

/// The frame a location is in.
pub(super) fn frame_key(loc: &Location) -> FrameKey {
    (loc.segment, loc.frame_offset)
}
