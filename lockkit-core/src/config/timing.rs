//! The timing settings of holds, declared once in one wording for every backend: the lease
//! (under the store's own name for it), the renewal interval, the response and connect
//! timeouts, and the drift margin. A backend takes the ones its store has, adds its defaults
//! and bounds (`LEASE_KEY.default(…)`), and checks them with [`Options`](super::Options)
//! ([`renew_every`](super::Options::renew_every), [`below`](super::Options::below),
//! [`within`](super::Options::within)), whose messages every backend shares.
//!
//! ```
//! use std::time::Duration;
//! use lockkit_core::config::{Key, MAX_DURATION, timing};
//!
//! const TTL: Key<Duration> = timing::lease("ttl", Duration::from_secs(10), Duration::from_secs(2));
//! const DRIFT: Key<Duration> = timing::DRIFT.default_said("a tenth of the lease").range_said("below half the lease");
//! # let _ = (TTL, DRIFT, MAX_DURATION);
//! ```

use std::time::Duration;

use super::MAX_DURATION;
use super::key::Key;
use crate::{Error, Result};

/// The shortest renewal interval, response timeout and connect timeout accepted.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// The lease under the store's name for it (`lease`, `ttl`, `session_timeout`): `default` when
/// none is given, at least `min` (the shortest the store honours), at most a day.
pub const fn lease(name: &'static str, default: Duration, min: Duration) -> Key<Duration> {
    Key::new(name, "the lease: how long a dead holder's locks stay taken after its last renewal or heartbeat")
        .default(default)
        .range(min, MAX_DURATION)
}

/// How often held locks are renewed: a third of the lease unless given, checked by
/// [`Options::renew_every`](super::Options::renew_every).
pub const RENEW_EVERY: Key<Duration> = Key::new("renew_every", "how often held locks are renewed")
    .default_said("a third of the lease")
    .range_said("1ms to below the lease");

/// How long one request may go unanswered; a backend gives its default and range.
pub const RESPONSE_TIMEOUT: Key<Duration> =
    Key::new("response_timeout", "how long one request may go unanswered before its outcome counts as unknown");

/// The margin for clock drift between this host and the store; a backend gives its default
/// and its bound, a share of the lease checked with [`Options::below`](super::Options::below).
pub const DRIFT: Key<Duration> =
    Key::new("drift", "the margin for clock drift between this host and the store, taken off every hold's deadline");

/// How long connecting to a server may take, at least 1 ms; a backend gives its default.
pub const CONNECT_TIMEOUT: Key<Duration> =
    Key::new("connect_timeout", "how long connecting to a server may take").at_least(MIN_INTERVAL);

/// `value` of `key` when it lies below `limit`, a share of another setting that `limit_said`
/// names ("a third of the lease"): the check of a margin, such as the drift, that must leave
/// room inside the lease. [`Options::below`](super::Options::below) makes it when building; a
/// backend makes it again for a lease known later (a session timeout the server granted).
///
/// # Errors
///
/// [`Error::InvalidConfig`] of `backend`: "KEY is VALUE; it must be below LIMIT_SAID (LIMIT)",
/// or "… at most 86400s" for a value above [`MAX_DURATION`].
pub fn check_below(
    backend: &'static str,
    key: &Key<Duration>,
    value: Duration,
    limit: Duration,
    limit_said: &str,
) -> Result<Duration> {
    let name = key.name();
    if value > MAX_DURATION {
        return Err(Error::invalid_config(
            backend,
            format!("{name} is {value:?}; it must be at most {MAX_DURATION:?}"),
        ));
    }
    if value < limit {
        return Ok(value);
    }
    Err(Error::invalid_config(backend, format!("{name} is {value:?}; it must be below {limit_said} ({limit:?})")))
}
