//! The active segment of the group-commit writer: rolling over, syncing, and cutting what a
//! failed sync may have lost.

use std::sync::Arc;

use super::Committer;
use crate::error::AppendError;
use crate::fs::StorageFile;
use crate::log::segment::SEGMENT_HEADER_LEN;

/// The segment being written.
#[derive(Debug)]
pub(crate) struct Active {
    pub number: u64,
    pub file: Arc<dyn StorageFile>,
    pub len: u64,
    pub last_frame: Option<u64>,
    /// Bytes known durable (everything before this offset was fsynced).
    pub synced_len: u64,
    /// The file's length: `len` plus the zero bytes written ahead of it
    /// ([`Active::preallocate`]), which a sealed or closed segment no longer has.
    pub reserved: u64,
    /// Set by recovery when it read this segment without syncing it: its tail (or a
    /// truncation of it) may exist only in the page cache, so it is synced before anything
    /// is written after it or the store moves to the next segment.
    pub unverified: bool,
    /// Never appended to (a segment of an older format version): the next frame rolls over.
    pub sealed: bool,
}

impl Active {
    /// A segment that holds only its header.
    pub(crate) fn fresh(number: u64, file: Arc<dyn StorageFile>) -> Active {
        Active {
            number,
            file,
            len: SEGMENT_HEADER_LEN,
            last_frame: None,
            synced_len: SEGMENT_HEADER_LEN,
            reserved: SEGMENT_HEADER_LEN,
            unverified: false,
            sealed: false,
        }
    }

    /// Writes zero bytes after a frame that ended past the zero tail, up to `chunk` bytes
    /// past it and no further than `limit` (the segment's size), so that the next frames
    /// are written over bytes the file already has and their syncs change no file size
    /// (format-spec.md §2). Best effort: when the write fails (a full disk, a file-size
    /// limit) the zeros are cut again and the segment goes on without them, so the frames
    /// that fit are still written and the error, if any, comes from a frame's own write.
    pub(super) fn preallocate(&mut self, chunk: u64, limit: u64) {
        if chunk == 0 || self.len <= self.reserved {
            return;
        }
        let target = self.len.saturating_add(chunk).min(limit);
        if target <= self.len {
            self.reserved = self.len;
            return;
        }
        let zeros = vec![0u8; (target - self.len) as usize];
        match self.file.write_all_at(&zeros, self.len) {
            Ok(()) => self.reserved = target,
            Err(_) => {
                let _ = self.file.set_len(self.len);
                self.reserved = self.len;
            }
        }
    }

    /// Cuts the zero tail (when there is one) and syncs, so the file ends at its last frame:
    /// done before the segment is sealed and when the store closes.
    pub(super) fn release(&mut self) -> std::io::Result<()> {
        if self.reserved > self.len {
            self.file.set_len(self.len)?;
            self.reserved = self.len;
            sync_or_cut(self)?;
        }
        Ok(())
    }

    /// Syncs a segment recovery did not sync (see [`Active::unverified`]). No cut on
    /// failure: the bytes were there before this process wrote anything.
    ///
    /// When the sync fails, the bytes recovery read (and checked) may be only in the page
    /// cache, marked clean by the failure (fsync-gate): a later process would read them, its
    /// syncs would succeed without writing them, and a power loss would leave a hole under
    /// what it appended. So they are written again from the cache and synced once more; the
    /// first error is returned either way (the writer stops until reopened).
    pub(crate) fn verify(&mut self) -> std::io::Result<()> {
        if self.unverified {
            // Re-assert the length recovery found, so that a truncation that only ever
            // reached the page cache becomes durable with this sync.
            self.file.set_len(self.len)?;
            if let Err(first) = self.file.sync_data() {
                let _ = rewrite(&*self.file, self.len).and_then(|()| self.file.sync_data());
                return Err(first);
            }
            self.unverified = false;
        }
        Ok(())
    }
}

/// Writes bytes `0..len` of `file` again, as read, so that pages a failed sync marked clean
/// are dirty again and the next sync writes them.
pub(crate) fn rewrite(file: &dyn StorageFile, len: u64) -> std::io::Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(buf.len() as u64) as usize;
        let chunk = &mut buf[..n];
        file.read_exact_at(chunk, at)?;
        file.write_all_at(chunk, at)?;
        at += n as u64;
    }
    Ok(())
}

impl Committer {
    /// Cuts the active segment's zero tail and syncs (store close), as the leader so that no
    /// frame is written meanwhile. A failure fails the writer like a failed append.
    pub(crate) fn release_reserve(&self) -> Result<(), AppendError> {
        let mut st = self.become_leader()?;
        let mut active = st.active.take();
        drop(st);
        let result = match active.as_mut() {
            Some(a) => a.release().map_err(AppendError::from),
            None => Ok(()),
        };
        let mut st = self.lock();
        st.leader = false;
        st.active = active;
        let out = match result {
            Ok(()) => Ok(()),
            Err(e) => {
                let failure = crate::error::WriteFailure::from(e);
                self.set_failed(&mut st, failure.clone());
                Err(AppendError::PreviousIo(failure))
            }
        };
        self.wake(&mut st);
        out
    }

    /// The active segment, rolled over first when a frame of `frame_len` bytes would not fit
    /// (or when the active segment is of an older format version, which is never appended to).
    pub(super) fn writable_segment<'a>(
        &self,
        active: &'a mut Option<Active>,
        next_segment: u64,
        frame_len: u64,
    ) -> Result<&'a mut Active, AppendError> {
        let needs_roll = match active.as_ref() {
            None => true,
            Some(a) => {
                a.sealed
                    || (a.len > SEGMENT_HEADER_LEN && a.len + frame_len > self.config.segment_bytes)
            }
        };
        if needs_roll {
            let number = match active.take() {
                Some(mut old) => {
                    old.verify()?;
                    if old.synced_len < old.len {
                        sync_or_cut(&mut old)?;
                    }
                    // Never a zero tail before a later segment: a scan would read it as
                    // damage, not as the log's end.
                    old.release()?;
                    next_segment.max(old.number + 1)
                }
                None => next_segment,
            };
            let file = self.segments.create(number)?;
            *active = Some(Active::fresh(number, file));
        }
        active
            .as_mut()
            .ok_or_else(|| AppendError::Writer("no active segment".into()))
    }
}

/// Syncs the active segment. When the sync fails, the unsynced bytes are cut off (best
/// effort): after a failed fsync Linux may keep the lost pages readable, and a reopen in the
/// same boot would otherwise index a frame that a later power loss removes, leaving a hole
/// before frames acknowledged after it.
pub(super) fn sync_or_cut(a: &mut Active) -> std::io::Result<()> {
    match a.file.sync_data() {
        Ok(()) => {
            a.synced_len = a.len;
            Ok(())
        }
        Err(e) => {
            let _ = a.file.set_len(a.synced_len);
            let _ = a.file.sync_data();
            a.reserved = a.synced_len;
            Err(e)
        }
    }
}
