//! Projections: pure folds over a session's events, checkpointed in the index.
//!
//! A projection is dsh's `ProjectionDefinition` (persistence §7.1): a **key**, a **state
//! version**, an initial state, a pure `apply(state, event)` and a `view(state)` printed as
//! JSON text. The store runs every registered projection on every append, so listing a
//! store (stats, titles, last activity) never loads a log; it checkpoints each state in the
//! index together with the seq it covers and the state version, and a cold read is
//! *checkpoint + replay of the events after it* (the restore ladder, §7.2).
//!
//! # The rules a projection follows
//! - **Pure and deterministic**: the new state depends only on the old state and the event
//!   (never on the wall clock, the store, or anything else), so a checkpoint plus a replay of
//!   the tail gives exactly the state a full fold gives.
//! - **Whole-value events**: an event that sets a value carries the complete new value (a
//!   `session/title` carries the whole title, not an edit of the previous one), so the fold
//!   needs no earlier event to interpret a later one.
//! - **Events it ignores leave the state unchanged** and `apply` returns `false` (dsh's
//!   "same reference" rule, which drives its change feed).
//! - **Bump the state version** whenever the state shape or the fold semantics change: a
//!   checkpoint written under another version is never read, the state is rebuilt instead.
//! - Folds see events **as dsh's readers present them**: older record shapes converted
//!   (persistence §1.6, [`crate::session::legacy`]). Events appended through the engine are
//!   already in the current shape.
//!
//! # State bytes
//! Each state is serialised as **UTF-8 JSON text**, for the built-ins exactly dsh's own state
//! value (the `val` of a row in dsh's projection cache, §7.3), printed as `JSON.stringify`
//! would. A checkpoint's bytes are that text; [`Checkpoint::to_record`] wraps it with the
//! version and covered seq for the index (layout in its docs). Decoding validates the state
//! as strictly as dsh's zod schema does: bytes that do not decode are reported and the state
//! is rebuilt from the log, never guessed at.
//!
//! # How the store drives it
//!
//! | step | call |
//! |---|---|
//! | open the store | [`ProjectionSet::builtin`] (or [`ProjectionSet::new`] with user projections) |
//! | create a session | [`ProjectionSet::fresh`] |
//! | append (after the event is accepted) | [`ProjectionSet::apply`]`(&mut states, &event_view)` |
//! | checkpoint (on `turn/end`, every N events, on close) | [`CheckpointPolicy::due`] → [`ProjectionSet::checkpoint`] → store each [`Checkpoint::to_record`] under `(session, key)` → [`SessionProjections::mark_checkpointed`] |
//! | cold read | rows → [`Checkpoint::from_record`] → [`ProjectionSet::restore`]`(rows, log_len)` → read events `replay_from..log_len` → [`ProjectionSet::replay`] |
//! | list / show | [`ProjectionSet::view`], [`ProjectionSet::snapshot`] |
//!
//! ```
//! use sessionlog::event::Event;
//! use sessionlog::projection::ProjectionSet;
//!
//! let set = ProjectionSet::builtin();
//! let log = vec![
//!     Event::new("turn/start", 0, 1000, r#"{"turn":1}"#),
//!     Event::new("step/start", 1, 1000, r#"{"turn":1,"step":1}"#),
//!     Event::new("assistant/chunk", 2, 1800,
//!         r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"Hi"}}"#),
//!     Event::new("assistant/message", 3, 4800,
//!         r#"{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[],"source":{"kind":"model"}},"usage":{"inputTokens":10,"outputTokens":60}}"#),
//!     Event::new("step/end", 4, 4900, r#"{"turn":1,"step":1}"#),
//!     Event::new("turn/end", 5, 4900, r#"{"turn":1,"reason":{"kind":"completed"}}"#),
//! ];
//! // Fold the first half, checkpoint, and restore from the checkpoint.
//! let mut states = set.fresh();
//! for e in &log[..3] {
//!     set.apply(&mut states, e).unwrap();
//! }
//! let rows = set.checkpoint(&states);
//! let mut restored = set.restore(rows, log.len() as u64);
//! assert_eq!(restored.replay_from, 3);
//! set.replay(&mut restored.states, log[3..].iter().cloned().map(Ok::<_, std::convert::Infallible>)).unwrap();
//! assert_eq!(
//!     set.view(&restored.states, "sessionStats").unwrap(),
//!     r#"{"turns":1,"steps":1,"llmMs":3800,"toolMs":0,"ttftMs":800,"ttftSteps":1,"decodeMs":3000,"decodeTokens":60}"#
//! );
//! ```

pub mod listing;
#[cfg(feature = "internals")]
pub mod projcache;
pub mod stats;
pub mod title;

mod checkpoint;

use crate::event::{Event, Seq};
use std::any::Any;
use std::fmt;
use std::sync::Arc;
use thiserror::Error;

pub use crate::json::JsVal;
pub use listing::{Listing, ListingProjection};
pub use stats::{SessionStats, SessionStatsProjection};
pub use title::{TitleProjection, TitleState};

pub use checkpoint::{Checkpoint, CheckpointPolicy, RECORD_FORMAT, RecordError};

/// A checkpoint's state could not be decoded (wrong shape, not JSON, not UTF-8, …).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("state bytes do not decode: {reason}")]
pub struct DecodeError {
    /// What is wrong.
    pub reason: String,
}

impl DecodeError {
    /// A decode error with a reason.
    pub fn new(reason: impl Into<String>) -> Self {
        DecodeError {
            reason: reason.into(),
        }
    }
}

/// A typed projection: the easy way to write one (wrap it with [`FoldProjection`] to register
/// it). See the [module docs](self) for the rules a fold follows.
pub trait Fold: Send + Sync + 'static {
    /// The state.
    type State: Clone + fmt::Debug + Send + Sync + 'static;
    /// The unit's key (unique within a store), e.g. `"sessionStats"`.
    fn key(&self) -> &str;
    /// The state version; bump it when the state shape or the fold semantics change.
    fn state_version(&self) -> u32;
    /// The state of an empty log.
    fn init(&self) -> Self::State;
    /// Folds one event in place; returns `false` when the state is unchanged.
    fn apply(&self, state: &mut Self::State, event: &Event) -> bool;
    /// The state's public view, as JSON text.
    fn view(&self, state: &Self::State) -> String;
    /// The state as bytes for a checkpoint.
    fn encode(&self, state: &Self::State) -> Vec<u8>;
    /// Reads bytes written by [`Fold::encode`] under the same state version; anything else
    /// must be refused, not guessed at.
    fn decode(&self, bytes: &[u8]) -> Result<Self::State, DecodeError>;
}

/// A registered projection (object-safe): makes and decodes its per-session state.
///
/// Implement [`Fold`] and wrap it in [`FoldProjection`], or implement this trait and
/// [`ProjectionState`] directly.
pub trait Projection: Send + Sync + fmt::Debug {
    /// The unit's key (unique within a [`ProjectionSet`]).
    fn key(&self) -> &str;
    /// The state version.
    fn state_version(&self) -> u32;
    /// The state of an empty log.
    fn init(&self) -> Box<dyn ProjectionState>;
    /// Decodes checkpoint bytes written under [`Projection::state_version`].
    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn ProjectionState>, DecodeError>;
}

/// One projection's state for one session, with its fold.
pub trait ProjectionState: Send + Sync + fmt::Debug {
    /// Folds one event in place; returns `false` when the state is unchanged.
    fn apply(&mut self, event: &Event) -> bool;
    /// The public view as JSON text.
    fn view(&self) -> String;
    /// The state as checkpoint bytes.
    fn encode(&self) -> Vec<u8>;
    /// A copy.
    fn clone_box(&self) -> Box<dyn ProjectionState>;
    /// For typed access ([`SessionProjections::get`]).
    fn as_any(&self) -> &dyn Any;
}

/// Registers a [`Fold`] as a [`Projection`].
#[derive(Debug)]
pub struct FoldProjection<F: Fold>(Arc<F>);

impl<F: Fold + fmt::Debug> FoldProjection<F> {
    /// Wraps a fold.
    pub fn new(fold: F) -> Self {
        FoldProjection(Arc::new(fold))
    }

    /// Wraps a fold, ready for [`ProjectionSet::new`].
    pub fn arc(fold: F) -> Arc<dyn Projection> {
        Arc::new(FoldProjection::new(fold))
    }
}

/// The state of a [`FoldProjection`]: the fold and its typed state.
pub struct FoldState<F: Fold> {
    fold: Arc<F>,
    /// The typed state.
    pub state: F::State,
}

impl<F: Fold> fmt::Debug for FoldState<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FoldState").field(&self.state).finish()
    }
}

impl<F: Fold + fmt::Debug> Projection for FoldProjection<F> {
    fn key(&self) -> &str {
        self.0.key()
    }
    fn state_version(&self) -> u32 {
        self.0.state_version()
    }
    fn init(&self) -> Box<dyn ProjectionState> {
        Box::new(FoldState {
            fold: Arc::clone(&self.0),
            state: self.0.init(),
        })
    }
    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn ProjectionState>, DecodeError> {
        Ok(Box::new(FoldState {
            fold: Arc::clone(&self.0),
            state: self.0.decode(bytes)?,
        }))
    }
}

impl<F: Fold> ProjectionState for FoldState<F> {
    fn apply(&mut self, event: &Event) -> bool {
        self.fold.apply(&mut self.state, event)
    }
    fn view(&self) -> String {
        self.fold.view(&self.state)
    }
    fn encode(&self) -> Vec<u8> {
        self.fold.encode(&self.state)
    }
    fn clone_box(&self) -> Box<dyn ProjectionState> {
        Box::new(FoldState {
            fold: Arc::clone(&self.fold),
            state: self.state.clone(),
        })
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Why a set of projections could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RegisterError {
    /// Two projections share a key.
    #[error("two projections are registered under the key {0:?}")]
    DuplicateKey(String),
    /// A projection's key is empty.
    #[error("a projection has an empty key")]
    EmptyKey,
}

/// Why an event could not be folded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ApplyError {
    /// The event comes after a gap: the unit covers fewer events than the event's seq.
    #[error(
        "projection {key:?} covers events below seq {covered}, cannot fold seq {seq} (events are missing in between)"
    )]
    Gap {
        /// The unit.
        key: String,
        /// Events below this are folded.
        covered: Seq,
        /// The event's seq.
        seq: Seq,
    },
    /// The states were made by another set of projections (`ProjectionSet`).
    #[error(
        "the session's projection states do not belong to this projection set (expected keys {expected:?}, found {found:?})"
    )]
    ForeignStates {
        /// This set's keys.
        expected: Vec<String>,
        /// The states' keys.
        found: Vec<String>,
    },
}

/// Why a replay failed.
#[derive(Debug, Error)]
pub enum ReplayError<E: std::error::Error + 'static> {
    /// Reading an event failed.
    #[error("reading the events to replay failed: {0}")]
    Read(#[source] E),
    /// Folding an event failed.
    #[error(transparent)]
    Apply(#[from] ApplyError),
}

/// One unit's state for one session.
#[derive(Debug)]
struct Cell {
    key: Arc<str>,
    state: Box<dyn ProjectionState>,
    covered: Seq,
}

impl Clone for Cell {
    fn clone(&self) -> Self {
        Cell {
            key: Arc::clone(&self.key),
            state: self.state.clone_box(),
            covered: self.covered,
        }
    }
}

/// The states of every registered projection for one session (made by
/// [`ProjectionSet::fresh`] or [`ProjectionSet::restore`]).
#[derive(Debug, Clone)]
pub struct SessionProjections {
    cells: Vec<Cell>,
    since_checkpoint: u64,
}

impl SessionProjections {
    /// Events below this seq are folded into every unit (the lowest watermark).
    pub fn covered(&self) -> Seq {
        self.cells.iter().map(|c| c.covered).min().unwrap_or(0)
    }

    /// Events below this seq are folded into the unit `key`.
    pub fn covered_by(&self, key: &str) -> Option<Seq> {
        self.cell(key).map(|c| c.covered)
    }

    /// Events folded since the last [`SessionProjections::mark_checkpointed`].
    pub fn since_checkpoint(&self) -> u64 {
        self.since_checkpoint
    }

    /// Records that the current states were checkpointed (call after the index commit).
    pub fn mark_checkpointed(&mut self) {
        self.since_checkpoint = 0;
    }

    /// The typed state of a [`FoldProjection`] unit.
    pub fn get<F: Fold>(&self, key: &str) -> Option<&F::State> {
        let cell = self.cell(key)?;
        cell.state
            .as_any()
            .downcast_ref::<FoldState<F>>()
            .map(|s| &s.state)
    }

    /// The state of unit `key`, type-erased.
    pub fn state(&self, key: &str) -> Option<&dyn ProjectionState> {
        self.cell(key).map(|c| c.state.as_ref())
    }

    fn cell(&self, key: &str) -> Option<&Cell> {
        self.cells.iter().find(|c| &*c.key == key)
    }
}

/// Where a unit's restored state came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitSource {
    /// Decoded from a usable checkpoint covering the events below `covered`.
    Checkpoint {
        /// Events below this were folded into the checkpoint.
        covered: Seq,
    },
    /// Started from `init` (the events from 0 are replayed), because of `reason`.
    Rebuilt(RebuildReason),
}

/// Why a unit's checkpoint was not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebuildReason {
    /// No checkpoint for this key.
    Missing,
    /// Written under another state version (never read: the shape may differ).
    VersionMismatch {
        /// The checkpoint's version.
        found: u32,
        /// The projection's version.
        expected: u32,
    },
    /// The state bytes do not decode.
    Undecodable(DecodeError),
    /// It covers more events than the log holds (the log was replaced or shrunk).
    Ahead {
        /// The checkpoint's covered seq.
        covered: Seq,
        /// The log's length.
        log_len: Seq,
    },
}

impl fmt::Display for RebuildReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RebuildReason::Missing => f.write_str("no checkpoint"),
            RebuildReason::VersionMismatch { found, expected } => write!(
                f,
                "checkpoint written by state version {found}, this build folds version {expected}"
            ),
            RebuildReason::Undecodable(e) => write!(f, "{e}"),
            RebuildReason::Ahead { covered, log_len } => write!(
                f,
                "checkpoint covers {covered} events but the log holds {log_len}"
            ),
        }
    }
}

/// The result of [`ProjectionSet::restore`].
#[derive(Debug)]
pub struct Restored {
    /// The states, each at its own watermark; replay the events from `replay_from` into them.
    pub states: SessionProjections,
    /// The lowest watermark: read the events `replay_from..log_len` and
    /// [`ProjectionSet::replay`] them.
    pub replay_from: Seq,
    /// For each registered unit (in registration order): where its state came from. A
    /// `Rebuilt` unit's index row should be rewritten after the replay.
    pub units: Vec<(String, UnitSource)>,
    /// Keys of checkpoints that no registered projection owns (their rows can be deleted).
    pub unknown_keys: Vec<String>,
}

impl Restored {
    /// True when some unit did not come from its checkpoint.
    pub fn rebuilt_any(&self) -> bool {
        self.units
            .iter()
            .any(|(_, s)| matches!(s, UnitSource::Rebuilt(_)))
    }
}

/// The projections registered with a store.
#[derive(Debug, Clone)]
pub struct ProjectionSet {
    units: Vec<(Arc<str>, Arc<dyn Projection>)>,
}

impl ProjectionSet {
    /// Registers projections (keys must be unique and non-empty). Order is kept: it is the
    /// order of [`ProjectionSet::checkpoint`], [`ProjectionSet::snapshot`] and the reports.
    pub fn new(registered: Vec<Arc<dyn Projection>>) -> Result<ProjectionSet, RegisterError> {
        let mut units: Vec<(Arc<str>, Arc<dyn Projection>)> = Vec::with_capacity(registered.len());
        for p in registered {
            let key = p.key();
            if key.is_empty() {
                return Err(RegisterError::EmptyKey);
            }
            if units.iter().any(|(k, _)| &**k == key) {
                return Err(RegisterError::DuplicateKey(key.to_owned()));
            }
            units.push((Arc::from(key), p));
        }
        Ok(ProjectionSet { units })
    }

    /// dsh's two units: `sessionStats` (§7.4) and `title` (§7.5).
    pub fn dsh() -> ProjectionSet {
        ProjectionSet {
            units: vec![
                (
                    Arc::from(stats::KEY),
                    FoldProjection::arc(SessionStatsProjection),
                ),
                (Arc::from(title::KEY), FoldProjection::arc(TitleProjection)),
            ],
        }
    }

    /// The built-ins: `sessionStats`, `title` and `listing` ([`listing`]).
    pub fn builtin() -> ProjectionSet {
        let mut set = ProjectionSet::dsh();
        set.units.push((
            Arc::from(listing::KEY),
            FoldProjection::arc(ListingProjection),
        ));
        set
    }

    /// The registered keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.units.iter().map(|(k, _)| &**k)
    }

    /// The projection registered under `key`.
    pub fn projection(&self, key: &str) -> Option<&Arc<dyn Projection>> {
        self.units.iter().find(|(k, _)| &**k == key).map(|(_, p)| p)
    }

    /// Number of registered projections.
    pub fn len(&self) -> usize {
        self.units.len()
    }

    /// True when nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    /// The states of an empty session.
    pub fn fresh(&self) -> SessionProjections {
        SessionProjections {
            cells: self
                .units
                .iter()
                .map(|(k, p)| Cell {
                    key: Arc::clone(k),
                    state: p.init(),
                    covered: 0,
                })
                .collect(),
            since_checkpoint: 0,
        }
    }

    fn check_states(&self, states: &SessionProjections) -> Result<(), ApplyError> {
        let same = states.cells.len() == self.units.len()
            && states
                .cells
                .iter()
                .zip(&self.units)
                .all(|(c, (k, _))| c.key == *k);
        if same {
            Ok(())
        } else {
            Err(ApplyError::ForeignStates {
                expected: self.keys().map(str::to_owned).collect(),
                found: states.cells.iter().map(|c| c.key.to_string()).collect(),
            })
        }
    }

    /// Folds the event with `seq == covered` into every unit. A unit that already covers
    /// the event (after a restore, units can sit at different watermarks) skips it; an event
    /// beyond a unit's watermark is refused ([`ApplyError::Gap`]) before any state changes.
    /// Returns `true` when some state changed.
    pub fn apply(
        &self,
        states: &mut SessionProjections,
        event: &Event,
    ) -> Result<bool, ApplyError> {
        self.check_states(states)?;
        if let Some(c) = states.cells.iter().find(|c| event.seq > c.covered) {
            return Err(ApplyError::Gap {
                key: c.key.to_string(),
                covered: c.covered,
                seq: event.seq,
            });
        }
        let mut changed = false;
        let mut folded = false;
        for cell in &mut states.cells {
            if event.seq == cell.covered {
                changed |= cell.state.apply(event);
                cell.covered += 1;
                folded = true;
            }
        }
        if folded {
            states.since_checkpoint += 1;
        }
        Ok(changed)
    }

    /// Folds events in order ([`ProjectionSet::apply`] each).
    pub fn replay<E, I>(
        &self,
        states: &mut SessionProjections,
        events: I,
    ) -> Result<(), ReplayError<E>>
    where
        E: std::error::Error + 'static,
        I: IntoIterator<Item = Result<Event, E>>,
    {
        for event in events {
            let event = event.map_err(ReplayError::Read)?;
            self.apply(states, &event)?;
        }
        Ok(())
    }

    /// A full fold of `events` (from seq 0) into fresh states.
    pub fn fold_all<'a>(
        &self,
        events: impl IntoIterator<Item = &'a Event>,
    ) -> Result<SessionProjections, ApplyError> {
        let mut states = self.fresh();
        for e in events {
            self.apply(&mut states, e)?;
        }
        Ok(states)
    }

    /// Every unit's state as a checkpoint (registration order). States of another set give
    /// an empty list.
    pub fn checkpoint(&self, states: &SessionProjections) -> Vec<Checkpoint> {
        if self.check_states(states).is_err() {
            return Vec::new();
        }
        states
            .cells
            .iter()
            .zip(&self.units)
            .map(|(c, (k, p))| Checkpoint {
                key: k.to_string(),
                version: p.state_version(),
                covered: c.covered,
                bytes: c.state.encode(),
            })
            .collect()
    }

    /// Restores the states of a session whose log holds `log_len` events from its stored
    /// checkpoints. A checkpoint is used only when its key is registered, its version is
    /// the projection's state version, it covers no more than `log_len` events, and its bytes
    /// decode; otherwise the unit starts from `init` and the reason is reported. A checkpoint
    /// is never misread. Then read the events `replay_from..log_len` and
    /// [`ProjectionSet::replay`] them. If several checkpoints carry the same key, the last
    /// one counts.
    pub fn restore(
        &self,
        checkpoints: impl IntoIterator<Item = Checkpoint>,
        log_len: Seq,
    ) -> Restored {
        let mut by_key: Vec<Option<Checkpoint>> = vec![None; self.units.len()];
        let mut unknown_keys = Vec::new();
        for cp in checkpoints {
            match self.units.iter().position(|(k, _)| **k == *cp.key) {
                Some(i) => by_key[i] = Some(cp),
                None => {
                    if !unknown_keys.contains(&cp.key) {
                        unknown_keys.push(cp.key);
                    }
                }
            }
        }
        let mut cells = Vec::with_capacity(self.units.len());
        let mut units = Vec::with_capacity(self.units.len());
        for ((key, p), cp) in self.units.iter().zip(by_key) {
            let restored = match cp {
                None => Err(RebuildReason::Missing),
                Some(cp) if cp.version != p.state_version() => {
                    Err(RebuildReason::VersionMismatch {
                        found: cp.version,
                        expected: p.state_version(),
                    })
                }
                Some(cp) if cp.covered > log_len => Err(RebuildReason::Ahead {
                    covered: cp.covered,
                    log_len,
                }),
                Some(cp) => match p.decode(&cp.bytes) {
                    Ok(state) => Ok((state, cp.covered)),
                    Err(e) => Err(RebuildReason::Undecodable(e)),
                },
            };
            let (state, covered, source) = match restored {
                Ok((state, covered)) => (state, covered, UnitSource::Checkpoint { covered }),
                Err(reason) => (p.init(), 0, UnitSource::Rebuilt(reason)),
            };
            cells.push(Cell {
                key: Arc::clone(key),
                state,
                covered,
            });
            units.push((key.to_string(), source));
        }
        let states = SessionProjections {
            cells,
            since_checkpoint: 0,
        };
        let replay_from = if self.units.is_empty() {
            log_len
        } else {
            states.covered()
        };
        Restored {
            states,
            replay_from,
            units,
            unknown_keys,
        }
    }

    /// The view of unit `key` (JSON text).
    pub fn view(&self, states: &SessionProjections, key: &str) -> Option<String> {
        states.cell(key).map(|c| c.state.view())
    }

    /// Every unit's view, in registration order.
    pub fn views(&self, states: &SessionProjections) -> Vec<(String, String)> {
        states
            .cells
            .iter()
            .map(|c| (c.key.to_string(), c.state.view()))
            .collect()
    }

    /// dsh's projection snapshot as JSON text: `{"asOfSeq":N,"values":{key: view, …}}`,
    /// where `asOfSeq` is the last event folded into every unit (-1 for an empty log).
    pub fn snapshot(&self, states: &SessionProjections) -> String {
        let mut out = String::from("{\"asOfSeq\":");
        let as_of = states.covered() as f64 - 1.0;
        crate::json::write_js_number(&mut out, as_of);
        out.push_str(",\"values\":");
        let mut entries = Vec::new();
        for c in &states.cells {
            let view = c.state.view();
            let value =
                crate::json::parse(&view, &crate::json::JsonLimits::default()).unwrap_or_default();
            entries.push((crate::json::JsString::from(&*c.key), value));
        }
        crate::json::write_json(
            &mut out,
            &crate::json::JsonValue::Object(crate::json::JsonObject::from_entries(entries)),
        );
        out.push('}');
        out
    }
}
