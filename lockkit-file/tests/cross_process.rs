//! Read-write locks, semaphores and elections across OS processes: readers in two processes
//! share the lock and exclude a writer here; a semaphore of two admits two of three processes,
//! and the third when one gives its permit back; a killed reader process frees its share at
//! once; an observer here follows candidates of other processes (elected, resigned, killed)
//! through inotify alone.
//!
//! Each child is this test binary run again with the filter [`CHILD_TEST`] and
//! [`CHILD_ENV`] saying what to take (`read`, `write`, `permit:N` or `candidate:IDENTITY`),
//! on which directory and name. The child prints `lockkit-file-child: ACQUIRED <token>`, waits for a line (or the
//! end) on its standard input, releases, prints `lockkit-file-child: RELEASED` and exits. The
//! parent reads the children's output with bounded waits and kills them when it stops early.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use lockkit_core::{Error, HoldKind, LeaderEvent, LockHandle, Observer};
use lockkit_file::FileLockProvider;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

/// What a child takes: `read`, `write`, `permit:N` or `candidate:IDENTITY`, then `|dir|name`.
const CHILD_ENV: &str = "LOCKKIT_FILE_TEST_CHILD";
/// The filter that runs only the child entry.
const CHILD_TEST: &str = "child_entry";
const MARK: &str = "lockkit-file-child:";
/// How long a child may take to start and report.
const START: Duration = Duration::from_secs(20);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// The child side; does nothing unless [`CHILD_ENV`] is set.
#[test]
fn child_entry() {
    let Ok(order) = std::env::var(CHILD_ENV) else { return };
    let mut parts = order.splitn(3, '|');
    let (what, dir, name) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    runtime().block_on(async {
        let provider = FileLockProvider::open(dir).unwrap();
        let handle: LockHandle = match what {
            "read" => provider.rw_lock(name).unwrap().reader().clone(),
            "write" => provider.rw_lock(name).unwrap().writer().clone(),
            candidate if candidate.starts_with("candidate:") => {
                let identity = candidate.trim_start_matches("candidate:");
                provider.election(name).unwrap().candidate(identity).unwrap()
            }
            permit => {
                let permits = permit.strip_prefix("permit:").unwrap().parse().unwrap();
                provider.semaphore(name, permits).unwrap()
            }
        };
        let guard = handle.acquire_timeout(Duration::from_secs(60)).await.unwrap();
        say(&format!("ACQUIRED {}", guard.token()));
        let _ = tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new())).await;
        guard.release().await.unwrap();
        say("RELEASED");
    });
}

fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    // A new line first: libtest may have printed `test … ... ` without one.
    let _ = writeln!(out, "\n{MARK} {line}");
    let _ = out.flush();
}

/// Child processes, seen from the parent: their standard inputs, and one channel of what
/// they say, each line with the child's index.
struct Children {
    children: Vec<(Child, Option<ChildStdin>)>,
    said: mpsc::UnboundedReceiver<(usize, String)>,
    tell: mpsc::UnboundedSender<(usize, String)>,
}

impl Children {
    fn new() -> Self {
        let (tell, said) = mpsc::unbounded_channel();
        Self { children: Vec::new(), said, tell }
    }

    /// Starts a child that takes `what` on lock `name` of `dir`; returns its index.
    fn spawn(&mut self, what: &str, dir: &std::path::Path, name: &str) -> usize {
        let index = self.children.len();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, format!("{what}|{}|{name}", dir.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let tell = self.tell.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some((_, said)) = line.split_once(MARK) {
                    let _ = tell.send((index, said.trim().to_owned()));
                }
            }
        });
        let stdin = child.stdin.take();
        self.children.push((child, stdin));
        index
    }

    /// The next line any child says, within the bound.
    async fn next(&mut self) -> (usize, String) {
        tokio::time::timeout(START, self.said.recv())
            .await
            .unwrap_or_else(|_| panic!("no child said anything within {START:?}"))
            .expect("the children's output is read")
    }

    /// Waits until `count` children have acquired; returns their indices and tokens in order.
    async fn acquired(&mut self, count: usize) -> Vec<(usize, u64)> {
        let mut acquired = Vec::new();
        while acquired.len() < count {
            let (index, line) = self.next().await;
            let token = line.strip_prefix("ACQUIRED").unwrap_or_else(|| panic!("child {index} said {line:?}"));
            acquired.push((index, token.trim().parse().unwrap()));
        }
        acquired
    }

    /// Whether no child has said anything since the last look.
    fn quiet(&mut self) -> bool {
        self.said.try_recv().is_err()
    }

    /// Tells child `index` to release (it says so later, on the channel).
    async fn tell_release(&mut self, index: usize) {
        let mut stdin = self.children[index].1.take().unwrap();
        stdin.write_all(b"release\n").await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// Tells child `index` to release and waits until it did and exited cleanly.
    async fn release(&mut self, index: usize) {
        self.tell_release(index).await;
        assert_eq!(self.next().await, (index, "RELEASED".to_owned()));
        self.exits_cleanly(index).await;
    }

    async fn exits_cleanly(&mut self, index: usize) {
        let status = tokio::time::timeout(START, self.children[index].0.wait()).await.unwrap().unwrap();
        assert!(status.success(), "child {index} exits cleanly: {status:?}");
    }

    /// Kills child `index` (SIGKILL) and waits until it is gone.
    async fn kill(&mut self, index: usize) {
        self.children[index].0.kill().await.unwrap();
    }
}

#[test]
fn readers_in_two_processes_share_the_lock_and_exclude_a_writer() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let name = "shared/config";
        let mut children = Children::new();
        children.spawn("read", dir.path(), name);
        children.spawn("read", dir.path(), name);
        let acquired = children.acquired(2).await;
        let tokens: Vec<u64> = acquired.iter().map(|(_, token)| *token).collect();
        assert_ne!(tokens[0], tokens[1], "each reader has a token of its own");
        let provider = FileLockProvider::open(dir.path()).unwrap();
        let info = provider.inspect(name).await.unwrap();
        let mut seen: Vec<u64> = info.holders.iter().map(|h| h.token.get()).collect();
        seen.sort_unstable();
        let mut expected = tokens.clone();
        expected.sort_unstable();
        assert_eq!(seen, expected, "inspect reports both readers: {info:?}");
        let here = format!("pid {} ", std::process::id());
        assert!(info.holders.iter().all(|h| h.kind == HoldKind::Read && !h.owner.contains(&here)), "{info:?}");
        let rw = provider.rw_lock(name).unwrap();
        // A third reader, here, shares the lock with them.
        let third = rw.try_read().await.unwrap().expect("a reader here joins the readers of two processes");
        drop(third);
        assert!(rw.try_write().await.unwrap().is_none(), "the readers exclude a writer here");
        assert!(provider.lock(name).unwrap().try_acquire().await.unwrap().is_none(), "and a mutex of the name");
        let timed = rw.write_timeout(Duration::from_millis(200)).await;
        assert!(matches!(timed, Err(Error::Timeout { .. })), "{timed:?}");
        let writer = rw.clone();
        let waiting = tokio::spawn(async move { writer.write().await.map(|g| (g.token(), g)) });
        children.release(acquired[0].0).await;
        assert!(!waiting.is_finished(), "the writer still waits while the other process reads");
        assert!(rw.try_write().await.unwrap().is_none());
        children.release(acquired[1].0).await;
        let (token, guard) = tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap().unwrap();
        assert!(token.get() > tokens[0].max(tokens[1]), "the writer's token follows both readers'");
        guard.release().await.unwrap();
    });
}

#[test]
fn a_semaphore_of_two_admits_two_of_three_processes() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let name = "partner-api";
        let mut children = Children::new();
        for _ in 0..3 {
            children.spawn("permit:2", dir.path(), name);
        }
        // Two of them get a permit, whichever two come first; the third waits.
        let acquired = children.acquired(2).await;
        let provider = FileLockProvider::open(dir.path()).unwrap();
        let info = provider.inspect(name).await.unwrap();
        assert_eq!(info.holders.len(), 2, "{info:?}");
        let semaphore = provider.semaphore(name, 2).unwrap();
        assert!(semaphore.try_acquire().await.unwrap().is_none(), "no third permit here");
        let other_count = provider.semaphore(name, 3).unwrap().try_acquire().await;
        assert!(matches!(other_count, Err(Error::Conflict { .. })), "{other_count:?}");
        assert!(children.quiet(), "the third process waits while two hold the permits");
        let third = (0..3).find(|index| acquired.iter().all(|(held, _)| held != index)).unwrap();
        // One gives its permit back: the third process gets it.
        children.tell_release(acquired[0].0).await;
        let mut third_token = None;
        let mut released = false;
        while third_token.is_none() || !released {
            match children.next().await {
                (index, line) if index == acquired[0].0 && line == "RELEASED" => released = true,
                (index, line) if index == third => {
                    third_token = Some(line.strip_prefix("ACQUIRED").unwrap().trim().parse::<u64>().unwrap());
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        children.exits_cleanly(acquired[0].0).await;
        let third_token = third_token.unwrap();
        assert!(third_token > acquired[0].1.max(acquired[1].1), "the third permit's token follows both");
        assert!(semaphore.try_acquire().await.unwrap().is_none(), "still two holders");
        children.release(acquired[1].0).await;
        children.release(third).await;
        let permit = semaphore.try_acquire().await.unwrap().expect("the semaphore is free");
        assert!(permit.token().get() > third_token);
    });
}

#[test]
fn a_killed_reader_process_frees_its_share_at_once() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let name = "killed-reader";
        let mut children = Children::new();
        let index = children.spawn("read", dir.path(), name);
        let token = children.acquired(1).await[0].1;
        let provider = FileLockProvider::open(dir.path()).unwrap();
        let rw = provider.rw_lock(name).unwrap();
        assert!(rw.try_write().await.unwrap().is_none());
        let writer = rw.clone();
        let waiting = tokio::spawn(async move { writer.write().await.map(|g| (g.token(), g)) });
        children.kill(index).await;
        let (next, guard) = tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap().unwrap();
        assert!(next.get() > token);
        let info = provider.inspect(name).await.unwrap();
        assert_eq!(info.holders.len(), 1, "the dead reader is not reported: {info:?}");
        assert_eq!(info.holder().map(|h| h.kind.clone()), Some(HoldKind::Write));
        guard.release().await.unwrap();
        let files = provider.lock_files(name).unwrap();
        assert_eq!(std::fs::read_dir(&files.readers).unwrap().count(), 0, "the dead reader's record was removed");
    });
}

/// The next event of `observer`, within the bound.
async fn next_event(observer: &mut Observer) -> LeaderEvent {
    match tokio::time::timeout(START, observer.next()).await {
        Ok(Some(Ok(event))) => event,
        other => panic!("expected an event within {START:?}, got {other:?}"),
    }
}

/// The next event of `observer`, which must be the leader `identity` of term `term`.
async fn expect_elected(observer: &mut Observer, identity: &str, term: u64) {
    match next_event(observer).await {
        LeaderEvent::Elected(leader) => {
            assert_eq!((leader.identity_str(), leader.term.get()), (Some(identity), term), "{leader:?}");
        }
        other => panic!("expected {identity} to lead for term {term}, got {other:?}"),
    }
}

#[test]
fn an_observer_here_follows_candidates_in_other_processes() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let name = "services/scheduler";
        // The observer's safety-net re-read is an hour away, and nothing in this process
        // touches the election before the end: whatever it reports in time, inotify told it.
        let provider =
            FileLockProvider::builder().dir(dir.path()).observe_every(Duration::from_secs(3600)).build().unwrap();
        let election = provider.election(name).unwrap();
        let mut observer = election.observe().unwrap();
        assert_eq!(next_event(&mut observer).await, LeaderEvent::Vacant);

        let mut children = Children::new();
        let a = children.spawn("candidate:10.0.0.7:8080", dir.path(), name);
        let term_a = children.acquired(1).await[0].1;
        expect_elected(&mut observer, "10.0.0.7:8080", term_a).await;
        let leader = election.leader().await.unwrap().expect("a leads");
        assert_eq!((leader.identity_str(), leader.term.get()), (Some("10.0.0.7:8080"), term_a));
        let info = provider.inspect(name).await.unwrap();
        assert!(info.holder().is_some_and(|h| !h.owner.contains(&format!("pid {} ", std::process::id()))));

        // A second candidate waits; when the first resigns, it leads.
        let b = children.spawn("candidate:10.0.0.8:8080", dir.path(), name);
        children.tell_release(a).await;
        let (mut released, mut term_b) = (false, None);
        while !released || term_b.is_none() {
            match children.next().await {
                (index, line) if index == a && line == "RELEASED" => released = true,
                (index, line) if index == b => {
                    term_b = Some(line.strip_prefix("ACQUIRED").unwrap().trim().parse::<u64>().unwrap());
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        children.exits_cleanly(a).await;
        let term_b = term_b.unwrap();
        assert!(term_b > term_a);
        // The resignation and the next term, each as it was written, in order.
        assert_eq!(next_event(&mut observer).await, LeaderEvent::Vacant);
        expect_elected(&mut observer, "10.0.0.8:8080", term_b).await;

        // The second is killed: it writes nothing, and the close of its lock file by the
        // kernel is what tells.
        children.kill(b).await;
        assert_eq!(next_event(&mut observer).await, LeaderEvent::Vacant);
        assert_eq!(election.leader().await.unwrap(), None);

        // A third, in another process again, after the death.
        let c = children.spawn("candidate:10.0.0.9:8080", dir.path(), name);
        let term_c = children.acquired(1).await[0].1;
        assert!(term_c > term_b);
        expect_elected(&mut observer, "10.0.0.9:8080", term_c).await;
        children.release(c).await;
        assert_eq!(next_event(&mut observer).await, LeaderEvent::Vacant);
        let journal = std::fs::read_to_string(provider.lock_files(name).unwrap().election).unwrap();
        let changes: Vec<&str> = journal.lines().skip(1).filter_map(|line| line.split(' ').nth(1)).collect();
        assert_eq!(changes, ["elected", "vacant", "elected", "vacant", "elected", "vacant"], "{journal}");
    });
}
