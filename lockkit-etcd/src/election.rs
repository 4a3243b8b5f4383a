//! Elections on etcd: what a candidate's key says about it.
//!
//! A candidacy is an acquisition of kind [`HoldKind::Candidate`], granted exactly like a mutex
//! (a key per attempt under the election's prefix, the lowest create revision leads, the token
//! and so the term is that create revision). The key's value is the owner line of
//! [`OwnerMeta::encode`] (`lockkit1 attempt host pid since_ms`) with the identity as one more
//! field, `identity=<escaped>`, where every byte outside ASCII's printable characters, and
//! every `%`, `=` and space, is written `%XX` (uppercase hex): the line stays one line of
//! space-separated fields that [`OwnerMeta::decode`] still reads (it ignores added fields), and
//! `host:port` stays readable as it is. This is the same line lockkit-zk writes into a
//! candidate's node. A candidate that comes to lead after a wait rewrites its value, with the
//! `since` of the owner line set to that moment, in the transaction that confirms its grant:
//! `since` is the start of the term, never of the campaign.

use std::time::SystemTime;

use lockkit_core::backend::{OwnerMeta, identity_field, with_identity_field};
use lockkit_core::{FencingToken, HoldKind, Leader};

/// The value of the key of acquisition `attempt` asking for `kind`: the owner line, and for a
/// candidate its identity.
#[cfg(test)]
pub(crate) fn record_for(attempt: uuid::Uuid, kind: &HoldKind) -> String {
    with_identity(OwnerMeta::current(attempt).encode(), kind)
}

/// `value` (a key's owner line with its kind's field) with a candidate's identity added as
/// one more field; the value of any other kind as it is.
pub(crate) fn with_identity(value: String, kind: &HoldKind) -> String {
    match kind {
        HoldKind::Candidate { identity } => with_identity_field(&value, identity),
        _ => value,
    }
}

/// The owner line `owner` with its `since` set to now: what a candidate writes when it comes to
/// lead after a wait, so that its `since` is the start of its term.
pub(crate) fn leading_now(owner: &str) -> String {
    match OwnerMeta::decode(owner) {
        Some(mut meta) => {
            meta.since = SystemTime::now();
            meta.encode()
        }
        None => owner.to_owned(),
    }
}

/// When the term of `value`'s candidate began, as its owner line says (the candidate's clock):
/// when it came to lead, or, for a candidate that led at once, when its campaign began.
fn since(value: &[u8]) -> Option<SystemTime> {
    std::str::from_utf8(value).ok().and_then(OwnerMeta::decode).map(|meta| meta.since)
}

/// The leader a key at the head of an election stands for, by its value and create revision;
/// `None` for a key that is not a candidate's (a mutex's key of the same name: then nobody
/// leads).
pub(crate) fn leader_of(value: &[u8], create_revision: i64) -> Option<Leader> {
    let identity = identity_field(value)?;
    let term = FencingToken::new(u64::try_from(create_revision).unwrap_or(0));
    Some(Leader::new(identity, term, since(value)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;
    use uuid::Uuid;

    #[test]
    fn identities_of_any_bytes_round_trip_and_keep_the_owner_line() {
        for raw in [&b"10.0.0.7:8080"[..], b"a b=c%d", b"\x00\xff\n", "ünï".as_bytes()] {
            let kind = HoldKind::Candidate { identity: Arc::from(raw) };
            let attempt = Uuid::new_v4();
            let value = record_for(attempt, &kind);
            assert!(!value.contains('\n'), "{value}");
            assert_eq!(identity_field(value.as_bytes()).as_deref(), Some(raw), "{value}");
            assert_eq!(OwnerMeta::decode(&value).unwrap().attempt, attempt);
        }
        let mutex = record_for(Uuid::new_v4(), &HoldKind::Exclusive);
        assert_eq!(identity_field(mutex.as_bytes()), None);
    }
}
