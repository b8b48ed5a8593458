//! Replication to an S3-protocol server and restore (format-spec.md §12), against moto's
//! server started by the tests (or the server `SESSIONLOG_S3_ENDPOINT` names; README.md says
//! how). Each test skips with a note when no server can be started.

use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sessionlog::replicate::restore;
use sessionlog::typed::{TurnEnd, TurnStart, UserMessage};
use sessionlog::{Config, Durability, GcOptions, InvariantMode, SessionHeader, Store};

use super::replicate_support::*;
use super::serial;

fn writable(dir: &std::path::Path, segment_bytes: u64) -> Store {
    Store::open(
        dir,
        Config::default()
            .durability(Durability::Sync)
            .segment_bytes(segment_bytes)
            // Frames stored raw: the tests size segments (rolls, GC) in raw event bytes.
            .compress_threshold(usize::MAX)
            .invariants(InvariantMode::Off),
    )
    .unwrap()
}

fn restore_cli(url: &str, endpoint: &str, dst: &std::path::Path, at: Option<&str>) -> String {
    let mut args = vec!["restore", "--from", url, "--endpoint", endpoint];
    if let Some(at) = at {
        args.extend(["--at", at]);
    }
    let dst = dst.to_str().unwrap();
    args.push(dst);
    super::ok(cli(&args))
}

#[test]
fn ship_and_restore_equals_the_source() {
    let _g = serial();
    if skip() {
        return;
    }
    let endpoint = server().unwrap();
    let url = bucket_url("ship");
    let src = tempfile::tempdir().unwrap();
    let store = writable(src.path(), 16 << 10);
    append(&store, &["a", "b", "c"], 60);
    store.fork("a", Some(29), Some("a-fork")).unwrap();
    let rep = store.replicate(target(&url, endpoint)).unwrap();
    // Appends go on while it ships (several segments roll over meanwhile).
    append(&store, &["a", "b", "c", "a-fork"], 120);
    let stats = rep.stop().unwrap();
    assert!(stats.caught_up(), "{stats:?}");
    assert!(stats.manifests >= 1 && stats.parts >= 2, "{stats:?}");
    assert!(stats.shipped.segment >= 3, "several segments: {stats:?}");
    store.close().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let out = restore_cli(&url, endpoint, &dst.path().join("r"), None);
    assert!(out.contains("verified"), "{out}");
    assert_eq!(snapshot(src.path()), snapshot(&dst.path().join("r")));
    verify_clean(&dst.path().join("r"));
    // A second restore into the same directory is refused, saying what to do.
    let again = cli(&[
        "restore",
        "--from",
        &url,
        "--endpoint",
        endpoint,
        dst.path().join("r").to_str().unwrap(),
    ]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));
}

/// `Config::replicate_to`: the store ships from its open, and its close returns once
/// everything acknowledged is shipped; a restore equals the source.
#[test]
fn a_store_opened_with_replication_ships_everything_by_its_close() {
    let _g = serial();
    if skip() {
        return;
    }
    let endpoint = server().unwrap();
    let url = bucket_url("config");
    let src = tempfile::tempdir().unwrap();
    let config = Config::default()
        .durability(Durability::Sync)
        .segment_bytes(16 << 10)
        .invariants(InvariantMode::Off)
        .replicate_to(target(&url, endpoint));
    let store = Store::open(src.path(), config.clone()).unwrap();
    append(&store, &["a", "b"], 150);
    store.close().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let out = restore_cli(&url, endpoint, &dst.path().join("r"), None);
    assert!(out.contains("verified"), "{out}");
    assert_eq!(snapshot(src.path()), snapshot(&dst.path().join("r")));
    // A second open with the same prefix takes the lease over from the closed one and ships
    // what it appends.
    let store = Store::open(src.path(), config).unwrap();
    append(&store, &["c"], 40);
    store.close().unwrap();
    let dst2 = tempfile::tempdir().unwrap();
    restore_cli(&url, endpoint, &dst2.path().join("r"), None);
    assert_eq!(snapshot(src.path()), snapshot(&dst2.path().join("r")));
    verify_clean(&dst2.path().join("r"));
}

#[test]
fn restore_at_a_time_gives_the_prefix_shipped_then() {
    let _g = serial();
    if skip() {
        return;
    }
    let endpoint = server().unwrap();
    let url = bucket_url("at");
    let src = tempfile::tempdir().unwrap();
    let store = writable(src.path(), 32 << 10);
    append(&store, &["x", "y"], 80);
    let rep = store.replicate(target(&url, endpoint)).unwrap();
    assert!(wait_for(30, || rep.stats().caught_up() && rep.stats().manifests > 0));
    let t1 = rep.stats().shipped_at.unwrap();
    let before = counts(src.path());
    std::thread::sleep(Duration::from_millis(30));
    append(&store, &["x", "y", "z"], 80);
    rep.stop().unwrap();
    store.close().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let at_ms = t1
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    restore_cli(&url, endpoint, &dst.path().join("then"), Some(&at_ms));
    assert_eq!(counts(&dst.path().join("then")), before);
    verify_clean(&dst.path().join("then"));
    let report = restore(&target(&url, endpoint), None, dst.path().join("now")).unwrap();
    assert_eq!(counts(&dst.path().join("now")), counts(src.path()));
    assert!(report.segments >= 2, "{report:?}");
    // Before the first manifest: nothing to restore, and the message says what to do.
    let early = cli(&[
        "restore",
        "--from",
        &url,
        "--endpoint",
        endpoint,
        "--at",
        "2000-01-01T00:00:00Z",
        dst.path().join("early").to_str().unwrap(),
    ]);
    assert_eq!(early.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&early.stderr).contains("later --at"));
}

#[test]
fn server_down_and_cut_mid_upload_then_catching_up() {
    let _g = serial();
    if skip() {
        return;
    }
    let endpoint = server().unwrap();
    let url = bucket_url("outage");
    let proxy = Proxy::start(endpoint);
    let src = tempfile::tempdir().unwrap();
    let store = Arc::new(writable(src.path(), 256 << 10));
    append(&store, &["p", "q"], 40);
    let rep = store.replicate(target(&url, &proxy.endpoint())).unwrap();
    assert!(wait_for(30, || rep.stats().caught_up() && rep.stats().manifests > 0));
    // The server goes away: appends go on, the lag is reported.
    proxy.set_up(false);
    append(&store, &["p", "q"], 150);
    assert!(wait_for(20, || {
        let s = rep.stats();
        s.failing > 0 && s.lag_bytes > 0
    }));
    // It comes back, and goes away again in the middle of uploads (connections cut while
    // the parts' bytes are on the wire), several times.
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || append(&store, &["p", "q", "r"], 200))
    };
    for i in 0..12 {
        proxy.set_up(i % 2 == 1);
        std::thread::sleep(Duration::from_millis(120));
    }
    proxy.set_up(true);
    writer.join().unwrap();
    let stats = rep.stop_within(Duration::from_secs(60)).unwrap();
    assert!(stats.caught_up(), "{stats:?}");
    assert!(stats.last_error.is_some(), "the outage was seen: {stats:?}");
    let dst = tempfile::tempdir().unwrap();
    restore(&target(&url, endpoint), None, dst.path()).unwrap();
    assert_eq!(snapshot(src.path()), snapshot(dst.path()));
}

/// The writer SIGKILLed while a `sessionlog replicate` ships beside it, and the replicator
/// itself SIGKILLed and restarted: the restore holds every acknowledged event, verifies
/// clean and equals the source's log.
#[test]
fn writer_and_replicator_killed_mid_shipping() {
    let _g = serial();
    if skip() {
        return;
    }
    let endpoint = server().unwrap();
    let url = bucket_url("kill");
    let src = tempfile::tempdir().unwrap();
    let mut writer = std::process::Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .arg("--store")
        .arg(src.path())
        .args(["crash-writer", "--threads", "2"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let acks = Arc::new(std::sync::Mutex::new([0u64; 2]));
    let reader = {
        let out = writer.stdout.take().unwrap();
        let acks = acks.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let f: Vec<&str> = line.split_whitespace().collect();
                if let (Some(t), Some(s)) = (f.get(1), f.get(2)) {
                    let (t, s): (usize, u64) = (t.parse().unwrap(), s.parse().unwrap());
                    let mut a = acks.lock().unwrap();
                    a[t] = a[t].max(s + 1);
                }
            }
        })
    };
    assert!(wait_for(20, || acks
        .lock()
        .unwrap()
        .iter()
        .all(|n| *n > 20)));
    let mut rep = spawn_replicate(&url, endpoint, src.path());
    for pause in [700u64, 400, 900] {
        std::thread::sleep(Duration::from_millis(pause));
        signal(&rep, 9);
        rep.wait().unwrap();
        rep = spawn_replicate(&url, endpoint, src.path());
    }
    std::thread::sleep(Duration::from_millis(500));
    signal(&writer, 9);
    writer.wait().unwrap();
    reader.join().unwrap();
    let acked = *acks.lock().unwrap();
    std::thread::sleep(Duration::from_millis(800));
    signal(&rep, 2);
    let status = rep.wait().unwrap();
    let mut out = String::new();
    rep.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let mut err = String::new();
    rep.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "{status:?}\n{out}\n{err}");
    assert!(out.contains("stopped: shipped up to"), "{out}");
    let dst = tempfile::tempdir().unwrap();
    restore_cli(&url, endpoint, dst.path(), None);
    verify_clean(dst.path());
    let restored = counts(dst.path());
    for (t, n) in acked.iter().enumerate() {
        let got = restored
            .iter()
            .find(|(id, _)| *id == format!("w{t}"))
            .map_or(0, |x| x.1);
        assert!(got >= *n, "w{t}: {got} restored, {n} acknowledged");
    }
    assert_eq!(snapshot(src.path()), snapshot(dst.path()));
}

#[test]
fn gc_locally_then_restore_now_and_before_it() {
    let _g = serial();
    if skip() {
        return;
    }
    let endpoint = server().unwrap();
    let url = bucket_url("gc");
    let src = tempfile::tempdir().unwrap();
    let store = writable(src.path(), 16 << 10);
    let ids = ["g0", "g1", "g2", "g3", "g4"];
    append(&store, &ids, 40);
    let rep = store.replicate(target(&url, endpoint)).unwrap();
    assert!(wait_for(30, || rep.stats().caught_up() && rep.stats().manifests > 0));
    let before_gc = rep.stats().shipped_at.unwrap();
    let counts_before = counts(src.path());
    std::thread::sleep(Duration::from_millis(30));
    for id in &ids[1..] {
        store.delete_session(id).unwrap();
    }
    let report = store.gc(GcOptions::default(), &mut |_, _| {}).unwrap();
    assert!(!report.compacted.is_empty(), "{report:?}");
    append(&store, &["g0"], 20);
    let stats = rep.stop().unwrap();
    assert!(
        stats.generations >= 1,
        "a compacted segment is a new generation: {stats:?}"
    );
    store.close().unwrap();
    let dst = tempfile::tempdir().unwrap();
    restore(&target(&url, endpoint), None, dst.path().join("now")).unwrap();
    assert_eq!(snapshot(src.path()), snapshot(&dst.path().join("now")));
    // The generations before the GC are still there for a restore at an earlier time.
    restore(
        &target(&url, endpoint),
        Some(before_gc),
        dst.path().join("before"),
    )
    .unwrap();
    assert_eq!(counts(&dst.path().join("before")), counts_before);
    verify_clean(&dst.path().join("before"));
}

#[test]
fn a_session_restored_elsewhere_resumes_with_the_same_surface_and_messages() {
    let _g = serial();
    if skip() {
        return;
    }
    let endpoint = server().unwrap();
    let url = bucket_url("resume");
    let first = tempfile::tempdir().unwrap();
    let store = Store::open(first.path(), Config::default()).unwrap();
    {
        let s = store
            .create(SessionHeader::new("s1", 1_767_225_600_000))
            .unwrap();
        for turn in 1..=3 {
            s.append(TurnStart::new(turn)).unwrap();
            s.append(UserMessage::text(format!("question {turn}")))
                .unwrap();
            s.append(TurnEnd::completed(turn)).unwrap();
        }
        // A turn left open: the machine dies mid-turn.
        s.append(TurnStart::new(4)).unwrap();
        s.append(UserMessage::text("unanswered")).unwrap();
    }
    let rep = store.replicate(target(&url, endpoint)).unwrap();
    rep.stop().unwrap();
    store.abandon();
    let second = tempfile::tempdir().unwrap();
    restore(&target(&url, endpoint), None, second.path()).unwrap();
    // Both machines resume the session (crash closers) and go on the same way.
    let mut views = Vec::new();
    for dir in [first.path(), second.path()] {
        let store = Store::open(dir, Config::default()).unwrap();
        let s = store.resume("s1").unwrap();
        let resumed = format!("{:?}", s.messages().unwrap());
        // (A new user message gets an id minted from the clock: compare its shape only.)
        s.append(TurnStart::new(5)).unwrap();
        s.append(UserMessage::text("again")).unwrap();
        s.append(TurnEnd::completed(5)).unwrap();
        views.push((
            s.len(),
            s.surface().unwrap(),
            resumed,
            s.messages().unwrap().len(),
        ));
        store.close().unwrap();
    }
    assert_eq!(views[0], views[1]);
    assert!(views[0].0 > 11, "{views:?}");
}

#[test]
fn the_command_line_refuses_what_it_cannot_do_safely() {
    let _g = serial();
    if skip() {
        return;
    }
    let endpoint = server().unwrap();
    let url = bucket_url("cli");
    let src = tempfile::tempdir().unwrap();
    let store = writable(src.path(), 64 << 10);
    append(&store, &["k"], 30);
    store.close().unwrap();
    // Hostile or malformed URLs: refused before anything is sent, with the form to use.
    for bad in [
        "s3://b/../etc",
        "s3://b/a//b",
        "http://b/x",
        "s3://",
        "s3://b/x\u{1b}[2J",
    ] {
        let o = cli(&["replicate", "--to", bad, "--endpoint", endpoint])
            .status
            .code();
        let o2 = cli(&[
            "replicate",
            "--to",
            bad,
            "--endpoint",
            endpoint,
            src.path().to_str().unwrap(),
        ]);
        assert_eq!(o2.status.code(), Some(2), "{bad}");
        assert!(
            String::from_utf8_lossy(&o2.stderr).contains("s3://BUCKET/PREFIX"),
            "{bad}: {}",
            String::from_utf8_lossy(&o2.stderr)
        );
        assert_eq!(o, Some(2), "{bad}");
    }
    // Two replicators on one prefix: the second is refused while the first holds it.
    let mut first = spawn_replicate(&url, endpoint, src.path());
    let mut line = String::new();
    BufReader::new(first.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("replicating"), "{line}");
    let second = cli(&[
        "replicate",
        "--to",
        &url,
        "--endpoint",
        endpoint,
        src.path().to_str().unwrap(),
    ]);
    assert_eq!(second.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&second.stderr).contains("another replicator"));
    signal(&first, 15);
    assert!(first.wait().unwrap().success());
    // The lease was given back: a new replicator starts at once; `| head -1` ends it with 0.
    let mut piped = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{}' replicate --to '{url}' --endpoint '{endpoint}' --interval 50ms '{}' | head -1",
            env!("CARGO_BIN_EXE_sessionlog"),
            src.path().display()
        ))
        .envs(credentials())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = String::new();
    piped
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(out.starts_with("replicating"), "{out}");
    // head exited; the replicator meets the closed pipe at its next line (within 5 s) and
    // exits 0 after shipping.
    assert!(piped.wait().unwrap().success());
    // A restore from a prefix that holds nothing says to replicate first.
    let empty = cli(&[
        "restore",
        "--from",
        &format!("{url}-nothing"),
        "--endpoint",
        endpoint,
        src.path().join("r").to_str().unwrap(),
    ]);
    assert_eq!(empty.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&empty.stderr).contains("sessionlog replicate --to"));
}

/// The remote's own retention (format-spec.md §12.6) with a window of 300 ms: old manifests
/// and the generation a GC replaced go, and the newest restore is still whole.
#[test]
fn remote_retention_keeps_what_a_restore_needs() {
    let _g = serial();
    if skip() {
        return;
    }
    let endpoint = server().unwrap();
    let url = bucket_url("retain");
    let src = tempfile::tempdir().unwrap();
    let store = writable(src.path(), 16 << 10);
    let ids = ["r0", "r1", "r2"];
    append(&store, &ids, 60);
    let rep = store
        .replicate(target(&url, endpoint).retain(Duration::from_millis(300)))
        .unwrap();
    assert!(wait_for(30, || rep.stats().caught_up() && rep.stats().manifests > 0));
    let first = rep.stats().shipped_at.unwrap();
    store.delete_session("r1").unwrap();
    store.delete_session("r2").unwrap();
    let gc = store.gc(GcOptions::default(), &mut |_, _| {}).unwrap();
    assert!(!gc.compacted.is_empty(), "{gc:?}");
    for _ in 0..8 {
        append(&store, &["r0"], 5);
        std::thread::sleep(Duration::from_millis(150));
    }
    assert!(wait_for(30, || rep.stats().pruned > 0), "{:?}", rep.stats());
    let stats = rep.stop().unwrap();
    assert!(stats.generations >= 1, "{stats:?}");
    store.close().unwrap();
    // The manifest of the first round is gone: a restore at its time finds none.
    let dst = tempfile::tempdir().unwrap();
    let early = restore(
        &target(&url, endpoint),
        Some(first),
        dst.path().join("early"),
    );
    assert!(
        matches!(
            early,
            Err(sessionlog::replicate::ReplicateError::NoManifest(_))
        ),
        "{early:?}"
    );
    restore(&target(&url, endpoint), None, dst.path().join("now")).unwrap();
    assert_eq!(snapshot(src.path()), snapshot(&dst.path().join("now")));
}

/// A restore that fails part way (a part missing, then a part damaged) names the object,
/// and the same restore run again resumes: the segments it had checked are kept.
#[test]
fn an_interrupted_or_damaged_restore_is_reported_and_resumed() {
    use futures_util::TryStreamExt;
    use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
    let _g = serial();
    if skip() {
        return;
    }
    let endpoint = server().unwrap();
    let url = bucket_url("resume-restore");
    let src = tempfile::tempdir().unwrap();
    let store = writable(src.path(), 8 << 10);
    append(&store, &["m0", "m1", "m2", "m3"], 120);
    let rep = store.replicate(target(&url, endpoint)).unwrap();
    let stats = rep.stop().unwrap();
    store.close().unwrap();
    let last = stats.shipped.segment;
    assert!(last >= 3, "{stats:?}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (raw, prefix) = raw_store(&url, endpoint);
    let dir = object_store::path::Path::from(format!("{prefix}/segments/{last:020}"));
    let parts: Vec<_> = rt
        .block_on(raw.list(Some(&dir)).try_collect::<Vec<_>>())
        .unwrap();
    let part = parts[0].location.clone();
    let bytes = rt.block_on(async { raw.get(&part).await.unwrap().bytes().await.unwrap() });
    // The last segment's part goes missing: the restore fails naming it.
    rt.block_on(raw.delete(&part)).unwrap();
    let dst = tempfile::tempdir().unwrap();
    let err = restore(&target(&url, endpoint), None, dst.path()).unwrap_err();
    assert!(err.to_string().contains(&format!("{last:020}")), "{err}");
    // Damaged bytes: refused, naming the object.
    let mut flipped = bytes.to_vec();
    let at = flipped.len() - 3;
    flipped[at] ^= 0x20;
    rt.block_on(raw.put(&part, PutPayload::from(flipped)))
        .unwrap();
    let err = restore(&target(&url, endpoint), None, dst.path()).unwrap_err();
    assert!(
        err.to_string().contains("damaged") && err.to_string().contains(part.as_ref()),
        "{err}"
    );
    // The part is back: the restore resumes, keeping what it had downloaded and checked.
    rt.block_on(raw.put(&part, PutPayload::from(bytes)))
        .unwrap();
    let report = restore(&target(&url, endpoint), None, dst.path()).unwrap();
    assert_eq!(report.resumed_segments, last - 1, "{report:?}");
    assert!(report.downloaded < report.bytes, "{report:?}");
    assert_eq!(snapshot(src.path()), snapshot(dst.path()));
}
