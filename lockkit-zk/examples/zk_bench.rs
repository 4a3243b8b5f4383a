//! Figures for the ZooKeeper backend: uncontended cycle against the raw create+delete floor,
//! handoff under contention, and many distinct locks on one session.
//!
//! Starts a standalone ZooKeeper from the testkit fixture, or uses `LOCKKIT_ZK_ADDR`.
//! Run it in release mode: `cargo run --release -p lockkit-zk --example zk_bench`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkit_core::LockProvider;
use lockkit_testkit::fixture::zk::ZkServer;
use lockkit_zk::ZkLockProvider;
use lockkit_zk::zookeeper_client as zk;

const ROUNDS: usize = 5;
const PER_ROUND: usize = 400;
const CONTENDERS: usize = 8;
const CONTENTION_TIME: Duration = Duration::from_secs(5);
const DISTINCT: usize = 10_000;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (_server, connect) = match std::env::var("LOCKKIT_ZK_ADDR") {
        Ok(addr) if !addr.is_empty() => (None, addr),
        _ => {
            let server = ZkServer::start().await.expect("start ZooKeeper (java and zookeeper.jar are needed)");
            let connect = server.connect_string();
            (Some(server), connect)
        }
    };
    let base = format!("/lockkit-bench-{}", uuid::Uuid::new_v4().simple());
    let provider = || {
        ZkLockProvider::builder()
            .connect_string(connect.clone())
            .base_path(base.clone())
            .session_timeout(Duration::from_secs(10))
            .build()
    };
    let p = provider().await.unwrap();
    println!("ZooKeeper at {connect}, base path {base}");

    // 1. Uncontended acquire+release cycle versus the raw floor, interleaved in rounds.
    let client = p.zk_client().await.unwrap();
    let raw_path = format!("{base}/raw-floor");
    let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    let lock = p.lock("bench/uncontended").unwrap();
    for _ in 0..200 {
        lock.acquire().await.unwrap().release().await.unwrap();
        client.create(&raw_path, &[], &options).await.unwrap();
        client.delete(&raw_path, None).await.unwrap();
    }
    let (mut cycles, mut floors, mut recipe) = (Vec::new(), Vec::new(), Vec::new());
    let sequential = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let recipe_dir = format!("{base}/recipe-floor");
    client.create(&recipe_dir, &[], &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())).await.unwrap();
    let recipe_prefix = format!("{recipe_dir}/n-");
    for _ in 0..ROUNDS {
        for _ in 0..PER_ROUND {
            let start = Instant::now();
            lock.acquire().await.unwrap().release().await.unwrap();
            cycles.push(start.elapsed());
        }
        for _ in 0..PER_ROUND {
            let start = Instant::now();
            client.create(&raw_path, &[], &options).await.unwrap();
            client.delete(&raw_path, None).await.unwrap();
            floors.push(start.elapsed());
        }
        for _ in 0..PER_ROUND {
            // The recipe's own requests, bare: create and list pipelined, then delete.
            let start = Instant::now();
            let create = client.create(&recipe_prefix, &[], &sequential);
            let list = client.list_children(&recipe_dir);
            let (_, sequence) = create.await.unwrap();
            list.await.unwrap();
            client.delete(&format!("{recipe_prefix}{sequence}"), None).await.unwrap();
            recipe.push(start.elapsed());
        }
    }
    let (c50, c99) = (percentile(&mut cycles, 50.0), percentile(&mut cycles, 99.0));
    let (f50, f99) = (percentile(&mut floors, 50.0), percentile(&mut floors, 99.0));
    println!("uncontended acquire+release: p50 {c50:?} p99 {c99:?} ({} cycles)", cycles.len());
    let (r50, r99) = (percentile(&mut recipe, 50.0), percentile(&mut recipe, 99.0));
    println!("raw create+delete (floor):   p50 {f50:?} p99 {f99:?}");
    println!("raw create+list+delete:      p50 {r50:?} p99 {r99:?} (the recipe's requests, no lockkit)");
    println!(
        "ratio to the floor:          p50 {:.2}x p99 {:.2}x",
        c50.as_secs_f64() / f50.as_secs_f64(),
        c99.as_secs_f64() / f99.as_secs_f64()
    );
    println!(
        "ratio to create+list+delete: p50 {:.2}x p99 {:.2}x",
        c50.as_secs_f64() / r50.as_secs_f64(),
        c99.as_secs_f64() / r99.as_secs_f64()
    );

    // 2. Handoff with 8 contending clients (8 sessions) on one lock.
    let mut clients = Vec::new();
    for _ in 0..CONTENDERS {
        clients.push(provider().await.unwrap());
    }
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let handoffs: Arc<Mutex<Vec<Duration>>> = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let end = started + CONTENTION_TIME;
    let mut tasks = Vec::new();
    for client in &clients {
        let lock = client.lock("bench/contended").unwrap();
        let (released_at, handoffs) = (released_at.clone(), handoffs.clone());
        tasks.push(tokio::spawn(async move {
            let mut count = 0usize;
            while Instant::now() < end {
                let guard = lock.acquire().await.unwrap();
                if let Some(at) = released_at.lock().unwrap().take() {
                    handoffs.lock().unwrap().push(at.elapsed());
                }
                count += 1;
                *released_at.lock().unwrap() = Some(Instant::now());
                guard.release().await.unwrap();
            }
            count
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    let elapsed = started.elapsed();
    let mut handoffs = handoffs.lock().unwrap().clone();
    println!(
        "{CONTENDERS} contending clients: {total} acquisitions in {elapsed:.2?} = {:.0}/s; handoff p50 {:?} p99 {:?}",
        total as f64 / elapsed.as_secs_f64(),
        percentile(&mut handoffs, 50.0),
        percentile(&mut handoffs, 99.0)
    );

    // 3. 10,000 distinct locks on one session, one after another, then all at once.
    let start = Instant::now();
    for i in 0..DISTINCT {
        let lock = p.lock(&format!("bench/sequential/{i}")).unwrap();
        lock.acquire().await.unwrap().release().await.unwrap();
    }
    let sequential = start.elapsed();
    println!(
        "{DISTINCT} distinct locks, sequential: {sequential:.2?} ({:.0} µs per acquire+release)",
        sequential.as_micros() as f64 / DISTINCT as f64
    );
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..DISTINCT {
        let lock = p.lock(&format!("bench/concurrent/{i}")).unwrap();
        tasks.spawn(async move { lock.acquire().await.unwrap().release().await.unwrap() });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let concurrent = start.elapsed();
    println!(
        "{DISTINCT} distinct locks, concurrent on one session: {concurrent:.2?} ({:.0} acquire+release/s)",
        DISTINCT as f64 / concurrent.as_secs_f64()
    );
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort();
    let rank = ((p / 100.0) * (samples.len() - 1) as f64).round() as usize;
    samples[rank.min(samples.len() - 1)]
}
