//! What `lockkit bench` knows of one backend, its [`Profile`]: the floor (the raw round trip of
//! the same client library to the same server, measured in the same run), the targets its
//! figures are held to, and what only it has (a provider of its own for the upkeep phase, the
//! server's time per script, what a run leaves behind). Each backend writes its profile in one
//! file of `profiles/`, registered in one table; the phases read the profile and never match
//! a backend's name.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use lockkit::{LockProvider, RenewalStats};

use super::url::Url;
use crate::exit::Failure;

/// A boxed future, for the asynchronous parts of profiles and floors.
pub(crate) type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The targets a backend's figures are held to, each `None` where the backend has none. A
/// profile writes every field, or says [`Targets::NONE`] (there is no default), so a backend
/// added later decides.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Targets {
    /// Uncontended cycle p50: at most this many floor p50s.
    pub(crate) cycle: Option<f64>,
    /// Contended: the share of acquisitions passed to another client, at least.
    pub(crate) handoff_share: Option<f64>,
    /// Contended: hand-off p50, at most this many floor p50s.
    pub(crate) handoff: Option<f64>,
    /// Contended: wait max ÷ wait p50, at most.
    pub(crate) wait_spread: Option<f64>,
    /// Eight readers at once ÷ one reader, at least.
    pub(crate) readers_scaling: Option<f64>,
    /// Many locks at once ÷ one after another, at least.
    pub(crate) many_locks_speedup: Option<f64>,
    /// Client memory per held lock, at most, in bytes.
    pub(crate) memory_per_lock: Option<f64>,
    /// The server's time per acquire and per release script, at most, in µs.
    pub(crate) server_time_per_script: Option<f64>,
}

impl Targets {
    /// No target at all: a backend with no floor (no ratio to hold a figure to), or one whose
    /// figures are read against something else.
    pub(crate) const NONE: Targets = Targets {
        cycle: None,
        handoff_share: None,
        handoff: None,
        wait_spread: None,
        readers_scaling: None,
        many_locks_speedup: None,
        memory_per_lock: None,
        server_time_per_script: None,
    };
}

/// One kind of raw round trip a floor times: its JSON key and its label, each followed by
/// `p50` (and `p99` when asked).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FloorFigure {
    /// Whether this is the floor of every ratio (one kind of each floor is).
    pub(crate) main: bool,
    /// The JSON key before `_p50`: `ping`.
    pub(crate) key: &'static str,
    /// The label before ` p50`: `PING`.
    pub(crate) label: &'static str,
    /// Whether its p99 is reported too.
    pub(crate) p99: bool,
}

impl FloorFigure {
    /// The floor of every ratio, reported with its p50 and p99.
    pub(crate) const fn main(key: &'static str, label: &'static str) -> Self {
        Self { main: true, key, label, p99: true }
    }

    /// Another round trip, reported with its p50 and p99.
    pub(crate) const fn other(key: &'static str, label: &'static str) -> Self {
        Self { main: false, key, label, p99: true }
    }

    /// Another round trip, reported with its p50 only.
    pub(crate) const fn other_p50(key: &'static str, label: &'static str) -> Self {
        Self { main: false, key, label, p99: false }
    }
}

/// A floor's round trip to the server at `url` failed: the store is unavailable.
pub(crate) fn floor_failure(url: &Url, error: impl std::fmt::Display) -> Failure {
    Failure::new(crate::exit::UNAVAILABLE, format!("floor: {} failed: {error}", url.shown))
}

/// A floor: raw round trips of the backend's own client library to the store, on connections
/// of its own.
pub(crate) trait Floor: Send {
    /// What it is, for the report: `Redis PING on a plain connection of the redis crate`.
    fn describe(&self) -> &'static str;

    /// The kinds of round trip each sample times, in the order of the report; the one marked
    /// `main` is the floor of every ratio.
    fn figures(&self) -> &'static [FloorFigure];

    /// Times one round trip of each kind, in the order of [`figures`](Self::figures) (`None`
    /// for a kind this floor could not measure, such as a table it may not create).
    fn sample<'a>(&'a mut self, url: &'a Url) -> Boxed<'a, Result<Vec<Option<Duration>>, Failure>>;

    /// The server's own count of script calls and their microseconds so far, where the
    /// server counts them (Redis: `EVALSHA` in `INFO commandstats`); two readings around a
    /// phase that runs one script only give that script's time.
    fn script_totals(&mut self) -> Boxed<'_, Option<(u64, u64)>> {
        Box::pin(async { None })
    }

    /// The server's own time per call of the commands a lock uses (key, label, µs).
    fn server_time(&mut self) -> Boxed<'_, Vec<(&'static str, String, f64)>> {
        Box::pin(async { Vec::new() })
    }

    /// Removes what the locks called `names` left in the store once released (Redis: their
    /// fence counters); notes for the report.
    fn clean_up<'a>(&'a mut self, names: &'a [String]) -> Boxed<'a, Vec<String>> {
        let _ = names;
        Box::pin(async { Vec::new() })
    }
}

/// The renewal statistics of one provider so far.
pub(crate) type Renewals = Box<dyn Fn() -> RenewalStats + Send + Sync>;

/// The [`Renewals`] of `provider`, a backend's typed provider, read from the renewal
/// statistics `stats` gives (its `renewal_stats` method).
pub(crate) fn renewals<P: Send + Sync + 'static>(provider: P, stats: fn(&P) -> RenewalStats) -> Renewals {
    Box::new(move || stats(&provider))
}

/// A provider with quick renewals for the upkeep phase, and its renewal counters.
pub(crate) struct Upkeep {
    /// The provider the held locks are taken on.
    pub(crate) provider: LockProvider,
    /// Renewal rounds and round trips so far.
    pub(crate) renewals: Renewals,
    /// Reaches the store once (a health check), so that the connections are open before the
    /// resident memory is read.
    pub(crate) reach: Boxed<'static, Result<(), Failure>>,
}

/// What `lockkit bench` knows of one backend.
pub(crate) trait Profile: Sync {
    /// The backend, as its [`Scheme`](lockkit::config::Scheme) names it: the key of the
    /// table.
    fn backend(&self) -> &'static str;

    /// The targets its figures are held to; none by default: without a floor there is no
    /// ratio to hold a figure to.
    fn targets(&self) -> Targets {
        Targets::NONE
    }

    /// Opens the floor; `None` (the default) for a backend with no network round trip.
    fn floor<'a>(&'a self, url: &'a Url) -> Boxed<'a, Result<Option<Box<dyn Floor>>, Failure>> {
        let _ = url;
        Box::pin(async { Ok(None) })
    }

    /// A provider of its own for the upkeep phase, with quick renewals whose counters the
    /// phase reads; `None`: the phase holds its locks on the run's provider, for a while.
    fn upkeep(&self, url: &Url) -> Result<Option<Upkeep>, Failure> {
        let _ = url;
        Ok(None)
    }

    /// What the report says about the upkeep phase of this backend.
    fn upkeep_note(&self) -> Option<&'static str> {
        None
    }

    /// The URL option that sets how long a hold outlives its last renewal, and the short value
    /// the holds phase (`--holds`) gives it so that three leases pass quickly (`lease`, `3s`);
    /// `None` for a backend whose holds have no lease.
    fn short_lease(&self) -> Option<(&'static str, Duration)> {
        None
    }

    /// The renewal counters (rounds, round trips) of `provider`, a provider of this backend,
    /// where the backend counts them.
    fn renewal_counters(&self, provider: &LockProvider) -> Option<Renewals> {
        let _ = provider;
        None
    }

    /// What the holds phase reports about renewals this backend does not count: how its upkeep
    /// scales with the number of holds.
    fn renewal_note(&self) -> Option<&'static str> {
        None
    }

    /// A provider whose renewals do not fall into a phase that reads the server's time per
    /// script ([`Floor::script_totals`]); `None` where there is no such phase.
    fn quiet_provider(&self, url: &Url) -> Result<Option<LockProvider>, Failure> {
        let _ = url;
        Ok(None)
    }

    /// The most `--locks` a run may use, with why (a store that keeps a file per lock).
    fn max_locks(&self) -> Option<(u32, &'static str)> {
        None
    }

    /// Removes what the run's locks left outside the store's own records (lock files);
    /// notes for the report.
    fn clean_up(&self, url: &Url) -> Vec<String> {
        let _ = url;
        Vec::new()
    }
}
