//! Sealing the active segment for an erase ([`Committer::roll_over`], format-spec.md §11.6).

use super::{Active, Committer, sync_or_cut};
use crate::error::{AppendError, WriteFailure};
use crate::index::Watermark;
use crate::log::segment::SEGMENT_HEADER_LEN;

impl Committer {
    /// Seals the active segment (erase, format-spec.md §11.6): as the leader, syncs it,
    /// creates the next segment, and commits the index durably with the watermark at the new
    /// segment's start (with the deferred entries of synced frames), so every frame written
    /// so far lies behind the watermark in a sealed segment. Returns the new segment's number.
    /// Any failure (the sync, the new segment, the index commit) fails the writer like a
    /// failed append.
    pub(crate) fn roll_over(&self) -> Result<u64, AppendError> {
        let mut st = self.become_leader()?;
        let carry = std::mem::take(&mut st.carry);
        let carry_keys = std::mem::take(&mut st.carry_keys);
        st.carry_bytes = 0;
        let mut active = st.active.take();
        let next_segment = st.next_segment;
        drop(st);
        // Held until the index commit below (index commits keep the leaders' order).
        let turn = self.index_turn();
        let created = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if let Err(failure) = &turn {
                return Err(AppendError::PreviousIo(failure.clone()));
            }
            self.sync_deferred_dirs()?;
            let number = match active.as_mut() {
                // An empty active segment (a rollover just made it): the watermark moves
                // to its start, nothing is created.
                Some(old) if old.len == SEGMENT_HEADER_LEN && !old.sealed => {
                    old.verify()?;
                    return Ok((old.number, old.file.clone()));
                }
                Some(old) => {
                    old.verify()?;
                    if old.synced_len < old.len {
                        sync_or_cut(old)?;
                    }
                    old.release()?;
                    next_segment.max(old.number + 1)
                }
                None => next_segment,
            };
            let file = self.segments.create(number)?;
            Ok::<_, AppendError>((number, file))
        }))
        .unwrap_or_else(|_| Err(AppendError::Writer("the writer panicked".to_owned())));
        let (number, file) = match created {
            Ok(v) => v,
            Err(e) => {
                // A failed sync may have dropped pages of frames already served, and a
                // failed create may leave a partial file: the writer fails like a failed
                // append (the fsync-gate rule), and a reopen recovers.
                let failure = WriteFailure::from(e);
                let mut st = self.lock();
                st.leader = false;
                st.active = active;
                st.carry = carry;
                st.carry_keys = carry_keys;
                self.set_failed(&mut st, failure.clone());
                self.wake(&mut st);
                return Err(AppendError::PreviousIo(failure));
            }
        };
        let watermark = Watermark {
            segment: number,
            end: SEGMENT_HEADER_LEN,
            last_frame: u64::MAX,
        };
        // `Index::commit` turns a panic inside redb into `IndexError::Damaged`.
        let committed = self.index.commit(&carry, watermark, true);
        drop(turn);
        let mut st = self.lock();
        st.leader = false;
        st.next_segment = st.next_segment.max(number + 1);
        st.active = Some(Active::fresh(number, file));
        let out = match committed {
            Ok(()) => {
                st.watermark = watermark;
                st.index_dirty = false;
                st.bytes_since_checkpoint = 0;
                for key in &carry_keys {
                    st.retire(key);
                }
                Ok(number)
            }
            Err(e) => {
                let failure = WriteFailure::from(AppendError::from(e));
                self.set_failed(&mut st, failure.clone());
                Err(AppendError::PreviousIo(failure))
            }
        };
        self.wake(&mut st);
        out
    }
}
