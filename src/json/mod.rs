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
//!
//! The files, by concept: `parse` (the one scanner, validation, the value-tree reader),
//! `string` ([`JsString`], property keys), `value` ([`JsonValue`], [`JsonObject`],
//! [`JsonNumber`]), `write` (string escaping, number printing, `JSON.stringify`), `raw`
//! (member source slices), `doc` (a spanned document for the session rules, read by the same
//! scanner), `js` (JavaScript value semantics for the projections: [`JsVal`], property access,
//! strict equality, property keys), `limits` and `error`.

mod doc;
mod error;
mod js;
mod limits;
mod parse;
mod raw;
mod shallow;
mod string;
mod value;
mod write;

pub(crate) use doc::{Doc, N, ObjWriter};
pub use error::JsonError;
pub use js::JsVal;
pub(crate) use js::{Throws, parse_data, parse_data_paths, prop, property_key};
pub use limits::{DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, JsonLimits, NegativeZero};
pub use parse::{parse, parse_bytes, parse_with, validate, validate_bytes, validate_with};
pub(crate) use raw::visit_members_valid;
pub use raw::{
    RawMember, raw_member, raw_member_with_policy, raw_members, raw_members_with,
    raw_members_with_policy,
};
pub(crate) use shallow::{Spans, validate_spans, with_span_hint};
pub use string::JsString;
pub(crate) use value::is_safe_integer;
pub use value::{JsonNumber, JsonObject, JsonValue};
pub(crate) use write::json_string;
pub use write::{
    js_number_to_string, stringify, stringify_serde, write_js_js_string, write_js_number,
    write_js_string, write_json,
};
