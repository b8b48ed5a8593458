//! The umbrella error and the typed causes, seen from a caller.

use super::*;
use crate::event::SessionHeader;
use crate::store::{Config, Store};

/// One fallible call per operation family, each propagated with `?` as a user's
/// `fn main() -> Result<(), sessionlog::Error>` would.
fn open_bad_config(dir: &std::path::Path) -> Result<(), Error> {
    Store::open(dir, Config::default().segment_bytes(16))?;
    Ok(())
}
fn create_twice(store: &Store) -> Result<(), Error> {
    store.create(SessionHeader::new("twice", 1))?;
    store.create(SessionHeader::new("twice", 1))?;
    Ok(())
}
fn read_missing(store: &Store) -> Result<(), Error> {
    store.session("missing")?;
    Ok(())
}
fn index_failure() -> Result<(), Error> {
    Err(IndexError::Malformed {
        table: "sessions",
        detail: "test".into(),
    })?;
    Ok(())
}
fn fork_missing(store: &Store) -> Result<(), Error> {
    store.fork("missing", None, Some("child"))?;
    Ok(())
}
fn typed_empty_id() -> Result<(), Error> {
    crate::typed::MessageId::new("")?;
    Ok(())
}
fn json_invalid() -> Result<(), Error> {
    crate::json::validate("{", &crate::json::JsonLimits::default())?;
    Ok(())
}
#[cfg(feature = "interop")]
fn import_missing(store: &Store, path: &std::path::Path) -> Result<(), Error> {
    crate::interop::import::import_paths(
        store,
        &[path.to_path_buf()],
        &crate::interop::import::ImportOptions::default(),
        &mut |_| {},
    )?;
    Ok(())
}
#[cfg(feature = "interop")]
fn export_missing(store: &Store, out: &std::path::Path) -> Result<(), Error> {
    crate::interop::export::export(
        store,
        &["missing".to_owned()],
        out,
        crate::interop::export::ExportFormat::Jsonl,
        crate::interop::export::ExportLayout::File,
        &mut |_| {},
    )?;
    Ok(())
}

#[test]
fn the_typed_cause_is_the_source_and_the_message_still_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Config::default()).unwrap();
    let mut header = SessionHeader::new("s", 1);
    header.cwd = Some("relative/dir".into());
    let e = store.create(header).unwrap_err();
    let cause = std::error::Error::source(&e)
        .and_then(|s| s.downcast_ref::<HeaderError>())
        .cloned();
    assert_eq!(
        cause,
        Some(HeaderError::CwdNotAbsolute("relative/dir".into()))
    );
    assert_eq!(
        e.to_string(),
        "invalid session header for \"s\": session header cwd must be an absolute path, got \"relative/dir\""
    );
}

#[test]
fn the_typed_causes_do_not_grow_the_errors() {
    // Large causes are boxed: a `Result` carrying these errors stays cheap to return.
    // (redb's error alone is over 100 bytes.) Sizes on a 64-bit target.
    assert!(std::mem::size_of::<IndexError>() <= 48);
    assert!(std::mem::size_of::<ReadError>() <= 48);
    assert!(std::mem::size_of::<OpenError>() <= 72);
    assert!(std::mem::size_of::<AppendError>() <= 96);
}

#[test]
fn every_operation_family_converts_into_the_umbrella_error() {
    let dir = tempfile::tempdir().unwrap();
    let e = open_bad_config(&dir.path().join("bad")).unwrap_err();
    assert!(matches!(e, Error::Open(OpenError::Config(_))), "{e:?}");
    let store = Store::open(dir.path().join("store"), Config::default()).unwrap();
    let e = create_twice(&store).unwrap_err();
    assert!(
        matches!(e, Error::Append(AppendError::SessionExists(_))),
        "{e:?}"
    );
    let e = read_missing(&store).unwrap_err();
    assert!(
        matches!(e, Error::Read(ReadError::NoSuchSession(_))),
        "{e:?}"
    );
    let e = index_failure().unwrap_err();
    assert!(
        matches!(e, Error::Index(IndexError::Malformed { .. })),
        "{e:?}"
    );
    let e = fork_missing(&store).unwrap_err();
    assert!(
        matches!(e, Error::Fork(crate::store::ForkFailure::Rule(_))),
        "{e:?}"
    );
    let e = typed_empty_id().unwrap_err();
    assert!(
        matches!(
            e,
            Error::TypedEvent(crate::typed::TypedEventError::Empty { .. })
        ),
        "{e:?}"
    );
    let e = json_invalid().unwrap_err();
    assert!(matches!(e, Error::Json(_)), "{e:?}");
    #[cfg(feature = "interop")]
    {
        let e = import_missing(&store, &dir.path().join("no-such-file.jsonl")).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Import(crate::interop::import::FileImportError::Io { .. })
            ),
            "{e:?}"
        );
        let e = export_missing(&store, &dir.path().join("out.jsonl")).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Export(crate::interop::export::ExportError::NoSuchSession(_))
            ),
            "{e:?}"
        );
    }
    // The umbrella error keeps the family's message.
    let e = read_missing(&store).unwrap_err();
    assert_eq!(e.to_string(), "session \"missing\" does not exist");
}
