//! The reopen section: sessionlog's open after a crash, and a full index rebuild.

#[allow(unused_imports)]
use super::*;

/// What the fill child prints.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct FillOutput {
    events: u64,
    log_bytes: u64,
}

/// The fill child: writes `mb` MB of log (8 sessions, one frame per turn) into a store that
/// never checkpoints its index, flushes, and exits without closing the store, as a crash would.
pub(crate) fn probe_fill(mb: u64, dir: Option<&Path>, args: &BenchArgs) -> BenchResult<()> {
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

pub(crate) fn reopen_section(ctx: &mut Ctx<'_>) -> BenchResult<Vec<ReopenRow>> {
    eprintln!("reopen after a crash and index rebuild (sessionlog)");
    let sizes_mb: &[u64] = if ctx.args.quick {
        &[1, 3]
    } else {
        &[8, 32, 128]
    };
    let mut rows = Vec::new();
    for &mb in sizes_mb {
        let dir = ctx.base.join(format!("reopen-{mb}"));
        // What earlier sections left unwritten goes to disk first, so that the reopen's sync
        // writes the crashed writer's unsynced tail alone, as after a real crash (best effort:
        // without `sync(1)` the figures only get noisier).
        let _ = std::process::Command::new("sync").status();
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
        let t = Instant::now();
        let failures = store.catch_up()?;
        let catch_up_ms = t.elapsed().as_secs_f64() * 1e3;
        if !failures.is_empty() {
            return Err(format!("the catch-up after the crash failed: {failures:?}").into());
        }
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
            catch_up_ms,
            frames_scanned: report.frames_scanned,
            events_recovered: report.events_recovered,
            rebuild_ms,
        };
        progress(format!(
            "log {:.1} MB ({} events): clean open {clean_ms:.1} ms, after crash {crash_ms:.1} ms ({} frames / {} events scanned), catch-up {catch_up_ms:.1} ms, rebuild {rebuild_ms:.1} ms",
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
