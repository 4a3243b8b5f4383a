//! The line protocol between the parent of a multi-process run and its workers (and the
//! commands of a CLI run): the prefix of every line, the environment a worker is started
//! with, how a line is said, and the wall clock the lines carry (comparable across the
//! processes of one machine). A leaf: it imports nothing of the run.

use std::io::Write;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The prefix of every protocol line a worker prints.
pub(crate) const PREFIX: &str = "@pchaos ";
/// Set in a worker's environment: its id.
pub(crate) const ID_ENV: &str = "LOCKKIT_PROCESS_CHAOS_WORKER";
/// The store's URL.
pub(crate) const URL_ENV: &str = "LOCKKIT_PROCESS_CHAOS_URL";
/// The lock names, separated by `,`.
pub(crate) const NAMES_ENV: &str = "LOCKKIT_PROCESS_CHAOS_NAMES";
/// The run's seed.
pub(crate) const SEED_ENV: &str = "LOCKKIT_PROCESS_CHAOS_WORKER_SEED";
/// Set to `1` to plant the bug: the worker ignores its guard's deadline.
pub(crate) const PLANTED_ENV: &str = "LOCKKIT_PROCESS_CHAOS_PLANTED";
/// A fenced run: the sink's target (the test's opener knows what it means).
pub(crate) const SINK_ENV: &str = "LOCKKIT_PROCESS_CHAOS_SINK";
/// A fenced run: set to `1` when the fence is bypassed (the planted bug).
pub(crate) const BYPASS_ENV: &str = "LOCKKIT_PROCESS_CHAOS_BYPASS";

/// Nanoseconds since the Unix epoch at `at` (a comparable clock across the processes of one
/// machine).
pub(crate) fn wall_ns(at: Instant) -> u64 {
    let (now, wall) = (Instant::now(), SystemTime::now());
    let wall = wall.duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let wall = u64::try_from(wall).unwrap_or(u64::MAX);
    if at >= now {
        wall.saturating_add(u64::try_from((at - now).as_nanos()).unwrap_or(u64::MAX))
    } else {
        wall.saturating_sub(u64::try_from((now - at).as_nanos()).unwrap_or(u64::MAX))
    }
}

/// Prints one protocol line; false when stdout is gone.
pub(crate) fn say(line: &str) -> bool {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{PREFIX}{line}").and_then(|()| out.flush()).is_ok()
}

/// Nanoseconds since the Unix epoch now (comparable with the workers' times).
pub(crate) fn now_ns() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)).unwrap_or(u64::MAX)
}
