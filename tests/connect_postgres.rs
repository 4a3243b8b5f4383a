//! `lockkit::connect` against a real PostgreSQL server: `postgres://` and `postgresql://` reach
//! the backend of feature `postgres` with their options.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use lockkit::{Error, connect};
use lockkit_testkit::fixture::PostgresServer;

mod excludes;
mod refused;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_urls_carry_their_options() {
    let server = PostgresServer::shared().await.unwrap_or_else(|e| panic!("{e}"));
    let url = format!("{}?lease=5s&renew_every=1s&schema=connect_test&response_timeout=1s", server.url());
    let provider = connect(&url).await.unwrap();
    assert!(provider.capabilities().lease && provider.capabilities().fair);
    let guard = provider.lock("connect/postgres").unwrap().acquire().await.unwrap();
    let left = guard.valid_until().unwrap().saturating_duration_since(std::time::Instant::now());
    assert!(left > Duration::from_secs(4) && left <= Duration::from_secs(5), "the 5 s lease: {left:?} left");
    let second = connect(&url.replacen("postgres://", "postgresql://", 1)).await.unwrap();
    excludes::holder_seen_by(&second, &guard, "connect/postgres").await;
    excludes::release_seen_by(&provider, guard, "connect/postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_postgres_urls_say_what_to_change() {
    let error = refused::unreachable(|port| format!("postgres://app@127.0.0.1:{port}/db")).await;
    assert!(error.is_retryable() && error.to_string().contains("postgres"), "{error}");
    let (_bound, port) = refused::refused_port();
    let Err(Error::InvalidConfig { message, .. }) = connect(&format!("postgres://app@127.0.0.1:{port}")).await else {
        panic!("a URL without a database is InvalidConfig")
    };
    assert!(message.contains("names no database"), "{message}");
}
