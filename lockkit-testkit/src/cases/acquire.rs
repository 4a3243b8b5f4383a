//! Contract 4-8: try_acquire, timeouts, notification-driven waiting, cancel safety, fairness.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::{AcquireOptions, Error, Wait};

use super::Ctx;
use crate::harness::Harness;

/// Contract 4: `try_acquire` on a held lock returns `Ok(None)` without waiting.
pub async fn try_acquire_returns_none_while_held(h: &dyn Harness) {
    let cx = Ctx::new(h, "try_acquire_returns_none_while_held");
    let (a, b) = (cx.client().await, cx.client().await);
    let guard = cx.acquire(&cx.lock(&a), "holder acquires").await;
    let lock = cx.lock(&b);
    for attempt in 0..3 {
        let got = cx.try_acquire(&lock, &format!("try #{attempt}")).await;
        cx.check(got.is_none(), "try_acquire on a held lock returns None");
    }
    cx.release(guard, "holder releases").await;
}

/// Contract 4: a failed `try_acquire` leaves no trace: once the holder releases, a third
/// client takes the lock at once (no queued node or key of the failed try blocks it).
pub async fn try_acquire_leaves_no_trace(h: &dyn Harness) {
    let cx = Ctx::new(h, "try_acquire_leaves_no_trace");
    let (a, b, c) = (cx.client().await, cx.client().await, cx.client().await);
    let guard = cx.acquire(&cx.lock(&a), "holder acquires").await;
    cx.check(cx.try_acquire(&cx.lock(&b), "failed try").await.is_none(), "the try fails");
    if let Some(info) = cx.inspect(&a).await {
        cx.check(info.waiters.unwrap_or(0) == 0, "no waiter is queued by a try");
    }
    cx.release(guard, "holder releases").await;
    let third = cx.try_acquire(&cx.lock(&c), "third client tries").await;
    cx.check(third.is_some(), "nothing left by the failed try blocks the third client");
}

/// Contract 5: `acquire_timeout` on a held lock fails with `Timeout`, not before the timeout
/// and not much after it.
pub async fn acquire_timeout_fails_close_to_the_timeout(h: &dyn Harness) {
    let cx = Ctx::new(h, "acquire_timeout_fails_close_to_the_timeout");
    let (a, b) = (cx.client().await, cx.client().await);
    let guard = cx.acquire(&cx.lock(&a), "holder acquires").await;
    let timeout = Duration::from_millis(300);
    let started = Instant::now();
    let outcome = cx.lock(&b).acquire_timeout(timeout).await;
    let waited = started.elapsed();
    match outcome {
        Err(Error::Timeout { .. }) => {}
        other => cx.fail("acquire_timeout on a held lock", format!("expected Timeout, got {other:?}")),
    }
    cx.check(waited >= timeout, &format!("returned early, after {waited:?} of {timeout:?}"));
    cx.check(
        waited <= timeout + h.timing().late,
        &format!("returned {waited:?} after a {timeout:?} timeout, over {:?} late", h.timing().late),
    );
    cx.release(guard, "holder releases").await;
}

/// Contract 5: a timed-out acquisition leaves no trace: it leaves the queue while the lock is
/// still held (where the backend counts waiters), and once the holder releases, a third
/// client takes the lock at once.
pub async fn acquire_timeout_leaves_no_trace(h: &dyn Harness) {
    let cx = Ctx::new(h, "acquire_timeout_leaves_no_trace");
    let (a, b, c) = (cx.client().await, cx.client().await, cx.client().await);
    let guard = cx.acquire(&cx.lock(&a), "holder acquires").await;
    let outcome = cx.lock(&b).acquire_timeout(Duration::from_millis(100)).await;
    cx.check(matches!(outcome, Err(Error::Timeout { .. })), "the waiter times out");
    cx.await_waiters(&a, 0).await;
    cx.release(guard, "holder releases").await;
    cx.assert_free(&c, "a third client takes the lock at once").await;
}

/// Contract 5: a timeout of zero behaves like `try_acquire`, and a timeout too large for the
/// clock behaves like waiting forever, without panicking.
pub async fn extreme_timeouts_are_handled(h: &dyn Harness) {
    let cx = Ctx::new(h, "extreme_timeouts_are_handled");
    let (a, b) = (cx.client().await, cx.client().await);
    let guard = cx.acquire(&cx.lock(&a), "holder acquires").await;
    let zero = cx.lock(&b).acquire_timeout(Duration::ZERO).await;
    cx.check(matches!(zero, Err(Error::Timeout { .. })), "a zero timeout on a held lock is a Timeout");
    let lock_b = cx.lock(&b);
    let waiting = tokio::spawn(async move { lock_b.acquire_timeout(Duration::MAX).await.map(|g| g.token()) });
    cx.release(guard, "holder releases").await;
    let got = cx.within(h.timing().wake + h.timing().operation, "huge-timeout waiter acquires", waiting).await;
    cx.check(matches!(got, Ok(Ok(_))), &format!("a Duration::MAX timeout waits like forever: {got:?}"));
}

/// Contract 5: a waiter whose holder releases before the timeout gets the lock.
pub async fn acquire_timeout_succeeds_when_released_in_time(h: &dyn Harness) {
    let cx = Ctx::new(h, "acquire_timeout_succeeds_when_released_in_time");
    let (a, b) = (cx.client().await, cx.client().await);
    let guard = cx.acquire(&cx.lock(&a), "holder acquires").await;
    let lock_b = cx.lock(&b);
    let timeout = h.timing().wake * 4 + h.timing().operation;
    let waiter = tokio::spawn(async move { lock_b.acquire_timeout(timeout).await.map(|g| g.token()) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    cx.release(guard, "holder releases").await;
    let got = cx.within(timeout * 2, "waiter finishes", waiter).await;
    cx.check(matches!(got, Ok(Ok(_))), &format!("the waiter gets the lock in time: {got:?}"));
}

/// Contract 6: a waiting `acquire` is woken by the release within the wake bound, far below
/// any lease, so waiting is driven by notifications and not by polling.
pub async fn release_wakes_waiter_promptly(h: &dyn Harness) {
    let cx = Ctx::new(h, "release_wakes_waiter_promptly");
    let (a, b) = (cx.client().await, cx.client().await);
    let guard = cx.acquire(&cx.lock(&a), "holder acquires").await;
    let lock_b = cx.lock(&b);
    let waiter = tokio::spawn(async move {
        let guard = lock_b.acquire().await?;
        Ok::<_, Error>((Instant::now(), guard))
    });
    if !cx.await_waiters(&a, 1).await {
        // Without a queue to look at, give the waiter time to start waiting.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let released_at = Instant::now();
    cx.release(guard, "holder releases").await;
    let bound = h.timing().wake;
    let (acquired_at, _guard) = cx.ok(
        cx.within(bound * 2, "the waiter wakes", waiter).await.unwrap_or_else(|e| cx.fail("join", e)),
        "waiter acquires",
    );
    let woke = acquired_at.saturating_duration_since(released_at);
    cx.check(
        woke <= bound,
        &format!("the waiter woke {woke:?} after the release, over the {bound:?} bound: is it polling?"),
    );
}

/// Contract 7: dropping a waiting `acquire` future leaves no trace.
pub async fn dropped_acquire_leaves_no_trace(h: &dyn Harness) {
    let cx = Ctx::new(h, "dropped_acquire_leaves_no_trace");
    let (a, b, c) = (cx.client().await, cx.client().await, cx.client().await);
    let guard = cx.acquire(&cx.lock(&a), "holder acquires").await;
    let waiter = cx.spawn_acquire(&b);
    if !cx.await_waiters(&a, 1).await {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    waiter.abort();
    let _ = waiter.await;
    if a.provider.capabilities().waiter_count {
        cx.await_waiters(&a, 0).await;
    }
    cx.release(guard, "holder releases").await;
    cx.assert_free(&c, "a third client takes the lock at once").await;
}

/// Contract 7: a cancelled waiter in the middle of the queue does not block the next one.
pub async fn cancelled_waiter_does_not_block_others(h: &dyn Harness) {
    let cx = Ctx::new(h, "cancelled_waiter_does_not_block_others");
    let (a, b, c) = (cx.client().await, cx.client().await, cx.client().await);
    let guard = cx.acquire(&cx.lock(&a), "holder acquires").await;
    let cancelled = cx.spawn_acquire(&b);
    if !cx.await_waiters(&a, 1).await {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let next = cx.spawn_acquire(&c);
    if !cx.await_waiters(&a, 2).await {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cancelled.abort();
    let _ = cancelled.await;
    cx.release(guard, "holder releases").await;
    let bound = h.timing().wake + h.timing().operation;
    let got = cx.within(bound, "the next waiter acquires", next).await;
    cx.check(matches!(got, Ok(Ok(_))), &format!("the waiter behind the cancelled one acquires: {got:?}"));
}

/// Contract 7: acquisitions cancelled at arbitrary points (timeouts of a few milliseconds,
/// racing the holder's release) never leave the lock taken.
pub async fn acquire_cancelled_at_any_point_leaves_no_trace(h: &dyn Harness) {
    let cx = Ctx::new(h, "acquire_cancelled_at_any_point_leaves_no_trace");
    let (a, b, c) = (cx.client().await, cx.client().await, cx.client().await);
    let lock_a = cx.lock(&a);
    let lock_b = cx.lock(&b);
    for round in 0..20u64 {
        let guard = cx.acquire(&lock_a, "holder acquires").await;
        let racer = lock_b.clone();
        let cut = Duration::from_micros(200 * (round % 10));
        let attempt = tokio::spawn(async move {
            let _ = tokio::time::timeout(cut, racer.acquire()).await;
        });
        tokio::time::sleep(Duration::from_micros(150 * (round % 7))).await;
        cx.release(guard, "holder releases").await;
        let _ = attempt.await;
    }
    cx.assert_free(&c, "after every cancelled race the lock is free").await;
}

/// Contract 7: an acquisition dropped right after it was granted (the release handed it the
/// lock, but nobody polled it again) frees the lock promptly.
pub async fn acquire_dropped_after_grant_frees_the_lock(h: &dyn Harness) {
    let cx = Ctx::new(h, "acquire_dropped_after_grant_frees_the_lock");
    let (a, b, c) = (cx.client().await, cx.client().await, cx.client().await);
    let guard = cx.acquire(&cx.lock(&a), "holder acquires").await;
    let lock_b = cx.lock(&b);
    let mut pending = Box::pin(lock_b.acquire_with(AcquireOptions::default().with_wait(Wait::Forever)));
    // Poll until the waiter is queued (a first acquisition may have to connect first), then
    // leave it unpolled.
    let polled = futures_poll_once(pending.as_mut()).await;
    cx.check(polled.is_none(), "the waiter waits while the lock is held");
    if a.provider.capabilities().waiter_count {
        let deadline = tokio::time::Instant::now() + h.timing().operation;
        while cx.inspect(&a).await.and_then(|info| info.waiters) != Some(1) {
            if tokio::time::Instant::now() >= deadline {
                cx.fail("the waiter is queued", format!("not queued after {:?}", h.timing().operation));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            let polled = futures_poll_once(pending.as_mut()).await;
            cx.check(polled.is_none(), "the waiter waits while the lock is held");
        }
    } else {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cx.release(guard, "holder releases").await;
    // Give a notification-driven hand-off time to land in the unpolled waiter.
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(pending);
    let bound = h.timing().operation + h.timing().wake;
    let c_lock = cx.lock(&c);
    let got = cx.within(bound, "a third client acquires after the drop", c_lock.acquire()).await;
    drop(cx.ok(got, "third client acquires"));
}

async fn futures_poll_once<F: std::future::Future + Unpin>(future: F) -> Option<F::Output> {
    let mut future = future;
    std::future::poll_fn(|cx| match std::pin::Pin::new(&mut future).poll(cx) {
        std::task::Poll::Ready(output) => std::task::Poll::Ready(Some(output)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await
}

/// Contract 8 (capability `fair`): waiters are granted in arrival order.
pub async fn waiters_are_granted_in_arrival_order(h: &dyn Harness) {
    let cx = Ctx::new(h, "waiters_are_granted_in_arrival_order");
    let Some([a]) = cx.clients_declaring("fair", |c| c.fair).await else { return };
    if !a.provider.capabilities().waiter_count {
        return cx.unchecked("arrival order needs `waiter_count` to know each waiter is queued");
    }
    let guard = cx.acquire(&cx.lock(&a), "holder acquires").await;
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for index in 0..5usize {
        let client = cx.client().await;
        let lock = cx.lock(&client);
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let guard = lock.acquire().await?;
            order.lock().map(|mut o| o.push(index)).ok();
            guard.release().await?;
            drop(client);
            Ok::<_, Error>(())
        }));
        cx.await_waiters(&a, index + 1).await;
    }
    cx.release(guard, "holder releases").await;
    for waiter in waiters {
        let joined = cx.within(h.timing().operation * 5, "waiters finish", waiter).await;
        cx.check(matches!(joined, Ok(Ok(()))), &format!("a waiter failed: {joined:?}"));
    }
    let order = order.lock().map(|o| o.clone()).unwrap_or_default();
    cx.check(order == vec![0, 1, 2, 3, 4], &format!("granted in order {order:?}, not arrival order"));
}
