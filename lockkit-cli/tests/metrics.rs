//! `lockkit bench --metrics` prints what lockkit recorded, and `lockkit run --metrics-addr`
//! serves it to Prometheus (with the `prometheus` feature; without it the flag says how to
//! get it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;

const WITHIN: Duration = Duration::from_secs(60);

#[tokio::test]
async fn bench_with_metrics_prints_the_recorded_counters_and_histograms() {
    let args = ["bench", "--url", "mem://bench-metrics", "--duration", "100ms", "--locks", "20", "--metrics"];
    let out = run(&args, WITHIN).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("metrics recorded during the run"), "{}", out.stdout);
    let granted = "lockkit_acquisitions_total{backend=memory,kind=exclusive,outcome=granted}";
    assert!(out.stdout.contains(granted), "{}", out.stdout);
    assert!(out.stdout.contains("lockkit_acquire_wait_seconds{backend=memory,kind=exclusive,outcome=granted} count "));
    assert!(out.stdout.contains("lockkit_hold_seconds{"), "{}", out.stdout);

    let mut json_args = args.to_vec();
    json_args.push("--json");
    let out = run(&json_args, WITHIN).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON object");
    let metrics = json["metrics"].as_array().expect("a metrics array");
    assert!(
        metrics.iter().any(|m| m["name"] == "lockkit_acquisitions_total" && m["value"].as_u64() > Some(0)),
        "{metrics:?}"
    );
    assert!(metrics.iter().any(|m| m["name"] == "lockkit_hold_seconds" && m["p99"].is_f64()), "{metrics:?}");
}

#[cfg(not(feature = "prometheus"))]
#[tokio::test]
async fn metrics_addr_without_the_prometheus_feature_says_how_to_get_it() {
    let out = run(&["run", "x", "--url", "mem://", "--metrics-addr", "127.0.0.1:1", "--", "true"], WITHIN).await;
    assert_eq!(out.code, Some(USAGE), "{out:?}");
    assert!(out.stderr.contains("--features prometheus"), "{out:?}");
}

#[cfg(feature = "prometheus")]
#[tokio::test]
async fn run_serves_prometheus_text_while_the_command_runs() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let port = lockkit_testkit::fixture::free_port().unwrap();
    let addr = format!("127.0.0.1:{port}");
    let name = unique("metrics");
    let child = spawn(&["run", &name, "--url", "mem://", "--metrics-addr", &addr, "--", "sleep", "30"]);
    let wanted = "lockkit_acquisitions_total{backend=\"memory\",kind=\"exclusive\",outcome=\"granted\"} 1";
    let deadline = tokio::time::Instant::now() + WITHIN;
    let body = loop {
        assert!(tokio::time::Instant::now() < deadline, "no metrics served on {addr} within {WITHIN:?}");
        if let Ok(mut stream) = tokio::net::TcpStream::connect(&addr).await {
            stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").await.unwrap();
            let mut body = String::new();
            if stream.read_to_string(&mut body).await.is_ok() && body.contains(wanted) {
                break body;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(body.contains("# TYPE lockkit_acquire_wait_seconds"), "{body}");
    child.signal(rustix::process::Signal::TERM);
    let out = child.finish(WITHIN).await;
    assert_ne!(out.code, Some(USAGE), "{out:?}");
}
