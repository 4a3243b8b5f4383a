//! The one seeded random generator of the chaos runs ([`crate::chaos`],
//! [`crate::process_chaos`], [`crate::observer_chaos`]): splitmix64, enough for fault
//! schedules and a worker's choices, with no dependency. A run draws everything it replays
//! from it, so that the same seed draws the same schedule.

use std::time::Duration;

/// A small seeded PRNG (splitmix64).
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator whose draws depend on `seed` alone.
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`0` when `n` is `0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// An index in `0..len` (`0` when `len` is `0`).
    pub(crate) fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.below(u64::try_from(len).unwrap_or(u64::MAX))).unwrap_or(0)
    }

    /// A duration in `low..=high`, to the microsecond (`low` when `high <= low`).
    pub(crate) fn between(&mut self, low: Duration, high: Duration) -> Duration {
        if high <= low {
            return low;
        }
        let span = u64::try_from((high - low).as_micros()).unwrap_or(u64::MAX - 1);
        low + Duration::from_micros(self.below(span.saturating_add(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_numbers() {
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        for _ in 0..100 {
            assert_eq!(a.next(), b.next());
        }
        assert_ne!(Rng::new(1).next(), Rng::new(2).next());
    }

    #[test]
    fn draws_stay_in_their_ranges() {
        let mut rng = Rng::new(7);
        let (low, high) = (Duration::from_millis(10), Duration::from_millis(20));
        for _ in 0..1000 {
            assert!(rng.below(3) < 3);
            assert!(rng.index(5) < 5);
            let d = rng.between(low, high);
            assert!(low <= d && d <= high, "{d:?}");
        }
        assert_eq!(rng.below(0), 0);
        assert_eq!(rng.index(0), 0);
        assert_eq!(rng.between(high, low), high);
        // A span too long for microseconds in 64 bits does not overflow.
        let _ = rng.between(Duration::ZERO, Duration::MAX);
    }
}
