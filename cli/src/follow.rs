//! `sessionlog show SESSION --follow [--json]`: the session, then every event as the writer
//! acknowledges it, like `tail -f`, until interrupted. With `--json` standard output is dsh's
//! JSONL of the session (the header line, then one line per event), growing; notices (the
//! writer went away, came back) go to standard error.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use super::output::{human, json_text, stdout_error};
use super::{CliResult, ShowArgs, iso_time, open_for_reading};
use sessionlog::{Event, FollowUpdate, SurfaceOp, write_event_line, write_header_line};

fn out_err(e: std::io::Error) -> Box<dyn std::error::Error> {
    stdout_error(e)
}

/// Prints one event: its dsh JSONL line, or a row of the `show --events` table.
fn print_event(out: &mut impl Write, e: &Event, json: bool, id: &str) -> CliResult {
    if json {
        let mut line = String::new();
        write_event_line(&mut line, e)
            .map_err(|err| format!("session \"{id}\" seq {}: {err}", e.seq))?;
        writeln!(out, "{}", json_text(&line)).map_err(out_err)?;
    } else {
        let surface = match e.surface_op {
            None => String::new(),
            Some(SurfaceOp::Append) => "append".into(),
            Some(SurfaceOp::Replace { start, end }) => format!("replace {start}..={end}"),
        };
        writeln!(
            out,
            "{:>8}  {:<24}  {:<28}  {surface}",
            e.seq,
            iso_time(e.time),
            human(&e.kind)
        )
        .map_err(out_err)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A notice on standard error (flushed at once, so a reader of both streams sees the order).
fn notice(text: &str) {
    let mut err = std::io::stderr();
    let _ = writeln!(err, "sessionlog: {text}");
    let _ = err.flush();
}

/// `show SESSION --follow [--json]`.
pub fn show_follow(store_dir: &Path, args: &ShowArgs) -> CliResult {
    let store = open_for_reading(store_dir)?;
    let id = crate::output::session_id(&store, &args.session);
    let id = id.as_str();
    let Some(info) = store.session_info(id) else {
        return Err(format!(
            "session \"{}\" is not in the store {}; `sessionlog list` shows the sessions",
            human(id),
            store_dir.display()
        )
        .into());
    };
    let writer_alive = store.reader_view().is_some_and(|v| v.writer_alive);
    let mut follower = store.follow(id, 0)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.json {
        let header =
            write_header_line(&info.header).map_err(|e| format!("session \"{id}\": {e}"))?;
        writeln!(out, "{}", json_text(&header)).map_err(out_err)?;
    } else {
        writeln!(
            out,
            "session {} (following; Ctrl-C stops)",
            human(&info.header.id)
        )
        .map_err(out_err)?;
        writeln!(out, "{:>8}  {:<24}  {:<28}  SURFACE", "SEQ", "TIME", "TYPE").map_err(out_err)?;
    }
    out.flush().map_err(out_err)?;
    if !writer_alive {
        notice(
            "no writer has the store open; waiting for one (new events appear as it acknowledges them)",
        );
    }
    loop {
        let update = follower
            .next_update(Duration::from_millis(500))
            .map_err(|e| format!("following session \"{id}\" failed: {e}"))?;
        match update {
            FollowUpdate::Event(e) => {
                print_event(&mut out, &e, args.json, id)?;
            }
            FollowUpdate::WriterGone { closed: true } => {
                out.flush().map_err(out_err)?;
                notice("the writer closed the store; waiting for a new writer");
            }
            FollowUpdate::WriterGone { closed: false } => {
                out.flush().map_err(out_err)?;
                notice(
                    "the writer stopped without closing the store (crashed or killed); showing what it wrote, waiting for a new writer",
                );
            }
            FollowUpdate::WriterOpened => {
                out.flush().map_err(out_err)?;
                notice("a writer opened the store; following");
            }
            FollowUpdate::SessionGone => {
                out.flush().map_err(out_err)?;
                notice(&format!(
                    "session \"{}\" was deleted; nothing more to follow",
                    human(id)
                ));
                return Ok(ExitCode::SUCCESS);
            }
            FollowUpdate::Idle => {}
            _ => {}
        }
        out.flush().map_err(out_err)?;
    }
}
