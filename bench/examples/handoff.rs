//! What one thread handing off to another costs on this machine: two threads wake each
//! other through a mutex and a condition variable, as an appender waiting for its durable
//! write and the writer that wakes it do. Prints the wall-clock time and the CPU time (user
//! and system, both threads) per hand-off; the floor under any design in which every durable
//! append blocks its thread once (benches/README.md, "The floor of each miss").
//!
//! ```text
//! cargo run --release -p sessionlog-bench --example handoff -- [HANDOFFS]
//! ```

use std::sync::{Arc, Condvar, Mutex};

use sessionlog_bench::report::own_cpu_seconds;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(100_000);
    let pair = Arc::new((Mutex::new(0u64), Condvar::new()));
    let cpu_before = own_cpu_seconds();
    let started = std::time::Instant::now();
    let other = {
        let pair = pair.clone();
        std::thread::spawn(move || turns(&pair, n, 1))
    };
    turns(&pair, n, 0);
    other.join().map_err(|_| "the other thread panicked")?;
    let wall = started.elapsed().as_secs_f64();
    let cpu = own_cpu_seconds()
        .zip(cpu_before)
        .map(|(after, before)| (after.0 - before.0, after.1 - before.1));
    println!(
        "{n} hand-offs: {:.2} us wall per hand-off{}",
        wall * 1e6 / n as f64,
        cpu.map(|(user, sys)| format!(
            ", {:.2} us CPU ({:.2} user, {:.2} system, both threads)",
            (user + sys) * 1e6 / n as f64,
            user * 1e6 / n as f64,
            sys * 1e6 / n as f64
        ))
        .unwrap_or_default()
    );
    Ok(())
}

/// Takes the turns whose parity is `mine` until `n` turns were taken.
fn turns(pair: &(Mutex<u64>, Condvar), n: u64, mine: u64) {
    let (lock, cv) = pair;
    let mut turn = lock.lock().unwrap_or_else(|p| p.into_inner());
    while *turn < n {
        if *turn % 2 == mine {
            *turn += 1;
            cv.notify_one();
        } else {
            turn = cv.wait(turn).unwrap_or_else(|p| p.into_inner());
        }
    }
    cv.notify_all();
}
