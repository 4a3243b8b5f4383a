//! Mapping etcd-client's errors onto lockkit's.

use lockkit_core::{Error, LockName};

use crate::BACKEND;
use crate::config::EtcdConfig;

/// The lockkit error for an etcd-client error: transport failures and unavailable members
/// are retryable connection errors, everything else a backend error.
pub(crate) fn to_error(error: etcd_client::Error, lock: Option<&LockName>) -> Error {
    use etcd_client::Error as E;
    use tonic::Code;
    match &error {
        E::TransportError(_) | E::IoError(_) | E::LeaseKeepAliveError(_) | E::WatchError(_) => {
            Error::connection(BACKEND, lock, error)
        }
        E::GRpcStatus(status)
            if matches!(
                status.code(),
                Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
            ) =>
        {
            Error::connection(BACKEND, lock, error)
        }
        _ => Error::backend(BACKEND, lock, error),
    }
}

/// The error for members that did not answer in time.
pub(crate) fn unreachable(config: &EtcdConfig, lock: Option<&LockName>) -> Error {
    Error::connection(
        BACKEND,
        lock,
        format!(
            "no etcd member answered within {:?}: check that etcd runs at {} and the endpoints are right",
            config.connect_timeout,
            config.endpoints.join(",")
        ),
    )
    .with_server(Some(&config.address))
}
