//! [`HandleInner`]: what a [`LockHandle`](crate::LockHandle) and the guards it hands out
//! share — the backend, the lock's name and kind, the provider's policy, the metrics labels
//! and the releases still in flight. A leaf below both `handle.rs` and `guard.rs`, so that
//! the handle creates guards and a guard reaches its handle without a circle.

use std::sync::{Arc, OnceLock};

use crate::backend::{HeldLock, LockBackend};
use crate::metrics::Labels;
use crate::provider::Policy;
use crate::release::{Release, Releases};
use crate::{Error, HoldKind, LockId, LockName};

/// The state of one lock handle, shared by its clones and by every guard it handed out.
pub(crate) struct HandleInner {
    pub(crate) backend: Arc<dyn LockBackend>,
    pub(crate) lock: LockName,
    pub(crate) kind: HoldKind,
    /// Releases of this handle's guards still in flight; made by the first release, so that
    /// a handle that never released anything costs no allocation for them.
    pub(crate) releases: OnceLock<Arc<Releases>>,
    /// The provider's settings.
    pub(crate) policy: Arc<Policy>,
    /// The labels of this handle's metrics.
    pub(crate) labels: Labels,
}

impl HandleInner {
    pub(crate) fn name(&self) -> &LockName {
        &self.lock
    }

    pub(crate) fn kind(&self) -> &HoldKind {
        &self.kind
    }

    /// The backend's short name (asked of the backend: a handle keeps no copy).
    pub(crate) fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    pub(crate) fn labels(&self) -> &Labels {
        &self.labels
    }

    /// The identity of this handle's lock: the store's identity (the provider's `store_id`,
    /// else the backend's) and the name. A backend with neither gets one made of its name and
    /// the client's identity in this process.
    pub(crate) fn lock_id(&self) -> LockId {
        let store =
            self.store_identity().unwrap_or_else(|| format!("{}://@{:x}", self.backend_name(), self.instance()));
        LockId::lossy(&store, self.lock.clone())
    }

    pub(crate) fn store_identity(&self) -> Option<String> {
        self.policy.store_identity(&*self.backend)
    }

    /// The client's identity in this process (never its content).
    pub(crate) fn instance(&self) -> usize {
        Arc::as_ptr(&self.backend).cast::<()>() as usize
    }

    /// Names the store in a connection or store error of this backend.
    pub(crate) fn describe(&self, error: Error) -> Error {
        error.with_server(self.backend.address().as_deref())
    }

    /// Starts freeing a hold of this handle: the returned [`Release`] runs it inline when
    /// awaited and finishes it in the background when dropped unfinished. The handle's next
    /// acquisition waits for it.
    pub(crate) fn start_release(&self, held: Box<dyn HeldLock>) -> Release {
        let span = tracing::info_span!("lockkit.release", backend = self.backend_name(), lock = %self.lock);
        let releases = self.releases.get_or_init(Arc::default);
        Release::new(held, Arc::clone(&self.backend), releases.begin(), span)
    }

    /// Every release of this handle's guards begun so far: an acquisition waits for those
    /// below this mark.
    pub(crate) fn release_mark(&self) -> u64 {
        self.releases.get().map_or(0, |releases| releases.mark())
    }

    /// Whether every release begun before `mark` is over.
    pub(crate) fn releases_settled(&self, mark: u64) -> bool {
        self.releases.get().is_none_or(|releases| releases.settled(mark))
    }

    /// Waits until every release begun before `mark` is over.
    pub(crate) async fn releases_settle(&self, mark: u64) {
        if let Some(releases) = self.releases.get() {
            releases.wait_settled(mark).await;
        }
    }
}
