//! Breaking a stuck lock ([`LockProvider::break_lock`](lockkit_core::LockProvider::break_lock)),
//! for backends that declare `break_lock` (and `inspect`, which says who held it).

use std::time::Duration;

use lockkit_core::{Error, HoldEnd};

use super::Ctx;
use crate::harness::{Harness, TestClient};

/// Whether the backend claims the behaviour; says why not otherwise.
fn applies(cx: &Ctx<'_>, client: &TestClient) -> bool {
    let capabilities = client.provider.capabilities();
    if !capabilities.break_lock || !capabilities.inspect {
        cx.not_applicable("the backend does not declare `break_lock` and `inspect`");
        return false;
    }
    true
}

/// A lock broken while held: the break reports the holder (its token), the holder's guard is
/// signalled lost within a bounded time (at once, or by its next renewal or check) and its
/// release fails with `LockLost`; a waiter queued behind it is handed the lock as by a
/// release, with a greater token; and another client acquires after that one, greater still.
pub async fn breaking_a_held_lock_signals_the_holder_and_admits_another(h: &dyn Harness) {
    let cx = Ctx::new(h, "breaking_a_held_lock_signals_the_holder_and_admits_another");
    let (holder, operator, waiter, later) =
        (cx.client().await, cx.client().await, cx.client().await, cx.client().await);
    if !applies(&cx, &holder) {
        return;
    }
    let guard = cx.acquire(&cx.lock(&holder), "the holder acquires").await;
    let broken_token = guard.token();
    let watcher = guard.watcher();
    let lock_w = cx.lock(&waiter);
    let queued = tokio::spawn(async move { lock_w.acquire().await });
    if !cx.await_waiters(&operator, 1).await {
        // No waiter count: give the waiter a moment to start waiting; the case holds either way.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let bound = h.timing().operation;
    let broken = cx.ok(cx.within(bound, "break the lock", operator.provider.break_lock(&cx.name)).await, "break");
    let tokens: Vec<_> = broken.iter().map(|held| held.token).collect();
    cx.check(tokens == [guard.token()], &format!("the break reports the holder's token {}: {tokens:?}", guard.token()));
    let lost_bound = h.timing().lease.unwrap_or(Duration::ZERO) + h.timing().operation * 2;
    let end = cx.within(lost_bound, "the holder's guard is signalled lost", watcher.ended()).await;
    cx.check(matches!(end, HoldEnd::Lost(_)), &format!("the hold ended by loss, not {end:?}"));
    cx.check(!guard.is_held(), "is_held() is false after the break");
    let next = cx.within(h.timing().wake + bound * 2, "the waiter is handed the lock", queued).await;
    let next = cx.ok(next.unwrap_or_else(|error| cx.fail("join the waiter", error)), "the waiter acquires");
    cx.check(next.token() > guard.token(), "the waiter's token is greater than the broken holder's");
    match cx.within(bound, "release after the break", guard.release()).await {
        Err(Error::LockLost { .. }) => {}
        other => cx.fail("release after the break", format!("expected LockLost, got {other:?}")),
    }
    cx.check(next.is_held(), "the broken holder's release spares the new holder");
    let info = cx.inspect(&operator).await;
    let shown = info.as_ref().and_then(|info| info.holder()).map(|held| held.token);
    cx.check(shown == Some(next.token()), &format!("inspect shows the new holder: {info:?}"));
    cx.release(next, "the new holder releases").await;
    let last = cx.acquire(&cx.lock(&later), "another client acquires").await;
    cx.check(last.token() > broken_token, "a later acquisition's token is greater than the broken holder's");
    cx.release(last, "release").await;
}

/// Breaking a lock nobody holds finds nothing to break (an empty list, not an error), on a
/// name never used and on one released before.
pub async fn breaking_a_free_lock_finds_nothing_to_break(h: &dyn Harness) {
    let cx = Ctx::new(h, "breaking_a_free_lock_finds_nothing_to_break");
    let (a, operator) = (cx.client().await, cx.client().await);
    if !applies(&cx, &a) {
        return;
    }
    let bound = h.timing().operation;
    let never =
        cx.ok(cx.within(bound, "break a never used lock", operator.provider.break_lock(&cx.name)).await, "break");
    cx.check(never.is_empty(), &format!("nothing to break on a never used lock: {never:?}"));
    let guard = cx.acquire(&cx.lock(&a), "acquire").await;
    cx.release(guard, "release").await;
    let free = cx.ok(cx.within(bound, "break a released lock", operator.provider.break_lock(&cx.name)).await, "break");
    cx.check(free.is_empty(), &format!("nothing to break on a released lock: {free:?}"));
    cx.assert_free(&a, "the lock is still usable").await;
}
