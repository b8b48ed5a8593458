//! Fork (§8), the pure part: boundary validation, the child header, `seedLength` and the
//! `session/end-seed` decision. The store checks the ids (child already exists, source not
//! found / not live) with [`ForkError`]'s constructors, then calls [`plan_fork`].

use super::EventLookup;
use super::header::fork_child_header;
use super::state::SessionState;
use crate::event::{MAX_SAFE_INTEGER, Seq, SessionHeader};
use crate::json::Doc;
use thiserror::Error;

/// dsh's `SessionForkError` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ForkErrorCode {
    /// `SESSION_NOT_FOUND`.
    SessionNotFound,
    /// `SESSION_NOT_LIVE`.
    SessionNotLive,
    /// `SESSION_ALREADY_EXISTS`.
    SessionAlreadyExists,
    /// `INVALID_BOUNDARY`.
    InvalidBoundary,
    /// `OPEN_TURN`.
    OpenTurn,
}

impl ForkErrorCode {
    /// dsh's code string.
    pub fn as_str(self) -> &'static str {
        match self {
            ForkErrorCode::SessionNotFound => "SESSION_NOT_FOUND",
            ForkErrorCode::SessionNotLive => "SESSION_NOT_LIVE",
            ForkErrorCode::SessionAlreadyExists => "SESSION_ALREADY_EXISTS",
            ForkErrorCode::InvalidBoundary => "INVALID_BOUNDARY",
            ForkErrorCode::OpenTurn => "OPEN_TURN",
        }
    }
}

/// A refused fork, with dsh's code and message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct ForkError {
    /// The code.
    pub code: ForkErrorCode,
    /// dsh's message.
    pub message: String,
}

impl ForkError {
    /// The child id is taken (checked before anything else).
    pub fn already_exists(child_id: &str) -> Self {
        ForkError {
            code: ForkErrorCode::SessionAlreadyExists,
            message: format!("session \"{child_id}\" already exists"),
        }
    }

    /// The source id is not a live session.
    pub fn not_found(source_id: &str) -> Self {
        ForkError {
            code: ForkErrorCode::SessionNotFound,
            message: format!("session \"{source_id}\" not found"),
        }
    }

    /// The source handle is stale (its id is live under another instance).
    pub fn not_live(source_id: &str) -> Self {
        ForkError {
            code: ForkErrorCode::SessionNotLive,
            message: format!("session \"{source_id}\" is not the live store instance"),
        }
    }

    fn invalid_number(source_id: &str, shown: &str) -> Self {
        ForkError {
            code: ForkErrorCode::InvalidBoundary,
            message: format!(
                "fork boundary for session \"{source_id}\" must be a non-negative safe integer, got {shown}"
            ),
        }
    }
}

/// Converts a JavaScript-number boundary (as a caller over JSON may pass it) to a seq, with
/// dsh's `INVALID_BOUNDARY` refusal for `-1`, `0.5`, `2^53` and the like.
pub fn boundary_from_number(source_id: &str, n: f64) -> Result<Seq, ForkError> {
    if crate::json::is_safe_integer(n) && n >= 0.0 {
        Ok(n as Seq)
    } else {
        Err(ForkError::invalid_number(
            source_id,
            &crate::json::js_number_to_string(n),
        ))
    }
}

/// What the store does to create the child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkPlan {
    /// Inclusive boundary seq, `None` for an empty seed (empty source, boundary omitted).
    pub boundary: Option<Seq>,
    /// Number of inherited events (`seedLength`, excluding the child's end-seed marker).
    pub seed_length: u64,
    /// The child's header.
    pub header: SessionHeader,
    /// True when the child must append `session/end-seed` after the seed (the seed does
    /// not already end with one).
    pub needs_end_seed: bool,
    /// The child's state after the seed when it is known without reading the log (the
    /// boundary is the source's tail); otherwise the store rebuilds it from the prefix
    /// with [`SessionState::rebuild`].
    pub child_state: Option<SessionState>,
}

/// Plans forking `source` at `boundary` (inclusive; `None` = the last event) into a child
/// with `child_id`, created at `created_at`.
///
/// `lookup` is read only when the boundary lies before the source's last turn boundary
/// (to find the last `turn/start`/`turn/end` at or before it, scanning backwards).
pub fn plan_fork(
    source_id: &str,
    source_header: &SessionHeader,
    source: &SessionState,
    boundary: Option<Seq>,
    child_id: &str,
    created_at: u64,
    lookup: &dyn EventLookup,
) -> Result<ForkPlan, ForkError> {
    let len = source.next_seq();
    let boundary = match boundary {
        Some(b) => b,
        None if len == 0 => {
            return Ok(ForkPlan {
                boundary: None,
                seed_length: 0,
                header: fork_child_header(source_header, child_id, created_at, 0),
                needs_end_seed: true,
                child_state: Some(SessionState::with_invariants(source.invariant_mode())),
            });
        }
        None => len - 1,
    };
    if boundary > MAX_SAFE_INTEGER as u64 {
        return Err(ForkError::invalid_number(source_id, &boundary.to_string()));
    }
    if boundary >= len {
        let last = if len == 0 {
            "none".to_string()
        } else {
            (len - 1).to_string()
        };
        return Err(ForkError {
            code: ForkErrorCode::InvalidBoundary,
            message: format!(
                "fork boundary {boundary} does not exist in session \"{source_id}\" (last seq: {last})"
            ),
        });
    }
    let contiguity = || ForkError {
        code: ForkErrorCode::InvalidBoundary,
        message: format!(
            "fork boundary {boundary} does not match a contiguous event seq in session \"{source_id}\""
        ),
    };
    // The last turn boundary at or before `boundary`.
    let open_turn: Option<String> = match source.last_turn_mark() {
        None => None,
        Some(mark) if mark.seq <= boundary => mark.start.then(|| mark.turn.display().to_string()),
        Some(_) => {
            let mut found = None;
            let mut seq = boundary;
            loop {
                let event = lookup
                    .event_at(seq)
                    .map_err(|_| contiguity())?
                    .ok_or_else(contiguity)?;
                if event.kind == "turn/start" || event.kind == "turn/end" {
                    if event.kind == "turn/start" {
                        let turn = Doc::parse(&event.data)
                            .ok()
                            .and_then(|d| d.root().get("turn").map(|t| t.js_display()))
                            .unwrap_or_else(|| "undefined".into());
                        found = Some(turn);
                    }
                    break;
                }
                if seq == 0 {
                    break;
                }
                seq -= 1;
            }
            found
        }
    };
    if let Some(turn) = open_turn {
        return Err(ForkError {
            code: ForkErrorCode::OpenTurn,
            message: format!(
                "fork boundary {boundary} in session \"{source_id}\" ends inside open turn {turn}"
            ),
        });
    }
    let at_tail = boundary + 1 == len;
    let boundary_is_end_seed = if at_tail {
        source.ends_with_end_seed()
    } else {
        lookup
            .event_at(boundary)
            .map_err(|_| contiguity())?
            .ok_or_else(contiguity)?
            .kind
            == "session/end-seed"
    };
    Ok(ForkPlan {
        boundary: Some(boundary),
        seed_length: boundary + 1,
        header: fork_child_header(source_header, child_id, created_at, boundary + 1),
        needs_end_seed: !boundary_is_end_seed,
        child_state: at_tail.then(|| source.clone()),
    })
}
