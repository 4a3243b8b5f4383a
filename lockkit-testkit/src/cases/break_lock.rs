//! Breaking a stuck lock ([`LockProvider::break_lock`](lockkit_core::LockProvider::break_lock)),
//! for backends that declare `break_lock` (and `inspect`, which says who held it).

use std::time::Duration;

use lockkit_core::{Error, HoldEnd};

use super::Ctx;
use crate::harness::{Harness, TestClient};

/// A lock broken while held: the break reports the holder (its token), the holder's guard is
/// signalled lost within a bounded time (at once, or by its next renewal or check) and its
/// release fails with `LockLost`; a waiter queued behind it is handed the lock as by a
/// release, with a greater token; and another client acquires after that one, greater still.
pub async fn breaking_a_held_lock_signals_the_holder_and_admits_another(h: &dyn Harness) {
    let cx = Ctx::new(h, "breaking_a_held_lock_signals_the_holder_and_admits_another");
    let Some([holder, operator, waiter, later]) =
        cx.clients_declaring("break_lock` and `inspect", |c| c.break_lock && c.inspect).await
    else {
        return;
    };
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
    let Some([a, operator]) = cx.clients_declaring("break_lock` and `inspect", |c| c.break_lock && c.inspect).await
    else {
        return;
    };
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

/// Breaking a read-write lock held by two readers, and a semaphore whose permits are all
/// taken, breaks every holder: each is reported, each guard is signalled lost, and a writer
/// (or a new permit holder) is granted with a token greater than all of them.
pub async fn breaking_shared_holds_breaks_every_holder(h: &dyn Harness) {
    let cx = Ctx::new(h, "breaking_shared_holds_breaks_every_holder");
    let Some([a, b, operator]) = cx.clients_declaring("break_lock` and `inspect", |c| c.break_lock && c.inspect).await
    else {
        return;
    };
    let capabilities = a.provider.capabilities();
    let lost_bound = h.timing().lease.unwrap_or(Duration::ZERO) + h.timing().operation * 2;
    let bound = h.timing().operation;
    let mut shapes = Vec::new();
    if capabilities.rw_lock {
        shapes.push(("readers", format!("{}/rw", cx.name), None));
    }
    if capabilities.semaphore {
        shapes.push(("permits", format!("{}/sem", cx.name), Some(2)));
    }
    if shapes.is_empty() {
        return cx.not_applicable("the backend has neither read-write locks nor semaphores");
    }
    for (what, name, permits) in shapes {
        let handle = |client: &TestClient| match permits {
            Some(n) => cx.ok(client.provider.semaphore(&name, n), "make a semaphore handle"),
            None => cx.ok(client.provider.handle(&name, lockkit_core::HoldKind::Read), "make a read handle"),
        };
        let first = cx.acquire(&handle(&a), &format!("{what}: the first holder acquires")).await;
        let second = cx.acquire(&handle(&b), &format!("{what}: the second holder acquires")).await;
        let broken = cx.within(bound, &format!("{what}: break"), operator.provider.break_lock(&name)).await;
        let broken = cx.ok(broken, &format!("{what}: break"));
        let mut tokens: Vec<_> = broken.iter().map(|held| held.token).collect();
        tokens.sort();
        let mut held = vec![first.token(), second.token()];
        held.sort();
        cx.check(tokens == held, &format!("{what}: the break reports both holders {held:?}: {tokens:?}"));
        for guard in [&first, &second] {
            let end =
                cx.within(lost_bound, &format!("{what}: the holder is signalled lost"), guard.watcher().ended()).await;
            cx.check(matches!(end, HoldEnd::Lost(_)), &format!("{what}: the hold ended by loss, not {end:?}"));
        }
        let next = match permits {
            Some(_) => cx.acquire(&handle(&operator), &format!("{what}: a new holder acquires")).await,
            None => {
                let writer =
                    cx.ok(operator.provider.handle(&name, lockkit_core::HoldKind::Write), "make a write handle");
                cx.acquire(&writer, &format!("{what}: a writer acquires")).await
            }
        };
        cx.check(held.iter().all(|token| next.token() > *token), &format!("{what}: the next token is greater"));
        drop((first, second));
        cx.release(next, &format!("{what}: release")).await;
    }
}

/// Breaking the lock of an election ends its leader's term: the leader's guard is signalled
/// lost, and the candidate waiting behind it leads with a greater term.
pub async fn breaking_the_leader_hands_the_election_on(h: &dyn Harness) {
    let cx = Ctx::new(h, "breaking_the_leader_hands_the_election_on");
    let Some([a, b, operator]) = cx.clients_declaring("break_lock` and `inspect", |c| c.break_lock && c.inspect).await
    else {
        return;
    };
    if !a.provider.capabilities().election {
        return cx.not_applicable("the backend does not declare `election`");
    }
    let bound = h.timing().operation;
    let leader = cx.ok(cx.ok(a.provider.election(&cx.name), "make an election").campaign("a").await, "campaign");
    let election_b = cx.ok(b.provider.election(&cx.name), "make an election");
    let next = tokio::spawn(async move { election_b.campaign("b").await });
    let broken = cx.ok(cx.within(bound, "break", operator.provider.break_lock(&cx.name)).await, "break");
    let tokens: Vec<_> = broken.iter().map(|held| held.token).collect();
    cx.check(tokens == [leader.token()], &format!("the break reports the leader's term: {tokens:?}"));
    let lost_bound = h.timing().lease.unwrap_or(Duration::ZERO) + h.timing().operation * 2;
    let end = cx.within(lost_bound, "the leader is signalled lost", leader.watcher().ended()).await;
    cx.check(matches!(end, HoldEnd::Lost(_)), &format!("the term ended by loss, not {end:?}"));
    let next = cx.within(h.timing().wake + bound * 2, "the next candidate leads", next).await;
    let next = cx.ok(next.unwrap_or_else(|error| cx.fail("join the candidate", error)), "the next candidate leads");
    cx.check(next.token() > leader.token(), "the next term is greater");
    let now = cx.ok(cx.ok(operator.provider.election(&cx.name), "make an election").leader().await, "who leads");
    cx.check(now.is_some_and(|leads| leads.term == next.token()), "the next candidate is published as the leader");
    drop(leader);
    cx.ok(next.resign().await, "resign");
}
