//! Deterministic synthetic agent events, for tests, the crash harness, the demo and benchmarks.
//!
//! [`synthetic_event`] is a pure function of `(seq, salt)`: a process that appends it and a
//! process that checks the result after a crash agree on every byte without talking.

use crate::event::{Event, SurfaceOp};

/// The deterministic event `seq` of synthetic session `salt`: a cycle of `turn/start`,
/// `user/message` (surface), `assistant/chunk`, `tool/call` (0-5 KB) and `turn/end`.
pub fn synthetic_event(seq: u64, salt: u64) -> Event {
    let time = 1_767_225_600_000 + (seq as i64) * 7 - (salt as i64 % 3);
    match seq % 5 {
        0 => Event::new("turn/start", seq, time, format!(r#"{{"turn":{}}}"#, seq / 5 + 1)),
        1 => Event::new(
            "user/message",
            seq,
            time,
            format!(
                r#"{{"id":"m-{seq}","role":"user","content":[{{"type":"text","text":"hello {salt} \u00e9\ud800 {}"}}],"source":{{"kind":"user"}}}}"#,
                "x".repeat((seq * 37 % 300) as usize)
            ),
        )
        .with_surface_op(SurfaceOp::Append),
        2 => Event::new(
            "assistant/chunk",
            seq,
            time,
            format!(r#"{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"tok{seq}"}}}}"#),
        ),
        3 => Event::new(
            "tool/call",
            seq,
            time,
            format!(
                r#"{{"turn":1,"step":1,"callId":"c{seq}","name":"bash","arguments":"{}"}}"#,
                "y".repeat((seq * 131 % 5000) as usize)
            ),
        ),
        _ => Event::new("turn/end", seq, time, r#"{"turn":1,"reason":{"kind":"completed"}}"#),
    }
}
