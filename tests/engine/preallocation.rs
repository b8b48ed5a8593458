//! The zero tail a writer preallocates after the active segment's last frame (format-spec.md
//! §2): syncs of frames written over it change no file size; it is cut when a segment is
//! sealed, when the store closes, and by the next read-write open after a crash; it is never
//! damage, and zeros anywhere else still are.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sessionlog::error::OpenError;
use sessionlog::fs::{FileSystem, StorageFile};
use sessionlog::log::frame::{self, FrameLimits};
use sessionlog::log::scan::RecoveryMode;
use sessionlog::log::segment::SEGMENT_HEADER_LEN;
use sessionlog::store::{Config, Durability, Store};

use crate::common::wrap_fs::WrapFs;
use crate::common::{config, fill, read_all, synthetic_event};

/// The segment files, in order.
fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    paths.sort();
    paths
}

/// Where the last whole frame of a segment file ends (frames decoded from the header on).
fn frames_end(bytes: &[u8]) -> usize {
    let mut at = SEGMENT_HEADER_LEN as usize;
    while let Some(rest) = bytes.get(at..) {
        match frame::decode(rest, &FrameLimits::default()) {
            Ok((header, _)) => at += header.frame_len() as usize,
            Err(_) => break,
        }
    }
    at
}

/// `(file length, end of its frames)` of every segment.
fn layout(dir: &Path) -> Vec<(usize, usize)> {
    segment_files(dir)
        .iter()
        .map(|p| {
            let bytes = std::fs::read(p).unwrap();
            (bytes.len(), frames_end(&bytes))
        })
        .collect()
}

/// Checks that `Store::space` counts zeros in no sealed segment.
fn sealed_have_no_zeros(space: &sessionlog::SpaceReport) {
    assert!(
        space
            .segments
            .iter()
            .filter(|s| s.sealed)
            .all(|s| s.preallocated == 0),
        "{:?}",
        space.segments
    );
}

fn prealloc_config(bytes: u64) -> Config {
    config(Durability::Sync).preallocate_bytes(bytes)
}

#[test]
fn a_live_segment_ends_in_zeros_that_close_cuts() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), prealloc_config(16 << 10)).unwrap();
    let written = fill(&store, 2, 5);
    let files = layout(dir.path());
    let &(len, end) = files.last().unwrap();
    assert!(len > end, "the active segment has a zero tail: {files:?}");
    assert!(
        len - end <= 16 << 10,
        "at most the configured bytes: {files:?}"
    );
    let last = std::fs::read(segment_files(dir.path()).pop().unwrap()).unwrap();
    assert!(last[end..].iter().all(|&b| b == 0));
    let space = store.space(&mut |_, _| {}).unwrap();
    assert_eq!(space.totals.preallocated, (len - end) as u64);
    assert_eq!(
        space.segments.last().unwrap().preallocated,
        (len - end) as u64
    );
    assert_eq!(space.totals.damaged, 0, "the zero tail is not damage");
    let report = store.verify().unwrap();
    assert!(report.bad_frames.is_empty() && report.problems.is_empty());
    store.close().unwrap();

    for (len, end) in layout(dir.path()) {
        assert_eq!(
            len, end,
            "a closed store's segments end at their last frame"
        );
    }
    let store = Store::open(dir.path(), prealloc_config(16 << 10)).unwrap();
    assert_eq!(store.recovery_report().preallocated_cut, 0);
    for (id, events) in &written {
        assert_eq!(&read_all(&store, id), events);
    }
}

#[test]
fn a_crash_leaves_zeros_that_end_the_log_and_a_writer_cuts() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), prealloc_config(1 << 20)).unwrap();
    let written = fill(&store, 3, 20);
    store.abandon();
    let (len, end) = *layout(dir.path()).last().unwrap();
    assert!(len > end, "the crash left the zero tail");

    // A reader reads everything up to the zeros; nothing is torn or damaged.
    let reader = Store::open(dir.path(), prealloc_config(1 << 20).read_only(true)).unwrap();
    assert_eq!(reader.recovery_report().truncated, None);
    for (id, events) in &written {
        assert_eq!(&read_all(&reader, id), events);
    }
    let verified = reader.verify().unwrap();
    assert_eq!(verified.pending_cut, None);
    assert!(verified.bad_frames.is_empty(), "{verified:?}");
    drop(reader);
    assert_eq!(
        layout(dir.path()).last().unwrap().0,
        len,
        "a reader cuts nothing"
    );

    // Even the strictest recovery mode: the zeros are not a torn frame.
    let store = Store::open(
        dir.path(),
        prealloc_config(1 << 20).recovery(RecoveryMode::AbsoluteConsistency),
    )
    .unwrap();
    let report = store.recovery_report().clone();
    assert_eq!(report.truncated, None);
    assert_eq!(report.preallocated_cut, (len - end) as u64);
    let (cut_len, cut_end) = *layout(dir.path()).last().unwrap();
    assert_eq!(cut_len, cut_end, "the writer's open cut the zeros");
    for (id, events) in &written {
        assert_eq!(&read_all(&store, id), events);
    }
    store.append("s0", synthetic_event(20, 0)).unwrap();
    store.close().unwrap();
}

#[test]
fn sealed_segments_never_keep_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_segments()).unwrap();
    fill(&store, 4, 150);
    let files = layout(dir.path());
    assert!(
        files.len() >= 3,
        "the test wants several segments: {files:?}"
    );
    for &(len, end) in &files[..files.len() - 1] {
        assert_eq!(
            len, end,
            "a sealed segment ends at its last frame: {files:?}"
        );
    }
    sealed_have_no_zeros(&store.space(&mut |_, _| {}).unwrap());
    store.close().unwrap();
}

/// Segments of 16 KiB, 8 KiB preallocated: several segments in a small test.
fn small_segments() -> Config {
    prealloc_config(8 << 10).segment_bytes(16 << 10)
}

/// Opens the store of `dir` after deleting its index, so the open scans the whole log.
fn open_rebuilding(dir: &Path) -> Result<Store, OpenError> {
    std::fs::remove_file(dir.join("index.redb")).unwrap();
    Store::open(dir, small_segments())
}

#[test]
fn zeros_before_a_later_frame_are_damage() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_segments()).unwrap();
    fill(&store, 4, 150);
    store.close().unwrap();
    let paths = segment_files(dir.path());
    assert!(paths.len() >= 3, "{paths:?}");
    let original = tempfile::tempdir().unwrap();
    for p in &paths {
        std::fs::copy(p, original.path().join(p.file_name().unwrap())).unwrap();
    }
    let restore = || {
        for p in &paths {
            std::fs::copy(original.path().join(p.file_name().unwrap()), p).unwrap();
        }
    };

    // Zeros at the end of a sealed segment: a later segment follows, so they are damage,
    // which `verify` reports and a scan of the log refuses.
    let sealed = &paths[paths.len() - 2];
    let mut bytes = std::fs::read(sealed).unwrap();
    let end = bytes.len() as u64;
    bytes.extend(std::iter::repeat_n(0u8, 4096));
    std::fs::write(sealed, &bytes).unwrap();
    let store = Store::open(dir.path(), small_segments()).unwrap();
    let report = store.verify().unwrap();
    assert_eq!(
        report
            .bad_frames
            .iter()
            .map(|b| b.position.offset)
            .collect::<Vec<_>>(),
        vec![end],
        "{report:?}"
    );
    store.close().unwrap();
    match open_rebuilding(dir.path()) {
        Err(OpenError::Corruption { position, .. }) => assert_eq!(position.offset, end),
        other => panic!("zeros before a later segment must be corruption: {other:?}"),
    }
    restore();

    // Zeros in the last segment followed by a frame: a lost frame, not preallocated space.
    let last = paths.last().unwrap();
    let bytes = std::fs::read(last).unwrap();
    let first = SEGMENT_HEADER_LEN as usize;
    let (header, _) = frame::decode(&bytes[first..], &FrameLimits::default()).unwrap();
    assert!(frames_end(&bytes) > first + header.frame_len() as usize);
    let mut damaged = bytes.clone();
    damaged[first..first + header.frame_len() as usize].fill(0);
    std::fs::write(last, &damaged).unwrap();
    match open_rebuilding(dir.path()) {
        Err(OpenError::Corruption { position, .. }) => assert_eq!(position.offset, first as u64),
        other => panic!("zeros before a frame must be corruption: {other:?}"),
    }
}

/// A file system whose segment files refuse any write of zeros (as a full disk would refuse
/// the preallocation), and that records, for every segment sync, whether the file's length
/// changed since the previous one.
#[derive(Debug, Default)]
struct Watch {
    refuse_zeros: AtomicBool,
    /// Segment reads wait a little first (so a scan's reads fall after the writer's cuts).
    slow_reads: AtomicBool,
    syncs: AtomicU64,
    resizing_syncs: AtomicU64,
    refused: AtomicU64,
}

#[derive(Debug)]
struct WatchFile {
    inner: Arc<dyn StorageFile>,
    watch: Arc<Watch>,
    synced_len: Mutex<u64>,
}

impl StorageFile for WatchFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        if self.watch.slow_reads.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if offset > 0
            && buf.iter().all(|&b| b == 0)
            && self.watch.refuse_zeros.load(Ordering::SeqCst)
        {
            self.watch.refused.fetch_add(1, Ordering::SeqCst);
            // A full disk may take part of a write before refusing the rest.
            let _ = self.inner.write_all_at(&buf[..buf.len() / 2], offset);
            return Err(std::io::Error::from_raw_os_error(28));
        }
        self.inner.write_all_at(buf, offset)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        let len = self.inner.len()?;
        let mut synced = self.synced_len.lock().unwrap();
        self.watch.syncs.fetch_add(1, Ordering::SeqCst);
        if len != *synced {
            self.watch.resizing_syncs.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.sync_data()?;
        *synced = len;
        Ok(())
    }
}

/// The real file system with its segment files watched by `watch`.
fn watch_fs(watch: &Arc<Watch>) -> Arc<dyn FileSystem> {
    let watch = watch.clone();
    WrapFs::shared(move |path, inner| {
        if path.extension().is_none_or(|x| x != "seg") {
            return Ok(inner);
        }
        let len = inner.len()?;
        Ok(Arc::new(WatchFile {
            inner,
            watch: watch.clone(),
            synced_len: Mutex::new(len),
        }))
    })
}

#[test]
fn syncs_over_preallocated_zeros_change_no_file_size() {
    let run = |preallocate: u64| {
        let dir = tempfile::tempdir().unwrap();
        let watch = Arc::new(Watch::default());
        let fs = watch_fs(&watch);
        let cfg = prealloc_config(preallocate)
            .segment_bytes(1 << 20)
            .with_fs(fs);
        let store = Store::open(dir.path(), cfg).unwrap();
        fill(&store, 1, 400);
        store.close().unwrap();
        (
            watch.syncs.load(Ordering::SeqCst),
            watch.resizing_syncs.load(Ordering::SeqCst),
        )
    };
    let (syncs, resizing) = run(64 << 10);
    assert!(syncs >= 400, "a sync per append: {syncs}");
    assert!(
        resizing * 20 <= syncs,
        "with 64 KiB preallocated, few syncs change the file size: {resizing} of {syncs}"
    );
    let (syncs, resizing) = run(0);
    assert!(
        resizing + 5 >= syncs,
        "without preallocation, every append's sync grows the file: {resizing} of {syncs}"
    );
}

#[test]
fn a_disk_too_full_for_the_zeros_still_takes_the_frames() {
    let dir = tempfile::tempdir().unwrap();
    let watch = Arc::new(Watch::default());
    watch.refuse_zeros.store(true, Ordering::SeqCst);
    let fs = watch_fs(&watch);
    let store = Store::open(dir.path(), prealloc_config(16 << 10).with_fs(fs.clone())).unwrap();
    let written = fill(&store, 2, 30);
    assert!(
        watch.refused.load(Ordering::SeqCst) > 0,
        "zeros were refused"
    );
    let (len, end) = *layout(dir.path()).last().unwrap();
    assert_eq!(len, end, "a refused preallocation leaves no partial zeros");
    store.close().unwrap();
    let store = Store::open(dir.path(), prealloc_config(16 << 10)).unwrap();
    for (id, events) in &written {
        assert_eq!(&read_all(&store, id), events);
    }
    assert!(store.verify().unwrap().problems.is_empty());
}

#[test]
fn scans_beside_a_writer_that_seals_segments_read_what_is_there() {
    // `Store::space`, `verify` and `gc` scan the active segment while its writer fills it,
    // seals it (cutting its zeros: the file becomes shorter under the scan) and rolls over.
    let dir = tempfile::tempdir().unwrap();
    let watch = Arc::new(Watch::default());
    watch.slow_reads.store(true, Ordering::SeqCst);
    let fs = watch_fs(&watch);
    let config = prealloc_config(4096).segment_bytes(4096).with_fs(fs);
    let store = Arc::new(Store::open(dir.path(), config).unwrap());
    for i in 0..4 {
        store
            .create_session(sessionlog::event::SessionHeader::new(format!("s{i}"), i))
            .unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    // The writer waits for a scan every 30 events per session, so that the scans run beside
    // the appends however the threads are scheduled (a loaded machine ran all 600 appends
    // before the fourth scan).
    let scanned = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writer = {
        let (store, done, scanned) = (store.clone(), done.clone(), scanned.clone());
        std::thread::spawn(move || {
            for seq in 0..150 {
                while scanned.load(Ordering::SeqCst) < (seq / 30) as usize {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                for i in 0..4u64 {
                    store
                        .append(&format!("s{i}"), synthetic_event(seq, i))
                        .unwrap();
                }
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let mut scans = 0;
    while !done.load(Ordering::SeqCst) {
        sealed_have_no_zeros(
            &store
                .space(&mut |_, _| {})
                .expect("space beside the writer"),
        );
        if scans % 8 == 0 {
            store.verify().expect("verify beside the writer");
            store
                .gc(sessionlog::store::GcOptions::default(), &mut |_, _| {})
                .expect("gc beside the writer");
        }
        scans += 1;
        scanned.store(scans, Ordering::SeqCst);
    }
    writer.join().unwrap();
    assert!(scans > 3, "the scans ran beside the appends: {scans}");
    let report = store.verify().unwrap();
    assert!(
        report.bad_frames.is_empty() && report.problems.is_empty(),
        "{report:?}"
    );
}
