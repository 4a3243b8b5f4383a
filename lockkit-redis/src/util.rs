//! Small helpers shared by the modules of this crate.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

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
}
