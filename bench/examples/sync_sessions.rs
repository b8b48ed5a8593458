//! Many sessions appending one durable event at a time (the bench's "64 sessions, sync per
//! event" row), for profiling group commit: `sync_sessions [SESSIONS] [EVENTS_PER_SESSION]`.
//! Prints events/s and the CPU time per event (user and system, all threads). `FLUSH=1`: a `Buffered` store, each session flushing at dsh's flush
//! points (the bench's "flush points" rows). `PREALLOCATE=BYTES` sets
//! `Config::preallocate_bytes`; `COMPRESS_THRESHOLD=BYTES` sets `Config::compress_threshold`
//! (a huge value writes every frame uncompressed); `DEFERRED=N` sets
//! `Config::deferred_index_entries`. Also prints the latency of one append (with its flush,
//! if any) at the 50th, 99th and 99.9th percentiles and the longest.

use std::time::Instant;

use sessionlog::store::{Config, Durability, Store};
use sessionlog_bench::report::own_cpu_seconds;
use sessionlog_bench::workload::{
    WorkloadConfig, generate_events, is_flush_point, session_header, session_id,
};

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut args = std::env::args().skip(1);
    let sessions: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(64);
    let per: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(200);
    let dir = tempfile::tempdir_in(std::env::var("DIR").unwrap_or_else(|_| ".".into()))?;
    let flush = std::env::var_os("FLUSH").is_some();
    let durability = if flush {
        Durability::Buffered
    } else {
        Durability::Sync
    };
    let mut config = Config::default().durability(durability);
    if let Some(bytes) = std::env::var("PREALLOCATE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config = config.preallocate_bytes(bytes);
    }
    if let Some(bytes) = std::env::var("COMPRESS_THRESHOLD")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config = config.compress_threshold(bytes);
    }
    if let Some(entries) = std::env::var("DEFERRED").ok().and_then(|v| v.parse().ok()) {
        config = config.deferred_index_entries(entries);
    }
    let store = Store::open(dir.path(), config)?;
    let work: Vec<_> = (0..sessions)
        .map(|i| generate_events(&WorkloadConfig::default(), i, per))
        .collect();
    for i in 0..sessions {
        store.create_session(session_header(i))?;
    }
    let cpu_before = own_cpu_seconds();
    let start = Instant::now();
    let mut latencies: Vec<std::time::Duration> = Vec::new();
    std::thread::scope(
        |s| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
            let handles: Vec<_> = work
                .into_iter()
                .enumerate()
                .map(|(i, events)| {
                    let store = &store;
                    s.spawn(move || -> Result<_, sessionlog::AppendError> {
                        let id = session_id(i as u64);
                        let mut took = Vec::with_capacity(events.len());
                        for e in events {
                            let at_flush_point = flush && is_flush_point(&e.kind);
                            let started = Instant::now();
                            store.append(&id, e)?;
                            if at_flush_point {
                                store.flush()?;
                            }
                            took.push(started.elapsed());
                        }
                        Ok(took)
                    })
                })
                .collect();
            for h in handles {
                latencies.extend(h.join().map_err(|_| "a thread panicked")??);
            }
            Ok(())
        },
    )?;
    let secs = start.elapsed().as_secs_f64();
    let cpu = own_cpu_seconds()
        .zip(cpu_before)
        .map(|(after, before)| (after.0 - before.0, after.1 - before.1));
    let total = sessions * per;
    println!(
        "{sessions} sessions x {per} events: {:.0} events/s ({secs:.2} s){}",
        total as f64 / secs,
        cpu.map(|(user, sys)| format!(
            "; CPU per event {:.2} us ({:.2} user, {:.2} system)",
            (user + sys) * 1e6 / total as f64,
            user * 1e6 / total as f64,
            sys * 1e6 / total as f64
        ))
        .unwrap_or_default()
    );
    latencies.sort_unstable();
    let at = |q: f64| {
        let i = ((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1));
        latencies.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    println!(
        "latency per append: p50 {:.0} us, p99 {:.0} us, p99.9 {:.0} us, max {:.0} us",
        at(0.5),
        at(0.99),
        at(0.999),
        at(1.0)
    );
    store.close()?;
    Ok(())
}
