//! [`AtomicFile`]: a file written under a temporary name and published atomically.

use super::ExportError;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// A file written under a temporary name in its target directory and published atomically.
/// Dropped unpublished, the temporary file is removed.
#[derive(Debug)]
pub struct AtomicFile {
    temp: PathBuf,
    target: PathBuf,
    file: Option<File>,
}

pub(super) fn io(path: &Path, context: &'static str) -> impl FnOnce(std::io::Error) -> ExportError {
    let path = path.to_owned();
    move |source| ExportError::Io {
        path,
        context,
        source,
    }
}

pub(super) fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

impl AtomicFile {
    /// Creates the temporary file next to `target` (mode 0600 on Unix). Refuses an existing
    /// `target`.
    pub fn create(target: &Path) -> Result<AtomicFile, ExportError> {
        if std::fs::symlink_metadata(target).is_ok() {
            return Err(ExportError::TargetExists {
                path: target.to_owned(),
            });
        }
        let dir = parent_of(target);
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "export".into());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut attempt = 0u32;
        loop {
            let temp = dir.join(format!(
                ".{name}.{}-{nanos:08x}-{attempt}.tmp",
                std::process::id()
            ));
            let mut opts = OpenOptions::new();
            opts.write(true).create_new(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                opts.mode(0o600);
            }
            match opts.open(&temp) {
                Ok(file) => {
                    return Ok(AtomicFile {
                        temp,
                        target: target.to_owned(),
                        file: Some(file),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => {
                    attempt += 1;
                }
                Err(e) => return Err(io(&temp, "cannot create a temporary file")(e)),
            }
        }
    }

    /// The temporary path being written.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// The open temporary file.
    pub fn file(&mut self) -> Result<&mut File, ExportError> {
        self.file.as_mut().ok_or_else(|| ExportError::Io {
            path: self.temp.clone(),
            context: "write",
            source: std::io::Error::other("the file was already published"),
        })
    }

    /// Syncs the file, links it under its final name (which fails rather than replace an
    /// existing file), removes the temporary name and syncs the directory.
    pub fn publish(mut self) -> Result<PathBuf, ExportError> {
        let file = self.file.take();
        if let Some(f) = file {
            f.sync_all().map_err(io(&self.temp, "cannot sync"))?;
        }
        match std::fs::hard_link(&self.temp, &self.target) {
            Ok(()) => {
                let _ = std::fs::remove_file(&self.temp);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(ExportError::TargetExists {
                    path: self.target.clone(),
                });
            }
            Err(_) => {
                // Filesystems without hard links: rename (checked just before).
                if std::fs::symlink_metadata(&self.target).is_ok() {
                    return Err(ExportError::TargetExists {
                        path: self.target.clone(),
                    });
                }
                std::fs::rename(&self.temp, &self.target)
                    .map_err(io(&self.target, "cannot rename the temporary file"))?;
            }
        }
        sync_dir(parent_of(&self.target))?;
        Ok(std::mem::take(&mut self.target))
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        // Either unpublished (remove the temp file) or already removed (harmless).
        let _ = std::fs::remove_file(&self.temp);
    }
}

fn sync_dir(dir: &Path) -> Result<(), ExportError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(dir, "cannot sync the directory"))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Creates `dir` and its missing parents (mode 0700 for the new ones, as dsh does).
pub(super) fn create_dirs(dir: &Path) -> Result<(), ExportError> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
        .map_err(io(dir, "cannot create the directory"))
}
