//! [`RwLock`]: a read-write lock, as the pair of handles its two modes are.

use std::time::Duration;

use crate::{LockGuard, LockHandle, LockName, Result};

/// A read-write lock: any number of readers, or one writer, never both.
///
/// Obtained from [`LockProvider::rw_lock`](crate::LockProvider::rw_lock). It is a pair of
/// [`LockHandle`]s on one name, [`reader`](Self::reader) and [`writer`](Self::writer), with
/// shorthands for both; every acquisition is its own owner, as for the mutex. Every grant,
/// read or write, carries a fencing token greater than every token issued before it for the
/// name: a resource refuses a writer whose token is below the highest write it accepted, and
/// a reader when a write with a greater token was accepted (two readers may come back in
/// either order, and a read raises nothing: `lockkit::fence`).
///
/// # Behavior
///
/// - Readers share the lock; a writer excludes readers and writers.
/// - A writer waiting in the queue is not overtaken by readers that arrive after it: a
///   stream of readers cannot starve it (on backends that declare
///   [`Capabilities::fair`](crate::Capabilities::fair); the others say so).
/// - A write guard gives read guards of the same hold at once ([`LockGuard::read`]); when the
///   write guard goes while they live, the hold becomes a read hold in place.
/// - A read guard refuses to become a write guard ([`LockGuard::write`]) with
///   [`Error::Conflict`](crate::Error::Conflict), at once. A task that holds a read and
///   calls [`write`](Self::write) on the same lock is another owner waiting for the read it
///   holds itself: release the read first.
///
/// ```
/// use lockkit_core::memory::MemoryLockProvider;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lockkit_core::Result<()> {
/// let provider = MemoryLockProvider::new();
/// let config = provider.rw_lock("config/pricing")?;
/// let (a, b) = (config.read().await?, config.read().await?);
/// assert!(config.try_write().await?.is_none(), "readers exclude a writer");
/// drop((a, b));
/// let write = config.write().await?;
/// let read_inside = write.read()?; // the same hold, the same token
/// assert_eq!(read_inside.token(), write.token());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    read: LockHandle,
    write: LockHandle,
}

impl RwLock {
    pub(crate) fn new(read: LockHandle, write: LockHandle) -> Self {
        Self { read, write }
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        self.read.name()
    }

    /// The handle of the read side: its acquisitions are readers.
    pub fn reader(&self) -> &LockHandle {
        &self.read
    }

    /// The handle of the write side: its acquisitions are writers.
    pub fn writer(&self) -> &LockHandle {
        &self.write
    }

    /// Waits as long as it takes to read. See [`LockHandle::acquire`].
    ///
    /// # Errors
    ///
    /// As for [`LockHandle::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves nothing queued or held.
    pub async fn read(&self) -> Result<LockGuard> {
        self.read.acquire().await
    }

    /// Waits as long as it takes to write. See [`LockHandle::acquire`].
    ///
    /// # Errors
    ///
    /// As for [`LockHandle::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves nothing queued or held.
    pub async fn write(&self) -> Result<LockGuard> {
        self.write.acquire().await
    }

    /// Reads if no writer holds the lock or waits for it; never waits.
    ///
    /// # Errors
    ///
    /// As for [`LockHandle::try_acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn try_read(&self) -> Result<Option<LockGuard>> {
        self.read.try_acquire().await
    }

    /// Writes if nobody holds the lock or waits for it; never waits.
    ///
    /// # Errors
    ///
    /// As for [`LockHandle::try_acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn try_write(&self) -> Result<Option<LockGuard>> {
        self.write.try_acquire().await
    }

    /// Waits at most `timeout` to read. See [`LockHandle::acquire_timeout`].
    ///
    /// # Errors
    ///
    /// As for [`LockHandle::acquire_timeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn read_timeout(&self, timeout: Duration) -> Result<LockGuard> {
        self.read.acquire_timeout(timeout).await
    }

    /// Waits at most `timeout` to write. See [`LockHandle::acquire_timeout`].
    ///
    /// # Errors
    ///
    /// As for [`LockHandle::acquire_timeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn write_timeout(&self, timeout: Duration) -> Result<LockGuard> {
        self.write.acquire_timeout(timeout).await
    }
}
