//! `sessionlog gc [--dry-run]`: segment GC (format-spec.md §11). Prints what a GC would free,
//! then (without `--dry-run`) does it: sealed segments mostly holding deleted sessions are
//! compacted in place, and the space comes back.

use std::path::Path;
use std::process::ExitCode;

use super::output::human_path;
use super::progress::Progress;
use super::{CliResult, check_is_store};
use sessionlog::{Config, GcOptions, GcReport, Store};

/// `gc [--dry-run]`
pub fn gc(store_dir: &Path, dry_run: bool) -> CliResult {
    check_is_store(store_dir)?;
    let store = Store::open(store_dir, Config::default())?;
    let plan = run(&store, GcOptions::default().dry_run(true), "planning")?;
    describe(&plan, "would free")?;
    if dry_run || plan.compacted.is_empty() {
        store.close()?;
        return Ok(ExitCode::SUCCESS);
    }
    let done = run(&store, GcOptions::default(), "collecting")?;
    store.close()?;
    crate::say!(
        "freed {} of {} in {}: {} -> {} bytes of segments",
        human_bytes(done.freed),
        human_path(store_dir),
        segments(&done.compacted),
        done.size_before,
        done.size_after
    );
    Ok(ExitCode::SUCCESS)
}

fn run(
    store: &Store,
    options: GcOptions,
    what: &str,
) -> Result<GcReport, Box<dyn std::error::Error>> {
    let mut bar: Option<Progress> = None;
    let report = store.gc(options, &mut |done, total| {
        bar.get_or_insert_with(|| Progress::new("gc", total))
            .set("gc", done, total, what);
    });
    drop(bar);
    Ok(report?)
}

fn describe(r: &GcReport, verb: &str) -> Result<(), Box<dyn std::error::Error>> {
    if r.compacted.is_empty() {
        crate::say!(
            "nothing to collect: no sealed segment is below {}% live",
            (sessionlog::GC_LIVE_FRACTION * 100.0) as u32
        );
    } else {
        crate::say!(
            "gc {verb} {} by compacting {} ({} records dropped, {} bytes of segments left)",
            human_bytes(r.freed),
            segments(&r.compacted),
            r.records_dropped,
            r.size_after
        );
    }
    for (n, why) in &r.skipped {
        crate::say!("segment {n} left alone: {why}");
    }
    Ok(())
}

fn segments(numbers: &[u64]) -> String {
    match numbers.len() {
        1 => "1 segment".to_owned(),
        n => format!("{n} segments"),
    }
}

fn human_bytes(n: u64) -> String {
    format!("{n} bytes ({})", super::progress::bytes(n as f64))
}
