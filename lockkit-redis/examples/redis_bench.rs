//! Measures the Redis backend against the raw round trip of the same client library, in one
//! run on one server: `cargo run --release -p lockkit-redis --example redis_bench`.
//!
//! Uses `LOCKKIT_REDIS_URL` when set, else starts a private redis-server. Prints:
//! - uncontended acquire+release cycles (p50, p99) beside PING (p50, p99), and their ratio;
//! - hand-off latency with 8 clients contending for one lock (release to next grant);
//! - renewal of 10,000 held locks: pipelines per tick, renewal round time, client and
//!   server CPU per tick.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkit_core::LockProvider;
use lockkit_redis::RedisLockProvider;
use lockkit_testkit::fixture::RedisServer;

const CYCLES: usize = 5_000;
const HANDOFF_CLIENTS: usize = 8;
const HANDOFF_TIME: Duration = Duration::from_secs(5);
const HELD: usize = 10_000;

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort_unstable();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// User plus system CPU time of a process, from /proc.
fn cpu_time(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks: u64 = fields.get(11..13).map(|f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum()).unwrap_or(0);
    // Linux reports clock ticks of 1/100 s on every supported architecture.
    Duration::from_millis(ticks * 10)
}

/// The server's CPU time as INFO reports it.
async fn server_cpu(admin: &mut redis::aio::MultiplexedConnection) -> Duration {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(admin).await.unwrap();
    let value = |name: &str| {
        info.lines().find_map(|line| line.strip_prefix(name)).and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0)
    };
    Duration::from_secs_f64(value("used_cpu_sys:") + value("used_cpu_user:"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (_server, url) = match std::env::var("LOCKKIT_REDIS_URL") {
        Ok(url) if !url.is_empty() => (None, url),
        _ => {
            let server = RedisServer::start().await.unwrap_or_else(|e| panic!("{e}"));
            let url = server.url();
            (Some(server), url)
        }
    };
    println!("lockkit-redis benchmark against {url}");
    let provider = RedisLockProvider::new(&url).unwrap();
    provider.ping().await.unwrap();

    // Warm up: connections, script cache, allocator.
    let warm = provider.lock("bench/warm").unwrap();
    for _ in 0..500 {
        warm.acquire().await.unwrap().release().await.unwrap();
        provider.ping().await.unwrap();
    }

    // Interleave PINGs and cycles so that both see the same machine load.
    let lock = provider.lock("bench/uncontended").unwrap();
    let (mut pings, mut cycles) = (Vec::with_capacity(CYCLES), Vec::with_capacity(CYCLES));
    for _ in 0..CYCLES {
        let start = Instant::now();
        provider.ping().await.unwrap();
        pings.push(start.elapsed());
        let start = Instant::now();
        let guard = lock.acquire().await.unwrap();
        guard.release().await.unwrap();
        cycles.push(start.elapsed());
    }
    // The same two scripts sent directly, without lockkit: the floor of any Lua-based lock.
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut raw = client.get_multiplexed_async_connection().await.unwrap();
    let acquire = redis::Script::new(include_str!("../src/scripts/acquire.lua"));
    let release = redis::Script::new(include_str!("../src/scripts/release.lua"));
    let mut scripts = Vec::with_capacity(CYCLES);
    let mut raw_pings = Vec::with_capacity(CYCLES);
    for i in 0..CYCLES {
        let owner = format!("raw-{i}");
        let start = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut raw).await.unwrap();
        raw_pings.push(start.elapsed());
        let start = Instant::now();
        let (granted, _): (i64, i64) = acquire
            .key("bench:{raw}")
            .key("bench:{raw}:fence")
            .key(format!("bench:{{raw}}:void:{owner}"))
            .arg(&owner)
            .arg(30_000)
            .invoke_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(granted, 1);
        let released: i64 =
            release.key("bench:{raw}").key("bench:{raw}:released").arg(&owner).invoke_async(&mut raw).await.unwrap();
        assert_eq!(released, 1);
        scripts.push(start.elapsed());
    }
    let (ping50, ping99) = (percentile(&mut pings, 0.5), percentile(&mut pings, 0.99));
    let (raw50, script50) = (percentile(&mut raw_pings, 0.5), percentile(&mut scripts, 0.5));
    let (cycle50, cycle99) = (percentile(&mut cycles, 0.5), percentile(&mut cycles, 0.99));
    println!("\nuncontended acquire+release, {CYCLES} cycles");
    println!("  PING                  p50 {:>8.1} us   p99 {:>8.1} us", micros(ping50), micros(ping99));
    println!("  acquire+release       p50 {:>8.1} us   p99 {:>8.1} us", micros(cycle50), micros(cycle99));
    println!(
        "  ratio to one PING     p50 {:>8.2} x     (goal: at most 2.2 x; a cycle is two round trips)",
        cycle50.as_secs_f64() / ping50.as_secs_f64()
    );
    println!(
        "  the two scripts alone p50 {:>8.1} us = {:.2} x PING on a plain multiplexed connection (PING there {:.1} us)",
        micros(script50),
        script50.as_secs_f64() / raw50.as_secs_f64(),
        micros(raw50)
    );

    handoff(&url).await;
    renewal(&url).await;
}

/// Eight clients (separate providers, as separate processes would be) contend for one lock;
/// each hand-off is timed from the start of a release to the next grant.
async fn handoff(url: &str) {
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let handoffs: Arc<Mutex<Vec<Duration>>> = Arc::new(Mutex::new(Vec::new()));
    let stop_at = Instant::now() + HANDOFF_TIME;
    let mut tasks = Vec::new();
    for _ in 0..HANDOFF_CLIENTS {
        let provider = RedisLockProvider::new(url).unwrap();
        provider.ping().await.unwrap();
        let lock = provider.lock("bench/handoff").unwrap();
        let (released_at, handoffs) = (Arc::clone(&released_at), Arc::clone(&handoffs));
        tasks.push(tokio::spawn(async move {
            let mut grants = 0_u64;
            while Instant::now() < stop_at {
                let guard = lock.acquire().await.unwrap();
                if let Some(at) = released_at.lock().unwrap().take() {
                    handoffs.lock().unwrap().push(at.elapsed());
                }
                grants += 1;
                *released_at.lock().unwrap() = Some(Instant::now());
                guard.release().await.unwrap();
            }
            drop(provider);
            grants
        }));
    }
    let mut grants = 0;
    for task in tasks {
        grants += task.await.unwrap();
    }
    let mut samples = handoffs.lock().unwrap().clone();
    println!("\nhand-off under {HANDOFF_CLIENTS}-client contention, {HANDOFF_TIME:?}");
    println!(
        "  release -> next grant  p50 {:>8.1} us   p99 {:>8.1} us   ({} hand-offs)",
        micros(percentile(&mut samples, 0.5)),
        micros(percentile(&mut samples, 0.99)),
        samples.len()
    );
    println!("  throughput             {:>8.0} grants/s", grants as f64 / HANDOFF_TIME.as_secs_f64());
}

/// One provider holds 10,000 locks; the watchdog renews them for a few ticks.
async fn renewal(url: &str) {
    let every = Duration::from_secs(1);
    let provider =
        RedisLockProvider::builder().url(url).lease(Duration::from_secs(5)).renew_every(every).build().unwrap();
    provider.ping().await.unwrap();
    let locks: Vec<_> = (0..HELD).map(|i| provider.lock(&format!("bench/held/{i}")).unwrap()).collect();
    let started = Instant::now();
    let guards = futures_util::future::join_all(locks.iter().map(|lock| lock.acquire())).await;
    let guards: Vec<_> = guards.into_iter().map(Result::unwrap).collect();
    let acquired_in = started.elapsed();

    let mut admin = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
    let before = provider.renewal_stats();
    let (client_cpu, server_cpu_before) = (cpu_time("self"), server_cpu(&mut admin).await);
    let window = Instant::now();
    // Wait for five more completed renewal rounds.
    while provider.renewal_stats().ticks < before.ticks + 5 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = window.elapsed();
    let after = provider.renewal_stats();
    let (client_used, server_used) =
        (cpu_time("self").saturating_sub(client_cpu), server_cpu(&mut admin).await.saturating_sub(server_cpu_before));
    let ticks = (after.ticks - before.ticks) as f64;
    println!("\nrenewal of {HELD} held locks (renew every {every:?}, {ticks} rounds in {elapsed:.1?})");
    println!("  acquiring them concurrently took {acquired_in:.1?}");
    println!(
        "  per round: {:.1} pipelines (round trips), {:.0} renewals",
        (after.round_trips - before.round_trips) as f64 / ticks,
        (after.renewed - before.renewed) as f64 / ticks
    );
    println!(
        "  CPU per round: client {:.1} ms, server {:.1} ms (whole process; 10 ms resolution on the client)",
        client_used.as_secs_f64() * 1e3 / ticks,
        server_used.as_secs_f64() * 1e3 / ticks
    );
    assert!(guards.iter().all(|guard| guard.is_held()), "every hold survived the renewals");
    let started = Instant::now();
    futures_util::future::join_all(guards.into_iter().map(|guard| guard.release())).await;
    println!("  releasing them concurrently took {:.1?}", started.elapsed());
}
