//! The one error type of lockkit.
//!
//! Every backend maps its own failures into [`Error`] so that application code handles one
//! enum whatever store it runs on. Each variant names the backend and, where there is one,
//! the lock, so that a log line alone says what failed where.

use std::fmt;
use std::time::Duration;

use crate::LockName;

/// A boxed error from a backend's client library, kept as the source of an [`Error`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The result type of every fallible lockkit operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a hold ended without being released by its owner.
///
/// Carried by [`Error::LockLost`] and reported by
/// [`LockGuard::lost`](crate::LockGuard::lost).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The local deadline passed before a renewal was confirmed: the store may already
    /// have handed the lock to someone else.
    DeadlineExpired,
    /// The store ended the session or lease that carried the hold.
    SessionExpired,
    /// The lock record was deleted or taken over behind the holder's back.
    RecordGone,
    /// A renewal found the lock owned by someone else.
    OwnedByAnother,
    /// The client that held the lock was closed or killed.
    ClientClosed,
    /// The store restarted and did not keep the hold.
    StoreRestarted,
    /// The connection to the store dropped, and the backend was configured to give up its
    /// holds at once rather than wait for a reconnect within the lease or session.
    ConnectionLost,
    /// The store refused the client's credentials, ending its session.
    AuthFailed,
    /// Any other cause, described by the backend.
    Other(String),
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DeadlineExpired => f.write_str("the hold's local deadline passed without a confirmed renewal"),
            Self::SessionExpired => f.write_str("the session or lease carrying the hold expired"),
            Self::RecordGone => f.write_str("the lock record was deleted behind the holder's back"),
            Self::OwnedByAnother => f.write_str("the lock record is owned by another holder"),
            Self::ClientClosed => f.write_str("the client holding the lock was closed"),
            Self::StoreRestarted => f.write_str("the store restarted without keeping the hold"),
            Self::ConnectionLost => {
                f.write_str("the connection to the store dropped and the backend gives up holds at once")
            }
            Self::AuthFailed => f.write_str("the store refused the client's credentials"),
            Self::Other(why) => f.write_str(why),
        }
    }
}

/// Every way a lockkit operation can fail.
///
/// The enum is `#[non_exhaustive]`: match the variants you act on and keep a catch-all arm.
/// [`Error::is_retryable`] says whether trying the same operation again may succeed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock was not granted before the timeout passed. Nothing is left queued.
    #[error("{backend}: timed out after {waited:?} waiting for lock {lock}")]
    Timeout {
        /// The backend that was asked.
        backend: &'static str,
        /// The lock that was waited for.
        lock: LockName,
        /// How long the caller waited.
        waited: Duration,
    },
    /// The hold can no longer be guaranteed; another owner may hold the lock now.
    #[error("{backend}: lock {lock} was lost: {reason}")]
    LockLost {
        /// The backend that held the lock.
        backend: &'static str,
        /// The lock that was lost.
        lock: LockName,
        /// Why the hold ended.
        reason: LossReason,
    },
    /// The operation needs a hold that this handle does not have.
    #[error("{backend}: lock {lock} is not held by this handle")]
    NotHeld {
        /// The backend that was asked.
        backend: &'static str,
        /// The lock concerned.
        lock: LockName,
    },
    /// The lock name cannot be used; the message says why and what is accepted.
    #[error("invalid lock name {name:?}: {reason}")]
    InvalidName {
        /// The offending name, shortened to its first 64 characters when longer.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A setting is wrong; the message says which and what to change.
    #[error("{backend}: invalid configuration: {message}")]
    InvalidConfig {
        /// The backend being configured.
        backend: &'static str,
        /// What is wrong and what to change.
        message: String,
    },
    /// The store could not be reached or the connection broke. Retrying may succeed.
    #[error("{backend}: connection problem{}: {source}", lock_suffix(.lock))]
    Connection {
        /// The backend whose connection failed.
        backend: &'static str,
        /// The lock being operated on, when there was one.
        lock: Option<LockName>,
        /// The underlying failure.
        #[source]
        source: BoxError,
    },
    /// The store answered with an error that retrying will not fix.
    #[error("{backend}: backend error{}: {source}", lock_suffix(.lock))]
    Backend {
        /// The backend that failed.
        backend: &'static str,
        /// The lock being operated on, when there was one.
        lock: Option<LockName>,
        /// The underlying failure.
        #[source]
        source: BoxError,
    },
}

fn lock_suffix(lock: &Option<LockName>) -> String {
    match lock {
        Some(lock) => format!(" on lock {lock}"),
        None => String::new(),
    }
}

impl Error {
    /// Whether the same operation may succeed if tried again (connection trouble and
    /// timeouts); a lost lock, a bad name or bad configuration will not.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Connection { .. } | Self::Timeout { .. })
    }

    /// The lock this error concerns, when it concerns one.
    pub fn lock(&self) -> Option<&LockName> {
        match self {
            Self::Timeout { lock, .. } | Self::LockLost { lock, .. } | Self::NotHeld { lock, .. } => Some(lock),
            Self::Connection { lock, .. } | Self::Backend { lock, .. } => lock.as_ref(),
            Self::InvalidName { .. } | Self::InvalidConfig { .. } => None,
        }
    }

    /// Builds an [`Error::Connection`] from any error of a client library.
    pub fn connection(backend: &'static str, lock: Option<&LockName>, source: impl Into<BoxError>) -> Self {
        Self::Connection { backend, lock: lock.cloned(), source: source.into() }
    }

    /// Builds an [`Error::Backend`] from any error of a client library.
    pub fn backend(backend: &'static str, lock: Option<&LockName>, source: impl Into<BoxError>) -> Self {
        Self::Backend { backend, lock: lock.cloned(), source: source.into() }
    }

    /// Builds an [`Error::InvalidConfig`] whose message says what to change.
    pub fn invalid_config(backend: &'static str, message: impl Into<String>) -> Self {
        Self::InvalidConfig { backend, message: message.into() }
    }

    /// Builds an [`Error::LockLost`].
    pub fn lost(backend: &'static str, lock: &LockName, reason: LossReason) -> Self {
        Self::LockLost { backend, lock: lock.clone(), reason }
    }
}
