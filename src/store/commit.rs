//! Group commit: many appenders, one write and one `fdatasync`, done by a leader.
//!
//! Appenders *stage* encoded records in memory (in log order, under a short lock). Whoever
//! needs the staged records on disk (a `Sync` appender, `flush()`, the group-commit timer, or a
//! full batch) becomes the **leader** if no leader is active: it takes everything staged, writes
//! it as one frame (or as several of at most [`CommitConfig::frame_bytes`] when it is larger:
//! each but the last marked `FLAG_CONTINUED`, so that recovery keeps an operation whole or not
//! at all), syncs if asked, updates the index in one transaction, and wakes the others.
//! Appenders that arrive while the leader works stage their records for the next leader, so
//! under load each `fdatasync` covers many appends (raft-engine's write barrier).
//!
//! After a failed write or fsync the committer is poisoned: every later write fails with
//! [`AppendError::PreviousIo`] until the store is reopened (the fsync-gate lesson: a failed
//! fsync may have dropped dirty pages, so retrying could acknowledge lost data).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::error::{AppendError, WriteFailure};
use crate::event::{Event, Seq};
use crate::index::{Index, IndexBatch, IndexOp, Location, SessionRow, Watermark};
use crate::log::Segments;
use crate::log::frame;

#[path = "commit_roll.rs"]
mod roll;
#[path = "commit_segment.rs"]
mod segment;
#[path = "commit_wait.rs"]
mod wait;
use segment::sync_or_cut;
pub(crate) use segment::{Active, rewrite};
use wait::{Waiters, Want};

/// Tunables the committer needs.
#[derive(Debug, Clone)]
pub(crate) struct CommitConfig {
    pub segment_bytes: u64,
    /// Zero bytes kept written ahead of the active segment's end (`Config::preallocate_bytes`).
    pub preallocate: u64,
    pub compress_threshold: usize,
    pub zstd_level: i32,
    pub checkpoint_bytes: u64,
    /// Index entries of durable appends that may wait for one commit
    /// (`Config::deferred_index_entries`).
    pub deferred_index_entries: usize,
    /// The payload size a frame is filled to (a record larger than this goes alone).
    pub frame_bytes: usize,
    /// The largest record accepted (`Config::max_frame_bytes`): no frame exceeds it.
    pub max_record_bytes: usize,
}

#[derive(Debug)]
struct StagedEvent {
    session: u64,
    seq: Seq,
    /// Offset of the record in the staged bytes.
    record_offset: usize,
}

#[derive(Debug, Default)]
struct Staged {
    raw: Vec<u8>,
    events: Vec<StagedEvent>,
    ops: Vec<IndexOp>,
    /// The end offset (in `raw`) of every record, ascending.
    record_ends: Vec<usize>,
    /// The end offset of every staged operation (one [`Committer::stage`] call): a frame that
    /// ends anywhere else is marked continued.
    op_ends: Vec<usize>,
    /// Where [`Staged::plan`] will cut, and each session's last event in the current frame
    /// (a session's later events in a frame are staged as `EventNext` records).
    chains: crate::log::envelope::Chains,
}

/// One frame of a leader's batch: `raw[start..end]`, continued when an operation spans the cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FramePlan {
    start: usize,
    end: usize,
    /// The cut after this frame falls inside an operation.
    continued: bool,
    /// The cut before this frame fell inside an operation.
    continuation: bool,
}

impl FramePlan {
    fn flags(&self) -> u8 {
        let mut flags = 0;
        if self.continued {
            flags |= frame::FLAG_CONTINUED;
        }
        if self.continuation {
            flags |= frame::FLAG_CONTINUATION;
        }
        flags
    }
}

/// A spare staging buffer larger than this is dropped rather than kept for the next batch.
const MAX_SPARE_STAGED_BYTES: usize = 16 << 20;

/// Spare staging buffers kept: two batches can be in flight (one written, one encoded), and
/// with one spare the second regrew its buffers from nothing each time (with the operations
/// taken out of every batch, `realloc` under [`Committer::stage`] was 1.3% of the CPU at 64
/// sessions on dsh's flush points, benches/README.md, run 11).
const SPARE_STAGED: usize = 2;

/// An indexed batch's buffers are kept for the next leader up to this many entries' room
/// instead of regrown from nothing for each batch.
const MAX_SPARE_BATCH_ENTRIES: usize = 1 << 16;

impl Staged {
    /// Empties the buffers, keeping their capacity (the next batch stages into them without
    /// regrowing: the leader hands them back, see [`State::spare`]).
    fn clear(&mut self) {
        self.raw.clear();
        self.events.clear();
        self.ops.clear();
        self.record_ends.clear();
        self.op_ends.clear();
        self.chains.clear();
    }

    /// Cuts the staged records into frames of at most `frame_bytes` payload bytes (a larger
    /// record goes alone), cutting only between records.
    fn plan(&self, frame_bytes: usize) -> Vec<FramePlan> {
        let mut frames: Vec<FramePlan> = Vec::new();
        let mut start = 0usize;
        let mut end = 0usize;
        let mut continuation = false;
        for &record_end in &self.record_ends {
            if crate::log::envelope::cuts_before(start, end, record_end, frame_bytes) {
                let continued = self.op_ends.binary_search(&end).is_err();
                frames.push(FramePlan {
                    start,
                    end,
                    continued,
                    continuation,
                });
                continuation = continued;
                start = end;
            }
            end = record_end;
        }
        if end > start {
            frames.push(FramePlan {
                start,
                end,
                continued: false,
                continuation,
            });
        }
        frames
    }
}

/// A staged event record: its encoding and, for reads before it is indexed, the session
/// number and the event.
pub(crate) type StagedRecord = (Vec<u8>, Option<(u64, Arc<Event>)>);

/// A record buffer larger than this is freed after staging rather than kept for reuse.
const MAX_SPARE_RECORD_BYTES: usize = 64 << 10;

thread_local! {
    /// The buffer of the last record this thread staged, emptied: [`Committer::stage`] copies
    /// each record and keeps one buffer here, and the thread's next event record is encoded
    /// into it. A buffer allocated per event, sized to its data, missed the allocator's
    /// per-thread cache nearly every time: at 64 sessions that one allocation was 6.8% of
    /// the append path's CPU (benches/README.md, run 10).
    static SPARE_RECORD: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// This thread's spare record buffer (empty, maybe with capacity), or a new one.
pub(crate) fn spare_record_buffer() -> Vec<u8> {
    SPARE_RECORD.with(|spare| spare.take())
}

/// Keeps `buffer` as this thread's spare record buffer (unless it is large, or the thread
/// already keeps a larger one).
fn keep_record_buffer(mut buffer: Vec<u8>) {
    if buffer.capacity() > MAX_SPARE_RECORD_BYTES {
        return;
    }
    SPARE_RECORD.with(|spare| {
        let kept = spare.take();
        if kept.capacity() >= buffer.capacity() {
            spare.set(kept);
        } else {
            buffer.clear();
            spare.set(buffer);
        }
    });
}

/// A list that holds one item without a heap allocation: a single append (nearly every
/// append) stages one record and one row, and at 64 sessions the allocator's locks were a
/// quarter of the append path's CPU (benches/README.md, run 10).
pub(crate) type One<T> = smallvec::SmallVec<[T; 1]>;

/// A single append's index operations, inline: a new surface node links itself and its
/// neighbours (up to three operations).
pub(crate) type Ops = smallvec::SmallVec<[IndexOp; 3]>;

/// What an appender hands the committer: records in log order, index operations, and
/// updated session rows. Staged together, they land in one frame and one index commit.
#[derive(Debug, Default)]
pub(crate) struct Stage {
    /// Encoded records.
    pub records: One<StagedRecord>,
    /// Index operations to apply with the batch.
    pub ops: Ops,
    /// Session rows to write with the batch.
    pub rows: One<SessionRow>,
}

#[derive(Debug)]
struct State {
    staged: Staged,
    /// Records ever staged / written to the OS / made durable (monotonic counters).
    staged_lsn: u64,
    written_lsn: u64,
    durable_lsn: u64,
    /// The LSN of the last record a leader (or the pipelined encoder) took from `staged`.
    taken_lsn: u64,
    /// Held by the thread that writes (a leader, [`Committer::exclusive`], a rollover).
    leader: bool,
    /// A thread took the next batch while the leader writes and encodes (compresses) it
    /// meanwhile; it becomes the leader next, before anyone else (see [`Committer::commit`]).
    encoding: bool,
    failed: Option<WriteFailure>,
    active: Option<Active>,
    /// Segment numbers in use (the next segment is `last + 1`).
    next_segment: u64,
    /// Events staged but not yet in the index, for reads.
    pending: crate::index::numhash::NumMap<(u64, Seq), Arc<Event>>,
    /// Latest staged row per dirty session.
    dirty: crate::index::numhash::NumMap<u64, SessionRow>,
    watermark: Watermark,
    bytes_since_checkpoint: u64,
    /// A non-durable index commit happened since the last durable one.
    index_dirty: bool,
    oldest_unsynced: Option<Instant>,
    /// Index entries of synced frames whose commit was deferred (see
    /// [`CommitConfig::deferred_index_entries`]); their events stay in `pending` until
    /// committed.
    carry: IndexBatch,
    /// The `pending` keys of the events in `carry`.
    carry_keys: Vec<(u64, Seq)>,
    /// Bytes of the records in `carry` (their events stay in memory until committed).
    carry_bytes: usize,
    /// The buffers of the last written batches, emptied, for the next batches to stage into:
    /// up to [`SPARE_STAGED`], one per batch that can be in flight (the leader's and the
    /// pipelined encoder's).
    spare: Vec<Staged>,
    /// Events taken out of `pending` once indexed, for the appenders that stage next to drop.
    retired: Retired,
    /// Index commits running after their batch was acknowledged (see [`Committer::turn`]).
    indexing: u32,
    /// Threads waiting for the committer.
    waiters: Waiters,
}

/// The deferred entries' events stay in memory (`pending`) until committed: a deferral also
/// stops once their records reach this many bytes (large events defer fewer entries).
const MAX_DEFERRED_INDEX_BYTES: usize = 1 << 20;

/// Retired events are kept for the appenders to drop up to this many bytes of data; past it
/// the leader drops them itself.
const MAX_RETIRED_BYTES: usize = 1 << 20;

/// Events taken out of `pending` once indexed, not dropped by the leader that indexed them:
/// the appenders that stage next drop one each per record they stage
/// ([`Committer::stage`]). An event is allocated by the thread that appends it, and the
/// leader used to free a whole batch's: the allocator's per-thread caches never balanced, and
/// at 64 sessions the appenders' allocations of events went to the shared arenas (8% of the
/// append path's CPU, benches/README.md, run 10). Dropped by appenders, each thread frees
/// about as many as it allocates.
#[derive(Debug, Default)]
struct Retired {
    events: Vec<Arc<Event>>,
    /// Bytes of the kept events' data.
    bytes: usize,
}

impl Retired {
    /// Keeps `event` for an appender to drop, or drops it now when [`MAX_RETIRED_BYTES`] of
    /// data are already waiting.
    fn keep(&mut self, event: Arc<Event>) {
        if self.bytes + event.data.len() <= MAX_RETIRED_BYTES {
            self.bytes += event.data.len();
            self.events.push(event);
        }
    }

    /// Up to `n` kept events, for the caller to drop once it released the committer's lock
    /// (inline up to two: a single append takes two).
    fn take(&mut self, n: usize) -> smallvec::SmallVec<[Arc<Event>; 2]> {
        let from = self.events.len().saturating_sub(n);
        let out: smallvec::SmallVec<[Arc<Event>; 2]> = self.events.drain(from..).collect();
        self.bytes = self
            .bytes
            .saturating_sub(out.iter().map(|e| e.data.len()).sum());
        out
    }
}

impl State {
    /// Takes an indexed event out of `pending`, for an appender to drop ([`Retired`]).
    fn retire(&mut self, key: &(u64, Seq)) {
        if let Some(event) = self.pending.remove(key) {
            self.retired.keep(event);
        }
    }
}

/// After an index commit: retires the committed events and keeps the emptied buffers for the
/// next leader to fill without regrowing them (when no deferral holds its own).
fn retire_batch(st: &mut State, mut batch: IndexBatch, mut keys: Vec<(u64, Seq)>) {
    for key in &keys {
        st.retire(key);
    }
    if batch.capacity() <= MAX_SPARE_BATCH_ENTRIES
        && st.carry.is_empty()
        && st.carry_keys.is_empty()
    {
        batch.clear();
        keys.clear();
        st.carry = batch;
        st.carry_keys = keys;
    }
}

/// The group-commit writer.
#[derive(Debug)]
pub(crate) struct Committer {
    state: Mutex<State>,
    segments: Arc<Segments>,
    index: Arc<Index>,
    config: CommitConfig,
    /// Frame encoders (zstd contexts) for the leader and the pipelined encoder: taken while
    /// a batch is compressed, put back after (at most two are ever made).
    encoders: Mutex<Vec<frame::Encoder>>,
    /// Directory fsyncs a read-write open deferred to the first write (see
    /// [`Committer::defer_dir_syncs`]).
    dirs: Mutex<Option<DirSyncs>>,
    /// Publishes the log position of each durable commit for readers (`ACKED`).
    publisher: std::sync::OnceLock<Arc<super::live::Publisher>>,
    /// Set with `State::failed`: read without the lock by [`Committer::refuse_if_failed`].
    has_failed: std::sync::atomic::AtomicBool,
    /// The index's turn: held by whoever commits the index, taken in leader order. A leader
    /// whose batch fills the deferred entries acknowledges its batch first and commits them
    /// after, holding this but no longer the leader role, so the next batch is written and
    /// synced meanwhile. Holds the failure of such a commit, which every later turn refuses.
    turn: Mutex<Option<WriteFailure>>,
}

/// Directories whose entries must be durable before the first frame is written.
#[derive(Debug)]
pub(crate) struct DirSyncs {
    /// The file system to sync them with.
    pub fs: Arc<dyn crate::fs::FileSystem>,
    /// Synced, and a failure fails the write.
    pub required: Vec<std::path::PathBuf>,
    /// Synced, and a failure is ignored (the parent of the store directory may not be ours).
    pub best_effort: Vec<std::path::PathBuf>,
}

/// What became of a written batch's index entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Indexed {
    /// Committed with the batch.
    Now,
    /// Deferred to a later commit (kept in `State::carry`).
    Deferred,
    /// To be committed once the batch is acknowledged (the deferred entries are full and the
    /// caller does not need the index): see [`Committer::turn`].
    AfterAck,
}

/// How the leader treats one batch.
#[derive(Debug, Clone, Copy)]
struct Lead {
    /// Sync the log.
    sync: bool,
    /// Commit the index durably.
    checkpoint: bool,
    /// The index commit may be deferred (see [`CommitConfig::deferred_index_entries`] and
    /// [`MAX_DEFERRED_INDEX_BYTES`]).
    may_defer: bool,
}

/// How far a make-durable request must go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Goal {
    /// The records are written to the OS (readable, not yet durable).
    Written,
    /// The records are synced to disk.
    Durable,
}

impl Committer {
    pub(crate) fn new(
        segments: Arc<Segments>,
        index: Arc<Index>,
        config: CommitConfig,
        active: Option<Active>,
        next_segment: u64,
        watermark: Watermark,
    ) -> Self {
        Committer {
            state: Mutex::new(State {
                staged: Staged::default(),
                staged_lsn: 0,
                written_lsn: 0,
                durable_lsn: 0,
                taken_lsn: 0,
                leader: false,
                encoding: false,
                failed: None,
                active,
                next_segment,
                pending: Default::default(),
                dirty: Default::default(),
                watermark,
                bytes_since_checkpoint: 0,
                index_dirty: false,
                oldest_unsynced: None,
                carry: IndexBatch::default(),
                carry_keys: Vec::new(),
                carry_bytes: 0,
                spare: Vec::new(),
                retired: Retired::default(),
                indexing: 0,
                waiters: Waiters::default(),
            }),
            segments,
            index,
            encoders: Mutex::new(Vec::new()),
            dirs: Mutex::new(None),
            publisher: std::sync::OnceLock::new(),
            has_failed: std::sync::atomic::AtomicBool::new(false),
            turn: Mutex::new(None),
            config,
        }
    }

    /// Defers the directory fsyncs of a read-write open to the first write: a segment (or
    /// `segments/` itself) created just before a crash may not have a durable directory
    /// entry, and nothing may be acknowledged on top of it until it has. A store opened only
    /// to read and resume issues no fsync.
    /// Records the failure that stops the writer: every later write is refused with it.
    fn set_failed(&self, st: &mut State, failure: WriteFailure) {
        st.failed = Some(failure);
        self.has_failed
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// `PreviousIo` once a write or sync failed (the writer stops until reopened), checked
    /// before an append validates anything: an append the failure stopped half-way may have
    /// advanced its session's state, and a later one must get the failure, not a seq error.
    pub(crate) fn refuse_if_failed(&self) -> Result<(), AppendError> {
        if !self.has_failed.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        match &self.lock().failed {
            Some(f) => Err(AppendError::PreviousIo(f.clone())),
            None => Ok(()),
        }
    }

    /// Sets where durable commits are published (once, at open).
    pub(crate) fn set_publisher(&self, publisher: Arc<super::live::Publisher>) {
        let _ = self.publisher.set(publisher);
    }

    /// Just past the last whole operation written.
    pub(crate) fn watermark(&self) -> Watermark {
        self.lock().watermark
    }

    pub(crate) fn defer_dir_syncs(&self, dirs: DirSyncs) {
        *self.dirs.lock().unwrap_or_else(|p| p.into_inner()) = Some(dirs);
    }

    /// Runs the deferred directory fsyncs, once.
    fn sync_deferred_dirs(&self) -> std::io::Result<()> {
        let mut slot = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = slot.as_ref() {
            for dir in &d.required {
                d.fs.sync_dir(dir)?;
            }
            for dir in &d.best_effort {
                let _ = d.fs.sync_dir(dir);
            }
        }
        *slot = None;
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the index's turn ([`Committer::turn`]), waiting for an index commit that runs
    /// after its batch's acknowledgement; the failure of such a commit, if any. Never taken
    /// while holding the state lock.
    fn index_turn(&self) -> Result<MutexGuard<'_, Option<WriteFailure>>, WriteFailure> {
        let turn = self.turn.lock().unwrap_or_else(|p| p.into_inner());
        match turn.as_ref() {
            Some(failure) => Err(failure.clone()),
            None => Ok(turn),
        }
    }

    /// Waits until no leader runs and becomes it (`PreviousIo` when the writer failed). The
    /// caller clears `leader` and notifies when done.
    fn become_leader(&self) -> Result<MutexGuard<'_, State>, AppendError> {
        let mut st = self.lock();
        loop {
            if let Some(f) = &st.failed {
                return Err(AppendError::PreviousIo(f.clone()));
            }
            if !st.leader && !st.encoding {
                st.leader = true;
                return Ok(st);
            }
            st = self.wait(st, Want::Lead);
        }
    }

    /// Runs `f` as the leader: no frame is written and no other index commit is made until it
    /// returns. The active segment is synced first, so a durable index commit made by `f`
    /// never covers unsynced log. `f` gets the index entries of synced frames whose commit
    /// was deferred (it must commit them with its own changes) and the watermark just past
    /// the last whole operation written. An error from `f` fails the writer like a failed
    /// commit (`PreviousIo` until reopen).
    pub(crate) fn exclusive<T>(
        &self,
        f: impl FnOnce(IndexBatch, Watermark) -> Result<T, AppendError>,
    ) -> Result<T, AppendError> {
        let mut st = self.become_leader()?;
        let carry = std::mem::take(&mut st.carry);
        let carry_keys = std::mem::take(&mut st.carry_keys);
        st.carry_bytes = 0;
        let watermark = st.watermark;
        let active = st.active.as_ref().map(|a| a.file.clone());
        drop(st);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _turn = self.index_turn().map_err(AppendError::PreviousIo)?;
            if let Some(file) = active {
                file.sync_data().map_err(AppendError::from)?;
            }
            f(carry, watermark)
        }))
        .unwrap_or_else(|_| Err(AppendError::Writer("the writer panicked".to_owned())));
        let mut st = self.lock();
        st.leader = false;
        let out = match result {
            Ok(v) => {
                for key in &carry_keys {
                    st.retire(key);
                }
                Ok(v)
            }
            Err(e) => {
                let failure = WriteFailure::from(e);
                self.set_failed(&mut st, failure.clone());
                Err(AppendError::PreviousIo(failure))
            }
        };
        self.wake(&mut st);
        out
    }

    /// Stages records, index operations and rows, all or nothing, into the next frame.
    /// Returns the LSN of the last record (the current LSN when there is none).
    /// A record larger than the frame limit is refused before anything is staged.
    pub(crate) fn stage(&self, stage: Stage) -> Result<u64, AppendError> {
        if let Some((bytes, event)) = stage
            .records
            .iter()
            .find(|(bytes, _)| bytes.len() > self.config.max_record_bytes)
        {
            return Err(AppendError::RecordTooLarge {
                kind: event
                    .as_ref()
                    .map_or_else(|| "session record".to_owned(), |(_, e)| e.kind.clone()),
                size: bytes.len() as u64,
                limit: self.config.max_record_bytes as u64,
            });
        }
        let mut st = self.lock();
        if let Some(f) = &st.failed {
            return Err(AppendError::PreviousIo(f.clone()));
        }
        // One retired event per record staged, and one more so that they drain.
        let retired = st.retired.take(stage.records.len() + 1);
        for (bytes, event) in stage.records {
            let record_offset = st.staged.raw.len();
            let head = event.as_ref().map(|(n, e)| (*n, e.seq, e.time));
            let staged = &mut st.staged;
            (staged.chains).push(&mut staged.raw, &bytes, head, self.config.frame_bytes);
            let end = st.staged.raw.len();
            st.staged.record_ends.push(end);
            if let Some((session, event)) = event {
                st.staged.events.push(StagedEvent {
                    session,
                    seq: event.seq,
                    record_offset,
                });
                st.pending.insert((session, event.seq), event);
            }
            st.staged_lsn += 1;
            keep_record_buffer(bytes);
        }
        let end = st.staged.raw.len();
        if st.staged.op_ends.last() != Some(&end) {
            st.staged.op_ends.push(end);
        }
        st.staged.ops.extend(stage.ops);
        for row in stage.rows {
            st.dirty.insert(row.number, row);
        }
        st.oldest_unsynced.get_or_insert_with(Instant::now);
        let lsn = st.staged_lsn;
        drop(st);
        drop(retired);
        Ok(lsn)
    }

    /// True when something was appended or indexed since the last durable index commit.
    pub(crate) fn needs_checkpoint(&self) -> bool {
        let st = self.lock();
        !st.staged.raw.is_empty()
            || !st.staged.ops.is_empty()
            || !st.dirty.is_empty()
            || st.durable_lsn < st.staged_lsn
            || st.bytes_since_checkpoint > 0
            || st.index_dirty
            || !st.carry.is_empty()
            || st.indexing > 0
    }

    /// Bytes staged and not yet written.
    pub(crate) fn staged_bytes(&self) -> usize {
        self.lock().staged.raw.len()
    }

    /// The LSN of the last staged record.
    pub(crate) fn staged_lsn(&self) -> u64 {
        self.lock().staged_lsn
    }

    /// True when `lsn` is durable.
    pub(crate) fn is_durable(&self, lsn: u64) -> bool {
        self.lock().durable_lsn >= lsn
    }

    /// When the oldest record not yet durable was staged.
    pub(crate) fn oldest_unsynced(&self) -> Option<Instant> {
        let st = self.lock();
        if st.durable_lsn >= st.staged_lsn {
            None
        } else {
            st.oldest_unsynced
        }
    }

    /// An event staged but not yet indexed.
    pub(crate) fn pending(&self, session: u64, seq: Seq) -> Option<Arc<Event>> {
        self.lock().pending.get(&(session, seq)).cloned()
    }

    /// The error that poisoned the committer, if any.
    pub(crate) fn failure(&self) -> Option<WriteFailure> {
        self.lock().failed.clone()
    }

    /// Blocks until every record up to `lsn` reached `goal`, leading the write if no one is.
    /// `checkpoint` forces a log sync and a durable index commit.
    ///
    /// Pipelined: while a leader writes and syncs its batch, one waiter whose records are
    /// still staged takes the next batch and compresses its frames meanwhile; it becomes the
    /// leader as soon as the first is done (nobody else may lead in between, so batches are
    /// written, synced and acknowledged strictly in the order they were taken). Its frames are
    /// written only after the previous batch's sync returned: at most one frame is ever
    /// unsynced (see [`Committer::lead`]).
    pub(crate) fn commit(&self, lsn: u64, goal: Goal, checkpoint: bool) -> Result<(), AppendError> {
        let mut st = self.lock();
        let pipelined = loop {
            if let Some(f) = &st.failed {
                return Err(AppendError::PreviousIo(f.clone()));
            }
            let reached = st.reached(lsn, goal);
            let unindexed = !st.staged.ops.is_empty()
                || !st.dirty.is_empty()
                || !st.carry.is_empty()
                || st.indexing > 0;
            // A segment recovery read without syncing is made durable by the first request
            // for durability, even with nothing staged: the store already serves its bytes.
            let unverified =
                goal == Goal::Durable && st.active.as_ref().is_some_and(|a| a.unverified);
            let must_index = goal == Goal::Written && unindexed;
            let done = reached && !checkpoint && !unverified && !must_index;
            if done {
                self.offer_role(&mut st);
                return Ok(());
            }
            if !st.encoding {
                if !st.leader {
                    st.leader = true;
                    break false;
                }
                // The leader is writing a batch without this caller's records: take them
                // (and everything staged with them) and compress while it syncs.
                if lsn > st.taken_lsn && !st.staged.raw.is_empty() {
                    st.encoding = true;
                    break true;
                }
            }
            st = self.wait(st, Want::Commit { lsn, goal });
        };
        // This thread leads (or leads next): take everything staged.
        let spare = st.spare.pop().unwrap_or_default();
        let mut staged = std::mem::replace(&mut st.staged, spare);
        let upto = st.staged_lsn;
        st.taken_lsn = upto;
        // Drained, not taken: the map keeps its table for the next batch.
        let mut rows: Vec<SessionRow> = st.dirty.drain().map(|(_, row)| row).collect();
        drop(st);
        rows.sort_by_key(|r| r.number);
        let sync = goal == Goal::Durable || checkpoint;
        let may_defer = goal == Goal::Durable && !checkpoint;

        // Compress outside the lock (a panic poisons the committer like a failed write).
        let encoded =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.encode_frames(&staged)))
                .unwrap_or_else(|_| {
                    Err(AppendError::Writer("the frame encoder panicked".to_owned()))
                });

        let mut st = self.lock();
        if pipelined {
            // Wait for the batch being written; nobody else may lead before this one.
            loop {
                if let Some(f) = st.failed.clone() {
                    st.encoding = false;
                    self.wake(&mut st);
                    return Err(AppendError::PreviousIo(f));
                }
                if !st.leader {
                    break;
                }
                st = self.wait(st, Want::LeaderDone);
            }
            st.leader = true;
            st.encoding = false;
            // The encoder's place is free: records staged meanwhile go to the next one.
            self.offer_role(&mut st);
        }
        let mut active = st.active.take();
        let next_segment = st.next_segment;
        // Deferred entries first: they are older than what was taken now.
        let mut batch = std::mem::take(&mut st.carry);
        let mut carry_keys = std::mem::take(&mut st.carry_keys);
        let carried = std::mem::take(&mut st.carry_bytes) + staged.raw.len();
        batch.sessions.extend(rows);
        let mut watermark = st.watermark;
        let since_checkpoint = st.bytes_since_checkpoint;
        drop(st);

        // A panic while leading (e.g. inside redb on a damaged index) poisons the committer
        // instead of leaving `leader` set, which would hang every later caller.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.lead(
                &mut staged,
                encoded?,
                &mut active,
                next_segment,
                Lead {
                    sync,
                    checkpoint,
                    may_defer: may_defer && carried < MAX_DEFERRED_INDEX_BYTES,
                },
                &mut batch,
                &mut watermark,
                since_checkpoint,
            )
        }))
        .unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            Err(AppendError::Writer(format!(
                "the writer panicked ({what}); if the index is damaged, run `sessionlog recover`"
            )))
        });

        // Taken while this thread still leads, so index commits keep the batches' order.
        let mut turn = None;
        let result = match result {
            Ok((written, checkpointed, Indexed::AfterAck)) => match self.index_turn() {
                Ok(t) => {
                    turn = Some(t);
                    Ok((written, checkpointed, Indexed::AfterAck))
                }
                Err(failure) => Err(AppendError::PreviousIo(failure)),
            },
            other => other,
        };

        let mut st = self.lock();
        st.leader = false;
        if let Some(a) = &active {
            st.next_segment = st.next_segment.max(a.number + 1);
        }
        st.active = active;
        match result {
            Ok((written, checkpointed, indexed)) => {
                st.written_lsn = upto;
                if sync {
                    // Under the state lock, so positions are published in order.
                    if let Some(p) = self.publisher.get() {
                        p.publish(super::live::WriterState::Open, &watermark);
                    }
                    st.durable_lsn = upto;
                    if st.durable_lsn >= st.staged_lsn {
                        st.oldest_unsynced = None;
                    }
                }
                st.watermark = watermark;
                st.index_dirty = !checkpointed;
                st.bytes_since_checkpoint = if checkpointed {
                    0
                } else {
                    since_checkpoint + written
                };
                carry_keys.extend(staged.events.iter().map(|e| (e.session, e.seq)));
                if staged.raw.capacity() <= MAX_SPARE_STAGED_BYTES && st.spare.len() < SPARE_STAGED
                {
                    staged.clear();
                    st.spare.push(staged);
                }
                let mut after_ack = None;
                match indexed {
                    Indexed::Now => retire_batch(&mut st, batch, carry_keys),
                    Indexed::Deferred => {
                        st.carry = batch;
                        st.carry_keys = carry_keys;
                        st.carry_bytes = carried;
                    }
                    Indexed::AfterAck => {
                        st.indexing += 1;
                        after_ack = Some((batch, carry_keys));
                    }
                }
                let woken = self.to_wake(&mut st);
                drop(st);
                for cv in woken {
                    cv.notify_one();
                }
                if let (Some(turn), Some((batch, keys))) = (turn, after_ack) {
                    self.index_after_ack(turn, batch, keys, watermark);
                }
                Ok(())
            }
            Err(e) => {
                let failure = WriteFailure::from(e);
                self.set_failed(&mut st, failure.clone());
                self.wake(&mut st);
                Err(AppendError::PreviousIo(failure))
            }
        }
    }

    /// Commits the index entries of an acknowledged batch, holding the index's turn but not
    /// the leader role (see [`Committer::turn`]): non-durably, as a later deferral would
    /// have. A failure fails the writer like a failed commit; the batch itself stays
    /// acknowledged (its frames are synced, and a reopen indexes them).
    fn index_after_ack(
        &self,
        mut turn: MutexGuard<'_, Option<WriteFailure>>,
        batch: IndexBatch,
        keys: Vec<(u64, Seq)>,
        watermark: Watermark,
    ) {
        // `Index::commit` turns a panic inside redb into `IndexError::Damaged`.
        let failure = self
            .index
            .commit(&batch, watermark, false)
            .err()
            .map(|e| WriteFailure::from(AppendError::from(e)));
        turn.clone_from(&failure);
        drop(turn);
        let mut st = self.lock();
        st.indexing -= 1;
        match failure {
            None => retire_batch(&mut st, batch, keys),
            Some(failure) => {
                self.set_failed(&mut st, failure);
                self.wake(&mut st);
            }
        }
    }

    /// Cuts a taken batch into frames and encodes (compresses) each: no I/O, no lock held.
    fn encode_frames(&self, staged: &Staged) -> Result<Vec<(FramePlan, Vec<u8>)>, AppendError> {
        let plans = staged.plan(self.config.frame_bytes);
        if plans.is_empty() {
            return Ok(Vec::new());
        }
        let pool = || self.encoders.lock().unwrap_or_else(|p| p.into_inner());
        let mut encoder = pool()
            .pop()
            .unwrap_or_else(|| frame::Encoder::new(self.config.zstd_level));
        let frames = plans
            .into_iter()
            .map(|plan| {
                let raw = staged
                    .raw
                    .get(plan.start..plan.end)
                    .ok_or_else(|| AppendError::Writer("staged records out of bounds".into()))?;
                let bytes = encoder.encode(raw, self.config.compress_threshold, plan.flags());
                Ok((plan, bytes))
            })
            .collect();
        pool().push(encoder);
        frames
    }

    /// The leader's work, outside the lock: writes the encoded frames of a batch, syncs, and
    /// commits the index. Returns (bytes written, whether a durable index checkpoint was
    /// committed, what became of the index entries).
    #[allow(clippy::too_many_arguments)]
    fn lead(
        &self,
        staged: &mut Staged,
        frames: Vec<(FramePlan, Vec<u8>)>,
        active: &mut Option<Active>,
        next_segment: u64,
        how: Lead,
        batch: &mut IndexBatch,
        watermark: &mut Watermark,
        since_checkpoint: u64,
    ) -> Result<(u64, bool, Indexed), AppendError> {
        let Lead {
            sync,
            checkpoint,
            may_defer,
        } = how;
        let mut written = 0u64;
        if !staged.raw.is_empty() {
            self.sync_deferred_dirs()?;
        }
        let mut events = staged.events.iter().peekable();
        for (plan, bytes) in frames {
            let a = self.writable_segment(active, next_segment, bytes.len() as u64)?;
            // At most one frame is ever unsynced: the page cache may write frames back in
            // any order, and a lost frame followed by a surviving one would read as
            // corruption instead of a torn tail (or a torn operation).
            a.verify()?;
            if a.synced_len < a.len {
                sync_or_cut(a)?;
            }
            let offset = a.len;
            if let Err(e) = a.file.write_all_at(&bytes, offset) {
                // Cut the partial frame, durably (best effort): a cut left in the page cache
                // could vanish in a power loss after the next process moved on. Earlier frames
                // of a continued operation stay; recovery cuts an operation without its end.
                let _ = a.file.set_len(a.synced_len);
                let _ = a.file.sync_data();
                return Err(e.into());
            }
            a.len += bytes.len() as u64;
            a.last_frame = Some(offset);
            a.preallocate(self.config.preallocate, self.config.segment_bytes);
            written += bytes.len() as u64;
            let frame_len = u32::try_from(bytes.len())
                .map_err(|_| AppendError::Writer("frame over 4 GiB".into()))?;
            while let Some(e) = events.next_if(|e| e.record_offset < plan.end) {
                batch.events.push((
                    e.session,
                    e.seq,
                    Location {
                        segment: a.number,
                        frame_offset: offset,
                        frame_len,
                        record_offset: (e.record_offset - plan.start) as u32,
                    },
                ));
            }
            if !plan.continued {
                *watermark = Watermark {
                    segment: a.number,
                    end: a.len,
                    last_frame: offset,
                };
            }
        }
        if sync && let Some(a) = active.as_mut() {
            a.verify()?;
            if a.synced_len < a.len {
                sync_or_cut(a)?;
            }
        }
        // Moved, not taken: the staged buffers keep their capacity for the next batch.
        batch.ops.append(&mut staged.ops);
        let durable_index =
            sync && (checkpoint || since_checkpoint + written >= self.config.checkpoint_bytes);
        let entries = batch.sessions.len() + batch.events.len() + batch.ops.len();
        if may_defer && sync && !durable_index {
            return Ok(if entries < self.config.deferred_index_entries {
                (written, false, Indexed::Deferred)
            } else {
                (written, false, Indexed::AfterAck)
            });
        }
        // Taken even with nothing to commit: a caller that needs the index current waits for
        // the commit running after an acknowledgement.
        let _turn = self.index_turn().map_err(AppendError::PreviousIo)?;
        if !batch.is_empty() || durable_index {
            self.index.commit(batch, *watermark, durable_index)?;
        }
        Ok((written, durable_index, Indexed::Now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: Seq, data_len: usize) -> Arc<Event> {
        Arc::new(Event::new("x", seq, 0, "y".repeat(data_len)))
    }

    #[test]
    fn retired_events_wait_for_appenders_up_to_a_bound_and_drain() {
        let mut retired = Retired::default();
        let kept: Vec<Arc<Event>> = (0..4).map(|seq| event(seq, 1000)).collect();
        for e in &kept {
            retired.keep(e.clone());
        }
        // Kept alive for an appender: the test's handle and the retired one.
        assert!(kept.iter().all(|e| Arc::strong_count(e) == 2));
        assert_eq!(retired.bytes, 4000);

        // Past the bound, an event is dropped at once instead.
        let big = event(9, MAX_RETIRED_BYTES);
        retired.keep(big.clone());
        assert_eq!(Arc::strong_count(&big), 1);
        assert_eq!(retired.events.len(), 4);

        // An appender staging one record drops two: the newest first.
        let taken = retired.take(2);
        assert_eq!(taken.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3]);
        drop(taken);
        assert_eq!(Arc::strong_count(&kept[3]), 1);
        assert_eq!(retired.bytes, 2000);

        // Taking more than is kept drains it.
        assert_eq!(retired.take(5).len(), 2);
        assert!(retired.events.is_empty());
        assert_eq!(retired.bytes, 0);
        assert!(kept.iter().all(|e| Arc::strong_count(e) == 1));
    }
}
