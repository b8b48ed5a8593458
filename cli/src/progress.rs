//! Progress bars for long operations: drawn on stderr when it is a terminal, silent otherwise.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar that exists only when stderr is a terminal.
#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar over `total` units (a spinner when `total` is 0) labelled `label`.
    pub fn new(label: &str, total: u64) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let bar = if total == 0 {
            let bar = ProgressBar::new_spinner();
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            bar
        } else {
            let bar = ProgressBar::new(total);
            if let Ok(style) =
                ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} {wide_msg}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        };
        bar.set_prefix(label.to_owned());
        Progress { bar: Some(bar) }
    }

    /// A bar for an import or export, updated with [`Progress::transfer`].
    pub fn for_transfer(label: &str) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let bar = ProgressBar::new(1);
        if let Ok(style) = ProgressStyle::with_template("{prefix:>10} [{bar:30}] {wide_msg}") {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(label.to_owned());
        bar.set_message("finding the sessions");
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        Progress { bar: Some(bar) }
    }

    /// Sets the position, total and message.
    pub fn set(&self, label: &str, done: u64, total: u64, message: &str) {
        if let Some(bar) = &self.bar {
            bar.set_prefix(label.to_owned());
            bar.set_length(total);
            bar.set_position(done);
            bar.set_message(super::output::human(message).into_owned());
        }
    }

    /// Sets a transfer's state (import or export): the phase as the label, the bar over bytes
    /// when their total is known (else over sessions), and a message with the counts, the
    /// bytes, the totals, the rate and the session just handled.
    pub fn transfer(&self, phase: &str, t: &Transfer<'_>) {
        let Some(bar) = &self.bar else { return };
        let (pos, len) = if t.total_bytes > 0 {
            (t.bytes, t.total_bytes)
        } else {
            (t.sessions, t.total_sessions)
        };
        bar.set_prefix(phase.to_owned());
        bar.set_length(len.max(1));
        bar.set_position(pos.min(len.max(1)));
        let elapsed = bar.elapsed().as_secs_f64();
        let rate = if elapsed > 0.0 {
            format!("{}/s", bytes(t.bytes as f64 / elapsed))
        } else {
            "-".to_owned()
        };
        let of = |n: u64, total: u64, show: &dyn Fn(u64) -> String| {
            if total > 0 {
                format!("{}/{}", show(n), show(total))
            } else {
                show(n)
            }
        };
        bar.set_message(format!(
            "{} sessions  {} events  {}  {rate}  {}",
            of(t.sessions, t.total_sessions, &|n| n.to_string()),
            of(t.events, t.total_events, &|n| n.to_string()),
            of(t.bytes, t.total_bytes, &|n| bytes(n as f64)),
            super::output::human(t.session)
        ));
    }

    /// Runs `f` with the bar hidden (to print lines without tearing it).
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    /// Sets the message only.
    pub fn message(&self, message: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(super::output::human(message).into_owned());
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Where an import or export is: sessions, events and bytes done, and their totals (0 when
/// not known yet).
#[derive(Debug, Default, Clone, Copy)]
pub struct Transfer<'a> {
    /// Sessions done.
    pub sessions: u64,
    /// Sessions in all.
    pub total_sessions: u64,
    /// Events done.
    pub events: u64,
    /// Events in all (0: unknown).
    pub total_events: u64,
    /// Bytes done.
    pub bytes: u64,
    /// Bytes in all (0: unknown).
    pub total_bytes: u64,
    /// The session just handled.
    pub session: &'a str,
}

/// `n` bytes for a human: `512 B`, `3.4 KB`, `12.0 MB`, `1.25 GB`.
pub fn bytes(n: f64) -> String {
    if n < 1000.0 {
        format!("{n:.0} B")
    } else if n < 1e6 {
        format!("{:.1} KB", n / 1e3)
    } else if n < 1e9 {
        format!("{:.1} MB", n / 1e6)
    } else {
        format!("{:.2} GB", n / 1e9)
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
