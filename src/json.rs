//! Lossless JSON: validation of JSON text as dsh's lossless-JSON boundary does it, a value
//! tree with JavaScript semantics, and `JSON.stringify`-exact printing.
//!
//! dsh (TypeScript) keeps event payloads as JavaScript values and writes them with plain
//! `JSON.stringify`. To read and write its files byte for byte this module copies the
//! JavaScript rules (dsh-persistence-formats §2, dsh-session-semantics §3):
//!
//! - **Accepted text** ([`validate`], [`parse`]): RFC 8259 JSON as `JSON.parse` reads it, minus
//!   the values the lossless boundary rejects: numbers that JavaScript reads as `-0` (`-0`,
//!   `-0.0`, `-0e5`, `-1e-400`) or as ±Infinity (`1e400`). Lone UTF-16 surrogate escapes
//!   (`"\ud800"`) are **accepted**: JavaScript strings can hold them. Duplicate keys are
//!   accepted; as in `JSON.parse` the last value wins and keeps the first key's position.
//! - **Object key order** ([`JsonObject`]): JavaScript own-property order: keys that are array
//!   indices (`"0"` … `"4294967294"`, no leading zeros) first in ascending numeric order, then
//!   all other keys in insertion order.
//! - **Printing** ([`stringify()`]): no whitespace, ECMAScript `Number::toString` for numbers
//!   ([`js_number_to_string`]), `JSON.stringify` string escaping ([`write_js_string`]).
//! - **Raw access** ([`raw_member`], [`raw_members`]): the exact source slice of a member, so a
//!   stored payload can be handed back byte for byte without re-printing it.
//!
//! Parsing, printing, comparing, cloning and dropping are all iterative: nesting depth is
//! bounded only by [`JsonLimits::max_depth`], never by the thread's stack.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;

/// The default [`JsonLimits::max_depth`]: 10 000 nested arrays/objects.
pub const DEFAULT_MAX_DEPTH: usize = 10_000;

/// The default [`JsonLimits::max_bytes`]: 64 MiB of JSON text.
pub const DEFAULT_MAX_BYTES: usize = 64 << 20;

/// `Number.MAX_SAFE_INTEGER` as an `f64` (2^53 − 1).
const MAX_SAFE_F64: f64 = 9_007_199_254_740_991.0;

/// The largest array index JavaScript hoists to the front of an object's key order.
const MAX_ARRAY_INDEX: u64 = 4_294_967_294;

/// Bounds applied while reading JSON text.
///
/// The [`Default`] is `max_depth` [`DEFAULT_MAX_DEPTH`] (10 000) and `max_bytes`
/// [`DEFAULT_MAX_BYTES`] (64 MiB). dsh itself has no depth limit; the default is far above any
/// payload dsh produces and can be raised freely (nothing recurses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JsonLimits {
    /// Maximum nesting of arrays and objects (`1` is `[]`, a top-level scalar is depth 0).
    pub max_depth: usize,
    /// Maximum length of the JSON text in bytes.
    pub max_bytes: usize,
}

impl Default for JsonLimits {
    fn default() -> Self {
        JsonLimits {
            max_depth: DEFAULT_MAX_DEPTH,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// Why a JSON text (or value) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// The text is not JSON.
    #[error("invalid JSON at byte {offset}: {message}")]
    Syntax {
        /// Byte offset of the offending character.
        offset: usize,
        /// What was expected or found.
        message: &'static str,
    },
    /// The text ends in the middle of a value.
    #[error("unexpected end of JSON text at byte {offset}: {message}")]
    UnexpectedEnd {
        /// Byte offset where more input was needed (the text length).
        offset: usize,
        /// What was expected.
        message: &'static str,
    },
    /// A number that JavaScript reads as `-0`, which `JSON.stringify` would write as `0`.
    #[error(
        "number `{text}` at byte {offset} is negative zero, which JSON cannot round-trip \
         (JSON.stringify writes 0)"
    )]
    NegativeZero {
        /// Byte offset of the number.
        offset: usize,
        /// The number's text (at most 64 bytes of it).
        text: String,
    },
    /// A number that JavaScript reads as ±Infinity.
    #[error("number `{text}` at byte {offset} is not finite in JavaScript (it reads as Infinity)")]
    NonFinite {
        /// Byte offset of the number.
        offset: usize,
        /// The number's text (at most 64 bytes of it).
        text: String,
    },
    /// A value given as a number (not as text) is `-0`, NaN or infinite.
    #[error(
        "number value {value} cannot be stored losslessly as JSON (-0, NaN and Infinity are refused)"
    )]
    NotLosslessNumber {
        /// The refused value, as Rust prints it.
        value: String,
    },
    /// Arrays/objects nested deeper than [`JsonLimits::max_depth`].
    #[error("JSON nesting deeper than {max_depth} levels at byte {offset}")]
    TooDeep {
        /// Byte offset of the opening bracket that went too deep.
        offset: usize,
        /// The limit.
        max_depth: usize,
    },
    /// The text is longer than [`JsonLimits::max_bytes`].
    #[error("JSON text is {len} bytes, more than the limit of {max_bytes} bytes")]
    TooLarge {
        /// Length of the text.
        len: usize,
        /// The limit.
        max_bytes: usize,
    },
    /// Something other than whitespace follows the value.
    #[error("trailing characters after the JSON value at byte {offset}")]
    TrailingCharacters {
        /// Byte offset of the first trailing character.
        offset: usize,
    },
    /// A raw control character (U+0000–U+001F) inside a string.
    #[error("unescaped control character U+{code:04X} in a string at byte {offset}")]
    ControlCharacter {
        /// Byte offset of the character.
        offset: usize,
        /// The character.
        code: u32,
    },
    /// A backslash escape that JSON does not define, or a `\u` without 4 hex digits.
    #[error("invalid escape sequence in a string at byte {offset}")]
    InvalidEscape {
        /// Byte offset of the backslash.
        offset: usize,
    },
    /// The bytes are not UTF-8 ([`validate_bytes`] and [`parse_bytes`] only).
    #[error("invalid UTF-8 at byte {offset}")]
    InvalidUtf8 {
        /// Byte offset of the first invalid byte.
        offset: usize,
    },
    /// [`raw_members`] was given a JSON text that is not an object.
    #[error("expected a JSON object, found {found}")]
    NotAnObject {
        /// What the text holds (`array`, `string`, …).
        found: &'static str,
    },
}

fn clip(text: &str) -> String {
    let mut end = text.len().min(64);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

// ---------------------------------------------------------------------------------------------
// Scanner
// ---------------------------------------------------------------------------------------------

/// Receives the structure of a JSON text from [`drive`].
trait Sink<'a> {
    fn begin_array(&mut self);
    fn begin_object(&mut self);
    /// A key; `raw` is the text between the quotes, `escaped` whether it holds a backslash.
    fn key(&mut self, raw: &'a str, escaped: bool);
    fn string(&mut self, raw: &'a str, escaped: bool);
    fn number(&mut self, text: &'a str, value: f64);
    fn literal(&mut self, value: Literal);
    fn end_container(&mut self);
    /// Whether [`Sink::number`] needs the number's value (validation does not).
    const WANTS_NUMBERS: bool;
}

#[derive(Clone, Copy)]
enum Literal {
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

fn expect_digit(b: &[u8], i: usize) -> Result<(), JsonError> {
    match b.get(i) {
        Some(c) if c.is_ascii_digit() => Ok(()),
        None => Err(JsonError::UnexpectedEnd {
            offset: b.len(),
            message: "expected a digit",
        }),
        Some(_) => Err(JsonError::Syntax {
            offset: i,
            message: "expected a digit",
        }),
    }
}

/// Scans a number; returns its end and, when needed or asked for, its value. Refuses text that
/// JavaScript reads as -0 or ±Infinity.
fn scan_number(
    text: &str,
    start: usize,
    want_value: bool,
    negative_zero: NegativeZero,
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
        _ => {
            expect_digit(b, i)?;
            return Err(JsonError::Syntax {
                offset: i,
                message: "expected a digit",
            });
        }
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
        if value.is_infinite() {
            return Err(JsonError::NonFinite {
                offset: start,
                text: clip(slice),
            });
        }
        if value == 0.0 && value.is_sign_negative() && negative_zero == NegativeZero::Refuse {
            return Err(JsonError::NegativeZero {
                offset: start,
                text: clip(slice),
            });
        }
        Ok((i, value))
    } else if negative && !nonzero && negative_zero == NegativeZero::Refuse {
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
    match b.get(pos) {
        Some(b'"') => {}
        None => {
            return Err(JsonError::UnexpectedEnd {
                offset: b.len(),
                message: "expected a string key",
            });
        }
        Some(_) => {
            return Err(JsonError::Syntax {
                offset: pos,
                message: "expected a string key",
            });
        }
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
fn drive<'a, S: Sink<'a>>(
    text: &'a str,
    limits: &JsonLimits,
    negative_zero: NegativeZero,
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
                    sink.begin_object();
                } else {
                    sink.begin_array();
                }
                pos = skip_ws(b, pos + 1);
                let close = if is_object { b'}' } else { b']' };
                if b.get(pos) == Some(&close) {
                    stack.pop();
                    sink.end_container();
                    pos += 1;
                } else if is_object {
                    pos = scan_key(text, pos, sink)?;
                    continue 'value;
                } else {
                    continue 'value;
                }
            }
            b'"' => {
                let (end, escaped) = scan_string(b, pos)?;
                sink.string(&text[pos + 1..end - 1], escaped);
                pos = end;
            }
            b't' => {
                pos = expect_literal(b, pos, b"true")?;
                sink.literal(Literal::True);
            }
            b'f' => {
                pos = expect_literal(b, pos, b"false")?;
                sink.literal(Literal::False);
            }
            b'n' => {
                pos = expect_literal(b, pos, b"null")?;
                sink.literal(Literal::Null);
            }
            b'-' | b'0'..=b'9' => {
                let (end, value) = scan_number(text, pos, S::WANTS_NUMBERS, negative_zero)?;
                sink.number(&text[pos..end], value);
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
                    sink.end_container();
                    pos += 1;
                }
                Some(b'}') if is_object => {
                    stack.pop();
                    sink.end_container();
                    pos += 1;
                }
                None => {
                    return Err(JsonError::UnexpectedEnd {
                        offset: b.len(),
                        message: if is_object {
                            "expected `,` or `}`"
                        } else {
                            "expected `,` or `]`"
                        },
                    });
                }
                Some(_) => {
                    return Err(JsonError::Syntax {
                        offset: pos,
                        message: if is_object {
                            "expected `,` or `}`"
                        } else {
                            "expected `,` or `]`"
                        },
                    });
                }
            }
        }
    }
}

struct NoSink;

impl<'a> Sink<'a> for NoSink {
    const WANTS_NUMBERS: bool = false;
    fn begin_array(&mut self) {}
    fn begin_object(&mut self) {}
    fn key(&mut self, _: &'a str, _: bool) {}
    fn string(&mut self, _: &'a str, _: bool) {}
    fn number(&mut self, _: &'a str, _: f64) {}
    fn literal(&mut self, _: Literal) {}
    fn end_container(&mut self) {}
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
    drive(text, limits, NegativeZero::Refuse, &mut NoSink)
}

/// Whether text that JavaScript reads as `-0` is refused ([`validate`], [`parse`]) or accepted.
///
/// dsh's lossless boundary refuses `-0` on append, but its loaders (`Session.fromRestore`)
/// skip that check, so `-0` inside a stored file is loaded (and read as `0`). Importers use
/// [`NegativeZero::Accept`] to load what dsh loads; appends use the default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum NegativeZero {
    /// Refuse with [`JsonError::NegativeZero`] (the lossless boundary).
    #[default]
    Refuse,
    /// Accept; the number's value is `-0.0`, which compares equal to and prints as `0`.
    Accept,
}

/// [`validate`] with an explicit [`NegativeZero`] policy.
pub fn validate_with(
    text: &str,
    limits: &JsonLimits,
    negative_zero: NegativeZero,
) -> Result<(), JsonError> {
    drive(text, limits, negative_zero, &mut NoSink)
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

// ---------------------------------------------------------------------------------------------
// JavaScript strings
// ---------------------------------------------------------------------------------------------

/// A JavaScript string: UTF-16 code units, which may include lone surrogates.
///
/// Stored as UTF-8 when well-formed, otherwise as WTF-8 (lone surrogates encoded like other
/// code points, surrogate pairs always combined), so equality of the stored bytes is equality
/// of the code units.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct JsString(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    Utf8(Box<str>),
    /// Contains at least one lone surrogate.
    Wtf8(Box<[u8]>),
}

impl JsString {
    /// The string as UTF-8, or `None` when it holds a lone surrogate.
    pub fn as_str(&self) -> Option<&str> {
        match &self.0 {
            Repr::Utf8(s) => Some(s),
            Repr::Wtf8(_) => None,
        }
    }

    /// The string as UTF-8, with each lone surrogate replaced by U+FFFD.
    pub fn to_string_lossy(&self) -> Cow<'_, str> {
        match &self.0 {
            Repr::Utf8(s) => Cow::Borrowed(s),
            Repr::Wtf8(b) => {
                let mut out = String::with_capacity(b.len());
                let mut i = 0;
                while i < b.len() {
                    if let Some(unit) = surrogate_at(b, i) {
                        let _ = unit;
                        out.push('\u{FFFD}');
                        i += 3;
                    } else {
                        let len = utf8_len(b[i]);
                        out.push_str(&String::from_utf8_lossy(&b[i..(i + len).min(b.len())]));
                        i += len;
                    }
                }
                Cow::Owned(out)
            }
        }
    }

    /// True when the string holds a lone surrogate (and so is not valid Unicode).
    pub fn has_lone_surrogates(&self) -> bool {
        matches!(self.0, Repr::Wtf8(_))
    }

    /// The WTF-8 bytes (UTF-8 when [`JsString::has_lone_surrogates`] is false).
    pub fn as_wtf8(&self) -> &[u8] {
        match &self.0 {
            Repr::Utf8(s) => s.as_bytes(),
            Repr::Wtf8(b) => b,
        }
    }

    /// Builds a string from UTF-16 code units (any sequence, lone surrogates included).
    pub fn from_utf16(units: &[u16]) -> JsString {
        let mut buf = Vec::with_capacity(units.len());
        let mut i = 0;
        while i < units.len() {
            let u = units[i];
            if (0xD800..0xDC00).contains(&u)
                && let Some(&lo) = units.get(i + 1)
                && (0xDC00..0xE000).contains(&lo)
            {
                let cp = 0x10000 + ((u32::from(u) - 0xD800) << 10) + (u32::from(lo) - 0xDC00);
                push_code_point(&mut buf, cp);
                i += 2;
                continue;
            }
            push_code_point(&mut buf, u32::from(u));
            i += 1;
        }
        JsString::from_wtf8_vec(buf)
    }

    /// The UTF-16 code units of the string.
    pub fn to_utf16(&self) -> Vec<u16> {
        let b = self.as_wtf8();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            let len = utf8_len(b[i]).min(b.len() - i);
            let cp = decode_code_point(&b[i..i + len]);
            if cp >= 0x10000 {
                let c = cp - 0x10000;
                out.push(0xD800 | (c >> 10) as u16);
                out.push(0xDC00 | (c & 0x3FF) as u16);
            } else {
                out.push(cp as u16);
            }
            i += len;
        }
        out
    }

    /// Length in UTF-16 code units (JavaScript's `length`).
    pub fn utf16_len(&self) -> usize {
        self.as_wtf8()
            .iter()
            .map(|&c| match c {
                0xF0..=0xFF => 2,
                0x80..=0xBF => 0,
                _ => 1,
            })
            .sum()
    }

    /// Wraps WTF-8 produced by this module (well-formed unless it holds surrogates).
    fn from_wtf8_vec(buf: Vec<u8>) -> JsString {
        match String::from_utf8(buf) {
            Ok(s) => JsString(Repr::Utf8(s.into_boxed_str())),
            Err(e) => JsString(Repr::Wtf8(e.into_bytes().into_boxed_slice())),
        }
    }

    /// The array index this key denotes in JavaScript's property order, if any.
    fn array_index(&self) -> Option<u32> {
        array_index(self.as_wtf8())
    }
}

impl From<&str> for JsString {
    fn from(s: &str) -> Self {
        JsString(Repr::Utf8(s.into()))
    }
}

impl From<String> for JsString {
    fn from(s: String) -> Self {
        JsString(Repr::Utf8(s.into_boxed_str()))
    }
}

impl PartialEq<str> for JsString {
    fn eq(&self, other: &str) -> bool {
        self.as_wtf8() == other.as_bytes()
    }
}

impl PartialEq<&str> for JsString {
    fn eq(&self, other: &&str) -> bool {
        self.as_wtf8() == other.as_bytes()
    }
}

impl fmt::Debug for JsString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        write_js_wtf8(&mut s, self.as_wtf8());
        f.write_str(&s)
    }
}

impl fmt::Display for JsString {
    /// Lossy: lone surrogates print as U+FFFD.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string_lossy())
    }
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

fn decode_code_point(s: &[u8]) -> u32 {
    match s.len() {
        1 => u32::from(s[0]),
        2 => (u32::from(s[0] & 0x1F) << 6) | u32::from(s[1] & 0x3F),
        3 => {
            (u32::from(s[0] & 0x0F) << 12) | (u32::from(s[1] & 0x3F) << 6) | u32::from(s[2] & 0x3F)
        }
        _ => {
            (u32::from(s[0] & 0x07) << 18)
                | (u32::from(s[1] & 0x3F) << 12)
                | (u32::from(s[2] & 0x3F) << 6)
                | u32::from(s[3] & 0x3F)
        }
    }
}

/// The surrogate code unit encoded (WTF-8) at `i`, if any.
fn surrogate_at(b: &[u8], i: usize) -> Option<u16> {
    match (b.get(i), b.get(i + 1), b.get(i + 2)) {
        (Some(0xED), Some(&b1), Some(&b2)) if (0xA0..=0xBF).contains(&b1) => {
            Some(0xD000 | (u16::from(b1 & 0x3F) << 6) | u16::from(b2 & 0x3F))
        }
        _ => None,
    }
}

/// Appends a code point (surrogates included) in generalized UTF-8.
fn push_code_point(buf: &mut Vec<u8>, cp: u32) {
    if cp < 0x80 {
        buf.push(cp as u8);
    } else if cp < 0x800 {
        buf.push(0xC0 | (cp >> 6) as u8);
        buf.push(0x80 | (cp & 0x3F) as u8);
    } else if cp < 0x10000 {
        buf.push(0xE0 | (cp >> 12) as u8);
        buf.push(0x80 | ((cp >> 6) & 0x3F) as u8);
        buf.push(0x80 | (cp & 0x3F) as u8);
    } else {
        buf.push(0xF0 | (cp >> 18) as u8);
        buf.push(0x80 | ((cp >> 12) & 0x3F) as u8);
        buf.push(0x80 | ((cp >> 6) & 0x3F) as u8);
        buf.push(0x80 | (cp & 0x3F) as u8);
    }
}

fn hex4(b: &[u8]) -> u16 {
    b.iter().take(4).fold(0u16, |acc, &c| {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => 0,
        };
        (acc << 4) | u16::from(d)
    })
}

/// Decodes the text between the quotes of a scanned (valid) JSON string.
fn decode_string(raw: &str, escaped: bool) -> JsString {
    if !escaped {
        return JsString::from(raw);
    }
    let b = raw.as_bytes();
    let mut buf = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let start = i;
        while i < b.len() && b[i] != b'\\' {
            i += 1;
        }
        buf.extend_from_slice(&b[start..i]);
        if i >= b.len() {
            break;
        }
        let esc = b.get(i + 1).copied().unwrap_or(b'\\');
        i += 2;
        match esc {
            b'b' => buf.push(0x08),
            b'f' => buf.push(0x0C),
            b'n' => buf.push(b'\n'),
            b'r' => buf.push(b'\r'),
            b't' => buf.push(b'\t'),
            b'u' => {
                let unit = hex4(b.get(i..).unwrap_or_default());
                i += 4;
                if (0xD800..0xDC00).contains(&unit)
                    && b.get(i) == Some(&b'\\')
                    && b.get(i + 1) == Some(&b'u')
                {
                    let lo = hex4(b.get(i + 2..).unwrap_or_default());
                    if (0xDC00..0xE000).contains(&lo) {
                        let cp =
                            0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(lo) - 0xDC00);
                        push_code_point(&mut buf, cp);
                        i += 6;
                        continue;
                    }
                }
                push_code_point(&mut buf, u32::from(unit));
            }
            other => buf.push(other), // `"`, `\`, `/`
        }
    }
    JsString::from_wtf8_vec(buf)
}

fn array_index(key: &[u8]) -> Option<u32> {
    if key.is_empty() || key.len() > 10 || (key.len() > 1 && key[0] == b'0') {
        return None;
    }
    let mut n: u64 = 0;
    for &c in key {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(c - b'0');
    }
    if n <= MAX_ARRAY_INDEX {
        u32::try_from(n).ok()
    } else {
        None
    }
}

// ---------------------------------------------------------------------------------------------
// Printing
// ---------------------------------------------------------------------------------------------

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

fn write_js_wtf8(out: &mut String, b: &[u8]) {
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

// ---------------------------------------------------------------------------------------------
// Value tree
// ---------------------------------------------------------------------------------------------

/// A JSON number: the `f64` JavaScript reads, and the text it was read from.
#[derive(Clone)]
pub struct JsonNumber {
    value: f64,
    text: Box<str>,
}

impl JsonNumber {
    /// A number from a value; `None` for `-0`, NaN and the infinities. Its text is
    /// [`js_number_to_string`]`(value)`.
    pub fn from_f64(value: f64) -> Option<JsonNumber> {
        if !value.is_finite() || (value == 0.0 && value.is_sign_negative()) {
            return None;
        }
        Some(JsonNumber {
            value,
            text: js_number_to_string(value).into_boxed_str(),
        })
    }

    /// The value JavaScript reads.
    pub fn value(&self) -> f64 {
        self.value
    }

    /// The text the number was parsed from (or its JavaScript printing when built from a value).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The value as an integer when it is a safe integer (|n| ≤ 2^53 − 1).
    pub fn as_safe_integer(&self) -> Option<i64> {
        let v = self.value;
        if v.fract() == 0.0 && v.abs() <= MAX_SAFE_F64 {
            Some(v as i64)
        } else {
            None
        }
    }
}

impl PartialEq for JsonNumber {
    /// Equal when JavaScript reads the same value (`1.0 == 1`).
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl fmt::Debug for JsonNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A JSON object with JavaScript own-property order: array-index keys (`"0"` …
/// `"4294967294"`) first in ascending numeric order, then the other keys in insertion order.
/// Keys are unique.
#[derive(Default)]
pub struct JsonObject {
    entries: Vec<(JsString, JsonValue)>,
}

impl JsonObject {
    /// An empty object.
    pub fn new() -> Self {
        JsonObject::default()
    }

    /// Builds an object from entries in insertion order, as JavaScript would: a repeated key
    /// keeps its first position and takes its last value; array-index keys move to the front.
    pub fn from_entries(entries: Vec<(JsString, JsonValue)>) -> Self {
        JsonObject {
            entries: normalize_entries(entries),
        }
    }

    /// Sets `key` to `value` like a JavaScript property assignment (an existing key keeps its
    /// position). Returns the previous value.
    pub fn insert(&mut self, key: impl Into<JsString>, value: JsonValue) -> Option<JsonValue> {
        let key = key.into();
        if let Some(slot) = self.entries.iter_mut().find(|(k, _)| *k == key) {
            return Some(std::mem::replace(&mut slot.1, value));
        }
        match key.array_index() {
            Some(n) => {
                let at = self
                    .entries
                    .iter()
                    .position(|(k, _)| k.array_index().is_none_or(|m| m > n))
                    .unwrap_or(self.entries.len());
                self.entries.insert(at, (key, value));
            }
            None => self.entries.push((key, value)),
        }
        None
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&JsonValue> {
        self.entries
            .iter()
            .find(|(k, _)| k.as_wtf8() == key.as_bytes())
            .map(|(_, v)| v)
    }

    /// The value of a key that may hold lone surrogates.
    pub fn get_js(&self, key: &JsString) -> Option<&JsonValue> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// True when `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The entries in JavaScript order.
    pub fn entries(&self) -> &[(JsString, JsonValue)] {
        &self.entries
    }

    /// Iterates over the entries in JavaScript order.
    pub fn iter(&self) -> std::slice::Iter<'_, (JsString, JsonValue)> {
        self.entries.iter()
    }

    /// The keys in JavaScript order.
    pub fn keys(&self) -> impl Iterator<Item = &JsString> {
        self.entries.iter().map(|(k, _)| k)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the object has no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// True when the keys are exactly `keys` (in any order).
    pub fn has_exact_keys(&self, keys: &[&str]) -> bool {
        self.entries.len() == keys.len() && keys.iter().all(|k| self.contains_key(k))
    }
}

impl Clone for JsonObject {
    fn clone(&self) -> Self {
        let mut entries = Vec::with_capacity(self.entries.len());
        for (k, v) in &self.entries {
            entries.push((k.clone(), v.clone()));
        }
        JsonObject { entries }
    }
}

impl PartialEq for JsonObject {
    fn eq(&self, other: &Self) -> bool {
        self.entries.len() == other.entries.len()
            && self
                .entries
                .iter()
                .zip(&other.entries)
                .all(|((ka, va), (kb, vb))| ka == kb && va == vb)
    }
}

impl fmt::Debug for JsonObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        write_tree(&mut out, Root::Object(self));
        f.write_str(&out)
    }
}

fn normalize_entries(mut entries: Vec<(JsString, JsonValue)>) -> Vec<(JsString, JsonValue)> {
    let n = entries.len();
    // Duplicates: the last value moves into the first occurrence's slot.
    let mut duplicate_of: Vec<Option<usize>> = vec![None; n];
    let mut any_duplicate = false;
    if n <= 16 {
        for i in 1..n {
            if let Some(j) =
                (0..i).find(|&j| duplicate_of[j].is_none() && entries[j].0 == entries[i].0)
            {
                duplicate_of[i] = Some(j);
                any_duplicate = true;
            }
        }
    } else {
        let mut first: HashMap<&[u8], usize> = HashMap::with_capacity(n);
        for (i, (k, _)) in entries.iter().enumerate() {
            match first.get(k.as_wtf8()) {
                Some(&j) => {
                    duplicate_of[i] = Some(j);
                    any_duplicate = true;
                }
                None => {
                    first.insert(k.as_wtf8(), i);
                }
            }
        }
    }
    if any_duplicate {
        let mut slots: Vec<Option<(JsString, JsonValue)>> = entries.drain(..).map(Some).collect();
        for i in 0..n {
            if let Some(j) = duplicate_of[i]
                && let Some((_, v)) = slots[i].take()
                && let Some(slot) = slots[j].as_mut()
            {
                slot.1 = v;
            }
        }
        entries = slots.into_iter().flatten().collect();
    }
    if entries.iter().any(|(k, _)| k.array_index().is_some()) {
        // Stable: non-index keys keep their insertion order.
        entries.sort_by_key(|(k, _)| match k.array_index() {
            Some(i) => (0u8, i),
            None => (1u8, 0),
        });
    }
    entries
}

/// A JSON value with JavaScript semantics.
///
/// Equality ([`PartialEq`]) is `JSON.stringify` equality: numbers compare by value, object keys
/// in JavaScript order. Cloning, comparing, printing and dropping never recurse.
#[derive(Default)]
pub enum JsonValue {
    /// `null`
    #[default]
    Null,
    /// `true` / `false`
    Bool(bool),
    /// A finite number (other than `-0`, unless parsed with [`NegativeZero::Accept`]).
    Number(JsonNumber),
    /// A string (may hold lone surrogates).
    String(JsString),
    /// An array.
    Array(Vec<JsonValue>),
    /// An object.
    Object(JsonObject),
}

impl JsonValue {
    /// A number value; `None` for `-0`, NaN and the infinities.
    pub fn number(value: f64) -> Option<JsonValue> {
        JsonNumber::from_f64(value).map(JsonValue::Number)
    }

    /// A string value.
    pub fn string(s: impl Into<JsString>) -> JsonValue {
        JsonValue::String(s.into())
    }

    /// Member `key` of an object (`None` for other values or a missing key).
    pub fn get(&self, key: &str) -> Option<&JsonValue> {
        self.as_object()?.get(key)
    }

    /// Element `i` of an array.
    pub fn get_index(&self, i: usize) -> Option<&JsonValue> {
        self.as_array()?.get(i)
    }

    /// Descends through object members.
    pub fn pointer(&self, path: &[&str]) -> Option<&JsonValue> {
        path.iter().try_fold(self, |v, k| v.get(k))
    }

    /// True for `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, JsonValue::Null)
    }

    /// The boolean.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            JsonValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The number.
    pub fn as_number(&self) -> Option<&JsonNumber> {
        match self {
            JsonValue::Number(n) => Some(n),
            _ => None,
        }
    }

    /// The number's value.
    pub fn as_f64(&self) -> Option<f64> {
        self.as_number().map(JsonNumber::value)
    }

    /// The number as a safe integer (|n| ≤ 2^53 − 1, JavaScript's `Number.isSafeInteger`).
    pub fn as_i64(&self) -> Option<i64> {
        self.as_number()?.as_safe_integer()
    }

    /// The number as a non-negative safe integer.
    pub fn as_u64(&self) -> Option<u64> {
        u64::try_from(self.as_i64()?).ok()
    }

    /// The string, when it is valid Unicode (no lone surrogates).
    pub fn as_str(&self) -> Option<&str> {
        self.as_js_string()?.as_str()
    }

    /// The string, possibly holding lone surrogates.
    pub fn as_js_string(&self) -> Option<&JsString> {
        match self {
            JsonValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The array's elements.
    pub fn as_array(&self) -> Option<&[JsonValue]> {
        match self {
            JsonValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The object.
    pub fn as_object(&self) -> Option<&JsonObject> {
        match self {
            JsonValue::Object(o) => Some(o),
            _ => None,
        }
    }

    /// The JavaScript `typeof`-like name of the value: `null`, `boolean`, `number`, `string`,
    /// `array`, `object`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            JsonValue::Null => "null",
            JsonValue::Bool(_) => "boolean",
            JsonValue::Number(_) => "number",
            JsonValue::String(_) => "string",
            JsonValue::Array(_) => "array",
            JsonValue::Object(_) => "object",
        }
    }

    fn is_container(&self) -> bool {
        matches!(self, JsonValue::Array(_) | JsonValue::Object(_))
    }

    /// A shallow copy of a scalar (`None` for containers).
    fn clone_scalar(&self) -> Option<JsonValue> {
        Some(match self {
            JsonValue::Null => JsonValue::Null,
            JsonValue::Bool(b) => JsonValue::Bool(*b),
            JsonValue::Number(n) => JsonValue::Number(n.clone()),
            JsonValue::String(s) => JsonValue::String(s.clone()),
            JsonValue::Array(_) | JsonValue::Object(_) => return None,
        })
    }

    /// Converts a `serde_json` value, with JavaScript semantics: integers become `f64` (as in
    /// JavaScript, precision beyond 2^53 is lost), keys are ordered as JavaScript orders them
    /// (after `serde_json`'s own map order). Refuses `-0`.
    pub fn from_serde(value: &serde_json::Value) -> Result<JsonValue, JsonError> {
        enum Frame<'a> {
            Arr(std::slice::Iter<'a, serde_json::Value>, Vec<JsonValue>),
            Obj(
                serde_json::map::Iter<'a>,
                Vec<(JsString, JsonValue)>,
                Option<JsString>,
            ),
        }
        fn scalar(v: &serde_json::Value) -> Result<Option<JsonValue>, JsonError> {
            Ok(Some(match v {
                serde_json::Value::Null => JsonValue::Null,
                serde_json::Value::Bool(b) => JsonValue::Bool(*b),
                serde_json::Value::Number(n) => {
                    let f = n.as_f64().unwrap_or(f64::NAN);
                    JsonValue::number(f).ok_or_else(|| JsonError::NotLosslessNumber {
                        value: n.to_string(),
                    })?
                }
                serde_json::Value::String(s) => JsonValue::String(JsString::from(s.as_str())),
                _ => return Ok(None),
            }))
        }
        fn open(v: &serde_json::Value) -> Option<Frame<'_>> {
            match v {
                serde_json::Value::Array(a) => {
                    Some(Frame::Arr(a.iter(), Vec::with_capacity(a.len())))
                }
                serde_json::Value::Object(o) => {
                    Some(Frame::Obj(o.iter(), Vec::with_capacity(o.len()), None))
                }
                _ => None,
            }
        }
        if let Some(v) = scalar(value)? {
            return Ok(v);
        }
        let mut stack: Vec<Frame<'_>> = open(value).into_iter().collect();
        loop {
            let Some(top) = stack.last_mut() else {
                return Ok(JsonValue::Null);
            };
            let next = match top {
                Frame::Arr(it, _) => it.next(),
                Frame::Obj(it, _, pending) => it.next().map(|(k, v)| {
                    *pending = Some(JsString::from(k.as_str()));
                    v
                }),
            };
            let done = match next {
                Some(child) => match scalar(child)? {
                    Some(v) => v,
                    None => {
                        if let Some(f) = open(child) {
                            stack.push(f);
                        }
                        continue;
                    }
                },
                None => match stack.pop() {
                    Some(Frame::Arr(_, items)) => JsonValue::Array(items),
                    Some(Frame::Obj(_, entries, _)) => {
                        JsonValue::Object(JsonObject::from_entries(entries))
                    }
                    None => return Ok(JsonValue::Null),
                },
            };
            match stack.last_mut() {
                Some(Frame::Arr(_, items)) => items.push(done),
                Some(Frame::Obj(_, entries, pending)) => {
                    if let Some(k) = pending.take() {
                        entries.push((k, done));
                    }
                }
                None => return Ok(done),
            }
        }
    }
}

impl From<bool> for JsonValue {
    fn from(b: bool) -> Self {
        JsonValue::Bool(b)
    }
}

impl From<&str> for JsonValue {
    fn from(s: &str) -> Self {
        JsonValue::String(s.into())
    }
}

impl From<String> for JsonValue {
    fn from(s: String) -> Self {
        JsonValue::String(s.into())
    }
}

impl From<JsonObject> for JsonValue {
    fn from(o: JsonObject) -> Self {
        JsonValue::Object(o)
    }
}

impl From<Vec<JsonValue>> for JsonValue {
    fn from(a: Vec<JsonValue>) -> Self {
        JsonValue::Array(a)
    }
}

impl Drop for JsonValue {
    fn drop(&mut self) {
        // Move nested containers onto a heap stack so dropping never recurses.
        let mut stack: Vec<JsonValue> = Vec::new();
        let take_children = |v: &mut JsonValue, stack: &mut Vec<JsonValue>| match v {
            JsonValue::Array(a) if a.iter().any(JsonValue::is_container) => stack.append(a),
            JsonValue::Object(o) if o.entries.iter().any(|(_, v)| v.is_container()) => {
                stack.extend(o.entries.drain(..).map(|(_, v)| v));
            }
            _ => {}
        };
        take_children(self, &mut stack);
        while let Some(mut v) = stack.pop() {
            take_children(&mut v, &mut stack);
        }
    }
}

impl Clone for JsonValue {
    fn clone(&self) -> Self {
        enum Frame<'a> {
            Arr(std::slice::Iter<'a, JsonValue>, Vec<JsonValue>),
            Obj(
                std::slice::Iter<'a, (JsString, JsonValue)>,
                Vec<(JsString, JsonValue)>,
                Option<JsString>,
            ),
        }
        fn open(v: &JsonValue) -> Option<Frame<'_>> {
            match v {
                JsonValue::Array(a) => Some(Frame::Arr(a.iter(), Vec::with_capacity(a.len()))),
                JsonValue::Object(o) => Some(Frame::Obj(
                    o.entries.iter(),
                    Vec::with_capacity(o.len()),
                    None,
                )),
                _ => None,
            }
        }
        if let Some(v) = self.clone_scalar() {
            return v;
        }
        let mut stack: Vec<Frame<'_>> = open(self).into_iter().collect();
        loop {
            let Some(top) = stack.last_mut() else {
                return JsonValue::Null;
            };
            let next = match top {
                Frame::Arr(it, _) => it.next(),
                Frame::Obj(it, _, pending) => it.next().map(|(k, v)| {
                    *pending = Some(k.clone());
                    v
                }),
            };
            let done = match next {
                Some(child) => match child.clone_scalar() {
                    Some(v) => v,
                    None => {
                        if let Some(f) = open(child) {
                            stack.push(f);
                        }
                        continue;
                    }
                },
                None => match stack.pop() {
                    Some(Frame::Arr(_, items)) => JsonValue::Array(items),
                    // Already in JavaScript order and unique.
                    Some(Frame::Obj(_, entries, _)) => JsonValue::Object(JsonObject { entries }),
                    None => return JsonValue::Null,
                },
            };
            match stack.last_mut() {
                Some(Frame::Arr(_, items)) => items.push(done),
                Some(Frame::Obj(_, entries, pending)) => {
                    if let Some(k) = pending.take() {
                        entries.push((k, done));
                    }
                }
                None => return done,
            }
        }
    }
}

impl PartialEq for JsonValue {
    fn eq(&self, other: &Self) -> bool {
        let mut stack: Vec<(&JsonValue, &JsonValue)> = vec![(self, other)];
        while let Some(pair) = stack.pop() {
            match pair {
                (JsonValue::Null, JsonValue::Null) => {}
                (JsonValue::Bool(a), JsonValue::Bool(b)) if a == b => {}
                (JsonValue::Number(a), JsonValue::Number(b)) if a == b => {}
                (JsonValue::String(a), JsonValue::String(b)) if a == b => {}
                (JsonValue::Array(a), JsonValue::Array(b)) if a.len() == b.len() => {
                    stack.extend(a.iter().zip(b.iter()));
                }
                (JsonValue::Object(a), JsonValue::Object(b)) if a.len() == b.len() => {
                    for ((ka, va), (kb, vb)) in a.entries.iter().zip(b.entries.iter()) {
                        if ka != kb {
                            return false;
                        }
                        stack.push((va, vb));
                    }
                }
                _ => return false,
            }
        }
        true
    }
}

impl fmt::Debug for JsonValue {
    /// Prints the value's `JSON.stringify` text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&stringify(self))
    }
}

impl fmt::Display for JsonValue {
    /// Prints the value's `JSON.stringify` text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&stringify(self))
    }
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
    fn begin_array(&mut self) {
        self.stack.push(Frame::Arr(Vec::new()));
    }
    fn begin_object(&mut self) {
        self.stack.push(Frame::Obj(Vec::new(), None));
    }
    fn key(&mut self, raw: &'a str, escaped: bool) {
        if let Some(Frame::Obj(_, pending)) = self.stack.last_mut() {
            *pending = Some(decode_string(raw, escaped));
        }
    }
    fn string(&mut self, raw: &'a str, escaped: bool) {
        self.push(JsonValue::String(decode_string(raw, escaped)));
    }
    fn number(&mut self, text: &'a str, value: f64) {
        self.push(JsonValue::Number(JsonNumber {
            value,
            text: text.into(),
        }));
    }
    fn literal(&mut self, value: Literal) {
        self.push(match value {
            Literal::Null => JsonValue::Null,
            Literal::True => JsonValue::Bool(true),
            Literal::False => JsonValue::Bool(false),
        });
    }
    fn end_container(&mut self) {
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
    drive(text, limits, negative_zero, &mut sink)?;
    Ok(sink.root.unwrap_or_default())
}

/// Like [`parse`], for bytes that must also be UTF-8.
pub fn parse_bytes(bytes: &[u8], limits: &JsonLimits) -> Result<JsonValue, JsonError> {
    parse(utf8(bytes)?, limits)
}

enum Root<'a> {
    Value(&'a JsonValue),
    Object(&'a JsonObject),
}

fn write_scalar(out: &mut String, v: &JsonValue) {
    match v {
        JsonValue::Null => out.push_str("null"),
        JsonValue::Bool(true) => out.push_str("true"),
        JsonValue::Bool(false) => out.push_str("false"),
        JsonValue::Number(n) => write_js_number(out, n.value),
        JsonValue::String(s) => write_js_js_string(out, s),
        JsonValue::Array(_) | JsonValue::Object(_) => {}
    }
}

fn write_tree(out: &mut String, root: Root<'_>) {
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
            stack.push(Frame::Obj(o.entries.iter(), true));
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
                    stack.push(Frame::Obj(o.entries.iter(), true));
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

// ---------------------------------------------------------------------------------------------
// Raw access
// ---------------------------------------------------------------------------------------------

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

fn skip_string_valid(b: &[u8], pos: usize) -> usize {
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
fn skip_value_valid(b: &[u8], pos: usize) -> usize {
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

/// Members of the (validated) object starting at `pos`, in source order.
pub(crate) fn members_valid(text: &str, pos: usize) -> Vec<RawMember<'_>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = skip_ws(b, pos + 1);
    if b.get(i) == Some(&b'}') {
        return out;
    }
    while b.get(i) == Some(&b'"') {
        let key_end = skip_string_valid(b, i);
        let raw_key = text
            .get(i + 1..key_end.saturating_sub(1))
            .unwrap_or_default();
        let colon = skip_ws(b, key_end);
        let vstart = skip_ws(b, colon + 1);
        let vend = skip_value_valid(b, vstart);
        out.push(RawMember {
            key: decode_string(raw_key, raw_key.contains('\\')),
            raw_key,
            value: text.get(vstart..vend).unwrap_or_default(),
            span: vstart..vend,
        });
        let next = skip_ws(b, vend);
        if b.get(next) != Some(&b',') {
            break;
        }
        i = skip_ws(b, next + 1);
    }
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
    fn wtf8_round_trip_through_utf16() {
        let units = [0x61, 0xD800, 0xD83D, 0xDE00, 0xDC00, 0xD800];
        let s = JsString::from_utf16(&units);
        assert!(s.has_lone_surrogates());
        assert_eq!(s.to_utf16(), units);
        assert_eq!(s.utf16_len(), 6);
        assert_eq!(s.to_string_lossy(), "a\u{FFFD}😀\u{FFFD}\u{FFFD}");
        let mut out = String::new();
        write_js_js_string(&mut out, &s);
        assert_eq!(out, r#""a\ud800😀\udc00\ud800""#);
    }

    #[test]
    fn decode_combines_pairs_only() {
        let s = decode_string(r"\ud83d\ude00\ude00\ud83dx", true);
        assert_eq!(s.to_utf16(), [0xD83D, 0xDE00, 0xDE00, 0xD83D, 0x78]);
    }

    #[test]
    fn number_scan_checks() {
        assert!(scan_number("-0.000", 0, false, NegativeZero::Refuse).is_err());
        assert!(scan_number("-0.001", 0, false, NegativeZero::Refuse).is_ok());
        let long_neg_tiny = format!("-0.{}1", "0".repeat(400));
        assert!(matches!(
            scan_number(&long_neg_tiny, 0, false, NegativeZero::Refuse),
            Err(JsonError::NegativeZero { .. })
        ));
        let long_int = "9".repeat(400);
        assert!(matches!(
            scan_number(&long_int, 0, false, NegativeZero::Refuse),
            Err(JsonError::NonFinite { .. })
        ));
        assert!(validate(&format!("0.{}1", "0".repeat(400)), &lim()).is_ok());
    }

    #[test]
    fn array_index_bounds() {
        assert_eq!(array_index(b"0"), Some(0));
        assert_eq!(array_index(b"4294967294"), Some(4_294_967_294));
        assert_eq!(array_index(b"4294967295"), None);
        assert_eq!(array_index(b"01"), None);
        assert_eq!(array_index(b"-1"), None);
        assert_eq!(array_index(b""), None);
    }

    #[test]
    fn insert_follows_js_order() {
        let mut o = JsonObject::new();
        o.insert("b", JsonValue::Null);
        o.insert("7", JsonValue::Null);
        o.insert("a", JsonValue::Null);
        o.insert("3", JsonValue::Null);
        o.insert("b", JsonValue::Bool(true));
        let keys: Vec<_> = o.keys().map(|k| k.to_string()).collect();
        assert_eq!(keys, ["3", "7", "b", "a"]);
        assert_eq!(o.get("b"), Some(&JsonValue::Bool(true)));
    }
}
