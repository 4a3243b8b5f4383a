//! Reading replies, and Redis errors as lockkit's: what leaves the outcome unknown or may
//! pass with time is a retryable connection error, the rest a backend error.

use lockkit_core::{Error, LockName, Result};
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use crate::BACKEND;

/// Reads a reply of a pipeline as a `T`.
pub(super) fn parse<T: redis::FromRedisValue>(value: Value) -> Result<T> {
    redis::from_redis_value(value).map_err(|error| map_error(RedisError::from(error), None))
}
/// Maps a Redis error: anything that leaves the outcome unknown or may pass with time
/// (I/O, timeouts, a loading or failing-over server) is a retryable connection error; the
/// rest (permissions, wrong types, script errors) is a backend error.
pub(crate) fn map_error(error: RedisError, lock: Option<&LockName>) -> Error {
    let transient = error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || matches!(
            error.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
                    | ServerErrorKind::Moved
                    | ServerErrorKind::Ask
            )
        )
        || matches!(error.kind(), ErrorKind::ClusterConnectionNotFound);
    if transient { Error::connection(BACKEND, lock, error) } else { Error::backend(BACKEND, lock, error) }
}
