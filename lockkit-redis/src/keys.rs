//! The keys and channel of one lock.
//!
//! Every key of a lock carries the same hash tag, `{name}`, so that the scripts touching
//! several of them run unchanged on Redis Cluster (all keys of a script must live in one
//! slot). Inside the tag the name is escaped so that no name can end the tag early or
//! collide with another: `%` becomes `%25`, `{` becomes `%7b` and `}` becomes `%7d`.
//! Everything else, '/' and spaces and unicode included, is kept as is: Redis keys are
//! binary-safe, and readable keys make `redis-cli` sessions bearable.

use lockkit_core::LockName;

/// The keys and channel of one lock, under one prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LockKeys {
    /// The lock record: holds the owner id of the current hold, with the lease as its TTL.
    pub(crate) lock: String,
    /// The fencing counter: INCRed by every grant, never deleted.
    pub(crate) fence: String,
    /// The channel the release script publishes on, waking the waiters.
    pub(crate) channel: String,
    /// The wait queue of a fair lock: a sorted set of owner ids scored by arrival time.
    pub(crate) queue: String,
    /// When each queue entry expires unless its waiter refreshes it: a sorted set of owner
    /// ids scored by server time in milliseconds.
    pub(crate) queue_expiry: String,
}

impl LockKeys {
    /// The keys of `lock` under `prefix`.
    pub(crate) fn new(prefix: &str, lock: &LockName) -> Self {
        let base = format!("{prefix}:{{{}}}", lock.percent_encoded(|byte| byte != b'{' && byte != b'}'));
        Self {
            fence: format!("{base}:fence"),
            channel: format!("{base}:released"),
            queue: format!("{base}:queue"),
            queue_expiry: format!("{base}:queue:expiry"),
            lock: base,
        }
    }

    /// The marker that voids acquisition `attempt` once it was abandoned with its outcome
    /// unknown, so that a delayed request of it can never create a hold nobody renews.
    pub(crate) fn void(&self, attempt: &str) -> String {
        format!("{}:void:{attempt}", self.lock)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn keys(name: &str) -> LockKeys {
        LockKeys::new("app", &LockName::new(name).unwrap())
    }

    /// The hash tag as Redis Cluster computes it: between the first `{` and the next `}`.
    fn hash_tag(key: &str) -> &str {
        let open = key.find('{').unwrap();
        let close = key[open + 1..].find('}').unwrap() + open + 1;
        &key[open + 1..close]
    }

    #[test]
    fn keys_are_readable_and_share_one_hash_tag() {
        let k = keys("orders/42 é");
        assert_eq!(k.lock, "app:{orders/42 é}");
        assert_eq!(k.fence, "app:{orders/42 é}:fence");
        assert_eq!(k.channel, "app:{orders/42 é}:released");
        assert_eq!(k.queue, "app:{orders/42 é}:queue");
        assert_eq!(k.queue_expiry, "app:{orders/42 é}:queue:expiry");
        assert_eq!(k.void("o1"), "app:{orders/42 é}:void:o1");
    }

    #[test]
    fn braces_cannot_break_the_tag_or_collide() {
        for name in ["a}b", "{x}", "}", "%7d", "a}:fence", "%", "%25"] {
            let k = keys(name);
            for key in [&k.lock, &k.fence, &k.channel, &k.queue, &k.queue_expiry] {
                assert_eq!(hash_tag(key), hash_tag(&k.lock), "{name}: {key}");
            }
        }
        let names = ["a}b", "a%7db", "a%257db", "}", "%7d", "{", "%7b", "%", "%25"];
        let locks: std::collections::HashSet<_> = names.iter().map(|n| keys(n).lock).collect();
        assert_eq!(locks.len(), names.len());
    }
}
