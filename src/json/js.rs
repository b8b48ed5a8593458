//! JavaScript value semantics the built-in folds need: property access that can throw,
//! strict equality, property-key coercion, and the JSON text of a state.
//!
//! dsh's folds are TypeScript over parsed event payloads. To fold exactly as they do on any
//! payload (not only the well-formed ones), the built-ins read `data` through these helpers.

use super::parse::skip_ws;
use super::raw::{skip_string_valid, skip_value_valid};
use super::shallow::with_hint_for;
use super::string::decode_string;
use super::{JsString, JsonLimits, JsonObject, JsonValue, parse, write_js_number};

/// A JavaScript value copied out of an event payload: `undefined` or a JSON value.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum JsVal {
    /// `undefined` (a missing property).
    #[default]
    Undefined,
    /// A value present in the JSON.
    Json(JsonValue),
}

impl JsVal {
    /// JavaScript `===`: primitives by value, objects and arrays never equal (each event's
    /// payload is a fresh object, so two references taken from different events differ).
    pub fn strict_eq(&self, other: &JsVal) -> bool {
        match (self, other) {
            (JsVal::Undefined, JsVal::Undefined) => true,
            (JsVal::Json(a), JsVal::Json(b)) => match (a, b) {
                (JsonValue::Null, JsonValue::Null) => true,
                (JsonValue::Bool(x), JsonValue::Bool(y)) => x == y,
                (JsonValue::Number(x), JsonValue::Number(y)) => x.value() == y.value(),
                (JsonValue::String(x), JsonValue::String(y)) => x == y,
                _ => false,
            },
            _ => false,
        }
    }

    /// The JSON value, if defined.
    pub fn as_json(&self) -> Option<&JsonValue> {
        match self {
            JsVal::Undefined => None,
            JsVal::Json(v) => Some(v),
        }
    }

    /// True for `undefined`.
    pub fn is_undefined(&self) -> bool {
        matches!(self, JsVal::Undefined)
    }

    /// `typeof v === 'number'`: the number's value.
    pub fn as_number(&self) -> Option<f64> {
        self.as_json().and_then(JsonValue::as_f64)
    }

    /// `typeof v === 'string' && v.length > 0`.
    pub fn is_nonempty_string(&self) -> bool {
        matches!(self, JsVal::Json(JsonValue::String(s)) if s.utf16_len() > 0)
    }
}

/// `value[key]` as JavaScript evaluates it on a parsed JSON value: `Err(Throws)` for `null`
/// and `undefined` (a `TypeError`), the member for objects, `undefined` for missing members
/// and for the other primitives and arrays (none of the keys the folds read is an own or
/// prototype property of a string, number, boolean or array).
pub(crate) fn prop(value: &JsVal, key: &str) -> Result<JsVal, Throws> {
    match value {
        JsVal::Undefined | JsVal::Json(JsonValue::Null) => Err(Throws),
        JsVal::Json(JsonValue::Object(o)) => {
            Ok(o.get(key).cloned().map_or(JsVal::Undefined, JsVal::Json))
        }
        JsVal::Json(_) => Ok(JsVal::Undefined),
    }
}

/// Marker: the JavaScript expression would throw a `TypeError`. The folds treat an event on
/// which dsh's fold would throw as one that changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Throws;

/// Parses an event's `data` text (the store has validated it; a text that still fails, e.g.
/// over the depth limit, yields `None`).
pub(crate) fn parse_data(text: &str) -> Option<JsVal> {
    parse(text, &JsonLimits::default()).ok().map(JsVal::Json)
}

/// [`parse_data`] keeping only the members on `paths` (object keys, outermost first): every
/// other member of an object on the way is skipped without being parsed, so reading one small
/// field of a large payload (the `callId` of a 50 KB `tool/result`) costs a scan, not a tree.
/// A value at the end of a path, or a non-object on the way, is parsed whole. Reading the
/// paths with [`prop`] gives what it gives on the full parse. `text` must be valid JSON (the
/// store validated it on append); otherwise the result is unspecified but never a panic.
pub(crate) fn parse_data_paths(text: &str, paths: &[&[&str]]) -> Option<JsVal> {
    with_hint_for(text, |spans| parse_pruned(text, 0, spans, paths, 0)).map(JsVal::Json)
}

/// End of the (valid) value starting at `pos` of `text`, which starts at `base` of the text
/// `spans` describe: a container's end from `spans` when recorded there, else by scanning.
fn value_end(b: &[u8], base: usize, spans: &[(usize, usize)], pos: usize) -> usize {
    if matches!(b.get(pos), Some(b'{' | b'[')) {
        let at = base + pos;
        if let Ok(i) = spans.binary_search_by_key(&at, |&(start, _)| start)
            && let Some(&(_, end)) = spans.get(i)
            && end > at
            && end - base <= b.len()
        {
            return end - base;
        }
    }
    skip_value_valid(b, pos)
}

/// `text` is a value of the validated text `spans` describe, starting at its byte `base`.
fn parse_pruned(
    text: &str,
    base: usize,
    spans: &[(usize, usize)],
    paths: &[&[&str]],
    depth: usize,
) -> Option<JsonValue> {
    let b = text.as_bytes();
    let start = skip_ws(b, 0);
    let whole = paths.is_empty() || paths.iter().any(|p| p.is_empty());
    if whole || depth > 8 || b.get(start) != Some(&b'{') {
        return parse(text, &JsonLimits::default()).ok();
    }
    let mut entries = Vec::new();
    // The members, in source order, stepping over nested values with the spans.
    let mut i = skip_ws(b, start + 1);
    while b.get(i) == Some(&b'"') {
        let key_end = skip_string_valid(b, i);
        let raw_key = text.get(i + 1..key_end.saturating_sub(1))?;
        let colon = skip_ws(b, key_end);
        let vstart = skip_ws(b, colon + 1);
        let vend = value_end(b, base, spans, vstart);
        // Keys are compared as written unless escaped; only wanted members are decoded.
        let decoded = raw_key.contains('\\').then(|| decode_string(raw_key, true));
        let wanted = |k: &str| decoded.as_ref().map_or(raw_key == k, |d| *d == *k);
        if paths.iter().any(|p| p.first().is_some_and(|k| wanted(k))) {
            let rest: Vec<&[&str]> = paths
                .iter()
                .filter(|p| p.first().is_some_and(|k| wanted(k)))
                .map(|p| &p[1..])
                .collect();
            let value = text.get(vstart..vend)?;
            let v = parse_pruned(value, base + vstart, spans, &rest, depth + 1)?;
            let key = decoded.unwrap_or_else(|| JsString::from(raw_key));
            entries.push((key, v));
        }
        let next = skip_ws(b, vend);
        if b.get(next) != Some(&b',') {
            break;
        }
        i = skip_ws(b, next + 1);
    }
    Some(JsonValue::Object(JsonObject::from_entries(entries)))
}

/// JavaScript `ToPropertyKey(value)` for a value that is used as an object key
/// (`obj[value]`): strings as they are, numbers printed as `Number::toString`, `true`,
/// `false`, `null`, `undefined`, objects as `[object Object]`, arrays as `Array.prototype.join`
/// of their elements (nested arrays flattened, `null` elements empty). Iterative.
pub(crate) fn property_key(value: &JsVal) -> JsString {
    let v = match value {
        JsVal::Undefined => return JsString::from("undefined"),
        JsVal::Json(v) => v,
    };
    if let JsonValue::String(s) = v {
        return s.clone();
    }
    // Build WTF-16 units so lone surrogates inside array elements survive.
    let mut units: Vec<u16> = Vec::new();
    // Stack of (array, next index).
    let mut stack: Vec<(&[JsonValue], usize)> = Vec::new();
    let push_scalar = |units: &mut Vec<u16>, v: &JsonValue| match v {
        JsonValue::Null => {}
        JsonValue::Bool(b) => units.extend(if *b { "true" } else { "false" }.encode_utf16()),
        JsonValue::Number(n) => {
            let mut s = String::new();
            write_js_number(&mut s, n.value());
            units.extend(s.encode_utf16());
        }
        JsonValue::String(s) => units.extend(s.to_utf16()),
        JsonValue::Object(_) => units.extend("[object Object]".encode_utf16()),
        JsonValue::Array(_) => {}
    };
    match v {
        JsonValue::Array(items) => stack.push((items, 0)),
        JsonValue::Null => return JsString::from("null"),
        other => {
            push_scalar(&mut units, other);
            return JsString::from_utf16(&units);
        }
    }
    while let Some((items, i)) = stack.pop() {
        let Some(item) = items.get(i) else { continue };
        stack.push((items, i + 1));
        if i > 0 {
            units.push(u16::from(b','));
        }
        match item {
            JsonValue::Array(inner) => stack.push((inner, 0)),
            other => push_scalar(&mut units, other),
        }
    }
    JsString::from_utf16(&units)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jv(text: &str) -> JsVal {
        parse_data(text).unwrap()
    }

    /// `prop` along a path, as the folds chain it.
    fn walk(v: &JsVal, path: &[&str]) -> Result<JsVal, Throws> {
        let mut cur = v.clone();
        for k in path {
            cur = prop(&cur, k)?;
        }
        Ok(cur)
    }

    #[test]
    fn pruned_parse_reads_its_paths_as_the_full_parse_does() {
        let texts = [
            r#"{"message":{"role":"tool","content":[{"type":"text","text":"x\"}"}],"source":{"callId":"c1","n":[1,{"a":2}]}}}"#,
            r#"{"callId":"c2","content":"legacy","isError":false}"#,
            r#"{"message":null,"callId":3}"#,
            r#"{"message":"text","callId":3}"#,
            r#"{"message":{"source":null}}"#,
            r#"{"message":{"source":{"callId":1},"source":{"callId":2}}}"#,
            r#" { "turn" : 1.50 , "step":2,"usage":{"outputTokens":7},"turn":1e2 } "#,
            r#"{"chunk":{"type":"text-delta","text":"hi"},"turn":1,"step":1}"#,
            r#"[1,2,{"turn":1}]"#,
            r#""just a string""#,
            r#"{}"#,
            r#"{"turn":5,"a\"b":{"turn":9}}"#,
        ];
        let wanted: Vec<&[&str]> = vec![
            &["message", "source"],
            &["callId"],
            &["content"],
            &["isError"],
            &["turn"],
            &["step"],
            &["usage"],
            &["chunk"],
        ];
        // Every kept path, and paths below the kept ones.
        let deeper: [&[&str]; 3] = [
            &["message", "source", "callId"],
            &["usage", "outputTokens"],
            &["chunk", "type"],
        ];
        let paths: Vec<&[&str]> = wanted.iter().copied().chain(deeper).collect();
        for text in texts {
            let full = parse_data(text).unwrap();
            let pruned = parse_data_paths(text, &wanted).unwrap();
            for path in &paths {
                assert_eq!(walk(&full, path), walk(&pruned, path), "{text} {path:?}");
            }
        }
    }

    #[test]
    fn pruned_parse_with_the_validators_spans_gives_the_same_values() {
        let texts = [
            r#"{"message":{"role":"tool","content":[{"type":"text","text":"x\"}"}],"source":{"callId":"c1","n":[1,{"a":2}]}}}"#,
            r#" { "turn" : [1,[2]] , "step":{"a":{}},"usage":{"outputTokens":7},"turn":1e2 } "#,
            r#"{"chunk":{"type":"text-delta","text":"hi"},"turn":{"x":[[],{}]},"step":[]}"#,
            r#"{"a\"b":{"turn":9},"message":{"source":{"callId":[3]}}}"#,
        ];
        let paths: Vec<&[&str]> = vec![
            &["message", "source"],
            &["turn"],
            &["step"],
            &["usage"],
            &["chunk"],
        ];
        let limits = JsonLimits::default();
        for text in texts {
            let plain = parse_data_paths(text, &paths);
            assert!(plain.is_some(), "{text}");
            let spans = crate::json::validate_spans(text, &limits).unwrap();
            assert!(!spans.pairs().is_empty());
            let (hinted, _) =
                crate::json::with_span_hint(text, spans.clone(), || parse_data_paths(text, &paths));
            assert_eq!(hinted, plain, "{text}");
            // Spans offered for another text (an equal copy) are not used.
            let copy = text.to_owned();
            let (other, _) =
                crate::json::with_span_hint(&copy, spans, || parse_data_paths(text, &paths));
            assert_eq!(other, plain, "{text}");
        }
        // The hint never outlives its call.
        let text = texts[0];
        let spans = crate::json::validate_spans(text, &limits).unwrap();
        let (_, back) = crate::json::with_span_hint(text, spans.clone(), || ());
        assert_eq!(back, spans);
        assert!(super::with_hint_for(text, |s| s.is_empty()));
    }

    #[test]
    fn property_keys_follow_to_string() {
        assert_eq!(property_key(&jv(r#""a""#)), "a");
        assert_eq!(property_key(&jv("1.50")), "1.5");
        assert_eq!(property_key(&jv("1e21")), "1e+21");
        assert_eq!(property_key(&jv("null")), "null");
        assert_eq!(property_key(&JsVal::Undefined), "undefined");
        assert_eq!(property_key(&jv("true")), "true");
        assert_eq!(property_key(&jv(r#"{"a":1}"#)), "[object Object]");
        assert_eq!(
            property_key(&jv(r#"[1,[2,[]],null,"x",{}]"#)),
            "1,2,,,x,[object Object]"
        );
        assert_eq!(property_key(&jv("[]")), "");
        assert_eq!(property_key(&jv(r#""\ud800""#)).to_utf16(), vec![0xd800]);
    }

    #[test]
    fn strict_equality_is_javascripts() {
        assert!(jv("1").strict_eq(&jv("1.0")));
        assert!(!jv("1").strict_eq(&jv(r#""1""#)));
        assert!(jv("null").strict_eq(&jv("null")));
        assert!(!jv("null").strict_eq(&JsVal::Undefined));
        assert!(JsVal::Undefined.strict_eq(&JsVal::Undefined));
        assert!(!jv("{}").strict_eq(&jv("{}")));
        assert!(!jv("[]").strict_eq(&jv("[]")));
    }

    #[test]
    fn property_access_throws_on_null_only() {
        assert_eq!(prop(&jv("null"), "turn"), Err(Throws));
        assert_eq!(prop(&JsVal::Undefined, "turn"), Err(Throws));
        assert_eq!(prop(&jv("5"), "turn"), Ok(JsVal::Undefined));
        assert_eq!(prop(&jv(r#"{"turn":2}"#), "turn"), Ok(jv("2")));
    }
}
