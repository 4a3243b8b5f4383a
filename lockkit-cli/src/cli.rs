//! The command line, as clap definitions.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::exit;

const URL_HELP: &str = "The lock store: mem://, file:///dir, redis://[user:password@]host:port[/db], \
rediss://…, zk://host:port[,host:port…][/chroot], with options in the query string \
(e.g. ?ttl=10s). Default: $LOCKKIT_URL, else file:// (a per-user directory on this machine)";

/// Run commands under distributed locks (Redis, ZooKeeper, local files) and inspect locks.
#[derive(Debug, Parser)]
#[command(name = "lockkit", version, propagate_version = true)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a command while holding a lock; stop it if the lock is lost.
    ///
    /// Waits for the lock NAME (forever, unless --wait or --no-wait), then runs COMMAND with
    /// LOCKKIT_LOCK (the lock's name) and LOCKKIT_FENCING_TOKEN (the hold's fencing token) in
    /// its environment and passes its exit code on. Send the fencing token with every write the lock protects. When the hold
    /// is lost, the command gets SIGTERM, then SIGKILL after --grace, and lockkit exits 70.
    /// SIGINT, SIGTERM and SIGHUP to lockkit stop the command the same way and release the lock.
    #[command(after_help = exit::RUN_TABLE, override_usage = "lockkit run [OPTIONS] <NAME> [--] <COMMAND>...")]
    Run(RunArgs),
    /// Show whether a lock is held, by whom, with which fencing token.
    ///
    /// Prints the holder's fencing token, owner, since when it holds the lock, its lease left
    /// and the waiters queued, where the backend knows them. Exits 0 whether the lock is held
    /// or free.
    #[command(after_help = exit::STATUS_TABLE)]
    Status(StatusArgs),
}

/// `lockkit run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The lock's name (any non-empty UTF-8 up to 1024 bytes).
    pub(crate) name: String,

    #[arg(long, value_name = "URL", help = URL_HELP)]
    pub(crate) url: Option<String>,

    /// Wait at most this long for the lock (500ms, 10s, 1.5s, 2m, 1h); exit 75 on timeout.
    /// Default: wait forever.
    #[arg(long, value_name = "DURATION", value_parser = duration, conflicts_with = "no_wait")]
    pub(crate) wait: Option<Duration>,

    /// Try once; exit 73 at once when another owner holds the lock.
    #[arg(long)]
    pub(crate) no_wait: bool,

    /// The lease of the hold, on backends that have one (sets the URL's ttl option): a dead
    /// lockkit frees the lock after it. It is renewed while the command runs.
    #[arg(long, value_name = "DURATION", value_parser = duration_text)]
    pub(crate) ttl: Option<String>,

    /// How long the command has to exit after SIGTERM before it gets SIGKILL.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10s")]
    pub(crate) grace: Duration,

    /// The command and its arguments (after --).
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

/// `lockkit status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The lock's name.
    pub(crate) name: String,

    #[arg(long, value_name = "URL", help = URL_HELP)]
    pub(crate) url: Option<String>,

    /// Print one JSON object: held, lock, url, token, owner, since_unix_ms, lease_left_ms,
    /// waiters (null where unknown or free).
    #[arg(long)]
    pub(crate) json: bool,
}

fn duration(text: &str) -> Result<Duration, String> {
    lockkit::parse_duration(text)
}

/// Checks a duration and keeps its text, to pass it on in the URL.
fn duration_text(text: &str) -> Result<String, String> {
    lockkit::parse_duration(text).map(|_| text.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_command_follows_the_name_with_or_without_dashes() {
        for args in
            [&["lockkit", "run", "x", "--", "sh", "-c", "exit 3"][..], &["lockkit", "run", "x", "sh", "-c", "exit 3"]]
        {
            let cli = Cli::try_parse_from(args).map_err(|e| e.to_string());
            let Ok(Cli { command: Command::Run(run) }) = cli else { panic!("{cli:?}") };
            assert_eq!(run.command, ["sh", "-c", "exit 3"]);
        }
    }

    #[test]
    fn wait_and_no_wait_exclude_each_other() {
        assert!(Cli::try_parse_from(["lockkit", "run", "x", "--wait", "1s", "--no-wait", "--", "true"]).is_err());
    }
}
