//! The command run under the lock: spawning it, stopping it (SIGTERM, then SIGKILL after a
//! grace period) and turning its exit status into ours.

use std::ffi::OsString;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use lockkit::Fence;
use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use tokio::process::Child;

use crate::exit::{self, Failure, OS_ERROR};
use crate::signals::Signals;
use crate::supervise;

/// Starts `command` with the hold's fence (the lock's name, fencing token, identity and mode:
/// [`Fence::env`]) and deadline file in its environment and the
/// standard streams inherited, in a process group of its own when `group` is set. The command
/// is started through `lockkit __child` (see [`crate::supervise`]) so that it dies with
/// `lockkit`, whatever kills `lockkit`; a command that cannot be run is reported by that
/// re-executed `lockkit`, which exits 127 or 126. The child is killed if `lockkit` unwinds
/// without waiting for it.
pub(crate) fn spawn(
    command: &[OsString],
    fence: &Fence,
    deadline_file: &std::path::Path,
    group: bool,
) -> Result<Child, Failure> {
    if command.is_empty() {
        return Err(Failure::new(exit::USAGE, "no command to run"));
    }
    let mut command = supervise::command(command, group)?;
    if group {
        // The supervisor leads a new group whose id is its pid, and starts the command in it:
        // `stop` signals the whole group.
        command.process_group(0);
    }
    command
        .envs(fence.env())
        .env(crate::deadline_file::ENV, deadline_file)
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| Failure::new(OS_ERROR, format!("cannot start lockkit's supervisor of the command: {error}")))
}

/// Sends SIGTERM to the child (to its whole process group when `group` is set), waits up to
/// `grace` for it to exit, then sends SIGKILL the same way. A further signal to `lockkit`
/// while it waits kills at once. Returns the child's exit status, or `None` if it could not
/// be waited for.
pub(crate) async fn stop(child: &mut Child, grace: Duration, signals: &mut Signals, group: bool) -> Option<ExitStatus> {
    // The pid is ours until the child is reaped, which only `wait` below does.
    let pid = child.id().and_then(|id| i32::try_from(id).ok()).and_then(Pid::from_raw);
    let send = |signal: Signal| {
        if let Some(pid) = pid {
            // ESRCH means it is already gone, which `wait` reports.
            let _ = if group { kill_process_group(pid, signal) } else { kill_process(pid, signal) };
        }
    };
    send(Signal::TERM);
    let kill_reason = tokio::select! {
        status = child.wait() => return status.ok(),
        () = tokio::time::sleep(grace) => format!("the command did not exit within {grace:?} of SIGTERM"),
        signal = signals.recv() => format!("got {} again", crate::signals::name(signal)),
    };
    eprintln!("lockkit: {kill_reason}; sending SIGKILL");
    if group {
        send(Signal::KILL);
    }
    let _ = child.start_kill();
    child.wait().await.ok()
}
