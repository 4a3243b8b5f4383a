//! lockkit's Redis mutex beside the fastest Rust peer, rslock, on one redis-server in one run:
//! `cargo run --release -p lockkit-redis --example peer_cycle [-- --rounds 3 --cycles 3000 --locks 10000]`.
//!
//! Each round runs every contender once, in a shuffled order, each on its own connection (the
//! peers' harness): a `PING` on a plain connection of the redis crate (the floor), lockkit's
//! uncontended cycle (acquire, then release, of one name), rslock's (lock, then unlock), and
//! `--locks` distinct names taken and released one after another by each, and the same for
//! lockkit's reader (of a read-write lock) and permit (of a semaphore of 3), then those two,
//! the mutex, rslock's cycle and two PINGs cycle by cycle in turn (the steadier ratios: see
//! [`interleaved`]), then the `--locks` loop of lockkit's mutex and rslock's in turn by blocks
//! of 100 (see [`many_in_turn`]). It prints p50 and p99 per contender and round, and for the `--locks` loop its wall time, this process's CPU
//! time per name (the client's work: run the server elsewhere, as the fixture does) and the
//! server's time per name (`INFO commandstats` of the commands it sends, each script with the
//! commands it calls; and the main thread's CPU, `INFO cpu`); then the ratios lockkit ÷ rslock and ÷ PING,
//! medians over the rounds. rslock gives no fencing token, no fairness, no loss signal and no renewal; the
//! comparison prices what those cost on the uncontended path. `--runtime current` runs them all
//! on a current-thread runtime. On a private redis-server (or
//! `LOCKKIT_REDIS_URL`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, clippy::print_stdout)]

mod support;

use std::time::{Duration, Instant};

use lockkit_core::LockHandle;
use lockkit_redis::RedisLockProvider;
use lockkit_testkit::fixture::RedisServer;

const LEASE: Duration = Duration::from_secs(30);

/// One contender's samples of one round.
struct Figures {
    p50: Duration,
    p99: Duration,
    /// The `--locks` names one after another, in all.
    many: Duration,
    /// This process's CPU time (user + system, every thread) per name of the `--locks` loop.
    client_cpu: Duration,
    /// The server's time per name of the `--locks` loop in the commands the contender sends
    /// (`INFO commandstats`; a script's time holds the commands it calls).
    server: Duration,
    /// The server's main thread CPU time per name of the `--locks` loop (`INFO cpu`): the
    /// commands and the reading and writing of their requests and replies.
    server_cpu: Duration,
}

impl Figures {
    /// The figures of a contender: its cycles' `samples` and what [`measured`] returned.
    fn of(
        mut samples: Vec<Duration>,
        (many, client_cpu, server, server_cpu): (Duration, Duration, Duration, Duration),
    ) -> Self {
        let (p50, p99) = (percentile(&mut samples, 0.5), percentile(&mut samples, 0.99));
        Figures { p50, p99, many, client_cpu, server, server_cpu }
    }
}

/// This process's CPU time so far, user and system, every thread (`/proc/self/stat`, in clock
/// ticks of 10 ms: good to 1 % over the second or two of a `--locks` loop).
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<u64> = rest.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// The server's microseconds so far in the commands `top_level` (those the contender sends
/// itself; `INFO commandstats`), and its main thread's CPU time (`INFO cpu`, user + system).
/// A script's `usec` already holds the commands it calls, which commandstats also counts
/// under their own names: summing every command counted those twice.
async fn server_micros(connection: &mut redis::aio::MultiplexedConnection, top_level: &[&str]) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("commandstats").arg("cpu").query_async(connection).await.unwrap();
    let commands = info
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| line.split_once(':'))
        .filter(|(name, _)| top_level.contains(name))
        .filter_map(|(_, fields)| fields.split(',').find_map(|field| field.strip_prefix("usec=")))
        .filter_map(|usec| usec.parse::<u64>().ok())
        .sum();
    let cpu: f64 = info
        .lines()
        .filter(|line| line.starts_with("used_cpu_sys_main_thread:") || line.starts_with("used_cpu_user_main_thread:"))
        .filter_map(|line| line.split_once(':').and_then(|(_, seconds)| seconds.trim().parse::<f64>().ok()))
        .sum();
    (commands, (cpu * 1e6) as u64)
}

/// Runs the `--locks` loop `body` and measures its wall time, client CPU, server time in the
/// commands `top_level` and server CPU, the last three per name.
async fn measured<F: std::future::Future<Output = ()>>(
    url: &str,
    locks: usize,
    top_level: &[&str],
    body: F,
) -> (Duration, Duration, Duration, Duration) {
    let client = redis::Client::open(url).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let server_before = server_micros(&mut admin, top_level).await;
    let cpu_before = process_cpu();
    let start = Instant::now();
    body.await;
    let many = start.elapsed();
    let cpu = process_cpu().saturating_sub(cpu_before);
    let server_after = server_micros(&mut admin, top_level).await;
    let per = |total: Duration| total / u32::try_from(locks.max(1)).unwrap_or(u32::MAX);
    (
        many,
        per(cpu),
        per(Duration::from_micros(server_after.0.saturating_sub(server_before.0))),
        per(Duration::from_micros(server_after.1.saturating_sub(server_before.1))),
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Contender {
    Ping,
    Lockkit,
    Rslock,
    /// lockkit's read lock (shared hold of a read-write lock).
    Read,
    /// lockkit's semaphore permit (3 permits).
    Permit,
}

struct Options {
    rounds: usize,
    cycles: usize,
    locks: usize,
    /// `--only lockkit|rslock|ping`: one contender alone (to profile it).
    only: Option<Contender>,
    /// `--runtime current`: every contender on a current-thread runtime (one thread) rather
    /// than the default multi-thread one.
    current_thread: bool,
}

fn options() -> Options {
    let mut options = Options { rounds: 3, cycles: 3_000, locks: 10_000, only: None, current_thread: false };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        if pair[0] == "--only" {
            options.only = Some(match pair.get(1).map(String::as_str) {
                Some("lockkit") => Contender::Lockkit,
                Some("rslock") => Contender::Rslock,
                Some("ping") => Contender::Ping,
                Some("read") => Contender::Read,
                Some("permit") => Contender::Permit,
                other => support::usage(&format!("--only takes lockkit, rslock, ping, read or permit, not {other:?}")),
            });
            continue;
        }
        if pair[0] == "--runtime" {
            options.current_thread = match pair.get(1).map(String::as_str) {
                Some("current") => true,
                Some("multi") => false,
                other => support::usage(&format!("--runtime takes current or multi, not {other:?}")),
            };
            continue;
        }
        let value = support::number(&pair[0], pair.get(1).map(String::as_str));
        match pair[0].as_str() {
            "--rounds" => options.rounds = value,
            "--cycles" => options.cycles = value,
            "--locks" => options.locks = value,
            other => support::usage(&format!(
                "unknown option {other}: use --rounds N, --cycles N, --locks N, --only WHO, --runtime current|multi"
            )),
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
    let mut order = vec![Contender::Ping, Contender::Lockkit, Contender::Rslock, Contender::Read, Contender::Permit];
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
    let many = measured(url, options.locks, &["ping"], async {
        for _ in 0..options.locks {
            // Two round trips, as a cycle has.
            let _: String = redis::cmd("PING").query_async(&mut connection).await.unwrap();
            let _: String = redis::cmd("PING").query_async(&mut connection).await.unwrap();
        }
    })
    .await;
    Figures::of(samples, many)
}

async fn run_lockkit(url: &str, options: &Options, round: usize) -> Figures {
    let provider = RedisLockProvider::builder().url(url).lease(LEASE).build().unwrap();
    provider.ping().await.unwrap();
    let lock = provider.lock(&format!("peer-cycle/lockkit/{round}")).unwrap();
    let handles: Vec<_> =
        (0..options.locks).map(|i| provider.lock(&format!("peer-cycle/lockkit/{round}/{i}")).unwrap()).collect();
    handle_figures(url, options, &lock, &handles).await
}

/// lockkit's shared kinds: a reader of a read-write lock, or a permit of a semaphore of 3.
async fn run_shared(url: &str, options: &Options, round: usize, contender: Contender) -> Figures {
    let provider = RedisLockProvider::builder().url(url).lease(LEASE).build().unwrap();
    provider.ping().await.unwrap();
    let handle = |name: &str| match contender {
        Contender::Read => provider.rw_lock(name).unwrap().reader().clone(),
        _ => provider.semaphore(name, 3).unwrap(),
    };
    let who = format!("{contender:?}").to_lowercase();
    let lock = handle(&format!("peer-cycle/{who}/{round}"));
    let handles: Vec<_> = (0..options.locks).map(|i| handle(&format!("peer-cycle/{who}/{round}/{i}"))).collect();
    handle_figures(url, options, &lock, &handles).await
}

/// The figures of a lockkit kind: `options.cycles` acquire-release cycles of `lock` one after
/// the other, then one cycle of each of `handles` (each its own name) measured on the server.
async fn handle_figures(url: &str, options: &Options, lock: &LockHandle, handles: &[LockHandle]) -> Figures {
    let mut samples = Vec::with_capacity(options.cycles);
    for _ in 0..options.cycles {
        let start = Instant::now();
        let guard = lock.acquire().await.unwrap();
        guard.release().await.unwrap();
        samples.push(start.elapsed());
    }
    let many = measured(url, options.locks, &["evalsha", "eval"], async {
        for handle in handles {
            let guard = handle.acquire().await.unwrap();
            guard.release().await.unwrap();
        }
    })
    .await;
    Figures::of(samples, many)
}

/// lockkit's mutex, reader and permit cycles, rslock's cycle and two PINGs taken in turn, one
/// cycle of each after the other (each on its own connection and name), so that all see the
/// same machine at the same moments: the p50 of each, in µs, in that order.
///
/// On a machine of few cores a cycle costs about 40 µs more per round trip when the client's
/// threads and the redis-server run on different cores than when they share one (a wake-up
/// across cores; measured with `taskset`), and which it is changes from run to run: taken in
/// turn, every contender sees the same placement and the ratios stay put.
async fn interleaved(url: &str, cycles: usize, round: usize) -> [f64; 5] {
    let mut handles = Vec::new();
    for who in ["mutex", "read", "permit"] {
        let provider = RedisLockProvider::builder().url(url).lease(LEASE).build().unwrap();
        provider.ping().await.unwrap();
        let name = format!("peer-cycle/interleaved/{who}/{round}");
        handles.push(match who {
            "mutex" => provider.lock(&name).unwrap(),
            "read" => provider.rw_lock(&name).unwrap().reader().clone(),
            _ => provider.semaphore(&name, 3).unwrap(),
        });
    }
    let manager = rslock::LockManager::new(vec![url.to_owned()]);
    let rslock_name = format!("peer-cycle/interleaved/rslock/{round}");
    let mut ping = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
    let mut samples: Vec<Vec<Duration>> = (0..3).map(|_| Vec::with_capacity(cycles)).collect();
    let (mut rslock_samples, mut ping_samples) = (Vec::with_capacity(cycles), Vec::with_capacity(cycles));
    for _ in 0..cycles {
        for (handle, samples) in handles.iter().zip(&mut samples) {
            let start = Instant::now();
            let guard = handle.acquire().await.unwrap();
            guard.release().await.unwrap();
            samples.push(start.elapsed());
        }
        let start = Instant::now();
        let lock = manager.lock(rslock_name.as_str(), LEASE).await.unwrap();
        manager.unlock(&lock).await;
        rslock_samples.push(start.elapsed());
        let start = Instant::now();
        // Two round trips, as a cycle has.
        let _: String = redis::cmd("PING").query_async(&mut ping).await.unwrap();
        let _: String = redis::cmd("PING").query_async(&mut ping).await.unwrap();
        ping_samples.push(start.elapsed());
    }
    samples.extend([rslock_samples, ping_samples]);
    let mut p50 = [0.0; 5];
    for (p50, samples) in p50.iter_mut().zip(&mut samples) {
        *p50 = micros(percentile(samples, 0.5));
    }
    p50
}

/// Locks taken one by one per block of [`many_in_turn`].
const BLOCK: usize = 100;

/// `locks` distinct names taken and released one after another by lockkit's mutex and by
/// rslock, in turn by blocks of [`BLOCK`] (which of the two goes first alternates from block to
/// block), so that both see the same machine at the same moments (the rounds above run each
/// contender's 10,000 at a different moment, and their ratio swung 0.93-2.46× from run to
/// run). Returns the seconds each spent, lockkit's first.
async fn many_in_turn(url: &str, locks: usize, round: usize) -> (f64, f64) {
    let provider = RedisLockProvider::builder().url(url).lease(LEASE).build().unwrap();
    provider.ping().await.unwrap();
    let handles: Vec<_> =
        (0..locks).map(|i| provider.lock(&format!("peer-cycle/in-turn/lockkit/{round}/{i}")).unwrap()).collect();
    let manager = rslock::LockManager::new(vec![url.to_owned()]);
    let names: Vec<String> = (0..locks).map(|i| format!("peer-cycle/in-turn/rslock/{round}/{i}")).collect();
    // One cycle each first: connections open, scripts loaded.
    let warm = provider.lock(&format!("peer-cycle/in-turn/lockkit/{round}/warm")).unwrap();
    warm.acquire().await.unwrap().release().await.unwrap();
    let warm_name = format!("peer-cycle/in-turn/rslock/{round}/warm");
    let lock = manager.lock(warm_name.as_str(), LEASE).await.unwrap();
    manager.unlock(&lock).await;
    let (mut lockkit, mut rslock) = (Duration::ZERO, Duration::ZERO);
    for (block, (handles, names)) in handles.chunks(BLOCK).zip(names.chunks(BLOCK)).enumerate() {
        for side in [block % 2, 1 - block % 2] {
            let start = Instant::now();
            if side == 0 {
                for handle in handles {
                    handle.acquire().await.unwrap().release().await.unwrap();
                }
                lockkit += start.elapsed();
            } else {
                for name in names {
                    let lock = manager.lock(name.as_str(), LEASE).await.unwrap();
                    manager.unlock(&lock).await;
                }
                rslock += start.elapsed();
            }
        }
    }
    (lockkit.as_secs_f64(), rslock.as_secs_f64())
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
    // rslock sends a bare SET to lock and a script to unlock (whose GET and DEL its time holds).
    let many = measured(url, options.locks, &["set", "evalsha", "eval"], async {
        for name in &names {
            let lock = manager.lock(name.as_str(), LEASE).await.unwrap();
            manager.unlock(&lock).await;
        }
    })
    .await;
    Figures::of(samples, many)
}

fn main() {
    let options = options();
    let mut runtime = if options.current_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    runtime.enable_all().build().unwrap().block_on(run(options));
}

async fn run(options: Options) {
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
    println!(
        "{:<6} {:<8} {:>9} {:>9} {:>9} {:>14} {:>10} {:>14}",
        "round", "who", "p50 µs", "p99 µs", "locks s", "client CPU µs", "server µs", "server CPU µs"
    );
    let (mut ratio_rslock, mut ratio_ping, mut ratio_many) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ratio_read, mut ratio_permit) = (Vec::new(), Vec::new());
    for round in 0..options.rounds {
        let mut figures = Vec::new();
        for contender in shuffled(round) {
            if options.only.is_some_and(|only| only != contender) {
                continue;
            }
            let result = match contender {
                Contender::Ping => run_ping(&url, &options).await,
                Contender::Lockkit => run_lockkit(&url, &options, round).await,
                Contender::Rslock => run_rslock(&url, &options, round).await,
                Contender::Read | Contender::Permit => run_shared(&url, &options, round, contender).await,
            };
            println!(
                "{round:<6} {:<8} {:>9.1} {:>9.1} {:>9.3} {:>14.1} {:>10.1} {:>14.1}",
                format!("{contender:?}").to_lowercase(),
                micros(result.p50),
                micros(result.p99),
                result.many.as_secs_f64(),
                micros(result.client_cpu),
                micros(result.server),
                micros(result.server_cpu),
            );
            figures.push((contender, result));
        }
        if options.only.is_some() {
            continue;
        }
        let of = |who: Contender| &figures.iter().find(|(c, _)| *c == who).expect("every contender ran").1;
        let (ping, lockkit, rslock) = (of(Contender::Ping), of(Contender::Lockkit), of(Contender::Rslock));
        ratio_rslock.push(micros(lockkit.p50) / micros(rslock.p50));
        ratio_ping.push(micros(lockkit.p50) / micros(ping.p50));
        ratio_many.push(lockkit.many.as_secs_f64() / rslock.many.as_secs_f64());
        ratio_read.push(micros(of(Contender::Read).p50) / micros(lockkit.p50));
        ratio_permit.push(micros(of(Contender::Permit).p50) / micros(lockkit.p50));
    }
    if options.only.is_some() {
        return;
    }
    // The shared kinds against the mutex, cycle by cycle in turn (steadier on a busy machine
    // than the rounds above, whose contenders run at different moments).
    let (mut turn_read, mut turn_permit, mut turn_rslock) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..options.rounds {
        let [mutex, read, permit, rslock, pings] = interleaved(&url, options.cycles, round).await;
        println!(
            "in turn {round}: mutex {mutex:.1} µs, read {read:.1} µs, permit {permit:.1} µs, \
             rslock {rslock:.1} µs, 2 PINGs {pings:.1} µs (p50)"
        );
        turn_read.push(read / mutex);
        turn_permit.push(permit / mutex);
        turn_rslock.push(mutex / rslock);
    }
    // The locks one by one, lockkit and rslock in turn by blocks (steadier, as above).
    let mut turn_many = Vec::new();
    for round in 0..options.rounds {
        let (lockkit, rslock) = many_in_turn(&url, options.locks, round).await;
        println!(
            "in turn {round}: {} locks one by one in blocks of {BLOCK}: lockkit {lockkit:.3} s, rslock {rslock:.3} s",
            options.locks
        );
        turn_many.push(lockkit / rslock);
    }
    println!("medians over the rounds:");
    println!(
        "  lockkit cycle p50 ÷ rslock's: {:.2}x (ratios {:?})",
        support::median(ratio_rslock.clone()),
        ratio_rslock
    );
    println!("  lockkit cycle p50 ÷ PING p50: {:.2}x", support::median(ratio_ping));
    println!("  lockkit {} locks one by one ÷ rslock's: {:.2}x", options.locks, support::median(ratio_many));
    println!(
        "  read cycle p50 ÷ lockkit mutex cycle p50: {:.2}x (ratios {ratio_read:?})",
        support::median(ratio_read.clone())
    );
    println!(
        "  permit cycle p50 ÷ lockkit mutex cycle p50: {:.2}x (ratios {ratio_permit:?})",
        support::median(ratio_permit.clone())
    );
    println!("  in turn: mutex ÷ rslock {:.2}x (ratios {turn_rslock:?})", support::median(turn_rslock.clone()));
    println!(
        "  in turn: {} locks one by one ÷ rslock's {:.2}x (ratios {turn_many:?})",
        options.locks,
        support::median(turn_many.clone())
    );
    println!(
        "  in turn: read ÷ mutex {:.2}x (ratios {turn_read:?}), permit ÷ mutex {:.2}x (ratios {turn_permit:?})",
        support::median(turn_read.clone()),
        support::median(turn_permit.clone())
    );
}
