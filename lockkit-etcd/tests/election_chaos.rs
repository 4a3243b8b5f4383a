//! Elections under faults on a real etcd member:
//!
//! - the chaos run (lockkit-testkit's `chaos`) on elections: eight clients, every one a
//!   candidate, the leader writing to the fenced resource with its term, while connections are
//!   cut, blackholed past the lease, slowed down, clients killed, and the member paused and
//!   restarted;
//! - observers of an election while the candidates' and the observers' connections are cut,
//!   slowed, blackholed (past the lease too), cut off while etcd compacts the revisions they
//!   missed, and the member restarts once, checked against every term granted: each one
//!   reaches every observer, or a gap comes between the terms shown around it.
//!
//! The runs go one after the other. `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and
//! `LOCKKIT_CHAOS_SEED` make them longer or replay a seed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lockkit_core::LeaderEvent;
use lockkit_testkit::chaos::{self, ChaosConfig, FaultKind, Primitive};
use support::{EtcdHarness, TTL, test_builder};
use tokio::sync::Mutex;

/// One run at a time in this test binary.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// Every kind of fault but stopping one member of a replicated store (there is one member).
const FAULTS: [FaultKind; 6] = [
    FaultKind::Cut,
    FaultKind::Blackhole,
    FaultKind::Latency,
    FaultKind::Kill,
    FaultKind::PauseStore,
    FaultKind::RestartStore,
];

#[test]
fn chaos_elections_on_one_member() {
    lockkit_testkit::runtime().block_on(async {
        let _turn = ONE_AT_A_TIME.lock().await;
        let harness = EtcdHarness::dedicated().await;
        let config = ChaosConfig::new(0)
            .with_duration(Duration::from_secs(20))
            .with_faults(&FAULTS)
            .with_primitive(Primitive::Election);
        chaos::check(&harness, config.with_label("elections, one member"), &[27]).await;
    });
}

/// Observers of an election under faults, on a member of its own: four candidates campaign,
/// hold for a while and resign (or drop their leadership) on one name, while their
/// connections and those of two observers are cut, slowed, blackholed briefly and past the
/// lease, cut off while the member compacts its history, and the member restarts once. Every
/// term a campaign was granted must reach each observer, or a `Gap` must come between the
/// terms shown around it (contract 28: never a silent skip); an `Elected` names the identity
/// of the candidate that was granted that term; terms come in order, and a term is repeated
/// only right after a gap. One observer reads the core's `Observer`, the other the backend's
/// raw stream. At the end both observers show nobody leads.
#[test]
fn chaos_observers_see_every_term_or_a_gap() {
    lockkit_testkit::runtime().block_on(async {
        let _turn = ONE_AT_A_TIME.lock().await;
        let seed = std::env::var(chaos::SEED_ENV).ok().and_then(|s| s.parse().ok()).unwrap_or(28_u64);
        let harness = EtcdHarness::dedicated().await;
        let report = observers_under_faults(&harness, seed, Duration::from_secs(20)).await;
        println!("{report}");
    });
}

/// An event an observer received, or a failure it reported.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Event(LeaderEvent),
    Failure(String),
}

async fn observers_under_faults(harness: &EtcdHarness, seed: u64, duration: Duration) -> String {
    let name = format!("chaos-observers/{}", uuid::Uuid::new_v4().simple());
    let stop = Arc::new(AtomicBool::new(false));
    let granted: Arc<std::sync::Mutex<Vec<(u64, String)>>> = Arc::default();
    let mut proxies = Vec::new();
    let mut candidates = Vec::new();
    for i in 0..4 {
        let (provider, faults) = harness.client_with(test_builder()).await.unwrap();
        proxies.push(faults);
        let (election, stop, granted) = (provider.election(&name).unwrap(), stop.clone(), granted.clone());
        let mut rng = Lcg(seed.wrapping_add(i + 1));
        candidates.push(tokio::spawn(async move {
            let _provider = provider;
            let identity = format!("candidate-{i}");
            while !stop.load(Ordering::SeqCst) {
                let wait = Duration::from_millis(300 + rng.below(1700));
                match election.campaign_timeout(&identity, wait).await {
                    Ok(leadership) => {
                        granted.lock().unwrap().push((leadership.token().get(), identity.clone()));
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
    let mut observed: Vec<Arc<std::sync::Mutex<Vec<Seen>>>> = Vec::new();
    let mut observers = Vec::new();
    for raw in [false, true] {
        let (provider, faults) = harness.client_with(test_builder()).await.unwrap();
        proxies.push(faults);
        let seen: Arc<std::sync::Mutex<Vec<Seen>>> = Arc::default();
        observed.push(seen.clone());
        let lock = lockkit_core::LockName::new(&name).unwrap();
        let mut events = if raw {
            provider.backend().observe(&lock).unwrap()
        } else {
            let observer = provider.election(&name).unwrap().observe().unwrap();
            Box::pin(observer) as lockkit_core::backend::LeaderEvents
        };
        observers.push(tokio::spawn(async move {
            let _provider = provider;
            while let Some(item) = std::future::poll_fn(|cx| events.as_mut().poll_next(cx)).await {
                let item = match item {
                    Ok(event) => Seen::Event(event),
                    Err(error) => Seen::Failure(error.to_string()),
                };
                seen.lock().unwrap().push(item);
            }
        }));
    }

    // The faults, one at a time, on a client drawn from the seed.
    let mut rng = Lcg(seed);
    let mut applied = std::collections::BTreeMap::<&str, u32>::new();
    let started = Instant::now();
    let mut restarted = false;
    while started.elapsed() < duration {
        tokio::time::sleep(Duration::from_millis(300 + rng.below(700))).await;
        let proxy = &proxies[rng.below(proxies.len() as u64) as usize].0;
        let kind = match rng.below(12) {
            0..=2 => {
                proxy.cut_all();
                "cut"
            }
            3..=4 => {
                proxy.set_latency(Duration::from_millis(40));
                tokio::time::sleep(Duration::from_millis(800)).await;
                proxy.set_latency(Duration::ZERO);
                "latency"
            }
            5..=7 => {
                proxy.blackhole();
                tokio::time::sleep(Duration::from_millis(200 + rng.below(800))).await;
                proxy.heal();
                "short blackhole"
            }
            8..=9 => {
                proxy.refuse_new(true);
                proxy.cut_all();
                tokio::time::sleep(Duration::from_millis(300 + rng.below(700))).await;
                let mut admin = harness.admin().await;
                let revision = admin.get("unused", None).await.unwrap().header().unwrap().revision();
                admin.compact(revision, None).await.unwrap();
                proxy.refuse_new(false);
                "cut off, history compacted"
            }
            10 if !restarted && started.elapsed() > duration / 2 => {
                restarted = true;
                harness.server().unwrap().lock().await.restart().await.expect("the member restarts");
                "restart"
            }
            _ => {
                proxy.blackhole();
                tokio::time::sleep(TTL + Duration::from_millis(1500)).await;
                proxy.heal();
                "blackhole past the lease"
            }
        };
        *applied.entry(kind).or_default() += 1;
    }
    proxies.iter().for_each(|faults| faults.0.heal());
    stop.store(true, Ordering::SeqCst);
    for candidate in candidates {
        tokio::time::timeout(Duration::from_secs(30), candidate).await.expect("the candidates stop").unwrap();
    }
    let last_state = |seen: &[Seen]| {
        seen.iter().rev().find_map(|s| match s {
            Seen::Event(event @ (LeaderEvent::Elected(_) | LeaderEvent::Vacant)) => Some(event.clone()),
            _ => None,
        })
    };
    let deadline = Instant::now() + TTL * 5;
    while !observed.iter().all(|seen| last_state(&seen.lock().unwrap()) == Some(LeaderEvent::Vacant)) {
        assert!(Instant::now() < deadline, "both observers show nobody leads within {:?}: {observed:?}", TTL * 5);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    observers.iter().for_each(tokio::task::JoinHandle::abort);

    let granted = granted.lock().unwrap().clone();
    let identity_of: std::collections::HashMap<u64, String> = granted.iter().cloned().collect();
    let mut lines = vec![format!(
        "chaos [etcd, election observers] seed {seed}: {} terms granted; faults {applied:?}",
        granted.len()
    )];
    for (index, seen) in observed.iter().enumerate() {
        let seen = seen.lock().unwrap().clone();
        let raw = index == 1;
        let mut shown: Vec<u64> = Vec::new();
        let (mut gaps, mut failures, mut vacancies) = (0, 0, 0);
        // The last term shown, and whether a gap came since.
        let mut last: Option<u64> = None;
        let mut gap_since = false;
        let skipped = |from: Option<u64>, to: u64| -> Vec<u64> {
            granted.iter().map(|(t, _)| *t).filter(|t| from.is_none_or(|f| *t > f) && *t < to).collect()
        };
        for item in &seen {
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
                        let missed = skipped(last, term);
                        assert!(
                            missed.is_empty(),
                            "observer {index}: terms {missed:?} skipped in silence before {term}: {seen:?}"
                        );
                    }
                    if let Some(identity) = identity_of.get(&term) {
                        assert_eq!(leader.identity_str(), Some(identity.as_str()), "observer {index}: term {term}");
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
            let missed: Vec<u64> = granted.iter().map(|(t, _)| *t).filter(|t| last.is_none_or(|l| *t > l)).collect();
            assert!(missed.is_empty(), "observer {index}: terms {missed:?} after the last shown, in silence: {seen:?}");
        }
        let seen_granted = granted.iter().filter(|(t, _)| shown.contains(t)).count();
        lines.push(format!(
            "  observer {index} ({}): {} terms shown ({seen_granted} of the granted), {gaps} gaps, {vacancies} vacancies, {failures} errors",
            if raw { "raw stream" } else { "core Observer" },
            shown.len()
        ));
    }
    lines.join("\n")
}

/// A small deterministic generator for the schedule.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound.max(1)
    }
}
