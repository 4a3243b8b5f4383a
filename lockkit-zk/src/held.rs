//! What outlives an acquisition's future: the contender node of an acquisition in progress
//! ([`PendingNode`], deleted if the acquisition is dropped), a granted hold ([`ZkHeld`], freed
//! by one delete, downgraded from a write to a read by one `setData`), the task that watches a
//! hold's node where the session cannot (see the session module), and the data watches both use.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::backend::{HeldLock, HoldSignal};
use lockkit_core::{Error, HoldEnd, LockName, LossReason, Result};
use tokio::runtime::Handle;
use tracing::Instrument;
use uuid::Uuid;
use zookeeper_client as zk;

use crate::client::ZkBackend;
use crate::error::{BACKEND, Failure, is_loss, loss_for_state};
use crate::holds::leaves_node;
use crate::names::{Contender, NodeKind, queue};
use crate::record;
use crate::session::{Session, spawn_now};

pub(crate) use crate::session::RETRIES;

/// How long the hold's watch task waits for the notification of our own delete after a
/// release, so that the watch ends by firing instead of by a removal request.
const RELEASE_GRACE: Duration = Duration::from_secs(5);

/// How long after the grant the hold's deletion watch is set, when the wait left none on the node.
const WATCH_DELAY: Duration = Duration::from_millis(20);

/// How long the hold's watch task waits before setting its watch again after an error.
const WATCH_RETRY: Duration = Duration::from_millis(500);

/// What a data watch on a node reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Watched {
    /// The node was deleted.
    Deleted,
    /// The session reached this (terminal) state.
    SessionEnded(zk::SessionState),
    /// The session's task was dropped with its runtime: no event will ever come.
    SessionGone,
    /// Anything else happened to the node (its data changed, say).
    Changed,
}

/// A data watch's event, pending.
pub(crate) type NodeEvent = Pin<Box<dyn Future<Output = Watched> + Send>>;

/// The event of `watcher`, as a [`Watched`].
///
/// zookeeper-client panics (an `unwrap` on a closed channel) when a watch is awaited after
/// the session's task was dropped, which happens when the runtime the session runs on shuts
/// down while another runtime waits on one of its watches. That panic is caught here, at the
/// one poll where it can happen, and reported as [`Watched::SessionGone`]; the future is never
/// polled again after it is ready. The panic hook still prints the panic, and a build with
/// `panic = "abort"` aborts there (the crate docs' Runtime section says what to do then).
pub(crate) fn node_event(watcher: zk::OneshotWatcher) -> NodeEvent {
    let mut changed = Box::pin(watcher.changed());
    Box::pin(std::future::poll_fn(move |cx| {
        match std::panic::catch_unwind(AssertUnwindSafe(|| changed.as_mut().poll(cx))) {
            Ok(Poll::Ready(event)) => Poll::Ready(match event.event_type {
                zk::EventType::NodeDeleted => Watched::Deleted,
                zk::EventType::Session => Watched::SessionEnded(event.session_state),
                _ => Watched::Changed,
            }),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(Watched::SessionGone),
        }
    }))
}

/// The session to clean up with: `session` while it is alive, else the provider's current one
/// (a new one on the current runtime when need be). The nodes of a session whose runtime shut
/// down stay on the server until it expires the session; another session of the same
/// credentials may delete them.
async fn live_session(backend: &Weak<ZkBackend>, session: &Arc<Session>, lock: &LockName) -> Result<Arc<Session>> {
    if session.is_alive() {
        return Ok(Arc::clone(session));
    }
    match backend.upgrade() {
        Some(backend) => backend.session(Some(lock)).await,
        None => Err(Error::connection(BACKEND, Some(lock), Failure::RuntimeGone)),
    }
}

/// Where background work about a node of `session` runs: on the session's runtime (the home
/// runtime) while it lives, else on the home runtime, where a new session would be opened.
fn background_runtime(session: &Session) -> Option<Handle> {
    if session.is_alive() { Some(session.runtime.clone()) } else { lockkit_core::home::runtime() }
}

/// The contender node of an acquisition in progress; dropping it armed deletes the node in
/// the background.
pub(crate) struct PendingNode {
    backend: Weak<ZkBackend>,
    pub(crate) session: Arc<Session>,
    pub(crate) lock: LockName,
    pub(crate) parent: String,
    pub(crate) attempt: Uuid,
    /// What the node asks for.
    pub(crate) kind: NodeKind,
    /// The node's data: who took it (see the record module).
    pub(crate) record: String,
    /// The node's path, once a create reply told it.
    pub(crate) path: Option<String>,
    /// Whether a create was sent at all.
    pub(crate) sent: bool,
    armed: bool,
}

impl PendingNode {
    pub(crate) fn new(
        backend: Weak<ZkBackend>,
        session: Arc<Session>,
        lock: LockName,
        parent: String,
        attempt: Uuid,
        kind: NodeKind,
        record: String,
    ) -> Self {
        Self { backend, session, lock, parent, attempt, kind, record, path: None, sent: false, armed: true }
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Deletes the node now and waits for it (a try that lost, a timeout): no trace is left
    /// when the acquisition returns. Dropped midway, the drop finishes the job.
    pub(crate) async fn delete_now(&mut self) {
        if let Some(path) = &self.path {
            match self.session.client.delete(path, None).await {
                Ok(()) | Err(zk::Error::NoNode) => self.armed = false,
                Err(_) => {}
            }
        }
    }

    /// Turns the pending node into a hold: it is no longer deleted on drop. `own_watch`, the
    /// data watch a wait left on the node, is kept until the release's delete fires it.
    pub(crate) fn into_held(mut self, path: Arc<str>, signal: HoldSignal, own_watch: Option<NodeEvent>) -> ZkHeld {
        self.disarm();
        ZkHeld {
            backend: self.backend.clone(),
            session: Arc::clone(&self.session),
            path,
            lock: self.lock.clone(),
            kind: self.kind,
            // Only a write hold's downgrade reads it again: other holds keep no copy.
            record: if self.kind == NodeKind::Write { std::mem::take(&mut self.record) } else { String::new() },
            signal,
            _own_watch: std::sync::Mutex::new(own_watch),
        }
    }
}

impl Drop for PendingNode {
    fn drop(&mut self) {
        if !self.armed || !self.sent || self.session.client.state().is_terminated() {
            // Nothing sent, or a session that ended took its nodes with it.
            return;
        }
        let Some(runtime) = background_runtime(&self.session) else {
            // No runtime to run a request on: the node goes when the server expires the session.
            return;
        };
        let (backend, session, lock) = (self.backend.clone(), Arc::clone(&self.session), self.lock.clone());
        let (parent, attempt, path) = (self.parent.clone(), self.attempt, self.path.take());
        let task = async move {
            if let Ok(session) = live_session(&backend, &session, &lock).await {
                remove_node(&session, &parent, attempt, path.as_deref()).await;
            }
        };
        spawn_now(&runtime, task);
    }
}

/// Deletes an abandoned contender node: by path when known, else by attempt id among the
/// children.
async fn remove_node(session: &Session, parent: &str, attempt: Uuid, path: Option<&str>) {
    if let Some(path) = path {
        return session.delete_node(path).await;
    }
    for _ in 0..RETRIES {
        match session.client.list_children(parent).await {
            Ok(children) => {
                if let Some(Contender { name, .. }) = queue(&children).into_iter().find(|c| c.attempt == attempt) {
                    session.delete_node(&format!("{parent}/{name}")).await;
                }
                return;
            }
            Err(ref error) if is_loss(error) => continue,
            Err(_) => return,
        }
    }
}

/// One granted hold: its node, freed by one delete.
pub(crate) struct ZkHeld {
    backend: Weak<ZkBackend>,
    session: Arc<Session>,
    /// The node's path, shared with the hold's watch task and the session's table.
    path: Arc<str>,
    lock: LockName,
    kind: NodeKind,
    /// The node's data as created, which a downgrade extends: a write hold's only (empty for
    /// the other kinds, which never downgrade).
    record: String,
    /// The hold's signal: no longer held once released or lost.
    signal: HoldSignal,
    /// A data watch the wait left on the node, when the session's recursive watch tells the
    /// node's deletion: kept so that our own delete fires it (dropped unfired, the client would
    /// send a request to remove it). In a mutex only because a hold is shared between threads.
    _own_watch: std::sync::Mutex<Option<NodeEvent>>,
}

/// Writes `data` into a node we own, in place: a write hold downgraded to a read, or a
/// permit's "held" marker. The first request is sent when this is called (zookeeper-client
/// sends a request when its future is made), so that it reaches the server before anything
/// the caller sends later on the session, a release's delete say; the returned future awaits
/// it and tries again after a lost connection.
///
/// Returns `Err(LockLost)` when the node is gone while the hold is still held; a node gone
/// after the hold ended (released meanwhile) is fine.
fn write_own_node(
    session: &Arc<Session>,
    lock: &LockName,
    path: &str,
    data: String,
    signal: &HoldSignal,
    what: &'static str,
) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'static>> {
    let first = session.client.set_data(path, data.as_bytes(), None);
    let (session, lock, path, signal) = (Arc::clone(session), lock.clone(), path.to_owned(), signal.clone());
    Box::pin(async move {
        let mut reply =
            Box::pin(first) as Pin<Box<dyn Future<Output = std::result::Result<zk::Stat, zk::Error>> + Send>>;
        let mut last = zk::Error::ConnectionLoss;
        for _ in 0..RETRIES {
            match reply.await {
                Ok(_) => {
                    tracing::debug!(backend = BACKEND, %path, "{what}");
                    return Ok(());
                }
                Err(zk::Error::NoNode) if !signal.is_held() => return Ok(()),
                Err(zk::Error::NoNode) => return Err(Error::lost(BACKEND, &lock, LossReason::RecordGone)),
                Err(zk::Error::SessionExpired) => return Err(Error::lost(BACKEND, &lock, LossReason::SessionExpired)),
                Err(ref error) if is_loss(error) && session.is_alive() && signal.is_held() => {
                    last = error.clone();
                    reply = Box::pin(session.client.set_data(&path, data.as_bytes(), None));
                }
                Err(error) => return Err(session.error(error, Some(&lock))),
            }
        }
        Err(session.error(last, Some(&lock)).with_context(format!("write the lock node {path}")))
    })
}

/// Marks a granted permit's node as held, in the background, so that a waiter watching it as
/// its predecessor looks at the queue again (see the recipe module).
pub(crate) fn mark_held(session: &Arc<Session>, lock: &LockName, path: &str, record: &str, signal: &HoldSignal) {
    let write = write_own_node(session, lock, path, record::held(record), signal, "marked the permit node held");
    let path = path.to_owned();
    session.spawn_now(async move {
        if let Err(error) = write.await {
            tracing::debug!(backend = BACKEND, %path, %error, "could not mark the permit node held");
        }
    });
}

#[async_trait]
impl HeldLock for ZkHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        let span = tracing::debug_span!("lockkit.zk.release", lock = %self.lock, node = %self.path);
        async move {
            self.session.unregister(&self.path);
            let mut session = Arc::clone(&self.session);
            let mut retried = false;
            let mut last = Error::connection(BACKEND, Some(&self.lock), zk::Error::ConnectionLoss);
            for _ in 0..RETRIES {
                if session.is_cut_off() {
                    // The hold's session went with the runtime it ran on, and its node stays
                    // until the server expires the session: delete it from a live session.
                    tracing::debug!(backend = BACKEND, "the hold's session is gone; deleting its node from another");
                    session = live_session(&self.backend, &session, &self.lock).await?;
                }
                match session.client.delete(&self.path, None).await {
                    Ok(()) => return Ok(()),
                    // After a lost reply, our own earlier delete may have been the one.
                    Err(zk::Error::NoNode) if retried => return Ok(()),
                    Err(zk::Error::NoNode) => return Err(Error::lost(BACKEND, &self.lock, LossReason::RecordGone)),
                    Err(error) if is_loss(&error) => {
                        retried = true;
                        last = session.error(error, Some(&self.lock));
                    }
                    Err(zk::Error::SessionExpired) => {
                        return Err(Error::lost(BACKEND, &self.lock, LossReason::SessionExpired));
                    }
                    Err(zk::Error::ClientClosed) => {
                        return Err(Error::lost(BACKEND, &self.lock, LossReason::ClientClosed));
                    }
                    Err(error) => {
                        let error = session.error(error, Some(&self.lock));
                        if !session.is_cut_off() {
                            return Err(error);
                        }
                        // Try again from a live session.
                        last = error;
                    }
                }
            }
            Err(last.with_context(format!("delete the lock node {}", self.path)))
        }
        .instrument(span)
        .await
    }

    /// A write hold becomes a read hold in place: its node keeps its sequence (no writer
    /// queued behind it can get ahead) and its czxid (the token), and its data says `read`,
    /// which wakes the readers queued right behind it (they watch it as the last writer
    /// ahead of them) and lets them in. Writers queued behind still wait for it to go.
    fn downgrade(&self) -> Option<Pin<Box<dyn Future<Output = Result<()>> + Send + 'static>>> {
        if self.kind != NodeKind::Write {
            return None;
        }
        if !self.session.is_alive() {
            let lock = self.lock.clone();
            return Some(Box::pin(async move { Err(Error::lost(BACKEND, &lock, LossReason::ClientClosed)) }));
        }
        let span = tracing::debug_span!("lockkit.zk.downgrade", lock = %self.lock, node = %self.path);
        let data = record::downgraded(&self.record);
        let write = write_own_node(&self.session, &self.lock, &self.path, data, &self.signal, "downgraded to a read");
        Some(Box::pin(write.instrument(span)))
    }
}

/// Watches a granted hold's own node, when the session's recursive watch does not cover it (a
/// session with few holds, or a server before ZooKeeper 3.6): its deletion by someone else is
/// a loss. Ends when the hold ends; a
/// hold lost with its node still in place gets its node deleted. `watching` is a watch on the
/// node set before the grant (by the wait), used first. Ends too, at any point, once the
/// session's recursive watch takes the hold over (the session then follows it).
pub(crate) async fn watch_hold(session: Arc<Session>, path: Arc<str>, signal: HoldSignal, watching: Option<NodeEvent>) {
    let own = watch_own_node(Arc::clone(&session), Arc::clone(&path), signal, watching);
    tokio::select! {
        () = own => {}
        () = session.taken_over(&path) => {}
    }
}

/// The body of [`watch_hold`]: the hold's own watch.
async fn watch_own_node(session: Arc<Session>, path: Arc<str>, signal: HoldSignal, mut watching: Option<NodeEvent>) {
    // The task rests at the select below for as long as the hold lives, one task per hold: the
    // requests on the way (the watch, the clean-up) are boxed, so that what every hold keeps
    // is the resting state only.
    // Short holds end before the watch would be set: they cost no request at all. A deletion
    // in the first moments is found by the first `exists` (it answers "no node").
    if watching.is_none() && !Box::pin(sleep_while_held(&signal, WATCH_DELAY)).await {
        session.unregister(&path);
        Box::pin(free_lost_node(&session, &path, &signal)).await;
        return;
    }
    loop {
        let mut changed = match watching.take() {
            Some(watch) => watch,
            None => match Box::pin(watch_node(&session, &path, &signal)).await {
                Some(watch) => watch,
                None => break,
            },
        };
        let event = tokio::select! {
            event = &mut changed => event,
            end = signal.ended() => {
                if end == HoldEnd::Released {
                    // Let our own delete fire the watch rather than send a removal request.
                    let _ = tokio::time::timeout(RELEASE_GRACE, changed).await;
                }
                break;
            }
        };
        match event {
            Watched::Deleted => {
                signal.lose(LossReason::RecordGone);
                break;
            }
            Watched::SessionEnded(state) => {
                signal.lose(loss_for_state(state));
                break;
            }
            Watched::SessionGone => {
                session.mark_broken();
                signal.lose(LossReason::ClientClosed);
                break;
            }
            Watched::Changed => {}
        }
    }
    session.unregister(&path);
    Box::pin(free_lost_node(&session, &path, &signal)).await;
}

/// Sets an exists watch on a hold's node, retrying while the hold lives; `None` when the hold
/// ended (lost when the node is gone or the session ended).
async fn watch_node(session: &Session, path: &str, signal: &HoldSignal) -> Option<NodeEvent> {
    loop {
        match session.client.check_and_watch_stat(path).await {
            Ok((Some(_), watcher)) => return Some(node_event(watcher)),
            Ok((None, _)) => {
                signal.lose(LossReason::RecordGone);
                return None;
            }
            Err(ref error) if is_loss(error) => {
                if !signal.is_held() {
                    return None;
                }
            }
            Err(error) if !session.is_alive() || crate::error::is_connection(&error) || is_broken(session, &error) => {
                // Throttled, or the session ended: the session task reports the end of the
                // session; try again while the hold lives.
                if !session.is_alive() {
                    let state = session.client.state();
                    let reason = if state.is_terminated() { loss_for_state(state) } else { LossReason::ClientClosed };
                    signal.lose(reason);
                    return None;
                }
                if !sleep_while_held(signal, WATCH_RETRY).await {
                    return None;
                }
            }
            Err(error) => {
                // The hold stays registered (renewed); only the deletion watch is missing.
                tracing::warn!(backend = BACKEND, %path, %error, "cannot watch the lock node; retrying");
                if !sleep_while_held(signal, WATCH_RETRY).await {
                    return None;
                }
            }
        }
    }
}

/// Whether `error` shows the session cut off (see [`Session::error`]), marking it so.
fn is_broken(session: &Session, error: &zk::Error) -> bool {
    if matches!(error, zk::Error::UnexpectedError(_)) {
        session.mark_broken();
        return true;
    }
    false
}

/// A hold lost while its node may still exist (its deadline passed, or the disconnect policy
/// gave it up) must not keep blocking the queue until its guard is dropped: delete the node
/// (once the session answers again; a session that expired took the node with it).
async fn free_lost_node(session: &Session, path: &str, signal: &HoldSignal) {
    if let Some(reason) = signal.loss().filter(|reason| leaves_node(Some(reason))) {
        tracing::debug!(backend = BACKEND, %path, %reason, "deleting the node of a lost hold");
        session.delete_node(path).await;
    }
}

/// Sleeps `pause` unless the hold ends first; whether it is still held.
async fn sleep_while_held(signal: &HoldSignal, pause: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(pause) => signal.is_held(),
        _ = signal.ended() => false,
    }
}
