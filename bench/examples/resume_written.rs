//! Resume of one imported session, timed in-process (a quick loop for engine work on the
//! resume path; the bench's `resume` section measures the same in child processes).
//!
//! ```text
//! cargo run --release -p sessionlog-bench --example resume_written -- build DIR big|import
//! cargo run --release -p sessionlog-bench --example resume_written -- time DIR [RUNS]
//! ```
//!
//! `big`: 200 turns of 100 KB user messages written by one `import` (the bench's
//! big-message row); `import`: ~100k events of the dsh workload written by one `import`.
//! `time` prints the resume (writable open, `Store::resume`, surface, messages) and the read
//! once (read-only open, every event read and folded), median of RUNS (default 5). `open
//! DIR [RUNS]` times a writable open of a copy of DIR (a crashed store, e.g. made by
//! `sessionlog bench --probe-fill MB --probe-dir DIR`), a fresh copy each run.

use std::path::Path;
use std::time::Instant;

use sessionlog::event::Event;
use sessionlog::store::{Config, Store};
use sessionlog_bench::readers::{full_read_sessionlog, resume_sessionlog};
use sessionlog_bench::workload::{SessionGenerator, WorkloadConfig, session_header, session_id};

type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn build(dir: &Path, kind: &str) -> R<()> {
    let base = WorkloadConfig::default();
    let config = match kind {
        "big" => WorkloadConfig {
            turns: 200,
            chunks_per_turn: 2,
            user_bytes: (100_000, 100_000),
            tool_result_bytes: (200, 400),
            large_result_every: 0,
            compaction_every: 0,
            ..base
        },
        "import" => WorkloadConfig {
            turns: base.turns_for_events(100_000),
            ..base
        },
        other => return Err(format!("unknown dataset {other}").into()),
    };
    let events: Vec<Event> = SessionGenerator::new(&config, 0)
        .flat_map(|g| g.events)
        .collect();
    let store = Store::open(dir, Config::default())?;
    store.import_session(session_header(0), events, None)?;
    store.close()?;
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time(dir: &Path, runs: usize) -> R<()> {
    let id = session_id(0);
    let (mut resume, mut read) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        let (loaded, store) = resume_sessionlog(dir, &id, false)?;
        resume.push(t.elapsed().as_secs_f64() * 1e3);
        drop(store);
        let t = Instant::now();
        let full = full_read_sessionlog(dir, &id)?;
        read.push(t.elapsed().as_secs_f64() * 1e3);
        if (loaded.surface, loaded.messages) != (full.surface, full.messages) {
            return Err(format!("resume {loaded:?} and read {full:?} disagree").into());
        }
    }
    let mut opens = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let store = Store::open(dir, Config::default())?;
        opens.push(t.elapsed().as_secs_f64() * 1e3);
        drop(store);
    }
    println!(
        "resume {:.1} ms (of which a writable open alone: {:.1} ms), read once {:.1} ms (median of {runs})",
        median(resume),
        median(opens),
        median(read)
    );
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> R<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

fn open(dir: &Path, runs: usize) -> R<()> {
    let mut ms = Vec::new();
    for i in 0..runs {
        let copy = dir.with_extension(format!("open-{i}"));
        let _ = std::fs::remove_dir_all(&copy);
        copy_dir(dir, &copy)?;
        let t = Instant::now();
        let store = Store::open(&copy, Config::default())?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        let r = store.recovery_report();
        if i == 0 {
            println!(
                "{} frames / {} events scanned",
                r.frames_scanned, r.events_recovered
            );
        }
        drop(store);
        std::fs::remove_dir_all(&copy)?;
    }
    println!("writable open {:.1} ms (median of {runs})", median(ms));
    Ok(())
}

fn main() -> R<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["build", dir, kind] => build(Path::new(dir), kind),
        ["time", dir] => time(Path::new(dir), 5),
        ["time", dir, runs] => time(Path::new(dir), runs.parse()?),
        ["open", dir] => open(Path::new(dir), 3),
        ["open", dir, runs] => open(Path::new(dir), runs.parse()?),
        _ => Err(
            "usage: resume_written build DIR big|import | time DIR [RUNS] | open DIR [RUNS]".into(),
        ),
    }
}
