//! Process-wide wake-ups: a release in this process wakes the waiters of this process at once.
//!
//! Keyed by the lock file's path under the canonical directory, so that every provider of
//! the process opened on the same directory (under whatever spelling) shares them. Waiters in
//! other processes cannot be notified this way; they notice a release by polling (see the
//! crate docs).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use tokio::sync::Notify;

#[derive(Default)]
struct Registry {
    wakers: HashMap<PathBuf, Weak<Notify>>,
    /// How many entries were alive at the last sweep of dead ones.
    live_at_sweep: usize,
}

fn registry() -> &'static Mutex<Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

/// The wake-up of the lock file at `path`, for a waiter to wait on while it holds the `Arc`.
pub(crate) fn interest(path: &Path) -> Arc<Notify> {
    let mut registry = registry().lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(notify) = registry.wakers.get(path).and_then(Weak::upgrade) {
        return notify;
    }
    let notify = Arc::new(Notify::new());
    registry.wakers.insert(path.to_path_buf(), Arc::downgrade(&notify));
    // Drop the entries nobody waits on any more, once they are half of the map.
    if registry.wakers.len() > 2 * registry.live_at_sweep.max(32) {
        registry.wakers.retain(|_, weak| weak.strong_count() > 0);
        registry.live_at_sweep = registry.wakers.len();
    }
    notify
}

/// Wakes every waiter of this process on the lock file at `path`.
pub(crate) fn notify(path: &Path) {
    let notify = {
        let registry = registry().lock().unwrap_or_else(PoisonError::into_inner);
        registry.wakers.get(path).and_then(Weak::upgrade)
    };
    if let Some(notify) = notify {
        notify.notify_waiters();
    }
}
