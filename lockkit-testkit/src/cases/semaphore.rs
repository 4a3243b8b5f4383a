//! Contract 23 and 24: counting semaphores. The mutex cases also run on a one-permit
//! semaphore (`one_permit::…`); these are the behaviours of N permits.

use std::sync::{Arc, Mutex};

use lockkit_core::{Error, HoldKind, LockHandle, MAX_PERMITS};

use super::Ctx;
use crate::harness::{Harness, TestClient};

impl Ctx<'_> {
    /// The semaphore of this case, of `permits` permits, on `client`.
    #[track_caller]
    fn semaphore(&self, client: &TestClient, permits: u32) -> LockHandle {
        self.ok(client.provider.semaphore(&self.name, permits), "make a semaphore handle")
    }
}

/// Contract 23: a semaphore of 3 permits has at most 3 holders: a fourth waits, and gets a
/// permit when one is given back.
pub async fn at_most_n_permits_are_held(h: &dyn Harness) {
    let cx = Ctx::new(h, "at_most_n_permits_are_held");
    let Some(clients) = cx.clients_declaring::<4>("semaphore", |c| c.semaphore).await else { return };
    let mut held = Vec::new();
    for (i, client) in clients.iter().take(3).enumerate() {
        match cx.try_acquire(&cx.semaphore(client, 3), &format!("client {i} takes a permit")).await {
            Some(guard) => held.push(guard),
            None => cx.fail(&format!("client {i} takes a permit"), "refused with a permit free"),
        }
    }
    cx.check(held.iter().all(|g| matches!(g.kind(), HoldKind::Permit { .. })), "the guards are permits");
    let fourth = cx.semaphore(&clients[3], 3);
    cx.check(cx.try_acquire(&fourth, "a fourth tries").await.is_none(), "no fourth permit while three are held");
    let waiting = tokio::spawn(async move { fourth.acquire().await.map(|guard| guard.token()) });
    cx.await_waiters(&clients[0], 1).await;
    let freed = held.remove(1);
    cx.release(freed, "one holder gives its permit back").await;
    let got = cx.within(h.timing().wake + h.timing().operation, "the fourth gets the permit", waiting).await;
    cx.check(matches!(got, Ok(Ok(_))), &format!("the fourth holder acquires: {got:?}"));
}

/// Contract 23: the permit count belongs to the semaphore: while it is in use with one count,
/// a handle that asks for another gets `Conflict` (or, on a backend that cannot tell, is at
/// least never admitted beyond the count in use).
pub async fn permit_counts_must_agree(h: &dyn Harness) {
    let cx = Ctx::new(h, "permit_counts_must_agree");
    let Some([a, b]) = cx.clients_declaring("semaphore", |c| c.semaphore).await else { return };
    let one = cx.acquire(&cx.semaphore(&a, 1), "take the one permit").await;
    match cx.semaphore(&b, 2).try_acquire().await {
        Err(Error::Conflict { .. }) | Ok(None) => {}
        other => cx.fail(
            "a handle with another count tries",
            format!("expected Conflict (or at least nothing), got {other:?}"),
        ),
    }
    cx.release(one, "release").await;
}

/// Contract 23 and 18: a count of 0 or above a million is refused at once with
/// `InvalidConfig` naming the range, and nothing is left in the store.
pub async fn out_of_range_permit_counts_are_refused(h: &dyn Harness) {
    let cx = Ctx::new(h, "out_of_range_permit_counts_are_refused");
    let Some([a]) = cx.clients_declaring("semaphore", |c| c.semaphore).await else { return };
    for permits in [0, MAX_PERMITS + 1, u32::MAX] {
        match a.provider.semaphore(&cx.name, permits) {
            Err(error @ Error::InvalidConfig { .. }) => {
                cx.check(error.to_string().contains("1000000"), &format!("{error} gives the range"));
            }
            other => cx.fail(&format!("a semaphore of {permits}"), format!("expected InvalidConfig, got {other:?}")),
        }
    }
    cx.assert_free(&a, "nothing was taken").await;
}

/// Contract 23 and 8: on a fair backend, waiters for a permit are granted in arrival order.
pub async fn permits_are_granted_in_arrival_order(h: &dyn Harness) {
    let cx = Ctx::new(h, "permits_are_granted_in_arrival_order");
    let Some([a]) = cx.clients_declaring("semaphore", |c| c.semaphore).await else { return };
    if !a.provider.capabilities().fair {
        return cx.not_applicable("the backend does not declare `fair`");
    }
    if !a.provider.capabilities().waiter_count {
        return cx.unchecked("arrival order needs `waiter_count` to know each waiter is queued");
    }
    let held = [
        cx.acquire(&cx.semaphore(&a, 2), "first permit").await,
        cx.acquire(&cx.semaphore(&a, 2), "second permit").await,
    ];
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for index in 0..3 {
        let client = cx.client().await;
        let handle = cx.semaphore(&client, 2);
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let guard = handle.acquire().await?;
            order.lock().map(|mut o| o.push(index)).ok();
            Ok::<_, Error>((client, guard))
        }));
        cx.await_waiters(&a, index + 1).await;
    }
    let [first, second] = held;
    cx.release(first, "give one permit back").await;
    cx.release(second, "give the other back").await;
    let bound = h.timing().wake * 3 + h.timing().operation;
    let mut guards = Vec::new();
    for waiter in waiters.drain(..2) {
        match cx.within(bound, "a waiter gets a permit", waiter).await {
            Ok(Ok(got)) => guards.push(got),
            other => cx.fail("a waiter gets a permit", other.map(|r| r.map(|_| ()))),
        }
    }
    let granted = order.lock().map(|o| o.clone()).unwrap_or_default();
    cx.check(
        granted.len() == 2 && granted.iter().all(|i| *i < 2),
        &format!("the first two waiters got the permits: {granted:?}"),
    );
    drop(guards);
    let last = cx.within(bound, "the last waiter gets a permit", waiters.remove(0)).await;
    cx.check(matches!(last, Ok(Ok(_))), "the last waiter gets a permit");
}

/// Contract 23 and 21: every permit carries a token of its own, greater than every token
/// issued before it.
pub async fn every_permit_carries_a_greater_token(h: &dyn Harness) {
    let cx = Ctx::new(h, "every_permit_carries_a_greater_token");
    let Some([a, b]) = cx.clients_declaring("semaphore", |c| c.semaphore).await else { return };
    let mut last = 0;
    for round in 0..3 {
        let p1 = cx.acquire(&cx.semaphore(&a, 2), &format!("permit #{round} on one client")).await;
        let p2 = cx.acquire(&cx.semaphore(&b, 2), &format!("permit #{round} on another")).await;
        cx.check(p1.token().get() > last && p2.token().get() > last, "permits' tokens are above every earlier one");
        cx.check(p1.token() != p2.token(), "two permits have tokens of their own");
        last = p1.token().get().max(p2.token().get());
        cx.release(p1, "release").await;
        cx.release(p2, "release").await;
    }
}

/// Contract 23: one name used at once as two kinds is a clear `Conflict`, or the kinds
/// exclude each other: never two locks that ignore each other.
pub async fn a_name_in_use_as_another_kind_conflicts_or_excludes(h: &dyn Harness) {
    let cx = Ctx::new(h, "a_name_in_use_as_another_kind_conflicts_or_excludes");
    let Some([a, b]) = cx.clients_declaring("semaphore", |c| c.semaphore).await else { return };
    let mutex = cx.acquire(&cx.ok(a.provider.lock(&cx.name), "a mutex handle"), "the mutex is held").await;
    match cx.semaphore(&b, 2).try_acquire().await {
        Err(Error::Conflict { .. }) | Ok(None) => {}
        other => cx.fail("a semaphore of the mutex's name", format!("expected Conflict or nothing, got {other:?}")),
    }
    if b.provider.capabilities().rw_lock {
        match cx.ok(b.provider.rw_lock(&cx.name), "a read-write lock").try_read().await {
            Err(Error::Conflict { .. }) | Ok(None) => {}
            other => cx.fail("a read of the mutex's name", format!("expected Conflict or nothing, got {other:?}")),
        }
    }
    cx.release(mutex, "release the mutex").await;
    let permit = cx.acquire(&cx.semaphore(&a, 2), "a permit of the free name").await;
    match cx.ok(b.provider.lock(&cx.name), "a mutex handle").try_acquire().await {
        Err(Error::Conflict { .. }) | Ok(None) => {}
        other => cx.fail("a mutex of the semaphore's name", format!("expected Conflict or nothing, got {other:?}")),
    }
    cx.release(permit, "release the permit").await;
}
