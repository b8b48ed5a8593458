//! Test-only builders for session events and an in-memory session (log + state).
#![allow(dead_code)]

use sessionlog::event::{Event, Seq, SurfaceOp};
use sessionlog::session::derive::MessageCache;
use sessionlog::session::invariants::InvariantMode;
use sessionlog::session::{AppendError, AppliedAppend, SessionState};

/// `{"id":…,"role":"user","content":[{"type":"text","text":…}],"source":{"kind":"user"}}`.
pub fn user_data(id: &str, text: &str) -> String {
    format!(
        r#"{{"id":"{id}","role":"user","content":[{{"type":"text","text":"{text}"}}],"source":{{"kind":"user"}}}}"#
    )
}

/// An assistant message's data with text content (empty `text` → empty content).
pub fn assistant_data(turn: u64, step: u64, id: &str, text: &str) -> String {
    let content = if text.is_empty() {
        "[]".to_string()
    } else {
        format!(r#"[{{"type":"text","text":"{text}"}}]"#)
    };
    format!(
        r#"{{"turn":{turn},"step":{step},"message":{{"id":"{id}","role":"assistant","content":{content},"source":{{"kind":"model","provider":"mock","model":"mock"}}}}}}"#
    )
}

/// An assistant message carrying tool-call blocks.
pub fn assistant_calls(turn: u64, step: u64, id: &str, calls: &[&str]) -> String {
    let blocks: Vec<String> = calls
        .iter()
        .map(|c| format!(r#"{{"type":"tool-call","id":"{c}","name":"bash","arguments":"{{}}"}}"#))
        .collect();
    format!(
        r#"{{"turn":{turn},"step":{step},"message":{{"id":"{id}","role":"assistant","content":[{}],"source":{{"kind":"model","provider":"mock","model":"mock"}}}}}}"#,
        blocks.join(",")
    )
}

/// A tool result's data.
pub fn tool_result_data(turn: u64, step: u64, call: &str, text: &str) -> String {
    format!(
        r#"{{"turn":{turn},"step":{step},"message":{{"id":"r-{call}","role":"user","content":[{{"type":"tool-result","toolCallId":"{call}","content":[{{"type":"text","text":"{text}"}}],"isError":false}}],"source":{{"kind":"tool","callId":"{call}"}}}}}}"#
    )
}

/// A `tool/call`'s data.
pub fn tool_call_data(turn: u64, step: u64, call: &str) -> String {
    format!(r#"{{"turn":{turn},"step":{step},"callId":"{call}","name":"bash","arguments":"{{}}"}}"#)
}

/// An `assistant/chunk` text delta.
pub fn chunk_data(turn: u64, step: u64, text: &str) -> String {
    format!(
        r#"{{"turn":{turn},"step":{step},"chunk":{{"type":"text-delta","index":0,"text":"{text}"}}}}"#
    )
}

/// A surface replace op.
pub fn replace(start: Seq, end: Seq) -> Option<SurfaceOp> {
    Some(SurfaceOp::Replace { start, end })
}

/// The append op.
pub fn app() -> Option<SurfaceOp> {
    Some(SurfaceOp::Append)
}

/// An event with explicit markers.
pub fn ev(
    kind: &str,
    seq: Seq,
    data: &str,
    op: Option<SurfaceOp>,
    sources: Option<Vec<Seq>>,
) -> Event {
    let mut e = Event::new(kind, seq, seq as i64, data);
    e.surface_op = op;
    e.source_event_seqs = sources;
    e
}

/// A session kept in memory: the log, the incremental state and a message cache.
pub struct Sess {
    /// The log.
    pub log: Vec<Event>,
    /// The state.
    pub state: SessionState,
    /// The derived-message cache.
    pub cache: MessageCache,
}

impl Sess {
    /// A session with invariants off (dsh's bare `Session`).
    pub fn new() -> Self {
        Sess::with_mode(InvariantMode::Off)
    }

    /// A session with the given invariant mode.
    pub fn with_mode(mode: InvariantMode) -> Self {
        Sess {
            log: Vec::new(),
            state: SessionState::with_invariants(mode),
            cache: MessageCache::new(),
        }
    }

    /// Appends through plan → push → apply.
    pub fn append(
        &mut self,
        kind: &str,
        data: &str,
        op: Option<SurfaceOp>,
        sources: Option<Vec<Seq>>,
    ) -> Result<AppliedAppend, AppendError> {
        let event = ev(kind, self.state.next_seq(), data, op, sources);
        let plan = self.state.plan_append(&event, &self.log)?;
        self.log.push(event);
        Ok(self.state.apply(plan).expect("fresh plan applies"))
    }

    /// Appends and panics on refusal.
    pub fn push(
        &mut self,
        kind: &str,
        data: &str,
        op: Option<SurfaceOp>,
        sources: Option<Vec<Seq>>,
    ) -> Seq {
        let seq = self.state.next_seq();
        self.append(kind, data, op, sources)
            .unwrap_or_else(|e| panic!("append {kind} refused: {e}"));
        seq
    }

    /// The surface nodes.
    pub fn nodes(&self) -> Vec<Seq> {
        self.state.surface().nodes().to_vec()
    }

    /// Derived messages (JSON texts), through the incremental cache.
    pub fn messages(&mut self) -> Vec<String> {
        self.cache
            .refresh(self.state.surface(), &self.log)
            .expect("derive");
        self.cache
            .messages()
            .iter()
            .map(|m| m.json.to_string())
            .collect()
    }
}
