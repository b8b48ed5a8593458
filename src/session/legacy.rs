//! Read-side conversion of older record shapes (persistence §1.6), exactly as dsh's
//! stored-event normalisation does it.
//!
//! The stored bytes are never rewritten: conversion produces a *view* of the changed events
//! ([`LegacyView`]), which is what the surface, the derived messages and the other rules
//! read. Unchanged events are not copied.

use super::EventLookup;
use super::error::{LookupError, ShapeError, Subject};
use super::shape;
use crate::event::{Event, Seq, SurfaceOp};
use crate::json::{Doc, N, ObjWriter, json_string};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use thiserror::Error;

/// Why a stored log cannot be normalised (dsh's messages).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LegacyError {
    /// A retired record dsh refuses outright.
    #[error("session \"{id}\" contains unsupported legacy {what} at seq {seq}")]
    Unsupported {
        /// Session id.
        id: String,
        /// `request/header-delta event`, `mode/set event` or `request/header reason "fallback"`.
        what: &'static str,
        /// The event's seq.
        seq: Seq,
    },
    /// An old shape that does not match any form dsh upgrades.
    #[error("session \"{id}\" contains malformed pre-react-loop {kind} at seq {seq}")]
    Malformed {
        /// Session id.
        id: String,
        /// `turn/start`, `turn/end` or `steering/message`.
        kind: &'static str,
        /// The event's seq.
        seq: Seq,
    },
    /// The (converted) message fails dsh's message-shape rules.
    #[error(transparent)]
    Shape(#[from] ShapeError),
}

/// The converted events of a stored log, by seq (only those that changed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LegacyView {
    changed: BTreeMap<Seq, Event>,
}

fn legacy_id(id: &str, seq: Seq) -> String {
    json_string(&format!("legacy-message:{id}:{seq}"))
}

/// Does `obj` have exactly the `required` keys plus possibly some `optional` ones?
fn has_only_keys(obj: N<'_, '_>, required: &[&str], optional: &[&str]) -> bool {
    obj.entries().iter().all(|(k, _)| {
        k.as_str()
            .is_some_and(|k| required.contains(&k) || optional.contains(&k))
    }) && required.iter().all(|k| obj.has(k))
}

fn record<'d, 't>(v: Option<N<'d, 't>>) -> Option<N<'d, 't>> {
    v.filter(|v| v.is_object())
}

fn safe_int_at_least(v: Option<N<'_, '_>>, min: f64) -> bool {
    v.and_then(|v| v.as_f64())
        .is_some_and(|n| crate::json::is_safe_integer(n) && n >= min)
}

/// The message id carried by a (converted) event, as JSON text.
fn event_message_id(kind: &str, data: N<'_, '_>) -> Option<String> {
    let data = record(Some(data))?;
    let message = if kind == "user/message" {
        Some(data)
    } else {
        record(data.get("message"))
    };
    message
        .and_then(|m| m.get("id"))
        .filter(|id| id.as_js_str().is_some())
        .map(|id| id.stringify())
}

/// False when neither [`shape::check_message_shape`] nor [`event_message_id`] can find
/// anything in `event` without parsing it: not one of the message kinds, and no key
/// `message` in its JSON (such a key is spelled out, or written with `\u` escapes).
fn may_name_a_message(event: &Event) -> bool {
    matches!(
        event.kind.as_str(),
        "user/message" | "assistant/message" | "tool/result"
    ) || event.data.contains("\"message\"")
        || event.data.contains("\\u")
}

fn with_data(event: &Event, kind: &str, data: String) -> Event {
    let mut out = event.clone();
    out.kind = kind.to_string();
    out.data = data;
    out
}

/// True when [`convert_event`] certainly leaves this event as it is, found from the
/// root's member keys alone (no parse): a `user/message` whose data has `id`, `role` or
/// `message`, an `assistant/message` or `tool/result` whose data has `message` (rules 4-6 of
/// §1.6 convert only events without them; no other rule applies to these types). Anything
/// else (other types, keys written with escapes) is left to the conversion.
pub(crate) fn current_message_shape(kind: &str, data: &str) -> bool {
    let marks: &[&str] = match kind {
        "user/message" => &["id", "role", "message"],
        "assistant/message" | "tool/result" => &["message"],
        _ => return false,
    };
    let start = data.len() - data.trim_start_matches([' ', '\t', '\n', '\r']).len();
    if data.as_bytes().get(start) != Some(&b'{') {
        return false;
    }
    // The usual case, dsh's key order: the identity is the first key (no value skipped).
    let first = data[start + 1..].trim_start_matches([' ', '\t', '\n', '\r']);
    if let Some(key) = first.strip_prefix('"').and_then(|k| k.split_once('"'))
        && !key.0.contains('\\')
        && marks.contains(&key.0)
    {
        return true;
    }
    let mut found = false;
    crate::json::visit_members_valid(data, start, |key, _, _| found |= marks.contains(&key));
    found
}

/// Converts one event (§1.6 rules 1–6, in dsh's order). `target_id` gives the message id
/// (JSON text) of an earlier converted event, for a legacy `tool/result` replace. Returns
/// `None` when the event is already in the current shape.
pub fn convert_event(
    session_id: &str,
    event: &Event,
    target_id: &dyn Fn(Seq) -> Option<String>,
) -> Result<Option<Event>, LegacyError> {
    // Only these types have older shapes; the rest (most of a log: chunks, steps, tool
    // calls) pass unchanged without being parsed.
    if !matches!(
        event.kind.as_str(),
        "turn/start"
            | "turn/end"
            | "steering/message"
            | "user/message"
            | "assistant/message"
            | "tool/result"
    ) {
        return Ok(None);
    }
    if current_message_shape(&event.kind, &event.data) {
        return Ok(None);
    }
    convert_parsed(session_id, event, target_id)
}

/// [`convert_event`] past its shortcuts: the event's data parsed and every rule applied.
fn convert_parsed(
    session_id: &str,
    event: &Event,
    target_id: &dyn Fn(Seq) -> Option<String>,
) -> Result<Option<Event>, LegacyError> {
    let Ok(doc) = Doc::parse(&event.data) else {
        return Ok(None);
    };
    let mut current: Option<Event> = None;
    // 1. turn/start with a trigger.
    if event.kind == "turn/start"
        && let Some(data) = record(Some(doc.root()))
        && data.has("trigger")
    {
        let trigger = record(data.get("trigger"));
        let ok = safe_int_at_least(data.get("turn"), 1.0)
            && has_only_keys(data, &["turn", "trigger"], &[])
            && trigger.is_some_and(|t| t.get("kind").is_some_and(|k| k.is_nonempty_str()));
        if !ok {
            return Err(LegacyError::Malformed {
                id: session_id.into(),
                kind: "turn/start",
                seq: event.seq,
            });
        }
        let mut w = ObjWriter::new();
        w.set(
            "turn",
            data.get("turn").map(|t| t.stringify()).unwrap_or_default(),
        );
        current = Some(with_data(event, "turn/start", w.finish()));
    }
    // 2. turn/end: validated always, old reasons mapped.
    if event.kind == "turn/end"
        && let Some(data) = record(Some(doc.root()))
    {
        let malformed = || LegacyError::Malformed {
            id: session_id.into(),
            kind: "turn/end",
            seq: event.seq,
        };
        let reason = record(data.get("reason"));
        if !safe_int_at_least(data.get("turn"), 1.0)
            || !has_only_keys(data, &["turn", "reason"], &[])
        {
            return Err(malformed());
        }
        let Some(reason) = reason else {
            return Err(malformed());
        };
        let Some(kind) = reason.get("kind").and_then(|k| k.as_js_str()) else {
            return Err(malformed());
        };
        let new_reason: Option<String> = match kind.as_str() {
            Some("completed" | "blocked" | "max-tokens" | "interrupted") => {
                if !has_only_keys(reason, &["kind"], &[]) {
                    return Err(malformed());
                }
                None
            }
            Some("aborted") => {
                if reason.has("reason") {
                    None
                } else if !has_only_keys(reason, &["kind"], &[]) {
                    return Err(malformed());
                } else {
                    Some(r#"{"kind":"aborted","reason":{"kind":"legacy"}}"#.into())
                }
            }
            Some("disposed") => {
                if !has_only_keys(reason, &["kind"], &[]) {
                    return Err(malformed());
                }
                Some(r#"{"kind":"aborted","reason":{"kind":"disposed"}}"#.into())
            }
            Some("error") => {
                if reason.has("error") {
                    None
                } else {
                    if !safe_int_at_least(reason.get("step"), 0.0) {
                        return Err(malformed());
                    }
                    let failure = record(reason.get("failure"));
                    let opt_ok = |f: N<'_, '_>, key: &str, want_str: bool| {
                        f.get(key).is_none_or(|v| {
                            if want_str {
                                v.as_js_str().is_some()
                            } else {
                                v.as_f64().is_some()
                            }
                        })
                    };
                    let failure_ok = failure.is_some_and(|f| {
                        has_only_keys(reason, &["kind", "step", "failure"], &[])
                            && has_only_keys(
                                f,
                                &["message", "code"],
                                &["status", "providerRetryAfterMs", "requestId"],
                            )
                            && f.get("message").is_some_and(|m| m.as_js_str().is_some())
                            && f.get("code").is_some_and(|c| c.as_js_str().is_some())
                            && opt_ok(f, "status", false)
                            && opt_ok(f, "providerRetryAfterMs", false)
                            && opt_ok(f, "requestId", true)
                    });
                    if let (true, Some(f)) = (failure_ok, failure) {
                        let mut w = ObjWriter::new();
                        w.set("kind", json_string("error"));
                        w.set("error", f.stringify());
                        Some(w.finish())
                    } else {
                        let code = reason.get("code");
                        let keys: &[&str] = if code.is_none() {
                            &["kind", "step", "message"]
                        } else {
                            &["kind", "step", "message", "code"]
                        };
                        let message = reason.get("message").filter(|m| m.as_js_str().is_some());
                        let code_ok = code.is_none_or(|c| c.as_js_str().is_some());
                        let (true, Some(message), true) =
                            (has_only_keys(reason, keys, &[]), message, code_ok)
                        else {
                            return Err(malformed());
                        };
                        let mut error = ObjWriter::new();
                        error.set("message", message.stringify());
                        error.set(
                            "code",
                            code.map(|c| c.stringify())
                                .unwrap_or_else(|| json_string("UNKNOWN")),
                        );
                        let mut w = ObjWriter::new();
                        w.set("kind", json_string("error"));
                        w.set("error", error.finish());
                        Some(w.finish())
                    }
                }
            }
            _ => None,
        };
        if let Some(reason) = new_reason {
            let mut w = ObjWriter::new();
            w.spread(&data, &[]);
            w.set("reason", reason);
            current = Some(with_data(event, "turn/end", w.finish()));
        }
    }
    // 3. steering/message becomes user/message.
    if event.kind == "steering/message" {
        let malformed = || LegacyError::Malformed {
            id: session_id.into(),
            kind: "steering/message",
            seq: event.seq,
        };
        let Some(data) = record(Some(doc.root())) else {
            return Err(malformed());
        };
        let wrapped = record(data.get("message"));
        let turn_ok = data.get("turn").is_some_and(|t| t.is_safe_integer());
        if let Some(wrapped) =
            wrapped.filter(|_| turn_ok && has_only_keys(data, &["turn", "message"], &[]))
        {
            let converted = with_data(event, "user/message", wrapped.raw().to_string());
            return finish_message(session_id, &converted, target_id)
                .map(|c| Some(c.unwrap_or(converted)));
        }
        if !turn_ok || !has_only_keys(data, &["turn", "content", "source"], &[]) {
            return Err(malformed());
        }
        let mut w = ObjWriter::new();
        w.spread(&data, &["turn"]);
        w.set("id", legacy_id(session_id, event.seq));
        w.set("role", json_string("user"));
        let converted = with_data(event, "user/message", w.finish());
        return finish_message(session_id, &converted, target_id)
            .map(|c| Some(c.unwrap_or(converted)));
    }
    match current {
        Some(converted) => Ok(Some(
            finish_message(session_id, &converted, target_id)?.unwrap_or(converted),
        )),
        None => finish_message(session_id, event, target_id),
    }
}

/// Rule 4–6: message events without identities get the current wrapper.
fn finish_message(
    session_id: &str,
    event: &Event,
    target_id: &dyn Fn(Seq) -> Option<String>,
) -> Result<Option<Event>, LegacyError> {
    let Ok(doc) = Doc::parse(&event.data) else {
        return Ok(None);
    };
    let Some(data) = record(Some(doc.root())) else {
        return Ok(None);
    };
    match event.kind.as_str() {
        "user/message" => {
            if data.has("id")
                || data.has("role")
                || data.has("message")
                || !data.has("content")
                || !data.has("source")
            {
                return Ok(None);
            }
            let mut w = ObjWriter::new();
            w.spread(&data, &[]);
            w.set("id", legacy_id(session_id, event.seq));
            w.set("role", json_string("user"));
            Ok(Some(with_data(event, "user/message", w.finish())))
        }
        "assistant/message" => {
            if data.has("message") || !data.has("content") || !data.has("provenance") {
                return Ok(None);
            }
            let mut source = ObjWriter::new();
            if let Some(p) = record(data.get("provenance")) {
                source.spread(&p, &[]);
            }
            source.set("kind", json_string("model"));
            let mut message = ObjWriter::new();
            message.set("id", legacy_id(session_id, event.seq));
            message.set("role", json_string("assistant"));
            message.set(
                "content",
                data.get("content")
                    .map(|c| c.stringify())
                    .unwrap_or_default(),
            );
            message.set("source", source.finish());
            let mut w = ObjWriter::new();
            w.spread(&data, &["content", "provenance"]);
            w.set("message", message.finish());
            Ok(Some(with_data(event, "assistant/message", w.finish())))
        }
        "tool/result" => {
            if data.has("message")
                || !data.has("callId")
                || !data.has("content")
                || !data.has("isError")
            {
                return Ok(None);
            }
            let call_id = data
                .get("callId")
                .map(|c| c.stringify())
                .unwrap_or_default();
            let id = match event.surface_op {
                Some(SurfaceOp::Replace { start, .. }) => target_id(start),
                _ => Some(legacy_id(session_id, event.seq)),
            };
            let mut block = ObjWriter::new();
            block.set("type", json_string("tool-result"));
            block.set("toolCallId", call_id.clone());
            block.set(
                "content",
                data.get("content")
                    .map(|c| c.stringify())
                    .unwrap_or_default(),
            );
            block.set(
                "isError",
                data.get("isError")
                    .map(|c| c.stringify())
                    .unwrap_or_default(),
            );
            let mut source = ObjWriter::new();
            source.set("kind", json_string("tool"));
            source.set("callId", call_id);
            let mut message = ObjWriter::new();
            if let Some(id) = id {
                message.set("id", id);
            }
            message.set("role", json_string("user"));
            message.set("content", format!("[{}]", block.finish()));
            message.set("source", source.finish());
            let mut w = ObjWriter::new();
            w.spread(&data, &["callId", "content", "isError"]);
            w.set("message", message.finish());
            Ok(Some(with_data(event, "tool/result", w.finish())))
        }
        _ => Ok(None),
    }
}

/// dsh's `assertSupportedEvents`: the first retired record anywhere in the log (header
/// deltas first, then `mode/set`, then `reason: "fallback"`).
pub fn check_supported(session_id: &str, events: &[Event]) -> Result<(), LegacyError> {
    let unsupported = |what, seq| LegacyError::Unsupported {
        id: session_id.into(),
        what,
        seq,
    };
    if let Some(e) = events.iter().find(|e| e.kind == "request/header-delta") {
        return Err(unsupported("request/header-delta event", e.seq));
    }
    if let Some(e) = events.iter().find(|e| e.kind == "mode/set") {
        return Err(unsupported("mode/set event", e.seq));
    }
    let fallback = events.iter().find(|e| {
        e.kind == "request/header"
            && Doc::parse(&e.data)
                .is_ok_and(|d| d.root().get("reason").is_some_and(|r| r.is_str("fallback")))
    });
    if let Some(e) = fallback {
        return Err(unsupported("request/header reason \"fallback\"", e.seq));
    }
    Ok(())
}

impl LegacyView {
    /// Normalises a stored log as dsh's `adoptStoredEvents`: retired records refused, old
    /// shapes converted, then every message event checked against the message-shape rules
    /// (subject `session event at seq N`).
    pub fn convert(session_id: &str, events: &[Event]) -> Result<LegacyView, LegacyError> {
        check_supported(session_id, events)?;
        let mut view = LegacyView::default();
        let mut message_ids: HashMap<Seq, String> = HashMap::new();
        for event in events {
            let converted = {
                let lookup = |seq: Seq| message_ids.get(&seq).cloned();
                convert_event(session_id, event, &lookup)?
            };
            let current = converted.as_ref().unwrap_or(event);
            if may_name_a_message(current)
                && let Ok(doc) = Doc::parse(&current.data)
            {
                shape::check_message_shape(
                    &current.kind,
                    doc.root(),
                    &Subject::Stored { seq: current.seq },
                )?;
                if let Some(id) = event_message_id(&current.kind, doc.root()) {
                    message_ids.insert(current.seq, id);
                }
            }
            if let Some(c) = converted {
                view.changed.insert(event.seq, c);
            }
        }
        Ok(view)
    }

    /// True when no event changed.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty()
    }

    /// Number of converted events.
    pub fn len(&self) -> usize {
        self.changed.len()
    }

    /// The view of `stored` (the converted event, or `stored` itself).
    pub fn view<'a>(&'a self, stored: &'a Event) -> &'a Event {
        self.changed.get(&stored.seq).unwrap_or(stored)
    }

    /// Seqs of the converted events.
    pub fn changed_seqs(&self) -> impl Iterator<Item = Seq> + '_ {
        self.changed.keys().copied()
    }

    /// A lookup over `stored` that answers with the view.
    pub fn overlay<'a>(&'a self, stored: &'a [Event]) -> ViewLookup<'a> {
        ViewLookup { view: self, stored }
    }

    /// The whole view as owned events.
    pub fn apply(&self, stored: &[Event]) -> Vec<Event> {
        stored.iter().map(|e| self.view(e).clone()).collect()
    }
}

/// A [`LegacyView`] laid over the stored events ([`LegacyView::overlay`]).
#[derive(Debug, Clone, Copy)]
pub struct ViewLookup<'a> {
    view: &'a LegacyView,
    stored: &'a [Event],
}

impl EventLookup for ViewLookup<'_> {
    fn event_at(&self, seq: Seq) -> Result<Option<Cow<'_, Event>>, LookupError> {
        if let Some(e) = self.view.changed.get(&seq) {
            return Ok(Some(Cow::Borrowed(e)));
        }
        self.stored.event_at(seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A legacy `tool/result` replacing node 0: its message takes node 0's message id.
    fn replacing_zero(seq: Seq) -> Event {
        Event::new(
            "tool/result",
            seq,
            1,
            r#"{"callId":"c1","content":[{"type":"text","text":"out"}],"isError":false}"#,
        )
        .with_surface_op(SurfaceOp::Replace { start: 0, end: 0 })
    }

    /// The id the converted `tool/result` after `first` gets; `None` when it gets none (the
    /// conversion then refuses it: a message lacks an id).
    fn converted_id(first: Event) -> Option<String> {
        let events = [first, replacing_zero(1)];
        match LegacyView::convert("s", &events) {
            Ok(view) => {
                let doc = Doc::parse(&view.view(&events[1]).data).unwrap();
                let id = doc.root().get("message").and_then(|m| m.get("id"));
                id.map(|id| id.stringify())
            }
            Err(LegacyError::Shape(ShapeError::MessageLacksId { .. })) => None,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_message_id_is_found_in_any_kind_however_its_key_is_spelled() {
        for data in [
            r#"{"message":{"id":"m-7","role":"user"}}"#,
            r#"{"m\u0065ssage":{"id":"m-7","role":"user"}}"#,
        ] {
            let first = Event::new("steering/note", 0, 1, data);
            assert!(may_name_a_message(&first), "{data}");
            assert_eq!(converted_id(first).as_deref(), Some("\"m-7\""), "{data}");
        }
    }

    #[test]
    fn an_event_without_a_message_key_is_not_parsed_and_names_none() {
        let first = Event::new("assistant/chunk", 0, 1, r#"{"turn":1,"messages":[1]}"#);
        assert!(!may_name_a_message(&first));
        assert_eq!(converted_id(first), None);
    }

    /// The shortcut never skips an event the conversion would change, and does skip the
    /// current shapes of the three message types.
    #[test]
    fn current_message_shape_agrees_with_the_conversion() {
        let cases = [
            (
                "user/message",
                r#"{"id":"u1","role":"user","content":"hi"}"#,
                true,
            ),
            (
                "user/message",
                r#" {"content":"hi","source":{"kind":"user"},"id":"x"}"#,
                true,
            ),
            (
                "user/message",
                r#"{"content":"hi","source":{"kind":"user"}}"#,
                false,
            ),
            (
                "user/message",
                r#"{"content":"hi","source":{"id":"nested"}}"#,
                false,
            ),
            (
                "user/message",
                r#"{"\u0069d":"u1","content":"hi","source":{}}"#,
                false,
            ),
            (
                "assistant/message",
                r#"{"message":{"id":"m"},"turn":1}"#,
                true,
            ),
            (
                "assistant/message",
                r#"{"content":[],"provenance":{"message":1}}"#,
                false,
            ),
            ("tool/result", r#"{"turn":1,"message":{"id":"r"}}"#, true),
            (
                "tool/result",
                r#"{"callId":"c","content":[],"isError":false}"#,
                false,
            ),
            (
                "turn/end",
                r#"{"turn":1,"reason":{"kind":"disposed"},"message":{}}"#,
                false,
            ),
            ("user/message", r#"["id"]"#, false),
            ("user/message", "", false),
        ];
        for (kind, data, skipped) in cases {
            let event = Event::new(kind, 4, 0, data);
            assert_eq!(current_message_shape(kind, data), skipped, "{kind} {data}");
            // Every rule, without the shortcut.
            let converted = convert_parsed("s", &event, &|_| None);
            if skipped {
                assert!(
                    matches!(converted, Ok(None)),
                    "{kind} {data}: {converted:?}"
                );
            }
        }
        // The cases the shortcut leaves alone include ones the conversion does change.
        let legacy = Event::new(
            "user/message",
            4,
            0,
            r#"{"content":"hi","source":{"kind":"user"}}"#,
        );
        assert!(matches!(
            convert_event("s", &legacy, &|_| None),
            Ok(Some(_))
        ));
    }
}
