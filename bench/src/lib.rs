//! The comparison benchmark harness (`sessionlog bench`): sessionlog against its peers.
//!
//! Every peer gets the same generated dsh events ([`crate::workload`]) in the same groups, in
//! the same run, in a temporary directory on the same disk as the current directory:
//!
//! - **append**: throughput (events/s, MB/s of event JSON) for 1 and 64 concurrent sessions at
//!   equal durability: a sync per event, batches of 16/256/1024 (one frame / transaction /
//!   fsync each), and the dsh workload's 4 flush points per turn; with per-write latency
//!   p50/p99;
//! - **resume**: open + load a session of 10k/100k/1M events (compactions included) and fold
//!   its surface, in a child process (time and peak RSS);
//! - **reopen**: sessionlog's open after a crash with a large unindexed tail, and a full
//!   index rebuild, by log size;
//! - **read**: a full read of one session's events (events/s);
//! - **disk**: bytes on disk per event;
//! - **replay**: the real dsh logs of the fixtures, appended at their flush points;
//! - **resume however written** ([`written`]): sessions written live, by import, by big
//!   batches, by fork, and of big messages, against reading them once and dsh's load;
//! - **gc** ([`gc`]): space after deleting half the sessions against live bytes, GC
//!   throughput against the raw disk, appends while GC runs.
//!
//! Peers: sessionlog; the simplest SQLite (dsh's schema 15, WAL; `synchronous` FULL and
//! NORMAL) and JSONL; what dsh really writes ([`faithful`]: zstd JSONL with packed rows, SQLite
//! schema 18); redb alone; and the raw disk (the physical ceiling).
//!
//! ```no_run
//! use sessionlog_bench::{BenchArgs, run};
//! let args = BenchArgs { quick: true, ..BenchArgs::default() };
//! run(&args)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod append;
pub mod chart;
pub mod dataset;
pub mod faithful;
pub mod fold;
pub mod gc;
pub mod handoff;
pub mod peers;
pub mod readers;
mod reopen;
mod replay;
pub mod report;
mod resume;
mod targets;
pub mod workload;
pub mod written;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::workload::{
    FlushGroup, SessionGenerator, WorkloadConfig, event_json, flush_groups, generate_events,
    load_fixture_sessions, session_header, session_id,
};
use sessionlog::event::{Event, SessionHeader};
use sessionlog::store::{Config, Durability, INDEX_FILE, Store};

use peers::{
    BenchResult, Loaded, Mode, PeerKind, RawWriter, SessionlogStyle, SessionlogWriter, Writer,
    dir_bytes, group_bytes,
};

/// Arguments of `sessionlog bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// A short run (under a minute), as CI's smoke test does.
    #[arg(long)]
    pub quick: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw the SVG charts (resume time by log length, append throughput by mode) into this
    /// directory.
    #[arg(long)]
    pub charts: Option<PathBuf>,
    /// Where to make the temporary directory (default: the current directory, so the
    /// benchmark runs on the project's disk; never a RAM disk).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Run only these sections (comma-separated: append, latency, resume, written, reopen,
    /// replay, gc; `resume` includes `written`, the resume of sessions however written).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Run only these peers (comma-separated names; sessionlog always runs).
    #[arg(long, value_delimiter = ',')]
    pub peers: Vec<String>,
    /// The workload seed.
    #[arg(long, default_value_t = WorkloadConfig::default().seed)]
    pub seed: u64,
    /// A compaction every this many turns in the generated sessions (0: none).
    #[arg(long, default_value_t = WorkloadConfig::default().compaction_every)]
    pub compaction_every: u64,
    /// Internal: load one session of one peer and print time and peak RSS as JSON.
    #[arg(long, hide = true)]
    pub probe: Option<String>,
    /// Internal: the store directory of `--probe` and `--probe-fill`.
    #[arg(long, hide = true)]
    pub probe_dir: Option<PathBuf>,
    /// Internal: the session `--probe` loads (default: generated session 0).
    #[arg(long, hide = true)]
    pub probe_session: Option<String>,
    /// Internal: fill a store with this many MB of log, flush, and exit without closing it
    /// (a crash: the index keeps only what its last durable commit had).
    #[arg(long, hide = true)]
    pub probe_fill: Option<u64>,
}

impl Default for BenchArgs {
    fn default() -> Self {
        BenchArgs {
            quick: false,
            json: None,
            charts: None,
            dir: None,
            only: Vec::new(),
            peers: Vec::new(),
            seed: WorkloadConfig::default().seed,
            compaction_every: WorkloadConfig::default().compaction_every,
            probe: None,
            probe_dir: None,
            probe_session: None,
            probe_fill: None,
        }
    }
}

/// The issue's reference figure: dsh's own JSONL backend appends 4.8k events/s with this
/// workload and these flush points.
pub const DSH_JSONL_EVENTS_PER_SEC: f64 = 4_800.0;

/// Runs the benchmark harness.
pub fn run(args: &BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(mb) = args.probe_fill {
        return reopen::probe_fill(mb, args.probe_dir.as_deref(), args)
            .map_err(|e| e as Box<dyn std::error::Error>);
    }
    if let Some(peer) = &args.probe {
        return resume::probe(
            peer,
            args.probe_dir.as_deref(),
            args.probe_session.as_deref(),
        )
        .map_err(|e| e as Box<dyn std::error::Error>);
    }
    run_all(args).map_err(|e| e as Box<dyn std::error::Error>)
}

/// One append measurement.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AppendRow {
    /// Peer name.
    pub peer: String,
    /// Concurrent sessions (one thread each).
    pub sessions: usize,
    /// Durability mode name.
    pub mode: String,
    /// Events per durable write (0: the flush-point groups, 14.5 on average).
    pub batch: usize,
    /// True when each write was durable when it returned.
    pub durable: bool,
    /// Events appended.
    pub events: u64,
    /// Bytes of event JSON appended (the same for every peer).
    pub json_bytes: u64,
    /// Durable writes (groups).
    pub writes: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Events per second.
    pub events_per_sec: f64,
    /// MB (10^6 bytes) of event JSON per second.
    pub mb_per_sec: f64,
    /// Median latency of one durable write, microseconds.
    pub p50_us: f64,
    /// 99th percentile latency of one durable write, microseconds.
    pub p99_us: f64,
    /// Runs made (the row is the median run by events/s).
    pub runs: usize,
    /// Bytes of all the peer's files per event after the run (the raw disk: the JSON lines).
    pub bytes_per_event: f64,
    /// Slowest run's events/s.
    pub events_per_sec_min: f64,
    /// Fastest run's events/s.
    pub events_per_sec_max: f64,
    /// The process's CPU time (user + system, every thread) over the run per event, in
    /// microseconds (`None` where `/proc` is missing).
    pub cpu_us_per_event: Option<f64>,
}

/// Durable single-append latency, measured paired: the peers take turns, one event each.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyRow {
    /// Peer name.
    pub peer: String,
    /// True when each write was durable when it returned.
    pub durable: bool,
    /// Writes timed.
    pub writes: usize,
    /// Median, microseconds.
    pub p50_us: f64,
    /// 90th percentile, microseconds.
    pub p90_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
}

/// One resume measurement (a child process: open, load, fold).
#[derive(Debug, Clone, Serialize)]
pub struct ResumeRow {
    /// Peer name.
    pub peer: String,
    /// What was measured (`full-read` for sessionlog until the surface resume is in main).
    pub kind: String,
    /// Events in the session.
    pub events: u64,
    /// Median milliseconds over the runs.
    pub ms: f64,
    /// Peak resident set of the child process, MB.
    pub rss_mb: f64,
    /// Surface nodes after the fold.
    pub surface: usize,
    /// Derived messages.
    pub messages: usize,
}

/// One reopen measurement (sessionlog only).
#[derive(Debug, Clone, Serialize)]
pub struct ReopenRow {
    /// Log bytes (segments).
    pub log_bytes: u64,
    /// Events in the log.
    pub events: u64,
    /// Open after a clean close, ms.
    pub clean_ms: f64,
    /// Open after a crash (`abandon`) with the whole log as unindexed tail, ms.
    pub crash_ms: f64,
    /// `Store::catch_up` right after that open (every session folded), ms.
    pub catch_up_ms: f64,
    /// Frames the crash recovery scanned.
    pub frames_scanned: u64,
    /// Events the crash recovery indexed.
    pub events_recovered: u64,
    /// Open after deleting index.redb (full rebuild), ms.
    pub rebuild_ms: f64,
}

/// One full-read measurement.
#[derive(Debug, Clone, Serialize)]
pub struct ReadRow {
    /// Peer name.
    pub peer: String,
    /// Events read.
    pub events: u64,
    /// Seconds (open included).
    pub seconds: f64,
    /// Events per second.
    pub events_per_sec: f64,
}

/// Bytes on disk per event of a peer's copy of a session.
#[derive(Debug, Clone, Serialize)]
pub struct DiskRow {
    /// Peer name.
    pub peer: String,
    /// Events stored.
    pub events: u64,
    /// Bytes of all its files.
    pub bytes: u64,
    /// Bytes per event.
    pub bytes_per_event: f64,
    /// Bytes of event JSON per event (the logical size).
    pub json_bytes_per_event: f64,
    /// Where the bytes are (sessionlog: log and index).
    pub detail: String,
}

/// The replay of the fixtures' real dsh logs, per peer.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayRow {
    /// Peer name.
    pub peer: String,
    /// Sessions replayed.
    pub sessions: usize,
    /// Events appended.
    pub events: u64,
    /// Durable writes (flush points).
    pub writes: u64,
    /// Seconds.
    pub seconds: f64,
    /// Events per second.
    pub events_per_sec: f64,
    /// Bytes on disk per event.
    pub bytes_per_event: f64,
}

/// One of the issue's targets, checked.
#[derive(Debug, Clone, Serialize)]
pub struct TargetRow {
    /// What is measured.
    pub name: String,
    /// The target, in words.
    pub target: String,
    /// The measured value, in words.
    pub measured: String,
    /// `true` met, `false` missed, `null` not measured in this run (or a row that informs only).
    pub met: Option<bool>,
}

/// The machine the run was on.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Machine {
    /// Logical CPUs.
    pub nproc: usize,
    /// CPU model (`/proc/cpuinfo`).
    pub cpu: String,
    /// The device and file system of the benchmark directory.
    pub disk: String,
    /// Operating system.
    pub os: String,
    /// What one thread waking another costs here, measured before the append rows.
    pub handoff: Option<handoff::Handoff>,
}

/// The workload's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkloadInfo {
    /// Events per turn.
    pub events_per_turn: u64,
    /// Average bytes of event JSON per event.
    pub avg_event_json_bytes: f64,
    /// A compaction every this many turns.
    pub compaction_every: u64,
    /// The seed.
    pub seed: u64,
}

/// Everything a run measured (what `--json` writes).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Results {
    /// The results format version.
    pub format: u32,
    /// `--quick`.
    pub quick: bool,
    /// The command line that reproduces the run.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// The workload.
    pub workload: WorkloadInfo,
    /// Append throughput and latency.
    pub append: Vec<AppendRow>,
    /// Durable single-append latency (paired).
    pub latency: Vec<LatencyRow>,
    /// Resume by session length.
    pub resume: Vec<ResumeRow>,
    /// Reopen after a crash / index rebuild, by log size.
    pub reopen: Vec<ReopenRow>,
    /// Full reads.
    pub read: Vec<ReadRow>,
    /// Bytes on disk per event.
    pub disk: Vec<DiskRow>,
    /// Replay of the fixture logs.
    pub replay: Vec<ReplayRow>,
    /// Resume of sessions however written (import, big batches, fork, big messages).
    pub written: Vec<written::WrittenRow>,
    /// Segment GC: space after deleting half the sessions, and GC throughput.
    pub gc_space: Vec<gc::GcSpaceRow>,
    /// Segment GC: appends with and without GC running beside them.
    pub gc_append: Vec<gc::GcAppendRow>,
    /// The issue's targets.
    pub targets: Vec<TargetRow>,
    /// Remarks (what was skipped, what a figure means).
    pub notes: Vec<String>,
    /// Total seconds.
    pub seconds: f64,
}

struct Ctx<'a> {
    args: &'a BenchArgs,
    base: PathBuf,
    config: WorkloadConfig,
    notes: Vec<String>,
}

impl Ctx<'_> {
    fn section(&self, name: &str) -> bool {
        self.args.only.is_empty() || self.args.only.iter().any(|s| s == name)
    }

    fn peers(&self, of: &[PeerKind]) -> Vec<PeerKind> {
        of.iter()
            .copied()
            .filter(|p| {
                *p == PeerKind::Sessionlog
                    || self.args.peers.is_empty()
                    || self.args.peers.iter().any(|n| n == p.name())
            })
            .collect()
    }
}

fn progress(msg: impl AsRef<str>) {
    eprintln!("  {}", msg.as_ref());
}

fn run_all(args: &BenchArgs) -> BenchResult<()> {
    let started = Instant::now();
    let parent = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()?,
    };
    let tmp = tempfile::Builder::new()
        .prefix(".sessionlog-bench-")
        .tempdir_in(&parent)?;
    let config = WorkloadConfig {
        seed: args.seed,
        compaction_every: args.compaction_every,
        ..WorkloadConfig::default()
    };
    let mut ctx = Ctx {
        args,
        base: tmp.path().to_path_buf(),
        config,
        notes: Vec::new(),
    };
    let machine = report::machine(&ctx.base);
    eprintln!(
        "sessionlog bench{}: {} CPUs ({}), {}; temporary directory {}",
        if args.quick { " --quick" } else { "" },
        machine.nproc,
        machine.cpu,
        machine.disk,
        ctx.base.display()
    );
    let sample = generate_events(&ctx.config, 0, 20_000);
    let avg =
        sample.iter().map(|e| event_json(e).len()).sum::<usize>() as f64 / sample.len() as f64;
    drop(sample);

    let mut machine = machine;
    let append = if ctx.section("append") {
        machine.handoff = Some(handoff::measure(if args.quick { 2_000 } else { 20_000 }));
        append::append_section(&mut ctx)?
    } else {
        Vec::new()
    };
    let latency = if ctx.section("latency") {
        append::latency_section(&mut ctx)?
    } else {
        Vec::new()
    };
    let (resume, read, disk) = if ctx.section("resume") {
        resume::resume_section(&mut ctx)?
    } else {
        (Vec::new(), Vec::new(), Vec::new())
    };
    let written = if ctx.section("resume") || ctx.section("written") {
        written::written_section(&mut ctx)?
    } else {
        Vec::new()
    };
    let reopen = if ctx.section("reopen") {
        reopen::reopen_section(&mut ctx)?
    } else {
        Vec::new()
    };
    let replay = if ctx.section("replay") {
        replay::replay_section(&mut ctx)?
    } else {
        Vec::new()
    };

    let (gc_space, gc_append) = if ctx.section("gc") {
        gc::gc_section(&mut ctx)?
    } else {
        (Vec::new(), Vec::new())
    };

    let mut results = Results {
        format: 1,
        quick: args.quick,
        command: report::command_line(args),
        machine,
        workload: WorkloadInfo {
            events_per_turn: ctx.config.events_per_turn(),
            avg_event_json_bytes: avg,
            compaction_every: ctx.config.compaction_every,
            seed: ctx.config.seed,
        },
        append,
        latency,
        resume,
        reopen,
        read,
        disk,
        replay,
        written,
        gc_space,
        gc_append,
        targets: Vec::new(),
        notes: std::mem::take(&mut ctx.notes),
        seconds: 0.0,
    };
    results.targets = report::targets(&results);
    results.seconds = started.elapsed().as_secs_f64();
    print!("{}", report::markdown(&results));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&results)?)?;
    }
    if let Some(dir) = &args.charts {
        std::fs::create_dir_all(dir)?;
        chart::resume_chart(&results, &dir.join("resume.svg"))?;
        chart::append_chart(&results, &dir.join("append.svg"))?;
    }
    drop(tmp);
    Ok(())
}
