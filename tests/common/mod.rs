//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use sessionlog::event::{Event, SessionHeader};
use sessionlog::session::InvariantMode;
use sessionlog::store::{Config, Durability, Store};

pub mod jsonl_fixtures;
pub mod session_build;
pub mod session_fixtures;
pub mod shared_fixtures;
pub mod sqlite_fixtures;
pub mod wrap_fs;

/// The shared fixtures directory, or `None` (with a loud `SKIPPED` note) when it is absent.
pub fn fixtures_dir(_what: &str) -> Option<PathBuf> {
    shared_fixtures::shared_fixtures("")
}

/// A config with the given durability and small segments (so tests roll over).
pub fn config(durability: Durability) -> Config {
    Config::default()
        .durability(durability)
        .segment_bytes(64 * 1024)
        .invariants(InvariantMode::Off)
}

pub use sessionlog_bench::workload::synthetic_event;

/// Creates `sessions` sessions named `s0..` and appends `per_session` synthetic events to each,
/// interleaved. Returns every event appended, per session.
pub fn fill(store: &Store, sessions: usize, per_session: u64) -> Vec<(String, Vec<Event>)> {
    let mut out: Vec<(String, Vec<Event>)> = (0..sessions)
        .map(|i| {
            let id = format!("s{i}");
            store
                .create_session(SessionHeader::new(id.clone(), 1000 + i as u64))
                .unwrap();
            (id, Vec::new())
        })
        .collect();
    for seq in 0..per_session {
        for (i, (id, events)) in out.iter_mut().enumerate() {
            let e = synthetic_event(seq, i as u64);
            store.append(id, e.clone()).unwrap();
            events.push(e);
        }
    }
    out
}

/// Reads a whole session back.
pub fn read_all(store: &Store, id: &str) -> Vec<Event> {
    let n = store.len(id).unwrap();
    store
        .events(id, 0..n)
        .unwrap()
        .map(|e| e.unwrap())
        .collect()
}
