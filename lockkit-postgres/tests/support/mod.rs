//! The conformance harness of the PostgreSQL backend, shared by the test files: every client is
//! a provider of its own behind a fault proxy of its own, in front of a real PostgreSQL server.

#![allow(dead_code, unused_imports, unreachable_pub, missing_docs, clippy::unwrap_used, clippy::expect_used)]

pub use lockkit_testkit::wait::within;

pub use lockkit_testkit::proxy::{ProxyFaults, closed_port};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_postgres::{PostgresLockProvider, PostgresLockProviderBuilder};
use lockkit_testkit::fixture::{DedicatedServer, PostgresServer};
use lockkit_testkit::proxy::proxied;
use lockkit_testkit::{FaultResult, Harness, NoFaults, TestClient, Timing, Unsupported};
use tokio::sync::Mutex;

/// A bound for things that take a few round trips on a loaded machine.
pub const OPERATION: Duration = Duration::from_secs(3);

/// The lease of test clients: short, so that the expiry cases take seconds.
pub const LEASE: Duration = Duration::from_secs(2);
pub const RENEW_EVERY: Duration = Duration::from_millis(500);
pub const RESPONSE_TIMEOUT: Duration = Duration::from_millis(600);
pub const DRIFT: Duration = Duration::from_millis(50);

/// The settings of a test client; the URL is set per client.
pub fn test_builder() -> PostgresLockProviderBuilder {
    PostgresLockProvider::builder()
        .lease(LEASE)
        .renew_every(RENEW_EVERY)
        .response_timeout(RESPONSE_TIMEOUT)
        .drift(DRIFT)
}

/// Runs the kit against a PostgreSQL server.
pub struct PostgresHarness {
    name: &'static str,
    upstream: SocketAddr,
    server: DedicatedServer<PostgresServer>,
    /// The store's restarts are crashes (an immediate stop) instead of fast shutdowns.
    crash: bool,
}

/// The URL of the server at `addr` as the test superuser.
pub fn url_of(addr: SocketAddr) -> String {
    format!("postgres://postgres@{addr}/postgres")
}

impl PostgresHarness {
    /// A harness on the test process's shared server.
    pub async fn shared() -> Self {
        let shared = PostgresServer::shared()
            .await
            .unwrap_or_else(|error| panic!("the PostgreSQL tests need a PostgreSQL server: {error}"));
        let upstream = shared
            .upstream()
            .await
            .unwrap_or_else(|error| panic!("the PostgreSQL tests need a PostgreSQL server: {error}"));
        Self { name: "postgres", upstream, server: DedicatedServer::none(), crash: false }
    }

    /// A harness on a dedicated server.
    pub async fn dedicated() -> Self {
        let server = match PostgresServer::start().await {
            Ok(server) => server,
            Err(error) => panic!("the PostgreSQL tests need a PostgreSQL server: {error}"),
        };
        Self {
            name: "postgres (dedicated)",
            upstream: server.addr(),
            server: DedicatedServer::new(server),
            crash: false,
        }
    }

    /// A harness on a dedicated server whose restarts are crashes (an immediate stop: WAL not
    /// yet flushed is lost), with the WAL writer slowed to its 10 s maximum so that a crash
    /// loses the asynchronous commits of the last seconds.
    pub async fn dedicated_crashing() -> Self {
        let harness = Self { name: "postgres (dedicated, crash restarts)", crash: true, ..Self::dedicated().await };
        let admin = harness.admin().await;
        admin.batch_execute("ALTER SYSTEM SET wal_writer_delay = '10s'").await.unwrap();
        admin.batch_execute("SELECT pg_reload_conf()").await.unwrap();
        harness
    }

    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    pub fn server(&self) -> Option<&Arc<Mutex<PostgresServer>>> {
        self.server.get()
    }

    /// A client with its own proxy and fault hooks, built from `builder`.
    pub async fn client_with(
        &self,
        builder: PostgresLockProviderBuilder,
    ) -> lockkit_core::Result<(PostgresLockProvider, Arc<ProxyFaults>)> {
        proxied("postgres", self.upstream, |proxy| builder.url(url_of(proxy)).build()).await
    }

    /// A plain connection to the server as the superuser, bypassing every proxy.
    pub async fn admin(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(
            &format!("host=127.0.0.1 port={} user=postgres dbname=postgres", self.upstream.port()),
            tokio_postgres::NoTls,
        )
        .await
        .unwrap();
        tokio::spawn(connection);
        client
    }
}

#[async_trait]
impl Harness for PostgresHarness {
    fn name(&self) -> &str {
        self.name
    }

    async fn client(&self) -> lockkit_core::Result<TestClient> {
        let (provider, faults) = self.client_with(test_builder()).await?;
        Ok(TestClient::new(provider, faults))
    }

    fn timing(&self) -> Timing {
        Timing::new().with_lease(LEASE)
    }

    async fn unreachable_client(&self) -> Result<TestClient, Unsupported> {
        let provider = test_builder().url(url_of(closed_port())).build().map_err(|_| Unsupported)?;
        Ok(TestClient::new(provider, Arc::new(NoFaults)))
    }

    async fn delete_record(&self, name: &str) -> FaultResult {
        let admin = self.admin().await;
        let stored = lockkit_postgres::stored_name(name);
        let deleted = admin.execute("DELETE FROM lockkit.locks WHERE name = $1", &[&stored]).await.unwrap()
            + admin
                .execute("DELETE FROM lockkit.candidates WHERE name = $1 AND token IS NOT NULL", &[&stored])
                .await
                .unwrap();
        assert_eq!(deleted, 1, "the held lock {name:?} (or the election's leader) has a row");
        Ok(())
    }

    async fn isolated(&self) -> Result<Arc<dyn Harness>, Unsupported> {
        Ok(Arc::new(if self.crash { Self::dedicated_crashing().await } else { Self::dedicated().await }))
    }

    async fn restart_store(&self) -> FaultResult {
        if !self.crash {
            return self.server.restart().await;
        }
        let server = self.server.get().ok_or(Unsupported)?;
        if let Err(error) = server.lock().await.crash_restart().await {
            panic!("restarting postgres after a crash failed: {error}");
        }
        Ok(())
    }

    async fn pause_store(&self, paused: bool) -> FaultResult {
        self.server.pause(paused).await
    }

    fn child_env(&self) -> Result<Vec<(String, String)>, Unsupported> {
        Ok(vec![(lockkit_testkit::fixture::POSTGRES_URL_ENV.to_owned(), url_of(self.upstream))])
    }

    async fn invalid_configs(&self) -> Vec<(String, lockkit_core::Result<()>)> {
        let url = url_of(self.upstream);
        let attempt = |what: &str, builder: PostgresLockProviderBuilder| (what.to_owned(), builder.build().map(drop));
        vec![
            attempt("no URL", PostgresLockProvider::builder()),
            attempt(
                "a URL without a database",
                PostgresLockProvider::builder().url(format!("postgres://{}", self.upstream)),
            ),
            attempt(
                "a schema that is not an identifier",
                PostgresLockProvider::builder().url(&url).schema("locks; drop"),
            ),
            attempt(
                "a lease below the floor",
                PostgresLockProvider::builder().url(&url).lease(Duration::from_millis(5)),
            ),
            attempt(
                "renewal slower than the lease",
                PostgresLockProvider::builder()
                    .url(&url)
                    .lease(Duration::from_secs(1))
                    .renew_every(Duration::from_secs(2)),
            ),
            attempt("an unknown scheme", PostgresLockProvider::builder().url("mysql://127.0.0.1/db")),
        ]
    }
}
