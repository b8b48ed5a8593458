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

    /// Sets the position, total and message.
    pub fn set(&self, label: &str, done: u64, total: u64, message: &str) {
        if let Some(bar) = &self.bar {
            bar.set_prefix(label.to_owned());
            bar.set_length(total);
            bar.set_position(done);
            bar.set_message(super::output::human(message).into_owned());
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

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
