//! Observing an election: every change of leader, in term order, from a watch that replays
//! every write since the revision the observer last saw.
//!
//! # What the observer knows
//!
//! The candidates of an election are the keys under its prefix, and the key with the lowest
//! create revision leads; its create revision is the term. The observer reads every key under
//! the prefix once (the *view*, at the read's revision R), hands out the current state (the
//! leader, or [`LeaderEvent::Vacant`]), and then watches the prefix from R + 1. etcd sends
//! every put and delete of the prefix since then, in revision order, so the observer applies
//! them to the view one revision at a time and hands out each change of the head: every
//! term, and every vacancy, none skipped and none out of order. A key at the head that is not
//! a candidate's (a mutex's key of the same name) means nobody leads.
//!
//! # Connection trouble and compaction
//!
//! - **The watch breaks** (a cut connection, a member restart): the observer watches again
//!   from the revision after the last one it applied, so etcd replays what passed meanwhile:
//!   no gap.
//! - **Those revisions were compacted** (the observer was cut off, or fell behind, for longer
//!   than the store keeps history): etcd cancels the watch with the compact revision. Nothing
//!   can replay the terms that passed, so the observer says [`LeaderEvent::Gap`], reads the
//!   view again, hands out the current state and watches from there.
//! - **No member answers:** the stream yields the connection error and tries again, with a
//!   growing pause.
//!
//! This is where etcd's own `Observe` (`client/v3/concurrency/election.go`) falls short: it
//! follows only the current leader's key, never reports a vacancy, and ends silently on a
//! compaction or an error.
//!
//! # The task
//!
//! The stream starts one task, at its first poll, on the runtime that polls it; the task
//! handles the watch's events as they come (so the order is kept even when the consumer is
//! slow) and queues the events for the consumer, up to [`OUTBOX_CAPACITY`]; a consumer further
//! behind gets a gap and the current state instead of the oldest events. Dropping the stream
//! aborts the task, which cancels its watch. A task that ends with its runtime is started
//! again by the next poll, on that poll's runtime, and goes on from the revision the view had
//! reached (the view outlives the task): etcd replays what passed meanwhile, so that is no gap
//! either, unless those revisions were compacted.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, KeyValue, SortOrder, SortTarget, WatchOptions};
use futures_core::Stream;
use lockkit_core::backend::LeaderEvents;
use lockkit_core::{Error, LeaderEvent, LockName, Result};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::BACKEND;
use crate::backend::EtcdBackend;
use crate::election::leader_of;
use crate::error::{to_error, unreachable};

/// How many events wait for a slow consumer before they give way to a gap and the state.
pub(crate) const OUTBOX_CAPACITY: usize = 256;

/// The first pause before the observer tries again after a failure.
const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two tries after failures.
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// The changes of leader of election `lock`, followed through `backend`'s clients.
pub(crate) fn observe(backend: Arc<EtcdBackend>, lock: LockName) -> LeaderEvents {
    Box::pin(Observation { backend, lock, outbox: None, task: None, progress: Arc::default() })
}

/// The stream the consumer holds: the outbox of the task that follows the election.
struct Observation {
    backend: Arc<EtcdBackend>,
    lock: LockName,
    outbox: Option<Arc<Outbox>>,
    task: Option<JoinHandle<()>>,
    /// What the tasks learnt so far, kept for the next task when one ends with its runtime.
    progress: Arc<Mutex<Progress>>,
}

/// The view of the election and whether a gap is owed: what a task hands on to the next.
#[derive(Debug, Default)]
struct Progress {
    /// The view, once read; `None` until the first read, and after a compaction.
    view: Option<View>,
    /// A gap to hand out before the state the next read gives.
    gap: bool,
}

/// Locks `progress`.
fn lock_progress(progress: &Mutex<Progress>) -> MutexGuard<'_, Progress> {
    // Nothing panics while holding this lock; recover the data if something ever did.
    progress.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Observation {
    /// Starts the task on the current runtime.
    fn start(&mut self) -> Result<Arc<Outbox>> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::connection(BACKEND, Some(&self.lock), "no Tokio runtime is running")
                .with_context("observe the election")
        })?;
        let outbox = Arc::new(Outbox::default());
        let closer = CloseOnDrop(Arc::clone(&outbox));
        let progress = Arc::clone(&self.progress);
        let task = follow(Arc::clone(&self.backend), self.lock.clone(), Arc::clone(&outbox), closer, progress);
        self.task = Some(runtime.spawn(task));
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
            // The task ended with the runtime it ran on: follow again from here, from the
            // revision the view had reached.
            this.outbox = None;
            this.task = None;
            if restarted {
                let error =
                    Error::connection(BACKEND, Some(&this.lock), "the runtime of the observer's task shut down")
                        .with_context("observe the election");
                return Poll::Ready(Some(Err(error)));
            }
            tracing::debug!(backend = BACKEND, lock = %this.lock, "the observer's task ended with its runtime; starting it again here");
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

/// What the task hands the consumer.
#[derive(Default)]
struct Outbox {
    state: Mutex<OutboxState>,
}

#[derive(Default)]
struct OutboxState {
    events: VecDeque<Result<LeaderEvent>>,
    /// The last state handed out (an `Elected` or `Vacant`), for a consumer that falls behind.
    current: Option<LeaderEvent>,
    /// Set when the task is gone.
    closed: bool,
    waker: Option<Waker>,
}

impl Outbox {
    fn state(&self) -> MutexGuard<'_, OutboxState> {
        // Nothing panics while holding this lock; recover the data if something ever did.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, item: Result<LeaderEvent>) {
        let mut state = self.state();
        if let Ok(event @ (LeaderEvent::Elected(_) | LeaderEvent::Vacant)) = &item {
            state.current = Some(event.clone());
        }
        if state.events.len() >= OUTBOX_CAPACITY {
            // The consumer is far behind: what it missed is a gap; the state now follows.
            tracing::debug!(backend = BACKEND, "an observer fell {OUTBOX_CAPACITY} events behind; it gets a gap");
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
}

/// Closes the outbox when the task is dropped (aborted, or with its runtime), even before its
/// first poll.
struct CloseOnDrop(Arc<Outbox>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.closed = true;
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }
}

/// What the head of the view stood for when it was last handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shown {
    /// A candidate led, for the term of this create revision.
    Term(i64),
    /// Nobody led.
    Vacant,
}

/// The keys of an election as of one revision, and what was handed out: the bookkeeping of the
/// module docs, without I/O.
#[derive(Debug, Default)]
struct View {
    /// Every key under the prefix, by create revision.
    keys: BTreeMap<i64, KeyValue>,
    /// The create revision of every key, by key (a delete event carries the key only).
    revisions: HashMap<Vec<u8>, i64>,
    /// The revision the view is complete up to.
    revision: i64,
    /// What was handed out last.
    shown: Option<Shown>,
}

impl View {
    /// The view of a read of every key under the prefix at `revision`.
    fn read(kvs: &[KeyValue], revision: i64) -> Self {
        let mut view = View { revision, ..View::default() };
        for kv in kvs {
            view.put(kv.clone());
        }
        view
    }

    fn put(&mut self, kv: KeyValue) {
        let created = kv.create_revision();
        if let Some(old) = self.revisions.insert(kv.key().to_vec(), created)
            && old != created
        {
            self.keys.remove(&old);
        }
        self.keys.insert(created, kv);
    }

    fn delete(&mut self, key: &[u8]) {
        if let Some(created) = self.revisions.remove(key) {
            self.keys.remove(&created);
        }
    }

    /// The state the head stands for now.
    fn now(&self) -> (Shown, LeaderEvent) {
        match self.keys.first_key_value().and_then(|(created, kv)| Some((*created, leader_of(kv)?))) {
            Some((created, leader)) => (Shown::Term(created), LeaderEvent::Elected(leader)),
            None => (Shown::Vacant, LeaderEvent::Vacant),
        }
    }

    /// Hands out the current state if it is not what was handed out last (or always, when
    /// `restate`).
    fn settle(&mut self, restate: bool, outbox: &Outbox) {
        let (shown, event) = self.now();
        if restate || self.shown != Some(shown) {
            self.shown = Some(shown);
            outbox.push(Ok(event));
        }
    }

    /// Applies the events of one watch reply (in revision order), handing out the state after
    /// each revision: the events of one revision (one transaction) are one change.
    fn apply(&mut self, events: &[etcd_client::Event], outbox: &Outbox) {
        let mut pending: Option<i64> = None;
        for event in events {
            let Some(kv) = event.kv() else { continue };
            let revision = kv.mod_revision();
            if pending.is_some_and(|p| p != revision) {
                self.settle(false, outbox);
            }
            pending = Some(revision);
            match event.event_type() {
                EventType::Put => self.put(kv.clone()),
                EventType::Delete => self.delete(kv.key()),
            }
            self.revision = self.revision.max(revision);
        }
        if pending.is_some() {
            self.settle(false, outbox);
        }
    }
}

/// Why one watch ended.
enum WatchEnd {
    /// The revisions after the view's were compacted: a gap, then read again.
    Compacted,
    /// The watch broke or was cancelled: watch again from the view's revision.
    Broken,
    /// The watch could not be made; the error is for the consumer.
    Failed(Error),
}

/// The task: follows the election until the stream is dropped.
async fn follow(
    backend: Arc<EtcdBackend>,
    lock: LockName,
    outbox: Arc<Outbox>,
    closer: CloseOnDrop,
    progress: Arc<Mutex<Progress>>,
) {
    let _closer = closer;
    let span = tracing::debug_span!("lockkit.etcd.observe", lock = %lock);
    async move {
        let prefix = backend.config.lock_prefix(&lock);
        let mut pause = FIRST_PAUSE;
        loop {
            let client = match backend.client().await {
                Ok(client) => client,
                Err(error) => {
                    tracing::debug!(backend = BACKEND, %error, ?pause, "the observer has no client; trying again");
                    outbox.push(Err(error));
                    tokio::time::sleep(pause).await;
                    pause = pause.saturating_mul(2).min(MAX_PAUSE);
                    continue;
                }
            };
            let read_at = lock_progress(&progress).view.as_ref().map(|view| view.revision);
            let after = match read_at {
                Some(revision) => revision,
                None => match read(client.clone(), &prefix, &lock, &backend).await {
                    Ok(mut fresh) => {
                        let mut progress = lock_progress(&progress);
                        if std::mem::take(&mut progress.gap) {
                            outbox.push(Ok(LeaderEvent::Gap));
                        }
                        fresh.settle(true, &outbox);
                        let revision = fresh.revision;
                        progress.view = Some(fresh);
                        revision
                    }
                    Err(error) => {
                        tracing::debug!(backend = BACKEND, %error, ?pause, "the observer cannot read the election; trying again");
                        outbox.push(Err(error));
                        tokio::time::sleep(pause).await;
                        pause = pause.saturating_mul(2).min(MAX_PAUSE);
                        continue;
                    }
                },
            };
            match watch(client, &prefix, after, &progress, &outbox, &lock, &backend).await {
                WatchEnd::Compacted => {
                    tracing::debug!(backend = BACKEND, after, "the revisions the observer missed were compacted: a gap");
                    let mut progress = lock_progress(&progress);
                    progress.view = None;
                    progress.gap = true;
                    pause = FIRST_PAUSE;
                }
                WatchEnd::Broken => {
                    tracing::debug!(backend = BACKEND, after, "the observer's watch broke; watching again from where it was");
                    tokio::time::sleep(pause).await;
                    pause = pause.saturating_mul(2).min(MAX_PAUSE);
                }
                WatchEnd::Failed(error) => {
                    tracing::debug!(backend = BACKEND, %error, ?pause, "the observer cannot watch; trying again");
                    outbox.push(Err(error));
                    tokio::time::sleep(pause).await;
                    pause = pause.saturating_mul(2).min(MAX_PAUSE);
                }
            }
        }
    }
    .instrument(span)
    .await;
}

/// Reads every key under `prefix`: the view at the read's revision.
async fn read(mut client: Client, prefix: &str, lock: &LockName, backend: &EtcdBackend) -> Result<View> {
    let options = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
    let reply = tokio::time::timeout(backend.config.connect_timeout, client.get(prefix, Some(options)))
        .await
        .map_err(|_| unreachable(&backend.config, Some(lock)))?
        .map_err(|e| to_error(e, Some(lock)).with_server(Some(&backend.config.address)))?;
    let revision = reply.header().map_or(0, etcd_client::ResponseHeader::revision);
    Ok(View::read(reply.kvs(), revision))
}

/// Watches `prefix` from the revision after `after` (the view's), applying what comes to the
/// view, until the watch ends.
async fn watch(
    mut client: Client,
    prefix: &str,
    after: i64,
    progress: &Mutex<Progress>,
    outbox: &Outbox,
    lock: &LockName,
    backend: &EtcdBackend,
) -> WatchEnd {
    let timeout = backend.config.connect_timeout;
    let options = WatchOptions::new().with_prefix().with_start_revision(after + 1);
    let (mut watcher, mut stream) = match tokio::time::timeout(timeout, client.watch(prefix, Some(options))).await {
        Ok(Ok(watch)) => watch,
        Ok(Err(error)) => {
            return WatchEnd::Failed(to_error(error, Some(lock)).with_server(Some(&backend.config.address)));
        }
        Err(_) => return WatchEnd::Failed(unreachable(&backend.config, Some(lock))),
    };
    let end = loop {
        match stream.message().await {
            Ok(Some(reply)) => {
                if reply.compact_revision() != 0 {
                    break WatchEnd::Compacted;
                }
                if let Some(view) = lock_progress(progress).view.as_mut() {
                    view.apply(reply.events(), outbox);
                }
                if reply.canceled() {
                    break WatchEnd::Broken;
                }
            }
            Ok(None) | Err(_) => break WatchEnd::Broken,
        }
    };
    let _ = tokio::time::timeout(timeout, watcher.cancel()).await;
    end
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn drain(outbox: &Outbox) -> Vec<LeaderEvent> {
        outbox.state().events.drain(..).map(|item| item.unwrap()).collect()
    }

    #[test]
    fn a_consumer_far_behind_gets_a_gap_and_the_state_now() {
        let outbox = Outbox::default();
        for _ in 0..(OUTBOX_CAPACITY + 10) {
            outbox.push(Ok(LeaderEvent::Vacant));
        }
        let events = drain(&outbox);
        assert_eq!(events.first(), Some(&LeaderEvent::Gap));
        assert_eq!(events.last(), Some(&LeaderEvent::Vacant));
        assert!(events.len() <= OUTBOX_CAPACITY);
    }

    #[test]
    fn an_empty_view_is_vacant() {
        let outbox = Outbox::default();
        let mut view = View::read(&[], 5);
        view.settle(true, &outbox);
        view.settle(false, &outbox);
        assert_eq!(drain(&outbox), [LeaderEvent::Vacant]);
    }
}
