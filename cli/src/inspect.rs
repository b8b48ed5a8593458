//! `sessionlog list` and `sessionlog show`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use super::output::{human, human_path, human_truncated, json_text, stdout_error};
use super::{CliResult, ShowArgs, iso_time, open_for_reading};
use sessionlog::SessionInfo;
use sessionlog::SurfaceOp;
use sessionlog::{write_event_line, write_header_line};

fn out_err(e: std::io::Error) -> Box<dyn std::error::Error> {
    stdout_error(e)
}

/// The widest an id is shown in the `list` table (a UUID fits), ellipsis included.
const MAX_ID_WIDTH: usize = 40;

/// `list [--json]`
pub fn list(store_dir: &Path, json: bool) -> CliResult {
    let store = open_for_reading(store_dir)?;
    let listed = store
        .list()
        .map_err(|e| with_advice(format!("listing failed: {e}")))?;
    let titles: Vec<Option<String>> = listed.iter().map(|l| title_of(&l.views)).collect();
    let sessions: Vec<SessionInfo> = listed.iter().map(|l| l.info.clone()).collect();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if json {
        let rows: Vec<serde_json::Value> = listed
            .iter()
            .map(|l| {
                let mut v = session_json(&l.info);
                if let Some(obj) = v.as_object_mut() {
                    obj.insert("title".into(), title_of(&l.views).into());
                    obj.insert("stats".into(), view_json(&l.views, "sessionStats"));
                }
                v
            })
            .collect();
        let text = serde_json::Value::Array(rows).to_string();
        writeln!(out, "{}", json_text(&text)).map_err(out_err)?;
    } else {
        // Long ids are cut with an ellipsis in the middle so the table stays readable
        // (`--json` has them whole); ids whose cut forms would look alike are shown whole.
        let mut ids: Vec<String> = sessions
            .iter()
            .map(|s| human_truncated(&s.header.id, MAX_ID_WIDTH, true))
            .collect();
        let mut uses: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for id in &ids {
            *uses.entry(id.as_str()).or_default() += 1;
        }
        let alike: Vec<bool> = ids.iter().map(|id| uses[id.as_str()] > 1).collect();
        for ((id, s), alike) in ids.iter_mut().zip(&sessions).zip(alike) {
            if alike {
                *id = human(&s.header.id).into_owned();
            }
        }
        let w = ids
            .iter()
            .map(|id| id.chars().count())
            .max()
            .unwrap_or(0)
            .max(7);
        writeln!(
            out,
            "{:<w$}  {:<32} {:>9} {:>8}  LAST ACTIVITY",
            "SESSION", "TITLE", "EVENTS", "SURFACE"
        )
        .map_err(out_err)?;
        for ((s, id), title) in sessions.iter().zip(&ids).zip(&titles) {
            let title = human_truncated(title.as_deref().unwrap_or("-"), 32, false);
            writeln!(
                out,
                "{:<w$}  {:<32} {:>9} {:>8}  {}",
                id,
                title,
                s.event_count,
                s.surface_len,
                last_activity(s)
            )
            .map_err(out_err)?;
        }
    }
    out.flush().map_err(out_err)?;
    Ok(ExitCode::SUCCESS)
}

/// The title view (a JSON string or `null`) as text.
fn title_of(views: &[(String, String)]) -> Option<String> {
    let (_, v) = views.iter().find(|(k, _)| k == "title")?;
    serde_json::from_str::<Option<String>>(v).ok().flatten()
}

/// A projection view as a JSON value (`null` when absent).
fn view_json(views: &[(String, String)], key: &str) -> serde_json::Value {
    views
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| serde_json::from_str(v).ok())
        .unwrap_or(serde_json::Value::Null)
}

fn last_activity(s: &SessionInfo) -> String {
    if s.event_count == 0 {
        "-".into()
    } else {
        iso_time(s.last_time)
    }
}

/// One session as `list --json` prints it.
fn session_json(s: &SessionInfo) -> serde_json::Value {
    serde_json::json!({
        "id": s.header.id,
        "title": null,
        "events": s.event_count,
        "surfaceSize": s.surface_len,
        "replaceGeneration": s.replace_generation,
        "lastActivity": if s.event_count == 0 { None } else { Some(s.last_time) },
        "lastActivityIso": if s.event_count == 0 { None } else { Some(iso_time(s.last_time)) },
        "createdAt": s.header.created_at,
        "cwd": s.header.cwd,
        "parentSession": s.header.parent_session,
        "owner": s.header.owner,
        "dataBytes": s.data_bytes,
    })
}

/// `show SESSION [--events|--messages|--surface] [--json]`
pub fn show(store_dir: &Path, args: &ShowArgs) -> CliResult {
    let store = open_for_reading(store_dir)?;
    let id = crate::output::session_id(&store, &args.session);
    let id = id.as_str();
    let Some(info) = store.sessions().into_iter().find(|s| s.header.id == id) else {
        return Err(format!(
            "session \"{}\" is not in the store {}; `sessionlog list` shows the sessions",
            human(id),
            human_path(store_dir)
        )
        .into());
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let read_err =
        |e: sessionlog::ReadError| with_advice(super::advice::about_session(id, "reading", &e));
    if args.events {
        let events = store.events(id, 0..info.event_count).map_err(read_err)?;
        if args.json {
            out.write_all(b"[").map_err(out_err)?;
        } else {
            writeln!(out, "{:>8}  {:<24}  {:<28}  SURFACE", "SEQ", "TIME", "TYPE")
                .map_err(out_err)?;
        }
        let mut line = String::new();
        for (i, e) in events.enumerate() {
            let e = e.map_err(read_err)?;
            if args.json {
                line.clear();
                write_event_line(&mut line, &e)
                    .map_err(|err| format!("session \"{id}\" seq {}: {err}", e.seq))?;
                let sep = if i == 0 { "\n" } else { ",\n" };
                write!(out, "{sep}{}", json_text(&line)).map_err(out_err)?;
            } else {
                let surface = match e.surface_op {
                    None => String::new(),
                    Some(SurfaceOp::Append) => "append".into(),
                    Some(SurfaceOp::Replace { start, end }) => format!("replace {start}..={end}"),
                };
                writeln!(
                    out,
                    "{:>8}  {:<24}  {:<28}  {surface}",
                    e.seq,
                    iso_time(e.time),
                    human(&e.kind)
                )
                .map_err(out_err)?;
            }
        }
        if args.json {
            out.write_all(b"\n]\n").map_err(out_err)?;
        }
    } else if args.messages {
        let messages = store.messages(id).map_err(read_err)?;
        if args.json {
            out.write_all(b"[").map_err(out_err)?;
            for (i, m) in messages.iter().enumerate() {
                let sep = if i == 0 { "\n" } else { ",\n" };
                write!(out, "{sep}{}", json_text(&m.json)).map_err(out_err)?;
            }
            out.write_all(b"\n]\n").map_err(out_err)?;
        } else {
            for m in &messages {
                let (role, text) = preview(&m.json);
                writeln!(out, "{:>8}  {:<10} {}", m.seq, human(&role), human(&text))
                    .map_err(out_err)?;
            }
        }
    } else if args.stats {
        let views = store.projection_views(id).map_err(read_err)?;
        if args.json {
            let obj: serde_json::Map<String, serde_json::Value> = views
                .iter()
                .map(|(k, _)| (k.clone(), view_json(&views, k)))
                .collect();
            let text = serde_json::Value::Object(obj).to_string();
            writeln!(out, "{}", json_text(&text)).map_err(out_err)?;
        } else {
            for (key, view) in &views {
                writeln!(out, "{:<14} {}", human(key), human(view)).map_err(out_err)?;
            }
        }
    } else if args.surface {
        let nodes = store.surface(id).map_err(read_err)?;
        if args.json {
            writeln!(out, "{}", serde_json::json!(nodes)).map_err(out_err)?;
        } else {
            // One pass over the session's events (each frame decoded once), not a read per
            // node.
            let wanted: std::collections::HashSet<u64> = nodes.iter().copied().collect();
            let end = nodes.iter().max().map_or(0, |last| last + 1);
            let mut kinds = std::collections::HashMap::with_capacity(nodes.len());
            for e in store.events(id, 0..end).map_err(read_err)? {
                let e = e.map_err(read_err)?;
                if wanted.contains(&e.seq) {
                    kinds.insert(e.seq, e.kind);
                }
            }
            for seq in nodes {
                let kind = kinds.get(&seq).map_or("", String::as_str);
                writeln!(out, "{seq:>8}  {}", human(kind)).map_err(out_err)?;
            }
        }
    } else {
        let header_line =
            write_header_line(&info.header).map_err(|e| format!("session \"{id}\": {e}"))?;
        let views = store.projection_views(id).map_err(read_err)?;
        let title = title_of(&views);
        if args.json {
            let mut v = session_json(&info);
            if let Some(obj) = v.as_object_mut() {
                obj.remove("id");
                obj.insert("title".into(), title.clone().into());
            }
            // The header exactly as dsh writes it, then our counters.
            let counters = v.to_string();
            let rest = counters.strip_prefix('{').unwrap_or(&counters);
            let sep = if rest == "}" { "" } else { "," };
            let text = format!(
                "{{\"id\":{},\"header\":{header_line}{sep}{rest}",
                serde_json::Value::String(id.to_owned())
            );
            writeln!(out, "{}", json_text(&text)).map_err(out_err)?;
        } else {
            let h = &info.header;
            let opt = |v: &Option<String>| human(v.as_deref().unwrap_or("-")).into_owned();
            writeln!(out, "session            {}", human(&h.id)).map_err(out_err)?;
            writeln!(out, "title              {}", opt(&title)).map_err(out_err)?;
            writeln!(
                out,
                "created            {} ({})",
                iso_time(h.created_at as i64),
                h.created_at
            )
            .map_err(out_err)?;
            writeln!(out, "cwd                {}", opt(&h.cwd)).map_err(out_err)?;
            writeln!(out, "parent session     {}", opt(&h.parent_session)).map_err(out_err)?;
            if let Some(n) = h.seed_length {
                writeln!(out, "seed length        {n}").map_err(out_err)?;
            }
            if let Some(o) = &h.origin {
                writeln!(out, "origin             {}", human(o)).map_err(out_err)?;
            }
            writeln!(
                out,
                "delegation depth   {}",
                h.delegation_depth.unwrap_or(0)
            )
            .map_err(out_err)?;
            if let Some(p) = &h.agent_preset {
                writeln!(out, "agent preset       {}", human(p)).map_err(out_err)?;
            }
            if let Some(o) = &h.owner {
                writeln!(out, "owner              {}", human(o)).map_err(out_err)?;
            }
            writeln!(out, "events             {}", info.event_count).map_err(out_err)?;
            writeln!(out, "data               {} bytes", info.data_bytes).map_err(out_err)?;
            writeln!(
                out,
                "surface            {} nodes (replace generation {})",
                info.surface_len, info.replace_generation
            )
            .map_err(out_err)?;
            writeln!(out, "last activity      {}", last_activity(&info)).map_err(out_err)?;
        }
    }
    out.flush().map_err(out_err)?;
    Ok(ExitCode::SUCCESS)
}

/// A message's role and the start of its first text block, for the text listing.
fn preview(json: &str) -> (String, String) {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
        return ("?".into(), truncate(json, 100));
    };
    let role = v["role"].as_str().unwrap_or("?").to_owned();
    let mut text = String::new();
    if let Some(blocks) = v["content"].as_array() {
        for b in blocks {
            let part = match b["type"].as_str() {
                Some("text") | Some("reasoning") => b["text"].as_str().map(str::to_owned),
                Some("tool-call") => {
                    Some(format!("[tool-call {}]", b["name"].as_str().unwrap_or("?")))
                }
                Some("tool-result") => Some("[tool-result]".to_owned()),
                Some(other) => Some(format!("[{other}]")),
                None => None,
            };
            if let Some(p) = part {
                if !text.is_empty() {
                    text.push(' ');
                }
                text.push_str(&p);
            }
            if text.len() > 100 {
                break;
            }
        }
    }
    (role, truncate(&text.replace('\n', " "), 100))
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max).collect();
        t.push('…');
        t
    }
}

/// Adds what to run next to a read failure, unless the error already says it.
fn with_advice(message: String) -> String {
    if message.contains("sessionlog verify") || message.contains("sessionlog recover") {
        message
    } else {
        format!("{message}; run `sessionlog verify`")
    }
}
