//! Contract 18-19: errors and bad configuration.

use std::time::Duration;

use lockkit_core::{Error, HoldKind};

use super::Ctx;
use crate::harness::Harness;

/// Contract 18: a timeout error names the backend and the lock and is retryable.
pub async fn errors_name_the_backend_and_the_lock(h: &dyn Harness) {
    let cx = Ctx::new(h, "errors_name_the_backend_and_the_lock");
    let (a, b) = (cx.client().await, cx.client().await);
    let guard = cx.acquire(&cx.lock(&a), "acquire").await;
    let lock_b = cx.lock(&b);
    let error = match lock_b.acquire_timeout(Duration::from_millis(50)).await {
        Err(error) => error,
        Ok(_) => cx.fail("acquire a held lock", "it was granted"),
    };
    let message = error.to_string();
    cx.check(message.contains(lock_b.backend_name()), &format!("the message {message:?} names the backend"));
    cx.check(message.contains(&cx.name), &format!("the message {message:?} names the lock"));
    cx.check(error.lock().map(|l| l.as_str()) == Some(cx.name.as_str()), "the error carries the lock");
    cx.check(error.is_retryable(), "a timeout is retryable");
    cx.release(guard, "release").await;
}

/// Contract 18: operations of a client cut off from the store fail with a retryable error
/// (or wait within their timeout); none panics.
pub async fn unreachable_store_gives_retryable_errors(h: &dyn Harness) {
    let cx = Ctx::new(h, "unreachable_store_gives_retryable_errors");
    let a = cx.client().await;
    let lock = cx.lock(&a);
    if !cx.applied(a.faults.blackhole().await, "blackhole") {
        return;
    }
    let outcome = cx
        .within(h.timing().operation * 3, "acquire while cut off", lock.acquire_timeout(Duration::from_millis(500)))
        .await;
    let _ = a.faults.heal().await;
    match outcome {
        Err(error) if error.is_retryable() => {
            let message = error.to_string();
            cx.check(message.contains(lock.backend_name()), &format!("the message {message:?} names the backend"));
        }
        Err(error) => cx.fail("acquire while cut off", format!("expected a retryable error, got {error}")),
        Ok(_) => cx.fail("acquire while cut off", "it was granted"),
    }
    cx.eventually(h.timing().operation * 5, "the client works again after healing", || async {
        matches!(lock.try_acquire().await, Ok(Some(_)))
    })
    .await;
}

/// Contract 19: settings that cannot work are refused when the client is built, with an
/// `InvalidConfig` error whose message names the backend and says what to change.
pub async fn bad_configuration_is_refused_when_building(h: &dyn Harness) {
    let cx = Ctx::new(h, "bad_configuration_is_refused_when_building");
    let attempts = h.invalid_configs().await;
    if attempts.is_empty() {
        return cx.unchecked("the harness lists no invalid configurations");
    }
    for (what, outcome) in attempts {
        match outcome {
            Err(Error::InvalidConfig { message, .. }) => {
                cx.check(message.len() > 20, &format!("{what}: the message {message:?} explains what to change"));
            }
            Err(other) => cx.fail(&what, format!("expected InvalidConfig, got {other}")),
            Ok(()) => cx.fail(&what, "the configuration was accepted"),
        }
    }
}

/// Contract 18 and 5: a timed acquisition against a store that cannot be reached fails with
/// an error that says so ([`Error::is_connect`]), whether it is a connection error or a
/// timeout that keeps the store's failure as its source, and names the backend.
pub async fn timeout_against_an_unreachable_store_says_so(h: &dyn Harness) {
    let cx = Ctx::new(h, "timeout_against_an_unreachable_store_says_so");
    let client = match h.unreachable_client().await {
        Ok(client) => client,
        Err(_) => return cx.unchecked("the harness has no `unreachable_client` hook"),
    };
    let lock = cx.lock(&client);
    let outcome = cx
        .within(h.timing().operation * 3, "acquire against an unreachable store", async {
            lock.acquire_timeout(Duration::from_millis(300)).await
        })
        .await;
    match outcome {
        Err(error) => {
            let message = error.to_string();
            cx.check(error.is_connect(), &format!("{message:?} says the store could not be reached (is_connect)"));
            cx.check(error.is_retryable(), &format!("{message:?} is retryable"));
            cx.check(message.contains(lock.backend_name()), &format!("the message {message:?} names the backend"));
        }
        Ok(_) => cx.fail("acquire against an unreachable store", "it was granted"),
    }
}

/// Contract 23 and the grant path: a kind of hold the backend does not declare in its
/// capabilities (read, write, permit, candidacy) is refused with `Unsupported`, never
/// granted as a mutex.
pub async fn undeclared_kinds_are_unsupported(h: &dyn Harness) {
    let cx = Ctx::new(h, "undeclared_kinds_are_unsupported");
    let a = cx.client().await;
    let capabilities = a.provider.capabilities();
    let permits = std::num::NonZeroU32::MIN.saturating_add(1);
    let kinds = [
        HoldKind::Read,
        HoldKind::Write,
        HoldKind::Permit { permits },
        HoldKind::Candidate { identity: std::sync::Arc::from(&b"candidate"[..]) },
    ];
    let undeclared: Vec<HoldKind> = kinds.into_iter().filter(|kind| !kind.is_supported_by(&capabilities)).collect();
    if undeclared.is_empty() {
        return cx.not_applicable("the backend declares every kind of hold");
    }
    for kind in undeclared {
        match a.provider.handle(&cx.name, kind.clone()) {
            Err(Error::Unsupported { .. }) => {}
            other => cx.fail(&format!("a handle for {kind}"), format!("expected Unsupported, got {other:?}")),
        }
    }
    cx.assert_free(&a, "nothing was taken in the store").await;
}
