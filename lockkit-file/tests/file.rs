//! Behaviours of the file backend beyond the common contract: what is left on disk, what
//! `inspect` reports, wake-ups shared by the providers of one process.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use lockkit_file::{FileLockProvider, MARKER_FILE};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn inspect_names_the_holder_and_a_released_lock_reads_idle() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let provider = FileLockProvider::open(dir.path()).unwrap();
        let guard = provider.lock("jobs/nightly").unwrap().acquire().await.unwrap();
        let info = provider.inspect("jobs/nightly").await.unwrap();
        let holder = info.holder().expect("a holder");
        assert_eq!(holder.token, guard.token());
        assert!(holder.owner.contains(&format!("pid {}", std::process::id())), "{}", holder.owner);
        assert!(holder.since.is_some());
        assert_eq!(info.waiters, None);
        guard.release().await.unwrap();
        assert!(provider.inspect("jobs/nightly").await.unwrap().is_idle());
        assert!(provider.inspect("never/used").await.unwrap().is_idle());
    });
}

#[test]
fn a_dropped_guard_leaves_an_idle_file_and_tokens_continue_from_it() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let first = FileLockProvider::open(dir.path()).unwrap();
        let token = first.lock("a").unwrap().acquire().await.unwrap().token();
        let path = first.lock_path("a").unwrap();
        assert!(path.is_file());
        drop(first);
        // A provider opened later (a restarted process) continues from the file.
        let second = FileLockProvider::open(dir.path()).unwrap();
        let handle = second.lock("a").unwrap();
        let again = handle.try_acquire().await.unwrap().expect("free");
        assert_eq!(again.token().get(), token.get() + 1);
        drop(again);
        let mut names: Vec<_> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, vec!["a.lock".to_owned(), MARKER_FILE.to_owned()]);
    });
}

#[test]
fn a_release_wakes_waiters_of_every_provider_of_the_process_at_once() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        let holder = FileLockProvider::open(dir.path()).unwrap();
        // The waiter polls only every 20 s: only a notification can wake it in time.
        let slow = Duration::from_secs(20);
        let waiter = FileLockProvider::builder().dir(&link).poll_min(slow).poll_max(slow).build().unwrap();
        let guard = holder.lock("w").unwrap().acquire().await.unwrap();
        let lock = waiter.lock("w").unwrap();
        let waiting = tokio::spawn(async move { lock.acquire().await.map(|g| (Instant::now(), g.token())) });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released_at = Instant::now();
        let token = guard.token();
        guard.release().await.unwrap();
        let (acquired_at, next) =
            tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap().unwrap();
        assert!(next > token);
        assert!(acquired_at - released_at < Duration::from_secs(2), "woke after {:?}", acquired_at - released_at);
    });
}
