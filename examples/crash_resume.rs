//! Resume after a crash: a writer dies in the middle of a turn (simulated with
//! `Store::abandon`, which drops the store the way a crash would), the store is reopened, and
//! `Store::resume` closes the open turn with dsh's crash closers before new turns are
//! appended. Every acknowledged (durable) append is there.
//!
//! Run with `cargo run --release --example crash_resume` (`cargo test` runs it too).

use std::error::Error;

use sessionlog::typed::{StepStart, TurnEnd, TurnStart, UserMessage};
use sessionlog::{Config, SessionHeader, Store};

fn main() -> Result<(), Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    {
        let store = Store::open(dir.path(), Config::default())?;
        let s = store.create(SessionHeader::new("agent-1", 1_767_225_600_000))?;
        s.append(TurnStart::new(1))?;
        s.append(StepStart::new(1, 1))?;
        let receipt = s.append(UserMessage::text("Refactor the parser"))?;
        assert!(
            receipt.durable,
            "Sync durability: acknowledged means on disk"
        );
        println!("wrote {} events, then the process dies mid-turn", s.len());
        store.abandon();
    }

    let store = Store::open(dir.path(), Config::default())?;
    let report = store.recovery_report();
    println!(
        "reopened: {} frame(s) scanned, {} event(s) recovered from the unindexed tail",
        report.frames_scanned, report.events_recovered
    );
    let s = store.resume("agent-1")?;
    println!("after resume (crash closers appended): {} events", s.len());
    for e in s.events(0..s.len())? {
        let e = e?;
        println!("  seq {:2}: {}", e.seq, e.kind);
    }
    s.append(TurnStart::new(2))?;
    s.append(UserMessage::text("Continue where we stopped"))?;
    s.append(TurnEnd::completed(2))?;
    println!(
        "the session goes on: {} messages visible",
        s.messages()?.len()
    );
    Ok(())
}

#[test]
fn example_runs() {
    main().expect("the example runs");
}
