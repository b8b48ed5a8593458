//! Segment files: naming and the 32-byte header.
//!
//! ```text
//! segments/00000000000000000001.seg     (20-digit, zero-padded, from 1)
//!
//! offset size field
//! 0      8    magic           "SLOGSEG\0"
//! 8      4    format_version  u32 LE, 9 (10 when a GC compacted it; 1-8 are still read)
//! 12     4    reserved        0
//! 16     8    segment number  u64 LE, equals the number in the file name
//! 24     4    reserved        0
//! 28     4    crc32           CRC-32 (IEEE) of bytes 0..28
//! 32     ..   frames, back to back
//! ```
//!
//! Segments roll over at a configured size; a sealed segment is never written again.

use std::path::{Path, PathBuf};

use crate::error::DecodeError;

/// The on-disk format version this build writes: version 7 with dictionary 2 in place of
/// dictionary 1 (frame flag bit 4, format-spec.md §3.3).
pub const FORMAT_VERSION: u32 = 9;
/// The format version of a segment a GC compacted (format-spec.md §11): version 9 without
/// the records of purged sessions the GC dropped. This build writes it only for compacted
/// copies of sealed segments; the active segment is always [`FORMAT_VERSION`].
pub const COMPACTED_VERSION: u32 = 10;
/// The format version of a segment an older build wrote with lean event records and
/// dictionary 1: version 5 plus `EventStart` and `EventNext` (tags 5 and 6, format-spec.md
/// §4.2; read, never written).
pub const LEAN_VERSION: u32 = 7;
/// The format version of a segment an older build's GC compacted at [`LEAN_VERSION`] (read,
/// never written).
pub const COMPACTED_V7_VERSION: u32 = 8;
/// The format version of a segment an older build's GC compacted, its frames compressed
/// with the built-in dictionary: version 5 without the records of purged sessions (read,
/// never written).
pub const COMPACTED_V5_VERSION: u32 = 6;
/// The format version of a segment an older build's GC compacted: version 3 without the
/// records of purged sessions (read, never written).
pub const COMPACTED_V3_VERSION: u32 = 4;
/// The newest segment format version this build reads.
pub const NEWEST_READ_VERSION: u32 = COMPACTED_VERSION;

/// True when a segment of `version` is a GC's compacted copy (versions 4, 6, 8 and 10).
pub fn is_compacted(version: u32) -> bool {
    version == COMPACTED_VERSION
        || version == COMPACTED_V7_VERSION
        || version == COMPACTED_V5_VERSION
        || version == COMPACTED_V3_VERSION
}

/// True when frames of a segment of `version` may carry
/// [`super::frame::FLAG_DICTIONARY`] (dictionary 1: versions 5 to 8).
pub fn allows_dictionary(version: u32) -> bool {
    (5..=COMPACTED_V7_VERSION).contains(&version)
}

/// True when frames of a segment of `version` may carry
/// [`super::frame::FLAG_DICTIONARY_2`] (versions 9 and 10).
pub fn allows_dictionary_2(version: u32) -> bool {
    version >= FORMAT_VERSION
}

/// True when a segment of `version` may hold lean event records (tags 5 and 6: versions 7
/// to 10).
pub fn allows_lean_events(version: u32) -> bool {
    version >= LEAN_VERSION
}
/// The oldest segment format version this build reads. Version 1 differs from 2 only in that
/// its frames never carry `FLAG_CONTINUED` (a version-1 frame with that bit set is damage);
/// version 2 differs from 3 only in that it never holds a `Verbatim` record (one in a
/// version-2 segment is damage).
pub const OLDEST_READ_VERSION: u32 = 1;
/// The magic bytes every segment starts with.
pub const SEGMENT_MAGIC: [u8; 8] = *b"SLOGSEG\0";
/// Bytes in a segment header.
pub const SEGMENT_HEADER_LEN: u64 = 32;
/// The directory holding segments, inside the store directory.
pub const SEGMENTS_DIR: &str = "segments";
/// The file-name suffix of segments.
pub const SEGMENT_SUFFIX: &str = ".seg";

/// The file name of segment `number`.
pub fn file_name(number: u64) -> String {
    format!("{number:020}{SEGMENT_SUFFIX}")
}

/// The path of segment `number` in the segments directory `dir`.
pub fn path(dir: &Path, number: u64) -> PathBuf {
    dir.join(file_name(number))
}

/// Parses a segment file name back to its number (`None` for other files).
pub fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Encodes the header of segment `number`.
pub fn encode_header(number: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    encode_header_version(number, FORMAT_VERSION)
}

/// Encodes the header of segment `number` at format `version`.
pub fn encode_header_version(number: u64, version: u32) -> [u8; SEGMENT_HEADER_LEN as usize] {
    let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
    h[0..8].copy_from_slice(&SEGMENT_MAGIC);
    h[8..12].copy_from_slice(&version.to_le_bytes());
    h[16..24].copy_from_slice(&number.to_le_bytes());
    let crc = crc32fast::hash(&h[0..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

/// What a segment header says, or why it cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderCheck {
    /// A valid header of a format version this build reads.
    Valid {
        /// The segment's format version.
        version: u32,
    },
    /// Not a sessionlog segment at all.
    BadMagic,
    /// A sessionlog segment of another format version.
    OtherVersion(u32),
    /// The header is damaged or names another segment.
    Damaged(DecodeError),
}

/// Checks a segment header read from the file of segment `number`.
pub fn check_header(bytes: &[u8], number: u64) -> HeaderCheck {
    if bytes.len() >= SEGMENT_MAGIC.len() && bytes[0..8] != SEGMENT_MAGIC {
        return HeaderCheck::BadMagic;
    }
    if bytes.len() < SEGMENT_HEADER_LEN as usize {
        return HeaderCheck::Damaged(DecodeError::Truncated {
            needed: SEGMENT_HEADER_LEN,
            available: bytes.len() as u64,
        });
    }
    if bytes[0..8] != SEGMENT_MAGIC {
        return HeaderCheck::BadMagic;
    }
    let stored = u32::from_le_bytes([bytes[28], bytes[29], bytes[30], bytes[31]]);
    let computed = crc32fast::hash(&bytes[0..28]);
    if stored != computed {
        return HeaderCheck::Damaged(DecodeError::Crc { stored, computed });
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if !(OLDEST_READ_VERSION..=NEWEST_READ_VERSION).contains(&version) {
        return HeaderCheck::OtherVersion(version);
    }
    let mut n = [0u8; 8];
    n.copy_from_slice(&bytes[16..24]);
    let found = u64::from_le_bytes(n);
    if found != number {
        return HeaderCheck::Damaged(DecodeError::Field {
            field: "segment number",
            detail: format!("header says {found}, file name says {number}"),
        });
    }
    HeaderCheck::Valid { version }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(file_name(1), "00000000000000000001.seg");
        assert_eq!(parse_file_name(&file_name(42)), Some(42));
        assert_eq!(parse_file_name("1.seg"), None);
        assert_eq!(parse_file_name("0000000000000000000x.seg"), None);
    }

    #[test]
    fn header_checks() {
        let h = encode_header(7);
        assert_eq!(
            check_header(&h, 7),
            HeaderCheck::Valid {
                version: FORMAT_VERSION
            }
        );
        assert!(matches!(check_header(&h, 8), HeaderCheck::Damaged(_)));
        let mut bad = h;
        bad[0] = b'X';
        assert_eq!(check_header(&bad, 7), HeaderCheck::BadMagic);
        let with_version = |v: u32| {
            let mut b = h;
            b[8..12].copy_from_slice(&v.to_le_bytes());
            let crc = crc32fast::hash(&b[0..28]);
            b[28..32].copy_from_slice(&crc.to_le_bytes());
            b
        };
        assert_eq!(
            check_header(&with_version(1), 7),
            HeaderCheck::Valid { version: 1 }
        );
        assert_eq!(
            check_header(&with_version(2), 7),
            HeaderCheck::Valid { version: 2 }
        );
        assert_eq!(
            check_header(&with_version(4), 7),
            HeaderCheck::Valid { version: 4 }
        );
        assert_eq!(
            check_header(&with_version(5), 7),
            HeaderCheck::Valid { version: 5 }
        );
        assert_eq!(
            check_header(&with_version(6), 7),
            HeaderCheck::Valid { version: 6 }
        );
        for v in [7, 8, 9, 10] {
            assert_eq!(
                check_header(&with_version(v), 7),
                HeaderCheck::Valid { version: v }
            );
        }
        assert_eq!(
            check_header(&with_version(11), 7),
            HeaderCheck::OtherVersion(11)
        );
        assert_eq!(
            check_header(&with_version(0), 7),
            HeaderCheck::OtherVersion(0)
        );
    }
}
