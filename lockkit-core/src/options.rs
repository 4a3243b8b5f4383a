//! Per-call options and the deadline they turn into.

use std::time::{Duration, Instant};

/// How long an acquisition may wait for another owner to release the lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wait {
    /// Do not wait: fail at once when another owner holds the lock or is queued before us.
    No,
    /// Wait at most this long. A zero duration behaves like [`Wait::No`], and a duration too
    /// large to add to the clock behaves like [`Wait::Forever`].
    Timeout(Duration),
    /// Wait until the lock is granted or the future is dropped.
    #[default]
    Forever,
}

/// Options for one acquisition: start from `AcquireOptions::default()` and change what you
/// need with the `with_*` methods (the struct is `#[non_exhaustive]`, so that options can be
/// added without breaking callers).
///
/// ```
/// use std::time::Duration;
/// use lockkit_core::{AcquireOptions, Wait};
///
/// let options = AcquireOptions::default().with_timeout(Duration::from_secs(5));
/// assert_eq!(options.wait, Wait::Timeout(Duration::from_secs(5)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AcquireOptions {
    /// How long to wait for another owner; waits forever by default.
    pub wait: Wait,
    /// The longest the hold may last, counted from its grant; the provider's default
    /// (`max_hold`, none unless set) when `None`. Past it renewal stops, the guard is
    /// signalled lost with [`LossReason::MaxHoldReached`](crate::LossReason::MaxHoldReached),
    /// and the record expires with its lease (a backend whose holds have no lease frees it).
    /// It must be at least the backend's renewal interval
    /// ([`LockProvider::min_max_hold`](crate::LockProvider::min_max_hold)).
    pub max_hold: Option<Duration>,
}

impl AcquireOptions {
    /// Options that never wait on another owner, as used by `try_acquire`.
    #[must_use]
    pub fn no_wait() -> Self {
        Self { wait: Wait::No, max_hold: None }
    }

    /// Sets how long to wait.
    #[must_use]
    pub fn with_wait(mut self, wait: Wait) -> Self {
        self.wait = wait;
        self
    }

    /// Waits at most `timeout`.
    #[must_use]
    pub fn with_timeout(self, timeout: Duration) -> Self {
        self.with_wait(Wait::Timeout(timeout))
    }

    /// Caps the hold at `max_hold` from its grant, overriding the provider's default: a
    /// holder stuck in a loop stops being renewed, is told with
    /// [`LossReason::MaxHoldReached`](crate::LossReason::MaxHoldReached), and the next owner
    /// gets the lock once the lease runs out.
    #[must_use]
    pub fn with_max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }
}

/// The point in time until which a backend may wait, derived once from [`Wait`] at the start
/// of an acquisition. For implementors (it is re-exported from [`backend`](crate::backend)).
///
/// Deliberately exhaustive: a backend must handle every case, and a new case must not
/// compile silently into one of the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// Do not wait at all.
    Now,
    /// Wait until this instant.
    At(Instant),
    /// Wait without limit.
    Never,
}

impl Deadline {
    /// Turns a [`Wait`] into a deadline counted from `start`. Never panics: a timeout too
    /// large for the clock becomes [`Deadline::Never`].
    pub fn from_wait(wait: Wait, start: Instant) -> Self {
        match wait {
            Wait::No => Self::Now,
            Wait::Timeout(timeout) if timeout.is_zero() => Self::Now,
            Wait::Timeout(timeout) => start.checked_add(timeout).map_or(Self::Never, Self::At),
            Wait::Forever => Self::Never,
        }
    }

    /// Whether the acquisition may wait at all.
    pub fn may_wait(self) -> bool {
        !matches!(self, Self::Now)
    }

    /// The instant, when the deadline is a finite one in the future or past.
    pub fn instant(self) -> Option<Instant> {
        match self {
            Self::At(at) => Some(at),
            Self::Now | Self::Never => None,
        }
    }

    /// Whether the deadline has passed at `now`.
    pub fn has_passed(self, now: Instant) -> bool {
        match self {
            Self::Now => true,
            Self::At(at) => now >= at,
            Self::Never => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_timeouts_become_never_instead_of_panicking() {
        let now = Instant::now();
        assert_eq!(Deadline::from_wait(Wait::Timeout(Duration::MAX), now), Deadline::Never);
        assert_eq!(Deadline::from_wait(Wait::Timeout(Duration::ZERO), now), Deadline::Now);
    }
}
