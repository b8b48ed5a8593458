//! `sessionlog import` and `sessionlog export`.

use std::path::Path;
use std::process::ExitCode;

use super::progress::Progress;
use super::{CliResult, ExportArgs, ImportArgs, open_for_reading};
use crate::interop::export::{self, ExportFormat, ExportLayout};
use crate::interop::import::{self, ImportOptions};
use crate::store::{Config, Store};

/// `import [--replay-fixture] [--skip-existing] PATH...`
pub fn import(store_dir: &Path, args: &ImportArgs) -> CliResult {
    // Find and sniff the sources before creating or locking the store.
    let sources = import::discover(&args.paths)?;
    let store = Store::open(store_dir, Config::default())?;
    let options = ImportOptions {
        replay_fixture: args.replay_fixture,
        skip_existing: args.skip_existing,
        ..ImportOptions::default()
    };
    let bar = Progress::new("import", 0);
    let report = import::import_sources(&store, &sources, &options, &mut |p| {
        bar.set(p.phase, p.done, p.total, p.session);
    });
    bar.finish();
    let report = report?;
    store.close()?;
    let events: u64 = report.sessions.iter().map(|s| s.events).sum();
    println!(
        "imported {} session(s), {events} event(s), from {} file(s)",
        report.sessions.len(),
        sources.len()
    );
    for s in &report.sessions {
        println!(
            "  {}  {} events  {}  {}",
            s.id,
            s.events,
            s.format,
            s.file.display()
        );
    }
    for cut in report.cuts() {
        println!("cut: {cut}");
    }
    for s in &report.sessions {
        if !s.non_canonical_lines.is_empty() {
            let lines: Vec<String> = s
                .non_canonical_lines
                .iter()
                .take(10)
                .map(|l| l.to_string())
                .collect();
            println!(
                "note: {}: line(s) {}{} are not in the form dsh writes; a JSONL export of \"{}\" will differ from the file there",
                s.file.display(),
                lines.join(", "),
                if s.non_canonical_lines.len() > 10 {
                    ", …"
                } else {
                    ""
                },
                s.id
            );
        }
    }
    for (id, file) in &report.skipped {
        println!(
            "skipped: session \"{id}\" from {} (already in the store)",
            file.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `export --format F --out PATH [SESSION...]`
pub fn export(store_dir: &Path, args: &ExportArgs) -> CliResult {
    let store = open_for_reading(store_dir)?;
    let layout = match args.format {
        ExportFormat::Sqlite(_) => ExportLayout::File,
        _ if args.sessions.len() == 1 && !args.out.is_dir() => ExportLayout::File,
        _ => ExportLayout::Tree,
    };
    let bar = Progress::new("export", 0);
    let report = export::export(
        &store,
        &args.sessions,
        &args.out,
        args.format,
        layout,
        &mut |p| bar.set("export", p.done, p.total, p.session),
    );
    bar.finish();
    let report = report?;
    println!(
        "exported {} session(s), {} event(s), as {} to {}",
        report.sessions,
        report.events,
        args.format,
        args.out.display()
    );
    if layout == ExportLayout::Tree {
        for f in &report.files {
            println!("  {}", f.display());
        }
    }
    for id in &report.skipped_empty {
        println!("skipped: session \"{id}\" has no events (a dsh SQLite database holds none such)");
    }
    for w in &report.warnings {
        eprintln!("sessionlog: warning: {w}");
    }
    Ok(ExitCode::SUCCESS)
}
