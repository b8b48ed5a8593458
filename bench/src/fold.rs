//! The surface fold every peer runs after loading a session: dsh's surface transitions
//! (append; replace by position) and message derivation, over a stream of events, keeping
//! only the data of nodes still on the surface (memory is bounded by the surface, not the log).
//!
//! This is the benchmark's stand-in for the session layer's fold, so that every peer does the
//! same work after reading; it does not validate (the stores validated at append).

use std::collections::HashMap;

use sessionlog::event::{Event, Seq, SurfaceOp};
use sessionlog::json::{self, JsonValue};

use super::peers::BenchResult;

/// The payload of a surface node, as the peer holds it.
#[derive(Debug, Clone)]
pub enum Message {
    /// `data` as JSON text (sessionlog, redb).
    Text(String),
    /// `data` as a parsed value (SQLite, which parses every row's data as dsh does).
    Value(JsonValue),
    /// A parsed JSONL line holding `data` (JSONL, which parses every line as dsh does).
    Line(JsonValue),
}

/// Folds events into the surface.
#[derive(Debug, Default)]
pub struct SurfaceFold {
    nodes: Vec<Seq>,
    data: HashMap<Seq, (Kind, Message)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    User,
    Assistant,
    ToolResult,
}

fn kind_of(kind: &str) -> Option<Kind> {
    match kind {
        "user/message" => Some(Kind::User),
        "assistant/message" => Some(Kind::Assistant),
        "tool/result" => Some(Kind::ToolResult),
        _ => None,
    }
}

impl SurfaceFold {
    fn apply(&mut self, seq: Seq, kind: Kind, op: SurfaceOp, message: Message) -> BenchResult<()> {
        match op {
            SurfaceOp::Append => self.nodes.push(seq),
            SurfaceOp::Replace { start, end } => {
                let a = self.nodes.iter().position(|s| *s == start);
                let b = self.nodes.iter().position(|s| *s == end);
                let (Some(a), Some(b)) = (a, b) else {
                    return Err(
                        format!("seq {seq}: replace {start}..{end} not found in surface").into(),
                    );
                };
                if a > b {
                    return Err(format!("seq {seq}: replace start after end").into());
                }
                for s in self.nodes.splice(a..=b, [seq]) {
                    self.data.remove(&s);
                }
            }
        }
        self.data.insert(seq, (kind, message));
        Ok(())
    }

    /// Folds an event whose `data` is JSON text.
    pub fn apply_text(&mut self, e: &Event) -> BenchResult<()> {
        if let (Some(kind), Some(op)) = (kind_of(&e.kind), e.surface_op) {
            self.apply(e.seq, kind, op, Message::Text(e.data.clone()))?;
        }
        Ok(())
    }

    /// Folds an event whose `data` (or whole line) was parsed.
    pub fn apply_value(
        &mut self,
        seq: Seq,
        kind: &str,
        op: Option<SurfaceOp>,
        parsed: Message,
    ) -> BenchResult<()> {
        if let (Some(kind), Some(op)) = (kind_of(kind), op) {
            self.apply(seq, kind, op, parsed)?;
        }
        Ok(())
    }

    /// The surface length and the number of derived messages (an assistant message with
    /// empty content is a node that derives nothing).
    pub fn finish(self) -> (usize, usize) {
        let mut messages = 0;
        for seq in &self.nodes {
            let Some((kind, data)) = self.data.get(seq) else {
                continue;
            };
            let derived = match (kind, data) {
                (Kind::User, _) => true,
                (k, Message::Text(text)) => match json::raw_member(text, &["message", "content"]) {
                    Ok(Some(content)) => *k != Kind::Assistant || content.trim() != "[]",
                    _ => false,
                },
                (k, Message::Value(v) | Message::Line(v)) => {
                    let data = if matches!(data, Message::Line(_)) {
                        v.get("data")
                    } else {
                        Some(v)
                    };
                    match data
                        .and_then(|d| d.pointer(&["message", "content"]))
                        .and_then(JsonValue::as_array)
                    {
                        Some(content) => *k != Kind::Assistant || !content.is_empty(),
                        None => false,
                    }
                }
            };
            messages += usize::from(derived);
        }
        (self.nodes.len(), messages)
    }
}
