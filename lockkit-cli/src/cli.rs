//! The command line, as clap definitions.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::exit;

/// The help of `--url`: the URL forms of every backend this build has, from their schemes.
fn url_help() -> String {
    let forms: Vec<&str> =
        lockkit::schemes().iter().flat_map(|scheme| scheme.urls.iter().map(|(form, _)| *form)).collect();
    format!(
        "The lock store: {}, with options in the query string (e.g. ?lease=10s). Default: $LOCKKIT_URL, else file:// \
         (a per-user directory on this machine)",
        forms.join(", ")
    )
}

/// Run commands under distributed locks (Redis, ZooKeeper, PostgreSQL, etcd, local files) and inspect locks.
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
    /// its environment and passes its exit code on. Send the fencing token with every write the lock protects;
    /// LOCKKIT_LOCK_ID (the lock's store and name) and LOCKKIT_FENCE_MODE (write, or read with --shared)
    /// are what a fenced store needs with it (lockkit_fence.fence in PostgreSQL).
    /// LOCKKIT_VALID_UNTIL_FILE names a file that lockkit rewrites at every renewal: the hold's
    /// deadline in Unix milliseconds, 0 once it is no longer guaranteed, none without a deadline;
    /// read it before a step that must not outlive the hold. When the hold
    /// is lost, the command gets SIGTERM, then SIGKILL after --grace, and lockkit exits 70.
    /// SIGINT, SIGTERM and SIGHUP to lockkit stop the command the same way and release the lock.
    #[command(after_help = exit::RUN_TABLE, override_usage = "lockkit run [OPTIONS] <NAME> [--] <COMMAND>...")]
    Run(RunArgs),
    /// Run a command only while this process leads an election; stop it on loss.
    ///
    /// Campaigns in the election NAME with --id published while it leads (waiting as `run`
    /// waits for a lock), then runs COMMAND with LOCKKIT_LOCK (the election's name) and
    /// LOCKKIT_FENCING_TOKEN (the term) in its environment, and LOCKKIT_VALID_UNTIL_FILE as for
    /// `run`. When the leadership is lost, the
    /// command gets SIGTERM, then SIGKILL after --grace, and lockkit exits 70, or with
    /// --rejoin campaigns again. Exit codes as for `run`.
    #[command(after_help = exit::RUN_TABLE, override_usage = "lockkit elect [OPTIONS] --id <ID> <NAME> [--] <COMMAND>...")]
    Elect(ElectArgs),
    /// Show who leads an election (identity, term, since), or --watch every change.
    #[command(after_help = exit::STATUS_TABLE)]
    Leader(LeaderArgs),
    /// Show whether a lock is held, by whom, with which fencing token.
    ///
    /// Prints the holder's fencing token, owner, since when it holds the lock, its lease left
    /// and the waiters queued, where the backend knows them. Exits 0 whether the lock is held
    /// or free.
    #[command(after_help = exit::STATUS_TABLE)]
    Status(StatusArgs),
    /// Free a lock whose holder is stuck: show who holds it, ask, break it.
    ///
    /// Shows the holder as `status` does, asks for confirmation on the terminal (unless
    /// --yes; without a terminal and without --yes it refuses), then frees the lock in the
    /// store: the holder's guard is signalled lost (at once on ZooKeeper, at its next renewal
    /// or check on Redis and files), the waiters are handed the lock as by a release, and the
    /// next owner's fencing token is greater than the broken one. The store's permissions
    /// decide who may (see README).
    #[command(after_help = exit::BREAK_TABLE)]
    Break(BreakArgs),
    /// Measure the store: lock latencies and rates against its raw round trip.
    ///
    /// In one run, on the store named by --url: the floor (the raw round trip of the same
    /// client library: Redis PING; ZooKeeper exists and create+delete of an ephemeral node;
    /// etcd Get and put+delete bound to a lease; none for mem:// and file://), one client's acquire+release cycles, --clients clients
    /// on one lock (acquisitions/s, share passed to another client, hand-off and wait
    /// latency), --locks locks held for a few renewal rounds (round trips per tick, client CPU
    /// and memory per held lock) and --locks distinct locks one after another and at once.
    /// Every figure comes with its ratio to the floor's p50 of the same run. Lock names start
    /// with lockkit-bench/; a run takes about 2 × --duration plus the many-locks phases.
    #[command(after_help = exit::BENCH_TABLE)]
    Bench(BenchArgs),
    /// Internal: how `run` and `elect` start the command, so that it dies with lockkit.
    #[command(name = "__child", hide = true)]
    Child(ChildArgs),
}

/// `lockkit __child` (internal, see `supervise.rs`).
#[derive(Debug, Args)]
pub(crate) struct ChildArgs {
    /// The pid of the lockkit that holds the lock: the command must not outlive it.
    #[arg(long, value_name = "PID")]
    pub(crate) parent: i32,

    /// Supervise the command and kill the whole process group when lockkit dies.
    #[arg(long)]
    pub(crate) group: bool,

    /// The command and its arguments (after --).
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

/// `lockkit run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The lock's name (any non-empty UTF-8 up to 1024 bytes).
    pub(crate) name: String,

    /// Hold NAME shared, as a reader of the read-write lock NAME: any number of --shared
    /// commands run at once, and none while an exclusive one (a writer) runs. Without it the
    /// hold is exclusive (the mutex NAME, which backends treat as the writer of NAME).
    #[arg(long, conflicts_with = "permits")]
    pub(crate) shared: bool,

    /// Take one of N permits of the semaphore NAME (1 to 1000000): at most N commands run at
    /// once. Every user of the semaphore must give the same N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) permits: Option<u32>,

    #[command(flatten)]
    pub(crate) hold: HoldArgs,
}

/// `lockkit elect`.
#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// The election's name (any non-empty UTF-8 up to 1024 bytes).
    pub(crate) name: String,

    /// What this candidate publishes while it leads (1 to 1024 bytes), such as host:port:
    /// `lockkit leader` shows it.
    #[arg(long, value_name = "ID")]
    pub(crate) id: String,

    /// After losing the leadership (the command was stopped), campaign again and run the
    /// command again when elected, instead of exiting 70.
    #[arg(long)]
    pub(crate) rejoin: bool,

    #[command(flatten)]
    pub(crate) hold: HoldArgs,
}

/// What `run` and `elect` share: the store, how long to wait, the lease, and the command.
#[derive(Debug, Args)]
pub(crate) struct HoldArgs {
    #[arg(long, value_name = "URL", help = url_help())]
    pub(crate) url: Option<String>,

    /// Wait at most this long for the lock (500ms, 10s, 1.5s, 2m, 1h); exit 75 on timeout.
    /// Default: wait forever.
    #[arg(long, value_name = "DURATION", value_parser = duration, conflicts_with = "no_wait")]
    pub(crate) wait: Option<Duration>,

    /// Try once; exit 73 at once when another owner holds the lock.
    #[arg(long)]
    pub(crate) no_wait: bool,

    /// The lease of the hold, on backends that have one (sets the URL's lease option): a
    /// dead lockkit frees the lock after it. It is renewed while the command runs.
    #[arg(long, value_name = "DURATION", value_parser = duration_text)]
    pub(crate) lease: Option<String>,

    /// How long the command has to exit after SIGTERM before it gets SIGKILL.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10s")]
    pub(crate) grace: Duration,

    /// Run the command in a process group of its own and send SIGTERM and SIGKILL to the
    /// whole group, so that the processes it started stop too (a shell script's children).
    /// The group is not the terminal's foreground group: a command that reads the terminal
    /// should run without it. If lockkit dies (even by SIGKILL), the whole group gets SIGKILL
    /// (Linux, Android, FreeBSD).
    #[arg(long)]
    pub(crate) kill_group: bool,

    /// Serve lockkit's metrics (acquisitions, wait and hold times, losses, renewals) in
    /// Prometheus' text format on this address, such as 127.0.0.1:9464, while lockkit runs.
    /// Needs lockkit built with the `prometheus` feature.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,

    /// The command and its arguments (after --).
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

/// `lockkit leader`.
#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    /// The election's name.
    pub(crate) name: String,

    #[arg(long, value_name = "URL", help = url_help())]
    pub(crate) url: Option<String>,

    /// Print each change of leader as it happens (a vacancy included), until interrupted.
    #[arg(long)]
    pub(crate) watch: bool,

    /// Print JSON: one object, or with --watch one object per line: event (elected, vacant,
    /// gap), identity, term, since_unix_ms.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `lockkit status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The lock's name.
    pub(crate) name: String,

    #[arg(long, value_name = "URL", help = url_help())]
    pub(crate) url: Option<String>,

    /// Print one JSON object: held, lock, url, token, owner, since_unix_ms, lease_left_ms,
    /// waiters (null where unknown or free).
    #[arg(long)]
    pub(crate) json: bool,
}

/// `lockkit break`.
#[derive(Debug, Args)]
pub(crate) struct BreakArgs {
    /// The lock's name.
    pub(crate) name: String,

    #[arg(long, value_name = "URL", help = url_help())]
    pub(crate) url: Option<String>,

    /// Break it without asking (required when stdin is not a terminal).
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
}

/// `lockkit bench`.
#[derive(Debug, Clone, Args)]
pub(crate) struct BenchArgs {
    #[arg(long, value_name = "URL", help = url_help())]
    pub(crate) url: Option<String>,

    /// Clients contending for one lock, each with its own connection or session.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub(crate) clients: u32,

    /// How long the uncontended and the contended phases each run (500ms, 10s, 1m).
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "5s")]
    pub(crate) duration: Duration,

    /// How many distinct locks the many-locks and the upkeep phases use.
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) locks: u32,

    /// Measure the cost of many holds instead of the other phases: N locks taken on one
    /// provider with a short lease, kept for three leases, then released (acquire-all and
    /// release-all time, renewal round trips, client memory per hold, any hold lost).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) holds: Option<u32>,

    /// Print one JSON object instead of the table: url, backend, settings, floor_kind (null: no floor), one
    /// object per phase (figures with their unit in the key, and `<figure>_ratio`),
    /// targets, notes.
    #[arg(long)]
    pub(crate) json: bool,

    /// Record lockkit's metrics during the run and print them at the end: counters, and
    /// count, p50, p99 and maximum of each histogram (with --json, a `metrics` array).
    /// Recording costs a little: compare figures with and without it.
    #[arg(long)]
    pub(crate) metrics: bool,
}

fn duration(text: &str) -> Result<Duration, String> {
    lockkit::config::parse_duration(text)
}

/// Checks a duration and keeps its text, to pass it on in the URL.
fn duration_text(text: &str) -> Result<String, String> {
    lockkit::config::parse_duration(text).map(|_| text.trim().to_owned())
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
    fn the_url_help_names_every_backend_of_the_build() {
        let help = url_help();
        for form in ["mem://NAME", "file:///path/to/dir", "redis://", "zk://", "postgres://"] {
            assert!(help.contains(form), "{form} in {help}");
        }
        assert_eq!(help.contains("etcd://"), cfg!(feature = "etcd"), "{help}");
    }

    #[test]
    fn the_command_follows_the_name_with_or_without_dashes() {
        for args in
            [&["lockkit", "run", "x", "--", "sh", "-c", "exit 3"][..], &["lockkit", "run", "x", "sh", "-c", "exit 3"]]
        {
            let cli = Cli::try_parse_from(args).map_err(|e| e.to_string());
            let Ok(Cli { command: Command::Run(run) }) = cli else { panic!("{cli:?}") };
            assert_eq!(run.hold.command, ["sh", "-c", "exit 3"]);
        }
        let cli = Cli::try_parse_from(["lockkit", "elect", "x", "--id", "me:1", "--rejoin", "--", "true"]);
        let Ok(Cli { command: Command::Elect(elect) }) = cli.map_err(|e| e.to_string()) else { panic!("elect") };
        assert_eq!((elect.id.as_str(), elect.rejoin, elect.hold.command.len()), ("me:1", true, 1));
    }

    #[test]
    fn bench_has_defaults_and_checks_its_numbers() {
        let cli = Cli::try_parse_from(["lockkit", "bench"]).map_err(|e| e.to_string());
        let Ok(Cli { command: Command::Bench(bench) }) = cli else { panic!("{cli:?}") };
        assert_eq!(
            (bench.clients, bench.duration, bench.locks, bench.holds, bench.json),
            (8, Duration::from_secs(5), 10_000, None, false)
        );
        assert!(Cli::try_parse_from(["lockkit", "bench", "--clients", "1"]).is_err());
        assert!(Cli::try_parse_from(["lockkit", "bench", "--duration", "5"]).is_err());
        assert!(Cli::try_parse_from(["lockkit", "bench", "--holds", "0"]).is_err());
    }

    #[test]
    fn wait_and_no_wait_exclude_each_other() {
        assert!(Cli::try_parse_from(["lockkit", "run", "x", "--wait", "1s", "--no-wait", "--", "true"]).is_err());
    }
}
