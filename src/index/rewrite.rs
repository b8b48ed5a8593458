//! Rewriting `index.redb` into a fresh file (erase, format-spec.md §11.6): redb leaves the old
//! bytes of freed pages in its file, so after an erase the index is copied table by table into
//! `index.redb.tmp`, which replaces it.

use std::path::{Path, PathBuf};

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

use super::guard::guarded;
use super::{
    Db, EVENTS, Index, META, PROJECTIONS, SESSION_IDS, SESSION_STATE, SESSIONS, SURFACE, damaged,
};
use crate::error::IndexError;

/// Suffix of the index copy an erase writes (`index.redb.tmp`); a writable open deletes one a
/// crash left.
pub const INDEX_TMP_SUFFIX: &str = ".tmp";

/// The path of `index`'s rewrite copy.
pub fn tmp_path(index: &Path) -> PathBuf {
    let mut s = index.as_os_str().to_owned();
    s.push(INDEX_TMP_SUFFIX);
    PathBuf::from(s)
}

fn copy_table<K, V>(
    from: &redb::ReadTransaction,
    to: &redb::WriteTransaction,
    def: TableDefinition<K, V>,
) -> Result<(), IndexError>
where
    K: redb::Key + 'static,
    V: redb::Value + 'static,
{
    let src = from.open_table(def)?;
    let mut dst = to.open_table(def)?;
    for item in src.iter()? {
        let (k, v) = item?;
        dst.insert(k.value(), v.value())?;
    }
    Ok(())
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> IndexError + '_ {
    move |source| IndexError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Index {
    /// Rewrites the index file: copies every table into a fresh `index.redb.tmp` (one durable
    /// commit), fsyncs it, renames it over `index.redb`, fsyncs the directory, and continues
    /// on the new file. A crash at any point leaves either the old or the new complete file
    /// (a leftover `.tmp` is deleted by the next writable open). The caller makes sure no
    /// commit runs meanwhile (readers wait on the handle's lock).
    ///
    /// On an error before the rename the old file stays open and in use; after it, the index
    /// is closed ([`IndexError::Closed`] until the store is reopened).
    pub fn rewrite(&self) -> Result<(), IndexError> {
        let Some(path) = self.path.clone() else {
            return Err(IndexError::ReadOnly {
                operation: "rewriting the index file",
            });
        };
        let tmp = tmp_path(&path);
        let dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let mut slot = self.db.write().unwrap_or_else(|p| p.into_inner());
        let Some(Db::Write(db)) = slot.as_ref() else {
            return Err(IndexError::ReadOnly {
                operation: "rewriting the index file",
            });
        };
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(&tmp)(e)),
        }
        let copied = guarded("index.redb", || {
            crate::fs::ensure_private_file(&tmp).map_err(io_error(&tmp))?;
            let fresh = Database::create(&tmp).map_err(|e| damaged_tmp(&tmp, e))?;
            let from = db.begin_read()?;
            let mut to = fresh.begin_write()?;
            to.set_durability(Durability::Immediate)?;
            copy_table(&from, &to, META)?;
            each_data_table_copy(&from, &to)?;
            to.commit()?;
            drop(from);
            drop(fresh);
            let f = std::fs::File::open(&tmp).map_err(io_error(&tmp))?;
            f.sync_all().map_err(io_error(&tmp))?;
            Ok(())
        });
        if let Err(e) = copied {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        // The old handle is closed before the rename: from here on, a failure leaves the
        // index closed, and the next open uses whichever complete file the name holds. The
        // file is replaced: it is closed without redb's closing commit.
        if let Some(old) = slot.take() {
            super::discard(old);
        }
        std::fs::rename(&tmp, &path).map_err(io_error(&path))?;
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io_error(&dir))?;
        let reopened = guarded("index.redb", || {
            let db = Database::create(&path).map_err(|e| damaged_tmp(&path, e))?;
            let mut index = Index::init(db)?;
            Ok(index.db.get_mut().unwrap_or_else(|p| p.into_inner()).take())
        })?;
        *slot = reopened;
        Ok(())
    }
}

fn each_data_table_copy(
    from: &redb::ReadTransaction,
    to: &redb::WriteTransaction,
) -> Result<(), IndexError> {
    copy_table(from, to, SESSIONS)?;
    copy_table(from, to, SESSION_IDS)?;
    copy_table(from, to, EVENTS)?;
    copy_table(from, to, SURFACE)?;
    copy_table(from, to, SESSION_STATE)?;
    copy_table(from, to, PROJECTIONS)?;
    Ok(())
}

fn damaged_tmp(path: &Path, e: redb::DatabaseError) -> IndexError {
    damaged(
        "index.redb",
        format!("redb cannot create {}: {e}", path.display()),
    )
}

/// Deletes an `index.redb.tmp` a crash left during a rewrite (before a writable open).
pub fn remove_leftover(index: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(tmp_path(index)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
