//! Redis with replicas: fencing tokens across the promotion of a replica that lagged behind
//! its primary, on real servers (a primary and a replica from the testkit's fixture).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::future::Future;
use std::time::Duration;

use lockkit_redis::RedisLockProvider;
use lockkit_testkit::fixture::RedisReplicated;
use support::test_builder;

/// A bound for things that take a few round trips on a loaded machine.
const OPERATION: Duration = Duration::from_secs(3);

async fn within<T>(bound: Duration, what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(bound, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what} did not happen within {bound:?}"),
    }
}

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
