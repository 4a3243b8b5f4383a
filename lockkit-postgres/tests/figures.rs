//! Figures of docs/PERFORMANCE.md that `lockkit bench` cannot give for PostgreSQL. Not a check
//! (it asserts no size); run it by hand:
//!
//! ```text
//! cargo test -p lockkit-postgres --test figures -- --ignored --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use lockkit_postgres::PostgresLockProvider;
use lockkit_testkit::fixture::PostgresServer;

/// The resident set of this process, from `/proc/self/status`.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Client memory per held lock in a fresh process (the bench's figure is blurred by the
/// phases before it): 10,000 holds taken 100 at a time, as `lockkit bench` takes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints figures; run by hand with --ignored --nocapture"]
async fn client_memory_per_held_lock() {
    const COUNT: usize = 10_000;
    let server = PostgresServer::start().await.unwrap();
    let provider = PostgresLockProvider::connect(&server.url()).await.unwrap();
    // Warm up: the connection, the renewal task, the allocator's first arenas.
    for i in 0..100 {
        provider.lock(&format!("warm/{i}")).unwrap().acquire().await.unwrap().release().await.unwrap();
    }
    let mut locks = Vec::with_capacity(COUNT);
    for i in 0..COUNT {
        locks.push(provider.lock(&format!("held/{i}")).unwrap());
    }
    let mut guards = Vec::with_capacity(COUNT);
    let before = resident_bytes().unwrap();
    for batch in locks.chunks(100) {
        for guard in futures_util::future::join_all(batch.iter().map(|lock| lock.acquire())).await {
            guards.push(guard.unwrap());
        }
    }
    let after = resident_bytes().unwrap();
    assert_eq!(provider.renewing(), COUNT);
    println!(
        "{COUNT} held locks: VmRSS {} KiB -> {} KiB, {} B per held lock (handles made before)",
        before / 1024,
        after / 1024,
        after.saturating_sub(before) / COUNT as u64
    );
    futures_util::future::join_all(guards.into_iter().map(|guard| guard.release())).await;
}

/// Would a small pool of command connections pay? A provider has one command connection,
/// which runs its statements one after another. A pool of N is what N providers are, so this
/// compares 2,000 acquire+release cycles of distinct locks started at once on one provider with
/// the same spread over 2, 4 and 8 providers; and 8 tasks contending for one lock through one
/// shared provider with the same through a provider each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints figures; run by hand with --ignored --nocapture"]
async fn one_command_connection_against_a_pool() {
    use std::time::{Duration, Instant};
    const LOCKS: usize = 2_000;
    let server = PostgresServer::start().await.unwrap();
    let mut providers = Vec::new();
    for _ in 0..8 {
        let provider = PostgresLockProvider::connect(&server.url()).await.unwrap();
        providers.push(provider);
    }
    // The first pass warms the server up (its figure is not comparable); then alternating.
    for connections in [1, 1, 8, 2, 4, 8, 1] {
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..LOCKS {
            let lock = providers[i % connections].lock(&format!("many/{connections}/{i}/{started:?}")).unwrap();
            tasks.spawn(async move { lock.acquire().await.unwrap().release().await.unwrap() });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
        let elapsed = started.elapsed();
        println!(
            "{LOCKS} locks at once over {connections} connection(s): {:.2} s, {:.0} µs per lock",
            elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e6 / LOCKS as f64
        );
    }
    for shared in [true, false, true] {
        let name = format!("contended/{shared}/{:?}", Instant::now());
        let until = Instant::now() + Duration::from_secs(3);
        let mut tasks = tokio::task::JoinSet::new();
        for client in 0..8 {
            let provider = if shared { providers[0].clone() } else { providers[client].clone() };
            let name = name.clone();
            tasks.spawn(async move {
                let lock = provider.lock(&name).unwrap();
                let mut waits = Vec::new();
                while Instant::now() < until {
                    let asked = Instant::now();
                    let guard = lock.acquire().await.unwrap();
                    waits.push(asked.elapsed());
                    guard.release().await.unwrap();
                }
                waits
            });
        }
        let mut waits = Vec::new();
        while let Some(done) = tasks.join_next().await {
            waits.extend(done.unwrap());
        }
        waits.sort();
        let p50 = waits.get(waits.len() / 2).copied().unwrap_or_default();
        let max = waits.last().copied().unwrap_or_default();
        println!(
            "8 tasks on one lock through {}: {:.0} acquisitions/s, wait p50 {:.2} ms, max {:.2} ms",
            if shared { "one shared provider" } else { "a provider each" },
            waits.len() as f64 / 3.0,
            p50.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
    }
}
