//! Fenced Redis writes (feature `redis`): each write is one script call that checks the
//! fence and writes, so nothing runs between the two.
//!
//! Every resource key `K` has a fence key, a hash `{lock, highest}` in the same hash slot
//! (`lockkit-fence:{tag}:K` when `K` has the hash tag `tag`, else `lockkit-fence:{K}`), so the
//! scripts run unchanged on Redis Cluster; under Sentinel they go to the primary as any write
//! does. The fence key is never deleted (a fenced [`del`](RedisFence::del) keeps it): a token
//! must never go back at the resource. With persistence (AOF with `appendfsync always`, or
//! `everysec` with its window) the highest token survives a restart of the server as the data
//! does.
//!
//! ```no_run
//! use lockkit_fence::redis::RedisFence;
//!
//! # async fn demo(guard: lockkit_core::LockGuard) -> Result<(), Box<dyn std::error::Error>> {
//! let client = redis::Client::open("redis://127.0.0.1:6379/")?;
//! let fence = RedisFence::new(client.get_multiplexed_async_connection().await?);
//! // Refused with FenceError::Stale once a newer holder of the lock wrote the key.
//! fence.set("orders/42", &guard.fence(), "shipped").await?;
//! # Ok(())
//! # }
//! ```

mod keys;

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::{Fence, FenceMode, FencingToken};
use redis::aio::ConnectionLike;
use redis::{FromRedisValue, RedisError, Script, ScriptInvocation, ToRedisArgs};

use crate::{FenceError, FenceSink, FenceState, check_resource};

/// The redis crate this fence is built on (its connections are what [`RedisFence`] takes).
pub use ::redis;

/// The prefix of fence keys unless [`RedisFence::with_key_prefix`] sets another.
pub const DEFAULT_KEY_PREFIX: &str = "lockkit-fence:";

const SINK: &str = "redis";
const CHECK: &str = include_str!("check.lua");

fn script(body: &str) -> Script {
    Script::new(&format!("{CHECK}\n{body}"))
}

static SET: LazyLock<Script> = LazyLock::new(|| {
    script(
        "local reply\n\
         if ARGV[5] then reply = redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])\n\
         else reply = redis.call('SET', KEYS[2], ARGV[4]) end\n\
         fence_raise()\nreturn reply",
    )
});
static DEL: LazyLock<Script> =
    LazyLock::new(|| script("local n = redis.call('DEL', KEYS[2])\nfence_raise()\nreturn n"));
static HSET: LazyLock<Script> =
    LazyLock::new(|| script("local n = redis.call('HSET', KEYS[2], unpack(ARGV, 4))\nfence_raise()\nreturn n"));
static INCR_BY: LazyLock<Script> =
    LazyLock::new(|| script("local n = redis.call('INCRBY', KEYS[2], ARGV[4])\nfence_raise()\nreturn n"));
static GET: LazyLock<Script> = LazyLock::new(|| script("return redis.call('GET', KEYS[2])"));
static HGET: LazyLock<Script> = LazyLock::new(|| script("return redis.call('HGET', KEYS[2], ARGV[4])"));

/// Fenced writes and reads on Redis through `C`, any async connection of the redis crate
/// (`MultiplexedConnection`, `ConnectionManager`, a cluster connection): cheap to clone, as
/// the connection is.
///
/// Each method is one script call: the check of the fence, then the command, then (for a
/// write) the new highest token, atomically. A stale token is [`FenceError::Stale`], a token
/// of another lock [`FenceError::ForeignLock`]; the command did not run then.
#[derive(Clone)]
pub struct RedisFence<C> {
    conn: C,
    prefix: Arc<str>,
}

impl<C> fmt::Debug for RedisFence<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisFence").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl<C: ConnectionLike + Clone + Send + Sync> RedisFence<C> {
    /// Fenced writes through `conn`, with fence keys under [`DEFAULT_KEY_PREFIX`].
    pub fn new(conn: C) -> Self {
        Self { conn, prefix: Arc::from(DEFAULT_KEY_PREFIX) }
    }

    /// Puts the fence keys under `prefix` instead (`myapp:fence:`).
    ///
    /// # Errors
    ///
    /// [`FenceError::InvalidInput`] for a prefix with `{` or `}`, which would move fence keys
    /// out of their resource's hash slot.
    pub fn with_key_prefix(mut self, prefix: &str) -> Result<Self, FenceError> {
        if prefix.contains(['{', '}']) {
            return Err(FenceError::invalid(format!(
                "the fence key prefix {prefix:?} contains a brace; leave braces out (they would move fence keys out of their resource's hash slot)"
            )));
        }
        self.prefix = Arc::from(prefix);
        Ok(self)
    }

    /// The fence key of resource key `key`: in `key`'s hash slot.
    ///
    /// # Errors
    ///
    /// [`FenceError::InvalidInput`] for a bad name, or a key without a hash tag that contains
    /// `}` (no key can share its slot then).
    pub fn fence_key(&self, key: &str) -> Result<String, FenceError> {
        check_resource(key)?;
        keys::fence_key(&self.prefix, key)
    }

    /// `SET key value`, fenced.
    ///
    /// # Errors
    ///
    /// [`FenceError::Stale`] or [`FenceError::ForeignLock`]: refused, nothing written;
    /// [`FenceError::InvalidInput`] for a bad key or a read fence; [`FenceError::Store`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the write applied or not, as a lost reply does.
    pub async fn set(&self, key: &str, fence: &Fence, value: impl ToRedisArgs + Send + Sync) -> Result<(), FenceError> {
        let mut call = self.call(&SET, key, fence, FenceMode::Write)?;
        call.arg(value);
        self.send(call, key, fence).await
    }

    /// `SET key value PX ttl`, fenced: the value expires, the fence key does not.
    ///
    /// # Errors
    ///
    /// As for [`set`](Self::set).
    ///
    /// # Cancel safety
    ///
    /// As for [`set`](Self::set).
    pub async fn set_px(
        &self,
        key: &str,
        fence: &Fence,
        value: impl ToRedisArgs + Send + Sync,
        ttl: Duration,
    ) -> Result<(), FenceError> {
        let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut call = self.call(&SET, key, fence, FenceMode::Write)?;
        call.arg(value).arg(millis);
        self.send(call, key, fence).await
    }

    /// `DEL key`, fenced; whether the key existed. The fence key stays, so a stale holder
    /// cannot bring the key back.
    ///
    /// # Errors
    ///
    /// As for [`set`](Self::set).
    ///
    /// # Cancel safety
    ///
    /// As for [`set`](Self::set).
    pub async fn del(&self, key: &str, fence: &Fence) -> Result<bool, FenceError> {
        let call = self.call(&DEL, key, fence, FenceMode::Write)?;
        self.send::<i64>(call, key, fence).await.map(|deleted| deleted > 0)
    }

    /// `HSET key field value [field value …]`, fenced; how many fields were added.
    ///
    /// # Errors
    ///
    /// As for [`set`](Self::set); [`FenceError::InvalidInput`] for no fields.
    ///
    /// # Cancel safety
    ///
    /// As for [`set`](Self::set).
    pub async fn hset<V: ToRedisArgs + Send + Sync>(
        &self,
        key: &str,
        fence: &Fence,
        fields: &[(&str, V)],
    ) -> Result<u64, FenceError> {
        if fields.is_empty() {
            return Err(FenceError::invalid("hset needs at least one field and value"));
        }
        let mut call = self.call(&HSET, key, fence, FenceMode::Write)?;
        for (field, value) in fields {
            call.arg(*field).arg(value);
        }
        self.send(call, key, fence).await
    }

    /// `INCRBY key by`, fenced; the new value.
    ///
    /// # Errors
    ///
    /// As for [`set`](Self::set).
    ///
    /// # Cancel safety
    ///
    /// As for [`set`](Self::set).
    pub async fn incr_by(&self, key: &str, fence: &Fence, by: i64) -> Result<i64, FenceError> {
        let mut call = self.call(&INCR_BY, key, fence, FenceMode::Write)?;
        call.arg(by);
        self.send(call, key, fence).await
    }

    /// `GET key`, fenced as a read: refused below the highest write token, records nothing.
    ///
    /// # Errors
    ///
    /// [`FenceError::Stale`] or [`FenceError::ForeignLock`]; [`FenceError::InvalidInput`];
    /// [`FenceError::Store`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn get<T: FromRedisValue>(&self, key: &str, fence: &Fence) -> Result<Option<T>, FenceError> {
        let call = self.call(&GET, key, fence, FenceMode::Read)?;
        self.send(call, key, fence).await
    }

    /// `HGET key field`, fenced as a read.
    ///
    /// # Errors
    ///
    /// As for [`get`](Self::get).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn hget<T: FromRedisValue>(
        &self,
        key: &str,
        fence: &Fence,
        field: &str,
    ) -> Result<Option<T>, FenceError> {
        let mut call = self.call(&HGET, key, fence, FenceMode::Read)?;
        call.arg(field);
        self.send(call, key, fence).await
    }

    /// Runs `script`, one of your own ([`FencedScript`]), fenced on `resource`: add its keys
    /// and arguments to the returned call, then [`invoke`](FencedCall::invoke) it. The check
    /// runs first, then your script; a write fence's token becomes the highest once your
    /// script returned without an error.
    ///
    /// ```no_run
    /// use lockkit_fence::redis::{FencedScript, RedisFence};
    ///
    /// # async fn demo(fence: RedisFence<redis::aio::MultiplexedConnection>, guard: lockkit_core::LockGuard)
    /// # -> Result<(), lockkit_fence::FenceError> {
    /// let move_item = FencedScript::new(
    ///     "redis.call('LREM', KEYS[1], 1, ARGV[1])\nreturn redis.call('RPUSH', KEYS[2], ARGV[1])",
    /// );
    /// let length: i64 = fence
    ///     .run(&move_item, "{queue}:todo", &guard.fence())
    ///     .key("{queue}:todo")
    ///     .key("{queue}:done")
    ///     .arg("job-7")
    ///     .invoke()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn run<'s>(&'s self, script: &'s FencedScript, resource: &str, fence: &Fence) -> FencedCall<'s, C> {
        // Your script may write or only read: a read fence is let through, and records nothing.
        // Its keys are the ones you add: the resource only chooses the fence key.
        let call = self.fence_key(resource).map(|fence_key| {
            let mut call = script.script.prepare_invoke();
            call.key(fence_key).arg(fence.lock().to_string()).arg(fence.token().get()).arg(fence.mode().as_str());
            call
        });
        FencedCall { sink: self, call, resource: resource.to_owned(), fence: fence.clone() }
    }

    /// The invocation of `script` on `key` with the fence's keys and arguments in front.
    /// `access` is what the script does: a write refuses a read fence.
    fn call<'s>(
        &self,
        script: &'s Script,
        key: &str,
        fence: &Fence,
        access: FenceMode,
    ) -> Result<ScriptInvocation<'s>, FenceError> {
        let fence_key = self.fence_key(key)?;
        if access == FenceMode::Write && fence.mode() == FenceMode::Read {
            return Err(FenceError::invalid(format!(
                "resource {key:?}: a read fence (a read guard's) cannot write; write under a write, exclusive or permit hold"
            )));
        }
        let mut call = script.prepare_invoke();
        call.key(fence_key).key(key).arg(fence.lock().to_string()).arg(fence.token().get()).arg(fence.mode().as_str());
        Ok(call)
    }

    async fn send<T: FromRedisValue>(
        &self,
        call: ScriptInvocation<'_>,
        resource: &str,
        fence: &Fence,
    ) -> Result<T, FenceError> {
        let mut conn = self.conn.clone();
        call.invoke_async(&mut conn).await.map_err(|error| refusal(error, resource, fence))
    }

    /// What the fence key of `key` holds, read without a check.
    ///
    /// # Errors
    ///
    /// [`FenceError::InvalidInput`] for a bad key; [`FenceError::Store`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn state(&self, key: &str) -> Result<Option<FenceState>, FenceError> {
        let fence_key = self.fence_key(key)?;
        let mut conn = self.conn.clone();
        let (lock, highest): (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(&fence_key)
            .arg("lock")
            .arg("highest")
            .query_async(&mut conn)
            .await
            .map_err(|error| FenceError::store(SINK, format!("HMGET {fence_key}"), error))?;
        match (lock, highest) {
            (Some(lock), Some(highest)) => {
                let highest = highest.parse::<u64>().map_err(|_| FenceError::Store {
                    sink: SINK,
                    message: format!("the fence key {fence_key} holds highest={highest:?}, not a token"),
                    source: None,
                })?;
                Ok(Some(FenceState { lock, highest: FencingToken::new(highest) }))
            }
            _ => Ok(None),
        }
    }
}

/// The script's refusal as a typed error, or the store's failure.
fn refusal(error: RedisError, resource: &str, fence: &Fence) -> FenceError {
    let detail = error.detail().unwrap_or_default().to_owned();
    match error.code() {
        Some("LOCKKIT_STALE") => match detail.trim().parse::<u64>() {
            Ok(highest) => FenceError::Stale {
                resource: resource.to_owned(),
                token: fence.token(),
                highest: FencingToken::new(highest),
            },
            Err(_) => FenceError::store(SINK, "the fence refused a stale token with an unreadable highest", error),
        },
        Some("LOCKKIT_FOREIGN") => {
            FenceError::ForeignLock { resource: resource.to_owned(), expected: detail, got: fence.lock().clone() }
        }
        _ => FenceError::store(SINK, format!("the fenced script on {resource:?} failed"), error),
    }
}

/// A Lua script of yours, run behind the fence check by [`RedisFence::run`].
///
/// The body sees its own `KEYS` and `ARGV` (those added to the [`FencedCall`]), exactly as
/// with `EVAL`; it may `return` a value or `redis.error_reply(…)` (an error reply does not
/// raise the highest token). On Redis Cluster every key must be in the resource's hash slot
/// (give them the resource's hash tag).
#[derive(Debug)]
pub struct FencedScript {
    script: Script,
}

impl FencedScript {
    /// Wraps `body` behind the fence check.
    pub fn new(body: &str) -> Self {
        let wrapped = format!(
            "{CHECK}\n\
             local fence_keys, fence_argv = {{}}, {{}}\n\
             for i = 2, #KEYS do fence_keys[i - 1] = KEYS[i] end\n\
             for i = 4, #ARGV do fence_argv[i - 3] = ARGV[i] end\n\
             local function fenced_body(KEYS, ARGV)\n{body}\nend\n\
             local result = fenced_body(fence_keys, fence_argv)\n\
             if type(result) == 'table' and result.err then return result end\n\
             fence_raise()\n\
             return result\n"
        );
        Self { script: Script::new(&wrapped) }
    }
}

/// A call of a [`FencedScript`] being built: add keys and arguments, then
/// [`invoke`](Self::invoke).
pub struct FencedCall<'s, C> {
    sink: &'s RedisFence<C>,
    call: Result<ScriptInvocation<'s>, FenceError>,
    resource: String,
    fence: Fence,
}

impl<C> fmt::Debug for FencedCall<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedCall").field("resource", &self.resource).finish_non_exhaustive()
    }
}

impl<C: ConnectionLike + Clone + Send + Sync> FencedCall<'_, C> {
    /// Adds a key: the script's `KEYS[1]`, `KEYS[2]`, … in order.
    pub fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        if let Ok(call) = &mut self.call {
            call.key(key);
        }
        self
    }

    /// Adds an argument: the script's `ARGV[1]`, `ARGV[2]`, … in order.
    pub fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        if let Ok(call) = &mut self.call {
            call.arg(arg);
        }
        self
    }

    /// Sends the call: one `EVALSHA` (an `EVAL` the first time on a server).
    ///
    /// # Errors
    ///
    /// As for [`RedisFence::set`], and your script's error replies as [`FenceError::Store`].
    ///
    /// # Cancel safety
    ///
    /// As for [`RedisFence::set`].
    pub async fn invoke<T: FromRedisValue>(&mut self) -> Result<T, FenceError> {
        let call = std::mem::replace(&mut self.call, Err(FenceError::invalid("this fenced call was already sent")))?;
        self.sink.send(call, &self.resource, &self.fence).await
    }
}

#[async_trait]
impl<C: ConnectionLike + Clone + Send + Sync> FenceSink for RedisFence<C> {
    fn name(&self) -> &'static str {
        SINK
    }

    async fn write(&self, resource: &str, fence: &Fence, value: &[u8]) -> Result<(), FenceError> {
        self.set(resource, fence, value).await
    }

    async fn read(&self, resource: &str, fence: &Fence) -> Result<Option<Vec<u8>>, FenceError> {
        self.get(resource, fence).await
    }

    async fn state(&self, resource: &str) -> Result<Option<FenceState>, FenceError> {
        RedisFence::state(self, resource).await
    }
}
