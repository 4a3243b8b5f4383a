//! The server's time per call of the mutex scripts, phase by phase, from `INFO commandstats`
//! (`CONFIG RESETSTAT` before each phase), on a private redis-server (or
//! `LOCKKIT_REDIS_URL`): `cargo run --release -p lockkit-redis --example script_cost`.
//!
//! Phases: 5,000 acquisitions of free locks (the acquire script's uncontended path), one
//! renewal tick of those 5,000 holds (the renew script), their release with nobody waiting
//! (the release script), 5,000 acquire+release cycles of one lock (and of one read-write
//! lock's read, one permit of a semaphore, one election's term), and 8 providers contending
//! for one lock for 3 s (queue joins, hand-overs, confirmations). `--runs N` repeats the whole.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, clippy::print_stdout)]

mod support;

use std::time::{Duration, Instant};
use support::evalsha_stats;

use lockkit_redis::RedisLockProvider;
use lockkit_testkit::fixture::RedisServer;

const LOCKS: usize = 5_000;

async fn reset(admin: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(admin).await.unwrap();
}

fn show(phase: &str, (calls, usec): (u64, u64), per: Option<(&str, u64)>) {
    let per_call = if calls == 0 { 0.0 } else { usec as f64 / calls as f64 };
    let extra = per.map_or(String::new(), |(what, n)| format!(", {:.2} calls per {what}", calls as f64 / n as f64));
    println!("{phase:<44} {per_call:>6.2} µs per EVALSHA ({calls} calls{extra})");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs: usize = std::env::args().skip_while(|a| a != "--runs").nth(1).and_then(|n| n.parse().ok()).unwrap_or(1);
    // A private server of the test kit's, or the one `LOCKKIT_REDIS_URL` names.
    let url = RedisServer::shared().await.unwrap_or_else(|e| panic!("{e}")).url();
    let mut admin = redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let builder = || {
        RedisLockProvider::builder()
            .url(&url)
            .key_prefix("script-cost")
            // Renewals every 5 s: 5,000 acquisitions take well under that, so that the
            // acquire phase counts no renew script (with a tick every second it did).
            .lease(Duration::from_secs(15))
            .renew_every(Duration::from_secs(5))
    };
    for run in 1..=runs {
        println!("run {run}");
        let provider = builder().build().unwrap();
        provider.ping().await.unwrap();
        let warm = provider.lock("warm").unwrap().acquire().await.unwrap();
        warm.release().await.unwrap();

        let prefix = format!("r{run}-{}", uuid::Uuid::new_v4().simple());
        reset(&mut admin).await;
        let mut guards = Vec::with_capacity(LOCKS);
        for i in 0..LOCKS {
            guards.push(provider.lock(&format!("{prefix}/{i}")).unwrap().acquire().await.unwrap());
        }
        show("acquire, free lock", evalsha_stats(&mut admin).await, None);

        let ticks = provider.renewal_stats().ticks;
        reset(&mut admin).await;
        while provider.renewal_stats().ticks == ticks {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        show("renew (one tick of 5000 holds)", evalsha_stats(&mut admin).await, None);

        reset(&mut admin).await;
        for guard in guards {
            guard.release().await.unwrap();
        }
        show("release, nobody waiting", evalsha_stats(&mut admin).await, None);

        let lock = provider.lock(&format!("{prefix}/cycle")).unwrap();
        reset(&mut admin).await;
        for _ in 0..LOCKS {
            lock.acquire().await.unwrap().release().await.unwrap();
        }
        show("acquire+release cycle, one lock", evalsha_stats(&mut admin).await, Some(("cycle", LOCKS as u64)));

        // The same cycle on the other kinds: what a reader, a permit and a candidate cost
        // the server beyond the mutex (more keys, a sorted set, the election's journal).
        let rw = provider.rw_lock(&format!("{prefix}/read-cycle")).unwrap();
        reset(&mut admin).await;
        for _ in 0..LOCKS {
            rw.read().await.unwrap().release().await.unwrap();
        }
        show("read acquire+release cycle, one rw lock", evalsha_stats(&mut admin).await, Some(("cycle", LOCKS as u64)));
        let semaphore = provider.semaphore(&format!("{prefix}/permit-cycle"), 3).unwrap();
        reset(&mut admin).await;
        for _ in 0..LOCKS {
            semaphore.acquire().await.unwrap().release().await.unwrap();
        }
        show("permit acquire+release cycle, 3 permits", evalsha_stats(&mut admin).await, Some(("cycle", LOCKS as u64)));
        let election = provider.election(&format!("{prefix}/term-cycle")).unwrap();
        reset(&mut admin).await;
        for _ in 0..LOCKS {
            election.campaign("10.0.0.7:8080").await.unwrap().release().await.unwrap();
        }
        show("campaign+resign cycle, one election", evalsha_stats(&mut admin).await, Some(("cycle", LOCKS as u64)));

        let name = format!("{prefix}/contended");
        let providers: Vec<RedisLockProvider> = (0..8).map(|_| builder().build().unwrap()).collect();
        for p in &providers {
            p.ping().await.unwrap();
        }
        reset(&mut admin).await;
        let stop = Instant::now() + Duration::from_secs(3);
        let tasks: Vec<_> = providers
            .iter()
            .map(|p| {
                let lock = p.lock(&name).unwrap();
                tokio::spawn(async move {
                    let mut n = 0_u64;
                    while Instant::now() < stop {
                        lock.acquire().await.unwrap().release().await.unwrap();
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let mut acquisitions = 0;
        for task in tasks {
            acquisitions += task.await.unwrap();
        }
        show(
            "8 providers contending for one lock, 3 s",
            evalsha_stats(&mut admin).await,
            Some(("acquisition", acquisitions)),
        );
        println!("  ({acquisitions} acquisitions, {:.0}/s)", acquisitions as f64 / 3.0);
    }
}
