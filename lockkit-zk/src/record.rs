//! What a contender node's data says: who took it, and what became of it since.
//!
//! The data is the owner line of [`OwnerMeta::encode`] (`lockkit1 attempt host pid since_ms`),
//! which status displays and `inspect` read. A node's later states are `key=value` fields
//! appended to that line, which [`OwnerMeta::decode`] (and so every earlier reader of the line)
//! ignores:
//!
//! - `mode=read`: a write hold downgraded in place to a read hold. Readers queued behind it
//!   are woken by the data change and no longer count it as a writer; writers still do.
//! - `held=1`: a semaphore permit that was granted, written when a waiter may be watching the
//!   node as its predecessor (see the recipe module): the data change tells that waiter to
//!   look at the queue again.
//!
//! A candidate's node carries its identity from the start, as one more field:
//! `identity=<escaped>`, where every byte outside ASCII's printable characters, and every `%`,
//! `=` and space, is written `%XX` (uppercase hex). So an identity of any bytes (up to the
//! core's 1024) keeps the line one line of space-separated fields, which
//! [`OwnerMeta::decode`] still reads, and `host:port` stays readable as it is.

use std::time::{Duration, SystemTime};

use lockkit_core::HoldKind;
pub(crate) use lockkit_core::backend::identity_field;
use lockkit_core::backend::{OWNER_FIELDS, OwnerMeta, with_identity_field};
use uuid::Uuid;
use zookeeper_client as zk;

/// The field of a write node downgraded to a read.
const READ: &str = "mode=read";

/// The field of a permit node that was granted.
const HELD: &str = "held=1";

/// The data of a node of acquisition `attempt`, written at its create.
pub(crate) fn owner_record(attempt: Uuid) -> String {
    OwnerMeta::current(attempt).encode()
}

/// The data of the node of acquisition `attempt` asking for `kind`: the owner line, and for a
/// candidate its identity.
pub(crate) fn record_for(attempt: Uuid, kind: &HoldKind) -> String {
    match kind {
        HoldKind::Candidate { identity } => with_identity_field(&owner_record(attempt), identity),
        _ => owner_record(attempt),
    }
}

/// The data of a write node downgraded to a read.
pub(crate) fn downgraded(record: &str) -> String {
    format!("{record} {READ}")
}

/// The data of a permit node that was granted.
pub(crate) fn held(record: &str) -> String {
    format!("{record} {HELD}")
}

/// Whether a node's data says it is a read (a downgraded write).
pub(crate) fn says_read(data: &[u8]) -> bool {
    has_field(data, READ)
}

/// Whether a node's data says it was granted.
pub(crate) fn says_held(data: &[u8]) -> bool {
    has_field(data, HELD)
}

fn has_field(data: &[u8], field: &str) -> bool {
    std::str::from_utf8(data).is_ok_and(|text| text.split(' ').skip(OWNER_FIELDS).any(|f| f == field))
}

/// When a node was created, by the server's clock.
pub(crate) fn created_at(stat: &zk::Stat) -> Option<SystemTime> {
    u64::try_from(stat.ctime).ok().and_then(|ms| SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms)))
}

/// When the term of a candidate's node began, as the store knows it: its last modification,
/// which is its creation for a candidate that led at once, and the `held` mark it writes when
/// it comes to lead after a wait (recipe.rs). Between the previous leader's end and that mark
/// (a round trip), it still says when the candidacy began.
pub(crate) fn term_began_at(stat: &zk::Stat) -> Option<SystemTime> {
    u64::try_from(stat.mtime).ok().and_then(|ms| SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;

    #[test]
    fn fields_are_appended_and_the_owner_line_still_decodes() {
        let attempt = Uuid::new_v4();
        let record = owner_record(attempt);
        assert!(!says_read(record.as_bytes()) && !says_held(record.as_bytes()));
        let read = downgraded(&record);
        assert!(says_read(read.as_bytes()) && !says_held(read.as_bytes()));
        assert_eq!(OwnerMeta::decode(&read).unwrap().attempt, attempt, "older readers ignore the field");
        let granted = held(&record);
        assert!(says_held(granted.as_bytes()) && !says_read(granted.as_bytes()));
        assert_eq!(OwnerMeta::decode(&granted).unwrap().attempt, attempt);
        // The fields are looked for after the owner line only, and never in foreign data.
        assert!(!says_read(b"mode=read"));
        assert!(!says_read(&[0xff, 0xfe]));
    }

    #[test]
    fn a_candidates_identity_of_any_bytes_round_trips_and_older_readers_still_read_the_line() {
        let attempt = Uuid::new_v4();
        for id in [
            &b"10.0.0.7:8080"[..],
            b"a b%c=d",
            b"line\nbreak\x00",
            &[0xff, 0x00, b' ', b'%'],
            "h\u{e9}te ünï".as_bytes(),
            &[b'x'; 1024],
        ] {
            let kind = HoldKind::Candidate { identity: Arc::from(id) };
            let data = record_for(attempt, &kind);
            assert!(!data.contains('\n') && data.split(' ').count() == OWNER_FIELDS + 1, "{data:?}");
            assert_eq!(identity_field(data.as_bytes()).as_deref(), Some(id), "{data:?}");
            assert_eq!(OwnerMeta::decode(&data).unwrap().attempt, attempt, "older readers ignore the field");
            assert!(!says_read(data.as_bytes()) && !says_held(data.as_bytes()));
        }
        assert_eq!(record_for(attempt, &HoldKind::Exclusive), owner_record(attempt));
        assert_eq!(identity_field(owner_record(attempt).as_bytes()), None);
        assert_eq!(identity_field(b"identity=abc"), None, "only after the owner line");
        for bad in ["%", "%4", "%zz", "%\u{e9}x"] {
            assert_eq!(identity_field(format!("{} identity={bad}", owner_record(attempt)).as_bytes()), None, "{bad}");
        }
        assert_eq!(identity_field(format!("{} identity=", owner_record(attempt)).as_bytes()).as_deref(), Some(&[][..]));
    }
}
