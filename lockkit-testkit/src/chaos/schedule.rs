//! The fault schedule: drawn from the seed before the run, then applied one fault at a time
//! with the harness's hooks.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::config::{ChaosConfig, FaultKind, ScheduledFault};
use super::worker::{LONG_HOLD, NOT_HOLDING, SHORT_HOLD, Shared};
use crate::harness::{Harness, TestClient};
use crate::rng::Rng;
use crate::sync::locked;

/// Draws the fault schedule of `config` for a backend whose lease (or session timeout) is
/// `lease`. The same inputs give the same schedule. Kinds are drawn in rounds, each round a
/// shuffle of every configured kind, so a run long enough for one round has every kind.
pub fn schedule(config: &ChaosConfig, lease: Option<Duration>) -> Vec<ScheduledFault> {
    let mut rng = Rng::new(config.seed ^ 0xc4a0_5eed);
    let lease = lease.unwrap_or(Duration::from_secs(1));
    let mut faults = Vec::new();
    if config.faults.is_empty() {
        return faults;
    }
    let mut at = rng.between(config.fault_gap.0, config.fault_gap.1);
    let mut round: Vec<FaultKind> = Vec::new();
    while at < config.duration {
        if round.is_empty() {
            round = config.faults.clone();
            for i in (1..round.len()).rev() {
                round.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        let Some(kind) = round.pop() else { break };
        let client = rng.below(config.clients as u64) as usize;
        let (hold, latency) = match kind {
            FaultKind::Cut | FaultKind::Kill | FaultKind::RestartStore | FaultKind::Failover | FaultKind::Reshard => {
                (Duration::ZERO, Duration::ZERO)
            }
            FaultKind::Blackhole => {
                (lease + rng.between(Duration::from_millis(200), Duration::from_millis(1200)), Duration::ZERO)
            }
            FaultKind::Latency => (
                rng.between(Duration::from_millis(300), Duration::from_millis(2000)),
                rng.between(Duration::from_millis(10), Duration::from_millis(150)),
            ),
            FaultKind::PauseStore => {
                (rng.between(Duration::from_millis(300), lease + Duration::from_secs(1)), Duration::ZERO)
            }
            FaultKind::StopServer => (rng.between(Duration::from_millis(300), lease), Duration::ZERO),
        };
        faults.push(ScheduledFault { at, kind, client, hold, latency });
        // Restarts take a while of their own; the gap counts from the heal.
        at += hold + rng.between(config.fault_gap.0, config.fault_gap.1);
    }
    faults
}

/// Applies one fault and heals it; `false` when the harness lacks the hook.
pub(super) async fn apply(
    harness: &dyn Harness,
    shared: &Shared,
    fault: &ScheduledFault,
    restarts: &mut Vec<(Instant, Instant)>,
    graveyard: &mut Vec<TestClient>,
    violations: &mut Vec<String>,
    log: &mut Vec<String>,
) -> bool {
    // A client fault strikes the first client in a long hold, counting from the scheduled
    // one, else the first holding a lock, else the scheduled one, so that faults hit holds.
    let clients = shared.slots.len();
    let state = |i: usize| shared.holding[i].load(Ordering::SeqCst);
    let order = || (0..clients).map(|k| (fault.client + k) % clients);
    let target = order()
        .find(|&i| state(i) == LONG_HOLD)
        .or_else(|| order().find(|&i| state(i) != NOT_HOLDING))
        .unwrap_or(fault.client);
    let client_fault = !matches!(
        fault.kind,
        FaultKind::PauseStore | FaultKind::RestartStore | FaultKind::Failover | FaultKind::Reshard
    );
    if client_fault {
        let holder = match state(target) {
            LONG_HOLD => "in a long hold; holding",
            SHORT_HOLD => "holding",
            _ => "not holding",
        };
        log.push(format!("{} -> client {target} ({holder})", fault));
    } else {
        log.push(fault.to_string());
    }
    let faults = locked(&shared.slots[target]).0.faults.clone();
    match fault.kind {
        FaultKind::Cut => faults.cut_connection().await.is_ok(),
        FaultKind::Blackhole => {
            if faults.blackhole().await.is_err() {
                return false;
            }
            tokio::time::sleep(fault.hold).await;
            if faults.heal().await.is_err() {
                violations.push(format!("fault {fault}: the harness can blackhole but not heal"));
            }
            true
        }
        FaultKind::Latency => {
            if faults.set_latency(fault.latency).await.is_err() {
                return false;
            }
            tokio::time::sleep(fault.hold).await;
            if faults.set_latency(Duration::ZERO).await.is_err() {
                violations.push(format!("fault {fault}: the latency could not be removed"));
            }
            true
        }
        FaultKind::Kill => {
            if faults.kill().await.is_err() {
                return false;
            }
            match harness.client().await {
                Ok(fresh) => {
                    let mut slot = locked(&shared.slots[target]);
                    let generation = slot.1 + 1;
                    let dead = std::mem::replace(&mut *slot, (fresh, generation));
                    graveyard.push(dead.0);
                }
                Err(error) => violations.push(format!("fault {fault}: no replacement client: {error}")),
            }
            true
        }
        FaultKind::PauseStore => {
            if harness.pause_store(true).await.is_err() {
                return false;
            }
            tokio::time::sleep(fault.hold).await;
            if harness.pause_store(false).await.is_err() {
                violations.push(format!("fault {fault}: the store could not be resumed"));
            }
            true
        }
        FaultKind::StopServer => faults.stop_server_for(fault.hold).await.is_ok(),
        FaultKind::RestartStore => {
            let start = Instant::now();
            let outcome = harness.restart_store().await;
            restarts.push((start, Instant::now()));
            outcome.is_ok()
        }
        FaultKind::Failover | FaultKind::Reshard => {
            // The name the scheduled client's number picks: every name gets its turn.
            let name = &shared.names[fault.client % shared.names.len()];
            if let Some(line) = log.last_mut() {
                line.push_str(&format!(" of {name:?}"));
            }
            let start = Instant::now();
            let outcome = match fault.kind {
                FaultKind::Failover => harness.failover(name).await,
                _ => harness.reshard(name).await,
            };
            if fault.kind == FaultKind::Failover {
                restarts.push((start, Instant::now()));
            }
            outcome.is_ok()
        }
    }
}
