//! Observing an election: the stream [`LockBackend::observe`](lockkit_core::backend::LockBackend::observe)
//! returns.
//!
//! An observer *looks* at the election (under the name's fence, on a blocking thread for an
//! instant: the journal, and who holds the lock file) when something may have changed, and
//! turns what it sees into events with a [`Follower`]: the journal's new lines in order (so a
//! term that came and went between two looks is still reported), then the lock file's holder
//! (a leader that died writes no vacancy: the flock tells). What wakes it:
//!
//! - in this process, the wake-ups of the lock file and of the journal, which every grant,
//!   release and loss of a candidate (and every release of the name) sends;
//! - across processes, the inotify watch of the directory ([`crate::watch`]): a write to the
//!   lock file or the journal, a close of the lock file after writing (a release, a holder's
//!   death, or another process's try), their creation, deletion or replacement;
//! - as a safety net, a re-read every [`observe_every`](crate::FileLockProviderBuilder::observe_every)
//!   without any of those.
//!
//! A lost watch (the directory deleted or moved, the watch removed) or an overflowed event
//! queue may hide changes the journal cannot explain (a leader's death): the observer sets the
//! watch again and reports [`LeaderEvent::Gap`], then the current state. So does a journal
//! that was cut past the observer's place, made anew, or deleted.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use lockkit_core::backend::{LeaderEvents, deadline_after};
use lockkit_core::{Error, Leader, LeaderEvent, LockName, Result};
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;
use tracing::Instrument;

use crate::blocking::run_blocking;
use crate::journal::{self, Change, Journal};
use crate::lockfile::{self, FenceLock, Probe};
use crate::names::LockFiles;
use crate::watch::{DirWatch, Seen};
use crate::{BACKEND, wakeups};

/// What one look at an election found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// The journal, when there is one.
    pub(crate) journal: Option<Journal>,
    /// The candidate whose flock on the lock file is held now, from the lock file's record.
    pub(crate) leader: Option<Leader>,
}

/// Looks at the election whose files are `files`, under its fence, so that the journal and
/// the lock file agree (every grant and resignation of a candidate writes both under it). A
/// name never used is seen vacant without creating a file.
pub(crate) fn election_snapshot(files: &LockFiles) -> io::Result<Snapshot> {
    if !files.lock.exists() && !files.election.exists() {
        return Ok(Snapshot::default());
    }
    let fence = FenceLock::lock(&files.fence)?;
    let journal = journal::read(&files.election)?;
    let leader = match lockfile::probe(&files.lock)? {
        Probe::Found { held: true, record } => record.leader(),
        _ => None,
    };
    drop(fence);
    Ok(Snapshot { journal, leader })
}

/// What the observer last reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shown {
    Elected(u64),
    Vacant,
}

/// Turns looks at an election into the events an observer reports: in term order, every
/// term the journal kept, a vacancy when the leader went, and a gap before the current state
/// when something passed that cannot be replayed.
#[derive(Debug, Default)]
pub(crate) struct Follower {
    /// What was reported last; `None` before the first state.
    shown: Option<Shown>,
    /// The journal's epoch and last line taken in.
    epoch: String,
    last_seq: u64,
    /// The greatest term reported: no lower one is ever reported after it.
    last_term: Option<u64>,
    /// Changes may have been missed (the watch was lost, the queue overflowed, a look
    /// failed): the next look reports a gap and the current state.
    pub(crate) gap: bool,
}

impl Follower {
    /// The events that `snapshot` makes after what was reported before.
    pub(crate) fn apply(&mut self, snapshot: Snapshot) -> Vec<LeaderEvent> {
        let mut events = Vec::new();
        let journal = snapshot.journal.unwrap_or_default();
        if self.shown.is_none() {
            self.resync(&journal, snapshot.leader, &mut events);
            return events;
        }
        if self.gap || self.broken(&journal) {
            events.push(LeaderEvent::Gap);
            self.resync(&journal, snapshot.leader, &mut events);
            return events;
        }
        for entry in journal.entries.iter().filter(|entry| entry.seq > self.last_seq) {
            match &entry.change {
                Change::Elected { term, .. } => {
                    if self.last_term.is_some_and(|last| *term <= last) {
                        continue;
                    }
                    if let Some(leader) = entry.change.leader() {
                        events.push(LeaderEvent::Elected(leader));
                    }
                    self.last_term = Some(*term);
                    self.shown = Some(Shown::Elected(*term));
                }
                Change::Vacant { term } => {
                    if self.shown == Some(Shown::Elected(*term)) {
                        events.push(LeaderEvent::Vacant);
                        self.shown = Some(Shown::Vacant);
                    }
                }
            }
        }
        self.epoch.clone_from(&journal.epoch);
        self.last_seq = journal.last_seq();
        // The journal's story must end where the lock file is now.
        match (self.shown, &snapshot.leader) {
            (Some(Shown::Elected(term)), Some(leader)) if leader.term.get() == term => {}
            (Some(Shown::Vacant), None) => {}
            (Some(Shown::Elected(_)), None) => {
                // The leader died, or its lock file was deleted: no vacancy was written.
                events.push(LeaderEvent::Vacant);
                self.shown = Some(Shown::Vacant);
            }
            _ => {
                // A leader the journal does not explain (it was damaged, say).
                events.push(LeaderEvent::Gap);
                self.resync(&journal, snapshot.leader, &mut events);
            }
        }
        events
    }

    /// Whether the journal lost lines this follower had not taken in: another epoch, fewer
    /// lines than taken in, or lines cut before the next one to take in.
    fn broken(&self, journal: &Journal) -> bool {
        if journal.epoch != self.epoch {
            // A journal begun since the last look, when there was none, is new, not broken.
            let begun = self.epoch.is_empty() && self.last_seq == 0;
            return !(begun && journal.entries.first().is_none_or(|entry| entry.seq == 1));
        }
        if journal.last_seq() < self.last_seq {
            return true;
        }
        journal
            .entries
            .iter()
            .find(|entry| entry.seq > self.last_seq)
            .is_some_and(|first| Some(first.seq) != self.last_seq.checked_add(1))
    }

    /// Takes the state now as the starting point: reports it (a leader whose term is below
    /// one reported before is not reported again), and continues after the journal's end.
    fn resync(&mut self, journal: &Journal, leader: Option<Leader>, events: &mut Vec<LeaderEvent>) {
        self.epoch.clone_from(&journal.epoch);
        self.last_seq = journal.last_seq();
        self.gap = false;
        match leader {
            Some(leader) => {
                let term = leader.term.get();
                if self.last_term.is_none_or(|last| term >= last) {
                    self.last_term = Some(term);
                    events.push(LeaderEvent::Elected(leader));
                }
                self.shown = Some(Shown::Elected(term));
            }
            None => {
                events.push(LeaderEvent::Vacant);
                self.shown = Some(Shown::Vacant);
            }
        }
    }
}

/// The state of an observer's inotify watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WatchState {
    /// Waited on.
    Active,
    /// Gone: set it again before the next look.
    Lost,
    /// Could not be set or read: set it again at the next safety-net re-read.
    Broken,
}

/// What woke a waiting observer.
enum Woke {
    Notified,
    Watch(io::Result<Seen>),
    Timer,
}

/// One observer: its watch, its wake-ups, its follower and the events to hand out.
pub(crate) struct Follow {
    lock: LockName,
    files: LockFiles,
    every: Duration,
    follower: Follower,
    watch: Option<DirWatch>,
    watch_state: WatchState,
    /// The watch failed, and has not delivered events since: the failure was reported (once
    /// per such episode, with one gap).
    degraded: bool,
    /// This process's wake-ups of the lock file and of the journal.
    wakes: [Arc<Notify>; 2],
    armed: Option<[Pin<Box<OwnedNotified>>; 2]>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    pending: VecDeque<Result<LeaderEvent>>,
    must_look: bool,
    ended: bool,
}

/// The names, in their directory, of the files whose events matter to an observer.
pub(crate) fn watched_names(files: &LockFiles) -> Vec<&OsStr> {
    [&files.lock, &files.election].into_iter().filter_map(|path| path.file_name()).collect()
}

/// The stream of an observer of `lock`, waking on `watch` (when the system has one), this
/// process's wake-ups, and a re-read every `every`.
pub(crate) fn follow(lock: LockName, files: LockFiles, watch: Option<DirWatch>, every: Duration) -> LeaderEvents {
    let wakes = [wakeups::interest(&files.lock), wakeups::interest(&files.election)];
    let follow = Follow {
        lock,
        files,
        every,
        follower: Follower::default(),
        watch,
        watch_state: WatchState::Active,
        degraded: false,
        wakes,
        armed: None,
        timer: None,
        pending: VecDeque::new(),
        must_look: true,
        ended: false,
    };
    Box::pin(futures_util::stream::unfold(follow, |follow| {
        let span = tracing::debug_span!("lockkit.file.observe", lock = %follow.lock);
        follow.next().instrument(span)
    }))
}

impl Follow {
    async fn next(mut self) -> Option<(Result<LeaderEvent>, Self)> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some((item, self));
            }
            if self.ended {
                return None;
            }
            if tokio::runtime::Handle::try_current().is_err() {
                self.ended = true;
                let why = io::Error::other("an election observer must be polled on a Tokio runtime");
                self.pending.push_back(Err(Error::backend(BACKEND, Some(&self.lock), why)));
                continue;
            }
            if self.must_look {
                self.look().await;
            } else {
                self.wait().await;
            }
        }
    }

    /// Looks at the election and queues what changed. The wake-ups are armed first, so that
    /// a change during the look wakes the next wait.
    async fn look(&mut self) {
        self.must_look = false;
        self.arm();
        if self.watch_state == WatchState::Lost {
            self.rewatch();
        }
        let files = self.files.clone();
        let looked = run_blocking(&self.lock, move || election_snapshot(&files)).await.and_then(|looked| {
            looked.map_err(|error| {
                Error::backend(BACKEND, Some(&self.lock), error)
                    .with_context(format!("read the election's files next to {}", self.files.lock.display()))
            })
        });
        match looked {
            Ok(snapshot) => {
                for event in self.follower.apply(snapshot) {
                    tracing::debug!(lock = %self.lock, ?event, "lockkit.observe");
                    self.pending.push_back(Ok(event));
                }
            }
            Err(error) => {
                tracing::debug!(lock = %self.lock, %error, "an election observer could not look");
                self.follower.gap = true;
                self.pending.push_back(Err(error));
            }
        }
        let next = tokio::time::Instant::from_std(deadline_after(std::time::Instant::now(), self.every));
        match &mut self.timer {
            Some(timer) => timer.as_mut().reset(next),
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(next))),
        }
    }

    /// Arms this process's wake-ups afresh.
    fn arm(&mut self) {
        let [lock, election] = &self.wakes;
        let mut armed = [Box::pin(Arc::clone(lock).notified_owned()), Box::pin(Arc::clone(election).notified_owned())];
        for notified in &mut armed {
            notified.as_mut().enable();
        }
        self.armed = Some(armed);
    }

    /// Sets the watch again (the gap for what it may have missed was noted when it was
    /// lost).
    fn rewatch(&mut self) {
        let Some(watch) = &mut self.watch else { return };
        match watch.rewatch() {
            Ok(()) => {
                tracing::debug!(lock = %self.lock, "an election observer's watch was set again");
                self.watch_state = WatchState::Active;
            }
            Err(error) => self.watch_broke(error),
        }
    }

    /// The watch cannot be set or read: until it can, the observer wakes on this process's
    /// changes and its re-read only. Said once per episode, with a gap.
    fn watch_broke(&mut self, error: io::Error) {
        self.watch_state = WatchState::Broken;
        if self.degraded {
            tracing::debug!(lock = %self.lock, %error, "an election observer still has no inotify watch");
            return;
        }
        tracing::warn!(lock = %self.lock, %error, "an election observer has no inotify watch");
        self.degraded = true;
        self.follower.gap = true;
        let dir = self.files.lock.parent().unwrap_or(&self.files.lock);
        let context = format!(
            "watch {} with inotify (changes made by other processes are seen at the re-read every {:?} until it is back)",
            dir.display(),
            self.every
        );
        self.pending.push_back(Err(Error::backend(BACKEND, Some(&self.lock), error).with_context(context)));
    }

    /// Waits for a reason to look again.
    async fn wait(&mut self) {
        if self.armed.is_none() {
            self.arm();
        }
        let woke = {
            let Self { armed, watch, watch_state, timer, every, .. } = self;
            let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(*every)));
            let watching = *watch_state == WatchState::Active;
            let changes = async {
                match watch {
                    Some(watch) if watching => watch.changes().await,
                    _ => std::future::pending().await,
                }
            };
            let notified = async {
                match armed {
                    Some([lock, election]) => {
                        tokio::select! {
                            () = lock.as_mut() => {}
                            () = election.as_mut() => {}
                        }
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = notified => Woke::Notified,
                seen = changes => Woke::Watch(seen),
                () = timer.as_mut() => Woke::Timer,
            }
        };
        match woke {
            Woke::Notified => self.must_look = true,
            Woke::Timer => {
                if self.watch_state == WatchState::Broken {
                    self.rewatch();
                }
                self.must_look = true;
            }
            Woke::Watch(Ok(seen)) => {
                self.degraded = false;
                if seen.overflow {
                    tracing::debug!(lock = %self.lock, "an election observer's inotify queue overflowed");
                    self.follower.gap = true;
                }
                if seen.lost {
                    tracing::debug!(lock = %self.lock, "an election observer's watch was lost");
                    self.watch_state = WatchState::Lost;
                    self.follower.gap = true;
                }
                self.must_look = seen.relevant || seen.lost || seen.overflow;
            }
            Woke::Watch(Err(error)) => {
                self.watch_broke(error);
                self.must_look = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::{Duration, UNIX_EPOCH};

    use lockkit_core::FencingToken;

    use super::*;
    use crate::journal::Entry;

    fn leader(term: u64, who: &str) -> Leader {
        Leader::new(Arc::from(who.as_bytes()), FencingToken::new(term), Some(UNIX_EPOCH + Duration::from_millis(7)))
    }

    fn elected(seq: u64, term: u64, who: &str) -> Entry {
        Entry { seq, change: Change::Elected { term, since_ms: 7, identity: Arc::from(who.as_bytes()) } }
    }

    fn vacant(seq: u64, term: u64) -> Entry {
        Entry { seq, change: Change::Vacant { term } }
    }

    fn journal(epoch: &str, entries: Vec<Entry>) -> Option<Journal> {
        Some(Journal { epoch: epoch.to_owned(), entries, damaged: false })
    }

    fn snapshot(journal: Option<Journal>, leader: Option<Leader>) -> Snapshot {
        Snapshot { journal, leader }
    }

    #[test]
    fn terms_that_came_and_went_between_two_looks_are_replayed_in_order() {
        let mut follower = Follower::default();
        assert_eq!(follower.apply(snapshot(None, None)), vec![LeaderEvent::Vacant]);
        let all = vec![elected(1, 10, "a"), vacant(2, 10), elected(3, 11, "b"), vacant(4, 11), elected(5, 12, "c")];
        let events = follower.apply(snapshot(journal("e", all.clone()), Some(leader(12, "c"))));
        assert_eq!(
            events,
            vec![
                LeaderEvent::Elected(leader(10, "a")),
                LeaderEvent::Vacant,
                LeaderEvent::Elected(leader(11, "b")),
                LeaderEvent::Vacant,
                LeaderEvent::Elected(leader(12, "c")),
            ]
        );
        // Nothing new: nothing to say.
        assert_eq!(follower.apply(snapshot(journal("e", all.clone()), Some(leader(12, "c")))), vec![]);
        // The leader died: no line says so, the lock file does.
        assert_eq!(follower.apply(snapshot(journal("e", all.clone()), None)), vec![LeaderEvent::Vacant]);
        // Its successor writes the vacancy it missed, then its own term.
        let mut more = all;
        more.extend([vacant(6, 12), elected(7, 14, "d")]);
        assert_eq!(
            follower.apply(snapshot(journal("e", more), Some(leader(14, "d")))),
            vec![LeaderEvent::Elected(leader(14, "d"))]
        );
    }

    #[test]
    fn the_first_state_is_the_lock_files_and_the_journal_goes_on_from_its_end() {
        let mut follower = Follower::default();
        let before = vec![elected(8, 10, "a"), vacant(9, 10), elected(10, 11, "b")];
        assert_eq!(
            follower.apply(snapshot(journal("e", before.clone()), Some(leader(11, "b")))),
            vec![LeaderEvent::Elected(leader(11, "b"))]
        );
        let mut after = before;
        after.push(vacant(11, 11));
        assert_eq!(follower.apply(snapshot(journal("e", after), None)), vec![LeaderEvent::Vacant]);
    }

    #[test]
    fn lines_cut_before_they_were_read_or_another_epoch_make_a_gap_then_the_state() {
        let mut follower = Follower::default();
        follower.apply(snapshot(journal("e", vec![elected(1, 10, "a")]), Some(leader(10, "a"))));
        // Cut: the next line to read (2) is gone.
        let cut = journal("e", vec![elected(70, 40, "x"), vacant(71, 40), elected(72, 41, "y")]);
        assert_eq!(
            follower.apply(snapshot(cut.clone(), Some(leader(41, "y")))),
            vec![LeaderEvent::Gap, LeaderEvent::Elected(leader(41, "y"))]
        );
        assert_eq!(follower.apply(snapshot(cut, Some(leader(41, "y")))), vec![]);
        // Made anew (another epoch): a gap, even though its numbers look like a sequel.
        let anew = journal("f", vec![elected(73, 42, "z")]);
        assert_eq!(
            follower.apply(snapshot(anew.clone(), Some(leader(42, "z")))),
            vec![LeaderEvent::Gap, LeaderEvent::Elected(leader(42, "z"))]
        );
        // Deleted.
        assert_eq!(follower.apply(snapshot(None, None)), vec![LeaderEvent::Gap, LeaderEvent::Vacant]);
        // Begun again since: new, not broken.
        assert_eq!(
            follower.apply(snapshot(journal("g", vec![elected(1, 43, "w")]), Some(leader(43, "w")))),
            vec![LeaderEvent::Elected(leader(43, "w"))]
        );
    }

    #[test]
    fn a_missed_event_makes_a_gap_and_no_term_is_ever_reported_out_of_order() {
        let mut follower = Follower::default();
        let lines = vec![elected(1, 10, "a")];
        follower.apply(snapshot(journal("e", lines.clone()), Some(leader(10, "a"))));
        // The watch was lost: a gap, then the state now (the same leader: said again).
        follower.gap = true;
        assert_eq!(
            follower.apply(snapshot(journal("e", lines.clone()), Some(leader(10, "a")))),
            vec![LeaderEvent::Gap, LeaderEvent::Elected(leader(10, "a"))]
        );
        // A line with a lower term than one reported (a fence reset by hand) is not reported.
        let mut lower = lines;
        lower.extend([vacant(2, 10), elected(3, 5, "old")]);
        let events = follower.apply(snapshot(journal("e", lower.clone()), Some(leader(5, "old"))));
        assert_eq!(events, vec![LeaderEvent::Vacant, LeaderEvent::Gap]);
        assert_eq!(follower.apply(snapshot(journal("e", lower), Some(leader(5, "old")))), vec![]);
        // A leader no line explains: a gap, then the leader.
        let mut follower = Follower::default();
        follower.apply(snapshot(None, None));
        assert_eq!(
            follower.apply(snapshot(None, Some(leader(3, "x")))),
            vec![LeaderEvent::Gap, LeaderEvent::Elected(leader(3, "x"))]
        );
    }
}
