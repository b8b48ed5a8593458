//! A small JSON document reader with JavaScript semantics and byte spans, for the session
//! rules that read fields of `data` (crate-internal).
//!
//! The session layer needs three things from JSON text: read a few fields with `JSON.parse`
//! semantics (duplicate keys: the last value wins at the first key's position; lone
//! surrogate escapes kept; `-0` and non-finite numbers refused, as dsh's lossless-JSON
//! boundary does), take the exact original text of a member (derived messages are slices
//! of the stored `data`), and print a value as `JSON.stringify` would (crash closers and
//! legacy conversion build new JSON). Nodes live in a flat arena, so parsing and dropping
//! are iterative: nesting depth is limited only by memory.

use std::borrow::Cow;
use std::fmt::Write as _;

/// A JavaScript string: UTF-8 when it is valid Unicode, UTF-16 code units otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum JsStr<'t> {
    /// Valid Unicode (borrowed from the text when it has no escapes).
    Utf8(Cow<'t, str>),
    /// Contains at least one lone surrogate.
    Wtf16(Vec<u16>),
}

impl JsStr<'_> {
    /// The string with lone surrogates replaced by U+FFFD (for messages only).
    pub(crate) fn lossy(&self) -> String {
        match self {
            JsStr::Utf8(s) => s.to_string(),
            JsStr::Wtf16(units) => String::from_utf16_lossy(units),
        }
    }

    /// True when equal to the Rust string `s`.
    pub(crate) fn eq_str(&self, s: &str) -> bool {
        matches!(self, JsStr::Utf8(own) if own.as_ref() == s)
    }

    /// Valid-Unicode view, if any.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            JsStr::Utf8(s) => Some(s),
            JsStr::Wtf16(_) => None,
        }
    }

    /// Length in UTF-16 code units (JavaScript's `length`).
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            JsStr::Utf8(s) => s.is_empty(),
            JsStr::Wtf16(u) => u.is_empty(),
        }
    }

    /// JSON text of the string, as `JSON.stringify` writes it.
    pub(crate) fn to_json(&self) -> String {
        let mut out = String::new();
        match self {
            JsStr::Utf8(s) => write_json_str(&mut out, s),
            JsStr::Wtf16(units) => write_json_units(&mut out, units),
        }
        out
    }
}

/// Writes `s` as a JSON string literal exactly as `JSON.stringify` does.
pub(crate) fn write_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        push_escaped(out, c);
    }
    out.push('"');
}

/// JSON text of a Rust string.
pub(crate) fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_json_str(&mut out, s);
    out
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x20 => {
            let _ = write!(out, "\\u{:04x}", c as u32);
        }
        c => out.push(c),
    }
}

fn write_json_units(out: &mut String, units: &[u16]) {
    out.push('"');
    for item in char::decode_utf16(units.iter().copied()) {
        match item {
            Ok(c) => push_escaped(out, c),
            Err(e) => {
                let _ = write!(out, "\\u{:04x}", e.unpaired_surrogate());
            }
        }
    }
    out.push('"');
}

/// Prints a finite number as ECMAScript `Number::toString` does.
pub(crate) fn js_number(n: f64) -> String {
    if !n.is_finite() {
        return if n.is_nan() {
            "NaN".into()
        } else if n > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    if n == 0.0 {
        return "0".to_string();
    }
    if n.fract() == 0.0 && n.abs() < 1e15 {
        // An integer below 1e21 prints as its digits; i64 covers this range exactly.
        return (n as i64).to_string();
    }
    let mut buf = ryu_js::Buffer::new();
    buf.format(n).to_string()
}

/// Is `key` a canonical array index ("0".."4294967294" without leading zeros)?
pub(crate) fn is_index_key(key: &str) -> Option<u32> {
    if key.is_empty() || key.len() > 10 {
        return None;
    }
    if key.len() > 1 && key.starts_with('0') {
        return None;
    }
    if !key.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let v: u64 = key.parse().ok()?;
    if v < 4_294_967_295 {
        Some(v as u32)
    } else {
        None
    }
}

#[derive(Debug, Clone)]
enum Payload<'t> {
    Null,
    Bool(bool),
    Num(f64),
    Str(JsStr<'t>),
    Arr(Vec<usize>),
    /// Members in JavaScript own-property order (index keys first), duplicates merged.
    Obj(Vec<(JsStr<'t>, usize)>),
}

#[derive(Debug, Clone)]
struct NodeData<'t> {
    start: usize,
    end: usize,
    payload: Payload<'t>,
}

/// A parsed JSON text.
#[derive(Debug, Clone)]
pub(crate) struct Doc<'t> {
    text: &'t str,
    nodes: Vec<NodeData<'t>>,
}

/// A handle on one value of a [`Doc`].
#[derive(Clone, Copy)]
pub(crate) struct N<'d, 't> {
    doc: &'d Doc<'t>,
    id: usize,
}

impl std::fmt::Debug for N<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "N({})", self.raw())
    }
}

/// Why a text is not lossless JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JsonDefect {
    /// Byte offset.
    pub(crate) offset: usize,
    /// What is wrong.
    pub(crate) what: &'static str,
}

impl std::fmt::Display for JsonDefect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.what, self.offset)
    }
}

impl<'t> Doc<'t> {
    /// Parses `text` as `JSON.parse` does (`-0` and numbers overflowing to infinity are
    /// read as such, as dsh's restore path accepts them).
    pub(crate) fn parse(text: &'t str) -> Result<Doc<'t>, JsonDefect> {
        Parser {
            text,
            bytes: text.as_bytes(),
            pos: 0,
            nodes: Vec::new(),
            lossless: false,
        }
        .run()
    }

    /// Parses `text` and refuses what dsh's lossless-JSON boundary refuses on append
    /// (`-0`, numbers that overflow to infinity).
    pub(crate) fn parse_lossless(text: &'t str) -> Result<Doc<'t>, JsonDefect> {
        Parser {
            text,
            bytes: text.as_bytes(),
            pos: 0,
            nodes: Vec::new(),
            lossless: true,
        }
        .run()
    }

    /// The root value.
    pub(crate) fn root(&self) -> N<'_, 't> {
        N { doc: self, id: 0 }
    }
}

impl<'d, 't> N<'d, 't> {
    fn data(&self) -> &'d NodeData<'t> {
        &self.doc.nodes[self.id]
    }

    /// The exact source text of this value.
    pub(crate) fn raw(&self) -> &'t str {
        let d = self.data();
        &self.doc.text[d.start..d.end]
    }

    /// Byte range of this value in the source text.
    pub(crate) fn span(&self) -> (usize, usize) {
        let d = self.data();
        (d.start, d.end)
    }

    /// Member `key` of an object (the last duplicate), else `None`.
    pub(crate) fn get(&self, key: &str) -> Option<N<'d, 't>> {
        match &self.data().payload {
            Payload::Obj(members) => members
                .iter()
                .find(|(k, _)| k.eq_str(key))
                .map(|&(_, id)| N { doc: self.doc, id }),
            _ => None,
        }
    }

    /// True when this is an object with own key `key`.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Object members in JavaScript own-property order.
    pub(crate) fn entries(&self) -> Vec<(&'d JsStr<'t>, N<'d, 't>)> {
        match &self.data().payload {
            Payload::Obj(members) => members
                .iter()
                .map(|(k, id)| {
                    (
                        k,
                        N {
                            doc: self.doc,
                            id: *id,
                        },
                    )
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Number of own keys (objects) or elements (arrays); 0 otherwise.
    pub(crate) fn len(&self) -> usize {
        match &self.data().payload {
            Payload::Obj(m) => m.len(),
            Payload::Arr(a) => a.len(),
            _ => 0,
        }
    }

    /// Array elements.
    pub(crate) fn items(&self) -> Vec<N<'d, 't>> {
        match &self.data().payload {
            Payload::Arr(items) => items.iter().map(|&id| N { doc: self.doc, id }).collect(),
            _ => Vec::new(),
        }
    }

    /// Element `i` of an array.
    pub(crate) fn at(&self, i: usize) -> Option<N<'d, 't>> {
        match &self.data().payload {
            Payload::Arr(items) => items.get(i).map(|&id| N { doc: self.doc, id }),
            _ => None,
        }
    }

    /// True for a non-null, non-array object.
    pub(crate) fn is_object(&self) -> bool {
        matches!(self.data().payload, Payload::Obj(_))
    }

    /// True for an array.
    pub(crate) fn is_array(&self) -> bool {
        matches!(self.data().payload, Payload::Arr(_))
    }

    /// True for `null`.
    pub(crate) fn is_null(&self) -> bool {
        matches!(self.data().payload, Payload::Null)
    }

    /// The number, if this is one.
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self.data().payload {
            Payload::Num(n) => Some(n),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub(crate) fn as_bool(&self) -> Option<bool> {
        match self.data().payload {
            Payload::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub(crate) fn as_js_str(&self) -> Option<&'d JsStr<'t>> {
        match &self.data().payload {
            Payload::Str(s) => Some(s),
            _ => None,
        }
    }

    /// True when this is the string `s`.
    pub(crate) fn is_str(&self, s: &str) -> bool {
        self.as_js_str().is_some_and(|own| own.eq_str(s))
    }

    /// True when this is a non-empty string.
    pub(crate) fn is_nonempty_str(&self) -> bool {
        self.as_js_str().is_some_and(|s| !s.is_empty())
    }

    /// `Number.isSafeInteger`.
    pub(crate) fn is_safe_integer(&self) -> bool {
        self.as_f64().is_some_and(is_safe_integer)
    }

    /// `JSON.stringify` of this value (canonical JavaScript printing).
    pub(crate) fn stringify(&self) -> String {
        let mut out = String::new();
        stringify_into(self.doc, self.id, &mut out);
        out
    }

    /// Deep equality over the JSON value domain (objects by key set, arrays by element,
    /// scalars by strict equality), as dsh's `isDeepEqualJson`.
    pub(crate) fn deep_eq(&self, other: &N<'_, '_>) -> bool {
        let mut stack = vec![(*self, *other)];
        while let Some((a, b)) = stack.pop() {
            match (&a.data().payload, &b.data().payload) {
                (Payload::Null, Payload::Null) => {}
                (Payload::Bool(x), Payload::Bool(y)) if x == y => {}
                (Payload::Num(x), Payload::Num(y)) if x == y => {}
                (Payload::Str(x), Payload::Str(y)) if x == y => {}
                (Payload::Arr(x), Payload::Arr(y)) if x.len() == y.len() => {
                    for (&i, &j) in x.iter().zip(y.iter()) {
                        stack.push((N { doc: a.doc, id: i }, N { doc: b.doc, id: j }));
                    }
                }
                (Payload::Obj(x), Payload::Obj(y)) if x.len() == y.len() => {
                    for (k, i) in x {
                        let Some((_, j)) = y.iter().find(|(k2, _)| k2 == k) else {
                            return false;
                        };
                        stack.push((N { doc: a.doc, id: *i }, N { doc: b.doc, id: *j }));
                    }
                }
                _ => return false,
            }
        }
        true
    }

    /// The value as JavaScript's `String(value)` prints it (for error messages).
    pub(crate) fn js_display(&self) -> String {
        match &self.data().payload {
            Payload::Null => "null".into(),
            Payload::Bool(b) => b.to_string(),
            Payload::Num(n) => js_number(*n),
            Payload::Str(s) => s.lossy(),
            Payload::Obj(_) => "[object Object]".into(),
            Payload::Arr(items) => items
                .iter()
                .map(|&id| {
                    let n = N { doc: self.doc, id };
                    if n.is_null() {
                        String::new()
                    } else {
                        n.js_display()
                    }
                })
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// True for a primitive (null, boolean, number, string).
    pub(crate) fn is_primitive(&self) -> bool {
        !matches!(self.data().payload, Payload::Arr(_) | Payload::Obj(_))
    }
}

/// `Number.isSafeInteger`.
pub(crate) fn is_safe_integer(n: f64) -> bool {
    n.is_finite() && n.fract() == 0.0 && n.abs() <= crate::event::MAX_SAFE_INTEGER as f64
}

fn stringify_into(doc: &Doc<'_>, root: usize, out: &mut String) {
    enum Step {
        Value(usize),
        Text(&'static str),
        Key(usize, usize),
    }
    let mut stack = vec![Step::Value(root)];
    while let Some(step) = stack.pop() {
        match step {
            Step::Text(t) => out.push_str(t),
            Step::Key(obj, i) => {
                if let Payload::Obj(m) = &doc.nodes[obj].payload {
                    out.push_str(&m[i].0.to_json());
                    out.push(':');
                }
            }
            Step::Value(id) => match &doc.nodes[id].payload {
                Payload::Null => out.push_str("null"),
                Payload::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                Payload::Num(n) if !n.is_finite() => out.push_str("null"),
                Payload::Num(n) => out.push_str(&js_number(*n)),
                Payload::Str(s) => out.push_str(&s.to_json()),
                Payload::Arr(items) => {
                    out.push('[');
                    stack.push(Step::Text("]"));
                    for (k, &child) in items.iter().enumerate().rev() {
                        stack.push(Step::Value(child));
                        if k > 0 {
                            stack.push(Step::Text(","));
                        }
                    }
                }
                Payload::Obj(members) => {
                    out.push('{');
                    stack.push(Step::Text("}"));
                    for (k, &(_, child)) in members.iter().enumerate().rev() {
                        stack.push(Step::Value(child));
                        stack.push(Step::Key(id, k));
                        if k > 0 {
                            stack.push(Step::Text(","));
                        }
                    }
                }
            },
        }
    }
}

struct Parser<'t> {
    text: &'t str,
    bytes: &'t [u8],
    pos: usize,
    nodes: Vec<NodeData<'t>>,
    lossless: bool,
}

enum Frame<'t> {
    Arr(usize, Vec<usize>),
    Obj(usize, Vec<(JsStr<'t>, usize)>, Option<JsStr<'t>>),
}

impl<'t> Parser<'t> {
    fn err<T>(&self, what: &'static str) -> Result<T, JsonDefect> {
        Err(JsonDefect {
            offset: self.pos,
            what,
        })
    }

    fn ws(&mut self) {
        while let Some(&b) = self.bytes.get(self.pos) {
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    fn push(&mut self, start: usize, payload: Payload<'t>) -> usize {
        self.nodes.push(NodeData {
            start,
            end: self.pos,
            payload,
        });
        self.nodes.len() - 1
    }

    fn run(mut self) -> Result<Doc<'t>, JsonDefect> {
        let mut stack: Vec<Frame<'t>> = Vec::new();
        // Reserve the root slot so the root is node 0.
        self.nodes.push(NodeData {
            start: 0,
            end: 0,
            payload: Payload::Null,
        });
        let mut root_done: Option<usize> = None;
        loop {
            // Parse one value (or open a container).
            self.ws();
            let start = self.pos;
            let value: Option<usize> = match self.bytes.get(self.pos) {
                None => return self.err("unexpected end of JSON text"),
                Some(b'{') => {
                    self.pos += 1;
                    self.ws();
                    if self.bytes.get(self.pos) == Some(&b'}') {
                        self.pos += 1;
                        Some(self.push(start, Payload::Obj(Vec::new())))
                    } else {
                        let key = self.key()?;
                        stack.push(Frame::Obj(start, Vec::new(), Some(key)));
                        None
                    }
                }
                Some(b'[') => {
                    self.pos += 1;
                    self.ws();
                    if self.bytes.get(self.pos) == Some(&b']') {
                        self.pos += 1;
                        Some(self.push(start, Payload::Arr(Vec::new())))
                    } else {
                        stack.push(Frame::Arr(start, Vec::new()));
                        None
                    }
                }
                Some(b'"') => {
                    let s = self.string()?;
                    Some(self.push(start, Payload::Str(s)))
                }
                Some(b't') => {
                    self.literal("true")?;
                    Some(self.push(start, Payload::Bool(true)))
                }
                Some(b'f') => {
                    self.literal("false")?;
                    Some(self.push(start, Payload::Bool(false)))
                }
                Some(b'n') => {
                    self.literal("null")?;
                    Some(self.push(start, Payload::Null))
                }
                Some(b'-' | b'0'..=b'9') => {
                    let n = self.number()?;
                    Some(self.push(start, Payload::Num(n)))
                }
                Some(_) => return self.err("unexpected character"),
            };
            let Some(mut done) = value else { continue };
            // Attach finished values to their containers, closing containers as we go.
            loop {
                match stack.last_mut() {
                    None => {
                        root_done = Some(done);
                        break;
                    }
                    Some(Frame::Arr(_, items)) => {
                        items.push(done);
                        self.ws();
                        match self.bytes.get(self.pos) {
                            Some(b',') => {
                                self.pos += 1;
                                break;
                            }
                            Some(b']') => {
                                self.pos += 1;
                                let Some(Frame::Arr(s, items)) = stack.pop() else {
                                    return self.err("internal parser state");
                                };
                                done = self.push(s, Payload::Arr(items));
                            }
                            _ => return self.err("expected ',' or ']'"),
                        }
                    }
                    Some(Frame::Obj(_, members, pending)) => {
                        let key = pending.take().unwrap_or(JsStr::Utf8(Cow::Borrowed("")));
                        insert_member(members, key, done);
                        self.ws();
                        match self.bytes.get(self.pos) {
                            Some(b',') => {
                                self.pos += 1;
                                let key = self.key()?;
                                if let Some(Frame::Obj(_, _, pending)) = stack.last_mut() {
                                    *pending = Some(key);
                                }
                                break;
                            }
                            Some(b'}') => {
                                self.pos += 1;
                                let Some(Frame::Obj(s, members, _)) = stack.pop() else {
                                    return self.err("internal parser state");
                                };
                                done = self.push(s, Payload::Obj(order_members(members)));
                            }
                            _ => return self.err("expected ',' or '}'"),
                        }
                    }
                }
            }
            if let Some(root) = root_done {
                self.ws();
                if self.pos != self.bytes.len() {
                    return self.err("unexpected text after JSON value");
                }
                // Move the finished root into slot 0.
                let data = self.nodes[root].clone();
                self.nodes[0] = data;
                return Ok(Doc {
                    text: self.text,
                    nodes: self.nodes,
                });
            }
        }
    }

    fn key(&mut self) -> Result<JsStr<'t>, JsonDefect> {
        self.ws();
        if self.bytes.get(self.pos) != Some(&b'"') {
            return self.err("expected string key");
        }
        let k = self.string()?;
        self.ws();
        if self.bytes.get(self.pos) != Some(&b':') {
            return self.err("expected ':'");
        }
        self.pos += 1;
        Ok(k)
    }

    fn literal(&mut self, word: &'static str) -> Result<(), JsonDefect> {
        if self
            .bytes
            .get(self.pos..)
            .is_some_and(|rest| rest.starts_with(word.as_bytes()))
        {
            self.pos += word.len();
            Ok(())
        } else {
            self.err("invalid literal")
        }
    }

    fn number(&mut self) -> Result<f64, JsonDefect> {
        let start = self.pos;
        let b = self.bytes;
        if b.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        match b.get(self.pos) {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                while b.get(self.pos).is_some_and(u8::is_ascii_digit) {
                    self.pos += 1;
                }
            }
            _ => return self.err("invalid number"),
        }
        if b.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            if !b.get(self.pos).is_some_and(u8::is_ascii_digit) {
                return self.err("invalid number");
            }
            while b.get(self.pos).is_some_and(u8::is_ascii_digit) {
                self.pos += 1;
            }
        }
        if matches!(b.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(b.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !b.get(self.pos).is_some_and(u8::is_ascii_digit) {
                return self.err("invalid number");
            }
            while b.get(self.pos).is_some_and(u8::is_ascii_digit) {
                self.pos += 1;
            }
        }
        let text = &self.text[start..self.pos];
        let n: f64 = match text.parse() {
            Ok(n) => n,
            Err(_) => {
                self.pos = start;
                return self.err("invalid number");
            }
        };
        if !n.is_finite() && self.lossless {
            self.pos = start;
            return self.err("number overflows to infinity (not lossless JSON)");
        }
        if n == 0.0 && n.is_sign_negative() && self.lossless {
            self.pos = start;
            return self.err("negative zero (not lossless JSON)");
        }
        Ok(n)
    }

    fn hex4(&mut self) -> Result<u16, JsonDefect> {
        let Some(h) = self.bytes.get(self.pos..self.pos + 4) else {
            return self.err("invalid unicode escape");
        };
        let mut v: u16 = 0;
        for &c in h {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => return self.err("invalid unicode escape"),
            };
            v = v * 16 + d as u16;
        }
        self.pos += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<JsStr<'t>, JsonDefect> {
        // Opening quote.
        self.pos += 1;
        // Fast path: no escape before the closing quote, so the text itself is the string.
        let start = self.pos;
        let end = crate::json::plain_run_end(self.bytes, start);
        if self.bytes.get(end) == Some(&b'"') {
            self.pos = end + 1;
            let text: &'t str = self.text;
            return Ok(JsStr::Utf8(Cow::Borrowed(&text[start..end])));
        }
        let mut units: Vec<u16> = Vec::new();
        let mut plain = String::new();
        let mut lone = false;
        loop {
            let run_start = self.pos;
            self.pos = crate::json::plain_run_end(self.bytes, self.pos);
            let run = &self.text[run_start..self.pos];
            if lone {
                units.extend(run.encode_utf16());
            } else {
                plain.push_str(run);
            }
            match self.bytes.get(self.pos) {
                None => return self.err("unterminated string"),
                Some(b'"') => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let Some(&e) = self.bytes.get(self.pos) else {
                        return self.err("unterminated string");
                    };
                    self.pos += 1;
                    let unit: u16 = match e {
                        b'"' => b'"' as u16,
                        b'\\' => b'\\' as u16,
                        b'/' => b'/' as u16,
                        b'b' => 8,
                        b'f' => 12,
                        b'n' => 10,
                        b'r' => 13,
                        b't' => 9,
                        b'u' => self.hex4()?,
                        _ => {
                            self.pos -= 1;
                            return self.err("invalid escape");
                        }
                    };
                    if lone {
                        units.push(unit);
                        continue;
                    }
                    if (0xD800..0xDC00).contains(&unit) {
                        // A high surrogate: pair it with a following low-surrogate escape.
                        let save = self.pos;
                        if self.bytes.get(self.pos..self.pos + 2) == Some(b"\\u") {
                            self.pos += 2;
                            let low = self.hex4()?;
                            if (0xDC00..0xE000).contains(&low) {
                                let c = 0x10000
                                    + (((unit as u32) - 0xD800) << 10)
                                    + ((low as u32) - 0xDC00);
                                if let Some(ch) = char::from_u32(c) {
                                    plain.push(ch);
                                    continue;
                                }
                            }
                            self.pos = save;
                        }
                        lone = true;
                        units = plain.encode_utf16().collect();
                        units.push(unit);
                    } else if (0xDC00..0xE000).contains(&unit) {
                        lone = true;
                        units = plain.encode_utf16().collect();
                        units.push(unit);
                    } else if let Some(ch) = char::from_u32(unit as u32) {
                        plain.push(ch);
                    }
                }
                Some(_) => return self.err("control character in string"),
            }
        }
        if lone {
            // A high+low pair written as two escapes after a lone one stays paired in
            // UTF-16; decide validity on the whole unit sequence.
            match String::from_utf16(&units) {
                Ok(s) => Ok(JsStr::Utf8(Cow::Owned(s))),
                Err(_) => Ok(JsStr::Wtf16(units)),
            }
        } else {
            Ok(JsStr::Utf8(Cow::Owned(plain)))
        }
    }
}

/// Inserts with `JSON.parse` semantics: a repeated key keeps its first position and takes
/// the last value.
fn insert_member<'t>(members: &mut Vec<(JsStr<'t>, usize)>, key: JsStr<'t>, value: usize) {
    if let Some(slot) = members.iter_mut().find(|(k, _)| *k == key) {
        slot.1 = value;
    } else {
        members.push((key, value));
    }
}

/// Orders members as JavaScript own properties: index keys ascending, then the rest in
/// insertion order.
fn order_members<'t>(members: Vec<(JsStr<'t>, usize)>) -> Vec<(JsStr<'t>, usize)> {
    if !members
        .iter()
        .any(|(k, _)| k.as_str().and_then(is_index_key).is_some())
    {
        return members;
    }
    let (mut idx, rest): (Vec<_>, Vec<_>) = members
        .into_iter()
        .partition(|(k, _)| k.as_str().and_then(is_index_key).is_some());
    idx.sort_by_key(|(k, _)| k.as_str().and_then(is_index_key).unwrap_or(0));
    idx.extend(rest);
    idx
}

/// Builds a JSON object text with JavaScript property semantics: setting an existing key
/// replaces its value in place; output puts index keys first.
#[derive(Debug, Default, Clone)]
pub(crate) struct ObjWriter {
    members: Vec<(String, String)>,
}

impl ObjWriter {
    /// An empty object.
    pub(crate) fn new() -> Self {
        ObjWriter::default()
    }

    /// Sets `key` to the JSON text `value_json`.
    pub(crate) fn set(&mut self, key: impl Into<String>, value_json: impl Into<String>) {
        let key = key.into();
        let value_json = value_json.into();
        if let Some(slot) = self.members.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value_json;
        } else {
            self.members.push((key, value_json));
        }
    }

    /// Copies every member of `obj` (its key JSON is re-encoded canonically). Keys with lone
    /// surrogates are kept through their JSON text.
    pub(crate) fn spread(&mut self, obj: &N<'_, '_>, skip: &[&str]) {
        for (k, v) in obj.entries() {
            let key = match k {
                JsStr::Utf8(s) => s.to_string(),
                JsStr::Wtf16(_) => k.lossy(),
            };
            if skip.contains(&key.as_str()) {
                continue;
            }
            self.set(key, v.stringify());
        }
    }

    /// The JSON text.
    pub(crate) fn finish(self) -> String {
        let (mut idx, rest): (Vec<_>, Vec<_>) = self
            .members
            .into_iter()
            .partition(|(k, _)| is_index_key(k).is_some());
        idx.sort_by_key(|(k, _)| is_index_key(k).unwrap_or(0));
        idx.extend(rest);
        let mut out = String::from("{");
        for (i, (k, v)) in idx.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_json_str(&mut out, k);
            out.push(':');
            out.push_str(v);
        }
        out.push('}');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_spans() {
        let t = r#" {"a": [1, 2.50, {"b": "x"}], "c": null} "#;
        let d = Doc::parse(t).unwrap();
        let r = d.root();
        assert_eq!(r.get("a").unwrap().raw(), r#"[1, 2.50, {"b": "x"}]"#);
        assert_eq!(r.get("a").unwrap().stringify(), r#"[1,2.5,{"b":"x"}]"#);
        assert!(r.get("c").unwrap().is_null());
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn duplicate_keys_last_wins_first_position() {
        let d = Doc::parse(r#"{"a":1,"b":2,"a":3}"#).unwrap();
        assert_eq!(d.root().stringify(), r#"{"a":3,"b":2}"#);
        assert_eq!(d.root().get("a").unwrap().raw(), "3");
    }

    #[test]
    fn index_keys_first() {
        let d = Doc::parse(r#"{"b":1,"10":2,"a":3,"2":4,"-1":5,"01":6}"#).unwrap();
        assert_eq!(
            d.root().stringify(),
            r#"{"2":4,"10":2,"b":1,"a":3,"-1":5,"01":6}"#
        );
    }

    #[test]
    fn lone_surrogates_round_trip() {
        let d = Doc::parse(r#"["\ud800", "\ud83d\ude00", "\uDC00x", "\u0041"]"#).unwrap();
        assert_eq!(
            d.root().stringify(),
            "[\"\\ud800\",\"😀\",\"\\udc00x\",\"A\"]"
        );
    }

    #[test]
    fn refuses_negative_zero_and_overflow() {
        assert!(Doc::parse_lossless("-0").is_err());
        assert!(Doc::parse_lossless("[-0.0e5]").is_err());
        assert!(Doc::parse_lossless("1e400").is_err());
        assert!(Doc::parse_lossless("0").is_ok());
        assert!(Doc::parse_lossless("-1e-400").is_err());
        // JSON.parse itself reads them (dsh's restore path keeps such values).
        let d = Doc::parse("[-0, 1e400]").unwrap();
        assert_eq!(d.root().stringify(), "[0,null]");
    }

    #[test]
    fn numbers_print_like_js() {
        let d = Doc::parse("[1.0, 1e21, 1e20, 1.5e-7, 0.000001, 123456789012345680000]").unwrap();
        assert_eq!(
            d.root().stringify(),
            "[1,1e+21,100000000000000000000,1.5e-7,0.000001,123456789012345680000]"
        );
    }

    #[test]
    fn grammar_is_strict() {
        for bad in [
            "",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "+1",
            "'a'",
            "[1 2]",
            "\"\t\"",
            "nul",
            "{a:1}",
            "1 2",
        ] {
            assert!(Doc::parse(bad).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn deep_nesting_is_iterative() {
        let depth = 100_000;
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let d = Doc::parse(&text).unwrap();
        assert_eq!(d.root().stringify().len(), depth * 2);
        let text = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
        assert!(Doc::parse(&text).is_ok());
    }

    #[test]
    fn deep_eq_ignores_key_order() {
        let a = Doc::parse(r#"{"a":[1,{"x":null}],"b":"s"}"#).unwrap();
        let b = Doc::parse(r#"{"b":"s","a":[1.0,{"x":null}]}"#).unwrap();
        let c = Doc::parse(r#"{"b":"s","a":[1,{"y":null}]}"#).unwrap();
        assert!(a.root().deep_eq(&b.root()));
        assert!(!a.root().deep_eq(&c.root()));
    }

    /// The session reader and `crate::json` agree on every line of the dsh fixtures and on a
    /// set of edge cases: same acceptance, same `JSON.stringify` output.
    #[test]
    fn agrees_with_crate_json() {
        let limits = crate::json::JsonLimits::default();
        let check = |text: &str| {
            let ours = Doc::parse_lossless(text);
            let theirs = crate::json::parse(text, &limits);
            assert_eq!(ours.is_ok(), theirs.is_ok(), "{text:?}");
            if let (Ok(a), Ok(b)) = (ours, theirs) {
                assert_eq!(a.root().stringify(), crate::json::stringify(&b), "{text:?}");
            }
        };
        for t in [
            r#"{"b":1,"10":2,"a":3,"2":4,"-1":5,"01":6,"4294967295":7,"4294967294":8}"#,
            r#"["\ud800\udc00","\udc00\ud800","\ud800","\u0000\u001f\u007f\u2028"]"#,
            "[1e21,1e-7,123e-20,0.1,-0.5,5e-324,1.7976931348623157e308]",
            "-0",
            "1e400",
            r#"{"a":1,"a":{"b":2},"c":[]}"#,
            " \t\n[ ] ",
            "[1,]",
            r#""\x""#,
        ] {
            check(t);
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/fixtures/dsh-sessions");
        let Ok(dir) = std::fs::read_dir(&root) else {
            eprintln!("skipping: {} not found", root.display());
            return;
        };
        for entry in dir.flatten() {
            let Ok(text) = std::fs::read_to_string(entry.path()) else {
                continue;
            };
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                check(line);
            }
        }
    }

    #[test]
    fn obj_writer_semantics() {
        let mut w = ObjWriter::new();
        w.set("kind", "\"x\"");
        w.set("a", "1");
        w.set("kind", "\"model\"");
        w.set("5", "2");
        assert_eq!(w.finish(), r#"{"5":2,"kind":"model","a":1}"#);
    }
}
