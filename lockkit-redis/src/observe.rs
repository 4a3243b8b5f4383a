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
//! not go forward.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::backend::{LeaderEvents, deadline_after};
use lockkit_core::{Leader, LeaderEvent, LockName, Result};
use tracing::Instrument;

use crate::keys::LockKeys;
use crate::keyspace::Keyspace;
use crate::settings::Settings;
use crate::store::connection::Store;
use crate::store::election::{Change, Observed, Term};
use crate::subscriber::{Interest, Subscriber};
use lockkit_core::backend::Backoff;

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
    let observing = Observing {
        store,
        subscriber,
        keyspace,
        channel: keys.terms(),
        keys,
        lock,
        seen: None,
        started: false,
        pending: VecDeque::new(),
        journal: None,
        record: None,
        recheck: None,
        read_now: true,
        failing_since: None,
        reported: false,
        backoff: Backoff::up_to(RETRY_MAX),
        lease: settings.lease,
    };
    Box::pin(futures_util::stream::unfold(observing, |mut observing| async move {
        let span = tracing::debug_span!("lockkit.redis.observe", election = %observing.lock);
        let event = observing.next().instrument(span).await;
        Some((event, observing))
    }))
}

/// One observer's state.
struct Observing {
    store: Arc<Store>,
    subscriber: Arc<Subscriber>,
    keyspace: Arc<Keyspace>,
    keys: LockKeys,
    /// The journal's channel.
    channel: String,
    lock: LockName,
    /// The id of the last journal entry read ([`START`] once read empty).
    seen: Option<String>,
    /// Whether the current state was read once.
    started: bool,
    /// Events read and not handed out yet.
    pending: VecDeque<LeaderEvent>,
    /// The subscription to the journal's channel.
    journal: Option<Interest>,
    /// The subscription to the leader's record's keyspace channel, where the server
    /// publishes keyspace events.
    record: Option<Interest>,
    /// When the current leader's record expires on the server unless renewed.
    recheck: Option<Instant>,
    /// Read without waiting (the first read, or after a failed one).
    read_now: bool,
    failing_since: Option<Instant>,
    /// Whether a failure was handed out since the reads began to fail.
    reported: bool,
    backoff: Backoff,
    lease: Duration,
}

impl Observing {
    async fn next(&mut self) -> Result<LeaderEvent> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(event);
            }
            if !self.read_now {
                self.wait().await;
            }
            self.read_now = false;
            self.subscribe().await;
            for interest in [self.journal.as_mut(), self.record.as_mut()].into_iter().flatten() {
                interest.arm();
            }
            match self.store.observe(&self.lock, &self.keys, self.seen.as_deref()).await {
                Ok(observed) => {
                    self.failing_since = None;
                    self.reported = false;
                    self.backoff.reset();
                    self.take(observed);
                }
                Err(error) => {
                    let since = *self.failing_since.get_or_insert_with(Instant::now);
                    tracing::debug!(%error, "reading the election failed; reading again");
                    tokio::time::sleep(self.backoff.next_delay()).await;
                    self.read_now = true;
                    // Hand out a failure that lasts, once: the journal lets the stream resume
                    // where it was when the store answers again.
                    if !error.is_retryable() || (since.elapsed() >= self.lease && !self.reported) {
                        self.reported = true;
                        return Err(error);
                    }
                }
            }
        }
    }

    /// Subscribes to the journal's channel (and the record's keyspace channel, where the
    /// server publishes it) before the first read, so that no change after it is missed.
    async fn subscribe(&mut self) {
        if self.journal.is_some() {
            return;
        }
        self.journal = Some(self.subscriber.watch(&self.channel).await);
        if self.keyspace.publishes_deletions(&self.store).await {
            self.record = Some(self.subscriber.watch(&self.keyspace.channel(self.keys.record())).await);
        }
    }

    /// Waits for a message on the journal's channel, a keyspace event of the record, a
    /// renewed subscription, or the expiry of the leader's record.
    async fn wait(&mut self) {
        let Some(journal) = self.journal.as_mut() else { return };
        if !journal.is_live() {
            self.subscriber.revive(journal).await;
        }
        let mut at_most = match self.recheck {
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

    /// Turns what the observe script read into events.
    fn take(&mut self, observed: Observed) {
        let Observed { restart, last_id, leader_ttl, leader, changes } = observed;
        if restart {
            if self.started {
                tracing::debug!(seen = ?self.seen, "the journal lost entries this observer had not read");
                self.pending.push_back(LeaderEvent::Gap);
            }
            self.started = true;
            self.pending.push_back(leader.map_or(LeaderEvent::Vacant, elected));
        }
        for change in changes {
            self.pending.push_back(match change {
                Change::Elected(term) => elected(term),
                Change::Vacant(_) => LeaderEvent::Vacant,
            });
        }
        self.seen = Some(last_id.unwrap_or_else(|| START.to_owned()));
        // Read again when the leader's record expires unless renewed (plus a millisecond: the
        // server's expiry is exact to it).
        self.recheck =
            leader_ttl.map(|ttl| deadline_after(Instant::now(), ttl.saturating_add(Duration::from_millis(1))));
    }
}

fn elected(term: Term) -> LeaderEvent {
    LeaderEvent::Elected(Leader::new(term.identity, term.term, term.since))
}
