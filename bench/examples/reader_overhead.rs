//! The writer's append throughput with live readers in other processes against without
//! (benches/README.md, "Readers beside a live writer").
//!
//! ```text
//! cargo build --release -p sessionlog-cli
//! cargo run --release -p sessionlog-bench --example reader_overhead -- [SECONDS] [ROUNDS]
//! ```
//!
//! The writer (this process) appends the synthetic workload with `Sync` durability from 4
//! threads (one session each) for SECONDS (default 5). With readers, one `sessionlog show
//! --follow --json` process per session follows it and one process runs `sessionlog list
//! --json` in a loop. Runs alternate (without, with) ROUNDS times (default 3); the median of
//! each is printed. The store is made in the current directory (the project's disk).

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sessionlog::event::SessionHeader;
use sessionlog::session::InvariantMode;
use sessionlog::store::{Config, Durability, Store};
use sessionlog_bench::report::cpu_seconds;
use sessionlog_bench::workload::synthetic_event;

const THREADS: u64 = 4;

fn sessionlog_bin() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the example's path");
    // target/release/examples/reader_overhead -> target/release/sessionlog
    let release = exe
        .parent()
        .and_then(|p| p.parent())
        .expect("target/release");
    release.join("sessionlog")
}

/// Appends for `seconds`; returns appends per second. `readers`: follower and list processes.
fn run(seconds: f64, followers: bool, listing: bool) -> (f64, u64) {
    let dir = tempfile::tempdir_in(".").expect("a temporary directory here");
    let config = Config::default()
        .durability(Durability::Sync)
        .invariants(InvariantMode::Off);
    let store = Arc::new(Store::open(dir.path(), config).expect("open"));
    for t in 0..THREADS {
        store
            .create_session(SessionHeader::new(format!("w{t}"), 1))
            .expect("create");
    }
    store.flush().expect("flush");
    let bin = sessionlog_bin();
    let mut children: Vec<Child> = Vec::new();
    let stop = Arc::new(AtomicBool::new(false));
    let lists = Arc::new(AtomicU64::new(0));
    let mut lister = None;
    if followers {
        for t in 0..THREADS {
            children.push(
                Command::new(&bin)
                    .arg("--store")
                    .arg(dir.path())
                    .args(["show", &format!("w{t}"), "--follow", "--json"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect(
                        "a follower (build the CLI first: cargo build --release -p sessionlog-cli)",
                    ),
            );
        }
    }
    if listing {
        let (stop, lists, bin, path) = (
            stop.clone(),
            lists.clone(),
            bin.clone(),
            dir.path().to_owned(),
        );
        lister = Some(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let ok = Command::new(&bin)
                    .arg("--store")
                    .arg(&path)
                    .args(["list", "--json"])
                    .stdout(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(ok, "list failed beside the writer");
                lists.fetch_add(1, Ordering::Relaxed);
            }
        }));
        // Let the followers start before measuring.
        std::thread::sleep(Duration::from_millis(300));
    }
    let appended = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, appended) = (store.clone(), appended.clone());
            std::thread::spawn(move || {
                let id = format!("w{t}");
                let mut seq = 0;
                while Instant::now() < deadline {
                    store.append(&id, synthetic_event(seq, t)).expect("append");
                    seq += 1;
                }
                appended.fetch_add(seq, Ordering::Relaxed);
            })
        })
        .collect();
    for h in handles {
        h.join().expect("appender");
    }
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    if let Some(l) = lister {
        l.join().expect("lister");
    }
    let mut cpu = 0.0;
    for mut c in children {
        cpu += cpu_seconds(c.id()).map_or(0.0, |(user, sys)| user + sys);
        let _ = c.kill();
        let _ = c.wait();
    }
    if followers {
        let n = appended.load(Ordering::Relaxed);
        println!(
            "  followers: {cpu:.2} s CPU in all for {n} events ({:.0} us per event followed)",
            cpu * 1e6 / n as f64
        );
    }
    (
        appended.load(Ordering::Relaxed) as f64 / elapsed,
        lists.load(Ordering::Relaxed),
    )
}

/// The writer's own cost of publishing: one 44-byte `pwrite` of `ACKED` per durable commit.
fn publish_cost() -> f64 {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir_in(".").expect("a temporary directory here");
    let file = std::fs::File::create(dir.path().join("ACKED")).expect("a file");
    let bytes = [7u8; 44];
    let n = 200_000;
    let start = Instant::now();
    for _ in 0..n {
        file.write_all_at(&bytes, 0).expect("pwrite");
    }
    start.elapsed().as_secs_f64() * 1e9 / n as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    let (mut alone, mut following, mut both) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (a, _) = run(seconds, false, false);
        let (b, _) = run(seconds, true, false);
        let (c, lists) = run(seconds, true, true);
        println!(
            "round {round}: {a:.0} appends/s alone, {b:.0} with {THREADS} followers, \
             {c:.0} with followers and a list loop ({lists} lists)"
        );
        alone.push(a);
        following.push(b);
        both.push(c);
    }
    println!(
        "publishing ACKED costs the writer {:.0} ns per durable commit",
        publish_cost()
    );
    let (a, b, c) = (median(alone), median(following), median(both));
    println!(
        "median: {a:.0} appends/s alone, {b:.0} with followers ({:+.1}%), {c:.0} with followers and lists ({:+.1}%)",
        (b / a - 1.0) * 100.0,
        (c / a - 1.0) * 100.0
    );
}
