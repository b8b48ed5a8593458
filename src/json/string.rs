//! JavaScript strings (UTF-16 code units, lone surrogates included) stored as WTF-8.

use std::borrow::Cow;
use std::fmt;

use super::write::write_js_wtf8;

/// The largest array index JavaScript hoists to the front of an object's key order.
const MAX_ARRAY_INDEX: u64 = 4_294_967_294;

// ---------------------------------------------------------------------------------------------
// JavaScript strings
// ---------------------------------------------------------------------------------------------

/// A JavaScript string: UTF-16 code units, which may include lone surrogates.
///
/// Stored as UTF-8 when well-formed, otherwise as WTF-8 (lone surrogates encoded like other
/// code points, surrogate pairs always combined), so equality of the stored bytes is equality
/// of the code units.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct JsString(pub(super) Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) enum Repr {
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
    pub(super) fn array_index(&self) -> Option<u32> {
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
pub(super) fn surrogate_at(b: &[u8], i: usize) -> Option<u16> {
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
pub(super) fn decode_string(raw: &str, escaped: bool) -> JsString {
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

/// A property key as bytes (WTF-8): equal keys have equal bytes.
pub(super) trait PropertyKey {
    /// The key's WTF-8 bytes.
    fn key_bytes(&self) -> &[u8];
}

impl PropertyKey for JsString {
    fn key_bytes(&self) -> &[u8] {
        self.as_wtf8()
    }
}

impl PropertyKey for String {
    fn key_bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// The array index a property key denotes (`"0"` … `"4294967294"`, no leading zeros), which
/// JavaScript orders before the other keys.
pub(crate) fn array_index(key: &[u8]) -> Option<u32> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::write_js_js_string;

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
    fn array_index_bounds() {
        assert_eq!(array_index(b"0"), Some(0));
        assert_eq!(array_index(b"4294967294"), Some(4_294_967_294));
        assert_eq!(array_index(b"4294967295"), None);
        assert_eq!(array_index(b"01"), None);
        assert_eq!(array_index(b"-1"), None);
        assert_eq!(array_index(b""), None);
    }
}
