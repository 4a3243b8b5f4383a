//! `lockkit bench`: measures a lock store against the raw round trip of the same client
//! library to the same server, in one run, like `redis-benchmark` for locks.
//!
//! Phases, in order (every lock name starts with `lockkit-bench/<run id>/`):
//! 1. floor and uncontended, interleaved in rounds so both see the same load: the raw round
//!    trip ([`floor`]) and one client's acquire+release cycles of one lock;
//! 2. contended: `--clients` clients (each its own connection or session) on one lock, each
//!    acquiring, recording, releasing, for `--duration`; then, on backends that have them,
//!    the shared-lock and semaphore phases ([`shared`]) and the failover of an election
//!    ([`election`]);
//! 3. many locks: `--locks` distinct locks acquired and released one after another, then all
//!    at once on one client;
//! 4. Redis: the server's time per acquire and per release script, each phase running that
//!    script only (2,000 free locks acquired, then released; `INFO commandstats` deltas);
//! 5. held-lock upkeep: `--locks` locks held for a few renewal rounds (Redis and PostgreSQL:
//!    round trips per tick from the renewal counters; Redis: the server's time per renew
//!    script over those ticks), client CPU and resident memory per held lock.

mod election;
mod floor;
mod report;
mod shared;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lockkit::sync::lock_or_recover;
use lockkit::{LockHandle, LockProvider};
use serde_json::Value;

use self::floor::Floor;
use self::report::{Latency, Report, Unit};
use crate::cli::BenchArgs;
use crate::exit::{Code, Failure, USAGE};
use crate::target::Target;

/// The table shown by `lockkit bench --help`.
pub(crate) const EXIT_TABLE: &str = "\
Exit status:
  0    the run finished and the figures were printed
  64   usage error: bad arguments, bad URL, bad duration
  69   the store could not be reached
  76   the store answered with an error (for example: permission denied)";

/// The store URL as the facade parses it, for the parts of the benchmark that need the
/// backend's own client. The lock figures go through [`lockkit::connect`] with the URL as
/// given.
#[derive(Debug, Clone)]
pub(crate) struct Url {
    store: lockkit::config::StoreUrl,
    /// The URL with no password, for messages.
    shown: String,
}

impl Url {
    fn parse(url: &str, shown: &str) -> Result<Self, Failure> {
        let store = lockkit::config::StoreUrl::parse(url).map_err(|e| Failure::from_lock_error(&e, "bench"))?;
        Ok(Self { store, shown: shown.to_owned() })
    }

    fn backend(&self) -> &'static str {
        match self.store.scheme() {
            "redis" | "rediss" | "redis+sentinel" | "rediss+sentinel" | "redis+cluster" | "rediss+cluster" => "redis",
            "zk" => "zk",
            "postgres" | "postgresql" => "postgres",
            "etcd" | "etcds" => "etcd",
            "file" => "file",
            "mem" => "mem",
            _ => "unknown",
        }
    }
}

/// A short id of this run, unique enough to keep runs on one server apart.
pub(crate) fn run_id() -> String {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        format!("{}-{nanos:x}", std::process::id())
    })
    .clone()
}

/// The runtime state every phase shares.
struct Bench {
    args: BenchArgs,
    target: Target,
    url: Url,
    prefix: String,
    provider: LockProvider,
    floor: Option<Floor>,
    /// The floor's p50 in µs, once measured.
    floor_p50: Option<f64>,
    /// The uncontended mutex cycle's p50 in µs, once measured.
    cycle_p50: f64,
    /// Redis: the server's time per call of each script (JSON key, label, µs), measured
    /// around phases that run that script only.
    scripts: Vec<(&'static str, &'static str, f64)>,
    report: Report,
}

/// Runs `lockkit bench`; prints the table (or `--json`) and exits 0.
pub(crate) async fn bench(args: BenchArgs) -> Result<Code, Failure> {
    let recorded = if args.metrics { Some(crate::metrics::Recorded::install()?) } else { None };
    let target = Target::resolve(args.url.clone());
    let prefix = format!("lockkit-bench/{}", run_id());
    let provider = target.connect(&prefix, false).await?;
    // The same choice as Target::resolve: --url, else LOCKKIT_URL, else the default.
    let raw_url = args.url.clone().unwrap_or_else(lockkit::url_from_env);
    let url = Url::parse(&raw_url, target.shown())?;
    if url.backend() == "file" && args.locks > 100_000 {
        return Err(Failure::new(USAGE, "--locks above 100000 on file:// would leave as many lock files behind"));
    }
    let floor = Floor::open(&url).await?;
    let report = Report {
        url: url.shown.clone(),
        backend: url.backend(),
        settings: vec![
            ("clients", Value::from(args.clients)),
            ("duration_s", Value::from(args.duration.as_secs_f64())),
            ("locks", Value::from(args.locks)),
        ],
        floor: floor.as_ref().map(|f| f.describe().to_owned()),
        ..Report::default()
    };
    let mut bench = Bench {
        args,
        target,
        url,
        prefix,
        provider,
        floor,
        floor_p50: None,
        cycle_p50: 0.0,
        scripts: Vec::new(),
        report,
    };
    bench.uncontended().await?;
    bench.contended().await?;
    bench.shared(bench.cycle_p50).await?;
    bench.semaphore().await?;
    bench.election().await?;
    // Many locks before upkeep: the allocator then already has the memory that 10,000
    // acquisitions in flight need, and the resident memory grows by what the holds keep.
    bench.many_locks().await?;
    if bench.url.backend() == "redis" {
        bench.script_costs().await?;
    }
    bench.upkeep().await?;
    bench.server_stats().await;
    if bench.url.backend() == "redis" {
        bench.remove_fence_counters().await;
    }
    if bench.url.backend() == "file" {
        bench.remove_lock_files();
    }
    if bench.args.json {
        let mut json = bench.report.json();
        if let (Some(recorded), Value::Object(root)) = (&recorded, &mut json) {
            root.insert("metrics".into(), recorded.json());
        }
        println!("{json}");
    } else {
        println!("{}", bench.report.table());
        if let Some(recorded) = &recorded {
            println!("\n{}", recorded.table());
        }
    }
    Ok(0)
}

impl Bench {
    fn name(&self, what: &str) -> String {
        format!("{}/{what}", self.prefix)
    }

    fn lock(&self, provider: &LockProvider, name: &str) -> Result<LockHandle, Failure> {
        provider.lock(name).map_err(|e| Failure::from_lock_error(&e, &format!("lock {name:?}")))
    }

    fn fail(&self, name: &str, what: &str) -> impl Fn(lockkit::Error) -> Failure + use<> {
        let context = format!("{what} lock {name:?} on {}", self.target.shown());
        move |e: lockkit::Error| Failure::from_lock_error(&e, &context)
    }

    /// `value ÷ floor p50`, when there is a floor.
    fn ratio(&self, micros: f64) -> Option<f64> {
        self.floor_p50.filter(|f| *f > 0.0).map(|f| micros / f)
    }

    /// For a rate: the rate times the floor's p50 (the share of one connection's raw round
    /// trips per second).
    fn rate_ratio(&self, per_second: f64) -> Option<f64> {
        self.floor_p50.map(|f| per_second * f / 1e6)
    }

    /// Floor and uncontended cycles, interleaved in rounds of 100 for `--duration`.
    async fn uncontended(&mut self) -> Result<(), Failure> {
        let name = self.name("uncontended");
        let lock = self.lock(&self.provider, &name)?;
        let fail = self.fail(&name, "acquire+release of");
        // Warm up: connections, script cache, containers, allocator.
        for _ in 0..100 {
            lock.acquire().await.map_err(&fail)?.release().await.map_err(&fail)?;
            if let Some(floor) = &mut self.floor {
                floor.sample(&self.url).await?;
            }
        }
        let (mut cycles, mut floor_main, mut floor_exists, mut floor_recipe, mut floor_notify) =
            (Latency::new(), Latency::new(), Latency::new(), Latency::new(), Latency::new());
        let (mut floor_commit, mut floor_commit_async) = (Latency::new(), Latency::new());
        let started = Instant::now();
        let mut cycle_time = Duration::ZERO;
        while started.elapsed() < self.args.duration || cycles.len() < 100 {
            if let Some(floor) = &mut self.floor {
                for _ in 0..100 {
                    let sample = floor.sample(&self.url).await?;
                    floor_main.record(sample.main);
                    if let Some(exists) = sample.exists {
                        floor_exists.record(exists);
                    }
                    if let Some(recipe) = sample.recipe {
                        floor_recipe.record(recipe);
                    }
                    if let Some(notify) = sample.notify {
                        floor_notify.record(notify);
                    }
                    if let Some((flushed, unflushed)) = sample.commit {
                        floor_commit.record(flushed);
                        floor_commit_async.record(unflushed);
                    }
                }
            }
            let round = Instant::now();
            for _ in 0..100 {
                let start = Instant::now();
                lock.acquire().await.map_err(&fail)?.release().await.map_err(&fail)?;
                cycles.record(start.elapsed());
            }
            cycle_time += round.elapsed();
        }
        let section = "floor";
        match self.url.backend() {
            "redis" => {
                self.floor_p50 = Some(floor_main.micros(0.5));
                self.report.add_ratio(section, "ping_p50", "PING p50", floor_main.micros(0.5), Unit::Micros, Some(1.0));
                self.report.add(section, "ping_p99", "PING p99", floor_main.micros(0.99), Unit::Micros);
                let r50 = floor_recipe.micros(0.5);
                let ratio = self.ratio(r50);
                self.report.add_ratio(
                    section,
                    "scripts_raw_p50",
                    "acquire+release scripts raw, no lockkit, p50",
                    r50,
                    Unit::Micros,
                    ratio,
                );
            }
            "zk" => {
                self.floor_p50 = Some(floor_main.micros(0.5));
                let r = |v: f64| self.ratio(v);
                let (e50, e99, c50, c99, r50) = (
                    floor_exists.micros(0.5),
                    floor_exists.micros(0.99),
                    floor_main.micros(0.5),
                    floor_main.micros(0.99),
                    floor_recipe.micros(0.5),
                );
                let (re50, rr50) = (r(e50), r(r50));
                self.report.add_ratio(section, "exists_p50", "exists p50", e50, Unit::Micros, re50);
                self.report.add(section, "exists_p99", "exists p99", e99, Unit::Micros);
                self.report.add_ratio(section, "create_delete_p50", "create+delete p50", c50, Unit::Micros, Some(1.0));
                self.report.add(section, "create_delete_p99", "create+delete p99", c99, Unit::Micros);
                self.report.add_ratio(
                    section,
                    "recipe_raw_p50",
                    "recipe's requests raw (create+list, delete) p50",
                    r50,
                    Unit::Micros,
                    rr50,
                );
                let n50 = floor_notify.micros(0.5);
                let ratio = self.ratio(n50);
                self.report.add_ratio(
                    section,
                    "delete_notify_p50",
                    "raw hand-off: delete → notification on another session p50",
                    n50,
                    Unit::Micros,
                    ratio,
                );
            }
            "postgres" => {
                self.floor_p50 = Some(floor_main.micros(0.5));
                let (p50, p99) = (floor_main.micros(0.5), floor_main.micros(0.99));
                self.report.add_ratio(section, "select1_p50", "SELECT 1 p50", p50, Unit::Micros, Some(1.0));
                self.report.add(section, "select1_p99", "SELECT 1 p99", p99, Unit::Micros);
                if floor_commit.len() > 0 {
                    let (c50, a50) = (floor_commit.micros(0.5), floor_commit_async.micros(0.5));
                    let (rc, ra) = (self.ratio(c50), self.ratio(a50));
                    self.report.add_ratio(
                        section,
                        "commit_p50",
                        "one-row commit p50 (WAL flush)",
                        c50,
                        Unit::Micros,
                        rc,
                    );
                    self.report.add_ratio(
                        section,
                        "commit_async_p50",
                        "one-row commit p50, synchronous_commit off",
                        a50,
                        Unit::Micros,
                        ra,
                    );
                }
            }
            "etcd" => {
                self.floor_p50 = Some(floor_main.micros(0.5));
                let (g50, g99, c50, c99, l50) = (
                    floor_exists.micros(0.5),
                    floor_exists.micros(0.99),
                    floor_main.micros(0.5),
                    floor_main.micros(0.99),
                    floor_recipe.micros(0.5),
                );
                let (rg50, rl50) = (self.ratio(g50), self.ratio(l50));
                self.report.add_ratio(section, "get_p50", "Get p50", g50, Unit::Micros, rg50);
                self.report.add(section, "get_p99", "Get p99", g99, Unit::Micros);
                self.report.add_ratio(
                    section,
                    "put_delete_p50",
                    "put+delete bound to a lease p50",
                    c50,
                    Unit::Micros,
                    Some(1.0),
                );
                self.report.add(section, "put_delete_p99", "put+delete bound to a lease p99", c99, Unit::Micros);
                self.report.add_ratio(
                    section,
                    "lock_service_p50",
                    "etcd's own Lock+Unlock service cycle, no lockkit, p50",
                    l50,
                    Unit::Micros,
                    rl50,
                );
            }
            _ => {}
        }
        let section = "uncontended";
        let rate = cycles.len() as f64 / cycle_time.as_secs_f64().max(1e-9);
        let (p50, p99) = (cycles.micros(0.5), cycles.micros(0.99));
        self.cycle_p50 = p50;
        self.report.add(
            "uncontended",
            "cycles_measured",
            "acquire+release cycles measured",
            cycles.len() as f64,
            Unit::Count,
        );
        self.report.add_ratio(section, "cycles", "cycles/s, one client", rate, Unit::PerSecond, self.rate_ratio(rate));
        self.report.add_ratio(section, "cycle_p50", "cycle p50", p50, Unit::Micros, self.ratio(p50));
        match self.url.backend() {
            "redis" => self.report.target("≤ 2.2× PING p50", |_, r| r.is_some_and(|r| r <= 2.2)),
            "zk" => self.report.target("≤ 1.3× create+delete p50", |_, r| r.is_some_and(|r| r <= 1.3)),
            "postgres" => self.report.target("≤ 3× SELECT 1 p50", |_, r| r.is_some_and(|r| r <= 3.0)),
            _ => {}
        }
        let p99_ratio = self.floor.as_ref().map(|_| p99 / floor_main.micros(0.99).max(1e-9));
        self.report.add_ratio(section, "cycle_p99", "cycle p99 (÷ floor p99)", p99, Unit::Micros, p99_ratio);
        Ok(())
    }

    /// `--clients` clients on one lock for `--duration`.
    async fn contended(&mut self) -> Result<(), Failure> {
        let name = self.name("contended");
        let clients = usize::try_from(self.args.clients).unwrap_or(usize::MAX);
        let mut locks = Vec::with_capacity(clients);
        let mut providers = Vec::with_capacity(clients);
        for _ in 0..clients {
            let provider = self.target.connect(&name, false).await?;
            locks.push(self.lock(&provider, &name)?);
            providers.push(provider);
        }
        /// The last release: by which client, when it started.
        struct Last {
            client: usize,
            released_at: Instant,
        }
        let last: Arc<Mutex<Option<Last>>> = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let start_gate = Arc::new(tokio::sync::Barrier::new(clients + 1));
        let mut tasks = tokio::task::JoinSet::new();
        for (client, lock) in locks.into_iter().enumerate() {
            let (last, stop, gate) = (Arc::clone(&last), Arc::clone(&stop), Arc::clone(&start_gate));
            let fail = self.fail(&name, "contended acquire of");
            tasks.spawn(async move {
                let (mut wait, mut handoff, mut release) = (Latency::new(), Latency::new(), Latency::new());
                let (mut acquisitions, mut handoffs) = (0_u64, 0_u64);
                gate.wait().await;
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    let guard = lock.acquire().await.map_err(&fail)?;
                    let granted = Instant::now();
                    wait.record(granted - asked);
                    acquisitions += 1;
                    {
                        let mut last = lock_or_recover(&last);
                        if let Some(previous) = last.take()
                            && previous.client != client
                        {
                            handoffs += 1;
                            handoff.record(granted.saturating_duration_since(previous.released_at));
                        }
                        // The tiny critical section: this bookkeeping.
                        *last = Some(Last { client, released_at: Instant::now() });
                    }
                    let releasing = Instant::now();
                    guard.release().await.map_err(&fail)?;
                    release.record(releasing.elapsed());
                }
                Ok::<_, Failure>((wait, handoff, release, acquisitions, handoffs))
            });
        }
        start_gate.wait().await;
        let started = Instant::now();
        tokio::time::sleep(self.args.duration).await;
        stop.store(true, Ordering::Relaxed);
        let (mut wait, mut handoff, mut release) = (Latency::new(), Latency::new(), Latency::new());
        let (mut acquisitions, mut handoffs) = (0_u64, 0_u64);
        let mut per_client = Vec::with_capacity(clients);
        while let Some(done) = tasks.join_next().await {
            let (w, h, r, a, n) =
                done.map_err(|e| Failure::new(crate::exit::BACKEND, format!("a contending client failed: {e}")))??;
            wait.merge(&w);
            handoff.merge(&h);
            release.merge(&r);
            acquisitions += a;
            handoffs += n;
            per_client.push(a);
        }
        let elapsed = started.elapsed().as_secs_f64().max(1e-9);
        drop(providers);
        let section = "contended";
        let rate = acquisitions as f64 / elapsed;
        let share = if acquisitions == 0 { 0.0 } else { handoffs as f64 / acquisitions as f64 };
        let redis = self.url.backend() == "redis";
        let zk = self.url.backend() == "zk";
        self.report.add_ratio(
            section,
            "acquisitions",
            format!("acquisitions/s, {clients} clients"),
            rate,
            Unit::PerSecond,
            self.rate_ratio(rate),
        );
        self.report.add(section, "handoff_share", "share passed to another client", share, Unit::Share);
        if redis {
            self.report.target("≥ 50 %", |v, _| v >= 0.5);
        }
        let (h50, h99) = (handoff.micros(0.5), handoff.micros(0.99));
        self.report.add_ratio(
            section,
            "handoff_p50",
            "hand-off p50 (release → other's grant)",
            h50,
            Unit::Micros,
            self.ratio(h50),
        );
        if redis {
            self.report.target("≤ 2.5× PING p50", |_, r| r.is_some_and(|r| r <= 2.5));
        } else if zk {
            self.report.target("≤ 1.0× create+delete p50", |_, r| r.is_some_and(|r| r <= 1.0));
        } else if self.url.backend() == "postgres" {
            self.report.target("≤ 2.5× SELECT 1 p50", |_, r| r.is_some_and(|r| r <= 2.5));
        }
        self.report.add_ratio(section, "handoff_p99", "hand-off p99", h99, Unit::Micros, self.ratio(h99));
        let r50 = release.micros(0.5);
        self.report.add_ratio(
            section,
            "release_p50",
            "release call p50 (the holder's side)",
            r50,
            Unit::Micros,
            self.ratio(r50),
        );
        let (w50, w99, wmax) = (wait.micros(0.5), wait.micros(0.99), wait.max_micros());
        self.report.add_ratio(section, "wait_p50", "wait p50", w50, Unit::Micros, self.ratio(w50));
        self.report.add_ratio(section, "wait_p99", "wait p99", w99, Unit::Micros, self.ratio(w99));
        self.report.add_ratio(section, "wait_max", "wait max", wmax, Unit::Micros, self.ratio(wmax));
        let starvation = if w50 > 0.0 { wmax / w50 } else { 0.0 };
        self.report.add(section, "wait_max_over_p50", "wait max ÷ wait p50", starvation, Unit::Times);
        if redis || self.url.backend() == "postgres" {
            self.report.target("≤ 20×", |v, _| v <= 20.0);
        }
        let (fewest, most) =
            (per_client.iter().min().copied().unwrap_or(0), per_client.iter().max().copied().unwrap_or(0));
        self.report.add(section, "fewest_per_client", "fewest acquisitions of one client", fewest as f64, Unit::Count);
        self.report.add(section, "most_per_client", "most acquisitions of one client", most as f64, Unit::Count);
        Ok(())
    }

    /// `--locks` locks held for a few renewal rounds: round trips per tick (Redis, PostgreSQL), client
    /// CPU, resident memory per held lock.
    async fn upkeep(&mut self) -> Result<(), Failure> {
        let count = usize::try_from(self.args.locks).unwrap_or(usize::MAX);
        let section = "upkeep";
        let redis = match self.url.backend() {
            "redis" => Some(self.redis_upkeep_provider()?),
            _ => None,
        };
        let postgres = match self.url.backend() {
            "postgres" => Some(self.postgres_upkeep_provider()?),
            _ => None,
        };
        let provider: LockProvider = match (&redis, &postgres) {
            (Some(provider), _) => provider.clone().into(),
            (None, Some(provider)) => provider.clone().into(),
            (None, None) => self.provider.clone(),
        };
        if let Some(postgres) = &postgres {
            postgres.ping().await.map_err(|e| Failure::from_lock_error(&e, "upkeep: SELECT 1"))?;
        }
        if let Some(redis) = &redis {
            redis.ping().await.map_err(|e| Failure::from_lock_error(&e, "upkeep: PING"))?;
        }
        let rss_before = resident_bytes();
        let mut locks = Vec::with_capacity(count);
        for i in 0..count {
            locks.push(self.lock(&provider, &self.name(&format!("held/{i}")))?);
        }
        let fail = self.fail(&self.name("held/…"), "upkeep: acquire of");
        // In batches of 100: what the holds keep, not the transient memory of 10,000
        // acquisitions in flight, is what the resident memory should show.
        let started = Instant::now();
        let mut guards = Vec::with_capacity(count);
        for batch in locks.chunks(100) {
            let acquired = futures_util::future::join_all(batch.iter().map(|lock| lock.acquire())).await;
            for guard in acquired {
                guards.push(guard.map_err(&fail)?);
            }
        }
        let acquire_time = started.elapsed();
        let rss_after = resident_bytes();
        let cpu_before = cpu_time();
        let window_start = Instant::now();
        let mut ticks = None;
        if let Some(redis) = &redis {
            let before = redis.renewal_stats();
            // Nothing but renewals runs while the ticks come: the server's time per renew
            // script is the EVALSHA time of the window.
            let scripts_before = match &mut self.floor {
                Some(floor) => floor.evalsha_totals().await,
                None => None,
            };
            let deadline = Instant::now() + Duration::from_secs(30);
            while redis.renewal_stats().ticks < before.ticks + 3 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let scripts_after = match &mut self.floor {
                Some(floor) => floor.evalsha_totals().await,
                None => None,
            };
            if let Some(usec) = per_call(scripts_before, scripts_after) {
                self.scripts.push(("renew_script", "server time per renew script, batched", usec));
            }
            let after = redis.renewal_stats();
            let n = after.ticks.saturating_sub(before.ticks).max(1) as f64;
            ticks = Some((n, after.round_trips.saturating_sub(before.round_trips) as f64 / n));
        } else if let Some(postgres) = &postgres {
            let before = postgres.renewal_stats();
            let deadline = Instant::now() + Duration::from_secs(30);
            while postgres.renewal_stats().ticks < before.ticks + 3 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let after = postgres.renewal_stats();
            let n = after.ticks.saturating_sub(before.ticks).max(1) as f64;
            ticks = Some((n, after.round_trips.saturating_sub(before.round_trips) as f64 / n));
        } else {
            tokio::time::sleep(self.args.duration.min(Duration::from_secs(5))).await;
        }
        let window = window_start.elapsed().as_secs_f64().max(1e-9);
        let cpu = cpu_time().saturating_sub(cpu_before).as_secs_f64() * 1e3;
        let held = guards.iter().filter(|g| g.is_held()).count();
        let started = Instant::now();
        let released = futures_util::future::join_all(guards.into_iter().map(|g| g.release())).await;
        released.into_iter().collect::<Result<Vec<_>, _>>().map_err(&fail)?;
        let release_time = started.elapsed();

        self.report.add(section, "held", "locks held", held as f64, Unit::Count);
        let per_lock = |d: Duration| d.as_secs_f64() * 1e6 / count.max(1) as f64;
        self.report.add(
            section,
            "acquire_all",
            "acquiring them, 100 at a time",
            acquire_time.as_secs_f64(),
            Unit::Seconds,
        );
        let (a, r) = (per_lock(acquire_time), per_lock(release_time));
        self.report.add_ratio(section, "acquire_per_lock", "… per lock", a, Unit::Micros, self.ratio(a));
        self.report.add(
            section,
            "release_all",
            "releasing them all at once",
            release_time.as_secs_f64(),
            Unit::Seconds,
        );
        self.report.add_ratio(section, "release_per_lock", "… per lock", r, Unit::Micros, self.ratio(r));
        if let Some((n, round_trips)) = ticks {
            self.report.add(section, "round_trips_per_tick", "round trips per renewal tick", round_trips, Unit::Count);
            self.report.target("≤ 10", |v, _| v <= 10.0);
            self.report.add(section, "client_cpu_per_tick", "client CPU per renewal tick", cpu / n, Unit::Millis);
        }
        self.report.add(section, "client_cpu_per_s", "client CPU per second held", cpu / window, Unit::Millis);
        match (rss_before, rss_after) {
            (Some(before), Some(after)) => {
                let per = after.saturating_sub(before) as f64 / count.max(1) as f64;
                self.report.add(section, "memory_per_lock", "client memory per held lock (VmRSS)", per, Unit::Bytes);
                if redis.is_some() {
                    self.report.target("< 2 KiB", |v, _| v < 2048.0);
                }
            }
            _ => self.report.notes.push("no /proc/self/status: memory per held lock not measured".to_owned()),
        }
        match self.url.backend() {
            "zk" => self.report.notes.push(
                "ZooKeeper upkeep is one exists on the base path per third of the session timeout, whatever the number of holds; not counted here"
                    .to_owned(),
            ),
            "redis" => self.report.notes.push(
                "Redis upkeep runs on a provider of its own with a 5 s lease renewed every 1 s, so that ticks come quickly"
                    .to_owned(),
            ),
            "postgres" => self.report.notes.push(
                "PostgreSQL upkeep runs on a provider of its own with a 5 s lease renewed every 1 s, so that ticks come quickly; a tick is one UPDATE for every hold"
                    .to_owned(),
            ),
            _ => {}
        }
        Ok(())
    }

    /// Redis: the server's time per call of the acquire and release scripts on the
    /// uncontended path, each measured alone (`INFO commandstats` deltas): `SCRIPT_LOCKS` (at
    /// most `--locks`) acquisitions of free locks nobody waits for, then their releases, twice
    /// (new names, then the same names used before), on a provider of its own whose renewals
    /// do not fall in between (a 60 s lease renewed every 20 s). The renew script is measured
    /// in [`upkeep`](Self::upkeep).
    async fn script_costs(&mut self) -> Result<(), Failure> {
        let fail = |e: lockkit::Error| Failure::from_lock_error(&e, "server time per script: a Redis provider");
        let builder = lockkit::redis::RedisLockProviderBuilder::from_url(&self.url.store).map_err(fail)?;
        let provider =
            builder.lease(Duration::from_secs(60)).renew_every(Duration::from_secs(20)).build().map_err(fail)?;
        let provider: LockProvider = provider.into();
        let count = SCRIPT_LOCKS.min(usize::try_from(self.args.locks).unwrap_or(usize::MAX));
        let locks = (0..count)
            .map(|i| self.lock(&provider, &self.name(&format!("scripts/{i}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let fail = self.fail(&self.name("scripts/…"), "server time per script: acquire+release of");
        // Warm up: the connection and the script cache.
        provider
            .lock(&self.name("scripts/warm"))
            .map_err(&fail)?
            .acquire()
            .await
            .map_err(&fail)?
            .release()
            .await
            .map_err(&fail)?;
        let Some(floor) = &mut self.floor else { return Ok(()) };
        // Twice over the same names: the first round makes each name's fence counter (a new
        // key), the second is the common case of a lock used before.
        let mut readings = Vec::with_capacity(5);
        readings.push(floor.evalsha_totals().await);
        for _ in 0..2 {
            let mut guards = Vec::with_capacity(locks.len());
            for lock in &locks {
                guards.push(lock.acquire().await.map_err(&fail)?);
            }
            readings.push(floor.evalsha_totals().await);
            for guard in guards {
                guard.release().await.map_err(&fail)?;
            }
            readings.push(floor.evalsha_totals().await);
        }
        let figures = [
            ("acquire_script_new_name", "server time per acquire script, free lock of a new name", 0),
            ("acquire_script", "server time per acquire script, free lock used before", 2),
            ("release_script", "server time per release script, nobody waiting", 3),
        ];
        for (key, label, at) in figures {
            let reading = |at: usize| readings.get(at).copied().flatten();
            if let Some(usec) = per_call(reading(at), reading(at + 1)) {
                self.scripts.push((key, label, usec));
            }
        }
        Ok(())
    }

    /// A Redis provider with the URL's prefix, a 5 s lease renewed every second.
    fn postgres_upkeep_provider(&self) -> Result<lockkit::postgres::PostgresLockProvider, Failure> {
        let upkeep = |e: lockkit::Error| Failure::from_lock_error(&e, "upkeep: a PostgreSQL provider");
        let builder = lockkit::postgres::PostgresLockProviderBuilder::from_url(&self.url.store).map_err(upkeep)?;
        builder.lease(Duration::from_secs(5)).renew_every(Duration::from_secs(1)).build().map_err(upkeep)
    }

    fn redis_upkeep_provider(&self) -> Result<lockkit::redis::RedisLockProvider, Failure> {
        let upkeep = |e: lockkit::Error| Failure::from_lock_error(&e, "upkeep: a Redis provider");
        let builder = lockkit::redis::RedisLockProviderBuilder::from_url(&self.url.store).map_err(upkeep)?;
        builder.lease(Duration::from_secs(5)).renew_every(Duration::from_secs(1)).build().map_err(upkeep)
    }

    /// `--locks` distinct locks, one after another, then all at once on one client.
    async fn many_locks(&mut self) -> Result<(), Failure> {
        let count = usize::try_from(self.args.locks).unwrap_or(usize::MAX);
        let section = "many_locks";
        let fail = self.fail(&self.name("many/…"), "acquire+release of");
        let started = Instant::now();
        for i in 0..count {
            let lock = self.lock(&self.provider, &self.name(&format!("sequential/{i}")))?;
            lock.acquire().await.map_err(&fail)?.release().await.map_err(&fail)?;
        }
        let sequential = started.elapsed();
        let mut tasks = tokio::task::JoinSet::new();
        let started = Instant::now();
        for i in 0..count {
            let lock = self.lock(&self.provider, &self.name(&format!("concurrent/{i}")))?;
            let fail = self.fail(&self.name(&format!("concurrent/{i}")), "acquire+release of");
            tasks.spawn(async move { lock.acquire().await.map_err(&fail)?.release().await.map_err(&fail) });
        }
        while let Some(done) = tasks.join_next().await {
            done.map_err(|e| Failure::new(crate::exit::BACKEND, format!("a task failed: {e}")))??;
        }
        let concurrent = started.elapsed();
        let per = |d: Duration| d.as_secs_f64() * 1e6 / count.max(1) as f64;
        self.report.add(
            section,
            "sequential",
            format!("{count} locks one after another"),
            sequential.as_secs_f64(),
            Unit::Seconds,
        );
        let s = per(sequential);
        self.report.add_ratio(section, "sequential_per_lock", "… per lock", s, Unit::Micros, self.ratio(s));
        self.report.add(
            section,
            "concurrent",
            format!("{count} locks at once, one client"),
            concurrent.as_secs_f64(),
            Unit::Seconds,
        );
        let c = per(concurrent);
        self.report.add_ratio(section, "concurrent_per_lock", "… per lock", c, Unit::Micros, self.ratio(c));
        let speedup = sequential.as_secs_f64() / concurrent.as_secs_f64().max(1e-9);
        self.report.add(section, "speedup", "at once ÷ one after another (speed-up)", speedup, Unit::Times);
        if self.url.backend() == "zk" {
            self.report.target("≥ 10×", |v, _| v >= 10.0);
        }
        Ok(())
    }

    /// file://: removes this run's lock files and holder directories (every lock is released and their names carry
    /// this run's id, so no one else has them open). With the default directory, says
    /// which files to remove instead.
    fn remove_lock_files(&mut self) {
        let marker = format!("lockkit-bench%2f{}%2f", run_id());
        let dir = self.url.store.path();
        if dir.is_empty() {
            self.report.notes.push(format!(
                "file:// keeps every lock file: remove the files named {marker}* in the default directory"
            ));
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        let mut left = 0_usize;
        for entry in entries.flatten() {
            if !entry.file_name().to_string_lossy().starts_with(&marker) {
                continue;
            }
            // Read-write locks and semaphores keep their holders' records in a directory
            // of their own (`NAME.readers/`, `NAME.permits/`), empty once all are released.
            let removed = match entry.file_type() {
                Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(entry.path()),
                _ => std::fs::remove_file(entry.path()),
            };
            if removed.is_err() {
                left += 1;
            }
        }
        if left > 0 {
            self.report.notes.push(format!("{left} lock files named {marker}* could not be removed from {dir}"));
        }
    }

    /// Redis: deletes the fence counters of this run's locks at once (the backend lets a
    /// counter expire only `fence_retention` after its lock's last use; nobody else uses these
    /// names).
    async fn remove_fence_counters(&mut self) {
        let (Ok(provider), Some(Floor::Redis(connection, _))) = (self.redis_upkeep_provider(), &mut self.floor) else {
            return;
        };
        let count = self.args.locks;
        let mut names = vec![
            format!("{}/uncontended", self.prefix),
            format!("{}/contended", self.prefix),
            format!("{}/scripts/warm", self.prefix),
        ];
        names.extend((0..SCRIPT_LOCKS).map(|i| format!("{}/scripts/{i}", self.prefix)));
        for what in ["sequential", "concurrent", "held"] {
            names.extend((0..count).map(|i| format!("{}/{what}/{i}", self.prefix)));
        }
        let mut failed = false;
        for chunk in names.chunks(1000) {
            let keys = chunk
                .iter()
                .filter_map(|name| lockkit::LockName::new(name).ok())
                .map(|name| format!("{}:fence", provider.record_key(&name)));
            if connection.is_cluster() {
                // A pipeline goes to one node: one UNLINK each, concurrently.
                let unlinks = keys.map(|key| {
                    let mut connection = connection.clone();
                    async move { redis::cmd("UNLINK").arg(key).query_async::<()>(&mut connection).await }
                });
                failed |= futures_util::future::join_all(unlinks).await.iter().any(Result::is_err);
            } else {
                let mut pipeline = redis::pipe();
                for key in keys {
                    pipeline.cmd("UNLINK").arg(key).ignore();
                }
                failed |= pipeline.query_async::<()>(connection).await.is_err();
            }
        }
        if failed {
            self.report.notes.push(format!(
                "some fence counters of this run could not be deleted: keys matching *lockkit-bench/{}/*:fence",
                run_id()
            ));
        }
    }

    /// Redis: the server's time per call of the commands used, for the analysis of a ratio.
    async fn server_stats(&mut self) {
        for (key, label, usec) in std::mem::take(&mut self.scripts) {
            self.report.add("server", key, label, usec, Unit::Micros);
            if matches!(key, "acquire_script" | "release_script") {
                self.report.target("≤ 5 µs", |v, _| v <= 5.0);
            }
        }
        let Some(floor) = &mut self.floor else { return };
        for (command, usec) in floor.server_usec_per_call().await {
            let key = match command.as_str() {
                "ping" => "ping_usec_per_call",
                "evalsha" => "evalsha_usec_per_call",
                "eval" => "eval_usec_per_call",
                "subscribe" => "subscribe_usec_per_call",
                _ => "ssubscribe_usec_per_call",
            };
            let label = match command.as_str() {
                "evalsha" => "server time per EVALSHA, every script since the server started".to_owned(),
                other => format!("server time per {}", other.to_uppercase()),
            };
            self.report.add("server", key, label, usec, Unit::Micros);
        }
    }
}

/// How many free locks the Redis server-time phase acquires, then releases (at most
/// `--locks`).
const SCRIPT_LOCKS: usize = 2_000;

/// The server's µs per `EVALSHA` between two readings of `(calls, usec)`; `None` when either
/// is missing or no call was made.
fn per_call(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Option<f64> {
    let ((calls0, usec0), (calls1, usec1)) = (before?, after?);
    let calls = calls1.checked_sub(calls0).filter(|&n| n > 0)?;
    Some(usec1.saturating_sub(usec0) as f64 / calls as f64)
}

/// The process's resident memory (`VmRSS` of /proc/self/status), in bytes.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// User plus system CPU time of this process (/proc/self/stat; 10 ms resolution), zero
/// where unknown.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks: u64 = fields.get(11..13).map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum());
    // Linux reports clock ticks of 1/100 s on every supported architecture.
    Duration::from_millis(ticks * 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_backend() {
        let url = Url::parse("zk://u:p@h1:2181,h2:2181/app?base=/locks&ttl=10s", "zk://u:***@h1:2181").unwrap();
        assert_eq!(url.backend(), "zk");
        assert_eq!(Url::parse("mem://", "mem://").unwrap().backend(), "mem");
    }

    #[test]
    fn proc_figures_are_read() {
        assert!(resident_bytes().is_some_and(|bytes| bytes > 0));
    }
}
