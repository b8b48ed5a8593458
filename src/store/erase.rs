//! Erase (format-spec.md §11.6): `Store::erase` deletes sessions and then runs an erase-mode
//! GC, which drops every event record of every purged session (a deleted session no live
//! fork reads through: the registry no longer holds it) from every segment holding one, and
//! then rewrites the index file so that redb's freed pages go too.
//!
//! Nothing new is written to the log: an erase is a delete, then a GC. A crash after the
//! delete committed leaves purged sessions whose bytes are still in the log; the next
//! erase-mode GC (`sessionlog gc --erase`) erases every one of them.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::gc::{Compacted, GcError, GcOptions, GcReport, session_of};
use super::*;
use crate::log::frame::{FLAG_CONTINUATION, FLAG_CONTINUED, FRAME_HEADER_LEN};

/// Why [`Store::erase`] did not erase. Nothing was written unless the variant says so.
#[derive(Debug, thiserror::Error)]
pub enum EraseError {
    /// No live session has this id (nothing was written).
    #[error(
        "no session {id:?} (a session deleted earlier is erased by `sessionlog gc --erase`, \
         which erases every deleted session no fork reads through)"
    )]
    NoSuchSession {
        /// The id.
        id: String,
    },
    /// Live forks read the session's events and were not named (nothing was written).
    #[error(
        "session {id:?} has forks that read its events ({}): name them too to erase them as \
         well, or delete without erase (the forks keep reading it)",
        forks.join(", ")
    )]
    ForksRead {
        /// The session named.
        id: String,
        /// The live forks (direct or not) that read its events.
        forks: Vec<String>,
    },
    /// Deleting the sessions failed (nothing was deleted).
    #[error("deleting the sessions to erase failed: {0}")]
    Delete(#[from] AppendError),
    /// The sessions are deleted, but erasing their bytes failed: run an erase-mode GC
    /// (`sessionlog gc --erase`) to finish.
    #[error(
        "the sessions are deleted, but erasing their bytes failed: {0} (run `sessionlog gc \
         --erase` to finish)"
    )]
    Gc(#[source] GcError),
}

/// What the log scan of an erase found.
#[derive(Default)]
struct ErasePlan {
    /// Segments to compact, ascending.
    segments: BTreeSet<u64>,
    /// Purged sessions with records in the log.
    purged: HashSet<u64>,
    /// Purged sessions whose creation, fork, verbatim and delete records are kept (the
    /// session with the highest number and the parents it was forked from), so a rebuild
    /// derives the same next session number; their events go.
    keep_meta: HashSet<u64>,
}

/// A chain of continued frames (or a single frame): the segments it spans, and (session, is
/// an event) of its records of purged sessions.
type Touched = (BTreeSet<u64>, HashSet<(u64, bool)>);

/// True when an erase drops `record` (a record of a purged session, but only the events of
/// one in `keep_meta`).
fn erased(record: &Record, purged: &HashSet<u64>, keep_meta: &HashSet<u64>) -> bool {
    let (session, seq) = session_of(record);
    purged.contains(&session) && (seq.is_some() || !keep_meta.contains(&session))
}

/// The kept frames of a chain of continued frames being rewritten, for the flag fix.
#[derive(Default)]
pub(super) struct Chain {
    /// Kept frames so far: (segment, offset in its copy).
    pub(super) kept: Vec<(u64, u64)>,
    /// The chain began in a segment this erase does not rewrite (its frames there are kept).
    outside_before: bool,
}

/// What [`Store::compact_segment`] needs to rewrite chains of continued frames (erase): the
/// chain carried from the previous segment, whether the next segment is rewritten too, and
/// the flag patches of the chains that ended ((segment, offset in the copy, flag bits 1-2)).
pub(super) struct ChainRewrite<'a> {
    pub(super) chain: &'a mut Option<Chain>,
    pub(super) next_rewritten: bool,
    pub(super) patches: &'a mut Vec<(u64, u64, u8)>,
}

impl Chain {
    /// A chain whose first frames are in a segment this erase does not rewrite.
    pub(super) fn begun_outside() -> Chain {
        Chain {
            kept: Vec::new(),
            outside_before: true,
        }
    }

    /// The chain ended (`outside_after`: it continues in a segment not rewritten): the first
    /// kept frame has no CONTINUATION bit (unless one is kept before it elsewhere), the last
    /// no CONTINUED bit (unless one follows elsewhere). Returns the flag patches.
    pub(super) fn finish(self, outside_after: bool, patches: &mut Vec<(u64, u64, u8)>) {
        let n = self.kept.len();
        for (i, (segment, offset)) in self.kept.into_iter().enumerate() {
            let mut set = 0u8;
            if i > 0 || self.outside_before {
                set |= FLAG_CONTINUATION;
            }
            if i + 1 < n || outside_after {
                set |= FLAG_CONTINUED;
            }
            patches.push((segment, offset, set));
        }
    }
}

impl Store {
    /// Deletes the sessions `ids` (all or nothing) and erases their events' bytes: an
    /// erase-mode GC ([`GcOptions::erase`]) drops every event record of every purged session
    /// from the log, then the index file is rewritten without the old pages. Afterwards no
    /// byte of their events remains in the store's files (format-spec.md §11.6; what erase
    /// does not cover is in README.md).
    ///
    /// Refused, with nothing written, when an id names no live session, or when a live fork
    /// not also named reads a named session's events. When the delete committed but the GC
    /// failed ([`EraseError::Gc`]), the sessions are gone and an erase-mode GC finishes.
    pub fn erase(
        &self,
        ids: &[&str],
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<GcReport, EraseError> {
        self.committer().map_err(EraseError::Delete)?;
        self.delete_for_erase(ids)?;
        self.gc(GcOptions::default().erase(true), progress)
            .map_err(EraseError::Gc)
    }

    /// Deletes every session of `ids` in one operation (one staged batch: all or nothing),
    /// after checking that each exists and that no live fork outside `ids` reads one.
    fn delete_for_erase(&self, ids: &[&str]) -> Result<(), EraseError> {
        let check = |registry: &Registry, numbers: &BTreeMap<u64, String>| {
            // A live fork outside `ids` that reads (through any chain of forks) a named
            // session.
            let mut readers: BTreeMap<u64, Vec<String>> = BTreeMap::new();
            for row in registry.rows() {
                if row.is_deleted() || numbers.contains_key(&row.number) {
                    continue;
                }
                let (mut at, mut reads) = (row, row.seed_len);
                while at.parent != 0 && reads > 0 {
                    let Some(parent) = registry.get(at.parent) else {
                        break;
                    };
                    if numbers.contains_key(&parent.number) {
                        readers
                            .entry(parent.number)
                            .or_default()
                            .push(row.header.id.clone());
                        break;
                    }
                    reads = reads.min(parent.seed_len);
                    at = parent;
                }
            }
            match readers.into_iter().next() {
                Some((n, mut forks)) => {
                    forks.sort();
                    Err(EraseError::ForksRead {
                        id: numbers.get(&n).cloned().unwrap_or_default(),
                        forks,
                    })
                }
                None => Ok(()),
            }
        };
        match self.delete_all(ids, check) {
            Ok(_) => Ok(()),
            Err(EraseError::Delete(AppendError::NoSuchSession(id))) => {
                Err(EraseError::NoSuchSession { id })
            }
            Err(e) => Err(e),
        }
    }

    /// The erase-mode GC (`gc` with [`GcOptions::erase`]), under the GC lock.
    pub(super) fn gc_erase(
        &self,
        committer: &Committer,
        options: GcOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<GcReport, GcError> {
        self.checkpoint()?;
        let known: HashSet<u64> = self.registry().rows().map(|r| r.number).collect();
        let plan = self.erase_plan(&known, progress)?;
        let mut report = GcReport {
            dry_run: options.dry_run,
            erase: true,
            sessions_erased: plan.purged.len() as u64,
            ..GcReport::default()
        };
        // Records to erase in the active segment: it is sealed first, and the index
        // checkpointed, so that it lies behind the watermark.
        if !options.dry_run
            && plan
                .segments
                .last()
                .is_some_and(|&n| n >= committer.watermark().segment)
        {
            committer.roll_over()?;
            self.checkpoint()?;
        }
        let watermark = committer.watermark();
        let numbers = self.segments.list().map_err(|source| GcError::Io {
            path: self.segments.dir().to_path_buf(),
            source,
        })?;
        for &n in &numbers {
            let path = self.segments.path(n);
            let len = self
                .segments
                .file(n)
                .and_then(|f| f.len())
                .map_err(|source| GcError::Io { path, source })?;
            report.size_before += len;
        }
        let mut copies: Vec<Compacted> = Vec::new();
        let mut patches = Vec::new();
        let mut chain: Option<Chain> = None;
        for &n in &plan.segments {
            if n >= watermark.segment {
                if options.dry_run {
                    report
                        .skipped
                        .push((n, "it is the active segment (without --dry-run it is sealed first and erased too)".into()));
                    continue;
                }
                return Err(GcError::EraseBlocked {
                    segment: n,
                    reason: "it is not behind the index's watermark".into(),
                });
            }
            if n.checked_sub(1).is_none_or(|p| !plan.segments.contains(&p))
                && let Some(c) = chain.take()
            {
                c.finish(true, &mut patches);
            }
            let next_rewritten = plan.segments.contains(&(n + 1)) && n + 1 < watermark.segment;
            let chains = ChainRewrite {
                chain: &mut chain,
                next_rewritten,
                patches: &mut patches,
            };
            let drop = |r: &Record| erased(r, &plan.purged, &plan.keep_meta);
            match self.compact_segment(n, &known, &drop, Some(chains))? {
                Ok(c) => copies.push(c),
                Err(reason) => {
                    return Err(GcError::EraseBlocked { segment: n, reason });
                }
            }
        }
        if let Some(c) = chain.take() {
            c.finish(true, &mut patches);
        }
        apply_patches(&mut copies, &patches);
        for c in &copies {
            report.compacted.push(c.number);
            report.freed += c.old_len.saturating_sub(c.bytes.len() as u64);
            report.rewritten += c.bytes.len() as u64;
            report.records_dropped += c.dropped;
        }
        report.size_after = report.size_before - report.freed;
        if options.dry_run {
            return Ok(report);
        }
        if !copies.is_empty() {
            self.install_copies(committer, &copies)?;
        }
        // The index file: every table copied into a fresh file, so no freed page keeps the
        // old bytes of an erased session's rows, state or projections.
        committer.exclusive(|batch, watermark| {
            self.index.commit(&batch, watermark, true)?;
            self.index.rewrite()?;
            Ok(())
        })?;
        report.index_rewritten = true;
        Ok(report)
    }

    /// Scans the whole log: the purged sessions, and the segments to rewrite (those holding
    /// a record to erase, and those a chain of continued frames holding one crosses).
    fn erase_plan(
        &self,
        known: &HashSet<u64>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<ErasePlan, GcError> {
        let numbers = self.segments.list().map_err(|source| GcError::Io {
            path: self.segments.dir().to_path_buf(),
            source,
        })?;
        let mut top = 0u64;
        let mut parents: HashMap<u64, u64> = HashMap::new();
        let mut purged = HashSet::new();
        // Chains (single frames included) holding records of purged sessions: the segments
        // they span and (session, is an event) of those records.
        let mut chains: Vec<Touched> = Vec::new();
        let mut current = Touched::default();
        let mut in_chain = false;
        let total = numbers.len() as u64;
        let mut visit = |f: scan::ScannedFrame| -> Result<(), OpenError> {
            if !in_chain {
                current = Default::default();
            }
            current.0.insert(f.position.segment);
            if let Ok(records) = Record::decode_all(&f.payload) {
                for (_, record) in &records {
                    let (session, seq) = session_of(record);
                    top = top.max(session);
                    if known.contains(&session) {
                        continue;
                    }
                    purged.insert(session);
                    if let Record::ForkSession { parent, .. } = record {
                        parents.insert(session, *parent);
                    }
                    current.1.insert((session, seq.is_some()));
                }
            }
            in_chain = f.continued;
            if !in_chain && !current.1.is_empty() {
                chains.push(std::mem::take(&mut current));
            }
            Ok(())
        };
        let start = LogPosition {
            segment: numbers.first().copied().unwrap_or(1),
            offset: SEGMENT_HEADER_LEN,
        };
        progress(0, total);
        scan::scan(
            &self.segments,
            &numbers,
            start,
            RecoveryMode::SalvageSkippingBadFrames,
            &self.limits,
            &mut visit,
        )?;
        progress(total, total);
        let mut keep_meta = HashSet::new();
        let mut at = Some(top);
        while let Some(s) = at.filter(|s| purged.contains(s)) {
            if !keep_meta.insert(s) {
                break;
            }
            at = parents.get(&s).copied();
        }
        let mut segments = BTreeSet::new();
        for (segs, records) in chains {
            if records
                .iter()
                .any(|(s, event)| *event || !keep_meta.contains(s))
                && let (Some(&first), Some(&last)) = (segs.first(), segs.last())
            {
                // Every segment from the chain's first to its last: one an earlier GC left
                // empty lies between two of its frames, and the chain must be rewritten
                // through it (else it looks like a segment the chain continues into).
                segments.extend(first..=last);
            }
        }
        Ok(ErasePlan {
            segments,
            purged,
            keep_meta,
        })
    }
}

/// Sets flag bits 1-2 of the frames `patches` name (segment, offset in the copy, bits), and
/// their CRCs (which cover the flags).
fn apply_patches(copies: &mut [Compacted], patches: &[(u64, u64, u8)]) {
    for &(segment, offset, bits) in patches {
        let Some(c) = copies.iter_mut().find(|c| c.number == segment) else {
            continue;
        };
        let o = offset as usize;
        let Some(head) = c.bytes.get(o..o + FRAME_HEADER_LEN) else {
            continue;
        };
        let stored = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let flags = (head[8] & !(FLAG_CONTINUED | FLAG_CONTINUATION)) | bits;
        if flags == head[8] {
            continue;
        }
        c.bytes[o + 8] = flags;
        if let Some(covered) = c.bytes.get(o + 8..o + FRAME_HEADER_LEN + stored) {
            let crc = crc32fast::hash(covered);
            c.bytes[o + 4..o + 8].copy_from_slice(&crc.to_le_bytes());
        }
    }
}
