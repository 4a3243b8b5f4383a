//! Redis under Sentinel: the whole conformance kit through `redis+sentinel://` URLs against
//! a primary, two replicas and three sentinels (the testkit's `RedisSentinels`, one per test
//! process), the bad inputs of sentinel URLs, and a failover (`SENTINEL FAILOVER`) in a
//! fixture of its own, after which acquisitions continue on the new primary and tokens keep
//! increasing.
//!
//! The kit's fault cases need a proxy in front of each client, which a provider that finds
//! its primary through the sentinels bypasses; they are declared unchecked here and run on
//! the single-server harness (`conformance.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::time::Duration;

use async_trait::async_trait;
use lockkit_redis::RedisLockProvider;
use lockkit_testkit::fixture::RedisSentinels;
use support::multi_host::{MultiHostHarness, Setup};
use support::{LEASE, refused_config, test_builder, within};

/// The sentinel setup shared by the conformance cases of this process.
async fn shared() -> &'static RedisSentinels {
    RedisSentinels::shared()
        .await
        .unwrap_or_else(|error| panic!("the Sentinel tests need redis-server (which runs the sentinels too): {error}"))
}

/// A primary, its replicas and the sentinels that name it, reached through the sentinels' URL:
/// the setup, unless this is the child process of a cross-process case.
pub struct Sentinels(Option<&'static RedisSentinels>);

#[async_trait]
impl Setup for Sentinels {
    const NAME: &'static str = "redis (sentinel)";
    const SCHEME: &'static str = "redis+sentinel";
    const PATH: &'static str = "/lockkit";
    const URL_ENV: &'static str = "LOCKKIT_REDIS_SENTINEL_URL";

    /// On the primary the sentinels name now.
    async fn delete(&self, _url: &str, keys: &[String]) -> i64 {
        let fixture = self.0.expect("the parent process has the setup");
        let primary = fixture.primary_addr().await.unwrap();
        let client = redis::Client::open(format!("redis://{primary}/")).unwrap();
        let mut admin = client.get_multiplexed_async_connection().await.unwrap();
        redis::cmd("DEL").arg(keys).query_async(&mut admin).await.unwrap()
    }

    fn bad_urls(hosts: &str) -> Vec<(&'static str, String)> {
        vec![
            ("a sentinel URL without a master name", format!("redis+sentinel://{hosts}")),
            ("a sentinel URL with an empty host", format!("redis+sentinel://{hosts},/lockkit")),
        ]
    }
}

/// Runs the kit through the sentinels.
pub type SentinelHarness = MultiHostHarness<Sentinels>;

impl SentinelHarness {
    pub async fn shared() -> Self {
        Self::handed_down_or(Sentinels(None), async {
            let fixture = shared().await;
            (fixture.url(), Sentinels(Some(fixture)))
        })
        .await
    }
}

// The cases below need a fault hook per client (`kill`, `blackhole`: a proxy in front of
// each client, which a provider that asks the sentinels for its primary's address bypasses)
// or a store to restart; they run on the single-server harness (`conformance.rs`), and
// `acquisitions_continue_across_a_failover_with_increasing_tokens` below is the Sentinel
// counterpart of the restart case.
lockkit_testkit::conformance!(
    crate::SentinelHarness::shared().await,
    without: [
        unreachable_store_gives_retryable_errors,
        loss_is_signalled_before_another_owner_can_acquire,
        loss_is_signalled_when_the_client_dies,
        dead_holder_frees_the_lock_after_the_lease_not_before,
        a_dead_readers_share_returns_after_the_lease,
        tokens_increase_across_store_restart,
    ]
);

/// A bound for things that take a few round trips on a loaded machine, through the sentinels.
const OPERATION: Duration = Duration::from_secs(5);

fn unique(case: &str) -> String {
    format!("sentinel/{case}/{}", uuid::Uuid::new_v4().simple())
}

/// A master name the sentinels do not monitor, and hosts that are not sentinels: clear
/// errors at the first use, naming what to change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sentinel_urls_say_what_to_change() {
    let fixture = shared().await;
    let hosts = fixture.url().trim_start_matches("redis+sentinel://").split('/').next().unwrap().to_owned();
    let unknown = test_builder().url(format!("redis+sentinel://{hosts}/nosuchmaster")).build().unwrap();
    let message = refused_config(&unknown, &unique("unknown")).await;
    assert!(message.contains("\"nosuchmaster\"") && message.contains("SENTINEL MASTERS"), "{message}");

    let server = fixture.primary_addr().await.unwrap();
    let not_sentinel = test_builder().url(format!("redis+sentinel://{server}/lockkit")).build().unwrap();
    let message = refused_config(&not_sentinel, &unique("server")).await;
    assert!(message.contains("not sentinels") && message.contains("redis://"), "{message}");
}

/// After `SENTINEL FAILOVER`, acquisitions continue on the new primary and tokens keep
/// increasing; a hold granted before the failover is renewed on the new primary or
/// signalled lost, never silently kept while another client holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_continue_across_a_failover_with_increasing_tokens() {
    let fixture = match RedisSentinels::start().await {
        Ok(fixture) => fixture,
        Err(error) => panic!("the Sentinel tests need redis-server: {error}"),
    };
    let provider: RedisLockProvider = test_builder().url(fixture.url()).replicas(1).build().unwrap();
    let other: RedisLockProvider = test_builder().url(fixture.url()).build().unwrap();
    let name = unique("failover");
    let held_name = unique("held");
    let mut last = 0;
    for _ in 0..5 {
        let guard = within(OPERATION, "an acquisition", provider.lock(&name).unwrap().acquire()).await.unwrap();
        assert!(guard.token().get() > last);
        last = guard.token().get();
        guard.release().await.unwrap();
    }
    let held = within(OPERATION, "an acquisition to hold", provider.lock(&held_name).unwrap().acquire()).await.unwrap();

    let old = fixture.primary_addr().await.unwrap();
    let new = fixture.failover().await.unwrap();
    assert_ne!(old, new);

    for _ in 0..5 {
        let guard = within(
            Duration::from_secs(15),
            "an acquisition after the failover",
            provider.lock(&name).unwrap().acquire(),
        )
        .await
        .unwrap();
        assert!(
            guard.token().get() > last,
            "a token went back across the failover: {} after {last}",
            guard.token().get()
        );
        last = guard.token().get();
        guard.release().await.unwrap();
    }
    // The hold from before the failover (acknowledged by a replica, so the new primary has
    // it) is either still ours, and nobody else gets the lock, or signalled lost.
    let attempt = within(OPERATION, "a try on the held lock", other.lock(&held_name).unwrap().try_acquire()).await;
    if let Ok(Some(guard)) = attempt {
        assert!(!held.is_held(), "two holders across the failover: {held:?} and {guard:?}");
        assert!(guard.token().get() > held.token().get());
    }
}

/// A primary that stops answering (suspended, as a hung or cut-off server): the sentinels fail
/// over, the provider finds the new primary by itself, acquisitions continue with increasing
/// tokens, a waiter is woken by a release on the new primary, and a hold from before is
/// renewed on the new primary or signalled lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_continue_after_the_primary_stops_answering() {
    let mut fixture = match RedisSentinels::start().await {
        Ok(fixture) => fixture,
        Err(error) => panic!("the Sentinel tests need redis-server: {error}"),
    };
    let provider: RedisLockProvider = test_builder().url(fixture.url()).build().unwrap();
    let waiter: RedisLockProvider = test_builder().url(fixture.url()).build().unwrap();
    let name = unique("stopped");
    let mut last = 0;
    for _ in 0..3 {
        let guard = within(OPERATION, "an acquisition", provider.lock(&name).unwrap().acquire()).await.unwrap();
        last = guard.token().get();
        guard.release().await.unwrap();
    }
    let held =
        within(OPERATION, "an acquisition to hold", provider.lock(&unique("held")).unwrap().acquire()).await.unwrap();

    fixture.fail_primary().await.unwrap();
    let failed_over = std::time::Instant::now();

    let after = Duration::from_secs(20);
    let guard =
        within(after, "an acquisition after the failover", provider.lock(&name).unwrap().acquire()).await.unwrap();
    assert!(guard.token().get() > last, "a token went back across the failover: {} after {last}", guard.token().get());
    last = guard.token().get();
    let lock = waiter.lock(&name).unwrap();
    let waiting = tokio::spawn(async move { lock.acquire().await });
    guard.release().await.unwrap();
    let woken = within(after, "the waiter's grant after the release", waiting).await.unwrap().unwrap();
    assert!(woken.token().get() > last);
    woken.release().await.unwrap();

    // The hold from before the failover: renewed on the new primary, or signalled lost.
    let deadline = failed_over + after;
    while held.is_held() && held.valid_until().is_none_or(|until| until < failed_over + LEASE / 2) {
        assert!(std::time::Instant::now() < deadline, "the hold from before the failover is neither renewed nor lost");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fixture.resume_all().unwrap();
}
