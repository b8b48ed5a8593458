//! The one way a test finds dsh's fixtures (`../shared/fixtures`, beside the repository; see
//! its README.md) and the one way it says so when they are absent: a loud `SKIPPED` line on
//! stderr naming the test, never a silent pass.
//!
//! Every test binary of the workspace uses this file: the root's as `common::shared_fixtures`,
//! the members' (`cli/`, `bench/`) through `#[path]`. The repository root is found from the
//! package's manifest directory, so the path is the same from every member.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

/// `<repository>/../shared/fixtures`, whether or not it exists.
pub fn shared_fixtures_path() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The repository root holds `format-spec.md`; members sit one or two levels below it.
    let repo = manifest
        .ancestors()
        .find(|dir| dir.join("format-spec.md").is_file())
        .unwrap_or(manifest);
    repo.join("../shared/fixtures")
}

/// The fixtures root if `<root>/<needs>` is a directory (`needs` = `""` for the root itself);
/// otherwise prints a loud `SKIPPED` note naming the running test and returns `None`.
pub fn shared_fixtures(needs: &str) -> Option<PathBuf> {
    let root = shared_fixtures_path();
    let dir = if needs.is_empty() {
        root.clone()
    } else {
        root.join(needs)
    };
    if dir.is_dir() {
        Some(root)
    } else {
        skipped(&dir);
        None
    }
}

/// Prints the `SKIPPED` note for a test that needed `missing`. Written to the process's stderr
/// directly, not with `eprintln!`, which the test harness captures (and hides for a test that
/// passes): the note shows in a plain `cargo test`.
pub fn skipped(missing: &Path) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let note = format!(
        "\n*** SKIPPED {test}: {} not found; this test checked nothing against dsh's \
         fixtures (put them at ../shared/fixtures beside the repository to run it) ***\n",
        missing.display()
    );
    let _ = std::io::stderr().write_all(note.as_bytes());
}
