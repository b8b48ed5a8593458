//! `sessionlog du [--json]`: where the bytes of the log go (live and dead bytes per session
//! and per segment, the totals, and what a GC would free). Never modifies the store.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;

use super::output::{human, json_text};
use super::progress::Progress;
use super::{CliResult, open_for_reading};
use sessionlog::{SegmentSpace, SessionSpace, SpaceReport};

/// Ids longer than this are cut (with an ellipsis) in the table.
const ID_WIDTH: usize = 32;

/// `du [--json]`
pub fn du(store_dir: &Path, json: bool) -> CliResult {
    let store = open_for_reading(store_dir)?;
    let mut bar: Option<Progress> = None;
    let report = store.space(&mut |done, total| {
        bar.get_or_insert_with(|| Progress::new("du", total)).set(
            "du",
            done,
            total,
            "reading every frame",
        );
    });
    drop(bar);
    let report = report?;
    if json {
        let text = to_json(&report).to_string();
        crate::say!("{}", json_text(&text));
    } else {
        table(&report)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `id` made safe for a terminal and cut to `width` characters (the last one an ellipsis).
fn cut(id: &str, width: usize) -> String {
    let id = human(id);
    if id.chars().count() <= width {
        return id.into_owned();
    }
    let mut s: String = id.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// Bytes with a binary-prefixed figure beside them when large: `1536 (1.5 KiB)`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{n} B ({v:.1} {})", UNITS[unit])
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".into();
    }
    // Truncated, not rounded: a segment just below the GC threshold never shows as 50.0%.
    let tenths = (u128::from(part) * 1000 / u128::from(whole)) as u64;
    format!("{}.{}%", tenths / 10, tenths % 10)
}

fn state(s: &SessionSpace) -> &'static str {
    if s.deleted { "pinned" } else { "live" }
}

fn table(r: &SpaceReport) -> Result<(), Box<dyn std::error::Error>> {
    let ids: HashMap<u64, &str> = r
        .sessions
        .iter()
        .map(|s| (s.number, s.id.as_str()))
        .collect();
    let shown: Vec<String> = r.sessions.iter().map(|s| cut(&s.id, ID_WIDTH)).collect();
    let w = shown
        .iter()
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(0)
        .max("SESSION".len());
    crate::say!(
        "{:<w$}  {:<6}  {:>9}  {:>9}  {:>12}  {:>10}  PARENT",
        "SESSION",
        "STATE",
        "EVENTS",
        "INHERITED",
        "BYTES",
        "DEAD"
    );
    for (s, id) in r.sessions.iter().zip(&shown) {
        let parent = s
            .parent
            .map(|p| cut(ids.get(&p).copied().unwrap_or("?"), ID_WIDTH))
            .unwrap_or_else(|| "-".into());
        crate::say!(
            "{:<w$}  {:<6}  {:>9}  {:>9}  {:>12}  {:>10}  {}",
            id,
            state(s),
            s.events,
            s.inherited_events,
            s.bytes,
            s.dead_bytes,
            parent
        );
    }
    if r.sessions.is_empty() {
        crate::say!("(no sessions)");
    }
    crate::say!("");
    crate::say!(
        "{:>8}  {:>12}  {:>12}  {:>10}  {:>12}  {:>9}  {:>6}  GC",
        "SEGMENT",
        "SIZE",
        "LIVE",
        "PINNED",
        "DEAD",
        "OVERHEAD",
        "LIVE%"
    );
    for s in &r.segments {
        crate::say!(
            "{:>8}  {:>12}  {:>12}  {:>10}  {:>12}  {:>9}  {:>6}  {}",
            s.number,
            s.size,
            s.live,
            s.pinned,
            s.dead,
            s.overhead,
            percent(s.live + s.pinned + s.unindexed, s.size),
            gc_mark(s)
        );
    }
    if r.segments.is_empty() {
        crate::say!("(no segments)");
    }
    crate::say!("");
    let t = &r.totals;
    let live_sessions = r.sessions.iter().filter(|s| !s.deleted).count();
    crate::say!(
        "total: {} in {} segment(s); {} live session(s), {} deleted but pinned by forks",
        bytes(t.size),
        r.segments.len(),
        live_sessions,
        r.sessions.len() - live_sessions
    );
    crate::say!(
        "  live      {} ({})",
        bytes(t.live),
        percent(t.live, t.size)
    );
    crate::say!(
        "  pinned    {} ({})",
        bytes(t.pinned),
        percent(t.pinned, t.size)
    );
    crate::say!(
        "  dead      {} ({}): deleted or never committed {}, past what forks inherit {}, not indexed {}, damaged or torn {}",
        bytes(t.dead),
        percent(t.dead, t.size),
        t.orphaned,
        t.unpinned,
        t.dropped,
        t.damaged
    );
    if t.unindexed > 0 {
        crate::say!(
            "  unindexed {} (written after this reader's view of the index)",
            bytes(t.unindexed)
        );
    }
    crate::say!(
        "  overhead  {} (segment and frame headers)",
        bytes(t.overhead)
    );
    if t.preallocated > 0 {
        crate::say!(
            "  preallocated {} (zeros the writer wrote ahead of its last frame; cut at close)",
            bytes(t.preallocated)
        );
    }
    crate::say!(
        "gc would free {} ({} segment(s) below {:.0}% live, rewriting {}); `sessionlog gc` collects them",
        bytes(r.gc_frees),
        r.gc_segments.len(),
        r.gc_threshold * 100.0,
        bytes(r.gc_rewrites)
    );
    Ok(())
}

fn gc_mark(s: &SegmentSpace) -> &'static str {
    if s.gc_candidate() {
        "candidate"
    } else if !s.sealed {
        "active"
    } else {
        "-"
    }
}

fn to_json(r: &SpaceReport) -> serde_json::Value {
    let ids: HashMap<u64, &str> = r
        .sessions
        .iter()
        .map(|s| (s.number, s.id.as_str()))
        .collect();
    let sessions: Vec<serde_json::Value> = r
        .sessions
        .iter()
        .map(|s| {
            serde_json::json!({
                "id": s.id,
                "incarnation": s.number,
                "state": state(s),
                "verbatim": s.verbatim,
                "parent": s.parent.map(|p| ids.get(&p).copied().unwrap_or_default()),
                "inheritedEvents": s.inherited_events,
                "events": s.events,
                "records": s.records,
                "bytes": s.bytes,
                "deadBytes": s.dead_bytes,
            })
        })
        .collect();
    let segments: Vec<serde_json::Value> = r
        .segments
        .iter()
        .map(|s| {
            serde_json::json!({
                "number": s.number,
                "size": s.size,
                "live": s.live,
                "pinned": s.pinned,
                "dead": s.dead,
                "damaged": s.damaged,
                "unindexed": s.unindexed,
                "overhead": s.overhead,
                "preallocated": s.preallocated,
                "frames": s.frames,
                "sealed": s.sealed,
                "liveFraction": s.live_fraction(),
                "gcCandidate": s.gc_candidate(),
            })
        })
        .collect();
    let t = &r.totals;
    serde_json::json!({
        "sessions": sessions,
        "segments": segments,
        "totals": {
            "size": t.size,
            "live": t.live,
            "pinned": t.pinned,
            "dead": t.dead,
            "deadOrphaned": t.orphaned,
            "deadUnpinned": t.unpinned,
            "deadDropped": t.dropped,
            "deadDamaged": t.damaged,
            "unindexed": t.unindexed,
            "overhead": t.overhead,
            "preallocated": t.preallocated,
            "frames": t.frames,
            "records": t.records,
        },
        "gc": {
            "threshold": r.gc_threshold,
            "frees": r.gc_frees,
            "rewrites": r.gc_rewrites,
            "segments": r.gc_segments,
            "implemented": false,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_ids_are_cut_with_an_ellipsis() {
        assert_eq!(cut("short", 32), "short");
        let long = "a".repeat(40);
        let c = cut(&long, 32);
        assert_eq!(c.chars().count(), 32);
        assert!(c.ends_with('…'));
        assert_eq!(cut("a\u{1b}b", 32), "a\\u{1b}b");
        assert_eq!(bytes(10), "10 B");
        assert_eq!(bytes(1536), "1536 B (1.5 KiB)");
        assert_eq!(percent(49_999, 100_000), "49.9%");
        assert_eq!(percent(1, 3), "33.3%");
        assert_eq!(percent(5, 5), "100.0%");
        assert_eq!(percent(1, 0), "-");
    }
}
