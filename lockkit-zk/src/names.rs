//! How lock names become znode names, and how lock nodes are named.
//!
//! A lock name is escaped into one znode name: ASCII letters, digits, `-` and `_` stay as they
//! are, every other byte of the UTF-8 name becomes `%XX` (uppercase hex). Decoding is plain
//! percent-decoding, so distinct names never share a znode, and any valid name (unicode, `/`,
//! spaces, `.`, `..`, NUL) gives a name ZooKeeper accepts. A 1024-byte name gives at most
//! 3072 characters, far below ZooKeeper's request size limit.
//!
//! Each contender's node under the lock's znode is named `_c_{attempt}-lock-{sequence}`, the
//! Curator "protected" form: the acquisition's attempt id in the name lets a client find its
//! own node again when the reply to its create was lost.

use lockkit_core::LockName;
use uuid::Uuid;

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

/// The prefix of a contender node, to which ZooKeeper appends the 10-digit sequence.
pub(crate) fn node_prefix(parent: &str, attempt: Uuid) -> String {
    format!("{parent}/_c_{attempt}-lock-")
}

/// A contender node found among a lock's children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Contender {
    /// The child's name (relative).
    pub(crate) name: String,
    /// The attempt id in its name.
    pub(crate) attempt: Uuid,
    /// Its sequence number.
    pub(crate) sequence: i64,
}

impl Contender {
    /// Parses a child name of the form `_c_{uuid}-lock-{sequence}`; `None` for anything else.
    pub(crate) fn parse(name: &str) -> Option<Contender> {
        let rest = name.strip_prefix("_c_")?;
        let (attempt, rest) = rest.split_at_checked(36)?;
        let sequence = rest.strip_prefix("-lock-")?;
        if sequence.is_empty() || !sequence.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(Contender {
            name: name.to_owned(),
            attempt: Uuid::parse_str(attempt).ok()?,
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
        let prefix = node_prefix("/base/x", attempt);
        let child = format!("{}{:010}", prefix.trim_start_matches("/base/x/"), 42);
        let parsed = Contender::parse(&child).unwrap();
        assert_eq!((parsed.attempt, parsed.sequence), (attempt, 42));
        assert_eq!(Contender::parse("lock-0000000001"), None);
        assert_eq!(Contender::parse("_c_nonsense-lock-1"), None);
        let order = queue(&[
            format!("_c_{attempt}-lock-0000000010"),
            "foreign".to_owned(),
            format!("_c_{attempt}-lock-0000000002"),
        ]);
        assert_eq!(order.iter().map(|c| c.sequence).collect::<Vec<_>>(), vec![2, 10]);
    }
}
