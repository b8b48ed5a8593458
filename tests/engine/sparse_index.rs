//! The sparse `events` index (format-spec.md §5): one entry per run of a session's consecutive
//! events in one frame; reads walk the frame from the run's first record.

use std::path::Path;

use crate::common::{config, read_all, synthetic_event};
use sessionlog::error::{IndexError, OpenError, ReadError};
use sessionlog::event::{Event, SessionHeader};
use sessionlog::index::{EVENTS, INDEX_FORMAT_VERSION, Index, META, Run, event_key, run_value};
use sessionlog::store::{Durability, Store};

/// The `events` entries of the index at `dir`: (session number, run).
fn runs(dir: &Path) -> Vec<(u64, Run)> {
    Index::open_read_only(&dir.join("index.redb"))
        .unwrap()
        .dump()
        .unwrap()
        .into_iter()
        .filter(|(t, _, _)| t == "events")
        .map(|(_, k, v)| {
            let session = u64::from_be_bytes(k[0..8].try_into().unwrap());
            let first = u64::from_be_bytes(k[8..16].try_into().unwrap());
            (session, Run::decode(first, &v.try_into().unwrap()).unwrap())
        })
        .collect()
}

/// Three sessions appended round-robin, flushed every `per_frame` appends: every frame holds
/// all three sessions' events interleaved. Returns the events per session.
fn interleaved(store: &Store, per_session: u64, per_frame: u64) -> Vec<(String, Vec<Event>)> {
    let mut out: Vec<(String, Vec<Event>)> = (0..3)
        .map(|i| {
            let id = format!("s{i}");
            store
                .create_session(SessionHeader::new(id.clone(), 1))
                .unwrap();
            (id, Vec::new())
        })
        .collect();
    let mut n = 0;
    for seq in 0..per_session {
        for (i, (id, events)) in out.iter_mut().enumerate() {
            let e = synthetic_event(seq, i as u64);
            store.append(id, e.clone()).unwrap();
            events.push(e);
            n += 1;
            if n % per_frame == 0 {
                store.flush().unwrap();
            }
        }
    }
    out
}

#[test]
fn every_seq_of_interleaved_runs_reads_back_and_the_index_is_sparse() {
    let dir = tempfile::tempdir().unwrap();
    let written = {
        let store = Store::open(dir.path(), config(Durability::Buffered)).unwrap();
        let written = interleaved(&store, 200, 45);
        store.close().unwrap();
        written
    };
    // 600 events in 14 frames of 45 appends (15 per session, the last 5): one run per session
    // and frame.
    let entries = runs(dir.path());
    assert_eq!(entries.len(), 14 * 3, "{entries:?}");
    let counts: Vec<u32> = entries.iter().map(|(_, r)| r.count).collect();
    assert_eq!(counts.iter().filter(|&&c| c == 15).count(), 13 * 3);
    assert_eq!(counts.iter().filter(|&&c| c == 5).count(), 3);
    let store = Store::open(dir.path(), config(Durability::Buffered)).unwrap();
    // Reading a whole session decodes each of its 14 frames once.
    let before = store.frames_read();
    assert_eq!(read_all(&store, "s1"), written[1].1);
    assert_eq!(store.frames_read() - before, 14);
    for (id, events) in &written {
        // Every seq on its own (a fresh walk from the run start), backwards.
        for seq in (0..events.len() as u64).rev() {
            assert_eq!(
                store.get(id, seq).unwrap().as_ref(),
                Some(&events[seq as usize]),
                "{id} seq {seq}"
            );
        }
        assert_eq!(&read_all(&store, id), events);
        // Ranges starting and ending inside runs.
        for (from, to) in [(7, 8), (14, 16), (20, 133), (199, 200)] {
            let got: Vec<Event> = store
                .events(id, from..to)
                .unwrap()
                .map(|e| e.unwrap())
                .collect();
            assert_eq!(got, events[from as usize..to as usize], "{id} {from}..{to}");
        }
        assert_eq!(store.get(id, 200).unwrap(), None);
    }
    assert!(store.verify().unwrap().is_clean());
    // A read-only open (no committer) reads the same.
    drop(store);
    let ro = Store::open(dir.path(), config(Durability::Buffered).read_only(true)).unwrap();
    for (id, events) in &written {
        assert_eq!(&read_all(&ro, id), events);
    }
}

#[test]
fn one_run_per_batch_across_many_frames() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    store.create_session(SessionHeader::new("a", 1)).unwrap();
    let mut all = Vec::new();
    let mut batches = 0;
    let mut seq = 0;
    for size in (1..=40).cycle().take(120) {
        let batch: Vec<Event> = (seq..seq + size).map(|s| synthetic_event(s, 7)).collect();
        seq += size;
        all.extend(batch.clone());
        store.append_batch("a", batch).unwrap();
        batches += 1;
    }
    store.close().unwrap();
    let entries = runs(dir.path());
    // One run per batch (one frame each); a batch never splits across segments.
    assert_eq!(entries.len(), batches);
    let mut next = 0;
    for (session, run) in &entries {
        assert_eq!(*session, 1);
        assert_eq!(run.first_seq, next, "runs tile the seqs");
        next = run.end();
    }
    assert_eq!(next, all.len() as u64);
    let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    assert_eq!(read_all(&store, "a"), all);
    for s in [0, 1, 2, 39, 40, 41, 500, all.len() as u64 - 1] {
        assert_eq!(store.get("a", s).unwrap().as_ref(), Some(&all[s as usize]));
    }
    assert!(store.verify().unwrap().is_clean());
}

#[test]
fn delete_session_purges_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), config(Durability::Buffered)).unwrap();
        interleaved(&store, 100, 30);
        store.delete_session("s1").unwrap();
        store.close().unwrap();
    }
    let entries = runs(dir.path());
    assert!(entries.iter().any(|(s, _)| *s == 1));
    assert!(entries.iter().any(|(s, _)| *s == 3));
    assert!(
        entries.iter().all(|(s, _)| *s != 2),
        "s1 (number 2) still has runs"
    );
    let store = Store::open(dir.path(), config(Durability::Buffered)).unwrap();
    assert_eq!(store.len("s1"), None);
    assert_eq!(read_all(&store, "s2").len(), 100);
    assert!(store.verify().unwrap().is_clean());
    // A rebuild from the log gives the same runs.
    drop(store);
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    Store::open(dir.path(), config(Durability::Buffered))
        .unwrap()
        .close()
        .unwrap();
    assert_eq!(runs(dir.path()), entries);
}

/// Overwrites (or adds) one `events` entry directly in the index file.
fn put_run(dir: &Path, session: u64, run: Run) {
    let db = redb::Database::open(dir.join("index.redb")).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut t = txn.open_table(EVENTS).unwrap();
        t.insert(
            &event_key(session, run.first_seq),
            &run_value(session, &run),
        )
        .unwrap();
    }
    txn.commit().unwrap();
}

#[test]
fn a_run_that_claims_seqs_its_frame_lacks_is_corruption_on_read_and_in_verify() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Event> = (0..6).map(|s| synthetic_event(s, 0)).collect();
    {
        let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
        store.create_session(SessionHeader::new("a", 1)).unwrap();
        store.append_batch("a", events[0..3].to_vec()).unwrap();
        store.append_batch("a", events[3..6].to_vec()).unwrap();
        store.close().unwrap();
    }
    let entries = runs(dir.path());
    assert_eq!(entries.len(), 2);
    let (first, second) = (entries[0].1, entries[1].1);
    assert_eq!((first.first_seq, first.count), (0, 3));
    // The second run now claims its seqs are in the first frame.
    put_run(
        dir.path(),
        1,
        Run {
            location: first.location,
            ..second
        },
    );
    let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    assert_eq!(store.get("a", 2).unwrap().as_ref(), Some(&events[2]));
    match store.get("a", 4) {
        Err(ReadError::Corruption { position, detail }) => {
            assert_eq!(position, first.location.position());
            assert!(detail.contains("seq 4"), "{detail}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    let report = store.verify().unwrap();
    // Seqs 3..6 each point at the wrong frame; the cross-check against an index rebuilt from
    // the log names the entry; replaying the session to check its surface cannot read seq 3.
    assert_eq!(report.problems.len(), 5, "{report:?}");
    assert!(report.problems[0].contains("seq 3"), "{report:?}");
    assert!(
        report.problems[3].contains("index disagrees with the log at events"),
        "{report:?}"
    );
    drop(store);

    // A run whose count reaches past its frame: the seq past the frame's records is corruption.
    put_run(dir.path(), 1, second);
    put_run(dir.path(), 1, Run { count: 5, ..first });
    let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    // Seqs 3 and 4 resolve to the second run (the larger key), which is right; only the
    // cross-check sees that the first entry claims seqs its frame lacks.
    assert_eq!(read_all(&store, "a"), events);
    let report = store.verify().unwrap();
    assert_eq!(report.problems.len(), 1, "{report:?}");
    assert!(
        report.problems[0].contains("index disagrees with the log at events"),
        "{report:?}"
    );
    drop(store);
    // Without the second run, seq 3 falls in the first run's count and is not in its frame.
    let db = redb::Database::open(dir.path().join("index.redb")).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(EVENTS)
        .unwrap()
        .remove(&event_key(1, 3))
        .unwrap();
    txn.commit().unwrap();
    drop(db);
    let store = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    match store.get("a", 3) {
        Err(ReadError::Corruption { position, detail }) => {
            assert_eq!(position, first.location.position());
            assert!(detail.contains("not in the frame"), "{detail}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    // Seq 5 is past the run's count: the index has nothing for it, so it is damaged.
    assert!(matches!(
        store.get("a", 5),
        Err(ReadError::Index(IndexError::Damaged { .. }))
    ));
    let report = store.verify().unwrap();
    // Three seqs without a right entry, the two entries that differ from a rebuild, and the
    // surface replay that cannot read seq 3.
    assert_eq!(report.problems.len(), 6, "{report:?}");
    assert_eq!(
        report
            .problems
            .iter()
            .filter(|p| p.contains("index disagrees with the log at events"))
            .count(),
        2,
        "{report:?}"
    );
}

/// Sets `meta/format_version` and, for version 1, replaces `events` with a table of the
/// version-1 layout (one 24-byte location per event).
fn set_index_version(dir: &Path, version: u32) {
    let db = redb::Database::open(dir.join("index.redb")).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut meta = txn.open_table(META).unwrap();
        meta.insert("format_version", version.to_le_bytes().as_slice())
            .unwrap();
    }
    if version == 1 {
        txn.delete_table(EVENTS).unwrap();
        let v1: redb::TableDefinition<&[u8; 16], &[u8; 24]> = redb::TableDefinition::new("events");
        let mut t = txn.open_table(v1).unwrap();
        t.insert(&event_key(1, 0), &[0u8; 24]).unwrap();
    }
    txn.commit().unwrap();
}

#[test]
fn an_index_of_format_version_1_is_rebuilt_by_a_writable_open() {
    assert_eq!(INDEX_FORMAT_VERSION, 4);
    let dir = tempfile::tempdir().unwrap();
    let written = {
        let store = Store::open(dir.path(), config(Durability::Buffered)).unwrap();
        let written = interleaved(&store, 50, 20);
        store.close().unwrap();
        written
    };
    let current = runs(dir.path());
    set_index_version(dir.path(), 1);
    let read_only = config(Durability::Buffered).read_only(true);
    // A read-only open answers from an index rebuilt in memory and says recovery is pending.
    {
        let ro = Store::open(dir.path(), read_only.clone()).unwrap();
        let pending = ro.recovery_report().recovery_pending.clone();
        assert!(
            pending
                .as_deref()
                .is_some_and(|r| r.contains("format version 1")),
            "{pending:?}"
        );
        for (id, events) in &written {
            assert_eq!(&read_all(&ro, id), events);
        }
    }
    let store = Store::open(dir.path(), config(Durability::Buffered)).unwrap();
    let report = store.recovery_report().clone();
    assert!(report.index_rebuilt, "{report:?}");
    assert!(
        report
            .rebuild_reason
            .as_deref()
            .is_some_and(|r| r.contains("format version 1")),
        "{report:?}"
    );
    assert_eq!(report.events_recovered, 150);
    for (id, events) in &written {
        assert_eq!(&read_all(&store, id), events);
    }
    store.close().unwrap();
    assert_eq!(runs(dir.path()), current);
    let ro = Store::open(dir.path(), read_only).unwrap();
    assert_eq!(ro.len("s0"), Some(50));
}

#[test]
fn an_index_of_a_newer_format_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), config(Durability::Buffered)).unwrap();
        interleaved(&store, 5, 5);
        store.close().unwrap();
    }
    set_index_version(dir.path(), INDEX_FORMAT_VERSION + 1);
    for read_only in [false, true] {
        let err = Store::open(
            dir.path(),
            config(Durability::Buffered).read_only(read_only),
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                OpenError::UnsupportedFormat {
                    found: 5,
                    supported: 4,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("upgrade"), "{err}");
    }
}
