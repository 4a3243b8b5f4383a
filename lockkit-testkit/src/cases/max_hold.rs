//! Issue 20: a maximum hold. Past it renewal stops, the guard is signalled lost with
//! [`LossReason::MaxHoldReached`], and the record expires with its lease (a hold without a
//! lease is freed at the cap), so that a holder stuck in a loop does not hold the lock forever.

use std::time::{Duration, Instant};

use lockkit_core::{AcquireOptions, Error, LossReason};

use super::Ctx;
use crate::harness::Harness;

/// A hold acquired with a maximum hold is signalled lost with
/// [`LossReason::MaxHoldReached`] no earlier than the maximum and within it plus a bounded
/// slack, reentrant guards sharing its cap; another client acquires the lock after it (after
/// the lease, where holds have one), never before the loss was signalled, with a greater
/// token.
pub async fn a_hold_past_its_maximum_is_lost_and_the_lock_is_freed(h: &dyn Harness) {
    let cx = Ctx::new(h, "a_hold_past_its_maximum_is_lost_and_the_lock_is_freed");
    let (a, b) = (cx.client().await, cx.client().await);
    let timing = h.timing();
    // Two renewal intervals: at least one renewal happens before the cap.
    let max_hold = (a.provider.min_max_hold() * 2).max(Duration::from_millis(300));
    let started = Instant::now();
    let acquired = cx.lock(&a).acquire_with(AcquireOptions::default().with_max_hold(max_hold)).await;
    let Some(guard) = cx.ok(acquired, "acquire with a maximum hold") else {
        cx.fail("acquire with a maximum hold", "not granted")
    };
    let cap = guard.max_hold_until().unwrap_or_else(|| cx.fail("max_hold_until", "the guard has no cap"));
    cx.check(cap >= started + max_hold, "the cap lies a maximum hold after the acquisition began");
    let inner = cx.ok(guard.reenter(), "reenter");
    cx.check(inner.max_hold_until() == Some(cap), "a reentrant guard shares the cap of the first");
    cx.check(guard.valid_until().is_some_and(|until| until <= cap), "the deadline never lies past the cap");
    let loss_seen = tokio::spawn({
        let watcher = guard.watcher();
        async move {
            let reason = watcher.lost().await;
            (reason, Instant::now())
        }
    });
    let lease = timing.lease.unwrap_or(Duration::ZERO);
    let bound = max_hold + lease * 2 + timing.operation * 2;
    let lock_b = cx.lock(&b);
    let taken = cx.within(bound, "another owner acquires after the maximum hold", lock_b.acquire()).await;
    let acquired_at = Instant::now();
    // Checked at once: the watcher task below may only run after this one.
    cx.check(!guard.is_held(), "the holder's guard says it is not held once another owner acquired");
    cx.check(guard.valid_until().is_some_and(|until| until <= acquired_at), "valid_until lies before the next grant");
    let taken = cx.ok(taken, "another owner acquires");
    let (reason, lost_at) =
        cx.within(timing.operation, "the holder's loss fired", loss_seen).await.unwrap_or_else(|e| cx.fail("join", e));
    cx.check(reason == LossReason::MaxHoldReached, &format!("the loss says MaxHoldReached, not {reason:?}"));
    cx.check(lost_at >= started + max_hold, "the hold was not lost before its maximum");
    let slack = timing.operation;
    cx.check(
        lost_at <= cap + slack,
        &format!("the loss fired {:?} after the cap, more than {slack:?}", lost_at.saturating_duration_since(cap)),
    );
    cx.check(!inner.is_held(), "the reentrant guard sees the loss");
    cx.check(taken.token() > guard.token(), "the next owner's token is greater");
    drop(inner);
    match guard.release().await {
        Err(Error::LockLost { reason: LossReason::MaxHoldReached, .. }) => {}
        other => cx.fail("release after the maximum hold", format!("expected LockLost(MaxHoldReached), got {other:?}")),
    }
    cx.check(taken.is_held(), "the old holder's release spares the new holder");
    cx.release(taken, "the new owner releases").await;
}

/// A maximum hold shorter than the backend's renewal interval is refused with
/// [`Error::InvalidConfig`] naming the minimum, before anything is asked of the store.
pub async fn a_maximum_hold_below_the_renewal_interval_is_refused(h: &dyn Harness) {
    let cx = Ctx::new(h, "a_maximum_hold_below_the_renewal_interval_is_refused");
    let a = cx.client().await;
    let min = a.provider.min_max_hold();
    for max_hold in [Duration::ZERO, min / 2] {
        if max_hold >= min {
            continue;
        }
        let outcome = cx.lock(&a).acquire_with(AcquireOptions::default().with_max_hold(max_hold)).await;
        match outcome {
            Err(Error::InvalidConfig { message, .. }) => {
                cx.check(message.contains("max_hold"), &format!("the message names max_hold: {message}"));
                cx.check(message.contains(&format!("{min:?}")), &format!("the message names the minimum: {message}"));
            }
            other => cx.fail(&format!("max_hold {max_hold:?}"), format!("expected InvalidConfig, got {other:?}")),
        }
        let refused = a.provider.clone().with_max_hold(Some(max_hold));
        cx.check(
            matches!(refused, Err(Error::InvalidConfig { .. })),
            "a provider default below the minimum is refused",
        );
    }
    cx.assert_free(&a, "nothing was left behind").await;
}
