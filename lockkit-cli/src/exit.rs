//! Exit codes (sysexits-style, like `flock(1)` and `timeout(1)` where they overlap) and the
//! one-line failure every error path ends in.

use std::fmt;

/// An exit status of `lockkit`. The child's own code is passed on as it is; the codes below
/// are the ones `lockkit` itself chooses.
pub(crate) type Code = u8;

/// `break`: nothing to break, the lock is free (as `pkill` when nothing matched).
pub(crate) const NOTHING_TO_BREAK: Code = 1;
/// `break`: the confirmation asked on the terminal was declined; nothing was changed.
pub(crate) const DECLINED: Code = 2;
/// Usage error: bad arguments, a bad URL, a bad duration, a bad lock name (`EX_USAGE`).
pub(crate) const USAGE: Code = 64;
/// The store could not be reached (`EX_UNAVAILABLE`).
pub(crate) const UNAVAILABLE: Code = 69;
/// The lock was lost while the command ran; the command was stopped (`EX_SOFTWARE`).
pub(crate) const LOST: Code = 70;
/// An operating-system failure of `lockkit` itself, such as installing a signal handler
/// (`EX_OSERR`).
pub(crate) const OS_ERROR: Code = 71;
/// `--no-wait`: another owner holds the lock (`EX_CANTCREAT`).
pub(crate) const BUSY: Code = 73;
/// `--wait`: the lock was not granted in time (`EX_TEMPFAIL`).
pub(crate) const TIMEOUT: Code = 75;
/// The store answered with an error that retrying will not fix (`EX_PROTOCOL`).
pub(crate) const BACKEND: Code = 76;
/// The command was found but could not be executed (as in shells).
pub(crate) const CANNOT_EXECUTE: Code = 126;
/// The command was not found (as in shells).
pub(crate) const NOT_FOUND: Code = 127;

/// The exit code for a process ended by signal `signal`, as shells report it.
pub(crate) fn signalled(signal: i32) -> Code {
    Code::try_from(128 + signal.clamp(0, 127)).unwrap_or(Code::MAX)
}

/// The exit code that passes a child's `status` on: its code, or 128 + the signal that
/// ended it.
pub(crate) fn passed_on(status: std::process::ExitStatus) -> Code {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Code::try_from(code & 0xff).unwrap_or(Code::MAX),
        (None, Some(signal)) => signalled(signal),
        (None, None) => Code::MAX,
    }
}

/// The table shown by `lockkit bench --help`.
pub(crate) const BENCH_TABLE: &str = "\
Exit status:
  0    the run finished and the figures were printed
  64   usage error: bad arguments, bad URL, bad duration
  69   the store could not be reached
  76   the store answered with an error (for example: permission denied)";

/// The table shown by `lockkit run --help`.
pub(crate) const RUN_TABLE: &str = "\
Exit status:
  (the command's)  the command ran to its end while the lock was held; a command
                   killed by a signal gives 128 + the signal's number, as in shells
  64   usage error: bad arguments, bad URL, bad duration, bad lock name, --lease
       on a backend that has no lease, --shared or --permits on a backend without
       them, --permits other than the count the semaphore is in use with
  69   the store could not be reached
  70   the lock was lost while the command ran; the command got SIGTERM, then
       SIGKILL after --grace
  71   an operating-system failure of lockkit itself
  73   --no-wait: the lock is held by another owner
  75   --wait: the lock was not granted in time
  76   the store answered with an error (for example: permission denied)
  126  the command could not be executed
  127  the command was not found
  129, 130, 143  lockkit got SIGHUP, SIGINT (Ctrl-C) or SIGTERM: the command got
       SIGTERM (SIGKILL after --grace, or at a second signal) and the lock was released";

/// The table shown by `lockkit status --help`.
pub(crate) const STATUS_TABLE: &str = "\
Exit status:
  0    the lock's state was read, whether it is held or free (see \"held\")
  64   usage error: bad arguments, bad URL, bad lock name
  69   the store could not be reached
  76   the store answered with an error (for example: permission denied)";

/// The table shown by `lockkit break --help`.
pub(crate) const BREAK_TABLE: &str = "\
Exit status:
  0    the lock was broken: its holders are listed, and lose it at their next renewal or check
  1    nothing to break: the lock is free (or was released before the break)
  2    the confirmation was declined; nothing was changed
  64   usage error: bad arguments, bad URL, bad lock name, or no terminal to confirm on
       and no --yes
  69   the store could not be reached
  76   the store answered with an error (for example: permission denied)";

/// Why `lockkit` stops without a result of the child: a code and one line for stderr.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The exit code.
    pub(crate) code: Code,
    /// The message, without the `lockkit: ` prefix and with no password in it.
    pub(crate) message: String,
}

impl Failure {
    /// A failure with `code` and `message`.
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    /// A failure of the store or the lock, classified by the kind of error. `context` says
    /// what was being done, naming the lock and the (redacted) URL.
    pub(crate) fn from_lock_error(error: &lockkit::Error, context: &str) -> Self {
        let code = code_of(error);
        let hint = match code {
            UNAVAILABLE => " (is the server running, and is the URL right?)",
            _ => "",
        };
        Self::new(code, format!("{context}: {}{hint}", lockkit::error_chain(error)))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The exit code for a lockkit error.
pub(crate) fn code_of(error: &lockkit::Error) -> Code {
    use lockkit::Error;
    match error {
        Error::InvalidName { .. }
        | Error::InvalidConfig { .. }
        | Error::Unsupported { .. }
        | Error::Conflict { .. } => USAGE,
        // A wait that ended while the store could not be reached is "unreachable", not "busy".
        error if error.is_connect() => UNAVAILABLE,
        Error::Timeout { .. } => TIMEOUT,
        Error::LockLost { .. } => LOST,
        _ => BACKEND,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_map_like_shells() {
        assert_eq!(signalled(2), 130);
        assert_eq!(signalled(9), 137);
        assert_eq!(signalled(15), 143);
    }
}
