//! Releases that always reach the store: inline when awaited, in the background when a
//! guard is dropped, on or off a runtime, never panicking.
//!
//! A [`Release`] owns a backend's [`HeldLock`] until it runs. Where it runs:
//!
//! 1. Awaited (`LockGuard::release`): inline, on the caller's task, with no task hop.
//! 2. Dropped on a runtime (a guard dropped in async code): polled once inline, so an
//!    in-process backend completes at once and a network backend has sent its request; the
//!    rest runs as a task on that runtime.
//! 3. Dropped outside every runtime (a plain thread, after `block_on` returned): spawned,
//!    unstarted, on the runtime that granted the hold. If that runtime has shut down, tokio
//!    drops the task unpolled, the [`HeldLock`] comes back here, and the release runs on
//!    lockkit's own release thread (one per process, started on first need).
//!
//! A release future is only ever polled on one runtime: a release that started and was then
//! dropped finishes on the runtime it started on, or not at all (the store's lease or session
//! expiry then frees the hold). Nothing here polls a future outside a runtime, so nothing
//! here can panic for want of one.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

use tokio::runtime::Handle;
use tracing::Instrument;

use crate::Result;
use crate::backend::HeldLock;

type ReleaseFuture = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// A release of one hold, as a future that runs it and a value that finishes it in the
/// background when dropped unfinished.
pub(crate) struct Release {
    state: State,
    span: tracing::Span,
    /// The runtime that granted the hold: where an unstarted release dropped outside every
    /// runtime is sent first.
    granted_on: Option<Handle>,
    /// Keeps the handle's next acquisition waiting until this release is over.
    ticket: Option<Ticket>,
    /// How many places this release was sent to, unstarted (bounds the fallbacks).
    sent: u8,
}

enum State {
    Unstarted(Box<dyn HeldLock>),
    Running { future: ReleaseFuture, home: Option<Handle> },
    Done,
}

impl Release {
    pub(crate) fn new(
        held: Box<dyn HeldLock>,
        granted_on: Option<Handle>,
        ticket: Ticket,
        span: tracing::Span,
    ) -> Self {
        Self { state: State::Unstarted(held), span, granted_on, ticket: Some(ticket), sent: 0 }
    }

    /// Finishes the release in the background: one poll inline when on a runtime, the rest
    /// as described in the module docs.
    pub(crate) fn finish_in_background(mut self) {
        if Handle::try_current().is_ok() && Pin::new(&mut self).poll(&mut Context::from_waker(Waker::noop())).is_ready()
        {
            return;
        }
        drop(self);
    }

    /// Sends an unstarted release to run elsewhere (see [`next_place`]). A runtime that has
    /// shut down drops the task unpolled, which brings the release back here for the next
    /// place.
    fn send_unstarted(mut self) {
        match next_place(&mut self.sent, &mut self.granted_on) {
            Some(runtime) => drop(runtime.spawn(self)),
            None => {
                self.state = State::Done;
                tracing::warn!(
                    "a release found no runtime to run on; the store frees the hold when its lease or session ends"
                );
            }
        }
    }
}

/// Where a task that has not started yet goes next, after `sent` earlier places: first the
/// current runtime, else `home` (the runtime the work belongs to); then lockkit's release
/// thread; then nowhere. A runtime that has shut down drops a task spawned on it unpolled,
/// which is how a task comes back for the next place.
fn next_place(sent: &mut u8, home: &mut Option<Handle>) -> Option<Handle> {
    *sent += 1;
    if *sent == 1
        && let Some(runtime) = Handle::try_current().ok().or_else(|| home.take())
    {
        return Some(runtime);
    }
    if *sent <= 2 {
        *sent = 2;
        return release_thread();
    }
    None
}

/// Runs `task` in the background, from anywhere, never panicking: on the current runtime,
/// else on `home` (the runtime the work belongs to, when known), else, when `home` has shut
/// down or there is none, on lockkit's own release thread. For a backend's clean-up work
/// that must reach the store even when it is started outside every runtime (the abandon of a
/// cancelled acquisition, say), as lockkit-core does for releases.
///
/// The task must not have been polled yet (an `async` block that has not run), so that no
/// part of it belongs to a runtime; it is polled on one runtime only.
pub fn spawn_detached<F>(task: F, home: Option<Handle>)
where
    F: Future<Output = ()> + Send + 'static,
{
    Detached { task: Some(Box::pin(task)), home, sent: 0, started: false }.send();
}

/// A task on its way to a runtime: it moves on to the next place when a runtime drops it
/// unpolled.
struct Detached<F: Future<Output = ()> + Send + 'static> {
    task: Option<Pin<Box<F>>>,
    home: Option<Handle>,
    sent: u8,
    started: bool,
}

impl<F: Future<Output = ()> + Send + 'static> Detached<F> {
    fn send(mut self) {
        match next_place(&mut self.sent, &mut self.home) {
            Some(runtime) => drop(runtime.spawn(self)),
            None => {
                self.task = None;
                tracing::warn!("a background task of lockkit found no runtime to run on and was dropped");
            }
        }
    }
}

impl<F: Future<Output = ()> + Send + 'static> Future for Detached<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.started = true;
        let Some(task) = self.task.as_mut() else { return Poll::Ready(()) };
        std::task::ready!(task.as_mut().poll(cx));
        self.task = None;
        Poll::Ready(())
    }
}

impl<F: Future<Output = ()> + Send + 'static> Drop for Detached<F> {
    fn drop(&mut self) {
        if self.started {
            return;
        }
        if let Some(task) = self.task.take() {
            // The task was never polled, so nothing of it belongs to a runtime: it may move on.
            Detached { task: Some(task), home: self.home.take(), sent: self.sent, started: false }.send();
        }
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
                    this.state = State::Running { future: held.release(), home: Handle::try_current().ok() };
                }
                State::Running { mut future, home } => {
                    let Poll::Ready(outcome) = future.as_mut().poll(cx) else {
                        this.state = State::Running { future, home };
                        return Poll::Pending;
                    };
                    this.ticket.take();
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
                let moved = Release {
                    state: State::Unstarted(held),
                    span: self.span.clone(),
                    granted_on: self.granted_on.take(),
                    ticket: self.ticket.take(),
                    sent: self.sent,
                };
                moved.send_unstarted();
            }
            State::Running { future, home } => {
                // Finish where it started; a runtime that has gone drops it, and the store's
                // lease or session expiry frees the hold.
                let ticket = self.ticket.take();
                if let Some(home) = home.or_else(|| Handle::try_current().ok()) {
                    let span = self.span.clone();
                    drop(
                        home.spawn(
                            async move {
                                if let Err(error) = future.await {
                                    tracing::debug!(%error, "the release did not complete cleanly");
                                }
                                drop(ticket);
                            }
                            .instrument(span),
                        ),
                    );
                }
            }
        }
    }
}

/// lockkit's own release thread: a current-thread runtime that runs the releases of guards
/// dropped after every runtime that could run them had shut down. Started on first need and
/// kept for the life of the process; `None` when the system refuses a thread.
fn release_thread() -> Option<Handle> {
    static THREAD: OnceLock<Option<Handle>> = OnceLock::new();
    THREAD
        .get_or_init(|| {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            let handle = runtime.handle().clone();
            std::thread::Builder::new()
                .name("lockkit-release".to_owned())
                .spawn(move || runtime.block_on(std::future::pending::<()>()))
                .ok()?;
            Some(handle)
        })
        .clone()
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
    fn dropped_off_runtime_runs_on_the_granting_runtime() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("granting")
            .enable_all()
            .build()
            .unwrap();
        let releases = Arc::new(Releases::default());
        let (held, released, on) = held();
        let release = Release::new(held, Some(runtime.handle().clone()), releases.begin(), tracing::Span::none());
        release.finish_in_background();
        wait_until("the release ran", || released.load(Ordering::SeqCst) == 1);
        assert_eq!(on.lock().unwrap().as_deref(), Some("granting"));
        wait_until("the ticket is returned", || releases.settled(releases.mark()));
    }

    #[test]
    fn dropped_after_its_runtime_shut_down_runs_on_the_release_thread() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let granted_on = runtime.handle().clone();
        drop(runtime);
        let releases = Arc::new(Releases::default());
        let (held, released, on) = held();
        Release::new(held, Some(granted_on), releases.begin(), tracing::Span::none()).finish_in_background();
        wait_until("the release ran", || released.load(Ordering::SeqCst) == 1);
        assert_eq!(on.lock().unwrap().as_deref(), Some("lockkit-release"));
        wait_until("the ticket is returned", || releases.settled(releases.mark()));
    }

    #[test]
    fn a_detached_task_whose_home_shut_down_runs_on_the_release_thread() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let home = runtime.handle().clone();
        drop(runtime);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        spawn_detached(
            async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                let _ = done_tx.send(std::thread::current().name().map(str::to_owned));
            },
            Some(home),
        );
        let ran_on = done_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(ran_on.as_deref(), Some("lockkit-release"));
    }

    #[tokio::test]
    async fn dropped_on_a_runtime_is_polled_inline_then_finished_as_a_task() {
        let releases = Arc::new(Releases::default());
        let mark_before = releases.mark();
        let (held, released, _) = held();
        Release::new(held, None, releases.begin(), tracing::Span::none()).finish_in_background();
        assert!(!releases.settled(releases.mark()), "in flight until it finishes");
        assert!(releases.settled(mark_before), "releases registered later are not waited for");
        tokio::time::timeout(Duration::from_secs(5), releases.wait_settled(releases.mark())).await.unwrap();
        assert_eq!(released.load(Ordering::SeqCst), 1);
    }
}
