//! `Store::gc`: segment GC by compaction in place (format-spec.md §11).
//!
//! A sealed segment whose live fraction is below the threshold is rewritten as a new file with
//! the same segment number holding only the records that must be kept, in their original
//! order, byte for byte: the log's order never changes, so a rebuild from the log needs
//! nothing new and gives exactly the index the GC commits. The steps, each crash-safe:
//!
//! 1. the compacted copy is written to `N.gc.tmp`, fsynced, renamed to `N.gc`, and the
//!    directory fsynced before the next copy is written (an `N.gc` is always complete, and
//!    the `N.gc` files a crash leaves are those of the first segments collected);
//! 2. one durable index commit repoints every run of the segment to the copy's frames;
//! 3. `N.gc` is renamed over `N.seg` and the directory fsynced.
//!
//! Between 1 and 2, `segments/gc.commit` is created (and the directory fsynced): the set of
//! copies is complete. A writable open that finds an `N.gc` (a crash between 1 and 3) cannot
//! know whether step 2 committed, so it deletes `index.redb` first, then finishes the renames
//! when `gc.commit` exists (else it deletes the copies: only a whole set may be installed),
//! and the index is rebuilt from the log. `N.gc.tmp` files are deleted. Erase mode is in
//! `erase.rs`.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::erase::{Chain, ChainRewrite};
use super::*;
use crate::fs::{FileSystem, OpenMode, StorageFile};
use crate::log::frame::{self, FLAG_CONTINUATION, FLAG_CONTINUED, FRAME_HEADER_LEN, FrameHeader};
use crate::log::segment;

/// Suffix of a complete compacted copy of a segment, waiting to replace it.
pub const GC_SUFFIX: &str = ".gc";
/// Suffix of a compacted copy being written.
pub const GC_TMP_SUFFIX: &str = ".gc.tmp";
/// The file in `segments/` whose existence commits a GC's set of copies (format-spec.md
/// §11.4): created (and the directory fsynced) once every `N.gc` is durable, before the
/// index is repointed; removed once every copy is installed.
pub const GC_COMMIT_FILE: &str = "gc.commit";

/// What [`Store::gc`] does.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct GcOptions {
    /// Sealed segments whose live fraction ([`SegmentSpace::live_fraction`]) is below this
    /// are compacted. Default [`GC_LIVE_FRACTION`].
    pub live_fraction: f64,
    /// Plan only: compute what would be freed, write nothing.
    pub dry_run: bool,
    /// Erase mode (format-spec.md §11.6): drop every event record of every purged session
    /// from every segment holding one, whatever its live fraction (the active segment is
    /// sealed first), then rewrite the index file. The live-fraction threshold is not used.
    pub erase: bool,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            live_fraction: GC_LIVE_FRACTION,
            dry_run: false,
            erase: false,
        }
    }
}

impl GcOptions {
    /// Plans only when `yes`: nothing is written.
    pub fn dry_run(mut self, yes: bool) -> Self {
        self.dry_run = yes;
        self
    }

    /// Erase mode when `yes` (see [`GcOptions::erase`]).
    pub fn erase(mut self, yes: bool) -> Self {
        self.erase = yes;
        self
    }

    /// Sets the live-fraction threshold (see [`GcOptions::live_fraction`]).
    pub fn live_fraction(mut self, fraction: f64) -> Self {
        self.live_fraction = fraction;
        self
    }
}

/// What [`Store::gc`] did (or, with [`GcOptions::dry_run`], would do).
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct GcReport {
    /// The options were a dry run: nothing was written.
    pub dry_run: bool,
    /// Segments compacted (or that would be).
    pub compacted: Vec<u64>,
    /// Candidate segments left alone, with why.
    pub skipped: Vec<(u64, String)>,
    /// Bytes of all segment files before.
    pub size_before: u64,
    /// Bytes of all segment files after (before, minus `freed`, on a dry run).
    pub size_after: u64,
    /// Bytes freed.
    pub freed: u64,
    /// Bytes of the compacted segments' new files.
    pub rewritten: u64,
    /// Records dropped from the compacted segments.
    pub records_dropped: u64,
    /// The options were erase mode ([`GcOptions::erase`]).
    pub erase: bool,
    /// Erase mode: purged sessions whose event records were in the log (and are dropped).
    pub sessions_erased: u64,
    /// Erase mode: the index file was rewritten (not on a dry run).
    pub index_rewritten: bool,
}

/// Why [`Store::gc`] failed. Nothing is lost: the old segments stay until the index points
/// at their compacted copies.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// The store is read-only, or the writer failed (reopen the store).
    #[error(transparent)]
    Write(#[from] AppendError),
    /// Scanning the log failed.
    #[error(transparent)]
    Scan(#[from] OpenError),
    /// Reading the index failed.
    #[error("reading the index for GC: {0}")]
    Index(#[from] IndexError),
    /// Erase mode: a segment holding records to erase cannot be compacted (nothing was
    /// written).
    #[error(
        "segment {segment} cannot be compacted to erase: {reason} (run `sessionlog verify`, \
         then `sessionlog recover --salvage` if it reports damage; then `sessionlog gc --erase`)"
    )]
    EraseBlocked {
        /// The segment number.
        segment: u64,
        /// Why.
        reason: String,
    },
    /// Writing a compacted segment failed; the old segment is intact (free some space and
    /// run the GC again).
    #[error("writing the compacted copy {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A segment's compacted copy, in memory.
pub(super) struct Compacted {
    pub(super) number: u64,
    pub(super) old_len: u64,
    pub(super) bytes: Vec<u8>,
    /// Every kept event of a session the index holds, at its new location.
    pub(super) events: Vec<(u64, Seq, Location)>,
    pub(super) dropped: u64,
}

/// Where the records of sessions the index does not hold are (purged sessions).
#[derive(Default)]
struct Orphans {
    /// Segments holding records of each such session.
    segments: HashMap<u64, BTreeSet<u64>>,
    /// The segment holding each such session's creation or fork record.
    created_in: HashMap<u64, u64>,
    /// The largest session number with a record in the log.
    top: u64,
    /// The parent named by each fork record.
    parent: HashMap<u64, u64>,
    /// Sessions created (or forked) by an operation that spans frames: a GC copies such
    /// frames whole, so their creation is never dropped, and neither is the rest of them.
    created_whole: HashSet<u64>,
}

pub(super) fn session_of(record: &Record) -> (u64, Option<Seq>) {
    match record {
        Record::CreateSession { session, .. }
        | Record::ForkSession { session, .. }
        | Record::DeleteSession { session }
        | Record::Verbatim { session } => (*session, None),
        Record::Event { session, event } => (*session, Some(event.seq)),
    }
}

impl Orphans {
    /// Notes the records of sessions not in `known` in one scanned frame (`records`: `None`
    /// when they do not decode); `in_chain`: the previous frame continues into this one.
    fn visit(
        &mut self,
        frame: &scan::ScannedFrame,
        records: Option<&[(u32, Record)]>,
        known: &HashSet<u64>,
        in_chain: &mut bool,
    ) {
        // Frames of an operation that spans frames are copied whole.
        let whole = *in_chain || frame.continued;
        *in_chain = frame.continued;
        let Some(records) = records else {
            return;
        };
        for (_, record) in records {
            let (session, _) = session_of(record);
            self.top = self.top.max(session);
            if known.contains(&session) {
                continue;
            }
            self.segments
                .entry(session)
                .or_default()
                .insert(frame.position.segment);
            if matches!(
                record,
                Record::CreateSession { .. } | Record::ForkSession { .. }
            ) {
                self.created_in.insert(session, frame.position.segment);
                if whole {
                    self.created_whole.insert(session);
                }
            }
            if let Record::ForkSession { parent, .. } = record {
                self.parent.insert(session, *parent);
            }
        }
    }

    /// The purged sessions whose records the GC drops from the segments in `collect`: those
    /// whose creation (or fork) record is in `collect` or already gone, so what remains of
    /// them elsewhere follows a compacted segment and a rebuild ignores it (§11.3). The
    /// session with the highest number keeps its records, and so do its ancestors (a rebuild
    /// ignores a fork record whose parent it does not hold), so a rebuild's next session
    /// number never goes down.
    fn droppable(&self, collect: &BTreeSet<u64>) -> HashSet<u64> {
        let mut d: HashSet<u64> = self
            .segments
            .keys()
            .copied()
            .filter(|s| self.created_in.get(s).is_none_or(|n| collect.contains(n)))
            .filter(|s| !self.created_whole.contains(s))
            .collect();
        let mut keep = Some(self.top);
        while let Some(s) = keep {
            d.remove(&s);
            keep = self.parent.get(&s).copied().filter(|p| *p < s);
        }
        d
    }
}

impl Store {
    /// Segment GC (format-spec.md §11): every sealed segment below the live-fraction
    /// threshold, entirely before the index's watermark, is rewritten in place with only the
    /// records still needed (live sessions, deleted sessions forks read through, and the
    /// records of purged sessions that other segments still need), the index is repointed
    /// in one durable commit, and the old file is replaced. Every event reads identically
    /// afterwards, through the index or through an index rebuilt from the log.
    ///
    /// `progress` is called with `(bytes done, bytes to do)` during the scans. Needs a
    /// writable store; appends wait only while the index is repointed.
    pub fn gc(
        &self,
        options: GcOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<GcReport, GcError> {
        let committer = self.committer()?.clone();
        let _one_at_a_time = self.gc_lock.lock().unwrap_or_else(|p| p.into_inner());
        if options.erase {
            return self.gc_erase(&committer, options, progress);
        }
        self.checkpoint()?;
        // One scan of the log: the space figures, and where purged sessions' records are.
        let known: HashSet<u64> = self.registry().rows().map(|r| r.number).collect();
        let mut orphans = Orphans::default();
        let mut in_chain = false;
        let space = self.space_with(progress, &mut |frame, records| {
            orphans.visit(frame, records, &known, &mut in_chain);
        })?;
        let watermark = committer.watermark();
        let mut report = GcReport {
            dry_run: options.dry_run,
            size_before: space.totals.size,
            ..GcReport::default()
        };
        let mut collect = BTreeSet::new();
        let mut eligible = HashSet::new();
        for s in &space.segments {
            if s.sealed && s.number < watermark.segment && s.damaged == 0 {
                eligible.insert(s.number);
            }
            if !(s.sealed && s.live_fraction() < options.live_fraction) {
                continue;
            }
            if s.number >= watermark.segment {
                report
                    .skipped
                    .push((s.number, "not yet behind the index's watermark".into()));
            } else if s.damaged > 0 {
                report.skipped.push((
                    s.number,
                    "damaged bytes (run `sessionlog recover --salvage`)".into(),
                ));
            } else {
                collect.insert(s.number);
            }
        }
        if collect.is_empty() {
            report.size_after = report.size_before;
            return Ok(report);
        }
        // A purged session's records can be dropped only with its creation record (a rebuild
        // then ignores what remains of it): the segment holding the creation of a purged
        // session a candidate holds records of is collected too.
        loop {
            let mut grew = false;
            for (session, segs) in &orphans.segments {
                if let Some(c) = orphans.created_in.get(session)
                    && !collect.contains(c)
                    && eligible.contains(c)
                    && segs.iter().any(|n| collect.contains(n))
                {
                    collect.insert(*c);
                    grew = true;
                }
            }
            if !grew {
                break;
            }
        }
        // A segment left alone (its copy would not be smaller, or it cannot be compacted)
        // keeps the creation records in it: the GC plans again without it, so that no copy
        // drops the later records (a `DeleteSession` among them) of a session whose creation
        // stays, which a rebuild from the log would bring back.
        let copies = loop {
            let droppable = orphans.droppable(&collect);
            let mut copies = Vec::new();
            let mut left = Vec::new();
            for &number in &collect {
                match self.compact_segment(
                    number,
                    &known,
                    &|r| droppable.contains(&session_of(r).0),
                    None,
                )? {
                    Ok(c) if (c.bytes.len() as u64) < c.old_len => copies.push(c),
                    Ok(_) => left.push((number, "nothing in it can be dropped yet".to_owned())),
                    Err(why) => left.push((number, why)),
                }
            }
            let done: BTreeSet<u64> = copies.iter().map(|c| c.number).collect();
            let replan = !left.is_empty() && orphans.droppable(&done) != droppable;
            report.skipped.extend(left);
            if !replan {
                break copies;
            }
            collect = done;
        };
        for c in &copies {
            report.compacted.push(c.number);
            report.freed += c.old_len - c.bytes.len() as u64;
            report.rewritten += c.bytes.len() as u64;
            report.records_dropped += c.dropped;
        }
        report.size_after = report.size_before - report.freed;
        if options.dry_run || copies.is_empty() {
            return Ok(report);
        }
        self.install_copies(&committer, &copies)?;
        Ok(report)
    }

    /// Writes each copy as `N.gc` (complete and durable), then repoints the index and renames
    /// the copies over the segments.
    pub(super) fn install_copies(
        &self,
        committer: &Committer,
        copies: &[Compacted],
    ) -> Result<(), GcError> {
        let fs = self.segments.fs().clone();
        let dir = self.segments.dir().to_path_buf();
        let mut handles: Vec<(u64, Arc<dyn StorageFile>)> = Vec::new();
        // A commit marker a crash left after its GC finished must be gone, durably, before
        // any copy is written (else an incomplete set would look committed).
        let marker = dir.join(GC_COMMIT_FILE);
        if fs.exists(&marker) {
            fs.remove_file(&marker)
                .and_then(|()| fs.sync_dir(&dir))
                .map_err(|source| GcError::Io {
                    path: marker.clone(),
                    source,
                })?;
        }
        for c in copies {
            let tmp = gc_path(&dir, c.number, GC_TMP_SUFFIX);
            let done = gc_path(&dir, c.number, GC_SUFFIX);
            let io_err = |source| GcError::Io {
                path: tmp.clone(),
                source,
            };
            if fs.exists(&tmp) {
                fs.remove_file(&tmp).map_err(io_err)?;
            }
            let f = fs.open(&tmp, OpenMode::CreateNew).map_err(io_err)?;
            // Each copy's name is durable before the next copy is written, so a crash leaves
            // the copies of a prefix of the segments (ascending): a copy may drop records of a
            // purged session whose creation an earlier copy drops, and a rebuild ignores them
            // only when that earlier copy is installed too (format-spec §11.4).
            let written = f
                .write_all_at(&c.bytes, 0)
                .and_then(|()| f.sync_data())
                .and_then(|()| fs.rename(&tmp, &done))
                .and_then(|()| fs.sync_dir(&dir));
            if let Err(source) = written {
                let _ = fs.remove_file(&tmp);
                return Err(GcError::Io { path: tmp, source });
            }
            handles.push((c.number, f));
        }
        fs.sync_dir(&dir).map_err(|source| GcError::Io {
            path: dir.clone(),
            source,
        })?;
        // The commit point: every copy is durable; from here on an open installs them all.
        let committed = (|| {
            fs.open(&marker, OpenMode::CreateNew)?;
            fs.sync_dir(&dir)
        })();
        if let Err(source) = committed {
            let _ = fs.remove_file(&marker);
            for c in copies {
                let _ = fs.remove_file(&gc_path(&dir, c.number, GC_SUFFIX));
            }
            return Err(GcError::Io {
                path: marker,
                source,
            });
        }
        committer.exclusive(|mut batch, watermark| {
            {
                let registry = self.registry();
                for c in copies {
                    batch.events.extend(
                        c.events
                            .iter()
                            .filter(|(s, _, _)| registry.get(*s).is_some()),
                    );
                }
            }
            let _swap = self.segments.swap_guard();
            self.index.commit(&batch, watermark, true)?;
            for (number, file) in &handles {
                self.segments.install_handle(*number, file.clone());
                self.segments
                    .set_version(*number, segment::COMPACTED_VERSION);
                fs.rename(
                    &gc_path(&dir, *number, GC_SUFFIX),
                    &self.segments.path(*number),
                )?;
            }
            fs.sync_dir(&dir)?;
            fs.remove_file(&marker)?;
            fs.sync_dir(&dir)?;
            Ok(())
        })?;
        Ok(())
    }

    /// The compacted copy of segment `number`, or why it cannot be compacted: every record
    /// `drop` names is dropped, the other records keep their order and bytes. A frame that
    /// loses no record is copied byte for byte; another becomes one frame of its kept records
    /// (or none). Frames of an operation that spans frames are copied whole unless `chains`
    /// is given (erase): then they are rewritten too, and the flags of each chain's kept
    /// frames are fixed when it ends (format-spec.md §11.6).
    pub(super) fn compact_segment(
        &self,
        number: u64,
        known: &HashSet<u64>,
        drop: &dyn Fn(&Record) -> bool,
        mut chains: Option<ChainRewrite<'_>>,
    ) -> Result<Result<Compacted, String>, GcError> {
        let path = self.segments.path(number);
        let io_err = |source| GcError::Io {
            path: path.clone(),
            source,
        };
        let file = self.segments.file(number).map_err(io_err)?;
        let len = file.len().map_err(io_err)?;
        let mut buf = vec![0u8; len as usize];
        file.read_exact_at(&mut buf, 0).map_err(io_err)?;
        let mut out = segment::encode_header_version(number, segment::COMPACTED_VERSION).to_vec();
        let mut events = Vec::new();
        let mut dropped = 0u64;
        let mut encoder = frame::Encoder::new(self.config.zstd_level);
        // The index run last checked per session (a frame holds one run per session).
        let mut checked: HashMap<u64, Run> = HashMap::new();
        let mut offset = SEGMENT_HEADER_LEN;
        while offset < len {
            let damaged = |what: String| Ok(Err(format!("frame at offset {offset}: {what}")));
            let Some(hb) = buf.get(offset as usize..offset as usize + FRAME_HEADER_LEN) else {
                return damaged("truncated header".into());
            };
            let mut hb16 = [0u8; FRAME_HEADER_LEN];
            hb16.copy_from_slice(hb);
            let header = match FrameHeader::parse(&hb16, &self.limits) {
                Ok(h) => h,
                Err(e) => return damaged(e.to_string()),
            };
            if let Err(e) = self.segments.check_flags(number, &header) {
                return damaged(e.to_string());
            }
            let end = offset + header.frame_len();
            let Some(bytes) = buf.get(offset as usize..end as usize) else {
                return damaged("truncated frame".into());
            };
            let payload = match frame::decode_payload(&header, &bytes[8..]) {
                Ok(p) => p,
                Err(e) => return damaged(e.to_string()),
            };
            let records = match Record::decode_all(&payload) {
                Ok(r) => r,
                Err(e) => return damaged(e.to_string()),
            };
            let chained = header.continued() || header.continuation();
            if let Some(c) = chains.as_mut()
                && header.continuation()
                && c.chain.is_none()
            {
                // The chain began in a segment this GC does not rewrite.
                *c.chain = Some(Chain::begun_outside());
            }
            let frozen = chained && chains.is_none();
            let mut kept = Vec::new();
            // (session, seq, record offset in the old frame, in the new one)
            let mut kept_events: Vec<(u64, Seq, u32, u32)> = Vec::new();
            let mut frame_dropped = 0u64;
            for (k, (roff, record)) in records.iter().enumerate() {
                let rend = records
                    .get(k + 1)
                    .map_or(payload.len(), |(o, _)| *o as usize);
                if !frozen && drop(record) {
                    frame_dropped += 1;
                    continue;
                }
                let (session, seq) = session_of(record);
                let new_roff = kept.len() as u32;
                kept.extend_from_slice(&payload[*roff as usize..rend]);
                if let (Some(seq), true) = (seq, known.contains(&session)) {
                    let located = match checked.get(&session) {
                        Some(r) if r.location.frame_offset == offset && seq < r.end() => true,
                        _ => match self.index.run(session, seq)? {
                            Some(r)
                                if r.location.segment == number
                                    && r.location.frame_offset == offset
                                    && seq < r.end() =>
                            {
                                checked.insert(session, r);
                                true
                            }
                            _ => false,
                        },
                    };
                    if !located {
                        return Ok(Err(format!(
                            "event seq {seq} of session number {session} at offset {offset} is \
                             not where the index locates it (run `sessionlog verify`)"
                        )));
                    }
                    kept_events.push((session, seq, *roff, new_roff));
                }
            }
            dropped += frame_dropped;
            let new_offset = out.len() as u64;
            let new_len = if frame_dropped == 0 {
                out.extend_from_slice(bytes);
                header.frame_len()
            } else if kept.is_empty() {
                0
            } else {
                // Drops are whole sessions', so every kept `EventNext` record keeps the
                // earlier record of its session it continues; checked, as a copy must decode
                // alone.
                if let Err(e) = Record::decode_all(&kept) {
                    return damaged(format!("its kept records do not decode alone: {e}"));
                }
                let flags = header.flags & (FLAG_CONTINUED | FLAG_CONTINUATION);
                let encoded = encoder.encode(&kept, self.config.compress_threshold, flags);
                let l = encoded.len() as u64;
                out.extend_from_slice(&encoded);
                l
            };
            if let Some(c) = chains.as_mut() {
                // A chain begun here is tracked even when its first frames are dropped
                // whole: a later kept frame then starts it (no CONTINUATION bit).
                if chained {
                    let chain = c.chain.get_or_insert_with(Chain::default);
                    if new_len > 0 {
                        chain.kept.push((number, new_offset));
                    }
                }
                if !header.continued()
                    && let Some(ended) = c.chain.take()
                {
                    ended.finish(false, c.patches);
                }
            }
            for (session, seq, old_roff, new_roff) in kept_events {
                events.push((
                    session,
                    seq,
                    Location {
                        segment: number,
                        frame_offset: new_offset,
                        frame_len: new_len as u32,
                        record_offset: if frame_dropped == 0 {
                            old_roff
                        } else {
                            new_roff
                        },
                    },
                ));
            }
            offset = end;
        }
        if let Some(c) = chains
            && !c.next_rewritten
            && let Some(ended) = c.chain.take()
        {
            ended.finish(true, c.patches);
        }
        Ok(Ok(Compacted {
            number,
            old_len: len,
            bytes: out,
            events,
            dropped,
        }))
    }
}

/// After a compacted segment (format-spec.md §11.3): a record of a session whose creation a
/// GC dropped (a purged session's later records, or a fork of such a session), which
/// recovery and `verify` ignore.
pub(super) fn collected(registry: &Registry, record: &Record) -> bool {
    match record {
        Record::CreateSession { .. } => false,
        Record::ForkSession { parent, .. } => registry.get(*parent).is_none(),
        Record::Event { session, .. }
        | Record::DeleteSession { session }
        | Record::Verbatim { session } => registry.get(*session).is_none(),
    }
}

/// The path of segment `number`'s compacted copy with `suffix`.
pub(super) fn gc_path(dir: &Path, number: u64, suffix: &str) -> PathBuf {
    dir.join(format!("{number:020}{suffix}"))
}

/// The segment number of a compacted copy's file name with `suffix`.
fn parse_gc_name(name: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Finishes a GC a crash interrupted, before a writable open reads the index (format-spec.md
/// §11.4): deletes a leftover `index.redb.tmp` (§11.6) and `N.gc.tmp` files; when `N.gc`
/// files exist, deletes `index.redb` (the GC may or may not have repointed it), then, when
/// `gc.commit` says the set of copies is complete, renames every `N.gc` over `N.seg`, and
/// otherwise deletes them (the old segments stay), so recovery rebuilds the index from the
/// log. Returns true when the index was deleted.
pub(super) fn finish_interrupted(
    fs: &dyn FileSystem,
    store_dir: &Path,
    segments_dir: &Path,
) -> Result<bool, OpenError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| OpenError::Io { path, source }
    };
    let index = store_dir.join(INDEX_FILE);
    crate::index::remove_leftover_rewrite(&index).map_err(io(&index))?;
    if !fs.exists(segments_dir) {
        return Ok(false);
    }
    let names = fs.list(segments_dir).map_err(io(segments_dir))?;
    let mut done = Vec::new();
    for name in &names {
        if parse_gc_name(name, GC_TMP_SUFFIX).is_some() {
            let p = segments_dir.join(name);
            fs.remove_file(&p).map_err(io(&p))?;
        } else if let Some(n) = parse_gc_name(name, GC_SUFFIX) {
            done.push(n);
        }
    }
    let marker = segments_dir.join(GC_COMMIT_FILE);
    let committed = names.iter().any(|n| n == GC_COMMIT_FILE);
    if done.is_empty() {
        if committed {
            fs.remove_file(&marker).map_err(io(&marker))?;
            fs.sync_dir(segments_dir).map_err(io(segments_dir))?;
        }
        return Ok(false);
    }
    match std::fs::remove_file(&index) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&index)(e)),
    }
    fs.sync_dir(store_dir).map_err(io(store_dir))?;
    for n in done {
        let from = gc_path(segments_dir, n, GC_SUFFIX);
        if committed {
            fs.rename(&from, &segment::path(segments_dir, n))
                .map_err(io(&from))?;
        } else {
            // The set of copies may be incomplete (the GC had not committed): the old
            // segments stay.
            fs.remove_file(&from).map_err(io(&from))?;
        }
    }
    if committed {
        fs.sync_dir(segments_dir).map_err(io(segments_dir))?;
        fs.remove_file(&marker).map_err(io(&marker))?;
    }
    fs.sync_dir(segments_dir).map_err(io(segments_dir))?;
    Ok(true)
}
