//! Reading whole files: plain and zstd (frame scan, decompression).

use super::header::{not_header, parse_header_line};
use super::scan::{Scanner, finish_events};
use super::types::{JsonlLog, JsonlReadError, NonCanonicalLine, ReadOptions, TornTail};
use super::{Compression, ZSTD_MAGIC, detect_compression};
use crate::event::SessionHeader;
use std::ops::Range;

/// Reads a dsh JSONL session log, plain or zstd (detected from the content, see
/// [`detect_compression`]).
///
/// ```
/// use sessionlog::interop::jsonl::{read, write, ReadOptions, WriteOptions};
/// let file = concat!(
///     r#"{"type":"session","version":0,"id":"s1","createdAt":1000,"cwd":"/work","delegationDepth":0}"#, "\n",
///     r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#, "\n",
///     r#"{"type":"turn/end","seq":1,"time":2,"data":{"turn":1,"reason":{"kind":"completed"}}}"#, "\n",
///     r#"{"type":"step/sta"#, // torn tail
/// );
/// let log = read(file.as_bytes(), &ReadOptions::default()).unwrap();
/// assert_eq!(log.events.len(), 2);
/// let torn = log.torn.as_ref().unwrap();
/// assert_eq!((torn.file_line, torn.reason.as_str()), (4, "incomplete final line"));
/// // Written back: the committed prefix, byte for byte.
/// let again = write(&log.header, &log.events, &log.batches, &WriteOptions::default()).unwrap();
/// assert_eq!(again, &file.as_bytes()[..torn.truncate_to as usize]);
/// ```
pub fn read(bytes: &[u8], opts: &ReadOptions) -> Result<JsonlLog, JsonlReadError> {
    match detect_compression(bytes) {
        Compression::None => read_plain(bytes, opts),
        Compression::Zstd => read_zstd(bytes, opts),
    }
}

/// Parses the header line bytes and starts a scanner after it.
fn read_header<'o>(
    line: &[u8],
    after: usize,
    opts: &'o ReadOptions,
) -> Result<(SessionHeader, Scanner<'o>), JsonlReadError> {
    let text = String::from_utf8_lossy(line);
    let lossy = matches!(text, std::borrow::Cow::Owned(_));
    let (header, canonical) = parse_header_line(&text, opts)?;
    let mut scanner = Scanner::new(opts, after);
    if lossy {
        scanner.non_canonical.push(NonCanonicalLine {
            file_line: 1,
            reason: "invalid UTF-8 replaced by U+FFFD",
        });
    } else if !canonical {
        scanner.non_canonical.push(NonCanonicalLine {
            file_line: 1,
            reason: "header line is not the form dsh writes",
        });
    }
    Ok((header, scanner))
}

/// Reads a plain `session.jsonl`.
pub fn read_plain(bytes: &[u8], opts: &ReadOptions) -> Result<JsonlLog, JsonlReadError> {
    let Some(header_end) = bytes.iter().position(|&c| c == b'\n') else {
        return Err(not_header(if bytes.is_empty() {
            "the file is empty"
        } else {
            "the header line has no terminating newline"
        }));
    };
    let (header, mut scanner) = read_header(&bytes[..header_end], header_end + 1, opts)?;
    let body = &bytes[header_end + 1..];
    let (_, next_k) = scanner.feed_all(body, header_end + 1, 1)?;
    let committed = scanner.committed;
    let torn = if committed < bytes.len() {
        let (reason, detail, file_line) = match &scanner.issue {
            Some(issue) => (
                issue.dsh_reason.clone(),
                Some(issue.detail.clone()),
                issue.file_line,
            ),
            None => ("incomplete final line".to_owned(), None, next_k + 1),
        };
        Some(TornTail {
            file_line,
            truncate_to: committed as u64,
            bytes_cut: (bytes.len() - committed) as u64,
            reason,
            detail,
            recovered_events: 0,
        })
    } else {
        None
    };
    let non_canonical = std::mem::take(&mut scanner.non_canonical);
    let events = finish_events(&header, scanner.kept)?;
    let batches = if events.is_empty() {
        Vec::new()
    } else {
        vec![events.len()]
    };
    Ok(JsonlLog {
        header,
        events,
        compression: Compression::None,
        batches,
        torn,
        non_canonical,
    })
}

/// Splits a zstd file into complete frames (dsh's `scanZstdFrames`): returns their byte ranges
/// and the start of an incomplete final frame, if any.
pub fn scan_zstd_frames(
    bytes: &[u8],
) -> Result<(Vec<Range<usize>>, Option<usize>), JsonlReadError> {
    let mut frames = Vec::new();
    let mut pos = 0;
    let structure =
        |offset: usize, reason: &'static str| JsonlReadError::ZstdStructure { offset, reason };
    while pos < bytes.len() {
        let start = pos;
        let avail = &bytes[pos..];
        let n = avail.len().min(4);
        if avail[..n] != ZSTD_MAGIC[..n] {
            return Err(structure(start, "invalid frame magic"));
        }
        if n < 4 {
            return Ok((frames, Some(start)));
        }
        let Some(&fhd) = bytes.get(pos + 4) else {
            return Ok((frames, Some(start)));
        };
        if fhd & 0x18 != 0 {
            return Err(structure(
                start + 4,
                "reserved bit set in the frame header descriptor",
            ));
        }
        let single_segment = fhd & 0x20 != 0;
        let fcs_bytes = match fhd >> 6 {
            0 => usize::from(single_segment),
            1 => 2,
            2 => 4,
            _ => 8,
        };
        let dict_bytes = [0, 1, 2, 4][usize::from(fhd & 3)];
        let header_len = 1 + usize::from(!single_segment) + dict_bytes + fcs_bytes;
        pos += 4 + header_len;
        if pos > bytes.len() {
            return Ok((frames, Some(start)));
        }
        loop {
            let Some(h) = bytes.get(pos..pos + 3) else {
                return Ok((frames, Some(start)));
            };
            let block = u32::from(h[0]) | (u32::from(h[1]) << 8) | (u32::from(h[2]) << 16);
            let last = block & 1 != 0;
            let kind = (block >> 1) & 3;
            let size = (block >> 3) as usize;
            if kind == 3 {
                return Err(structure(pos, "reserved block type"));
            }
            pos += 3 + if kind == 1 { 1 } else { size };
            if pos > bytes.len() {
                return Ok((frames, Some(start)));
            }
            if last {
                break;
            }
        }
        if fhd & 0x04 != 0 {
            pos += 4;
            if pos > bytes.len() {
                return Ok((frames, Some(start)));
            }
        }
        frames.push(start..pos);
    }
    Ok((frames, None))
}

/// Decompresses one frame. `Ok((plaintext, complete))`; `complete` is false when the input
/// ended before the frame did. Errors when the data is corrupt (checksum included).
fn decompress_frame(
    frame: &[u8],
    budget: &mut u64,
    limit: u64,
) -> Result<Result<(Vec<u8>, bool), ()>, JsonlReadError> {
    use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};
    let Ok(mut decoder) = Decoder::new() else {
        return Ok(Err(()));
    };
    let mut input = InBuffer::around(frame);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let mut ob = OutBuffer::around(&mut buf[..]);
        let hint = match decoder.run(&mut input, &mut ob) {
            Ok(h) => h,
            Err(_) => return Ok(Err(())),
        };
        let produced = ob.pos();
        if produced as u64 > *budget {
            return Err(JsonlReadError::DecompressedTooLarge { limit });
        }
        *budget -= produced as u64;
        out.extend_from_slice(&buf[..produced]);
        if hint == 0 {
            return Ok(Ok((out, input.pos() == frame.len())));
        }
        if input.pos() == frame.len() && produced < buf.len() {
            return Ok(Ok((out, false)));
        }
    }
}

/// Reads a `session.jsonl.zstd`.
pub fn read_zstd(bytes: &[u8], opts: &ReadOptions) -> Result<JsonlLog, JsonlReadError> {
    let (frames, torn_start) = scan_zstd_frames(bytes)?;
    let Some(first) = frames.first() else {
        return Err(JsonlReadError::ZstdEmpty);
    };
    let limit = opts.max_decompressed_bytes;
    let mut budget = limit;
    let plain = |range: &Range<usize>, budget: &mut u64| -> Result<Vec<u8>, JsonlReadError> {
        match decompress_frame(&bytes[range.clone()], budget, limit)? {
            Ok((text, true)) => Ok(text),
            _ => Err(JsonlReadError::ZstdFrame {
                offset: range.start,
            }),
        }
    };
    let header_plain = plain(first, &mut budget)?;
    let newlines = header_plain.iter().filter(|&&c| c == b'\n').count();
    if newlines != 1 || header_plain.last() != Some(&b'\n') {
        return Err(JsonlReadError::ZstdHeaderFrame);
    }
    let base = header_plain.len();
    let (header, mut scanner) = read_header(&header_plain[..base - 1], base, opts)?;
    // All complete frames, as one stream.
    let mut stream = Vec::new();
    let mut frame_ends = Vec::with_capacity(frames.len());
    for range in &frames[1..] {
        stream.extend_from_slice(&plain(range, &mut budget)?);
        frame_ends.push(base + stream.len());
    }
    let (_, next_k) = scanner.feed_all(&stream, base, 1)?;
    let fed = base + stream.len();
    if let Some(issue) = &scanner.issue {
        return Err(JsonlReadError::ZstdTornRecord {
            detail: format!(
                "{} (file line {}: {})",
                issue.dsh_reason, issue.file_line, issue.detail
            ),
        });
    }
    if scanner.committed != fed {
        return Err(JsonlReadError::ZstdTornRecord {
            detail: format!(
                "the last frame ends inside a line (after byte {} of the text)",
                scanner.committed
            ),
        });
    }
    // Events per frame: the kept lines ending inside each frame.
    let mut batches = Vec::with_capacity(frame_ends.len());
    let mut counted = 0;
    for &end in &frame_ends {
        let upto = scanner
            .line_ends
            .iter()
            .take_while(|(e, _)| *e <= end)
            .last()
            .map_or(0, |&(_, n)| n);
        if upto > counted {
            batches.push(upto - counted);
            counted = upto;
        }
    }
    let mut torn = None;
    if let Some(start) = torn_start {
        // Recover the complete records of the incomplete final frame (flush-mode decode; a
        // decoder error yields no plaintext).
        let partial = match decompress_frame(&bytes[start..], &mut budget, limit)? {
            Ok((text, _)) => text,
            Err(()) => Vec::new(),
        };
        let before = scanner.kept.len();
        let (_, after_k) = scanner.feed_all(&partial, fed, next_k)?;
        let recovered = scanner.kept.len() - before;
        if recovered > 0 {
            batches.push(recovered);
        }
        let (reason, detail, file_line) = match &scanner.issue {
            Some(issue) => (
                format!("incomplete final Zstandard frame; {}", issue.dsh_reason),
                Some(issue.detail.clone()),
                issue.file_line,
            ),
            None => (
                "incomplete final Zstandard frame".to_owned(),
                None,
                after_k + 1,
            ),
        };
        torn = Some(TornTail {
            file_line,
            truncate_to: start as u64,
            bytes_cut: (bytes.len() - start) as u64,
            reason,
            detail,
            recovered_events: recovered,
        });
    }
    let non_canonical = std::mem::take(&mut scanner.non_canonical);
    let events = finish_events(&header, scanner.kept)?;
    Ok(JsonlLog {
        header,
        events,
        compression: Compression::Zstd,
        batches,
        torn,
        non_canonical,
    })
}
