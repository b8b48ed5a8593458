//! Printing the results: markdown tables with ratios to sessionlog, the targets, and
//! the machine description.

use std::fmt::Write as _;
use std::path::Path;

use super::{AppendRow, BenchArgs, DSH_JSONL_EVENTS_PER_SEC, Machine, Results, TargetRow};

/// The peak resident set of this process in KiB (`VmHWM`), 0 when unknown.
pub fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Describes the machine and the disk holding `dir`.
pub fn machine(dir: &Path) -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    Machine {
        nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu,
        disk: disk_of(dir),
        os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
    }
}

/// "device (fs type, rotational/non-rotational)" of the mount holding `dir`.
fn disk_of(dir: &Path) -> String {
    let Ok(dir) = dir.canonicalize() else {
        return "unknown".into();
    };
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return "unknown".into();
    };
    let best = mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3 && dir.starts_with(f[1]))
                .then(|| (f[0].to_owned(), f[1].to_owned(), f[2].to_owned()))
        })
        .max_by_key(|(_, m, _)| m.len());
    let Some((dev, mount, fs)) = best else {
        return "unknown".into();
    };
    let name = dev.rsplit('/').next().unwrap_or_default().to_owned();
    let rota = std::fs::read_to_string(format!("/sys/block/{name}/queue/rotational"))
        .ok()
        .map(|r| {
            if r.trim() == "1" {
                ", rotational flag set"
            } else {
                ", non-rotational"
            }
        })
        .unwrap_or("");
    let size = std::fs::read_to_string(format!("/sys/block/{name}/size"))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(|sectors| format!(", {} GB", sectors * 512 / 1_000_000_000))
        .unwrap_or_default();
    format!("{dev} mounted at {mount} ({fs}{size}{rota})")
}

/// The command line that reproduces a run.
pub fn command_line(args: &BenchArgs) -> String {
    let mut s = String::from("cargo run --release -- bench");
    if args.quick {
        s.push_str(" --quick");
    }
    if !args.only.is_empty() {
        let _ = write!(s, " --only {}", args.only.join(","));
    }
    if !args.peers.is_empty() {
        let _ = write!(s, " --peers {}", args.peers.join(","));
    }
    if args.seed != crate::workload::WorkloadConfig::default().seed {
        let _ = write!(s, " --seed {}", args.seed);
    }
    if args.compaction_every != crate::workload::WorkloadConfig::default().compaction_every {
        let _ = write!(s, " --compaction-every {}", args.compaction_every);
    }
    if let Some(j) = &args.json {
        let _ = write!(s, " --json {}", j.display());
    }
    if let Some(c) = &args.charts {
        let _ = write!(s, " --charts {}", c.display());
    }
    s
}

fn find<'a>(r: &'a Results, peer: &str, sessions: usize, mode: &str) -> Option<&'a AppendRow> {
    r.append
        .iter()
        .find(|a| a.peer == peer && a.sessions == sessions && a.mode == mode)
}

fn ratio(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x >= 10.0 {
        format!("{x:.0}x")
    } else {
        format!("{x:.2}x")
    }
}

fn rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// Checks the targets against a run.
pub fn targets(r: &Results) -> Vec<TargetRow> {
    let mut out = Vec::new();
    let flush = super::peers::Mode::FlushPoints.name();
    for sessions in [64, 1] {
        let row = find(r, "sessionlog", sessions, &flush);
        let goal = 40.0 * DSH_JSONL_EVENTS_PER_SEC;
        out.push(TargetRow {
            name: format!("append, dsh workload, 4 flushes/turn, {sessions} session(s)"),
            target: format!(
                ">= 40x dsh JSONL's {:.1}k events/s = {}/s",
                DSH_JSONL_EVENTS_PER_SEC / 1e3,
                rate(goal)
            ),
            measured: row.map_or("not measured".into(), |a| {
                let jsonl = find(r, "dsh-jsonl", sessions, &flush)
                    .map_or(f64::NAN, |j| a.events_per_sec / j.events_per_sec);
                format!(
                    "{}/s = {} x 4.8k ({} our dsh-jsonl peer)",
                    rate(a.events_per_sec),
                    ratio(a.events_per_sec / DSH_JSONL_EVENTS_PER_SEC),
                    ratio(jsonl)
                )
            }),
            met: row.map(|a| a.events_per_sec >= goal),
        });
    }
    for sessions in [1, 64] {
        for n in [16, 256, 1024] {
            let mode = super::peers::Mode::Batch(n).name();
            let (Some(s), Some(raw), Some(sql)) = (
                find(r, "sessionlog", sessions, &mode),
                find(r, "raw-disk", sessions, &mode),
                find(r, "sqlite-wal-full", sessions, &mode),
            ) else {
                continue;
            };
            out.push(TargetRow {
                name: format!("group commit, batch {n}, {sessions} session(s), vs raw disk"),
                target: ">= 80% of the raw-disk ceiling".into(),
                measured: format!(
                    "{:.0}% ({}/s vs {}/s)",
                    100.0 * s.events_per_sec / raw.events_per_sec,
                    rate(s.events_per_sec),
                    rate(raw.events_per_sec)
                ),
                met: Some(s.events_per_sec >= 0.8 * raw.events_per_sec),
            });
            out.push(TargetRow {
                name: format!("group commit, batch {n}, {sessions} session(s), vs SQLite WAL FULL"),
                target: ">= 10x SQLite WAL FULL".into(),
                measured: format!(
                    "{} ({}/s vs {}/s)",
                    ratio(s.events_per_sec / sql.events_per_sec),
                    rate(s.events_per_sec),
                    rate(sql.events_per_sec)
                ),
                met: Some(s.events_per_sec >= 10.0 * sql.events_per_sec),
            });
        }
    }
    let resume = r
        .resume
        .iter()
        .filter(|x| x.peer == "sessionlog")
        .max_by_key(|x| x.events);
    let resume_ro = r
        .resume
        .iter()
        .filter(|x| x.peer == super::resume::SESSIONLOG_READ_ONLY)
        .max_by_key(|x| x.events);
    out.push(TargetRow {
        name: "resume of a 1M-event session".into(),
        target: "< 10 ms and RSS < 50 MB".into(),
        measured: match resume {
            Some(x) => format!(
                "{} events: {:.1} ms, RSS {:.1} MB ({}){}",
                x.events,
                x.ms,
                x.rss_mb,
                x.kind,
                resume_ro.map_or(String::new(), |y| format!(
                    "; {:.1} ms with a read-only open",
                    y.ms
                ))
            ),
            None => "not measured".into(),
        },
        met: resume
            .filter(|x| x.events >= 1_000_000)
            .map(|x| x.ms < 10.0 && x.rss_mb < 50.0),
    });
    let disk = r.disk.iter().find(|d| d.peer == "sessionlog");
    out.push(TargetRow {
        name: "bytes on disk per event".into(),
        target: "<= 100 bytes".into(),
        measured: disk.map_or("not measured".into(), |d| {
            format!(
                "{:.0} bytes ({} events, {:.0} bytes of JSON each)",
                d.bytes_per_event, d.events, d.json_bytes_per_event
            )
        }),
        met: disk.map(|d| d.bytes_per_event <= 100.0),
    });
    let s = r.latency.iter().find(|x| x.peer == "sessionlog");
    let raw = r.latency.iter().find(|x| x.peer == "raw-disk");
    out.push(TargetRow {
        name: "durable single append p50 (paired with the raw disk)".into(),
        target: "<= 1.2x a raw write + fdatasync".into(),
        measured: match (s, raw) {
            (Some(s), Some(raw)) => format!(
                "{:.0} us vs {:.0} us = {}",
                s.p50_us,
                raw.p50_us,
                ratio(s.p50_us / raw.p50_us)
            ),
            _ => "not measured".into(),
        },
        met: s.zip(raw).map(|(s, raw)| s.p50_us <= 1.2 * raw.p50_us),
    });
    super::written::targets(r, &mut out);
    if !r.gc_space.is_empty() || !r.gc_append.is_empty() {
        super::gc::targets(r, &mut out);
    }
    out
}

/// The whole report as markdown.
pub fn markdown(r: &Results) -> String {
    let mut s = String::new();
    let m = &r.machine;
    let _ = writeln!(
        s,
        "\n## sessionlog bench{}\n",
        if r.quick { " (--quick)" } else { "" }
    );
    let _ = writeln!(
        s,
        "Machine: {} CPUs, {}, {}; disk {}. Workload: dsh sessions, {} events/turn, {:.0} bytes of JSON per event, a compaction every {} turns, seed {:#x}. Total {:.0} s.\n",
        m.nproc,
        m.cpu,
        m.os,
        m.disk,
        r.workload.events_per_turn,
        r.workload.avg_event_json_bytes,
        r.workload.compaction_every,
        r.workload.seed,
        r.seconds
    );
    if !r.append.is_empty() {
        let _ = writeln!(
            s,
            "### Append throughput and latency\n\n`vs sessionlog` = sessionlog's events/s divided by the peer's (above 1: sessionlog is faster). Latency is per durable write (one event, one batch, or one flush group). `sqlite-wal-normal` does not sync at commit (not durable). The raw disk writes the same JSON bytes with one fdatasync per write; with 64 sessions it writes each round of the 64 sessions' groups as one write (perfect coalescing).\n"
        );
        let _ = writeln!(
            s,
            "| sessions | mode | peer | events/s | MB/s | p50 us | p99 us | vs sessionlog |\n|---:|---|---|---:|---:|---:|---:|---:|"
        );
        for a in &r.append {
            let base = find(r, "sessionlog", a.sessions, &a.mode)
                .map_or(f64::NAN, |b| b.events_per_sec / a.events_per_sec);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {:.1} | {:.0} | {:.0} | {} |",
                a.sessions,
                a.mode,
                a.peer,
                rate(a.events_per_sec),
                a.mb_per_sec,
                a.p50_us,
                a.p99_us,
                ratio(base)
            );
        }
        s.push('\n');
    }
    if !r.latency.is_empty() {
        let _ = writeln!(
            s,
            "### Durable single-append latency (1 session, one event per write; the peers take turns write by write, so all see the same disk)\n\n| peer | durable | writes | p50 us | p90 us | p99 us | p50 vs raw disk |\n|---|---|---:|---:|---:|---:|---:|"
        );
        let raw = r
            .latency
            .iter()
            .find(|x| x.peer == "raw-disk")
            .map(|x| x.p50_us);
        for x in &r.latency {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {} |",
                x.peer,
                if x.durable { "yes" } else { "no" },
                x.writes,
                x.p50_us,
                x.p90_us,
                x.p99_us,
                ratio(raw.map_or(f64::NAN, |b| x.p50_us / b))
            );
        }
        s.push('\n');
    }
    if !r.resume.is_empty() {
        let _ = writeln!(
            s,
            "### Resume (open + load one session + fold its surface; child process)\n\n`vs sessionlog` = the peer's time divided by sessionlog's.\n\n| events | peer | measured | ms | peak RSS MB | surface | messages | vs sessionlog |\n|---:|---|---|---:|---:|---:|---:|---:|"
        );
        for x in &r.resume {
            let base = r
                .resume
                .iter()
                .find(|b| b.peer == "sessionlog" && b.events == x.events)
                .map_or(f64::NAN, |b| x.ms / b.ms);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.1} | {:.1} | {} | {} | {} |",
                x.events,
                x.peer,
                x.kind,
                x.ms,
                x.rss_mb,
                x.surface,
                x.messages,
                ratio(base)
            );
        }
        s.push('\n');
    }
    super::written::markdown(r, &mut s);
    if !r.read.is_empty() {
        let _ = writeln!(
            s,
            "### Full read of one session (open + every event as an `Event`)\n\n| events | peer | events/s | vs sessionlog |\n|---:|---|---:|---:|"
        );
        let base = r
            .read
            .iter()
            .find(|x| x.peer == "sessionlog")
            .map(|x| x.events_per_sec);
        for x in &r.read {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                x.events,
                x.peer,
                rate(x.events_per_sec),
                ratio(base.map_or(f64::NAN, |b| b / x.events_per_sec))
            );
        }
        s.push('\n');
    }
    if !r.disk.is_empty() {
        let _ = writeln!(
            s,
            "### Bytes on disk per event\n\n| peer | events | bytes | bytes/event | JSON bytes/event | where |\n|---|---:|---:|---:|---:|---|"
        );
        for d in &r.disk {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.0} | {:.0} | {} |",
                d.peer, d.events, d.bytes, d.bytes_per_event, d.json_bytes_per_event, d.detail
            );
        }
        s.push('\n');
    }
    if !r.reopen.is_empty() {
        let _ = writeln!(
            s,
            "### Reopen (sessionlog): clean, after a crash with the whole log unindexed, and a full index rebuild\n\n| log MB | events | clean open ms | crash reopen ms | frames scanned | events recovered | rebuild ms |\n|---:|---:|---:|---:|---:|---:|---:|"
        );
        for x in &r.reopen {
            let _ = writeln!(
                s,
                "| {:.1} | {} | {:.1} | {:.1} | {} | {} | {:.1} |",
                x.log_bytes as f64 / 1e6,
                x.events,
                x.clean_ms,
                x.crash_ms,
                x.frames_scanned,
                x.events_recovered,
                x.rebuild_ms
            );
        }
        s.push('\n');
    }
    if !r.replay.is_empty() {
        let _ = writeln!(
            s,
            "### Replay of the real dsh logs (fixtures), durable at their flush points, one thread\n\n| peer | sessions | events | flushes | events/s | bytes/event on disk | vs sessionlog |\n|---|---:|---:|---:|---:|---:|---:|"
        );
        let base = r
            .replay
            .iter()
            .find(|x| x.peer == "sessionlog")
            .map(|x| x.events_per_sec);
        for x in &r.replay {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {:.0} | {} |",
                x.peer,
                x.sessions,
                x.events,
                x.writes,
                rate(x.events_per_sec),
                x.bytes_per_event,
                ratio(base.map_or(f64::NAN, |b| b / x.events_per_sec))
            );
        }
        s.push('\n');
    }
    super::gc::markdown(r, &mut s);
    if !r.targets.is_empty() {
        let _ = writeln!(
            s,
            "### Targets\n\n| target | goal | measured | met |\n|---|---|---|---|"
        );
        for t in &r.targets {
            let met = match t.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "not measured",
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                t.name, t.target, t.measured, met
            );
        }
        s.push('\n');
    }
    for n in &r.notes {
        let _ = writeln!(s, "- {n}");
    }
    let _ = writeln!(s, "\nReproduce: `{}`", r.command);
    s
}
