//! A [`Doc`] of already validated text, read one level at a time (crate-internal).
//!
//! The append path validates `data` first ([`crate::json::validate`]); the session rules then
//! read a handful of members near the root. [`Doc::parse_prevalidated`] reads only the root's
//! own members: scalars are decoded, nested objects and arrays are skipped (strings eight
//! bytes at a time) and kept as lazy nodes that are read, again one level, the first time a
//! rule looks inside them. A chunk's `chunk` object or a tool result's output is thus never
//! turned into nodes. Every [`super::N`] accessor resolves lazy nodes, so the rules see the
//! same values, spans and `JSON.stringify` output as with [`Doc::parse_lossless`].

use std::cell::OnceCell;

use super::doc::{Doc, NodeData, Payload, js_str};
use super::parse::{Literal, Sink, drive, plain_run_end, skip_ws};
use super::raw::skip_value_valid;
use super::value::normalize_entries;
use super::{JsonError, JsonLimits, NegativeZero};

/// Where every object and array of a validated text starts and ends (byte after its closing
/// bracket), in order of their starts: what lets [`Doc::parse_prevalidated`] step over a
/// nested value without reading it again.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Spans {
    pairs: Vec<(usize, usize)>,
}

impl Spans {
    /// The (start, end) pairs, ordered by start.
    pub(crate) fn pairs(&self) -> &[(usize, usize)] {
        &self.pairs
    }
}

struct SpanSink<'s> {
    pairs: &'s mut Vec<(usize, usize)>,
    /// The containers not yet closed: inline up to 16 deep (no allocation per event).
    open: smallvec::SmallVec<[usize; 16]>,
}

impl<'a> Sink<'a> for SpanSink<'_> {
    const WANTS_NUMBERS: bool = false;
    fn begin_array(&mut self, start: usize) {
        self.open.push(self.pairs.len());
        self.pairs.push((start, start));
    }
    fn begin_object(&mut self, start: usize) {
        self.begin_array(start);
    }
    fn key(&mut self, _: &'a str, _: bool) {}
    fn string(&mut self, _: &'a str, _: bool, _: usize) {}
    fn number(&mut self, _: &'a str, _: f64, _: usize) {}
    fn literal(&mut self, _: Literal, _: usize) {}
    fn end_container(&mut self, end: usize) {
        if let Some(i) = self.open.pop()
            && let Some(pair) = self.pairs.get_mut(i)
        {
            pair.1 = end;
        }
    }
}

thread_local! {
    /// The spans of the text being folded (see [`with_span_hint`]): its address and length
    /// (identity only, never dereferenced) and its container spans.
    static HINT: std::cell::RefCell<Option<(usize, usize, Spans)>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` with `spans` (the validator's spans of exactly `text`) offered to
/// [`with_hint_for`] on this thread, so that a pruned parse of `text` inside `f` (a
/// projection fold reading one member of a large payload) steps over nested values in O(log
/// n) instead of scanning them. Returns `f`'s result and the spans.
pub(crate) fn with_span_hint<R>(text: &str, spans: Spans, f: impl FnOnce() -> R) -> (R, Spans) {
    let key = (text.as_ptr() as usize, text.len());
    HINT.with(|h| *h.borrow_mut() = Some((key.0, key.1, spans)));
    // Taken back even when `f` panics (the hint never outlives the call).
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            let _ = HINT.try_with(|h| h.try_borrow_mut().map(|mut h| h.take()));
        }
    }
    let reset = Reset;
    let out = f();
    let spans = HINT
        .with(|h| h.borrow_mut().take())
        .map(|(_, _, s)| s)
        .unwrap_or_default();
    drop(reset);
    (out, spans)
}

/// Calls `f` with the hinted spans of `text` when [`with_span_hint`] offered them for this
/// very text, else with no spans.
pub(crate) fn with_hint_for<R>(text: &str, f: impl FnOnce(&[(usize, usize)]) -> R) -> R {
    let key = (text.as_ptr() as usize, text.len());
    HINT.with(|h| match h.try_borrow() {
        Ok(hint) => match hint.as_ref() {
            Some((ptr, len, spans)) if (*ptr, *len) == key => f(spans.pairs()),
            _ => f(&[]),
        },
        Err(_) => f(&[]),
    })
}

/// [`crate::json::validate`] that also records where each object and array ends.
pub(crate) fn validate_spans(text: &str, limits: &JsonLimits) -> Result<Spans, JsonError> {
    let mut pairs = Vec::with_capacity(8);
    let mut sink = SpanSink {
        pairs: &mut pairs,
        open: smallvec::SmallVec::new(),
    };
    drive(text, limits, NegativeZero::Refuse.into(), &mut sink)?;
    Ok(Spans { pairs })
}

/// End of the container starting at `pos`: from `spans` when recorded, else by scanning.
fn container_end(b: &[u8], spans: &[(usize, usize)], pos: usize) -> usize {
    match spans.binary_search_by_key(&pos, |&(start, _)| start) {
        Ok(i) if spans[i].1 > pos => spans[i].1,
        _ => skip_value_valid(b, pos),
    }
}

/// End of the (valid) string whose opening quote is at `pos`, and whether it has escapes.
fn skip_string(b: &[u8], pos: usize) -> (usize, bool) {
    let mut i = pos + 1;
    let mut escaped = false;
    loop {
        i = plain_run_end(b, i);
        match b.get(i) {
            None => return (b.len(), escaped),
            Some(b'"') => return (i + 1, escaped),
            Some(b'\\') => {
                escaped = true;
                i += 2;
            }
            Some(_) => i += 1,
        }
    }
}

/// Reads the value starting at `pos` as one node (containers lazy); returns it and its end.
fn leaf<'t>(text: &'t str, spans: &[(usize, usize)], pos: usize) -> Option<(NodeData<'t>, usize)> {
    let b = text.as_bytes();
    let (payload, end) = match *b.get(pos)? {
        b'"' => {
            let (end, escaped) = skip_string(b, pos);
            let raw = text.get(pos + 1..end.checked_sub(1)?)?;
            (Payload::Str(js_str(raw, escaped)), end)
        }
        c @ (b'{' | b'[') => (
            Payload::Lazy {
                array: c == b'[',
                sub: OnceCell::new(),
            },
            container_end(b, spans, pos),
        ),
        b't' => (Payload::Bool(true), pos + 4),
        b'f' => (Payload::Bool(false), pos + 5),
        b'n' => (Payload::Null, pos + 4),
        _ => {
            let end = skip_value_valid(b, pos);
            let n: f64 = text.get(pos..end)?.parse().ok()?;
            (Payload::Num(n), end)
        }
    };
    Some((
        NodeData {
            start: pos,
            end,
            payload,
        },
        end,
    ))
}

/// One level of the valid value at `pos` of `text`: the value itself and, for a container,
/// its direct children (nested containers lazy). `None` when the text is not as expected.
pub(super) fn one_level<'t>(
    text: &'t str,
    spans: &'t [(usize, usize)],
    pos: usize,
) -> Option<Doc<'t>> {
    let b = text.as_bytes();
    let mut nodes = Vec::with_capacity(8);
    let root = match *b.get(pos)? {
        b'{' => {
            let mut members = Vec::with_capacity(8);
            let mut i = skip_ws(b, pos + 1);
            while b.get(i) == Some(&b'"') {
                let (key_end, escaped) = skip_string(b, i);
                let key = js_str(text.get(i + 1..key_end.checked_sub(1)?)?, escaped);
                let colon = skip_ws(b, key_end);
                let (node, end) = leaf(text, spans, skip_ws(b, colon + 1))?;
                nodes.push(node);
                members.push((key, nodes.len() - 1));
                i = skip_ws(b, end);
                if b.get(i) != Some(&b',') {
                    break;
                }
                i = skip_ws(b, i + 1);
            }
            if b.get(i) != Some(&b'}') {
                return None;
            }
            NodeData {
                start: pos,
                end: i + 1,
                payload: Payload::Obj(normalize_entries(members)),
            }
        }
        b'[' => {
            let mut items = Vec::with_capacity(8);
            let mut i = skip_ws(b, pos + 1);
            while b.get(i).is_some_and(|&c| c != b']') {
                let (node, end) = leaf(text, spans, i)?;
                nodes.push(node);
                items.push(nodes.len() - 1);
                i = skip_ws(b, end);
                if b.get(i) != Some(&b',') {
                    break;
                }
                i = skip_ws(b, i + 1);
            }
            if b.get(i) != Some(&b']') {
                return None;
            }
            NodeData {
                start: pos,
                end: i + 1,
                payload: Payload::Arr(items),
            }
        }
        _ => leaf(text, spans, pos)?.0,
    };
    nodes.push(root);
    let root = nodes.len() - 1;
    Some(Doc::from_parts(text, spans, nodes, root))
}

impl<'t> Doc<'t> {
    /// Reads `text`, which [`validate_spans`] accepted (recording `spans`), one level at a
    /// time (see the module). Falls back to a full lossless parse if the text is not as
    /// validated.
    pub(crate) fn parse_prevalidated(
        text: &'t str,
        spans: &'t Spans,
    ) -> Result<Doc<'t>, JsonError> {
        let start = skip_ws(text.as_bytes(), 0);
        match one_level(text, spans.pairs(), start) {
            Some(doc) if skip_ws(text.as_bytes(), doc.root_span().1) == text.len() => Ok(doc),
            _ => Doc::parse_lossless(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lazy reader and the full reader agree on values, spans and printing.
    #[test]
    fn agrees_with_the_full_reader() {
        for t in [
            r#"{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"a\"b"}}"#,
            r#" {"a": [1, 2.50, {"b": "x\u0041"}], "c": null, "a": {"z":[[]]}, "2": true} "#,
            r#"{"message":{"id":"m","content":[{"type":"tool-result","content":[{"t":"\ud800"}]}]}}"#,
            r#"[1, "x", {"k": [false, null]}, []]"#,
            r#""just a string""#,
            "12.5e3",
            "{}",
            "[]",
        ] {
            let spans = validate_spans(t, &JsonLimits::default()).unwrap();
            let lazy = Doc::parse_prevalidated(t, &spans).unwrap();
            let unrecorded = Spans::default();
            let scanned = Doc::parse_prevalidated(t, &unrecorded).unwrap();
            assert_eq!(scanned.root().stringify(), lazy.root().stringify());
            let full = Doc::parse_lossless(t).unwrap();
            let (a, b) = (lazy.root(), full.root());
            assert_eq!(a.stringify(), b.stringify(), "{t}");
            assert_eq!(a.js_display(), b.js_display(), "{t}");
            assert!(a.deep_eq(&b), "{t}");
            assert_eq!(a.span(), b.span(), "{t}");
            for key in ["a", "message", "chunk", "2", "c"] {
                let (x, y) = (a.get(key), b.get(key));
                assert_eq!(x.map(|n| n.raw()), y.map(|n| n.raw()), "{t} {key}");
                assert_eq!(x.map(|n| n.span()), y.map(|n| n.span()), "{t} {key}");
                assert_eq!(x.map(|n| n.is_object()), y.map(|n| n.is_object()));
                assert_eq!(x.map(|n| n.is_array()), y.map(|n| n.is_array()));
                assert_eq!(x.map(|n| n.len()), y.map(|n| n.len()));
                assert_eq!(x.map(|n| n.stringify()), y.map(|n| n.stringify()));
            }
            let path = |r: super::super::N<'_, '_>| {
                r.get("message")
                    .and_then(|m| m.get("content"))
                    .and_then(|c| c.at(0))
                    .and_then(|b| b.get("content"))
                    .and_then(|c| c.at(0))
                    .and_then(|c| c.get("t"))
                    .map(|t| (t.raw().to_owned(), t.stringify(), t.span()))
            };
            assert_eq!(path(a), path(b), "{t}");
            assert_eq!(a.items().len(), b.items().len());
        }
    }
}
