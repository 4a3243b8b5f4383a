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
