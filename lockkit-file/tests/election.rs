//! Elections on the file backend beyond the kit's cases: what the lock file's record and the
//! journal say, observers that replay terms they were not polled for, the gaps a slow
//! observer or a lost inotify watch report, a deleted lock file, identities of any bytes, and
//! conflicts between an election and the other kinds of one name.
//!
//! The observers here re-read the election on their own only once an hour: every change they
//! report within the bounds below came from a notification.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use lockkit_core::{Error, HoldKind, LeaderEvent, LossReason, Observer};
use lockkit_file::FileLockProvider;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// How long an observer may take to report a change.
const BOUND: Duration = Duration::from_secs(5);

/// A provider whose observers never re-read on their own within a test.
fn provider(dir: &std::path::Path) -> FileLockProvider {
    FileLockProvider::builder().dir(dir).observe_every(Duration::from_secs(3600)).build().unwrap()
}

async fn next(observer: &mut Observer) -> LeaderEvent {
    match tokio::time::timeout(BOUND, observer.next()).await {
        Ok(Some(Ok(event))) => event,
        Ok(other) => panic!("the observer gave {other:?}"),
        Err(_) => panic!("no event within {BOUND:?}"),
    }
}

/// The next event, which must be a leader's: its identity and term.
async fn elected(observer: &mut Observer) -> (String, u64) {
    match next(observer).await {
        LeaderEvent::Elected(leader) => (leader.identity_str().unwrap().to_owned(), leader.term.get()),
        other => panic!("expected a leader, got {other:?}"),
    }
}

#[test]
fn the_leader_is_published_in_the_lock_files_record_and_in_the_journal() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let provider = provider(dir.path());
        let election = provider.election("services/scheduler").unwrap();
        let leadership = election.campaign("10.0.0.7:8080").await.unwrap();
        let term = leadership.token().get();
        let files = provider.lock_files("services/scheduler").unwrap();
        let record = std::fs::read_to_string(&files.lock).unwrap();
        assert!(record.contains("kind candidate\nidentity 13 10.0.0.7:8080\n"), "{record}");
        assert!(record.contains(&format!("token {term}\n")), "{record}");
        let info = provider.inspect("services/scheduler").await.unwrap();
        let holder = info.holder().unwrap();
        assert_eq!(holder.kind, HoldKind::Candidate { identity: std::sync::Arc::from(&b"10.0.0.7:8080"[..]) });
        assert_eq!(holder.token, leadership.token());
        let leader = election.leader().await.unwrap().unwrap();
        assert_eq!((leader.identity_str(), leader.term), (Some("10.0.0.7:8080"), leadership.token()));
        assert_eq!(leader.since, holder.since);
        let journal = std::fs::read_to_string(&files.election).unwrap();
        assert!(journal.starts_with("lockkit-file election 1 "), "{journal}");
        assert!(
            journal.contains(&format!("\n1 elected {term} ")) && journal.ends_with(" 13 10.0.0.7:8080\n"),
            "{journal}"
        );
        leadership.resign().await.unwrap();
        let journal = std::fs::read_to_string(&files.election).unwrap();
        assert!(journal.ends_with(&format!("\n2 vacant {term}\n")), "{journal}");
        assert!(std::fs::read_to_string(&files.lock).unwrap().contains("\nfree\n"));
        assert_eq!(election.leader().await.unwrap(), None);
        let mut names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        let stem = "services%2fscheduler";
        let expected =
            ["lockkit.dir".into(), format!("{stem}.election"), format!("{stem}.fence"), format!("{stem}.lock")];
        assert_eq!(names, expected, "what an election leaves on disk");
    });
}

#[test]
fn an_observer_replays_the_terms_that_came_and_went_while_it_was_not_polled() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let provider = provider(dir.path());
        let election = provider.election("replayed").unwrap();
        let mut observer = election.observe().unwrap();
        assert_eq!(next(&mut observer).await, LeaderEvent::Vacant);
        let mut terms = Vec::new();
        for who in ["a", "b", "c"] {
            let leadership = election.campaign(who).await.unwrap();
            terms.push((who.to_owned(), leadership.token().get()));
            leadership.resign().await.unwrap();
        }
        for term in terms {
            assert_eq!(elected(&mut observer).await, term);
            assert_eq!(next(&mut observer).await, LeaderEvent::Vacant);
        }
        // And live changes, as they happen.
        let leadership = election.campaign("d").await.unwrap();
        assert_eq!(elected(&mut observer).await, ("d".to_owned(), leadership.token().get()));
    });
}

#[test]
fn an_observer_that_falls_behind_the_journal_is_told_of_a_gap() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let provider = provider(dir.path());
        let election = provider.election("behind").unwrap();
        let mut observer = election.observe().unwrap();
        assert_eq!(next(&mut observer).await, LeaderEvent::Vacant);
        // More terms than the journal keeps, while the observer is not polled.
        for _ in 0..80 {
            election.campaign("x").await.unwrap().resign().await.unwrap();
        }
        let last = election.campaign("last").await.unwrap();
        assert_eq!(next(&mut observer).await, LeaderEvent::Gap);
        assert_eq!(elected(&mut observer).await, ("last".to_owned(), last.token().get()));
        last.resign().await.unwrap();
        assert_eq!(next(&mut observer).await, LeaderEvent::Vacant);
    });
}

#[test]
fn a_lost_watch_is_reported_as_a_gap_and_observing_goes_on() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let provider = provider(dir.path());
        let election = provider.election("watched").unwrap();
        let a = election.campaign("a").await.unwrap();
        let mut observer = election.observe().unwrap();
        assert_eq!(elected(&mut observer).await, ("a".to_owned(), a.token().get()));
        assert_eq!(provider.drop_observer_watches(), 1);
        // The observer notices, sets its watch again, says it may have missed changes, and
        // states the current leader again (a, still).
        assert_eq!(next(&mut observer).await, LeaderEvent::Gap);
        assert_eq!(elected(&mut observer).await, ("a".to_owned(), a.token().get()));
        a.resign().await.unwrap();
        assert_eq!(next(&mut observer).await, LeaderEvent::Vacant);
        let b = election.campaign("b").await.unwrap();
        assert_eq!(elected(&mut observer).await, ("b".to_owned(), b.token().get()));
        drop(observer);
        assert_eq!(provider.drop_observer_watches(), 0, "a dropped observer has no watch left");
    });
}

#[test]
fn a_leader_whose_lock_file_is_deleted_is_seen_to_go_and_its_successor_to_come() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let provider = FileLockProvider::builder()
            .dir(dir.path())
            .observe_every(Duration::from_secs(3600))
            .check_every(Duration::from_millis(50))
            .build()
            .unwrap();
        let other = self::provider(dir.path());
        let election = provider.election("deleted").unwrap();
        let a = election.campaign("a").await.unwrap();
        let mut observer = other.election("deleted").unwrap().observe().unwrap();
        assert_eq!(elected(&mut observer).await, ("a".to_owned(), a.token().get()));
        std::fs::remove_file(provider.lock_path("deleted").unwrap()).unwrap();
        assert_eq!(next(&mut observer).await, LeaderEvent::Vacant);
        tokio::time::timeout(BOUND, a.lost()).await.expect("the leader learns of its loss");
        let b = other.election("deleted").unwrap().campaign("b").await.unwrap();
        assert!(b.token() > a.token());
        assert_eq!(elected(&mut observer).await, ("b".to_owned(), b.token().get()));
        let released = a.release().await;
        assert!(matches!(released, Err(Error::LockLost { .. })), "{released:?}");
        let leader = election.leader().await.unwrap().unwrap();
        assert_eq!(leader.identity_str(), Some("b"), "the old leader's release spares the new one");
        let journal = std::fs::read_to_string(provider.lock_files("deleted").unwrap().election).unwrap();
        let lines: Vec<&str> = journal.lines().skip(1).map(|l| l.split_once(' ').unwrap().1).collect();
        let (ta, tb) = (a_term(&journal, "a"), b.token().get());
        assert_eq!(lines.len(), 3, "{journal}");
        assert!(lines[1] == format!("vacant {ta}") && lines[2].starts_with(&format!("elected {tb} ")), "{journal}");
    });
}

/// The term of the `elected` line of `who` in a journal.
fn a_term(journal: &str, who: &str) -> u64 {
    journal
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            (fields.get(1) == Some(&"elected") && fields.last() == Some(&who)).then(|| fields[2].parse().unwrap())
        })
        .unwrap()
}

#[test]
fn identities_of_any_bytes_round_trip_and_a_shorter_record_leaves_no_tail() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let provider = provider(dir.path());
        let identity: Vec<u8> = (0..lockkit_core::MAX_IDENTITY_LEN).map(|i| (i % 256) as u8).collect();
        let election = provider.election("bytes").unwrap();
        let mut observer = election.observe().unwrap();
        assert_eq!(next(&mut observer).await, LeaderEvent::Vacant);
        let leadership = election.campaign(&identity).await.unwrap();
        let leader = election.leader().await.unwrap().unwrap();
        assert_eq!(&*leader.identity, identity.as_slice());
        match next(&mut observer).await {
            LeaderEvent::Elected(seen) => assert_eq!(seen, leader),
            other => panic!("expected the leader, got {other:?}"),
        }
        let path = provider.lock_path("bytes").unwrap();
        let long = std::fs::metadata(&path).unwrap().len();
        assert!(long > 512 && long.is_multiple_of(512), "{long}");
        leadership.resign().await.unwrap();
        assert_eq!(next(&mut observer).await, LeaderEvent::Vacant);
        // Not an election any more: a mutex may take the name, and its record covers the
        // candidate's whole record.
        let guard = provider.lock("bytes").unwrap().acquire().await.unwrap();
        let text = std::fs::read(&path).unwrap();
        assert_eq!(text.len() as u64, long);
        assert!(!String::from_utf8_lossy(&text).contains("identity"), "no tail of the candidate's record is left");
        assert_eq!(
            provider.inspect("bytes").await.unwrap().holder().map(|h| h.kind.clone()),
            Some(HoldKind::Exclusive)
        );
        guard.release().await.unwrap();
    });
}

#[test]
fn an_election_conflicts_with_locks_and_semaphores_of_its_name() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let provider = provider(dir.path());
        let conflict =
            |what: &str, outcome: lockkit_core::Result<Option<lockkit_core::LockGuard>>, says: &str| match outcome {
                Err(error @ Error::Conflict { .. }) => {
                    assert!(error.to_string().contains(says), "{what}: {error}");
                }
                other => panic!("{what}: expected Conflict, got {other:?}"),
            };
        // A candidate leads: every other kind is refused.
        let election = provider.election("shared-name").unwrap();
        let leadership = election.campaign("leader").await.unwrap();
        conflict("a mutex", provider.lock("shared-name").unwrap().try_acquire().await, "in use as an election");
        let rw = provider.rw_lock("shared-name").unwrap();
        conflict("a reader", rw.try_read().await, "in use as an election");
        conflict("a writer", rw.try_write().await, "in use as an election");
        conflict(
            "a permit",
            provider.semaphore("shared-name", 2).unwrap().try_acquire().await,
            "in use as an election",
        );
        let timed = provider.lock("shared-name").unwrap().acquire_timeout(Duration::from_secs(5)).await;
        assert!(matches!(timed, Err(Error::Conflict { .. })), "a waiting mutex is refused at once: {timed:?}");
        leadership.resign().await.unwrap();
        // Held as a lock, a semaphore or by readers: a candidate is refused.
        let candidate = election.candidate("late").unwrap();
        let mutex = provider.lock("shared-name").unwrap().acquire().await.unwrap();
        conflict("a candidate against a mutex", candidate.try_acquire().await, "in use as a lock, held by a mutex");
        mutex.release().await.unwrap();
        let reader = rw.read().await.unwrap();
        conflict("a candidate against readers", candidate.try_acquire().await, "held by readers");
        reader.release().await.unwrap();
        let permit = provider.semaphore("shared-name", 2).unwrap().acquire().await.unwrap();
        conflict("a candidate against a permit", candidate.try_acquire().await, "in use as a semaphore of 2 permits");
        permit.release().await.unwrap();
        // Free again: the candidate leads.
        let leadership = candidate.try_acquire().await.unwrap().expect("the name is free");
        assert_eq!(
            election.leader().await.unwrap().and_then(|l| l.identity_str().map(str::to_owned)).as_deref(),
            Some("late")
        );
        leadership.resign().await.unwrap();
    });
}

#[test]
fn observing_a_name_used_as_a_mutex_sees_no_leader() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let provider = provider(dir.path());
        let guard = provider.lock("plain").unwrap().acquire().await.unwrap();
        let election = provider.election("plain").unwrap();
        let mut observer = election.observe().unwrap();
        assert_eq!(next(&mut observer).await, LeaderEvent::Vacant);
        assert_eq!(election.leader().await.unwrap(), None);
        guard.release().await.unwrap();
        // Never used: vacant, and nothing is created by looking.
        let mut never = provider.election("never/used").unwrap().observe().unwrap();
        assert_eq!(next(&mut never).await, LeaderEvent::Vacant);
        let files = provider.lock_files("never/used").unwrap();
        assert!(!files.lock.exists() && !files.fence.exists() && !files.election.exists());
    });
}

#[test]
fn a_killed_leader_is_seen_to_go_without_writing_anything() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let doomed = provider(dir.path());
        let watcher = provider(dir.path());
        let leadership = doomed.election("killed").unwrap().campaign("doomed").await.unwrap();
        let mut observer = watcher.election("killed").unwrap().observe().unwrap();
        assert_eq!(elected(&mut observer).await, ("doomed".to_owned(), leadership.token().get()));
        doomed.kill();
        assert_eq!(next(&mut observer).await, LeaderEvent::Vacant);
        let reason = tokio::time::timeout(BOUND, leadership.lost()).await.unwrap();
        assert_eq!(reason, LossReason::ClientClosed);
        let next_leader = watcher.election("killed").unwrap().campaign("next").await.unwrap();
        assert_eq!(elected(&mut observer).await, ("next".to_owned(), next_leader.token().get()));
        // The dead leader's guard is released: it writes nothing over its successor's record.
        assert!(leadership.release().await.is_err());
        let leader = watcher.election("killed").unwrap().leader().await.unwrap();
        assert_eq!(leader.and_then(|l| l.identity_str().map(str::to_owned)).as_deref(), Some("next"));
    });
}

#[test]
fn an_observer_polled_on_a_runtime_without_io_says_so_and_does_not_panic() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let provider = provider(dir.path());
        let mut observer = provider.election("no-io").unwrap().observe().unwrap();
        assert_eq!(next(&mut observer).await, LeaderEvent::Vacant);
        match tokio::time::timeout(BOUND, observer.next()).await {
            Ok(Some(Err(error))) => assert!(format!("{error:?}").contains("enable_io"), "{error:?}"),
            other => panic!("expected an error saying what to enable, got {other:?}"),
        }
    });
}

#[test]
fn an_election_with_a_long_name_is_watched_in_its_sub_directory() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let provider = provider(dir.path());
        let other = self::provider(dir.path());
        let name = "é".repeat(300);
        let files = provider.lock_files(&name).unwrap();
        let sub = files.lock.parent().unwrap().to_path_buf();
        assert_ne!(sub, std::fs::canonicalize(dir.path()).unwrap(), "the name is long enough to need a sub-directory");
        let mut observer = provider.election(&name).unwrap().observe().unwrap();
        assert!(sub.is_dir(), "observing creates the sub-directory it watches");
        assert_eq!(next(&mut observer).await, LeaderEvent::Vacant);
        let leadership = other.election(&name).unwrap().campaign("far").await.unwrap();
        assert_eq!(elected(&mut observer).await, ("far".to_owned(), leadership.token().get()));
        leadership.resign().await.unwrap();
        assert_eq!(next(&mut observer).await, LeaderEvent::Vacant);
    });
}
