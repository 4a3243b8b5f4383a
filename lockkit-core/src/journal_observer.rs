//! The election observer of a store that keeps a journal of its elections' changes of
//! leader and says when it wrote one (Redis: a stream and a pub/sub channel; PostgreSQL: a
//! table and `NOTIFY`): the backend writes how to listen, read, tell whether it hears and
//! wait ([`Journal`]);
//! [`journal_observer`] does the rest, the same for every such backend.
//!
//! The observer listens before every read, so that no change after the read goes unheard,
//! then reads the entries after the last one it saw and hands them out in order. With
//! nothing left to hand out it waits for the store's word, or for the current leader's lease
//! to run out (a leader that dies writes nothing; the read after it journals the vacancy),
//! and reads every [`JOURNAL_POLL`] while the store's word cannot be trusted.
//! When the journal no longer holds the entries after the last one seen, the read gives the
//! state now and the observer hands out [`LeaderEvent::Gap`] before it. A read that fails is
//! tried again with a growing pause; the consumer gets the error at once when it is not
//! retryable, and once a lease after the failures began otherwise: the journal lets the
//! stream go on where it was when the store answers again.

use std::collections::VecDeque;
use std::future::Future;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::backend::{Backoff, LeaderEvents, deadline_after};
use crate::{LeaderEvent, LockName, Result};

/// What one read of an election's journal found.
#[derive(Debug, Default)]
pub struct JournalRead {
    /// The state now (an `Elected` or `Vacant`), when the read could not go on from the last
    /// entry seen: the first read, or entries trimmed (then a gap comes before it).
    pub restart: Option<LeaderEvent>,
    /// The changes of leader after the last entry seen, oldest first.
    pub changes: Vec<LeaderEvent>,
    /// How long the current leader's lease has left on the store, for a read when it runs out.
    pub leader_left: Option<Duration>,
}

/// What a backend writes for a [`journal_observer`]: its store's calls only. The backend
/// keeps the id of the last entry it read.
pub trait Journal: Send + 'static {
    /// Makes sure a change written after the next read is heard: subscribes, arms the
    /// notification.
    fn listen(&mut self) -> impl Future<Output = ()> + Send;

    /// Reads the journal after the last entry read (the state now, the first time).
    fn read(&mut self) -> impl Future<Output = Result<JournalRead>> + Send;

    /// Whether the store's word of a change can be trusted now: the connection that carries
    /// it is up (restored first, when it broke). While it cannot, the observer reads every
    /// [`JOURNAL_POLL`] as a safety net.
    fn hears(&mut self) -> impl Future<Output = bool> + Send;

    /// Waits for the store's word of a change since [`listen`](Self::listen), until `until`
    /// at the latest.
    fn wait(&mut self, until: Instant) -> impl Future<Output = ()> + Send;
}

/// How often a [`journal_observer`] reads while its store's word cannot be trusted.
pub const JOURNAL_POLL: Duration = Duration::from_millis(100);

/// The longest pause of a [`journal_observer`] between reads that failed (the first is
/// [`Backoff::FIRST`]).
pub const JOURNAL_RETRY_MAX: Duration = Duration::from_secs(1);

/// How long an observer waits for the store's word when no leader's lease runs out.
const IDLE: Duration = Duration::from_secs(86_400);

/// The observer of election `lock` of `backend` whose journal `journal` reads; failures
/// handed out once they last `lease`, retried after pauses up to [`JOURNAL_RETRY_MAX`].
pub fn journal_observer<J: Journal>(
    backend: &'static str,
    lock: LockName,
    journal: J,
    lease: Duration,
) -> LeaderEvents {
    let observing = Observing {
        backend,
        lock,
        journal,
        lease,
        backoff: Backoff::up_to(JOURNAL_RETRY_MAX),
        started: false,
        pending: VecDeque::new(),
        recheck: None,
        read_now: true,
        failing_since: None,
        reported: false,
    };
    Box::pin(futures_util::stream::unfold(observing, |mut observing| async move {
        let span = tracing::debug_span!("lockkit.observe", backend = observing.backend, election = %observing.lock);
        let event = observing.next().instrument(span).await;
        Some((event, observing))
    }))
}

/// One observer's state.
struct Observing<J> {
    backend: &'static str,
    lock: LockName,
    journal: J,
    lease: Duration,
    backoff: Backoff,
    /// Whether the state was read once.
    started: bool,
    /// Events read and not handed out yet.
    pending: VecDeque<LeaderEvent>,
    /// When the current leader's lease runs out on the store unless renewed.
    recheck: Option<Instant>,
    /// Read without waiting (the first read, or after a failed one).
    read_now: bool,
    failing_since: Option<Instant>,
    /// Whether a failure was handed out since the reads began to fail.
    reported: bool,
}

impl<J: Journal> Observing<J> {
    async fn next(&mut self) -> Result<LeaderEvent> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(event);
            }
            if !self.read_now {
                let mut until = self.recheck.unwrap_or_else(|| deadline_after(Instant::now(), IDLE));
                if !self.journal.hears().await {
                    until = until.min(deadline_after(Instant::now(), JOURNAL_POLL));
                }
                self.journal.wait(until).await;
            }
            self.read_now = false;
            self.journal.listen().await;
            match self.journal.read().await {
                Ok(read) => {
                    self.failing_since = None;
                    self.reported = false;
                    self.backoff.reset();
                    self.take(read);
                }
                Err(error) => {
                    let since = *self.failing_since.get_or_insert_with(Instant::now);
                    tracing::debug!(backend = self.backend, %error, "reading the election failed; reading again");
                    self.backoff.pause().await;
                    self.read_now = true;
                    if !error.is_retryable() || (since.elapsed() >= self.lease && !self.reported) {
                        self.reported = true;
                        return Err(error);
                    }
                }
            }
        }
    }

    /// Queues what a read found.
    fn take(&mut self, read: JournalRead) {
        if let Some(state) = read.restart {
            if self.started {
                tracing::debug!(backend = self.backend, "the journal lost entries this observer had not read");
                self.pending.push_back(LeaderEvent::Gap);
            }
            self.started = true;
            self.pending.push_back(state);
        }
        self.pending.extend(read.changes);
        // Read again when the leader's lease runs out unless renewed (plus a millisecond:
        // the store's expiry is exact to it).
        self.recheck =
            read.leader_left.map(|left| deadline_after(Instant::now(), left.saturating_add(Duration::from_millis(1))));
    }
}
