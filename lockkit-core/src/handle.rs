//! [`LockHandle`]: the one acquisition path, on top of any [`LockBackend`], for every kind of
//! hold. Deadlines, cancellation, kind checks and the wait for the handle's own releases
//! live here and nowhere else.

use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::backend::{AcquireRequest, Deadline, Grant, LockBackend, deadline_after};
use crate::guard::Hold;
use crate::handle_inner::HandleInner;
use crate::metrics::{AcquireTimer, Labels, Outcome};
use crate::provider::{Policy, check_max_hold};
use crate::{AcquireOptions, Error, HoldKind, LockGuard, LockId, LockName, Result, StoreId, Wait};

/// A handle on one named lock: a cheap, cloneable factory of acquisitions.
///
/// Obtained from [`LockProvider::lock`](crate::LockProvider::lock). **Every acquisition is
/// its own owner**: tasks that share a handle (or clones of it) exclude each other exactly
/// as processes do, each with its own fencing token, so `Arc<LockHandle>` or a clone per
/// task is the natural way to share one. Reentry goes through the guard
/// ([`LockGuard::reenter`]).
///
/// # Behavior
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
/// - Each acquisition carries a fencing token strictly greater than every earlier one.
/// - A kind of hold the backend does not declare is refused with [`Error::Unsupported`].
/// - A hold acquired with a maximum hold ([`AcquireOptions::with_max_hold`]) is signalled
///   lost with [`LossReason::MaxHoldReached`](crate::LossReason::MaxHoldReached) at its cap,
///   and another owner acquires it after the lease, with a greater token.
/// - A maximum hold below the backend's renewal interval is refused with
///   [`Error::InvalidConfig`] naming the minimum.
#[derive(Clone)]
pub struct LockHandle {
    inner: Arc<HandleInner>,
}

impl LockHandle {
    /// A handle for holds of `kind` on `lock`, once the caller checked the backend grants it.
    pub(crate) fn new(backend: Arc<dyn LockBackend>, lock: LockName, kind: HoldKind, policy: Arc<Policy>) -> Self {
        let backend_name = backend.name();
        let labels = Labels::new(backend_name, &kind, &lock, policy.metrics_prefix.as_ref());
        let releases = std::sync::OnceLock::new();
        Self { inner: Arc::new(HandleInner { backend, lock, kind, releases, policy, labels }) }
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.inner.lock
    }

    /// The kind of hold this handle acquires.
    pub fn kind(&self) -> &HoldKind {
        &self.inner.kind
    }

    /// The backend's short name, as used in errors.
    pub fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }

    /// The store this lock lives in: the backend's name and address, and for a backend
    /// without an address (the memory backend) the client itself.
    /// [`MultiLock`](crate::MultiLock) orders locks by it.
    pub fn store(&self) -> StoreId {
        StoreId::new(self.inner.backend_name(), self.inner.store_identity(), self.inner.instance())
    }

    /// The lock's identity, as a fenced resource is bound to it: the store's identity
    /// ([`LockProvider::store_identity`](crate::LockProvider::store_identity)) and the name.
    /// [`LockGuard::fence`] carries it with the token.
    pub fn lock_id(&self) -> LockId {
        self.inner.lock_id()
    }

    /// Waits as long as it takes for the lock.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] for a kind the backend does not grant; connection and store
    /// errors that the backend does not retry past (a backend retries transient ones while
    /// it may wait).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves nothing queued or held in the store; a hold
    /// granted while it was being dropped is freed in the background.
    pub async fn acquire(&self) -> Result<LockGuard> {
        match self.acquire_with(AcquireOptions::default()).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::backend(
                self.backend_name(),
                Some(self.name()),
                "the backend gave up an acquisition that was allowed to wait forever",
            )),
        }
    }

    /// Waits at most `timeout` for the lock. A zero timeout asks once and does not wait.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when it was not granted in time; nothing is left queued. When the
    /// store could not be reached at the end of the wait, the timeout carries that failure
    /// as its source and [`Error::is_connect`] is true. Otherwise as for
    /// [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime with the time driver enabled, as every Tokio timer.
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<LockGuard> {
        match self.acquire_with(AcquireOptions::default().with_timeout(timeout)).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::timeout(self.backend_name(), self.name(), timeout, None)),
        }
    }

    /// Takes the lock if no other owner holds it (or is queued for it); never waits on
    /// another owner.
    ///
    /// It does wait for this handle's own releases that began before it (a guard of this
    /// handle dropped just before, whose release is on its way to the store): that hold is
    /// this handle's own going away, not another owner's, and without the wait a drop followed
    /// by `try_acquire` would fail against itself. The wait is at most the rest of a release
    /// already under way (a round trip; none for an in-process store, whose dropped guards are
    /// freed before `drop` returns); releases that begin later are not waited for.
    ///
    /// # Errors
    ///
    /// As for [`acquire`](Self::acquire), with no retry of transient errors.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.acquire_with(AcquireOptions::no_wait()).await
    }

    /// Acquires with explicit options; the other methods are shorthands for it. `Ok(None)`
    /// when other owners held the lock for the whole allowed wait.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when the allowed wait ended while the store could not be reached
    /// (the failure is its source); [`Error::InvalidConfig`] for a maximum hold below the
    /// backend's renewal interval
    /// ([`LockProvider::min_max_hold`](crate::LockProvider::min_max_hold)); otherwise as for
    /// [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_with(&self, options: AcquireOptions) -> Result<Option<LockGuard>> {
        let span = tracing::info_span!(
            "lockkit.acquire",
            backend = self.inner.backend_name(),
            lock = %self.inner.lock,
            kind = ?self.inner.kind,
            wait = ?options.wait,
        );
        let timer = AcquireTimer::start(&self.inner.labels);
        // Not granted without waiting is `busy`; after a wait, a timeout.
        let busy = matches!(options.wait, Wait::No) || matches!(options.wait, Wait::Timeout(t) if t.is_zero());
        let outcome = self.acquire_inner(options).instrument(span).await.map_err(|error| self.inner.describe(error));
        timer.finish(match &outcome {
            Ok(Some(_)) => Outcome::Granted,
            Ok(None) if busy => Outcome::Busy,
            Ok(None) | Err(Error::Timeout { .. }) => Outcome::Timeout,
            Err(_) => Outcome::Error,
        });
        outcome
    }

    async fn acquire_inner(&self, options: AcquireOptions) -> Result<Option<LockGuard>> {
        // An acquisition that completes without waiting (an in-process store, a free lock)
        // touches no Tokio resource, so a loop of them would never yield: take from the
        // task's cooperative budget, as Tokio's own resources do.
        tokio::task::consume_budget().await;
        let inner = &self.inner;
        let wait = options.wait;
        let deadline = Deadline::from_wait(wait, Instant::now());
        if !inner.kind.is_supported_by(&inner.backend.capabilities()) {
            return Err(Error::unsupported(inner.backend_name(), Some(&inner.lock), inner.kind.describe()));
        }
        // The provider's default was checked when it was set.
        let max_hold = match options.max_hold {
            Some(max_hold) => Some(check_max_hold(&*inner.backend, max_hold)?),
            None => inner.policy.max_hold,
        };
        let mark = inner.release_mark();
        if !inner.releases_settled(mark) {
            // A release of this handle's guards is still on its way to the store; asking now
            // could find that hold in the way. Even `try_acquire` waits for it: it is a hold
            // this handle already gave up, not another owner's.
            let own = if deadline == Deadline::Now { Deadline::Never } else { deadline };
            if within(own, inner.releases_settle(mark)).await.is_none() {
                return Ok(None);
            }
        }
        loop {
            let request = AcquireRequest::new(inner.lock.clone(), inner.kind.clone(), deadline).with_max_hold(max_hold);
            // The backend sees the deadline too; dropping its future at the deadline is the
            // backstop, and its cancel safety leaves no trace.
            let granted = match deadline {
                Deadline::At(at) => match within(deadline, inner.backend.acquire(request.clone())).await {
                    // A retryable failure returned at the deadline itself is why the wait ended:
                    // it becomes the timeout's source, as a failure noted on the way would.
                    Some(Err(error)) if error.is_retryable() && Instant::now() >= at => {
                        request.note_failure(error);
                        None
                    }
                    Some(outcome) => outcome?,
                    None => None,
                },
                Deadline::Now | Deadline::Never => inner.backend.acquire(request.clone()).await?,
            };
            let Some(grant) = granted else {
                tracing::debug!("not granted");
                return match (request.take_failure(), wait) {
                    (Some(failure), Wait::Timeout(waited)) => {
                        Err(Error::timeout(inner.backend_name(), &inner.lock, waited, Some(failure)))
                    }
                    _ => Ok(None),
                };
            };
            if !grant.signal.is_held() {
                // The grant's local deadline passed before it reached us (this process stalled
                // for longer than the lease between the store's grant and now): no guard could
                // promise anything with it. Free it, and ask again while the deadline allows.
                tracing::warn!(token = grant.token.get(), "a grant arrived already expired; asking again");
                grant.signal.release();
                inner.start_release(grant.held).finish_in_background();
                if deadline == Deadline::Now || deadline.has_passed(Instant::now()) {
                    return Ok(None);
                }
                continue;
            }
            // From here to the guard there is no await: a grant cannot be lost to cancellation.
            tracing::debug!(token = grant.token.get(), "granted");
            let Grant { token, signal, held } = grant;
            signal.attach_labels(&inner.labels);
            if let Some(max_hold) = max_hold {
                // Counted from the grant's arrival: renewal never extends the hold past it.
                signal.cap_at(deadline_after(Instant::now(), max_hold));
            }
            return Ok(Some(Hold::first_guard(Arc::clone(inner), token, signal, held)));
        }
    }
}

/// Runs `future` until `deadline`; `None` when the deadline came first. With
/// [`Deadline::Now`] the future gets exactly one poll.
async fn within<F: Future>(deadline: Deadline, future: F) -> Option<F::Output> {
    match deadline {
        Deadline::Never => Some(future.await),
        Deadline::At(at) => tokio::time::timeout_at(at.into(), future).await.ok(),
        Deadline::Now => {
            let mut future = pin!(future);
            std::future::poll_fn(|cx| match future.as_mut().poll(cx) {
                Poll::Ready(output) => Poll::Ready(Some(output)),
                Poll::Pending => Poll::Ready(None),
            })
            .await
        }
    }
}

impl fmt::Debug for LockHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockHandle")
            .field("backend", &self.inner.backend_name())
            .field("lock", &self.inner.lock)
            .field("kind", &self.inner.kind)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::backend::{HeldLock, LockInfo};
    use crate::{Capabilities, FencingToken, HoldSignal, LockProvider};

    /// Grants with a lease that has already run out for its first `expired` grants (as if the
    /// process stalled between the store's grant and its return), then live ones; fails with
    /// a connection error while `unreachable` is set.
    #[derive(Debug, Default)]
    struct StallingBackend {
        expired: usize,
        unreachable: bool,
        granted: AtomicUsize,
        released: Arc<AtomicUsize>,
    }

    struct Held(Arc<AtomicUsize>);

    /// An in-process hold: freed at once, even when its guard is dropped.
    #[async_trait]
    impl HeldLock for Held {
        async fn release(self: Box<Self>) -> Result<()> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }

        fn release_at_once(&mut self) -> Option<Result<()>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Some(Ok(()))
        }
    }

    #[async_trait]
    impl LockBackend for StallingBackend {
        fn name(&self) -> &'static str {
            "stalling"
        }

        fn capabilities(&self) -> Capabilities {
            Capabilities::NONE
        }

        fn address(&self) -> Option<String> {
            Some("stall://here".to_owned())
        }

        async fn acquire(&self, request: AcquireRequest) -> Result<Option<Grant>> {
            if self.unreachable {
                loop {
                    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
                    request.note_failure(Error::connection("stalling", Some(&request.lock), refused));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            let n = self.granted.fetch_add(1, Ordering::SeqCst);
            let valid_until = if n < self.expired { Instant::now() } else { Instant::now() + Duration::from_secs(60) };
            let signal = HoldSignal::new("stalling", request.lock, Some(valid_until));
            let token = FencingToken::new(u64::try_from(n).unwrap() + 1);
            Ok(Some(Grant::new(token, signal, Box::new(Held(Arc::clone(&self.released))))))
        }

        async fn inspect(&self, _lock: &LockName) -> Result<LockInfo> {
            Ok(LockInfo::default())
        }
    }

    fn provider(backend: StallingBackend) -> (LockProvider, Arc<StallingBackend>) {
        let backend = Arc::new(backend);
        (LockProvider::new(backend.clone()), backend)
    }

    /// A loop of acquisitions that never wait (an in-process store) still yields to the other
    /// tasks of a single-threaded runtime, as a loop on a Tokio resource would.
    #[test]
    fn a_loop_of_uncontended_acquisitions_lets_other_tasks_run() {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let lock = crate::memory::MemoryLockProvider::new().lock("hot").unwrap();
                let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let looping = {
                    let stop = Arc::clone(&stop);
                    tokio::spawn(async move {
                        while !stop.load(Ordering::SeqCst) {
                            lock.acquire().await.unwrap().release().await.unwrap();
                        }
                    })
                };
                tokio::time::sleep(Duration::from_millis(20)).await;
                stop.store(true, Ordering::SeqCst);
                looping.await.unwrap();
            });
            let _ = done_tx.send(());
        });
        assert!(done_rx.recv_timeout(Duration::from_secs(10)).is_ok(), "the timer task never ran");
    }

    #[tokio::test]
    async fn a_grant_that_arrives_expired_is_freed_and_asked_again() {
        let (provider, backend) = provider(StallingBackend { expired: 2, ..StallingBackend::default() });
        let guard = provider.lock("x").unwrap().acquire().await.unwrap();
        assert!(guard.is_held(), "the guard handed out is live");
        assert_eq!(guard.token(), FencingToken::new(3), "the two expired grants were not handed out");
        assert_eq!(backend.released.load(Ordering::SeqCst), 2, "both expired grants were freed");
        guard.release().await.unwrap();
    }

    #[tokio::test]
    async fn try_acquire_with_an_expired_grant_returns_none() {
        let (provider, backend) = provider(StallingBackend { expired: 1, ..StallingBackend::default() });
        let lock = provider.lock("x").unwrap();
        assert!(lock.try_acquire().await.unwrap().is_none());
        assert_eq!(backend.released.load(Ordering::SeqCst), 1);
        assert!(lock.try_acquire().await.unwrap().is_some_and(|guard| guard.is_held()));
    }

    #[tokio::test]
    async fn a_timeout_against_an_unreachable_store_says_so() {
        let (provider, _) = provider(StallingBackend { unreachable: true, ..StallingBackend::default() });
        let error = provider.lock("x").unwrap().acquire_timeout(Duration::from_millis(50)).await.unwrap_err();
        assert!(error.is_timeout() && error.is_connect(), "{error}");
        assert!(error.to_string().contains("unreachable"), "{error}");
        let source = std::error::Error::source(&error).unwrap().to_string();
        assert!(source.contains("stall://here"), "the source names the store: {source}");
    }

    #[tokio::test]
    async fn breaking_on_a_backend_that_cannot_is_unsupported() {
        let (provider, _) = provider(StallingBackend::default());
        let refused = provider.break_lock("x").await.unwrap_err();
        assert!(matches!(refused, Error::Unsupported { .. }), "{refused}");
        assert!(refused.to_string().contains("breaking a lock"), "{refused}");
        assert!(matches!(provider.break_lock("").await, Err(Error::InvalidName { .. })));
    }

    #[tokio::test]
    async fn an_undeclared_kind_is_unsupported() {
        let (provider, backend) = provider(StallingBackend::default());
        let refused = provider.handle("x", HoldKind::Read).unwrap_err();
        assert!(matches!(refused, Error::Unsupported { .. }), "{refused}");
        assert!(refused.to_string().contains("a read hold"), "{refused}");
        assert_eq!(backend.granted.load(Ordering::SeqCst), 0, "the backend was never asked");
    }

    #[tokio::test]
    async fn reentered_guards_share_the_hold_and_the_last_one_frees_it() {
        let (provider, backend) = provider(StallingBackend::default());
        let outer = provider.lock("x").unwrap().acquire().await.unwrap();
        let inner = outer.reenter().unwrap();
        assert_eq!(inner.token(), outer.token());
        outer.release().await.unwrap();
        assert!(inner.is_held());
        assert_eq!(backend.released.load(Ordering::SeqCst), 0, "a guard of the hold remains");
        drop(inner);
        assert_eq!(backend.released.load(Ordering::SeqCst), 1, "an in-process release completes inline");
    }
}
