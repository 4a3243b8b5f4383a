//! The own key of an acquisition in progress ([`Pending`]): what gives the attempt up in the
//! store (its key deleted, its late puts voided), now or, when the acquisition is dropped, in
//! the background.

use std::sync::{Arc, Weak};
use std::time::Duration;

use etcd_client::{KvClient, PutOptions, Txn, TxnOp};

use crate::client::{EtcdBackend, Slot, delete_while_alive, live_client};
use crate::config::EtcdConfig;
use crate::session::Session;

/// The own key of an acquisition in progress; dropped armed, it is deleted in the background.
pub(crate) struct Pending {
    pub(crate) backend: Weak<EtcdBackend>,
    pub(crate) key: String,
    /// The slot the key's name is; handed to the hold on a grant.
    pub(crate) slot: Option<Slot>,
    /// The session the key was put with.
    pub(crate) session: Option<Arc<Session>>,
    /// Whether a put may have been sent.
    pub(crate) sent: bool,
    /// The key's create revision, once known.
    pub(crate) revision: Option<i64>,
    pub(crate) armed: bool,
    /// The owner line of the acquisition, which the key's value starts with.
    pub(crate) owner: String,
    /// The key that, once written, refuses every later try of this attempt
    /// ([`give_up`](Self::give_up)); outside every lock's prefix (`<prefix>/%void/<attempt>`:
    /// no escaped lock name is `%void`).
    pub(crate) void_key: String,
    /// Whether a try's reply was lost, or a try is under way: its put may still be on its way
    /// to the store.
    pub(crate) doubt: bool,
}

impl Pending {
    /// Deletes the own key now (whatever its revision: the attempt id makes it ours alone).
    /// When the store does not confirm the delete, the key may still be there, bound to the
    /// provider's lease that its other holds keep alive: the acquisition stays armed, so that
    /// dropping it goes on deleting the key in the background.
    pub(crate) async fn delete_now(&mut self, config: &EtcdConfig) {
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
    pub(crate) async fn give_up(&mut self, config: &EtcdConfig) {
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
pub(crate) async fn forget_void(session: Arc<Session>, mut client: KvClient, void_key: String) {
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
