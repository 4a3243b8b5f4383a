//! A hold's owner id as the client keeps it while the hold lives: in its parts, written out
//! into each command that carries it, so that a hold does not keep a string of its own.
//!
//! The owner id is the line [`OwnerMeta::encode`] writes, `lockkit1 <attempt> <host> <pid>
//! <since_ms>`, whose host and pid are the same for every hold of the process: they are kept
//! once, shared. An id that does not write back to the very same text in parts (a candidate's,
//! which carries its identity too) is kept as it is.

use std::fmt;
use std::io::Write as _;
use std::sync::{Arc, Mutex};

use lockkit_core::backend::OwnerMeta;
use lockkit_core::sync::lock_or_recover;
use redis::{RedisWrite, ToRedisArgs};
use uuid::Uuid;

/// The `<host> <pid>` part of the owner ids made last, shared by the holds that have it.
static PROCESS: Mutex<Option<Arc<str>>> = Mutex::new(None);

/// The owner id of a hold (see the module's documentation).
#[derive(Debug)]
pub(crate) enum OwnerId {
    /// `lockkit1 <attempt> <process> <since_ms>`.
    Parts {
        attempt: Uuid,
        since_ms: u64,
        /// `<host> <pid>`, shared.
        process: Arc<str>,
    },
    /// Any other id, as it is.
    Text(Box<str>),
}

impl OwnerId {
    /// The owner id `owner`, kept in parts when they write it back exactly.
    pub(crate) fn new(owner: String) -> Self {
        match Self::parts(&owner) {
            Some(parts) => parts,
            None => Self::Text(owner.into_boxed_str()),
        }
    }

    fn parts(owner: &str) -> Option<Self> {
        let rest = owner.strip_prefix(OwnerMeta::VERSION_TAG)?.strip_prefix(' ')?;
        let (attempt, rest) = rest.split_once(' ')?;
        let (process, since_ms) = rest.rsplit_once(' ')?;
        let parts = Self::Parts {
            attempt: Uuid::try_parse(attempt).ok()?,
            since_ms: since_ms.parse().ok()?,
            process: shared_process(process),
        };
        parts.matches(owner).then_some(parts)
    }

    /// Whether `text` is this owner id.
    pub(crate) fn matches(&self, text: &str) -> bool {
        match self {
            Self::Text(owner) => **owner == *text,
            Self::Parts { .. } => self.to_string() == text,
        }
    }
}

/// `process` as the shared part of owner ids: the one kept, when it is the same.
fn shared_process(process: &str) -> Arc<str> {
    let mut kept = lock_or_recover(&PROCESS);
    match &*kept {
        Some(shared) if **shared == *process => Arc::clone(shared),
        _ => Arc::clone(kept.insert(Arc::from(process))),
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Parts { attempt, since_ms, process } => {
                write!(f, "{} {attempt} {process} {since_ms}", OwnerMeta::VERSION_TAG)
            }
            Self::Text(owner) => f.write_str(owner),
        }
    }
}

impl ToRedisArgs for OwnerId {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let mut writer = out.writer_for_next_arg();
        // Writing to a command's buffer cannot fail (it grows a Vec).
        let _ = write!(writer, "{self}");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::store::kinds::candidate_owner;

    /// The text of `owner` as a command carries it.
    fn written(owner: &OwnerId) -> String {
        let mut cmd = redis::Cmd::new();
        cmd.arg(owner);
        match cmd.args_iter().next().unwrap() {
            redis::Arg::Simple(bytes) => String::from_utf8(bytes.to_vec()).unwrap(),
            _ => String::new(),
        }
    }

    #[test]
    fn an_owner_line_is_kept_in_parts_and_written_back_as_it_was() {
        let line = OwnerMeta::current(Uuid::new_v4()).encode();
        let owner = OwnerId::new(line.clone());
        assert!(matches!(owner, OwnerId::Parts { .. }), "{owner:?}");
        assert_eq!(owner.to_string(), line);
        assert_eq!(written(&owner), line);
        assert!(owner.matches(&line));
        assert!(!owner.matches(&OwnerMeta::current(Uuid::new_v4()).encode()));
    }

    #[test]
    fn holds_of_one_process_share_its_part() {
        let (a, b) = (
            OwnerId::new(OwnerMeta::current(Uuid::new_v4()).encode()),
            OwnerId::new(OwnerMeta::current(Uuid::new_v4()).encode()),
        );
        match (a, b) {
            (OwnerId::Parts { process: a, .. }, OwnerId::Parts { process: b, .. }) => assert!(Arc::ptr_eq(&a, &b)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_ids_are_kept_as_they_are() {
        let candidate = candidate_owner(&OwnerMeta::current(Uuid::new_v4()).encode(), b"node a");
        let meta = OwnerMeta::current(Uuid::new_v4()).encode();
        let padded = meta.replacen(' ', "  ", 1);
        for text in [candidate, "someone else".to_owned(), String::new(), padded, format!("{meta} ")] {
            let owner = OwnerId::new(text.clone());
            assert!(matches!(owner, OwnerId::Text(_)), "{text:?}: {owner:?}");
            assert_eq!(written(&owner), text);
            assert!(owner.matches(&text));
        }
    }
}
