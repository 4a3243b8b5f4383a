//! `lockkit bench`: short smoke runs against real servers that check the output's shape and
//! the JSON, never timings.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::Duration;

use lockkit_testkit::fixture::{PostgresServer, RedisServer, ZkServer};
use serde_json::Value;

use common::run;

const WITHIN: Duration = Duration::from_secs(120);

/// A short run: 300 ms phases, 2 clients, 50 locks.
async fn bench_json(url: &str) -> Value {
    let done =
        run(&["bench", "--url", url, "--duration", "300ms", "--clients", "2", "--locks", "50", "--json"], WITHIN).await;
    assert_eq!(done.code, Some(0), "{done:?}");
    serde_json::from_str(done.stdout.trim()).unwrap_or_else(|e| panic!("not one JSON object ({e}): {}", done.stdout))
}

fn number(json: &Value, section: &str, key: &str) -> f64 {
    json[section][key].as_f64().unwrap_or_else(|| panic!("{section}.{key} missing in {json:#}"))
}

/// What every run against a server shows: each of the floor's `figures` measured, the
/// uncontended cycle's ratio to the floor, and what [`check_common`] checks.
fn check_floored(json: &Value, figures: &[&str]) {
    for key in figures {
        assert!(number(json, "floor", key) > 0.0, "{key}");
    }
    assert!(number(json, "uncontended", "cycle_p50_ratio") > 0.0);
    check_common(json, 50.0);
}

/// The figures every backend reports.
fn check_common(json: &Value, locks: f64) {
    assert_eq!(json["settings"]["clients"], 2);
    assert_eq!(json["settings"]["locks"], 50);
    for key in ["cycles_per_s", "cycle_p50_us", "cycle_p99_us"] {
        assert!(number(json, "uncontended", key) > 0.0, "{key}");
    }
    assert!(number(json, "contended", "acquisitions_per_s") > 0.0);
    let share = number(json, "contended", "handoff_share");
    assert!((0.0..=1.0).contains(&share), "{share}");
    for key in ["wait_p50_us", "wait_p99_us", "wait_max_us", "handoff_p50_us", "release_p50_us"] {
        number(json, "contended", key);
    }
    assert_eq!(number(json, "upkeep", "held"), locks, "every hold survived");
    number(json, "upkeep", "memory_per_lock_bytes");
    for key in ["sequential_s", "concurrent_s", "speedup"] {
        assert!(number(json, "many_locks", key) > 0.0, "{key}");
    }
    assert!(json["targets"].is_array() && json["notes"].is_array());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_on_redis_reports_every_figure_with_its_ratio_to_ping() {
    let url = RedisServer::shared().await.expect("redis-server starts").url();
    let json = bench_json(&url).await;
    assert_eq!(json["backend"], "redis");
    assert!(json["floor_kind"].as_str().is_some_and(|floor| floor.contains("PING")), "{json:#}");
    assert!(number(&json, "contended", "handoff_p50_ratio") >= 0.0);
    assert!(number(&json, "upkeep", "round_trips_per_tick") >= 1.0);
    // The server's time per script, each from a phase that runs that script only.
    for key in ["acquire_script_new_name_us", "acquire_script_us", "release_script_us", "renew_script_us"] {
        assert!(number(&json, "server", key) > 0.0, "{key}");
    }
    check_floored(&json, &["ping_p50_us", "scripts_raw_p50_us"]);
    let targets: Vec<&str> = json["targets"].as_array().unwrap().iter().filter_map(|t| t["figure"].as_str()).collect();
    for figure in [
        "uncontended.cycle_p50_us",
        "contended.handoff_share",
        "contended.handoff_p50_us",
        "contended.wait_max_over_p50",
        "upkeep.round_trips_per_tick",
        "upkeep.memory_per_lock_bytes",
        "server.acquire_script_us",
        "server.release_script_us",
    ] {
        assert!(targets.contains(&figure), "{figure} in {targets:?}");
    }
}

/// `lockkit bench --url redis+cluster://…`: the floor is a PING to the primary of the raw
/// key's slot, and every figure has its ratio; the fence counters it made are deleted
/// across the primaries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_on_a_redis_cluster_reports_every_figure_with_its_ratio_to_ping() {
    let cluster = lockkit_testkit::fixture::RedisCluster::start().await.expect("a Redis Cluster forms");
    let json = bench_json(&cluster.url()).await;
    assert_eq!(json["backend"], "redis");
    assert!(json["floor_kind"].as_str().is_some_and(|floor| floor.contains("slot")), "{json:#}");
    assert!(number(&json, "contended", "handoff_p50_ratio") >= 0.0);
    assert!(number(&json, "upkeep", "round_trips_per_tick") >= 1.0);
    check_floored(&json, &["ping_p50_us", "scripts_raw_p50_us"]);
    let notes = json["notes"].to_string();
    assert!(!notes.contains("could not be deleted"), "{notes}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_on_zookeeper_reports_both_floors() {
    let url = format!("zk://{}", ZkServer::shared().await.expect("ZooKeeper starts").connect_string());
    let json = bench_json(&url).await;
    assert_eq!(json["backend"], "zk");
    check_floored(&json, &["exists_p50_us", "create_delete_p50_us", "recipe_raw_p50_us", "delete_notify_p50_us"]);
    assert!(json["targets"].as_array().unwrap().iter().any(|t| t["figure"] == "many_locks.speedup"));
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_on_etcd_reports_its_floors_and_the_lock_service_beside() {
    let url = lockkit_testkit::fixture::EtcdServer::shared().await.expect("etcd starts").url();
    let json = bench_json(&url).await;
    assert_eq!(json["backend"], "etcd");
    assert!(json["floor_kind"].as_str().is_some_and(|floor| floor.contains("put+delete")), "{json:#}");
    check_floored(&json, &["get_p50_us", "put_delete_p50_us", "lock_service_p50_us"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_on_postgres_reports_select_1_and_the_one_row_commits_beside() {
    let server = PostgresServer::shared().await.expect("PostgreSQL starts");
    let json = bench_json(&server.url()).await;
    assert_eq!(json["backend"], "postgres");
    check_floored(&json, &["select1_p50_us", "commit_p50_us", "commit_async_p50_us"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_on_files_has_no_floor_and_leaves_no_lock_files() {
    let dir = tempfile::tempdir().unwrap();
    let json = bench_json(&format!("file://{}", dir.path().display())).await;
    assert_eq!(json["backend"], "file");
    assert!(json["floor_kind"].is_null() && json["floor"].is_null());
    assert!(json["uncontended"]["cycle_p50_ratio"].is_null(), "no floor, no ratio");
    check_common(&json, 50.0);
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|name| name.to_string_lossy().starts_with("lockkit-bench"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_prints_a_table_by_default_and_refuses_bad_numbers() {
    let done = run(&["bench", "--url", "mem://bench-table", "--duration", "100ms", "--locks", "20"], WITHIN).await;
    assert_eq!(done.code, Some(0), "{done:?}");
    for line in
        ["lockkit bench on mem://bench-table", "floor: none", "uncontended", "contended", "upkeep", "many_locks"]
    {
        assert!(done.stdout.contains(line), "{line:?} in\n{}", done.stdout);
    }
    let bad = run(&["bench", "--url", "mem://", "--clients", "1"], WITHIN).await;
    assert_eq!(bad.code, Some(common::USAGE), "{bad:?}");
}

/// `lockkit bench --holds N --json` on `url`.
async fn holds_json(url: &str, holds: &str) -> Value {
    let done = run(&["bench", "--url", url, "--holds", holds, "--json"], WITHIN).await;
    assert_eq!(done.code, Some(0), "{done:?}");
    serde_json::from_str(done.stdout.trim()).unwrap_or_else(|e| panic!("not one JSON object ({e}): {}", done.stdout))
}

/// The figures of the holds phase every backend reports.
fn check_holds(json: &Value, holds: f64) {
    assert_eq!(number(json, "holds", "holds"), holds);
    assert_eq!(number(json, "holds", "lost"), 0.0, "no hold lost: {json:#}");
    for key in ["acquire_all_s", "acquire_per_hold_us", "release_all_s", "release_per_hold_us"] {
        assert!(number(json, "holds", key) > 0.0, "{key}");
    }
    number(json, "holds", "memory_per_hold_bytes");
    number(json, "holds", "memory_warm_up_bytes");
    assert!(number(json, "holds", "client_cpu_per_s_ms") >= 0.0);
    // Within the lease (3 s where the backend has none): a deleted record is found among all.
    let lease_ms = json["holds"]["lease_s"].as_f64().unwrap_or(3.0) * 1e3;
    assert!(number(json, "holds", "broken_noticed_ms") <= lease_ms, "the broken hold's loss was seen: {json:#}");
    assert!(json["uncontended"].is_null() && json["upkeep"].is_null(), "--holds runs the holds phase only");
    if !json["holds"]["renewal_rounds"].is_null() {
        // Rounds of a few hundred holds take a round trip or a few, far below the lease.
        let longest = number(json, "holds", "longest_round_ms");
        assert!(longest > 0.0 && longest < lease_ms, "the longest renewal round: {json:#}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_holds_on_redis_counts_renewal_round_trips_and_server_time() {
    let url = RedisServer::shared().await.expect("redis-server starts").url();
    let json = holds_json(&url, "300").await;
    check_holds(&json, 300.0);
    assert_eq!(number(&json, "holds", "lease_s"), 3.0, "the short lease of the Redis profile");
    assert!(number(&json, "holds", "renewal_rounds") >= 3.0, "{json:#}");
    assert_eq!(number(&json, "holds", "round_trips_per_round"), 1.0, "300 renewals in one pipeline");
    assert!(number(&json, "holds", "server_time_per_round_us") > 0.0);
    let targets = json["targets"].to_string();
    assert!(targets.contains("holds.round_trips_per_round") && targets.contains("holds.lost"), "{targets}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_holds_on_memory_has_no_lease_and_files_are_bounded() {
    let json = holds_json("mem://bench-holds", "200").await;
    check_holds(&json, 200.0);
    assert!(json["holds"]["lease_s"].is_null() && json["holds"]["renewal_rounds"].is_null(), "{json:#}");
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let refused = run(&["bench", "--url", &url, "--holds", "100001"], WITHIN).await;
    assert_eq!(refused.code, Some(common::USAGE), "{refused:?}");
    assert!(refused.stderr.contains("--holds above 100000"), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_holds_on_postgres_renews_every_hold_in_one_round_trip() {
    let server = PostgresServer::shared().await.expect("PostgreSQL starts");
    let json = holds_json(&server.url(), "300").await;
    check_holds(&json, 300.0);
    assert!(number(&json, "holds", "renewal_rounds") >= 3.0, "{json:#}");
    assert_eq!(number(&json, "holds", "round_trips_per_round"), 1.0, "{json:#}");
}
