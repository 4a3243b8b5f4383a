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

use std::sync::Arc;
use std::time::Instant;

use lockkit_core::backend::{AcquireRequest, Deadline, Grant, HoldSignal, OwnerMeta};
use lockkit_core::{Error, FencingToken, LockName, LossReason, Result};
use tracing::Instrument;
use uuid::Uuid;
use zookeeper_client as zk;

use crate::backend::ZkBackend;
use crate::error::{BACKEND, Failure, is_loss, map, state_error};
use crate::hold::{NodeEvent, PendingNode, RETRIES, Watched, node_event, watch_hold};
use crate::names::{node_prefix, queue};
use crate::session::{Session, remake_root};

/// Up to how many nodes ahead of ours are all watched, so that the last one's deletion grants
/// the lock without listing the queue. Each watch costs the server one read when we queue and
/// one notification per deletion; watching everyone ahead at every depth would make a queue
/// of n waiters cost O(n²) reads and notifications. 16 covers the queues lockkit is tuned for
/// (a handful of contenders per lock) at a bounded 17 reads per wait; a deeper waiter watches
/// its predecessor alone and lists when it goes, and watches all once it is within the bound.
const WATCH_ALL_AHEAD: usize = 16;

/// Our contender node, once created: its path and creation zxid (the fencing token).
struct OwnNode {
    path: String,
    czxid: i64,
}

/// Our node and the queue as a list sent at `listed_at` saw it.
struct Enqueued {
    node: OwnNode,
    children: Vec<String>,
    listed_at: Instant,
}

/// How a wait for the nodes ahead ended.
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

impl ZkBackend {
    /// One acquisition on `session`: queue a node, wait until it is first (as the deadline
    /// allows), and turn it into a hold. `reached` is set once the store answered.
    pub(crate) async fn acquire_in(
        &self,
        session: &Arc<Session>,
        request: &AcquireRequest,
        attempt: Uuid,
        reached: &mut bool,
    ) -> Result<Option<Grant>> {
        let lock = &request.lock;
        let parent = self.config.lock_path(lock);
        let mut pending = PendingNode::new(self.me.clone(), Arc::clone(session), lock.clone(), parent.clone(), attempt);
        let Enqueued { mut node, mut children, mut listed_at } = self.enqueue(session, &mut pending).await?;
        *reached = true;
        request.note_reached();
        loop {
            let queue = queue(&children);
            let Some(position) = queue.iter().position(|c| c.attempt == attempt) else {
                // Our node vanished while we waited (deleted by an administrator): queue again.
                tracing::debug!(backend = BACKEND, %lock, "our queued node vanished; queueing again");
                pending.path = None;
                Enqueued { node, children, listed_at } = self.enqueue(session, &mut pending).await?;
                continue;
            };
            if position == 0 {
                return self.grant(session, pending, node, listed_at, None).map(Some);
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
            let own = watch_all.then_some(node.path.as_str());
            let span = tracing::debug_span!(
                "lockkit.zk.wait",
                lock = %lock,
                predecessor = ahead.last().map_or("", String::as_str),
                watched = ahead.len(),
            );
            let waited = self.wait_for(session, lock, &ahead, own, request.deadline).instrument(span).await?;
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
                    return self.grant(session, pending, node, confirmed, own_watch).map(Some);
                }
                Waited::AheadGone { .. } | Waited::Changed => {
                    (children, listed_at) = self.list(session, lock, &parent).await?;
                }
            }
        }
    }

    /// Creates our contender node and lists the queue, in one round trip. Returns the node,
    /// the children and the send time of the list.
    ///
    /// When this provider has not seen the lock's znode yet, its create joins the batch and
    /// the list is left out: a new lock's first node has sequence 0, which proves it is first
    /// (a sequence is the parent's child-change count, so no node came before it), and only a
    /// node with another sequence needs the list.
    async fn enqueue(&self, session: &Arc<Session>, pending: &mut PendingNode) -> Result<Enqueued> {
        let (lock, parent) = (pending.lock.clone(), pending.parent.clone());
        let prefix = node_prefix(&parent, pending.attempt);
        let client = &session.client;
        let node_options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&session.acls));
        let parent_options = zk::CreateMode::Container.with_acls(zk::Acls::new(&session.acls));
        // The node's data says who took it, for `inspect` and status displays.
        let owner = OwnerMeta::current(pending.attempt).encode();
        let mut last = zk::Error::ConnectionLoss;
        for _ in 0..RETRIES {
            let sent_at = Instant::now();
            // Each call below sends its request at once; the replies come back in this order.
            let known = self.parent_known(&parent);
            let make_parent = (!known).then(|| client.create(&parent, &[], &parent_options));
            let create = client.create(&prefix, owner.as_bytes(), &node_options);
            pending.sent = true;
            let list = known.then(|| client.list_children(&parent));
            if let Some(make_parent) = make_parent {
                match make_parent.await {
                    Ok(_) | Err(zk::Error::NodeExists) => self.remember_parent(&parent, true),
                    Err(zk::Error::NoNode) => {
                        // The base path itself is gone (deleted by an administrator): remake it.
                        remake_root(session, &lock).await?;
                        continue;
                    }
                    Err(ref error) if is_loss(error) => {}
                    Err(error) => return Err(session.error(error, Some(&lock))),
                }
            }
            let (path, czxid, sequence) = match create.await {
                Ok((stat, sequence)) => (format!("{prefix}{sequence}"), stat.czxid, sequence.into_i64()),
                Err(zk::Error::NoNode) => {
                    // The container was deleted by the server when empty: make it again.
                    self.remember_parent(&parent, false);
                    continue;
                }
                Err(error) if is_loss(&error) => {
                    // The create may or may not have happened: look for our node by attempt id.
                    match self.find_own(session, &lock, &parent, pending.attempt).await? {
                        Some(found) => {
                            pending.path = Some(found.node.path.clone());
                            return Ok(found);
                        }
                        None => {
                            last = error;
                            continue;
                        }
                    }
                }
                Err(error) => return Err(session.error(error, Some(&lock))),
            };
            pending.path = Some(path.clone());
            let czxid = if czxid > 0 { czxid } else { self.czxid_of(session, &lock, &path).await? };
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
                None => self.list(session, &lock, &parent).await?,
            };
            return Ok(Enqueued { node: OwnNode { path, czxid }, children, listed_at });
        }
        Err(session.error(last, Some(&lock)).with_context("create the lock node"))
    }

    /// Lists the children, retrying on lost connections; returns them and the send time.
    pub(crate) async fn list(
        &self,
        session: &Session,
        lock: &LockName,
        parent: &str,
    ) -> Result<(Vec<String>, Instant)> {
        let mut last = zk::Error::ConnectionLoss;
        for _ in 0..RETRIES {
            let sent_at = Instant::now();
            match session.client.list_children(parent).await {
                Ok(children) => return Ok((children, sent_at)),
                Err(zk::Error::NoNode) => return Ok((Vec::new(), sent_at)),
                Err(error) if is_loss(&error) => last = error,
                Err(error) => return Err(session.error(error, Some(lock))),
            }
        }
        Err(session.error(last, Some(lock)).with_context("list the lock's queue"))
    }

    /// The stat of a node, `None` when it does not exist; retries on lost connections.
    async fn stat_of(&self, session: &Session, lock: &LockName, path: &str) -> Result<Option<zk::Stat>> {
        let mut last = zk::Error::ConnectionLoss;
        for _ in 0..RETRIES {
            match session.client.check_stat(path).await {
                Ok(stat) => return Ok(stat),
                Err(error) if is_loss(&error) => last = error,
                Err(error) => return Err(session.error(error, Some(lock))),
            }
        }
        Err(session.error(last, Some(lock)).with_context("read the lock node"))
    }

    async fn czxid_of(&self, session: &Session, lock: &LockName, path: &str) -> Result<i64> {
        match self.stat_of(session, lock, path).await? {
            Some(stat) => Ok(stat.czxid),
            None => Err(Error::lost(BACKEND, lock, LossReason::RecordGone)),
        }
    }

    /// After a create whose reply was lost: finds our node among the children by attempt id,
    /// if this session owns it.
    async fn find_own(
        &self,
        session: &Session,
        lock: &LockName,
        parent: &str,
        attempt: Uuid,
    ) -> Result<Option<Enqueued>> {
        let (children, listed_at) = self.list(session, lock, parent).await?;
        let Some(own) = queue(&children).into_iter().find(|c| c.attempt == attempt) else {
            tracing::debug!(backend = BACKEND, %lock, "the lost create did not happen; creating again");
            return Ok(None);
        };
        let path = format!("{parent}/{}", own.name);
        match self.stat_of(session, lock, &path).await? {
            Some(stat) if stat.ephemeral_owner == session.client.session_id().0 => {
                tracing::debug!(backend = BACKEND, %lock, %path, "found our node after a lost create reply");
                Ok(Some(Enqueued { node: OwnNode { path, czxid: stat.czxid }, children, listed_at }))
            }
            // Gone meanwhile, or left by another session (which dies with it): create anew.
            _ => Ok(None),
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
        let mut last = zk::Error::ConnectionLoss;
        let mut rounds = 0;
        while !unwatched.is_empty() {
            rounds += 1;
            if rounds > RETRIES {
                return Err(session.error(last, Some(lock)).with_context("watch the nodes ahead"));
            }
            confirmed = Instant::now();
            // A data watch, unlike an exists watch, is not left behind on a node already gone.
            // Every request is sent here, before any reply is awaited.
            let requests: Vec<_> =
                unwatched.iter().map(|&(path, is_ahead)| (path, is_ahead, client.get_and_watch_data(path))).collect();
            let mut failed = Vec::new();
            for (path, is_ahead, request) in requests {
                match request.await {
                    Ok((_, _, watcher)) if is_ahead => watches.push(node_event(watcher)),
                    Ok((_, _, watcher)) => own_watch = Some(node_event(watcher)),
                    // A node ahead already gone is struck off; our own gone means look again
                    // (once every reply is in).
                    Err(zk::Error::NoNode) if is_ahead => {}
                    Err(zk::Error::NoNode) => own_gone = true,
                    Err(error) if is_loss(&error) => {
                        last = error;
                        failed.push((path, is_ahead));
                    }
                    Err(error) => return Err(session.error(error, Some(lock))),
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
            let (event, is_ahead) = tokio::select! {
                biased;
                event = own_event(&mut own_watch) => (event, false),
                event = next_event(&mut watches) => (event, true),
                () = sleep_until(deadline) => return Ok(Waited::DeadlinePassed),
            };
            match event {
                Watched::SessionEnded(state) => {
                    return Err(map(state_error(state), Some(lock)).with_context("wait for the nodes ahead"));
                }
                Watched::SessionGone => {
                    session.mark_broken();
                    return Err(Error::connection(BACKEND, Some(lock), Failure::RuntimeGone)
                        .with_context("wait for the nodes ahead"));
                }
                // One node ahead fewer.
                Watched::Deleted if is_ahead => {}
                Watched::Deleted | Watched::Changed => return Ok(Waited::Changed),
            }
        }
        Ok(Waited::AheadGone { confirmed, own_watch })
    }

    /// Turns our node, now first in the queue, into a hold: its czxid is the token, the
    /// pending node is kept, and the session renews and watches it from here on (with
    /// `own_watch`, when the wait left one on the node).
    fn grant(
        &self,
        session: &Arc<Session>,
        pending: PendingNode,
        node: OwnNode,
        confirmed: Instant,
        own_watch: Option<NodeEvent>,
    ) -> Result<Grant> {
        let lock = pending.lock.clone();
        let token = u64::try_from(node.czxid)
            .map_err(|_| Error::backend(BACKEND, Some(&lock), Failure::InvalidCzxid(node.czxid)))?;
        let signal = HoldSignal::new(BACKEND, lock, Some(session.deadline_from(confirmed)));
        let id = session.register(signal.clone());
        let held = pending.into_held(id, node.path.clone());
        session.spawn_now(watch_hold(Arc::clone(session), id, node.path, signal.clone(), own_watch));
        Ok(Grant::new(FencingToken::new(token), signal, Box::new(held)))
    }
}

/// The first event of any of `watches` (whose watch is then removed from the list). Pending
/// for ever when the list is empty.
fn next_event(watches: &mut Vec<NodeEvent>) -> impl std::future::Future<Output = Watched> + '_ {
    std::future::poll_fn(move |cx| {
        for index in 0..watches.len() {
            if let std::task::Poll::Ready(event) = watches[index].as_mut().poll(cx) {
                drop(watches.swap_remove(index));
                return std::task::Poll::Ready(event);
            }
        }
        std::task::Poll::Pending
    })
}

/// The event of the watch on our own node; pending for ever without one. Not polled again
/// once it is ready: [`ZkBackend::wait_for`] returns at its first event.
fn own_event(watch: &mut Option<NodeEvent>) -> impl std::future::Future<Output = Watched> + '_ {
    std::future::poll_fn(move |cx| match watch {
        Some(watch) => watch.as_mut().poll(cx),
        None => std::task::Poll::Pending,
    })
}

async fn sleep_until(deadline: Deadline) {
    match deadline {
        Deadline::At(at) => tokio::time::sleep_until(at.into()).await,
        Deadline::Now => {}
        Deadline::Never => std::future::pending().await,
    }
}
