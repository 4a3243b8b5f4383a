//! Mapping etcd-client's errors onto lockkit's.

use lockkit_core::config::Credentials;
use lockkit_core::{Error, LockName};

use crate::BACKEND;
use crate::config::EtcdConfig;

/// The lockkit error for an etcd-client error: transport failures (an HTTP/2 connection
/// ended by a GOAWAY included), unavailable members, a member shedding load (`etcdserver: too
/// many requests`, when its applied index lags the committed one by more than 5,000 entries)
/// and a refused authentication token (expired or outdated: the session authenticates again)
/// are retryable connection errors, everything else a backend error.
pub(crate) fn to_error(error: etcd_client::Error, lock: Option<&LockName>) -> Error {
    let retryable = is_retryable(&error);
    Error::from_client(BACKEND, lock, error, retryable)
}

/// Whether trying again may succeed: see [`to_error`].
fn is_retryable(error: &etcd_client::Error) -> bool {
    use etcd_client::Error as E;
    use tonic::Code;
    match error {
        E::TransportError(_) | E::IoError(_) | E::LeaseKeepAliveError(_) | E::WatchError(_) => true,
        // A shedding member, an expired or outdated authentication token (the session
        // authenticates again, session.rs, after which the request passes), or the HTTP/2
        // connection ended under the request (hyper's GOAWAY "too_many_internal_resets",
        // ENHANCE_YOUR_CALM, comes as ResourceExhausted: a new connection serves the retry).
        E::GRpcStatus(status) => {
            matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown)
                || status.message().starts_with("h2 protocol error")
                || is_shedding(error)
                || is_token_refused(error)
        }
        _ => false,
    }
}

/// Whether a member refused the request because it sheds load (`etcdserver: too many
/// requests`, when its applied index lags the committed one by more than 5,000 entries): it
/// answers, and trying again after a pause succeeds once its backlog drains.
pub(crate) fn is_shedding(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status) if status.message().contains("too many requests"))
}

/// Whether etcd refused a request for the client's authentication token rather than for what
/// it asks: the token expired (etcd forgets a simple token unused for `--auth-token-ttl`, 300 s
/// by default, and a JWT at its expiry: `etcdserver: invalid auth token`), or it predates a
/// change of users or roles (`etcdserver: revision of auth store is old`). The request was
/// not applied; a new token cures both. (`Session::token_refused` in session.rs adds the refusal of a
/// request sent without a token while a renewal was under way.)
pub(crate) fn is_token_refused(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status)
        if status.message().contains("invalid auth token") || status.message().contains("revision of auth store is old"))
}

/// The error for members that did not answer in time.
pub(crate) fn unreachable(config: &EtcdConfig, lock: Option<&LockName>) -> Error {
    Error::connection(
        BACKEND,
        lock,
        format!(
            "no etcd member answered within {:?}: check that etcd runs at {} and the endpoints are right{}",
            config.connect_timeout,
            config.endpoints.join(","),
            if config.tls.is_some() {
                " (with TLS: that they serve TLS there, and that they accept this client: tls_client_certificate)"
            } else {
                " (members that serve TLS need an etcds:// URL)"
            }
        ),
    )
    .with_server(Some(&config.address))
}

/// The lockkit error for an etcd-client error while the provider connects (connecting,
/// authenticating, granting the lease): [`to_error`]'s, with what to change when TLS or the
/// credentials are what failed.
pub(crate) fn connect_error(error: etcd_client::Error, config: &EtcdConfig) -> Error {
    let text = lockkit_core::error_chain(&error);
    let address = Some(config.address.as_str());
    if let Some(hint) = auth_hint(&text, config) {
        return Error::backend(BACKEND, None, error).with_server(address).with_context(hint);
    }
    if let Some(tls) = &config.tls {
        if text.contains("certificate") && !text.contains("CertificateRequired") {
            return Error::backend(BACKEND, None, error).with_server(address).with_context(
                "the members' TLS certificate is not trusted: give the CA that signed it \
                 (tls_root_certificate=/path/ca.pem in the URL, or tls_root_certificate() on the builder)",
            );
        }
        let converted = to_error(error, None).with_server(address);
        if converted.is_retryable() {
            let hint = if tls.client.is_none() {
                "the TLS connection failed: if the members require client certificates (--client-cert-auth), \
                 give tls_client_certificate and tls_client_key; check that they serve TLS on these ports"
            } else {
                "the TLS connection failed: check that the members trust the CA of tls_client_certificate \
                 (their --trusted-ca-file) and that they serve TLS on these ports"
            };
            return converted.with_context(hint);
        }
        return converted;
    }
    let converted = to_error(error, None).with_server(address);
    if converted.is_retryable() {
        return converted.with_context(
            "the connection failed: check that etcd runs at these members (members that serve TLS need an etcds:// URL)",
        );
    }
    converted
}

/// What to change when etcd refused the credentials or the permissions, from the text of its
/// error; `None` for other errors.
fn auth_hint(text: &str, config: &EtcdConfig) -> Option<String> {
    let user = config.credentials.as_ref().map_or("", Credentials::user);
    if text.contains("authentication failed") || text.contains("invalid user ID or password") {
        return Some(format!(
            "etcd refused the credentials of user {user:?} (an unknown user or a wrong password): \
             check the user name and password in the URL (etcd://user:password@host:2379)"
        ));
    }
    if text.contains("authentication is not enabled") {
        return Some(format!(
            "credentials were given (user {user:?}) but authentication is not enabled on these members: \
             remove user:password from the URL, or enable authentication in etcd"
        ));
    }
    if text.contains("user name is empty") || text.contains("user name not found") {
        return Some(
            "authentication is enabled on these members and no credentials were given: \
             write etcd://user:password@host:2379"
                .to_owned(),
        );
    }
    if text.contains("permission denied") {
        let prefix = &config.prefix;
        return Some(format!(
            "user {user:?} may not read and write the keys under prefix \"{prefix}/\": grant one of its roles \
             readwrite permission on that prefix (etcdctl role grant-permission ROLE --prefix=true readwrite {prefix}/), \
             or give a prefix it may use in the URL's path"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_shedding_load_is_retryable_and_a_full_database_is_not() {
        let shedding =
            etcd_client::Error::GRpcStatus(tonic::Status::resource_exhausted("etcdserver: too many requests"));
        assert!(to_error(shedding, None).is_retryable());
        let full = etcd_client::Error::GRpcStatus(tonic::Status::resource_exhausted(
            "etcdserver: mvcc: database space exceeded",
        ));
        assert!(!to_error(full, None).is_retryable());
        let goaway =
            etcd_client::Error::GRpcStatus(tonic::Status::resource_exhausted("h2 protocol error: http2 error"));
        assert!(to_error(goaway, None).is_retryable());
    }
}
