//! The scanner: one iterative pass over JSON text that validates it and reports its
//! structure to a sink (nothing, a [`JsonValue`] tree, or a spanned [`Doc`](super::doc::Doc)).

use super::error::clip;
use super::string::decode_string;
use super::value::JsonNumber;
use super::{JsString, JsonError, JsonLimits, JsonObject, JsonValue, NegativeZero};

/// Receives the structure of a JSON text from [`drive`].
pub(super) trait Sink<'a> {
    /// An array opens at byte `start`.
    fn begin_array(&mut self, start: usize);
    /// An object opens at byte `start`.
    fn begin_object(&mut self, start: usize);
    /// A key; `raw` is the text between the quotes, `escaped` whether it holds a backslash.
    fn key(&mut self, raw: &'a str, escaped: bool);
    /// A string value whose opening quote is at byte `start`.
    fn string(&mut self, raw: &'a str, escaped: bool, start: usize);
    /// A number whose text starts at byte `start`.
    fn number(&mut self, text: &'a str, value: f64, start: usize);
    /// A literal starting at byte `start`.
    fn literal(&mut self, value: Literal, start: usize);
    /// The innermost open container closes; `end` is the byte after its bracket.
    fn end_container(&mut self, end: usize);
    /// Whether [`Sink::number`] needs the number's value (validation does not).
    const WANTS_NUMBERS: bool;
}

#[derive(Clone, Copy)]
pub(super) enum Literal {
    Null,
    True,
    False,
}

/// A stack of "is this level an object?" bits; allocation-free up to 4096 levels.
struct KindStack {
    len: usize,
    inline: [u64; 64],
    heap: Vec<u64>,
}

impl KindStack {
    fn new() -> Self {
        KindStack {
            len: 0,
            inline: [0; 64],
            heap: Vec::new(),
        }
    }

    fn word(&mut self, idx: usize) -> &mut u64 {
        let w = idx / 64;
        if w < self.inline.len() {
            &mut self.inline[w]
        } else {
            let h = w - self.inline.len();
            if self.heap.len() <= h {
                self.heap.resize(h + 1, 0);
            }
            &mut self.heap[h]
        }
    }

    fn push(&mut self, is_object: bool) {
        let idx = self.len;
        let bit = 1u64 << (idx % 64);
        let word = self.word(idx);
        if is_object {
            *word |= bit;
        } else {
            *word &= !bit;
        }
        self.len += 1;
    }

    fn pop(&mut self) {
        self.len = self.len.saturating_sub(1);
    }

    fn top(&mut self) -> Option<bool> {
        let idx = self.len.checked_sub(1)?;
        let bit = 1u64 << (idx % 64);
        Some(*self.word(idx) & bit != 0)
    }
}

#[inline]
pub(crate) fn skip_ws(b: &[u8], mut pos: usize) -> usize {
    while let Some(&c) = b.get(pos) {
        if c == b' ' || c == b'\n' || c == b'\r' || c == b'\t' {
            pos += 1;
        } else {
            break;
        }
    }
    pos
}

/// The first position at or after `from` holding a byte that ends a plain run of string
/// text: `"`, `\\` or a control character (below 0x20); `b.len()` when there is none. Reads
/// eight bytes at a time (SWAR): the lowest flagged byte of a word is always a true match,
/// because a borrow only propagates upwards from a matching byte.
pub(crate) fn plain_run_end(b: &[u8], from: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_in = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let mut i = from;
    while let Some(chunk) = b.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let v = u64::from_le_bytes(word);
        let hits = zero_in(v ^ (ONES * u64::from(b'"')))
            | zero_in(v ^ (ONES * u64::from(b'\\')))
            | (v.wrapping_sub(ONES * 0x20) & !v & HIGH);
        if hits != 0 {
            return i + (hits.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&c) = b.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            return i;
        }
        i += 1;
    }
    b.len().max(from)
}

/// Scans a string starting at the opening quote; returns (position after the closing quote,
/// whether it contains escapes).
fn scan_string(b: &[u8], pos: usize) -> Result<(usize, bool), JsonError> {
    let mut i = pos + 1;
    let mut escaped = false;
    loop {
        i = plain_run_end(b, i);
        match b.get(i) {
            None => {
                return Err(JsonError::UnexpectedEnd {
                    offset: b.len(),
                    message: "unterminated string",
                });
            }
            Some(b'"') => return Ok((i + 1, escaped)),
            Some(b'\\') => {
                escaped = true;
                match b.get(i + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                    Some(b'u') => {
                        for k in 2..6 {
                            match b.get(i + k) {
                                Some(c) if c.is_ascii_hexdigit() => {}
                                None => {
                                    return Err(JsonError::UnexpectedEnd {
                                        offset: b.len(),
                                        message: "unterminated \\u escape",
                                    });
                                }
                                Some(_) => return Err(JsonError::InvalidEscape { offset: i }),
                            }
                        }
                        i += 6;
                    }
                    None => {
                        return Err(JsonError::UnexpectedEnd {
                            offset: b.len(),
                            message: "unterminated escape",
                        });
                    }
                    Some(_) => return Err(JsonError::InvalidEscape { offset: i }),
                }
            }
            Some(&c) => {
                return Err(JsonError::ControlCharacter {
                    offset: i,
                    code: u32::from(c),
                });
            }
        }
    }
}

/// The error for the byte at `at`: [`JsonError::Syntax`], or [`JsonError::UnexpectedEnd`]
/// when the text ends before `at`.
fn unexpected(b: &[u8], at: usize, message: &'static str) -> JsonError {
    if at < b.len() {
        JsonError::Syntax {
            offset: at,
            message,
        }
    } else {
        JsonError::UnexpectedEnd {
            offset: b.len(),
            message,
        }
    }
}

fn expect_digit(b: &[u8], i: usize) -> Result<(), JsonError> {
    match b.get(i) {
        Some(c) if c.is_ascii_digit() => Ok(()),
        _ => Err(unexpected(b, i, "expected a digit")),
    }
}

/// Which numbers outside the lossless domain [`drive`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Numbers {
    /// Text that JavaScript reads as `-0`.
    pub(super) negative_zero: NegativeZero,
    /// Accept text that JavaScript reads as ±Infinity (as `JSON.parse` does), else refuse it.
    pub(super) infinity: bool,
}

impl Numbers {
    /// Everything `JSON.parse` reads: `-0` and numbers that overflow to ±Infinity included.
    pub(super) const JSON_PARSE: Numbers = Numbers {
        negative_zero: NegativeZero::Accept,
        infinity: true,
    };
}

impl From<NegativeZero> for Numbers {
    fn from(negative_zero: NegativeZero) -> Self {
        Numbers {
            negative_zero,
            infinity: false,
        }
    }
}

/// Scans a number; returns its end and, when needed or asked for, its value. Refuses text that
/// JavaScript reads as -0 or ±Infinity unless `numbers` accepts it.
fn scan_number(
    text: &str,
    start: usize,
    want_value: bool,
    numbers: Numbers,
) -> Result<(usize, f64), JsonError> {
    let b = text.as_bytes();
    let mut i = start;
    let negative = b.get(i) == Some(&b'-');
    if negative {
        i += 1;
    }
    let mut nonzero = false;
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            nonzero = true;
            i += 1;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
        }
        _ => return Err(unexpected(b, i, "expected a digit")),
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        expect_digit(b, i)?;
        while let Some(&c) = b.get(i) {
            if !c.is_ascii_digit() {
                break;
            }
            nonzero |= c != b'0';
            i += 1;
        }
    }
    let mut has_exponent = false;
    if matches!(b.get(i), Some(b'e' | b'E')) {
        has_exponent = true;
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        expect_digit(b, i)?;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    let slice = &text[start..i];
    // Without an exponent a short number can be neither infinite nor underflow to zero.
    if has_exponent || slice.len() > 300 || want_value {
        let value: f64 = slice.parse().map_err(|_| JsonError::Syntax {
            offset: start,
            message: "malformed number",
        })?;
        if value.is_infinite() && !numbers.infinity {
            return Err(JsonError::NonFinite {
                offset: start,
                text: clip(slice),
            });
        }
        if value == 0.0 && value.is_sign_negative() && numbers.negative_zero == NegativeZero::Refuse
        {
            return Err(JsonError::NegativeZero {
                offset: start,
                text: clip(slice),
            });
        }
        Ok((i, value))
    } else if negative && !nonzero && numbers.negative_zero == NegativeZero::Refuse {
        Err(JsonError::NegativeZero {
            offset: start,
            text: clip(slice),
        })
    } else {
        Ok((i, 0.0))
    }
}

fn expect_literal(b: &[u8], pos: usize, word: &'static [u8]) -> Result<usize, JsonError> {
    for (k, &w) in word.iter().enumerate() {
        match b.get(pos + k) {
            Some(&c) if c == w => {}
            None => {
                return Err(JsonError::UnexpectedEnd {
                    offset: b.len(),
                    message: "truncated literal",
                });
            }
            Some(_) => {
                return Err(JsonError::Syntax {
                    offset: pos + k,
                    message: "expected a value",
                });
            }
        }
    }
    Ok(pos + word.len())
}

/// Scans `"key" ws : ws` at `pos`; returns the position of the value.
fn scan_key<'a, S: Sink<'a>>(text: &'a str, pos: usize, sink: &mut S) -> Result<usize, JsonError> {
    let b = text.as_bytes();
    if b.get(pos) != Some(&b'"') {
        return Err(unexpected(b, pos, "expected a string key"));
    }
    let (end, escaped) = scan_string(b, pos)?;
    sink.key(&text[pos + 1..end - 1], escaped);
    let p = skip_ws(b, end);
    match b.get(p) {
        Some(b':') => Ok(skip_ws(b, p + 1)),
        None => Err(JsonError::UnexpectedEnd {
            offset: b.len(),
            message: "expected `:`",
        }),
        Some(_) => Err(JsonError::Syntax {
            offset: p,
            message: "expected `:` after an object key",
        }),
    }
}

/// Reads one complete JSON text, reporting its structure to `sink`. Iterative.
pub(super) fn drive<'a, S: Sink<'a>>(
    text: &'a str,
    limits: &JsonLimits,
    numbers: Numbers,
    sink: &mut S,
) -> Result<(), JsonError> {
    let b = text.as_bytes();
    if b.len() > limits.max_bytes {
        return Err(JsonError::TooLarge {
            len: b.len(),
            max_bytes: limits.max_bytes,
        });
    }
    let mut stack = KindStack::new();
    let mut pos = skip_ws(b, 0);
    'value: loop {
        let Some(&c) = b.get(pos) else {
            return Err(JsonError::UnexpectedEnd {
                offset: b.len(),
                message: "expected a value",
            });
        };
        match c {
            b'{' | b'[' => {
                let is_object = c == b'{';
                if stack.len >= limits.max_depth {
                    return Err(JsonError::TooDeep {
                        offset: pos,
                        max_depth: limits.max_depth,
                    });
                }
                stack.push(is_object);
                if is_object {
                    sink.begin_object(pos);
                } else {
                    sink.begin_array(pos);
                }
                pos = skip_ws(b, pos + 1);
                let close = if is_object { b'}' } else { b']' };
                if b.get(pos) == Some(&close) {
                    stack.pop();
                    pos += 1;
                    sink.end_container(pos);
                } else if is_object {
                    pos = scan_key(text, pos, sink)?;
                    continue 'value;
                } else {
                    continue 'value;
                }
            }
            b'"' => {
                let (end, escaped) = scan_string(b, pos)?;
                sink.string(&text[pos + 1..end - 1], escaped, pos);
                pos = end;
            }
            b't' => {
                sink.literal(Literal::True, pos);
                pos = expect_literal(b, pos, b"true")?;
            }
            b'f' => {
                sink.literal(Literal::False, pos);
                pos = expect_literal(b, pos, b"false")?;
            }
            b'n' => {
                sink.literal(Literal::Null, pos);
                pos = expect_literal(b, pos, b"null")?;
            }
            b'-' | b'0'..=b'9' => {
                let (end, value) = scan_number(text, pos, S::WANTS_NUMBERS, numbers)?;
                sink.number(&text[pos..end], value, pos);
                pos = end;
            }
            _ => {
                return Err(JsonError::Syntax {
                    offset: pos,
                    message: "expected a value",
                });
            }
        }
        // After a complete value: close containers or move to the next element.
        loop {
            pos = skip_ws(b, pos);
            let Some(is_object) = stack.top() else {
                if pos != b.len() {
                    return Err(JsonError::TrailingCharacters { offset: pos });
                }
                return Ok(());
            };
            match b.get(pos) {
                Some(b',') => {
                    pos = skip_ws(b, pos + 1);
                    if is_object {
                        pos = scan_key(text, pos, sink)?;
                    }
                    continue 'value;
                }
                Some(b']') if !is_object => {
                    stack.pop();
                    pos += 1;
                    sink.end_container(pos);
                }
                Some(b'}') if is_object => {
                    stack.pop();
                    pos += 1;
                    sink.end_container(pos);
                }
                _ => {
                    let message = if is_object {
                        "expected `,` or `}`"
                    } else {
                        "expected `,` or `]`"
                    };
                    return Err(unexpected(b, pos, message));
                }
            }
        }
    }
}

struct NoSink;

impl<'a> Sink<'a> for NoSink {
    const WANTS_NUMBERS: bool = false;
    fn begin_array(&mut self, _: usize) {}
    fn begin_object(&mut self, _: usize) {}
    fn key(&mut self, _: &'a str, _: bool) {}
    fn string(&mut self, _: &'a str, _: bool, _: usize) {}
    fn number(&mut self, _: &'a str, _: f64, _: usize) {}
    fn literal(&mut self, _: Literal, _: usize) {}
    fn end_container(&mut self, _: usize) {}
}

/// Checks that `text` is one complete JSON text that dsh's lossless boundary accepts.
///
/// Refuses what `JSON.parse` refuses, plus numbers that JavaScript reads as `-0` or ±Infinity,
/// nesting deeper than `limits.max_depth` and texts longer than `limits.max_bytes`. Accepts
/// lone surrogate escapes and duplicate keys. Does not allocate for nesting up to 4096 levels.
///
/// ```
/// use sessionlog::json::{validate, JsonError, JsonLimits};
/// let limits = JsonLimits::default();
/// assert!(validate(r#"{"text":"\ud800","n":1e21}"#, &limits).is_ok());
/// assert!(matches!(validate("-0.0", &limits), Err(JsonError::NegativeZero { .. })));
/// assert!(matches!(validate("1e400", &limits), Err(JsonError::NonFinite { .. })));
/// assert!(matches!(validate("[1,]", &limits), Err(JsonError::Syntax { offset: 3, .. })));
/// ```
pub fn validate(text: &str, limits: &JsonLimits) -> Result<(), JsonError> {
    drive(text, limits, NegativeZero::Refuse.into(), &mut NoSink)
}

/// [`validate`] with an explicit [`NegativeZero`] policy.
pub fn validate_with(
    text: &str,
    limits: &JsonLimits,
    negative_zero: NegativeZero,
) -> Result<(), JsonError> {
    drive(text, limits, negative_zero.into(), &mut NoSink)
}

/// Like [`validate`], for bytes that must also be UTF-8.
pub fn validate_bytes(bytes: &[u8], limits: &JsonLimits) -> Result<(), JsonError> {
    validate(utf8(bytes)?, limits)
}

fn utf8(bytes: &[u8]) -> Result<&str, JsonError> {
    std::str::from_utf8(bytes).map_err(|e| JsonError::InvalidUtf8 {
        offset: e.valid_up_to(),
    })
}

struct TreeSink {
    stack: Vec<Frame>,
    root: Option<JsonValue>,
}

enum Frame {
    Arr(Vec<JsonValue>),
    Obj(Vec<(JsString, JsonValue)>, Option<JsString>),
}

impl TreeSink {
    fn push(&mut self, v: JsonValue) {
        match self.stack.last_mut() {
            Some(Frame::Arr(items)) => items.push(v),
            Some(Frame::Obj(entries, pending)) => {
                if let Some(k) = pending.take() {
                    entries.push((k, v));
                }
            }
            None => self.root = Some(v),
        }
    }
}

impl<'a> Sink<'a> for TreeSink {
    const WANTS_NUMBERS: bool = true;
    fn begin_array(&mut self, _: usize) {
        self.stack.push(Frame::Arr(Vec::new()));
    }
    fn begin_object(&mut self, _: usize) {
        self.stack.push(Frame::Obj(Vec::new(), None));
    }
    fn key(&mut self, raw: &'a str, escaped: bool) {
        if let Some(Frame::Obj(_, pending)) = self.stack.last_mut() {
            *pending = Some(decode_string(raw, escaped));
        }
    }
    fn string(&mut self, raw: &'a str, escaped: bool, _: usize) {
        self.push(JsonValue::String(decode_string(raw, escaped)));
    }
    fn number(&mut self, text: &'a str, value: f64, _: usize) {
        self.push(JsonValue::Number(JsonNumber {
            value,
            text: text.into(),
        }));
    }
    fn literal(&mut self, value: Literal, _: usize) {
        self.push(match value {
            Literal::Null => JsonValue::Null,
            Literal::True => JsonValue::Bool(true),
            Literal::False => JsonValue::Bool(false),
        });
    }
    fn end_container(&mut self, _: usize) {
        let v = match self.stack.pop() {
            Some(Frame::Arr(items)) => JsonValue::Array(items),
            Some(Frame::Obj(entries, _)) => JsonValue::Object(JsonObject::from_entries(entries)),
            None => return,
        };
        self.push(v);
    }
}

/// Parses one complete JSON text into a [`JsonValue`], accepting exactly what [`validate`]
/// accepts. Duplicate keys keep their first position and last value, as `JSON.parse` does.
///
/// ```
/// use sessionlog::json::{parse, stringify, JsonLimits};
/// let v = parse(r#"{"b":1,"10":2,"a":3,"2":4,"b":5}"#, &JsonLimits::default()).unwrap();
/// assert_eq!(v.get("b").and_then(|b| b.as_u64()), Some(5));
/// assert_eq!(stringify(&v), r#"{"2":4,"10":2,"b":5,"a":3}"#);
/// ```
pub fn parse(text: &str, limits: &JsonLimits) -> Result<JsonValue, JsonError> {
    parse_with(text, limits, NegativeZero::Refuse)
}

/// [`parse`] with an explicit [`NegativeZero`] policy.
pub fn parse_with(
    text: &str,
    limits: &JsonLimits,
    negative_zero: NegativeZero,
) -> Result<JsonValue, JsonError> {
    let mut sink = TreeSink {
        stack: Vec::new(),
        root: None,
    };
    drive(text, limits, negative_zero.into(), &mut sink)?;
    Ok(sink.root.unwrap_or_default())
}

/// Like [`parse`], for bytes that must also be UTF-8.
pub fn parse_bytes(bytes: &[u8], limits: &JsonLimits) -> Result<JsonValue, JsonError> {
    parse(utf8(bytes)?, limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_run_end_finds_the_first_stop_byte_at_every_position() {
        let stops = [b'"', b'\\', 0x00, 0x1f, b'\n'];
        for len in 0..40usize {
            for at in 0..=len {
                for &stop in &stops {
                    let mut text: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
                    // Bytes that must not stop a run: 0x20, 0x7f and UTF-8 continuation bytes.
                    if len > 2 {
                        text[len / 3] = 0x20;
                        text[len / 2] = 0xC3;
                    }
                    if at < len {
                        text[at] = stop;
                    }
                    let expect = text
                        .iter()
                        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                        .unwrap_or(len);
                    for from in 0..=expect.min(len) {
                        assert_eq!(plain_run_end(&text, from), expect, "{text:?} from {from}");
                    }
                }
            }
        }
    }

    fn lim() -> JsonLimits {
        JsonLimits::default()
    }

    #[test]
    fn kind_stack_spills_to_heap() {
        let mut s = KindStack::new();
        for i in 0..10_000 {
            s.push(i % 3 == 0);
        }
        for i in (0..10_000).rev() {
            assert_eq!(s.top(), Some(i % 3 == 0));
            s.pop();
        }
        assert_eq!(s.top(), None);
    }

    #[test]
    fn number_scan_checks() {
        assert!(scan_number("-0.000", 0, false, NegativeZero::Refuse.into()).is_err());
        assert!(scan_number("-0.001", 0, false, NegativeZero::Refuse.into()).is_ok());
        let long_neg_tiny = format!("-0.{}1", "0".repeat(400));
        assert!(matches!(
            scan_number(&long_neg_tiny, 0, false, NegativeZero::Refuse.into()),
            Err(JsonError::NegativeZero { .. })
        ));
        let long_int = "9".repeat(400);
        assert!(matches!(
            scan_number(&long_int, 0, false, NegativeZero::Refuse.into()),
            Err(JsonError::NonFinite { .. })
        ));
        assert!(validate(&format!("0.{}1", "0".repeat(400)), &lim()).is_ok());
    }
}
