//! PostgreSQL: the floor is `SELECT 1` on a plain tokio-postgres connection with the
//! provider's settings, and beside it a one-row commit (an upsert of one row of a table
//! `lockkit_bench_floor`, created in the role's first schema when it may), once waiting for the
//! WAL flush and once with `synchronous_commit` off, so that the flush's cost shows. The upkeep
//! phase runs on a provider of its own renewing every second.

use std::time::{Duration, Instant};

use lockkit::LockProvider;
use lockkit::postgres::tokio_postgres;
use lockkit::postgres::{PostgresLockProvider, PostgresLockProviderBuilder};

use crate::bench::profile::{Boxed, Floor, FloorFigure, Profile, Renewals, Targets, Upkeep, renewals};
use crate::bench::url::{Url, run_id};
use crate::exit::{Failure, UNAVAILABLE};

/// The PostgreSQL profile.
pub(crate) struct Postgres;

impl Profile for Postgres {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn targets(&self) -> Targets {
        Targets {
            cycle: Some(3.0),
            handoff_share: None,
            handoff: Some(2.5),
            wait_spread: Some(20.0),
            readers_scaling: None,
            many_locks_speedup: None,
            memory_per_lock: None,
            server_time_per_script: None,
        }
    }

    fn floor<'a>(&'a self, url: &'a Url) -> Boxed<'a, Result<Option<Box<dyn Floor>>, Failure>> {
        Box::pin(async move { Ok(Some(Box::new(PostgresFloor::open(url).await?) as Box<dyn Floor>)) })
    }

    fn upkeep(&self, url: &Url) -> Result<Option<Upkeep>, Failure> {
        let upkeep = |e: lockkit::Error| Failure::from_lock_error(&e, "upkeep: a PostgreSQL provider");
        let builder = PostgresLockProviderBuilder::from_url(&url.store).map_err(upkeep)?;
        let provider =
            builder.lease(Duration::from_secs(5)).renew_every(Duration::from_secs(1)).build().map_err(upkeep)?;
        let (renewals, ping) = (renewals(provider.clone(), PostgresLockProvider::renewal_stats), provider.clone());
        let reach =
            Box::pin(async move { ping.ping().await.map_err(|e| Failure::from_lock_error(&e, "upkeep: SELECT 1")) });
        Ok(Some(Upkeep { provider: provider.into(), renewals, reach }))
    }

    fn short_lease(&self) -> Option<(&'static str, Duration)> {
        Some(("lease", Duration::from_secs(3)))
    }

    fn renewal_counters(&self, provider: &LockProvider) -> Option<Renewals> {
        Some(renewals(PostgresLockProvider::try_from(provider.clone()).ok()?, PostgresLockProvider::renewal_stats))
    }

    fn upkeep_note(&self) -> Option<&'static str> {
        Some(
            "PostgreSQL upkeep runs on a provider of its own with a 5 s lease renewed every 1 s, so that ticks come quickly; a tick is one UPDATE for every hold",
        )
    }
}

/// A plain connection with the provider's settings, and whether the one-row commit's table
/// could be made.
struct PostgresFloor {
    client: tokio_postgres::Client,
    table: bool,
}

impl PostgresFloor {
    async fn open(url: &Url) -> Result<Self, Failure> {
        let open = |e: lockkit::Error| Failure::from_lock_error(&e, &format!("floor: cannot connect to {}", url.shown));
        let provider = PostgresLockProviderBuilder::from_url(&url.store)
            .and_then(PostgresLockProviderBuilder::build)
            .map_err(open)?;
        let client = provider.open_client().await.map_err(open)?;
        // The provider's connections may run with `synchronous_commit` off (grants that do not
        // wait for the flush): the floor's one-row commit waits for it, as the server's default
        // does.
        let table = client.simple_query("SET synchronous_commit = on").await.is_ok()
            && client
                .simple_query("CREATE TABLE IF NOT EXISTS lockkit_bench_floor (id text PRIMARY KEY, n bigint NOT NULL)")
                .await
                .is_ok();
        Ok(Self { client, table })
    }
}

/// The round trips the floor times, in the order of its samples.
const FIGURES: &[FloorFigure] = &[
    FloorFigure::main("select1", "SELECT 1"),
    FloorFigure::other_p50("commit", "one-row commit (WAL flush)"),
    FloorFigure::other_p50("commit_async", "one-row commit, synchronous_commit off,"),
];

impl Floor for PostgresFloor {
    fn describe(&self) -> &'static str {
        "PostgreSQL SELECT 1 on a plain tokio-postgres connection"
    }

    fn figures(&self) -> &'static [FloorFigure] {
        FIGURES
    }

    fn sample<'a>(&'a mut self, url: &'a Url) -> Boxed<'a, Result<Vec<Option<Duration>>, Failure>> {
        Box::pin(async move {
            let failed = |what: &str, e: tokio_postgres::Error| {
                Failure::new(UNAVAILABLE, format!("floor: {what} on {} failed: {e}", url.shown))
            };
            let start = Instant::now();
            self.client.simple_query("SELECT 1").await.map_err(|e| failed("SELECT 1", e))?;
            let select = start.elapsed();
            if !self.table {
                return Ok(vec![Some(select), None, None]);
            }
            // The id is the run's: no value to escape, and runs do not meet.
            let upsert = format!(
                "INSERT INTO lockkit_bench_floor AS f VALUES ('{}', 1) ON CONFLICT (id) DO UPDATE SET n = f.n + 1",
                run_id()
            );
            let start = Instant::now();
            self.client.simple_query(&upsert).await.map_err(|e| failed("a one-row commit", e))?;
            let flushed = start.elapsed();
            let unflushed = format!("BEGIN; SET LOCAL synchronous_commit = off; {upsert}; COMMIT");
            let start = Instant::now();
            self.client.simple_query(&unflushed).await.map_err(|e| failed("a one-row commit", e))?;
            Ok(vec![Some(select), Some(flushed), Some(start.elapsed())])
        })
    }
}
