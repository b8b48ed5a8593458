//! Error messages in the command line's words: what to run next (`sessionlog recover`,
//! `--skip-existing`), never which library option to pass, and the cause of a failed write
//! first (a full disk, a file-size limit), with counts and a few ids rather than every id.

use sessionlog::FileImportError;
use sessionlog::causes::ImportError;
use sessionlog::{AppendError, OpenError};

/// An error's message with the library's advice (recovery modes, reopening the store) replaced
/// by what to run on the command line.
pub fn in_cli_words(e: &(dyn std::error::Error + 'static)) -> String {
    if let Some(done) = e.downcast_ref::<CliMessage>() {
        return done.0.clone();
    }
    library_phrases(&typed_words(e))
}

/// The library's advice that can appear inside any message (a nested cause), and what to run
/// instead.
const LIBRARY_PHRASES: [(&str, &str); 5] = [
    (
        ". Reopen with RecoveryMode::SalvageSkippingBadFrames to skip damaged frames, or restore from a backup",
        ". `sessionlog recover --salvage` drops the damaged frames, or restore from a backup",
    ),
    (
        "; reopen with RecoveryMode::TolerateTornTail to truncate it",
        "; `sessionlog recover` cuts it",
    ),
    (
        "; delete index.redb and reopen to rebuild it",
        "; `sessionlog recover` rebuilds the index",
    ),
    (
        "; nothing more is written. Close the store and reopen it: recovery keeps every acknowledged event",
        "; nothing more was written (`sessionlog recover` keeps every acknowledged event)",
    ),
    (" (Config::max_frame_bytes)", ""),
];

/// `text` with [`LIBRARY_PHRASES`] replaced.
fn library_phrases(text: &str) -> String {
    let mut out = text.to_owned();
    for (library, cli) in LIBRARY_PHRASES {
        out = out.replace(library, cli);
    }
    out
}

/// The message for the error types the command line words itself.
fn typed_words(e: &(dyn std::error::Error + 'static)) -> String {
    if let Some(import) = e.downcast_ref::<FileImportError>() {
        return import_error(import);
    }
    let open =
        e.downcast_ref::<OpenError>()
            .or_else(|| match e.downcast_ref::<sessionlog::Error>() {
                Some(sessionlog::Error::Open(open)) => Some(open),
                _ => None,
            });
    match open {
        Some(OpenError::Corruption { position, reason }) => format!(
            "corruption in the log at {position}: {reason}; valid frames follow, so this is not \
             a torn write. `sessionlog verify` lists the damage; `sessionlog recover --salvage` \
             drops the damaged frames (and names the events they held), or restore a backup"
        ),
        Some(OpenError::AcknowledgedLost { end, published }) => format!(
            "the log ends at {end}, before {published}, up to which its last writer had \
             published every frame as durable: acknowledged frames are missing (the last \
             segment was truncated or removed, or the disk lost synced data), and nothing was \
             cut. `sessionlog recover --salvage` accepts the loss and goes on from {end}; or \
             restore a backup"
        ),
        Some(OpenError::TornTail { position, reason }) => format!(
            "torn write at the log tail at {position}: {reason}; `sessionlog recover` cuts it"
        ),
        Some(OpenError::Locked { path, pid }) => format!(
            "the store {} is open for writing in another process{}; one process writes at a \
             time: wait for it to finish or stop it (list, show, show --follow, export, verify, du \
             and retain --dry-run work beside it)",
            crate::output::human_path(path.parent().unwrap_or(path)),
            pid.map(|p| format!(" (process {p})")).unwrap_or_default()
        ),
        Some(OpenError::Io { path, source })
            if source.kind() == std::io::ErrorKind::ReadOnlyFilesystem =>
        {
            format!(
                "the store is on a read-only file system (writing {} failed): `list`, `show`, \
                 `verify`, `du`, `export` and `retain --dry-run` read it as it is; this command \
                 writes, so remount the file system read-write, or copy the store to a writable \
                 place and name the copy with --store",
                crate::output::human_path(path)
            )
        }
        _ => match no_room(e) {
            // The library's words for an index it could not write would send the reader to
            // `recover`; the cause is the room.
            Some(room) => format!(
                "{}; {}, then run the command again (the error: {e})",
                room.cause(),
                room.remedy()
            ),
            None => e.to_string(),
        },
    }
}

/// A message already in the command line's words (printed as it is).
#[derive(Debug)]
pub struct CliMessage(pub String);

impl std::fmt::Display for CliMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CliMessage {}

/// What a failed write ran into, when the file system refused it for lack of room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NoRoom {
    /// ENOSPC.
    DiskFull,
    /// EFBIG: a file-size limit (`ulimit -f`) or the file system's largest file.
    FileTooLarge,
}

impl NoRoom {
    fn cause(self) -> &'static str {
        match self {
            NoRoom::DiskFull => "the disk is full (No space left on device, os error 28)",
            NoRoom::FileTooLarge => {
                "a file-size limit was reached (File too large, os error 27: see `ulimit -f`)"
            }
        }
    }

    fn remedy(self) -> &'static str {
        match self {
            NoRoom::DiskFull => "free space",
            NoRoom::FileTooLarge => "raise the limit (`ulimit -f`)",
        }
    }
}

/// Finds ENOSPC or EFBIG in `e`'s chain of causes (or in its message, for causes such as
/// redb's that carry the OS error only as text).
fn no_room(e: &(dyn std::error::Error + 'static)) -> Option<NoRoom> {
    let of_code = |code: i32| match code {
        28 => Some(NoRoom::DiskFull),
        27 => Some(NoRoom::FileTooLarge),
        _ => None,
    };
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(found) = io.raw_os_error().and_then(of_code)
        {
            return Some(found);
        }
        next = err.source();
    }
    let text = e.to_string();
    if text.contains("(os error 28)") {
        Some(NoRoom::DiskFull)
    } else if text.contains("(os error 27)") {
        Some(NoRoom::FileTooLarge)
    } else {
        None
    }
}

/// The failed write inside an import error, without the library's "close the store and reopen
/// it" (the command closes it itself).
fn write_failure(e: &FileImportError) -> Option<&AppendError> {
    match e {
        FileImportError::Refused { source, .. } => match source.as_ref() {
            ImportError::Append(AppendError::PreviousIo(failure)) => Some(failure.error()),
            ImportError::Append(a @ (AppendError::Io(_) | AppendError::Index(_))) => Some(a),
            _ => None,
        },
        _ => None,
    }
}

/// An import error for the command line: the cause first, then what was imported (a count
/// and a few ids) and what to run next.
fn import_error(e: &FileImportError) -> String {
    let (cause, imported) = match e {
        FileImportError::Partial { imported, source } => (source.as_ref(), Some(imported)),
        other => (other, None),
    };
    let room = no_room(cause);
    let first = match (cause, write_failure(cause)) {
        (FileImportError::Refused { path, session, .. }, Some(failure)) => {
            let what = match room {
                Some(room) => room.cause().to_owned(),
                None => format!("writing failed: {failure}"),
            };
            format!(
                "{what}, while writing session \"{session}\" from {}",
                path.display()
            )
        }
        _ => cause.to_string(),
    };
    let Some(imported) = imported else {
        return match (room, write_failure(cause)) {
            (Some(room), Some(_)) => format!(
                "{first}\nnothing was imported; {}, then run the same import again",
                room.remedy()
            ),
            (None, Some(_)) => format!("{first}\nnothing was imported"),
            _ => first,
        };
    };
    let remedy = match room {
        Some(room) => room.remedy(),
        None => "fix the cause",
    };
    let (listed, more) = (imported.len().min(3), imported.len().saturating_sub(3));
    let examples: Vec<String> = imported[..listed]
        .iter()
        .map(|id| format!("\"{id}\""))
        .collect();
    // A write that failed after the log took it (its index update failed) is found again by
    // recovery: that session may be in the store too, whole.
    let maybe = match write_failure(cause) {
        Some(_) => "; the session being written may be there too, whole",
        None => "",
    };
    format!(
        "{first}\nthe import stopped there: {} session(s) were imported before it and stay in the store ({}{}{maybe}); {remedy}, then run the same import again with --skip-existing to import the rest",
        imported.len(),
        examples.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}

/// `reading session "ID" failed: ERROR`, or `reading failed: ERROR` when the error names the
/// session itself (so no message says the id twice).
pub fn about_session(id: &str, doing: &str, e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    let quoted = format!("\"{}\"", id.escape_debug());
    if text.contains(&quoted) || text.contains(&format!("\"{id}\"")) {
        format!("{doing} failed: {text}")
    } else {
        format!("{doing} session \"{id}\" failed: {text}")
    }
}

/// The error when closing the store fails after an import wrote every session: they are
/// durable (each was acknowledged), so the advice is to repair, not to import again.
pub fn close_failed_after_import(
    sessions: usize,
    e: &(dyn std::error::Error + 'static),
) -> CliMessage {
    let cause = match no_room(e) {
        Some(room) => format!("{} ({e})", room.cause()),
        None => e.to_string(),
    };
    let remedy = match no_room(e) {
        Some(room) => format!("{}, then run `sessionlog recover`", room.remedy()),
        None => "run `sessionlog recover`".to_owned(),
    };
    // The library's "close the store and reopen it" is what `recover` does.
    let cause = cause.replace(
        "; nothing more is written. Close the store and reopen it: recovery keeps every acknowledged event",
        "",
    );
    CliMessage(format!(
        "closing the store failed: {cause}\nall {sessions} session(s) of the import were written and are durable (the next open recovers them); {remedy} to bring the index up to date — do not import them again"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_advice_inside_a_message_becomes_a_command() {
        for (library, cli) in LIBRARY_PHRASES {
            let text = format!("reading failed: damage{library}");
            let words = library_phrases(&text);
            assert_eq!(words, format!("reading failed: damage{cli}"));
            for word in ["RecoveryMode", "Config::", "reopen", "Reopen"] {
                assert!(!words.contains(word), "{words}");
            }
        }
        // The texts are the library's own (a changed one would slip through).
        let library = sessionlog::OpenError::TornTail {
            position: sessionlog::LogPosition {
                segment: 1,
                offset: 32,
            },
            reason: sessionlog::Damage::MissingLastFrame,
        }
        .to_string();
        assert!(library.contains(LIBRARY_PHRASES[1].0), "{library}");
        let library =
            sessionlog::AppendError::PreviousIo(sessionlog::WriteFailure::from("boom".to_owned()))
                .to_string();
        assert!(library.contains(LIBRARY_PHRASES[3].0), "{library}");
        assert_eq!(
            in_cli_words(&sessionlog::AppendError::PreviousIo(
                sessionlog::WriteFailure::from("boom".to_owned())
            )),
            "a previous write or fsync failed (the writer failed: boom); nothing more was written (`sessionlog recover` keeps every acknowledged event)"
        );
    }

    #[test]
    fn a_session_is_named_once() {
        let named = sessionlog::ReadError::NoSuchSession("s1".into());
        assert_eq!(
            about_session("s1", "reading", &named),
            "reading failed: session \"s1\" does not exist"
        );
        let unnamed = std::io::Error::other("boom");
        assert_eq!(
            about_session("s1", "reading", &unnamed),
            "reading session \"s1\" failed: boom"
        );
    }
}
