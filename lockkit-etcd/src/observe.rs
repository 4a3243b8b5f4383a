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

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use etcd_client::{Client, EventType, GetOptions, SortOrder, SortTarget, WatchOptions};
use lockkit_core::backend::{Follow, FollowEnd, LastShown, LeaderEvents, Outbox, follow_task};
use lockkit_core::{LeaderEvent, LockName, Result};

use crate::BACKEND;
use crate::client::EtcdBackend;
use crate::election::leader_of;
use crate::error::{to_error, unreachable};

/// The changes of leader of election `lock`, followed through `backend`'s clients.
pub(crate) fn observe(backend: Arc<EtcdBackend>, lock: LockName) -> LeaderEvents {
    let prefix = backend.config.lock_prefix(&lock);
    follow_task(BACKEND, lock.clone(), Follower { backend, lock, prefix, view: None, gap: false })
}

/// One put or delete under the election's prefix, as the watch reports it.
#[derive(Clone, Debug)]
struct Change {
    /// The revision of the write.
    revision: i64,
    key: Vec<u8>,
    /// For a put, the key's create revision and value; `None` for a delete.
    put: Option<(i64, Vec<u8>)>,
}

impl Change {
    fn of(event: &etcd_client::Event) -> Option<Change> {
        let kv = event.kv()?;
        let put = match event.event_type() {
            EventType::Put => Some((kv.create_revision(), kv.value().to_vec())),
            EventType::Delete => None,
        };
        Some(Change { revision: kv.mod_revision(), key: kv.key().to_vec(), put })
    }
}

/// The keys of an election as of one revision, and what was handed out: the bookkeeping of the
/// module docs, without I/O.
#[derive(Debug, Default)]
struct View {
    /// The value of every key under the prefix, by create revision.
    keys: BTreeMap<i64, Vec<u8>>,
    /// The create revision of every key, by key (a delete event carries the key only).
    revisions: HashMap<Vec<u8>, i64>,
    /// The revision the view is complete up to.
    revision: i64,
    /// What was handed out last.
    shown: LastShown,
}

impl View {
    /// The view of a read of every key under the prefix at `revision`.
    fn read(kvs: &[etcd_client::KeyValue], revision: i64) -> Self {
        let mut view = View { revision, ..View::default() };
        for kv in kvs {
            view.put(kv.key().to_vec(), kv.create_revision(), kv.value().to_vec());
        }
        view
    }

    fn put(&mut self, key: Vec<u8>, created: i64, value: Vec<u8>) {
        if let Some(old) = self.revisions.insert(key, created)
            && old != created
        {
            self.keys.remove(&old);
        }
        self.keys.insert(created, value);
    }

    fn delete(&mut self, key: &[u8]) {
        if let Some(created) = self.revisions.remove(key) {
            self.keys.remove(&created);
        }
    }

    /// Hands out the state the head stands for now (its term, the create revision, or a
    /// vacancy) if it is not what was handed out last (or always, when `restate`). A change
    /// this observer saw happen is dated not before now: a leader that waited rewrites its
    /// `since` as it comes to lead, which may come after.
    fn settle(&mut self, restate: bool, outbox: &Outbox) {
        let head = self.keys.first_key_value().and_then(|(created, value)| leader_of(value, *created));
        self.shown.push(head.map_or(LeaderEvent::Vacant, LeaderEvent::Elected), restate, outbox);
    }

    /// Applies the events of one watch reply (in revision order), handing out the state after
    /// each revision: the events of one revision (one transaction) are one change.
    fn apply(&mut self, changes: impl IntoIterator<Item = Change>, outbox: &Outbox) {
        let mut pending: Option<i64> = None;
        for change in changes {
            let revision = change.revision;
            if pending.is_some_and(|p| p != revision) {
                self.settle(false, outbox);
            }
            pending = Some(revision);
            match change.put {
                Some((created, value)) => self.put(change.key, created, value),
                None => self.delete(&change.key),
            }
            self.revision = self.revision.max(revision);
        }
        if pending.is_some() {
            self.settle(false, outbox);
        }
    }
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
        let after = match self.view.as_ref().map(|view| view.revision) {
            Some(revision) => revision,
            None => match read(client.clone(), &self.prefix, &self.lock, &self.backend).await {
                Ok(mut fresh) => {
                    if std::mem::take(&mut self.gap) {
                        outbox.push(Ok(LeaderEvent::Gap));
                    }
                    fresh.settle(true, outbox);
                    self.view.insert(fresh).revision
                }
                Err(error) => return FollowEnd::Failed(error),
            },
        };
        watch(client, self, after, outbox).await
    }
}

/// Reads every key under `prefix`: the view at the read's revision.
async fn read(mut client: Client, prefix: &str, lock: &LockName, backend: &EtcdBackend) -> Result<View> {
    let options = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
    let reply = match tokio::time::timeout(backend.config.connect_timeout, client.get(prefix, Some(options))).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(error)) => {
            // An expired token: renewed for the next try.
            backend.renew_token_after(&error).await;
            return Err(to_error(error, Some(lock)).with_server(Some(&backend.config.address)));
        }
        Err(_) => return Err(unreachable(&backend.config, Some(lock))),
    };
    let revision = reply.header().map_or(0, etcd_client::ResponseHeader::revision);
    Ok(View::read(reply.kvs(), revision))
}

/// Watches the election's prefix from the revision after `after` (the view's), applying
/// what comes to the view, until the watch ends: compacted revisions are a gap and a new
/// read (`Again`), a broken or cancelled watch is watched again from the view (`Pause`).
async fn watch(mut client: Client, follower: &mut Follower, after: i64, outbox: &Outbox) -> FollowEnd {
    let Follower { backend, lock, prefix, view, gap } = follower;
    let timeout = backend.config.connect_timeout;
    let options = WatchOptions::new().with_prefix().with_start_revision(after + 1);
    let (mut watcher, mut stream) =
        match tokio::time::timeout(timeout, client.watch(prefix.as_str(), Some(options))).await {
            Ok(Ok(watch)) => watch,
            Ok(Err(error)) => {
                return FollowEnd::Failed(to_error(error, Some(lock)).with_server(Some(&backend.config.address)));
            }
            Err(_) => return FollowEnd::Failed(unreachable(&backend.config, Some(lock))),
        };
    let end = loop {
        match stream.message().await {
            Ok(Some(reply)) => {
                if reply.compact_revision() != 0 {
                    tracing::debug!(
                        backend = BACKEND,
                        after,
                        "the revisions the observer missed were compacted: a gap"
                    );
                    *view = None;
                    *gap = true;
                    break FollowEnd::Again;
                }
                if let Some(view) = view.as_mut() {
                    view.apply(reply.events().iter().filter_map(Change::of), outbox);
                }
                if reply.canceled() {
                    if reply.cancel_reason().contains(crate::watch::WATCH_DENIED)
                        && let Ok(session) = backend.session().await
                    {
                        // The stream's token may have expired: the next stream takes a new one.
                        session.renew_token().await;
                    }
                    break FollowEnd::Pause;
                }
            }
            Ok(None) | Err(_) => break FollowEnd::Pause,
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
        outbox.take_ready().into_iter().map(|item| item.unwrap()).collect()
    }

    fn candidate(name: &str) -> Vec<u8> {
        crate::election::record_for(
            uuid::Uuid::new_v4(),
            &lockkit_core::HoldKind::Candidate { identity: std::sync::Arc::from(name.as_bytes()) },
        )
        .into_bytes()
    }

    fn put(revision: i64, key: &str, value: Vec<u8>) -> Change {
        Change { revision, key: key.as_bytes().to_vec(), put: Some((revision, value)) }
    }

    fn delete(revision: i64, key: &str) -> Change {
        Change { revision, key: key.as_bytes().to_vec(), put: None }
    }

    /// The terms and vacancies handed out, as (term, identity) or `None`.
    fn shown(outbox: &Outbox) -> Vec<Option<(u64, String)>> {
        drain(outbox)
            .into_iter()
            .map(|event| match event {
                LeaderEvent::Elected(leader) => Some((leader.term.get(), leader.identity_str().unwrap().to_owned())),
                LeaderEvent::Vacant => None,
                other => panic!("no {other:?} from a view"),
            })
            .collect()
    }

    #[test]
    fn every_change_of_the_head_is_handed_out_once_in_revision_order() {
        let outbox = Outbox::new(BACKEND);
        let mut view = View::read(&[], 1);
        view.settle(true, &outbox);
        // a leads; b queues behind it (no change); a goes: b leads; b goes: nobody.
        view.apply([put(2, "a", candidate("a")), put(3, "b", candidate("b"))], &outbox);
        view.apply([delete(4, "a")], &outbox);
        view.apply([delete(5, "b")], &outbox);
        assert_eq!(shown(&outbox), [None, Some((2, "a".into())), Some((3, "b".into())), None]);
        assert_eq!(view.revision, 5);
    }

    #[test]
    fn the_writes_of_one_revision_are_one_change() {
        let outbox = Outbox::new(BACKEND);
        let mut view = View::read(&[], 1);
        view.apply([put(2, "a", candidate("a")), put(3, "b", candidate("b")), put(4, "c", candidate("c"))], &outbox);
        drain(&outbox);
        // A lease revoked deletes a and b in one revision: b never led; c leads.
        view.apply([delete(5, "a"), delete(5, "b")], &outbox);
        assert_eq!(shown(&outbox), [Some((4, "c".into()))]);
        // A put of the leader's key again (same create revision) is no new term.
        view.apply([Change { revision: 6, key: b"c".to_vec(), put: Some((4, candidate("c"))) }], &outbox);
        assert_eq!(shown(&outbox), []);
    }

    #[test]
    fn a_mutex_key_at_the_head_means_nobody_leads() {
        let outbox = Outbox::new(BACKEND);
        let mut view = View::read(&[], 1);
        let mutex = crate::election::record_for(uuid::Uuid::new_v4(), &lockkit_core::HoldKind::Exclusive);
        view.apply([put(2, "m", mutex.into_bytes())], &outbox);
        view.apply([put(3, "a", candidate("a"))], &outbox);
        view.apply([delete(4, "m")], &outbox);
        assert_eq!(shown(&outbox), [None, Some((3, "a".into()))]);
    }

    #[test]
    fn an_empty_view_is_vacant() {
        let outbox = Outbox::new(BACKEND);
        let mut view = View::read(&[], 5);
        view.settle(true, &outbox);
        view.settle(false, &outbox);
        assert_eq!(drain(&outbox), [LeaderEvent::Vacant]);
    }
}
