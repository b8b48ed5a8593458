//! The frame: the unit of atomic, checksummed write.
//!
//! ```text
//! offset size field
//! 0      4    stored_len  u32 LE  payload bytes as stored (after compression), >= 1
//! 4      4    crc32       u32 LE  CRC-32 (IEEE) of bytes 8 .. 16 + stored_len
//! 8      1    flags       bit 0: payload is one zstd frame; bit 1: the operation continues
//!                          in the next frame; bit 2: the frame continues the previous
//!                          frame's operation (bits 1-2: segment version 2); bit 3: the zstd
//!                          frame uses the built-in dictionary 1 (with bit 0; segment
//!                          versions 5-8); bit 4: it uses dictionary 2 (with bit 0;
//!                          segment versions 9-10); bits 5-7 are 0
//! 9      3    reserved    must be 0
//! 12     4    raw_len     u32 LE  payload length after decompression (== stored_len if bit 0 is clear)
//! 16     ..   payload     stored_len bytes
//! ```
//!
//! The payload, once decompressed, is a sequence of records (see [`super::record`]). A
//! group-commit batch is written as one frame, or as several when it exceeds the frame size:
//! every frame but the last then carries [`FLAG_CONTINUED`], and recovery indexes the frames
//! of such a run only once its last frame is in the log (an operation is all or nothing).

use std::sync::Arc;

use super::dictionary::{DICTIONARY_1, DICTIONARY_2};
use crate::error::{CompressionError, DecodeError};

/// Bytes in a frame header.
pub const FRAME_HEADER_LEN: usize = 16;
/// Flag bit: the payload is zstd-compressed.
pub const FLAG_ZSTD: u8 = 1;
/// Flag bit: the records of this frame belong to an operation that continues in the next
/// frame; it commits with the first following frame without this bit (segment version 2).
pub const FLAG_CONTINUED: u8 = 2;
/// Flag bit: this frame continues the operation of the previous frame (set on every frame of
/// an operation but its first), so a reader that lost a frame knows which frames after it
/// belong to the interrupted operation (segment version 2).
pub const FLAG_CONTINUATION: u8 = 4;
/// Flag bit: the zstd frame of the payload was compressed with [`DICTIONARY_1`] as a raw
/// content dictionary (set only with [`FLAG_ZSTD`]; segment versions 5 to 8).
pub const FLAG_DICTIONARY: u8 = 8;
/// Flag bit: the zstd frame of the payload was compressed with [`DICTIONARY_2`] (zstd's
/// formatted kind, whose entropy tables the frame may reuse; set only with [`FLAG_ZSTD`],
/// never with [`FLAG_DICTIONARY`]; segment versions 9 and 10).
pub const FLAG_DICTIONARY_2: u8 = 0x10;
/// Every flag bit a reader understands.
pub const KNOWN_FLAGS: u8 =
    FLAG_ZSTD | FLAG_CONTINUED | FLAG_CONTINUATION | FLAG_DICTIONARY | FLAG_DICTIONARY_2;

/// Limits applied when decoding untrusted frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    /// Largest accepted `raw_len` (and `stored_len`): no allocation exceeds it.
    pub max_frame_bytes: u32,
}

impl Default for FrameLimits {
    fn default() -> Self {
        FrameLimits {
            max_frame_bytes: 256 << 20,
        }
    }
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload bytes as stored.
    pub stored_len: u32,
    /// The stored CRC.
    pub crc: u32,
    /// Flag bits.
    pub flags: u8,
    /// Payload bytes after decompression.
    pub raw_len: u32,
}

impl FrameHeader {
    /// True when the frame's operation continues in the next frame ([`FLAG_CONTINUED`]).
    pub fn continued(&self) -> bool {
        self.flags & FLAG_CONTINUED != 0
    }

    /// True when the frame continues the previous frame's operation ([`FLAG_CONTINUATION`]).
    pub fn continuation(&self) -> bool {
        self.flags & FLAG_CONTINUATION != 0
    }

    /// Total bytes of the frame on disk (header plus stored payload).
    pub fn frame_len(&self) -> u64 {
        FRAME_HEADER_LEN as u64 + u64::from(self.stored_len)
    }

    /// Parses and range-checks a header (the CRC is checked with the payload).
    pub fn parse(
        bytes: &[u8; FRAME_HEADER_LEN],
        limits: &FrameLimits,
    ) -> Result<Self, DecodeError> {
        let u32_at =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let header = FrameHeader {
            stored_len: u32_at(0),
            crc: u32_at(4),
            flags: bytes[8],
            raw_len: u32_at(12),
        };
        let limit = u64::from(limits.max_frame_bytes);
        for len in [header.stored_len, header.raw_len] {
            if len == 0 || u64::from(len) > limit {
                return Err(DecodeError::Length {
                    length: u64::from(len),
                    limit,
                });
            }
        }
        if header.flags & !KNOWN_FLAGS != 0 {
            return Err(DecodeError::Field {
                field: "flags",
                detail: format!("unknown flag bits {:#04x}", header.flags),
            });
        }
        if bytes[9..12] != [0, 0, 0] {
            return Err(DecodeError::Field {
                field: "reserved",
                detail: "reserved header bytes are not zero".into(),
            });
        }
        let dictionaries = header.flags & (FLAG_DICTIONARY | FLAG_DICTIONARY_2);
        if dictionaries != 0 && header.flags & FLAG_ZSTD == 0 {
            return Err(DecodeError::Field {
                field: "flags",
                detail: "a dictionary bit is set on an uncompressed frame".into(),
            });
        }
        if dictionaries == FLAG_DICTIONARY | FLAG_DICTIONARY_2 {
            return Err(DecodeError::Field {
                field: "flags",
                detail: "both dictionary bits are set".into(),
            });
        }
        if header.flags & FLAG_ZSTD == 0 && header.raw_len != header.stored_len {
            return Err(DecodeError::Field {
                field: "raw_len",
                detail: format!(
                    "uncompressed frame declares raw_len {} != stored_len {}",
                    header.raw_len, header.stored_len
                ),
            });
        }
        Ok(header)
    }
}

/// Payloads shorter than this are compressed with a built-in dictionary at level
/// [`DICTIONARY_MIN_LEVEL`] or more; longer ones without it, at the configured level. Measured
/// on the dsh workload (benches/README.md, "Bytes per event"): on flush-group frames
/// (~5 KB) the dictionary saves ~10 bytes per event, and level 3 with it costs no more
/// instructions than level 1 with it; on 1 MiB batches the dictionary saves nothing and level
/// 3 costs ~1.3k instructions per event more than level 1. A writer's choice, not the format's.
pub const DICTIONARY_FRAME_LIMIT: usize = 64 << 10;
/// The lowest zstd level a frame compressed with the dictionary gets (see
/// [`DICTIONARY_FRAME_LIMIT`]).
pub const DICTIONARY_MIN_LEVEL: i32 = 3;

/// Encodes `raw` (a sequence of records) as one frame, compressing it with zstd when it is at
/// least `compress_threshold` bytes and compression makes it smaller: with the built-in
/// dictionary 2 below [`DICTIONARY_FRAME_LIMIT`] (the frames of segment version 9).
pub fn encode(raw: &[u8], compress_threshold: usize, zstd_level: i32) -> Vec<u8> {
    Encoder::new(zstd_level).encode(raw, compress_threshold, 0)
}

/// A frame encoder that keeps its zstd compression context between frames (creating one per
/// frame costs more than compressing a small frame). The store's committer holds one. It
/// compresses payloads below [`DICTIONARY_FRAME_LIMIT`] with dictionary 2
/// ([`FLAG_DICTIONARY_2`]) unless made by [`Encoder::with_dictionary_1`] or
/// [`Encoder::without_dictionary`].
#[derive(Default)]
pub struct Encoder {
    level: i32,
    /// The dictionary small frames get ([`FLAG_DICTIONARY`], [`FLAG_DICTIONARY_2`]), or 0.
    dictionary_flag: u8,
    /// The context for frames without the dictionary, at `level`.
    context: Option<zstd::bulk::Compressor<'static>>,
    /// The context for frames with it, at `max(level, DICTIONARY_MIN_LEVEL)`.
    dictionary: Option<zstd::bulk::Compressor<'static>>,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("level", &self.level)
            .finish()
    }
}

impl Encoder {
    /// An encoder compressing at `zstd_level`, small frames with dictionary 2 (segment
    /// version 9).
    pub fn new(zstd_level: i32) -> Self {
        Encoder::with_flag(zstd_level, FLAG_DICTIONARY_2)
    }

    /// An encoder compressing small frames with dictionary 1: the frames of segment versions
    /// 5-8 (for tests and tools that write an older version's bytes).
    pub fn with_dictionary_1(zstd_level: i32) -> Self {
        Encoder::with_flag(zstd_level, FLAG_DICTIONARY)
    }

    /// An encoder compressing at `zstd_level` without a dictionary: the frames of segment
    /// versions 1-4 (for tests and tools that write an older version's bytes).
    pub fn without_dictionary(zstd_level: i32) -> Self {
        Encoder::with_flag(zstd_level, 0)
    }

    fn with_flag(level: i32, dictionary_flag: u8) -> Self {
        Encoder {
            level,
            dictionary_flag,
            context: None,
            dictionary: None,
        }
    }

    /// Encodes `raw` as [`encode`] does, reusing the compression context; `operation_flags`
    /// ([`FLAG_CONTINUED`], [`FLAG_CONTINUATION`]) are added to the flags. The caller keeps
    /// `raw` within the frame limit (a `u32`).
    pub fn encode(
        &mut self,
        raw: &[u8],
        compress_threshold: usize,
        operation_flags: u8,
    ) -> Vec<u8> {
        let with_dictionary = self.dictionary_flag != 0 && raw.len() < DICTIONARY_FRAME_LIMIT;
        let compressed = if raw.len() >= compress_threshold {
            self.compress(raw, with_dictionary)
                .filter(|c| c.len() < raw.len())
        } else {
            None
        };
        let (mut flags, payload): (u8, &[u8]) = match &compressed {
            Some(c) if with_dictionary => (FLAG_ZSTD | self.dictionary_flag, c),
            Some(c) => (FLAG_ZSTD, c),
            None => (0, raw),
        };
        flags |= operation_flags & (FLAG_CONTINUED | FLAG_CONTINUATION);
        let mut out = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.push(flags);
        out.extend_from_slice(&[0; 3]);
        out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        out.extend_from_slice(payload);
        let crc = crc32fast::hash(&out[8..]);
        out[4..8].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Compresses with the kept context, with the dictionary or without (created on first
    /// use; dropped after a failure, so a context in an unknown state is never reused).
    /// `None` stores the frame raw.
    fn compress(&mut self, raw: &[u8], with_dictionary: bool) -> Option<Vec<u8>> {
        let (slot, level, dictionary) = if with_dictionary {
            let level = self.level.max(DICTIONARY_MIN_LEVEL);
            (
                &mut self.dictionary,
                level,
                dictionary_bytes(self.dictionary_flag),
            )
        } else {
            (&mut self.context, self.level, &[][..])
        };
        if slot.is_none() {
            let mut context = zstd::bulk::Compressor::with_dictionary(level, dictionary).ok()?;
            // Dictionary 2's frames carry no dictionary id (the frame flag names it), as
            // dictionary 1's (a raw content dictionary has none).
            context
                .set_parameter(zstd::zstd_safe::CParameter::DictIdFlag(false))
                .ok()?;
            *slot = Some(context);
        }
        let result = slot.as_mut()?.compress(raw);
        if result.is_err() {
            *slot = None;
        }
        result.ok()
    }
}

/// Checks a whole frame (`bytes` starts at the header and holds at least the full frame) and
/// returns its decompressed payload.
pub fn decode(bytes: &[u8], limits: &FrameLimits) -> Result<(FrameHeader, Vec<u8>), DecodeError> {
    let header_bytes: &[u8; FRAME_HEADER_LEN] = bytes
        .get(..FRAME_HEADER_LEN)
        .and_then(|b| b.try_into().ok())
        .ok_or(DecodeError::Truncated {
            needed: FRAME_HEADER_LEN as u64,
            available: bytes.len() as u64,
        })?;
    let header = FrameHeader::parse(header_bytes, limits)?;
    let end = FRAME_HEADER_LEN + header.stored_len as usize;
    let frame = bytes.get(..end).ok_or(DecodeError::Truncated {
        needed: end as u64,
        available: bytes.len() as u64,
    })?;
    let payload = decode_payload(&header, &frame[8..])?;
    Ok((header, payload))
}

/// Verifies the CRC over `covered` (header bytes 8..16 followed by the stored payload) and
/// decompresses the payload.
pub fn decode_payload(header: &FrameHeader, covered: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let computed = crc32fast::hash(covered);
    if computed != header.crc {
        return Err(DecodeError::Crc {
            stored: header.crc,
            computed,
        });
    }
    let stored = &covered[8..];
    if header.flags & FLAG_ZSTD == 0 {
        return Ok(stored.to_vec());
    }
    let dictionary = header.flags & (FLAG_DICTIONARY | FLAG_DICTIONARY_2);
    let raw = decompress(stored, header.raw_len as usize, dictionary)
        .map_err(|e| DecodeError::Compression(CompressionError::Zstd(Arc::new(e))))?;
    if raw.len() != header.raw_len as usize {
        return Err(DecodeError::Compression(CompressionError::Size {
            decompressed: raw.len() as u64,
            declared: u64::from(header.raw_len),
        }));
    }
    Ok(raw)
}

type DecompressorSlot = std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>>;

thread_local! {
    /// Each reading thread keeps one zstd decompression context (~100 KiB) instead of
    /// creating one per frame.
    static DECOMPRESSOR: DecompressorSlot = const { std::cell::RefCell::new(None) };
    /// The same, holding dictionary 1 (for [`FLAG_DICTIONARY`] frames).
    static DICTIONARY_DECOMPRESSOR: DecompressorSlot = const { std::cell::RefCell::new(None) };
    /// The same, holding dictionary 2 (for [`FLAG_DICTIONARY_2`] frames).
    static DICTIONARY_2_DECOMPRESSOR: DecompressorSlot = const { std::cell::RefCell::new(None) };
}

/// The bytes of the dictionary a frame's dictionary flag names (empty for none).
fn dictionary_bytes(dictionary_flag: u8) -> &'static [u8] {
    match dictionary_flag {
        FLAG_DICTIONARY => DICTIONARY_1,
        FLAG_DICTIONARY_2 => DICTIONARY_2,
        _ => &[],
    }
}

/// A one-off decompression of `stored` (when the thread's context is busy or unavailable).
fn decompress_once(stored: &[u8], capacity: usize, dictionary: u8) -> std::io::Result<Vec<u8>> {
    if dictionary != 0 {
        zstd::bulk::Decompressor::with_dictionary(dictionary_bytes(dictionary))?
            .decompress(stored, capacity)
    } else {
        zstd::bulk::decompress(stored, capacity)
    }
}

/// Decompresses one zstd frame into at most `capacity` bytes (the buffer is sized by the
/// smaller of `capacity` and the frame's recorded content size, as `zstd::bulk::decompress`),
/// with the dictionary the flag bit `dictionary` names ([`FLAG_DICTIONARY`],
/// [`FLAG_DICTIONARY_2`]; none when 0).
fn decompress(stored: &[u8], capacity: usize, dictionary: u8) -> std::io::Result<Vec<u8>> {
    let slot = match dictionary {
        FLAG_DICTIONARY => &DICTIONARY_DECOMPRESSOR,
        FLAG_DICTIONARY_2 => &DICTIONARY_2_DECOMPRESSOR,
        _ => &DECOMPRESSOR,
    };
    slot.with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return decompress_once(stored, capacity, dictionary);
        };
        if slot.is_none() {
            *slot = Some(if dictionary != 0 {
                zstd::bulk::Decompressor::with_dictionary(dictionary_bytes(dictionary))?
            } else {
                zstd::bulk::Decompressor::new()?
            });
        }
        let Some(context) = slot.as_mut() else {
            return decompress_once(stored, capacity, dictionary);
        };
        let result = context.decompress(stored, capacity);
        if result.is_err() {
            *slot = None;
        }
        result
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_plain_and_compressed() {
        let limits = FrameLimits::default();
        let small = b"hello".to_vec();
        let f = encode(&small, 4096, 3);
        assert_eq!(f.len(), FRAME_HEADER_LEN + 5);
        assert_eq!(f[8], 0);
        assert_eq!(decode(&f, &limits).unwrap().1, small);

        let big = b"abcdefgh".repeat(1000);
        let f = encode(&big, 4096, 3);
        assert_eq!(f[8], FLAG_ZSTD | FLAG_DICTIONARY_2);
        assert!(f.len() < big.len());
        assert_eq!(decode(&f, &limits).unwrap().1, big);

        let f = Encoder::with_dictionary_1(3).encode(&big, 4096, 0);
        assert_eq!(f[8], FLAG_ZSTD | FLAG_DICTIONARY);
        assert_eq!(decode(&f, &limits).unwrap().1, big);

        let f = Encoder::without_dictionary(3).encode(&big, 4096, 0);
        assert_eq!(f[8], FLAG_ZSTD);
        assert_eq!(decode(&f, &limits).unwrap().1, big);

        // From DICTIONARY_FRAME_LIMIT on, no dictionary.
        let huge = b"abcdefgh".repeat(DICTIONARY_FRAME_LIMIT / 8);
        let f = encode(&huge, 4096, 1);
        assert_eq!(f[8], FLAG_ZSTD);
        assert_eq!(decode(&f, &limits).unwrap().1, huge);
        let f = encode(&huge[1..], 4096, 1);
        assert_eq!(f[8], FLAG_ZSTD | FLAG_DICTIONARY_2);
        assert_eq!(decode(&f, &limits).unwrap().1, &huge[1..]);
    }

    /// Re-seals a frame's CRC after its covered bytes were edited.
    fn reseal(f: &mut [u8]) {
        let crc = crc32fast::hash(&f[8..]);
        f[4..8].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn a_dictionary_frame_is_never_decoded_without_the_dictionary_or_the_reverse() {
        let limits = FrameLimits::default();
        let raw =
            br#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hi"}}"#.repeat(4);
        let one = Encoder::with_dictionary_1(1).encode(&raw, 0, 0);
        assert_eq!(one[8], FLAG_ZSTD | FLAG_DICTIONARY);
        let two = encode(&raw, 0, 1);
        assert_eq!(two[8], FLAG_ZSTD | FLAG_DICTIONARY_2);
        let without = Encoder::without_dictionary(1).encode(&raw, 0, 0);
        assert!(
            one.len() < without.len() && two.len() < without.len(),
            "the dictionaries pay on small frames"
        );
        // A dictionary bit cleared (CRC re-sealed): the frame refers back into the
        // dictionary, which zstd without it refuses (an offset before the start); nothing is
        // misread.
        for with in [&one, &two] {
            let mut cleared = with.clone();
            cleared[8] = FLAG_ZSTD;
            reseal(&mut cleared);
            assert!(matches!(
                decode(&cleared, &limits),
                Err(DecodeError::Compression(_))
            ));
        }
        // One dictionary's frame read with the other's bit: both dictionaries end with the
        // same content, so history-only frames could decode the same; what decodes must be
        // the payload exactly, and anything else an error, never other bytes.
        for (with, bit) in [(&one, FLAG_DICTIONARY_2), (&two, FLAG_DICTIONARY)] {
            let mut swapped = with.clone();
            swapped[8] = FLAG_ZSTD | bit;
            reseal(&mut swapped);
            match decode(&swapped, &limits) {
                Ok((_, payload)) => assert_eq!(payload, raw),
                Err(e) => assert!(matches!(e, DecodeError::Compression(_)), "{e:?}"),
            }
        }
        // Dictionary 1's bit set on a plain zstd frame: a raw content dictionary only adds
        // history before the frame, which a plain frame never refers to, so it decodes exactly.
        let mut set = without.clone();
        set[8] = FLAG_ZSTD | FLAG_DICTIONARY;
        reseal(&mut set);
        assert_eq!(decode(&set, &limits).unwrap().1, raw);
        // A dictionary bit without compression, or both bits, is refused by the header check.
        for flags in [
            FLAG_DICTIONARY,
            FLAG_DICTIONARY_2,
            FLAG_ZSTD | FLAG_DICTIONARY | FLAG_DICTIONARY_2,
        ] {
            let mut bad = if flags & FLAG_ZSTD != 0 {
                two.clone()
            } else {
                encode(b"tiny", 512, 1)
            };
            bad[8] = flags;
            reseal(&mut bad);
            assert!(
                matches!(
                    decode(&bad, &limits),
                    Err(DecodeError::Field { field: "flags", .. })
                ),
                "flags {flags:#04x}"
            );
        }
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let limits = FrameLimits::default();
        let f = encode(b"some record bytes", 4096, 3);
        for bit in 0..f.len() * 8 {
            let mut g = f.clone();
            g[bit / 8] ^= 1 << (bit % 8);
            assert!(
                decode(&g, &limits).is_err(),
                "flip of bit {bit} not detected"
            );
        }
    }

    #[test]
    fn oversized_lengths_are_refused_before_allocation() {
        let limits = FrameLimits {
            max_frame_bytes: 1024,
        };
        let mut f = encode(b"x", 4096, 3);
        f[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode(&f, &limits),
            Err(DecodeError::Length { .. })
        ));
    }
}
