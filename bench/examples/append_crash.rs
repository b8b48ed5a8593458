//! An outsider's crash check of the append path (issue 16): `append_crash write DIR THREADS
//! EVENTS [durability]` appends the dsh workload from THREADS threads (one session each) and
//! prints `ack SESSION SEQ` after each acknowledged durable append (or after each `flush()`
//! in `buffered` mode, for the events it covered); kill it with `kill -9` at any moment.
//! `append_crash check DIR ACKS` reopens the store and checks that every acknowledged event is
//! there, byte for byte, with nothing after it but a prefix of what was attempted.
//! `DEFERRED=N` sets `Config::deferred_index_entries` for the writer.
//!
//! ```sh
//! cargo build --release -p sessionlog-bench --example append_crash
//! target/release/examples/append_crash write /tmp/s 8 5000 > acks & sleep 1.3; kill -9 $!
//! target/release/examples/append_crash check /tmp/s acks
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use sessionlog::store::{Config, Durability, Store};
use sessionlog_bench::workload::{WorkloadConfig, generate_events, session_header, session_id};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: append_crash write DIR THREADS EVENTS [sync|buffered] | check DIR ACKS";
    match args.get(1).map(String::as_str) {
        Some("write") if args.len() >= 5 => {
            let threads: u64 = args[3].parse().expect(usage);
            let events: u64 = args[4].parse().expect(usage);
            let buffered = args.get(5).map(String::as_str) == Some("buffered");
            write(&args[2], threads, events, buffered);
        }
        Some("check") if args.len() == 4 => check(&args[2], &args[3]),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    }
}

fn write(dir: &str, threads: u64, events: u64, buffered: bool) {
    let durability = if buffered {
        Durability::Buffered
    } else {
        Durability::Sync
    };
    let mut config = Config::default().durability(durability);
    if let Some(entries) = std::env::var("DEFERRED").ok().and_then(|v| v.parse().ok()) {
        config = config.deferred_index_entries(entries);
    }
    let store = Arc::new(Store::open(dir, config).unwrap());
    for t in 0..threads {
        if store.session_info(&session_id(t)).is_none() {
            store.create_session(session_header(t)).unwrap();
        }
    }
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (store, out) = (store.clone(), out.clone());
            std::thread::spawn(move || {
                let id = session_id(t);
                let start = store.len(&id).unwrap();
                let all = generate_events(&WorkloadConfig::default(), t, start + events);
                for (i, e) in all.into_iter().enumerate().skip(start as usize) {
                    let seq = e.seq;
                    match store.append(&id, e) {
                        Ok(r) if buffered && i % 16 == 15 => {
                            store.flush().unwrap();
                            let _ = writeln!(out.lock().unwrap(), "ack {id} {}", r.seq);
                        }
                        Ok(r) if r.durable => {
                            let _ = writeln!(out.lock().unwrap(), "ack {id} {seq}");
                        }
                        Ok(_) => {}
                        Err(err) => {
                            eprintln!("{id} seq {seq}: {err}");
                            return;
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
}

fn check(dir: &str, acks: &str) {
    let mut acked: BTreeMap<String, u64> = BTreeMap::new();
    for line in std::fs::read_to_string(acks).unwrap().lines() {
        let mut parts = line.split(' ');
        if let (Some("ack"), Some(id), Some(Ok(seq))) = (
            parts.next(),
            parts.next(),
            parts.next().map(str::parse::<u64>),
        ) {
            let e = acked.entry(id.to_owned()).or_insert(0);
            *e = (*e).max(seq + 1);
        }
    }
    let store = Store::open(dir, Config::default()).unwrap();
    let mut bad = 0;
    for (id, want) in &acked {
        let len = store.len(id).unwrap();
        let index: u64 = id.rsplit('-').next().unwrap().parse().unwrap();
        let expected = generate_events(&WorkloadConfig::default(), index, len);
        let ok_len = len >= *want;
        let same =
            (0..len).all(|seq| store.get(id, seq).unwrap().as_ref() == expected.get(seq as usize));
        if !ok_len || !same {
            bad += 1;
        }
        println!("{id}: acknowledged {want}, stored {len}, identical {same}");
    }
    let report = store.recovery_report();
    println!("recovery: {report:?}");
    if bad > 0 {
        eprintln!("LOST OR WRONG in {bad} session(s)");
        std::process::exit(1);
    }
    println!("OK: every acknowledged event is stored");
}
