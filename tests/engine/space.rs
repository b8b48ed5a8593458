//! `Store::space` (`sessionlog du`): every byte of every segment file attributed to live
//! sessions, deleted parents that forks pin, dead records and headers, checked against the
//! records the test wrote.

use std::collections::HashMap;

use sessionlog::event::{Event, SessionHeader};
use sessionlog::log::record::{EventRecord, Record};
use sessionlog::store::{Config, Durability, Store};
use sessionlog::{GC_LIVE_FRACTION, SpaceReport};

use crate::common::{read_all, synthetic_event};

const T: i64 = 1_767_225_600_000;

fn config(compress: bool) -> Config {
    Config::default()
        .durability(Durability::Buffered)
        .segment_bytes(if compress { 4 * 1024 } else { 48 * 1024 })
        .compress_threshold(if compress { 64 } else { usize::MAX })
        .invariants(sessionlog::InvariantMode::Off)
}

fn len(record: Record) -> u64 {
    let mut out = Vec::new();
    record.encode_into(&mut out).unwrap();
    out.len() as u64
}

/// The length of every event record in the log by (session number, seq), as the writer
/// wrote it: an `EventStart` record, or an `EventNext` one when the session's previous event
/// is in the same frame (format-spec.md §4.2).
fn event_lens(dir: &std::path::Path) -> HashMap<(u64, u64), u64> {
    use sessionlog::log::frame::{self, FrameLimits};
    let mut out = HashMap::new();
    let mut paths: Vec<_> = std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    for p in paths {
        let bytes = std::fs::read(p).unwrap();
        let mut at = 32;
        while at < bytes.len() {
            if bytes[at..].iter().all(|&b| b == 0) {
                break; // the zero tail a live writer preallocated (format-spec.md §2)
            }
            let (header, payload) = frame::decode(&bytes[at..], &FrameLimits::default()).unwrap();
            let records = Record::decode_all(&payload).unwrap();
            for (k, (offset, record)) in records.iter().enumerate() {
                let end = records.get(k + 1).map_or(payload.len(), |r| r.0 as usize);
                if let Record::Event { session, event } = record {
                    out.insert((*session, event.seq), (end - *offset as usize) as u64);
                }
            }
            at += header.frame_len() as usize;
        }
    }
    out
}

#[test]
fn event_records_are_the_lean_ones() {
    // What `event_lens` finds for a session's events of one frame: an `EventStart` record,
    // then `EventNext` ones (no seq, a time delta), each the size of its encoding.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config(false)).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    let events: Vec<Event> = (0..3).map(|s| synthetic_event(s, 0)).collect();
    store.append_batch("a", events.clone()).unwrap();
    store.flush().unwrap();
    let lens = event_lens(dir.path());
    let number = store.session_info("a").unwrap().incarnation;
    let start = Record::encode_event(number, &events[0]).unwrap().len() as u64;
    assert_eq!(lens[&(number, 0)], start);
    for e in &events[1..] {
        let full = Record::encode_event(number, e).unwrap().len() as u64;
        assert!(lens[&(number, e.seq)] < full, "{lens:?}");
    }
    // Postcard's tag-1 encoding (segments 1-6) is larger still.
    let v1 = len(Record::Event {
        session: number,
        event: EventRecord::from(events[0].clone()),
    });
    assert!(start < v1);
}

/// What the test knows of a session it wrote: its records' encoded sizes.
#[derive(Debug, Clone, Default)]
struct Written {
    number: u64,
    /// Creation or fork record, and the verbatim mark.
    meta: u64,
    /// Encoded size of each own event, by seq (seqs below `seed` are the parent's).
    events: Vec<(u64, u64)>,
    seed: u64,
}

impl Written {
    fn of(store: &Store, id: &str, parent: Option<&Written>) -> Written {
        let info = store.session_info(id).unwrap();
        let header = store.header(id).unwrap();
        let number = info.incarnation;
        let seed = header.seed_length.unwrap_or(0);
        let mut meta = match parent {
            Some(p) => len(Record::ForkSession {
                session: number,
                parent: p.number,
                seed_length: seed,
                header,
            }),
            None => len(Record::CreateSession {
                session: number,
                header,
            }),
        };
        if info.verbatim {
            meta += len(Record::Verbatim { session: number });
        }
        store.flush().unwrap();
        let lens = event_lens(store.dir());
        let events = read_all(store, id)
            .iter()
            .filter(|e| e.seq >= seed)
            .map(|e| (e.seq, lens[&(number, e.seq)]))
            .collect();
        Written {
            number,
            meta,
            events,
            seed,
        }
    }

    fn all(&self) -> u64 {
        self.meta + self.events.iter().map(|(_, n)| n).sum::<u64>()
    }

    fn below(&self, seq: u64) -> u64 {
        self.events
            .iter()
            .filter(|(s, _)| *s < seq)
            .map(|(_, n)| n)
            .sum()
    }

    fn delete(&self) -> u64 {
        len(Record::DeleteSession {
            session: self.number,
        })
    }
}

fn segment_file_sizes(dir: &std::path::Path) -> Vec<u64> {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    files.sort_by_key(|e| e.file_name());
    files.iter().map(|e| e.metadata().unwrap().len()).collect()
}

/// Eight checked sessions (written one after the other, so segments hold few sessions), a
/// verbatim one, a fork of a checked session and one of the verbatim session; half the
/// checked sessions deleted, then both forked parents deleted.
fn build(store: &Store) -> (HashMap<String, Written>, u64, u64) {
    let mut live: HashMap<String, Written> = HashMap::new();
    for i in 0..8u64 {
        let id = format!("s{i}");
        store
            .create_session(SessionHeader::new(id.clone(), 1000 + i))
            .unwrap();
        for seq in 0..40 {
            store.append(&id, synthetic_event(seq, i)).unwrap();
            if seq % 5 == 4 {
                // A frame per turn, so the log spans several segments.
                store.flush().unwrap();
            }
        }
        live.insert(id.clone(), Written::of(store, &id, None));
    }
    let verbatim: Vec<Event> = (0..30)
        .map(|seq| {
            Event::new(
                "x/odd",
                seq,
                T,
                format!(r#"{{"n":{seq},"pad":"{}"}}"#, "v".repeat(200)),
            )
        })
        .collect();
    store
        .create_verbatim(SessionHeader::new("v", 7), verbatim)
        .unwrap();
    live.insert("v".into(), Written::of(store, "v", None));
    // A fork of s1 at a turn boundary (seq 9 ends turn 2), then appends of its own.
    store.fork("s1", Some(9), Some("s1-fork")).unwrap();
    let n = store.len("s1-fork").unwrap();
    for seq in n..n + 5 {
        let mut e = synthetic_event(seq, 99);
        e.seq = seq;
        store.append("s1-fork", e).unwrap();
    }
    let s1 = live["s1"].clone();
    live.insert("s1-fork".into(), Written::of(store, "s1-fork", Some(&s1)));
    let mut child = SessionHeader::new("v-fork", 8);
    child.parent_session = Some("v".into());
    child.seed_length = Some(12);
    store.fork_verbatim("v", child, 12).unwrap();
    let v = live["v"].clone();
    live.insert("v-fork".into(), Written::of(store, "v-fork", Some(&v)));

    let mut dead = 0;
    for id in ["s0", "s2", "s4", "s6"] {
        store.delete_session(id).unwrap();
        let w = live.remove(id).unwrap();
        dead += w.all() + w.delete();
    }
    // The forked parents: pinned up to their forks' seed lengths, the rest dead.
    let mut pinned = 0;
    for id in ["s1", "v"] {
        store.delete_session(id).unwrap();
        let w = live.remove(id).unwrap();
        let seed = if id == "s1" { live["s1-fork"].seed } else { 12 };
        pinned += w.meta + w.below(seed) + w.delete();
        dead += w.all() - w.meta - w.below(seed);
    }
    store.flush().unwrap();
    (live, pinned, dead)
}

fn check_sums(report: &SpaceReport, dir: &std::path::Path) {
    let sizes = segment_file_sizes(dir);
    assert!(
        sizes.len() >= 3,
        "the test wants several segments: {sizes:?}"
    );
    assert_eq!(
        report.segments.iter().map(|s| s.size).collect::<Vec<_>>(),
        sizes
    );
    for s in &report.segments {
        assert_eq!(
            s.live + s.pinned + s.dead + s.unindexed + s.overhead + s.preallocated,
            s.size,
            "segment {}",
            s.number
        );
        assert_eq!(s.damaged, 0);
        assert_eq!(s.unindexed, 0);
    }
    let t = &report.totals;
    assert_eq!(t.size, sizes.iter().sum::<u64>());
    assert_eq!(
        t.live + t.pinned + t.dead + t.overhead + t.preallocated,
        t.size
    );
    assert_eq!(
        t.overhead,
        32 * sizes.len() as u64 + 16 * t.frames,
        "a segment header per file, a frame header per frame"
    );
    assert_eq!(t.dead, t.orphaned + t.unpinned + t.dropped + t.damaged);
    // The GC figures: sealed segments below the threshold, their dead bytes.
    let last = report.segments.last().unwrap().number;
    let mut frees = 0;
    for s in &report.segments {
        let candidate =
            s.number != last && ((s.live + s.pinned) as f64) < GC_LIVE_FRACTION * s.size as f64;
        assert_eq!(report.gc_segments.contains(&s.number), candidate);
        if candidate {
            frees += s.dead;
        }
    }
    assert_eq!(report.gc_frees, frees);
    assert!(!report.gc_segments.is_empty(), "{report:#?}");
}

#[test]
fn space_attributes_every_byte_to_the_records_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config(false)).unwrap();
    let (live, pinned, dead) = build(&store);
    let mut calls = 0;
    let report = store
        .space(&mut |done, total| {
            calls += 1;
            assert!(done <= total);
        })
        .unwrap();
    assert!(calls >= 1);
    check_sums(&report, dir.path());
    let by_id: HashMap<&str, _> = report.sessions.iter().map(|s| (s.id.as_str(), s)).collect();
    // Live sessions: exactly their records; the deleted parents: pinned, with their tails dead.
    assert_eq!(by_id.len(), live.len() + 2, "{by_id:#?}");
    for (id, w) in &live {
        let s = by_id[id.as_str()];
        assert!(!s.deleted);
        assert_eq!(s.number, w.number);
        assert_eq!(s.bytes, w.all(), "session {id}");
        assert_eq!(s.events, w.events.len() as u64, "session {id}");
        assert_eq!(s.inherited_events, w.seed, "session {id}");
        assert_eq!(s.dead_bytes, 0);
    }
    assert_eq!(by_id["v-fork"].inherited_events, 12);
    assert!(by_id["v-fork"].verbatim);
    for id in ["s1", "v"] {
        let s = by_id[id];
        assert!(s.deleted, "{id}");
        assert!(s.bytes > 0 && s.dead_bytes > 0, "{s:?}");
    }
    assert_eq!(by_id["s1"].events, 10);
    assert_eq!(by_id["v"].events, 12);
    assert_eq!(by_id["s1-fork"].parent, Some(by_id["s1"].number));
    let t = &report.totals;
    assert_eq!(t.live, live.values().map(Written::all).sum::<u64>());
    assert_eq!(t.pinned, pinned);
    assert_eq!(by_id["s1"].bytes + by_id["v"].bytes, pinned);
    assert_eq!(t.dead, dead);
    assert_eq!(t.unpinned, by_id["s1"].dead_bytes + by_id["v"].dead_bytes);
    assert_eq!(t.orphaned + t.unpinned, dead);
    assert_eq!(t.frames, store.verify().unwrap().frames);

    // A read-only open sees the same figures, without the zeros the writer had preallocated
    // (cut when it closed).
    drop(store);
    let ro = Store::open(dir.path(), config(false).read_only(true)).unwrap();
    assert_eq!(
        ro.space(&mut |_, _| {}).unwrap(),
        without_preallocated(report)
    );
    drop(ro);

    // Deleting the forks purges the parents: everything they held is dead.
    let store = Store::open(dir.path(), config(false)).unwrap();
    store.delete_session("s1-fork").unwrap();
    store.delete_session("v-fork").unwrap();
    store.flush().unwrap();
    let after = store.space(&mut |_, _| {}).unwrap();
    assert_eq!(after.totals.pinned, 0);
    assert!(after.sessions.iter().all(|s| !s.deleted));
    assert_eq!(
        after.totals.live,
        live.iter()
            .filter(|(id, _)| !id.ends_with("-fork"))
            .map(|(_, w)| w.all())
            .sum::<u64>()
    );
}

#[test]
fn compressed_frames_are_shared_pro_rata_and_still_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config(true)).unwrap();
    let (live, _, _) = build(&store);
    let report = store.space(&mut |_, _| {}).unwrap();
    check_sums(&report, dir.path());
    // Compression shrinks the records, so every session's share is below its raw size.
    let raw: u64 = live.values().map(Written::all).sum();
    assert!(report.totals.live < raw, "{} vs {raw}", report.totals.live);
    let sum: u64 = report
        .sessions
        .iter()
        .filter(|s| !s.deleted)
        .map(|s| s.bytes)
        .sum();
    assert_eq!(sum, report.totals.live);
}

#[test]
fn torn_tail_bytes_are_damaged_and_counted_dead() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), config(false)).unwrap();
        build(&store);
    }
    let sizes = segment_file_sizes(dir.path());
    let last = std::fs::read_dir(dir.path().join("segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .max()
        .unwrap();
    let garbage = [0x5au8; 100];
    let mut bytes = std::fs::read(&last).unwrap();
    bytes.extend_from_slice(&garbage);
    std::fs::write(&last, bytes).unwrap();
    let ro = Store::open(dir.path(), config(false).read_only(true)).unwrap();
    let report = ro.space(&mut |_, _| {}).unwrap();
    assert_eq!(report.totals.damaged, 100);
    assert_eq!(report.totals.size, sizes.iter().sum::<u64>() + 100);
    let s = report.segments.last().unwrap();
    assert_eq!(s.live + s.pinned + s.dead + s.overhead, s.size);
}

/// Forks of forks pass on what they inherit: a deleted grandparent is pinned up to what its
/// deleted child's own fork still reads through it.
#[test]
fn a_chain_of_deleted_forks_pins_exactly_what_the_last_fork_inherits() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config(false)).unwrap();
    let pad = |seq: u64| {
        Event::new(
            "x/odd",
            seq,
            T,
            format!(r#"{{"n":{seq},"pad":"{}"}}"#, "q".repeat(50)),
        )
    };
    store
        .create_verbatim(SessionHeader::new("p", 1), (0..30).map(pad).collect())
        .unwrap();
    let fork = |source: &str, id: &str, seed: u64| {
        let mut h = SessionHeader::new(id, 2);
        h.parent_session = Some(source.into());
        h.seed_length = Some(seed);
        store.fork_verbatim(source, h, seed).unwrap();
    };
    fork("p", "c", 20);
    store
        .append_batch("c", (20..25).map(pad).collect())
        .unwrap();
    fork("c", "g", 22);
    let p = Written::of(&store, "p", None);
    let c = Written::of(&store, "c", Some(&p));
    store.delete_session("p").unwrap();
    store.delete_session("c").unwrap();
    store.flush().unwrap();
    let report = store.space(&mut |_, _| {}).unwrap();
    let by_id: HashMap<&str, _> = report.sessions.iter().map(|s| (s.id.as_str(), s)).collect();
    let (sp, sc, sg) = (by_id["p"], by_id["c"], by_id["g"]);
    assert!(sp.deleted && sc.deleted && !sg.deleted);
    assert_eq!((sp.events, sc.events, sg.events), (20, 2, 0));
    assert_eq!(sp.bytes, p.meta + p.below(20) + p.delete());
    assert_eq!(sp.dead_bytes, p.all() - p.meta - p.below(20));
    assert_eq!(sc.bytes, c.meta + c.below(22) + c.delete());
    assert_eq!(sc.dead_bytes, c.all() - c.meta - c.below(22));
    assert_eq!(report.totals.pinned, sp.bytes + sc.bytes);
    assert_eq!(report.totals.unpinned, sp.dead_bytes + sc.dead_bytes);
    // The last fork goes: the chain is purged, every byte of it dead.
    store.delete_session("g").unwrap();
    store.flush().unwrap();
    let report = store.space(&mut |_, _| {}).unwrap();
    assert!(report.sessions.is_empty());
    let t = &report.totals;
    assert_eq!((t.live, t.pinned), (0, 0));
    assert_eq!(t.dead + t.overhead + t.preallocated, t.size);
}

/// `report` with its preallocated zeros cut, as a closed store has it.
fn without_preallocated(mut report: SpaceReport) -> SpaceReport {
    for s in &mut report.segments {
        s.size -= s.preallocated;
        s.preallocated = 0;
    }
    report.totals.size -= report.totals.preallocated;
    report.totals.preallocated = 0;
    report
}
