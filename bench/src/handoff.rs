//! What one thread waking another costs on this machine: the floor under every durable
//! append that blocks its thread until a writer wakes it (the 64-sessions-syncing row).

use std::sync::{Arc, Condvar, Mutex};

use serde::Serialize;

use super::report::own_cpu_seconds;

/// The cost of one hand-off between two threads.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Handoff {
    /// Hand-offs made.
    pub handoffs: u64,
    /// Wall-clock microseconds per hand-off.
    pub wall_us: f64,
    /// CPU microseconds (user + system, both threads) per hand-off; `None` without
    /// `getrusage`.
    pub cpu_us: Option<f64>,
}

/// Two threads wake each other `handoffs` times through a mutex and a condition variable,
/// as an appender waiting for its durable write and the writer that wakes it do. The
/// process must be otherwise idle (its CPU time is measured whole).
pub fn measure(handoffs: u64) -> Handoff {
    let pair = Arc::new((Mutex::new(0u64), Condvar::new()));
    let cpu_before = own_cpu_seconds();
    let started = std::time::Instant::now();
    let other = {
        let pair = pair.clone();
        std::thread::spawn(move || turns(&pair, handoffs, 1))
    };
    turns(&pair, handoffs, 0);
    // A panic in `turns` is impossible (it only locks, waits and counts); a failed join
    // leaves the figure as measured.
    let _ = other.join();
    let wall = started.elapsed().as_secs_f64();
    let n = handoffs.max(1) as f64;
    Handoff {
        handoffs,
        wall_us: wall * 1e6 / n,
        cpu_us: own_cpu_seconds()
            .zip(cpu_before)
            .map(|(after, before)| ((after.0 - before.0) + (after.1 - before.1)) * 1e6 / n),
    }
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
