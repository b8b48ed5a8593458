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
//! - **replay**: the real dsh logs of the fixtures, appended at their flush points.
//!
//! Peers: sessionlog, SQLite with dsh's schema 15 (WAL; `synchronous` FULL and NORMAL),
//! dsh-style JSONL, redb alone, and the raw disk (the physical ceiling).
//!
//! ```no_run
//! use sessionlog_bench::{BenchArgs, run};
//! let args = BenchArgs { quick: true, ..BenchArgs::default() };
//! run(&args)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod chart;
pub mod fold;
pub mod peers;
pub mod report;
pub mod workload;

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
    /// Run only these sections (comma-separated: append, latency, resume, reopen, replay).
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
        return probe_fill(mb, args.probe_dir.as_deref(), args)
            .map_err(|e| e as Box<dyn std::error::Error>);
    }
    if let Some(peer) = &args.probe {
        return probe(peer, args.probe_dir.as_deref()).map_err(|e| e as Box<dyn std::error::Error>);
    }
    run_all(args).map_err(|e| e as Box<dyn std::error::Error>)
}

/// One append measurement.
#[derive(Debug, Clone, Serialize)]
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
    /// Slowest run's events/s.
    pub events_per_sec_min: f64,
    /// Fastest run's events/s.
    pub events_per_sec_max: f64,
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
    /// `true` met, `false` missed, `null` not measured in this run.
    pub met: Option<bool>,
}

/// The machine the run was on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Logical CPUs.
    pub nproc: usize,
    /// CPU model (`/proc/cpuinfo`).
    pub cpu: String,
    /// The device and file system of the benchmark directory.
    pub disk: String,
    /// Operating system.
    pub os: String,
}

/// The workload's figures.
#[derive(Debug, Clone, Serialize)]
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
#[derive(Debug, Clone, Serialize)]
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

    let append = if ctx.section("append") {
        append_section(&mut ctx)?
    } else {
        Vec::new()
    };
    let latency = if ctx.section("latency") {
        latency_section(&mut ctx)?
    } else {
        Vec::new()
    };
    let (resume, read, disk) = if ctx.section("resume") {
        resume_section(&mut ctx)?
    } else {
        (Vec::new(), Vec::new(), Vec::new())
    };
    let reopen = if ctx.section("reopen") {
        reopen_section(&mut ctx)?
    } else {
        Vec::new()
    };
    let replay = if ctx.section("replay") {
        replay_section(&mut ctx)?
    } else {
        Vec::new()
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

// ---------------------------------------------------------------------------------------------
// append
// ---------------------------------------------------------------------------------------------

/// (sessions, mode, events per session) of the append runs; flush-point runs are sized in
/// turns (events per session = turns * 58, plus the title).
fn append_plan(quick: bool) -> Vec<(usize, Mode, u64)> {
    if quick {
        vec![
            (1, Mode::PerEvent, 50),
            (1, Mode::Batch(16), 256),
            (1, Mode::Batch(256), 4096),
            (1, Mode::Batch(1024), 8192),
            (1, Mode::FlushPoints, 5),
            (64, Mode::PerEvent, 2),
            (64, Mode::Batch(16), 16),
            (64, Mode::Batch(256), 256),
            (64, Mode::FlushPoints, 1),
        ]
    } else {
        vec![
            (1, Mode::PerEvent, 1000),
            (1, Mode::Batch(16), 4096),
            (1, Mode::Batch(256), 32_768),
            (1, Mode::Batch(1024), 65_536),
            (1, Mode::FlushPoints, 60),
            (64, Mode::PerEvent, 16),
            (64, Mode::Batch(16), 64),
            (64, Mode::Batch(256), 512),
            (64, Mode::Batch(1024), 1024),
            (64, Mode::FlushPoints, 3),
        ]
    }
}

/// The groups of session `index` for a run.
fn groups_for(config: &WorkloadConfig, index: u64, mode: Mode, size: u64) -> Vec<Vec<Event>> {
    match mode {
        Mode::FlushPoints => {
            let c = WorkloadConfig {
                turns: size,
                ..config.clone()
            };
            SessionGenerator::new(&c, index).map(|g| g.events).collect()
        }
        Mode::PerEvent => generate_events(config, index, size)
            .into_iter()
            .map(|e| vec![e])
            .collect(),
        Mode::Batch(n) => {
            let events = generate_events(config, index, size);
            let mut out = Vec::new();
            let mut it = events.into_iter().peekable();
            while it.peek().is_some() {
                out.push(it.by_ref().take(n).collect());
            }
            out
        }
    }
}

fn append_section(ctx: &mut Ctx<'_>) -> BenchResult<Vec<AppendRow>> {
    let reps = if ctx.args.quick { 1 } else { 3 };
    eprintln!(
        "append throughput and latency ({reps} interleaved run(s) per peer, median reported)"
    );
    let mut rows = Vec::new();
    let peers = ctx.peers(&PeerKind::ALL);
    for (sessions, mode, size) in append_plan(ctx.args.quick) {
        let workload: Vec<Vec<Vec<Event>>> = (0..sessions as u64)
            .map(|i| groups_for(&ctx.config, i, mode, size))
            .collect();
        let mut runs: Vec<Vec<AppendRow>> = vec![Vec::new(); peers.len()];
        for rep in 0..reps {
            // Rotate the order so no peer always runs first (the disk is shared and noisy).
            for k in 0..peers.len() {
                let i = (k + rep) % peers.len();
                let peer = peers[i];
                let dir = ctx.base.join(format!(
                    "append-{}-{sessions}-{}-{rep}",
                    peer.name(),
                    mode.name().replace([' ', ',', '/'], "-")
                ));
                let row = run_append(peer, mode, &workload, &dir)?;
                let _ = std::fs::remove_dir_all(&dir);
                runs[i].push(row);
            }
        }
        for mut r in runs {
            r.sort_by(|a, b| a.events_per_sec.total_cmp(&b.events_per_sec));
            let (lo, hi) = (r[0].events_per_sec, r[r.len() - 1].events_per_sec);
            let mut row = r.swap_remove(r.len() / 2);
            row.runs = reps;
            row.events_per_sec_min = lo;
            row.events_per_sec_max = hi;
            progress(format!(
                "{:<18} {:>2} sessions  {:<26} {:>9.0} events/s  {:>7.1} MB/s  p50 {:>8.0} us  p99 {:>8.0} us",
                row.peer,
                row.sessions,
                row.mode,
                row.events_per_sec,
                row.mb_per_sec,
                row.p50_us,
                row.p99_us
            ));
            rows.push(row);
        }
    }
    if ctx.args.quick {
        ctx.notes.push(
            "--quick: one run per measurement, small sizes, no batch-1024 run with 64 sessions, resume up to 10k events: figures are a smoke test, not results".into(),
        );
    }
    Ok(rows)
}

fn latency_section(ctx: &mut Ctx<'_>) -> BenchResult<Vec<LatencyRow>> {
    let n: u64 = if ctx.args.quick { 40 } else { 1000 };
    eprintln!("durable single-append latency ({n} appends per peer, the peers taking turns)");
    let peers = ctx.peers(&PeerKind::ALL);
    let events = generate_events(&ctx.config, 0, n);
    let mut writers = Vec::new();
    let mut raw = None;
    for peer in &peers {
        let dir = ctx.base.join(format!("latency-{}", peer.name()));
        std::fs::create_dir_all(&dir)?;
        if *peer == PeerKind::RawDisk {
            raw = Some(RawWriter::open(&dir)?);
            writers.push(None);
        } else {
            let w = peers::open_writer(*peer, &dir, Mode::PerEvent)?;
            w.create(0, &session_header(0))?;
            writers.push(Some(w));
        }
    }
    let mut lat: Vec<Vec<Duration>> = vec![Vec::new(); peers.len()];
    for (i, e) in events.iter().enumerate() {
        for k in 0..peers.len() {
            let p = (k + i) % peers.len();
            let t = Instant::now();
            match (&writers[p], &raw) {
                (Some(w), _) => w.write(0, vec![e.clone()])?,
                (None, Some(r)) => r.write_bytes(&group_bytes(std::slice::from_ref(e)))?,
                (None, None) => return Err("no raw writer".into()),
            }
            lat[p].push(t.elapsed());
        }
    }
    let mut rows = Vec::new();
    for ((peer, w), mut l) in peers.iter().zip(writers).zip(lat) {
        if let Some(w) = w {
            w.close()?;
        }
        l.sort_unstable();
        let row = LatencyRow {
            peer: peer.name().into(),
            durable: peer.durable(),
            writes: l.len(),
            p50_us: percentile(&l, 0.5),
            p90_us: percentile(&l, 0.9),
            p99_us: percentile(&l, 0.99),
        };
        progress(format!(
            "{:<18} p50 {:>7.0} us  p90 {:>7.0} us  p99 {:>7.0} us",
            row.peer, row.p50_us, row.p90_us, row.p99_us
        ));
        rows.push(row);
    }
    for peer in &peers {
        let _ = std::fs::remove_dir_all(ctx.base.join(format!("latency-{}", peer.name())));
    }
    Ok(rows)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e6
}

/// Appends `workload` (per session, its groups) to a fresh store of `peer` in `dir`: one
/// thread per session, all started together; every group is made durable before the next.
fn run_append(
    peer: PeerKind,
    mode: Mode,
    workload: &[Vec<Vec<Event>>],
    dir: &Path,
) -> BenchResult<AppendRow> {
    let sessions = workload.len();
    let events: u64 = workload.iter().flatten().map(|g| g.len() as u64).sum();
    let json_bytes: u64 = workload
        .iter()
        .flatten()
        .flatten()
        .map(|e| event_json(e).len() as u64)
        .sum();
    let writes: u64 = workload.iter().map(|s| s.len() as u64).sum();
    let batch = match mode {
        Mode::PerEvent => 1,
        Mode::Batch(n) => n,
        Mode::FlushPoints => 0,
    };
    std::fs::create_dir_all(dir)?;
    let (seconds, mut latencies) = if peer == PeerKind::RawDisk {
        run_raw(workload, dir)?
    } else {
        let writer = peers::open_writer(peer, dir, mode)?;
        for i in 0..sessions {
            writer.create(i, &session_header(i as u64))?;
        }
        let copies: Vec<Vec<Vec<Event>>> = workload.to_vec();
        let barrier = Barrier::new(sessions + 1);
        let w: &dyn Writer = writer.as_ref();
        let (seconds, lat) = std::thread::scope(|s| -> BenchResult<(f64, Vec<Duration>)> {
            let handles: Vec<_> = copies
                .into_iter()
                .enumerate()
                .map(|(i, groups)| {
                    let barrier = &barrier;
                    s.spawn(move || -> BenchResult<(Instant, Instant, Vec<Duration>)> {
                        let mut lat = Vec::with_capacity(groups.len());
                        barrier.wait();
                        let start = Instant::now();
                        for g in groups {
                            let t = Instant::now();
                            w.write(i, g)?;
                            lat.push(t.elapsed());
                        }
                        Ok((start, Instant::now(), lat))
                    })
                })
                .collect();
            barrier.wait();
            // The wall time runs from the first thread's start to the last one's end (the
            // main thread may not be scheduled again before the workers finish).
            let mut first: Option<Instant> = None;
            let mut last: Option<Instant> = None;
            let mut all = Vec::new();
            for h in handles {
                let (start, end, lat) = h.join().map_err(|_| "an appender thread panicked")??;
                first = Some(first.map_or(start, |f| f.min(start)));
                last = Some(last.map_or(end, |l| l.max(end)));
                all.extend(lat);
            }
            let seconds = match (first, last) {
                (Some(f), Some(l)) => l.duration_since(f).as_secs_f64(),
                _ => 0.0,
            };
            Ok((seconds.max(1e-9), all))
        })?;
        writer.close()?;
        (seconds, lat)
    };
    latencies.sort_unstable();
    Ok(AppendRow {
        peer: peer.name().into(),
        sessions,
        mode: mode.name(),
        batch,
        durable: peer.durable(),
        events,
        json_bytes,
        writes,
        seconds,
        events_per_sec: events as f64 / seconds,
        mb_per_sec: json_bytes as f64 / seconds / 1e6,
        p50_us: percentile(&latencies, 0.5),
        p99_us: percentile(&latencies, 0.99),
        runs: 1,
        events_per_sec_min: events as f64 / seconds,
        events_per_sec_max: events as f64 / seconds,
    })
}

/// The raw disk: the groups' JSON bytes, serialised beforehand, written sequentially to one
/// file with an fdatasync per write. With several sessions, round `r` writes group `r` of
/// every session in one write + one sync: perfect coalescing, the ceiling of group commit.
fn run_raw(workload: &[Vec<Vec<Event>>], dir: &Path) -> BenchResult<(f64, Vec<Duration>)> {
    let rounds = workload.iter().map(Vec::len).max().unwrap_or(0);
    let mut writes: Vec<Vec<u8>> = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let mut bytes = Vec::new();
        for s in workload {
            if let Some(g) = s.get(r) {
                bytes.extend_from_slice(&group_bytes(g));
            }
        }
        writes.push(bytes);
    }
    let raw = RawWriter::open(dir)?;
    let mut lat = Vec::with_capacity(writes.len());
    let start = Instant::now();
    for w in &writes {
        let t = Instant::now();
        raw.write_bytes(w)?;
        lat.push(t.elapsed());
    }
    Ok((start.elapsed().as_secs_f64(), lat))
}

// ---------------------------------------------------------------------------------------------
// resume, read, disk
// ---------------------------------------------------------------------------------------------

/// Writes generated session 0 of `turns` turns into a store of `peer` in `dir`: sessionlog one
/// frame per flush group (the frames the flush-point workload makes, written without the syncs
/// to save time), the others in large transactions (their layout does not depend on the
/// transaction size). Returns (events, JSON bytes).
fn build_dataset(
    peer: PeerKind,
    dir: &Path,
    config: &WorkloadConfig,
    turns: u64,
) -> BenchResult<(u64, u64)> {
    std::fs::create_dir_all(dir)?;
    let c = WorkloadConfig {
        turns,
        ..config.clone()
    };
    let writer: Box<dyn Writer> = match peer {
        PeerKind::Sessionlog => Box::new(SessionlogWriter::open_with(
            dir,
            Config::default(),
            SessionlogStyle::FramesNoSync,
        )?),
        PeerKind::SqliteFull | PeerKind::SqliteNormal => {
            Box::new(peers::SqliteWriter::open(dir, false)?)
        }
        other => peers::open_writer(other, dir, Mode::Batch(1024))?,
    };
    writer.create(0, &session_header(0))?;
    let (mut events, mut bytes) = (0u64, 0u64);
    let mut pending: Vec<Event> = Vec::new();
    for FlushGroup { events: g } in SessionGenerator::new(&c, 0) {
        events += g.len() as u64;
        bytes += g.iter().map(|e| event_json(e).len() as u64).sum::<u64>();
        if peer == PeerKind::Sessionlog {
            writer.write(0, g)?;
        } else {
            pending.extend(g);
            if pending.len() >= 1024 {
                writer.write(0, std::mem::take(&mut pending))?;
            }
        }
    }
    if !pending.is_empty() {
        writer.write(0, pending)?;
    }
    writer.close()?;
    Ok((events, bytes))
}

/// What the probe child prints.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ProbeOutput {
    ms: f64,
    rss_kb: u64,
    loaded: Loaded,
}

fn probe(peer: &str, dir: Option<&Path>) -> BenchResult<()> {
    let dir = dir.ok_or("--probe needs --probe-dir")?;
    let start = Instant::now();
    // sessionlog's resume hands its store back open: the clock stops before it is closed.
    let mut open_store = None;
    let loaded = if peer == SESSIONLOG_READ_ONLY || peer == PeerKind::Sessionlog.name() {
        let (loaded, store) =
            peers::resume_sessionlog(dir, &session_id(0), peer == SESSIONLOG_READ_ONLY)?;
        open_store = Some(store);
        loaded
    } else if peer == SESSIONLOG_FULL_READ {
        peers::full_read_sessionlog(dir, &session_id(0))?
    } else {
        let peer = PeerKind::from_name(peer).ok_or_else(|| format!("unknown peer {peer}"))?;
        peers::resume(peer, dir, &session_id(0), 0)?
    };
    let ms = start.elapsed().as_secs_f64() * 1e3;
    drop(open_store);
    let out = ProbeOutput {
        ms,
        rss_kb: report::peak_rss_kb(),
        loaded,
    };
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

/// The probe name of sessionlog's resume with a read-only open.
pub(crate) const SESSIONLOG_READ_ONLY: &str = "sessionlog-read-only";
/// The probe name of sessionlog read whole and folded like the peers (no surface index).
pub(crate) const SESSIONLOG_FULL_READ: &str = "sessionlog-full-read";

fn run_probe(peer: &str, dir: &Path) -> BenchResult<ProbeOutput> {
    let exe = std::env::current_exe()?;
    let out = std::process::Command::new(exe)
        .args(["bench", "--probe", peer, "--probe-dir"])
        .arg(dir)
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "resume probe of {peer} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

type ResumeSection = (Vec<ResumeRow>, Vec<ReadRow>, Vec<DiskRow>);

fn resume_section(ctx: &mut Ctx<'_>) -> BenchResult<ResumeSection> {
    eprintln!("resume, full read and bytes on disk");
    let sizes: &[u64] = if ctx.args.quick {
        &[10_000]
    } else {
        &[10_000, 100_000, 1_000_000]
    };
    let (mut resume, mut read, mut disk) = (Vec::new(), Vec::new(), Vec::new());
    for (k, &target) in sizes.iter().enumerate() {
        let turns = ctx.config.turns_for_events(target);
        let largest = k + 1 == sizes.len();
        let mut loads = Vec::new();
        for peer in ctx.peers(&PeerKind::READERS) {
            let dir = ctx.base.join(format!("resume-{}-{target}", peer.name()));
            let t = Instant::now();
            let (events, json_bytes) = build_dataset(peer, &dir, &ctx.config, turns)?;
            progress(format!(
                "{:<18} built {events} events in {:.1}s",
                peer.name(),
                t.elapsed().as_secs_f64()
            ));
            let runs = if target >= 1_000_000 { 2 } else { 3 };
            let probes: Vec<&str> = if peer == PeerKind::Sessionlog {
                vec![peer.name(), SESSIONLOG_READ_ONLY, SESSIONLOG_FULL_READ]
            } else {
                vec![peer.name()]
            };
            let mut loaded = None;
            for name in probes {
                let mut ms = Vec::new();
                let mut rss = 0u64;
                for _ in 0..runs {
                    let p = run_probe(name, &dir)?;
                    ms.push(p.ms);
                    rss = rss.max(p.rss_kb);
                    if p.loaded.events != events {
                        return Err(format!(
                            "{name} resumed {} of {events} events",
                            p.loaded.events
                        )
                        .into());
                    }
                    loaded = Some(p.loaded);
                }
                let l = loaded.ok_or("no probe run")?;
                ms.sort_by(f64::total_cmp);
                let row = ResumeRow {
                    peer: name.into(),
                    kind: match name {
                        SESSIONLOG_READ_ONLY => {
                            format!("{}, read-only open", peers::SESSIONLOG_RESUME_KIND)
                        }
                        SESSIONLOG_FULL_READ => {
                            "read all + fold (no surface index), read-only open".into()
                        }
                        _ if peer == PeerKind::Sessionlog => {
                            format!("{}, writable open", peers::SESSIONLOG_RESUME_KIND)
                        }
                        _ => "read all + parse + fold".into(),
                    },
                    events,
                    ms: ms[ms.len() / 2],
                    rss_mb: rss as f64 / 1024.0,
                    surface: l.surface,
                    messages: l.messages,
                };
                progress(format!(
                    "{:<20} resume {events} events: {:.1} ms, peak RSS {:.1} MB, surface {} nodes, {} messages",
                    row.peer, row.ms, row.rss_mb, row.surface, row.messages
                ));
                resume.push(row);
            }
            let loaded = loaded.ok_or("no probe run")?;
            loads.push(loaded);
            if largest {
                let bytes = dir_bytes(&dir);
                let detail = if peer == PeerKind::Sessionlog {
                    let log = dir_bytes(&dir.join(sessionlog::log::segment::SEGMENTS_DIR));
                    let index = std::fs::metadata(dir.join(INDEX_FILE)).map_or(0, |m| m.len());
                    format!(
                        "log {:.0} + index.redb {:.0} bytes/event",
                        log as f64 / events as f64,
                        index as f64 / events as f64
                    )
                } else {
                    String::new()
                };
                disk.push(DiskRow {
                    peer: peer.name().into(),
                    events,
                    bytes,
                    bytes_per_event: bytes as f64 / events as f64,
                    json_bytes_per_event: json_bytes as f64 / events as f64,
                    detail,
                });
                let t = Instant::now();
                let n = peers::read_all(peer, &dir, &session_id(0), 0)?;
                let seconds = t.elapsed().as_secs_f64();
                progress(format!(
                    "{:<18} full read {n} events: {:.0} events/s",
                    peer.name(),
                    n as f64 / seconds
                ));
                read.push(ReadRow {
                    peer: peer.name().into(),
                    events: n,
                    seconds,
                    events_per_sec: n as f64 / seconds,
                });
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
        if loads.windows(2).any(|w| w[0] != w[1]) {
            return Err(format!("the peers disagree on the resumed session: {loads:?}").into());
        }
    }
    ctx.notes.push(
        "resume: `sessionlog` is the session layer's resume (writable open, `Store::resume`, surface and derived messages; only the surface's frames are read); `sessionlog-read-only` the same through a read-only open and a session handle; `sessionlog-full-read` reads every event and folds like the peers".into(),
    );
    ctx.notes.push(
        "resume runs in a child process per measurement (warm page cache); RSS is the child's peak (VmHWM)".into(),
    );
    Ok((resume, read, disk))
}

// ---------------------------------------------------------------------------------------------
// reopen
// ---------------------------------------------------------------------------------------------

/// What the fill child prints.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct FillOutput {
    events: u64,
    log_bytes: u64,
}

/// The fill child: writes `mb` MB of log (8 sessions, one frame per turn) into a store that
/// never checkpoints its index, flushes, and exits without closing the store, as a crash would.
fn probe_fill(mb: u64, dir: Option<&Path>, args: &BenchArgs) -> BenchResult<()> {
    let dir = dir.ok_or("--probe-fill needs --probe-dir")?;
    let config = Config::default().checkpoint_bytes(1 << 62);
    let writer = SessionlogWriter::open_with(dir, config, SessionlogStyle::FramesNoSync)?;
    let workload = WorkloadConfig {
        turns: u64::MAX,
        seed: args.seed,
        compaction_every: args.compaction_every,
        ..WorkloadConfig::default()
    };
    let sessions = 8u64;
    let mut gens = Vec::new();
    for i in 0..sessions {
        writer.create(i as usize, &session_header(i))?;
        gens.push(SessionGenerator::new(&workload, i));
    }
    let segments = dir.join(sessionlog::log::segment::SEGMENTS_DIR);
    let mut events = 0u64;
    while dir_bytes(&segments) < mb << 20 {
        for (i, g) in gens.iter_mut().enumerate() {
            let mut turn = Vec::new();
            for _ in 0..4 {
                turn.extend(g.next().ok_or("generator ended")?.events);
            }
            events += turn.len() as u64;
            writer.write(i, turn)?;
        }
    }
    let store = writer.into_store();
    store.flush()?;
    let out = FillOutput {
        events,
        log_bytes: dir_bytes(&segments),
    };
    println!("{}", serde_json::to_string(&out)?);
    std::io::stdout().flush()?;
    // A crash: no destructor runs, so the index gets no final commit and the process's
    // non-durable index commits are lost with it.
    std::process::exit(0)
}

fn reopen_section(ctx: &mut Ctx<'_>) -> BenchResult<Vec<ReopenRow>> {
    eprintln!("reopen after a crash and index rebuild (sessionlog)");
    let sizes_mb: &[u64] = if ctx.args.quick {
        &[1, 3]
    } else {
        &[8, 32, 128]
    };
    let mut rows = Vec::new();
    for &mb in sizes_mb {
        let dir = ctx.base.join(format!("reopen-{mb}"));
        let exe = std::env::current_exe()?;
        let out = std::process::Command::new(exe)
            .args([
                "bench",
                "--probe-fill",
                &mb.to_string(),
                "--seed",
                &ctx.config.seed.to_string(),
            ])
            .args([
                "--compaction-every",
                &ctx.config.compaction_every.to_string(),
                "--probe-dir",
            ])
            .arg(&dir)
            .output()?;
        if !out.status.success() {
            return Err(format!(
                "the fill child failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .into());
        }
        let fill: FillOutput = serde_json::from_slice(&out.stdout)?;

        let t = Instant::now();
        let store = Store::open(&dir, Config::default())?;
        let crash_ms = t.elapsed().as_secs_f64() * 1e3;
        let report = store.recovery_report().clone();
        store.close()?;

        let t = Instant::now();
        let store = Store::open(&dir, Config::default())?;
        let clean_ms = t.elapsed().as_secs_f64() * 1e3;
        store.close()?;

        std::fs::remove_file(dir.join(INDEX_FILE))?;
        let t = Instant::now();
        let store = Store::open(&dir, Config::default())?;
        let rebuild_ms = t.elapsed().as_secs_f64() * 1e3;
        let total: u64 = (0..8).map(|i| store.len(&session_id(i)).unwrap_or(0)).sum();
        store.close()?;
        if total != fill.events {
            return Err(format!(
                "after the rebuild the store holds {total} of {} events",
                fill.events
            )
            .into());
        }
        let row = ReopenRow {
            log_bytes: fill.log_bytes,
            events: fill.events,
            clean_ms,
            crash_ms,
            frames_scanned: report.frames_scanned,
            events_recovered: report.events_recovered,
            rebuild_ms,
        };
        progress(format!(
            "log {:.1} MB ({} events): clean open {clean_ms:.1} ms, after crash {crash_ms:.1} ms ({} frames / {} events scanned), rebuild {rebuild_ms:.1} ms",
            fill.log_bytes as f64 / 1e6,
            fill.events,
            row.frames_scanned,
            row.events_recovered
        ));
        rows.push(row);
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(rows)
}

// ---------------------------------------------------------------------------------------------
// replay of the fixtures
// ---------------------------------------------------------------------------------------------

fn fixtures_dir() -> PathBuf {
    // This crate sits in `bench/`: the fixtures are beside the repository, two levels up.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/dsh-sessions")
}

fn replay_section(ctx: &mut Ctx<'_>) -> BenchResult<Vec<ReplayRow>> {
    eprintln!("replay of the real dsh logs");
    let dir = fixtures_dir();
    let Some(fixtures) = load_fixture_sessions(&dir)? else {
        let note = format!("replay skipped: {} not found", dir.display());
        eprintln!("  {note}");
        ctx.notes.push(note);
        return Ok(Vec::new());
    };
    // Keep the sessions sessionlog accepts (the others are dsh logs its loader refuses too,
    // or legacy shapes this reader does not convert).
    let check_dir = ctx.base.join("replay-check");
    let store = Store::open(
        &check_dir,
        Config::default().durability(Durability::Buffered),
    )?;
    let mut sessions: Vec<(SessionHeader, Vec<Vec<Event>>)> = Vec::new();
    let mut refused: Vec<(String, String)> = Vec::new();
    for f in fixtures {
        let mut header = f.header.clone();
        header.id = f.name.trim_end_matches(".jsonl").to_owned();
        header.cwd = Some("/home/agent/project".into());
        let result = store
            .create_session(header.clone())
            .map_err(|e| e.to_string())
            .and_then(|_| {
                store
                    .append_batch(&header.id, f.events.clone())
                    .map_err(|e| e.to_string())
            });
        match result {
            Ok(_) if !f.events.is_empty() => {
                let groups = flush_groups(f.events)
                    .into_iter()
                    .map(|g| g.events)
                    .collect();
                sessions.push((header, groups));
            }
            Ok(_) => {}
            Err(e) => {
                // The reason without the session name, so equal reasons group.
                let reason = e.rsplit("refused: ").next().unwrap_or(&e).to_owned();
                refused.push((f.name, reason));
            }
        }
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&check_dir);
    if !refused.is_empty() {
        let mut reasons: Vec<(String, usize)> = Vec::new();
        for (_, reason) in &refused {
            match reasons.iter_mut().find(|(r, _)| r == reason) {
                Some((_, n)) => *n += 1,
                None => reasons.push((reason.clone(), 1)),
            }
        }
        let reasons: Vec<String> = reasons
            .into_iter()
            .map(|(r, n)| format!("{n} x \"{r}\""))
            .collect();
        ctx.notes.push(format!(
            "replay: {} of the fixture logs are not replayed: live `append` refused an event ({}); legacy record shapes that dsh converts on read, or logs it refuses to load; the replay feeds events through live append, not the import path",
            refused.len(),
            reasons.join("; ")
        ));
    }
    if ctx.args.quick {
        sessions.truncate(20);
        ctx.notes
            .push("--quick: replay of the first 20 fixture logs only".into());
    }
    let mut rows = Vec::new();
    for peer in ctx.peers(&PeerKind::ALL) {
        let dir = ctx.base.join(format!("replay-{}", peer.name()));
        let writer: Box<dyn Writer> = if peer == PeerKind::Sessionlog {
            Box::new(SessionlogWriter::open_with(
                &dir,
                Config::default().invariants(sessionlog::session::InvariantMode::Off),
                SessionlogStyle::BufferedFlush,
            )?)
        } else {
            peers::open_writer(peer, &dir, Mode::FlushPoints)?
        };
        let mut events = 0u64;
        let mut writes = 0u64;
        let start = Instant::now();
        for (i, (header, groups)) in sessions.iter().enumerate() {
            writer.create(i, header)?;
            for g in groups {
                events += g.len() as u64;
                writes += 1;
                writer.write(i, g.clone())?;
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        writer.close()?;
        let bytes = dir_bytes(&dir);
        let row = ReplayRow {
            peer: peer.name().into(),
            sessions: sessions.len(),
            events,
            writes,
            seconds,
            events_per_sec: events as f64 / seconds,
            bytes_per_event: bytes as f64 / events.max(1) as f64,
        };
        progress(format!(
            "{:<18} {} sessions, {events} events, {writes} flushes: {:.0} events/s, {:.0} bytes/event on disk",
            row.peer, row.sessions, row.events_per_sec, row.bytes_per_event
        ));
        rows.push(row);
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(rows)
}
