//! Issue 16's goals, checked against a run (the bench reports misses; it never fails on speed).

use super::peers::Mode;
use super::report::{find, rate, ratio};
use super::{Results, TargetRow};
use sessionlog::store::Config;

/// The peers sessionlog must be ahead of at dsh's flush points and at a sync per event: the
/// JSONL-per-session peers (simple and dsh's own), SQLite (schema 15 and dsh's schema 18, both
/// `synchronous=FULL`) and redb.
const RIVALS: [&str; 5] = [
    "dsh-jsonl",
    "dsh-jsonl-zstd",
    "sqlite-wal-full",
    "dsh-sqlite-18",
    "redb",
];

/// Issue 16's goals.
pub fn issue16(r: &Results) -> Vec<TargetRow> {
    let mut out = Vec::new();
    for mode in [Mode::FlushPoints, Mode::PerEvent] {
        for sessions in [1, 64] {
            let m = mode.name();
            let Some(s) = find(r, "sessionlog", sessions, &m) else {
                continue;
            };
            let rivals: Vec<(&str, f64)> = RIVALS
                .iter()
                .filter_map(|p| find(r, p, sessions, &m).map(|a| (*p, a.events_per_sec)))
                .collect();
            let behind: Vec<&str> = rivals
                .iter()
                .filter(|(_, eps)| s.events_per_sec <= *eps)
                .map(|(p, _)| *p)
                .collect();
            out.push(TargetRow {
                name: format!("append, {m}, {sessions} session(s)"),
                target: "ahead of the JSONL peers, SQLite (15 and 18) and redb".into(),
                measured: format!(
                    "{}/s; vs {}{}",
                    rate(s.events_per_sec),
                    rivals
                        .iter()
                        .map(|(p, eps)| format!("{p} {}", ratio(s.events_per_sec / eps)))
                        .collect::<Vec<_>>()
                        .join(", "),
                    if behind.is_empty() {
                        String::new()
                    } else {
                        format!("; behind {}", behind.join(", "))
                    }
                ),
                met: (!rivals.is_empty()).then_some(behind.is_empty()),
            });
        }
    }
    let vs_raw = |out: &mut Vec<TargetRow>, sessions: usize, mode: Mode, goal: f64, what: &str| {
        let m = mode.name();
        let (Some(s), Some(raw)) = (
            find(r, "sessionlog", sessions, &m),
            find(r, "raw-disk", sessions, &m),
        ) else {
            return;
        };
        out.push(TargetRow {
            name: format!("append, {m}, {sessions} session(s), vs raw disk"),
            target: format!(">= {:.0}% of the raw disk's {what}", goal * 100.0),
            measured: format!(
                "{:.0}% ({}/s vs {}/s)",
                100.0 * s.events_per_sec / raw.events_per_sec,
                rate(s.events_per_sec),
                rate(raw.events_per_sec)
            ),
            met: Some(s.events_per_sec >= goal * raw.events_per_sec),
        });
    };
    for sessions in [1, 64] {
        for n in [256, 1024] {
            vs_raw(&mut out, sessions, Mode::Batch(n), 0.8, "events/s");
        }
    }
    vs_raw(&mut out, 64, Mode::PerEvent, 0.5, "coalesced ceiling");
    if let Some(row) = syncing_floor(r) {
        out.push(row);
    }
    out.push(TargetRow {
        name: "instructions per appended event".into(),
        target: "<= 8k (callgrind of `bench/examples/append_profile.rs`)".into(),
        measured: "not measured by this harness (benches/README.md records the profile)".into(),
        met: None,
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
    let resume = r
        .resume
        .iter()
        .filter(|x| x.peer == "sessionlog")
        .max_by_key(|x| x.events);
    out.push(TargetRow {
        name: "resume of a 1M-event session stays where it is".into(),
        target: "< 10 ms and RSS < 50 MB".into(),
        measured: resume.map_or("not measured".into(), |x| {
            format!(
                "{} events: {:.1} ms, RSS {:.1} MB ({})",
                x.events, x.ms, x.rss_mb, x.kind
            )
        }),
        met: resume
            .filter(|x| x.events >= 1_000_000)
            .map(|x| x.ms < 10.0 && x.rss_mb < 50.0),
    });
    if !r.reopen.is_empty() {
        let worst = r
            .reopen
            .iter()
            .max_by(|a, b| a.crash_ms.total_cmp(&b.crash_ms));
        let slowest = r
            .reopen
            .iter()
            .map(|x| x.log_bytes as f64 / 1e6 / (x.crash_ms / 1e3).max(1e-9))
            .fold(f64::INFINITY, f64::min);
        // The tail a crash leaves is at most the index checkpoint interval (the bench's fill
        // disables checkpoints to measure the scan over the whole log): the reopen of a
        // crashed store of any size is that much scanned at the slowest rate measured.
        let tail_mb = Config::default().checkpoint_bytes as f64 / 1e6;
        let bound_ms = tail_mb / slowest * 1e3;
        out.push(TargetRow {
            name: "reopen after a crash".into(),
            target: "replay >= 200 MB/s; reopen within 50 ms whatever the store's size".into(),
            measured: worst.map_or("not measured".into(), |w| {
                format!(
                    "slowest replay {slowest:.1} MB/s, so {bound_ms:.0} ms for the largest tail a crash leaves ({tail_mb:.1} MB, the index checkpoint interval); longest reopen {:.0} ms ({:.1} MB log, all of it unindexed; the sessions' catch-up at first use {:.0} ms in all)",
                    w.crash_ms,
                    w.log_bytes as f64 / 1e6,
                    w.catch_up_ms
                )
            }),
            met: worst.map(|_| slowest >= 200.0 && bound_ms <= 50.0),
        });
    }
    let disk = r.disk.iter().find(|d| d.peer == "sessionlog");
    let dsh = r.disk.iter().find(|d| d.peer == "dsh-jsonl-zstd");
    out.push(TargetRow {
        name: "bytes on disk per event".into(),
        target: "<= what dsh's JSONL+zstd backend writes for the same workload".into(),
        measured: match (disk, dsh) {
            (Some(d), Some(j)) => format!(
                "{:.0} bytes vs dsh-jsonl-zstd {:.0} ({} events, {:.0} bytes of JSON each)",
                d.bytes_per_event, j.bytes_per_event, d.events, d.json_bytes_per_event
            ),
            (Some(d), None) => format!("{:.0} bytes (dsh-jsonl-zstd not run)", d.bytes_per_event),
            _ => "not measured".into(),
        },
        met: disk
            .zip(dsh)
            .map(|(d, j)| d.bytes_per_event <= j.bytes_per_event),
    });
    out
}

/// The floor under the 64-sessions-syncing row on this machine: every durable append blocks
/// its thread until the writer wakes it, so each event costs one hand-off (measured in this
/// run) on top of sessionlog's own work per event (its CPU per event at 64 sessions' flush
/// points, where a thread blocks once per flush group instead).
fn syncing_floor(r: &Results) -> Option<TargetRow> {
    let handoff = r.machine.handoff?;
    let handoff_cpu = handoff.cpu_us?;
    let own = find(r, "sessionlog", 64, &Mode::FlushPoints.name())?.cpu_us_per_event?;
    let raw = find(r, "raw-disk", 64, &Mode::PerEvent.name())?;
    let cores = r.machine.nproc.max(1) as f64;
    let most = cores * 1e6 / (handoff_cpu + own);
    Some(TargetRow {
        name: "append, sync per event, 64 session(s): the floor on this machine".into(),
        target: "(what the row above can reach here at most)".into(),
        measured: format!(
            "a thread hand-off costs {handoff_cpu:.1} us of CPU ({:.1} us wall); with \
             sessionlog's {own:.1} us per event at 64 sessions' flush points, {} cores allow \
             at most {}/s, {:.0}% of the ceiling",
            handoff.wall_us,
            r.machine.nproc,
            rate(most),
            100.0 * most / raw.events_per_sec
        ),
        met: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handoff::Handoff;
    use crate::{AppendRow, Machine};

    fn row(peer: &str, sessions: usize, mode: Mode, eps: f64, cpu: Option<f64>) -> AppendRow {
        AppendRow {
            peer: peer.into(),
            sessions,
            mode: mode.name(),
            events_per_sec: eps,
            cpu_us_per_event: cpu,
            ..AppendRow::default()
        }
    }

    #[test]
    fn the_syncing_floor_is_the_cores_over_a_hand_off_and_the_own_work() {
        let mut r = Results {
            machine: Machine {
                nproc: 2,
                handoff: Some(Handoff {
                    handoffs: 100,
                    wall_us: 25.0,
                    cpu_us: Some(12.0),
                }),
                ..Machine::default()
            },
            append: vec![
                row("sessionlog", 64, Mode::FlushPoints, 150_000.0, Some(8.0)),
                row("raw-disk", 64, Mode::PerEvent, 400_000.0, Some(1.0)),
            ],
            ..Results::default()
        };
        let floor = syncing_floor(&r).expect("every input is there");
        // 2 cores / (12 + 8) us = 100k events/s, a quarter of the ceiling.
        assert!(
            floor.measured.contains("12.0 us of CPU (25.0 us wall)")
                && floor.measured.contains("8.0 us per event")
                && floor
                    .measured
                    .contains("at most 100.0k/s, 25% of the ceiling"),
            "{}",
            floor.measured
        );
        assert_eq!(floor.met, None);
        // Without the hand-off's CPU time there is no floor to state.
        r.machine.handoff = r.machine.handoff.map(|h| Handoff { cpu_us: None, ..h });
        assert!(syncing_floor(&r).is_none());
    }
}
