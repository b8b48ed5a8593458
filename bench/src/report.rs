//! Printing the results: markdown tables with ratios to sessionlog, the issue's targets, and
//! the machine description.

use std::fmt::Write as _;
use std::path::Path;

use super::{AppendRow, BenchArgs, Machine, Results, TargetRow};

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

/// User and system CPU seconds of process `pid` so far, all its threads together, including
/// the ones that exited (Linux `/proc/PID/stat`; `None` elsewhere). The kernel counts in
/// ticks of 1/100 s: a span of a second or more resolves to about 1%.
pub fn cpu_seconds(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) start after its last ')';
    // utime and stime are fields 14 and 15 of the line, 11 and 12 after the name.
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace().skip(11);
    let user: f64 = fields.next()?.parse().ok()?;
    let sys: f64 = fields.next()?.parse().ok()?;
    Some((user / 100.0, sys / 100.0))
}

/// This process's user and system CPU seconds so far, every thread together, including the
/// ones that exited (`getrusage`, to the microsecond).
pub fn own_cpu_seconds() -> Option<(f64, f64)> {
    // SAFETY: `getrusage` only writes the `rusage` it is given, which is plain data.
    let usage = unsafe {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return None;
        }
        usage.assume_init()
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some((seconds(usage.ru_utime), seconds(usage.ru_stime)))
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
        handoff: None,
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

pub(crate) fn find<'a>(
    r: &'a Results,
    peer: &str,
    sessions: usize,
    mode: &str,
) -> Option<&'a AppendRow> {
    r.append
        .iter()
        .find(|a| a.peer == peer && a.sessions == sessions && a.mode == mode)
}

pub(crate) fn ratio(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x >= 10.0 {
        format!("{x:.0}x")
    } else {
        format!("{x:.2}x")
    }
}

pub(crate) fn rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// Checks the issues' targets against a run (issue 16's append, resume, reopen and size goals;
/// issue 15's GC measures).
pub fn targets(r: &Results) -> Vec<TargetRow> {
    let mut out = super::targets::issue16(r);
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
    if let Some(h) = &m.handoff {
        let _ = writeln!(
            s,
            "A thread hand-off (one thread waking another, {} times): {:.1} us wall{} each.\n",
            h.handoffs,
            h.wall_us,
            h.cpu_us
                .map(|c| format!(", {c:.1} us of CPU"))
                .unwrap_or_default()
        );
    }
    if !r.append.is_empty() {
        let _ = writeln!(
            s,
            "### Append throughput and latency\n\n`vs sessionlog` = sessionlog's events/s divided by the peer's (above 1: sessionlog is faster). Latency is per durable write (one event, one batch, or one flush group). `sqlite-wal-normal` does not sync at commit (not durable). `CPU us/event` = the process's user + system CPU time over the run (every thread, the kernel's work on its behalf included) per event: on this machine's cores, events/s can be at most the cores divided by it. The raw disk writes the same JSON bytes with one fdatasync per write; with 64 sessions it writes each round of the 64 sessions' groups as one write (perfect coalescing).\n"
        );
        let _ = writeln!(
            s,
            "| sessions | mode | peer | events/s | MB/s | p50 us | p99 us | CPU us/event | bytes/event on disk | vs sessionlog |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"
        );
        for a in &r.append {
            let base = find(r, "sessionlog", a.sessions, &a.mode)
                .map_or(f64::NAN, |b| b.events_per_sec / a.events_per_sec);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {:.1} | {:.0} | {:.0} | {} | {:.0} | {} |",
                a.sessions,
                a.mode,
                a.peer,
                rate(a.events_per_sec),
                a.mb_per_sec,
                a.p50_us,
                a.p99_us,
                a.cpu_us_per_event
                    .map_or_else(|| "n/a".to_owned(), |c| format!("{c:.1}")),
                a.bytes_per_event,
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
            "### Reopen (sessionlog): clean, after a crash with the whole log unindexed, and a full index rebuild\n\n`crash reopen` is the open (the tail scanned and indexed, the sessions left to catch up at their first use); `catch-up` is `Store::catch_up` right after it (every session folded at once: what the first uses cost together).\n\n| log MB | events | clean open ms | crash reopen ms | scan MB/s | catch-up ms | frames scanned | events recovered | rebuild ms |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for x in &r.reopen {
            let _ = writeln!(
                s,
                "| {:.1} | {} | {:.1} | {:.1} | {:.0} | {:.1} | {} | {} | {:.1} |",
                x.log_bytes as f64 / 1e6,
                x.events,
                x.clean_ms,
                x.crash_ms,
                x.log_bytes as f64 / 1e3 / x.crash_ms.max(1e-9),
                x.catch_up_ms,
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
                None => "-",
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
