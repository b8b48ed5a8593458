//! Shared helpers for tests that read `/work/shared/fixtures` (see its README.md).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The fixtures directory, or `None` (with a loud `SKIPPED` note) when it is absent.
pub fn fixtures_dir() -> Option<PathBuf> {
    super::shared_fixtures::shared_fixtures("dsh-sessions")
}

/// The placeholder substitution dsh's web test scaffold applies (fixtures/README.md):
/// `{{cwd}}` → `/home/agent/project`, `{{sessionId}}` → `ph-<base>`, other `{{name}}` → `ph-name`.
pub fn substitute(text: &str, base: &str) -> String {
    let text = text
        .replace("{{cwd}}", "/home/agent/project")
        .replace("{{sessionId}}", &format!("ph-{base}"));
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let name_len = after
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
            .count();
        if after[name_len..].starts_with("}}") {
            out.push_str("ph-");
            out.push_str(&after[..name_len]);
            rest = &after[name_len + 2..];
        } else {
            out.push_str("{{");
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// One row of `dsh-expected/INDEX.tsv`.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub file: String,
    pub jsonl_ok: bool,
    pub seed_ok: bool,
}

pub fn index(dir: &Path) -> Vec<Verdict> {
    let text = std::fs::read_to_string(dir.join("dsh-expected/INDEX.tsv")).unwrap();
    text.lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            Verdict {
                file: cols[0].to_owned(),
                jsonl_ok: cols[1] == "ok",
                seed_ok: cols[2] == "ok",
            }
        })
        .collect()
}

/// `dsh-expected/<name>.json` for a fixture file name (`<name>.jsonl`).
pub fn expected(dir: &Path, file: &str) -> serde_json::Value {
    let name = file.strip_suffix(".jsonl").unwrap_or(file);
    let text = std::fs::read_to_string(dir.join(format!("dsh-expected/{name}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The fixture's bytes after placeholder substitution.
pub fn fixture_text(dir: &Path, file: &str) -> String {
    let raw = std::fs::read_to_string(dir.join("dsh-sessions").join(file)).unwrap();
    substitute(&raw, file.strip_suffix(".jsonl").unwrap_or(file))
}

/// `MANIFEST.tsv` envelope column by file.
pub fn manifest(dir: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(dir.join("dsh-sessions/MANIFEST.tsv")).unwrap();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            Some((cols.first()?.to_string(), cols.last()?.to_string()))
        })
        .collect()
}
