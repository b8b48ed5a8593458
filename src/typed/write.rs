//! JSON text as `JSON.stringify` writes it, key by key.

use super::TypedEventError;
use super::values::ContentBlock;
use crate::event::Seq;
use crate::json::{write_js_number, write_js_string};

// ---------------------------------------------------------------------------------------------
// JSON writing

/// An object written key by key in insertion order (every key here is non-numeric, so this
/// is also JavaScript's order).
pub(super) struct Obj(String);

impl Obj {
    pub(super) fn new() -> Self {
        Obj(String::from("{"))
    }

    pub(super) fn key(mut self, key: &str) -> Self {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        write_js_string(&mut self.0, key);
        self.0.push(':');
        self
    }

    pub(super) fn str(self, key: &str, value: &str) -> Self {
        let mut o = self.key(key);
        write_js_string(&mut o.0, value);
        o
    }

    pub(super) fn opt_str(self, key: &str, value: Option<&str>) -> Self {
        match value {
            Some(v) => self.str(key, v),
            None => self,
        }
    }

    pub(super) fn uint(self, key: &str, value: u64) -> Self {
        let mut o = self.key(key);
        write_js_number(&mut o.0, value as f64);
        o
    }

    pub(super) fn opt_uint(self, key: &str, value: Option<u64>) -> Self {
        match value {
            Some(v) => self.uint(key, v),
            None => self,
        }
    }

    pub(super) fn bool(self, key: &str, value: bool) -> Self {
        self.raw(key, if value { "true" } else { "false" })
    }

    pub(super) fn raw(self, key: &str, json: &str) -> Self {
        let mut o = self.key(key);
        o.0.push_str(json);
        o
    }

    pub(super) fn opt_raw(self, key: &str, json: Option<&str>) -> Self {
        match json {
            Some(v) => self.raw(key, v),
            None => self,
        }
    }

    pub(super) fn done(mut self) -> String {
        self.0.push('}');
        self.0
    }
}

/// `[a,b,...]` from already-written JSON texts.
pub(super) fn array(items: impl IntoIterator<Item = String>) -> String {
    let mut out = String::from("[");
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&item);
    }
    out.push(']');
    out
}

pub(super) fn seq_array(seqs: &[Seq]) -> String {
    array(seqs.iter().map(|s| {
        let mut o = String::new();
        write_js_number(&mut o, *s as f64);
        o
    }))
}

pub(super) fn blocks_json(blocks: &[ContentBlock]) -> String {
    array(blocks.iter().map(ContentBlock::to_json))
}

pub(super) fn non_empty(value: String, field: &'static str) -> Result<String, TypedEventError> {
    if value.is_empty() {
        Err(TypedEventError::Empty { field })
    } else {
        Ok(value)
    }
}

/// `{"turn":T,"step":S` as the head of a step-scoped payload.
pub(super) fn turn_step(turn: u32, step: u32) -> Obj {
    Obj::new()
        .uint("turn", u64::from(turn))
        .uint("step", u64::from(step))
}
