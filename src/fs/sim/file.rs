//! [`SimFile`]: an open file of a [`SimFs`](super::SimFs).

use super::state::{
    EFBIG, EIO, ENOSPC, Pending, State, apply, apply_write, lock, machine_down, stale_handle,
};
use crate::fs::StorageFile;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

/// An open file of a [`SimFs`](super::SimFs).
#[derive(Debug)]
pub struct SimFile {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) inode: u64,
    pub(super) generation: u64,
    pub(super) writable: bool,
}

impl SimFile {
    fn state(&self) -> io::Result<MutexGuard<'_, State>> {
        let st = lock(&self.state);
        if st.generation != self.generation {
            return Err(stale_handle());
        }
        if st.down {
            return Err(machine_down());
        }
        Ok(st)
    }

    fn check_writable(&self) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "file opened read-only",
            ))
        }
    }
}

impl StorageFile for SimFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let st = self.state()?;
        let inode = st
            .inodes
            .get(&self.inode)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "file is gone"))?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = start.saturating_add(buf.len());
        let src = inode.current.get(start..end).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the file",
            )
        })?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_writable()?;
        let mut st = self.state()?;
        let crashed_now = st.tick().is_err();
        st.stats.writes += 1;
        let mut data = buf.to_vec();
        let mut error = None;
        if crashed_now {
            // Died in the middle of the write: part of it may be in the cache.
            let cut = st.rng.below(data.len() as u64 + 1) as usize;
            data.truncate(cut);
            error = Some(machine_down());
        } else if let Some(n) = st.faults.enospc_after_writes.as_mut() {
            if *n == 0 {
                st.faults.enospc_after_writes = None;
                let cut = st.rng.below(data.len() as u64) as usize;
                data.truncate(cut);
                st.stats.injected_errors += 1;
                error = Some(io::Error::from_raw_os_error(ENOSPC));
            } else {
                *n -= 1;
            }
        }
        if error.is_none()
            && let Some(n) = st.faults.efbig_after_writes.as_mut()
        {
            if *n == 0 {
                st.faults.efbig_after_writes = None;
                let cut = st.rng.below(data.len() as u64) as usize;
                data.truncate(cut);
                st.stats.injected_errors += 1;
                st.stats.efbig_errors += 1;
                error = Some(io::Error::from_raw_os_error(EFBIG));
            } else {
                *n -= 1;
            }
        }
        if error.is_none()
            && let Some(limit) = st.faults.file_size_limit
        {
            let end = offset.saturating_add(data.len() as u64);
            if end > limit {
                data.truncate(limit.saturating_sub(offset) as usize);
                st.stats.injected_errors += 1;
                st.stats.efbig_errors += 1;
                error = Some(io::Error::from_raw_os_error(EFBIG));
            }
        }
        if error.is_none()
            && let Some(free) = st.faults.disk_free_bytes
        {
            let old_len = st
                .inodes
                .get(&self.inode)
                .map_or(0, |i| i.current.len() as u64);
            let end = offset.saturating_add(data.len() as u64);
            let growth = end.saturating_sub(old_len);
            if growth > free {
                // What fits: the overwritten part plus `free` bytes of growth.
                let fits = old_len.saturating_sub(offset) + free;
                data.truncate(usize::try_from(fits).unwrap_or(usize::MAX).min(data.len()));
                st.faults.disk_free_bytes = Some(0);
                st.stats.injected_errors += 1;
                st.stats.disk_full_errors += 1;
                error = Some(io::Error::from_raw_os_error(ENOSPC));
            } else {
                st.faults.disk_free_bytes = Some(free - growth);
            }
        }
        st.stats.bytes_written += data.len() as u64;
        if !data.is_empty() {
            let inode = st
                .inodes
                .get_mut(&self.inode)
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "file is gone"))?;
            apply_write(&mut inode.current, offset, &data);
            inode.pending.push(Pending::Write { offset, data });
        }
        match error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn len(&self) -> io::Result<u64> {
        let st = self.state()?;
        st.inodes
            .get(&self.inode)
            .map(|i| i.current.len() as u64)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "file is gone"))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        let mut st = self.state()?;
        st.tick()?;
        let old_len = st
            .inodes
            .get(&self.inode)
            .map_or(0, |i| i.current.len() as u64);
        if let Some(free) = st.faults.disk_free_bytes {
            if len > old_len && len - old_len > free {
                st.stats.injected_errors += 1;
                st.stats.disk_full_errors += 1;
                return Err(io::Error::from_raw_os_error(ENOSPC));
            }
            // Growing takes space, shrinking frees it.
            st.faults.disk_free_bytes = Some(if len >= old_len {
                free - (len - old_len)
            } else {
                free.saturating_add(old_len - len)
            });
        }
        if let Some(limit) = st.faults.file_size_limit
            && len > limit
            && len > old_len
        {
            st.stats.injected_errors += 1;
            st.stats.efbig_errors += 1;
            return Err(io::Error::from_raw_os_error(EFBIG));
        }
        let inode = st
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "file is gone"))?;
        let op = Pending::SetLen(len);
        apply(&mut inode.current, &op);
        inode.pending.push(op);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut st = self.state()?;
        st.tick()?;
        st.stats.syncs += 1;
        if let Some(n) = st.faults.eio_after_syncs.as_mut() {
            if *n == 0 {
                st.faults.eio_after_syncs = None;
                st.stats.injected_errors += 1;
                // The writeback failed: the unsynced data reached the disk or not, page by
                // page, and the kernel forgets it was dirty.
                st.resolve(self.inode);
                if st.options.eio_drops_cache
                    && let Some(inode) = st.inodes.get_mut(&self.inode)
                {
                    inode.current = inode.durable.clone();
                }
                return Err(io::Error::from_raw_os_error(EIO));
            }
            *n -= 1;
        }
        let inode = st
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "file is gone"))?;
        for op in std::mem::take(&mut inode.pending) {
            apply(&mut inode.durable, &op);
        }
        Ok(())
    }
}
