//! `sessionlog verify [SESSION...]`: the log's frames and index, then each session's
//! turn/step/tool invariants. Never modifies the store.

use std::path::Path;
use std::process::ExitCode;

use super::CliResult;
use super::progress::Progress;
use sessionlog::RecoveryMode;
use sessionlog::{Config, Store};
use sessionlog::{InvariantRule, OpenError};

fn rule_label(rule: InvariantRule) -> &'static str {
    match rule {
        InvariantRule::Seq => "INV-SEQ",
        InvariantRule::TurnStart => "INV-TURN-START",
        InvariantRule::TurnEnd => "INV-TURN-END",
        InvariantRule::StepStart => "INV-STEP-START",
        InvariantRule::StepEnd => "INV-STEP-END",
        InvariantRule::InStep => "INV-IN-STEP",
        InvariantRule::ToolResult => "INV-TOOL-RESULT",
        InvariantRule::Enclosed => "INV-ENCLOSED",
        InvariantRule::Malformed => "INV-MALFORMED",
    }
}

/// Opens read-only; when recovery finds corruption (valid frames after a bad one in the
/// unindexed tail), opens again skipping bad frames, so the report lists all of them. The
/// flag says the second open happened: the events it could not place are then problems
/// (one line per run of seqs), not what an earlier `recover --salvage` dropped.
fn open(dir: &Path) -> Result<(Store, Vec<String>, bool), Box<dyn std::error::Error>> {
    super::check_is_store(dir)?;
    if !dir.is_dir() {
        return Err(format!(
            "store directory {} does not exist; pass --store DIR (or set SESSIONLOG_STORE)",
            dir.display()
        )
        .into());
    }
    let read_only = Config::default().read_only(true);
    match Store::open(dir, read_only.clone()) {
        Ok(store) => {
            super::note_pending(&store);
            Ok((store, Vec::new(), false))
        }
        Err(OpenError::Corruption { position, reason }) => {
            let salvage = read_only.recovery(RecoveryMode::SalvageSkippingBadFrames);
            let store = Store::open(dir, salvage)?;
            super::note_pending(&store);
            let mut problems = vec![format!(
                "the store does not open normally: corruption at {position}: {reason}"
            )];
            let r = store.recovery_report();
            // Where each run starts: the first place each (session, seq) was dropped at.
            let mut first_at = std::collections::HashMap::new();
            for (id, seq, at) in &r.dropped_events {
                first_at.entry((id.as_str(), *seq)).or_insert(at);
            }
            for (id, first, last) in r.dropped_ranges() {
                let at = first_at
                    .get(&(id.as_str(), first))
                    .map(|at| at.to_string())
                    .unwrap_or_default();
                problems.push(format!(
                    "session \"{id}\" seqs {first}..={last} (from {at}) follow a gap left by a bad frame: `sessionlog recover --salvage` would drop them, or restore a backup"
                ));
            }
            Ok((store, problems, true))
        }
        Err(OpenError::NeedsRepair {
            reason,
            acknowledged: Some(_),
            ..
        }) => {
            Err(format!(
                "the index of {} needs rebuilding ({reason}); verify never modifies the store — \
                 `sessionlog recover` refuses to cut acknowledged frames; `sessionlog recover --salvage` accepts the loss, or restore the store from a backup",
                dir.display()
            )
            .into())
        }
        Err(OpenError::NeedsRepair { reason, .. }) => Err(format!(
            "the index of {} needs rebuilding ({reason}); verify never modifies the store — \
             `sessionlog recover` rebuilds it (a damaged last frame is then cut as a torn write, \
             unless its writer had acknowledged it: then recover says so and stops), \
             then run verify again",
            dir.display()
        )
        .into()),
        Err(e) => Err(e.into()),
    }
}

/// Runs the checks and prints the report; exit 0 when clean, 1 with problems.
pub fn verify(store_dir: &Path, only: &[String]) -> CliResult {
    let (store, mut problems, opened_salvaging) = open(store_dir)?;
    let only: Vec<String> = only
        .iter()
        .map(|id| crate::output::session_id(&store, id))
        .collect();
    let only = &only[..];
    for id in only {
        if store.len(id).is_none() {
            return Err(format!(
                "session \"{id}\" is not in the store {}; `sessionlog list` shows the sessions",
                store_dir.display()
            )
            .into());
        }
    }
    let spinner = Progress::new("log", 0);
    spinner.message("checking every frame");
    let report = store.verify();
    spinner.finish();
    let report = report?;
    if let Some(cut) = &report.pending_cut {
        eprintln!(
            "note: recovery pending: {} bytes at {} were never acknowledged ({}); the next writable open (`sessionlog recover`) cuts them",
            cut.skipped, cut.position, cut.reason
        );
    }
    // Said already when the open found it (the note of a read-only open).
    if let Some(loss) = report
        .acknowledged_lost
        .as_ref()
        .filter(|_| store.recovery_report().acknowledged_lost.is_none())
    {
        eprintln!(
            "note: acknowledged frames are missing between {} and {}: `sessionlog recover` refuses this store; `sessionlog recover --salvage` accepts the loss and goes on from {}, or restore the store from a backup",
            loss.end, loss.published, loss.end
        );
    }
    // When this verify had to open skipping bad frames, the same events are problems above.
    for s in report.salvaged.iter().filter(|_| !opened_salvaging) {
        if s.dropped_from > s.first {
            eprintln!(
                "note: session \"{}\" seqs {}..={} are not in the index: `sessionlog recover --salvage` dropped {}..={}, which follow the damaged frame at {}, and {}..={} were in that frame",
                s.session,
                s.first,
                s.last,
                s.dropped_from,
                s.last,
                s.damaged,
                s.first,
                s.dropped_from - 1
            );
        } else {
            eprintln!(
                "note: session \"{}\" seqs {}..={} follow the damaged frame at {} and are not in the index: `sessionlog recover --salvage` dropped them",
                s.session, s.dropped_from, s.last, s.damaged
            );
        }
    }
    let mut lines: Vec<String> = Vec::new();
    for bad in &report.bad_frames {
        lines.push(format!(
            "bad frame at {}: {} ({} bytes)",
            bad.position, bad.reason, bad.skipped
        ));
    }
    for p in problems.drain(..).chain(report.problems.iter().cloned()) {
        lines.push(format!("log: {p}"));
    }
    let sessions = if only.is_empty() {
        store
            .sessions()
            .into_iter()
            .map(|s| (s.header.id, s.event_count))
            .collect::<Vec<_>>()
    } else {
        only.iter()
            .map(|id| (id.clone(), store.len(id).unwrap_or(0)))
            .collect()
    };
    let total: u64 = sessions.iter().map(|(_, n)| n).sum();
    let bar = Progress::new("invariants", total);
    let mut done = 0u64;
    let mut violations = 0usize;
    for (id, _) in &sessions {
        let session = match store.session(id) {
            Ok(session) => session,
            Err(e) => {
                lines.push(super::advice::about_session(id, "reading", &e));
                continue;
            }
        };
        let before = done;
        let check = session.check_invariants(&mut |n| bar.set("invariants", before + n, total, id));
        done += check.events;
        for v in &check.violations {
            violations += 1;
            lines.push(format!(
                "session \"{id}\" seq {}: {}: {}",
                v.seq,
                rule_label(v.rule),
                v.detail
            ));
        }
        if let Some((seq, err)) = check.stopped {
            lines.push(format!(
                "session \"{id}\": reading stopped at seq {seq}: {err}"
            ));
        }
    }
    bar.finish();
    let verdict = if lines.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    let mut out = vec![format!(
        "checked {} frames, {} events in the log; {} session(s), {} event(s) against the invariants",
        report.frames,
        report.events,
        sessions.len(),
        done
    )];
    out.extend(lines.iter().map(|l| super::human(l).into_owned()));
    if lines.is_empty() {
        out.push("clean".to_owned());
    } else {
        out.push(format!(
            "{} problem(s): {} bad frame(s), {} invariant violation(s), {} other",
            lines.len(),
            report.bad_frames.len(),
            violations,
            lines.len() - report.bad_frames.len() - violations
        ));
    }
    // The exit code is verify's verdict: a reader that stops early (`| head -1`) must not
    // turn problems into success, so a closed pipe ends the printing, not the verdict.
    match print_lines(&out) {
        Ok(()) => Ok(verdict),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(verdict),
        Err(e) => Err(super::output::stdout_error(e)),
    }
}

/// Writes `lines` to standard output, stopping at the first failure.
fn print_lines(lines: &[String]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    for l in lines {
        writeln!(stdout, "{l}")?;
    }
    stdout.flush()
}
