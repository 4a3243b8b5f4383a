//! The Redis backend of lockkit.
//!
//! [`RedisLockProvider`] keeps the whole lockkit contract on one Redis server (6.0 or
//! later; Redis Cluster runs the same scripts, since all keys of a lock share a hash tag).
//!
//! # How it works
//!
//! - **Acquire** is one Lua script: `SET lock owner NX PX lease` and, when granted, `INCR`
//!   of the lock's fence counter, whose new value is the fencing token. On contention it
//!   returns the holder's remaining lease. One round trip when the lock is free.
//! - **Fair waiting** (the default): a waiting acquisition joins the lock's wait queue, two
//!   sorted sets kept by the scripts with the server's clock, and a free lock belongs to the
//!   head of the queue. The release hands the lock over: it grants it to the head for a
//!   claim window ([`claim_window`](RedisLockProviderBuilder::claim_window), 200 ms by
//!   default), with a fresh token, and tells only the head, over pub/sub on its
//!   provider's own wake channel. The head takes the hold without another round trip and has
//!   it renewed to a full lease at once; a head that died lets the hand-over expire, and the
//!   next waiter's turn comes. Queue entries expire after two leases in any case. Nobody
//!   starves, and a hand-off is one round trip and one message. With
//!   [`fair(false)`](RedisLockProviderBuilder::fair) there is no queue: every waiter of the
//!   lock's channel retries on a release and the first wins.
//! - **Waiting** is driven by pub/sub: one subscriber connection per provider. A waiter also
//!   wakes when the holder's lease runs out (a dead holder publishes nothing) and polls
//!   while the subscriber connection is down.
//! - **Release** is one Lua script that deletes the record only when it holds our owner id,
//!   hands the lock over to the head of the queue or publishes on the lock's channel, and
//!   tells apart released / gone / held by another.
//! - **Renewal**: one watchdog per provider renews all its holds every `renew_every`
//!   (default a third of the lease), a pipeline of up to a thousand compare-and-`PEXPIRE`
//!   scripts per round trip. A hold's local deadline is the send time of its last
//!   confirmed renewal plus the lease minus the drift margin, so the guard reports the loss
//!   before the key can expire on the server.
//! - **Unknown outcomes** (a timeout, a dropped connection) are resolved by owner id, never
//!   by a blind second `SET`; see the `lock` module docs.
//!
//! # Keys
//!
//! With the default prefix, lock `orders/42` uses `lockkit:{orders/42}` (the record),
//! `lockkit:{orders/42}:fence` (the counter), the wait queue `lockkit:{orders/42}:queue` and
//! `lockkit:{orders/42}:queue:expiry` (present only while somebody waits), and the channel
//! `lockkit:{orders/42}:released`; each provider listens on `lockkit:wake:<random id>`.
//! The fence counter is never deleted: one small key per lock name ever used.
//!
//! # Fencing tokens and server restarts
//!
//! Tokens strictly increase for as long as the fence counter survives. Plainly:
//!
//! - With AOF persistence and `appendfsync always`, the counter survives restarts and
//!   tokens never repeat. This is the configuration to use when tokens guard data.
//! - Without persistence (or with `appendfsync everysec`, which can lose the last second,
//!   or after a failover to a replica that missed the last writes), a restart loses the
//!   counter and every hold. The holds are signalled lost at their next renewal. The
//!   counter then starts again from the server's clock in microseconds, so tokens still
//!   increase **as long as the server's clock does not step back** across the restart;
//!   a server whose clock is set back can repeat tokens.
//! - Eviction: under a `maxmemory` policy that evicts any key (`allkeys-*`), Redis may
//!   evict a fence counter or a lock record. Use `noeviction` or a `volatile-*` policy.

mod builder;
mod client;
mod keys;
mod lock;
mod provider;
mod store;
mod subscriber;
mod util;
mod watchdog;

pub use builder::{
    DEFAULT_CLAIM_WINDOW, DEFAULT_LEASE, DEFAULT_PREFIX, DEFAULT_RESPONSE_TIMEOUT, MIN_CLAIM_WINDOW, MIN_LEASE,
    RedisLockProviderBuilder,
};
pub use provider::{RedisLockProvider, RenewalStats};

/// The sources of the acquire and release scripts, for benchmarks that time them raw.
#[doc(hidden)]
pub mod scripts {
    pub use crate::store::{ACQUIRE_SCRIPT, RELEASE_SCRIPT};
}

/// The commands an ACL user of lockkit needs, as `ACL SETUSER` rules: the script calls,
/// the commands the scripts run, and the pub/sub commands of the waiters. Together with
/// key and channel patterns for the prefix (`~lockkit:* &lockkit:*`) this is all lockkit
/// needs:
///
/// ```text
/// ACL SETUSER locker on >password resetkeys ~lockkit:* resetchannels &lockkit:* -@all <ACL_COMMANDS>
/// ```
pub const ACL_COMMANDS: &str = "+evalsha +eval +script|load +ping +hello +subscribe +unsubscribe \
    +set +get +del +exists +incr +time +pexpire +pttl +publish +zadd +zrem +zrange +zrangebyscore +zscore +zcount";

/// The backend's name in errors, spans and capability tables.
pub const BACKEND: &str = "redis";
