//! The command line tried as a new user would (issue 14): repeated session ids, a killed import
//! run again, a full disk, messages in CLI words, progress under a terminal, a deleted index, the
//! store directory an import may use, an interrupted tree export, the title, `demo --store`,
//! long ids, a `--store` that is a file. Real processes, assertions on what they print.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_sessionlog");

pub(crate) fn cli(store: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("SESSIONLOG_STORE")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub(crate) fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub(crate) fn ok(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout: {}\nstderr: {}",
        out(o),
        err(o)
    );
    out(o)
}

pub(crate) fn failed(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(2),
        "stdout: {}\nstderr: {}",
        out(o),
        err(o)
    );
    err(o)
}

/// A dsh JSONL session: a turn with a user message of `body_bytes` bytes, and a title.
fn session_text(id: &str, body_bytes: usize, title: &str) -> String {
    session_text_with(id, &"x".repeat(body_bytes), title)
}

/// `n` letters that do not compress (a linear congruential sequence seeded by `seed`).
fn noise(n: usize, seed: u64) -> String {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            char::from(b'a' + ((x >> 33) % 26) as u8)
        })
        .collect()
}

fn session_text_with(id: &str, body: &str, title: &str) -> String {
    let header = serde_json::json!({
        "type": "session", "version": 0, "id": id, "createdAt": 1000, "cwd": "/work",
        "delegationDepth": 0,
    });
    let message = serde_json::json!({
        "type": "user/message", "seq": 1, "time": 2, "surfaceOp": "append",
        "data": {"id": "u1", "role": "user",
                 "content": [{"type": "text", "text": body}],
                 "source": {"kind": "user"}},
    });
    let title = serde_json::json!({
        "type": "session/title", "seq": 2, "time": 3,
        "data": {"title": title, "messageSeqs": [1], "source": {"kind": "fallback"}},
    });
    [
        header.to_string(),
        r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#.to_owned(),
        message.to_string(),
        title.to_string(),
        r#"{"type":"turn/end","seq":3,"time":4,"data":{"turn":1,"reason":{"kind":"completed"}}}"#
            .to_owned(),
    ]
    .join("\n")
        + "\n"
}

/// Writes `session.jsonl` for `id` under `dir/<name>/`; returns its path.
fn write_session(dir: &Path, name: &str, id: &str, body_bytes: usize) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    let path = d.join("session.jsonl");
    std::fs::write(
        &path,
        session_text(id, body_bytes, &format!("Title of {id}")),
    )
    .unwrap();
    path
}

/// `n` sessions `s0000..` under `dir/src` whose messages do not compress; returns the root.
fn many_noisy_sessions(dir: &Path, n: usize, body_bytes: usize) -> PathBuf {
    let root = dir.join("src");
    for i in 0..n {
        let d = root.join(format!("p{i:04}"));
        std::fs::create_dir_all(&d).unwrap();
        let id = format!("s{i:04}");
        let text = session_text_with(&id, &noise(body_bytes, i as u64), &format!("Title of {id}"));
        std::fs::write(d.join("session.jsonl"), text).unwrap();
    }
    root
}

/// `n` sessions `s0000..` in a tree under `dir/src`; returns the tree's root.
pub(crate) fn many_sessions(dir: &Path, n: usize, body_bytes: usize) -> PathBuf {
    let root = dir.join("src");
    for i in 0..n {
        write_session(&root, &format!("p{i:04}"), &format!("s{i:04}"), body_bytes);
    }
    root
}

pub(crate) fn listed_ids(store: &Path) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(&ok(&cli(store, &["list", "--json"]))).unwrap();
    let mut ids: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

pub(crate) fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn repeated_ids_offer_a_choice_and_a_file_named_twice_is_read_once() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let a = write_session(tmp.path(), "a", "s1", 10);
    let b = write_session(tmp.path(), "b", "s1", 20);
    let c = write_session(tmp.path(), "c", "s2", 10);

    // Default: refused, the advice names the flag, and no store is left behind.
    let store = tmp.path().join("store");
    let e = failed(&cli(&store, &["import", s(&a), s(&b), s(&c)]));
    assert!(e.contains("session \"s1\" is in both"), "{e}");
    assert!(e.contains("--on-duplicate first-wins"), "{e}");
    assert!(e.contains("--on-duplicate skip"), "{e}");
    assert!(!store.exists(), "a refused import left {store:?}");

    // first-wins: the first file's copy (10 bytes of text), the repeat reported.
    let o = ok(&cli(
        &store,
        &[
            "import",
            "--on-duplicate",
            "first-wins",
            s(&a),
            s(&b),
            s(&c),
        ],
    ));
    assert!(
        o.contains(&format!(
            "skipped: session \"s1\" from {} (a repeat: the copy in {} was imported",
            b.display(),
            a.display()
        )),
        "{o}"
    );
    assert!(o.contains("imported 2 session(s)"), "{o}");
    assert_eq!(listed_ids(&store), ["s1", "s2"]);
    let messages = ok(&cli(&store, &["show", "s1", "--messages", "--json"]));
    assert!(
        messages.contains(&format!("\"{}\"", "x".repeat(10))),
        "{messages}"
    );

    // skip: no copy of s1.
    let store2 = tmp.path().join("store2");
    let o = ok(&cli(
        &store2,
        &["import", "--on-duplicate", "skip", s(&a), s(&b), s(&c)],
    ));
    for f in [&a, &b] {
        assert!(
            o.contains(&format!(
                "skipped: session \"s1\" from {} (in several files",
                f.display()
            )),
            "{o}"
        );
    }
    assert_eq!(listed_ids(&store2), ["s2"]);

    // One file named twice (directly and through its directory): read once, its own note,
    // no advice about different stores.
    let store3 = tmp.path().join("store3");
    let dir_a = a.parent().unwrap();
    let o = cli(&store3, &["import", s(&a), s(&a), s(dir_a), s(&c)]);
    let text = ok(&o);
    assert!(
        text.contains(&format!("note: {} was named more than once", a.display())),
        "{text}"
    );
    assert!(!err(&o).contains("different stores"), "{}", err(&o));
    assert_eq!(listed_ids(&store3), ["s1", "s2"]);

    // A bad policy name is refused by the parser with the choices.
    let e = failed(&cli(&store3, &["import", "--on-duplicate", "last", s(&c)]));
    assert!(e.contains("fail, first-wins or skip"), "{e}");
}

#[test]
fn a_killed_import_leaves_a_record_and_is_finished_with_skip_existing() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let n = 400;
    let src = many_sessions(tmp.path(), n, 2000);
    let store = tmp.path().join("store");
    let mut child = Command::new(BIN)
        .arg("--store")
        .arg(&store)
        .args(["import", s(&src)])
        .env_remove("SESSIONLOG_STORE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Each session is printed once it is durable: kill after a few.
    let mut reported = Vec::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while reported.len() < 5 {
        let Some(Ok(line)) = lines.next() else { break };
        if let Some(id) = line.split_whitespace().next()
            && line.starts_with("  ")
        {
            reported.push(id.to_owned());
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(reported.len(), 5, "the import printed no session lines");

    // What it printed is in the store.
    let got = listed_ids(&store);
    for id in &reported {
        assert!(
            got.contains(id),
            "{id} was reported imported but is not in {got:?}"
        );
    }
    if got.len() == n {
        eprintln!("the import finished before the kill; the rerun checks still apply");
    }

    // Run again as is: one summary line with a count and what to run, not one per session.
    let o = cli(&store, &["import", s(&src)]);
    let e = failed(&o);
    assert!(
        e.contains(&format!(
            "{} session(s) are already in the store",
            got.len()
        )),
        "{e}"
    );
    assert!(e.contains("--skip-existing"), "{e}");
    assert!(e.len() < 1500, "{} bytes of error: {e}", e.len());
    assert!(e.contains(" more)"), "{e}");

    // With --skip-existing it finishes.
    let o = ok(&cli(&store, &["import", "--skip-existing", s(&src)]));
    assert!(
        o.contains(&format!("imported {} session(s)", n - got.len())),
        "{o}"
    );
    assert_eq!(listed_ids(&store).len(), n);
    let v = cli(&store, &["verify"]);
    assert!(ok(&v).contains("clean"), "{}", out(&v));
}

#[test]
fn a_full_disk_names_the_cause_first_then_a_count_and_a_few_ids() {
    let _serial = crate::serial();
    if Command::new("prlimit").arg("--version").output().is_err() {
        eprintln!("skipped: `prlimit` is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let n = 300;
    let src = many_noisy_sessions(tmp.path(), n, 3000);
    let store = tmp.path().join("store");
    // A file-size limit well inside the log, reached by a segment write during the import
    // (the messages do not compress: about 70 sessions fill 200 KB of log, while the index
    // stays smaller).
    let o = Command::new("prlimit")
        .arg("--fsize=200000")
        .arg(BIN)
        .arg("--store")
        .arg(&store)
        .args(["import", s(&src)])
        .env_remove("SESSIONLOG_STORE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let e = failed(&o);
    assert!(
        e.starts_with(
            "sessionlog: error: a file-size limit was reached (File too large, os error 27"
        ),
        "{e}"
    );
    let second = e.lines().nth(1).unwrap_or("");
    assert!(
        second.starts_with("the import stopped there: ") && second.contains(" more"),
        "{e}"
    );
    assert!(e.contains("--skip-existing"), "{e}");
    assert!(!e.contains("Close the store"), "library advice: {e}");
    assert!(e.len() < 1000, "{} bytes of error: {e}", e.len());
    // Three ids named, not every one.
    // Three examples, and the session whose write failed: each id named once.
    assert_eq!(e.matches("\"s0").count(), 4, "{e}");
    assert!(
        e.contains("the session being written may be there too, whole"),
        "{e}"
    );

    // Without the limit, --skip-existing completes it.
    let o = ok(&cli(&store, &["import", "--skip-existing", s(&src)]));
    assert!(o.contains("imported "), "{o}");
    assert_eq!(listed_ids(&store).len(), n);
}

#[test]
fn messages_are_in_cli_words_and_name_a_session_once() {
    let _serial = crate::serial();
    // No library advice, Debug formatting or the missing README-cli.md in the CLI's sources.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("README-cli.md"),
            "{path:?} cites README-cli.md"
        );
        // (advice.rs holds the table that translates the library's phrases.)
        if path.ends_with("advice.rs") {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            let quoted = line.trim_start().starts_with('"') || line.contains("format!(\"");
            if quoted {
                for bad in ["RecoveryMode", "Reopen with", ":?}", "Config::"] {
                    assert!(
                        !line.contains(bad),
                        "{}:{}: {bad} in a message: {line}",
                        path.display(),
                        i + 1
                    );
                }
            }
        }
    }
    // A refused session names its id once, not "session "x": stored session "x" ...".
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.jsonl");
    let text = session_text("sid-once", 10, "t").replace(",\"surfaceOp\":\"append\"", "");
    assert!(!text.contains("surfaceOp"));
    std::fs::write(&bad, &text).unwrap();
    let e = failed(&cli(&tmp.path().join("store"), &["import", s(&bad)]));
    assert_eq!(e.matches("\"sid-once\"").count(), 1, "{e}");
    assert!(e.contains("line 3"), "{e}");
}

#[test]
fn import_and_export_show_counts_bytes_phase_and_rate_under_a_terminal() {
    let _serial = crate::serial();
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: `script` is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = many_sessions(tmp.path(), 60, 20_000);
    let store = tmp.path().join("store");
    let under_a_terminal = |args: &str| -> String {
        let o = Command::new("script")
            .args(["-qfec"])
            .arg(format!(
                "stty rows 40 cols 200; '{BIN}' --store '{}' {args}",
                store.display()
            ))
            .arg("/dev/null")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", err(&o));
        String::from_utf8_lossy(&o.stdout).replace('\r', "\n")
    };
    let screen = under_a_terminal(&format!("import '{}'", src.display()));
    let last = screen
        .lines()
        .rfind(|l| l.contains("importing ["))
        .unwrap_or_else(|| panic!("no import progress: {screen}"));
    // (The last update drawn: the bar redraws at most 20 times a second.)
    assert!(last.contains("/60 sessions"), "{last}");
    assert!(last.contains("/240 events"), "{last}");
    assert!(last.contains("/1.2 MB") && last.contains("B/s"), "{last}");
    assert!(screen.contains("checking ["), "{screen}");
    let out_dir = tmp.path().join("tree");
    let screen = under_a_terminal(&format!(
        "export --format jsonl --out '{}'",
        out_dir.display()
    ));
    let last = screen
        .lines()
        .rfind(|l| l.contains("export ["))
        .unwrap_or_else(|| panic!("no export progress: {screen}"));
    assert!(last.contains("/60 sessions"), "{last}");
    assert!(last.contains("/240 events"), "{last}");
    assert!(last.contains(" MB") && last.contains("B/s"), "{last}");
}

#[test]
fn a_deleted_index_is_rebuilt_in_memory_by_reads_and_on_disk_by_a_write_open() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let src = many_sessions(tmp.path(), 3, 10);
    let store = tmp.path().join("store");
    ok(&cli(&store, &["import", s(&src)]));
    std::fs::remove_file(store.join("index.redb")).unwrap();
    let exported = tmp.path().join("s0001.jsonl");
    for args in [
        vec!["list"],
        vec!["show", "s0001"],
        vec!["verify"],
        vec![
            "export",
            "--format",
            "jsonl",
            "--out",
            s(&exported),
            "s0001",
        ],
    ] {
        let o = cli(&store, &args);
        ok(&o);
        let e = err(&o);
        assert!(
            e.contains("index.redb) is missing: this command rebuilt it in memory")
                && e.contains("the next write open rebuilds it on disk (`sessionlog recover`"),
            "{args:?}: {e}"
        );
        assert!(
            !store.join("index.redb").exists(),
            "{args:?} wrote an index"
        );
    }
    assert_eq!(listed_ids(&store), ["s0000", "s0001", "s0002"]);
    assert!(
        std::fs::read_to_string(&exported)
            .unwrap()
            .contains("\"id\":\"s0001\"")
    );
    let r = ok(&cli(&store, &["recover"]));
    assert!(
        r.contains("index rebuilt from the log: index.redb was missing"),
        "{r}"
    );
    assert!(store.join("index.redb").exists());
    let o = cli(&store, &["list"]);
    ok(&o);
    assert!(err(&o).is_empty(), "{}", err(&o));
    // A healthy index is checked, and recover says what it did not read.
    let r = ok(&cli(&store, &["recover"]));
    assert!(
        r.contains("index checked: ") && r.contains("`sessionlog verify` reads every frame"),
        "{r}"
    );
    // A zero-length index (a crash while creating it) is rebuilt, and said so.
    std::fs::write(store.join("index.redb"), b"").unwrap();
    let r = ok(&cli(&store, &["recover"]));
    assert!(
        r.contains("index rebuilt from the log: index.redb was missing or empty"),
        "{r}"
    );
    assert_eq!(listed_ids(&store), ["s0000", "s0001", "s0002"]);
}

#[test]
fn import_uses_only_a_new_or_empty_directory_or_a_store_and_leaves_nothing_on_failure() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let good = write_session(tmp.path(), "good", "s1", 10);
    let dup = write_session(tmp.path(), "dup", "s1", 10);

    // A directory holding something else.
    let other = tmp.path().join("photos");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("cat.jpg"), b"meow").unwrap();
    let e = failed(&cli(&other, &["import", s(&good)]));
    assert!(e.contains("is neither empty nor a sessionlog store"), "{e}");
    assert!(e.contains("cat.jpg"), "{e}");
    let names: Vec<_> = std::fs::read_dir(&other)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["cat.jpg"]);

    // A file.
    let file = tmp.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let e = failed(&cli(&file, &["import", s(&good)]));
    assert!(e.contains("is a file"), "{e}");

    // A failed import into a new directory leaves none; into an empty one leaves it empty.
    let new = tmp.path().join("new");
    failed(&cli(&new, &["import", s(&good), s(&dup)]));
    assert!(!new.exists());
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    failed(&cli(&empty, &["import", s(&good), s(&dup)]));
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    ok(&cli(&empty, &["import", s(&good)]));
    assert_eq!(listed_ids(&empty), ["s1"]);

    // A failed import into an existing store leaves the store as it was.
    let other_session = write_session(tmp.path(), "x", "s2", 10);
    failed(&cli(&empty, &["import", s(&other_session), s(&good)]));
    assert_eq!(listed_ids(&empty), ["s1"]);
}

/// The hidden entries (names starting with `.`) directly in `dir`.
fn hidden(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

/// Every file under `dir`, relative.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        // (A directory may be renamed away while an export runs.)
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn an_interrupted_tree_export_leaves_no_partial_tree_and_the_next_one_cleans_up() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let n = 300;
    let src = many_sessions(tmp.path(), n, 2000);
    let store = tmp.path().join("store");
    ok(&cli(&store, &["import", s(&src)]));
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();

    for existing in [false, true] {
        let out_dir = work.join(if existing { "root" } else { "tree" });
        if existing {
            std::fs::create_dir(&out_dir).unwrap();
            std::fs::write(out_dir.join("keep.txt"), b"mine").unwrap();
        }
        let staging_parent = if existing {
            out_dir.clone()
        } else {
            work.clone()
        };
        let mut child = Command::new(BIN)
            .arg("--store")
            .arg(&store)
            .args(["export", "--format", "jsonl", "--out", s(&out_dir)])
            .env_remove("SESSIONLOG_STORE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Kill it once its staging directory holds a few sessions.
        let started = std::time::Instant::now();
        loop {
            let staged = hidden(&staging_parent)
                .iter()
                .map(|h| files_under(&staging_parent.join(h)).len())
                .sum::<usize>();
            if staged >= 5 || started.elapsed().as_secs() > 20 {
                break;
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
        }
        let _ = child.kill();
        child.wait().unwrap();
        let published: Vec<String> = files_under(&out_dir)
            .into_iter()
            .filter(|f| f != "keep.txt" && !f.starts_with('.'))
            .collect();
        let leftovers = hidden(&staging_parent);
        if leftovers.is_empty() {
            eprintln!("the export finished before the kill");
            assert_eq!(published.len(), n);
            continue;
        }
        // Killed: nothing under --out (no partial tree), only the hidden staging directory.
        assert_eq!(
            published,
            Vec::<String>::new(),
            "a partial tree was published"
        );
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
        assert!(leftovers[0].contains("sessionlog-export."), "{leftovers:?}");

        // Run again: the leftovers are removed (and said so) and the tree is complete.
        let o = cli(
            &store,
            &["export", "--format", "jsonl", "--out", s(&out_dir)],
        );
        ok(&o);
        assert!(
            err(&o).contains("left by an export that was interrupted"),
            "{}",
            err(&o)
        );
        assert_eq!(hidden(&staging_parent), Vec::<String>::new());
        let files = files_under(&out_dir);
        assert_eq!(
            files
                .iter()
                .filter(|f| f.ends_with("session.jsonl"))
                .count(),
            n,
            "{files:?}"
        );
        assert!(files.iter().all(|f| !f.contains("/.")), "{files:?}");
        if existing {
            assert_eq!(std::fs::read(out_dir.join("keep.txt")).unwrap(), b"mine");
        }
    }
}

#[test]
fn title_demo_store_long_ids_and_a_store_that_is_a_file() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let long_id = format!("id-{}-end", "a".repeat(93));
    assert_eq!(long_id.len(), 100);
    let a = write_session(tmp.path(), "a", "s1", 10);
    let b = write_session(tmp.path(), "b", &long_id, 10);
    let store = tmp.path().join("store");
    ok(&cli(&store, &["import", s(&a), s(&b)]));

    // The title: list --json, show --json and show agree.
    let list: serde_json::Value =
        serde_json::from_str(&ok(&cli(&store, &["list", "--json"]))).unwrap();
    let row = list
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "s1")
        .unwrap();
    assert_eq!(row["title"], "Title of s1");
    let show: serde_json::Value =
        serde_json::from_str(&ok(&cli(&store, &["show", "s1", "--json"]))).unwrap();
    assert_eq!(show["title"], "Title of s1");
    let shown = ok(&cli(&store, &["show", "s1"]));
    assert!(
        shown.contains("\ntitle              Title of s1\n"),
        "{shown}"
    );

    // A 100-character id: cut with an ellipsis in the table, whole in --json.
    let table = ok(&cli(&store, &["list"]));
    let line = table.lines().find(|l| l.starts_with("id-aaa")).unwrap();
    let shown_id = line.split("  ").next().unwrap();
    assert!(
        shown_id.contains('…') && shown_id.ends_with("aaa-end"),
        "{line}"
    );
    assert!(shown_id.chars().count() <= 40, "{line}");
    assert!(table.lines().all(|l| l.chars().count() < 130), "{table}");
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == long_id.as_str())
    );

    // A --store that is a file is called a file, by every command.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    for args in [
        vec!["list"],
        vec!["show", "s1"],
        vec!["verify"],
        vec!["recover"],
        vec!["export", "--format", "jsonl", "--out", "x.jsonl", "s1"],
        vec!["import", s(&a)],
    ] {
        let e = failed(&cli(&file, &args));
        assert!(e.contains("is a file"), "{args:?}: {e}");
        assert!(!e.contains("does not exist"), "{args:?}: {e}");
    }

    // demo --store keeps its store there; a non-empty directory is refused.
    let demo = tmp.path().join("demo");
    let o = ok(&cli(&demo, &["demo", "--turns", "2", "--sessions", "2"]));
    assert!(o.contains("kept"), "{o}");
    let ids = listed_ids(&demo);
    assert!(
        ids.contains(&"agent-0".to_owned()) && ids.contains(&"agent-1".to_owned()),
        "{ids:?}"
    );
    let e = failed(&cli(&demo, &["demo", "--turns", "2", "--sessions", "2"]));
    assert!(e.contains("is not empty"), "{e}");
    // $SESSIONLOG_STORE (meant for the other commands) is not where the demo writes.
    let o = Command::new(BIN)
        .args(["demo", "--turns", "2", "--sessions", "2"])
        .env("SESSIONLOG_STORE", &demo)
        .output()
        .unwrap();
    assert!(
        ok(&o).contains("(temporary; pass --store DIR to keep it)"),
        "{}",
        out(&o)
    );
    assert_eq!(listed_ids(&demo), ids);
}

#[test]
fn verify_names_a_missing_index_entry_in_words_not_debug_output() {
    use redb::ReadableTable;
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let src = many_sessions(tmp.path(), 3, 10);
    let store = tmp.path().join("store");
    ok(&cli(&store, &["import", s(&src)]));
    // Drop the index entry of the last run (CRCs stay valid: only a comparison with the log
    // finds it).
    {
        let db = redb::Database::open(store.join("index.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(sessionlog::index::EVENTS).unwrap();
            let last = t.last().unwrap().map(|(k, _)| *k.value()).unwrap();
            t.remove(&last).unwrap();
        }
        txn.commit().unwrap();
    }
    let o = cli(&store, &["verify"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", out(&o), err(&o));
    let report = out(&o);
    assert!(
        report.contains("the index entry for session \"s0002\" seq 0 is missing, not this frame"),
        "{report}"
    );
    for debug in ["Some(", "None", "Run {", "first_seq", "location:"] {
        assert!(!report.contains(debug), "Debug output {debug:?}: {report}");
    }
}

#[test]
fn a_last_segment_cut_below_what_its_writer_acknowledged_is_refused_then_salvaged() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let src = many_sessions(tmp.path(), 3, 10);
    let store = tmp.path().join("store");
    ok(&cli(&store, &["import", s(&src)]));
    // The last 40 bytes of the log go (an outsider's `truncate`): the import acknowledged them.
    let seg = store.join("segments/00000000000000000001.seg");
    let len = std::fs::metadata(&seg).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(len - 40).unwrap();
    drop(f);
    // verify and list (read-only: the index is ahead of the log) name the loss and say what
    // to run, changing nothing.
    for args in [&["verify"][..], &["list"][..]] {
        let o = cli(&store, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}{}", out(&o), err(&o));
        let e = err(&o);
        assert!(
            e.contains(&format!("up to segment 1 offset {len} as durable"))
                && e.contains("acknowledged frames are missing")
                && e.contains("`sessionlog recover --salvage` accepts the loss")
                && !e.contains("rebuilds"),
            "{args:?}: {e}"
        );
    }
    let o = cli(&store, &["recover"]);
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    let e = err(&o);
    assert!(
        e.contains(&format!("before segment 1 offset {len}"))
            && e.contains("acknowledged frames are missing")
            && e.contains("`sessionlog recover --salvage` accepts the loss"),
        "{e}"
    );
    assert_eq!(
        std::fs::metadata(&seg).unwrap().len(),
        len - 40,
        "nothing cut"
    );
    // The refused recover rebuilt the index from the log: reading commands answer what the
    // log still has and say what is missing (not "every acknowledged write").
    let o = cli(&store, &["list"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    let e = err(&o);
    assert!(
        e.contains("acknowledged frames are missing")
            && e.contains("`sessionlog recover --salvage` accepts the loss")
            && !e.contains("include every acknowledged write"),
        "{e}"
    );
    let report = ok(&cli(&store, &["recover", "--salvage"]));
    assert!(
        report.contains("acknowledged frames were missing: the log ended at segment 1 offset")
            && report.contains(&format!("before segment 1 offset {len}")),
        "{report}"
    );
    assert_eq!(listed_ids(&store), ["s0000", "s0001"]);
    ok(&cli(&store, &["recover"]));
    ok(&cli(&store, &["verify"]));
}

#[test]
fn a_session_id_with_control_characters_is_named_as_list_prints_it() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("nul.jsonl");
    std::fs::write(
        &src,
        "{\"type\":\"session\",\"version\":0,\"id\":\"a\\u0000b\\nc\",\"createdAt\":1767225600000,\"delegationDepth\":0}\n\
         {\"type\":\"turn/start\",\"seq\":0,\"time\":1767225600001,\"data\":{\"turn\":1}}\n",
    )
    .unwrap();
    let store = tmp.path().join("store");
    ok(&cli(&store, &["import", s(&src)]));
    let listed = ok(&cli(&store, &["list"]));
    let shown = r"a\u{0}b\nc";
    assert!(listed.contains(shown), "{listed}");
    let summary = ok(&cli(&store, &["show", shown]));
    assert!(summary.contains("events             1"), "{summary}");
    let events = ok(&cli(&store, &["show", shown, "--events", "--json"]));
    assert!(events.contains("\"seq\":0"), "{events}");
    assert!(ok(&cli(&store, &["verify", shown])).contains("clean"));
    let out_file = tmp.path().join("out.jsonl");
    ok(&cli(
        &store,
        &["export", "--format", "jsonl", "--out", s(&out_file), shown],
    ));
    let exported = std::fs::read_to_string(&out_file).unwrap();
    assert!(
        exported.starts_with("{\"type\":\"session\",\"version\":0,\"id\":\"a\\u0000b\\nc\""),
        "{exported}"
    );
    // An escape naming no session is still an unknown id, shown as typed.
    let o = cli(&store, &["show", r"a\u{1}b\nc"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("is not in the store"), "{}", err(&o));
    // Pinned as listed, it survives a retention that evicts everything else.
    let o = ok(&cli(
        &store,
        &["retain", "--max-sessions", "0", "--pin", shown],
    ));
    assert!(o.contains("0 session(s) evicted"), "{o}");
    assert_eq!(listed_ids(&store).len(), 1);
    ok(&cli(&store, &["delete", shown]));
    assert!(listed_ids(&store).is_empty());
}
