//! Contract 1-3: mutual exclusion, independence of names, and lock names.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockkit_core::{Error, LockName};

use super::Ctx;
use crate::harness::Harness;
use crate::history::History;

/// Contract 1: while one client holds a lock, a second client's `try_acquire` gets nothing,
/// and gets the lock once it is released.
pub async fn second_owner_cannot_acquire_while_held(h: &dyn Harness) {
    let cx = Ctx::new(h, "second_owner_cannot_acquire_while_held");
    let (a, b) = (cx.client().await, cx.client().await);
    let guard = cx.acquire(&cx.lock(&a), "first client acquires").await;
    cx.check(
        cx.try_acquire(&cx.lock(&b), "second client tries").await.is_none(),
        "second client must not get a held lock",
    );
    cx.release(guard, "first client releases").await;
    let second = cx.try_acquire(&cx.lock(&b), "second client tries after release").await;
    cx.check(second.is_some(), "second client gets the lock after release");
}

/// Contract 1: two handles of one client are two owners and exclude each other.
pub async fn two_handles_of_one_client_exclude_each_other(h: &dyn Harness) {
    let cx = Ctx::new(h, "two_handles_of_one_client_exclude_each_other");
    let a = cx.client().await;
    let (first, second) = (cx.lock(&a), cx.lock(&a));
    let guard = cx.acquire(&first, "first handle acquires").await;
    cx.check(cx.try_acquire(&second, "second handle tries").await.is_none(), "second handle must not get the lock");
    cx.release(guard, "first handle releases").await;
}

/// Contract 1: many owners on several clients contend; the history shows at most one holder
/// at any instant and strictly increasing tokens.
pub async fn one_holder_at_a_time_under_contention(h: &dyn Harness) {
    let cx = Ctx::new(h, "one_holder_at_a_time_under_contention");
    let clients = [cx.client().await, cx.client().await, cx.client().await];
    let history = Arc::new(History::new());
    let inside = Arc::new(AtomicUsize::new(0));
    let owners = 8;
    let rounds = 5;
    let mut tasks = tokio::task::JoinSet::new();
    for owner in 0..owners {
        let lock = cx.lock(&clients[owner % clients.len()]);
        let (history, inside) = (history.clone(), inside.clone());
        tasks.spawn(async move {
            for _ in 0..rounds {
                let guard = lock.acquire().await?;
                let index = history.acquired(&format!("owner-{owner}"), &guard);
                let concurrent = inside.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                history.ended(index, Some(&guard));
                guard.release().await?;
                if concurrent != 0 {
                    return Ok::<_, Error>(false);
                }
            }
            Ok(true)
        });
    }
    let bound = h.timing().operation * 10 + h.timing().wake * (owners * rounds) as u32;
    let results = cx.within(bound, "all owners finish", tasks.join_all()).await;
    for result in results {
        let exclusive = cx.ok(result, "an owner's acquire/release");
        cx.check(exclusive, "no owner ever saw another inside the critical section");
    }
    cx.check(history.len() == owners * rounds, "every acquisition recorded");
    if let Err(violations) = history.check() {
        cx.fail("history check", violations);
    }
}

/// Contract 2: locks with different names are independent.
pub async fn different_names_are_independent(h: &dyn Harness) {
    let cx = Ctx::new(h, "different_names_are_independent");
    let (a, b) = (cx.client().await, cx.client().await);
    let other = format!("{}-other", cx.name);
    let guard = cx.acquire(&cx.lock(&a), "acquire the first name").await;
    let second = cx.try_acquire(&cx.lock_named(&b, &other), "try the second name").await;
    cx.check(second.is_some(), "a different name is free while the first is held");
    cx.release(guard, "release the first").await;
}

/// Contract 3: names are case-sensitive: `Name` and `name` are two locks.
pub async fn names_are_case_sensitive(h: &dyn Harness) {
    let cx = Ctx::new(h, "names_are_case_sensitive");
    let (a, b) = (cx.client().await, cx.client().await);
    let lower = format!("{}/orders", cx.name);
    let upper = format!("{}/ORDERS", cx.name);
    let guard = cx.acquire(&cx.lock_named(&a, &lower), "acquire the lower-case name").await;
    let other = cx.try_acquire(&cx.lock_named(&b, &upper), "try the upper-case name").await;
    cx.check(other.is_some(), "the upper-case name is another lock");
    cx.release(guard, "release").await;
}

/// Contract 3: names with `/`, spaces, unicode, escapes and control characters, up to 1024
/// bytes, are accepted, and names that a naive encoding would merge stay distinct locks.
pub async fn unusual_names_are_accepted_and_never_collide(h: &dyn Harness) {
    let cx = Ctx::new(h, "unusual_names_are_accepted_and_never_collide");
    let (a, b) = (cx.client().await, cx.client().await);
    let base = &cx.name;
    let suffixes = [
        "/a/b", "/a%2Fb", "/a%252Fb", "/a_b", "/a b", "/a:b", "/a{b}", "/ä", "/a\u{0}b", "/..", "/.", "/a/", "/日本",
        "/a\\b", "/a*b?",
    ];
    let names: Vec<String> = suffixes.iter().map(|s| format!("{base}{s}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        let guard = cx.try_acquire(&cx.lock_named(&a, name), &format!("acquire {name:?}")).await;
        match guard {
            Some(guard) => guards.push(guard),
            None => cx.fail(&format!("acquire {name:?}"), "a distinct name was found taken: two names collide"),
        }
    }
    for name in &names {
        let other = cx.try_acquire(&cx.lock_named(&b, name), &format!("second client tries {name:?}")).await;
        cx.check(other.is_none(), &format!("{name:?} is held, so the second client must not get it"));
    }
    let longest = format!("{base}/{}", "x".repeat(LockName::MAX_LEN - base.len() - 1));
    let guard = cx.try_acquire(&cx.lock_named(&a, &longest), "acquire a 1024-byte name").await;
    cx.check(guard.is_some(), "a 1024-byte name is accepted");
    for guard in guards {
        cx.release(guard, "release").await;
    }
}

/// Contract 3: an empty name is an `InvalidName` error, not a panic.
pub async fn empty_name_is_rejected(h: &dyn Harness) {
    let cx = Ctx::new(h, "empty_name_is_rejected");
    let a = cx.client().await;
    match a.provider.lock("") {
        Err(Error::InvalidName { .. }) => {}
        other => cx.fail("lock(\"\")", format!("expected InvalidName, got {other:?}")),
    }
}

/// Contract 3: a name over 1024 bytes is an `InvalidName` error whose message gives the limit.
pub async fn oversized_name_is_rejected(h: &dyn Harness) {
    let cx = Ctx::new(h, "oversized_name_is_rejected");
    let a = cx.client().await;
    let name = "é".repeat(LockName::MAX_LEN / 2 + 1);
    match a.provider.lock(&name) {
        Err(error @ Error::InvalidName { .. }) => {
            cx.check(error.to_string().contains("1024"), "the message gives the limit");
        }
        other => cx.fail("lock(oversized)", format!("expected InvalidName, got {other:?}")),
    }
}
