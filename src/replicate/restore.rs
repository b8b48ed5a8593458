//! Restore (format-spec.md §12.3-12.4): the newest manifest at or before a time, its parts
//! downloaded and checked, the segments written into a new store, the index taken from a
//! matching index snapshot (§12.7, `snapshot_use.rs`) and caught up, or rebuilt from the log,
//! and the store verified.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;

use super::frames::check_part;
use super::layout::{ManifestSegment, PartName, SEGMENTS, generation_dir, parse_part};
use super::remote::Remote;
use super::ship::{list_manifests, newest_manifest};
use super::snapshot_use::{self, Staged};
use super::{ReplicaTarget, ReplicateError};
use crate::error::LogPosition;
use crate::log::segment::{self, SEGMENTS_DIR};
use crate::store::{Config, Store};

/// The staging directory inside the target while a restore runs.
pub const RESTORE_STAGING: &str = ".restore";
/// Parts downloaded at once.
const PARALLEL_GETS: usize = 4;

/// What [`restore`] did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RestoreReport {
    /// The manifest restored (its object name).
    pub manifest: String,
    /// Its time (ms since the Unix epoch).
    pub time_ms: u64,
    /// The end of the restored log.
    pub position: LogPosition,
    /// Segments written.
    pub segments: u64,
    /// Bytes of the restored log.
    pub bytes: u64,
    /// Bytes downloaded (less than `bytes` when an interrupted restore was resumed).
    pub downloaded: u64,
    /// Segments kept from an interrupted restore.
    pub resumed_segments: u64,
    /// Sessions in the restored store.
    pub sessions: usize,
    /// Events checked by the verification.
    pub events: u64,
    /// The index snapshot used (its descriptor's object name); `None`: the index was rebuilt
    /// from the log.
    pub snapshot: Option<String>,
    /// The log position the snapshot covered (the open replayed the log past it).
    pub snapshot_position: Option<LogPosition>,
    /// True when the open rebuilt the index from the whole log.
    pub index_rebuilt: bool,
    /// Frames the open read to bring the index up to the log's end (from the snapshot's
    /// position, or from the start when rebuilt).
    pub frames_replayed: u64,
    /// Why snapshots were not used (none in the replica, another generation of a segment,
    /// a damaged object, `use_snapshots(false)`), or why one was given up after use.
    pub notes: Vec<String>,
    /// Time spent downloading (and checking) the parts.
    pub download_time: Duration,
    /// Time spent downloading and checking the index snapshot (part of `download_time`).
    pub snapshot_time: Duration,
    /// Time spent opening the store (catching the index up from the snapshot, or rebuilding
    /// it from the log).
    pub open_time: Duration,
    /// Time spent verifying the store.
    pub verify_time: Duration,
}

/// Restores the replica at `from` into `dir` (new or empty, or holding an interrupted
/// restore, which is resumed): the newest manifest at or before `at` (the newest of all
/// without it). The store holds exactly the log up to the manifest's position; its index is
/// the newest matching index snapshot caught up to the log's end (unless
/// [`ReplicaTarget::use_snapshots`] is false), else rebuilt from the log; and it is verified
/// clean before this returns. A snapshot that fails a check is a note in the report
/// ([`RestoreReport::notes`]) and the index is rebuilt.
pub fn restore(
    from: &ReplicaTarget,
    at: Option<SystemTime>,
    dir: impl AsRef<Path>,
) -> Result<RestoreReport, ReplicateError> {
    let dir = dir.as_ref();
    let staging = prepare_target(dir)?;
    let remote = Remote {
        store: from.build()?,
        prefix: from.prefix_path(),
        url: from.url().to_owned(),
    };
    let at_ms = at.map(|t| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ReplicateError::io(dir, e))?;
    let started = Instant::now();
    let (mut report, staged) =
        runtime.block_on(download(&remote, at_ms, &staging, from.uses_snapshots()))?;
    report.download_time = started.elapsed();
    // Publish the segments: one rename makes the store appear (a store whose open would
    // rebuild its index from the log); then the snapshot becomes its index.
    let segments_dir = dir.join(SEGMENTS_DIR);
    std::fs::rename(staging.join(SEGMENTS_DIR), &segments_dir)
        .map_err(|e| ReplicateError::io(&segments_dir, e))?;
    let index = dir.join(crate::store::INDEX_FILE);
    if let Some(s) = &staged {
        std::fs::rename(&s.path, &index).map_err(|e| ReplicateError::io(&index, e))?;
    }
    sync_dir(dir)?;
    let _ = std::fs::remove_dir_all(&staging);
    let mut problems = open_and_verify(dir, &mut report)?;
    if !problems.is_empty() && report.snapshot.is_some() {
        // The snapshot is derived data: never trusted over the log.
        report.notes.push(format!(
            "the store opened from index snapshot {} did not verify ({}): the index was rebuilt from the log",
            report.snapshot.take().unwrap_or_default(),
            problems.join("; ")
        ));
        std::fs::remove_file(&index).map_err(|e| ReplicateError::io(&index, e))?;
        problems = open_and_verify(dir, &mut report)?;
    }
    if !problems.is_empty() {
        return Err(ReplicateError::Verify {
            path: dir.to_path_buf(),
            detail: problems.join("; "),
        });
    }
    Ok(report)
}

/// Opens the restored store (its index caught up from a snapshot, or rebuilt), verifies it
/// and closes it; the problems found.
fn open_and_verify(dir: &Path, report: &mut RestoreReport) -> Result<Vec<String>, ReplicateError> {
    let opened = Instant::now();
    let store = Store::open(dir, Config::default())?;
    report.open_time = opened.elapsed();
    let recovery = store.recovery_report();
    report.index_rebuilt = recovery.index_rebuilt || report.snapshot.is_none();
    report.frames_replayed = recovery.frames_scanned;
    if let (Some(s), true) = (&report.snapshot, recovery.index_rebuilt) {
        report.notes.push(format!(
            "the open rebuilt the index from the log instead of using snapshot {s}: {}",
            recovery.rebuild_reason.clone().unwrap_or_default()
        ));
        report.snapshot = None;
    }
    let verifying = Instant::now();
    let verified = store.verify()?;
    let mut problems: Vec<String> = verified
        .bad_frames
        .iter()
        .map(|b| format!("bad frame at {}: {}", b.position, b.reason))
        .chain(verified.problems.iter().cloned())
        .collect();
    if let Some(t) = store.recovery_report().truncated.clone() {
        problems.push(format!("the open cut the log: {t:?}"));
    }
    report.sessions = store.sessions().len();
    report.events = verified.events;
    store.close().map_err(|e| ReplicateError::Verify {
        path: dir.to_path_buf(),
        detail: e.to_string(),
    })?;
    report.verify_time = verifying.elapsed();
    Ok(problems)
}

/// Creates `dir` (private) or accepts it empty or holding only an interrupted restore's
/// staging directory; returns the staging directory.
fn prepare_target(dir: &Path) -> Result<PathBuf, ReplicateError> {
    if dir.exists() && !dir.is_dir() {
        return Err(ReplicateError::TargetNotEmpty(dir.to_path_buf()));
    }
    crate::fs::create_private_dir_all(dir).map_err(|e| ReplicateError::io(dir, e))?;
    let entries = std::fs::read_dir(dir).map_err(|e| ReplicateError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| ReplicateError::io(dir, e))?;
        if entry.file_name() != RESTORE_STAGING {
            return Err(ReplicateError::TargetNotEmpty(dir.to_path_buf()));
        }
    }
    let staging = dir.join(RESTORE_STAGING);
    let segments = staging.join(SEGMENTS_DIR);
    crate::fs::create_private_dir_all(&segments).map_err(|e| ReplicateError::io(&segments, e))?;
    Ok(staging)
}

async fn download(
    remote: &Remote,
    at_ms: Option<u64>,
    staging: &Path,
    use_snapshots: bool,
) -> Result<(RestoreReport, Option<Staged>), ReplicateError> {
    let Some((name, manifest)) = newest_manifest(remote, at_ms).await? else {
        let all = list_manifests(remote).await?;
        let oldest = all.iter().map(|(k, _)| k.0).min();
        return Err(ReplicateError::NoManifest(match (at_ms, oldest) {
            (Some(at), Some(o)) => format!(
                "{} has no manifest at or before {at} ms (the oldest is at {o} ms: restore with a later --at)",
                remote.url
            ),
            _ => format!(
                "{} holds no replica (no manifest): ship one first with `sessionlog replicate --to {} DIR`",
                remote.url, remote.url
            ),
        }));
    };
    let mut parts: HashMap<(u64, u64), Vec<PartName>> = HashMap::new();
    for meta in remote.list(&remote.prefix.clone().join(SEGMENTS)).await? {
        if let Some(p) = parse_part(&remote.prefix, &meta.location) {
            parts.entry((p.segment, p.generation)).or_default().push(p);
        }
    }
    let mut report = RestoreReport {
        manifest: name,
        time_ms: manifest.time_ms,
        position: manifest.log_position(),
        segments: manifest.segments.len() as u64,
        bytes: 0,
        downloaded: 0,
        resumed_segments: 0,
        sessions: 0,
        events: 0,
        snapshot: None,
        snapshot_position: None,
        index_rebuilt: false,
        frames_replayed: 0,
        notes: Vec::new(),
        download_time: Duration::ZERO,
        snapshot_time: Duration::ZERO,
        open_time: Duration::ZERO,
        verify_time: Duration::ZERO,
    };
    let dir = staging.join(SEGMENTS_DIR);
    // Segments of another manifest left by an interrupted restore past this one's end.
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let keep = entry
                .file_name()
                .to_str()
                .and_then(segment::parse_file_name)
                .is_some_and(|n| n <= manifest.position.segment);
            if !keep {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    for s in &manifest.segments {
        report.bytes += s.length;
        let path = segment::path(&dir, s.number);
        if staged_matches(&path, s) {
            report.resumed_segments += 1;
            continue;
        }
        let chosen = choose_parts(remote, s, parts.get(&(s.number, s.generation)))?;
        let bytes = fetch(remote, s, &chosen).await?;
        report.downloaded += bytes.len() as u64;
        write_segment(&dir, &path, &bytes)?;
    }
    sync_dir(&dir)?;
    let started = Instant::now();
    let staged = if use_snapshots {
        snapshot_use::stage(remote, &manifest, staging, &mut report.notes).await
    } else {
        let _ = std::fs::remove_file(snapshot_use::staged_index(staging));
        report
            .notes
            .push("index snapshots not used (asked for a rebuild from the log)".into());
        None
    };
    report.snapshot_time = started.elapsed();
    if let Some(s) = &staged {
        report.snapshot = Some(s.object.clone());
        report.snapshot_position = Some(s.position);
    }
    Ok((report, staged))
}

/// True when an interrupted restore already wrote this segment whole.
fn staged_matches(path: &Path, s: &ManifestSegment) -> bool {
    match std::fs::read(path) {
        Ok(b) => b.len() as u64 == s.length && crc32fast::hash(&b) == s.crc32,
        Err(_) => false,
    }
}

/// Parts covering `0 .. length` (format-spec.md §12.3): from 0, the part starting at the
/// current end that reaches furthest without passing `length`, else one that passes it (read
/// only up to `length`).
fn choose_parts(
    remote: &Remote,
    s: &ManifestSegment,
    parts: Option<&Vec<PartName>>,
) -> Result<Vec<(PartName, u64)>, ReplicateError> {
    let empty = Vec::new();
    let parts = parts.unwrap_or(&empty);
    let mut chosen = Vec::new();
    let mut at = 0u64;
    while at < s.length {
        let from_here = parts.iter().filter(|p| p.start == at);
        let best = from_here
            .clone()
            .filter(|p| p.end <= s.length)
            .max_by_key(|p| p.end)
            .or_else(|| from_here.min_by_key(|p| p.end));
        let Some(p) = best else {
            return Err(ReplicateError::Damaged {
                object: generation_dir(&remote.prefix, s.number, s.generation).to_string(),
                detail: format!(
                    "no part starts at offset {at} of segment {} (it needs 0 .. {})",
                    s.number, s.length
                ),
            });
        };
        let end = p.end.min(s.length);
        chosen.push((p.clone(), end));
        at = end;
    }
    Ok(chosen)
}

/// Downloads the chosen parts (a few at once), checks each, and the segment's CRC.
async fn fetch(
    remote: &Remote,
    s: &ManifestSegment,
    chosen: &[(PartName, u64)],
) -> Result<Vec<u8>, ReplicateError> {
    let results: Vec<Result<Vec<u8>, ReplicateError>> =
        futures_util::stream::iter(chosen.iter().map(|(p, end)| async move {
            let object = p.path.to_string();
            let (mut bytes, _) =
                remote
                    .get(&p.path)
                    .await?
                    .ok_or_else(|| {
                        ReplicateError::Damaged {
                    object: object.clone(),
                    detail:
                        "listed, then gone (removed by retention meanwhile: run the restore again)"
                            .into(),
                }
                    })?;
            if bytes.len() as u64 != p.end - p.start {
                return Err(ReplicateError::Damaged {
                    object,
                    detail: format!("{} bytes, its name says {}", bytes.len(), p.end - p.start),
                });
            }
            bytes.truncate((end - p.start) as usize);
            check_part(&bytes, s.number, p.start)
                .map_err(|detail| ReplicateError::Damaged { object, detail })?;
            Ok(bytes)
        }))
        .buffered(PARALLEL_GETS)
        .collect()
        .await;
    let mut out = Vec::with_capacity(s.length as usize);
    for r in results {
        out.extend(r?);
    }
    let crc = crc32fast::hash(&out);
    if out.len() as u64 != s.length || crc != s.crc32 {
        return Err(ReplicateError::Damaged {
            object: generation_dir(&remote.prefix, s.number, s.generation).to_string(),
            detail: format!(
                "segment {}: {} bytes with CRC {crc:#010x}, the manifest says {} bytes with CRC {:#010x}",
                s.number,
                out.len(),
                s.length,
                s.crc32
            ),
        });
    }
    Ok(out)
}

/// Writes a segment file durably (a temporary name, fsync, rename).
fn write_segment(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), ReplicateError> {
    let tmp = path.with_extension("seg.tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| ReplicateError::io(&tmp, e))?;
    f.write_all(bytes)
        .map_err(|e| ReplicateError::io(&tmp, e))?;
    f.sync_all().map_err(|e| ReplicateError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| ReplicateError::io(path, e))?;
    let _ = dir;
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), ReplicateError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| ReplicateError::io(dir, e))
}
