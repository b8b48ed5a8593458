//! Creating a session and importing a whole stored session as one operation.

use super::commit::Stage;
use crate::error::{AppendError, ReplayFailure};
use crate::event::{Event, SessionHeader};
use crate::index::{IndexOp, NO_NODE};
use crate::log::record::Record;
use crate::session::{InvariantMode, SessionState};
use std::sync::Arc;

use super::*;

impl Store {
    /// Creates a session with per-session options. Its id must be new and non-empty.
    pub(crate) fn stage_create(
        &self,
        header: SessionHeader,
        options: SessionOptions,
    ) -> Result<Receipt, AppendError> {
        let committer = self.committer()?;
        validate_header(&header)?;
        let mut registry = self.registry_mut();
        let number = registry.next_number();
        let record = Record::CreateSession {
            session: number,
            header: header.clone(),
        };
        let bytes = encode(&record)?;
        self.check_fits(&bytes, "session record")?;
        let rows = registry
            .create(number, header.clone(), None)
            .map_err(|_| AppendError::SessionExists(header.id.clone()))?;
        let lsn = committer.stage(Stage {
            records: vec![(bytes, None)],
            ops: Vec::new(),
            rows,
        })?;
        drop(registry);
        let core = self.core(number);
        {
            let mut core = lock(&core);
            core.state = Some(SessionState::with_invariants(
                options.invariants.unwrap_or(self.config.invariants),
            ));
            core.projections = Some(self.config.projections.fresh());
        }
        self.finish(lsn, 0)
    }

    /// Imports a whole stored session (e.g. read from a dsh file): validates it the way
    /// dsh's loader does (format version, vocabulary, legacy shapes, envelope, surface; not
    /// the turn/step invariants), then writes it as one operation: after a crash at any byte
    /// the session is either absent or complete. Nothing is written when validation fails.
    /// The session's later appends enforce `invariants` (default: the store's setting).
    pub(crate) fn import_stored(
        &self,
        header: SessionHeader,
        events: Vec<Event>,
        invariants: Option<InvariantMode>,
    ) -> Result<Receipt, ImportError> {
        let committer = self.committer()?;
        let id = header.id.clone();
        let loaded = crate::session::load::load_stored(&id, &header, &events, InvariantMode::Off)?;
        let mut state = loaded.state;
        let mut projections = self
            .config
            .projections
            .fold_all(loaded.view.apply(&events).iter())
            .map_err(|e| AppendError::Replay {
                session: id.clone(),
                seq: 0,
                reason: Box::new(ReplayFailure::Fold(e)),
            })?;
        validate_header(&header)?;
        for e in &events {
            let size = e.data.len() as u64;
            if size > self.config.max_event_bytes {
                return Err(ImportError::Append(AppendError::TooLarge {
                    session: id.clone(),
                    kind: e.kind.clone(),
                    size,
                    limit: self.config.max_event_bytes,
                }));
            }
        }
        state.set_invariant_mode(invariants.unwrap_or(self.config.invariants));
        let mut registry = self.registry_mut();
        let number = registry.next_number();
        // Encode (and size-check) every record before anything changes.
        let mut event_records = Vec::with_capacity(events.len());
        for e in events {
            let bytes = self.encode_event_checked(number, &e)?;
            event_records.push((bytes, Some((number, Arc::new(e)))));
        }
        let mut rows = registry
            .create(number, header.clone(), None)
            .map_err(|_| AppendError::SessionExists(id.clone()))?;
        let mut records = vec![(
            encode(&Record::CreateSession {
                session: number,
                header,
            })?,
            None,
        )];
        for (_, e) in &event_records {
            let Some((_, e)) = e else { continue };
            registry
                .event(number, e.seq, e.time, e.data.len())
                .map_err(|err| AppendError::WrongSeq {
                    session: id.clone(),
                    got: e.seq,
                    expected: match err {
                        registry::RegistryError::Gap { expected, .. } => expected,
                        _ => 0,
                    },
                })?;
        }
        let mut row = registry
            .get(number)
            .cloned()
            .ok_or_else(|| AppendError::NoSuchSession(id.clone()))?;
        set_surface(&mut row, &state);
        registry.put(row.clone());
        rows.push(row);
        let nodes = state.surface().nodes();
        let mut ops: Vec<IndexOp> = nodes
            .iter()
            .enumerate()
            .map(|(i, &seq)| IndexOp::Link {
                session: number,
                seq,
                prev: if i == 0 { NO_NODE } else { nodes[i - 1] },
                next: nodes.get(i + 1).copied().unwrap_or(NO_NODE),
            })
            .collect();
        ops.push(IndexOp::State {
            session: number,
            covered: state.next_seq(),
            bytes: state_bytes(&state)?,
        });
        ops.extend(projection_ops(
            &self.config.projections,
            number,
            &mut projections,
        ));
        // The whole session is one operation: the committer writes it as one frame or as
        // several continued frames, which recovery keeps whole or not at all.
        records.extend(event_records);
        let lsn = committer.stage(Stage { records, ops, rows })?;
        drop(registry);
        let core = self.core(number);
        let mut core = lock(&core);
        core.checkpointed = state.next_seq();
        let last = state.next_seq().saturating_sub(1);
        core.state = Some(state);
        core.projections = Some(projections);
        drop(core);
        Ok(self.finish(lsn, last)?)
    }
}
