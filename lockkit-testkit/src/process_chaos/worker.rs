//! The worker: one OS process, one provider, contending for the run's names and making fenced
//! read-modify-writes through the parent, which owns the resource.
//!
//! The worker speaks lines on its standard streams. It writes events and requests to stdout,
//! each prefixed with [`PREFIX`] (the test harness may print lines of its own):
//!
//! - `ready`
//! - `acquired NAME TOKEN START VALID` (times in nanoseconds since the Unix epoch, `-` for no
//!   deadline)
//! - `read NAME TOKEN`, answered on stdin with `value COUNTER`
//! - `write NAME TOKEN COUNTER CHECKED VALID`, answered with `ok` or `stale`
//! - `ended NAME TOKEN END VALID`
//!
//! In a fenced run ([`ProcessChaosConfig::sink`](super::ProcessChaosConfig::sink)) the worker
//! reads and writes the store itself ([`StoreWriter`]) and says `write`, `wrote` and
//! `readrefused` lines instead of asking.
//!
//! End of stdin tells the worker to release what it holds and exit.

use std::future::Future;
use std::time::{Duration, Instant};

use lockkit_core::{AcquireOptions, LockGuard, LockProvider, Wait};
use lockkit_fence::FenceSink;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::protocol::{BYPASS_ENV, ID_ENV, NAMES_ENV, PLANTED_ENV, SEED_ENV, SINK_ENV, URL_ENV, say, wall_ns};
use super::resource::{Cycle, Opener, StoreWriter, opener};
use crate::rng::Rng;

/// What the worker's environment says, when this process is a worker.
struct Spec {
    id: u64,
    url: String,
    names: Vec<String>,
    seed: u64,
    planted: bool,
    /// A fenced run: the sink's target and whether the fence is bypassed.
    sink: Option<(String, bool)>,
}

impl Spec {
    fn from_env() -> Option<Result<Spec, String>> {
        let id = std::env::var(ID_ENV).ok()?;
        let var = |name: &str| std::env::var(name).map_err(|_| format!("{name} is not set"));
        let parse = || -> Result<Spec, String> {
            Ok(Spec {
                id: id.parse().map_err(|_| format!("{ID_ENV}={id:?} is not a number"))?,
                url: var(URL_ENV)?,
                names: var(NAMES_ENV)?.split(',').map(str::to_owned).collect(),
                seed: var(SEED_ENV)?.parse().map_err(|_| format!("{SEED_ENV} is not a number"))?,
                planted: std::env::var(PLANTED_ENV).is_ok_and(|v| v == "1"),
                sink: std::env::var(SINK_ENV)
                    .ok()
                    .map(|target| (target, std::env::var(BYPASS_ENV).is_ok_and(|v| v == "1"))),
            })
        };
        Some(parse())
    }
}

/// Runs this process as a worker of a [`run`](super::run) and exits, if the parent started
/// it as one (its environment says so); returns at once otherwise.
///
/// Call it first thing in the test that [`ProcessChaosConfig::worker_test`](super::ProcessChaosConfig::worker_test)
/// names, with the function that connects to a store by URL (`lockkit::connect`), so that the
/// worker reaches every backend the test binary has.
pub fn worker_if_requested<F, Fut>(connect: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = lockkit_core::Result<LockProvider>>,
{
    worker_main(connect, None);
}

/// As [`worker_if_requested`], for the workers of a [`run_fenced`](super::run_fenced): `open`
/// opens the sink the worker writes through, from the run's
/// [`sink`](super::ProcessChaosConfig::sink) target and whether the fence is bypassed (the
/// planted bug: a sink whose writes skip the fence). The worker opens it on its first write,
/// and again after a failure (a restarted store).
pub fn worker_if_requested_fenced<F, Fut, O, OFut>(connect: F, open: O)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = lockkit_core::Result<LockProvider>>,
    O: Fn(String, bool) -> OFut + Send + Sync + 'static,
    OFut: Future<Output = Result<std::sync::Arc<dyn FenceSink>, String>> + Send + 'static,
{
    worker_main(connect, Some(opener(open)));
}

fn worker_main<F, Fut>(connect: F, open: Option<Opener>)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = lockkit_core::Result<LockProvider>>,
{
    let spec = match Spec::from_env() {
        None => return,
        Some(Ok(spec)) => spec,
        Some(Err(message)) => {
            eprintln!("process chaos worker: {message}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("process chaos worker: cannot start a runtime: {error}");
            std::process::exit(2);
        }
    };
    let code = runtime.block_on(async move {
        match connect(spec.url.clone()).await {
            Ok(provider) => {
                let writer = match (&spec.sink, open) {
                    (None, _) => None,
                    (Some((target, bypassed)), Some(open)) => Some(StoreWriter::new(open, target.clone(), *bypassed)),
                    (Some(_), None) => {
                        eprintln!("process chaos worker {}: a fenced run needs worker_if_requested_fenced", spec.id);
                        return 2;
                    }
                };
                work(&spec, &provider, writer).await
            }
            Err(error) => {
                eprintln!("process chaos worker {}: cannot connect to {}: {error}", spec.id, spec.url);
                3
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    std::process::exit(code);
}

/// Asks the parent and waits for its answer; `None` when the parent is gone or said stop.
async fn ask(input: &mut UnboundedReceiver<String>, line: &str) -> Option<String> {
    if !say(line) {
        return None;
    }
    input.recv().await
}

/// The parent's answers, line by line, read on a thread of their own (the kit's tokio has no
/// `io-std`); the channel closes at the end of stdin.
fn answers() -> UnboundedReceiver<String> {
    let (sender, receiver) = unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

/// `-` or the deadline as wall nanoseconds.
fn deadline(guard: &LockGuard, planted: bool) -> String {
    match guard.valid_until() {
        // The planted bug: the worker claims its hold is good until it ends.
        _ if planted => "-".to_owned(),
        Some(until) => wall_ns(until).to_string(),
        None => "-".to_owned(),
    }
}

/// The worker's loop; returns the exit code.
async fn work(spec: &Spec, provider: &LockProvider, mut writer: Option<StoreWriter>) -> i32 {
    let mut handles = Vec::new();
    for name in &spec.names {
        match provider.lock(name) {
            Ok(handle) => handles.push(handle),
            Err(error) => {
                eprintln!("process chaos worker {}: {error}", spec.id);
                return 3;
            }
        }
    }
    let mut input = answers();
    let mut rng = Rng::new(spec.seed ^ spec.id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    if !say("ready") {
        return 0;
    }
    loop {
        // A fenced worker asks nothing: the end of stdin is its only message.
        if writer.is_some() && matches!(input.try_recv(), Err(TryRecvError::Disconnected)) {
            return 0;
        }
        let index = usize::try_from(rng.below(handles.len() as u64)).unwrap_or(0);
        let Some(handle) = handles.get(index) else { return 3 };
        let options = AcquireOptions::default().with_wait(Wait::Timeout(Duration::from_secs(3)));
        let guard = match handle.acquire_with(options).await {
            Ok(Some(guard)) => guard,
            Ok(None) | Err(_) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let token = guard.token().get();
        let start = wall_ns(Instant::now());
        if !say(&format!("acquired {index} {token} {start} {}", deadline(&guard, spec.planted))) {
            return 0;
        }
        // One to four read-modify-writes: check the hold, read, work a little, write. A pause
        // that lands in the work outlives the check, as a GC pause between a check and a
        // request does; the resource must refuse the write if a newer holder wrote.
        let cycles = 1 + rng.below(4);
        let mut stop = false;
        for _ in 0..cycles {
            // The loss deadline: a real worker stops writing once its hold is no longer
            // guaranteed; the planted bug skips the check.
            if !spec.planted && !guard.is_held() {
                break;
            }
            let checked = wall_ns(Instant::now());
            if let Some(writer) = writer.as_mut() {
                let fence = guard.fence();
                let valid = || deadline(&guard, spec.planted);
                match writer.cycle(index, &spec.names[index], &fence, checked, valid, &mut rng).await {
                    Cycle::Written => {}
                    Cycle::Refused | Cycle::Failed => break,
                    Cycle::Gone => {
                        stop = true;
                        break;
                    }
                }
                if matches!(input.try_recv(), Err(TryRecvError::Disconnected)) {
                    stop = true;
                    break;
                }
                continue;
            }
            let Some(answer) = ask(&mut input, &format!("read {index} {token}")).await else {
                stop = true;
                break;
            };
            let counter: u64 = answer.strip_prefix("value ").and_then(|v| v.parse().ok()).unwrap_or(0);
            tokio::time::sleep(rng.between(Duration::from_millis(5), Duration::from_millis(60))).await;
            let line = format!("write {index} {token} {} {checked} {}", counter + 1, deadline(&guard, spec.planted));
            if ask(&mut input, &line).await.is_none() {
                stop = true;
                break;
            }
        }
        let end = wall_ns(Instant::now());
        let reported = say(&format!("ended {index} {token} {end} {}", deadline(&guard, spec.planted)));
        let _ = guard.release().await;
        if stop || !reported {
            return 0;
        }
    }
}
