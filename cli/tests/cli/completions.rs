//! Shell completions and the manual page generated from the clap definitions, and every
//! command (an import included) with its standard output closed early (`| head -1`).

use std::process::Command;

use crate::polish::listed_ids;
use crate::polish::{BIN, cli, err, failed, many_sessions, ok, s};

/// The visible commands, as `sessionlog --help` lists them.
const COMMANDS: [&str; 10] = [
    "demo",
    "bench",
    "import",
    "export",
    "list",
    "show",
    "verify",
    "recover",
    "completions",
    "man",
];

#[test]
fn completions_and_the_manual_page_cover_every_command() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("unused");
    let help = ok(&cli(&store, &["--help"]));
    for c in COMMANDS {
        assert!(
            help.contains(&format!("\n  {c} ")),
            "{c} not in --help: {help}"
        );
    }
    for (shell, checker) in [("bash", "bash"), ("zsh", "zsh"), ("fish", "fish")] {
        let script = ok(&cli(&store, &["completions", shell]));
        for c in COMMANDS {
            assert!(script.contains(c), "{shell}: {c} missing");
        }
        assert!(script.contains("on-duplicate"), "{shell}: flags missing");
        // The shell parses it, when that shell is installed.
        let path = tmp.path().join(format!("completion.{shell}"));
        std::fs::write(&path, &script).unwrap();
        if let Ok(o) = Command::new(checker).arg("-n").arg(&path).output() {
            assert!(o.status.success(), "{shell} -n: {}", err(&o));
        }
    }
    let e = failed(&cli(&store, &["completions", "tcsh"]));
    assert!(e.contains("bash"), "{e}");

    let page = ok(&cli(&store, &["man"]));
    assert!(page.contains(".TH sessionlog 1"), "{page}");
    for c in COMMANDS {
        assert!(
            page.contains(&format!(".SH \"SESSIONLOG {}\"", c.to_uppercase())),
            "{c} has no section"
        );
    }
    assert!(page.contains("on\\-duplicate"), "import's flags missing");
    let roff = tmp.path().join("sessionlog.1");
    std::fs::write(&roff, &page).unwrap();
    if let Ok(o) = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(&roff)
        .output()
    {
        assert!(
            o.status.success() && o.stderr.is_empty(),
            "groff: {}",
            err(&o)
        );
    }
    let dir = tmp.path().join("man1");
    ok(&cli(&store, &["man", "--out-dir", s(&dir)]));
    for name in [
        "sessionlog.1",
        "sessionlog-import.1",
        "sessionlog-completions.1",
    ] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{name}");
    }
    assert!(!store.exists(), "completions or man touched the store");
}

#[test]
fn an_import_whose_stdout_is_closed_still_imports_everything() {
    let _serial = crate::serial();
    let tmp = tempfile::tempdir().unwrap();
    let src = many_sessions(tmp.path(), 50, 100);
    let store = tmp.path().join("store");
    // pipefail: the status is sessionlog's, not head's.
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; '{BIN}' --store '{}' import '{}' | head -1",
            store.display(),
            src.display()
        ))
        .output()
        .unwrap();
    let first = ok(&o);
    assert!(first.starts_with("  s0000  4 events  jsonl  "), "{first}");
    assert_eq!(first.lines().count(), 1);
    assert_eq!(listed_ids(&store).len(), 50);
    // Every other command ends quietly too.
    for args in [
        vec!["list"],
        vec!["show", "s0001", "--events"],
        vec!["completions", "bash"],
        vec!["man"],
    ] {
        let o = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "set -o pipefail; '{BIN}' --store '{}' {} | head -1 >/dev/null",
                store.display(),
                args.join(" ")
            ))
            .output()
            .unwrap();
        ok(&o);
        assert!(err(&o).is_empty(), "{args:?}: {}", err(&o));
    }
}
