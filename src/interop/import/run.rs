//! The two passes: validate every session (keeping a fingerprint), then read each again and write
//! it.

use super::error::FileImportError;
use super::read::{ReadSession, Readers, items, location_in, validate};
use super::source::{Source, discover};
use super::{ImportOptions, ImportProgress, ImportReport, ImportedSession};
use super::{OnDuplicate, SkippedDuplicate};
use crate::event::Event;
use crate::store::Store;
use std::collections::HashMap;
use std::path::PathBuf;

/// Imports every session of `paths` (files or directories, see [`discover`]) into `store`.
///
/// All sessions are read and validated first (dsh's load rules, ids new to the store and
/// unique among the sources); if anything is refused, the error lists every problem and the
/// store is unchanged. Then each session is read again and written as one operation (a
/// crash leaves it absent or whole; see [`import_sources`]). Sources are never modified. `progress`
/// is called after each session of each phase.
pub fn import_paths(
    store: &Store,
    paths: &[PathBuf],
    options: &ImportOptions,
    progress: &mut dyn FnMut(ImportProgress<'_>),
) -> Result<ImportReport, FileImportError> {
    let sources = discover(paths)?;
    import_sources(store, &sources, options, progress)
}

/// [`import_paths`] for already discovered sources.
///
/// Two passes, so that memory is bounded by the largest session rather than by the input:
/// pass 1 reads and validates the sessions one at a time and keeps of each only a summary (id,
/// fingerprint of its content); pass 2 reads each session again and writes it. A session whose
/// source reads differently in pass 2 (changed, gone, or now refused) is not written and the
/// import stops with [`FileImportError::Changed`]; the sessions written before it stay. Up to
/// [`ImportOptions::hold_bytes`] of event data (and a single-session import) is kept between the
/// passes instead of being read again.
pub fn import_sources(
    store: &Store,
    sources: &[Source],
    options: &ImportOptions,
    progress: &mut dyn FnMut(ImportProgress<'_>),
) -> Result<ImportReport, FileImportError> {
    let items = items(sources)?;
    let total = items.len() as u64;
    let mut report = ImportReport::default();
    let mut errors = Vec::new();
    // Each id's first item (its index) and file.
    let mut seen: HashMap<String, (usize, PathBuf)> = HashMap::new();
    let mut readers = Readers::default();
    let mut held = Held::default();
    // Pass 1: read and validate everything, one session at a time.
    let mut checked: Vec<Option<Checked>> = Vec::with_capacity(items.len());
    let mut budget = options.hold_bytes;
    let (mut checked_events, mut checked_bytes) = (0u64, 0u64);
    for (i, item) in items.iter().enumerate() {
        let path = item.path();
        let s = match readers.read(item, options) {
            Ok(s) => s,
            Err(e) => {
                errors.push(e);
                checked.push(None);
                continue;
            }
        };
        let size = held.take(&s);
        let id = s.header.id.clone();
        let mut summary = Checked {
            id: id.clone(),
            skip: false,
            fingerprint: Fingerprint::of(&s),
            held: None,
        };
        if let Some((first_item, first)) = seen.get(&id) {
            summary.skip = true;
            if same_file(first, path) {
                // The same file named twice (or a file and its directory): read once.
                if !report.named_twice.iter().any(|p| same_file(p, path)) {
                    report.named_twice.push(path.to_owned());
                }
            } else {
                match options.on_duplicate {
                    OnDuplicate::Fail => errors.push(FileImportError::Duplicate {
                        session: id.clone(),
                        first: first.clone(),
                        second: path.to_owned(),
                    }),
                    OnDuplicate::FirstWins => report.duplicates.push(SkippedDuplicate {
                        id: id.clone(),
                        file: path.to_owned(),
                        kept: Some(first.clone()),
                    }),
                    OnDuplicate::Skip => {
                        // The first copy is skipped too (once).
                        if let Some(Some(earlier)) = checked.get_mut(*first_item)
                            && !earlier.skip
                        {
                            earlier.skip = true;
                            if let Some(s) = earlier.held.take() {
                                held.release(Size::of(&s));
                            }
                            report.skipped.retain(|(i, _)| i != &id);
                            report.duplicates.push(SkippedDuplicate {
                                id: id.clone(),
                                file: first.clone(),
                                kept: None,
                            });
                        }
                        report.duplicates.push(SkippedDuplicate {
                            id: id.clone(),
                            file: path.to_owned(),
                            kept: None,
                        });
                    }
                }
            }
        } else {
            seen.insert(id.clone(), (i, path.to_owned()));
            if store.len(&id).is_some() {
                if options.skip_existing {
                    report.skipped.push((id.clone(), path.to_owned()));
                    summary.skip = true;
                } else {
                    errors.push(FileImportError::Exists {
                        path: path.to_owned(),
                        session: id.clone(),
                    });
                }
            } else if let Err(e) = if total > 1 {
                validate(store, path, &s)
            } else {
                Ok(())
            } {
                // (A single session is validated by the import itself, atomically.)
                errors.push(e);
            } else if (size.bytes <= budget && errors.is_empty()) || total == 1 {
                budget = budget.saturating_sub(size.bytes);
                summary.held = Some(s);
            }
        }
        if summary.held.is_none() {
            held.release(size);
        }
        checked_events += summary.fingerprint.size.events;
        checked_bytes += summary.fingerprint.size.bytes;
        progress(ImportProgress {
            phase: "checking",
            done: i as u64 + 1,
            total,
            session: &id,
            events: checked_events,
            bytes: checked_bytes,
            total_events: 0,
            total_bytes: 0,
            imported: None,
        });
        checked.push(Some(summary));
    }
    if !errors.is_empty() {
        return Err(if errors.len() == 1 {
            errors.remove(0)
        } else {
            FileImportError::Rejected { errors }
        });
    }
    // Pass 2: write, reading again every session not held.
    let to_write = checked
        .iter()
        .flatten()
        .filter(|c| !c.skip)
        .fold(Size::default(), |sum, c| Size {
            events: sum.events + c.fingerprint.size.events,
            bytes: sum.bytes + c.fingerprint.size.bytes,
        });
    let mut written = Size::default();
    let mut imported: Vec<String> = Vec::new();
    let stop = |imported: Vec<String>, e: FileImportError| {
        if imported.is_empty() {
            e
        } else {
            FileImportError::Partial {
                imported,
                source: Box::new(e),
            }
        }
    };
    for (i, (item, summary)) in items.iter().zip(checked).enumerate() {
        let Some(summary) = summary else { continue };
        if summary.skip {
            continue;
        }
        let path = item.path();
        let s = match summary.held {
            Some(s) => s,
            None => {
                let changed = |detail: String| FileImportError::Changed {
                    path: path.to_owned(),
                    session: summary.id.clone(),
                    detail,
                };
                match readers.read(item, options) {
                    Ok(s) => {
                        held.take(&s);
                        let now = Fingerprint::of(&s);
                        if now != summary.fingerprint {
                            return Err(stop(
                                imported,
                                changed(summary.fingerprint.difference(
                                    &summary.id,
                                    &now,
                                    &s.header.id,
                                )),
                            ));
                        }
                        s
                    }
                    Err(e) => {
                        return Err(stop(
                            imported,
                            changed(format!("it no longer reads as when it was checked: {e}")),
                        ));
                    }
                }
            }
        };
        let size = Size::of(&s);
        let id = s.header.id.clone();
        let entry = ImportedSession {
            id: id.clone(),
            file: path.to_owned(),
            format: s.format.clone(),
            events: size.events,
            cut: s.cut.clone(),
            non_canonical_lines: s.non_canonical_lines.clone(),
        };
        // Enough of the layout to name the line of a refused event.
        let layout: Vec<Event> = if s.format.starts_with("jsonl") {
            s.events
                .iter()
                .map(|e| {
                    let mut l = Event::new("", e.seq, 0, "");
                    l.layout.packing = e.layout.packing;
                    l
                })
                .collect()
        } else {
            Vec::new()
        };
        let result = store.import_stored(s.header, s.events, options.invariants);
        held.release(size);
        if let Err(source) = result {
            let location = location_in(&source.to_string(), &layout);
            let e = FileImportError::Refused {
                path: path.to_owned(),
                session: id,
                location,
                source: Box::new(source),
            };
            return Err(stop(imported, e));
        }
        imported.push(id.clone());
        report.sessions.push(entry);
        written.events += size.events;
        written.bytes += size.bytes;
        progress(ImportProgress {
            phase: "importing",
            done: i as u64 + 1,
            total,
            session: &id,
            events: written.events,
            bytes: written.bytes,
            total_events: to_write.events,
            total_bytes: to_write.bytes,
            imported: report.sessions.last(),
        });
    }
    report.peak_held_events = held.peak.events;
    report.peak_held_bytes = held.peak.bytes;
    Ok(report)
}

/// True when `a` and `b` name the same file (compared after resolving links and `..`).
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    a == b
        || match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
}

/// What pass 1 keeps of a session it accepted.
struct Checked {
    id: String,
    /// Skipped: the id is in the store and [`ImportOptions::skip_existing`] is set, or it is a
    /// repeated id ([`ImportOptions::on_duplicate`]) or a file read before.
    skip: bool,
    fingerprint: Fingerprint,
    /// The session itself, when it fits in [`ImportOptions::hold_bytes`].
    held: Option<ReadSession>,
}

/// Events and event bytes (type and data) of a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Size {
    events: u64,
    bytes: u64,
}

impl Size {
    fn of(s: &ReadSession) -> Size {
        Size {
            events: s.events.len() as u64,
            bytes: s
                .events
                .iter()
                .map(|e| (e.data.len() + e.kind.len()) as u64)
                .sum(),
        }
    }
}

/// The sessions in memory at once, and the most there ever were.
#[derive(Default)]
struct Held {
    now: Size,
    peak: Size,
}

impl Held {
    fn take(&mut self, s: &ReadSession) -> Size {
        let size = Size::of(s);
        self.now.events += size.events;
        self.now.bytes += size.bytes;
        self.peak.events = self.peak.events.max(self.now.events);
        self.peak.bytes = self.peak.bytes.max(self.now.bytes);
        size
    }

    fn release(&mut self, size: Size) {
        self.now.events = self.now.events.saturating_sub(size.events);
        self.now.bytes = self.now.bytes.saturating_sub(size.bytes);
    }
}

/// What a session read from a source amounts to: its size and a CRC-32 over everything that
/// would be written or reported (header, every event with its layout, format, cut, notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    size: Size,
    crc: u32,
}

impl Fingerprint {
    fn of(s: &ReadSession) -> Fingerprint {
        use std::hash::Hash;
        let mut h = crc32fast::Hasher::new();
        s.header.hash(&mut h);
        s.events.hash(&mut h);
        s.format.hash(&mut h);
        s.cut.as_ref().map(ToString::to_string).hash(&mut h);
        s.non_canonical_lines.hash(&mut h);
        Fingerprint {
            size: Size::of(s),
            crc: h.finalize(),
        }
    }

    /// Says how `now` (read again, holding session `now_id`) differs from `self` (`id`).
    fn difference(&self, id: &str, now: &Fingerprint, now_id: &str) -> String {
        let (a, b) = (self.size, now.size);
        if id != now_id {
            format!("it held session \"{id}\" when it was checked and \"{now_id}\" now")
        } else if a != b {
            // (The message around this names the session already.)
            format!(
                "it had {} events ({} bytes) when it was checked and has {} ({} bytes) now",
                a.events, a.bytes, b.events, b.bytes
            )
        } else {
            format!(
                "its content differs from when it was checked (CRC-32 {:08x}, now {:08x})",
                self.crc, now.crc
            )
        }
    }
}
