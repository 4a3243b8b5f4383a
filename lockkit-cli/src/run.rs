//! `lockkit run NAME -- COMMAND…`: acquire, run the command, stop it when the hold is lost,
//! release.

use std::process::ExitStatus;
use std::time::Duration;

use lockkit::{AcquireOptions, Error, LockGuard, LockHandle, LockProvider, LossReason, Wait};

use crate::child;
use crate::cli::{ElectArgs, HoldArgs, RunArgs};
use crate::deadline_file::DeadlineFile;
use crate::exit::{self, BUSY, Code, Failure, LOST, OS_ERROR, TIMEOUT, UNAVAILABLE};
use crate::progress::Progress;
use crate::signals::{self, Signals};
use crate::status::human;
use crate::target::Target;

/// How long the busy and timeout messages may spend finding out who holds the lock.
const HOLDER_LOOKUP: Duration = Duration::from_secs(1);

/// What ended the command's run.
enum Outcome {
    /// The command exited on its own.
    Exited(std::io::Result<ExitStatus>),
    /// The hold was lost first.
    Lost(LossReason),
    /// `lockkit` was told to stop.
    Signal(i32),
}

/// Runs `lockkit run`; returns the exit code.
pub(crate) async fn run(args: RunArgs) -> Result<Code, Failure> {
    let what = |shown: &str| format!("lock {:?} on {shown}", args.name);
    let mut session = match Session::open(&args.hold, &args.name, what).await? {
        Ok(session) => session,
        Err(interrupted) => return Ok(interrupted),
    };
    let lock = match (args.shared, args.permits) {
        (true, _) => session.provider.rw_lock(&args.name).map(|rw| rw.reader().clone()),
        (false, Some(permits)) => session.provider.semaphore(&args.name, permits),
        (false, None) => session.provider.lock(&args.name),
    }
    .map_err(|error| Failure::from_lock_error(&error, &format!("cannot use {}", session.what)))?;
    session.hold_and_run(&lock, &args.hold).await
}

/// Runs `lockkit elect`: campaigns, runs the command while leading, and with `--rejoin`
/// campaigns again after a loss.
pub(crate) async fn elect(args: ElectArgs) -> Result<Code, Failure> {
    let what = |shown: &str| format!("the leadership of election {:?} on {shown}", args.name);
    let mut session = match Session::open(&args.hold, &args.name, what).await? {
        Ok(session) => session,
        Err(interrupted) => return Ok(interrupted),
    };
    let candidate = session
        .provider
        .election(&args.name)
        .and_then(|election| election.candidate(&args.id))
        .map_err(|error| Failure::from_lock_error(&error, &format!("cannot campaign for {}", session.what)))?;
    loop {
        let code = session.hold_and_run(&candidate, &args.hold).await?;
        if code != LOST || !args.rejoin {
            return Ok(code);
        }
        eprintln!("lockkit: campaigning again for {} (--rejoin)", session.what);
    }
}

/// What `run` and `elect` share once the store is reached: the provider, the signals, and
/// how messages name what is held.
struct Session {
    target: Target,
    provider: LockProvider,
    signals: Signals,
    name: String,
    what: String,
}

impl Session {
    /// Serves the metrics when asked (`--metrics-addr`), resolves the store, installs the
    /// signal handlers and connects; `Err` with the exit code when a signal came first
    /// (nothing to undo: connecting is cancel safe).
    async fn open(hold: &HoldArgs, name: &str, what: impl Fn(&str) -> String) -> Result<Result<Self, Code>, Failure> {
        crate::metrics::serve(hold.metrics_addr)?;
        let mut target = Target::resolve(hold.url.clone());
        if let Some(lease) = &hold.lease {
            target = target.with_lease(lease);
        }
        let what = what(target.shown());
        let mut signals = Signals::install()?;
        // Everything before the command starts gives up at once on a signal: dropping the
        // futures leaves nothing behind (acquisition is cancel safe).
        let provider = tokio::select! {
            provider = target.connect(name, hold.lease.is_some()) => provider?,
            signal = signals.recv() => return Ok(Err(interrupted_early(signal, &what))),
        };
        Ok(Ok(Self { target, provider, signals, name: name.to_owned(), what }))
    }

    /// Acquires through `lock`, runs the command while the hold lasts, stops it when the hold
    /// is lost, releases; returns the exit code.
    async fn hold_and_run(&mut self, lock: &LockHandle, hold: &HoldArgs) -> Result<Code, Failure> {
        let what = self.what.clone();
        // One round trip first, so that an unreachable store fails at once rather than after
        // the backend rode out a lease's worth of reconnects.
        let probe = tokio::select! {
            probe = self.provider.inspect(&self.name) => probe,
            signal = self.signals.recv() => return Ok(interrupted_early(signal, &what)),
        };
        if let Err(error) = probe
            && exit::code_of(&error) == UNAVAILABLE
        {
            return Err(Failure::from_lock_error(
                &error,
                &format!("cannot reach {} for {:?}", self.target.shown(), self.name),
            ));
        }

        let wait = match (hold.no_wait, hold.wait) {
            (true, _) => Wait::No,
            (false, Some(timeout)) => Wait::Timeout(timeout),
            (false, None) => Wait::Forever,
        };
        let mut progress = match wait {
            Wait::No => Progress::inert(),
            _ => Progress::start(&self.provider, &self.name, self.target.shown(), hold.wait),
        };
        let acquire = lock.acquire_with(AcquireOptions::default().with_wait(wait));
        tokio::pin!(acquire);
        let acquired = loop {
            tokio::select! {
                acquired = &mut acquire => break acquired,
                () = progress.tick() => progress.draw(),
                signal = self.signals.recv() => {
                    progress.finish();
                    return Ok(interrupted_early(signal, &what));
                }
            }
        };
        progress.finish();
        let guard = match acquired {
            Ok(Some(guard)) => guard,
            Ok(None) if wait == Wait::No => {
                let holder = holder_of(&self.provider, &self.name).await;
                return Err(Failure::new(
                    BUSY,
                    format!("{what} is held by another owner{holder}; not waiting (--no-wait)"),
                ));
            }
            // A wait that ended while the store was unreachable exits 69, with the store's error.
            Err(error) if !error.is_timeout() || error.is_connect() => {
                return Err(Failure::from_lock_error(&error, &format!("cannot acquire {what}")));
            }
            Ok(None) | Err(_) => {
                let holder = holder_of(&self.provider, &self.name).await;
                let waited = hold.wait.map(human).unwrap_or_default();
                return Err(Failure::new(
                    TIMEOUT,
                    format!("gave up waiting for {what} after {waited} (--wait){holder}"),
                ));
            }
        };
        self.run_command(guard, hold).await
    }

    /// Runs the command under `guard` and stops it when the hold is lost or lockkit is told
    /// to stop.
    async fn run_command(&mut self, guard: LockGuard, hold: &HoldArgs) -> Result<Code, Failure> {
        let what = self.what.clone();
        // A hold that ran out between the grant and here (lockkit stopped or starved meanwhile):
        // never start the command with a token a newer holder may already have superseded.
        if !guard.is_held() {
            eprintln!("lockkit: lost {what} before the command started; not starting it");
            release(guard, &what).await;
            return Ok(LOST);
        }
        let deadline_file = match DeadlineFile::create(guard.watcher()) {
            Ok(file) => file,
            Err(failure) => {
                release(guard, &what).await;
                return Err(failure);
            }
        };
        let mut child = match child::spawn(&hold.command, &guard.fence(), deadline_file.path(), hold.kill_group) {
            Ok(child) => child,
            Err(failure) => {
                release(guard, &what).await;
                return Err(failure);
            }
        };
        let signals = &mut self.signals;
        let outcome = tokio::select! {
            status = child.wait() => Outcome::Exited(status),
            reason = guard.lost() => Outcome::Lost(reason),
            signal = signals.recv() => Outcome::Signal(signal),
        };
        match outcome {
            Outcome::Exited(Ok(status)) => {
                if let Some(reason) = guard.watcher().loss() {
                    // Lost before the exit was seen: the command's work may have overlapped
                    // another holder's.
                    eprintln!("lockkit: lost {what} while the command ran (it has exited since): {reason}");
                    release(guard, &what).await;
                    return Ok(LOST);
                }
                release(guard, &what).await;
                Ok(exit::passed_on(status))
            }
            Outcome::Exited(Err(error)) => {
                release(guard, &what).await;
                Err(Failure::new(OS_ERROR, format!("cannot wait for the command: {error}")))
            }
            Outcome::Lost(reason) => {
                deadline_file.mark_ended();
                eprintln!(
                    "lockkit: lost {what} while the command ran: {reason}; stopping the command \
                     (SIGTERM, then SIGKILL after {})",
                    human(hold.grace)
                );
                child::stop(&mut child, hold.grace, signals, hold.kill_group).await;
                release(guard, &what).await;
                Ok(LOST)
            }
            Outcome::Signal(signal) => {
                deadline_file.mark_ended();
                eprintln!(
                    "lockkit: got {}; stopping the command (SIGTERM, then SIGKILL after {}) and releasing {what}",
                    signals::name(signal),
                    human(hold.grace)
                );
                child::stop(&mut child, hold.grace, signals, hold.kill_group).await;
                release(guard, &what).await;
                Ok(exit::signalled(signal))
            }
        }
    }
}

/// A signal arrived before the command started: nothing to stop, nothing held.
fn interrupted_early(signal: i32, what: &str) -> Code {
    eprintln!("lockkit: got {} while waiting for {what}; gave up", signals::name(signal));
    exit::signalled(signal)
}

/// Releases the hold and reports a release that failed. A hold that was already lost was
/// reported when it was lost.
async fn release(guard: LockGuard, what: &str) {
    match guard.release().await {
        Ok(()) | Err(Error::LockLost { .. }) => {}
        Err(error) => eprintln!(
            "lockkit: warning: could not release {what}: {error}; the store frees it when the lease or session ends"
        ),
    }
}

/// `" (held by token N)"` when the store says quickly who holds the lock, else nothing.
async fn holder_of(provider: &LockProvider, name: &str) -> String {
    match tokio::time::timeout(HOLDER_LOOKUP, provider.inspect(name)).await {
        Ok(Ok(info)) => match info.holder() {
            Some(holder) => format!(" (held by token {})", holder.token),
            None => String::new(),
        },
        _ => String::new(),
    }
}
