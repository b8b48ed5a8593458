//! Writes a dsh session with the typed event API, reopens the store and prints the
//! model-visible messages.
//!
//! Run with `cargo run --release --example typed_session` (`cargo test` runs it too).

use std::error::Error;

use sessionlog::typed::{
    AssistantChunk, AssistantMessage, CallId, Compaction, MessageId, ModelSource, PluginForm,
    SessionTitle, StepEnd, StepStart, TitleSource, TokenUsage, ToolCall, ToolResult, TurnEnd,
    TurnStart, UserMessage, UserSource,
};
use sessionlog::{Config, SessionHeader, Store};

fn main() -> Result<(), Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    let model = ModelSource::new("deepseek", "deepseek-chat")?;
    {
        let store = Store::open(dir.path(), Config::default())?;
        let s = store.create(SessionHeader::new("demo", 1_767_225_600_000))?;

        s.append(TurnStart::new(1))?;
        s.append(StepStart::new(1, 1))?;
        let prompt = s.append(UserMessage::text("What is in this directory?"))?;

        // The model streams a tool call; the message cites its chunks.
        let call = CallId::new("call_1")?;
        let c1 = s.append(AssistantChunk::text_delta(1, 1, 0, "Let me check."))?;
        let answer = s.append(
            AssistantMessage::new(1, 1, model.clone())
                .text("Let me check.")
                .tool_call(call.clone(), "bash", r#"{"cmd":"ls"}"#)
                .usage(TokenUsage::new(42, 12))
                .from_chunks(vec![c1.seq]),
        )?;
        let started = s.append(ToolCall::new(1, 1, call.clone(), "bash", r#"{"cmd":"ls"}"#))?;
        let result =
            s.append(ToolResult::text(1, 1, call, "Cargo.toml\nsrc").answering(started.seq))?;
        s.append(StepEnd::new(1, 1))?;

        s.append(StepStart::new(1, 2))?;
        let last = s.append(
            AssistantMessage::new(1, 2, model)
                .text("A Rust crate: Cargo.toml and src/.")
                .from_chunks(vec![]),
        )?;
        s.append(StepEnd::new(1, 2))?;
        s.append(TurnEnd::completed(1))?;
        s.append(SessionTitle::new(
            "Directory listing",
            vec![prompt.seq],
            TitleSource::Fallback,
        ))?;

        println!("before compaction:");
        for m in s.messages()? {
            println!("  seq {:>2}: {}", m.seq, m.json);
        }

        // Compaction: one summary replaces the whole first turn on the surface.
        let summary = UserMessage::text("Earlier: the directory holds a Rust crate.")
            .with_id(MessageId::new("summary-1")?)
            .with_source(UserSource::Plugin {
                plugin: "compaction".into(),
                form: Some(PluginForm::Notice("conversation compacted".into())),
            });
        s.append(Compaction::new(
            summary,
            prompt.seq,
            last.seq,
            vec![prompt.seq, answer.seq, result.seq, last.seq],
        )?)?;
        println!("wrote {} events to session {:?}", s.len(), s.id());
    }

    // Reopen and read the model-visible history back.
    let store = Store::open(dir.path(), Config::default())?;
    let s = store.resume("demo")?;
    println!("after compaction and reopen (surface {:?}):", s.surface()?);
    for m in s.messages()? {
        println!("  seq {:>2}: {}", m.seq, m.json);
    }
    Ok(())
}

#[test]
fn example_runs() {
    main().expect("the example runs");
}
