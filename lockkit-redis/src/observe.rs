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
//!   [`JOURNAL_POLL`](lockkit_core::backend::JOURNAL_POLL) as a safety net, as waiters do.
//!
//! When the entry it saw last is no longer in the journal (trimmed while it was cut off, or
//! the journal gone with a `FLUSHALL` or a restart without persistence), it reports
//! [`LeaderEvent::Gap`] and then the current state. The core's observer drops terms that do
//! not go forward. The loop (reads, retries, gaps, the wait for the record's expiry) is
//! core's [`journal_observer`]; `journal.rs` is the store's side of it, this file builds it.

use std::sync::Arc;

use lockkit_core::LockName;
use lockkit_core::backend::{LeaderEvents, journal_observer};

use crate::keyspace::Keyspace;
use crate::settings::Settings;
use crate::store::connection::Store;
use crate::subscriber::Subscriber;

mod journal;

use journal::RedisJournal;

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
    let journal = RedisJournal::new(store, subscriber, keyspace, &settings.prefix, lock.clone());
    journal_observer(crate::BACKEND, lock, journal, settings.lease)
}
