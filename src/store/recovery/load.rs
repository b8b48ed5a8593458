//! Phase 2 of recovery: the index loaded, and whether the log backs its watermark.

use std::path::Path;

use crate::error::{LogPosition, OpenError};
use crate::index::Watermark;
use crate::log::Segments;
use crate::log::frame::FrameLimits;

use super::super::registry::Registry;
use super::{RecoveryInput, RecoveryReport};

/// What [`load_index`] found.
pub(super) struct LoadedIndex {
    /// How far the index covers the log; backed by the log (zero when the index is fresh or
    /// was rebuilt).
    pub(super) watermark: Watermark,
    /// The sessions as the index records them up to `watermark`.
    pub(super) registry: Registry,
    /// The index recorded no format version (a fresh index): recovery must commit it.
    pub(super) fresh: bool,
}

/// Phase 2: loads the index and decides whether its watermark is backed by the log.
///
/// Guarantees, on `Ok`: the returned watermark lies within the segments `numbers` and, when
/// it names a last frame, that frame is valid in the log; the registry holds the index's
/// session rows up to it. An index of an older format version, or one whose watermark the
/// log does not back, is cleared (read-write: [`Index::clear`]) and recovery starts from an
/// empty registry and a zero watermark ([`RecoveryReport::index_rebuilt`], with the reason);
/// when the log or the index may not be written, that is [`OpenError::NeedsRepair`]
/// instead. An index of a newer format version is [`OpenError::UnsupportedFormat`].
pub(super) fn load_index(
    input: &RecoveryInput<'_>,
    numbers: &[u64],
    report: &mut RecoveryReport,
) -> Result<LoadedIndex, OpenError> {
    let state = input.index.load()?;
    let fresh = state.format_version.is_none();
    let old_version = index_version_problem(state.format_version, input.store_dir)?;
    let mut watermark = state.watermark;
    let mut rows = state.sessions;
    let mut next_session = state.next_session;
    let problem = match old_version {
        Some(reason) => Some(reason),
        None => watermark_problem(input.segments, numbers, &watermark, &input.limits)?,
    };
    if let Some(reason) = problem {
        // Read-only: an index that claims more than the log holds means acknowledged data is
        // damaged, not a crash; it is refused rather than silently rebuilt (an older version
        // was already replaced by an index built in memory, see `Store::open`).
        if !input.writable || !input.index_writable {
            let acknowledged = acknowledged_beyond(input, numbers);
            let reason = match acknowledged {
                Some(published) => format!(
                    "{reason}; its last writer had published every frame up to {published} as durable: acknowledged frames are missing"
                ),
                None => reason,
            };
            return Err(OpenError::NeedsRepair {
                path: input.store_dir.to_path_buf(),
                reason,
                acknowledged,
            });
        }
        input.index.clear()?;
        rows.clear();
        next_session = 0;
        watermark = Watermark::default();
        report.index_rebuilt = true;
        report.rebuild_reason = Some(reason);
    }
    Ok(LoadedIndex {
        watermark,
        registry: Registry::new(rows.into_iter().map(|(_, row)| row), next_session),
        fresh,
    })
}

/// Part of phase 2: the index's format version. An index of an older version is derived
/// data: a writable open rebuilds it from the log (a read-only open never gets here with
/// one: it builds an index in memory instead); this returns why (`Some`). A newer version is
/// refused. `None` for this version or a fresh index.
fn index_version_problem(
    format_version: Option<u32>,
    store_dir: &Path,
) -> Result<Option<String>, OpenError> {
    match format_version {
        Some(v) if v != crate::index::INDEX_FORMAT_VERSION => {
            if v > crate::index::INDEX_FORMAT_VERSION {
                return Err(OpenError::UnsupportedFormat {
                    path: store_dir.join(super::super::INDEX_FILE),
                    found: v,
                    supported: crate::index::INDEX_FORMAT_VERSION,
                });
            }
            Ok(Some(format!(
                "the index has format version {v}, this build uses version {}",
                crate::index::INDEX_FORMAT_VERSION
            )))
        }
        _ => Ok(None),
    }
}

/// The position the store's last writer published as durable (`ACKED`), when no writer is
/// alive and the log's files end before it (a read-only open's diagnosis; a writable open
/// compares it with the scanned log in phase 4).
fn acknowledged_beyond(input: &RecoveryInput<'_>, numbers: &[u64]) -> Option<LogPosition> {
    let published = super::super::live::published_without_writer(input.store_dir).ok()??;
    let last = numbers.last().copied().unwrap_or(0);
    let end = LogPosition {
        segment: last,
        offset: input.segments.file(last).and_then(|f| f.len()).ok()?,
    };
    super::lost_acknowledged(input.segments, numbers, published, end).then_some(published)
}

/// Why the index's watermark is not backed by the log (`None` when it is).
fn watermark_problem(
    segments: &Segments,
    numbers: &[u64],
    w: &Watermark,
    limits: &FrameLimits,
) -> Result<Option<String>, OpenError> {
    if w.segment == 0 {
        return Ok(None);
    }
    if !numbers.contains(&w.segment) {
        return Ok(Some(format!(
            "the index covers segment {}, which is not in the log",
            w.segment
        )));
    }
    let path = segments.path(w.segment);
    let file = segments.file(w.segment).map_err(|source| OpenError::Io {
        path: path.clone(),
        source,
    })?;
    let len = file
        .len()
        .map_err(|source| OpenError::Io { path, source })?;
    if len < w.end {
        return Ok(Some(format!(
            "the index covers segment {} up to offset {}, but the segment is only {len} bytes",
            w.segment, w.end
        )));
    }
    if w.last_frame == u64::MAX || w.last_frame >= w.end {
        return Ok(None);
    }
    let frame_len = w.end - w.last_frame;
    let ok = u32::try_from(frame_len)
        .ok()
        .map(|fl| {
            segments
                .check_frame(
                    LogPosition {
                        segment: w.segment,
                        offset: w.last_frame,
                    },
                    fl,
                    limits,
                )
                .is_ok()
        })
        .unwrap_or(false);
    Ok(if ok {
        None
    } else {
        Some(format!(
            "the last frame the index covers (segment {} offset {}) is not valid in the log",
            w.segment, w.last_frame
        ))
    })
}
