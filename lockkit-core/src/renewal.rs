//! [`RenewalStats`]: what the renewal rounds of a provider whose holds are leases have done,
//! the same figures for every backend that renews in rounds (Redis, PostgreSQL), read from
//! a backend's counters.

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
