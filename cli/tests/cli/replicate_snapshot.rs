//! Index snapshots in the replica (format-spec.md §12.7): shipped beside manifests, used by a
//! restore (which then replays only the log past them), refused when damaged or describing
//! another generation (the index is rebuilt from the log instead), and kept by the remote
//! retention only as long as a kept manifest would restore from them. Against moto's server,
//! as `replicate.rs`; each test skips with a note when no server can be started.

use std::time::{Duration, SystemTime};

use futures_util::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sessionlog::replicate::{ReplicaTarget, RestoreReport, replicate, restore};
use sessionlog::{Config, Durability, GcOptions, InvariantMode, Store};

use super::replicate_support::*;
use super::serial;

fn writable(dir: &std::path::Path) -> Store {
    Store::open(
        dir,
        Config::default()
            .durability(Durability::Sync)
            .segment_bytes(16 << 10)
            // The index file's durable commits are what a snapshot copies.
            .checkpoint_bytes(4 << 10)
            .invariants(InvariantMode::Off),
    )
    .unwrap()
}

/// A target shipping a snapshot at every round that shipped something.
fn snapshotting(url: &str, endpoint: &str) -> ReplicaTarget {
    target(url, endpoint)
        .snapshot_every(1)
        .snapshot_interval(Duration::ZERO)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The file names under `PREFIX/<dir>/`, sorted.
fn names(url: &str, endpoint: &str, dir: &str) -> Vec<String> {
    let (store, prefix) = raw_store(url, endpoint);
    let path = ObjectPath::from(format!("{prefix}/{dir}"));
    let mut v: Vec<String> = runtime()
        .block_on(store.list(Some(&path)).try_collect::<Vec<_>>())
        .unwrap()
        .into_iter()
        .map(|m| m.location.filename().unwrap_or("").to_owned())
        .collect();
    v.sort();
    v
}

fn get(url: &str, endpoint: &str, name: &str) -> Vec<u8> {
    let (store, prefix) = raw_store(url, endpoint);
    let path = ObjectPath::from(format!("{prefix}/{name}"));
    runtime()
        .block_on(async { store.get(&path).await.unwrap().bytes().await.unwrap() })
        .to_vec()
}

fn put(url: &str, endpoint: &str, name: &str, bytes: Vec<u8>) {
    let (store, prefix) = raw_store(url, endpoint);
    let path = ObjectPath::from(format!("{prefix}/{name}"));
    runtime()
        .block_on(store.put(&path, PutPayload::from(bytes)))
        .unwrap();
}

fn used_a_snapshot(r: &RestoreReport) -> bool {
    r.snapshot.is_some() && r.snapshot_position.is_some() && !r.index_rebuilt
}

/// Ships a closed store (its index covers the whole log) with snapshots on; the stats.
fn ship_closed(dir: &std::path::Path, t: ReplicaTarget) -> sessionlog::replicate::ReplicaStats {
    replicate(dir, t).unwrap().stop().unwrap()
}

#[test]
fn restore_starts_from_the_shipped_snapshot_and_equals_the_source() {
    let _g = serial();
    if skip() {
        return;
    }
    let endpoint = server().unwrap();
    let url = bucket_url("snap-used");
    let src = tempfile::tempdir().unwrap();
    let store = writable(src.path());
    append(&store, &["a", "b", "c"], 80);
    store.fork("a", Some(29), Some("a-fork")).unwrap();
    // Snapshots taken beside the live writer while it appends.
    let rep = store.replicate(snapshotting(&url, endpoint)).unwrap();
    append(&store, &["a", "b", "c", "a-fork"], 80);
    let stats = rep.stop().unwrap();
    assert!(stats.snapshots >= 1, "{stats:?}");
    store.close().unwrap();
    let descriptors: Vec<_> = names(&url, endpoint, "index")
        .into_iter()
        .filter(|n| n.ends_with(".json"))
        .collect();
    assert_eq!(descriptors.len() as u64, stats.snapshots, "{descriptors:?}");
    let dst = tempfile::tempdir().unwrap();
    let out = super::ok(cli(&[
        "restore",
        "--from",
        &url,
        "--endpoint",
        endpoint,
        dst.path().join("snap").to_str().unwrap(),
    ]));
    assert!(out.contains("index from snapshot"), "{out}");
    assert!(!out.contains("index rebuilt"), "{out}");
    assert_eq!(snapshot(src.path()), snapshot(&dst.path().join("snap")));
    verify_clean(&dst.path().join("snap"));
    // The same through the library, and with snapshots refused: a rebuild reading every
    // frame, where the snapshot's open read fewer.
    let used = restore(&target(&url, endpoint), None, dst.path().join("lib")).unwrap();
    assert!(used_a_snapshot(&used), "{used:?}");
    let rebuilt = restore(
        &target(&url, endpoint).use_snapshots(false),
        None,
        dst.path().join("rebuilt"),
    )
    .unwrap();
    assert!(
        rebuilt.snapshot.is_none() && rebuilt.index_rebuilt,
        "{rebuilt:?}"
    );
    assert!(
        rebuilt.notes.iter().any(|n| n.contains("not used")),
        "{rebuilt:?}"
    );
    assert!(
        used.frames_replayed < rebuilt.frames_replayed,
        "{used:?} {rebuilt:?}"
    );
    assert_eq!(used.events, rebuilt.events);
    assert_eq!(snapshot(src.path()), snapshot(&dst.path().join("rebuilt")));
    let out = super::ok(cli(&[
        "restore",
        "--from",
        &url,
        "--endpoint",
        endpoint,
        "--no-snapshot",
        dst.path().join("cli-rebuilt").to_str().unwrap(),
    ]));
    assert!(out.contains("index rebuilt from the log"), "{out}");
}

/// A snapshot older than the manifest restored: the restore starts from it and replays the
/// log past it; `--at` the first run's time restores from it with nothing to replay.
#[test]
fn restore_at_catches_up_from_an_older_snapshot() {
    let _g = serial();
    if skip() {
        return;
    }
    let endpoint = server().unwrap();
    let url = bucket_url("snap-older");
    let src = tempfile::tempdir().unwrap();
    let store = writable(src.path());
    append(&store, &["x", "y"], 100);
    store.close().unwrap();
    let first = ship_closed(src.path(), snapshotting(&url, endpoint));
    assert_eq!(first.snapshots, 1, "{first:?}");
    assert_eq!(first.snapshot_position, Some(first.shipped), "{first:?}");
    let then = counts(src.path());
    let t1 = first.shipped_at.unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let store = writable(src.path());
    append(&store, &["x", "y", "z"], 100);
    store.close().unwrap();
    let second = ship_closed(src.path(), target(&url, endpoint).snapshot_every(0));
    assert_eq!(second.snapshots, 0, "{second:?}");
    assert!(second.shipped > first.shipped);
    let dst = tempfile::tempdir().unwrap();
    let now_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    let out = super::ok(cli(&[
        "restore",
        "--from",
        &url,
        "--endpoint",
        endpoint,
        "--at",
        &now_ms,
        dst.path().join("now").to_str().unwrap(),
    ]));
    assert!(out.contains("index from snapshot"), "{out}");
    let replayed: u64 = out
        .split("caught up over ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(replayed > 0, "{out}");
    assert_eq!(snapshot(src.path()), snapshot(&dst.path().join("now")));
    verify_clean(&dst.path().join("now"));
    let at_first = restore(&target(&url, endpoint), Some(t1), dst.path().join("then")).unwrap();
    assert!(used_a_snapshot(&at_first), "{at_first:?}");
    assert_eq!(at_first.frames_replayed, 0, "{at_first:?}");
    assert_eq!(counts(&dst.path().join("then")), then);
    verify_clean(&dst.path().join("then"));
}

/// Damaged snapshots (a flipped byte in the body, a body that is not redb with a descriptor
/// made to match it, a descriptor that lies about its position, a forged body whose own
/// checks pass but whose contents disagree with the log) and one of a generation a GC
/// replaced: each is refused with a note saying why, the index is rebuilt from the log, and
/// the restored store equals the source.
#[test]
fn a_damaged_or_mismatched_snapshot_falls_back_to_a_rebuild() {
    let _g = serial();
    if skip() {
        return;
    }
    let endpoint = server().unwrap();
    let url = bucket_url("snap-damaged");
    let src = tempfile::tempdir().unwrap();
    let store = writable(src.path());
    // Enough for several segments (the position check below needs a second one).
    append(&store, &["d0", "d1", "d2"], 120);
    store.close().unwrap();
    let stats = ship_closed(src.path(), snapshotting(&url, endpoint));
    assert_eq!(stats.snapshots, 1);
    let objects = names(&url, endpoint, "index");
    let json = format!(
        "index/{}",
        objects.iter().find(|n| n.ends_with(".json")).unwrap()
    );
    let redb = format!(
        "index/{}",
        objects.iter().find(|n| n.ends_with(".redb")).unwrap()
    );
    let (body, descriptor) = (get(&url, endpoint, &redb), get(&url, endpoint, &json));
    let dst = tempfile::tempdir().unwrap();
    let mut n = 0;
    let mut fallback = |why: &str| {
        n += 1;
        let d = dst.path().join(format!("r{n}"));
        let r = restore(&target(&url, endpoint), None, &d).unwrap();
        assert!(r.snapshot.is_none() && r.index_rebuilt, "{r:?}");
        assert!(
            r.notes.iter().any(|x| x.contains(why) && x.contains(&json)),
            "{why}: {r:?}"
        );
        assert_eq!(snapshot(src.path()), snapshot(&d));
        verify_clean(&d);
    };
    // A flipped byte in the body.
    let mut flipped = body.clone();
    let at = flipped.len() / 2;
    flipped[at] ^= 0x01;
    put(&url, endpoint, &redb, flipped);
    fallback("damaged");
    // Bytes that are not a redb file, with a descriptor fixed up to match them.
    let junk = b"not an index at all".repeat(100);
    let mut v: serde_json::Value = serde_json::from_slice(&descriptor).unwrap();
    v["body"]["length"] = junk.len().into();
    v["body"]["crc32"] = crc32fast::hash(&junk).into();
    put(&url, endpoint, &redb, junk);
    put(&url, endpoint, &json, serde_json::to_vec(&v).unwrap());
    fallback("redb");
    // The real body, with a descriptor that claims an earlier position than its index.
    put(&url, endpoint, &redb, body.clone());
    let mut v: serde_json::Value = serde_json::from_slice(&descriptor).unwrap();
    let segs = v["segments"].as_array().unwrap().len();
    v["position"]["segment"] = 1.into();
    v["position"]["offset"] = v["segments"][0]["length"].clone();
    v["segments"] = serde_json::Value::Array(vec![v["segments"][0].clone()]);
    assert!(segs > 1, "several segments: {v}");
    put(&url, endpoint, &json, serde_json::to_vec(&v).unwrap());
    fallback("covers");
    // A forged body that passes every check of its own (redb's checksums, each entry's CRC,
    // its watermark) but lacks an index entry: the store opened from it does not verify, so
    // the restore gives it up and rebuilds the index from the log.
    let forged = {
        use redb::ReadableTable;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.redb");
        std::fs::write(&path, &body).unwrap();
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(sessionlog::index::EVENTS).unwrap();
            let last = t.last().unwrap().map(|(k, _)| *k.value()).unwrap();
            t.remove(&last).unwrap();
        }
        txn.commit().unwrap();
        drop(db);
        std::fs::read(&path).unwrap()
    };
    let mut v: serde_json::Value = serde_json::from_slice(&descriptor).unwrap();
    v["body"]["length"] = forged.len().into();
    v["body"]["crc32"] = crc32fast::hash(&forged).into();
    put(&url, endpoint, &redb, forged);
    put(&url, endpoint, &json, serde_json::to_vec(&v).unwrap());
    fallback("did not verify");
    put(&url, endpoint, &redb, body.clone());
    // Back as shipped: used again.
    put(&url, endpoint, &json, descriptor);
    let ok = restore(&target(&url, endpoint), None, dst.path().join("ok")).unwrap();
    assert!(used_a_snapshot(&ok), "{ok:?}");
    // A GC compacts segments after the snapshot: the newest manifest names new generations,
    // so the snapshot is refused for it (and still used for a restore before the GC).
    let before_gc = stats.shipped_at.unwrap();
    let store = writable(src.path());
    store.delete_session("d1").unwrap();
    store.delete_session("d2").unwrap();
    let gc = store.gc(GcOptions::default(), &mut |_, _| {}).unwrap();
    assert!(!gc.compacted.is_empty(), "{gc:?}");
    store.close().unwrap();
    let after = ship_closed(src.path(), target(&url, endpoint).snapshot_every(0));
    assert!(after.generations >= 1, "{after:?}");
    fallback("generation");
    let then = restore(
        &target(&url, endpoint),
        Some(before_gc),
        dst.path().join("before-gc"),
    )
    .unwrap();
    assert!(used_a_snapshot(&then), "{then:?}");
}

/// The remote retention keeps, for each manifest it keeps, the newest snapshot at or before
/// it (with its body), and deletes the others.
#[test]
fn remote_retention_keeps_the_snapshots_kept_manifests_need() {
    let _g = serial();
    if skip() {
        return;
    }
    let endpoint = server().unwrap();
    let url = bucket_url("snap-retain");
    let src = tempfile::tempdir().unwrap();
    let store = writable(src.path());
    append(&store, &["r0", "r1"], 40);
    let rep = store
        .replicate(snapshotting(&url, endpoint).retain(Duration::from_millis(300)))
        .unwrap();
    for _ in 0..12 {
        append(&store, &["r0"], 5);
        std::thread::sleep(Duration::from_millis(120));
    }
    assert!(
        wait_for(30, || rep.stats().pruned > 0 && rep.stats().snapshots >= 4),
        "{:?}",
        rep.stats()
    );
    let stats = rep.stop().unwrap();
    store.close().unwrap();
    let key = |n: &str| n.split('.').next().unwrap_or("").to_owned();
    let manifests: Vec<String> = names(&url, endpoint, "manifests")
        .iter()
        .map(|n| key(n))
        .collect();
    let objects = names(&url, endpoint, "index");
    let descriptors: Vec<String> = objects
        .iter()
        .filter(|n| n.ends_with(".json"))
        .map(|n| key(n))
        .collect();
    let bodies: Vec<String> = objects
        .iter()
        .filter(|n| n.ends_with(".redb"))
        .map(|n| key(n))
        .collect();
    assert_eq!(descriptors, bodies, "every kept descriptor has its body");
    assert!(
        (descriptors.len() as u64) < stats.snapshots,
        "some were deleted: {descriptors:?} {stats:?}"
    );
    // Exactly the newest descriptor at or before some kept manifest (names sort by time).
    let mut needed: Vec<String> = manifests
        .iter()
        .filter_map(|m| descriptors.iter().rev().find(|d| *d <= m).cloned())
        .collect();
    needed.dedup();
    assert_eq!(descriptors, needed, "manifests {manifests:?}");
    let dst = tempfile::tempdir().unwrap();
    let r = restore(&target(&url, endpoint), None, dst.path()).unwrap();
    assert!(used_a_snapshot(&r), "{r:?}");
    assert_eq!(snapshot(src.path()), snapshot(dst.path()));
}

/// `sessionlog replicate --snapshot-every SIZE --snapshot-interval DURATION` until SIGINT;
/// its stdout.
fn replicate_cli(url: &str, endpoint: &str, dir: &std::path::Path, every: &str) -> String {
    use std::io::{BufRead, BufReader, Read};
    let mut child = spawn_replicate_with(
        url,
        endpoint,
        dir,
        &["--snapshot-every", every, "--snapshot-interval", "0s"],
    );
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut out = String::new();
    stdout.read_line(&mut out).unwrap();
    assert!(out.starts_with("replicating"), "{out}");
    assert!(wait_for(30, || !names(url, endpoint, "manifests").is_empty()));
    signal(&child, 2);
    let status = child.wait().unwrap();
    stdout.read_to_string(&mut out).unwrap();
    assert!(status.success(), "{status:?}\n{out}");
    out
}

/// The command line's flags: a snapshot shipped by `replicate --snapshot-every`, none with
/// `--snapshot-every 0` (the restore says so and rebuilds), a size it cannot read refused.
#[test]
fn the_command_line_ships_snapshots_as_asked() {
    let _g = serial();
    if skip() {
        return;
    }
    let endpoint = server().unwrap();
    let src = tempfile::tempdir().unwrap();
    let store = writable(src.path());
    append(&store, &["c0", "c1"], 60);
    store.close().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let restore_to = |url: &str, name: &str| {
        super::ok(cli(&[
            "restore",
            "--from",
            url,
            "--endpoint",
            endpoint,
            dst.path().join(name).to_str().unwrap(),
        ]))
    };
    let with = bucket_url("snap-cli");
    let out = replicate_cli(&with, endpoint, src.path(), "1KiB");
    assert!(out.contains(", 1 index snapshot(s) uploaded"), "{out}");
    let restored = restore_to(&with, "with");
    assert!(restored.contains("index from snapshot"), "{restored}");
    assert_eq!(snapshot(src.path()), snapshot(&dst.path().join("with")));
    let without = bucket_url("snap-cli-none");
    let out = replicate_cli(&without, endpoint, src.path(), "0");
    assert!(out.contains(", 0 index snapshot(s) uploaded"), "{out}");
    assert!(names(&without, endpoint, "index").is_empty());
    let restored = restore_to(&without, "without");
    assert!(
        restored.contains("note: the replica holds no index snapshot")
            && restored.contains("index rebuilt from the log"),
        "{restored}"
    );
    assert_eq!(snapshot(src.path()), snapshot(&dst.path().join("without")));
    let bad = cli(&[
        "replicate",
        "--to",
        &without,
        "--snapshot-every",
        "12parsecs",
        src.path().to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("the unit must be"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}
