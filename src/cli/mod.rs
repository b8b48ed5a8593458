//! The `sessionlog` command line: argument parsing and the commands.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::store::{Config, Store};

mod demo;

/// sessionlog: an embedded database for LLM agent session logs.
#[derive(Debug, Parser)]
#[command(name = "sessionlog", version, about)]
pub struct Cli {
    /// The store directory (default: $SESSIONLOG_STORE, else ./sessionlog-store).
    #[arg(
        long,
        global = true,
        env = "SESSIONLOG_STORE",
        default_value = "sessionlog-store"
    )]
    pub store: PathBuf,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the demonstration workload in a temporary store and print timings.
    Demo {
        /// Turns per session (58 events each).
        #[arg(long, default_value_t = 200)]
        turns: u64,
        /// Concurrent sessions.
        #[arg(long, default_value_t = 16)]
        sessions: u64,
    },
    /// Run the comparison benchmarks (sessionlog against SQLite, JSONL, redb and the raw disk).
    Bench(crate::bench::BenchArgs),
    /// List the sessions in the store.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check every frame's CRC, the records, seq contiguity and the index against the log.
    Verify,
    /// Test harness: append synthetic events with `Sync` durability from several threads,
    /// printing `ack <session> <seq>` after each durable append, until killed.
    #[command(hide = true)]
    CrashWriter {
        /// Appending threads (one session each).
        #[arg(long, default_value_t = 4)]
        threads: u64,
    },
}

/// Runs the command line; the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sessionlog: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    match cli.command {
        Command::Demo { turns, sessions } => {
            demo::run(turns, sessions)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(args) => {
            crate::bench::run(&args)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::List { json } => {
            let store = Store::open(
                &cli.store,
                Config {
                    read_only: true,
                    ..Config::default()
                },
            )?;
            let sessions = store.sessions();
            if json {
                let rows: Vec<serde_json::Value> = sessions
                    .iter()
                    .map(|s| {
                        serde_json::json!({
                            "id": s.header.id,
                            "createdAt": s.header.created_at,
                            "events": s.event_count,
                            "dataBytes": s.data_bytes,
                            "lastTime": s.last_time,
                        })
                    })
                    .collect();
                println!("{}", serde_json::Value::Array(rows));
            } else {
                println!(
                    "{:<40} {:>10} {:>12} {:>15}",
                    "SESSION", "EVENTS", "DATA BYTES", "LAST ACTIVITY"
                );
                for s in sessions {
                    println!(
                        "{:<40} {:>10} {:>12} {:>15}",
                        s.header.id, s.event_count, s.data_bytes, s.last_time
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::CrashWriter { threads } => {
            crash_writer(&cli.store, threads)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Verify => {
            let store = Store::open(&cli.store, Config::default())?;
            let report = store.verify()?;
            println!("{} frames, {} events checked", report.frames, report.events);
            for bad in &report.bad_frames {
                println!(
                    "bad frame at {}: {} ({} bytes)",
                    bad.position, bad.reason, bad.skipped
                );
            }
            for p in &report.problems {
                println!("problem: {p}");
            }
            if report.is_clean() {
                println!("clean");
                Ok(ExitCode::SUCCESS)
            } else {
                Ok(ExitCode::from(1))
            }
        }
    }
}

/// Appends [`crate::workload::synthetic_event`]s forever (until killed), acknowledging each
/// durable append on stdout. Sessions are `w0..w{threads}`; an existing store is continued.
fn crash_writer(dir: &std::path::Path, threads: u64) -> Result<(), Box<dyn std::error::Error>> {
    use std::io::Write;
    use std::sync::Arc;

    // The synthetic workload does not follow dsh's turn/step invariants; surface rules apply.
    let store = Arc::new(Store::open(
        dir,
        Config {
            invariants: crate::session::InvariantMode::Off,
            ..Config::default()
        },
    )?);
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let store = store.clone();
            let out = out.clone();
            std::thread::spawn(move || -> Result<(), String> {
                let id = format!("w{t}");
                if store.len(&id).is_none() {
                    store
                        .create_session(crate::event::SessionHeader::new(id.clone(), 1))
                        .map_err(|e| e.to_string())?;
                }
                let mut seq = store.len(&id).unwrap_or(0);
                loop {
                    let receipt = store
                        .append(&id, crate::workload::synthetic_event(seq, t))
                        .map_err(|e| e.to_string())?;
                    if !receipt.durable {
                        return Err("a Sync append returned before it was durable".into());
                    }
                    let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
                    writeln!(out, "ack {t} {seq}").map_err(|e| e.to_string())?;
                    out.flush().map_err(|e| e.to_string())?;
                    seq += 1;
                }
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "writer thread panicked")??;
    }
    Ok(())
}
