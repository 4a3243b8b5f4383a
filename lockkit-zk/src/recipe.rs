//! The recipes: an EPHEMERAL_SEQUENTIAL contender node per acquisition under the lock's znode,
//! named with what it asks for (see the names module); whether a node holds follows from the
//! nodes ahead of it (judge.rs), and a waiter watches a bounded set of them.
//!
//! Queue order is arrival order, so every kind is fair: a reader that arrives after a queued
//! writer waits behind it, and permits go to waiters in turn.
//!
//! # Round trips
//!
//! zookeeper-client sends a request when its future is *created*, and one session's requests
//! are answered in order. An acquisition therefore creates its node and lists the children
//! in one round trip (both requests are issued before either reply is awaited); on the first
//! acquisition of a name by this provider, the create of the lock's container znode joins
//! the same batch. Release is one delete.
//!
//! # What a waiter watches
//!
//! A data watch (`getData`, never `exists`, so that no watch is left on a node already gone)
//! on a few nodes ahead, never on the parent's children (no herd effect):
//!
//! - A mutex, writer or candidate with at most [`WATCH_ALL_AHEAD`](crate::judge::WATCH_ALL_AHEAD) nodes ahead watches every
//!   one of them, and its own node, all requests in one round trip. Each deletion
//!   notification (or "no node" reply) strikes one node off; when none is left, the waiter
//!   holds with no list:
//!   sequences only grow, so no node can queue before it, and every node that was before it is
//!   gone (a hand-off is one delete and one notification, however many wait). The watch on its
//!   own node catches a node deleted behind its back (by an administrator), which would
//!   otherwise be granted as a ghost while the waiter behind it, seeing it gone, takes the lock
//!   too; any event on it lists again. Once granted, that watch is the hold's deletion watch:
//!   it is never removed (a removal is a request, and one on the hand-off path measurably
//!   slowed the release that follows); our own delete fires it. A waiter further back watches
//!   only its predecessor and lists the children again when it goes (it may have been a waiter
//!   that gave up while the nodes before it still wait).
//! - A reader watches the last `lock` or `write` node ahead of it. When that node goes, or its
//!   data says it became a read (a downgrade), the reader holds at once if it was the only
//!   such node ahead, and lists again otherwise.
//! - A permit waiter with at most [`WATCH_ALL_AHEAD`](crate::judge::WATCH_ALL_AHEAD) nodes ahead watches every one of them
//!   and counts deletions down: it holds, with no list, once fewer than N remain. Further
//!   back, the first waiter of a semaphore of more than [`WATCH_ALL_AHEAD`](crate::judge::WATCH_ALL_AHEAD) permits watches
//!   the list of children (it is the only one that does), and every other waiter watches its
//!   predecessor: a deletion, or the predecessor's data saying it was granted (`held=1`, see
//!   the record module), makes it list again. A granted permit writes that marker, in the
//!   background, only when such a waiter may exist: when its first list showed
//!   [`WATCH_ALL_AHEAD`](crate::judge::WATCH_ALL_AHEAD) or more nodes ahead of it or any node behind it.
//!
//! A data change on a watched node (a downgrade, a marker) is looked at with one more read on
//! that node alone, never with a list.
//!
//! # Whose node
//!
//! A node is taken for this acquisition's own only when this session's create reply named it,
//! or, after a lost reply, when a lookup by attempt id finds it and its `ephemeralOwner` is
//! this session (`find_own`). A zookeeper-client session never changes its id, and a retry on
//! a new session uses a new attempt id, so no acquisition (no campaign) is granted on a node
//! of an earlier session that is still on the server: the guard Curator added to
//! `LeaderLatch` in [PR #500](https://github.com/apache/curator/pull/500) holds by
//! construction here.
//!
//! # Cancel safety
//!
//! From the moment its create is sent, an acquisition owns a [`PendingNode`]. Dropping it
//! (timeout, cancellation, `try_acquire` that lost, a conflict, an error) deletes the node in
//! the background: by path when the create's reply arrived, otherwise by listing the children
//! and deleting the one that carries the attempt id (the list is sent after the create, so it
//! sees it). A grant that arrived while the future was being dropped is freed the same way.

use std::sync::Arc;
use std::time::Instant;

use lockkit_core::backend::{AcquireRequest, Deadline, Grant, HoldSignal};
use lockkit_core::{Error, FencingToken, LockName, LossReason, Result};
use tracing::Instrument;
use uuid::Uuid;
use zookeeper_client as zk;

use crate::client::ZkBackend;
use crate::error::{BACKEND, Failure, is_loss, map, state_error};
use crate::held::{NodeEvent, PendingNode, RETRIES, Watched, mark_held, node_event, watch_hold};
use crate::judge::{Class, DataRule, Plan, Verdict, WATCH_ALL_AHEAD, Watch, judge};
use crate::names::{NodeKind, node_prefix, queue};
use crate::record;
use crate::session::{Session, remake_root};

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
    /// Enough of the watched nodes ahead of ours are gone (or no longer block). The session
    /// was alive when the requests that watched them (or found them gone) were sent, at
    /// `confirmed`. `own_watch` is the data watch on our own node, if one was set; it has not
    /// fired.
    AheadGone { confirmed: Instant, own_watch: Option<NodeEvent> },
    /// Something else happened: look at the queue again.
    Changed,
}

impl ZkBackend {
    /// One acquisition on `session`: queue a node, wait until it holds (as the deadline
    /// allows), and turn it into a hold. `reached` is set once the store answered.
    pub(crate) async fn acquire_in(
        &self,
        session: &Arc<Session>,
        request: &AcquireRequest,
        attempt: Uuid,
        reached: &mut bool,
    ) -> Result<Option<Grant>> {
        let lock = &request.lock;
        let Some(kind) = NodeKind::of(&request.kind) else {
            return Err(Error::unsupported(BACKEND, Some(lock), request.kind.describe()));
        };
        let parent = self.config.lock_path(lock);
        let record = record::record_for(attempt, &request.kind);
        let mut pending =
            PendingNode::new(self.me.clone(), Arc::clone(session), lock.clone(), parent.clone(), attempt, kind, record);
        let Enqueued { mut node, mut children, mut listed_at } = self.enqueue(session, &mut pending).await?;
        *reached = true;
        request.note_reached();
        // Whether a permit, once granted, marks its node held for a waiter that may watch it
        // as its predecessor: decided on the first list after our create.
        let mut marks: Option<bool> = None;
        // The watch on the list of children, set with the list in `children`.
        let mut children_watch: Option<NodeEvent> = None;
        // Whether the acquisition waited for a node ahead: a candidate granted after a wait
        // marks its node held, so that its term's start (the node's mtime) is when it came to
        // lead, not when it began to campaign.
        let mut waited = false;
        loop {
            let queue = queue(&children);
            let watched_children = children_watch.take();
            let Some(position) = queue.iter().position(|c| c.attempt == attempt) else {
                // Our node vanished while we waited (deleted by an administrator): queue again.
                tracing::debug!(backend = BACKEND, %lock, "our queued node vanished; queueing again");
                pending.path = None;
                marks = None;
                Enqueued { node, children, listed_at } = self.enqueue(session, &mut pending).await?;
                continue;
            };
            let marks_held = *marks.get_or_insert_with(|| {
                matches!(kind, NodeKind::Permit(_)) && (position >= WATCH_ALL_AHEAD || position + 1 < queue.len())
            }) || (kind == NodeKind::Candidate && waited);
            let plan = match judge(&queue, position) {
                Verdict::Holds => return self.grant(session, pending, node, listed_at, None, marks_held).map(Some),
                Verdict::Conflict(what) => {
                    tracing::debug!(backend = BACKEND, %lock, %what, "the name is in use otherwise");
                    pending.delete_now().await;
                    return Err(Error::conflict(BACKEND, Some(lock), what));
                }
                Verdict::Waits(plan) => plan,
            };
            if !request.deadline.may_wait() {
                // A reader behind nothing but one write node looks once at whether that
                // node became a read (a downgraded hold that readers may join).
                if let Plan::Nodes(watch) = &plan
                    && watch.complete
                    && watch.rule == DataRule::ReadClears
                    && let Some(sent_at) = self.all_read(session, lock, &parent, &watch.ahead).await?
                {
                    return self.grant(session, pending, node, sent_at, None, false).map(Some);
                }
                pending.delete_now().await;
                return Ok(None);
            }
            let watch = match plan {
                Plan::Nodes(watch) => watch,
                Plan::Children => {
                    // Wait on the watch set by the last list, if it set one; then list again,
                    // with a new watch, and look.
                    if let Some(watcher) = watched_children {
                        let span = tracing::debug_span!("lockkit.zk.wait", lock = %lock, watched = "children");
                        let waited =
                            self.wait_children(session, lock, watcher, request.deadline).instrument(span).await?;
                        if let Waited::DeadlinePassed = waited {
                            pending.delete_now().await;
                            return Ok(None);
                        }
                    }
                    (children, listed_at, children_watch) = self.list_and_watch(session, lock, &parent).await?;
                    continue;
                }
            };
            let ahead: Vec<String> = watch.ahead.iter().map(|name| format!("{parent}/{name}")).collect();
            let own = watch.complete.then_some(node.path.as_str());
            let span = tracing::debug_span!(
                "lockkit.zk.wait",
                lock = %lock,
                predecessor = ahead.last().map_or("", String::as_str),
                watched = ahead.len(),
            );
            let outcome = self.wait_for(session, lock, &ahead, &watch, own, request.deadline).instrument(span).await?;
            waited = true;
            let marks_held = marks_held || kind == NodeKind::Candidate;
            match outcome {
                Waited::DeadlinePassed => {
                    pending.delete_now().await;
                    return Ok(None);
                }
                Waited::AheadGone { confirmed, own_watch }
                    if watch.complete && confirmed.elapsed() < session.timeout / 3 =>
                {
                    // Every node that blocked ours is gone (or enough of them), and none can
                    // join before ours (sequences only grow): we hold, and the hand-off needs
                    // no list. `confirmed` (the watches' send time) also dates the session's
                    // liveness; a wait that outlived a third of the session timeout lists
                    // instead, which confirms it afresh.
                    return self.grant(session, pending, node, confirmed, own_watch, marks_held).map(Some);
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
        let prefix = node_prefix(&parent, pending.attempt, pending.kind);
        let client = &session.client;
        let node_options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&session.acls));
        let parent_options = zk::CreateMode::Container.with_acls(zk::Acls::new(&session.acls));
        // The node's data says who took it, for `inspect` and status displays.
        let owner = pending.record.clone();
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
        session
            .retry_on_loss(lock, "list the lock's queue", || async {
                let sent_at = Instant::now();
                match session.client.list_children(parent).await {
                    Ok(children) => Ok((children, sent_at)),
                    Err(zk::Error::NoNode) => Ok((Vec::new(), sent_at)),
                    Err(error) => Err(error),
                }
            })
            .await
    }

    /// The stat of a node, `None` when it does not exist; retries on lost connections.
    async fn stat_of(&self, session: &Session, lock: &LockName, path: &str) -> Result<Option<zk::Stat>> {
        session.retry_on_loss(lock, "read the lock node", || session.client.check_stat(path)).await
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

    /// Lists the children and sets a watch on the list, retrying on lost connections;
    /// returns them, the send time, and the watch (none when the lock's znode is gone).
    async fn list_and_watch(
        &self,
        session: &Session,
        lock: &LockName,
        parent: &str,
    ) -> Result<(Vec<String>, Instant, Option<NodeEvent>)> {
        session
            .retry_on_loss(lock, "watch the lock's queue", || async {
                let sent_at = Instant::now();
                match session.client.list_and_watch_children(parent).await {
                    Ok((children, watcher)) => Ok((children, sent_at, Some(node_event(watcher)))),
                    Err(zk::Error::NoNode) => Ok((Vec::new(), sent_at, None)),
                    Err(error) => Err(error),
                }
            })
            .await
    }

    /// Whether every node of `names` (children of `parent`) is gone or says it is a read, as
    /// one round trip of reads sent at the returned instant finds; `None` if one still blocks.
    async fn all_read(
        &self,
        session: &Session,
        lock: &LockName,
        parent: &str,
        names: &[String],
    ) -> Result<Option<Instant>> {
        let sent_at = Instant::now();
        let paths: Vec<String> = names.iter().map(|name| format!("{parent}/{name}")).collect();
        let reads: Vec<_> = paths.iter().map(|path| session.client.get_data(path)).collect();
        let mut clear = true;
        for read in reads {
            match read.await {
                Ok((data, _)) => clear &= record::says_read(&data),
                Err(zk::Error::NoNode) => {}
                Err(error) => return Err(session.error(error, Some(lock)).with_context("read the lock node ahead")),
            }
        }
        Ok(clear.then_some(sent_at))
    }

    /// Sets a data watch on each of `ahead` and on `own` (all requests in one round trip), and
    /// waits until no more than `watch.may_remain` of `ahead` still block (each is struck off
    /// when deleted, or when its data says it no longer blocks under `watch.rule`), something
    /// else happens to `own` or to a node ahead, or the deadline comes. The watch on `own`
    /// comes back with [`Waited::AheadGone`], still set, for the hold to use as its deletion
    /// watch (dropping it would cost a request to remove it).
    async fn wait_for(
        &self,
        session: &Session,
        lock: &LockName,
        ahead: &[String],
        watch: &Watch,
        own: Option<&str>,
        deadline: Deadline,
    ) -> Result<Waited> {
        let client = &session.client;
        // The watches on nodes ahead that still block, and the one on our own node.
        let mut blocking: Vec<(String, NodeEvent)> = Vec::with_capacity(ahead.len());
        let mut own_watch: Option<NodeEvent> = None;
        let mut own_gone = false;
        let mut relook = false;
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
                    Ok((data, _, watcher)) if is_ahead => match watch.rule.classify(&data) {
                        Class::Blocks => blocking.push((path.to_owned(), node_event(watcher))),
                        Class::Clear => {}
                        Class::Relook => relook = true,
                    },
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
        if own_gone || relook {
            return Ok(Waited::Changed);
        }
        while blocking.len() > watch.may_remain {
            // Our own node first: notifications come in the order of the changes, so when our
            // node went before the last node ahead, its event is ready too and must win.
            let (event, ahead_path) = tokio::select! {
                biased;
                event = own_event(&mut own_watch) => (event, None),
                (path, event) = next_event(&mut blocking) => (event, Some(path)),
                () = sleep_until(deadline) => return Ok(Waited::DeadlinePassed),
            };
            match (event, ahead_path) {
                (Watched::SessionEnded(state), _) => {
                    return Err(map(state_error(state), Some(lock)).with_context("wait for the nodes ahead"));
                }
                (Watched::SessionGone, _) => {
                    session.mark_broken();
                    return Err(Error::connection(BACKEND, Some(lock), Failure::RuntimeGone)
                        .with_context("wait for the nodes ahead"));
                }
                // One node ahead fewer.
                (Watched::Deleted, Some(_)) => {}
                // Its data changed (a downgrade, a marker): look at what it says now, on that
                // node alone.
                (Watched::Changed, Some(path)) if watch.rule != DataRule::HeldRelooks => {
                    let sent_at = Instant::now();
                    if let Some(again) = self.rewatch(session, lock, &path, watch.rule).await? {
                        blocking.push((path, again));
                    }
                    confirmed = sent_at;
                }
                _ => return Ok(Waited::Changed),
            }
        }
        Ok(Waited::AheadGone { confirmed, own_watch })
    }

    /// Watches a node ahead again after its data changed: the new watch when it still blocks
    /// under `rule`, `None` when it is gone or no longer blocks.
    async fn rewatch(
        &self,
        session: &Session,
        lock: &LockName,
        path: &str,
        rule: DataRule,
    ) -> Result<Option<NodeEvent>> {
        session
            .retry_on_loss(lock, "watch the node ahead again", || async {
                match session.client.get_and_watch_data(path).await {
                    Ok((data, _, watcher)) => Ok(match rule.classify(&data) {
                        Class::Clear => None,
                        Class::Blocks | Class::Relook => Some(node_event(watcher)),
                    }),
                    Err(zk::Error::NoNode) => Ok(None),
                    Err(error) => Err(error),
                }
            })
            .await
    }

    /// Waits for the watch on the list of children to fire, or the deadline.
    async fn wait_children(
        &self,
        session: &Session,
        lock: &LockName,
        mut watcher: NodeEvent,
        deadline: Deadline,
    ) -> Result<Waited> {
        let event = tokio::select! {
            event = &mut watcher => event,
            () = sleep_until(deadline) => return Ok(Waited::DeadlinePassed),
        };
        match event {
            Watched::SessionEnded(state) => {
                Err(map(state_error(state), Some(lock)).with_context("wait for the lock's queue to change"))
            }
            Watched::SessionGone => {
                session.mark_broken();
                Err(Error::connection(BACKEND, Some(lock), Failure::RuntimeGone)
                    .with_context("wait for the lock's queue to change"))
            }
            Watched::Deleted | Watched::Changed => Ok(Waited::Changed),
        }
    }

    /// Turns our node, now holding, into a hold: its czxid is the token, the pending node is
    /// kept, and the session renews and watches it from here on (with `own_watch`, when the
    /// wait left one on the node). A permit that `marks_held` writes its marker first.
    fn grant(
        &self,
        session: &Arc<Session>,
        pending: PendingNode,
        node: OwnNode,
        confirmed: Instant,
        own_watch: Option<NodeEvent>,
        marks_held: bool,
    ) -> Result<Grant> {
        let lock = pending.lock.clone();
        let token = u64::try_from(node.czxid)
            .map_err(|_| Error::backend(BACKEND, Some(&lock), Failure::InvalidCzxid(node.czxid)))?;
        let signal = HoldSignal::new(BACKEND, lock.clone(), Some(session.deadline_from(confirmed)));
        let path: Arc<str> = Arc::from(node.path);
        let watched = session.register(signal.clone(), &path);
        if marks_held {
            mark_held(session, &lock, &path, &pending.record, &signal);
        }
        let held = if watched {
            pending.into_held(path, signal.clone(), own_watch)
        } else {
            let held = pending.into_held(Arc::clone(&path), signal.clone(), None);
            session.spawn_now(watch_hold(Arc::clone(session), path, signal.clone(), own_watch));
            held
        };
        Ok(Grant::new(FencingToken::new(token), signal, Box::new(held)))
    }
}

/// The first event of any of `watches`, with the path it watched (its watch is then removed
/// from the list). Pending for ever when the list is empty.
fn next_event(watches: &mut Vec<(String, NodeEvent)>) -> impl std::future::Future<Output = (String, Watched)> + '_ {
    std::future::poll_fn(move |cx| {
        for index in 0..watches.len() {
            if let std::task::Poll::Ready(event) = watches[index].1.as_mut().poll(cx) {
                let (path, _) = watches.swap_remove(index);
                return std::task::Poll::Ready((path, event));
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
