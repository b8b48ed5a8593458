//! The replay section: the fixtures' real dsh logs appended at their flush points.

#[allow(unused_imports)]
use super::*;

pub(crate) fn fixtures_dir() -> PathBuf {
    // This crate sits in `bench/`: the fixtures are beside the repository, two levels up.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/dsh-sessions")
}

pub(crate) fn replay_section(ctx: &mut Ctx<'_>) -> BenchResult<Vec<ReplayRow>> {
    eprintln!("replay of the real dsh logs");
    let dir = fixtures_dir();
    let Some(fixtures) = load_fixture_sessions(&dir)? else {
        let note = format!("replay skipped: {} not found", dir.display());
        eprintln!("  {note}");
        ctx.notes.push(note);
        return Ok(Vec::new());
    };
    // Keep the sessions sessionlog accepts (the others are dsh logs its loader refuses too,
    // or legacy shapes this reader does not convert).
    let check_dir = ctx.base.join("replay-check");
    let store = Store::open(
        &check_dir,
        Config::default().durability(Durability::Buffered),
    )?;
    let mut sessions: Vec<(SessionHeader, Vec<Vec<Event>>)> = Vec::new();
    let mut refused: Vec<(String, String)> = Vec::new();
    for f in fixtures {
        let mut header = f.header.clone();
        header.id = f.name.trim_end_matches(".jsonl").to_owned();
        header.cwd = Some("/home/agent/project".into());
        let result = store
            .create_session(header.clone())
            .map_err(|e| e.to_string())
            .and_then(|_| {
                store
                    .append_batch(&header.id, f.events.clone())
                    .map_err(|e| e.to_string())
            });
        match result {
            Ok(_) if !f.events.is_empty() => {
                let groups = flush_groups(f.events)
                    .into_iter()
                    .map(|g| g.events)
                    .collect();
                sessions.push((header, groups));
            }
            Ok(_) => {}
            Err(e) => {
                // The reason without the session name, so equal reasons group.
                let reason = e.rsplit("refused: ").next().unwrap_or(&e).to_owned();
                refused.push((f.name, reason));
            }
        }
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&check_dir);
    if !refused.is_empty() {
        let mut reasons: Vec<(String, usize)> = Vec::new();
        for (_, reason) in &refused {
            match reasons.iter_mut().find(|(r, _)| r == reason) {
                Some((_, n)) => *n += 1,
                None => reasons.push((reason.clone(), 1)),
            }
        }
        let reasons: Vec<String> = reasons
            .into_iter()
            .map(|(r, n)| format!("{n} x \"{r}\""))
            .collect();
        ctx.notes.push(format!(
            "replay: {} of the fixture logs are not replayed: live `append` refused an event ({}); legacy record shapes that dsh converts on read, or logs it refuses to load; the replay feeds events through live append, not the import path",
            refused.len(),
            reasons.join("; ")
        ));
    }
    if ctx.args.quick {
        sessions.truncate(20);
        ctx.notes
            .push("--quick: replay of the first 20 fixture logs only".into());
    }
    let mut rows = Vec::new();
    for peer in ctx.peers(&PeerKind::ALL) {
        let dir = ctx.base.join(format!("replay-{}", peer.name()));
        let writer: Box<dyn Writer> = if peer == PeerKind::Sessionlog {
            Box::new(SessionlogWriter::open_with(
                &dir,
                Config::default().invariants(sessionlog::session::InvariantMode::Off),
                SessionlogStyle::BufferedFlush,
            )?)
        } else {
            peers::open_writer(peer, &dir, Mode::FlushPoints)?
        };
        let mut events = 0u64;
        let mut writes = 0u64;
        let start = Instant::now();
        for (i, (header, groups)) in sessions.iter().enumerate() {
            writer.create(i, header)?;
            for g in groups {
                events += g.len() as u64;
                writes += 1;
                writer.write(i, g.clone())?;
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        writer.close()?;
        let bytes = dir_bytes(&dir);
        let row = ReplayRow {
            peer: peer.name().into(),
            sessions: sessions.len(),
            events,
            writes,
            seconds,
            events_per_sec: events as f64 / seconds,
            bytes_per_event: bytes as f64 / events.max(1) as f64,
        };
        progress(format!(
            "{:<18} {} sessions, {events} events, {writes} flushes: {:.0} events/s, {:.0} bytes/event on disk",
            row.peer, row.sessions, row.events_per_sec, row.bytes_per_event
        ));
        rows.push(row);
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(rows)
}
