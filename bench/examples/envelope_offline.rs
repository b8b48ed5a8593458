//! Offline measurement of leaner event-record envelopes (benches/README.md, "Bytes per
//! event"): builds the `bytes_per_event` dataset, then re-encodes every frame payload's records
//! in candidate layouts and compresses each frame alone (dictionary 1, level 3), as the store
//! would, printing frame payload bytes per event for each.
//!
//! ```text
//! cargo run --release -p sessionlog-bench --example envelope_offline -- [EVENTS] [DIR]
//! ```

use std::path::PathBuf;

use sessionlog::event::{KeyOrder, SurfaceOp};
use sessionlog::log::dictionary::DICTIONARY_1;
use sessionlog::log::record::{EventRecord, Record};
use sessionlog::store::Config;
use sessionlog_bench::dataset::{frame_payloads, write_session};
use sessionlog_bench::peers::{SessionlogStyle, SessionlogWriter};
use sessionlog_bench::workload::WorkloadConfig;

type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// dsh's type names, as dictionary 1 lists them.
fn type_names() -> Vec<String> {
    let d = DICTIONARY_1;
    let mut names = Vec::new();
    let mut i = 0;
    while i < d.len() {
        let n = d[i] as usize;
        if (5..40).contains(&n) && i + 1 + n <= d.len() {
            let s = &d[i + 1..i + 1 + n];
            if s.iter()
                .all(|b| b.is_ascii_lowercase() || *b == b'/' || *b == b'-')
                && s.contains(&b'/')
            {
                names.push(String::from_utf8_lossy(s).into_owned());
                i += 1 + n;
                continue;
            }
        }
        i += 1;
    }
    names.dedup();
    names
}

#[derive(Clone, Copy)]
struct Variant {
    name: &'static str,
    /// Type as a code.
    code: bool,
    /// Shape byte instead of the three option/bool bytes and layout.
    shape: bool,
    /// Seq and time as deltas from the session's previous record in the frame.
    delta: bool,
    /// Session omitted in a delta record (same session as the previous event record).
    same_session: bool,
    /// Source seqs as deltas.
    sources: bool,
    /// Type and data strings only.
    strings_only: bool,
}

fn encode(v: Variant, names: &[String], records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut prev: std::collections::HashMap<u64, (u64, i64)> = Default::default();
    let mut last_session = None;
    for r in records {
        let Record::Event { session, event: e } = r else {
            if !v.strings_only {
                r.encode_into(&mut out).unwrap();
            }
            continue;
        };
        if v.strings_only {
            out.extend_from_slice(e.kind.as_bytes());
            out.extend_from_slice(e.data.as_bytes());
            continue;
        }
        if !(v.code || v.shape || v.delta || v.sources) {
            Record::Event {
                session: *session,
                event: e.clone(),
            }
            .encode_into(&mut out)
            .unwrap();
            continue;
        }
        let p = prev.get(session).copied().filter(|p| p.0 + 1 == e.seq);
        match p {
            Some((_, t)) if v.delta => {
                if v.same_session && last_session == Some(*session) {
                    out.push(7);
                } else {
                    out.push(6);
                    varint(&mut out, *session);
                }
                varint(&mut out, zigzag(e.time - t));
            }
            _ => {
                out.push(5);
                varint(&mut out, *session);
                varint(&mut out, e.seq);
                varint(&mut out, zigzag(e.time));
            }
        }
        prev.insert(*session, (e.seq, e.time));
        last_session = Some(*session);
        encode_body(v, names, e, &mut out);
    }
    out
}

fn encode_body(v: Variant, names: &[String], e: &EventRecord, out: &mut Vec<u8>) {
    if v.shape {
        let mut s = 0u64;
        if e.ignorable {
            s |= 1;
        }
        if e.source_event_seqs.is_some() {
            s |= 2;
        }
        if e.surface_op.is_some() {
            s |= 4;
        }
        if e.layout.batch_start {
            s |= 8;
        }
        s |= (e.layout.packing as u64) << 4;
        s |= match e.layout.key_order {
            KeyOrder::Canonical => 0,
            KeyOrder::SurfaceOpFirst => 1,
            KeyOrder::Custom(_) => 2,
        } << 7;
        varint(out, s);
    }
    let code = names.iter().position(|n| *n == e.kind);
    match code {
        Some(c) if v.code => varint(out, c as u64 + 1),
        _ => {
            if v.code {
                out.push(0);
            }
            varint(out, e.kind.len() as u64);
            out.extend_from_slice(e.kind.as_bytes());
        }
    }
    varint(out, e.data.len() as u64);
    out.extend_from_slice(e.data.as_bytes());
    if !v.shape {
        out.push(u8::from(e.source_event_seqs.is_some()));
    }
    if let Some(s) = &e.source_event_seqs {
        varint(out, s.len() as u64);
        let mut prev = e.seq as i64;
        for &x in s {
            if v.sources {
                varint(out, zigzag(x as i64 - prev));
                prev = x as i64;
            } else {
                varint(out, x);
            }
        }
    }
    if !v.shape {
        out.push(u8::from(e.surface_op.is_some()));
    }
    match e.surface_op {
        None => {}
        Some(SurfaceOp::Append) => out.push(0),
        Some(SurfaceOp::Replace { start, end }) => {
            out.push(1);
            varint(out, start);
            varint(out, end);
        }
    }
    if !v.shape {
        out.push(u8::from(e.ignorable));
        out.push(match e.layout.key_order {
            KeyOrder::Canonical => 0,
            KeyOrder::SurfaceOpFirst => 1,
            KeyOrder::Custom(_) => 2,
        });
        out.push(e.layout.packing as u8);
        out.push(u8::from(e.layout.batch_start));
    }
    if let KeyOrder::Custom(keys) = &e.layout.key_order {
        varint(out, keys.len() as u64);
        for k in keys {
            out.push(*k as u8);
        }
    }
}

fn main() -> R<()> {
    let mut args = std::env::args().skip(1);
    let events: u64 = args.next().map_or(Ok(100_000), |a| a.parse())?;
    let base = match args.next() {
        Some(d) => PathBuf::from(d),
        None => std::env::current_dir()?,
    };
    let tmp = tempfile::tempdir_in(base)?;
    let sl = tmp.path().join("sessionlog");
    let writer =
        SessionlogWriter::open_with(&sl, Config::default(), SessionlogStyle::FramesNoSync)?;
    let turns = WorkloadConfig::default().turns_for_events(events);
    let (n, _) = write_session(Box::new(writer), turns)?;
    let mut frames: Vec<Vec<Record>> = Vec::new();
    for payload in frame_payloads(&sl)? {
        frames.push(
            Record::decode_all(&payload)?
                .into_iter()
                .map(|(_, r)| r)
                .collect(),
        );
    }
    let names = type_names();
    eprintln!(
        "{} type names; {} frames, {n} events",
        names.len(),
        frames.len()
    );
    let base = Variant {
        name: "as stored (postcard records)",
        code: false,
        shape: false,
        delta: false,
        same_session: false,
        sources: false,
        strings_only: false,
    };
    let variants = [
        base,
        Variant {
            name: "type as a code",
            code: true,
            ..base
        },
        Variant {
            name: "shape varint for options, flags and layout",
            shape: true,
            ..base
        },
        Variant {
            name: "sourceEventSeqs as deltas",
            sources: true,
            ..base
        },
        Variant {
            name: "seq/time deltas (session kept)",
            delta: true,
            ..base
        },
        Variant {
            name: "code + shape + sources",
            code: true,
            shape: true,
            sources: true,
            ..base
        },
        Variant {
            name: "code + shape + sources + deltas",
            code: true,
            shape: true,
            sources: true,
            delta: true,
            ..base
        },
        Variant {
            name: "all + session omitted when same as previous",
            code: true,
            shape: true,
            sources: true,
            delta: true,
            same_session: true,
            ..base
        },
        Variant {
            name: "type + data strings only",
            strings_only: true,
            ..base
        },
    ];
    let mut zc = zstd::bulk::Compressor::with_dictionary(3, DICTIONARY_1)?;
    for v in variants {
        let (mut raw, mut stored) = (0u64, 0u64);
        for f in &frames {
            let p = encode(v, &names, f);
            raw += p.len() as u64;
            let c = zc.compress(&p)?;
            stored += c.len().min(p.len()) as u64;
        }
        println!(
            "| {} | {:.1} | {:.1} |",
            v.name,
            raw as f64 / n as f64,
            stored as f64 / n as f64
        );
    }
    Ok(())
}
