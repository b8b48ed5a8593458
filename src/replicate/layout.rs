//! Object names and the manifest (format-spec.md §12.1-12.3).

use object_store::path::Path as ObjectPath;
use serde::{Deserialize, Serialize};

use super::ReplicateError;
use crate::error::LogPosition;

/// The manifest's `format` field.
pub const MANIFEST_FORMAT: &str = "sessionlog-replica-manifest";
/// The manifest version this build writes and reads.
pub const MANIFEST_VERSION: u64 = 1;

pub(crate) const MANIFESTS: &str = "manifests";
pub(crate) const SEGMENTS: &str = "segments";
pub(crate) const LEASE: &str = "lease.json";

/// A manifest: a consistent prefix of the log as of a time (format-spec.md §12.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Manifest {
    /// Always [`MANIFEST_FORMAT`].
    pub format: String,
    /// Always [`MANIFEST_VERSION`] for what this build writes.
    pub version: u64,
    /// When it was written (ms since the Unix epoch, the replicator's clock).
    pub time_ms: u64,
    /// The replicator's sequence number.
    pub sequence: u64,
    /// The replicator's id (16 hex digits).
    pub replicator: String,
    /// The end of what it names: a commit point of the log.
    pub position: ManifestPosition,
    /// Segments `1 ..= position.segment`, in order.
    pub segments: Vec<ManifestSegment>,
}

/// A log position in a manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestPosition {
    /// Segment number (0: an empty log).
    pub segment: u64,
    /// Byte offset in it.
    pub offset: u64,
}

/// One segment of a manifest: which generation, how many bytes of it, their CRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestSegment {
    /// The segment number.
    pub number: u64,
    /// The generation holding its bytes.
    pub generation: u64,
    /// The segment header's format version.
    pub format_version: u32,
    /// Bytes `0 .. length` of the generation are the segment.
    pub length: u64,
    /// CRC-32 of those bytes.
    pub crc32: u32,
}

impl ManifestPosition {
    /// The position as a [`LogPosition`].
    pub fn log_position(&self) -> LogPosition {
        LogPosition {
            segment: self.segment,
            offset: self.offset,
        }
    }
}

impl Manifest {
    /// The position as a [`LogPosition`].
    pub fn log_position(&self) -> LogPosition {
        self.position.log_position()
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut text = serde_json::to_vec_pretty(self).unwrap_or_default();
        text.push(b'\n');
        text
    }

    /// Parses and checks a manifest read from `object`.
    pub(crate) fn decode(object: &str, bytes: &[u8]) -> Result<Manifest, ReplicateError> {
        let damaged = |detail: String| ReplicateError::Damaged {
            object: object.to_owned(),
            detail,
        };
        let head: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| damaged(format!("not JSON: {e}")))?;
        let format = head.get("format").and_then(|v| v.as_str()).unwrap_or("");
        let version = head.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
        if format != MANIFEST_FORMAT || version != MANIFEST_VERSION {
            return Err(ReplicateError::UnsupportedManifest {
                object: object.to_owned(),
                format: format.to_owned(),
                version,
            });
        }
        let m: Manifest =
            serde_json::from_value(head).map_err(|e| damaged(format!("bad field: {e}")))?;
        if m.segments.len() as u64 != m.position.segment {
            return Err(damaged(format!(
                "{} segment(s) listed for position segment {}",
                m.segments.len(),
                m.position.segment
            )));
        }
        for (i, s) in m.segments.iter().enumerate() {
            if s.number != i as u64 + 1 || s.generation == 0 || s.length < 32 {
                return Err(damaged(format!("bad entry for segment {}", s.number)));
            }
        }
        if let Some(last) = m.segments.last()
            && last.length != m.position.offset
        {
            return Err(damaged(
                "the last segment's length is not the position's offset".into(),
            ));
        }
        Ok(m)
    }
}

/// `PREFIX/manifests/<time>-<sequence>.json`
pub(crate) fn manifest_path(prefix: &ObjectPath, time_ms: u64, sequence: u64) -> ObjectPath {
    prefix
        .clone()
        .join(MANIFESTS)
        .join(format!("{time_ms:020}-{sequence:020}.json"))
}

/// The time and sequence of a manifest's file name (`None` for other names).
pub(crate) fn parse_manifest_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(".json")?;
    let (t, q) = stem.split_once('-')?;
    Some((digits20(t)?, digits20(q)?))
}

/// `PREFIX/segments/<segment>/`
pub(crate) fn segment_dir(prefix: &ObjectPath, segment: u64) -> ObjectPath {
    prefix.clone().join(SEGMENTS).join(format!("{segment:020}"))
}

/// `PREFIX/segments/<segment>/<generation>/`
pub(crate) fn generation_dir(prefix: &ObjectPath, segment: u64, generation: u64) -> ObjectPath {
    segment_dir(prefix, segment).join(format!("{generation:020}"))
}

/// `PREFIX/segments/<segment>/<generation>/part-<start>-<end>`
pub(crate) fn part_path(
    prefix: &ObjectPath,
    segment: u64,
    generation: u64,
    start: u64,
    end: u64,
) -> ObjectPath {
    generation_dir(prefix, segment, generation).join(format!("part-{start:020}-{end:020}"))
}

/// A part found in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartName {
    pub segment: u64,
    pub generation: u64,
    pub start: u64,
    pub end: u64,
    pub path: ObjectPath,
}

/// Parses `segments/<segment>/<generation>/part-<start>-<end>` below `prefix` (`None` for
/// other names).
pub(crate) fn parse_part(prefix: &ObjectPath, path: &ObjectPath) -> Option<PartName> {
    let mut parts = path.prefix_match(prefix)?;
    if parts.next()?.as_ref() != SEGMENTS {
        return None;
    }
    let segment = digits20(parts.next()?.as_ref())?;
    let generation = digits20(parts.next()?.as_ref())?;
    let name = parts.next()?;
    if parts.next().is_some() {
        return None;
    }
    let (s, e) = name.as_ref().strip_prefix("part-")?.split_once('-')?;
    let (start, end) = (digits20(s)?, digits20(e)?);
    (start < end).then(|| PartName {
        segment,
        generation,
        start,
        end,
        path: path.clone(),
    })
}

fn digits20(s: &str) -> Option<u64> {
    (s.len() == 20 && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let prefix = ObjectPath::from("a/b");
        let p = part_path(&prefix, 3, 2, 32, 4096);
        assert_eq!(
            p.as_ref(),
            "a/b/segments/00000000000000000003/00000000000000000002/part-00000000000000000032-00000000000000004096"
        );
        let parsed = parse_part(&prefix, &p).expect("parses");
        assert_eq!(
            (parsed.segment, parsed.generation, parsed.start, parsed.end),
            (3, 2, 32, 4096)
        );
        let m = manifest_path(&prefix, 1767225600000, 7);
        assert_eq!(
            parse_manifest_name(m.filename().unwrap_or("")),
            Some((1767225600000, 7))
        );
        assert_eq!(parse_manifest_name("1-2.json"), None);
    }

    #[test]
    fn manifest_round_trips_and_checks() {
        let m = Manifest {
            format: MANIFEST_FORMAT.into(),
            version: 1,
            time_ms: 5,
            sequence: 1,
            replicator: "00".into(),
            position: ManifestPosition {
                segment: 1,
                offset: 100,
            },
            segments: vec![ManifestSegment {
                number: 1,
                generation: 1,
                format_version: 3,
                length: 100,
                crc32: 9,
            }],
        };
        assert_eq!(Manifest::decode("m", &m.encode()).expect("decodes"), m);
        let mut bad = m.clone();
        bad.position.offset = 99;
        assert!(Manifest::decode("m", &bad.encode()).is_err());
        let mut newer = m;
        newer.version = 2;
        assert!(matches!(
            Manifest::decode("m", &newer.encode()),
            Err(ReplicateError::UnsupportedManifest { .. })
        ));
    }

    /// The worked example of format-spec.md §12.3 decodes to what the text says.
    #[test]
    fn the_spec_manifest_example_decodes() {
        let spec = include_str!("../../format-spec.md");
        let section = &spec[spec.find("## 12.").expect("the spec has §12")..];
        let start = section.find("```json\n").expect("§12 has a JSON example") + 8;
        let end = start + section[start..].find("```").expect("the example ends");
        let m = Manifest::decode("example", &section.as_bytes()[start..end]).expect("decodes");
        assert_eq!((m.time_ms, m.sequence), (1_767_225_600_000, 42));
        assert_eq!(
            m.log_position(),
            LogPosition {
                segment: 3,
                offset: 1_048_576
            }
        );
        let gens: Vec<(u64, u64, u32, u64)> = m
            .segments
            .iter()
            .map(|s| (s.number, s.generation, s.format_version, s.length))
            .collect();
        assert_eq!(
            gens,
            [(1, 1, 3, 67_108_800), (2, 2, 4, 1024), (3, 1, 3, 1_048_576)]
        );
    }
}
