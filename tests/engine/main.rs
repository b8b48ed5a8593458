//! The engine's integration tests, one binary (link time dominates the build): the store,
//! recovery, the sparse index, atomic operations, JSON, typed events, the session layer and
//! projections. Each module is one former `tests/<name>.rs`; run one with
//! `cargo test --release --test engine <module>::`.

#[path = "../common/mod.rs"]
mod common;

mod atomic_ops;
mod bad_input;
mod catch_up;
mod create_with_events;
mod erase;
mod erase_crash;
mod gc;
mod json;
mod lean_records;
mod live_readers;
mod pipeline;
mod preallocation;
mod projection_checkpoint;
mod projection_fixtures;
mod projection_store;
mod projection_vectors;
mod recovery;
mod recovery_ahead;
mod retention;
mod session_derive;
mod session_envelope;
mod session_fixtures;
mod session_fork;
mod session_info;
mod session_invariants;
mod session_properties;
mod session_repair;
mod session_request;
mod session_store;
mod session_store_props;
mod session_surface;
mod space;
mod sparse_index;
mod store;
mod store_fixtures;
mod typed_events;
mod verbatim;
