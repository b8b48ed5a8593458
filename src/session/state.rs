//! [`SessionState`]: everything an append needs, kept incrementally, and the append pipeline
//! (§1.4) split into a pure plan and an infallible apply.

use super::error::{
    InvariantViolation, RuleViolation, ShapeError, StalePlan, Subject, SurfaceError,
};
use super::invariants::{InvariantMode, Trace, TraceTransition, TraceValue};
use super::repair::{RepairScan, RepairStep};
use super::shape;
use super::surface::{Surface, SurfaceChange, plan_surface};
use super::{EventLookup, RawDefects};
use crate::event::{Event, Seq};
use crate::json::N;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use thiserror::Error;

/// The last `turn/start` or `turn/end` seen (fork boundaries, §8).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TurnMark {
    /// Its seq.
    pub seq: Seq,
    /// True for `turn/start`, false for `turn/end`.
    pub start: bool,
    /// `data.turn` as read.
    pub turn: TraceValue,
}

/// The incremental state of one session: what append validation, crash repair and fork
/// need without rescanning the log. Serialisable with serde (e.g. postcard, see
/// [`SessionState::to_bytes`]); [`SessionState::rebuild`] recreates it from the events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionState {
    next_seq: Seq,
    surface: Surface,
    commit_orders: BTreeSet<u64>,
    trace: Trace,
    repair: RepairScan,
    last_turn_mark: Option<TurnMark>,
    last_is_end_seed: bool,
    last_end_seed: Option<Seq>,
    invariants: InvariantMode,
    violations: u64,
}

impl Default for SessionState {
    fn default() -> Self {
        SessionState::new()
    }
}

/// A validated append, ready to be applied once the event is durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendPlan {
    seq: Seq,
    is_end_seed: bool,
    surface: Option<SurfaceChange>,
    commit_orders: Vec<u64>,
    trace: TraceTransition,
    violation: Option<InvariantViolation>,
    turn_mark: Option<TurnMark>,
    /// What the event changes in the repair scan; `None` when it only moves its last seq
    /// and time.
    repair: Option<RepairStep>,
    time: i64,
}

impl AppendPlan {
    /// The seq the plan is for.
    pub fn seq(&self) -> Seq {
        self.seq
    }

    /// The surface change to persist (`None` for a log-only event).
    pub fn surface_change(&self) -> Option<&SurfaceChange> {
        self.surface.as_ref()
    }

    /// An invariant violation admitted because invariants are not enforced.
    pub fn violation(&self) -> Option<&InvariantViolation> {
        self.violation.as_ref()
    }
}

/// What an applied append changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedAppend {
    /// The event's seq.
    pub seq: Seq,
    /// The surface change, if any.
    pub surface: Option<SurfaceChange>,
    /// An admitted (not enforced) invariant violation.
    pub violation: Option<InvariantViolation>,
}

/// Why a seed (replay, fork, restore) was refused: dsh's seed-loop messages (§1.5).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SeedError {
    /// Envelope, shape, receipt or commit-order rule.
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// `seq != index`.
    #[error(
        "seed event at index {index} has seq {seq} (expected {expected}); seed must be contiguous from 0"
    )]
    SeqMismatch {
        /// Index in the seed.
        index: u64,
        /// The event's seq.
        seq: Seq,
        /// The seq expected there.
        expected: Seq,
    },
    /// Surface rule, wrapped as dsh wraps it.
    #[error("invalid seed event at index {index}: {source}")]
    Surface {
        /// Index in the seed.
        index: u64,
        /// The rule.
        source: SurfaceError,
    },
    /// Invariant violation (when the seed is checked with invariants enforced).
    #[error(transparent)]
    Invariant(#[from] InvariantViolation),
}

/// How a candidate is checked: a live append or a seed element.
#[derive(Clone, Copy)]
enum Mode {
    /// `prevalidated`: the caller already ran the lossless-JSON check on `data`.
    Append {
        prevalidated: bool,
    },
    Seed {
        index: u64,
    },
}

enum CoreError {
    Append(RuleViolation),
    Seed(SeedError),
}

impl SessionState {
    /// An empty session (next seq 0) with invariants enforced ([`InvariantMode::Always`]).
    pub fn new() -> Self {
        SessionState::with_invariants(InvariantMode::default())
    }

    /// An empty session with the given invariant mode.
    pub fn with_invariants(invariants: InvariantMode) -> Self {
        SessionState {
            next_seq: 0,
            surface: Surface::new(),
            commit_orders: BTreeSet::new(),
            trace: Trace::new(),
            repair: RepairScan::new(),
            last_turn_mark: None,
            last_is_end_seed: false,
            last_end_seed: None,
            invariants,
            violations: 0,
        }
    }

    /// An empty state whose first event has seq `base` (dsh's surface window over a loaded
    /// slice of a longer log; replaces reaching before `base` fail as not found).
    pub fn starting_at(base: Seq, invariants: InvariantMode) -> Self {
        let mut state = SessionState::with_invariants(invariants);
        state.next_seq = base;
        state
    }

    /// The seq the next event must have (the log length).
    pub fn next_seq(&self) -> Seq {
        self.next_seq
    }

    /// The live surface.
    pub fn surface(&self) -> &Surface {
        &self.surface
    }

    /// The invariant mode.
    pub fn invariant_mode(&self) -> InvariantMode {
        self.invariants
    }

    /// Switches invariant enforcement for later appends.
    pub fn set_invariant_mode(&mut self, mode: InvariantMode) {
        self.invariants = mode;
    }

    /// Number of invariant violations admitted (imports, or appends with enforcement off).
    pub fn admitted_violations(&self) -> u64 {
        self.violations
    }

    /// The invariant trace.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// True when a turn is open at the tail (a resume would add closers).
    pub fn turn_open(&self) -> bool {
        self.repair.turn_open()
    }

    /// The last `turn/start`/`turn/end` of the log.
    pub fn last_turn_mark(&self) -> Option<&TurnMark> {
        self.last_turn_mark.as_ref()
    }

    /// True when the last event is `session/end-seed`.
    pub fn ends_with_end_seed(&self) -> bool {
        self.last_is_end_seed
    }

    /// Seq of the last `session/end-seed`, if any.
    pub fn last_end_seed(&self) -> Option<Seq> {
        self.last_end_seed
    }

    /// True when `order` (a `commitOrder` value) was already accepted.
    pub fn has_commit_order(&self, order: f64) -> bool {
        self.commit_orders.contains(&shape::order_key(order))
    }

    /// Plans appending `event` (§1.4, in order: envelope ranges, lossless `data`, message
    /// and request-header shape, receipts and retired vocabulary, surface, invariants,
    /// commit orders). Nothing is mutated; the first failure is returned.
    ///
    /// `event.seq` must be [`SessionState::next_seq`]. `lookup` is asked only for the target
    /// of a `tool/result` replace.
    pub fn plan_append(
        &self,
        event: &Event,
        lookup: &dyn EventLookup,
    ) -> Result<AppendPlan, RuleViolation> {
        self.plan_append_checked(event, lookup, None)
    }

    /// [`SessionState::plan_append`] for a caller that already checked `event.data` with
    /// [`crate::json::validate`] (which refuses everything the lossless boundary refuses), so
    /// the text is parsed once instead of validated twice.
    ///
    /// `spans` are the container spans [`crate::json::validate_spans`] recorded, so that the
    /// rules read only the members they look at.
    pub(crate) fn plan_append_prevalidated(
        &self,
        event: &Event,
        lookup: &dyn EventLookup,
        spans: &crate::json::Spans,
    ) -> Result<AppendPlan, RuleViolation> {
        self.plan_append_checked(event, lookup, Some(spans))
    }

    fn plan_append_checked(
        &self,
        event: &Event,
        lookup: &dyn EventLookup,
        spans: Option<&crate::json::Spans>,
    ) -> Result<AppendPlan, RuleViolation> {
        let mode = Mode::Append {
            prevalidated: spans.is_some(),
        };
        match self.plan_core(event, &RawDefects::default(), lookup, mode, spans) {
            Ok(plan) => Ok(plan),
            Err(CoreError::Append(e)) => Err(e),
            Err(CoreError::Seed(_)) => Err(RuleViolation::Envelope {
                seq: event.seq,
                kind: event.kind.clone(),
                detail: "internal: seed error on append".into(),
            }),
        }
    }

    /// Plans accepting `event` as element `index` of a seed (§1.5 steps 1–7, dsh's seed-loop
    /// messages). Invariant violations are reported in the plan, never refused here.
    pub fn plan_seed(
        &self,
        event: &Event,
        index: u64,
        defects: &RawDefects,
        lookup: &dyn EventLookup,
    ) -> Result<AppendPlan, SeedError> {
        match self.plan_core(event, defects, lookup, Mode::Seed { index }, None) {
            Ok(plan) => Ok(plan),
            Err(CoreError::Seed(e)) => Err(e),
            // Seed mode only produces seed errors; keep a sane mapping regardless.
            Err(CoreError::Append(_)) => Err(SeedError::Shape(ShapeError::InvalidEnvelope {
                subject: Subject::SeedIndex { index },
            })),
        }
    }

    fn plan_core(
        &self,
        event: &Event,
        defects: &RawDefects,
        lookup: &dyn EventLookup,
        mode: Mode,
        spans: Option<&crate::json::Spans>,
    ) -> Result<AppendPlan, CoreError> {
        let seq = event.seq;
        let kind = event.kind.as_str();
        let shape_err = |e: ShapeError| match mode {
            Mode::Append { .. } => CoreError::Append(RuleViolation::Shape { seq, source: e }),
            Mode::Seed { .. } => CoreError::Seed(SeedError::Shape(e)),
        };
        // Built only when a rule needs one (an error, or a type whose rules take it).
        let at_index = || match mode {
            Mode::Append { .. } => Subject::Append { kind: kind.into() },
            Mode::Seed { index } => Subject::SeedIndex { index },
        };
        let typed_subject = || match mode {
            Mode::Append { .. } => Subject::Append { kind: kind.into() },
            Mode::Seed { index } => Subject::SeedType {
                kind: kind.into(),
                index,
            },
        };
        // Envelope ranges (append) / lossless + envelope (seed).
        if let Mode::Append { .. } = mode
            && let Err(detail) = shape::envelope_ranges_ok(event)
        {
            return Err(CoreError::Append(RuleViolation::Envelope {
                seq,
                kind: kind.into(),
                detail: detail.into(),
            }));
        }
        let parsed = match (mode, spans) {
            (Mode::Append { prevalidated: true }, Some(spans)) => {
                crate::json::Doc::parse_prevalidated(&event.data, spans)
            }
            (Mode::Append { .. }, _) => shape::parse_data_lossless(&event.data),
            (Mode::Seed { .. }, _) => shape::parse_data_restore(&event.data),
        };
        let doc = match parsed {
            Ok(doc) => doc,
            Err(defect) => {
                return Err(shape_err(match mode {
                    Mode::Append { .. } => ShapeError::NonJsonData {
                        subject: at_index(),
                        detail: defect.clone(),
                    },
                    Mode::Seed { .. } => ShapeError::NotLossless {
                        subject: at_index(),
                        detail: defect.clone(),
                    },
                }));
            }
        };
        let data = doc.root();
        if let Mode::Seed { .. } = mode {
            if kind == "request/header-delta" {
                return Err(shape_err(ShapeError::LegacyHeaderDelta {
                    subject: at_index(),
                }));
            }
            if defects.envelope.is_some() || shape::envelope_ranges_ok(event).is_err() {
                return Err(shape_err(ShapeError::InvalidEnvelope {
                    subject: at_index(),
                }));
            }
        }
        if shape::has_payload_rules(kind) {
            shape::check_llm_shape(kind, data, &typed_subject()).map_err(shape_err)?;
            shape::check_receipts_and_legacy(kind, data, &at_index()).map_err(shape_err)?;
        }
        if let Mode::Append { .. } = mode {
            // What dsh's loader refuses or rewrites must not be stored (decisions.md).
            if kind == "mode/set" || kind == "steering/message" {
                return Err(shape_err(ShapeError::LegacyType {
                    subject: at_index(),
                    kind: kind.into(),
                }));
            }
            if (kind == "turn/start" || kind == "turn/end")
                && super::legacy::convert_event("", event, &|_| None).is_err()
            {
                return Err(shape_err(ShapeError::MalformedTurnRecord {
                    subject: at_index(),
                    kind: kind.into(),
                }));
            }
        }
        if let Mode::Seed { index } = mode
            && seq != self.next_seq
        {
            return Err(CoreError::Seed(SeedError::SeqMismatch {
                index,
                seq,
                expected: self.next_seq,
            }));
        }
        let surface =
            plan_surface(&self.surface, event, self.next_seq, defects, lookup).map_err(|e| {
                match mode {
                    Mode::Append { .. } => {
                        CoreError::Append(RuleViolation::Surface { seq, source: e })
                    }
                    Mode::Seed { index } => {
                        CoreError::Seed(SeedError::Surface { index, source: e })
                    }
                }
            })?;
        let (trace, violation) = self.trace.check_parsed(event, Some(data));
        if let (Mode::Append { .. }, Some(v)) = (mode, &violation)
            && self.invariants.enforced()
        {
            return Err(CoreError::Append(RuleViolation::Invariant {
                source: v.clone(),
            }));
        }
        let commit_orders = self.new_commit_orders(data, &at_index).map_err(shape_err)?;
        let repair = RepairScan::observes_kind(kind).then(|| RepairStep::of(event, Some(data)));
        Ok(AppendPlan {
            seq,
            is_end_seed: kind == "session/end-seed",
            surface,
            commit_orders,
            trace,
            violation,
            turn_mark: turn_mark(event, data),
            repair,
            time: event.time,
        })
    }

    fn new_commit_orders(
        &self,
        data: N<'_, '_>,
        subject: &dyn Fn() -> Subject,
    ) -> Result<Vec<u64>, ShapeError> {
        let mut fresh: Vec<u64> = Vec::new();
        for order in shape::commit_orders(data) {
            let key = shape::order_key(order);
            if self.commit_orders.contains(&key) || fresh.contains(&key) {
                return Err(ShapeError::CommitOrderReused {
                    subject: subject(),
                    order: shape::order_display(order),
                });
            }
            fresh.push(key);
        }
        Ok(fresh)
    }

    /// Commits a plan made by [`SessionState::plan_append`] or [`SessionState::plan_seed`]
    /// on this state, after the event became durable. Refuses a plan made for another seq.
    pub fn apply(&mut self, plan: AppendPlan) -> Result<AppliedAppend, StalePlan> {
        if plan.seq != self.next_seq {
            return Err(StalePlan {
                planned: plan.seq,
                next: self.next_seq,
            });
        }
        if let Some(change) = &plan.surface {
            self.surface.apply(change);
        }
        self.commit_orders.extend(plan.commit_orders);
        self.trace.commit(plan.trace);
        match plan.repair {
            Some(step) => self.repair.apply(plan.seq, plan.time, step),
            None => self.repair.observe_last(plan.seq, plan.time),
        }
        if plan.turn_mark.is_some() {
            self.last_turn_mark = plan.turn_mark;
        }
        self.last_is_end_seed = plan.is_end_seed;
        if plan.is_end_seed {
            self.last_end_seed = Some(plan.seq);
        }
        if plan.violation.is_some() {
            self.violations += 1;
        }
        self.next_seq += 1;
        Ok(AppliedAppend {
            seq: plan.seq,
            surface: plan.surface,
            violation: plan.violation,
        })
    }

    /// Plans and applies in one step (for callers that keep the log in memory).
    pub fn append(
        &mut self,
        event: &Event,
        lookup: &dyn EventLookup,
    ) -> Result<AppliedAppend, RuleViolation> {
        let plan = self.plan_append(event, lookup)?;
        Ok(self.apply(plan)?)
    }

    /// Rebuilds the state from a whole log (a seed from seq 0), validating every event with
    /// dsh's seed rules (§1.5). With `invariants` enforced, the first invariant violation
    /// is refused after the whole seed passed the other rules (as dsh's companion replays a
    /// created session); otherwise violations are only counted.
    pub fn rebuild(events: &[Event], invariants: InvariantMode) -> Result<SessionState, SeedError> {
        let mut state = SessionState::with_invariants(invariants);
        let mut first_violation = None;
        for (index, event) in events.iter().enumerate() {
            let lookup = &events[..index];
            let plan = state.plan_seed(event, index as u64, &RawDefects::default(), &lookup)?;
            let applied = state.apply(plan).map_err(|stale| SeedError::SeqMismatch {
                index: index as u64,
                seq: stale.planned,
                expected: stale.next,
            })?;
            if first_violation.is_none() {
                first_violation = applied.violation;
            }
        }
        if let Some(v) = first_violation
            && invariants.enforced()
        {
            return Err(SeedError::Invariant(v));
        }
        Ok(state)
    }

    /// The closers a resume must append before anything else (§7); empty when the tail is
    /// balanced. They reuse the last event's time.
    pub fn closers(&self) -> Vec<Event> {
        self.repair.closers()
    }

    /// What dsh appends when a stored session is resumed for writing: the crash closers,
    /// then `session/end-seed` (`data: {}`, time `now`) unless the log (with closers)
    /// already ends with one. An empty log gets only the end-seed marker.
    pub fn resume_events(&self, now: i64) -> Vec<Event> {
        let mut out = self.closers();
        let ends_with_marker = if out.is_empty() {
            self.last_is_end_seed
        } else {
            false
        };
        if !ends_with_marker {
            let seq = self.next_seq + out.len() as u64;
            out.push(Event::new("session/end-seed", seq, now, "{}"));
        }
        out
    }

    /// Serialises the state with postcard.
    pub fn to_bytes(&self) -> Result<Vec<u8>, postcard::Error> {
        postcard::to_allocvec(self)
    }

    /// Deserialises a state written by [`SessionState::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<SessionState, postcard::Error> {
        postcard::from_bytes(bytes)
    }
}

fn turn_mark(event: &Event, data: N<'_, '_>) -> Option<TurnMark> {
    let start = match event.kind.as_str() {
        "turn/start" => true,
        "turn/end" => false,
        _ => return None,
    };
    Some(TurnMark {
        seq: event.seq,
        start,
        turn: TraceValue::of(data.get("turn")),
    })
}
