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
use lockkit_testkit::fixture::{DedicatedServer, FixtureError, PostgresServer};
use lockkit_testkit::proxied::{ProxiedHarness, ProxiedStore};
use lockkit_testkit::{FaultResult, Unsupported};

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

/// The URL of the server at `addr` as the test superuser.
pub fn url_of(addr: SocketAddr) -> String {
    format!("postgres://postgres@{addr}/postgres")
}

/// Runs the kit against a PostgreSQL server: the shared one, or a dedicated one
/// (`PostgresHarness::dedicated_with(Restarts::Crash)` for one whose restarts are crashes).
pub type PostgresHarness = ProxiedHarness<PostgresStore>;

/// How the restarts of a dedicated server are made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Restarts {
    /// A fast shutdown, then a start.
    #[default]
    Clean,
    /// A crash (an immediate stop: WAL not yet flushed is lost), then a start; the WAL writer
    /// is slowed to its 10 s maximum so that a crash loses the asynchronous commits of the
    /// last seconds.
    Crash,
}

/// The PostgreSQL server a harness is on.
pub struct PostgresStore {
    upstream: SocketAddr,
    restarts: Restarts,
}

impl PostgresStore {
    /// A plain connection to the server as the superuser, bypassing every proxy.
    pub async fn admin(&self) -> tokio_postgres::Client {
        admin_of(self.upstream).await
    }
}

/// A plain connection to the server at `addr` as the superuser.
async fn admin_of(addr: SocketAddr) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={} user=postgres dbname=postgres", addr.port()),
        tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    client
}

#[async_trait]
impl ProxiedStore for PostgresStore {
    type Server = PostgresServer;
    type Setup = Restarts;
    type Builder = PostgresLockProviderBuilder;
    type Provider = PostgresLockProvider;

    const NAME: &'static str = "postgres";
    const URL_ENV: &'static str = lockkit_testkit::fixture::POSTGRES_URL_ENV;
    const LEASE: Duration = LEASE;

    fn at(upstream: SocketAddr, restarts: Restarts) -> Self {
        Self { upstream, restarts }
    }

    async fn start(restarts: &Restarts) -> Result<PostgresServer, FixtureError> {
        let mut server = PostgresServer::start().await?;
        if *restarts == Restarts::Crash {
            let admin = admin_of(server.addr()).await;
            admin.batch_execute("ALTER SYSTEM SET wal_writer_delay = '10s'").await.unwrap();
            drop(admin);
            // A restart, not `pg_reload_conf()`: a reload reaches the WAL writer whenever it
            // next looks, so a grant made at once could still be flushed at the old pace.
            server.restart().await?;
        }
        Ok(server)
    }

    fn test_builder(&self) -> PostgresLockProviderBuilder {
        test_builder()
    }

    fn build(builder: PostgresLockProviderBuilder, address: SocketAddr) -> lockkit_core::Result<PostgresLockProvider> {
        builder.url(url_of(address)).build()
    }

    fn url(address: SocketAddr) -> String {
        url_of(address)
    }

    fn setup_name(restarts: &Restarts) -> Option<&'static str> {
        (*restarts == Restarts::Crash).then_some("crash restarts")
    }

    fn isolated_setup(&self) -> Restarts {
        self.restarts
    }

    async fn restart(&self, server: &DedicatedServer<PostgresServer>) -> FaultResult {
        if self.restarts == Restarts::Clean {
            return server.restart().await;
        }
        let server = server.get().ok_or(Unsupported)?;
        if let Err(error) = server.lock().await.crash_restart().await {
            panic!("restarting postgres after a crash failed: {error}");
        }
        Ok(())
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
