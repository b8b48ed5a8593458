//! [`AtomicFile`]: the one way interop writes a file: under a temporary name in the target's
//! directory (mode 0600, made by `tempfile`), synced, then published under its final name
//! without ever replacing an existing file, and the directory synced. A file dropped
//! unpublished (an error, a panic) is removed, with any SQLite journal beside it; after a
//! crash only a hidden `.<name>.<random>.tmp` file can remain, never a partial file under the
//! final name.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use tempfile::{Builder, NamedTempFile};

/// Bytes the temporary file's name adds to the target's (`.` + `<name>` + `.` + 8 random
/// characters + `.tmp`): a target is refused up front when its temporary name would be too
/// long.
pub(crate) const TEMP_NAME_EXTRA: usize = 1 + 1 + RANDOM_CHARS + 4;
const RANDOM_CHARS: usize = 8;

/// Why an atomic write failed.
#[derive(Debug)]
pub(crate) enum AtomicError {
    /// The target exists (before the write started, or appeared meanwhile): nothing was
    /// replaced.
    Exists(PathBuf),
    /// A file-system operation failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        context: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

fn failed(path: &Path, context: &'static str) -> impl FnOnce(io::Error) -> AtomicError {
    let path = path.to_owned();
    move |source| AtomicError::Io {
        path,
        context,
        source,
    }
}

/// The directory a target lives in (`.` for a bare file name).
pub(crate) fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A file written under a temporary name next to its target and published atomically.
#[derive(Debug)]
pub(crate) struct AtomicFile {
    /// `None` once published.
    temp: Option<NamedTempFile>,
    target: PathBuf,
    journal: PathBuf,
}

impl AtomicFile {
    /// Creates the temporary file next to `target`. Refuses an existing `target`.
    pub(crate) fn create(target: &Path) -> Result<AtomicFile, AtomicError> {
        if std::fs::symlink_metadata(target).is_ok() {
            return Err(AtomicError::Exists(target.to_owned()));
        }
        let dir = parent_of(target);
        let name = target
            .file_name()
            .map_or_else(|| "export".into(), |n| n.to_string_lossy().into_owned());
        let temp = Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .rand_bytes(RANDOM_CHARS)
            .tempfile_in(dir)
            .map_err(failed(dir, "cannot create a temporary file in"))?;
        let mut journal = temp.path().as_os_str().to_owned();
        journal.push("-journal");
        Ok(AtomicFile {
            temp: Some(temp),
            target: target.to_owned(),
            journal: PathBuf::from(journal),
        })
    }

    /// The temporary path being written.
    pub(crate) fn temp_path(&self) -> &Path {
        self.temp.as_ref().map_or(&self.target, |t| t.path())
    }

    /// The open temporary file.
    pub(crate) fn file(&mut self) -> Result<&mut File, AtomicError> {
        match self.temp.as_mut() {
            Some(t) => Ok(t.as_file_mut()),
            None => Err(AtomicError::Io {
                path: self.target.clone(),
                context: "write",
                source: io::Error::other("the file was already published"),
            }),
        }
    }

    /// Syncs the file, publishes it under its final name (failing rather than replacing a
    /// file that appeared meanwhile) and syncs the directory. Returns the final path.
    pub(crate) fn publish(mut self) -> Result<PathBuf, AtomicError> {
        let target = self.target.clone();
        let Some(temp) = self.temp.take() else {
            return Ok(target);
        };
        remove_journal(&self.journal);
        temp.as_file()
            .sync_all()
            .map_err(failed(temp.path(), "cannot sync"))?;
        temp.persist_noclobber(&target).map_err(|e| {
            if e.error.kind() == io::ErrorKind::AlreadyExists {
                AtomicError::Exists(target.clone())
            } else {
                AtomicError::Io {
                    path: target.clone(),
                    context: "cannot move the temporary file into place at",
                    source: e.error,
                }
            }
        })?;
        sync_dir(parent_of(&target))?;
        Ok(target)
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        // Unpublished: `NamedTempFile` removes the temporary file; SQLite may have left a
        // rollback journal beside it.
        if self.temp.is_some() {
            remove_journal(&self.journal);
        }
    }
}

/// Removes a rollback journal SQLite may have left beside the temporary file (a write that
/// failed or panicked mid-transaction); none is left after a committed one.
fn remove_journal(journal: &Path) {
    let _ = std::fs::remove_file(journal);
}

fn sync_dir(dir: &Path) -> Result<(), AtomicError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(failed(dir, "cannot sync the directory"))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}
