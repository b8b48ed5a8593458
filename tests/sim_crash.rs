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
//!   damaged frame is the last of the log, truncated as a torn tail and reported as such; it
//!   is never returned as wrong data;
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
//! `SESSIONLOG_SIM_SEED=S` replays one scenario (`SESSIONLOG_SIM_TRACE=1` prints each step). A
//! failure prints its seed.
//!
//! The engine bugs these scenarios found are regression tests at the end of this file (the
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
use sessionlog::store::{Config, Durability, ForkFailure, ImportError, Listed, Store};

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

/// The time of a fork's `session/end-seed` marker before it was read back.
const END_SEED_TIME_UNKNOWN: i64 = i64::MIN;

/// True when `got` is the event the model holds (a placeholder marker matches any time).
fn same_event(model: &Event, got: &Event) -> bool {
    if model.time == END_SEED_TIME_UNKNOWN && model.kind == "session/end-seed" {
        let mut pinned = model.clone();
        pinned.time = got.time;
        pinned == *got
    } else {
        model == got
    }
}

/// The surface the session rules give `events`: an append adds the event's seq as the last
/// node; a replace removes the nodes from `start` to `end` (by their positions in the
/// surface) and puts the event's seq in their place.
fn model_surface(events: &[Event]) -> Result<Vec<u64>, String> {
    let mut nodes: Vec<u64> = Vec::new();
    for e in events {
        match e.surface_op {
            None => {}
            Some(SurfaceOp::Append) => nodes.push(e.seq),
            Some(SurfaceOp::Replace { start, end }) => {
                let a = nodes.iter().position(|&n| n == start);
                let b = nodes.iter().position(|&n| n == end);
                match (a, b) {
                    (Some(a), Some(b)) if a <= b => {
                        nodes.splice(a..=b, [e.seq]);
                    }
                    _ => {
                        return Err(format!(
                            "model: replace {start}..{end} at seq {} does not apply to {nodes:?}",
                            e.seq
                        ));
                    }
                }
            }
        }
    }
    Ok(nodes)
}

/// True when the last `turn/start` or `turn/end` at or before `boundary` is a start: a fork
/// there ends inside an open turn (`OPEN_TURN`).
fn open_turn_at(events: &[Event], boundary: usize) -> bool {
    events[..=boundary]
        .iter()
        .rev()
        .find(|e| e.kind == "turn/start" || e.kind == "turn/end")
        .is_some_and(|e| e.kind == "turn/start")
}

#[derive(Debug, Default)]
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
}

const MAIN: Family = Family {
    options: SimOptions {
        reorder: true,
        volatile_dir_entries: true,
        volatile_mkdir: false,
        eio_drops_cache: true,
    },
    durabilities: &[0, 1],
    faults: true,
    dir_eio: false,
    continue_after_fault: false,
    restarts: false,
    flips: true,
    new_ops: false,
    multiframe: false,
    index_damage: false,
};

/// Buffered mode with unsynced writes persisting in order (`buffered_survives_reordered_crashes`
/// lets them reorder).
const BUFFERED_IN_ORDER: Family = Family {
    options: SimOptions {
        reorder: false,
        volatile_dir_entries: true,
        volatile_mkdir: false,
        eio_drops_cache: true,
    },
    durabilities: &[2],
    faults: true,
    dir_eio: false,
    continue_after_fault: false,
    restarts: false,
    flips: true,
    new_ops: false,
    multiframe: false,
    index_damage: false,
};

/// Imports and batches spanning many frames and segments, with ENOSPC / EIO / EFBIG /
/// full-disk faults and crashes landing inside them. Flips are left to the other families (a
/// flip that truncates the last frame of a multi-frame operation takes the whole operation,
/// which the flip check's bookkeeping does not model).
const MULTIFRAME: Family = Family {
    options: SimOptions {
        reorder: true,
        volatile_dir_entries: true,
        volatile_mkdir: false,
        eio_drops_cache: true,
    },
    durabilities: &[0, 1],
    faults: true,
    dir_eio: false,
    continue_after_fault: false,
    restarts: false,
    flips: false,
    new_ops: true,
    multiframe: true,
    index_damage: false,
};

fn scratch_dir() -> tempfile::TempDir {
    // tmpfs makes the index's real fsyncs free; fall back to the default temp dir.
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().unwrap()
}

fn filler(rng: &mut SimRng, len: usize) -> String {
    if rng.chance(1, 2) {
        // Compressible.
        "abcdefgh".repeat(len / 8 + 1)[..len].to_owned()
    } else {
        (0..len)
            .map(|_| char::from(b'a' + rng.below(26) as u8))
            .collect()
    }
}

fn gen_event(rng: &mut SimRng, seq: u64, max_text: usize) -> Event {
    let size = (match rng.below(20) {
        0..=9 => rng.below(40),
        10..=15 => rng.range(100, 700),
        16..=18 => rng.range(1000, 5000),
        _ => rng.range(5000, 20_000),
    } as usize)
        .min(max_text);
    let time = rng.range(0, 1 << 50) as i64 - (1 << 48);
    let text = filler(rng, size);
    match rng.below(7) {
        0 if seq > 0 => {
            let mut e = Event::new(
                "user/message",
                seq,
                time,
                format!(
                    r#"{{"id":"m{seq}","role":"user","content":[{{"type":"text","text":"{text}"}}],"source":{{"kind":"user"}}}}"#
                ),
            )
            .with_surface_op(SurfaceOp::Append);
            if rng.chance(1, 2) {
                e = e.with_sources(vec![rng.below(seq)]);
            }
            e
        }
        1 => Event::new("turn/start", seq, time, format!(r#"{{"turn":{seq}}}"#)),
        // Closes the open turn (forks are refused inside one).
        3 => Event::new(
            "turn/end",
            seq,
            time,
            format!(r#"{{"turn":{},"reason":{{"kind":"completed"}}}}"#, seq + 1),
        ),
        2 => Event::new(
            "tool/call",
            seq,
            time,
            format!(r#"{{"callId":"c{seq}","arguments":"{text}"}}"#),
        ),
        _ => Event::new(
            "assistant/chunk",
            seq,
            time,
            format!(
                r#"{{"chunk":{{"type":"text-delta","text":"{text}"}},"n":[1,2.5,-3e7,null,true]}}"#
            ),
        ),
    }
}

fn make_config(rng: &mut SimRng, sim: &Arc<SimFs>, family: &Family) -> Config {
    let durability = match rng.pick(family.durabilities).copied().unwrap_or(0) {
        0 => Durability::Sync,
        // Long enough that the timer never fires inside a scenario: the scenario stays
        // deterministic, and durability comes from flush, checkpoint and close.
        1 => Durability::Group {
            max_delay: Duration::from_secs(3600),
        },
        2 => Durability::Buffered,
        // The background leader syncs within a millisecond: it races the workload, so these
        // scenarios do not replay exactly (the checks hold for any interleaving).
        _ => Durability::Group {
            max_delay: Duration::from_millis(1),
        },
    };
    let mut config = Config::default()
        .durability(durability)
        .segment_bytes(*rng.pick(&[4096, 8192, 16_384, 65_536]).unwrap())
        .batch_bytes(*rng.pick(&[256, 4096, 65_536]).unwrap())
        .compress_threshold(*rng.pick(&[64, 512, 1 << 20]).unwrap())
        .checkpoint_bytes(*rng.pick(&[4096, 1 << 40]).unwrap()) // Random workloads do not follow dsh's turn/step invariants (surface rules apply).
        .invariants(InvariantMode::Off)
        .with_fs(sim.clone());
    if family.multiframe {
        // Frames of 4-64 KiB: an import or batch of a few dozen events of up to a few KiB
        // spans many frames, and (segments of 4-64 KiB) several segments.
        let frame = *rng.pick(&[4096, 8192, 16_384, 65_536]).unwrap();
        config.max_event_bytes = u64::from(frame / 2);
        // Diagnostic: `SESSIONLOG_SIM_BIG_FRAMES=1` keeps the default frame limit (the same
        // workload, but every operation fits one frame), to tell a harness problem from the
        // engine's frame splitting.
        if std::env::var_os("SESSIONLOG_SIM_BIG_FRAMES").is_none() {
            config.max_frame_bytes = frame;
        }
    }
    config
}

/// The longest filler text an event of the scenario may carry (its JSON stays below
/// `max_event_bytes`).
fn max_text(config: &Config) -> usize {
    usize::try_from(config.max_event_bytes.saturating_sub(400)).unwrap_or(usize::MAX)
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

/// Reads the log image the simulator holds: frame boundaries and the events in each frame.
fn catalog(sim: &SimFs, seg_dir: &Path) -> (Vec<FrameInfo>, Vec<u64>) {
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut frames = Vec::new();
    let mut numbers: Vec<u64> = sessionlog::fs::FileSystem::list(sim, seg_dir)
        .unwrap_or_default()
        .iter()
        .filter_map(|n| segment::parse_file_name(n))
        .collect();
    numbers.sort_unstable();
    let limits = FrameLimits::default();
    for &n in &numbers {
        let bytes = sim
            .read_file(&segment::path(seg_dir, n))
            .unwrap_or_default();
        let mut at = SEGMENT_HEADER_LEN as usize;
        while at + FRAME_HEADER_LEN <= bytes.len() {
            let Ok((header, payload)) = sessionlog::log::frame::decode(&bytes[at..], &limits)
            else {
                break;
            };
            let mut events = Vec::new();
            let mut creates = Vec::new();
            let mut deletes = Vec::new();
            for (_, r) in Record::decode_all(&payload).unwrap_or_default() {
                match r {
                    Record::CreateSession { session, header } => {
                        creates.push(header.id.clone());
                        names.insert(session, header.id);
                    }
                    Record::ForkSession {
                        session, header, ..
                    } => {
                        creates.push(header.id.clone());
                        names.insert(session, header.id);
                    }
                    Record::DeleteSession { session } => {
                        deletes.push(names.get(&session).cloned().unwrap_or_default())
                    }
                    Record::Event { session, event } => {
                        events.push((names.get(&session).cloned().unwrap_or_default(), event.seq))
                    }
                    // Part of its session's creation (the record before it).
                    Record::Verbatim { .. } => {}
                }
            }
            frames.push(FrameInfo {
                segment: n,
                offset: at as u64,
                len: header.frame_len(),
                events,
                creates,
                deletes,
            });
            at += header.frame_len() as usize;
        }
    }
    (frames, numbers)
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

impl Scenario {
    fn new(seed: u64, family: Family) -> Self {
        let mut rng = SimRng::new(seed);
        let sim = SimFs::new(rng.next_u64(), family.options);
        let config = make_config(&mut rng, &sim, &family);
        Scenario {
            rng,
            sim,
            dir: scratch_dir(),
            config,
            model: Model::default(),
            tally: Tally {
                scenarios: 1,
                ..Tally::default()
            },
            family,
            older_index: None,
            index_damaged: false,
            errors_at_open: 0,
            in_flight: None,
            volatile_reopen: false,
        }
    }

    /// True when a fault or crash fired since the last open without the test thread seeing
    /// it: the Group-commit background leader hit it. `close` then returns `Ok` although
    /// nothing more was synced (engine finding, `close_reports_a_failed_background_sync`), so
    /// its `Ok` acknowledges nothing.
    fn background_failure(&self) -> bool {
        self.sim.is_down() || self.sim.stats().injected_errors > self.errors_at_open
    }

    fn index_path(&self) -> PathBuf {
        self.dir.path().join("index.redb")
    }

    fn seg_dir(&self) -> PathBuf {
        self.dir.path().join("segments")
    }

    fn open(&mut self) -> Result<Store, OpenError> {
        let config = self
            .config
            .clone()
            .check_index(self.config.check_index || self.index_damaged);
        let store = Store::open(self.dir.path(), config)?;
        self.index_damaged = false;
        self.errors_at_open = self.sim.stats().injected_errors;
        if trace() {
            eprintln!(
                "opened: {:?} segments {:?}",
                store.recovery_report(),
                sessionlog::fs::FileSystem::list(&*self.sim, &self.seg_dir())
            );
        }
        if store.recovery_report().index_rebuilt {
            self.tally.index_rebuilt += 1;
        }
        if store.recovery_report().truncated.is_some() {
            self.tally.torn_tails += 1;
        }
        if self.rng.chance(1, 3) {
            self.older_index = std::fs::read(self.index_path()).ok();
        }
        Ok(store)
    }

    /// Compares a freshly opened store with the model, then makes the model match it (what
    /// survived is durable now).
    fn check_against_model(&mut self, store: &Store, what: &str) -> Res {
        let mut keep = Vec::new();
        for mut s in std::mem::take(&mut self.model.sessions) {
            let Some(len) = store.len(&s.id) else {
                match s.deleted {
                    // Gone, as acknowledged (its forks are checked on their own), or a delete
                    // that reached the log. Kept as a tombstone: a bit flip that truncates the
                    // frame holding the delete brings the session back.
                    Some(_) => {
                        if !self.volatile_reopen {
                            s.deleted = Some(true);
                        }
                        keep.push(s.clone());
                    }
                    None if s.created_durable => {
                        return Err(format!("{what}: acknowledged session {} is missing", s.id));
                    }
                    None => {
                        self.tally.lost_unacked += s.events.len() as u64;
                        if s.import_len.is_some() {
                            self.tally.atomic_absent += 1;
                        }
                        if s.fork.is_some() {
                            self.tally.forks_lost_unacked += 1;
                        }
                    }
                }
                if store.header(&s.id).is_some() || store.surface(&s.id).is_ok() {
                    return Err(format!(
                        "{what}: session {} has no length but still answers",
                        s.id
                    ));
                }
                continue;
            };
            match s.deleted {
                Some(true) => {
                    return Err(format!(
                        "{what}: session {} was deleted (acknowledged durable) but has {len} events",
                        s.id
                    ));
                }
                Some(false) => {
                    // The delete did not survive: the session is live again.
                    self.tally.deletes_undone += 1;
                    s.deleted = None;
                }
                None => {}
            }
            let len = len as usize;
            if len < s.durable {
                return Err(format!(
                    "{what}: session {} has {len} events, {} were acknowledged durable (last by {}); recovery: {:?}; sim: {:?}",
                    s.id,
                    s.durable,
                    s.why,
                    store.recovery_report(),
                    self.sim.stats()
                ));
            }
            if len > s.events.len() {
                return Err(format!(
                    "{what}: session {} has {len} events, only {} were appended",
                    s.id,
                    s.events.len()
                ));
            }
            // All-or-nothing operations: whole or absent, never half.
            for &(a, b) in &s.atomic {
                if a < len && len < b {
                    return Err(format!(
                        "{what}: session {} has {len} events: the all-or-nothing append_batch of seqs {a}..{b} is half there; recovery: {:?}",
                        s.id,
                        store.recovery_report()
                    ));
                }
                if len >= b {
                    self.tally.atomic_whole += 1;
                } else {
                    self.tally.atomic_absent += 1;
                }
            }
            if let Some(n) = s.import_len {
                if len < n {
                    return Err(format!(
                        "{what}: imported session {} has {len} of its {n} events (half an import); recovery: {:?}",
                        s.id,
                        store.recovery_report()
                    ));
                }
                self.tally.atomic_whole += 1;
            }
            let verbatim = store.session_info(&s.id).map(|i| i.verbatim);
            if verbatim != Some(s.verbatim) {
                return Err(format!(
                    "{what}: session {} verbatim flag is {verbatim:?}, the model says {}",
                    s.id, s.verbatim
                ));
            }
            let header = store.header(&s.id);
            match (&s.header, &header, &s.fork) {
                (Some(want), Some(got), _) if want == got => {}
                // A fork whose call failed: the engine wrote its header.
                (None, Some(got), Some((parent, seed)))
                    if got.id == s.id
                        && got.parent_session.as_deref() == Some(parent.as_str())
                        && got.seed_length == Some(*seed) =>
                {
                    s.header = header.clone();
                }
                _ => {
                    return Err(format!(
                        "{what}: session {} header is {header:?}, the model says {:?} (fork of {:?})",
                        s.id, s.header, s.fork
                    ));
                }
            }
            let read = store
                .events(&s.id, 0..len as u64)
                .map_err(|e| format!("{what}: events({}): {e}", s.id))?;
            for (i, e) in read.enumerate() {
                let e = e.map_err(|e| format!("{what}: {} seq {i}: {e}", s.id))?;
                if !same_event(&s.events[i], &e) {
                    return Err(format!(
                        "{what}: {} seq {i} differs from what was appended (fork of {:?}): {e:?}, want {:?}",
                        s.id, s.fork, s.events[i]
                    ));
                }
                // A fork's end-seed marker is pinned once seen.
                s.events[i] = e;
            }
            // The surface (derived data kept in the index) matches the log folded by the
            // session rules (appends and compactions' replaces).
            let want = model_surface(&s.events[..len]).map_err(|e| format!("{what}: {e}"))?;
            let surface = store
                .surface(&s.id)
                .map_err(|e| format!("{what}: surface of {}: {e}", s.id))?;
            if surface != want {
                return Err(format!(
                    "{what}: surface of {} is {surface:?}, the log says {want:?}",
                    s.id
                ));
            }
            self.tally.lost_unacked += (s.events.len() - len) as u64;
            s.events.truncate(len);
            if self.volatile_reopen {
                // After a process restart the reopened store may show frames that are still
                // only in the page cache (recovery defers their sync to its first write), so
                // what it shows is not durable yet: a power loss may still take it, whole.
                s.atomic.retain(|&(a, _)| a < len);
                s.import_len = s.import_len.filter(|_| len > 0);
            } else {
                s.atomic.clear();
                s.import_len = None;
                if s.durable < len {
                    s.why = "survived a reopen";
                }
                s.durable = len;
                s.created_durable = true;
            }
            keep.push(s);
        }
        self.model.sessions = keep;
        let known: HashSet<&str> = self
            .model
            .sessions
            .iter()
            .filter(|s| s.deleted.is_none())
            .map(|s| s.id.as_str())
            .collect();
        for info in store.sessions() {
            if !known.contains(info.header.id.as_str()) {
                return Err(format!(
                    "{what}: session {} was never created or was deleted",
                    info.header.id
                ));
            }
        }
        let report = store
            .verify()
            .map_err(|e| format!("{what}: verify failed: {e}"))?;
        if !report.is_clean() {
            return Err(format!("{what}: verify is not clean: {report:?}"));
        }
        Ok(())
    }

    /// Runs random operations until `steps` are done or an operation fails. Returns the error
    /// of the failed operation, if any.
    fn workload(
        &mut self,
        store: &mut Option<Store>,
        steps: u64,
        fault_at: Option<u64>,
    ) -> Res<Option<AppendError>> {
        for step in 0..steps {
            if Some(step) == fault_at {
                self.inject_fault();
            }
            if trace() {
                eprintln!("step {step}: {:?}", self.sim.stats());
            }
            match self.step(store) {
                Ok(()) => {}
                Err(StepError::Append(e)) => return Ok(Some(e)),
                Err(StepError::Fatal(e)) => return Err(e),
            }
        }
        Ok(None)
    }

    fn inject_fault(&mut self) {
        if self.family.multiframe && self.rng.chance(1, 2) {
            // Faults that land inside multi-frame operations, and the persistent ones.
            let faults = match self.rng.below(6) {
                0 => SimFaults {
                    enospc_after_writes: Some(self.rng.below(24)),
                    ..SimFaults::default()
                },
                1 => SimFaults {
                    efbig_after_writes: Some(self.rng.below(24)),
                    ..SimFaults::default()
                },
                2 => SimFaults {
                    file_size_limit: Some(
                        self.rng
                            .range(SEGMENT_HEADER_LEN + 1, self.config.segment_bytes + 4096),
                    ),
                    ..SimFaults::default()
                },
                3 => SimFaults {
                    disk_free_bytes: Some(self.rng.below(128 << 10)),
                    ..SimFaults::default()
                },
                4 => SimFaults {
                    eio_after_syncs: Some(self.rng.below(4)),
                    ..SimFaults::default()
                },
                _ => SimFaults {
                    crash_after_ops: Some(self.rng.below(300)),
                    ..SimFaults::default()
                },
            };
            if trace() {
                eprintln!("faults: {faults:?}");
            }
            self.sim.set_faults(faults);
            return;
        }
        let n = self.rng.below(3);
        if trace() {
            eprintln!("inject fault");
        }
        let faults = match self.rng.below(4) {
            1 if self.family.faults => SimFaults {
                enospc_after_writes: Some(n),
                ..SimFaults::default()
            },
            2 if self.family.faults => SimFaults {
                eio_after_syncs: Some(n),
                ..SimFaults::default()
            },
            3 if self.family.dir_eio => SimFaults {
                eio_after_dir_syncs: Some(n),
                ..SimFaults::default()
            },
            _ => SimFaults {
                crash_after_ops: Some(self.rng.below(40)),
                ..SimFaults::default()
            },
        };
        if trace() {
            eprintln!("faults: {faults:?}");
        }
        self.sim.set_faults(faults);
    }

    /// Everything the store holds is acknowledged durable (after a successful `flush`,
    /// `checkpoint` or `close`).
    fn all_durable(&mut self, why: &'static str) {
        for s in &mut self.model.sessions {
            if s.durable < s.events.len() {
                s.why = why;
            }
            s.durable = s.events.len();
            if !s.created_durable && s.fork.is_some() {
                self.tally.forks_acked += 1;
            }
            s.created_durable = true;
            if s.deleted == Some(false) {
                self.tally.deletes_acked += 1;
                s.deleted = Some(true);
            }
        }
    }

    /// Marks session `i` durable up to its end (a durable receipt or `wait_durable`).
    fn durable_to_end(&mut self, i: usize, why: &'static str) {
        let s = &mut self.model.sessions[i];
        s.durable = s.events.len();
        s.why = why;
    }

    /// One random operation. Appended events enter the model before the call (they may be
    /// present after a crash even if the call fails); so do forks and deletes.
    fn step(&mut self, slot: &mut Option<Store>) -> Result<(), StepError> {
        let store = slot.as_ref().ok_or(StepError::Fatal("no store".into()))?;
        let sync = matches!(self.config.durability, Durability::Sync);
        if self.family.new_ops
            && self
                .rng
                .chance(1, if self.family.multiframe { 3 } else { 10 })
        {
            let live = self.model.live();
            return if live.is_empty() || self.rng.chance(1, 2) {
                self.import(store)
            } else {
                let i = live[self.rng.below(live.len() as u64) as usize];
                self.big_batch(store, i)
            };
        }
        let roll = self.rng.below(100);
        if trace() {
            eprintln!("op roll {roll}");
        }
        let live = self.model.live();
        if live.is_empty() || roll < 5 {
            let id = format!("s{}-{}", self.model.next_id, self.rng.below(1000));
            self.model.next_id += 1;
            let mut header = SessionHeader::new(id.clone(), self.rng.below(1 << 40));
            if self.rng.chance(1, 3) {
                header.cwd = Some("/work".into());
                header.extra = vec![("x-note".into(), r#"{"a":[1,2]}"#.into())];
            }
            self.model
                .sessions
                .push(ModelSession::new(id, Some(header.clone())));
            store.create_session(header)?;
            if sync {
                self.model.sessions.last_mut().unwrap().created_durable = true;
            }
            return Ok(());
        }
        let i = live[self.rng.below(live.len() as u64) as usize];
        match roll {
            5..=8 => return self.fork(store, i),
            9..=12 => return self.delete(store, i),
            // Compaction sends deliberately invalid replaces too, which a verbatim session
            // stores: only checked sessions are compacted.
            13..=20
                if !self.model.sessions[i].verbatim && !self.model_surface_of(i)?.is_empty() =>
            {
                return self.compact(store, i);
            }
            13..=62 => {
                let seq = self.model.sessions[i].events.len() as u64;
                let e = gen_event(&mut self.rng, seq, max_text(&self.config));
                self.model.sessions[i].events.push(e.clone());
                let id = self.model.sessions[i].id.clone();
                let receipt = match store.append(&id, e) {
                    Err(e) if refused(&e) => {
                        self.model.sessions[i].events.pop();
                        self.tally.refused += 1;
                        return Ok(());
                    }
                    r => r?,
                };
                self.tally.appends += 1;
                if !receipt.durable && self.rng.chance(1, 8) {
                    // Waiting for this receipt makes it, and everything before it, durable.
                    store.wait_durable(&receipt)?;
                    self.durable_to_end(i, "wait_durable");
                } else if receipt.durable {
                    self.durable_to_end(i, "durable receipt");
                }
            }
            63..=77 => {
                let n = self.rng.range(1, 8);
                let base = self.model.sessions[i].events.len() as u64;
                let batch: Vec<Event> = (0..n)
                    .map(|k| gen_event(&mut self.rng, base + k, max_text(&self.config)))
                    .collect();
                self.model.sessions[i].events.extend(batch.iter().cloned());
                self.model.sessions[i]
                    .atomic
                    .push((base as usize, (base + n) as usize));
                let id = self.model.sessions[i].id.clone();
                let receipt = match store.append_batch(&id, batch) {
                    Err(e) if refused(&e) => {
                        let s = &mut self.model.sessions[i];
                        s.events.truncate(base as usize);
                        self.tally.refused += 1;
                        return Ok(());
                    }
                    r => r?,
                };
                self.tally.appends += n;
                if receipt.durable {
                    self.durable_to_end(i, "durable receipt");
                }
            }
            78..=86 => {
                store.flush()?;
                self.all_durable("flush");
            }
            87..=92 => {
                store.checkpoint()?;
                self.all_durable("checkpoint");
            }
            93..=96 if self.rng.chance(1, 4) => return self.live_reader_check(),
            93..=96 => {
                // Read something back.
                let s = &self.model.sessions[i];
                if !s.events.is_empty() {
                    let seq = self.rng.below(s.events.len() as u64);
                    match store.get(&s.id, seq) {
                        Ok(Some(e)) if same_event(&s.events[seq as usize], &e) => {}
                        Ok(other) => {
                            return Err(StepError::Fatal(format!(
                                "{} seq {seq} read back as {other:?}",
                                s.id
                            )));
                        }
                        // Reads fail once the machine is down.
                        Err(e) if self.sim.is_down() => {
                            return Err(StepError::Append(AppendError::PreviousIo(
                                e.to_string().into(),
                            )));
                        }
                        Err(e) => return Err(StepError::Fatal(format!("read failed: {e}"))),
                    }
                }
            }
            _ => {
                // Clean close and reopen: nothing may be lost.
                if let Some(old) = slot.take() {
                    old.close()?;
                }
                if self.background_failure() {
                    return Err(StepError::Append(AppendError::PreviousIo(
                        "a background sync failed before close".to_owned().into(),
                    )));
                }
                self.all_durable("close");
                let before = self.counts();
                let faults_before = self.sim.stats().injected_errors;
                let store = match self.open() {
                    Ok(s) => s,
                    // A crash or a fault during recovery: handled like any failed operation.
                    Err(e)
                        if self.sim.is_down()
                            || self.sim.stats().injected_errors > faults_before =>
                    {
                        return Err(StepError::Append(AppendError::PreviousIo(
                            format!("open: {e}").into(),
                        )));
                    }
                    Err(e) => return Err(StepError::Fatal(format!("clean reopen failed: {e}"))),
                };
                self.check_against_model(&store, "clean reopen")
                    .map_err(StepError::Fatal)?;
                if before != self.counts() {
                    return Err(StepError::Fatal("a clean close lost events".into()));
                }
                *slot = Some(store);
            }
        }
        Ok(())
    }

    /// Imports a new session (`Store::import_session`, or every other time
    /// `Store::create_with_events`): up to 80 events in the multi-frame families (many frames),
    /// a few otherwise.
    fn import(&mut self, store: &Store) -> Result<(), StepError> {
        let id = format!("i{}-{}", self.model.next_id, self.rng.below(1000));
        self.model.next_id += 1;
        let header = SessionHeader::new(id.clone(), self.rng.below(1 << 40));
        let n = if self.family.multiframe {
            self.rng.range(0, 80)
        } else {
            self.rng.range(0, 12)
        };
        let max = max_text(&self.config);
        let events: Vec<Event> = (0..n)
            .map(|seq| gen_event(&mut self.rng, seq, max))
            .collect();
        if trace() {
            eprintln!(
                "import {id}: {n} events, {} bytes of data",
                events.iter().map(|e| e.data.len()).sum::<usize>()
            );
        }
        // Every third new session is verbatim (`Store::create_verbatim`), every other one of
        // the rest goes through `Store::create_with_events`, the others are imports.
        let verbatim = self.model.next_id.is_multiple_of(3);
        let mut m = ModelSession::new(id.clone(), Some(header.clone()));
        m.events = events.clone();
        m.import_len = Some(n as usize);
        m.verbatim = verbatim;
        self.model.sessions.push(m);
        self.in_flight = Some(InFlight::Import {
            header: header.clone(),
            events: events.clone(),
        });
        // Every other new session goes through `Store::create_with_events` (header and first
        // batch in one operation, under the append rules) instead of an import: the same
        // all-or-nothing promise, a different write path.
        let result = if verbatim {
            store
                .create_verbatim(header, events)
                .map(|(_, receipt)| receipt)
                .map_err(ImportError::Append)
        } else if self.model.next_id.is_multiple_of(2) {
            store
                .create_with_events(header, events)
                .map(|(_, receipt)| receipt)
                .map_err(ImportError::Append)
        } else {
            store.import_session(header, events, None)
        };
        match result {
            Ok(receipt) => {
                self.in_flight = None;
                self.tally.imports += 1;
                self.tally.import_events += n;
                if receipt.durable {
                    self.tally.imports_acked += 1;
                    let m = self.model.sessions.last_mut().unwrap();
                    m.created_durable = true;
                    m.durable = m.events.len();
                    m.why = "import (durable receipt)";
                }
                Ok(())
            }
            Err(ImportError::Append(e)) if !refused(&e) => Err(StepError::Append(e)),
            Err(e) => Err(StepError::Fatal(format!(
                "import of {id} ({n} events) refused: {e}"
            ))),
        }
    }

    /// A large `append_batch` (2-40 events in the multi-frame families): all or nothing.
    fn big_batch(&mut self, store: &Store, i: usize) -> Result<(), StepError> {
        let n = self
            .rng
            .range(2, if self.family.multiframe { 40 } else { 12 });
        let base = self.model.sessions[i].events.len();
        let max = max_text(&self.config);
        let batch: Vec<Event> = (0..n)
            .map(|k| gen_event(&mut self.rng, base as u64 + k, max))
            .collect();
        let id = self.model.sessions[i].id.clone();
        if trace() {
            eprintln!(
                "big batch on {id} at {base}: {n} events, {} bytes of data",
                batch.iter().map(|e| e.data.len()).sum::<usize>()
            );
        }
        let s = &mut self.model.sessions[i];
        s.events.extend(batch.iter().cloned());
        s.atomic.push((base, base + n as usize));
        self.in_flight = Some(InFlight::Batch {
            id: id.clone(),
            base,
            events: batch.clone(),
        });
        match store.append_batch(&id, batch) {
            Err(e) if refused(&e) => {
                self.in_flight = None;
                let s = &mut self.model.sessions[i];
                s.events.truncate(base);
                s.atomic.pop();
                self.tally.refused += 1;
                Ok(())
            }
            Err(e) => Err(e.into()),
            Ok(receipt) => {
                self.in_flight = None;
                self.tally.big_batches += 1;
                self.tally.big_batch_events += n;
                self.tally.appends += n;
                if receipt.durable {
                    self.durable_to_end(i, "durable receipt");
                }
                Ok(())
            }
        }
    }

    /// After a fault and a reopen (the fault gone): the multi-frame operation that failed is
    /// whole or absent (checked by `check_against_model`); when absent, retrying it succeeds.
    fn retry_in_flight(&mut self, store: &Store, what: &str) -> Res {
        let Some(op) = self.in_flight.take() else {
            return Ok(());
        };
        match op {
            InFlight::Import { header, events } => {
                let id = header.id.clone();
                if store.len(&id).is_some() {
                    self.tally.retries_not_needed += 1;
                    return Ok(());
                }
                let mut m = ModelSession::new(id.clone(), Some(header.clone()));
                m.events = events.clone();
                m.import_len = Some(events.len());
                self.model.sessions.push(m);
                let receipt = store.import_session(header, events, None).map_err(|e| {
                    format!("{what}: retrying the import of {id} after the fault failed: {e}")
                })?;
                self.tally.retries += 1;
                if receipt.durable {
                    let m = self.model.sessions.last_mut().unwrap();
                    m.created_durable = true;
                    m.durable = m.events.len();
                    m.why = "import retried (durable receipt)";
                }
            }
            InFlight::Batch { id, base, events } => {
                let Some(i) = self
                    .model
                    .sessions
                    .iter()
                    .position(|s| s.id == id && s.deleted.is_none())
                else {
                    self.tally.retries_skipped += 1;
                    return Ok(());
                };
                let len = store.len(&id).map(|l| l as usize);
                if len == Some(base + events.len()) {
                    self.tally.retries_not_needed += 1;
                } else if len == Some(base) {
                    let n = events.len();
                    let s = &mut self.model.sessions[i];
                    s.events.extend(events.iter().cloned());
                    s.atomic.push((base, base + n));
                    let receipt = store.append_batch(&id, events).map_err(|e| {
                        format!(
                            "{what}: retrying the batch of {n} events on {id} after the fault failed: {e}"
                        )
                    })?;
                    self.tally.retries += 1;
                    if receipt.durable {
                        self.durable_to_end(i, "batch retried (durable receipt)");
                    }
                } else {
                    // Unacknowledged events before the batch were lost with the fault: its
                    // seqs no longer fit.
                    self.tally.retries_skipped += 1;
                }
            }
        }
        Ok(())
    }

    /// Damages `index.redb` (the store is closed): bytes xored (preferring bytes in use),
    /// truncated, a 4 KiB page overwritten with noise, the magic broken, a bit flipped in the
    /// first page, or the file deleted. Returns what was done.
    fn damage_index(&mut self) -> String {
        let path = self.index_path();
        let Ok(mut bytes) = std::fs::read(&path) else {
            return "no index".into();
        };
        if bytes.is_empty() {
            return "empty index".into();
        }
        let len = bytes.len() as u64;
        // Diagnostic: `SESSIONLOG_SIM_INDEX_DAMAGE=delete` only deletes the index (which the
        // engine rebuilt before the integrity work), to check the harness itself.
        let variant = if std::env::var("SESSIONLOG_SIM_INDEX_DAMAGE").as_deref() == Ok("delete") {
            6
        } else {
            self.rng.below(7)
        };
        let kind = match variant {
            6 => {
                std::fs::remove_file(&path).unwrap();
                return "deleted".into();
            }
            0 | 1 => {
                let n = self.rng.range(1, 8);
                for _ in 0..n {
                    let mut at = self.rng.below(len) as usize;
                    for _ in 0..64 {
                        if bytes[at] != 0 {
                            break;
                        }
                        at = self.rng.below(len) as usize;
                    }
                    bytes[at] ^= self.rng.range(1, 255) as u8;
                }
                format!("{n} bytes xored")
            }
            2 => {
                let to = self.rng.below(len);
                bytes.truncate(to as usize);
                format!("truncated to {to} of {len} bytes")
            }
            3 => {
                let page = self.rng.below(len.div_ceil(4096)) * 4096;
                let end = (page + 4096).min(len);
                for b in &mut bytes[page as usize..end as usize] {
                    *b = self.rng.below(256) as u8;
                }
                format!("page at {page} overwritten")
            }
            4 => {
                let at = self.rng.below(len.min(16)) as usize;
                bytes[at] ^= 0xff;
                format!("magic broken at {at}")
            }
            _ => {
                let at = self.rng.below(len.min(4096)) as usize;
                let bit = self.rng.below(8);
                bytes[at] ^= 1 << bit;
                format!("bit {bit} flipped at {at}")
            }
        };
        if trace() {
            eprintln!("index damage: {kind}");
        }
        std::fs::write(&path, &bytes).unwrap();
        kind
    }

    /// Opens the store read-only (what `list`, `show`, `export` and `verify` do) and reads
    /// every session. `exact`: the model is exact (everything was closed cleanly) and
    /// `reference` is the undamaged store's `list()`; otherwise any state the model allows
    /// after a crash. Every answer must be right, or a typed error where the API has one.
    /// Returns (answers right, typed errors), or `None` when the open refused (typed).
    fn read_only_check(
        &self,
        exact: bool,
        reference: Option<&[Listed]>,
    ) -> Res<Option<(u64, u64)>> {
        let config = self.config.clone().read_only(true);
        let store = match Store::open(self.dir.path(), config) {
            Ok(s) => s,
            Err(e) => {
                if trace() {
                    eprintln!("read-only open refused: {e}");
                }
                return Ok(None);
            }
        };
        let (mut right, mut errors) = (0u64, 0u64);
        let listable: HashSet<&str> = self
            .model
            .sessions
            .iter()
            .filter(|s| match s.deleted {
                None => true,
                Some(unacked) => !exact && !unacked,
            })
            .map(|s| s.id.as_str())
            .collect();
        for info in store.sessions() {
            if !listable.contains(info.header.id.as_str()) {
                return Err(format!(
                    "read-only open lists session {:?}, which the model does not hold",
                    info.header.id
                ));
            }
        }
        for s in self.model.sessions.iter().filter(|s| s.deleted.is_none()) {
            let len = match store.len(&s.id) {
                None if exact || s.created_durable => {
                    return Err(format!("read-only open: session {} is missing", s.id));
                }
                None => continue,
                Some(l) => l as usize,
            };
            if (exact && len != s.events.len()) || len < s.durable || len > s.events.len() {
                return Err(format!(
                    "read-only open: session {} has {len} events; the model has {} ({} durable)",
                    s.id,
                    s.events.len(),
                    s.durable
                ));
            }
            if s.atomic.iter().any(|&(a, b)| a < len && len < b)
                || s.import_len.is_some_and(|n| len < n)
            {
                return Err(format!(
                    "read-only open: session {} has {len} events, half of an all-or-nothing operation ({:?}, import {:?})",
                    s.id, s.atomic, s.import_len
                ));
            }
            if let Some(want) = &s.header {
                let got = store.header(&s.id);
                if got.as_ref() != Some(want) {
                    return Err(format!(
                        "read-only open: header of {} is {got:?}, want {want:?}",
                        s.id
                    ));
                }
            }
            match store.events(&s.id, 0..len as u64) {
                Err(_) => errors += 1,
                Ok(it) => {
                    for (k, e) in it.enumerate() {
                        match e {
                            Ok(e) if same_event(&s.events[k], &e) => right += 1,
                            Ok(e) => {
                                return Err(format!(
                                    "read-only open: {} seq {k} reads wrong data: {e:?}",
                                    s.id
                                ));
                            }
                            Err(_) => {
                                errors += 1;
                                break;
                            }
                        }
                    }
                }
            }
            match store.surface(&s.id) {
                Ok(got) => {
                    let want = model_surface(&s.events[..len])?;
                    if got != want {
                        return Err(format!(
                            "read-only open: surface of {} is {got:?}, want {want:?}",
                            s.id
                        ));
                    }
                    right += 1;
                }
                Err(_) => errors += 1,
            }
        }
        if let Some(reference) = reference {
            match store.list() {
                Ok(mut got) => {
                    got.sort_by(|a, b| a.info.header.id.cmp(&b.info.header.id));
                    if got != reference {
                        return Err(format!(
                            "read-only open: list() is {got:?}, the undamaged store said {reference:?}"
                        ));
                    }
                    right += 1;
                }
                Err(_) => errors += 1,
            }
        }
        if let Ok(report) = store.verify()
            && report.is_clean()
            && errors > 0
            && exact
        {
            return Err(format!(
                "read-only open: verify says clean, but {errors} reads failed"
            ));
        }
        Ok(Some((right, errors)))
    }

    /// Between rounds: close cleanly, damage `index.redb`, then (1) a read-only open answers
    /// right or with typed errors, never a panic; (2) a writable open (`sessionlog recover`)
    /// rebuilds: the exact model, `verify` clean, `list()` as before the damage.
    fn index_damage_round(&mut self, slot: &mut Option<Store>, what: &str) -> Res {
        let Some(store) = slot.take() else {
            return Ok(());
        };
        let mut reference = store
            .list()
            .map_err(|e| format!("{what}: list before the index damage: {e}"))?;
        reference.sort_by(|a, b| a.info.header.id.cmp(&b.info.header.id));
        store
            .close()
            .map_err(|e| format!("{what}: close before the index damage: {e}"))?;
        self.all_durable("close");
        let kind = self.damage_index();
        self.tally.index_damages += 1;
        let what = format!("{what}, index.redb damaged ({kind})");
        let ro = std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.read_only_check(true, Some(&reference))
        }));
        match ro {
            Err(p) => {
                return Err(format!(
                    "{what}: a read-only open or read panicked: {}",
                    panic_message(&*p)
                ));
            }
            Ok(Err(e)) => return Err(format!("{what}: {e}")),
            Ok(Ok(None)) => self.tally.index_damage_open_errors += 1,
            Ok(Ok(Some((right, errors)))) => {
                self.tally.index_damage_reads_right += right;
                self.tally.index_damage_read_errors += errors;
            }
        }
        // `sessionlog recover` opens with `check_index` (redb's integrity check and every
        // entry's CRC), which rebuilds a damaged index whatever the damage.
        self.config.check_index = true;
        let opened = std::panic::catch_unwind(AssertUnwindSafe(|| self.open()));
        self.config.check_index = false;
        let store = match opened {
            Err(p) => {
                return Err(format!(
                    "{what}: the writable open (`sessionlog recover`) panicked: {}",
                    panic_message(&*p)
                ));
            }
            Ok(Err(e)) => {
                return Err(format!(
                    "{what}: the writable open (`sessionlog recover`) failed: {e}"
                ));
            }
            Ok(Ok(s)) => s,
        };
        if store.recovery_report().index_rebuilt {
            self.tally.index_damage_rebuilt += 1;
        }
        let before = self.counts();
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.check_against_model(&store, &what)))
        {
            Err(p) => {
                return Err(format!(
                    "{what}: reads after the rebuild panicked: {}",
                    panic_message(&*p)
                ));
            }
            Ok(r) => r?,
        }
        if before != self.counts() {
            return Err(format!(
                "{what}: the rebuilt store lost events: {before:?} -> {:?}",
                self.counts()
            ));
        }
        let mut got = store
            .list()
            .map_err(|e| format!("{what}: list after the rebuild: {e}"))?;
        got.sort_by(|a, b| a.info.header.id.cmp(&b.info.header.id));
        if got != reference {
            return Err(format!(
                "{what}: list() after the rebuild is {got:?}, before the damage {reference:?}"
            ));
        }
        *slot = Some(store);
        Ok(())
    }

    /// Opens a reader beside the live writer (what `list`/`show`/`show --follow` in another
    /// process do) and checks every session it shows: a prefix of what was appended, holding
    /// everything acknowledged durable, never half of an all-or-nothing operation, each event
    /// as appended.
    fn live_reader_check(&mut self) -> Result<(), StepError> {
        let config = self.config.clone().read_only(true);
        let reader = match Store::open(self.dir.path(), config) {
            Ok(r) => r,
            Err(e) if self.sim.is_down() => {
                return Err(StepError::Append(AppendError::PreviousIo(
                    format!("reader open: {e}").into(),
                )));
            }
            Err(e) => {
                return Err(StepError::Fatal(format!(
                    "a reader beside the live writer was refused: {e}"
                )));
            }
        };
        for s in self.model.sessions.iter().filter(|s| s.deleted.is_none()) {
            let len = match reader.len(&s.id) {
                None if s.created_durable => {
                    return Err(StepError::Fatal(format!(
                        "a reader beside the writer misses acknowledged session {}",
                        s.id
                    )));
                }
                None => continue,
                Some(l) => l as usize,
            };
            if len < s.durable || len > s.events.len() {
                return Err(StepError::Fatal(format!(
                    "a reader beside the writer shows {len} events of {}: {} acknowledged durable, {} appended",
                    s.id,
                    s.durable,
                    s.events.len()
                )));
            }
            if s.atomic.iter().any(|&(a, b)| a < len && len < b) {
                return Err(StepError::Fatal(format!(
                    "a reader beside the writer shows {len} events of {}: half of an all-or-nothing batch {:?}",
                    s.id, s.atomic
                )));
            }
            let read = match reader.events(&s.id, 0..len as u64) {
                Ok(r) => r,
                Err(e) if self.sim.is_down() => {
                    return Err(StepError::Append(AppendError::PreviousIo(
                        format!("reader read: {e}").into(),
                    )));
                }
                Err(e) => return Err(StepError::Fatal(format!("reader events({}): {e}", s.id))),
            };
            for (k, e) in read.enumerate() {
                match e {
                    Ok(e) if same_event(&s.events[k], &e) => {}
                    Ok(e) => {
                        return Err(StepError::Fatal(format!(
                            "a reader beside the writer reads {} seq {k} as {e:?}, appended {:?}",
                            s.id, s.events[k]
                        )));
                    }
                    Err(e) if self.sim.is_down() => {
                        return Err(StepError::Append(AppendError::PreviousIo(
                            format!("reader read: {e}").into(),
                        )));
                    }
                    Err(e) => {
                        return Err(StepError::Fatal(format!("reader {} seq {k}: {e}", s.id)));
                    }
                }
            }
        }
        self.tally.live_reader_checks += 1;
        Ok(())
    }

    fn model_surface_of(&self, i: usize) -> Result<Vec<u64>, StepError> {
        model_surface(&self.model.sessions[i].events).map_err(StepError::Fatal)
    }

    /// Forks session `i` at a random boundary (or its tail), into a named or a minted id.
    fn fork(&mut self, store: &Store, i: usize) -> Result<(), StepError> {
        let parent = self.model.sessions[i].clone();
        let len = parent.events.len();
        let boundary = (len > 0 && self.rng.chance(2, 3)).then(|| self.rng.below(len as u64));
        let seed = boundary.map_or(len, |b| b as usize + 1);
        // dsh mints `session-<n>`, the first n not taken by a live session.
        let minted = (1u64..)
            .map(|n| format!("session-{n}"))
            .find(|id| {
                !self
                    .model
                    .sessions
                    .iter()
                    .any(|s| s.id == *id && s.deleted.is_none())
            })
            .unwrap_or_default();
        // The model keys sessions by id and keeps deleted ones as tombstones, so a minted id is
        // never reused here; reusing a deleted session's id is covered by the deterministic
        // `reusing_a_pinned_deleted_id_keeps_the_forks_prefix`.
        let mint = self.rng.chance(1, 4) && !self.model.minted.contains(&minted);
        let child = if mint {
            minted
        } else {
            self.model.next_id += 1;
            format!("f{}-{}", self.model.next_id, self.rng.below(1000))
        };
        // A verbatim session forks at any boundary, without an end-seed marker.
        let open_turn = !parent.verbatim && seed > 0 && open_turn_at(&parent.events, seed - 1);
        let mut model = ModelSession::new(child.clone(), None);
        model.events = parent.events[..seed].to_vec();
        model.verbatim = parent.verbatim;
        if !parent.verbatim && (seed == 0 || parent.events[seed - 1].kind != "session/end-seed") {
            model.events.push(Event::new(
                "session/end-seed",
                seed as u64,
                END_SEED_TIME_UNKNOWN,
                "{}",
            ));
        }
        model.fork = Some((parent.id.clone(), seed as u64));
        model.lineage = std::iter::once((parent.id.clone(), seed as u64))
            .chain(parent.lineage.iter().cloned())
            .collect();
        if trace() {
            eprintln!(
                "fork {} at {boundary:?} (seed {seed}, open turn {open_turn}) into {child}",
                parent.id
            );
        }
        if !open_turn {
            self.model.sessions.push(model);
        }
        if mint {
            self.model.minted.insert(child.clone());
        }
        let child_arg = if mint { None } else { Some(child.as_str()) };
        match store.fork(&parent.id, boundary, child_arg) {
            Ok(session) => {
                if open_turn {
                    return Err(StepError::Fatal(format!(
                        "fork of {} at {boundary:?} inside an open turn was accepted",
                        parent.id
                    )));
                }
                if session.id() != child {
                    return Err(StepError::Fatal(format!(
                        "fork minted {}, expected {child}",
                        session.id()
                    )));
                }
                let header = store.header(&child);
                let m = self.model.sessions.last_mut().unwrap();
                let ok = header.as_ref().is_some_and(|h| {
                    h.parent_session.as_deref() == Some(parent.id.as_str())
                        && h.seed_length == Some(seed as u64)
                        && h.cwd == parent.header.as_ref().and_then(|p| p.cwd.clone())
                });
                if !ok || store.len(&child) != Some(m.events.len() as u64) {
                    return Err(StepError::Fatal(format!(
                        "fork {child} of {} seed {seed}: header {header:?}, {:?} events (model {})",
                        parent.id,
                        store.len(&child),
                        m.events.len()
                    )));
                }
                m.header = header;
                self.tally.forks += 1;
                if matches!(self.config.durability, Durability::Sync) {
                    m.created_durable = true;
                    m.durable = m.events.len();
                    m.why = "fork (Sync)";
                    self.tally.forks_acked += 1;
                }
                let child = self.model.sessions.len() - 1;
                self.check_live_surface(store, child)
            }
            Err(ForkFailure::Rule(e)) if open_turn && e.code == ForkErrorCode::OpenTurn => {
                self.tally.forks_open_turn += 1;
                Ok(())
            }
            Err(ForkFailure::Rule(e)) => Err(StepError::Fatal(format!(
                "fork of {} at {boundary:?} into {child} refused: {e} (model: open turn {open_turn})",
                parent.id
            ))),
            // A read that failed because the machine went down is reported as a replay
            // failure.
            Err(ForkFailure::Append(e)) if refused(&e) && self.sim.is_down() => Err(
                StepError::Append(AppendError::PreviousIo(format!("fork: {e}").into())),
            ),
            Err(ForkFailure::Append(e)) if refused(&e) => Err(StepError::Fatal(format!(
                "fork of {} at {boundary:?} into {child} refused: {e}",
                parent.id
            ))),
            Err(ForkFailure::Append(e)) => Err(StepError::Append(e)),
        }
    }

    /// Deletes session `i`.
    fn delete(&mut self, store: &Store, i: usize) -> Result<(), StepError> {
        let id = self.model.sessions[i].id.clone();
        if trace() {
            eprintln!("delete {id}");
        }
        self.model.sessions[i].deleted = Some(false);
        let receipt = match store.delete_session(&id) {
            Err(e) if refused(&e) || matches!(e, AppendError::NoSuchSession(_)) => {
                return Err(StepError::Fatal(format!("delete {id} refused: {e}")));
            }
            r => r?,
        };
        self.tally.deletes += 1;
        if store.len(&id).is_some() || store.header(&id).is_some() {
            return Err(StepError::Fatal(format!(
                "{id} still answers after its delete"
            )));
        }
        // Its forks still read what they inherited.
        let fork = self.model.sessions.iter().position(|s| {
            s.deleted.is_none() && s.fork.as_ref().is_some_and(|f| f.0 == id && f.1 > 0)
        });
        if let Some(f) = fork {
            let seed = self.model.sessions[f].fork.as_ref().map_or(1, |f| f.1);
            let seq = self.rng.below(seed);
            let f = &self.model.sessions[f];
            match store.get(&f.id, seq) {
                Ok(Some(e)) if same_event(&f.events[seq as usize], &e) => {}
                Err(e) if self.sim.is_down() => {
                    return Err(StepError::Append(AppendError::PreviousIo(
                        e.to_string().into(),
                    )));
                }
                other => {
                    return Err(StepError::Fatal(format!(
                        "fork {} of deleted {id} reads seq {seq} as {other:?}",
                        f.id
                    )));
                }
            }
        }
        let durable = receipt.durable || {
            let wait = self.rng.chance(1, 4);
            if wait {
                store.wait_durable(&receipt)?;
            }
            wait
        };
        if durable {
            self.model.sessions[i].deleted = Some(true);
            self.tally.deletes_acked += 1;
        }
        Ok(())
    }

    /// A compaction of session `i` (whose surface is not empty): `compaction/start`,
    /// `compaction/summary`, a `user/message` replacing a random run of surface nodes and
    /// citing them, `compaction/end`; as one batch or as four appends. One in eight is an
    /// invalid replace, which must be refused with nothing written.
    fn compact(&mut self, store: &Store, i: usize) -> Result<(), StepError> {
        let nodes = self.model_surface_of(i)?;
        let id = self.model.sessions[i].id.clone();
        let base = self.model.sessions[i].events.len() as u64;
        let a = self.rng.below(nodes.len() as u64) as usize;
        let b = self.rng.range(a as u64, nodes.len() as u64 - 1) as usize;
        let (start, end) = (nodes[a], nodes[b]);
        let shadowed = &nodes[a..=b];
        let time = self.rng.range(0, 1 << 40) as i64;
        let k = base;
        let seqs = shadowed
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let len = (match self.rng.below(4) {
            0 => self.rng.range(1000, 6000),
            _ => self.rng.range(10, 400),
        } as usize)
            .min(max_text(&self.config));
        let summary = filler(&mut self.rng, len);
        let invalid = self.rng.chance(1, 8);
        let events = if invalid {
            // Alone; one of: a shadowed node not cited, start and end in the wrong order,
            // a start that is not a node.
            let seq = base;
            let mut sources: Vec<u64> = shadowed.to_vec();
            let op = match self.rng.below(3) {
                0 => {
                    sources.remove(self.rng.below(sources.len() as u64) as usize);
                    SurfaceOp::Replace { start, end }
                }
                1 if a < b => SurfaceOp::Replace {
                    start: end,
                    end: start,
                },
                _ => {
                    let log_only = (0..seq).find(|s| !nodes.contains(s)).unwrap_or(seq + 5);
                    SurfaceOp::Replace {
                        start: log_only,
                        end,
                    }
                }
            };
            let mut e = Event::new(
                "user/message",
                seq,
                time,
                format!(
                    r#"{{"id":"m-k{k}","role":"user","content":[{{"type":"text","text":"{summary}"}}],"source":{{"kind":"user"}}}}"#
                ),
            )
            .with_surface_op(op);
            if !sources.is_empty() {
                e = e.with_sources(sources);
            }
            if trace() {
                eprintln!(
                    "invalid replace on {id}: {:?} {:?}",
                    e.surface_op, e.source_event_seqs
                );
            }
            match store.append(&id, e) {
                Err(e) if refused(&e) => {}
                Err(e) => return Err(e.into()),
                Ok(r) => {
                    return Err(StepError::Fatal(format!(
                        "{id}: an invalid replace was accepted: {r:?}"
                    )));
                }
            }
            if store.len(&id) != Some(base) {
                return Err(StepError::Fatal(format!(
                    "{id}: a refused replace changed the length to {:?}",
                    store.len(&id)
                )));
            }
            self.tally.replaces_refused += 1;
            return Ok(());
        } else {
            let mut sources = vec![base, base + 1];
            sources.extend_from_slice(shadowed);
            vec![
                Event::new(
                    "compaction/start",
                    base,
                    time,
                    format!(r#"{{"compactionId":"k{k}","turn":null}}"#),
                ),
                Event::new(
                    "compaction/summary",
                    base + 1,
                    time,
                    format!(
                        r#"{{"compactionId":"k{k}","summary":[{{"type":"text","text":"{summary}"}}],"shadowedRange":{{"start":{start},"end":{end}}},"shadowedSeqs":[{seqs}],"shadowedTokenCount":{len},"provider":"deepseek","model":"deepseek-chat"}}"#
                    ),
                ),
                Event::new(
                    "user/message",
                    base + 2,
                    time,
                    format!(
                        r#"{{"id":"m-k{k}","role":"user","content":[{{"type":"text","text":"{summary}"}}],"source":{{"kind":"plugin","plugin":"compaction","form":"notice","summary":"conversation compacted"}}}}"#
                    ),
                )
                .with_surface_op(SurfaceOp::Replace { start, end })
                .with_sources(sources),
                Event::new(
                    "compaction/end",
                    base + 3,
                    time,
                    format!(r#"{{"compactionId":"k{k}","turn":null}}"#),
                ),
            ]
        };
        if events
            .iter()
            .any(|e| e.data.len() as u64 > self.config.max_event_bytes)
        {
            // A long shadowed list under a small event limit (multi-frame families).
            return Ok(());
        }
        if trace() {
            eprintln!(
                "compaction of {id}: replace {start}..{end} (positions {a}..={b}) at {}",
                base + 2
            );
        }
        self.model.sessions[i].events.extend(events.iter().cloned());
        let sim = self.sim.clone();
        let refusal = |e: &AppendError| {
            if sim.is_down() {
                StepError::Append(AppendError::PreviousIo(format!("compaction: {e}").into()))
            } else {
                StepError::Fatal(format!("{id}: a valid compaction was refused: {e}"))
            }
        };
        if self.rng.chance(1, 2) {
            self.model.sessions[i]
                .atomic
                .push((base as usize, base as usize + 4));
            let receipt = match store.append_batch(&id, events) {
                Err(e) if refused(&e) => return Err(refusal(&e)),
                r => r?,
            };
            if receipt.durable {
                self.durable_to_end(i, "durable receipt");
            }
        } else {
            // The model holds all four; only those appended so far may be acknowledged.
            let mut last = None;
            for (k, e) in events.into_iter().enumerate() {
                let receipt = match store.append(&id, e) {
                    Err(e) if refused(&e) => return Err(refusal(&e)),
                    r => r?,
                };
                if receipt.durable {
                    let s = &mut self.model.sessions[i];
                    s.durable = base as usize + k + 1;
                    s.why = "durable receipt";
                }
                last = Some(receipt);
            }
            if let Some(receipt) = last
                && !receipt.durable
                && self.rng.chance(1, 4)
            {
                store.wait_durable(&receipt)?;
                self.durable_to_end(i, "wait_durable");
            }
        }
        self.tally.compactions += 1;
        if self.model.sessions[i].durable as u64 > base + 2 {
            self.tally.compactions_acked += 1;
        }
        self.check_live_surface(store, i)
    }

    /// The open store's surface of session `i` is the model's.
    fn check_live_surface(&self, store: &Store, i: usize) -> Result<(), StepError> {
        let s = &self.model.sessions[i];
        let want = model_surface(&s.events).map_err(StepError::Fatal)?;
        match store.surface(&s.id) {
            Ok(got) if got == want => Ok(()),
            Ok(got) => Err(StepError::Fatal(format!(
                "live surface of {} is {got:?}, the model says {want:?}",
                s.id
            ))),
            Err(e) if self.sim.is_down() => Err(StepError::Append(AppendError::PreviousIo(
                e.to_string().into(),
            ))),
            Err(e) => Err(StepError::Fatal(format!("surface of {}: {e}", s.id))),
        }
    }

    fn counts(&self) -> BTreeMap<String, usize> {
        self.model
            .sessions
            .iter()
            .filter(|s| s.deleted.is_none())
            .map(|s| (s.id.clone(), s.events.len()))
            .collect()
    }

    /// Applies the chosen index variant after a crash.
    fn mangle_index(&mut self) {
        let variant = self.rng.below(4);
        if trace() {
            eprintln!("index variant {variant}");
        }
        match variant {
            0 => {
                let _ = std::fs::remove_file(self.index_path());
                self.tally.index_deleted += 1;
            }
            1 => {
                if let Some(old) = &self.older_index {
                    std::fs::write(self.index_path(), old).unwrap();
                    self.tally.index_older += 1;
                }
            }
            _ => {}
        }
        if self.family.index_damage && self.rng.chance(1, 3) {
            self.damage_index();
            self.tally.index_damages += 1;
            self.index_damaged = true;
        }
    }

    fn run(mut self) -> Res<Tally> {
        if trace() {
            eprintln!(
                "config: {:?}, segment_bytes {}, batch_bytes {}, compress_threshold {}, checkpoint_bytes {}",
                self.config.durability,
                self.config.segment_bytes,
                self.config.batch_bytes,
                self.config.compress_threshold,
                self.config.checkpoint_bytes
            );
        }
        let mut slot = Some(self.open().map_err(|e| format!("first open: {e}"))?);
        let rounds = self.rng.range(1, 4);
        for round in 0..rounds {
            if self.family.index_damage && round > 0 {
                self.index_damage_round(&mut slot, &format!("before round {round}"))?;
            }
            let steps = self.rng.range(3, 60);
            let fault_at = self.rng.chance(2, 3).then(|| self.rng.below(steps));
            let failed = self
                .workload(&mut slot, steps, fault_at)
                .map_err(|e| format!("round {round}: {e}"))?;
            let what = format!("round {round}");
            // `None` when a clean close is what failed (the store is gone already).
            let store = slot.take();
            match failed {
                Some(e) if !self.sim.is_down() => {
                    // ENOSPC or EIO: the store must refuse every later write.
                    if !matches!(e, AppendError::PreviousIo(_)) {
                        return Err(format!(
                            "{what}: injected fault gave {e:?}, expected PreviousIo"
                        ));
                    }
                    self.tally.faults += 1;
                    if let Some(store) = &store
                        && let Some(s) = self
                            .model
                            .sessions
                            .iter()
                            .find(|s| s.deleted.is_none() && store.len(&s.id).is_some())
                    {
                        // A valid event at the store's next seq (a compaction's appends may
                        // have stopped half-way).
                        let seq = store.len(&s.id).unwrap_or(0);
                        let r = store
                            .append(&s.id, Event::new("assistant/chunk", seq, 1, r#"{"n":1}"#));
                        if !matches!(r, Err(AppendError::PreviousIo(_))) {
                            return Err(format!("{what}: append after a failed write gave {r:?}"));
                        }
                    }
                    if let Some(store) = &store {
                        if !matches!(store.flush(), Err(AppendError::PreviousIo(_))) {
                            return Err(format!(
                                "{what}: flush after a failed write was not refused"
                            ));
                        }
                        if !matches!(
                            store.create_session(SessionHeader::new("late", 1)),
                            Err(AppendError::PreviousIo(_))
                        ) {
                            return Err(format!(
                                "{what}: create after a failed write was not refused"
                            ));
                        }
                    }
                    // Reopen without a crash: nothing acknowledged may be lost.
                    self.sim.set_faults(SimFaults::default());
                    drop(store);
                    let store = self
                        .open()
                        .map_err(|e| format!("{what}: reopen after fault: {e}"))?;
                    self.check_against_model(&store, &format!("{what} after fault"))?;
                    self.retry_in_flight(&store, &format!("{what} after fault"))?;
                    slot = Some(store);
                    if self.family.continue_after_fault {
                        continue;
                    }
                    break;
                }
                Some(_) => self.tally.mid_op_crashes += 1,
                None => {}
            }
            // A crash: the operation in flight is whole or absent after the reopen.
            self.in_flight = None;
            if self.family.restarts && self.rng.chance(1, 2) {
                // The process dies, the machine stays up: the page cache survives.
                self.sim.restart_process();
                self.tally.restarts += 1;
                drop(store);
                let store = self
                    .open()
                    .map_err(|e| format!("{what}: open after a process crash: {e}"))?;
                self.volatile_reopen = true;
                let checked =
                    self.check_against_model(&store, &format!("{what} after a process crash"));
                self.volatile_reopen = false;
                checked?;
                slot = Some(store);
                continue;
            }
            // Power loss (handles opened before it fail from now on), then drop the dead store.
            if trace() {
                eprintln!(
                    "before crash: {:?}",
                    sessionlog::fs::FileSystem::list(&*self.sim, &self.seg_dir())
                );
            }
            let crash = self.sim.crash();
            if trace() {
                eprintln!("crash: {crash:?}");
            }
            self.tally.crashes += 1;
            drop(store);
            self.mangle_index();
            if self.family.flips && self.rng.chance(1, 6) {
                // Flip a bit of a segment header or of a whole frame (not of a torn tail:
                // that was never acknowledged).
                let (frames, numbers) = catalog(&self.sim, &self.seg_dir());
                if let Some(&n) = self.rng.pick(&numbers) {
                    let end = frames
                        .iter()
                        .filter(|f| f.segment == n)
                        .map(|f| f.offset + f.len)
                        .max()
                        .unwrap_or(SEGMENT_HEADER_LEN);
                    let len = self
                        .sim
                        .read_file(&segment::path(&self.seg_dir(), n))
                        .map_or(0, |b| b.len() as u64);
                    let offset = self.rng.below(end.min(len));
                    let flip = BitFlip {
                        path: segment::path(&self.seg_dir(), n),
                        offset,
                        bit: self.rng.below(8) as u8,
                    };
                    if self.sim.flip_bit(&flip.path, flip.offset, flip.bit).is_ok() {
                        self.tally.flips += 1;
                        return self.check_flip(&flip, &frames).map(|()| self.tally);
                    }
                }
            }
            if self.family.index_damage {
                // Readers right after a crash, before any writable open: right answers (a
                // state the model allows) or typed errors.
                match std::panic::catch_unwind(AssertUnwindSafe(|| {
                    self.read_only_check(false, None)
                })) {
                    Err(p) => {
                        return Err(format!(
                            "{what}: a read-only open after the crash panicked: {}",
                            panic_message(&*p)
                        ));
                    }
                    Ok(Err(e)) => return Err(format!("{what} after crash: {e}")),
                    Ok(Ok(None)) => self.tally.ro_after_crash_errors += 1,
                    Ok(Ok(Some(_))) => self.tally.ro_after_crash_ok += 1,
                }
            }
            let store = self
                .open()
                .map_err(|e| format!("{what}: open after crash: {e}"))?;
            self.check_against_model(&store, &format!("{what} after crash"))?;
            slot = Some(store);
        }
        if self.family.index_damage {
            self.index_damage_round(&mut slot, "after the last round")?;
        }
        let stats = self.sim.stats();
        self.tally.efbig_faults = stats.efbig_errors;
        self.tally.disk_full_faults = stats.disk_full_errors;
        let store = slot.take().ok_or("no store")?;
        store.close().map_err(|e| format!("final close: {e}"))?;
        if !self.background_failure() {
            self.all_durable("close");
        }
        let store = self.open().map_err(|e| format!("final open: {e}"))?;
        self.check_against_model(&store, "final")?;
        for s in self.model.sessions.iter().filter(|s| s.deleted.is_none()) {
            self.tally.acked_events += s.events.len() as u64;
            if s.fork.is_some() {
                self.tally.forks_final += 1;
            }
            self.tally.replaces_final += s.events[s.fork.as_ref().map_or(0, |f| f.1 as usize)..]
                .iter()
                .filter(|e| matches!(e.surface_op, Some(SurfaceOp::Replace { .. })))
                .count() as u64;
        }
        Ok(self.tally)
    }

    /// After a bit flip in synced data: the damage is reported at the right place, and nothing
    /// read is wrong.
    fn check_flip(&mut self, flip: &BitFlip, frames: &[FrameInfo]) -> Res {
        let name = flip.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let segment = segment::parse_file_name(name).ok_or(format!("flip in {name}"))?;
        let frame = frames.iter().find(|f| {
            f.segment == segment && flip.offset >= f.offset && flip.offset < f.offset + f.len
        });
        let expect = LogPosition {
            segment,
            offset: frame.map_or(0, |f| f.offset),
        };
        if frame.is_none() && flip.offset >= SEGMENT_HEADER_LEN {
            return Err(format!("flip {flip:?} is in no frame: {frames:?}"));
        }
        let what = format!("flip at {} bit {} (frame {expect})", flip.offset, flip.bit);
        let store = match self.open() {
            Err(OpenError::Corruption { position, .. }) if position == expect => {
                self.tally.flips_open_error += 1;
                return Ok(());
            }
            Err(OpenError::NotASegment { .. } | OpenError::UnsupportedFormat { .. })
                if frame.is_none() =>
            {
                self.tally.flips_open_error += 1;
                return Ok(());
            }
            Err(e) => return Err(format!("{what}: open failed with {e}")),
            Ok(s) => s,
        };
        let report = store.recovery_report().clone();
        if frame.is_none() {
            // A header flip may pass only when it hit a header-only last segment, removed as
            // a segment torn at creation.
            if report.removed_segment != Some(segment) {
                return Err(format!(
                    "{what}: damaged segment header went unnoticed: {report:?}"
                ));
            }
            return self.check_against_model(&store, &what);
        }
        let frame = frame.unwrap();
        let damaged: HashSet<(String, u64)> = frame.events.iter().cloned().collect();
        let truncated = report.truncated.as_ref().map(|t| t.position) == Some(expect);
        if truncated {
            // Indistinguishable from a torn write: only the log's last frame may go this way,
            // and only its events are lost.
            let last = frames.last().map(|f| LogPosition {
                segment: f.segment,
                offset: f.offset,
            });
            if last != Some(expect) {
                return Err(format!(
                    "{what}: truncated a frame that is not the last: {report:?}"
                ));
            }
            self.tally.flips_truncated += 1;
            for s in &mut self.model.sessions {
                let lost = frame.events.iter().filter(|(id, _)| *id == s.id).count();
                s.durable = s.durable.saturating_sub(lost);
                if frame.creates.contains(&s.id) {
                    s.created_durable = false;
                }
                if frame.deletes.contains(&s.id) && s.deleted == Some(true) {
                    s.deleted = Some(false);
                }
            }
            return self.check_against_model(&store, &what);
        }
        let mut read_errors = 0;
        for s in &self.model.sessions {
            let Some(len) = store.len(&s.id) else {
                if s.created_durable && s.deleted.is_none() {
                    return Err(format!("{what}: session {} missing", s.id));
                }
                continue;
            };
            if s.deleted == Some(true) {
                return Err(format!("{what}: deleted session {} is back", s.id));
            }
            if (len as usize) < s.durable || len as usize > s.events.len() {
                return Err(format!(
                    "{what}: session {} has {len} events (durable {})",
                    s.id, s.durable
                ));
            }
            for seq in 0..len {
                match store.get(&s.id, seq) {
                    Ok(Some(e)) if same_event(&s.events[seq as usize], &e) => {}
                    Ok(other) => {
                        return Err(format!(
                            "{what}: {} seq {seq} read wrong data: {other:?}",
                            s.id
                        ));
                    }
                    Err(ReadError::Corruption { position, .. })
                        if position == expect
                            && damaged.contains(&(s.owner(seq).to_owned(), seq)) =>
                    {
                        read_errors += 1;
                    }
                    Err(e) => return Err(format!("{what}: {} seq {seq}: {e}", s.id)),
                }
            }
        }
        let verify = store.verify().map_err(|e| format!("{what}: verify: {e}"))?;
        if !verify.bad_frames.iter().any(|b| b.position == expect) {
            return Err(format!(
                "{what}: verify did not report the damaged frame: {verify:?}"
            ));
        }
        if read_errors > 0 {
            self.tally.flips_read_error += 1;
        }
        Ok(())
    }
}

/// A validation refusal (the session rules, or a session whose stored log does not replay),
/// as opposed to an I/O failure.
fn refused(e: &AppendError) -> bool {
    matches!(
        e,
        AppendError::Semantics { .. }
            | AppendError::Replay { .. }
            | AppendError::Envelope { .. }
            | AppendError::BadData { .. }
    )
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

fn trace() -> bool {
    std::env::var_os("SESSIONLOG_SIM_TRACE").is_some()
}

thread_local! {
    /// The family and seed of the scenario this thread runs (for the panic hook).
    static CURRENT: std::cell::Cell<Option<(&'static str, u64)>> = const { std::cell::Cell::new(None) };
}

/// Names the scenario in every panic message, so that a panic that aborts the process (a
/// second panic in a destructor while unwinding, which `catch_unwind` cannot stop) still
/// says which seed to replay.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Some((name, seed)) = CURRENT.with(|c| c.get()) {
                eprintln!(
                    "panic in scenario {name} seed {seed} (replay: SESSIONLOG_SIM_SEED={seed})"
                );
            }
            previous(info);
        }));
    });
}

/// How long one scenario may run (`SESSIONLOG_SIM_TIMEOUT_SECS`, default 60 s; scenarios take
/// well under a second).
fn scenario_timeout() -> Duration {
    Duration::from_secs(
        std::env::var("SESSIONLOG_SIM_TIMEOUT_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(60),
    )
}

fn scenario_count(default: u64) -> u64 {
    std::env::var("SESSIONLOG_SIM_SCENARIOS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs a family's scenarios on two threads. A failing scenario does not stop the run: every
/// failure is listed at the end (long runs count them).
fn run_family(name: &'static str, family: Family, salt: u64, default: u64) {
    if let Some(seed) = std::env::var("SESSIONLOG_SIM_SEED")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        if seed % 4 == salt {
            let t = Scenario::new(seed, family)
                .run()
                .unwrap_or_else(|e| panic!("{name} seed {seed}: {e}"));
            eprintln!("{name} seed {seed}: {t:?}");
        }
        return;
    }
    install_panic_hook();
    let n = scenario_count(default);
    let threads = std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(2) as u64;
    let start = std::time::Instant::now();
    let (total, failures) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut total = Tally::default();
                    let mut failures = Vec::new();
                    let mut i = t;
                    while i < n {
                        let seed = i * 4 + salt;
                        i += threads;
                        // On its own thread, so that a hang (a deadlock after a panic inside
                        // the index, say) fails the scenario instead of the whole run.
                        let (tx, rx) = std::sync::mpsc::channel();
                        std::thread::spawn(move || {
                            CURRENT.with(|c| c.set(Some((name, seed))));
                            let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
                                Scenario::new(seed, family).run()
                            }))
                            .unwrap_or_else(|p| Err(format!("panicked: {}", panic_message(&*p))));
                            let _ = tx.send(r);
                        });
                        let timeout = scenario_timeout();
                        let result = rx.recv_timeout(timeout).unwrap_or_else(|_| {
                            Err(format!("hung: no result after {timeout:?} (a deadlock?)"))
                        });
                        match result {
                            Ok(tally) => total.add(&tally),
                            Err(e) => {
                                eprintln!("{name} seed {seed} failed: {e}");
                                failures.push((seed, e));
                            }
                        }
                    }
                    (total, failures)
                })
            })
            .collect();
        let mut total = Tally::default();
        let mut failures = Vec::new();
        for h in handles {
            let (t, f) = h.join().unwrap();
            total.add(&t);
            failures.extend(f);
        }
        (total, failures)
    });
    eprintln!(
        "{name}: {n} scenarios in {:.1?} ({} failed): {total:?}",
        start.elapsed(),
        failures.len()
    );
    if let Some((seed, e)) = failures.first() {
        panic!(
            "{name}: {} scenarios failed (seeds {:?}); first: seed {seed}: {e}\nreplay: SESSIONLOG_SIM_SEED={seed} SESSIONLOG_SIM_TRACE=1 cargo test --release --test sim_crash -- --include-ignored",
            failures.len(),
            failures.iter().map(|f| f.0).take(20).collect::<Vec<_>>()
        );
    }
    assert_eq!(total.scenarios, n);
    assert!(total.crashes > 0 && total.acked_events > 0);
    assert!(
        total.live_reader_checks > 0,
        "{name}: no reader was opened beside the live writer"
    );
}

#[test]
fn sync_and_group_survive_random_crashes() {
    run_family("sync/group", MAIN, 0, 2000);
}

/// Group commit with its background leader running (1 ms): crashes and faults race it.
#[test]
fn group_timer_survives_random_crashes() {
    let mut family = MAIN;
    family.durabilities = &[3];
    run_family("group-timer", family, 0, 300);
}

#[test]
fn buffered_survives_in_order_crashes() {
    run_family("buffered", BUFFERED_IN_ORDER, 1, 1000);
}

/// Imports and `append_batch` calls spanning many frames (frames of 4-64 KiB, events up to
/// half of that) and segments, Sync and Group; crashes, ENOSPC, EIO, EFBIG, a file-size limit
/// and a full disk land inside them. After every reopen each operation is whole or absent,
/// every acknowledged one is present, `verify` is clean, and after a fault the failed
/// operation, retried, succeeds.
#[test]
fn multiframe_operations_are_all_or_nothing() {
    run_family("multiframe", MULTIFRAME, 1, 400);
}

/// The same in Buffered and Group mode with process restarts (the page cache survives, a
/// power loss may follow), several faults per scenario and fsync EIO keeping the cached pages.
#[test]
fn multiframe_operations_survive_restarts_and_repeated_faults() {
    let mut family = MULTIFRAME;
    family.durabilities = &[2, 1];
    family.restarts = true;
    family.continue_after_fault = true;
    family.options.eio_drops_cache = false;
    run_family("multiframe-restart", family, 2, 300);
}

/// Imports and batches (single-frame, default limits) in the main workload, with bit flips.
#[test]
fn imports_and_batches_in_the_main_workload() {
    let mut family = MAIN;
    family.new_ops = true;
    run_family("import-mix", family, 3, 300);
}

/// `index.redb` damaged between rounds and after crashes (bytes xored, truncated, a page
/// overwritten, the magic broken): a read-only open answers right or with typed errors (no
/// panic, no wrong answer), and a writable open rebuilds the exact model.
#[test]
fn a_damaged_index_costs_only_a_rebuild() {
    let mut family = MAIN;
    family.durabilities = &[0, 1, 2];
    family.flips = false;
    family.new_ops = true;
    family.index_damage = true;
    run_family("index-damage", family, 0, 300);
}

/// Regression (engine): Buffered mode writes several frames before one fsync. When the page
/// cache writes a later frame back and loses an earlier one, recovery finds a bad frame
/// followed by a valid one and refuses to open (`Corruption`), although nothing acknowledged
/// was damaged.
#[test]
fn buffered_survives_reordered_crashes() {
    let mut family = BUFFERED_IN_ORDER;
    family.options.reorder = true;
    run_family("buffered-reorder", family, 2, 500);
}

/// Regression (engine): a segment whose creation was visible but not yet durable (the process
/// died between the creation and the directory fsync, or the directory fsync failed) is used
/// after a reopen; acknowledged appends go into it; a power loss then removes its directory
/// entry and the acknowledged events with it.
#[test]
fn process_crash_then_power_loss_keeps_acknowledged_events() {
    let mut family = MAIN;
    family.restarts = true;
    family.dir_eio = true;
    family.continue_after_fault = true;
    run_family("restart", family, 3, 500);
}

/// Regression (engine): after an fsync fails with EIO, Linux keeps the lost pages readable
/// (marked clean). The reopened store indexes the frame from the cache, later acknowledged
/// frames land after it, and a power loss leaves a hole before them: the log no longer opens.
#[test]
fn fsync_eio_with_cached_pages_then_power_loss() {
    let mut family = MAIN;
    family.options.eio_drops_cache = false;
    family.continue_after_fault = true;
    run_family("eio-cache", family, 0, 500);
}

/// Regression (engine): a bit flip in a frame behind the index watermark, in a session whose
/// state checkpoint lags (here: the writer died before checkpointing it), made `Store::open`
/// fail in its post-recovery replay (`catch_up`) with `OpenError::Corruption` at segment 0
/// offset 0. Now the open succeeds, and reads report the damaged frame at its position.
#[test]
fn corruption_found_by_the_post_recovery_replay_names_its_frame() {
    let dir = scratch_dir();
    let sim = SimFs::new(5, SimOptions::default());
    let config = Config::default()
        .durability(Durability::Sync)
        .invariants(InvariantMode::Off)
        .with_fs(sim.clone());
    let store = Store::open(dir.path(), config.clone()).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    for seq in 0..6 {
        store
            .append(
                "a",
                Event::new("assistant/chunk", seq, 1, format!(r#"{{"n":{seq}}}"#)),
            )
            .unwrap();
    }
    // The index (not the session state) is committed, so the frames are behind its watermark.
    store.checkpoint().unwrap();
    store.abandon();
    let index = sessionlog::index::Index::open_read_only(&dir.path().join("index.redb")).unwrap();
    let loc = index.run(1, 2).unwrap().unwrap().location;
    drop(index);
    let seg = segment::path(&dir.path().join("segments"), loc.segment);
    sim.flip_bit(&seg, loc.frame_offset + 20, 3).unwrap();
    match Store::open(dir.path(), config) {
        Ok(store) => {
            // Also acceptable: the open succeeds and the read reports the frame.
            match store.get("a", 2) {
                Err(ReadError::Corruption { position, .. }) => assert_eq!(position, loc.position()),
                other => panic!("read of the damaged event gave {other:?}"),
            }
        }
        Err(OpenError::Corruption { position, .. }) => assert_eq!(position, loc.position()),
        Err(e) => panic!("unexpected error {e}"),
    }
}

/// Regression (engine, minor): the store never fsyncs the directory that holds `segments/`,
/// so on a file system without ordered metadata the first open's `mkdir segments` can be lost
/// in a power failure together with every acknowledged event in it.
#[test]
fn the_segments_directory_survives_a_power_loss() {
    for seed in 0..16 {
        let dir = scratch_dir();
        let sim = SimFs::new(
            seed,
            SimOptions {
                volatile_mkdir: true,
                ..SimOptions::default()
            },
        );
        // The store directory exists before the store is opened; `segments/` does not.
        sim.create_durable_dir_all(dir.path());
        let config = Config::default()
            .durability(Durability::Sync)
            .invariants(InvariantMode::Off)
            .with_fs(sim.clone());
        let store = Store::open(dir.path(), config.clone()).unwrap();
        store.create_session(SessionHeader::new("a", 1)).unwrap();
        store
            .append("a", Event::new("turn/start", 0, 1, r#"{"turn":1}"#))
            .unwrap();
        sim.crash();
        drop(store);
        let store = Store::open(dir.path(), config).unwrap();
        assert_eq!(
            store.len("a"),
            Some(1),
            "seed {seed}: an acknowledged event was lost"
        );
    }
}

/// Regression (engine): when the Group-commit background leader fails (here an fsync EIO),
/// nobody is waiting to see the error; `Store::close` then returns `Ok(())` because
/// `Store::shutdown` skips a poisoned committer, and the events staged since the last sync are
/// silently lost although `close` promises they were synced. Found by
/// `group_timer_survives_random_crashes` (seeds 10600 and 67784, timing-dependent).
#[test]
fn close_reports_a_failed_background_sync() {
    let dir = scratch_dir();
    let sim = SimFs::new(9, SimOptions::default());
    let config = Config::default()
        .durability(Durability::Group {
            max_delay: Duration::from_millis(1),
        })
        .invariants(InvariantMode::Off)
        .with_fs(sim.clone());
    let store = Store::open(dir.path(), config).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    store.flush().unwrap();
    sim.set_faults(SimFaults {
        eio_after_syncs: Some(0),
        ..SimFaults::default()
    });
    store
        .append("a", Event::new("turn/start", 0, 1, r#"{"turn":1}"#))
        .unwrap();
    // Let the background leader try (and fail) to sync.
    let start = std::time::Instant::now();
    while sim.stats().injected_errors == 0 && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(
        sim.stats().injected_errors,
        1,
        "the background sync never ran"
    );
    let r = store.close();
    assert!(
        matches!(r, Err(AppendError::PreviousIo(_))),
        "close after a failed background sync returned {r:?}"
    );
}

/// Regression (engine, found by this file's fork/delete workload, e.g. `buffered` seed 29): a
/// purged session's number is handed out again after a reopen. `Registry::new` derives the
/// next session number from the rows in the index, and a session deleted with no forks is
/// purged (row and all), so when the highest-numbered sessions were purged the next create
/// after a reopen reuses their number. The log then holds events of two different sessions
/// under one number, and `verify` (which judges an event by the *current* owner of its
/// number) reports the old incarnation's events as index mismatches.
#[test]
fn a_purged_session_number_is_not_reused_after_reopen() {
    let dir = scratch_dir();
    let sim = SimFs::new(11, SimOptions::default());
    let config = Config::default()
        .durability(Durability::Sync)
        .invariants(InvariantMode::Off)
        .with_fs(sim.clone());
    let store = Store::open(dir.path(), config.clone()).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    store.create_session(SessionHeader::new("b", 1)).unwrap();
    store
        .append("b", Event::new("turn/start", 0, 1, r#"{"turn":1}"#))
        .unwrap();
    store.delete_session("b").unwrap();
    store.close().unwrap();
    let store = Store::open(dir.path(), config.clone()).unwrap();
    store.create_session(SessionHeader::new("c", 1)).unwrap();
    store
        .append("c", Event::new("turn/start", 0, 2, r#"{"turn":2}"#))
        .unwrap();
    let report = store.verify().unwrap();
    store.close().unwrap();
    // Rebuilding the index from the log gives the same sessions, readable.
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let rebuilt = Store::open(dir.path(), config).unwrap();
    assert_eq!(rebuilt.len("b"), None);
    assert_eq!(rebuilt.len("c"), Some(1));
    let read = rebuilt.get("c", 0);
    assert!(
        matches!(&read, Ok(Some(e)) if e.time == 2),
        "after an index rebuild, the session that reused a purged number reads {read:?}; report {:?}",
        rebuilt.recovery_report()
    );
    assert!(
        report.is_clean(),
        "verify after reusing a purged session's number: {report:?}"
    );
    assert!(rebuilt.verify().unwrap().is_clean());
}

/// Regression (engine, found by this file's fork/delete workload, `sync/group` seed 1388 before
/// the workaround in `Scenario::fork`): a session deleted while a fork still inherits from it
/// keeps its row (pinned, hidden); its id is free again, and a new session with that id (a
/// `create_session`, or a fork whose id `mint_id` picks) writes its row under the same key
/// of the index's `sessions` table, which is keyed by id. The pinned row is overwritten; after
/// a reopen a fork of a fork no longer resolves its inherited seqs through it (`resolve`
/// stops at the missing row) and reads fail with "the index has no location".
#[test]
fn reusing_a_pinned_deleted_id_keeps_the_forks_prefix() {
    let dir = scratch_dir();
    let sim = SimFs::new(12, SimOptions::default());
    let config = Config::default()
        .durability(Durability::Sync)
        .invariants(InvariantMode::Off)
        .with_fs(sim.clone());
    let store = Store::open(dir.path(), config.clone()).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    for seq in 0..3 {
        store
            .append(
                "a",
                Event::new("assistant/chunk", seq, 1, format!(r#"{{"n":{seq}}}"#)),
            )
            .unwrap();
    }
    // a <- b <- c; a and b deleted (kept: c inherits through both).
    store.fork("a", None, Some("b")).unwrap();
    store.fork("b", None, Some("c")).unwrap();
    store.delete_session("a").unwrap();
    store.delete_session("b").unwrap();
    // "b" is free again: a new session takes the id.
    store.create_session(SessionHeader::new("b", 2)).unwrap();
    assert_eq!(store.get("c", 1).unwrap().unwrap().data, r#"{"n":1}"#);
    store.close().unwrap();
    let store = Store::open(dir.path(), config).unwrap();
    assert_eq!(store.len("b"), Some(0));
    assert_eq!(store.len("c"), Some(4));
    let read = store.get("c", 1);
    assert!(
        matches!(&read, Ok(Some(e)) if e.data == r#"{"n":1}"#),
        "the fork's inherited event after a reopen: {read:?}"
    );
    assert!(store.verify().unwrap().is_clean());
}

/// Regression (engine, found by `fsync_eio_with_cached_pages_then_power_loss` seed 19192 with
/// this file's fork/delete/compaction workload; a seed replay, so it reproduces with this
/// file's generator as of its commit). Group commit, 4 KiB segments. Round 0: a flush's write
/// fails with `ENOSPC` after writing 133 bytes of a 671-byte frame at segment 1 offset 3254;
/// the writer cuts the segment back without syncing the cut (`src/store/commit.rs`, the
/// `set_len(a.synced_len)` after a failed `write_all_at`; `sync_or_cut` does sync its cut);
/// reopen (no crash) scans nothing.
/// Round 1: the first fsync after the reopen (a flush) fails with `EIO`; the page cache keeps
/// the cut length (pages marked clean), and the partial frame stays on disk. Reopen: recovery
/// sees nothing to repair (it syncs only what it changed). Round 2: later frames go to
/// segment 2 and are synced; a power loss. The reopen then finds the partial frame at the end
/// of segment 1 with valid frames after it and refuses to open ("valid frames follow, so this
/// is not a torn write") although nothing acknowledged was damaged.
#[test]
fn a_cut_after_enospc_survives_an_fsync_eio_and_a_power_loss() {
    let mut family = MAIN;
    family.options.eio_drops_cache = false;
    family.continue_after_fault = true;
    let seed = 19192;
    Scenario::new(seed, family)
        .run()
        .unwrap_or_else(|e| panic!("eio-cache seed {seed}: {e}"));
}

/// Finding (engine, open; found by `multiframe-restart` seed 5094 with
/// `SESSIONLOG_SIM_BIG_FRAMES=1`, a combination no earlier family ran: Buffered durability with
/// process restarts). A Buffered writer writes frames without syncing them and commits the
/// index (not durably) over them; the process dies, the page cache survives. The next open
/// finds nothing to scan (the index covers the frames), so recovery syncs nothing and marks
/// the last segment `unverified`; `flush()` then has nothing staged and returns `Ok` without
/// syncing it. A power loss takes the frames the flush acknowledged (here: the reopen after it
/// finds fewer events than the flushed store served).
#[test]
fn flush_after_a_process_restart_makes_what_the_store_serves_durable() {
    let mut lost = Vec::new();
    for seed in 0..16 {
        let dir = scratch_dir();
        let sim = SimFs::new(
            seed,
            SimOptions {
                reorder: false,
                ..SimOptions::default()
            },
        );
        let config = Config::default()
            .durability(Durability::Buffered)
            .batch_bytes(256)
            .invariants(InvariantMode::Off)
            .with_fs(sim.clone());
        let store = Store::open(dir.path(), config.clone()).unwrap();
        store.create_session(SessionHeader::new("a", 1)).unwrap();
        store.flush().unwrap();
        for seq in 0..10 {
            let text = "x".repeat(400);
            store
                .append(
                    "a",
                    Event::new("assistant/chunk", seq, 1, format!(r#"{{"t":"{text}"}}"#)),
                )
                .unwrap();
        }
        // The writer dies; its written frames stay in the page cache.
        store.abandon();
        sim.restart_process();
        let store = Store::open(dir.path(), config.clone()).unwrap();
        let served = store.len("a").unwrap();
        store.flush().unwrap();
        drop(store);
        // A power loss after the flush.
        sim.crash();
        let store = Store::open(dir.path(), config).unwrap();
        let after = store.len("a").unwrap_or(0);
        if after < served {
            lost.push((seed, served, after));
        }
    }
    assert!(
        lost.is_empty(),
        "events served and flushed after a process restart were lost in a power loss (seed, served, after): {lost:?}"
    );
}

/// Finding 12 (engine, fixed): an fsync EIO that keeps the cached pages (Linux marks them
/// clean), then a process restart, then a power loss. The restarted process read the segment
/// from the page cache, its own syncs succeeded without writing those pages, and the power
/// loss left a hole under what it appended ("bad length 0 ... valid frames follow"). The
/// writer now writes such bytes again from the cache when a sync of a segment it did not write
/// fails (and recovery does the same when its sync of scanned segments fails).
#[test]
fn an_fsync_eio_before_a_restart_does_not_leave_a_hole_after_a_power_loss() {
    for seed in [59958, 66150, 93338, 99442] {
        let mut family = MULTIFRAME;
        family.durabilities = &[2, 1];
        family.restarts = true;
        family.continue_after_fault = true;
        family.options.eio_drops_cache = false;
        Scenario::new(seed, family)
            .run()
            .unwrap_or_else(|e| panic!("multiframe-restart seed {seed}: {e}"));
    }
}
