//! Fork a session at a turn boundary (zero-copy), export both sessions as dsh JSONL files,
//! and import them into a second store: the files are what dsh itself loads.
//!
//! Run with `cargo run --release --example fork_export_import`.

use std::error::Error;

use sessionlog::typed::{TurnEnd, TurnStart, UserMessage};
use sessionlog::{
    Config, ExportFormat, ExportLayout, ImportOptions, SessionHeader, Store, export, import_paths,
};

fn main() -> Result<(), Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path().join("store"), Config::default())?;
    let s = store.create(SessionHeader::new("main", 1_767_225_600_000))?;
    for turn in 1..=3 {
        s.append(TurnStart::new(turn))?;
        s.append(UserMessage::text(format!("question {turn}")))?;
        s.append(TurnEnd::completed(turn))?;
    }
    // Fork after turn 2 (its turn/end is seq 5): the child's prefix is read through the parent.
    let child = store.fork("main", Some(5), Some("what-if"))?;
    child.append(TurnStart::new(3))?;
    child.append(UserMessage::text("a different question 3"))?;
    child.append(TurnEnd::completed(3))?;
    println!(
        "main: {} events, what-if: {} events (6 inherited)",
        s.len(),
        child.len()
    );

    let mut files = Vec::new();
    for id in ["main", "what-if"] {
        let path = dir.path().join(format!("{id}.jsonl"));
        let report = export(
            &store,
            &[id.to_owned()],
            &path,
            ExportFormat::Jsonl,
            ExportLayout::File,
            &mut |_| {},
        )?;
        let text = std::fs::read_to_string(&path)?;
        println!(
            "exported {id}: {} events, first line {}",
            report.events,
            text.lines().next().unwrap_or("")
        );
        files.push(path);
    }
    let other = Store::open(dir.path().join("copy"), Config::default())?;
    let report = import_paths(&other, &files, &ImportOptions::default(), &mut |_| {})?;
    println!(
        "imported {} sessions into a new store",
        report.sessions.len()
    );
    for id in ["main", "what-if"] {
        let copy = other.session(id)?;
        assert_eq!(copy.messages()?, store.session(id)?.messages()?);
        println!(
            "  {id}: {} messages, as in the first store",
            copy.messages()?.len()
        );
    }
    Ok(())
}

#[test]
fn example_runs() {
    main().expect("the example runs");
}
