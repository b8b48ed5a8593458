//! `sessionlog delete SESSION...` and `sessionlog retain`: removing sessions by name or by a
//! retention policy. A removed session's bytes stay in the segments (`sessionlog du` shows
//! them as dead) until `sessionlog gc` compacts them.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;
use sessionlog::{Config, Retention, Store};

use super::output::{human, json_text};
use super::{CliResult, check_is_store};

/// `sessionlog retain`.
#[derive(Debug, Args)]
pub struct RetainArgs {
    /// Evict sessions idle longer than this (last event's time): e.g. 30d, 12h, 90m, 45s.
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub max_idle: Option<u64>,
    /// Keep the sessions' total data bytes at or below this: e.g. 10GiB, 500MB, 4096.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_size: Option<u64>,
    /// Keep at most this many sessions.
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<usize>,
    /// Never evict this session (repeatable).
    #[arg(long, value_name = "SESSION")]
    pub pin: Vec<String>,
    /// Print what would be evicted; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON (one array of evictions).
    #[arg(long)]
    pub json: bool,
}

/// `delete SESSION...`: deletes each named session (all must exist: nothing is deleted
/// otherwise).
pub fn delete(store_dir: &Path, sessions: &[String], erase: bool) -> CliResult {
    check_is_store(store_dir)?;
    let store = Store::open(store_dir, Config::default())?;
    let sessions: Vec<String> = sessions
        .iter()
        .map(|id| crate::output::session_id(&store, id))
        .collect();
    let sessions = &sessions[..];
    let missing: Vec<&String> = sessions
        .iter()
        .filter(|id| store.session_info(id).is_none())
        .collect();
    if let Some(first) = missing.first() {
        let erased_before = if erase {
            " (a session deleted before is erased by `sessionlog gc --erase`, which erases every deleted session no fork reads)"
        } else {
            ""
        };
        return Err(format!(
            "no session \"{}\" in the store ({} of the {} named are missing); nothing was deleted: `sessionlog list` shows the ids{erased_before}",
            human(first),
            missing.len(),
            sessions.len()
        )
        .into());
    }
    if erase {
        return super::gc::erase(store, sessions);
    }
    for id in sessions {
        store.delete_session(id)?;
        crate::say!("deleted {}", human(id));
    }
    store.close()?;
    Ok(ExitCode::SUCCESS)
}

/// `retain [--max-idle AGE] [--max-size SIZE] [--max-sessions N] [--pin ID]... [--dry-run]`
pub fn retain(store_dir: &Path, args: &RetainArgs) -> CliResult {
    check_is_store(store_dir)?;
    let mut policy = Retention::default();
    if let Some(ms) = args.max_idle {
        policy = policy.max_idle_ms(ms);
    }
    if let Some(bytes) = args.max_size {
        policy = policy.max_bytes(bytes);
    }
    if let Some(n) = args.max_sessions {
        policy = policy.max_sessions(n);
    }
    for id in &args.pin {
        policy = policy.pin(id.clone());
        // Also the id `list` printed this as (control characters escaped): pinning one that
        // is not in the store protects nothing and evicts nothing.
        if let Some(listed) = crate::output::unhuman(id) {
            policy = policy.pin(listed);
        }
    }
    if policy.is_unlimited() {
        return Err(
            "retain needs a limit: pass --max-idle AGE, --max-size SIZE or --max-sessions N".into(),
        );
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let evictions = if args.dry_run {
        let store = Store::open_reader(store_dir)?;
        store.plan_retention(&policy, now)
    } else {
        let store = Store::open(store_dir, Config::default())?;
        let done = store.apply_retention(&policy, now, &mut |_| {})?;
        store.close()?;
        if !args.json {
            for e in &done {
                crate::say!(
                    "evicted {} ({}: {} events, {} data bytes, last active {})",
                    human(&e.id),
                    e.reason,
                    e.events,
                    e.data_bytes,
                    crate::iso_time(e.last_activity)
                );
            }
        }
        done
    };
    if args.json {
        let items: Vec<serde_json::Value> = evictions
            .iter()
            .map(|e| {
                serde_json::json!({
                    "id": e.id,
                    "reason": e.reason.to_string(),
                    "events": e.events,
                    "dataBytes": e.data_bytes,
                    "lastActivity": e.last_activity,
                    "evicted": !args.dry_run,
                })
            })
            .collect();
        crate::say!(
            "{}",
            json_text(&serde_json::Value::Array(items).to_string())
        );
    } else if args.dry_run {
        for e in &evictions {
            crate::say!(
                "would evict {} ({}: {} events, {} data bytes, last active {})",
                human(&e.id),
                e.reason,
                e.events,
                e.data_bytes,
                crate::iso_time(e.last_activity)
            );
        }
        crate::say!("{} session(s) would be evicted", evictions.len());
    } else {
        crate::say!(
            "{} session(s) evicted (their bytes stay in the segments until `sessionlog gc`; `sessionlog du` shows them as dead)",
            evictions.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// An age or an interval: a number with a unit `ms`, `s`, `m`, `h` or `d` (milliseconds).
pub(crate) fn parse_age(s: &str) -> Result<u64, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("\"{s}\" is not a duration such as 30d, 12h, 90m, 1s or 500ms"))?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "\"{s}\": the unit must be ms, s, m, h or d (e.g. 30d or 1s)"
            ));
        }
    };
    n.checked_mul(ms)
        .ok_or_else(|| format!("\"{s}\" is too long a duration"))
}

/// A size: a number of bytes, optionally with a unit `K`, `KB`, `KiB`, `M`, `MB`, `MiB`, `G`,
/// `GB`, `GiB`, `T`, `TB`, `TiB` (decimal without `i`, binary with it; `K`/`M`/`G`/`T` alone
/// are binary).
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("\"{s}\" is not a size such as 10GiB, 500MB or 4096"))?;
    let factor: u64 = match unit {
        "" | "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        _ => {
            return Err(format!(
                "\"{s}\": the unit must be B, KB, MB, GB, TB, KiB, MiB, GiB or TiB"
            ));
        }
    };
    n.checked_mul(factor)
        .ok_or_else(|| format!("\"{s}\" is too large a size"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_sizes_parse_with_their_units() {
        assert_eq!(parse_age("30d"), Ok(30 * 86_400_000));
        assert_eq!(parse_age("90m"), Ok(5_400_000));
        assert_eq!(parse_age("500ms"), Ok(500));
        assert!(parse_age("3w").is_err());
        assert!(parse_age("d").is_err());
        assert!(parse_age("99999999999999999999d").is_err());
        assert_eq!(parse_size("10GiB"), Ok(10 << 30));
        assert_eq!(parse_size("500MB"), Ok(500_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("1PB").is_err());
        assert!(parse_size("-1").is_err());
    }
}
