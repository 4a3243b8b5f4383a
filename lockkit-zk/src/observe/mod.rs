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

use std::sync::Arc;

use lockkit_core::LockName;
use lockkit_core::backend::{Follow, FollowEnd, LeaderEvents, Outbox, follow_task};

use crate::client::ZkBackend;
use crate::error::BACKEND;

mod view;
mod watch;

use view::End;
use watch::Follower;

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
