//! dsh's event vocabulary (`KNOWN_SESSION_EVENT_TYPES`, §9.4) and the format refusals of
//! persistence §1.5.

use crate::event::{Event, SESSION_FORMAT_VERSION};

/// Every event type dsh (at the reference commit) understands: 13 core + 35 plugin types.
pub const KNOWN_SESSION_EVENT_TYPES: [&str; 48] = [
    "agent-preset/selected",
    "agent/inbox/spliced",
    "approval/asked",
    "approval/decided",
    "approval/policy",
    "assistant/chunk",
    "assistant/message",
    "command/done",
    "command/run",
    "compaction/end",
    "compaction/prune",
    "compaction/start",
    "compaction/summary",
    "feedback/record",
    "goal/change",
    "hook/invoked",
    "hook/result",
    "llm/retry",
    "llm/retry-started",
    "permission/preset",
    "plan/mode",
    "request/context",
    "request/header",
    "sandbox/mode",
    "schedule/change",
    "session/end-seed",
    "session/title",
    "session/title-llm-request",
    "step/end",
    "step/start",
    "subagent/descriptor",
    "team/member",
    "team/message/delivered",
    "team/message/queued",
    "team/task",
    "todo/write",
    "tool-workflow/agent-end",
    "tool-workflow/agent-start",
    "tool-workflow/run-end",
    "tool-workflow/run-start",
    "tool/call",
    "tool/code-dispatch",
    "tool/code-dispatch-start",
    "tool/result",
    "turn/end",
    "turn/start",
    "user/message",
    "web/deepseek-search-llm-request",
];

/// True when `kind` is in [`KNOWN_SESSION_EVENT_TYPES`].
pub fn is_known_event_type(kind: &str) -> bool {
    KNOWN_SESSION_EVENT_TYPES.binary_search(&kind).is_ok()
}

/// dsh's refusal text for a stored format version other than 0 (without the JSONL
/// `(raw log: …)` suffix).
pub fn format_version_refusal(id: &str, version: i64) -> String {
    if version > SESSION_FORMAT_VERSION as i64 {
        format!(
            "session \"{id}\" uses log format v{version}, but this harness reads only v{SESSION_FORMAT_VERSION}: the log was written by a newer harness — upgrade the harness to open it"
        )
    } else {
        format!(
            "session \"{id}\" uses log format v{version}, older than the supported v{SESSION_FORMAT_VERSION}, and this build ships no upgrade path for it"
        )
    }
}

/// dsh's refusal text for an unknown event type that is not marked ignorable.
pub fn unknown_type_refusal(id: &str, kind: &str, seq: u64) -> String {
    format!(
        "session \"{id}\" contains event type \"{kind}\" (seq {seq}) unknown to this harness and not marked ignorable; refusing to interpret the log — it was likely written by a newer harness"
    )
}

/// The first event whose type is unknown and not ignorable (dsh's `assertKnownEventTypes`).
pub fn first_unknown_required(events: &[Event]) -> Option<&Event> {
    events
        .iter()
        .find(|e| !is_known_event_type(&e.kind) && !e.ignorable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_is_sorted_unique_and_complete() {
        let mut sorted = KNOWN_SESSION_EVENT_TYPES.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, KNOWN_SESSION_EVENT_TYPES.to_vec());
        assert_eq!(KNOWN_SESSION_EVENT_TYPES.len(), 48);
        for core in [
            "turn/start",
            "turn/end",
            "step/start",
            "step/end",
            "user/message",
            "assistant/chunk",
            "assistant/message",
            "tool/call",
            "tool/result",
            "todo/write",
            "request/header",
            "request/context",
            "session/end-seed",
        ] {
            assert!(is_known_event_type(core), "{core}");
        }
        assert!(!is_known_event_type("request/header-delta"));
        assert!(!is_known_event_type("steering/message"));
        assert!(!is_known_event_type("text-chunks"));
    }

    #[test]
    fn refusal_texts() {
        assert_eq!(
            format_version_refusal("s", 1),
            "session \"s\" uses log format v1, but this harness reads only v0: the log was written by a newer harness — upgrade the harness to open it"
        );
        assert_eq!(
            format_version_refusal("s", -1),
            "session \"s\" uses log format v-1, older than the supported v0, and this build ships no upgrade path for it"
        );
        assert_eq!(
            unknown_type_refusal("s", "x/y", 3),
            "session \"s\" contains event type \"x/y\" (seq 3) unknown to this harness and not marked ignorable; refusing to interpret the log — it was likely written by a newer harness"
        );
    }
}
