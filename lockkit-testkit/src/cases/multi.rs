//! Multi-locks ([`MultiLock`]): several locks all or nothing, in one canonical order.

use std::time::{Duration, Instant};

use lockkit_core::{Error, LockHandle, MultiLock};

use super::Ctx;
use crate::harness::{Harness, TestClient};

/// The lock names of a case: `count` fresh names under the case's own.
fn names(cx: &Ctx<'_>, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{}/{i}", cx.name)).collect()
}

fn handles(cx: &Ctx<'_>, client: &TestClient, names: &[String]) -> Vec<LockHandle> {
    names.iter().map(|name| cx.lock_named(client, name)).collect()
}

#[track_caller]
fn multi(cx: &Ctx<'_>, locks: Vec<LockHandle>) -> MultiLock {
    cx.ok(MultiLock::new(locks), "make a multi-lock")
}

/// Waits until every lock in `names` is free and nobody waits: by `inspect` where the backend
/// has it (every name idle), else by another client taking each at once.
async fn assert_all_idle(cx: &Ctx<'_>, client: &TestClient, names: &[String], step: &str) {
    let bound = cx.h.timing().operation;
    if client.provider.capabilities().inspect {
        for name in names {
            let provider = &client.provider;
            cx.eventually(bound, &format!("{step}: {name} is idle"), || async move {
                cx.ok(provider.inspect(name).await, "inspect").is_idle()
            })
            .await;
        }
        return;
    }
    for lock in handles(cx, client, names) {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(probe) = cx.try_acquire(&lock, &format!("{step}: probe {}", lock.name())).await {
                cx.release(probe, "release the probe").await;
                break;
            }
            if Instant::now() >= deadline {
                cx.fail(step, format!("{} is still taken after {bound:?}", lock.name()));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// All or nothing: while one of its locks is held by another client, a multi-lock times out
/// close to its one deadline, and holds none of the others afterwards; `try_acquire` returns
/// `None` the same way. Once the other client releases, the multi-lock takes them all, each
/// with its token.
pub async fn multi_lock_is_all_or_nothing(h: &dyn Harness) {
    let cx = Ctx::new(h, "multi_lock_is_all_or_nothing");
    let (a, b, c) = (cx.client().await, cx.client().await, cx.client().await);
    let names = names(&cx, 3);
    let blocker = cx.acquire(&cx.lock_named(&b, &names[1]), "another client holds the middle lock").await;
    let locks = multi(&cx, handles(&cx, &a, &names));
    let timeout = Duration::from_millis(300);
    let outcome =
        cx.within(timeout + h.timing().late + h.timing().operation, "time out", locks.acquire_timeout(timeout)).await;
    match outcome {
        Err(Error::Timeout { lock, .. }) => cx.check(lock.as_str() == names[1], "the timeout names the held lock"),
        other => cx.fail("the multi-lock times out", format!("expected Timeout, got {other:?}")),
    }
    let tried = cx.ok(cx.within(h.timing().operation * 3, "try", locks.try_acquire()).await, "try_acquire");
    cx.check(tried.is_none(), "try_acquire of the set returns None while one lock is held");
    for name in [&names[0], &names[2]] {
        let probe = cx.try_acquire(&cx.lock_named(&c, name), "a third client takes an unheld lock").await;
        cx.check(probe.is_some(), &format!("the multi-lock holds none of the others afterwards ({name})"));
        drop(probe);
    }
    cx.release(blocker, "the other client releases").await;
    let bound = h.timing().operation * 3 + h.timing().wake;
    let guard = cx.ok(cx.within(bound, "acquire all", locks.acquire()).await, "acquire all");
    cx.check(guard.is_held(), "every hold is held");
    let tokens: Vec<_> = guard.tokens().map(|(name, _)| name.as_str().to_owned()).collect();
    let mut expected = names.clone();
    expected.sort();
    cx.check(tokens == expected, &format!("a token for every lock, in name order: {tokens:?}"));
    cx.ok(cx.within(h.timing().operation * 3, "release all", guard.release()).await, "release all");
    assert_all_idle(&cx, &c, &names, "after the release").await;
}

/// No deadlock: two clients repeatedly take multi-locks over the same names given in opposite
/// orders; every round completes for both within a bounded time, because both acquire in the
/// one canonical order.
pub async fn multi_locks_in_opposite_order_do_not_deadlock(h: &dyn Harness) {
    let cx = Ctx::new(h, "multi_locks_in_opposite_order_do_not_deadlock");
    let (a, b) = (cx.client().await, cx.client().await);
    let names = names(&cx, 3);
    let mut reversed = names.clone();
    reversed.reverse();
    let forward = multi(&cx, handles(&cx, &a, &names));
    let backward = multi(&cx, handles(&cx, &b, &reversed));
    let bound = h.timing().operation * 6 + h.timing().wake * 2;
    for round in 0..10 {
        let take = |locks: MultiLock| async move {
            let guard = locks.acquire().await?;
            tokio::task::yield_now().await;
            guard.release().await
        };
        let both = futures_join(take(forward.clone()), take(backward.clone()));
        let (x, y) = cx.within(bound, &format!("round {round}: both multi-locks complete"), both).await;
        cx.ok(x, &format!("round {round}: the forward multi-lock"));
        cx.ok(y, &format!("round {round}: the backward multi-lock"));
    }
    assert_all_idle(&cx, &a, &names, "after the rounds").await;
}

/// Runs two futures concurrently on spawned tasks (so a backend that needs the runtime's other
/// workers gets them) and returns both outputs.
async fn futures_join<A, B>(x: A, y: B) -> (A::Output, B::Output)
where
    A: std::future::Future + Send + 'static,
    B: std::future::Future + Send + 'static,
    A::Output: Send + 'static,
    B::Output: Send + 'static,
{
    let (x, y) = (tokio::spawn(x), tokio::spawn(y));
    let (x, y) = tokio::join!(x, y);
    match (x, y) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(error), _) | (_, Err(error)) => std::panic::resume_unwind(error.into_panic()),
    }
}

/// Rollback leaves no trace: after a multi-lock timed out (having taken the locks before the
/// held one), and after a `try_acquire` of the set failed, every name is idle (`inspect`
/// shows no holder and no waiter) once the other holder releases.
pub async fn multi_lock_rollback_leaves_no_trace(h: &dyn Harness) {
    let cx = Ctx::new(h, "multi_lock_rollback_leaves_no_trace");
    let (a, b, c) = (cx.client().await, cx.client().await, cx.client().await);
    let names = names(&cx, 4);
    let blocker = cx.acquire(&cx.lock_named(&b, &names[3]), "another client holds the last lock").await;
    let locks = multi(&cx, handles(&cx, &a, &names));
    let outcome =
        cx.within(h.timing().operation * 3, "time out", locks.acquire_timeout(Duration::from_millis(200))).await;
    cx.check(matches!(outcome, Err(Error::Timeout { .. })), &format!("the multi-lock times out: {outcome:?}"));
    let tried = cx.ok(cx.within(h.timing().operation * 3, "try", locks.try_acquire()).await, "try_acquire");
    cx.check(tried.is_none(), "try_acquire of the set returns None");
    assert_all_idle(&cx, &c, &names[..3], "right after the rollback").await;
    cx.release(blocker, "the other client releases").await;
    assert_all_idle(&cx, &c, &names, "once the other holder released").await;
}

/// Cancel safety: a multi-lock acquisition dropped while it waits for one lock, after taking
/// the ones before it, leaves no hold and no waiter behind (the guards it took are released
/// by their Drop, as any dropped guard is).
pub async fn dropped_multi_lock_acquisition_leaves_no_trace(h: &dyn Harness) {
    let cx = Ctx::new(h, "dropped_multi_lock_acquisition_leaves_no_trace");
    let (a, b, c) = (cx.client().await, cx.client().await, cx.client().await);
    let names = names(&cx, 3);
    let blocker = cx.acquire(&cx.lock_named(&b, &names[2]), "another client holds the last lock").await;
    let locks = multi(&cx, handles(&cx, &a, &names));
    let waiting = tokio::spawn(async move { locks.acquire().await.map(|guard| guard.tokens().count()) });
    // The first two locks are taken once a third client finds the second one held.
    let second = cx.lock_named(&c, &names[1]);
    let bound = h.timing().operation * 2;
    let deadline = Instant::now() + bound;
    while let Some(probe) = cx.try_acquire(&second, "probe the second lock").await {
        drop(probe);
        if Instant::now() >= deadline {
            cx.fail("the multi-lock takes the locks before the held one", format!("not within {bound:?}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    waiting.abort();
    let _ = waiting.await;
    assert_all_idle(&cx, &c, &names[..2], "after the acquisition was dropped").await;
    cx.release(blocker, "the other client releases").await;
    assert_all_idle(&cx, &c, &names, "once the other holder released").await;
}

/// Bad input: the same name twice on one store is refused with a clear `Conflict` before
/// anything is acquired.
pub async fn multi_lock_refuses_a_name_given_twice(h: &dyn Harness) {
    let cx = Ctx::new(h, "multi_lock_refuses_a_name_given_twice");
    let (a, b) = (cx.client().await, cx.client().await);
    let names = names(&cx, 2);
    let mut given = handles(&cx, &a, &names);
    given.push(cx.lock_named(&a, &names[0]));
    match MultiLock::new(given) {
        Err(error @ Error::Conflict { .. }) => {
            cx.check(error.to_string().contains(&names[0]), &format!("the error names the lock: {error}"));
        }
        other => cx.fail("refuse the name given twice", format!("expected Conflict, got {other:?}")),
    }
    assert_all_idle(&cx, &b, &names, "nothing was acquired").await;
}

/// One guard for the set: `lost()` fires on the first loss of any of the locks (here the
/// record of one deleted behind the holder's back), names that lock, and the release of the
/// set then reports the loss while freeing the others.
pub async fn multi_guard_signals_the_first_loss(h: &dyn Harness) {
    let cx = Ctx::new(h, "multi_guard_signals_the_first_loss");
    let (a, c) = (cx.client().await, cx.client().await);
    let names = names(&cx, 3);
    let locks = multi(&cx, handles(&cx, &a, &names));
    let guard = cx.ok(cx.within(h.timing().operation * 3, "acquire all", locks.acquire()).await, "acquire all");
    if !cx.applied(h.delete_record(&names[1]).await, "delete_record") {
        return;
    }
    let bound = h.timing().lease.unwrap_or(Duration::ZERO) + h.timing().operation * 2;
    let (lost, _reason) = cx.within(bound, "the set's lost() fires", guard.lost()).await;
    cx.check(lost.as_str() == names[1], &format!("the loss names the deleted lock, not {lost}"));
    cx.check(!guard.is_held(), "the set is no longer held");
    match cx.within(h.timing().operation * 3, "release the set", guard.release()).await {
        Err(Error::LockLost { lock, .. }) => cx.check(lock.as_str() == names[1], "the release reports the lost lock"),
        other => cx.fail("release the set", format!("expected LockLost, got {other:?}")),
    }
    assert_all_idle(&cx, &c, &[names[0].clone(), names[2].clone()], "the other locks are released").await;
}
