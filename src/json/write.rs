//! `JSON.stringify`-exact printing: string escaping, ECMAScript number printing, trees.

use std::fmt::Write as _;

use super::string::{Repr, surrogate_at};
use super::{JsString, JsonError, JsonObject, JsonValue};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// ECMAScript `Number::toString(x)` (what `String(x)` and `JSON.stringify` print for a finite
/// number): shortest round-trip digits, `1` not `1.0`, plain decimals for 1e-6 ≤ |x| < 1e21,
/// otherwise exponent form with a sign (`1e+21`, `1.5e-7`). `-0` prints as `0`; NaN and the
/// infinities print as `NaN`, `Infinity`, `-Infinity`.
///
/// ```
/// use sessionlog::json::js_number_to_string;
/// assert_eq!(js_number_to_string(1.0), "1");
/// assert_eq!(js_number_to_string(1e21), "1e+21");
/// assert_eq!(js_number_to_string(1e20), "100000000000000000000");
/// assert_eq!(js_number_to_string(1.5e-7), "1.5e-7");
/// ```
pub fn js_number_to_string(x: f64) -> String {
    let mut out = String::new();
    write_js_number(&mut out, x);
    out
}

/// Appends [`js_number_to_string`]`(x)` to `out`.
pub fn write_js_number(out: &mut String, x: f64) {
    if x == 0.0 {
        out.push('0');
    } else if x.fract() == 0.0 && x.abs() < 1e15 {
        // An integer this small prints as its digits; i64 holds it exactly.
        let _ = write!(out, "{}", x as i64);
    } else {
        out.push_str(ryu_js::Buffer::new().format(x));
    }
}

/// Appends `s` as a JSON string literal exactly as `JSON.stringify` writes it: quotes, `\"`,
/// `\\`, `\b \f \n \r \t`, other U+0000–U+001F as `\u00xx` (lowercase hex), everything else
/// raw UTF-8 (including `/`, U+007F, U+2028, U+2029).
///
/// ```
/// use sessionlog::json::write_js_string;
/// let mut out = String::new();
/// write_js_string(&mut out, "a\"b\\c\n\u{1}/\u{2028}");
/// assert_eq!(out, "\"a\\\"b\\\\c\\n\\u0001/\u{2028}\"");
/// ```
pub fn write_js_string(out: &mut String, s: &str) {
    out.push('"');
    let b = s.as_bytes();
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        if c >= 0x20 && c != b'"' && c != b'\\' {
            continue;
        }
        out.push_str(&s[start..i]);
        push_escape(out, c);
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// The JSON text of `s` ([`write_js_string`] into a new string).
pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_js_string(&mut out, s);
    out
}

fn push_escape(out: &mut String, c: u8) {
    match c {
        b'"' => out.push_str("\\\""),
        b'\\' => out.push_str("\\\\"),
        0x08 => out.push_str("\\b"),
        0x0C => out.push_str("\\f"),
        b'\n' => out.push_str("\\n"),
        b'\r' => out.push_str("\\r"),
        b'\t' => out.push_str("\\t"),
        _ => {
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(c >> 4)]));
            out.push(char::from(HEX[usize::from(c & 0xF)]));
        }
    }
}

/// Appends a JavaScript string as `JSON.stringify` writes it; lone surrogates become `\udxxx`
/// (lowercase hex).
pub fn write_js_js_string(out: &mut String, s: &JsString) {
    match &s.0 {
        Repr::Utf8(s) => write_js_string(out, s),
        Repr::Wtf8(b) => write_js_wtf8(out, b),
    }
}

pub(super) fn write_js_wtf8(out: &mut String, b: &[u8]) {
    out.push('"');
    let mut run = Vec::new();
    let mut i = 0;
    let flush = |out: &mut String, run: &mut Vec<u8>| {
        out.push_str(&String::from_utf8_lossy(run));
        run.clear();
    };
    while i < b.len() {
        let c = b[i];
        if let Some(unit) = surrogate_at(b, i) {
            flush(out, &mut run);
            out.push_str("\\u");
            for shift in [12, 8, 4, 0] {
                out.push(char::from(HEX[usize::from((unit >> shift) & 0xF)]));
            }
            i += 3;
        } else if c < 0x20 || c == b'"' || c == b'\\' {
            flush(out, &mut run);
            push_escape(out, c);
            i += 1;
        } else {
            run.push(c);
            i += 1;
        }
    }
    flush(out, &mut run);
    out.push('"');
}

pub(super) enum Root<'a> {
    Value(&'a JsonValue),
    Object(&'a JsonObject),
}

fn write_scalar(out: &mut String, v: &JsonValue) {
    match v {
        JsonValue::Null => out.push_str("null"),
        JsonValue::Bool(true) => out.push_str("true"),
        JsonValue::Bool(false) => out.push_str("false"),
        JsonValue::Number(n) => write_js_number(out, n.value()),
        JsonValue::String(s) => write_js_js_string(out, s),
        JsonValue::Array(_) | JsonValue::Object(_) => {}
    }
}

pub(super) fn write_tree(out: &mut String, root: Root<'_>) {
    enum Frame<'a> {
        Arr(std::slice::Iter<'a, JsonValue>, bool),
        Obj(std::slice::Iter<'a, (JsString, JsonValue)>, bool),
    }
    let mut stack: Vec<Frame<'_>> = Vec::new();
    let mut current: Option<&JsonValue> = None;
    match root {
        Root::Value(v) => current = Some(v),
        Root::Object(o) => {
            out.push('{');
            stack.push(Frame::Obj(o.entries().iter(), true));
        }
    }
    loop {
        if let Some(v) = current.take() {
            match v {
                JsonValue::Array(a) => {
                    out.push('[');
                    stack.push(Frame::Arr(a.iter(), true));
                }
                JsonValue::Object(o) => {
                    out.push('{');
                    stack.push(Frame::Obj(o.entries().iter(), true));
                }
                scalar => write_scalar(out, scalar),
            }
        }
        let Some(top) = stack.last_mut() else {
            return;
        };
        match top {
            Frame::Arr(it, first) => match it.next() {
                Some(v) => {
                    if !*first {
                        out.push(',');
                    }
                    *first = false;
                    current = Some(v);
                }
                None => {
                    out.push(']');
                    stack.pop();
                }
            },
            Frame::Obj(it, first) => match it.next() {
                Some((k, v)) => {
                    if !*first {
                        out.push(',');
                    }
                    *first = false;
                    write_js_js_string(out, k);
                    out.push(':');
                    current = Some(v);
                }
                None => {
                    out.push('}');
                    stack.pop();
                }
            },
        }
    }
}

/// `JSON.stringify(v)` exactly as JavaScript writes it (no whitespace, JavaScript key order,
/// ECMAScript number printing, `JSON.stringify` string escaping, lone surrogates as `\udxxx`).
///
/// ```
/// use sessionlog::json::{parse, stringify, JsonLimits};
/// let v = parse(r#"{"a":1.0,"b":1E21,"c":"\ud800\/"}"#, &JsonLimits::default()).unwrap();
/// assert_eq!(stringify(&v), r#"{"a":1,"b":1e+21,"c":"\ud800/"}"#);
/// ```
pub fn stringify(v: &JsonValue) -> String {
    let mut out = String::new();
    write_json(&mut out, v);
    out
}

/// Appends [`stringify()`]`(v)` to `out`.
pub fn write_json(out: &mut String, v: &JsonValue) {
    write_tree(out, Root::Value(v));
}

/// `JSON.stringify` of a `serde_json` value with JavaScript semantics (see
/// [`JsonValue::from_serde`]): what dsh would store for the same value.
pub fn stringify_serde(value: &serde_json::Value) -> Result<String, JsonError> {
    Ok(stringify(&JsonValue::from_serde(value)?))
}
