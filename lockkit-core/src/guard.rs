//! [`LockGuard`]: proof of a hold, with its fencing token, its deadline and its loss signal;
//! and the hold that reentrant guards share.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tracing::Instrument;

use crate::backend::HeldLock;
use crate::handle_inner::HandleInner;
use crate::metrics::HoldClock;
use crate::release::Release;
use crate::{Error, FencingToken, HoldKind, HoldSignal, HoldWatcher, LockName, LossReason, Result};

/// One hold, shared by every guard of it (the first and those from
/// [`LockGuard::reenter`]); the last guard to go frees it in the store.
pub(crate) struct Hold {
    handle: Arc<HandleInner>,
    token: FencingToken,
    signal: HoldSignal,
    state: Mutex<Guards>,
    /// When the hold began, for its hold time.
    clock: HoldClock,
}

struct Guards {
    /// Live guards of this hold.
    count: u32,
    /// Live guards of this hold in write mode; when the last goes while read guards live, the
    /// hold is downgraded to a read hold in place.
    writes: u32,
    /// The backend's means to free the hold; taken by the last guard.
    held: Option<Box<dyn HeldLock>>,
}

impl Hold {
    /// A hold with its first guard.
    pub(crate) fn first_guard(
        handle: Arc<HandleInner>,
        token: FencingToken,
        signal: HoldSignal,
        held: Box<dyn HeldLock>,
    ) -> LockGuard {
        let writes = u32::from(*handle.kind() == HoldKind::Write);
        let state = Mutex::new(Guards { count: 1, writes, held: Some(held) });
        let clock = HoldClock::start();
        LockGuard { hold: Arc::new(Self { handle, token, signal, state, clock }), read: false, finished: false }
    }

    /// The mode of a guard of this hold: the hold's kind, or a read (`read`) taken from a
    /// write hold.
    fn mode(&self, read: bool) -> &HoldKind {
        /// The mode of every read guard taken from a write guard.
        static READ: HoldKind = HoldKind::Read;
        if read { &READ } else { self.handle.kind() }
    }

    fn guards(&self) -> MutexGuard<'_, Guards> {
        // Nothing panics while holding this lock; recover the data if something ever did.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lost_error(&self, reason: LossReason) -> Error {
        Error::lost(self.handle.backend_name(), self.handle.name(), reason)
    }

    /// Adds a guard to the hold: of the hold's kind, or a read (`read`).
    fn attach(self: &Arc<Self>, read: bool) -> Result<LockGuard> {
        let mut guards = self.guards();
        if let Some(reason) = self.signal.loss() {
            return Err(self.lost_error(reason));
        }
        let kind = self.mode(read);
        guards.count = guards.count.saturating_add(1);
        guards.writes = guards.writes.saturating_add(u32::from(*kind == HoldKind::Write));
        self.handle.labels().reentered();
        tracing::debug!(token = self.token.get(), depth = guards.count, ?kind, "reentered");
        Ok(LockGuard { hold: Arc::clone(self), read, finished: false })
    }

    /// Forgets one guard (a read one when `read`; `released` by `release`, or dropped); for the last
    /// one, ends the signal and returns the release to run. The last write guard of a hold
    /// that read guards still share turns it into a read hold in the store, in the background.
    fn detach(&self, read: bool, released: bool) -> Option<(Release, Option<LossReason>)> {
        let held = {
            let mut guards = self.guards();
            guards.count = guards.count.saturating_sub(1);
            if *self.mode(read) == HoldKind::Write {
                guards.writes = guards.writes.saturating_sub(1);
                if guards.writes == 0 && guards.count > 0 {
                    self.downgrade(&mut guards);
                }
            }
            if guards.count > 0 {
                return None;
            }
            guards.held.take()?
        };
        let lost_before = self.signal.release();
        self.clock.ended(self.handle.labels(), released, lost_before.is_some());
        Some((self.handle.start_release(held), lost_before))
    }

    /// Sends the backend's downgrade of this write hold to the store, in the background (on the
    /// home runtime, like every background work of lockkit). The
    /// hold stays a write hold in the store until it lands, which excludes more, never less.
    fn downgrade(&self, guards: &mut Guards) {
        let Some(held) = guards.held.as_ref() else { return };
        let Some(downgrade) = held.downgrade() else {
            tracing::debug!("the backend keeps the hold a write hold until its last guard goes");
            return;
        };
        let span =
            tracing::info_span!("lockkit.downgrade", backend = self.handle.backend_name(), lock = %self.handle.name());
        let task = async move {
            if let Err(error) = downgrade.await {
                tracing::warn!(%error, "the write hold could not become a read hold; it stays a write hold");
            }
        };
        crate::home::spawn(task.instrument(span));
    }
}

/// Proof of a hold: of a lock, a read or write side of a read-write lock, or a permit.
///
/// The hold lasts until the last guard of it is released or dropped, or until it is lost.
/// Watch [`lost`](Self::lost) (or a [`watcher`](Self::watcher)) and stop the protected work
/// when it fires: from that moment another owner may hold the lock. Send
/// [`token`](Self::token) with every write to a resource that checks fencing tokens.
///
/// # What the loss signal promises
///
/// Every loss that comes with time (the lease or session running out, a cut connection, a
/// paused store or a paused holder) is signalled no later than [`valid_until`](Self::valid_until),
/// which lies before the moment the store could grant the lock to another owner. A record
/// deleted by someone else (an operator, a `FLUSHALL`, an eviction) is signalled as soon as
/// the backend notices, at the latest at its next renewal or check, which may be after
/// another owner was granted the lock: the fencing token is what protects the resource then.
///
/// # Reentrancy
///
/// A guard is the proof of ownership: [`reenter`](Self::reenter) gives another guard of the
/// same hold at once, with the same token, for code that needs the lock again while it holds
/// it (a recursive call, a callback). Acquiring through the handle again is a *new* owner
/// and waits like any other.
///
/// # Dropping
///
/// Dropping a guard frees the lock **promptly but not immediately**: the release runs in the
/// background on lockkit's home runtime ([`crate::home`]), so it reaches the store wherever
/// the guard is dropped (in async code, on a plain thread, after the runtime that granted the
/// hold and the provider are gone); an in-process store frees it before `drop` returns. Dropping never panics and never blocks. The handle's next
/// acquisition waits for the releases of its guards that began before it. Call
/// [`release`](Self::release) to free the lock at once and learn the outcome.
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    hold: Arc<Hold>,
    /// Whether this guard is a read taken from a write hold; else its mode is the hold's kind.
    read: bool,
    finished: bool,
}

impl LockGuard {
    /// The fencing token of the hold; reentrant guards share it.
    pub fn token(&self) -> FencingToken {
        self.hold.token
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        self.hold.handle.name()
    }

    /// What a fenced resource needs with each write or read under this guard: the lock's
    /// identity, the token, and the mode (a read for a read guard, a write for every other
    /// kind). See [`Fence`](crate::Fence).
    pub fn fence(&self) -> crate::Fence {
        crate::Fence::new(self.hold.handle.lock_id(), self.token(), crate::FenceMode::of(self.kind()))
    }

    /// The kind of this guard: [`HoldKind::Exclusive`] for a mutex, [`HoldKind::Read`] for a
    /// read taken from a write guard.
    pub fn kind(&self) -> &HoldKind {
        self.hold.mode(self.read)
    }

    /// Whether the hold is still guaranteed: not lost, and its local deadline not passed.
    pub fn is_held(&self) -> bool {
        self.hold.signal.is_held()
    }

    /// The local deadline until which the hold is guaranteed, or `None` when the hold has
    /// no lease (it lasts until released, or until loss is signalled).
    ///
    /// For leased holds this is the send time of the last confirmed acquisition or renewal
    /// plus the lease, minus the drift margin: the store cannot grant the lock to anyone else
    /// before it.
    pub fn valid_until(&self) -> Option<Instant> {
        self.hold.signal.valid_until()
    }

    /// When the hold's maximum hold ends, if it was acquired with one
    /// ([`AcquireOptions::with_max_hold`](crate::AcquireOptions::with_max_hold) or the
    /// provider's default): the hold is lost then, with
    /// [`LossReason::MaxHoldReached`], at the latest. Reentrant guards share it.
    pub fn max_hold_until(&self) -> Option<Instant> {
        self.hold.signal.cap()
    }

    /// Resolves when the hold is lost, with the reason. Resolves at once when it already was.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future changes nothing.
    ///
    /// # Panics
    ///
    /// When polled outside a Tokio runtime with the time driver enabled, as every Tokio timer.
    pub async fn lost(&self) -> LossReason {
        self.watcher().lost().await
    }

    /// A cloneable, `'static` view of the hold, for a task that must stop when it ends.
    pub fn watcher(&self) -> HoldWatcher {
        self.hold.signal.watcher()
    }

    /// Another guard of the same hold, at once and without a round trip, with the same
    /// token. The hold ends with its last guard.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when the hold was lost: a reentry never revives a lost hold.
    pub fn reenter(&self) -> Result<LockGuard> {
        self.hold.attach(self.read)
    }

    /// A read guard of the same hold, at once and with the same token: from a read guard
    /// (as [`reenter`](Self::reenter)) or from a write guard (a read inside the write). When
    /// the last write guard of a hold goes while read guards of it live, the hold becomes a
    /// read hold in place: no writer queued meanwhile slips in between.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when the hold was lost; [`Error::Unsupported`] from a guard that is
    /// neither a read nor a write (a mutex or a permit).
    pub fn read(&self) -> Result<LockGuard> {
        match self.kind() {
            HoldKind::Read | HoldKind::Write => self.hold.attach(true),
            _ => Err(Error::unsupported(
                self.hold.handle.backend_name(),
                Some(self.name()),
                format!("a read from {}", self.kind()),
            )),
        }
    }

    /// A write guard of the same hold: from a write guard, as [`reenter`](Self::reenter).
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] at once from a read guard: an upgrade would wait for every other
    /// reader, and two readers upgrading would wait for each other forever; release the read
    /// and acquire the write instead. [`Error::LockLost`] when the hold was lost;
    /// [`Error::Unsupported`] from a guard that is neither a read nor a write.
    pub fn write(&self) -> Result<LockGuard> {
        match self.kind() {
            HoldKind::Write => self.hold.attach(false),
            HoldKind::Read => Err(Error::conflict(
                self.hold.handle.backend_name(),
                Some(self.name()),
                "a read hold cannot become a write hold (two readers upgrading would wait for each other forever); release the read guard and acquire the write lock",
            )),
            _ => Err(Error::unsupported(
                self.hold.handle.backend_name(),
                Some(self.name()),
                format!("a write from {}", self.kind()),
            )),
        }
    }

    /// Releases this guard; the lock is freed when it is the last guard of the hold.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when the hold had been lost (the new holder, if any, is left
    /// untouched); a connection error when the store could not be told, in which case the
    /// lease or session expiry frees the lock.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the release runs inline while this future is polled, and completes in a
    /// task of its own if the future is dropped before it finished.
    pub async fn release(mut self) -> Result<()> {
        self.finished = true;
        let Some((release, lost_before)) = self.hold.detach(self.read, true) else {
            // Other guards keep the hold; only report a loss.
            return match self.hold.signal.loss() {
                Some(reason) => Err(self.hold.lost_error(reason)),
                None => Ok(()),
            };
        };
        let outcome = release.await;
        if let Some(reason) = lost_before {
            return Err(self.hold.lost_error(reason));
        }
        outcome.map_err(|error| self.hold.handle.describe(error))
    }
}

impl LockGuard {
    /// Resigns a leadership ([`Election::campaign`](crate::Election::campaign)): the same as
    /// [`release`](Self::release), named for what it does there. The next candidate leads
    /// within a few round trips.
    ///
    /// # Errors
    ///
    /// As for [`release`](Self::release).
    ///
    /// # Cancel safety
    ///
    /// As for [`release`](Self::release).
    pub async fn resign(self) -> Result<()> {
        self.release().await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Some((release, _)) = self.hold.detach(self.read, false) {
            release.finish_in_background();
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", self.name())
            .field("kind", self.kind())
            .field("backend", &self.hold.handle.backend_name())
            .field("token", &self.token())
            .field("held", &self.is_held())
            .finish()
    }
}
