//! Retention policies (`Retention`, `Store::plan_retention` / `apply_retention`,
//! `Config::retention`): eviction by idle time, count and size, least recently active first,
//! pinned sessions never; a parent evicted under a live fork still reads through it.

use sessionlog::event::{Event, SessionHeader};
use sessionlog::store::{Config, Durability, Store};
use sessionlog::{EvictionReason, Retention};

use crate::common::read_all;

fn config() -> Config {
    Config::default().durability(Durability::Sync)
}

/// Sessions `s0..sN`, session `i` with `i + 1` events of 10 data bytes at time `(i + 1) * 1000`.
fn fill(store: &Store, n: usize) {
    for i in 0..n {
        let events: Vec<Event> = (0..=i as u64)
            .map(|seq| Event::new("x/tick", seq, (i as i64 + 1) * 1000, r#"{"n":12345}"#))
            .collect();
        store
            .create_verbatim(SessionHeader::new(format!("s{i}"), 0), events)
            .unwrap();
    }
}

fn ids(store: &Store) -> Vec<String> {
    let mut v: Vec<String> = store.sessions().into_iter().map(|s| s.header.id).collect();
    v.sort();
    v
}

#[test]
fn idle_count_and_size_evict_least_recently_active_first_and_never_a_pinned_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    fill(&store, 6);
    // Idle: last activity more than 2,500 ms before now = 5,000 -> s0 (1,000) and s1 (2,000).
    let plan = store.plan_retention(&Retention::default().max_idle_ms(2_500), 5_000);
    let got: Vec<(&str, EvictionReason)> = plan.iter().map(|e| (e.id.as_str(), e.reason)).collect();
    assert_eq!(
        got,
        [("s0", EvictionReason::Idle), ("s1", EvictionReason::Idle)]
    );
    assert_eq!(
        (plan[1].events, plan[1].data_bytes, plan[1].last_activity),
        (2, 22, 2_000)
    );
    // Planning changes nothing.
    assert_eq!(ids(&store).len(), 6);
    // Count: keep 3, s1 pinned -> s0, s2, s3 go (s1 counts but stays).
    let policy = Retention::default().max_sessions(3).pin("s1");
    let plan = store.plan_retention(&policy, 0);
    let got: Vec<&str> = plan.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(got, ["s0", "s2", "s3"]);
    // Size: 11 bytes per event, session i holds 11 * (i + 1): total 231; at most 120 -> the
    // oldest go until the rest fit: s0..s3 (11+22+33+44 = 110 gone, 121 left > 120) and s4.
    let plan = store.plan_retention(&Retention::default().max_bytes(120), 0);
    let got: Vec<&str> = plan.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(got, ["s0", "s1", "s2", "s3", "s4"]);
    assert!(plan.iter().all(|e| e.reason == EvictionReason::Size));
    // Applying deletes exactly the plan and reports each eviction as it happens.
    let mut seen = Vec::new();
    let done = store
        .apply_retention(&policy, 0, &mut |e| seen.push(e.id.clone()))
        .unwrap();
    assert_eq!(seen, ["s0", "s2", "s3"]);
    assert_eq!(done.len(), 3);
    assert_eq!(ids(&store), ["s1", "s4", "s5"]);
    // Durable: a reopen shows the same.
    drop(store);
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(ids(&store), ["s1", "s4", "s5"]);
    // An unlimited policy evicts nothing.
    assert!(Retention::default().is_unlimited());
    assert!(
        store
            .plan_retention(&Retention::default(), i64::MAX)
            .is_empty()
    );
}

#[test]
fn a_policy_in_the_config_applies_at_open_and_a_parent_evicted_under_a_fork_still_reads() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), config()).unwrap();
        fill(&store, 3);
        let mut child = SessionHeader::new("child", 0);
        child.parent_session = Some("s0".into());
        child.seed_length = Some(1);
        let c = store.fork_verbatim("s0", child, 1).unwrap();
        c.append_batch(vec![Event::new("x/tick", 1, 9_000, "{}")])
            .unwrap();
    }
    // Keep two sessions; the fork (last active at 9,000) and s2 stay.
    let policy = Retention::default().max_sessions(2);
    let store = Store::open(dir.path(), config().retention(policy)).unwrap();
    let evicted: Vec<&str> = store
        .evicted_at_open()
        .iter()
        .map(|e| e.id.as_str())
        .collect();
    assert_eq!(evicted, ["s0", "s1"]);
    assert_eq!(ids(&store), ["child", "s2"]);
    let child = read_all(&store, "child");
    assert_eq!(child.len(), 2);
    assert_eq!(
        child[0].data, r#"{"n":12345}"#,
        "the evicted parent's prefix still reads"
    );
    // A reader never applies the policy.
    drop(store);
    let reader = Store::open(
        dir.path(),
        config()
            .read_only(true)
            .retention(Retention::default().max_sessions(0)),
    )
    .unwrap();
    assert!(reader.evicted_at_open().is_empty());
    assert_eq!(ids(&reader), ["child", "s2"]);
}

/// A retention run is one operation: a simulated power loss after any file-system operation
/// of `apply_retention` leaves every session of its plan deleted, or none, and the others
/// whole.
#[test]
fn a_power_loss_anywhere_in_a_retention_run_evicts_its_whole_plan_or_nothing() {
    use sessionlog::fs::sim::{SimFaults, SimFs, SimOptions};
    let policy = Retention::default().max_sessions(4);
    let (mut crashes, mut none, mut all) = (0, 0, 0);
    for k in 0u64.. {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimFs::new(k, SimOptions::default());
        let config = config().with_fs(sim.clone());
        let store = Store::open(dir.path(), config.clone()).unwrap();
        fill(&store, 8);
        let plan: Vec<String> = store
            .plan_retention(&policy, 0)
            .into_iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(plan, ["s0", "s1", "s2", "s3"]);
        sim.set_faults(SimFaults {
            crash_after_ops: Some(k),
            ..SimFaults::default()
        });
        let result = store.apply_retention(&policy, 0, &mut |_| {});
        let crashed = sim.is_down();
        assert_eq!(result.is_err(), crashed, "after {k} operations: {result:?}");
        store.abandon();
        sim.crash();
        sim.restart_process();
        let store = Store::open(dir.path(), config).unwrap();
        let left = ids(&store);
        let evicted = plan.iter().filter(|id| !left.contains(id)).count();
        assert!(
            evicted == 0 || evicted == plan.len(),
            "crash after {k} operations: {evicted} of {plan:?} evicted, left {left:?}"
        );
        if !crashed {
            assert_eq!(evicted, plan.len());
            break;
        }
        for i in 4..8 {
            assert_eq!(store.len(&format!("s{i}")), Some(i as u64 + 1), "after {k}");
        }
        crashes += 1;
        if evicted == 0 { none += 1 } else { all += 1 }
    }
    assert!(
        crashes > 0 && none > 0,
        "crashes {crashes}, none {none}, all {all}"
    );
}
