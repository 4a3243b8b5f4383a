//! [`LockHandle`]: the one implementation of [`DistributedLock`], on top of any
//! [`LockBackend`]. Reentrancy, deadlines, cancellation and the release of dropped guards
//! live here and nowhere else.

use std::fmt;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use async_trait::async_trait;
use tokio::sync::watch;
use tracing::Instrument;

use crate::backend::{AcquireRequest, Grant, HeldLock, LockBackend};
use crate::{AcquireOptions, Deadline, DistributedLock, Error, FencingToken, HoldSignal, LockGuard, LockName, Result};

/// A handle on one named lock, on any backend: one owner, reentrant.
///
/// Obtained from [`LockProvider::lock`](crate::LockProvider::lock) (boxed) or
/// [`LockHandle::new`]. Clones share one owner: a guard taken through one clone is reentered
/// through another.
#[derive(Clone)]
pub struct LockHandle {
    inner: Arc<HandleInner>,
}

pub(crate) struct HandleInner {
    backend: Arc<dyn LockBackend>,
    backend_name: &'static str,
    lock: LockName,
    state: Mutex<HandleState>,
    /// Serialises fresh acquisitions of this handle, so that one owner never asks the store
    /// for a lock twice at once.
    acquiring: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct HandleState {
    active: Option<ActiveHold>,
    /// Completes when the last release of this handle has reached the store.
    releasing: Option<watch::Receiver<bool>>,
}

struct ActiveHold {
    token: FencingToken,
    signal: HoldSignal,
    held: Box<dyn HeldLock>,
    guards: usize,
    /// The runtime the hold was granted on, where a dropped guard's release is spawned.
    runtime: Option<tokio::runtime::Handle>,
}

impl LockHandle {
    /// A handle for `lock` on `backend`.
    pub fn new(backend: Arc<dyn LockBackend>, lock: LockName) -> Self {
        let backend_name = backend.name();
        Self {
            inner: Arc::new(HandleInner {
                backend,
                backend_name,
                lock,
                state: Mutex::default(),
                acquiring: tokio::sync::Mutex::new(()),
            }),
        }
    }

    async fn acquire_inner(&self, deadline: Deadline) -> Result<Option<LockGuard>> {
        if let Some(guard) = self.inner.reenter()? {
            return Ok(Some(guard));
        }
        let Some(_serial) = within(deadline, self.inner.acquiring.lock()).await else {
            return Ok(None);
        };
        // Another task of this owner may have acquired while we queued behind it.
        if let Some(guard) = self.inner.reenter()? {
            return Ok(Some(guard));
        }
        loop {
            let releasing = self.inner.state().releasing.clone();
            if let Some(mut releasing) = releasing {
                // Our own previous hold is still being freed; asking the store now would find
                // it held by ourselves. A closed channel means the release task is gone: go on.
                // Even `try_acquire` waits for this: it is our own hold, not another owner's.
                let own = if deadline == Deadline::Now { Deadline::Never } else { deadline };
                if within(own, releasing.wait_for(|done| *done)).await.is_none() {
                    return Ok(None);
                }
            }
            let request = AcquireRequest::new(self.inner.lock.clone(), deadline);
            // The backend sees the deadline too; dropping its future at the deadline is the
            // backstop, and its cancel safety leaves no trace.
            let granted = match deadline {
                Deadline::At(_) => within(deadline, self.inner.backend.acquire(request)).await.unwrap_or(Ok(None))?,
                Deadline::Now | Deadline::Never => self.inner.backend.acquire(request).await?,
            };
            let Some(grant) = granted else {
                tracing::debug!("not granted");
                return Ok(None);
            };
            if !grant.signal.is_held() {
                // The grant's local deadline passed before it reached us (this process stalled
                // for longer than the lease between the store's grant and now): no guard could
                // promise anything with it. Free it, and ask again while the deadline allows.
                tracing::warn!(token = grant.token.get(), "a grant arrived already expired; asking again");
                grant.signal.release();
                drop(self.inner.start_release(grant.held, None));
                if deadline == Deadline::Now || deadline.has_passed(Instant::now()) {
                    return Ok(None);
                }
                continue;
            }
            // From here to the guard there is no await: a grant cannot be lost to cancellation.
            tracing::debug!(token = grant.token.get(), "granted");
            return Ok(Some(self.inner.install(grant)));
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

impl HandleInner {
    fn state(&self) -> MutexGuard<'_, HandleState> {
        // No code panics while holding this lock; recover the data if a panic ever did.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn lost_error(&self, reason: crate::LossReason) -> Error {
        Error::lost(self.backend_name, &self.lock, reason)
    }

    /// A new guard on the hold this handle already has, if it has one.
    fn reenter(self: &Arc<Self>) -> Result<Option<LockGuard>> {
        let mut state = self.state();
        let Some(active) = state.active.as_mut() else {
            return Ok(None);
        };
        if let Some(reason) = active.signal.loss() {
            return Err(self.lost_error(reason));
        }
        active.guards += 1;
        tracing::debug!(token = active.token.get(), depth = active.guards, "reentered");
        Ok(Some(LockGuard::new(Arc::clone(self), active.token, active.signal.clone())))
    }

    fn install(self: &Arc<Self>, grant: Grant) -> LockGuard {
        let Grant { token, signal, held } = grant;
        let guard = LockGuard::new(Arc::clone(self), token, signal.clone());
        let previous = self.state().active.replace(ActiveHold {
            token,
            signal,
            held,
            guards: 1,
            runtime: tokio::runtime::Handle::try_current().ok(),
        });
        debug_assert!(previous.is_none(), "a handle acquired a lock it already held");
        guard
    }

    /// Called once per guard: forgets it, and when it was the last one hands back the hold
    /// to free.
    pub(crate) fn detach_guard(&self) -> Option<(Box<dyn HeldLock>, Option<tokio::runtime::Handle>)> {
        let mut state = self.state();
        let active = state.active.as_mut()?;
        active.guards = active.guards.saturating_sub(1);
        if active.guards > 0 {
            return None;
        }
        let active = state.active.take()?;
        Some((active.held, active.runtime))
    }

    /// Frees a hold on the store. The returned [`Release`] runs the release inline when
    /// awaited (no task hop on the common path) and finishes it in the background when
    /// dropped unfinished, so that neither cancellation of the caller nor the end of the
    /// guard's scope can leave it half done. The handle's next acquisition waits for it.
    pub(crate) fn start_release(&self, held: Box<dyn HeldLock>, runtime: Option<tokio::runtime::Handle>) -> Release {
        let (done_tx, done_rx) = watch::channel(false);
        self.state().releasing = Some(done_rx);
        let span = tracing::info_span!("lockkit.release", backend = self.backend_name, lock = %self.lock);
        let task = async move {
            let outcome = held.release().await;
            if let Err(error) = &outcome {
                tracing::debug!(%error, "release did not complete cleanly");
            }
            let _ = done_tx.send(true);
            outcome
        }
        .instrument(span);
        Release { task: Some(Box::pin(task)), runtime }
    }
}

/// A release in progress: a future that completes it, and that completes it in the
/// background when dropped before it finished.
pub(crate) struct Release {
    task: Option<Pin<Box<dyn Future<Output = Result<()>> + Send>>>,
    /// The runtime the hold was granted on, used when the drop happens outside any runtime.
    runtime: Option<tokio::runtime::Handle>,
}

impl Future for Release {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(task) = self.task.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let outcome = std::task::ready!(task.as_mut().poll(cx));
        self.task = None;
        Poll::Ready(outcome)
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let Some(mut task) = self.task.take() else {
            return;
        };
        // One poll here sends the release at once (an in-process backend completes in it);
        // whatever remains runs as a task. Spawning onto a runtime that has shut down drops
        // the task without panicking; the store's lease or session expiry then frees the hold.
        let current = tokio::runtime::Handle::try_current().ok();
        let mut first_poll = || task.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        let first = if current.is_some() {
            first_poll()
        } else {
            // Outside any runtime a network backend may panic on its first poll (no timer,
            // no reactor). A guard's drop must never panic, so such a panic is contained
            // here and the hold is left to the store's lease or session expiry.
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(first_poll)) {
                Ok(poll) => poll,
                Err(_) => {
                    tracing::warn!(
                        "a release could not start outside a runtime; the store will free the hold when its lease ends"
                    );
                    return;
                }
            }
        };
        if first.is_pending() {
            match current.or_else(|| self.runtime.take()) {
                Some(runtime) => drop(runtime.spawn(async move { drop(task.await) })),
                None => tracing::warn!(
                    "a guard was dropped outside any runtime; the store will free the hold when its lease ends"
                ),
            }
        }
    }
}

impl fmt::Debug for LockHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockHandle")
            .field("backend", &self.inner.backend_name)
            .field("lock", &self.inner.lock)
            .field("held", &self.is_held())
            .finish()
    }
}

#[async_trait]
impl DistributedLock for LockHandle {
    fn name(&self) -> &LockName {
        &self.inner.lock
    }

    fn backend_name(&self) -> &'static str {
        self.inner.backend_name
    }

    fn is_held(&self) -> bool {
        self.inner.state().active.as_ref().is_some_and(|active| active.signal.is_held())
    }

    async fn acquire_with(&self, options: AcquireOptions) -> Result<Option<LockGuard>> {
        let deadline = Deadline::from_wait(options.wait, Instant::now());
        let span = tracing::info_span!(
            "lockkit.acquire",
            backend = self.inner.backend_name,
            lock = %self.inner.lock,
            wait = ?options.wait,
        );
        self.acquire_inner(deadline).instrument(span).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::{Capabilities, LockProvider};

    /// Grants with a lease that has already run out for its first `expired` grants (as if the
    /// process stalled between the store's grant and its return), then live ones.
    #[derive(Debug, Default)]
    struct StallingBackend {
        expired: usize,
        granted: AtomicUsize,
        released: Arc<AtomicUsize>,
    }

    struct Held(Arc<AtomicUsize>);

    #[async_trait]
    impl HeldLock for Held {
        async fn release(self: Box<Self>) -> Result<()> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
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

        async fn acquire(&self, request: AcquireRequest) -> Result<Option<Grant>> {
            let n = self.granted.fetch_add(1, Ordering::SeqCst);
            let valid_until = if n < self.expired { Instant::now() } else { Instant::now() + Duration::from_secs(60) };
            let signal = HoldSignal::new("stalling", request.lock, Some(valid_until));
            let token = FencingToken::new(u64::try_from(n).unwrap() + 1);
            Ok(Some(Grant::new(token, signal, Box::new(Held(Arc::clone(&self.released))))))
        }
    }

    #[derive(Debug)]
    struct Provider(Arc<StallingBackend>);

    impl LockProvider for Provider {
        fn backend(&self) -> Arc<dyn LockBackend> {
            self.0.clone()
        }
    }

    #[tokio::test]
    async fn a_grant_that_arrives_expired_is_freed_and_asked_again() {
        let backend = Arc::new(StallingBackend { expired: 2, ..StallingBackend::default() });
        let provider = Provider(Arc::clone(&backend));
        let guard = provider.lock("x").unwrap().acquire().await.unwrap();
        assert!(guard.is_held(), "the guard handed out is live");
        assert_eq!(guard.token(), FencingToken::new(3), "the two expired grants were not handed out");
        assert_eq!(backend.released.load(Ordering::SeqCst), 2, "both expired grants were freed");
        guard.release().await.unwrap();
    }

    #[tokio::test]
    async fn try_acquire_with_an_expired_grant_returns_none() {
        let backend = Arc::new(StallingBackend { expired: 1, ..StallingBackend::default() });
        let provider = Provider(Arc::clone(&backend));
        let lock = provider.lock("x").unwrap();
        assert!(lock.try_acquire().await.unwrap().is_none());
        assert_eq!(backend.released.load(Ordering::SeqCst), 1);
        assert!(lock.try_acquire().await.unwrap().is_some_and(|guard| guard.is_held()));
    }
}
