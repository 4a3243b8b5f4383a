//! The view of an election that the follower keeps (see the module docs of `observe`): the
//! keys under the election's prefix as of one revision, and what was handed out — etcd's
//! rule of who leads (the lowest create revision), without I/O, driven by the watch in
//! `watch.rs` and by hand in the tests.

use std::collections::{BTreeMap, HashMap};

use etcd_client::EventType;
use lockkit_core::LeaderEvent;
use lockkit_core::backend::{LastShown, Outbox};

use crate::election::leader_of;

/// One put or delete under the election's prefix, as the watch reports it.
#[derive(Clone, Debug)]
pub(super) struct Change {
    /// The revision of the write.
    pub(super) revision: i64,
    pub(super) key: Vec<u8>,
    /// For a put, the key's create revision and value; `None` for a delete.
    pub(super) put: Option<(i64, Vec<u8>)>,
}

impl Change {
    pub(super) fn of(event: &etcd_client::Event) -> Option<Change> {
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
pub(super) struct View {
    /// The value of every key under the prefix, by create revision.
    keys: BTreeMap<i64, Vec<u8>>,
    /// The create revision of every key, by key (a delete event carries the key only).
    revisions: HashMap<Vec<u8>, i64>,
    /// The revision the view is complete up to.
    pub(super) revision: i64,
    /// What was handed out last.
    shown: LastShown,
}

impl View {
    /// The view of a read of every key under the prefix at `revision`.
    pub(super) fn read(kvs: &[etcd_client::KeyValue], revision: i64) -> Self {
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
    pub(super) fn settle(&mut self, restate: bool, outbox: &Outbox) {
        let head = self.keys.first_key_value().and_then(|(created, value)| leader_of(value, *created));
        self.shown.push(head.map_or(LeaderEvent::Vacant, LeaderEvent::Elected), restate, outbox);
    }

    /// Applies the events of one watch reply (in revision order), handing out the state after
    /// each revision: the events of one revision (one transaction) are one change.
    pub(super) fn apply(&mut self, changes: impl IntoIterator<Item = Change>, outbox: &Outbox) {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::BACKEND;

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
