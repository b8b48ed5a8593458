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
//! `sessionlog bench --probe-fill MB --probe-dir DIR`), a fresh copy each run, synced before the open (`SCAN_AHEAD=0`:
//! without the scan's decoding threads; `SCAN_BATCH=BYTES`: their hand-over size; `CATCH_UP=1`:
//! then `Store::catch_up`, every session folded over the unindexed tail, timed too). `phases DIR`
//! times the resume's steps one by one (median of 9). `crash DIR MB`: one session of the dsh
//! workload, MB of log written at its flush points with the default configuration (index
//! checkpoints every 4 MiB), then the process exits without closing the store, as a crashed
//! agent leaves it: `open DIR` with `CATCH_UP=1` then times what its next start costs.

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

/// A crashed agent's store: see the module's `crash`.
fn crash(dir: &Path, mb: u64) -> R<()> {
    let config = WorkloadConfig {
        turns: u64::MAX,
        ..WorkloadConfig::default()
    };
    let store = Store::open(
        dir,
        Config::default().durability(sessionlog::store::Durability::Buffered),
    )?;
    store.create_session(session_header(0))?;
    let id = session_id(0);
    let segments = dir.join(sessionlog::log::segment::SEGMENTS_DIR);
    let log_bytes = || -> R<u64> {
        let mut n = 0;
        for e in std::fs::read_dir(&segments)? {
            n += e?.metadata()?.len();
        }
        Ok(n)
    };
    let mut groups = SessionGenerator::new(&config, 0);
    let mut events = 0u64;
    while log_bytes()? < mb << 20 {
        for _ in 0..50 {
            let group = groups.next().ok_or("the generator ended")?;
            events += group.events.len() as u64;
            for e in group.events {
                store.append(&id, e)?;
            }
            store.flush()?;
        }
    }
    println!("{events} events, then a crash");
    // No destructor runs: the index gets no final commit.
    std::process::exit(0)
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

/// The resume's phases one by one (median of `runs` each): what a writable open, `resume`,
/// `surface` and `messages` cost beside a read-only open and the read once.
fn phases(dir: &Path, runs: usize) -> R<()> {
    let id = session_id(0);
    let mut t: Vec<Vec<f64>> = vec![Vec::new(); 6];
    for _ in 0..runs {
        let clock = Instant::now();
        let lap = |clock: &Instant| clock.elapsed().as_secs_f64() * 1e3;
        let store = Store::open(dir, Config::default().read_only(true))?;
        t[0].push(lap(&clock));
        drop(store);
        let clock = Instant::now();
        let store = Store::open(dir, Config::default())?;
        t[1].push(lap(&clock));
        let clock = Instant::now();
        let session = store.resume(&id)?;
        t[2].push(lap(&clock));
        let clock = Instant::now();
        let surface = session.surface()?;
        t[3].push(lap(&clock));
        let clock = Instant::now();
        let messages = session.messages()?;
        t[4].push(lap(&clock));
        let clock = Instant::now();
        let again = session.messages()?;
        t[5].push(lap(&clock));
        if surface.len() != messages.len() || messages != again {
            return Err("the messages do not match the surface".into());
        }
        drop(session);
        drop(store);
    }
    let names = [
        "read-only open",
        "writable open",
        "resume",
        "surface",
        "messages",
        "messages again",
    ];
    for (name, v) in names.iter().zip(t) {
        println!("{name}: {:.2} ms", median(v));
    }
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
            std::fs::copy(entry.path(), &target)?;
            // On disk before the open (unless `OPEN_DIRTY=1`: left in the page cache, as a
            // crashed writer leaves its last frames, for the open to sync).
            if std::env::var("OPEN_DIRTY").as_deref() != Ok("1") {
                std::fs::File::open(&target)?.sync_all()?;
            }
        }
    }
    Ok(())
}

fn open(dir: &Path, runs: usize) -> R<()> {
    // `SCAN_AHEAD=0`: the scan decodes on the opening thread alone (the single-threaded scan).
    if std::env::var("SCAN_AHEAD").as_deref() == Ok("0") {
        sessionlog::log::scan::decode_ahead_from(u64::MAX);
    }
    // `SCAN_BATCH=BYTES`: the decoded bytes a scan's decoding thread hands over at a time.
    if let Some(bytes) = std::env::var("SCAN_BATCH")
        .ok()
        .and_then(|b| b.parse().ok())
    {
        sessionlog::log::scan::decode_ahead_batch(bytes);
    }
    let catch_up = std::env::var("CATCH_UP").as_deref() == Ok("1");
    let (mut ms, mut caught) = (Vec::new(), Vec::new());
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
        if catch_up {
            let t = Instant::now();
            let failures = store.catch_up()?;
            caught.push(t.elapsed().as_secs_f64() * 1e3);
            if !failures.is_empty() {
                return Err(format!("the catch-up failed: {failures:?}").into());
            }
        }
        drop(store);
        std::fs::remove_dir_all(&copy)?;
    }
    println!("writable open {:.1} ms (median of {runs})", median(ms));
    if catch_up {
        println!("catch-up {:.1} ms (median of {runs})", median(caught));
    }
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
        ["crash", dir, mb] => crash(Path::new(dir), mb.parse()?),
        ["time", dir] => time(Path::new(dir), 5),
        ["time", dir, runs] => time(Path::new(dir), runs.parse()?),
        ["phases", dir] => phases(Path::new(dir), 9),
        ["open", dir] => open(Path::new(dir), 3),
        ["open", dir, runs] => open(Path::new(dir), runs.parse()?),
        _ => Err(
            "usage: resume_written build DIR big|import | crash DIR MB | time DIR [RUNS] | phases DIR | open DIR [RUNS]"
                .into(),
        ),
    }
}
