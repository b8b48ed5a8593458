//! The crash-reopen profile: opens the store at the given path (left by
//! `sessionlog bench --probe-fill MB --probe-dir DIR`, a crash with the whole log unindexed)
//! and prints the open's time, the frames it scanned and the scan rate; with `CATCH_UP=1`, then
//! the time of `Store::catch_up` (every session folded over its unindexed tail).
//!
//! ```text
//! sessionlog bench --probe-fill 32 --probe-dir /tmp/rf && cp -a /tmp/rf /tmp/rf.orig
//! cargo build --release -p sessionlog-bench --example reopen_profile
//! target/release/examples/reopen_profile /tmp/rf   # copy /tmp/rf.orig back before each run
//! ```

use std::time::Instant;

use sessionlog::store::{Config, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: reopen_profile DIR")?;
    let log_bytes: u64 = std::fs::read_dir(std::path::Path::new(&dir).join("segments"))?
        .map(|e| e.and_then(|e| e.metadata()).map(|m| m.len()))
        .sum::<std::io::Result<u64>>()?;
    let t = Instant::now();
    let store = Store::open(&dir, Config::default())?;
    let elapsed = t.elapsed();
    let report = store.recovery_report();
    println!(
        "open {:.1} ms: {} frames, {} events, {:.0} MB/s",
        elapsed.as_secs_f64() * 1e3,
        report.frames_scanned,
        report.events_recovered,
        log_bytes as f64 / 1e6 / elapsed.as_secs_f64()
    );
    if std::env::var_os("CATCH_UP").is_some() {
        let t = Instant::now();
        let failures = store.catch_up()?;
        println!(
            "catch-up {:.1} ms ({} failures)",
            t.elapsed().as_secs_f64() * 1e3,
            failures.len()
        );
    }
    drop(store);
    Ok(())
}
