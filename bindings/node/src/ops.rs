//! What each call does, on an opened store, with results as JSON text.

use std::fmt::Write as _;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Deserialize;
use sessionlog::{BackgroundGc, Config, Durability, Event, GcOptions, InvariantMode, Store};

use crate::errors::Failure;
use crate::wire;

/// The native store: empty until opened, emptied by close.
pub struct Inner {
    pub open: RwLock<Option<Opened>>,
}

/// An opened store.
pub struct Opened {
    store: Arc<Store>,
    /// The background segment GC (`gcIntervalMs`), stopped before the store closes.
    gc: Option<BackgroundGc>,
    /// Qualifies every revision: the store directory's identity (device, inode, birth time),
    /// so two stores never share a revision and a reopened store keeps its revisions.
    tag: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Options {
    durability: Option<String>,
    group_delay_ms: Option<u64>,
    read_only: Option<bool>,
    invariants: Option<String>,
    repair_on_resume: Option<bool>,
    gc_interval_ms: Option<u64>,
    segment_bytes: Option<u64>,
    deferred_index_entries: Option<usize>,
}

const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

fn seq_arg(name: &str, v: f64) -> Result<u64, Failure> {
    if v.fract() != 0.0 || !(0.0..=MAX_SAFE).contains(&v) {
        return Err(Failure::new(
            "INVALID_ARGUMENT",
            format!("{name} must be a non-negative safe integer, got {v}"),
        ));
    }
    Ok(v as u64)
}

fn store_tag(dir: &std::path::Path) -> String {
    let mut tag = String::from("dir");
    if let Ok(meta) = std::fs::metadata(dir) {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let _ = write!(tag, ":{}:{}", meta.dev(), meta.ino());
        }
        let born = meta
            .created()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let _ = write!(tag, ":{born}");
    }
    tag
}

impl Opened {
    /// A session's revision: the store's identity, the session's id and incarnation (a
    /// deleted and recreated id gets a new one) and its length (every append and repair adds
    /// events). Stable across reopens; changes on every write to the session.
    fn revision(&self, id: &str, len: u64) -> String {
        let incarnation = self.store.session_info(id).map_or(0, |i| i.incarnation);
        format!(
            "sessionlog:{}:session:{}:{id}:n:{incarnation}:len:{len}",
            self.tag,
            id.len()
        )
    }

    fn events_json(&self, out: &mut String, id: &str, from: u64, to: u64) -> Result<(), Failure> {
        let mut events: Vec<Event> =
            Vec::with_capacity(to.saturating_sub(from).min(1 << 16) as usize);
        for e in self.store.events(id, from..to)? {
            events.push(e?);
        }
        wire::write_events(out, &events)
    }

    fn header_json(&self, out: &mut String, id: &str) -> Result<(), Failure> {
        let h = self.store.header(id).ok_or_else(|| {
            Failure::new(
                "SESSION_NOT_FOUND",
                format!("session {id:?} does not exist"),
            )
        })?;
        wire::write_header(out, &h);
        Ok(())
    }

    fn len(&self, id: &str) -> Result<u64, Failure> {
        self.store.len(id).ok_or_else(|| {
            Failure::new(
                "SESSION_NOT_FOUND",
                format!("session {id:?} does not exist"),
            )
        })
    }
}

impl Inner {
    fn with<R>(&self, f: impl FnOnce(&Opened) -> Result<R, Failure>) -> Result<R, Failure> {
        let guard = self.open.read().unwrap_or_else(|p| p.into_inner());
        match guard.as_ref() {
            Some(o) => f(o),
            None => Err(Failure::new(
                "STORE_CLOSED",
                "the store is closed (or was never opened); open it with Store.open",
            )),
        }
    }

    pub fn open(&self, dir: &str, options: &str) -> Result<String, Failure> {
        let o: Options = if options.trim().is_empty() {
            Options::default()
        } else {
            serde_json::from_str(options)
                .map_err(|e| Failure::new("INVALID_OPTIONS", format!("store options: {e}")))?
        };
        let durability = match o.durability.as_deref() {
            None | Some("sync") => Durability::Sync,
            Some("buffered") => Durability::Buffered,
            Some("group") => Durability::Group {
                max_delay: Duration::from_millis(o.group_delay_ms.unwrap_or(10)),
            },
            Some(other) => {
                return Err(Failure::new(
                    "INVALID_OPTIONS",
                    format!("durability must be 'sync', 'group' or 'buffered', got {other:?}"),
                ));
            }
        };
        let invariants = match o.invariants.as_deref() {
            None | Some("always") => InvariantMode::Always,
            Some("off") => InvariantMode::Off,
            Some("debug") => InvariantMode::Debug,
            Some(other) => {
                return Err(Failure::new(
                    "INVALID_OPTIONS",
                    format!("invariants must be 'always', 'debug' or 'off', got {other:?}"),
                ));
            }
        };
        let config = Config::default()
            .durability(durability)
            .read_only(o.read_only.unwrap_or(false))
            .invariants(invariants)
            .repair_on_resume(o.repair_on_resume.unwrap_or(true));
        let config = match o.segment_bytes {
            Some(n) => config.segment_bytes(n),
            None => config,
        };
        let config = match o.deferred_index_entries {
            Some(n) => config.deferred_index_entries(n),
            None => config,
        };
        let mut slot = self.open.write().unwrap_or_else(|p| p.into_inner());
        if slot.is_some() {
            return Err(Failure::new("ALREADY_OPEN", "this handle is open already"));
        }
        if o.gc_interval_ms == Some(0) {
            return Err(Failure::new(
                "INVALID_OPTIONS",
                "gcIntervalMs must be at least 1 (leave it out for no background GC)",
            ));
        }
        let read_only = o.read_only.unwrap_or(false);
        let store = Arc::new(Store::open(dir, config)?);
        let tag = store_tag(store.dir());
        let gc = o
            .gc_interval_ms
            .filter(|_| !read_only)
            .map(|ms| store.background_gc(Duration::from_millis(ms), GcOptions::default()));
        *slot = Some(Opened { store, gc, tag });
        Ok("true".into())
    }

    pub fn create(&self, header: &str, verbatim: bool) -> Result<String, Failure> {
        let h = wire::header_from_json(header)?;
        self.with(|o| {
            let id = h.id.clone();
            if verbatim {
                o.store.create_verbatim(h, Vec::new())?;
            } else {
                o.store.create(h)?;
            }
            Ok(format!(
                "{{\"revision\":{}}}",
                wire::string(&o.revision(&id, 0))
            ))
        })
    }

    pub fn append(&self, id: &str, text: &str, jsonl: bool) -> Result<String, Failure> {
        let events = if jsonl {
            wire::events_from_jsonl(text)?
        } else {
            wire::events_from_array(text)?
        };
        self.with(|o| {
            let session = o.store.session(id)?;
            if events.is_empty() {
                let len = o.len(id)?;
                return Ok(format!(
                    "{{\"appended\":0,\"length\":{len},\"revision\":{}}}",
                    wire::string(&o.revision(id, len))
                ));
            }
            let n = events.len();
            let receipt = session.append_batch(events)?;
            let len = receipt.seq + 1;
            Ok(format!(
                "{{\"appended\":{n},\"lastSeq\":{},\"length\":{len},\"durable\":{},\"revision\":{}}}",
                receipt.seq,
                receipt.durable,
                wire::string(&o.revision(id, len))
            ))
        })
    }

    pub fn create_and_append(
        &self,
        header: &str,
        text: &str,
        verbatim: bool,
    ) -> Result<String, Failure> {
        let h = wire::header_from_json(header)?;
        let events = wire::events_from_array(text)?;
        if events.is_empty() {
            return Err(Failure::new(
                "INVALID_ARGUMENT",
                "the first batch of a session must not be empty",
            ));
        }
        self.with(|o| {
            let id = h.id.clone();
            // An empty session was made by `Store.create` (or is the shell an older binding left
            // when it crashed between its create and first append): dsh sees it as absent (its
            // contract: a created-but-never-appended session is not listed), so its first
            // batch replaces it. A crash between the delete and the create leaves it absent.
            if o.store.len(&id) == Some(0) {
                o.store.delete_session(&id)?;
            }
            let n = events.len();
            // One operation: after a crash the session is absent or has the whole batch.
            let (_, receipt) = if verbatim {
                o.store.create_verbatim(h, events)?
            } else {
                o.store.create_with_events(h, events)?
            };
            let len = receipt.seq + 1;
            Ok(format!(
                "{{\"appended\":{n},\"lastSeq\":{},\"length\":{len},\"durable\":{},\"revision\":{}}}",
                receipt.seq,
                receipt.durable,
                wire::string(&o.revision(&id, len))
            ))
        })
    }

    pub fn flush(&self) -> Result<String, Failure> {
        self.with(|o| {
            o.store.flush()?;
            Ok("true".into())
        })
    }

    pub fn resume(&self, id: &str, with_events: bool, repair: bool) -> Result<String, Failure> {
        self.with(|o| {
            let before = o.len(id)?;
            // `Store::resume` repairs a log left inside an open turn (when the store's
            // `repair_on_resume` is on); `Store::session` is the same view without repair.
            let session = if repair {
                o.store.resume(id)?
            } else {
                o.store.session(id)?
            };
            let len = session.len();
            let mut out = String::from("{\"header\":");
            o.header_json(&mut out, id)?;
            let _ = write!(out, ",\"length\":{len},\"surface\":[");
            for (i, s) in session.surface()?.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{s}");
            }
            out.push_str("],\"messages\":[");
            let messages = session.messages()?;
            for (i, m) in messages.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&m.json);
            }
            out.push_str("],\"messageSeqs\":[");
            for (i, m) in messages.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{}", m.seq);
            }
            out.push(']');
            let _ = write!(out, ",\"repaired\":{}", len - before);
            if with_events {
                out.push_str(",\"events\":");
                o.events_json(&mut out, id, 0, len)?;
            }
            let _ = write!(
                out,
                ",\"revision\":{}}}",
                wire::string(&o.revision(id, len))
            );
            Ok(out)
        })
    }

    pub fn read_from(&self, id: &str, from: f64) -> Result<String, Failure> {
        let from = seq_arg("fromSeq", from)?;
        self.with(|o| {
            let len = o.len(id)?;
            // Taken with the length, before the events: a concurrent append cannot make the
            // revision claim events this read does not return.
            let revision = o.revision(id, len);
            let mut out = String::from("{\"header\":");
            o.header_json(&mut out, id)?;
            let _ = write!(out, ",\"length\":{len},\"events\":");
            o.events_json(&mut out, id, from.min(len), len)?;
            let _ = write!(out, ",\"revision\":{}}}", wire::string(&revision));
            Ok(out)
        })
    }

    pub fn revision_of(&self, id: &str) -> Result<String, Failure> {
        self.with(|o| {
            Ok(match o.store.len(id) {
                Some(len) => format!(
                    "{{\"length\":{len},\"revision\":{}}}",
                    wire::string(&o.revision(id, len))
                ),
                None => "null".into(),
            })
        })
    }

    pub fn fork(&self, parent: &str, child: &str, seed_length: f64) -> Result<String, Failure> {
        let seed = seq_arg("seedLength", seed_length)?;
        let requested = wire::header_from_json(child)?;
        self.with(|o| {
            let verbatim = o.store.session_info(parent).is_some_and(|i| i.verbatim);
            let session = if verbatim {
                // Any seed length, the child header exactly as given.
                o.store.fork_verbatim(parent, requested, seed)?
            } else if seed == 0 {
                return Err(Failure::new(
                    "INVALID_BOUNDARY",
                    "seedLength 0 forks only a verbatim session; a checked session's fork \
                     inherits at least one event (its boundary is the last inherited seq)",
                ));
            } else {
                o.store.fork(parent, Some(seed - 1), Some(&requested.id))?
            };
            let id = session.id().to_owned();
            let len = session.len();
            let mut out = String::from("{\"header\":");
            o.header_json(&mut out, &id)?;
            let _ = write!(
                out,
                ",\"length\":{len},\"revision\":{}}}",
                wire::string(&o.revision(&id, len))
            );
            Ok(out)
        })
    }

    pub fn list(&self) -> Result<String, Failure> {
        self.with(|o| {
            let mut out = String::from("[");
            for (i, l) in o.store.list()?.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let info = &l.info;
                out.push_str("{\"header\":");
                wire::write_header(&mut out, &info.header);
                let _ = write!(
                    out,
                    ",\"verbatim\":{},\"eventCount\":{},\"dataBytes\":{},\"lastTime\":{},\"surfaceLength\":{},\"replaceGeneration\":{},\"revision\":{},\"views\":{{",
                    info.verbatim,
                    info.event_count,
                    info.data_bytes,
                    info.last_time,
                    info.surface_len,
                    info.replace_generation,
                    wire::string(&o.revision(&info.header.id, info.event_count))
                );
                for (j, (key, view)) in l.views.iter().enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    out.push_str(&wire::string(key));
                    out.push(':');
                    out.push_str(view);
                }
                out.push_str("}}");
            }
            out.push(']');
            Ok(out)
        })
    }

    /// The segment GC on demand (`Store::gc`): `{dryRun, compacted, freed, sizeBefore,
    /// sizeAfter, recordsDropped}`.
    pub fn gc(&self, dry_run: bool) -> Result<String, Failure> {
        self.with(|o| {
            let r = o
                .store
                .gc(GcOptions::default().dry_run(dry_run), &mut |_, _| {})
                .map_err(|e| Failure::new("GC", e.to_string()))?;
            Ok(format!(
                "{{\"dryRun\":{},\"compacted\":{:?},\"freed\":{},\"sizeBefore\":{},\"sizeAfter\":{},\"recordsDropped\":{}}}",
                r.dry_run, r.compacted, r.freed, r.size_before, r.size_after, r.records_dropped
            ))
        })
    }

    pub fn delete(&self, id: &str) -> Result<String, Failure> {
        self.with(|o| {
            o.store.delete_session(id)?;
            Ok("true".into())
        })
    }

    pub fn recovery(&self) -> Result<String, Failure> {
        self.with(|o| {
            let r = o.store.recovery_report();
            let mut out = format!(
                "{{\"framesScanned\":{},\"eventsRecovered\":{},\"tornOperationFrames\":{},\"indexRebuilt\":{},\"truncated\":",
                r.frames_scanned, r.events_recovered, r.torn_operation_frames, r.index_rebuilt
            );
            match &r.truncated {
                Some(b) => {
                    let _ = write!(
                        out,
                        "{{\"segment\":{},\"offset\":{},\"reason\":{}}}",
                        b.position.segment,
                        b.position.offset,
                        wire::string(&b.reason)
                    );
                }
                None => out.push_str("null"),
            }
            out.push_str(",\"tornSessions\":[");
            for (i, t) in r.torn_sessions.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(
                    out,
                    "{{\"id\":{},\"firstSeq\":{},\"events\":{}}}",
                    wire::string(&t.id),
                    t.first_seq,
                    t.events
                );
            }
            out.push_str("]}");
            Ok(out)
        })
    }

    pub fn close(&self) -> Result<String, Failure> {
        let taken = self.open.write().unwrap_or_else(|p| p.into_inner()).take();
        match taken {
            Some(Opened { store, gc, .. }) => {
                // The GC thread holds the store only during a pass: once it stopped, this
                // is the last handle.
                drop(gc);
                match Arc::try_unwrap(store) {
                    Ok(store) => store.close()?,
                    Err(shared) => shared.flush()?,
                }
                Ok("true".into())
            }
            None => Ok("false".into()),
        }
    }
}
