//! One client of a store: its session, its watchdog, and the backend protocol.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use std::collections::VecDeque;

use tokio::sync::{broadcast, oneshot};
use tracing::Instrument;
use uuid::Uuid;

use crate::backend::{AcquireRequest, Grant, HeldLock, HolderInfo, LeaderEvents, LockBackend, LockInfo};
use crate::{Capabilities, Error, LeaderEvent, LockName, LossReason, Result};

use super::BACKEND;
use super::store::{Admission, Granted, Lease, MemoryStore};
pub(super) struct MemoryClient {
    pub(super) me: Weak<MemoryClient>,
    pub(super) store: MemoryStore,
    pub(super) session: u64,
    pub(super) lease: Option<Lease>,
    pub(super) killed: AtomicBool,
    pub(super) partitioned: AtomicBool,
    pub(super) watchdog: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl fmt::Debug for MemoryClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryClient").field("session", &self.session).field("lease", &self.lease).finish()
    }
}

impl MemoryClient {
    pub(super) fn reachable(&self, lock: &LockName) -> Result<()> {
        if self.killed.load(Ordering::SeqCst) {
            return Err(Error::connection(BACKEND, Some(lock), "this memory client was killed"));
        }
        if self.partitioned.load(Ordering::SeqCst) {
            return Err(Error::connection(BACKEND, Some(lock), "this memory client is partitioned from its store"));
        }
        Ok(())
    }

    /// Starts the client's one renewal task, on lockkit's home runtime, if it has a lease and
    /// the task is not running: renewal never depends on the runtime the client is used from.
    pub(super) fn ensure_watchdog(&self) {
        let Some(lease) = self.lease else { return };
        let mut watchdog = self.watchdog.lock().unwrap_or_else(PoisonError::into_inner);
        if watchdog.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        let Some(runtime) = crate::home::runtime() else {
            return;
        };
        *watchdog = Some(runtime.spawn(renew_forever(self.me.clone(), lease.renew_every)));
    }

    pub(super) fn grant(&self, lock: LockName, attempt: Uuid, granted: Granted) -> Grant {
        let held = MemoryHeld { client: self.me.clone(), store: self.store.clone(), lock, attempt };
        Grant::new(granted.token, granted.signal, Box::new(held))
    }
}

/// The watchdog: one task per client renews every hold of the client in one store call.
pub(super) async fn renew_forever(client: Weak<MemoryClient>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(client) = client.upgrade() else { return };
        if client.killed.load(Ordering::SeqCst) {
            return;
        }
        if client.partitioned.load(Ordering::SeqCst) {
            continue;
        }
        let renewed = client.store.heartbeat(client.session, Instant::now());
        tracing::trace!(backend = BACKEND, session = client.session, renewed, "lockkit.renew");
    }
}

#[async_trait]
impl LockBackend for MemoryClient {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        // Everything but another process (its store is this process's memory), and a lease
        // only when it has one.
        Capabilities {
            lease: self.lease.is_some(),
            lease_renewal: self.lease.is_some(),
            cross_process: false,
            ..Capabilities::ALL
        }
    }

    fn renewal_interval(&self) -> Option<Duration> {
        self.lease.map(|lease| lease.renew_every)
    }

    /// `mem://@ADDRESS`: the store (not the client) in this process, so that every client of
    /// one store, `mem://NAME` URLs included, has one identity.
    fn store_identity(&self) -> Option<String> {
        Some(format!("mem://@{:x}", std::sync::Arc::as_ptr(&self.store.shared).cast::<()>() as usize))
    }

    async fn acquire(&self, request: AcquireRequest) -> Result<Option<Grant>> {
        self.reachable(&request.lock)?;
        self.ensure_watchdog();
        let admission = {
            let mut state = self.store.current();
            if let Some(session) = state.sessions.get_mut(&self.session) {
                // The request itself renews the session.
                session.last_heartbeat = Instant::now();
            }
            state.admit(self.session, &request)
        };
        let (id, receiver) = match admission {
            Admission::Granted(granted) => return Ok(Some(self.grant(request.lock, request.attempt, granted))),
            Admission::Busy => return Ok(None),
            Admission::Conflict(why) => return Err(Error::conflict(BACKEND, Some(&request.lock), why)),
            Admission::Queued(id, receiver) => (id, receiver),
        };
        let mut waiting =
            QueuedWaiter { store: self.store.clone(), lock: request.lock.clone(), id, receiver, done: false };
        let span = tracing::debug_span!("lockkit.wait", backend = BACKEND, lock = %request.lock);
        async {
            loop {
                let holder_expiry = self.store.state().holder_expiry(&request.lock);
                tokio::select! {
                    granted = &mut waiting.receiver => {
                        waiting.done = true;
                        return match granted {
                            Ok(granted) => Ok(Some(self.grant(request.lock.clone(), request.attempt, granted))),
                            Err(_) => Err(Error::connection(
                                BACKEND,
                                Some(&request.lock),
                                "the store dropped this waiter (session expired, client killed or store restarted); try again",
                            )),
                        };
                    }
                    () = sleep_until(holder_expiry) => {
                        // The holder's lease ran out: expire it, which hands the lock on.
                        drop(self.store.current());
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    fn observe(&self, lock: &LockName) -> Result<LeaderEvents> {
        self.reachable(lock)?;
        let (seq, state, receiver) = self.store.current().election_state(lock);
        let follow = Follow {
            store: self.store.clone(),
            lock: lock.clone(),
            receiver,
            last: seq,
            pending: VecDeque::from([state]),
        };
        Ok(Box::pin(futures_util::stream::unfold(follow, Follow::next)))
    }

    async fn break_lock(&self, lock: &LockName) -> Result<Vec<HolderInfo>> {
        self.reachable(lock)?;
        Ok(break_holds(&self.store, lock))
    }

    async fn inspect(&self, lock: &LockName) -> Result<LockInfo> {
        self.reachable(lock)?;
        let state = self.store.current();
        let Some(entry) = state.locks.get(lock) else { return Ok(LockInfo::default()) };
        let holders = entry.holders.iter().map(|holder| {
            let info = holder.owner().holder(holder.token).with_kind(holder.kind.clone());
            match state.holder_expires_at(holder) {
                Some(at) => info.with_lease_left(at.saturating_duration_since(Instant::now())),
                None => info,
            }
        });
        Ok(LockInfo::new(holders.collect(), Some(entry.queue.len())))
    }
}

/// The memory backend's break: every holder of the name is removed (their guards report
/// [`LossReason::RecordGone`] at once) and the queue's head is handed the lock.
pub(super) fn break_holds(store: &MemoryStore, lock: &LockName) -> Vec<HolderInfo> {
    let mut state = store.current();
    let Some(entry) = state.locks.get(lock) else { return Vec::new() };
    let broken = entry.holders.iter().map(|holder| holder.owner().holder(holder.token).with_kind(holder.kind.clone()));
    let broken: Vec<HolderInfo> = broken.collect();
    state.remove_holders(lock, |_| true, LossReason::RecordGone);
    broken
}

/// An observer of one election: the events to hand out first, then the store's feed.
pub(super) struct Follow {
    store: MemoryStore,
    lock: LockName,
    receiver: broadcast::Receiver<(u64, LeaderEvent)>,
    /// The number of the last change handed out (or covered by a state handed out).
    last: u64,
    pending: VecDeque<LeaderEvent>,
}

impl Follow {
    async fn next(mut self) -> Option<(Result<LeaderEvent>, Self)> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some((Ok(event), self));
            }
            match self.receiver.recv().await {
                Ok((seq, event)) if seq > self.last => {
                    self.last = seq;
                    return Some((Ok(event), self));
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // Fell behind the feed: say so, then start again from the state now.
                    let (seq, state, receiver) = self.store.current().election_state(&self.lock);
                    (self.last, self.receiver) = (seq, receiver);
                    self.pending.extend([LeaderEvent::Gap, state]);
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

pub(super) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// A waiter's place in a queue; dropping it (cancellation) removes the place, and frees a
/// grant that arrived while the waiter was being dropped.
pub(super) struct QueuedWaiter {
    pub(super) store: MemoryStore,
    pub(super) lock: LockName,
    pub(super) id: u64,
    pub(super) receiver: oneshot::Receiver<Granted>,
    pub(super) done: bool,
}

impl Drop for QueuedWaiter {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = self.store.state();
        if let Some(entry) = state.locks.get_mut(&self.lock) {
            entry.queue.retain(|waiter| waiter.id != self.id);
        }
        if let Ok(granted) = self.receiver.try_recv() {
            granted.signal.release();
            let token = granted.token;
            state.remove_holders(&self.lock, |holder| holder.token == token, LossReason::ClientClosed);
        } else {
            // The queue's head may have changed: admit whoever fits now.
            state.hand_off(&self.lock);
        }
    }
}

/// The memory backend's record of one hold.
pub(super) struct MemoryHeld {
    pub(super) client: Weak<MemoryClient>,
    pub(super) store: MemoryStore,
    pub(super) lock: LockName,
    pub(super) attempt: Uuid,
}

impl MemoryHeld {
    /// Frees the hold in the store: an in-process call that never waits.
    fn free(&self) -> Result<()> {
        if let Some(client) = self.client.upgrade() {
            client.reachable(&self.lock)?;
        }
        let attempt = self.attempt;
        let removed =
            self.store.current().remove_holders(&self.lock, |holder| holder.attempt == attempt, LossReason::RecordGone);
        if removed { Ok(()) } else { Err(Error::lost(BACKEND, &self.lock, LossReason::RecordGone)) }
    }
}

#[async_trait]
impl HeldLock for MemoryHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        self.free()
    }

    fn release_at_once(&mut self) -> Option<Result<()>> {
        Some(self.free())
    }

    fn downgrade(&self) -> Option<Pin<Box<dyn Future<Output = Result<()>> + Send + 'static>>> {
        let (client, store, lock, attempt) = (self.client.clone(), self.store.clone(), self.lock.clone(), self.attempt);
        Some(Box::pin(async move {
            if let Some(client) = client.upgrade() {
                client.reachable(&lock)?;
            }
            if store.current().downgrade(&lock, attempt) {
                Ok(())
            } else {
                Err(Error::lost(BACKEND, &lock, LossReason::RecordGone))
            }
        }))
    }
}
