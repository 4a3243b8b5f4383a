//! Contract 34-35: holds outlive the runtime that granted them, and a dropped guard frees the
//! lock promptly wherever it is dropped.
//!
//! Each case takes the lock on a private current-thread runtime of its own thread (the
//! provider's first use), then does something to that runtime (shuts it down, or leaves it
//! alive and idle: its thread parked, nothing driving it) and goes on from the kit's runtime.

use std::time::{Duration, Instant};

use lockkit_core::{LockGuard, LockHandle};
use tokio::sync::oneshot;

use super::Ctx;
use crate::harness::{Harness, TestClient};

/// How long a hold is kept past its runtime where holds have no lease to renew.
const UNLEASED_HOLD: Duration = Duration::from_secs(1);

/// How many leases a hold is kept past its runtime, renewed all along.
const LEASES: u32 = 3;

/// Acquires `lock` on a current-thread runtime of a thread of its own, bounded by `bound`.
/// With `idle`, the runtime stays alive after the grant but is never driven again (its thread
/// parks until the returned sender is dropped); without, it is shut down before the guard is
/// handed back.
async fn acquire_on_a_private_runtime(
    cx: &Ctx<'_>,
    lock: LockHandle,
    idle: bool,
) -> (LockGuard, Option<std::sync::mpsc::Sender<()>>) {
    let bound = cx.h.timing().operation;
    let (granted_tx, granted_rx) = oneshot::channel::<Result<LockGuard, String>>();
    let (park_tx, park_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::Builder::new().name("lockkit-test-private-runtime".to_owned()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(error) => {
                let _ = granted_tx.send(Err(error.to_string()));
                return;
            }
        };
        let granted = runtime.block_on(async { tokio::time::timeout(bound, lock.acquire()).await });
        let granted = match granted {
            Ok(Ok(guard)) => Ok(guard),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err(format!("not granted within {bound:?}")),
        };
        if idle {
            let _ = granted_tx.send(granted);
            // Alive and idle: nothing polls the runtime's tasks or its I/O until the case ends.
            let _ = park_rx.recv();
            drop(runtime);
        } else {
            drop(runtime);
            let _ = granted_tx.send(granted);
        }
    });
    if let Err(error) = thread {
        cx.fail("start a thread for a private runtime", error.to_string());
    }
    match cx.within(bound * 2, "acquire on a private runtime", granted_rx).await {
        Ok(Ok(guard)) => (guard, idle.then_some(park_tx)),
        Ok(Err(error)) => cx.fail("acquire on a private runtime", error),
        Err(_) => cx.fail("acquire on a private runtime", "the runtime's thread ended without an answer"),
    }
}

/// Keeps `guard` from the kit's runtime for [`LEASES`] leases (or [`UNLEASED_HOLD`]), without
/// touching its provider: the hold must stay held all along, its deadline must move on with
/// renewals, and `other` must not get the lock. The provider's background work alone keeps it.
async fn held_for_several_leases(cx: &Ctx<'_>, guard: &LockGuard, other: &TestClient, step: &str) {
    let started = Instant::now();
    match (cx.h.timing().lease, guard.valid_until()) {
        (Some(lease), Some(first)) => {
            let span = lease * LEASES;
            cx.eventually(span + lease * 2, &format!("{step}: renewed past {LEASES} leases"), || async {
                cx.check(guard.is_held(), &format!("{step}: held {:?} after the change of runtime", started.elapsed()));
                started.elapsed() >= span && guard.valid_until().is_some_and(|until| until >= first + lease * 2)
            })
            .await;
        }
        _ => {
            while started.elapsed() < UNLEASED_HOLD {
                cx.check(guard.is_held(), &format!("{step}: held {:?} after the change of runtime", started.elapsed()));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    cx.check(guard.is_held(), &format!("{step}: still held"));
    let taken = cx.try_acquire(&cx.lock(other), &format!("{step}: another client tries")).await;
    cx.check(taken.is_none(), &format!("{step}: the lock still excludes another client"));
}

/// Checks that `client`'s provider works from the kit's runtime: another lock of it is
/// acquired and released there within the operation bound.
async fn the_provider_works_here(cx: &Ctx<'_>, client: &TestClient, step: &str) {
    let other = cx.lock_named(client, &format!("{}-here", cx.name));
    let guard = cx.acquire(&other, &format!("{step}: acquire another lock from this runtime")).await;
    cx.release(guard, &format!("{step}: release it")).await;
}

/// Contract 34: a hold granted on a runtime that then shuts down is kept, renewed past
/// several leases, while its guard is held from another runtime, with nothing but the
/// provider's own background work; its provider keeps working from the other runtime, and
/// the explicit release there frees the lock.
pub async fn a_hold_outlives_the_shutdown_of_its_runtime(h: &dyn Harness) {
    let cx = Ctx::new(h, "a_hold_outlives_the_shutdown_of_its_runtime");
    let (a, b) = (cx.client().await, cx.client().await);
    let (guard, _) = acquire_on_a_private_runtime(&cx, cx.lock(&a), false).await;
    held_for_several_leases(&cx, &guard, &b, "after the granting runtime shut down").await;
    the_provider_works_here(&cx, &a, "after the granting runtime shut down").await;
    cx.release(guard, "release on another runtime").await;
    cx.assert_free(&b, "another client takes it after the release").await;
}

/// Contract 34: the same with the granting runtime alive but idle (a current-thread runtime
/// whose thread is parked elsewhere: nothing drives its tasks or its I/O). Renewal and loss
/// detection go on, and the provider works from another runtime, acquisitions included.
pub async fn a_hold_outlives_its_runtime_left_idle(h: &dyn Harness) {
    let cx = Ctx::new(h, "a_hold_outlives_its_runtime_left_idle");
    let (a, b) = (cx.client().await, cx.client().await);
    let (guard, parked) = acquire_on_a_private_runtime(&cx, cx.lock(&a), true).await;
    the_provider_works_here(&cx, &a, "while the granting runtime is idle").await;
    held_for_several_leases(&cx, &guard, &b, "while the granting runtime is idle").await;
    cx.release(guard, "release on another runtime").await;
    cx.assert_free(&b, "another client takes it after the release").await;
    drop(parked);
}

/// How soon a dropped guard must have freed the lock (contract 35: "within about a second").
const PROMPTLY: Duration = Duration::from_secs(1);

/// Contract 35: a guard dropped after the runtime that granted it shut down *and* its
/// provider (every handle, the client) was dropped frees the lock in the store within about a
/// second, well before any lease or session timeout would.
pub async fn a_guard_dropped_after_its_runtime_and_provider_frees_the_lock_promptly(h: &dyn Harness) {
    let cx = Ctx::new(h, "a_guard_dropped_after_its_runtime_and_provider_frees_the_lock_promptly");
    let (a, b) = (cx.client().await, cx.client().await);
    let lock = cx.lock(&a);
    let (guard, _) = acquire_on_a_private_runtime(&cx, lock, false).await;
    let waiter = cx.spawn_acquire(&b);
    cx.await_waiters(&b, 1).await;
    let token = guard.token();
    // The harness's fault hooks stay: they may carry the client's network path (a proxy).
    let TestClient { provider, faults } = a;
    let dropped_at = std::thread::spawn(move || {
        // The last of the provider goes first, then the guard, on a plain thread.
        drop(provider);
        let dropped_at = Instant::now();
        drop(guard);
        dropped_at
    })
    .join();
    let Ok(dropped_at) = dropped_at else { cx.fail("drop the provider, then the guard", "it panicked") };
    let bound = h.timing().wake.max(PROMPTLY) + PROMPTLY;
    let got = cx.within(bound, "another client acquires after the drop", waiter).await;
    let after = dropped_at.elapsed();
    match got {
        Ok(Ok(next)) => cx.check(next > token, "the next token is greater"),
        other => cx.fail("another client acquires after the drop", format!("{other:?}")),
    }
    drop(faults);
    if let Some(lease) = h.timing().lease {
        cx.check(after < lease, &format!("freed {after:?} after the drop: by the release, not the {lease:?} lease"));
    }
}
