//! The keys and channel of one lock name.
//!
//! Every key of a name carries the same hash tag, `{name}`, so that the scripts touching
//! several of them run unchanged on Redis Cluster (all keys of a script must live in one
//! slot). Inside the tag the name is escaped so that no name can end the tag early or
//! collide with another: `%` becomes `%25`, `{` becomes `%7b` and `}` becomes `%7d`.
//! Everything else, '/' and spaces and unicode included, is kept as is: Redis keys are
//! binary-safe, and readable keys make `redis-cli` sessions bearable.
//!
//! Each kind of hold has keys of its own, of one Redis type each, so that no script ever
//! meets a key of another type (`WRONGTYPE`): the mutex record and the writer record are
//! strings, readers and permit holders sorted sets, their tokens a hash, the permit count a
//! string. Every script that grants looks at the keys of the other kinds. A marker of the
//! other kinds outlives every hold and waiter of a kind other than the mutex, so that the
//! mutex's scripts need only seven keys while a name is used by mutexes alone.
//!
//! Only the base (the mutex record's key) is kept per lock; the other keys are made from it
//! when a script is called, so that a held lock costs one key's memory on the client.

use lockkit_core::LockName;

/// The keys and channel of one lock name, under one prefix, made from its base key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LockKeys {
    base: String,
}

impl LockKeys {
    /// The keys of `lock` under `prefix`.
    pub(crate) fn new(prefix: &str, lock: &LockName) -> Self {
        Self { base: format!("{prefix}:{{{}}}", lock.percent_encoded(|byte| byte != b'{' && byte != b'}')) }
    }

    fn suffixed(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.base)
    }

    /// The mutex record: holds the owner id of the current exclusive hold, with the lease as
    /// its TTL.
    pub(crate) fn record(&self) -> &str {
        &self.base
    }

    /// The fencing counter: set to every grant's token (max(counter + 1, server µs)), never
    /// deleted.
    pub(crate) fn fence(&self) -> String {
        self.suffixed("fence")
    }

    /// The channel the freeing scripts publish on when nobody is queued, waking the waiters.
    pub(crate) fn channel(&self) -> String {
        self.suffixed("released")
    }

    /// The wait queue of a fair lock: a sorted set of queue members scored by arrival time.
    pub(crate) fn queue(&self) -> String {
        self.suffixed("queue")
    }

    /// When each queue entry expires unless its waiter refreshes it: a sorted set of queue
    /// members scored by server time in milliseconds.
    pub(crate) fn queue_expiry(&self) -> String {
        self.suffixed("queue:expiry")
    }

    /// The writer record of the read-write lock: a string holding the writer's owner id, with
    /// the lease as its TTL.
    pub(crate) fn writer(&self) -> String {
        self.suffixed("writer")
    }

    /// The readers of the read-write lock: a sorted set of owner ids scored by the server time
    /// (ms) at which each read hold expires.
    pub(crate) fn readers(&self) -> String {
        self.suffixed("readers")
    }

    /// The permit holders of the semaphore: a sorted set of owner ids scored by the server
    /// time (ms) at which each permit expires.
    pub(crate) fn permits(&self) -> String {
        self.suffixed("permits")
    }

    /// The fencing tokens of the readers and permit holders: a hash of owner id to token.
    pub(crate) fn tokens(&self) -> String {
        self.suffixed("tokens")
    }

    /// The permit count of the semaphore while it is in use: a string.
    pub(crate) fn permit_count(&self) -> String {
        self.suffixed("permits:count")
    }

    /// The marker of the other kinds: a string that lives at least as long as any writer,
    /// reader, permit or waiter of a kind other than the mutex, so that a mutex script that
    /// finds it absent knows the name is used by mutexes alone.
    pub(crate) fn kinds(&self) -> String {
        self.suffixed("kinds")
    }

    /// The journal of an election: a capped stream of its terms and vacancies, in term
    /// order. Its name is also the channel the scripts that append to it publish on.
    pub(crate) fn terms(&self) -> String {
        self.suffixed("terms")
    }

    /// The marker that voids acquisition `attempt` once it was abandoned with its outcome
    /// unknown, so that a delayed request of it can never create a hold nobody renews.
    pub(crate) fn void(&self, attempt: &str) -> String {
        format!("{}:void:{attempt}", self.base)
    }

    /// The thirteen keys every script of the wait queue takes, in the order `layout.lua`
    /// names them, with `void` third (the void marker of an acquisition; any key of the name
    /// for scripts that void nothing).
    pub(crate) fn script_keys(&self, void: &str) -> [String; 13] {
        [
            self.base.clone(),
            self.fence(),
            void.to_owned(),
            self.queue(),
            self.queue_expiry(),
            self.channel(),
            self.kinds(),
            self.writer(),
            self.readers(),
            self.permits(),
            self.tokens(),
            self.permit_count(),
            self.terms(),
        ]
    }

    /// The first seven of [`script_keys`](Self::script_keys), which the mutex's acquire and
    /// release scripts take while the name is used by mutexes alone (see `layout.lua`).
    pub(crate) fn mutex_keys(&self, void: &str) -> [String; 7] {
        [
            self.base.clone(),
            self.fence(),
            void.to_owned(),
            self.queue(),
            self.queue_expiry(),
            self.channel(),
            self.kinds(),
        ]
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
        assert_eq!(k.record(), "app:{orders/42 é}");
        assert_eq!(k.fence(), "app:{orders/42 é}:fence");
        assert_eq!(k.channel(), "app:{orders/42 é}:released");
        assert_eq!(k.queue(), "app:{orders/42 é}:queue");
        assert_eq!(k.queue_expiry(), "app:{orders/42 é}:queue:expiry");
        assert_eq!(k.writer(), "app:{orders/42 é}:writer");
        assert_eq!(k.readers(), "app:{orders/42 é}:readers");
        assert_eq!(k.permits(), "app:{orders/42 é}:permits");
        assert_eq!(k.tokens(), "app:{orders/42 é}:tokens");
        assert_eq!(k.permit_count(), "app:{orders/42 é}:permits:count");
        assert_eq!(k.kinds(), "app:{orders/42 é}:kinds");
        assert_eq!(k.terms(), "app:{orders/42 é}:terms");
        assert_eq!(k.void("o1"), "app:{orders/42 é}:void:o1");
    }

    #[test]
    fn every_key_of_a_name_is_distinct_and_in_its_slot() {
        let k = keys("a");
        let all = k.script_keys(&k.void("x"));
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len(), "{all:?}");
        assert!(all.iter().all(|key| hash_tag(key) == "a"));
        assert_eq!(k.mutex_keys(&k.void("x"))[..], all[..7], "the mutex's keys are the first seven");
    }

    #[test]
    fn braces_cannot_break_the_tag_or_collide() {
        for name in ["a}b", "{x}", "}", "%7d", "a}:fence", "%", "%25", "a}:writer", "a}:terms"] {
            let k = keys(name);
            for key in k.script_keys(&k.void("v")) {
                assert_eq!(hash_tag(&key), hash_tag(k.record()), "{name}: {key}");
            }
        }
        let names = ["a}b", "a%7db", "a%257db", "}", "%7d", "{", "%7b", "%", "%25"];
        let locks: std::collections::HashSet<_> = names.iter().map(|n| keys(n).record().to_owned()).collect();
        assert_eq!(locks.len(), names.len());
    }
}
