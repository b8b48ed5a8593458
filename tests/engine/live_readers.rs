//! Readers beside a live writer (format-spec.md §12): no lock a writer could wait for, every
//! acknowledged event and nothing unacknowledged, `refresh`, and `follow` across a writer
//! closing, crashing and reopening. The writer here is another `Store` in this process (the
//! lock is an `flock` per open file, so it excludes a second writer in the same process as in
//! another); the command-line tests run them as separate processes.

use std::time::Duration;

use crate::common::{config, fill, read_all, synthetic_event};
use sessionlog::error::OpenError;
use sessionlog::event::SessionHeader;
use sessionlog::store::{Durability, FollowError, FollowUpdate, Store};

fn reader(dir: &std::path::Path) -> Store {
    Store::open(dir, config(Durability::Sync).read_only(true)).unwrap()
}

#[test]
fn a_reader_opens_beside_a_writer_and_sees_only_what_it_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), config(Durability::Buffered)).unwrap();
    let written = fill(&writer, 2, 30);
    writer.flush().unwrap();
    // Appended but not flushed (Buffered): not acknowledged as durable, so not visible.
    writer.append("s0", synthetic_event(30, 0)).unwrap();
    let mut r = reader(dir.path());
    let view = r.reader_view().unwrap();
    assert!(view.writer_alive);
    assert_eq!(r.len("s0"), Some(30));
    assert_eq!(read_all(&r, "s0"), written[0].1);
    assert_eq!(read_all(&r, "s1"), written[1].1);
    // Written to the OS by a later batch, still not durable: still not visible.
    writer.append("s1", synthetic_event(30, 1)).unwrap();
    assert!(!r.refresh().unwrap());
    assert_eq!(r.len("s0"), Some(30));
    writer.flush().unwrap();
    assert!(r.refresh().unwrap());
    assert_eq!(r.len("s0"), Some(31));
    assert_eq!(r.len("s1"), Some(31));
    assert_eq!(r.get("s0", 30).unwrap().unwrap(), synthetic_event(30, 0));
    // A session created later appears on refresh.
    writer
        .create_session(SessionHeader::new("late", 5))
        .unwrap();
    writer.flush().unwrap();
    assert!(r.refresh().unwrap());
    assert_eq!(r.len("late"), Some(0));
    assert!(r.verify().unwrap().is_clean());
}

#[test]
fn readers_never_keep_a_writer_out() {
    let dir = tempfile::tempdir().unwrap();
    {
        let w = Store::open(dir.path(), config(Durability::Sync)).unwrap();
        fill(&w, 1, 5);
    }
    // Readers (of a closed store: they read a copy of the index) first, then a writer.
    let mut r1 = reader(dir.path());
    let r2 = reader(dir.path());
    assert!(!r1.reader_view().unwrap().writer_alive);
    assert!(r1.reader_view().unwrap().writer_closed);
    let w = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    w.append("s0", synthetic_event(5, 0)).unwrap();
    // A second writer is still refused, with the holder's pid.
    match Store::open(dir.path(), config(Durability::Sync)) {
        Err(OpenError::Locked { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
        other => panic!("a second writer opened: {other:?}"),
    }
    assert!(r1.refresh().unwrap());
    assert!(r1.reader_view().unwrap().writer_alive);
    assert_eq!(r1.len("s0"), Some(6));
    assert_eq!(r2.len("s0"), Some(5));
    w.close().unwrap();
    r1.refresh().unwrap();
    let view = r1.reader_view().unwrap();
    assert!(!view.writer_alive && view.writer_closed);
    // Closed: the writer reopens while the old readers stay open.
    let w = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    assert_eq!(w.len("s0"), Some(6));
    drop((w, r1, r2));
}

#[test]
fn a_reader_reads_a_crashed_writers_whole_log_and_its_torn_tail_is_not_damage() {
    let dir = tempfile::tempdir().unwrap();
    let w = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    let written = fill(&w, 2, 20);
    w.abandon();
    // A torn frame at the end, as a crash mid-write leaves it.
    let seg = dir.path().join("segments/00000000000000000001.seg");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes.extend_from_slice(&[0x53, 0x4c, 0x00, 0x10, 0xff, 0x01]);
    std::fs::write(&seg, &bytes).unwrap();
    let r = reader(dir.path());
    let view = r.reader_view().unwrap();
    assert!(!view.writer_alive && !view.writer_closed);
    assert_eq!(read_all(&r, "s0"), written[0].1);
    assert_eq!(read_all(&r, "s1"), written[1].1);
    assert!(r.recovery_report().recovery_pending.is_some());
    assert_eq!(
        std::fs::read(&seg).unwrap(),
        bytes,
        "a reader changed the log"
    );
}

#[test]
fn a_live_writers_unpublished_tail_is_not_visible_even_when_torn() {
    let dir = tempfile::tempdir().unwrap();
    let w = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    let written = fill(&w, 1, 10);
    // Bytes past the published position (a frame being written): a reader stops before them.
    let seg = dir.path().join("segments/00000000000000000001.seg");
    let file = std::fs::OpenOptions::new().append(true).open(&seg).unwrap();
    std::io::Write::write_all(&mut &file, &[0x42; 7]).unwrap();
    let r = reader(dir.path());
    assert!(r.recovery_report().recovery_pending.is_none());
    assert!(r.recovery_report().truncated.is_none());
    assert_eq!(read_all(&r, "s0"), written[0].1);
    w.abandon();
}

#[test]
fn a_reader_works_with_the_index_deleted_and_the_writer_rebuilds_it_after() {
    let dir = tempfile::tempdir().unwrap();
    let written = {
        let w = Store::open(dir.path(), config(Durability::Sync)).unwrap();
        fill(&w, 3, 15)
    };
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let r = reader(dir.path());
    for (id, events) in &written {
        assert_eq!(&read_all(&r, id), events);
    }
    assert!(
        !dir.path().join("index.redb").exists(),
        "a reader created the index"
    );
    let w = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    assert!(w.recovery_report().index_rebuilt || w.recovery_report().events_recovered > 0);
    w.append("s0", synthetic_event(15, 0)).unwrap();
    drop(r);
    // With a live writer the reader never opens the index (the writer's file).
    let r = reader(dir.path());
    assert_eq!(r.len("s0"), Some(16));
}

fn next_event(f: &mut sessionlog::store::Follower) -> FollowUpdate {
    match f.next_update(Duration::from_secs(10)).unwrap() {
        FollowUpdate::Idle => panic!("nothing within 10 s"),
        u => u,
    }
}

#[test]
fn a_follower_sees_every_event_once_across_a_close_a_crash_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(Durability::Sync);
    let w = Store::open(dir.path(), cfg.clone()).unwrap();
    w.create_session(SessionHeader::new("s", 1)).unwrap();
    for seq in 0..5 {
        w.append("s", synthetic_event(seq, 0)).unwrap();
    }
    let mut f = reader(dir.path()).follow("s", 2).unwrap();
    let mut seen = Vec::new();
    let expect = |f: &mut sessionlog::store::Follower, upto: u64, seen: &mut Vec<u64>| {
        while f.next_seq() < upto {
            match next_event(f) {
                FollowUpdate::Event(e) => {
                    assert_eq!(e, synthetic_event(e.seq, 0));
                    seen.push(e.seq);
                }
                other => panic!("expected an event, got {other:?}"),
            }
        }
    };
    expect(&mut f, 5, &mut seen);
    // A writer thread appends while the follower follows.
    let w = std::sync::Arc::new(w);
    let appender = {
        let w = w.clone();
        std::thread::spawn(move || {
            for seq in 5..200 {
                w.append("s", synthetic_event(seq, 0)).unwrap();
            }
        })
    };
    expect(&mut f, 200, &mut seen);
    appender.join().unwrap();
    std::sync::Arc::into_inner(w).unwrap().close().unwrap();
    assert_eq!(
        next_event(&mut f),
        FollowUpdate::WriterGone { closed: true }
    );
    let w = Store::open(dir.path(), cfg.clone()).unwrap();
    assert_eq!(next_event(&mut f), FollowUpdate::WriterOpened);
    for seq in 200..210 {
        w.append("s", synthetic_event(seq, 0)).unwrap();
    }
    expect(&mut f, 210, &mut seen);
    w.abandon();
    assert_eq!(
        next_event(&mut f),
        FollowUpdate::WriterGone { closed: false }
    );
    let w = Store::open(dir.path(), cfg).unwrap();
    assert_eq!(next_event(&mut f), FollowUpdate::WriterOpened);
    w.append("s", synthetic_event(210, 0)).unwrap();
    expect(&mut f, 211, &mut seen);
    assert_eq!(seen, (2..211).collect::<Vec<u64>>());
    assert_eq!(
        f.next_update(Duration::from_millis(50)).unwrap(),
        FollowUpdate::Idle
    );
    w.delete_session("s").unwrap();
    w.flush().unwrap();
    assert_eq!(next_event(&mut f), FollowUpdate::SessionGone);
    assert!(f.next().is_none());
}

#[test]
fn following_needs_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    let w = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    assert!(matches!(w.follow("s", 0), Err(FollowError::NotAReader)));
}

#[test]
fn a_refreshed_reader_answers_as_the_writer_does() {
    let dir = tempfile::tempdir().unwrap();
    let w = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    fill(&w, 3, 40);
    let mut r = reader(dir.path());
    let same = |r: &Store, w: &Store| {
        assert_eq!(r.sessions(), w.sessions());
        for id in ["s0", "s1", "s2"] {
            assert_eq!(r.session_info(id), w.session_info(id), "{id}");
            assert_eq!(r.surface(id).unwrap(), w.surface(id).unwrap(), "{id}");
            assert_eq!(
                r.messages(id).unwrap(),
                w.messages(id).unwrap(),
                "{id} messages"
            );
            assert_eq!(read_all(r, id), read_all(w, id), "{id} events");
            let resumed = r.resume(id).unwrap();
            assert_eq!(resumed.len(), w.len(id).unwrap(), "{id} resume");
            assert_eq!(
                resumed.messages().unwrap(),
                w.messages(id).unwrap(),
                "{id} resume"
            );
        }
    };
    same(&r, &w);
    // Grown twice before anything is read (the state set aside is folded on), then once
    // with the surface read first.
    for round in 0..3u64 {
        for (t, id) in ["s0", "s2"].into_iter().enumerate() {
            let t = if t == 0 { 0 } else { 2 };
            for seq in 40 + round * 25..40 + (round + 1) * 25 {
                w.append(id, synthetic_event(seq, t)).unwrap();
            }
        }
        assert!(r.refresh().unwrap());
        if round == 2 {
            assert_eq!(r.surface("s2").unwrap(), w.surface("s2").unwrap());
        }
        if round != 0 {
            same(&r, &w);
        }
    }
    assert!(r.verify().unwrap().is_clean());
}

#[test]
fn a_reader_of_a_live_writers_empty_store_opens_at_once_and_follows_its_first_session() {
    let dir = tempfile::tempdir().unwrap();
    let w = Store::open(dir.path(), config(Durability::Sync)).unwrap();
    // An empty log is a published position: the open neither waits nor fails (a live writer
    // that published nothing makes it fail after 10 s).
    let r = reader(dir.path());
    assert!(r.reader_view().unwrap().writer_alive);
    assert!(r.sessions().is_empty());
    // A session that does not exist yet is followed from its creation.
    let mut f = r.follow("new", 0).unwrap();
    w.create_session(SessionHeader::new("new", 1)).unwrap();
    w.append("new", synthetic_event(0, 0)).unwrap();
    assert_eq!(
        next_event(&mut f),
        FollowUpdate::Event(synthetic_event(0, 0))
    );
}

#[test]
fn a_reader_refreshing_beside_a_writer_across_segment_rolls_sees_a_growing_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(Durability::Sync).segment_bytes(4096);
    let w = std::sync::Arc::new(Store::open(dir.path(), cfg).unwrap());
    for id in ["a", "b"] {
        w.create_session(SessionHeader::new(id, 1)).unwrap();
    }
    let appenders: Vec<_> = ["a", "b"]
        .into_iter()
        .enumerate()
        .map(|(t, id)| {
            let w = w.clone();
            std::thread::spawn(move || {
                for seq in 0..400 {
                    w.append(id, synthetic_event(seq, t as u64)).unwrap();
                }
            })
        })
        .collect();
    let mut r = reader(dir.path());
    let mut seen = [0u64; 2];
    let mut refreshes = 0;
    while seen != [400, 400] {
        r.refresh().unwrap();
        refreshes += 1;
        for (t, id) in ["a", "b"].into_iter().enumerate() {
            let n = r.len(id).unwrap();
            assert!(n >= seen[t], "{id} went back from {} to {n}", seen[t]);
            // Only the new events are read: each is whole and the one appended.
            for (i, e) in r.events(id, seen[t]..n).unwrap().enumerate() {
                let seq = seen[t] + i as u64;
                assert_eq!(e.unwrap(), synthetic_event(seq, t as u64), "{id} seq {seq}");
            }
            seen[t] = n;
        }
        assert!(refreshes < 1_000_000, "the reader never caught up");
    }
    for a in appenders {
        a.join().unwrap();
    }
    assert!(
        std::fs::read_dir(dir.path().join("segments"))
            .unwrap()
            .count()
            > 10,
        "the log did not roll over"
    );
    assert!(r.verify().unwrap().is_clean());
}

#[test]
fn a_follower_of_a_removed_store_fails_instead_of_waiting_forever() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    {
        let w = Store::open(&store, config(Durability::Sync)).unwrap();
        fill(&w, 1, 3);
    }
    let mut r = reader(&store);
    let mut f = reader(&store).follow("s0", 3).unwrap();
    std::fs::remove_dir_all(&store).unwrap();
    match r.refresh() {
        Err(OpenError::Io { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound)
        }
        other => panic!("refresh of a removed store: {other:?}"),
    }
    // Polled with short timeouts (as `show --follow` does), the follower gives up after its
    // retry time instead of reporting `Idle` forever.
    let failed = (0..100).find_map(|_| match f.next_update(Duration::from_millis(200)) {
        Ok(FollowUpdate::Idle) => None,
        Ok(other) => panic!("{other:?}"),
        Err(e) => Some(e),
    });
    assert!(
        matches!(failed, Some(FollowError::Open(OpenError::Io { .. }))),
        "{failed:?}"
    );
}
