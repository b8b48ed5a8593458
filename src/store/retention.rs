//! Retention: which sessions a policy evicts (by idle time, by total size, by count; pinned
//! sessions never), and deleting them. Eviction is a delete: a session's bytes stay in its
//! segments until the segment GC rewrites them (format-spec §11), and a parent's events stay
//! readable through its forks.

use std::collections::BTreeSet;

use crate::error::AppendError;

use super::{SessionInfo, Store};

/// A retention policy: limits on the sessions a store keeps. Sessions are evicted least
/// recently active first (last event's `time`, or the header's `createdAt` for a session with
/// no events; ties by id); pinned sessions are never evicted and still count towards the
/// size and count limits.
///
/// ```
/// use sessionlog::{Config, Event, Retention, SessionHeader, Store};
///
/// let dir = tempfile::tempdir()?;
/// let store = Store::open(dir.path(), Config::default())?;
/// for (id, time) in [("old", 1_000), ("kept", 2_000), ("new", 3_000)] {
///     let (s, _) = store.create_verbatim(SessionHeader::new(id, 0), Vec::new())?;
///     s.append_batch(vec![Event::new("x/tick", 0, time, "{}")])?;
/// }
/// let policy = Retention::default().max_sessions(1).pin("kept");
/// let evicted = store.apply_retention(&policy, 10_000, &mut |_| {})?;
/// let ids: Vec<&str> = evicted.iter().map(|e| e.id.as_str()).collect();
/// assert_eq!(ids, ["old", "new"]);
/// assert!(store.session_info("kept").is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retention {
    /// Evict sessions whose last activity is more than this many milliseconds before `now`.
    pub max_idle_ms: Option<u64>,
    /// Keep the sessions' total data bytes (the `data` text of their own events, as
    /// [`SessionInfo::data_bytes`]) at or below this.
    pub max_bytes: Option<u64>,
    /// Keep at most this many sessions.
    pub max_sessions: Option<usize>,
    /// Session ids never evicted.
    pub pinned: BTreeSet<String>,
}

impl Retention {
    /// Sets [`Retention::max_idle_ms`].
    pub fn max_idle_ms(mut self, ms: u64) -> Retention {
        self.max_idle_ms = Some(ms);
        self
    }

    /// Sets [`Retention::max_bytes`].
    pub fn max_bytes(mut self, bytes: u64) -> Retention {
        self.max_bytes = Some(bytes);
        self
    }

    /// Sets [`Retention::max_sessions`].
    pub fn max_sessions(mut self, n: usize) -> Retention {
        self.max_sessions = Some(n);
        self
    }

    /// Adds a pinned session id.
    pub fn pin(mut self, id: impl Into<String>) -> Retention {
        self.pinned.insert(id.into());
        self
    }

    /// True when the policy sets no limit.
    pub fn is_unlimited(&self) -> bool {
        self.max_idle_ms.is_none() && self.max_bytes.is_none() && self.max_sessions.is_none()
    }
}

/// Why a session was evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EvictionReason {
    /// Idle longer than [`Retention::max_idle_ms`].
    Idle,
    /// The store held more than [`Retention::max_sessions`] sessions.
    Count,
    /// The sessions' data bytes were over [`Retention::max_bytes`].
    Size,
}

impl std::fmt::Display for EvictionReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EvictionReason::Idle => "idle",
            EvictionReason::Count => "count",
            EvictionReason::Size => "size",
        })
    }
}

/// One session a retention policy evicts (or evicted).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Eviction {
    /// The session id.
    pub id: String,
    /// Which limit evicted it.
    pub reason: EvictionReason,
    /// Its last activity (ms): the last event's `time`, or `createdAt` with no events.
    pub last_activity: i64,
    /// Its event count.
    pub events: u64,
    /// Its data bytes.
    pub data_bytes: u64,
}

/// A session's last activity: its last event's time or its creation time, whichever is
/// later (a fork made a moment ago of an old session is active now).
fn last_activity(info: &SessionInfo) -> i64 {
    let created = i64::try_from(info.header.created_at).unwrap_or(i64::MAX);
    if info.event_count == 0 {
        created
    } else {
        info.last_time.max(created)
    }
}

impl Store {
    /// The sessions `policy` evicts at `now_ms`, in eviction order: the idle ones, then the
    /// least recently active until the count, then the size, fit (pinned ones never). Reads
    /// only the in-memory registry; changes nothing.
    pub fn plan_retention(&self, policy: &Retention, now_ms: i64) -> Vec<Eviction> {
        let mut sessions: Vec<SessionInfo> = self.sessions();
        for info in &mut sessions {
            // A fork with no event of its own has no time of its own: its last event is
            // the inherited one.
            if info.last_time == 0
                && info.event_count > 0
                && let Ok(Some(last)) = self.get(&info.header.id, info.event_count - 1)
            {
                info.last_time = last.time;
            }
        }
        sessions.sort_by(|a, b| {
            (last_activity(a), &a.header.id).cmp(&(last_activity(b), &b.header.id))
        });
        let mut kept_count = sessions.len();
        let mut kept_bytes: u64 = sessions.iter().map(|s| s.data_bytes).sum();
        let mut out = Vec::new();
        let mut evict = |info: &SessionInfo, reason, count: &mut usize, bytes: &mut u64| {
            *count -= 1;
            *bytes -= info.data_bytes;
            out.push(Eviction {
                id: info.header.id.clone(),
                reason,
                last_activity: last_activity(info),
                events: info.event_count,
                data_bytes: info.data_bytes,
            });
        };
        for info in &sessions {
            if policy.pinned.contains(&info.header.id) {
                continue;
            }
            let idle = policy.max_idle_ms.is_some_and(|max| {
                i128::from(now_ms) - i128::from(last_activity(info)) > i128::from(max)
            });
            let reason = if idle {
                Some(EvictionReason::Idle)
            } else if policy.max_sessions.is_some_and(|max| kept_count > max) {
                Some(EvictionReason::Count)
            } else if policy.max_bytes.is_some_and(|max| kept_bytes > max) {
                Some(EvictionReason::Size)
            } else {
                None
            };
            if let Some(reason) = reason {
                evict(info, reason, &mut kept_count, &mut kept_bytes);
            }
        }
        out
    }

    /// Applies `policy` at `now_ms`: deletes every session [`Store::plan_retention`] names as
    /// one operation (after a crash at any byte all of them are deleted, or none; durable per
    /// the store's durability), then calls `on_evict` for each, in the plan's order. Returns
    /// what was evicted. A session deleted meanwhile by another caller is planned again.
    pub fn apply_retention(
        &self,
        policy: &Retention,
        now_ms: i64,
        on_evict: &mut dyn FnMut(&Eviction),
    ) -> Result<Vec<Eviction>, AppendError> {
        let mut tries = 0;
        loop {
            let plan = self.plan_retention(policy, now_ms);
            if plan.is_empty() {
                return Ok(plan);
            }
            let ids: Vec<&str> = plan.iter().map(|e| e.id.as_str()).collect();
            match self.delete_sessions(&ids) {
                Ok(_) => {
                    for eviction in &plan {
                        on_evict(eviction);
                    }
                    return Ok(plan);
                }
                // Deleted meanwhile by another caller: plan again (a few times at most).
                Err(AppendError::NoSuchSession(_)) if tries < 3 => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }
}
