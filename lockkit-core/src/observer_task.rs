//! The plumbing of an election observer that follows its store in a task of its own: the
//! [`Outbox`] the task fills and the consumer drains, and the stream that starts the task at
//! its first poll, aborts it when dropped, and starts it again when it ended with its runtime.
//! A backend writes only the task (what its store's watches tell); [`observer_task`] does the
//! rest, the same for every backend. A task that follows its store in attempts (a session or
//! a watch each, started again after a pause when it breaks) is [`follow_task`]: the backend
//! writes one attempt ([`Follow`]), on a follower that keeps its state from task to task.
//!
//! The task handles the store's notifications as they come, so their order is kept even when
//! the consumer is slow, and queues the events for the consumer, up to [`OUTBOX_CAPACITY`]; a
//! consumer further behind gets a [`LeaderEvent::Gap`] and the current state instead of the
//! oldest events.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_core::Stream;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::backoff::Backoff;
use crate::{Error, FencingToken, LeaderEvent, LockName, Result};

/// How many events wait for a slow consumer before they give way to a gap and the state.
pub const OUTBOX_CAPACITY: usize = 256;

/// Why an observer's stream could not run its task.
#[derive(Debug, thiserror::Error)]
enum TaskFailure {
    /// The task runs on lockkit's home runtime or the caller's, and there was neither.
    #[error("no Tokio runtime is running")]
    NoRuntime,
    /// The task ended with its runtime twice in one poll: the runtime polled is shutting down.
    #[error("the runtime of the observer's task shut down")]
    RuntimeGone,
}

/// What an observer's task hands its consumer: the events in order, up to
/// [`OUTBOX_CAPACITY`] of them.
#[derive(Debug)]
pub struct Outbox {
    backend: &'static str,
    state: Mutex<OutboxState>,
}

#[derive(Debug, Default)]
struct OutboxState {
    events: VecDeque<Result<LeaderEvent>>,
    /// The last state handed out (an `Elected` or `Vacant`), for a consumer that falls behind.
    current: Option<LeaderEvent>,
    /// Set when the task is gone.
    closed: bool,
    waker: Option<Waker>,
}

impl Outbox {
    /// An empty outbox of an observer of `backend` (the name in its log lines).
    pub fn new(backend: &'static str) -> Self {
        Self { backend, state: Mutex::default() }
    }

    fn state(&self) -> MutexGuard<'_, OutboxState> {
        // Nothing panics while holding this lock; recover the data if something ever did.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `item` for the consumer and wakes it. A consumer [`OUTBOX_CAPACITY`] events
    /// behind loses them: it gets a [`LeaderEvent::Gap`] and the last state pushed instead.
    pub fn push(&self, item: Result<LeaderEvent>) {
        let mut state = self.state();
        if let Ok(event @ (LeaderEvent::Elected(_) | LeaderEvent::Vacant)) = &item {
            state.current = Some(event.clone());
        }
        if state.events.len() >= OUTBOX_CAPACITY {
            // The consumer is far behind: what it missed is a gap; the state now follows.
            tracing::debug!(backend = self.backend, "an observer fell {OUTBOX_CAPACITY} events behind; it gets a gap");
            state.events.clear();
            state.events.push_back(Ok(LeaderEvent::Gap));
            if let Some(current) = state.current.clone() {
                state.events.push_back(Ok(current));
            }
        } else {
            state.events.push_back(item);
        }
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    /// Whether a state (an `Elected` or `Vacant`) was pushed: after it, a new start of the
    /// store's view owes the consumer a gap.
    pub fn has_state(&self) -> bool {
        self.state().current.is_some()
    }

    /// Takes out the events waiting, oldest first: what the consumer would get next.
    pub fn take_ready(&self) -> Vec<Result<LeaderEvent>> {
        self.state().events.drain(..).collect()
    }

    /// Marks the task gone and wakes the consumer.
    fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }
}

/// What a follower last pushed to its [`Outbox`] (a leader's term, or a vacancy), so that it
/// pushes only changes: the bookkeeping of every observer that works out the leader from a
/// view of the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastShown(Option<Option<FencingToken>>);

impl LastShown {
    /// Pushes `event` (an `Elected` or a `Vacant`) unless it shows the same term, or the same
    /// vacancy, as the last one pushed; with `restate`, pushes it anyway, as it is (after a
    /// gap, or as the first state of a new view). A change that follows an earlier state is
    /// one this follower saw happen: its `since` is made no earlier than now
    /// ([`not_before_now`](crate::backend::not_before_now)).
    pub fn push(&mut self, mut event: LeaderEvent, restate: bool, outbox: &Outbox) {
        let now = match &event {
            LeaderEvent::Elected(leader) => Some(leader.term),
            _ => None,
        };
        if !restate && self.0 == Some(now) {
            return;
        }
        if !restate && self.0.is_some() {
            crate::backend::not_before_now(&mut event);
        }
        self.0 = Some(now);
        outbox.push(Ok(event));
    }
}

/// Closes the outbox when the task is dropped (aborted, or with its runtime), even before its
/// first poll.
struct CloseOnDrop(Arc<Outbox>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The task of one start of an observer: a future that fills the outbox it is given until it
/// is dropped.
pub type ObserverTask = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The observer of election `lock` of `backend`, whose task `start` makes: called at the first
/// poll, and again at a poll after a task ended with its runtime (the closure keeps what a
/// task hands on to the next, and whether a new start owes a gap). Each task runs on lockkit's
/// home runtime ([`home::runtime`](crate::home::runtime)), which never depends on the caller's.
/// The stream is a [`LeaderEvents`](crate::backend::LeaderEvents).
pub fn observer_task<F>(
    backend: &'static str,
    lock: LockName,
    start: F,
) -> Pin<Box<dyn Stream<Item = Result<LeaderEvent>> + Send>>
where
    F: FnMut(Arc<Outbox>) -> ObserverTask + Send + 'static,
{
    Box::pin(Observation { backend, lock, start: Box::new(start), outbox: None, task: None })
}

/// The stream the consumer holds: the outbox of the task that follows the election.
struct Observation {
    backend: &'static str,
    lock: LockName,
    start: Box<dyn FnMut(Arc<Outbox>) -> ObserverTask + Send>,
    outbox: Option<Arc<Outbox>>,
    task: Option<JoinHandle<()>>,
}

impl Observation {
    fn failure(&self, failure: TaskFailure) -> Error {
        Error::connection(self.backend, Some(&self.lock), failure).with_context("observe the election")
    }

    /// Starts a task on lockkit's home runtime.
    fn start(&mut self) -> Result<Arc<Outbox>> {
        let runtime = crate::home::runtime().ok_or_else(|| self.failure(TaskFailure::NoRuntime))?;
        let outbox = Arc::new(Outbox::new(self.backend));
        let closer = CloseOnDrop(Arc::clone(&outbox));
        let task = (self.start)(Arc::clone(&outbox));
        self.task = Some(runtime.spawn(async move {
            let _closer = closer;
            task.await;
        }));
        self.outbox = Some(Arc::clone(&outbox));
        Ok(outbox)
    }
}

impl Stream for Observation {
    type Item = Result<LeaderEvent>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        // At most one new task per poll: a runtime that drops every task it is given (one
        // shutting down) must not make this spin.
        let mut restarted = false;
        loop {
            let outbox = match this.outbox.clone() {
                Some(outbox) => outbox,
                None => match this.start() {
                    Ok(outbox) => outbox,
                    Err(error) => return Poll::Ready(Some(Err(error))),
                },
            };
            let mut state = outbox.state();
            if let Some(item) = state.events.pop_front() {
                return Poll::Ready(Some(item));
            }
            if !state.closed {
                state.waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            drop(state);
            // The task ended with the runtime it ran on: follow again from here.
            this.outbox = None;
            this.task = None;
            if restarted {
                return Poll::Ready(Some(Err(this.failure(TaskFailure::RuntimeGone))));
            }
            tracing::debug!(backend = this.backend, lock = %this.lock, "the observer's task ended with its runtime; starting it again here");
            restarted = true;
        }
    }
}

impl Drop for Observation {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The first pause of a [`follow_task`] after an attempt that failed or broke.
pub const FOLLOW_FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause of a [`follow_task`] between attempts that failed or broke.
pub const FOLLOW_MAX_PAUSE: Duration = Duration::from_secs(2);

/// How one attempt of a [`Follow`] ended.
#[derive(Debug)]
pub enum FollowEnd {
    /// Follow again at once, with the pauses reset: what the attempt followed is gone (a
    /// session expired, history compacted) and the backend owes the consumer a gap, which it
    /// noted.
    Again,
    /// Follow again after a pause: the attempt broke (a watch cut) and the next one goes on
    /// from where it was.
    Pause,
    /// The attempt failed: the consumer gets the error; follow again after a pause.
    Failed(Error),
}

/// One attempt at following an election: what a backend writes for a [`follow_task`]. An
/// attempt opens what it needs (a session, a client, a watch), pushes the events it learns
/// to the outbox, and returns when that ends.
pub trait Follow: Send + 'static {
    /// Follows until the session or the watch ends.
    fn follow_once(&mut self, outbox: &Outbox) -> impl Future<Output = FollowEnd> + Send;
}

/// The observer of election `lock` of `backend` whose task follows the store in attempts of
/// `follower`, with pauses growing from [`FOLLOW_FIRST_PAUSE`] to [`FOLLOW_MAX_PAUSE`] after
/// attempts that break or fail, until the stream is dropped.
///
/// The follower outlives its task: a task that ended with its runtime is started again (see
/// [`observer_task`]) with the same follower, so what it learnt (a view of the election, a gap
/// it owes the consumer) goes on. Its fields are its state between tasks: a new task takes it
/// over once the old one has let it go.
pub fn follow_task<F: Follow>(
    backend: &'static str,
    lock: LockName,
    follower: F,
) -> Pin<Box<dyn Stream<Item = Result<LeaderEvent>> + Send>> {
    let follower = Arc::new(tokio::sync::Mutex::new(follower));
    observer_task(backend, lock.clone(), move |outbox| {
        let follower = Arc::clone(&follower);
        let span = tracing::debug_span!("lockkit.observe", backend, lock = %lock);
        Box::pin(async move { follow(backend, outbox, &mut *follower.lock_owned().await).await }.instrument(span))
    })
}

/// The task of a [`follow_task`].
async fn follow<F: Follow>(backend: &'static str, outbox: Arc<Outbox>, follower: &mut F) {
    let mut backoff = Backoff::new(FOLLOW_FIRST_PAUSE, FOLLOW_MAX_PAUSE);
    loop {
        match follower.follow_once(&outbox).await {
            FollowEnd::Again => {
                tracing::debug!(backend, "the observer follows again from a new start");
                backoff.reset();
            }
            FollowEnd::Pause => {
                tracing::debug!(backend, pause = ?backoff.peek(), "the observer's watch broke; following again");
                backoff.pause().await;
            }
            FollowEnd::Failed(error) => {
                tracing::debug!(backend, %error, pause = ?backoff.peek(), "the observer failed; trying again");
                outbox.push(Err(error));
                backoff.pause().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_consumer_far_behind_gets_a_gap_and_the_state_now() {
        let outbox = Outbox::new("test");
        for _ in 0..(OUTBOX_CAPACITY + 10) {
            outbox.push(Ok(LeaderEvent::Vacant));
        }
        let events: Vec<LeaderEvent> = outbox.take_ready().into_iter().map(|item| item.unwrap()).collect();
        assert_eq!(events.first(), Some(&LeaderEvent::Gap));
        assert_eq!(events.last(), Some(&LeaderEvent::Vacant));
        assert!(events.len() <= OUTBOX_CAPACITY);
    }
}
