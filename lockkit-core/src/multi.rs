//! [`MultiLock`]: several locks taken all or nothing, in one canonical order, with one
//! deadline; and the [`MultiGuard`] that holds them.

use std::cmp::Ordering;
use std::fmt;
use std::time::{Duration, Instant};

use futures_util::future::select_all;
use tracing::Instrument;

use crate::backend::Deadline;
use crate::{
    AcquireOptions, DistributedLock, Error, FencingToken, LockGuard, LockHandle, LockName, LossReason, Result, Wait,
};

/// The store a lock lives in, as [`MultiLock`] orders it: the backend's short name, the
/// store's address (without credentials), and for a backend that has no address, the client
/// itself.
///
/// Two handles on one name are the same lock when their `StoreId`s are equal. The order is
/// by backend name, then address, then (only between stores without an address, which live
/// in one process) the client's identity in this process: every process that reaches the
/// same stores orders their locks the same way, which is what keeps two multi-locks from
/// deadlocking each other.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StoreId {
    backend: &'static str,
    address: Option<String>,
    /// The client's identity in this process; compared only when there is no address.
    instance: usize,
}

impl StoreId {
    /// The store of `backend` at `address`; `instance` tells apart clients of stores without
    /// an address (it is ignored when there is one).
    pub fn new(backend: &'static str, address: Option<String>, instance: usize) -> Self {
        let instance = if address.is_some() { 0 } else { instance };
        Self { backend, address, instance }
    }

    /// The store of a [`DistributedLock`] implementation that does not say which: one
    /// anonymous store, so that names given twice are still refused.
    pub fn unknown() -> Self {
        Self { backend: "unknown", address: None, instance: 0 }
    }

    /// The backend's short name.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The store's address, when the backend has one.
    pub fn address(&self) -> Option<&str> {
        self.address.as_deref()
    }
}

impl PartialOrd for StoreId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for StoreId {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.backend, &self.address, self.instance).cmp(&(other.backend, &other.address, other.instance))
    }
}

impl fmt::Display for StoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.address {
            Some(address) => write!(f, "{} store {address}", self.backend),
            None => write!(f, "{} store", self.backend),
        }
    }
}

/// Several locks, acquired all or nothing: a transfer that must hold two accounts, a job
/// that must hold every input it reads.
///
/// The locks may come from one provider or from several (of one backend or of different
/// ones). They are always acquired in one canonical order, by [`StoreId`] and then by name,
/// whatever order they were given in, so two multi-locks over the same names never wait on
/// each other in a cycle.
///
/// # Behavior
///
/// Every bullet is a conformance case of `lockkit-testkit` (group `multi`, named in brackets).
///
/// - All or nothing: when one lock is not granted before the one deadline, the locks taken
///   so far are released before the call returns, and none is held afterwards
///   (`multi_lock_is_all_or_nothing`).
/// - Two multi-locks over the same names given in opposite orders both complete: no deadlock
///   (`multi_locks_in_opposite_order_do_not_deadlock`).
/// - A failed or timed-out acquisition leaves no trace in any store
///   (`multi_lock_rollback_leaves_no_trace`).
/// - Dropping an acquisition future at any point leaves no trace: the guards taken so far are
///   dropped with it, and their releases run in the background as for any dropped guard
///   (`dropped_multi_lock_acquisition_leaves_no_trace`).
/// - The same name twice on one store is refused by [`MultiLock::new`], before anything is
///   acquired (`multi_lock_refuses_a_name_given_twice`).
/// - The [`MultiGuard`]'s [`lost`](MultiGuard::lost) fires on the first loss of any of its
///   holds and names that lock (`multi_guard_signals_the_first_loss`).
///
/// ```
/// use std::time::Duration;
/// use lockkit_core::MultiLock;
/// use lockkit_core::memory::MemoryLockProvider;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lockkit_core::Result<()> {
/// let provider = MemoryLockProvider::new();
/// let transfer = MultiLock::new([provider.lock("accounts/7")?, provider.lock("accounts/3")?])?;
/// let guard = transfer.acquire_timeout(Duration::from_secs(5)).await?;
/// for (name, token) in guard.tokens() {
///     println!("{name}: write with token {token}");
/// }
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct MultiLock<L: DistributedLock = LockHandle> {
    /// The locks in canonical order.
    locks: Vec<L>,
}

impl<L: DistributedLock> MultiLock<L> {
    /// A multi-lock over `locks`, in any order. An empty set is allowed: it is granted at once,
    /// and its guard is never lost.
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] when one name is given twice on one store (two read handles of one
    /// read-write lock included): the second acquisition would be another owner waiting for
    /// the first forever.
    pub fn new(locks: impl IntoIterator<Item = L>) -> Result<Self> {
        let mut keyed: Vec<(StoreId, L)> = locks.into_iter().map(|lock| (lock.store(), lock)).collect();
        keyed.sort_by(|(a_store, a), (b_store, b)| a_store.cmp(b_store).then_with(|| a.name().cmp(b.name())));
        let twice = keyed.windows(2).find_map(|pair| match pair {
            [(a_store, a), (b_store, b)] if a_store == b_store && a.name() == b.name() => Some((a_store, a.name())),
            _ => None,
        });
        if let Some((store, name)) = twice {
            return Err(Error::conflict(
                store.backend(),
                Some(name),
                format!(
                    "the lock is given twice to one multi-lock ({store}); each lock may appear once, as a second acquisition of it would wait for the first forever"
                ),
            ));
        }
        Ok(Self { locks: keyed.into_iter().map(|(_, lock)| lock).collect() })
    }

    /// The locks, in the order they are acquired.
    pub fn locks(&self) -> &[L] {
        &self.locks
    }

    /// Waits as long as it takes for every lock.
    ///
    /// # Errors
    ///
    /// As for [`LockHandle::acquire`], for the first lock that fails; the locks taken before
    /// it are released first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the guards taken so far (their releases finish
    /// in the background) and the acquisition in flight (which leaves no trace).
    pub async fn acquire(&self) -> Result<MultiGuard> {
        match self.acquire_with(AcquireOptions::default()).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::backend(
                "lockkit",
                self.locks.first().map(DistributedLock::name),
                "a multi-lock acquisition that was allowed to wait forever was given up",
            )),
        }
    }

    /// Waits at most `timeout` for all the locks together: one deadline for the whole set.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] naming the first lock not granted in time; the locks taken before
    /// it are released before this returns. Otherwise as for [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<MultiGuard> {
        let options = AcquireOptions::default().with_timeout(timeout);
        match self.acquire_all(options).await {
            Ok(guard) => Ok(guard),
            Err(Refused::Busy { backend, lock }) => Err(Error::timeout(backend, &lock, timeout, None)),
            Err(Refused::Failed(error)) => Err(error),
        }
    }

    /// Takes every lock if none is held by another owner; never waits on another owner.
    /// `Ok(None)` (holding none of them) when one is held.
    ///
    /// # Errors
    ///
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire(&self) -> Result<Option<MultiGuard>> {
        self.acquire_with(AcquireOptions::no_wait()).await
    }

    /// Acquires with explicit options; the wait is one deadline for the whole set. `Ok(None)`
    /// (holding none of the locks) when one was not granted in time.
    ///
    /// # Errors
    ///
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_with(&self, options: AcquireOptions) -> Result<Option<MultiGuard>> {
        match self.acquire_all(options).await {
            Ok(guard) => Ok(Some(guard)),
            Err(Refused::Busy { .. }) => Ok(None),
            Err(Refused::Failed(error)) => Err(error),
        }
    }

    async fn acquire_all(&self, options: AcquireOptions) -> Result<MultiGuard, Refused> {
        let span = tracing::info_span!("lockkit.multi_acquire", locks = self.locks.len(), wait = ?options.wait);
        self.acquire_in_order(options).instrument(span).await
    }

    async fn acquire_in_order(&self, options: AcquireOptions) -> Result<MultiGuard, Refused> {
        let deadline = Deadline::from_wait(options.wait, Instant::now());
        // Dropping this future drops `held`: every guard taken so far is released in the
        // background by its own Drop, exactly as a dropped guard is.
        let mut held: Vec<LockGuard> = Vec::with_capacity(self.locks.len());
        for lock in &self.locks {
            let wait = match deadline {
                Deadline::Now => Wait::No,
                Deadline::Never => Wait::Forever,
                Deadline::At(at) => Wait::Timeout(at.saturating_duration_since(Instant::now())),
            };
            let outcome = lock.acquire_with(options.clone().with_wait(wait)).await;
            match outcome {
                Ok(Some(guard)) => held.push(guard),
                Ok(None) => {
                    roll_back(held).await;
                    let backend = lock.store().backend();
                    return Err(Refused::Busy { backend, lock: lock.name().clone() });
                }
                Err(error) => {
                    roll_back(held).await;
                    return Err(Refused::Failed(error));
                }
            }
        }
        Ok(MultiGuard { guards: held })
    }
}

/// Why an acquisition of the whole set did not succeed.
enum Refused {
    /// `lock` was held by another owner for the whole allowed wait.
    Busy {
        backend: &'static str,
        lock: LockName,
    },
    Failed(Error),
}

/// Releases the guards of a failed acquisition, the last taken first. A failure to release
/// is logged: the lease or session frees such a lock, and the caller's error is the one that
/// matters.
async fn roll_back(held: Vec<LockGuard>) {
    for guard in held.into_iter().rev() {
        let name = guard.name().clone();
        if let Err(error) = guard.release().await {
            tracing::warn!(lock = %name, %error, "a multi-lock could not release a lock it took before failing");
        }
    }
}

/// The guards of a [`MultiLock`], held together.
///
/// [`lost`](Self::lost) fires on the first loss of any of them; [`tokens`](Self::tokens)
/// gives the fencing token of each lock to send with the writes it protects. Dropping the
/// multi-guard drops every guard (each released promptly in the background); call
/// [`release`](Self::release) to free them at once and learn the outcome.
#[must_use = "dropping the guard releases the locks"]
pub struct MultiGuard {
    /// In the canonical order of the multi-lock.
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// The guards, in the order they were acquired.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The guards, to release or keep one by one.
    pub fn into_guards(self) -> Vec<LockGuard> {
        self.guards
    }

    /// Each lock's name with its fencing token, in the order they were acquired.
    pub fn tokens(&self) -> impl Iterator<Item = (&LockName, FencingToken)> + '_ {
        self.guards.iter().map(|guard| (guard.name(), guard.token()))
    }

    /// The fencing token of the lock called `name` (of the first store that has one by that
    /// name).
    pub fn token(&self, name: &str) -> Option<FencingToken> {
        self.guards.iter().find(|guard| guard.name().as_str() == name).map(LockGuard::token)
    }

    /// Whether every hold is still guaranteed.
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// The earliest local deadline of the holds: until then every one is guaranteed. `None`
    /// when no hold has a lease.
    pub fn valid_until(&self) -> Option<Instant> {
        self.guards.iter().filter_map(LockGuard::valid_until).min()
    }

    /// Resolves on the first loss of any of the holds, with the lock and the reason; at once
    /// when one is already lost. Never resolves for an empty set.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future changes nothing.
    ///
    /// # Panics
    ///
    /// When polled outside a Tokio runtime with the time driver enabled, as every Tokio timer.
    pub async fn lost(&self) -> (LockName, LossReason) {
        if self.guards.is_empty() {
            return std::future::pending().await;
        }
        let watches = self.guards.iter().map(|guard| {
            let (name, watcher) = (guard.name().clone(), guard.watcher());
            Box::pin(async move { (name, watcher.lost().await) })
        });
        select_all(watches).await.0
    }

    /// Releases every lock, the last acquired first, and reports the first failure (after
    /// trying them all).
    ///
    /// # Errors
    ///
    /// As for [`LockGuard::release`]: [`Error::LockLost`] for a hold that had been lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the locks not yet released when the future is dropped are released in
    /// the background.
    pub async fn release(self) -> Result<()> {
        let mut first = None;
        for guard in self.guards.into_iter().rev() {
            if let Err(error) = guard.release().await {
                first.get_or_insert(error);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.guards).finish()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::memory::{MemoryLockProvider, MemoryStore};

    #[tokio::test]
    async fn locks_are_ordered_by_store_then_name_whatever_the_input_order() {
        let store = MemoryStore::new();
        let client = store.client();
        let forward = MultiLock::new([client.lock("a").unwrap(), client.lock("b").unwrap()]).unwrap();
        let backward = MultiLock::new([client.lock("b").unwrap(), client.lock("a").unwrap()]).unwrap();
        let names = |m: &MultiLock| m.locks().iter().map(|l| l.name().as_str().to_owned()).collect::<Vec<_>>();
        assert_eq!(names(&forward), ["a", "b"]);
        assert_eq!(names(&backward), ["a", "b"]);
    }

    #[test]
    fn stores_with_an_address_are_ordered_by_it_alone() {
        let a = StoreId::new("redis", Some("redis://a:1".into()), 7);
        let b = StoreId::new("redis", Some("redis://a:1".into()), 9);
        assert_eq!(a, b, "two clients of one server are one store");
        let c = StoreId::new("redis", Some("redis://b:1".into()), 1);
        let z = StoreId::new("zk", Some("zk://a:1".into()), 0);
        assert!(a < c && c < z);
        assert_ne!(StoreId::new("memory", None, 1), StoreId::new("memory", None, 2));
    }

    #[tokio::test]
    async fn a_name_given_twice_is_refused_before_anything_is_acquired() {
        let client = MemoryLockProvider::new();
        let twice = MultiLock::new([client.lock("x").unwrap(), client.lock("y").unwrap(), client.lock("x").unwrap()]);
        let error = twice.unwrap_err();
        assert!(matches!(error, Error::Conflict { .. }), "{error}");
        assert!(error.to_string().contains("given twice"), "{error}");
        assert!(client.inspect("x").await.unwrap().is_idle());
        // The same name on two stores is two locks.
        let other = MemoryLockProvider::new();
        assert!(MultiLock::new([client.lock("x").unwrap(), other.lock("x").unwrap()]).is_ok());
    }

    #[tokio::test]
    async fn a_dropped_acquisition_leaves_no_hold_behind() {
        let store = MemoryStore::new();
        let (mine, theirs) = (store.client(), store.client());
        let blocker = theirs.lock("b").unwrap().acquire().await.unwrap();
        let multi = MultiLock::new([mine.lock("a").unwrap(), mine.lock("b").unwrap()]).unwrap();
        {
            let pending = multi.acquire();
            // Wait until the first lock is held and the second is queued, then drop.
            let mut pending = std::pin::pin!(pending);
            let waited = tokio::time::timeout(Duration::from_secs(5), async {
                loop {
                    tokio::select! {
                        _ = &mut pending => panic!("granted while another holds b"),
                        () = tokio::time::sleep(Duration::from_millis(5)) => {}
                    }
                    if mine.inspect("b").await.unwrap().waiters == Some(1) {
                        break;
                    }
                }
            });
            waited.await.unwrap();
            assert!(!mine.inspect("a").await.unwrap().is_idle(), "a was taken before b was asked");
        }
        // The in-process release of the dropped guard completes inline.
        for name in ["a", "b"] {
            let info = mine.inspect(name).await.unwrap();
            assert!(name == "b" || info.is_idle(), "{name}: {info:?}");
            assert_eq!(info.waiters.unwrap_or(0), 0, "{name}: no waiter left");
        }
        blocker.release().await.unwrap();
        assert!(theirs.lock("a").unwrap().try_acquire().await.unwrap().is_some());
    }

    #[tokio::test]
    async fn the_first_loss_fires_and_tokens_are_exposed() {
        let store = MemoryStore::new();
        let client = store.client();
        let multi = MultiLock::new([client.lock("p").unwrap(), client.lock("q").unwrap()]).unwrap();
        let guard = multi.try_acquire().await.unwrap().unwrap();
        assert_eq!(guard.tokens().count(), 2);
        assert!(guard.token("q").unwrap() > guard.token("p").unwrap());
        assert!(store.delete_record("q"));
        let (name, reason) = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.unwrap();
        assert_eq!((name.as_str(), reason), ("q", LossReason::RecordGone));
        assert!(!guard.is_held());
        assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
        assert!(client.inspect("p").await.unwrap().is_idle(), "the other lock is released too");
    }
}
