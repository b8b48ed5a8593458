//! The catch-up after recovery: folding sessions whose surface table, state or projection
//! checkpoints lag their last event (a crashed writer's tail), at open (an index built from
//! the whole log) or at each session's first use.

use super::*;

/// Threads a catch-up folds sessions on, at most (fewer on a machine with fewer cores).
const CATCH_UP_THREADS: usize = 2;

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
                Err(e) => failures.push((self.id_of(number), e.to_string())),
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
    /// up again). A session whose replay fails is named in `failures`, in `numbers`' order.
    /// Sessions fold independently (each under its own lock, as concurrent appends to them
    /// would), so several are folded at once, on up to [`CATCH_UP_THREADS`] threads.
    fn catch_up_sessions(
        &self,
        numbers: Vec<u64>,
        failures: &mut Vec<(String, String)>,
    ) -> Result<(), AppendError> {
        if numbers.is_empty() {
            return Ok(());
        }
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, CATCH_UP_THREADS)
            .min(numbers.len());
        let next = std::sync::atomic::AtomicUsize::new(0);
        let failed = Mutex::new(Vec::new());
        let work = || -> Result<(), AppendError> {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&number) = numbers.get(i) else {
                    return Ok(());
                };
                if let Some(failure) = self.catch_up_one(number)? {
                    lock(&failed).push((i, failure));
                }
            }
        };
        if threads <= 1 {
            work()?;
        } else {
            std::thread::scope(|s| {
                let helpers: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
                let mine = work();
                // A helper that panicked (none is expected) left its session unfolded: it
                // catches up at its first use.
                helpers
                    .into_iter()
                    .filter_map(|h| h.join().ok())
                    .chain([mine])
                    .collect::<Result<(), AppendError>>()
            })?;
        }
        let mut failed = failed.into_inner().unwrap_or_else(|e| e.into_inner());
        failed.sort_by_key(|(i, _)| *i);
        failures.extend(failed.into_iter().map(|(_, f)| f));
        // Not durable: if this is lost in a crash, the next open catches up again.
        let c = self.committer()?;
        c.commit(c.staged_lsn(), Goal::Written, false)
    }

    /// Folds one session to its last event with its projections and stages its checkpoints;
    /// `Some((id, error))` when its replay fails. One damaged session must not keep the store
    /// from opening: its error is reported and comes back when the session is used.
    fn catch_up_one(&self, number: u64) -> Result<Option<(String, String)>, AppendError> {
        let core = self.core(number);
        let mut core = lock(&core);
        match self.ensure_folded(number, &mut core) {
            Ok(()) => self.checkpoint_state(number, &mut core).map(|()| None),
            Err(e @ AppendError::PreviousIo(_)) => Err(e),
            Err(e) => Ok(Some((self.id_of(number), e.to_string()))),
        }
    }

    /// The id of session `number` (empty when it is gone), for reports.
    pub(super) fn id_of(&self, number: u64) -> String {
        self.registry()
            .get(number)
            .map(|r| r.header.id.to_string())
            .unwrap_or_default()
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
