//! The in-process backend: the executable reference of the contract and the embedded default.
//!
//! A [`MemoryStore`] plays the server; each [`MemoryLockProvider`] is one client of it with a
//! session of its own, as a ZooKeeper client has. Without a lease (the default) a hold lasts
//! until released. With a lease, the client renews its session from one watchdog task per
//! provider, every hold of the client is guaranteed until the send time of the last confirmed
//! renewal plus the lease minus the drift margin, and the store frees the holds of a session
//! that stops renewing when the lease runs out.
//!
//! The fault hooks (feature `test-util`: `MemoryLockProvider::kill` and `partition`,
//! `MemoryStore::delete_record` and `restart`) make holds lost for real, so every loss case
//! of the conformance kit runs against this backend too.
//!
//! URLs: `mem://` (a store of its own per connect) or `mem://NAME` (one store per NAME per
//! process), with the option `lease` (and `renew_every`, `drift`).
//!
//! ```
//! use lockkit_core::memory::MemoryLockProvider;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lockkit_core::Result<()> {
//! let provider = MemoryLockProvider::new();
//! let lock = provider.lock("orders/42")?;
//! let guard = lock.acquire().await?;
//! println!("holding {} with token {}", guard.name(), guard.token());
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::oneshot;
use tracing::Instrument;
use uuid::Uuid;

use crate::backend::{
    AcquireRequest, Grant, HeldLock, HoldSignal, LockBackend, LockInfo, OwnerMeta, deadline_after, lease_deadline,
};
use crate::config::{ConnectFuture, Scheme, Settings, StoreUrl};
use crate::{Capabilities, Error, FencingToken, LockName, LockProvider, LossReason, Result};

const BACKEND: &str = "memory";

/// The checks of this backend's settings.
const SETTINGS: Settings = Settings::of(BACKEND);

/// The options a `mem://` URL and [`MemoryLockProviderBuilder::option`] take.
pub const OPTIONS: &[&str] = &["lease", "renew_every", "drift"];

/// The `mem` scheme: `mem://` is a store of its own, `mem://NAME` one store per NAME per
/// process, shared by every connect with that name (each as a client of its own).
pub const SCHEME: Scheme = Scheme { names: &["mem"], backend: BACKEND, connect: connect_url };

fn connect_url(url: StoreUrl) -> ConnectFuture {
    Box::pin(async move { MemoryLockProvider::from_url(&url).map(LockProvider::from) })
}

/// The in-process store: the "server" that [`MemoryLockProvider`] clients share.
///
/// Cheap to clone; clones are the same store. Fencing tokens come from one counter for the
/// whole store, so they are strictly increasing per name, and survive
/// [`restart`](Self::restart) as a store with persistence would.
#[derive(Clone, Default)]
pub struct MemoryStore {
    shared: Arc<Mutex<StoreState>>,
}

#[derive(Default)]
struct StoreState {
    locks: HashMap<LockName, Entry>,
    sessions: HashMap<u64, Session>,
    last_token: u64,
    last_id: u64,
}

struct Session {
    lease: Option<Lease>,
    last_heartbeat: Instant,
    holds: HashSet<LockName>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lease {
    ttl: Duration,
    renew_every: Duration,
    drift: Duration,
}

#[derive(Default)]
struct Entry {
    holder: Option<Holder>,
    queue: VecDeque<Waiter>,
}

struct Holder {
    session: u64,
    attempt: Uuid,
    token: FencingToken,
    signal: HoldSignal,
    /// Who took the hold, for `inspect`: this process, and when.
    owner: OwnerMeta,
}

struct Waiter {
    id: u64,
    session: u64,
    attempt: Uuid,
    notify: oneshot::Sender<Granted>,
}

/// What the store hands a queued waiter.
struct Granted {
    token: FencingToken,
    signal: HoldSignal,
}

enum Admission {
    Granted(Granted),
    Busy,
    Queued(u64, oneshot::Receiver<Granted>),
}

impl Session {
    fn expires_at(&self) -> Option<Instant> {
        self.lease.map(|lease| deadline_after(self.last_heartbeat, lease.ttl))
    }

    fn local_deadline(&self) -> Option<Instant> {
        self.lease.map(|lease| lease_deadline(self.last_heartbeat, lease.ttl, lease.drift))
    }
}

impl StoreState {
    fn next_id(&mut self) -> u64 {
        self.last_id += 1;
        self.last_id
    }

    /// Frees the holds and drops the waiters of every session whose lease ran out by `now`.
    fn expire(&mut self, now: Instant) {
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
    fn end_session_holds(&mut self, session: u64, reason: LossReason) {
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
    fn remove_holder(&mut self, name: &LockName, is_it: impl Fn(&Holder) -> bool, reason: LossReason) -> bool {
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
    fn hand_off(&mut self, name: &LockName) {
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

    fn install_holder(&mut self, name: &LockName, session_id: u64, attempt: Uuid) -> Granted {
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

    fn uninstall_holder(&mut self, name: &LockName, attempt: Uuid) {
        let Some(entry) = self.locks.get_mut(name) else { return };
        if entry.holder.as_ref().is_some_and(|h| h.attempt == attempt)
            && let Some(holder) = entry.holder.take()
            && let Some(session) = self.sessions.get_mut(&holder.session)
        {
            session.holds.remove(name);
        }
    }

    fn admit(&mut self, session: u64, request: &AcquireRequest) -> Admission {
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

    fn holder_expiry(&self, name: &LockName) -> Option<Instant> {
        let holder = self.locks.get(name)?.holder.as_ref()?;
        self.sessions.get(&holder.session)?.expires_at()
    }
}

impl MemoryStore {
    /// A new, empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, StoreState> {
        // No code panics while holding this lock; recover the data if a panic ever did.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The store's state after expiring overdue sessions: every read starts here, so expiry
    /// needs no timer task of its own.
    fn current(&self) -> MutexGuard<'_, StoreState> {
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

    fn open_session(&self, lease: Option<Lease>) -> u64 {
        let mut state = self.state();
        let id = state.next_id();
        state.sessions.insert(id, Session { lease, last_heartbeat: Instant::now(), holds: HashSet::new() });
        id
    }

    /// A renewal of `session` sent at `sent_at`: extends its lease and every hold's deadline.
    /// A session that already expired comes back empty, as a reconnecting client gets a new
    /// session. Returns how many holds were renewed.
    fn heartbeat(&self, session: u64, sent_at: Instant) -> usize {
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
    fn close_session(&self, session: u64, reason: LossReason) {
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

/// A client of a [`MemoryStore`]: the in-process lock provider.
///
/// [`MemoryLockProvider::new`] makes a private store with one client, the embedded default.
/// For several independent clients of one store (as the conformance kit uses), make a
/// [`MemoryStore`] and call [`MemoryStore::client`] once per client.
///
/// It dereferences to [`LockProvider`], so `provider.lock(name)` works directly, and
/// converts into one with `LockProvider::from`.
#[derive(Clone, Debug)]
pub struct MemoryLockProvider {
    provider: LockProvider,
    client: Arc<MemoryClient>,
}

/// Builds a [`MemoryLockProvider`]; every setting is checked by [`build`](Self::build).
#[derive(Clone, Debug, Default)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct MemoryLockProviderBuilder {
    store: Option<MemoryStore>,
    lease: Option<Duration>,
    renew_every: Option<Duration>,
    drift: Option<Duration>,
}

impl MemoryLockProviderBuilder {
    /// The store to be a client of; a new private store by default.
    pub fn store(mut self, store: MemoryStore) -> Self {
        self.store = Some(store);
        self
    }

    /// Gives holds a lease, renewed automatically: a client that stops renewing (killed or
    /// partitioned) loses its holds when the lease runs out. No lease by default; at most
    /// [`MAX_DURATION`](crate::config::MAX_DURATION). URL option `lease`.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How often the watchdog renews the lease; a third of the lease by default. URL option
    /// `renew_every`.
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every);
        self
    }

    /// How much earlier than the store the client considers its lease ended; 2 % of the
    /// lease by default. URL option `drift`.
    pub fn drift(mut self, drift: Duration) -> Self {
        self.drift = Some(drift);
        self
    }

    /// Sets the option called `key` from its text, as a URL's query gives it: the same
    /// names as the methods ([`OPTIONS`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for an unknown option or a value that is not a duration.
    pub fn option(self, key: &str, value: &str) -> Result<Self> {
        Ok(match key {
            "lease" => self.lease(SETTINGS.duration(key, value)?),
            "renew_every" => self.renew_every(SETTINGS.duration(key, value)?),
            "drift" => self.drift(SETTINGS.duration(key, value)?),
            _ => return Err(SETTINGS.unknown(key, OPTIONS)),
        })
    }

    /// Checks the settings and connects the client.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a lease that is zero or longer than a day, a renewal
    /// interval that is zero or not shorter than the lease, a drift margin that leaves no
    /// time between renewals, or renewal settings without a lease.
    pub fn build(self) -> Result<MemoryLockProvider> {
        match self.lease {
            None if self.renew_every.is_some() || self.drift.is_some() => {
                return Err(SETTINGS.invalid(
                    "renew_every and drift only apply to leased holds: set a lease too, or remove them",
                ));
            }
            None => {}
            Some(lease) => {
                SETTINGS.within("the lease", lease, Duration::from_millis(1), Duration::MAX)?;
                let renew = self.renew_every.unwrap_or(lease / 3);
                if renew.is_zero() || renew >= lease {
                    return Err(SETTINGS.invalid(format!(
                        "renew_every ({renew:?}) must be above zero and below the lease ({lease:?}); a third of the lease is a good choice"
                    )));
                }
                let drift = self.drift.unwrap_or(lease / 50);
                if drift.saturating_add(renew) >= lease {
                    return Err(SETTINGS.invalid(format!(
                        "drift ({drift:?}) plus renew_every ({renew:?}) must stay below the lease ({lease:?}), or holds expire between renewals"
                    )));
                }
            }
        }
        Ok(self.build_unchecked())
    }

    fn build_unchecked(self) -> MemoryLockProvider {
        let lease = self.lease.map(|ttl| Lease {
            ttl,
            renew_every: self.renew_every.unwrap_or(ttl / 3),
            drift: self.drift.unwrap_or(ttl / 50),
        });
        let store = self.store.unwrap_or_default();
        let session = store.open_session(lease);
        let client = Arc::new_cyclic(|me| MemoryClient {
            me: me.clone(),
            store,
            session,
            lease,
            killed: AtomicBool::new(false),
            partitioned: AtomicBool::new(false),
            watchdog: Mutex::new(None),
        });
        MemoryLockProvider { provider: LockProvider::new(client.clone()), client }
    }
}

impl MemoryLockProvider {
    /// A client of a new private store, without leases: the embedded default.
    pub fn new() -> Self {
        MemoryLockProviderBuilder::default().build_unchecked()
    }

    /// A builder, to set a lease or share a store.
    pub fn builder() -> MemoryLockProviderBuilder {
        MemoryLockProviderBuilder::default()
    }

    /// A client of the store a `mem://` URL names, with its options: `mem://` for a store
    /// of its own, `mem://NAME` for the process-wide store called NAME. There is nothing to
    /// reach, so this is also what connecting to such a URL does.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for another scheme, an unknown option or a bad value.
    pub fn from_url(url: &StoreUrl) -> Result<Self> {
        if url.scheme() != "mem" {
            return Err(SETTINGS.invalid(format!("{} is not a mem:// URL", url.redacted())));
        }
        if url.user().is_some() {
            return Err(SETTINGS.invalid(format!("{} carries credentials; mem:// takes none", url.redacted())));
        }
        let name = format!("{}{}", url.hosts(), url.path().trim_end_matches('/'));
        let store = if name.is_empty() { MemoryStore::new() } else { MemoryStore::named(&name) };
        let mut builder = Self::builder().store(store);
        for (key, value) in url.options() {
            builder = builder.option(key, value)?;
        }
        builder.build()
    }

    /// The store this client talks to.
    pub fn store(&self) -> &MemoryStore {
        &self.client.store
    }

    /// Fault hook: the client dies, as a killed process would. Its guards report
    /// [`LossReason::ClientClosed`] at once; the store frees its holds when the lease runs
    /// out (at once without a lease); every later operation fails with a connection error.
    #[cfg(any(test, feature = "test-util"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn kill(&self) {
        if self.client.killed.swap(true, Ordering::SeqCst) {
            return;
        }
        let state = self.client.store.state();
        let names: Vec<LockName> =
            state.sessions.get(&self.client.session).map(|s| s.holds.iter().cloned().collect()).unwrap_or_default();
        for name in &names {
            if let Some(holder) = state.locks.get(name).and_then(|e| e.holder.as_ref()) {
                holder.signal.lose(LossReason::ClientClosed);
            }
        }
        drop(state);
        if self.client.lease.is_none() {
            self.client.store.close_session(self.client.session, LossReason::ClientClosed);
        }
    }

    /// Fault hook: cuts the client off the store (`true`) or reconnects it (`false`). While
    /// cut off, renewals do not arrive and operations fail with a connection error, so a
    /// leased hold is lost at its local deadline, before the store frees it.
    #[cfg(any(test, feature = "test-util"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn partition(&self, cut_off: bool) {
        self.client.partitioned.store(cut_off, Ordering::SeqCst);
    }
}

impl Default for MemoryLockProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl Deref for MemoryLockProvider {
    type Target = LockProvider;

    fn deref(&self) -> &LockProvider {
        &self.provider
    }
}

impl From<MemoryLockProvider> for LockProvider {
    fn from(provider: MemoryLockProvider) -> LockProvider {
        provider.provider
    }
}

struct MemoryClient {
    me: Weak<MemoryClient>,
    store: MemoryStore,
    session: u64,
    lease: Option<Lease>,
    killed: AtomicBool,
    partitioned: AtomicBool,
    watchdog: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl fmt::Debug for MemoryClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryClient").field("session", &self.session).field("lease", &self.lease).finish()
    }
}

impl MemoryClient {
    fn reachable(&self, lock: &LockName) -> Result<()> {
        if self.killed.load(Ordering::SeqCst) {
            return Err(Error::connection(BACKEND, Some(lock), "this memory client was killed"));
        }
        if self.partitioned.load(Ordering::SeqCst) {
            return Err(Error::connection(BACKEND, Some(lock), "this memory client is partitioned from its store"));
        }
        Ok(())
    }

    /// Starts the client's one renewal task if it has a lease and the task is not running
    /// (it may have ended with the runtime that ran it).
    fn ensure_watchdog(&self) {
        let Some(lease) = self.lease else { return };
        let mut watchdog = self.watchdog.lock().unwrap_or_else(PoisonError::into_inner);
        if watchdog.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        *watchdog = Some(runtime.spawn(renew_forever(self.me.clone(), lease.renew_every)));
    }

    fn grant(&self, lock: LockName, attempt: Uuid, granted: Granted) -> Grant {
        let held = MemoryHeld { client: self.me.clone(), store: self.store.clone(), lock, attempt };
        Grant::new(granted.token, granted.signal, Box::new(held))
    }
}

/// The watchdog: one task per client renews every hold of the client in one store call.
async fn renew_forever(client: Weak<MemoryClient>, every: Duration) {
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
        Capabilities {
            fair: true,
            fencing_survives_restart: true,
            lease: self.lease.is_some(),
            lease_renewal: self.lease.is_some(),
            loss_notification: true,
            inspect: true,
            waiter_count: true,
            ..Capabilities::NONE
        }
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

    async fn inspect(&self, lock: &LockName) -> Result<LockInfo> {
        self.reachable(lock)?;
        let state = self.store.current();
        let Some(entry) = state.locks.get(lock) else { return Ok(LockInfo::default()) };
        let holders = entry.holder.iter().map(|holder| {
            let info = holder.owner.holder(holder.token);
            match state.sessions.get(&holder.session).and_then(Session::expires_at) {
                Some(at) => info.with_lease_left(at.saturating_duration_since(Instant::now())),
                None => info,
            }
        });
        Ok(LockInfo::new(holders.collect(), Some(entry.queue.len())))
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// A waiter's place in a queue; dropping it (cancellation) removes the place, and frees a
/// grant that arrived while the waiter was being dropped.
struct QueuedWaiter {
    store: MemoryStore,
    lock: LockName,
    id: u64,
    receiver: oneshot::Receiver<Granted>,
    done: bool,
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
            state.remove_holder(&self.lock, |holder| holder.token == token, LossReason::ClientClosed);
        } else if state.locks.get(&self.lock).is_some_and(|e| e.holder.is_none()) {
            state.hand_off(&self.lock);
        }
    }
}

/// The memory backend's record of one hold.
struct MemoryHeld {
    client: Weak<MemoryClient>,
    store: MemoryStore,
    lock: LockName,
    attempt: Uuid,
}

#[async_trait]
impl HeldLock for MemoryHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        if let Some(client) = self.client.upgrade() {
            client.reachable(&self.lock)?;
        }
        let attempt = self.attempt;
        let removed =
            self.store.current().remove_holder(&self.lock, |holder| holder.attempt == attempt, LossReason::RecordGone);
        if removed { Ok(()) } else { Err(Error::lost(BACKEND, &self.lock, LossReason::RecordGone)) }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn cancelled_waiter_is_removed_and_next_is_granted() {
        let store = MemoryStore::new();
        let (a, b, c) = (store.client(), store.client(), store.client());
        let held = a.lock("x").unwrap().acquire().await.unwrap();
        let b_lock = b.lock("x").unwrap();
        let c_lock = c.lock("x").unwrap();
        let b_wait = tokio::time::timeout(Duration::from_millis(20), b_lock.acquire());
        assert!(b_wait.await.is_err());
        let c_task = tokio::spawn(async move { c_lock.acquire().await.map(|g| g.token()) });
        while store.state().locks.get(&LockName::new("x").unwrap()).map_or(0, |e| e.queue.len()) < 1 {
            tokio::task::yield_now().await;
        }
        held.release().await.unwrap();
        assert!(c_task.await.unwrap().is_ok());
    }

    #[test]
    fn bad_leases_are_refused_with_advice() {
        let err =
            MemoryLockProvider::builder().lease(Duration::from_secs(1)).renew_every(Duration::from_secs(2)).build();
        assert!(err.unwrap_err().to_string().contains("renew_every"));
        assert!(MemoryLockProvider::builder().lease(Duration::ZERO).build().is_err());
        assert!(MemoryLockProvider::builder().drift(Duration::from_millis(1)).build().is_err());
    }
}
