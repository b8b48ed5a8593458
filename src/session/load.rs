//! Loading a stored log the way dsh's persistence load does (§7 "use in persistence",
//! persistence §1.5–§1.6): identity and version checks, legacy normalisation, vocabulary
//! refusal, then every event through the seed rules, building the [`SessionState`].
//!
//! Nothing is added to the log here: per decisions.md, crash closers and the
//! `session/end-seed` marker are appended when the session is resumed for writing
//! ([`SessionState::resume_events`]).

use super::error::HeaderError;
use super::header::validate_header;
use super::invariants::InvariantMode;
use super::known::{first_unknown_required, format_version_refusal, unknown_type_refusal};
use super::legacy::{LegacyError, LegacyView};
use super::state::{SeedError, SessionState};
use super::{EnvelopeDefect, RawDefects, SourcesDefect, SurfaceOpDefect};
use crate::event::{
    EnvelopeKey, Event, KeyOrder, Layout, MAX_SAFE_INTEGER, Seq, SessionHeader, SurfaceOp,
};
use crate::json::{Doc, N};
use thiserror::Error;

/// A stored event as read from JSON: the typed event plus what it could not represent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// The event (`data` is the exact source text of the `data` member).
    pub event: Event,
    /// Envelope and marker defects, reported where dsh reports them.
    pub defects: RawDefects,
}

/// The text is not a JSON object, so it is not an event at all.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("stored event is not a JSON object: {0}")]
pub struct NotAnEvent(pub String);

/// Why a stored session cannot be loaded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LoadError {
    /// The log is intact but this build cannot interpret it (dsh's
    /// `SessionFormatUnsupportedError`): foreign format version or an unknown required
    /// event type. The message is dsh's.
    #[error("{message}")]
    FormatUnsupported {
        /// dsh's refusal text.
        message: String,
    },
    /// The log fails validation (dsh's `SessionPersistenceCorruptionError`).
    #[error("stored session \"{id}\" failed validation: Error: {cause}")]
    Corrupt {
        /// The session id.
        id: String,
        /// The first failing rule.
        cause: LoadCause,
    },
}

/// The rule a corrupt stored log broke.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LoadCause {
    /// The header names another session.
    #[error(
        "stored session identity mismatch: requested \"{requested}\", header contains \"{stored}\""
    )]
    IdMismatch {
        /// The id asked for.
        requested: String,
        /// The header's id.
        stored: String,
    },
    /// Retired or malformed legacy record, or a message shape error at normalisation.
    #[error(transparent)]
    Legacy(#[from] LegacyError),
    /// Header rule.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// Seed rule (envelope, shape, receipts, seq, surface, commit orders).
    #[error(transparent)]
    Seed(#[from] SeedError),
}

/// A loaded session: the state built from the stored events and their legacy view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedSession {
    /// The state after the stored events (no closers, no end-seed marker).
    pub state: SessionState,
    /// Converted (legacy) events, laid over the stored ones.
    pub view: LegacyView,
}

/// The envelope key named `key` in a stored event (`None`: not an envelope key).
pub(crate) fn envelope_key(key: &str) -> Option<EnvelopeKey> {
    Some(match key {
        "type" => EnvelopeKey::Type,
        "seq" => EnvelopeKey::Seq,
        "time" => EnvelopeKey::Time,
        "data" => EnvelopeKey::Data,
        "sourceEventSeqs" => EnvelopeKey::SourceEventSeqs,
        "surfaceOp" => EnvelopeKey::SurfaceOp,
        "ignorable" => EnvelopeKey::Ignorable,
        _ => return None,
    })
}

/// The [`KeyOrder`] that reproduces `keys` (an event's envelope keys, in order).
pub(crate) fn key_order(keys: &[EnvelopeKey]) -> KeyOrder {
    use EnvelopeKey as K;
    let canonical = [
        K::Type,
        K::Seq,
        K::Time,
        K::Data,
        K::SourceEventSeqs,
        K::SurfaceOp,
        K::Ignorable,
    ];
    let closers = [
        K::Type,
        K::Seq,
        K::Time,
        K::Data,
        K::SurfaceOp,
        K::SourceEventSeqs,
        K::Ignorable,
    ];
    let follows = |order: &[K]| {
        let filtered: Vec<K> = order.iter().copied().filter(|k| keys.contains(k)).collect();
        filtered == keys
    };
    if follows(&canonical) {
        KeyOrder::Canonical
    } else if follows(&closers) {
        KeyOrder::SurfaceOpFirst
    } else {
        KeyOrder::Custom(keys.to_vec())
    }
}

fn parse_surface_op(v: N<'_, '_>) -> Result<SurfaceOp, SurfaceOpDefect> {
    if v.is_str("append") {
        return Ok(SurfaceOp::Append);
    }
    if !v.is_object() {
        return Err(SurfaceOpDefect::Invalid);
    }
    let start = v
        .get("start")
        .and_then(|s| s.as_f64())
        .filter(|&n| is_seq(n));
    let end = v.get("end").and_then(|s| s.as_f64()).filter(|&n| is_seq(n));
    match (
        v.len(),
        v.get("op").is_some_and(|o| o.is_str("replace")),
        start,
        end,
    ) {
        (3, true, Some(start), Some(end)) => Ok(SurfaceOp::Replace {
            start: start as Seq,
            end: end as Seq,
        }),
        _ => Err(SurfaceOpDefect::InvalidReplace),
    }
}

fn is_seq(n: f64) -> bool {
    crate::json::is_safe_integer(n) && n >= 0.0
}

/// Reads one stored event from its JSON text without judging it: envelope and marker
/// problems are recorded as [`RawDefects`] for the seed rules to report in dsh's order.
/// `fill` supplies `(seq, time)` for a replay fixture whose lines omit them.
pub fn parse_stored_event(text: &str, fill: Option<(Seq, i64)>) -> Result<StoredEvent, NotAnEvent> {
    let doc = Doc::parse(text).map_err(|e| NotAnEvent(e.to_string()))?;
    let root = doc.root();
    if !root.is_object() {
        return Err(NotAnEvent("not an object".into()));
    }
    let mut defects = RawDefects::default();
    let mut keys = Vec::new();
    for (key, _) in root.entries() {
        match key.as_str().and_then(envelope_key) {
            Some(k) => keys.push(k),
            None => {
                if defects.envelope.is_none() {
                    defects.envelope = Some(EnvelopeDefect::ExtraKey(key.lossy()));
                }
            }
        }
    }
    let flag = |d: EnvelopeDefect, defects: &mut RawDefects| {
        if defects.envelope.is_none() {
            defects.envelope = Some(d);
        }
    };
    let kind = match root.get("type") {
        Some(t) if t.as_js_str().is_some() => t.as_js_str().map(|s| s.lossy()).unwrap_or_default(),
        Some(t) => {
            flag(EnvelopeDefect::TypeNotString, &mut defects);
            t.js_display()
        }
        None => {
            flag(EnvelopeDefect::TypeNotString, &mut defects);
            "undefined".into()
        }
    };
    let seq = match root.get("seq") {
        Some(s) => match s.as_f64().filter(|&n| is_seq(n)) {
            Some(n) => n as Seq,
            None => {
                flag(EnvelopeDefect::BadSeq, &mut defects);
                fill.map(|f| f.0).unwrap_or(0)
            }
        },
        None => match fill {
            Some((seq, _)) => seq,
            None => {
                flag(EnvelopeDefect::BadSeq, &mut defects);
                0
            }
        },
    };
    let time = match root.get("time") {
        Some(t) => match t.as_f64().filter(|&n| crate::json::is_safe_integer(n)) {
            Some(n) => n as i64,
            None => {
                flag(EnvelopeDefect::BadTime, &mut defects);
                0
            }
        },
        None => match fill {
            Some((_, time)) => time,
            None => {
                flag(EnvelopeDefect::BadTime, &mut defects);
                0
            }
        },
    };
    let data = match root.get("data") {
        Some(d) => d.raw().to_string(),
        None => {
            flag(EnvelopeDefect::MissingData, &mut defects);
            "null".to_string()
        }
    };
    let ignorable = match root.get("ignorable") {
        None => false,
        Some(v) if v.as_bool() == Some(true) => true,
        Some(_) => {
            flag(EnvelopeDefect::IgnorableNotTrue, &mut defects);
            false
        }
    };
    let surface_op = match root.get("surfaceOp") {
        None => None,
        Some(v) => match parse_surface_op(v) {
            Ok(op) => Some(op),
            Err(d) => {
                defects.surface_op = Some(d);
                None
            }
        },
    };
    let source_event_seqs = match root.get("sourceEventSeqs") {
        None => None,
        Some(v) if !v.is_array() => {
            defects.sources = Some(SourcesDefect::NotArray);
            None
        }
        Some(v) => {
            let items = v.items();
            let seqs: Vec<Seq> = items
                .iter()
                .filter_map(|i| i.as_f64().filter(|&n| is_seq(n)).map(|n| n as Seq))
                .collect();
            if seqs.len() != items.len() {
                defects.sources = Some(SourcesDefect::NotDense);
                None
            } else {
                Some(seqs)
            }
        }
    };
    let layout = Layout {
        key_order: key_order(&keys),
        ..Layout::default()
    };
    Ok(StoredEvent {
        event: Event {
            kind,
            seq,
            time,
            data,
            source_event_seqs,
            surface_op,
            ignorable,
            layout,
        },
        defects,
    })
}

/// Loads a stored session from typed events (no raw defects).
pub fn load_stored(
    session_id: &str,
    header: &SessionHeader,
    events: &[Event],
    invariants: InvariantMode,
) -> Result<LoadedSession, LoadError> {
    load_inner(session_id, header, events, &|_| None, invariants)
}

/// Loads a stored session from parsed stored events (see [`parse_stored_event`]).
pub fn load_stored_raw(
    session_id: &str,
    header: &SessionHeader,
    events: &[StoredEvent],
    invariants: InvariantMode,
) -> Result<LoadedSession, LoadError> {
    let typed: Vec<Event> = events.iter().map(|e| e.event.clone()).collect();
    let defects = |i: usize| {
        events
            .get(i)
            .map(|e| e.defects.clone())
            .filter(|d| !d.is_none())
    };
    load_inner(session_id, header, &typed, &defects, invariants)
}

/// dsh's load order: identity, version (refused unwrapped), normalisation, vocabulary
/// (refused unwrapped), header rules, then the seed rules over every event.
fn load_inner(
    session_id: &str,
    header: &SessionHeader,
    events: &[Event],
    defects: &dyn Fn(usize) -> Option<RawDefects>,
    invariants: InvariantMode,
) -> Result<LoadedSession, LoadError> {
    let corrupt = |cause: LoadCause| LoadError::Corrupt {
        id: session_id.to_string(),
        cause,
    };
    if header.id != session_id {
        return Err(corrupt(LoadCause::IdMismatch {
            requested: session_id.to_string(),
            stored: header.id.clone(),
        }));
    }
    if header.version != crate::event::SESSION_FORMAT_VERSION {
        return Err(LoadError::FormatUnsupported {
            message: format_version_refusal(&header.id, i64::from(header.version)),
        });
    }
    let view = LegacyView::convert(session_id, events).map_err(|e| corrupt(e.into()))?;
    let lookup = view.overlay(events);
    let viewed: Vec<&Event> = events.iter().map(|e| view.view(e)).collect();
    if let Some(unknown) = viewed
        .iter()
        .find(|e| !super::known::is_known_event_type(&e.kind) && !e.ignorable)
    {
        return Err(LoadError::FormatUnsupported {
            message: unknown_type_refusal(&header.id, &unknown.kind, unknown.seq),
        });
    }
    validate_header(session_id, header).map_err(|e| corrupt(e.into()))?;
    let mut state = SessionState::with_invariants(invariants);
    for (index, event) in viewed.iter().enumerate() {
        let raw = defects(index).unwrap_or_default();
        let plan = state
            .plan_seed(event, index as u64, &raw, &lookup)
            .map_err(|e| corrupt(e.into()))?;
        state.apply(plan).map_err(|stale| {
            corrupt(LoadCause::Seed(SeedError::SeqMismatch {
                index: index as u64,
                seq: stale.planned,
                expected: stale.next,
            }))
        })?;
    }
    Ok(LoadedSession { state, view })
}

/// dsh's vocabulary check alone (§9.4): the first unknown event type not marked ignorable.
pub fn check_vocabulary(session_id: &str, events: &[Event]) -> Result<(), LoadError> {
    match first_unknown_required(events) {
        Some(e) => Err(LoadError::FormatUnsupported {
            message: unknown_type_refusal(session_id, &e.kind, e.seq),
        }),
        None => Ok(()),
    }
}

/// True when `n` fits JavaScript's safe integer range.
pub fn is_safe_seq(n: u64) -> bool {
    n <= MAX_SAFE_INTEGER as u64
}
