//! Contract 11-14: release, release after loss, dropped guards, dead holders.

use std::time::{Duration, Instant};

use lockkit_core::{Error, LockGuard};

use super::Ctx;
use crate::harness::Harness;

/// Contract 11: `release` frees the lock; the same and other clients can take it again.
pub async fn release_frees_the_lock(h: &dyn Harness) {
    let cx = Ctx::new(h, "release_frees_the_lock");
    let (a, b) = (cx.client().await, cx.client().await);
    let lock = cx.lock(&a);
    let guard = cx.acquire(&lock, "acquire").await;
    let watcher = guard.watcher();
    cx.release(guard, "release").await;
    cx.check(!watcher.is_held(), "the released hold no longer counts as held");
    cx.assert_free(&b, "another client takes it").await;
    let again = cx.try_acquire(&lock, "the first handle takes it again").await;
    cx.check(again.is_some(), "the first handle can take it again");
}

/// Contract 11: `release` hands the lock to the next waiter.
pub async fn release_admits_next_waiter(h: &dyn Harness) {
    let cx = Ctx::new(h, "release_admits_next_waiter");
    let (a, b) = (cx.client().await, cx.client().await);
    let (guard, waiter) = cx.hold_with_waiter(&a, &b).await;
    let token = guard.token();
    cx.release(guard, "holder releases").await;
    let next = cx.granted(waiter, "the waiter acquires").await;
    cx.check(next > token, "the waiter's token is greater");
}

/// Contract 12: releasing a hold that was lost returns `LockLost` and leaves the new holder
/// untouched.
pub async fn release_after_loss_fails_and_spares_the_new_holder(h: &dyn Harness) {
    let cx = Ctx::new(h, "release_after_loss_fails_and_spares_the_new_holder");
    let (a, b, c) = (cx.client().await, cx.client().await, cx.client().await);
    let stale = cx.acquire(&cx.lock(&a), "first holder acquires").await;
    if !cx.applied(h.delete_record(&cx.name).await, "delete_record") {
        return;
    }
    let fresh = cx.acquire(&cx.lock(&b), "second holder acquires").await;
    match stale.release().await {
        Err(Error::LockLost { .. }) => {}
        other => cx.fail("release the lost hold", format!("expected LockLost, got {other:?}")),
    }
    cx.check(fresh.is_held(), "the new holder still holds");
    cx.check(
        cx.try_acquire(&cx.lock(&c), "a third client tries").await.is_none(),
        "the lock is still the new holder's",
    );
    cx.release(fresh, "the new holder releases").await;
}

/// Contract 13: dropping a guard frees the lock promptly, well before any lease runs out.
pub async fn dropped_guard_frees_the_lock_promptly(h: &dyn Harness) {
    let cx = Ctx::new(h, "dropped_guard_frees_the_lock_promptly");
    let (a, b) = (cx.client().await, cx.client().await);
    let (guard, waiter) = cx.hold_with_waiter(&a, &b).await;
    drop(guard);
    cx.granted(waiter, "a waiter acquires after the drop").await;
}

/// Contract 13: dropping the guard and acquiring again on the same handle works at once
/// (the handle waits for its own background release).
pub async fn reacquire_right_after_drop_succeeds(h: &dyn Harness) {
    let cx = Ctx::new(h, "reacquire_right_after_drop_succeeds");
    let a = cx.client().await;
    let lock = cx.lock(&a);
    for _ in 0..5 {
        let guard = cx.acquire(&lock, "acquire").await;
        drop(guard);
        let again = cx.try_acquire(&lock, "try right after the drop").await;
        cx.check(again.is_some(), "the handle's own dropped hold does not block it");
    }
}

/// Contract 13: a guard dropped on a plain thread, outside every runtime, frees the lock as
/// promptly as one dropped in async code (its release runs on the runtime that granted it).
pub async fn guard_dropped_on_a_plain_thread_is_released_promptly(h: &dyn Harness) {
    let cx = Ctx::new(h, "guard_dropped_on_a_plain_thread_is_released_promptly");
    let (a, b) = (cx.client().await, cx.client().await);
    let (guard, waiter) = cx.hold_with_waiter(&a, &b).await;
    let dropped_at = Instant::now();
    let dropped = std::thread::spawn(move || drop(guard)).join();
    cx.check(dropped.is_ok(), "dropping the guard on a plain thread does not panic");
    cx.granted(waiter, "a waiter acquires after the drop").await;
    freed_by_the_release(&cx, dropped_at);
}

/// Checks that a lock was freed sooner than a lease after `dropped_at`: by the release, not
/// by the store's expiry of the hold.
fn freed_by_the_release(cx: &Ctx<'_>, dropped_at: Instant) {
    if let Some(lease) = cx.h.timing().lease {
        let after = dropped_at.elapsed();
        cx.check(after < lease, &format!("freed {after:?} after the drop: by the release, not the {lease:?} lease"));
    }
}

/// Contract 13: a guard dropped after the runtime that granted it has shut down neither
/// panics nor keeps the lock until its lease runs out: its release still reaches the store.
pub async fn guard_dropped_after_its_runtime_shut_down_is_released_promptly(h: &dyn Harness) {
    let cx = Ctx::new(h, "guard_dropped_after_its_runtime_shut_down_is_released_promptly");
    let (a, b) = (cx.client().await, cx.client().await);
    let lock = cx.lock(&a);
    let bound = h.timing().operation;
    crate::panics::watch();
    let home_thread_panics = crate::panics::on_thread(lockkit_core::home::THREAD_NAME);
    let thread = format!("lockkit-drop-{}", uuid::Uuid::new_v4().simple());
    let outcome = std::thread::Builder::new().name(thread.clone()).spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        let guard = runtime
            .block_on(async { tokio::time::timeout(bound, lock.acquire()).await })
            .map_err(|_| format!("not granted within {bound:?}"))?
            .map_err(|e| e.to_string())?;
        drop(runtime);
        let dropped_at = Instant::now();
        drop(guard);
        Ok::<_, String>(dropped_at)
    });
    let dropped_at = match outcome.map(std::thread::JoinHandle::join) {
        Ok(Ok(Ok(dropped_at))) => dropped_at,
        Ok(Ok(Err(error))) => cx.fail("acquire on a private runtime", error),
        Ok(Err(_)) => cx.fail("drop the guard after its runtime ended", "it panicked"),
        Err(error) => cx.fail("start a thread", error.to_string()),
    };
    let lock_b = cx.lock(&b);
    let got = cx.within(h.timing().wake + bound, "another client acquires after the drop", lock_b.acquire()).await;
    drop(cx.ok(got, "acquire after the drop"));
    freed_by_the_release(&cx, dropped_at);
    cx.check(crate::panics::on_thread(&thread) == 0, "nothing panicked, caught or not, on the dropping thread");
    cx.check(
        crate::panics::on_thread(lockkit_core::home::THREAD_NAME) == home_thread_panics,
        "nothing panicked on lockkit's home thread",
    );
}

/// Contract 13 and 17: a provider first used on one runtime, which then shut down, keeps
/// working on another: its holds there are kept (renewed, for leased backends) and exclude
/// others for as long as the guard lives.
pub async fn provider_used_from_two_runtimes_keeps_its_holds(h: &dyn Harness) {
    let cx = Ctx::new(h, "provider_used_from_two_runtimes_keeps_its_holds");
    let (a, b) = (cx.client().await, cx.client().await);
    let first = cx.lock_named(&a, &format!("{}-first-runtime", cx.name));
    let bound = h.timing().operation;
    let outcome = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let guard = tokio::time::timeout(bound, first.acquire())
                .await
                .map_err(|_| format!("not granted within {bound:?}"))?
                .map_err(|e| e.to_string())?;
            guard.release().await.map_err(|e| e.to_string())
        })
    })
    .join();
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(error)) => cx.fail("use the provider on a first runtime", error),
        Err(_) => cx.fail("use the provider on a first runtime", "it panicked"),
    }
    let guard = cx.acquire(&cx.lock(&a), "acquire on the second runtime").await;
    if let Some(lease) = h.timing().lease {
        hold_through_renewals(&cx, &guard, lease).await;
    }
    cx.check(guard.is_held(), "the hold on the second runtime is kept");
    cx.check(cx.try_acquire(&cx.lock(&b), "another client tries").await.is_none(), "the lock is still held");
    cx.release(guard, "release on the second runtime").await;
}

/// Waits until the guard's deadline has moved past where it stood after two leases' worth of
/// renewals would have run, failing if the hold is lost meanwhile.
async fn hold_through_renewals(cx: &Ctx<'_>, guard: &LockGuard, lease: Duration) {
    let Some(first) = guard.valid_until() else { return };
    cx.eventually(lease * 4, "the hold is renewed twice on the second runtime", || async {
        cx.check(guard.is_held(), "the hold is kept while the guard lives");
        guard.valid_until().is_some_and(|until| until >= first + lease)
    })
    .await;
}

/// Contract 14: a holder that dies frees the lock after the lease or session timeout, and
/// not before.
pub async fn dead_holder_frees_the_lock_after_the_lease_not_before(h: &dyn Harness) {
    let cx = Ctx::new(h, "dead_holder_frees_the_lock_after_the_lease_not_before");
    let (a, b) = (cx.client().await, cx.client().await);
    let guard = cx.acquire(&cx.lock(&a), "holder acquires").await;
    let killed_at = Instant::now();
    if !cx.applied(a.faults.kill().await, "kill") {
        return;
    }
    drop(cx.acquire_after_death(&cx.lock(&b), killed_at).await);
    drop(guard);
}
