//! [`LockGuard`]: proof of a hold, with its fencing token, its deadline and its loss signal.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crate::handle::HandleInner;
use crate::{FencingToken, HoldSignal, HoldWatcher, LockName, LossReason, Result};

/// Proof that a handle holds a lock.
///
/// The lock stays held until the last guard of the hold is released or dropped, or until the
/// hold is lost. Watch [`lost`](Self::lost) (or a [`watcher`](Self::watcher)) and stop the
/// protected work when it fires: from that moment another owner may hold the lock. Send
/// [`token`](Self::token) with every write to a resource that checks fencing tokens.
///
/// # Dropping
///
/// Dropping a guard frees the lock **promptly but not immediately**: the release is sent to
/// the store from a background task on the runtime that granted it, like sqlx's advisory
/// lock guard. The handle's next acquisition waits for that release. If no runtime is left,
/// nothing panics and the store frees the lock when its lease or session ends. Call
/// [`release`](Self::release) to free it at once and learn the outcome.
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    handle: Arc<HandleInner>,
    token: FencingToken,
    signal: HoldSignal,
    finished: bool,
}

impl LockGuard {
    pub(crate) fn new(handle: Arc<HandleInner>, token: FencingToken, signal: HoldSignal) -> Self {
        Self { handle, token, signal, finished: false }
    }

    /// The fencing token of the hold; reentrant guards share it.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        self.signal.lock()
    }

    /// Whether the hold is still guaranteed: not lost, and its local deadline not passed.
    pub fn is_held(&self) -> bool {
        self.signal.is_held()
    }

    /// The local deadline until which the hold is guaranteed, or `None` when the hold has
    /// no lease (it lasts until released, or until loss is signalled).
    ///
    /// For leased holds this is the send time of the last confirmed acquisition or renewal
    /// plus the lease, minus the drift margin: the store cannot grant the lock to anyone else
    /// before it.
    pub fn valid_until(&self) -> Option<Instant> {
        self.signal.valid_until()
    }

    /// Resolves when the hold is lost, with the reason. Resolves at once when it already was.
    ///
    /// # Cancel Safety
    ///
    /// Cancel safe: dropping the future changes nothing.
    pub async fn lost(&self) -> LossReason {
        self.watcher().lost().await
    }

    /// A cloneable, `'static` view of the hold, for a task that must stop when it ends.
    pub fn watcher(&self) -> HoldWatcher {
        self.signal.watcher()
    }

    /// Releases this guard; the lock is freed when it is the last guard of the hold.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`](crate::Error::LockLost) when the hold had been lost (the new
    /// holder, if any, is left untouched); a connection error when the store could not be
    /// told, in which case the lease or session expiry frees the lock.
    ///
    /// # Cancel Safety
    ///
    /// Cancel safe: the release runs inline while this future is polled, and completes in a
    /// task of its own if the future is dropped before it finished.
    pub async fn release(mut self) -> Result<()> {
        self.finished = true;
        let Some((held, runtime)) = self.handle.detach_guard() else {
            // Other guards keep the hold; only report a loss.
            return match self.signal.loss() {
                Some(reason) => Err(self.handle.lost_error(reason)),
                None => Ok(()),
            };
        };
        let lost_before = self.signal.release();
        let outcome = self.handle.start_release(held, runtime).await;
        if let Some(reason) = lost_before {
            return Err(self.handle.lost_error(reason));
        }
        outcome
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Some((held, runtime)) = self.handle.detach_guard() {
            self.signal.release();
            drop(self.handle.start_release(held, runtime));
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", self.signal.lock())
            .field("backend", &self.signal.backend())
            .field("token", &self.token)
            .field("held", &self.is_held())
            .finish()
    }
}
