//! Contract 20-22 and 24: read-write locks. The mutex cases also run on the write side
//! (`write_lock::…`); these are the behaviours of the two modes together.

use std::time::{Duration, Instant};

use lockkit_core::{Error, HoldKind, RwLock};

use super::Ctx;
use crate::harness::{Harness, TestClient};

impl Ctx<'_> {
    /// The read-write lock of this case on `client`.
    #[track_caller]
    fn rw(&self, client: &TestClient) -> RwLock {
        self.ok(client.provider.rw_lock(&self.name), "make a read-write lock")
    }
}

/// Contract 20: readers share the lock: readers on three clients hold it at once, each
/// with its own token, and a writer cannot get in meanwhile.
pub async fn readers_share_the_lock(h: &dyn Harness) {
    let cx = Ctx::new(h, "readers_share_the_lock");
    let Some(clients) = cx.clients_declaring::<3>("rw_lock", |c| c.rw_lock).await else { return };
    let mut readers = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        match cx.try_acquire(cx.rw(client).reader(), &format!("reader {i} tries")).await {
            Some(guard) => readers.push(guard),
            None => cx.fail(&format!("reader {i} tries"), "a reader was refused while only readers held the lock"),
        }
    }
    let mut tokens: Vec<u64> = readers.iter().map(|g| g.token().get()).collect();
    tokens.sort_unstable();
    tokens.dedup();
    cx.check(tokens.len() == readers.len(), "every read grant has a token of its own");
    cx.check(readers.iter().all(|g| *g.kind() == HoldKind::Read), "the guards are read guards");
    let writer = cx.try_acquire(cx.rw(&clients[0]).writer(), "a writer tries").await;
    cx.check(writer.is_none(), "a writer is refused while readers hold the lock");
    for guard in readers {
        cx.release(guard, "a reader releases").await;
    }
    let writer = cx.try_acquire(cx.rw(&clients[1]).writer(), "a writer tries after the readers").await;
    cx.check(writer.is_some(), "a writer gets the lock once the readers are gone");
}

/// Contract 20: a writer excludes readers and other writers, and a reader or a writer gets
/// the lock once it is gone.
pub async fn a_writer_excludes_readers_and_writers(h: &dyn Harness) {
    let cx = Ctx::new(h, "a_writer_excludes_readers_and_writers");
    let Some([a, b]) = cx.clients_declaring("rw_lock", |c| c.rw_lock).await else { return };
    let write = cx.acquire(cx.rw(&a).writer(), "the writer acquires").await;
    cx.check(*write.kind() == HoldKind::Write, "the guard is a write guard");
    cx.check(cx.try_acquire(cx.rw(&b).reader(), "a reader tries").await.is_none(), "a reader is refused");
    cx.check(cx.try_acquire(cx.rw(&b).writer(), "a writer tries").await.is_none(), "another writer is refused");
    let outcome = cx.rw(&b).read_timeout(Duration::from_millis(100)).await;
    cx.check(matches!(outcome, Err(Error::Timeout { .. })), "a timed read waits and times out");
    cx.release(write, "the writer releases").await;
    let read = cx.try_acquire(cx.rw(&b).reader(), "a reader tries after the writer").await;
    cx.check(read.is_some(), "a reader gets the lock once the writer is gone");
}

/// Contract 20: a writer waiting in the queue is not overtaken by readers that arrive after
/// it: with a reader holding and a writer queued, a later reader waits, and the writer gets
/// the lock before it.
pub async fn a_queued_writer_is_not_overtaken_by_later_readers(h: &dyn Harness) {
    let cx = Ctx::new(h, "a_queued_writer_is_not_overtaken_by_later_readers");
    let Some([a, b, c]) = cx.clients_declaring("rw_lock", |c| c.rw_lock).await else { return };
    if !a.provider.capabilities().fair {
        return cx.not_applicable("the backend does not declare `fair`: a waiting writer may be overtaken");
    }
    let first = cx.acquire(cx.rw(&a).reader(), "the first reader acquires").await;
    let writer = cx.rw(&b);
    let waiting_writer =
        tokio::spawn(async move { writer.write().await.map(|guard| (Instant::now(), guard.token(), guard)) });
    if !cx.await_waiters(&a, 1).await {
        return cx.unchecked("the backend cannot count waiters, so the writer is not known to be queued");
    }
    cx.check(cx.try_acquire(cx.rw(&c).reader(), "a later reader tries").await.is_none(), "a later reader waits");
    let reader = cx.rw(&c);
    let late_reader = tokio::spawn(async move { reader.read().await.map(|guard| (Instant::now(), guard)) });
    cx.await_waiters(&a, 2).await;
    cx.release(first, "the first reader releases").await;
    let bound = h.timing().wake + h.timing().operation;
    let (written_at, write_token, write_guard) = cx.ok(
        cx.within(bound, "the queued writer acquires", waiting_writer).await.unwrap_or_else(|e| cx.fail("join", e)),
        "the writer",
    );
    cx.check(!late_reader.is_finished(), "the later reader still waits while the writer holds");
    drop(write_guard);
    let (read_at, read_guard) = cx.ok(
        cx.within(bound, "the later reader acquires", late_reader).await.unwrap_or_else(|e| cx.fail("join", e)),
        "the reader",
    );
    cx.check(read_at >= written_at, "the writer was granted before the reader that came after it");
    cx.check(read_guard.token() > write_token, "the reader's token is above the writer's");
}

/// Contract 21: every grant of a read-write lock, read or write, carries a token greater
/// than every token issued before it for the name.
pub async fn every_grant_carries_a_greater_token(h: &dyn Harness) {
    let cx = Ctx::new(h, "every_grant_carries_a_greater_token");
    let Some([a, b]) = cx.clients_declaring("rw_lock", |c| c.rw_lock).await else { return };
    let mut last = 0;
    for round in 0..3 {
        let write = cx.acquire(cx.rw(&a).writer(), &format!("write #{round}")).await;
        cx.check(write.token().get() > last, "a write's token is above every earlier one");
        last = write.token().get();
        cx.release(write, "release the write").await;
        let r1 = cx.acquire(cx.rw(&a).reader(), &format!("read #{round} on one client")).await;
        let r2 = cx.acquire(cx.rw(&b).reader(), &format!("read #{round} on another")).await;
        cx.check(r1.token().get() > last && r2.token().get() > last, "reads' tokens are above the last write's");
        cx.check(r1.token() != r2.token(), "two reads have tokens of their own");
        last = r1.token().get().max(r2.token().get());
        cx.release(r1, "release a read").await;
        cx.release(r2, "release the other read").await;
    }
}

/// Contract 22: a read from a write guard is granted at once, is part of the same hold
/// (same token), and keeps other owners out like the write.
pub async fn a_read_from_a_write_guard_is_the_same_hold(h: &dyn Harness) {
    let cx = Ctx::new(h, "a_read_from_a_write_guard_is_the_same_hold");
    let Some([a, b]) = cx.clients_declaring("rw_lock", |c| c.rw_lock).await else { return };
    let write = cx.acquire(cx.rw(&a).writer(), "write").await;
    let read = cx.ok(write.read(), "read from the write guard");
    cx.check(read.token() == write.token(), "the read carries the write's token");
    cx.check(*read.kind() == HoldKind::Read && read.is_held(), "a held read guard");
    let again = cx.ok(read.read(), "read from the read guard");
    cx.check(again.token() == write.token(), "a read from the read carries the same token");
    cx.check(cx.try_acquire(cx.rw(&b).reader(), "another reader tries").await.is_none(), "other readers wait");
    drop(again);
    cx.release(read, "release the read").await;
    cx.release(write, "release the write").await;
    cx.assert_free(&b, "the lock is free after the last guard").await;
}

/// Contract 22: a read guard refuses to become a write guard at once, with `Conflict`, and
/// the read hold is left as it was.
pub async fn an_upgrade_from_a_read_guard_is_refused_at_once(h: &dyn Harness) {
    let cx = Ctx::new(h, "an_upgrade_from_a_read_guard_is_refused_at_once");
    let Some([a]) = cx.clients_declaring("rw_lock", |c| c.rw_lock).await else { return };
    let read = cx.acquire(cx.rw(&a).reader(), "read").await;
    let started = Instant::now();
    match read.write() {
        Err(error @ Error::Conflict { .. }) => {
            cx.check(error.to_string().contains("release"), &format!("{error} says what to do instead"));
        }
        other => cx.fail("upgrade the read guard", format!("expected Conflict, got {other:?}")),
    }
    cx.check(started.elapsed() < h.timing().operation, "the refusal came at once");
    cx.check(read.is_held(), "the read hold is kept");
    cx.release(read, "release the read").await;
}

/// Contract 22: when the write guard is released while reads taken from it live, the hold
/// becomes a read in place: other readers may join it, and a writer queued meanwhile does
/// not slip in before the last read goes.
pub async fn releasing_the_write_guard_under_live_reads_downgrades_in_place(h: &dyn Harness) {
    let cx = Ctx::new(h, "releasing_the_write_guard_under_live_reads_downgrades_in_place");
    let Some([a, b, c]) = cx.clients_declaring("rw_lock", |c| c.rw_lock).await else { return };
    let write = cx.acquire(cx.rw(&a).writer(), "write").await;
    let token = write.token();
    let read = cx.ok(write.read(), "read from the write guard");
    cx.release(write, "release the write guard").await;
    cx.check(read.is_held() && read.token() == token, "the read keeps the hold and its token");
    let bound = h.timing().operation;
    // The downgrade reaches the store in the background: another reader gets in once it has.
    let joined_by = Instant::now() + bound;
    let other_reader = cx.rw(&b);
    loop {
        if cx.try_acquire(other_reader.reader(), "another reader tries").await.is_some() {
            break;
        }
        if Instant::now() >= joined_by {
            cx.fail("another reader joins the downgraded hold", format!("still refused after {bound:?}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let writer = cx.rw(&c);
    let mut waiting_writer = tokio::spawn(async move { writer.write().await.map(|guard| guard.token()) });
    cx.await_waiters(&a, 1).await;
    // A window in which the writer must not be granted: it waits for the read.
    let window = h.timing().wake.min(Duration::from_millis(500));
    let early = tokio::time::timeout(window, &mut waiting_writer).await;
    cx.check(early.is_err(), &format!("the queued writer does not slip in while the read lives: {early:?}"));
    cx.check(read.is_held(), "the read is still held");
    cx.release(read, "release the last read").await;
    let got = cx.within(h.timing().wake + bound, "the writer acquires after the last read", waiting_writer).await;
    match got {
        Ok(Ok(next)) => cx.check(next > token, "the writer's token is greater"),
        other => cx.fail("the writer acquires", other),
    }
}

/// Contract 24 and 14: a reader that dies frees its share after the lease or session
/// timeout, and not before: a writer waits for it, then gets the lock.
pub async fn a_dead_readers_share_returns_after_the_lease(h: &dyn Harness) {
    let cx = Ctx::new(h, "a_dead_readers_share_returns_after_the_lease");
    let Some([a, b]) = cx.clients_declaring("rw_lock", |c| c.rw_lock).await else { return };
    let read = cx.acquire(cx.rw(&a).reader(), "the reader acquires").await;
    if !cx.applied(a.faults.kill().await, "kill") {
        return;
    }
    let killed_at = Instant::now();
    let writer = cx.rw(&b);
    match h.timing().lease {
        Some(lease) => {
            let outcome = writer.write_timeout(lease.mul_f32(0.5)).await;
            cx.check(
                matches!(outcome, Err(Error::Timeout { .. })),
                &format!("the share was free {:?} after the reader died, under half the lease", killed_at.elapsed()),
            );
            let got = cx
                .within(lease + h.timing().operation * 2, "the writer acquires after the lease", writer.write())
                .await;
            drop(cx.ok(got, "write after the lease"));
        }
        None => {
            let got = cx.within(h.timing().operation * 2, "the writer acquires", writer.write()).await;
            drop(cx.ok(got, "write after the reader died"));
        }
    }
    drop(read);
}
