//! The append section (throughput and latency of every peer) and the paired single-append latency.

#[allow(unused_imports)]
use super::*;

/// (sessions, mode, events per session) of the append runs; flush-point runs are sized in
/// turns (events per session = turns * 58, plus the title).
pub(crate) fn append_plan(quick: bool) -> Vec<(usize, Mode, u64)> {
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
pub(crate) fn groups_for(
    config: &WorkloadConfig,
    index: u64,
    mode: Mode,
    size: u64,
) -> Vec<Vec<Event>> {
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

pub(crate) fn append_section(ctx: &mut Ctx<'_>) -> BenchResult<Vec<AppendRow>> {
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
                let mut row = run_append(peer, mode, &workload, &dir)?;
                row.bytes_per_event = dir_bytes(&dir) as f64 / row.events.max(1) as f64;
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

pub(crate) fn latency_section(ctx: &mut Ctx<'_>) -> BenchResult<Vec<LatencyRow>> {
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

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e6
}

/// Appends `workload` (per session, its groups) to a fresh store of `peer` in `dir`: one
/// thread per session, all started together; every group is made durable before the next.
pub(crate) fn run_append(
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
    let (seconds, mut latencies, cpu) = if peer == PeerKind::RawDisk {
        let cpu_before = report::own_cpu_seconds();
        let (seconds, lat) = run_raw(workload, dir)?;
        (seconds, lat, report::own_cpu_seconds().zip(cpu_before))
    } else {
        let writer = peers::open_writer(peer, dir, mode)?;
        for i in 0..sessions {
            writer.create(i, &session_header(i as u64))?;
        }
        let copies: Vec<Vec<Vec<Event>>> = workload.to_vec();
        let barrier = Barrier::new(sessions + 1);
        let w: &dyn Writer = writer.as_ref();
        let mut cpu_before = None;
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
            cpu_before = report::own_cpu_seconds();
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
        let cpu = report::own_cpu_seconds().zip(cpu_before);
        writer.close()?;
        (seconds, lat, cpu)
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
        bytes_per_event: 0.0,
        events_per_sec_min: events as f64 / seconds,
        events_per_sec_max: events as f64 / seconds,
        cpu_us_per_event: cpu.map(|((user, sys), (user0, sys0))| {
            (user - user0 + sys - sys0) * 1e6 / events.max(1) as f64
        }),
    })
}

/// The raw disk: the groups' JSON bytes, serialised beforehand, written sequentially to one
/// file with an fdatasync per write. With several sessions, round `r` writes group `r` of
/// every session in one write + one sync: perfect coalescing, the ceiling of group commit.
pub(crate) fn run_raw(
    workload: &[Vec<Vec<Event>>],
    dir: &Path,
) -> BenchResult<(f64, Vec<Duration>)> {
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
