//! The chaos run (lockkit-testkit's `chaos`) on real ZooKeeper:
//!
//! - on a dedicated server: eight clients, each with a session through a fault proxy of its
//!   own, on three names, while connections are cut, blackholed past the session timeout
//!   (the session expires), slowed down, clients killed, and the server paused and restarted;
//!   on mutexes, then the same schedule on read-write locks (one writer in four, readers
//!   reading the fenced resource with their token), on semaphores of three permits and on
//!   elections (every client a candidate; the leader writes with its term);
//! - on a three-member ensemble: each client reaches every member through a proxy of its own,
//!   and the member a client is connected to is stopped and started again, besides cuts,
//!   blackholes and latency.
//!
//! - on a dedicated server again: observers of an election under cuts, blackholes (past the
//!   session timeout too), latency and a server restart, checked against every term granted:
//!   each one reaches every observer, or a gap comes between the terms shown around it.
//!
//! The runs go one after the other (three JVMs are enough for two cores).
//!
//! `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and `LOCKKIT_CHAOS_SEED` make the runs longer
//! or replay a seed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_testkit::chaos::{self, ChaosConfig, FaultKind, Primitive};
use lockkit_testkit::fixture::zk::ZkEnsemble;
use lockkit_testkit::observer_chaos::ObserverChaos;
use lockkit_testkit::proxy::{MemberProxies, proxied_members};
use lockkit_testkit::{ClientFaults, FaultResult, Harness, TestClient, Timing};
use lockkit_zk::ZkLockProvider;
use support::ZkHarness;
use tokio::sync::Mutex;

lockkit_testkit::chaos_test! {
    harness: ZkHarness::dedicated().await;
    chaos_on_a_dedicated_server([21]) => ChaosConfig::single_server().with_duration(Duration::from_secs(25));
    chaos_read_write_locks_on_a_dedicated_server([23]) => ChaosConfig::single_server().with_primitive(Primitive::ReadWrite);
    chaos_semaphores_of_three_on_a_dedicated_server([24]) =>
        ChaosConfig::single_server().with_primitive(Primitive::Semaphore(3));
    chaos_elections_on_a_dedicated_server([25]) => ChaosConfig::single_server().with_primitive(Primitive::Election);
}

#[test]
fn chaos_on_an_ensemble() {
    lockkit_testkit::runtime().block_on(async {
        let _turn = chaos::one_at_a_time().await;
        let harness = EnsembleHarness::start().await;
        let faults =
            [FaultKind::StopServer, FaultKind::Cut, FaultKind::Latency, FaultKind::StopServer, FaultKind::Blackhole];
        let config = ChaosConfig::new(0).with_duration(Duration::from_secs(25)).with_faults(&faults);
        chaos::check(&harness, config, &[22]).await;
        let ensemble = Arc::try_unwrap(harness.ensemble).ok().map(Mutex::into_inner);
        if let Some(ensemble) = ensemble {
            ensemble.stop().await.expect("the ensemble stops");
        }
    });
}

lockkit_testkit::observer_chaos_test!(
    /// Observers of an election under faults, on a dedicated server (the kit's
    /// `observer_chaos`): every term granted reaches each observer, or a `Gap` comes between the
    /// terms shown around it (contract 28), while connections are cut, slowed and blackholed
    /// (past the session timeout too) and the server restarts once.
    chaos_observers_see_every_term_or_a_gap,
    harness: ZkHarness::dedicated().await,
    config: ObserverChaos::new(26, Duration::from_secs(20)),
);

/// Long enough to ride out a leader election on the loopback ensemble.
const ENSEMBLE_SESSION_TIMEOUT: Duration = Duration::from_secs(6);

/// A harness on a three-member ensemble of its own; each client reaches each member through a
/// proxy of its own, so the member it is connected to is known and can be stopped.
struct EnsembleHarness {
    ensemble: Arc<Mutex<ZkEnsemble>>,
    members: Vec<std::net::SocketAddr>,
    base: String,
}

impl EnsembleHarness {
    async fn start() -> Self {
        let ensemble = match ZkEnsemble::start().await {
            Ok(ensemble) => ensemble,
            Err(error) => panic!("the ZooKeeper chaos run needs a three-member ensemble: {error}"),
        };
        let members = (0..ensemble.member_count()).map(|i| ensemble.member_addr(i)).collect();
        let base = format!("/lockkit-chaos-{}", uuid::Uuid::new_v4().simple());
        Self { ensemble: Arc::new(Mutex::new(ensemble)), members, base }
    }
}

/// The faults of one client: its proxies (one per member, all struck together), and stopping
/// the member it is connected to.
struct EnsembleFaults {
    members: Arc<MemberProxies>,
    ensemble: Arc<Mutex<ZkEnsemble>>,
}

#[async_trait]
impl ClientFaults for EnsembleFaults {
    async fn kill(&self) -> FaultResult {
        self.members.kill().await
    }

    async fn blackhole(&self) -> FaultResult {
        self.members.blackhole().await
    }

    async fn heal(&self) -> FaultResult {
        self.members.heal().await
    }

    async fn cut_connection(&self) -> FaultResult {
        self.members.cut_connection().await
    }

    async fn set_latency(&self, latency: Duration) -> FaultResult {
        self.members.set_latency(latency).await
    }

    async fn stop_server_for(&self, down: Duration) -> FaultResult {
        // The member this client is connected to (the first, if it is between connections).
        let member = self.members.connected_member().unwrap_or(0);
        let mut ensemble = self.ensemble.lock().await;
        if let Err(error) = ensemble.stop_member(member).await {
            panic!("stopping ensemble member {member} failed: {error}");
        }
        tokio::time::sleep(down).await;
        if let Err(error) = ensemble.start_member(member).await {
            panic!("starting ensemble member {member} again failed: {error}");
        }
        if let Err(error) = ensemble.wait_ready().await {
            panic!("the ensemble did not serve again after member {member} restarted: {error}");
        }
        Ok(())
    }
}

#[async_trait]
impl Harness for EnsembleHarness {
    fn name(&self) -> &str {
        "zk (ensemble)"
    }

    async fn client(&self) -> lockkit_core::Result<TestClient> {
        let (provider, members) = proxied_members("zk", &self.members, |connect_string| {
            ZkLockProvider::builder()
                .connect_string(connect_string)
                .base_path(self.base.clone())
                .session_timeout(ENSEMBLE_SESSION_TIMEOUT)
                .build()
        })
        .await?;
        let faults = EnsembleFaults { members, ensemble: Arc::clone(&self.ensemble) };
        Ok(TestClient::new(provider, Arc::new(faults)))
    }

    fn timing(&self) -> Timing {
        Timing::new().with_lease(ENSEMBLE_SESSION_TIMEOUT).with_operation(Duration::from_secs(8))
    }
}
