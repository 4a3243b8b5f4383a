//! Store faults of the multi-process run: the store's control, handed to the run as a small
//! hook ([`StoreControl`], in [`ProcessChaosConfig::store`](super::ProcessChaosConfig::store)),
//! and how the run applies [`ProcessFault::PauseStore`] and [`ProcessFault::RestartStore`]
//! beside the rest of its schedule.
//!
//! The kit implements the hook for its fixtures behind a `tokio::sync::Mutex` (the run holds
//! the store for the length of a fault): every single server (a [`ServerControl`]) through its
//! fixture's own pause, resume and restart, and [`ZkEnsemble`] (one member, drawn, paused, or
//! stopped for the drawn time and started again; the run waits until it rejoined). A
//! PostgreSQL restart is a fast shutdown, which keeps every committed write, and a start; a
//! Redis restart without persistence leaves an empty server; ZooKeeper keeps its data
//! directory.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::analysis::{State, lock};
use super::config::ProcessFault;
use super::protocol::now_ns;
use super::store_control::StoreControl;
use crate::fixture::{ServerControl, ZkEnsemble};

/// A single server: its fixture's own pause, resume and restart ([`ServerControl`]); a restart
/// stops it and starts it again at once on the same port and data (`pick` and `down` are not
/// used: the stop and the start take their own time).
#[async_trait]
impl<S: ServerControl + std::fmt::Debug + 'static> StoreControl for tokio::sync::Mutex<S> {
    async fn pause(&self, _pick: u64) -> Result<(), String> {
        self.lock().await.pause().map_err(|error| error.to_string())
    }

    async fn resume(&self, _pick: u64) -> Result<(), String> {
        self.lock().await.resume().map_err(|error| error.to_string())
    }

    async fn restart(&self, _pick: u64, _down: Duration) -> Result<(), String> {
        self.lock().await.restart().await.map_err(|error| error.to_string())
    }
}

#[async_trait]
impl StoreControl for tokio::sync::Mutex<ZkEnsemble> {
    async fn pause(&self, pick: u64) -> Result<(), String> {
        let mut ensemble = self.lock().await;
        let member = member(&ensemble, pick);
        ensemble.pause_member(member).map_err(|error| error.to_string())
    }

    async fn resume(&self, pick: u64) -> Result<(), String> {
        let mut ensemble = self.lock().await;
        let member = member(&ensemble, pick);
        ensemble.resume_member(member).map_err(|error| error.to_string())
    }

    /// Stops member `pick % members`, keeps it down for `down`, starts it again and waits
    /// until it rejoined (the fixture's bound, 60 s).
    async fn restart(&self, pick: u64, down: Duration) -> Result<(), String> {
        let mut ensemble = self.lock().await;
        let member = member(&ensemble, pick);
        ensemble.stop_member(member).await.map_err(|error| error.to_string())?;
        tokio::time::sleep(down).await;
        ensemble.start_member(member).await.map_err(|error| error.to_string())
    }
}

/// The member of `ensemble` that `pick` chooses.
fn member(ensemble: &ZkEnsemble, pick: u64) -> usize {
    let members = u64::try_from(ensemble.member_count()).unwrap_or(1).max(1);
    usize::try_from(pick % members).unwrap_or(0)
}

/// Applies one store fault (`kind` is [`ProcessFault::PauseStore`] or
/// [`ProcessFault::RestartStore`]) of `length`: a pause resumes the store after it, a restart
/// keeps the store down for it where the control can. Every store fault is recorded in
/// `state` (its start before it, its end once the store serves again), a restart also apart,
/// for the classification of a store that loses data.
pub(crate) async fn apply(
    store: Arc<dyn StoreControl>,
    kind: ProcessFault,
    pick: u64,
    length: Duration,
    state: Arc<Mutex<State>>,
) -> Result<(), String> {
    let fault = {
        let mut state = lock(&state);
        state.store_faults.push((now_ns(), None));
        state.store_faults.len() - 1
    };
    let outcome = match kind {
        ProcessFault::PauseStore => match store.pause(pick).await {
            Ok(()) => {
                tokio::time::sleep(length).await;
                store.resume(pick).await
            }
            Err(error) => Err(error),
        },
        ProcessFault::RestartStore => {
            let index = {
                let mut state = lock(&state);
                state.restarts.push((now_ns(), None));
                state.restarts.len() - 1
            };
            let outcome = store.restart(pick, length).await;
            if let Some(restart) = lock(&state).restarts.get_mut(index) {
                restart.1 = Some(now_ns());
            }
            outcome.map_err(|error| format!("the store restart failed: {error}"))
        }
        _ => Ok(()),
    };
    if let Some(fault) = lock(&state).store_faults.get_mut(fault) {
        fault.1 = Some(now_ns());
    }
    outcome
}

/// The control of a fixture the run owns from now on (it is stopped when the run's config
/// is dropped): `control(server)` for a single server (a [`ServerControl`]) or
/// [`ZkEnsemble`].
pub fn control<S>(store: S) -> Arc<dyn StoreControl>
where
    tokio::sync::Mutex<S>: StoreControl + 'static,
{
    Arc::new(tokio::sync::Mutex::new(store))
}
