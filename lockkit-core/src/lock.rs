//! The two traits application code is written against.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{LockBackend, LockInfo};
use crate::{AcquireOptions, Capabilities, Error, LockGuard, LockHandle, LockName, Result, Wait};

/// A connected client of one backend, handing out lock handles by name.
///
/// Backends implement only [`LockProvider::backend`]; everything else is derived. The trait
/// is object-safe: pick a backend at run time and pass `Arc<dyn LockProvider>` around.
#[async_trait]
pub trait LockProvider: Send + Sync + fmt::Debug {
    /// The backend behind this provider.
    fn backend(&self) -> Arc<dyn LockBackend>;

    /// A handle for the lock called `name`: one owner. Handles are cheap; two handles for
    /// one name contend like two processes would.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for an empty name or one longer than 1024 bytes.
    fn lock(&self, name: &str) -> Result<Box<dyn DistributedLock>> {
        Ok(Box::new(LockHandle::new(self.backend(), LockName::new(name)?)))
    }

    /// What the backend promises beyond the common contract.
    fn capabilities(&self) -> Capabilities {
        self.backend().capabilities()
    }

    /// Reports the holder and queue of the lock called `name`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad name; [`Error::Backend`] when the backend cannot
    /// inspect (see [`Capabilities::inspect`]); connection errors.
    async fn inspect(&self, name: &str) -> Result<LockInfo> {
        self.backend().inspect(&LockName::new(name)?).await
    }
}

/// A handle on one named lock: one owner, which may hold the lock reentrantly.
///
/// # Contract
///
/// Every bullet is a conformance case of `lockkit-testkit`, run against every backend.
///
/// - At most one owner holds a name at a time; different names are independent.
/// - [`try_acquire`](Self::try_acquire) returns `Ok(None)` at once when another owner holds
///   the lock, and leaves no trace.
/// - [`acquire_timeout`](Self::acquire_timeout) returns [`Error::Timeout`] close to the
///   timeout and leaves no trace.
/// - A waiting acquisition is woken by the release, driven by notifications of the store.
/// - Dropping an acquisition future at any point leaves no trace; a grant made meanwhile is
///   freed promptly.
/// - Acquiring a handle that already holds the lock succeeds at once with the same fencing
///   token; the lock is freed when every guard of the handle is gone. Reentry after a loss
///   fails with [`Error::LockLost`].
/// - Each fresh acquisition carries a fencing token strictly greater than every earlier one.
///
/// # Cancel Safety
///
/// All acquisition methods are cancel safe: drop the future and nothing is left queued or held.
#[async_trait]
pub trait DistributedLock: Send + Sync + fmt::Debug {
    /// The lock's name.
    fn name(&self) -> &LockName;

    /// The backend's short name, as used in errors.
    fn backend_name(&self) -> &'static str;

    /// Whether this handle holds the lock now (a lost hold counts as not held).
    fn is_held(&self) -> bool;

    /// Acquires with explicit options; `Ok(None)` when the lock was not granted within the
    /// allowed wait. The other acquisition methods are shorthands for this one.
    async fn acquire_with(&self, options: AcquireOptions) -> Result<Option<LockGuard>>;

    /// Waits as long as it takes for the lock.
    async fn acquire(&self) -> Result<LockGuard> {
        match self.acquire_with(AcquireOptions::default()).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::backend(
                self.backend_name(),
                Some(self.name()),
                "the backend gave up an acquisition that was allowed to wait forever",
            )),
        }
    }

    /// Waits at most `timeout` for the lock.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when it was not granted in time; nothing is left queued.
    async fn acquire_timeout(&self, timeout: Duration) -> Result<LockGuard> {
        match self.acquire_with(AcquireOptions::default().with_wait(Wait::Timeout(timeout))).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::Timeout { backend: self.backend_name(), lock: self.name().clone(), waited: timeout }),
        }
    }

    /// Takes the lock if nobody else holds it (or waits for it); never waits.
    async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.acquire_with(AcquireOptions::no_wait()).await
    }
}
