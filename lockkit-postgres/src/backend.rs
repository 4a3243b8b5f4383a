//! The backend: grant, wait, release, abandon, inspect, and the renewal task.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lockkit_core::backend::{
    AcquireRequest, Deadline, Grant, HoldSignal, LockBackend, LockInfo, OwnerMeta, lease_deadline,
};
use lockkit_core::{Capabilities, Error, FencingToken, HoldKind, LockName, Result};
use tokio::sync::Notify;
use tokio_postgres::types::Type;

use crate::BACKEND;
use crate::client::{Holds, Inner, SAFETY_POLL, after_failure, wait_turn};
use crate::config::Settings;
use crate::held::{PostgresHold, stored_holder};
use crate::listener::Wakeups;
use crate::store::{Failure, Store};

/// The PostgreSQL backend behind a provider.
#[derive(Debug, Clone)]
pub(crate) struct PostgresBackend {
    pub(crate) inner: Arc<Inner>,
}

impl PostgresBackend {
    pub(crate) fn new(settings: Settings) -> Self {
        Self {
            inner: Arc::new(Inner {
                store: Arc::new(Store::new(settings)),
                wakeups: Wakeups::default(),
                holds: Mutex::new(Holds::default()),
                renew_wake: Arc::new(Notify::new()),
            }),
        }
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.inner.store.settings
    }

    /// How many holds the renewal task renews now.
    pub(crate) fn renewing(&self) -> usize {
        self.inner.holds().live.len()
    }
}

impl Inner {
    /// The grant of `request` to `owner` with `token`, valid until `lease` (less the drift)
    /// after `sent`, a local instant before the server's lease began; tracked for renewal.
    fn grant(
        self: &Arc<Self>,
        request: &AcquireRequest,
        owner: String,
        token: FencingToken,
        sent: Instant,
        lease: Duration,
    ) -> Grant {
        let signal = HoldSignal::new(
            BACKEND,
            request.lock.clone(),
            Some(lease_deadline(sent, lease, self.store.settings.drift)),
        );
        let owner: Arc<str> = Arc::from(owner);
        let id = self.track(request.lock.clone(), Arc::clone(&owner), signal.clone());
        let held = PostgresHold {
            inner: Arc::clone(self),
            id,
            lock: request.lock.clone(),
            owner,
            signal: signal.clone(),
            write: matches!(request.kind, HoldKind::Write),
        };
        Grant::new(token, signal, Box::new(held))
    }

    /// One attempt for a hold of `kind` (stored as `kind_name` and `permits`).
    async fn try_once(
        &self,
        lock: &LockName,
        owner: &str,
        meta: &str,
        queue: bool,
        kind: &StoredKind,
    ) -> std::result::Result<Try, Failure> {
        let lease_ms = i64::try_from(self.store.settings.lease.as_millis()).unwrap_or(i64::MAX);
        // A queued waiter keeps its place by trying again at least every `SAFETY_POLL`.
        let queue_ms = if queue {
            i64::try_from((SAFETY_POLL * 2 + self.store.settings.response_timeout).as_millis()).unwrap_or(i64::MAX)
        } else {
            0
        };
        let rows = self
            .store
            .query(
                Some(lock),
                &self.store.sql.acquire,
                &[
                    (&crate::stored_name(lock.as_str()), Type::TEXT),
                    (&owner, Type::TEXT),
                    (&meta, Type::TEXT),
                    (&lease_ms, Type::INT8),
                    (&queue_ms, Type::INT8),
                    (&kind.name, Type::TEXT),
                    (&kind.permits, Type::INT4),
                ],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| Failure::Refused(self.store.store_error(Some(lock), "acquire returned no row")))?;
        let get = |e| Failure::Refused(self.store.store_error(Some(lock), e));
        let token: Option<i64> = row.try_get(0).map_err(get)?;
        let left: Option<i64> = row.try_get(1).map_err(get)?;
        let conflict: Option<String> = row.try_get(2).map_err(get)?;
        let server_us: Option<i64> = row.try_get(3).map_err(get)?;
        let left = Duration::from_millis(u64::try_from(left.unwrap_or(1)).unwrap_or(1));
        Ok(match (token, conflict) {
            (Some(token), _) => Try::Granted(FencingToken::new(u64::try_from(token).unwrap_or(0)), left),
            (None, Some(conflict)) => Try::Conflict(Error::conflict(BACKEND, Some(lock), kind.conflict(&conflict))),
            (None, None) => Try::Busy(left, server_us),
        })
    }
}

/// What one try of an acquisition found.
enum Try {
    /// Granted (now, or earlier by a hand-over or a try whose reply was lost), with the token
    /// and how long the row's lease had left when the server answered.
    Granted(FencingToken, Duration),
    /// Not granted: look again after this long at the latest; the server time (µs) once the
    /// refusal had run.
    Busy(Duration, Option<i64>),
    /// The name is in use as another kind.
    Conflict(Error),
}

/// A hold kind as the tables store it.
#[derive(Clone, Debug)]
pub(crate) struct StoredKind {
    name: &'static str,
    permits: i32,
}

impl StoredKind {
    fn of(kind: &HoldKind) -> Option<Self> {
        let (name, permits) = match kind {
            HoldKind::Exclusive => ("mutex", 0),
            HoldKind::Read => ("read", 0),
            HoldKind::Write => ("write", 0),
            HoldKind::Permit { permits } => ("permit", i32::try_from(permits.get()).unwrap_or(i32::MAX)),
            _ => return None,
        };
        Some(Self { name, permits })
    }

    /// The message of a conflict the acquire function reported: `lock` when the name is in
    /// use as a lock, else the permit count of the semaphore that uses it.
    fn conflict(&self, found: &str) -> String {
        match (found.parse::<u64>(), self.name) {
            (Ok(count), "permit") => format!(
                "the semaphore is in use with {count} permits and this handle asks for {}; every user of a \
                 semaphore must give the same count",
                self.permits
            ),
            (Ok(count), kind) => {
                let what = if kind == "mutex" { "lock" } else { "read-write lock" };
                format!("the name is in use as a semaphore of {count} permits; give the {what} another name")
            }
            (Err(_), _) => {
                "the name is in use as a lock (a mutex or a read-write lock); give the semaphore another name"
                    .to_owned()
            }
        }
    }
}

/// The attempt of one acquisition: when it ends without a grant after sending a try, its row
/// (if a try whose reply was lost made one) is deleted in the background.
struct Attempt {
    inner: Arc<Inner>,
    lock: LockName,
    owner: String,
    /// The send time of the try in flight, while one is.
    in_flight: Option<Instant>,
    /// The send time of the last try whose reply was lost.
    lost_reply: Option<Instant>,
    /// A try may have put this acquisition in the queue.
    queued: bool,
    granted: bool,
}

impl Drop for Attempt {
    fn drop(&mut self) {
        let doubt = self.in_flight.max(self.lost_reply);
        if self.granted || (doubt.is_none() && !self.queued) {
            return;
        }
        let (inner, lock, owner) = (Arc::clone(&self.inner), self.lock.clone(), self.owner.clone());
        // `abandon` voids the owner id (a try of it still on its way is refused) and deletes
        // its row if a try whose reply was lost made one; retried while the server is away.
        lockkit_core::home::spawn(async move {
            for _ in 0..40 {
                match inner.abandon(&lock, &owner).await {
                    Ok(_) | Err(Failure::Refused(_)) => return,
                    Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
                }
            }
        });
    }
}

#[async_trait]
impl LockBackend for PostgresBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        // Every guarantee lockkit names; a flag added later is claimed too, and checked by the kit.
        Capabilities::ALL
    }

    fn renewal_interval(&self) -> Option<Duration> {
        Some(self.settings().renew_every)
    }

    fn address(&self) -> Option<String> {
        Some(self.settings().address.clone())
    }

    fn store_identity(&self) -> Option<String> {
        Some(self.settings().store_identity())
    }

    async fn acquire(&self, request: AcquireRequest) -> Result<Option<Grant>> {
        let inner = &self.inner;
        if let HoldKind::Candidate { identity } = &request.kind {
            let identity = Arc::clone(identity);
            return crate::election::campaign(inner, request, identity).await;
        }
        // `<tag>.<attempt>`: a hand-over to it is announced on this provider's own channel.
        let owner = inner.wakeups.owner_id(&request.attempt);
        let meta = OwnerMeta::current(request.attempt).encode();
        let Some(kind) = StoredKind::of(&request.kind) else {
            return Err(Error::unsupported(BACKEND, Some(&request.lock), "this kind of hold"));
        };
        let mut attempt = Attempt {
            inner: Arc::clone(inner),
            lock: request.lock.clone(),
            owner: owner.clone(),
            in_flight: None,
            lost_reply: None,
            queued: false,
            granted: false,
        };
        // A waiting acquisition registers its wake-up before its first try when the listening
        // connection is up already: a hand-over or release after that try is then heard, and
        // the try that would otherwise follow the registration (one more turn on the name's
        // advisory lock, in the way of the holder's release) is not needed.
        let mut slot: Option<crate::listener::Slot> = None;
        if !matches!(request.deadline, Deadline::Now) && inner.wakeups.is_up().await {
            slot = Some(inner.wakeups.register(&crate::stored_name(request.lock.as_str()), Some(&owner)));
        }
        let settings = &inner.store.settings;
        // The local send time and the server time of the last try, when it was refused: the
        // proof a hand-over's notification is checked against (`from_notification`).
        let mut refused: Option<(Instant, i64)> = None;
        loop {
            if let Some(handed) = slot.as_ref().and_then(crate::listener::Slot::take_handed)
                && let Some(sent) = from_notification(handed, refused, settings, Instant::now())
            {
                // Handed over by a release after the last refusal ran: taken without a try.
                request.note_reached();
                attempt.granted = true;
                let token = FencingToken::new(handed.token);
                return Ok(Some(inner.grant(&request, owner, token, sent, settings.lease)));
            }
            let notified = slot.as_ref().map(crate::listener::Slot::armed);
            let sent = Instant::now();
            attempt.in_flight = Some(sent);
            let queue = !matches!(request.deadline, Deadline::Now);
            attempt.queued |= queue;
            let outcome = inner.try_once(&request.lock, &owner, &meta, queue, &kind).await;
            attempt.in_flight = None;
            refused = match &outcome {
                Ok(Try::Busy(_, Some(at_us))) => Some((sent, *at_us)),
                // Anything else, a reply lost included (that try may have done anything):
                // no proof until the next refusal.
                _ => None,
            };
            let wait = match outcome {
                Ok(Try::Granted(token, left)) => {
                    request.note_reached();
                    attempt.granted = true;
                    // A grant made now has the whole lease left; one made earlier (a hand-over,
                    // a try whose reply was lost) has what the server saw left, counted here
                    // from this try's send time, which came before the server looked.
                    return Ok(Some(inner.grant(&request, owner, token, sent, settings.lease.min(left))));
                }
                Ok(Try::Conflict(error)) => {
                    request.note_reached();
                    return Err(error);
                }
                Ok(Try::Busy(left, _)) => {
                    // Not granted: this try left nothing behind (an earlier one whose reply
                    // was lost may still take effect: the drop of `attempt` sees to it).
                    request.note_reached();
                    if matches!(request.deadline, Deadline::Now) {
                        return Ok(None);
                    }
                    // The holder's lease ends (a dead holder notifies nobody), plus a margin.
                    left + Duration::from_millis(5)
                }
                Err(Failure::Refused(error)) => return Err(crate::election::kind_conflict(error, &request.lock)),
                Err(failure) => {
                    if matches!(failure, Failure::Unknown(_)) {
                        // The grant may have committed: the next try finds the row ours.
                        attempt.lost_reply = Some(sent);
                    }
                    after_failure(&request, failure)?
                }
            };
            if slot.is_none() {
                // From the first refusal on, wait for notifications: listen, register, then
                // look again at once (a release may have come in between).
                match inner.wakeups.ensure(&inner.store).await {
                    Ok(()) => {
                        slot = Some(inner.wakeups.register(&crate::stored_name(request.lock.as_str()), Some(&owner)));
                    }
                    Err(error) => request.note_failure(error),
                }
                if slot.is_some() {
                    continue;
                }
            } else if !inner.wakeups.is_up().await {
                // The LISTEN connection broke: reopen it, and look again at once.
                if inner.wakeups.ensure(&inner.store).await.is_ok() {
                    continue;
                }
            }
            if !wait_turn(inner, &request, wait, slot.is_some(), notified).await {
                return Ok(None);
            }
        }
    }

    async fn inspect(&self, lock: &LockName) -> Result<lockkit_core::backend::LockInfo> {
        // The lock table and the election's, in one pipelined round trip; a name is one kind.
        let name = crate::stored_name(lock.as_str());
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 1] = [(&name, Type::TEXT)];
        let (rows, election) = tokio::join!(
            self.inner.store.query(Some(lock), &self.inner.store.sql.inspect, &params),
            crate::election::inspect(&self.inner, lock)
        );
        let election = election?;
        if !election.is_idle() {
            return Ok(election);
        }
        let rows = rows.map_err(Failure::into_error)?;
        let mut holders = Vec::new();
        let mut waiters = 0_i64;
        for row in rows {
            let get = |e| self.inner.store.store_error(Some(lock), e);
            waiters = row.try_get(4).map_err(get)?;
            let meta: Option<String> = row.try_get(0).map_err(get)?;
            let (Some(meta), Some(token), Some(since_ms), Some(left_ms)) = (
                meta,
                row.try_get::<_, Option<i64>>(1).map_err(get)?,
                row.try_get::<_, Option<i64>>(2).map_err(get)?,
                row.try_get::<_, Option<i64>>(3).map_err(get)?,
            ) else {
                continue;
            };
            let kind: Option<String> = row.try_get(5).map_err(get)?;
            let permits: Option<i32> = row.try_get(6).map_err(get)?;
            let kind = stored_kind(kind.as_deref(), permits);
            holders.push(stored_holder(meta, token, since_ms, left_ms).with_kind(kind));
        }
        Ok(LockInfo::new(holders, Some(usize::try_from(waiters).unwrap_or(0))))
    }

    fn observe(&self, lock: &LockName) -> Result<lockkit_core::backend::LeaderEvents> {
        Ok(crate::observe::observe(Arc::clone(&self.inner), lock.clone()))
    }

    /// `<schema>.break_lock(name)`: deletes every holder row of the name under the name's
    /// advisory lock and notifies its waiters; a broken holder's next renewal finds its row
    /// gone (`RecordGone`). Sent once: a reply lost is an error, never a retry that could break
    /// the next holder.
    async fn break_lock(&self, lock: &LockName) -> Result<Vec<lockkit_core::backend::HolderInfo>> {
        let store = &self.inner.store;
        let name = crate::stored_name(lock.as_str());
        let rows = store.query(Some(lock), &store.sql.break_lock, &[(&name, Type::TEXT)]).await;
        let rows = rows.map_err(Failure::into_error)?;
        let mut broken = Vec::with_capacity(rows.len());
        for row in rows {
            let get = |e| store.store_error(Some(lock), e);
            let meta: String = row.try_get(0).map_err(get)?;
            let token: i64 = row.try_get(1).map_err(get)?;
            let since_ms: i64 = row.try_get(2).map_err(get)?;
            let left_ms: i64 = row.try_get(3).map_err(get)?;
            let kind: Option<String> = row.try_get(4).map_err(get)?;
            let permits: Option<i32> = row.try_get(5).map_err(get)?;
            let kind = stored_kind(kind.as_deref(), permits);
            broken.push(stored_holder(meta, token, since_ms, left_ms).with_kind(kind));
        }
        Ok(broken)
    }
}

/// Whether a hand-over announced by its notification (`handed`) may be taken without a
/// confirming try, and if so the local instant its lease counts from: the send time of the last
/// try, `refused` (its send time and the server time once it had run), when that try was
/// refused and the hand-over's server time is later than the refusal's. Then the try was sent
/// before the refusal ran, which ran before the hand-over (the server clock does not step
/// back, the assumption the tokens rest on too), so a deadline of that send time plus the
/// lease (less the drift) ends before the handed row's lease, which began at the hand-over. A
/// refusal that ran after the hand-over proves nothing: the handed row may be gone already (lost
/// in a crash and refused by the restart fence, expired while the waiter was cut off, broken).
/// A crash after the hand-over fences new grants until the longest lease after the restart,
/// past this deadline. The grant is also declined (and confirmed by a try, as before) when the
/// deadline would leave less than a renewal round and a half, so that the first renewal lands
/// before it.
fn from_notification(
    handed: crate::listener::Handed,
    refused: Option<(Instant, i64)>,
    settings: &Settings,
    now: Instant,
) -> Option<Instant> {
    let (sent, refused_at) = refused?;
    if handed.at_us <= refused_at {
        return None;
    }
    let deadline = lease_deadline(sent, settings.lease, settings.drift);
    let room = settings.renew_every + settings.renew_every / 2;
    now.checked_add(room).is_some_and(|enough| deadline > enough).then_some(sent)
}

/// The kind of a holder row (`kind`, and `permits` for a permit); a leader (`candidate`) and
/// anything unknown show as exclusive.
fn stored_kind(kind: Option<&str>, permits: Option<i32>) -> HoldKind {
    match (kind, permits) {
        (Some("read"), _) => HoldKind::Read,
        (Some("write"), _) => HoldKind::Write,
        (Some("permit"), Some(permits)) => u32::try_from(permits)
            .ok()
            .and_then(std::num::NonZeroU32::new)
            .map_or(HoldKind::Exclusive, |permits| HoldKind::Permit { permits }),
        _ => HoldKind::Exclusive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listener::Handed;

    fn settings() -> Settings {
        // Lease 30 s, renewal every 10 s, drift half a second.
        crate::PostgresLockProviderBuilder::default()
            .url("postgres://h/db")
            .lease(Duration::from_secs(30))
            .renew_every(Duration::from_secs(10))
            .drift(Duration::from_millis(500))
            .settings()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_notification_is_taken_only_after_the_refusal_it_is_checked_against() {
        let settings = settings();
        let now = Instant::now();
        let sent = now.checked_sub(Duration::from_secs(1)).unwrap_or(now);
        let handed = |at_us| Handed { token: 7, at_us };
        // The hand-over ran after the refusal: taken, the lease counted from the try's send time.
        assert_eq!(from_notification(handed(1_001), Some((sent, 1_000)), &settings, now), Some(sent));
        // At the same microsecond or before: the handed row may be gone already; not taken.
        assert_eq!(from_notification(handed(1_000), Some((sent, 1_000)), &settings, now), None);
        assert_eq!(from_notification(handed(999), Some((sent, 1_000)), &settings, now), None);
        // No refusal to check against (the last try was granted, lost, or not yet made).
        assert_eq!(from_notification(handed(1_001), None, &settings, now), None);
        // A refusal so old that the deadline would not leave a renewal round and a half
        // (15 s): confirmed by a try instead.
        let old = now.checked_sub(Duration::from_secs(15)).unwrap_or(now);
        assert_eq!(from_notification(handed(1_001), Some((old, 1_000)), &settings, now), None);
        let recent = now.checked_sub(Duration::from_secs(14)).unwrap_or(now);
        assert_eq!(from_notification(handed(1_001), Some((recent, 1_000)), &settings, now), Some(recent));
    }
}
