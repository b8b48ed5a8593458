//! A tree export's staging directory: every file is written there first, and the tree is
//! published only when all of them are written and synced.
//!
//! - `--out` does not exist: the staging directory is `.<name>.sessionlog-export.<random>.tmp`
//!   beside it, and one `rename` publishes the whole tree (readers see no tree or all of it).
//! - `--out` is an existing directory (a dsh root with other sessions): the staging directory
//!   is `.sessionlog-export.<random>.tmp` inside it, and each project directory (or, in a
//!   project directory that exists, each session directory) is moved into place with one
//!   `rename`, never replacing anything: a session is absent or whole.
//!
//! The staging directory is locked (`flock`) while its export runs. An export that was killed
//! leaves only its staging directory; the next export to the same `--out` removes every
//! unlocked one before it starts, so running the export again resumes from a clean state.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::ExportError;
use super::atomic::io;
use crate::interop::atomic::parent_of;

/// The part of a staging directory's name after `.` and the target's name (beside `--out`),
/// or after `.` alone (inside it).
const MARK: &str = "sessionlog-export.";

/// A locked staging directory; removed (with what it holds) when dropped unpublished.
pub(super) struct Staging {
    dir: Option<tempfile::TempDir>,
    /// Holds the directory's lock until the export ends.
    _lock: File,
    root: PathBuf,
    /// True when the staging directory is inside `root` (which existed).
    inside: bool,
}

/// The name prefix of `root`'s staging directories beside it.
fn beside_prefix(root: &Path) -> String {
    let name = root
        .file_name()
        .map_or_else(|| "export".into(), |n| n.to_string_lossy().into_owned());
    // Keep the staging name within NAME_MAX whatever the root's name.
    let name: String = name.chars().take(120).collect();
    format!(".{name}.{MARK}")
}

/// Removes the staging directories of exports to `root` that are no longer running (their lock
/// is free). Returns what it removed.
pub(super) fn remove_stale(root: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let candidates = [
        (parent_of(root).to_owned(), beside_prefix(root)),
        (root.to_owned(), format!(".{MARK}")),
    ];
    for (dir, prefix) in candidates {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !name.starts_with(&prefix) || !name.ends_with(".tmp") {
                continue;
            }
            let path = entry.path();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            // A running export holds the lock: leave its directory alone.
            let free = File::open(&path).is_ok_and(|f| f.try_lock().is_ok());
            if free && std::fs::remove_dir_all(&path).is_ok() {
                removed.push(path);
            }
        }
    }
    removed
}

impl Staging {
    /// Creates and locks the staging directory for a tree export to `root`.
    pub(super) fn create(root: &Path) -> Result<Staging, ExportError> {
        let inside = root.is_dir();
        let (parent, prefix) = if inside {
            (root.to_owned(), format!(".{MARK}"))
        } else {
            let parent = parent_of(root).to_owned();
            super::atomic::create_dirs(&parent)?;
            (parent, beside_prefix(root))
        };
        let dir = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(".tmp")
            .rand_bytes(8)
            .tempdir_in(&parent)
            .map_err(io(
                &parent,
                "cannot create the export's staging directory in",
            ))?;
        let lock = File::open(dir.path()).map_err(io(dir.path(), "cannot open"))?;
        lock.try_lock().map_err(|e| ExportError::Io {
            path: dir.path().to_owned(),
            context: "cannot lock",
            source: std::io::Error::other(e.to_string()),
        })?;
        Ok(Staging {
            dir: Some(dir),
            _lock: lock,
            root: root.to_owned(),
            inside,
        })
    }

    /// Where `target` (a path under the root) is written while staged.
    pub(super) fn staged(&self, target: &Path) -> PathBuf {
        let relative = target.strip_prefix(&self.root).unwrap_or(target);
        match &self.dir {
            Some(dir) => dir.path().join(relative),
            None => target.to_owned(),
        }
    }

    /// Publishes the staged tree under the root (see the module's rules) and removes the
    /// staging directory. Nothing existing is replaced.
    pub(super) fn publish(mut self) -> Result<(), ExportError> {
        let Some(dir) = self.dir.take() else {
            return Ok(());
        };
        let staged = dir.path().to_owned();
        sync_tree(&staged)?;
        if !self.inside {
            // One rename publishes everything; it fails if a non-empty directory appeared.
            std::fs::rename(&staged, &self.root).map_err(io(
                &self.root,
                "cannot move the exported tree into place at",
            ))?;
            // Published: nothing left to remove.
            let _ = dir.keep();
            return sync_dir(parent_of(&self.root));
        }
        for project in read_dirs(&staged)? {
            let name = project.file_name().unwrap_or_default().to_owned();
            let target = self.root.join(&name);
            if !target.exists() {
                move_no_clobber(&project, &target)?;
                continue;
            }
            for session in read_dirs(&project)? {
                let name = session.file_name().unwrap_or_default().to_owned();
                move_no_clobber(&session, &target.join(name))?;
            }
            sync_dir(&target)?;
        }
        sync_dir(&self.root)?;
        // Dropping `dir` removes the (now empty) staging directory.
        Ok(())
    }
}

/// Renames `from` to `to`, refusing (rather than replacing) an existing `to`.
fn move_no_clobber(from: &Path, to: &Path) -> Result<(), ExportError> {
    if std::fs::symlink_metadata(to).is_ok() {
        return Err(ExportError::TargetExists {
            path: to.to_owned(),
        });
    }
    std::fs::rename(from, to).map_err(io(to, "cannot move the exported files into place at"))
}

/// The subdirectories of `dir`.
fn read_dirs(dir: &Path) -> Result<Vec<PathBuf>, ExportError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir, "cannot read"))? {
        let entry = entry.map_err(io(dir, "cannot read"))?;
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.push(entry.path());
        }
    }
    Ok(out)
}

/// Syncs every directory of the staged tree (the files were synced when written), so the
/// renames that publish it publish durable entries.
fn sync_tree(dir: &Path) -> Result<(), ExportError> {
    for sub in read_dirs(dir)? {
        sync_tree(&sub)?;
    }
    sync_dir(dir)
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
