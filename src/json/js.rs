//! JavaScript value semantics the built-in folds need: property access that can throw,
//! strict equality, property-key coercion, and the JSON text of a state.
//!
//! dsh's folds are TypeScript over parsed event payloads. To fold exactly as they do on any
//! payload (not only the well-formed ones), the built-ins read `data` through these helpers.

use super::parse::skip_ws;
use super::raw::visit_members_valid;
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
    parse_pruned(text, paths, 0).map(JsVal::Json)
}

fn parse_pruned(text: &str, paths: &[&[&str]], depth: usize) -> Option<JsonValue> {
    let start = skip_ws(text.as_bytes(), 0);
    let whole = paths.is_empty() || paths.iter().any(|p| p.is_empty());
    if whole || depth > 8 || text.as_bytes().get(start) != Some(&b'{') {
        return parse(text, &JsonLimits::default()).ok();
    }
    let mut entries = Vec::new();
    let mut failed = false;
    visit_members_valid(text, start, |raw_key, value| {
        // Keys are compared as written unless escaped; only wanted members are decoded.
        let decoded = raw_key.contains('\\').then(|| decode_string(raw_key, true));
        let wanted = |k: &str| decoded.as_ref().map_or(raw_key == k, |d| *d == *k);
        if !paths.iter().any(|p| p.first().is_some_and(|k| wanted(k))) {
            return;
        }
        let rest: Vec<&[&str]> = paths
            .iter()
            .filter(|p| p.first().is_some_and(|k| wanted(k)))
            .map(|p| &p[1..])
            .collect();
        match parse_pruned(value, &rest, depth + 1) {
            Some(v) => {
                let key = decoded.unwrap_or_else(|| JsString::from(raw_key));
                entries.push((key, v));
            }
            None => failed = true,
        }
    });
    if failed {
        return None;
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
