//! What redb's integrity check costs a writable open, by index size: fills a store with
//! `SESSIONS` sessions of the dsh workload (`N` events each, flushed in batches of `BATCH`,
//! default 256: one frame and one index entry run per batch), closes it, then times `Index::open` against
//! `Index::open` followed by `check_integrity` (the check a writable open runs on an index
//! its last writer did not close, and that `Config::check_index` runs always).
//!
//! ```text
//! cargo run --release -p sessionlog-bench --example index_check_cost -- 64 20000
//! ```

use sessionlog::index::Index;
use sessionlog::store::{Config, Durability, Store};
use sessionlog_bench::workload::{WorkloadConfig, generate_events, session_header, session_id};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let sessions: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(64);
    let per: u64 = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(20_000);
    let batch_len: usize = std::env::var("BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let dir = tempfile::tempdir_in(".")?;
    let store = Store::open(
        dir.path(),
        Config::default().durability(Durability::Buffered),
    )?;
    for s in 0..sessions {
        store.create_session(session_header(s))?;
        let id = session_id(s);
        let mut events = generate_events(&WorkloadConfig::default(), s, per).into_iter();
        loop {
            let batch: Vec<_> = events.by_ref().take(batch_len).collect();
            if batch.is_empty() {
                break;
            }
            store.append_batch(&id, batch)?;
            store.flush()?;
        }
    }
    store.close()?;
    let path = dir.path().join("index.redb");
    let size = std::fs::metadata(&path)?.len();
    for round in 0..3 {
        let t = Instant::now();
        let index = Index::open(&path)?;
        let open = t.elapsed();
        drop(index);
        let t = Instant::now();
        let mut index = Index::open(&path)?;
        let clean = index.check_integrity()?;
        let checked = t.elapsed();
        drop(index);
        println!(
            "round {round}: {} events, index {:.1} MB: open {:.1} ms, open + integrity check {:.1} ms (clean: {clean})",
            sessions * per,
            size as f64 / 1e6,
            open.as_secs_f64() * 1e3,
            checked.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
