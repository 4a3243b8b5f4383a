//! The Redis lock protocol: acquire (with waiting and the resolution of unknown outcomes),
//! release, and inspection. Everything generic (reentrancy, timeouts, guards) is in
//! lockkit-core; this module only speaks Redis.
//!
//! # Unknown outcomes
//!
//! Each acquisition has an owner id of its own (the core's attempt id), which is the value
//! the lock record holds (the mutex or writer record; a reader's or permit holder's member
//! in its set). When an acquire call times out or loses its connection, the script may have
//! run. The next try sends the *same* script with the *same* owner id; the script recognises
//! a hold of that id as a grant whose reply was lost and returns it with its token (the
//! counter's value for an exclusive hold, the token stored with a reader or permit). Nothing
//! ever sets the record blindly.
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
//! entries that are not refreshed expire (see `queue.lua` and `acquire.lua`). An acquisition
//! that ends without a grant leaves the queue before it returns (a timeout), or in the
//! background when its future is dropped, and frees the lock if it was handed over to it
//! meanwhile. An unfair provider never joins, and only yields (see [`Yielding`]).
//!
//! # Hand-over
//!
//! The release of a lock with a queue grants it to the head at once, for the claim window
//! only, and tells the head on its provider's wake channel, with the grant's token and server
//! time; for shared kinds, to each waiter of the run at the head that fits (readers up to the
//! first writer, permit waiters while permits are free), each with its own token and message.
//! The head takes the hold without another round trip when it can bound the grant's expiry
//! in its own clock: its last refused try was sent at a known local time and answered
//! with the fence counter's value and the server time. A token above that value proves the
//! grant came later; the server times give the interval between the two, so the hold is
//! guaranteed until the send time of that try, plus the interval (never more than the local
//! time elapsed since), plus the claim window, minus the drift margin scaled to that span.
//! The watchdog then extends the hold to a full lease once a quarter of that guarantee has
//! passed, unless it was released by then (a short hold costs no renewal). When too little of the window
//! is left for that (a grant announced very late, or a wait so long that the drift margin
//! eats the window), the waiter asks again instead, and its try finds the record its own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lockkit_core::backend::LeaderEvents;
use lockkit_core::backend::{
    AcquireRequest, Backoff, Deadline, Grant, HoldSignal, HolderInfo, LockBackend, LockInfo, OwnerMeta, deadline_after,
    lease_deadline,
};
use lockkit_core::config::millis;
use lockkit_core::{Capabilities, Error, FencingToken, HoldKind, LockName, Result};
use tracing::Instrument;
use uuid::Uuid;

use crate::BACKEND;
use crate::error::Failure;
use crate::held::{RETRY_MAX, RecordWatch, RedisHeld, Yielding};
use crate::keys::LockKeys;
use crate::keyspace::{Keyspace, Suspects};
use crate::settings::Settings;
use crate::store::connection::Store;
use crate::store::kinds::{AcquireReply, Contender, HoldTarget, Kind, QueueMark, Queueing, candidate_owner};
use crate::subscriber::{Interest, Subscriber};
use crate::wake::{Handover, Woken};
use crate::watchdog::Watchdog;

/// How often a waiter polls while its wake-ups cannot be trusted (subscriber down).
const POLL: Duration = Duration::from_millis(100);
/// The Redis backend of one provider: its connection, subscriber and watchdog.
///
/// Every entry point ([`LockBackend::acquire`], `inspect`, [`HeldLock::release`], the
/// provider's `ping`) may run on any runtime, with that runtime's command connection; the
/// watchdog, the pub/sub link and every clean-up run on lockkit's home runtime.
#[derive(Debug)]
pub(crate) struct RedisBackend {
    settings: Arc<Settings>,
    store: Arc<Store>,
    subscriber: Arc<Subscriber>,
    watchdog: Arc<Watchdog>,
    keyspace: Arc<Keyspace>,
    yielding: Arc<Yielding>,
}

impl RedisBackend {
    pub(crate) fn new(settings: Settings) -> Result<Self> {
        let store = Arc::new(Store::new(&settings)?);
        let keyspace = Arc::new(Keyspace::new(settings.connection.redis_settings().db()));
        let suspects = Arc::new(Suspects::default());
        let subscriber = Subscriber::new(&settings, Arc::clone(&keyspace), Arc::clone(&suspects)).map_err(|error| {
            Error::invalid_config(BACKEND, format!("the server {} cannot be used: {error}", settings.address))
        })?;
        let settings = Arc::new(settings);
        Ok(Self {
            watchdog: Arc::new(Watchdog::new(&store, Arc::clone(&settings), suspects)),
            settings,
            store,
            subscriber: Arc::new(subscriber),
            keyspace,
            yielding: Arc::new(Yielding::default()),
        })
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// Starts what runs in the background (on the home runtime) if it is not running.
    pub(crate) fn ensure_background(&self) {
        self.watchdog.ensure_running();
    }

    pub(crate) fn watchdog(&self) -> &Watchdog {
        &self.watchdog
    }

    /// How an acquire call stands towards the wait queue: a fair provider's waiting
    /// acquisitions join it.
    fn queueing(&self, waits: bool) -> Queueing {
        // A waiter tries again at least once per lease (its wait is bounded by the holder's
        // lease), so twice the lease never drops a live waiter.
        let entry_ttl = self.settings.lease.saturating_mul(2).saturating_add(self.settings.claim_window);
        Queueing {
            join: self.settings.fair && waits,
            entry_ttl_ms: u64::try_from(entry_ttl.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Who acquisition `attempt` of a hold of `kind` is, in the scripts' terms.
    /// A candidate's owner id carries its `identity` too.
    fn contender(
        &self,
        keys: &LockKeys,
        attempt: Uuid,
        kind: Kind,
        identity: Option<&[u8]>,
        queueing: Queueing,
    ) -> Contender {
        // The record's value: unique to this acquisition, and saying who took it.
        let mut owner = OwnerMeta::current(attempt).encode();
        if let Some(identity) = identity {
            owner = candidate_owner(&owner, identity);
        }
        // A queued waiter's entry names its provider's wake channel, where the release that
        // makes it its turn addresses it (see Subscriber), and the kind of hold it waits for.
        let member = match (queueing.join, kind.member_field()) {
            (false, _) => String::new(),
            (true, None) => format!("{}\n{owner}", self.subscriber.wake_channel()),
            (true, Some(field)) => format!("{}\n{field}\n{owner}", self.subscriber.wake_channel()),
        };
        Contender { owner, member, void: keys.void(attempt.simple()), kind }
    }

    async fn acquire_inner(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        self.ensure_background();
        let lock = request.lock.clone();
        let Some(kind) = Kind::of(&request.kind) else {
            return Err(Error::unsupported(BACKEND, Some(&lock), request.kind.describe()));
        };
        let keys = LockKeys::new(&self.settings.prefix, &lock);
        let queueing = self.queueing(request.deadline.may_wait());
        let identity = match &request.kind {
            HoldKind::Candidate { identity } => Some(Arc::clone(identity)),
            _ => None,
        };
        let mut contender = Arc::new(self.contender(&keys, request.attempt, kind, identity.as_deref(), queueing));
        let mut doubt =
            Doubt::new(Arc::clone(&self.store), lock.clone(), keys.clone(), Arc::clone(&contender), &self.settings);
        let mut interest: Option<Interest> = None;
        let mut failing_since: Option<Instant> = None;
        let mut backoff = Backoff::up_to(RETRY_MAX);
        // Whether this acquisition had to wait: its release then yields (see Yielding).
        let mut contended = false;
        // The last refused try of a queued acquisition: when it was sent, and where the queue
        // stood. It dates the hand-overs that come after it.
        let mut refused: Option<(Instant, QueueMark)> = None;
        // Registered (and armed) before the first try, a Busy reply waits at once: a queued
        // waiter whose provider's wake channel is subscribed already (it costs nothing), and
        // an unfair waiter that yields.
        if queueing.join {
            interest = self.subscriber.watch_queued(&contender.member, true).await;
        } else if request.deadline.may_wait() && self.yielding.should_yield(keys.record()) {
            let channel = keys.channel();
            let span = tracing::debug_span!("lockkit.subscribe", backend = BACKEND, channel = %channel);
            interest = Some(self.subscriber.watch(&channel).instrument(span).await);
        }
        loop {
            if let Some(interest) = interest.as_mut() {
                interest.arm();
            }
            if failing_since.is_none() && !self.store.is_connected() {
                // A wait that ends before the first connection is made ends on a store that
                // could not be reached (a failure of a try, noted below, says more); an
                // answer clears this.
                request.note_failure(Error::connection(BACKEND, Some(&lock), Failure::NotConnected));
            }
            let sent_at = Instant::now();
            doubt.in_flight = true;
            doubt.queued |= queueing.join;
            let mut reply = self.store.acquire(&lock, &keys, &contender, millis(self.settings.lease), queueing).await;
            if matches!(reply, Ok(AcquireReply::Granted(_)))
                && self.store.replicas() > 0
                && let Err(error) = self.store.replicated(&lock, &keys).await
            {
                // Not acknowledged by enough replicas, so it does not count: free it (which
                // hands it on to the head of the queue, if any) and go on as after a failed
                // call. A release that fails leaves the acquisition in doubt, and its retry
                // or its abandon settles it.
                let _ = self.store.release(&lock, keys.view(), &contender.owner, kind).await;
                reply = Err(error);
            }
            doubt.in_flight = false;
            if reply.is_ok() {
                request.note_reached();
            }
            let lease_left = match reply {
                Ok(AcquireReply::Granted(token)) => {
                    doubt.settled();
                    drop(doubt);
                    tracing::debug!(token = token.get(), "granted");
                    let valid_until = lease_deadline(sent_at, self.settings.lease, self.settings.drift);
                    let taken = Taken { token, valid_until, handed_over: false };
                    return Ok(Some(self.hold(lock, keys, contender, taken, contended)));
                }
                Ok(AcquireReply::Conflict(conflict)) => {
                    // A definite answer: the script left the queue, and nothing was granted.
                    doubt.settled();
                    return Err(Error::conflict(BACKEND, Some(&lock), conflict.describe(kind)));
                }
                Ok(AcquireReply::Busy(refusal)) => {
                    failing_since = None;
                    backoff.reset();
                    contended = true;
                    if let Some(mark) = refusal.mark {
                        refused = Some((sent_at, mark));
                    }
                    refusal.left
                }
                Ok(AcquireReply::Void) => {
                    // This owner id was voided (an abandon of it ran), so it can never be
                    // granted; a fresh id is a fresh acquisition, which can. Nothing of the
                    // voided one is left: the abandon freed its grant and its queue entry.
                    tracing::warn!("this acquisition's owner id was voided; asking again with a fresh one");
                    doubt.settled();
                    contender = Arc::new(self.contender(&keys, Uuid::new_v4(), kind, identity.as_deref(), queueing));
                    doubt = Doubt::new(
                        Arc::clone(&self.store),
                        lock.clone(),
                        keys.clone(),
                        Arc::clone(&contender),
                        &self.settings,
                    );
                    if queueing.join {
                        // Its registration names the voided queue member.
                        interest = None;
                    }
                    refused = None;
                    continue;
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
                    // A wait that ends now ends on this failure.
                    request.note_failure(error);
                    tokio::time::sleep(backoff.next_delay().min(remaining(request.deadline))).await;
                    continue;
                }
                Err(error) => return Err(error),
            };
            // A hand-over may have come while the try was under way.
            if let Some(taken) = self.usable_handover(interest.as_ref(), refused) {
                doubt.settled();
                drop(doubt);
                return Ok(Some(self.hold(lock, keys, contender, taken, contended)));
            }
            if !request.deadline.may_wait() || request.deadline.has_passed(Instant::now()) {
                doubt.end_now().await;
                return Ok(None);
            }
            let Some(interest) = interest.as_mut() else {
                // Subscribe before waiting, then try again at once: a release published
                // before the subscription was confirmed would otherwise be missed.
                let channel = keys.channel();
                let span = tracing::debug_span!("lockkit.subscribe", backend = BACKEND, channel = %channel);
                interest = if queueing.join {
                    self.subscriber.watch_queued(&contender.member, false).instrument(span).await
                } else {
                    Some(self.subscriber.watch(&channel).instrument(span).await)
                };
                continue;
            };
            if !interest.is_live() {
                self.subscriber.revive(interest).await;
            }
            // Wake on the release message; else when the holder's lease runs out (a holder
            // that died publishes nothing); poll while wake-ups cannot be trusted.
            let fallback = match (interest.is_live(), lease_left) {
                (true, Some(left)) => left.saturating_add(Duration::from_millis(1)),
                (true, None) => self.settings.renew_every,
                (false, _) => POLL,
            };
            let wait = fallback.min(self.settings.lease).min(remaining(request.deadline));
            let span = tracing::debug_span!("lockkit.wait", backend = BACKEND, at_most = ?wait);
            async {
                let mut until = deadline_after(Instant::now(), wait);
                // Another waiter's turn: look again only once its hand-over may have
                // expired unconfirmed (its process died), which the next try then finds out.
                while interest.wait(until.saturating_duration_since(Instant::now())).await == Woken::OthersTurn {
                    until = until.min(deadline_after(Instant::now(), self.settings.claim_window));
                }
            }
            .instrument(span)
            .await;
            if let Some(taken) = self.usable_handover(Some(interest), refused) {
                doubt.settled();
                drop(doubt);
                return Ok(Some(self.hold(lock, keys, contender, taken, contended)));
            }
        }
    }

    /// The hand-over addressed to this waiter, if it can take it without another round trip
    /// (see the module docs).
    fn usable_handover(&self, interest: Option<&Interest>, refused: Option<(Instant, QueueMark)>) -> Option<Taken> {
        let handover = interest?.handover()?;
        let (sent_at, mark) = refused?;
        let drift_per_lease = (self.settings.drift, self.settings.lease);
        let valid_until = handover_deadline(sent_at, mark, handover, Instant::now(), drift_per_lease)?;
        tracing::debug!(token = handover.token, "handed over");
        lockkit_core::metrics::handover(BACKEND);
        Some(Taken { token: FencingToken::new(handover.token), valid_until, handed_over: true })
    }

    /// Makes the hold of `contender`'s grant: its signal, registered with the watchdog, which
    /// renews a hand-over soon (it was granted for the claim window only; see the module docs).
    /// The hold copies the owner id and the keys' base into one allocation of its own (see
    /// [`HoldTarget`]); the acquisition's go with it.
    fn hold(&self, lock: LockName, keys: LockKeys, contender: Arc<Contender>, taken: Taken, contended: bool) -> Grant {
        let Taken { token, valid_until, handed_over } = taken;
        let signal = HoldSignal::new(BACKEND, lock, Some(valid_until));
        let target = Arc::new(HoldTarget::new(contender.kind, keys.view(), &contender.owner, signal.clone()));
        drop((contender, keys));
        let id = self.watchdog.register(Arc::clone(&target));
        if handed_over {
            self.watchdog.confirm(id, valid_until);
        }
        let record = self.watch_record(&target);
        let held = RedisHeld {
            store: Arc::clone(&self.store),
            watchdog: Arc::clone(&self.watchdog),
            record,
            yielding: (contended && !self.settings.fair).then(|| Arc::clone(&self.yielding)),
            target,
            token,
            id,
        };
        Grant::new(token, signal, Box::new(held))
    }

    /// Subscribes the keyspace channels of a hold's records in the background, when the server
    /// publishes deletions (see the `keyspace` module); nothing when it is known not to.
    fn watch_record(&self, target: &HoldTarget) -> Option<Arc<RecordWatch>> {
        if self.keyspace.fresh() == Some(false) {
            return None;
        }
        let keys = target.watched();
        let watch = Arc::new(RecordWatch::default());
        let (keyspace, store, subscriber) =
            (Arc::clone(&self.keyspace), Arc::clone(&self.store), Arc::clone(&self.subscriber));
        let channels: Vec<String> = keys.iter().map(|key| self.keyspace.channel(key)).collect();
        let slot = Arc::clone(&watch);
        let task = async move {
            if !keyspace.publishes_deletions(&store).await || slot.has_ended() {
                return;
            }
            for channel in channels {
                slot.keep(subscriber.watch(&channel).await);
            }
        };
        let span = tracing::debug_span!("lockkit.redis.watch_record", key = target.keys().record());
        lockkit_core::home::spawn(task.instrument(span));
        Some(watch)
    }
}

/// A grant as the acquisition took it.
struct Taken {
    token: FencingToken,
    /// The hold's local deadline.
    valid_until: Instant,
    /// Whether a release handed it over (for the claim window only), rather than a try of
    /// this acquisition granting it for a lease.
    handed_over: bool,
}

/// The local deadline of a hand-over announced as `handover`, for a waiter whose last refused
/// try was sent at `sent_at` and answered with `mark`; `None` when the hand-over is older
/// than that try (it may have expired since: the try would have found it), or when less
/// than a quarter of the claim window is left of it at `now`, too little to confirm it
/// safely.
///
/// The grant expires a claim window after its server time, which lies after the refused try
/// was handled by the server, by the difference of the two server times (a millisecond less,
/// for their rounding), and by no more than the local time elapsed since `sent_at` (so that a
/// forward step of the server's clock cannot stretch the deadline). The drift margin is the
/// configured one scaled from the lease to that span, plus 2 ms for the server's expiry
/// granularity. The claim window is the one the hand-over names (the releaser's setting);
/// `drift_per_lease` is the configured drift margin and the lease it is for.
fn handover_deadline(
    sent_at: Instant,
    mark: QueueMark,
    handover: Handover,
    now: Instant,
    drift_per_lease: (Duration, Duration),
) -> Option<Instant> {
    let window = handover.window;
    if handover.token <= mark.fence {
        return None;
    }
    let server_gap = Duration::from_millis(handover.server_ms.saturating_sub(mark.server_ms).saturating_sub(1));
    let span = server_gap.min(now.saturating_duration_since(sent_at)).saturating_add(window);
    let (drift, lease) = drift_per_lease;
    let valid_until = lease_deadline(sent_at, span, scaled_drift(drift, lease, span));
    (valid_until > deadline_after(now, window / 4)).then_some(valid_until)
}

/// The drift margin for a lease of `span`, given the margin `drift` configured for `lease`:
/// clocks drift in proportion to the time measured. Plus 2 ms for the server's expiry
/// granularity.
fn scaled_drift(drift: Duration, lease: Duration, span: Duration) -> Duration {
    let scaled = drift.as_nanos().saturating_mul(span.as_nanos()) / lease.as_nanos().max(1);
    Duration::from_nanos(u64::try_from(scaled).unwrap_or(u64::MAX)).saturating_add(Duration::from_millis(2))
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

    // Every field is set today; the update keeps this compiling when the core adds one.
    #[allow(clippy::needless_update)]
    fn capabilities(&self) -> Capabilities {
        // Every guarantee lockkit names; fairness, and so a waiter count, when the queue is on.
        Capabilities { fair: self.settings.fair, waiter_count: self.settings.fair, ..Capabilities::ALL }
    }

    fn renewal_interval(&self) -> Option<Duration> {
        Some(self.settings.renew_every)
    }

    fn address(&self) -> Option<String> {
        Some(self.settings.address.clone())
    }

    fn store_identity(&self) -> Option<String> {
        Some(self.settings.store_identity())
    }

    async fn acquire(&self, request: AcquireRequest) -> Result<Option<Grant>> {
        let span = tracing::debug_span!("lockkit.redis.acquire", attempt = %request.attempt);
        self.acquire_inner(&request).instrument(span).await
    }

    async fn inspect(&self, lock: &LockName) -> Result<LockInfo> {
        self.ensure_background();
        self.store.inspect(lock, &LockKeys::new(&self.settings.prefix, lock), self.settings.fair).await
    }

    async fn break_lock(&self, lock: &LockName) -> Result<Vec<HolderInfo>> {
        self.ensure_background();
        self.store.break_lock(lock, &LockKeys::new(&self.settings.prefix, lock)).await
    }

    fn observe(&self, lock: &LockName) -> Result<LeaderEvents> {
        self.ensure_background();
        Ok(crate::observe::observe(
            Arc::clone(&self.store),
            Arc::clone(&self.subscriber),
            Arc::clone(&self.keyspace),
            &self.settings,
            lock.clone(),
        ))
    }
}

/// What an acquisition that is not granted leaves to clean up: a doubt while a call is in
/// flight or after a call whose outcome was unknown, and its entry in the wait queue once it
/// may have joined it. Dropped with either, it abandons the acquisition in the background.
struct Doubt {
    store: Arc<Store>,
    lock: LockName,
    keys: LockKeys,
    contender: Arc<Contender>,
    void_ms: u64,
    in_flight: bool,
    ambiguous: bool,
    /// Whether a call that joins the wait queue was sent.
    queued: bool,
}

impl Doubt {
    fn new(store: Arc<Store>, lock: LockName, keys: LockKeys, contender: Arc<Contender>, settings: &Settings) -> Self {
        // The void marker outlives any try that can still be on its way: several leases,
        // and at least a minute.
        let void_ms = millis(settings.lease).saturating_mul(4).max(60_000);
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
        let (store, lock, keys, contender, void_ms, give_up_after) = (
            Arc::clone(&self.store),
            self.lock.clone(),
            self.keys.clone(),
            Arc::clone(&self.contender),
            self.void_for(),
            Duration::from_millis(self.void_ms / 4),
        );
        let span = tracing::debug_span!("lockkit.redis.abandon", lock = %lock);
        let task = async move {
            let mut backoff = Backoff::up_to(RETRY_MAX);
            // Keep trying for a lease: past it, any hold the acquisition took has expired.
            let give_up = deadline_after(Instant::now(), give_up_after);
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
        // On lockkit's home runtime: the abandon reaches the server wherever the acquisition
        // is dropped, even after its runtime ended.
        lockkit_core::home::spawn(task.instrument(span));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT_DRIFT: (Duration, Duration) = (Duration::from_millis(302), Duration::from_secs(30));
    const CLAIM_WINDOW: Duration = crate::config::DEFAULT_CLAIM_WINDOW;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn mark(fence: u64, server_ms: u64) -> QueueMark {
        QueueMark { fence, server_ms }
    }

    fn handover(token: u64, server_ms: u64) -> Handover {
        Handover { token, server_ms, window: CLAIM_WINDOW }
    }

    #[test]
    fn a_handover_older_than_the_last_refusal_is_not_taken() {
        let sent = Instant::now();
        let now = sent + ms(1);
        for token in [5, 9] {
            let deadline = handover_deadline(sent, mark(9, 1000), handover(token, 1000), now, DEFAULT_DRIFT);
            assert_eq!(deadline, None, "token {token} was issued before the refusal that saw 9");
        }
        assert!(handover_deadline(sent, mark(9, 1000), handover(10, 1000), now, DEFAULT_DRIFT).is_some());
    }

    #[test]
    fn the_claim_window_counts_from_the_grant_in_server_time() {
        let sent = Instant::now();
        // Granted 50 ms of server time after the refusal, announced 51 ms after the send.
        let deadline = handover_deadline(sent, mark(1, 1000), handover(2, 1050), sent + ms(51), DEFAULT_DRIFT);
        let span = ms(49) + CLAIM_WINDOW;
        assert_eq!(deadline, Some(sent + span - scaled_drift(DEFAULT_DRIFT.0, DEFAULT_DRIFT.1, span)));
        assert!(deadline.unwrap() < sent + ms(50) + CLAIM_WINDOW, "never past the grant's expiry");
    }

    #[test]
    fn the_window_is_the_one_the_handover_names() {
        let sent = Instant::now();
        let short = Handover { window: ms(60), ..handover(2, 1000) };
        let deadline = handover_deadline(sent, mark(1, 1000), short, sent + ms(1), DEFAULT_DRIFT).unwrap();
        assert!(deadline <= sent + ms(60), "the releaser granted 60 ms, not {CLAIM_WINDOW:?}");
        let spent = handover_deadline(sent, mark(1, 1000), short, sent + ms(50), DEFAULT_DRIFT);
        assert_eq!(spent, None, "less than a quarter of 60 ms left");
    }

    #[test]
    fn a_server_clock_step_cannot_stretch_the_deadline() {
        let sent = Instant::now();
        // The server's clock says 10 s passed, but only 20 ms passed here.
        let now = sent + ms(20);
        let deadline = handover_deadline(sent, mark(1, 1000), handover(2, 11_000), now, DEFAULT_DRIFT).unwrap();
        assert!(deadline <= now + CLAIM_WINDOW, "{:?} past the window from now", deadline - now);
    }

    #[test]
    fn too_little_window_left_means_asking_again() {
        let sent = Instant::now();
        // Announced 180 ms after the grant: 20 ms of the window left.
        let now = sent + ms(181);
        assert_eq!(handover_deadline(sent, mark(1, 1000), handover(2, 1001), now, DEFAULT_DRIFT), None);
        // After a wait of a minute the drift margin (1% of it) is longer than the window.
        let now = sent + Duration::from_secs(60);
        assert_eq!(handover_deadline(sent, mark(1, 0), handover(2, 60_000), now, DEFAULT_DRIFT), None);
    }

    #[test]
    fn the_drift_margin_scales_with_the_span() {
        assert_eq!(scaled_drift(ms(300), Duration::from_secs(30), Duration::from_secs(30)), ms(302));
        assert_eq!(scaled_drift(ms(300), Duration::from_secs(30), ms(200)), ms(4));
        assert_eq!(scaled_drift(Duration::ZERO, Duration::from_secs(30), ms(200)), ms(2));
    }
}
