//! Contract 9: every acquisition is its own owner; reentry goes through the guard.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockkit_core::{Error, LossReason};

use super::Ctx;
use crate::harness::Harness;
use crate::history::History;

/// Contract 9: `reenter` on a held guard returns another guard of the same hold at once,
/// without asking the store, with the same fencing token.
pub async fn reenter_returns_a_guard_of_the_same_hold_at_once(h: &dyn Harness) {
    let cx = Ctx::new(h, "reenter_returns_a_guard_of_the_same_hold_at_once");
    let a = cx.client().await;
    let lock = cx.lock(&a);
    let outer = cx.acquire(&lock, "first acquisition").await;
    let inner = cx.ok(outer.reenter(), "reenter from the held guard");
    cx.check(inner.token() == outer.token(), "a reentrant guard carries the same token");
    cx.check(inner.is_held() && outer.is_held(), "both guards say held");
    cx.check(inner.name() == outer.name() && inner.kind() == outer.kind(), "same lock, same kind");
    cx.release(inner, "release inner").await;
    cx.release(outer, "release outer").await;
}

/// Contract 9: the lock is freed only when the last guard of the hold is released.
pub async fn lock_is_freed_only_after_every_reentrant_guard(h: &dyn Harness) {
    let cx = Ctx::new(h, "lock_is_freed_only_after_every_reentrant_guard");
    let (a, b) = (cx.client().await, cx.client().await);
    let lock = cx.lock(&a);
    let other = cx.lock(&b);
    let outer = cx.acquire(&lock, "first acquisition").await;
    let inner = cx.ok(outer.reenter(), "reenter");
    cx.release(outer, "release the outer guard first").await;
    cx.check(inner.is_held(), "the inner guard still holds");
    cx.check(cx.try_acquire(&other, "another client tries").await.is_none(), "the lock is still taken");
    cx.release(inner, "release the last guard").await;
    cx.assert_free(&b, "another client takes it after the last guard").await;
}

/// Contract 9: tasks that share one handle exclude each other exactly as processes do, each
/// with its own fencing token: sharing a handle never shares a hold.
pub async fn tasks_sharing_a_handle_exclude_each_other(h: &dyn Harness) {
    let cx = Ctx::new(h, "tasks_sharing_a_handle_exclude_each_other");
    let a = cx.client().await;
    let lock = Arc::new(cx.lock(&a));
    let history = Arc::new(History::new());
    let inside = Arc::new(AtomicUsize::new(0));
    let (tasks_count, rounds) = (5, 4);
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..tasks_count {
        let (lock, history, inside) = (lock.clone(), history.clone(), inside.clone());
        tasks.spawn(async move {
            let mut overlapped = false;
            for _ in 0..rounds {
                let guard = lock.acquire().await?;
                let index = history.acquired(&format!("task-{task}"), &guard);
                overlapped |= inside.fetch_add(1, Ordering::SeqCst) != 0;
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                history.ended(index, Some(&guard));
                guard.release().await?;
            }
            Ok::<_, Error>(overlapped)
        });
    }
    let bound = h.timing().operation * 10 + h.timing().wake * (tasks_count * rounds) as u32;
    for result in cx.within(bound, "every task finishes", tasks.join_all()).await {
        let overlapped = cx.ok(result, "a task's acquire/release");
        cx.check(!overlapped, "no task ever saw another inside while holding the shared handle");
    }
    if let Err(violations) = history.check() {
        cx.fail("history check: holds through one handle overlapped or reused a token", violations);
    }
}

/// Contract 9: a second acquisition through the handle that holds the lock is another owner:
/// `try_acquire` gets nothing, a timed wait times out, and after the release it gets a
/// greater token.
pub async fn a_second_acquisition_through_one_handle_is_another_owner(h: &dyn Harness) {
    let cx = Ctx::new(h, "a_second_acquisition_through_one_handle_is_another_owner");
    let a = cx.client().await;
    let lock = cx.lock(&a);
    let guard = cx.acquire(&lock, "first acquisition").await;
    cx.check(cx.try_acquire(&lock, "try through the same handle").await.is_none(), "the try is refused");
    let outcome = lock.acquire_timeout(Duration::from_millis(100)).await;
    cx.check(matches!(outcome, Err(Error::Timeout { .. })), "a timed wait through the same handle times out");
    let token = guard.token();
    cx.release(guard, "release").await;
    let next = cx.acquire(&lock, "acquire again").await;
    cx.check(next.token() > token, "the next acquisition's hold is a fresh one");
}

/// Contract 9: reentry after the hold was lost fails with `LockLost`.
pub async fn reentry_after_loss_fails_with_lock_lost(h: &dyn Harness) {
    let cx = Ctx::new(h, "reentry_after_loss_fails_with_lock_lost");
    let a = cx.client().await;
    let lock = cx.lock(&a);
    let guard = cx.acquire(&lock, "acquire").await;
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
    match guard.reenter() {
        Err(Error::LockLost { .. }) => {}
        other => cx.fail("reenter after loss", format!("expected LockLost, got {other:?}")),
    }
    drop(guard);
}
