//! Typed events (`sessionlog::typed`): a whole dsh session written only through the typed
//! API into a real store with invariants enforced, golden `data` texts for every kind, and
//! the shapes the builders refuse.

use sessionlog::event::{Event, Seq, SessionHeader, SurfaceOp};
use sessionlog::interop::jsonl::write_event_line;
use sessionlog::session::InvariantMode;
use sessionlog::store::{Config, Store};
use sessionlog::typed::*;

fn mid(id: &str) -> MessageId {
    MessageId::new(id).expect("test id is non-empty")
}

fn cid(id: &str) -> CallId {
    CallId::new(id).expect("test id is non-empty")
}

fn model() -> ModelSource {
    ModelSource::new("deepseek", "deepseek-chat").expect("non-empty")
}

fn line(e: &Event) -> String {
    let mut out = String::new();
    write_event_line(&mut out, e).expect("writable event");
    out
}

/// Appends and returns the seq the event got, failing the test with the engine's reason.
fn put(s: &sessionlog::store::Session<'_>, e: impl TypedEvent, time: i64) -> Seq {
    let kind = e.kind().to_owned();
    match s.append(e.at(time)) {
        Ok(receipt) => {
            let event = s.get(receipt.seq).expect("read").expect("stored");
            assert_eq!((event.kind.as_str(), event.time), (kind.as_str(), time));
            receipt.seq
        }
        Err(err) => panic!("engine refused typed {kind}: {err}"),
    }
}

#[test]
fn a_whole_session_through_the_typed_api_passes_full_validation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config::default().invariants(InvariantMode::Always);
    let store = Store::open(dir.path(), config.clone()).expect("open");
    let s = store
        .create(SessionHeader::new("typed", 1_767_225_600_000))
        .expect("create");
    let t0 = 1_767_225_600_000;
    let mut expected_messages: Vec<String> = Vec::new();

    // Turn 1, step 1: prompt, streamed text + tool call, the call and its result.
    assert_eq!(put(&s, TurnStart::new(1), t0), 0);
    put(&s, StepStart::new(1, 1), t0 + 1);
    let prompt = UserMessage::text("list files").with_id(mid("u1"));
    expected_messages.push(prompt.message_json());
    let prompt_seq = put(&s, &prompt, t0 + 2);
    let mut chunks = Vec::new();
    for (i, chunk) in [
        StreamChunk::BlockStart {
            index: 0,
            block_type: BlockType::Text,
        },
        StreamChunk::TextDelta {
            index: 0,
            text: "Let me ".into(),
        },
        StreamChunk::TextDelta {
            index: 0,
            text: "look.".into(),
        },
        StreamChunk::BlockEnd {
            index: 0,
            block: ContentBlock::text("Let me look."),
        },
        StreamChunk::ToolCallDelta {
            index: 1,
            id: cid("call_1"),
            name: Some("bash".into()),
            arguments_delta: r#"{"cmd":"ls"}"#.into(),
        },
        StreamChunk::Usage(TokenUsage::new(120, 30)),
        StreamChunk::Finish {
            reason: FinishReason::ToolCalls,
            replay_state: None,
        },
    ]
    .into_iter()
    .enumerate()
    {
        chunks.push(put(
            &s,
            AssistantChunk::new(1, 1, chunk),
            t0 + 10 + i as i64,
        ));
    }
    let answer = AssistantMessage::new(1, 1, model())
        .with_id(mid("a1"))
        .text("Let me look.")
        .tool_call(cid("call_1"), "bash", r#"{"cmd":"ls"}"#)
        .usage(TokenUsage::new(120, 30))
        .from_chunks(chunks.clone());
    expected_messages.push(answer.message_json());
    let answer_seq = put(&s, &answer, t0 + 20);
    let call_seq = put(
        &s,
        ToolCall::new(1, 1, cid("call_1"), "bash", r#"{"cmd":"ls"}"#),
        t0 + 21,
    );
    let result = ToolResult::text(1, 1, cid("call_1"), "a.txt\nb.txt")
        .with_id(mid("t1"))
        .answering(call_seq);
    expected_messages.push(result.message_json());
    let result_seq = put(&s, &result, t0 + 22);
    put(&s, StepEnd::new(1, 1), t0 + 23);

    // Turn 1, step 2: reasoning and a final answer.
    put(&s, StepStart::new(1, 2), t0 + 30);
    let r = put(
        &s,
        AssistantChunk::new(
            1,
            2,
            StreamChunk::ReasoningDelta {
                index: 0,
                text: "two entries".into(),
            },
        ),
        t0 + 31,
    );
    let d = put(
        &s,
        AssistantChunk::text_delta(1, 2, 1, "Two files."),
        t0 + 32,
    );
    let final_answer = AssistantMessage::new(1, 2, model())
        .with_id(mid("a2"))
        .reasoning("two entries")
        .text("Two files.")
        .from_chunks(vec![r, d]);
    expected_messages.push(final_answer.message_json());
    let final_seq = put(&s, &final_answer, t0 + 33);
    put(&s, StepEnd::new(1, 2), t0 + 34);
    put(&s, TurnEnd::completed(1), t0 + 35);
    let title = SessionTitle::new("Listing files", vec![prompt_seq], TitleSource::Fallback);
    put(&s, title, t0 + 36);

    // Turn 2: a prompt and a content-less step that only reports usage.
    put(&s, TurnStart::new(2), t0 + 40);
    put(&s, StepStart::new(2, 1), t0 + 41);
    let thanks = UserMessage::text("thanks").with_id(mid("u2"));
    expected_messages.push(thanks.message_json());
    let thanks_seq = put(&s, &thanks, t0 + 42);
    let empty = AssistantMessage::new(2, 1, model())
        .with_id(mid("a3"))
        .usage(TokenUsage::new(200, 0))
        .from_chunks(vec![]);
    let empty_seq = put(&s, empty, t0 + 43);
    put(&s, StepEnd::new(2, 1), t0 + 44);
    put(&s, TurnEnd::new(2, TurnEndReason::MaxTokens), t0 + 45);

    assert_eq!(
        s.surface().expect("surface"),
        vec![
            prompt_seq, answer_seq, result_seq, final_seq, thanks_seq, empty_seq
        ]
    );
    let derived: Vec<String> = s
        .messages()
        .expect("messages")
        .into_iter()
        .map(|m| m.json.to_string())
        .collect();
    assert_eq!(derived, expected_messages);

    // Compaction between turns: the summary replaces turn 1's four nodes.
    let start = put(
        &s,
        CompactionStart {
            compaction_id: "k1".into(),
            source_command_id: None,
            turn: None,
        },
        t0 + 50,
    );
    let summary = UserMessage::text("The user listed files: a.txt and b.txt.")
        .with_id(mid("k1-summary"))
        .with_source(UserSource::Plugin {
            plugin: "compaction".into(),
            form: Some(PluginForm::Notice("conversation compacted".into())),
        });
    let priced = put(
        &s,
        CompactionSummary {
            compaction_id: "k1".into(),
            source_command_id: None,
            summary: vec![ContentBlock::text(
                "The user listed files: a.txt and b.txt.",
            )],
            shadowed: Shadowed {
                start: prompt_seq,
                end: final_seq,
                seqs: vec![prompt_seq, answer_seq, result_seq, final_seq],
                token_count: 150,
            },
            model: model(),
            max_tokens: Some(1024),
            usage: Some(TokenUsage::new(150, 12)),
        },
        t0 + 50,
    );
    let compaction = Compaction::new(
        summary.clone(),
        prompt_seq,
        final_seq,
        vec![prompt_seq, answer_seq, result_seq, final_seq, start, priced],
    )
    .expect("cites both ends");
    let checkpoint = put(&s, compaction, t0 + 51);
    put(
        &s,
        CompactionEnd {
            compaction_id: "k1".into(),
            source_command_id: None,
            turn: None,
            error: None,
        },
        t0 + 52,
    );

    // Turn 3: aborted by the user.
    put(&s, TurnStart::new(3), t0 + 60);
    put(&s, StepStart::new(3, 1), t0 + 61);
    let again = UserMessage::text("again").with_id(mid("u3"));
    let again_seq = put(&s, &again, t0 + 62);
    put(&s, StepEnd::new(3, 1), t0 + 63);
    put(
        &s,
        TurnEnd::new(3, TurnEndReason::Aborted(AbortCause::User)),
        t0 + 64,
    );

    let after = vec![
        summary.message_json(),
        thanks.message_json(),
        again.message_json(),
    ];
    let surface = vec![checkpoint, thanks_seq, empty_seq, again_seq];
    assert_eq!(s.surface().expect("surface"), surface);
    assert_eq!(s.replace_generation().expect("generation"), 1);
    let derived: Vec<String> = s
        .messages()
        .expect("messages")
        .into_iter()
        .map(|m| m.json.to_string())
        .collect();
    assert_eq!(derived, after);
    let len = s.len();
    assert_eq!(len, again_seq + 3);

    // The stored envelope is what dsh writes for the same events.
    let stored = |seq: Seq| s.get(seq).expect("read").expect("present");
    assert_eq!(
        line(&stored(result_seq)),
        format!(
            r#"{{"type":"tool/result","seq":{result_seq},"time":{},"data":{{"turn":1,"step":1,"message":{{"id":"t1","role":"user","content":[{{"type":"tool-result","toolCallId":"call_1","content":[{{"type":"text","text":"a.txt\nb.txt"}}],"isError":false}}],"source":{{"kind":"tool","callId":"call_1"}}}}}},"sourceEventSeqs":[{call_seq}],"surfaceOp":"append"}}"#,
            t0 + 22
        )
    );
    assert_eq!(
        stored(checkpoint).surface_op,
        Some(SurfaceOp::Replace {
            start: prompt_seq,
            end: final_seq
        })
    );
    let events: Vec<Event> = s
        .events(0..len)
        .expect("events")
        .collect::<Result<_, _>>()
        .expect("read all");
    drop(s);
    drop(store);

    // Reopen: the session resumes (no repair needed: every turn is closed) and derives the same.
    let store = Store::open(dir.path(), config).expect("reopen");
    let s = store.resume("typed").expect("resume");
    assert_eq!(s.len(), len);
    assert_eq!(s.surface().expect("surface"), surface);
    let derived: Vec<String> = s
        .messages()
        .expect("messages")
        .into_iter()
        .map(|m| m.json.to_string())
        .collect();
    assert_eq!(derived, after);

    // dsh's load rules (vocabulary, message shapes, surface) accept the log too.
    store
        .import_session(SessionHeader::new("typed-copy", 1), events, None)
        .expect("the typed log passes dsh's load validation");
    // And the invariants keep running after a reopen: the next turn must be numbered 4.
    match s.append(TurnStart::new(3)) {
        Ok(_) => panic!("a repeated turn number was accepted"),
        Err(e) => assert!(e.to_string().contains("expected turn 4, got 3"), "{e}"),
    }
    assert_eq!(s.len(), len, "a refused append writes nothing");
}

#[test]
fn golden_data_for_every_kind() {
    let cases: Vec<(Box<dyn TypedEvent>, &str, &str)> = vec![
        (Box::new(TurnStart::new(7)), "turn/start", r#"{"turn":7}"#),
        (
            Box::new(TurnEnd::completed(7)),
            "turn/end",
            r#"{"turn":7,"reason":{"kind":"completed"}}"#,
        ),
        (
            Box::new(TurnEnd::new(
                2,
                TurnEndReason::Aborted(AbortCause::Hook("policy".into())),
            )),
            "turn/end",
            r#"{"turn":2,"reason":{"kind":"aborted","reason":{"kind":"hook","reason":"policy"}}}"#,
        ),
        (
            Box::new(TurnEnd::new(
                3,
                TurnEndReason::Error(LlmFailure {
                    status: Some(429),
                    provider_retry_after_ms: Some(1500),
                    request_id: Some("req-9".into()),
                    ..LlmFailure::new("slow down", "RATE_LIMITED")
                }),
            )),
            "turn/end",
            r#"{"turn":3,"reason":{"kind":"error","error":{"message":"slow down","code":"RATE_LIMITED","status":429,"providerRetryAfterMs":1500,"requestId":"req-9"}}}"#,
        ),
        (
            Box::new(StepStart::new(4, 2)),
            "step/start",
            r#"{"turn":4,"step":2}"#,
        ),
        (
            Box::new(StepEnd::new(4, 2)),
            "step/end",
            r#"{"turn":4,"step":2}"#,
        ),
        (
            Box::new(
                UserMessage::text("say \"hi\"\n\u{1}é")
                    .with_id(mid("m-7"))
                    .block(ContentBlock::Image(ImageAttachment {
                        attachment_id: "att-1".into(),
                        media_type: "image/png".into(),
                        bytes: 2048,
                        width: 64,
                        height: 32,
                        name: Some("shot.png".into()),
                        original_dimensions: Some((128, 64)),
                    })),
            ),
            "user/message",
            r#"{"id":"m-7","role":"user","content":[{"type":"text","text":"say \"hi\"\n\u0001é"},{"type":"image","attachment":{"attachmentId":"att-1","mediaType":"image/png","bytes":2048,"width":64,"height":32,"name":"shot.png","originalDimensions":{"width":128,"height":64}}}],"source":{"kind":"user"}}"#,
        ),
        (
            Box::new(
                UserMessage::text("ctx")
                    .with_id(mid("p1"))
                    .with_source(UserSource::Plugin {
                        plugin: "memory".into(),
                        form: Some(PluginForm::Snapshot(vec![("notes".into(), "n".into())])),
                    }),
            ),
            "user/message",
            r#"{"id":"p1","role":"user","content":[{"type":"text","text":"ctx"}],"source":{"kind":"plugin","plugin":"memory","form":"snapshot","sections":[{"name":"notes","text":"n"}]}}"#,
        ),
        (
            Box::new(
                AssistantMessage::new(1, 3, model())
                    .with_id(mid("a-9"))
                    .reasoning("hmm")
                    .text("ok")
                    .tool_call(cid("c-2"), "read", r#"{"path":"x"}"#)
                    .usage(TokenUsage {
                        cache_read_tokens: Some(5),
                        reasoning_tokens: Some(2),
                        ..TokenUsage::new(9, 4)
                    })
                    .interrupted(),
            ),
            "assistant/message",
            r#"{"turn":1,"step":3,"message":{"id":"a-9","role":"assistant","content":[{"type":"reasoning","text":"hmm"},{"type":"text","text":"ok"},{"type":"tool-call","id":"c-2","name":"read","arguments":"{\"path\":\"x\"}"}],"source":{"kind":"model","provider":"deepseek","model":"deepseek-chat"}},"usage":{"inputTokens":9,"outputTokens":4,"cacheReadTokens":5,"reasoningTokens":2},"interrupted":true}"#,
        ),
        (
            Box::new(AssistantChunk::text_delta(1, 1, 0, "Hel")),
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"Hel"}}"#,
        ),
        (
            Box::new(AssistantChunk::new(
                1,
                1,
                StreamChunk::BlockStart {
                    index: 2,
                    block_type: BlockType::ToolCall,
                },
            )),
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"block-start","index":2,"blockType":"tool-call"}}"#,
        ),
        (
            Box::new(AssistantChunk::new(
                1,
                1,
                StreamChunk::ToolCallDelta {
                    index: 2,
                    id: cid("c-2"),
                    name: None,
                    arguments_delta: "{\"pa".into(),
                },
            )),
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":2,"id":"c-2","argumentsDelta":"{\"pa"}}"#,
        ),
        (
            Box::new(AssistantChunk::new(
                1,
                1,
                StreamChunk::Finish {
                    reason: FinishReason::Error(LlmFailure::new("boom", "UNKNOWN")),
                    replay_state: Some(RawJson::new(r#"{ "response": 1.50 }"#).expect("json")),
                },
            )),
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"finish","reason":{"kind":"error","failure":{"message":"boom","code":"UNKNOWN"}},"replayState":{"response":1.5}}}"#,
        ),
        (
            Box::new(ToolCall::new(1, 3, cid("c-2"), "read", r#"{"path":"x"}"#)),
            "tool/call",
            r#"{"turn":1,"step":3,"callId":"c-2","name":"read","arguments":"{\"path\":\"x\"}"}"#,
        ),
        (
            Box::new(
                ToolResult::text(1, 3, cid("c-2"), "skipped")
                    .with_id(mid("r-2"))
                    .with_error("AbortError", "ABORTED_BEFORE_DISPATCH")
                    .with_meta(RawJson::new(r#"{"exit":1e21}"#).expect("json")),
            ),
            "tool/result",
            r#"{"turn":1,"step":3,"message":{"id":"r-2","role":"user","content":[{"type":"tool-result","toolCallId":"c-2","content":[{"type":"text","text":"skipped"}],"isError":true}],"source":{"kind":"tool","callId":"c-2"}},"error":{"name":"AbortError","code":"ABORTED_BEFORE_DISPATCH"},"meta":{"exit":1e+21}}"#,
        ),
        (
            Box::new(CompactionStart {
                compaction_id: "k2".into(),
                source_command_id: Some("cmd-1".into()),
                turn: Some(4),
            }),
            "compaction/start",
            r#"{"compactionId":"k2","sourceCommandId":"cmd-1","turn":4}"#,
        ),
        (
            Box::new(CompactionEnd {
                compaction_id: "k2".into(),
                source_command_id: None,
                turn: None,
                error: Some("no model".into()),
            }),
            "compaction/end",
            r#"{"compactionId":"k2","turn":null,"error":"no model"}"#,
        ),
        (
            Box::new(CompactionSummary {
                compaction_id: "k2".into(),
                source_command_id: Some("cmd-1".into()),
                summary: vec![ContentBlock::text("so far")],
                shadowed: Shadowed {
                    start: 5,
                    end: 3,
                    seqs: vec![5, 4, 3],
                    token_count: 812,
                },
                model: model(),
                max_tokens: None,
                usage: Some(TokenUsage::new(812, 20)),
            }),
            "compaction/summary",
            r#"{"compactionId":"k2","sourceCommandId":"cmd-1","summary":[{"type":"text","text":"so far"}],"shadowedRange":{"start":5,"end":3},"shadowedSeqs":[5,4,3],"shadowedTokenCount":812,"provider":"deepseek","model":"deepseek-chat","usage":{"inputTokens":812,"outputTokens":20}}"#,
        ),
        (
            Box::new(CompactionPrune {
                shadowed: Shadowed {
                    start: 11,
                    end: 11,
                    seqs: vec![11],
                    token_count: 9007199254740993,
                },
            }),
            "compaction/prune",
            // Above 2^53 a count prints as JavaScript would hold it.
            r#"{"shadowedRange":{"start":11,"end":11},"shadowedSeqs":[11],"shadowedTokenCount":9007199254740992}"#,
        ),
        (
            Box::new(SessionTitle::new(
                "Fix the build",
                vec![2, 9],
                TitleSource::Provider {
                    provider: "title-llm".into(),
                    model: Some(("deepseek".into(), "deepseek-chat".into())),
                },
            )),
            "session/title",
            r#"{"title":"Fix the build","messageSeqs":[2,9],"source":{"kind":"provider","provider":"title-llm","model":{"provider":"deepseek","model":"deepseek-chat"}}}"#,
        ),
    ];
    for (event, kind, data) in cases {
        assert_eq!(event.kind(), kind);
        assert_eq!(event.data_json(), data, "{kind}");
        let surface = ["user/message", "assistant/message", "tool/result"].contains(&kind);
        assert_eq!(
            event.intent().surface_op.is_some(),
            surface,
            "{kind}: surfaceOp exactly on surface types"
        );
    }
}

#[test]
fn intents_carry_sources_and_replace_ops() {
    let a = AssistantMessage::new(1, 1, model()).from_chunks(vec![]);
    assert_eq!(a.intent().surface_op, Some(SurfaceOp::Append));
    assert_eq!(a.intent().source_event_seqs, Some(vec![]));
    let r = ToolResult::text(1, 1, cid("c"), "x").answering(5);
    assert_eq!(r.intent().source_event_seqs, Some(vec![5]));
    assert_eq!(
        ToolResult::text(1, 1, cid("c"), "x")
            .intent()
            .source_event_seqs,
        None
    );
    let c = Compaction::new(UserMessage::text("s"), 4, 2, vec![2, 4, 3]).expect("valid");
    assert_eq!(
        c.intent().surface_op,
        Some(SurfaceOp::Replace { start: 4, end: 2 })
    );
    assert_eq!(c.intent().source_event_seqs, Some(vec![2, 4, 3]));
    let e = c.to_event(9, 1234);
    assert_eq!((e.kind.as_str(), e.seq, e.time), ("user/message", 9, 1234));
    assert_eq!(e.data, c.summary().message_json());
}

#[test]
fn builders_refuse_invalid_shapes() {
    // A tool result cannot name no call: the call id must be a non-empty CallId.
    assert_eq!(
        CallId::new(""),
        Err(TypedEventError::Empty { field: "callId" })
    );
    assert!(CallId::try_from("").is_err());
    assert_eq!(
        MessageId::new(""),
        Err(TypedEventError::Empty {
            field: "message id"
        })
    );
    assert_eq!(
        ModelSource::new("", "m"),
        Err(TypedEventError::Empty { field: "provider" })
    );
    assert_eq!(
        ModelSource::new("p", ""),
        Err(TypedEventError::Empty { field: "model" })
    );
    // Raw JSON must be lossless JSON.
    for bad in ["-0", "{\"a\":", "1e400", "", "NaN"] {
        assert!(
            matches!(RawJson::new(bad), Err(TypedEventError::InvalidJson { .. })),
            "{bad:?}"
        );
    }
    // Plugin blocks need a type, plugin sources a kind.
    for bad in ["[]", r#"{"text":"x"}"#, r#"{"type":""}"#, r#"{"type":3}"#] {
        assert!(
            matches!(ContentBlock::other(bad), Err(TypedEventError::Shape { .. })),
            "{bad}"
        );
    }
    assert!(UserSource::other(r#"{"kind":""}"#).is_err());
    assert_eq!(
        ContentBlock::other(r#"{ "type": "diagram", "n": 2.0 }"#)
            .expect("valid")
            .to_json(),
        r#"{"type":"diagram","n":2}"#
    );
    assert!(UserSource::other(r#"{"kind":"goal","goalId":"g"}"#).is_ok());
    // A compaction must cite both ends of what it replaces, once each.
    assert_eq!(
        Compaction::new(UserMessage::text("s"), 2, 5, vec![2, 3]),
        Err(TypedEventError::MissingSource {
            start: 2,
            end: 5,
            missing: 5
        })
    );
    assert_eq!(
        Compaction::new(UserMessage::text("s"), 2, 5, vec![]),
        Err(TypedEventError::MissingSource {
            start: 2,
            end: 5,
            missing: 2
        })
    );
    assert_eq!(
        Compaction::new(UserMessage::text("s"), 2, 2, vec![2, 2]),
        Err(TypedEventError::DuplicateSource { seq: 2 })
    );
    // Errors say what to do.
    let text = CallId::new("").map(|_| ()).unwrap_err().to_string();
    assert!(text.contains("callId must be a non-empty string"), "{text}");
}

#[test]
fn minted_ids_are_unique_and_non_empty() {
    let a = UserMessage::text("x");
    let b = UserMessage::text("x");
    assert_ne!(a.id(), b.id());
    assert!(!a.id().as_str().is_empty());
    assert_ne!(a.data_json(), b.data_json());
    assert_eq!(a.data_json(), a.data_json(), "data is fixed once built");
}

#[test]
fn engine_rules_that_depend_on_the_log_still_apply() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::default()).expect("open");
    let s = store
        .create(SessionHeader::new("rules", 1))
        .expect("create");
    put(&s, TurnStart::new(1), 1);
    put(&s, StepStart::new(1, 1), 2);
    // A result with no prior tool/call in the step is refused by the invariants.
    let refusal = |e: &dyn TypedEvent| match s.append(e) {
        Ok(receipt) => panic!("{} at seq {} was accepted", e.kind(), receipt.seq),
        Err(err) => err.to_string(),
    };
    let orphan = ToolResult::text(1, 1, cid("nope"), "x");
    let why = refusal(&orphan);
    assert!(why.contains("no prior tool/call"), "{why}");
    // A compaction of nodes that are not on the surface is refused by the surface rules.
    let c = Compaction::new(UserMessage::text("s"), 0, 1, vec![0, 1]).expect("shape ok");
    let why = refusal(&c);
    assert!(why.contains("not found in surface"), "{why}");
    // A chunk of a step that is not open is refused.
    let why = refusal(&AssistantChunk::text_delta(1, 2, 0, "x"));
    assert!(why.contains("open is turn 1/step 1"), "{why}");
    assert_eq!(s.len(), 2, "refused appends write nothing");
    // The synthetic not-started result is exempt from pairing, as in dsh.
    let synthetic = ToolResult::text(1, 1, cid("nope"), "not started")
        .with_error("ToolNotStartedError", "TOOL_NOT_STARTED");
    put(&s, synthetic, 3);
}

#[test]
fn a_tool_result_is_pruned_by_a_content_only_rewrite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::default()).expect("open");
    let s = store
        .create(SessionHeader::new("prune", 1))
        .expect("create");
    put(&s, TurnStart::new(1), 1);
    put(&s, StepStart::new(1, 1), 2);
    put(
        &s,
        AssistantMessage::new(1, 1, model()).tool_call(cid("c1"), "cat", "{}"),
        3,
    );
    let call = put(&s, ToolCall::new(1, 1, cid("c1"), "cat", "{}"), 4);
    let result = ToolResult::text(1, 1, cid("c1"), "a very long file")
        .with_id(mid("r1"))
        .with_meta(RawJson::new(r#"{"lines":900}"#).expect("json"))
        .answering(call);
    let result_seq = put(&s, &result, 5);
    put(&s, StepEnd::new(1, 1), 6);
    put(&s, TurnEnd::completed(1), 7);
    put(&s, TurnStart::new(2), 8);

    let pruned = result.pruned(result_seq, vec![ContentBlock::text("[pruned]")]);
    assert_eq!(
        pruned.intent().surface_op,
        Some(SurfaceOp::Replace {
            start: result_seq,
            end: result_seq
        })
    );
    assert_eq!(pruned.intent().source_event_seqs, Some(vec![result_seq]));
    assert_eq!(
        pruned.data_json(),
        r#"{"turn":1,"step":1,"message":{"id":"r1","role":"user","content":[{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":"[pruned]"}],"isError":false}],"source":{"kind":"tool","callId":"c1"}},"meta":{"lines":900}}"#
    );
    put(
        &s,
        CompactionPrune {
            shadowed: Shadowed {
                start: result_seq,
                end: result_seq,
                seqs: vec![result_seq],
                token_count: 4000,
            },
        },
        9,
    );
    let rewrite = put(&s, &pruned, 10);
    let messages = s.messages().expect("messages");
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1].seq, rewrite);
    assert_eq!(*messages[1].json, *pruned.message_json());
    assert_eq!(s.replace_generation().expect("generation"), 1);

    // A rewrite that changes more than content (here: the error flag) is refused.
    let changed = result.clone().failed().pruned(rewrite, vec![]);
    match s.append(&changed) {
        Ok(_) => panic!("a rewrite changing isError was accepted"),
        Err(e) => assert!(e.to_string().contains("may change only content"), "{e}"),
    }
}

#[test]
fn a_batch_of_typed_events_is_all_or_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::default()).expect("open");
    let s = store
        .create(SessionHeader::new("batch", 1))
        .expect("create");
    let batch: [&dyn TypedEvent; 6] = [
        &TurnStart::new(1),
        &StepStart::new(1, 1),
        &UserMessage::text("hi").with_id(mid("u1")),
        &AssistantChunk::text_delta(1, 1, 0, "h"),
        &AssistantChunk::text_delta(1, 1, 0, "e"),
        &AssistantChunk::text_delta(1, 1, 0, "y"),
    ];
    let receipt = s.append_batch(batch).expect("valid batch");
    assert_eq!(receipt.seq, 5);
    assert_eq!(s.len(), 6);
    let chunk = s.get(4).expect("read").expect("present");
    assert_eq!(chunk.kind, "assistant/chunk");
    assert_eq!(
        chunk.data,
        r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"e"}}"#
    );
    // The last event breaks the invariants (step 2 of a turn with step 1 open): nothing of
    // the batch is written.
    let refused: [&dyn TypedEvent; 3] = [
        &AssistantMessage::new(1, 1, model())
            .text("hey")
            .from_chunks(vec![3, 4, 5]),
        &StepEnd::new(1, 1),
        &StepEnd::new(1, 2),
    ];
    match s.append_batch(refused) {
        Ok(r) => panic!("an invalid batch was accepted up to seq {}", r.seq),
        Err(e) => assert!(e.to_string().contains("step/end"), "{e}"),
    }
    assert_eq!(s.len(), 6);
    assert_eq!(s.messages().expect("messages").len(), 1);
    assert!(s.append_batch(Vec::<Raw>::new()).is_ok());
    assert_eq!(s.len(), 6, "an empty batch writes no event");
}
