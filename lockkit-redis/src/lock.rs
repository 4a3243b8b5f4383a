//! The Redis lock protocol: acquire (with waiting and the resolution of unknown outcomes),
//! release, and inspection. Everything generic (reentrancy, timeouts, guards) is in
//! lockkit-core; this module only speaks Redis.
//!
//! # Unknown outcomes
//!
//! Each acquisition has an owner id of its own (the core's attempt id), which is the value
//! the lock record holds. When an acquire call times out or loses its connection, the
//! script may have run. The next try sends the *same* script with the *same* owner id; the
//! script recognises a record that already holds that id as a grant whose reply was lost
//! and returns it with its token. Nothing ever sets the record blindly.
//!
//! If the acquisition ends while such a doubt remains (its future is dropped mid-call, or it
//! gives up after a failed call), a background task runs the abandon script: it marks the
//! owner id void, so that a delayed try can no longer be granted, and frees the record if a
//! try was granted already. No lost reply leaves a hold that nobody renews.
//!
//! # Fairness
//!
//! A fair provider (the default) makes its waiting acquisitions join the lock's wait queue,
//! kept in Redis by the acquire script, the first time they find the lock taken. While the
//! queue has entries a free lock is its head's alone; every try refreshes its entry, and
//! entries that are not refreshed expire (see `queue.lua` and `acquire.lua`). An acquisition that ends
//! without a grant leaves the queue before it returns (a timeout), or in the background
//! when its future is dropped. An unfair provider never joins, and only yields (see
//! [`Yielding`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lockkit_core::backend::{AcquireRequest, Grant, HeldLock, LockBackend, LockInfo};
use lockkit_core::{
    Capabilities, Deadline, Error, HoldSignal, LockName, LossReason, OwnerMeta, Result, lease_deadline,
};
use tracing::Instrument;

use crate::BACKEND;
use crate::builder::Settings;
use crate::keys::LockKeys;
use crate::store::{AcquireReply, CLAIM_WINDOW, Contender, Ownership, Queueing, Store};
use crate::subscriber::{Interest, Subscriber, Woken};
use crate::util::Backoff;
use crate::watchdog::Watchdog;

/// The longest delay between retries of failed calls.
const RETRY_MAX: Duration = Duration::from_secs(1);
/// How often a waiter polls while its wake-ups cannot be trusted (subscriber down).
const POLL: Duration = Duration::from_millis(100);
/// How many times a release whose outcome was unknown is retried.
const RELEASE_TRIES: u32 = 4;
/// How long after releasing a contended lock this provider's next acquisition of it joins
/// the back of the waiters instead of racing them (see [`Yielding`]).
const YIELD_WINDOW: Duration = Duration::from_millis(50);
/// How many recently released contended locks a provider remembers.
const YIELD_MEMORY: usize = 1024;

/// The releaser's courtesy that keeps the unfair lock (a provider built with `fair(false)`)
/// from starving waiters as much.
///
/// A release wakes every waiter, and the releasing client, already running, could ask again
/// at once and win the race against all of them, again and again. So a provider that
/// released a lock whose acquisition had to wait (others were waiting too) and asks for it
/// again within [`YIELD_WINDOW`] subscribes first, like a waiter: the subscription puts it
/// at the back of the server's delivery order, and its round trip lets the woken waiters'
/// attempts reach the server before its own. Uncontended use never pays for it, and it
/// decides nothing: the grant is still the acquire script's alone.
#[derive(Debug, Default)]
struct Yielding {
    /// Record keys of locks released after a contended acquisition, and when.
    released: std::sync::Mutex<std::collections::HashMap<String, Instant>>,
}

impl Yielding {
    fn released_contended(&self, key: &str) {
        let mut released = crate::util::lock(&self.released);
        if released.len() >= YIELD_MEMORY {
            released.retain(|_, at| at.elapsed() < YIELD_WINDOW);
            if released.len() >= YIELD_MEMORY {
                released.clear();
            }
        }
        released.insert(key.to_owned(), Instant::now());
    }

    /// Whether the next acquisition of `key` should queue up behind the waiters.
    fn should_yield(&self, key: &str) -> bool {
        crate::util::lock(&self.released).remove(key).is_some_and(|at| at.elapsed() < YIELD_WINDOW)
    }
}

/// The Redis backend of one provider: its connection, subscriber and watchdog.
#[derive(Debug)]
pub(crate) struct RedisBackend {
    settings: Arc<Settings>,
    store: Arc<Store>,
    subscriber: Subscriber,
    watchdog: Arc<Watchdog>,
    yielding: Arc<Yielding>,
}

impl RedisBackend {
    pub(crate) fn new(settings: Settings) -> Result<Self> {
        let store = Store::new(&settings)?;
        let subscriber = Subscriber::new(&settings).map_err(|error| {
            Error::invalid_config(BACKEND, format!("the URL {:?} cannot be used: {error}", settings.url))
        })?;
        Ok(Self {
            settings: Arc::new(settings),
            store: Arc::new(store),
            subscriber,
            watchdog: Arc::new(Watchdog::default()),
            yielding: Arc::new(Yielding::default()),
        })
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn watchdog(&self) -> &Watchdog {
        &self.watchdog
    }

    /// How an acquire call stands towards the wait queue: a fair provider's waiting
    /// acquisitions join it.
    fn queueing(&self, waits: bool) -> Queueing {
        // A waiter tries again at least once per lease (its wait is bounded by the holder's
        // lease), so twice the lease never drops a live waiter.
        let entry_ttl = self.settings.lease.saturating_mul(2).saturating_add(CLAIM_WINDOW);
        Queueing {
            join: self.settings.fair && waits,
            entry_ttl_ms: u64::try_from(entry_ttl.as_millis()).unwrap_or(u64::MAX),
        }
    }

    async fn acquire_inner(&self, request: AcquireRequest) -> Result<Option<Grant>> {
        let lock = request.lock;
        let keys = LockKeys::new(&self.settings.prefix, &lock);
        let queueing = self.queueing(request.deadline.may_wait());
        // The record's value: unique to this acquisition, and saying who took it.
        let owner = OwnerMeta::current(request.attempt).encode();
        // A queued waiter's entry names its provider's wake channel, where the release that
        // makes it its turn addresses it (see Subscriber).
        let member = if queueing.join { format!("{}\n{owner}", self.subscriber.wake_channel()) } else { String::new() };
        let void = keys.void(&request.attempt.simple().to_string());
        let contender = Contender { owner, member, void };
        let mut doubt =
            Doubt::new(Arc::clone(&self.store), lock.clone(), keys.clone(), contender.clone(), &self.settings);
        let mut interest: Option<Interest> = None;
        let mut failing_since: Option<Instant> = None;
        let mut backoff = Backoff::up_to(RETRY_MAX);
        // Whether this acquisition had to wait: its release then yields (see Yielding).
        let mut contended = false;
        // Registered (and armed) before the first try, a Busy reply waits at once: a queued
        // waiter whose provider's wake channel is subscribed already (it costs nothing), and
        // an unfair waiter that yields.
        if queueing.join {
            interest = self.subscriber.watch_queued(&contender.member, true).await;
        } else if request.deadline.may_wait() && self.yielding.should_yield(&keys.lock) {
            let span = tracing::debug_span!("lockkit.subscribe", backend = BACKEND, channel = %keys.channel);
            interest = Some(self.subscriber.watch(&keys.channel).instrument(span).await);
        }
        loop {
            if let Some(interest) = interest.as_mut() {
                interest.arm();
            }
            let sent_at = Instant::now();
            doubt.in_flight = true;
            doubt.queued |= queueing.join;
            let reply = self.store.acquire(&lock, &keys, &contender, self.settings.lease_millis(), queueing).await;
            doubt.in_flight = false;
            let lease_left = match reply {
                Ok(AcquireReply::Granted(token)) => {
                    doubt.settled();
                    let signal = HoldSignal::new(
                        BACKEND,
                        lock.clone(),
                        Some(lease_deadline(sent_at, self.settings.lease, self.settings.drift)),
                    );
                    let id = self.watchdog.register(
                        keys.lock.clone(),
                        contender.owner.clone(),
                        signal.clone(),
                        &self.store,
                        &self.settings,
                    );
                    tracing::debug!(token = token.get(), "granted");
                    let held = RedisHeld {
                        store: Arc::clone(&self.store),
                        watchdog: Arc::clone(&self.watchdog),
                        yielding: (contended && !self.settings.fair).then(|| Arc::clone(&self.yielding)),
                        lock,
                        keys,
                        owner: contender.owner,
                        id,
                    };
                    return Ok(Some(Grant::new(token, signal, Box::new(held))));
                }
                Ok(AcquireReply::Busy(left)) => {
                    failing_since = None;
                    backoff.reset();
                    contended = true;
                    left
                }
                Ok(AcquireReply::Void) => {
                    return Err(Error::backend(
                        BACKEND,
                        Some(&lock),
                        "this acquisition was abandoned and cannot be granted",
                    ));
                }
                Err(error) if error.is_retryable() => {
                    doubt.ambiguous = true;
                    let since = *failing_since.get_or_insert(sent_at);
                    // Ride out a reconnect; give up once the store has been unreachable for a
                    // whole lease, when no hold could have survived anyway.
                    if !request.deadline.may_wait() || since.elapsed() >= self.settings.lease {
                        return Err(error);
                    }
                    tracing::debug!(%error, "acquire call failed; retrying with the same owner id");
                    tokio::time::sleep(backoff.next_delay().min(remaining(request.deadline))).await;
                    continue;
                }
                Err(error) => return Err(error),
            };
            if !request.deadline.may_wait() || request.deadline.has_passed(Instant::now()) {
                doubt.end_now().await;
                return Ok(None);
            }
            let Some(interest) = interest.as_mut() else {
                // Subscribe before waiting, then try again at once: a release published
                // before the subscription was confirmed would otherwise be missed.
                let span = tracing::debug_span!("lockkit.subscribe", backend = BACKEND, channel = %keys.channel);
                interest = if queueing.join {
                    self.subscriber.watch_queued(&contender.member, false).instrument(span).await
                } else {
                    Some(self.subscriber.watch(&keys.channel).instrument(span).await)
                };
                continue;
            };
            if !interest.is_live() {
                self.subscriber.revive(interest).await;
            }
            // Wake on the release message; else when the holder's lease runs out (a holder
            // that died publishes nothing); poll while wake-ups cannot be trusted.
            let fallback = match (interest.is_live(), lease_left) {
                (true, Some(left)) => left + Duration::from_millis(1),
                (true, None) => self.settings.renew_every,
                (false, _) => POLL,
            };
            let wait = fallback.min(self.settings.lease).min(remaining(request.deadline));
            let span = tracing::debug_span!("lockkit.wait", backend = BACKEND, at_most = ?wait);
            async {
                let mut until = Instant::now() + wait;
                // Another waiter's turn: look again only once its claim window may have
                // closed unclaimed (its process died), which the next try then finds out.
                while interest.wait(until.saturating_duration_since(Instant::now())).await == Woken::OthersTurn {
                    until = until.min(Instant::now() + CLAIM_WINDOW);
                }
            }
            .instrument(span)
            .await;
        }
    }
}

/// The time left until `deadline` (a day when there is none, which no wait reaches).
fn remaining(deadline: Deadline) -> Duration {
    match deadline.instant() {
        Some(at) => at.saturating_duration_since(Instant::now()),
        None => Duration::from_secs(86_400),
    }
}

#[async_trait]
impl LockBackend for RedisBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fair: self.settings.fair,
            fencing: true,
            fencing_survives_restart: true,
            lease: true,
            lease_renewal: true,
            loss_notification: true,
            inspect: true,
            waiter_count: self.settings.fair,
            cross_process: true,
        }
    }

    async fn acquire(&self, request: AcquireRequest) -> Result<Option<Grant>> {
        let span = tracing::debug_span!("lockkit.redis.acquire", attempt = %request.attempt);
        self.acquire_inner(request).instrument(span).await
    }

    async fn inspect(&self, lock: &LockName) -> Result<LockInfo> {
        self.store.inspect(lock, &LockKeys::new(&self.settings.prefix, lock), self.settings.fair).await
    }
}

/// What an acquisition that is not granted leaves to clean up: a doubt while a call is in
/// flight or after a call whose outcome was unknown, and its entry in the wait queue once it
/// may have joined it. Dropped with either, it abandons the acquisition in the background.
struct Doubt {
    store: Arc<Store>,
    lock: LockName,
    keys: LockKeys,
    contender: Contender,
    void_ms: u64,
    in_flight: bool,
    ambiguous: bool,
    /// Whether a call that joins the wait queue was sent.
    queued: bool,
}

impl Doubt {
    fn new(store: Arc<Store>, lock: LockName, keys: LockKeys, contender: Contender, settings: &Settings) -> Self {
        // The void marker outlives any try that can still be on its way: several leases,
        // and at least a minute.
        let void_ms = settings.lease_millis().saturating_mul(4).max(60_000);
        Self { store, lock, keys, contender, void_ms, in_flight: false, ambiguous: false, queued: false }
    }

    /// The acquisition was granted, or ended cleanly: nothing to abandon.
    fn settled(&mut self) {
        self.in_flight = false;
        self.ambiguous = false;
        self.queued = false;
    }

    fn in_doubt(&self) -> bool {
        self.in_flight || self.ambiguous
    }

    /// How long the abandon script voids the acquisition: not at all (0) when no outcome is
    /// in doubt and it only leaves the queue.
    fn void_for(&self) -> u64 {
        if self.in_doubt() { self.void_ms } else { 0 }
    }

    /// Ends an acquisition that returns without a grant, before it returns, so that it leaves
    /// no trace: it leaves the queue, and abandons a try in doubt. When that fails, the drop
    /// tries again in the background.
    async fn end_now(&mut self) {
        if !(self.in_doubt() || self.queued) {
            return;
        }
        match self.store.abandon(&self.lock, &self.keys, &self.contender, self.void_for()).await {
            Ok(_) => self.settled(),
            Err(error) => tracing::debug!(%error, "could not leave the wait queue; retrying in the background"),
        }
    }
}

impl Drop for Doubt {
    fn drop(&mut self) {
        if !(self.in_doubt() || self.queued) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(lock = %self.lock, "an acquisition in doubt was dropped outside a runtime; a hold it may have taken expires with its lease");
            return;
        };
        let (store, lock, keys, contender, void_ms, give_up_after) = (
            Arc::clone(&self.store),
            self.lock.clone(),
            self.keys.clone(),
            self.contender.clone(),
            self.void_for(),
            Duration::from_millis(self.void_ms / 4),
        );
        let span = tracing::debug_span!("lockkit.redis.abandon", lock = %lock);
        let task = async move {
            let mut backoff = Backoff::up_to(RETRY_MAX);
            // Keep trying for a lease: past it, any hold the acquisition took has expired.
            let give_up = Instant::now() + give_up_after;
            loop {
                match store.abandon(&lock, &keys, &contender, void_ms).await {
                    Ok(freed) => {
                        tracing::debug!(freed, "abandoned an acquisition in doubt");
                        return;
                    }
                    Err(error) if error.is_retryable() && Instant::now() < give_up => {
                        tracing::debug!(%error, "abandoning failed; retrying");
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "could not abandon an acquisition in doubt; a hold it may have taken expires with its lease");
                        return;
                    }
                }
            }
        };
        drop(runtime.spawn(task.instrument(span)));
    }
}

/// A hold granted by Redis.
struct RedisHeld {
    store: Arc<Store>,
    watchdog: Arc<Watchdog>,
    /// Set when the acquisition had to wait: the release then makes this provider's next
    /// acquisition of the lock queue up behind the waiters.
    yielding: Option<Arc<Yielding>>,
    lock: LockName,
    keys: LockKeys,
    owner: String,
    id: u64,
}

#[async_trait]
impl HeldLock for RedisHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        self.watchdog.forget(self.id);
        let mut backoff = Backoff::up_to(RETRY_MAX);
        let mut ambiguous = false;
        let mut tries = 0;
        loop {
            tries += 1;
            match self.store.release(&self.lock, &self.keys, &self.owner).await {
                Ok(Ownership::Ours) => {
                    if let Some(yielding) = &self.yielding {
                        yielding.released_contended(&self.keys.lock);
                    }
                    return Ok(());
                }
                // An earlier try whose reply was lost freed it.
                Ok(Ownership::Gone) if ambiguous => return Ok(()),
                Ok(Ownership::Gone) => return Err(Error::lost(BACKEND, &self.lock, LossReason::RecordGone)),
                Ok(Ownership::Other) => return Err(Error::lost(BACKEND, &self.lock, LossReason::OwnedByAnother)),
                Err(error) if error.is_retryable() && tries < RELEASE_TRIES => {
                    tracing::debug!(%error, "release call failed; retrying");
                    ambiguous = true;
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Err(error) => return Err(error),
            }
        }
    }
}
