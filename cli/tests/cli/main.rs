//! The `sessionlog` binary's tests, one test binary (link time dominates the build). Each
//! module is one former `cli/tests/<name>.rs`; run one with
//! `cargo test --release -p sessionlog-cli --test cli <module>::`.

#[path = "../../../tests/common/jsonl_fixtures.rs"]
mod jsonl_fixtures;
#[path = "../../../tests/common/shared_fixtures.rs"]
mod shared_fixtures;

mod bench_smoke;
mod cli;
mod completions;
mod crash_import;
mod crash_kill;
mod du;
mod erase;
mod gc;
mod hygiene;
mod index_damage;
mod live_readers;
mod polish;
mod replicate;
mod replicate_snapshot;
mod replicate_support;
mod retain;

/// Every test of this binary takes this lock and runs alone. A test that spawns the CLI forks
/// while another test's store is open, and the child holds copies of every open descriptor
/// until it execs, that store's `LOCK` file (and its flock) included: an open right after a
/// close could briefly see the store as locked, and a child meant to find a store free could
/// find it held. One process-wide lock for all modules rules both out.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the `sessionlog` binary on `store` with `args` (`$SESSIONLOG_STORE` unset).
fn sessionlog(store: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("SESSIONLOG_STORE")
        .output()
        .unwrap()
}

/// The stdout of a run that must have succeeded (else both streams in the panic).
fn ok(o: std::process::Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}
