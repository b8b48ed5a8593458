//! The resume section: resume, full read and bytes on disk per event.

#[allow(unused_imports)]
use super::*;

/// Writes generated session 0 of `turns` turns into a store of `peer` in `dir`: sessionlog and
/// dsh's zstd JSONL one frame per flush group (the frames the flush-point workload makes,
/// written without the syncs to save time), the others in transactions of whole flush groups
/// of at least 1024 events (their layout does not depend on the transaction size: chunk runs
/// never cross a flush point). Returns (events, JSON bytes).
pub(crate) fn build_dataset(
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
        PeerKind::DshSqlite18 => Box::new(crate::faithful::Sqlite18Writer::open(dir, false)?),
        PeerKind::DshJsonlZstd => Box::new(crate::faithful::DshJsonlWriter::open(dir, false)),
        other => peers::open_writer(other, dir, Mode::Batch(1024))?,
    };
    writer.create(0, &session_header(0))?;
    let (mut events, mut bytes) = (0u64, 0u64);
    let mut pending: Vec<Event> = Vec::new();
    for FlushGroup { events: g } in SessionGenerator::new(&c, 0) {
        events += g.len() as u64;
        bytes += g.iter().map(|e| event_json(e).len() as u64).sum::<u64>();
        if matches!(peer, PeerKind::Sessionlog | PeerKind::DshJsonlZstd) {
            // One frame per flush group, as each writes at dsh's flush points.
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
pub(crate) struct ProbeOutput {
    pub(crate) ms: f64,
    pub(crate) rss_kb: u64,
    pub(crate) loaded: Loaded,
}

pub(crate) fn probe(peer: &str, dir: Option<&Path>, id: Option<&str>) -> BenchResult<()> {
    let dir = dir.ok_or("--probe needs --probe-dir")?;
    let id = id.map_or_else(|| session_id(0), str::to_owned);
    let start = Instant::now();
    // sessionlog's resume hands its store back open: the clock stops before it is closed.
    let mut open_store = None;
    let loaded = if peer == SESSIONLOG_READ_ONLY || peer == PeerKind::Sessionlog.name() {
        let (loaded, store) = peers::resume_sessionlog(dir, &id, peer == SESSIONLOG_READ_ONLY)?;
        open_store = Some(store);
        loaded
    } else if peer == SESSIONLOG_FULL_READ {
        peers::full_read_sessionlog(dir, &id)?
    } else {
        let peer = PeerKind::from_name(peer).ok_or_else(|| format!("unknown peer {peer}"))?;
        peers::resume(peer, dir, &id, 0)?
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

pub(crate) fn run_probe(peer: &str, dir: &Path) -> BenchResult<ProbeOutput> {
    run_probe_of(peer, dir, None)
}

/// [`run_probe`] of session `id` (default: generated session 0).
pub(crate) fn run_probe_of(peer: &str, dir: &Path, id: Option<&str>) -> BenchResult<ProbeOutput> {
    let exe = std::env::current_exe()?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["bench", "--probe", peer, "--probe-dir"]).arg(dir);
    if let Some(id) = id {
        cmd.args(["--probe-session", id]);
    }
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(format!(
            "resume probe of {peer} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

pub(crate) type ResumeSection = (Vec<ResumeRow>, Vec<ReadRow>, Vec<DiskRow>);

pub(crate) fn resume_section(ctx: &mut Ctx<'_>) -> BenchResult<ResumeSection> {
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
