//! Session titles (persistence §7.5): the `title` unit, dsh's `foldSessionTitle`, and the pure
//! rules a title writer follows (normalisation, the fallback title, pinning).
//!
//! A title is set by a `session/title` event (log-only, never on the surface) carrying the
//! whole new value: `{title, messageSeqs, source}` with `source` one of
//! `{kind:"fallback"}`, `{kind:"provider", provider, model?}` or `{kind:"user"}`. The last
//! such event wins. A user rename (`source.kind == "user"`) **pins** the title: no automatic
//! writer (fallback or provider) revises it until an explicit refresh.

use super::{DecodeError, Fold};
use crate::event::{Event, Seq};
use crate::json::{JsVal, parse_data, prop};
use crate::json::{JsonLimits, JsonValue, parse, stringify, write_js_string};
use thiserror::Error;

/// The unit's key.
pub const KEY: &str = "title";
/// The unit's state version.
pub const STATE_VERSION: u32 = 1;

/// The `title` unit's state: `data.title` of the last `session/title` event, or `None`
/// (JSON `null`) before the first. dsh's fold copies `data.title` whatever it is; a missing
/// `title` (which dsh would hold as `undefined` and could not persist) is held as `null`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TitleState(pub Option<JsonValue>);

impl TitleState {
    /// The title, when it is a string without lone surrogates.
    pub fn as_str(&self) -> Option<&str> {
        self.0.as_ref().and_then(JsonValue::as_str)
    }

    /// The state as JSON text (`"…"` or `null`).
    pub fn to_json(&self) -> String {
        match &self.0 {
            Some(v) => stringify(v),
            None => "null".to_owned(),
        }
    }
}

/// The `title` projection ([`TitleState`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct TitleProjection;

impl Fold for TitleProjection {
    type State = TitleState;
    fn key(&self) -> &str {
        KEY
    }
    fn state_version(&self) -> u32 {
        STATE_VERSION
    }
    fn init(&self) -> TitleState {
        TitleState(None)
    }
    fn apply(&self, state: &mut TitleState, event: &Event) -> bool {
        if event.kind != "session/title" {
            return false;
        }
        let Some(data) = parse_data(&event.data) else {
            return false;
        };
        let Ok(title) = prop(&data, "title") else {
            return false;
        };
        let new = match title {
            JsVal::Undefined | JsVal::Json(JsonValue::Null) => None,
            JsVal::Json(v) => Some(v),
        };
        // dsh's change test is `Object.is`: equal primitives are the same value, objects never.
        let same = match (&state.0, &new) {
            (None, None) => true,
            (Some(a), Some(b)) => JsVal::Json(a.clone()).strict_eq(&JsVal::Json(b.clone())),
            _ => false,
        };
        state.0 = new;
        !same
    }
    fn view(&self, state: &TitleState) -> String {
        state.to_json()
    }
    fn encode(&self, state: &TitleState) -> Vec<u8> {
        state.to_json().into_bytes()
    }
    /// dsh's schema: a non-empty string or `null`.
    fn decode(&self, bytes: &[u8]) -> Result<TitleState, DecodeError> {
        let text =
            std::str::from_utf8(bytes).map_err(|e| DecodeError::new(format!("not UTF-8: {e}")))?;
        let v = parse(text, &JsonLimits::default()).map_err(|e| DecodeError::new(e.to_string()))?;
        match &v {
            JsonValue::Null => Ok(TitleState(None)),
            JsonValue::String(s) if s.utf16_len() > 0 => {
                Ok(TitleState(Some(JsonValue::String(s.clone()))))
            }
            other => Err(DecodeError::new(format!(
                "title state is a {}, not a non-empty string or null",
                other.kind_name()
            ))),
        }
    }
}

/// dsh's `foldSessionTitle`: the last `session/title` event, as
/// `{title, messageSeqs, source, eventSeq, updatedAt}`.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionTitle {
    /// `data.title`.
    pub title: JsVal,
    /// `data.messageSeqs`.
    pub message_seqs: JsVal,
    /// `data.source`.
    pub source: JsVal,
    /// The event's seq.
    pub event_seq: Seq,
    /// The event's time.
    pub updated_at: i64,
}

impl SessionTitle {
    /// Reads a `session/title` event (`None` for other events and unreadable data).
    pub fn from_event(event: &Event) -> Option<SessionTitle> {
        if event.kind != "session/title" {
            return None;
        }
        let data = parse_data(&event.data)?;
        Some(SessionTitle {
            title: prop(&data, "title").ok()?,
            message_seqs: prop(&data, "messageSeqs").ok()?,
            source: prop(&data, "source").ok()?,
            event_seq: event.seq,
            updated_at: event.time,
        })
    }

    /// `source.kind` as a string (`fallback`, `provider`, `user`).
    pub fn source_kind(&self) -> Option<&str> {
        match &self.source {
            JsVal::Json(JsonValue::Object(o)) => o.get("kind").and_then(JsonValue::as_str),
            _ => None,
        }
    }

    /// True when a user rename set the title: automatic writers leave it alone.
    pub fn is_pinned(&self) -> bool {
        self.source_kind() == Some("user")
    }

    /// The record as JSON text (`undefined` members left out).
    pub fn to_json(&self) -> String {
        let mut out = String::from("{");
        let mut first = true;
        for (k, v) in [
            ("title", &self.title),
            ("messageSeqs", &self.message_seqs),
            ("source", &self.source),
        ] {
            if let JsVal::Json(v) = v {
                if !first {
                    out.push(',');
                }
                first = false;
                out.push('"');
                out.push_str(k);
                out.push_str("\":");
                crate::json::write_json(&mut out, v);
            }
        }
        if !first {
            out.push(',');
        }
        out.push_str(&format!("\"eventSeq\":{},\"updatedAt\":", self.event_seq));
        crate::json::write_js_number(&mut out, self.updated_at as f64);
        out.push('}');
        out
    }
}

/// dsh's `foldSessionTitle` over a log: the last `session/title` event.
pub fn fold_session_title<'a>(events: impl IntoIterator<Item = &'a Event>) -> Option<SessionTitle> {
    events
        .into_iter()
        .filter_map(SessionTitle::from_event)
        .last()
}

fn is_invisible(c: char) -> bool {
    matches!(c as u32,
        0x200B | 0x200E | 0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF)
}

/// JavaScript's `\s` (WhiteSpace and LineTerminator).
fn is_js_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r' | ' ' | '\u{A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
                | '\u{FEFF}'
    )
}

/// Removes terminal escape sequences: OSC (`ESC ]` … `BEL` or `ESC \`, or to the end), CSI
/// (`ESC [` parameter bytes `0x30–0x3F`, intermediate bytes `0x20–0x2F`, a final byte
/// `0x40–0x7E`) and two-byte escapes (`ESC` + `0x40–0x5F`).
fn strip_escapes(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c != '\u{1B}' {
            out.push(c);
            i += 1;
            continue;
        }
        match chars.get(i + 1) {
            Some(']') => {
                // OSC: up to BEL or ST (ESC \), or the end of the text.
                let mut j = i + 2;
                loop {
                    match chars.get(j) {
                        None => break,
                        Some('\u{07}') => {
                            j += 1;
                            break;
                        }
                        Some('\u{1B}') if chars.get(j + 1) == Some(&'\\') => {
                            j += 2;
                            break;
                        }
                        Some(_) => j += 1,
                    }
                }
                i = j;
            }
            Some('[') => {
                let mut j = i + 2;
                while chars
                    .get(j)
                    .is_some_and(|c| ('\u{30}'..='\u{3F}').contains(c))
                {
                    j += 1;
                }
                while chars
                    .get(j)
                    .is_some_and(|c| ('\u{20}'..='\u{2F}').contains(c))
                {
                    j += 1;
                }
                if chars
                    .get(j)
                    .is_some_and(|c| ('\u{40}'..='\u{7E}').contains(c))
                {
                    i = j + 1;
                } else {
                    // Not a complete CSI: drop the ESC alone (it is a control).
                    i += 1;
                }
            }
            Some(c) if ('\u{40}'..='\u{5F}').contains(c) => i += 2,
            _ => i += 1,
        }
    }
    out
}

/// Truncates to at most `max_bytes` of UTF-8 without splitting a code point.
fn truncate_bytes(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn clean(s: &str) -> String {
    let stripped = strip_escapes(s);
    let mut out = String::with_capacity(stripped.len());
    let mut pending_space = false;
    for c in stripped.chars() {
        let control = (c <= '\u{1F}' || ('\u{7F}'..='\u{9F}').contains(&c)) && !is_js_space(c);
        if control || is_invisible(c) {
            continue;
        }
        if is_js_space(c) {
            pending_space = true;
            continue;
        }
        if pending_space && !out.is_empty() {
            out.push(' ');
        }
        pending_space = false;
        out.push(c);
    }
    out
}

/// dsh's `normalizeSessionTitle(s, maxBytes)`: terminal escapes, controls other than
/// whitespace and bidi/invisible characters removed, whitespace runs collapsed to one space,
/// trimmed, truncated to `max_bytes` of UTF-8 without splitting a code point, trimmed again.
///
/// ```
/// use sessionlog::projection::title::normalize_session_title;
/// let t = normalize_session_title("\u{1b}]0;stolen\u{7}  Hello\t brave\nnew world  ", 80);
/// assert_eq!(t, "Hello brave new world");
/// ```
pub fn normalize_session_title(s: &str, max_bytes: usize) -> String {
    let cleaned = clean(s);
    truncate_bytes(&cleaned, max_bytes)
        .trim_end_matches(is_js_space)
        .to_owned()
}

/// dsh's `fallbackSessionTitle(text, maxWords, maxBytes)`: the first `max_words`
/// space-separated words of the normalised text, truncated like [`normalize_session_title`].
pub fn fallback_session_title(text: &str, max_words: usize, max_bytes: usize) -> String {
    let cleaned = clean(text);
    let words: Vec<&str> = cleaned.split(' ').take(max_words).collect();
    let joined = words.join(" ");
    truncate_bytes(&joined, max_bytes)
        .trim_end_matches(is_js_space)
        .to_owned()
}

/// The title text a `user/message` offers: its `text` blocks joined by `\n`, when the
/// message's `source.kind` is `user` and the text is non-empty after normalisation.
pub fn eligible_text(event: &Event) -> Option<String> {
    if event.kind != "user/message" {
        return None;
    }
    let data = parse_data(&event.data)?;
    let data = data.as_json()?;
    if data
        .pointer(&["source", "kind"])
        .and_then(JsonValue::as_str)
        != Some("user")
    {
        return None;
    }
    let content = data.get("content")?.as_array()?;
    let texts: Vec<&str> = content
        .iter()
        .filter(|b| b.get("type").and_then(JsonValue::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(JsonValue::as_str))
        .collect();
    let text = texts.join("\n");
    if clean(&text).is_empty() {
        None
    } else {
        Some(text)
    }
}

/// The title writer's limits are inconsistent.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TitleConfigError {
    /// `fallback_max_bytes` exceeds `max_title_bytes`.
    #[error("fallbackMaxBytes ({fallback}) exceeds maxTitleBytes ({max})")]
    FallbackTooLong {
        /// `fallback_max_bytes`.
        fallback: usize,
        /// `max_title_bytes`.
        max: usize,
    },
    /// A limit is zero.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
}

/// The rules of dsh's title writer (its three required config values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TitlePolicy {
    fallback_max_words: usize,
    fallback_max_bytes: usize,
    max_title_bytes: usize,
}

impl TitlePolicy {
    /// A policy; `fallback_max_bytes` must not exceed `max_title_bytes`.
    pub fn new(
        fallback_max_words: usize,
        fallback_max_bytes: usize,
        max_title_bytes: usize,
    ) -> Result<TitlePolicy, TitleConfigError> {
        if fallback_max_words == 0 {
            return Err(TitleConfigError::Zero("fallbackMaxWords"));
        }
        if fallback_max_bytes == 0 {
            return Err(TitleConfigError::Zero("fallbackMaxBytes"));
        }
        if fallback_max_bytes > max_title_bytes {
            return Err(TitleConfigError::FallbackTooLong {
                fallback: fallback_max_bytes,
                max: max_title_bytes,
            });
        }
        Ok(TitlePolicy {
            fallback_max_words,
            fallback_max_bytes,
            max_title_bytes,
        })
    }

    /// A provider's or user's title, normalised to `maxTitleBytes` (`None` when empty).
    pub fn normalize(&self, title: &str) -> Option<String> {
        Some(normalize_session_title(title, self.max_title_bytes)).filter(|t| !t.is_empty())
    }

    /// The `data` of the fallback `session/title` event to append after `event`, when the
    /// session has no title yet (`current` is the `title` unit's state) and `event` is an
    /// eligible user message: `{"title":…,"messageSeqs":[seq],"source":{"kind":"fallback"}}`.
    pub fn fallback_for(&self, current: &TitleState, event: &Event) -> Option<String> {
        if current.0.is_some() {
            return None;
        }
        let text = eligible_text(event)?;
        let title = fallback_session_title(&text, self.fallback_max_words, self.fallback_max_bytes);
        if title.is_empty() {
            return None;
        }
        Some(title_data(&title, &[event.seq], "{\"kind\":\"fallback\"}"))
    }

    /// The `data` of a user rename (`messageSeqs: []`, `source: {kind:"user"}`), which pins
    /// the title; `None` when the name is empty after normalisation.
    pub fn rename(&self, name: &str) -> Option<String> {
        let title = self.normalize(name)?;
        Some(title_data(&title, &[], "{\"kind\":\"user\"}"))
    }

    /// True when an automatic writer (fallback, provider) may set a title: the last title
    /// event, if any, is not a user rename.
    pub fn may_revise(last: Option<&SessionTitle>) -> bool {
        !last.is_some_and(SessionTitle::is_pinned)
    }
}

fn title_data(title: &str, seqs: &[Seq], source: &str) -> String {
    let mut out = String::from("{\"title\":");
    write_js_string(&mut out, title);
    out.push_str(",\"messageSeqs\":[");
    for (i, s) in seqs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&s.to_string());
    }
    out.push_str("],\"source\":");
    out.push_str(source);
    out.push('}');
    out
}
