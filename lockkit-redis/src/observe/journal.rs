//! The election's journal in Redis, as the observer reads it (see the module docs of
//! `observe`): the subscriptions to the journal's channel and to the leader's record's
//! keyspace channel, the reads of the observe script, and the wait for either channel.

use std::sync::Arc;
use std::time::Instant;

use lockkit_core::backend::{Journal, JournalRead};
use lockkit_core::{Leader, LeaderEvent, LockName, Result};

use crate::keys::LockKeys;
use crate::keyspace::Keyspace;
use crate::store::connection::Store;
use crate::store::election::{Change, Term};
use crate::subscriber::{Interest, Subscriber};

/// The journal id an observer of an empty journal resumes from: every entry comes after it.
const START: &str = "0-0";

/// One observer's side of the store.
pub(super) struct RedisJournal {
    store: Arc<Store>,
    subscriber: Arc<Subscriber>,
    keyspace: Arc<Keyspace>,
    keys: LockKeys,
    /// The journal's channel.
    channel: String,
    lock: LockName,
    /// The id of the last journal entry read ([`START`] once read empty).
    seen: Option<String>,
    /// The subscription to the journal's channel.
    journal: Option<Interest>,
    /// The subscription to the leader's record's keyspace channel, where the server
    /// publishes keyspace events.
    record: Option<Interest>,
}

impl RedisJournal {
    /// The journal of election `lock` under key prefix `prefix`, read through `store`.
    pub(super) fn new(
        store: Arc<Store>,
        subscriber: Arc<Subscriber>,
        keyspace: Arc<Keyspace>,
        prefix: &str,
        lock: LockName,
    ) -> Self {
        let keys = LockKeys::new(prefix, &lock);
        let channel = keys.terms();
        Self { store, subscriber, keyspace, keys, channel, lock, seen: None, journal: None, record: None }
    }
}

impl Journal for RedisJournal {
    /// Subscribes to the journal's channel (and the record's keyspace channel, where the
    /// server publishes it) before the first read, and arms both.
    async fn listen(&mut self) {
        if self.journal.is_none() {
            self.journal = Some(self.subscriber.watch(&self.channel).await);
            if self.keyspace.publishes_deletions(&self.store).await {
                self.record = Some(self.subscriber.watch(&self.keyspace.channel(self.keys.record())).await);
            }
        }
        for interest in [self.journal.as_mut(), self.record.as_mut()].into_iter().flatten() {
            interest.arm();
        }
    }

    /// Reads with the observe script.
    async fn read(&mut self) -> Result<JournalRead> {
        let observed = self.store.observe(&self.lock, &self.keys, self.seen.as_deref()).await?;
        self.seen = Some(observed.last_id.unwrap_or_else(|| START.to_owned()));
        let changes = observed.changes.into_iter().map(|change| match change {
            Change::Elected(term) => elected(term),
            Change::Vacant(_) => LeaderEvent::Vacant,
        });
        Ok(JournalRead {
            restart: observed.restart.then(|| observed.leader.map_or(LeaderEvent::Vacant, elected)),
            changes: changes.collect(),
            leader_left: observed.leader_ttl,
        })
    }

    /// Whether the subscription to the journal's channel is confirmed (renewed first when the
    /// connection dropped).
    async fn hears(&mut self) -> bool {
        let Some(journal) = self.journal.as_mut() else { return false };
        if !journal.is_live() {
            self.subscriber.revive(journal).await;
        }
        journal.is_live()
    }

    /// Waits for a message on the journal's channel, a keyspace event of the record, a
    /// renewed subscription, or `until`.
    async fn wait(&mut self, until: Instant) {
        let Some(journal) = self.journal.as_mut() else { return };
        let at_most = until.saturating_duration_since(Instant::now());
        let record = self.record.as_mut();
        tokio::select! {
            _ = journal.wait(at_most) => {}
            () = async {
                match record {
                    Some(record) => drop(record.wait(at_most).await),
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
}

fn elected(term: Term) -> LeaderEvent {
    LeaderEvent::Elected(Leader::new(term.identity, term.term, term.since))
}
