//! Fork a session at a turn boundary (zero-copy), export both sessions as dsh JSONL files,
//! and import them into a second store: the files are what dsh itself loads.
//!
//! Run with `cargo run --release --example fork_export_import`.

use std::error::Error;

use sessionlog::event::SessionHeader;
use sessionlog::interop::export::export_jsonl_file;
use sessionlog::interop::jsonl::{self, Compression};
use sessionlog::store::{Config, Store};
use sessionlog::typed::{AppendTyped, TurnEnd, TurnStart, UserMessage};

fn main() -> Result<(), Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path().join("store"), Config::default())?;
    let s = store.create(SessionHeader::new("main", 1_767_225_600_000))?;
    for turn in 1..=3 {
        s.append_typed(TurnStart::new(turn))?;
        s.append_typed(UserMessage::text(format!("question {turn}")))?;
        s.append_typed(TurnEnd::completed(turn))?;
    }
    // Fork after turn 2 (its turn/end is seq 5): the child's prefix is read through the parent.
    let child = store.fork("main", Some(5), Some("what-if"))?;
    child.append_typed(TurnStart::new(3))?;
    child.append_typed(UserMessage::text("a different question 3"))?;
    child.append_typed(TurnEnd::completed(3))?;
    println!(
        "main: {} events, what-if: {} events (6 inherited)",
        s.len(),
        child.len()
    );

    for id in ["main", "what-if"] {
        let path = dir.path().join(format!("{id}.jsonl"));
        let n = export_jsonl_file(&store, id, &path, Compression::None)?;
        let text = std::fs::read_to_string(&path)?;
        println!(
            "exported {id}: {n} events, first line {}",
            text.lines().next().unwrap_or("")
        );
        let bytes = std::fs::read(&path)?;
        let other = Store::open(dir.path().join(format!("copy-{id}")), Config::default())?;
        let loaded = jsonl::read(&bytes, &Default::default())?;
        other.import_session(loaded.header, loaded.events, None)?;
        println!(
            "imported {id} into a new store: {} messages",
            other.messages(id)?.len()
        );
    }
    Ok(())
}
