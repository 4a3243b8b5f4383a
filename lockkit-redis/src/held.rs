//! A hold granted by Redis ([`RedisHeld`]): its release and downgrade (scripts retried while
//! their outcome is unknown), the keyspace subscriptions of its records ([`RecordWatch`]),
//! and the releaser's courtesy of an unfair lock ([`Yielding`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lockkit_core::backend::{Backoff, HeldLock};
use lockkit_core::sync::lock_or_recover;
use lockkit_core::{Error, FencingToken, LossReason, Result};

use crate::BACKEND;
use crate::store::connection::Store;
use crate::store::kinds::{HoldTarget, Kind, Ownership};
use crate::subscriber::Interest;
use crate::watchdog::Watchdog;

/// The longest delay between retries of failed calls.
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(1);
/// How many times a release whose outcome was unknown is retried.
const RELEASE_TRIES: u32 = 4;
/// How long after releasing a contended lock this provider's next acquisition of it joins
/// the back of the waiters instead of racing them (see [`Yielding`]).
const YIELD_WINDOW: Duration = Duration::from_millis(50);
/// How many recently released contended locks a provider remembers.
const YIELD_MEMORY: usize = 1024;

/// The releaser's courtesy that keeps the unfair lock (a provider built with `fair(false)`)
/// from starving waiters as much.
///
/// A release wakes every waiter, and the releasing client, already running, could ask again
/// at once and win the race against all of them, again and again. So a provider that
/// released a lock whose acquisition had to wait (others were waiting too) and asks for it
/// again within [`YIELD_WINDOW`] subscribes first, like a waiter: the subscription puts it
/// at the back of the server's delivery order, and its round trip lets the woken waiters'
/// attempts reach the server before its own. Uncontended use never pays for it, and it
/// decides nothing: the grant is still the acquire script's alone.
#[derive(Debug, Default)]
pub(crate) struct Yielding {
    /// Record keys of locks released after a contended acquisition, and when.
    released: std::sync::Mutex<std::collections::HashMap<String, Instant>>,
}

impl Yielding {
    pub(crate) fn released_contended(&self, key: &str) {
        let mut released = lock_or_recover(&self.released);
        if released.len() >= YIELD_MEMORY {
            released.retain(|_, at| at.elapsed() < YIELD_WINDOW);
            if released.len() >= YIELD_MEMORY {
                released.clear();
            }
        }
        released.insert(key.to_owned(), Instant::now());
    }

    /// Whether the next acquisition of `key` should queue up behind the waiters.
    pub(crate) fn should_yield(&self, key: &str) -> bool {
        lock_or_recover(&self.released).remove(key).is_some_and(|at| at.elapsed() < YIELD_WINDOW)
    }
}

/// The keyspace subscriptions of one hold's records (one, or two for a read-write lock's
/// hold: its writer record and its readers), made in the background after the grant and
/// withdrawn at the release.
#[derive(Debug, Default)]
pub(crate) struct RecordWatch {
    interests: Mutex<Vec<Interest>>,
    ended: AtomicBool,
}

impl RecordWatch {
    /// Keeps a subscription, unless the hold ended meanwhile.
    pub(crate) fn keep(&self, interest: Interest) {
        let mut slot = lock_or_recover(&self.interests);
        if self.has_ended() {
            drop(slot);
            drop(interest);
            return;
        }
        slot.push(interest);
    }

    /// Whether the hold ended.
    pub(crate) fn has_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// The hold ended: the subscription is withdrawn (in the background).
    pub(crate) fn end(&self) {
        self.ended.store(true, Ordering::Release);
        let interests = std::mem::take(&mut *lock_or_recover(&self.interests));
        drop(interests);
    }
}

/// A hold granted by Redis.
pub(crate) struct RedisHeld {
    pub(crate) store: Arc<Store>,
    pub(crate) watchdog: Arc<Watchdog>,
    /// The keyspace subscriptions of the hold's records, when the server publishes their
    /// deletion.
    pub(crate) record: Option<Arc<RecordWatch>>,
    /// Set when the acquisition had to wait: the release then makes this provider's next
    /// acquisition of the lock queue up behind the waiters.
    pub(crate) yielding: Option<Arc<Yielding>>,
    /// The hold's kind, owner id, keys and signal (with the lock's name), shared with the
    /// watchdog.
    pub(crate) target: Arc<HoldTarget>,
    pub(crate) token: FencingToken,
    pub(crate) id: u64,
}

#[async_trait]
impl HeldLock for RedisHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        self.target.released.store(true, Ordering::Release);
        self.watchdog.forget(self.id);
        if let Some(record) = &self.record {
            record.end();
        }
        let target = &*self.target;
        let lock = target.signal.lock();
        let mut backoff = Backoff::up_to(RETRY_MAX);
        let mut ambiguous = false;
        let mut tries = 0;
        loop {
            tries += 1;
            match self.store.release(lock, target.keys(), target.owner(), target.kind).await {
                Ok(Ownership::Ours) => {
                    if let Some(yielding) = &self.yielding {
                        yielding.released_contended(target.keys().record());
                    }
                    return Ok(());
                }
                // An earlier try whose reply was lost freed it.
                Ok(Ownership::Gone) if ambiguous => return Ok(()),
                Ok(Ownership::Gone) => return Err(Error::lost(BACKEND, lock, LossReason::RecordGone)),
                Ok(Ownership::Other) => return Err(Error::lost(BACKEND, lock, LossReason::OwnedByAnother)),
                Err(error) if error.is_retryable() && tries < RELEASE_TRIES => {
                    tracing::debug!(%error, "release call failed; retrying");
                    ambiguous = true;
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The downgrade script turns the writer record into a reader's entry with the same
    /// token and the same expiry in one step, and hands the readers at the head of the queue
    /// their share (see `downgrade.lua`). The renewals, the release and the keyspace watch of
    /// a read-write hold cover both forms, so nothing else changes here. A call whose outcome
    /// is unknown is sent again (the script finds a hold that is a read hold already); once
    /// the release has started, nothing is sent.
    fn downgrade(&self) -> Option<Pin<Box<dyn Future<Output = Result<()>> + Send + 'static>>> {
        if self.target.kind != Kind::Write {
            return None;
        }
        let (store, target, token) = (Arc::clone(&self.store), Arc::clone(&self.target), self.token);
        Some(Box::pin(async move {
            let lock = target.signal.lock();
            let mut backoff = Backoff::up_to(RETRY_MAX);
            let mut tries = 0;
            loop {
                if target.released.load(Ordering::Acquire) {
                    return Ok(());
                }
                tries += 1;
                match store.downgrade(lock, target.keys(), target.owner(), token).await {
                    Ok(Ownership::Ours) => return Ok(()),
                    // The release started after the check above and got there first.
                    Ok(_) if target.released.load(Ordering::Acquire) => return Ok(()),
                    Ok(Ownership::Gone) => return Err(Error::lost(BACKEND, lock, LossReason::RecordGone)),
                    Ok(Ownership::Other) => return Err(Error::lost(BACKEND, lock, LossReason::OwnedByAnother)),
                    Err(error) if error.is_retryable() && tries < RELEASE_TRIES => {
                        tracing::debug!(%error, "downgrade call failed; retrying");
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                    Err(error) => return Err(error),
                }
            }
        }))
    }
}
