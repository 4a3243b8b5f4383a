//! [`Backoff`]: the pauses between tries after failures, doubling from a first pause up to a
//! cap — the one retry pacing of every backend.

use std::time::Duration;

/// Exponential backoff between tries of calls that failed: a first pause, doubling up to a
/// cap; [`reset`](Self::reset) after a success starts over.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    first: Duration,
    next: Duration,
    max: Duration,
}

impl Backoff {
    /// The first pause of [`up_to`](Self::up_to).
    pub const FIRST: Duration = Duration::from_millis(25);

    /// A backoff from [`FIRST`](Self::FIRST) (25 ms) whose pauses never exceed `max`.
    pub fn up_to(max: Duration) -> Self {
        Self::new(Self::FIRST, max)
    }

    /// A backoff from `first` whose pauses never exceed `max`.
    pub fn new(first: Duration, max: Duration) -> Self {
        let first = first.min(max);
        Self { first, next: first, max }
    }

    /// The pause before the next try; each call doubles the following one, up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        delay
    }

    /// Pauses for [`next_delay`](Self::next_delay).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped early, the pause ends and the next one is still doubled.
    pub async fn pause(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// The pause the next [`next_delay`](Self::next_delay) returns, without doubling it.
    pub fn peek(&self) -> Duration {
        self.next
    }

    /// Starts over after a success.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
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
    fn a_backoff_from_its_own_first_pause_resets_to_it() {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        assert_eq!(backoff.next_delay(), Duration::from_millis(50));
        assert_eq!(backoff.peek(), Duration::from_millis(100));
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_millis(50));
    }
}
