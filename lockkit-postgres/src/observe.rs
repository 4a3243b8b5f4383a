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
//! - a notification of the election, or the listening connection breaking (notifications may
//!   have been missed), makes it read again; so does having handed out what the last read
//!   found (a notification may have come meanwhile);
//! - a leader whose lease runs out notifies nobody, so the observer also reads when the
//!   leader's row expires on the server; that read journals the vacancy, once, so that every
//!   observer sees the same vacancy;
//! - while the listening connection is down, it reads every [`POLL`] as a safety net, as
//!   waiters do.
//!
//! When entries after the last one it saw were trimmed (the journal keeps the last
//! [`JOURNAL_RETAINED`](crate::election_sql::JOURNAL_RETAINED) entries of each election), the
//! read returns the state now alone, and the observer reports [`LeaderEvent::Gap`] before it.
//! The core's observer drops terms that do not go forward.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::backend::{Backoff, LeaderEvents, deadline_after};
use lockkit_core::{Leader, LeaderEvent, LockName, Result};
use tokio_postgres::Row;
use tokio_postgres::types::Type;

use crate::client::Inner;
use crate::listener::Slot;
use crate::store::Failure;

/// How often an observer reads while its provider's listening connection is down.
const POLL: Duration = Duration::from_millis(100);
/// The first delay after a read that failed.
const FIRST_DELAY: Duration = Duration::from_millis(50);

/// The longest delay between reads that failed.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// The changes of leader of election `lock`, as
/// [`LockBackend::observe`](lockkit_core::backend::LockBackend::observe) returns them.
pub(crate) fn observe(inner: Arc<Inner>, lock: LockName) -> LeaderEvents {
    let observing = Observing {
        key: crate::election::wake_key(&lock),
        name: crate::stored_name(lock.as_str()),
        inner,
        lock,
        slot: None,
        seen: None,
        pending: VecDeque::new(),
        recheck: None,
        failing_since: None,
        reported: false,
        backoff: Backoff::new(FIRST_DELAY, RETRY_MAX),
    };
    Box::pin(futures_util::stream::unfold(observing, |mut observing| async move {
        let event = observing.next().await;
        Some((event, observing))
    }))
}

/// One observer's state.
struct Observing {
    inner: Arc<Inner>,
    lock: LockName,
    /// The stored name.
    name: String,
    /// The wake-up key of the election.
    key: String,
    slot: Option<Slot>,
    /// The id of the last journal entry read (0 for an empty journal); `None` before the
    /// first read.
    seen: Option<i64>,
    /// Events read and not handed out yet.
    pending: VecDeque<LeaderEvent>,
    /// When the current leader's row expires on the server unless renewed.
    recheck: Option<Instant>,
    failing_since: Option<Instant>,
    /// Whether a failure was handed out since the reads began to fail.
    reported: bool,
    /// The pauses before the next read after failed ones: 50 ms, doubling up to
    /// [`RETRY_MAX`].
    backoff: Backoff,
}

impl Observing {
    async fn next(&mut self) -> Result<LeaderEvent> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(event);
            }
            if self.slot.is_none() {
                if let Ok(()) = self.inner.wakeups.ensure(&self.inner.store).await {
                    self.slot = Some(self.inner.wakeups.register(&self.key, None));
                }
            } else if !self.inner.wakeups.is_up().await {
                // The listening connection broke: reopen it before reading, so that no change
                // after the read goes unheard.
                let _ = self.inner.wakeups.ensure(&self.inner.store).await;
            }
            let notify = self.slot.as_ref().map(Slot::notify);
            let notified = notify.as_ref().map(|n| n.notified());
            tokio::pin!(notified);
            if let Some(notified) = notified.as_mut().as_pin_mut() {
                notified.enable();
            }
            match self.read().await {
                Ok(()) => {
                    self.failing_since = None;
                    self.reported = false;
                    self.backoff.reset();
                    if !self.pending.is_empty() {
                        continue;
                    }
                }
                Err(failure) => {
                    let error = failure.into_error();
                    let since = *self.failing_since.get_or_insert_with(Instant::now);
                    tracing::debug!(%error, election = %self.lock, "reading the election failed; reading again");
                    self.backoff.pause().await;
                    // Hand out a failure that lasts, once: the journal lets the stream resume
                    // where it was when the server answers again.
                    if !error.is_retryable() || (since.elapsed() >= self.inner.store.settings.lease && !self.reported) {
                        self.reported = true;
                        return Err(error);
                    }
                    continue;
                }
            }
            // Nothing new: wait for a notification, the leader's lease to run out, or (while
            // the listening connection is down) the safety poll.
            let mut until = self.recheck.unwrap_or_else(|| deadline_after(Instant::now(), Duration::from_secs(86_400)));
            if self.slot.is_none() || !self.inner.wakeups.is_up().await {
                until = until.min(Instant::now() + POLL);
            }
            match notified.as_mut().as_pin_mut() {
                Some(notified) => {
                    let _ = tokio::time::timeout_at(until.into(), notified).await;
                }
                None => tokio::time::sleep_until(until.into()).await,
            }
        }
    }

    /// Reads the journal after the last entry seen, or the state now.
    async fn read(&mut self) -> std::result::Result<(), Failure> {
        let store = &self.inner.store;
        let rows = store
            .query(Some(&self.lock), &store.sql.election.observe, &[(&self.name, Type::TEXT), (&self.seen, Type::INT8)])
            .await?;
        for row in rows {
            if let Err(error) = self.take(&row) {
                return Err(Failure::Refused(self.inner.store.store_error(Some(&self.lock), error)));
            }
        }
        Ok(())
    }

    /// Turns one row of the read into events.
    fn take(&mut self, row: &Row) -> std::result::Result<(), tokio_postgres::Error> {
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
                since_ms.map(crate::election::since_of),
            )),
            _ => LeaderEvent::Vacant,
        };
        match kind.as_str() {
            "change" => self.pending.push_back(state),
            kind => {
                if kind == "restart" {
                    if self.seen.is_some() {
                        tracing::debug!(seen = ?self.seen, election = %self.lock, "the journal lost entries this observer had not read");
                        self.pending.push_back(LeaderEvent::Gap);
                    }
                    self.pending.push_back(state);
                }
                self.seen = Some(id.unwrap_or(0));
                // Read again when the leader's row expires unless renewed (plus a millisecond:
                // the server's expiry is exact to it).
                self.recheck = left_ms.map(|ms| {
                    deadline_after(
                        Instant::now(),
                        Duration::from_millis(u64::try_from(ms).unwrap_or(0).saturating_add(1)),
                    )
                });
            }
        }
        Ok(())
    }
}
