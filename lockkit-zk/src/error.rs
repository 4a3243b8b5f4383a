//! Mapping zookeeper-client errors into the one lockkit error type, and the few failures of
//! this backend that are not zookeeper-client errors.

use lockkit_core::{Error, LockName, LossReason};
use zookeeper_client as zk;

/// The backend name in every message.
pub(crate) const BACKEND: &str = "zk";

/// Failures of this backend that zookeeper-client does not report itself. Kept as the typed
/// source of an [`Error`], so that a message never carries its cause as text.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// The session's task was dropped with the Tokio runtime it ran on: the session cannot
    /// send or receive anything more, and the server expires it after its timeout.
    #[error("the ZooKeeper session ended with the Tokio runtime it ran on")]
    RuntimeGone,
    /// A session is opened on the current Tokio runtime, and there was none.
    #[error("a ZooKeeper session runs on a Tokio runtime, and this was called outside one")]
    NoRuntime,
    /// A session is being opened and no server has answered yet.
    #[error("no ZooKeeper server has answered yet")]
    NoAnswerYet,
    /// The queue of a lock changed under every look at it.
    #[error("the lock's queue changed under every look at it")]
    QueueKeptChanging,
    /// A lock node's creation zxid cannot be a fencing token.
    #[error("the lock node has the invalid creation zxid {0}")]
    InvalidCzxid(i64),
}

/// Maps a client error: connection trouble (including an expired session, after which the
/// provider opens a new one) is retryable [`Error::Connection`], anything else
/// [`Error::Backend`].
pub(crate) fn map(error: zk::Error, lock: Option<&LockName>) -> Error {
    if is_connection(&error) { Error::connection(BACKEND, lock, error) } else { Error::backend(BACKEND, lock, error) }
}

/// Whether the request's outcome is unknown because the connection broke: the client reports
/// `ConnectionLoss` for a closed connection, and a custom error (the I/O error, or "no
/// response from connection") for a reset or silent one.
pub(crate) fn is_loss(error: &zk::Error) -> bool {
    matches!(error, zk::Error::ConnectionLoss | zk::Error::Custom(_))
}

/// Whether the error is about the connection or session rather than the request.
pub(crate) fn is_connection(error: &zk::Error) -> bool {
    is_loss(error)
        || matches!(
            error,
            zk::Error::ConnectionLoss
                | zk::Error::Timeout
                | zk::Error::NoHosts
                | zk::Error::SessionExpired
                | zk::Error::SessionMoved
                | zk::Error::ClientClosed
                | zk::Error::Throttled
        )
}

/// The loss a terminal session state means for the holds of that session.
pub(crate) fn loss_for_state(state: zk::SessionState) -> LossReason {
    match state {
        zk::SessionState::Closed => LossReason::ClientClosed,
        zk::SessionState::AuthFailed => LossReason::AuthFailed,
        _ => LossReason::SessionExpired,
    }
}

/// The client error a session state stands for, as the typed source of an error raised when
/// a session event ends a wait.
pub(crate) fn state_error(state: zk::SessionState) -> zk::Error {
    match state {
        zk::SessionState::Expired => zk::Error::SessionExpired,
        zk::SessionState::Closed => zk::Error::ClientClosed,
        zk::SessionState::AuthFailed => zk::Error::AuthFailed,
        _ => zk::Error::ConnectionLoss,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_states_map_to_retryable_errors_except_refused_credentials() {
        for state in [zk::SessionState::Expired, zk::SessionState::Closed, zk::SessionState::Disconnected] {
            assert!(map(state_error(state), None).is_retryable(), "{state:?}");
        }
        assert!(!map(state_error(zk::SessionState::AuthFailed), None).is_retryable());
        assert_eq!(loss_for_state(zk::SessionState::AuthFailed), LossReason::AuthFailed);
    }
}
