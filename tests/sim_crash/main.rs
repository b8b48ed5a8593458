//! Simulated crashes: random workloads run on the fault-injecting [`SimFs`] (segments) with the
//! index in a real temporary directory, crash at random points (between operations, or in the
//! middle of one: between a segment's creation and its directory sync, inside a write, ...),
//! reopen, and are compared with a model.
//!
//! The workload: many sessions; appends and atomic batches of events of all sizes (a few bytes
//! to 20 KB, compressible or not; turns opened and closed); forks (of forks too) at a random
//! boundary or the tail, into a given or a minted id (`OPEN_TURN` refusals are predicted by
//! the model); session deletes (of forked-from parents too); compactions (`compaction/start`,
//! `compaction/summary`, a `user/message` whose `surfaceOp` replaces a random run of surface
//! nodes citing them, `compaction/end`; as a batch or as single appends), and invalid
//! replaces that must be refused with nothing written; `flush`, `checkpoint`, `wait_durable`,
//! reads, clean close and reopen; segment rollovers (small segments).
//!
//! After every reopen:
//!
//! - every acknowledged-durable event (a `Sync` receipt, or anything before a successful
//!   `flush`, `checkpoint` or `close`) is present and unchanged;
//! - each session is a contiguous prefix of what was appended to it (nothing half-present,
//!   nothing invented), and no session appears that was never created (or was deleted);
//! - a fork acknowledged durable (a `Sync` fork, or one before a `flush`/`checkpoint`/
//!   `close`) exists with exactly its parent's events below its seed length, its
//!   `session/end-seed` marker and its own acknowledged events, and a header naming its parent
//!   and seed length; an unacknowledged fork may be missing, and if present is consistent the
//!   same way;
//! - a delete acknowledged durable leaves no session (no length, header or surface), and its
//!   forks still read their inherited prefix; an unacknowledged delete may be undone;
//! - the surface (read from the index) equals the model's: appends add a node, a replace
//!   removes the nodes from `start` to `end` (by surface position) and puts the summary there;
//! - `verify()` is clean;
//! - a bit flipped in synced data is reported as corruption at the damaged frame's segment and
//!   offset (an open error, `ReadError::Corruption` or a bad frame in `verify`), or, when the
//!   damaged frame is the last of the log, refused as `OpenError::AcknowledgedLost` at that
//!   frame when its writer had published it as durable (`ACKED`), else truncated as a torn
//!   tail and reported as such; it is never returned as wrong data;
//! - after `ENOSPC` on a write or `EIO` on an fsync the store refuses every write with
//!   `AppendError::PreviousIo` until reopened, and the reopened store lost nothing acknowledged.
//!
//! After a crash `index.redb` is kept as left, deleted, or replaced by an older copy.
//!
//! Families added for the integrity issue (11):
//!
//! - `multiframe` / `multiframe-restart`: `max_frame_bytes` of 4-64 KiB, events up to half of
//!   it, and `import_session` (up to 80 events) and `append_batch` (up to 40 events) calls that
//!   span many frames and segments; crashes, ENOSPC, EIO, EFBIG (one-shot, or a file-size
//!   limit) and a full disk land inside them. After every reopen each such operation is whole
//!   or absent (never a half import or a half batch), every acknowledged one is present,
//!   `verify` is clean; after a fault the store reopens and the failed operation, retried with
//!   the fault gone, succeeds.
//! - `import-mix`: imports and batches added to the main workload (default frame limit).
//! - `index-damage`: between rounds the store is closed and `index.redb` damaged (bytes
//!   xored, truncated, a page overwritten, the magic broken, a bit flipped in the first page,
//!   deleted), also after some crashes; a read-only open then answers every read right or with
//!   a typed error (a panic is a failure), and a writable open (`sessionlog recover`) gives the
//!   exact model, a clean `verify` and the same `list()` as before the damage. Right after
//!   each crash a read-only open must answer consistently with the model or refuse (typed).
//!
//! Every scenario runs under `catch_unwind`: a panic fails it with its seed. Two diagnostics
//! check the harness itself on an engine without multi-frame atomicity or index repair:
//! `SESSIONLOG_SIM_BIG_FRAMES=1` (the multi-frame workloads with the default frame limit) and
//! `SESSIONLOG_SIM_INDEX_DAMAGE=delete` (index damage is only a deletion).
//!
//! `SESSIONLOG_SIM_SCENARIOS=N` sets the number of scenarios of each test (defaults: 2000 Sync/Group,
//! 1000 Buffered, 300-500 for the others);
//! `SESSIONLOG_SIM_PROGRESS=1` (with `--nocapture`) prints each scenario's seed as it starts,
//! for a run that aborts instead of failing. `SESSIONLOG_SIM_SEED=S` replays one scenario (`SESSIONLOG_SIM_TRACE=1` prints each step). A
//! failure prints its seed.
//!
//! The engine bugs these scenarios found are regression tests in `regressions.rs` (the
//! scenario families that found them, and deterministic reproductions); `fuzz/README.md`
//! describes each and its fix. All are fixed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sessionlog::error::{AppendError, LogPosition, OpenError, ReadError};
use sessionlog::event::{Event, SessionHeader, SurfaceOp};
use sessionlog::fs::sim::{BitFlip, SimFaults, SimFs, SimOptions, SimRng};
use sessionlog::log::frame::{FRAME_HEADER_LEN, FrameLimits};
use sessionlog::log::record::Record;
use sessionlog::log::segment::{self, SEGMENT_HEADER_LEN};
use sessionlog::session::InvariantMode;
use sessionlog::session::fork::ForkErrorCode;
use sessionlog::store::{Config, Durability, ForkFailure, ImportError, Listed, Retention, Store};

mod families;
mod forks;
mod gc;
mod generate;
mod lifecycle;
mod ops;
mod readers;
mod regressions;
mod scenario;

use families::*;
use gc::*;
use generate::*;

type Res<T = ()> = Result<T, String>;

/// A session as the model knows it.
#[derive(Debug, Clone)]
struct ModelSession {
    id: String,
    /// `None` for a fork whose call failed: the engine stamps the child's header (its
    /// creation time), so only its fork fields are known.
    header: Option<SessionHeader>,
    /// Every event appended, in order (a fork's inherited prefix included); the tail past
    /// `durable` may be missing after a crash. A fork's `session/end-seed` marker carries
    /// the engine's clock: it enters as a placeholder ([`END_SEED_TIME_UNKNOWN`]) and is
    /// pinned when first read back.
    events: Vec<Event>,
    /// How many leading events are acknowledged durable.
    durable: usize,
    /// True once the creation is acknowledged durable.
    created_durable: bool,
    /// What last made events durable (for failure messages).
    why: &'static str,
    /// For a fork: the parent's id and the seed length.
    fork: Option<(String, u64)>,
    /// Where inherited seqs live: `(ancestor id, seed length)`, nearest first (a seq below
    /// a seed length belongs to that ancestor's frames).
    lineage: Vec<(String, u64)>,
    /// `Some(false)`: `delete_session` was called (it may not survive a crash);
    /// `Some(true)`: the delete is acknowledged durable, or was seen to have happened (kept
    /// as a tombstone).
    deleted: Option<bool>,
    /// All-or-nothing operations not yet seen whole after a reopen: `append_batch` calls as
    /// event ranges `start..end`. After a reopen the length is never strictly inside one.
    atomic: Vec<(usize, usize)>,
    /// An `import_session` not yet seen whole after a reopen: its event count. After a
    /// reopen the session is absent or holds at least this many events.
    import_len: Option<usize>,
    /// Created with `Store::create_verbatim` (or forked from such a session): no session
    /// semantics at append, no end-seed marker on a fork.
    verbatim: bool,
}

impl ModelSession {
    fn new(id: String, header: Option<SessionHeader>) -> Self {
        ModelSession {
            id,
            header,
            events: Vec::new(),
            durable: 0,
            created_durable: false,
            why: "",
            fork: None,
            lineage: Vec::new(),
            deleted: None,
            atomic: Vec::new(),
            import_len: None,
            verbatim: false,
        }
    }

    /// The session whose frames hold `seq` (a fork's inherited seqs are its ancestors').
    fn owner(&self, seq: u64) -> &str {
        let mut owner = self.id.as_str();
        for (ancestor, seed) in &self.lineage {
            if seq < *seed {
                owner = ancestor;
            } else {
                break;
            }
        }
        owner
    }
}

#[derive(Debug, Default, Clone)]
struct Model {
    sessions: Vec<ModelSession>,
    next_id: u64,
    /// Every id a fork was minted as.
    minted: HashSet<String>,
}

impl Model {
    /// Indices of the sessions not deleted.
    fn live(&self) -> Vec<usize> {
        (0..self.sessions.len())
            .filter(|&i| self.sessions[i].deleted.is_none())
            .collect()
    }
}

/// What one scenario exercised (summed over a run and printed).
///
/// Forks: `forks` accepted, `forks_acked` acknowledged durable, `forks_open_turn` refused
/// with `OPEN_TURN` as the model predicted, `forks_lost_unacked` unacknowledged forks a crash
/// took, `forks_final` forks alive at the end. Deletes: `deletes` accepted, `deletes_acked`
/// acknowledged durable, `deletes_undone` unacknowledged deletes a crash took back.
/// Compactions: `compactions` accepted, `compactions_acked` whose replace was acknowledged
/// durable, `replaces_refused` invalid replaces refused as expected, `replaces_final` replace
/// events in the sessions at the end.
///
/// Multi-frame operations: `imports` accepted (`imports_acked` acknowledged durable,
/// `import_events` events in them), `big_batches` (`big_batch_events`); at reopens,
/// all-or-nothing operations found whole (`atomic_whole`) or absent (`atomic_absent`), never
/// half; after a fault the failed operation retried successfully (`retries`), found whole
/// already (`retries_not_needed`) or not retried because earlier unacknowledged events were
/// lost (`retries_skipped`); `efbig_faults` and `disk_full_faults` among `faults`'s injected
/// errors. Index damage: `index_damages` damaged copies of `index.redb`; a read-only open of
/// one refused with a typed error (`index_damage_open_errors`), reads answered right
/// (`index_damage_reads_right`) or refused with a typed error (`index_damage_read_errors`);
/// the writable open rebuilt the index (`index_damage_rebuilt`). Read-only opens right after
/// a crash: answered consistently (`ro_after_crash_ok`) or refused (`ro_after_crash_errors`).
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    scenarios: u64,
    crashes: u64,
    mid_op_crashes: u64,
    restarts: u64,
    refused: u64,
    appends: u64,
    acked_events: u64,
    lost_unacked: u64,
    faults: u64,
    flips: u64,
    flips_open_error: u64,
    flips_read_error: u64,
    flips_truncated: u64,
    index_deleted: u64,
    index_older: u64,
    index_rebuilt: u64,
    torn_tails: u64,
    forks: u64,
    forks_acked: u64,
    forks_open_turn: u64,
    forks_lost_unacked: u64,
    forks_final: u64,
    deletes: u64,
    deletes_acked: u64,
    deletes_undone: u64,
    compactions: u64,
    compactions_acked: u64,
    replaces_refused: u64,
    replaces_final: u64,
    imports: u64,
    imports_acked: u64,
    import_events: u64,
    big_batches: u64,
    big_batch_events: u64,
    atomic_whole: u64,
    atomic_absent: u64,
    retries: u64,
    retries_not_needed: u64,
    retries_skipped: u64,
    efbig_faults: u64,
    disk_full_faults: u64,
    index_damages: u64,
    index_damage_open_errors: u64,
    index_damage_read_errors: u64,
    index_damage_reads_right: u64,
    index_damage_rebuilt: u64,
    ro_after_crash_ok: u64,
    ro_after_crash_errors: u64,
    /// Readers opened beside the live writer (`Store::open_reader` while it appends) whose
    /// every session held a prefix with everything acknowledged.
    live_reader_checks: u64,
    /// The storage lifecycle: GC, retention, readers beside a GC (`gc.rs`).
    gc: GcTally,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.scenarios += o.scenarios;
        self.crashes += o.crashes;
        self.mid_op_crashes += o.mid_op_crashes;
        self.restarts += o.restarts;
        self.refused += o.refused;
        self.appends += o.appends;
        self.acked_events += o.acked_events;
        self.lost_unacked += o.lost_unacked;
        self.faults += o.faults;
        self.flips += o.flips;
        self.flips_open_error += o.flips_open_error;
        self.flips_read_error += o.flips_read_error;
        self.flips_truncated += o.flips_truncated;
        self.index_deleted += o.index_deleted;
        self.index_older += o.index_older;
        self.index_rebuilt += o.index_rebuilt;
        self.torn_tails += o.torn_tails;
        self.forks += o.forks;
        self.forks_acked += o.forks_acked;
        self.forks_open_turn += o.forks_open_turn;
        self.forks_lost_unacked += o.forks_lost_unacked;
        self.forks_final += o.forks_final;
        self.deletes += o.deletes;
        self.deletes_acked += o.deletes_acked;
        self.deletes_undone += o.deletes_undone;
        self.compactions += o.compactions;
        self.compactions_acked += o.compactions_acked;
        self.replaces_refused += o.replaces_refused;
        self.replaces_final += o.replaces_final;
        self.imports += o.imports;
        self.imports_acked += o.imports_acked;
        self.import_events += o.import_events;
        self.big_batches += o.big_batches;
        self.big_batch_events += o.big_batch_events;
        self.atomic_whole += o.atomic_whole;
        self.atomic_absent += o.atomic_absent;
        self.retries += o.retries;
        self.retries_not_needed += o.retries_not_needed;
        self.retries_skipped += o.retries_skipped;
        self.efbig_faults += o.efbig_faults;
        self.disk_full_faults += o.disk_full_faults;
        self.index_damages += o.index_damages;
        self.index_damage_open_errors += o.index_damage_open_errors;
        self.index_damage_read_errors += o.index_damage_read_errors;
        self.index_damage_reads_right += o.index_damage_reads_right;
        self.index_damage_rebuilt += o.index_damage_rebuilt;
        self.ro_after_crash_ok += o.ro_after_crash_ok;
        self.ro_after_crash_errors += o.ro_after_crash_errors;
        self.live_reader_checks += o.live_reader_checks;
        self.gc.add(&o.gc);
    }
}

/// Which faults a scenario family may inject.
#[derive(Debug, Clone, Copy)]
struct Family {
    options: SimOptions,
    /// Durabilities to draw from: 0 Sync, 1 Group, 2 Buffered.
    durabilities: &'static [u8],
    /// ENOSPC on writes and EIO on fsyncs.
    faults: bool,
    /// EIO on directory syncs.
    dir_eio: bool,
    /// Keep going (and crash again) after an ENOSPC or EIO and the reopen that follows it.
    continue_after_fault: bool,
    /// Some crashes kill only the process (the page cache survives); a power loss may follow
    /// in a later round.
    restarts: bool,
    flips: bool,
    /// `import_session` and large `append_batch` calls join the workload (with faults landing
    /// inside them), and a failed one is retried after the reopen.
    new_ops: bool,
    /// Small frames (`max_frame_bytes` 4-64 KiB) and events up to half of that, so imports
    /// and batches span many frames and segments; EFBIG and full-disk faults too.
    multiframe: bool,
    /// Between rounds (and after some crashes) `index.redb` is damaged: bytes flipped,
    /// truncated, a page overwritten, its magic broken.
    index_damage: bool,
    /// The storage lifecycle joins the workload: `Store::gc` (thresholds that compact, up to
    /// `live_fraction(1.0)`), `Store::apply_retention`, and `Config::retention` at some opens.
    lifecycle: bool,
    /// The `gc` family: a filled store's GC run from one state with a crash at each of its
    /// file-system operations, ENOSPC at each of its writes, and readers beside it.
    gc_sweep: bool,
    /// The `gc` family crashes its GC at every operation index and fails every write (long
    /// runs, and the seed replays of `regressions.rs`); otherwise about 40 crash points and
    /// 16 failing writes spread over them.
    gc_every_op: bool,
}

/// One frame of the log image, with what it holds (for locating bit flips).
#[derive(Debug, Clone)]
struct FrameInfo {
    segment: u64,
    offset: u64,
    len: u64,
    events: Vec<(String, u64)>,
    creates: Vec<String>,
    deletes: Vec<String>,
}

enum StepError {
    /// The store refused or failed (expected after a fault or crash).
    Append(AppendError),
    /// The test found a violation.
    Fatal(String),
}

impl From<AppendError> for StepError {
    fn from(e: AppendError) -> Self {
        StepError::Append(e)
    }
}

struct Scenario {
    /// The scenario's seed (a few workload choices are drawn from it, not from `rng`, so
    /// that older seed replays keep their paths).
    seed: u64,
    rng: SimRng,
    sim: Arc<SimFs>,
    dir: tempfile::TempDir,
    config: Config,
    model: Model,
    tally: Tally,
    family: Family,
    /// A copy of index.redb taken at a clean point (right after an open).
    older_index: Option<Vec<u8>>,
    /// The index was damaged after a crash: the next open is `sessionlog recover`'s
    /// (`check_index`), which rebuilds whatever the damage.
    index_damaged: bool,
    /// Injected faults counted when the store was last opened.
    errors_at_open: u64,
    /// The multi-frame operation whose call has not returned `Ok` (retried after a fault).
    in_flight: Option<InFlight>,
    /// The reopen being checked followed a process restart: what it shows may still be in
    /// the page cache only, so it is not made durable in the model.
    volatile_reopen: bool,
    /// The sessions `Config::retention` evicted at the last open.
    evicted_at_open: Vec<String>,
}

/// A multi-frame operation in flight.
#[derive(Debug, Clone)]
enum InFlight {
    Import {
        header: SessionHeader,
        events: Vec<Event>,
    },
    Batch {
        id: String,
        base: usize,
        events: Vec<Event>,
    },
}
