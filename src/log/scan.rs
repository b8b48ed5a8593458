//! Scanning the log for recovery and verification: torn tails versus corruption.
//!
//! A frame that fails to decode is a **torn write** when nothing valid follows it in the last
//! segment: the crash interrupted the write, and the frame was never acknowledged as durable.
//! It is **corruption** when a valid frame follows it (in the same segment or a later one):
//! committed data was damaged. The [`RecoveryMode`] says what is tolerated.
//!
//! Frames marked continued (`FLAG_CONTINUED`) belong to an operation that ends with the next
//! frame without the mark. The scan hands such frames to its visitor only once that last frame
//! is read: an operation whose end is missing at the tail of the log is cut with the torn
//! tail (across segments if it spans them), so an operation is all or nothing.

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};

use crate::error::{Damage, DecodeError, LogPosition, OpenError};
use crate::fs::StorageFile;

use super::Segments;
use super::frame::{self, FRAME_HEADER_LEN, FrameHeader, FrameLimits};
use super::segment::SEGMENT_HEADER_LEN;

/// What recovery tolerates (named, as in RocksDB and raft-engine, for what it tolerates).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RecoveryMode {
    /// A torn frame at the very end of the log is a crash mid-write: truncate it. Anything
    /// damaged with valid data after it is corruption and fails the open. The default.
    #[default]
    TolerateTornTail,
    /// Any bad frame fails the open, even a torn tail.
    AbsoluteConsistency,
    /// Skip bad frames (reporting each), keep every valid frame. Events of a session after a
    /// gap in its seqs are dropped from the index (and reported), since a session log must be
    /// contiguous.
    SalvageSkippingBadFrames,
}

/// A frame that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadFrame {
    /// Where it starts.
    pub position: LogPosition,
    /// Bytes skipped (up to the next valid frame or the segment's end).
    pub skipped: u64,
    /// What is wrong.
    pub reason: String,
}

/// A valid frame found by the scan.
#[derive(Debug)]
pub struct ScannedFrame {
    /// Where it starts.
    pub position: LogPosition,
    /// Its length on disk.
    pub frame_len: u32,
    /// Its decompressed payload.
    pub payload: Vec<u8>,
    /// True when the operation continues in the next frame (not the operation's last).
    pub continued: bool,
    /// True when the frame is valid but its operation is not whole (salvage mode: a damaged
    /// frame interrupted it): its records must be reported as dropped, never indexed.
    pub dropped: bool,
}

/// The result of a scan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanReport {
    /// Just past the last valid frame (segment, offset).
    pub end: LogPosition,
    /// Offset of the last valid frame in `end.segment`, if any frame was seen there.
    pub last_frame: Option<u64>,
    /// The torn tail to truncate, if any: a torn frame, or an operation whose last frame is
    /// missing. Its position is where the log is cut (every later segment is removed).
    pub torn_tail: Option<BadFrame>,
    /// Frames of an operation without its last frame, cut with the tail.
    pub torn_operation_frames: u64,
    /// The events in those frames, per session: `(session number, first seq, events)`. The
    /// frames are whole (their CRCs pass), so their records name their sessions; a single
    /// torn frame fails its CRC and names nothing.
    pub torn_events: Vec<(u64, u64, u64)>,
    /// Bad frames skipped (salvage mode only).
    pub skipped: Vec<BadFrame>,
    /// Zero bytes from a frame boundary to the end of the last segment: the space a writer
    /// preallocated and had not filled (format-spec.md §2), where the log ends. Not damage;
    /// a writable open cuts it. `(where it starts, its length)`.
    pub zero_tail: Option<(LogPosition, u64)>,
    /// Frames visited.
    pub frames: u64,
}

/// A window over a segment file, so scanning reads in large chunks.
struct Window {
    file: Arc<dyn StorageFile>,
    file_len: u64,
    start: u64,
    buf: Vec<u8>,
    /// Bytes read at a time (more when a frame is longer).
    chunk: usize,
}

const WINDOW: usize = 8 << 20;

impl Window {
    fn new(file: Arc<dyn StorageFile>) -> io::Result<Self> {
        let file_len = file.len()?;
        Ok(Window {
            file,
            file_len,
            start: 0,
            buf: Vec::new(),
            chunk: WINDOW,
        })
    }

    /// `len` bytes at `offset` (the caller checked `offset + len <= file_len`), or `None` when
    /// the file became shorter than that while the scan read it: a writer in this process cut
    /// the zeros it had preallocated after its last frame (format-spec.md §2) when it sealed
    /// the segment or closed. The window then ends at the file's new end.
    fn bytes(&mut self, offset: u64, len: usize) -> io::Result<Option<&[u8]>> {
        let end = offset + len as u64;
        if offset < self.start || end > self.start + self.buf.len() as u64 {
            loop {
                let left = self.file_len.saturating_sub(offset);
                if left < len as u64 {
                    return Ok(None);
                }
                let want = (len.max(self.chunk) as u64).min(left) as usize;
                self.buf.resize(want, 0);
                match self.file.read_exact_at(&mut self.buf, offset) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        let now = self.file.len()?;
                        if now >= self.file_len {
                            return Err(e);
                        }
                        self.file_len = now;
                    }
                    Err(e) => return Err(e),
                }
            }
            self.start = offset;
        }
        let from = (offset - self.start) as usize;
        Ok(Some(&self.buf[from..from + len]))
    }

    /// Tries to decode a frame at `offset`.
    fn frame_at(
        &mut self,
        offset: u64,
        limits: &FrameLimits,
    ) -> io::Result<Result<(FrameHeader, Vec<u8>), DecodeError>> {
        let header = match self.header_at(offset, limits)? {
            Ok(h) => h,
            Err(e) => return Ok(Err(e)),
        };
        let Some(bytes) = self.bytes(offset, header.frame_len() as usize)? else {
            return Ok(Err(self.truncated(offset, header.frame_len())));
        };
        Ok(frame::decode_payload(&header, &bytes[8..]).map(|p| (header, p)))
    }

    /// The header of a frame at `offset` that the file holds whole (its payload is neither
    /// read nor checked).
    fn header_at(
        &mut self,
        offset: u64,
        limits: &FrameLimits,
    ) -> io::Result<Result<FrameHeader, DecodeError>> {
        let needed = FRAME_HEADER_LEN as u64;
        if self.file_len.saturating_sub(offset) < needed {
            return Ok(Err(self.truncated(offset, needed)));
        }
        let mut hb = [0u8; FRAME_HEADER_LEN];
        match self.bytes(offset, FRAME_HEADER_LEN)? {
            Some(b) => hb.copy_from_slice(b),
            None => return Ok(Err(self.truncated(offset, needed))),
        }
        let header = match FrameHeader::parse(&hb, limits) {
            Ok(h) => h,
            Err(e) => return Ok(Err(e)),
        };
        if header.frame_len() > self.file_len.saturating_sub(offset) {
            return Ok(Err(self.truncated(offset, header.frame_len())));
        }
        Ok(Ok(header))
    }

    /// A frame at `offset` that needs `needed` bytes where the file (as last seen) ends first.
    fn truncated(&self, offset: u64, needed: u64) -> DecodeError {
        DecodeError::Truncated {
            needed,
            available: self.file_len.saturating_sub(offset),
        }
    }

    /// True when every byte from `offset` to the end of the file is zero (read a window at
    /// a time, so the check allocates no more than a window whatever the file's length).
    fn zeros_to_end(&mut self, offset: u64) -> io::Result<bool> {
        let mut at = offset;
        while at < self.file_len {
            let n = (self.file_len - at).min(self.chunk as u64) as usize;
            let Some(bytes) = self.bytes(at, n)? else {
                continue; // the file is shorter now: check up to its new end
            };
            if !bytes
                .chunks(64)
                .all(|c| c.iter().fold(0u8, |acc, &b| acc | b) == 0)
            {
                return Ok(false);
            }
            at += n as u64;
        }
        Ok(true)
    }

    /// The offset of the next valid frame after `offset`, if any.
    fn resync(&mut self, offset: u64, limits: &FrameLimits) -> io::Result<Option<u64>> {
        let mut at = offset + 1;
        while at + FRAME_HEADER_LEN as u64 <= self.file_len {
            if let Ok(_valid) = self.frame_at(at, limits)? {
                return Ok(Some(at));
            }
            at += 1;
        }
        Ok(None)
    }
}

/// A frame decoded ahead: its offset, header and decompressed payload.
type Decoded = (u64, FrameHeader, Vec<u8>);

/// Segments with fewer bytes than this left to scan are decoded on the scanning thread alone
/// (a thread costs more than decoding a few frames); see [`decode_ahead_from`].
static AHEAD_MIN_BYTES: AtomicU64 = AtomicU64::new(256 << 10);

/// Sets the fewest bytes left in a segment for which a scan decodes its frames ahead on
/// other threads (default 256 KiB). What a scan finds is the same either way; the tests and
/// the crash simulator, whose segments are small, set it low so that they take both paths.
pub fn decode_ahead_from(bytes: u64) {
    AHEAD_MIN_BYTES.store(bytes, Ordering::Relaxed);
}

/// Batches decoded and not yet taken, per decoding thread, at most: a thread may run this far
/// ahead, so that no thread waits for another whenever the machine's other work deschedules
/// one.
const AHEAD_BATCHES: usize = 3;

/// Decoding threads at most (fewer on a machine with fewer cores): decompression is most of a
/// scan's work, so two decoders keep the scanning thread, which indexes, busy.
const AHEAD_THREADS: usize = 2;

/// The decoding threads hand frames over in batches of this many bytes of payload (or to the
/// segment's end): see [`decode_ahead_batch`].
static AHEAD_BATCH_BYTES: AtomicUsize = AtomicUsize::new(1 << 20);

/// Sets how many bytes of payload (the frames' declared `raw_len`s) a decoding thread hands
/// over at a time (default 1 MiB: ~50 dsh flush-group frames, decoded in ~0.5 ms, so the
/// scan starts soon and ends soon after the threads, with few hand-overs, each a thread
/// wake-up or two). For measurements and tests; what a scan finds does not depend on it.
pub fn decode_ahead_batch(bytes: usize) {
    AHEAD_BATCH_BYTES.store(bytes.max(1), Ordering::Relaxed);
}

/// A decoding thread reads the file this much at a time (more when a frame is longer).
const AHEAD_READ_BYTES: usize = 1 << 20;

/// Frames of one segment decoded (CRC checked, decompressed) ahead of the scan on other
/// threads, while the scan's visitor reads the frames before them: a bounded pipeline.
///
/// The frames from the start offset are cut into batches by their headers alone (a batch ends
/// once the declared payload lengths reach [`AHEAD_BATCH_BYTES`]), so every thread walking the
/// same headers cuts the same batches; with `k` threads, thread `i` decodes batches `i`,
/// `i + k`, `i + 2k`... and steps over the others by their headers. The scan takes the batches
/// in order, round robin, and checks that each frame is at the offset it expects.
///
/// A thread stops at the end of the segment or at the first frame it cannot decode or step
/// over; its channel then closes. The scan decodes from the first frame it does not get, on
/// its own thread, exactly as without the threads, so a bad frame is found, resynchronised
/// after and reported the same way. Dropping it stops the threads and waits for them (each is
/// at most one frame's decoding away from noticing).
struct Ahead {
    /// One channel per thread, in thread order; emptied once the scan stops taking.
    rxs: Vec<mpsc::Receiver<Vec<Decoded>>>,
    /// The number of the next batch to receive (from `rxs[next % rxs.len()]`).
    next: usize,
    batch: std::vec::IntoIter<Decoded>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Ahead {
    /// Starts decoding `file` (of `file_len` bytes) from `from`; `None` (decode on the calling
    /// thread) when little is left or no thread can be started.
    fn start(
        file: Arc<dyn StorageFile>,
        file_len: u64,
        from: u64,
        limits: FrameLimits,
    ) -> Option<Ahead> {
        if file_len.saturating_sub(from) < AHEAD_MIN_BYTES.load(Ordering::Relaxed) {
            return None;
        }
        let count = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, AHEAD_THREADS);
        let batch_bytes = AHEAD_BATCH_BYTES.load(Ordering::Relaxed);
        let mut ahead = Ahead {
            rxs: Vec::with_capacity(count),
            next: 0,
            batch: Vec::new().into_iter(),
            threads: Vec::with_capacity(count),
        };
        for me in 0..count {
            let (tx, rx) = mpsc::sync_channel(AHEAD_BATCHES);
            let window = Window {
                file: file.clone(),
                file_len,
                start: 0,
                buf: Vec::new(),
                chunk: AHEAD_READ_BYTES,
            };
            let share = Share {
                me,
                of: count,
                batch_bytes,
            };
            let thread = std::thread::Builder::new()
                .name("sessionlog-scan".into())
                .spawn(move || decode_ahead(window, from, limits, share, tx));
            match thread {
                Ok(thread) => {
                    ahead.rxs.push(rx);
                    ahead.threads.push(thread);
                }
                // Fewer threads than planned would leave batches nobody decodes: stop them.
                Err(_) => return None,
            }
        }
        Some(ahead)
    }

    /// The frame at `offset` if it was decoded ahead; `None` once a thread stopped before it
    /// (the caller decodes it), after which it is always `None`.
    fn take(&mut self, offset: u64) -> Option<(FrameHeader, Vec<u8>)> {
        loop {
            if let Some((at, header, payload)) = self.batch.next() {
                if at == offset {
                    return Some((header, payload));
                }
                // Never expected (the scan follows the frames as the threads did): stop.
                self.stop();
                return None;
            }
            let rx = self.rxs.get(self.next % self.rxs.len().max(1))?;
            match rx.recv() {
                Ok(batch) => {
                    self.batch = batch.into_iter();
                    self.next += 1;
                }
                Err(_) => {
                    self.stop();
                    return None;
                }
            }
        }
    }

    /// Stops the threads and waits for them.
    fn stop(&mut self) {
        self.rxs.clear();
        self.batch = Vec::new().into_iter();
        for thread in self.threads.drain(..) {
            // A panic there (none is expected) only means the scan decodes on its own.
            let _ = thread.join();
        }
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Which batches a decoding thread decodes: those whose number is `me` modulo `of`.
#[derive(Debug, Clone, Copy)]
struct Share {
    me: usize,
    of: usize,
    batch_bytes: usize,
}

/// A decoding thread of [`Ahead`]: from `offset`, the frames of its share of the batches,
/// decoded, one message per batch of its share, until the end of the window's file, a frame
/// that does not decode (of its share) or whose header does not parse (any), or the receiver
/// is gone.
fn decode_ahead(
    mut window: Window,
    mut offset: u64,
    limits: FrameLimits,
    share: Share,
    tx: mpsc::SyncSender<Vec<Decoded>>,
) {
    let mut number = 0usize;
    let mut batch = Vec::new();
    let mut bytes = 0usize;
    while offset < window.file_len {
        let mine = number % share.of == share.me;
        let header = if mine {
            let Ok(Ok((header, payload))) = window.frame_at(offset, &limits) else {
                break;
            };
            batch.push((offset, header, payload));
            header
        } else {
            let Ok(Ok(header)) = window.header_at(offset, &limits) else {
                break;
            };
            header
        };
        offset += header.frame_len();
        bytes += header.raw_len as usize;
        if bytes >= share.batch_bytes {
            if mine && tx.send(std::mem::take(&mut batch)).is_err() {
                return;
            }
            number += 1;
            bytes = 0;
        }
    }
    if number % share.of == share.me {
        let _ = tx.send(batch);
    }
}

/// Scans `numbers` (ascending, contiguous segment numbers) from `from`, calling `visit` for
/// each valid frame of a whole operation, in log order. Does not modify anything: the caller
/// truncates a torn tail.
pub fn scan(
    segments: &Segments,
    numbers: &[u64],
    from: LogPosition,
    mode: RecoveryMode,
    limits: &FrameLimits,
    visit: &mut dyn FnMut(ScannedFrame) -> Result<(), OpenError>,
) -> Result<ScanReport, OpenError> {
    let mut report = ScanReport {
        end: from,
        ..ScanReport::default()
    };
    let Some(&last_segment) = numbers.last() else {
        return Ok(report);
    };
    // Frames of the operation in progress (continued frames not yet ended), and where the
    // log stood before it.
    let mut open: Vec<ScannedFrame> = Vec::new();
    let mut before_open = (report.end, report.last_frame);
    // Salvage: after a damaged frame, the frames that continue the operation it interrupted
    // (`FLAG_CONTINUATION`) are dropped; the first frame without that flag starts a new one.
    let mut discarding = false;
    for &number in numbers.iter().filter(|&&n| n >= from.segment) {
        let io_err = |source| OpenError::Io {
            path: segments.path(number),
            source,
        };
        let mut window = Window::new(segments.file(number).map_err(io_err)?).map_err(io_err)?;
        let mut offset = if number == from.segment {
            from.offset.max(SEGMENT_HEADER_LEN)
        } else {
            SEGMENT_HEADER_LEN
        };
        if open.is_empty() {
            report.end = LogPosition {
                segment: number,
                offset,
            };
            report.last_frame = if number == from.segment && from.offset > SEGMENT_HEADER_LEN {
                report.last_frame
            } else {
                None
            };
        }
        let mut ahead = Ahead::start(window.file.clone(), window.file_len, offset, *limits);
        while offset < window.file_len {
            let decoded = match ahead.as_mut().and_then(|a| a.take(offset)) {
                Some(frame) => Ok(frame),
                None => window.frame_at(offset, limits).map_err(io_err)?,
            }
            .and_then(|(header, payload)| {
                segments.check_flags(number, &header)?;
                Ok((header, payload))
            });
            let position = LogPosition {
                segment: number,
                offset,
            };
            match decoded {
                Ok((header, payload)) => {
                    report.frames += 1;
                    offset += header.frame_len();
                    let frame = ScannedFrame {
                        position,
                        frame_len: header.frame_len() as u32,
                        payload,
                        continued: header.continued(),
                        dropped: discarding,
                    };
                    if discarding {
                        if frame.dropped && header.continuation() {
                            visit(frame)?;
                            ended_at(&mut report, position, offset);
                            continue;
                        }
                        discarding = false;
                    }
                    let mut frame = ScannedFrame {
                        dropped: false,
                        ..frame
                    };
                    // A frame must continue the operation in progress exactly when there is
                    // one; anything else means frames were lost in between.
                    if open.is_empty() == header.continuation() {
                        let damage = if header.continuation() {
                            Damage::MissingEarlierFrames
                        } else {
                            Damage::MissingLastFrame
                        };
                        if mode != RecoveryMode::SalvageSkippingBadFrames {
                            return Err(OpenError::Corruption {
                                position,
                                reason: damage,
                            });
                        }
                        report.skipped.push(BadFrame {
                            position,
                            skipped: 0,
                            reason: damage.to_string(),
                        });
                        for mut lost in open.drain(..) {
                            lost.dropped = true;
                            visit(lost)?;
                        }
                        if header.continuation() {
                            frame.dropped = true;
                            visit(frame)?;
                            ended_at(&mut report, position, offset);
                            continue;
                        }
                    }
                    if open.is_empty() {
                        before_open = (report.end, report.last_frame);
                    }
                    open.push(frame);
                    if header.continued() {
                        continue;
                    }
                    for frame in open.drain(..) {
                        visit(frame)?;
                    }
                    ended_at(&mut report, position, offset);
                }
                Err(reason) => {
                    if number == last_segment && window.zeros_to_end(offset).map_err(io_err)? {
                        // The preallocated space after the last frame: the log ends here
                        // (an operation still open is cut below, as at any end).
                        report.zero_tail = Some((position, window.file_len - offset));
                        break;
                    }
                    let next = window.resync(offset, limits).map_err(io_err)?;
                    let is_tail = number == last_segment && next.is_none();
                    if is_tail {
                        let (cut, detail) = match open.first() {
                            Some(first) => (
                                first.position,
                                Damage::TornOperation {
                                    frames: open.len() + 1,
                                    source: reason,
                                },
                            ),
                            None => (position, Damage::Frame(reason)),
                        };
                        return torn(
                            report,
                            segments,
                            numbers,
                            cut,
                            detail,
                            &open,
                            before_open,
                            mode,
                        );
                    }
                    if mode != RecoveryMode::SalvageSkippingBadFrames {
                        return Err(OpenError::Corruption {
                            position,
                            reason: Damage::Frame(reason),
                        });
                    }
                    for mut frame in open.drain(..) {
                        frame.dropped = true;
                        visit(frame)?;
                    }
                    discarding = true;
                    let resume = next.unwrap_or(window.file_len);
                    report.skipped.push(BadFrame {
                        position,
                        skipped: resume - offset,
                        reason: reason.to_string(),
                    });
                    offset = resume;
                    report.end = LogPosition {
                        segment: number,
                        offset,
                    };
                }
            }
        }
    }
    if let Some(first) = open.first() {
        let detail = Damage::Uncommitted { frames: open.len() };
        let cut = first.position;
        return torn(
            report,
            segments,
            numbers,
            cut,
            detail,
            &open,
            before_open,
            mode,
        );
    }
    Ok(report)
}

/// The events of a never-committed operation's whole frames, per session, in log order:
/// `(session number, first seq, events)`. Frames whose records do not decode name nothing.
fn torn_events(operation: &[ScannedFrame]) -> Vec<(u64, u64, u64)> {
    let mut out: Vec<(u64, u64, u64)> = Vec::new();
    for frame in operation {
        let Ok(records) = super::record::Record::decode_all(&frame.payload) else {
            continue;
        };
        for (_, record) in records {
            if let super::record::Record::Event { session, event } = record {
                match out.iter_mut().find(|(s, _, _)| *s == session) {
                    Some(entry) => entry.2 += 1,
                    None => out.push((session, event.seq, 1)),
                }
            }
        }
    }
    out
}

/// Records that the scan has consumed the frame at `position`, which ends at `end`.
fn ended_at(report: &mut ScanReport, position: LogPosition, end: u64) {
    report.end = LogPosition {
        segment: position.segment,
        offset: end,
    };
    report.last_frame = Some(position.offset);
}

/// Ends a scan at a torn tail cut at `cut` (a torn frame, or the first frame of an operation
/// whose end is missing).
#[allow(clippy::too_many_arguments)]
fn torn(
    mut report: ScanReport,
    segments: &Segments,
    numbers: &[u64],
    cut: LogPosition,
    reason: Damage,
    operation: &[ScannedFrame],
    before: (LogPosition, Option<u64>),
    mode: RecoveryMode,
) -> Result<ScanReport, OpenError> {
    let operation_frames = operation.len();
    if mode == RecoveryMode::AbsoluteConsistency {
        return Err(OpenError::TornTail {
            position: cut,
            reason,
        });
    }
    // Bytes from the cut to the end of the log.
    let mut skipped = 0u64;
    for &n in numbers.iter().filter(|&&n| n >= cut.segment) {
        let len = segments
            .file(n)
            .and_then(|f| f.len())
            .map_err(|source| OpenError::Io {
                path: segments.path(n),
                source,
            })?;
        skipped += if n == cut.segment {
            len.saturating_sub(cut.offset)
        } else {
            len
        };
    }
    if operation_frames > 0 {
        (report.end, report.last_frame) = before;
    }
    report.torn_operation_frames = operation_frames as u64;
    report.torn_events = torn_events(operation);
    report.torn_tail = Some(BadFrame {
        position: cut,
        skipped,
        reason: reason.to_string(),
    });
    Ok(report)
}
