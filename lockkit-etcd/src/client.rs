//! The client side of an [`EtcdLockProvider`](crate::EtcdLockProvider)'s backend: its current
//! session (client and lease, opened on the home runtime), the slots its keys' names are
//! reserved in, and sending a request with the session's token renewed when etcd refused it.
//! The recipe is in acquire.rs, held.rs and backend.rs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use etcd_client::{Client, GetOptions, KvClient, SortOrder, SortTarget, Txn, TxnResponse};
use lockkit_core::sync::lock_or_recover;
use lockkit_core::{Error, LockName, Result};

use crate::BACKEND;
use crate::config::EtcdConfig;
use crate::error::{to_error, unreachable};
use crate::session::Session;

/// The first pause before an acquisition or a release tries again after a failure.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// The longest pause between two tries after failures.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The etcd backend: one provider's current session and the recipe.
pub(crate) struct EtcdBackend {
    /// This backend, for the holds and pending keys that may need a new client later.
    pub(crate) me: Weak<EtcdBackend>,
    pub(crate) config: Arc<EtcdConfig>,
    current: Mutex<Option<Arc<Session>>>,
    /// Taken while a session is being opened, so that one is opened at a time.
    opening: tokio::sync::Mutex<()>,
    /// This provider's part of its keys' names: `<lock prefix><id>-<slot>`.
    pub(crate) id: String,
    /// The slots in use, by lock prefix (see [`Slot`]): a short list (most locks have one),
    /// its key shared with the slots.
    slots: Mutex<HashMap<Arc<str>, Vec<u32>>>,
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
pub(crate) struct Slot {
    backend: Weak<EtcdBackend>,
    prefix: Arc<str>,
    n: u32,
    /// Whether the key is known gone, so that the slot may be reused.
    pub(crate) free: bool,
}

impl Slot {
    /// The key's name.
    pub(crate) fn key(&self, id: &str) -> String {
        format!("{}{id}-{}", self.prefix, self.n)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let (true, Some(backend)) = (self.free, self.backend.upgrade()) {
            let mut slots = lock_or_recover(&backend.slots);
            if let Some(taken) = slots.get_mut(&self.prefix) {
                taken.retain(|n| *n != self.n);
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
    pub(crate) fn slot(&self, prefix: String) -> Slot {
        let mut slots = lock_or_recover(&self.slots);
        // One copy of the prefix for the map and every slot of it.
        let prefix: Arc<str> = match slots.get_key_value(prefix.as_str()) {
            Some((shared, _)) => Arc::clone(shared),
            None => Arc::from(prefix),
        };
        let taken = slots.entry(Arc::clone(&prefix)).or_insert_with(|| Vec::with_capacity(1));
        let n = (0..).find(|n| !taken.contains(n)).unwrap_or(u32::MAX);
        taken.push(n);
        Slot { backend: self.me.clone(), prefix, n, free: false }
    }

    fn current(&self) -> MutexGuard<'_, Option<Arc<Session>>> {
        lock_or_recover(&self.current)
    }

    /// The session in use, if it is alive; never opens one.
    pub(crate) fn current_session(&self) -> Option<Arc<Session>> {
        self.current().as_ref().filter(|s| s.is_alive()).cloned()
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
        let session = Session::open(&self.config, &self.id).await?;
        *self.current() = Some(Arc::clone(&session));
        Ok(session)
    }

    /// A client on a live runtime, for one-off requests.
    pub(crate) async fn client(&self) -> Result<Client> {
        Ok(self.session().await?.client.clone())
    }

    pub(crate) fn addr(&self) -> Option<&str> {
        Some(self.config.address.as_str())
    }

    pub(crate) fn error(&self, error: etcd_client::Error, lock: &LockName) -> Error {
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
    pub(crate) async fn txn(&self, session: &Session, txn: Txn, lock: &LockName) -> Result<TxnResponse> {
        match send_txn(session, &mut session.kv.clone(), txn, self.config.connect_timeout).await {
            Some(reply) => reply.map_err(|e| self.error(e, lock)),
            None => Err(unreachable(&self.config, Some(lock))),
        }
    }
}

/// The options that read every key under a prefix in create revision order: the queue.
pub(crate) fn in_queue_order() -> GetOptions {
    GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend)
}

/// The client of `session` while its runtime runs, else one of the provider's current
/// session (opened on the current runtime if need be): the keys of a session whose runtime
/// shut down stay until its lease expires, and any client may delete them.
pub(crate) async fn live_client(backend: &Weak<EtcdBackend>, session: &Session) -> Result<KvClient> {
    if session.runtime_alive() {
        return Ok(session.kv.clone());
    }
    match backend.upgrade() {
        Some(backend) => Ok(backend.session().await?.kv.clone()),
        None => Err(Error::connection(BACKEND, None, "the provider was dropped and its runtime shut down")),
    }
}

/// Sends `delete` (a hold's conditioned delete, or the delete of an acquisition's own key)
/// until it is answered, once a second, for as long as `session`'s lease is kept alive: once
/// it is not, the key ends with the lease.
pub(crate) async fn delete_while_alive(session: Arc<Session>, mut client: KvClient, delete: Txn, timeout: Duration) {
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
pub(crate) async fn send_txn(
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
