//! `sessionlog demo`: a realistic multi-session agent workload on a temporary store, with
//! compaction, a crash mid-turn, recovery, resume with crash repair, a fork, and timings.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use sessionlog::SchemaVersion;
use sessionlog::typed::Raw;
use sessionlog::{Config, Durability, Intent, Session, Store};
use sessionlog::{ExportFormat, ExportLayout, export};
use sessionlog::{Seq, SessionHeader};

fn user(id: &str, text: &str) -> String {
    format!(
        r#"{{"id":"{id}","role":"user","content":[{{"type":"text","text":"{text}"}}],"source":{{"kind":"user"}}}}"#
    )
}

/// One dsh-shaped agent turn: user message, 50 streamed chunks, an assistant message with a
/// tool call, the tool's result (a few KB), step and turn brackets. Returns the events added.
fn turn(s: &Session<'_>, t: u64, flush: bool) -> Result<u64, Box<dyn std::error::Error>> {
    let start = s.len();
    let store = s.store();
    let checkpoint = || -> Result<(), Box<dyn std::error::Error>> {
        if flush {
            store.flush()?;
        }
        Ok(())
    };
    s.append(Raw::new(
        "turn/start",
        format!(r#"{{"turn":{t}}}"#),
        Intent::none(),
    ))?;
    checkpoint()?;
    s.append(Raw::new(
        "step/start",
        format!(r#"{{"turn":{t},"step":1}}"#),
        Intent::none(),
    ))?;
    s.append(Raw::new(
        "user/message",
        user(
            &format!("u{t}"),
            &format!("Please inspect file {t} and summarise it."),
        ),
        Intent::append(),
    ))?;
    checkpoint()?;
    for i in 0..50 {
        s.append(Raw::new("assistant/chunk", format!(r#"{{"turn":{t},"step":1,"chunk":{{"type":"text-delta","index":0,"text":"token {i} "}}}}"#), Intent::none()))?;
    }
    let call = format!("call-{t}");
    s.append(Raw::new("assistant/message", format!(
            r#"{{"turn":{t},"step":1,"message":{{"id":"a{t}","role":"assistant","content":[{{"type":"text","text":"Reading it."}},{{"type":"tool-call","id":"{call}","name":"read_file","arguments":"{{\"path\":\"f{t}.rs\"}}"}}],"source":{{"kind":"model","provider":"deepseek","model":"v4"}}}}}}"#
        ), Intent::append()))?;
    s.append(Raw::new("tool/call", format!(r#"{{"turn":{t},"step":1,"callId":"{call}","name":"read_file","arguments":"{{\"path\":\"f{t}.rs\"}}"}}"#), Intent::none()))?;
    checkpoint()?;
    let body = "fn main() { println!(\\\"hello\\\"); }\\n".repeat(60);
    s.append(Raw::new("tool/result", format!(
            r#"{{"turn":{t},"step":1,"message":{{"id":"r{t}","role":"user","content":[{{"type":"tool-result","toolCallId":"{call}","content":[{{"type":"text","text":"{body}"}}]}}],"source":{{"kind":"tool","callId":"{call}"}}}}}}"#
        ), Intent::append()))?;
    s.append(Raw::new(
        "step/end",
        format!(r#"{{"turn":{t},"step":1}}"#),
        Intent::none(),
    ))?;
    s.append(Raw::new(
        "turn/end",
        format!(r#"{{"turn":{t},"reason":{{"kind":"completed"}}}}"#),
        Intent::none(),
    ))?;
    checkpoint()?;
    Ok(s.len() - start)
}

/// Compaction: a summary replaces every surface node but the last, citing them all.
fn compact(s: &Session<'_>) -> Result<(), Box<dyn std::error::Error>> {
    let surface = s.surface()?;
    if surface.len() < 3 {
        return Ok(());
    }
    let shadowed: Vec<Seq> = surface[..surface.len() - 1].to_vec();
    let (start, end) = (shadowed[0], shadowed[shadowed.len() - 1]);
    s.append(Raw::new(
        "user/message",
        user(
            &format!("summary-{}", s.len()),
            "Summary of the conversation so far.",
        ),
        Intent::replace(start, end).sources(shadowed),
    ))?;
    Ok(())
}

fn run_workload(
    store: &Arc<Store>,
    sessions: u64,
    turns: u64,
    flush: bool,
) -> Result<(u64, f64), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let handles: Vec<_> = (0..sessions)
        .map(|n| {
            let store = store.clone();
            std::thread::spawn(move || -> Result<u64, String> {
                let id = format!("agent-{n}");
                let s = store
                    .create(SessionHeader::new(id, 1_767_225_600_000))
                    .map_err(|e| e.to_string())?;
                let mut events = 0;
                for t in 1..=turns {
                    events += turn(&s, t, flush).map_err(|e| e.to_string())?;
                    if t % 10 == 0 {
                        compact(&s).map_err(|e| e.to_string())?;
                        events += 1;
                    }
                }
                Ok(events)
            })
        })
        .collect();
    let mut total = 0;
    for h in handles {
        total += h.join().map_err(|_| "an agent thread panicked")??;
    }
    Ok((total, start.elapsed().as_secs_f64()))
}

/// Refuses a `--store` for the demo that exists and is not an empty directory (the demo never
/// writes into an existing store or over other files).
fn check_new_dir(keep: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let shown = super::output::human_path(keep);
    if keep.is_file() {
        return Err(format!(
            "{shown} is a file; the demo creates its store there: pass --store with a new or empty directory"
        )
        .into());
    }
    if keep.is_dir() {
        let mut entries = std::fs::read_dir(keep)
            .map_err(|e| format!("reading the directory {shown} failed: {e}"))?;
        // A creation cut short before any data (LOCK alone) counts as empty.
        if entries.next().is_some() && !super::only_creation_files(keep) {
            return Err(format!(
                "{shown} is not empty; the demo creates a new store: pass --store with a new or empty directory (or none, for a temporary store)"
            )
            .into());
        }
    }
    Ok(())
}

/// Stops [`remove_on_signal`]'s thread when dropped.
struct SignalGuard(signal_hook::iterator::Handle);

impl Drop for SignalGuard {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Removes `temp` and exits (128 + the signal) on SIGINT or SIGTERM, from a thread of its own,
/// until the returned guard is dropped.
fn remove_on_signal(temp: &Path) -> std::io::Result<SignalGuard> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    let guard = SignalGuard(signals.handle());
    let temp = temp.to_path_buf();
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            let _ = std::fs::remove_dir_all(&temp);
            std::process::exit(128 + signal);
        }
    });
    Ok(guard)
}

/// Runs the demo: `sessions` concurrent agents, `turns` turns each. With `keep`, the main
/// (buffered) store is created there and kept; the rest lives in a temporary directory.
pub fn run(
    turns: u64,
    sessions: u64,
    keep: Option<&Path>,
) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(keep) = keep {
        check_new_dir(keep)?;
    }
    let dir = tempfile::tempdir()?;
    // Interrupted (Ctrl-C, SIGTERM), the demo removes its temporary stores before it exits:
    // the `TempDir` is only removed on a normal return.
    let _signals = remove_on_signal(dir.path())?;
    let main_store = keep.map_or_else(|| dir.path().join("buffered"), Path::to_path_buf);
    crate::say!(
        "sessionlog demo: {sessions} concurrent agent sessions x {turns} turns (58 events per turn, compaction every 10 turns)"
    );
    match keep {
        Some(_) => crate::say!(
            "store: {} (kept: `sessionlog --store {} list` shows it)\n",
            super::output::human_path(&main_store),
            super::output::human_path(&main_store)
        ),
        None => crate::say!(
            "store: {} (temporary; pass --store DIR to keep it)\n",
            super::output::human_path(dir.path())
        ),
    }

    for (label, durability, flush) in [
        (
            "buffered, flushed at dsh's 4 checkpoints per turn",
            Durability::Buffered,
            true,
        ),
        (
            "sync: every append durable (group commit)",
            Durability::Sync,
            false,
        ),
    ] {
        let path = if flush {
            main_store.clone()
        } else {
            dir.path().join("sync")
        };
        let store = Arc::new(Store::open(
            &path,
            Config::default().durability(durability),
        )?);
        let turns = if durability == Durability::Sync {
            turns.min(20)
        } else {
            turns
        };
        let (events, secs) = run_workload(&store, sessions, turns, flush)?;
        crate::say!(
            "append  {label:<52} {events:>8} events {secs:>7.2}s {:>10.0} events/s",
            events as f64 / secs
        );
    }

    // A crash mid-turn: the agent has started a tool call and dies before its result.
    let path = main_store;
    {
        let store = Store::open(&path, Config::default().durability(Durability::Buffered))?;
        let s = store.session("agent-0")?;
        let t = s.len();
        let n = turns + 1;
        s.append(Raw::new(
            "turn/start",
            format!(r#"{{"turn":{n}}}"#),
            Intent::none(),
        ))?;
        s.append(Raw::new(
            "step/start",
            format!(r#"{{"turn":{n},"step":1}}"#),
            Intent::none(),
        ))?;
        s.append(Raw::new(
            "user/message",
            user("crash", "one more thing"),
            Intent::append(),
        ))?;
        s.append(Raw::new("assistant/message", format!(r#"{{"turn":{n},"step":1,"message":{{"id":"a-crash","role":"assistant","content":[{{"type":"tool-call","id":"call-crash","name":"bash","arguments":"{{}}"}}],"source":{{"kind":"model","provider":"deepseek","model":"v4"}}}}}}"#), Intent::append()))?;
        s.append(Raw::new(
            "tool/call",
            format!(
                r#"{{"turn":{n},"step":1,"callId":"call-crash","name":"bash","arguments":"{{}}"}}"#
            ),
            Intent::none(),
        ))?;
        store.flush()?;
        crate::say!(
            "\ncrash   agent-0 dies mid-turn after {} events (an unanswered tool call)",
            s.len() - t
        );
        drop(s);
        store.abandon();
    }
    let start = Instant::now();
    let store = Store::open(&path, Config::default().durability(Durability::Buffered))?;
    let report = store.recovery_report().clone();
    crate::say!(
        "reopen  {:.1} ms: scanned {} frames of unindexed tail, {} events recovered, torn tail: {}",
        start.elapsed().as_secs_f64() * 1e3,
        report.frames_scanned,
        report.events_recovered,
        report.truncated.is_some()
    );
    let before = store.session("agent-0")?.len();
    let start = Instant::now();
    let frames_before = store.frames_read();
    let s = store.resume("agent-0")?;
    let messages = s.messages()?;
    crate::say!(
        "resume  agent-0: {} events in the log, {} crash closers appended, surface {} nodes, {} messages derived in {:.2} ms reading {} frames",
        s.len(),
        s.len() - before,
        s.surface()?.len(),
        messages.len(),
        start.elapsed().as_secs_f64() * 1e3,
        store.frames_read() - frames_before
    );
    let start = Instant::now();
    let child = store.fork("agent-0", None, Some("agent-0-fork"))?;
    crate::say!(
        "fork    agent-0-fork inherits {} events zero-copy in {:.2} ms",
        child.len() - 1,
        start.elapsed().as_secs_f64() * 1e3
    );
    turn(&child, turns + 2, true)?;
    let start = Instant::now();
    let verify = store.verify()?;
    crate::say!(
        "verify  {} frames, {} events, clean: {} ({:.0} ms)",
        verify.frames,
        verify.events,
        verify.is_clean(),
        start.elapsed().as_secs_f64() * 1e3
    );
    for (name, format, layout, out) in [
        (
            "jsonl-zstd (dsh's JSONL root)",
            ExportFormat::JsonlZstd,
            ExportLayout::Tree,
            dir.path().join("dsh-root"),
        ),
        (
            "sqlite18 (one dsh database)",
            ExportFormat::Sqlite(SchemaVersion::V18),
            ExportLayout::Tree,
            dir.path().join("sessions.db"),
        ),
    ] {
        let start = Instant::now();
        let report = export(&store, &[], &out, format, layout, &mut |_| {})?;
        let bytes = dir_size(&out);
        crate::say!(
            "export  {name:<32} {} sessions, {:>8} bytes in {:.0} ms",
            report.sessions,
            bytes,
            start.elapsed().as_secs_f64() * 1e3
        );
    }
    let sessions = store.sessions();
    crate::say!("\n{} sessions:", sessions.len());
    for info in sessions.iter().take(5) {
        crate::say!(
            "  {:<14} {:>7} events  surface {:>4}  replaced {:>3}x",
            info.header.id,
            info.event_count,
            info.surface_len,
            info.replace_generation
        );
    }
    Ok(())
}

/// Total bytes of a file or of the files under a directory.
fn dir_size(path: &std::path::Path) -> u64 {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m.len(),
        Ok(_) => std::fs::read_dir(path)
            .map(|entries| entries.flatten().map(|e| dir_size(&e.path())).sum())
            .unwrap_or(0),
        Err(_) => 0,
    }
}
