//! Following one election on one ZooKeeper session: the store's side of the observer (see
//! the module docs of `observe`). The list of the election's children and the reads of the
//! new candidates (each setting its watch), the session's states (a dropped connection, an
//! expired session), and the errors that end an attempt; the view (`view.rs`) keeps the
//! bookkeeping, and `SessionFollower` in mod.rs takes a new session when this one ends.

use std::collections::HashSet;
use std::sync::Arc;

use lockkit_core::LockName;
use lockkit_core::backend::Outbox;
use zookeeper_client as zk;

use super::view::{End, Listing, View, collect};
use crate::error::{BACKEND, is_loss};
use crate::held::{RETRIES, node_event};
use crate::session::Session;

/// Follows one election on one session.
pub(super) struct Follower<'a> {
    session: &'a Arc<Session>,
    lock: &'a LockName,
    parent: &'a str,
    outbox: &'a Outbox,
    view: View,
}

impl<'a> Follower<'a> {
    pub(super) fn new(
        session: &'a Arc<Session>,
        lock: &'a LockName,
        parent: &'a str,
        outbox: &'a Outbox,
        gap: bool,
    ) -> Self {
        Follower { session, lock, parent, outbox, view: View::new(gap) }
    }

    /// Follows until the session ends or fails.
    pub(super) async fn run(mut self) -> End {
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
