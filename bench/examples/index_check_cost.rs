//! What redb's integrity check costs a writable open, by index size: fills a store with
//! `SESSIONS` sessions of the dsh workload (`N` events each, flushed in batches of `BATCH`,
//! default 256: one frame and one index entry run per batch; `BATCH=1` gives the largest
//! index per event), closes it, then times redb's own open of `index.redb` (what a writable
//! open did before session 18) against `Index::open`, which runs the check first.
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
    let temporary = tempfile::tempdir_in(".")?;
    // `KEEP=DIR` fills DIR (new) and leaves it, for attacks on a store with a large index.
    let dir = match std::env::var_os("KEEP") {
        Some(d) => std::path::PathBuf::from(d),
        None => temporary.path().to_path_buf(),
    };
    let store = Store::open(&dir, Config::default().durability(Durability::Buffered))?;
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
    let path = dir.join("index.redb");
    let size = std::fs::metadata(&path)?.len();
    for round in 0..3 {
        // The opens are timed, not the closes (redb syncs its allocator state at close).
        let t = Instant::now();
        let db = redb::Database::create(&path)?;
        let open = t.elapsed();
        drop(db);
        let t = Instant::now();
        let index = Index::open(&path)?;
        let checked = t.elapsed();
        drop(index);
        println!(
            "round {round}: {} events, index {:.1} MB: redb's open {:.1} ms, Index::open (with the integrity check) {:.1} ms",
            sessions * per,
            size as f64 / 1e6,
            open.as_secs_f64() * 1e3,
            checked.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
