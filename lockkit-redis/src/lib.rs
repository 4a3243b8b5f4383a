//! The Redis backend of lockkit: mutexes, read-write locks, counting semaphores and leader
//! elections on one Redis server (6.2 or later), a Sentinel-managed primary, or a Redis
//! Cluster, with fencing tokens, loss signals and the whole lockkit contract.
//!
//! [`RedisLockProvider`] dereferences to lockkit's
//! [`LockProvider`](lockkit_core::LockProvider), so every operation is an inherent method
//! that needs no trait import:
//!
//! ```no_run
//! use std::time::Duration;
//! use lockkit_redis::RedisLockProvider;
//!
//! # async fn run() -> lockkit_core::Result<()> {
//! // Eager: parses the URL, checks every setting, sends one PING.
//! let provider = RedisLockProvider::connect("redis://127.0.0.1:6379/0?lease=10s").await?;
//! let guard = provider.lock("orders/42")?.acquire().await?;
//! println!("holding orders/42 with token {}", guard.token());
//! guard.release().await?;
//!
//! // Lazy: checks every setting and connects on first use.
//! let lazy = RedisLockProvider::builder()
//!     .url("redis://app:secret@127.0.0.1:6379/2")
//!     .key_prefix("billing")
//!     .lease(Duration::from_secs(10))
//!     .build()?;
//! let locks: lockkit_core::LockProvider = lazy.into(); // for code that picks backends at run time
//! # let _ = locks;
//!
//! // Readers share, a writer excludes them; a read taken from the write guard keeps the hold
//! // when the write guard goes (a downgrade in place).
//! let config = provider.rw_lock("config")?;
//! let write = config.write().await?;
//! let read = write.read()?;
//! write.release().await?; // now a read hold, same token; queued readers join it
//! read.release().await?;
//!
//! // At most three holders at once, each with a token of its own.
//! let permit = provider.semaphore("rate-limited-api", 3)?.acquire().await?;
//! permit.release().await?;
//!
//! // One leader at a time; its term is its fencing token; anyone can follow the changes.
//! let election = provider.election("services/scheduler")?;
//! let mut changes = election.observe()?;
//! let leadership = election.campaign("10.0.0.7:8080").await?;
//! let _current = changes.next().await; // Vacant or the leader, then every change in term order
//! leadership.resign().await?;
//! # Ok(()) }
//! ```
//!
//! # How it works
//!
//! - **Grant**: one Lua script sets the record (`SET … NX PX lease`) and draws the fencing
//!   token from the lock's fence counter, `max(counter + 1, server time in µs)`, so tokens
//!   never go back, not after a restart without persistence nor a failover, while the
//!   servers' clocks do not step back. A free lock costs one round trip.
//! - **Fair by default**: waiters queue in Redis; a release hands the lock to the head of the
//!   queue with a fresh token and tells only the head's provider, over pub/sub
//!   ([`fair(false)`](RedisLockProviderBuilder::fair) makes every release a race).
//! - **Renewal**: one watchdog per provider renews every hold every
//!   [`renew_every`](RedisLockProviderBuilder::renew_every), pipelined up to a thousand per
//!   round trip. A hold's local deadline is the send time of its last confirmed renewal plus
//!   the lease minus the drift margin, so the guard reports a loss before the record can
//!   expire on the server. A deleted record is noticed at the next renewal, or at once where
//!   the server publishes keyspace events.
//! - **Unknown outcomes** (a timeout, a dropped connection) are resolved by the owner id,
//!   unique per acquisition; an acquisition dropped in doubt is voided so that a delayed call
//!   can never grant it.
//! - **Read-write locks, semaphores and elections** run on the same scripts, queue, fence
//!   counter and watchdog; an election keeps a journal of its terms for observers.
//! - **Keys** of one lock share the hash tag `{name}`, so the same scripts run on Redis
//!   Cluster; keys expire with the last hold or waiter, and the fence counter
//!   [`fence_retention`](RedisLockProviderBuilder::fence_retention) after the lock's last use.
//!
//! # Settings and URLs
//!
//! `redis://[user:password@]host[:port][/db]`, `rediss://…` (feature `tls`),
//! `redis+sentinel://[user:password@]s1:26379,s2:26379/MASTER_NAME` and
//! `redis+cluster://[user:password@]h1:p1,h2:p2` (and their `rediss+` forms). Every setting
//! has one name, the builder method's and the URL option's ([`OPTIONS`]): `lease` (30 s),
//! `renew_every`, `response_timeout`, `drift`, `key_prefix`, `fair`, `claim_window`,
//! `replicas`, `replicas_timeout`, `fence_retention`, `max_hold`. Every setting is checked
//! when the provider is built, so that a bad value is an
//! [`InvalidConfig`](lockkit_core::Error::InvalidConfig) naming the option and its range.
//! [`SCHEME`] is this crate's entry in lockkit's scheme table.
//!
//! Run a lock server with `maxmemory-policy noeviction`, and with AOF `appendfsync always`
//! where a restart must keep exclusion; an ACL user needs [`ACL_COMMANDS`].
//!
//! # Features
//!
//! - `tls`: `rediss://` URLs with rustls (the `redis-tls` feature of the `lockkit` crate), and
//!   the builder's `tls_root_certificate` and `tls_client_certificate`. Building a provider
//!   for a `rediss://` URL installs rustls's ring provider as the process default only when
//!   none is installed yet.
//!
//! # More
//!
//! The guide's Redis page has the rest: every option with its default, the fair queue and
//! its hand-over, keys, tokens across restarts and failovers, `replicas`, Sentinel, Cluster,
//! permissions and runtimes:
//! <https://docs.rs/lockkit/latest/lockkit/guide/backends/redis/index.html> (in this
//! repository: `src/guide/backends/redis.md`).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod client;
mod cluster;
mod config;
mod error;
mod eviction;
mod held;
mod keys;
mod keyspace;
mod observe;
mod provider;
mod sentinel;
mod settings;
mod store;
mod subscriber;
mod wake;
mod watchdog;

pub use config::{
    DEFAULT_CLAIM_WINDOW, DEFAULT_LEASE, DEFAULT_PREFIX, DEFAULT_REPLICAS_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT,
    MAX_REPLICAS, MIN_CLAIM_WINDOW, MIN_DEFAULT_FENCE_RETENTION, MIN_LEASE, OPTIONS, RedisLockProviderBuilder,
};
use lockkit_core::config::Scheme;
pub use provider::{RedisLockProvider, RenewalStats};

/// The `redis`, `rediss`, `redis+sentinel` and `rediss+sentinel` URL schemes, for `lockkit_core::config::register` (the `lockkit`
/// facade registers it when its `redis` feature is on). Its `connect` reads the URL's
/// address, credentials and options ([`RedisLockProviderBuilder::from_url`]), checks every
/// setting, sends one PING, and returns the provider. `rediss` needs the `tls` feature.
pub const SCHEME: Scheme = Scheme::new(
    &["redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster"],
    BACKEND,
    provider::connect_url,
)
.with_feature("redis")
.with_urls(&[
    ("redis://[user:password@]host[:port][/db]", "one Redis server"),
    ("rediss://…", "one Redis server over TLS (feature `redis-tls`)"),
    (
        "redis+sentinel://[user:password@]host:port[,host:port…]/MASTER_NAME",
        "the primary that Redis Sentinel names, followed across failovers (`rediss+sentinel://` for TLS)",
    ),
    (
        "redis+cluster://[user:password@]host:port[,host:port…]",
        "a Redis Cluster, any of its nodes; database 0 only (`rediss+cluster://` for TLS)",
    ),
])
.with_options(OPTIONS);

/// The sources of the mutex's acquire and release scripts, for benchmarks that time them raw,
/// with the key layout of earlier versions (acquire: record, fence counter, void marker,
/// queue, queue expiry times, channel; release: the same without the void marker). The
/// provider sends seven keys for a mutex (`layout.lua`); these copies make the seventh, the
/// marker of the other kinds, from the record's name, which a standalone server allows.
#[doc(hidden)]
pub mod scripts {
    pub use crate::store::scripts::{ACQUIRE_SCRIPT, RELEASE_SCRIPT};
}

/// The commands an ACL user of lockkit needs, as `ACL SETUSER` rules: the script calls,
/// the commands the scripts run, and the pub/sub commands of the waiters. Together with
/// key and channel patterns for the prefix (`~lockkit:* &lockkit:*`) this is all lockkit
/// needs:
///
/// ```text
/// ACL SETUSER locker on >password resetkeys ~lockkit:* resetchannels &lockkit:* -@all <ACL_COMMANDS>
/// ```
///
/// On a server that publishes keyspace events, `+config|get` and the channels
/// `&__keyspace@*` (both optional) let the provider learn of a deleted record at once instead
/// of at the next renewal (see the crate docs); without them it works as before.
pub const ACL_COMMANDS: &str = "+evalsha +eval +script|load +ping +hello +subscribe +unsubscribe \
    +set +get +mget +del +exists +incr +time +pexpire +pttl +publish +zadd +zrem +zrange +zrangebyscore +zscore \
    +zcount +zcard +hset +hget +hdel +xadd +xrange +xrevrange";

/// The backend's name in errors, spans and capability tables.
pub const BACKEND: &str = "redis";
