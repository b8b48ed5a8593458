//! The value tree: [`JsonValue`], [`JsonObject`] (JavaScript key order), [`JsonNumber`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;

use super::string::{PropertyKey, array_index};
use super::write::{Root, write_tree};
use super::{JsString, JsonError, js_number_to_string, stringify};

/// `Number.MAX_SAFE_INTEGER` as an `f64` (2^53 − 1).
const MAX_SAFE_F64: f64 = 9_007_199_254_740_991.0;

/// JavaScript's `Number.isSafeInteger(n)`: an integer with |n| ≤ 2^53 − 1.
pub(crate) fn is_safe_integer(n: f64) -> bool {
    n.is_finite() && n.fract() == 0.0 && n.abs() <= MAX_SAFE_F64
}

// ---------------------------------------------------------------------------------------------
// Value tree
// ---------------------------------------------------------------------------------------------

/// A JSON number: the `f64` JavaScript reads, and the text it was read from.
#[derive(Clone)]
pub struct JsonNumber {
    pub(super) value: f64,
    pub(super) text: Box<str>,
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
        is_safe_integer(self.value).then_some(self.value as i64)
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

/// Applies `JSON.parse`'s and JavaScript's property rules to members in insertion order: a
/// repeated key keeps its first position and takes its last value; array-index keys move to the
/// front in ascending order, the other keys keep their order.
pub(super) fn normalize_entries<K: PropertyKey, V>(mut entries: Vec<(K, V)>) -> Vec<(K, V)> {
    let n = entries.len();
    // Duplicates: the last value moves into the first occurrence's slot.
    // No allocation for the small objects of every event.
    let mut small = [None; 16];
    let mut large = Vec::new();
    let duplicate_of: &mut [Option<usize>] = if n <= small.len() {
        &mut small[..n]
    } else {
        large.resize(n, None);
        &mut large
    };
    let mut any_duplicate = false;
    if n <= 16 {
        for i in 1..n {
            if let Some(j) = (0..i).find(|&j| {
                duplicate_of[j].is_none() && entries[j].0.key_bytes() == entries[i].0.key_bytes()
            }) {
                duplicate_of[i] = Some(j);
                any_duplicate = true;
            }
        }
    } else {
        let mut first: HashMap<&[u8], usize> = HashMap::with_capacity(n);
        for (i, (k, _)) in entries.iter().enumerate() {
            match first.get(k.key_bytes()) {
                Some(&j) => {
                    duplicate_of[i] = Some(j);
                    any_duplicate = true;
                }
                None => {
                    first.insert(k.key_bytes(), i);
                }
            }
        }
    }
    if any_duplicate {
        let mut slots: Vec<Option<(K, V)>> = entries.drain(..).map(Some).collect();
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
    if entries
        .iter()
        .any(|(k, _)| array_index(k.key_bytes()).is_some())
    {
        // Stable: non-index keys keep their insertion order.
        entries.sort_by_key(|(k, _)| match array_index(k.key_bytes()) {
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

    /// Converts a `serde_json` value, with JavaScript semantics: integers become `f64` (as in
    /// JavaScript, precision beyond 2^53 is lost), keys are ordered as JavaScript orders them
    /// (after `serde_json`'s own map order). Refuses `-0`.
    pub fn from_serde(value: &serde_json::Value) -> Result<JsonValue, JsonError> {
        fn open(
            v: &serde_json::Value,
        ) -> Result<
            TreeNode<'_, serde_json::Value, impl Iterator<Item = MemberRef<'_, serde_json::Value>>>,
            JsonError,
        > {
            Ok(match v {
                serde_json::Value::Null => TreeNode::Leaf(JsonValue::Null),
                serde_json::Value::Bool(b) => TreeNode::Leaf(JsonValue::Bool(*b)),
                serde_json::Value::Number(n) => {
                    let f = n.as_f64().unwrap_or(f64::NAN);
                    TreeNode::Leaf(JsonValue::number(f).ok_or_else(|| {
                        JsonError::NotLosslessNumber {
                            value: n.to_string(),
                        }
                    })?)
                }
                serde_json::Value::String(s) => {
                    TreeNode::Leaf(JsonValue::String(JsString::from(s.as_str())))
                }
                serde_json::Value::Array(a) => TreeNode::Array(a.iter(), a.len()),
                serde_json::Value::Object(o) => TreeNode::Object(
                    o.iter().map(|(k, v)| (JsString::from(k.as_str()), v)),
                    o.len(),
                ),
            })
        }
        build_tree(value, open, JsonObject::from_entries)
    }
}

/// A member of a source tree: the key for the new object, and the value to copy.
type MemberRef<'a, T> = (JsString, &'a T);

/// One node of a tree that [`build_tree`] copies into a [`JsonValue`].
enum TreeNode<'a, T, O> {
    /// A finished value (a scalar).
    Leaf(JsonValue),
    /// An array: its elements and their count.
    Array(std::slice::Iter<'a, T>, usize),
    /// An object: its members in order and their count.
    Object(O, usize),
}

/// Copies a tree into a [`JsonValue`] without recursion: `open` classifies each node (and may
/// refuse it), `object` builds an object from its members in order.
fn build_tree<'a, T, O, E>(
    root: &'a T,
    open: impl Fn(&'a T) -> Result<TreeNode<'a, T, O>, E>,
    object: impl Fn(Vec<(JsString, JsonValue)>) -> JsonObject,
) -> Result<JsonValue, E>
where
    O: Iterator<Item = MemberRef<'a, T>>,
{
    enum Frame<'a, T, O> {
        Arr(std::slice::Iter<'a, T>, Vec<JsonValue>),
        Obj(O, Vec<(JsString, JsonValue)>, Option<JsString>),
    }
    let mut stack: Vec<Frame<'a, T, O>> = Vec::new();
    let mut current = root;
    loop {
        // Open `current`: a leaf is finished at once, a container goes on the stack.
        let mut done = match open(current)? {
            TreeNode::Leaf(v) => Some(v),
            TreeNode::Array(items, n) => {
                stack.push(Frame::Arr(items, Vec::with_capacity(n)));
                None
            }
            TreeNode::Object(members, n) => {
                stack.push(Frame::Obj(members, Vec::with_capacity(n), None));
                None
            }
        };
        // Attach finished values, closing containers, until a child is left to open.
        loop {
            if let Some(v) = done.take() {
                match stack.last_mut() {
                    Some(Frame::Arr(_, items)) => items.push(v),
                    Some(Frame::Obj(_, entries, pending)) => {
                        if let Some(k) = pending.take() {
                            entries.push((k, v));
                        }
                    }
                    None => return Ok(v),
                }
            }
            let child = match stack.last_mut() {
                Some(Frame::Arr(items, _)) => items.next(),
                Some(Frame::Obj(members, _, pending)) => members.next().map(|(k, v)| {
                    *pending = Some(k);
                    v
                }),
                None => return Ok(JsonValue::Null),
            };
            match child {
                Some(c) => {
                    current = c;
                    break;
                }
                None => {
                    done = match stack.pop() {
                        Some(Frame::Arr(_, items)) => Some(JsonValue::Array(items)),
                        Some(Frame::Obj(_, entries, _)) => Some(JsonValue::Object(object(entries))),
                        None => None,
                    }
                }
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
        fn open(
            v: &JsonValue,
        ) -> Result<
            TreeNode<'_, JsonValue, impl Iterator<Item = MemberRef<'_, JsonValue>>>,
            Infallible,
        > {
            Ok(match v {
                JsonValue::Null => TreeNode::Leaf(JsonValue::Null),
                JsonValue::Bool(b) => TreeNode::Leaf(JsonValue::Bool(*b)),
                JsonValue::Number(n) => TreeNode::Leaf(JsonValue::Number(n.clone())),
                JsonValue::String(s) => TreeNode::Leaf(JsonValue::String(s.clone())),
                JsonValue::Array(a) => TreeNode::Array(a.iter(), a.len()),
                JsonValue::Object(o) => {
                    TreeNode::Object(o.entries.iter().map(|(k, v)| (k.clone(), v)), o.len())
                }
            })
        }
        // Members are already in JavaScript order and unique.
        match build_tree(self, open, |entries| JsonObject { entries }) {
            Ok(v) => v,
            Err(never) => match never {},
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

#[cfg(test)]
mod tests {
    use super::*;

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
