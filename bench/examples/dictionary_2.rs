//! How dictionary 2 (format-spec.md §3.3) was made: dictionary 1's bytes, unchanged, behind
//! entropy tables that zstd's `ZDICT_finalizeDictionary` computed for level 3 from the frame
//! payloads of the dsh workload (the `zstd_levels` dataset: session 0 of the default workload,
//! 50,000 events, one frame per flush group). Prints the bytes before dictionary 1's (the
//! dictionary header: magic, id 2, the entropy tables, the repeat offsets) as the listing in
//! format-spec.md §3.3 and `src/log/dictionary.rs` hold them, and checks that the library's
//! `DICTIONARY_2` is what this makes.
//!
//! ```text
//! cargo run --release -p sessionlog-bench --example dictionary_2
//! ```

use sessionlog::log::dictionary::{DICTIONARY_1, DICTIONARY_2};
use sessionlog::store::Config;
use sessionlog_bench::dataset::{finalize_dictionary, frame_payloads, write_session};
use sessionlog_bench::peers::{SessionlogStyle, SessionlogWriter};
use sessionlog_bench::workload::WorkloadConfig;

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("store");
    let writer =
        SessionlogWriter::open_with(&dir, Config::default(), SessionlogStyle::FramesNoSync)?;
    let turns = WorkloadConfig::default().turns_for_events(50_000);
    let (events, _) = write_session(Box::new(writer), turns)?;
    let payloads = frame_payloads(&dir)?;
    let made = finalize_dictionary(DICTIONARY_1, &payloads, 3, 2)?;
    let header_len = made.len() - DICTIONARY_1.len();
    if made[header_len..] != *DICTIONARY_1 {
        return Err("zstd changed dictionary 1's bytes".into());
    }
    println!(
        "{} frames, {events} events; dictionary 2: {} bytes (header {header_len}), CRC-32 {:#010x}",
        payloads.len(),
        made.len(),
        crc32fast::hash(&made)
    );
    for line in made[..header_len].chunks(16) {
        let hex: Vec<String> = line.iter().map(|b| format!("{b:02x}")).collect();
        println!("{}", hex.join(" "));
    }
    if made == DICTIONARY_2 {
        println!("the library's DICTIONARY_2 is these bytes");
    } else {
        println!("the library's DICTIONARY_2 differs (another zstd version or another dataset)");
    }
    Ok(())
}
