//! lockkit's Redis mutex beside the fastest Rust peer, rslock, on one redis-server in one run:
//! `cargo run --release -p lockkit-redis --example peer_cycle [-- --rounds 3 --cycles 3000 --locks 10000]`.
//!
//! Each round runs every contender once, in a shuffled order, each on its own connection (the
//! peers' harness): a `PING` on a plain connection of the redis crate (the floor), lockkit's
//! uncontended cycle (acquire, then release, of one name), rslock's (lock, then unlock), and
//! `--locks` distinct names taken and released one after another by each. It prints p50 and
//! p99 per contender and round, the ratios lockkit ÷ rslock and ÷ PING, and the medians over
//! the rounds. rslock gives no fencing token, no fairness, no loss signal and no renewal; the
//! comparison prices what those cost on the uncontended path. On a private redis-server (or
//! `LOCKKIT_REDIS_URL`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, clippy::print_stdout)]

use std::time::{Duration, Instant};

use lockkit_redis::RedisLockProvider;
use lockkit_testkit::fixture::RedisServer;

const LEASE: Duration = Duration::from_secs(30);

/// One contender's samples of one round.
struct Figures {
    p50: Duration,
    p99: Duration,
    /// The `--locks` names one after another, in all.
    many: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Contender {
    Ping,
    Lockkit,
    Rslock,
}

struct Options {
    rounds: usize,
    cycles: usize,
    locks: usize,
}

fn options() -> Options {
    let mut options = Options { rounds: 3, cycles: 3_000, locks: 10_000 };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{} needs a number", pair[0]));
        match pair[0].as_str() {
            "--rounds" => options.rounds = value,
            "--cycles" => options.cycles = value,
            "--locks" => options.locks = value,
            other => panic!("unknown option {other}: use --rounds N, --cycles N, --locks N"),
        }
    }
    options
}

fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort_unstable();
    let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples[index.min(samples.len() - 1)]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A cheap shuffle for the order of the contenders in a round (xorshift on the clock).
fn shuffled(round: usize) -> Vec<Contender> {
    let mut order = vec![Contender::Ping, Contender::Lockkit, Contender::Rslock];
    let mut state = (Instant::now().elapsed().as_nanos() as u64) ^ (0x9e37_79b9_7f4a_7c15 ^ round as u64);
    for i in (1..order.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(i, (state % (i as u64 + 1)) as usize);
    }
    order
}

async fn run_ping(url: &str, options: &Options) -> Figures {
    let client = redis::Client::open(url).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let mut samples = Vec::with_capacity(options.cycles);
    for _ in 0..options.cycles {
        let start = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut connection).await.unwrap();
        samples.push(start.elapsed());
    }
    let start = Instant::now();
    for _ in 0..options.locks {
        // Two round trips, as a cycle has.
        let _: String = redis::cmd("PING").query_async(&mut connection).await.unwrap();
        let _: String = redis::cmd("PING").query_async(&mut connection).await.unwrap();
    }
    let many = start.elapsed();
    Figures { p50: percentile(&mut samples, 0.5), p99: percentile(&mut samples, 0.99), many }
}

async fn run_lockkit(url: &str, options: &Options, round: usize) -> Figures {
    let provider = RedisLockProvider::builder().url(url).lease(LEASE).build().unwrap();
    provider.ping().await.unwrap();
    let lock = provider.lock(&format!("peer-cycle/lockkit/{round}")).unwrap();
    let mut samples = Vec::with_capacity(options.cycles);
    for _ in 0..options.cycles {
        let start = Instant::now();
        let guard = lock.acquire().await.unwrap();
        guard.release().await.unwrap();
        samples.push(start.elapsed());
    }
    let handles: Vec<_> =
        (0..options.locks).map(|i| provider.lock(&format!("peer-cycle/lockkit/{round}/{i}")).unwrap()).collect();
    let start = Instant::now();
    for handle in &handles {
        let guard = handle.acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    let many = start.elapsed();
    Figures { p50: percentile(&mut samples, 0.5), p99: percentile(&mut samples, 0.99), many }
}

async fn run_rslock(url: &str, options: &Options, round: usize) -> Figures {
    let manager = rslock::LockManager::new(vec![url.to_owned()]);
    let name = format!("peer-cycle/rslock/{round}");
    let mut samples = Vec::with_capacity(options.cycles);
    for _ in 0..options.cycles {
        let start = Instant::now();
        let lock = manager.lock(name.as_str(), LEASE).await.unwrap();
        manager.unlock(&lock).await;
        samples.push(start.elapsed());
    }
    let names: Vec<String> = (0..options.locks).map(|i| format!("peer-cycle/rslock/{round}/{i}")).collect();
    let start = Instant::now();
    for name in &names {
        let lock = manager.lock(name.as_str(), LEASE).await.unwrap();
        manager.unlock(&lock).await;
    }
    let many = start.elapsed();
    Figures { p50: percentile(&mut samples, 0.5), p99: percentile(&mut samples, 0.99), many }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    let options = options();
    let _server;
    let url = match std::env::var("LOCKKIT_REDIS_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            let server = RedisServer::start().await.unwrap_or_else(|e| panic!("{e}"));
            let url = server.url();
            _server = server;
            url
        }
    };
    println!(
        "peer_cycle on {url}: {} rounds of {} cycles and {} locks one by one",
        options.rounds, options.cycles, options.locks
    );
    println!("{:<6} {:<8} {:>9} {:>9} {:>12}", "round", "who", "p50 µs", "p99 µs", "locks s");
    let (mut ratio_rslock, mut ratio_ping, mut ratio_many) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..options.rounds {
        let mut figures = Vec::new();
        for contender in shuffled(round) {
            let result = match contender {
                Contender::Ping => run_ping(&url, &options).await,
                Contender::Lockkit => run_lockkit(&url, &options, round).await,
                Contender::Rslock => run_rslock(&url, &options, round).await,
            };
            println!(
                "{round:<6} {:<8} {:>9.1} {:>9.1} {:>12.3}",
                format!("{contender:?}").to_lowercase(),
                micros(result.p50),
                micros(result.p99),
                result.many.as_secs_f64()
            );
            figures.push((contender, result));
        }
        let of = |who: Contender| &figures.iter().find(|(c, _)| *c == who).expect("every contender ran").1;
        let (ping, lockkit, rslock) = (of(Contender::Ping), of(Contender::Lockkit), of(Contender::Rslock));
        ratio_rslock.push(micros(lockkit.p50) / micros(rslock.p50));
        ratio_ping.push(micros(lockkit.p50) / micros(ping.p50));
        ratio_many.push(lockkit.many.as_secs_f64() / rslock.many.as_secs_f64());
    }
    println!("medians over the rounds:");
    println!("  lockkit cycle p50 ÷ rslock's: {:.2}x (ratios {:?})", median(ratio_rslock.clone()), ratio_rslock);
    println!("  lockkit cycle p50 ÷ PING p50: {:.2}x", median(ratio_ping));
    println!("  lockkit {} locks one by one ÷ rslock's: {:.2}x", options.locks, median(ratio_many));
}
