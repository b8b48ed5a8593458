//! Turn/step/tool invariants (§6): dsh's invariant companion as an incremental trace.
//!
//! [`Trace::check`] validates one event against the committed trace without mutating it and
//! returns the transition; [`Trace::commit`] applies it. A violation is reported with dsh's
//! text; the transition is still computed as if the event had been accepted, so
//! [`verify`] can report every violation of a log in one pass.

use super::error::{InvariantRule, InvariantViolation};
use crate::event::{Event, Seq, SurfaceOp};
use crate::json::{Doc, N};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// When the engine enforces the invariants on append.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum InvariantMode {
    /// Never enforced (the trace is still maintained, violations are counted).
    Off,
    /// Enforced only in debug builds (`cfg!(debug_assertions)`).
    Debug,
    /// Always enforced (the default).
    #[default]
    Always,
}

impl InvariantMode {
    /// True when appends must be refused on a violation in this build.
    pub fn enforced(self) -> bool {
        match self {
            InvariantMode::Off => false,
            InvariantMode::Debug => cfg!(debug_assertions),
            InvariantMode::Always => true,
        }
    }
}

/// A JavaScript value read from event data, kept for strict equality (`===`), printing
/// (`String(v)`) and re-emitting as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TraceValue {
    /// `undefined` (the key was absent).
    Undefined,
    /// A primitive: its canonical JSON text (which identifies it under `===`) and display.
    Prim {
        /// `JSON.stringify` of the value.
        json: String,
        /// `String(value)`.
        display: String,
    },
    /// An object or array: never `===` to a value read from another event.
    Compound {
        /// `JSON.stringify` of the value.
        json: String,
        /// `String(value)`.
        display: String,
    },
}

impl TraceValue {
    /// JavaScript `null`.
    pub fn null() -> Self {
        TraceValue::Prim {
            json: "null".into(),
            display: "null".into(),
        }
    }

    /// A number.
    pub fn number(n: u64) -> Self {
        TraceValue::Prim {
            json: n.to_string(),
            display: n.to_string(),
        }
    }

    pub(crate) fn of(v: Option<N<'_, '_>>) -> Self {
        match v {
            None => TraceValue::Undefined,
            Some(v) if v.is_primitive() => {
                let json = v.stringify();
                // `String(n)` and `JSON.stringify(n)` agree on every finite number.
                let display = match v.as_f64() {
                    Some(n) if n.is_finite() => json.clone(),
                    _ => v.js_display(),
                };
                TraceValue::Prim { json, display }
            }
            Some(v) => TraceValue::Compound {
                json: v.stringify(),
                display: v.js_display(),
            },
        }
    }

    /// JavaScript `===`.
    pub fn strict_eq(&self, other: &TraceValue) -> bool {
        match (self, other) {
            (TraceValue::Undefined, TraceValue::Undefined) => true,
            (TraceValue::Prim { json: a, .. }, TraceValue::Prim { json: b, .. }) => a == b,
            _ => false,
        }
    }

    /// True for `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, TraceValue::Prim { json, .. } if json == "null")
    }

    /// `String(value)`.
    pub fn display(&self) -> &str {
        match self {
            TraceValue::Undefined => "undefined",
            TraceValue::Prim { display, .. } | TraceValue::Compound { display, .. } => display,
        }
    }

    /// The value's JSON text, `None` for `undefined` (which `JSON.stringify` drops).
    pub fn json(&self) -> Option<&str> {
        match self {
            TraceValue::Undefined => None,
            TraceValue::Prim { json, .. } | TraceValue::Compound { json, .. } => Some(json),
        }
    }
}

/// `v === n` for the values that need no printing (absent, null, booleans, safe integers);
/// `None` when it takes [`TraceValue::of`] to tell.
fn fast_strict_eq(v: &TraceValue, n: Option<N<'_, '_>>) -> Option<bool> {
    let Some(n) = n else {
        return Some(matches!(v, TraceValue::Undefined));
    };
    if !n.is_primitive() {
        // An object read from this event is never `===` to a value kept from another.
        return Some(false);
    }
    let TraceValue::Prim { json, .. } = v else {
        return Some(false);
    };
    if n.is_null() {
        return Some(json == "null");
    }
    if let Some(b) = n.as_bool() {
        return Some(json == if b { "true" } else { "false" });
    }
    let x = n.as_f64()?;
    if x.fract() != 0.0 || x.abs() > crate::event::MAX_SAFE_INTEGER as f64 {
        return None;
    }
    // An integer below 2^53 prints as its decimal digits (`-0` as `0`).
    let mut buf = [0u8; 24];
    let mut i = buf.len();
    let mut m = x.abs() as u64;
    loop {
        i -= 1;
        buf[i] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    if x < 0.0 {
        i -= 1;
        buf[i] = b'-';
    }
    Some(json.as_bytes() == &buf[i..])
}

/// The invariant companion's per-session trace (§6.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    last_seq: Option<Seq>,
    open_turn: TraceValue,
    open_step: TraceValue,
    next_turn: u64,
    next_step: u64,
    /// Pending call ids (canonical JSON of primitive ids; object ids can never match).
    pending_calls: BTreeSet<String>,
}

impl Default for Trace {
    fn default() -> Self {
        Trace {
            last_seq: None,
            open_turn: TraceValue::null(),
            open_step: TraceValue::null(),
            next_turn: 1,
            next_step: 1,
            pending_calls: BTreeSet::new(),
        }
    }
}

/// A computed, not yet committed, trace transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceTransition {
    last_seq: Seq,
    /// The open turn after the event (`None`: unchanged).
    open_turn: Option<TraceValue>,
    /// The open step after the event (`None`: unchanged).
    open_step: Option<TraceValue>,
    next_turn: u64,
    next_step: u64,
    pending: PendingOp,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum PendingOp {
    None,
    Add(Option<String>),
    Delete(Option<String>),
    Clear,
}

fn key_of(v: &TraceValue) -> Option<String> {
    match v {
        TraceValue::Prim { json, .. } => Some(json.clone()),
        TraceValue::Undefined => Some("undefined".into()),
        TraceValue::Compound { .. } => None,
    }
}

impl Trace {
    /// A fresh trace (`lastSeq -1`, nothing open, next turn 1).
    pub fn new() -> Self {
        Trace::default()
    }

    /// The open turn (`null` when none).
    pub fn open_turn(&self) -> &TraceValue {
        &self.open_turn
    }

    /// The open step (`null` when none).
    pub fn open_step(&self) -> &TraceValue {
        &self.open_step
    }

    /// Validates `event` against the trace. Returns the transition (as if accepted) and the
    /// first violated rule, if any.
    pub fn check(&self, event: &Event) -> (TraceTransition, Option<InvariantViolation>) {
        let doc = Doc::parse(&event.data).ok();
        self.check_parsed(event, doc.as_ref().map(|d| d.root()))
    }

    /// [`Trace::check`] with `data` already parsed (`None`: not JSON).
    pub(crate) fn check_parsed(
        &self,
        event: &Event,
        data: Option<N<'_, '_>>,
    ) -> (TraceTransition, Option<InvariantViolation>) {
        let mut t = TraceTransition {
            last_seq: event.seq,
            open_turn: None,
            open_step: None,
            next_turn: self.next_turn,
            next_step: self.next_step,
            pending: PendingOp::None,
        };
        let violation = self.rules(event, data, &mut t).err();
        (
            t,
            violation.map(|(rule, detail)| InvariantViolation {
                seq: event.seq,
                rule,
                detail,
            }),
        )
    }

    fn rules(
        &self,
        event: &Event,
        data: Option<N<'_, '_>>,
        t: &mut TraceTransition,
    ) -> Result<(), (InvariantRule, String)> {
        let mut fails: Vec<(InvariantRule, String)> = Vec::new();
        macro_rules! fail {
            ($rule:expr, $detail:expr $(,)?) => {
                fails.push(($rule, $detail))
            };
        }
        if let Some(last) = self.last_seq
            && event.seq <= last
        {
            fail!(
                InvariantRule::Seq,
                format!("seq must strictly increase: saw {} after {last}", event.seq),
            );
        }
        // Property reads on `null` data throw in JavaScript: an unreadable event.
        let field = |name: &str| -> Result<TraceValue, (InvariantRule, String)> {
            match data {
                None => Err((
                    InvariantRule::Malformed,
                    format!("{} data is not JSON", event.kind),
                )),
                Some(d) if d.is_null() => Err((
                    InvariantRule::Malformed,
                    format!("cannot read properties of null (reading '{name}')"),
                )),
                Some(d) => Ok(TraceValue::of(d.get(name))),
            }
        };
        macro_rules! get {
            ($name:expr) => {
                match field($name) {
                    Ok(v) => v,
                    Err(e) => {
                        fails.push(e);
                        return Err(fails.remove(0));
                    }
                }
            };
        }
        let open_turn = &self.open_turn;
        let open_step = &self.open_step;
        // The hot case (a chunk or message in the open step) decided without building values.
        if matches!(event.kind.as_str(), "assistant/chunk" | "assistant/message")
            && fails.is_empty()
            && let Some(d) = data.filter(|d| !d.is_null())
            && fast_strict_eq(open_turn, d.get("turn")) == Some(true)
            && fast_strict_eq(open_step, d.get("step")) == Some(true)
        {
            return Ok(());
        }
        let require_open_step =
            |kind: &str, turn: &TraceValue, step: &TraceValue| -> Option<String> {
                if !open_turn.strict_eq(turn) || !open_step.strict_eq(step) {
                    Some(format!(
                        "{kind} names turn {}/step {} but open is turn {}/step {}",
                        turn.display(),
                        step.display(),
                        open_turn.display(),
                        open_step.display()
                    ))
                } else {
                    None
                }
            };
        match event.kind.as_str() {
            "turn/start" => {
                let turn = get!("turn");
                if !open_turn.is_null() {
                    fail!(
                        InvariantRule::TurnStart,
                        format!(
                            "turn/start {} while turn {} is still open",
                            turn.display(),
                            open_turn.display()
                        ),
                    );
                }
                if !turn.strict_eq(&TraceValue::number(self.next_turn)) {
                    fail!(
                        InvariantRule::TurnStart,
                        format!(
                            "turn/start expected turn {}, got {}",
                            self.next_turn,
                            turn.display()
                        ),
                    );
                }
                t.open_turn = Some(turn);
                t.next_step = 1;
            }
            "turn/end" => {
                let turn = get!("turn");
                if !open_turn.strict_eq(&turn) {
                    fail!(
                        InvariantRule::TurnEnd,
                        format!(
                            "turn/end {} does not match open turn {}",
                            turn.display(),
                            open_turn.display()
                        ),
                    );
                }
                if !open_step.is_null() {
                    fail!(
                        InvariantRule::TurnEnd,
                        format!(
                            "turn/end {} while step {} is still open",
                            turn.display(),
                            open_step.display()
                        ),
                    );
                }
                t.open_turn = Some(TraceValue::null());
                t.next_turn = self.next_turn + 1;
            }
            "step/start" => {
                let turn = get!("turn");
                let step = get!("step");
                if !open_turn.strict_eq(&turn) {
                    fail!(
                        InvariantRule::StepStart,
                        format!(
                            "step/start in turn {} but open turn is {}",
                            turn.display(),
                            open_turn.display()
                        ),
                    );
                }
                if !open_step.is_null() {
                    fail!(
                        InvariantRule::StepStart,
                        format!(
                            "step/start {} while step {} is still open",
                            step.display(),
                            open_step.display()
                        ),
                    );
                }
                if !step.strict_eq(&TraceValue::number(self.next_step)) {
                    fail!(
                        InvariantRule::StepStart,
                        format!(
                            "step/start expected step {} in turn {}, got {}",
                            self.next_step,
                            turn.display(),
                            step.display()
                        ),
                    );
                }
                t.open_step = Some(step);
            }
            "step/end" => {
                let turn = get!("turn");
                let step = get!("step");
                if let Some(detail) = require_open_step("step/end", &turn, &step) {
                    fail!(InvariantRule::StepEnd, detail);
                }
                t.pending = PendingOp::Clear;
                t.open_step = Some(TraceValue::null());
                t.next_step = self.next_step + 1;
            }
            "assistant/chunk" | "assistant/message" => {
                let turn = get!("turn");
                let step = get!("step");
                if let Some(detail) = require_open_step(&event.kind, &turn, &step) {
                    fail!(InvariantRule::InStep, detail);
                }
            }
            "tool/call" => {
                let turn = get!("turn");
                let step = get!("step");
                if let Some(detail) = require_open_step("tool/call", &turn, &step) {
                    fail!(InvariantRule::InStep, detail);
                }
                t.pending = PendingOp::Add(key_of(&get!("callId")));
            }
            "tool/result" => {
                if event.surface_op != Some(SurfaceOp::Append) {
                    if open_turn.is_null() {
                        fail!(
                            InvariantRule::ToolResult,
                            "tool/result surface replacement appended outside any open turn".into(),
                        );
                    }
                } else {
                    let turn = get!("turn");
                    let step = get!("step");
                    if let Some(detail) = require_open_step("tool/result", &turn, &step) {
                        fail!(InvariantRule::InStep, detail);
                    }
                    let message = data.and_then(|d| d.get("message"));
                    let call_id = TraceValue::of(
                        message
                            .and_then(|m| m.get("source"))
                            .and_then(|s| s.get("callId")),
                    );
                    let block = message.and_then(|m| m.get("content")).and_then(|c| c.at(0));
                    let Some(block) = block.filter(|b| !b.is_null()) else {
                        fails.push((
                            InvariantRule::Malformed,
                            "tool/result data.message.content[0] is missing".into(),
                        ));
                        return Err(fails.remove(0));
                    };
                    let not_started = block.get("isError").and_then(|e| e.as_bool()) == Some(true)
                        && data
                            .and_then(|d| d.get("error"))
                            .and_then(|e| e.get("code"))
                            .is_some_and(|c| c.is_str(super::repair::TOOL_NOT_STARTED));
                    let pending = key_of(&call_id).is_some_and(|k| self.pending_calls.contains(&k));
                    if !pending && !not_started {
                        fail!(
                            InvariantRule::ToolResult,
                            format!(
                                "tool/result for {} with no prior tool/call in this step",
                                call_id.display()
                            ),
                        );
                    }
                    t.pending = PendingOp::Delete(key_of(&call_id));
                }
            }
            "todo/write" | "request/header" | "request/context" if open_turn.is_null() => {
                fail!(
                    InvariantRule::Enclosed,
                    format!(
                        "{} appended outside any open turn (core execution events must be turn-enclosed)",
                        event.kind
                    ),
                );
            }
            _ => {}
        }
        if fails.is_empty() {
            Ok(())
        } else {
            Err(fails.remove(0))
        }
    }

    /// Applies a transition computed by [`Trace::check`] on this trace.
    pub fn commit(&mut self, t: TraceTransition) {
        self.last_seq = Some(t.last_seq);
        if let Some(turn) = t.open_turn {
            self.open_turn = turn;
        }
        if let Some(step) = t.open_step {
            self.open_step = step;
        }
        self.next_turn = t.next_turn;
        self.next_step = t.next_step;
        match t.pending {
            PendingOp::None => {}
            PendingOp::Add(Some(k)) => {
                self.pending_calls.insert(k);
            }
            PendingOp::Add(None) | PendingOp::Delete(None) => {}
            PendingOp::Delete(Some(k)) => {
                self.pending_calls.remove(&k);
            }
            PendingOp::Clear => self.pending_calls.clear(),
        }
    }
}

/// Checks a whole log from a fresh trace and reports every violation with its seq.
pub fn verify(events: &[Event]) -> Vec<InvariantViolation> {
    let mut trace = Trace::new();
    let mut out = Vec::new();
    for event in events {
        let (t, violation) = trace.check(event);
        out.extend(violation);
        trace.commit(t);
    }
    out
}
