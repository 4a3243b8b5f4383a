//! The state of one hold, shared between the backend that keeps it and the guards that
//! read it: its local deadline, and how it ended.
//!
//! A backend creates a [`HoldSignal`] when it grants a lock, keeps a clone to report renewals
//! ([`HoldSignal::extend`]) and loss ([`HoldSignal::lose`]), and hands the other to the core,
//! which gives guards and [`HoldWatcher`]s a read-only view. Deadline expiry needs no timer
//! task: whoever looks at the signal after the deadline sees the loss, and
//! [`HoldWatcher::ended`] sleeps until the deadline itself.
//!
//! One allocation per hold: the state sits behind a plain mutex, and the means to wake
//! waiters (a [`Notify`]) is made by the first task that waits on the hold, so that a hold
//! nobody waits on costs no channel (see "Many holds" in docs/PERFORMANCE.md).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::metrics::Labels;
use crate::{LockName, LossReason};

/// How a hold ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HoldEnd {
    /// The owner released it.
    Released,
    /// It was lost; see the reason.
    Lost(LossReason),
}

/// An instant in 8 bytes: nanoseconds since a base a day before this process's first hold,
/// 0 for none. An instant before the base (only ever a deadline long past) reads as the base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp(u64);

impl Stamp {
    fn base() -> Instant {
        static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *BASE.get_or_init(|| {
            let now = Instant::now();
            now.checked_sub(Duration::from_secs(24 * 3600)).unwrap_or(now)
        })
    }

    fn of(at: Option<Instant>) -> Self {
        match at {
            None => Self(0),
            // Past the base, and within 584 years of it (deadlines saturate at a century).
            Some(at) => {
                Self(u64::try_from(at.saturating_duration_since(Self::base()).as_nanos()).unwrap_or(u64::MAX).max(1))
            }
        }
    }

    fn get(self) -> Option<Instant> {
        (self.0 != 0).then(|| deadline_after(Self::base(), Duration::from_nanos(self.0)))
    }
}

#[derive(Debug)]
struct HoldState {
    valid_until: Stamp,
    /// The maximum hold's end: the deadline is never extended past it.
    cap: Stamp,
    /// How the hold ended (boxed: a live hold keeps 8 bytes for it).
    end: Option<Box<HoldEnd>>,
    /// Woken at every change; made by the first waiter, `None` while nobody ever waited.
    changed: Option<Arc<Notify>>,
    /// The labels of the guard's metrics, once the core received the hold.
    #[cfg(feature = "metrics")]
    labels: Option<Labels>,
}

impl HoldState {
    /// Why a hold whose deadline passed at `now` is lost: the maximum hold when it was
    /// reached, the deadline otherwise.
    fn expiry_reason(&self, now: Instant) -> LossReason {
        if self.cap.get().is_some_and(|cap| now >= cap) {
            LossReason::MaxHoldReached
        } else {
            LossReason::DeadlineExpired
        }
    }

    /// Wakes every waiter, after a change.
    fn wake(&self) {
        if let Some(changed) = &self.changed {
            changed.notify_waiters();
        }
    }
}

#[derive(Debug)]
struct Shared {
    backend: &'static str,
    lock: LockName,
    state: Mutex<HoldState>,
}

/// The backend's side of a hold: report renewals and loss here.
///
/// Clones share one state. The first end (release or loss) wins; later calls change nothing.
#[derive(Clone, Debug)]
pub struct HoldSignal(Arc<Shared>);

impl HoldSignal {
    /// A live hold of `lock` on `backend`, guaranteed until `valid_until` (`None`: until
    /// released or lost, with no lease).
    pub fn new(backend: &'static str, lock: LockName, valid_until: Option<Instant>) -> Self {
        let state = HoldState {
            valid_until: Stamp::of(valid_until),
            cap: Stamp::of(None),
            end: None,
            changed: None,
            #[cfg(feature = "metrics")]
            labels: None,
        };
        Self(Arc::new(Shared { backend, lock, state: Mutex::new(state) }))
    }

    fn state(&self) -> MutexGuard<'_, HoldState> {
        // Nothing panics while holding this lock; recover the data if something ever did.
        self.0.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a confirmed renewal: the hold is now guaranteed until `valid_until`, which the
    /// backend computes from the *send* time of the renewal minus its drift margin
    /// (see [`lease_deadline`]).
    ///
    /// Returns `false`, and changes nothing, when the hold has already ended or its previous
    /// deadline has already passed: a late confirmation never revives a hold that the
    /// guard may already have reported lost. A deadline earlier than the current one is
    /// ignored, and a deadline past the hold's [`cap`](Self::cap) is cut to the cap.
    pub fn extend(&self, valid_until: Instant) -> bool {
        let now = Instant::now();
        let expired = {
            let mut state = self.state();
            if state.end.is_some() {
                return false;
            }
            let valid_until = state.cap.get().map_or(valid_until, |cap| valid_until.min(cap));
            match state.valid_until.get() {
                Some(current) if now >= current => state.expiry_reason(now),
                Some(current) if valid_until <= current => return true,
                _ => {
                    state.valid_until = Stamp::of(Some(valid_until));
                    state.wake();
                    return true;
                }
            }
        };
        self.lose(expired);
        false
    }

    /// Caps the hold at `cap` (its maximum hold): its deadline is cut to `cap` now and never
    /// extended past it, and when it passes there the hold is lost with
    /// [`LossReason::MaxHoldReached`]. A hold without a lease gets `cap` as its deadline. A
    /// later cap than the current one is ignored; an ended hold is left alone.
    ///
    /// The core caps every hold acquired with a maximum hold
    /// ([`AcquireOptions::with_max_hold`](crate::AcquireOptions::with_max_hold)) from the
    /// moment it receives the grant; a backend that counts the maximum from an earlier
    /// moment of its own may cap the signal first. Renewal code skips holds
    /// [`past_cap`](Self::past_cap), so that their records expire with their lease.
    pub fn cap_at(&self, cap: Instant) {
        let mut state = self.state();
        if state.end.is_some() || state.cap.get().is_some_and(|current| current <= cap) {
            return;
        }
        state.cap = Stamp::of(Some(cap));
        state.valid_until = Stamp::of(Some(state.valid_until.get().map_or(cap, |until| until.min(cap))));
        state.wake();
    }

    /// The end of the hold's maximum hold, if it has one ([`cap_at`](Self::cap_at)).
    pub fn cap(&self) -> Option<Instant> {
        self.state().cap.get()
    }

    /// Whether the hold has a maximum hold that has passed: renewal code stops renewing it
    /// (the record then expires with its lease), and a backend whose holds have no lease
    /// frees it.
    pub fn past_cap(&self) -> bool {
        self.cap().is_some_and(|cap| Instant::now() >= cap)
    }

    /// Declares the hold lost. Returns `true` when this call ended the hold (the first end
    /// wins); the loss is logged once, at warn level, in a `lockkit.loss` span.
    pub fn lose(&self, reason: LossReason) -> bool {
        let ended = {
            let mut state = self.state();
            let ended = Self::end(&mut state, HoldEnd::Lost(reason.clone()));
            #[cfg(feature = "metrics")]
            if ended && let Some(labels) = &state.labels {
                labels.lost(&reason);
            }
            ended
        };
        if ended {
            let span = tracing::warn_span!("lockkit.loss", backend = self.0.backend, lock = %self.0.lock);
            span.in_scope(|| tracing::warn!(%reason, "lock lost"));
        }
        ended
    }

    /// Marks the hold released by its owner unless it already ended; returns the loss reason
    /// when the hold had been lost before (a passed deadline counts as lost).
    pub fn release(&self) -> Option<LossReason> {
        self.check_deadline();
        let mut state = self.state();
        Self::end(&mut state, HoldEnd::Released);
        match state.end.as_deref() {
            Some(HoldEnd::Lost(reason)) => Some(reason.clone()),
            Some(HoldEnd::Released) | None => None,
        }
    }

    /// Ends the hold unless it ended already; `true` when this call ended it.
    fn end(state: &mut HoldState, end: HoldEnd) -> bool {
        if state.end.is_some() {
            return false;
        }
        state.end = Some(Box::new(end));
        state.wake();
        true
    }

    /// Turns a passed deadline into a recorded loss.
    fn check_deadline(&self) {
        let now = Instant::now();
        let passed = {
            let state = self.state();
            let passed = state.end.is_none() && state.valid_until.get().is_some_and(|until| now >= until);
            passed.then(|| state.expiry_reason(now))
        };
        if let Some(reason) = passed {
            self.lose(reason);
        }
    }

    /// Gives the hold the labels of the handle that received it: its losses are counted from
    /// then on.
    pub(crate) fn attach_labels(&self, labels: &Labels) {
        #[cfg(feature = "metrics")]
        {
            let mut state = self.state();
            if state.labels.is_none() {
                state.labels = Some(labels.clone());
            }
        }
        #[cfg(not(feature = "metrics"))]
        let _ = labels;
    }

    /// A read-only view for guards and users.
    pub fn watcher(&self) -> HoldWatcher {
        HoldWatcher(self.clone())
    }

    /// Whether the hold is still guaranteed: not ended and its deadline not passed.
    pub fn is_held(&self) -> bool {
        self.check_deadline();
        self.state().end.is_none()
    }

    /// The loss reason, if the hold was lost.
    pub fn loss(&self) -> Option<LossReason> {
        self.check_deadline();
        match self.state().end.as_deref() {
            Some(HoldEnd::Lost(reason)) => Some(reason.clone()),
            _ => None,
        }
    }

    /// The local deadline until which the hold is guaranteed, or `None` for a hold without
    /// a lease.
    pub fn valid_until(&self) -> Option<Instant> {
        self.state().valid_until.get()
    }

    /// The lock this hold is of.
    pub fn lock(&self) -> &LockName {
        &self.0.lock
    }

    /// The backend that keeps this hold.
    pub fn backend_name(&self) -> &'static str {
        self.0.backend
    }

    /// Waits until `look` at the state answers: `look` runs at once and again after every
    /// change of the state; a deadline that passes meanwhile unrenewed is declared a loss
    /// (a change too). The means to wake waiters is made here, by the first waiter.
    async fn wait_for<T>(&self, look: impl Fn(&HoldState) -> Option<T>) -> T {
        loop {
            let (changed, deadline) = {
                let mut state = self.state();
                if let Some(answer) = look(&state) {
                    return answer;
                }
                let changed = Arc::clone(state.changed.get_or_insert_with(Arc::default));
                (changed, state.valid_until.get().filter(|_| state.end.is_none()))
            };
            // Registered before the state is looked at again: a change made after the look
            // below wakes it (`notify_waiters` reaches every `Notified` that exists).
            let notified = changed.notified();
            {
                let state = self.state();
                if let Some(answer) = look(&state) {
                    return answer;
                }
            }
            match deadline {
                Some(deadline) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(deadline.into()) => self.check_deadline(),
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Waits until the hold's deadline differs from `seen` (a renewal moved it, a maximum
    /// hold cut it) and returns the new one, or until the hold ends and returns how,
    /// declaring loss itself when the deadline passes unrenewed.
    pub(crate) async fn deadline_changed(&self, seen: Option<Instant>) -> Result<Option<Instant>, HoldEnd> {
        self.wait_for(|state| match state.end.as_deref() {
            Some(end) => Some(Err(end.clone())),
            None => {
                let valid_until = state.valid_until.get();
                (valid_until != seen).then_some(Ok(valid_until))
            }
        })
        .await
    }

    /// Waits until the hold ends, declaring loss itself when the deadline passes unrenewed.
    pub async fn ended(&self) -> HoldEnd {
        self.wait_for(|state| state.end.as_deref().cloned()).await
    }
}

/// A read-only, cloneable view of one hold, for tasks that must stop when it ends.
///
/// Obtained from [`LockGuard::watcher`](crate::LockGuard::watcher); it stays usable after the
/// guard is released, and then reports [`HoldEnd::Released`].
#[derive(Clone, Debug)]
pub struct HoldWatcher(HoldSignal);

impl HoldWatcher {
    /// Whether the hold is still guaranteed.
    pub fn is_held(&self) -> bool {
        self.0.is_held()
    }

    /// The loss reason, if the hold was lost.
    pub fn loss(&self) -> Option<LossReason> {
        self.0.loss()
    }

    /// The local deadline of the hold (`None` without a lease).
    pub fn valid_until(&self) -> Option<Instant> {
        self.0.valid_until()
    }

    /// When the hold's maximum hold ends, if it has one: it is lost then with
    /// [`LossReason::MaxHoldReached`] at the latest.
    pub fn max_hold_until(&self) -> Option<Instant> {
        self.0.cap()
    }

    /// Follows the hold's deadline: resolves with the new deadline once it differs from
    /// `seen` (a renewal moved it forward, a maximum hold cut it), or with how the hold
    /// ended, whichever comes first. Pass the deadline last seen, starting with
    /// [`valid_until`](Self::valid_until); a hold without a lease has `None` until a maximum
    /// hold gives it one. A deadline that passes unrenewed ends the hold
    /// ([`LossReason::DeadlineExpired`]).
    ///
    /// This is how a task outside the guard keeps a copy of the deadline current, such as
    /// `lockkit run`'s file for its command (`LOCKKIT_VALID_UNTIL_FILE`).
    ///
    /// # Cancel Safety
    ///
    /// Cancel safe: dropping the future changes nothing; call again with the same `seen`.
    pub async fn deadline_changed(&self, seen: Option<Instant>) -> Result<Option<Instant>, HoldEnd> {
        self.0.deadline_changed(seen).await
    }

    /// Resolves when the hold ends, by release or by loss.
    ///
    /// # Cancel Safety
    ///
    /// Cancel safe: dropping the future changes nothing.
    pub async fn ended(&self) -> HoldEnd {
        self.0.ended().await
    }

    /// Resolves when the hold is lost; never resolves when it ends by release.
    ///
    /// # Cancel Safety
    ///
    /// Cancel safe: dropping the future changes nothing.
    pub async fn lost(&self) -> LossReason {
        match self.0.ended().await {
            HoldEnd::Lost(reason) => reason,
            HoldEnd::Released => std::future::pending().await,
        }
    }
}

/// The local deadline of a lease confirmed for a request *sent* at `sent_at`, that is
/// `sent_at + ttl - drift`. Counting from the send time, not the reply, makes the deadline fall before the
/// store's own expiry whatever the reply's delay; the drift margin covers the rate
/// difference between the two clocks.
pub fn lease_deadline(sent_at: Instant, ttl: Duration, drift: Duration) -> Instant {
    deadline_after(sent_at, ttl.saturating_sub(drift))
}

/// `at + span`, saturating: a span too long for the clock gives an instant a century away
/// (or `at` itself on a clock that cannot carry even that), never a panic. Deadline
/// arithmetic on settings goes through here, so no setting can make it overflow.
pub fn deadline_after(at: Instant, span: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    at.checked_add(span).or_else(|| at.checked_add(CENTURY)).unwrap_or(at)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn signal(valid_for: Option<Duration>) -> HoldSignal {
        HoldSignal::new("test", LockName::new("l").unwrap(), valid_for.map(|d| Instant::now() + d))
    }

    #[test]
    fn deadline_arithmetic_saturates() {
        let now = Instant::now();
        assert!(deadline_after(now, Duration::MAX) > now + Duration::from_secs(3600 * 24 * 365));
        assert!(lease_deadline(now, Duration::MAX, Duration::ZERO) > now);
        assert_eq!(lease_deadline(now, Duration::from_secs(1), Duration::from_secs(2)), now);
    }

    #[tokio::test]
    async fn deadline_changes_are_followed_until_the_end() {
        let s = signal(Some(Duration::from_secs(10)));
        let watcher = s.watcher();
        let first = watcher.valid_until();
        assert_eq!(watcher.deadline_changed(None).await, Ok(first), "a different deadline answers at once");
        let waiting = tokio::spawn({
            let watcher = watcher.clone();
            async move { watcher.deadline_changed(first).await }
        });
        let later = first.unwrap() + Duration::from_secs(1);
        assert!(s.extend(later));
        assert_eq!(waiting.await.unwrap(), Ok(Some(later)), "a renewal is seen");
        assert!(s.lose(LossReason::RecordGone));
        assert_eq!(watcher.deadline_changed(Some(later)).await, Err(HoldEnd::Lost(LossReason::RecordGone)));
    }

    #[tokio::test]
    async fn a_deadline_that_passes_unrenewed_ends_the_follow() {
        let s = signal(Some(Duration::from_millis(30)));
        let watcher = s.watcher();
        let ended = watcher.deadline_changed(watcher.valid_until()).await;
        assert_eq!(ended, Err(HoldEnd::Lost(LossReason::DeadlineExpired)));
    }

    #[test]
    fn first_end_wins() {
        let s = signal(None);
        assert!(s.lose(LossReason::RecordGone));
        assert!(!s.lose(LossReason::SessionExpired));
        assert_eq!(s.release(), Some(LossReason::RecordGone));
        assert!(!s.is_held());
    }

    #[test]
    fn a_passed_deadline_is_a_loss_and_extension_cannot_revive_it() {
        let s = signal(Some(Duration::ZERO));
        assert!(!s.extend(Instant::now() + Duration::from_secs(10)));
        assert_eq!(s.loss(), Some(LossReason::DeadlineExpired));
    }

    #[test]
    fn extension_moves_the_deadline_forward_only() {
        let s = signal(Some(Duration::from_secs(10)));
        let before = s.valid_until().unwrap();
        assert!(s.extend(before + Duration::from_secs(1)));
        assert!(s.extend(before));
        assert_eq!(s.valid_until(), Some(before + Duration::from_secs(1)));
    }

    #[test]
    fn a_cap_bounds_every_extension_and_names_the_loss() {
        let s = signal(Some(Duration::from_millis(20)));
        let cap = Instant::now() + Duration::from_millis(40);
        s.cap_at(cap);
        s.cap_at(cap + Duration::from_secs(5));
        assert_eq!(s.cap(), Some(cap), "a later cap is ignored");
        assert!(s.extend(Instant::now() + Duration::from_secs(10)));
        assert_eq!(s.valid_until(), Some(cap), "no extension goes past the cap");
        std::thread::sleep(Duration::from_millis(50));
        assert!(s.past_cap());
        assert!(!s.extend(Instant::now() + Duration::from_secs(10)));
        assert_eq!(s.loss(), Some(LossReason::MaxHoldReached));
        let unleased = signal(None);
        unleased.cap_at(cap);
        assert_eq!(unleased.valid_until(), Some(cap), "a hold without a lease gets the cap as its deadline");
        assert_eq!(unleased.loss(), Some(LossReason::MaxHoldReached));
    }

    #[tokio::test]
    async fn ended_fires_at_the_deadline() {
        let s = signal(Some(Duration::from_millis(30)));
        let end = tokio::time::timeout(Duration::from_secs(5), s.ended()).await.unwrap();
        assert_eq!(end, HoldEnd::Lost(LossReason::DeadlineExpired));
    }

    #[tokio::test]
    async fn released_watcher_reports_release() {
        let s = signal(None);
        let w = s.watcher();
        assert_eq!(s.release(), None);
        assert_eq!(w.ended().await, HoldEnd::Released);
    }
}
