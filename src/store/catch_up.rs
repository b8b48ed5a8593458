//! The catch-up after recovery: folding sessions whose surface table, state or projection
//! checkpoints lag their last event (a crashed writer's tail), at open (an index built from
//! the whole log) or at each session's first use.

use super::*;

impl Store {
    /// Brings every session's surface table and state checkpoint up to its last event (after
    /// recovery indexed a tail without them), then checkpoints the index. A writable open
    /// leaves this to each session's first use; this does it for all at once (a damaged
    /// session is named in the returned list, its error comes back when it is used).
    pub fn catch_up(&self) -> Result<Vec<(String, String)>, AppendError> {
        let mut failures = Vec::new();
        self.catch_up_into(&mut failures)?;
        Ok(failures)
    }

    /// Before a session's counters or surface are read: a reader folds what grew since its
    /// view was built ([`Store::fold_behind`]); a writer folds a session whose surface the
    /// index does not cover to its last event (after a crash) and stages its surface table,
    /// as its next append would. A session whose replay fails is left as it is (its error
    /// comes back when it is read or appended to).
    pub(crate) fn settle(&self, only: Option<u64>) {
        if self.view.is_some() || self.committer.is_none() {
            self.fold_behind(only);
            return;
        }
        let behind = self.surface_behind(only);
        // A failure here comes back when the session is used.
        let _ = self.catch_up_sessions(behind, &mut Vec::new());
    }

    /// The live sessions (or `only`) whose surface the index does not cover to their last
    /// event (verbatim sessions have none).
    fn surface_behind(&self, only: Option<u64>) -> Vec<u64> {
        self.registry()
            .live()
            .iter()
            .filter(|r| {
                r.surface_covered < r.next_seq
                    && !r.is_verbatim()
                    && only.is_none_or(|n| n == r.number)
            })
            .map(|r| r.number)
            .collect()
    }

    /// A read-only open's catch-up: every session whose surface the index does not cover to
    /// its last event (a crashed writer's tail, or an index rebuilt in memory) gets its state
    /// folded in memory, so counters such as the surface length are right. Nothing is
    /// written; a session whose replay fails is reported in `catch_up_failures`.
    pub(super) fn catch_up_in_memory(&mut self) {
        self.report.catch_up_failures = self.fold_behind(None);
    }

    /// For a reader: folds the state of every session (or of `only`) whose surface counters
    /// do not cover its last event (after a refresh made it grow), continuing the state
    /// folded before. Returns the sessions whose replay failed (their error returns when
    /// they are read).
    pub(crate) fn fold_behind(&self, only: Option<u64>) -> Vec<(String, String)> {
        let behind = self.surface_behind(only);
        let mut failures = Vec::new();
        for number in behind {
            // A reader's refresh continues the state it folded before.
            let shared = self.core(number);
            let mut core = Core {
                state: lock(&shared).state.take(),
                ..Core::default()
            };

            match self.load_state_read_only(number, &mut core) {
                Ok(()) => {
                    let row = self.registry().get(number).cloned();
                    if let (Some(mut row), Some(state)) = (row, core.state.as_ref()) {
                        set_surface(&mut row, state);
                        self.registry_mut().put(row);
                    }
                    lock(&shared).state = core.state;
                }
                Err(e) => {
                    let id = self
                        .registry()
                        .get(number)
                        .map(|r| r.header.id.clone())
                        .unwrap_or_default();
                    failures.push((id, e.to_string()));
                }
            }
        }
        failures
    }

    fn catch_up_into(&self, failures: &mut Vec<(String, String)>) -> Result<(), AppendError> {
        self.catch_up_sessions(self.behind(), failures)
    }

    /// The sessions whose surface table, state or projection checkpoints do not cover their
    /// last event (what a catch-up folds).
    pub(super) fn behind(&self) -> Vec<u64> {
        self.registry()
            .live()
            .iter()
            .filter(|r| !r.is_verbatim())
            .filter(|r| {
                r.surface_covered < r.next_seq
                    || self.state_covered(r.number) < r.next_seq
                    || self.projections_covered(r.number) < r.next_seq
            })
            .map(|r| r.number)
            .collect()
    }

    /// Folds each of `numbers` to its last event, with its projections, and checkpoints
    /// them (staged, then committed to the index, not durably: a crash only means catching
    /// up again). A session whose replay fails is named in `failures`.
    fn catch_up_sessions(
        &self,
        numbers: Vec<u64>,
        failures: &mut Vec<(String, String)>,
    ) -> Result<(), AppendError> {
        if numbers.is_empty() {
            return Ok(());
        }
        for number in numbers {
            let core = self.core(number);
            let mut core = lock(&core);
            // One damaged session must not keep the store from opening: its error is
            // reported and comes back when the session is used.
            match self
                .ensure_state(number, &mut core)
                .and_then(|()| self.ensure_projections(number, &mut core))
            {
                Ok(()) => self.checkpoint_state(number, &mut core)?,
                Err(e @ AppendError::PreviousIo(_)) => return Err(e),
                Err(e) => {
                    let id = self
                        .registry()
                        .get(number)
                        .map(|r| r.header.id.clone())
                        .unwrap_or_default();
                    failures.push((id, e.to_string()));
                }
            }
        }
        // Not durable: if this is lost in a crash, the next open catches up again.
        let c = self.committer()?;
        c.commit(c.staged_lsn(), Goal::Written, false)
    }

    /// The least seq the projection checkpoints of a session cover (0 when one is missing).
    fn projections_covered(&self, number: u64) -> Seq {
        let rows = self.index.projections(number).unwrap_or_default();
        let keys = self.config.projections.len();
        if rows.len() < keys {
            return 0;
        }
        rows.iter()
            .filter_map(|(key, record)| Checkpoint::from_record(key.clone(), record).ok())
            .map(|cp| cp.covered)
            .min()
            .unwrap_or(0)
    }

    pub(super) fn state_covered(&self, number: u64) -> Seq {
        self.index
            .state(number)
            .ok()
            .flatten()
            .map_or(0, |(c, _)| c)
    }
}
