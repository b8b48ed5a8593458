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

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::error::{AppendError, WriteFailure};
use crate::event::{Event, Seq};
use crate::fs::StorageFile;
use crate::index::{Index, IndexBatch, IndexOp, Location, SessionRow, Watermark};
use crate::log::Segments;
use crate::log::frame;
use crate::log::segment::SEGMENT_HEADER_LEN;

#[path = "commit_roll.rs"]
mod roll;

/// Tunables the committer needs.
#[derive(Debug, Clone)]
pub(crate) struct CommitConfig {
    pub segment_bytes: u64,
    pub compress_threshold: usize,
    pub zstd_level: i32,
    pub checkpoint_bytes: u64,
    /// The payload size a frame is filled to (a record larger than this goes alone).
    pub frame_bytes: usize,
    /// The largest record accepted (`Config::max_frame_bytes`): no frame exceeds it.
    pub max_record_bytes: usize,
}

/// The segment being written.
#[derive(Debug)]
pub(crate) struct Active {
    pub number: u64,
    pub file: Arc<dyn StorageFile>,
    pub len: u64,
    pub last_frame: Option<u64>,
    /// Bytes known durable (everything before this offset was fsynced).
    pub synced_len: u64,
    /// Set by recovery when it read this segment without syncing it: its tail (or a
    /// truncation of it) may exist only in the page cache, so it is synced before anything
    /// is written after it or the store moves to the next segment.
    pub unverified: bool,
    /// Never appended to (a segment of an older format version): the next frame rolls over.
    pub sealed: bool,
}

impl Active {
    /// Syncs a segment recovery did not sync (see [`Active::unverified`]). No cut on
    /// failure: the bytes were there before this process wrote anything.
    ///
    /// When the sync fails, the bytes recovery read (and checked) may be only in the page
    /// cache, marked clean by the failure (fsync-gate): a later process would read them, its
    /// syncs would succeed without writing them, and a power loss would leave a hole under
    /// what it appended. So they are written again from the cache and synced once more; the
    /// first error is returned either way (the writer stops until reopened).
    fn verify(&mut self) -> std::io::Result<()> {
        if self.unverified {
            // Re-assert the length recovery found, so that a truncation that only ever
            // reached the page cache becomes durable with this sync.
            self.file.set_len(self.len)?;
            if let Err(first) = self.file.sync_data() {
                let _ = rewrite(&*self.file, self.len).and_then(|()| self.file.sync_data());
                return Err(first);
            }
            self.unverified = false;
        }
        Ok(())
    }
}

/// Writes bytes `0..len` of `file` again, as read, so that pages a failed sync marked clean
/// are dirty again and the next sync writes them.
pub(crate) fn rewrite(file: &dyn StorageFile, len: u64) -> std::io::Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(buf.len() as u64) as usize;
        let chunk = &mut buf[..n];
        file.read_exact_at(chunk, at)?;
        file.write_all_at(chunk, at)?;
        at += n as u64;
    }
    Ok(())
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

impl Staged {
    /// Cuts the staged records into frames of at most `frame_bytes` payload bytes (a larger
    /// record goes alone), cutting only between records.
    fn plan(&self, frame_bytes: usize) -> Vec<FramePlan> {
        let mut frames: Vec<FramePlan> = Vec::new();
        let mut start = 0usize;
        let mut end = 0usize;
        let mut continuation = false;
        for &record_end in &self.record_ends {
            if end > start && record_end - start > frame_bytes {
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

/// What an appender hands the committer: records in log order, index operations, and
/// updated session rows. Staged together, they land in one frame and one index commit.
#[derive(Debug, Default)]
pub(crate) struct Stage {
    /// Encoded records.
    pub records: Vec<StagedRecord>,
    /// Index operations to apply with the batch.
    pub ops: Vec<IndexOp>,
    /// Session rows to write with the batch.
    pub rows: Vec<SessionRow>,
}

#[derive(Debug)]
struct State {
    staged: Staged,
    /// Records ever staged / written to the OS / made durable (monotonic counters).
    staged_lsn: u64,
    written_lsn: u64,
    durable_lsn: u64,
    leader: bool,
    failed: Option<WriteFailure>,
    active: Option<Active>,
    /// Segment numbers in use (the next segment is `last + 1`).
    next_segment: u64,
    /// Events staged but not yet in the index, for reads.
    pending: super::numhash::NumMap<(u64, Seq), Arc<Event>>,
    /// Latest staged row per dirty session.
    dirty: super::numhash::NumMap<u64, SessionRow>,
    watermark: Watermark,
    bytes_since_checkpoint: u64,
    /// A non-durable index commit happened since the last durable one.
    index_dirty: bool,
    oldest_unsynced: Option<Instant>,
    /// Index entries of synced frames whose commit was deferred (see
    /// [`MAX_DEFERRED_INDEX_ENTRIES`]); their events stay in `pending` until committed.
    carry: IndexBatch,
    /// The `pending` keys of the events in `carry`.
    carry_keys: Vec<(u64, Seq)>,
}

/// A durable append is acknowledged once its frame is synced; the index commit of a small
/// batch may wait for a later commit, so a stream of single durable appends pays one redb
/// commit per this many index entries instead of one per append. Reads are served from
/// `pending` meanwhile, recovery re-indexes what a crash leaves unindexed, and a checkpoint,
/// a close, or any request that needs the index current commits it.
const MAX_DEFERRED_INDEX_ENTRIES: usize = 64;

/// The group-commit writer.
#[derive(Debug)]
pub(crate) struct Committer {
    state: Mutex<State>,
    cond: Condvar,
    segments: Arc<Segments>,
    index: Arc<Index>,
    config: CommitConfig,
    /// The leader's frame encoder (only the leader uses it, so the lock is uncontended).
    encoder: Mutex<frame::Encoder>,
    /// Directory fsyncs a read-write open deferred to the first write (see
    /// [`Committer::defer_dir_syncs`]).
    dirs: Mutex<Option<DirSyncs>>,
    /// Publishes the log position of each durable commit for readers (`ACKED`).
    publisher: std::sync::OnceLock<Arc<super::live::Publisher>>,
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

fn lock_encoder(m: &Mutex<frame::Encoder>) -> MutexGuard<'_, frame::Encoder> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How the leader treats one batch.
#[derive(Debug, Clone, Copy)]
struct Lead {
    /// Sync the log.
    sync: bool,
    /// Commit the index durably.
    checkpoint: bool,
    /// The index commit may be deferred (see [`MAX_DEFERRED_INDEX_ENTRIES`]).
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
                leader: false,
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
            }),
            cond: Condvar::new(),
            segments,
            index,
            encoder: Mutex::new(frame::Encoder::new(config.zstd_level)),
            dirs: Mutex::new(None),
            publisher: std::sync::OnceLock::new(),
            config,
        }
    }

    /// Defers the directory fsyncs of a read-write open to the first write: a segment (or
    /// `segments/` itself) created just before a crash may not have a durable directory
    /// entry, and nothing may be acknowledged on top of it until it has. A store opened only
    /// to read and resume issues no fsync.
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

    /// Waits until no leader runs and becomes it (`PreviousIo` when the writer failed). The
    /// caller clears `leader` and notifies when done.
    fn become_leader(&self) -> Result<MutexGuard<'_, State>, AppendError> {
        let mut st = self.lock();
        loop {
            if let Some(f) = &st.failed {
                return Err(AppendError::PreviousIo(f.clone()));
            }
            if !st.leader {
                st.leader = true;
                return Ok(st);
            }
            st = self.cond.wait(st).unwrap_or_else(|p| p.into_inner());
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
        let watermark = st.watermark;
        let active = st.active.as_ref().map(|a| a.file.clone());
        drop(st);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
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
                    st.pending.remove(key);
                }
                Ok(v)
            }
            Err(e) => {
                let failure = WriteFailure::from(e);
                st.failed = Some(failure.clone());
                Err(AppendError::PreviousIo(failure))
            }
        };
        self.cond.notify_all();
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
        for (bytes, event) in stage.records {
            let record_offset = st.staged.raw.len();
            st.staged.raw.extend_from_slice(&bytes);
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
        Ok(st.staged_lsn)
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
    pub(crate) fn commit(&self, lsn: u64, goal: Goal, checkpoint: bool) -> Result<(), AppendError> {
        let mut st = self.lock();
        loop {
            if let Some(f) = &st.failed {
                return Err(AppendError::PreviousIo(f.clone()));
            }
            let reached = match goal {
                Goal::Written => st.written_lsn >= lsn,
                Goal::Durable => st.durable_lsn >= lsn,
            };
            let unindexed =
                !st.staged.ops.is_empty() || !st.dirty.is_empty() || !st.carry.is_empty();
            // A segment recovery read without syncing is made durable by the first request
            // for durability, even with nothing staged: the store already serves its bytes.
            let unverified =
                goal == Goal::Durable && st.active.as_ref().is_some_and(|a| a.unverified);
            let must_index = goal == Goal::Written && unindexed;
            let done = reached && !checkpoint && !unverified && !must_index;
            if done {
                return Ok(());
            }
            if !st.leader {
                st.leader = true;
                break;
            }
            st = self.cond.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        // This thread leads: take everything staged.
        let mut staged = std::mem::take(&mut st.staged);
        let ops = std::mem::take(&mut staged.ops);
        let upto = st.staged_lsn;
        let mut active = st.active.take();
        let next_segment = st.next_segment;
        let sync = goal == Goal::Durable || checkpoint;
        // Deferred entries first: they are older than what is staged now.
        let mut batch = std::mem::take(&mut st.carry);
        let mut carry_keys = std::mem::take(&mut st.carry_keys);
        let mut rows: Vec<SessionRow> = std::mem::take(&mut st.dirty).into_values().collect();
        rows.sort_by_key(|r| r.number);
        batch.sessions.extend(rows);
        let may_defer = goal == Goal::Durable && !checkpoint;
        let mut watermark = st.watermark;
        let since_checkpoint = st.bytes_since_checkpoint;
        drop(st);

        // A panic while leading (e.g. inside redb on a damaged index) poisons the committer
        // instead of leaving `leader` set, which would hang every later caller.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.lead(
                &staged,
                &mut active,
                next_segment,
                Lead {
                    sync,
                    checkpoint,
                    may_defer,
                },
                &mut batch,
                ops,
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
                if indexed {
                    for key in &carry_keys {
                        st.pending.remove(key);
                    }
                } else {
                    st.carry = batch;
                    st.carry_keys = carry_keys;
                }
                self.cond.notify_all();
                Ok(())
            }
            Err(e) => {
                let failure = WriteFailure::from(e);
                st.failed = Some(failure.clone());
                self.cond.notify_all();
                Err(AppendError::PreviousIo(failure))
            }
        }
    }

    /// The leader's work, outside the lock. Returns (bytes written, whether a durable index
    /// checkpoint was committed, whether the index was committed at all).
    #[allow(clippy::too_many_arguments)]
    fn lead(
        &self,
        staged: &Staged,
        active: &mut Option<Active>,
        next_segment: u64,
        how: Lead,
        batch: &mut IndexBatch,
        ops: Vec<IndexOp>,
        watermark: &mut Watermark,
        since_checkpoint: u64,
    ) -> Result<(u64, bool, bool), AppendError> {
        let Lead {
            sync,
            checkpoint,
            may_defer,
        } = how;
        let mut written = 0u64;
        if !staged.raw.is_empty() {
            self.sync_deferred_dirs()?;
        }
        let plans = staged.plan(self.config.frame_bytes);
        let mut events = staged.events.iter().peekable();
        for plan in plans {
            let raw = staged
                .raw
                .get(plan.start..plan.end)
                .ok_or_else(|| AppendError::Writer("staged records out of bounds".into()))?;
            let bytes = lock_encoder(&self.encoder).encode(
                raw,
                self.config.compress_threshold,
                plan.flags(),
            );
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
        batch.ops.extend(ops);
        let durable_index =
            sync && (checkpoint || since_checkpoint + written >= self.config.checkpoint_bytes);
        let entries = batch.sessions.len() + batch.events.len() + batch.ops.len();
        if may_defer && sync && !durable_index && entries < MAX_DEFERRED_INDEX_ENTRIES {
            return Ok((written, false, false));
        }
        if !batch.is_empty() || durable_index {
            self.index.commit(batch, *watermark, durable_index)?;
        }
        Ok((written, durable_index, true))
    }
}

impl Committer {
    /// The active segment, rolled over first when a frame of `frame_len` bytes would not fit
    /// (or when the active segment is of an older format version, which is never appended to).
    fn writable_segment<'a>(
        &self,
        active: &'a mut Option<Active>,
        next_segment: u64,
        frame_len: u64,
    ) -> Result<&'a mut Active, AppendError> {
        let needs_roll = match active.as_ref() {
            None => true,
            Some(a) => {
                a.sealed
                    || (a.len > SEGMENT_HEADER_LEN && a.len + frame_len > self.config.segment_bytes)
            }
        };
        if needs_roll {
            let number = match active.take() {
                Some(mut old) => {
                    old.verify()?;
                    if old.synced_len < old.len {
                        sync_or_cut(&mut old)?;
                    }
                    next_segment.max(old.number + 1)
                }
                None => next_segment,
            };
            let file = self.segments.create(number)?;
            *active = Some(Active {
                number,
                file,
                len: SEGMENT_HEADER_LEN,
                last_frame: None,
                synced_len: SEGMENT_HEADER_LEN,
                unverified: false,
                sealed: false,
            });
        }
        active
            .as_mut()
            .ok_or_else(|| AppendError::Writer("no active segment".into()))
    }
}

/// Syncs the active segment. When the sync fails, the unsynced bytes are cut off (best
/// effort): after a failed fsync Linux may keep the lost pages readable, and a reopen in the
/// same boot would otherwise index a frame that a later power loss removes, leaving a hole
/// before frames acknowledged after it.
fn sync_or_cut(a: &mut Active) -> std::io::Result<()> {
    match a.file.sync_data() {
        Ok(()) => {
            a.synced_len = a.len;
            Ok(())
        }
        Err(e) => {
            let _ = a.file.set_len(a.synced_len);
            let _ = a.file.sync_data();
            Err(e)
        }
    }
}
