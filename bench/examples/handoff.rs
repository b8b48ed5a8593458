//! What one thread handing off to another costs on this machine: two threads wake each
//! other through a mutex and a condition variable, as an appender waiting for its durable
//! write and the writer that wakes it do. Prints the wall-clock time and the CPU time (user
//! and system, both threads) per hand-off; the floor under any design in which every durable
//! append blocks its thread once (benches/README.md, "The floor of each miss"). The full
//! bench measures the same in every run (its targets' floor row).
//!
//! ```text
//! cargo run --release -p sessionlog-bench --example handoff -- [HANDOFFS]
//! ```

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(100_000);
    let h = sessionlog_bench::handoff::measure(n);
    println!(
        "{n} hand-offs: {:.2} us wall per hand-off{}",
        h.wall_us,
        h.cpu_us
            .map(|cpu| format!(", {cpu:.2} us CPU (both threads)"))
            .unwrap_or_default()
    );
    Ok(())
}
