//! `sessionlog import` and `sessionlog export`.

use std::path::Path;
use std::process::ExitCode;

use super::output::{human, human_lines, human_path};
use super::progress::{Progress, Transfer};
use super::{CliResult, ExportArgs, ImportArgs, open_for_reading};
use sessionlog::{Config, Store};
use sessionlog::{ExportFormat, ExportLayout};
use sessionlog::{ImportOptions, discover, import_sources};

/// What `import` found at `--store` before it opened anything.
enum Target {
    /// A store: sessions are added to it.
    Store,
    /// Nothing there: the import creates the directory (removed again if nothing is imported).
    Missing,
    /// An empty directory: the import makes it a store (emptied again if nothing is imported).
    Empty,
}

/// Refuses a `--store` that is a file, or a directory that is neither empty nor a store:
/// `import` makes a store only where there was nothing.
fn import_target(dir: &Path) -> Result<Target, Box<dyn std::error::Error>> {
    let shown = human_path(dir);
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Target::Missing),
        Err(e) => return Err(format!("cannot read {shown}: {e}").into()),
    };
    if !dir.is_dir() {
        let what = if meta.file_type().is_symlink() {
            "a link to no directory"
        } else {
            "a file"
        };
        return Err(format!(
            "{shown} is {what}, not a store directory; pass --store with an existing store, or with a new or empty directory for a new one"
        )
        .into());
    }
    if Store::is_store(dir) {
        return Ok(Target::Store);
    }
    // A creation cut short before any data (killed, or a full disk): created again here.
    if super::only_creation_files(dir) {
        return Ok(Target::Empty);
    }
    // Another process may have gone on creating the store since the check above: its data
    // appeared meanwhile, and the store is that process's (opening it says whether it is
    // still busy), not a foreign directory.
    if Store::is_store(dir) {
        return Ok(Target::Store);
    }
    let mut entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read {shown}: {e}"))?;
    match entries.next() {
        None => Ok(Target::Empty),
        Some(entry) => {
            let example = entry
                .map(|e| human(&e.file_name().to_string_lossy()).into_owned())
                .unwrap_or_default();
            Err(format!(
                "{shown} is neither empty nor a sessionlog store (it holds \"{example}\"{}); import creates a store only in a new or empty directory: pass --store with one, or with an existing store",
                if entries.next().is_some() { " and more" } else { "" }
            )
            .into())
        }
    }
}

/// Removes what a failed import created: the store's files (`LOCK`, `ACKED`, `index.redb`,
/// `segments/`), and the directory itself when the import made it. Only those names: anything
/// else that appeared meanwhile stays (and so does the directory holding it). Only while no
/// other process holds the store: another import may be creating it in the same directory
/// right now, and its files are never this one's to remove. `LOCK` goes last, still held (a
/// writer checks that the `LOCK` it locked is still the one in the directory).
fn remove_created(dir: &Path, target: &Target) {
    if matches!(target, Target::Store) {
        return;
    }
    let lock_path = dir.join("LOCK");
    if let Ok(lock) = std::fs::OpenOptions::new().read(true).open(&lock_path) {
        if lock.try_lock().is_err() {
            return;
        }
        remove_store_files(dir, target);
        drop(lock);
    }
    if matches!(target, Target::Missing) {
        let _ = std::fs::remove_dir(dir);
    }
}

/// The removal of [`remove_created`], for a caller that holds the store (`LOCK` last).
fn remove_store_files(dir: &Path, target: &Target) {
    if matches!(target, Target::Store) {
        return;
    }
    let _ = std::fs::remove_dir_all(dir.join("segments"));
    for file in ["index.redb", sessionlog::store::ACK_FILE, "LOCK"] {
        let _ = std::fs::remove_file(dir.join(file));
    }
}

/// `import [--replay-fixture] [--skip-existing] [--on-duplicate P] PATH...`
pub fn import(store_dir: &Path, args: &ImportArgs) -> CliResult {
    let target = import_target(store_dir)?;
    // Find and sniff the sources before creating or locking the store.
    let sources = discover(&args.paths)?;
    let store = Store::open(store_dir, Config::default()).inspect_err(|e| {
        // Another process holds the store (it may be creating it right now): what is there
        // is that process's, never this one's to remove.
        if !matches!(e, sessionlog::OpenError::Locked { .. }) {
            remove_created(store_dir, &target);
        }
    })?;
    // A store that already holds sessions was made by another import that won the race to
    // this directory: it is never this import's to remove.
    let target = if matches!(target, Target::Store) || !store.sessions().is_empty() {
        Target::Store
    } else {
        target
    };
    let options = ImportOptions {
        replay_fixture: args.replay_fixture,
        skip_existing: args.skip_existing,
        on_duplicate: args.on_duplicate,
        ..ImportOptions::default()
    };
    let bar = Progress::for_transfer("import");
    // Each session is printed as soon as it is durable, so a killed import leaves a record
    // of what got in. A closed stdout stops the printing, not the import.
    let mut printing = true;
    let report = import_sources(&store, &sources, &options, &mut |p| {
        bar.transfer(
            p.phase,
            &Transfer {
                sessions: p.done,
                total_sessions: p.total,
                events: p.events,
                total_events: p.total_events,
                bytes: p.bytes,
                total_bytes: p.total_bytes,
                session: p.session,
            },
        );
        if let (Some(s), true) = (p.imported, printing) {
            let line = format!(
                "  {}  {} events  {}  {}",
                human(&s.id),
                s.events,
                s.format,
                human_path(&s.file)
            );
            bar.suspend(|| {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                printing = writeln!(out, "{line}").and_then(|()| out.flush()).is_ok();
            });
        }
    });
    bar.finish();
    let report = match report {
        Ok(report) => report,
        Err(e) => {
            if !matches!(e, sessionlog::FileImportError::Partial { .. }) {
                // Nothing was imported: leave no store behind where there was none. Removed
                // while this process still holds it, so no other import can have taken the
                // directory over in between.
                remove_store_files(store_dir, &target);
                let _ = store.close();
                if matches!(target, Target::Missing) {
                    let _ = std::fs::remove_dir(store_dir);
                }
            }
            return Err(e.into());
        }
    };
    if let Err(e) = store.close() {
        return Err(super::advice::close_failed_after_import(report.sessions.len(), &e).into());
    }
    if !printing {
        return Err(super::output::StdoutClosed.into());
    }
    let events: u64 = report.sessions.iter().map(|s| s.events).sum();
    // The import is written and durable: a closed stdout from here on only ends the report.
    crate::say!(
        "imported {} session(s), {events} event(s), from {} file(s)",
        report.sessions.len(),
        sources.len()
    );
    for cut in report.cuts() {
        crate::say!("cut: {}", human_lines(&cut.to_string()));
    }
    for s in &report.sessions {
        if !s.non_canonical_lines.is_empty() {
            let lines: Vec<String> = s
                .non_canonical_lines
                .iter()
                .take(10)
                .map(|l| l.to_string())
                .collect();
            crate::say!(
                "note: {}: line(s) {}{} are not in the form dsh writes; a JSONL export of \"{}\" will differ from the file there",
                human_path(&s.file),
                lines.join(", "),
                if s.non_canonical_lines.len() > 10 {
                    ", …"
                } else {
                    ""
                },
                human(&s.id)
            );
        }
    }
    for file in &report.named_twice {
        crate::say!(
            "note: {} was named more than once (directly or in a directory); it was read once",
            human_path(file)
        );
    }
    for d in &report.duplicates {
        match &d.kept {
            Some(kept) => crate::say!(
                "skipped: session \"{}\" from {} (a repeat: the copy in {} was imported; --on-duplicate first-wins)",
                human(&d.id),
                human_path(&d.file),
                human_path(kept)
            ),
            None => crate::say!(
                "skipped: session \"{}\" from {} (in several files; --on-duplicate skip)",
                human(&d.id),
                human_path(&d.file)
            ),
        }
    }
    for (id, file) in &report.skipped {
        crate::say!(
            "skipped: session \"{}\" from {} (already in the store)",
            human(id),
            human_path(file)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `export --format F --out PATH [SESSION...]`
pub fn export(store_dir: &Path, args: &ExportArgs) -> CliResult {
    if args.out.as_os_str() == "-" {
        // Checked before the store is opened: `-` is a file name to the exporter, which
        // publishes whole files (never a partial one), so it would have made a file "-".
        return Err(
            "export writes files, not standard output: pass a path, e.g. `--out session.jsonl` (then `cat session.jsonl`)"
                .into(),
        );
    }
    let store = open_for_reading(store_dir)?;
    let sessions: Vec<String> = args
        .sessions
        .iter()
        .map(|id| crate::output::session_id(&store, id))
        .collect();
    let layout = match args.format {
        ExportFormat::Sqlite(_) => ExportLayout::File,
        _ if args.sessions.len() == 1 && !args.out.is_dir() => ExportLayout::File,
        _ => ExportLayout::Tree,
    };
    let bar = Progress::for_transfer("export");
    let report = sessionlog::export(
        &store,
        &sessions,
        &args.out,
        args.format,
        layout,
        &mut |p| {
            bar.transfer(
                "export",
                &Transfer {
                    sessions: p.done,
                    total_sessions: p.total,
                    events: p.events,
                    total_events: p.total_events,
                    bytes: p.bytes,
                    total_bytes: 0,
                    session: p.session,
                },
            );
        },
    );
    bar.finish();
    let report = report?;
    for stale in &report.removed_stale {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "sessionlog: note: removed {}, left by an export that was interrupted",
            human_path(stale)
        );
    }
    for w in &report.warnings {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "sessionlog: warning: {}", human_lines(w));
    }
    // The export is published: a closed stdout from here on only ends the report.
    crate::say!(
        "exported {} session(s), {} event(s), as {} to {}",
        report.sessions,
        report.events,
        args.format,
        human_path(&args.out)
    );
    if layout == ExportLayout::Tree {
        for f in &report.files {
            crate::say!("  {}", human_path(f));
        }
    }
    for id in &report.skipped_empty {
        crate::say!(
            "skipped: session \"{}\" has no events (a dsh SQLite database holds none such)",
            human(id)
        );
    }
    Ok(ExitCode::SUCCESS)
}
