//! The backend behind an [`EtcdLockProvider`](crate::EtcdLockProvider): the current session
//! (client and lease), the queue-of-keys recipe, and the [`LockBackend`] seam.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse, WatchFilterType, WatchOptions,
};
use lockkit_core::backend::{
    AcquireRequest, Deadline, Grant, HeldLock, HoldSignal, HolderInfo, LockBackend, LockInfo, OwnerMeta, spawn_detached,
};
use lockkit_core::{Capabilities, Error, FencingToken, HoldEnd, LockName, LossReason, Result};

use crate::BACKEND;
use crate::config::EtcdConfig;
use crate::error::{to_error, unreachable};
use crate::session::Session;

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
}

impl EtcdBackend {
    pub(crate) fn new(config: EtcdConfig) -> Arc<EtcdBackend> {
        Arc::new_cyclic(|me| EtcdBackend {
            me: me.clone(),
            config: Arc::new(config),
            current: Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
        })
    }

    fn current(&self) -> MutexGuard<'_, Option<Arc<Session>>> {
        // Nothing panics while holding this lock; recover the data if something ever did.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live session, or a new one (client and lease) on the current runtime.
    pub(crate) async fn session(&self) -> Result<Arc<Session>> {
        if let Some(session) = self.current().as_ref().filter(|s| s.is_alive()) {
            return Ok(Arc::clone(session));
        }
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

    /// Sends `txn`, bounded by the request timeout.
    async fn txn(&self, client: &mut Client, txn: Txn, lock: &LockName) -> Result<TxnResponse> {
        match tokio::time::timeout(self.config.connect_timeout, client.txn(txn)).await {
            Ok(reply) => reply.map_err(|e| self.error(e, lock)),
            Err(_) => Err(unreachable(&self.config, Some(lock))),
        }
    }

    /// One try: put the own key if absent, then wait for every key created before it to go.
    async fn try_once(&self, request: &AcquireRequest, pending: &mut Pending) -> Result<Try> {
        let lock = &request.lock;
        let session = self.session().await?;
        let mut client = session.client.clone();
        pending.session = Some(Arc::clone(&session));
        let prefix = self.config.lock_prefix(lock);
        let key = pending.key.clone();
        let value = OwnerMeta::current(request.attempt).encode();
        let put = TxnOp::put(key.clone(), value, Some(PutOptions::new().with_lease(session.lease)));
        let get_own = TxnOp::get(key.clone(), None);
        let head = TxnOp::get(prefix.clone(), Some(first_created()));
        // With no wait allowed, the key is put only when nobody is there: one round trip, no trace.
        let condition = match request.deadline {
            Deadline::Now => Compare::create_revision(prefix.clone(), CompareOp::Equal, 0).with_prefix(),
            Deadline::At(_) | Deadline::Never => Compare::create_revision(key.clone(), CompareOp::Equal, 0),
        };
        let txn = Txn::new().when([condition]).and_then([put, get_own.clone(), head.clone()]).or_else([get_own, head]);
        pending.sent = true;
        let reply = match tokio::time::timeout(self.config.connect_timeout, client.txn(txn)).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(error)) if is_lease_gone(&error) => {
                // Revoked or expired before the watchdog noticed: end it, and try on a new one.
                session.end(LossReason::SessionExpired);
                pending.sent = false;
                return Ok(Try::Vanished);
            }
            Ok(Err(error)) => return Err(self.error(error, lock)),
            Err(_) => return Err(unreachable(&self.config, Some(lock))),
        };
        request.note_reached();
        let mut gets = reply.op_responses().into_iter().filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        });
        let own = gets.next().and_then(|g| g.kvs().first().cloned());
        let head = gets.next().and_then(|g| g.kvs().first().cloned());
        let Some(own) = own else {
            // Not put (someone is there and no wait is allowed), and no earlier try of ours put it.
            pending.sent = false;
            return Ok(Try::Refused);
        };
        let rev = own.create_revision();
        if own.lease() != session.lease {
            // An earlier try put it on a lease that has ended since: it is going; start over.
            pending.delete_now(&self.config).await;
            return Ok(Try::Vanished);
        }
        pending.revision = Some(rev);
        if head.as_ref().is_some_and(|h| h.key() == own.key()) {
            return Ok(Try::Granted(self.grant(request, &session, pending, rev)));
        }
        if request.deadline == Deadline::Now {
            pending.delete_now(&self.config).await;
            return Ok(Try::Refused);
        }
        // Wait for the key just ahead to go, until none is left ahead.
        loop {
            let ahead = TxnOp::get(
                prefix.clone(),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_max_create_revision(rev - 1)
                        .with_sort(SortTarget::Create, SortOrder::Descend)
                        .with_limit(1),
                ),
            );
            let txn = Txn::new().when([Compare::create_revision(key.clone(), CompareOp::Equal, rev)]).and_then([ahead]);
            let reply = self.txn(&mut client, txn, lock).await?;
            if !reply.succeeded() {
                pending.sent = false;
                return Ok(Try::Vanished);
            }
            let revision = reply.header().map_or(0, etcd_client::ResponseHeader::revision);
            let ahead: Option<KeyValue> = reply.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Get(get) => get.kvs().first().cloned(),
                _ => None,
            });
            let Some(ahead) = ahead else {
                // Confirmed in the same transaction that checked the own key is still ours.
                return Ok(Try::Granted(self.grant(request, &session, pending, rev)));
            };
            let options = WatchOptions::new().with_start_revision(revision + 1).with_filters([WatchFilterType::NoPut]);
            let (_watcher, mut stream) =
                client.watch(ahead.key().to_vec(), Some(options)).await.map_err(|e| self.error(e, lock))?;
            // A safety net only: the key's lease bounds how long it can outlive its owner.
            let wake = tokio::time::sleep(session.ttl);
            tokio::pin!(wake);
            loop {
                tokio::select! {
                    message = stream.message() => match message {
                        Ok(Some(reply)) if reply.events().iter().any(|e| e.event_type() == EventType::Delete) => break,
                        Ok(Some(reply)) if reply.canceled() => break,
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(e) => return Err(self.error(e, lock)),
                    },
                    () = &mut wake => break,
                    () = sleep_until(request.deadline) => {
                        pending.delete_now(&self.config).await;
                        return Ok(Try::Refused);
                    }
                }
            }
        }
    }

    fn grant(&self, request: &AcquireRequest, session: &Arc<Session>, pending: &mut Pending, rev: i64) -> Grant {
        pending.armed = false;
        let signal = HoldSignal::new(BACKEND, request.lock.clone(), Some(session.valid_until()));
        let id = session.register(&signal);
        let token = FencingToken::new(u64::try_from(rev).unwrap_or(0));
        let watch = tokio::spawn(watch_hold(
            session.client.clone(),
            pending.key.clone(),
            rev,
            signal.clone(),
            self.config.connect_timeout,
        ));
        let held = EtcdHeld {
            backend: self.me.clone(),
            backend_config: Arc::clone(&self.config),
            session: Arc::clone(session),
            lock: request.lock.clone(),
            key: pending.key.clone(),
            revision: rev,
            id,
            watch,
        };
        Grant::new(token, signal, Box::new(held))
    }
}

/// Whether etcd refused a request because the lease it names is gone.
fn is_lease_gone(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status)
        if status.code() == tonic::Code::NotFound && status.message().contains("lease not found"))
}

/// The options that read the first-created key under a prefix.
fn first_created() -> GetOptions {
    GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1)
}

async fn sleep_until(deadline: Deadline) {
    match deadline {
        Deadline::At(at) => tokio::time::sleep_until(at.into()).await,
        Deadline::Now | Deadline::Never => std::future::pending().await,
    }
}

/// Follows one hold until it ends: signals its loss when its key is deleted behind its back,
/// and deletes its key when the hold is lost while the key may still exist.
///
/// The key is bound to the provider's lease, which the provider's other holds keep alive: a
/// hold lost on its own (its maximum hold reached, its deadline passed unrenewed) would
/// otherwise block the lock until its guard is dropped, and a stuck holder never drops it.
async fn watch_hold(client: Client, key: String, rev: i64, signal: HoldSignal, timeout: Duration) {
    let end = tokio::select! {
        () = watch_deletion(client.clone(), &key, rev, &signal) => return,
        end = signal.ended() => end,
    };
    let HoldEnd::Lost(reason) = end else { return };
    if matches!(reason, LossReason::RecordGone | LossReason::SessionExpired | LossReason::ClientClosed) {
        return;
    }
    tracing::debug!(backend = BACKEND, %key, %reason, "deleting the key of a lost hold");
    // Only the incarnation this hold created; a failure leaves the key to the lease.
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, rev)])
        .and_then([TxnOp::delete(key, None)]);
    let mut client = client;
    let _ = tokio::time::timeout(timeout, client.txn(txn)).await;
}

/// Returns when the key of a hold is deleted (having signalled the loss), or when the hold
/// ended otherwise.
async fn watch_deletion(mut client: Client, key: &str, rev: i64, signal: &HoldSignal) {
    let options = WatchOptions::new().with_start_revision(rev + 1).with_filters([WatchFilterType::NoPut]);
    loop {
        let Ok((_watcher, mut stream)) = client.watch(key, Some(options.clone())).await else {
            if !signal.is_held() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        loop {
            match stream.message().await {
                Ok(Some(reply)) if reply.events().iter().any(|e| e.event_type() == EventType::Delete) => {
                    signal.lose(LossReason::RecordGone);
                    return;
                }
                Ok(Some(reply)) if reply.canceled() => break,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        if !signal.is_held() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The client of `session` while its runtime runs, else one of the provider's current
/// session (opened on the current runtime if need be): the keys of a session whose runtime
/// shut down stay until its lease expires, and any client may delete them.
async fn live_client(backend: &Weak<EtcdBackend>, session: &Session) -> Result<Client> {
    if session.runtime_alive() {
        return Ok(session.client.clone());
    }
    match backend.upgrade() {
        Some(backend) => backend.client().await,
        None => Err(Error::connection(BACKEND, None, "the provider was dropped and its runtime shut down")),
    }
}

/// The own key of an acquisition in progress; dropped armed, it is deleted in the background.
struct Pending {
    backend: Weak<EtcdBackend>,
    key: String,
    /// The session the key was put with.
    session: Option<Arc<Session>>,
    /// Whether a put may have been sent.
    sent: bool,
    /// The key's create revision, once known.
    revision: Option<i64>,
    armed: bool,
}

impl Pending {
    /// Deletes the own key now (whatever its revision: the attempt id makes it ours alone).
    async fn delete_now(&mut self, config: &EtcdConfig) {
        if let Some(session) = &self.session {
            let mut client = session.client.clone();
            let _ = tokio::time::timeout(config.connect_timeout, client.delete(self.key.clone(), None)).await;
        }
        self.sent = false;
        self.revision = None;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.armed
            && self.sent
            && let Some(session) = self.session.take()
        {
            let key = std::mem::take(&mut self.key);
            let backend = self.backend.clone();
            let home = session.runtime_alive().then(|| session.runtime.clone());
            spawn_detached(
                async move {
                    let Ok(mut client) = live_client(&backend, &session).await else { return };
                    let _ = tokio::time::timeout(Duration::from_secs(10), client.delete(key, None)).await;
                },
                home,
            );
        }
    }
}

#[async_trait]
impl LockBackend for EtcdBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fair: true,
            fencing_survives_restart: true,
            lease: true,
            lease_renewal: true,
            loss_notification: true,
            inspect: true,
            waiter_count: true,
            cross_process: true,
            ..Capabilities::NONE
        }
    }

    fn renewal_interval(&self) -> Option<Duration> {
        // The watchdog sends a keep-alive every third of the TTL.
        Some(self.config.ttl / 3)
    }

    fn address(&self) -> Option<String> {
        Some(self.config.address.clone())
    }

    async fn acquire(&self, request: AcquireRequest) -> Result<Option<Grant>> {
        let key = format!("{}{}", self.config.lock_prefix(&request.lock), request.attempt);
        let mut pending =
            Pending { backend: self.me.clone(), key, session: None, sent: false, revision: None, armed: true };
        let mut backoff = FIRST_BACKOFF;
        loop {
            match self.try_once(&request, &mut pending).await {
                Ok(Try::Granted(grant)) => return Ok(Some(grant)),
                Ok(Try::Refused) => return Ok(None),
                Ok(Try::Vanished) => {}
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

    async fn inspect(&self, lock: &LockName) -> Result<LockInfo> {
        let mut client = self.client().await?;
        let prefix = self.config.lock_prefix(lock);
        let options = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
        let reply = tokio::time::timeout(self.config.connect_timeout, client.get(prefix, Some(options)))
            .await
            .map_err(|_| unreachable(&self.config, Some(lock)))?
            .map_err(|e| self.error(e, lock))?;
        let Some(first) = reply.kvs().first() else { return Ok(LockInfo::new(Vec::new(), Some(0))) };
        let token = FencingToken::new(u64::try_from(first.create_revision()).unwrap_or(0));
        let mut holder = match first.value_str().ok().and_then(OwnerMeta::decode) {
            Some(meta) => meta.holder(token),
            None => HolderInfo::new(token, String::from_utf8_lossy(first.key()).into_owned()),
        };
        if let Ok(left) = client.lease_time_to_live(first.lease(), None).await
            && left.ttl() > 0
        {
            holder = holder.with_lease_left(Duration::from_secs(u64::try_from(left.ttl()).unwrap_or(0)));
        }
        Ok(LockInfo::new(vec![holder], Some(reply.kvs().len() - 1)))
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
    id: Option<u64>,
    watch: tokio::task::JoinHandle<()>,
}

#[async_trait]
impl HeldLock for EtcdHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        self.watch.abort();
        self.session.unregister(self.id);
        let mut client = live_client(&self.backend, &self.session).await?;
        // Deletes the own key only, and only the incarnation this hold created.
        let txn = Txn::new()
            .when([Compare::create_revision(self.key.clone(), CompareOp::Equal, self.revision)])
            .and_then([TxnOp::delete(self.key.clone(), None)]);
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
            match tokio::time::timeout(self.backend_config.connect_timeout, client.txn(txn.clone())).await {
                Ok(Ok(reply)) if reply.succeeded() => return Ok(()),
                // After a lost reply, our own earlier delete may have been the one.
                Ok(Ok(_)) if maybe_applied => return Ok(()),
                Ok(Ok(_)) => return Err(Error::lost(BACKEND, &self.lock, LossReason::RecordGone)),
                Ok(Err(e)) => {
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
                Err(_) => {
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
        tokio::spawn(delete_while_alive(Arc::clone(&self.session), client, txn, self.backend_config.connect_timeout));
        Err(last
            .unwrap_or_else(|| unreachable(&self.backend_config, Some(&self.lock)))
            .with_server(Some(&self.backend_config.address)))
    }
}

/// Sends `delete` (a hold's conditioned delete) once a second until it is answered, or until
/// `session`'s lease is no longer kept alive.
async fn delete_while_alive(session: Arc<Session>, mut client: Client, delete: Txn, timeout: Duration) {
    while session.is_alive() {
        tokio::time::sleep(MAX_BACKOFF).await;
        match tokio::time::timeout(timeout, client.txn(delete.clone())).await {
            // Deleted, or gone already (the condition names this hold's incarnation only).
            Ok(Ok(_)) => return,
            Ok(Err(error)) => {
                if !to_error(error, None).is_retryable() {
                    return;
                }
            }
            Err(_) => {}
        }
    }
}
