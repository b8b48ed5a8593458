//! Where sessionlog's bytes on disk go, against dsh's own JSONL+zstd backend, for the bench's
//! `disk` dataset (one session of the dsh workload, one frame per flush group, as the bench's
//! resume section builds it).
//!
//! ```text
//! cargo run --release -p sessionlog-bench --example bytes_per_event -- [EVENTS] [DIR]
//! ```
//!
//! Prints bytes/event of both, and sessionlog's breakdown: segment headers, frame headers,
//! compressed payload, the index, and inside the decompressed payload the record envelopes
//! (everything but the `type` and `data` strings) against the strings themselves.
//! `SKIP_DSH=1` skips the peer (for callgrind); `ZSTD_LEVEL` and `THRESHOLD` set
//! `Config::zstd_level` and `Config::compress_threshold`. See benches/README.md, "Bytes per
//! event".

use std::path::{Path, PathBuf};

use sessionlog::log::frame::{self, FRAME_HEADER_LEN, FrameLimits};
use sessionlog::log::record::Record;
use sessionlog::log::segment::{SEGMENT_HEADER_LEN, SEGMENTS_DIR};
use sessionlog::store::{Config, INDEX_FILE};
use sessionlog_bench::dataset::write_session;
use sessionlog_bench::faithful::DshJsonlWriter;
use sessionlog_bench::peers::{SessionlogStyle, SessionlogWriter, dir_bytes};
use sessionlog_bench::workload::WorkloadConfig;

type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[derive(Default, Debug)]
struct Breakdown {
    segments: u64,
    frames: u64,
    compressed_frames: u64,
    stored: u64,
    raw: u64,
    records: u64,
    strings: u64,
}

fn breakdown(dir: &Path) -> R<Breakdown> {
    let mut b = Breakdown::default();
    let seg_dir = dir.join(SEGMENTS_DIR);
    let mut names: Vec<PathBuf> = std::fs::read_dir(&seg_dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    names.sort();
    let limits = FrameLimits::default();
    for path in names {
        let bytes = std::fs::read(&path)?;
        b.segments += 1;
        let mut at = SEGMENT_HEADER_LEN as usize;
        while at < bytes.len() {
            let (header, payload) = frame::decode(&bytes[at..], &limits)?;
            b.frames += 1;
            if header.flags & frame::FLAG_ZSTD != 0 {
                b.compressed_frames += 1;
            }
            b.stored += u64::from(header.stored_len);
            b.raw += payload.len() as u64;
            for (_, record) in Record::decode_all(&payload)? {
                b.records += 1;
                if let Record::Event { event, .. } = record {
                    b.strings += (event.kind.len() + event.data.len()) as u64;
                }
            }
            at += header.frame_len() as usize;
        }
    }
    Ok(b)
}

fn main() -> R<()> {
    let mut args = std::env::args().skip(1);
    let events: u64 = args.next().map_or(Ok(100_000), |a| a.parse())?;
    let base = match args.next() {
        Some(d) => PathBuf::from(d),
        None => std::env::current_dir()?,
    };
    let tmp = tempfile::tempdir_in(base)?;
    let turns = WorkloadConfig::default().turns_for_events(events);

    let sl = tmp.path().join("sessionlog");
    let mut config = Config::default();
    if let Some(level) = std::env::var("ZSTD_LEVEL")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config = config.zstd_level(level);
    }
    if let Some(t) = std::env::var("THRESHOLD").ok().and_then(|v| v.parse().ok()) {
        config = config.compress_threshold(t);
    }
    let writer = SessionlogWriter::open_with(&sl, config, SessionlogStyle::FramesNoSync)?;
    let (n, json) = write_session(Box::new(writer), turns)?;
    let dsh = tmp.path().join("dsh");
    std::fs::create_dir_all(&dsh)?;
    if std::env::var_os("SKIP_DSH").is_none() {
        write_session(Box::new(DshJsonlWriter::open(&dsh, false)), turns)?;
    }

    let per = |x: u64| x as f64 / n as f64;
    let total = dir_bytes(&sl);
    let index = std::fs::metadata(sl.join(INDEX_FILE)).map_or(0, |m| m.len());
    let b = breakdown(&sl)?;
    let other = total
        - index
        - b.segments * SEGMENT_HEADER_LEN
        - b.frames * FRAME_HEADER_LEN as u64
        - b.stored;
    println!("{n} events, {:.1} bytes of event JSON each", per(json));
    println!("dsh-jsonl-zstd: {:.1} bytes/event", per(dir_bytes(&dsh)));
    println!("sessionlog: {:.1} bytes/event", per(total));
    println!(
        "  index.redb {:.1}; segment headers {:.2} ({} segments); frame headers {:.1} ({} frames, {} compressed, {:.1} events/frame); payload as stored {:.1}; other files {:.2}",
        per(index),
        per(b.segments * SEGMENT_HEADER_LEN),
        b.segments,
        per(b.frames * FRAME_HEADER_LEN as u64),
        b.frames,
        b.compressed_frames,
        n as f64 / b.frames.max(1) as f64,
        per(b.stored),
        per(other)
    );
    println!(
        "  payload raw {:.1} (records {}: type+data strings {:.1}, record envelopes {:.1}, negative when type codes stand for the type strings); compression ratio {:.2}",
        per(b.raw),
        b.records,
        per(b.strings),
        (b.raw as f64 - b.strings as f64) / n as f64,
        b.raw as f64 / b.stored.max(1) as f64
    );
    Ok(())
}
