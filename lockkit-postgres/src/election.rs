//! Leader election: campaigns ([`HoldKind::Candidate`](lockkit_core::HoldKind::Candidate)
//! acquisitions), the leader's hold, its resignation, and who leads now.
//!
//! An election has tables and functions of its own next to the lock table's (see
//! `election_sql.rs`): a candidate is a row of `<schema>.candidates(name, owner, identity,
//! meta, pos, token, since, expires_at)`; the leader's row carries the term (`token`, from the
//! same `tokens` sequence as the locks' tokens, drawn under the name's advisory lock), the
//! others wait in `pos` order, as lock waiters do. Every term and every vacancy is appended to
//! the journal `<schema>.terms` in the same transaction, and `pg_notify('<schema>_elections',
//! …)` wakes both the waiting candidates and the observers ([`crate::observe`]).
//!
//! A campaign is an acquisition like a lock's, with the same lost-reply handling: the owner id
//! is unique per campaign, the next try with it finds its own candidacy (it leads already, or
//! keeps its place), and a campaign that ends without leading after a try in doubt calls
//! `<schema>.abandon_candidacy` in the background, which voids the owner id and removes its
//! row (a vacancy in the journal if it had come to lead). A resignation deletes the leader's
//! row and journals the vacancy; the notification wakes the next candidate, whose own try
//! takes the leadership (one round trip after the notification).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lockkit_core::backend::{
    AcquireRequest, Deadline, Grant, HeldLock, HoldSignal, LockInfo, OwnerMeta, lease_deadline,
};
use lockkit_core::{Error, FencingToken, HoldKind, LockName, Result};
use tokio_postgres::types::Type;

use crate::BACKEND;
use crate::client::{Inner, SAFETY_POLL, after_failure, wait_turn};
use crate::election_sql::{KIND_CONFLICT, PAYLOAD_PREFIX};
use crate::held::{delete_row, stored_holder};
use crate::store::Failure;

/// The key under which the waiting candidates and the observers of election `lock` are woken.
pub(crate) fn wake_key(lock: &LockName) -> String {
    format!("{PAYLOAD_PREFIX}{}", crate::stored_name(lock.as_str()))
}

/// `error` as [`Error::Conflict`] when the server refused a name in use as the other kind.
pub(crate) fn kind_conflict(error: Error, lock: &LockName) -> Error {
    let code = std::error::Error::source(&error)
        .and_then(|source| source.downcast_ref::<tokio_postgres::Error>())
        .and_then(|e| e.as_db_error().map(|db| (db.code().code().to_owned(), db.message().to_owned())));
    match code {
        Some((code, message)) if code == KIND_CONFLICT => Error::conflict(BACKEND, Some(lock), message),
        _ => error,
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// One try of a campaign: `Ok(Ok(term))` leads, `Ok(Err(left))` another leads (or is ahead)
/// for about `left`.
async fn try_once(
    inner: &Inner,
    lock: &LockName,
    owner: &str,
    identity: &[u8],
    meta: &str,
    queue: bool,
) -> std::result::Result<std::result::Result<FencingToken, Duration>, Failure> {
    let settings = &inner.store.settings;
    let lease_ms = millis(settings.lease);
    // A waiting candidate keeps its place by trying again at least every `SAFETY_POLL`.
    let queue_ms = if queue { millis(SAFETY_POLL * 2 + settings.response_timeout) } else { 0 };
    let rows = inner
        .store
        .query(
            Some(lock),
            &inner.store.sql.election.campaign,
            &[
                (&crate::stored_name(lock.as_str()), Type::TEXT),
                (&owner, Type::TEXT),
                (&identity, Type::BYTEA),
                (&meta, Type::TEXT),
                (&lease_ms, Type::INT8),
                (&queue_ms, Type::INT8),
            ],
        )
        .await
        .map_err(|failure| match failure {
            Failure::Refused(error) => Failure::Refused(kind_conflict(error, lock)),
            other => other,
        })?;
    let refused = |e| Failure::Refused(inner.store.store_error(Some(lock), e));
    let row = rows
        .first()
        .ok_or_else(|| Failure::Refused(inner.store.store_error(Some(lock), "campaign returned no row")))?;
    let token: Option<i64> = row.try_get(0).map_err(refused)?;
    let left: Option<i64> = row.try_get(1).map_err(refused)?;
    match (token, left) {
        (Some(token), _) => Ok(Ok(FencingToken::new(u64::try_from(token).unwrap_or(0)))),
        (None, left) => Ok(Err(Duration::from_millis(u64::try_from(left.unwrap_or(1)).unwrap_or(1)))),
    }
}

/// Runs `statement(name, owner)` (resign or abandon) and returns its boolean.
async fn call(inner: &Inner, statement: &str, lock: &LockName, owner: &str) -> std::result::Result<bool, Failure> {
    let name = crate::stored_name(lock.as_str());
    let rows = inner.store.query(Some(lock), statement, &[(&name, Type::TEXT), (&owner, Type::TEXT)]).await?;
    Ok(rows.first().and_then(|row| row.try_get::<_, Option<bool>>(0).ok().flatten()).unwrap_or(false))
}

/// A campaign that ends without leading after sending a try: its candidacy (a place in the
/// queue, or a leadership a try whose reply was lost won) is abandoned in the background.
struct Campaign {
    inner: Arc<Inner>,
    lock: LockName,
    owner: String,
    /// A try was sent whose outcome this campaign does not know, or that may have queued it.
    trace: bool,
    granted: bool,
}

impl Drop for Campaign {
    fn drop(&mut self) {
        if self.granted || !self.trace {
            return;
        }
        let (inner, lock, owner) = (Arc::clone(&self.inner), self.lock.clone(), self.owner.clone());
        lockkit_core::home::spawn(async move {
            for _ in 0..40 {
                match call(&inner, &inner.store.sql.election.abandon, &lock, &owner).await {
                    Ok(_) | Err(Failure::Refused(_)) => return,
                    Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
                }
            }
        });
    }
}

/// Campaigns for election `request.lock`, publishing `identity` while leading: the
/// [`LockBackend::acquire`](lockkit_core::backend::LockBackend::acquire) of a candidate.
pub(crate) async fn campaign(
    inner: &Arc<Inner>,
    request: AcquireRequest,
    identity: Arc<[u8]>,
) -> Result<Option<Grant>> {
    let owner = request.attempt.to_string();
    let meta = OwnerMeta::current(request.attempt).encode();
    let mut attempt = Campaign {
        inner: Arc::clone(inner),
        lock: request.lock.clone(),
        owner: owner.clone(),
        trace: false,
        granted: false,
    };
    let mut slot = None;
    loop {
        let notified = slot.as_ref().map(crate::listener::Slot::armed);
        let sent = Instant::now();
        let queue = !matches!(request.deadline, Deadline::Now);
        // From here until an answer, the campaign may have left a row behind.
        let had_trace = attempt.trace;
        attempt.trace = true;
        let outcome = try_once(inner, &request.lock, &owner, &identity, &meta, queue).await;
        let wait = match outcome {
            Ok(Ok(token)) => {
                request.note_reached();
                let settings = &inner.store.settings;
                let signal = HoldSignal::new(
                    BACKEND,
                    request.lock.clone(),
                    Some(lease_deadline(sent, settings.lease, settings.drift)),
                );
                let id = inner.track(request.lock.clone(), Arc::from(owner.as_str()), signal.clone());
                attempt.granted = true;
                let held = Leadership {
                    inner: Arc::clone(inner),
                    id,
                    lock: request.lock.clone(),
                    owner,
                    signal: signal.clone(),
                };
                return Ok(Some(Grant::new(token, signal, Box::new(held))));
            }
            Ok(Err(left)) => {
                request.note_reached();
                // Refused: a queued try left a place, an unqueued one nothing (but an
                // earlier try whose reply was lost may have).
                attempt.trace = had_trace || queue;
                if matches!(request.deadline, Deadline::Now) {
                    return Ok(None);
                }
                left + Duration::from_millis(5)
            }
            Err(Failure::Refused(error)) => {
                attempt.trace = had_trace;
                return Err(error);
            }
            Err(failure) => {
                if matches!(failure, Failure::NotSent(_)) {
                    attempt.trace = had_trace;
                }
                // A lost reply: the try may have committed, and the next one finds the candidacy.
                after_failure(&request, failure)?
            }
        };
        if slot.is_none() {
            match inner.wakeups.ensure(&inner.store).await {
                Ok(()) => slot = Some(inner.wakeups.register(&wake_key(&request.lock), None)),
                Err(error) => request.note_failure(error),
            }
            if slot.is_some() {
                continue;
            }
        } else if !inner.wakeups.is_up().await && inner.wakeups.ensure(&inner.store).await.is_ok() {
            continue;
        }
        if !wait_turn(inner, &request, wait, slot.is_some(), notified).await {
            return Ok(None);
        }
    }
}

/// The leader's hold: its release is the resignation.
struct Leadership {
    inner: Arc<Inner>,
    id: u64,
    lock: LockName,
    owner: String,
    signal: HoldSignal,
}

#[async_trait]
impl HeldLock for Leadership {
    async fn release(self: Box<Self>) -> Result<()> {
        self.inner.untrack(self.id);
        let resign = &self.inner.store.sql.election.resign;
        delete_row(&self.lock, &self.signal, || call(&self.inner, resign, &self.lock, &self.owner)).await
    }
}

/// The leader of election `lock` (as a holder of kind `Candidate`) and the waiting
/// candidates, as the store sees them now.
pub(crate) async fn inspect(inner: &Inner, lock: &LockName) -> Result<LockInfo> {
    let rows = inner
        .store
        .query(Some(lock), &inner.store.sql.election.inspect, &[(&crate::stored_name(lock.as_str()), Type::TEXT)])
        .await
        .map_err(Failure::into_error)?;
    let mut holders = Vec::new();
    let mut waiters = 0_i64;
    for row in rows {
        let get = |e| inner.store.store_error(Some(lock), e);
        waiters = row.try_get(5).map_err(get)?;
        let (Some(meta), Some(token), Some(since_ms), Some(left_ms), Some(identity)) = (
            row.try_get::<_, Option<String>>(0).map_err(get)?,
            row.try_get::<_, Option<i64>>(1).map_err(get)?,
            row.try_get::<_, Option<i64>>(2).map_err(get)?,
            row.try_get::<_, Option<i64>>(3).map_err(get)?,
            row.try_get::<_, Option<Vec<u8>>>(4).map_err(get)?,
        ) else {
            continue;
        };
        let kind = HoldKind::Candidate { identity: Arc::from(identity) };
        holders.push(stored_holder(meta, token, since_ms, left_ms).with_kind(kind));
    }
    Ok(LockInfo::new(holders, Some(usize::try_from(waiters).unwrap_or(0))))
}
