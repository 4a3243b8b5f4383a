//! The multi-process chaos run: clients as OS processes, paused with `SIGSTOP` and killed
//! with `SIGKILL`, the faults that fencing tokens exist for.
//!
//! [`run`] starts K worker processes (default 4; the test binary re-run as a worker, see
//! [`worker_if_requested`]), each with its own provider, contending for a few lock names
//! (default 2). While a worker holds a lock it makes read-modify-writes on a resource that
//! lives in the parent, one per name: it asks for the counter, then asks to write
//! `counter + 1` with its fencing token. The parent accepts a write only when its token is not
//! below the highest it has seen for that name, as a fenced store does: the writes are checked
//! by the store, not by the writer. Meanwhile a schedule drawn from the seed pauses a worker
//! (`SIGSTOP`, then `SIGCONT` after 10 ms to two leases; half the time the worker that
//! currently holds a lock, so that some pauses outlive the lease mid-hold and the worker
//! writes on resume) or kills one (`SIGKILL`, replaced by a fresh worker). Given the store's
//! control ([`ProcessChaosConfig::with_store`], a [`StoreControl`]: the kit's Redis and
//! ZooKeeper fixtures have one) it also pauses the store for up to a lease, or restarts it (an
//! ensemble: one member stopped and started again), while the schedule goes on, so that
//! workers are paused and killed while the store is faulted too.
//!
//! Every worker reports its holds (grant, end, and its guard's local deadline) with wall-clock
//! times, comparable across the processes of one machine; the parent turns them into a
//! [`History`](crate::History) and checks it. The report counts:
//!
//! - **overlaps** of valid holds and token regressions ([`History::check`](crate::History::check)): must be 0;
//! - **lost writes**: a write accepted while its hold was valid, then overwritten by a write
//!   that had read the counter before it landed: must be 0 (with a store that keeps its data);
//! - with a store that loses its records when restarted (Redis without persistence,
//!   [`ProcessChaosConfig::restart_loses_data`]), the overlaps and lost writes involving a hold
//!   that may have been granted before a restart and was still valid when it began are counted
//!   apart, **by design**; the others must still be 0;
//! - **pauses that outlived a lease** (the worker held a lock when paused, and the pause was
//!   longer than the lease), **writes refused by fencing**, and of those the ones **after a
//!   resume** (a pause of the writer ended between its last validity check and its write);
//! - **late writes**: accepted after the writer's deadline had passed, before any newer holder
//!   wrote (fencing cannot refuse those; they are reported, not failed);
//! - **orphans**: names still held once every worker stopped and the lease had time to run out.
//!
//! [`ProcessChaosConfig::planted_bug`] makes the workers skip the loss deadline (they write
//! without checking that their hold is still guaranteed, and report their holds as valid until
//! they end): the run must then report overlaps, which proves the checker can fail.
//!
//! The same seed draws the same fault schedule and worker choices: each step (the gap, the
//! kind, whether to aim at a holder, which process, the lengths) is drawn whole whatever the
//! run's state, so a replay draws the same sequence. The interleaving of processes is not
//! reproducible (which process holds when a fault strikes, whether a store fault finds the
//! store still busy with the previous one), so a replay reproduces the conditions, not the
//! exact order.
//! Environment: `LOCKKIT_PROCESS_CHAOS_SEED=<n>` replays a seed, `LOCKKIT_PROCESS_CHAOS_SECS=<s>`
//! sets how long faults are injected (see [`ProcessChaosConfig::from_env`]).
//!
//! ```no_run
//! use lockkit_testkit::process_chaos::{self, ProcessChaosConfig};
//!
//! // In tests/process_chaos.rs of a crate that depends on the `lockkit` facade:
//! #[test]
//! fn process_chaos_worker() {
//!     process_chaos::worker_if_requested(|url| async move { lockkit_core::config::connect(&url).await });
//! }
//!
//! # async fn demo() {
//! let config = ProcessChaosConfig::new(7, "redis://127.0.0.1:6379/?lease=1s", "process_chaos_worker")
//!     .with_lease(std::time::Duration::from_secs(1));
//! let report =
//!     process_chaos::run(config, |url| async move { lockkit_core::config::connect(&url).await }).await;
//! println!("{report}");
//! report.assert_ok();
//! # }
//! # fn main() {}
//! ```

mod analysis;
mod cli;
mod config;
mod protocol;
mod report;
mod resource;
mod schedule;
mod signals;
mod spawn;
mod store;
mod store_control;
mod worker;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkit_core::LockProvider;
use lockkit_fence::FenceSink;

pub use cli::{cli_writer_if_requested, cli_writer_if_requested_fenced, run_cli, run_cli_fenced};
pub use config::{ProcessChaosConfig, ProcessFault, SECS_ENV, SEED_ENV};
pub use report::ProcessChaosReport;
pub use store::control;
pub use store_control::{StoreControl, StorePid};
pub use worker::{worker_if_requested, worker_if_requested_fenced};

use analysis::{State, finish, lock};
use protocol::now_ns;
use resource::{Opener, final_values, opener};
use schedule::Schedule;
use signals::signal;
use spawn::{Worker, connected, held_names, start};

/// Runs the multi-process chaos run and returns its report. `connect` connects the parent to
/// the store by URL (to find orphans at the end); the workers connect through
/// [`worker_if_requested`].
pub async fn run<F, Fut>(config: ProcessChaosConfig, connect: F) -> ProcessChaosReport
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = lockkit_core::Result<LockProvider>>,
{
    run_with(config, connect, None).await
}

/// Runs the multi-process chaos run with the counters in a real store, written through a real
/// fence by the workers themselves ([`ProcessChaosConfig::with_sink`]), and returns its report.
/// `open` opens the sink from the config's target and whether the fence is bypassed (the
/// planted bug, [`ProcessChaosConfig::with_fence_bypassed`]); the workers must call
/// [`worker_if_requested_fenced`] with the same opener. The parent opens the sink once before
/// the workers start (so that a sink that cannot open, or a missing migration, fails the run
/// at once) and again at the end to read the final values. The report then also counts
/// **stale writes accepted** (must be 0) and reads refused; lost writes are found in the
/// store's own history (see the fenced analysis in the module's source, `analysis/fenced.rs`).
pub async fn run_fenced<F, Fut, O, OFut>(config: ProcessChaosConfig, connect: F, open: O) -> ProcessChaosReport
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = lockkit_core::Result<LockProvider>>,
    O: Fn(String, bool) -> OFut + Send + Sync + 'static,
    OFut: Future<Output = Result<Arc<dyn FenceSink>, String>> + Send + 'static,
{
    let open = opener(open);
    if let Err(error) = check_sink(&config, &open).await {
        return failed(&config, error);
    }
    run_with(config, connect, Some(open)).await
}

/// A report of a run that could not start.
fn failed(config: &ProcessChaosConfig, error: String) -> ProcessChaosReport {
    let mut report = State::new(config).report;
    report.errors.push(error);
    report
}

/// Opens the sink of a fenced run once, as the workers will.
async fn check_sink(config: &ProcessChaosConfig, open: &Opener) -> Result<(), String> {
    let Some(target) = config.sink.clone() else {
        return Err("a fenced run needs ProcessChaosConfig::with_sink".to_owned());
    };
    open(target.clone(), config.fence_bypassed)
        .await
        .map(drop)
        .map_err(|error| format!("cannot open the sink of {target}: {error}"))
}

/// Reads the final values of a fenced run into its state (a sink opened anew: the store may
/// have been restarted under the first).
async fn read_finals(config: &ProcessChaosConfig, open: &Opener, names: &[String], state: &Arc<Mutex<State>>) {
    let Some(target) = config.sink.clone() else { return };
    let finals = match open(target.clone(), config.fence_bypassed).await {
        Ok(sink) => {
            lock(state).report.sink = Some(sink.name().to_owned());
            final_values(sink.as_ref(), names).await
        }
        Err(error) => names.iter().map(|_| Err(format!("cannot open the sink of {target}: {error}"))).collect(),
    };
    if let Some(log) = lock(state).fenced.as_mut() {
        log.finals = finals;
    }
}

async fn run_with<F, Fut>(config: ProcessChaosConfig, connect: F, open: Option<Opener>) -> ProcessChaosReport
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = lockkit_core::Result<LockProvider>>,
{
    let began = Instant::now();
    let run_id = format!("{:x}-{}", now_ns(), std::process::id());
    let names: Vec<String> = (0..config.names).map(|i| format!("process-chaos/{run_id}/{i}")).collect();
    let state = Arc::new(Mutex::new(State::new(&config)));
    let fail = |state: &Arc<Mutex<State>>, error: String| lock(state).report.errors.push(error);
    let mut next_id = 0u64;
    let mut workers: Vec<Worker> = Vec::new();
    for _ in 0..config.workers {
        match start(&config, &names, next_id, &state) {
            Ok(worker) => workers.push(worker),
            Err(error) => fail(&state, error),
        }
        next_id += 1;
    }
    let mut connected_workers = Vec::new();
    for worker in workers {
        match connected(worker, &config, &names, &state).await {
            Ok(worker) => connected_workers.push(worker),
            Err(error) => fail(&state, error),
        }
    }
    let mut workers = connected_workers;
    lock(&state).report.workers_started = next_id;

    // Store faults run beside the rest of the schedule; each ends its fault (resumes or
    // restarts the store) before it returns.
    let mut schedule = Schedule::new(&config);
    while !workers.is_empty() {
        let Some(draw) = schedule.next(&config, &state).await else { break };
        let kind = draw.kind;
        // Half the time a worker that holds a lock now, if one does.
        let holders: Vec<usize> = (0..workers.len()).filter(|&i| lock(&state).holds_now(workers[i].id)).collect();
        let all: Vec<usize> = (0..workers.len()).collect();
        let Some(index) = draw.choose(&holders, &all) else { continue };
        *lock(&state).report.faults.entry(kind).or_insert(0) += 1;
        match kind {
            ProcessFault::Pause => {
                let (id, pid) = (workers[index].id, workers[index].pid);
                let pause = draw.pause;
                let held = lock(&state).holds_now(id);
                let started = now_ns();
                if let Err(error) = signal(pid, "STOP").await {
                    fail(&state, error);
                    continue;
                }
                tokio::time::sleep(pause).await;
                let resumed = signal(pid, "CONT").await;
                let ended = now_ns();
                let mut state_now = lock(&state);
                state_now.pauses.entry(id).or_default().push((started, ended));
                let took = Duration::from_nanos(ended.saturating_sub(started));
                state_now.report.longest_pause = state_now.report.longest_pause.max(took);
                if held && config.lease.is_some_and(|lease| took > lease) {
                    state_now.report.pauses_outliving_lease += 1;
                }
                if let Err(error) = resumed {
                    state_now.report.errors.push(error);
                }
            }
            ProcessFault::PauseStore
            | ProcessFault::RestartStore
            | ProcessFault::PauseCommand
            | ProcessFault::KillCommand => {}
            ProcessFault::Kill => {
                let mut victim = workers.swap_remove(index);
                let killed = now_ns();
                let _ = victim.child.start_kill();
                let _ = tokio::time::timeout(Duration::from_secs(10), victim.child.wait()).await;
                lock(&state).died(victim.id, killed);
                let replacement = match start(&config, &names, next_id, &state) {
                    Ok(worker) => connected(worker, &config, &names, &state).await,
                    Err(error) => Err(error),
                };
                match replacement {
                    Ok(worker) => workers.push(worker),
                    Err(error) => fail(&state, error),
                }
                next_id += 1;
                lock(&state).report.workers_started = next_id;
            }
        }
    }

    schedule.finish(&state).await;

    // Stop: every worker releases what it holds and exits.
    for worker in &mut workers {
        if let Some(stop) = worker.stop.take() {
            let _ = stop.send(());
        }
    }
    for mut worker in workers {
        if tokio::time::timeout(Duration::from_secs(15), worker.child.wait()).await.is_err() {
            fail(&state, format!("worker {} did not stop within 15 s of being told to; killed", worker.id));
            let killed = now_ns();
            let _ = worker.child.start_kill();
            let _ = worker.child.wait().await;
            lock(&state).died(worker.id, killed);
        }
    }

    // Orphans: every name must be free once the lease had time to run out.
    let orphans = match held_names(connect, &config, &names).await {
        Ok(held) => held,
        Err(error) => {
            fail(&state, error);
            Vec::new()
        }
    };

    if let Some(open) = &open {
        read_finals(&config, open, &names, &state).await;
    }
    let mut state = lock(&state);
    state.report.orphans = orphans;
    finish(&mut state, &names, began)
}
