//! The worker processes of [`run`](super::run): the test binary started again as a worker,
//! its protocol lines read and answered, and the store asked for orphans at the end.

use std::future::Future;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkit_core::LockProvider;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use super::analysis::{State, lock};
use super::config::ProcessChaosConfig;
use super::protocol as worker;

/// One running worker.
pub(super) struct Worker {
    pub(super) id: u64,
    pub(super) child: Child,
    pub(super) pid: u32,
    /// Dropping it closes the worker's stdin: the worker releases and exits.
    pub(super) stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub(super) ready: tokio::sync::oneshot::Receiver<()>,
}

/// Starts worker `id`: the test binary, filtered to the worker test.
pub(super) fn start(
    config: &ProcessChaosConfig,
    names: &[String],
    id: u64,
    state: &Arc<Mutex<State>>,
) -> Result<Worker, String> {
    let exe = std::env::current_exe().map_err(|error| format!("cannot find the test binary: {error}"))?;
    let mut command = Command::new(exe);
    if let Some(target) = &config.sink {
        command.env(worker::SINK_ENV, target).env(worker::BYPASS_ENV, if config.fence_bypassed { "1" } else { "0" });
    }
    let mut child = command
        .args([config.worker_test.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(worker::ID_ENV, id.to_string())
        .env(worker::URL_ENV, &config.url)
        .env(worker::NAMES_ENV, names.join(","))
        .env(worker::SEED_ENV, config.seed.to_string())
        .env(worker::PLANTED_ENV, if config.planted_bug { "1" } else { "0" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| format!("cannot start worker {id}: {error}"))?;
    let pid = child.id().ok_or_else(|| format!("worker {id} has no pid"))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(format!("worker {id} has no pipes"));
    };
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let state = Arc::clone(state);
    tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let mut lines = BufReader::new(stdout).lines();
        // Dropped (closed) to tell the worker to release and exit.
        let mut input = Some(stdin);
        while let Ok(Some(line)) = lines.next_line().await {
            // The test harness may print on the same line before the protocol's prefix.
            let Some(at) = line.find(worker::PREFIX) else { continue };
            let message = &line[at + worker::PREFIX.len()..];
            if message == "ready" {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
                continue;
            }
            let answer = lock(&state).handle(id, message);
            if !matches!(stop_rx.try_recv(), Err(tokio::sync::oneshot::error::TryRecvError::Empty)) {
                input = None;
            }
            if let (Some(answer), Some(stdin)) = (answer, input.as_mut())
                && stdin.write_all(format!("{answer}\n").as_bytes()).await.is_err()
            {
                input = None;
            }
        }
    });
    Ok(Worker { id, child, pid, stop: Some(stop_tx), ready: ready_rx })
}

/// Waits until `worker` connected to the store. A worker that exits or takes more than 30 s
/// (a store paused at that moment refuses or stalls its connection) is started again, up to
/// five attempts in all.
pub(super) async fn connected(
    mut worker: Worker,
    config: &ProcessChaosConfig,
    names: &[String],
    state: &Arc<Mutex<State>>,
) -> Result<Worker, String> {
    const ATTEMPTS: u32 = 5;
    for attempt in 1..=ATTEMPTS {
        if let Ok(Ok(())) = tokio::time::timeout(Duration::from_secs(30), &mut worker.ready).await {
            return Ok(worker);
        }
        let _ = worker.child.start_kill();
        let _ = worker.child.wait().await;
        if attempt < ATTEMPTS {
            tokio::time::sleep(Duration::from_millis(200)).await;
            worker = start(config, names, worker.id, state)?;
        }
    }
    Err(format!("worker {} did not connect in {ATTEMPTS} attempts", worker.id))
}

/// The names still held once the lease had time to run out (bounded).
pub(super) async fn held_names<F, Fut>(
    connect: F,
    config: &ProcessChaosConfig,
    names: &[String],
) -> Result<Vec<String>, String>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = lockkit_core::Result<LockProvider>>,
{
    let provider = connect(config.url.clone())
        .await
        .map_err(|error| format!("cannot connect to {} to look for orphans: {error}", config.url))?;
    let deadline = Instant::now() + config.lease.unwrap_or_default() * 2 + Duration::from_secs(5);
    let mut held: Vec<String> = names.to_vec();
    while !held.is_empty() {
        let mut still = Vec::new();
        for name in held {
            match provider.inspect(&name).await {
                Ok(info) if info.holder().is_none() => {}
                _ => still.push(name),
            }
        }
        held = still;
        if held.is_empty() || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(held)
}
