//! The catch-up after an index rebuild folds sessions on several threads: every session ends
//! up exactly as it was written (events, surface, messages, views), and so does a session used
//! while the others are folded.

use sessionlog::event::SessionHeader;
use sessionlog::store::{Config, Store};
use sessionlog_bench::workload::{WorkloadConfig, generate_events};

use crate::common::read_all;

#[test]
fn a_rebuilt_index_catches_up_every_session_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut ids: Vec<String> = (0..9).map(|i| format!("s{i}")).collect();
    let mut expected = Vec::new();
    {
        let store = Store::open(dir.path(), Config::default()).unwrap();
        write_interleaved(&store, &ids, 300, 120, 25);
        // An import of older shapes: user messages without `id` and `role` (dsh's loader gives
        // them both).
        let legacy: Vec<_> = generate_events(&WorkloadConfig::default(), 99, 400)
            .into_iter()
            .map(|mut e| {
                if e.kind == "user/message" {
                    let mut data: serde_json::Map<String, serde_json::Value> =
                        serde_json::from_str(&e.data).unwrap();
                    data.remove("id");
                    data.remove("role");
                    e.data = serde_json::to_string(&data).unwrap();
                }
                e
            })
            .collect();
        assert!(legacy.iter().any(|e| e.kind == "user/message"));
        store
            .import_session(SessionHeader::new("legacy", 1), legacy, None)
            .unwrap();
        ids.push("legacy".to_string());
        for id in &ids {
            expected.push((
                read_all(&store, id),
                store.surface(id).unwrap(),
                store.messages(id).unwrap(),
                store.projection_views(id).unwrap(),
            ));
        }
        store.close().unwrap();
    }
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let store = Store::open(dir.path(), Config::default()).unwrap();
    assert!(store.recovery_report().catch_up_failures.is_empty());
    for (id, (events, surface, messages, views)) in ids.iter().zip(&expected) {
        assert_eq!(&read_all(&store, id), events, "{id}");
        assert_eq!(&store.surface(id).unwrap(), surface, "{id}");
        assert_eq!(&store.messages(id).unwrap(), messages, "{id}");
        assert_eq!(&store.projection_views(id).unwrap(), views, "{id}");
    }
    // The checkpoints the catch-up wrote serve the next open without a fold.
    store.close().unwrap();
    let store = Store::open(dir.path(), Config::default()).unwrap();
    for (id, (_, surface, _, views)) in ids.iter().zip(&expected) {
        assert_eq!(&store.surface(id).unwrap(), surface, "{id}");
        assert_eq!(&store.projection_views(id).unwrap(), views, "{id}");
    }
}

/// A crashed writer's tail past the last checkpoint: the first use of each session folds its
/// state and its projections over the tail (in one read, from the checkpoints the index
/// holds), to exactly what the writer had.
#[test]
fn a_crashed_writers_tail_folds_to_what_the_writer_had() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<String> = (0..4).map(|i| format!("s{i}")).collect();
    // Checkpoints every 64 KiB: each session's checkpoints lag somewhere in its events.
    let config = || Config::default().checkpoint_bytes(64 << 10);
    let store = Store::open(dir.path(), config()).unwrap();
    write_interleaved(&store, &ids, 1500, 400, 30);
    let expected: Vec<_> = ids
        .iter()
        .map(|id| {
            (
                store.surface(id).unwrap(),
                store.messages(id).unwrap(),
                store.projection_views(id).unwrap(),
            )
        })
        .collect();
    store.abandon();
    let store = Store::open(dir.path(), config()).unwrap();
    let at_open = store.frames_read();
    for (id, (surface, messages, views)) in ids.iter().zip(&expected) {
        assert_eq!(&store.projection_views(id).unwrap(), views, "{id}");
        assert_eq!(&store.surface(id).unwrap(), surface, "{id}");
        assert_eq!(&store.messages(id).unwrap(), messages, "{id}");
    }
    assert!(
        store.frames_read() > at_open,
        "the first uses folded a tail"
    );
    // Appending goes on from there.
    let more = generate_events(&WorkloadConfig::default(), 0, 1600);
    store.append_batch(&ids[0], more[1500..].to_vec()).unwrap();
    assert_eq!(store.len(&ids[0]), Some(1600));
}

/// Creates the sessions `ids` and appends the dsh workload to them (session `i` gets
/// `first + step * i` events), `group` events at a time, round robin: sessions of different
/// lengths interleaved in the log.
fn write_interleaved(store: &Store, ids: &[String], first: u64, step: u64, group: usize) {
    for (i, id) in ids.iter().enumerate() {
        store
            .create_session(SessionHeader::new(id.clone(), 1000 + i as u64))
            .unwrap();
    }
    let work: Vec<_> = (0..ids.len() as u64)
        .map(|i| generate_events(&WorkloadConfig::default(), i, first + step * i))
        .collect();
    for start in (0..).step_by(group) {
        let mut any = false;
        for (id, events) in ids.iter().zip(&work) {
            let chunk = events.get(start.min(events.len())..(start + group).min(events.len()));
            if let Some(chunk) = chunk.filter(|c| !c.is_empty()) {
                store.append_batch(id, chunk.to_vec()).unwrap();
                any = true;
            }
        }
        if !any {
            break;
        }
    }
}
