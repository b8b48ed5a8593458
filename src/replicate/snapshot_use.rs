//! A restore's use of an index snapshot (format-spec.md §12.7): the newest one at or before
//! the manifest restored whose position the restored log holds with the same generations,
//! downloaded, checked and staged as the new store's `index.redb`. Anything that does not
//! check out is a note, and the index is rebuilt from the log instead.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::layout::Manifest;
use super::remote::Remote;
use super::snapshot::{INDEX_DIR, SnapshotDescriptor, parse_snapshot_name, snapshot_path};
use crate::error::LogPosition;
use crate::index::{INDEX_FORMAT_VERSION, Index};
use crate::log::segment::{self, SEGMENTS_DIR};
use crate::store::INDEX_FILE;

/// Snapshots tried, newest first, before giving up on them.
const CANDIDATES: usize = 3;

/// A snapshot staged for the restored store.
#[derive(Debug, Clone)]
pub(crate) struct Staged {
    /// Its descriptor's object name.
    pub object: String,
    /// The log position it covers.
    pub position: LogPosition,
    /// The staged file (`staging/index.redb`).
    pub path: PathBuf,
}

/// The staged index file of a restore.
pub(crate) fn staged_index(staging: &Path) -> PathBuf {
    staging.join(INDEX_FILE)
}

/// Stages the newest usable snapshot for `manifest` (whose segments are already in
/// `staging/segments`); `notes` get why each snapshot tried was not used.
pub(crate) async fn stage(
    remote: &Remote,
    manifest: &Manifest,
    staging: &Path,
    notes: &mut Vec<String>,
) -> Option<Staged> {
    let path = staged_index(staging);
    let _ = std::fs::remove_file(&path);
    let listed = match remote.list(&remote.prefix.clone().join(INDEX_DIR)).await {
        Ok(l) => l,
        Err(e) => {
            notes.push(format!("index snapshots not listed: {e}"));
            return None;
        }
    };
    let key = (manifest.time_ms, manifest.sequence);
    let mut keys: Vec<(u64, u64)> = listed
        .iter()
        .filter_map(|m| parse_snapshot_name(m.location.filename()?))
        .filter(|(t, q, ext)| *ext == "json" && (*t, *q) <= key)
        .map(|(t, q, _)| (t, q))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    if keys.is_empty() {
        notes.push("the replica holds no index snapshot at or before this manifest".into());
        return None;
    }
    for (t, q) in keys.into_iter().rev().take(CANDIDATES) {
        let object = snapshot_path(&remote.prefix, t, q, "json").to_string();
        match try_one(remote, manifest, staging, t, q).await {
            Ok(position) => {
                return Some(Staged {
                    object,
                    position,
                    path,
                });
            }
            Err(why) => {
                let _ = std::fs::remove_file(&path);
                notes.push(format!("index snapshot {object} not used: {why}"));
            }
        }
    }
    None
}

/// Downloads and checks one snapshot, and writes it to `staging/index.redb`.
async fn try_one(
    remote: &Remote,
    manifest: &Manifest,
    staging: &Path,
    t: u64,
    q: u64,
) -> Result<LogPosition, String> {
    let descriptor = snapshot_path(&remote.prefix, t, q, "json");
    let (bytes, _) = remote
        .get(&descriptor)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("gone (removed by retention meanwhile)")?;
    let d = SnapshotDescriptor::decode(&bytes)?;
    if d.index_format_version != INDEX_FORMAT_VERSION {
        return Err(format!(
            "its index has format version {}, this build uses version {INDEX_FORMAT_VERSION}",
            d.index_format_version
        ));
    }
    if let Some(last) = d.matches(manifest)? {
        let seg = segment::path(&staging.join(SEGMENTS_DIR), last.number);
        let crc = crc_of_prefix(&seg, last.length)?;
        if crc != last.crc32 {
            return Err(format!(
                "segment {} differs from the restored log before offset {}",
                last.number, last.length
            ));
        }
    }
    let body_path = snapshot_path(&remote.prefix, t, q, "redb");
    let (body, _) = remote
        .get(&body_path)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("its body {body_path} is missing"))?;
    let crc = crc32fast::hash(&body);
    if body.len() as u64 != d.body.length || crc != d.body.crc32 {
        return Err(format!(
            "its body {body_path} is damaged: {} bytes with CRC {crc:#010x}, the descriptor says {} bytes with CRC {:#010x}",
            body.len(),
            d.body.length,
            d.body.crc32
        ));
    }
    let path = staged_index(staging);
    let mut index = Index::from_bytes(&body, &path).map_err(|e| e.to_string())?;
    if !index.check_integrity().map_err(|e| e.to_string())? {
        return Err("redb had to repair it".into());
    }
    index.check_entries().map_err(|e| e.to_string())?;
    let state = index.load().map_err(|e| e.to_string())?;
    index.close();
    let w = LogPosition {
        segment: state.watermark.segment,
        offset: state.watermark.end,
    };
    if state.format_version != Some(INDEX_FORMAT_VERSION) || w != d.log_position() {
        return Err(format!(
            "the index inside covers segment {} offset {} (format {:?}), its descriptor says segment {} offset {}",
            w.segment, w.offset, state.format_version, d.position.segment, d.position.offset
        ));
    }
    write_durably(&path, &body).map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(w)
}

fn crc_of_prefix(path: &Path, len: u64) -> Result<u32, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let head = bytes
        .get(..len as usize)
        .ok_or_else(|| format!("{} is shorter than {len} bytes", path.display()))?;
    Ok(crc32fast::hash(head))
}

fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("redb.tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}
