//! The instruction profile of the append path: appends the dsh workload's events to one
//! `Buffered` session one by one, flushes, and prints how many events it appended, so that a
//! callgrind total divides by a known count.
//!
//! ```text
//! cargo build --release -p sessionlog-bench --example append_profile
//! valgrind --tool=callgrind '--toggle-collect=sessionlog::store::internals::<impl sessionlog::store::Store>::append' \
//!     target/release/examples/append_profile 5800
//! ```
//!
//! Divide the collected instructions by the printed count (`callgrind_annotate --inclusive=yes`
//! for the breakdown). A second argument sets `Config::checkpoint_bytes` (what an index
//! checkpoint every that many bytes costs the appends).
//!
//! `FLUSH=1` calls `Store::flush` at dsh's flush points (the bench's "flush points" rows:
//! one frame, one `fdatasync` per flush group); collect both functions then:
//! `--toggle-collect='*Store>::append' --toggle-collect='sessionlog::store::Store::flush'`.
//! `BATCH=N` appends with `Store::append_batch`, N events at a time, to a `Sync` store (the
//! bench's batch rows; collect `'*Store>::append_batch'`).

use sessionlog::store::{Config, Durability, Store};
use sessionlog_bench::workload::{
    WorkloadConfig, generate_events, is_flush_point, session_header, session_id,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(5_800);
    let mut config = Config::default().durability(Durability::Buffered);
    if let Some(bytes) = std::env::args().nth(2) {
        config = config.checkpoint_bytes(bytes.parse()?);
    }
    let events = generate_events(&WorkloadConfig::default(), 0, n);
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), config)?;
    store.create_session(session_header(0))?;
    let count = events.len();
    if let Some(n) = std::env::var("BATCH")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        drop(store);
        let dir = tempfile::tempdir()?;
        let store = Store::open(dir.path(), Config::default().durability(Durability::Sync))?;
        store.create_session(session_header(0))?;
        let mut events = events.into_iter().peekable();
        let mut batches = Vec::new();
        while events.peek().is_some() {
            batches.push(events.by_ref().take(n.max(1)).collect::<Vec<_>>());
        }
        let id = session_id(0);
        let started = std::time::Instant::now();
        for batch in batches {
            store.append_batch(&id, batch)?;
        }
        let took = started.elapsed();
        store.close()?;
        println!(
            "appended {count} events in {:.1} ms ({:.0} events/s)",
            took.as_secs_f64() * 1e3,
            count as f64 / took.as_secs_f64()
        );
        return Ok(());
    }
    let at_flush_points = std::env::var_os("FLUSH").is_some();
    for e in events {
        let flush = at_flush_points && is_flush_point(&e.kind);
        store.append(&session_id(0), e)?;
        if flush {
            store.flush()?;
        }
    }
    store.flush()?;
    store.close()?;
    println!("appended {count} events");
    Ok(())
}
