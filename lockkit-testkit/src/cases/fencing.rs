//! Contract 10: fencing tokens.

use std::sync::Arc;

use lockkit_core::{FencingToken, LockGuard};

use super::Ctx;
use crate::fenced::FencedResource;
use crate::harness::Harness;

/// Checks that `guard`'s token is above `last` (when there is one), makes it the last, and
/// releases the guard.
async fn release_above(cx: &Ctx<'_>, guard: LockGuard, last: &mut Option<FencingToken>) {
    if let Some(last) = *last {
        cx.check(guard.token() > last, &format!("token {} follows {last}", guard.token()));
    }
    *last = Some(guard.token());
    cx.release(guard, "release").await;
}

/// Contract 10: each fresh acquisition gets a token strictly greater than the one before,
/// whichever client acquires.
pub async fn tokens_increase_with_every_acquisition(h: &dyn Harness) {
    let cx = Ctx::new(h, "tokens_increase_with_every_acquisition");
    let clients = [cx.client().await, cx.client().await];
    let mut last: Option<FencingToken> = None;
    for round in 0..10 {
        let guard = cx.acquire(&cx.lock(&clients[round % 2]), "acquire").await;
        release_above(&cx, guard, &mut last).await;
    }
}

/// Contract 10: tokens keep increasing across fresh clients (new sessions or connections).
pub async fn tokens_increase_across_clients(h: &dyn Harness) {
    let cx = Ctx::new(h, "tokens_increase_across_clients");
    let mut last: Option<FencingToken> = None;
    for _ in 0..4 {
        let client = cx.client().await;
        let guard = cx.acquire(&cx.lock(&client), "acquire on a fresh client").await;
        release_above(&cx, guard, &mut last).await;
    }
}

/// Contract 10: tokens keep increasing across a restart of the store that keeps its data
/// (capability `fencing_survives_restart`).
pub async fn tokens_increase_across_store_restart(h: &dyn Harness) {
    let cx = Ctx::new(h, "tokens_increase_across_store_restart");
    let Ok(isolated) = h.isolated().await else {
        return cx.unchecked("the harness has no `isolated` store to restart");
    };
    let h = &*isolated;
    let cx = Ctx { h, ..cx };
    let Some([a]) = cx.clients_declaring("fencing_survives_restart", |c| c.fencing_survives_restart).await else {
        return;
    };
    let guard = cx.acquire(&cx.lock(&a), "acquire before the restart").await;
    let before = guard.token();
    drop(guard);
    cx.eventually(h.timing().operation, "the dropped guard is released", || async {
        cx.inspect(&a).await.is_none_or(|i| i.holder().is_none())
    })
    .await;
    if !cx.applied(h.restart_store().await, "restart_store") {
        return;
    }
    let b = cx.client().await;
    let guard = cx.acquire(&cx.lock(&b), "acquire after the restart").await;
    cx.check(guard.token() > before, &format!("token {} after the restart follows {before}", guard.token()));
}

/// Contract 10: a holder that lost its lock has its late write refused by a
/// `FencedResource` because the new holder's token is greater.
pub async fn fenced_resource_refuses_the_stale_holder(h: &dyn Harness) {
    let cx = Ctx::new(h, "fenced_resource_refuses_the_stale_holder");
    let (a, b) = (cx.client().await, cx.client().await);
    let resource: Arc<FencedResource> = Arc::new(FencedResource::new());
    let stale = cx.acquire(&cx.lock(&a), "first holder acquires").await;
    cx.check(resource.write(stale.token(), "first").is_ok(), "the first holder writes");
    if !cx.applied(h.delete_record(&cx.name).await, "delete_record") {
        return;
    }
    let fresh = cx.acquire(&cx.lock(&b), "second holder acquires after the record vanished").await;
    cx.check(fresh.token() > stale.token(), "the new holder's token is greater");
    cx.check(resource.write(fresh.token(), "second").is_ok(), "the new holder writes");
    cx.check(resource.write(stale.token(), "stale").is_err(), "the stale holder's late write is refused");
    cx.check(resource.rejected() == 1, "exactly one write refused");
    drop(stale);
    cx.release(fresh, "release").await;
}
