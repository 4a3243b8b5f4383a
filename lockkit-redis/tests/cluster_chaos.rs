//! The chaos run (lockkit-testkit's `chaos`) with the topology faults: on a Redis Cluster of
//! its own, `failover` (`CLUSTER FAILOVER` of the primary of a name's slot) and `reshard`
//! (the name's slot migrated to another primary, keys and all), with and without
//! `replicas=1`; on a Sentinel setup of its own, `failover` (`SENTINEL FAILOVER`), with and
//! without `replicas=1`. Eight clients on three names, as in `chaos.rs`; the client faults,
//! which need a proxy per client that a cluster or sentinel client bypasses, are left out.
//!
//! A failover may lose the last writes of the old primary (Redis replication is
//! asynchronous: a Sentinel failover promotes a replica that may not have them; `CLUSTER
//! FAILOVER` waits for the replica to catch up, so it loses none), so the runs declare
//! `restart_loses_data`: an overlap across a failover is counted apart ("by design") rather
//! than failing the run, and the report says how many there were. Token regressions and
//! every other violation fail the run. `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and
//! `LOCKKIT_CHAOS_SEED` make the runs longer or replay a seed.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::LockName;
use lockkit_redis::RedisLockProvider;
use lockkit_testkit::chaos::{self, ChaosConfig, FaultKind};
use lockkit_testkit::fixture::{RedisCluster, RedisSentinels};
use lockkit_testkit::{FaultResult, Harness, NoFaults, TestClient, Timing, Unsupported};
use support::{LEASE, test_builder};

/// A cluster or a Sentinel setup of the run's own, and how many replicas acknowledge.
enum Store {
    Cluster(RedisCluster),
    Sentinels(Box<RedisSentinels>),
}

/// Runs the chaos clients on a store of their own, with the topology hooks.
struct TopologyHarness {
    store: Store,
    replicas: u32,
    name: &'static str,
}

impl TopologyHarness {
    fn url(&self) -> String {
        match &self.store {
            Store::Cluster(cluster) => cluster.url(),
            Store::Sentinels(sentinels) => sentinels.url(),
        }
    }

    /// The key of lock `name`'s record, which decides its slot.
    fn record_key(&self, name: &str) -> String {
        let provider: RedisLockProvider = test_builder().url("redis://unused/").build().unwrap();
        provider.record_key(&LockName::new(name).unwrap())
    }
}

#[async_trait]
impl Harness for TopologyHarness {
    fn name(&self) -> &str {
        self.name
    }

    async fn client(&self) -> lockkit_core::Result<TestClient> {
        let provider = test_builder().url(self.url()).replicas(self.replicas).build()?;
        Ok(TestClient::new(provider, Arc::new(NoFaults)))
    }

    fn timing(&self) -> Timing {
        Timing::new().with_lease(LEASE)
    }

    async fn failover(&self, name: &str) -> FaultResult {
        match &self.store {
            Store::Cluster(cluster) => {
                cluster.failover(&self.record_key(name)).await.unwrap();
            }
            Store::Sentinels(sentinels) => {
                sentinels.failover().await.unwrap();
            }
        }
        Ok(())
    }

    async fn reshard(&self, name: &str) -> FaultResult {
        match &self.store {
            Store::Cluster(cluster) => {
                cluster.migrate(&self.record_key(name), || async {}).await.unwrap();
                Ok(())
            }
            Store::Sentinels(_) => Err(Unsupported),
        }
    }
}

/// Faults every few seconds for a short run: a failover or a migration takes a second or
/// more of its own.
fn config(faults: &[FaultKind], label: &str) -> ChaosConfig {
    ChaosConfig::new(0)
        .with_duration(Duration::from_secs(12))
        .with_faults(faults)
        .with_restart_loses_data(true)
        .with_label(label)
}

async fn cluster(replicas: u32) -> TopologyHarness {
    match RedisCluster::start().await {
        Ok(cluster) => TopologyHarness { store: Store::Cluster(cluster), replicas, name: "redis (cluster)" },
        Err(error) => panic!("the cluster chaos runs need redis-server: {error}"),
    }
}

async fn sentinels(replicas: u32) -> TopologyHarness {
    match RedisSentinels::start().await {
        Ok(sentinels) => {
            TopologyHarness { store: Store::Sentinels(Box::new(sentinels)), replicas, name: "redis (sentinel)" }
        }
        Err(error) => panic!("the Sentinel chaos runs need redis-server: {error}"),
    }
}

#[test]
fn chaos_on_a_cluster_with_failovers_and_resharding() {
    lockkit_testkit::runtime().block_on(async {
        let harness = cluster(0).await;
        chaos::check(&harness, config(&FaultKind::TOPOLOGY, "replicas=0"), &[31]).await;
    });
}

#[test]
fn chaos_on_a_cluster_with_failovers_and_resharding_and_replicas() {
    lockkit_testkit::runtime().block_on(async {
        let harness = cluster(1).await;
        chaos::check(&harness, config(&FaultKind::TOPOLOGY, "replicas=1"), &[32]).await;
    });
}

/// One failover per run under Sentinel: the sentinels refuse to fail a master over again
/// within twice its `failover-timeout` (10 s in the fixture).
fn sentinel_config(label: &str) -> ChaosConfig {
    let mut config = config(&[FaultKind::Failover], label).with_duration(Duration::from_secs(6));
    config.fault_gap = (Duration::from_secs(3), Duration::from_secs(4));
    config
}

#[test]
fn chaos_under_sentinel_with_a_failover() {
    lockkit_testkit::runtime().block_on(async {
        let harness = sentinels(0).await;
        chaos::check(&harness, sentinel_config("replicas=0"), &[33]).await;
    });
}

#[test]
fn chaos_under_sentinel_with_a_failover_and_replicas() {
    lockkit_testkit::runtime().block_on(async {
        // Both replicas: the sentinels may promote either.
        let harness = sentinels(2).await;
        chaos::check(&harness, sentinel_config("replicas=2"), &[34]).await;
    });
}
