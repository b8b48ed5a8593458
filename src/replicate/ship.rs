//! The shipping rounds (format-spec.md §12.2-12.3): from the newest manifest on, each round
//! uploads what the log gained up to a commit point, as parts of each segment's current
//! generation (a new generation when the local file is no longer the byte string shipped),
//! then writes a manifest naming a consistent set.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use super::ReplicateError;
use super::frames::{check_frames, check_header};
use super::layout::{
    MANIFEST_FORMAT, MANIFEST_VERSION, MANIFESTS, Manifest, ManifestPosition, ManifestSegment,
    SEGMENTS, manifest_path, parse_manifest_name, parse_part, part_path,
};
use super::lease::Lease;
use super::local::{LocalLog, SegmentFile, shippable_end};
use super::remote::Remote;
use super::snapshot::{Capture, INDEX_DIR, describe, parse_snapshot_name, snapshot_path};
use crate::error::LogPosition;
use crate::log::segment::SEGMENT_HEADER_LEN;
use crate::store::now_ms;

/// What is known of one segment's current generation on the remote.
#[derive(Debug, Clone)]
pub(crate) struct SegState {
    pub generation: u64,
    /// Bytes `0 .. shipped` of the generation are uploaded (in parts).
    pub shipped: u64,
    /// CRC-32 of those bytes.
    pub crc: u32,
    pub format_version: u32,
    /// The local file they were read from (`None`: not checked in this run yet).
    pub file: Option<(u64, u64)>,
}

/// What a round did.
#[derive(Debug, Default, Clone)]
pub(crate) struct Round {
    /// Where it could ship to (`None`: a writer is starting, or a GC is installing copies).
    pub acknowledged: Option<LogPosition>,
    /// Bytes from the last manifest to `acknowledged`.
    pub lag_bytes: u64,
    /// A manifest was written at this position.
    pub shipped: Option<LogPosition>,
    pub parts: u64,
    pub bytes: u64,
    pub generations: u64,
    /// An index snapshot was shipped with the manifest (its position), or why the copy
    /// taken for it could not be used.
    pub snapshot: Option<Result<LogPosition, String>>,
}

/// The shipper's state between rounds.
pub(crate) struct Shipper {
    pub remote: Remote,
    pub store_dir: PathBuf,
    pub replicator: String,
    pub lease: Lease,
    pub segments: BTreeMap<u64, SegState>,
    /// The highest generation of each segment seen on the remote.
    max_generation: HashMap<u64, u64>,
    /// The last manifest's position (written by this run or found at its start).
    pub manifest_position: LogPosition,
    manifest_segments: u64,
    /// The remote held an index snapshot when this run started.
    pub has_snapshot: bool,
    sequence: u64,
    last_time: u64,
}

impl Shipper {
    /// Starts from the newest manifest: its generations are continued where the local files
    /// still hold the same bytes (checked at the first round) and no part of a round that
    /// died past it holds other bytes than the local file.
    pub async fn start(
        remote: Remote,
        store_dir: PathBuf,
        replicator: String,
    ) -> Result<Shipper, ReplicateError> {
        let lease = Lease::acquire(&remote, &replicator).await?;
        let newest = newest_manifest(&remote, None).await?;
        let parts = remote.list(&remote.prefix.clone().join(SEGMENTS)).await?;
        let mut max_generation: HashMap<u64, u64> = HashMap::new();
        let mut by_generation: HashMap<(u64, u64), Vec<super::layout::PartName>> = HashMap::new();
        for meta in &parts {
            if let Some(p) = parse_part(&remote.prefix, &meta.location) {
                let g = max_generation.entry(p.segment).or_default();
                *g = (*g).max(p.generation);
                by_generation
                    .entry((p.segment, p.generation))
                    .or_default()
                    .push(p);
            }
        }
        let mut shipper = Shipper {
            remote,
            store_dir,
            replicator,
            lease,
            segments: BTreeMap::new(),
            max_generation,
            manifest_position: LogPosition::default(),
            manifest_segments: 0,
            has_snapshot: false,
            sequence: 1,
            last_time: 0,
        };
        let snapshots = shipper
            .remote
            .list(&shipper.remote.prefix.clone().join(INDEX_DIR))
            .await?;
        shipper.has_snapshot = snapshots.iter().any(|m| {
            m.location
                .filename()
                .and_then(parse_snapshot_name)
                .is_some_and(|(_, _, ext)| ext == "json")
        });
        let Some((_, manifest)) = newest else {
            return Ok(shipper);
        };
        shipper.sequence = manifest.sequence.saturating_add(1);
        shipper.last_time = manifest.time_ms;
        shipper.manifest_position = manifest.log_position();
        shipper.manifest_segments = manifest.segments.len() as u64;
        let log = LocalLog::list(&shipper.store_dir)?;
        for s in &manifest.segments {
            let mut state = SegState {
                generation: s.generation,
                shipped: s.length,
                crc: s.crc32,
                format_version: s.format_version,
                file: None,
            };
            // Parts past the manifest (a round that died before its manifest): continue the
            // generation only if they hold the local file's bytes.
            let strays: Vec<_> = by_generation
                .get(&(s.number, s.generation))
                .map(|v| v.iter().filter(|p| p.end > s.length).cloned().collect())
                .unwrap_or_default();
            if !strays.is_empty() && !strays_match(&shipper.remote, &log, s.number, &strays).await?
            {
                state = shipper.fresh(s.number);
            }
            shipper.segments.insert(s.number, state);
        }
        Ok(shipper)
    }

    /// A new generation of segment `n`, nothing shipped.
    fn fresh(&mut self, n: u64) -> SegState {
        let g = self.max_generation.entry(n).or_default();
        *g += 1;
        SegState {
            generation: *g,
            shipped: 0,
            crc: 0,
            format_version: 0,
            file: None,
        }
    }

    /// One round. Errors leave the state consistent: what was uploaded stays counted, and
    /// the next round writes the manifest. With a `capture` of the index (taken before the
    /// round read how far it may ship), the round writes a manifest even when the log did
    /// not move, and ships the snapshot beside it (format-spec.md §12.7).
    pub async fn round(
        &mut self,
        acknowledged: &mut Option<Round>,
        capture: Option<Capture>,
    ) -> Result<Round, ReplicateError> {
        let mut round = Round::default();
        // Renewed whatever the round does, so an idle replicator keeps its prefix.
        if self.lease.due() {
            self.lease.renew(&self.remote).await?;
        }
        let log = LocalLog::list(&self.store_dir)?;
        if log.gc_installing {
            *acknowledged = Some(round.clone());
            return Ok(round);
        }
        let Some(end) = shippable_end(&self.store_dir, &log, self.manifest_position)? else {
            *acknowledged = Some(round.clone());
            return Ok(round);
        };
        // Open every segment up to the end now: the set read is checked again at the end.
        let mut files: Vec<SegmentFile> = Vec::new();
        for n in 1..=end.segment {
            files.push(log.open(n)?);
        }
        round.acknowledged = Some(end);
        round.lag_bytes = distance(&files, self.manifest_position, end);
        *acknowledged = Some(round.clone());
        if end == self.manifest_position && self.manifest_segments == end.segment {
            // Nothing new; a GC may still have replaced a sealed segment.
            if capture.is_none() && !self.any_replaced(&files)? {
                return Ok(round);
            }
        }
        for (i, f) in files.iter().enumerate() {
            let n = i as u64 + 1;
            let limit = if n < end.segment { f.len } else { end.offset };
            self.ship_segment(n, f, limit, &mut round).await?;
        }
        // The set read must still be in place, and no GC installing copies: else another
        // round (the parts stay; the next manifest names what is then consistent).
        let log_after = LocalLog::list(&self.store_dir)?;
        if log_after.gc_installing
            || files
                .iter()
                .enumerate()
                .any(|(i, f)| log.id_now(i as u64 + 1) != Some(f.id))
        {
            for s in self.segments.values_mut() {
                s.file = None;
            }
            return Ok(round);
        }
        if self.lease.due() {
            self.lease.renew(&self.remote).await?;
        }
        let manifest = self.manifest(end);
        let path = manifest_path(&self.remote.prefix, manifest.time_ms, manifest.sequence);
        self.remote.put(&path, manifest.encode()).await?;
        self.sequence += 1;
        self.last_time = manifest.time_ms;
        self.manifest_position = end;
        self.manifest_segments = end.segment;
        round.shipped = Some(end);
        round.lag_bytes = 0;
        if let Some(c) = capture {
            round.snapshot = Some(self.ship_snapshot(&c, &files, &manifest).await);
        }
        *acknowledged = Some(round.clone());
        Ok(round)
    }

    /// Uploads the snapshot's body, then its descriptor (which makes it exist), named after
    /// the manifest just written. `Err` says why it was not shipped.
    async fn ship_snapshot(
        &self,
        capture: &Capture,
        files: &[SegmentFile],
        manifest: &Manifest,
    ) -> Result<LogPosition, String> {
        let d = describe(capture, files, &self.segments, manifest)?;
        let prefix = &self.remote.prefix;
        let body = snapshot_path(prefix, manifest.time_ms, manifest.sequence, "redb");
        self.remote
            .put(&body, capture.bytes.clone())
            .await
            .map_err(|e| e.to_string())?;
        let descriptor = snapshot_path(prefix, manifest.time_ms, manifest.sequence, "json");
        self.remote
            .put(&descriptor, d.encode())
            .await
            .map_err(|e| e.to_string())?;
        Ok(d.log_position())
    }

    /// True when a segment file already shipped is another file now (a GC's copy).
    fn any_replaced(&self, files: &[SegmentFile]) -> Result<bool, ReplicateError> {
        Ok(files.iter().enumerate().any(|(i, f)| {
            self.segments
                .get(&(i as u64 + 1))
                .is_none_or(|s| s.file != Some(f.id))
        }))
    }

    /// Uploads bytes `shipped .. limit` of segment `n` (checked first), starting a new
    /// generation when the file is not the byte string shipped so far.
    async fn ship_segment(
        &mut self,
        n: u64,
        f: &SegmentFile,
        limit: u64,
        round: &mut Round,
    ) -> Result<(), ReplicateError> {
        let mut state = match self.segments.get(&n) {
            Some(s) if s.file == Some(f.id) && s.shipped <= limit => s.clone(),
            Some(s) if s.shipped <= limit && f.crc_of_prefix(s.shipped)? == Some(s.crc) => {
                SegState {
                    file: Some(f.id),
                    ..s.clone()
                }
            }
            _ => {
                if self.segments.contains_key(&n) {
                    round.generations += 1;
                }
                let mut s = self.fresh(n);
                s.file = Some(f.id);
                s
            }
        };
        if limit > state.shipped {
            let bytes = f.read(state.shipped, limit)?;
            if (bytes.len() as u64) < limit - state.shipped {
                return Err(damage(
                    n,
                    f.len,
                    "the file is shorter than the position to ship",
                ));
            }
            let (frames, base) = if state.shipped == 0 {
                state.format_version = check_header(&bytes, n).map_err(|d| damage(n, 0, &d))?;
                let h = SEGMENT_HEADER_LEN as usize;
                (bytes.get(h..).unwrap_or(&[]), SEGMENT_HEADER_LEN)
            } else {
                (&bytes[..], state.shipped)
            };
            let open = frames
                .get(8)
                .is_some_and(|b| b & crate::log::frame::FLAG_CONTINUATION != 0);
            let c = check_frames(frames, base, open);
            if let Some((at, why)) = c.damage {
                return Err(damage(n, at, &why));
            }
            if c.end != limit {
                return Err(damage(
                    n,
                    c.end,
                    "a frame cut short before the position to ship",
                ));
            }
            let path = part_path(
                &self.remote.prefix,
                n,
                state.generation,
                state.shipped,
                limit,
            );
            let len = bytes.len() as u64;
            let mut hasher = crc32fast::Hasher::new_with_initial_len(state.crc, state.shipped);
            hasher.update(&bytes);
            self.remote.put(&path, bytes).await?;
            state.crc = hasher.finalize();
            state.shipped = limit;
            round.parts += 1;
            round.bytes += len;
        }
        self.segments.insert(n, state);
        Ok(())
    }

    fn manifest(&self, end: LogPosition) -> Manifest {
        let time_ms = (now_ms().max(0) as u64).max(self.last_time + 1);
        let segments = (1..=end.segment)
            .filter_map(|n| {
                let s = self.segments.get(&n)?;
                Some(ManifestSegment {
                    number: n,
                    generation: s.generation,
                    format_version: s.format_version,
                    length: s.shipped,
                    crc32: s.crc,
                })
            })
            .collect();
        Manifest {
            format: MANIFEST_FORMAT.into(),
            version: MANIFEST_VERSION,
            time_ms,
            sequence: self.sequence,
            replicator: self.replicator.clone(),
            position: ManifestPosition {
                segment: end.segment,
                offset: end.offset,
            },
            segments,
        }
    }

    /// The generations this run is building (retention keeps them).
    pub fn current(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.segments
            .iter()
            .map(|(n, s)| (*n, s.generation, s.shipped))
    }
}

fn damage(segment: u64, offset: u64, detail: &str) -> ReplicateError {
    ReplicateError::LocalDamage {
        at: LogPosition { segment, offset },
        detail: detail.to_owned(),
    }
}

/// Bytes of log between `from` and `to` (`files[i]` is segment `i + 1`).
fn distance(files: &[SegmentFile], from: LogPosition, to: LogPosition) -> u64 {
    if to <= from {
        return 0;
    }
    if from.segment == to.segment {
        return to.offset - from.offset;
    }
    let len = |n: u64| files.get(n as usize - 1).map_or(0, |f| f.len);
    let mut total = if from.segment == 0 {
        0
    } else {
        len(from.segment).saturating_sub(from.offset)
    };
    for n in from.segment + 1..to.segment {
        total += len(n).saturating_sub(SEGMENT_HEADER_LEN);
    }
    total + to.offset.saturating_sub(SEGMENT_HEADER_LEN)
}

/// True when every stray part holds the bytes the local file of segment `n` holds there.
async fn strays_match(
    remote: &Remote,
    log: &LocalLog,
    n: u64,
    strays: &[super::layout::PartName],
) -> Result<bool, ReplicateError> {
    if n > log.last() {
        return Ok(false);
    }
    let f = log.open(n)?;
    for p in strays {
        let Some((bytes, _)) = remote.get(&p.path).await? else {
            continue;
        };
        if f.read(p.start, p.end)? != bytes {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The newest manifest with a time at or before `at_ms` (any, when `None`), with its object
/// name.
pub(crate) async fn newest_manifest(
    remote: &Remote,
    at_ms: Option<u64>,
) -> Result<Option<(String, Manifest)>, ReplicateError> {
    let names = list_manifests(remote).await?;
    let Some((_, path)) = names
        .into_iter()
        .filter(|((t, _), _)| at_ms.is_none_or(|at| *t <= at))
        .max_by_key(|(k, _)| *k)
    else {
        return Ok(None);
    };
    let name = path.to_string();
    let (bytes, _) = remote
        .get(&path)
        .await?
        .ok_or_else(|| ReplicateError::Damaged {
            object: name.clone(),
            detail: "listed, then gone (removed by retention meanwhile: run again)".into(),
        })?;
    Ok(Some((name.clone(), Manifest::decode(&name, &bytes)?)))
}

/// Every manifest's (time, sequence) and path.
pub(crate) async fn list_manifests(
    remote: &Remote,
) -> Result<Vec<((u64, u64), object_store::path::Path)>, ReplicateError> {
    let metas = remote.list(&remote.prefix.clone().join(MANIFESTS)).await?;
    Ok(metas
        .into_iter()
        .filter_map(|m| {
            let key = parse_manifest_name(m.location.filename()?)?;
            // Only direct children of manifests/.
            (m.location.parts().count() == remote.prefix.parts().count() + 2)
                .then_some((key, m.location))
        })
        .collect())
}
