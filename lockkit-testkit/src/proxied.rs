//! The harness of a backend whose test clients each reach one server through a fault proxy of
//! their own (Redis, PostgreSQL, etcd): written once here, generic over what differs, the
//! [`ProxiedStore`] a backend's `tests/support/mod.rs` implements (its store's address, admin
//! helpers, how a provider is built on an address). The support module names the harness with a
//! type alias (`pub type RedisHarness = ProxiedHarness<RedisStore>;`), which its
//! `tests/conformance.rs` hands to [`conformance!`](crate::conformance).

use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Mutex;

use crate::fixture::{DedicatedServer, FixtureError, ServerControl};
use crate::proxy::{ProxyFaults, closed_port, proxied};
use crate::{FaultResult, Harness, NoFaults, TestClient, Timing, Unsupported};

/// What a [`ProxiedHarness`] needs to know of a backend: its server fixture, how a provider is
/// built on an address, and the store faults that depend on the store.
///
/// A value of it is the store a harness is on: its address, and whatever the backend's tests
/// need besides (an admin connection, say). The harness dereferences to it, so those helpers
/// read `harness.admin()`.
#[async_trait]
pub trait ProxiedStore: Sized + Send + Sync + 'static {
    /// The server fixture that a dedicated harness starts.
    type Server: ServerControl + 'static;
    /// How a server is started (Redis: its persistence) and what its clients are built with
    /// (etcd: the many-holds threshold); the default is the usual one.
    type Setup: Clone + Default + Send + Sync + 'static;
    /// The provider builder, with the test settings.
    type Builder: Send + 'static;
    /// The provider it builds.
    type Provider: Into<lockkit_core::LockProvider>;

    /// The backend's name, in the harness's name and in error messages ("redis").
    const NAME: &'static str;
    /// The environment variable from which a child process reads the store's URL.
    const URL_ENV: &'static str;
    /// The lease of test clients.
    const LEASE: Duration;

    /// The store at `upstream` (the harness keeps the address too), started with `setup`.
    fn at(upstream: SocketAddr, setup: Self::Setup) -> Self;

    /// Starts a dedicated server with `setup`.
    ///
    /// # Errors
    ///
    /// When it cannot be started, with the fixture's message.
    async fn start(setup: &Self::Setup) -> Result<Self::Server, FixtureError>;

    /// The builder with the test settings of this store's clients and no address.
    fn test_builder(&self) -> Self::Builder;

    /// Builds a provider from `builder` on the server at `address`.
    ///
    /// # Errors
    ///
    /// The builder's.
    fn build(builder: Self::Builder, address: SocketAddr) -> lockkit_core::Result<Self::Provider>;

    /// The URL of the server at `address`, as a child process reads it from [`URL_ENV`](Self::URL_ENV).
    fn url(address: SocketAddr) -> String;

    /// What sets `setup` apart from the usual one, in the harness's name ("many holds" makes
    /// "etcd (many holds)" and "etcd (dedicated, many holds)"); none by default.
    fn setup_name(setup: &Self::Setup) -> Option<&'static str> {
        let _ = setup;
        None
    }

    /// How the store of [`Harness::isolated`] is started: the usual setup unless the backend
    /// says otherwise.
    fn isolated_setup(&self) -> Self::Setup {
        Self::Setup::default()
    }

    /// [`Harness::delete_record`].
    async fn delete_record(&self, name: &str) -> FaultResult;

    /// [`Harness::invalid_configs`].
    async fn invalid_configs(&self) -> Vec<(String, lockkit_core::Result<()>)>;

    /// [`Harness::restart_store`] of the dedicated `server`: a plain restart unless the
    /// backend says otherwise.
    async fn restart(&self, server: &DedicatedServer<Self::Server>) -> FaultResult {
        server.restart().await
    }

    /// [`Harness::compact_history`]: unsupported unless the store keeps a history.
    async fn compact_history(&self) -> FaultResult {
        Err(Unsupported)
    }
}

/// The conformance harness of a [`ProxiedStore`]: every client is a provider of its own
/// behind a fault proxy of its own, in front of the shared server or a dedicated one.
pub struct ProxiedHarness<S: ProxiedStore> {
    name: String,
    /// Where the store's server listens (what the proxies connect to).
    upstream: SocketAddr,
    store: S,
    /// The dedicated server of an isolated harness, which may be restarted or paused.
    server: DedicatedServer<S::Server>,
}

impl<S: ProxiedStore> ProxiedHarness<S> {
    /// A harness on the test process's shared server.
    ///
    /// # Panics
    ///
    /// When no server can be started, with the fixture's message (which says how to install it).
    pub async fn shared() -> Self {
        Self::shared_with(S::Setup::default()).await
    }

    /// A harness on the test process's shared server with `setup` (which may set what its
    /// clients are built with).
    ///
    /// # Panics
    ///
    /// As [`shared`](Self::shared).
    pub async fn shared_with(setup: S::Setup) -> Self {
        let upstream = S::Server::shared_upstream().await.unwrap_or_else(|error| Self::no_server(&error));
        Self::on(upstream, setup, false, DedicatedServer::none())
    }

    /// A harness on a dedicated server of the usual setup.
    ///
    /// # Panics
    ///
    /// As [`shared`](Self::shared).
    pub async fn dedicated() -> Self {
        Self::dedicated_with(S::Setup::default()).await
    }

    /// A harness on a dedicated server started with `setup`.
    ///
    /// # Panics
    ///
    /// As [`shared`](Self::shared).
    pub async fn dedicated_with(setup: S::Setup) -> Self {
        let server = S::start(&setup).await.unwrap_or_else(|error| Self::no_server(&error));
        Self::on(server.addr(), setup, true, DedicatedServer::new(server))
    }

    /// The harness on the server at `upstream`, named for the server and `setup`.
    fn on(upstream: SocketAddr, setup: S::Setup, dedicated: bool, server: DedicatedServer<S::Server>) -> Self {
        let name = match (dedicated, S::setup_name(&setup)) {
            (false, None) => S::NAME.to_owned(),
            (false, Some(setup)) => format!("{} ({setup})", S::NAME),
            (true, None) => format!("{} (dedicated)", S::NAME),
            (true, Some(setup)) => format!("{} (dedicated, {setup})", S::NAME),
        };
        Self { name, upstream, store: S::at(upstream, setup), server }
    }

    fn no_server(error: &FixtureError) -> ! {
        panic!("the {} tests need {}: {error}", S::NAME, <S::Server as ServerControl>::PROGRAM)
    }

    /// The server's address, for admin connections that bypass every proxy.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// The dedicated server, if this harness has one.
    pub fn server(&self) -> Option<&Arc<Mutex<S::Server>>> {
        self.server.get()
    }

    /// A client with its own proxy and fault hooks, built from `builder` (the address is set here).
    ///
    /// # Errors
    ///
    /// When the proxy cannot listen, and the builder's.
    pub async fn client_with(&self, builder: S::Builder) -> lockkit_core::Result<(S::Provider, Arc<ProxyFaults>)> {
        proxied(S::NAME, self.upstream(), |proxy| S::build(builder, proxy)).await
    }
}

impl<S: ProxiedStore> Deref for ProxiedHarness<S> {
    type Target = S;

    fn deref(&self) -> &S {
        &self.store
    }
}

#[async_trait]
impl<S: ProxiedStore> Harness for ProxiedHarness<S> {
    fn name(&self) -> &str {
        &self.name
    }

    async fn client(&self) -> lockkit_core::Result<TestClient> {
        let (provider, faults) = self.client_with(self.store.test_builder()).await?;
        Ok(TestClient::new(provider, faults))
    }

    fn timing(&self) -> Timing {
        Timing::new().with_lease(S::LEASE)
    }

    async fn unreachable_client(&self) -> Result<TestClient, Unsupported> {
        let provider = S::build(self.store.test_builder(), closed_port()).map_err(|_| Unsupported)?;
        Ok(TestClient::new(provider, Arc::new(NoFaults)))
    }

    async fn delete_record(&self, name: &str) -> FaultResult {
        self.store.delete_record(name).await
    }

    async fn isolated(&self) -> Result<Arc<dyn Harness>, Unsupported> {
        Ok(Arc::new(Self::dedicated_with(self.store.isolated_setup()).await))
    }

    async fn restart_store(&self) -> FaultResult {
        self.store.restart(&self.server).await
    }

    async fn pause_store(&self, paused: bool) -> FaultResult {
        self.server.pause(paused).await
    }

    async fn compact_history(&self) -> FaultResult {
        self.store.compact_history().await
    }

    fn child_env(&self) -> Result<Vec<(String, String)>, Unsupported> {
        Ok(vec![(S::URL_ENV.to_owned(), S::url(self.upstream()))])
    }

    async fn invalid_configs(&self) -> Vec<(String, lockkit_core::Result<()>)> {
        self.store.invalid_configs().await
    }
}
