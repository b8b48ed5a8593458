//! What compressing a flush group costs, by zstd setting, on the payloads the store writes
//! for the dsh workload (benches/README.md, "Where the append path's time goes"): builds the
//! `bytes_per_event` dataset (one frame per flush group), decompresses every frame payload,
//! then compresses each alone with every setting below, as the store would (one kept context
//! per setting), and prints compressed bytes and nanoseconds per event. Then the same for
//! trained dictionaries (zstd's formatted kind, whose entropy tables frames reuse): trained
//! on half of the generated frames, measured on the other half and on the real dsh logs
//! beside the repository (skipped when absent).
//!
//! ```text
//! cargo run --release -p sessionlog-bench --example zstd_levels -- [EVENTS]
//! ```
//!
//! Wall-clock times of one process on one core, for comparing the settings with each other
//! (not a benchmark against peers).

use std::time::Instant;

use sessionlog::log::dictionary::{DICTIONARY_1, DICTIONARY_2};
use sessionlog::store::Config;
use sessionlog_bench::dataset::{finalize_dictionary, frame_payloads, write_session};
use sessionlog_bench::peers::Writer;
use sessionlog_bench::peers::{SessionlogStyle, SessionlogWriter};
use sessionlog_bench::workload::{WorkloadConfig, flush_groups, load_fixture_sessions};
use zstd::zstd_safe::{self, CParameter, Strategy};

type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A row of the first table: its name, zstd parameters and dictionary.
type Setting = (&'static str, Vec<CParameter>, Option<&'static [u8]>);

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
    let level = |l: i32| vec![CParameter::CompressionLevel(l)];
    let two = Some(DICTIONARY_2);
    let settings: Vec<Setting> = vec![
        ("level 3, dictionary 2 (the store)", level(3), two),
        (
            "level 3, dictionary 1 (segments 5-8)",
            level(3),
            Some(DICTIONARY_1),
        ),
        ("level 2, dictionary 2", level(2), two),
        ("level 1, dictionary 2", level(1), two),
        (
            "level 3, dictionary 2, hash/chain 2^14",
            vec![
                CParameter::CompressionLevel(3),
                CParameter::HashLog(14),
                CParameter::ChainLog(14),
            ],
            two,
        ),
        (
            "level 3, dictionary 2, strategy fast",
            vec![
                CParameter::CompressionLevel(3),
                CParameter::Strategy(Strategy::ZSTD_fast),
            ],
            two,
        ),
        ("level 3, no dictionary", level(3), None),
        ("level 1, no dictionary", level(1), None),
        ("level -1, no dictionary", level(-1), None),
    ];
    println!("| setting | bytes/event | ns/event |\n|---|---:|---:|");
    for (name, params, dictionary) in settings {
        let (bytes, ns) = measure(name, &params, dictionary, &payloads, n)?;
        println!("| {name} | {bytes:.1} | {ns:.0} |");
    }
    // Trained dictionaries (zstd's formatted kind, with entropy tables that frames reuse
    // instead of building and writing their own), trained on the odd frames and measured on
    // the even ones: dictionary 1 with entropy tables from them (how dictionary 2 was made,
    // from all frames), and dictionaries whose content zstd also chose from them.
    let (train, test): (Vec<_>, Vec<_>) =
        payloads.iter().enumerate().partition(|(i, _)| i % 2 == 1);
    let train: Vec<&Vec<u8>> = train.into_iter().map(|(_, p)| p).collect();
    let test: Vec<Vec<u8>> = test.into_iter().map(|(_, p)| p.clone()).collect();
    let test_events = n as f64 * test.iter().map(Vec::len).sum::<usize>() as f64 / raw as f64;
    println!(
        "\nTrained dictionaries: trained on the {} odd frames, measured on the {} even ones (~{test_events:.0} events)\n",
        train.len(),
        test.len()
    );
    println!("| setting | bytes/event | ns/event |\n|---|---:|---:|");
    let level3 = level(3);
    let held_out = test_events as u64;
    for (name, dictionary) in [
        ("level 3, dictionary 1", DICTIONARY_1),
        (
            "level 3, dictionary 2 (the store; its tables saw these frames)",
            DICTIONARY_2,
        ),
    ] {
        let (bytes, ns) = measure(name, &level3, Some(dictionary), &test, held_out)?;
        println!("| {name} | {bytes:.1} | {ns:.0} |");
    }
    let finalized = finalize_dictionary(DICTIONARY_1, &train, 3, 2)?;
    let name = "level 3, dictionary 1 + entropy tables of the odd frames";
    let (bytes, ns) = measure(name, &level3, Some(&finalized), &test, held_out)?;
    println!("| {name} | {bytes:.1} | {ns:.0} |");
    let trained: Vec<(usize, Vec<u8>)> = [16 << 10, 64 << 10]
        .into_iter()
        .map(|size| Ok((size, zstd::dict::from_samples(&train, size)?)))
        .collect::<R<_>>()?;
    for (size, dictionary) in &trained {
        for l in [1, 3] {
            let name = format!("level {l}, trained {} KiB", size >> 10);
            let (bytes, ns) = measure(&name, &level(l), Some(dictionary), &test, held_out)?;
            println!("| {name} | {bytes:.1} | {ns:.0} |");
        }
    }
    // The same dictionaries, trained on generated frames, on the real dsh logs' frames (one
    // per flush group): what they would do on data they were not trained on.
    let Some((real, real_events)) = fixture_payloads()? else {
        println!("\n(the real dsh logs are not beside the repository: skipped their table)");
        return Ok(());
    };
    println!(
        "\nThe real dsh logs (fixtures), one frame per flush group: {} frames, {real_events} events\n",
        real.len()
    );
    println!("| setting | bytes/event | ns/event |\n|---|---:|---:|");
    for (name, dictionary) in [
        ("level 3, dictionary 1", DICTIONARY_1),
        ("level 3, dictionary 2 (the store)", DICTIONARY_2),
    ] {
        let (bytes, ns) = measure(name, &level3, Some(dictionary), &real, real_events)?;
        println!("| {name} | {bytes:.1} | {ns:.0} |");
    }
    for (size, dictionary) in &trained {
        let name = format!("level 3, trained {} KiB (on generated frames)", size >> 10);
        let (bytes, ns) = measure(&name, &level3, Some(dictionary), &real, real_events)?;
        println!("| {name} | {bytes:.1} | {ns:.0} |");
    }
    Ok(())
}

/// Compresses every payload alone with one kept context, five rounds: (compressed bytes per
/// event, nanoseconds per event).
fn measure(
    name: &str,
    params: &[CParameter],
    dictionary: Option<&[u8]>,
    payloads: &[Vec<u8>],
    events: u64,
) -> R<(f64, f64)> {
    let mut cctx = zstd_safe::CCtx::create();
    for p in params {
        cctx.set_parameter(*p)
            .map_err(|e| format!("{name}: zstd error {e}"))?;
    }
    if let Some(d) = dictionary {
        cctx.load_dictionary(d)
            .map_err(|e| format!("{name}: zstd error {e}"))?;
        // As the store: no dictionary id in the frame (the frame flag names the dictionary).
        cctx.set_parameter(CParameter::DictIdFlag(false))
            .map_err(|e| format!("{name}: zstd error {e}"))?;
    }
    let mut out = Vec::with_capacity(1 << 20);
    let mut compressed = 0usize;
    let rounds = 5;
    let start = Instant::now();
    for round in 0..rounds {
        for p in payloads {
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
    let events = events.max(1) as f64;
    let ns = start.elapsed().as_nanos() as f64 / (rounds as f64 * events);
    Ok((compressed as f64 / events, ns))
}

/// The frame payloads of the real dsh logs beside the repository (the sessions live appends
/// accept, one frame per flush group) and their event count; `None` when they are absent.
fn fixture_payloads() -> R<Option<(Vec<Vec<u8>>, u64)>> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/dsh-sessions");
    let Some(fixtures) = load_fixture_sessions(&dir)? else {
        return Ok(None);
    };
    let tmp = tempfile::tempdir()?;
    let store = tmp.path().join("store");
    let writer =
        SessionlogWriter::open_with(&store, Config::default(), SessionlogStyle::FramesNoSync)?;
    let mut events = 0u64;
    for (i, f) in fixtures.into_iter().enumerate() {
        let mut header = f.header.clone();
        header.id = format!("fixture-{i}");
        // The fixtures' cwd is a template placeholder (as the replay section sets it).
        header.cwd = Some("/home/agent/project".into());
        writer.create(i, &header)?;
        for group in flush_groups(f.events) {
            let n = group.events.len() as u64;
            // A log live appends refuse (legacy shapes) stops at its first refused group.
            if writer.write(i, group.events).is_err() {
                break;
            }
            events += n;
        }
    }
    Box::new(writer).close()?;
    Ok(Some((frame_payloads(&store)?, events)))
}
