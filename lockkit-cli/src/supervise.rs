//! The hidden `lockkit __child` subcommand: how the command run under a lock dies with the
//! `lockkit` that holds the lock, whatever kills `lockkit` (SIGKILL included).
//!
//! `lockkit run` and `lockkit elect` do not start the command themselves: they start
//! `lockkit __child --parent PID [--group] -- COMMAND…`, a re-execution of their own binary,
//! which arranges to die with its parent and only then becomes (or starts) the command.
//!
//! - Without `--group`, the re-executed `lockkit` sets its parent-death signal to SIGKILL
//!   (`prctl(PR_SET_PDEATHSIG)` on Linux, `procctl(PROC_PDEATHSIG_CTL)` on FreeBSD, through
//!   rustix's safe wrapper), checks that its parent is still `PID` (if the parent died before
//!   the signal was set, nothing would ever send it), and then execs COMMAND. The signal
//!   survives the exec, so the command itself is killed the moment `lockkit` dies. The command
//!   keeps the pid `lockkit` spawned, so signalling and waiting for it work as for a direct
//!   child.
//! - With `--group`, the command's children must die too, and a parent-death signal reaches
//!   one process only. The re-executed `lockkit` stays as a small supervisor: it leads the
//!   process group `lockkit` created for it, starts COMMAND in that group, sets its own
//!   parent-death signal to SIGTERM (which it catches), checks its parent, and waits. When
//!   SIGTERM, SIGINT or SIGHUP arrives and its parent is no longer `PID` (the kernel reparents
//!   before it signals), it sends SIGKILL to the whole group, itself included. While the parent
//!   lives such signals are ignored: they were sent to the group, so the command got them too.
//!   The supervisor exits with the command's code, or 128 + the signal that ended it.
//!
//! The parent-death signal is tied to the thread that started the child; `lockkit` starts
//! the command from the thread that runs `main` (the future given to `block_on`), which lives
//! as long as the process.
//!
//! Other platforms have no parent-death signal: there `__child` only execs the command (or,
//! with `--group`, supervises it without the parent check), and a killed `lockkit` leaves its
//! command running. The README says so.

use std::ffi::OsString;
use std::io;

use rustix::process::{Pid, Signal};

use crate::cli::ChildArgs;
use crate::exit::{self, CANNOT_EXECUTE, Code, Failure, NOT_FOUND, OS_ERROR};

/// The hidden subcommand's name.
pub(crate) const SUBCOMMAND: &str = "__child";

/// The command `lockkit` spawns to run `command`: its own binary re-executed as
/// `__child --parent <our pid> [--group] -- COMMAND…`.
pub(crate) fn command(command: &[OsString], group: bool) -> Result<tokio::process::Command, Failure> {
    let mut supervisor = tokio::process::Command::new(own_binary()?);
    // Named as lockkit in `ps`, whichever path started it.
    supervisor.arg0("lockkit");
    supervisor.arg(SUBCOMMAND).arg("--parent").arg(std::process::id().to_string());
    if group {
        supervisor.arg("--group");
    }
    supervisor.arg("--").args(command);
    Ok(supervisor)
}

/// The path that re-executes this binary. On Linux `/proc/self/exe`, which still names the
/// running binary after it was deleted or replaced on disk (a package upgrade while `lockkit`
/// waits for its lock), where the path from `current_exe` would fail.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn own_binary() -> Result<std::path::PathBuf, Failure> {
    Ok(std::path::PathBuf::from("/proc/self/exe"))
}

/// The path that re-executes this binary.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn own_binary() -> Result<std::path::PathBuf, Failure> {
    std::env::current_exe().map_err(|error| {
        Failure::new(OS_ERROR, format!("cannot find lockkit's own binary to start the command: {error}"))
    })
}

/// Runs `lockkit __child`: dies with the parent, then becomes (or supervises) the command.
pub(crate) fn main(args: ChildArgs) -> Code {
    if args.group { supervise(&args) } else { exec(&args) }
}

/// Sets the parent-death signal, checks the parent, execs the command; returns only on a
/// failure.
fn exec(args: &ChildArgs) -> Code {
    use std::os::unix::process::CommandExt;

    let Some((program, rest)) = args.command.split_first() else {
        return report(&Failure::new(exit::USAGE, "no command to run"));
    };
    if let Err(failure) = die_with_parent(args.parent, Signal::KILL) {
        return report(&failure);
    }
    let error = std::process::Command::new(program).args(rest).exec();
    report(&cannot_run(program, &error))
}

/// `--group`: starts the command in our process group and kills the group when the parent
/// dies.
fn supervise(args: &ChildArgs) -> Code {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            return report(&Failure::new(OS_ERROR, format!("cannot start the supervisor's runtime: {error}")));
        }
    };
    let code = runtime.block_on(async {
        let Some((program, rest)) = args.command.split_first() else {
            return Err(Failure::new(exit::USAGE, "no command to run"));
        };
        // The handlers come first: the parent-death SIGTERM must find one.
        let mut signals = crate::signals::Signals::install()?;
        die_with_parent(args.parent, Signal::TERM)?;
        let mut child =
            tokio::process::Command::new(program).args(rest).spawn().map_err(|error| cannot_run(program, &error))?;
        loop {
            tokio::select! {
                status = child.wait() => {
                    return status
                        .map(exit::passed_on)
                        .map_err(|error| Failure::new(OS_ERROR, format!("cannot wait for the command: {error}")));
                }
                _ = signals.recv() => {
                    if parent_is_gone(args.parent) {
                        // Our group: the command, its children and ourselves.
                        let _ = rustix::process::kill_process_group(rustix::process::getpgrp(), Signal::KILL);
                        return Err(Failure::new(OS_ERROR, "lockkit died; killed the command's process group"));
                    }
                }
            }
        }
    });
    runtime.shutdown_background();
    code.unwrap_or_else(|failure| report(&failure))
}

/// Arranges for `signal` to be sent to this process when its parent dies, then checks that
/// the parent is still `parent`: if it died before, the signal will never come.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
fn die_with_parent(parent: i32, signal: Signal) -> Result<(), Failure> {
    rustix::process::set_parent_process_death_signal(Some(signal))
        .map_err(|error| Failure::new(OS_ERROR, format!("cannot set the parent-death signal: {error}")))?;
    if parent_is_gone(parent) {
        return Err(Failure::new(OS_ERROR, "lockkit died before the command started; not starting it"));
    }
    Ok(())
}

/// No parent-death signal on this platform: the command may outlive a killed `lockkit`.
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
fn die_with_parent(_parent: i32, _signal: Signal) -> Result<(), Failure> {
    Ok(())
}

/// Whether our parent is no longer the process `parent`.
fn parent_is_gone(parent: i32) -> bool {
    rustix::process::getppid().map(Pid::as_raw_nonzero).map(|pid| pid.get()) != Some(parent)
}

/// The failure to start `program`: 127 when not found, 126 otherwise, as in shells.
fn cannot_run(program: &std::ffi::OsStr, error: &io::Error) -> Failure {
    let program = program.to_string_lossy();
    match error.kind() {
        io::ErrorKind::NotFound => Failure::new(NOT_FOUND, format!("cannot run {program:?}: command not found")),
        _ => Failure::new(CANNOT_EXECUTE, format!("cannot run {program:?}: {error}")),
    }
}

/// Prints the failure's line and returns its code.
fn report(failure: &Failure) -> Code {
    eprintln!("lockkit: {failure}");
    failure.code
}
