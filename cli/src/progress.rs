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
        if let Ok(style) = ProgressStyle::with_template("{prefix:>9} [{bar:20}] {wide_msg}") {
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
        } else if t.total_events > 0 {
            (t.events, t.total_events)
        } else {
            (t.sessions, t.total_sessions)
        };
        if bar.prefix() != phase {
            // A new phase: its rate counts from here.
            bar.reset_elapsed();
            bar.set_prefix(phase.to_owned());
        }
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
        // Bytes and their rate when there are any (an SQLite export knows its size only at
        // the end: events and their rate then).
        let (amount, rate) = if t.bytes > 0 {
            let amount = if t.total_bytes > 0 {
                let (total, unit) = scaled(t.total_bytes as f64);
                let (done, _) = scaled_as(t.bytes as f64, unit);
                format!("{done}/{total} {unit}")
            } else {
                bytes(t.bytes as f64)
            };
            (amount, rate)
        } else if elapsed > 0.0 {
            (
                String::new(),
                format!("{:.0} events/s", t.events as f64 / elapsed),
            )
        } else {
            (String::new(), "-".to_owned())
        };
        bar.set_message(format!(
            "{} sessions  {} events  {amount}{}{rate}  {}",
            of(t.sessions, t.total_sessions, &|n| n.to_string()),
            of(t.events, t.total_events, &|n| n.to_string()),
            if amount.is_empty() { "" } else { "  " },
            super::output::human_truncated(t.session, 40, true)
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
    let (number, unit) = scaled(n);
    format!("{number} {unit}")
}

/// `n` bytes as a number and the unit that suits it.
fn scaled(n: f64) -> (String, &'static str) {
    let unit = if n < 1000.0 {
        "B"
    } else if n < 1e6 {
        "KB"
    } else if n < 1e9 {
        "MB"
    } else {
        "GB"
    };
    scaled_as(n, unit)
}

/// `n` bytes as a number of `unit`s.
fn scaled_as(n: f64, unit: &'static str) -> (String, &'static str) {
    let number = match unit {
        "B" => format!("{n:.0}"),
        "KB" => format!("{:.1}", n / 1e3),
        "MB" => format!("{:.1}", n / 1e6),
        _ => format!("{:.2}", n / 1e9),
    };
    (number, unit)
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
