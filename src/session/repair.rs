//! Crash repair (§7): the synthetic events that close a log's open tail turn.
//!
//! [`RepairScan`] is dsh's `interruptedTurnClosers` scan kept incrementally (it is part of
//! [`SessionState`](super::SessionState)); [`interrupted_turn_closers`] is the pure function
//! over a whole log.

use super::invariants::TraceValue;
use crate::event::{Event, KeyOrder, Layout, Seq, SurfaceOp};
use crate::json::{Doc, N, ObjWriter, json_string};
use serde::{Deserialize, Serialize};

/// Error code of a synthetic result for a call that never started.
pub const TOOL_NOT_STARTED: &str = "TOOL_NOT_STARTED";
/// Error code of a synthetic result for a started call whose outcome is unknown.
pub const TOOL_OUTCOME_UNKNOWN: &str = "TOOL_OUTCOME_UNKNOWN";

/// Text of a synthetic result for a call that never started (dsh's constant).
pub const NOT_STARTED_TEXT: &str = "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed.";
/// Text of a synthetic result for a started call (dsh's constant).
pub const OUTCOME_UNKNOWN_TEXT: &str = "The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly.";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct PendingCall {
    /// The call id as read from the assistant block.
    id: TraceValue,
    /// `data.step` of the assistant message.
    step: TraceValue,
    /// Seq of the matching `tool/call`, once seen.
    call_seq: Option<Seq>,
}

/// What one event changes in a [`RepairScan`], read from its `data` when the append is
/// planned and folded in when it is applied (so a plan carries a few values, not a copy of
/// the scan's pending calls).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RepairStep {
    /// `turn/start` with its `data.turn`.
    TurnStart(TraceValue),
    /// `turn/end`.
    TurnEnd,
    /// `step/start` with its `data.step`.
    StepStart(TraceValue),
    /// `step/end`.
    StepEnd,
    /// `assistant/message`: its `data.step` and the ids of its tool-call blocks, in order.
    Assistant {
        /// `data.step`.
        step: TraceValue,
        /// The `id` of each `tool-call` block of `data.message.content`.
        calls: Vec<TraceValue>,
    },
    /// `tool/call` with its `data.callId`.
    ToolCall(TraceValue),
    /// `tool/result` with its `data.message.source.callId`.
    ToolResult(TraceValue),
    /// Any other kind: only the last seq and time move.
    Other,
}

impl RepairStep {
    /// Reads what `event` changes in the scan.
    pub(crate) fn of(event: &Event, data: Option<N<'_, '_>>) -> RepairStep {
        let get = |name: &str| TraceValue::of(data.and_then(|d| d.get(name)));
        match event.kind.as_str() {
            "turn/start" => RepairStep::TurnStart(get("turn")),
            "turn/end" => RepairStep::TurnEnd,
            "step/start" => RepairStep::StepStart(get("step")),
            "step/end" => RepairStep::StepEnd,
            "assistant/message" => {
                let content = data
                    .and_then(|d| d.get("message"))
                    .and_then(|m| m.get("content"));
                let calls = content
                    .map(|c| c.items())
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|block| block.get("type").is_some_and(|t| t.is_str("tool-call")))
                    .map(|block| TraceValue::of(block.get("id")))
                    .collect();
                RepairStep::Assistant {
                    step: get("step"),
                    calls,
                }
            }
            "tool/call" => RepairStep::ToolCall(get("callId")),
            "tool/result" => RepairStep::ToolResult(TraceValue::of(
                data.and_then(|d| d.get("message"))
                    .and_then(|m| m.get("source"))
                    .and_then(|s| s.get("callId")),
            )),
            _ => RepairStep::Other,
        }
    }
}

/// The closer scan: open turn, open step, pending calls in insertion order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairScan {
    open_turn: TraceValue,
    open_step: TraceValue,
    pending: Vec<PendingCall>,
    last: Option<(Seq, i64)>,
}

impl Default for RepairScan {
    fn default() -> Self {
        RepairScan {
            open_turn: TraceValue::null(),
            open_step: TraceValue::null(),
            pending: Vec::new(),
            last: None,
        }
    }
}

/// Map-key identity: primitives by value, objects never equal.
fn same_key(a: &TraceValue, b: &TraceValue) -> bool {
    a.strict_eq(b)
}

impl RepairScan {
    /// An empty scan.
    pub fn new() -> Self {
        RepairScan::default()
    }

    /// True when a turn is open (closers would be produced).
    pub fn turn_open(&self) -> bool {
        !self.open_turn.is_null()
    }

    /// Folds one event into the scan.
    pub fn observe(&mut self, event: &Event) {
        let doc = match event.kind.as_str() {
            "turn/start" | "turn/end" | "step/start" | "step/end" | "assistant/message"
            | "tool/call" | "tool/result" => Doc::parse(&event.data).ok(),
            _ => None,
        };
        self.observe_parsed(event, doc.as_ref().map(|d| d.root()));
    }

    /// True when observing an event of `kind` changes more than the last seq and time (so a
    /// plan must carry a whole new scan, see [`RepairScan::observe_last`]).
    pub(crate) fn observes_kind(kind: &str) -> bool {
        matches!(
            kind,
            "turn/start"
                | "turn/end"
                | "step/start"
                | "step/end"
                | "assistant/message"
                | "tool/call"
                | "tool/result"
        )
    }

    /// What [`RepairScan::observe`] does for a kind [`RepairScan::observes_kind`] refuses.
    pub(crate) fn observe_last(&mut self, seq: Seq, time: i64) {
        self.last = Some((seq, time));
    }

    /// [`RepairScan::observe`] with `data` already parsed.
    pub(crate) fn observe_parsed(&mut self, event: &Event, data: Option<N<'_, '_>>) {
        self.apply(event.seq, event.time, RepairStep::of(event, data));
    }

    /// Folds an event's [`RepairStep`] (read from it beforehand) into the scan.
    pub(crate) fn apply(&mut self, seq: Seq, time: i64, step: RepairStep) {
        self.last = Some((seq, time));
        match step {
            RepairStep::TurnStart(turn) => {
                self.open_turn = turn;
                self.open_step = TraceValue::null();
                self.pending.clear();
            }
            RepairStep::TurnEnd => {
                self.open_turn = TraceValue::null();
                self.open_step = TraceValue::null();
                self.pending.clear();
            }
            RepairStep::StepStart(step) => self.open_step = step,
            RepairStep::StepEnd => {
                self.pending.clear();
                self.open_step = TraceValue::null();
            }
            RepairStep::Assistant { step, calls } => {
                for id in calls {
                    if let Some(entry) = self.pending.iter_mut().find(|p| same_key(&p.id, &id)) {
                        entry.step = step.clone();
                        entry.call_seq = None;
                    } else {
                        self.pending.push(PendingCall {
                            id,
                            step: step.clone(),
                            call_seq: None,
                        });
                    }
                }
            }
            RepairStep::ToolCall(id) => {
                if let Some(entry) = self.pending.iter_mut().find(|p| same_key(&p.id, &id)) {
                    entry.call_seq = Some(seq);
                }
            }
            RepairStep::ToolResult(id) => {
                if let Some(i) = self.pending.iter().position(|p| same_key(&p.id, &id)) {
                    self.pending.remove(i);
                }
            }
            RepairStep::Other => {}
        }
    }

    /// The closers for the scanned log (empty when no turn is open), in dsh's order with
    /// dsh's fields, ids and texts; seqs continue after the last event, time is its time.
    pub fn closers(&self) -> Vec<Event> {
        let Some((last_seq, time)) = self.last else {
            return Vec::new();
        };
        if self.open_turn.is_null() {
            return Vec::new();
        }
        let mut seq = last_seq + 1;
        let mut out = Vec::new();
        let layout = Layout {
            key_order: KeyOrder::SurfaceOpFirst,
            ..Layout::default()
        };
        let set_js = |w: &mut ObjWriter, key: &str, v: &TraceValue| {
            if let Some(json) = v.json() {
                w.set(key, json);
            }
        };
        for call in &self.pending {
            let started = call.call_seq.is_some();
            let mut source = ObjWriter::new();
            source.set("kind", json_string("tool"));
            set_js(&mut source, "callId", &call.id);
            let mut text = ObjWriter::new();
            text.set("type", json_string("text"));
            text.set(
                "text",
                json_string(if started {
                    OUTCOME_UNKNOWN_TEXT
                } else {
                    NOT_STARTED_TEXT
                }),
            );
            let mut block = ObjWriter::new();
            block.set("type", json_string("tool-result"));
            set_js(&mut block, "toolCallId", &call.id);
            block.set("isError", "true");
            block.set("content", format!("[{}]", text.finish()));
            let mut message = ObjWriter::new();
            message.set(
                "id",
                json_string(&format!(
                    "interrupted-tool-result-{}-{seq}",
                    call.id.display()
                )),
            );
            message.set("role", json_string("user"));
            message.set("source", source.finish());
            message.set("content", format!("[{}]", block.finish()));
            let mut error = ObjWriter::new();
            if started {
                error.set("name", json_string("ToolOutcomeUnknownError"));
                error.set("code", json_string(TOOL_OUTCOME_UNKNOWN));
            } else {
                error.set("name", json_string("ToolNotStartedError"));
                error.set("code", json_string(TOOL_NOT_STARTED));
            }
            let mut data = ObjWriter::new();
            set_js(&mut data, "turn", &self.open_turn);
            set_js(&mut data, "step", &call.step);
            data.set("message", message.finish());
            data.set("error", error.finish());
            let mut event = Event::new("tool/result", seq, time, data.finish());
            event.surface_op = Some(SurfaceOp::Append);
            event.source_event_seqs = call.call_seq.map(|s| vec![s]);
            event.layout = layout.clone();
            out.push(event);
            seq += 1;
        }
        if !self.open_step.is_null() {
            let mut data = ObjWriter::new();
            set_js(&mut data, "turn", &self.open_turn);
            set_js(&mut data, "step", &self.open_step);
            let mut event = Event::new("step/end", seq, time, data.finish());
            event.layout = layout.clone();
            out.push(event);
            seq += 1;
        }
        let mut data = ObjWriter::new();
        set_js(&mut data, "turn", &self.open_turn);
        data.set("reason", r#"{"kind":"interrupted"}"#);
        let mut event = Event::new("turn/end", seq, time, data.finish());
        event.layout = layout;
        out.push(event);
        out
    }
}

/// dsh's `interruptedTurnClosers`: scans `events` and returns the closers (empty for an
/// empty or balanced log).
///
/// ```
/// use sessionlog::event::Event;
/// use sessionlog::session::repair::interrupted_turn_closers;
/// let log = vec![Event::new("turn/start", 0, 5, r#"{"turn":1}"#)];
/// let closers = interrupted_turn_closers(&log);
/// assert_eq!(closers.len(), 1);
/// assert_eq!(closers[0].kind, "turn/end");
/// assert_eq!(closers[0].data, r#"{"turn":1,"reason":{"kind":"interrupted"}}"#);
/// assert_eq!((closers[0].seq, closers[0].time), (1, 5));
/// ```
pub fn interrupted_turn_closers(events: &[Event]) -> Vec<Event> {
    let mut scan = RepairScan::new();
    for event in events {
        scan.observe(event);
    }
    scan.closers()
}
