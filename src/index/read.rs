//! Reading: the meta table and session rows, runs and surface links, states, projections, dumps.

use super::guard::guarded;
use super::values::{
    KeyBytes, META_FORMAT_VERSION, META_NEXT_SESSION, META_WATERMARK, Run, SessionRow, Watermark,
    decode_run_entry, event_key, unseal,
};
use super::{
    EVENTS, INDEX_FORMAT_VERSION, Index, IndexState, META, PROJECTIONS, RUN_LEN, RUN_VALUE_LEN,
    SESSION_IDS, SESSION_STATE, SESSIONS, SURFACE, damaged, u32_le, u64_be, u64_le,
};
use crate::error::IndexError;
use crate::event::Seq;
use redb::ReadableTable;

impl Index {
    /// Reads the meta table and every session row (checking their CRCs).
    pub fn load(&self) -> Result<IndexState, IndexError> {
        guarded("meta", || self.load_inner())
    }

    fn load_inner(&self) -> Result<IndexState, IndexError> {
        let txn = self.begin_read()?;
        let meta = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => {
                if holds_entries(&txn)? {
                    return Err(damaged(
                        "meta",
                        "the table is missing while other tables hold entries".into(),
                    ));
                }
                return Ok(IndexState {
                    format_version: None,
                    watermark: Watermark::default(),
                    sessions: Vec::new(),
                    next_session: 0,
                });
            }
            Err(e) => return Err(e.into()),
        };
        let format_version = match meta.get(META_FORMAT_VERSION)? {
            Some(v) => {
                // The version comes first in every version's layout (versions 1 and 2 stored
                // the 4 bytes alone, version 3 adds the CRC): a newer index is recognised
                // whatever else it changed.
                let v = v.value();
                if v.len() < 4 {
                    return Err(damaged("meta", "format_version is under 4 bytes".into()));
                }
                let version = u32_le(v);
                if version == INDEX_FORMAT_VERSION {
                    let payload = unseal("meta", META_FORMAT_VERSION.as_bytes(), v)?;
                    if payload.len() != 4 {
                        return Err(damaged("meta", "format_version is not 4 bytes".into()));
                    }
                }
                Some(version)
            }
            None => None,
        };
        if format_version.is_some_and(|v| v != INDEX_FORMAT_VERSION) {
            // Other tables may have other layouts: nothing else is read.
            return Ok(IndexState {
                format_version,
                watermark: Watermark::default(),
                sessions: Vec::new(),
                next_session: 0,
            });
        }
        if format_version.is_some() {
            // Every table exists in an index of this version (a missing one was lost).
            txn.open_table(SESSION_IDS)?;
            txn.open_table(EVENTS)?;
            txn.open_table(SURFACE)?;
            txn.open_table(SESSION_STATE)?;
            txn.open_table(PROJECTIONS)?;
        }
        let watermark = match meta.get(META_WATERMARK)? {
            Some(v) => Watermark::decode(unseal("meta", META_WATERMARK.as_bytes(), v.value())?)?,
            None => Watermark::default(),
        };
        let next_session = match meta.get(META_NEXT_SESSION)? {
            Some(v) => {
                let v = unseal("meta", META_NEXT_SESSION.as_bytes(), v.value())?;
                if v.len() != 8 {
                    return Err(damaged("meta", "next_session is not 8 bytes".into()));
                }
                u64_le(v)
            }
            None => 0,
        };
        if format_version.is_none() {
            let present =
                watermark != Watermark::default() || next_session != 0 || holds_entries(&txn)?;
            if present {
                return Err(damaged(
                    "meta",
                    "the format version is missing while other entries are present".into(),
                ));
            }
        }
        let mut sessions = Vec::new();
        let table = match txn.open_table(SESSIONS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) if format_version.is_none() => {
                return Ok(IndexState {
                    format_version,
                    watermark,
                    sessions,
                    next_session,
                });
            }
            Err(e) => return Err(e.into()),
        };
        for item in table.iter()? {
            let (k, v) = item?;
            let number = k.value();
            let row =
                SessionRow::decode(unseal("sessions", &KeyBytes::number(number), v.value())?)?;
            if row.number != number {
                return Err(damaged(
                    "sessions",
                    format!("row of session number {} is keyed {number}", row.number),
                ));
            }
            sessions.push((row.header.id.to_string(), row));
        }
        counted("sessions", sessions.len(), &table)?;
        if format_version.is_some() && meta.get(META_WATERMARK)?.is_none() {
            return Err(damaged("meta", "the watermark is missing".into()));
        }
        Ok(IndexState {
            format_version,
            watermark,
            sessions,
            next_session,
        })
    }

    /// Every projection checkpoint record of `session`: (key, record).
    pub fn projections(&self, session: u64) -> Result<Vec<(String, Vec<u8>)>, IndexError> {
        guarded("projections", || {
            let txn = self.begin_read()?;
            let table = match txn.open_table(PROJECTIONS) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(e.into()),
            };
            let mut out = Vec::new();
            for item in table.range::<(u64, &str)>((session, "")..(session + 1, ""))? {
                let (k, v) = item?;
                let (n, key) = k.value();
                let record = unseal("projections", &KeyBytes::pair(n, key), v.value())?;
                out.push((key.to_owned(), record.to_vec()));
            }
            Ok(out)
        })
    }

    /// Every surface node of `session` with its (prev, next) links.
    pub fn surface_links(&self, session: u64) -> Result<Vec<(Seq, Seq, Seq)>, IndexError> {
        guarded("surface", || {
            let txn = self.begin_read()?;
            let table = txn.open_table(SURFACE)?;
            let lo = event_key(session, 0);
            let hi = event_key(session, u64::MAX);
            let mut out = Vec::new();
            for item in table.range::<&[u8; 16]>(&lo..=&hi)? {
                let (k, v) = item?;
                let k = k.value();
                let v = unseal("surface", k, v.value())?;
                out.push((u64_be(&k[8..16]), u64_le(&v[0..8]), u64_le(&v[8..16])));
            }
            Ok(out)
        })
    }

    /// The session-state checkpoint of `session`: (covered seq, postcard bytes).
    pub fn state(&self, session: u64) -> Result<Option<(Seq, Vec<u8>)>, IndexError> {
        guarded("session_state", || {
            let txn = self.begin_read()?;
            let table = txn.open_table(SESSION_STATE)?;
            let Some(v) = table.get(session)? else {
                return Ok(None);
            };
            let v = unseal("session_state", &KeyBytes::number(session), v.value())?;
            if v.len() < 8 {
                return Err(damaged(
                    "session_state",
                    format!("the value of session number {session} is {} bytes", v.len()),
                ));
            }
            Ok(Some((u64_le(&v[0..8]), v[8..].to_vec())))
        })
    }

    /// The run holding `session`'s event `seq`: the entry with the largest key at or below
    /// `(session, seq)`, if it belongs to `session` and its count reaches `seq`.
    pub fn run(&self, session: u64, seq: Seq) -> Result<Option<Run>, IndexError> {
        guarded("events", || {
            let txn = self.begin_read()?;
            let table = txn.open_table(EVENTS)?;
            covering(&table, session, seq)
        })
    }

    /// The runs holding `session`'s events with seq in `from..to`, in seq order, at most
    /// `limit` of them: the run holding `from` (when there is one) and every run starting
    /// after it, below `to`.
    pub fn runs(
        &self,
        session: u64,
        from: Seq,
        to: Seq,
        limit: usize,
    ) -> Result<Vec<Run>, IndexError> {
        let mut out = Vec::new();
        if from >= to || limit == 0 {
            return Ok(out);
        }
        guarded("events", || {
            let txn = self.begin_read()?;
            let table = txn.open_table(EVENTS)?;
            out.extend(covering(&table, session, from)?);
            let lo = event_key(session, from + 1);
            let hi = event_key(session, to);
            for item in table.range::<&[u8; 16]>(&lo..&hi)? {
                if out.len() >= limit {
                    break;
                }
                let (k, v) = item?;
                let (_, run) = decode_run_entry(k.value(), v.value())?;
                out.push(run);
            }
            Ok(out)
        })
    }

    /// Every entry of every table, in key order, as bytes (values without their CRC, which
    /// is checked): for comparing two indexes.
    pub fn dump(&self) -> Result<Vec<DumpEntry>, IndexError> {
        guarded("index.redb", || self.dump_inner())
    }

    /// Checks every entry of every table (its CRC and, where it has one, its layout).
    /// Returns the number of entries.
    pub fn check_entries(&self) -> Result<u64, IndexError> {
        let entries = self.dump()?;
        for (table, key, value) in &entries {
            match table.as_str() {
                "sessions" => {
                    SessionRow::decode(value)?;
                }
                "events" => {
                    let mut b = [0u8; RUN_LEN];
                    if value.len() != RUN_LEN || key.len() != 16 {
                        return Err(damaged("events", "an entry has the wrong size".into()));
                    }
                    b.copy_from_slice(value);
                    Run::decode(u64_be(&key[8..16]), &b)?;
                }
                "session_ids" if std::str::from_utf8(value).is_err() => {
                    return Err(damaged("session_ids", "an id is not UTF-8".into()));
                }
                _ => {}
            }
        }
        Ok(entries.len() as u64)
    }

    fn dump_inner(&self) -> Result<Vec<DumpEntry>, IndexError> {
        let txn = self.begin_read()?;
        let mut out: Vec<DumpEntry> = Vec::new();
        // One table: every entry's CRC checked (over `crc_key`), the key as `out_key` bytes,
        // and the entry count compared with redb's.
        macro_rules! dump {
            ($def:expr, $name:literal, |$k:ident| $crc_key:expr, $out_key:expr) => {{
                let table = txn.open_table($def)?;
                let before = out.len();
                for item in table.iter()? {
                    let (k, v) = item?;
                    let $k = k.value();
                    let v = unseal($name, $crc_key, v.value())?;
                    out.push(($name.into(), $out_key, v.to_vec()));
                }
                counted($name, out.len() - before, &table)?;
            }};
        }
        dump!(META, "meta", |k| k.as_bytes(), k.as_bytes().to_vec());
        dump!(
            SESSIONS,
            "sessions",
            |k| &KeyBytes::number(k),
            k.to_be_bytes().to_vec()
        );
        dump!(
            SESSION_IDS,
            "session_ids",
            |k| &KeyBytes::number(k),
            k.to_be_bytes().to_vec()
        );
        dump!(EVENTS, "events", |k| k, k.to_vec());
        dump!(SURFACE, "surface", |k| k, k.to_vec());
        dump!(
            SESSION_STATE,
            "session_state",
            |k| &KeyBytes::number(k),
            k.to_be_bytes().to_vec()
        );
        dump!(PROJECTIONS, "projections", |k| &KeyBytes::pair(k.0, k.1), {
            let mut kb = k.0.to_be_bytes().to_vec();
            kb.extend_from_slice(k.1.as_bytes());
            kb
        });
        Ok(out)
    }
}

/// The run of `table` holding `(session, seq)`.
fn covering(
    table: &impl ReadableTable<&'static [u8; 16], &'static [u8; RUN_VALUE_LEN]>,
    session: u64,
    seq: Seq,
) -> Result<Option<Run>, IndexError> {
    let lo = event_key(session, 0);
    let key = event_key(session, seq);
    let Some(item) = table.range::<&[u8; 16]>(&lo..=&key)?.next_back() else {
        return Ok(None);
    };
    let (k, v) = item?;
    let (_, run) = decode_run_entry(k.value(), v.value())?;
    Ok(run.contains(seq).then_some(run))
}

/// One index entry as bytes: (table, key, value).
pub type DumpEntry = (String, Vec<u8>, Vec<u8>);

/// True when the `sessions` or `events` table exists and holds an entry.
fn holds_entries(txn: &redb::ReadTransaction) -> Result<bool, IndexError> {
    let mut present = false;
    match txn.open_table(SESSIONS) {
        Ok(t) => present |= t.iter()?.next().is_some(),
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(e.into()),
    }
    match txn.open_table(EVENTS) {
        Ok(t) => present |= t.iter()?.next().is_some(),
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(present)
}

/// Checks that iterating `table` gave as many entries as redb's table header records (a
/// damaged page can hide entries without failing any value's CRC).
fn counted(
    name: &'static str,
    iterated: usize,
    table: &impl redb::ReadableTableMetadata,
) -> Result<(), IndexError> {
    let recorded = table.len()?;
    if recorded != iterated as u64 {
        return Err(damaged(
            name,
            format!("the table records {recorded} entries but {iterated} were found"),
        ));
    }
    Ok(())
}
