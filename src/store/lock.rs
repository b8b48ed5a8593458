//! The store's lock file: one writer process at a time (readers take no lock: `store::live`).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::error::OpenError;
use crate::fs::PRIVATE_FILE_MODE;

/// Holds the OS lock on `LOCK` while the store is open.
#[derive(Debug)]
pub(crate) struct StoreLock {
    /// `None` for a reader of a store that has no `LOCK` file: readers never create files.
    _file: Option<File>,
}

/// How long a writer retries a lock held shared (by a reader's probe, which holds it for
/// microseconds) before reporting the store locked.
const PROBE_PATIENCE: std::time::Duration = std::time::Duration::from_millis(250);

impl StoreLock {
    /// No lock: a reader (see `store::live`) takes none.
    pub(crate) fn none() -> StoreLock {
        StoreLock { _file: None }
    }

    /// Takes the lock: exclusive for a writer (recording our process id; `LOCK` is created
    /// with mode 0600 when missing), shared otherwise (the store itself opens readers with
    /// [`StoreLock::none`]; a shared lock of a store without `LOCK` takes nothing and
    /// creates nothing).
    pub(crate) fn acquire(path: &Path, exclusive: bool) -> Result<StoreLock, OpenError> {
        let io = |source| OpenError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = if exclusive {
            let created = !path.exists();
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(PRIVATE_FILE_MODE)
                .open(path)
                .map_err(io)?;
            if created {
                file.set_permissions(std::fs::Permissions::from_mode(PRIVATE_FILE_MODE))
                    .map_err(io)?;
            }
            file
        } else {
            match OpenOptions::new().read(true).open(path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Ok(StoreLock { _file: None });
                }
                Err(e) => return Err(io(e)),
            }
        };
        // A reader's liveness probe holds the lock shared for an instant: retry briefly
        // before calling the store locked.
        let deadline = std::time::Instant::now() + PROBE_PATIENCE;
        let attempt = loop {
            let attempt = if exclusive {
                file.try_lock()
            } else {
                file.try_lock_shared()
            };
            match attempt {
                Err(TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                other => break other,
            }
        };
        match attempt {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                // A process id is at most 20 digits; never read more of a file others can write.
                let mut text = String::new();
                let _ = (&mut file).take(32).read_to_string(&mut text);
                return Err(OpenError::Locked {
                    path: path.to_path_buf(),
                    pid: text.trim().parse().ok(),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        if exclusive {
            // The lock is on the file this process opened: if `LOCK` was removed (and maybe
            // made again by another process) meanwhile, that lock excludes no one.
            use std::os::unix::fs::MetadataExt;
            let held = file.metadata().map_err(io)?;
            let current = std::fs::metadata(path);
            if !current.is_ok_and(|m| m.ino() == held.ino() && m.dev() == held.dev()) {
                return Err(OpenError::Locked {
                    path: path.to_path_buf(),
                    pid: None,
                });
            }
            file.set_len(0).map_err(io)?;
            file.seek(SeekFrom::Start(0)).map_err(io)?;
            write!(file, "{}", std::process::id()).map_err(io)?;
        }
        Ok(StoreLock { _file: Some(file) })
    }
}
