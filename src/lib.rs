//! # sessionlog
//!
//! An embedded database engine for the event logs of LLM agent sessions.
//!
//! Events go into a segmented, CRC-framed, append-only log shared by all sessions; a redb
//! index maps `(session, seq)` to log positions and keeps the state a session needs to resume
//! without replaying its log. See `format-spec.md` for every byte on disk.
//!
//! The whole API is re-exported here: [`Store`] and its [`Config`], the [`Session`] handle,
//! [`Event`] and [`SessionHeader`], the typed dsh events of [`typed`], the durability and
//! recovery modes, the [`Receipt`], and the errors ([`Error`] covers every operation family).
//! With the default `interop` feature, [`import`] and [`export`] read and write dsh's JSONL and
//! SQLite files.
//!
//! ```
//! use sessionlog::typed::{TurnEnd, TurnStart, UserMessage};
//! use sessionlog::{Config, SessionHeader, Store};
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path(), Config::default())?;
//! let session = store.create(SessionHeader::new("s1", 1_767_225_600_000))?;
//! session.append(TurnStart::new(1))?;
//! session.append(UserMessage::text("hi"))?;
//! session.append(TurnEnd::completed(1))?;
//! assert_eq!(session.messages()?.len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Modules follow the data's path: event model and JSON validation → frames and segments
//! (`log`) → the redb index → sessions (surface, derive, invariants, repair, fork) → the store
//! → projections → interop. They are private; the `internals` feature makes them public for
//! the fuzz bodies, the bench harness and the tests, with no stability promise.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Without `internals`, the items only the fuzz bodies, the bench harness and the tests reach
// (the simulated file system, index dumps, frame decoders) have no user in this crate.
#![cfg_attr(not(feature = "internals"), allow(dead_code, unused_imports))]

/// Declares the engine's modules: public with the `internals` feature, private without.
macro_rules! internal_modules {
    ($($name:ident),* $(,)?) => {$(
        #[cfg(feature = "internals")]
        pub mod $name;
        #[cfg(not(feature = "internals"))]
        mod $name;
    )*};
}

internal_modules!(
    error, event, fs, index, json, log, projection, session, store
);
#[cfg(feature = "interop")]
internal_modules!(interop);

pub mod typed;

pub use error::{
    AppendError, CompressionError, Damage, DecodeError, Error, IndexError, LogPosition, OpenError,
    ReadError, ReplayFailure, WriteFailure,
};
pub use event::{Event, Seq, SessionHeader, SurfaceOp};
pub use json::{JsonError, JsonLimits};
pub use log::scan::{BadFrame, RecoveryMode};
pub use session::derive::DerivedMessage;
pub use session::error::HeaderError;
pub use session::{InvariantMode, RuleViolation};
pub use store::{
    Config, Durability, Events, ForkFailure, Intent, Listed, Receipt, RecoveryReport, Session,
    SessionInfo, Store, VerifyReport,
};

#[cfg(feature = "interop")]
pub use interop::export::{
    ExportError, ExportFormat, ExportLayout, ExportProgress, ExportReport, export,
};
#[cfg(feature = "interop")]
pub use interop::import::{
    Cut, CutAt, FileImportError, ImportOptions, ImportProgress, ImportReport, ImportedSession,
    Source, SourceFormat, discover, import_paths, import_sources,
};
#[cfg(feature = "interop")]
pub use interop::sqlite::SchemaVersion;
