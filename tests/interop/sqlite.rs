//! SQLite interop against files dsh itself wrote (`dsh-written/sqlite15|17|18`): import,
//! comparison with the JSONL fixtures and dsh's expectations, and row-identical export.

use crate::common::sqlite_fixtures;

use serde_json::Value as Json;
use sessionlog::event::{KeyOrder, Packing};
use sessionlog::interop::sqlite::{self, ReadOptions, SchemaVersion, WriteOptions};
use sqlite_fixtures::*;

/// Header fields as dsh's JSONL header holds them, from an imported header.
fn header_json(h: &sessionlog::event::SessionHeader) -> Json {
    let mut m = serde_json::Map::new();
    m.insert("type".into(), "session".into());
    m.insert("version".into(), h.version.into());
    m.insert("id".into(), h.id.clone().into());
    m.insert("createdAt".into(), h.created_at.into());
    let mut opt = |k: &str, v: Option<Json>| {
        if let Some(v) = v {
            m.insert(k.into(), v);
        }
    };
    opt("cwd", h.cwd.clone().map(Json::from));
    opt("parentSession", h.parent_session.clone().map(Json::from));
    opt("seedLength", h.seed_length.map(Json::from));
    opt("origin", h.origin.clone().map(Json::from));
    opt("delegationDepth", h.delegation_depth.map(Json::from));
    opt("agentPreset", h.agent_preset.clone().map(Json::from));
    opt("owner", h.owner.clone().map(Json::from));
    Json::Object(m)
}

fn import_matches_jsonl_fixtures(dir: &str, version: SchemaVersion) {
    let Some(fx) = fixtures() else { return };
    {
        let dbs = written_dbs(&fx, dir);
        assert_eq!(dbs.len(), 82, "{dir}");
        let (mut sessions, mut empty, mut packed_members) = (0, 0, 0);
        for (base, path) in &dbs {
            let imported = sqlite::read(path, &ReadOptions::default())
                .unwrap_or_else(|e| panic!("{dir}/{base}: {e}"));
            assert_eq!(imported.version, version, "{base}");
            assert!(imported.store_id.is_some(), "{base}");
            let expected = expected(&fx, base);
            let (jsonl_header, jsonl_events) = jsonl_events(&fx, base);
            if imported.sessions.is_empty() {
                // dsh materializes a session with its first event: header-only fixtures have
                // no row.
                // (One `projected` fixture's only record lacks `seq`; dsh's loader drops it as a
                // torn tail, so it too has no events.)
                assert_eq!(expected["event_count"], 0, "{dir}/{base}");
                empty += 1;
                continue;
            }
            sessions += 1;
            assert_eq!(imported.sessions.len(), 1, "{dir}/{base}");
            let s = &imported.sessions[0];
            // The id is the fixture header's (`ph-<name>` where it was `{{sessionId}}`).
            assert_eq!(
                Json::from(s.header.id.clone()),
                jsonl_header["id"],
                "{dir}/{base}"
            );
            assert_eq!(header_json(&s.header), jsonl_header, "{dir}/{base} header");
            assert!(s.torn.is_none(), "{dir}/{base}: {:?}", s.torn);
            assert_eq!(s.revision, 1, "{dir}/{base}");
            assert_eq!(
                s.events.len() as u64,
                expected["event_count"].as_u64().unwrap(),
                "{dir}/{base}"
            );
            assert_eq!(s.events.len(), jsonl_events.len(), "{dir}/{base}");
            for (i, (e, j)) in s.events.iter().zip(&jsonl_events).enumerate() {
                assert_eq!(e.seq, i as u64);
                assert_eq!(e.layout.key_order, KeyOrder::Canonical);
                assert_eq!(&event_json(e), j, "{dir}/{base} seq {i}");
                match version {
                    SchemaVersion::V15 => assert_eq!(e.layout.packing, Packing::Auto),
                    _ => {
                        if matches!(e.layout.packing, Packing::RowStart | Packing::RowMember) {
                            packed_members += 1;
                            assert_eq!(e.kind, "assistant/chunk");
                        } else {
                            assert_eq!(e.layout.packing, Packing::Scalar);
                        }
                    }
                }
            }
        }
        assert_eq!((sessions, empty), (76, 6), "{dir}");
        if version != SchemaVersion::V15 {
            assert!(
                packed_members > 300,
                "{dir}: only {packed_members} packed members"
            );
        }
    }
}

/// Every table's rows (rowid, values and storage classes) and the schema text are the same in
/// dsh's file and in our export of what we imported from it; only the random UUIDs differ.
fn export_is_row_identical(dir: &str, version: SchemaVersion) {
    let Some(fx) = fixtures() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut pairs = Vec::new();
    {
        for (base, path) in written_dbs(&fx, dir) {
            let imported = sqlite::read(&path, &ReadOptions::default()).unwrap();
            let out = tmp.path().join(format!("{dir}-{base}.db"));
            let report = sqlite::write(
                &out,
                version,
                imported
                    .sessions
                    .iter()
                    .map(|s| (&s.header, s.events.as_slice())),
                &WriteOptions::default(),
            )
            .unwrap_or_else(|e| panic!("{dir}/{base}: {e}"));
            assert_eq!(report.sessions, imported.sessions.len());
            let (theirs, ours) = (open_ro(&path), open_ro(&out));
            assert_eq!(
                dump_schema(&ours),
                dump_schema(&theirs),
                "{dir}/{base} schema"
            );
            for (table, skip) in [
                ("persistence_state", &["store_id"][..]),
                ("sessions", &["incarnation"][..]),
                ("events", &[][..]),
            ] {
                assert_eq!(
                    dump_table(&ours, table, skip),
                    dump_table(&theirs, table, skip),
                    "{dir}/{base} table {table}"
                );
            }
            for pragma in [
                "application_id",
                "user_version",
                "page_size",
                "auto_vacuum",
                "encoding",
                "journal_mode",
            ] {
                let get = |c: &rusqlite::Connection| -> rusqlite::types::Value {
                    c.pragma_query_value(None, pragma, |r| r.get(0)).unwrap()
                };
                assert_eq!(get(&ours), get(&theirs), "{dir}/{base} pragma {pragma}");
            }
            pairs.push((out, path));
        }
    }
    // The second reader sees the same identity, pragmas and schema text in both files, and an
    // intact database.
    let args: Vec<&str> = pairs
        .iter()
        .flat_map(|(ours, theirs)| [ours.to_str().unwrap(), theirs.to_str().unwrap()])
        .collect();
    let Some(out) = python(PYTHON_CHECK, &args) else {
        return;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Json = serde_json::from_slice(&out.stdout).unwrap();
    for (ours, theirs) in &pairs {
        let (mut a, mut b) = (
            report[ours.to_str().unwrap()].clone(),
            report[theirs.to_str().unwrap()].clone(),
        );
        assert_eq!(a["integrity"], "ok");
        assert_eq!(a["user_version"], version.user_version());
        for r in [&mut a, &mut b] {
            r.as_object_mut().unwrap().remove("store_ids");
        }
        assert_eq!(a, b, "{}", ours.display());
    }
}

#[test]
fn sqlite15_files_import_as_the_jsonl_fixtures() {
    import_matches_jsonl_fixtures("sqlite15", SchemaVersion::V15);
}

#[test]
fn sqlite17_files_import_as_the_jsonl_fixtures() {
    import_matches_jsonl_fixtures("sqlite17", SchemaVersion::V17);
}

#[test]
fn sqlite18_files_import_as_the_jsonl_fixtures() {
    import_matches_jsonl_fixtures("sqlite18", SchemaVersion::V18);
}

#[test]
fn sqlite15_export_is_row_identical_to_dsh() {
    export_is_row_identical("sqlite15", SchemaVersion::V15);
}

#[test]
fn sqlite17_export_is_row_identical_to_dsh() {
    export_is_row_identical("sqlite17", SchemaVersion::V17);
}

#[test]
fn sqlite18_export_is_row_identical_to_dsh() {
    export_is_row_identical("sqlite18", SchemaVersion::V18);
}

/// Schema 15 keeps no row boundaries, so its events import as one append batch; exported to
/// 17 or 18 they are packed as dsh packs one batch, giving the rows dsh wrote itself.
fn cross_version_export_is_row_identical(to: SchemaVersion) {
    let Some(fx) = fixtures() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut differing = Vec::new();
    for (base, path) in written_dbs(&fx, "sqlite15") {
        let imported = sqlite::read(&path, &ReadOptions::default()).unwrap();
        let out = tmp.path().join(format!("{base}.db"));
        sqlite::write(
            &out,
            to,
            imported
                .sessions
                .iter()
                .map(|s| (&s.header, s.events.as_slice())),
            &WriteOptions::default(),
        )
        .unwrap();
        let theirs = fx.join(format!("dsh-written/sqlite{to}/{base}.db"));
        let (theirs, ours) = (open_ro(&theirs), open_ro(&out));
        if dump_table(&ours, "events", &[]) != dump_table(&theirs, "events", &[]) {
            differing.push(base);
        }
    }
    assert!(differing.is_empty(), "{differing:?}");
}

#[test]
fn sqlite15_to_17_export_packs_as_dsh() {
    cross_version_export_is_row_identical(SchemaVersion::V17);
}

#[test]
fn sqlite15_to_18_export_packs_as_dsh() {
    cross_version_export_is_row_identical(SchemaVersion::V18);
}
