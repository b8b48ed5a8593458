//! Writing whole files: batches, chunk-row packing, zstd frames.

use super::header::write_header_line;
use super::lines::write_event_line;
use super::types::{JsonlWriteError, WriteOptions};
use super::{Compression, ZSTD_LEVEL};
use crate::event::{Event, SessionHeader};
use crate::interop::chunk_rows::{self, Codec, PackPolicy, Record};
use std::ops::Range;

/// Appends the lines of one append batch, each followed by `\n` (dsh's `eventLines(batch) +
/// "\n"`), packing chunk runs as `packing` says.
pub fn write_batch(
    out: &mut String,
    events: &[Event],
    packing: Option<PackPolicy>,
) -> Result<(), JsonlWriteError> {
    if let Some(e) = events.iter().find(|e| chunk_rows::is_chunk_tag(&e.kind)) {
        return Err(JsonlWriteError::ChunkTagCollision {
            seq: e.seq,
            kind: e.kind.clone(),
        });
    }
    match packing {
        None => {
            for e in events {
                write_event_line(out, e)?;
                out.push('\n');
            }
        }
        Some(policy) => {
            for record in chunk_rows::pack(events, Codec::Jsonl, policy) {
                match record {
                    Record::Event(e) => write_event_line(out, e)?,
                    Record::Row(row) => row.write_jsonl(out),
                }
                out.push('\n');
            }
        }
    }
    Ok(())
}

fn batch_ranges(events: &[Event], batches: &[usize]) -> Result<Vec<Range<usize>>, JsonlWriteError> {
    if batches.is_empty() {
        let whole = 0..events.len();
        return Ok(if events.is_empty() {
            Vec::new()
        } else {
            Vec::from([whole])
        });
    }
    let total: usize = batches.iter().sum();
    if total != events.len() {
        return Err(JsonlWriteError::BatchMismatch {
            total,
            events: events.len(),
        });
    }
    let mut start = 0;
    Ok(batches
        .iter()
        .filter(|&&n| n > 0)
        .map(|&n| {
            let r = start..start + n;
            start += n;
            r
        })
        .collect())
}

fn compress_frame(text: &[u8]) -> Result<Vec<u8>, JsonlWriteError> {
    use std::io::Write;
    let zerr = |e: std::io::Error| JsonlWriteError::Zstd(e.to_string());
    let mut enc = zstd::stream::Encoder::new(Vec::new(), ZSTD_LEVEL).map_err(zerr)?;
    enc.include_checksum(true).map_err(zerr)?;
    enc.include_contentsize(false).map_err(zerr)?;
    enc.write_all(text).map_err(zerr)?;
    enc.finish().map_err(zerr)
}

/// Writes a whole session log as dsh would: the header line, then each append batch
/// (`batches` gives the number of events in each; empty means one batch of all events). Plain
/// mode concatenates the lines; zstd mode writes the header line as the first frame and each
/// batch as one further frame (level 3, content checksum, no content size, as dsh's files).
///
/// Events must be contiguous from seq 0. A logical event whose type is a chunk-row tag is
/// refused ([`JsonlWriteError::ChunkTagCollision`]).
pub fn write(
    header: &SessionHeader,
    events: &[Event],
    batches: &[usize],
    opts: &WriteOptions,
) -> Result<Vec<u8>, JsonlWriteError> {
    for (index, e) in events.iter().enumerate() {
        if e.seq != index as u64 {
            return Err(JsonlWriteError::NotContiguous { index, seq: e.seq });
        }
    }
    let ranges = batch_ranges(events, batches)?;
    let mut head = write_header_line(header)?;
    head.push('\n');
    match opts.compression {
        Compression::None => {
            let mut out = head;
            for r in ranges {
                write_batch(&mut out, &events[r], opts.packing)?;
            }
            Ok(out.into_bytes())
        }
        Compression::Zstd => {
            let mut out = compress_frame(head.as_bytes())?;
            for r in ranges {
                let mut text = String::new();
                write_batch(&mut text, &events[r], opts.packing)?;
                out.extend_from_slice(&compress_frame(text.as_bytes())?);
            }
            Ok(out)
        }
    }
}
