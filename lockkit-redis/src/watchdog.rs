//! Lease renewal: one task per provider renews every hold of that provider each tick, in
//! pipelined batches, and turns every failed or refused renewal into a loss signal.
//!
//! - A hold is registered when granted and unregistered before its release is sent, so
//!   renewal stops the moment a guard is released or dropped.
//! - A confirmed renewal extends the hold's local deadline to the renewal's *send* time plus
//!   the lease minus the drift margin; the server's expiry lies after it.
//! - A renewal that finds the record gone or owned by another declares the hold lost at once;
//!   one that cannot be confirmed is retried quickly until the local deadline passes, at which
//!   point the hold's signal reports the loss by itself.
//! - The task sleeps while the provider holds nothing, and ends with the provider.
//! - A hold handed over by a release comes with a claim window's lease only: it is confirmed
//!   at once by a renewal of its own ([`Watchdog::confirm`]), outside the ticks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use lockkit_core::{HoldSignal, LossReason, lease_deadline};
use tokio::sync::Notify;
use tracing::Instrument;

use crate::builder::Settings;
use crate::store::{Ownership, Store};
use crate::util::{Backoff, lock};

/// Holds renewed per pipeline: large enough that 10,000 holds take a few round trips, small
/// enough that one reply stays well under a megabyte.
pub(crate) const BATCH: usize = 1000;

/// One hold the watchdog keeps alive.
#[derive(Debug)]
struct Entry {
    key: String,
    owner: String,
    signal: HoldSignal,
}

/// The registry of live holds and the wake-up of the renewal task.
#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    holds: Mutex<HashMap<u64, Entry>>,
    next_id: AtomicU64,
    changed: Arc<Notify>,
    started: std::sync::OnceLock<()>,
    /// Counters for tests and benchmarks.
    stats: RenewStats,
}

/// What the watchdog has done so far.
#[derive(Debug, Default)]
pub(crate) struct RenewStats {
    pub(crate) ticks: AtomicU64,
    pub(crate) round_trips: AtomicU64,
    pub(crate) renewed: AtomicU64,
}

impl Watchdog {
    /// Registers a granted hold; returns its id for [`forget`](Self::forget). Starts the
    /// renewal task on first use.
    pub(crate) fn register(
        self: &Arc<Self>,
        key: String,
        owner: String,
        signal: HoldSignal,
        store: &Arc<Store>,
        settings: &Arc<Settings>,
    ) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.holds).insert(id, Entry { key, owner, signal });
        self.started.get_or_init(|| {
            let task = run(Arc::downgrade(self), Arc::downgrade(store), Arc::clone(settings));
            drop(tokio::spawn(task.instrument(tracing::debug_span!("lockkit.redis.watchdog"))));
        });
        self.changed.notify_one();
        id
    }

    /// Stops renewing a hold.
    pub(crate) fn forget(&self, id: u64) {
        lock(&self.holds).remove(&id);
    }

    /// How many holds are being renewed.
    pub(crate) fn len(&self) -> usize {
        lock(&self.holds).len()
    }

    /// The renewal counters.
    pub(crate) fn stats(&self) -> &RenewStats {
        &self.stats
    }

    /// Renews hold `id` at once, in the background, retrying until it is confirmed or its
    /// deadline passes (when its signal reports the loss by itself). A hold released
    /// meanwhile is left alone.
    pub(crate) fn confirm(self: &Arc<Self>, id: u64, store: &Arc<Store>, settings: &Arc<Settings>) {
        let (watchdog, store, settings) = (Arc::downgrade(self), Arc::downgrade(store), Arc::clone(settings));
        let task = async move {
            let mut backoff = Backoff::up_to(settings.renew_every);
            loop {
                let (Some(dog), Some(store)) = (watchdog.upgrade(), store.upgrade()) else { return };
                let Some(hold) = dog.live(id) else { return };
                if !renew_all(&dog, &store, &[hold], settings.lease_millis(), &settings).await {
                    return;
                }
                drop((dog, store));
                tokio::time::sleep(backoff.next_delay()).await;
            }
        };
        let span = tracing::debug_span!("lockkit.renew", backend = crate::BACKEND, holds = 1, confirm = true);
        drop(tokio::spawn(task.instrument(span)));
    }

    /// Hold `id`, if it is still registered and live.
    fn live(&self, id: u64) -> Option<(u64, String, String, HoldSignal)> {
        let holds = lock(&self.holds);
        let entry = holds.get(&id).filter(|entry| entry.signal.is_held())?;
        Some((id, entry.key.clone(), entry.owner.clone(), entry.signal.clone()))
    }

    /// The holds to renew now, dropping those that ended.
    fn due(&self) -> Vec<(u64, String, String, HoldSignal)> {
        let mut holds = lock(&self.holds);
        holds.retain(|_, entry| entry.signal.is_held());
        holds.iter().map(|(id, e)| (*id, e.key.clone(), e.owner.clone(), e.signal.clone())).collect()
    }
}

/// The renewal loop of one provider.
/// It holds the watchdog and the store weakly, so that it keeps neither the provider's
/// registry nor its connection alive once the provider is gone.
async fn run(watchdog: Weak<Watchdog>, store: Weak<Store>, settings: Arc<Settings>) {
    let lease_ms = settings.lease_millis();
    let mut backoff = Backoff::up_to(settings.renew_every);
    loop {
        // Sleep until there is something to renew, then one interval.
        loop {
            let Some(dog) = watchdog.upgrade() else { return };
            if dog.len() > 0 {
                break;
            }
            // Wait without keeping the watchdog alive: its drop notifies too.
            let changed = Arc::clone(&dog.changed);
            drop(dog);
            changed.notified().await;
        }
        tokio::time::sleep(settings.renew_every).await;
        loop {
            let (Some(dog), Some(store)) = (watchdog.upgrade(), store.upgrade()) else { return };
            let due = dog.due();
            if due.is_empty() {
                break;
            }
            let span = tracing::debug_span!("lockkit.renew", backend = crate::BACKEND, holds = due.len());
            let round_trips = u64::try_from(due.len().div_ceil(BATCH)).unwrap_or(u64::MAX);
            dog.stats.round_trips.fetch_add(round_trips, Ordering::Relaxed);
            let failed = renew_all(&dog, &store, &due, lease_ms, &settings).instrument(span).await;
            dog.stats.ticks.fetch_add(1, Ordering::Relaxed);
            drop((dog, store));
            if !failed {
                backoff.reset();
                break;
            }
            // Some renewals could not be confirmed: try again soon, backing off, while the
            // holds' deadlines still allow it.
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Wakes the renewal task so that it sees the provider is gone and ends.
        self.changed.notify_one();
    }
}

/// Renews every due hold in pipelined batches sent concurrently; returns whether some
/// renewal could not be confirmed.
async fn renew_all(
    dog: &Watchdog,
    store: &Store,
    due: &[(u64, String, String, HoldSignal)],
    lease_ms: u64,
    settings: &Settings,
) -> bool {
    let batches = due.chunks(BATCH).map(|batch| async move {
        let pairs: Vec<(&str, &str)> = batch.iter().map(|(_, key, owner, _)| (key.as_str(), owner.as_str())).collect();
        let sent_at = Instant::now();
        (batch, sent_at, store.renew_batch(&pairs, lease_ms).await)
    });
    let mut failed = false;
    for (batch, sent_at, outcome) in futures_util::future::join_all(batches).await {
        match outcome {
            Ok(answers) => {
                let valid_until = lease_deadline(sent_at, settings.lease, settings.drift);
                for ((_, _, _, signal), answer) in batch.iter().zip(answers) {
                    match answer {
                        Ownership::Ours => {
                            dog.stats.renewed.fetch_add(1, Ordering::Relaxed);
                            signal.extend(valid_until);
                        }
                        Ownership::Gone => {
                            signal.lose(LossReason::RecordGone);
                        }
                        Ownership::Other => {
                            signal.lose(LossReason::OwnedByAnother);
                        }
                    }
                }
            }
            Err(error) => {
                tracing::debug!(%error, holds = batch.len(), "renewal not confirmed; retrying");
                failed = true;
            }
        }
    }
    failed
}
