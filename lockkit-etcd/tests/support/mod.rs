//! The conformance harness of the etcd backend, shared by the test files: every client is a
//! provider of its own behind a fault proxy of its own, in front of a real `etcd` member.

#![allow(dead_code, unused_imports, unreachable_pub, missing_docs, clippy::unwrap_used, clippy::expect_used)]

pub use lockkit_testkit::wait::within;

pub use lockkit_testkit::proxy::{ProxyFaults, closed_port};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, GetOptions, SortOrder, SortTarget};
use lockkit_etcd::{EtcdLockProvider, EtcdLockProviderBuilder};
use lockkit_testkit::fixture::{DedicatedServer, ETCD_URL_ENV, EtcdServer};
use lockkit_testkit::proxy::proxied;
use lockkit_testkit::{FaultResult, Harness, NoFaults, TestClient, Timing, Unsupported};
use tokio::sync::Mutex;

/// The lease of test clients: etcd's shortest, so that the expiry cases take seconds.
pub const TTL: Duration = Duration::from_secs(2);

/// The request timeout of test clients.
pub const TIMEOUT: Duration = Duration::from_secs(1);

/// The settings of a test client; the members are filled in per client.
pub fn test_builder() -> EtcdLockProviderBuilder {
    EtcdLockProvider::builder().ttl(TTL).connect_timeout(TIMEOUT)
}

/// Runs the kit against an etcd member.
pub struct EtcdHarness {
    name: &'static str,
    upstream: SocketAddr,
    /// The dedicated member of an isolated harness, which may be restarted or paused.
    server: DedicatedServer<EtcdServer>,
    /// The clients' many-holds threshold, when not the default.
    many_holds: Option<usize>,
}

impl EtcdHarness {
    /// A harness on the test process's shared member (`LOCKKIT_ETCD_URL` or a spawned one).
    ///
    /// # Panics
    ///
    /// When no member can be started, with the fixture's message (which says how to install etcd).
    pub async fn shared() -> Self {
        let shared = EtcdServer::shared().await.unwrap_or_else(|error| panic!("the etcd tests need etcd: {error}"));
        let upstream = shared.upstream().await.unwrap_or_else(|error| panic!("the etcd tests need etcd: {error}"));
        Self { name: "etcd", upstream, server: DedicatedServer::none(), many_holds: None }
    }

    /// A harness on a dedicated member.
    pub async fn dedicated() -> Self {
        let server = match EtcdServer::start().await {
            Ok(server) => server,
            Err(error) => panic!("the etcd tests need etcd: {error}"),
        };
        Self {
            name: "etcd (dedicated)",
            upstream: server.addr(),
            server: DedicatedServer::new(server),
            many_holds: None,
        }
    }

    /// The same harness with clients that take the many-holds path (the prefix watch) from
    /// `holds` holds at once.
    pub fn with_many_holds_threshold(self, holds: usize) -> Self {
        Self {
            name: if self.server.get().is_some() { "etcd (dedicated, many holds)" } else { "etcd (many holds)" },
            many_holds: Some(holds),
            ..self
        }
    }

    /// The settings of this harness's clients; the members are filled in per client.
    pub fn builder(&self) -> EtcdLockProviderBuilder {
        match self.many_holds {
            Some(holds) => test_builder().many_holds_threshold(holds),
            None => test_builder(),
        }
    }

    /// The member's address, for admin connections that bypass every proxy.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// The dedicated member, if this harness has one.
    pub fn server(&self) -> Option<&Arc<Mutex<EtcdServer>>> {
        self.server.get()
    }

    /// A client with its own proxy and fault hooks, built from `builder` (the members are set here).
    pub async fn client_with(
        &self,
        builder: EtcdLockProviderBuilder,
    ) -> lockkit_core::Result<(EtcdLockProvider, Arc<ProxyFaults>)> {
        proxied("etcd", self.upstream, |proxy| builder.endpoints(proxy.to_string()).build()).await
    }

    /// A plain client of the member, bypassing every proxy.
    pub async fn admin(&self) -> Client {
        Client::connect([format!("http://{}", self.upstream)], None).await.unwrap()
    }

    /// The key of the current holder of lock `name` (the first-created key under its prefix).
    pub async fn holder_key(&self, name: &str) -> Option<Vec<u8>> {
        let prefix = test_builder().endpoints("unused:1").build().unwrap().lock_prefix(name).unwrap();
        let options = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1);
        let reply = self.admin().await.get(prefix, Some(options)).await.unwrap();
        reply.kvs().first().map(|kv| kv.key().to_vec())
    }

    /// Releases `guard`, a hold of lock `name`, and checks that no key is left under the
    /// lock's prefix.
    pub async fn release_leaving_no_key(&self, guard: lockkit_core::LockGuard, name: &str) {
        guard.release().await.unwrap();
        assert_eq!(self.keys_of(name).await, 0, "no key is left under {name:?}");
    }

    /// Every key under lock `name`'s prefix.
    pub async fn keys_of(&self, name: &str) -> usize {
        let prefix = test_builder().endpoints("unused:1").build().unwrap().lock_prefix(name).unwrap();
        let reply = self.admin().await.get(prefix, Some(GetOptions::new().with_prefix())).await.unwrap();
        reply.kvs().len()
    }
}

#[async_trait]
impl Harness for EtcdHarness {
    fn name(&self) -> &str {
        self.name
    }

    async fn client(&self) -> lockkit_core::Result<TestClient> {
        let (provider, faults) = self.client_with(self.builder()).await?;
        Ok(TestClient::new(provider, faults))
    }

    fn timing(&self) -> Timing {
        Timing::new().with_lease(TTL)
    }

    async fn unreachable_client(&self) -> Result<TestClient, Unsupported> {
        let provider = self.builder().endpoints(closed_port().to_string()).build().map_err(|_| Unsupported)?;
        Ok(TestClient::new(provider, Arc::new(NoFaults)))
    }

    async fn delete_record(&self, name: &str) -> FaultResult {
        let key = self.holder_key(name).await.expect("the held lock has a key");
        let deleted = self.admin().await.delete(key, None).await.unwrap().deleted();
        assert_eq!(deleted, 1, "the holder's key was deleted");
        Ok(())
    }

    async fn isolated(&self) -> Result<Arc<dyn Harness>, Unsupported> {
        let dedicated = Self::dedicated().await;
        Ok(Arc::new(match self.many_holds {
            Some(holds) => dedicated.with_many_holds_threshold(holds),
            None => dedicated,
        }))
    }

    async fn restart_store(&self) -> FaultResult {
        self.server.restart().await
    }

    async fn compact_history(&self) -> FaultResult {
        let mut admin = self.admin().await;
        let revision = admin.get("unused", None).await.unwrap().header().unwrap().revision();
        admin.compact(revision, None).await.unwrap();
        Ok(())
    }

    async fn pause_store(&self, paused: bool) -> FaultResult {
        self.server.pause(paused).await
    }

    fn child_env(&self) -> Result<Vec<(String, String)>, Unsupported> {
        Ok(vec![(ETCD_URL_ENV.to_owned(), format!("etcd://{}", self.upstream))])
    }

    async fn invalid_configs(&self) -> Vec<(String, lockkit_core::Result<()>)> {
        let url = format!("etcd://{}", self.upstream);
        let attempt = |what: &str, builder: EtcdLockProviderBuilder| (what.to_owned(), builder.build().map(drop));
        let from_url = |what: &str, url: String| {
            let built = lockkit_core::config::StoreUrl::parse(&url)
                .and_then(|url| EtcdLockProviderBuilder::from_url(&url))
                .and_then(EtcdLockProviderBuilder::build);
            (what.to_owned(), built.map(drop))
        };
        vec![
            attempt("no members", EtcdLockProvider::builder()),
            from_url("another scheme", format!("http://{}", self.upstream)),
            from_url(
                "a TLS certificate file that cannot be read",
                format!("etcds://{}?tls_root_certificate=/nonexistent/ca.pem", self.upstream),
            ),
            from_url(
                "TLS certificates with a plain etcd:// URL",
                format!("{url}?tls_root_certificate={}/Cargo.toml", env!("CARGO_MANIFEST_DIR")),
            ),
            from_url("members mixing etcd:// and etcds://", format!("{url},etcds://{}", self.upstream)),
            from_url("a TTL below etcd's shortest lease", format!("{url}?ttl=1s")),
            from_url("a TTL that is not whole seconds", format!("{url}?ttl=2500ms")),
            from_url("a TTL above a day", format!("{url}?ttl=5000000000000000h")),
            from_url("an unknown option", format!("{url}?lease=10s")),
            from_url("a prefix with an empty segment", format!("{url}/app//locks")),
            attempt("a prefix with a space", test_builder().endpoints(self.upstream.to_string()).prefix("my app")),
            attempt("a prefix ending in /", test_builder().endpoints(self.upstream.to_string()).prefix("app/")),
            attempt(
                "a drift of half the TTL",
                test_builder().endpoints(self.upstream.to_string()).drift(Duration::from_secs(1)),
            ),
            attempt(
                "a zero connect timeout",
                test_builder().endpoints(self.upstream.to_string()).connect_timeout(Duration::ZERO),
            ),
            attempt("port 0", test_builder().endpoints("127.0.0.1:0")),
        ]
    }
}
