//! The lock recipe: an EPHEMERAL_SEQUENTIAL contender node per acquisition under the lock's
//! znode, the lowest sequence holds, each waiter watches the nodes ahead of it.
//!
//! # Round trips
//!
//! zookeeper-client sends a request when its future is *created*, and one session's requests
//! are answered in order. An acquisition therefore creates its node and lists the children
//! in one round trip (both requests are issued before either reply is awaited); on the first
//! acquisition of a name by this provider, the create of the lock's container znode joins
//! the same batch. Release is one delete.
//!
//! A waiter with at most [`WATCH_ALL_AHEAD`] nodes ahead of it sets a data watch on every one
//! of them, and on its own node, all requests in one round trip. Each deletion notification
//! (or "no node" reply) strikes one node off; when none is left, the waiter is first and is
//! granted with no list: sequences only grow, so no node can queue before it, and every node
//! that was before it is gone (a hand-off is one delete and one notification, however many
//! wait). The watch on its own node catches a node deleted behind its back (by an
//! administrator), which would otherwise be granted as a ghost while the waiter behind it,
//! seeing it gone, takes the lock too; any event on it lists again. Once granted, that watch
//! is the hold's deletion watch: it is never removed (a removal is a request, and one on the
//! hand-off path measurably slowed the release that follows); our own delete fires it. A
//! waiter further back watches only its predecessor and lists the children again when it
//! goes (it may have been a waiter that gave up while the nodes before it still wait).
//!
//! # Cancel safety
//!
//! From the moment its create is sent, an acquisition owns a [`PendingNode`]. Dropping it
//! (timeout, cancellation, `try_acquire` that lost, an error) deletes the node in the
//! background: by path when the create's reply arrived, otherwise by listing the children and
//! deleting the one that carries the attempt id (the list is sent after the create, so it
//! sees it). A grant that arrived while the future was being dropped is freed the same way.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use lockkit_core::backend::{AcquireRequest, Grant, HeldLock, HolderInfo, LockBackend, LockInfo};
use lockkit_core::{
    Capabilities, Deadline, Error, FencingToken, HoldEnd, HoldSignal, LockName, LossReason, OwnerMeta, Result,
};
use tokio::runtime::Handle;
use tracing::Instrument;
use uuid::Uuid;
use zookeeper_client as zk;

use crate::config::ZkConfig;
use crate::error::{BACKEND, is_loss, map};
use crate::names::{Contender, node_prefix, queue};
use crate::session::Session;

/// How many times one step is retried after a lost connection before giving up.
const RETRIES: usize = 8;

/// Up to how many nodes ahead of ours are all watched, so that the last one's deletion grants
/// the lock without listing the queue. Each watch costs the server one read when we queue and
/// one notification per deletion; watching everyone ahead at every depth would make a queue
/// of n waiters cost O(n²) reads and notifications. 16 covers the queues lockkit is tuned for
/// (a handful of contenders per lock) at a bounded 17 reads per wait; a deeper waiter watches
/// its predecessor alone and lists when it goes, and watches all once it is within the bound.
const WATCH_ALL_AHEAD: usize = 16;

/// How long the hold's watch task waits for the notification of our own delete after a
/// release, so that the watch ends by firing instead of by a removal request.
const RELEASE_GRACE: Duration = Duration::from_secs(5);

/// How long after the grant the hold's deletion watch is set, when the wait left none on the node.
const WATCH_DELAY: Duration = Duration::from_millis(20);

/// How long the hold's watch task waits before setting its watch again after an error.
const WATCH_RETRY: Duration = Duration::from_millis(500);

/// Lock parents this provider created or found, so that later acquisitions skip the create.
const KNOWN_PARENTS_LIMIT: usize = 4096;

/// The ZooKeeper backend: one provider's current session and the recipe.
pub(crate) struct ZkBackend {
    config: Arc<ZkConfig>,
    runtime: Handle,
    current: tokio::sync::Mutex<Arc<Session>>,
    known_parents: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkBackend")
            .field("hosts", &self.config.hosts)
            .field("root", &self.config.root)
            .finish_non_exhaustive()
    }
}

/// Fails at once when every server of the connect string refuses TCP connections.
/// zookeeper-client would otherwise keep trying until the session timeout; its eager mode
/// fails fast too, but also stops cycling through the servers on later reconnects. A server
/// that is slow to answer is left to the client.
async fn refuse_fast_when_no_server_listens(config: &ZkConfig) -> Result<()> {
    let wait = config.connect_timeout.unwrap_or(config.session_timeout / 5).min(Duration::from_secs(2));
    let mut refused = Vec::new();
    for host in config.hosts.split(',') {
        match tokio::time::timeout(wait, tokio::net::TcpStream::connect(host)).await {
            Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
                refused.push(format!("{host} ({error})"));
            }
            // Accepted, slow, or another failure (such as a name that does not resolve
            // yet): the client decides.
            _ => return Ok(()),
        }
    }
    Err(Error::connection(BACKEND, None, format!("no ZooKeeper server accepts connections: {}", refused.join(", "))))
}

impl ZkBackend {
    pub(crate) async fn open(config: ZkConfig) -> Result<ZkBackend> {
        let runtime = Handle::try_current().map_err(|_| {
            Error::invalid_config(
                BACKEND,
                "build the ZooKeeper provider inside a Tokio runtime (it runs the session there)",
            )
        })?;
        let config = Arc::new(config);
        refuse_fast_when_no_server_listens(&config).await?;
        let session = Session::open(config.clone(), runtime.clone()).await?;
        Ok(ZkBackend {
            config,
            runtime,
            current: tokio::sync::Mutex::new(session),
            known_parents: Mutex::new(HashSet::new()),
        })
    }

    pub(crate) fn config(&self) -> &ZkConfig {
        &self.config
    }

    /// The client of the live session.
    pub(crate) async fn zk_client(&self) -> Result<zk::Client> {
        Ok(self.session(None).await?.client.clone())
    }

    /// The live session, or a new one when the last has ended (expired or closed).
    async fn session(&self, lock: Option<&LockName>) -> Result<Arc<Session>> {
        let mut current = self.current.lock().await;
        if !current.is_ended() {
            return Ok(current.clone());
        }
        tracing::info!(backend = BACKEND, "the zk session ended; opening a new one");
        let fresh = Session::open(self.config.clone(), self.runtime.clone()).await.map_err(|e| match e {
            Error::Connection { source, .. } => Error::connection(BACKEND, lock, source),
            other => other,
        })?;
        *current = fresh.clone();
        self.parents().clear();
        Ok(fresh)
    }

    fn parents(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.known_parents.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn parent_known(&self, parent: &str) -> bool {
        self.parents().contains(parent)
    }

    fn remember_parent(&self, parent: &str, exists: bool) {
        let mut parents = self.parents();
        if !exists {
            parents.remove(parent);
            return;
        }
        if parents.len() >= KNOWN_PARENTS_LIMIT {
            parents.clear();
        }
        parents.insert(parent.to_owned());
    }

    /// Creates our contender node and lists the queue, in one round trip. Returns the node's
    /// path, its czxid, the children and the send time of the list.
    ///
    /// When this provider has not seen the lock's znode yet, its create joins the batch and
    /// the list is left out: a new lock's first node has sequence 0, which proves it is first
    /// (a sequence is the parent's child-change count, so no node came before it), and only a
    /// node with another sequence needs the list.
    async fn enqueue(
        &self,
        session: &Arc<Session>,
        lock: &LockName,
        parent: &str,
        pending: &mut PendingNode,
    ) -> Result<Enqueued> {
        let prefix = node_prefix(parent, pending.attempt);
        let client = &session.client;
        let node_options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&session.acls));
        let parent_options = zk::CreateMode::Container.with_acls(zk::Acls::new(&session.acls));
        // The node's data says who took it, for `inspect` and status displays.
        let owner = OwnerMeta::current(pending.attempt).encode();
        for _ in 0..RETRIES {
            let sent_at = Instant::now();
            // Each call below sends its request at once; the replies come back in this order.
            let known = self.parent_known(parent);
            let make_parent = (!known).then(|| client.create(parent, &[], &parent_options));
            let create = client.create(&prefix, owner.as_bytes(), &node_options);
            pending.sent = true;
            let list = known.then(|| client.list_children(parent));
            if let Some(make_parent) = make_parent {
                match make_parent.await {
                    Ok(_) | Err(zk::Error::NodeExists) => self.remember_parent(parent, true),
                    Err(zk::Error::NoNode) => {
                        // The base path itself is gone (deleted by an administrator): remake it.
                        self.make_root(session, lock).await?;
                        continue;
                    }
                    Err(ref error) if is_loss(error) => {}
                    Err(error) => return Err(map(error, Some(lock))),
                }
            }
            let (path, czxid, sequence) = match create.await {
                Ok((stat, sequence)) => (format!("{prefix}{sequence}"), stat.czxid, sequence.into_i64()),
                Err(zk::Error::NoNode) => {
                    // The container was deleted by the server when empty: make it again.
                    self.remember_parent(parent, false);
                    continue;
                }
                Err(ref error) if is_loss(error) => {
                    // The create may or may not have happened: look for our node by attempt id.
                    match self.find_own(session, lock, parent, pending.attempt).await? {
                        Some((path, czxid, children, listed_at)) => {
                            pending.path = Some(path.clone());
                            return Ok(Enqueued { path, czxid, children, listed_at });
                        }
                        None => continue,
                    }
                }
                Err(error) => return Err(map(error, Some(lock))),
            };
            pending.path = Some(path.clone());
            let czxid = if czxid > 0 { czxid } else { self.czxid_of(session, lock, &path).await? };
            let listed = match list {
                Some(list) => list.await.ok(),
                None if sequence == 0 => {
                    let own = path.rsplit('/').next().unwrap_or_default().to_owned();
                    Some(vec![own])
                }
                None => None,
            };
            let (children, listed_at) = match listed {
                Some(children) => (children, sent_at),
                None => self.list(session, lock, parent).await?,
            };
            return Ok(Enqueued { path, czxid, children, listed_at });
        }
        Err(Error::connection(BACKEND, Some(lock), "could not create the lock node: the connection kept failing"))
    }

    async fn make_root(&self, session: &Session, lock: &LockName) -> Result<()> {
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&session.acls));
        session.client.mkdir(&self.config.root, &options).await.map_err(|e| map(e, Some(lock)))
    }

    /// Lists the children, retrying on lost connections; returns them and the send time.
    async fn list(&self, session: &Session, lock: &LockName, parent: &str) -> Result<(Vec<String>, Instant)> {
        let mut last = zk::Error::ConnectionLoss;
        for _ in 0..RETRIES {
            let sent_at = Instant::now();
            match session.client.list_children(parent).await {
                Ok(children) => return Ok((children, sent_at)),
                Err(zk::Error::NoNode) => return Ok((Vec::new(), sent_at)),
                Err(error) if is_loss(&error) => last = error,
                Err(error) => return Err(map(error, Some(lock))),
            }
        }
        Err(map(last, Some(lock)))
    }

    async fn czxid_of(&self, session: &Session, lock: &LockName, path: &str) -> Result<i64> {
        for _ in 0..RETRIES {
            match session.client.check_stat(path).await {
                Ok(Some(stat)) => return Ok(stat.czxid),
                Ok(None) => return Err(Error::lost(BACKEND, lock, LossReason::RecordGone)),
                Err(ref error) if is_loss(error) => continue,
                Err(error) => return Err(map(error, Some(lock))),
            }
        }
        Err(Error::connection(BACKEND, Some(lock), "could not read the lock node: the connection kept failing"))
    }

    /// After a create whose reply was lost: finds our node among the children by attempt id.
    async fn find_own(
        &self,
        session: &Session,
        lock: &LockName,
        parent: &str,
        attempt: Uuid,
    ) -> Result<Option<(String, i64, Vec<String>, Instant)>> {
        let (children, listed_at) = self.list(session, lock, parent).await?;
        let Some(own) = queue(&children).into_iter().find(|c| c.attempt == attempt) else {
            tracing::debug!(backend = BACKEND, %lock, "the lost create did not happen; creating again");
            return Ok(None);
        };
        let path = format!("{parent}/{}", own.name);
        tracing::debug!(backend = BACKEND, %lock, %path, "found our node after a lost create reply");
        match self.czxid_of(session, lock, &path).await {
            Ok(czxid) => Ok(Some((path, czxid, children, listed_at))),
            Err(Error::LockLost { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    async fn acquire_in(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        let lock = &request.lock;
        let session = self.session(Some(lock)).await?;
        let parent = self.config.lock_path(lock);
        let mut pending = PendingNode::new(session.clone(), parent.clone(), request.attempt);
        let Enqueued { mut path, mut czxid, mut children, mut listed_at } =
            self.enqueue(&session, lock, &parent, &mut pending).await?;
        loop {
            let queue = queue(&children);
            let Some(position) = queue.iter().position(|c| c.attempt == request.attempt) else {
                // Our node vanished while we waited (deleted by an administrator): queue again.
                tracing::debug!(backend = BACKEND, %lock, "our queued node vanished; queueing again");
                pending.path = None;
                Enqueued { path, czxid, children, listed_at } =
                    self.enqueue(&session, lock, &parent, &mut pending).await?;
                continue;
            };
            if position == 0 {
                return self.grant(&session, lock, &mut pending, path, czxid, listed_at, None).map(Some);
            }
            if !request.deadline.may_wait() {
                pending.delete_now().await;
                return Ok(None);
            }
            // Within the bound, watch every node ahead (and our own): when all of them are gone
            // we are first. Further back, watch the predecessor and list when it goes.
            let watch_all = position <= WATCH_ALL_AHEAD;
            let ahead = if watch_all { &queue[..position] } else { &queue[position - 1..position] };
            let ahead: Vec<String> = ahead.iter().map(|c| format!("{parent}/{}", c.name)).collect();
            let own = watch_all.then_some(path.as_str());
            let span = tracing::debug_span!(
                "lockkit.zk.wait",
                lock = %lock,
                predecessor = ahead.last().map_or("", String::as_str),
                watched = ahead.len(),
            );
            let waited = self.wait_for(&session, lock, &ahead, own, request.deadline).instrument(span).await?;
            match waited {
                Waited::DeadlinePassed => {
                    pending.delete_now().await;
                    return Ok(None);
                }
                Waited::AheadGone { confirmed, own_watch }
                    if watch_all && confirmed.elapsed() < session.timeout / 3 =>
                {
                    // Every node that was ahead of ours is gone, and none can join before ours
                    // (sequences only grow): we are first, and the hand-off needs no list.
                    // `confirmed` (the watches' send time) also dates the session's liveness;
                    // a wait that outlived a third of the session timeout lists instead, which
                    // confirms it afresh.
                    return self.grant(&session, lock, &mut pending, path, czxid, confirmed, own_watch).map(Some);
                }
                Waited::AheadGone { .. } | Waited::Changed => {
                    (children, listed_at) = self.list(&session, lock, &parent).await?;
                }
            }
        }
    }

    /// Sets a data watch on each of `ahead` and on `own` (all requests in one round trip), and
    /// waits until every node of `ahead` is gone, something else happens to one of them or to
    /// `own`, or the deadline comes. The watch on `own` comes back with [`Waited::AheadGone`],
    /// still set, for the hold to use as its deletion watch (dropping it would cost a request
    /// to remove it).
    async fn wait_for(
        &self,
        session: &Session,
        lock: &LockName,
        ahead: &[String],
        own: Option<&str>,
        deadline: Deadline,
    ) -> Result<Waited> {
        let client = &session.client;
        // The watches on nodes ahead that still exist, and the one on our own node.
        let mut watches: Vec<NodeEvent> = Vec::with_capacity(ahead.len());
        let mut own_watch: Option<NodeEvent> = None;
        let mut own_gone = false;
        let mut unwatched: Vec<(&str, bool)> = ahead.iter().map(|path| (path.as_str(), true)).collect();
        unwatched.extend(own.map(|path| (path, false)));
        let mut confirmed = Instant::now();
        let mut rounds = 0;
        while !unwatched.is_empty() {
            rounds += 1;
            if rounds > RETRIES {
                return Err(Error::connection(
                    BACKEND,
                    Some(lock),
                    "could not watch the queue: the connection kept failing",
                ));
            }
            confirmed = Instant::now();
            // A data watch, unlike an exists watch, is not left behind on a node already gone.
            // Every request is sent here, before any reply is awaited.
            let requests: Vec<_> =
                unwatched.iter().map(|&(path, is_ahead)| (path, is_ahead, client.get_and_watch_data(path))).collect();
            let mut failed = Vec::new();
            for (path, is_ahead, request) in requests {
                match request.await {
                    Ok((_, _, watcher)) if is_ahead => watches.push(Box::pin(watcher.changed())),
                    Ok((_, _, watcher)) => own_watch = Some(Box::pin(watcher.changed())),
                    // A node ahead already gone is struck off; our own gone means look again
                    // (once every reply is in).
                    Err(zk::Error::NoNode) if is_ahead => {}
                    Err(zk::Error::NoNode) => own_gone = true,
                    Err(ref error) if is_loss(error) => failed.push((path, is_ahead)),
                    Err(error) => return Err(map(error, Some(lock))),
                }
            }
            unwatched = failed;
        }
        if own_gone {
            return Ok(Waited::Changed);
        }
        while !watches.is_empty() {
            // Our own node first: notifications come in the order of the changes, so when our
            // node went before the last node ahead, its event is ready too and must win.
            let event = tokio::select! {
                biased;
                event = own_event(&mut own_watch) => (event, false),
                event = next_event(&mut watches) => event,
                () = sleep_until(deadline) => return Ok(Waited::DeadlinePassed),
            };
            match event {
                (event, _) if event.event_type == zk::EventType::Session => {
                    return Err(Error::connection(
                        BACKEND,
                        Some(lock),
                        format!("the session ended while waiting: {:?}", event.session_state),
                    ));
                }
                // One node ahead fewer.
                (event, true) if event.event_type == zk::EventType::NodeDeleted => {}
                _ => return Ok(Waited::Changed),
            }
        }
        Ok(Waited::AheadGone { confirmed, own_watch })
    }

    /// Turns our node, now first in the queue, into a hold: its czxid is the token, the
    /// pending node is kept, and the session renews and watches it from here on (with
    /// `own_watch`, when the wait left one on the node).
    #[allow(clippy::too_many_arguments)]
    fn grant(
        &self,
        session: &Arc<Session>,
        lock: &LockName,
        pending: &mut PendingNode,
        path: String,
        czxid: i64,
        confirmed: Instant,
        own_watch: Option<NodeEvent>,
    ) -> Result<Grant> {
        let token = u64::try_from(czxid)
            .map_err(|_| Error::backend(BACKEND, Some(lock), format!("the lock node has an invalid czxid {czxid}")))?;
        pending.disarm();
        let signal = HoldSignal::new(BACKEND, lock.clone(), Some(session.deadline_from(confirmed)));
        let id = session.register(signal.clone());
        session.spawn_now(watch_hold(session.clone(), id, path.clone(), signal.clone(), own_watch));
        let held = ZkHeld { session: session.clone(), id, path, lock: lock.clone() };
        Ok(Grant::new(FencingToken::new(token), signal, Box::new(held)))
    }
}

/// How a wait for the predecessor ended.
enum Waited {
    /// The acquisition's deadline came first.
    DeadlinePassed,
    /// Every watched node ahead of ours is gone. The session was alive when the requests that
    /// watched them (or found them gone) were sent, at `confirmed`. `own_watch` is the data
    /// watch on our own node, if one was set; it has not fired.
    AheadGone { confirmed: Instant, own_watch: Option<NodeEvent> },
    /// Something else happened to a watched node: look at the queue again.
    Changed,
}

/// A data watch's event, pending: one on a node ahead in [`ZkBackend::wait_for`], or the one
/// on our own node, which becomes the hold's deletion watch.
type NodeEvent = std::pin::Pin<Box<dyn std::future::Future<Output = zk::WatchedEvent> + Send>>;

/// The first event of any of `watches` (whose watch is then removed from the list), with
/// `true` for "a node ahead". Pending for ever when the list is empty.
fn next_event(watches: &mut Vec<NodeEvent>) -> impl std::future::Future<Output = (zk::WatchedEvent, bool)> + '_ {
    std::future::poll_fn(move |cx| {
        for index in 0..watches.len() {
            if let std::task::Poll::Ready(event) = watches[index].as_mut().poll(cx) {
                drop(watches.swap_remove(index));
                return std::task::Poll::Ready((event, true));
            }
        }
        std::task::Poll::Pending
    })
}

/// The event of the watch on our own node; pending for ever without one. Not polled again
/// once it is ready: [`ZkBackend::wait_for`] returns at its first event.
fn own_event(watch: &mut Option<NodeEvent>) -> impl std::future::Future<Output = zk::WatchedEvent> + '_ {
    std::future::poll_fn(move |cx| match watch {
        Some(watch) => watch.as_mut().poll(cx),
        None => std::task::Poll::Pending,
    })
}

struct Enqueued {
    path: String,
    czxid: i64,
    children: Vec<String>,
    listed_at: Instant,
}

async fn sleep_until(deadline: Deadline) {
    match deadline {
        Deadline::At(at) => tokio::time::sleep_until(at.into()).await,
        Deadline::Now => {}
        Deadline::Never => std::future::pending().await,
    }
}

/// Watches a granted hold's own node: its deletion by someone else is a loss. Ends when the
/// hold ends; a hold lost with its node still in place gets its node deleted. `watching` is a
/// watch on the node set before the grant (by the wait), used first.
async fn watch_hold(session: Arc<Session>, id: u64, path: String, signal: HoldSignal, mut watching: Option<NodeEvent>) {
    // Short holds end before the watch would be set: they cost no request at all. A deletion
    // in the first moments is found by the first `exists` (it answers "no node").
    if watching.is_none() && !sleep_while_held(&signal, WATCH_DELAY).await {
        session.unregister(id);
        free_lost_node(&session, &path, &signal).await;
        return;
    }
    loop {
        let mut changed = match watching.take() {
            Some(watch) => watch,
            None => match watch_node(&session, &path, &signal).await {
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
        match event.event_type {
            zk::EventType::NodeDeleted => {
                signal.lose(LossReason::RecordGone);
                break;
            }
            zk::EventType::Session => {
                signal.lose(crate::error::loss_for_state(event.session_state));
                break;
            }
            _ => {}
        }
    }
    session.unregister(id);
    free_lost_node(&session, &path, &signal).await;
}

/// Sets an exists watch on a hold's node, retrying while the hold lives; `None` when the hold
/// ended (lost when the node is gone or the session ended).
async fn watch_node(session: &Session, path: &str, signal: &HoldSignal) -> Option<NodeEvent> {
    loop {
        match session.client.check_and_watch_stat(path).await {
            Ok((Some(_), watcher)) => return Some(Box::pin(watcher.changed())),
            Ok((None, _)) => {
                signal.lose(LossReason::RecordGone);
                return None;
            }
            Err(ref error) if is_loss(error) => {
                if !signal.is_held() {
                    return None;
                }
            }
            Err(error) if crate::error::is_connection(&error) => {
                // Throttled or a terminal session error: the session task reports the end
                // of the session; try again while the hold lives.
                if session.is_ended() {
                    signal.lose(crate::error::loss_for_state(session.client.state()));
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

/// A hold lost while its node may still exist (its deadline passed, or the disconnect policy
/// gave it up) must not keep blocking the queue until its guard is dropped: delete the node
/// (once the session answers again; a session that expired took the node with it).
async fn free_lost_node(session: &Session, path: &str, signal: &HoldSignal) {
    match signal.loss() {
        Some(LossReason::RecordGone | LossReason::SessionExpired | LossReason::ClientClosed) | None => {}
        Some(reason) => {
            tracing::debug!(backend = BACKEND, %path, %reason, "deleting the node of a lost hold");
            delete_node(session, path).await;
        }
    }
}

/// Sleeps `pause` unless the hold ends first; whether it is still held.
async fn sleep_while_held(signal: &HoldSignal, pause: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(pause) => signal.is_held(),
        _ = signal.ended() => false,
    }
}

/// The contender node of an acquisition in progress; dropping it armed deletes the node in
/// the background.
struct PendingNode {
    session: Arc<Session>,
    parent: String,
    attempt: Uuid,
    /// The node's path, once a create reply told it.
    path: Option<String>,
    /// Whether a create was sent at all.
    sent: bool,
    armed: bool,
}

impl PendingNode {
    fn new(session: Arc<Session>, parent: String, attempt: Uuid) -> Self {
        Self { session, parent, attempt, path: None, sent: false, armed: true }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    /// Deletes the node now and waits for it (a try that lost, a timeout): no trace is left
    /// when the acquisition returns. Dropped midway, the drop finishes the job.
    async fn delete_now(&mut self) {
        if let Some(path) = &self.path {
            match self.session.client.delete(path, None).await {
                Ok(()) | Err(zk::Error::NoNode) => self.armed = false,
                Err(_) => {}
            }
        }
    }
}

impl Drop for PendingNode {
    fn drop(&mut self) {
        if !self.armed || !self.sent {
            return;
        }
        let session = self.session.clone();
        let (parent, attempt, path) = (self.parent.clone(), self.attempt, self.path.take());
        let task = async move { remove_node(&session, &parent, attempt, path.as_deref()).await };
        self.session.spawn_now(task);
    }
}

/// Deletes an abandoned contender node: by path when known, else by attempt id among the
/// children.
async fn remove_node(session: &Session, parent: &str, attempt: Uuid, path: Option<&str>) {
    if let Some(path) = path {
        return delete_node(session, path).await;
    }
    for _ in 0..RETRIES {
        match session.client.list_children(parent).await {
            Ok(children) => {
                if let Some(Contender { name, .. }) = queue(&children).into_iter().find(|c| c.attempt == attempt) {
                    delete_node(session, &format!("{parent}/{name}")).await;
                }
                return;
            }
            Err(ref error) if is_loss(error) => continue,
            Err(_) => return,
        }
    }
}

/// Deletes one of our nodes, retrying while the connection breaks; a missing node is fine.
async fn delete_node(session: &Session, path: &str) {
    for _ in 0..RETRIES {
        match session.client.delete(path, None).await {
            Err(ref error) if is_loss(error) => continue,
            Ok(()) => {
                tracing::debug!(backend = BACKEND, %path, "deleted an abandoned or lost node");
                return;
            }
            Err(_) => return,
        }
    }
}

/// One granted hold: its node, freed by one delete.
struct ZkHeld {
    session: Arc<Session>,
    id: u64,
    path: String,
    lock: LockName,
}

#[async_trait]
impl HeldLock for ZkHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        let span = tracing::debug_span!("lockkit.zk.release", lock = %self.lock, node = %self.path);
        async move {
            self.session.unregister(self.id);
            let mut retried = false;
            for _ in 0..RETRIES {
                match self.session.client.delete(&self.path, None).await {
                    Ok(()) => return Ok(()),
                    // After a lost reply, our own earlier delete may have been the one.
                    Err(zk::Error::NoNode) if retried => return Ok(()),
                    Err(zk::Error::NoNode) => return Err(Error::lost(BACKEND, &self.lock, LossReason::RecordGone)),
                    Err(ref error) if is_loss(error) => retried = true,
                    Err(zk::Error::SessionExpired) => {
                        return Err(Error::lost(BACKEND, &self.lock, LossReason::SessionExpired));
                    }
                    Err(zk::Error::ClientClosed) => {
                        return Err(Error::lost(BACKEND, &self.lock, LossReason::ClientClosed));
                    }
                    Err(error) => return Err(map(error, Some(&self.lock))),
                }
            }
            Err(Error::connection(
                BACKEND,
                Some(&self.lock),
                "could not delete the lock node: the connection kept failing",
            ))
        }
        .instrument(span)
        .await
    }
}

#[async_trait]
impl LockBackend for ZkBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fair: true,
            fencing: true,
            fencing_survives_restart: true,
            lease: true,
            lease_renewal: true,
            loss_notification: true,
            inspect: true,
            waiter_count: true,
            cross_process: true,
        }
    }

    async fn acquire(&self, request: AcquireRequest) -> Result<Option<Grant>> {
        let span = tracing::debug_span!("lockkit.zk.acquire", lock = %request.lock, attempt = %request.attempt);
        self.acquire_in(&request).instrument(span).await
    }

    async fn inspect(&self, lock: &LockName) -> Result<LockInfo> {
        let session = self.session(Some(lock)).await?;
        let parent = self.config.lock_path(lock);
        for _ in 0..RETRIES {
            let (children, _) = self.list(&session, lock, &parent).await?;
            let queue = queue(&children);
            let Some(first) = queue.first() else { return Ok(LockInfo::new(None, Some(0))) };
            let path = format!("{parent}/{}", first.name);
            let (data, stat) = match session.client.get_data(&path).await {
                Ok(found) => found,
                Err(zk::Error::NoNode) => continue,
                Err(ref error) if is_loss(error) => continue,
                Err(error) => return Err(map(error, Some(lock))),
            };
            let token = FencingToken::new(u64::try_from(stat.czxid).unwrap_or(0));
            let meta = std::str::from_utf8(&data).ok().and_then(OwnerMeta::decode);
            let holder = match meta {
                Some(meta) => meta.holder(token),
                None => {
                    let holder = HolderInfo::new(token, first.attempt.to_string());
                    match u64::try_from(stat.ctime) {
                        Ok(ms) => holder.with_since(SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
                        Err(_) => holder,
                    }
                }
            };
            return Ok(LockInfo::new(Some(holder), Some(queue.len() - 1)));
        }
        Err(Error::connection(BACKEND, Some(lock), "the lock's queue kept changing while inspecting it"))
    }
}
