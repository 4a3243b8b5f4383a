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

use std::sync::Arc;
use std::time::SystemTime;

use lockkit_core::backend::OwnerMeta;
use lockkit_core::{FencingToken, HoldKind, Leader};

/// The key of a candidate's identity field.
const IDENTITY: &str = "identity=";

/// How many space-separated fields the owner line has before the added ones.
const OWNER_FIELDS: usize = 5;

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
        HoldKind::Candidate { identity } => format!("{value} {IDENTITY}{}", escape(identity)),
        _ => value,
    }
}

/// The identity a candidate's value carries; `None` when it carries none (a mutex's key) or a
/// malformed one.
pub(crate) fn identity(value: &[u8]) -> Option<Arc<[u8]>> {
    let text = std::str::from_utf8(value).ok()?;
    let escaped = text.split(' ').skip(OWNER_FIELDS).find_map(|field| field.strip_prefix(IDENTITY))?;
    unescape(escaped).map(Arc::from)
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
    let identity = identity(value)?;
    let term = FencingToken::new(u64::try_from(create_revision).unwrap_or(0));
    Some(Leader::new(identity, term, since(value)))
}

/// `bytes` with every byte outside `!`..=`~`, and `%`, `=`, written as `%XX`.
fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &byte in bytes {
        if byte.is_ascii_graphic() && byte != b'%' && byte != b'=' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The bytes [`escape`] wrote; `None` for a malformed escape.
fn unescape(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        if byte == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(byte);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use uuid::Uuid;

    #[test]
    fn identities_of_any_bytes_round_trip_and_keep_the_owner_line() {
        for raw in [&b"10.0.0.7:8080"[..], b"a b=c%d", b"\x00\xff\n", "ünï".as_bytes()] {
            let kind = HoldKind::Candidate { identity: Arc::from(raw) };
            let attempt = Uuid::new_v4();
            let value = record_for(attempt, &kind);
            assert!(!value.contains('\n'), "{value}");
            assert_eq!(identity(value.as_bytes()).as_deref(), Some(raw), "{value}");
            assert_eq!(OwnerMeta::decode(&value).unwrap().attempt, attempt);
        }
        let mutex = record_for(Uuid::new_v4(), &HoldKind::Exclusive);
        assert_eq!(identity(mutex.as_bytes()), None);
        assert_eq!(unescape("%4"), None);
        assert_eq!(unescape("%zz"), None);
    }
}
