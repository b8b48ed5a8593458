//! dsh's `sessionStats` unit (persistence §7.4): turns, steps, model/tool/first-token/decode
//! times and decode tokens, state version 1.
//!
//! Arithmetic is JavaScript's: every counter is an `f64` (`time - startTime` is computed
//! on the two times as doubles, then clamped at 0), so the printed view is dsh's to the byte.
//!
//! Fold rules (dsh's, including its handling of odd payloads):
//! - `step/start` → `openStep = {turn, step, startTime: time, firstTokenTime: null}`.
//! - `assistant/chunk` of the open turn/step (compared with `===`), while no first token has
//!   been seen, whose `chunk` is a token delta (a `text-delta`/`reasoning-delta` with a
//!   non-empty string `text`, or a `tool-call-delta` with a non-empty string `argumentsDelta`
//!   or any `name` present) → `firstTokenTime = time`. `llm/retry` does not reset it.
//! - `assistant/message` of the open turn/step → `llmMs += max(0, time - startTime)`; with a
//!   first token, `ttftMs += max(0, first - startTime)`, `ttftSteps += 1`, and when
//!   `usage.outputTokens` is a finite number ≥ 0, `decodeMs += max(0, time - first)` and
//!   `decodeTokens += outputTokens`. Then `openStep = null`.
//! - `tool/call` → `pendingCalls[callId] = time` (the key is `callId` as a JavaScript
//!   property key). `tool/result` whose `message.source.callId` is an own key →
//!   `toolMs += max(0, time - dispatched)` and the key is removed.
//! - `step/end` → `steps += 1`; `turns += 1` when `lastTurn !== turn`; `lastTurn = turn`;
//!   `openStep = null`.
//! - `turn/end` → `pendingCalls = {}` when it is not empty.
//! - Anything else, and any event on which dsh's fold would throw (a property read on `null`,
//!   e.g. `data: null`), changes nothing.

use super::{DecodeError, Fold};
use crate::event::Event;
use crate::json::{
    JsString, JsonLimits, JsonObject, JsonValue, parse, write_js_js_string, write_js_number,
    write_json,
};
use crate::json::{JsVal, Throws, parse_data_paths, prop, property_key};

/// The unit's key.
pub const KEY: &str = "sessionStats";
/// The unit's state version.
pub const STATE_VERSION: u32 = 1;

/// The step being timed.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenStep {
    /// `data.turn` of its `step/start` (any JSON value, or `undefined`).
    pub turn: JsVal,
    /// `data.step` of its `step/start`.
    pub step: JsVal,
    /// `time` of its `step/start`.
    pub start_time: f64,
    /// `time` of its first token delta.
    pub first_token_time: Option<f64>,
}

/// The `sessionStats` state, field for field dsh's.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionStats {
    /// Distinct turns that ended a step.
    pub turns: f64,
    /// `step/end` events.
    pub steps: f64,
    /// Model time: `step/start` → `assistant/message`.
    pub llm_ms: f64,
    /// Tool time: `tool/call` → `tool/result`.
    pub tool_ms: f64,
    /// Time to first token, summed over steps with a first token.
    pub ttft_ms: f64,
    /// Steps that contributed to `ttft_ms`.
    pub ttft_steps: f64,
    /// First token → `assistant/message`, for steps that reported output tokens.
    pub decode_ms: f64,
    /// Output tokens of those steps.
    pub decode_tokens: f64,
    /// `data.turn` of the last `step/end` (`null` initially).
    pub last_turn: JsVal,
    /// The step being timed.
    pub open_step: Option<OpenStep>,
    /// Dispatched tool calls: `(callId as property key, time)`, in insertion order.
    pub pending_calls: Vec<(JsString, f64)>,
}

impl Default for SessionStats {
    fn default() -> Self {
        SessionStats {
            turns: 0.0,
            steps: 0.0,
            llm_ms: 0.0,
            tool_ms: 0.0,
            ttft_ms: 0.0,
            ttft_steps: 0.0,
            decode_ms: 0.0,
            decode_tokens: 0.0,
            last_turn: JsVal::Json(JsonValue::Null),
            open_step: None,
            pending_calls: Vec::new(),
        }
    }
}

/// `Math.max(0, x)` (never `-0`).
fn clamp(x: f64) -> f64 {
    if x > 0.0 { x } else { 0.0 }
}

fn is_token_delta(chunk: &JsVal) -> Result<bool, Throws> {
    let kind = prop(chunk, "type")?;
    let kind = kind.as_json().and_then(JsonValue::as_str);
    Ok(match kind {
        Some("text-delta" | "reasoning-delta") => prop(chunk, "text")?.is_nonempty_string(),
        Some("tool-call-delta") => {
            prop(chunk, "argumentsDelta")?.is_nonempty_string()
                || !prop(chunk, "name")?.is_undefined()
        }
        _ => false,
    })
}

/// `message.source.callId` of a `tool/result` (the legacy `{callId, content, isError}`
/// shape, which dsh's readers convert to that form, reads `callId`).
fn result_call_id(data: &JsVal) -> Result<JsVal, Throws> {
    let message = prop(data, "message")?;
    if message.is_undefined()
        && !prop(data, "callId")?.is_undefined()
        && !prop(data, "content")?.is_undefined()
        && !prop(data, "isError")?.is_undefined()
    {
        return prop(data, "callId");
    }
    prop(&prop(&message, "source")?, "callId")
}

impl SessionStats {
    fn open_step_matches(&self, data: &JsVal) -> Result<bool, Throws> {
        let Some(open) = &self.open_step else {
            return Ok(false);
        };
        Ok(open.turn.strict_eq(&prop(data, "turn")?) && open.step.strict_eq(&prop(data, "step")?))
    }

    /// Folds one event; returns `false` when nothing changed.
    pub fn apply(&mut self, event: &Event) -> bool {
        self.try_apply(event).unwrap_or(false)
    }

    fn try_apply(&mut self, event: &Event) -> Result<bool, Throws> {
        let time = event.time as f64;
        let data = |paths: &[&[&str]]| parse_data_paths(&event.data, paths).ok_or(Throws);
        match event.kind.as_str() {
            "step/start" => {
                let d = data(&[&["turn"], &["step"]])?;
                let (turn, step) = (prop(&d, "turn")?, prop(&d, "step")?);
                self.open_step = Some(OpenStep {
                    turn,
                    step,
                    start_time: time,
                    first_token_time: None,
                });
                Ok(true)
            }
            "assistant/chunk" => {
                // Cheap filters first: most chunks come after the first token.
                match &self.open_step {
                    Some(open) if open.first_token_time.is_none() => {}
                    _ => return Ok(false),
                }
                let d = data(&[&["turn"], &["step"], &["chunk"]])?;
                if !self.open_step_matches(&d)? || !is_token_delta(&prop(&d, "chunk")?)? {
                    return Ok(false);
                }
                if let Some(open) = &mut self.open_step {
                    open.first_token_time = Some(time);
                }
                Ok(true)
            }
            "assistant/message" => {
                if self.open_step.is_none() {
                    return Ok(false);
                }
                let d = data(&[&["turn"], &["step"], &["usage"]])?;
                if !self.open_step_matches(&d)? {
                    return Ok(false);
                }
                let usage = prop(&d, "usage")?;
                let output_tokens = match &usage {
                    JsVal::Json(JsonValue::Object(_)) => prop(&usage, "outputTokens")?.as_number(),
                    _ => None,
                }
                .filter(|n| n.is_finite() && *n >= 0.0);
                let Some(open) = self.open_step.take() else {
                    return Ok(false);
                };
                self.llm_ms += clamp(time - open.start_time);
                if let Some(first) = open.first_token_time {
                    self.ttft_ms += clamp(first - open.start_time);
                    self.ttft_steps += 1.0;
                    if let Some(tokens) = output_tokens {
                        self.decode_ms += clamp(time - first);
                        self.decode_tokens += tokens;
                    }
                }
                Ok(true)
            }
            "tool/call" => {
                let d = data(&[&["callId"]])?;
                let key = property_key(&prop(&d, "callId")?);
                match self.pending_calls.iter_mut().find(|(k, _)| *k == key) {
                    Some(slot) => slot.1 = time,
                    None => self.pending_calls.push((key, time)),
                }
                Ok(true)
            }
            "tool/result" => {
                if self.pending_calls.is_empty() {
                    return Ok(false);
                }
                let d = data(&[
                    &["message", "source"],
                    &["callId"],
                    &["content"],
                    &["isError"],
                ])?;
                let key = property_key(&result_call_id(&d)?);
                let Some(i) = self.pending_calls.iter().position(|(k, _)| *k == key) else {
                    return Ok(false);
                };
                let (_, dispatched) = self.pending_calls.remove(i);
                self.tool_ms += clamp(time - dispatched);
                Ok(true)
            }
            "step/end" => {
                let d = data(&[&["turn"]])?;
                let turn = prop(&d, "turn")?;
                self.steps += 1.0;
                if !self.last_turn.strict_eq(&turn) {
                    self.turns += 1.0;
                }
                self.last_turn = turn;
                self.open_step = None;
                Ok(true)
            }
            "turn/end" => {
                if self.pending_calls.is_empty() {
                    Ok(false)
                } else {
                    self.pending_calls.clear();
                    Ok(true)
                }
            }
            _ => Ok(false),
        }
    }

    /// The wire view: the first eight fields, as dsh prints them.
    pub fn view(&self) -> String {
        let mut out = String::with_capacity(128);
        for (i, (name, value)) in self.counters().iter().enumerate() {
            out.push(if i == 0 { '{' } else { ',' });
            out.push('"');
            out.push_str(name);
            out.push_str("\":");
            write_js_number(&mut out, *value);
        }
        out.push('}');
        out
    }

    fn counters(&self) -> [(&'static str, f64); 8] {
        [
            ("turns", self.turns),
            ("steps", self.steps),
            ("llmMs", self.llm_ms),
            ("toolMs", self.tool_ms),
            ("ttftMs", self.ttft_ms),
            ("ttftSteps", self.ttft_steps),
            ("decodeMs", self.decode_ms),
            ("decodeTokens", self.decode_tokens),
        ]
    }

    /// The whole state as `JSON.stringify` prints dsh's state object (keys in dsh's order;
    /// `undefined` members left out).
    pub fn to_json(&self) -> String {
        let view = self.view();
        let mut out = String::with_capacity(view.len() + 64);
        out.push_str(&view[..view.len() - 1]);
        if let JsVal::Json(v) = &self.last_turn {
            out.push_str(",\"lastTurn\":");
            write_json(&mut out, v);
        }
        out.push_str(",\"openStep\":");
        match &self.open_step {
            None => out.push_str("null"),
            Some(open) => {
                out.push('{');
                if let JsVal::Json(v) = &open.turn {
                    out.push_str("\"turn\":");
                    write_json(&mut out, v);
                    out.push(',');
                }
                if let JsVal::Json(v) = &open.step {
                    out.push_str("\"step\":");
                    write_json(&mut out, v);
                    out.push(',');
                }
                out.push_str("\"startTime\":");
                write_js_number(&mut out, open.start_time);
                out.push_str(",\"firstTokenTime\":");
                match open.first_token_time {
                    Some(t) => write_js_number(&mut out, t),
                    None => out.push_str("null"),
                }
                out.push('}');
            }
        }
        out.push_str(",\"pendingCalls\":");
        let entries = self
            .pending_calls
            .iter()
            .map(|(k, t)| (k.clone(), JsonValue::number(*t).unwrap_or(JsonValue::Null)))
            .collect();
        let ordered = JsonObject::from_entries(entries);
        out.push('{');
        for (i, (k, v)) in ordered.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_js_js_string(&mut out, k);
            out.push(':');
            write_json(&mut out, v);
        }
        out.push_str("}}");
        out
    }

    /// Reads [`SessionStats::to_json`] text, refusing anything of another shape.
    pub fn from_json(text: &str) -> Result<SessionStats, DecodeError> {
        let v = parse(text, &JsonLimits::default()).map_err(|e| DecodeError::new(e.to_string()))?;
        let obj = v.as_object().ok_or_else(|| {
            DecodeError::new(format!(
                "sessionStats state is a {}, not an object",
                v.kind_name()
            ))
        })?;
        const KEYS: [&str; 11] = [
            "turns",
            "steps",
            "llmMs",
            "toolMs",
            "ttftMs",
            "ttftSteps",
            "decodeMs",
            "decodeTokens",
            "lastTurn",
            "openStep",
            "pendingCalls",
        ];
        if let Some((k, _)) = obj
            .iter()
            .find(|(k, _)| !k.as_str().is_some_and(|k| KEYS.contains(&k)))
        {
            return Err(DecodeError::new(format!(
                "sessionStats state has an unknown key {k:?}"
            )));
        }
        let counter = |name: &str, integer: bool| -> Result<f64, DecodeError> {
            let n = obj.get(name).and_then(JsonValue::as_f64).ok_or_else(|| {
                DecodeError::new(format!("sessionStats.{name} is missing or not a number"))
            })?;
            if !(n >= 0.0 && n.is_finite()) || (integer && n.fract() != 0.0) {
                return Err(DecodeError::new(format!(
                    "sessionStats.{name} = {n} is not a {}",
                    if integer {
                        "count"
                    } else {
                        "non-negative number"
                    }
                )));
            }
            Ok(n)
        };
        let open_step = match obj.get("openStep") {
            Some(JsonValue::Null) => None,
            Some(JsonValue::Object(o)) => {
                if let Some((k, _)) = o.iter().find(|(k, _)| {
                    !k.as_str().is_some_and(|k| {
                        ["turn", "step", "startTime", "firstTokenTime"].contains(&k)
                    })
                }) {
                    return Err(DecodeError::new(format!(
                        "sessionStats.openStep has an unknown key {k:?}"
                    )));
                }
                let start_time =
                    o.get("startTime")
                        .and_then(JsonValue::as_f64)
                        .ok_or_else(|| {
                            DecodeError::new("sessionStats.openStep.startTime is not a number")
                        })?;
                let first_token_time = match o.get("firstTokenTime") {
                    Some(JsonValue::Null) => None,
                    Some(JsonValue::Number(n)) => Some(n.value()),
                    _ => {
                        return Err(DecodeError::new(
                            "sessionStats.openStep.firstTokenTime is not a number or null",
                        ));
                    }
                };
                let member = |k: &str| o.get(k).cloned().map_or(JsVal::Undefined, JsVal::Json);
                Some(OpenStep {
                    turn: member("turn"),
                    step: member("step"),
                    start_time,
                    first_token_time,
                })
            }
            _ => {
                return Err(DecodeError::new(
                    "sessionStats.openStep is not an object or null",
                ));
            }
        };
        let pending = obj
            .get("pendingCalls")
            .and_then(JsonValue::as_object)
            .ok_or_else(|| DecodeError::new("sessionStats.pendingCalls is not an object"))?;
        let mut pending_calls = Vec::with_capacity(pending.len());
        for (k, v) in pending.iter() {
            let t = v.as_f64().ok_or_else(|| {
                DecodeError::new(format!("sessionStats.pendingCalls[{k:?}] is not a number"))
            })?;
            pending_calls.push((k.clone(), t));
        }
        Ok(SessionStats {
            turns: counter("turns", true)?,
            steps: counter("steps", true)?,
            llm_ms: counter("llmMs", false)?,
            tool_ms: counter("toolMs", false)?,
            ttft_ms: counter("ttftMs", false)?,
            ttft_steps: counter("ttftSteps", true)?,
            decode_ms: counter("decodeMs", false)?,
            decode_tokens: counter("decodeTokens", false)?,
            last_turn: obj
                .get("lastTurn")
                .cloned()
                .map_or(JsVal::Undefined, JsVal::Json),
            open_step,
            pending_calls,
        })
    }
}

/// The `sessionStats` projection ([`SessionStats`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionStatsProjection;

impl Fold for SessionStatsProjection {
    type State = SessionStats;
    fn key(&self) -> &str {
        KEY
    }
    fn state_version(&self) -> u32 {
        STATE_VERSION
    }
    fn init(&self) -> SessionStats {
        SessionStats::default()
    }
    fn apply(&self, state: &mut SessionStats, event: &Event) -> bool {
        state.apply(event)
    }
    fn view(&self, state: &SessionStats) -> String {
        state.view()
    }
    fn encode(&self, state: &SessionStats) -> Vec<u8> {
        state.to_json().into_bytes()
    }
    fn decode(&self, bytes: &[u8]) -> Result<SessionStats, DecodeError> {
        let text =
            std::str::from_utf8(bytes).map_err(|e| DecodeError::new(format!("not UTF-8: {e}")))?;
        SessionStats::from_json(text)
    }
}
