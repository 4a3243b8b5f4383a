//! Small helpers shared by the modules of this crate.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::AbortHandle;

/// Locks a mutex, recovering the data if a panic poisoned it: no critical section in this
/// crate leaves its data inconsistent at any step.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Exponential backoff between retries of calls that failed: 25 ms, doubling up to a cap.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(25);

    /// A backoff whose delays never exceed `max`.
    pub(crate) fn up_to(max: Duration) -> Self {
        Self { next: Self::FIRST.min(max), max }
    }

    /// The delay before the next retry; each call doubles the following one.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        delay
    }

    /// Starts over after a success.
    pub(crate) fn reset(&mut self) {
        self.next = Self::FIRST.min(self.max);
    }
}

/// The runtime something runs on (a connection's driver task, a background task of ours),
/// watched: a parked task on it keeps a channel open, and the runtime's shutdown, which drops
/// every task it owns, closes it. What belongs to a runtime that has gone is rebuilt on the
/// current one at its next use.
#[derive(Debug)]
pub(crate) struct Home {
    gone: watch::Receiver<()>,
    sentinel: AbortHandle,
}

impl Home {
    /// The current runtime, or `None` outside every runtime.
    pub(crate) fn here() -> Option<Self> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (alive, gone) = watch::channel(());
        let sentinel = runtime.spawn(async move {
            // Dropped, and the channel closed, when the runtime drops the task at shutdown.
            let _alive = alive;
            std::future::pending::<()>().await;
        });
        Some(Self { gone, sentinel: sentinel.abort_handle() })
    }

    /// Whether the runtime has shut down.
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.has_changed().is_err()
    }

    /// Resolves when the runtime shuts down; may be awaited on any runtime.
    pub(crate) async fn gone(&self) {
        let mut gone = self.gone.clone();
        // Nothing is ever sent: `changed` returns only when the sender is dropped.
        while gone.changed().await.is_ok() {}
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        self.sentinel.abort();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_and_resets() {
        let mut backoff = Backoff::up_to(Duration::from_millis(120));
        let delays: Vec<u128> = (0..4).map(|_| backoff.next_delay().as_millis()).collect();
        assert_eq!(delays, [25, 50, 100, 120]);
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_millis(25));
        let mut long = Backoff::up_to(Duration::MAX);
        for _ in 0..200 {
            long.next_delay();
        }
    }

    #[test]
    fn a_home_is_gone_once_its_runtime_shut_down() {
        let first = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let home = first.block_on(async { Home::here() }).unwrap();
        assert!(!home.is_gone(), "alive while its runtime lives, polled or not");
        drop(first);
        assert!(home.is_gone());
        let second = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        second.block_on(async { tokio::time::timeout(Duration::from_secs(1), home.gone()).await }).unwrap();
        assert!(Home::here().is_none(), "no home outside a runtime");
    }
}
