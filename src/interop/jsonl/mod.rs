//! dsh's JSONL persistence format (plain and zstd).
//!
//! Pure functions between file bytes and `(SessionHeader, Vec<Event>)`
//! (dsh-persistence-formats §4):
//!
//! - [`read`] parses a `session.jsonl` or `session.jsonl.zstd` file (the format is detected
//!   from the content), applying dsh's header rules, its envelope rules and its torn-tail rule:
//!   the longest valid prefix is kept and what was cut is reported ([`TornTail`]), unless a
//!   later line decodes to a `turn/end`, in which case the damage lies in committed history
//!   and the file is refused.
//! - [`write()`] produces the bytes dsh would write: the header line, one line per event (or
//!   packed chunk row) in each event's recorded key order, `\n` after every line; in zstd mode
//!   one frame for the header and one frame per append batch (level 3, checksum on).
//! - [`session_relative_path`] gives dsh's path layout
//!   `<project key | _no-cwd>/<encoded id>/session.jsonl[.zstd]`.
//!
//! Event `data` is kept as the exact JSON text of the line; an imported file written again is
//! byte-identical unless [`JsonlLog::non_canonical`] lists lines dsh did not write with
//! `JSON.stringify` (extra whitespace, unknown header keys, …).
//!
//! Line numbers: dsh's messages count lines after the header from 1 ("line k" is file line
//! k + 1); every error and report here also carries the 1-based file line number.

mod header;
mod lines;
mod paths;
mod reader;
mod scan;
mod types;
mod writer;

pub use header::{parse_header_line, write_header_line};
pub use lines::write_event_line;
pub use paths::{encode_session_id, project_dir, project_key, session_path, session_relative_path};
pub use reader::{read, read_plain, read_zstd, scan_zstd_frames};
pub use types::{
    JsonlLog, JsonlPathError, JsonlReadError, JsonlWriteError, NonCanonicalLine, ReadOptions,
    TornTail, WriteOptions,
};
pub use writer::{write, write_batch};

use crate::event::MAX_SAFE_INTEGER;
use crate::json::{self, JsonError, JsonLimits, JsonValue, NegativeZero, js_number_to_string};

/// The zstd frame magic number (`0xFD2FB528`, little-endian).
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// The zstd level dsh uses (Node's default).
pub const ZSTD_LEVEL: i32 = 3;

/// File name of a plain session log.
pub const PLAIN_FILE_NAME: &str = "session.jsonl";

/// File name of a zstd session log.
pub const ZSTD_FILE_NAME: &str = "session.jsonl.zstd";

/// Project directory of sessions without a `cwd`.
pub const NO_CWD_DIR: &str = "_no-cwd";

/// dsh's `KNOWN_SESSION_EVENT_TYPES` at f56b34fae8 (48 types). A stored event of any other
/// type is refused on load unless it is marked `ignorable: true`.
pub const KNOWN_EVENT_TYPES: [&str; 48] = crate::session::known::KNOWN_SESSION_EVENT_TYPES;

/// Legacy types dsh converts on read (so they are not "unknown").
const LEGACY_CONVERTED_TYPES: [&str; 1] = ["steering/message"];

/// True when dsh's loader accepts events of type `t` without `ignorable` (a known type, or a
/// legacy type it converts on read).
pub fn is_known_event_type(t: &str) -> bool {
    KNOWN_EVENT_TYPES.contains(&t) || LEGACY_CONVERTED_TYPES.contains(&t)
}

/// How a session log file is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// `session.jsonl`: plain text (dsh's `compression: 'none'`).
    None,
    /// `session.jsonl.zstd`: a header frame and one zstd frame per append batch.
    Zstd,
}

impl Compression {
    /// The file name dsh uses for this compression.
    pub fn file_name(self) -> &'static str {
        match self {
            Compression::None => PLAIN_FILE_NAME,
            Compression::Zstd => ZSTD_FILE_NAME,
        }
    }
}

/// Detects the format from the content: zstd when the bytes start with (a prefix of) the zstd
/// magic or with a skippable-frame magic (which [`read`] then refuses), plain otherwise.
pub fn detect_compression(bytes: &[u8]) -> Compression {
    let n = bytes.len().min(4);
    let zstd_prefix = n > 0 && bytes[..n] == ZSTD_MAGIC[..n];
    let skippable =
        bytes.len() >= 4 && (bytes[0] & 0xF0) == 0x50 && bytes[1..4] == [0x2A, 0x4D, 0x18];
    if zstd_prefix || skippable {
        Compression::Zstd
    } else {
        Compression::None
    }
}

// Small JavaScript helpers shared by the header, line and scanner code.

const MAX_SAFE: i64 = MAX_SAFE_INTEGER;

/// JavaScript's `String(value)` (`None` is `undefined`), as dsh's messages print values.
fn js_display(value: Option<&JsonValue>) -> String {
    let Some(v) = value else {
        return "undefined".to_owned();
    };
    match v {
        JsonValue::Null => "null".to_owned(),
        JsonValue::Bool(b) => b.to_string(),
        JsonValue::Number(n) => js_number_to_string(n.value()),
        JsonValue::String(s) => s.to_string_lossy().into_owned(),
        JsonValue::Object(_) => "[object Object]".to_owned(),
        JsonValue::Array(items) => {
            // Array.prototype.join(","), nested arrays flattened, null/undefined empty.
            let mut stack: Vec<std::slice::Iter<'_, JsonValue>> = vec![items.iter()];
            let mut out = String::new();
            let mut first_stack: Vec<bool> = vec![true];
            while let Some(it) = stack.last_mut() {
                match it.next() {
                    Some(item) => {
                        if let Some(first) = first_stack.last_mut() {
                            if !*first {
                                out.push(',');
                            }
                            *first = false;
                        }
                        match item {
                            JsonValue::Array(inner) => {
                                stack.push(inner.iter());
                                first_stack.push(true);
                            }
                            JsonValue::Null => {}
                            other => out.push_str(&js_display(Some(other))),
                        }
                    }
                    None => {
                        stack.pop();
                        first_stack.pop();
                    }
                }
            }
            out
        }
    }
}

/// A number that is `-0` in the source text.
fn is_negative_zero(v: &JsonValue) -> bool {
    v.as_number()
        .is_some_and(|n| n.value() == 0.0 && n.text().starts_with('-'))
}

fn parse_value(text: &str) -> Result<JsonValue, JsonError> {
    json::parse_with(text, &JsonLimits::default(), NegativeZero::Accept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EnvelopeKey, KeyOrder};
    use crate::session::load::key_order as key_order_of;

    #[test]
    fn known_types_are_48_and_sorted() {
        assert_eq!(KNOWN_EVENT_TYPES.len(), 48);
        assert!(KNOWN_EVENT_TYPES.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn js_display_matches_string() {
        let v = |t: &str| parse_value(t).unwrap();
        assert_eq!(js_display(None), "undefined");
        assert_eq!(js_display(Some(&v("123"))), "123");
        assert_eq!(js_display(Some(&v("1e21"))), "1e+21");
        assert_eq!(js_display(Some(&v("[1,[2,null],\"a\"]"))), "1,2,,a");
        assert_eq!(js_display(Some(&v("{}"))), "[object Object]");
    }

    #[test]
    fn key_order_inference() {
        use EnvelopeKey::*;
        assert_eq!(key_order_of(&[Type, Seq, Time, Data]), KeyOrder::Canonical);
        assert_eq!(
            key_order_of(&[Type, Seq, Time, Data, SurfaceOp, SourceEventSeqs]),
            KeyOrder::SurfaceOpFirst
        );
        assert_eq!(
            key_order_of(&[Seq, Type, Time, Data]),
            KeyOrder::Custom(vec![Seq, Type, Time, Data])
        );
    }
}
