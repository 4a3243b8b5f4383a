//! The conformance harness of the ZooKeeper backend, and helpers shared by its fault tests.
//!
//! Every client is a `ZkLockProvider` with a session of its own, connected through a
//! `FaultProxy` of its own in front of the server, so that kill, blackhole and cut act on that
//! client only.
#![allow(dead_code, unused_imports, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

pub use lockkit_testkit::proxy::ProxyFaults;
pub use lockkit_testkit::wait::eventually;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::LockName;
use lockkit_testkit::fixture::DedicatedServer;
use lockkit_testkit::fixture::zk::ZkServer;
use lockkit_testkit::proxy::{FaultProxy, closed_port, proxied, proxied_test_client};
use lockkit_testkit::{FaultResult, Harness, NoFaults, TestClient, Timing, Unsupported};
use lockkit_zk::{ZkLockProvider, ZkLockProviderBuilder};
use zookeeper_client as zk;

/// The session timeout of test clients: short, so loss cases run fast, and well above the
/// fixture's `minSessionTimeout` (1 s, two ticks of 500 ms).
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(3);

/// The harness: a ZooKeeper server (shared or its own), an admin client and a base path of
/// its own.
/// The base path a child process of a cross-process case uses (set by `child_env`).
const BASE_ENV: &str = "LOCKKIT_ZK_TEST_BASE";

pub struct ZkHarness {
    store: DedicatedServer<ZkServer>,
    upstream: SocketAddr,
    connect_string: String,
    base: String,
    admin: zk::Client,
    /// The clients' many-holds threshold, when not the default.
    many_holds: Option<usize>,
}

impl ZkHarness {
    /// A harness on the process-wide shared server (or `LOCKKIT_ZK_ADDR`).
    pub async fn shared() -> ZkHarness {
        let shared = ZkServer::shared().await.expect("the shared ZooKeeper server starts");
        let connect_string = shared.connect_string();
        Self::new(DedicatedServer::none(), connect_string).await
    }

    /// A harness on a server of its own.
    pub async fn dedicated() -> ZkHarness {
        let server = ZkServer::start().await.expect("a dedicated ZooKeeper server starts");
        let connect_string = server.connect_string();
        Self::new(DedicatedServer::new(server), connect_string).await
    }

    async fn new(store: DedicatedServer<ZkServer>, connect_string: String) -> ZkHarness {
        let first = connect_string.split(',').next().unwrap_or_default().to_owned();
        let upstream = first.to_socket_addrs().expect("resolve the server").next().expect("an address");
        let admin = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(&connect_string)
            .await
            .expect("the admin client connects");
        // A child process of a cross-process case joins its parent's base path.
        let base = std::env::var(BASE_ENV)
            .ok()
            .filter(|base| !base.is_empty())
            .unwrap_or_else(|| format!("/lockkit-test-{}", uuid::Uuid::new_v4().simple()));
        ZkHarness { store, upstream, connect_string, base, admin, many_holds: None }
    }

    /// The same harness with clients that take the many-holds path (the recursive watch on
    /// the base path) from `holds` holds at once.
    pub fn with_many_holds_threshold(self, holds: usize) -> ZkHarness {
        ZkHarness { many_holds: Some(holds), ..self }
    }

    /// The base path of this harness's locks.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// A client with a direct connection (no proxy) to the server.
    pub fn admin(&self) -> &zk::Client {
        &self.admin
    }

    /// The server's address.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// The connect string of the server.
    pub fn connect_string(&self) -> &str {
        &self.connect_string
    }

    /// A builder for a client through `proxy`, with the harness's base path and timeout.
    pub fn builder_via(&self, proxy: &FaultProxy) -> ZkLockProviderBuilder {
        self.builder_at(proxy.addr())
    }

    /// A builder for a client of the server at `addr`, with the harness's base path and timeout.
    pub fn builder_at(&self, addr: SocketAddr) -> ZkLockProviderBuilder {
        let builder = ZkLockProvider::builder()
            .connect_string(addr.to_string())
            .base_path(self.base.clone())
            .session_timeout(SESSION_TIMEOUT);
        match self.many_holds {
            Some(holds) => builder.many_holds_threshold(holds),
            None => builder,
        }
    }

    /// A new client behind a proxy of its own, returned with its proxy's fault hooks. The
    /// client is built lazily: its session opens at its first use.
    pub async fn proxied_client(&self) -> (ZkLockProvider, Arc<ProxyFaults>) {
        proxied("zk", self.upstream, |proxy| self.builder_at(proxy).build()).await.expect("a proxied client")
    }

    /// The znode of lock `name`.
    pub fn lock_znode(&self, name: &str) -> String {
        format!("{}/{}", self.base, lockkit_zk::encode_name(&LockName::new(name).expect("a valid name")))
    }

    /// The contender nodes of lock `name`, in queue order.
    pub async fn contenders(&self, name: &str) -> Vec<String> {
        match self.admin.list_children(&self.lock_znode(name)).await {
            Ok(mut children) => {
                children.sort_by_key(|c| c.rsplit('-').next().and_then(|s| s.parse::<i64>().ok()).unwrap_or(i64::MAX));
                children
            }
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => panic!("list the contenders of {name}: {e}"),
        }
    }
}

#[async_trait]
impl Harness for ZkHarness {
    fn name(&self) -> &str {
        if self.many_holds.is_some() { "zk (many holds)" } else { "zk" }
    }

    async fn client(&self) -> lockkit_core::Result<TestClient> {
        proxied_test_client("zk", self.upstream, |proxy| self.builder_at(proxy).build()).await
    }

    fn timing(&self) -> Timing {
        Timing::new().with_lease(SESSION_TIMEOUT).with_operation(Duration::from_secs(5))
    }

    async fn unreachable_client(&self) -> Result<TestClient, Unsupported> {
        let provider = self.builder_at(closed_port()).build().map_err(|_| Unsupported)?;
        Ok(TestClient::new(provider, Arc::new(NoFaults)))
    }

    async fn delete_record(&self, name: &str) -> FaultResult {
        let Some(holder) = self.contenders(name).await.into_iter().next() else { return Ok(()) };
        let path = format!("{}/{holder}", self.lock_znode(name));
        match self.admin.delete(&path, None).await {
            Ok(()) | Err(zk::Error::NoNode) => Ok(()),
            Err(e) => panic!("delete {path}: {e}"),
        }
    }

    async fn isolated(&self) -> Result<Arc<dyn Harness>, Unsupported> {
        let dedicated = ZkHarness::dedicated().await;
        Ok(Arc::new(match self.many_holds {
            Some(holds) => dedicated.with_many_holds_threshold(holds),
            None => dedicated,
        }))
    }

    async fn restart_store(&self) -> FaultResult {
        self.store.restart().await
    }

    async fn pause_store(&self, paused: bool) -> FaultResult {
        self.store.pause(paused).await
    }

    fn child_env(&self) -> Result<Vec<(String, String)>, Unsupported> {
        Ok(vec![
            (lockkit_testkit::fixture::ZK_ADDR_ENV.to_owned(), self.connect_string.clone()),
            (BASE_ENV.to_owned(), self.base.clone()),
        ])
    }

    async fn invalid_configs(&self) -> Vec<(String, lockkit_core::Result<()>)> {
        let good = || ZkLockProvider::builder().connect_string(self.connect_string.clone());
        let url = |query: &str| {
            let url = format!("zk://{}/?{query}", self.connect_string);
            lockkit_core::config::StoreUrl::parse(&url).and_then(|url| ZkLockProviderBuilder::from_url(&url))
        };
        let built = |builder: lockkit_core::Result<ZkLockProviderBuilder>| builder.and_then(|b| b.build()).map(drop);
        vec![
            ("an empty host list".to_owned(), built(Ok(ZkLockProvider::builder().connect_string("/app")))),
            ("a bad port".to_owned(), built(Ok(ZkLockProvider::builder().connect_string("127.0.0.1:70000")))),
            (
                "a URL given as a connect string".to_owned(),
                built(Ok(ZkLockProvider::builder().connect_string("redis://127.0.0.1:6379"))),
            ),
            ("a relative chroot".to_owned(), built(Ok(good().chroot("app")))),
            ("a zero session timeout".to_owned(), built(Ok(good().session_timeout(Duration::ZERO)))),
            ("a session timeout beyond ZooKeeper's 32-bit field".to_owned(), built(url("session_timeout=600h"))),
            ("a session timeout far beyond any clock".to_owned(), built(url("session_timeout=5000000000000000h"))),
            ("a zero connect timeout".to_owned(), built(Ok(good().connect_timeout(Duration::ZERO)))),
            ("a relative base path".to_owned(), built(Ok(good().base_path("locks")))),
            (
                "a drift as long as the session".to_owned(),
                built(Ok(good().session_timeout(SESSION_TIMEOUT).drift(SESSION_TIMEOUT))),
            ),
            (
                "a creator-only ACL without credentials".to_owned(),
                built(Ok(good().acl(lockkit_zk::LockAcl::CreatorOnly))),
            ),
            ("an old option name".to_owned(), built(url("ttl=10s"))),
        ]
    }
}

/// The harness shared by the tests of one test binary, on the kit's shared runtime.
pub async fn shared_harness() -> &'static ZkHarness {
    static HARNESS: tokio::sync::OnceCell<ZkHarness> = tokio::sync::OnceCell::const_new();
    HARNESS.get_or_init(ZkHarness::shared).await
}

/// Runs a test body on the kit's shared runtime (where the shared fixtures and proxies live),
/// failing it after two minutes.
pub fn run<F: std::future::Future<Output = ()>>(body: F) {
    lockkit_testkit::runtime().block_on(async {
        if tokio::time::timeout(Duration::from_secs(120), body).await.is_err() {
            panic!("the test did not finish within 120 s");
        }
    });
}

/// A fresh lock name.
pub fn fresh_name(test: &str) -> String {
    format!("zk-faults/{test}/{}", uuid::Uuid::new_v4().simple())
}
