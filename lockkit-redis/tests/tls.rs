//! `rediss://` against a real redis-server with TLS, its certificates made for the test by
//! the `openssl` command-line tool.

#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use lockkit_core::Error;
use lockkit_redis::RedisLockProvider;
use lockkit_testkit::fixture::{RedisConfig, RedisServer, TestCertificates, free_port};
use support::wait_for_subscriber;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_urls_lock_over_tls_and_untrusted_servers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let certificates = TestCertificates::generate(dir.path(), "IP:127.0.0.1").await.unwrap_or_else(|e| panic!("{e}"));
    let tls_port = free_port().unwrap();
    let path = |path: std::path::PathBuf| path.to_string_lossy().into_owned();
    let config = RedisConfig {
        extra_args: vec![
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            path(certificates.server_certificate()),
            "--tls-key-file".into(),
            path(certificates.server_key()),
            "--tls-ca-cert-file".into(),
            path(certificates.ca()),
            "--tls-auth-clients".into(),
            "no".into(),
        ],
        ..RedisConfig::default()
    };
    let server = RedisServer::start_with(config).await.unwrap_or_else(|e| panic!("{e}"));
    let url = format!("rediss://127.0.0.1:{tls_port}/");
    let ca = std::fs::read(certificates.ca()).unwrap();

    let provider = RedisLockProvider::builder().url(&url).tls_root_certificate(ca).build().unwrap();
    let lock = provider.lock("tls/one").unwrap();
    let guard = lock.acquire().await.unwrap();
    let mut admin = redis::Client::open(server.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let waiter = provider.lock("tls/one").unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire_timeout(Duration::from_secs(5)).await });
    // Release only once the waiter listens, so that the pub/sub wake-up is what it gets.
    wait_for_subscriber(&mut admin, "lockkit:wake:*").await;
    guard.release().await.unwrap();
    // The waiter is woken over the TLS pub/sub connection.
    waiting.await.unwrap().unwrap().release().await.unwrap();

    // Without the private CA the server is not trusted: an error, not a hang.
    let untrusted = RedisLockProvider::builder().url(&url).build().unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), untrusted.lock("tls/one").unwrap().try_acquire())
        .await
        .expect("an untrusted server fails fast");
    assert!(matches!(outcome, Err(Error::Connection { .. } | Error::Backend { .. })), "{outcome:?}");
}
