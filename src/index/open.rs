//! Opening the index: read-write, read-only, in memory, checked; the transactions.

use super::guard::guarded;
use super::values::META_FORMAT_VERSION;
use super::{
    Db, EVENTS, INDEX_FORMAT_VERSION, Index, META, PROJECTIONS, SESSION_IDS, SESSION_STATE,
    SESSIONS, SURFACE, create_tables, damaged,
};
use crate::error::IndexError;
use redb::{Builder, Database, Durability, ReadOnlyDatabase, ReadableDatabase, StorageBackend};
use std::path::Path;

/// True when a redb error opening or checking the file means the file is unusable and is
/// best rebuilt from the log: anything but the file being in use or not accessible to us (a
/// damaged header can make redb read past the end, or call an empty file not a database).
fn damage_in(e: &redb::DatabaseError) -> bool {
    match e {
        redb::DatabaseError::Storage(redb::StorageError::Io(io)) => {
            io.kind() != std::io::ErrorKind::PermissionDenied
        }
        redb::DatabaseError::DatabaseAlreadyOpen => false,
        _ => true,
    }
}

fn open_error(path: &Path, e: redb::DatabaseError) -> IndexError {
    if damage_in(&e) {
        damaged(
            "index.redb",
            format!("redb cannot open {}: {e}", path.display()),
        )
    } else {
        IndexError::Open {
            path: path.to_path_buf(),
            source: Box::new(e.into()),
        }
    }
}

/// An in-memory redb backend holding `bytes`.
fn memory_backend(bytes: &[u8]) -> Result<redb::backends::InMemoryBackend, IndexError> {
    let backend = redb::backends::InMemoryBackend::new();
    backend
        .set_len(bytes.len() as u64)
        .and_then(|()| backend.write(0, bytes))
        .map_err(IndexError::Memory)?;
    Ok(backend)
}

impl Index {
    /// Opens (or creates) `index.redb` for writing, verifying it as redb opens it (every
    /// page's checksum: redb's `set_check_integrity_on_open`). A file redb refuses as corrupt,
    /// fails the check, or makes redb panic is [`IndexError::Damaged`].
    ///
    /// A plain redb open trusts a file that was closed cleanly: it reads the recorded
    /// allocator state unverified, and at the first durable commit the freed-page lists, where
    /// damage can make redb panic and panic again while unwinding, which aborts the process
    /// (no `catch_unwind` stops that). The check reads the whole file (about 0.3-0.5 ms per MB
    /// here: `bench/examples/index_check_cost.rs`), so damage is an error at open and the
    /// caller rebuilds the index from the log.
    pub fn open(path: &Path) -> Result<Index, IndexError> {
        guarded("index.redb", || {
            let db = Builder::new()
                .set_check_integrity_on_open(true)
                .create(path)
                .map_err(|e| open_error(path, e))?;
            let mut index = Index::init(db)?;
            index.path = Some(path.to_path_buf());
            Ok(index)
        })
    }

    /// [`Index::open`], then a check of every entry's CRC ([`Index::check_entries`]). For
    /// `recover`.
    pub fn open_checked(path: &Path) -> Result<Index, IndexError> {
        guarded("index.redb", || {
            let index = Index::open(path)?;
            if index.load()?.format_version == Some(INDEX_FORMAT_VERSION) {
                index.check_entries()?;
            }
            Ok(index)
        })
    }

    /// A new, empty index held in memory (nothing is written to disk).
    pub fn in_memory() -> Result<Index, IndexError> {
        guarded("index.redb", || {
            let db = Builder::new()
                .create_with_backend(redb::backends::InMemoryBackend::new())
                .map_err(|e| IndexError::Redb(Box::new(e.into())))?;
            Index::init(db)
        })
    }

    /// A copy of `index.redb` in memory, opened writable there: redb repairs a file whose
    /// writer crashed in memory, and later commits change only the copy. The file is only
    /// read.
    pub fn copy_in_memory(path: &Path) -> Result<Index, IndexError> {
        let bytes = std::fs::read(path).map_err(|source| IndexError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Index::from_bytes(&bytes, path)
    }

    /// The bytes of an index file (read from `path`, or downloaded as a replica's index
    /// snapshot), opened writable in memory: redb repairs a file whose writer had not closed
    /// it, there; nothing is written to disk.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Index, IndexError> {
        guarded("index.redb", || {
            let db = Builder::new()
                .create_with_backend(memory_backend(bytes)?)
                .map_err(|e| open_error(path, e))?;
            Index::init(db)
        })
    }

    /// Opens `index.redb` for a read-only store without modifying it, and without holding
    /// it open: a read-only redb handle on the file would keep a writer from opening it
    /// (redb's `ExclusiveWriter` mode), so the file is read once into memory and the copy is
    /// opened there. A copy whose writer did not close it (it crashed) is repaired in memory,
    /// and the reason returned.
    pub fn open_for_reading(path: &Path) -> Result<(Index, Option<String>), IndexError> {
        let bytes = std::fs::read(path).map_err(|source| IndexError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let repaired = std::rc::Rc::new(std::cell::Cell::new(false));
        let flag = repaired.clone();
        let index = guarded("index.redb", || {
            let db = Builder::new()
                .set_repair_callback(move |_| flag.set(true))
                .create_with_backend(memory_backend(&bytes)?)
                .map_err(|e| open_error(path, e))?;
            Index::init(db)
        })?;
        // The copy gets written (recovery indexes a tail, a session is caught up): a damaged
        // page met by a commit can make redb panic again while unwinding (freeing the pages
        // a damaged list names), which aborts the process. redb's integrity check reads every
        // page's checksum first, so damage is an error here instead (the caller rebuilds the
        // index from the log, in memory).
        let mut index = index;
        index.check_integrity()?;
        let reason = repaired
            .get()
            .then(|| "the last writer did not close the index (it crashed or was killed)".into());
        Ok((index, reason))
    }

    pub(super) fn init(db: Database) -> Result<Index, IndexError> {
        match prepare(&db) {
            Ok(()) => Ok(Index::holding(Db::Write(db))),
            Err(e) => {
                // A file redb cannot read as an index is closed without redb's closing commit
                // (on some damage that commit aborts the process).
                super::discard(Db::Write(db));
                Err(e)
            }
        }
    }

    fn holding(db: Db) -> Index {
        Index {
            db: std::sync::RwLock::new(Some(db)),
            path: None,
        }
    }

    pub(super) fn db(&self) -> std::sync::RwLockReadGuard<'_, Option<Db>> {
        self.db.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens an existing `index.redb` read-only (fails when a crashed writer left commits that
    /// need repair; [`Index::open_for_reading`] handles that).
    pub fn open_read_only(path: &Path) -> Result<Index, IndexError> {
        guarded("index.redb", || {
            Ok(Index::holding(Db::Read(
                ReadOnlyDatabase::open(path).map_err(|e| open_error(path, e))?,
            )))
        })
    }

    /// redb's integrity check (every page checksum; repairs in place, so use it on a writable
    /// index or an in-memory copy). `Ok(false)` when redb had to repair something.
    pub fn check_integrity(&mut self) -> Result<bool, IndexError> {
        let Some(Db::Write(db)) = self.db.get_mut().unwrap_or_else(|p| p.into_inner()) else {
            return Err(IndexError::ReadOnly {
                operation: "the integrity check",
            });
        };
        guarded("index.redb", || match db.check_integrity() {
            Ok(clean) => Ok(clean),
            Err(e) if damage_in(&e) => Err(damaged(
                "index.redb",
                format!("redb's integrity check failed: {e}"),
            )),
            Err(e) => Err(IndexError::Redb(Box::new(e.into()))),
        })
    }

    /// True when the index accepts commits (a read-write file, or a copy in memory).
    pub fn is_writable(&self) -> bool {
        matches!(*self.db(), Some(Db::Write(_)))
    }

    /// Closes the index (a damaged file may make redb panic even while closing; that is
    /// caught).
    pub fn close(self) {
        drop(self);
    }

    /// Closes an index file found damaged that is about to be deleted or replaced, without
    /// the commit redb makes when it closes a database (which can abort the process on a
    /// damaged file).
    pub fn abandon(mut self) {
        if let Some(db) = self.db.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            super::discard(db);
        }
    }

    pub(super) fn begin_read(&self) -> Result<redb::ReadTransaction, IndexError> {
        Ok(match &*self.db() {
            Some(Db::Write(db)) => db.begin_read()?,
            Some(Db::Read(db)) => db.begin_read()?,
            None => return Err(IndexError::Closed),
        })
    }

    /// A write transaction (the index must be writable).
    pub(super) fn begin_write(&self) -> Result<redb::WriteTransaction, IndexError> {
        match &*self.db() {
            Some(Db::Write(db)) => Ok(db.begin_write()?),
            None => Err(IndexError::Closed),
            _ => Err(IndexError::ReadOnly {
                operation: "writing",
            }),
        }
    }
}

/// Checks an opened index's version and tables, creating the tables of a fresh one. An index
/// of another format version keeps its tables as they are (their types may differ): recovery
/// refuses it or clears it for a rebuild.
fn prepare(db: &Database) -> Result<(), IndexError> {
    let version = {
        let txn = db.begin_read()?;
        match txn.open_table(META) {
            Ok(meta) => meta.get(META_FORMAT_VERSION)?.map(|v| v.value().to_vec()),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(e.into()),
        }
    };
    if let Some(v) = version {
        if v.get(..4) == Some(&INDEX_FORMAT_VERSION.to_le_bytes()[..]) {
            // An index of this version has every table: a missing one was lost to damage,
            // and creating it empty would hide the loss.
            let txn = db.begin_read()?;
            each_data_table!(txn, open_table);
        }
        return Ok(());
    }
    let mut txn = db.begin_write()?;
    // Creating missing tables need not be durable: a lost creation is redone next open.
    txn.set_durability(Durability::None)?;
    create_tables(&txn)?;
    txn.commit()?;
    Ok(())
}
