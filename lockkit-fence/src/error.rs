//! [`FenceError`]: why a fenced write or read did not happen.

use lockkit_core::{BoxError, FencingToken, LockId};

/// Why a fenced operation was refused or failed. Every refusal changed nothing: a sink checks
/// before it writes, in the same atomic step.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// The token is below the highest the resource has accepted for a write: a newer holder of
    /// the lock has written since, so this holder lost the lock (paused, cut off, expired).
    /// Stop the work; nothing was written.
    #[error(
        "resource {resource:?}: stale fencing token {token}; the resource has accepted a write with token {highest}, so a newer holder of the lock has written since: stop, nothing was written"
    )]
    Stale {
        /// The resource.
        resource: String,
        /// The token the operation carried.
        token: FencingToken,
        /// The highest token the resource has accepted.
        highest: FencingToken,
    },
    /// The resource is bound to another lock (contract behaviour 31): tokens of two locks
    /// cannot be compared, so the operation is refused rather than compared. Write it under
    /// the lock that guards it, or move the resource to this lock by deleting its fence state.
    #[error(
        "resource {resource:?} is fenced by lock {expected}, not by {got}: tokens of different locks cannot be compared; write it under the lock {expected}"
    )]
    ForeignLock {
        /// The resource.
        resource: String,
        /// The lock the resource is bound to, as the sink keeps it (`STORE#NAME`).
        expected: String,
        /// The lock of the operation's fence.
        got: LockId,
    },
    /// The sink's store has not been set up: `how` says which call or SQL creates what is
    /// missing. Nothing was written.
    #[error("the {sink} fence is not set up: {how}")]
    NotSetUp {
        /// The sink: `postgres`, `file`, ….
        sink: &'static str,
        /// What creates what is missing.
        how: String,
    },
    /// The operation cannot be made as given (a resource name that is empty or over the limit,
    /// a read fence used to write, a token the store cannot hold); `message` says what to
    /// change. Nothing was written.
    #[error("{message}")]
    InvalidInput {
        /// What is wrong and what to change.
        message: String,
    },
    /// The store failed or could not be reached. After a connection error the outcome of a
    /// write is unknown (it may have been applied); [`FenceSink::state`](crate::FenceSink::state)
    /// or a read tells.
    #[error("the {sink} fence's store failed: {message}")]
    Store {
        /// The sink: `postgres`, `redis`, `file`, ….
        sink: &'static str,
        /// What failed.
        message: String,
        /// The store client's error.
        #[source]
        source: Option<BoxError>,
    },
}

impl FenceError {
    /// Whether this is [`FenceError::Stale`]: the lock was lost and a newer holder wrote.
    pub fn is_stale(&self) -> bool {
        matches!(self, Self::Stale { .. })
    }

    /// An [`InvalidInput`](Self::InvalidInput) error.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidInput { message: message.into() }
    }

    /// A [`Store`](Self::Store) error of `sink` with its cause.
    pub fn store(sink: &'static str, message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Store { sink, message: message.into(), source: Some(source.into()) }
    }
}
