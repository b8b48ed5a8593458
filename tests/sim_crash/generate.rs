//! The workload's generators and the harness's helpers: events, configurations, families, the
//! log catalog.

use super::*;

/// The time of a fork's `session/end-seed` marker before it was read back.
pub(crate) const END_SEED_TIME_UNKNOWN: i64 = i64::MIN;

/// True when `got` is the event the model holds (a placeholder marker matches any time).
pub(crate) fn same_event(model: &Event, got: &Event) -> bool {
    if model.time == END_SEED_TIME_UNKNOWN && model.kind == "session/end-seed" {
        let mut pinned = model.clone();
        pinned.time = got.time;
        pinned == *got
    } else {
        model == got
    }
}

/// The surface the session rules give `events`: an append adds the event's seq as the last
/// node; a replace removes the nodes from `start` to `end` (by their positions in the
/// surface) and puts the event's seq in their place.
pub(crate) fn model_surface(events: &[Event]) -> Result<Vec<u64>, String> {
    let mut nodes: Vec<u64> = Vec::new();
    for e in events {
        match e.surface_op {
            None => {}
            Some(SurfaceOp::Append) => nodes.push(e.seq),
            Some(SurfaceOp::Replace { start, end }) => {
                let a = nodes.iter().position(|&n| n == start);
                let b = nodes.iter().position(|&n| n == end);
                match (a, b) {
                    (Some(a), Some(b)) if a <= b => {
                        nodes.splice(a..=b, [e.seq]);
                    }
                    _ => {
                        return Err(format!(
                            "model: replace {start}..{end} at seq {} does not apply to {nodes:?}",
                            e.seq
                        ));
                    }
                }
            }
        }
    }
    Ok(nodes)
}

/// True when the last `turn/start` or `turn/end` at or before `boundary` is a start: a fork
/// there ends inside an open turn (`OPEN_TURN`).
pub(crate) fn open_turn_at(events: &[Event], boundary: usize) -> bool {
    events[..=boundary]
        .iter()
        .rev()
        .find(|e| e.kind == "turn/start" || e.kind == "turn/end")
        .is_some_and(|e| e.kind == "turn/start")
}

pub(crate) const MAIN: Family = Family {
    options: SimOptions {
        reorder: true,
        volatile_dir_entries: true,
        volatile_mkdir: false,
        eio_drops_cache: true,
    },
    durabilities: &[0, 1],
    faults: true,
    dir_eio: false,
    continue_after_fault: false,
    restarts: false,
    flips: true,
    new_ops: false,
    multiframe: false,
    index_damage: false,
    lifecycle: true,
    gc_sweep: false,
    gc_every_op: false,
};

/// Buffered mode with unsynced writes persisting in order (`buffered_survives_reordered_crashes`
/// lets them reorder).
pub(crate) const BUFFERED_IN_ORDER: Family = Family {
    options: SimOptions {
        reorder: false,
        volatile_dir_entries: true,
        volatile_mkdir: false,
        eio_drops_cache: true,
    },
    durabilities: &[2],
    faults: true,
    dir_eio: false,
    continue_after_fault: false,
    restarts: false,
    flips: true,
    new_ops: false,
    multiframe: false,
    index_damage: false,
    lifecycle: true,
    gc_sweep: false,
    gc_every_op: false,
};

/// Imports and batches spanning many frames and segments, with ENOSPC / EIO / EFBIG /
/// full-disk faults and crashes landing inside them. Flips are left to the other families (a
/// flip that truncates the last frame of a multi-frame operation takes the whole operation,
/// which the flip check's bookkeeping does not model).
pub(crate) const MULTIFRAME: Family = Family {
    options: SimOptions {
        reorder: true,
        volatile_dir_entries: true,
        volatile_mkdir: false,
        eio_drops_cache: true,
    },
    durabilities: &[0, 1],
    faults: true,
    dir_eio: false,
    continue_after_fault: false,
    restarts: false,
    flips: false,
    new_ops: true,
    multiframe: true,
    index_damage: false,
    lifecycle: true,
    gc_sweep: false,
    gc_every_op: false,
};

pub(crate) fn scratch_dir() -> tempfile::TempDir {
    // tmpfs makes the index's real fsyncs free; fall back to the default temp dir.
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().unwrap()
}

pub(crate) fn filler(rng: &mut SimRng, len: usize) -> String {
    if rng.chance(1, 2) {
        // Compressible.
        "abcdefgh".repeat(len / 8 + 1)[..len].to_owned()
    } else {
        (0..len)
            .map(|_| char::from(b'a' + rng.below(26) as u8))
            .collect()
    }
}

pub(crate) fn gen_event(rng: &mut SimRng, seq: u64, max_text: usize) -> Event {
    let size = (match rng.below(20) {
        0..=9 => rng.below(40),
        10..=15 => rng.range(100, 700),
        16..=18 => rng.range(1000, 5000),
        _ => rng.range(5000, 20_000),
    } as usize)
        .min(max_text);
    let time = rng.range(0, 1 << 50) as i64 - (1 << 48);
    let text = filler(rng, size);
    match rng.below(7) {
        0 if seq > 0 => {
            let mut e = Event::new(
                "user/message",
                seq,
                time,
                format!(
                    r#"{{"id":"m{seq}","role":"user","content":[{{"type":"text","text":"{text}"}}],"source":{{"kind":"user"}}}}"#
                ),
            )
            .with_surface_op(SurfaceOp::Append);
            if rng.chance(1, 2) {
                e = e.with_sources(vec![rng.below(seq)]);
            }
            e
        }
        1 => Event::new("turn/start", seq, time, format!(r#"{{"turn":{seq}}}"#)),
        // Closes the open turn (forks are refused inside one).
        3 => Event::new(
            "turn/end",
            seq,
            time,
            format!(r#"{{"turn":{},"reason":{{"kind":"completed"}}}}"#, seq + 1),
        ),
        2 => Event::new(
            "tool/call",
            seq,
            time,
            format!(r#"{{"callId":"c{seq}","arguments":"{text}"}}"#),
        ),
        _ => Event::new(
            "assistant/chunk",
            seq,
            time,
            format!(
                r#"{{"chunk":{{"type":"text-delta","text":"{text}"}},"n":[1,2.5,-3e7,null,true]}}"#
            ),
        ),
    }
}

pub(crate) fn make_config(rng: &mut SimRng, sim: &Arc<SimFs>, family: &Family) -> Config {
    let durability = match rng.pick(family.durabilities).copied().unwrap_or(0) {
        0 => Durability::Sync,
        // Long enough that the timer never fires inside a scenario: the scenario stays
        // deterministic, and durability comes from flush, checkpoint and close.
        1 => Durability::Group {
            max_delay: Duration::from_secs(3600),
        },
        2 => Durability::Buffered,
        // The background leader syncs within a millisecond: it races the workload, so these
        // scenarios do not replay exactly (the checks hold for any interleaving).
        _ => Durability::Group {
            max_delay: Duration::from_millis(1),
        },
    };
    let mut config = Config::default()
        .durability(durability)
        .segment_bytes(*rng.pick(&[4096, 8192, 16_384, 65_536]).unwrap())
        .batch_bytes(*rng.pick(&[256, 4096, 65_536]).unwrap())
        .compress_threshold(*rng.pick(&[64, 512, 1 << 20]).unwrap())
        .checkpoint_bytes(*rng.pick(&[4096, 1 << 40]).unwrap())
        // Few deferred index entries: most durable batches commit theirs after their
        // acknowledgement, while the next batch is written.
        .deferred_index_entries(*rng.pick(&[1, 8, 4096]).unwrap())
        // Random workloads do not follow dsh's turn/step invariants (surface rules apply).
        .invariants(InvariantMode::Off)
        .with_fs(sim.clone());
    if family.multiframe {
        // Frames of 4-64 KiB: an import or batch of a few dozen events of up to a few KiB
        // spans many frames, and (segments of 4-64 KiB) several segments.
        let frame = *rng.pick(&[4096, 8192, 16_384, 65_536]).unwrap();
        config.max_event_bytes = u64::from(frame / 2);
        // Diagnostic: `SESSIONLOG_SIM_BIG_FRAMES=1` keeps the default frame limit (the same
        // workload, but every operation fits one frame), to tell a harness problem from the
        // engine's frame splitting.
        if std::env::var_os("SESSIONLOG_SIM_BIG_FRAMES").is_none() {
            config.max_frame_bytes = frame;
        }
    }
    config
}

/// The longest filler text an event of the scenario may carry (its JSON stays below
/// `max_event_bytes`).
pub(crate) fn max_text(config: &Config) -> usize {
    usize::try_from(config.max_event_bytes.saturating_sub(400)).unwrap_or(usize::MAX)
}

/// Reads the log image the simulator holds: frame boundaries and the events in each frame.
pub(crate) fn catalog(sim: &SimFs, seg_dir: &Path) -> (Vec<FrameInfo>, Vec<u64>) {
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut frames = Vec::new();
    let mut numbers: Vec<u64> = sessionlog::fs::FileSystem::list(sim, seg_dir)
        .unwrap_or_default()
        .iter()
        .filter_map(|n| segment::parse_file_name(n))
        .collect();
    numbers.sort_unstable();
    let limits = FrameLimits::default();
    for &n in &numbers {
        let bytes = sim
            .read_file(&segment::path(seg_dir, n))
            .unwrap_or_default();
        let mut at = SEGMENT_HEADER_LEN as usize;
        while at + FRAME_HEADER_LEN <= bytes.len() {
            if bytes[at..].iter().all(|&b| b == 0) {
                break; // the zero tail a live writer preallocated (format-spec.md §2)
            }
            let Ok((header, payload)) = sessionlog::log::frame::decode(&bytes[at..], &limits)
            else {
                break;
            };
            let mut events = Vec::new();
            let mut creates = Vec::new();
            let mut deletes = Vec::new();
            for (_, r) in Record::decode_all(&payload).unwrap_or_default() {
                match r {
                    Record::CreateSession { session, header } => {
                        creates.push(header.id.clone());
                        names.insert(session, header.id);
                    }
                    Record::ForkSession {
                        session, header, ..
                    } => {
                        creates.push(header.id.clone());
                        names.insert(session, header.id);
                    }
                    Record::DeleteSession { session } => {
                        deletes.push(names.get(&session).cloned().unwrap_or_default())
                    }
                    Record::Event { session, event } => {
                        events.push((names.get(&session).cloned().unwrap_or_default(), event.seq))
                    }
                    // Part of its session's creation (the record before it).
                    Record::Verbatim { .. } => {}
                }
            }
            frames.push(FrameInfo {
                segment: n,
                offset: at as u64,
                len: header.frame_len(),
                events,
                creates,
                deletes,
            });
            at += header.frame_len() as usize;
        }
    }
    (frames, numbers)
}
