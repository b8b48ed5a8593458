//! Request-header and request-context folds (§2.2 `request/header`, `request/context`):
//! dsh's `canonicalHeader`, `headerEquals`, `foldRequestHeader` and `requestContext()`, over
//! JSON text.

use super::invariants::TraceValue;
use crate::event::Event;
use crate::json::{Doc, N, ObjWriter};
use thiserror::Error;

/// A header or event whose JSON cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("request header is not readable: {0}")]
pub struct RequestHeaderError(pub String);

fn js_length(v: Option<N<'_, '_>>) -> usize {
    match v {
        Some(v) if v.is_array() => v.len(),
        Some(v) => v
            .as_js_str()
            .map(|s| {
                s.as_str().map_or_else(
                    || s.lossy().encode_utf16().count(),
                    |t| t.encode_utf16().count(),
                )
            })
            .unwrap_or(0),
        None => 0,
    }
}

fn canonical_of(header: N<'_, '_>) -> String {
    let mut w = ObjWriter::new();
    // An absent `config` is `undefined`, which JSON.stringify drops.
    if let Some(config) = header.get("config") {
        w.set("config", config.stringify());
    }
    if let Some(defaults) = header.get("adapterDefaults") {
        let marker = |k: &str| defaults.get(k).and_then(|v| v.as_bool()) == Some(true);
        if marker("reasoningEffort") || marker("maxTokens") {
            w.set("adapterDefaults", defaults.stringify());
        }
    }
    if let Some(system) = header.get("system").filter(|s| js_length(Some(*s)) > 0) {
        w.set("system", system.stringify());
    }
    if let Some(tools) = header.get("tools").filter(|t| js_length(Some(*t)) > 0) {
        w.set("tools", tools.stringify());
    }
    w.finish()
}

/// dsh's `canonicalHeader`: `config` as is, `adapterDefaults` only with a `true` marker,
/// `system` and `tools` only when non-empty. Returns the canonical header's JSON text.
///
/// ```
/// use sessionlog::session::request::canonical_header;
/// let h = r#"{"config":{"provider":"p","model":"m"},"system":"","tools":[],"adapterDefaults":{}}"#;
/// assert_eq!(canonical_header(h).unwrap(), r#"{"config":{"provider":"p","model":"m"}}"#);
/// ```
pub fn canonical_header(header: &str) -> Result<String, RequestHeaderError> {
    let doc = Doc::parse(header).map_err(|e| RequestHeaderError(e.to_string()))?;
    Ok(canonical_of(doc.root()))
}

/// dsh's `headerEquals` over two canonical headers (JSON text): call-config fields strictly
/// equal (`stop` element-wise, absent ≠ `[]`), adapter markers, `system`, and tools in order
/// by their JSON text (absent ≡ `[]`).
pub fn header_equals(a: &str, b: &str) -> Result<bool, RequestHeaderError> {
    let da = Doc::parse(a).map_err(|e| RequestHeaderError(e.to_string()))?;
    let db = Doc::parse(b).map_err(|e| RequestHeaderError(e.to_string()))?;
    let (a, b) = (da.root(), db.root());
    let at = |n: N<'_, '_>, path: &[&str]| {
        let mut cur = Some(n);
        for key in path {
            cur = cur.and_then(|c| c.get(key));
        }
        TraceValue::of(cur)
    };
    for path in [
        &["config", "provider"][..],
        &["config", "model"],
        &["config", "reasoningEffort"],
        &["config", "temperature"],
        &["config", "maxTokens"],
        &["adapterDefaults", "reasoningEffort"],
        &["adapterDefaults", "maxTokens"],
        &["system"],
    ] {
        if !at(a, path).strict_eq(&at(b, path)) {
            return Ok(false);
        }
    }
    let stop_a = a.get("config").and_then(|c| c.get("stop"));
    let stop_b = b.get("config").and_then(|c| c.get("stop"));
    match (stop_a, stop_b) {
        (None, None) => {}
        (Some(x), Some(y)) if x.is_array() && y.is_array() => {
            let (xs, ys) = (x.items(), y.items());
            if xs.len() != ys.len()
                || xs
                    .iter()
                    .zip(&ys)
                    .any(|(p, q)| !TraceValue::of(Some(*p)).strict_eq(&TraceValue::of(Some(*q))))
            {
                return Ok(false);
            }
        }
        _ => return Ok(false),
    }
    let tools = |n: N<'_, '_>| -> Vec<String> {
        match n.get("tools") {
            Some(t) if t.is_array() => t.items().iter().map(|i| i.stringify()).collect(),
            Some(t) => vec![t.stringify()],
            None => Vec::new(),
        }
    };
    Ok(tools(a) == tools(b))
}

/// dsh's `foldRequestHeader`: the canonical form of the last `request/header` in `events`,
/// else `from`.
pub fn fold_request_header(
    events: &[Event],
    from: Option<String>,
) -> Result<Option<String>, RequestHeaderError> {
    let mut state = from;
    for event in events.iter().filter(|e| e.kind == "request/header") {
        let doc = Doc::parse(&event.data).map_err(|e| RequestHeaderError(e.to_string()))?;
        let header = doc
            .root()
            .get("header")
            .ok_or_else(|| RequestHeaderError(format!("seq {} has no data.header", event.seq)))?;
        state = Some(canonical_of(header));
    }
    Ok(state)
}

/// dsh's `requestContext()`: the `data` of the last `request/context` in `events`, else
/// `from`.
pub fn fold_request_context(events: &[Event], from: Option<String>) -> Option<String> {
    events
        .iter()
        .rev()
        .find(|e| e.kind == "request/context")
        .map(|e| e.data.clone())
        .or(from)
}
