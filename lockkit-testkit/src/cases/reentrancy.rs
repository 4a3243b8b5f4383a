//! Contract 9: reentrancy.

use std::time::Duration;

use lockkit_core::{Error, LossReason};

use super::Ctx;
use crate::harness::Harness;

/// Contract 9: acquiring a handle that holds the lock succeeds at once, even with a zero
/// timeout, and carries the same fencing token.
pub async fn reentrant_acquire_returns_same_token_at_once(h: &dyn Harness) {
    let cx = Ctx::new(h, "reentrant_acquire_returns_same_token_at_once");
    let a = cx.client().await;
    let lock = cx.lock(&a);
    let outer = cx.acquire(&*lock, "first acquisition").await;
    let inner = cx.ok(lock.acquire_timeout(Duration::ZERO).await, "reentrant acquisition with a zero timeout");
    let tried = cx.try_acquire(&*lock, "reentrant try_acquire").await;
    cx.check(tried.as_ref().map(|g| g.token()) == Some(outer.token()), "try_acquire reenters with the same token");
    cx.check(inner.token() == outer.token(), "a reentrant guard carries the same token");
    drop(tried);
    cx.release(inner, "release inner").await;
    cx.release(outer, "release outer").await;
}

/// Contract 9: the lock is freed only when every guard of the handle is released.
pub async fn lock_is_freed_only_after_every_reentrant_guard(h: &dyn Harness) {
    let cx = Ctx::new(h, "lock_is_freed_only_after_every_reentrant_guard");
    let (a, b) = (cx.client().await, cx.client().await);
    let lock = cx.lock(&a);
    let other = cx.lock(&b);
    let outer = cx.acquire(&*lock, "first acquisition").await;
    let inner = cx.acquire(&*lock, "reentrant acquisition").await;
    cx.release(outer, "release the outer guard first").await;
    cx.check(inner.is_held(), "the inner guard still holds");
    cx.check(lock.is_held(), "the handle still holds");
    cx.check(cx.try_acquire(&*other, "another client tries").await.is_none(), "the lock is still taken");
    cx.release(inner, "release the last guard").await;
    cx.check(!lock.is_held(), "the handle no longer holds");
    cx.assert_free(&b, "another client takes it after the last guard").await;
}

/// Contract 9: a different handle for the same name in the same client contends like any
/// other owner, and gets a greater token after the first owner releases.
pub async fn another_handle_in_the_same_client_contends(h: &dyn Harness) {
    let cx = Ctx::new(h, "another_handle_in_the_same_client_contends");
    let a = cx.client().await;
    let (first, second) = (cx.lock(&a), cx.lock(&a));
    let guard = cx.acquire(&*first, "first handle acquires").await;
    let outcome = second.acquire_timeout(Duration::from_millis(100)).await;
    cx.check(matches!(outcome, Err(Error::Timeout { .. })), "the second handle waits and times out");
    let token = guard.token();
    cx.release(guard, "first handle releases").await;
    let next = cx.acquire(&*second, "second handle acquires").await;
    cx.check(next.token() > token, "the second handle's hold is a fresh one");
}

/// Contract 9: reentry after the hold was lost fails with `LockLost`.
pub async fn reentry_after_loss_fails_with_lock_lost(h: &dyn Harness) {
    let cx = Ctx::new(h, "reentry_after_loss_fails_with_lock_lost");
    let a = cx.client().await;
    let lock = cx.lock(&a);
    let guard = cx.acquire(&*lock, "acquire").await;
    if !cx.applied(h.delete_record(&cx.name).await, "delete_record") {
        return;
    }
    let reason = cx
        .within(
            h.timing().lease.unwrap_or(Duration::ZERO) + h.timing().operation * 2,
            "loss is signalled",
            guard.lost(),
        )
        .await;
    let _: LossReason = reason;
    match lock.acquire().await {
        Err(Error::LockLost { .. }) => {}
        other => cx.fail("reenter after loss", format!("expected LockLost, got {other:?}")),
    }
    drop(guard);
}
