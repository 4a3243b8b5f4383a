//! Releases that always reach the store: inline when awaited, on lockkit's home runtime when a
//! guard is dropped, never panicking.
//!
//! A [`Release`] owns a backend's [`HeldLock`] until it runs. Where it runs:
//!
//! 1. Awaited (`LockGuard::release`): inline, on the caller's task, with no task hop.
//! 2. Dropped (a guard dropped in async code, on a plain thread, after its runtime shut
//!    down): at once where the backend can free a hold without awaiting (an in-process store,
//!    [`HeldLock::release_at_once`]); otherwise sent, unstarted, to the home runtime
//!    ([`crate::home`]), which nothing but lockkit drives and which never shuts down. So the
//!    release reaches the store whatever happens to the runtime the guard was dropped on, or
//!    the one that granted it.
//!
//! A release keeps the backend alive until it has run: a guard dropped after every handle and
//! the provider were dropped still frees its lock. A release future is only ever polled on
//! one runtime: an awaited release whose future is dropped unfinished finishes on the runtime
//! it started on (and the handle's later acquisitions no longer wait for it, as that runtime
//! may never be driven again). Nothing here polls a future outside a runtime, so nothing here
//! can panic for want of one.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::runtime::Handle;
use tracing::Instrument;

use crate::Result;
use crate::backend::{HeldLock, LockBackend};

type ReleaseFuture = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// A release of one hold, as a future that runs it and a value that finishes it in the
/// background when dropped unfinished.
pub(crate) struct Release {
    state: State,
    span: tracing::Span,
    /// The backend, kept alive until the release has run.
    backend: Option<Arc<dyn LockBackend>>,
    /// Keeps the handle's next acquisition waiting until this release is over.
    ticket: Option<Ticket>,
    /// Whether this release was sent to run in the background already (it is not sent twice).
    sent: bool,
}

enum State {
    Unstarted(Box<dyn HeldLock>),
    Running { future: ReleaseFuture, started_on: Option<Handle> },
    Done,
}

impl Release {
    pub(crate) fn new(
        held: Box<dyn HeldLock>,
        backend: Arc<dyn LockBackend>,
        ticket: Ticket,
        span: tracing::Span,
    ) -> Self {
        Self { state: State::Unstarted(held), span, backend: Some(backend), ticket: Some(ticket), sent: false }
    }

    /// Finishes the release: at once when the backend can ([`HeldLock::release_at_once`]),
    /// else in the background, on the home runtime.
    pub(crate) fn finish_in_background(mut self) {
        if let State::Unstarted(held) = &mut self.state
            && let Some(outcome) = held.release_at_once()
        {
            let _entered = self.span.enter();
            if let Err(error) = &outcome {
                tracing::debug!(%error, "the release did not complete cleanly");
            }
            self.state = State::Done;
            return;
        }
        let Some(runtime) = crate::home::runtime() else {
            self.state = State::Done;
            tracing::warn!(
                "a release found no runtime to run on; the store frees the hold when its lease or session ends"
            );
            return;
        };
        self.sent = true;
        drop(runtime.spawn(async move {
            // The outcome is logged by the release itself.
            let _ = self.await;
        }));
    }
}

impl Future for Release {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let _entered = this.span.enter();
        loop {
            match std::mem::replace(&mut this.state, State::Done) {
                State::Unstarted(held) => {
                    this.state = State::Running { future: held.release(), started_on: Handle::try_current().ok() };
                }
                State::Running { mut future, started_on } => {
                    let Poll::Ready(outcome) = future.as_mut().poll(cx) else {
                        this.state = State::Running { future, started_on };
                        return Poll::Pending;
                    };
                    this.ticket.take();
                    this.backend.take();
                    if let Err(error) = &outcome {
                        tracing::debug!(%error, "the release did not complete cleanly");
                    }
                    return Poll::Ready(outcome);
                }
                State::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Done => {}
            State::Unstarted(held) => {
                if self.sent {
                    // Dropped unpolled by the runtime it was sent to (the fallback runtime of a
                    // process without a home thread, shutting down): nowhere else to go.
                    tracing::warn!(
                        "a release was dropped before it ran; the store frees the hold when its lease or session ends"
                    );
                    return;
                }
                let moved = Release {
                    state: State::Unstarted(held),
                    span: self.span.clone(),
                    backend: self.backend.take(),
                    ticket: self.ticket.take(),
                    sent: false,
                };
                moved.finish_in_background();
            }
            State::Running { future, started_on } => {
                // Finish where it started (what it made belongs to that runtime); a runtime that
                // has gone drops it, and the store's lease or session expiry frees the hold. The
                // handle's later acquisitions do not wait for it: that runtime may never be
                // driven again (they wait for the hold as for any other owner's instead).
                drop(self.ticket.take());
                let backend = self.backend.take();
                if let Some(runtime) = started_on.or_else(|| Handle::try_current().ok()) {
                    let span = self.span.clone();
                    drop(
                        runtime.spawn(
                            async move {
                                if let Err(error) = future.await {
                                    tracing::debug!(%error, "the release did not complete cleanly");
                                }
                                drop(backend);
                            }
                            .instrument(span),
                        ),
                    );
                }
            }
        }
    }
}

/// The releases in flight of one lock handle, so that an acquisition through the handle
/// waits for the releases that began before it (a guard dropped and the lock asked for again
/// at once must not find its own previous hold in the way).
///
/// Releases are numbered in the order they begin; the ones in flight are kept in a small
/// vector (a handle rarely has more than one), which allocates nothing until the first.
#[derive(Debug, Default)]
pub(crate) struct Releases {
    next: AtomicU64,
    in_flight: std::sync::Mutex<Vec<u64>>,
    /// Woken whenever a release ends.
    ended: tokio::sync::Notify,
}

impl Releases {
    fn in_flight(&self) -> std::sync::MutexGuard<'_, Vec<u64>> {
        // Nothing panics while holding this lock; recover the data if something ever did.
        self.in_flight.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a release that begins now; it is over when the ticket is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> Ticket {
        let mut in_flight = self.in_flight();
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        in_flight.push(id);
        Ticket { releases: Arc::clone(self), id }
    }

    /// Every release registered so far: an acquisition waits for those below this mark.
    pub(crate) fn mark(&self) -> u64 {
        self.next.load(Ordering::SeqCst)
    }

    /// Whether every release registered before `mark` is over.
    pub(crate) fn settled(&self, mark: u64) -> bool {
        self.in_flight().iter().all(|id| *id >= mark)
    }

    /// Waits until every release registered before `mark` is over.
    pub(crate) async fn wait_settled(&self, mark: u64) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before the check, so that a release ending in between wakes us.
            ended.as_mut().enable();
            if self.settled(mark) {
                return;
            }
            ended.await;
        }
    }
}

/// One release in flight; dropping it marks the release over.
#[derive(Debug)]
pub(crate) struct Ticket {
    releases: Arc<Releases>,
    id: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.releases.in_flight().retain(|id| *id != self.id);
        self.releases.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use async_trait::async_trait;

    use super::*;
    use crate::backend::{AcquireRequest, Grant};

    /// A release that needs a Tokio timer, as a network backend's does.
    struct NeedsRuntime {
        released: Arc<AtomicUsize>,
        on: Arc<std::sync::Mutex<Option<String>>>,
    }

    #[async_trait]
    impl HeldLock for NeedsRuntime {
        async fn release(self: Box<Self>) -> Result<()> {
            tokio::time::sleep(Duration::from_millis(1)).await;
            *self.on.lock().unwrap() = std::thread::current().name().map(str::to_owned);
            self.released.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    /// A backend that grants nothing; releases keep it alive.
    #[derive(Debug)]
    struct Nothing;

    #[async_trait]
    impl LockBackend for Nothing {
        fn name(&self) -> &'static str {
            "nothing"
        }

        fn capabilities(&self) -> crate::Capabilities {
            crate::Capabilities::NONE
        }

        async fn acquire(&self, _: AcquireRequest) -> Result<Option<Grant>> {
            Ok(None)
        }
    }

    fn held() -> (Box<NeedsRuntime>, Arc<AtomicUsize>, Arc<std::sync::Mutex<Option<String>>>) {
        let released = Arc::new(AtomicUsize::new(0));
        let on = Arc::new(std::sync::Mutex::new(None));
        (Box::new(NeedsRuntime { released: released.clone(), on: on.clone() }), released, on)
    }

    fn wait_until(what: &str, condition: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !condition() {
            assert!(std::time::Instant::now() < deadline, "{what} within 5 s");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn dropped_off_runtime_runs_on_the_home_runtime_and_keeps_the_backend_alive() {
        let backend: Arc<dyn LockBackend> = Arc::new(Nothing);
        let weak = Arc::downgrade(&backend);
        let releases = Arc::new(Releases::default());
        let (held, released, on) = held();
        let release = Release::new(held, backend, releases.begin(), tracing::Span::none());
        release.finish_in_background();
        wait_until("the release ran", || released.load(Ordering::SeqCst) == 1);
        assert_eq!(on.lock().unwrap().as_deref(), Some(crate::home::THREAD_NAME));
        wait_until("the ticket is returned", || releases.settled(releases.mark()));
        wait_until("the backend is let go", || weak.upgrade().is_none());
    }

    #[test]
    fn dropped_on_a_runtime_that_then_shuts_down_still_runs() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let releases = Arc::new(Releases::default());
        let (held, released, on) = held();
        runtime.block_on(async {
            Release::new(held, Arc::new(Nothing), releases.begin(), tracing::Span::none()).finish_in_background();
        });
        drop(runtime);
        wait_until("the release ran", || released.load(Ordering::SeqCst) == 1);
        assert_eq!(on.lock().unwrap().as_deref(), Some(crate::home::THREAD_NAME));
    }

    #[tokio::test]
    async fn dropped_unpolled_is_finished_in_the_background() {
        let releases = Arc::new(Releases::default());
        let mark_before = releases.mark();
        let (held, released, _) = held();
        drop(Release::new(held, Arc::new(Nothing), releases.begin(), tracing::Span::none()));
        assert!(releases.settled(mark_before), "releases registered later are not waited for");
        tokio::time::timeout(Duration::from_secs(5), releases.wait_settled(releases.mark())).await.unwrap();
        assert_eq!(released.load(Ordering::SeqCst), 1);
    }
}
