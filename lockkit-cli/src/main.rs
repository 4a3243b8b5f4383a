//! `lockkit`: run a command while holding a distributed lock, and inspect locks, on any
//! lockkit store (Redis, ZooKeeper, PostgreSQL, etcd, local files, memory) named by a URL.
//!
//! ```text
//! lockkit run NAME [--url URL] [--wait DURATION | --no-wait] [--shared | --permits N] [--lease DURATION] [--grace DURATION] -- COMMAND...
//! lockkit elect NAME --id ID [--rejoin] [--url URL] [--wait DURATION | --no-wait] [--lease DURATION] [--grace DURATION] -- COMMAND...
//! lockkit leader NAME [--url URL] [--watch] [--json]
//! lockkit status NAME [--url URL] [--json]
//! lockkit break NAME [--url URL] [--yes]
//! lockkit bench [--url URL] [--clients N] [--duration DURATION] [--locks N] [--json]
//! ```
//!
//! The store is `--url`, else `$LOCKKIT_URL`, else [`lockkit::DEFAULT_URL`] (the local-file
//! backend in a per-user directory). Durations are written `500ms`, `10s`, `1.5s`, `2m`, `1h`.
//!
//! # `lockkit run`
//!
//! Acquires the lock (waiting forever by default, at most `--wait`, or not at all with
//! `--no-wait`), then runs COMMAND with stdin, stdout and stderr inherited and with
//! `LOCKKIT_LOCK=<name>` and `LOCKKIT_FENCING_TOKEN=<token>` in its environment. The fencing
//! token is strictly greater for every new holder: send it with every write the lock
//! protects, and have the resource refuse writes with a lower token than it has seen.
//! `LOCKKIT_LOCK_ID=<store>#<name>` (the lock's identity, without credentials) and
//! `LOCKKIT_FENCE_MODE=write` (`read` with `--shared`) are what a fenced store needs beside
//! it, such as the SQL function `lockkit_fence.fence` of `lockkit::fence::postgres`.
//!
//! - The command's exit code is passed on; a command killed by a signal gives 128 + its
//!   number, as in shells.
//! - When the hold is lost (lease not renewed in time, session expired, record deleted), the
//!   reason is printed, the command gets SIGTERM, then SIGKILL after `--grace` (10 s by
//!   default), and `lockkit` exits 70.
//! - SIGINT (Ctrl-C), SIGTERM and SIGHUP to `lockkit` are forwarded to the command as
//!   SIGTERM (SIGKILL after `--grace`, or at once on a second signal); then the lock is
//!   released and `lockkit` exits 130, 143 or 129.
//! - When `lockkit` itself dies, by any signal, SIGKILL included, the command gets SIGKILL
//!   (with `--kill-group`, its whole process group): on Linux, Android and FreeBSD through the
//!   parent-death signal (see `supervise.rs`); other platforms have none, and there a killed
//!   `lockkit` leaves its command running.
//! - `--shared` holds NAME as a reader of the read-write lock NAME (any number of shared
//!   commands at once, none beside an exclusive one); `--permits N` takes one of N permits of
//!   the semaphore NAME (at most N commands at once). Without either, the hold is exclusive.
//! - `--lease` sets the lease on backends that have one (the URL's `lease` option); the lease is
//!   renewed while the command runs, and frees the lock after a dead `lockkit`.
//! - While it waits with stderr on a terminal, one line shows what it waits for and for how
//!   long: `waiting for lock "x" on redis://host:6379/ (held by token 17) for 12s`. Nothing of
//!   the kind is printed when stderr is not a terminal.
//!
//! # `lockkit elect`
//!
//! Campaigns in the election NAME, publishing `--id` (such as `host:port`) while it leads,
//! and runs COMMAND only while it leads, exactly as `lockkit run` runs it under a lock:
//! `LOCKKIT_FENCING_TOKEN` is the term, and the command gets SIGTERM (then SIGKILL after
//! `--grace`) when the leadership is lost. `--rejoin` campaigns again after a loss instead of
//! exiting 70.
//!
//! # `lockkit leader`
//!
//! Prints who leads the election NAME (`leader 10.0.0.7:8080 (term 42, since …)`, or
//! `no leader`); `--watch` prints every change as the store notifies it, until interrupted;
//! `--json` prints objects with `event` (`elected`, `vacant`, `gap`), `election`, `identity`,
//! `term` and `since_unix_ms`.
//!
//! # `lockkit status`
//!
//! Prints whether the lock is held and, where the backend knows, the holder's fencing token,
//! owner, since when, the lease left and the number of waiters; for a read-write lock or a
//! semaphore, every holder with its kind (readers, the writer, permits in use). `--json`
//! prints one object with the fields `held`, `lock`, `url`, `token`, `owner`,
//! `since_unix_ms`, `lease_left_ms` and `waiters` (of the first holder; `null` where unknown
//! or free) and `holders`, a list of every holder's `token`, `kind` and `owner`. It exits 0 whether the lock is held or free.
//!
//! # `lockkit break`
//!
//! Frees a lock whose holder is stuck but alive: prints who holds it (as `lockkit status`),
//! asks for confirmation on the terminal (`--yes` skips it; without a terminal and without
//! `--yes` it refuses with exit 64), breaks every hold of the name in the store and prints
//! each hold it broke. The holder's guard is signalled lost (at once on ZooKeeper, at its next
//! renewal on Redis, at its next check on files), and the next owner's fencing token is
//! greater. Exits 1 when there is nothing to break (the lock is free), 2 when the
//! confirmation was declined.
//!
//! # `lockkit bench`
//!
//! Measures the store against its raw round trip (Redis PING; ZooKeeper `exists` and
//! create+delete of an ephemeral node; no floor for `mem://` and `file://`): uncontended
//! cycles, `--clients` clients on one lock, on backends that have them a read-write lock
//! (a read cycle, eight readers at once, seven readers and a writer) and a semaphore (eight
//! clients, three permits), `--locks` held locks' upkeep, and `--locks` distinct locks one
//! after another and at once. Prints a table, or one JSON object with
//! `--json`. See docs/PERFORMANCE.md.
//!
//! # Exit status
//!
//! | code | meaning |
//! | --- | --- |
//! | the command's | `run`: the command ran to its end while the lock was held |
//! | 0 | `status`: the lock's state was read (held or free); `break`: the lock was broken; `--help`, `--version` |
//! | 1 | `break`: nothing to break, the lock is free |
//! | 2 | `break`: the confirmation was declined |
//! | 64 | usage error: bad arguments, bad URL, bad duration, bad lock name, `--lease` on a backend without a lease, `--shared` or `--permits` on a backend without them, `--permits` other than the count in use |
//! | 69 | the store could not be reached |
//! | 70 | the lock was lost while the command ran; the command was stopped |
//! | 71 | an operating-system failure of `lockkit` itself |
//! | 73 | `--no-wait`: the lock is held by another owner |
//! | 75 | `--wait`: the lock was not granted in time |
//! | 76 | the store answered with an error (for example: permission denied) |
//! | 126 | the command could not be executed |
//! | 127 | the command was not found |
//! | 129, 130, 143 | `lockkit` got SIGHUP, SIGINT or SIGTERM; the command was stopped and the lock released |
//!
//! Messages go to stderr as one line starting with `lockkit: `, naming the lock and the
//! store's URL with any password replaced by `***`.

mod bench;
mod break_lock;
mod child;
mod cli;
mod deadline_file;
mod exit;
mod leader;
mod metrics;
mod progress;
mod run;
mod signals;
mod status;
mod supervise;
mod target;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // Help and version go to stdout with 0; every usage error is 64, not clap's 2.
            let code = if error.use_stderr() { exit::USAGE } else { 0 };
            let _ = error.print();
            return ExitCode::from(code);
        }
    };
    let command = match cli.command {
        // The re-executed lockkit that starts the command: no runtime of ours, it may exec.
        Command::Child(args) => return ExitCode::from(supervise::main(args)),
        command => command,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("lockkit: cannot start the async runtime: {error}");
            return ExitCode::from(exit::OS_ERROR);
        }
    };
    let result = runtime.block_on(async {
        match command {
            Command::Run(args) => run::run(args).await,
            Command::Elect(args) => run::elect(args).await,
            Command::Leader(args) => leader::leader(args).await,
            Command::Status(args) => status::status(args).await,
            Command::Break(args) => break_lock::break_lock(args).await,
            Command::Bench(args) => bench::bench(args).await,
            // Handled above, before the runtime starts.
            Command::Child(_) => Err(exit::Failure::new(exit::OS_ERROR, "__child runs without a runtime")),
        }
    });
    // Background tasks (connections, watchdogs) have nothing left to do once the lock is
    // released; do not wait for them.
    runtime.shutdown_background();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("lockkit: {failure}");
            ExitCode::from(failure.code)
        }
    }
}
