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
use lockkit_testkit::FaultResult;
use lockkit_testkit::fixture::{ETCD_URL_ENV, EtcdServer, FixtureError};
use lockkit_testkit::proxied::{ProxiedHarness, ProxiedStore};

/// The lease of test clients: etcd's shortest, so that the expiry cases take seconds.
pub const TTL: Duration = Duration::from_secs(2);

/// The request timeout of test clients.
pub const TIMEOUT: Duration = Duration::from_secs(1);

/// The settings of a test client; the members are filled in per client.
pub fn test_builder() -> EtcdLockProviderBuilder {
    EtcdLockProvider::builder().ttl(TTL).connect_timeout(TIMEOUT)
}

/// Runs the kit against an etcd member: the shared one, or a dedicated one.
pub type EtcdHarness = ProxiedHarness<EtcdStore>;

/// The etcd member a harness is on, and how its clients are built.
pub struct EtcdStore {
    upstream: SocketAddr,
    setup: ClientSetup,
}

/// How a harness's clients are built besides the test settings.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClientSetup {
    /// The clients' many-holds threshold (the prefix watch from that many holds), when not
    /// the default.
    pub many_holds: Option<usize>,
}

impl ClientSetup {
    /// Clients that take the many-holds path (the prefix watch) from `holds` holds at once.
    pub fn many_holds(holds: usize) -> Self {
        Self { many_holds: Some(holds) }
    }
}

impl EtcdStore {
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

    /// Deletes the key of the holder of lock `name`, as an administrator would.
    ///
    /// # Panics
    ///
    /// When the lock has no holder.
    pub async fn delete_holder_key(&self, name: &str) {
        let key = self.holder_key(name).await.expect("the held lock has a key");
        let deleted = self.admin().await.delete(key, None).await.unwrap().deleted();
        assert_eq!(deleted, 1, "the holder's key was deleted");
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
impl ProxiedStore for EtcdStore {
    type Server = EtcdServer;
    type Setup = ClientSetup;
    type Builder = EtcdLockProviderBuilder;
    type Provider = EtcdLockProvider;

    const NAME: &'static str = "etcd";
    const URL_ENV: &'static str = ETCD_URL_ENV;
    const LEASE: Duration = TTL;

    fn at(upstream: SocketAddr, setup: ClientSetup) -> Self {
        Self { upstream, setup }
    }

    async fn start(_: &ClientSetup) -> Result<EtcdServer, FixtureError> {
        EtcdServer::start().await
    }

    fn setup_name(setup: &ClientSetup) -> Option<&'static str> {
        setup.many_holds.map(|_| "many holds")
    }

    fn isolated_setup(&self) -> ClientSetup {
        self.setup
    }

    fn test_builder(&self) -> EtcdLockProviderBuilder {
        match self.setup.many_holds {
            Some(holds) => test_builder().many_holds_threshold(holds),
            None => test_builder(),
        }
    }

    fn build(builder: EtcdLockProviderBuilder, address: SocketAddr) -> lockkit_core::Result<EtcdLockProvider> {
        builder.endpoints(address.to_string()).build()
    }

    fn url(address: SocketAddr) -> String {
        format!("etcd://{address}")
    }

    async fn delete_record(&self, name: &str) -> FaultResult {
        self.delete_holder_key(name).await;
        Ok(())
    }

    async fn compact_history(&self) -> FaultResult {
        let mut admin = self.admin().await;
        let revision = admin.get("unused", None).await.unwrap().header().unwrap().revision();
        admin.compact(revision, None).await.unwrap();
        Ok(())
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
