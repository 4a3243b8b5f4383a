//! The failures of this crate that are not the Redis client's, kept typed as the sources of
//! lockkit's errors (a Redis client error is kept as it is: a [`redis::RedisError`]).

use std::time::Duration;

/// What went wrong, when the Redis client did not say.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum Failure {
    /// A command got no reply in time; it may or may not have run.
    #[error("no reply within the response timeout of {0:?}; the outcome is unknown")]
    NoReply(Duration),
    /// The command connection was not made yet when the wait ended.
    #[error("no connection to the server was made yet")]
    NotConnected,
    /// A call was made outside every Tokio runtime (a future polled off-runtime).
    #[error("no Tokio runtime is running on this thread; the lease frees what could not be released")]
    NoRuntime,
    /// Fewer replicas than asked for acknowledged a write within the time allowed.
    #[error(
        "{acked} of the {wanted} replicas asked for (the `replicas` setting) acknowledged {what} within {timeout:?}; check the replicas' links (INFO replication on the primary), raise replicas_timeout, or lower replicas"
    )]
    NotReplicated {
        /// What was not acknowledged: a grant (released again) or a renewal.
        what: &'static str,
        /// How many replicas acknowledged it.
        acked: i64,
        /// How many were asked for.
        wanted: u32,
        /// How long `WAIT` waited.
        timeout: Duration,
    },
    /// A script or command answered something this version does not read.
    #[error("{command} answered {reply}, which this version of lockkit-redis does not read")]
    UnexpectedReply {
        /// The script or command.
        command: &'static str,
        /// What it answered, as the client printed it.
        reply: String,
    },
}
