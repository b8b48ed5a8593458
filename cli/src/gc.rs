//! `sessionlog gc [--erase] [--dry-run]`: segment GC (format-spec.md §11). Prints what a GC
//! would free, then (without `--dry-run`) does it: sealed segments mostly holding deleted
//! sessions are compacted in place, and the space comes back. With `--erase` (and for
//! `sessionlog delete --erase`), every deleted session no fork reads is erased (§11.6).

use std::path::Path;
use std::process::ExitCode;

use super::output::human_path;
use super::progress::Progress;
use super::{CliResult, check_is_store};
use sessionlog::{Config, EraseError, GcOptions, GcReport, Store};

/// `gc [--erase] [--dry-run]`
pub fn gc(store_dir: &Path, dry_run: bool, erase: bool) -> CliResult {
    check_is_store(store_dir)?;
    let store = match Store::open(store_dir, Config::default()) {
        Ok(store) => store,
        Err(sessionlog::OpenError::Io { source, .. })
            if dry_run && source.kind() == std::io::ErrorKind::ReadOnlyFilesystem =>
        {
            return Err(crate::advice::CliMessage(format!(
                "{} is on a read-only file system and `gc` opens it for writing, even to plan; `sessionlog du` reads it as it is and shows what a GC would free",
                human_path(store_dir)
            ))
            .into());
        }
        Err(e) => return Err(e.into()),
    };
    let options = GcOptions::default().erase(erase);
    let plan = run(&store, options.dry_run(true), "planning")?;
    describe(&plan, "would free")?;
    if erase {
        if dry_run {
            store.close()?;
            return Ok(ExitCode::SUCCESS);
        }
        let done = run(&store, options, "erasing")?;
        store.close()?;
        erased(store_dir, &done)?;
        return Ok(ExitCode::SUCCESS);
    }
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

/// `delete --erase SESSION...` (the ids exist: checked by the caller).
pub fn erase(store: Store, sessions: &[String]) -> CliResult {
    let ids: Vec<&str> = sessions.iter().map(String::as_str).collect();
    let mut bar: Option<Progress> = None;
    let result = store.erase(&ids, &mut |done, total| {
        bar.get_or_insert_with(|| Progress::new("erase", total))
            .set("erase", done, total, "erasing");
    });
    drop(bar);
    let report = match result {
        Ok(r) => r,
        Err(EraseError::ForksRead { id, forks }) => {
            return Err(format!(
                "not erased: forks read the events of \"{id}\" ({}); nothing was deleted. Name them too (`sessionlog delete --erase {id} {}`), or delete without --erase (the forks keep reading it)",
                forks.join(", "),
                forks.join(" ")
            )
            .into());
        }
        Err(EraseError::Gc(e)) => {
            return Err(format!(
                "deleted {}, but erasing their bytes failed: {e}; run `sessionlog gc --erase` to finish the erase",
                sessions.join(", ")
            )
            .into());
        }
        Err(e) => return Err(e.into()),
    };
    let dir = store.dir().to_path_buf();
    store.close()?;
    for id in sessions {
        crate::say!("deleted and erased {id}");
    }
    erased(&dir, &report)?;
    Ok(ExitCode::SUCCESS)
}

fn erased(store_dir: &Path, r: &GcReport) -> Result<(), Box<dyn std::error::Error>> {
    crate::say!(
        "erased {} deleted session(s) from {}: {} records dropped from {}, index file rewritten; {} -> {} bytes of segments",
        r.sessions_erased,
        human_path(store_dir),
        r.records_dropped,
        segments(&r.compacted),
        r.size_before,
        r.size_after
    );
    Ok(())
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
    if r.erase {
        crate::say!(
            "gc --erase {verb} {}: {} deleted session(s) to erase, {} records in {}, then the index file is rewritten",
            human_bytes(r.freed),
            r.sessions_erased,
            r.records_dropped,
            segments(&r.compacted)
        );
    } else if r.compacted.is_empty() {
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
