//! Observers of an election under faults (contract 28), for every backend with elections.
//!
//! Four candidates campaign on one name, lead for a while and resign (or drop their
//! leadership), while their connections and those of two observers are cut, slowed,
//! blackholed briefly and past the lease, cut off while the store discards its history (where
//! the harness can: [`Harness::compact_history`]), and the store restarts once. Then every
//! term a campaign was granted must have reached each observer, or a `Gap` must come between
//! the terms shown around it (never a silent skip); an `Elected` names the identity of the
//! candidate granted that term; terms come in order, and a term is repeated only right after
//! a gap (the current state a gap is followed by). One observer reads the core's `Observer`,
//! the other the backend's raw stream. At the end both must show that nobody leads.
//!
//! ```no_run
//! # async fn run(harness: &dyn lockkit_testkit::Harness) {
//! use std::time::Duration;
//! use lockkit_testkit::observer_chaos::{self, ObserverChaos};
//!
//! let report = observer_chaos::run(harness, ObserverChaos::new(28, Duration::from_secs(20))).await;
//! println!("{report}");
//! # }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkit_core::backend::LeaderEvents;
use lockkit_core::{LeaderEvent, LockName};

use crate::harness::{ClientFaults, Harness};
use crate::rng::Rng;
use crate::sync::locked;

/// The settings of one run.
#[derive(Clone, Debug)]
pub struct ObserverChaos {
    /// Drives the schedule of faults and the candidates' timings: a seed replays a run.
    pub seed: u64,
    /// How long faults are applied.
    pub duration: Duration,
}

impl ObserverChaos {
    /// A run of `duration` with the schedule drawn from `seed`. The seed may be replaced by
    /// the environment's [`SEED_ENV`](crate::chaos::SEED_ENV) with [`seed_from_env`](Self::seed_from_env).
    pub fn new(seed: u64, duration: Duration) -> Self {
        Self { seed, duration }
    }

    /// The same run with the seed `LOCKKIT_CHAOS_SEED` names, when it is set and a number.
    #[must_use]
    pub fn seed_from_env(mut self) -> Self {
        if let Some(seed) = std::env::var(crate::chaos::SEED_ENV).ok().and_then(|s| s.parse().ok()) {
            self.seed = seed;
        }
        self
    }
}

/// The observers' chaos run as a `#[test]`, as [`chaos_test!`](crate::chaos_test) does for
/// the chaos run: on the shared runtime, one run of the binary at a time
/// ([`one_at_a_time`](crate::chaos::one_at_a_time)), `harness` made (an expression that may
/// `.await`), then [`run`] with `config` (its seed replaced by `LOCKKIT_CHAOS_SEED` when set),
/// the report printed.
///
/// ```ignore
/// lockkit_testkit::observer_chaos_test!(
///     chaos_observers_see_every_term_or_a_gap,
///     harness: MyHarness::dedicated().await,
///     config: ObserverChaos::new(26, Duration::from_secs(20)),
/// );
/// ```
#[macro_export]
macro_rules! observer_chaos_test {
    ($(#[$meta:meta])* $name:ident, harness: $harness:expr, config: $config:expr $(,)?) => {
        $(#[$meta])*
        #[test]
        fn $name() {
            $crate::chaos::run_test(async { $harness }, async |harness| {
                let config: $crate::observer_chaos::ObserverChaos = $config;
                println!("{}", $crate::observer_chaos::run(harness, config.seed_from_env()).await);
            });
        }
    };
}

/// An event an observer received, or a failure it reported.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Event(LeaderEvent),
    Failure(String),
}

/// What the observers saw, shared with their tasks.
type Journal = Arc<Mutex<Vec<Seen>>>;

/// Runs the observers' chaos run on `harness` (which should own its store: the store is
/// restarted once) and returns its report; panics with what was seen when an observer missed
/// a term in silence, showed terms out of order or the wrong identity, or never showed the
/// final vacancy. Needs the harness's clients to have elections and fault hooks, and
/// [`Timing::lease`](crate::Timing::lease) set.
pub async fn run(harness: &dyn Harness, config: ObserverChaos) -> String {
    let lease = harness.timing().lease.unwrap_or(Duration::from_secs(5));
    let name = format!("chaos-observers/{}", uuid::Uuid::new_v4().simple());
    let stop = Arc::new(AtomicBool::new(false));
    let granted: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    let mut faults: Vec<Arc<dyn ClientFaults>> = Vec::new();
    let mut candidates = Vec::new();
    for i in 0..4 {
        let client = ok(harness.client().await, "a candidate's client connects");
        faults.push(client.faults);
        let election = ok(client.provider.election(&name), "an election handle is made");
        let (provider, stop, granted) = (client.provider, stop.clone(), granted.clone());
        let mut rng = Rng::new(config.seed.wrapping_add(i + 1));
        candidates.push(tokio::spawn(async move {
            let _provider = provider;
            let identity = format!("candidate-{i}");
            while !stop.load(Ordering::SeqCst) {
                let wait = Duration::from_millis(300 + rng.below(1700));
                match election.campaign_timeout(&identity, wait).await {
                    Ok(leadership) => {
                        locked(&granted).push((leadership.token().get(), identity.clone()));
                        let hold = Duration::from_millis(if rng.below(8) == 0 { 2500 } else { rng.below(400) });
                        tokio::select! {
                            () = tokio::time::sleep(hold) => {}
                            _ = leadership.lost() => {}
                        }
                        if rng.below(2) == 0 {
                            let _ = leadership.resign().await;
                        } else {
                            drop(leadership);
                        }
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }));
    }
    // Observer 0 through the core's `Observer`, observer 1 through the backend's raw stream.
    let mut observed: Vec<Journal> = Vec::new();
    let mut observers = Vec::new();
    for raw in [false, true] {
        let client = ok(harness.client().await, "an observer's client connects");
        faults.push(client.faults);
        let provider = client.provider;
        let seen: Journal = Arc::default();
        observed.push(seen.clone());
        let lock = ok(LockName::new(&name), "the election's name is valid");
        let mut events: LeaderEvents = if raw {
            ok(provider.backend().observe(&lock), "the backend observes the election")
        } else {
            let election = ok(provider.election(&name), "an election handle is made");
            Box::pin(ok(election.observe(), "the election is observed"))
        };
        observers.push(tokio::spawn(async move {
            let _provider = provider;
            while let Some(item) = std::future::poll_fn(|cx| events.as_mut().poll_next(cx)).await {
                let item = match item {
                    Ok(event) => Seen::Event(event),
                    Err(error) => Seen::Failure(error.to_string()),
                };
                locked(&seen).push(item);
            }
        }));
    }

    let applied = apply_faults(harness, &faults, &config, lease).await;
    for client in &faults {
        let _ = client.heal().await;
    }
    stop.store(true, Ordering::SeqCst);
    for candidate in candidates {
        match tokio::time::timeout(Duration::from_secs(30), candidate).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => panic!("a candidate's task failed: {error}"),
            Err(_) => panic!("the candidates did not stop within 30 s"),
        }
    }
    let bound = lease * 5;
    let deadline = Instant::now() + bound;
    while !observed.iter().all(|seen| last_state(&locked(seen)) == Some(LeaderEvent::Vacant)) {
        assert!(Instant::now() < deadline, "both observers show nobody leads within {bound:?}: {observed:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    observers.iter().for_each(tokio::task::JoinHandle::abort);

    let granted = locked(&granted).clone();
    let mut lines = vec![format!(
        "chaos [{}, election observers] seed {}: {} terms granted; faults {applied:?}",
        harness.name(),
        config.seed,
        granted.len()
    )];
    for (index, seen) in observed.iter().enumerate() {
        let seen = locked(seen).clone();
        let summary = check_observer(index, &seen, &granted);
        let kind = if index == 1 { "raw stream" } else { "core Observer" };
        lines.push(format!("  observer {index} ({kind}): {summary}"));
    }
    lines.join("\n")
}

/// Applies faults, one at a time, to clients drawn from the seed until the run's duration
/// has passed, and counts them by kind.
async fn apply_faults(
    harness: &dyn Harness,
    faults: &[Arc<dyn ClientFaults>],
    config: &ObserverChaos,
    lease: Duration,
) -> BTreeMap<&'static str, u32> {
    let mut rng = Rng::new(config.seed);
    let mut applied = BTreeMap::new();
    let started = Instant::now();
    let mut restarted = false;
    while started.elapsed() < config.duration {
        tokio::time::sleep(Duration::from_millis(300 + rng.below(700))).await;
        let client = &faults[rng.index(faults.len())];
        let kind = match rng.below(12) {
            0..=2 => {
                let _ = client.cut_connection().await;
                "cut"
            }
            3..=4 => {
                let _ = client.set_latency(Duration::from_millis(40)).await;
                tokio::time::sleep(Duration::from_millis(800)).await;
                let _ = client.set_latency(Duration::ZERO).await;
                "latency"
            }
            5..=7 => {
                let _ = client.blackhole().await;
                tokio::time::sleep(Duration::from_millis(200 + rng.below(800))).await;
                let _ = client.heal().await;
                "short blackhole"
            }
            8..=9 => {
                // Cut off (its connections cut, new ones held) while the store discards the
                // history the client would resume from; a plain cut where there is none.
                let _ = client.blackhole().await;
                let _ = client.cut_connection().await;
                tokio::time::sleep(Duration::from_millis(300 + rng.below(700))).await;
                let compacted = harness.compact_history().await.is_ok();
                let _ = client.heal().await;
                if compacted { "cut off, history compacted" } else { "cut off" }
            }
            10 if !restarted && started.elapsed() > config.duration / 2 => {
                restarted = true;
                ok(harness.restart_store().await.map_err(|_| "unsupported"), "the store restarts");
                "restart"
            }
            _ => {
                let _ = client.blackhole().await;
                tokio::time::sleep(lease + Duration::from_millis(1500)).await;
                let _ = client.heal().await;
                "blackhole past the lease"
            }
        };
        *applied.entry(kind).or_default() += 1;
    }
    applied
}

/// Checks what observer `index` saw against the terms granted, panicking on a violation, and
/// returns a one-line summary.
fn check_observer(index: usize, seen: &[Seen], granted: &[(u64, String)]) -> String {
    let identity_of: HashMap<u64, &str> = granted.iter().map(|(term, id)| (*term, id.as_str())).collect();
    let skipped = |from: Option<u64>, to: Option<u64>| -> Vec<u64> {
        granted
            .iter()
            .map(|(term, _)| *term)
            .filter(|term| from.is_none_or(|f| *term > f) && to.is_none_or(|t| *term < t))
            .collect()
    };
    let mut shown: Vec<u64> = Vec::new();
    let (mut gaps, mut failures, mut vacancies) = (0, 0, 0);
    // The last term shown, and whether a gap came since.
    let mut last: Option<u64> = None;
    let mut gap_since = false;
    for item in seen {
        match item {
            Seen::Event(LeaderEvent::Elected(leader)) => {
                let term = leader.term.get();
                if let Some(last) = last {
                    assert!(
                        term > last || (gap_since && term == last),
                        "observer {index}: term {term} after {last} (a repeat only right after a gap): {seen:?}"
                    );
                }
                if !gap_since && last.is_some() {
                    let missed = skipped(last, Some(term));
                    assert!(
                        missed.is_empty(),
                        "observer {index}: terms {missed:?} skipped in silence before {term}: {seen:?}"
                    );
                }
                if let Some(identity) = identity_of.get(&term) {
                    assert_eq!(leader.identity_str(), Some(*identity), "observer {index}: term {term}");
                }
                if last != Some(term) {
                    shown.push(term);
                }
                last = Some(term);
                gap_since = false;
            }
            Seen::Event(LeaderEvent::Gap) => {
                gaps += 1;
                gap_since = true;
            }
            Seen::Event(_) => vacancies += 1,
            Seen::Failure(_) => failures += 1,
        }
    }
    if !gap_since {
        let missed = skipped(last, None);
        assert!(missed.is_empty(), "observer {index}: terms {missed:?} after the last shown, in silence: {seen:?}");
    }
    let seen_granted = granted.iter().filter(|(term, _)| shown.contains(term)).count();
    format!(
        "{} terms shown ({seen_granted} of the granted), {gaps} gaps, {vacancies} vacancies, {failures} errors",
        shown.len()
    )
}

/// The leader state an observer showed last (an election or a vacancy).
fn last_state(seen: &[Seen]) -> Option<LeaderEvent> {
    seen.iter().rev().find_map(|s| match s {
        Seen::Event(event @ (LeaderEvent::Elected(_) | LeaderEvent::Vacant)) => Some(event.clone()),
        _ => None,
    })
}

/// The value of a step the run cannot go on without, or a panic that says which step failed.
fn ok<T, E: std::fmt::Display>(result: Result<T, E>, step: &str) -> T {
    match result {
        Ok(value) => value,
        Err(error) => panic!("observers' chaos run: {step} failed: {error}"),
    }
}
