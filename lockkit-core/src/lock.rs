//! [`DistributedLock`]: the trait generic application code is written against.

use std::future::Future;
use std::time::Duration;

use crate::{AcquireOptions, LockGuard, LockHandle, LockName, Result, StoreId};

/// Anything that can be acquired for a [`LockGuard`]: a mutex handle, a side of a
/// read-write lock, a semaphore. Write generic code against it (`impl DistributedLock`);
/// call the same methods on [`LockHandle`] directly without importing it.
///
/// Every backend is reached through the same [`LockHandle`] type (the backend sits behind
/// [`LockProvider`](crate::LockProvider)), so code generic over *backends* needs no trait
/// at all; this one is for code generic over *primitives*, and for wrappers of your own.
/// The methods return `Send` futures, so generic code can spawn them.
///
/// # Several kinds together
///
/// The trait is not object-safe (its methods return `impl Future`), so there is no
/// `Box<dyn DistributedLock>`, and none is needed for lockkit's own kinds: a mutex, either
/// side of a read-write lock, a semaphore and an election candidate are all a [`LockHandle`]
/// (its [`kind`](LockHandle::kind) tells which), and all give a [`LockGuard`]. Hold a mix in a
/// `Vec<LockHandle>`, or take them all or nothing with a [`MultiLock`](crate::MultiLock):
///
/// ```
/// use lockkit_core::memory::MemoryLockProvider;
/// use lockkit_core::{LockHandle, MultiLock};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lockkit_core::Result<()> {
/// let provider = MemoryLockProvider::new();
/// let locks: Vec<LockHandle> = vec![
///     provider.lock("orders/42")?,
///     provider.rw_lock("catalog")?.reader().clone(),
///     provider.semaphore("exports", 3)?,
/// ];
/// let guards = MultiLock::new(locks)?.acquire().await?;
/// assert_eq!(guards.tokens().count(), 3);
/// # Ok(())
/// # }
/// ```
///
/// A wrapper type of your own that should sit in one collection with others of other types
/// wraps a `LockHandle` (and implements this trait by forwarding to it), or is stored as the
/// `LockHandle` it wraps.
pub trait DistributedLock: Send + Sync {
    /// The lock's name.
    fn name(&self) -> &LockName;

    /// Waits as long as it takes. See [`LockHandle::acquire`].
    fn acquire(&self) -> impl Future<Output = Result<LockGuard>> + Send;

    /// Waits at most `timeout`. See [`LockHandle::acquire_timeout`].
    fn acquire_timeout(&self, timeout: Duration) -> impl Future<Output = Result<LockGuard>> + Send;

    /// Never waits on another owner. See [`LockHandle::try_acquire`].
    fn try_acquire(&self) -> impl Future<Output = Result<Option<LockGuard>>> + Send;

    /// The general form. See [`LockHandle::acquire_with`].
    fn acquire_with(&self, options: AcquireOptions) -> impl Future<Output = Result<Option<LockGuard>>> + Send;

    /// The store the lock lives in: what [`MultiLock`](crate::MultiLock) orders locks of
    /// several stores by, and how it tells the same name on two stores from a name given
    /// twice. See [`LockHandle::store`].
    ///
    /// The default is [`StoreId::unknown`], which puts every lock of the implementor in one
    /// anonymous store; a wrapper around a [`LockHandle`] should forward to it.
    fn store(&self) -> StoreId {
        StoreId::unknown()
    }
}

impl DistributedLock for LockHandle {
    fn name(&self) -> &LockName {
        LockHandle::name(self)
    }

    fn acquire(&self) -> impl Future<Output = Result<LockGuard>> + Send {
        LockHandle::acquire(self)
    }

    fn acquire_timeout(&self, timeout: Duration) -> impl Future<Output = Result<LockGuard>> + Send {
        LockHandle::acquire_timeout(self, timeout)
    }

    fn try_acquire(&self) -> impl Future<Output = Result<Option<LockGuard>>> + Send {
        LockHandle::try_acquire(self)
    }

    fn acquire_with(&self, options: AcquireOptions) -> impl Future<Output = Result<Option<LockGuard>>> + Send {
        LockHandle::acquire_with(self, options)
    }

    fn store(&self) -> StoreId {
        LockHandle::store(self)
    }
}
