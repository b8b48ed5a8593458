//! `Store::verify`: every frame of the log, and the index cross-checked against an index
//! rebuilt from the log (format-spec §7).

use super::*;
use crate::error::ReadError;
use crate::session::error::InvariantViolation;
use crate::session::invariants::Trace;

impl Store {
    /// A watermark as the point of the log it names, `(segment, end)`: the start of a
    /// segment with no frame covered yet (an erase sealed the segment before it, §11.6) is
    /// the end of the segment before it (of the last one holding a frame), where an index
    /// rebuilt from the log puts it.
    fn log_point(&self, value: &[u8]) -> Vec<u8> {
        let word = |i: usize| {
            value
                .get(i..i + 8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_le_bytes)
        };
        let (Some(mut segment), Some(mut end), Some(last)) = (word(0), word(8), word(16)) else {
            return value.to_vec();
        };
        if last == u64::MAX {
            while end == SEGMENT_HEADER_LEN
                && segment > 1
                && let Ok(len) = self.segments.file(segment - 1).and_then(|f| f.len())
            {
                segment -= 1;
                end = len;
            }
        }
        [segment.to_le_bytes(), end.to_le_bytes()].concat()
    }

    /// Reads every frame of the log and checks it (CRC, record decoding, seq contiguity, and
    /// that the index points at each event). Reports every problem found.
    pub fn verify(&self) -> Result<VerifyReport, OpenError> {
        if self.view.is_some() {
            self.fold_behind(None);
        }
        let numbers = self.segments.list().map_err(|source| OpenError::Io {
            path: self.segments.dir().to_path_buf(),
            source,
        })?;
        let mut report = VerifyReport::default();
        let mut next: HashMap<u64, Seq> = HashMap::new();
        // Sessions whose seqs jump past events a damaged frame held: the first seq missing,
        // the first and the last seq read while the session did not continue, and the frame
        // where the jump was seen. What a salvage dropped, if a bad frame is before;
        // `open_cuts` until an event continues the session (one appended after the salvage).
        let mut open_cuts: HashMap<u64, Cut> = HashMap::new();
        let mut cuts: Vec<(u64, Cut)> = Vec::new();
        let index = &self.index;
        let mut problems = Vec::new();
        // Failed index lookups, one per distinct error: a damaged index fails every lookup
        // the same way, and one line says it.
        let mut lookup_failures: Vec<LookupFailure> = Vec::new();
        let mut visit = |frame: scan::ScannedFrame| -> Result<(), OpenError> {
            report.frames += 1;
            if frame.dropped {
                // Part of an operation a damaged frame interrupted (reported as bad).
                return Ok(());
            }
            match Record::decode_all(&frame.payload) {
                Err(e) => problems.push(format!("{}: records do not decode: {e}", frame.position)),
                Ok(records) => {
                    // The events of this frame by record offset, to check where runs start.
                    let events_at: HashMap<u32, (u64, Seq)> = records
                        .iter()
                        .filter_map(|(offset, r)| match r {
                            Record::Event { session, event } => {
                                Some((*offset, (*session, event.seq)))
                            }
                            _ => None,
                        })
                        .collect();
                    // After a compacted segment, a session's records may follow a creation
                    // a GC dropped (format-spec.md §11.3).
                    let compacted = self
                        .segments
                        .first_compacted()
                        .is_some_and(|c| c <= frame.position.segment);
                    for (record_offset, record) in records {
                        match record {
                            Record::Event { session, .. }
                                if compacted && !next.contains_key(&session) =>
                            {
                                report.events += 1;
                            }
                            Record::CreateSession { session, .. } => {
                                next.insert(session, 0);
                            }
                            Record::ForkSession {
                                session,
                                seed_length,
                                ..
                            } => {
                                next.insert(session, seed_length);
                            }
                            Record::DeleteSession { session } => {
                                next.remove(&session);
                            }
                            // Recovery checks its place (after its session's creation).
                            Record::Verbatim { .. } => {}
                            Record::Event { session, event } => {
                                report.events += 1;
                                let expected = next.entry(session).or_insert(0);
                                // Recovery in salvage mode drops every event that does not
                                // continue its session: `expected` stays where the gap begins
                                // until an event with that seq comes.
                                if let Some(c) = open_cuts.get_mut(&session) {
                                    if event.seq != *expected {
                                        c.last = c.last.max(event.seq);
                                        continue;
                                    }
                                    if let Some(c) = open_cuts.remove(&session) {
                                        cuts.push((session, c));
                                    }
                                } else if event.seq > *expected {
                                    open_cuts.insert(
                                        session,
                                        Cut {
                                            missing: *expected,
                                            first: event.seq,
                                            last: event.seq,
                                            at: frame.position,
                                        },
                                    );
                                    continue;
                                }
                                if event.seq != *expected {
                                    problems.push(format!(
                                        "{}: session number {session} seq {} (expected {})",
                                        frame.position, event.seq, expected
                                    ));
                                }
                                *expected = event.seq + 1;
                                let here = Location {
                                    segment: frame.position.segment,
                                    frame_offset: frame.position.offset,
                                    frame_len: frame.frame_len,
                                    record_offset,
                                };
                                // The run holding the event must be in this frame and start
                                // at an earlier (or this) record that is the run's first
                                // event, so the walk from it reaches this record.
                                let right = |r: &Run| {
                                    r.location.same_frame(&here)
                                        && r.location.record_offset <= record_offset
                                        && events_at.get(&r.location.record_offset)
                                            == Some(&(session, r.first_seq))
                                };
                                let live = self.registry().get(session).is_some();
                                match index.run(session, event.seq) {
                                    Ok(Some(r)) if right(&r) => {}
                                    Ok(_) if !live => {}
                                    Ok(other)
                                        if !self.overlay.contains_key(&(session, event.seq)) =>
                                    {
                                        if self
                                            .committer
                                            .as_ref()
                                            .and_then(|c| c.pending(session, event.seq))
                                            .is_none()
                                        {
                                            let found = match other {
                                                None => "missing".to_owned(),
                                                Some(r) => format!(
                                                    "a run of seqs {}..{} at {} record offset {}",
                                                    r.first_seq,
                                                    r.end(),
                                                    r.location.position(),
                                                    r.location.record_offset
                                                ),
                                            };
                                            let name = self.registry().get(session).map_or_else(
                                                || format!("session number {session}"),
                                                |r| format!("session {:?}", r.header.id),
                                            );
                                            problems.push(format!(
                                                "{}: the index entry for {name} seq {} is {found}, not this frame",
                                                frame.position, event.seq
                                            ));
                                        }
                                    }
                                    Ok(_) => {}
                                    Err(e) => {
                                        let error = e.to_string();
                                        match lookup_failures.iter_mut().find(|f| f.error == error)
                                        {
                                            Some(f) => f.count += 1,
                                            None => lookup_failures.push(LookupFailure {
                                                error,
                                                at: frame.position,
                                                session,
                                                seq: event.seq,
                                                count: 1,
                                            }),
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            Ok(())
        };
        let start = LogPosition {
            segment: numbers.first().copied().unwrap_or(1),
            offset: SEGMENT_HEADER_LEN,
        };
        let acked_before = self.settled_acked()?;
        let scan = scan::scan(
            &self.segments,
            &numbers,
            start,
            RecoveryMode::SalvageSkippingBadFrames,
            &self.limits,
            &mut visit,
        )?;
        for LookupFailure {
            error,
            at,
            session,
            seq,
            count,
        } in lookup_failures
        {
            let name = self.registry().get(session).map_or_else(
                || format!("session number {session}"),
                |r| format!("session {:?}", r.header.id),
            );
            let more = if count > 1 {
                format!(" (and {} more events the same way)", count - 1)
            } else {
                String::new()
            };
            problems.push(format!(
                "{at}: the index lookup of {name} seq {seq} failed{more}: {error}"
            ));
        }
        cuts.extend(open_cuts);
        cuts.sort_unstable_by_key(|(_, c)| c.at);
        for (session, cut) in cuts {
            let Cut {
                missing,
                first,
                last,
                at,
            } = cut;
            let name = self.registry().get(session).map_or_else(
                || format!("session number {session}"),
                |r| r.header.id.clone(),
            );
            // The index still holds the events after the gap (no salvage ran: the store
            // opened normally): only the damaged frame's own events are lost to reads.
            let indexed_after = matches!(
                self.index.run(session, first),
                Ok(Some(r)) if r.location.position() == at
            );
            match scan.skipped.iter().rev().find(|b| b.position < at) {
                Some(bad) if indexed_after => problems.push(format!(
                    "{}: session {name:?} seqs {missing}..={} are in this damaged frame and cannot be read; the index still holds the {} after them (..={last}): `sessionlog recover --salvage` would drop them all, so restore a backup if you have one",
                    bad.position,
                    first.saturating_sub(1).max(missing),
                    last.saturating_sub(first) + 1
                )),
                Some(bad) => report.salvaged.push(Salvaged {
                    session: name,
                    first: missing,
                    dropped_from: first,
                    last,
                    damaged: bad.position,
                }),
                None => problems.push(format!(
                    "{at}: session {name:?} skips from seq {missing} to {first} (seqs up to {last} do not continue it), and no damaged frame before them explains it"
                )),
            }
        }
        // Comparing the index with one rebuilt from the log means something only when every
        // frame reads; bad frames are reported above.
        if scan.skipped.is_empty() {
            problems.extend(self.verify_index());
        }
        report.problems = problems;
        report.bad_frames = scan.skipped;
        // A writable open already compared the log's end with `ACKED` (and refused or
        // salvaged); a read-only store compares here, when no writer changed it meanwhile.
        let log_end = scan.torn_tail.as_ref().map_or(scan.end, |t| t.position);
        if self.committer.is_none()
            && let Some(published) = acked_before
            && self.settled_acked()? == Some(published)
            && recovery::lost_acknowledged(&self.segments, &numbers, published, log_end)
        {
            report.problems.push(format!(
                "the log ends at {log_end}, before {published}, up to which its last writer had published every frame as durable: acknowledged frames are missing (the last segment was truncated or removed, or the disk lost synced data)"
            ));
            report.acknowledged_lost = Some(AcknowledgedLoss {
                end: log_end,
                published,
            });
        }
        if let Some(t) = scan.torn_tail {
            if self.committer.is_none() && report.acknowledged_lost.is_none() {
                report.pending_cut = Some(t);
            } else {
                report.bad_frames.push(t);
            }
        }
        Ok(report)
    }

    /// The position the last writer published in `ACKED`, when no writer holds the store
    /// (a live writer moves it while a reader scans); `None` when there is none to trust.
    fn settled_acked(&self) -> Result<Option<LogPosition>, OpenError> {
        if self.committer.is_some() {
            return Ok(None);
        }
        live::published_without_writer(&self.dir)
    }

    /// Cross-checks the index against the log (format-spec.md §7): redb's integrity check on
    /// an in-memory copy of `index.redb` (the file is never modified), then every entry of the
    /// index as this store sees it (brought up to the log's end the way recovery does) against
    /// an index rebuilt in memory from the log: meta, session rows, ids, runs, and each
    /// session's surface links against a replay of its events. One line per disagreement.
    fn verify_index(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let advice = "run `sessionlog recover` to rebuild the index from the log";
        if let Some(c) = &self.committer
            && let Err(e) = c.commit(c.staged_lsn(), Goal::Written, false)
        {
            problems.push(format!(
                "cannot bring the index up to date to check it: {e}"
            ));
            return problems;
        }
        let catch_up = |index: &Index| {
            recovery::recover(recovery::RecoveryInput {
                store_dir: &self.dir,
                segments: &self.segments,
                index,
                mode: self.config.recovery,
                limits: self.limits,
                writable: false,
                index_writable: true,
                acked: None,
            })
        };
        let path = self.dir.join(INDEX_FILE);
        let mut copy = None;
        // A live writer's file is consistent only at its durable commits (later non-durable
        // ones may sit half in redb's cache): the file-level check is for read-only stores
        // (`sessionlog verify`) and `recover`; a writer's index is compared entry by entry.
        let live_writer = self.committer.is_some() && self.index.is_writable();
        if path.exists() && !live_writer {
            match Index::copy_in_memory(&path) {
                Ok(mut c) => match c.check_integrity() {
                    Ok(true) => copy = Some(c),
                    Ok(false) => problems.push(format!(
                        "index.redb: redb's integrity check found damaged pages; {advice}"
                    )),
                    Err(e) => problems.push(format!("index.redb: {e}")),
                },
                Err(e) => problems.push(format!("index.redb: {e}")),
            }
        }
        // The index under test: this store's own when it is current (read-write, or rebuilt
        // in memory), else the copy of the file brought to the log's end.
        let caught_up;
        let tested: &Index = if self.index.is_writable() {
            &self.index
        } else {
            let Some(c) = copy else {
                return problems;
            };
            if let Err(e) = catch_up(&c) {
                problems.push(format!(
                    "index.redb: recovery over a copy of it failed: {e}"
                ));
                return problems;
            }
            caught_up = c;
            &caught_up
        };
        let truth = match Index::in_memory()
            .map_err(OpenError::from)
            .and_then(|fresh| {
                catch_up(&fresh)?;
                Ok(fresh)
            }) {
            Ok(t) => t,
            Err(e) => {
                problems.push(format!(
                    "cannot rebuild an index from the log to compare with: {e}"
                ));
                return problems;
            }
        };
        let (ours, theirs) = match (tested.dump(), truth.dump()) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => {
                problems.push(e.to_string());
                return problems;
            }
        };
        // Surface fields of rows are compared below against a replay; the rebuilt index has
        // none (they come from the catch-up after a read-write open).
        let comparable = |entries: &[crate::index::DumpEntry]| {
            let mut out = std::collections::BTreeMap::new();
            for (table, key, value) in entries {
                let value = match table.as_str() {
                    "surface" | "session_state" | "projections" => continue,
                    "sessions" => match SessionRow::decode(value) {
                        Ok(mut row) => {
                            row.surface_covered = 0;
                            row.surface_head = NO_NODE;
                            row.surface_tail = NO_NODE;
                            row.surface_len = 0;
                            row.replace_generation = 0;
                            row.encode()
                        }
                        Err(_) => value.clone(),
                    },
                    "meta" if key == b"watermark" => self.log_point(value),
                    _ => value.clone(),
                };
                out.insert((table.clone(), key.clone()), value);
            }
            out
        };
        let (a, b) = (comparable(&ours), comparable(&theirs));
        for (k, v) in &a {
            match b.get(k) {
                Some(w) if w == v => {}
                Some(w) => problems.push(format!(
                    "index disagrees with the log at {} key {}: the index holds {}, the log gives {}; {advice}",
                    k.0, hex_bytes(&k.1), describe(&k.0, &k.1, v), describe(&k.0, &k.1, w)
                )),
                None => problems.push(format!(
                    "index disagrees with the log at {} key {}: the index holds {}, the log gives nothing; {advice}",
                    k.0, hex_bytes(&k.1), describe(&k.0, &k.1, v)
                )),
            }
        }
        for (k, w) in &b {
            if !a.contains_key(k) {
                problems.push(format!(
                    "index disagrees with the log at {} key {}: the index lacks {}; {advice}",
                    k.0,
                    hex_bytes(&k.1),
                    describe(&k.0, &k.1, w)
                ));
            }
        }
        // Surface links: each session's list, as far as its row says it covers, against a
        // replay of the events before that point.
        for (table, _, value) in &ours {
            if table != "sessions" {
                continue;
            }
            let Ok(row) = SessionRow::decode(value) else {
                continue;
            };
            if row.is_deleted() || row.surface_covered == 0 {
                continue;
            }
            let links = match tested.surface_links(row.number) {
                Ok(l) => l,
                Err(e) => {
                    problems.push(e.to_string());
                    continue;
                }
            };
            if row.is_verbatim() {
                // A verbatim session has no surface table.
                if !links.is_empty() || row.surface_len != 0 || row.surface_head != NO_NODE {
                    problems.push(format!(
                        "index disagrees with the log at surface of session \"{}\" (number {}): a verbatim session has no surface, the index lists {} node(s); {advice}",
                        row.header.id,
                        row.number,
                        links.len().max(row.surface_len as usize)
                    ));
                }
                continue;
            }
            let state = match self.replay(&row, row.surface_covered) {
                Ok(s) => s,
                Err(e) => {
                    problems.push(format!(
                        "session \"{}\": replaying its events to check the surface failed: {e}",
                        row.header.id
                    ));
                    continue;
                }
            };
            let nodes = state.surface().nodes();
            let expected: Vec<(Seq, Seq, Seq)> = nodes
                .iter()
                .enumerate()
                .map(|(i, &seq)| {
                    let prev = if i == 0 { NO_NODE } else { nodes[i - 1] };
                    (seq, prev, nodes.get(i + 1).copied().unwrap_or(NO_NODE))
                })
                .collect();
            let mut got = links;
            got.sort_unstable();
            let mut want = expected;
            want.sort_unstable();
            let mut summary = row.clone();
            set_surface(&mut summary, &state);
            if got != want
                || (
                    row.surface_head,
                    row.surface_tail,
                    row.surface_len,
                    row.replace_generation,
                ) != (
                    summary.surface_head,
                    summary.surface_tail,
                    summary.surface_len,
                    summary.replace_generation,
                )
            {
                problems.push(format!(
                    "index disagrees with the log at surface of session \"{}\" (number {}): the index lists {} node(s), a replay of seqs below {} gives {}; {advice}",
                    row.header.id,
                    row.number,
                    got.len(),
                    row.surface_covered,
                    want.len()
                ));
            }
        }
        problems
    }

    /// A session's state after its events below `upto`, loaded the way a rebuilt index loads
    /// it (dsh's load rules over the stored events).
    fn replay(&self, row: &SessionRow, upto: Seq) -> Result<SessionState, String> {
        let mut cache = FrameCache::default();
        let mut events = Vec::with_capacity(upto.min(1 << 20) as usize);
        for seq in 0..upto {
            let mut event = self
                .read_resolved(row.number, seq, &mut cache)
                .map_err(|e| format!("seq {seq}: {e}"))?;
            if !crate::session::known::is_known_event_type(&event.kind) {
                event.ignorable = true;
            }
            events.push(event);
        }
        crate::session::load::load_stored(&row.header.id, &row.header, &events, InvariantMode::Off)
            .map(|l| l.state)
            .map_err(|e| e.to_string())
    }
}

fn hex_bytes(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// An index entry in words, for verify's report.
fn describe(table: &str, key: &[u8], value: &[u8]) -> String {
    match table {
        "events" if key.len() == 16 && value.len() == crate::index::RUN_LEN => {
            let mut k = [0u8; 8];
            k.copy_from_slice(&key[0..8]);
            let session = u64::from_be_bytes(k);
            k.copy_from_slice(&key[8..16]);
            let first = u64::from_be_bytes(k);
            let mut v = [0u8; crate::index::RUN_LEN];
            v.copy_from_slice(value);
            match Run::decode(first, &v) {
                Ok(r) => format!(
                    "a run of session number {session} seqs {}..{} at {} record offset {}",
                    r.first_seq,
                    r.end(),
                    r.location.position(),
                    r.location.record_offset
                ),
                Err(e) => e.to_string(),
            }
        }
        "sessions" => match SessionRow::decode(value) {
            Ok(r) => format!(
                "session {:?} (number {}): {} event(s), {} data byte(s), last time {}, parent {}, seed {}, children {}, flags {}",
                r.header.id,
                r.number,
                r.next_seq,
                r.data_bytes,
                r.last_time,
                r.parent,
                r.seed_len,
                r.children,
                r.flags
            ),
            Err(e) => e.to_string(),
        },
        "meta" => format!("bytes {}", hex_bytes(value)),
        "session_ids" => format!("{:?}", String::from_utf8_lossy(value)),
        _ => format!("{} byte(s)", value.len()),
    }
}

/// The result of [`Store::verify`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Frames read.
    pub frames: u64,
    /// Events read.
    pub events: u64,
    /// Frames that failed their checks, with location and reason.
    pub bad_frames: Vec<BadFrame>,
    /// Other problems (seq gaps, index disagreements), one line each.
    pub problems: Vec<String>,
    /// A torn tail that a read-only store found and the next writable open cuts (a crash or a
    /// failed write left it; nothing in it was acknowledged). Not a problem.
    pub pending_cut: Option<BadFrame>,
    /// The log ends before the position its last writer published as durable (`ACKED`):
    /// acknowledged frames are missing (also one line of `problems`). Checked by a
    /// read-only store with no writer alive; a writable open refuses such a log
    /// ([`OpenError::AcknowledgedLost`]) unless it salvages.
    pub acknowledged_lost: Option<AcknowledgedLoss>,
    /// Events still in the log that the index does not hold because they follow a damaged
    /// frame's gap in their session: what `recover --salvage` dropped (and reported). Not a
    /// problem of their own; the damaged frame stays in `bad_frames`.
    pub salvaged: Vec<Salvaged>,
}

/// Index lookups that failed with one error while [`Store::verify`] read the log.
#[derive(Debug)]
struct LookupFailure {
    /// The error, as text.
    error: String,
    /// The frame of the first event whose lookup failed so.
    at: LogPosition,
    /// That event's session number and seq.
    session: u64,
    seq: Seq,
    /// How many lookups failed so.
    count: u64,
}

/// A session whose seqs jump while [`Store::verify`] reads the log (see `open_cuts`).
#[derive(Debug, Clone, Copy)]
struct Cut {
    /// The first seq missing.
    missing: Seq,
    /// The first seq read after the jump.
    first: Seq,
    /// The last seq read while the session did not continue.
    last: Seq,
    /// The frame where the jump was seen.
    at: LogPosition,
}

/// A session's run of events that a salvage dropped after a damaged frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvaged {
    /// The session's id (`session number N` when the log lost its creation).
    pub session: String,
    /// The first seq the index lacks (where the damaged frame's gap begins).
    pub first: Seq,
    /// The first seq read after the gap: the salvage dropped `dropped_from..=last`, and the
    /// seqs from `first` up to it were in the damaged frame (or in frames it cut off).
    pub dropped_from: Seq,
    /// The last seq of the session read after the gap.
    pub last: Seq,
    /// The damaged frame before the gap.
    pub damaged: LogPosition,
}

impl VerifyReport {
    /// True when nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.bad_frames.is_empty() && self.problems.is_empty()
    }
}

/// What [`Session::check_invariants`] found.
#[derive(Debug)]
pub struct InvariantCheck {
    /// Events checked.
    pub events: u64,
    /// Every violation, in seq order.
    pub violations: Vec<InvariantViolation>,
    /// Where reading stopped early, and why (the events before it were checked).
    pub stopped: Option<(Seq, ReadError)>,
}

impl Session<'_> {
    /// Replays the session's events through dsh's turn/step/tool invariants (the rules
    /// [`InvariantMode`] enforces on append) and reports every violation, as `sessionlog
    /// verify` does. `progress` is called with the number of events checked so far, every 4,096
    /// events and at the end.
    pub fn check_invariants(&self, progress: &mut dyn FnMut(u64)) -> InvariantCheck {
        let mut check = InvariantCheck {
            events: 0,
            violations: Vec::new(),
            stopped: None,
        };
        let events = match self.events(0..self.len()) {
            Ok(events) => events,
            Err(e) => {
                check.stopped = Some((0, e));
                return check;
            }
        };
        let mut trace = Trace::new();
        for (seq, e) in (0..).zip(events) {
            let e = match e {
                Ok(e) => e,
                Err(err) => {
                    check.stopped = Some((seq, err));
                    break;
                }
            };
            let (t, violation) = trace.check(&e);
            check.violations.extend(violation);
            trace.commit(t);
            check.events += 1;
            if check.events.is_multiple_of(4096) {
                progress(check.events);
            }
        }
        progress(check.events);
        check
    }
}

impl Store {
    /// True when `dir` looks like a store: it holds `segments/` or `index.redb` (what a
    /// read-only open requires; a writable open creates both).
    pub fn is_store(dir: impl AsRef<Path>) -> bool {
        let dir = dir.as_ref();
        [SEGMENTS_DIR, INDEX_FILE]
            .iter()
            .any(|name| std::fs::symlink_metadata(dir.join(name)).is_ok())
    }
}
