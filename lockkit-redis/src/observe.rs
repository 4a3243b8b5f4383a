//! Observers of elections: the changes of leader, read from the election's journal whenever
//! the store says something changed.
//!
//! Every script that changes the leader (a grant or hand-over to a candidate, a resignation,
//! an abandoned campaign that had been granted, a renewal or a read that finds the leader's
//! record gone) appends an entry to the election's journal, a capped Redis stream
//! (`…:terms`, about the last thousand entries), and publishes the entry's id on the channel
//! of the same name. An observer subscribes to that channel on its provider's pub/sub
//! connection, then reads (the observe script): first the current state, then, at every
//! message, the entries after the last one it saw. Nothing is read at an interval:
//!
//! - a message on the journal's channel, or a renewed subscription (the connection dropped,
//!   so messages may have been missed), makes it read again;
//! - a leader whose lease runs out runs no script, so the observer also reads once when the
//!   leader's record expires on the server (its `PTTL`, a deadline from the lease), and at
//!   once when the server publishes the record's keyspace events; the observe script writes
//!   the vacancy in the journal, once, so that every observer sees the same vacancy;
//! - while its subscription is not confirmed (the connection down), it reads every
//!   [`POLL`] as a safety net, as waiters do.
//!
//! When the entry it saw last is no longer in the journal (trimmed while it was cut off, or
//! the journal gone with a `FLUSHALL` or a restart without persistence), it reports
//! [`LeaderEvent::Gap`] and then the current state. The core's observer drops terms that do
//! not go forward. The loop (reads, retries, gaps, the wait for the record's expiry) is
//! core's [`journal_observer`]; this file is the store's side of it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::backend::{Backoff, Journal, JournalRead, LeaderEvents, journal_observer};
use lockkit_core::{Leader, LeaderEvent, LockName, Result};

use crate::keys::LockKeys;
use crate::keyspace::Keyspace;
use crate::settings::Settings;
use crate::store::connection::Store;
use crate::store::election::{Change, Term};
use crate::subscriber::{Interest, Subscriber};

/// How often an observer reads while its subscription cannot be trusted.
const POLL: Duration = Duration::from_millis(100);
/// The longest delay between reads that failed.
const RETRY_MAX: Duration = Duration::from_secs(1);
/// The journal id an observer of an empty journal resumes from: every entry comes after it.
const START: &str = "0-0";

/// The changes of leader of election `lock`, as [`LockBackend::observe`] returns them.
///
/// [`LockBackend::observe`]: lockkit_core::backend::LockBackend::observe
pub(crate) fn observe(
    store: Arc<Store>,
    subscriber: Arc<Subscriber>,
    keyspace: Arc<Keyspace>,
    settings: &Settings,
    lock: LockName,
) -> LeaderEvents {
    let keys = LockKeys::new(&settings.prefix, &lock);
    let journal = RedisJournal {
        store,
        subscriber,
        keyspace,
        channel: keys.terms(),
        keys,
        lock: lock.clone(),
        seen: None,
        journal: None,
        record: None,
    };
    journal_observer(crate::BACKEND, lock, journal, settings.lease, Backoff::up_to(RETRY_MAX))
}

/// One observer's side of the store.
struct RedisJournal {
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

    /// Waits for a message on the journal's channel, a keyspace event of the record, a
    /// renewed subscription, or `until`.
    async fn wait(&mut self, until: Option<Instant>) {
        let Some(journal) = self.journal.as_mut() else { return };
        if !journal.is_live() {
            self.subscriber.revive(journal).await;
        }
        let mut at_most = match until {
            Some(at) => at.saturating_duration_since(Instant::now()),
            None => Duration::from_secs(86_400),
        };
        if !journal.is_live() {
            at_most = at_most.min(POLL);
        }
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
