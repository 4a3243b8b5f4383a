//! The store: the "server" every client of one in-process store shares.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{broadcast, oneshot};
use uuid::Uuid;

use super::BACKEND;
use crate::backend::{AcquireRequest, HoldSignal, OwnerMeta, deadline_after, lease_deadline};
use crate::{FencingToken, HoldKind, Leader, LeaderEvent, LockName, LossReason};

/// The in-process store: the "server" that [`MemoryLockProvider`](super::MemoryLockProvider) clients share.
///
/// Cheap to clone; clones are the same store. Fencing tokens come from one counter for the
/// whole store, so they are strictly increasing per name, and survive
/// a restart (`restart`, with the `test-util` feature) as a store with persistence would.
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
    /// The change feeds of elections, kept per name once an election was used or observed.
    pub(super) elections: HashMap<LockName, Feed>,
    /// Holds past their maximum hold, no longer renewed: lock, attempt, and when the store
    /// frees them (the end of their last lease, or the cap itself without a lease).
    pub(super) capped: Vec<(LockName, Uuid, Instant)>,
}

/// How many changes of leader an observer may fall behind before it is told of a gap.
const FEED_CAPACITY: usize = 256;

/// The changes of leader of one election, numbered.
pub(super) struct Feed {
    pub(super) sender: broadcast::Sender<(u64, LeaderEvent)>,
    /// The number of the last change sent.
    pub(super) seq: u64,
}

impl Default for Feed {
    fn default() -> Self {
        Self { sender: broadcast::channel(FEED_CAPACITY).0, seq: 0 }
    }
}

pub(super) struct Session {
    pub(super) lease: Option<Lease>,
    pub(super) last_heartbeat: Instant,
    /// The holds of this session: lock and attempt (a session may hold several reads of one
    /// name).
    pub(super) holds: HashSet<(LockName, Uuid)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Lease {
    pub(super) ttl: Duration,
    pub(super) renew_every: Duration,
    pub(super) drift: Duration,
}

/// How a name is used while its entry lives: as a lock (mutex, read-write lock; a mutex is a
/// writer to the read-write lock of its name) or as a semaphore of a given size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Use {
    Lock,
    Permits(NonZeroU32),
    Election,
}

impl Use {
    fn of(kind: &HoldKind) -> Self {
        match kind {
            HoldKind::Permit { permits } => Self::Permits(*permits),
            HoldKind::Candidate { .. } => Self::Election,
            _ => Self::Lock,
        }
    }

    fn describe(self) -> String {
        match self {
            Self::Lock => "a lock".to_owned(),
            Self::Permits(permits) => format!("a semaphore of {permits} permits"),
            Self::Election => "an election".to_owned(),
        }
    }
}

pub(super) struct Entry {
    pub(super) usage: Use,
    pub(super) holders: Vec<Holder>,
    pub(super) queue: VecDeque<Waiter>,
}

impl Entry {
    fn new(usage: Use) -> Self {
        Self { usage, holders: Vec::new(), queue: VecDeque::new() }
    }

    /// Whether a hold of `kind` fits beside the current holders.
    fn fits(&self, kind: &HoldKind) -> bool {
        match kind {
            HoldKind::Read => self.holders.iter().all(|holder| holder.kind == HoldKind::Read),
            HoldKind::Permit { permits } => self.holders.len() < permits.get() as usize,
            _ => self.holders.is_empty(),
        }
    }

    fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.queue.is_empty()
    }
}

pub(super) struct Holder {
    pub(super) session: u64,
    pub(super) attempt: Uuid,
    pub(super) kind: HoldKind,
    pub(super) token: FencingToken,
    pub(super) signal: HoldSignal,
    /// When the hold was taken, for `inspect` (the holder is always this process: its host
    /// and id are read when asked, not kept per hold).
    pub(super) since: SystemTime,
    /// When the store frees this hold whatever its session does: set once renewal stopped
    /// at its maximum hold.
    pub(super) fixed_expiry: Option<Instant>,
}

impl Holder {
    pub(super) fn is_candidate(&self) -> bool {
        matches!(self.kind, HoldKind::Candidate { .. })
    }

    /// The leader this holder is, for a candidate's hold.
    fn leader(&self) -> Leader {
        let identity = match &self.kind {
            HoldKind::Candidate { identity } => std::sync::Arc::clone(identity),
            _ => std::sync::Arc::from(&[][..]),
        };
        Leader::new(identity, self.token, Some(self.since))
    }

    /// Who took the hold, for `inspect`: this process, and when.
    pub(super) fn owner(&self) -> OwnerMeta {
        let mut owner = OwnerMeta::current(self.attempt);
        owner.since = self.since;
        owner
    }
}

pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) session: u64,
    pub(super) attempt: Uuid,
    pub(super) kind: HoldKind,
    pub(super) max_hold: Option<Duration>,
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
    /// The name is in use as another kind of lock; the message says how.
    Conflict(String),
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
        if !self.capped.is_empty() {
            let (due, kept) = self.capped.drain(..).partition(|(_, _, at)| *at <= now);
            self.capped = kept;
            let due: Vec<(LockName, Uuid, Instant)> = due;
            for (name, attempt, _) in due {
                tracing::debug!(lock = %name, "a hold past its maximum hold expired");
                self.remove_holders(&name, |holder| holder.attempt == attempt, LossReason::MaxHoldReached);
            }
        }
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
        let holds: Vec<(LockName, Uuid)> =
            self.sessions.get_mut(&session).map(|s| s.holds.drain().collect()).unwrap_or_default();
        for (name, attempt) in holds {
            self.remove_holders(&name, |holder| holder.attempt == attempt, reason.clone());
        }
        let names: Vec<LockName> = self.locks.keys().cloned().collect();
        for name in names {
            if let Some(entry) = self.locks.get_mut(&name) {
                entry.queue.retain(|waiter| waiter.session != session);
            }
            self.hand_off(&name);
        }
    }

    /// Removes the holders of `name` that `is_it` picks, ending their signals with `reason`
    /// (ignored when the owner already marked one released), then hands the lock on to the
    /// waiters it now admits. Returns whether a holder was removed.
    pub(super) fn remove_holders(
        &mut self,
        name: &LockName,
        is_it: impl Fn(&Holder) -> bool,
        reason: LossReason,
    ) -> bool {
        let Some(entry) = self.locks.get_mut(name) else { return false };
        let (removed, kept): (Vec<Holder>, Vec<Holder>) = entry.holders.drain(..).partition(|holder| is_it(holder));
        entry.holders = kept;
        for holder in &removed {
            holder.signal.lose(reason.clone());
            if let Some(session) = self.sessions.get_mut(&holder.session) {
                session.holds.remove(&(name.clone(), holder.attempt));
            }
        }
        self.hand_off(name);
        if removed.iter().any(Holder::is_candidate) {
            self.announce_if_vacant(name);
        }
        !removed.is_empty()
    }

    /// Sends a change of leader to the observers of election `name`.
    fn announce(&mut self, name: &LockName, event: LeaderEvent) {
        let feed = self.elections.entry(name.clone()).or_default();
        feed.seq += 1;
        // Nobody may be listening: that is fine, the feed keeps the count.
        let _ = feed.sender.send((feed.seq, event));
    }

    /// Announces a vacancy when election `name` has no leader now.
    fn announce_if_vacant(&mut self, name: &LockName) {
        let leads = self.locks.get(name).is_some_and(|entry| entry.holders.iter().any(Holder::is_candidate));
        if !leads {
            self.announce(name, LeaderEvent::Vacant);
        }
    }

    /// The state of election `name` now, with the number of the last change sent and a
    /// subscription to the changes after it: what an observer starts from.
    pub(super) fn election_state(
        &mut self,
        name: &LockName,
    ) -> (u64, LeaderEvent, broadcast::Receiver<(u64, LeaderEvent)>) {
        let leader = self.locks.get(name).and_then(|entry| entry.holders.iter().find(|h| h.is_candidate()));
        let state = match leader {
            Some(holder) => LeaderEvent::Elected(holder.leader()),
            None => LeaderEvent::Vacant,
        };
        let feed = self.elections.entry(name.clone()).or_default();
        (feed.seq, state, feed.sender.subscribe())
    }

    /// Grants the waiters at the head of the queue that fit beside the holders, in arrival
    /// order (a run of readers, or permits while some are free), and forgets an idle entry.
    pub(super) fn hand_off(&mut self, name: &LockName) {
        loop {
            let Some(entry) = self.locks.get_mut(name) else { return };
            let Some(head) = entry.queue.front() else {
                if entry.is_idle() {
                    self.locks.remove(name);
                }
                return;
            };
            if !entry.fits(&head.kind) {
                return;
            }
            let Some(waiter) = entry.queue.pop_front() else { return };
            let granted = self.install_holder(name, waiter.session, waiter.attempt, waiter.kind, waiter.max_hold);
            if let Err(undelivered) = waiter.notify.send(granted) {
                // The waiter was cancelled before it could take the grant: take it back.
                undelivered.signal.release();
                self.uninstall_holder(name, waiter.attempt);
            }
        }
    }

    pub(super) fn install_holder(
        &mut self,
        name: &LockName,
        session_id: u64,
        attempt: Uuid,
        kind: HoldKind,
        max_hold: Option<Duration>,
    ) -> Granted {
        self.last_token += 1;
        let token = FencingToken::new(self.last_token);
        let mut leased = false;
        let valid_until = self.sessions.get_mut(&session_id).and_then(|session| {
            session.holds.insert((name.clone(), attempt));
            leased = session.lease.is_some();
            session.local_deadline()
        });
        let signal = HoldSignal::new(BACKEND, name.clone(), valid_until);
        let mut fixed_expiry = None;
        if let Some(max_hold) = max_hold {
            let cap = deadline_after(Instant::now(), max_hold);
            signal.cap_at(cap);
            if !leased {
                // Nothing renews a hold without a lease: the store frees it at the cap.
                fixed_expiry = Some(cap);
                self.capped.push((name.clone(), attempt, cap));
            }
        }
        let entry = self.locks.entry(name.clone()).or_insert_with(|| Entry::new(Use::of(&kind)));
        let holder = Holder {
            session: session_id,
            attempt,
            kind,
            token,
            signal: signal.clone(),
            since: SystemTime::now(),
            fixed_expiry,
        };
        let elected = holder.is_candidate().then(|| holder.leader());
        if entry.holders.capacity() == 0 {
            // Most names have one holder: room for one, not the four a first push makes.
            entry.holders.reserve_exact(1);
        }
        entry.holders.push(holder);
        if let Some(leader) = elected {
            self.announce(name, LeaderEvent::Elected(leader));
        }
        Granted { token, signal }
    }

    pub(super) fn uninstall_holder(&mut self, name: &LockName, attempt: Uuid) {
        let Some(entry) = self.locks.get_mut(name) else { return };
        let Some(at) = entry.holders.iter().position(|holder| holder.attempt == attempt) else { return };
        let holder = entry.holders.remove(at);
        if let Some(session) = self.sessions.get_mut(&holder.session) {
            session.holds.remove(&(name.clone(), attempt));
        }
        if holder.is_candidate() {
            self.announce_if_vacant(name);
        }
    }

    pub(super) fn admit(&mut self, session: u64, request: &AcquireRequest) -> Admission {
        let usage = Use::of(&request.kind);
        let entry = self.locks.entry(request.lock.clone()).or_insert_with(|| Entry::new(usage));
        if entry.usage != usage {
            return Admission::Conflict(match (entry.usage, usage) {
                (Use::Permits(current), Use::Permits(asked)) => format!(
                    "the semaphore is in use with {current} permits and this handle asks for {asked}; every user of a semaphore must give the same count"
                ),
                (current, asked) => {
                    format!("the name is in use as {}; give {} another name", current.describe(), asked.describe())
                }
            });
        }
        if entry.queue.is_empty() && entry.fits(&request.kind) {
            return Admission::Granted(self.install_holder(
                &request.lock,
                session,
                request.attempt,
                request.kind.clone(),
                request.max_hold,
            ));
        }
        if !request.deadline.may_wait() {
            if entry.is_idle() {
                self.locks.remove(&request.lock);
            }
            return Admission::Busy;
        }
        let id = self.next_id();
        let (notify, receiver) = oneshot::channel();
        if let Some(entry) = self.locks.get_mut(&request.lock) {
            let (attempt, kind, max_hold) = (request.attempt, request.kind.clone(), request.max_hold);
            entry.queue.push_back(Waiter { id, session, attempt, kind, max_hold, notify });
        }
        Admission::Queued(id, receiver)
    }

    /// Turns the write hold of `attempt` into a read hold in place, and admits the readers it
    /// now lets in. `false` when the hold is gone.
    pub(super) fn downgrade(&mut self, name: &LockName, attempt: Uuid) -> bool {
        let Some(holder) =
            self.locks.get_mut(name).and_then(|entry| entry.holders.iter_mut().find(|h| h.attempt == attempt))
        else {
            return false;
        };
        if holder.kind == HoldKind::Write {
            holder.kind = HoldKind::Read;
        }
        self.hand_off(name);
        true
    }

    /// The earliest moment a holder of `name` may expire: a waiter's fallback wake-up.
    pub(super) fn holder_expiry(&self, name: &LockName) -> Option<Instant> {
        let entry = self.locks.get(name)?;
        entry.holders.iter().filter_map(|holder| self.holder_expires_at(holder)).min()
    }

    /// When the store frees `holder` unless it is renewed.
    pub(super) fn holder_expires_at(&self, holder: &Holder) -> Option<Instant> {
        holder.fixed_expiry.or_else(|| self.sessions.get(&holder.session)?.expires_at())
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

    /// The store called `name` in this process: every call with the same name returns the
    /// same store (what `mem://NAME` URLs connect to).
    pub fn named(name: &str) -> MemoryStore {
        static STORES: OnceLock<Mutex<HashMap<String, MemoryStore>>> = OnceLock::new();
        let stores = STORES.get_or_init(Mutex::default);
        stores.lock().unwrap_or_else(PoisonError::into_inner).entry(name.to_owned()).or_default().clone()
    }

    /// Fault hook: deletes the record of `name` behind its holders' backs, as an administrator
    /// deleting a key or znode would. The holders' guards report
    /// [`LossReason::RecordGone`] at once and the next waiters are granted the lock. Returns
    /// whether the lock was held.
    #[cfg(any(test, feature = "test-util"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn delete_record(&self, name: &str) -> bool {
        let Ok(name) = LockName::new(name) else { return false };
        self.current().remove_holders(&name, |_| true, LossReason::RecordGone)
    }

    /// Fault hook: restarts the store. Every hold is lost with [`LossReason::StoreRestarted`]
    /// and every waiter's acquisition fails with a retryable connection error; the fencing
    /// counter is kept, as on a store that persists it.
    #[cfg(any(test, feature = "test-util"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn restart(&self) {
        let mut state = self.state();
        let locks: Vec<(LockName, Entry)> = state.locks.drain().collect();
        for (name, entry) in locks {
            let led = entry.holders.iter().any(Holder::is_candidate);
            for holder in entry.holders {
                holder.signal.lose(LossReason::StoreRestarted);
            }
            if led {
                state.announce(&name, LeaderEvent::Vacant);
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
        let StoreState { sessions, locks, capped, .. } = &mut *state;
        let Some(session) = sessions.get_mut(&session) else { return 0 };
        // A hold past its maximum hold is renewed no more: the store frees it when the lease
        // it had runs out.
        let lease_end = session.expires_at();
        session.last_heartbeat = session.last_heartbeat.max(sent_at);
        let Some(deadline) = session.local_deadline() else { return 0 };
        let mut stopped = Vec::new();
        for (name, attempt) in &session.holds {
            let holders = locks.get_mut(name).map(|entry| entry.holders.as_mut_slice()).unwrap_or_default();
            if let Some(holder) = holders.iter_mut().find(|holder| holder.attempt == *attempt) {
                if holder.signal.past_cap() {
                    holder.fixed_expiry = lease_end;
                    stopped.push((name.clone(), *attempt));
                    continue;
                }
                holder.signal.extend(deadline);
            }
        }
        for (name, attempt) in stopped {
            session.holds.remove(&(name.clone(), attempt));
            capped.push((name, attempt, lease_end.unwrap_or(sent_at)));
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
