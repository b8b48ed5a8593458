//! Following a session from another process: every event as it is acknowledged, once and in
//! order, across writer restarts and crashes (the library side of `show --follow`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::*;
use crate::error::ReadError;

/// What [`Follower::next_update`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FollowUpdate {
    /// The next event of the session (seqs follow one another with no gap or repeat).
    Event(Event),
    /// The writer process went away: `closed` when it closed the store, false when it
    /// crashed or was killed. The follower goes on with what the log holds and waits for a
    /// new writer.
    WriterGone {
        /// The writer closed the store cleanly.
        closed: bool,
    },
    /// A writer process opened the store.
    WriterOpened,
    /// The session was deleted (or deleted and created again: a new incarnation, whose
    /// events are another log): following it ends.
    SessionGone,
    /// Nothing new within the timeout.
    Idle,
}

/// Why following failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FollowError {
    /// The store could not be brought up to date (for 5 seconds of attempts).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// An event could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// [`Store::follow`] on a read-write store (subscribe to it with [`Store::subscribe`]).
    #[error(
        "following needs a store opened for reading (Store::open_reader); a writer's own appends are delivered by Store::subscribe"
    )]
    NotAReader,
}

/// How long refreshing may keep failing (a writer rewriting the log's tail in its recovery
/// while it is read) before the error is returned.
pub(crate) const FOLLOW_RETRY: Duration = Duration::from_secs(5);

/// How often the published position is polled.
const POLL: Duration = Duration::from_millis(20);

/// A subscription to one session's events, from a seq on ([`Store::follow`]).
#[derive(Debug)]
pub struct Follower {
    store: Store,
    session: String,
    /// The incarnation followed (`None` until the session exists).
    incarnation: Option<u64>,
    /// The seq of the next event delivered.
    next: Seq,
    /// The seq of the next event read (queued events lie between the two).
    fetched: Seq,
    queue: VecDeque<FollowUpdate>,
    alive: bool,
    ended: bool,
    /// Since when refreshing has been failing (across calls).
    failing_since: Option<Instant>,
}

impl Store {
    /// Follows `session` from `from` (a reader store, see [`Store::open_reader`]): every
    /// event with seq `from` or later, as the writer acknowledges it. The session need not
    /// exist yet. [`Follower::store`] is the reader (the same view, so printing the session
    /// with it and then following from its length shows every event once).
    pub fn follow(self, session: &str, from: Seq) -> Result<Follower, FollowError> {
        let Some(view) = self.view else {
            return Err(FollowError::NotAReader);
        };
        let incarnation = self.number_of(session);
        Ok(Follower {
            store: self,
            session: session.to_owned(),
            incarnation,
            next: from,
            fetched: from,
            queue: VecDeque::new(),
            alive: view.writer_alive,
            ended: false,
            failing_since: None,
        })
    }
}

impl Follower {
    /// The reader underneath (as of the last update).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The seq of the next event to be delivered.
    pub fn next_seq(&self) -> Seq {
        self.next
    }

    /// The next update, waiting at most `timeout` ([`FollowUpdate::Idle`] when nothing
    /// happened). After [`FollowUpdate::SessionGone`], every call returns it again.
    pub fn next_update(&mut self, timeout: Duration) -> Result<FollowUpdate, FollowError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(u) = self.queue.pop_front() {
                if let FollowUpdate::Event(e) = &u {
                    self.next = e.seq.saturating_add(1);
                }
                return Ok(u);
            }
            if self.ended {
                return Ok(FollowUpdate::SessionGone);
            }
            self.collect()?;
            if !self.queue.is_empty() {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(FollowUpdate::Idle);
            }
            std::thread::sleep(POLL.min(deadline - now));
            match self.store.refresh() {
                Ok(_) => self.failing_since = None,
                Err(e) => {
                    let since = *self.failing_since.get_or_insert(now);
                    if since.elapsed() > FOLLOW_RETRY {
                        return Err(e.into());
                    }
                    continue;
                }
            }
            self.collect()?;
            let alive = self.store.view.is_some_and(|v| v.writer_alive);
            if alive != self.alive {
                self.alive = alive;
                self.queue.push_back(if alive {
                    FollowUpdate::WriterOpened
                } else {
                    FollowUpdate::WriterGone {
                        closed: self.store.view.is_some_and(|v| v.writer_closed),
                    }
                });
            }
        }
    }

    /// Queues the events the view holds past `next` (or the session's end).
    fn collect(&mut self) -> Result<(), FollowError> {
        let number = self.store.number_of(&self.session);
        match (self.incarnation, number) {
            (_, None) if self.incarnation.is_none() => return Ok(()),
            (None, Some(n)) => self.incarnation = Some(n),
            (Some(a), Some(b)) if a == b => {}
            _ => {
                self.queue.push_back(FollowUpdate::SessionGone);
                self.ended = true;
                return Ok(());
            }
        }
        let len = self.store.len(&self.session).unwrap_or(0);
        if len <= self.fetched {
            return Ok(());
        }
        for event in self.store.events(&self.session, self.fetched..len)? {
            let event = event?;
            self.fetched = event.seq.saturating_add(1);
            self.queue.push_back(FollowUpdate::Event(event));
        }
        Ok(())
    }
}

impl Iterator for Follower {
    type Item = Result<FollowUpdate, FollowError>;

    /// Blocks until the next update other than [`FollowUpdate::Idle`]; `None` after
    /// [`FollowUpdate::SessionGone`] was returned once.
    fn next(&mut self) -> Option<Self::Item> {
        if self.ended && self.queue.is_empty() {
            return None;
        }
        loop {
            match self.next_update(Duration::from_secs(3600)) {
                Ok(FollowUpdate::Idle) => continue,
                other => return Some(other),
            }
        }
    }
}
