//! The fence cases themselves.

use std::sync::Arc;

use lockkit_core::memory::MemoryLockProvider;
use lockkit_fence::{FenceError, FenceSink, MAX_RESOURCE_LEN};

use super::{Ctx, FenceHarness};

/// Contract 29: a write whose token is below the highest accepted is refused with `Stale`
/// naming both tokens, and changes nothing; a greater token and the same token again are
/// accepted (a holder writes as often as it needs).
pub async fn stale_writes_are_refused_and_change_nothing(h: &dyn FenceHarness) {
    let cx = Ctx::new(h, "stale_writes_are_refused_and_change_nothing");
    let sink = cx.sink().await;
    let lock = cx.lock("a");
    cx.written(&*sink, &Ctx::write_fence(&lock, 10), "ten", "the first write (token 10)").await;
    cx.written(&*sink, &Ctx::write_fence(&lock, 12), "twelve", "a newer holder's write (token 12)").await;
    let stale = sink.write(&cx.resource, &Ctx::write_fence(&lock, 11), b"eleven").await;
    cx.stale(stale, 11, 12, "a paused holder's write (token 11) is refused");
    let seen = cx.read(&*sink, &Ctx::write_fence(&lock, 12), "read after the refusal").await;
    cx.check(seen.as_deref() == Some("twelve"), &format!("the refused write changed nothing (read {seen:?})"));
    cx.written(&*sink, &Ctx::write_fence(&lock, 12), "twelve again", "the same token writes again").await;
    let state = cx.state(&*sink, "the state after the writes").await;
    cx.check(
        state.as_ref().is_some_and(|s| s.highest.get() == 12 && s.lock == lock.to_string()),
        &format!("the highest is 12 and the resource is bound to the lock, not {state:?}"),
    );
}

/// Contract 29: the check and the write are one step of the store. Eight clients write
/// tokens 1 to 64 at once, each its own in increasing order: at the end the highest is 64 and
/// the value is the one written with 64 (a write whose check passed before a greater token
/// landed, and that was applied after it, would leave another value), and every refusal named
/// a highest above its token.
pub async fn the_check_and_the_write_are_one_step(h: &dyn FenceHarness) {
    let cx = Ctx::new(h, "the_check_and_the_write_are_one_step");
    let lock = cx.lock("a");
    let mut writers = Vec::new();
    for writer in 0..8u64 {
        let sink = cx.sink().await;
        let (resource, lock) = (cx.resource.clone(), lock.clone());
        writers.push(tokio::spawn(async move {
            let mut refusals = Vec::new();
            for token in (1..=64u64).filter(|token| token % 8 == writer) {
                let fence = Ctx::write_fence(&lock, token);
                match sink.write(&resource, &fence, token.to_string().as_bytes()).await {
                    Ok(()) => {}
                    Err(FenceError::Stale { token, highest, .. }) => refusals.push((token.get(), highest.get())),
                    Err(other) => return Err(format!("token {token}: {other}")),
                }
            }
            Ok(refusals)
        }));
    }
    for writer in writers {
        match writer.await {
            Ok(Ok(refusals)) => {
                for (token, highest) in refusals {
                    cx.check(
                        highest > token,
                        &format!("the refusal of token {token} named a greater highest, not {highest}"),
                    );
                }
            }
            Ok(Err(error)) => cx.fail("a writer's write failed", error),
            Err(error) => cx.fail("a writer panicked", error.to_string()),
        }
    }
    let sink = cx.sink().await;
    let state = cx.state(&*sink, "the state after the writers").await;
    cx.check(state.as_ref().is_some_and(|s| s.highest.get() == 64), &format!("the highest is 64, not {state:?}"));
    let value = cx.read(&*sink, &Ctx::write_fence(&lock, 64), "read the value").await;
    cx.check(value.as_deref() == Some("64"), &format!("the value is token 64's, not {value:?}"));
}

/// Contract 29, end to end: the guard of a holder whose hold ended (its lease ran out while
/// it was paused, say) still has its fence; after the next holder wrote, the sink refuses the
/// old holder's write. The fences come from guards of the memory backend
/// ([`LockGuard::fence`](lockkit_core::LockGuard::fence)).
pub async fn a_stale_holder_of_a_real_lock_is_refused(h: &dyn FenceHarness) {
    let cx = Ctx::new(h, "a_stale_holder_of_a_real_lock_is_refused");
    let sink = cx.sink().await;
    let provider = MemoryLockProvider::new();
    let lock = match provider.lock(&cx.resource) {
        Ok(lock) => lock,
        Err(error) => cx.fail("make the lock", error.to_string()),
    };
    let Ok(old) = lock.acquire().await else { cx.fail("the first holder acquires", "refused") };
    let old_fence = old.fence();
    cx.written(&*sink, &old_fence, "old", "the first holder writes while it holds").await;
    drop(old);
    let Ok(new) = lock.acquire().await else { cx.fail("the next holder acquires", "refused") };
    cx.check(new.token() > old_fence.token(), "the next holder's token is greater");
    cx.written(&*sink, &new.fence(), "new", "the next holder writes").await;
    let late = sink.write(&cx.resource, &old_fence, b"late").await;
    cx.stale(late, old_fence.token().get(), new.token().get(), "the old holder's late write is refused");
    let seen = cx.read(&*sink, &new.fence(), "read").await;
    cx.check(seen.as_deref() == Some("new"), &format!("the next holder's write stands, not {seen:?}"));
}

/// Contract 30 (and 21): a read is compared with the highest write token only: readers with
/// tokens above it are admitted in any order (12, then 11), a read below it is refused with
/// `Stale`. A resource never written reads as nothing, and a read does not bind it.
pub async fn readers_are_refused_only_below_the_highest_write(h: &dyn FenceHarness) {
    let cx = Ctx::new(h, "readers_are_refused_only_below_the_highest_write");
    let sink = cx.sink().await;
    let lock = cx.lock("a");
    let empty = cx.read(&*sink, &Ctx::read_fence(&lock, 3), "a read before any write").await;
    cx.check(empty.is_none(), &format!("a resource never written reads as nothing, not {empty:?}"));
    cx.check(cx.state(&*sink, "the state after a read").await.is_none(), "a read binds nothing");
    cx.written(&*sink, &Ctx::write_fence(&lock, 10), "ten", "a write (token 10)").await;
    for token in [12, 11, 10] {
        let seen = cx.read(&*sink, &Ctx::read_fence(&lock, token), &format!("a reader with token {token}")).await;
        cx.check(seen.as_deref() == Some("ten"), &format!("reader {token} reads the write, not {seen:?}"));
    }
    let stale = sink.read(&cx.resource, &Ctx::read_fence(&lock, 9)).await;
    cx.stale(stale, 9, 10, "a reader granted before the write (token 9) is refused");
}

/// Contract 30: a read never raises the highest token. After reads with tokens far above the
/// last write, the highest is still the write's, and a writer with a token between them is
/// accepted.
pub async fn a_read_never_raises_the_highest_token(h: &dyn FenceHarness) {
    let cx = Ctx::new(h, "a_read_never_raises_the_highest_token");
    let sink = cx.sink().await;
    let lock = cx.lock("a");
    cx.written(&*sink, &Ctx::write_fence(&lock, 10), "ten", "a write (token 10)").await;
    cx.read(&*sink, &Ctx::read_fence(&lock, 50), "a reader with token 50").await;
    cx.read(&*sink, &Ctx::write_fence(&lock, 40), "a writer reading with token 40").await;
    let state = cx.state(&*sink, "the state after the reads").await;
    cx.check(state.as_ref().is_some_and(|s| s.highest.get() == 10), &format!("the highest is still 10, not {state:?}"));
    cx.written(&*sink, &Ctx::write_fence(&lock, 20), "twenty", "a writer with token 20 after the reads").await;
    let seen = cx.read(&*sink, &Ctx::read_fence(&lock, 20), "read").await;
    cx.check(seen.as_deref() == Some("twenty"), &format!("the write with token 20 landed, not {seen:?}"));
}

/// Contract 31: the first accepted write binds the resource to its lock; a write or read with
/// a token of another lock (another name, or the same name on another store) is refused with
/// `ForeignLock` naming both, whatever its number, and changes nothing.
pub async fn a_token_of_another_lock_is_refused(h: &dyn FenceHarness) {
    let cx = Ctx::new(h, "a_token_of_another_lock_is_refused");
    let sink = cx.sink().await;
    let (lock, other_name, other_store) = (cx.lock("a"), cx.lock("b"), cx.lock_on("fence-cases://other", "a"));
    cx.written(&*sink, &Ctx::write_fence(&lock, 10), "ten", "the first write binds the resource").await;
    for (what, other) in [("another name", &other_name), ("the same name on another store", &other_store)] {
        match sink.write(&cx.resource, &Ctx::write_fence(other, 1_000), b"foreign").await {
            Err(FenceError::ForeignLock { expected, got, .. }) => {
                cx.check(expected == lock.to_string(), &format!("the error names the bound lock, not {expected}"));
                cx.check(&got == other, &format!("the error names the write's lock, not {got}"));
            }
            refused => cx.fail(&format!("a write under {what}"), format!("expected ForeignLock, got {refused:?}")),
        }
        let read = sink.read(&cx.resource, &Ctx::read_fence(other, 1_000)).await;
        cx.check(matches!(read, Err(FenceError::ForeignLock { .. })), &format!("a read under {what}: {read:?}"));
    }
    let seen = cx.read(&*sink, &Ctx::write_fence(&lock, 10), "read under the bound lock").await;
    cx.check(seen.as_deref() == Some("ten"), &format!("the foreign writes changed nothing, not {seen:?}"));
    let state = cx.state(&*sink, "the state").await;
    cx.check(
        state.as_ref().is_some_and(|s| s.lock == lock.to_string() && s.highest.get() == 10),
        &format!("still bound to the lock with highest 10, not {state:?}"),
    );
}

/// Contract 32: the highest token and the binding survive a restart of the store (which
/// keeps its data), with no clock involved: after the restart a lower token is still refused,
/// the value is still there, a greater token writes.
pub async fn the_highest_token_survives_a_store_restart(h: &dyn FenceHarness) {
    let case = "the_highest_token_survives_a_store_restart";
    let unchecked = |why: &str| {
        if crate::cases::strict() {
            panic!(
                "[{} / {case}] not checked: {why}; {} is set (add the hook, or declare the case in fence_conformance!(…, without: […]))",
                h.name(),
                crate::cases::STRICT_ENV
            );
        }
        eprintln!("[{} / {case}] NOT CHECKED: {why}", h.name());
    };
    let Ok(isolated) = h.isolated().await else {
        return unchecked("the harness has no `isolated` store to restart");
    };
    let h = &*isolated;
    let cx = Ctx::new(h, "the_highest_token_survives_a_store_restart");
    let sink = cx.sink().await;
    let lock = cx.lock("a");
    cx.written(&*sink, &Ctx::write_fence(&lock, 10), "ten", "a write before the restart").await;
    drop(sink);
    if h.restart_store().await.is_err() {
        return unchecked("the harness has no `restart_store` hook");
    }
    let sink = cx.sink().await;
    let stale = sink.write(&cx.resource, &Ctx::write_fence(&lock, 9), b"nine").await;
    cx.stale(stale, 9, 10, "a lower token after the restart is refused");
    let seen = cx.read(&*sink, &Ctx::write_fence(&lock, 10), "read after the restart").await;
    cx.check(seen.as_deref() == Some("ten"), &format!("the value survived, not {seen:?}"));
    let foreign = sink.write(&cx.resource, &Ctx::write_fence(&cx.lock("b"), 99), b"foreign").await;
    cx.check(matches!(foreign, Err(FenceError::ForeignLock { .. })), &format!("the binding survived: {foreign:?}"));
    cx.written(&*sink, &Ctx::write_fence(&lock, 11), "eleven", "a greater token after the restart").await;
}

/// Bad input is refused with `InvalidInput` saying what to change, and writes nothing: an
/// empty resource name, one over the limit, and a read fence given to a write.
pub async fn bad_input_is_refused_and_writes_nothing(h: &dyn FenceHarness) {
    let cx = Ctx::new(h, "bad_input_is_refused_and_writes_nothing");
    let sink: Arc<dyn FenceSink> = cx.sink().await;
    let lock = cx.lock("a");
    let fence = Ctx::write_fence(&lock, 10);
    let oversized = format!("{}/{}", cx.resource, "x".repeat(MAX_RESOURCE_LEN));
    for (what, resource) in [("an empty name", ""), ("a name over the limit", oversized.as_str())] {
        match sink.write(resource, &fence, b"bad").await {
            Err(FenceError::InvalidInput { message }) => {
                cx.check(message.len() > 20, &format!("{what}: the message says what to change: {message:?}"));
            }
            other => cx.fail(&format!("write under {what}"), format!("expected InvalidInput, got {other:?}")),
        }
        let read = sink.read(resource, &fence).await;
        cx.check(matches!(read, Err(FenceError::InvalidInput { .. })), &format!("a read under {what}: {read:?}"));
    }
    let by_reader = sink.write(&cx.resource, &Ctx::read_fence(&lock, 10), b"from a reader").await;
    cx.check(
        matches!(by_reader, Err(FenceError::InvalidInput { .. })),
        &format!("a read fence writing: {by_reader:?}"),
    );
    cx.check(cx.state(&*sink, "the state").await.is_none(), "nothing was written or bound");
    let seen = cx.read(&*sink, &fence, "read").await;
    cx.check(seen.is_none(), &format!("the resource has no value, not {seen:?}"));
}
