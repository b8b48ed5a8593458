//! Test helpers for the SQLite interop tests: fixture discovery, dsh's placeholder
//! substitution, an independent JSONL reader (serde_json values, packed rows expanded), and
//! table dumps for row-by-row comparison of databases.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags};
use serde_json::{Map, Value as Json, json};
use sessionlog::event::{Event, SurfaceOp};

/// `../shared/fixtures`, or `None` (with a loud `SKIPPED` note) when absent.
pub fn fixtures() -> Option<PathBuf> {
    super::shared_fixtures::shared_fixtures("")
}

/// The `.db` files of `dsh-written/<version_dir>`, sorted, with their fixture base names.
pub fn written_dbs(fixtures: &Path, version_dir: &str) -> Vec<(String, PathBuf)> {
    let dir = fixtures.join("dsh-written").join(version_dir);
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "db"))
        .map(|p| {
            let base = p.file_stem().unwrap().to_string_lossy().into_owned();
            (base, p)
        })
        .collect();
    out.sort();
    out
}

/// dsh's web-test placeholder substitution (fixtures/README.md).
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

/// The header and logical events of a `full` JSONL fixture, as serde_json values, after
/// placeholder substitution, with packed rows expanded the way dsh's JSONL codec does.
pub fn jsonl_events(fixtures: &Path, base: &str) -> (Json, Vec<Json>) {
    let path = fixtures.join("dsh-sessions").join(format!("{base}.jsonl"));
    let text = substitute(&std::fs::read_to_string(&path).unwrap(), base);
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Json = serde_json::from_str(lines.next().unwrap()).unwrap();
    let mut events = Vec::new();
    for line in lines {
        let record: Json = serde_json::from_str(line).unwrap();
        let tag = record["type"].as_str().unwrap().to_owned();
        if !tag.ends_with("-chunks") {
            events.push(record);
            continue;
        }
        let data = &record["data"];
        let members = if tag == "tool-call-chunks" {
            data["args"].as_array().unwrap()
        } else {
            data["texts"].as_array().unwrap()
        };
        let seq0 = record["seq0"].as_u64().unwrap();
        let mut time = record["time0"].as_i64().unwrap();
        for (k, member) in members.iter().enumerate() {
            if k > 0 {
                time += data["dt"][k - 1].as_i64().unwrap();
            }
            let chunk = match tag.as_str() {
                "text-chunks" => json!({"type":"text-delta","index":data["index"],"text":member}),
                "reasoning-chunks" => {
                    json!({"type":"reasoning-delta","index":data["index"],"text":member})
                }
                _ => {
                    let mut c = Map::new();
                    c.insert("type".into(), json!("tool-call-delta"));
                    c.insert("index".into(), data["index"].clone());
                    c.insert("id".into(), data["id"].clone());
                    if let Some(name) = data.get("name") {
                        c.insert("name".into(), name.clone());
                    }
                    c.insert("argumentsDelta".into(), member.clone());
                    Json::Object(c)
                }
            };
            events.push(json!({
                "type": "assistant/chunk",
                "seq": seq0 + k as u64,
                "time": time,
                "data": {"turn": data["turn"], "step": data["step"], "chunk": chunk},
            }));
        }
    }
    (header, events)
}

/// An engine event as the JSON envelope dsh would hold in memory.
pub fn event_json(e: &Event) -> Json {
    let mut m = Map::new();
    m.insert("type".into(), json!(e.kind));
    m.insert("seq".into(), json!(e.seq));
    m.insert("time".into(), json!(e.time));
    m.insert(
        "data".into(),
        serde_json::from_str(&e.data).unwrap_or_else(|err| panic!("seq {}: {err}", e.seq)),
    );
    if let Some(s) = &e.source_event_seqs {
        m.insert("sourceEventSeqs".into(), json!(s));
    }
    if let Some(op) = e.surface_op {
        m.insert(
            "surfaceOp".into(),
            match op {
                SurfaceOp::Append => json!("append"),
                SurfaceOp::Replace { start, end } => {
                    json!({"op":"replace","start":start,"end":end})
                }
            },
        );
    }
    if e.ignorable {
        m.insert("ignorable".into(), json!(true));
    }
    Json::Object(m)
}

/// The parsed `dsh-expected/<base>.json`.
pub fn expected(fixtures: &Path, base: &str) -> Json {
    let path = fixtures.join("dsh-expected").join(format!("{base}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Opens a database read-only.
pub fn open_ro(path: &Path) -> Connection {
    Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
}

/// Every row of `table` (rowid first, then the columns in table order), in rowid order, with
/// each value's storage class kept (TEXT and BLOB stay distinct). Columns named in `skip` are
/// replaced by `Null` (random UUIDs).
pub fn dump_table(conn: &Connection, table: &str, skip: &[&str]) -> Vec<Vec<Value>> {
    let mut stmt = conn
        .prepare(&format!(
            "SELECT rowid AS rowid_, * FROM {table} ORDER BY rowid"
        ))
        .unwrap();
    let names: Vec<String> = stmt.column_names().map(|s| s.to_string()).collect();
    stmt.query_map([], |row| {
        Ok((0..names.len())
            .map(|i| {
                if skip.contains(&names[i].as_str()) {
                    Value::Null
                } else {
                    row.get::<_, Value>(i).unwrap()
                }
            })
            .collect())
    })
    .unwrap()
    .map(|r| r.unwrap())
    .collect()
}

/// `(type, name, tbl_name, rootpage, sql)` of every schema object, in rowid order.
pub fn dump_schema(conn: &Connection) -> Vec<Vec<Value>> {
    dump_table(conn, "sqlite_schema", &[])
}

/// Runs `python3 -c script args...`; `None` (with a note) when python3 is missing.
pub fn python(script: &str, args: &[&str]) -> Option<std::process::Output> {
    match std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
    {
        Ok(out) => Some(out),
        Err(e) => {
            eprintln!("skipping the python3 second reader: {e}");
            None
        }
    }
}

/// A Python script printing, for each database path argument, its identity, pragmas,
/// integrity, schema rows and store ids as JSON (the second reader).
pub const PYTHON_CHECK: &str = r#"
import json, sqlite3, sys
out = {}
for path in sys.argv[1:]:
    c = sqlite3.connect('file:' + path + '?mode=ro', uri=True)
    q = lambda s: c.execute(s).fetchall()
    out[path] = {
        'application_id': q('PRAGMA application_id')[0][0],
        'user_version': q('PRAGMA user_version')[0][0],
        'journal_mode': q('PRAGMA journal_mode')[0][0],
        'page_size': q('PRAGMA page_size')[0][0],
        'encoding': q('PRAGMA encoding')[0][0],
        'auto_vacuum': q('PRAGMA auto_vacuum')[0][0],
        'integrity': q('PRAGMA integrity_check')[0][0],
        'foreign_key_violations': len(q('PRAGMA foreign_key_check')),
        'schema': [list(r) for r in q('SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid')],
        'store_ids': [r[0] for r in q('SELECT store_id FROM persistence_state')],
        'sessions': q('SELECT COUNT(*) FROM sessions')[0][0],
    }
    c.close()
print(json.dumps(out))
"#;
