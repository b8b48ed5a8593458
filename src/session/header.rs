//! Session header rules (§9.1): dsh's `validateSessionHeader` over the typed header.

use super::error::HeaderError;
use crate::event::{MAX_SAFE_INTEGER, SESSION_FORMAT_VERSION, SessionHeader};
use crate::json::Doc;
use crate::json::{self, JsonLimits};

/// Node's `path.isAbsolute` on POSIX (dsh's rule is host-dependent; sessionlog uses the
/// POSIX rule everywhere so a store behaves the same on every host).
pub fn is_absolute_path(path: &str) -> bool {
    path.starts_with('/')
}

/// Validates `header` for the session `session_id` as dsh's session constructor does.
///
/// ```
/// use sessionlog::SessionHeader;
/// use sessionlog::session::header::validate_header;
/// let mut h = SessionHeader::new("s1", 0);
/// assert!(validate_header("s1", &h).is_ok());
/// h.cwd = Some("relative/dir".into());
/// assert_eq!(
///     validate_header("s1", &h).unwrap_err().to_string(),
///     "session header cwd must be an absolute path, got \"relative/dir\""
/// );
/// ```
pub fn validate_header(session_id: &str, header: &SessionHeader) -> Result<(), HeaderError> {
    let safe = |n: u64| n <= MAX_SAFE_INTEGER as u64;
    if header.version != SESSION_FORMAT_VERSION {
        return Err(HeaderError::Version(header.version.to_string()));
    }
    if header.id != session_id {
        return Err(HeaderError::IdMismatch {
            header: header.id.clone(),
            session: session_id.to_string(),
        });
    }
    if !safe(header.created_at) {
        return Err(HeaderError::CreatedAt);
    }
    if let Some(cwd) = &header.cwd
        && !is_absolute_path(cwd)
    {
        return Err(HeaderError::CwdNotAbsolute(cwd.clone()));
    }
    if header.seed_length.is_some_and(|n| !safe(n)) {
        return Err(HeaderError::SeedLength);
    }
    if header.origin.as_deref().is_some_and(|o| o != "subagent") {
        return Err(HeaderError::Origin);
    }
    if header.delegation_depth.is_some_and(|n| !safe(n)) {
        return Err(HeaderError::DelegationDepth);
    }
    if header.owner.as_deref() == Some("") {
        return Err(HeaderError::Owner);
    }
    for (key, value) in &header.extra {
        Doc::parse(value).map_err(|reason| HeaderError::NotLossless {
            key: key.clone(),
            reason,
        })?;
    }
    Ok(())
}

/// The rules for a header the store writes (`create_session`, `import_session`):
/// [`validate_header`] for the header's own id, plus dsh's lossless-JSON boundary on the extra
/// keys (no `-0`, nesting and size within [`JsonLimits`]). Every header the store accepts is
/// one its own import and dsh's loader accept.
///
/// ```
/// use sessionlog::SessionHeader;
/// use sessionlog::session::header::validate_header_for_write;
/// let mut h = SessionHeader::new("s1", 0);
/// h.seed_length = Some(1 << 60);
/// assert_eq!(
///     validate_header_for_write(&h).unwrap_err().to_string(),
///     "session header seedLength must be a non-negative safe integer"
/// );
/// ```
pub fn validate_header_for_write(header: &SessionHeader) -> Result<(), HeaderError> {
    validate_header(&header.id, header)?;
    for (key, value) in &header.extra {
        json::validate(value, &JsonLimits::default()).map_err(|reason| {
            HeaderError::NotLossless {
                key: key.clone(),
                reason,
            }
        })?;
    }
    Ok(())
}

/// The header dsh gives a forked child (§8 step 5): version 0, the child's id, a fresh
/// `createdAt`, the parent's `cwd` (when set), `parentSession` = parent id and
/// `seedLength`. `origin`, `delegationDepth`, `agentPreset`, `owner` and extra keys are
/// not inherited.
pub fn fork_child_header(
    parent: &SessionHeader,
    child_id: &str,
    created_at: u64,
    seed_length: u64,
) -> SessionHeader {
    SessionHeader {
        version: SESSION_FORMAT_VERSION,
        id: child_id.to_string(),
        created_at,
        cwd: parent.cwd.clone(),
        parent_session: Some(parent.id.clone()),
        seed_length: Some(seed_length),
        ..SessionHeader::default()
    }
}
