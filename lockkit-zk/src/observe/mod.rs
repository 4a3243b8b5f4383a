//! Observing an election: every change of leader, in term order, from watches.
//!
//! # What the observer knows
//!
//! The candidates of an election are the contender nodes under its znode, and the lowest one
//! leads. The observer keeps the *view*: every contender node it has seen in a list of the
//! children and not yet seen go, in sequence order, each with a data watch (set with the read
//! that gives a candidate's identity, term and creation time), and one watch on the list of
//! children (or on the election's znode while it does not exist). No node can queue before a
//! node of the view (sequences only grow), so:
//!
//! - when the head of the view goes, the next node of the view leads, with no list needed;
//! - when the view is empty and the children watch has not fired, nobody leads;
//! - a node created after the last list is behind every node of the view.
//!
//! # Order
//!
//! ZooKeeper sends a client its notifications in the order of the changes, and
//! zookeeper-client hands each to its watch as it reads it, so the notifications handed out
//! at any moment are a prefix of that order. The observer takes them in *batches*: everything
//! ready, polled again until nothing more is (so every event of a batch came before every
//! event of the next). Within a batch the order is unknown. A batch in which the leader and the
//! node right behind it both went is ambiguous (that node led for a moment, or had gone first):
//! the observer says [`LeaderEvent::Gap`] before the state that follows. On a healthy
//! connection a batch holds one change: the observer handles each notification as it comes.
//!
//! # What a list tells
//!
//! Each children notification (a node created or deleted) makes the observer list again,
//! with the parent's stat, and read (and watch) the new nodes, all requests at once. The reply
//! to the list comes after every notification of a change it shows, so the events ready then
//! belong before it. A node that came and went between two lists is never seen; the parent's
//! `cversion` (one per child created or deleted) counts it. Such a node may have led only if
//! every node of the view had gone meanwhile: then the observer says [`LeaderEvent::Gap`].
//!
//! # Connection trouble
//!
//! - **Disconnected, then back within the session:** zookeeper-client sets the watches again
//!   on the new connection, and the server fires those whose node changed meanwhile, in no
//!   particular order. The observer stops handling notifications while disconnected, then
//!   lists: the notifications replayed before that list's reply are one batch (a gap only
//!   when the changes missed cannot be told apart).
//! - **Session expired, or gone with its runtime:** the watches are gone and nothing replays
//!   what passed: the observer takes the provider's session (a new one when need be, on the
//!   observer's runtime), says [`LeaderEvent::Gap`] and then the current state.
//! - **No server:** the stream yields the connection error and tries again, with a growing
//!   pause; the state that follows comes after a gap.
//!
//! # The task
//!
//! The stream runs one task, core's observer plumbing
//! ([`observer_task`](lockkit_core::backend::observer_task)): it handles the notifications as
//! they come and queues the events for the consumer (a consumer far behind gets a gap and the
//! current state). Dropping the stream aborts the task, which drops its watches (each removed
//! from the server). A task that ends with its runtime is started again by the next poll, on
//! the home runtime, after a gap.

use std::collections::HashSet;
use std::sync::Arc;

use lockkit_core::LockName;
use lockkit_core::backend::{Follow, FollowEnd, LeaderEvents, Outbox, follow_task};
use zookeeper_client as zk;

use crate::client::ZkBackend;
use crate::error::{BACKEND, is_loss};
use crate::held::{RETRIES, node_event};
use crate::session::Session;

mod view;

use view::{End, Listing, View, collect};

/// The changes of leader of election `lock`, followed through `backend`'s sessions.
pub(crate) fn observe(backend: Arc<ZkBackend>, lock: LockName) -> LeaderEvents {
    let (parent, address) = (backend.config.lock_path(&lock), backend.config.address());
    follow_task(BACKEND, lock.clone(), SessionFollower { backend, lock, parent, address, gap: false })
}

/// The following of the election: on the provider's session, and on a new one whenever that
/// one ends (in the same task, or in the next one after a task ended with its runtime).
struct SessionFollower {
    backend: Arc<ZkBackend>,
    lock: LockName,
    parent: String,
    address: String,
    /// Whether the next session's first state comes after a gap: after the first session.
    gap: bool,
}

impl Follow for SessionFollower {
    async fn follow_once(&mut self, outbox: &Outbox) -> FollowEnd {
        let session = match self.backend.session(Some(&self.lock)).await {
            Ok(session) => session,
            Err(error) => return FollowEnd::Failed(error.with_server(Some(&self.address))),
        };
        let owes_gap = std::mem::replace(&mut self.gap, true) || outbox.has_state();
        let end = Follower::new(&session, &self.lock, &self.parent, outbox, owes_gap).run().await;
        match end {
            End::Session(state) => {
                tracing::debug!(backend = BACKEND, ?state, "the observer's session ended; a new one after a gap");
                FollowEnd::Again
            }
            End::Gone => {
                session.mark_broken();
                FollowEnd::Again
            }
            End::Failed(error) => FollowEnd::Failed(error.with_server(Some(&self.address))),
        }
    }
}

/// Follows one election on one session.
struct Follower<'a> {
    session: &'a Arc<Session>,
    lock: &'a LockName,
    parent: &'a str,
    outbox: &'a Outbox,
    view: View,
}

impl<'a> Follower<'a> {
    fn new(session: &'a Arc<Session>, lock: &'a LockName, parent: &'a str, outbox: &'a Outbox, gap: bool) -> Self {
        Follower { session, lock, parent, outbox, view: View::new(gap) }
    }

    /// Follows until the session ends or fails.
    async fn run(mut self) -> End {
        let mut states = self.session.client.state_watcher();
        if let Err(end) = self.relist(&mut states).await {
            return end;
        }
        loop {
            let view = &mut self.view;
            tokio::select! {
                biased;
                state = states.changed() => {
                    self.view.reconnected = true;
                    if state.is_terminated() {
                        return End::Session(state);
                    }
                    if state == zk::SessionState::Disconnected {
                        // Suspended: the notifications replayed on the next connection come
                        // in no order; they are handled with the list that follows it.
                        tracing::debug!(backend = BACKEND, "the observer's connection dropped");
                        if let Err(end) = self.wait_connected(&mut states).await {
                            return end;
                        }
                    }
                    // Connected again (the drop may have passed unseen): list.
                    if let Err(end) = self.relist(&mut states).await {
                        return end;
                    }
                },
                () = collect(&mut view.children, &mut view.nodes, &mut view.batch) => {
                    match self.view.apply(self.outbox) {
                        Err(end) => return end,
                        Ok(true) => {
                            if let Err(end) = self.relist(&mut states).await {
                                return end;
                            }
                        }
                        Ok(false) => self.view.settle(true, self.outbox),
                    }
                }
            }
        }
    }

    /// Waits until the session is connected again (collecting the watches' events meanwhile,
    /// for the list that follows), or ends.
    async fn wait_connected(&mut self, states: &mut zk::StateWatcher) -> std::result::Result<(), End> {
        loop {
            let state = self.session.client.state();
            if state.is_terminated() {
                return Err(End::Session(state));
            }
            if self.session.is_cut_off() {
                return Err(End::Gone);
            }
            if matches!(state, zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly) {
                return Ok(());
            }
            let view = &mut self.view;
            tokio::select! {
                _ = states.changed() => view.reconnected = true,
                () = collect(&mut view.children, &mut view.nodes, &mut view.batch) => view.session_end()?,
                // A safety net only: a session whose runtime shut down sends no more states.
                () = tokio::time::sleep(self.session.timeout / 3) => {}
            }
        }
    }

    /// Lists the children (watching them), retrying after lost connections, and brings the
    /// view up to it; see the module docs. Lists again at once while the children change
    /// under the list (each time because a notification said so).
    async fn relist(&mut self, states: &mut zk::StateWatcher) -> std::result::Result<(), End> {
        let mut failures = 0;
        loop {
            match self.relist_once().await {
                Ok(false) => return Ok(()),
                Ok(true) => {}
                Err(Attempt::Again(error)) => {
                    failures += 1;
                    if failures > RETRIES {
                        return Err(self.fail(error, "list the election's candidates"));
                    }
                    self.wait_connected(states).await?;
                }
                Err(Attempt::End(end)) => return Err(end),
            }
        }
    }

    /// One list and the reads it calls for; whether another list is needed at once.
    async fn relist_once(&mut self) -> std::result::Result<bool, Attempt> {
        let session: &'a Arc<Session> = self.session;
        let client = &session.client;
        let listed = client.get_and_watch_children(self.parent).await;
        // Every notification of a change the reply shows came before it: one batch (with the
        // ones that came since, which are no older than the list).
        let before = self.view.names();
        self.view.collect_ready();
        self.view.apply(self.outbox).map_err(Attempt::End)?;
        let (children, stat, watcher) = match listed {
            Ok(listed) => listed,
            Err(zk::Error::NoNode) => return self.parent_missing().await.map(|()| false),
            Err(error) => return Err(self.attempt_error(error, "list the election's candidates")),
        };
        self.view.children = Some(node_event(watcher));
        // A node that went since the list was answered is in the list: it is not new.
        let now = self.view.names();
        let departed: HashSet<String> = before.into_iter().filter(|name| !now.contains(name)).collect();
        let names: HashSet<String> = children.into_iter().collect();
        self.view.listed(&names, stat.czxid, stat.cversion, &departed, self.outbox);

        // The new nodes, and those whose data changed, are read (and watched), all requests
        // at once.
        let parent = self.parent;
        let unread = self.view.unread();
        let paths: Vec<(i64, String)> =
            unread.into_iter().map(|(sequence, name)| (sequence, format!("{parent}/{name}"))).collect();
        let reads: Vec<_> = paths.iter().map(|(sequence, path)| (*sequence, client.get_and_watch_data(path))).collect();
        let mut gone = HashSet::new();
        let mut failed = None;
        for (sequence, read) in reads {
            match read.await {
                Ok((data, stat, watcher)) => self.view.read(sequence, &data, &stat, node_event(watcher)),
                Err(zk::Error::NoNode) => {
                    gone.insert(sequence);
                }
                Err(error) => failed = failed.or(Some(error)),
            }
        }
        if let Some(error) = failed {
            return Err(self.attempt_error(error, "read the election's candidates"));
        }
        // Nodes found gone by the reads went after the list, in an unknown order with the
        // notifications that came meanwhile.
        self.view.collect_ready();
        let listing = Listing { parent: Some(stat.czxid), cversion: stat.cversion, names };
        self.view.reads_done(gone, listing, self.outbox).map_err(Attempt::End)
    }

    /// The election's znode is missing: watches its creation.
    async fn parent_missing(&mut self) -> std::result::Result<(), Attempt> {
        let (stat, watcher) = match self.session.client.check_and_watch_stat(self.parent).await {
            Ok(found) => found,
            Err(error) => return Err(self.attempt_error(error, "watch the election's znode")),
        };
        if stat.is_some() {
            // Made again meanwhile: list it.
            return Err(Attempt::Again(zk::Error::NoNode));
        }
        self.view.children = Some(node_event(watcher));
        self.view.parent_missing(self.outbox);
        Ok(())
    }

    fn attempt_error(&self, error: zk::Error, what: &'static str) -> Attempt {
        if is_loss(&error) {
            return Attempt::Again(error);
        }
        Attempt::End(self.fail(error, what))
    }

    fn fail(&self, error: zk::Error, what: &'static str) -> End {
        let state = self.session.client.state();
        if state.is_terminated() || matches!(error, zk::Error::SessionExpired | zk::Error::ClientClosed) {
            return End::Session(if state.is_terminated() { state } else { zk::SessionState::Expired });
        }
        let mapped = self.session.error(error, Some(self.lock));
        if self.session.is_cut_off() {
            return End::Gone;
        }
        End::Failed(mapped.with_context(what))
    }
}

/// How one list went wrong.
enum Attempt {
    /// The connection broke: try again once connected.
    Again(zk::Error),
    End(End),
}
