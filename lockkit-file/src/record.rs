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
//! held 1234 1732190000.123456789 myhost 5f0c…-attempt-uuid
//! ```
//!
//! The third line is `free` when nobody holds the lock (or after a holder released it). A
//! record that says `held` is only a claim: the flock on the file is the hold, and a holder
//! that died leaves a `held` record behind whose flock the OS has freed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The size of every record write.
pub(crate) const RECORD_LEN: usize = 512;

const HEADER: &str = "lockkit-file 1";
const MAX_HOST: usize = 64;

/// Who holds a lock, as its lock file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Holder {
    /// The holder's process id.
    pub(crate) pid: u32,
    /// When the hold was granted.
    pub(crate) since: SystemTime,
    /// The holder's host name (spaces replaced, at most 64 bytes).
    pub(crate) host: String,
    /// The acquisition's attempt id.
    pub(crate) attempt: String,
}

impl Holder {
    /// The owner string of `HolderInfo`.
    pub(crate) fn owner(&self) -> String {
        format!("pid {} on {}, attempt {}", self.pid, self.host, self.attempt)
    }
}

/// A parsed lock file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Record {
    /// The last token issued; `None` for a new, empty or unreadable file.
    pub(crate) token: Option<u64>,
    /// The holder the file names, if it says `held`.
    pub(crate) holder: Option<Holder>,
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
        let holder = lines.next().and_then(|l| l.strip_prefix("held ")).and_then(parse_holder);
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
            Some(h) => {
                let since = h.since.duration_since(UNIX_EPOCH).unwrap_or_default();
                text.push_str(&format!(
                    "held {} {}.{:09} {} {}\n",
                    h.pid,
                    since.as_secs(),
                    since.subsec_nanos(),
                    h.host,
                    h.attempt
                ));
            }
            None => text.push_str("free\n"),
        }
        let mut bytes = text.into_bytes();
        // Host names are cut to 64 bytes and attempt ids are UUIDs, so this never cuts.
        bytes.truncate(RECORD_LEN - 1);
        bytes.resize(RECORD_LEN - 1, b' ');
        bytes.push(b'\n');
        bytes
    }
}

fn parse_holder(line: &str) -> Option<Holder> {
    let mut parts = line.split(' ');
    let pid = parts.next()?.parse().ok()?;
    let (secs, nanos) = parts.next()?.split_once('.')?;
    let since = UNIX_EPOCH + Duration::new(secs.parse().ok()?, nanos.parse().ok()?);
    let host = parts.next()?.to_owned();
    let attempt = parts.next()?.to_owned();
    Some(Holder { pid, since, host, attempt })
}

/// This machine's host name, made safe for a record: no whitespace, at most 64 bytes.
pub(crate) fn host_name() -> String {
    let uname = rustix::system::uname();
    let raw = uname.nodename().to_string_lossy();
    let mut host: String = raw.chars().map(|c| if c.is_whitespace() || c.is_control() { '_' } else { c }).collect();
    if host.is_empty() {
        host.push_str("unknown");
    }
    while host.len() > MAX_HOST {
        host.pop();
    }
    host
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
        let holder = Holder {
            pid: 42,
            since: UNIX_EPOCH + Duration::new(1_700_000_000, 123),
            host: host_name(),
            attempt: "5f0c8d2e-0000-4000-8000-000000000000".into(),
        };
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
