//! Mapping zookeeper-client errors into the one lockkit error type.

use lockkit_core::{Error, LockName, LossReason};
use zookeeper_client as zk;

/// The backend name in every message.
pub(crate) const BACKEND: &str = "zk";

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
