//! The file-system seam: every byte the log reads or writes goes through [`FileSystem`].
//!
//! [`StdFileSystem`] is the real thing. Tests substitute a fault-injecting implementation
//! (dropped, torn or reordered unsynced writes, bit flips, failing fsyncs) behind the same
//! trait, so crash behaviour can be tested byte by byte. The redb index goes through redb's own
//! backend; it is derived data and recovery rebuilds it from the log when it disagrees.

use std::fmt::Debug;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// An open file: positional reads and writes, length, and data sync.
pub trait StorageFile: Send + Sync + Debug {
    /// Reads exactly `buf.len()` bytes at `offset` (error `UnexpectedEof` if the file is shorter).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// The file's current length.
    fn len(&self) -> io::Result<u64>;
    /// True when the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
}

/// How to open a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only; the file must exist.
    Read,
    /// Read and write; the file must exist.
    ReadWrite,
    /// Read and write; the file must not exist yet.
    CreateNew,
}

/// The operations the log needs from a file system.
pub trait FileSystem: Send + Sync + Debug {
    /// Opens a file.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Lists the file names (not paths) in a directory.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Renames a file within one directory, replacing `to` atomically when it exists (the
    /// change is durable after [`FileSystem::sync_dir`]).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes a directory's entries (creations, removals, renames) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// True when the path exists.
    fn exists(&self, path: &Path) -> bool;
}

/// The mode of every file the store creates (`rw-------`), whatever the umask.
pub const PRIVATE_FILE_MODE: u32 = 0o600;
/// The mode of every directory the store creates (`rwx------`), whatever the umask.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// Creates `path` and its missing parents with mode 0700 (set explicitly after creation, so a
/// umask cannot widen or narrow it). Directories that already exist are left as they are.
pub fn create_private_dir_all(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if path.is_dir() {
        return Ok(());
    }
    // The missing ancestors, outermost first.
    let mut missing = Vec::new();
    let mut at = Some(path);
    while let Some(p) = at {
        if p.as_os_str().is_empty() || p.is_dir() {
            break;
        }
        missing.push(p);
        at = p.parent();
    }
    for dir in missing.into_iter().rev() {
        let mut builder = std::fs::DirBuilder::new();
        builder.mode(PRIVATE_DIR_MODE);
        match builder.create(dir) {
            Ok(()) => {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PRIVATE_DIR_MODE))?
            }
            // Created concurrently by someone else: leave it as it is.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Makes sure the file `path` exists and is readable and writable by its owner only (mode
/// 0600): creates it empty with that mode when missing, and otherwise narrows its mode. For
/// files created by code that does not go through [`FileSystem`] (the redb index).
pub fn ensure_private_file(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(PRIVATE_FILE_MODE)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(PRIVATE_FILE_MODE))
}

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdFileSystem;

#[derive(Debug)]
struct StdFile {
    file: std::fs::File,
}

impl StorageFile for StdFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.file, buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.file, buf, offset)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

impl FileSystem for StdFileSystem {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>> {
        let mut opts = std::fs::OpenOptions::new();
        match mode {
            OpenMode::Read => opts.read(true),
            OpenMode::ReadWrite => opts.read(true).write(true),
            OpenMode::CreateNew => opts.read(true).write(true).create_new(true),
        };
        // Session logs hold prompts, tool output and secrets: new files are the owner's alone.
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, PRIVATE_FILE_MODE);
        let file = opts.open(path)?;
        if mode == OpenMode::CreateNew {
            // Exactly 0600 even under a umask that would take the owner's bits.
            file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(
                PRIVATE_FILE_MODE,
            ))?;
        }
        Ok(Arc::new(StdFile { file }))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        create_private_dir_all(path)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::File::open(dir)?.sync_all()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
}

#[cfg(feature = "internals")]
pub mod sim;
