//! Criterion benchmarks of sessionlog's hot paths, on the dsh workload
//! ([`sessionlog_bench::workload`]): frame encode/decode, buffered append, index lookup, full read,
//! derived messages and the surface resume.
//!
//! `cargo bench --bench hot_paths` (add `-- --quick` for a short run). The peers comparison is
//! `sessionlog bench` (see `benches/README.md`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use sessionlog::event::Event;
use sessionlog::log::frame::{self, FrameLimits};
use sessionlog::log::record::{EventRecord, Record};
use sessionlog::store::{Config, Durability, Store};
use sessionlog_bench::workload::{
    SessionGenerator, WorkloadConfig, generate_events, session_header, session_id,
};

/// The records of one flush group (the turn's chunks, assistant message and tool call: 52
/// events, ~17 KB), as a frame payload.
fn group_payload() -> (Vec<u8>, usize) {
    let config = WorkloadConfig {
        turns: 2,
        ..WorkloadConfig::default()
    };
    let group = SessionGenerator::new(&config, 0)
        .max_by_key(|g| g.events.len())
        .map(|g| g.events)
        .unwrap_or_default();
    let n = group.len();
    let mut raw = Vec::new();
    for e in group {
        Record::Event {
            session: 1,
            event: EventRecord::from(e),
        }
        .encode_into(&mut raw)
        .unwrap();
    }
    (raw, n)
}

fn frames(c: &mut Criterion) {
    let (raw, n) = group_payload();
    let mut g = c.benchmark_group("frame");
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function("encode (52-event flush group, zstd 1)", |b| {
        b.iter(|| frame::encode(black_box(&raw), 512, 1))
    });
    let encoded = frame::encode(&raw, 512, 1);
    let limits = FrameLimits::default();
    g.bench_function("decode (52-event flush group)", |b| {
        b.iter(|| frame::decode(black_box(&encoded), &limits).unwrap())
    });
    g.bench_function("decode + records (52-event flush group)", |b| {
        b.iter(|| {
            let (_, payload) = frame::decode(black_box(&encoded), &limits).unwrap();
            Record::decode_all(&payload).unwrap().len()
        })
    });
    g.finish();
}

fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("append");
    let template = generate_events(&WorkloadConfig::default(), 0, 5_800);
    g.throughput(Throughput::Elements(template.len() as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    g.bench_function("buffered, 100 turns, one flush at the end", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().unwrap();
                let store = Store::open(
                    dir.path(),
                    Config::default().durability(Durability::Buffered),
                )
                .unwrap();
                store.create_session(session_header(0)).unwrap();
                (dir, store, template.clone())
            },
            |(dir, store, events)| {
                for e in events {
                    store.append(&session_id(0), e).unwrap();
                }
                store.flush().unwrap();
                (dir, store)
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

/// A closed store holding one generated session of `turns` turns.
fn stored_session(turns: u64) -> (tempfile::TempDir, u64) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        Config::default()
            .durability(Durability::Buffered)
            .batch_bytes(1),
    )
    .unwrap();
    store.create_session(session_header(0)).unwrap();
    let config = WorkloadConfig {
        turns,
        ..WorkloadConfig::default()
    };
    let mut n = 0;
    for group in SessionGenerator::new(&config, 0) {
        n += group.events.len() as u64;
        store.append_batch(&session_id(0), group.events).unwrap();
    }
    store.close().unwrap();
    (dir, n)
}

fn reads(c: &mut Criterion) {
    let (dir, n) = stored_session(175);
    let store = Store::open(dir.path(), Config::default().read_only(true)).unwrap();
    let id = session_id(0);
    let mut g = c.benchmark_group("read");
    let mut seq = 0u64;
    g.throughput(Throughput::Elements(1));
    g.bench_function("index lookup + one event (get)", |b| {
        b.iter(|| {
            seq = (seq + 7919) % n;
            let e: Event = store.get(&id, seq).unwrap().unwrap();
            e.seq
        })
    });
    g.bench_function("derive messages of a 10k-event session", |b| {
        b.iter(|| store.messages(&id).unwrap().len())
    });
    g.bench_function("surface resume (read-only open, handle, messages)", |b| {
        b.iter(|| {
            let store = Store::open(dir.path(), Config::default().read_only(true)).unwrap();
            let session = store.session(&id).unwrap();
            session.messages().unwrap().len()
        })
    });
    g.throughput(Throughput::Elements(n));
    g.sample_size(20);
    g.bench_function("full read of a 10k-event session", |b| {
        b.iter(|| {
            store
                .events(&id, 0..n)
                .unwrap()
                .map(|e| e.unwrap().data.len())
                .sum::<usize>()
        })
    });
    g.finish();
}

criterion_group!(hot_paths, frames, append, reads);
criterion_main!(hot_paths);
