//! `sessionlog demo`: a realistic multi-session agent workload on a temporary store.

use std::sync::Arc;
use std::time::Instant;

use crate::event::{Event, SessionHeader, SurfaceOp};
use crate::store::{Config, Durability, Store};

/// One agent turn of dsh-shaped events starting at `seq`.
fn turn(seq: &mut u64, turn: u64, time: i64) -> Vec<Event> {
    let mut out = Vec::new();
    let mut push = |kind: &str, data: String, op: Option<SurfaceOp>| {
        let mut e = Event::new(kind, *seq, time + *seq as i64, data);
        e.surface_op = op;
        out.push(e);
        *seq += 1;
    };
    push("turn/start", format!(r#"{{"turn":{turn}}}"#), None);
    push("step/start", format!(r#"{{"turn":{turn},"step":1}}"#), None);
    push(
        "user/message",
        format!(
            r#"{{"id":"u{turn}","role":"user","content":[{{"type":"text","text":"please look at file {turn}"}}],"source":{{"kind":"user"}}}}"#
        ),
        Some(SurfaceOp::Append),
    );
    for i in 0..50 {
        push(
            "assistant/chunk",
            format!(
                r#"{{"turn":{turn},"step":1,"chunk":{{"type":"text-delta","index":0,"text":"token {i} of the answer "}}}}"#
            ),
            None,
        );
    }
    push(
        "tool/call",
        format!(
            r#"{{"turn":{turn},"step":1,"callId":"c{turn}","name":"bash","arguments":"{{\"cmd\":\"cat f{turn}\"}}"}}"#
        ),
        None,
    );
    push("step/end", format!(r#"{{"turn":{turn},"step":1}}"#), None);
    push(
        "turn/end",
        format!(r#"{{"turn":{turn},"reason":{{"kind":"completed"}}}}"#),
        None,
    );
    out
}

/// Runs the demo.
pub fn run(events_per_session: u64, sessions: u64) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    println!(
        "sessionlog demo: {sessions} sessions x ~{events_per_session} events in {}",
        dir.path().display()
    );
    for (name, durability) in [
        ("buffered + flush per turn", Durability::Buffered),
        ("sync per append", Durability::Sync),
    ] {
        let path = dir.path().join(name.replace(' ', "-"));
        let store = Arc::new(Store::open(
            &path,
            Config {
                durability,
                ..Config::default()
            },
        )?);
        let per = if durability == Durability::Sync {
            events_per_session.min(2_000)
        } else {
            events_per_session
        };
        let start = Instant::now();
        let handles: Vec<_> = (0..sessions)
            .map(|s| {
                let store = store.clone();
                std::thread::spawn(move || -> Result<u64, String> {
                    let id = format!("session-{s}");
                    store
                        .create_session(SessionHeader::new(id.clone(), 1_767_225_600_000))
                        .map_err(|e| e.to_string())?;
                    let mut seq = 0;
                    let mut t = 1;
                    while seq < per {
                        for e in turn(&mut seq, t, 1_767_225_600_000) {
                            store.append(&id, e).map_err(|e| e.to_string())?;
                        }
                        if durability == Durability::Buffered {
                            store.flush().map_err(|e| e.to_string())?;
                        }
                        t += 1;
                    }
                    Ok(seq)
                })
            })
            .collect();
        let mut total = 0;
        for h in handles {
            total += h.join().map_err(|_| "appender thread panicked")??;
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "  append, {name:<26} {total:>9} events in {secs:>7.3}s = {:>10.0} events/s",
            total as f64 / secs
        );
        drop(store);

        let start = Instant::now();
        let store = Store::open(&path, Config::default())?;
        let n = store.len("session-0").unwrap_or(0);
        let read = store.events("session-0", 0..n)?.count();
        println!(
            "  reopen + read one session ({read} events): {:.3}s",
            start.elapsed().as_secs_f64()
        );
        let report = store.verify()?;
        println!(
            "  verify: {} frames, {} events, clean = {}",
            report.frames,
            report.events,
            report.is_clean()
        );
    }
    Ok(())
}
