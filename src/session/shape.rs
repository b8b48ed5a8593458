//! Payload rules: message shapes, request headers, file-mutation receipts, retired
//! vocabulary (§1.4 step 3, §1.5 steps 3–4, §2.2) and the tool-result rewrite comparison
//! (§4.7 rule 3).

use super::error::{ShapeError, Subject};
use crate::event::Event;
use crate::json::{Doc, JsonError, N, is_safe_integer, js_number_to_string};

/// Parses `data` as lossless JSON (§3): the engine's lossless boundary (refusing `-0` and
/// overflow, with no depth or size limit: dsh has none, and the store bounds record sizes).
pub(crate) fn parse_data_lossless(data: &str) -> Result<Doc<'_>, JsonError> {
    Doc::parse_lossless(data)
}

/// Parses stored `data` as dsh's restore path does (plain `JSON.parse`).
pub(crate) fn parse_data_restore(data: &str) -> Result<Doc<'_>, JsonError> {
    Doc::parse(data)
}

/// True when `v` is an object (arrays included, as JavaScript's `typeof v === "object"`)
/// carrying non-empty string `provider` and `model`.
fn has_provider_model(v: Option<N<'_, '_>>) -> bool {
    v.is_some_and(|v| {
        v.get("provider").is_some_and(|p| p.is_nonempty_str())
            && v.get("model").is_some_and(|m| m.is_nonempty_str())
    })
}

/// `request/header` rules applied by dsh at seed/load time (provider/model, reasoningEffort,
/// adapterDefaults).
pub(crate) fn check_request_header(data: N<'_, '_>, subject: &Subject) -> Result<(), ShapeError> {
    let header = data.get("header").filter(|h| h.is_object());
    let config = header.and_then(|h| h.get("config"));
    if !has_provider_model(config) {
        return Err(ShapeError::HeaderLacksProviderModel {
            subject: subject.clone(),
        });
    }
    let config = config.filter(|c| c.is_object());
    let effort = config.and_then(|c| c.get("reasoningEffort"));
    if let Some(effort) = effort
        && !effort.is_nonempty_str()
    {
        return Err(ShapeError::InvalidReasoningEffort {
            subject: subject.clone(),
        });
    }
    if let Some(defaults) = header.and_then(|h| h.get("adapterDefaults")) {
        let bad = || ShapeError::InvalidAdapterDefaults {
            subject: subject.clone(),
        };
        if !defaults.is_object() {
            return Err(bad());
        }
        for (key, value) in defaults.entries() {
            let known = key.eq_str("reasoningEffort") || key.eq_str("maxTokens");
            if !known || value.as_bool() != Some(true) {
                return Err(bad());
            }
        }
        for field in ["reasoningEffort", "maxTokens"] {
            if defaults.get(field).is_some() && config.and_then(|c| c.get(field)).is_none() {
                return Err(bad());
            }
        }
    }
    Ok(())
}

/// dsh's `assertMessageEventShape` for the three surface types (other types pass).
pub(crate) fn check_message_shape(
    kind: &str,
    data: N<'_, '_>,
    subject: &Subject,
) -> Result<(), ShapeError> {
    let is_user = kind == "user/message";
    let is_assistant = kind == "assistant/message";
    let is_tool = kind == "tool/result";
    if !(is_user || is_assistant || is_tool) {
        return Ok(());
    }
    let s = || subject.clone();
    // `typeof data === "object"` holds for arrays too, but an array has no `id`/`message`.
    let message = if is_user {
        Some(data).filter(|d| d.is_object() || d.is_array())
    } else {
        data.get("message")
    };
    let Some(message) = message.filter(|m| m.get("id").is_some_and(|id| id.is_nonempty_str()))
    else {
        return Err(ShapeError::MessageLacksId { subject: s() });
    };
    let expected = if is_assistant { "assistant" } else { "user" };
    if !message.get("role").is_some_and(|r| r.is_str(expected)) {
        return Err(ShapeError::MessageRole {
            subject: s(),
            expected,
        });
    }
    let source = message.get("source");
    let Some(source) = source.filter(|src| src.get("kind").is_some_and(|k| k.is_nonempty_str()))
    else {
        return Err(ShapeError::MessageInvalidSource { subject: s() });
    };
    let Some(content) = message.get("content").filter(|c| c.is_array()) else {
        return Err(ShapeError::MessageInvalidContent { subject: s() });
    };
    if is_assistant {
        let model_kind = source.get("kind").is_some_and(|k| k.is_str("model"));
        if !model_kind || !has_provider_model(Some(source)) {
            return Err(ShapeError::MessageModelSource { subject: s() });
        }
        return Ok(());
    }
    if !is_tool {
        return Ok(());
    }
    let tool_kind = source.get("kind").is_some_and(|k| k.is_str("tool"));
    let call_id = source.get("callId").filter(|c| c.is_nonempty_str());
    let Some(call_id) = call_id.filter(|_| tool_kind) else {
        return Err(ShapeError::MessageToolSource { subject: s() });
    };
    let block = content.at(0);
    let Some(block) = block.filter(|b| {
        content.len() == 1
            && b.get("type").is_some_and(|t| t.is_str("tool-result"))
            && b.get("content").is_some_and(|c| c.is_array())
    }) else {
        return Err(ShapeError::MessageToolResultBlock { subject: s() });
    };
    let same = match (block.get("toolCallId"), call_id.as_js_str()) {
        (Some(t), Some(c)) => t.as_js_str() == Some(c),
        _ => false,
    };
    if !same {
        return Err(ShapeError::MessageMismatchedToolCallIds { subject: s() });
    }
    Ok(())
}

fn is_hex_of(v: N<'_, '_>, len: usize) -> bool {
    v.as_js_str().and_then(|s| s.as_str()).is_some_and(|s| {
        s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// dsh's `assertFileMutations` (§2.2 FileMutation rules).
pub(crate) fn check_file_mutations(
    mutations: Option<N<'_, '_>>,
    subject: &Subject,
) -> Result<(), ShapeError> {
    let Some(mutations) = mutations else {
        return Ok(());
    };
    if !mutations.is_array() || mutations.len() == 0 {
        return Err(ShapeError::InvalidMutations {
            subject: subject.clone(),
        });
    }
    const RECEIPT_KEYS: [&str; 9] = [
        "version",
        "commitOrder",
        "beforeSha1",
        "afterSha1",
        "beforeSha256",
        "afterSha256",
        "path",
        "operation",
        "diffs",
    ];
    for (index, m) in mutations.items().into_iter().enumerate() {
        let bad = || ShapeError::InvalidMutation {
            subject: subject.clone(),
            index,
        };
        if !m.is_object() {
            return Err(bad());
        }
        if m.entries()
            .iter()
            .any(|(k, _)| !RECEIPT_KEYS.iter().any(|rk| k.eq_str(rk)))
        {
            return Err(bad());
        }
        if m.get("version").and_then(|v| v.as_f64()) != Some(1.0) {
            return Err(bad());
        }
        let order_ok = m
            .get("commitOrder")
            .and_then(|v| v.as_f64())
            .is_some_and(|n| is_safe_integer(n) && n >= 0.0);
        if !order_ok {
            return Err(bad());
        }
        // `null` or lowercase hex; an absent key reads as undefined, which fails.
        let sha = |key: &str, len: usize| -> Option<bool> {
            let v = m.get(key)?;
            if v.is_null() {
                Some(false)
            } else if is_hex_of(v, len) {
                Some(true)
            } else {
                None
            }
        };
        let (Some(b1), Some(a1), Some(b256), Some(a256)) = (
            sha("beforeSha1", 40),
            sha("afterSha1", 40),
            sha("beforeSha256", 64),
            sha("afterSha256", 64),
        ) else {
            return Err(bad());
        };
        let op = m.get("operation");
        let op_is = |name: &str| op.is_some_and(|o| o.is_str(name));
        let (create, modify, delete) = (op_is("create"), op_is("modify"), op_is("delete"));
        let consistent = if create {
            !b1 && !b256 && a1 && a256
        } else if modify {
            b1 && a1 && b256 && a256
        } else if delete {
            b1 && b256 && !a1 && !a256
        } else {
            false
        };
        if !consistent {
            return Err(bad());
        }
        let path_ok = m
            .get("path")
            .and_then(|p| p.as_js_str())
            .is_some_and(|p| !js_trim_is_empty(&p.lossy()));
        if !path_ok {
            return Err(bad());
        }
        let Some(diffs) = m.get("diffs").filter(|d| d.is_array() && d.len() > 0) else {
            return Err(bad());
        };
        for (diff_index, diff) in diffs.items().into_iter().enumerate() {
            let bad_diff = || ShapeError::InvalidMutationDiff {
                subject: subject.clone(),
                index,
                diff: diff_index,
            };
            if !diff.is_object()
                || diff
                    .entries()
                    .iter()
                    .any(|(k, _)| !(k.eq_str("oldText") || k.eq_str("newText")))
            {
                return Err(bad_diff());
            }
            // Each of oldText/newText: a string or null (absent reads as undefined: invalid).
            let text = |key: &str| -> Option<bool> {
                let v = diff.get(key)?;
                if v.is_null() {
                    Some(false)
                } else if v.as_js_str().is_some() {
                    Some(true)
                } else {
                    None
                }
            };
            let (Some(old), Some(new)) = (text("oldText"), text("newText")) else {
                return Err(bad_diff());
            };
            if (!old && !new) || (create && old) || (delete && new) {
                return Err(bad_diff());
            }
        }
    }
    Ok(())
}

/// JavaScript `String.prototype.trim() === ""` (ECMAScript white space and line terminators).
fn js_trim_is_empty(s: &str) -> bool {
    s.chars().all(|c| {
        matches!(
            c,
            '\u{9}'
                | '\u{a}'
                | '\u{b}'
                | '\u{c}'
                | '\u{d}'
                | ' '
                | '\u{a0}'
                | '\u{1680}'
                | '\u{2000}'
                ..='\u{200a}'
                    | '\u{2028}'
                    | '\u{2029}'
                    | '\u{202f}'
                    | '\u{205f}'
                    | '\u{3000}'
                    | '\u{feff}'
        )
    })
}

/// dsh's `assertSupportedRequestHeader`: receipts of `tool/result` and `tool/code-dispatch`,
/// then the retired `request/header-delta` type and `request/header` reason `"fallback"`.
pub(crate) fn check_receipts_and_legacy(
    kind: &str,
    data: N<'_, '_>,
    subject: &Subject,
) -> Result<(), ShapeError> {
    let record = Some(data).filter(|d| d.is_object());
    if kind == "tool/result" || kind == "tool/code-dispatch" {
        check_file_mutations(record.and_then(|r| r.get("mutations")), subject)?;
    }
    if kind == "request/header-delta" {
        return Err(ShapeError::LegacyHeaderDelta {
            subject: subject.clone(),
        });
    }
    if kind == "request/header"
        && record
            .and_then(|r| r.get("reason"))
            .is_some_and(|r| r.is_str("fallback"))
    {
        return Err(ShapeError::LegacyFallback {
            subject: subject.clone(),
        });
    }
    Ok(())
}

/// Every numeric `data.mutations[*].commitOrder` (any event type), as dsh collects them.
pub(crate) fn commit_orders(data: N<'_, '_>) -> Vec<f64> {
    let Some(mutations) = data
        .get("mutations")
        .filter(|_| data.is_object())
        .filter(|m| m.is_array())
    else {
        return Vec::new();
    };
    mutations
        .items()
        .into_iter()
        .filter(|m| m.is_object())
        .filter_map(|m| m.get("commitOrder").and_then(|o| o.as_f64()))
        .collect()
}

/// Key used to remember a commit order (JavaScript numbers compare by value).
pub(crate) fn order_key(order: f64) -> u64 {
    order.to_bits()
}

/// Display of a commit order as JavaScript prints it.
pub(crate) fn order_display(order: f64) -> String {
    js_number_to_string(order)
}

/// True for the types [`check_llm_shape`] or [`check_receipts_and_legacy`] check (for
/// every other type both accept anything).
pub(crate) fn has_payload_rules(kind: &str) -> bool {
    matches!(
        kind,
        "request/header"
            | "request/header-delta"
            | "user/message"
            | "assistant/message"
            | "tool/result"
            | "tool/code-dispatch"
    )
}

/// The full shape rules dsh applies at load (request header + message shape), used by the
/// engine on append too (decisions.md: append validates at least as strictly as load).
pub(crate) fn check_llm_shape(
    kind: &str,
    data: N<'_, '_>,
    subject: &Subject,
) -> Result<(), ShapeError> {
    if kind == "request/header" {
        check_request_header(data, subject)?;
    }
    check_message_shape(kind, data, subject)
}

/// §4.7 rule 3: are two `tool/result` data texts equal once the tool-result block's inner
/// `content` is ignored? `Err` when either lacks `message.content[0]` as an object.
pub(crate) fn tool_result_rest_equal(original: &str, replacement: &str) -> Result<bool, String> {
    let a = Doc::parse(original).map_err(|e| format!("target data is not JSON: {e}"))?;
    let b = Doc::parse(replacement).map_err(|e| format!("replacement data is not JSON: {e}"))?;
    let (a, b) = (a.root(), b.root());
    let parts = |d: N<'_, '_>, which: &str| -> Result<(), String> {
        let message = d
            .get("message")
            .filter(|m| m.is_object())
            .ok_or_else(|| format!("{which} has no data.message object"))?;
        message
            .get("content")
            .and_then(|c| c.at(0))
            .filter(|b| b.is_object())
            .ok_or_else(|| format!("{which} has no data.message.content[0] object"))?;
        Ok(())
    };
    parts(a, "target")?;
    parts(b, "replacement")?;
    if !a.is_object() || !b.is_object() {
        return Ok(false);
    }
    // Data: same key set; every key but `message` deep-equal.
    if a.len() != b.len() {
        return Ok(false);
    }
    for (key, av) in a.entries() {
        let Some(key) = key.as_str() else {
            return Ok(false);
        };
        let Some(bv) = b.get(key) else {
            return Ok(false);
        };
        if key == "message" {
            continue;
        }
        if !av.deep_eq(&bv) {
            return Ok(false);
        }
    }
    let (Some(am), Some(bm)) = (a.get("message"), b.get("message")) else {
        return Ok(false);
    };
    // Message: same key set; every key but `content` deep-equal.
    if am.len() != bm.len() {
        return Ok(false);
    }
    for (key, av) in am.entries() {
        let Some(key) = key.as_str() else {
            return Ok(false);
        };
        let Some(bv) = bm.get(key) else {
            return Ok(false);
        };
        if key != "content" && !av.deep_eq(&bv) {
            return Ok(false);
        }
    }
    // content[0] with its own `content` set to null: key sets ∪ {content}, rest deep-equal.
    let (Some(ab), Some(bb)) = (
        am.get("content").and_then(|c| c.at(0)),
        bm.get("content").and_then(|c| c.at(0)),
    ) else {
        return Ok(false);
    };
    let count = |blk: N<'_, '_>| blk.len() + usize::from(!blk.has("content"));
    if count(ab) != count(bb) {
        return Ok(false);
    }
    for (key, av) in ab.entries() {
        let Some(key) = key.as_str() else {
            return Ok(false);
        };
        if key == "content" {
            continue;
        }
        let Some(bv) = bb.get(key) else {
            return Ok(false);
        };
        if !av.deep_eq(&bv) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Checks an event envelope's numeric ranges (seq and time safe integers, §1.1).
pub(crate) fn envelope_ranges_ok(event: &Event) -> Result<(), &'static str> {
    if event.seq > crate::event::MAX_SAFE_INTEGER as u64 {
        return Err("seq is not a safe integer");
    }
    if event.time.unsigned_abs() > crate::event::MAX_SAFE_INTEGER as u64 {
        return Err("time is not a safe integer");
    }
    Ok(())
}
