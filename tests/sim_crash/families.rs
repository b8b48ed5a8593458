//! Running a family of scenarios, and the families.

use super::*;

/// A validation refusal (the session rules, or a session whose stored log does not replay),
/// as opposed to an I/O failure.
pub(crate) fn refused(e: &AppendError) -> bool {
    matches!(
        e,
        AppendError::Semantics { .. }
            | AppendError::Replay { .. }
            | AppendError::Envelope { .. }
            | AppendError::BadData { .. }
    )
}

pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

pub(crate) fn trace() -> bool {
    std::env::var_os("SESSIONLOG_SIM_TRACE").is_some()
}

thread_local! {
    /// The family and seed of the scenario this thread runs (for the panic hook).
    static CURRENT: std::cell::Cell<Option<(&'static str, u64)>> = const { std::cell::Cell::new(None) };
}

/// Names the scenario in every panic message, so that a panic that aborts the process (a
/// second panic in a destructor while unwinding, which `catch_unwind` cannot stop) still
/// says which seed to replay.
pub(crate) fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Some((name, seed)) = CURRENT.with(|c| c.get()) {
                eprintln!(
                    "panic in scenario {name} seed {seed} (replay: SESSIONLOG_SIM_SEED={seed})"
                );
            }
            previous(info);
        }));
    });
}

/// How long one scenario may run (`SESSIONLOG_SIM_TIMEOUT_SECS`, default 60 s, ten times that
/// for the gc family's every-operation sweeps; most scenarios take well under a second).
pub(crate) fn scenario_timeout() -> Duration {
    Duration::from_secs(
        std::env::var("SESSIONLOG_SIM_TIMEOUT_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(60),
    )
}

pub(crate) fn scenario_count(default: u64) -> u64 {
    std::env::var("SESSIONLOG_SIM_SCENARIOS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs a family's scenarios on two threads. A failing scenario does not stop the run: every
/// failure is listed at the end (long runs count them).
pub(crate) fn run_family(name: &'static str, family: Family, salt: u64, default: u64) {
    // Every scan decodes its frames ahead on other threads, however small the segment (the
    // default does so from 256 KiB, more than these segments hold), in batches of a few
    // frames (the default is 1 MiB of payload) so that every decoding thread takes its turns:
    // the path a large store's reopen takes, under every crash and bit flip.
    sessionlog::log::scan::decode_ahead_from(0);
    sessionlog::log::scan::decode_ahead_batch(2 << 10);
    if let Some(seed) = std::env::var("SESSIONLOG_SIM_SEED")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        if seed % 4 == salt {
            let t = Scenario::new(seed, family)
                .run()
                .unwrap_or_else(|e| panic!("{name} seed {seed}: {e}"));
            eprintln!("{name} seed {seed}: {t:?}");
        }
        return;
    }
    install_panic_hook();
    // The gc family's scenarios sweep every crash point of a GC (seconds each): it has its
    // own count (`SESSIONLOG_SIM_GC_SCENARIOS`).
    let n = if family.gc_sweep {
        default
    } else {
        scenario_count(default)
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(2) as u64;
    let start = std::time::Instant::now();
    let (total, failures) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut total = Tally::default();
                    let mut failures = Vec::new();
                    let mut i = t;
                    while i < n {
                        let seed = i * 4 + salt;
                        i += threads;
                        // On its own thread, so that a hang (a deadlock after a panic inside
                        // the index, say) fails the scenario instead of the whole run.
                        let (tx, rx) = std::sync::mpsc::channel();
                        std::thread::spawn(move || {
                            CURRENT.with(|c| c.set(Some((name, seed))));
                            if std::env::var_os("SESSIONLOG_SIM_PROGRESS").is_some() {
                                // A process abort (a panic while unwinding) prints no seed.
                                eprintln!("{name} seed {seed}: start");
                            }
                            let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
                                Scenario::new(seed, family).run()
                            }))
                            .unwrap_or_else(|p| Err(format!("panicked: {}", panic_message(&*p))));
                            let _ = tx.send(r);
                        });
                        // A sweep of every operation of an erase over a hundred segments
                        // takes minutes.
                        let timeout = scenario_timeout() * if family.gc_every_op { 10 } else { 1 };
                        let result = rx.recv_timeout(timeout).unwrap_or_else(|_| {
                            Err(format!("hung: no result after {timeout:?} (a deadlock?)"))
                        });
                        match result {
                            Ok(tally) => total.add(&tally),
                            Err(e) => {
                                eprintln!("{name} seed {seed} failed: {e}");
                                failures.push((seed, e));
                            }
                        }
                    }
                    (total, failures)
                })
            })
            .collect();
        let mut total = Tally::default();
        let mut failures = Vec::new();
        for h in handles {
            let (t, f) = h.join().unwrap();
            total.add(&t);
            failures.extend(f);
        }
        (total, failures)
    });
    eprintln!(
        "{name}: {n} scenarios in {:.1?} ({} failed): {total:?}",
        start.elapsed(),
        failures.len()
    );
    if let Some((seed, e)) = failures.first() {
        panic!(
            "{name}: {} scenarios failed (seeds {:?}); first: seed {seed}: {e}\nreplay: SESSIONLOG_SIM_SEED={seed} SESSIONLOG_SIM_TRACE=1 cargo test --release --test sim_crash -- --include-ignored",
            failures.len(),
            failures.iter().map(|f| f.0).take(20).collect::<Vec<_>>()
        );
    }
    assert_eq!(total.scenarios, n);
    assert!(total.crashes > 0 && total.acked_events > 0);
    assert!(
        total.live_reader_checks > 0,
        "{name}: no reader was opened beside the live writer"
    );
    total.gc.assert_ran(name, &family, total.scenarios);
}

#[test]
fn sync_and_group_survive_random_crashes() {
    run_family("sync/group", MAIN, 0, 2000);
}

/// Group commit with its background leader running (1 ms): crashes and faults race it.
#[test]
fn group_timer_survives_random_crashes() {
    let mut family = MAIN;
    family.durabilities = &[3];
    run_family("group-timer", family, 0, 300);
}

#[test]
fn buffered_survives_in_order_crashes() {
    run_family("buffered", BUFFERED_IN_ORDER, 1, 1000);
}

/// Imports and `append_batch` calls spanning many frames (frames of 4-64 KiB, events up to
/// half of that) and segments, Sync and Group; crashes, ENOSPC, EIO, EFBIG, a file-size limit
/// and a full disk land inside them. After every reopen each operation is whole or absent,
/// every acknowledged one is present, `verify` is clean, and after a fault the failed
/// operation, retried, succeeds.
#[test]
fn multiframe_operations_are_all_or_nothing() {
    run_family("multiframe", MULTIFRAME, 1, 400);
}

/// The same in Buffered and Group mode with process restarts (the page cache survives, a
/// power loss may follow), several faults per scenario and fsync EIO keeping the cached pages.
#[test]
fn multiframe_operations_survive_restarts_and_repeated_faults() {
    let mut family = MULTIFRAME;
    family.durabilities = &[2, 1];
    family.restarts = true;
    family.continue_after_fault = true;
    family.options.eio_drops_cache = false;
    run_family("multiframe-restart", family, 2, 300);
}

/// Imports and batches (single-frame, default limits) in the main workload, with bit flips.
#[test]
fn imports_and_batches_in_the_main_workload() {
    let mut family = MAIN;
    family.new_ops = true;
    run_family("import-mix", family, 3, 300);
}

/// `index.redb` damaged between rounds and after crashes (bytes xored, truncated, a page
/// overwritten, the magic broken): a read-only open answers right or with typed errors (no
/// panic, no wrong answer), and a writable open rebuilds the exact model.
#[test]
fn a_damaged_index_costs_only_a_rebuild() {
    run_family("index-damage", index_damage_family(), 0, 300);
}

/// The family of [`a_damaged_index_costs_only_a_rebuild`] (its seeds replay elsewhere too).
pub(crate) fn index_damage_family() -> Family {
    let mut family = MAIN;
    family.durabilities = &[0, 1, 2];
    family.flips = false;
    family.new_ops = true;
    family.index_damage = true;
    family
}

/// The `gc` family (`gc.rs`): a filled store's GC crashed at each of its file-system
/// operations, with ENOSPC at each of its writes, full disks, readers beside it; then more
/// workload, a GC crashed at random, reopens. 16 scenarios in CI, each with about 40 crash
/// points and 16 failing writes spread over its GC; `SESSIONLOG_SIM_GC_SCENARIOS=N` runs N
/// scenarios that crash the GC at every operation and fail every write (seconds each;
/// `SESSIONLOG_SIM_SCENARIOS` does not apply to this family).
#[test]
fn gc_survives_crashes_full_disks_and_readers() {
    let long = std::env::var("SESSIONLOG_SIM_GC_SCENARIOS")
        .ok()
        .and_then(|v| v.parse().ok());
    let mut family = GC_FAMILY;
    family.gc_every_op = long.is_some();
    run_family("gc", family, 1, long.unwrap_or(16));
}
