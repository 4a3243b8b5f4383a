//! The grant rule of the queue of keys: what a contender key's value says it asks for, and
//! whether a key holds, conflicts or waits given the keys created before it.
//!
//! Every acquisition of a name puts one key under the lock's prefix; the keys in create
//! revision order are the queue. A key's value is the owner line of
//! [`OwnerMeta::encode`](lockkit_core::backend::OwnerMeta::encode), with one more field for
//! any kind but the mutex (`kind=read`, `kind=write`, `kind=permit-N`, `kind=candidate`),
//! which [`OwnerMeta::decode`](lockkit_core::backend::OwnerMeta::decode) ignores. A mutex key
//! carries no field, as it did before the other kinds existed. [`may_be_granted`] is the whole
//! rule, after etcd's own `recipes/rwlock` and Curator's `getsTheLock`:
//!
//! - a mutex, writer or election candidate holds when no key is ahead of it;
//! - a reader holds when no mutex or writer key is ahead of it (a writer key downgraded in
//!   place says `kind=read` and no longer counts); keys behind it never count;
//! - a permit of N holds when fewer than N keys are ahead of it;
//! - a key with a key of another use of the name ahead of it (a semaphore behind a lock,
//!   another permit count, an election behind either, and the reverses) is refused with
//!   `Error::Conflict`: of two uses of one name, the later arrival is refused, and no two
//!   uses ever hold at once.

use std::num::NonZeroU32;

use lockkit_core::{HoldKind, NameUse};

/// The field that starts the kind of a key in its value.
const KIND: &str = "kind=";

/// What one contender key asks for, as its value says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeyKind {
    /// A mutex (a value with no kind field, as every mutex key writes).
    Exclusive,
    /// The write side of a read-write lock.
    Write,
    /// The read side of a read-write lock, or a write hold downgraded in place.
    Read,
    /// A permit of a semaphore of this many permits.
    Permit(NonZeroU32),
    /// A candidate of an election.
    Candidate,
}

impl KeyKind {
    /// The key kind of an acquisition of `kind`.
    pub(crate) fn of(kind: &HoldKind) -> KeyKind {
        match kind {
            HoldKind::Read => KeyKind::Read,
            HoldKind::Write => KeyKind::Write,
            HoldKind::Permit { permits } => KeyKind::Permit(*permits),
            HoldKind::Candidate { .. } => KeyKind::Candidate,
            // `Exclusive`, and any kind a later core adds, which the capabilities do not declare.
            _ => KeyKind::Exclusive,
        }
    }

    /// What a key's value says; a value without a kind field (or one this version does not
    /// know) is a mutex key, the strictest reading.
    pub(crate) fn parse(value: &[u8]) -> KeyKind {
        let Ok(text) = std::str::from_utf8(value) else { return KeyKind::Exclusive };
        let Some(kind) = text.split(' ').find_map(|field| field.strip_prefix(KIND)) else {
            return KeyKind::Exclusive;
        };
        match kind {
            "read" => KeyKind::Read,
            "write" => KeyKind::Write,
            "candidate" => KeyKind::Candidate,
            _ => kind
                .strip_prefix("permit-")
                .and_then(|n| n.parse::<NonZeroU32>().ok())
                .map_or(KeyKind::Exclusive, KeyKind::Permit),
        }
    }

    /// The field this kind appends to the owner line, if any.
    fn field(&self) -> Option<String> {
        match self {
            KeyKind::Exclusive => None,
            KeyKind::Write => Some(format!("{KIND}write")),
            KeyKind::Read => Some(format!("{KIND}read")),
            KeyKind::Permit(n) => Some(format!("{KIND}permit-{n}")),
            KeyKind::Candidate => Some(format!("{KIND}candidate")),
        }
    }

    /// The value of a key of this kind for the owner line `owner`.
    pub(crate) fn value(&self, owner: &str) -> String {
        match self.field() {
            Some(field) => format!("{owner} {field}"),
            None => owner.to_owned(),
        }
    }

    /// The hold kind `inspect` reports for a key of this kind.
    pub(crate) fn hold_kind(&self) -> HoldKind {
        match self {
            KeyKind::Write => HoldKind::Write,
            KeyKind::Read => HoldKind::Read,
            KeyKind::Permit(permits) => HoldKind::Permit { permits: *permits },
            // A candidate's identity is not part of the rule; report the hold as exclusive.
            KeyKind::Exclusive | KeyKind::Candidate => HoldKind::Exclusive,
        }
    }

    fn usage(&self) -> NameUse {
        match self {
            KeyKind::Exclusive | KeyKind::Write | KeyKind::Read => NameUse::Lock,
            KeyKind::Permit(n) => NameUse::Permits(*n),
            KeyKind::Candidate => NameUse::Election,
        }
    }

    /// Whether a reader behind a key of this kind waits for it.
    fn excludes_readers(&self) -> bool {
        matches!(self, KeyKind::Exclusive | KeyKind::Write)
    }
}

/// One key of the queue, as a read returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) key: String,
    pub(crate) create_revision: i64,
    pub(crate) kind: KeyKind,
}

impl Entry {
    /// The entry of a key-value pair etcd returned.
    pub(crate) fn of(kv: &etcd_client::KeyValue) -> Entry {
        Entry {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            create_revision: kv.create_revision(),
            kind: KeyKind::parse(kv.value()),
        }
    }
}

/// What the rule says of one key, given the keys ahead of it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The key holds.
    Holds,
    /// A key of another use of the name is ahead; the text says what to change.
    Conflict(String),
    /// The key waits for what it watches.
    Waits(Wait),
}

/// What a waiting key watches, never the whole queue's puts (no herd).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// One key ahead: its deletion ends the wait, and with `or_put`, any change of its value
    /// too (a reader behind a writer that may be downgraded in place).
    Key { key: String, or_put: bool },
    /// The deletion of `deletions` of these keys ahead ends the wait (a permit waiter: it
    /// holds once fewer than N keys remain ahead of it).
    Deletions { keys: Vec<String>, deletions: usize },
}

/// Whether a key asking for `kind` may be granted behind `ahead` (every key created before it,
/// in create revision order), conflicts, or waits, and then for what.
pub(crate) fn may_be_granted(kind: &KeyKind, ahead: &[Entry]) -> Verdict {
    if let Some(other) = ahead.iter().find(|entry| entry.kind.usage() != kind.usage()) {
        return Verdict::Conflict(kind.usage().conflict_with(other.kind.usage()));
    }
    match kind {
        KeyKind::Exclusive | KeyKind::Write | KeyKind::Candidate => match ahead.last() {
            None => Verdict::Holds,
            Some(last) => Verdict::Waits(Wait::Key { key: last.key.clone(), or_put: false }),
        },
        KeyKind::Read => match ahead.iter().rev().find(|entry| entry.kind.excludes_readers()) {
            None => Verdict::Holds,
            Some(writer) => {
                // Only a write key can become a read (a mutex is never downgraded).
                let or_put = writer.kind == KeyKind::Write;
                Verdict::Waits(Wait::Key { key: writer.key.clone(), or_put })
            }
        },
        KeyKind::Permit(permits) => {
            let permits = usize::try_from(permits.get()).unwrap_or(usize::MAX);
            if ahead.len() < permits {
                Verdict::Holds
            } else {
                let keys = ahead.iter().map(|entry| entry.key.clone()).collect();
                Verdict::Waits(Wait::Deletions { keys, deletions: ahead.len() + 1 - permits })
            }
        }
    }
}

/// The keys of `queue` (in create revision order) that hold now, by index.
pub(crate) fn holders(queue: &[Entry]) -> Vec<usize> {
    (0..queue.len())
        .filter(|&i| {
            let (ahead, rest) = queue.split_at(i);
            rest.first().is_some_and(|me| may_be_granted(&me.kind, ahead) == Verdict::Holds)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: i64, kind: KeyKind) -> Entry {
        Entry { key: format!("k{i}"), create_revision: i, kind }
    }

    fn n(permits: u32) -> NonZeroU32 {
        NonZeroU32::new(permits).unwrap()
    }

    /// The verdict of a key that waits for the deletion of `key` (with `or_put`, for any
    /// change of its value too).
    fn waits_on_key(key: &str, or_put: bool) -> Verdict {
        Verdict::Waits(Wait::Key { key: key.into(), or_put })
    }

    #[test]
    fn values_round_trip_and_a_bare_owner_line_is_a_mutex() {
        let owner = "lockkit1 67e55044-10b1-426f-9247-bb680e5fe0c8 host 42 1700000000000";
        for kind in [KeyKind::Exclusive, KeyKind::Write, KeyKind::Read, KeyKind::Permit(n(3)), KeyKind::Candidate] {
            let value = kind.value(owner);
            assert_eq!(KeyKind::parse(value.as_bytes()), kind, "{value}");
            assert!(lockkit_core::backend::OwnerMeta::decode(&value).is_some(), "{value}");
        }
        assert_eq!(KeyKind::Exclusive.value(owner), owner);
        assert_eq!(KeyKind::parse(b"kind=permit-0"), KeyKind::Exclusive);
        assert_eq!(KeyKind::parse(b"kind=whatever"), KeyKind::Exclusive);
        assert_eq!(KeyKind::parse(&[0xff, 0xfe]), KeyKind::Exclusive);
    }

    #[test]
    fn a_lock_waits_for_the_key_just_ahead() {
        assert_eq!(may_be_granted(&KeyKind::Write, &[]), Verdict::Holds);
        let ahead = [entry(1, KeyKind::Read), entry(2, KeyKind::Exclusive)];
        assert_eq!(may_be_granted(&KeyKind::Write, &ahead), waits_on_key("k2", false));
    }

    #[test]
    fn a_reader_waits_for_the_nearest_writer_and_ignores_readers() {
        let readers = [entry(1, KeyKind::Read), entry(2, KeyKind::Read)];
        assert_eq!(may_be_granted(&KeyKind::Read, &readers), Verdict::Holds);
        let ahead = [entry(1, KeyKind::Exclusive), entry(2, KeyKind::Write), entry(3, KeyKind::Read)];
        assert_eq!(may_be_granted(&KeyKind::Read, &ahead), waits_on_key("k2", true));
        let behind_mutex = [entry(1, KeyKind::Exclusive), entry(2, KeyKind::Read)];
        assert_eq!(may_be_granted(&KeyKind::Read, &behind_mutex), waits_on_key("k1", false));
    }

    #[test]
    fn a_permit_holds_with_fewer_than_n_ahead() {
        let two = [entry(1, KeyKind::Permit(n(3))), entry(2, KeyKind::Permit(n(3)))];
        assert_eq!(may_be_granted(&KeyKind::Permit(n(3)), &two), Verdict::Holds);
        assert_eq!(
            may_be_granted(&KeyKind::Permit(n(2)), &[entry(1, KeyKind::Permit(n(2))), entry(2, KeyKind::Permit(n(2)))]),
            Verdict::Waits(Wait::Deletions { keys: vec!["k1".into(), "k2".into()], deletions: 1 })
        );
    }

    #[test]
    fn another_use_ahead_conflicts() {
        let Verdict::Conflict(what) = may_be_granted(&KeyKind::Permit(n(2)), &[entry(1, KeyKind::Permit(n(3)))]) else {
            panic!("another count")
        };
        assert!(what.contains("3 permits") && what.contains("asks for 2"), "{what}");
        let Verdict::Conflict(what) = may_be_granted(&KeyKind::Exclusive, &[entry(1, KeyKind::Permit(n(2)))]) else {
            panic!("a mutex behind a permit")
        };
        assert!(what.contains("semaphore of 2 permits"), "{what}");
        assert!(matches!(may_be_granted(&KeyKind::Permit(n(1)), &[entry(1, KeyKind::Read)]), Verdict::Conflict(_)));
        assert!(matches!(may_be_granted(&KeyKind::Candidate, &[entry(1, KeyKind::Exclusive)]), Verdict::Conflict(_)));
        // A mutex and a read-write lock of one name exclude each other instead.
        assert!(matches!(may_be_granted(&KeyKind::Exclusive, &[entry(1, KeyKind::Read)]), Verdict::Waits(_)));
    }

    #[test]
    fn the_holders_are_the_keys_the_rule_grants() {
        let queue =
            [entry(1, KeyKind::Read), entry(2, KeyKind::Read), entry(3, KeyKind::Write), entry(4, KeyKind::Read)];
        assert_eq!(holders(&queue), [0, 1]);
        let permits: Vec<Entry> = (1..=4).map(|i| entry(i, KeyKind::Permit(n(2)))).collect();
        assert_eq!(holders(&permits), [0, 1]);
        assert_eq!(holders(&[]), Vec::<usize>::new());
    }
}
