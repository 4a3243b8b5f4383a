//! The multi-process run through the `lockkit` command: K `lockkit run NAME -- WRITER`
//! processes, where WRITER is the test binary re-run as a tiny writer that makes fenced
//! read-modify-writes with `$LOCKKIT_FENCING_TOKEN` on the parent's resource (the same
//! resource and checker as [`run`](super::run)).
//!
//! Each `lockkit run` is one worker of the report: it waits for the lock (at most 5 s), runs
//! the writer (writes for up to two leases, one second without a lease; a fenced run's writer
//! for three leases, all of them), releases and exits; its slot then starts another. The
//! writer speaks the worker's protocol on the standard streams it inherits through `lockkit`,
//! and first says `pid PID`, so that the parent can signal the command apart from `lockkit`.
//!
//! Faults, drawn from the seed, one at a time:
//!
//! - [`ProcessFault::Pause`]: `SIGSTOP` `lockkit` itself, `SIGCONT` after the drawn pause.
//!   Its command goes on writing while nothing renews the lease. The hold counts as valid
//!   until half a lease after the pause's start (the store keeps it at least that long, as
//!   `lockkit` renews every third of a lease; the parent cannot know the exact expiry, so an
//!   overlap in the rest of the lease would go unseen), and the writes that follow must be
//!   refused by fencing once a newer holder wrote. A pause that ended less than 250 ms before
//!   the command reported its hold counts too (it may have fallen between the grant and the
//!   command's start); a hold whose bound comes before its start was never valid: it is left
//!   out of the `History` and counted (`holds_never_valid`).
//! - [`ProcessFault::Kill`]: `SIGKILL` `lockkit` itself. Its command must die with it (the
//!   parent-death signal `lockkit __child` sets): a command still running 500 ms after
//!   `lockkit` is gone is an **orphan** (reported, then killed).
//! - [`ProcessFault::PauseCommand`], [`ProcessFault::KillCommand`]: the same on the command:
//!   `lockkit` goes on renewing while its command is paused, and releases and exits when it
//!   is killed.
//! - [`ProcessFault::PauseStore`], [`ProcessFault::RestartStore`], given the store's control
//!   ([`ProcessChaosConfig::with_store`]): as in [`run`](super::run), beside the schedule.
//!   Nothing renews a hold during a store fault, and the command cannot see its deadline, so
//!   a hold open then (or whose command reported it less than 250 ms after the fault ended)
//!   counts as valid until half a lease after the fault's start, as for a pause of its
//!   `lockkit`.
//!
//! A fenced run ([`run_cli_fenced`], [`ProcessChaosConfig::with_sink`]): the command writes
//! the counter to the store itself, through the sink the test's opener returns, with the
//! fence `lockkit run` exported (`$LOCKKIT_LOCK_ID`, `$LOCKKIT_FENCING_TOKEN`, read with
//! `Fence::from_env`), as a real command does; the parent checks the store's history at the
//! end, as [`run_fenced`](super::run_fenced) does.
//!
//! [`ProcessChaosConfig::planted_bug`] runs the writer in the background of a shell
//! (`sh -c '"$@" & wait'`), where the parent-death signal that kills the shell does not reach
//! it: with kills of `lockkit`, the run must then report orphans, which proves the orphan
//! check can fail.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkit_core::LockProvider;
use lockkit_fence::{Fence, FenceSink};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use super::analysis::{State, finish, lock};
use super::config::{ProcessChaosConfig, ProcessFault};
use super::protocol::{self as worker, PREFIX, now_ns, say};
use super::report::ProcessChaosReport;
use super::resource::{Cycle, Opener, StoreWriter, opener};
use super::schedule::Schedule;
use super::signals::signal;
use super::spawn::held_names;
use super::{check_sink, failed, read_finals};
use crate::rng::Rng;

/// Set in the environment of `lockkit run` (and so of its command): the index of the name.
const INDEX_ENV: &str = "LOCKKIT_CLI_CHAOS_INDEX";
/// The run's seed, for the writer's draws.
const WRITER_SEED_ENV: &str = "LOCKKIT_CLI_CHAOS_SEED";
/// The longest a writer goes on writing, in milliseconds.
const WRITER_SPAN_ENV: &str = "LOCKKIT_CLI_CHAOS_SPAN_MS";
/// How long a `lockkit run` waits for its lock.
const WAIT: &str = "5s";
/// How long a killed `lockkit` may take to be gone.
const LOCKKIT_GONE_WITHIN: Duration = Duration::from_secs(5);
/// How long a command may outlive its killed `lockkit` before it counts as an orphan. The
/// kernel sends the parent-death signal while `lockkit` exits; the command only has to be
/// scheduled to die.
const ORPHAN_AFTER: Duration = Duration::from_millis(500);

/// Runs this process as the writer a `lockkit run` of [`run_cli`] runs, and exits, if the
/// environment says so; returns at once otherwise.
///
/// Call it first thing in the test that [`ProcessChaosConfig::worker_test`] names.
pub fn cli_writer_if_requested() {
    let Ok(index) = std::env::var(INDEX_ENV) else { return };
    std::process::exit(write(&index));
}

/// As [`cli_writer_if_requested`], for the commands of a [`run_cli_fenced`]: the writer
/// writes to the store through the sink `open` returns (from the run's target and whether the
/// fence is bypassed), with the fence from the environment `lockkit run` gave it.
pub fn cli_writer_if_requested_fenced<O, OFut>(open: O)
where
    O: Fn(String, bool) -> OFut + Send + Sync + 'static,
    OFut: std::future::Future<Output = Result<Arc<dyn FenceSink>, String>> + Send + 'static,
{
    let Ok(index) = std::env::var(INDEX_ENV) else { return };
    let Ok(target) = std::env::var(worker::SINK_ENV) else { std::process::exit(write(&index)) };
    let bypassed = std::env::var(worker::BYPASS_ENV).is_ok_and(|v| v == "1");
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cli chaos writer: cannot start a runtime: {error}");
            std::process::exit(2);
        }
    };
    let code = runtime.block_on(write_fenced(&index, StoreWriter::new(opener(open), target, bypassed)));
    runtime.shutdown_timeout(Duration::from_secs(1));
    std::process::exit(code);
}

/// The fenced writer: read-modify-writes through the store for the whole of
/// [`WRITER_SPAN_ENV`] (at least one), until one is refused or fails; the exit code.
///
/// The whole span, not a drawn part of it as [`write`] does: a stale write needs a command
/// still writing after a newer holder wrote, so every pause of `lockkit` that outlives the
/// lease early enough in the hold must leave the command writing on (see [`span_ms`]).
async fn write_fenced(index: &str, mut writer: StoreWriter) -> i32 {
    let fence = match Fence::from_env() {
        Ok(fence) => fence,
        Err(error) => {
            eprintln!("cli chaos writer: {error}");
            return 2;
        }
    };
    let Ok(name) = index.parse::<usize>() else {
        eprintln!("cli chaos writer: {INDEX_ENV}={index:?} is not a number");
        return 2;
    };
    let token = fence.token().get();
    let resource = fence.lock().name().as_str().to_owned();
    let seed = std::env::var(WRITER_SEED_ENV).ok().and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let mut rng = Rng::new(seed ^ token.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let longest = std::env::var(WRITER_SPAN_ENV).ok().and_then(|s| s.parse::<u64>().ok()).unwrap_or(200);
    let until = Instant::now() + Duration::from_millis(longest);
    if !say(&format!("pid {}", std::process::id())) || !say(&format!("acquired {index} {token} {} -", now_ns())) {
        return 0;
    }
    loop {
        let checked = now_ns();
        match writer.cycle(name, &resource, &fence, checked, || "-".to_owned(), &mut rng).await {
            Cycle::Written => {}
            Cycle::Gone => return 0,
            Cycle::Refused | Cycle::Failed => break,
        }
        if Instant::now() >= until {
            break;
        }
    }
    let _ = say(&format!("ended {index} {token} {} -", now_ns()));
    0
}

/// The writer: fenced read-modify-writes with the hold's token, for a span drawn up to
/// [`WRITER_SPAN_ENV`] (at least one write), until one is refused; the exit code.
fn write(index: &str) -> i32 {
    let Some(token) = std::env::var("LOCKKIT_FENCING_TOKEN").ok().and_then(|t| t.trim().parse::<u64>().ok()) else {
        eprintln!("cli chaos writer: no LOCKKIT_FENCING_TOKEN");
        return 2;
    };
    let seed = std::env::var(WRITER_SEED_ENV).ok().and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let mut rng = Rng::new(seed ^ token.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let longest = std::env::var(WRITER_SPAN_ENV).ok().and_then(|s| s.parse::<u64>().ok()).unwrap_or(200);
    let until = Instant::now() + rng.between(Duration::ZERO, Duration::from_millis(longest));
    let mut answers = std::io::stdin().lines();
    if !say(&format!("pid {}", std::process::id())) || !say(&format!("acquired {index} {token} {} -", now_ns())) {
        return 0;
    }
    loop {
        let checked = now_ns();
        if !say(&format!("read {index} {token}")) {
            return 0;
        }
        let Some(Ok(answer)) = answers.next() else { return 0 };
        let counter: u64 = answer.strip_prefix("value ").and_then(|v| v.parse().ok()).unwrap_or(0);
        // The work between the read and the write, where a pause hurts.
        std::thread::sleep(rng.between(Duration::from_millis(5), Duration::from_millis(60)));
        if !say(&format!("write {index} {token} {} {checked} -", counter + 1)) {
            return 0;
        }
        match answers.next() {
            Some(Ok(answer)) if answer == "ok" => {}
            // Refused by fencing: a real command gives up.
            _ => break,
        }
        if Instant::now() >= until {
            break;
        }
    }
    let _ = say(&format!("ended {index} {token} {} -", now_ns()));
    0
}

/// The longest a writer writes: two leases (one second without a lease), so that a writer
/// whose `lockkit` is paused goes on writing past the lease.
///
/// A fenced run's writer writes its whole span, and the span is three leases: a pause of
/// `lockkit` that begins in the first one and a half leases of a hold and outlives the lease
/// leaves the command writing after the lease expired (at most one lease after the pause
/// began) and a waiting `lockkit run` took the lock and its command wrote (a few tens of
/// milliseconds more), so that such a run always has stale writes to refuse (or, with the
/// fence bypassed, to accept).
fn span_ms(config: &ProcessChaosConfig) -> u128 {
    let leases = if config.sink.is_some() { 3 } else { 2 };
    config.lease.map_or(Duration::from_secs(1), |lease| lease * leases).as_millis()
}

/// The `lockkit run` a slot runs now.
#[derive(Clone, Copy, Debug)]
struct Current {
    id: u64,
    lockkit: u32,
    command: Option<u32>,
}

type Slots = Arc<Mutex<Vec<Option<Current>>>>;

fn slots_now(slots: &Slots) -> Vec<Option<Current>> {
    slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

fn set_slot(slots: &Slots, index: usize, current: Option<Current>) {
    if let Some(slot) = slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_mut(index) {
        *slot = current;
    }
}

/// What every slot shares.
struct Shared {
    config: ProcessChaosConfig,
    lockkit: PathBuf,
    writer: PathBuf,
    names: Vec<String>,
    state: Arc<Mutex<State>>,
    slots: Slots,
    next_id: AtomicU64,
    stop: AtomicBool,
}

/// Whether process `pid` is gone (or a zombie: dead, not yet reaped).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => true,
    }
}

/// Sends `name` to `pid`; a process that already exited is not an error (`Ok(false)`).
async fn send(pid: u32, name: &str) -> Result<bool, String> {
    match signal(pid, name).await {
        Ok(()) => Ok(true),
        Err(_) if gone(pid) => Ok(false),
        Err(error) => Err(error),
    }
}

/// One slot: `lockkit run` after `lockkit run` until the run stops.
async fn slot(shared: Arc<Shared>, index: usize) {
    let mut rng = Rng::new(shared.config.seed ^ (index as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9));
    while !shared.stop.load(Ordering::SeqCst) {
        let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
        let name = usize::try_from(rng.below(shared.names.len() as u64)).unwrap_or(0);
        if let Err(error) = once(&shared, index, id, name).await {
            lock(&shared.state).report.errors.push(error);
            return;
        }
    }
}

/// Runs one `lockkit run` to its end (bounded).
async fn once(shared: &Shared, index: usize, id: u64, name: usize) -> Result<(), String> {
    let config = &shared.config;
    let mut command = Command::new(&shared.lockkit);
    command.args(["run", &shared.names[name], "--url", &config.url, "--wait", WAIT, "--"]);
    if config.planted_bug {
        // The planted bug: the writer runs in the background of a shell, out of reach of the
        // parent-death signal, which kills the shell only.
        command.args(["sh", "-c", "exec 3<&0; \"$@\" <&3 3<&- & wait", "sh"]);
    }
    match &config.sink {
        Some(target) => {
            command
                .env(worker::SINK_ENV, target)
                .env(worker::BYPASS_ENV, if config.fence_bypassed { "1" } else { "0" });
        }
        None => {
            command.env_remove(worker::SINK_ENV);
        }
    }
    let mut child = command
        .arg(&shared.writer)
        .args([config.worker_test.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(INDEX_ENV, name.to_string())
        .env(WRITER_SEED_ENV, config.seed.to_string())
        .env(WRITER_SPAN_ENV, span_ms(config).to_string())
        .env_remove("LOCKKIT_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| format!("cannot start lockkit run ({}): {error}", shared.lockkit.display()))?;
    let pid = child.id().ok_or_else(|| format!("lockkit run {id} has no pid"))?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(format!("lockkit run {id} has no pipes"));
    };
    set_slot(&shared.slots, index, Some(Current { id, lockkit: pid, command: None }));
    let talk = async {
        let mut lines = BufReader::new(stdout).lines();
        let mut open = true;
        while let Ok(Some(line)) = lines.next_line().await {
            let Some(at) = line.find(PREFIX) else { continue };
            let message = &line[at + PREFIX.len()..];
            if let Some(command) = message.strip_prefix("pid ").and_then(|p| p.parse::<u32>().ok()) {
                set_slot(&shared.slots, index, Some(Current { id, lockkit: pid, command: Some(command) }));
                continue;
            }
            let answer = lock(&shared.state).handle(id, message);
            if let Some(answer) = answer
                && open
                && stdin.write_all(format!("{answer}\n").as_bytes()).await.is_err()
            {
                open = false;
            }
        }
    };
    // The wait, the writes and the pauses of both processes fit well within it.
    let bound = Duration::from_secs(60);
    let result = match tokio::time::timeout(bound, talk).await {
        Ok(()) => match tokio::time::timeout(Duration::from_secs(10), child.wait()).await {
            Ok(_) => Ok(()),
            Err(_) => Err(format!("lockkit run {id} did not exit within 10 s of closing its output")),
        },
        Err(_) => Err(format!("lockkit run {id} did not end within {} s", bound.as_secs())),
    };
    if result.is_err() {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    lock(&shared.state).died(id, now_ns());
    set_slot(&shared.slots, index, None);
    result
}

/// Runs the multi-process chaos run through `lockkit run` (the binary at `lockkit`) and
/// returns its report. [`ProcessChaosConfig::worker_test`] names the test of the current
/// binary that calls [`cli_writer_if_requested`]; [`ProcessChaosConfig::workers`] is the
/// number of `lockkit run` processes at once; the faults drawn are
/// [`ProcessChaosConfig::faults`] among [`ProcessFault::Pause`], [`ProcessFault::Kill`] (of
/// `lockkit`), [`ProcessFault::PauseCommand`], [`ProcessFault::KillCommand`] and, given the
/// store's control, [`ProcessFault::PauseStore`] and [`ProcessFault::RestartStore`]. `connect`
/// connects the parent to the store to look for orphaned names at the end.
pub async fn run_cli<F, Fut>(config: ProcessChaosConfig, lockkit: impl AsRef<Path>, connect: F) -> ProcessChaosReport
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = lockkit_core::Result<LockProvider>>,
{
    run_cli_with(config, lockkit.as_ref(), connect, None).await
}

/// As [`run_cli`], with the counters in a real store that each command writes through a real
/// fence ([`ProcessChaosConfig::with_sink`]), as [`run_fenced`](super::run_fenced) does for
/// workers: `open` opens the sink; the commands must call [`cli_writer_if_requested_fenced`]
/// with the same opener.
pub async fn run_cli_fenced<F, Fut, O, OFut>(
    config: ProcessChaosConfig,
    lockkit: impl AsRef<Path>,
    connect: F,
    open: O,
) -> ProcessChaosReport
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = lockkit_core::Result<LockProvider>>,
    O: Fn(String, bool) -> OFut + Send + Sync + 'static,
    OFut: std::future::Future<Output = Result<Arc<dyn FenceSink>, String>> + Send + 'static,
{
    let open = opener(open);
    if let Err(error) = check_sink(&config, &open).await {
        return failed(&config, error);
    }
    run_cli_with(config, lockkit.as_ref(), connect, Some(open)).await
}

async fn run_cli_with<F, Fut>(
    config: ProcessChaosConfig,
    lockkit: &Path,
    connect: F,
    open: Option<Opener>,
) -> ProcessChaosReport
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = lockkit_core::Result<LockProvider>>,
{
    let began = Instant::now();
    let run_id = format!("{:x}-{}", now_ns(), std::process::id());
    let names: Vec<String> = (0..config.names).map(|i| format!("cli-chaos/{run_id}/{i}")).collect();
    let state = Arc::new(Mutex::new(State::new_cli(&config)));
    let writer = match std::env::current_exe() {
        Ok(writer) => writer,
        Err(error) => {
            lock(&state).report.errors.push(format!("cannot find the test binary: {error}"));
            return finish(&mut lock(&state), &names, began);
        }
    };
    let shared = Arc::new(Shared {
        config: config.clone(),
        lockkit: lockkit.to_path_buf(),
        writer,
        names: names.clone(),
        state: Arc::clone(&state),
        slots: Arc::new(Mutex::new(vec![None; config.workers])),
        next_id: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let tasks: Vec<_> = (0..config.workers).map(|index| tokio::spawn(slot(Arc::clone(&shared), index))).collect();
    let fail = |error: String| lock(&state).report.errors.push(error);

    let mut schedule = Schedule::new(&config);
    while let Some(draw) = schedule.next(&config, &state).await {
        let kind = draw.kind;
        let running: Vec<Current> = slots_now(&shared.slots).into_iter().flatten().collect();
        // Half the time one that holds a lock now, if one does.
        let holders: Vec<Current> = running.iter().copied().filter(|c| lock(&state).holds_now(c.id)).collect();
        let Some(target) = draw.choose(&holders, &running) else { continue };
        let pause = draw.pause;
        let (pid, on_lockkit) = match kind {
            ProcessFault::Pause | ProcessFault::Kill => (target.lockkit, true),
            ProcessFault::PauseCommand | ProcessFault::KillCommand => match target.command {
                Some(command) => (command, false),
                None => continue,
            },
            ProcessFault::PauseStore | ProcessFault::RestartStore => continue,
        };
        let held = lock(&state).holds_now(target.id);
        let started = now_ns();
        let pausing = matches!(kind, ProcessFault::Pause | ProcessFault::PauseCommand);
        // A target that is gone already (`Ok(false)`) is passed over.
        match send(pid, if pausing { "STOP" } else { "KILL" }).await {
            Ok(true) => {}
            Ok(false) => continue,
            Err(error) => {
                fail(error);
                continue;
            }
        }
        *lock(&state).report.faults.entry(kind).or_insert(0) += 1;
        match kind {
            ProcessFault::Pause | ProcessFault::PauseCommand => {
                if on_lockkit {
                    // Bounds the validity of the hold this lockkit has or is about to report
                    // (`State::capped`).
                    lock(&state).lockkit_pauses.entry(target.id).or_default().push((started, None));
                }
                tokio::time::sleep(pause).await;
                let resumed = send(pid, "CONT").await;
                let ended = now_ns();
                let took = Duration::from_nanos(ended.saturating_sub(started));
                let mut state = lock(&state);
                if on_lockkit {
                    if let Some(pause) = state.lockkit_pauses.get_mut(&target.id).and_then(|pauses| pauses.last_mut()) {
                        pause.1 = Some(ended);
                    }
                } else {
                    state.pauses.entry(target.id).or_default().push((started, ended));
                }
                state.report.longest_pause = state.report.longest_pause.max(took);
                if on_lockkit && held && config.lease.is_some_and(|lease| took > lease) {
                    state.report.pauses_outliving_lease += 1;
                }
                if let Err(error) = resumed {
                    state.report.errors.push(error);
                }
            }
            _ => {
                if on_lockkit && let Some(command) = target.command {
                    // The command must die with its lockkit.
                    let gone_within = |pid: u32, within: Duration| async move {
                        let deadline = Instant::now() + within;
                        while !gone(pid) && Instant::now() < deadline {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        gone(pid)
                    };
                    let dead = gone_within(target.lockkit, LOCKKIT_GONE_WITHIN).await;
                    // The hold ended with lockkit, which ran nothing after the SIGKILL.
                    lock(&state).died(target.id, started);
                    if !dead {
                        fail(format!(
                            "lockkit run {} was not gone {} s after SIGKILL",
                            target.id,
                            LOCKKIT_GONE_WITHIN.as_secs()
                        ));
                    } else if !gone_within(command, ORPHAN_AFTER).await {
                        lock(&state).report.orphans.push(format!(
                            "command {command} of lockkit run {} still ran {} ms after its lockkit died",
                            target.id,
                            ORPHAN_AFTER.as_millis()
                        ));
                        let _ = signal(command, "KILL").await;
                    }
                }
                lock(&state).died(target.id, if on_lockkit { started } else { now_ns() });
            }
        }
    }

    schedule.finish(&state).await;
    // Stop: every slot lets its current lockkit run finish (bounded by its own bounds).
    shared.stop.store(true, Ordering::SeqCst);
    for task in tasks {
        if let Err(error) = task.await {
            fail(format!("a slot failed: {error}"));
        }
    }

    let orphans = held_names(connect, &config, &names).await;
    if let Some(open) = &open {
        read_finals(&config, open, &names, &state).await;
    }
    let mut state = lock(&state);
    match orphans {
        Ok(held) => state.report.orphans.extend(held),
        Err(error) => state.report.errors.push(error),
    }
    state.report.workers_started = shared.next_id.load(Ordering::SeqCst);
    finish(&mut state, &names, began)
}
