//! lockkit's Redis semaphore beside redis-semaphore (Node, on ioredis), on one redis-server in
//! one run: `cargo run --release -p lockkit-redis --example peer_semaphore [-- --rounds 3
//! --cycles 3000 --clients 8 --seconds 3 --permits 3]`.
//!
//! The peer runs in `node` from `examples/peers/` (install it once there: `npm install`); the
//! example says so when `node` or the packages are missing. Each round runs both contenders, in
//! turns that swap every round, on the same server: the uncontended cycle (one client acquires
//! a permit of a semaphore of `--permits` and releases it, `--cycles` times; p50 and p99), then
//! `--clients` clients, each on its own connection (lockkit: its own provider), acquiring and
//! releasing permits of one semaphore for `--seconds`: permits per second, and each
//! acquisition's wait p50 and max, and for lockkit the server's scripts, their time, the
//! PUBLISHes and the main thread's CPU per permit (`INFO commandstats`, `cpu`). Then the
//! ratios lockkit ÷ redis-semaphore, medians over the rounds. redis-semaphore is not fair (a waiter polls every 10 ms and the fastest poller
//! wins), gives no fencing token and no loss signal: the wait max shows what fairness buys.
//! On a private redis-server (or `LOCKKIT_REDIS_URL`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, clippy::print_stdout)]

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lockkit_redis::RedisLockProvider;
use lockkit_testkit::fixture::RedisServer;

struct Options {
    rounds: usize,
    cycles: usize,
    clients: usize,
    seconds: f64,
    permits: u32,
}

fn options() -> Options {
    let mut options = Options { rounds: 3, cycles: 3_000, clients: 8, seconds: 3.0, permits: 3 };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let (flag, value) = (pair[0].as_str(), pair.get(1).map(String::as_str));
        match flag {
            "--rounds" => options.rounds = support::number(flag, value),
            "--cycles" => options.cycles = support::number(flag, value),
            "--clients" => options.clients = support::number(flag, value),
            "--seconds" => options.seconds = support::number(flag, value),
            "--permits" => options.permits = support::number(flag, value),
            other => support::usage(&format!(
                "unknown option {other}: use --rounds N, --cycles N, --clients N, --seconds S, --permits N"
            )),
        }
    }
    options
}

/// One contender's figures of one round.
#[derive(Debug, Default)]
struct Figures {
    cycle_p50_us: f64,
    cycle_p99_us: f64,
    rate_per_s: f64,
    wait_p50_us: f64,
    wait_max_us: f64,
}

fn percentile(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples[index.min(samples.len() - 1)]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Where the Node peer lives, and its packages.
fn peers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples").join("peers")
}

/// Fails with what to install when `node` or the peer's packages are missing.
fn check_node() {
    let dir = peers_dir();
    let probe =
        Command::new("node").arg("-e").arg("require('redis-semaphore'); require('ioredis')").current_dir(&dir).output();
    match probe {
        Err(error) => panic!(
            "`node` cannot be run ({error}): install Node.js 18 or later (Debian: apt-get install nodejs npm), then `npm install` in {}",
            dir.display()
        ),
        Ok(output) if !output.status.success() => panic!(
            "the peer's packages are missing: run `npm install` in {} (it installs redis-semaphore and ioredis)\n{}",
            dir.display(),
            String::from_utf8_lossy(&output.stderr)
        ),
        Ok(_) => {}
    }
}

fn run_peer(url: &str, round: usize, options: &Options) -> Figures {
    let output = Command::new("node")
        .arg("semaphore_peer.js")
        .arg(url)
        .arg(format!("peer-semaphore/node/{round}/{}", uuid::Uuid::new_v4().simple()))
        .arg(options.permits.to_string())
        .arg(options.cycles.to_string())
        .arg(options.clients.to_string())
        .arg(options.seconds.to_string())
        .current_dir(peers_dir())
        .output()
        .expect("node runs (checked at the start)");
    assert!(output.status.success(), "the Node peer failed:\n{}", String::from_utf8_lossy(&output.stderr));
    let line = String::from_utf8_lossy(&output.stdout);
    // One line of flat JSON numbers: read the five fields without a JSON parser.
    let field = |name: &str| -> f64 {
        let at = line.find(&format!("\"{name}\":")).unwrap_or_else(|| panic!("no {name} in {line}"));
        let rest = &line[at + name.len() + 3..];
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        rest[..end].trim().parse().unwrap_or_else(|_| panic!("{name} unreadable in {line}"))
    };
    println!(
        "       redis-semaphore, {} clients, per permit: {:.2} scripts, {:.1} commands (in scripts or not), server main thread CPU {:.1} µs, client CPU {:.1} µs",
        options.clients,
        field("scripts"),
        field("commands"),
        field("server_cpu_us"),
        field("client_cpu_us")
    );
    Figures {
        cycle_p50_us: field("cycle_p50_us"),
        cycle_p99_us: field("cycle_p99_us"),
        rate_per_s: field("rate_per_s"),
        wait_p50_us: field("wait_p50_us"),
        wait_max_us: field("wait_max_us"),
    }
}

async fn run_lockkit(url: &str, round: usize, options: &Options) -> Figures {
    let provider = RedisLockProvider::builder().url(url).build().unwrap();
    provider.ping().await.unwrap();
    let name = format!("peer-semaphore/lockkit/{round}/{}", uuid::Uuid::new_v4().simple());
    let alone = provider.semaphore(&format!("{name}/alone"), options.permits).unwrap();
    let mut cycles = Vec::with_capacity(options.cycles);
    for _ in 0..options.cycles {
        let start = Instant::now();
        let guard = alone.acquire().await.unwrap();
        guard.release().await.unwrap();
        cycles.push(micros(start.elapsed()));
    }
    let mut providers = Vec::new();
    for _ in 0..options.clients {
        let provider = RedisLockProvider::builder().url(url).build().unwrap();
        provider.ping().await.unwrap();
        providers.push(provider);
    }
    let mut admin = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
    let before = contended_stats(&mut admin).await;
    let cpu_before = process_cpu_us();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = providers
        .iter()
        .map(|provider| {
            let handle = provider.semaphore(&format!("{name}/shared"), options.permits).unwrap();
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let (mut waits, mut releases) = (Vec::new(), Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    let guard = handle.acquire().await.unwrap();
                    let granted = Instant::now();
                    waits.push(micros(granted - start));
                    guard.release().await.unwrap();
                    releases.push(micros(granted.elapsed()));
                }
                (waits, releases)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(options.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut waits, mut releases) = (Vec::new(), Vec::new());
    for task in tasks {
        let (w, r) = task.await.unwrap();
        waits.extend(w);
        releases.extend(r);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = process_cpu_us() - cpu_before;
    let after = contended_stats(&mut admin).await;
    // Where a contended permit's time goes on the server: how many scripts (acquire tries,
    // confirmations of hand-overs, releases) and wake-up messages each permit took.
    let per = |i: usize| (after[i] - before[i]) / waits.len().max(1) as f64;
    println!(
        "       lockkit, 8 clients, per permit: {:.2} scripts ({:.1} µs of server time), {:.2} PUBLISH, server main thread CPU {:.1} µs",
        per(0),
        per(1),
        per(2),
        per(3)
    );
    // The hand-over chain: a permit goes from one holder to the next in one release call (the
    // release script grants it to the head and publishes the wake), so each permit's turn
    // takes about one release call; permits ÷ rate is that turn.
    println!(
        "       lockkit, {} clients, per permit: {:.1} commands (in scripts or not), client CPU {:.1} µs; release call p50 {:.1} µs; a permit's turn (permits ÷ rate) {:.1} µs",
        options.clients,
        per(4),
        cpu / waits.len().max(1) as f64,
        percentile(&mut releases, 0.5),
        f64::from(options.permits) * elapsed / waits.len().max(1) as f64 * 1e6,
    );
    Figures {
        cycle_p50_us: percentile(&mut cycles, 0.5),
        cycle_p99_us: percentile(&mut cycles, 0.99),
        rate_per_s: waits.len() as f64 / elapsed,
        wait_p50_us: percentile(&mut waits, 0.5),
        wait_max_us: percentile(&mut waits, 1.0),
    }
}

/// This process's CPU time so far (user and system, µs; from `/proc/self/stat`, in clock
/// ticks of 10 ms; 0 where there is no `/proc`).
fn process_cpu_us() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces), from the state on: utime and
    // stime are the 12th and 13th of them.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: f64 = rest.split_whitespace().skip(11).take(2).filter_map(|v| v.parse::<f64>().ok()).sum();
    ticks * 10_000.0
}

/// `[EVALSHA calls, EVALSHA µs, PUBLISH calls, server main thread CPU µs, commands]` so far
/// (`INFO commandstats` and `cpu`; a script's PUBLISH counts under PUBLISH; commands are
/// every command but `EVALSHA` and `INFO`, those the scripts call included).
async fn contended_stats(admin: &mut redis::aio::MultiplexedConnection) -> [f64; 5] {
    let info: String = redis::cmd("INFO").arg("commandstats").arg("cpu").query_async(admin).await.unwrap();
    let stat = |command: &str, field: &str| -> f64 {
        info.lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:")))
            .and_then(|fields| fields.split(',').find_map(|f| f.strip_prefix(field)))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let cpu: f64 = info
        .lines()
        .filter(|line| line.starts_with("used_cpu_sys_main_thread:") || line.starts_with("used_cpu_user_main_thread:"))
        .filter_map(|line| line.split_once(':').and_then(|(_, seconds)| seconds.trim().parse::<f64>().ok()))
        .sum();
    let commands: f64 = info
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter(|line| !line.starts_with("evalsha:") && !line.starts_with("info:"))
        .filter_map(|line| line.split_once(":calls=").and_then(|(_, rest)| rest.split(',').next()))
        .filter_map(|calls| calls.parse::<f64>().ok())
        .sum();
    [stat("evalsha", "calls="), stat("evalsha", "usec="), stat("publish", "calls="), cpu * 1e6, commands]
}

#[tokio::main]
async fn main() {
    let options = options();
    check_node();
    // A private server of the test kit's, or the one `LOCKKIT_REDIS_URL` names.
    let url = RedisServer::shared().await.unwrap_or_else(|e| panic!("{e}")).url();
    println!(
        "peer_semaphore on {url}: {} rounds; semaphore of {} permits; {} uncontended cycles; {} clients for {} s",
        options.rounds, options.permits, options.cycles, options.clients, options.seconds
    );
    println!(
        "{:<6} {:<16} {:>9} {:>9} {:>10} {:>12} {:>12}",
        "round", "who", "p50 µs", "p99 µs", "permits/s", "wait p50 µs", "wait max µs"
    );
    let (mut cycle, mut rate, mut max) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..options.rounds {
        let mut order = [true, false];
        if round % 2 == 1 {
            order.reverse();
        }
        let (mut ours, mut theirs) = (Figures::default(), Figures::default());
        for lockkit in order {
            let (who, figures) = if lockkit {
                ours = run_lockkit(&url, round, &options).await;
                ("lockkit", &ours)
            } else {
                let (url, options) = (url.clone(), &options);
                theirs = tokio::task::block_in_place(|| run_peer(&url, round, options));
                ("redis-semaphore", &theirs)
            };
            println!(
                "{round:<6} {who:<16} {:>9.1} {:>9.1} {:>10.0} {:>12.1} {:>12.1}",
                figures.cycle_p50_us,
                figures.cycle_p99_us,
                figures.rate_per_s,
                figures.wait_p50_us,
                figures.wait_max_us
            );
        }
        cycle.push(ours.cycle_p50_us / theirs.cycle_p50_us);
        rate.push(ours.rate_per_s / theirs.rate_per_s);
        max.push(ours.wait_max_us / theirs.wait_max_us);
    }
    println!("medians over the rounds (lockkit ÷ redis-semaphore):");
    println!("  uncontended cycle p50: {:.2}x (ratios {cycle:.2?})", support::median(cycle.clone()));
    println!("  permits/s with {} clients: {:.2}x (ratios {rate:.2?})", options.clients, support::median(rate.clone()));
    println!("  wait max: {:.3}x (ratios {max:.3?})", support::median(max.clone()));
}
