//! The surface (§4): the ordered seqs of the events whose messages form the model-visible
//! history, with dsh's marker, provenance, replace and tool-result rewrite rules.
//!
//! Planning ([`plan_surface`]) never mutates; [`Surface::apply`] commits a plan. A replace's
//! `start`/`end` are seqs located by *position* in the current surface, so `start` may be
//! numerically greater than `end`.

use super::error::{LookupError, SurfaceError};
use super::shape;
use super::{EventLookup, RawDefects, SourcesDefect, SurfaceOpDefect};
use crate::event::{Event, MAX_SAFE_INTEGER, Seq, SurfaceOp};
use serde::{Deserialize, Serialize};

/// The live surface: node seqs in model-visible order and the replace generation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Surface {
    nodes: Vec<Seq>,
    replace_generation: u64,
}

/// How one accepted event changes the surface, in a form a store can persist as linked
/// nodes: unlink `removed` (a contiguous run, in surface order) and link `inserted`
/// between `after` and `before`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SurfaceChange {
    /// Seq of the new node (the accepted event).
    pub inserted: Seq,
    /// Nodes removed by a replace, in surface order (empty for an append).
    pub removed: Vec<Seq>,
    /// The node just before the new one after the change (`None`: it is the head).
    pub after: Option<Seq>,
    /// The node just after the new one after the change (`None`: it is the tail).
    pub before: Option<Seq>,
    /// Position of the new node in the surface after the change.
    pub position: usize,
    /// `Some((start, end))` for a replace (the declared seqs), `None` for an append.
    pub replace: Option<(Seq, Seq)>,
}

impl SurfaceChange {
    /// True for a replace (which bumps the replace generation).
    pub fn is_replace(&self) -> bool {
        self.replace.is_some()
    }
}

/// One replacement seen by [`fold_surface`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement {
    /// Seq of the replacing event.
    pub seq: Seq,
    /// Declared start seq.
    pub start: Seq,
    /// Declared end seq.
    pub end: Seq,
    /// Nodes actually removed, in surface order.
    pub shadowed: Vec<Seq>,
}

/// Result of folding a whole log from seq 0 ([`fold_surface`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SurfaceFold {
    /// Final surface.
    pub nodes: Vec<Seq>,
    /// Every replacement in event order.
    pub replacements: Vec<Replacement>,
    /// Final replace generation (`replacements.len()`).
    pub replace_generation: u64,
}

impl Surface {
    /// An empty surface.
    pub fn new() -> Self {
        Surface::default()
    }

    /// Node seqs in model-visible order.
    pub fn nodes(&self) -> &[Seq] {
        &self.nodes
    }

    /// Number of replacements committed since the surface was built.
    pub fn replace_generation(&self) -> u64 {
        self.replace_generation
    }

    /// Position of `seq` in the surface, if it is a live node.
    pub fn position(&self, seq: Seq) -> Option<usize> {
        self.nodes.iter().position(|&s| s == seq)
    }

    /// Commits a planned change. The change must come from [`plan_surface`] on this surface.
    pub fn apply(&mut self, change: &SurfaceChange) {
        if change.replace.is_some() {
            let start = change.position.min(self.nodes.len());
            let end = (start + change.removed.len()).min(self.nodes.len());
            self.nodes.splice(start..end, [change.inserted]);
            self.replace_generation += 1;
        } else {
            self.nodes.push(change.inserted);
        }
    }
}

/// The surface op of `event` after the marker-eligibility rules of §4.3.
fn surface_op_of(event: &Event, defects: &RawDefects) -> Result<Option<SurfaceOp>, SurfaceError> {
    if !event.is_surface_type() {
        if event.surface_op.is_some() || defects.surface_op.is_some() {
            return Err(SurfaceError::SurfaceOpOnLogOnly {
                kind: event.kind.clone(),
            });
        }
        if event.source_event_seqs.is_some() || defects.sources.is_some() {
            return Err(SurfaceError::SourcesOnLogOnly {
                kind: event.kind.clone(),
            });
        }
        return Ok(None);
    }
    match defects.surface_op {
        Some(SurfaceOpDefect::Invalid) => {
            return Err(SurfaceError::InvalidSurfaceOp {
                kind: event.kind.clone(),
            });
        }
        Some(SurfaceOpDefect::InvalidReplace) => {
            return Err(SurfaceError::InvalidReplaceOp {
                kind: event.kind.clone(),
            });
        }
        None => {}
    }
    match event.surface_op {
        None => Err(SurfaceError::MissingSurfaceOp {
            kind: event.kind.clone(),
        }),
        Some(SurfaceOp::Replace { start, end })
            if start > MAX_SAFE_INTEGER as u64 || end > MAX_SAFE_INTEGER as u64 =>
        {
            Err(SurfaceError::InvalidReplaceOp {
                kind: event.kind.clone(),
            })
        }
        Some(op) => Ok(Some(op)),
    }
}

/// §4.4: `sourceEventSeqs` rules 1–6 in dsh's order.
fn check_sources(
    event: &Event,
    defects: &RawDefects,
    shadowed: &[Seq],
) -> Result<(), SurfaceError> {
    // The cited seqs, ascending: the sources themselves when they are (the usual case: a
    // message cites its chunks in order), else a sorted copy. No hashing, no allocation in
    // the usual case.
    let mut sorted: Vec<Seq> = Vec::new();
    let mut cited: &[Seq] = &[];
    match defects.sources {
        Some(SourcesDefect::NotArray) => {
            return Err(SurfaceError::SourcesNotArray { seq: event.seq });
        }
        Some(SourcesDefect::NotDense) => {
            return Err(SurfaceError::SourcesNotDense {
                kind: event.kind.clone(),
            });
        }
        None => {}
    }
    if let Some(sources) = &event.source_event_seqs {
        if sources.is_empty() && event.kind != "assistant/message" {
            return Err(SurfaceError::SourcesEmpty { seq: event.seq });
        }
        let mut not_earlier = None;
        for &source in sources {
            if source > MAX_SAFE_INTEGER as u64 {
                return Err(SurfaceError::SourcesNotDense {
                    kind: event.kind.clone(),
                });
            }
            if not_earlier.is_none() && source >= event.seq {
                not_earlier = Some(source);
            }
        }
        if sources.windows(2).all(|w| w[0] < w[1]) {
            cited = sources;
        } else {
            sorted.extend_from_slice(sources);
            sorted.sort_unstable();
            if sorted.windows(2).any(|w| w[0] == w[1]) {
                return Err(SurfaceError::SourcesDuplicate { seq: event.seq });
            }
            cited = &sorted;
        }
        if let Some(source_seq) = not_earlier {
            return Err(SurfaceError::SourcesNotEarlier {
                source_seq,
                seq: event.seq,
            });
        }
    }
    let missing: Vec<Seq> = shadowed
        .iter()
        .copied()
        .filter(|s| cited.binary_search(s).is_err())
        .collect();
    if !missing.is_empty() {
        return Err(SurfaceError::SourcesMissingShadowed { missing });
    }
    Ok(())
}

/// §4.7: a `tool/result` replace may only rewrite one current tool result's content.
fn check_tool_result_rewrite(
    event: &Event,
    shadowed: &[Seq],
    lookup: &dyn EventLookup,
) -> Result<(), SurfaceError> {
    if event.kind != "tool/result" {
        return Ok(());
    }
    if shadowed.len() != 1 {
        return Err(SurfaceError::RewriteNotSingle);
    }
    let target = shadowed[0];
    let original = lookup.event_at(target)?;
    let Some(original) = original else {
        return Err(SurfaceError::Lookup(LookupError {
            seq: target,
            message: "the event store has no event at this seq".to_string(),
        }));
    };
    if original.kind != "tool/result" {
        return Err(SurfaceError::RewriteTarget);
    }
    match shape::tool_result_rest_equal(&original.data, &event.data) {
        Ok(true) => Ok(()),
        Ok(false) => Err(SurfaceError::RewriteChanged),
        Err(detail) => Err(SurfaceError::RewriteMalformed { detail }),
    }
}

/// Plans how `event` (expected at seq `expected`) changes `surface`, without mutating it.
///
/// Returns `None` for a log-only event. `lookup` is asked only for the target of a
/// `tool/result` replace. `defects` carries marker values a raw (imported) event had that
/// the typed [`Event`] cannot represent; pass `RawDefects::default()` for typed input.
pub fn plan_surface(
    surface: &Surface,
    event: &Event,
    expected: Seq,
    defects: &RawDefects,
    lookup: &dyn EventLookup,
) -> Result<Option<SurfaceChange>, SurfaceError> {
    if event.seq != expected {
        return Err(SurfaceError::NotContiguous {
            seq: event.seq,
            expected,
        });
    }
    let Some(op) = surface_op_of(event, defects)? else {
        return Ok(None);
    };
    match op {
        SurfaceOp::Append => {
            check_sources(event, defects, &[])?;
            Ok(Some(SurfaceChange {
                inserted: event.seq,
                removed: Vec::new(),
                after: surface.nodes.last().copied(),
                before: None,
                position: surface.nodes.len(),
                replace: None,
            }))
        }
        SurfaceOp::Replace { start, end } => {
            let Some(start_index) = surface.position(start) else {
                return Err(SurfaceError::StartNotFound { start });
            };
            let Some(end_index) = surface.position(end) else {
                return Err(SurfaceError::EndNotFound { end });
            };
            if start_index > end_index {
                return Err(SurfaceError::StartAfterEnd {
                    start,
                    start_index,
                    end,
                    end_index,
                });
            }
            let shadowed = surface.nodes[start_index..=end_index].to_vec();
            check_sources(event, defects, &shadowed)?;
            check_tool_result_rewrite(event, &shadowed, lookup)?;
            Ok(Some(SurfaceChange {
                inserted: event.seq,
                removed: shadowed,
                after: start_index.checked_sub(1).map(|i| surface.nodes[i]),
                before: surface.nodes.get(end_index + 1).copied(),
                position: start_index,
                replace: Some((start, end)),
            }))
        }
    }
}

/// Folds a whole log from seq 0 (dsh's `foldSurface`): the final surface and every
/// replacement, detached from any live state. Fails with the index of the first bad event.
pub fn fold_surface(events: &[Event]) -> Result<SurfaceFold, (usize, SurfaceError)> {
    let mut surface = Surface::new();
    let mut replacements = Vec::new();
    let none = RawDefects::default();
    for (index, event) in events.iter().enumerate() {
        let change =
            plan_surface(&surface, event, index as Seq, &none, &events).map_err(|e| (index, e))?;
        if let Some(change) = change {
            if let Some((start, end)) = change.replace {
                replacements.push(Replacement {
                    seq: change.inserted,
                    start,
                    end,
                    shadowed: change.removed.clone(),
                });
            }
            surface.apply(&change);
        }
    }
    Ok(SurfaceFold {
        nodes: surface.nodes.clone(),
        replace_generation: surface.replace_generation,
        replacements,
    })
}

/// dsh's `isSurfaceEligibleType`.
pub fn is_surface_eligible_type(kind: &str) -> bool {
    crate::event::is_surface_type(kind)
}

/// dsh's `isSurfaceEvent`: an eligible type carrying a surface op.
pub fn is_surface_event(event: &Event) -> bool {
    event.is_surface_type() && event.surface_op.is_some()
}

/// dsh's `isAppendSurfaceEvent`.
pub fn is_append_surface_event(event: &Event) -> bool {
    is_surface_event(event) && event.surface_op == Some(SurfaceOp::Append)
}

/// dsh's `isReplacementSurfaceEvent`.
pub fn is_replacement_surface_event(event: &Event) -> bool {
    is_surface_event(event) && matches!(event.surface_op, Some(SurfaceOp::Replace { .. }))
}
