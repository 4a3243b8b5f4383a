//! The backend behind an [`EtcdLockProvider`](crate::EtcdLockProvider): the current session
//! (client and lease), the queue-of-keys recipe, and the [`LockBackend`] seam.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, GetOptions, KeyValue, KvClient, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse,
};
use lockkit_core::backend::{
    AcquireRequest, Deadline, Grant, HeldLock, HoldSignal, HolderInfo, LeaderEvents, LockBackend, LockInfo, OwnerMeta,
};
use lockkit_core::{Capabilities, Error, FencingToken, HoldKind, LockName, LossReason, Result};

use crate::BACKEND;
use crate::config::EtcdConfig;
use crate::error::{to_error, unreachable};
use crate::queue::{Entry, KeyKind, Verdict, Wait, holders, may_be_granted};
use crate::session::Session;
use crate::watch::{KeyNotice, Registration, WATCH_DENIED};

/// The first pause before an acquisition tries again after a connection failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// The longest pause between two tries of an acquisition after connection failures.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// How many times a release is sent before its outcome is reported unknown.
const RELEASE_TRIES: usize = 5;

/// How long a release goes on trying, beyond [`RELEASE_TRIES`], while the member answers that
/// it sheds load (`too many requests`): it is reachable, and its backlog drains.
const SHEDDING_BOUND: Duration = Duration::from_secs(30);

/// The etcd backend: one provider's current session and the recipe.
pub(crate) struct EtcdBackend {
    /// This backend, for the holds and pending keys that may need a new client later.
    me: Weak<EtcdBackend>,
    pub(crate) config: Arc<EtcdConfig>,
    current: Mutex<Option<Arc<Session>>>,
    /// Taken while a session is being opened, so that one is opened at a time.
    opening: tokio::sync::Mutex<()>,
    /// This provider's part of its keys' names: `<lock prefix><id>-<slot>`.
    id: String,
    /// The slots in use, by lock prefix (see [`Slot`]).
    slots: Mutex<HashMap<String, BTreeSet<u32>>>,
}

/// The name of an acquisition's key, reserved for it: `<lock prefix><provider id>-<n>`, with
/// `n` the smallest number of the lock that no other acquisition of the provider uses.
///
/// Keys are reused, not made anew per acquisition, because etcd keeps an index entry for every
/// key ever written under a prefix until a compaction, and a read of the prefix (the queue,
/// read by every acquisition) walks them all, deleted or not: with a new key per acquisition,
/// the cycle of a lock slowed with every acquisition since the last compaction (1.2 ms over
/// the first 500 cycles, 1.6 ms over cycles 2,500 to 3,000 on the same member; etcd's own
/// `Lock` service reuses one key per session and kept its pace). A slot goes back to the
/// provider only once its key is known gone (deleted, or bound to a lease that ended);
/// otherwise it stays taken, and the next acquisition takes another number.
struct Slot {
    backend: Weak<EtcdBackend>,
    prefix: String,
    n: u32,
    /// Whether the key is known gone, so that the slot may be reused.
    free: bool,
}

impl Slot {
    /// The key's name.
    fn key(&self, id: &str) -> String {
        format!("{}{id}-{}", self.prefix, self.n)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let (true, Some(backend)) = (self.free, self.backend.upgrade()) {
            let mut slots = backend.slots.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(taken) = slots.get_mut(&self.prefix) {
                taken.remove(&self.n);
                if taken.is_empty() {
                    slots.remove(&self.prefix);
                }
            }
        }
    }
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend").field("address", &self.config.address).finish_non_exhaustive()
    }
}

/// What one try of an acquisition came to.
enum Try {
    Granted(Grant),
    Refused,
    /// The own key went (its lease ended) while waiting: start again with a new key.
    Vanished,
    /// The key's name holds another acquisition's key (never expected: a slot is reused only
    /// once its key is gone): start again under another name.
    Taken,
    /// etcd refused the put for the client's authentication token, which is renewed now: send
    /// it again at once (it was not applied).
    Again,
}

/// How a wait for the keys ahead ended.
enum Waited {
    /// The acquisition's deadline came first.
    DeadlinePassed,
    /// What was watched changed (or the safety net fired, or the lock's watch ended): read
    /// the queue again.
    Changed,
}

impl EtcdBackend {
    pub(crate) fn new(config: EtcdConfig) -> Arc<EtcdBackend> {
        Arc::new_cyclic(|me| EtcdBackend {
            me: me.clone(),
            config: Arc::new(config),
            current: Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
            id: uuid::Uuid::new_v4().simple().to_string()[..16].to_owned(),
            slots: Mutex::new(HashMap::new()),
        })
    }

    /// Takes the smallest free slot of the lock prefix `prefix`.
    fn slot(&self, prefix: String) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let taken = slots.entry(prefix.clone()).or_default();
        let n = (0..).find(|n| !taken.contains(n)).unwrap_or(u32::MAX);
        taken.insert(n);
        Slot { backend: self.me.clone(), prefix, n, free: false }
    }

    fn current(&self) -> MutexGuard<'_, Option<Arc<Session>>> {
        // Nothing panics while holding this lock; recover the data if something ever did.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live session, or a new one (client and lease) on lockkit's home runtime, where its
    /// connections, its watchdog and its watches live whatever runtime the provider is used
    /// from.
    pub(crate) async fn session(&self) -> Result<Arc<Session>> {
        if let Some(session) = self.current().as_ref().filter(|s| s.is_alive()) {
            return Ok(Arc::clone(session));
        }
        let Some(me) = self.me.upgrade() else {
            // Only while the provider is being dropped.
            return Err(Error::connection(BACKEND, None, "the provider is being dropped"));
        };
        // The turn to open is taken on the home runtime too: a caller on a runtime that stops
        // being driven halfway holds up nobody.
        lockkit_core::home::run(async move { me.open_session().await }).await
    }

    /// Opens a new session unless another opening made one meanwhile (on the home runtime).
    async fn open_session(&self) -> Result<Arc<Session>> {
        let _opening = self.opening.lock().await;
        if let Some(session) = self.current().as_ref().filter(|s| s.is_alive()) {
            return Ok(Arc::clone(session));
        }
        let session = Session::open(&self.config).await?;
        *self.current() = Some(Arc::clone(&session));
        Ok(session)
    }

    /// A client on a live runtime, for one-off requests.
    pub(crate) async fn client(&self) -> Result<Client> {
        Ok(self.session().await?.client.clone())
    }

    fn addr(&self) -> Option<&str> {
        Some(self.config.address.as_str())
    }

    fn error(&self, error: etcd_client::Error, lock: &LockName) -> Error {
        to_error(error, Some(lock)).with_server(self.addr())
    }

    /// Authenticates the current session again when `error` is a refusal of its token
    /// ([`Session::renew_token_after`]); true when a retry may pass.
    pub(crate) async fn renew_token_after(&self, error: &etcd_client::Error) -> bool {
        match self.session().await {
            Ok(session) => session.renew_token_after(error).await,
            Err(_) => false,
        }
    }

    /// Sends `txn` on `session`'s client, bounded by the request timeout (see [`send_txn`]).
    async fn txn(&self, session: &Session, txn: Txn, lock: &LockName) -> Result<TxnResponse> {
        match send_txn(session, &mut session.kv.clone(), txn, self.config.connect_timeout).await {
            Some(reply) => reply.map_err(|e| self.error(e, lock)),
            None => Err(unreachable(&self.config, Some(lock))),
        }
    }

    /// One try: put the own key if absent, then wait until the keys created before it allow
    /// its kind to be granted (see the queue module).
    async fn try_once(&self, request: &AcquireRequest, pending: &mut Pending) -> Result<Try> {
        let lock = &request.lock;
        let session = self.session().await?;
        let mut client = session.kv.clone();
        pending.session = Some(Arc::clone(&session));
        let prefix = self.config.lock_prefix(lock);
        let key = pending.key.clone();
        let kind = KeyKind::of(&request.kind);
        // The owner line with the kind's field, and a candidate's identity (election.rs).
        let value = crate::election::with_identity(kind.value(&pending.owner), &request.kind);
        let put = TxnOp::put(key.clone(), value.clone(), Some(PutOptions::new().with_lease(session.lease)));
        // The queue, read after the put, holds the own key (or the one an earlier try put).
        let queue = TxnOp::get(prefix.clone(), Some(in_queue_order()));
        // With no wait allowed, a lock's key is put only when nobody is there: one round trip,
        // no trace. A reader or a permit may be granted beside others, so it puts its key and
        // deletes it again when it is refused.
        let exclusive = matches!(kind, KeyKind::Exclusive | KeyKind::Write | KeyKind::Candidate);
        let condition = match request.deadline {
            Deadline::Now if exclusive => Compare::create_revision(prefix.clone(), CompareOp::Equal, 0).with_prefix(),
            Deadline::Now | Deadline::At(_) | Deadline::Never => {
                Compare::create_revision(key.clone(), CompareOp::Equal, 0)
            }
        };
        // A try of an attempt that was given up is refused: the void key (see Pending::give_up).
        let not_void = Compare::version(pending.void_key.clone(), CompareOp::Equal, 0);
        let txn = Txn::new().when([condition, not_void]).and_then([put, queue.clone()]).or_else([queue]);
        let sent_before = std::mem::replace(&mut pending.sent, true);
        // Until the reply comes, the put is in doubt: an acquisition cancelled now gives up in
        // the background with a delete that etcd may apply before the put still on its way (two
        // streams of one connection are served concurrently), so its give-up must void the
        // attempt too, or the late put leaves a key bound to the provider's lease.
        let doubt_before = std::mem::replace(&mut pending.doubt, true);
        let reply = match tokio::time::timeout(self.config.connect_timeout, client.txn(txn)).await {
            Ok(Ok(reply)) => {
                pending.doubt = doubt_before;
                reply
            }
            Ok(Err(error)) if is_lease_gone(&error) => {
                // Revoked or expired before the watchdog noticed: end it, and try on a new one.
                session.end(LossReason::SessionExpired);
                pending.sent = false;
                pending.doubt = doubt_before;
                return Ok(Try::Vanished);
            }
            Ok(Err(error)) if session.token_refused(&error) => {
                // Refused before it was proposed: as if never sent.
                pending.sent = sent_before;
                pending.doubt = doubt_before;
                if session.renew_token().await {
                    return Ok(Try::Again);
                }
                return Err(self.error(error, lock));
            }
            Ok(Err(error)) => {
                pending.doubt = true;
                return Err(self.error(error, lock));
            }
            Err(_) => {
                pending.doubt = true;
                return Err(unreachable(&self.config, Some(lock)));
            }
        };
        request.note_reached();
        let mut read_revision = reply.header().map_or(0, etcd_client::ResponseHeader::revision);
        // `op_responses` copies the replies once; the queue is taken out of that copy.
        let kvs = reply
            .op_responses()
            .into_iter()
            .find_map(|op| match op {
                TxnOpResponse::Get(mut get) => Some(get.take_kvs()),
                _ => None,
            })
            .unwrap_or_default();
        let all: Vec<Entry> = kvs.iter().map(Entry::of).collect();
        let Some(own) = kvs.iter().find(|kv| kv.key() == key.as_bytes()) else {
            // Not put (someone is there and no wait is allowed), and no earlier try of ours put
            // it: a lock of another use of the name is a conflict, anything else a refusal.
            pending.sent = false;
            if let Verdict::Conflict(what) = may_be_granted(&kind, &all) {
                return Err(Error::conflict(BACKEND, Some(lock), what));
            }
            return Ok(Try::Refused);
        };
        let rev = own.create_revision();
        if own.value() != value.as_bytes() {
            tracing::warn!(backend = BACKEND, %key, "a key of the provider's holds another acquisition's value");
            pending.sent = false;
            return Ok(Try::Taken);
        }
        if own.lease() != session.lease {
            // An earlier try put it on a lease that has ended since: it is going; start over.
            pending.delete_now(&self.config).await;
            return Ok(Try::Vanished);
        }
        pending.revision = Some(rev);
        tracing::trace!(%key, rev, queue = all.len(), "put");
        let mut ahead: Vec<Entry> = all.into_iter().filter(|entry| entry.create_revision < rev).collect();
        // The wait registers the keys it waits for with the watch of the lock's prefix, which
        // this provider's waits and holds of the lock share and keep (watch.rs): no watch is
        // created on a wait's path once the lock's watch exists. The watch hears every change
        // after the revision it was created at; when that is later than the last read of the
        // queue, the queue is read again first, so that nothing between is missed.
        let mut registration: Option<Registration> = None;
        loop {
            let wait = match may_be_granted(&kind, &ahead) {
                Verdict::Holds => {
                    let voided = self.void_late_puts(&session, pending).await;
                    return Ok(Try::Granted(self.grant(request, &session, pending, rev, kind, voided)));
                }
                Verdict::Conflict(what) => {
                    tracing::debug!(backend = BACKEND, %lock, %what, "the name is in use otherwise");
                    pending.give_up(&self.config).await;
                    return Err(Error::conflict(BACKEND, Some(lock), what));
                }
                Verdict::Waits(wait) => wait,
            };
            if request.deadline == Deadline::Now {
                pending.give_up(&self.config).await;
                return Ok(Try::Refused);
            }
            let (keys, puts) = match &wait {
                Wait::Key { key, or_put } => (vec![key.clone()], *or_put),
                Wait::Deletions { keys, .. } => (keys.clone(), false),
            };
            let registered = match registration.take() {
                Some(registration)
                    if registration.keys() == keys.as_slice()
                        && registration.puts() == puts
                        && !registration.ended() =>
                {
                    registration
                }
                _ => session.keys.register(&prefix, keys, read_revision, puts),
            };
            let from = match registered.from().await {
                Ok(from) => from,
                Err(reason) => {
                    if reason.contains(WATCH_DENIED) {
                        // The stream's token may have expired (the watch hub opens a new
                        // stream with the current token): renew it first, then try again.
                        session.renew_token().await;
                    }
                    return Err(Error::connection(
                        BACKEND,
                        Some(lock),
                        format!("cannot watch the lock's keys: {reason}"),
                    )
                    .with_server(self.addr()));
                }
            };
            let mut registered = registered;
            if from <= read_revision {
                tracing::trace!(%key, "waiting");
                match self.wait(&mut registered, wait, read_revision, &session, request.deadline).await {
                    Waited::DeadlinePassed => {
                        pending.give_up(&self.config).await;
                        return Ok(Try::Refused);
                    }
                    Waited::Changed => {}
                }
            }
            registration = Some(registered);
            // Look again, in a transaction that checks the own key is still ours: a grant is
            // confirmed against the own key after every wait.
            let read_ahead = TxnOp::get(prefix.clone(), Some(in_queue_order().with_max_create_revision(rev - 1)));
            let ours = Compare::create_revision(key.clone(), CompareOp::Equal, rev);
            let reply = if kind == KeyKind::Candidate {
                // A candidate that comes to lead now (no key ahead) writes when in the same
                // step: its value's `since` is then the start of its term, not of its campaign.
                let first = Compare::create_revision(prefix.clone(), CompareOp::Greater, rev - 1).with_prefix();
                let value = crate::election::with_identity(
                    kind.value(&crate::election::leading_now(&pending.owner)),
                    &request.kind,
                );
                let lead = TxnOp::put(key.clone(), value, Some(PutOptions::new().with_lease(session.lease)));
                let own = TxnOp::get(key.clone(), None);
                let txn =
                    Txn::new().when([ours, first]).and_then([lead, read_ahead.clone()]).or_else([own, read_ahead]);
                let reply = self.txn(&session, txn, lock).await?;
                let own_gone = !reply.succeeded()
                    && reply.op_responses().first().is_none_or(|op| {
                        !matches!(op, TxnOpResponse::Get(get) if get.kvs().first().is_some_and(|kv| kv.create_revision() == rev))
                    });
                if own_gone {
                    pending.sent = false;
                    return Ok(Try::Vanished);
                }
                reply
            } else {
                let reply = self.txn(&session, Txn::new().when([ours]).and_then([read_ahead]), lock).await?;
                if !reply.succeeded() {
                    pending.sent = false;
                    return Ok(Try::Vanished);
                }
                reply
            };
            read_revision = reply.header().map_or(read_revision, etcd_client::ResponseHeader::revision);
            ahead = reply
                .op_responses()
                .into_iter()
                .filter_map(|op| match op {
                    TxnOpResponse::Get(get) => Some(get.kvs().iter().map(Entry::of).collect()),
                    _ => None,
                })
                .next_back()
                .unwrap_or_default();
            tracing::trace!(%key, ahead = ahead.len(), "read the keys ahead");
        }
    }

    /// Waits on `registration` for what `wait` names, among the changes after revision
    /// `after` (the last read of the queue), until the deadline.
    async fn wait(
        &self,
        registration: &mut Registration,
        wait: Wait,
        after: i64,
        session: &Session,
        deadline: Deadline,
    ) -> Waited {
        // A permit waiter counts the deletions of the keys ahead of it that it read, and
        // ignores the others (no request per deletion).
        let (mut deletions, or_put) = match wait {
            Wait::Key { or_put, .. } => (1, or_put),
            Wait::Deletions { deletions, .. } => (deletions, false),
        };
        // A safety net only: the key's lease bounds how long it can outlive its owner.
        let wake = tokio::time::sleep(session.ttl);
        tokio::pin!(wake);
        loop {
            tokio::select! {
                notice = registration.next() => match notice {
                    KeyNotice::Ended => return Waited::Changed,
                    // Already in the queue read (a registration kept from an earlier wait).
                    KeyNotice::Changed { revision, .. } if revision <= after => {}
                    KeyNotice::Changed { deleted: false, .. } if or_put => return Waited::Changed,
                    KeyNotice::Changed { deleted: false, .. } => {}
                    KeyNotice::Changed { deleted: true, .. } => {
                        // A key put again by a retry of its attempt and deleted again counts
                        // twice: an early wake-up, which the read that follows corrects.
                        deletions = deletions.saturating_sub(1);
                        if deletions == 0 {
                            return Waited::Changed;
                        }
                    }
                },
                () = &mut wake => return Waited::Changed,
                () = sleep_until(deadline) => return Waited::DeadlinePassed,
            }
        }
    }

    /// Voids the attempt of `pending` when one of its tries had its reply lost (`doubt`): that
    /// try's put may still be on its way (held by the network, its cancellation not yet
    /// seen) and land after this hold's key is gone (released, broken, expired), creating a
    /// key nobody holds, bound to the provider's lease, which its other holds keep alive: an
    /// orphan that blocks the lock for as long as the provider lives. Every put of the attempt
    /// is conditioned on the void key's absence, so the late put is refused. True when there
    /// was nothing to void or the void key is written; false when it could not be, and the
    /// release writes it instead.
    async fn void_late_puts(&self, session: &Arc<Session>, pending: &Pending) -> bool {
        if !pending.doubt {
            return true;
        }
        let mut client = session.kv.clone();
        let put = TxnOp::put(pending.void_key.clone(), "", Some(PutOptions::new().with_lease(session.lease)));
        match send_txn(session, &mut client, Txn::new().and_then([put]), self.config.connect_timeout).await {
            Some(Ok(_)) => {
                tracing::debug!(backend = BACKEND, key = %pending.key, "voided the attempt's tries in doubt");
                lockkit_core::home::spawn(forget_void(Arc::clone(session), client, pending.void_key.clone()));
                true
            }
            _ => false,
        }
    }

    fn grant(
        &self,
        request: &AcquireRequest,
        session: &Arc<Session>,
        pending: &mut Pending,
        rev: i64,
        kind: KeyKind,
        voided: bool,
    ) -> Grant {
        tracing::trace!(key = %pending.key, rev, "granted");
        pending.armed = false;
        let signal = HoldSignal::new(BACKEND, request.lock.clone(), Some(session.valid_until()));
        // The session follows the key from now on (session.rs): a deletion behind the hold's
        // back is a loss, and a hold lost on its own has its key deleted; no task per hold.
        let id = session.register(&signal, &pending.key, rev);
        let token = FencingToken::new(u64::try_from(rev).unwrap_or(0));
        let held = EtcdHeld {
            backend: self.me.clone(),
            backend_config: Arc::clone(&self.config),
            session: Arc::clone(session),
            lock: request.lock.clone(),
            key: pending.key.clone(),
            revision: rev,
            read_value: (kind == KeyKind::Write).then(|| KeyKind::Read.value(&pending.owner)),
            void_key: (!voided).then(|| pending.void_key.clone()),
            id,
            slot: Mutex::new(pending.slot.take()),
        };
        Grant::new(token, signal, Box::new(held))
    }
}

/// Whether etcd refused a request because the lease it names is gone.
fn is_lease_gone(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status)
        if status.code() == tonic::Code::NotFound && status.message().contains("lease not found"))
}

/// The options that read every key under a prefix in create revision order: the queue.
fn in_queue_order() -> GetOptions {
    GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend)
}

async fn sleep_until(deadline: Deadline) {
    match deadline {
        Deadline::At(at) => tokio::time::sleep_until(at.into()).await,
        Deadline::Now | Deadline::Never => std::future::pending().await,
    }
}

/// The client of `session` while its runtime runs, else one of the provider's current
/// session (opened on the current runtime if need be): the keys of a session whose runtime
/// shut down stay until its lease expires, and any client may delete them.
async fn live_client(backend: &Weak<EtcdBackend>, session: &Session) -> Result<KvClient> {
    if session.runtime_alive() {
        return Ok(session.kv.clone());
    }
    match backend.upgrade() {
        Some(backend) => Ok(backend.session().await?.kv.clone()),
        None => Err(Error::connection(BACKEND, None, "the provider was dropped and its runtime shut down")),
    }
}

/// The own key of an acquisition in progress; dropped armed, it is deleted in the background.
struct Pending {
    backend: Weak<EtcdBackend>,
    key: String,
    /// The slot the key's name is; handed to the hold on a grant.
    slot: Option<Slot>,
    /// The session the key was put with.
    session: Option<Arc<Session>>,
    /// Whether a put may have been sent.
    sent: bool,
    /// The key's create revision, once known.
    revision: Option<i64>,
    armed: bool,
    /// The owner line of the acquisition, which the key's value starts with.
    owner: String,
    /// The key that, once written, refuses every later try of this attempt
    /// ([`give_up`](Self::give_up)); outside every lock's prefix (`<prefix>/%void/<attempt>`:
    /// no escaped lock name is `%void`).
    void_key: String,
    /// Whether a try's reply was lost, or a try is under way: its put may still be on its way
    /// to the store.
    doubt: bool,
}

impl Pending {
    /// Deletes the own key now (whatever its revision: the attempt id makes it ours alone).
    /// When the store does not confirm the delete, the key may still be there, bound to the
    /// provider's lease that its other holds keep alive: the acquisition stays armed, so that
    /// dropping it goes on deleting the key in the background.
    async fn delete_now(&mut self, config: &EtcdConfig) {
        if let Some(session) = &self.session {
            let mut client = session.kv.clone();
            match tokio::time::timeout(config.connect_timeout, client.delete(self.key.clone(), None)).await {
                Ok(Ok(_)) => {}
                _ => return,
            }
        }
        self.sent = false;
        self.revision = None;
    }

    /// What gives the attempt up in the store: the delete of its key and, when a try's reply
    /// was lost, the void key in the same transaction, so that a put still on its way (held
    /// by the network, then delivered) is refused when it lands instead of leaving a key bound
    /// to the provider's lease. The void key is bound to the lease too, and deleted after
    /// [`VOID_KEEP`].
    fn give_up_txn(&self, lease: i64) -> Txn {
        let delete = TxnOp::delete(self.key.clone(), None);
        if self.doubt {
            let void = TxnOp::put(self.void_key.clone(), "", Some(PutOptions::new().with_lease(lease)));
            Txn::new().and_then([void, delete])
        } else {
            Txn::new().and_then([delete])
        }
    }

    /// Gives the attempt up for good (refused, deadline passed, conflict): deletes its key now,
    /// and voids the attempt when a try's reply was lost. When the store does not confirm it,
    /// the acquisition stays armed, and dropping it goes on in the background.
    async fn give_up(&mut self, config: &EtcdConfig) {
        let Some(session) = self.session.clone() else {
            self.sent = false;
            return;
        };
        let mut client = session.kv.clone();
        let txn = self.give_up_txn(session.lease);
        if let Ok(Ok(_)) = tokio::time::timeout(config.connect_timeout, client.txn(txn)).await {
            if self.doubt {
                lockkit_core::home::spawn(forget_void(session, client, self.void_key.clone()));
            }
            self.sent = false;
            self.revision = None;
        }
    }
}

/// How long the void key of a given-up attempt stays: far longer than a request can wait in a
/// connection that is cut off and then heals.
const VOID_KEEP: Duration = Duration::from_secs(300);

/// Deletes the void key of a given-up attempt after [`VOID_KEEP`] (while the provider's lease
/// lives; the lease ends it otherwise).
async fn forget_void(session: Arc<Session>, mut client: KvClient, void_key: String) {
    tokio::time::sleep(VOID_KEEP).await;
    if session.is_alive() {
        let _ = client.delete(void_key, None).await;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut slot = self.slot.take();
        if self.armed
            && self.sent
            && let Some(session) = self.session.take()
        {
            let give_up = self.give_up_txn(session.lease);
            let (doubt, void_key) = (self.doubt, std::mem::take(&mut self.void_key));
            let backend = self.backend.clone();
            lockkit_core::home::spawn(async move {
                let Ok(client) = live_client(&backend, &session).await else { return };
                // The key is bound to the provider's lease: delete it while that lives.
                delete_while_alive(Arc::clone(&session), client.clone(), give_up, Duration::from_secs(10)).await;
                // Deleted, or bound to a lease that ended: the slot may be reused.
                if let Some(slot) = slot.as_mut() {
                    slot.free = true;
                }
                drop(slot);
                if doubt {
                    forget_void(session, client, void_key).await;
                }
            });
        } else if let Some(slot) = slot.as_mut() {
            // Never put, or known gone, or handed to the hold (then `slot` is `None`).
            slot.free = !self.sent;
        }
    }
}

#[async_trait]
impl LockBackend for EtcdBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        // Every guarantee lockkit names; a flag added later is claimed too, and checked by the kit.
        Capabilities::ALL
    }

    fn renewal_interval(&self) -> Option<Duration> {
        // The watchdog sends a keep-alive every third of the TTL.
        Some(self.config.ttl / 3)
    }

    fn address(&self) -> Option<String> {
        Some(self.config.address.clone())
    }

    async fn acquire(&self, request: AcquireRequest) -> Result<Option<Grant>> {
        let slot = self.slot(self.config.lock_prefix(&request.lock));
        let mut pending = Pending {
            backend: self.me.clone(),
            key: slot.key(&self.id),
            slot: Some(slot),
            session: None,
            sent: false,
            revision: None,
            armed: true,
            owner: OwnerMeta::current(request.attempt).encode(),
            void_key: format!("{}/%void/{}", self.config.prefix, request.attempt),
            doubt: false,
        };
        let mut backoff = FIRST_BACKOFF;
        let mut token_renewed = false;
        loop {
            let outcome = match self.try_once(&request, &mut pending).await {
                // The first refusal of the token is a stale one, renewed: try again at once.
                Ok(Try::Again) if !token_renewed => {
                    token_renewed = true;
                    continue;
                }
                // Refused again after a renewal: back off as from a connection error.
                Ok(Try::Again) => Err(Error::connection(
                    BACKEND,
                    Some(&request.lock),
                    "etcd refused the client's authentication token again after it was renewed",
                )
                .with_server(self.addr())),
                outcome => outcome,
            };
            match outcome {
                Ok(Try::Granted(grant)) => return Ok(Some(grant)),
                Ok(Try::Refused) => return Ok(None),
                Ok(Try::Vanished | Try::Again) => {}
                Ok(Try::Taken) => {
                    // The slot's key holds another acquisition's value: leave that slot
                    // taken and go on with another.
                    let slot = self.slot(self.config.lock_prefix(&request.lock));
                    pending.key = slot.key(&self.id);
                    pending.slot = Some(slot);
                    pending.sent = false;
                    pending.revision = None;
                }
                Err(error) if error.is_retryable() && request.deadline != Deadline::Now => {
                    request.note_failure(error);
                    if let Deadline::At(at) = request.deadline
                        && Instant::now() + backoff >= at
                    {
                        return Ok(None);
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(error) => return Err(error),
            }
        }
    }

    fn observe(&self, lock: &LockName) -> Result<LeaderEvents> {
        // Elections: observe.rs.
        let me = self.me.upgrade().ok_or_else(|| Error::connection(BACKEND, Some(lock), "the provider was dropped"))?;
        Ok(crate::observe::observe(me, lock.clone()))
    }

    async fn inspect(&self, lock: &LockName) -> Result<LockInfo> {
        let (mut client, queue) = self.read_queue(lock).await?;
        let entries: Vec<Entry> = queue.iter().map(Entry::of).collect();
        let held = holders(&entries);
        let mut infos = Vec::with_capacity(held.len());
        for &i in &held {
            if let Some(kv) = queue.get(i) {
                infos.push(self.holder_info(&mut client, kv).await);
            }
        }
        // Every other key waits (a key refused for a conflict is deleted at once).
        Ok(LockInfo::new(infos, Some(queue.len() - held.len())))
    }

    async fn break_lock(&self, lock: &LockName) -> Result<Vec<HolderInfo>> {
        let (mut client, queue) = self.read_queue(lock).await?;
        let entries: Vec<Entry> = queue.iter().map(Entry::of).collect();
        let mut broken = Vec::new();
        for i in holders(&entries) {
            let Some(kv) = queue.get(i) else { continue };
            let info = self.holder_info(&mut client, kv).await;
            // Deletes that incarnation of the holder's key only: a holder that released
            // meanwhile (its key gone, or a new key of the same attempt) is not reported. The
            // holder's deletion watch signals it lost; the waiters behind it are woken as by
            // a release, and their keys were created after it, so their tokens are greater.
            let txn = Txn::new()
                .when([Compare::create_revision(kv.key().to_vec(), CompareOp::Equal, kv.create_revision())])
                .and_then([TxnOp::delete(kv.key().to_vec(), None)]);
            if self.txn(&*self.session().await?, txn, lock).await?.succeeded() {
                tracing::info!(backend = BACKEND, %lock, token = kv.create_revision(), "broke a hold");
                broken.push(info);
            }
        }
        Ok(broken)
    }
}

impl EtcdBackend {
    /// Every key of the lock `lock`, in queue (create revision) order, and the client that
    /// read them.
    async fn read_queue(&self, lock: &LockName) -> Result<(Client, Vec<KeyValue>)> {
        let mut client = self.client().await?;
        let prefix = self.config.lock_prefix(lock);
        let mut renewed = false;
        loop {
            match tokio::time::timeout(self.config.connect_timeout, client.get(prefix.as_str(), Some(in_queue_order())))
                .await
            {
                Ok(Ok(mut reply)) => return Ok((client, reply.take_kvs())),
                // An expired token, renewed: once more.
                Ok(Err(error)) if !renewed && self.renew_token_after(&error).await => renewed = true,
                Ok(Err(error)) => return Err(self.error(error, lock)),
                Err(_) => return Err(unreachable(&self.config, Some(lock))),
            }
        }
    }

    /// What `inspect` says of the holder of key `kv`: owner, token, kind, since, lease left.
    async fn holder_info(&self, client: &mut Client, kv: &KeyValue) -> HolderInfo {
        let token = FencingToken::new(u64::try_from(kv.create_revision()).unwrap_or(0));
        let mut holder = match kv.value_str().ok().and_then(OwnerMeta::decode) {
            Some(meta) => meta.holder(token),
            None => HolderInfo::new(token, String::from_utf8_lossy(kv.key()).into_owned()),
        };
        holder = holder.with_kind(KeyKind::parse(kv.value()).hold_kind());
        // A leader shows its identity (election.rs).
        if let Some(identity) = crate::election::identity(kv.value()) {
            holder = holder.with_kind(HoldKind::Candidate { identity });
        }
        if let Ok(Ok(left)) =
            tokio::time::timeout(self.config.connect_timeout, client.lease_time_to_live(kv.lease(), None)).await
            && left.ttl() > 0
        {
            holder = holder.with_lease_left(Duration::from_secs(u64::try_from(left.ttl()).unwrap_or(0)));
        }
        holder
    }
}

/// One granted hold: its key and create revision.
struct EtcdHeld {
    backend: Weak<EtcdBackend>,
    backend_config: Arc<EtcdConfig>,
    session: Arc<Session>,
    lock: LockName,
    key: String,
    revision: i64,
    /// For a write hold, the value that turns its key into a read in place.
    read_value: Option<String>,
    /// The void key of the acquisition's attempt, when a try of it was in doubt and the grant
    /// could not write it ([`EtcdBackend::void_late_puts`]): the release writes it.
    void_key: Option<String>,
    id: Option<u64>,
    /// The slot the key's name is: reusable once the release deleted the key.
    slot: Mutex<Option<Slot>>,
}

impl EtcdHeld {
    /// Marks the key gone: its slot may be reused.
    fn key_gone(&self) {
        if let Some(slot) = self.slot.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            slot.free = true;
        }
    }
}

#[async_trait]
impl HeldLock for EtcdHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        tracing::trace!(key = %self.key, "release");
        self.session.unregister(self.id);
        let mut client = live_client(&self.backend, &self.session).await?;
        // Deletes the own key only, and only the incarnation this hold created; voids the
        // attempt too when the grant could not (a late put of it is then refused).
        let void = self
            .void_key
            .as_ref()
            .map(|void_key| TxnOp::put(void_key.clone(), "", Some(PutOptions::new().with_lease(self.session.lease))));
        let txn = Txn::new()
            .when([Compare::create_revision(self.key.clone(), CompareOp::Equal, self.revision)])
            .and_then(void.iter().cloned().chain([TxnOp::delete(self.key.clone(), None)]).collect::<Vec<_>>())
            .or_else(void.into_iter().collect::<Vec<_>>());
        let mut last = None;
        let mut backoff = FIRST_BACKOFF;
        let started = Instant::now();
        let mut attempt = 0;
        // Whether an earlier try may have deleted the key (its reply lost); a member that sheds
        // load refuses a request before it proposes it.
        let mut maybe_applied = false;
        while attempt < RELEASE_TRIES {
            if last.is_some() {
                // A member that sheds load ("too many requests") or a reconnect needs a moment.
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            let sent = send_txn(&self.session, &mut client, txn.clone(), self.backend_config.connect_timeout).await;
            match sent.map_or(Err(None), |reply| reply.map_err(Some)) {
                Ok(reply) if reply.succeeded() => {
                    self.key_gone();
                    return Ok(());
                }
                // After a lost reply, our own earlier delete may have been the one.
                Ok(_) if maybe_applied => {
                    self.key_gone();
                    return Ok(());
                }
                // Gone: no other incarnation of the key can exist while this hold has its slot.
                Ok(_) => {
                    self.key_gone();
                    return Err(Error::lost(BACKEND, &self.lock, LossReason::RecordGone));
                }
                Err(Some(e)) => {
                    // A member shedding load does not use up the tries, for a while.
                    let shedding = crate::error::is_shedding(&e);
                    maybe_applied |= !shedding;
                    if !(shedding && started.elapsed() < SHEDDING_BOUND) {
                        attempt += 1;
                    }
                    let error = to_error(e, Some(&self.lock)).with_server(Some(&self.backend_config.address));
                    if !error.is_retryable() {
                        return Err(error);
                    }
                    last = Some(error);
                }
                Err(None) => {
                    attempt += 1;
                    maybe_applied = true;
                    last = Some(unreachable(&self.backend_config, Some(&self.lock)));
                }
            }
        }
        // The key is bound to the provider's lease, which the provider's other holds keep
        // alive: a release that could not reach the store must not leave it behind for as long
        // as the provider lives. Go on deleting it in the background while the lease is kept
        // alive; once it is not, the key ends with it.
        let slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner).take();
        let (session, timeout) = (Arc::clone(&self.session), self.backend_config.connect_timeout);
        lockkit_core::home::spawn(async move {
            delete_while_alive(session, client, txn, timeout).await;
            // Deleted, or bound to a lease that ended: the slot may be reused.
            if let Some(mut slot) = slot {
                slot.free = true;
            }
        });
        Err(last
            .unwrap_or_else(|| unreachable(&self.backend_config, Some(&self.lock)))
            .with_server(Some(&self.backend_config.address)))
    }

    fn downgrade(&self) -> Option<Pin<Box<dyn Future<Output = Result<()>> + Send + 'static>>> {
        let value = self.read_value.clone()?;
        let (backend, session, config) =
            (self.backend.clone(), Arc::clone(&self.session), Arc::clone(&self.backend_config));
        let (lock, key, revision) = (self.lock.clone(), self.key.clone(), self.revision);
        Some(Box::pin(async move {
            let mut client = live_client(&backend, &session).await?;
            // Rewrites the value of the own key only, and only the incarnation this hold
            // created: the key keeps its create revision, hence its place in the queue (no
            // writer queued behind it slips in) and the token. The put names the lease again,
            // or the key would lose it.
            let put = TxnOp::put(key.clone(), value, Some(PutOptions::new().with_lease(session.lease)));
            let txn = Txn::new().when([Compare::create_revision(key, CompareOp::Equal, revision)]).and_then([put]);
            match send_txn(&session, &mut client, txn, config.connect_timeout).await {
                Some(Ok(reply)) if reply.succeeded() => Ok(()),
                Some(Ok(_)) => Err(Error::lost(BACKEND, &lock, LossReason::RecordGone)),
                Some(Err(e)) => Err(to_error(e, Some(&lock)).with_server(Some(&config.address))),
                None => Err(unreachable(&config, Some(&lock))),
            }
        }))
    }
}

/// Sends `delete` (a hold's conditioned delete, or the delete of an acquisition's own key)
/// until it is answered, once a second, for as long as `session`'s lease is kept alive: once
/// it is not, the key ends with the lease.
async fn delete_while_alive(session: Arc<Session>, mut client: KvClient, delete: Txn, timeout: Duration) {
    while session.is_alive() {
        match send_txn(&session, &mut client, delete.clone(), timeout).await {
            // Deleted, or gone already (a hold's condition names its incarnation only).
            Some(Ok(_)) => return,
            Some(Err(error)) => {
                let retryable = to_error(error, None).is_retryable();
                if !retryable {
                    return;
                }
            }
            None => {}
        }
        tokio::time::sleep(MAX_BACKOFF).await;
    }
}

/// Sends `txn` on `client`, bounded by `timeout` (`None` when it passed). When etcd refused the
/// request for the client's authentication token, the session authenticates again and the
/// request is sent once more: a refused request was not applied. (The spare copy is made only
/// when the session has credentials.)
async fn send_txn(
    session: &Session,
    client: &mut KvClient,
    txn: Txn,
    timeout: Duration,
) -> Option<std::result::Result<TxnResponse, etcd_client::Error>> {
    let spare = session.has_credentials().then(|| txn.clone());
    match tokio::time::timeout(timeout, client.txn(txn)).await {
        Ok(Err(error)) if session.token_refused(&error) => match spare {
            Some(txn) if session.renew_token().await => tokio::time::timeout(timeout, client.txn(txn)).await.ok(),
            _ => Some(Err(error)),
        },
        reply => reply.ok(),
    }
}
