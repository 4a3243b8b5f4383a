//! Observers of elections: the changes of leader, read from the election's journal whenever
//! the server notifies a change.
//!
//! Every function that changes the leader (a campaign that comes to lead, a resignation, an
//! abandoned campaign that had come to lead, and `election_settle`, which finds the leader's
//! lease run out or its row deleted) appends an entry to `<schema>.terms` and notifies
//! `<schema>_elections` in the same transaction. An observer registers on its provider's
//! listening connection (the one lock waiters use, which also `LISTEN`s on that channel), then
//! reads with `<schema>.observe_election(name, last id seen)`: the first time the state now,
//! later the entries after the last one it saw. Nothing is read at an interval:
//!
//! - a notification of the election (heard from before the read that came before it), or the
//!   listening connection breaking (notifications may have been missed), makes it read again;
//! - a leader whose lease runs out notifies nobody, so the observer also reads when the
//!   leader's row expires on the server; that read journals the vacancy, once, so that every
//!   observer sees the same vacancy;
//! - while the listening connection is down, it reads every
//!   [`JOURNAL_POLL`](lockkit_core::backend::JOURNAL_POLL) as a safety net, as waiters do.
//!
//! When entries after the last one it saw were trimmed (the journal keeps the last
//! [`JOURNAL_RETAINED`](crate::election_sql::JOURNAL_RETAINED) entries of each election), the
//! read returns the state now alone, and the observer reports [`LeaderEvent::Gap`] before it.
//! The core's observer drops terms that do not go forward. The loop (reads, retries, gaps, the
//! wait for the leader's expiry) is core's [`journal_observer`]; this file is the store's side.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::backend::{Journal, JournalRead, LeaderEvents, journal_observer};
use lockkit_core::{Leader, LeaderEvent, LockName, Result};
use tokio::sync::futures::OwnedNotified;
use tokio_postgres::Row;
use tokio_postgres::types::Type;

use crate::client::Inner;
use crate::listener::Slot;

/// The changes of leader of election `lock`, as
/// [`LockBackend::observe`](lockkit_core::backend::LockBackend::observe) returns them.
pub(crate) fn observe(inner: Arc<Inner>, lock: LockName) -> LeaderEvents {
    let lease = inner.store.settings.lease;
    let journal = PostgresJournal {
        key: crate::election::wake_key(&lock),
        name: crate::stored_name(lock.as_str()),
        inner,
        lock: lock.clone(),
        slot: None,
        notified: None,
        seen: None,
    };
    journal_observer(crate::BACKEND, lock, journal, lease)
}

/// One observer's side of the database.
struct PostgresJournal {
    inner: Arc<Inner>,
    lock: LockName,
    /// The stored name.
    name: String,
    /// The wake-up key of the election.
    key: String,
    slot: Option<Slot>,
    /// The notification of the election, armed before the last read.
    notified: Option<Pin<Box<OwnedNotified>>>,
    /// The id of the last journal entry read (0 for an empty journal); `None` before the
    /// first read.
    seen: Option<i64>,
}

impl Journal for PostgresJournal {
    /// Registers on the listening connection (reopened when it broke, so that no change after
    /// the read goes unheard) and arms the election's notification.
    async fn listen(&mut self) {
        if self.slot.is_none() {
            if let Ok(()) = self.inner.wakeups.ensure(&self.inner.store).await {
                self.slot = Some(self.inner.wakeups.register(&self.key, None));
            }
        } else if !self.inner.wakeups.is_up().await {
            let _ = self.inner.wakeups.ensure(&self.inner.store).await;
        }
        self.notified = self.slot.as_ref().map(Slot::armed);
    }

    /// Reads the journal after the last entry seen, or the state now.
    async fn read(&mut self) -> Result<JournalRead> {
        let inner = Arc::clone(&self.inner);
        let store = &inner.store;
        let rows = store
            .query(Some(&self.lock), &store.sql.election.observe, &[(&self.name, Type::TEXT), (&self.seen, Type::INT8)])
            .await
            .map_err(|failure| failure.into_error())?;
        let mut read = JournalRead::default();
        for row in rows {
            self.take(&row, &mut read).map_err(|error| store.store_error(Some(&self.lock), error))?;
        }
        Ok(read)
    }

    /// Whether the observer is registered and the listening connection is up.
    async fn hears(&mut self) -> bool {
        self.slot.is_some() && self.inner.wakeups.is_up().await
    }

    /// Waits for a notification or `until` (the leader's lease runs out, or the safety poll).
    async fn wait(&mut self, until: Instant) {
        match self.notified.take() {
            Some(notified) => drop(tokio::time::timeout_at(until.into(), notified).await),
            None => tokio::time::sleep_until(until.into()).await,
        }
    }
}

impl PostgresJournal {
    /// Adds one row of the read to `read`.
    fn take(&mut self, row: &Row, read: &mut JournalRead) -> std::result::Result<(), tokio_postgres::Error> {
        let kind: String = row.try_get(0)?;
        let id: Option<i64> = row.try_get(1)?;
        let token: Option<i64> = row.try_get(2)?;
        let identity: Option<Vec<u8>> = row.try_get(3)?;
        let since_ms: Option<i64> = row.try_get(4)?;
        let left_ms: Option<i64> = row.try_get(5)?;
        let state = match (token, identity) {
            (Some(token), Some(identity)) => LeaderEvent::Elected(Leader::new(
                Arc::from(identity),
                lockkit_core::FencingToken::new(u64::try_from(token).unwrap_or(0)),
                since_ms.map(crate::held::since_of),
            )),
            _ => LeaderEvent::Vacant,
        };
        match kind.as_str() {
            "change" => read.changes.push(state),
            kind => {
                if kind == "restart" {
                    read.restart = Some(state);
                }
                self.seen = Some(id.unwrap_or(0));
                read.leader_left = left_ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
            }
        }
        Ok(())
    }
}
