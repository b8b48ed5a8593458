//! Crash-kill: a child process appends with `Sync` durability and prints each acknowledged
//! seq; the parent SIGKILLs it at a random moment, reopens, and checks that every acknowledged
//! event is there, seqs are contiguous, and nothing unacknowledged is half-present.
//!
//! `SESSIONLOG_CRASH_ROUNDS` raises the number of rounds (default 20).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sessionlog::session::InvariantMode;
use sessionlog::store::{Config, Store};
use sessionlog_bench::workload::synthetic_event;

/// A small deterministic generator for kill delays (no external RNG needed).
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn killed_writers_lose_nothing_acknowledged() {
    let _serial = crate::serial();
    let rounds: u64 = std::env::var("SESSIONLOG_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut acked: HashMap<u64, u64> = HashMap::new();
    let mut tails_scanned = 0u64;
    for round in 0..rounds {
        let threads = 1 + next(&mut rng) % 4;
        let mut child = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
            .args([
                "--store",
                dir.path().to_str().unwrap(),
                "crash-writer",
                "--threads",
                &threads.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut acks = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let mut parts = line
                    .split_whitespace()
                    .skip(1)
                    .map(|p| p.parse::<u64>().unwrap());
                acks.push((parts.next().unwrap(), parts.next().unwrap()));
            }
            acks
        });
        let delay = Duration::from_millis(5 + next(&mut rng) % 120);
        let start = Instant::now();
        while start.elapsed() < delay {
            if let Ok(Some(status)) = child.try_wait() {
                let mut err = String::new();
                std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
                panic!("round {round}: writer exited early with {status}: {err}");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        for (t, seq) in reader.join().unwrap() {
            let e = acked.entry(t).or_insert(0);
            *e = (*e).max(seq + 1);
        }

        // Open as the writer does (its synthetic workload runs with invariants off).
        let config = Config::default().invariants(InvariantMode::Off);
        let store = Store::open(dir.path(), config).unwrap();
        tails_scanned += store.recovery_report().frames_scanned;
        for (&t, &count) in &acked {
            let id = format!("w{t}");
            let len = store.len(&id).unwrap_or(0);
            assert!(
                len >= count,
                "round {round}: session {id} has {len} events, {count} were acknowledged"
            );
            // Every event present is whole and exactly what was appended, with contiguous seqs.
            for (i, e) in store.events(&id, 0..len).unwrap().enumerate() {
                assert_eq!(
                    e.unwrap(),
                    synthetic_event(i as u64, t),
                    "round {round}: {id} seq {i}"
                );
            }
        }
        assert!(store.verify().unwrap().is_clean(), "round {round}");
        drop(store);
    }
    assert!(
        acked.values().sum::<u64>() > 0,
        "the writers acknowledged nothing"
    );
    eprintln!(
        "{rounds} kill rounds, {} acknowledged appends, {tails_scanned} tail frames recovered",
        acked.values().sum::<u64>()
    );
}
