//! Turning a panic inside redb (a damaged file) into [`IndexError::Damaged`], quietly.

use super::damaged;
use crate::error::IndexError;
use std::cell::Cell;
use std::panic::AssertUnwindSafe;

thread_local! {
    /// Depth of [`guarded`] calls on this thread: panics inside them are not printed.
    static GUARDED: Cell<u32> = const { Cell::new(0) };
}

/// Installs (once) a panic hook that stays quiet for panics [`guarded`] turns into errors and
/// hands every other panic to the hook that was installed before.
fn quiet_guarded_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.with(Cell::get) == 0 {
                previous(info);
            }
        }));
    });
}

/// Runs a redb call, turning a panic inside redb (a damaged file can make it hit an
/// `unreachable!` or index out of bounds) into [`IndexError::Damaged`].
pub(super) fn guarded<T>(
    table: &'static str,
    f: impl FnOnce() -> Result<T, IndexError>,
) -> Result<T, IndexError> {
    quiet_guarded_panics();
    GUARDED.with(|g| g.set(g.get() + 1));
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(g.get().saturating_sub(1)));
    match result {
        Ok(r) => r,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            Err(damaged(table, format!("redb failed reading it: {message}")))
        }
    }
}
