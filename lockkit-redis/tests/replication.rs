//! Redis with replicas: fencing tokens across the promotion of a replica that lagged behind
//! its primary, on real servers (a primary and a replica from the testkit's fixture).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use lockkit_redis::RedisLockProvider;
use lockkit_testkit::fixture::RedisReplicated;
use support::{OPERATION, refused_config, test_builder, within};

fn unique(case: &str) -> String {
    format!("replication/{case}/{}", uuid::Uuid::new_v4().simple())
}

async fn replicated(replicas: usize) -> RedisReplicated {
    match RedisReplicated::start(replicas).await {
        Ok(fixture) => fixture,
        Err(error) => panic!("the replication tests need redis-server: {error}"),
    }
}

fn plain_provider(url: String) -> RedisLockProvider {
    test_builder().url(url).build().unwrap()
}

/// A primary with one replica, and a provider on the primary whose writes count once the
/// replica acknowledged them (it waits 200 ms for that).
async fn acknowledged() -> (RedisReplicated, RedisLockProvider) {
    let fixture = replicated(1).await;
    let provider = test_builder()
        .url(fixture.primary().url())
        .replicas(1)
        .replicas_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    (fixture, provider)
}

/// Acquires and releases the mutex `name` `times` times; returns the greatest token granted.
async fn grants(provider: &RedisLockProvider, name: &str, times: usize) -> u64 {
    let mut last = 0;
    for _ in 0..times {
        let guard =
            within(OPERATION, "an uncontended acquisition", provider.lock(name).unwrap().acquire()).await.unwrap();
        assert!(guard.token().get() > last, "tokens go back on one server: {} after {last}", guard.token().get());
        last = guard.token().get();
        within(OPERATION, "a release", guard.release()).await.unwrap();
    }
    last
}

/// A replica promoted after it stopped receiving its primary's writes has an older fence
/// counter than the primary; the first token it grants is still greater than every token
/// the primary granted (the token is max(counter + 1, server time in µs)).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_lagging_replica_never_reissues_a_token() {
    let fixture = replicated(1).await;
    let name = unique("promote");
    let old = plain_provider(fixture.primary().url());

    // Grants the replica sees: its counter is that of the primary at this point.
    let seen = grants(&old, &name, 3).await;
    fixture.wait_in_sync().await.unwrap();

    // The replica stops replicating (as one that lagged at the failover would), and the
    // primary grants more that it never sees.
    fixture.promote(0).await.unwrap();
    let issued = grants(&old, &name, 50).await;
    assert!(issued > seen);

    let new = plain_provider(fixture.replicas()[0].url());
    let first =
        within(OPERATION, "an acquisition on the promoted replica", new.lock(&name).unwrap().acquire()).await.unwrap();
    assert!(
        first.token().get() > issued,
        "the promoted replica reissued a token: {} is not above the primary's last {issued}",
        first.token().get()
    );
    first.release().await.unwrap();
}

/// `replicas` above the number of replicas the primary has is refused when the provider
/// connects, with an error naming both numbers and the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_replicas_than_the_primary_has_is_refused_at_first_use() {
    let fixture = replicated(1).await;
    let provider = test_builder().url(fixture.primary().url()).replicas(2).build().unwrap();
    let message = refused_config(&provider, &unique("too-many")).await;
    assert!(message.contains("replicas=2") && message.contains("has 1 replica"), "{message}");
    // A replica is no primary to wait on.
    let on_replica = test_builder().url(fixture.replicas()[0].url()).replicas(1).build().unwrap();
    let error = on_replica.lock(&unique("on-replica")).unwrap().try_acquire().await.unwrap_err();
    assert!(error.to_string().contains("is a replica"), "{error}");
}

/// With `replicas=1`, a grant counts only once the replica acknowledged it: with the
/// replica stopped, the acquisition fails with a retryable error saying so and leaves the
/// lock free; with it running again, the lock is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_counts_only_when_the_replicas_acknowledge_it() {
    let (mut fixture, provider) = acknowledged().await;
    let name = unique("grant");
    // `acquire`, not `try_acquire`: on a loaded machine the replica's first acknowledgement can
    // take longer than the 200 ms this provider waits, which is a retryable refusal.
    let guard = within(OPERATION, "an acknowledged grant", provider.lock(&name).unwrap().acquire()).await.unwrap();
    guard.release().await.unwrap();

    fixture.replicas_mut()[0].pause().unwrap();
    let error =
        within(OPERATION, "an unacknowledged grant", provider.lock(&name).unwrap().try_acquire()).await.unwrap_err();
    assert!(error.is_retryable(), "{error:?}");
    let message = format!("{error:?}");
    assert!(message.contains("NotReplicated") && message.contains("the grant"), "{message}");
    let shown = std::error::Error::source(&error).map(ToString::to_string).unwrap_or_default();
    assert!(shown.contains("0 of the 1 replicas") && shown.contains("replicas_timeout"), "{shown}");
    let plain = plain_provider(fixture.primary().url());
    let info = plain.inspect(&name).await.unwrap();
    assert!(info.holders.is_empty(), "the unacknowledged grant was not released: {info:?}");

    fixture.replicas_mut()[0].resume().unwrap();
    fixture.wait_in_sync().await.unwrap();
    let guard =
        within(OPERATION, "a grant once the replica is back", provider.lock(&name).unwrap().acquire()).await.unwrap();
    guard.release().await.unwrap();
}

/// With `replicas=1`, a renewal the replica does not acknowledge leaves the hold's deadline
/// where it was: the hold runs out and is signalled lost, although the primary renewed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_renewal_does_not_extend_the_hold() {
    let (mut fixture, provider) = acknowledged().await;
    let guard =
        within(OPERATION, "an acknowledged grant", provider.lock(&unique("renew")).unwrap().acquire()).await.unwrap();
    fixture.replicas_mut()[0].pause().unwrap();
    // No renewal can be acknowledged from here on.
    let granted_until = guard.valid_until().unwrap();
    within(support::LEASE * 2, "the loss of a hold whose renewals are not acknowledged", guard.lost()).await;
    assert_eq!(guard.valid_until(), Some(granted_until), "the deadline moved without an acknowledgement");
    assert!(!guard.is_held());
    fixture.replicas_mut()[0].resume().unwrap();
}

/// With `replicas=1`, a break counts only once the replica has it, as a grant does: with the
/// replica paused it fails with a retryable error that names the break (the primary has
/// applied it: nothing is held), and with the replica back it succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_break_counts_only_when_the_replicas_acknowledge_it() {
    let (mut fixture, provider) = acknowledged().await;
    let name = unique("break");
    let held = within(OPERATION, "a grant", provider.lock(&name).unwrap().acquire()).await.unwrap();
    let broken = within(OPERATION, "an acknowledged break", provider.break_lock(&name)).await.unwrap();
    assert_eq!(broken.iter().map(|hold| hold.token).collect::<Vec<_>>(), [held.token()]);
    drop(held);

    let again = within(OPERATION, "a grant", provider.lock(&name).unwrap().acquire()).await.unwrap();
    fixture.replicas_mut()[0].pause().unwrap();
    let error = within(OPERATION, "an unacknowledged break", provider.break_lock(&name)).await.unwrap_err();
    assert!(error.is_retryable(), "{error:?}");
    assert!(format!("{error:?}").contains("the break"), "{error:?}");
    let plain = plain_provider(fixture.primary().url());
    assert!(plain.inspect(&name).await.unwrap().holders.is_empty(), "the primary applied the break");
    fixture.replicas_mut()[0].resume().unwrap();
    fixture.wait_in_sync().await.unwrap();
    drop(again);
}
