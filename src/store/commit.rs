//! Group commit: many appenders, one write and one `fdatasync`, done by a leader.
//!
//! Appenders *stage* encoded records in memory (in log order, under a short lock). Whoever
//! needs the staged records on disk (a `Sync` appender, `flush()`, the group-commit timer, or a
//! full batch) becomes the **leader** if no leader is active: it takes everything staged, writes
//! it as one frame, syncs if asked, updates the index in one transaction, and wakes the others.
//! Appenders that arrive while the leader works stage their records for the next leader, so
//! under load each `fdatasync` covers many appends (raft-engine's write barrier).
//!
//! After a failed write or fsync the committer is poisoned: every later write fails with
//! [`AppendError::PreviousIo`] until the store is reopened (the fsync-gate lesson: a failed
//! fsync may have dropped dirty pages, so retrying could acknowledge lost data).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::error::AppendError;
use crate::event::{Event, Seq, SessionHeader};
use crate::fs::StorageFile;
use crate::index::{Index, IndexBatch, Location, SessionRow, Watermark};
use crate::log::Segments;
use crate::log::frame;
use crate::log::segment::SEGMENT_HEADER_LEN;

/// Tunables the committer needs.
#[derive(Debug, Clone)]
pub(crate) struct CommitConfig {
    pub segment_bytes: u64,
    pub compress_threshold: usize,
    pub zstd_level: i32,
    pub checkpoint_bytes: u64,
}

/// The segment being written.
#[derive(Debug)]
pub(crate) struct Active {
    pub number: u64,
    pub file: Arc<dyn StorageFile>,
    pub len: u64,
    pub last_frame: Option<u64>,
}

/// Per-session counters kept in the `sessions` index row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counters {
    pub next_seq: Seq,
    pub data_bytes: u64,
    pub last_time: i64,
}

#[derive(Debug)]
enum StagedEntry {
    Session,
    Event {
        session: u64,
        seq: Seq,
        record_offset: u32,
    },
}

#[derive(Debug, Default)]
struct Staged {
    raw: Vec<u8>,
    entries: Vec<StagedEntry>,
}

#[derive(Debug)]
struct State {
    staged: Staged,
    /// Records ever staged / written to the OS / made durable (monotonic counters).
    staged_lsn: u64,
    written_lsn: u64,
    durable_lsn: u64,
    leader: bool,
    failed: Option<String>,
    active: Option<Active>,
    /// Segment numbers in use (the next segment is `last + 1`).
    next_segment: u64,
    /// Events staged but not yet in the index, for reads.
    pending: HashMap<(u64, Seq), Arc<Event>>,
    headers: HashMap<u64, Arc<SessionHeader>>,
    counters: HashMap<u64, Counters>,
    dirty: Vec<u64>,
    watermark: Watermark,
    bytes_since_checkpoint: u64,
    oldest_unsynced: Option<Instant>,
}

/// The group-commit writer.
#[derive(Debug)]
pub(crate) struct Committer {
    state: Mutex<State>,
    cond: Condvar,
    segments: Arc<Segments>,
    index: Arc<Index>,
    config: CommitConfig,
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
        sessions: impl IntoIterator<Item = (u64, SessionHeader, Counters)>,
    ) -> Self {
        let mut headers = HashMap::new();
        let mut counters = HashMap::new();
        for (number, header, c) in sessions {
            headers.insert(number, Arc::new(header));
            counters.insert(number, c);
        }
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
                pending: HashMap::new(),
                headers,
                counters,
                dirty: Vec::new(),
                watermark,
                bytes_since_checkpoint: 0,
                oldest_unsynced: None,
            }),
            cond: Condvar::new(),
            segments,
            index,
            config,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stages a session creation. Returns the record's LSN.
    pub(crate) fn stage_session(
        &self,
        number: u64,
        header: SessionHeader,
        record: &[u8],
    ) -> Result<u64, AppendError> {
        let mut st = self.lock();
        if let Some(f) = &st.failed {
            return Err(AppendError::PreviousIo(f.clone()));
        }
        st.staged.raw.extend_from_slice(record);
        st.staged.entries.push(StagedEntry::Session);
        st.headers.insert(number, Arc::new(header));
        st.counters.insert(
            number,
            Counters {
                next_seq: 0,
                data_bytes: 0,
                last_time: 0,
            },
        );
        st.dirty.push(number);
        st.staged_lsn += 1;
        st.oldest_unsynced.get_or_insert_with(Instant::now);
        Ok(st.staged_lsn)
    }

    /// Stages encoded event records of one session (all or nothing, in one frame). `records`
    /// pairs each event with its encoding. Returns the LSN of the last record.
    pub(crate) fn stage_events(
        &self,
        session: u64,
        records: Vec<(Event, Vec<u8>)>,
        counters: Counters,
    ) -> Result<u64, AppendError> {
        let mut st = self.lock();
        if let Some(f) = &st.failed {
            return Err(AppendError::PreviousIo(f.clone()));
        }
        for (event, bytes) in records {
            let record_offset = st.staged.raw.len() as u32;
            st.staged.raw.extend_from_slice(&bytes);
            st.staged.entries.push(StagedEntry::Event {
                session,
                seq: event.seq,
                record_offset,
            });
            st.pending.insert((session, event.seq), Arc::new(event));
            st.staged_lsn += 1;
        }
        st.counters.insert(session, counters);
        st.dirty.push(session);
        st.oldest_unsynced.get_or_insert_with(Instant::now);
        Ok(st.staged_lsn)
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
    pub(crate) fn failure(&self) -> Option<String> {
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
            if reached && !checkpoint {
                return Ok(());
            }
            if !st.leader {
                st.leader = true;
                break;
            }
            st = self.cond.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        // This thread leads: take everything staged.
        let staged = std::mem::take(&mut st.staged);
        let upto = st.staged_lsn;
        let mut active = st.active.take();
        let next_segment = st.next_segment;
        let sync = goal == Goal::Durable || checkpoint;
        let mut batch = IndexBatch::default();
        let dirty = std::mem::take(&mut st.dirty);
        for number in dirty {
            if let (Some(h), Some(c)) = (st.headers.get(&number), st.counters.get(&number)) {
                batch.sessions.push(SessionRow {
                    number,
                    next_seq: c.next_seq,
                    data_bytes: c.data_bytes,
                    last_time: c.last_time,
                    header: (**h).clone(),
                });
            }
        }
        batch.sessions.sort_by_key(|r| r.number);
        batch.sessions.dedup_by_key(|r| r.number);
        let mut watermark = st.watermark;
        let since_checkpoint = st.bytes_since_checkpoint;
        drop(st);

        let result = self.lead(
            &staged,
            &mut active,
            next_segment,
            sync,
            &mut batch,
            &mut watermark,
            since_checkpoint,
            checkpoint,
        );

        let mut st = self.lock();
        st.leader = false;
        if let Some(a) = &active {
            st.next_segment = st.next_segment.max(a.number + 1);
        }
        st.active = active;
        match result {
            Ok((written, checkpointed)) => {
                st.written_lsn = upto;
                if sync {
                    st.durable_lsn = upto;
                    if st.durable_lsn >= st.staged_lsn {
                        st.oldest_unsynced = None;
                    }
                }
                st.watermark = watermark;
                st.bytes_since_checkpoint = if checkpointed {
                    0
                } else {
                    since_checkpoint + written
                };
                for e in &staged.entries {
                    if let StagedEntry::Event { session, seq, .. } = e {
                        st.pending.remove(&(*session, *seq));
                    }
                }
                self.cond.notify_all();
                Ok(())
            }
            Err(e) => {
                let msg = e.to_string();
                st.failed = Some(msg.clone());
                self.cond.notify_all();
                Err(AppendError::PreviousIo(msg))
            }
        }
    }

    /// The leader's work, outside the lock. Returns (bytes written, whether a durable index
    /// checkpoint was committed).
    #[allow(clippy::too_many_arguments)]
    fn lead(
        &self,
        staged: &Staged,
        active: &mut Option<Active>,
        next_segment: u64,
        sync: bool,
        batch: &mut IndexBatch,
        watermark: &mut Watermark,
        since_checkpoint: u64,
        checkpoint: bool,
    ) -> Result<(u64, bool), AppendError> {
        let mut written = 0u64;
        if !staged.raw.is_empty() {
            let bytes = frame::encode(
                &staged.raw,
                self.config.compress_threshold,
                self.config.zstd_level,
            );
            let needs_roll = match active {
                None => true,
                Some(a) => {
                    a.len > SEGMENT_HEADER_LEN
                        && a.len + bytes.len() as u64 > self.config.segment_bytes
                }
            };
            if needs_roll {
                if let Some(old) = active.take() {
                    old.file.sync_data()?;
                }
                let number = next_segment;
                let file = self.segments.create(number)?;
                *active = Some(Active {
                    number,
                    file,
                    len: SEGMENT_HEADER_LEN,
                    last_frame: None,
                });
            }
            let Some(a) = active.as_mut() else {
                return Err(AppendError::PreviousIo("no active segment".into()));
            };
            let offset = a.len;
            a.file.write_all_at(&bytes, offset)?;
            a.len += bytes.len() as u64;
            a.last_frame = Some(offset);
            written = bytes.len() as u64;
            let frame_len = bytes.len() as u32;
            for e in &staged.entries {
                if let StagedEntry::Event {
                    session,
                    seq,
                    record_offset,
                } = e
                {
                    batch.events.push((
                        *session,
                        *seq,
                        Location {
                            segment: a.number,
                            frame_offset: offset,
                            frame_len,
                            record_offset: *record_offset,
                        },
                    ));
                }
            }
            *watermark = Watermark {
                segment: a.number,
                end: a.len,
                last_frame: offset,
            };
        }
        if sync && let Some(a) = active.as_ref() {
            a.file.sync_data()?;
        }
        let durable_index =
            sync && (checkpoint || since_checkpoint + written >= self.config.checkpoint_bytes);
        if !batch.is_empty() || durable_index {
            self.index.commit(batch, *watermark, durable_index)?;
        }
        Ok((written, durable_index))
    }

    /// The header of session `number`.
    pub(crate) fn header(&self, number: u64) -> Option<SessionHeader> {
        self.lock().headers.get(&number).map(|h| (**h).clone())
    }
}
