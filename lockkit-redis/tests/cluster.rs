//! Redis Cluster: the whole conformance kit through `redis+cluster://` URLs against three
//! primaries and three replicas (the testkit's `RedisCluster`, one per test process), the bad
//! inputs of cluster URLs, a hold across `CLUSTER FAILOVER` of its slot's primary, and a hold
//! whose slot migrates to another primary.
//!
//! The kit's fault cases need a proxy in front of each client (`kill`, `blackhole`), which a
//! cluster client bypasses (it connects to every node the slot map names), or a store to
//! restart; they are declared unchecked here and run on the single-server harness
//! (`conformance.rs`). The failover and migration tests below are the cluster's own faults.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use async_trait::async_trait;
use lockkit_redis::RedisLockProvider;
use lockkit_testkit::fixture::RedisCluster;
use support::multi_host::{MultiHostHarness, Setup};
use support::{LEASE, OPERATION, refused_config, test_builder, within};

/// The cluster shared by the conformance cases of this process.
async fn shared() -> &'static RedisCluster {
    RedisCluster::shared().await.unwrap_or_else(|error| panic!("the cluster tests need redis-server: {error}"))
}

/// A cluster connection of the redis crate, for the tests' own commands.
async fn admin(url: &str) -> redis::cluster_async::ClusterConnection {
    let nodes: Vec<String> =
        url.trim_start_matches("redis+cluster://").split(',').map(|node| format!("redis://{node}/")).collect();
    redis::cluster::ClusterClient::new(nodes).unwrap().get_async_connection().await.unwrap()
}

/// A Redis Cluster, reached through its nodes' URL.
pub struct Cluster;

#[async_trait]
impl Setup for Cluster {
    const NAME: &'static str = "redis (cluster)";
    const SCHEME: &'static str = "redis+cluster";
    const PATH: &'static str = "";
    const URL_ENV: &'static str = "LOCKKIT_REDIS_CLUSTER_URL";

    async fn delete(&self, url: &str, keys: &[String]) -> i64 {
        // Every key of a lock is in the slot of its hash tag: one DEL reaches them all.
        redis::cmd("DEL").arg(keys).query_async(&mut admin(url).await).await.unwrap()
    }

    fn bad_urls(hosts: &str) -> Vec<(&'static str, String)> {
        vec![
            ("a cluster URL with a database", format!("redis+cluster://{hosts}/2")),
            ("a cluster URL with an empty host", format!("redis+cluster://{hosts},")),
            ("a node with a scheme of its own", format!("redis+cluster://{hosts},redis://127.0.0.1:1")),
        ]
    }
}

/// Runs the kit through a cluster URL.
pub type ClusterHarness = MultiHostHarness<Cluster>;

impl ClusterHarness {
    pub async fn shared() -> Self {
        Self::handed_down_or(Cluster, async { (shared().await.url(), Cluster) }).await
    }
}

// The cases below need a fault hook per client (`kill`, `blackhole`: a proxy in front of
// each client, which a cluster client bypasses: it connects to the nodes the slot map names)
// or a store to restart; they run on the single-server harness (`conformance.rs`), and the
// failover and migration tests below are the cluster's own faults.
lockkit_testkit::conformance!(
    crate::ClusterHarness::shared().await,
    without: [
        loss_is_signalled_before_another_owner_can_acquire,
        loss_is_signalled_when_the_client_dies,
        dead_holder_frees_the_lock_after_the_lease_not_before,
        a_dead_readers_share_returns_after_the_lease,
        tokens_increase_across_store_restart,
        unreachable_store_gives_retryable_errors,
    ]
);

fn unique(case: &str) -> String {
    format!("cluster/{case}/{}", uuid::Uuid::new_v4().simple())
}

/// A cluster URL that points at a server without cluster support, and `replicas` above what
/// the primaries have: clear errors at the first use, naming what to change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_cluster_urls_say_what_to_change() {
    let single = lockkit_testkit::fixture::RedisServer::shared().await.unwrap();
    let address = single.url().trim_start_matches("redis://").trim_end_matches('/').to_owned();
    let not_cluster = test_builder().url(format!("redis+cluster://{address}")).build().unwrap();
    let message = refused_config(&not_cluster, &unique("single")).await;
    assert!(message.contains("not a Redis Cluster") && message.contains("redis://"), "{message}");

    let fixture = shared().await;
    let too_many: RedisLockProvider = test_builder().url(fixture.url()).replicas(2).build().unwrap();
    let message = refused_config(&too_many, &unique("replicas")).await;
    assert!(message.contains("replicas=2") && message.contains("lower replicas to 1"), "{message}");

    let one: RedisLockProvider = test_builder().url(fixture.url()).replicas(1).build().unwrap();
    let guard =
        within(OPERATION, "an acknowledged acquisition", one.lock(&unique("one")).unwrap().acquire()).await.unwrap();
    guard.release().await.unwrap();
}

/// Locks spread over every primary (their names hash to slots all over the cluster) are
/// granted, renewed in one batch per primary for longer than a lease, and released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_on_every_primary_are_renewed() {
    let fixture = shared().await;
    let provider: RedisLockProvider = test_builder().url(fixture.url()).build().unwrap();
    let mut guards = Vec::new();
    for i in 0..60 {
        let lock = provider.lock(&unique(&format!("spread{i}"))).unwrap();
        guards.push(within(OPERATION, "an acquisition", lock.acquire()).await.unwrap());
    }
    tokio::time::sleep(LEASE * 2).await;
    for guard in &guards {
        assert!(guard.is_held(), "a hold was not renewed: {guard:?}");
    }
    for guard in guards {
        guard.release().await.unwrap();
    }
    let stats = provider.renewal_stats();
    assert!(stats.renewed >= 60, "{stats:?}");
    // One pipeline per primary and one CLUSTER SLOTS per round: four round trips, not sixty.
    assert!(stats.round_trips <= stats.ticks * 4, "{stats:?}");
}

/// Generous bound for what a cluster does after a failover or a migration on a loaded
/// two-core machine.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(20);

/// A cluster of its own, for a test that changes its topology.
async fn dedicated() -> RedisCluster {
    match RedisCluster::start().await {
        Ok(fixture) => fixture,
        Err(error) => panic!("the cluster tests need redis-server: {error}"),
    }
}

/// Waits until `held` is renewed past `since + LEASE / 2` (so renewed after `since`) or
/// signalled lost; returns whether it is still held.
async fn renewed_or_lost(held: &lockkit_core::LockGuard, since: std::time::Instant) -> bool {
    let deadline = std::time::Instant::now() + SETTLE;
    loop {
        if !held.is_held() {
            return false;
        }
        if held.valid_until().is_some_and(|until| until > since + LEASE / 2) {
            return true;
        }
        assert!(std::time::Instant::now() < deadline, "the hold is neither renewed nor signalled lost: {held:?}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The end of both topology tests, once the slot of `name` moved (`what`, at `moved`): `held`
/// is renewed on the new primary or signalled lost (which one is printed), never held beside
/// another client's hold, and the tokens of `name` keep increasing past `last`.
async fn after_the_move(
    what: &str,
    moved: std::time::Instant,
    provider: &RedisLockProvider,
    other: &RedisLockProvider,
    name: &str,
    held: lockkit_core::LockGuard,
    last: u64,
) {
    let kept = renewed_or_lost(&held, moved).await;
    eprintln!("{what}: the hold was {}", if kept { "renewed on the new primary" } else { "signalled lost" });
    no_second_holder_and_tokens_increase(provider, other, name, held, last).await;
}

/// Checks that `held` and another client never both hold `name`, then that the tokens of
/// `name` keep increasing past `last`: the end of both topology tests.
async fn no_second_holder_and_tokens_increase(
    provider: &RedisLockProvider,
    other: &RedisLockProvider,
    name: &str,
    held: lockkit_core::LockGuard,
    mut last: u64,
) {
    let attempt = within(OPERATION, "a try on the held lock", other.lock(name).unwrap().try_acquire()).await.unwrap();
    match attempt {
        Some(guard) => {
            assert!(!held.is_held(), "two holders: {held:?} and {guard:?}");
            assert!(guard.token().get() > last, "a token went back: {} after {last}", guard.token().get());
            last = guard.token().get();
            guard.release().await.unwrap();
        }
        None => {
            assert!(held.is_held(), "the lock is held, but not by the hold that was not signalled lost");
            held.release().await.unwrap();
        }
    }
    cycles_with_increasing_tokens(provider, name, 3, SETTLE, last).await;
}

/// `cycles` acquire-release cycles of lock `name` on `provider`, each acquisition within
/// `bound`, each token greater than the one before (the first greater than `last`); returns
/// the last token.
async fn cycles_with_increasing_tokens(
    provider: &RedisLockProvider,
    name: &str,
    cycles: usize,
    bound: std::time::Duration,
    mut last: u64,
) -> u64 {
    for _ in 0..cycles {
        let guard = within(bound, "an acquisition", provider.lock(name).unwrap().acquire()).await.unwrap();
        assert!(guard.token().get() > last, "a token went back: {} after {last}", guard.token().get());
        last = guard.token().get();
        guard.release().await.unwrap();
    }
    last
}

/// Five acquire-release cycles of lock `name` on `provider`, with increasing tokens, then a
/// hold of it: the guard and its token.
async fn cycled_then_held(provider: &RedisLockProvider, name: &str) -> (lockkit_core::LockGuard, u64) {
    let last = cycles_with_increasing_tokens(provider, name, 5, OPERATION, 0).await;
    let held = within(OPERATION, "an acquisition to hold", provider.lock(name).unwrap().acquire()).await.unwrap();
    assert!(held.token().get() > last, "a token went back: {} after {last}", held.token().get());
    let token = held.token().get();
    (held, token)
}

/// `CLUSTER FAILOVER` of the primary that owns a held lock's slot: the hold is renewed on the
/// promoted replica (the grant was acknowledged by it: `replicas=1`) or signalled lost, never
/// held by two; acquisitions continue on the new primary with increasing tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_survives_a_failover_of_its_slots_primary_or_is_signalled_lost() {
    let fixture = dedicated().await;
    let provider: RedisLockProvider = test_builder().url(fixture.url()).replicas(1).build().unwrap();
    let other: RedisLockProvider = test_builder().url(fixture.url()).build().unwrap();
    let name = unique("failover");
    let key = provider.record_key(&lockkit_core::LockName::new(&name).unwrap());
    let (held, last) = cycled_then_held(&provider, &name).await;

    let (old, new) = fixture.failover(&key).await.unwrap();
    assert_ne!(old, new);
    assert_eq!(fixture.primary_of(&key).await.unwrap(), new);
    let failed_over = std::time::Instant::now();
    after_the_move("failover", failed_over, &provider, &other, &name, held, last).await;
}

/// A held lock's slot migrates to another primary (`SETSLOT … MIGRATING/IMPORTING`,
/// `MIGRATE … KEYS`, `SETSLOT … NODE`), with renewals due while the keys are moving: the
/// hold is renewed on the new primary or signalled lost, never held by two; acquisitions
/// continue there with increasing tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_whose_slot_migrates_is_renewed_there_or_signalled_lost() {
    let fixture = dedicated().await;
    let provider: RedisLockProvider = test_builder().url(fixture.url()).build().unwrap();
    let other: RedisLockProvider = test_builder().url(fixture.url()).build().unwrap();
    let name = unique("migrate");
    let key = provider.record_key(&lockkit_core::LockName::new(&name).unwrap());
    let (held, last) = cycled_then_held(&provider, &name).await;

    // While the keys sit on the target but the slot is not handed over, renewals are
    // redirected (ASK); a renewal round falls in that window.
    let renewals = provider.renewal_stats().ticks;
    let (from, to) = fixture
        .migrate(&key, || async {
            let deadline = std::time::Instant::now() + SETTLE;
            while provider.renewal_stats().ticks < renewals + 2 && std::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
    assert_ne!(from, to);
    assert_eq!(fixture.primary_of(&key).await.unwrap(), to);
    let migrated = std::time::Instant::now();
    after_the_move("migration", migrated, &provider, &other, &name, held, last).await;
}
