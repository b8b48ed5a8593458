//! `sessionlog import` and `sessionlog export`.

use std::path::Path;
use std::process::ExitCode;

use super::output::{human, human_lines, human_path};
use super::progress::Progress;
use super::{CliResult, ExportArgs, ImportArgs, open_for_reading};
use sessionlog::{Config, Store};
use sessionlog::{ExportFormat, ExportLayout};
use sessionlog::{ImportOptions, discover, import_sources};

/// `import [--replay-fixture] [--skip-existing] PATH...`
pub fn import(store_dir: &Path, args: &ImportArgs) -> CliResult {
    // Find and sniff the sources before creating or locking the store.
    let sources = discover(&args.paths)?;
    let store = Store::open(store_dir, Config::default())?;
    let options = ImportOptions {
        replay_fixture: args.replay_fixture,
        skip_existing: args.skip_existing,
        ..ImportOptions::default()
    };
    let bar = Progress::new("import", 0);
    let report = import_sources(&store, &sources, &options, &mut |p| {
        bar.set(p.phase, p.done, p.total, p.session);
    });
    bar.finish();
    let report = report?;
    store.close()?;
    let events: u64 = report.sessions.iter().map(|s| s.events).sum();
    // The import is written and durable: a closed stdout from here on only ends the report.
    crate::say!(
        "imported {} session(s), {events} event(s), from {} file(s)",
        report.sessions.len(),
        sources.len()
    );
    for s in &report.sessions {
        crate::say!(
            "  {}  {} events  {}  {}",
            human(&s.id),
            s.events,
            s.format,
            human_path(&s.file)
        );
    }
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
    let store = open_for_reading(store_dir)?;
    let layout = match args.format {
        ExportFormat::Sqlite(_) => ExportLayout::File,
        _ if args.sessions.len() == 1 && !args.out.is_dir() => ExportLayout::File,
        _ => ExportLayout::Tree,
    };
    let bar = Progress::new("export", 0);
    let report = sessionlog::export(
        &store,
        &args.sessions,
        &args.out,
        args.format,
        layout,
        &mut |p| bar.set("export", p.done, p.total, p.session),
    );
    bar.finish();
    let report = report?;
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
