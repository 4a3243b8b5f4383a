//! The store: the "server" every client of one in-process store shares.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use uuid::Uuid;

use super::BACKEND;
use super::provider::{MemoryLockProvider, MemoryLockProviderBuilder};
use crate::backend::{AcquireRequest, HoldSignal, OwnerMeta, deadline_after, lease_deadline};
use crate::{FencingToken, LockName, LossReason};

/// The in-process store: the "server" that [`MemoryLockProvider`] clients share.
///
/// Cheap to clone; clones are the same store. Fencing tokens come from one counter for the
/// whole store, so they are strictly increasing per name, and survive
/// [`restart`](Self::restart) as a store with persistence would.
#[derive(Clone, Default)]
pub struct MemoryStore {
    pub(super) shared: Arc<Mutex<StoreState>>,
}

#[derive(Default)]
pub(super) struct StoreState {
    pub(super) locks: HashMap<LockName, Entry>,
    pub(super) sessions: HashMap<u64, Session>,
    pub(super) last_token: u64,
    pub(super) last_id: u64,
}

pub(super) struct Session {
    pub(super) lease: Option<Lease>,
    pub(super) last_heartbeat: Instant,
    pub(super) holds: HashSet<LockName>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Lease {
    pub(super) ttl: Duration,
    pub(super) renew_every: Duration,
    pub(super) drift: Duration,
}

#[derive(Default)]
pub(super) struct Entry {
    pub(super) holder: Option<Holder>,
    pub(super) queue: VecDeque<Waiter>,
}

pub(super) struct Holder {
    pub(super) session: u64,
    pub(super) attempt: Uuid,
    pub(super) token: FencingToken,
    pub(super) signal: HoldSignal,
    /// Who took the hold, for `inspect`: this process, and when.
    pub(super) owner: OwnerMeta,
}

pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) session: u64,
    pub(super) attempt: Uuid,
    pub(super) notify: oneshot::Sender<Granted>,
}

/// What the store hands a queued waiter.
pub(super) struct Granted {
    pub(super) token: FencingToken,
    pub(super) signal: HoldSignal,
}

pub(super) enum Admission {
    Granted(Granted),
    Busy,
    Queued(u64, oneshot::Receiver<Granted>),
}

impl Session {
    pub(super) fn expires_at(&self) -> Option<Instant> {
        self.lease.map(|lease| deadline_after(self.last_heartbeat, lease.ttl))
    }

    pub(super) fn local_deadline(&self) -> Option<Instant> {
        self.lease.map(|lease| lease_deadline(self.last_heartbeat, lease.ttl, lease.drift))
    }
}

impl StoreState {
    pub(super) fn next_id(&mut self) -> u64 {
        self.last_id += 1;
        self.last_id
    }

    /// Frees the holds and drops the waiters of every session whose lease ran out by `now`.
    pub(super) fn expire(&mut self, now: Instant) {
        let expired: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, session)| session.expires_at().is_some_and(|at| at <= now))
            .filter(|(_, session)| !session.holds.is_empty())
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            tracing::debug!(session = id, "memory session expired");
            self.end_session_holds(id, LossReason::SessionExpired);
        }
    }

    /// Frees every hold of a session with `reason`, and drops its queued waiters.
    pub(super) fn end_session_holds(&mut self, session: u64, reason: LossReason) {
        let names: Vec<LockName> =
            self.sessions.get_mut(&session).map(|s| s.holds.drain().collect()).unwrap_or_default();
        for name in names {
            self.remove_holder(&name, |holder| holder.session == session, reason.clone());
        }
        for entry in self.locks.values_mut() {
            entry.queue.retain(|waiter| waiter.session != session);
        }
        self.locks.retain(|_, entry| entry.holder.is_some() || !entry.queue.is_empty());
    }

    /// Removes the holder of `name` if `is_it` says it is the one meant, ending its signal
    /// with `reason` (ignored when the owner already marked it released), then hands the
    /// lock to the next waiter. Returns whether a holder was removed.
    pub(super) fn remove_holder(
        &mut self,
        name: &LockName,
        is_it: impl Fn(&Holder) -> bool,
        reason: LossReason,
    ) -> bool {
        let Some(entry) = self.locks.get_mut(name) else { return false };
        if !entry.holder.as_ref().is_some_and(is_it) {
            return false;
        }
        if let Some(holder) = entry.holder.take() {
            holder.signal.lose(reason);
            if let Some(session) = self.sessions.get_mut(&holder.session) {
                session.holds.remove(name);
            }
        }
        self.hand_off(name);
        true
    }

    /// Grants a free lock to the first waiter still listening, in arrival order.
    pub(super) fn hand_off(&mut self, name: &LockName) {
        loop {
            let Some(entry) = self.locks.get_mut(name) else { return };
            if entry.holder.is_some() {
                return;
            }
            let Some(waiter) = entry.queue.pop_front() else {
                self.locks.remove(name);
                return;
            };
            let granted = self.install_holder(name, waiter.session, waiter.attempt);
            if let Err(undelivered) = waiter.notify.send(granted) {
                // The waiter was cancelled before it could take the grant: take it back.
                undelivered.signal.release();
                self.uninstall_holder(name, waiter.attempt);
            } else {
                return;
            }
        }
    }

    pub(super) fn install_holder(&mut self, name: &LockName, session_id: u64, attempt: Uuid) -> Granted {
        self.last_token += 1;
        let token = FencingToken::new(self.last_token);
        let valid_until = self.sessions.get_mut(&session_id).and_then(|session| {
            session.holds.insert(name.clone());
            session.local_deadline()
        });
        let signal = HoldSignal::new(BACKEND, name.clone(), valid_until);
        let entry = self.locks.entry(name.clone()).or_default();
        entry.holder = Some(Holder {
            session: session_id,
            attempt,
            token,
            signal: signal.clone(),
            owner: OwnerMeta::current(attempt),
        });
        Granted { token, signal }
    }

    pub(super) fn uninstall_holder(&mut self, name: &LockName, attempt: Uuid) {
        let Some(entry) = self.locks.get_mut(name) else { return };
        if entry.holder.as_ref().is_some_and(|h| h.attempt == attempt)
            && let Some(holder) = entry.holder.take()
            && let Some(session) = self.sessions.get_mut(&holder.session)
        {
            session.holds.remove(name);
        }
    }

    pub(super) fn admit(&mut self, session: u64, request: &AcquireRequest) -> Admission {
        let entry = self.locks.entry(request.lock.clone()).or_default();
        if entry.holder.is_none() && entry.queue.is_empty() {
            return Admission::Granted(self.install_holder(&request.lock, session, request.attempt));
        }
        if !request.deadline.may_wait() {
            return Admission::Busy;
        }
        let id = self.next_id();
        let (notify, receiver) = oneshot::channel();
        if let Some(entry) = self.locks.get_mut(&request.lock) {
            entry.queue.push_back(Waiter { id, session, attempt: request.attempt, notify });
        }
        Admission::Queued(id, receiver)
    }

    pub(super) fn holder_expiry(&self, name: &LockName) -> Option<Instant> {
        let holder = self.locks.get(name)?.holder.as_ref()?;
        self.sessions.get(&holder.session)?.expires_at()
    }
}

impl MemoryStore {
    /// A new, empty store.
    pub fn new() -> Self {
        Self::default()
    }

    pub(super) fn state(&self) -> MutexGuard<'_, StoreState> {
        // No code panics while holding this lock; recover the data if a panic ever did.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The store's state after expiring overdue sessions: every read starts here, so expiry
    /// needs no timer task of its own.
    pub(super) fn current(&self) -> MutexGuard<'_, StoreState> {
        let mut state = self.state();
        state.expire(Instant::now());
        state
    }

    /// A new client of this store with default options (no lease).
    pub fn client(&self) -> MemoryLockProvider {
        MemoryLockProviderBuilder::default().store(self.clone()).build_unchecked()
    }

    /// A builder for a client of this store.
    pub fn client_builder(&self) -> MemoryLockProviderBuilder {
        MemoryLockProviderBuilder::default().store(self.clone())
    }

    /// The store called `name` in this process: every call with the same name returns the
    /// same store (what `mem://NAME` URLs connect to).
    pub fn named(name: &str) -> MemoryStore {
        static STORES: OnceLock<Mutex<HashMap<String, MemoryStore>>> = OnceLock::new();
        let stores = STORES.get_or_init(Mutex::default);
        stores.lock().unwrap_or_else(PoisonError::into_inner).entry(name.to_owned()).or_default().clone()
    }

    /// Fault hook: deletes the record of `name` behind its holder's back, as an administrator
    /// deleting a key or znode would. The holder's guard reports
    /// [`LossReason::RecordGone`] at once and the next waiter is granted the lock. Returns
    /// whether the lock was held.
    #[cfg(any(test, feature = "test-util"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn delete_record(&self, name: &str) -> bool {
        let Ok(name) = LockName::new(name) else { return false };
        self.current().remove_holder(&name, |_| true, LossReason::RecordGone)
    }

    /// Fault hook: restarts the store. Every hold is lost with [`LossReason::StoreRestarted`]
    /// and every waiter's acquisition fails with a retryable connection error; the fencing
    /// counter is kept, as on a store that persists it.
    #[cfg(any(test, feature = "test-util"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn restart(&self) {
        let mut state = self.state();
        for (_, entry) in state.locks.drain() {
            if let Some(holder) = entry.holder {
                holder.signal.lose(LossReason::StoreRestarted);
            }
        }
        for session in state.sessions.values_mut() {
            session.holds.clear();
        }
    }

    pub(super) fn open_session(&self, lease: Option<Lease>) -> u64 {
        let mut state = self.state();
        let id = state.next_id();
        state.sessions.insert(id, Session { lease, last_heartbeat: Instant::now(), holds: HashSet::new() });
        id
    }

    /// A renewal of `session` sent at `sent_at`: extends its lease and every hold's deadline.
    /// A session that already expired comes back empty, as a reconnecting client gets a new
    /// session. Returns how many holds were renewed.
    pub(super) fn heartbeat(&self, session: u64, sent_at: Instant) -> usize {
        let mut state = self.current();
        let StoreState { sessions, locks, .. } = &mut *state;
        let Some(session) = sessions.get_mut(&session) else { return 0 };
        session.last_heartbeat = session.last_heartbeat.max(sent_at);
        let Some(deadline) = session.local_deadline() else { return 0 };
        for name in &session.holds {
            if let Some(holder) = locks.get(name).and_then(|entry| entry.holder.as_ref()) {
                holder.signal.extend(deadline);
            }
        }
        session.holds.len()
    }

    #[cfg(any(test, feature = "test-util"))]
    pub(super) fn close_session(&self, session: u64, reason: LossReason) {
        let mut state = self.state();
        state.end_session_holds(session, reason);
        state.sessions.remove(&session);
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("MemoryStore")
            .field("locks", &state.locks.len())
            .field("sessions", &state.sessions.len())
            .field("last_token", &state.last_token)
            .finish()
    }
}
