//! Targeted wake-ups for the group committer: each waiting thread sleeps on its own condition
//! variable and is woken only when it can make progress.
//!
//! With one condition variable and `notify_all`, every finished batch woke every waiting
//! appender (64 sessions syncing: 64 wake-ups per `fdatasync`, most of them only to sleep
//! again), and the context switches cost more CPU than the appends. Here a finished batch
//! wakes the waiters whose records it made written or durable, plus **one** waiter that can
//! take the free role (the next leader, or the pipelined encoder), in arrival order.
//!
//! No wake-up is lost: a waiter registers and sleeps under the state lock, every change that
//! can let a waiter progress calls [`Committer::wake`] under that lock, and a thread that goes
//! on (or back to sleep) without a role it may have been offered calls
//! [`Committer::offer_role`], so a free role is always on offer to someone.

use std::sync::{Arc, Condvar, MutexGuard};

use super::{Committer, Goal, State};

/// What a waiting thread waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Want {
    /// Records up to `lsn` at `goal`, or a role to write them itself.
    Commit {
        /// The LSN of the caller's last record.
        lsn: u64,
        /// How far they must go.
        goal: Goal,
    },
    /// The leader role with no encoder running ([`Committer::become_leader`]).
    Lead,
    /// The running leader to finish (the pipelined encoder, which leads next).
    LeaderDone,
}

/// A registered waiter.
#[derive(Debug)]
struct Waiter {
    id: u64,
    want: Want,
    cv: Arc<Condvar>,
}

/// The threads waiting on the committer, in arrival order.
#[derive(Debug, Default)]
pub(super) struct Waiters {
    next_id: u64,
    list: Vec<Waiter>,
    /// Condition variables of finished waits, reused (no allocation per wait).
    spare: Vec<Arc<Condvar>>,
    /// The waiter a free role was offered to, until it wakes.
    offered: Option<u64>,
}

impl State {
    /// True when `lsn` reached `goal`.
    pub(super) fn reached(&self, lsn: u64, goal: Goal) -> bool {
        match goal {
            Goal::Written => self.written_lsn >= lsn,
            Goal::Durable => self.durable_lsn >= lsn,
        }
    }
}

impl Committer {
    /// Sleeps until [`Committer::wake`] picks this thread (or spuriously); the caller
    /// re-checks its condition in a loop, as with a condition variable.
    pub(super) fn wait<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        want: Want,
    ) -> MutexGuard<'a, State> {
        // This thread sleeps without a role: a free one goes to someone else.
        self.offer_role(&mut st);
        let id = st.waiters.next_id;
        st.waiters.next_id += 1;
        let cv = st
            .waiters
            .spare
            .pop()
            .unwrap_or_else(|| Arc::new(Condvar::new()));
        st.waiters.list.push(Waiter {
            id,
            want,
            cv: cv.clone(),
        });
        let mut st = cv.wait(st).unwrap_or_else(|p| p.into_inner());
        if let Some(i) = st.waiters.list.iter().position(|w| w.id == id) {
            st.waiters.list.remove(i);
        }
        if st.waiters.offered == Some(id) {
            st.waiters.offered = None;
        }
        st.waiters.spare.push(cv);
        st
    }

    /// Wakes every waiter that can now progress: all of them after a failure; otherwise
    /// those whose records reached their goal, the pipelined encoder once the leader is done,
    /// and (through [`Committer::offer_role`]) one waiter for a free role.
    pub(super) fn wake(&self, st: &mut State) {
        for cv in self.to_wake(st) {
            cv.notify_one();
        }
    }

    /// [`Committer::wake`] for a caller that releases the state lock right after: the
    /// waiters to notify once it is released. Notified under the lock, each woken thread
    /// would first block on the lock its waker still holds (one more sleep and wake-up per
    /// waiter); notified after, it takes the lock at once. No wake-up is lost: a waiter
    /// releases the lock only inside its condition variable's wait, so it is waiting when
    /// the notification comes (or woke spuriously and re-checks, as every waiter does).
    pub(super) fn to_wake(&self, st: &mut State) -> Vec<Arc<Condvar>> {
        let mut out: Vec<Arc<Condvar>> = Vec::new();
        if st.failed.is_some() {
            out.extend(st.waiters.list.iter().map(|w| w.cv.clone()));
            return out;
        }
        for w in &st.waiters.list {
            if progress(st, w.want) {
                out.push(w.cv.clone());
            }
        }
        if let Some(cv) = self.role_taker(st) {
            out.push(cv);
        }
        out
    }

    /// Offers a free role (leader, or encoder of the records staged while a leader writes)
    /// to the first waiter that can take it, unless an offer is already on its way. A thread
    /// that goes on without taking a role it may have been offered calls this again.
    pub(super) fn offer_role(&self, st: &mut State) {
        if let Some(cv) = self.role_taker(st) {
            cv.notify_one();
        }
    }

    /// [`Committer::offer_role`]'s choice: the waiter to notify (recorded as offered).
    fn role_taker(&self, st: &mut State) -> Option<Arc<Condvar>> {
        if st.failed.is_some() {
            return None;
        }
        if let Some(id) = st.waiters.offered
            && st.waiters.list.iter().any(|w| w.id == id)
        {
            return None;
        }
        st.waiters.offered = None;
        let leader_free = !st.leader && !st.encoding;
        let encoder_free = st.leader && !st.encoding && !st.staged.raw.is_empty();
        if !(leader_free || encoder_free) {
            return None;
        }
        let taker = st.waiters.list.iter().find(|w| {
            !progress(st, w.want)
                && match w.want {
                    Want::Lead => leader_free,
                    Want::Commit { lsn, .. } => leader_free || lsn > st.taken_lsn,
                    Want::LeaderDone => false,
                }
        })?;
        let cv = taker.cv.clone();
        st.waiters.offered = Some(taker.id);
        Some(cv)
    }
}

/// True when a waiter wanting `want` can progress without a role.
fn progress(st: &State, want: Want) -> bool {
    match want {
        Want::Commit { lsn, goal } => st.reached(lsn, goal),
        Want::LeaderDone => !st.leader,
        Want::Lead => false,
    }
}
