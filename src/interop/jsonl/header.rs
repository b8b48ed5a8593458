//! The header line: dsh's header rules on read, `toHeaderLine` on write.

use super::types::{JsonlReadError, JsonlWriteError, ReadOptions};
use super::{MAX_SAFE, is_negative_zero, js_display};
use crate::event::{SESSION_FORMAT_VERSION, SessionHeader};
use crate::json::{self, JsonValue, NegativeZero, js_number_to_string, write_js_string};
use std::path::Path;

fn version_refusal(id: &str, version: f64, path: Option<&Path>) -> String {
    let v = js_number_to_string(version);
    let mut message = if version > 0.0 {
        format!(
            "session \"{id}\" uses log format v{v}, but this harness reads only v0: the log was \
             written by a newer harness — upgrade the harness to open it"
        )
    } else {
        format!(
            "session \"{id}\" uses log format v{v}, older than the supported v0, and this build \
             ships no upgrade path for it"
        )
    };
    if let Some(p) = path {
        message.push_str(&format!(" (raw log: {})", p.display()));
    }
    message
}

pub(super) fn not_header(reason: impl Into<String>) -> JsonlReadError {
    JsonlReadError::NotAHeader {
        reason: reason.into(),
    }
}

/// Parses the header line (without its `\n`) as dsh's JSONL reader does. Returns the header
/// and whether the line is exactly what [`write_header_line`] produces.
pub fn parse_header_line(
    line: &str,
    opts: &ReadOptions,
) -> Result<(SessionHeader, bool), JsonlReadError> {
    let value = json::parse_with(line, &opts.line_limits, NegativeZero::Accept)
        .map_err(|e| not_header(format!("not valid JSON: {e}")))?;
    let Some(obj) = value.as_object() else {
        return Err(not_header(format!(
            "a JSON {}, not an object",
            value.kind_name()
        )));
    };
    // Version refusal comes before any shape check and names String(id).
    if let Some(v) = obj.get("version").and_then(JsonValue::as_f64)
        && v != 0.0
    {
        return Err(JsonlReadError::FormatUnsupported {
            message: version_refusal(&js_display(obj.get("id")), v, opts.path.as_deref()),
        });
    }
    if obj.get("type").and_then(JsonValue::as_str) != Some("session") {
        return Err(not_header("type is not \"session\""));
    }
    match obj.get("version") {
        Some(v) if v.as_f64().is_some() => {}
        None if opts.replay_fixture => {}
        _ => return Err(not_header("version is not a number")),
    }
    let id = match obj.get("id") {
        Some(JsonValue::String(s)) => s
            .as_str()
            .ok_or_else(|| JsonlReadError::Unsupported {
                file_line: 1,
                reason: "the session id holds a lone UTF-16 surrogate".into(),
            })?
            .to_owned(),
        _ => return Err(not_header("id is not a string")),
    };
    let non_negative = |key: &str, required: bool| -> Result<Option<u64>, JsonlReadError> {
        match obj.get(key) {
            None if !required => Ok(None),
            None => Err(not_header(format!(
                "{key} is missing (dsh's JSONL header requires it)"
            ))),
            Some(v) if !is_negative_zero(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| not_header(format!("{key} is not a non-negative safe integer"))),
            _ => Err(not_header(format!(
                "{key} is not a non-negative safe integer"
            ))),
        }
    };
    let created_at = non_negative("createdAt", true)?.unwrap_or(0);
    let delegation_depth = non_negative("delegationDepth", !opts.replay_fixture)?;
    let optional_string = |key: &str| -> Result<Option<String>, JsonlReadError> {
        match obj.get(key) {
            None => Ok(None),
            Some(JsonValue::String(s)) => {
                s.as_str()
                    .map(|s| Some(s.to_owned()))
                    .ok_or_else(|| JsonlReadError::Unsupported {
                        file_line: 1,
                        reason: format!("header {key} holds a lone UTF-16 surrogate"),
                    })
            }
            Some(_) => Err(not_header(format!("{key} is not a string"))),
        }
    };
    let origin = optional_string("origin")?;
    if origin.as_deref().is_some_and(|o| o != "subagent") {
        return Err(not_header("origin is not \"subagent\""));
    }
    let agent_preset = optional_string("agentPreset")?;
    let owner = optional_string("owner")?;
    if owner.as_deref() == Some("") {
        return Err(not_header("owner is empty"));
    }
    for key in ["sandboxMode", "approvalPolicy"] {
        if obj.contains_key(key) {
            return Err(JsonlReadError::RetiredHeaderKey { key });
        }
    }
    // Not checked by dsh's line guard, but refused by its session-header validation.
    let invalid = |reason: String| JsonlReadError::InvalidHeader {
        id: id.clone(),
        reason,
    };
    let string_field = |key: &str| -> Result<Option<String>, JsonlReadError> {
        match optional_string(key) {
            Err(JsonlReadError::NotAHeader { .. }) => {
                Err(invalid(format!("session header {key} must be a string")))
            }
            other => other,
        }
    };
    let cwd = string_field("cwd")?;
    let parent_session = string_field("parentSession")?;
    let seed_length = match obj.get("seedLength") {
        None => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            invalid("session header seedLength must be a non-negative safe integer".to_owned())
        })?),
    };
    let header = SessionHeader {
        version: SESSION_FORMAT_VERSION,
        id,
        created_at,
        cwd,
        parent_session,
        seed_length,
        origin,
        delegation_depth,
        agent_preset,
        owner,
        extra: Vec::new(),
    };
    let canonical = write_header_line(&header).is_ok_and(|l| l == line);
    Ok((header, canonical))
}

/// The header line exactly as dsh's `toHeaderLine` + `JSON.stringify` write it (no `\n`):
/// `{"type":"session","version":0,"id":…,"createdAt":…,"cwd"?,"parentSession"?,"seedLength"?,
/// "origin"?,"delegationDepth":<default 0>,"agentPreset"?,"owner"?}`. Extra keys are not
/// written (dsh drops them).
///
/// ```
/// use sessionlog::event::SessionHeader;
/// use sessionlog::interop::jsonl::write_header_line;
/// let mut h = SessionHeader::new("s1", 1000);
/// h.cwd = Some("/work".into());
/// assert_eq!(
///     write_header_line(&h).unwrap(),
///     r#"{"type":"session","version":0,"id":"s1","createdAt":1000,"cwd":"/work","delegationDepth":0}"#
/// );
/// ```
pub fn write_header_line(h: &SessionHeader) -> Result<String, JsonlWriteError> {
    let bad = |reason: &str| JsonlWriteError::InvalidHeader {
        reason: reason.to_owned(),
    };
    if h.version != SESSION_FORMAT_VERSION {
        return Err(bad("version must be 0"));
    }
    let safe = |n: u64| n <= MAX_SAFE as u64;
    if !safe(h.created_at) {
        return Err(bad("createdAt must be a non-negative safe integer"));
    }
    if h.origin.as_deref().is_some_and(|o| o != "subagent") {
        return Err(bad("origin must be \"subagent\""));
    }
    if h.owner.as_deref() == Some("") {
        return Err(bad("owner must not be empty"));
    }
    let depth = h.delegation_depth.unwrap_or(0);
    if !safe(depth) || !h.seed_length.is_none_or(safe) {
        return Err(bad(
            "delegationDepth and seedLength must be non-negative safe integers",
        ));
    }
    let mut out = String::with_capacity(128);
    out.push_str("{\"type\":\"session\",\"version\":0,\"id\":");
    write_js_string(&mut out, &h.id);
    out.push_str(",\"createdAt\":");
    out.push_str(&h.created_at.to_string());
    let opt_str = |out: &mut String, key: &str, v: &Option<String>| {
        if let Some(v) = v {
            out.push_str(",\"");
            out.push_str(key);
            out.push_str("\":");
            write_js_string(out, v);
        }
    };
    opt_str(&mut out, "cwd", &h.cwd);
    opt_str(&mut out, "parentSession", &h.parent_session);
    if let Some(n) = h.seed_length {
        out.push_str(",\"seedLength\":");
        out.push_str(&n.to_string());
    }
    opt_str(&mut out, "origin", &h.origin);
    out.push_str(",\"delegationDepth\":");
    out.push_str(&depth.to_string());
    opt_str(&mut out, "agentPreset", &h.agent_preset);
    opt_str(&mut out, "owner", &h.owner);
    out.push('}');
    Ok(out)
}
