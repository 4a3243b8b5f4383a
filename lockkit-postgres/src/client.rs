//! The shared state of one PostgreSQL provider ([`Inner`]): its store (connections and
//! statements), its waiters' wake-ups, the holds it renews and the renewal task; and the wait
//! for a waiter's turn that locks and elections share.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use lockkit_core::backend::{AcquireRequest, Deadline, HoldSignal, lease_deadline};
use lockkit_core::sync::lock_or_recover;
use lockkit_core::{LockName, LossReason};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_postgres::types::Type;

use crate::listener::Wakeups;
use crate::store::{Failure, Store};

/// The safety-net poll of a waiter: it looks again this often even without a notification.
pub(crate) const SAFETY_POLL: Duration = Duration::from_secs(2);
/// How often a waiter retries while the server cannot be reached.
pub(crate) const RETRY: Duration = Duration::from_millis(100);

/// The shared state of one provider.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) store: Arc<Store>,
    pub(crate) wakeups: Wakeups,
    pub(crate) holds: Mutex<Holds>,
    /// Wakes the renewal task when the first hold arrives.
    pub(crate) renew_wake: Arc<Notify>,
}

#[derive(Debug, Default)]
pub(crate) struct Holds {
    pub(crate) next_id: u64,
    /// By id: the lock, the owner id (shared with the hold, so that a renewal round copies
    /// no string) and the signal.
    pub(crate) live: HashMap<u64, (LockName, Arc<str>, HoldSignal)>,
    pub(crate) task: Option<JoinHandle<()>>,
}

impl Inner {
    pub(crate) fn holds(&self) -> std::sync::MutexGuard<'_, Holds> {
        lock_or_recover(&self.holds)
    }

    /// Registers a hold for renewal, starting (or restarting, on this runtime) the task.
    pub(crate) fn track(self: &Arc<Self>, lock: LockName, owner: Arc<str>, signal: HoldSignal) -> u64 {
        let mut holds = self.holds();
        holds.next_id += 1;
        let id = holds.next_id;
        holds.live.insert(id, (lock, owner, signal));
        if holds.task.as_ref().is_none_or(JoinHandle::is_finished) {
            // On the home runtime: renewal never depends on the runtime the holds came from.
            let runtime = lockkit_core::home::runtime();
            holds.task = runtime.map(|runtime| runtime.spawn(renewals(Arc::downgrade(self))));
        }
        drop(holds);
        self.renew_wake.notify_one();
        id
    }

    pub(crate) fn untrack(&self, id: u64) {
        self.holds().live.remove(&id);
    }

    /// Voids `owner` and deletes its row of `lock`, if it is there (`Ok(true)`).
    pub(crate) async fn abandon(&self, lock: &LockName, owner: &str) -> std::result::Result<bool, Failure> {
        let name = crate::stored_name(lock.as_str());
        let rows =
            self.store.query(Some(lock), &self.store.sql.abandon, &[(&name, Type::TEXT), (&owner, Type::TEXT)]).await?;
        Ok(rows.first().and_then(|row| row.try_get::<_, Option<bool>>(0).ok().flatten()).unwrap_or(false))
    }

    /// Deletes `owner`'s row of `lock`, if it is there (`Ok(true)`), and wakes the waiters.
    pub(crate) async fn delete_own(&self, lock: &LockName, owner: &str) -> std::result::Result<bool, Failure> {
        let rows = self
            .store
            .query(
                Some(lock),
                &self.store.sql.release,
                &[(&crate::stored_name(lock.as_str()), Type::TEXT), (&owner, Type::TEXT)],
            )
            .await?;
        Ok(rows.first().and_then(|row| row.try_get::<_, Option<bool>>(0).ok().flatten()).unwrap_or(false))
    }
}

/// After a try of `request` that failed with `failure` that is not a refusal: the pause before
/// the next try, or the error that ends the acquisition. A try not sent is sent again after
/// [`RETRY`] (a try that cannot wait, or that retrying cannot fix, ends); a try whose reply was
/// lost may have committed, so the next one, with the same owner id, goes at once and finds
/// it (a drop abandons it). Lock waiters and election candidates share it.
pub(crate) fn after_failure(request: &AcquireRequest, failure: Failure) -> lockkit_core::Result<Duration> {
    let (error, pause) = match failure {
        Failure::NotSent(error) if error.is_retryable() => (error, RETRY),
        Failure::Unknown(error) => (error, Duration::ZERO),
        Failure::NotSent(error) | Failure::Refused(error) => return Err(error),
    };
    if matches!(request.deadline, Deadline::Now) {
        return Err(error);
    }
    request.note_failure(error);
    Ok(pause)
}

/// Waits for a waiter's turn to look again: its wake-up (`notified`, when it is registered
/// and the `LISTEN` connection is up) or a pause of at most `wait` (a safety poll of at most
/// [`SAFETY_POLL`]; [`RETRY`] when a wake-up cannot come), never past the request's deadline.
/// Returns `false` once the deadline has passed. Lock waiters and election candidates share it.
pub(crate) async fn wait_turn(
    inner: &Inner,
    request: &AcquireRequest,
    wait: Duration,
    registered: bool,
    notified: Option<std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>>>,
) -> bool {
    let mut pause = wait.min(SAFETY_POLL);
    if !registered || !inner.wakeups.is_up().await {
        pause = pause.min(RETRY);
    }
    let until = Instant::now() + pause;
    let until = match request.deadline {
        Deadline::At(deadline) if deadline <= until => {
            if deadline <= Instant::now() {
                return false;
            }
            deadline
        }
        _ => until,
    };
    match notified {
        Some(notified) => {
            let _ = tokio::time::timeout_at(until.into(), notified).await;
        }
        None => tokio::time::sleep_until(until.into()).await,
    }
    !matches!(request.deadline, Deadline::At(deadline) if Instant::now() >= deadline)
}

/// Holds renewed per statement: a round of many holds goes in statements of this many, each
/// with a deadline counted from its own send, so that a long round does not leave its last
/// holds a deadline that counts the whole round.
const RENEW_CHUNK: usize = 1000;

/// Renewal statements in flight at once on the connection: the server runs the next one as
/// soon as it finishes one, instead of waiting for the client to read the reply, wake up and
/// send the next; few enough that a statement does not wait behind a whole round, and that
/// the holds of the first statements are renewed first.
const IN_FLIGHT: usize = 4;

/// One hold of a renewal round: its id, lock, owner and signal.
type Renewing = (u64, LockName, Arc<str>, HoldSignal);

/// The renewal task of one provider: every `renew_every`, `UPDATE`s of [`RENEW_CHUNK`] holds
/// each renew every hold, the holds that run out first in the first statements, [`IN_FLIGHT`]
/// statements at a time; a hold a statement does not renew is lost. A statement that is not
/// answered is sent again soon, for its own holds only: the others were renewed.
async fn renewals(inner: Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else { return };
        let settings = &strong.store.settings;
        // The round counts from here: taking and ordering 100,000 holds is part of it.
        let started = Instant::now();
        let mut batch: Vec<Renewing> = {
            let mut holds = strong.holds();
            holds.live.retain(|_, (_, _, signal)| signal.is_held());
            holds
                .live
                .iter()
                .map(|(id, (lock, owner, signal))| (*id, lock.clone(), Arc::clone(owner), signal.clone()))
                .collect()
        };
        // The most urgent first (a hold without a deadline last: it cannot run out); each
        // hold's deadline read once, not at each comparison.
        batch.sort_by_cached_key(|(_, _, _, signal)| {
            let until = signal.valid_until();
            (until.is_none(), until)
        });
        let every = settings.renew_every;
        if batch.is_empty() {
            let wake = Arc::clone(&strong.renew_wake);
            drop(strong);
            // Sleep while nothing is held; end when the provider goes.
            let _ = tokio::time::timeout(Duration::from_secs(5), wake.notified()).await;
            continue;
        }
        let mut round_trips = 0;
        let mut unanswered = renew_all(&strong, &batch, &mut round_trips).await;
        strong.store.renewals.round_took(crate::BACKEND, batch.len(), started.elapsed(), every);
        // Unanswered statements: their holds again soon, until the next round is due (the
        // holds' deadlines keep running meanwhile; the next round takes them all anyway).
        let retry = (every / 4).max(Duration::from_millis(20));
        while !unanswered.is_empty() && Instant::now() + retry < started + every {
            tokio::time::sleep(retry).await;
            unanswered.retain(|(_, _, _, signal)| signal.is_held());
            unanswered = renew_all(&strong, &unanswered, &mut round_trips).await;
        }
        // Counted together once the round is done, so that a reader between two rounds
        // (`lockkit bench`) never sees a round's round trips without the round.
        let counters = &strong.store.renewals;
        if unanswered.is_empty() {
            counters.round(round_trips);
        } else {
            counters.round_trips(round_trips);
        }
        let next = started + every;
        drop(strong);
        // A new hold does not need a renewal at once: sleep until the next round.
        tokio::time::sleep_until(next.into()).await;
    }
}

/// Renews `holds` in statements of [`RENEW_CHUNK`], [`IN_FLIGHT`] at a time and in order,
/// counting them in `round_trips`; returns the holds of the statements not answered.
async fn renew_all(strong: &Arc<Inner>, holds: &[Renewing], round_trips: &mut u64) -> Vec<Renewing> {
    let chunks: Vec<&[Renewing]> = holds.chunks(RENEW_CHUNK).collect();
    *round_trips += chunks.len() as u64;
    // By index: a stream of futures that borrow their chunk trips up the `Send` proof of the
    // task that runs this.
    let sends = (0..chunks.len()).map(|at| renew_chunk(strong, chunks.get(at).copied().unwrap_or_default()));
    let answered: Vec<bool> = futures_util::stream::iter(sends).buffered(IN_FLIGHT).collect().await;
    chunks.iter().zip(answered).filter(|(_, answered)| !answered).flat_map(|(chunk, _)| chunk.iter().cloned()).collect()
}

/// Renews `chunk` in one statement, each renewed hold until the lease (less the drift) after
/// the statement's send; returns whether the statement was answered.
async fn renew_chunk(strong: &Arc<Inner>, chunk: &[Renewing]) -> bool {
    let settings = &strong.store.settings;
    let names: Vec<Cow<'_, str>> = chunk.iter().map(|(_, lock, _, _)| crate::stored(lock.as_str())).collect();
    let owners: Vec<&str> = chunk.iter().map(|(_, _, owner, _)| &**owner).collect();
    let lease_ms = i64::try_from(settings.lease.as_millis()).unwrap_or(i64::MAX);
    let sent = Instant::now();
    let outcome = strong
        .store
        .query_now(
            None,
            &strong.store.sql.renew,
            &[(&names, Type::TEXT_ARRAY), (&owners, Type::TEXT_ARRAY), (&lease_ms, Type::INT8)],
        )
        .await;
    let Ok(rows) = outcome else { return false };
    let counters = &strong.store.renewals;
    let deadline = lease_deadline(sent, settings.lease, settings.drift);
    // Each row answers for the hold at its place (from 1) in the statement's arrays; a hold
    // without a row keeps its deadline.
    for row in rows {
        let (Ok(pos), Ok(renewed), Ok(present)) =
            (row.try_get::<_, i32>(0), row.try_get::<_, bool>(1), row.try_get::<_, bool>(2))
        else {
            continue;
        };
        let Some((id, _, _, signal)) =
            usize::try_from(pos).ok().and_then(|pos| pos.checked_sub(1)).and_then(|at| chunk.get(at))
        else {
            continue;
        };
        match (renewed, present) {
            (true, _) => {
                signal.extend(deadline);
                counters.renewed();
            }
            (false, true) => {
                signal.lose(LossReason::OwnedByAnother);
                strong.untrack(*id);
            }
            (false, false) => {
                signal.lose(LossReason::RecordGone);
                strong.untrack(*id);
            }
        }
    }
    true
}
