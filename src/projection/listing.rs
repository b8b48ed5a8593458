//! The `listing` unit: what `sessionlog list` shows that the store's session row does not
//! already hold (the row has the header, event count, data bytes, last event time and surface
//! size). Not a dsh unit; state version 1.
//!
//! State and view (JSON, keys in this order):
//! - `turnsEnded`: number of `turn/end` events;
//! - `openTurn`: `data.turn` of a `turn/start` not yet followed by a `turn/end` (`null`
//!   otherwise): the session is mid-turn (running, or crashed before its closers);
//! - `lastEnd`: `data.reason.kind` of the last `turn/end` when it is a string (`null` before
//!   the first), e.g. `completed`, `aborted`, `error`, `interrupted`;
//! - `userMessages`: `user/message` events whose `source.kind` is `user` (typed by a person);
//! - `lastUserTime`: `time` of the last of those (`null` before the first): "last active";
//! - `titleSource`: `source.kind` of the last `session/title` (`null` before the first);
//!   `user` means the title is pinned.

use super::{DecodeError, Fold};
use crate::event::Event;
use crate::json::write_js_number;
use crate::json::{JsonLimits, JsonValue, parse, write_js_string, write_json};

/// The unit's key.
pub const KEY: &str = "listing";
/// The unit's state version.
pub const STATE_VERSION: u32 = 1;

/// The `listing` state.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Listing {
    /// `turn/end` events.
    pub turns_ended: f64,
    /// The open turn's `data.turn`.
    pub open_turn: Option<JsonValue>,
    /// `reason.kind` of the last `turn/end`.
    pub last_end: Option<String>,
    /// Person-typed user messages.
    pub user_messages: f64,
    /// Time of the last of them.
    pub last_user_time: Option<f64>,
    /// `source.kind` of the last `session/title`.
    pub title_source: Option<String>,
}

fn data(event: &Event) -> Option<JsonValue> {
    parse(&event.data, &JsonLimits::default()).ok()
}

impl Listing {
    /// Folds one event; returns `false` when nothing changed.
    pub fn apply(&mut self, event: &Event) -> bool {
        match event.kind.as_str() {
            "turn/start" => {
                let turn = data(event)
                    .and_then(|d| d.get("turn").cloned())
                    .unwrap_or_default();
                self.open_turn = Some(turn);
                true
            }
            "turn/end" => {
                self.turns_ended += 1.0;
                self.open_turn = None;
                self.last_end = data(event).and_then(|d| {
                    d.pointer(&["reason", "kind"])
                        .and_then(JsonValue::as_str)
                        .map(str::to_owned)
                });
                true
            }
            "user/message" => {
                let by_user = data(event).is_some_and(|d| {
                    d.pointer(&["source", "kind"]).and_then(JsonValue::as_str) == Some("user")
                });
                if by_user {
                    self.user_messages += 1.0;
                    self.last_user_time = Some(event.time as f64);
                }
                by_user
            }
            "session/title" => {
                let kind = data(event).and_then(|d| {
                    d.pointer(&["source", "kind"])
                        .and_then(JsonValue::as_str)
                        .map(str::to_owned)
                });
                let changed = kind != self.title_source;
                self.title_source = kind;
                changed
            }
            _ => false,
        }
    }

    /// The state (and view) as JSON text.
    pub fn to_json(&self) -> String {
        let mut out = String::from("{\"turnsEnded\":");
        write_js_number(&mut out, self.turns_ended);
        out.push_str(",\"openTurn\":");
        match &self.open_turn {
            Some(v) => write_json(&mut out, v),
            None => out.push_str("null"),
        }
        let opt_str = |out: &mut String, v: &Option<String>| match v {
            Some(s) => write_js_string(out, s),
            None => out.push_str("null"),
        };
        out.push_str(",\"lastEnd\":");
        opt_str(&mut out, &self.last_end);
        out.push_str(",\"userMessages\":");
        write_js_number(&mut out, self.user_messages);
        out.push_str(",\"lastUserTime\":");
        match self.last_user_time {
            Some(t) => write_js_number(&mut out, t),
            None => out.push_str("null"),
        }
        out.push_str(",\"titleSource\":");
        opt_str(&mut out, &self.title_source);
        out.push('}');
        out
    }

    /// Reads [`Listing::to_json`] text, refusing anything of another shape.
    pub fn from_json(text: &str) -> Result<Listing, DecodeError> {
        let v = parse(text, &JsonLimits::default()).map_err(|e| DecodeError::new(e.to_string()))?;
        let o = v
            .as_object()
            .ok_or_else(|| DecodeError::new("listing state is not an object"))?;
        let keys = [
            "turnsEnded",
            "openTurn",
            "lastEnd",
            "userMessages",
            "lastUserTime",
            "titleSource",
        ];
        if !o.has_exact_keys(&keys) {
            return Err(DecodeError::new(format!(
                "listing state keys are not {keys:?}"
            )));
        }
        let count = |k: &str| {
            o.get(k)
                .and_then(JsonValue::as_f64)
                .filter(|n| *n >= 0.0 && n.fract() == 0.0)
                .ok_or_else(|| DecodeError::new(format!("listing.{k} is not a count")))
        };
        let opt_str = |k: &str| match o.get(k) {
            Some(JsonValue::Null) => Ok(None),
            Some(JsonValue::String(s)) => s
                .as_str()
                .map(|s| Some(s.to_owned()))
                .ok_or_else(|| DecodeError::new(format!("listing.{k} holds a lone surrogate"))),
            _ => Err(DecodeError::new(format!(
                "listing.{k} is not a string or null"
            ))),
        };
        Ok(Listing {
            turns_ended: count("turnsEnded")?,
            open_turn: match o.get("openTurn") {
                Some(JsonValue::Null) | None => None,
                Some(v) => Some(v.clone()),
            },
            last_end: opt_str("lastEnd")?,
            user_messages: count("userMessages")?,
            last_user_time: match o.get("lastUserTime") {
                Some(JsonValue::Null) => None,
                Some(JsonValue::Number(n)) => Some(n.value()),
                _ => {
                    return Err(DecodeError::new(
                        "listing.lastUserTime is not a number or null",
                    ));
                }
            },
            title_source: opt_str("titleSource")?,
        })
    }
}

/// The `listing` projection ([`Listing`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct ListingProjection;

impl Fold for ListingProjection {
    type State = Listing;
    fn key(&self) -> &str {
        KEY
    }
    fn state_version(&self) -> u32 {
        STATE_VERSION
    }
    fn init(&self) -> Listing {
        Listing::default()
    }
    fn apply(&self, state: &mut Listing, event: &Event) -> bool {
        state.apply(event)
    }
    fn view(&self, state: &Listing) -> String {
        state.to_json()
    }
    fn encode(&self, state: &Listing) -> Vec<u8> {
        state.to_json().into_bytes()
    }
    fn decode(&self, bytes: &[u8]) -> Result<Listing, DecodeError> {
        let text =
            std::str::from_utf8(bytes).map_err(|e| DecodeError::new(format!("not UTF-8: {e}")))?;
        Listing::from_json(text)
    }
}
