//! How lock names become znode names, and how lock nodes are named.
//!
//! A lock name is escaped into one znode name: ASCII letters, digits, `-` and `_` stay as they
//! are, every other byte of the UTF-8 name becomes `%XX` (uppercase hex). Decoding is plain
//! percent-decoding, so distinct names never share a znode, and any valid name (unicode, `/`,
//! spaces, `.`, `..`, NUL) gives a name ZooKeeper accepts. A 1024-byte name gives at most
//! 3072 characters, far below ZooKeeper's request size limit.
//!
//! Each contender's node under the lock's znode is named `_c_{attempt}-{kind}-{sequence}`,
//! the Curator "protected" form: the acquisition's attempt id in the name lets a client find
//! its own node again when the reply to its create was lost. The kind (`lock`, `read`,
//! `write`, `permit-{N}`, `candidate`; the table is in "How it works" on the guide's
//! ZooKeeper page, `src/guide/backends/zookeeper.md`) says what the node asks for, so that
//! every contender reads the whole queue, the permit count a semaphore is used with, and
//! whether the name is an election, from one list of children. A mutex keeps
//! `lock`, the form earlier releases write and parse.

use std::num::NonZeroU32;
use std::sync::Arc;

use lockkit_core::{HoldKind, LockName, NameUse};
use uuid::Uuid;

use crate::record;

/// The znode name of a lock: the lock name with every byte outside `[A-Za-z0-9_-]` written as
/// `%xx`. Injective, and never `.`, `..` or empty.
///
/// ```
/// use lockkit_core::LockName;
/// let name = LockName::new("orders/42 ä").unwrap();
/// assert_eq!(lockkit_zk::encode_name(&name), "orders%2f42%20%c3%a4");
/// ```
pub fn encode_name(name: &LockName) -> String {
    name.percent_encoded(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
}

/// What a contender node asks for, as its name says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum NodeKind {
    /// A mutex: `-lock-`, the form every earlier release of lockkit-zk wrote and reads.
    Lock,
    /// A reader of a read-write lock: `-read-`.
    Read,
    /// A writer of a read-write lock: `-write-`.
    Write,
    /// A permit of a semaphore of this many permits: `-permit-{N}-`.
    Permit(NonZeroU32),
    /// A candidate of an election: `-candidate-`. Its identity is in the node's data.
    Candidate,
}

impl NodeKind {
    /// The node kind of a hold kind; `None` for kinds this backend does not grant.
    pub(crate) fn of(kind: &HoldKind) -> Option<NodeKind> {
        match kind {
            HoldKind::Exclusive => Some(Self::Lock),
            HoldKind::Read => Some(Self::Read),
            HoldKind::Write => Some(Self::Write),
            HoldKind::Permit { permits } => Some(Self::Permit(*permits)),
            HoldKind::Candidate { .. } => Some(Self::Candidate),
            _ => None,
        }
    }

    /// The hold kind a node of this kind holds; a candidate's identity is read from the node's
    /// data (empty when the data carries none).
    pub(crate) fn hold_kind(self, data: &[u8]) -> HoldKind {
        match self {
            Self::Lock => HoldKind::Exclusive,
            Self::Read => HoldKind::Read,
            Self::Write if record::says_read(data) => HoldKind::Read,
            Self::Write => HoldKind::Write,
            Self::Permit(permits) => HoldKind::Permit { permits },
            Self::Candidate => {
                HoldKind::Candidate { identity: record::identity_field(data).unwrap_or_else(|| Arc::from(&[][..])) }
            }
        }
    }

    /// Whether the node excludes every other holder (a mutex or a writer).
    pub(crate) fn is_exclusive(self) -> bool {
        matches!(self, Self::Lock | Self::Write)
    }

    /// How a node of this kind uses its lock's name.
    pub(crate) fn usage(self) -> NameUse {
        match self {
            Self::Permit(permits) => NameUse::Permits(permits),
            Self::Candidate => NameUse::Election,
            _ => NameUse::Lock,
        }
    }

    /// The kind as written in a node name, between the attempt id and the sequence.
    fn tag(self) -> String {
        match self {
            Self::Lock => "lock".to_owned(),
            Self::Read => "read".to_owned(),
            Self::Write => "write".to_owned(),
            Self::Permit(permits) => format!("permit-{permits}"),
            Self::Candidate => "candidate".to_owned(),
        }
    }

    fn parse_tag(tag: &str) -> Option<NodeKind> {
        match tag {
            "lock" => Some(Self::Lock),
            "read" => Some(Self::Read),
            "write" => Some(Self::Write),
            "candidate" => Some(Self::Candidate),
            _ => {
                let count = tag.strip_prefix("permit-")?;
                if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                count.parse().ok().map(Self::Permit)
            }
        }
    }
}

/// The prefix of a contender node, to which ZooKeeper appends the 10-digit sequence.
pub(crate) fn node_prefix(parent: &str, attempt: Uuid, kind: NodeKind) -> String {
    format!("{parent}/_c_{attempt}-{}-", kind.tag())
}

/// A contender node found among a lock's children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Contender {
    /// The child's name (relative).
    pub(crate) name: String,
    /// The attempt id in its name.
    pub(crate) attempt: Uuid,
    /// What it asks for.
    pub(crate) kind: NodeKind,
    /// Its sequence number.
    pub(crate) sequence: i64,
}

impl Contender {
    /// Parses a child name of the form `_c_{uuid}-{kind}-{sequence}`; `None` for anything else.
    pub(crate) fn parse(name: &str) -> Option<Contender> {
        let rest = name.strip_prefix("_c_")?;
        let (attempt, rest) = rest.split_at_checked(36)?;
        let (tag, sequence) = rest.strip_prefix('-')?.rsplit_once('-')?;
        if sequence.is_empty() || !sequence.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(Contender {
            name: name.to_owned(),
            attempt: Uuid::parse_str(attempt).ok()?,
            kind: NodeKind::parse_tag(tag)?,
            sequence: sequence.parse().ok()?,
        })
    }
}

/// The contenders among `children`, in queue order (lowest sequence first).
pub(crate) fn queue(children: &[String]) -> Vec<Contender> {
    let mut queue: Vec<Contender> = children.iter().filter_map(|c| Contender::parse(c)).collect();
    queue.sort_by_key(|c| c.sequence);
    queue
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::HashSet;

    use super::*;

    fn enc(name: &str) -> String {
        encode_name(&LockName::new(name).unwrap())
    }

    #[test]
    fn encoding_is_injective_and_safe_on_tricky_names() {
        let names = [
            "a/b",
            "a%2Fb",
            "a%2fb",
            "A/B",
            "a b",
            "ä",
            "a\0b",
            ".",
            "..",
            "...",
            "/",
            "//",
            "zookeeper",
            "a_b",
            "a-b",
            "a.b",
            "%",
            "%25",
        ];
        let encoded: HashSet<String> = names.iter().map(|n| enc(n)).collect();
        assert_eq!(encoded.len(), names.len());
        for e in &encoded {
            assert!(!e.is_empty() && e != "." && e != "..");
            assert!(e.bytes().all(|b| b.is_ascii_alphanumeric() || b"%-_".contains(&b)), "{e}");
        }
        assert_eq!(enc("."), "%2e");
        assert_eq!(enc(&"é".repeat(512)).len(), 512 * 6);
    }

    #[test]
    fn contender_names_round_trip() {
        let attempt = Uuid::new_v4();
        let three = NonZeroU32::new(3).unwrap();
        for kind in [NodeKind::Lock, NodeKind::Read, NodeKind::Write, NodeKind::Permit(three), NodeKind::Candidate] {
            let prefix = node_prefix("/base/x", attempt, kind);
            let child = format!("{}{:010}", prefix.trim_start_matches("/base/x/"), 42);
            let parsed = Contender::parse(&child).unwrap();
            assert_eq!((parsed.attempt, parsed.sequence, parsed.kind), (attempt, 42, kind), "{child}");
        }
        // The mutex keeps the form earlier releases write and parse.
        assert_eq!(node_prefix("/b", attempt, NodeKind::Lock), format!("/b/_c_{attempt}-lock-"));
        assert_eq!(Contender::parse("lock-0000000001"), None);
        assert_eq!(Contender::parse("_c_nonsense-lock-1"), None);
        for bad in ["permit-0", "permit-", "permit-x", "permit--3", "permit-+3", "share", "lock-x"] {
            assert_eq!(Contender::parse(&format!("_c_{attempt}-{bad}-0000000001")), None, "{bad}");
        }
        assert_eq!(NodeKind::Permit(three).usage(), NameUse::Permits(three));
        assert_eq!(NodeKind::Read.usage(), NodeKind::Lock.usage());
        assert_eq!(NodeKind::Candidate.usage(), NameUse::Election);
        assert_eq!(node_prefix("/b", attempt, NodeKind::Candidate), format!("/b/_c_{attempt}-candidate-"));
        assert!(NodeKind::Write.is_exclusive() && NodeKind::Lock.is_exclusive() && !NodeKind::Read.is_exclusive());
        let order = queue(&[
            format!("_c_{attempt}-lock-0000000010"),
            "foreign".to_owned(),
            format!("_c_{attempt}-lock-0000000002"),
        ]);
        assert_eq!(order.iter().map(|c| c.sequence).collect::<Vec<_>>(), vec![2, 10]);
    }
}
