//! `lockkit::connect` against real servers: the URL picks the backend and its options.

#![cfg(all(feature = "redis", feature = "zk"))]
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use lockkit::{Error, connect};
use lockkit_testkit::fixture::{RedisSentinels, RedisServer, ZkServer};

mod excludes;
mod refused;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_urls_carry_their_options() {
    let server = RedisServer::shared().await.unwrap_or_else(|e| panic!("{e}"));
    let url = format!(
        "{}?lease=5s&renew_every=1s&key_prefix=connect-test&response_timeout=1s",
        server.url().trim_end_matches('/')
    );
    let provider = connect(&url).await.unwrap();
    assert!(provider.capabilities().lease);
    let guard = provider.lock("connect/redis").unwrap().acquire().await.unwrap();
    let left = guard.valid_until().unwrap().saturating_duration_since(std::time::Instant::now());
    assert!(left > Duration::from_secs(4) && left <= Duration::from_secs(5), "the 5 s lease: {left:?} left");
    let second = connect(&url).await.unwrap();
    excludes::holder_seen_by(&second, &guard, "connect/redis").await;
    excludes::release_seen_by(&provider, guard, "connect/redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sentinel_urls_reach_the_primary_the_sentinels_name() {
    let sentinels = RedisSentinels::start().await.unwrap_or_else(|e| panic!("{e}"));
    let provider = connect(&format!("{}?lease=5s&replicas=1", sentinels.url())).await.unwrap();
    let guard = provider.lock("connect/sentinel").unwrap().acquire().await.unwrap();
    // The hold is on the primary the sentinels name.
    let primary = sentinels.primary_addr().await.unwrap();
    let direct = connect(&format!("redis://{primary}/")).await.unwrap();
    assert!(direct.lock("connect/sentinel").unwrap().try_acquire().await.unwrap().is_none());
    guard.release().await.unwrap();
    let unknown = connect(&sentinels.url().replace("/lockkit", "/other")).await.err().unwrap();
    assert!(unknown.to_string().contains("\"other\""), "{unknown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_redis_is_a_retryable_error_that_names_the_backend() {
    let error = refused::unreachable(|port| format!("redis://127.0.0.1:{port}/")).await;
    assert!(error.is_retryable() && error.to_string().contains("redis"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_urls_carry_their_options() {
    let server = ZkServer::shared().await.unwrap_or_else(|e| panic!("{e}"));
    let url = format!("zk://{}?session_timeout=4s&base_path=/connect-test", server.connect_string());
    let provider = connect(&url).await.unwrap();
    assert!(provider.capabilities().fair);
    let guard = provider.lock("connect/zk").unwrap().acquire().await.unwrap();
    let second = connect(&url).await.unwrap();
    excludes::holder_seen_by(&second, &guard, "connect/zk").await;
    excludes::release_seen_by(&second, guard, "connect/zk").await;
    let bad = connect(&format!("zk://{}?session_timeout=0s", server.connect_string())).await;
    assert!(matches!(bad, Err(Error::InvalidConfig { .. })), "a zero session timeout is refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zk_url_where_nothing_listens_fails_fast() {
    // A port nothing can take while the test runs: a free port picked and let go could be
    // taken by a server another test starts meanwhile, which then accepts the connection.
    let (_bound, port) = refused::refused_port();
    let started = std::time::Instant::now();
    let error = connect(&format!("zk://127.0.0.1:{port}?session_timeout=10s")).await.err().unwrap();
    assert!(error.is_retryable() && error.to_string().contains("accepts connections"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(3), "failed after {:?}, not the 10 s session", started.elapsed());
}

/// A provider from `connect` turns back into its backend's own provider, extras included;
/// one of another backend is handed back unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connected_provider_reaches_its_backends_extras() {
    let redis = RedisServer::shared().await.unwrap_or_else(|e| panic!("{e}"));
    let zk = ZkServer::shared().await.unwrap_or_else(|e| panic!("{e}"));
    let provider = connect(&format!("{}?key_prefix=extras", redis.url().trim_end_matches('/'))).await.unwrap();
    let guard = provider.lock("connect/extras").unwrap().acquire().await.unwrap();
    let provider = match lockkit::zk::ZkLockProvider::try_from(provider) {
        Ok(_) => panic!("a Redis provider is not a ZooKeeper one"),
        Err(provider) => provider,
    };
    let own = lockkit::redis::RedisLockProvider::try_from(provider).unwrap();
    let key = own.record_key(guard.name());
    assert!(key.starts_with("extras") && key.contains("connect/extras"), "the held record is {key}");
    own.ping().await.unwrap();
    guard.release().await.unwrap();
    let zk = connect(&format!("zk://{}?base_path=/extras", zk.connect_string())).await.unwrap();
    let own = lockkit::zk::ZkLockProvider::try_from(zk).unwrap();
    assert!(own.lock_path("a").unwrap().starts_with("/extras/"), "{}", own.lock_path("a").unwrap());
}
