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
//! - The task sleeps while the provider holds nothing, and ends with the provider. It runs
//!   on lockkit's home runtime ([`lockkit_core::home`]), with the home runtime's connection,
//!   so renewal never depends on the runtime a hold was granted on.
//! - A hold handed over by a release comes with a claim window's lease only: it is confirmed
//!   by a renewal of its own ([`Watchdog::confirm`]), outside the ticks, once a quarter of its
//!   local validity has passed (a hold released before then needs none).
//! - Every kind of hold is renewed in the same batches, each by the renew script of its kind
//!   (a mutex's `renew.lua`; `renew_rw.lua` for a read-write lock's hold, write or read;
//!   `renew_permit.lua` for a permit): a tick sends as many pipelines as it has batches,
//!   whatever the kinds in them.
//! - Between ticks, the task reads the holds whose records keyspace notifications made
//!   suspect (see the `keyspace` module) and declares lost those that are not there any more.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use futures_util::StreamExt as _;
use lockkit_core::backend::{deadline_after, lease_deadline};
use lockkit_core::{LossReason, RenewalCounters};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::keyspace::Suspects;
use crate::settings::Settings;
use crate::store::connection::Store;
use crate::store::kinds::{HoldTarget, Ownership};
use lockkit_core::backend::Backoff;
use lockkit_core::sync::lock_or_recover;

/// Holds renewed per pipeline: large enough that 10,000 holds take a few round trips, small
/// enough that one reply stays well under a megabyte.
pub(crate) const BATCH: usize = 1000;

/// Renewal pipelines in flight at once: enough to keep the server busy while the client
/// reads the replies of one and writes the next, few enough that a batch does not wait
/// behind a whole round on the connection.
const IN_FLIGHT: usize = 4;

/// One hold due for renewal: its id, and what to renew (with its signal).
type Due = (u64, Arc<HoldTarget>);

/// The registry of live holds and the renewal task of one provider.
#[derive(Debug)]
pub(crate) struct Watchdog {
    /// The live holds by id, each with its signal (16 bytes an entry).
    holds: Mutex<HashMap<u64, Arc<HoldTarget>>>,
    next_id: AtomicU64,
    changed: Arc<Notify>,
    /// The renewal task, when one was started; finished once its runtime shut down.
    task: Mutex<Option<JoinHandle<()>>>,
    /// The provider's connection, held weakly so that the task does not keep it open.
    store: Weak<Store>,
    settings: Arc<Settings>,
    /// Records to read at once, as keyspace notifications told.
    suspects: Arc<Suspects>,
    /// Counters for tests and benchmarks.
    stats: RenewalCounters,
}

impl Watchdog {
    /// The watchdog of a provider with this connection and these settings; no task runs
    /// before the first hold.
    pub(crate) fn new(store: &Arc<Store>, settings: Arc<Settings>, suspects: Arc<Suspects>) -> Self {
        Self {
            holds: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            changed: Arc::new(Notify::new()),
            task: Mutex::new(None),
            store: Arc::downgrade(store),
            settings,
            suspects,
            stats: RenewalCounters::default(),
        }
    }

    /// Registers a granted hold; returns its id for [`forget`](Self::forget). Starts the
    /// renewal task if it is not running.
    pub(crate) fn register(self: &Arc<Self>, target: Arc<HoldTarget>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock_or_recover(&self.holds).insert(id, target);
        self.ensure_running();
        self.changed.notify_one();
        id
    }

    /// Starts the renewal task on the home runtime unless it runs.
    pub(crate) fn ensure_running(self: &Arc<Self>) {
        let mut task = lock_or_recover(&self.task);
        if task.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        let Some(runtime) = lockkit_core::home::runtime() else {
            return;
        };
        let run = run(Arc::downgrade(self), self.settings.renew_every);
        *task = Some(runtime.spawn(run.instrument(tracing::debug_span!("lockkit.redis.watchdog"))));
    }

    /// Stops renewing a hold.
    pub(crate) fn forget(&self, id: u64) {
        lock_or_recover(&self.holds).remove(&id);
    }

    /// How many holds are being renewed.
    pub(crate) fn len(&self) -> usize {
        lock_or_recover(&self.holds).len()
    }

    /// The renewal counters.
    pub(crate) fn stats(&self) -> &RenewalCounters {
        &self.stats
    }

    /// Renews hold `id`, whose local deadline is `valid_until`, in the background on the home
    /// runtime, once a quarter of the time left to that deadline has passed, retrying until it
    /// is confirmed or the deadline passes (when its signal reports the loss by itself). A hold
    /// released meanwhile is left alone: a short hold handed over costs no renewal at all, and
    /// three quarters of its claim window are left for the renewal's round trips.
    pub(crate) fn confirm(self: &Arc<Self>, id: u64, valid_until: Instant) {
        let watchdog = Arc::downgrade(self);
        let task = async move {
            tokio::time::sleep(valid_until.saturating_duration_since(Instant::now()) / 4).await;
            let mut backoff = None;
            loop {
                let Some(dog) = watchdog.upgrade() else { return };
                let Some(store) = dog.store.upgrade() else { return };
                let Some(hold) = dog.live(id) else { return };
                if renew_all(&dog, &store, &[vec![&hold]]).await.is_empty() {
                    return;
                }
                let delay = backoff.get_or_insert_with(|| Backoff::up_to(dog.settings.renew_every)).next_delay();
                drop((dog, store));
                tokio::time::sleep(delay).await;
            }
        };
        let span = tracing::debug_span!("lockkit.renew", backend = crate::BACKEND, holds = 1, confirm = true);
        lockkit_core::home::spawn(task.instrument(span));
    }

    /// Hold `id`, if it is still registered and live.
    fn live(&self, id: u64) -> Option<Due> {
        let holds = lock_or_recover(&self.holds);
        let target = holds.get(&id).filter(|target| target.signal.is_held())?;
        Some((id, Arc::clone(target)))
    }

    /// Reads the live holds whose records were marked suspect since the last look, and
    /// declares lost those that are gone or another owner's. A hold that cannot be read is left
    /// to the next renewal.
    async fn check_suspects(&self, store: &Store) {
        let suspects = self.suspects.take();
        let held: Vec<Due> = {
            let holds = lock_or_recover(&self.holds);
            let live = holds
                .iter()
                .filter(|(_, target)| target.signal.is_held() && suspects.iter().any(|key| target.watches(key)));
            live.map(|(id, target)| (*id, Arc::clone(target))).collect()
        };
        if held.is_empty() {
            return;
        }
        let targets: Vec<&HoldTarget> = held.iter().map(|(_, target)| &**target).collect();
        match store.check(&targets).await {
            Ok(answers) => {
                for ((_, target), answer) in held.iter().zip(answers) {
                    let reason = match answer {
                        Ownership::Ours => continue,
                        Ownership::Other => LossReason::OwnedByAnother,
                        Ownership::Gone => LossReason::RecordGone,
                    };
                    tracing::debug!(key = ?target.watched(), %reason, "a keyspace notification told of the hold's loss");
                    target.signal.lose(reason);
                }
            }
            Err(error) => tracing::debug!(%error, "suspect holds not read; the next renewal checks them"),
        }
    }

    /// The holds to renew now, dropping those that ended.
    fn due(&self) -> Vec<Due> {
        let mut holds = lock_or_recover(&self.holds);
        // Past its maximum hold a hold is not held (its deadline stops at the cap): it is
        // renewed no more, and its record expires with its lease.
        holds.retain(|_, target| target.signal.is_held());
        let mut due: Vec<(Option<Instant>, Due)> =
            holds.iter().map(|(id, target)| (target.signal.valid_until(), (*id, Arc::clone(target)))).collect();
        drop(holds);
        // The most urgent first: a round that runs late loses the least.
        due.sort_unstable_by_key(|(valid_until, _)| *valid_until);
        due.into_iter().map(|(_, due)| due).collect()
    }
}

/// The renewal loop of one provider. It holds the watchdog (and through it the connection)
/// weakly, so that it keeps neither the provider's registry nor its connection alive once the
/// provider is gone.
///
/// Rounds start at a fixed rate, `renew_every` after the start of the previous one (not after
/// its end), so that a round that takes long does not push the next one later. Holds whose
/// renewal could not be confirmed are retried alone, backing off, until the next round, which
/// takes them again with all the others, the most urgent first.
async fn run(watchdog: Weak<Watchdog>, renew_every: std::time::Duration) {
    let mut backoff = Backoff::up_to(renew_every);
    let mut last_round: Option<Instant> = None;
    loop {
        // Sleep until there is something to renew, then one interval.
        loop {
            let Some(dog) = watchdog.upgrade() else { return };
            if dog.len() > 0 {
                break;
            }
            // Nothing held: the next hold starts a new interval.
            last_round = None;
            // Wait without keeping the watchdog alive: its drop notifies too.
            let changed = Arc::clone(&dog.changed);
            drop(dog);
            changed.notified().await;
        }
        // One interval from the start of the last round, reading the suspect records meanwhile.
        let tick = deadline_after(last_round.unwrap_or_else(Instant::now), renew_every);
        loop {
            let Some(dog) = watchdog.upgrade() else { return };
            let suspects = Arc::clone(&dog.suspects);
            drop(dog);
            tokio::select! {
                () = tokio::time::sleep_until(tick.into()) => break,
                () = suspects.added.notified() => {
                    let Some(dog) = watchdog.upgrade() else { return };
                    let Some(store) = dog.store.upgrade() else { return };
                    dog.check_suspects(&store).await;
                }
            }
        }
        let started = Instant::now();
        last_round = Some(started);
        let next_round = deadline_after(started, renew_every);
        let mut due = match watchdog.upgrade() {
            Some(dog) => dog.due(),
            None => return,
        };
        let mut first_pass = true;
        loop {
            let Some(dog) = watchdog.upgrade() else { return };
            let Some(store) = dog.store.upgrade() else { return };
            if due.is_empty() {
                break;
            }
            let span = tracing::debug_span!("lockkit.renew", backend = crate::BACKEND, holds = due.len());
            if store.is_cluster() {
                // Which node owns which slot now: the batches go one per node.
                store.refresh_slot_map().await;
            }
            let batches = batches(&store, &due);
            let failed = renew_all(&dog, &store, &batches).instrument(span).await;
            if first_pass {
                first_pass = false;
                dog.stats.round_took(crate::BACKEND, due.len(), started.elapsed(), renew_every);
            }
            // Counted together once the round is done, so that a reader between two rounds
            // (`lockkit bench`) never sees a round's round trips without the round.
            let round_trips = u64::try_from(batches.len() + usize::from(store.is_cluster())).unwrap_or(u64::MAX);
            dog.stats.round(round_trips);
            drop((dog, store));
            if failed.is_empty() {
                backoff.reset();
                break;
            }
            // Some renewals could not be confirmed: try them again soon, backing off, while
            // the holds' deadlines still allow it; from the next round on, with the others.
            let delay = backoff.next_delay();
            if deadline_after(Instant::now(), delay) >= next_round {
                break;
            }
            tokio::time::sleep(delay).await;
            let Some(dog) = watchdog.upgrade() else { return };
            due = failed.into_iter().filter_map(|id| dog.live(id)).collect();
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Wakes the renewal task so that it sees the provider is gone and ends.
        self.changed.notify_one();
    }
}

/// The due holds in batches of at most [`BATCH`], one pipeline each. On a Redis Cluster, a
/// batch holds the holds of one node (by the slot map the round read first), sent to that
/// node by address, or of one hash slot when the map could not be read (the cluster
/// connection refuses a pipeline routed by keys that span slots). A batch per node also
/// keeps a node that fails over from holding up the renewals on the others. The batches go
/// out concurrently.
fn batches<'a>(store: &Store, due: &'a [Due]) -> Vec<Vec<&'a Due>> {
    if !store.is_cluster() {
        return due.chunks(BATCH).map(|batch| batch.iter().collect()).collect();
    }
    let mut slots: std::collections::HashMap<_, Vec<&'a Due>> = std::collections::HashMap::new();
    for hold in due {
        slots.entry(store.group_of(&hold.1)).or_default().push(hold);
    }
    slots.into_values().flat_map(|holds| holds.chunks(BATCH).map(<[&Due]>::to_vec).collect::<Vec<_>>()).collect()
}

/// Renews every due hold in pipelined batches, at most [`IN_FLIGHT`] at once and in order;
/// returns the ids of the holds whose renewal could not be confirmed.
///
/// Each batch's deadline counts from its own send and its reply is bounded by the response
/// timeout from then: with every batch of a large round in flight at once, the last ones
/// would wait behind all the others on the one connection, and time out or get a deadline
/// that counts the whole round.
async fn renew_all(dog: &Watchdog, store: &Store, batches: &[Vec<&Due>]) -> Vec<u64> {
    let settings = &dog.settings;
    let lease_ms = lockkit_core::config::millis(settings.lease);
    // By index: a stream of futures that borrow their batch trips up the `Send` proof of the
    // task that runs this.
    let sends =
        (0..batches.len()).map(|at| renew_batch(store, batches.get(at).map_or(&[][..], Vec::as_slice), lease_ms));
    let mut replies = futures_util::stream::iter(sends).buffered(IN_FLIGHT);
    let mut failed = Vec::new();
    let mut at = 0;
    while let Some((sent_at, outcome)) = replies.next().await {
        let batch = batches.get(at).map_or(&[][..], Vec::as_slice);
        at += 1;
        match outcome {
            Ok((answers, acknowledged)) => {
                let valid_until = lease_deadline(sent_at, settings.lease, settings.drift);
                if let Err(error) = &acknowledged {
                    // The holds are ours on the primary, but a failover may lose the renewal:
                    // their deadlines stay where the last acknowledged renewal put them.
                    tracing::debug!(%error, holds = batch.len(), "renewal not acknowledged by the replicas; retrying");
                }
                for ((id, target), answer) in batch.iter().zip(answers) {
                    match answer {
                        Ownership::Ours if acknowledged.is_err() => failed.push(*id),
                        Ownership::Ours => {
                            dog.stats.renewed();
                            target.signal.extend(valid_until);
                        }
                        Ownership::Gone => {
                            target.signal.lose(LossReason::RecordGone);
                        }
                        Ownership::Other => {
                            target.signal.lose(LossReason::OwnedByAnother);
                        }
                    }
                }
            }
            Err(error) => {
                tracing::debug!(%error, holds = batch.len(), "renewal not confirmed; retrying");
                failed.extend(batch.iter().map(|(id, _)| *id));
            }
        }
    }
    failed
}

/// Renews one batch in one pipeline; returns when it was sent and the answers.
async fn renew_batch(
    store: &Store,
    batch: &[&Due],
    lease_ms: u64,
) -> (Instant, lockkit_core::Result<(Vec<Ownership>, lockkit_core::Result<()>)>) {
    let targets: Vec<&HoldTarget> = batch.iter().map(|(_, target)| &**target).collect();
    let sent_at = Instant::now();
    let outcome = store.renew_batch(&targets, lease_ms).await;
    lockkit_core::metrics::renewal_batch(crate::BACKEND, batch.len(), sent_at.elapsed());
    (sent_at, outcome)
}
