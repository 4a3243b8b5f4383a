//! The conformance harness of the Redis backend, shared by the test files: every client is a
//! provider of its own behind a fault proxy of its own, in front of a real `redis-server`.

#![allow(dead_code, unused_imports, unreachable_pub, missing_docs, clippy::unwrap_used, clippy::expect_used)]

pub mod keys;
pub mod multi_host;

pub use lockkit_testkit::wait::{eventually, within};

pub use lockkit_testkit::proxy::{ProxyFaults, closed_port};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::LockName;
use lockkit_redis::{RedisLockProvider, RedisLockProviderBuilder};
use lockkit_testkit::FaultResult;
use lockkit_testkit::fixture::{FixtureError, Persistence, RedisConfig, RedisServer};
use lockkit_testkit::proxied::{ProxiedHarness, ProxiedStore};

/// A bound for things that take a few round trips on a loaded machine.
pub const OPERATION: Duration = Duration::from_secs(3);

/// The lease of test clients: short, so that the expiry cases take seconds, and long enough
/// for a loaded two-core machine.
pub const LEASE: Duration = Duration::from_secs(2);
pub const RENEW_EVERY: Duration = Duration::from_millis(500);
pub const RESPONSE_TIMEOUT: Duration = Duration::from_millis(400);
pub const DRIFT: Duration = Duration::from_millis(50);

/// A client on the shared server whose requests arrive but whose replies come back after its
/// response timeout (a proxy delays them 300 ms): a reply lost on a slow link, for the lock
/// name `name`.
pub struct LateReplies {
    pub client: RedisLockProvider,
    faults: Arc<ProxyFaults>,
    /// A plain connection to the server.
    pub admin: redis::aio::MultiplexedConnection,
    /// The record key of the name.
    key: String,
}

impl LateReplies {
    pub async fn new(name: &str) -> Self {
        let harness = RedisHarness::shared().await;
        let (client, faults) = harness.client_with(test_builder()).await.unwrap();
        client.ping().await.unwrap();
        let key = client.record_key(&LockName::new(name).unwrap());
        faults.0.set_latency(Duration::from_millis(300));
        Self { client, faults, admin: harness.admin().await, key }
    }

    /// Waits until the name's record exists on the server (`what`: the request arrived), then
    /// lets the replies through at once again.
    pub async fn heal_once_recorded(&self, what: &str) {
        eventually(OPERATION, what, || {
            let (mut admin, key) = (self.admin.clone(), self.key.clone());
            async move { redis::cmd("EXISTS").arg(&key).query_async::<i64>(&mut admin).await.unwrap() == 1 }
        })
        .await;
        self.faults.0.set_latency(Duration::ZERO);
    }

    /// The name's fence counter: the token of its last grant.
    pub async fn counter(&self) -> u64 {
        redis::cmd("GET").arg(format!("{}:fence", self.key)).query_async(&mut self.admin.clone()).await.unwrap()
    }
}

/// The message of the `InvalidConfig` error with which `provider` refuses to acquire `name`:
/// a server that is not what the URL says is found out when the connection is made.
pub async fn refused_config(provider: &RedisLockProvider, name: &str) -> String {
    let error =
        within(OPERATION, "a refused acquisition", provider.lock(name).unwrap().try_acquire()).await.unwrap_err();
    assert!(matches!(error, lockkit_core::Error::InvalidConfig { .. }), "{error:?}");
    error.to_string()
}

/// The settings of a test client; `url` is filled in per client.
pub fn test_builder() -> RedisLockProviderBuilder {
    RedisLockProvider::builder().lease(LEASE).renew_every(RENEW_EVERY).response_timeout(RESPONSE_TIMEOUT).drift(DRIFT)
}

/// Runs the kit against a Redis server: the shared one, or a dedicated one
/// (`RedisHarness::dedicated_with(persistence)`).
pub type RedisHarness = ProxiedHarness<RedisStore>;

/// The Redis server a harness is on.
pub struct RedisStore {
    upstream: SocketAddr,
}

impl RedisStore {
    /// A plain connection to the server, bypassing every proxy.
    pub async fn admin(&self) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(format!("redis://{}/", self.upstream)).unwrap();
        client.get_multiplexed_async_connection().await.unwrap()
    }
}

#[async_trait]
impl ProxiedStore for RedisStore {
    type Server = RedisServer;
    type Setup = Persistence;
    type Builder = RedisLockProviderBuilder;
    type Provider = RedisLockProvider;

    const NAME: &'static str = "redis";
    const URL_ENV: &'static str = lockkit_testkit::fixture::REDIS_URL_ENV;
    const LEASE: Duration = LEASE;

    fn at(upstream: SocketAddr, _: Persistence) -> Self {
        Self { upstream }
    }

    async fn start(persistence: &Persistence) -> Result<RedisServer, FixtureError> {
        RedisServer::start_with(RedisConfig { persistence: *persistence, ..RedisConfig::default() }).await
    }

    fn test_builder(&self) -> RedisLockProviderBuilder {
        test_builder()
    }

    fn build(builder: RedisLockProviderBuilder, address: SocketAddr) -> lockkit_core::Result<RedisLockProvider> {
        builder.url(Self::url(address)).build()
    }

    fn url(address: SocketAddr) -> String {
        format!("redis://{address}/")
    }

    /// An isolated store keeps every acknowledged write across its restarts.
    fn isolated_setup(&self) -> Persistence {
        Persistence::Aof
    }

    async fn delete_record(&self, name: &str) -> FaultResult {
        // Whichever kind holds the name: the mutex record, the writer record, the readers or
        // the permit holders.
        let keys = hold_keys(name);
        let deleted: i64 = redis::cmd("DEL").arg(&keys).query_async(&mut self.admin().await).await.unwrap();
        assert!(deleted >= 1, "a record of the held lock exists among {keys:?}");
        Ok(())
    }

    async fn invalid_configs(&self) -> Vec<(String, lockkit_core::Result<()>)> {
        let url = Self::url(self.upstream);
        let attempt = |what: &str, builder: RedisLockProviderBuilder| (what.to_owned(), builder.build().map(drop));
        let from_url = |what: &str, query: &str| {
            let built = lockkit_core::config::StoreUrl::parse(&format!("{url}?{query}"))
                .and_then(|url| RedisLockProviderBuilder::from_url(&url))
                .and_then(RedisLockProviderBuilder::build);
            (what.to_owned(), built.map(drop))
        };
        vec![
            attempt("no URL", RedisLockProvider::builder()),
            attempt("an unparseable URL", RedisLockProvider::builder().url("redis://host:port:what")),
            attempt("an unknown scheme", RedisLockProvider::builder().url("http://127.0.0.1:6379")),
            attempt("a lease below the floor", RedisLockProvider::builder().url(&url).lease(Duration::from_millis(5))),
            from_url("a lease of 5000000000000000 hours", "lease=5000000000000000h"),
            from_url("an unknown option", "ttl=10s"),
            from_url("a claim window longer than the lease", "lease=1s&claim_window=2s"),
            attempt(
                "renewal slower than the lease",
                RedisLockProvider::builder()
                    .url(&url)
                    .lease(Duration::from_secs(1))
                    .renew_every(Duration::from_secs(2)),
            ),
            attempt("a zero renewal interval", RedisLockProvider::builder().url(&url).renew_every(Duration::ZERO)),
            attempt("a zero response timeout", RedisLockProvider::builder().url(&url).response_timeout(Duration::ZERO)),
            attempt(
                "a drift margin of half the lease",
                RedisLockProvider::builder().url(&url).lease(Duration::from_secs(2)).drift(Duration::from_secs(1)),
            ),
            attempt("a key prefix with a brace", RedisLockProvider::builder().url(&url).key_prefix("app{1}")),
        ]
    }
}

/// The keys that record the holds of lock `name` with the default prefix: the mutex record, the
/// writer record, the readers and the permit holders.
pub fn hold_keys(name: &str) -> [String; 4] {
    let record = test_builder().url("redis://unused/").build().unwrap().record_key(&LockName::new(name).unwrap());
    [format!("{record}:writer"), format!("{record}:readers"), format!("{record}:permits"), record]
}

/// Waits (up to five seconds) until some connection is subscribed to a channel that matches
/// `pattern`; a fair provider's waiters listen on `<prefix>:wake:<provider id>`.
pub async fn wait_for_subscriber(admin: &mut redis::aio::MultiplexedConnection, pattern: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let channels: Vec<String> = redis::cmd("PUBSUB").arg("CHANNELS").arg(pattern).query_async(admin).await.unwrap();
        if !channels.is_empty() {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "nobody subscribed to {pattern} within 5 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A dedicated server that publishes keyspace events for every class of key event.
pub async fn server_with_keyspace_events() -> RedisHarness {
    let harness = RedisHarness::dedicated_with(Persistence::None).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("KA")
        .query_async(&mut harness.admin().await)
        .await
        .unwrap();
    harness
}
