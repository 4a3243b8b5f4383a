//! [`RenewalStats`]: what the renewal rounds of a provider whose holds are leases have done,
//! the same figures for every backend that renews in rounds (Redis, PostgreSQL), read from
//! a backend's [`RenewalCounters`].

use std::sync::atomic::{AtomicU64, Ordering};

/// What the renewal rounds of one provider have done since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenewalStats {
    /// Renewal rounds completed (one per interval while something is held, plus quick
    /// retries after a failure).
    pub ticks: u64,
    /// Round trips the rounds made: each carries a batch of renewals.
    pub round_trips: u64,
    /// Holds renewed successfully, by the rounds and by confirmations outside them (holds
    /// handed over by a release).
    pub renewed: u64,
}

impl RenewalStats {
    /// The figures of a backend's counters.
    pub fn new(ticks: u64, round_trips: u64, renewed: u64) -> Self {
        Self { ticks, round_trips, renewed }
    }
}

/// The counters behind [`RenewalStats`], bumped by a backend's renewal rounds as they go and
/// read by its provider's `renewal_stats()`. Each figure is counted on its own (relaxed): a
/// reader may see a round's round trips a moment before the round itself.
#[derive(Debug, Default)]
pub struct RenewalCounters {
    ticks: AtomicU64,
    round_trips: AtomicU64,
    renewed: AtomicU64,
}

impl RenewalCounters {
    /// One renewal round completed, after `round_trips` round trips.
    pub fn round(&self, round_trips: u64) {
        self.round_trips.fetch_add(round_trips, Ordering::Relaxed);
        self.ticks.fetch_add(1, Ordering::Relaxed);
    }

    /// Round trips of a round that did not complete (it is tried again).
    pub fn round_trips(&self, round_trips: u64) {
        self.round_trips.fetch_add(round_trips, Ordering::Relaxed);
    }

    /// One hold renewed.
    pub fn renewed(&self) {
        self.renewed.fetch_add(1, Ordering::Relaxed);
    }

    /// The figures so far.
    pub fn stats(&self) -> RenewalStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        RenewalStats::new(load(&self.ticks), load(&self.round_trips), load(&self.renewed))
    }
}
