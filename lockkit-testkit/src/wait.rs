//! Bounded waits for tests and fixtures: every wait is on a condition, has a bound, and says
//! what it waited for when the bound passes. No sleep-and-hope.
//!
//! ```no_run
//! # async fn demo(lock: lockkit_core::LockHandle) {
//! use std::time::Duration;
//! use lockkit_testkit::wait::{eventually, within};
//!
//! let guard = within(Duration::from_secs(3), "the acquisition", lock.acquire()).await;
//! eventually(Duration::from_secs(3), "the guard to say it holds", || async { guard.as_ref().is_ok_and(|g| g.is_held()) })
//!     .await;
//! # }
//! ```

use std::future::Future;
use std::time::Duration;

use lockkit_core::{LeaderEvent, Observer};
use tokio::time::Instant;

/// How often [`eventually`] asks its condition again.
pub const EVENTUALLY_EVERY: Duration = Duration::from_millis(10);

/// Awaits `future`, failing the test with `what` when it takes longer than `bound`.
///
/// # Panics
///
/// When `future` does not complete within `bound`: "`what` did not happen within `bound`".
pub async fn within<T>(bound: Duration, what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(bound, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what} did not happen within {bound:?}"),
    }
}

/// Asks `condition` every 10 ms until it holds, failing the test when it still does not
/// after `bound`.
///
/// # Panics
///
/// When `condition` is still false after `bound`: "`what` did not happen within `bound`".
pub async fn eventually<F, Fut>(bound: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let outcome = poll(bound, EVENTUALLY_EVERY, || {
        let next = condition();
        async move { if next.await { Ok(()) } else { Err(()) } }
    })
    .await;
    if outcome.is_err() {
        panic!("{what} did not happen within {bound:?}");
    }
}

/// Asks `probe` every 10 ms until it answers `Some`, and returns that value: [`eventually`]
/// for a condition that also finds something (a process id, a leader, a reply).
///
/// # Panics
///
/// When `probe` still answers `None` after `bound`: "`what` did not happen within `bound`".
pub async fn eventually_some<T, F, Fut>(bound: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let outcome = poll(bound, EVENTUALLY_EVERY, || {
        let next = probe();
        async move { next.await.ok_or(()) }
    })
    .await;
    match outcome {
        Ok(value) => value,
        Err(()) => panic!("{what} did not happen within {bound:?}"),
    }
}

/// The next event of an election's `observer` within `bound`, passing over the failures an
/// observer reports while it is cut off from its store (each must be retryable).
///
/// # Panics
///
/// When no event comes within `bound`, when the observer fails with an error that is not
/// retryable, or when its stream ends.
pub async fn next_leader_event(observer: &mut Observer, bound: Duration, what: &str) -> LeaderEvent {
    within(bound, what, async {
        loop {
            match observer.next().await {
                Some(Ok(event)) => return event,
                Some(Err(error)) => assert!(error.is_retryable(), "{what}: the observer failed: {error}"),
                None => panic!("{what}: the observer's stream ended"),
            }
        }
    })
    .await
}

/// Asks `probe` every `every` until it returns `Ok`, and returns that; returns the last `Err`
/// once `bound` has passed. The probe runs at least once, and the wait ends with its answer
/// (a probe that takes long is not cut short).
///
/// # Errors
///
/// The probe's last error, when it did not succeed within `bound`.
pub async fn poll<T, E, F, Fut>(bound: Duration, every: Duration, mut probe: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + bound;
    loop {
        let last = match probe().await {
            Ok(value) => return Ok(value),
            Err(last) => last,
        };
        if Instant::now() >= deadline {
            return Err(last);
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn poll_returns_the_first_success_or_the_last_error() {
        let mut calls = 0;
        let found = poll(Duration::from_secs(5), Duration::from_millis(1), || {
            calls += 1;
            let now = calls;
            async move { if now == 3 { Ok(now) } else { Err(now) } }
        })
        .await;
        assert_eq!(found, Ok(3));
        let mut calls = 0;
        let missed: Result<(), u32> = poll(Duration::from_millis(30), Duration::from_millis(10), || {
            calls += 1;
            let now = calls;
            async move { Err(now) }
        })
        .await;
        // Asked until the bound passed, and the last answer returned.
        assert!(matches!(missed, Err(last) if last >= 2 && last == calls), "{missed:?} after {calls} calls");
    }

    #[tokio::test]
    #[should_panic(expected = "the flag did not happen within 50ms")]
    async fn eventually_fails_with_what_it_waited_for() {
        eventually(Duration::from_millis(50), "the flag", || async { false }).await;
    }

    #[tokio::test]
    #[should_panic(expected = "the reply did not happen within 50ms")]
    async fn within_fails_with_what_it_waited_for() {
        within(Duration::from_millis(50), "the reply", std::future::pending::<()>()).await;
    }
}
