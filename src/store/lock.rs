//! The store's lock file: one writer process, or any number of readers.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::error::OpenError;

/// Holds the OS lock on `LOCK` while the store is open.
#[derive(Debug)]
pub(crate) struct StoreLock {
    _file: File,
}

impl StoreLock {
    /// Takes the lock: exclusive for a writer (recording our process id), shared for a reader.
    pub(crate) fn acquire(path: &Path, exclusive: bool) -> Result<StoreLock, OpenError> {
        let io = |source| OpenError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = if exclusive {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
        } else {
            match OpenOptions::new().read(true).open(path) {
                Ok(f) => Ok(f),
                // A store that never had a writer has no lock file; nothing can be racing us.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path),
                Err(e) => Err(e),
            }
        }
        .map_err(io)?;
        let attempt = if exclusive {
            file.try_lock()
        } else {
            file.try_lock_shared()
        };
        match attempt {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(OpenError::Locked {
                    path: path.to_path_buf(),
                    pid: text.trim().parse().ok(),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        if exclusive {
            file.set_len(0).map_err(io)?;
            file.seek(SeekFrom::Start(0)).map_err(io)?;
            write!(file, "{}", std::process::id()).map_err(io)?;
        }
        Ok(StoreLock { _file: file })
    }
}
