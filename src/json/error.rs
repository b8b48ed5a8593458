//! Why a JSON text or value is refused.

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
    /// Arrays/objects nested deeper than [`JsonLimits::max_depth`](crate::JsonLimits::max_depth).
    #[error("JSON nesting deeper than {max_depth} levels at byte {offset}")]
    TooDeep {
        /// Byte offset of the opening bracket that went too deep.
        offset: usize,
        /// The limit.
        max_depth: usize,
    },
    /// The text is longer than [`JsonLimits::max_bytes`](crate::JsonLimits::max_bytes).
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
    /// The bytes are not UTF-8 (`validate_bytes` and `parse_bytes` only).
    #[error("invalid UTF-8 at byte {offset}")]
    InvalidUtf8 {
        /// Byte offset of the first invalid byte.
        offset: usize,
    },
    /// `raw_members` was given a JSON text that is not an object.
    #[error("expected a JSON object, found {found}")]
    NotAnObject {
        /// What the text holds (`array`, `string`, …).
        found: &'static str,
    },
}

pub(super) fn clip(text: &str) -> String {
    let mut end = text.len().min(64);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}
