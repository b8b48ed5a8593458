//! Raw access: the exact source text of object members.

use std::ops::Range;

use super::parse::{plain_run_end, skip_ws};
use super::string::decode_string;
use super::{JsString, JsonError, JsonLimits, NegativeZero, validate_with};

/// One member of a JSON object text, exactly as it appears in the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawMember<'a> {
    /// The decoded key.
    pub key: JsString,
    /// The key's text between its quotes, escapes intact.
    pub raw_key: &'a str,
    /// The exact source text of the value (no surrounding whitespace).
    pub value: &'a str,
    /// Byte range of [`RawMember::value`] in the text.
    pub span: Range<usize>,
}

pub(super) fn skip_string_valid(b: &[u8], pos: usize) -> usize {
    let mut i = pos + 1;
    loop {
        i = plain_run_end(b, i);
        match b.get(i) {
            None => return b.len(),
            Some(b'"') => return i + 1,
            Some(b'\\') => i += 2,
            // A control character cannot be in valid text; step over it.
            Some(_) => i += 1,
        }
    }
}

/// End of the (already validated) value starting at `pos`.
pub(super) fn skip_value_valid(b: &[u8], pos: usize) -> usize {
    match b.get(pos) {
        Some(b'"') => skip_string_valid(b, pos),
        Some(b'{' | b'[') => {
            let mut depth = 0usize;
            let mut i = pos;
            while let Some(&c) = b.get(i) {
                match c {
                    b'"' => {
                        i = skip_string_valid(b, i);
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return i + 1;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            b.len()
        }
        _ => {
            let mut i = pos;
            while let Some(&c) = b.get(i) {
                if matches!(c, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r') {
                    break;
                }
                i += 1;
            }
            i
        }
    }
}

/// Calls `f(raw_key, value, value's span)` for each member of the (validated) object starting
/// at `pos`, in source order, without allocating: `raw_key` is the text between the key's
/// quotes.
pub(crate) fn visit_members_valid<'a>(
    text: &'a str,
    pos: usize,
    mut f: impl FnMut(&'a str, &'a str, std::ops::Range<usize>),
) {
    let b = text.as_bytes();
    let mut i = skip_ws(b, pos + 1);
    while b.get(i) == Some(&b'"') {
        let key_end = skip_string_valid(b, i);
        let raw_key = text
            .get(i + 1..key_end.saturating_sub(1))
            .unwrap_or_default();
        let colon = skip_ws(b, key_end);
        let vstart = skip_ws(b, colon + 1);
        let vend = skip_value_valid(b, vstart);
        f(
            raw_key,
            text.get(vstart..vend).unwrap_or_default(),
            vstart..vend,
        );
        let next = skip_ws(b, vend);
        if b.get(next) != Some(&b',') {
            break;
        }
        i = skip_ws(b, next + 1);
    }
}

/// Members of the (validated) object starting at `pos`, in source order.
pub(crate) fn members_valid(text: &str, pos: usize) -> Vec<RawMember<'_>> {
    let mut out = Vec::new();
    visit_members_valid(text, pos, |raw_key, value, span| {
        out.push(RawMember {
            key: decode_string(raw_key, raw_key.contains('\\')),
            raw_key,
            value,
            span,
        });
    });
    out
}

fn kind_at(b: &[u8], pos: usize) -> &'static str {
    match b.get(pos) {
        Some(b'{') => "object",
        Some(b'[') => "array",
        Some(b'"') => "string",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        _ => "number",
    }
}

/// The top-level members of a JSON object text, in **source order** (duplicates included:
/// in JavaScript the last one wins), each with its exact source text. Validates the whole text
/// with [`JsonLimits::default`] first.
///
/// ```
/// use sessionlog::json::raw_members;
/// let m = raw_members(r#"{"type":"x", "data" : {"a":1.50} }"#).unwrap();
/// assert_eq!(m[1].key, "data");
/// assert_eq!(m[1].value, r#"{"a":1.50}"#);
/// ```
pub fn raw_members(text: &str) -> Result<Vec<RawMember<'_>>, JsonError> {
    raw_members_with(text, &JsonLimits::default())
}

/// [`raw_members`] with explicit limits.
pub fn raw_members_with<'a>(
    text: &'a str,
    limits: &JsonLimits,
) -> Result<Vec<RawMember<'a>>, JsonError> {
    raw_members_with_policy(text, limits, NegativeZero::Refuse)
}

/// [`raw_members`] with explicit limits and [`NegativeZero`] policy.
pub fn raw_members_with_policy<'a>(
    text: &'a str,
    limits: &JsonLimits,
    negative_zero: NegativeZero,
) -> Result<Vec<RawMember<'a>>, JsonError> {
    validate_with(text, limits, negative_zero)?;
    let b = text.as_bytes();
    let start = skip_ws(b, 0);
    if b.get(start) != Some(&b'{') {
        return Err(JsonError::NotAnObject {
            found: kind_at(b, start),
        });
    }
    Ok(members_valid(text, start))
}

/// The exact source text of the value at `path` (object keys, outermost first) in a JSON
/// text, as JavaScript would see it (the last of duplicate keys wins). `Ok(None)` when a key is
/// missing or a value on the way is not an object; an empty path gives the whole value without
/// surrounding whitespace. Validates the whole text with [`JsonLimits::default`] first.
///
/// ```
/// use sessionlog::json::raw_member;
/// let data = r#"{"turn":1,"message":{"id":"m1","content":[{"type":"text","text":"hi"}]}}"#;
/// assert_eq!(
///     raw_member(data, &["message", "content"]).unwrap(),
///     Some(r#"[{"type":"text","text":"hi"}]"#)
/// );
/// assert_eq!(raw_member(data, &["missing"]).unwrap(), None);
/// ```
pub fn raw_member<'a>(text: &'a str, path: &[&str]) -> Result<Option<&'a str>, JsonError> {
    raw_member_with_policy(text, path, &JsonLimits::default(), NegativeZero::Refuse)
}

/// [`raw_member`] with explicit limits and [`NegativeZero`] policy.
pub fn raw_member_with_policy<'a>(
    text: &'a str,
    path: &[&str],
    limits: &JsonLimits,
    negative_zero: NegativeZero,
) -> Result<Option<&'a str>, JsonError> {
    validate_with(text, limits, negative_zero)?;
    let b = text.as_bytes();
    let mut pos = skip_ws(b, 0);
    for key in path {
        if b.get(pos) != Some(&b'{') {
            return Ok(None);
        }
        match members_valid(text, pos)
            .into_iter()
            .rev()
            .find(|m| m.key == *key)
        {
            Some(m) => pos = m.span.start,
            None => return Ok(None),
        }
    }
    let end = skip_value_valid(b, pos);
    Ok(text.get(pos..end))
}
