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

use lockkit_core::backend::OwnerMeta;
use uuid::Uuid;

/// The field of a write node downgraded to a read.
const READ: &str = "mode=read";

/// The field of a permit node that was granted.
const HELD: &str = "held=1";

/// How many space-separated fields the owner line has before the added ones.
const OWNER_FIELDS: usize = 5;

/// The data of a node of acquisition `attempt`, written at its create.
pub(crate) fn owner_record(attempt: Uuid) -> String {
    OwnerMeta::current(attempt).encode()
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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
}
