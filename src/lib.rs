//! # sessionlog
//!
//! An embedded database engine for the event logs of LLM agent sessions.
//!
//! Events go into a segmented, CRC-framed, append-only log shared by all sessions; a redb
//! index maps `(session, seq)` to log positions and keeps the state a session needs to resume
//! without replaying its log. See `format-spec.md` for every byte on disk.
//!
//! Modules follow the data's path: [`event`] and [`json`] (model and validation) →
//! [`log`] (frames, segments, group commit, recovery) → [`index`] (redb) → [`session`]
//! (surface, derive, invariants, repair, fork) → [`store`] → [`projection`] → [`interop`]
//! (dsh's JSONL and SQLite files).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bench;
pub mod cli;
pub mod error;
pub mod event;
pub mod fs;
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
pub mod interop;
pub mod json;
pub mod log;
pub mod projection;
pub mod session;
pub mod store;
pub mod typed;
pub mod workload;
