//! The journal of an election: every change of leader of one name, numbered, in the file
//! `NAME.election`, so that an observer replays the terms that came and went between two of
//! its looks instead of skipping them.
//!
//! ```text
//! lockkit-file election 1 3f2a9c0e5b7d4e1f8a6b2c4d9e0f1a2b
//! 41 elected 1732190000123460 1732190000123 13 10.0.0.7:8080
//! 42 vacant 1732190000123460
//! 43 elected 1732190000123461 1732190000456 13 10.0.0.8:8080
//! ```
//!
//! The header names the journal's *epoch*, a random id given when the journal is created (or
//! made anew after damage); each line starts with its number, one more than the line before.
//! An `elected` line gives the term (the leader's fencing token), the start of the term in
//! milliseconds since the epoch, and the identity (length, then the escaped bytes, as in the
//! lock file's record); a `vacant` line the term that ended.
//!
//! Every write happens under the name's fence: a candidate's grant appends its `elected`
//! line (after a `vacant` line for a predecessor whose end no one wrote: it died, or its lock
//! file was deleted), and its resignation appends `vacant` while its term is the last one
//! written. Observers read the journal under the fence too, so they never see half a line.
//! The journal keeps at most [`MAX_ENTRIES`] lines: past that, it is rewritten with the last
//! [`KEEP`] and renamed over the old one in one step; an observer that had not read the lines
//! dropped sees the numbers jump and reports a gap.
//!
//! A journal that cannot be read (a crash cut its last line, or someone edited it) is made
//! anew with a new epoch at the next write; an observer that sees another epoch reports a
//! gap. The journal only informs observers: who leads is decided by the lock file's flock,
//! and the lock file's record names the leader.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockkit_core::{FencingToken, Leader};

use crate::record::{encode_identity, parse_identity};

/// The first line's start; the epoch follows.
const HEADER: &str = "lockkit-file election 1 ";

/// How many lines a rewritten journal keeps.
pub(crate) const KEEP: usize = 64;

/// How many lines a journal may reach before it is rewritten with the last [`KEEP`].
pub(crate) const MAX_ENTRIES: usize = 2 * KEEP;

/// One change of leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// A candidate leads for `term`, since `since_ms`, publishing `identity`.
    Elected { term: u64, since_ms: u64, identity: Arc<[u8]> },
    /// The leader of `term` no longer leads.
    Vacant { term: u64 },
}

impl Change {
    /// The leader an `elected` change names.
    pub(crate) fn leader(&self) -> Option<Leader> {
        match self {
            Self::Elected { term, since_ms, identity } => {
                let since = UNIX_EPOCH.checked_add(Duration::from_millis(*since_ms));
                Some(Leader::new(Arc::clone(identity), FencingToken::new(*term), since))
            }
            Self::Vacant { .. } => None,
        }
    }
}

/// A numbered line of the journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) seq: u64,
    pub(crate) change: Change,
}

impl Entry {
    fn render(&self) -> String {
        match &self.change {
            Change::Elected { term, since_ms, identity } => {
                format!("{} elected {term} {since_ms} {} {}\n", self.seq, identity.len(), encode_identity(identity))
            }
            Change::Vacant { term } => format!("{} vacant {term}\n", self.seq),
        }
    }

    fn parse(line: &str) -> Option<Self> {
        let mut fields = line.splitn(3, ' ');
        let seq = fields.next()?.parse().ok()?;
        let what = fields.next()?;
        let rest = fields.next()?;
        let change = match what {
            "elected" => {
                let mut fields = rest.splitn(3, ' ');
                let term = fields.next()?.parse().ok()?;
                let since_ms = fields.next()?.parse().ok()?;
                let identity = parse_identity(fields.next()?)?;
                Change::Elected { term, since_ms, identity }
            }
            "vacant" => Change::Vacant { term: rest.parse().ok()? },
            _ => return None,
        };
        Some(Self { seq, change })
    }
}

/// A journal as read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Journal {
    /// The epoch the header names; empty when the header is not readable.
    pub(crate) epoch: String,
    /// The lines that could be read, in order, numbered one after the other.
    pub(crate) entries: Vec<Entry>,
    /// Whether something could not be read (the header, a line, a cut last line): the
    /// entries stop before it, and the next write makes the journal anew.
    pub(crate) damaged: bool,
}

impl Journal {
    /// A new, empty journal with a fresh epoch.
    fn new() -> Self {
        Self { epoch: uuid::Uuid::new_v4().simple().to_string(), entries: Vec::new(), damaged: false }
    }

    /// Parses a journal's bytes; never fails (what cannot be read marks it damaged).
    pub(crate) fn parse(bytes: &[u8]) -> Self {
        let mut journal = Self::default();
        let Ok(text) = std::str::from_utf8(bytes) else {
            journal.damaged = true;
            return journal;
        };
        // A line without its newline was cut by a crash in the middle of an append.
        let complete = match text.rfind('\n') {
            Some(end) => &text[..=end],
            None => "",
        };
        journal.damaged = complete.len() < text.len();
        let mut lines = complete.lines();
        match lines.next().and_then(|line| line.strip_prefix(HEADER)) {
            Some(epoch) if !epoch.is_empty() && epoch.bytes().all(|b| b.is_ascii_alphanumeric()) => {
                journal.epoch = epoch.to_owned();
            }
            _ => {
                journal.damaged |= !text.is_empty();
                return journal;
            }
        }
        for line in lines {
            match Entry::parse(line) {
                Some(entry) if journal.entries.last().is_none_or(|last| last.seq.checked_add(1) == Some(entry.seq)) => {
                    journal.entries.push(entry);
                }
                _ => {
                    journal.damaged = true;
                    break;
                }
            }
        }
        journal
    }

    /// The number of the last line; 0 for an empty journal.
    pub(crate) fn last_seq(&self) -> u64 {
        self.entries.last().map_or(0, |entry| entry.seq)
    }

    fn render(&self) -> String {
        let mut text = format!("{HEADER}{}\n", self.epoch);
        for entry in &self.entries {
            text.push_str(&entry.render());
        }
        text
    }
}

/// Reads the journal at `path`; `None` when there is none. Call it under the name's fence.
pub(crate) fn read(path: &Path) -> io::Result<Option<Journal>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(Journal::parse(&bytes))),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Writes the term a candidate was just granted, under the name's fence: `vacant` for a
/// predecessor whose end was not written (it died, or lost its lock file), then `elected`.
pub(crate) fn record_elected(path: &Path, term: u64, since: SystemTime, identity: &Arc<[u8]>) -> io::Result<()> {
    let since_ms = since.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    append(path, |last| {
        let mut changes = Vec::with_capacity(2);
        if let Some(Change::Elected { term: before, .. }) = last {
            changes.push(Change::Vacant { term: *before });
        }
        changes.push(Change::Elected { term, since_ms, identity: Arc::clone(identity) });
        changes
    })
}

/// Writes the end of `term`, under the name's fence, when it is the last term written (a
/// leader whose lock file was deleted may resign after another candidate was elected: its
/// end was written then).
pub(crate) fn record_vacant(path: &Path, term: u64) -> io::Result<()> {
    append(path, |last| match last {
        Some(Change::Elected { term: current, .. }) if *current == term => vec![Change::Vacant { term }],
        _ => Vec::new(),
    })
}

/// Appends what `next` makes of the last change written, numbering the lines on; makes the
/// journal anew (new epoch) when it is missing or damaged, and rewrites it with the last
/// [`KEEP`] lines when it would grow past [`MAX_ENTRIES`].
fn append(path: &Path, next: impl FnOnce(Option<&Change>) -> Vec<Change>) -> io::Result<()> {
    let (mut journal, anew) = match read(path)? {
        Some(journal) if !journal.damaged && !journal.epoch.is_empty() => (journal, false),
        // Damaged: keep what could be read, under a new epoch.
        Some(journal) => (Journal { epoch: Journal::new().epoch, entries: journal.entries, damaged: false }, true),
        None => (Journal::new(), true),
    };
    let changes = next(journal.entries.last().map(|entry| &entry.change));
    if changes.is_empty() {
        return Ok(());
    }
    let mut seq = journal.last_seq();
    let fresh: Vec<Entry> = changes
        .into_iter()
        .map(|change| {
            seq = seq.saturating_add(1);
            Entry { seq, change }
        })
        .collect();
    if !anew && journal.entries.len() + fresh.len() <= MAX_ENTRIES {
        let text: String = fresh.iter().map(Entry::render).collect();
        return OpenOptions::new().append(true).open(path)?.write_all(text.as_bytes());
    }
    let keep_from = journal.entries.len().saturating_sub(KEEP);
    journal.entries.drain(..keep_from);
    journal.entries.extend(fresh);
    rewrite(path, &journal)
}

/// Replaces the journal at `path` in one step: written in full to `NAME.election-new` (a
/// name no lock name's files can have), then renamed over it.
fn rewrite(path: &Path, journal: &Journal) -> io::Result<()> {
    let mut staged = PathBuf::from(path).into_os_string();
    staged.push("-new");
    let staged = PathBuf::from(staged);
    let mut file = OpenOptions::new().write(true).create(true).truncate(true).open(&staged)?;
    file.write_all(journal.render().as_bytes())?;
    drop(file);
    std::fs::rename(&staged, path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn identity(text: &str) -> Arc<[u8]> {
        Arc::from(text.as_bytes())
    }

    #[test]
    fn terms_are_numbered_and_a_dead_predecessor_gets_its_vacancy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.election");
        assert_eq!(read(&path).unwrap(), None);
        // Resigning a term nobody wrote writes nothing, and creates nothing.
        record_vacant(&path, 3).unwrap();
        assert!(!path.exists());
        let since = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        record_elected(&path, 5, since, &identity("a b")).unwrap();
        record_vacant(&path, 4).unwrap();
        record_vacant(&path, 5).unwrap();
        record_vacant(&path, 5).unwrap();
        record_elected(&path, 6, since, &identity("b")).unwrap();
        // 6 died: its successor writes its vacancy first.
        record_elected(&path, 8, since, &identity("c")).unwrap();
        let journal = read(&path).unwrap().unwrap();
        assert!(!journal.damaged && journal.epoch.len() == 32, "{journal:?}");
        let changes: Vec<_> = journal.entries.iter().map(|e| (e.seq, e.change.clone())).collect();
        assert_eq!(
            changes,
            vec![
                (1, Change::Elected { term: 5, since_ms: 1_700_000_000_123, identity: identity("a b") }),
                (2, Change::Vacant { term: 5 }),
                (3, Change::Elected { term: 6, since_ms: 1_700_000_000_123, identity: identity("b") }),
                (4, Change::Vacant { term: 6 }),
                (5, Change::Elected { term: 8, since_ms: 1_700_000_000_123, identity: identity("c") }),
            ]
        );
        let leader = journal.entries[0].change.leader().unwrap();
        assert_eq!((leader.term.get(), leader.since), (5, Some(since)));
        assert!(std::fs::read_to_string(&path).unwrap().contains("1 elected 5 1700000000123 3 a%20b\n"));
    }

    #[test]
    fn a_long_journal_is_cut_to_its_last_lines_and_keeps_its_epoch_and_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.election");
        for term in 1..=(MAX_ENTRIES as u64 / 2 + 1) {
            record_elected(&path, term, SystemTime::now(), &identity("x")).unwrap();
            record_vacant(&path, term).unwrap();
        }
        let journal = read(&path).unwrap().unwrap();
        assert!(!journal.damaged);
        assert!(journal.entries.len() <= MAX_ENTRIES && journal.entries.len() > KEEP, "{}", journal.entries.len());
        assert_eq!(journal.last_seq(), MAX_ENTRIES as u64 + 2);
        let before = journal.epoch.clone();
        record_elected(&path, 1000, SystemTime::now(), &identity("y")).unwrap();
        assert_eq!(read(&path).unwrap().unwrap().epoch, before);
        assert!(!dir.path().join("e.election-new").exists());
    }

    #[test]
    fn a_damaged_journal_is_read_up_to_the_damage_and_made_anew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.election");
        record_elected(&path, 1, SystemTime::now(), &identity("a")).unwrap();
        let epoch = read(&path).unwrap().unwrap().epoch;
        // A crash in the middle of an append.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"2 vaca").unwrap();
        let journal = read(&path).unwrap().unwrap();
        assert!(journal.damaged);
        assert_eq!(journal.entries.len(), 1);
        record_vacant(&path, 1).unwrap();
        let journal = read(&path).unwrap().unwrap();
        assert!(!journal.damaged);
        assert_ne!(journal.epoch, epoch, "a journal made anew has a new epoch");
        for bad in [
            &b"\xff\xfe"[..],
            b"garbage\n",
            b"lockkit-file election 1 e\n1 elected x\n",
            b"lockkit-file election 1 e\n2 vacant 1\n1 vacant 1\n",
        ] {
            assert!(Journal::parse(bad).damaged, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(Journal::parse(b""), Journal::default());
    }
}
