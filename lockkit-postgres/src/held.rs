//! One granted PostgreSQL hold ([`PostgresHold`]): release (its row deleted), and the
//! in-place downgrade of a write hold.

use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::backend::{HeldLock, HoldSignal};
use lockkit_core::{Error, LockName, LossReason, Result};
use tokio_postgres::types::Type;

use crate::BACKEND;
use crate::client::{Inner, RETRY};
use crate::store::Failure;

/// One granted hold.
pub(crate) struct PostgresHold {
    pub(crate) inner: Arc<Inner>,
    pub(crate) id: u64,
    pub(crate) lock: LockName,
    /// The owner id, shared with the renewal registry.
    pub(crate) owner: Arc<str>,
    pub(crate) signal: HoldSignal,
    /// A write hold of a read-write lock, which may become a read hold in place.
    pub(crate) write: bool,
}

#[async_trait]
impl HeldLock for PostgresHold {
    fn downgrade(&self) -> Option<std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send + 'static>>> {
        if !self.write {
            return None;
        }
        let (inner, lock, owner) = (Arc::clone(&self.inner), self.lock.clone(), Arc::clone(&self.owner));
        Some(Box::pin(async move {
            let name = crate::stored_name(lock.as_str());
            let owner: &str = &owner;
            let rows = inner
                .store
                .query(Some(&lock), &inner.store.sql.downgrade, &[(&name, Type::TEXT), (&owner, Type::TEXT)])
                .await
                .map_err(Failure::into_error)?;
            match rows.first().and_then(|row| row.try_get::<_, Option<bool>>(0).ok().flatten()) {
                Some(true) => Ok(()),
                _ => Err(Error::lost(BACKEND, &lock, LossReason::RecordGone)),
            }
        }))
    }

    async fn release(self: Box<Self>) -> Result<()> {
        self.inner.untrack(self.id);
        let mut in_doubt = false;
        let mut tries = 0;
        loop {
            match self.inner.delete_own(&self.lock, &self.owner).await {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    // After a delete whose reply was lost, a missing row is most likely that
                    // delete's doing: the release succeeded unless the hold was lost already.
                    return match self.signal.loss() {
                        Some(reason) => Err(Error::lost(BACKEND, &self.lock, reason)),
                        None if in_doubt => Ok(()),
                        None => Err(Error::lost(BACKEND, &self.lock, LossReason::RecordGone)),
                    };
                }
                // A lost reply of a delete is answered by deleting again: the row is ours or
                // gone either way. A delete that was not sent, or that the server rolled back
                // (a lock timeout, a deadlock: transient errors), did nothing: sent again, a
                // missing row then means the hold was lost, not released.
                Err(failure @ (Failure::Unknown(_) | Failure::NotSent(_))) if tries < 3 => {
                    tries += 1;
                    in_doubt |= matches!(failure, Failure::Unknown(_));
                    tracing::debug!(error = %failure.into_error(), "release failed; retrying");
                    tokio::time::sleep(RETRY).await;
                }
                Err(failure) => return Err(failure.into_error()),
            }
        }
    }
}
