//! What the process chaos runs of this crate share: how every worker connects, and the stores
//! of a test's own (which the run pauses and restarts) with the URLs that give their lease or
//! session.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use lockkit::LockProvider;
use lockkit_testkit::fixture::{Persistence, PostgresServer, RedisConfig, RedisServer, ZkServer};

/// How workers connect: any URL the facade knows.
pub async fn connect(url: String) -> lockkit::Result<LockProvider> {
    lockkit::connect(&url).await
}

/// A `redis-server` of the test's own with `persistence`.
pub async fn redis_with(persistence: Persistence) -> RedisServer {
    let config = RedisConfig { persistence, ..RedisConfig::default() };
    RedisServer::start_with(config).await.unwrap_or_else(|error| panic!("{error}"))
}

/// A PostgreSQL server of the test's own.
pub async fn postgres() -> PostgresServer {
    PostgresServer::start().await.unwrap_or_else(|error| panic!("{error}"))
}

/// A ZooKeeper server of the test's own.
pub async fn zookeeper() -> ZkServer {
    ZkServer::start().await.unwrap_or_else(|error| panic!("{error}"))
}

/// `url` (with no query) with the lease `lease`.
pub fn with_lease(url: &str, lease: Duration) -> String {
    format!("{url}?lease={}ms", lease.as_millis())
}

/// The URL of ZooKeeper on the servers of `connect` (a connect string) with the session
/// timeout `session`.
pub fn zk_url(connect: &str, session: Duration) -> String {
    format!("zk://{connect}?session_timeout={}ms", session.as_millis())
}
