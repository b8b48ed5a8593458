//! Writing: committing a batch with its watermark, clearing before a rebuild.

use super::guard::guarded;
use super::values::{
    IndexBatch, IndexOp, KeyBytes, META_FORMAT_VERSION, META_NEXT_SESSION, META_WATERMARK, Run,
    Watermark, coalesce, decode_run_entry, event_key, run_value, seal, surface_value, unseal,
};
use super::{
    EVENTS, INDEX_FORMAT_VERSION, Index, META, PROJECTIONS, SESSION_IDS, SESSION_STATE, SESSIONS,
    SURFACE, create_tables, u64_le,
};
use crate::error::IndexError;
use redb::{Durability, ReadableTable};

impl Index {
    /// Writes a batch and the new watermark in one transaction. `durable` selects a durable
    /// redb commit; otherwise the commit survives only if a later durable one follows.
    pub fn commit(
        &self,
        batch: &IndexBatch,
        watermark: Watermark,
        durable: bool,
    ) -> Result<(), IndexError> {
        guarded("events", || self.commit_inner(batch, watermark, durable))
    }

    fn commit_inner(
        &self,
        batch: &IndexBatch,
        watermark: Watermark,
        durable: bool,
    ) -> Result<(), IndexError> {
        let mut txn = self.begin_write()?;
        txn.set_durability(if durable {
            Durability::Immediate
        } else {
            Durability::None
        })?;
        let meta_value = |key: &str, payload: &[u8]| seal(key.as_bytes(), payload);
        let (rows, ops) = batch.squashed();
        {
            let mut meta = txn.open_table(META)?;
            meta.insert(
                META_FORMAT_VERSION,
                meta_value(META_FORMAT_VERSION, &INDEX_FORMAT_VERSION.to_le_bytes()).as_slice(),
            )?;
            meta.insert(
                META_WATERMARK,
                meta_value(META_WATERMARK, &watermark.encode()).as_slice(),
            )?;
            let purged = ops.iter().filter_map(|op| match op {
                IndexOp::Purge { session, .. } => Some(*session),
                _ => None,
            });
            if let Some(max) = rows.iter().map(|r| r.number).chain(purged).max() {
                let stored = match meta.get(META_NEXT_SESSION)? {
                    Some(v) => {
                        let v = unseal("meta", META_NEXT_SESSION.as_bytes(), v.value())?;
                        if v.len() == 8 { u64_le(v) } else { 0 }
                    }
                    None => 0,
                };
                let next = stored.max(max.saturating_add(1));
                if next != stored {
                    meta.insert(
                        META_NEXT_SESSION,
                        meta_value(META_NEXT_SESSION, &next.to_le_bytes()).as_slice(),
                    )?;
                }
            }
            let mut sessions = txn.open_table(SESSIONS)?;
            let mut ids = txn.open_table(SESSION_IDS)?;
            for row in rows {
                let key = KeyBytes::number(row.number);
                sessions.insert(row.number, seal(&key, &row.encode()).as_slice())?;
                ids.insert(row.number, seal(&key, row.header.id.as_bytes()).as_slice())?;
            }
            let mut events = txn.open_table(EVENTS)?;
            let mut seen = std::collections::HashSet::new();
            for (session, run) in coalesce(&batch.events) {
                let mut run = run;
                // The first run of a session in a batch may continue the session's last stored
                // run (same frame, next seq): extend it, so the index does not depend on how
                // the log was cut into commits.
                if seen.insert(session) {
                    let lo = event_key(session, 0);
                    let key = event_key(session, run.first_seq);
                    let prev = match events.range::<&[u8; 16]>(&lo..=&key)?.next_back() {
                        Some(item) => {
                            let (k, v) = item?;
                            Some(decode_run_entry(k.value(), v.value())?.1)
                        }
                        None => None,
                    };
                    if let Some(prev) = prev
                        && prev.location.same_frame(&run.location)
                        && prev.end() == run.first_seq
                        && let Some(count) = prev.count.checked_add(run.count)
                    {
                        run = Run { count, ..prev };
                    }
                }
                events.insert(
                    &event_key(session, run.first_seq),
                    &run_value(session, &run),
                )?;
            }
            let mut surface = txn.open_table(SURFACE)?;
            let mut states = txn.open_table(SESSION_STATE)?;
            let mut projections = txn.open_table(PROJECTIONS)?;
            for op in ops {
                match op {
                    IndexOp::Link {
                        session,
                        seq,
                        prev,
                        next,
                    } => {
                        surface.insert(
                            &event_key(*session, *seq),
                            &surface_value(*session, *seq, *prev, *next),
                        )?;
                    }
                    IndexOp::Unlink { session, seq } => {
                        surface.remove(&event_key(*session, *seq))?;
                    }
                    IndexOp::State {
                        session,
                        covered,
                        bytes,
                    } => {
                        let mut v = Vec::with_capacity(8 + bytes.len());
                        v.extend_from_slice(&covered.to_le_bytes());
                        v.extend_from_slice(bytes);
                        states
                            .insert(*session, seal(&KeyBytes::number(*session), &v).as_slice())?;
                    }
                    IndexOp::Projection {
                        session,
                        key,
                        record,
                    } => {
                        projections.insert(
                            (*session, key.as_str()),
                            seal(&KeyBytes::pair(*session, key), record).as_slice(),
                        )?;
                    }
                    IndexOp::Purge { session, .. } => {
                        projections.retain_in::<(u64, &str), _>(
                            (*session, "")..(*session + 1, ""),
                            |_, _| false,
                        )?;
                        let lo = event_key(*session, 0);
                        let hi = event_key(*session, u64::MAX);
                        events.retain_in::<&[u8; 16], _>(&lo..=&hi, |_, _| false)?;
                        surface.retain_in::<&[u8; 16], _>(&lo..=&hi, |_, _| false)?;
                        states.remove(*session)?;
                        ids.remove(*session)?;
                        sessions.remove(*session)?;
                    }
                }
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Removes every entry (used before a rebuild from the log).
    pub fn clear(&self) -> Result<(), IndexError> {
        guarded("index.redb", || {
            let txn = self.begin_write()?;
            txn.delete_table(META)?;
            each_data_table!(txn, delete_table);
            create_tables(&txn)?;
            txn.commit()?;
            Ok(())
        })
    }
}
