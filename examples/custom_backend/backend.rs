//! A complete third-party backend in one file: a lock table shared by the clients of one
//! process. It shows what a backend implements (the store's protocol, nothing more) and
//! what it gets from lockkit-core for free (reentrancy, timeouts, guards, releases, loss
//! signals). Users hold a plain `LockProvider` around it: no provider type to write.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use lockkit::backend::{AcquireRequest, Deadline, Grant, HeldLock, HoldSignal, HolderInfo, LockBackend, LockInfo};
use lockkit::sync::lock_or_recover;
use lockkit::{Capabilities, Error, FencingToken, LockName, LockProvider, LossReason, Result};
use tokio::sync::Notify;
use uuid::Uuid;

const BACKEND: &str = "table";

/// The "server": who holds which lock, and the token counter.
#[derive(Debug, Default)]
pub(crate) struct Table {
    state: Mutex<TableState>,
    /// Wakes waiters when any lock is freed (a real store would notify per lock).
    freed: Notify,
}

#[derive(Debug, Default)]
struct TableState {
    /// Each hold keeps its signal, so that the store can tell the holder it lost the lock.
    holders: HashMap<LockName, (FencingToken, Uuid, HoldSignal)>,
    last_token: u64,
}

impl Table {
    fn state(&self) -> std::sync::MutexGuard<'_, TableState> {
        lock_or_recover(&self.state)
    }

    /// Grants `lock` to `attempt` if it is free: the store's one atomic step. Refused, the
    /// holder's signal, to wait on.
    ///
    /// A hold lost on its own (its maximum hold reached) no longer holds: this store has no
    /// lease that would expire its record, so the record is taken over here. A hold being
    /// released still holds until its release frees the record.
    fn try_grant(&self, lock: &LockName, attempt: Uuid) -> std::result::Result<(FencingToken, HoldSignal), HoldSignal> {
        let mut state = self.state();
        if let Some((_, _, holder)) = state.holders.get(lock).filter(|(_, _, signal)| signal.loss().is_none()) {
            return Err(holder.clone());
        }
        state.last_token += 1;
        let token = FencingToken::new(state.last_token);
        // No lease: the hold lasts until released or lost (`valid_until` is `None`).
        let signal = HoldSignal::new(BACKEND, lock.clone(), None);
        state.holders.insert(lock.clone(), (token, attempt, signal.clone()));
        Ok((token, signal))
    }

    /// Restarts the "server": every hold is lost, the token counter is kept (as a store that
    /// persists it would).
    pub(crate) fn restart(&self) {
        let holders: Vec<_> = self.state().holders.drain().collect();
        for (_, (_, _, signal)) in holders {
            signal.lose(LossReason::StoreRestarted);
        }
        self.freed.notify_waiters();
    }

    /// Frees `lock` if `attempt` holds it, or whoever holds it when `attempt` is `None` (an
    /// administrator deleting the record: the holder is told it lost the lock).
    pub(crate) fn free(&self, lock: &LockName, attempt: Option<Uuid>) -> bool {
        let mut state = self.state();
        let ours = state.holders.get(lock).is_some_and(|(_, holder, _)| attempt.is_none_or(|a| a == *holder));
        if ours && let Some((_, _, signal)) = state.holders.remove(lock) {
            if attempt.is_none() {
                signal.lose(LossReason::RecordGone);
            }
            self.freed.notify_waiters();
        }
        ours
    }
}

/// One client of the table: the backend behind its handles.
#[derive(Debug, Clone)]
pub(crate) struct TableBackend {
    table: Arc<Table>,
}

#[async_trait]
impl LockBackend for TableBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { fencing_survives_restart: true, loss_notification: true, inspect: true, ..Capabilities::NONE }
    }

    async fn acquire(&self, request: AcquireRequest) -> Result<Option<Grant>> {
        loop {
            // Register for the wake-up before trying, so that a release in between is seen.
            let freed = self.table.freed.notified();
            let holder = match self.table.try_grant(&request.lock, request.attempt) {
                Ok((token, signal)) => {
                    let held =
                        TableHold { table: Arc::clone(&self.table), lock: request.lock, attempt: request.attempt };
                    return Ok(Some(Grant::new(token, signal, Box::new(held))));
                }
                Err(holder) => holder,
            };
            match request.deadline {
                Deadline::Now => return Ok(None),
                // The core drops this future at a finite deadline; nothing to clean up, since
                // a waiter leaves no trace in this store. A hold may also end on its own (its
                // maximum hold), with no release to wake the waiters.
                Deadline::At(_) | Deadline::Never => tokio::select! {
                    () = freed => {}
                    _ = holder.ended() => {}
                },
            }
        }
    }

    async fn inspect(&self, lock: &LockName) -> Result<LockInfo> {
        let holders = self
            .table
            .state()
            .holders
            .get(lock)
            .filter(|(_, _, signal)| signal.loss().is_none())
            .map(|(token, attempt, _)| HolderInfo::new(*token, attempt.to_string()))
            .into_iter()
            .collect();
        Ok(LockInfo::new(holders, None))
    }
}

/// One granted hold.
struct TableHold {
    table: Arc<Table>,
    lock: LockName,
    attempt: Uuid,
}

#[async_trait]
impl HeldLock for TableHold {
    async fn release(self: Box<Self>) -> Result<()> {
        if self.table.free(&self.lock, Some(self.attempt)) {
            Ok(())
        } else {
            Err(Error::lost(BACKEND, &self.lock, LossReason::RecordGone))
        }
    }
}

/// A client of `table`, as users hold it: the core's `LockProvider` around the backend.
pub(crate) fn client(table: Arc<Table>) -> LockProvider {
    LockProvider::new(Arc::new(TableBackend { table }))
}

/// What the conformance kit needs: fresh clients of one table, and the fault hooks it has.
#[derive(Debug, Default)]
pub(crate) struct TableHarness {
    table: Arc<Table>,
}

#[async_trait]
impl lockkit_testkit::Harness for TableHarness {
    fn name(&self) -> &str {
        BACKEND
    }

    async fn client(&self) -> Result<lockkit_testkit::TestClient> {
        Ok(lockkit_testkit::TestClient::without_faults(client(Arc::clone(&self.table))))
    }

    async fn delete_record(&self, name: &str) -> lockkit_testkit::FaultResult {
        let name = LockName::new(name).map_err(|_| lockkit_testkit::Unsupported)?;
        self.table.free(&name, None);
        Ok(())
    }

    async fn isolated(&self) -> std::result::Result<Arc<dyn lockkit_testkit::Harness>, lockkit_testkit::Unsupported> {
        Ok(Arc::new(Self::default()))
    }

    async fn restart_store(&self) -> lockkit_testkit::FaultResult {
        self.table.restart();
        Ok(())
    }
}
