//! The conformance cases: one documented `pub async fn` per behaviour of the contract,
//! grouped by topic. The [`conformance!`](crate::conformance) macro holds the one list of them.
//!
//! Every case draws fresh, uuid-based lock names, so cases run in parallel against one
//! server. Failures name the backend, the case, the lock and the step.

pub mod acquire;
pub mod break_lock;
pub mod cross_process;
pub mod election;
pub mod errors;
pub mod fencing;
pub mod loss;
pub mod max_hold;
pub mod multi;
pub mod mutual_exclusion;
pub mod reentrancy;
pub mod release;
pub mod runtime;
pub mod rw_lock;
pub mod semaphore;

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

use lockkit_core::{Capabilities, Error, FencingToken, HoldKind, LockGuard, LockHandle, LockInfo, Result};
use tokio::task::JoinHandle;

use crate::harness::{FaultResult, Harness, TestClient};

/// The context of one running case: the harness, the case name and a fresh lock name, used
/// to make every failure message say where it happened.
pub(crate) struct Ctx<'h> {
    pub(crate) h: &'h dyn Harness,
    pub(crate) case: &'static str,
    pub(crate) name: String,
    /// The kind of hold [`Ctx::lock`] acquires (see [`Harness::mutex_kind`]).
    pub(crate) kind: HoldKind,
}

impl<'h> Ctx<'h> {
    pub(crate) fn new(h: &'h dyn Harness, case: &'static str) -> Self {
        Self { h, case, name: unique_name(case), kind: h.mutex_kind() }
    }

    #[track_caller]
    pub(crate) fn fail(&self, step: &str, detail: impl Debug) -> ! {
        panic!("[{} / {}] lock {:?}: {step}: {detail:?}", self.h.name(), self.case, self.name)
    }

    /// Unwraps `result` or fails the case at `step`.
    #[track_caller]
    pub(crate) fn ok<T>(&self, result: Result<T>, step: &str) -> T {
        match result {
            Ok(value) => value,
            Err(error) => self.fail(step, format!("unexpected error: {error}")),
        }
    }

    #[track_caller]
    pub(crate) fn check(&self, condition: bool, step: &str) {
        if !condition {
            self.fail(step, "check failed");
        }
    }

    pub(crate) async fn client(&self) -> TestClient {
        match self.h.client().await {
            Ok(client) => client,
            Err(error) => self.fail("connect a client", format!("{error}")),
        }
    }

    /// `N` fresh clients, or `None` when the backend does not declare `capability` (which
    /// `declared` reads from its capabilities): the case is then reported not applicable.
    pub(crate) async fn clients_declaring<const N: usize>(
        &self,
        capability: &str,
        declared: impl FnOnce(&Capabilities) -> bool,
    ) -> Option<[TestClient; N]> {
        let mut clients = Vec::with_capacity(N);
        for _ in 0..N {
            clients.push(self.client().await);
        }
        let clients: [TestClient; N] = match clients.try_into() {
            Ok(clients) => clients,
            Err(_) => self.fail("connect the clients", "fewer clients than asked for"),
        };
        if clients.first().is_some_and(|client| !declared(&client.provider.capabilities())) {
            self.not_applicable(&format!("the backend does not declare `{capability}`"));
            return None;
        }
        Some(clients)
    }

    #[track_caller]
    pub(crate) fn lock(&self, client: &TestClient) -> LockHandle {
        self.lock_named(client, &self.name)
    }

    /// A handle on `name` for holds of the case's kind: a mutex, or the write side of a
    /// read-write lock, or a one-permit semaphore when the mutex cases run again on those.
    #[track_caller]
    pub(crate) fn lock_named(&self, client: &TestClient, name: &str) -> LockHandle {
        self.ok(client.provider.handle(name, self.kind.clone()), "make a lock handle")
    }

    /// `client`'s acquisition of the case's lock, spawned: a waiter behind the holder, which
    /// resolves to the token it was granted (its guard dropped).
    pub(crate) fn spawn_acquire(&self, client: &TestClient) -> JoinHandle<Result<FencingToken>> {
        let lock = self.lock(client);
        tokio::spawn(async move { lock.acquire().await.map(|guard| guard.token()) })
    }

    /// A hold of the case's lock by `holder`, and `waiter`'s acquisition queued behind it (the
    /// store counts it, where it can tell): the hold and the waiting task.
    pub(crate) async fn hold_with_waiter(
        &self,
        holder: &TestClient,
        waiter: &TestClient,
    ) -> (LockGuard, JoinHandle<Result<FencingToken>>) {
        let guard = self.acquire(&self.lock(holder), "holder acquires").await;
        let waiting = self.spawn_acquire(waiter);
        self.await_waiters(holder, 1).await;
        (guard, waiting)
    }

    /// The token granted to `waiting` (a task of [`spawn_acquire`](Self::spawn_acquire)),
    /// which must come within the wake bound once the lock is freed.
    pub(crate) async fn granted(&self, waiting: JoinHandle<Result<FencingToken>>, step: &str) -> FencingToken {
        match self.within(self.h.timing().wake + self.h.timing().operation, step, waiting).await {
            Ok(Ok(token)) => token,
            other => self.fail(step, other),
        }
    }

    /// The guard of `lock` once the holder that died at `died_at` no longer keeps it: with a
    /// lease, the lock stays held for half of it and frees within it; without one, the store
    /// frees it as soon as it notices the death.
    pub(crate) async fn acquire_after_death(&self, lock: &LockHandle, died_at: Instant) -> LockGuard {
        let operation = self.h.timing().operation;
        match self.h.timing().lease {
            Some(lease) => {
                let early = lease.mul_f32(0.5);
                let outcome = lock.acquire_timeout(early).await;
                let after = died_at.elapsed();
                self.check(
                    matches!(outcome, Err(Error::Timeout { .. })),
                    &format!("the lock was free {after:?} after the holder died, under half the lease {lease:?}"),
                );
                let got = self.within(lease + operation * 2, "the lock frees after the lease", lock.acquire()).await;
                self.ok(got, "acquire after the lease")
            }
            None => {
                let got = self.within(operation * 2, "the lock frees when the holder dies", lock.acquire()).await;
                self.ok(got, "acquire after the holder died")
            }
        }
    }

    /// Awaits `future`, failing the case when it takes longer than `bound`.
    pub(crate) async fn within<F: Future>(&self, bound: Duration, step: &str, future: F) -> F::Output {
        match tokio::time::timeout(bound, future).await {
            Ok(output) => output,
            Err(_) => self.fail(step, format!("did not complete within {bound:?}")),
        }
    }

    /// Acquires, failing the case on error or when it takes longer than the operation bound.
    pub(crate) async fn acquire(&self, lock: &LockHandle, step: &str) -> LockGuard {
        let bound = self.h.timing().operation;
        self.ok(self.within(bound, step, lock.acquire()).await, step)
    }

    /// `try_acquire`, failing the case on error or when it takes longer than the operation bound.
    pub(crate) async fn try_acquire(&self, lock: &LockHandle, step: &str) -> Option<LockGuard> {
        let bound = self.h.timing().operation;
        self.ok(self.within(bound, step, lock.try_acquire()).await, step)
    }

    pub(crate) async fn release(&self, guard: LockGuard, step: &str) {
        let bound = self.h.timing().operation;
        self.ok(self.within(bound, step, guard.release()).await, step);
    }

    /// Polls `condition` until it holds, failing the case after `bound`.
    pub(crate) async fn eventually<F, Fut>(&self, bound: Duration, step: &str, mut condition: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let deadline = Instant::now() + bound;
        loop {
            if condition().await {
                return;
            }
            if Instant::now() >= deadline {
                self.fail(step, format!("condition still false after {bound:?}"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until another client can take the lock at once, proving no trace was left.
    pub(crate) async fn assert_free(&self, client: &TestClient, step: &str) {
        let lock = self.lock(client);
        let bound = self.h.timing().operation;
        let mut last = None;
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if let Some(guard) = self.try_acquire(&lock, step).await {
                self.release(guard, step).await;
                return;
            }
            last = Some(self.inspect(client).await);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.fail(step, format!("the lock is still taken (inspect: {last:?})"))
    }

    /// What the backend reports about this case's lock, when it can inspect.
    pub(crate) async fn inspect(&self, client: &TestClient) -> Option<LockInfo> {
        if !client.provider.capabilities().inspect {
            return None;
        }
        Some(self.ok(client.provider.inspect(&self.name).await, "inspect the lock"))
    }

    /// Waits until `count` waiters are queued, when the backend can count them.
    pub(crate) async fn await_waiters(&self, client: &TestClient, count: usize) -> bool {
        if !client.provider.capabilities().waiter_count {
            return false;
        }
        let bound = self.h.timing().operation;
        self.eventually(bound, &format!("wait for {count} queued waiters"), || async {
            self.inspect(client).await.and_then(|info| info.waiters) == Some(count)
        })
        .await;
        true
    }

    /// Says why a case does not apply to this backend (it does not declare the capability
    /// the behaviour belongs to); the case then passes, as there is nothing to check.
    pub(crate) fn not_applicable(&self, why: &str) {
        println!("[{} / {}] not applicable: {why}", self.h.name(), self.case);
    }

    /// Says why a case cannot check a behaviour the backend promises (its harness lacks a
    /// hook). Under `LOCKKIT_CONFORMANCE_STRICT=1` that fails the case; otherwise the case
    /// passes after saying so on stderr. Declare the case in `conformance!(…, without: […])`
    /// to have it reported as ignored instead.
    #[track_caller]
    pub(crate) fn unchecked(&self, why: &str) {
        if strict() {
            self.fail(
                "check the behaviour",
                format!(
                    "not checked: {why}; {STRICT_ENV} is set (add the hook, or declare the case in conformance!(…, without: […]))"
                ),
            );
        }
        eprintln!("[{} / {}] NOT CHECKED: {why}", self.h.name(), self.case);
    }

    /// Applies a fault hook; `false` (after saying so) when the harness lacks it.
    #[track_caller]
    pub(crate) fn applied(&self, outcome: FaultResult, hook: &str) -> bool {
        if outcome.is_err() {
            self.unchecked(&format!("the harness has no `{hook}` fault hook"));
            return false;
        }
        true
    }
}

/// The environment variable that makes a case which cannot check its behaviour (a missing
/// fault hook) fail instead of passing: set it to `1` in a backend's own CI.
pub const STRICT_ENV: &str = "LOCKKIT_CONFORMANCE_STRICT";

/// Whether [`STRICT_ENV`] is set to `1`.
pub fn strict() -> bool {
    std::env::var(STRICT_ENV).is_ok_and(|value| value == "1")
}

/// A fresh lock name for `case`, unique across runs and processes.
pub fn unique_name(case: &str) -> String {
    format!("lockkit-test/{case}/{}", uuid::Uuid::new_v4().simple())
}
