//! Test-only loader for the dsh fixture logs (`/work/shared/fixtures`).
//!
//! Applies the placeholder substitution of `fixtures/README.md`, reads the header line and
//! the event lines, expands packed chunk rows (persistence §3) and fills `seq`/`time` for
//! replay fixtures. The JSONL reader proper (torn tails, header-line rules) lives in
//! `interop::jsonl`; this loader only feeds the session layer.
#![allow(dead_code)]

use sessionlog::event::SessionHeader;
use sessionlog::interop::chunk_rows::{ChunkKind, Codec, decode_row};
use sessionlog::json::{JsonLimits, JsonValue, parse, raw_member};
use sessionlog::session::RawDefects;
use sessionlog::session::load::{StoredEvent, parse_stored_event};
use std::path::{Path, PathBuf};

/// The fixture root, or `None` (with a loud `SKIPPED` note) when it is absent.
pub fn fixtures_root() -> Option<PathBuf> {
    super::shared_fixtures::shared_fixtures("dsh-sessions")
}

/// `{{cwd}}` → `/home/agent/project`, `{{sessionId}}` → `ph-<base>`, other `{{x}}` → `ph-x`.
pub fn substitute(text: &str, base: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("{{") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let name_len = after.find("}}").filter(|&j| {
            after[..j]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        });
        match name_len {
            Some(j) => {
                let name = &after[..j];
                match name {
                    "cwd" => out.push_str("/home/agent/project"),
                    "sessionId" => {
                        out.push_str("ph-");
                        out.push_str(base);
                    }
                    _ => {
                        out.push_str("ph-");
                        out.push_str(name);
                    }
                }
                rest = &after[j + 2..];
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A fixture log as the session layer sees it.
pub struct Fixture {
    /// File name without `.jsonl`.
    pub base: String,
    /// The header line's fields (`None` when the first line is not a session header).
    pub header: Option<SessionHeader>,
    /// Whether the header line has `version` and `delegationDepth` (JSONL requires both).
    pub header_complete: bool,
    /// The events (packed rows expanded, seq/time filled for replay fixtures).
    pub events: Vec<StoredEvent>,
    /// True when the lines carry `seq`/`time` (or `seq0`/`time0`).
    pub full_form: bool,
}

fn num(v: &JsonValue) -> Option<f64> {
    v.as_f64()
}

fn header_of(v: &JsonValue) -> Option<(SessionHeader, bool)> {
    if v.get("type").and_then(|t| t.as_str()) != Some("session") {
        return None;
    }
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
    let u = |k: &str| v.get(k).and_then(num).map(|n| n as u64);
    let complete = v.get("version").is_some() && v.get("delegationDepth").is_some();
    Some((
        SessionHeader {
            version: u("version").unwrap_or(0) as u32,
            id: s("id")?,
            created_at: u("createdAt").unwrap_or(0),
            cwd: s("cwd"),
            parent_session: s("parentSession"),
            seed_length: u("seedLength"),
            origin: s("origin"),
            delegation_depth: u("delegationDepth"),
            agent_preset: s("agentPreset"),
            owner: s("owner"),
            extra: Vec::new(),
        },
        complete,
    ))
}

/// Reads a fixture by file name (without `.jsonl`).
pub fn load_fixture(root: &Path, base: &str) -> Fixture {
    let path = root.join("dsh-sessions").join(format!("{base}.jsonl"));
    let raw = std::fs::read_to_string(&path).expect("fixture readable");
    let text = substitute(&raw, base);
    let limits = JsonLimits::default();
    let mut lines = text.split('\n').filter(|l| !l.trim().is_empty()).peekable();
    let mut header = None;
    let mut header_complete = false;
    if let Some(first) = lines.peek() {
        let v = parse(first, &limits).expect("header line is JSON");
        if let Some((h, complete)) = header_of(&v) {
            header = Some(h);
            header_complete = complete;
            lines.next();
        }
    }
    let mut events = Vec::new();
    let mut full_form = true;
    for line in lines {
        let v = parse(line, &limits).expect("event line is JSON");
        let tag = v.get("type").and_then(|t| t.as_str()).unwrap_or_default();
        let next = events.len() as u64;
        if let Some(kind) = ChunkKind::from_tag(tag) {
            // Packed rows expand through interop::chunk_rows (replay fixtures omit seq0/time0).
            if v.get("seq0").is_none() {
                full_form = false;
            }
            let seq0 = v
                .get("seq0")
                .and_then(num)
                .map_or(next as i64, |n| n as i64);
            let time0 = v.get("time0").and_then(num).map_or(0, |n| n as i64);
            let data = raw_member(line, &["data"])
                .expect("row JSON")
                .expect("row data");
            for member in decode_row(kind, seq0, time0, data, Codec::Jsonl).expect("valid row") {
                events.push(StoredEvent {
                    event: member,
                    defects: RawDefects::default(),
                });
            }
        } else {
            if v.get("seq").is_none() {
                full_form = false;
            }
            let fill = Some((next, 0));
            events.push(parse_stored_event(line, fill).expect("event object"));
        }
    }
    Fixture {
        base: base.to_string(),
        header,
        header_complete,
        events,
        full_form,
    }
}

/// All fixture names (without `.jsonl`), sorted.
pub fn fixture_names(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root.join("dsh-sessions"))
        .expect("fixture dir")
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter_map(|n| n.strip_suffix(".jsonl").map(str::to_string))
        .collect();
    names.sort();
    names
}

/// The expected outcome dsh recorded for a fixture.
pub fn expected(root: &Path, base: &str) -> JsonValue {
    let text = std::fs::read_to_string(root.join("dsh-expected").join(format!("{base}.json")))
        .expect("expected file");
    parse(&text, &JsonLimits::default()).expect("expected JSON")
}
