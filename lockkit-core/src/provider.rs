//! [`LockProvider`]: what users hold: a connected client of one backend, handing out lock
//! handles by name.

use std::fmt;
use std::sync::Arc;

use std::num::NonZeroU32;
use std::time::Duration;

use tracing::Instrument;

use crate::backend::{HolderInfo, LockBackend, LockInfo};
use crate::metrics::NamePrefix;
use crate::{Capabilities, Election, Error, HoldKind, LockHandle, LockName, Result, RwLock};

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 1_000_000;

/// A connected client of one backend, handing out lock handles by name.
///
/// Made by `lockkit::connect(url)`, by a backend's provider (every backend provider
/// dereferences to one and converts into one), or by [`LockProvider::new`] around a
/// backend of your own. Cheap to clone: clones are the same client. Every method is
/// inherent: no trait to import, no boxing.
///
/// ```
/// use lockkit_core::memory::MemoryLockProvider;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lockkit_core::Result<()> {
/// let provider = MemoryLockProvider::new();
/// let lock = provider.lock("reports/daily")?;
/// let guard = lock.acquire().await?;
/// assert!(lock.try_acquire().await?.is_none(), "every acquisition is its own owner");
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LockProvider {
    backend: Arc<dyn LockBackend>,
    policy: Arc<Policy>,
}

/// The provider-wide settings that every handle of a provider carries.
#[derive(Clone, Default)]
pub(crate) struct Policy {
    /// The maximum hold of acquisitions that do not set their own.
    pub(crate) max_hold: Option<Duration>,
    /// The `prefix` label of lock-level metrics, when the provider asks for one.
    pub(crate) metrics_prefix: Option<NamePrefix>,
    /// The store's identity given by hand (option `store_id`), over the backend's own.
    pub(crate) store_id: Option<Arc<str>>,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("max_hold", &self.max_hold)
            .field("metrics_prefix", &self.metrics_prefix.is_some())
            .field("store_id", &self.store_id)
            .finish()
    }
}

impl LockProvider {
    /// A provider over `backend`: how a backend (lockkit's or a third party's) becomes what
    /// users hold.
    pub fn new(backend: Arc<dyn LockBackend>) -> Self {
        Self { backend, policy: Arc::default() }
    }

    /// Sets the maximum hold of every acquisition that does not set its own
    /// ([`AcquireOptions::with_max_hold`](crate::AcquireOptions::with_max_hold)); `None`, the
    /// default, leaves holds uncapped. Every backend's builder sets it from its `max_hold`
    /// setting (URL option `max_hold=`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a maximum hold below [`min_max_hold`](Self::min_max_hold)
    /// or above [`MAX_DURATION`](crate::config::MAX_DURATION).
    pub fn with_max_hold(mut self, max_hold: Option<Duration>) -> Result<Self> {
        if let Some(max_hold) = max_hold {
            check_max_hold(&*self.backend, max_hold)?;
        }
        Arc::make_mut(&mut self.policy).max_hold = max_hold;
        Ok(self)
    }

    /// Adds a `prefix` label to the provider's lock-level [metrics](crate::metrics): the value
    /// `prefix` returns for the lock's name (`""` for `None`). The name itself is never a
    /// label, since lock names are unbounded; return a part that takes few values, such as
    /// the part before the first `/` (each value's label set is kept for the life of the
    /// process, so that recording allocates nothing). Set it before making handles: a handle
    /// keeps the labels it was made with. Without the `metrics` feature it is kept and never called.
    ///
    /// ```
    /// use lockkit_core::memory::MemoryLockProvider;
    ///
    /// let provider = lockkit_core::LockProvider::from(MemoryLockProvider::new())
    ///     .with_metrics_prefix(|name| name.split_once('/').map(|(prefix, _)| prefix.to_owned()));
    /// # let _ = provider;
    /// ```
    #[must_use]
    pub fn with_metrics_prefix(mut self, prefix: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        Arc::make_mut(&mut self.policy).metrics_prefix = Some(Arc::new(prefix));
        self
    }

    /// Names the store for fences and for [`MultiLock`](crate::MultiLock)'s order, over the
    /// identity the backend derives from its URL ([`LockId::store`](crate::LockId::store)):
    /// for processes that reach one store by different addresses (behind a load balancer,
    /// through a DNS alias, a Redis Cluster seeded with different nodes). Give every provider
    /// of that store the same name. Every backend's builder sets it from its `store_id`
    /// setting (URL option `store_id=`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for an empty name, one over
    /// [`MAX_STORE_ID_LEN`](crate::fence::MAX_STORE_ID_LEN) bytes, or one with `#` or a
    /// control character.
    pub fn with_store_id(mut self, store_id: &str) -> Result<Self> {
        if let Some(problem) = crate::fence::store_id_problem(store_id) {
            return Err(Error::invalid_config(self.backend.name(), format!("store_id: {problem}")));
        }
        Arc::make_mut(&mut self.policy).store_id = Some(Arc::from(store_id));
        Ok(self)
    }

    /// The store's identity: the `store_id` given, else the backend's
    /// ([`LockBackend::store_identity`]), else `None` for a backend without an address.
    pub fn store_identity(&self) -> Option<String> {
        self.policy.store_identity(&*self.backend)
    }

    /// The provider's default maximum hold, if it has one.
    pub fn max_hold(&self) -> Option<Duration> {
        self.policy.max_hold
    }

    /// The shortest maximum hold this provider accepts: the backend's renewal (or check)
    /// interval, or a millisecond for a backend that neither renews nor checks.
    pub fn min_max_hold(&self) -> Duration {
        min_max_hold(&*self.backend)
    }

    /// A handle for the mutex called `name`. Handles are cheap and shareable; every
    /// acquisition through one is its own owner.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for an empty name or one longer than 1024 bytes.
    pub fn lock(&self, name: &str) -> Result<LockHandle> {
        self.handle(name, HoldKind::Exclusive)
    }

    /// A handle for holds of any `kind` on the lock called `name`: the one constructor the
    /// others ([`lock`](Self::lock), and those of the read-write lock, the semaphore and
    /// election) are built on.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad name; [`Error::Unsupported`] for a kind the backend
    /// does not declare in its [`Capabilities`].
    pub fn handle(&self, name: &str, kind: HoldKind) -> Result<LockHandle> {
        let name = LockName::new(name)?;
        if !kind.is_supported_by(&self.backend.capabilities()) {
            return Err(Error::unsupported(self.backend.name(), Some(&name), kind.describe()));
        }
        Ok(LockHandle::new(Arc::clone(&self.backend), name, kind, Arc::clone(&self.policy)))
    }

    /// The read-write lock called `name`: any number of readers, or one writer.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad name; [`Error::Unsupported`] when the backend does not
    /// declare [`Capabilities::rw_lock`].
    pub fn rw_lock(&self, name: &str) -> Result<RwLock> {
        Ok(RwLock::new(self.handle(name, HoldKind::Read)?, self.handle(name, HoldKind::Write)?))
    }

    /// The counting semaphore called `name`, of `permits` permits: each acquisition through
    /// the handle takes one, and at most `permits` are held at once. The count belongs to
    /// the semaphore: every user of the name must give the same (a store that sees another
    /// count in use refuses with [`Error::Conflict`]).
    ///
    /// That check is made by each acquisition, not here, on purpose: this call does no I/O (a
    /// handle is a cheap factory), and the count in use is the store's at the moment of an
    /// acquisition, which the store checks in the same step as it grants (a semaphore whose
    /// holders and waiters are all gone may be taken again with another count). A check here
    /// would answer for a moment that has passed by the time the handle is used.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a count of 0 or above [`MAX_PERMITS`];
    /// [`Error::InvalidName`] for a bad name; [`Error::Unsupported`] when the backend does not
    /// declare [`Capabilities::semaphore`].
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<LockHandle> {
        let permits = NonZeroU32::new(permits).filter(|n| n.get() <= MAX_PERMITS).ok_or_else(|| {
            Error::invalid_config(
                self.backend.name(),
                format!("semaphore {name:?} has {permits} permits; give it from 1 to {MAX_PERMITS}"),
            )
        })?;
        self.handle(name, HoldKind::Permit { permits })
    }

    /// The election called `name`: candidates [`campaign`](Election::campaign), one leads
    /// at a time, and anyone may ask who leads or [`observe`](Election::observe) the changes.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad name; [`Error::Unsupported`] when the backend does not
    /// declare [`Capabilities::election`].
    pub fn election(&self, name: &str) -> Result<Election> {
        let name = LockName::new(name)?;
        if !self.backend.capabilities().election {
            return Err(Error::unsupported(self.backend.name(), Some(&name), "leader election"));
        }
        Ok(Election::new(Arc::clone(&self.backend), name, Arc::clone(&self.policy)))
    }

    /// What the backend promises beyond the common contract.
    pub fn capabilities(&self) -> Capabilities {
        self.backend.capabilities()
    }

    /// The backend's short name: `"memory"`, `"file"`, `"redis"`, `"zk"`, ...
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// Reports the holders and queue of the lock called `name`, as the store sees them now.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad name; [`Error::Unsupported`] when the backend cannot
    /// inspect (see [`Capabilities::inspect`]); connection errors.
    pub async fn inspect(&self, name: &str) -> Result<LockInfo> {
        let name = LockName::new(name)?;
        if !self.backend.capabilities().inspect {
            return Err(Error::unsupported(self.backend.name(), Some(&name), "inspecting a lock"));
        }
        let info = self.backend.inspect(&name).await;
        info.map_err(|error| error.with_server(self.backend.address().as_deref()))
    }

    /// Frees the lock called `name` whatever its holders do, for an operator whose holder is
    /// stuck but alive, and returns the holds it broke (empty: nothing to break). Each broken
    /// holder's guard is signalled lost ([`LossReason::RecordGone`](crate::LossReason::RecordGone)),
    /// at once or by its next renewal or check, and the next owner's token is greater, so a
    /// resource that checks tokens refuses the broken holder's late writes. The waiters queued
    /// for the lock are handed it as by a release.
    ///
    /// The store's own permissions decide who may do this (a Redis ACL user that may run the
    /// scripts, a ZooKeeper ACL that allows deleting the lock's nodes, write access to a lock
    /// directory).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad name; [`Error::Unsupported`] when the backend cannot
    /// (see [`Capabilities::break_lock`]); connection and store errors (a store that refuses
    /// the permission among them).
    pub async fn break_lock(&self, name: &str) -> Result<Vec<HolderInfo>> {
        let name = LockName::new(name)?;
        if !self.backend.capabilities().break_lock {
            return Err(Error::unsupported(self.backend.name(), Some(&name), "breaking a lock"));
        }
        let span = tracing::warn_span!("lockkit.break", backend = self.backend.name(), lock = %name);
        let broken = self.backend.break_lock(&name).instrument(span.clone()).await;
        let broken = broken.map_err(|error| error.with_server(self.backend.address().as_deref()))?;
        span.in_scope(|| tracing::warn!(holds = broken.len(), "lock broken"));
        Ok(broken)
    }

    /// The backend behind this provider, for layers that wrap it (metrics, fault injection)
    /// and build a new provider with [`LockProvider::new`]. Application code does not need
    /// it: a grant taken from the backend directly skips the guard and its release.
    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.backend
    }

    /// The backend behind this provider as its own type `B`, when it is one: how a backend
    /// crate turns any provider of its backend (one from `lockkit::connect`, say) back into its
    /// own provider type with its extras (every built-in backend's provider implements
    /// `TryFrom<LockProvider>` with it).
    pub fn backend_as<B: LockBackend>(&self) -> Option<Arc<B>> {
        let any: Arc<dyn std::any::Any + Send + Sync> = Arc::clone(&self.backend) as _;
        any.downcast::<B>().ok()
    }
}

impl Policy {
    /// The store's identity for `backend`: the `store_id` given, else the backend's.
    pub(crate) fn store_identity(&self, backend: &dyn LockBackend) -> Option<String> {
        match &self.store_id {
            Some(given) => Some(given.to_string()),
            None => backend.store_identity(),
        }
    }
}

/// The shortest maximum hold `backend` accepts.
pub(crate) fn min_max_hold(backend: &dyn LockBackend) -> Duration {
    backend.renewal_interval().unwrap_or(Duration::from_millis(1)).max(Duration::from_millis(1))
}

/// Checks a maximum hold against `backend`'s renewal interval and the longest setting.
pub(crate) fn check_max_hold(backend: &dyn LockBackend, max_hold: Duration) -> Result<Duration> {
    let min = min_max_hold(backend);
    let max = crate::config::MAX_DURATION;
    if max_hold < min || max_hold > max {
        return Err(Error::invalid_config(
            backend.name(),
            format!(
                "max_hold is {max_hold:?}; it must be at least {min:?} (the backend's renewal interval: a shorter maximum would end before the first renewal) and at most {max:?}"
            ),
        ));
    }
    Ok(max_hold)
}

impl fmt::Debug for LockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LockProvider").field(&self.backend).finish()
    }
}
