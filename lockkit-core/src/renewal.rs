//! [`RenewalStats`]: what the renewal rounds of a provider whose holds are leases have done,
//! the same figures for every backend that renews in rounds (Redis, PostgreSQL), read from
//! a backend's [`RenewalCounters`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

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
    /// The longest time a round took to send and confirm each hold's renewal once: a hold
    /// is lost when rounds take longer than its lease less the drift margin.
    pub longest_round: Duration,
}

impl RenewalStats {
    /// The figures of a backend's counters.
    pub fn new(ticks: u64, round_trips: u64, renewed: u64) -> Self {
        Self { ticks, round_trips, renewed, longest_round: Duration::ZERO }
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
    /// The longest round so far, in microseconds.
    longest_round_us: AtomicU64,
    /// Whether the last round took longer than the renewal interval.
    behind: AtomicBool,
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

    /// A round sent and confirmed the renewal of each of its `holds` once in `took`, with
    /// `every` between the starts of two rounds. Keeps the longest round, and warns when
    /// rounds start to take longer than `every` (once, until one takes less again): the
    /// holds a round reaches last then wait longer than `every` for their renewal, and are
    /// lost once a round takes longer than the lease less the drift. Returns whether this
    /// round was the first of such a run.
    pub fn round_took(&self, backend: &'static str, holds: usize, took: Duration, every: Duration) -> bool {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.longest_round_us.fetch_max(micros, Ordering::Relaxed);
        let was_behind = self.behind.swap(took > every, Ordering::Relaxed);
        let newly = took > every && !was_behind;
        if newly {
            tracing::warn!(
                backend,
                holds,
                ?took,
                ?every,
                "a renewal round took longer than the renewal interval: holds are lost once a round takes longer than the lease less the drift; raise the lease, or spread the holds over more providers"
            );
        }
        newly
    }

    /// The figures so far.
    pub fn stats(&self) -> RenewalStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        RenewalStats {
            ticks: load(&self.ticks),
            round_trips: load(&self.round_trips),
            renewed: load(&self.renewed),
            longest_round: Duration::from_micros(load(&self.longest_round_us)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_round_is_kept_and_falling_behind_is_told_once_per_run() {
        let counters = RenewalCounters::default();
        let every = Duration::from_millis(100);
        assert!(!counters.round_took("test", 10, Duration::from_millis(30), every));
        assert!(counters.round_took("test", 10, Duration::from_millis(150), every), "the first round behind");
        assert!(!counters.round_took("test", 10, Duration::from_millis(120), every), "still behind: told already");
        assert!(!counters.round_took("test", 10, Duration::from_millis(40), every));
        assert!(counters.round_took("test", 10, Duration::from_millis(101), every), "behind again");
        assert_eq!(counters.stats().longest_round, Duration::from_millis(150));
    }
}
