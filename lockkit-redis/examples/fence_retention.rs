//! What distinct lock names leave behind: acquires and releases `--locks N` distinct locks
//! once each (default 100,000; 1,000 at a time), then counts the provider's keys on the server
//! every 250 ms until at most 1 % of N are left, on a private redis-server (or
//! `LOCKKIT_REDIS_URL`):
//! `cargo run --release -p lockkit-redis --example fence_retention [-- --locks N --retention 5s]`.
//!
//! The fence counters expire `fence_retention` after their lock's last grant (here 5 s by
//! default, with a 2 s lease; the provider's default is ten leases, at least a minute).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, clippy::print_stdout)]

use std::time::{Duration, Instant};

#[path = "../tests/support/keys.rs"]
mod keys;

use keys::keys_under;
use lockkit_redis::RedisLockProvider;
use lockkit_testkit::fixture::RedisServer;

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let locks: usize = arg("--locks").and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let retention = arg("--retention")
        .and_then(|d| lockkit_core::config::parse_duration(&d).ok())
        .unwrap_or(Duration::from_secs(5));
    // A private server of the test kit's, or the one `LOCKKIT_REDIS_URL` names.
    let url = RedisServer::shared().await.unwrap_or_else(|e| panic!("{e}")).url();
    let mut admin = redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let prefix = format!("retention-{}", uuid::Uuid::new_v4().simple());
    let provider = RedisLockProvider::builder()
        .url(&url)
        .key_prefix(&prefix)
        .lease(Duration::from_secs(2))
        .fence_retention(retention)
        .build()
        .unwrap();
    let started = Instant::now();
    for first in (0..locks).step_by(1000) {
        let cycles = (first..(first + 1000).min(locks)).map(|i| {
            let lock = provider.lock(&format!("orders/{i}")).unwrap();
            async move { lock.acquire().await.unwrap().release().await.unwrap() }
        });
        futures_util::future::join_all(cycles).await;
    }
    let released = Instant::now();
    println!("{locks} locks acquired and released once in {:.1} s", (released - started).as_secs_f64());
    let mut last = usize::MAX;
    loop {
        let left = keys_under(&mut admin, &prefix).await;
        let since = released.elapsed();
        if left != last {
            println!(
                "{:>6.2} s after the last release: {left} keys ({:.2} %)",
                since.as_secs_f64(),
                left as f64 * 100.0 / locks as f64
            );
            last = left;
        }
        if left * 100 <= locks {
            println!("at most 1 % left {:.2} s after the last release (retention {retention:?})", since.as_secs_f64());
            break;
        }
        assert!(since < retention * 4 + Duration::from_secs(30), "the keys did not expire");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
