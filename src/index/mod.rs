//! The redb index (`index.redb`): derived data that makes reads and resume cheap.
//!
//! Tables (byte layouts in `format-spec.md`):
//!
//! | table            | key                                 | value (then a CRC-32, see below)       |
//! |------------------|-------------------------------------|----------------------------------------|
//! | `meta`           | `&str` name                         | bytes (format version, watermark, ...) |
//! | `sessions`       | `u64` session number                | [`SessionRow`] (fixed fields + header) |
//! | `session_ids`    | `u64` session number                | session id (UTF-8)                     |
//! | `events`         | `[u8;16]` session BE ‖ first seq BE | [`Run`] (28 bytes; one per run)        |
//! | `surface`        | `[u8;16]` session BE ‖ seq BE       | prev ‖ next (u64 LE each, MAX = none)  |
//! | `session_state`  | `u64` session number                | covered seq u64 LE ‖ postcard state    |
//! | `projections`    | `(u64, &str)`                       | projection checkpoint record           |
//!
//! Every value ends with a CRC-32 (crc32fast, LE) of the entry's key bytes ([`KeyBytes`]) and
//! the value bytes before it, checked on every read: redb verifies its page checksums only in
//! an integrity check, so a flipped byte would otherwise be read as data. A mismatch, an entry
//! that does not decode, a redb corruption error or a panic inside redb is
//! [`IndexError::Damaged`]: the index is derived data, rebuilt from the log by a read-write open
//! or `sessionlog recover`.
//!
//! The log is the truth: the index records a watermark (how far into the log it covers), and
//! deleting `index.redb` rebuilds the same index from the segments.

use redb::{Database, ReadOnlyDatabase, TableDefinition};

use crate::error::IndexError;

/// `$txn.$op(T)?` for every table but `meta`, in a fixed order (so that no list of the
/// tables is written twice).
macro_rules! each_data_table {
    ($txn:expr, $op:ident) => {{
        $txn.$op(SESSIONS)?;
        $txn.$op(SESSION_IDS)?;
        $txn.$op(EVENTS)?;
        $txn.$op(SURFACE)?;
        $txn.$op(SESSION_STATE)?;
        $txn.$op(PROJECTIONS)?;
    }};
}

mod commit;
mod guard;
pub(crate) mod numhash;
mod open;
mod read;
mod rewrite;
mod values;

pub use read::DumpEntry;
pub use rewrite::{INDEX_TMP_SUFFIX, remove_leftover as remove_leftover_rewrite};
pub use values::*;

use guard::guarded;

/// `meta`: name → bytes ‖ CRC.
pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// `sessions`: session number → [`SessionRow`] bytes ‖ CRC.
pub const SESSIONS: TableDefinition<u64, &[u8]> = TableDefinition::new("sessions");
/// `session_ids`: session number → session id (UTF-8) ‖ CRC.
pub const SESSION_IDS: TableDefinition<u64, &[u8]> = TableDefinition::new("session_ids");
/// `events`: (session number, first seq of a run) big-endian → [`Run`] value ([`RUN_LEN`] bytes)
/// ‖ CRC. One entry per run of a session's consecutive events in one frame (a sparse index).
pub const EVENTS: TableDefinition<&[u8; 16], &[u8; RUN_VALUE_LEN]> = TableDefinition::new("events");

/// Bytes of an encoded [`Run`] ([`Run::encode`]).
pub const RUN_LEN: usize = 28;
/// Bytes of an `events` value: the run and its CRC ([`run_value`]).
pub const RUN_VALUE_LEN: usize = RUN_LEN + CRC_LEN;
/// Bytes of a `surface` value: prev ‖ next ‖ CRC.
pub const SURFACE_VALUE_LEN: usize = 16 + CRC_LEN;
/// Bytes of the CRC-32 that ends every index value.
pub const CRC_LEN: usize = 4;

/// `surface`: (session number, seq) big-endian → prev seq ‖ next seq (u64 LE, `u64::MAX` = none)
/// ‖ CRC.
pub const SURFACE: TableDefinition<&[u8; 16], &[u8; SURFACE_VALUE_LEN]> =
    TableDefinition::new("surface");
/// `session_state`: session number → covered seq (u64 LE) ‖ postcard `SessionState` ‖ CRC.
pub const SESSION_STATE: TableDefinition<u64, &[u8]> = TableDefinition::new("session_state");

/// `projections`: (session number, projection key) → projection checkpoint record
/// (`crate::projection::Checkpoint::to_record`) ‖ CRC.
pub const PROJECTIONS: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("projections");

enum Db {
    Write(Database),
    Read(ReadOnlyDatabase),
}

/// The opened index.
pub struct Index {
    /// `None` while being dropped, or after a failed [`Index::rewrite`] closed it. Behind a
    /// lock so that [`Index::rewrite`] can swap in the rewritten file.
    db: std::sync::RwLock<Option<Db>>,
    /// The file, for an index opened read-write on disk (what [`Index::rewrite`] replaces).
    path: Option<std::path::PathBuf>,
}

impl Drop for Index {
    fn drop(&mut self) {
        let in_memory = self.path.is_none();
        let slot = self.db.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(db) = slot.take() {
            if in_memory {
                // A copy in memory (a read-only open's) has nothing to persist.
                discard(db);
            } else {
                // Closing a damaged file (or one redb panicked on before) can panic inside
                // redb.
                let _ = guarded("index.redb", move || {
                    drop(db);
                    Ok(())
                });
            }
        }
    }
}

/// Drops a redb handle without the commit redb makes when it closes a database (recording
/// its allocator state). That commit is useless for a copy in memory or a file about to be
/// deleted or replaced, and on some damage a normal open does not notice (a freed-page list
/// pointing at pages it should not), redb panics inside it and panics again while
/// unwinding, which aborts the process: no `catch_unwind` stops that. redb skips the commit
/// when it is closed during a panic, so the handle is dropped while a panic that never
/// reaches the panic hook (`resume_unwind`) unwinds, and that panic is caught here.
fn discard(db: Db) {
    struct DropWhileUnwinding(Option<Db>);
    impl Drop for DropWhileUnwinding {
        fn drop(&mut self) {
            drop(self.0.take());
        }
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _db = DropWhileUnwinding(Some(db));
        std::panic::resume_unwind(Box::new(()));
    }));
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index").finish_non_exhaustive()
    }
}

/// The index format version (stored under `meta/format_version`).
pub const INDEX_FORMAT_VERSION: u32 = 4;

/// What the index says when opened.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexState {
    /// The format version recorded (`None` for a fresh index).
    pub format_version: Option<u32>,
    /// How far the index covers the log.
    pub watermark: Watermark,
    /// Every session row.
    pub sessions: Vec<(String, SessionRow)>,
    /// The number the next created session gets (0 when not recorded).
    pub next_session: u64,
}

fn damaged(table: &'static str, detail: String) -> IndexError {
    IndexError::Damaged { table, detail }
}

/// Opens (creating when missing) every table of the index in `txn`.
fn create_tables(txn: &redb::WriteTransaction) -> Result<(), redb::TableError> {
    txn.open_table(META)?;
    each_data_table!(txn, open_table);
    Ok(())
}

fn malformed(table: &'static str, detail: String) -> IndexError {
    damaged(table, detail)
}

fn hex(b: &[u8]) -> String {
    let shown: String = b.iter().take(24).map(|x| format!("{x:02x}")).collect();
    if b.len() > 24 {
        format!("{shown}…")
    } else {
        shown
    }
}

fn u64_le(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

fn u64_be(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

fn u32_le(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Seq;

    fn loc(frame: u64, record_offset: u32) -> Location {
        Location {
            segment: 1,
            frame_offset: frame,
            frame_len: 100,
            record_offset,
        }
    }

    fn events_of(index: &Index) -> Vec<(u64, Run)> {
        index
            .dump()
            .unwrap()
            .into_iter()
            .filter(|(t, _, _)| t == "events")
            .map(|(_, k, v)| {
                let k: [u8; 16] = k.try_into().unwrap();
                let v: [u8; RUN_LEN] = v.try_into().unwrap();
                (
                    u64_be(&k[0..8]),
                    Run::decode(u64_be(&k[8..16]), &v).unwrap(),
                )
            })
            .collect()
    }

    /// Sessions 1 and 2 interleaved in frame 10, then both again in frame 20.
    fn interleaved() -> Vec<(u64, Seq, Location)> {
        vec![
            (1, 0, loc(10, 0)),
            (2, 0, loc(10, 7)),
            (1, 1, loc(10, 15)),
            (2, 1, loc(10, 22)),
            (1, 2, loc(10, 30)),
            (1, 3, loc(20, 0)),
            (2, 2, loc(20, 9)),
        ]
    }

    #[test]
    fn run_values_round_trip_and_a_zero_count_is_malformed() {
        let run = Run {
            first_seq: 42,
            count: 7,
            location: Location {
                segment: 3,
                frame_offset: 0x0102_0304_0506,
                frame_len: 999,
                record_offset: 17,
            },
        };
        let b = run.encode();
        assert_eq!(&b[0..8], &3u64.to_le_bytes());
        assert_eq!(&b[8..16], &0x0102_0304_0506u64.to_le_bytes());
        assert_eq!(&b[16..20], &999u32.to_le_bytes());
        assert_eq!(&b[20..24], &17u32.to_le_bytes());
        assert_eq!(&b[24..28], &7u32.to_le_bytes());
        assert_eq!(Run::decode(42, &b).unwrap(), run);
        let mut zero = b;
        zero[24..28].copy_from_slice(&0u32.to_le_bytes());
        assert!(matches!(
            Run::decode(42, &zero),
            Err(IndexError::Damaged {
                table: "events",
                ..
            })
        ));
        assert!(run.contains(42) && run.contains(48));
        assert!(!run.contains(41) && !run.contains(49));
    }

    #[test]
    fn coalesce_makes_one_run_per_session_and_frame() {
        let runs = coalesce(&interleaved());
        assert_eq!(
            runs,
            vec![
                (
                    1,
                    Run {
                        first_seq: 0,
                        count: 3,
                        location: loc(10, 0)
                    }
                ),
                (
                    2,
                    Run {
                        first_seq: 0,
                        count: 2,
                        location: loc(10, 7)
                    }
                ),
                (1, Run::single(3, loc(20, 0))),
                (2, Run::single(2, loc(20, 9))),
            ]
        );
        // A gap in the seqs starts a new run even in the same frame.
        let gap = coalesce(&[(1, 0, loc(10, 0)), (1, 2, loc(10, 5))]);
        assert_eq!(gap.len(), 2);
    }

    #[test]
    fn lookups_find_every_seq_of_interleaved_runs_and_nothing_past_them() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open(&dir.path().join("index.redb")).unwrap();
        let batch = IndexBatch {
            events: interleaved(),
            ..IndexBatch::default()
        };
        index.commit(&batch, Watermark::default(), true).unwrap();
        assert_eq!(events_of(&index).len(), 4, "4 runs for 7 events");
        for (session, seq, l) in interleaved() {
            let run = index.run(session, seq).unwrap().unwrap();
            assert!(run.contains(seq));
            assert!(run.location.same_frame(&l), "{session}/{seq}");
            assert!(run.location.record_offset <= l.record_offset);
        }
        // Past the end of a session's last run, before its first, and another session.
        assert_eq!(index.run(1, 4).unwrap(), None);
        assert_eq!(index.run(2, 3).unwrap(), None);
        assert_eq!(index.run(3, 0).unwrap(), None);
        assert_eq!(index.run(0, 0).unwrap(), None);
        // Range queries: the run holding `from`, then those starting below `to`.
        let runs = index.runs(1, 1, 4, 10).unwrap();
        assert_eq!(
            runs.iter()
                .map(|r| (r.first_seq, r.count))
                .collect::<Vec<_>>(),
            vec![(0, 3), (3, 1)]
        );
        assert_eq!(index.runs(1, 1, 3, 10).unwrap().len(), 1);
        assert_eq!(index.runs(1, 0, 4, 1).unwrap().len(), 1);
        assert!(index.runs(1, 4, 10, 10).unwrap().is_empty());
        assert!(index.runs(2, 2, 2, 10).unwrap().is_empty());
    }

    #[test]
    fn a_frame_split_across_commits_extends_the_stored_run() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open(&dir.path().join("index.redb")).unwrap();
        let commit = |events: Vec<(u64, Seq, Location)>| {
            let batch = IndexBatch {
                events,
                ..IndexBatch::default()
            };
            index.commit(&batch, Watermark::default(), false).unwrap();
        };
        commit(vec![(1, 0, loc(10, 0)), (1, 1, loc(10, 5))]);
        commit(vec![(1, 2, loc(10, 9)), (1, 3, loc(20, 0))]);
        assert_eq!(
            events_of(&index),
            vec![
                (
                    1,
                    Run {
                        first_seq: 0,
                        count: 3,
                        location: loc(10, 0)
                    }
                ),
                (1, Run::single(3, loc(20, 0))),
            ]
        );
    }

    #[test]
    fn purge_removes_every_run_of_the_session_only() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open(&dir.path().join("index.redb")).unwrap();
        let mut events = interleaved();
        events.extend((4..100).map(|s| (1, s, loc(100 + s, 0))));
        let batch = IndexBatch {
            events,
            ..IndexBatch::default()
        };
        index.commit(&batch, Watermark::default(), false).unwrap();
        assert_eq!(events_of(&index).len(), 4 + 96);
        let purge = IndexBatch {
            ops: vec![IndexOp::Purge {
                session: 1,
                id: "a".into(),
            }],
            ..IndexBatch::default()
        };
        index.commit(&purge, Watermark::default(), false).unwrap();
        let left = events_of(&index);
        assert!(left.iter().all(|(s, _)| *s == 2), "{left:?}");
        assert_eq!(left.len(), 2);
        assert_eq!(index.run(1, 0).unwrap(), None);
        assert_eq!(index.run(2, 1).unwrap().unwrap().first_seq, 0);
    }

    fn op_strategy() -> impl proptest::strategy::Strategy<Value = IndexOp> {
        use proptest::prelude::*;
        prop_oneof![
            (0u64..20, 0u64..20, 0u64..20).prop_map(|(seq, prev, next)| IndexOp::Link {
                session: 1,
                seq,
                prev,
                next,
            }),
            (0u64..20).prop_map(|seq| IndexOp::Unlink { session: 1, seq }),
            (0u64..20).prop_map(|covered| IndexOp::State {
                session: 1,
                covered,
                bytes: vec![covered as u8],
            }),
            (0usize..2, 0u8..9).prop_map(|(k, v)| IndexOp::Projection {
                session: 1,
                key: ["stats", "title"][k].to_owned(),
                record: vec![v],
            }),
        ]
    }

    proptest::proptest! {
        /// A batch's squashed operations leave the index exactly as applying every operation
        /// one by one does: the nodes of the batch's own events (seqs 10..20) start absent,
        /// older nodes (0..10) present.
        #[test]
        fn squashed_batches_write_what_their_operations_in_order_write(
            ops in proptest::collection::vec(op_strategy(), 0..40)
        ) {
            let base = IndexBatch {
                sessions: vec![SessionRow::new(1, crate::event::SessionHeader::new("s", 1))],
                events: (0..10).map(|seq| (1, seq, loc(10, seq as u32 * 8))).collect(),
                ops: (0..10)
                    .map(|seq| IndexOp::Link { session: 1, seq, prev: seq.wrapping_sub(1), next: seq + 1 })
                    .collect(),
            };
            let events: Vec<_> = (10..20).map(|seq| (1, seq, loc(20, seq as u32 * 8))).collect();
            let (squashed, one_by_one) = (Index::in_memory().unwrap(), Index::in_memory().unwrap());
            let w = Watermark::default();
            for index in [&squashed, &one_by_one] {
                index.commit(&base, w, false).unwrap();
            }
            squashed
                .commit(&IndexBatch { sessions: Vec::new(), events: events.clone(), ops: ops.clone() }, w, false)
                .unwrap();
            one_by_one
                .commit(&IndexBatch { sessions: Vec::new(), events, ops: Vec::new() }, w, false)
                .unwrap();
            for op in ops {
                one_by_one
                    .commit(&IndexBatch { sessions: Vec::new(), events: Vec::new(), ops: vec![op] }, w, false)
                    .unwrap();
            }
            proptest::prop_assert_eq!(squashed.dump().unwrap(), one_by_one.dump().unwrap());
        }
    }
}
