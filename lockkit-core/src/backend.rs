//! The interface a backend implements: its store's protocol and nothing more.
//!
//! Reentrancy, timeouts, cancellation of the caller's future, the guard, its `Drop`, the
//! release of dropped guards on any runtime and the error type are written once in this
//! crate. A backend implements [`LockBackend`] (grant or refuse one acquisition of one
//! [`HoldKind`], optionally waiting), returns a [`Grant`] that carries a [`HeldLock`] (frees
//! the hold) and a [`HoldSignal`] (reports renewals and loss), and runs the conformance kit of
//! `lockkit-testkit` to prove it. [`LockProvider::new`](crate::LockProvider::new) turns the
//! backend into what users hold.
//!
//! Everything here is for implementors; application code needs none of it.
//!
//! # What the core expects of `acquire`
//!
//! - **Kinds:** the core only asks for kinds the backend declares in its
//!   [`Capabilities`] ([`HoldKind::is_supported_by`]); `Exclusive` always.
//! - **Exclusion and fencing:** at most one exclusive grant per name is live at a time, and
//!   every grant carries a token strictly greater than all tokens granted before it for that
//!   name.
//! - **Deadline:** with [`Deadline::Now`] it never waits on another owner; otherwise it may
//!   wait until the deadline, driven by notifications of the store. The core also drops the
//!   future at the deadline, so returning `Ok(None)` there is a courtesy, not a duty. A
//!   failure the backend retries past (the store unreachable, say) is reported with
//!   [`AcquireRequest::note_failure`], so that a timeout can say why it came.
//! - **Cancel safety:** the future may be dropped at any await point (timeout, caller
//!   cancellation). Dropping it must leave no trace in the store, and a hold granted while
//!   the future was being dropped must be freed promptly (in the background if need be).
//! - **Every acquisition is a new owner:** the core never asks for a lock on behalf of an
//!   owner that holds it already; reentry is the core's, through the guard.
//! - **Any runtime:** the futures of `acquire`, `inspect` and [`HeldLock::release`] may be
//!   polled on any Tokio runtime, not only the one the backend first ran on; a backend
//!   restarts what belonged to a runtime that has gone (its renewal task, its connections).

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use uuid::Uuid;

pub use futures_core::Stream;

pub use crate::backoff::Backoff;
pub use crate::journal_observer::{JOURNAL_POLL, JOURNAL_RETRY_MAX, Journal, JournalRead, journal_observer};
pub use crate::observer_task::{
    FOLLOW_FIRST_PAUSE, FOLLOW_MAX_PAUSE, Follow, FollowEnd, LastShown, OUTBOX_CAPACITY, ObserverTask, Outbox,
    follow_task, observer_task,
};
pub use crate::options::Deadline;
pub use crate::signal::{HoldSignal, deadline_after, lease_deadline};
use crate::{Capabilities, Error, FencingToken, HoldKind, LeaderEvent, LockName, Result};

/// One acquisition asked of a backend.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AcquireRequest {
    /// The lock to acquire.
    pub lock: LockName,
    /// The kind of hold asked for; always one the backend declares.
    pub kind: HoldKind,
    /// Until when the backend may wait for another owner.
    pub deadline: Deadline,
    /// A fresh identifier of this acquisition, unique across processes: the owner value a
    /// store records, and the key to find again a grant whose reply was lost.
    pub attempt: Uuid,
    /// The maximum hold asked for, if any. The core caps the grant's signal with it
    /// ([`HoldSignal::cap_at`]) when it receives the grant; a backend only reads it when it
    /// must act at the cap itself (free a hold that has no lease, say).
    pub max_hold: Option<Duration>,
    /// The last failure the backend retried past; shared by clones of the request.
    last_failure: Arc<Mutex<Option<Error>>>,
}

impl AcquireRequest {
    /// A request for a hold of `kind` on `lock` with a fresh attempt id.
    pub fn new(lock: LockName, kind: HoldKind, deadline: Deadline) -> Self {
        Self { lock, kind, deadline, attempt: Uuid::new_v4(), max_hold: None, last_failure: Arc::default() }
    }

    /// Sets the maximum hold asked for.
    #[must_use]
    pub fn with_max_hold(mut self, max_hold: Option<Duration>) -> Self {
        self.max_hold = max_hold;
        self
    }

    /// Records a failure that the backend retries past instead of returning it (the store
    /// unreachable while a wait goes on, say). If the deadline passes before a later attempt
    /// reaches the store, the [`Error::Timeout`] carries this failure as its source.
    pub fn note_failure(&self, error: Error) {
        *self.failure_slot() = Some(error);
    }

    /// Records that an attempt reached the store, clearing an earlier failure: a timeout
    /// after this is an ordinary one.
    pub fn note_reached(&self) {
        self.failure_slot().take();
    }

    /// Takes the failure recorded last, if no attempt reached the store since.
    pub(crate) fn take_failure(&self) -> Option<Error> {
        self.failure_slot().take()
    }

    fn failure_slot(&self) -> std::sync::MutexGuard<'_, Option<Error>> {
        // Nothing panics while holding this lock; recover the data if something ever did.
        self.last_failure.lock().unwrap_or_else(PoisonError::into_inner)
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
    /// Called at most once, when the last guard of the hold is released or dropped, whether
    /// or not the hold was lost meanwhile (a lost hold may still have local state or a
    /// record to clean up); not at all when [`release_at_once`](Self::release_at_once) freed
    /// the hold. The future runs on the runtime of the caller of `LockGuard::release`, or, for
    /// a dropped guard, on lockkit's home runtime ([`crate::home`]).
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when the store shows the hold was no longer ours; a connection
    /// error when the outcome is unknown.
    async fn release(self: Box<Self>) -> Result<()>;

    /// Frees the hold at once, without awaiting anything, when the backend can (an in-process
    /// store can; a network store cannot): the core tries it first when the last guard of a
    /// hold is dropped, so that the lock is free when `drop` returns, and sends
    /// [`release`](Self::release) to the home runtime only when this returns `None` (the
    /// default). `Some` is the outcome of the release, which is then over: `release` is not
    /// called.
    fn release_at_once(&mut self) -> Option<Result<()>> {
        None
    }

    /// Turns this write hold into a read hold in place, for backends that declare
    /// [`Capabilities::rw_lock`]: the core calls it (at most once, only for a
    /// [`HoldKind::Write`] hold) when the last write guard goes while read guards of the hold
    /// live. The store must keep the hold's place: no writer queued meanwhile may be granted
    /// in between, and readers queued behind no writer may be granted with it. The token
    /// stays the same.
    ///
    /// Returns the work to send, `'static` so that the core can run it in the background;
    /// `None` (the default) keeps the hold a write hold until its last guard goes, which is
    /// safe but makes other readers wait longer.
    fn downgrade(&self) -> Option<std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send + 'static>>> {
        None
    }
}

/// What a backend can tell about one lock, for status displays and for the conformance kit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The current holders: none, one, or several for shared kinds (readers, permits).
    pub holders: Vec<HolderInfo>,
    /// How many waiters are queued, when the backend keeps a queue.
    pub waiters: Option<usize>,
}

impl LockInfo {
    /// Info for a lock held by `holders` with `waiters` queued (if known).
    pub fn new(holders: Vec<HolderInfo>, waiters: Option<usize>) -> Self {
        Self { holders, waiters }
    }

    /// The holder of an exclusive lock (the first holder of a shared one).
    pub fn holder(&self) -> Option<&HolderInfo> {
        self.holders.first()
    }

    /// Whether the lock is free and nobody waits: what a lock looks like when no trace is left.
    pub fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.waiters.unwrap_or(0) == 0
    }
}

/// The holder of a lock, as the store records it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The holder's fencing token.
    pub token: FencingToken,
    /// The kind of the hold.
    pub kind: HoldKind,
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
        Self { token, kind: HoldKind::Exclusive, owner: owner.into(), since: None, lease_left: None }
    }

    /// Sets the kind of the hold (exclusive by default).
    #[must_use]
    pub fn with_kind(mut self, kind: HoldKind) -> Self {
        self.kind = kind;
        self
    }

    /// Sets when the hold was granted.
    #[must_use]
    pub fn with_since(mut self, since: SystemTime) -> Self {
        self.since = Some(since);
        self
    }

    /// Sets how long the lease has left.
    #[must_use]
    pub fn with_lease_left(mut self, left: Duration) -> Self {
        self.lease_left = Some(left);
        self
    }
}

/// Who took a hold: the host, the process and the time, recorded by backends next to the
/// owner id so that status displays can say who holds a lock and since when.
///
/// [`encode`](Self::encode) writes one line, `lockkit1 attempt host pid since_ms`, that
/// [`decode`](Self::decode) reads back; backends store it as the lock record's value (Redis)
/// or as the lock node's data (ZooKeeper). Hosts are reduced to characters that cannot break
/// the format. The leading version tag lets a later version add fields after these (a
/// reader of version 1 ignores them); lines without the tag, as written before it existed,
/// are still read.
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
        Self { attempt, host: host_name(), pid: process_id(), since: SystemTime::now() }
    }

    /// The version tag that starts every line [`encode`](Self::encode) writes.
    pub const VERSION_TAG: &'static str = "lockkit1";

    /// One line: `lockkit1 attempt host pid since_ms`.
    pub fn encode(&self) -> String {
        let since = self.since.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        format!("{} {} {} {} {since}", Self::VERSION_TAG, self.attempt, self.host, self.pid)
    }

    /// Reads what [`encode`](Self::encode) wrote (fields a later version adds after the
    /// fourth are ignored), or the untagged four-field line of earlier releases; `None` for
    /// anything else.
    pub fn decode(text: &str) -> Option<Self> {
        let mut fields = text.split(' ').peekable();
        let tagged = fields.next_if_eq(&Self::VERSION_TAG).is_some();
        let attempt = Uuid::parse_str(fields.next()?).ok()?;
        let host = fields.next()?.to_owned();
        let pid = fields.next()?.parse().ok()?;
        let since_ms: u64 = fields.next()?.parse().ok()?;
        if !tagged && fields.next().is_some() {
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

/// The key of the identity field a candidate's owner line carries (etcd's key value,
/// ZooKeeper's node data): `identity=<escaped>`.
const IDENTITY_FIELD: &str = "identity=";

/// How many space-separated fields [`OwnerMeta::encode`] writes, before any added ones.
pub const OWNER_FIELDS: usize = 5;

/// `line` (an owner line, with any fields already added) with a candidate's `identity` added
/// as one more field, `identity=<escaped>`: every byte outside `!`..=`~`, and every `%` and
/// `=`, is written `%XX` (uppercase hex), so the line stays one line of space-separated
/// fields that [`OwnerMeta::decode`] still reads, and `host:port` stays readable as it is.
pub fn with_identity_field(line: &str, identity: &[u8]) -> String {
    let mut out = format!("{line} {IDENTITY_FIELD}");
    for &byte in identity {
        if byte.is_ascii_graphic() && byte != b'%' && byte != b'=' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The identity [`with_identity_field`] added to an owner line; `None` when the line carries
/// none (a mutex's record) or a malformed one.
pub fn identity_field(line: &[u8]) -> Option<Arc<[u8]>> {
    let text = std::str::from_utf8(line).ok()?;
    let escaped = text.split(' ').skip(OWNER_FIELDS).find_map(|field| field.strip_prefix(IDENTITY_FIELD))?;
    unescape(escaped).map(Arc::from)
}

/// The bytes [`with_identity_field`] escaped; `None` for a malformed escape.
fn unescape(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        if byte == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(byte);
            i += 1;
        }
    }
    Some(out)
}

/// This machine's host name, from the kernel (`uname(2)` on Unix, `COMPUTERNAME` or
/// `HOSTNAME` elsewhere), or `unknown`; only characters that keep the owner line parseable.
/// Read once per process: every acquisition records it.
/// The id of this process, read once: `std::process::id` is a system call each time, on the
/// path of every acquisition. A child forked without `exec` would report its parent's id, but
/// a multi-threaded runtime (every lockkit client runs on one) cannot be forked safely anyway.
fn process_id() -> u32 {
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PID.get_or_init(std::process::id)
}

fn host_name() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        #[cfg(unix)]
        let raw = rustix::system::uname().nodename().to_string_lossy().into_owned();
        #[cfg(not(unix))]
        let raw = std::env::var("COMPUTERNAME").or_else(|_| std::env::var("HOSTNAME")).unwrap_or_default();
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
/// This is the one object-safe seam of lockkit: backends implement it, and
/// [`LockProvider`](crate::LockProvider) wraps an `Arc<dyn LockBackend>` for users. Layers
/// (metrics, tracing, fault injection) can wrap any backend by implementing it around
/// another. See the module docs for what the core expects of [`LockBackend::acquire`].
/// New operations (election's `observe`) come as provided methods that default to
/// [`Error::Unsupported`], so a backend built against an older version keeps compiling.
#[async_trait]
pub trait LockBackend: Send + Sync + fmt::Debug + std::any::Any {
    /// A short name of the backend for messages and spans: `"memory"`, `"redis"`, `"zk"`.
    fn name(&self) -> &'static str;

    /// What this backend promises beyond the common contract, and which kinds of hold it
    /// grants.
    fn capabilities(&self) -> Capabilities;

    /// Where the store is, for error messages: an address or URL **without credentials**
    /// (`redis://10.0.0.7:6379/0`, `/run/lock/app`). The core names it in the connection
    /// and store errors that come out of this backend. `None` by default.
    fn address(&self) -> Option<String> {
        None
    }

    /// The store's identity for fences ([`LockId`](crate::LockId)) and for the order of
    /// [`MultiLock`](crate::MultiLock): the same text in every process and provider that
    /// reaches this store, without credentials. By default, [`address`](Self::address)
    /// through [`StoreUrl::identity`](crate::config::StoreUrl::identity) with no key-space
    /// settings; a backend whose key space depends on settings the address does not show (a
    /// key prefix, a schema) adds them. `None` for a backend without an address: its stores are
    /// then told apart by client, in this process only. The provider's `store_id` option
    /// takes precedence over it.
    fn store_identity(&self) -> Option<String> {
        let address = self.address()?;
        crate::config::StoreUrl::parse(&address).ok().map(|url| url.identity(&[]))
    }

    /// How often this backend renews (or checks) a hold: the shortest maximum hold it
    /// accepts, since a shorter one would end before the first renewal. `None` (the default)
    /// for a backend that neither renews nor checks, which accepts any maximum hold above
    /// zero.
    ///
    /// A backend that declares it skips, in its renewal, holds whose signal is
    /// [`past_cap`](HoldSignal::past_cap), so that their records expire with the lease; a
    /// backend whose holds have no lease frees such a hold at the cap.
    fn renewal_interval(&self) -> Option<Duration> {
        None
    }

    /// Grants a hold of `request.kind`, or waits for it until the request's deadline;
    /// `Ok(None)` when it is not granted in time.
    async fn acquire(&self, request: AcquireRequest) -> Result<Option<Grant>>;

    /// Reports the holders and queue of a lock, as the store sees them now.
    ///
    /// The default says the backend cannot ([`Error::Unsupported`]); backends that declare
    /// [`Capabilities::inspect`] override it.
    async fn inspect(&self, lock: &LockName) -> Result<LockInfo> {
        Err(Error::unsupported(self.name(), Some(lock), "inspecting a lock"))
    }

    /// Frees the lock `lock` whatever its holders do: for an operator whose holder is stuck
    /// but alive. Returns the holds it broke, as [`inspect`](Self::inspect) would have shown
    /// them (one for a mutex, a writer or a leader; every reader or permit holder of a shared
    /// lock); none when there was nothing to break.
    ///
    /// What the core expects, for backends that declare [`Capabilities::break_lock`]:
    ///
    /// - The store forgets the holds (and the holders' entries in its queue, if any) and
    ///   hands the lock over to the next waiters, as a release would.
    /// - Each broken holder's guard is signalled lost ([`LossReason::RecordGone`]: to the
    ///   holder a broken lock is a record deleted behind its back) at once where the store
    ///   notifies deletions, at the latest by its next renewal or check.
    /// - The next grant of the name carries a token greater than every broken one, so that a
    ///   resource that checks tokens refuses the broken holder's late writes.
    ///
    /// The default says the backend cannot ([`Error::Unsupported`]).
    ///
    /// [`LossReason::RecordGone`]: crate::LossReason::RecordGone
    async fn break_lock(&self, lock: &LockName) -> Result<Vec<HolderInfo>> {
        Err(Error::unsupported(self.name(), Some(lock), "breaking a lock"))
    }

    /// The changes of leader of the election `lock`, for backends that declare
    /// [`Capabilities::election`]: first the current state (the leader, as
    /// [`LeaderEvent::Elected`], or [`LeaderEvent::Vacant`]), then every change, driven by the
    /// store's notifications, in term order. When the backend cannot replay changes that
    /// passed while it was cut off (or lagging), it sends [`LeaderEvent::Gap`] and then the
    /// current state. The stream lives as long as the caller keeps it.
    ///
    /// The default says the backend cannot ([`Error::Unsupported`]).
    fn observe(&self, lock: &LockName) -> Result<LeaderEvents> {
        Err(Error::unsupported(self.name(), Some(lock), "observing an election"))
    }
}

/// The stream [`LockBackend::observe`] returns.
pub type LeaderEvents = std::pin::Pin<Box<dyn futures_core::Stream<Item = Result<LeaderEvent>> + Send + 'static>>;

/// For an observer that saw the previous state of an election end and now hands out a new
/// leader: the term began after that end, so its `since` is made no earlier than now. A store
/// that dates a term by something written before the term began (a candidate's creation,
/// until the new leader marks its start) would otherwise report a `since` before the previous
/// term ended. A `since` the store does not know stays unknown.
pub fn not_before_now(event: &mut LeaderEvent) {
    if let LeaderEvent::Elected(leader) = event {
        let now = SystemTime::now();
        leader.since = leader.since.map(|since| since.max(now));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[cfg(unix)]
    #[test]
    fn the_host_name_is_the_kernels() {
        let kernel = rustix::system::uname().nodename().to_string_lossy().into_owned();
        let plain = kernel.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
        if plain && !kernel.is_empty() {
            assert_eq!(host_name(), kernel);
        } else {
            assert!(!host_name().is_empty());
        }
    }

    #[test]
    fn owner_meta_round_trips_and_refuses_other_text() {
        let meta = OwnerMeta::current(Uuid::new_v4());
        let decoded = OwnerMeta::decode(&meta.encode()).unwrap();
        assert_eq!(decoded.attempt, meta.attempt);
        assert_eq!((decoded.host.as_str(), decoded.pid), (meta.host.as_str(), meta.pid));
        assert!(meta.since.duration_since(decoded.since).unwrap() < Duration::from_millis(1));
        assert!(!meta.host.is_empty() && !meta.host.contains(' '));
        assert!(meta.encode().starts_with("lockkit1 "));
        for bad in ["", "x", "not-a-uuid h 1 2", &format!("{} h 1", meta.attempt), &format!("{} h 1 2 3", meta.attempt)]
        {
            assert_eq!(OwnerMeta::decode(bad), None, "{bad:?}");
        }
        let legacy = OwnerMeta::decode(&format!("{} build-7 42 1700000000000", meta.attempt)).unwrap();
        assert_eq!((legacy.host.as_str(), legacy.pid), ("build-7", 42));
        let newer = OwnerMeta::decode(&format!("lockkit1 {} build-7 42 1700000000000 kind=read", meta.attempt));
        assert_eq!(newer.map(|m| m.pid), Some(42), "fields a later version adds are ignored");
        assert!(meta.holder(FencingToken::new(3)).owner.contains(&format!("pid {}", meta.pid)));
    }

    #[test]
    fn identity_fields_of_any_bytes_round_trip_and_malformed_ones_read_as_none() {
        let line = OwnerMeta::current(Uuid::new_v4()).encode();
        for raw in [&b"10.0.0.7:8080"[..], b"a b=c%d", b"\x00\xff\n", "\u{fc}n".as_bytes(), b""] {
            let with = with_identity_field(&line, raw);
            assert!(!with.contains('\n') && with.split(' ').count() == OWNER_FIELDS + 1, "{with:?}");
            assert_eq!(identity_field(with.as_bytes()).as_deref(), Some(raw), "{with}");
        }
        assert_eq!(identity_field(line.as_bytes()), None);
        assert_eq!(unescape("%4"), None);
        assert_eq!(unescape("%zz"), None);
    }
}
