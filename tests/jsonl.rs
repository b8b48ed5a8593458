//! dsh's JSONL format: fixtures dsh wrote (plain and zstd) read and written back byte for
//! byte, dsh's refusals reproduced, and the torn-tail, scanner and path vectors of
//! dsh-persistence-formats §4 and §9.

#[path = "common/jsonl_fixtures.rs"]
mod fx;

use sessionlog::interop::jsonl::{self, ReadOptions, WriteOptions};

#[test]
fn dsh_loadable_fixtures_round_trip_byte_for_byte() {
    let Some(dir) = fx::fixtures_dir() else {
        return;
    };
    let mut checked = 0;
    let mut torn = 0;
    let mut failures = Vec::new();
    for v in fx::index(&dir).iter().filter(|v| v.jsonl_ok) {
        let text = fx::fixture_text(&dir, &v.file);
        let log = match jsonl::read(text.as_bytes(), &ReadOptions::default()) {
            Ok(log) => log,
            Err(e) => {
                failures.push(format!("{}: refused: {e}", v.file));
                continue;
            }
        };
        let exp = fx::expected(&dir, &v.file);
        if Some(log.events.len() as u64) != exp["event_count"].as_u64() {
            failures.push(format!(
                "{}: {} events, dsh {}",
                v.file,
                log.events.len(),
                exp["event_count"]
            ));
        }
        if !log.non_canonical.is_empty() {
            failures.push(format!("{}: non-canonical {:?}", v.file, log.non_canonical));
        }
        // dsh loads some projected files as "ok" by cutting everything after the header as a
        // tolerated torn tail (no turn/end follows the first defect); the committed prefix is
        // then what a rewrite must reproduce.
        let committed = match &log.torn {
            Some(t) => {
                torn += 1;
                assert!(
                    t.reason
                        .starts_with("seq gap in committed region at line 1"),
                    "{}: {t:?}",
                    v.file
                );
                &text.as_bytes()[..t.truncate_to as usize]
            }
            None => text.as_bytes(),
        };
        let text = std::str::from_utf8(committed).unwrap();
        let out = jsonl::write(
            &log.header,
            &log.events,
            &log.batches,
            &WriteOptions::default(),
        )
        .unwrap();
        if out != text.as_bytes() {
            let at = out
                .iter()
                .zip(text.as_bytes())
                .take_while(|(a, b)| a == b)
                .count();
            failures.push(format!(
                "{}: rewrite differs at byte {at}: {:?} vs {:?}",
                v.file,
                String::from_utf8_lossy(
                    &text.as_bytes()[at.saturating_sub(40)..(at + 40).min(text.len())]
                ),
                String::from_utf8_lossy(&out[at.saturating_sub(40)..(at + 40).min(out.len())]),
            ));
        }
        checked += 1;
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 70, "only {checked} fixtures checked");
    assert_eq!(torn, 2, "two projected files load as header-only in dsh");
}

#[test]
fn dsh_refused_fixtures_are_refused_with_dsh_reason() {
    let Some(dir) = fx::fixtures_dir() else {
        return;
    };
    let mut failures = Vec::new();
    let mut checked = 0;
    for v in fx::index(&dir).iter().filter(|v| !v.jsonl_ok) {
        let text = fx::fixture_text(&dir, &v.file);
        let exp = fx::expected(&dir, &v.file);
        let dsh = exp["jsonl_load"]["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        match jsonl::read(text.as_bytes(), &ReadOptions::default()) {
            Ok(_) => failures.push(format!("{}: accepted, dsh refused: {dsh}", v.file)),
            Err(e) => {
                if !e.to_string().starts_with(&dsh) {
                    failures.push(format!("{}: ours: {e}\n   dsh: {dsh}", v.file));
                }
            }
        }
        checked += 1;
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 30, "only {checked} fixtures checked");
}
