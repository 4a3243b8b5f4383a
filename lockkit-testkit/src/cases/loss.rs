//! Contract 15-17: loss signalling, the local deadline, lease renewal.

use std::time::{Duration, Instant};

use lockkit_core::{Error, HoldEnd, LossReason};

use super::Ctx;
use crate::harness::Harness;

/// Contract 15: when the lock record is deleted behind the holder's back, `lost()` resolves,
/// `is_held()` turns false, and release returns `LockLost`.
pub async fn loss_is_signalled_when_the_record_is_deleted(h: &dyn Harness) {
    let cx = Ctx::new(h, "loss_is_signalled_when_the_record_is_deleted");
    let a = cx.client().await;
    let lock = cx.lock(&a);
    let guard = cx.acquire(&lock, "acquire").await;
    if !cx.applied(h.delete_record(&cx.name).await, "delete_record") {
        return;
    }
    let bound = h.timing().lease.unwrap_or(Duration::ZERO) + h.timing().operation * 2;
    let reason: LossReason = cx.within(bound, "lost() resolves", guard.lost()).await;
    cx.check(!guard.is_held(), "is_held() is false after the loss");
    let watcher = guard.watcher();
    cx.check(watcher.loss() == Some(reason.clone()), "a watcher reports the same loss");
    // Resolves at once when already lost.
    cx.within(Duration::from_millis(100), "lost() resolves again at once", guard.lost()).await;
    match guard.release().await {
        Err(Error::LockLost { .. }) => {}
        other => cx.fail("release after loss", format!("expected LockLost, got {other:?}")),
    }
}

/// Contract 15: a normal release does not fire the loss signal: a watcher reports `Released`.
pub async fn normal_release_is_not_a_loss(h: &dyn Harness) {
    let cx = Ctx::new(h, "normal_release_is_not_a_loss");
    let a = cx.client().await;
    let guard = cx.acquire(&cx.lock(&a), "acquire").await;
    let watcher = guard.watcher();
    cx.check(watcher.is_held(), "the watcher sees the hold");
    cx.release(guard, "release").await;
    let end = cx.within(h.timing().operation, "the watcher sees the end", watcher.ended()).await;
    cx.check(end == HoldEnd::Released, &format!("the hold ended by release, not {end:?}"));
    cx.check(watcher.loss().is_none(), "no loss is reported");
}

/// Contract 15: when the holder's client is killed, its guard reports the loss.
pub async fn loss_is_signalled_when_the_client_dies(h: &dyn Harness) {
    let cx = Ctx::new(h, "loss_is_signalled_when_the_client_dies");
    let a = cx.client().await;
    let guard = cx.acquire(&cx.lock(&a), "acquire").await;
    if !cx.applied(a.faults.kill().await, "kill") {
        return;
    }
    let bound = h.timing().lease.unwrap_or(Duration::ZERO) + h.timing().operation * 2;
    cx.within(bound, "lost() resolves", guard.lost()).await;
    cx.check(!guard.is_held(), "is_held() is false");
}

/// Contract 16: a holder cut off from the store (blackholed) learns of its loss no later
/// than another owner acquires, and its `valid_until` lies before that acquisition.
pub async fn loss_is_signalled_before_another_owner_can_acquire(h: &dyn Harness) {
    let cx = Ctx::new(h, "loss_is_signalled_before_another_owner_can_acquire");
    let Some(lease) = h.timing().lease else {
        return cx.not_applicable("holds have no lease, so a cut-off holder is never replaced");
    };
    let (a, b) = (cx.client().await, cx.client().await);
    let guard = cx.acquire(&cx.lock(&a), "holder acquires").await;
    let watcher = guard.watcher();
    let loss_seen = tokio::spawn({
        let watcher = watcher.clone();
        async move {
            watcher.lost().await;
            Instant::now()
        }
    });
    if !cx.applied(a.faults.blackhole().await, "blackhole") {
        return;
    }
    let lock_b = cx.lock(&b);
    let bound = lease * 3 + h.timing().operation * 2;
    let taken = cx.within(bound, "another owner acquires after the lease", lock_b.acquire()).await;
    let acquired_at = Instant::now();
    let taken = cx.ok(taken, "another owner acquires");
    let _ = a.faults.heal().await;
    let lost_at = cx
        .within(h.timing().operation, "the holder's loss fired", loss_seen)
        .await
        .unwrap_or_else(|e| cx.fail("join", e));
    cx.check(lost_at <= acquired_at, &format!("loss fired {:?} after the other owner acquired", lost_at - acquired_at));
    if let Some(until) = watcher.valid_until() {
        cx.check(until <= acquired_at, "the holder's valid_until lies before the other owner's acquisition");
    }
    cx.check(taken.token() > guard.token(), "the new holder's token is greater");
    drop(guard);
}

/// Contract 17 (capability `lease_renewal`): a hold outlives several leases while its guard
/// lives, its deadline moves forward, and nobody else can take it meanwhile.
pub async fn lease_is_renewed_while_the_guard_lives(h: &dyn Harness) {
    let cx = Ctx::new(h, "lease_is_renewed_while_the_guard_lives");
    let Some([a, b]) = cx.clients_declaring("lease_renewal", |c| c.lease_renewal).await else { return };
    let Some(lease) = h.timing().lease else {
        return cx.unchecked("the harness gives no lease");
    };
    let guard = cx.acquire(&cx.lock(&a), "acquire").await;
    let first_deadline = guard.valid_until();
    cx.check(first_deadline.is_some(), "a leased hold has a deadline");
    let outcome = cx.lock(&b).acquire_timeout(lease * 3).await;
    cx.check(matches!(outcome, Err(Error::Timeout { .. })), "nobody else acquires while the guard lives");
    cx.check(guard.is_held(), "the hold outlived three leases");
    cx.check(guard.valid_until() > first_deadline, "the deadline moved forward");
    cx.release(guard, "release").await;
    cx.assert_free(&b, "released after renewals").await;
}
