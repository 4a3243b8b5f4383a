//! How soon a broken holder learns of the break, and how soon the next owner is granted, on
//! every backend: the figures of docs/PERFORMANCE.md ("Breaking a lock"). Not a check (it
//! asserts no time); run it by hand:
//!
//! ```text
//! cargo test -p lockkit-cli --test break_figures -- --ignored --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use lockkit_testkit::fixture::{PostgresServer, RedisConfig, RedisServer, ZkServer};

/// Breaks a held lock `samples` times on `url` and prints the time from the break to the
/// holder's loss signal and to the next owner's grant (median, min, max).
async fn measure(label: &str, url: &str, samples: u32) {
    let holder = lockkit::connect(url).await.unwrap();
    let operator = lockkit::connect(url).await.unwrap();
    let (mut lost, mut granted) = (Vec::new(), Vec::new());
    for i in 0..samples {
        let name = format!("break-figures/{}/{i}", uuid_like());
        let guard = holder.lock(&name).unwrap().acquire().await.unwrap();
        // Break at a different phase of the renewal or check timer each time.
        tokio::time::sleep(Duration::from_millis(137 * u64::from(i % 7))).await;
        let watcher = guard.watcher();
        let start = Instant::now();
        assert_eq!(operator.break_lock(&name).await.unwrap().len(), 1, "one hold broken");
        let next = operator.lock(&name).unwrap().acquire_timeout(Duration::from_secs(5)).await.unwrap();
        granted.push(start.elapsed());
        tokio::time::timeout(Duration::from_secs(60), watcher.lost()).await.expect("the holder learns of the break");
        lost.push(start.elapsed());
        assert!(next.token() > guard.token(), "the next owner's token is greater");
        drop(guard);
        next.release().await.unwrap();
    }
    lost.sort();
    granted.sort();
    let mid = lost.len() / 2;
    println!(
        "{label}: holder lost after {:?} (min {:?}, max {:?}); next owner granted after {:?} (n = {samples})",
        lost[mid],
        lost[0],
        lost[lost.len() - 1],
        granted[mid]
    );
}

fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints figures; run by hand with --ignored --nocapture"]
async fn how_soon_a_broken_holder_learns_of_it() {
    measure("mem://", "mem://break-figures", 20).await;
    let dir = tempfile::tempdir().unwrap();
    measure("file://, check_every 1s (default)", &format!("file://{}", dir.path().display()), 10).await;
    measure("file://, check_every 200ms", &format!("file://{}?check_every=200ms", dir.path().display()), 10).await;
    let zk = ZkServer::start().await.unwrap();
    measure("zk://", &format!("zk://{}", zk.connect_string()), 20).await;
    let redis = RedisServer::start().await.unwrap();
    measure("redis://, lease 3s (renewed every 1s)", &format!("{}?lease=3s", redis.url()), 10).await;
    measure("redis://, lease 30s (default, renewed every 10s)", &redis.url(), 5).await;
    let config =
        RedisConfig { extra_args: vec!["--notify-keyspace-events".into(), "Kg".into()], ..RedisConfig::default() };
    let events = RedisServer::start_with(config).await.unwrap();
    measure("redis://, lease 30s, keyspace events Kg", &events.url(), 20).await;
}

/// PostgreSQL on its own: `cargo test -p lockkit-cli --test break_figures postgres -- --ignored
/// --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints figures; run by hand with --ignored --nocapture"]
async fn how_soon_a_broken_postgres_holder_learns_of_it() {
    let postgres = PostgresServer::start().await.unwrap();
    measure("postgres://, lease 3s (renewed every 1s)", &format!("{}?lease=3s", postgres.url()), 10).await;
    measure("postgres://, lease 30s (default, renewed every 10s)", &postgres.url(), 5).await;
}
