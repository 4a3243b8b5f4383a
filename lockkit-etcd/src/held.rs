//! A granted hold ([`EtcdHeld`]): its key and create revision, its release (the key's delete,
//! retried, then finished in the background while the lease lives) and its downgrade.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use lockkit_core::backend::{Backoff, HeldLock};
use lockkit_core::sync::lock_or_recover;
use lockkit_core::{Error, LockName, LossReason, Result};

use crate::BACKEND;
use crate::client::{EtcdBackend, FIRST_BACKOFF, MAX_BACKOFF, Slot, delete_while_alive, live_client, send_txn};
use crate::config::EtcdConfig;
use crate::error::{to_error, unreachable};
use crate::session::Session;

/// How many times a release is sent before its outcome is reported unknown.
const RELEASE_TRIES: usize = 5;

/// How long a release goes on trying, beyond [`RELEASE_TRIES`], while the member answers that
/// it sheds load (`too many requests`): it is reachable, and its backlog drains.
const SHEDDING_BOUND: Duration = Duration::from_secs(30);

/// One granted hold: its key and create revision.
pub(crate) struct EtcdHeld {
    pub(crate) backend: Weak<EtcdBackend>,
    pub(crate) backend_config: Arc<EtcdConfig>,
    pub(crate) session: Arc<Session>,
    pub(crate) lock: LockName,
    /// The own key, shared with the session's registry of holds.
    pub(crate) key: Arc<str>,
    pub(crate) revision: i64,
    /// For a write hold, the value that turns its key into a read in place.
    pub(crate) read_value: Option<String>,
    /// The void key of the acquisition's attempt, when a try of it was in doubt and the grant
    /// could not write it ([`EtcdBackend::void_late_puts`]): the release writes it.
    pub(crate) void_key: Option<String>,
    /// Whether the session follows the hold (it had not ended at the grant).
    pub(crate) registered: bool,
    /// The slot the key's name is: reusable once the release deleted the key.
    pub(crate) slot: Mutex<Option<Slot>>,
}

impl EtcdHeld {
    /// Marks the key gone: its slot may be reused.
    fn key_gone(&self) {
        if let Some(slot) = lock_or_recover(&self.slot).as_mut() {
            slot.free = true;
        }
    }
}

#[async_trait]
impl HeldLock for EtcdHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        tracing::trace!(key = %self.key, "release");
        if self.registered {
            self.session.unregister(&self.key, self.revision);
        }
        let mut client = live_client(&self.backend, &self.session).await?;
        // Deletes the own key only, and only the incarnation this hold created; voids the
        // attempt too when the grant could not (a late put of it is then refused).
        let void = self
            .void_key
            .as_ref()
            .map(|void_key| TxnOp::put(void_key.clone(), "", Some(PutOptions::new().with_lease(self.session.lease))));
        let txn = Txn::new()
            .when([Compare::create_revision(self.key.as_bytes(), CompareOp::Equal, self.revision)])
            .and_then(void.iter().cloned().chain([TxnOp::delete(self.key.as_bytes(), None)]).collect::<Vec<_>>())
            .or_else(void.into_iter().collect::<Vec<_>>());
        let mut last = None;
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        let started = Instant::now();
        let mut attempt = 0;
        // Whether an earlier try may have deleted the key (its reply lost); a member that sheds
        // load refuses a request before it proposes it.
        let mut maybe_applied = false;
        while attempt < RELEASE_TRIES {
            if last.is_some() {
                // A member that sheds load ("too many requests") or a reconnect needs a moment.
                backoff.pause().await;
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
        let slot = lock_or_recover(&self.slot).take();
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
        let (lock, key, revision) = (self.lock.clone(), self.key.as_bytes().to_vec(), self.revision);
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
