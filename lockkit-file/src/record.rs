//! The content of a lock file: the last fencing token issued for the lock and, while it is
//! held, who holds it.
//!
//! A record is text, padded to exactly [`RECORD_LEN`] bytes and always written whole at
//! offset 0, so a write never leaves a shorter record's tail behind and a single-sector write
//! replaces it:
//!
//! ```text
//! lockkit-file 1
//! token 1732190000123456
//! held 5f0c8d2e-…-attempt-uuid myhost 1234 1732190000123
//! ```
//!
//! After `held` comes the holder's [`OwnerMeta`] line (attempt, host, pid, since in ms), the
//! same metadata the Redis and ZooKeeper backends keep.
//!
//! The third line is `free` when nobody holds the lock (or after a holder released it). A
//! record that says `held` is only a claim: the flock on the file is the hold, and a holder
//! that died leaves a `held` record behind whose flock the OS has freed.

use std::time::{SystemTime, UNIX_EPOCH};

use lockkit_core::backend::OwnerMeta;

/// The size of every record write.
pub(crate) const RECORD_LEN: usize = 512;

const HEADER: &str = "lockkit-file 1";

/// A parsed lock file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Record {
    /// The last token issued; `None` for a new, empty or unreadable file.
    pub(crate) token: Option<u64>,
    /// The holder the file names, if it says `held`.
    pub(crate) holder: Option<OwnerMeta>,
}

impl Record {
    /// Parses a lock file's bytes; anything unexpected yields a record without a token.
    pub(crate) fn parse(bytes: &[u8]) -> Self {
        let Ok(text) = std::str::from_utf8(bytes) else { return Self::default() };
        let mut lines = text.lines().map(str::trim_end);
        if lines.next() != Some(HEADER) {
            return Self::default();
        }
        let token = lines.next().and_then(|l| l.strip_prefix("token ")).and_then(|t| t.parse::<u64>().ok());
        let Some(token) = token else { return Self::default() };
        let holder = lines.next().and_then(|l| l.strip_prefix("held ")).and_then(OwnerMeta::decode);
        Self { token: Some(token), holder }
    }

    /// The record as written: exactly [`RECORD_LEN`] bytes.
    pub(crate) fn render(&self) -> Vec<u8> {
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
            }
            None => text.push_str("free\n"),
        }
        let mut bytes = text.into_bytes();
        // Host names have at most 253 bytes and attempt ids are UUIDs, so this never cuts.
        bytes.truncate(RECORD_LEN - 1);
        bytes.resize(RECORD_LEN - 1, b' ');
        bytes.push(b'\n');
        bytes
    }
}

/// The token of a fresh acquisition, given the last token the lock file records.
///
/// A file with a token continues from it. A file without one (new, deleted and recreated,
/// or unreadable after a crash mid-write) starts from the wall clock in microseconds, so
/// tokens keep increasing even then, as long as the clock does not step back.
pub(crate) fn next_token(last: Option<u64>) -> u64 {
    let clock = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or_default();
    let clock = u64::try_from(clock).unwrap_or(u64::MAX);
    match last {
        Some(last) => last.saturating_add(1),
        None => clock.max(1),
    }
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
        for record in
            [Record { token: Some(7), holder: Some(holder.clone()) }, Record { token: Some(u64::MAX), holder: None }]
        {
            let bytes = record.render();
            assert_eq!(bytes.len(), RECORD_LEN);
            assert_eq!(Record::parse(&bytes), record);
        }
    }

    #[test]
    fn unreadable_files_have_no_token() {
        assert_eq!(Record::parse(b""), Record::default());
        assert_eq!(Record::parse(b"lockkit-file 1\ntoken x\n"), Record::default());
        assert_eq!(Record::parse(&[0xff, 0xfe]), Record::default());
        assert_eq!(Record::parse(b"lockkit-file 1\ntoken 5\nheld garbage\n").token, Some(5));
    }

    #[test]
    fn tokens_continue_or_start_from_the_clock() {
        assert_eq!(next_token(Some(5)), 6);
        assert!(next_token(None) > 1_600_000_000_000_000);
    }
}
