//! Times contended hand-offs on etcd and shows what happened during the slow ones:
//! `cargo run --release -p lockkit-etcd --example etcd_waits [-- CLIENTS SECONDS [SLOW_MS]]`.
//!
//! Like the contended phase of `lockkit bench`, CLIENTS providers (8 by default) take one lock
//! in turn for SECONDS (5 by default), each acquisition timed from its call to its grant. The
//! waits longer than SLOW_MS (ten times the median by default) are printed with every event lockkit-etcd traced
//! (at trace level) during them, each with its offset from the start of the run, so that a
//! wait that sits out a server's period shows which step it sat in. It starts a member from
//! the test kit's fixture, or uses the server `LOCKKIT_ETCD_URL` names. Figures:
//! docs/PERFORMANCE.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, missing_docs)]

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use lockkit_etcd::EtcdLockProvider;
use lockkit_testkit::fixture::EtcdServer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// When the run started: every offset printed counts from it.
static START: OnceLock<Instant> = OnceLock::new();

/// Every traced event: when, and what it said.
static EVENTS: Mutex<Vec<(Duration, String)>> = Mutex::new(Vec::new());

/// A subscriber that keeps lockkit-etcd's events in memory (no dependency beyond `tracing`).
struct Recorder {
    next_span: AtomicU64,
}

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("lockkit_etcd")
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let at = START.get().map(Instant::elapsed).unwrap_or_default();
        let mut line = Line(String::new());
        event.record(&mut line);
        EVENTS.lock().unwrap().push((at, line.0));
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let clients: usize = args.next().map_or(8, |a| a.parse().expect("CLIENTS is a number"));
    let seconds: u64 = args.next().map_or(5, |a| a.parse().expect("SECONDS is a number"));
    let slow_ms: Option<u64> = args.next().map(|a| a.parse().expect("SLOW_MS is a number"));
    // The environment's server when LOCKKIT_ETCD_URL names one, else one started for this run.
    let url = EtcdServer::shared().await.unwrap_or_else(|e| panic!("{e}")).url();
    tracing::subscriber::set_global_default(Recorder { next_span: AtomicU64::new(0) }).unwrap();
    let name = format!("waits-{}", std::process::id());
    let mut providers = Vec::new();
    for _ in 0..clients {
        providers.push(EtcdLockProvider::connect(&url).await.unwrap());
    }
    let start = *START.get_or_init(Instant::now);
    let stop_at = start + Duration::from_secs(seconds);
    let waits = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (client, provider) in providers.iter().enumerate() {
        let lock = provider.lock(&name).unwrap();
        let waits = Arc::clone(&waits);
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop_at {
                let asked = start.elapsed();
                let guard = lock.acquire().await.unwrap();
                let granted = start.elapsed();
                waits.lock().unwrap().push((client, asked, granted, guard.token().get()));
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut waits = waits.lock().unwrap().clone();
    let mut lengths: Vec<Duration> = waits.iter().map(|&(_, asked, granted, _)| granted - asked).collect();
    lengths.sort();
    let p50 = lengths[lengths.len() / 2];
    let max = lengths[lengths.len() - 1];
    println!(
        "{} acquisitions by {clients} clients in {seconds} s: wait p50 {p50:?}, p99 {:?}, max {max:?} ({:.1}x p50)",
        lengths.len(),
        lengths[lengths.len() * 99 / 100],
        max.as_secs_f64() / p50.as_secs_f64().max(1e-9)
    );
    waits.sort_by_key(|&(_, asked, _, _)| asked);
    let events = EVENTS.lock().unwrap();
    let slow = slow_ms.map_or(p50 * 10, Duration::from_millis);
    for &(client, asked, granted, token) in waits.iter().filter(|&&(_, a, g, _)| g - a > slow) {
        println!(
            "\nclient {client} waited {:?}: asked at {asked:?}, granted at {granted:?}, token {token}",
            granted - asked
        );
        for (at, line) in events.iter().filter(|(at, _)| *at >= asked && *at <= granted) {
            println!("  {at:>12?}{line}");
        }
    }
}
