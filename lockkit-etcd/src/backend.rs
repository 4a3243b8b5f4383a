//! The [`LockBackend`] of an [`EtcdLockProvider`](crate::EtcdLockProvider): the queue-of-keys
//! recipe's entry points. An acquisition is a loop of tries (acquire.rs); a grant is an
//! [`EtcdHeld`](crate::held::EtcdHeld) (held.rs); elections are observed in observe.rs.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, KeyValue, Txn, TxnOp};
use lockkit_core::backend::{
    AcquireRequest, Backoff, Deadline, Grant, HolderInfo, LeaderEvents, LockBackend, LockInfo, OwnerMeta,
};
use lockkit_core::{Capabilities, Error, FencingToken, HoldKind, LockName, Result};

use crate::BACKEND;
use crate::acquire::Try;
use crate::client::{EtcdBackend, FIRST_BACKOFF, MAX_BACKOFF, in_queue_order};
use crate::error::unreachable;
use crate::observe::observe;
use crate::pending::Pending;
use crate::queue::{Entry, KeyKind, holders};

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
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
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
                        && Instant::now() + backoff.peek() >= at
                    {
                        return Ok(None);
                    }
                    backoff.pause().await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    fn observe(&self, lock: &LockName) -> Result<LeaderEvents> {
        // Elections: observe.rs.
        let me = self.me.upgrade().ok_or_else(|| Error::connection(BACKEND, Some(lock), "the provider was dropped"))?;
        Ok(observe(me, lock.clone()))
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
        if let Some(identity) = lockkit_core::backend::identity_field(kv.value()) {
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
