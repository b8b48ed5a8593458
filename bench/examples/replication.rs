//! Replication figures (benches/README.md, "Replication"): lag from acknowledged to shipped
//! under a dsh-shaped multi-session workload, append throughput with replication on against
//! off, and the time to restore a large store.
//!
//! ```text
//! cargo run --release -p sessionlog-bench --example replication -- [EVENTS] [RESTORE_MIB]
//! ```
//!
//! The S3 server is moto's (`moto_server`, started here on 127.0.0.1, in memory) unless
//! `SESSIONLOG_S3_ENDPOINT` names another (then `SESSIONLOG_S3_BUCKET` must exist and the
//! `AWS_*` credentials are used). EVENTS (default 60000) are appended with `Sync` durability
//! by 16 threads, one session each (the bench workload's turns: chunks, tool calls, results);
//! runs alternate off/on three times. RESTORE_MIB (default 1024) is the size of the events of
//! the store shipped and restored (three quarters shipped with an index snapshot, then the
//! rest without), restored with the snapshot and then with a rebuild from the log; the stores
//! are made in the current directory and removed.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use sessionlog::event::{Event, SessionHeader};
use sessionlog::replicate::{ReplicaTarget, restore};
use sessionlog::session::InvariantMode;
use sessionlog::store::{Config, Durability, Store};
use sessionlog_bench::workload::{SplitMix64, WorkloadConfig, generate_events, session_header};

const THREADS: u64 = 16;

/// Positions (segment, offset) with the instant they were seen.
type Timeline = Arc<Mutex<Vec<(Instant, (u64, u64))>>>;
/// Makes a bucket (or a prefix) and returns its URL.
type BucketMaker = Box<dyn Fn(&str) -> String>;

fn http(addr: &str, method: &str, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// (endpoint, bucket url maker)
fn server() -> (String, BucketMaker) {
    if let Ok(endpoint) = std::env::var("SESSIONLOG_S3_ENDPOINT") {
        let bucket = std::env::var("SESSIONLOG_S3_BUCKET").expect("SESSIONLOG_S3_BUCKET");
        return (
            endpoint,
            Box::new(move |name| format!("s3://{bucket}/bench-{name}-{}", std::process::id())),
        );
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let me = std::process::id();
    // The shell stops the server and exits by itself once this process is gone.
    #[allow(clippy::zombie_processes)]
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "moto_server -p {port} -H 127.0.0.1 >/dev/null 2>&1 & m=$!; \
             while kill -0 {me} 2>/dev/null; do sleep 1; done; kill $m"
        ))
        .spawn()
        .expect("sh");
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while http(&addr, "GET", "/").is_none() {
        assert!(Instant::now() < deadline, "moto_server did not start");
        std::thread::sleep(Duration::from_millis(200));
    }
    let a = addr.clone();
    (
        format!("http://{addr}"),
        Box::new(move |name| {
            let bucket = format!("bench-{name}-{}", std::process::id());
            assert_eq!(http(&a, "PUT", &format!("/{bucket}")), Some(200));
            format!("s3://{bucket}/replica")
        }),
    )
}

fn target(url: &str, endpoint: &str) -> ReplicaTarget {
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| "test".into());
    ReplicaTarget::s3(url)
        .expect("url")
        .endpoint(endpoint)
        .credentials(env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"))
        .region("us-east-1")
}

fn acked(dir: &std::path::Path) -> Option<(u64, u64)> {
    let b = std::fs::read(dir.join("ACKED")).ok()?;
    let u =
        |i: usize| -> Option<u64> { Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?)) };
    Some((u(24)?, u(32)?))
}

/// Appends `per_thread` events to each of 16 sessions; returns events/s and, with
/// replication, the lag samples (seconds from the position first published to shipped).
fn run(events: u64, replicate: Option<(&str, &str)>) -> (f64, Vec<f64>) {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    let config = Config::default()
        .durability(Durability::Sync)
        .invariants(InvariantMode::Off);
    let store = Arc::new(Store::open(dir.path(), config).expect("open"));
    let wl = WorkloadConfig::default();
    let per = events / THREADS;
    let batches: Vec<Vec<Event>> = (0..THREADS).map(|i| generate_events(&wl, i, per)).collect();
    for i in 0..THREADS {
        store.create_session(session_header(i)).expect("create");
    }
    let rep = replicate.map(|(url, ep)| store.replicate(target(url, ep)).expect("replicate"));
    let stop = Arc::new(AtomicBool::new(false));
    let acks: Timeline = Arc::default();
    let sampler = {
        let (stop, acks, path) = (stop.clone(), acks.clone(), dir.path().to_owned());
        std::thread::spawn(move || {
            let mut last = None;
            while !stop.load(Ordering::SeqCst) {
                let p = acked(&path);
                if p.is_some() && p != last {
                    last = p;
                    acks.lock()
                        .unwrap()
                        .push((Instant::now(), p.unwrap_or_default()));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let started = Instant::now();
    let shipped: Timeline = Arc::default();
    let mut elapsed = Duration::ZERO;
    std::thread::scope(|s| {
        let appenders: Vec<_> = batches
            .into_iter()
            .enumerate()
            .map(|(i, batch)| {
                let store = store.clone();
                s.spawn(move || {
                    let id = session_header(i as u64).id;
                    for e in batch {
                        store.append(&id, e).expect("append");
                    }
                })
            })
            .collect();
        if let Some(rep) = &rep {
            let (shipped, done) = (shipped.clone(), stop.clone());
            s.spawn(move || {
                let mut last = (0, 0);
                let t0 = Instant::now();
                loop {
                    let st = rep.stats();
                    let p = (st.shipped.segment, st.shipped.offset);
                    if p != last {
                        last = p;
                        shipped.lock().unwrap().push((Instant::now(), p));
                    }
                    let finished = done.load(Ordering::SeqCst) && st.caught_up();
                    if finished || t0.elapsed() > Duration::from_secs(600) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
        }
        for a in appenders {
            a.join().expect("appender");
        }
        elapsed = started.elapsed();
        // Let the shipper catch up with the last appends (so their lag is measured too).
        std::thread::sleep(Duration::from_millis(1500));
        stop.store(true, Ordering::SeqCst);
    });
    let rate = (per * THREADS) as f64 / elapsed.as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    let _ = sampler.join();
    let mut lags = Vec::new();
    if let Some(rep) = rep {
        rep.stop().expect("stop");
        let shipped = shipped.lock().unwrap();
        for (t, p) in acks.lock().unwrap().iter() {
            if let Some((ts, _)) = shipped.iter().find(|(_, s)| s >= p) {
                lags.push(ts.saturating_duration_since(*t).as_secs_f64());
            }
        }
    }
    Arc::try_unwrap(store).ok().map(|s| s.close());
    (rate, lags)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(((v.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(f64::NAN)
}

/// Appends about `mib` MiB of events to the store in `dir` (made when missing), 16 sessions.
fn big_store(dir: &std::path::Path, mib: u64) {
    let store = Store::open(
        dir,
        Config::default()
            .durability(Durability::Buffered)
            .invariants(InvariantMode::Off),
    )
    .expect("open");
    let mut rng = SplitMix64::new(7);
    let target = mib << 20;
    let mut seq = [0u64; 16];
    for (i, s) in seq.iter_mut().enumerate() {
        let id = format!("big-{i}");
        match store.len(&id) {
            Some(n) => *s = n,
            None => {
                store
                    .create_session(SessionHeader::new(id, 1))
                    .expect("create");
            }
        }
    }
    let mut written = 0u64;
    let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    while written < target {
        let i = (rng.next_u64() % 16) as usize;
        let text: String = (0..16 << 10)
            .map(|_| alphabet[(rng.next_u64() % alphabet.len() as u64) as usize] as char)
            .collect();
        let e = Event::new(
            "tool/call",
            seq[i],
            1_767_225_600_000,
            format!(
                r#"{{"turn":1,"step":1,"callId":"c{}","name":"bash","arguments":"{text}"}}"#,
                seq[i]
            ),
        );
        store.append(&format!("big-{i}"), e).expect("append");
        seq[i] += 1;
        written += 16 << 10;
    }
    store.close().expect("close");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let events: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(60_000);
    let restore_mib: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1024);
    let (endpoint, bucket) = server();
    let mut off = Vec::new();
    let mut on = Vec::new();
    let mut lags = Vec::new();
    for round in 0..if events == 0 { 0 } else { 3 } {
        let (r, _) = run(events, None);
        off.push(r);
        let url = bucket(&format!("lag{round}"));
        let (r, mut l) = run(events, Some((&url, &endpoint)));
        on.push(r);
        lags.append(&mut l);
        println!("round {round}: off {:.0} ev/s, on {r:.0} ev/s", off[round]);
    }
    if events > 0 {
        let (moff, mon) = (pct(&mut off, 0.5), pct(&mut on, 0.5));
        println!(
            "append throughput (Sync, {THREADS} threads, {events} events): off {moff:.0} ev/s, on {mon:.0} ev/s ({:.1}%)",
            100.0 * mon / moff
        );
        println!(
            "lag acknowledged -> shipped (interval 1 s, {} samples): p50 {:.3} s, p99 {:.3} s, max {:.3} s",
            lags.len(),
            pct(&mut lags, 0.5),
            pct(&mut lags, 0.99),
            pct(&mut lags, 1.0)
        );
    }
    if restore_mib == 0 {
        return;
    }
    let src = tempfile::tempdir_in(".").expect("tempdir");
    // Three quarters shipped with an index snapshot, then the last quarter without one: the
    // restore with the snapshot replays that quarter.
    let t = Instant::now();
    big_store(src.path(), restore_mib * 3 / 4);
    let url = bucket("restore");
    let first = sessionlog::replicate::replicate(src.path(), target(&url, &endpoint))
        .expect("replicate")
        .stop_within(Duration::from_secs(3600))
        .expect("ship");
    big_store(src.path(), restore_mib - restore_mib * 3 / 4);
    let size: u64 = std::fs::read_dir(src.path().join("segments"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    println!(
        "store of {:.0} MiB on disk written (three quarters of it shipped meanwhile) in {:.1} s",
        size as f64 / 1048576.0,
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let rep =
        sessionlog::replicate::replicate(src.path(), target(&url, &endpoint).snapshot_every(0))
            .expect("replicate");
    let stats = rep.stop_within(Duration::from_secs(3600)).expect("ship");
    let (stats_bytes, parts) = (first.bytes + stats.bytes, first.parts + stats.parts);
    println!(
        "shipped {:.0} MiB ({} parts; the last quarter in {:.1} s), index snapshot at {:?}, log end {:?}",
        stats_bytes as f64 / 1048576.0,
        parts,
        t.elapsed().as_secs_f64(),
        first.snapshot_position,
        stats.shipped
    );
    let index_mib = std::fs::metadata(src.path().join("index.redb"))
        .map(|m| m.len() as f64 / 1048576.0)
        .unwrap_or(0.0);
    println!("index.redb of the source: {index_mib:.1} MiB");
    // With the snapshot (the default), then rebuilding the index from the log.
    for use_snapshots in [true, false] {
        let dst = tempfile::tempdir_in(".").expect("tempdir");
        let t = Instant::now();
        let report = restore(
            &target(&url, &endpoint).use_snapshots(use_snapshots),
            None,
            dst.path().join("r"),
        )
        .expect("restore");
        let index = match &report.snapshot {
            Some(_) => format!(
                "index from snapshot ({:.1} s of the download) + catch-up over {} frames",
                report.snapshot_time.as_secs_f64(),
                report.frames_replayed
            ),
            None => format!("index rebuilt over {} frames", report.frames_replayed),
        };
        println!(
            "restore of {:.0} MiB: {:.1} s in all ({:.1} s download, {:.1} s open, {:.1} s verify; {index}), {} sessions, {} events, at {:?}",
            report.bytes as f64 / 1048576.0,
            t.elapsed().as_secs_f64(),
            report.download_time.as_secs_f64(),
            report.open_time.as_secs_f64(),
            report.verify_time.as_secs_f64(),
            report.sessions,
            report.events,
            SystemTime::now()
        );
        for note in &report.notes {
            println!("  note: {note}");
        }
    }
}
