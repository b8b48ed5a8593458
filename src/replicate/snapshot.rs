//! Index snapshots (format-spec.md §12.7): a copy of `index.redb` taken beside the writer,
//! checked, and shipped with a descriptor naming the log it matches, so that a restore opens
//! it and replays only the log past it instead of rebuilding the index from the whole log.

use std::path::Path;

use object_store::path::Path as ObjectPath;
use serde::{Deserialize, Serialize};

use super::layout::{Manifest, ManifestPosition};
use super::local::{LocalLog, SegmentFile};
use super::ship::SegState;
use crate::error::LogPosition;
use crate::index::{INDEX_FORMAT_VERSION, Index};
use crate::store::INDEX_FILE;

/// The snapshot descriptor's `format` field.
pub const SNAPSHOT_FORMAT: &str = "sessionlog-index-snapshot";
/// The snapshot descriptor version this build writes and reads.
pub const SNAPSHOT_VERSION: u64 = 1;

pub(crate) const INDEX_DIR: &str = "index";

/// A snapshot's descriptor `index/<time>-<sequence>.json` (format-spec.md §12.7): which log
/// the body (`index/<time>-<sequence>.redb`, a copy of `index.redb`) covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SnapshotDescriptor {
    /// Always [`SNAPSHOT_FORMAT`].
    pub format: String,
    /// Always [`SNAPSHOT_VERSION`] for what this build writes.
    pub version: u64,
    /// The time of the manifest it was shipped with (its name's `<time>`).
    pub time_ms: u64,
    /// That manifest's sequence number.
    pub sequence: u64,
    /// The replicator's id.
    pub replicator: String,
    /// The index format version of the body (`meta/format_version`).
    pub index_format_version: u32,
    /// The index's watermark: it covers the log up to here, a commit point.
    pub position: ManifestPosition,
    /// Segments `1 ..= position.segment`: generation, and length and CRC-32 of the bytes
    /// `0 .. length` the index covers (the last one's length is `position.offset`).
    pub segments: Vec<SnapshotSegment>,
    /// The body's length and CRC-32.
    pub body: SnapshotBody,
}

/// One segment a snapshot covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotSegment {
    /// The segment number.
    pub number: u64,
    /// The generation whose bytes the index describes.
    pub generation: u64,
    /// Bytes `0 .. length` of it are covered.
    pub length: u64,
    /// CRC-32 of those bytes.
    pub crc32: u32,
}

/// The snapshot body's length and CRC-32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotBody {
    /// Bytes.
    pub length: u64,
    /// CRC-32 of them.
    pub crc32: u32,
}

impl SnapshotDescriptor {
    /// The position as a [`LogPosition`].
    pub fn log_position(&self) -> LogPosition {
        self.position.log_position()
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut text = serde_json::to_vec_pretty(self).unwrap_or_default();
        text.push(b'\n');
        text
    }

    /// Parses and checks a descriptor; `Err` says why it cannot be used.
    pub(crate) fn decode(bytes: &[u8]) -> Result<SnapshotDescriptor, String> {
        let head: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("the descriptor is not JSON: {e}"))?;
        let format = head.get("format").and_then(|v| v.as_str()).unwrap_or("");
        let version = head.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
        if format != SNAPSHOT_FORMAT || version != SNAPSHOT_VERSION {
            return Err(format!(
                "format {format:?} version {version}; this sessionlog reads {SNAPSHOT_FORMAT:?} version {SNAPSHOT_VERSION}"
            ));
        }
        let d: SnapshotDescriptor =
            serde_json::from_value(head).map_err(|e| format!("a bad field: {e}"))?;
        if d.position.segment == 0 || d.segments.len() as u64 != d.position.segment {
            return Err(format!(
                "{} segment(s) listed for position segment {}",
                d.segments.len(),
                d.position.segment
            ));
        }
        for (i, s) in d.segments.iter().enumerate() {
            if s.number != i as u64 + 1 || s.generation == 0 || s.length < 32 {
                return Err(format!("a bad entry for segment {}", s.number));
            }
        }
        if d.segments.last().map(|s| s.length) != Some(d.position.offset) {
            return Err("the last segment's length is not the position's offset".into());
        }
        Ok(d)
    }

    /// Whether the log `manifest` names holds this snapshot's position with the same
    /// generations: every segment but the last with the same length and CRC, the last one
    /// at least as long. `Ok(Some(..))`: the last segment's CRC must still be checked over
    /// the restored bytes `0 .. length` (its manifest length is longer); `Err` says why not.
    pub(crate) fn matches(&self, manifest: &Manifest) -> Result<Option<SnapshotSegment>, String> {
        if self.log_position() > manifest.log_position() {
            return Err(format!(
                "it covers the log up to segment {} offset {}, past the restored log's end",
                self.position.segment, self.position.offset
            ));
        }
        let last = self.position.segment;
        for s in &self.segments {
            let Some(m) = manifest.segments.get(s.number as usize - 1) else {
                return Err(format!("segment {} is not in the restored log", s.number));
            };
            if m.generation != s.generation {
                return Err(format!(
                    "it describes generation {} of segment {}, the restored log holds generation {} (a GC or an erase replaced it)",
                    s.generation, s.number, m.generation
                ));
            }
            let same = m.length == s.length && m.crc32 == s.crc32;
            if s.number < last && !same {
                return Err(format!(
                    "segment {} differs from what the restored log holds",
                    s.number
                ));
            }
            if s.number == last && !same {
                if m.length < s.length {
                    return Err(format!(
                        "segment {} is shorter in the restored log",
                        s.number
                    ));
                }
                return Ok(Some(*s));
            }
        }
        Ok(None)
    }
}

/// `PREFIX/index/<time>-<sequence>.json` (the descriptor) or `.redb` (the body).
pub(crate) fn snapshot_path(
    prefix: &ObjectPath,
    time_ms: u64,
    sequence: u64,
    ext: &str,
) -> ObjectPath {
    prefix
        .clone()
        .join(INDEX_DIR)
        .join(format!("{time_ms:020}-{sequence:020}.{ext}"))
}

/// The time, sequence and extension (`json` or `redb`) of a snapshot object's name.
pub(crate) fn parse_snapshot_name(name: &str) -> Option<(u64, u64, &str)> {
    let (stem, ext) = name.rsplit_once('.')?;
    if ext != "json" && ext != "redb" {
        return None;
    }
    let (t, q) = stem.split_once('-')?;
    let d = |s: &str| {
        (s.len() == 20 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u64>().ok())
            .flatten()
    };
    Some((d(t)?, d(q)?, ext))
}

/// A copy of `index.redb` taken beside the writer and checked: redb's page checksums (a
/// copy torn by a commit running while it was read fails them), every entry's CRC, and
/// this build's index format.
pub(crate) struct Capture {
    pub bytes: Vec<u8>,
    /// The index's watermark.
    pub watermark: LogPosition,
    /// The (device, inode) of segments `1 ..` when it was read.
    pub ids: Vec<(u64, u64)>,
}

/// Takes a copy of the store's index. `Ok(None)`: none now (no index, an empty one, a GC
/// installing copies, segment files replaced while it was read); `Err`: the copy failed its
/// checks (a commit ran while it was read: the next attempt may succeed).
pub(crate) fn capture(store_dir: &Path) -> Result<Option<Capture>, String> {
    let ids_now = || -> Option<Vec<(u64, u64)>> {
        let log = LocalLog::list(store_dir).ok()?;
        if log.gc_installing {
            return None;
        }
        log.numbers.iter().map(|n| log.id_now(*n)).collect()
    };
    let Some(ids) = ids_now() else {
        return Ok(None);
    };
    let path = store_dir.join(INDEX_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    if ids_now().as_ref() != Some(&ids) {
        return Ok(None);
    }
    let mut index = Index::from_bytes(&bytes, &path).map_err(|e| e.to_string())?;
    if !index.check_integrity().map_err(|e| e.to_string())? {
        return Err("the copy needed repairs (a commit ran while it was read)".into());
    }
    index.check_entries().map_err(|e| e.to_string())?;
    let state = index.load().map_err(|e| e.to_string())?;
    index.close();
    if state.format_version != Some(INDEX_FORMAT_VERSION) || state.watermark.segment == 0 {
        return Ok(None);
    }
    Ok(Some(Capture {
        bytes,
        watermark: LogPosition {
            segment: state.watermark.segment,
            offset: state.watermark.end,
        },
        ids,
    }))
}

/// The descriptor of `capture` shipped beside the manifest (`time_ms`, `sequence`) of a
/// round that read `files` (segment `i + 1` is `files[i]`) and left `segments` as the
/// shipped state. `Err`: the capture does not describe what was shipped (why).
pub(crate) fn describe(
    capture: &Capture,
    files: &[SegmentFile],
    segments: &std::collections::BTreeMap<u64, SegState>,
    manifest: &Manifest,
) -> Result<SnapshotDescriptor, String> {
    let w = capture.watermark;
    if w > manifest.log_position() {
        return Err("the index was ahead of the log shipped".into());
    }
    let mut out = Vec::new();
    for n in 1..=w.segment {
        let i = n as usize - 1;
        let (Some(f), Some(id), Some(state)) = (files.get(i), capture.ids.get(i), segments.get(&n))
        else {
            return Err(format!("segment {n} was not shipped"));
        };
        if f.id != *id || state.file != Some(f.id) {
            return Err(format!("segment {n} was replaced while the index was read"));
        }
        let (length, crc32) = if n < w.segment {
            if state.shipped != f.len {
                return Err(format!("segment {n} was not shipped whole"));
            }
            (state.shipped, state.crc)
        } else if state.shipped == w.offset {
            (w.offset, state.crc)
        } else {
            let crc = f
                .crc_of_prefix(w.offset)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("segment {n} is shorter than the index says"))?;
            (w.offset, crc)
        };
        out.push(SnapshotSegment {
            number: n,
            generation: state.generation,
            length,
            crc32,
        });
    }
    Ok(SnapshotDescriptor {
        format: SNAPSHOT_FORMAT.into(),
        version: SNAPSHOT_VERSION,
        time_ms: manifest.time_ms,
        sequence: manifest.sequence,
        replicator: manifest.replicator.clone(),
        index_format_version: INDEX_FORMAT_VERSION,
        position: ManifestPosition {
            segment: w.segment,
            offset: w.offset,
        },
        segments: out,
        body: SnapshotBody {
            length: capture.bytes.len() as u64,
            crc32: crc32fast::hash(&capture.bytes),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON example of the section that starts with `heading` in format-spec.md.
    fn spec_example(heading: &str) -> &'static [u8] {
        let spec = include_str!("../../format-spec.md");
        let section = &spec[spec.find(heading).expect("the spec has the section")..];
        let start = section.find("```json\n").expect("it has a JSON example") + 8;
        let end = start + section[start..].find("```").expect("the example ends");
        &section.as_bytes()[start..end]
    }

    /// The worked example of format-spec.md §12.7 decodes to what the text says, and is a
    /// snapshot the §12.3 example manifest can restore from (its last segment's CRC to be
    /// checked over the restored bytes).
    #[test]
    fn the_spec_snapshot_example_decodes_and_matches_the_manifest_example() {
        let d = SnapshotDescriptor::decode(spec_example("### 12.7")).expect("decodes");
        assert_eq!((d.time_ms, d.sequence), (1_767_225_600_000, 42));
        assert_eq!(d.index_format_version, 4);
        assert_eq!(
            d.log_position(),
            LogPosition {
                segment: 3,
                offset: 524_288
            }
        );
        let segs: Vec<(u64, u64, u64)> = d
            .segments
            .iter()
            .map(|s| (s.number, s.generation, s.length))
            .collect();
        assert_eq!(segs, [(1, 1, 67_108_800), (2, 2, 1024), (3, 1, 524_288)]);
        assert_eq!(
            d.body,
            SnapshotBody {
                length: 1_052_672,
                crc32: 3_735_928_559
            }
        );
        let m = Manifest::decode("m", spec_example("### 12.3")).expect("the manifest decodes");
        let last = d.matches(&m).expect("it matches").expect("a CRC to check");
        assert_eq!(
            (last.number, last.length, last.crc32),
            (3, 524_288, 2_882_400_018)
        );
        // Another generation of segment 2 in the restored log: refused.
        let mut other = m.clone();
        other.segments[1].generation = 3;
        assert!(d.matches(&other).unwrap_err().contains("generation"));
        // Segment 1 of other bytes: refused.
        let mut other = m.clone();
        other.segments[0].crc32 ^= 1;
        assert!(d.matches(&other).is_err());
        // A manifest before the snapshot's position: refused.
        let mut short = m;
        short.segments.truncate(2);
        short.position = ManifestPosition {
            segment: 2,
            offset: 1024,
        };
        assert!(d.matches(&short).unwrap_err().contains("past"));
    }

    #[test]
    fn descriptors_round_trip_and_refuse_what_they_cannot_read() {
        let d = SnapshotDescriptor::decode(spec_example("### 12.7")).expect("decodes");
        assert_eq!(SnapshotDescriptor::decode(&d.encode()), Ok(d.clone()));
        let mut newer = d.clone();
        newer.version = 2;
        assert!(
            SnapshotDescriptor::decode(&newer.encode())
                .unwrap_err()
                .contains("version 2")
        );
        let mut bad = d.clone();
        bad.position.offset = 1;
        assert!(SnapshotDescriptor::decode(&bad.encode()).is_err());
        let mut gap = d;
        gap.segments.remove(1);
        assert!(SnapshotDescriptor::decode(&gap.encode()).is_err());
        assert!(SnapshotDescriptor::decode(b"{").is_err());
    }

    #[test]
    fn snapshot_names_round_trip() {
        let prefix = ObjectPath::from("p");
        let body = snapshot_path(&prefix, 1_767_225_600_000, 42, "redb");
        assert_eq!(
            body.as_ref(),
            "p/index/00000001767225600000-00000000000000000042.redb"
        );
        assert_eq!(
            parse_snapshot_name(body.filename().unwrap_or("")),
            Some((1_767_225_600_000, 42, "redb"))
        );
        assert_eq!(parse_snapshot_name("1-2.json"), None);
        assert_eq!(
            parse_snapshot_name("00000000000000000001-00000000000000000002.txt"),
            None
        );
    }
}
