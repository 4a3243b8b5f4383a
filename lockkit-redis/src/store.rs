//! The commands lockkit sends to Redis, one method per script, over one auto-reconnecting
//! connection per provider; and the mapping of Redis errors into lockkit's error type.
//!
//! Every call is bounded by the response timeout. A call that times out or loses its
//! connection fails with a retryable [`Error::Connection`] whose outcome is **unknown**:
//! the script may have run. Callers resolve that by owner id, never by a blind retry of a
//! write (see `lock.rs`).
//!
//! The connection's driver task runs on the runtime that made it. When that runtime shuts
//! down, the connection goes with it, and the next command makes a new one on the runtime it
//! runs on (lockkit's release thread included): a provider works from any runtime.

use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use lockkit_core::backend::{HolderInfo, LockInfo, OwnerMeta};
use lockkit_core::{Error, FencingToken, LockName, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, Script, ScriptInvocation, ServerErrorKind, Value};

use crate::BACKEND;
use crate::builder::Settings;
use crate::error::Failure;
use crate::keys::LockKeys;
use crate::util::{Home, lock};

/// The acquire script's source, with the wait queue's functions in front (they are shared
/// by the scripts that touch the queue).
pub const ACQUIRE_SCRIPT: &str = concat!(include_str!("scripts/queue.lua"), include_str!("scripts/acquire.lua"));
/// The release script's source, with the wait queue's functions in front.
pub const RELEASE_SCRIPT: &str = concat!(include_str!("scripts/queue.lua"), include_str!("scripts/release.lua"));
const ABANDON_SCRIPT: &str = concat!(include_str!("scripts/queue.lua"), include_str!("scripts/abandon.lua"));

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_SCRIPT));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_SCRIPT));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/renew.lua")));
static ABANDON: LazyLock<Script> = LazyLock::new(|| Script::new(ABANDON_SCRIPT));
static INSPECT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/inspect.lua")));

/// What the acquire script answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The lock is ours, with this token.
    Granted(FencingToken),
    /// Not ours: another owner holds it (the head of the wait queue, maybe, to which it was
    /// just handed over).
    Busy(Refusal),
    /// This acquisition was abandoned earlier and can no longer be granted.
    Void,
}

/// What a refused acquire call learnt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// How long the holder's lease lasts at most, when the server knows.
    pub(crate) left: Option<Duration>,
    /// For a call that joined the wait queue: where the queue stood.
    pub(crate) mark: Option<QueueMark>,
}

/// The state of a lock when a queued acquisition was refused, in the server's terms. A
/// hand-over that carries a token above `fence` was made after it, `server_ms` earlier than
/// the hand-over's own server time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QueueMark {
    /// The fence counter's value: the last token issued.
    pub(crate) fence: u64,
    /// The server's clock, in milliseconds.
    pub(crate) server_ms: u64,
}

/// Who an acquisition is, in the scripts' terms.
#[derive(Clone, Debug)]
pub(crate) struct Contender {
    /// The lock record's value while it holds: unique to the acquisition, and saying who
    /// took it.
    pub(crate) owner: String,
    /// Its entry in the wait queue, `<provider wake channel>\n<owner>` (empty when it does
    /// not queue).
    pub(crate) member: String,
    /// The key of the marker that voids it once abandoned with its outcome unknown.
    pub(crate) void: String,
}

/// How an acquire call stands towards the lock's wait queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Queueing {
    /// Whether the call joins the queue (or refreshes its entry) when not granted: set for
    /// the waiting acquisitions of a fair provider.
    pub(crate) join: bool,
    /// How long a queue entry lives without a refresh, in milliseconds.
    pub(crate) entry_ttl_ms: u64,
}

/// What the release, renew and abandon scripts found: ours, gone, or another owner's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ownership {
    /// The record was ours (and was released, renewed or freed).
    Ours,
    /// There was no record.
    Gone,
    /// Another owner holds the lock.
    Other,
}

impl Ownership {
    fn from_code(code: i64) -> Self {
        match code {
            1 => Self::Ours,
            0 => Self::Gone,
            _ => Self::Other,
        }
    }
}

/// One provider's connection to the server and the commands it sends.
#[derive(Debug)]
pub(crate) struct Store {
    client: redis::Client,
    /// The connection and the runtime its driver runs on; made on first use, and again when
    /// that runtime has shut down.
    link: Mutex<Option<Arc<Link>>>,
    /// Taken while a connection is being made, so that one is made at a time.
    building: tokio::sync::Mutex<()>,
    response_timeout: Duration,
    /// The claim window of hand-overs, in milliseconds.
    claim_ms: u64,
}

/// A connection and the runtime it belongs to.
#[derive(Debug)]
struct Link {
    connection: ConnectionManager,
    home: Home,
}

impl Store {
    /// A store for the given settings; nothing is connected until the first command.
    pub(crate) fn new(settings: &Settings) -> Result<Self> {
        let client = crate::client::open(settings, settings.connection.clone()).map_err(|error| {
            Error::invalid_config(BACKEND, format!("the server {} cannot be used: {error}", settings.address))
        })?;
        Ok(Self {
            client,
            link: Mutex::new(None),
            building: tokio::sync::Mutex::new(()),
            response_timeout: settings.response_timeout,
            claim_ms: settings.claim_millis(),
        })
    }

    /// The connection, if one was made on a runtime that still runs.
    fn live(&self) -> Option<ConnectionManager> {
        lock(&self.link).as_ref().filter(|link| !link.home.is_gone()).map(|link| link.connection.clone())
    }

    /// Whether a connection was made (on a runtime that still runs); it may be reconnecting.
    pub(crate) fn is_connected(&self) -> bool {
        self.live().is_some()
    }

    /// The connection: made on first use, and made again on the current runtime when the
    /// runtime it ran on has shut down. A failed attempt leaves nothing behind, so the next
    /// command tries again.
    async fn connection(&self) -> std::result::Result<ConnectionManager, RedisError> {
        if let Some(connection) = self.live() {
            return Ok(connection);
        }
        let _building = self.building.lock().await;
        if let Some(connection) = self.live() {
            return Ok(connection);
        }
        let Some(home) = Home::here() else {
            return Err(RedisError::from((ErrorKind::Io, "no Tokio runtime is running on this thread")));
        };
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.response_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500));
        let connection = self.client.get_connection_manager_with_config(config).await?;
        let previous = lock(&self.link).replace(Arc::new(Link { connection: connection.clone(), home }));
        if previous.is_some() {
            tracing::debug!("the runtime of the command connection shut down; connected again on this one");
        }
        Ok(connection)
    }

    /// Runs `command` on the connection within the response timeout.
    async fn run<T, F, Fut>(&self, lock: Option<&LockName>, command: F) -> Result<T>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = std::result::Result<T, RedisError>>,
    {
        if tokio::runtime::Handle::try_current().is_err() {
            // Without a runtime there is no timer and no socket; the lease frees the lock.
            return Err(Error::connection(BACKEND, lock, Failure::NoRuntime));
        }
        let attempt = async {
            let connection = self.connection().await?;
            command(connection).await
        };
        match tokio::time::timeout(self.response_timeout, attempt).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(map_error(error, lock)),
            Err(_) => Err(Error::connection(BACKEND, lock, Failure::NoReply(self.response_timeout))),
        }
    }

    /// Runs the acquire script for `contender` with a lease of `lease_ms`, in or out of the
    /// lock's wait queue as `queueing` says.
    pub(crate) async fn acquire(
        &self,
        lock: &LockName,
        keys: &LockKeys,
        contender: &Contender,
        lease_ms: u64,
        queueing: Queueing,
    ) -> Result<AcquireReply> {
        let (code, value, fence, server_ms): (i64, i64, i64, i64) = self
            .run(Some(lock), |mut connection| async move {
                contender_keys(&ACQUIRE, keys, contender)
                    .arg(&contender.owner)
                    .arg(lease_ms)
                    .arg(if queueing.join { "1" } else { "0" })
                    .arg(queueing.entry_ttl_ms)
                    .arg(self.claim_ms)
                    .arg(&contender.member)
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        match code {
            1 => match u64::try_from(value) {
                Ok(token) => Ok(AcquireReply::Granted(FencingToken::new(token))),
                Err(_) => Err(Error::backend(
                    BACKEND,
                    Some(lock),
                    Failure::UnexpectedReply {
                        command: "the acquire script",
                        reply: format!("the token {value} from the fence counter {}", keys.fence),
                    },
                )),
            },
            0 => Ok(AcquireReply::Busy(Refusal {
                left: u64::try_from(value).ok().map(Duration::from_millis),
                mark: match (u64::try_from(fence), u64::try_from(server_ms)) {
                    (Ok(fence), Ok(server_ms)) if queueing.join => Some(QueueMark { fence, server_ms }),
                    _ => None,
                },
            })),
            _ => Ok(AcquireReply::Void),
        }
    }

    /// Runs the release script: frees the lock if `owner` holds it and hands it over to the
    /// head of its queue, or wakes every waiter when nobody is queued.
    pub(crate) async fn release(&self, lock: &LockName, keys: &LockKeys, owner: &str) -> Result<Ownership> {
        let code: i64 = self
            .run(Some(lock), |mut connection| async move {
                RELEASE
                    .key(&keys.lock)
                    .key(&keys.fence)
                    .key(&keys.queue)
                    .key(&keys.queue_expiry)
                    .key(&keys.channel)
                    .arg(owner)
                    .arg(self.claim_ms)
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        Ok(Ownership::from_code(code))
    }

    /// Runs the abandon script: `contender` leaves the wait queue and frees the lock if it was
    /// granted to it (a try in doubt, or a hand-over); when `void_ms` is not zero (its outcome
    /// is in doubt) it is also voided for `void_ms`. Returns whether it freed a grant.
    pub(crate) async fn abandon(
        &self,
        lock: &LockName,
        keys: &LockKeys,
        contender: &Contender,
        void_ms: u64,
    ) -> Result<bool> {
        let code: i64 = self
            .run(Some(lock), |mut connection| async move {
                contender_keys(&ABANDON, keys, contender)
                    .arg(&contender.owner)
                    .arg(void_ms)
                    .arg(self.claim_ms)
                    .arg(&contender.member)
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        Ok(code == 1)
    }

    /// Renews a batch of holds in one pipeline (one round trip, and one script call per hold
    /// so that it runs unchanged on Redis Cluster). Returns one answer per hold, in order.
    pub(crate) async fn renew_batch(&self, holds: &[(&str, &str)], lease_ms: u64) -> Result<Vec<Ownership>> {
        let answers = self.renew_pipeline(holds, lease_ms).await?;
        if answers
            .iter()
            .any(|answer| matches!(answer, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)))
        {
            // The server lost its script cache (a restart or SCRIPT FLUSH): load and redo.
            self.run(None, |mut connection| async move { RENEW.prepare_invoke().load_async(&mut connection).await })
                .await?;
            let again = self.renew_pipeline(holds, lease_ms).await?;
            return again
                .into_iter()
                .map(|answer| answer.map(Ownership::from_code).map_err(|e| map_error(e, None)))
                .collect();
        }
        answers.into_iter().map(|answer| answer.map(Ownership::from_code).map_err(|e| map_error(e, None))).collect()
    }

    async fn renew_pipeline(
        &self,
        holds: &[(&str, &str)],
        lease_ms: u64,
    ) -> Result<Vec<std::result::Result<i64, RedisError>>> {
        let mut pipeline = redis::pipe();
        pipeline.ignore_errors();
        for (key, owner) in holds {
            pipeline.cmd("EVALSHA").arg(RENEW.get_hash()).arg(1).arg(*key).arg(*owner).arg(lease_ms);
        }
        self.run(None, |mut connection| async move { pipeline.query_async(&mut connection).await }).await
    }

    /// Reads the holder of a lock and, for a fair provider (`count_waiters`), the number of
    /// waiters in its queue.
    pub(crate) async fn inspect(&self, lock: &LockName, keys: &LockKeys, count_waiters: bool) -> Result<LockInfo> {
        let reply: Vec<Value> = self
            .run(Some(lock), |mut connection| async move {
                INSPECT
                    .key(&keys.lock)
                    .key(&keys.fence)
                    .key(&keys.queue)
                    .key(&keys.queue_expiry)
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        let [owner, pttl, token, waiters] = reply.as_slice() else {
            return Err(Error::backend(
                BACKEND,
                Some(lock),
                Failure::UnexpectedReply {
                    command: "the inspect script",
                    reply: format!("{reply:?} instead of [owner, pttl, token, waiters]"),
                },
            ));
        };
        let waiters = redis::from_redis_value_ref::<u64>(waiters).ok().and_then(|n| usize::try_from(n).ok());
        let waiters = if count_waiters { waiters } else { None };
        let text = |value: &Value| redis::from_redis_value_ref::<String>(value).ok();
        let owner = text(owner).unwrap_or_default();
        if owner.is_empty() {
            return Ok(LockInfo::new(Vec::new(), waiters));
        }
        let token = FencingToken::new(text(token).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0));
        // Records written by lockkit carry who took them; anything else is shown as is.
        let mut holder = match OwnerMeta::decode(&owner) {
            Some(meta) => meta.holder(token),
            None => HolderInfo::new(token, owner),
        };
        if let Ok(left) = redis::from_redis_value_ref::<i64>(pttl)
            && let Ok(left) = u64::try_from(left)
        {
            holder = holder.with_lease_left(Duration::from_millis(left));
        }
        Ok(LockInfo::new(vec![holder], waiters))
    }

    /// Reads the records at `keys` in one pipeline (one `GET` each, so that it runs unchanged
    /// on Redis Cluster): their values, in order, `None` where there is none.
    pub(crate) async fn records(&self, keys: &[&str]) -> Result<Vec<Option<String>>> {
        let mut pipeline = redis::pipe();
        for key in keys {
            pipeline.cmd("GET").arg(*key);
        }
        self.run(None, |mut connection| async move { pipeline.query_async(&mut connection).await }).await
    }

    /// The server's `notify-keyspace-events` flags (`CONFIG GET`).
    pub(crate) async fn keyspace_events(&self) -> Result<String> {
        let reply: Vec<String> = self
            .run(None, |mut connection| async move {
                redis::cmd("CONFIG").arg("GET").arg("notify-keyspace-events").query_async(&mut connection).await
            })
            .await?;
        match reply.as_slice() {
            [_, flags] => Ok(flags.clone()),
            _ => Err(Error::backend(
                BACKEND,
                None,
                Failure::UnexpectedReply { command: "CONFIG GET notify-keyspace-events", reply: format!("{reply:?}") },
            )),
        }
    }

    /// One PING: the raw round trip the benchmarks compare against.
    pub(crate) async fn ping(&self) -> Result<()> {
        let _: String = self
            .run(None, |mut connection| async move { redis::cmd("PING").query_async(&mut connection).await })
            .await?;
        Ok(())
    }
}

/// An invocation of `script` (acquire or abandon, which touch the same keys) with the keys
/// of `contender`'s try on a lock: the record, the fence counter, the contender's void marker,
/// the wait queue and its expiry times, and the lock's channel.
fn contender_keys<'a>(script: &'a Script, keys: &LockKeys, contender: &Contender) -> ScriptInvocation<'a> {
    let mut invocation = script.key(&keys.lock);
    invocation.key(&keys.fence).key(&contender.void).key(&keys.queue).key(&keys.queue_expiry).key(&keys.channel);
    invocation
}

/// Maps a Redis error: anything that leaves the outcome unknown or may pass with time
/// (I/O, timeouts, a loading or failing-over server) is a retryable connection error; the
/// rest (permissions, wrong types, script errors) is a backend error.
pub(crate) fn map_error(error: RedisError, lock: Option<&LockName>) -> Error {
    let transient = error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || matches!(
            error.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
            )
        );
    if transient { Error::connection(BACKEND, lock, error) } else { Error::backend(BACKEND, lock, error) }
}
