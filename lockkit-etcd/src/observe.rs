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
//! The stream runs one task, core's observer plumbing
//! ([`observer_task`](lockkit_core::backend::observer_task)): it handles the watch's events as
//! they come and queues them for the consumer (a consumer far behind gets a gap and the
//! current state). Dropping the stream aborts the task, which cancels its watch. A task that
//! ends with its runtime is started again by the next poll and goes on from the revision the
//! view had reached (the view outlives the task): etcd replays what passed meanwhile, so that
//! is no gap either, unless those revisions were compacted.

use std::sync::Arc;

use lockkit_core::backend::{Follow, FollowEnd, LeaderEvents, Outbox, follow_task};
use lockkit_core::{LeaderEvent, LockName};

use crate::BACKEND;
use crate::client::EtcdBackend;

mod view;
mod watch;

use view::View;
use watch::{read, watch};

/// The changes of leader of election `lock`, followed through `backend`'s clients.
pub(crate) fn observe(backend: Arc<EtcdBackend>, lock: LockName) -> LeaderEvents {
    let prefix = backend.config.lock_prefix(&lock);
    follow_task(BACKEND, lock.clone(), Follower { backend, lock, prefix, view: None, gap: false })
}

/// The following of the election: a read of the view when it has none, then a watch from
/// the view's revision. The view and the gap owed go on from one task to the next.
struct Follower {
    backend: Arc<EtcdBackend>,
    lock: LockName,
    prefix: String,
    /// The view, once read; `None` until the first read, and after a compaction.
    view: Option<View>,
    /// A gap to hand out before the state the next read gives.
    gap: bool,
}

impl Follow for Follower {
    async fn follow_once(&mut self, outbox: &Outbox) -> FollowEnd {
        let client = match self.backend.client().await {
            Ok(client) => client,
            Err(error) => return FollowEnd::Failed(error),
        };
        let view = match &mut self.view {
            Some(view) => view,
            None => match read(client.clone(), &self.prefix, &self.lock, &self.backend).await {
                Ok(mut fresh) => {
                    if std::mem::take(&mut self.gap) {
                        outbox.push(Ok(LeaderEvent::Gap));
                    }
                    fresh.settle(true, outbox);
                    self.view.insert(fresh)
                }
                Err(error) => return FollowEnd::Failed(error),
            },
        };
        let end = watch(client, &self.backend, &self.lock, &self.prefix, view, outbox).await;
        if let FollowEnd::Again = end {
            // The revisions after the view were compacted: a gap, then a new read.
            self.view = None;
            self.gap = true;
        }
        end
    }
}
