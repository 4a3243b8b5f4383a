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
//! No key is kept: a lock's keys are written into each command from the key prefix (shared by
//! the provider) and the lock's name (shared with its handle), so that a held lock costs no
//! key's memory on the client.

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

/// The keys and channel of one lock name, under one prefix: the prefix and the name, both
/// shared, from which every key is written when it is used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LockKeys {
    prefix: Arc<str>,
    lock: LockName,
}

/// A key as a command argument: written into the command from its parts, without being made
/// as a string first.
#[derive(Clone, Copy, Debug)]
pub(crate) enum KeyArg<'a> {
    /// The key of `suffix` (`""`: the base) of a lock.
    Lock { keys: &'a LockKeys, suffix: &'a str },
    /// A key given whole.
    Whole(&'a str),
}

impl ToRedisArgs for KeyArg<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let mut writer = out.writer_for_next_arg();
        // Writing to a command's buffer cannot fail (it grows a Vec).
        let _ = match self {
            Self::Lock { keys, suffix } => keys.write_key(&mut writer, suffix),
            Self::Whole(key) => writer.write_all(key.as_bytes()),
        };
    }
}

impl LockKeys {
    /// The keys of `lock` under `prefix`.
    pub(crate) fn new(prefix: &Arc<str>, lock: &LockName) -> Self {
        Self { prefix: Arc::clone(prefix), lock: lock.clone() }
    }

    /// Writes the key of `suffix` (`""`: the base): `<prefix>:{<escaped name>}[:<suffix>]`,
    /// the name escaped as the module's documentation says.
    fn write_key(&self, out: &mut impl std::io::Write, suffix: &str) -> std::io::Result<()> {
        out.write_all(self.prefix.as_bytes())?;
        out.write_all(b":{")?;
        let name = self.lock.as_str().as_bytes();
        let mut kept = 0;
        for (at, byte) in name.iter().enumerate() {
            let escaped: &[u8] = match byte {
                b'%' => b"%25",
                b'{' => b"%7b",
                b'}' => b"%7d",
                _ => continue,
            };
            out.write_all(&name[kept..at])?;
            out.write_all(escaped)?;
            kept = at + 1;
        }
        out.write_all(&name[kept..])?;
        out.write_all(b"}")?;
        if !suffix.is_empty() {
            out.write_all(b":")?;
            out.write_all(suffix.as_bytes())?;
        }
        Ok(())
    }

    /// The lock's name.
    pub(crate) fn lock(&self) -> &LockName {
        &self.lock
    }

    /// The key of `suffix` (`""`: the base) as a command argument.
    pub(crate) fn arg<'a>(&'a self, suffix: &'a str) -> KeyArg<'a> {
        KeyArg::Lock { keys: self, suffix }
    }

    /// The keys every script of the wait queue takes, in the order `layout.lua` names them,
    /// as command arguments, with `void` third (the void marker of an acquisition; any key
    /// of the name for scripts that void nothing): the first `count` of them (seven for the
    /// mutex's short layout, while the name is used by mutexes alone; thirteen for all).
    pub(crate) fn script_args<'a>(&'a self, void: &'a str, count: usize) -> impl Iterator<Item = KeyArg<'a>> + 'a {
        SCRIPT_KEYS.iter().take(count).map(move |suffix| match suffix {
            Some(suffix) => self.arg(suffix),
            None => KeyArg::Whole(void),
        })
    }

    /// The key of `suffix` (one of the constants above).
    pub(crate) fn key(&self, suffix: &str) -> String {
        let mut key = Vec::with_capacity(self.prefix.len() + self.lock.as_str().len() + suffix.len() + 8);
        // Writing to a Vec cannot fail.
        let _ = self.write_key(&mut key, suffix);
        // Made of the prefix, the name and the suffix, all UTF-8, and ASCII.
        String::from_utf8(key).unwrap_or_default()
    }

    /// The mutex record ([`RECORD`]).
    pub(crate) fn record(&self) -> String {
        self.key(RECORD)
    }

    /// The fencing counter ([`FENCE`]).
    pub(crate) fn fence(&self) -> String {
        self.key(FENCE)
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
        format!("{}:void:{attempt}", self.record())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn keys(name: &str) -> LockKeys {
        LockKeys::new(&Arc::from("app"), &LockName::new(name).unwrap())
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
        for arg in k.script_args(void, count) {
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
    fn keys_are_the_ones_the_percent_encoded_name_makes() {
        for name in ["a", "orders/42 é", "a}b", "{x}", "%", "%25", "a%7db", "{%}", "é}é{"] {
            let lock = LockName::new(name).unwrap();
            let escaped = lock.percent_encoded(|byte| byte != b'{' && byte != b'}');
            assert_eq!(keys(name).record(), format!("app:{{{escaped}}}"), "{name}");
            assert_eq!(keys(name).key(FENCE), format!("app:{{{escaped}}}:fence"), "{name}");
        }
    }

    #[test]
    fn braces_cannot_break_the_tag_or_collide() {
        for name in ["a}b", "{x}", "}", "%7d", "a}:fence", "%", "%25", "a}:writer", "a}:terms"] {
            let k = keys(name);
            for key in script_keys(&k, &k.void("v"), 13) {
                assert_eq!(hash_tag(&key), hash_tag(&k.record()), "{name}: {key}");
            }
        }
        let names = ["a}b", "a%7db", "a%257db", "}", "%7d", "{", "%7b", "%", "%25"];
        let locks: std::collections::HashSet<_> = names.iter().map(|n| keys(n).record()).collect();
        assert_eq!(locks.len(), names.len());
    }
}
