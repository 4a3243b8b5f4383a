//! The vocabulary of the scripts: the kinds of hold they grant, a hold as the watchdog renews
//! it, what an acquisition asks (contender, queueing) and what the scripts answer
//! (acquire replies, conflicts, refusals, ownership).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use lockkit_core::backend::HoldSignal;
use lockkit_core::{FencingToken, HoldKind};
use redis::{RedisWrite, Script, ToRedisArgs};

use super::scripts::{RENEW, RENEW_LEADER, RENEW_PERMIT, RENEW_RW};
use crate::keys::{FENCE, KINDS, Keys, PERMIT_COUNT, PERMITS, READERS, RECORD, TOKENS, WRITER};

/// The kinds of hold the scripts grant, as they name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A mutex (`x`).
    Exclusive,
    /// A reader of a read-write lock (`r`).
    Read,
    /// The writer of a read-write lock (`w`).
    Write,
    /// A permit of a semaphore of this many permits (`p`).
    Permit(NonZeroU32),
    /// A candidate of an election (`c`): its identity is in its owner id (see
    /// [`candidate_owner`]).
    Candidate,
}

impl Kind {
    /// The scripts' kind of a hold of `kind`; `None` for a kind this backend does not grant.
    pub(crate) fn of(kind: &HoldKind) -> Option<Self> {
        match kind {
            HoldKind::Exclusive => Some(Self::Exclusive),
            HoldKind::Read => Some(Self::Read),
            HoldKind::Write => Some(Self::Write),
            HoldKind::Permit { permits } => Some(Self::Permit(*permits)),
            HoldKind::Candidate { .. } => Some(Self::Candidate),
            _ => None,
        }
    }

    /// The letter the scripts know the kind by.
    pub(super) fn letter(self) -> &'static str {
        match self {
            Self::Exclusive => "x",
            Self::Read => "r",
            Self::Write => "w",
            Self::Permit(_) => "p",
            Self::Candidate => "c",
        }
    }

    /// The semaphore's permit count (0 for the other kinds).
    pub(super) fn permits(self) -> u32 {
        match self {
            Self::Permit(permits) => permits.get(),
            _ => 0,
        }
    }

    /// The kind field of a queue member (see `queue.lua`): none for a mutex, whose members
    /// are as they were before the other kinds existed.
    pub(crate) fn member_field(self) -> Option<String> {
        match self {
            Self::Exclusive => None,
            Self::Permit(permits) => Some(format!("p{permits}")),
            other => Some(other.letter().to_owned()),
        }
    }

    /// The core's kind of a holder the inspect script lists as `letter` with owner id
    /// `owner`, on a semaphore of `count` permits.
    pub(super) fn hold_kind(letter: &str, owner: &str, count: u32) -> HoldKind {
        if letter == "x"
            && let Some(identity) = candidate_identity(owner)
        {
            return HoldKind::Candidate { identity };
        }
        match letter {
            "r" => HoldKind::Read,
            "w" => HoldKind::Write,
            "p" => HoldKind::Permit { permits: NonZeroU32::new(count).unwrap_or(NonZeroU32::MIN) },
            _ => HoldKind::Exclusive,
        }
    }
}

/// The suffixes of the keys of each kind's renew script, in its order (see [`HoldTarget`]).
const EXCLUSIVE_KEYS: [&str; 2] = [RECORD, FENCE];
const READ_WRITE_KEYS: [&str; 5] = [WRITER, READERS, TOKENS, KINDS, FENCE];
const PERMIT_KEYS: [&str; 4] = [PERMITS, TOKENS, PERMIT_COUNT, KINDS];

/// One hold as the watchdog renews it, its release frees it and keyspace notifications watch
/// it: the hold's kind, owner id, lock keys and signal.
///
/// The base of the lock's keys and the owner id are kept in one allocation, the base first,
/// from which the other keys are made as each command is written: a hold keeps one string,
/// not two (issue 36). The keys of the renew
/// script of a mutex are the mutex record and the fence counter (`renew.lua`); of a write
/// hold and, after a downgrade, a read hold, the writer record, the readers, their tokens,
/// the marker of the other kinds (see `layout.lua`) and the fence counter (`renew_rw.lua`);
/// of a permit, the permit holders, their tokens, the permit count and the marker of the
/// other kinds (`renew_permit.lua`); of a leader, every key of the name
/// (`renew_leader.lua`, which writes the vacancy in the election's journal when it finds the
/// record gone). The counter of an exclusive hold is kept as long as the hold is renewed,
/// since its value is the hold's token.
#[derive(Debug)]
pub(crate) struct HoldTarget {
    pub(crate) kind: Kind,
    /// The base key of the lock, then the owner id.
    text: Box<str>,
    /// Where the owner id starts in `text` (a `u32`: it fits beside `released`).
    owner_at: u32,
    /// The hold's signal: its deadline, its loss, its lock's name.
    pub(crate) signal: HoldSignal,
    /// Set when the release starts, so that a downgrade not sent yet is not sent at all.
    pub(crate) released: AtomicBool,
}

impl HoldTarget {
    /// The target of `owner`'s hold of `kind` on the lock of `keys`, with its signal.
    pub(crate) fn new(kind: Kind, keys: Keys<'_>, owner: &str, signal: HoldSignal) -> Self {
        let base = keys.record();
        let mut text = String::with_capacity(base.len() + owner.len());
        text.push_str(base);
        text.push_str(owner);
        // A base key is a prefix and an escaped name of at most `LockName::MAX_LEN` bytes: far
        // below 4 GiB.
        let owner_at = u32::try_from(base.len()).unwrap_or(u32::MAX);
        Self { kind, text: text.into_boxed_str(), owner_at, signal, released: AtomicBool::new(false) }
    }

    /// The base key and the owner id.
    fn parts(&self) -> (&str, &str) {
        // `owner_at` is where `new` ended the base: a char boundary of `text`.
        let at = usize::try_from(self.owner_at).unwrap_or(usize::MAX);
        self.text.split_at_checked(at).unwrap_or((&self.text, ""))
    }

    /// The keys of the lock.
    pub(crate) fn keys(&self) -> Keys<'_> {
        Keys::of_base(self.parts().0)
    }

    /// The owner id: the record's value while the hold lasts.
    pub(crate) fn owner(&self) -> &str {
        self.parts().1
    }

    /// The keys whose deletion (a keyspace event) may end the hold: the mutex record; the
    /// writer record and the readers; the permit holders.
    pub(crate) fn watched(&self) -> Vec<String> {
        let keys = self.keys();
        match self.kind {
            Kind::Read | Kind::Write => vec![keys.key(WRITER), keys.key(READERS)],
            Kind::Permit(_) => vec![keys.key(PERMITS)],
            Kind::Exclusive | Kind::Candidate => vec![keys.record().to_owned()],
        }
    }

    /// Whether the deletion of `key` may end the hold (see [`watched`](Self::watched)).
    pub(crate) fn watches(&self, key: &str) -> bool {
        self.watched().iter().any(|watched| watched == key)
    }

    /// The keys of the renew script of the hold's kind, their count first, as command
    /// arguments.
    pub(super) fn renew_keys(&self) -> RenewKeys<'_> {
        RenewKeys { target: self, counted: true }
    }

    /// The keys of a mutex's renewal (the record and the fence counter), without their count,
    /// as command arguments (`renew_many.lua` takes them in pairs).
    pub(super) fn mutex_keys(&self) -> RenewKeys<'_> {
        RenewKeys { target: self, counted: false }
    }

    /// The renew script of the hold's kind.
    pub(super) fn renew_script(&self) -> &'static Script {
        match self.kind {
            Kind::Exclusive => &RENEW,
            Kind::Read | Kind::Write => &RENEW_RW,
            Kind::Permit(_) => &RENEW_PERMIT,
            Kind::Candidate => &RENEW_LEADER,
        }
    }
}

/// The keys of a hold's renewal as command arguments, written into the command from the
/// lock's keys (see [`HoldTarget::renew_keys`]).
pub(super) struct RenewKeys<'a> {
    target: &'a HoldTarget,
    /// Whether their count comes first.
    counted: bool,
}

impl RenewKeys<'_> {
    /// The suffixes of the keys, or `None` for every key of the name (a leader's).
    fn suffixes(&self) -> Option<&'static [&'static str]> {
        match self.target.kind {
            Kind::Exclusive => Some(&EXCLUSIVE_KEYS),
            Kind::Read | Kind::Write => Some(&READ_WRITE_KEYS),
            Kind::Permit(_) => Some(&PERMIT_KEYS),
            Kind::Candidate => None,
        }
    }

    fn count(&self) -> usize {
        self.suffixes().map_or(13, <[&str]>::len)
    }
}

impl ToRedisArgs for RenewKeys<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        if self.counted {
            self.count().write_redis_args(out);
        }
        let keys = self.target.keys();
        match self.suffixes() {
            Some(suffixes) => suffixes.iter().for_each(|suffix| keys.arg(suffix).write_redis_args(out)),
            None => keys.script_args(keys.record(), 13).for_each(|key| key.write_redis_args(out)),
        }
    }

    fn num_of_args(&self) -> usize {
        self.count() + usize::from(self.counted)
    }
}

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
    /// The name is in use as another kind of lock, or as a semaphore of another permit
    /// count: what, and what to do instead.
    Conflict(Conflict),
}

/// Why the acquire script refused a kind of hold outright.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Conflict {
    /// A lock was asked of a name in use as a semaphore of this many permits.
    Semaphore(u64),
    /// A permit was asked of a semaphore in use with this many permits, another count.
    Count(u64),
    /// A permit was asked of a name in use as a lock (a mutex or a read-write lock).
    Lock,
}

impl Conflict {
    /// What conflicts, and what to change, for a request of `kind`.
    pub(crate) fn describe(self, kind: Kind) -> String {
        match self {
            Self::Semaphore(count) => {
                let what = match kind {
                    Kind::Exclusive => "lock",
                    Kind::Candidate => "election",
                    _ => "read-write lock",
                };
                format!("the name is in use as a semaphore of {count} permits; give the {what} another name")
            }
            Self::Count(count) => format!(
                "the semaphore is in use with {count} permits and this handle asks for {}; every user of a semaphore must give the same count",
                kind.permits()
            ),
            Self::Lock => {
                "the name is in use as a lock (a mutex or a read-write lock); give the semaphore another name"
                    .to_owned()
            }
        }
    }
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
    /// The kind of hold it asks for.
    pub(crate) kind: Kind,
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

/// What the release, renew, downgrade and abandon scripts found: ours, gone, or another
/// owner's.
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
    pub(super) fn from_code(code: i64) -> Self {
        match code {
            1 => Self::Ours,
            0 => Self::Gone,
            _ => Self::Other,
        }
    }
}

/// The owner id of a candidate: `meta` (see [`OwnerMeta::encode`]) and a field `c:<identity
/// in hex>`, which a reader of the version-1 line ignores. Hex keeps the line free of spaces
/// and newlines (queue members are split at newlines) whatever bytes the identity has.
pub(crate) fn candidate_owner(meta: &str, identity: &[u8]) -> String {
    use std::fmt::Write;
    let mut owner = String::with_capacity(meta.len() + 3 + identity.len() * 2);
    owner.push_str(meta);
    owner.push_str(" c:");
    for byte in identity {
        let _ = write!(owner, "{byte:02x}");
    }
    owner
}

/// The identity in a candidate's owner id (see [`candidate_owner`]); `None` for other owners.
pub(crate) fn candidate_identity(owner: &str) -> Option<Arc<[u8]>> {
    let hex = owner.split(' ').skip(5).find_map(|field| field.strip_prefix("c:"))?;
    if hex.is_empty() || hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|at| hex.get(at..at + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()))
        .collect();
    bytes.map(Arc::from)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::keys::LockKeys;
    use lockkit_core::LockName;

    #[test]
    fn a_target_gives_back_its_keys_and_owner_whatever_the_name() {
        let owner = "lockkit1 67e55044-10b1-426f-9247-bb680e5fe0c8 host 42 1700000000000 c:00ff";
        for name in ["a", "line\nbreak", "ends\n", "\n", "é {x}"] {
            let lock = LockName::new(name).unwrap();
            let keys = LockKeys::new("app", &lock);
            let signal = HoldSignal::new(crate::BACKEND, lock, None);
            let target = HoldTarget::new(Kind::Exclusive, keys.view(), owner, signal);
            assert_eq!(target.keys().record(), keys.record(), "{name:?}");
            assert_eq!(target.keys().fence(), keys.fence(), "{name:?}");
            assert_eq!(target.owner(), owner, "{name:?}");
            assert_eq!(target.watched(), vec![keys.record().to_owned()]);
        }
    }
}
