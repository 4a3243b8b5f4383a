//! What the backend's files say: the holder records (of the lock file, and of each reader and
//! permit record file) and the fence record.
//!
//! Every record is text, padded with spaces to a whole number of [`RECORD_LEN`]-byte blocks
//! (one block, or more for a candidate's long identity, up to [`MAX_RECORD_LEN`]) and always
//! written whole at offset 0. A lock file's record is padded to the size of the file at least,
//! so a write never leaves a longer record's tail behind and a single write replaces it. A
//! holder record:
//!
//! ```text
//! lockkit-file 1
//! token 1732190000123456
//! held lockkit1 5f0c8d2e-…-attempt-uuid myhost 1234 1732190000123
//! kind write
//! ```
//!
//! After `held` comes the holder's [`OwnerMeta`] line (attempt, host, pid, since in ms), the
//! same metadata the Redis and ZooKeeper backends keep; `kind` is `exclusive`, `write`,
//! `read`, `permit N` or `candidate` (records written before kinds existed have no such line
//! and are exclusive). A candidate's record has one more line, the identity it publishes:
//! its length in bytes, then the bytes with every byte outside the printable ASCII range, a
//! space or a `%` written as `%xx`:
//!
//! ```text
//! kind candidate
//! identity 14 10.0.0.7:8080
//! ```
//!
//! The length makes a damaged line unreadable rather than a different identity. The lock
//! file's third line is `free` when no writer holds it. A record that says `held` is only a
//! claim: the flock on the file is the hold, and a holder that died leaves a `held` record
//! behind whose flock the OS has freed.
//!
//! The fence record of a name keeps the last token issued for it and, for a semaphore, the
//! permit count in use:
//!
//! ```text
//! lockkit-file fence 1
//! token 1732190000123460
//! permits 3
//! ```

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use lockkit_core::backend::OwnerMeta;
use lockkit_core::{HoldKind, Leader};

/// The size of a record's block: every record is written as one or more whole blocks.
pub(crate) const RECORD_LEN: usize = 512;

/// The largest record: a candidate publishing an identity of 1024 bytes, each escaped, fits.
pub(crate) const MAX_RECORD_LEN: usize = 8 * RECORD_LEN;

const HEADER: &str = "lockkit-file 1";

const FENCE_HEADER: &str = "lockkit-file fence 1";

/// A parsed holder record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Record {
    /// The holder's token (in the lock file, the last writer's); `None` for a new, empty or
    /// unreadable file.
    pub(crate) token: Option<u64>,
    /// The holder the file names, if it says `held`.
    pub(crate) holder: Option<OwnerMeta>,
    /// The kind of the hold, if the record says.
    pub(crate) kind: Option<HoldKind>,
}

impl Record {
    /// A record naming `holder` of a hold of `kind` with `token`.
    pub(crate) fn held(token: u64, holder: OwnerMeta, kind: HoldKind) -> Self {
        Self { token: Some(token), holder: Some(holder), kind: Some(kind) }
    }

    /// The record of a free lock file whose last writer had `token`.
    pub(crate) fn free(token: Option<u64>) -> Self {
        Self { token, holder: None, kind: None }
    }

    /// Parses a record's bytes; anything unexpected yields a record without a token.
    pub(crate) fn parse(bytes: &[u8]) -> Self {
        let Some((token, mut lines)) = token_after(bytes, HEADER) else { return Self::default() };
        let holder = lines.next().and_then(|l| l.strip_prefix("held ")).and_then(OwnerMeta::decode);
        let kind = match lines.next().and_then(|l| l.strip_prefix("kind ")) {
            Some("candidate") => lines
                .next()
                .and_then(|l| l.strip_prefix("identity "))
                .and_then(parse_identity)
                .map(|identity| HoldKind::Candidate { identity }),
            Some(other) => parse_kind(other),
            None => None,
        };
        Self { token: Some(token), holder, kind }
    }

    /// The leader this record names, when it is a candidate's complete record.
    pub(crate) fn leader(&self) -> Option<Leader> {
        match (&self.token, &self.holder, &self.kind) {
            (Some(token), Some(holder), Some(HoldKind::Candidate { identity })) => {
                Some(Leader::new(Arc::clone(identity), lockkit_core::FencingToken::new(*token), Some(holder.since)))
            }
            _ => None,
        }
    }

    /// The record as written: one block of [`RECORD_LEN`] bytes, or as many as a candidate's
    /// identity needs.
    pub(crate) fn render(&self) -> Vec<u8> {
        self.render_at_least(RECORD_LEN)
    }

    /// The record as written, padded to `min_len` bytes at least (the size of the file it
    /// replaces a record in, up to [`MAX_RECORD_LEN`]), in whole blocks.
    pub(crate) fn render_at_least(&self, min_len: usize) -> Vec<u8> {
        let mut text = String::with_capacity(RECORD_LEN);
        text.push_str(HEADER);
        text.push('\n');
        if let Some(token) = self.token {
            text.push_str(&format!("token {token}\n"));
        }
        match &self.holder {
            Some(holder) => {
                text.push_str("held ");
                text.push_str(&holder.encode());
                text.push('\n');
                if let Some(kind) = self.kind.as_ref().and_then(render_kind) {
                    text.push_str(&format!("kind {kind}\n"));
                }
                if let Some(HoldKind::Candidate { identity }) = &self.kind {
                    text.push_str(&format!("identity {} {}\n", identity.len(), encode_identity(identity)));
                }
            }
            None => text.push_str("free\n"),
        }
        // Host names have at most 253 bytes, attempt ids are UUIDs and identities at most
        // 1024 bytes (3072 escaped), so this never cuts.
        let blocks = (text.len() + 1).div_ceil(RECORD_LEN);
        pad(text, (blocks * RECORD_LEN).max(min_len).min(MAX_RECORD_LEN))
    }
}

/// Escapes an identity for a record or a journal line: printable ASCII but `%` stays, every
/// other byte (space, newline, `%`, non-ASCII) becomes `%xx`.
pub(crate) fn encode_identity(identity: &[u8]) -> String {
    let mut text = String::with_capacity(identity.len());
    for &byte in identity {
        if byte.is_ascii_graphic() && byte != b'%' {
            text.push(char::from(byte));
        } else {
            text.push_str(&format!("%{byte:02x}"));
        }
    }
    text
}

/// Reads `LEN ESCAPED` back into the identity's bytes; `None` unless it decodes to exactly
/// LEN bytes (1 to 1024).
pub(crate) fn parse_identity(text: &str) -> Option<Arc<[u8]>> {
    let (len, escaped) = text.split_once(' ')?;
    let len: usize = len.parse().ok()?;
    if len == 0 || len > lockkit_core::MAX_IDENTITY_LEN {
        return None;
    }
    let mut bytes = Vec::with_capacity(len);
    let mut rest = escaped.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = tail.get(..2)?;
            let hex = std::str::from_utf8(hex).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else if byte.is_ascii_graphic() {
            bytes.push(byte);
            rest = tail;
        } else {
            return None;
        }
    }
    (bytes.len() == len).then(|| Arc::from(bytes))
}

fn render_kind(kind: &HoldKind) -> Option<String> {
    match kind {
        HoldKind::Exclusive => Some("exclusive".to_owned()),
        HoldKind::Write => Some("write".to_owned()),
        HoldKind::Read => Some("read".to_owned()),
        HoldKind::Permit { permits } => Some(format!("permit {permits}")),
        HoldKind::Candidate { .. } => Some("candidate".to_owned()),
        _ => None,
    }
}

fn parse_kind(text: &str) -> Option<HoldKind> {
    match text {
        "exclusive" => Some(HoldKind::Exclusive),
        "write" => Some(HoldKind::Write),
        "read" => Some(HoldKind::Read),
        other => {
            let permits = other.strip_prefix("permit ")?.parse::<NonZeroU32>().ok()?;
            Some(HoldKind::Permit { permits })
        }
    }
}

/// The token of a record or fence file whose first line is `header` and second `token N`,
/// and the lines after them; `None` for anything else (not text, another header, no token).
fn token_after<'a>(bytes: &'a [u8], header: &str) -> Option<(u64, impl Iterator<Item = &'a str>)> {
    let mut lines = std::str::from_utf8(bytes).ok()?.lines().map(str::trim_end);
    if lines.next() != Some(header) {
        return None;
    }
    let token = lines.next()?.strip_prefix("token ")?.parse::<u64>().ok()?;
    Some((token, lines))
}

/// A parsed fence record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Fence {
    /// The last token issued for the name; `None` for a new, empty or unreadable fence file.
    pub(crate) token: Option<u64>,
    /// The permit count of the semaphore of this name, recorded by its last admission.
    pub(crate) permits: Option<NonZeroU32>,
}

impl Fence {
    /// Parses a fence file's bytes; anything unexpected yields an empty fence.
    pub(crate) fn parse(bytes: &[u8]) -> Self {
        let Some((token, mut lines)) = token_after(bytes, FENCE_HEADER) else { return Self::default() };
        let permits = lines.next().and_then(|l| l.strip_prefix("permits ")).and_then(|p| p.parse().ok());
        Self { token: Some(token), permits }
    }

    /// The fence as written: exactly [`RECORD_LEN`] bytes.
    pub(crate) fn render(&self) -> Vec<u8> {
        let mut text = String::with_capacity(RECORD_LEN);
        text.push_str(FENCE_HEADER);
        text.push('\n');
        if let Some(token) = self.token {
            text.push_str(&format!("token {token}\n"));
            if let Some(permits) = self.permits {
                text.push_str(&format!("permits {permits}\n"));
            }
        }
        pad(text, RECORD_LEN)
    }

    /// The token of a fresh grant. A fence with a token continues from it. A fence without
    /// one (new, deleted, or unreadable after a crash mid-write) starts above `floor` (the
    /// token the lock file records, from the last writer or from an earlier version of this
    /// backend, which kept tokens there) and above the wall clock in microseconds, so tokens
    /// keep increasing even then, as long as the clock does not step back.
    pub(crate) fn next_token(&self, floor: Option<u64>) -> u64 {
        match self.token {
            Some(last) => last.saturating_add(1),
            None => {
                let clock = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or_default();
                let clock = u64::try_from(clock).unwrap_or(u64::MAX).max(1);
                floor.map_or(clock, |floor| clock.max(floor.saturating_add(1)))
            }
        }
    }
}

/// `text` padded with spaces to `len` bytes, the last a newline.
fn pad(text: String, len: usize) -> Vec<u8> {
    let mut bytes = text.into_bytes();
    bytes.truncate(len - 1);
    bytes.resize(len - 1, b' ');
    bytes.push(b'\n');
    bytes
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn records_round_trip_at_a_fixed_size() {
        let mut holder = OwnerMeta::current(uuid::Uuid::new_v4());
        holder.host = "h".repeat(253);
        // The line keeps milliseconds.
        holder.since = UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123);
        let permits = NonZeroU32::new(1_000_000).unwrap();
        for record in [
            Record::held(7, holder.clone(), HoldKind::Write),
            Record::held(8, holder.clone(), HoldKind::Read),
            Record::held(9, holder.clone(), HoldKind::Exclusive),
            Record::held(10, holder, HoldKind::Permit { permits }),
            Record::free(Some(u64::MAX)),
        ] {
            let bytes = record.render();
            assert_eq!(bytes.len(), RECORD_LEN);
            assert_eq!(Record::parse(&bytes), record);
        }
    }

    #[test]
    fn candidate_records_carry_their_identity_in_as_many_blocks_as_it_needs() {
        let mut holder = OwnerMeta::current(uuid::Uuid::new_v4());
        holder.since = UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123);
        let short: Arc<[u8]> = Arc::from(&b"10.0.0.7:8080"[..]);
        let record = Record::held(7, holder.clone(), HoldKind::Candidate { identity: short.clone() });
        let bytes = record.render();
        assert_eq!(bytes.len(), RECORD_LEN);
        assert!(String::from_utf8_lossy(&bytes).contains("kind candidate\nidentity 13 10.0.0.7:8080\n"));
        assert_eq!(Record::parse(&bytes), record);
        let leader = record.leader().unwrap();
        assert_eq!((leader.identity, leader.term.get()), (short, 7));
        // Padded to the file's size when it replaces a longer record.
        assert_eq!(record.render_at_least(3 * RECORD_LEN).len(), 3 * RECORD_LEN);
        assert_eq!(Record::parse(&record.render_at_least(3 * RECORD_LEN)), record);
        // The longest identity, every byte escaped, still fits.
        let mut host = holder.clone();
        host.host = "h".repeat(253);
        let long: Arc<[u8]> = Arc::from(vec![b' '; lockkit_core::MAX_IDENTITY_LEN]);
        let record = Record::held(u64::MAX, host, HoldKind::Candidate { identity: long });
        let bytes = record.render();
        assert!(bytes.len() <= MAX_RECORD_LEN && bytes.len().is_multiple_of(RECORD_LEN));
        assert_eq!(Record::parse(&bytes), record);
        // Bytes of every value round-trip.
        let all: Arc<[u8]> = (0..=255u8).collect::<Vec<_>>().into();
        assert_eq!(parse_identity(&format!("256 {}", encode_identity(&all))), Some(all));
        // A damaged or cut identity is no identity, never another one.
        for bad in ["13 10.0.0.7:80", "2 a", "0 ", "1 %4", "1 %zz", "x a", "1025 a", "1 é"] {
            assert_eq!(parse_identity(bad), None, "{bad:?}");
        }
        let cut =
            format!("lockkit-file 1\ntoken 5\nheld {}\nkind candidate\nidentity 13 10.0.0.7:80\n", holder.encode());
        let record = Record::parse(cut.as_bytes());
        assert_eq!((record.token, record.leader(), record.kind), (Some(5), None, None));
        // A record that names no holder names no leader.
        assert_eq!(Record::free(Some(3)).leader(), None);
    }

    #[test]
    fn records_of_earlier_versions_are_read() {
        let holder = OwnerMeta::current(uuid::Uuid::new_v4());
        let old = format!("lockkit-file 1\ntoken 5\nheld {}\n", holder.encode());
        let record = Record::parse(old.as_bytes());
        assert_eq!((record.token, record.kind), (Some(5), None));
        assert_eq!(record.holder.map(|h| h.attempt), Some(holder.attempt));
    }

    #[test]
    fn unreadable_files_have_no_token() {
        assert_eq!(Record::parse(b""), Record::default());
        assert_eq!(Record::parse(b"lockkit-file 1\ntoken x\n"), Record::default());
        assert_eq!(Record::parse(&[0xff, 0xfe]), Record::default());
        assert_eq!(Record::parse(b"lockkit-file 1\ntoken 5\nheld garbage\n").token, Some(5));
        assert_eq!(Fence::parse(b"lockkit-file 1\ntoken 5\n"), Fence::default());
        assert_eq!(Fence::parse(b"lockkit-file fence 1\ntoken 5\npermits 0\n").permits, None);
    }

    #[test]
    fn fences_round_trip_at_a_fixed_size() {
        for fence in [
            Fence { token: Some(3), permits: None },
            Fence { token: Some(u64::MAX), permits: NonZeroU32::new(1_000_000) },
            Fence::default(),
        ] {
            let bytes = fence.render();
            assert_eq!(bytes.len(), RECORD_LEN);
            assert_eq!(Fence::parse(&bytes), fence);
        }
    }

    #[test]
    fn tokens_continue_or_start_above_the_clock_and_the_floor() {
        assert_eq!(Fence { token: Some(5), permits: None }.next_token(Some(100)), 6);
        let empty = Fence::default();
        assert!(empty.next_token(None) > 1_600_000_000_000_000);
        assert_eq!(empty.next_token(Some(u64::MAX - 1)), u64::MAX);
    }
}
