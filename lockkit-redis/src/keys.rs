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

use std::io::Write as _;
use std::sync::Arc;

use lockkit_core::LockName;
use redis::{RedisWrite, ToRedisArgs};

/// The mutex record (the base key itself): holds the owner id of the current exclusive hold,
/// with the lease as its TTL.
pub(crate) const RECORD: &str = "";
/// The fencing counter: set to every grant's token (max(counter + 1, server µs)).
pub(crate) const FENCE: &str = "fence";
/// The channel the freeing scripts publish on when nobody is queued, waking the waiters.
pub(crate) const CHANNEL: &str = "released";
/// The wait queue of a fair lock: a sorted set of queue members scored by arrival time.
pub(crate) const QUEUE: &str = "queue";
/// When each queue entry expires unless its waiter refreshes it: a sorted set of queue
/// members scored by server time in milliseconds.
pub(crate) const QUEUE_EXPIRY: &str = "queue:expiry";
/// The marker of the other kinds: a string that lives at least as long as any writer,
/// reader, permit or waiter of a kind other than the mutex, so that a mutex script that
/// finds it absent knows the name is used by mutexes alone.
pub(crate) const KINDS: &str = "kinds";
/// The writer record of the read-write lock: a string holding the writer's owner id, with
/// the lease as its TTL.
pub(crate) const WRITER: &str = "writer";
/// The readers of the read-write lock: a sorted set of owner ids scored by the server time
/// (ms) at which each read hold expires.
pub(crate) const READERS: &str = "readers";
/// The permit holders of the semaphore: a sorted set of owner ids scored by the server time
/// (ms) at which each permit expires.
pub(crate) const PERMITS: &str = "permits";
/// The fencing tokens of the readers and permit holders: a hash of owner id to token.
pub(crate) const TOKENS: &str = "tokens";
/// The permit count of the semaphore while it is in use: a string.
pub(crate) const PERMIT_COUNT: &str = "permits:count";
/// The journal of an election: a capped stream of its terms and vacancies, in term order.
/// Its name is also the channel the scripts that append to it publish on.
pub(crate) const TERMS: &str = "terms";

/// The keys every script of the wait queue takes, in the order `layout.lua` names them:
/// `None` for the void marker of the acquisition, which is given apart.
const SCRIPT_KEYS: [Option<&str>; 13] = [
    Some(RECORD),
    Some(FENCE),
    None,
    Some(QUEUE),
    Some(QUEUE_EXPIRY),
    Some(CHANNEL),
    Some(KINDS),
    Some(WRITER),
    Some(READERS),
    Some(PERMITS),
    Some(TOKENS),
    Some(PERMIT_COUNT),
    Some(TERMS),
];

/// The keys and channel of one lock name, under one prefix, made from its base key (shared:
/// a hold, its renewals and its release keep one copy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LockKeys {
    base: Arc<str>,
}

/// A key of a lock as a command argument: written into the command as its base and suffix,
/// without being made as a string first.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyArg<'a> {
    base: &'a str,
    /// `""` for the base itself.
    suffix: &'a str,
}

impl ToRedisArgs for KeyArg<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let mut writer = out.writer_for_next_arg();
        // Writing to a command's buffer cannot fail (it grows a Vec).
        let _ = writer.write_all(self.base.as_bytes());
        if !self.suffix.is_empty() {
            let _ = writer.write_all(b":");
            let _ = writer.write_all(self.suffix.as_bytes());
        }
    }
}

/// The keys of one lock name, borrowed from where their base key is kept (a [`LockKeys`], or
/// a hold's target, which keeps the base and the owner id in one allocation).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keys<'a> {
    base: &'a str,
}

impl<'a> Keys<'a> {
    /// The keys whose base key (the mutex record's) is `base`.
    pub(crate) fn of_base(base: &'a str) -> Self {
        Self { base }
    }

    /// The key of `suffix` (`""`: the base) as a command argument.
    pub(crate) fn arg(self, suffix: &'a str) -> KeyArg<'a> {
        KeyArg { base: self.base, suffix }
    }

    /// The keys every script of the wait queue takes, in the order `layout.lua` names them,
    /// as command arguments, with `void` third (the void marker of an acquisition; any key
    /// of the name for scripts that void nothing): the first `count` of them (seven for the
    /// mutex's short layout, while the name is used by mutexes alone; thirteen for all).
    pub(crate) fn script_args(self, void: &'a str, count: usize) -> impl Iterator<Item = KeyArg<'a>> + 'a {
        SCRIPT_KEYS.iter().take(count).map(move |suffix| match suffix {
            Some(suffix) => self.arg(suffix),
            None => KeyArg { base: void, suffix: "" },
        })
    }

    /// The key of `suffix` (one of the constants above).
    pub(crate) fn key(self, suffix: &str) -> String {
        if suffix.is_empty() { self.base.to_owned() } else { format!("{}:{suffix}", self.base) }
    }

    /// The mutex record ([`RECORD`]).
    pub(crate) fn record(self) -> &'a str {
        self.base
    }

    /// The fencing counter ([`FENCE`]).
    pub(crate) fn fence(self) -> String {
        self.key(FENCE)
    }
}

impl LockKeys {
    /// The keys of `lock` under `prefix`.
    pub(crate) fn new(prefix: &str, lock: &LockName) -> Self {
        let base = format!("{prefix}:{{{}}}", lock.percent_encoded(|byte| byte != b'{' && byte != b'}'));
        Self { base: Arc::from(base) }
    }

    /// The keys, borrowed.
    pub(crate) fn view(&self) -> Keys<'_> {
        Keys { base: &self.base }
    }

    /// The key of `suffix` (one of the constants above).
    pub(crate) fn key(&self, suffix: &str) -> String {
        self.view().key(suffix)
    }

    /// The mutex record ([`RECORD`]).
    pub(crate) fn record(&self) -> &str {
        &self.base
    }

    /// The fencing counter ([`FENCE`]).
    pub(crate) fn fence(&self) -> String {
        self.view().fence()
    }

    /// The lock's channel ([`CHANNEL`]).
    pub(crate) fn channel(&self) -> String {
        self.key(CHANNEL)
    }

    /// The journal of an election ([`TERMS`]), also the channel of its changes.
    pub(crate) fn terms(&self) -> String {
        self.key(TERMS)
    }

    /// The marker that voids acquisition `attempt` once it was abandoned with its outcome
    /// unknown, so that a delayed request of it can never create a hold nobody renews.
    pub(crate) fn void(&self, attempt: impl std::fmt::Display) -> String {
        format!("{}:void:{attempt}", self.base)
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

    /// The keys `script_args` writes, as a command carries them.
    fn script_keys(k: &LockKeys, void: &str, count: usize) -> Vec<String> {
        let mut cmd = redis::Cmd::new();
        for arg in k.view().script_args(void, count) {
            cmd.arg(arg);
        }
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8(bytes.to_vec()).unwrap(),
                _ => String::new(),
            })
            .collect()
    }

    #[test]
    fn keys_are_readable_share_one_hash_tag_and_come_in_the_scripts_order() {
        let k = keys("orders/42 é");
        assert_eq!(k.record(), "app:{orders/42 é}");
        assert_eq!(k.fence(), "app:{orders/42 é}:fence");
        assert_eq!(k.channel(), "app:{orders/42 é}:released");
        assert_eq!(k.key(WRITER), "app:{orders/42 é}:writer");
        assert_eq!(k.void("o1"), "app:{orders/42 é}:void:o1");
        let expected: Vec<String> = [
            "",
            ":fence",
            ":void:v",
            ":queue",
            ":queue:expiry",
            ":released",
            ":kinds",
            ":writer",
            ":readers",
            ":permits",
            ":tokens",
            ":permits:count",
            ":terms",
        ]
        .iter()
        .map(|suffix| format!("app:{{orders/42 é}}{suffix}"))
        .collect();
        assert_eq!(script_keys(&k, &k.void("v"), 13), expected);
        assert_eq!(script_keys(&k, &k.void("v"), 7), expected[..7], "the mutex's keys are the first seven");
    }

    #[test]
    fn every_key_of_a_name_is_distinct_and_in_its_slot() {
        let k = keys("a");
        let all = script_keys(&k, &k.void("x"), 13);
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len(), "{all:?}");
        assert!(all.iter().all(|key| hash_tag(key) == "a"));
    }

    #[test]
    fn braces_cannot_break_the_tag_or_collide() {
        for name in ["a}b", "{x}", "}", "%7d", "a}:fence", "%", "%25", "a}:writer", "a}:terms"] {
            let k = keys(name);
            for key in script_keys(&k, &k.void("v"), 13) {
                assert_eq!(hash_tag(&key), hash_tag(k.record()), "{name}: {key}");
            }
        }
        let names = ["a}b", "a%7db", "a%257db", "}", "%7d", "{", "%7b", "%", "%25"];
        let locks: std::collections::HashSet<_> = names.iter().map(|n| keys(n).record().to_owned()).collect();
        assert_eq!(locks.len(), names.len());
    }
}
