//! The interface a backend implements: its store's protocol and nothing more.
//!
//! Reentrancy, timeouts, cancellation of the caller's future, the guard, its `Drop` and the
//! error type are written once in this crate, in [`LockHandle`](crate::LockHandle). A backend
//! implements [`LockBackend`] (grant or refuse one acquisition, optionally waiting), returns a
//! [`Grant`] that carries a [`HeldLock`] (frees the hold) and a [`HoldSignal`] (reports
//! renewals and loss), and runs the conformance kit of `lockkit-testkit` to prove it.
//!
//! # What the core expects of `acquire`
//!
//! - **Exclusion and fencing:** at most one grant per name is live at a time, and every grant
//!   carries a token strictly greater than all tokens granted before it for that name.
//! - **Deadline:** with [`Deadline::Now`] it never waits on another owner; otherwise it may
//!   wait until the deadline, driven by notifications of the store. The core also drops the
//!   future at the deadline, so returning `Ok(None)` there is a courtesy, not a duty.
//! - **Cancel safety:** the future may be dropped at any await point (timeout, caller
//!   cancellation). Dropping it must leave no trace in the store, and a hold granted while
//!   the future was being dropped must be freed promptly (in the background if need be).
//! - **No reentrancy:** the core never asks for a lock its handle already holds.

use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use uuid::Uuid;

use crate::{Capabilities, Deadline, Error, FencingToken, HoldSignal, LockName, Result};

/// One acquisition asked of a backend.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AcquireRequest {
    /// The lock to acquire.
    pub lock: LockName,
    /// Until when the backend may wait for another owner.
    pub deadline: Deadline,
    /// A fresh identifier of this acquisition, unique across processes: the owner value a
    /// store records, and the key to find again a grant whose reply was lost.
    pub attempt: Uuid,
}

impl AcquireRequest {
    /// A request for `lock` with a fresh attempt id.
    pub fn new(lock: LockName, deadline: Deadline) -> Self {
        Self { lock, deadline, attempt: Uuid::new_v4() }
    }
}

/// A lock granted by a backend: the token, the signal, and the means to free it.
#[non_exhaustive]
pub struct Grant {
    /// The fencing token of this hold.
    pub token: FencingToken,
    /// The hold's deadline and loss signal; the backend keeps a clone to report on it.
    pub signal: HoldSignal,
    /// Frees the hold; called exactly once by the core.
    pub held: Box<dyn HeldLock>,
}

impl Grant {
    /// Bundles a grant.
    pub fn new(token: FencingToken, signal: HoldSignal, held: Box<dyn HeldLock>) -> Self {
        Self { token, signal, held }
    }
}

impl fmt::Debug for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grant").field("token", &self.token).field("signal", &self.signal).finish_non_exhaustive()
    }
}

/// A backend's record of one granted hold, able to free it.
#[async_trait]
pub trait HeldLock: Send + Sync + 'static {
    /// Frees the hold in the store, stops renewing it, and never frees another owner's hold.
    ///
    /// Called exactly once, when the last guard of the hold is released or dropped, whether
    /// or not the hold was lost meanwhile (a lost hold may still have local state or a
    /// record to clean up).
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when the store shows the hold was no longer ours; a connection
    /// error when the outcome is unknown.
    async fn release(self: Box<Self>) -> Result<()>;
}

/// What a backend can tell about one lock, for status displays and for the conformance kit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The current holder, if any.
    pub holder: Option<HolderInfo>,
    /// How many waiters are queued, when the backend keeps a queue.
    pub waiters: Option<usize>,
}

impl LockInfo {
    /// Info for a lock held by `holder` (if any) with `waiters` queued (if known).
    pub fn new(holder: Option<HolderInfo>, waiters: Option<usize>) -> Self {
        Self { holder, waiters }
    }

    /// Whether the lock is free and nobody waits: what a lock looks like when no trace is left.
    pub fn is_idle(&self) -> bool {
        self.holder.is_none() && self.waiters.unwrap_or(0) == 0
    }
}

/// The holder of a lock, as the store records it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The holder's fencing token.
    pub token: FencingToken,
    /// The owner value the store keeps (the acquisition's attempt id, or richer metadata).
    pub owner: String,
    /// When the hold was granted, when the store knows.
    pub since: Option<SystemTime>,
    /// How long the lease has left, for leased holds.
    pub lease_left: Option<Duration>,
}

impl HolderInfo {
    /// Describes a holder.
    pub fn new(token: FencingToken, owner: impl Into<String>) -> Self {
        Self { token, owner: owner.into(), since: None, lease_left: None }
    }

    /// Sets when the hold was granted.
    pub fn with_since(mut self, since: SystemTime) -> Self {
        self.since = Some(since);
        self
    }

    /// Sets how long the lease has left.
    pub fn with_lease_left(mut self, left: Duration) -> Self {
        self.lease_left = Some(left);
        self
    }
}

/// Who took a hold: the host, the process and the time, recorded by backends next to the
/// owner id so that status displays can say who holds a lock and since when.
///
/// [`encode`](Self::encode) writes one line, `attempt host pid since_ms`, that
/// [`decode`](Self::decode) reads back; backends store it as the lock record's value (Redis)
/// or as the lock node's data (ZooKeeper). Hosts are reduced to characters that cannot break
/// the format.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OwnerMeta {
    /// The acquisition's attempt id.
    pub attempt: Uuid,
    /// The host name of the holder's machine.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// When the acquisition started.
    pub since: SystemTime,
}

impl OwnerMeta {
    /// The metadata of acquisition `attempt` by this process, now.
    pub fn current(attempt: Uuid) -> Self {
        Self { attempt, host: host_name(), pid: std::process::id(), since: SystemTime::now() }
    }

    /// One line: `attempt host pid since_ms`.
    pub fn encode(&self) -> String {
        let since = self.since.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        format!("{} {} {} {since}", self.attempt, self.host, self.pid)
    }

    /// Reads what [`encode`](Self::encode) wrote; `None` for anything else.
    pub fn decode(text: &str) -> Option<Self> {
        let mut fields = text.split(' ');
        let attempt = Uuid::parse_str(fields.next()?).ok()?;
        let host = fields.next()?.to_owned();
        let pid = fields.next()?.parse().ok()?;
        let since_ms: u64 = fields.next()?.parse().ok()?;
        if fields.next().is_some() {
            return None;
        }
        let since = SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(since_ms))?;
        Some(Self { attempt, host, pid, since })
    }

    /// A holder description for [`HolderInfo`]: "pid 4242 on build-7 (attempt …)", with the
    /// start time.
    pub fn holder(&self, token: FencingToken) -> HolderInfo {
        HolderInfo::new(token, format!("pid {} on {} (attempt {})", self.pid, self.host, self.attempt))
            .with_since(self.since)
    }
}

/// This machine's host name, from the kernel, or `unknown`; only characters that keep the
/// owner line parseable. Read once per process: every acquisition records it.
fn host_name() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_default();
        let host: String = raw
            .trim()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
            .take(253)
            .collect();
        if host.is_empty() { "unknown".to_owned() } else { host }
    })
    .clone()
}

/// The protocol of one store: grant, refuse or queue acquisitions; inspect locks.
///
/// Implementations must be cheap to share (`Arc<dyn LockBackend>`). See the module docs for
/// what the core expects of [`LockBackend::acquire`].
#[async_trait]
pub trait LockBackend: Send + Sync + fmt::Debug + 'static {
    /// A short name of the backend for messages and spans: `"memory"`, `"redis"`, `"zk"`.
    fn name(&self) -> &'static str;

    /// What this backend promises beyond the common contract.
    fn capabilities(&self) -> Capabilities;

    /// Grants the lock, or waits for it until the request's deadline; `Ok(None)` when it is
    /// not granted in time.
    async fn acquire(&self, request: AcquireRequest) -> Result<Option<Grant>>;

    /// Reports the holder and queue of a lock, as the store sees them now.
    ///
    /// The default says the backend cannot; backends that declare
    /// [`Capabilities::inspect`] override it.
    async fn inspect(&self, lock: &LockName) -> Result<LockInfo> {
        Err(Error::backend(self.name(), Some(lock), "this backend cannot inspect locks"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn owner_meta_round_trips_and_refuses_other_text() {
        let meta = OwnerMeta::current(Uuid::new_v4());
        let decoded = OwnerMeta::decode(&meta.encode()).unwrap();
        assert_eq!(decoded.attempt, meta.attempt);
        assert_eq!((decoded.host.as_str(), decoded.pid), (meta.host.as_str(), meta.pid));
        assert!(meta.since.duration_since(decoded.since).unwrap() < Duration::from_millis(1));
        assert!(!meta.host.is_empty() && !meta.host.contains(' '));
        for bad in ["", "x", "not-a-uuid h 1 2", &format!("{} h 1", meta.attempt), &format!("{} h 1 2 3", meta.attempt)]
        {
            assert_eq!(OwnerMeta::decode(bad), None, "{bad:?}");
        }
        assert!(meta.holder(FencingToken::new(3)).owner.contains(&format!("pid {}", meta.pid)));
    }
}
