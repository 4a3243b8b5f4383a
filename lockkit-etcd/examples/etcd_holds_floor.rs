//! Places the growth of an etcd hold's cost with the number of holds (issue 36): `cargo run
//! --release -p lockkit-etcd --example etcd_holds_floor [-- ROUNDS [N,N,…]]`.
//!
//! For each N (1,000, 10,000 and 100,000 by default), in turn and ROUNDS times (2 by
//! default; a small N several times a round): lockkit takes N locks on one provider, 100 in
//! flight, and releases them; then the same two transactions lockkit sends per hold (the
//! put-if-absent that reads the lock's queue, and the delete conditioned on the key's create
//! revision) are sent raw for N other names on the same client and lease, 100 in flight. It
//! prints the time per hold of each, and each one's growth from the smallest N (medians): what
//! grows in both is the server's, what grows in lockkit's alone is the client's. It starts a
//! member from the test kit's fixture, or uses the server `LOCKKIT_ETCD_URL` names. Figures:
//! docs/PERFORMANCE.md ("Many holds").

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, missing_docs)]

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use lockkit_etcd::EtcdLockProvider;
use lockkit_etcd::etcd_client::Client;
use lockkit_testkit::fixture::EtcdServer;
use support::{acquire_txn, release_txn};

/// Acquisitions (and releases) in flight at once, as `lockkit bench --holds` sends them.
const IN_FLIGHT: usize = 100;

/// Runs `call` for every item, [`IN_FLIGHT`] at once: the replies, and how long they took.
async fn in_flight<I, T, F, Fut>(items: I, call: F) -> (Vec<T>, Duration)
where
    I: IntoIterator,
    F: FnMut(I::Item) -> Fut,
    Fut: Future<Output = T>,
{
    let started = Instant::now();
    let replies = futures_util::stream::iter(items).map(call).buffer_unordered(IN_FLIGHT).collect().await;
    (replies, started.elapsed())
}

/// lockkit: `n` locks taken, 100 in flight, then released; the time per hold of each.
async fn lockkit_holds(provider: &EtcdLockProvider, tag: &str, n: usize) -> (f64, f64) {
    let (guards, acquire) = in_flight(0..n, |i| {
        let lock = provider.lock(&format!("{tag}-{i}")).unwrap();
        async move { lock.acquire().await.unwrap() }
    })
    .await;
    let (_, release): (Vec<()>, _) = in_flight(guards, |guard| async move { guard.release().await.unwrap() }).await;
    (per_hold(acquire, n), per_hold(release, n))
}

/// The same two transactions sent raw for `n` names: the time per hold of each.
async fn raw_holds(client: &Client, base: &str, lease: i64, n: usize) -> (f64, f64) {
    let owner = "lockkit1 67e55044-10b1-426f-9247-bb680e5fe0c8 somehost 4242 1700000000000";
    let (keys, acquire) = in_flight(0..n, |i| {
        let mut client = client.clone();
        async move {
            let prefix = format!("{base}-{i}/");
            let key = format!("{prefix}{lease:x}");
            let void = format!("{base}-{i}-void/{lease:x}");
            let reply = client.txn(acquire_txn(&key, &void, &prefix, owner, lease)).await.unwrap();
            assert!(reply.succeeded());
            (key, reply.header().unwrap().revision())
        }
    })
    .await;
    let (_, release): (Vec<()>, _) = in_flight(keys, |(key, revision)| {
        let mut client = client.clone();
        async move { assert!(client.txn(release_txn(key, revision)).await.unwrap().succeeded()) }
    })
    .await;
    (per_hold(acquire, n), per_hold(release, n))
}

fn per_hold(took: Duration, n: usize) -> f64 {
    took.as_secs_f64() * 1e6 / n as f64
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(2, |a| a.parse().expect("ROUNDS is a number"));
    let counts: Vec<usize> = args.next().map_or_else(
        || vec![1_000, 10_000, 100_000],
        |a| a.split(',').map(|n| n.parse().expect("N,N,… are numbers")).collect(),
    );
    let url = EtcdServer::shared().await.unwrap_or_else(|e| panic!("{e}")).url();
    let provider = EtcdLockProvider::connect(&url).await.unwrap();
    let client = provider.etcd_client().await.unwrap();
    let lease = provider.lease_id().await.unwrap();
    let run = format!("holds-floor-{}", std::process::id());
    let base = provider.lock_prefix(&format!("{run}-raw")).unwrap();
    // Per N: lockkit's acquire and release per hold, the raw pair's.
    let mut figures: BTreeMap<usize, [Vec<f64>; 4]> = BTreeMap::new();
    for round in 0..rounds {
        for &n in &counts {
            // A small N is taken several times a round, so that each N is timed over a
            // comparable stretch of the machine's noise.
            for repeat in 0..(20_000 / n).clamp(1, 5) {
                let tag = format!("{round}-{n}-{repeat}");
                let (la, lr) = lockkit_holds(&provider, &format!("{run}-{tag}"), n).await;
                let (ra, rr) = raw_holds(&client, &format!("{base}-{tag}"), lease, n).await;
                println!(
                    "round {round} N {n:>6}: lockkit {la:7.1} / {lr:7.1} µs, raw {ra:7.1} / {rr:7.1} µs (acquire / release per hold)"
                );
                let entry = figures.entry(n).or_default();
                for (values, value) in entry.iter_mut().zip([la, lr, ra, rr]) {
                    values.push(value);
                }
            }
        }
    }
    println!("\nmedians, µs per hold; growth from N = {}:", counts[0]);
    println!(
        "{:>7} | {:>16} | {:>16} | {:>16} | {:>16}",
        "N", "lockkit acquire", "raw acquire", "lockkit release", "raw release"
    );
    let mut first: Option<[f64; 4]> = None;
    for (n, values) in &mut figures {
        let m = [median(&mut values[0]), median(&mut values[2]), median(&mut values[1]), median(&mut values[3])];
        let base = *first.get_or_insert(m);
        let cell = |i: usize| format!("{:7.1} ({:4.2}×)", m[i], m[i] / base[i]);
        println!("{n:>7} | {:>16} | {:>16} | {:>16} | {:>16}", cell(0), cell(1), cell(2), cell(3));
    }
}
