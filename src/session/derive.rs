//! `deriveMessages` (§5): the surface projected to model messages.
//!
//! Messages are returned as the exact JSON text dsh returns by reference: a `user/message`'s
//! whole `data`, an `assistant/message`'s or `tool/result`'s `data.message` member, sliced
//! from the stored text (so output is byte-exact, lone surrogates included).

use super::EventLookup;
use super::error::LookupError;
use super::surface::Surface;
use crate::event::{Event, Seq};
use crate::json::Doc;
use std::sync::Arc;
use thiserror::Error;

/// One derived message: the surface node it came from and its JSON text.
///
/// The text is shared, not copied: the store keeps the messages it derived (its message
/// cache), and every [`Store::messages`](crate::Store::messages) hands out clones of
/// the same `Arc<str>`s, so resuming a session of large messages copies no message text
/// beyond reading it from the log once. Use `&*message.json` (or `message.json.as_ref()`)
/// where a `&str` is wanted, `message.json.to_string()` for an owned `String`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DerivedMessage {
    /// Seq of the surface node.
    pub seq: Seq,
    /// The message's JSON text (a slice of the event's stored `data`), shared.
    pub json: Arc<str>,
}

/// An event could not be projected (dsh would crash on such data).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DeriveError {
    /// The event's data does not hold what its type requires.
    #[error("cannot derive a message from {kind} at seq {seq}: {detail}")]
    Malformed {
        /// The event type.
        kind: String,
        /// The event's seq.
        seq: Seq,
        /// What is missing.
        detail: String,
    },
    /// A surface node's event is missing from the store.
    #[error("surface node {seq} has no event in the log")]
    MissingNode {
        /// The node's seq.
        seq: Seq,
    },
    /// The store failed to read a node.
    #[error(transparent)]
    Lookup(#[from] LookupError),
}

fn trim_json_ws(s: &str) -> &str {
    s.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'))
}

/// dsh's `deriveEventMessage`: the message an event projects to, as a slice of its `data`,
/// or `None` (log-only types, and an `assistant/message` whose `message.content` is empty).
/// It does not look at the surface marker.
pub fn derive_event_message(event: &Event) -> Result<Option<&str>, DeriveError> {
    derive_message_text(&event.kind, event.seq, &event.data)
}

/// [`derive_event_message`] of an event given by its `type`, seq and `data` text (a reader
/// that has the text without an [`Event`], e.g. borrowed from a decoded frame).
pub fn derive_message_text<'a>(
    kind: &str,
    seq: Seq,
    data: &'a str,
) -> Result<Option<&'a str>, DeriveError> {
    let malformed = |detail: &str| DeriveError::Malformed {
        kind: kind.to_owned(),
        seq,
        detail: detail.to_string(),
    };
    match kind {
        "user/message" => Ok(Some(trim_json_ws(data))),
        "assistant/message" | "tool/result" => {
            let doc = Doc::parse(data).map_err(|e| malformed(&e.to_string()))?;
            let Some(message) = doc.root().get("message") else {
                return Err(malformed("data has no message"));
            };
            if kind == "assistant/message" {
                let Some(content) = message.get("content") else {
                    return Err(malformed("data.message has no content"));
                };
                let empty = if content.is_array() {
                    content.len() == 0
                } else {
                    content.as_js_str().is_some_and(|s| s.is_empty())
                };
                if empty {
                    return Ok(None);
                }
            }
            let (start, end) = message.span();
            Ok(Some(&data[start..end]))
        }
        _ => Ok(None),
    }
}

/// Derives the messages of `nodes` from scratch (one lookup per node).
pub fn derive_messages(
    nodes: &[Seq],
    lookup: &dyn EventLookup,
) -> Result<Vec<DerivedMessage>, DeriveError> {
    let mut out = Vec::new();
    for &seq in nodes {
        if let Some(json) = lookup.message_at(seq)? {
            out.push(DerivedMessage { seq, json });
        }
    }
    Ok(out)
}

/// dsh's derived-message cache: extended per new surface node, rebuilt after a replace.
///
/// Kept beside (not inside) [`SessionState`](super::SessionState): it holds message text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageCache {
    generation: u64,
    consumed: usize,
    messages: Vec<DerivedMessage>,
}

impl MessageCache {
    /// An empty cache (generation 0, nothing consumed).
    pub fn new() -> Self {
        MessageCache::default()
    }

    /// Brings the cache up to date with `surface` (§5 steps 2–3): clears it when the
    /// replace generation changed, then projects the nodes not consumed yet.
    pub fn refresh(
        &mut self,
        surface: &Surface,
        lookup: &dyn EventLookup,
    ) -> Result<(), DeriveError> {
        if surface.replace_generation() != self.generation {
            self.messages.clear();
            self.consumed = 0;
            self.generation = surface.replace_generation();
        }
        let nodes = surface.nodes();
        let start = self.consumed.min(nodes.len());
        let fresh = derive_messages(&nodes[start..], lookup)?;
        self.messages.extend(fresh);
        self.consumed = nodes.len();
        Ok(())
    }

    /// Fast path after an append was applied: when `event` is the only node the cache has
    /// not consumed, project it directly (no lookup). Otherwise leaves the cache for
    /// [`MessageCache::refresh`]. Returns true when the cache is now current.
    pub fn observe(&mut self, surface: &Surface, event: &Event) -> Result<bool, DeriveError> {
        let nodes = surface.nodes();
        let current = surface.replace_generation() == self.generation
            && self.consumed + 1 == nodes.len()
            && nodes.last() == Some(&event.seq);
        if !current {
            return Ok(
                surface.replace_generation() == self.generation && self.consumed == nodes.len()
            );
        }
        if let Some(json) = derive_event_message(event)? {
            self.messages.push(DerivedMessage {
                seq: event.seq,
                json: Arc::from(json),
            });
        }
        self.consumed = nodes.len();
        Ok(true)
    }

    /// The cached messages, in surface order.
    pub fn messages(&self) -> &[DerivedMessage] {
        &self.messages
    }

    /// The replace generation the cache was built under.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Number of surface nodes consumed.
    pub fn consumed(&self) -> usize {
        self.consumed
    }
}
