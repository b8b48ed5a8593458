//! What compressing a flush group costs, by zstd setting, on the payloads the store writes
//! for the dsh workload (benches/README.md, "Where the append path's time goes"): builds the
//! `bytes_per_event` dataset (one frame per flush group), decompresses every frame payload,
//! then compresses each alone with every setting below, as the store would (one kept context
//! per setting), and prints compressed bytes and nanoseconds per event.
//!
//! ```text
//! cargo run --release -p sessionlog-bench --example zstd_levels -- [EVENTS]
//! ```
//!
//! Wall-clock times of one process on one core, for comparing the settings with each other
//! (not a benchmark against peers).

use std::time::Instant;

use sessionlog::log::dictionary::DICTIONARY_1;
use sessionlog::store::Config;
use sessionlog_bench::dataset::{frame_payloads, write_session};
use sessionlog_bench::peers::{SessionlogStyle, SessionlogWriter};
use sessionlog_bench::workload::WorkloadConfig;
use zstd::zstd_safe::{self, CParameter, Strategy};

type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The decompressed frame payloads of the dataset and its event count.
fn payloads(events: u64) -> R<(Vec<Vec<u8>>, u64)> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("store");
    let writer =
        SessionlogWriter::open_with(&dir, Config::default(), SessionlogStyle::FramesNoSync)?;
    let turns = WorkloadConfig::default().turns_for_events(events);
    let (n, _) = write_session(Box::new(writer), turns)?;
    Ok((frame_payloads(&dir)?, n))
}

fn main() -> R<()> {
    let events: u64 = std::env::args().nth(1).map_or(Ok(50_000), |a| a.parse())?;
    let (payloads, n) = payloads(events)?;
    let raw: usize = payloads.iter().map(Vec::len).sum();
    println!(
        "{} frames, {n} events: {:.0} B/event before compression, {:.0} B/frame",
        payloads.len(),
        raw as f64 / n as f64,
        raw as f64 / payloads.len() as f64
    );
    let settings: Vec<(&str, Vec<CParameter>, bool)> = vec![
        (
            "level 3, dictionary (the store)",
            vec![CParameter::CompressionLevel(3)],
            true,
        ),
        (
            "level 2, dictionary",
            vec![CParameter::CompressionLevel(2)],
            true,
        ),
        (
            "level 1, dictionary",
            vec![CParameter::CompressionLevel(1)],
            true,
        ),
        (
            "level 3, dictionary, hash/chain 2^14",
            vec![
                CParameter::CompressionLevel(3),
                CParameter::HashLog(14),
                CParameter::ChainLog(14),
            ],
            true,
        ),
        (
            "level 3, dictionary, strategy fast",
            vec![
                CParameter::CompressionLevel(3),
                CParameter::Strategy(Strategy::ZSTD_fast),
            ],
            true,
        ),
        (
            "level 3, no dictionary",
            vec![CParameter::CompressionLevel(3)],
            false,
        ),
        (
            "level 1, no dictionary",
            vec![CParameter::CompressionLevel(1)],
            false,
        ),
        (
            "level -1, no dictionary",
            vec![CParameter::CompressionLevel(-1)],
            false,
        ),
    ];
    println!("| setting | bytes/event | ns/event |\n|---|---:|---:|");
    for (name, params, dictionary) in settings {
        let mut cctx = zstd_safe::CCtx::create();
        for p in &params {
            cctx.set_parameter(*p)
                .map_err(|e| format!("{name}: zstd error {e}"))?;
        }
        if dictionary {
            cctx.load_dictionary(DICTIONARY_1)
                .map_err(|e| format!("{name}: zstd error {e}"))?;
        }
        let mut out = Vec::with_capacity(1 << 20);
        let mut compressed = 0usize;
        let rounds = 5;
        let start = Instant::now();
        for round in 0..rounds {
            for p in &payloads {
                out.clear();
                out.reserve(zstd_safe::compress_bound(p.len()));
                let k = cctx
                    .compress2(&mut out, p)
                    .map_err(|e| format!("{name}: zstd error {e}"))?;
                if round == 0 {
                    compressed += k;
                }
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / (rounds as f64 * n as f64);
        println!("| {name} | {:.1} | {ns:.0} |", compressed as f64 / n as f64);
    }
    Ok(())
}
