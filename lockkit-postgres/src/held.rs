//! One granted PostgreSQL hold ([`PostgresHold`]): release (its row deleted), and the
//! in-place downgrade of a write hold; a holder as a row records it ([`stored_holder`]).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use lockkit_core::backend::{HeldLock, HoldSignal, HolderInfo, OwnerMeta};
use lockkit_core::{Error, FencingToken, LockName, LossReason, Result};
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
        delete_row(&self.lock, &self.signal, || self.inner.delete_own(&self.lock, &self.owner)).await
    }
}

/// Ends a hold of `lock` by deleting its row with `delete` (`Ok(false)`: no row of ours was
/// there), tried up to four times: `Ok` when the row is gone by our doing, the hold's loss
/// (`signal`'s reason, else [`LossReason::RecordGone`]) when it was gone already.
pub(crate) async fn delete_row<F, Fut>(lock: &LockName, signal: &HoldSignal, mut delete: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<bool, Failure>>,
{
    let mut in_doubt = false;
    let mut tries = 0;
    loop {
        match delete().await {
            Ok(true) => return Ok(()),
            Ok(false) => {
                // After a delete whose reply was lost, a missing row is most likely that
                // delete's doing: the release succeeded unless the hold was lost already.
                return match signal.loss() {
                    Some(reason) => Err(Error::lost(BACKEND, lock, reason)),
                    None if in_doubt => Ok(()),
                    None => Err(Error::lost(BACKEND, lock, LossReason::RecordGone)),
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

/// A holder as its row records it: `meta` as its owner wrote it (shown as stored when it is
/// not lockkit's encoding), `token`, granted at `since_ms` with `left_ms` of its lease left.
pub(crate) fn stored_holder(meta: String, token: i64, since_ms: i64, left_ms: i64) -> HolderInfo {
    // The tokens and times a row stores are never negative; a negative one reads as 0.
    let token = FencingToken::new(u64::try_from(token).unwrap_or(0));
    let holder = match OwnerMeta::decode(&meta) {
        Some(meta) => meta.holder(token),
        None => HolderInfo::new(token, meta),
    };
    holder.with_since(since_of(since_ms)).with_lease_left(Duration::from_millis(u64::try_from(left_ms).unwrap_or(0)))
}

/// A server time in milliseconds since the epoch.
pub(crate) fn since_of(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}
