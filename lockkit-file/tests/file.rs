//! Behaviours of the file backend beyond the common contract: what is left on disk, what
//! `inspect` reports, wake-ups shared by the providers of one process, tokens from the fence,
//! the downgrade's gate, semaphores and conflicts between kinds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use lockkit_core::{Error, HoldKind, LossReason};
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
        assert_eq!(names, vec!["a.fence".to_owned(), "a.lock".to_owned(), MARKER_FILE.to_owned()]);
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
        // Well before the 20 s poll, so a notification woke it; not a tighter bound, as the
        // grant waits for one fsync, which a loaded disk can stall for seconds.
        let bound = slow / 2;
        let (acquired_at, next) = tokio::time::timeout(bound, waiting).await.unwrap().unwrap().unwrap();
        assert!(next > token);
        assert!(acquired_at - released_at < bound, "woke after {:?}", acquired_at - released_at);
    });
}

/// The names of the entries of `dir`, sorted.
fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<_> = match std::fs::read_dir(dir) {
        Ok(entries) => entries.map(|e| e.unwrap().file_name().into_string().unwrap()).collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

#[test]
fn tokens_of_every_kind_come_from_one_fence_and_survive_a_restart() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let provider = FileLockProvider::open(dir.path()).unwrap();
        let rw = provider.rw_lock("t").unwrap();
        let mut tokens = Vec::new();
        let write = rw.write().await.unwrap();
        tokens.push(write.token().get());
        write.release().await.unwrap();
        let (r1, r2) = (rw.read().await.unwrap(), rw.read().await.unwrap());
        tokens.extend([r1.token().get(), r2.token().get()]);
        drop((r1, r2));
        let mutex = provider.lock("t").unwrap().acquire().await.unwrap();
        tokens.push(mutex.token().get());
        mutex.release().await.unwrap();
        // A provider opened later (a restarted process) continues from the fence.
        drop((rw, provider));
        let again = FileLockProvider::open(dir.path()).unwrap();
        let write = again.rw_lock("t").unwrap().write().await.unwrap();
        tokens.push(write.token().get());
        write.release().await.unwrap();
        assert!(tokens.windows(2).all(|w| w[1] == w[0] + 1), "one counter for every kind: {tokens:?}");
        // Deleting the lock file does not reset the counter: the fence keeps it.
        let files = again.lock_files("t").unwrap();
        std::fs::remove_file(&files.lock).unwrap();
        let next = again.lock("t").unwrap().acquire().await.unwrap();
        assert_eq!(next.token().get(), tokens[tokens.len() - 1] + 1);
        // A semaphore's permits draw from their own name's fence in the same way.
        let sem = again.semaphore("s", 2).unwrap();
        let (p1, p2) = (sem.acquire().await.unwrap(), sem.acquire().await.unwrap());
        assert_eq!(p2.token().get(), p1.token().get() + 1);
    });
}

#[test]
fn inspect_reports_readers_and_permits_and_sees_through_dead_ones() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let provider = FileLockProvider::open(dir.path()).unwrap();
        let doomed = FileLockProvider::open(dir.path()).unwrap();
        let (r1, r2) = (provider.rw_lock("r").unwrap().read().await.unwrap(), {
            provider.rw_lock("r").unwrap().read().await.unwrap()
        });
        let dead = doomed.rw_lock("r").unwrap().read().await.unwrap();
        let info = provider.inspect("r").await.unwrap();
        assert_eq!(info.holders.len(), 3, "{info:?}");
        assert!(info.holders.iter().all(|h| h.kind == HoldKind::Read), "{info:?}");
        let mut seen: Vec<_> = info.holders.iter().map(|h| h.token).collect();
        seen.sort();
        assert_eq!(seen, vec![r1.token(), r2.token(), dead.token()]);
        assert!(info.holders.iter().all(|h| h.owner.contains(&format!("pid {}", std::process::id()))));
        // A reader that dies is not reported, and its record file is removed.
        doomed.kill();
        let files = provider.lock_files("r").unwrap();
        assert_eq!(entries(&files.readers).len(), 3);
        let info = provider.inspect("r").await.unwrap();
        assert_eq!(info.holders.len(), 2, "{info:?}");
        assert_eq!(entries(&files.readers).len(), 2, "the dead reader's record is removed");
        drop(dead);
        drop((r1, r2));
        tokio::time::timeout(Duration::from_secs(5), async {
            while !provider.inspect("r").await.unwrap().is_idle() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
        assert_eq!(entries(&files.readers), Vec::<String>::new());
        // Permits, with the semaphore's count.
        let sem = provider.semaphore("s", 3).unwrap();
        let permits = [sem.acquire().await.unwrap(), sem.acquire().await.unwrap()];
        let info = provider.inspect("s").await.unwrap();
        let three = HoldKind::Permit { permits: std::num::NonZeroU32::new(3).unwrap() };
        assert_eq!(info.holders.len(), 2);
        assert!(info.holders.iter().all(|h| h.kind == three), "{info:?}");
        drop(permits);
        // A writer is reported as one, a mutex as exclusive.
        let write = provider.rw_lock("w").unwrap().write().await.unwrap();
        let info = provider.inspect("w").await.unwrap();
        assert_eq!(info.holder().map(|h| (h.token, h.kind.clone())), Some((write.token(), HoldKind::Write)));
        drop(write);
        // Inspecting a name never used creates nothing.
        assert!(provider.inspect("never/used").await.unwrap().is_idle());
        assert!(!entries(dir.path()).iter().any(|name| name.starts_with("never")));
    });
}

#[test]
fn inspect_never_makes_a_writers_try_fail() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        // A dead writer's record names a holder, so every inspect probes the lock file's flock.
        let doomed = FileLockProvider::open(dir.path()).unwrap();
        let _dead = doomed.rw_lock("p").unwrap().write().await.unwrap();
        doomed.kill();
        let watcher = FileLockProvider::open(dir.path()).unwrap();
        let writer = FileLockProvider::open(dir.path()).unwrap().rw_lock("p").unwrap();
        for round in 0..300 {
            let (info, write) = tokio::join!(watcher.inspect("p"), writer.try_write());
            let write = write.unwrap().unwrap_or_else(|| panic!("round {round}: a try on a free lock failed"));
            assert!(info.unwrap().holders.len() <= 1);
            write.release().await.unwrap();
        }
    });
}

#[test]
fn a_downgrade_keeps_its_place_even_when_the_kernel_converts_in_two_steps() {
    // flock(2) allows the conversion from LOCK_EX to LOCK_SH to drop the lock and take it
    // again; the `split_downgrades` hook makes every downgrade do that, with a pause. With the
    // gate, a writer that polls every millisecond meanwhile does not get in; without it (the
    // second run, which shows that the pause is a real window), it does.
    runtime().block_on(async {
        for gate in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let holder = FileLockProvider::open(dir.path()).unwrap();
            let pause = Duration::from_millis(300);
            holder.split_downgrades(Some((pause, gate)));
            let fast = Duration::from_millis(1);
            let other = FileLockProvider::builder().dir(dir.path()).poll_min(fast).poll_max(fast).build().unwrap();
            let write = holder.rw_lock("d").unwrap().write().await.unwrap();
            let token = write.token();
            let read = write.read().unwrap();
            let writer = other.rw_lock("d").unwrap();
            assert!(writer.try_write().await.unwrap().is_none());
            let mut waiting = tokio::spawn(async move { writer.write().await.map(|g| (g.token(), g)) });
            // The last write guard goes while a read of its hold lives: the core downgrades.
            write.release().await.unwrap();
            if gate {
                // Another reader gets in once the downgrade is done (it waits for the gate).
                let reader = other.rw_lock("d").unwrap();
                let join = tokio::time::timeout(Duration::from_secs(5), async {
                    loop {
                        if let Some(guard) = reader.try_read().await.unwrap() {
                            return guard;
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                });
                let joined = tokio::select! {
                    joined = join => joined.expect("a reader joins the downgraded hold"),
                    got = &mut waiting => panic!("the waiting writer slipped in during the conversion: {got:?}"),
                };
                assert!(read.is_held() && read.token() == token, "the read keeps the hold and its token");
                drop(joined);
                assert!(!waiting.is_finished(), "the writer waits for the downgraded read");
                let released_at = Instant::now();
                read.release().await.unwrap();
                let (next, _guard) =
                    tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap().unwrap();
                assert!(next > token);
                assert!(released_at.elapsed() < Duration::from_secs(2));
            } else {
                let (next, _guard) = tokio::time::timeout(pause * 10, waiting)
                    .await
                    .expect("without the gate, the writer gets in during the conversion")
                    .unwrap()
                    .unwrap();
                assert!(next > token);
                // The read hold was lost in the conversion, and says so.
                let reason = tokio::time::timeout(Duration::from_secs(5), read.lost()).await.unwrap();
                assert_eq!(reason, LossReason::OwnedByAnother);
                assert!(matches!(read.release().await, Err(Error::LockLost { .. })));
            }
        }
    });
}

#[test]
fn semaphores_refuse_another_count_and_other_kinds_while_in_use() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let provider = FileLockProvider::open(dir.path()).unwrap();
        let conflict = |outcome: lockkit_core::Result<Option<lockkit_core::LockGuard>>, what: &str| match outcome {
            Err(error @ Error::Conflict { .. }) => error.to_string(),
            other => panic!("{what}: expected Conflict, got {other:?}"),
        };
        let two = provider.semaphore("s", 2).unwrap();
        let permit = two.acquire().await.unwrap();
        let message = conflict(provider.semaphore("s", 3).unwrap().try_acquire().await, "another count");
        assert!(message.contains("2 permits") && message.contains("asks for 3"), "{message}");
        let message = conflict(provider.lock("s").unwrap().try_acquire().await, "a mutex of a semaphore's name");
        assert!(message.contains("semaphore of 2 permits"), "{message}");
        conflict(provider.rw_lock("s").unwrap().try_read().await, "a reader of a semaphore's name");
        conflict(provider.rw_lock("s").unwrap().try_write().await, "a writer of a semaphore's name");
        // A waiting acquisition gets the conflict at once too.
        let started = Instant::now();
        conflict(provider.rw_lock("s").unwrap().read_timeout(Duration::from_secs(10)).await.map(Some), "a wait");
        assert!(started.elapsed() < Duration::from_secs(2));
        // The conflicts left nothing: the lock side is free once the semaphore is.
        drop(permit);
        tokio::time::timeout(Duration::from_secs(5), async {
            while !provider.inspect("s").await.unwrap().is_idle() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
        // Once no permit is held, another count is the semaphore's count.
        let three = provider.semaphore("s", 3).unwrap();
        let held = [three.acquire().await.unwrap(), three.acquire().await.unwrap(), three.acquire().await.unwrap()];
        assert!(three.try_acquire().await.unwrap().is_none());
        conflict(two.try_acquire().await, "the old count");
        drop(held);
        // A name held as a lock refuses a semaphore, for mutexes, writers and readers.
        let mutex = provider.lock("l").unwrap().acquire().await.unwrap();
        let message = conflict(provider.semaphore("l", 2).unwrap().try_acquire().await, "held by a mutex");
        assert!(message.contains("mutex"), "{message}");
        drop(mutex);
        let rw = provider.rw_lock("l").unwrap();
        let write = rw.write().await.unwrap();
        let message = conflict(provider.semaphore("l", 2).unwrap().try_acquire().await, "held by a writer");
        assert!(message.contains("writer"), "{message}");
        let read = write.read().unwrap();
        write.release().await.unwrap();
        let reader = rw.read().await.unwrap();
        let message = conflict(provider.semaphore("l", 2).unwrap().try_acquire().await, "held by readers");
        assert!(message.contains("readers"), "{message}");
        drop((read, reader));
    });
}

#[test]
fn a_semaphore_of_a_million_permits_keeps_one_file_per_holder() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let provider = FileLockProvider::open(dir.path()).unwrap();
        let sem = provider.semaphore("big", lockkit_core::MAX_PERMITS).unwrap();
        let started = Instant::now();
        let mut held = Vec::new();
        for _ in 0..50 {
            held.push(sem.try_acquire().await.unwrap().expect("a free permit"));
        }
        assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
        let files = provider.lock_files("big").unwrap();
        assert_eq!(entries(&files.permits).len(), 50);
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), async {
            while !entries(&files.permits).is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("every permit's record file goes with its holder");
        // What stays: the fence (with the count) and the empty permits directory.
        assert_eq!(entries(dir.path()), vec!["big.fence", "big.permits", MARKER_FILE]);
    });
}

#[test]
fn a_permit_comes_back_when_its_holder_dies() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let doomed = FileLockProvider::open(dir.path()).unwrap();
        let other = FileLockProvider::open(dir.path()).unwrap();
        let permit = doomed.semaphore("s", 1).unwrap().acquire().await.unwrap();
        let sem = other.semaphore("s", 1).unwrap();
        assert!(sem.try_acquire().await.unwrap().is_none());
        doomed.kill();
        let next = sem.try_acquire().await.unwrap().expect("the dead holder's permit is free at once");
        assert!(next.token() > permit.token());
        let lost = tokio::time::timeout(Duration::from_secs(5), permit.lost()).await.unwrap();
        assert_eq!(lost, LossReason::ClientClosed);
    });
}

#[test]
fn a_mutex_is_a_writer_of_the_read_write_lock_of_its_name() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (FileLockProvider::open(dir.path()).unwrap(), FileLockProvider::open(dir.path()).unwrap());
        let (mutex, rw) = (b.lock("m").unwrap(), b.rw_lock("m").unwrap());
        let held = a.lock("m").unwrap().acquire().await.unwrap();
        assert!(rw.try_read().await.unwrap().is_none(), "a mutex excludes readers");
        assert!(rw.try_write().await.unwrap().is_none(), "a mutex excludes writers");
        drop(held);
        let write = a.rw_lock("m").unwrap().write().await.unwrap();
        assert!(mutex.try_acquire().await.unwrap().is_none(), "a writer excludes the mutex");
        let read = write.read().unwrap();
        write.release().await.unwrap();
        // Downgraded to a read: still excludes the mutex, whatever moment it tries.
        for _ in 0..20 {
            assert!(mutex.try_acquire().await.unwrap().is_none(), "a reader excludes the mutex");
        }
        let reader = rw.read().await.unwrap();
        drop(read);
        assert!(mutex.try_acquire().await.unwrap().is_none(), "another reader still excludes the mutex");
        let waiting = tokio::spawn(async move { mutex.acquire().await.map(|g| g.token()) });
        let token = reader.token();
        reader.release().await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap().unwrap();
        assert!(next > token);
    });
}
