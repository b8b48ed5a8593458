//! dsh's path layout: `<project key | _no-cwd>/<encoded id>/session.jsonl[.zstd]`.

use super::types::JsonlPathError;
use super::{Compression, NO_CWD_DIR};
use crate::event::SessionHeader;
use std::path::{Path, PathBuf};

fn safe_unit(u: u16) -> bool {
    matches!(u, 0x30..=0x39 | 0x41..=0x5A | 0x61..=0x7A | 0x2E | 0x5F | 0x2D)
}

fn push_escaped(out: &mut String, u: u16) {
    out.push_str(&format!("~{u:04X}"));
}

/// dsh's `encodeSegment(id)`: one path segment per session id. Each UTF-16 code unit in
/// `[A-Za-z0-9._-]` is kept, every other one (including `~`) becomes `~XXXX` (uppercase hex);
/// the segments `.` and `..` become `~002E` and `~002E~002E`; `""` is refused. Injective, and
/// no result can name a parent directory or contain a separator.
///
/// ```
/// use sessionlog::interop::jsonl::encode_session_id;
/// assert_eq!(encode_session_id("/etc/passwd").unwrap(), "~002Fetc~002Fpasswd");
/// assert_eq!(encode_session_id("..").unwrap(), "~002E~002E");
/// assert_eq!(encode_session_id("😀").unwrap(), "~D83D~DE00");
/// ```
pub fn encode_session_id(id: &str) -> Result<String, JsonlPathError> {
    match id {
        "" => return Err(JsonlPathError::EmptyId),
        "." => return Ok("~002E".to_owned()),
        ".." => return Ok("~002E~002E".to_owned()),
        _ => {}
    }
    let mut out = String::with_capacity(id.len());
    for u in id.encode_utf16() {
        if safe_unit(u) {
            out.push(char::from(u as u8));
        } else {
            push_escaped(&mut out, u);
        }
    }
    Ok(out)
}

/// dsh's `projectKey(cwd)`: runs of `/`, `\` and `:` become one `-`, safe units pass, others
/// become `~XXXX`, leading `-` are stripped (empty → `root`), truncated to 251 code units and
/// wrapped as `--<slug>--`. Lossy on purpose (different cwds may share a directory).
///
/// ```
/// use sessionlog::interop::jsonl::project_key;
/// assert_eq!(project_key("/Users/qyj/work/deepseek-harness").unwrap(), "--Users-qyj-work-deepseek-harness--");
/// assert_eq!(project_key("C:\\work\\agent").unwrap(), "--C-work-agent--");
/// assert_eq!(project_key("/").unwrap(), "--root--");
/// ```
pub fn project_key(cwd: &str) -> Result<String, JsonlPathError> {
    if cwd.is_empty() {
        return Err(JsonlPathError::EmptyCwd);
    }
    let mut slug = String::with_capacity(cwd.len());
    let mut in_separator = false;
    for u in cwd.encode_utf16() {
        if matches!(u, 0x2F | 0x5C | 0x3A) {
            if !in_separator {
                slug.push('-');
            }
            in_separator = true;
            continue;
        }
        in_separator = false;
        if safe_unit(u) {
            slug.push(char::from(u as u8));
        } else {
            push_escaped(&mut slug, u);
        }
    }
    let trimmed = slug.trim_start_matches('-');
    let body = if trimmed.is_empty() { "root" } else { trimmed };
    // The slug is ASCII: code units are bytes.
    let body = &body[..body.len().min(251)];
    Ok(format!("--{body}--"))
}

/// The project directory of a session: `_no-cwd` or [`project_key`]`(cwd)`.
pub fn project_dir(cwd: Option<&str>) -> Result<String, JsonlPathError> {
    match cwd {
        None => Ok(NO_CWD_DIR.to_owned()),
        Some(c) => project_key(c),
    }
}

/// Where dsh keeps a session, relative to its JSONL root:
/// `<project dir>/<encoded id>/session.jsonl[.zstd]`.
///
/// ```
/// use sessionlog::event::SessionHeader;
/// use sessionlog::interop::jsonl::{session_relative_path, Compression};
/// let mut h = SessionHeader::new("s1", 1000);
/// h.cwd = Some("/work".into());
/// assert_eq!(session_relative_path(&h, Compression::None).unwrap().to_str(), Some("--work--/s1/session.jsonl"));
/// ```
pub fn session_relative_path(
    header: &SessionHeader,
    compression: Compression,
) -> Result<PathBuf, JsonlPathError> {
    let mut p = PathBuf::from(project_dir(header.cwd.as_deref())?);
    p.push(encode_session_id(&header.id)?);
    p.push(compression.file_name());
    Ok(p)
}

/// [`session_relative_path`] under `root`.
pub fn session_path(
    root: &Path,
    header: &SessionHeader,
    compression: Compression,
) -> Result<PathBuf, JsonlPathError> {
    Ok(root.join(session_relative_path(header, compression)?))
}
