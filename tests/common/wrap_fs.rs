//! The real file system with some of its files wrapped: a test's `StorageFile` that counts,
//! slows or fails some operations sits between the store and the file.

use std::path::Path;
use std::sync::Arc;

use sessionlog::fs::{FileSystem, OpenMode, StdFileSystem, StorageFile};

/// Wraps a file just opened at a path (or returns it as it is).
pub type Wrap =
    dyn Fn(&Path, Arc<dyn StorageFile>) -> std::io::Result<Arc<dyn StorageFile>> + Send + Sync;

/// [`StdFileSystem`], with every opened file passed through the wrapper.
pub struct WrapFs(pub Box<Wrap>);

impl WrapFs {
    /// A file system whose opened files go through `wrap`, ready for `Config::with_fs`.
    pub fn shared(
        wrap: impl Fn(&Path, Arc<dyn StorageFile>) -> std::io::Result<Arc<dyn StorageFile>>
        + Send
        + Sync
        + 'static,
    ) -> Arc<dyn FileSystem> {
        Arc::new(WrapFs(Box::new(wrap)))
    }
}

impl std::fmt::Debug for WrapFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WrapFs")
    }
}

impl FileSystem for WrapFs {
    fn open(&self, path: &Path, mode: OpenMode) -> std::io::Result<Arc<dyn StorageFile>> {
        (self.0)(path, StdFileSystem.open(path, mode)?)
    }
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        StdFileSystem.create_dir_all(path)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        StdFileSystem.list(dir)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        StdFileSystem.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        StdFileSystem.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        StdFileSystem.sync_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        StdFileSystem.exists(path)
    }
}
