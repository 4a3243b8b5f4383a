//! The chaos run (lockkit-testkit's `chaos`) on a three-member etcd cluster whose leader is
//! killed: the `failover` fault `SIGKILL`s the member that leads (no chance to hand over
//! leadership or flush anything), waits until one of the other two leads, lets the clients
//! run on those two for a second, and starts the killed member again with its data. Eight
//! clients on three names, each with a fault proxy per member of its own, so the client
//! faults (cut, blackhole, latency, kill) run beside the leader kills. etcd commits every
//! write on a quorum before it answers, so the run declares nothing "by design": an overlap
//! or a lost write anywhere fails it. `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and
//! `LOCKKIT_CHAOS_SEED` make the run longer or replay a seed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{Client, ConnectOptions, GetOptions};
use lockkit_testkit::chaos::{self, ChaosConfig, FaultKind};
use lockkit_testkit::fixture::EtcdCluster;
use lockkit_testkit::proxy::proxied_members;
use lockkit_testkit::{FaultResult, Harness, TestClient, Timing};
use support::{TTL, test_builder};
use tokio::sync::Mutex;

/// How long a leader election may take after the leader is killed (etcd's default election
/// timeout is 1 s).
const ELECTION_BOUND: Duration = Duration::from_secs(15);

/// How long the killed member stays down while the other two serve.
const DOWN: Duration = Duration::from_secs(1);

/// A three-member cluster of the run's own.
struct ClusterHarness {
    cluster: Mutex<EtcdCluster>,
    members: Vec<SocketAddr>,
    /// Leaders killed, and the longest time until another member led.
    kills: AtomicU64,
    longest_election_ms: AtomicU64,
    /// Lock keys (holds and waits) present when a leader was killed, and of those, the keys
    /// still there once the member started again: their leases lived across the kill.
    keys_at_kills: AtomicU64,
    keys_kept: AtomicU64,
}

impl ClusterHarness {
    async fn start() -> Self {
        let cluster = EtcdCluster::start(3).await.unwrap_or_else(|e| panic!("the cluster chaos run needs etcd: {e}"));
        let members = cluster.members().iter().map(|m| m.addr()).collect();
        Self {
            cluster: Mutex::new(cluster),
            members,
            kills: AtomicU64::new(0),
            longest_election_ms: AtomicU64::new(0),
            keys_at_kills: AtomicU64::new(0),
            keys_kept: AtomicU64::new(0),
        }
    }

    /// The lock keys in the store, asked of every member directly (no proxy).
    async fn keys(&self) -> Vec<Vec<u8>> {
        let endpoints: Vec<String> = self.members.iter().map(|m| format!("http://{m}")).collect();
        let options = ConnectOptions::new().with_timeout(Duration::from_secs(5));
        let mut admin = Client::connect(endpoints, Some(options)).await.unwrap();
        let prefix = format!("{}/", lockkit_etcd::DEFAULT_PREFIX);
        let reply = admin.get(prefix, Some(GetOptions::new().with_prefix().with_keys_only())).await.unwrap();
        reply.kvs().iter().map(|kv| kv.key().to_vec()).collect()
    }
}

#[async_trait]
impl Harness for ClusterHarness {
    fn name(&self) -> &str {
        "etcd (three members)"
    }

    async fn client(&self) -> lockkit_core::Result<TestClient> {
        // A proxy per member, all struck together by the client faults.
        let (provider, faults) =
            proxied_members("etcd", &self.members, |endpoints| test_builder().endpoints(endpoints).build()).await?;
        Ok(TestClient::new(provider, faults))
    }

    fn timing(&self) -> Timing {
        Timing::new().with_lease(TTL)
    }

    /// Kills the leader with `SIGKILL`, waits until another member leads, keeps the killed
    /// one down for [`DOWN`], and starts it again with its data.
    async fn failover(&self, _name: &str) -> FaultResult {
        let mut cluster = self.cluster.lock().await;
        let leader = cluster.leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}"));
        let before = self.keys().await;
        let killed = Instant::now();
        cluster.members_mut()[leader].kill().await.unwrap_or_else(|e| panic!("{e}"));
        let next = cluster.leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(next, leader, "the killed member cannot lead");
        let election = u64::try_from(killed.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.longest_election_ms.fetch_max(election, Ordering::SeqCst);
        self.kills.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(DOWN).await;
        cluster.members_mut()[leader].start_again().await.unwrap_or_else(|e| panic!("{e}"));
        let after = self.keys().await;
        let kept = before.iter().filter(|key| after.contains(key)).count();
        self.keys_at_kills.fetch_add(before.len() as u64, Ordering::SeqCst);
        self.keys_kept.fetch_add(kept as u64, Ordering::SeqCst);
        Ok(())
    }
}

/// The leader kill and the client faults; pausing or restarting the whole store does not
/// apply to a cluster (the single-member run has them).
const FAULTS: [FaultKind; 5] =
    [FaultKind::Failover, FaultKind::Cut, FaultKind::Blackhole, FaultKind::Latency, FaultKind::Kill];

#[test]
fn chaos_on_three_members_with_the_leader_killed() {
    lockkit_testkit::runtime().block_on(async {
        let harness = ClusterHarness::start().await;
        let config = ChaosConfig::new(0)
            .with_duration(Duration::from_secs(20))
            .with_faults(&FAULTS)
            .with_label("leader SIGKILLed");
        let reports = chaos::check(&harness, config, &[43]).await;
        let kills = harness.kills.load(Ordering::SeqCst);
        println!(
            "leaders killed: {kills}; longest time to a new leader: {} ms; lock keys at the kills: {}, \
             still there after the restart: {}",
            harness.longest_election_ms.load(Ordering::SeqCst),
            harness.keys_at_kills.load(Ordering::SeqCst),
            harness.keys_kept.load(Ordering::SeqCst),
        );
        assert!(kills >= 1, "the run killed no leader");
        for report in reports {
            assert!(report.faults_applied.get(&FaultKind::Failover).is_some_and(|n| *n >= 1), "{report}");
        }
    });
}
