//! Quick start: open a store, create a session, append a turn with typed dsh events (and one
//! raw event), reopen, and read back the model-visible messages and the session list.
//!
//! Run with `cargo run --release --example quick_start` (`cargo test` runs it too).

use std::error::Error;

use sessionlog::typed::{
    AssistantMessage, ModelSource, Raw, StepEnd, StepStart, TurnEnd, TurnStart, UserMessage,
};
use sessionlog::{Config, Intent, SessionHeader, Store};

fn main() -> Result<(), Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    let model = ModelSource::new("deepseek", "deepseek-chat")?;
    {
        // Default durability is `Sync`: an append returns once it is on disk.
        let store = Store::open(dir.path(), Config::default())?;
        let s = store.create(SessionHeader::new("hello", 1_767_225_600_000))?;
        s.append(TurnStart::new(1))?;
        s.append(StepStart::new(1, 1))?;
        s.append(UserMessage::text("Say hello"))?;
        s.append(AssistantMessage::new(1, 1, model).text("Hello!"))?;
        s.append(StepEnd::new(1, 1))?;
        // Event types without a builder go in raw: any type, `data` as JSON text.
        s.append(Raw::new(
            "plugin/mood",
            r#"{"mood":"cheerful"}"#,
            Intent::none(),
        ))?;
        let receipt = s.append(TurnEnd::completed(1))?;
        println!("appended {} events (last seq {})", s.len(), receipt.seq);
        store.close()?;
    }

    let store = Store::open(dir.path(), Config::default())?;
    let s = store.resume("hello")?;
    for m in s.messages()? {
        println!("seq {}: {}", m.seq, m.json);
    }
    for listed in store.list()? {
        println!(
            "{}: {} events, last activity {}",
            listed.info.header.id, listed.info.event_count, listed.info.last_time
        );
    }
    assert_eq!(s.messages()?.len(), 2);
    Ok(())
}

#[test]
fn example_runs() {
    main().expect("the example runs");
}
