//! Opening the index for a store: rebuilt from the log when it is damaged (read-write), or
//! repaired or rebuilt in memory without touching a file (read-only); salvage names what it
//! dropped.

use super::*;

/// Opens the index and runs recovery (format-spec.md §7).
///
/// Read-write: an index redb cannot open, that makes it panic, or that recovery finds
/// damaged (an entry failing its CRC, ...) is deleted and rebuilt from the log (reported as
/// `index_rebuilt` with the reason). Read-only: nothing is modified; an index whose writer
/// crashed is repaired in a copy in memory, and a damaged, missing, old or stale one is
/// replaced by an index built in memory from the log, with `recovery_pending` saying why.
pub(super) fn open_index(
    dir: &Path,
    segments: &Segments,
    config: &Config,
    limits: FrameLimits,
    acked: Option<LogPosition>,
) -> Result<(Index, recovery::Recovered), OpenError> {
    let writable = !config.read_only;
    let index_path = dir.join(INDEX_FILE);
    let run = |index: &Index| {
        recovery::recover(recovery::RecoveryInput {
            store_dir: dir,
            segments,
            index,
            mode: config.recovery,
            limits,
            writable,
            index_writable: index.is_writable(),
            acked,
        })
    };
    // redb creates the file with the umask's mode: create it first, owner-only.
    let private = |path: &Path| {
        crate::fs::ensure_private_file(path).map_err(|source| OpenError::Io {
            path: path.to_path_buf(),
            source,
        })
    };
    if writable {
        private(&index_path)?;
        let salvage = config.recovery == RecoveryMode::SalvageSkippingBadFrames;
        // The ids the old index knew, to name sessions whose creation record salvage loses
        // (best effort: the index may be what is damaged).
        let known: HashMap<u64, (String, Seq, bool)> = if salvage {
            Index::copy_in_memory(&index_path)
                .and_then(|i| i.load())
                .map(|state| {
                    state
                        .sessions
                        .into_iter()
                        .map(|(id, row)| (row.number, (id, row.next_seq, row.is_deleted())))
                        .collect()
                })
                .unwrap_or_default()
        } else {
            HashMap::new()
        };
        let damage = if salvage {
            // Damage behind the watermark is found only by reading every frame: salvage
            // rebuilds from the whole log, so that what a damaged frame held is dropped and named.
            "salvage rebuilds the index from the whole log".to_owned()
        } else {
            let opened = if config.check_index {
                Index::open_checked(&index_path)
            } else {
                Index::open(&index_path)
            };
            match opened {
                Ok(index) => match run(&index) {
                    Ok(recovered) => return Ok((index, recovered)),
                    Err(OpenError::Index(IndexError::Damaged { table, detail })) => {
                        // Deleted below: never closed (closing a damaged file can abort).
                        index.abandon();
                        format!("index damaged ({table}: {detail})")
                    }
                    Err(e) => return Err(e),
                },
                Err(IndexError::Damaged { table, detail }) => {
                    format!("index damaged ({table}: {detail})")
                }
                Err(e) => return Err(e.into()),
            }
        };
        // The index is derived data: replace it by one rebuilt from the log.
        match std::fs::remove_file(&index_path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(OpenError::Io {
                    path: index_path,
                    source,
                });
            }
        }
        private(&index_path)?;
        let index = Index::open(&index_path)?;
        let mut recovered = run(&index)?;
        recovered.report.index_rebuilt = true;
        recovered.report.rebuild_reason = Some(damage);
        name_salvage_losses(&mut recovered, &known);
        return Ok((index, recovered));
    }
    let opened = if index_path.exists() {
        match Index::open_for_reading(&index_path) {
            Ok(opened) => Ok(opened),
            Err(e @ IndexError::Damaged { .. }) => Err(e.to_string()),
            Err(e) => return Err(e.into()),
        }
    } else {
        Err("index.redb is missing".to_owned())
    };
    let mut pending = None;
    let attempt = match opened {
        Ok((index, crashed)) => {
            pending = crashed;
            // An older index version is rebuilt in memory; `NeedsRepair` from recovery (an
            // index that claims more than the log holds: damaged acknowledged data) is
            // returned as it is.
            match index.load().map(|s| s.format_version) {
                Ok(Some(v)) if v < crate::index::INDEX_FORMAT_VERSION => Err(format!(
                    "the index has format version {v}, this build uses version {}",
                    crate::index::INDEX_FORMAT_VERSION
                )),
                Err(e @ IndexError::Damaged { .. }) => Err(e.to_string()),
                _ => match run(&index) {
                    Ok(recovered) => Ok((index, recovered)),
                    Err(OpenError::Index(e @ IndexError::Damaged { .. })) => Err(e.to_string()),
                    Err(e) => return Err(e),
                },
            }
        }
        Err(reason) => Err(reason),
    };
    let (index, mut recovered) = match attempt {
        Ok(done) => done,
        Err(reason) => {
            // Rebuild the whole index in memory from the log, as a read-write open would.
            pending = Some(reason);
            let index = Index::in_memory()?;
            let recovered = run(&index)?;
            (index, recovered)
        }
    };
    let r = &mut recovered.report;
    r.index_rebuilt = false;
    let rebuilt = r.rebuild_reason.take();
    let lost = r.acknowledged_lost.map(|l| {
        format!(
            "the log ends at {}, before {}, up to which its last writer had published every frame as durable: acknowledged frames are missing",
            l.end, l.published
        )
    });
    r.recovery_pending = lost.or(pending).or(rebuilt).or_else(|| {
        if let Some(t) = &r.truncated {
            Some(format!(
                "a torn write at the log's end ({}) is to be cut",
                t.position
            ))
        } else if r.frames_scanned > 0 {
            Some(format!(
                "{} frame(s) at the log's end are not in the index yet",
                r.frames_scanned
            ))
        } else {
            r.removed_segment
                .map(|n| format!("segment {n} was torn while being created"))
        }
    });
    Ok((index, recovered))
}

/// After a salvage: names sessions by the ids the old index knew (where the log lost their
/// creation record), and reports the seqs the old index held that the rebuilt one lacks
/// (events inside the damaged frames themselves).
fn name_salvage_losses(
    recovered: &mut recovery::Recovered,
    known: &HashMap<u64, (String, Seq, bool)>,
) {
    let report = &mut recovered.report;
    for (id, _, _) in &mut report.dropped_events {
        let number = id
            .strip_prefix("session number ")
            .and_then(|n| n.parse::<u64>().ok());
        if let Some((known_id, _, _)) = number.and_then(|n| known.get(&n)) {
            *id = known_id.clone();
        }
    }
    let Some(cause) = report.skipped_frames.first().map(|b| b.position) else {
        return;
    };
    let mut numbers: Vec<&u64> = known.keys().collect();
    numbers.sort_unstable();
    for number in numbers {
        let Some((id, old_len, deleted)) = known.get(number) else {
            continue;
        };
        if *deleted {
            continue;
        }
        let new_len = recovered.registry.get(*number).map_or(0, |r| r.next_seq);
        let reported: std::collections::HashSet<Seq> = report
            .dropped_events
            .iter()
            .filter(|(d, _, _)| d == id)
            .map(|(_, seq, _)| *seq)
            .collect();
        for seq in new_len..*old_len {
            if !reported.contains(&seq) {
                report.dropped_events.push((id.clone(), seq, cause));
            }
        }
    }
    report
        .dropped_events
        .sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
}
