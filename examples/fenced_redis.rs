//! Fencing end to end on Redis: a holder stalls past its lease, the next holder writes, and
//! Redis itself refuses the stale holder's write (one script: check, then `SET`).
//!
//! `cargo run -p lockkit-examples --features fence-redis --example fenced_redis`
//!
//! The lock and the data live in one redis-server (one the testkit starts, or
//! `LOCKKIT_REDIS_URL`). The first holder's stall is its maximum hold running out while it
//! sleeps: renewal stops, its lease expires, as in a long GC pause.

use std::time::Duration;

use lockkit::AcquireOptions;
use lockkit::fence::FenceError;
use lockkit::fence::redis::{RedisFence, redis};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The server LOCKKIT_REDIS_URL names, else one started for this run.
    let url = lockkit_testkit::fixture::RedisServer::shared().await?.url();
    let data = RedisFence::new(redis::Client::open(url.as_str())?.get_multiplexed_async_connection().await?);
    let separator = if url.contains('?') { '&' } else { '?' };
    let locks = lockkit::connect(&format!("{url}{separator}lease=1s")).await?;
    let lock = locks.lock("orders/42")?;
    let key = "orders:42:status";

    // Holder 1 takes the lock for at most 500 ms, writes once, then stalls for 3 s.
    let options = AcquireOptions::default().with_max_hold(Duration::from_millis(500));
    let Some(first) = lock.acquire_with(options).await? else { return Err("not granted".into()) };
    let stale_fence = first.fence();
    data.set(key, &stale_fence, "paid").await?;
    println!("holder 1 (token {}) wrote 'paid', then stalls", stale_fence.token());
    let stall = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        first
    });

    // Holder 2 gets the lock once holder 1's lease ran out, and writes.
    let second = lock.acquire().await?;
    data.set(key, &second.fence(), "shipped").await?;
    println!("holder 2 (token {}) got the lock and wrote 'shipped'", second.token());

    // Holder 1 wakes up and, ignoring its loss signal, writes anyway: Redis refuses.
    let first = stall.await?;
    println!("holder 1 wakes up; its guard says held = {}", first.is_held());
    match data.set(key, &stale_fence, "cancelled").await {
        Err(FenceError::Stale { token, highest, .. }) => {
            println!("Redis refused holder 1's write: token {token} < {highest}, nothing written");
        }
        other => println!("unexpected: {other:?}"),
    }
    let status: Option<String> = data.get(key, &second.fence()).await?;
    println!("the order is {status:?}");
    second.release().await?;
    drop(first);
    Ok(())
}
