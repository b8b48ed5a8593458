//! Column codecs of dsh's SQLite schemas 17 and 18: the delta/ZigZag varint encoding of
//! `source_event_seqs` and the TEXT-or-zstd encoding of `data` (persistence spec §5.3, §9.5).

use std::io::Read;

use crate::event::{MAX_SAFE_INTEGER, Seq};

/// Scalar `data` values of at least this many UTF-8 bytes are offered to zstd
/// (`ZSTD_DATA_THRESHOLD_BYTES`).
pub const ZSTD_DATA_THRESHOLD_BYTES: usize = 4096;

/// The zstd level dsh compresses `data` with (`ZSTD_COMPRESSION_LEVEL`).
pub const ZSTD_COMPRESSION_LEVEL: i32 = 3;

pub use crate::interop::chunk_rows::MAX_PACKED_DATA_BYTES;

/// Maximum decompressed size we accept for a scalar row's `data`.
///
/// dsh sets no explicit bound, but a V8 string cannot hold more than about 2^29 UTF-16 units,
/// so larger values could never have been written by dsh nor read back by it. The bound keeps
/// a hostile blob from inflating without limit.
pub const MAX_SCALAR_DATA_BYTES: usize = 1 << 29;

const MAX_SAFE: u64 = MAX_SAFE_INTEGER as u64;
const MAX_ZIGZAG: u64 = MAX_SAFE * 2;

/// Why a `source_event_seqs` value could not be encoded or decoded (dsh's wording).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VarintError {
    /// The blob ends inside a varint.
    #[error("malformed source_event_seqs storage value: truncated varint")]
    Truncated,
    /// A multi-byte varint ends with a zero payload byte.
    #[error("malformed source_event_seqs storage value: non-canonical varint")]
    NonCanonical,
    /// A varint is longer than 9 bytes or exceeds its limit.
    #[error("malformed source_event_seqs storage value: varint is out of range")]
    VarintOutOfRange,
    /// A decoded seq is negative or above 2^53-1.
    #[error("malformed source_event_seqs storage value: decoded seq is out of range")]
    SeqOutOfRange,
    /// Encoding: a seq above 2^53-1 (dsh throws a `TypeError`).
    #[error("sourceEventSeqs must contain non-negative safe integers (got {0})")]
    UnsafeSeq(u64),
}

/// Encodes `sourceEventSeqs` as dsh's schema-17/18 BLOB: the first seq as an unsigned LEB128
/// varint, every later one as LEB128 of ZigZag(seq - previous). `[]` encodes to an empty blob.
///
/// ```
/// use sessionlog::interop::sqlite::encode_source_event_seqs;
/// assert_eq!(encode_source_event_seqs(&[2, 3, 4, 5, 6]).unwrap(), [2, 2, 2, 2, 2]);
/// assert_eq!(encode_source_event_seqs(&[10, 5]).unwrap(), [0x0a, 0x09]);
/// ```
pub fn encode_source_event_seqs(seqs: &[Seq]) -> Result<Vec<u8>, VarintError> {
    let mut out = Vec::with_capacity(seqs.len() + 4);
    let mut previous = 0u64;
    for (index, &seq) in seqs.iter().enumerate() {
        if seq > MAX_SAFE {
            return Err(VarintError::UnsafeSeq(seq));
        }
        let encoded = if index == 0 {
            seq
        } else if seq >= previous {
            (seq - previous) * 2
        } else {
            (previous - seq) * 2 - 1
        };
        let mut remaining = encoded;
        while remaining >= 0x80 {
            out.push((remaining & 0x7f) as u8 | 0x80);
            remaining >>= 7;
        }
        out.push(remaining as u8);
        previous = seq;
    }
    Ok(out)
}

/// Decodes a schema-17/18 `source_event_seqs` BLOB with dsh's checks (canonical varints of at
/// most 9 bytes, first value and ZigZag deltas within range, every seq in `0..=2^53-1`).
///
/// ```
/// use sessionlog::interop::sqlite::decode_source_event_seqs;
/// assert_eq!(decode_source_event_seqs(&[0x05, 0xc6, 0x0f]).unwrap(), vec![5, 1000]);
/// assert!(decode_source_event_seqs(&[0x80]).is_err());
/// ```
pub fn decode_source_event_seqs(bytes: &[u8]) -> Result<Vec<Seq>, VarintError> {
    let mut values = Vec::new();
    let mut previous = 0u64;
    let mut offset = 0usize;
    while offset < bytes.len() {
        let first = values.is_empty();
        let limit = if first { MAX_SAFE } else { MAX_ZIGZAG };
        let (encoded, next) = read_varint(bytes, offset, limit)?;
        offset = next;
        let value = if first {
            encoded
        } else if encoded & 1 == 0 {
            previous
                .checked_add(encoded / 2)
                .ok_or(VarintError::SeqOutOfRange)?
        } else {
            previous
                .checked_sub(encoded.div_ceil(2))
                .ok_or(VarintError::SeqOutOfRange)?
        };
        if value > MAX_SAFE {
            return Err(VarintError::SeqOutOfRange);
        }
        values.push(value);
        previous = value;
    }
    Ok(values)
}

fn read_varint(bytes: &[u8], mut offset: usize, limit: u64) -> Result<(u64, usize), VarintError> {
    let mut value = 0u64;
    let mut shift = 0u32;
    while let Some(&byte) = bytes.get(offset) {
        offset += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            if shift > 0 && byte & 0x7f == 0 {
                return Err(VarintError::NonCanonical);
            }
            if value > limit {
                return Err(VarintError::VarintOutOfRange);
            }
            return Ok((value, offset));
        }
        shift += 7;
        if shift > 56 {
            return Err(VarintError::VarintOutOfRange);
        }
    }
    Err(VarintError::Truncated)
}

/// A `data` column value as dsh stores it at schemas 17 and 18.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataValue {
    /// Stored as SQLite TEXT.
    Text(String),
    /// Stored as a SQLite BLOB holding one zstd frame.
    Zstd(Vec<u8>),
}

/// Encodes JSON text for the `data` column as dsh's `encodeData` does: TEXT below 4096 UTF-8
/// bytes; otherwise one zstd frame at level 3, kept only when strictly shorter than the text.
///
/// ```
/// use sessionlog::interop::sqlite::{encode_data, DataValue};
/// assert_eq!(encode_data(r#"{"turn":1}"#).unwrap(), DataValue::Text(r#"{"turn":1}"#.into()));
/// let big = format!(r#"{{"text":"{}"}}"#, "x".repeat(8192));
/// assert!(matches!(encode_data(&big).unwrap(), DataValue::Zstd(_)));
/// ```
pub fn encode_data(json: &str) -> std::io::Result<DataValue> {
    if json.len() < ZSTD_DATA_THRESHOLD_BYTES {
        return Ok(DataValue::Text(json.to_owned()));
    }
    let compressed = zstd::bulk::compress(json.as_bytes(), ZSTD_COMPRESSION_LEVEL)?;
    if compressed.len() < json.len() {
        Ok(DataValue::Zstd(compressed))
    } else {
        Ok(DataValue::Text(json.to_owned()))
    }
}

/// Why a `data` BLOB could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    /// The blob is not a valid zstd stream.
    #[error("data blob is not valid zstd: {0}")]
    Zstd(String),
    /// The decompressed output exceeds the bound.
    #[error("data blob inflates past {0} bytes")]
    TooLarge(usize),
    /// The decompressed bytes are not UTF-8 (dsh decodes with a fatal decoder).
    #[error("data blob is not valid UTF-8 (byte {0})")]
    Utf8(usize),
}

/// Decompresses a zstd `data` BLOB to text, refusing output larger than `max_output` bytes and
/// invalid UTF-8 (dsh's fatal `TextDecoder`, which also drops one leading byte-order mark).
pub fn decode_zstd_data(blob: &[u8], max_output: usize) -> Result<String, DataError> {
    let decoder = zstd::stream::read::Decoder::with_buffer(blob)
        .map_err(|e| DataError::Zstd(e.to_string()))?;
    let mut out = Vec::new();
    let limit = u64::try_from(max_output)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    decoder
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|e| DataError::Zstd(e.to_string()))?;
    if out.len() > max_output {
        return Err(DataError::TooLarge(max_output));
    }
    let mut text =
        String::from_utf8(out).map_err(|e| DataError::Utf8(e.utf8_error().valid_up_to()))?;
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_round_trip_extremes() {
        let seqs = [MAX_SAFE - 1, 0, MAX_SAFE - 2, MAX_SAFE, 0];
        let blob = encode_source_event_seqs(&seqs).unwrap();
        assert_eq!(decode_source_event_seqs(&blob).unwrap(), seqs);
    }

    #[test]
    fn decode_data_bounds_output() {
        let text = "y".repeat(10_000);
        let blob = zstd::bulk::compress(text.as_bytes(), 3).unwrap();
        assert_eq!(decode_zstd_data(&blob, 10_000).unwrap(), text);
        assert_eq!(
            decode_zstd_data(&blob, 9_999),
            Err(DataError::TooLarge(9_999))
        );
    }
}
