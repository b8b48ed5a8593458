//! What the commands print: text made safe for a terminal, and a closed stdout.
//!
//! - Every id, title, cwd, path, event type or message shown to a human goes through
//!   [`human`], which escapes control characters, so a hostile session id cannot drive the
//!   terminal (ESC/OSC sequences, C1 controls, bidi overrides). `--json` output is JSON text:
//!   serde_json escapes C0 controls itself, and [`json_text`] escapes DEL, C1 and bidi controls
//!   (which JSON allows raw) as `\uXXXX`, which leaves the value unchanged.
//! - Standard output closed by its reader (`sessionlog list | head -1`) ends the command
//!   quietly with exit status 0: the reader asked for no more. Work already done (an import is
//!   written and durable before its report is printed) stays done. Commands print with
//!   [`say!`](crate::say), which turns `EPIPE` into [`StdoutClosed`]; a `println!` elsewhere
//!   (outside `src/cli`) is caught by [`catch_closed_pipe_panics`].

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};

/// True for the characters [`human`] escapes: C0 controls (including newline and tab), DEL,
/// C1 controls, and the bidirectional-text controls (U+061C, U+200E, U+200F, U+202A to U+202E,
/// U+2066 to U+2069) that can make text display in another order than it is stored.
pub fn is_unsafe_for_terminal(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{61c}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}')
}

/// `s` made safe to print on a terminal: each character [`is_unsafe_for_terminal`] is
/// replaced by `\n`, `\r`, `\t` or `\u{XX}` (Rust's notation); everything else, including
/// backslashes, is unchanged. Borrows when there is nothing to escape.
///
/// ```
/// use crate::human;
/// assert_eq!(human("s1"), "s1");
/// assert_eq!(human("evil\u{1b}]0;owned\u{7}"), "evil\\u{1b}]0;owned\\u{7}");
/// assert_eq!(human("a\nb\u{202e}c\u{9b}"), "a\\nb\\u{202e}c\\u{9b}");
/// ```
pub fn human(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe_for_terminal) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_unsafe_for_terminal(c) => {
                out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The inverse of [`human`]: `s` with its `\n`, `\r`, `\t` and `\u{XX}` escapes read back;
/// `None` when it holds none (other backslashes stay as they are).
///
/// ```
/// use crate::unhuman;
/// assert_eq!(unhuman("a\\u{0}b").as_deref(), Some("a\0b"));
/// assert_eq!(unhuman("a\\nb\\u{202e}").as_deref(), Some("a\nb\u{202e}"));
/// assert_eq!(unhuman("plain\\x"), None);
/// ```
pub fn unhuman(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut changed = false;
    let mut rest = s;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let (c, len) = match tail.as_bytes().get(1) {
            Some(b'n') => (Some('\n'), 2),
            Some(b'r') => (Some('\r'), 2),
            Some(b't') => (Some('\t'), 2),
            Some(b'u') if tail.as_bytes().get(2) == Some(&b'{') => match tail.find('}') {
                Some(end) => (
                    u32::from_str_radix(&tail[3..end], 16)
                        .ok()
                        .and_then(char::from_u32),
                    end + 1,
                ),
                None => (None, 1),
            },
            _ => (None, 1),
        };
        match c {
            Some(c) => {
                out.push(c);
                changed = true;
                rest = &tail[len..];
            }
            None => {
                out.push('\\');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    changed.then_some(out)
}

/// A session id named on the command line, as the store knows it: `id` itself when the store
/// has it, else `id` read back from the escapes `list` prints ([`human`]) when the store has
/// that (an id with a control character, e.g. a NUL, can be named as it is listed).
pub fn session_id(store: &sessionlog::Store, id: &str) -> String {
    if store.session_info(id).is_none()
        && let Some(listed) = unhuman(id)
        && store.session_info(&listed).is_some()
    {
        return listed;
    }
    id.to_owned()
}

/// [`human`] cut to at most `max` characters: when it is longer, its start (whole escapes,
/// never half of `\u{1b}`) and an ellipsis, then with `keep_end` a third of the room for its
/// end (so ids that differ only at the end stay apart).
pub fn human_truncated(s: &str, max: usize, keep_end: bool) -> String {
    let escaped = human(s);
    if escaped.chars().count() <= max {
        return escaped.into_owned();
    }
    let pieces: Vec<String> = s
        .chars()
        .map(|c| {
            let mut buf = [0u8; 4];
            human(c.encode_utf8(&mut buf)).into_owned()
        })
        .collect();
    let room = max.saturating_sub(1);
    let tail_room = if keep_end { room / 3 } else { 0 };
    let (mut tail, mut tail_width) = (Vec::new(), 0);
    for piece in pieces.iter().rev() {
        let w = piece.chars().count();
        if tail_width + w > tail_room {
            break;
        }
        tail.push(piece.as_str());
        tail_width += w;
    }
    let (mut out, mut width) = (String::new(), 0);
    for piece in &pieces[..pieces.len() - tail.len()] {
        let w = piece.chars().count();
        if width + w > room - tail_width {
            break;
        }
        out.push_str(piece);
        width += w;
    }
    out.push('…');
    out.extend(tail.into_iter().rev());
    out
}

/// [`human`] for a path.
pub fn human_path(p: &std::path::Path) -> String {
    human(&p.to_string_lossy()).into_owned()
}

/// [`human`] applied to each line of a multi-line message (the line breaks are kept).
pub fn human_lines(s: &str) -> String {
    s.split('\n').map(human).collect::<Vec<_>>().join("\n")
}

/// JSON text for standard output: the characters [`is_unsafe_for_terminal`] that JSON
/// allows unescaped inside strings (DEL, C1 and bidi controls; serde_json already escapes C0)
/// written as `\uXXXX`. Outside strings JSON text holds only ASCII, so the value is unchanged.
///
/// ```
/// use crate::json_text;
/// assert_eq!(json_text(r#"{"id":"a\u001b"}"#), r#"{"id":"a\u001b"}"#);
/// assert_eq!(json_text("{\"id\":\"a\u{9b}b\u{202e}\"}"), r#"{"id":"a\u009bb\u202e"}"#);
/// ```
pub fn json_text(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe_for_terminal) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe_for_terminal(c) {
            // C0 controls never reach here from serde_json; escaping them is also valid JSON.
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Standard output was closed by its reader (`EPIPE`): the command stops quietly, exit 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("standard output was closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// A failed write to standard output as a command error: [`StdoutClosed`] for a closed pipe,
/// otherwise a message naming the cause (a full disk behind a redirection, ...).
pub fn stdout_error(e: std::io::Error) -> Box<dyn std::error::Error> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Box::new(StdoutClosed)
    } else {
        format!("writing to standard output failed: {e}").into()
    }
}

/// True when `e` is (or wraps, as an I/O error) a closed standard output.
pub fn is_stdout_closed(e: &(dyn std::error::Error + 'static)) -> bool {
    e.is::<StdoutClosed>()
}

/// Prints a line to standard output; a failure returns from the enclosing function with
/// [`stdout_error`] (so a closed pipe ends the command quietly).
#[macro_export]
#[doc(hidden)]
macro_rules! say {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        writeln!(::std::io::stdout().lock(), $($arg)*)
            .map_err($crate::output::stdout_error)?
    }};
}

static PIPE_CLOSED: AtomicBool = AtomicBool::new(false);

/// Installs a panic hook that recognises the panic of `println!`/`eprintln!` on a closed pipe
/// (code outside `src/cli`, such as the benchmark reports, prints that way): it prints nothing
/// and records the fact, so [`closed_pipe_panicked`] lets the caller exit quietly. Every other
/// panic goes to the previous hook as before.
pub fn catch_closed_pipe_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        let printing = message.starts_with("failed printing to stdout")
            || message.starts_with("failed printing to stderr");
        if printing && message.contains("Broken pipe") {
            PIPE_CLOSED.store(true, Ordering::SeqCst);
            return;
        }
        previous(info);
    }));
}

/// True after a `println!`/`eprintln!` panicked on a closed pipe (see
/// [`catch_closed_pipe_panics`]).
pub fn closed_pipe_panicked() -> bool {
    PIPE_CLOSED.load(Ordering::SeqCst)
}
