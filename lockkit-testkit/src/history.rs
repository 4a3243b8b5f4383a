//! A history of holds and the checker that finds holders that could not share the lock at
//! once (two writers, a reader beside a writer, more permits than the semaphore has) or a
//! token that went backwards.
//!
//! Record [`History::acquired`] right after an acquisition returns and [`History::ended`]
//! right before the release (or when loss is noticed). Each recorded hold is then a subset of
//! the real one, so an overlap the checker reports is a real violation: two owners both
//! believed, at the same instant, that they held the lock.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use lockkit_core::{HoldKind, LockGuard};

/// One recorded hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// Who held it (for messages).
    pub client: String,
    /// The lock's name.
    pub lock: String,
    /// The fencing token.
    pub token: u64,
    /// The kind of the hold: who it may share the lock with.
    pub kind: HoldKind,
    /// When the acquisition returned.
    pub start: Instant,
    /// When the hold ended (release started, or loss noticed), if it did.
    pub end: Option<Instant>,
    /// The guard's local deadline at the last look, if it has one.
    pub valid_until: Option<Instant>,
}

impl Hold {
    /// Whether this hold and `other` may hold the lock at the same time: two readers may, and
    /// permits of one semaphore may (up to its size, which the checker counts).
    pub fn may_share_with(&self, other: &Hold) -> bool {
        matches!(
            (&self.kind, &other.kind),
            (HoldKind::Read, HoldKind::Read) | (HoldKind::Permit { .. }, HoldKind::Permit { .. })
        )
    }

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
    /// Two holds of one lock that may not share it overlapped in time, or more holds than a
    /// semaphore's permits did (`first` is one of those already holding).
    Overlap {
        /// The earlier hold.
        first: Hold,
        /// The hold that started before the first one's validity ended.
        second: Hold,
    },
    /// A hold had a token not greater than one of a hold that had ended before it started.
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
                "fencing token went backwards on lock {:?}: {} got token {} ({}) after {} had token {} ({})",
                earlier.lock, later.client, later.token, later.kind, earlier.client, earlier.token, earlier.kind
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
            kind: guard.kind().clone(),
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

    /// Checks, for every lock, that holds overlapped only where they may share the lock
    /// (readers with readers, permits up to the semaphore's size), and that every hold's
    /// token is greater than the token of every hold that ended before it started (holds that
    /// overlapped, such as two readers, may have come back in either order).
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
            check_sharing(holds, &mut violations);
            check_tokens(holds, &mut violations);
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

/// Finds holds that overlapped without being allowed to share the lock. `holds` is sorted by
/// start; each hold is compared with the holds still valid when it started.
fn check_sharing(holds: &[Hold], violations: &mut Vec<Violation>) {
    let mut active: Vec<&Hold> = Vec::new();
    for hold in holds {
        active.retain(|other| other.valid_end().is_none_or(|end| end > hold.start));
        if let Some(other) = active.iter().find(|other| !hold.may_share_with(other)) {
            violations.push(Violation::Overlap { first: (*other).clone(), second: hold.clone() });
        } else if let HoldKind::Permit { permits } = &hold.kind
            && active.len() >= permits.get() as usize
            && let Some(first) = active.first()
        {
            violations.push(Violation::Overlap { first: (*first).clone(), second: hold.clone() });
        }
        active.push(hold);
    }
}

/// Finds holds whose token is not above the token of a hold that ended before they started
/// and could not have shared the lock with it (contract 21: a reader is compared with writes
/// only). Two readers, or two permits, may come back in either order: a grant that reaches its
/// holder late carries a token issued before that of a shared hold granted, held and ended
/// meanwhile. `holds` is sorted by start.
fn check_tokens(holds: &[Hold], violations: &mut Vec<Violation>) {
    for (index, hold) in holds.iter().enumerate() {
        // A hold is never its own predecessor, even one recorded as ending where it started.
        let top = holds
            .iter()
            .enumerate()
            .filter(|&(other, _)| other != index)
            .map(|(_, done)| done)
            .filter(|done| !hold.may_share_with(done))
            .filter(|done| done.valid_end().is_some_and(|end| end <= hold.start))
            .max_by_key(|done| done.token);
        if let Some(top) = top
            && hold.token <= top.token
        {
            violations.push(Violation::TokenRegression { earlier: top.clone(), later: hold.clone() });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use super::*;

    /// A hold of `kind` with `token`, valid from `from` to `to` milliseconds after `zero`.
    fn hold(zero: Instant, kind: HoldKind, token: u64, from: u64, to: u64) -> Hold {
        Hold {
            client: format!("client-{token}"),
            lock: "l".to_owned(),
            token,
            kind,
            start: zero + Duration::from_millis(from),
            end: Some(zero + Duration::from_millis(to)),
            valid_until: None,
        }
    }

    fn check(holds: Vec<Hold>) -> Result<(), Vec<Violation>> {
        let history = History::new();
        for hold in holds {
            history.record(hold);
        }
        history.check()
    }

    #[test]
    fn writers_may_not_overlap_anyone_and_readers_may_overlap_readers() {
        let zero = Instant::now();
        let (read, write) = (HoldKind::Read, HoldKind::Write);
        assert!(check(vec![hold(zero, read.clone(), 1, 0, 10), hold(zero, read.clone(), 2, 5, 15)]).is_ok());
        assert!(check(vec![hold(zero, write.clone(), 1, 0, 10), hold(zero, write.clone(), 2, 5, 15)]).is_err());
        assert!(check(vec![hold(zero, read.clone(), 1, 0, 10), hold(zero, write.clone(), 2, 5, 15)]).is_err());
        assert!(check(vec![hold(zero, write.clone(), 1, 0, 10), hold(zero, read.clone(), 2, 5, 15)]).is_err());
        assert!(check(vec![hold(zero, HoldKind::Exclusive, 1, 0, 10), hold(zero, read, 2, 10, 15)]).is_ok());
    }

    #[test]
    fn permits_may_overlap_up_to_the_semaphores_size() {
        let zero = Instant::now();
        let two = HoldKind::Permit { permits: NonZeroU32::MIN.saturating_add(1) };
        let pair = vec![hold(zero, two.clone(), 1, 0, 10), hold(zero, two.clone(), 2, 1, 10)];
        assert!(check(pair.clone()).is_ok());
        let mut three = pair;
        three.push(hold(zero, two.clone(), 3, 2, 10));
        assert!(check(three).is_err(), "a third permit of two");
        assert!(
            check(vec![hold(zero, two.clone(), 1, 0, 5), hold(zero, two.clone(), 2, 1, 10), hold(zero, two, 3, 6, 10)])
                .is_ok()
        );
    }

    #[test]
    fn tokens_must_grow_past_every_hold_that_ended_before() {
        let zero = Instant::now();
        let read = HoldKind::Read;
        // Two overlapping readers may come back in either order.
        assert!(check(vec![hold(zero, read.clone(), 2, 0, 10), hold(zero, read.clone(), 1, 1, 10)]).is_ok());
        // A hold after both must be above both.
        let after = hold(zero, HoldKind::Write, 2, 11, 20);
        let violations =
            check(vec![hold(zero, read.clone(), 3, 0, 10), hold(zero, read, 1, 1, 10), after]).unwrap_err();
        assert!(matches!(&violations[..], [Violation::TokenRegression { earlier, .. }] if earlier.token == 3));
        // A hold recorded as ending where it started is not its own predecessor.
        assert!(check(vec![hold(zero, HoldKind::Exclusive, 4, 30, 30)]).is_ok());
        // A reader (or permit) granted late may be below a shared hold that came and went,
        // never below a write (or another kind) that ended before it.
        let read = HoldKind::Read;
        assert!(check(vec![hold(zero, read.clone(), 5, 0, 10), hold(zero, read.clone(), 4, 11, 20)]).is_ok());
        let two = HoldKind::Permit { permits: NonZeroU32::MIN.saturating_add(1) };
        assert!(check(vec![hold(zero, two.clone(), 5, 0, 10), hold(zero, two, 4, 11, 20)]).is_ok());
        assert!(check(vec![hold(zero, HoldKind::Write, 5, 0, 10), hold(zero, read.clone(), 4, 11, 20)]).is_err());
        assert!(check(vec![hold(zero, read, 5, 0, 10), hold(zero, HoldKind::Write, 4, 11, 20)]).is_err());
    }
}
