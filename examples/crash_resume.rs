//! Resume after a crash: a writer dies in the middle of a turn (simulated with
//! `Store::abandon`, which drops the store the way a crash would), the store is reopened, and
//! `Store::resume` closes the open turn with dsh's crash closers before new turns are
//! appended. Every acknowledged (durable) append is there.
//!
//! Run with `cargo run --release --example crash_resume`.

use std::error::Error;

use sessionlog::event::SessionHeader;
use sessionlog::store::{Config, Store};
use sessionlog::typed::{AppendTyped, StepStart, TurnEnd, TurnStart, UserMessage};

fn main() -> Result<(), Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    {
        let store = Store::open(dir.path(), Config::default())?;
        let s = store.create(SessionHeader::new("agent-1", 1_767_225_600_000))?;
        s.append_typed(TurnStart::new(1))?;
        s.append_typed(StepStart::new(1, 1))?;
        let (_, receipt) = s.append_typed(UserMessage::text("Refactor the parser"))?;
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
    s.append_typed(TurnStart::new(2))?;
    s.append_typed(UserMessage::text("Continue where we stopped"))?;
    s.append_typed(TurnEnd::completed(2))?;
    println!(
        "the session goes on: {} messages visible",
        s.messages()?.len()
    );
    Ok(())
}
