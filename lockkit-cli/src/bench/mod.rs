//! `lockkit bench`: measures a lock store against the raw round trip of the same client
//! library to the same server, in one run, like `redis-benchmark` for locks.
//!
//! What the bench knows of a backend is its profile (`profiles/`, one file per backend, in
//! one table): the floor, the targets, a provider of its own for the upkeep phase. The phases,
//! in order (every lock name starts with `lockkit-bench/<run id>/`):
//! 1. floor and uncontended, interleaved in rounds so both see the same load ([`uncontended`]);
//! 2. contended: `--clients` clients on one lock ([`contended`]); then, on backends that have
//!    them, the shared-lock and semaphore phases ([`shared`]) and the failover of an election
//!    ([`election`]);
//! 3. many locks: `--locks` distinct locks one after another, then all at once ([`many_locks`]);
//! 4. where the floor reads the server's own time (Redis), the time per acquire and per release
//!    script ([`server_time`]);
//! 5. held-lock upkeep: `--locks` locks held for a few renewal rounds ([`upkeep`]).
//!
//! With `--holds N`, the run measures the cost of many holds instead ([`holds`]): N locks on
//! one provider with a short lease, kept for three leases, then released.

mod contended;
mod election;
mod holds;
mod many_locks;
mod profile;
mod profiles;
mod report;
mod server_time;
mod shared;
mod state;
mod uncontended;
mod upkeep;
mod url;

use serde_json::Value;

use self::report::Report;
use self::state::Bench;
use self::url::{Url, run_id};
use crate::cli::BenchArgs;
use crate::exit::{Code, Failure, USAGE};
use crate::target::Target;

/// Runs `lockkit bench`; prints the table (or `--json`) and exits 0.
pub(crate) async fn bench(args: BenchArgs) -> Result<Code, Failure> {
    let recorded = if args.metrics { Some(crate::metrics::Recorded::install()?) } else { None };
    let target = Target::resolve(args.url.clone());
    let prefix = format!("lockkit-bench/{}", run_id());
    let provider = target.connect(&prefix, false).await?;
    // The same choice as Target::resolve: --url, else LOCKKIT_URL, else the default.
    let raw_url = args.url.clone().unwrap_or_else(lockkit::url_from_env);
    let url = Url::parse(&raw_url, target.shown())?;
    let backend = url.backend();
    let profile = profiles::find(backend);
    let missing = profile.is_none().then(|| {
        format!(
            "lockkit bench has no profile for backend {backend:?}: no floor, no ratios and no targets; \
             add one in lockkit-cli/src/bench/profiles/"
        )
    });
    let profile = profile.unwrap_or(&profiles::Missing);
    if let Some((most, why)) = profile.max_locks() {
        if args.locks > most {
            return Err(Failure::new(USAGE, format!("--locks above {most} on {}: {why}", url.store.scheme())));
        }
        if args.holds.is_some_and(|holds| holds > most) {
            return Err(Failure::new(USAGE, format!("--holds above {most} on {}: {why}", url.store.scheme())));
        }
    }
    let floor = profile.floor(&url).await?;
    let report = Report {
        url: url.shown.clone(),
        backend,
        settings: match args.holds {
            Some(holds) => vec![("holds", Value::from(holds))],
            None => vec![
                ("clients", Value::from(args.clients)),
                ("duration_s", Value::from(args.duration.as_secs_f64())),
                ("locks", Value::from(args.locks)),
            ],
        },
        floor: floor.as_ref().map(|f| f.describe().to_owned()),
        notes: missing.iter().cloned().collect(),
        ..Report::default()
    };
    if let Some(missing) = &missing {
        eprintln!("lockkit: {missing}");
    }
    let mut bench = Bench {
        args,
        target,
        url,
        prefix,
        provider,
        profile,
        targets: profile.targets(),
        floor,
        floor_p50: None,
        cycle_p50: 0.0,
        scripts: Vec::new(),
        report,
    };
    if let Some(holds) = bench.args.holds {
        bench.holds(holds).await?;
    } else {
        bench.uncontended().await?;
        bench.contended().await?;
        bench.shared(bench.cycle_p50).await?;
        bench.semaphore().await?;
        bench.election().await?;
        // Many locks before upkeep: the allocator then already has the memory that 10,000
        // acquisitions in flight need, and the resident memory grows by what the holds keep.
        bench.many_locks().await?;
        bench.script_costs().await?;
        bench.upkeep().await?;
        bench.server_stats().await;
    }
    bench.clean_up().await;
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
    /// Removes what the run left behind, through the floor (Redis: fence counters) and the
    /// profile (files: lock files).
    async fn clean_up(&mut self) {
        let names = self.names_used();
        if let Some(floor) = &mut self.floor {
            let notes = floor.clean_up(&names).await;
            self.report.notes.extend(notes);
        }
        let notes = self.profile.clean_up(&self.url);
        self.report.notes.extend(notes);
    }
}
