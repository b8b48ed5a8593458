//! The built-in zstd dictionaries of the segment formats (format-spec.md §3.2, §3.3).
//!
//! A frame whose flags carry [`super::frame::FLAG_DICTIONARY`] (segment versions 5 to 8) was
//! compressed with [`DICTIONARY_1`] as a zstd *raw content* dictionary (no dictionary header,
//! id 0): the bytes are a prefix the compressor may refer back into. They are dsh's event
//! vocabulary, written by hand from its event shapes (event type names with the one-byte
//! length a record puts before them, and the JSON skeletons of the common `data` objects),
//! nothing taken from any session's content; the most frequent shapes come last, where
//! references are cheapest.
//!
//! A frame whose flags carry [`super::frame::FLAG_DICTIONARY_2`] (segment versions 9 and 10)
//! was compressed with [`DICTIONARY_2`]: zstd's formatted kind (RFC 8878 §5), whose header
//! ([`DICTIONARY_2_HEADER`]) carries entropy tables a frame may reuse instead of building and
//! writing its own, followed by dictionary 1's bytes unchanged as its content. The tables
//! are statistics of the dsh workload's frames (`bench/examples/dictionary_2.rs` makes them);
//! the content is still dictionary 1's hand-written vocabulary.
//!
//! **Immutable.** Frames written with one can only be read with exactly its bytes: changing
//! one byte is a new dictionary, a new flag meaning and a new segment format version.
//! `tests/format/format_spec.rs` pins their lengths and CRC-32s.

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

/// Bytes in [`DICTIONARY_2_HEADER`].
pub const DICTIONARY_2_HEADER_LEN: usize = 166;

/// Dictionary 2's header, as format-spec.md §3.3 lists it: the dictionary magic `37 a4 30 ec`,
/// the dictionary id 2 (u32 LE), the entropy tables (literals' Huffman table, then the FSE
/// tables of offsets, match lengths and literal lengths) and the three repeat offsets 1, 4, 8.
pub const DICTIONARY_2_HEADER: [u8; DICTIONARY_2_HEADER_LEN] = [
    0x37, 0xa4, 0x30, 0xec, 0x02, 0x00, 0x00, 0x00, 0x45, 0x10, 0xa0, 0x33, 0xdb, 0x74, 0xc3, 0x98,
    0x41, 0x42, 0xb3, 0x0c, 0x63, 0x8c, 0xe3, 0x96, 0x08, 0xab, 0x9e, 0x21, 0x89, 0x5c, 0x48, 0x32,
    0x83, 0x68, 0xb6, 0xed, 0xdd, 0xd8, 0x76, 0xf7, 0x22, 0xdd, 0xfe, 0x24, 0xd4, 0x6c, 0x07, 0xd5,
    0x96, 0x64, 0x08, 0x98, 0x5e, 0xd1, 0x2a, 0xd3, 0x6f, 0x67, 0x98, 0x99, 0x8c, 0xde, 0xbe, 0x9b,
    0x88, 0x90, 0x58, 0x84, 0x3d, 0x60, 0x1c, 0x9d, 0x34, 0x0c, 0x10, 0x87, 0xc7, 0xda, 0xf3, 0x00,
    0x30, 0x2c, 0x12, 0x10, 0x0f, 0x87, 0x43, 0x82, 0x75, 0x06, 0x00, 0x04, 0xe0, 0xcc, 0x55, 0xcf,
    0x89, 0x08, 0xc8, 0x80, 0x18, 0x38, 0x0c, 0x00, 0x00, 0x60, 0x00, 0x0c, 0x80, 0x01, 0x00, 0x00,
    0x40, 0x01, 0x00, 0x60, 0x18, 0x00, 0x00, 0x60, 0x06, 0xe0, 0x30, 0x94, 0x6b, 0x1b, 0x00, 0x00,
    0x00, 0x00, 0xb4, 0x87, 0x66, 0xc8, 0x44, 0x63, 0x62, 0x71, 0x54, 0x1a, 0x8a, 0x44, 0x93, 0x34,
    0xc9, 0x92, 0x20, 0xb3, 0x90, 0x11, 0x0d, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00,
    0x00, 0x00, 0x08, 0x00, 0x00, 0x00,
];

/// Dictionary 2: [`DICTIONARY_2_HEADER`] followed by [`DICTIONARY_1`]'s bytes (its content).
pub const DICTIONARY_2: &[u8] = &concat();

const DICTIONARY_2_LEN: usize = DICTIONARY_2_HEADER_LEN + DICTIONARY_1.len();

/// The header and dictionary 1, joined at compile time.
const fn concat() -> [u8; DICTIONARY_2_LEN] {
    let mut out = [0u8; DICTIONARY_2_LEN];
    let mut i = 0;
    while i < DICTIONARY_2_HEADER_LEN {
        out[i] = DICTIONARY_2_HEADER[i];
        i += 1;
    }
    let mut j = 0;
    while j < DICTIONARY_1.len() {
        out[DICTIONARY_2_HEADER_LEN + j] = DICTIONARY_1[j];
        j += 1;
    }
    out
}
