//! The `sessionlog` command line: argument parsing and the commands.
//!
//! Exit codes: 0 success; 1 `verify` found problems; 2 an error (the message names the file,
//! line or row, and what to do). Standard output closed by its reader (`| head -1`) ends a
//! command quietly with 0. Long operations draw a progress bar on stderr when it is a
//! terminal. Ids, titles, paths and other stored text are printed with control characters
//! escaped ([`human`]). README.md's "Command line" section is the command reference, with
//! examples; `sessionlog man` prints the manual page and `sessionlog completions SHELL` the
//! shell completions, both generated from these definitions.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use sessionlog::{Config, Store};

mod advice;
mod demo;
mod docs;
mod du;
mod follow;
mod gc;
mod inspect;
pub mod output;
mod progress;
mod replicate;
mod retain;
mod transfer;
mod verify;

pub use output::{human, json_text};
use output::{human_lines, human_path};

/// sessionlog: an embedded database for LLM agent session logs.
#[derive(Debug, Parser)]
#[command(name = "sessionlog", version, about)]
pub struct Cli {
    /// The store directory (default: $SESSIONLOG_STORE, else ./sessionlog-store).
    #[arg(long, global = true, env = "SESSIONLOG_STORE", value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the demonstration workload and print timings. Its stores are temporary, unless
    /// --store DIR names a new or empty directory: the main store is then kept there for
    /// `list`, `show` and the rest ($SESSIONLOG_STORE is not used).
    Demo {
        /// Set from --store given on the command line.
        #[arg(skip)]
        keep: Option<PathBuf>,
        /// Turns per session (58 events each), 1 to 100000.
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        turns: u64,
        /// Concurrent sessions (one thread each), 1 to 1024.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
        sessions: u64,
    },
    /// Run the comparison benchmarks (sessionlog against SQLite, JSONL, redb and the raw disk).
    Bench(sessionlog_bench::BenchArgs),
    /// Import dsh session files (JSONL, JSONL+zstd, SQLite 15/17/18) or directories of them.
    ///
    /// Formats are detected from the content. dsh's load rules apply: a torn tail is cut and
    /// reported, damage before a committed turn end is refused. Everything is validated before
    /// anything is written; the sources are never modified.
    Import(ImportArgs),
    /// Export sessions to dsh's JSONL (one file, or dsh's directory layout) or to one SQLite
    /// database.
    Export(ExportArgs),
    /// List the sessions in the store.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one session: a summary, or its events, messages or surface.
    Show(ShowArgs),
    /// Check every frame's CRC, the records, seq contiguity, the index against the log, and
    /// dsh's turn/step/tool invariants over each session's events. Exit 1 on problems.
    Verify {
        /// Check the invariants of these sessions only (the log is always checked whole).
        sessions: Vec<String>,
    },
    /// Show where the log's bytes go: live and dead bytes per session and per segment, the
    /// totals, and what a segment GC would free. Reads every frame; never modifies the store.
    Du {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete sessions (all named must exist, else nothing is deleted). A deleted parent's
    /// events stay readable through its forks; the bytes stay in the segments until `gc`.
    /// With --erase, no byte of their events stays in the store's files (see README for what
    /// erase does not cover).
    Delete {
        /// Also erase their bytes now: drop their events from every segment and rewrite the
        /// index file (refused when a fork not named reads a session's events).
        #[arg(long)]
        erase: bool,
        /// The sessions to delete.
        #[arg(required = true)]
        sessions: Vec<String>,
    },
    /// Evict sessions by a retention policy, least recently active first: idle longer than
    /// --max-idle, beyond --max-sessions, or over --max-size data bytes. Pinned sessions are
    /// never evicted. Prints each eviction.
    Retain(retain::RetainArgs),
    /// Give space back: compact the sealed segments that mostly hold deleted sessions (every
    /// event reads the same afterwards). Prints what it would free first; needs the store
    /// to itself (no other writer).
    Gc {
        /// Only print what a GC would free; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Erase every deleted session no fork reads: drop its events from every segment
        /// (whatever their live fraction) and rewrite the index file. Finishes a
        /// `delete --erase` that was interrupted.
        #[arg(long)]
        erase: bool,
    },
    /// Open the store read-write, running crash recovery (cuts a torn last frame, rebuilds an
    /// index that disagrees with the log), and report what it did.
    Recover {
        /// Also skip damaged frames in the middle of the log (their events are dropped and
        /// reported) instead of refusing to open.
        #[arg(long)]
        salvage: bool,
    },
    /// Print shell completions for bash, zsh, fish, elvish or PowerShell (e.g.
    /// `sessionlog completions bash > /etc/bash_completion.d/sessionlog`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff; `sessionlog man | man -l -`), or write one page per command
    /// into a directory.
    Man {
        /// Write sessionlog.1 and sessionlog-COMMAND.1 pages into this directory instead.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// Ship the store's log to S3-compatible object storage, continuously, until interrupted
    /// (Ctrl-C or SIGTERM: what is acknowledged is shipped, then it exits). Runs beside the
    /// process that writes the store, or none. Credentials and endpoint: AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL, AWS_ALLOW_HTTP, or --endpoint.
    Replicate(replicate::ReplicateArgs),
    /// Build a store from a replica: the log as shipped at --at TIME (default: the newest),
    /// its index rebuilt and verified. An interrupted restore resumes when run again.
    Restore(replicate::RestoreArgs),
    /// Test harness: append synthetic events with `Sync` durability from several threads,
    /// printing `ack <session> <seq>` after each durable append, until killed.
    #[command(hide = true)]
    CrashWriter {
        /// Appending threads (one session each).
        #[arg(long, default_value_t = 4)]
        threads: u64,
    },
}

/// `sessionlog import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Accept dsh replay fixtures (records without seq/time, numbered by position, time 0).
    #[arg(long)]
    pub replay_fixture: bool,
    /// Skip sessions whose id is already in the store instead of refusing the import (also
    /// how to finish an import that was interrupted: the sessions it wrote are skipped).
    #[arg(long)]
    pub skip_existing: bool,
    /// A session id in more than one file: fail (refuse the import), first-wins (import the
    /// first file's copy, skip the others) or skip (import no copy). The same file named twice
    /// is always read once.
    #[arg(long, value_name = "POLICY", default_value = "fail", value_parser = parse_on_duplicate)]
    pub on_duplicate: sessionlog::OnDuplicate,
    /// Files or directories to import.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
}

/// `sessionlog export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// jsonl | jsonl-zstd | sqlite15 | sqlite17 | sqlite18.
    #[arg(long, value_parser = parse_format)]
    pub format: sessionlog::ExportFormat,
    /// The target: a file for one named session (JSONL) or a database (SQLite); otherwise a
    /// directory that receives dsh's JSONL layout.
    #[arg(long)]
    pub out: PathBuf,
    /// Sessions to export (default: all).
    pub sessions: Vec<String>,
}

fn parse_on_duplicate(s: &str) -> Result<sessionlog::OnDuplicate, String> {
    s.parse()
}

fn parse_format(s: &str) -> Result<sessionlog::ExportFormat, String> {
    s.parse()
}

/// `sessionlog show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The session id.
    pub session: String,
    /// Print the events (as dsh JSONL envelopes with --json).
    #[arg(long, group = "what")]
    pub events: bool,
    /// Print the derived model messages (dsh's deriveMessages).
    #[arg(long, group = "what")]
    pub messages: bool,
    /// Print the surface (the model-visible node seqs).
    #[arg(long, group = "what")]
    pub surface: bool,
    /// Print the projections: sessionStats (dsh's fold), title, listing.
    #[arg(long, group = "what")]
    pub stats: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Print the session's events, then each new one as the writer acknowledges it, until
    /// interrupted (with --json: dsh's JSONL, header line first). Survives the writer
    /// closing, crashing and reopening.
    #[arg(long, conflicts_with_all = ["events", "messages", "surface", "stats"])]
    pub follow: bool,
}

/// A command's failure: printed as `sessionlog: error: …` with exit code 2.
pub type CliResult = Result<ExitCode, Box<dyn std::error::Error>>;

/// Runs the command line; the process exit code.
pub fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // `demo` keeps its store only where --store says so: not in a $SESSIONLOG_STORE meant for
    // the other commands.
    let from_flag = matches.value_source("store") == Some(clap::parser::ValueSource::CommandLine);
    if let Command::Demo { keep, .. } = &mut cli.command {
        *keep = if from_flag { cli.store.clone() } else { None };
    }
    output::catch_closed_pipe_panics();
    handle_file_size_limit();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cli))) {
        Ok(Ok(code)) => code,
        // A closed stdout, met by `say!` or (in a thread) by a `println!` whose panic ended
        // the command with an error.
        Ok(Err(e)) if output::is_stdout_closed(e.as_ref()) || output::closed_pipe_panicked() => {
            ExitCode::SUCCESS
        }
        Ok(Err(e)) => {
            use std::io::Write;
            // Ids and paths in the message are escaped; a closed stderr is not an error.
            let _ = writeln!(
                std::io::stderr(),
                "sessionlog: error: {}",
                human_lines(&advice::in_cli_words(e.as_ref()))
            );
            ExitCode::from(2)
        }
        Err(_) if output::closed_pipe_panicked() => ExitCode::SUCCESS,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// The store directory when neither --store nor $SESSIONLOG_STORE names one.
pub const DEFAULT_STORE: &str = "sessionlog-store";

fn run(cli: Cli) -> CliResult {
    let store = cli
        .store
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STORE));
    match cli.command {
        Command::Demo {
            turns,
            sessions,
            keep,
        } => {
            demo::run(turns, sessions, keep.as_deref())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Completions { shell } => docs::completions(shell),
        Command::Man { out_dir } => docs::man(out_dir.as_deref()),
        Command::Bench(args) => {
            sessionlog_bench::run(&args)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Import(args) => transfer::import(&store, &args),
        Command::Export(args) => transfer::export(&store, &args),
        Command::List { json } => inspect::list(&store, json),
        Command::Show(args) if args.follow => follow::show_follow(&store, &args),
        Command::Show(args) => inspect::show(&store, &args),
        Command::Verify { sessions } => verify::verify(&store, &sessions),
        Command::Du { json } => du::du(&store, json),
        Command::Delete { sessions, erase } => retain::delete(&store, &sessions, erase),
        Command::Retain(args) => retain::retain(&store, &args),
        Command::Gc { dry_run, erase } => gc::gc(&store, dry_run, erase),
        Command::Recover { salvage } => recover(&store, salvage),
        Command::Replicate(args) => replicate::replicate_cmd(&store, &args),
        Command::Restore(args) => replicate::restore_cmd(&store, &args),
        Command::CrashWriter { threads } => {
            crash_writer(&store, threads)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Refuses, before anything is opened or created, a `--store` that is not a store: a missing
/// directory, or a directory with neither `segments/` nor `index.redb`. Read commands never
/// create files.
pub(crate) fn check_is_store(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    if dir.exists() && !dir.is_dir() {
        return Err(format!(
            "{} is a file, not a sessionlog store (a store is a directory); pass the store's directory with --store DIR (or set SESSIONLOG_STORE)",
            human_path(dir)
        )
        .into());
    }
    if !dir.is_dir() {
        return Err(format!(
            "store directory {} does not exist; pass --store DIR (or set SESSIONLOG_STORE), or create it with `sessionlog import`",
            human_path(dir)
        )
        .into());
    }
    if !Store::is_store(dir) {
        if only_creation_files(dir) {
            return Err(format!(
                "{} holds only the files a store's creation makes first (LOCK, ACKED): a creation was interrupted before any data was written; `sessionlog import` creates the store there, or delete the directory",
                human_path(dir),
            )
            .into());
        }
        return Err(format!(
            "{} is not a sessionlog store (it has no segments/ and no index.redb); pass the store's directory with --store DIR (or set SESSIONLOG_STORE)",
            human_path(dir),
        )
        .into());
    }
    Ok(())
}

/// True when `dir` holds something, and nothing but the files [`Store::open`] makes before a
/// store's data (`LOCK`, `ACKED`): a creation cut short (killed, or a full disk) before
/// `segments/` or `index.redb` existed. Nothing of a store's data is there.
pub(crate) fn only_creation_files(dir: &std::path::Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut any = false;
    for entry in entries {
        let Ok(entry) = entry else { return false };
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        let name = entry.file_name();
        if !is_file || !(name == "LOCK" || name == sessionlog::store::ACK_FILE) {
            return false;
        }
        any = true;
    }
    any
}

/// Opens the store for reading (shared with other readers), creating nothing.
fn open_for_reading(dir: &std::path::Path) -> Result<Store, Box<dyn std::error::Error>> {
    check_is_store(dir)?;
    let read_only = Config::default().read_only(true);
    match Store::open(dir, read_only) {
        Ok(store) => {
            note_pending(&store);
            Ok(store)
        }
        Err(sessionlog::OpenError::NeedsRepair {
            reason,
            acknowledged: Some(_),
            ..
        }) => {
            Err(format!(
                "the index of {} needs rebuilding ({reason}); `sessionlog recover` refuses to cut \
                 acknowledged frames; `sessionlog recover --salvage` accepts the loss, or restore the store from a backup",
                human_path(dir)
            )
            .into())
        }
        Err(sessionlog::OpenError::NeedsRepair { reason, .. }) => Err(format!(
            "the index of {} needs rebuilding ({reason}); `sessionlog verify` shows the damage, \
             `sessionlog recover` rebuilds the index (a damaged last frame is then cut as a torn write, unless its writer had acknowledged it: then recover says so and stops)",
            human_path(dir)
        )
        .into()),
        Err(e) => Err(e.into()),
    }
}

/// Prints a one-line note on stderr when a read-only open found a store that needs recovery
/// (its answers are complete all the same: the repair was done in memory).
pub(crate) fn note_pending(store: &Store) {
    if !store.dir().join("index.redb").exists() {
        eprintln!(
            "sessionlog: note: the index (index.redb) is missing: this command rebuilt it in memory from the log, so its answers are complete; the next write open rebuilds it on disk (`sessionlog recover`, or an import)"
        );
        return;
    }
    if let Some(loss) = &store.recovery_report().acknowledged_lost {
        eprintln!(
            "sessionlog: note: acknowledged frames are missing: the log ends at {}, before {}, up to which its last writer had published every frame as durable. The answers hold what the log still has; `sessionlog recover` refuses to cut acknowledged frames, `sessionlog recover --salvage` accepts the loss, or restore the store from a backup",
            loss.end, loss.published
        );
        return;
    }
    if let Some(reason) = &store.recovery_report().recovery_pending {
        eprintln!(
            "sessionlog: note: recovery is pending: {reason}. The answers include every acknowledged write; `sessionlog recover` repairs the store"
        );
    }
}

/// `recover [--salvage]`: opens the store read-write (running recovery, with redb's integrity
/// check and a CRC check of every index entry) and reports what recovery did.
fn recover(dir: &std::path::Path, salvage: bool) -> CliResult {
    check_is_store(dir)?;
    // A zero-length index.redb (a crash while creating it) is rebuilt like a missing one.
    let index_missing = std::fs::metadata(dir.join("index.redb")).map_or(true, |m| m.len() == 0);
    let config = Config::default()
        .recovery(if salvage {
            sessionlog::RecoveryMode::SalvageSkippingBadFrames
        } else {
            sessionlog::RecoveryMode::TolerateTornTail
        })
        .check_index(true);
    let store = Store::open(dir, config)?;
    let r = store.recovery_report().clone();
    // The open leaves the sessions a crash left behind to their first use; recover brings
    // them all up to date, so readers do not fold them again (a session that fails to
    // replay keeps its error for when it is used, and `verify` names it).
    store.catch_up()?;
    store.close()?;
    crate::say!(
        "recovered {}: scanned {} frame(s) from {}, {} event(s) indexed",
        human_path(dir),
        r.frames_scanned,
        r.scanned_from,
        r.events_recovered
    );
    if index_missing {
        crate::say!("index rebuilt from the log: index.redb was missing or empty");
    } else if r.index_rebuilt {
        crate::say!(
            "index rebuilt from the log: {}",
            human(
                r.rebuild_reason
                    .as_deref()
                    .unwrap_or("it disagreed with the log")
            )
        );
    } else {
        crate::say!("index checked: redb's integrity check and every entry's CRC pass");
        crate::say!(
            "the log before {} was not read (recovery reads only what the index does not cover): `sessionlog verify` reads every frame",
            r.scanned_from
        );
    }
    if let Some(lost) = &r.acknowledged_lost {
        crate::say!(
            "acknowledged frames were missing: the log ended at {}, before {}, up to which its last writer had published every frame as durable; the store goes on from {} (restore a backup for what was between)",
            lost.end,
            lost.published,
            lost.end
        );
    }
    if let Some(t) = &r.truncated {
        if r.torn_operation_frames > 0 {
            crate::say!(
                "unfinished operation cut at {}: {} ({} bytes, never acknowledged)",
                t.position,
                human(&t.reason),
                t.skipped
            );
        } else {
            crate::say!(
                "torn write cut at {}: {} ({} bytes)",
                t.position,
                human(&t.reason),
                t.skipped
            );
        }
    }
    if r.preallocated_cut > 0 {
        crate::say!(
            "preallocated zeros after the last frame cut ({} bytes; not damage: the writer did not close)",
            r.preallocated_cut
        );
    }
    for b in &r.skipped_frames {
        crate::say!(
            "bad frame skipped at {}: {} ({} bytes)",
            b.position,
            human(&b.reason),
            b.skipped
        );
    }
    for (id, first, last) in r.dropped_ranges() {
        let seqs = if first == last {
            format!("seq {first}")
        } else {
            format!("seqs {first}..={last}")
        };
        crate::say!("dropped: session \"{}\" {seqs}", human(&id));
    }
    if let Some(n) = r.removed_segment {
        crate::say!("removed segment {n} (torn while being created)");
    }
    if !r.dropped_events.is_empty() || !r.skipped_frames.is_empty() {
        crate::say!(
            "the dropped events are gone from the store; re-import the sessions named above from another copy if you have one"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Appends [`sessionlog_bench::workload::synthetic_event`]s forever (until killed), acknowledging each
/// durable append on stdout. Sessions are `w0..w{threads}`; an existing store is continued.
fn crash_writer(dir: &std::path::Path, threads: u64) -> Result<(), Box<dyn std::error::Error>> {
    use std::io::Write;
    use std::sync::Arc;

    // The synthetic workload does not follow dsh's turn/step invariants; surface rules apply.
    let store = Arc::new(Store::open(
        dir,
        Config::default().invariants(sessionlog::InvariantMode::Off),
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
                        .create_session(sessionlog::SessionHeader::new(id.clone(), 1))
                        .map_err(|e| e.to_string())?;
                }
                let mut seq = store.len(&id).unwrap_or(0);
                loop {
                    let receipt = store
                        .append(&id, sessionlog_bench::workload::synthetic_event(seq, t))
                        .map_err(|e| e.to_string())?;
                    if !receipt.durable {
                        return Err("a Sync append returned before it was durable".into());
                    }
                    let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
                    match writeln!(out, "ack {t} {seq}").and_then(|()| out.flush()) {
                        Ok(()) => {}
                        // Nobody reads the acks any more: stop quietly.
                        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                        Err(e) => return Err(e.to_string()),
                    }
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

/// Formats epoch milliseconds as ISO 8601 UTC (`2026-01-01T00:00:00.000Z`), for any `i64`.
pub fn iso_time(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (h, m, s, milli) = (
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000,
    );
    // Howard Hinnant's civil_from_days.
    let z = i128::from(days) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i128::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

/// Past a file-size limit (`ulimit -f`) the kernel sends SIGXFSZ, whose default action kills the
/// process mid-write. With a handler installed the write fails with EFBIG instead, and the
/// command reports it and cleans up like any other write error (an export removes its
/// temporary file; an import keeps what it acknowledged).
fn handle_file_size_limit() {
    #[cfg(unix)]
    {
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Registration fails only for signals that cannot be handled; SIGXFSZ can.
        let _ = signal_hook::flag::register(signal_hook::consts::SIGXFSZ, seen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_errors_give_cli_advice_not_library_advice() {
        let position = sessionlog::LogPosition {
            segment: 3,
            offset: 4096,
        };
        let corruption = sessionlog::OpenError::Corruption {
            position,
            reason: sessionlog::Damage::MissingEarlierFrames,
        };
        let torn = sessionlog::OpenError::TornTail {
            position,
            reason: sessionlog::Damage::MissingLastFrame,
        };
        for (e, run) in [
            (corruption, "`sessionlog recover --salvage`"),
            (torn, "`sessionlog recover`"),
        ] {
            let library = e.to_string();
            assert!(library.contains("RecoveryMode::"), "{library}");
            let words = advice::in_cli_words(&e);
            assert!(words.contains(run), "{words}");
            assert!(words.contains("segment 3 offset 4096"), "{words}");
            assert!(!words.contains("RecoveryMode"), "{words}");
            let umbrella = sessionlog::Error::from(e);
            assert_eq!(advice::in_cli_words(&umbrella), words);
        }
    }

    #[test]
    fn iso_times() {
        assert_eq!(iso_time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_time(1_767_225_600_000), "2026-01-01T00:00:00.000Z");
        assert_eq!(iso_time(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(iso_time(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn cli_parses() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
