//! A history of holds and the checker that finds two holders at once or a token that went
//! backwards.
//!
//! Record [`History::acquired`] right after an acquisition returns and [`History::ended`]
//! right before the release (or when loss is noticed). Each recorded hold is then a subset of
//! the real one, so an overlap the checker reports is a real violation: two owners both
//! believed, at the same instant, that they held the lock.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use lockkit_core::LockGuard;

/// One recorded hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// Who held it (for messages).
    pub client: String,
    /// The lock's name.
    pub lock: String,
    /// The fencing token.
    pub token: u64,
    /// When the acquisition returned.
    pub start: Instant,
    /// When the hold ended (release started, or loss noticed), if it did.
    pub end: Option<Instant>,
    /// The guard's local deadline at the last look, if it has one.
    pub valid_until: Option<Instant>,
}

impl Hold {
    /// The end of the hold's validity: the earlier of its end and its local deadline.
    pub fn valid_end(&self) -> Option<Instant> {
        match (self.end, self.valid_until) {
            (Some(end), Some(until)) => Some(end.min(until)),
            (end, until) => end.or(until),
        }
    }
}

/// A violation found by [`History::check`], with the offending holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// Two holds of one lock overlapped in time.
    Overlap {
        /// The earlier hold.
        first: Hold,
        /// The hold that started before the first one's validity ended.
        second: Hold,
    },
    /// A later fresh hold had a token not greater than an earlier one.
    TokenRegression {
        /// The earlier hold.
        earlier: Hold,
        /// The later hold with the smaller or equal token.
        later: Hold,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Overlap { first, second } => write!(
                f,
                "two holders at once on lock {:?}: {} (token {}) held until {:?} after start, but {} (token {}) acquired {:?} after that start",
                first.lock,
                first.client,
                first.token,
                first.valid_end().map(|e| e.saturating_duration_since(first.start)),
                second.client,
                second.token,
                second.start.saturating_duration_since(first.start),
            ),
            Self::TokenRegression { earlier, later } => write!(
                f,
                "fencing token went backwards on lock {:?}: {} got token {} after {} had token {}",
                earlier.lock, later.client, later.token, earlier.client, earlier.token
            ),
        }
    }
}

impl std::error::Error for Violation {}

/// A concurrent recorder of holds.
#[derive(Debug, Default)]
pub struct History {
    holds: Mutex<Vec<Hold>>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    fn holds(&self) -> std::sync::MutexGuard<'_, Vec<Hold>> {
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a hold that starts now; returns its index for [`ended`](Self::ended).
    pub fn acquired(&self, client: &str, guard: &LockGuard) -> usize {
        self.record(Hold {
            client: client.to_owned(),
            lock: guard.name().as_str().to_owned(),
            token: guard.token().get(),
            start: Instant::now(),
            end: None,
            valid_until: guard.valid_until(),
        })
    }

    /// Records a hold as given (for replaying or planting histories).
    pub fn record(&self, hold: Hold) -> usize {
        let mut holds = self.holds();
        holds.push(hold);
        holds.len() - 1
    }

    /// Records that hold `index` ends now, and its guard's latest deadline.
    pub fn ended(&self, index: usize, guard: Option<&LockGuard>) {
        let now = Instant::now();
        if let Some(hold) = self.holds().get_mut(index) {
            hold.end = Some(now);
            if let Some(guard) = guard {
                hold.valid_until = guard.valid_until();
            }
        }
    }

    /// How many holds were recorded.
    pub fn len(&self) -> usize {
        self.holds().len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of every recorded hold.
    pub fn holds_snapshot(&self) -> Vec<Hold> {
        self.holds().clone()
    }

    /// Checks that no two holds of a lock overlapped and that tokens only grew, in the order
    /// holds started.
    ///
    /// # Errors
    ///
    /// Every violation found, each naming the holds involved.
    pub fn check(&self) -> Result<(), Vec<Violation>> {
        let mut by_lock: BTreeMap<String, Vec<Hold>> = BTreeMap::new();
        for hold in self.holds().iter() {
            by_lock.entry(hold.lock.clone()).or_default().push(hold.clone());
        }
        let mut violations = Vec::new();
        for holds in by_lock.values_mut() {
            holds.sort_by_key(|hold| hold.start);
            let mut latest: Option<&Hold> = None;
            for (i, hold) in holds.iter().enumerate() {
                if let Some(previous) = latest
                    && previous.valid_end().is_none_or(|end| end > hold.start)
                {
                    violations.push(Violation::Overlap { first: previous.clone(), second: hold.clone() });
                }
                if i > 0 && hold.token <= holds[i - 1].token {
                    violations.push(Violation::TokenRegression { earlier: holds[i - 1].clone(), later: hold.clone() });
                }
                let extends = match (latest.and_then(Hold::valid_end), hold.valid_end()) {
                    (_, None) => true,
                    (None, Some(_)) => latest.is_none(),
                    (Some(a), Some(b)) => b > a,
                };
                if extends {
                    latest = Some(hold);
                }
            }
        }
        if violations.is_empty() { Ok(()) } else { Err(violations) }
    }

    /// Panics with every violation listed, for use in tests.
    #[track_caller]
    pub fn assert_valid(&self) {
        if let Err(violations) = self.check() {
            let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
            panic!("history check failed:\n  {}", list.join("\n  "));
        }
    }
}
