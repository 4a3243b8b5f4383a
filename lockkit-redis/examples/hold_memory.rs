//! What one Redis hold keeps on the client (issue 36):
//! `cargo run --release -p lockkit-redis --example hold_memory [-- --holds 10000 --exit-held]`.
//!
//! On a private redis-server (or `LOCKKIT_REDIS_URL`), one provider with a 3 s lease takes
//! `--holds` locks, 100 in flight, after a warm-up round of 100 taken and released (as
//! `lockkit bench --holds` does). It prints the growth of resident memory per hold right after
//! the acquisitions and again after a lease of renewals. With `--exit-held` it then exits with
//! the holds still held, so that a heap profiler's report of the memory left at exit shows
//! where each byte of a hold is allocated: `heaptrack` it, then
//! `heaptrack_print --print-leaks yes FILE` (the workspace forbids the unsafe code of a
//! counting allocator).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, clippy::print_stdout)]

mod support;

use std::time::Duration;

use futures_util::StreamExt as _;
use lockkit_redis::RedisLockProvider;
use lockkit_testkit::fixture::RedisServer;

/// The process's resident memory (`VmRSS` of /proc/self/status), in bytes.
fn resident_bytes() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: i64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

fn main() {
    let mut holds = 10_000;
    let mut exit_held = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--holds" => holds = support::number("--holds", args.next().as_deref()),
            "--exit-held" => exit_held = true,
            other => support::usage(&format!("unknown flag {other:?}; use --holds N [--exit-held]")),
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(run(holds, exit_held));
}

async fn take(provider: &RedisLockProvider, prefix: &str, count: usize) -> Vec<lockkit_core::LockGuard> {
    let acquisitions = (0..count).map(|i| {
        let lock = provider.lock(&format!("hold-memory/{prefix}/{i}")).unwrap();
        async move { lock.acquire().await.unwrap() }
    });
    futures_util::stream::iter(acquisitions).buffer_unordered(100).collect().await
}

async fn run(holds: usize, exit_held: bool) {
    let mut server = None;
    let url = match std::env::var("LOCKKIT_REDIS_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            let started = RedisServer::start().await.unwrap_or_else(|e| panic!("{e}"));
            let url = started.url();
            server = Some(started);
            url
        }
    };
    let lease = Duration::from_secs(3);
    let provider = RedisLockProvider::builder().url(&url).lease(lease).build().unwrap();
    provider.ping().await.unwrap();
    for guard in take(&provider, "warm", 100).await {
        guard.release().await.unwrap();
    }
    let before = resident_bytes();
    let guards = take(&provider, "held", holds).await;
    let per_hold = |bytes: i64| (bytes - before) as f64 / holds as f64;
    println!("{holds} holds, taken: {:.0} B resident per hold", per_hold(resident_bytes()));
    tokio::time::sleep(lease).await;
    println!("{holds} holds, after {lease:?} of renewals: {:.0} B resident per hold", per_hold(resident_bytes()));
    assert!(guards.iter().all(lockkit_core::LockGuard::is_held), "a hold was lost");
    if exit_held {
        // The server stops; the holds stay allocated for the profiler's report.
        drop(server);
        std::process::exit(0);
    }
    for guard in guards {
        guard.release().await.unwrap();
    }
}
