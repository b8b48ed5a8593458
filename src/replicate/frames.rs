//! Checking segment bytes before upload and after download: the header, then every frame's
//! lengths, flags and CRC (format-spec.md §2, §3), and where operations commit (§3.1).

use crate::log::frame::{FRAME_HEADER_LEN, FrameHeader, FrameLimits};
use crate::log::segment::{self, HeaderCheck, SEGMENT_HEADER_LEN};

/// What [`check_frames`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checked {
    /// File offset just past the last whole valid frame (the start when there is none).
    pub end: u64,
    /// File offset just past the last frame that ends an operation (flag bit 1 clear), if
    /// any frame in the range does.
    pub commit: Option<u64>,
    /// Whether an operation is still open at `end` (its last frame had bit 1 set).
    pub open: bool,
    /// A frame that fails its checks: its offset and why (`end` is its offset).
    pub damage: Option<(u64, String)>,
}

/// Checks the frames in `bytes`, which start at file offset `base` (a frame boundary) with
/// the operation state `open` carried from the frames before. Stops at the first frame that
/// fails (reported) or does not fit in `bytes` (not reported: it is past the end read).
pub(crate) fn check_frames(bytes: &[u8], base: u64, mut open: bool) -> Checked {
    let limits = FrameLimits::default();
    let mut at = 0usize;
    let mut commit = None;
    let mut damage = None;
    while bytes.len() - at >= FRAME_HEADER_LEN {
        let offset = base + at as u64;
        let Some(head) = bytes
            .get(at..at + FRAME_HEADER_LEN)
            .and_then(|h| <&[u8; FRAME_HEADER_LEN]>::try_from(h).ok())
        else {
            break;
        };
        let header = match FrameHeader::parse(head, &limits) {
            Ok(h) => h,
            Err(e) => {
                damage = Some((offset, e.to_string()));
                break;
            }
        };
        let len = header.frame_len() as usize;
        let Some(frame) = bytes.get(at..at + len) else {
            break;
        };
        let computed = crc32fast::hash(&frame[8..]);
        if computed != header.crc {
            damage = Some((
                offset,
                format!(
                    "CRC mismatch: stored {:#010x}, computed {computed:#010x}",
                    header.crc
                ),
            ));
            break;
        }
        if header.continuation() != open {
            damage = Some((
                offset,
                if open {
                    "a frame that does not continue the open operation".to_owned()
                } else {
                    "a continuation frame with no operation open".to_owned()
                },
            ));
            break;
        }
        open = header.continued();
        at += len;
        if !open {
            commit = Some(base + at as u64);
        }
    }
    Checked {
        end: base + at as u64,
        commit,
        open,
        damage,
    }
}

/// Checks a segment header at the start of `bytes` (segment `number`): its format version,
/// or why it is refused.
pub(crate) fn check_header(bytes: &[u8], number: u64) -> Result<u32, String> {
    let head = bytes
        .get(..SEGMENT_HEADER_LEN as usize)
        .ok_or_else(|| format!("{} bytes, shorter than a segment header", bytes.len()))?;
    match segment::check_header(head, number) {
        HeaderCheck::Valid { version } => Ok(version),
        HeaderCheck::BadMagic => Err("not a sessionlog segment (bad magic)".into()),
        HeaderCheck::OtherVersion(v) => Err(format!("segment format version {v}")),
        HeaderCheck::Damaged(e) => Err(format!("damaged segment header: {e}")),
    }
}

/// Checks a part (format-spec.md §12.2): the bytes `start .. start + bytes.len()` of segment
/// `number`, whole frames (after the header when `start` is 0). Returns the frames' open
/// operation state at the end, given the state at `start` (the part's first frame tells
/// whether an operation is open at its start, so the caller may pass `None`).
pub(crate) fn check_part(bytes: &[u8], number: u64, start: u64) -> Result<(), String> {
    let (frames, base) = if start == 0 {
        check_header(bytes, number)?;
        (&bytes[SEGMENT_HEADER_LEN as usize..], SEGMENT_HEADER_LEN)
    } else {
        (bytes, start)
    };
    // A part may start inside an operation: take the first frame's own word for it.
    let open = frames
        .get(8)
        .is_some_and(|f| f & crate::log::frame::FLAG_CONTINUATION != 0);
    let c = check_frames(frames, base, open);
    if let Some((offset, why)) = c.damage {
        return Err(format!("frame at offset {offset}: {why}"));
    }
    let end = base + frames.len() as u64;
    if c.end != end {
        return Err(format!(
            "ends inside a frame (whole frames end at offset {}, the part at {end})",
            c.end
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::frame;

    fn frame_with(flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = frame::encode(payload, usize::MAX, 1);
        f[8] = flags;
        let crc = crc32fast::hash(&f[8..]);
        f[4..8].copy_from_slice(&crc.to_le_bytes());
        f
    }

    #[test]
    fn commit_points_and_damage() {
        let mut bytes = segment::encode_header(1).to_vec();
        bytes.extend(frame_with(0, b"\x03\x01"));
        let first_end = bytes.len() as u64;
        bytes.extend(frame_with(frame::FLAG_CONTINUED, b"\x03\x02"));
        bytes.extend(frame_with(frame::FLAG_CONTINUATION, b"\x03\x03"));
        let whole = bytes.len() as u64;
        bytes.extend(frame_with(frame::FLAG_CONTINUED, b"\x03\x04"));
        let c = check_frames(&bytes[32..], 32, false);
        assert_eq!(c.damage, None);
        assert_eq!(c.commit, Some(whole));
        assert!(c.open);
        assert_eq!(c.end, bytes.len() as u64);
        assert!(check_part(&bytes[..whole as usize], 1, 0).is_ok());
        assert!(check_part(&bytes[first_end as usize..whole as usize], 1, first_end).is_ok());
        // A torn last frame is not damage, only the end of what was read.
        let torn = &bytes[32..bytes.len() - 1];
        let c = check_frames(torn, 32, false);
        assert_eq!((c.end, c.damage.is_none()), (whole, true));
        assert!(check_part(&bytes[..bytes.len() - 1], 1, 0).is_err());
        // A flipped bit is.
        let mut flipped = bytes.clone();
        flipped[first_end as usize + 17] ^= 1;
        let c = check_frames(&flipped[32..], 32, false);
        assert_eq!(c.damage.map(|d| d.0), Some(first_end));
        assert!(check_part(&flipped, 1, 0).is_err());
        assert!(check_part(&bytes[..whole as usize], 2, 0).is_err());
    }
}
