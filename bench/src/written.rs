//! Resume of sessions however they were written (issue 16): live appends at dsh's flush
//! points, `import` (one operation, large frames), big `append_batch`es (256 and 1024 events
//! per frame), a fork (the child's events are its parent's frames), and a session of big
//! user messages (~100 KB each) written by import. Each is resumed by sessionlog (writable
//! open, `Store::resume`, surface, messages), read once whole and folded (the floor a resume
//! must beat), and loaded the way dsh loads its own zstd JSONL file of the same events (the
//! `dsh-jsonl-zstd` peer). Child processes, median of 3.

#[allow(unused_imports)]
use super::*;
use crate::faithful::DshJsonlWriter;
use crate::resume::{SESSIONLOG_FULL_READ, run_probe_of};

/// One session, resumed three ways.
#[derive(Debug, Clone, Serialize)]
pub struct WrittenRow {
    /// How the session was written.
    pub written: String,
    /// Events in the session.
    pub events: u64,
    /// Bytes of event JSON.
    pub json_bytes: u64,
    /// Surface nodes.
    pub surface: usize,
    /// Derived messages.
    pub messages: usize,
    /// sessionlog's resume (writable open), ms.
    pub resume_ms: f64,
    /// Peak RSS of the resume, MB.
    pub resume_rss_mb: f64,
    /// Every event read once (read-only open) and folded, ms.
    pub read_once_ms: f64,
    /// dsh's load of its zstd JSONL file of the same events, ms.
    pub dsh_ms: f64,
}

/// The generated session (flush groups) a dataset is made of.
fn groups(config: &WorkloadConfig, turns: u64) -> Vec<Vec<Event>> {
    let c = WorkloadConfig {
        turns,
        ..config.clone()
    };
    SessionGenerator::new(&c, 0).map(|g| g.events).collect()
}

/// The big-message workload: 100 KB user messages, small tool results, two chunks per turn,
/// no compaction (about 100 KB of JSON per turn).
fn big_config(config: &WorkloadConfig) -> WorkloadConfig {
    WorkloadConfig {
        chunks_per_turn: 2,
        user_bytes: (100_000, 100_000),
        tool_result_bytes: (200, 400),
        large_result_every: 0,
        compaction_every: 0,
        ..config.clone()
    }
}

/// How a dataset is written.
#[derive(Debug, Clone, Copy, PartialEq)]
enum How {
    FlushPoints,
    Import,
    Batch(usize),
    Fork,
}

const FORK_CHILD: &str = "bench-fork-child";

/// Writes the dataset into a sessionlog store in `dir`; returns the session to resume.
fn build(how: How, dir: &Path, groups: &[Vec<Event>]) -> BenchResult<String> {
    let style = match how {
        How::Import => SessionlogStyle::Staged,
        _ => SessionlogStyle::FramesNoSync,
    };
    let writer = SessionlogWriter::open_with(dir, Config::default(), style)?;
    let id = session_id(0);
    match how {
        How::Import => {
            let events: Vec<Event> = groups.iter().flatten().cloned().collect();
            writer
                .store()
                .import_session(session_header(0), events, None)?;
        }
        How::Batch(n) => {
            writer.create(0, &session_header(0))?;
            let events: Vec<Event> = groups.iter().flatten().cloned().collect();
            for chunk in events.chunks(n) {
                writer.write(0, chunk.to_vec())?;
            }
        }
        How::FlushPoints | How::Fork => {
            writer.create(0, &session_header(0))?;
            for g in groups {
                writer.write(0, g.clone())?;
            }
        }
    }
    let resumed = if how == How::Fork {
        writer.store().fork(&id, None, Some(FORK_CHILD))?;
        FORK_CHILD.to_owned()
    } else {
        id
    };
    Box::new(writer).close()?;
    Ok(resumed)
}

fn median_probe(name: &str, dir: &Path, id: &str) -> BenchResult<(f64, f64, Loaded)> {
    let mut ms = Vec::new();
    let mut rss = 0u64;
    let mut loaded = None;
    for _ in 0..3 {
        let p = run_probe_of(name, dir, Some(id))?;
        ms.push(p.ms);
        rss = rss.max(p.rss_kb);
        loaded = Some(p.loaded);
    }
    ms.sort_by(f64::total_cmp);
    Ok((ms[1], rss as f64 / 1024.0, loaded.ok_or("no probe run")?))
}

/// The section: one row per way of writing.
pub(crate) fn written_section(ctx: &mut Ctx<'_>) -> BenchResult<Vec<WrittenRow>> {
    let (events, big_turns) = if ctx.args.quick {
        (5_000, 10)
    } else {
        (100_000, 200)
    };
    eprintln!("resume of sessions however written (import, big batches, fork, big messages)");
    let turns = ctx.config.turns_for_events(events);
    let normal = groups(&ctx.config, turns);
    let big = groups(&big_config(&ctx.config), big_turns);
    let cases: Vec<(String, How, &[Vec<Event>])> = vec![
        (
            "live appends at flush points".into(),
            How::FlushPoints,
            &normal,
        ),
        ("import (one operation)".into(), How::Import, &normal),
        ("append_batch of 256".into(), How::Batch(256), &normal),
        ("append_batch of 1024".into(), How::Batch(1024), &normal),
        ("fork of a flush-point session".into(), How::Fork, &normal),
        (
            format!("{big_turns} turns of 100 KB user messages, import"),
            How::Import,
            &big,
        ),
    ];
    let mut rows = Vec::new();
    for (k, (name, how, groups)) in cases.into_iter().enumerate() {
        let dir = ctx.base.join(format!("written-{k}"));
        let dsh_dir = ctx.base.join(format!("written-{k}-dsh"));
        let t = Instant::now();
        let id = build(how, &dir, groups)?;
        // dsh's file of the same events, one zstd frame per flush group as dsh writes them.
        std::fs::create_dir_all(&dsh_dir)?;
        let dsh = DshJsonlWriter::open(&dsh_dir, false);
        let mut header = session_header(0);
        header.id.clone_from(&id);
        dsh.create(0, &header)?;
        for g in groups {
            dsh.write(0, g.clone())?;
        }
        let built = t.elapsed().as_secs_f64();
        let (resume_ms, resume_rss_mb, resumed) =
            median_probe(PeerKind::Sessionlog.name(), &dir, &id)?;
        let (read_once_ms, _, read) = median_probe(SESSIONLOG_FULL_READ, &dir, &id)?;
        let (dsh_ms, _, dsh_loaded) = median_probe(PeerKind::DshJsonlZstd.name(), &dsh_dir, &id)?;
        if (resumed.surface, resumed.messages) != (read.surface, read.messages) {
            return Err(format!(
                "{name}: the resume and the full read disagree: {resumed:?} / {read:?}"
            )
            .into());
        }
        if (dsh_loaded.surface, dsh_loaded.messages) != (read.surface, read.messages) {
            ctx.notes.push(format!(
                "resume, {name}: dsh's load found {} surface nodes / {} messages, sessionlog {} / {}",
                dsh_loaded.surface, dsh_loaded.messages, read.surface, read.messages
            ));
        }
        let row = WrittenRow {
            written: name,
            events: read.events,
            json_bytes: groups
                .iter()
                .flatten()
                .map(|e| event_json(e).len() as u64)
                .sum(),
            surface: read.surface,
            messages: read.messages,
            resume_ms,
            resume_rss_mb,
            read_once_ms,
            dsh_ms,
        };
        progress(format!(
            "{:<40} {} events ({:.1} MB, built in {built:.1}s): resume {:.1} ms, read once {:.1} ms, dsh {:.1} ms",
            row.written,
            row.events,
            row.json_bytes as f64 / 1e6,
            row.resume_ms,
            row.read_once_ms,
            row.dsh_ms
        ));
        rows.push(row);
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&dsh_dir);
    }
    Ok(rows)
}

/// The section's table.
pub(crate) fn markdown(r: &Results, s: &mut String) {
    use std::fmt::Write as _;
    if r.written.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "### Resume of sessions however written (child process, median of 3)\n\n`resume` = sessionlog's resume (writable open, `Store::resume`, surface, messages); `read once` = a read-only open, every event read and folded; `dsh` = dsh's load of its own zstd JSONL file of the same events (decompress, parse every line, expand packed rows, fold).\n\n| written by | events | MB of JSON | surface | resume ms | read once ms | dsh ms | resume / read once | dsh / resume |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for x in &r.written {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {} | {:.1} | {:.1} | {:.1} | {:.2}x | {:.1}x |",
            x.written,
            x.events,
            x.json_bytes as f64 / 1e6,
            x.surface,
            x.resume_ms,
            x.read_once_ms,
            x.dsh_ms,
            x.resume_ms / x.read_once_ms,
            x.dsh_ms / x.resume_ms
        );
    }
    s.push('\n');
}

/// Issue 16's resume goal, per way of writing.
pub(crate) fn targets(r: &Results, out: &mut Vec<TargetRow>) {
    for x in &r.written {
        out.push(TargetRow {
            name: format!("resume, {}", x.written),
            target: "no slower than reading the events once; >= 10x ahead of dsh's load".into(),
            measured: format!(
                "{:.1} ms vs {:.1} ms read once ({:.2}x), dsh {:.1} ms ({:.1}x)",
                x.resume_ms,
                x.read_once_ms,
                x.resume_ms / x.read_once_ms,
                x.dsh_ms,
                x.dsh_ms / x.resume_ms
            ),
            met: Some(x.resume_ms <= x.read_once_ms && x.dsh_ms >= 10.0 * x.resume_ms),
        });
    }
}
