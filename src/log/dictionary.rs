//! The built-in zstd dictionary of segment format version 5 (format-spec.md §3.2).
//!
//! A frame whose flags carry [`super::frame::FLAG_DICTIONARY`] was compressed with
//! [`DICTIONARY_1`] as a zstd *raw content* dictionary (no dictionary header, id 0): the bytes
//! are a prefix the compressor may refer back into. They are dsh's event vocabulary, written
//! by hand from its event shapes (event type names with the one-byte length a record puts
//! before them, and the JSON skeletons of the common `data` objects), nothing taken from any
//! session's content; the most frequent shapes come last, where references are cheapest.
//!
//! **Immutable.** Frames written with it can only be read with exactly these bytes: changing
//! one byte is a new dictionary, a new flag meaning and a new segment format version.
//! `tests/format/format_spec.rs` pins its length and CRC-32.

/// Dictionary 1: its bytes, as format-spec.md §3.2 lists them.
pub const DICTIONARY_1: &[u8] = b"\
\x15agent-preset/selected\x13agent/inbox/spliced\x0eapproval/asked\x10approval/decided\
\x0fapproval/policy\x0ccommand/done\x0bcommand/run\x0ecompaction/end\x10compaction/prune\
\x10compaction/start\x12compaction/summary\x0ffeedback/record\x0bgoal/change\x0chook/invoked\
\x0bhook/result\x09llm/retry\x11llm/retry-started\x11permission/preset\x09plan/mode\
\x0csandbox/mode\x0fschedule/change\x10session/end-seed\x19session/title-llm-request\
\x13subagent/descriptor\x0bteam/member\x16team/message/delivered\x13team/message/queued\
\x09team/task\x0atodo/write\x17tool-workflow/agent-end\x19tool-workflow/agent-start\
\x15tool-workflow/run-end\x17tool-workflow/run-start\x12tool/code-dispatch\
\x18tool/code-dispatch-start\x1fweb/deepseek-search-llm-request\
{\"todos\":[{\"content\":\"\",\"status\":\"pending\"},{\"status\":\"in_progress\"},{\"status\":\"completed\"}]}\
{\"id\":\"\",\"toolName\":\"\",\"callId\":\"\",\"reason\":\"\"}{\"id\":\"\",\"outcome\":\"approved\"}\
{\"policy\":\"\"}{\"mode\":\"\"}{\"preset\":\"\"}{\"active\":true}{\"active\":false}\
{\"commandId\":\"\",\"name\":\"\",\"args\":\"\",\"source\":{\"kind\":\"user\"}}\
{\"turn\":1,\"point\":\"\",\"dialect\":\"\",\"handlerId\":\"\",\"matcher\":\"\"}\
{\"decision\":\"\",\"exitCode\":0,\"stderrSummary\":\"\",\"durationMs\":\
{\"rootCallId\":\"\",\"parentCallId\":\"\",\"subCallId\":\"\",\"name\":\"\",\"arguments\":{\"pluginId\":\"\",\"packageId\":\"\",\"mode\":\"\"}\
{\"retryId\":\"\",\"turn\":1,\"step\":1,\"provider\":\"\",\"mode\":\"\",\"policyKey\":\"\",\"retry\":1,\"maxRetries\":2\
,\"delayMs\":1,\"failure\":{\"message\":\"\",\"code\":\"\"}}\
{\"runId\":\"\",\"seq\":1,\"label\":\"\",\"phase\":\"\",\"childId\":\"\",\"stopReason\":\"\"}\
{\"version\":2,\"mode\":\"\",\"provider\":\"\",\"label\":\"\"}\
{\"target\":\"\",\"start\":0,\"inserted\":[\
\"source\":{\"kind\":\"plugin\",\"plugin\":\"\",\"form\":\"notice\",\"summary\":\"\
\"source\":{\"kind\":\"plugin\",\"plugin\":\"compaction\",\"form\":\"snapshot\",\"sections\":[{\"\
\x0frequest/context{\"provider\":\"\",\"model\":\"\"}\
\x0erequest/header{\"header\":{\"config\":{\"provider\":\"\",\"model\":\"\",\"reasoningEffort\":\"\"},\"system\":\"\",\"tools\":\"\"},\"reason\":\"\"}\
\x0dsession/title{\"title\":\"\",\"messageSeqs\":[],\"source\":{\"kind\":\"fallback\"}}\
\x0btool/result{\"turn\":1,\"step\":1,\"message\":{\"id\":\"m-\",\"role\":\"user\",\"content\":[{\"type\":\"tool-result\",\"toolCallId\":\"call_\",\"content\":[{\"type\":\"text\",\"text\":\"\"}],\"isError\":false}],\"source\":{\"kind\":\"tool\",\"callId\":\"call_\"}}}\
\x09tool/call{\"turn\":1,\"step\":1,\"callId\":\"call_\",\"name\":\"bash\",\"arguments\":\"{\\\"cmd\\\":\\\"\"}}\
\x0cuser/message{\"id\":\"m-\",\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\"}],\"source\":{\"kind\":\"user\",\"rpcId\":\"\"}}\
\x11assistant/message{\"turn\":1,\"step\":1,\"message\":{\"id\":\"m-\",\"role\":\"assistant\",\"content\":[{\"type\":\"reasoning\",\"text\":\"\"},{\"type\":\"tool-call\",\"toolCallId\":\"call_\",\"toolName\":\"\",\"input\":{}},{\"type\":\"text\",\"text\":\"\"}],\"source\":{\"kind\":\"model\",\"provider\":\"\",\"model\":\"\"}},\"usage\":{\"inputTokens\":0,\"outputTokens\":0,\"cacheReadTokens\":0,\"reasoningTokens\":0}}\
\x0aturn/start{\"turn\":1,\"trigger\":{\"kind\":\"user\",\"source\":{\"kind\":\"user\",\"rpcId\":\"\"}}}\
\x08turn/end{\"turn\":1,\"reason\":{\"kind\":\"completed\"}}\
\x0astep/start{\"turn\":1,\"step\":1}\x08step/end{\"turn\":1,\"step\":1}\
\x0fassistant/chunk{\"turn\":1,\"step\":1,\"chunk\":{\"type\":\"block-start\",\"index\":0,\"blockType\":\"text\"}}\
{\"type\":\"block-end\",\"index\":0,\"block\":{\"type\":\"text\",\"text\":\"\"}}\
{\"type\":\"finish\",\"reason\":\"stop\"}{\"type\":\"usage\",\"usage\":{\"inputTokens\":0,\"outputTokens\":0}}\
{\"type\":\"tool-call-delta\",\"index\":1,\"id\":\"call_\",\"name\":\"\",\"argumentsDelta\":\"\"}\
{\"type\":\"reasoning-delta\",\"index\":0,\"text\":\"\"}\
\x0fassistant/chunk{\"turn\":1,\"step\":1,\"chunk\":{\"type\":\"text-delta\",\"index\":0,\"text\":\"";
