//! `sessionlog replicate --to s3://BUCKET/PREFIX [DIR]` (ships the store's log until SIGINT or
//! SIGTERM, then ships what is acknowledged and exits) and `sessionlog restore --from
//! s3://BUCKET/PREFIX [--at TIME] DIR` (format-spec.md §12).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use clap::Args;
use sessionlog::replicate::{ReplicaStats, ReplicaTarget, ReplicateError, replicate, restore};

use super::output::{human_path, stdout_error};
use super::{CliResult, check_is_store, iso_time};

/// `sessionlog replicate`.
#[derive(Debug, Args)]
pub struct ReplicateArgs {
    /// The replica: s3://BUCKET/PREFIX.
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// Time between shipping rounds (e.g. 1s, 500ms).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// How long the replica keeps manifests (points a restore --at can go back to).
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub retain: Duration,
    /// Ship an index snapshot (a restore then replays only the log after it) once this much
    /// log was shipped since the last one (e.g. 64MiB; 0: never), and when stopping.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = crate::retain::parse_size)]
    pub snapshot_every: u64,
    /// The shortest time between two index snapshots while shipping.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub snapshot_interval: Duration,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
    /// The store to ship (default: --store, $SESSIONLOG_STORE, ./sessionlog-store).
    pub dir: Option<PathBuf>,
}

/// `sessionlog restore`.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The replica: s3://BUCKET/PREFIX.
    #[arg(long, value_name = "URL")]
    pub from: String,
    /// Restore the log as shipped at this time: an RFC 3339 UTC time
    /// (2026-01-01T12:00:00Z, fractions allowed) or milliseconds since the Unix epoch.
    /// Default: the newest manifest.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub at: Option<SystemTime>,
    /// Rebuild the index from the whole log instead of starting from the replica's newest
    /// matching index snapshot.
    #[arg(long)]
    pub no_snapshot: bool,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
    /// The new store (a new or empty directory; default: --store, $SESSIONLOG_STORE).
    pub dir: Option<PathBuf>,
}

/// How to reach the object store (else the AWS_* environment variables).
#[derive(Debug, Args)]
pub struct EndpointArgs {
    /// An S3-compatible server's URL (default: $AWS_ENDPOINT_URL, else AWS); an http:// URL
    /// allows plain HTTP.
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// The region (default: $AWS_REGION, else us-east-1).
    #[arg(long)]
    pub region: Option<String>,
}

fn target(url: &str, e: &EndpointArgs) -> Result<ReplicaTarget, ReplicateError> {
    let mut t = ReplicaTarget::s3(url)?;
    if let Some(endpoint) = &e.endpoint {
        t = t.endpoint(endpoint);
    }
    if let Some(r) = &e.region {
        t = t.region(r);
    }
    Ok(t)
}

/// A duration: a number with a unit `ms`, `s`, `m`, `h` or `d` (as `retain --max-idle`).
fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::retain::parse_age(s).map(Duration::from_millis)
}

/// An RFC 3339 UTC time (`YYYY-MM-DDTHH:MM:SS[.fff]Z`) or epoch milliseconds.
fn parse_time(s: &str) -> Result<SystemTime, String> {
    let bad = || {
        format!(
            "\"{s}\" is not a time: write it as 2026-01-01T12:00:00Z (UTC) or as milliseconds since the Unix epoch"
        )
    };
    let ms: u64 = if s.bytes().all(|b| b.is_ascii_digit()) && !s.is_empty() {
        s.parse().map_err(|_| bad())?
    } else {
        let t = s
            .strip_suffix('Z')
            .or_else(|| s.strip_suffix('z'))
            .ok_or_else(bad)?;
        let (date, time) = t.split_once(['T', 't', ' ']).ok_or_else(bad)?;
        let d: Vec<&str> = date.split('-').collect();
        let (time, frac) = time.split_once('.').unwrap_or((time, ""));
        let h: Vec<&str> = time.split(':').collect();
        if d.len() != 3
            || h.len() != 3
            || frac.len() > 9
            || !frac.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        let num = |x: &str| x.parse::<i64>().map_err(|_| bad());
        let (y, mo, da) = (num(d[0])?, num(d[1])?, num(d[2])?);
        let (hh, mm, ss) = (num(h[0])?, num(h[1])?, num(h[2])?);
        if !(1..=12).contains(&mo)
            || !(1..=31).contains(&da)
            || hh > 23
            || mm > 59
            || ss > 60
            || y < 1970
        {
            return Err(bad());
        }
        // Howard Hinnant's days_from_civil.
        let y2 = if mo <= 2 { y - 1 } else { y };
        let era = y2.div_euclid(400);
        let yoe = y2 - era * 400;
        let mp = (mo + 9) % 12;
        let doy = (153 * mp + 2) / 5 + da - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        let milli = format!("{frac:0<3}")[..3]
            .parse::<i64>()
            .map_err(|_| bad())?;
        u64::try_from(((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000 + milli)
            .map_err(|_| bad())?
    };
    Ok(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}

/// Adds what to run next to a replication error.
fn cli_error(e: ReplicateError, url: &str) -> Box<dyn std::error::Error> {
    let text = e.to_string();
    match e {
        ReplicateError::Remote { .. } | ReplicateError::Client(_) => format!(
            "{text} (is the object store at {url} reachable, and the bucket there? check --endpoint, AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION)"
        )
        .into(),
        _ => text.into(),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn position(stats: &ReplicaStats) -> String {
    format!(
        "segment {} offset {}",
        stats.shipped.segment, stats.shipped.offset
    )
}

fn status_line(stats: &ReplicaStats) -> String {
    let mut line = format!(
        "shipped up to {}; lag {} byte(s), {:.1} s",
        position(stats),
        stats.lag_bytes,
        stats.lag().as_secs_f64()
    );
    if stats.failing > 0
        && let Some(e) = &stats.last_error
    {
        line.push_str(&format!(
            "; failing for {} round(s), retrying: {e}",
            stats.failing
        ));
    }
    line
}

/// `sessionlog replicate`.
pub fn replicate_cmd(default_store: &Path, args: &ReplicateArgs) -> CliResult {
    let dir = args.dir.as_deref().unwrap_or(default_store);
    check_is_store(dir)?;
    let t = target(&args.to, &args.endpoint)
        .map_err(|e| cli_error(e, &args.to))?
        .interval(args.interval)
        .retain(args.retain)
        .snapshot_every(args.snapshot_every)
        .snapshot_interval(args.snapshot_interval);
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    let handle = replicate(dir, t).map_err(|e| cli_error(e, &args.to))?;
    let stats = handle.stats();
    let mut out = std::io::stdout();
    writeln!(
        out,
        "replicating {} to {} every {} ms (replicator {}); Ctrl-C ships what is acknowledged and stops",
        human_path(dir),
        args.to,
        args.interval.as_millis(),
        stats.replicator
    )
    .map_err(stdout_error)?;
    let mut last_print = Instant::now();
    let mut last_line = String::new();
    let mut closed = false;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
        let stats = handle.stats();
        if let Some(Some(e)) = &stats.stopped {
            return Err(format!("replication stopped: {e}").into());
        }
        let line = status_line(&stats);
        // A line when something changed, at most every 5 s (and at once on a failure).
        let due = last_print.elapsed() >= Duration::from_secs(5)
            || (last_line.is_empty() && stats.rounds > 0)
            || (stats.failing == 1 && !last_line.contains("failing"));
        if due && line != last_line && !closed {
            if writeln!(out, "{} {line}", iso_time(now_ms())).is_err() {
                // stdout closed by its reader (`| head -1`): stop as on SIGINT.
                closed = true;
                break;
            }
            last_print = Instant::now();
            last_line = line;
        }
    }
    let _ = out.flush();
    match handle.stop() {
        Ok(stats) => {
            if !closed {
                let _ = writeln!(
                    out,
                    "stopped: shipped up to {} ({} manifest(s), {} part(s), {} byte(s), {} index snapshot(s) uploaded by this run); lag 0",
                    position(&stats),
                    stats.manifests,
                    stats.parts,
                    stats.bytes,
                    stats.snapshots
                );
                if let Some(e) = &stats.snapshot_error {
                    let _ = writeln!(out, "note: the last index snapshot was not shipped: {e}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Err(format!(
            "{} (run `sessionlog replicate --to {} {}` again once the object store answers: it continues from the last manifest)",
            cli_error(e, &args.to),
            args.to,
            human_path(dir)
        )
        .into()),
    }
}

/// `sessionlog restore`.
pub fn restore_cmd(default_store: &Path, args: &RestoreArgs) -> CliResult {
    let dir = args.dir.as_deref().unwrap_or(default_store);
    let t = target(&args.from, &args.endpoint)
        .map_err(|e| cli_error(e, &args.from))?
        .use_snapshots(!args.no_snapshot);
    let report = match restore(&t, args.at, dir) {
        Ok(r) => r,
        Err(ReplicateError::TargetNotEmpty(p)) if !p.is_dir() => {
            return Err(format!(
                "{} is a file: restore into a new or empty directory",
                human_path(&p)
            )
            .into());
        }
        Err(ReplicateError::TargetNotEmpty(p)) => {
            return Err(format!(
                "{} is not empty: restore into a new or empty directory (a restore that was interrupted is resumed by running the same command again)",
                human_path(&p)
            )
            .into());
        }
        Err(e) => {
            return Err(format!(
                "{} (an interrupted restore resumes: run the same `sessionlog restore` again)",
                cli_error(e, &args.from)
            )
            .into());
        }
    };
    let mut out = std::io::stdout();
    writeln!(
        out,
        "restored {} as of {} ({}): {} segment(s), {} byte(s) ({} downloaded, {} segment(s) resumed), up to segment {} offset {}",
        human_path(dir),
        iso_time(report.time_ms as i64),
        report.manifest,
        report.segments,
        report.bytes,
        report.downloaded,
        report.resumed_segments,
        report.position.segment,
        report.position.offset
    )
    .map_err(stdout_error)?;
    for note in &report.notes {
        writeln!(out, "note: {note}").map_err(stdout_error)?;
    }
    let index = match (&report.snapshot, report.snapshot_position) {
        (Some(s), Some(p)) => format!(
            "index from snapshot {s} (segment {} offset {}), caught up over {} frame(s),",
            p.segment, p.offset, report.frames_replayed
        ),
        _ => format!(
            "index rebuilt from the log ({} frame(s)),",
            report.frames_replayed
        ),
    };
    writeln!(
        out,
        "{index} verified: {} session(s), {} event(s) ({:.1} s download, {:.1} s index, {:.1} s verify)",
        report.sessions,
        report.events,
        report.download_time.as_secs_f64(),
        report.open_time.as_secs_f64(),
        report.verify_time.as_secs_f64()
    )
    .map_err(stdout_error)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations() {
        let ms = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0)
        };
        assert_eq!(
            parse_time("2026-01-01T00:00:00Z").map(ms),
            Ok(1_767_225_600_000)
        );
        assert_eq!(
            parse_time("2000-02-29T00:00:00.123Z").map(ms),
            Ok(951_782_400_123)
        );
        assert_eq!(parse_time("1767225600000").map(ms), Ok(1_767_225_600_000));
        for bad in [
            "",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("2x").is_err());
    }
}
