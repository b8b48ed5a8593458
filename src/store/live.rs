//! Readers beside a live writer (format-spec.md §12): the position the writer publishes after
//! each durable commit (`ACKED`), whether a writer is alive (`LOCK`), and the reader's view
//! of the log, built in memory and brought up to date with [`Store::refresh`].
//!
//! A reader takes no lock that a writer could wait for and never opens `index.redb` with redb
//! (a read-only redb handle would keep a writer from opening the store): with a live writer
//! it builds its index in memory from the log, up to the published position; with none, it
//! reads a copy of `index.redb` in memory plus every whole operation after its watermark.

use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::*;

/// The published-position file's name inside the store directory.
pub const ACK_FILE: &str = "ACKED";
/// `ACKED`'s length: magic, version, state, pid, generation, segment, offset, CRC.
const ACK_LEN: usize = 44;
const ACK_MAGIC: [u8; 4] = *b"SLAK";
const ACK_VERSION: u32 = 1;
/// How long a reader waits for a live writer that has published nothing yet (it is
/// recovering a store that had no `ACKED`), and for a view that a writer starting meanwhile
/// keeps invalidating.
const READER_PATIENCE: Duration = Duration::from_secs(10);

/// What the writer that wrote `ACKED` last was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriterState {
    /// It holds the lock and is running recovery; the position is the previous writer's.
    Recovering,
    /// It is open; the position is its last durable commit.
    Open,
    /// It closed the store cleanly at the position.
    Closed,
}

/// The content of `ACKED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Published {
    pub state: WriterState,
    pub pid: u32,
    /// Incremented by every writer open.
    pub generation: u64,
    /// Everything before it is durable and whole (segment 0: nothing published).
    pub position: LogPosition,
}

impl Published {
    fn encode(&self) -> [u8; ACK_LEN] {
        let mut b = [0u8; ACK_LEN];
        b[0..4].copy_from_slice(&ACK_MAGIC);
        b[4..8].copy_from_slice(&ACK_VERSION.to_le_bytes());
        let state: u32 = match self.state {
            WriterState::Recovering => 1,
            WriterState::Open => 2,
            WriterState::Closed => 3,
        };
        b[8..12].copy_from_slice(&state.to_le_bytes());
        b[12..16].copy_from_slice(&self.pid.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        b[24..32].copy_from_slice(&self.position.segment.to_le_bytes());
        b[32..40].copy_from_slice(&self.position.offset.to_le_bytes());
        let crc = crc32fast::hash(&b[0..40]);
        b[40..44].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Published> {
        let b: &[u8; ACK_LEN] = b.get(..ACK_LEN)?.try_into().ok()?;
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(x)
        };
        if b[0..4] != ACK_MAGIC || u32_at(4) != ACK_VERSION {
            return None;
        }
        if crc32fast::hash(&b[0..40]) != u32_at(40) {
            return None;
        }
        let state = match u32_at(8) {
            1 => WriterState::Recovering,
            2 => WriterState::Open,
            3 => WriterState::Closed,
            _ => return None,
        };
        Some(Published {
            state,
            pid: u32_at(12),
            generation: u64_at(16),
            position: LogPosition {
                segment: u64_at(24),
                offset: u64_at(32),
            },
        })
    }
}

/// Reads `ACKED`: `None` when it is missing or does not check (a torn rewrite: read again).
pub(crate) fn read_published(dir: &Path) -> Option<Published> {
    let file = File::open(dir.join(ACK_FILE)).ok()?;
    let mut b = [0u8; ACK_LEN];
    file.read_exact_at(&mut b, 0).ok()?;
    Published::decode(&b)
}

/// [`read_published`], read again a few times when a rewrite was caught half-done.
fn read_published_settled(dir: &Path) -> Option<Published> {
    for _ in 0..5 {
        if let Some(p) = read_published(dir) {
            return Some(p);
        }
        if !dir.join(ACK_FILE).exists() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

/// The position the last writer published as durable in `ACKED`, when no writer holds the
/// store (a live writer moves it); `None` also when `ACKED` is missing or does not check.
pub(crate) fn published_without_writer(dir: &Path) -> Result<Option<LogPosition>, OpenError> {
    if writer_alive(dir)? {
        return Ok(None);
    }
    Ok(read_published(dir).map(|p| p.position))
}

/// True when a writer process holds the store's `LOCK`. The probe takes the lock shared for
/// an instant (a writer that opens meanwhile retries, see `StoreLock::acquire`); it never
/// creates the file.
pub(crate) fn writer_alive(dir: &Path) -> Result<bool, OpenError> {
    let path = dir.join(LOCK_FILE);
    let file = match OpenOptions::new().read(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => return Err(OpenError::Io { path, source }),
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(false),
        Err(TryLockError::WouldBlock) => Ok(true),
        Err(TryLockError::Error(source)) => Err(OpenError::Io { path, source }),
    }
}

/// The writer's side: rewrites `ACKED` (one `pwrite` of 44 bytes, no fsync) after each
/// durable commit.
#[derive(Debug)]
pub(crate) struct Publisher {
    file: File,
    generation: u64,
    pid: u32,
    /// What `ACKED` said when this writer started (before it announced itself).
    previous: Option<Published>,
}

impl Publisher {
    /// Called by a writer holding the lock, before recovery: announces a new generation,
    /// keeping the previous writer's position (what readers may still read meanwhile).
    pub(crate) fn start(dir: &Path) -> Result<Publisher, OpenError> {
        let path = dir.join(ACK_FILE);
        let io = |source| OpenError::Io {
            path: path.clone(),
            source,
        };
        crate::fs::ensure_private_file(&path).map_err(io)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io)?;
        let previous = read_published(dir);
        let publisher = Publisher {
            file,
            generation: previous.map_or(1, |p| p.generation.wrapping_add(1)),
            pid: std::process::id(),
            previous,
        };
        let position = previous.map_or(LogPosition::default(), |p| p.position);
        publisher
            .write(WriterState::Recovering, position)
            .map_err(io)?;
        Ok(publisher)
    }

    fn write(&self, state: WriterState, position: LogPosition) -> std::io::Result<()> {
        let p = Published {
            state,
            pid: self.pid,
            generation: self.generation,
            position,
        };
        self.file.write_all_at(&p.encode(), 0)
    }

    /// What `ACKED` said before this writer started: the previous writer's state and the
    /// last position it published (every position a writer publishes is durable: after a
    /// commit's sync, or at open once the recovered log is synced, see `Store::open`).
    pub(crate) fn previous(&self) -> Option<Published> {
        self.previous
    }

    /// Makes the end of the `recovered` log durable before this writer publishes it: every
    /// position a writer publishes in `ACKED` is durable, so that the next writer can tell a
    /// log that lost acknowledged frames from a torn write (format-spec.md §7, §10). A log
    /// recovery did not sync may end in a crashed writer's unsynced writes: its last segment
    /// is synced, unless the previous writer closed cleanly right there (its close synced it).
    pub(crate) fn make_durable(
        &self,
        recovered: &mut super::recovery::Recovered,
        segments_dir: &Path,
    ) -> Result<(), OpenError> {
        let end = LogPosition {
            segment: recovered.watermark.segment,
            offset: recovered.watermark.end,
        };
        let closed_here = self
            .previous
            .is_some_and(|p| p.state == WriterState::Closed && p.position == end);
        match recovered.active.as_mut() {
            Some(active) if active.unverified && !closed_here => {
                active.verify().map_err(|source| OpenError::Io {
                    path: crate::log::segment::path(segments_dir, active.number),
                    source,
                })
            }
            _ => Ok(()),
        }
    }

    /// Publishes `position` (best effort: a failed rewrite only keeps readers behind).
    pub(crate) fn publish(&self, state: WriterState, watermark: &crate::index::Watermark) {
        let position = LogPosition {
            segment: watermark.segment,
            offset: watermark.end,
        };
        let _ = self.write(state, position);
    }
}

/// What a reader's view was built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaderView {
    /// A writer process held the store when the view was last brought up to date.
    pub writer_alive: bool,
    /// The writer generation (`ACKED`) the view saw (0: no writer ever published).
    pub generation: u64,
    /// Whether the last writer closed the store cleanly (false while one is alive, or when
    /// it crashed or was killed).
    pub writer_closed: bool,
    /// How far the view reads the log.
    pub end: LogPosition,
}

/// Where a reader stops reading: the published position while a writer is alive, the end of
/// the log's valid prefix when none is. `None` while a live writer is recovering (it keeps
/// the whole valid prefix, which a reader may have shown while no writer was alive: reading
/// the previous writer's position meanwhile could show fewer events than a moment before) or
/// has published nothing yet.
///
/// `ACKED` written by another process than the one holding `LOCK` is a previous writer's: the
/// live one took the lock and has not announced itself yet, so it is treated as recovering.
fn bound_for(dir: &Path, alive: bool, published: Option<Published>) -> Option<Option<LogPosition>> {
    if !alive {
        return Some(None);
    }
    match published {
        // Segment 0: the writer's log is empty.
        Some(p) if p.state == WriterState::Open && lock_holder(dir) == Some(p.pid) => {
            Some(Some(p.position))
        }
        _ => None,
    }
}

/// Where a reader of the files would stop now (the replicator's question): `Some(Some(p))`
/// the live writer's published position, `Some(None)` no live writer (the log's last whole
/// operation), `None` a live writer that has published nothing yet (wait).
pub(crate) fn current_bound(dir: &Path) -> Result<Option<Option<LogPosition>>, OpenError> {
    let published = read_published_settled(dir);
    let alive = writer_alive(dir)?;
    Ok(bound_for(dir, alive, published))
}

/// The process id a writer recorded in `LOCK` (`None` while it is being rewritten).
fn lock_holder(dir: &Path) -> Option<u32> {
    use std::io::Read;
    let file = File::open(dir.join(LOCK_FILE)).ok()?;
    let mut text = String::new();
    file.take(32).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// A reader's index and recovery result, with the view they describe.
pub(super) struct ReaderOpen {
    pub index: Index,
    pub recovered: recovery::Recovered,
    pub view: ReaderView,
}

/// Opens the index for a reader (see the module documentation). Retries while a writer that
/// opens meanwhile could have changed what was read.
pub(super) fn open_reader_index(
    dir: &Path,
    segments: &Segments,
    config: &Config,
    limits: FrameLimits,
) -> Result<ReaderOpen, OpenError> {
    let started = Instant::now();
    loop {
        let before = read_published_settled(dir);
        let alive = writer_alive(dir)?;
        let bound = match (bound_for(dir, alive, before), before) {
            (Some(bound), _) => Some(bound),
            // A writer recovering for longer than a reader waits: the previous position.
            (None, Some(p)) if p.position.segment != 0 && started.elapsed() > READER_PATIENCE => {
                Some(Some(p.position))
            }
            (None, _) => None,
        };
        let Some(bound) = bound else {
            if started.elapsed() > READER_PATIENCE {
                return Err(OpenError::Io {
                    path: dir.join(ACK_FILE),
                    source: std::io::Error::other(
                        "a writer holds the store but has published no position for 10 s (a \
                         sessionlog older than this one, or one still recovering a large store); \
                         try again later, or stop that writer",
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        segments.set_bound(bound);
        let attempt = if alive {
            // The index file is the writer's: build the index from the log, in memory.
            Index::in_memory()
                .map_err(OpenError::from)
                .and_then(|index| {
                    let recovered = recovery::recover(recovery::RecoveryInput {
                        store_dir: dir,
                        segments,
                        index: &index,
                        mode: config.recovery,
                        limits,
                        writable: false,
                        index_writable: true,
                        acked: None,
                    })?;
                    Ok((index, recovered))
                })
        } else {
            // The index is a copy of the last writer's: hold every segment it points into
            // now (a GC by a writer that opens later replaces files; the refresh that sees it
            // builds the view again).
            // No writer: the last one's published position is compared with the log's end
            // (a loss is reported, never refused, by a read-only open).
            let acked = before.map(|p| p.position);
            open_index(dir, segments, config, limits, acked).and_then(|opened| {
                segments.open_all().map_err(|source| OpenError::Io {
                    path: segments.dir().to_path_buf(),
                    source,
                })?;
                Ok(opened)
            })
        };
        let after = read_published_settled(dir);
        let changed = writer_alive(dir)? != alive
            || before.map(|p| p.generation) != after.map(|p| p.generation);
        // A writer that opened while this view was read may have rewritten what it read
        // (recovery cuts a torn tail, repairs the index): read again.
        if !alive && changed && started.elapsed() < READER_PATIENCE {
            continue;
        }
        let (index, mut recovered) = attempt?;
        if alive {
            // A live writer's unindexed tail is its business, not a pending recovery.
            recovered.report.recovery_pending = None;
            recovered.report.truncated = None;
        }
        let end = LogPosition {
            segment: recovered.watermark.segment,
            offset: recovered.watermark.end,
        };
        return Ok(ReaderOpen {
            index,
            recovered,
            view: ReaderView {
                writer_alive: alive,
                generation: after.map_or(0, |p| p.generation),
                writer_closed: !alive && after.is_none_or(|p| p.state == WriterState::Closed),
                end,
            },
        });
    }
}

impl Store {
    /// Opens `dir` for reading beside a writer in another process (or none, or a crashed
    /// one): the same as [`Store::open`] with [`Config::read_only`] set. The store shows every
    /// event a live writer acknowledged before the open and nothing it has not; with no live
    /// writer, every whole operation in the log. [`Store::refresh`] brings it up to date.
    pub fn open_reader(dir: impl AsRef<Path>) -> Result<Store, OpenError> {
        Store::open(dir, Config::default().read_only(true))
    }

    /// A reader's view: whether a writer was alive at the last open or refresh, and how far
    /// the log is read. `None` for a read-write store.
    pub fn reader_view(&self) -> Option<ReaderView> {
        self.view
    }

    /// Brings a reader up to date with the log: reads what a live writer published since
    /// (or, with no live writer, every whole operation written since). Returns true when
    /// something new became visible. Cheap when nothing changed: one 44-byte read and a
    /// lock probe; otherwise it scans only the new frames. A read-write store is always up
    /// to date (`Ok(false)`).
    pub fn refresh(&mut self) -> Result<bool, OpenError> {
        let Some(view) = self.view else {
            return Ok(false);
        };
        if !self.dir.is_dir() {
            // Removed or moved away: nothing more will ever be published here.
            return Err(OpenError::Io {
                path: self.dir.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the store directory is gone",
                ),
            });
        }
        let published = read_published_settled(&self.dir);
        let alive = writer_alive(&self.dir)?;
        let generation = published.map_or(0, |p| p.generation);
        let writer_closed = !alive && published.is_none_or(|p| p.state == WriterState::Closed);
        let Some(bound) = bound_for(&self.dir, alive, published) else {
            self.view = Some(ReaderView {
                writer_alive: alive,
                generation,
                writer_closed,
                ..view
            });
            return Ok(false);
        };
        // Never move back: a bound behind the view (a writer recovering with an older
        // published position) keeps the view where it is.
        let bound = bound.map(|b| b.max(view.end));
        // Segments a GC replaced since the view was built: their handles go (so the space
        // comes back) and the view is built again from the files now in place.
        let replaced = self
            .segments
            .release_replaced()
            .map_err(|source| OpenError::Io {
                path: self.segments.dir().to_path_buf(),
                source,
            })?;
        let same = alive == view.writer_alive && generation == view.generation;
        // With no writer since the last look (the same generation: a writer that opened
        // meanwhile would have moved it), the log has not changed.
        if replaced.is_empty() && same && (!alive || bound == Some(view.end)) {
            return Ok(false);
        }
        if !replaced.is_empty() {
            self.index.clear()?;
        }
        self.segments.set_bound(bound);
        let recovered = recovery::recover(recovery::RecoveryInput {
            store_dir: &self.dir,
            segments: &self.segments,
            index: &self.index,
            mode: self.config.recovery,
            limits: self.limits,
            writable: false,
            index_writable: true,
            acked: None,
        })?;
        let end = LogPosition {
            segment: recovered.watermark.segment,
            offset: recovered.watermark.end,
        };
        let grew = end != view.end;
        self.view = Some(ReaderView {
            writer_alive: alive,
            generation,
            writer_closed,
            end,
        });
        if !grew {
            return Ok(false);
        }
        // Sessions whose length did not change keep their rows (with the surface counters
        // folded at open); the others are folded again.
        let mut registry = recovered.registry;
        {
            let old = self.registry();
            let unchanged: Vec<SessionRow> = registry
                .live()
                .iter()
                .filter_map(|r| old.get(r.number).filter(|o| o.next_seq == r.next_seq))
                .cloned()
                .collect();
            for row in unchanged {
                registry.put(row);
            }
        }
        {
            // A deleted session's state goes. A grown session's state is set aside (reads
            // then fold from the log, never from a stale state) and folded on from where it
            // was when its counters are next asked for (`fold_behind`), so a refresh costs
            // only the scan of the new frames.
            let mut cores = lock(&self.cores);
            let mut grown = lock(&self.grown);
            cores.retain(|number, _| registry.get(*number).is_some());
            grown.retain(|number, _| registry.get(*number).is_some());
            for row in registry.live() {
                if row.surface_covered < row.next_seq
                    && let Some(core) = cores.remove(&row.number)
                    && let Some(state) = lock(&core).state.take()
                {
                    grown.insert(row.number, state);
                }
            }
        }
        *self.registry_mut() = registry;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_round_trips_and_a_torn_copy_is_refused() {
        let p = Published {
            state: WriterState::Open,
            pid: 42,
            generation: 7,
            position: LogPosition {
                segment: 3,
                offset: 4096,
            },
        };
        let b = p.encode();
        assert_eq!(Published::decode(&b), Some(p));
        for i in 0..ACK_LEN {
            let mut torn = b;
            torn[i] ^= 0x40;
            assert_eq!(Published::decode(&torn), None, "byte {i}");
        }
        assert_eq!(Published::decode(&b[..ACK_LEN - 1]), None);
    }
}
