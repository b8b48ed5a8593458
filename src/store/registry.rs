//! The registry of session rows, and how each log record changes it.
//!
//! The same transitions run when a record is appended and when recovery replays it from the
//! log, so the index a store builds while writing and the one recovery rebuilds agree.

use std::collections::HashMap;

use crate::event::{Seq, SessionHeader};
use crate::index::{FLAG_DELETED, FLAG_VERBATIM, IndexOp, SessionRow};

/// Why a record cannot apply to the registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The session id or number is taken.
    #[error("session {0:?} already exists")]
    Exists(String),
    /// The session number is unknown.
    #[error("session number {0} does not exist")]
    Unknown(u64),
    /// The event's seq is not the session's next seq.
    #[error("session {id:?} event seq {got} is not contiguous (expected {expected})")]
    Gap {
        /// Session id.
        id: String,
        /// The seq found.
        got: Seq,
        /// The seq expected.
        expected: Seq,
    },
    /// A `Verbatim` record for a session that already has events of its own (or is marked).
    #[error("session {0:?} is marked verbatim after its creation")]
    NotFresh(String),
}

/// Every session row, by number and by id.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    rows: crate::index::numhash::NumMap<u64, SessionRow>,
    ids: HashMap<String, u64>,
    next_number: u64,
}

impl Registry {
    /// Builds the registry from index rows and the index's recorded next session number
    /// (numbers of purged sessions are never reused).
    pub(crate) fn new(rows: impl IntoIterator<Item = SessionRow>, next_number: u64) -> Self {
        let mut r = Registry {
            next_number: next_number.max(1),
            ..Registry::default()
        };
        for row in rows {
            r.next_number = r.next_number.max(row.number + 1);
            if !row.is_deleted() {
                r.ids.insert(row.header.id.clone(), row.number);
            }
            r.rows.insert(row.number, row);
        }
        r
    }

    /// The number the next created session gets.
    pub(crate) fn next_number(&self) -> u64 {
        self.next_number
    }

    /// The live session with this id.
    pub(crate) fn by_id(&self, id: &str) -> Option<&SessionRow> {
        self.ids.get(id).and_then(|n| self.rows.get(n))
    }

    /// The session with this number (live or deleted-but-pinned).
    pub(crate) fn get(&self, number: u64) -> Option<&SessionRow> {
        self.rows.get(&number)
    }

    /// Every row (live, and deleted ones forks pin), in no order.
    pub(crate) fn rows(&self) -> impl Iterator<Item = &SessionRow> {
        self.rows.values()
    }

    /// Live sessions in number order.
    pub(crate) fn live(&self) -> Vec<&SessionRow> {
        let mut v: Vec<&SessionRow> = self.rows.values().filter(|r| !r.is_deleted()).collect();
        v.sort_by_key(|r| r.number);
        v
    }

    /// Replaces a row (after an append changed its counters or surface).
    pub(crate) fn put(&mut self, row: SessionRow) {
        self.rows.insert(row.number, row);
    }

    /// Creates a session (`parent`/`seed_length` for a fork). Returns the rows to write.
    pub(crate) fn create(
        &mut self,
        number: u64,
        header: SessionHeader,
        fork: Option<(u64, Seq)>,
    ) -> Result<Vec<SessionRow>, RegistryError> {
        if self.ids.contains_key(&header.id) || self.rows.contains_key(&number) {
            return Err(RegistryError::Exists(header.id));
        }
        let mut changed = Vec::new();
        let mut row = SessionRow::new(number, header);
        if let Some((parent, seed)) = fork {
            let p = self
                .rows
                .get_mut(&parent)
                .ok_or(RegistryError::Unknown(parent))?;
            p.children += 1;
            changed.push(p.clone());
            row.parent = parent;
            row.seed_len = seed;
            row.next_seq = seed;
        }
        self.next_number = self.next_number.max(number + 1);
        self.ids.insert(row.header.id.clone(), number);
        self.rows.insert(number, row.clone());
        changed.push(row);
        Ok(changed)
    }

    /// Accounts for one event appended to `number`.
    pub(crate) fn event(
        &mut self,
        number: u64,
        seq: Seq,
        time: i64,
        data_len: usize,
    ) -> Result<&mut SessionRow, RegistryError> {
        let row = self
            .rows
            .get_mut(&number)
            .ok_or(RegistryError::Unknown(number))?;
        count_event(row, seq, time, data_len)?;
        Ok(row)
    }

    /// Marks a session that has no events of its own yet as verbatim (the `Verbatim` record
    /// that follows its creation). Returns the row to write.
    pub(crate) fn mark_verbatim(&mut self, number: u64) -> Result<SessionRow, RegistryError> {
        let row = self
            .rows
            .get_mut(&number)
            .ok_or(RegistryError::Unknown(number))?;
        if row.next_seq != row.seed_len || row.is_verbatim() {
            return Err(RegistryError::NotFresh(row.header.id.clone()));
        }
        row.flags |= FLAG_VERBATIM;
        row.surface_covered = row.next_seq;
        row.surface_head = crate::index::NO_NODE;
        row.surface_tail = crate::index::NO_NODE;
        row.surface_len = 0;
        Ok(row.clone())
    }

    /// Deletes a session: purged at once when no fork inherits from it, else marked deleted
    /// and kept until its last fork goes (reference counting). Returns the index operations
    /// and rows to write.
    pub(crate) fn delete(
        &mut self,
        number: u64,
    ) -> Result<(Vec<IndexOp>, Vec<SessionRow>), RegistryError> {
        let row = self
            .rows
            .get_mut(&number)
            .ok_or(RegistryError::Unknown(number))?;
        self.ids.remove(&row.header.id);
        row.flags |= FLAG_DELETED;
        let mut ops = Vec::new();
        let mut rows = Vec::new();
        let mut next = Some(number);
        while let Some(n) = next.take() {
            let Some(row) = self.rows.get(&n) else { break };
            if !row.is_deleted() || row.children > 0 {
                rows.push(row.clone());
                break;
            }
            let row = match self.rows.remove(&n) {
                Some(r) => r,
                None => break,
            };
            ops.push(IndexOp::Purge {
                session: n,
                id: row.header.id.to_string(),
            });
            if row.parent != 0
                && let Some(parent) = self.rows.get_mut(&row.parent)
            {
                parent.children = parent.children.saturating_sub(1);
                next = Some(row.parent);
            }
        }
        Ok((ops, rows))
    }

    /// Where `seq` of session `number` is stored: forks resolve inherited seqs through their
    /// parents.
    pub(crate) fn resolve(&self, mut number: u64, seq: Seq) -> u64 {
        while let Some(row) = self.rows.get(&number) {
            if row.parent != 0 && seq < row.seed_len {
                number = row.parent;
            } else {
                break;
            }
        }
        number
    }
}

/// Accounts for one event appended to the session of `row` (its next seq, data bytes and last
/// time): [`Registry::event`] on a row the caller holds.
pub(crate) fn count_event(
    row: &mut SessionRow,
    seq: Seq,
    time: i64,
    data_len: usize,
) -> Result<(), RegistryError> {
    if seq != row.next_seq {
        return Err(RegistryError::Gap {
            id: row.header.id.clone(),
            got: seq,
            expected: row.next_seq,
        });
    }
    row.next_seq += 1;
    row.data_bytes += data_len as u64;
    row.last_time = time;
    if row.is_verbatim() {
        // A verbatim session has no surface table: it is always "covered".
        row.surface_covered = row.next_seq;
    }
    Ok(())
}
