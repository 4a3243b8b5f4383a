//! The one error type of lockkit.
//!
//! Every backend maps its own failures into [`Error`] so that application code handles one
//! enum whatever store it runs on. Each variant names the backend and, where there is one,
//! the lock and the store's (redacted) address, so that a log line alone says what failed
//! where. A message never repeats its source: the cause is the [`source`](std::error::Error::source)
//! of the error, typed, as reqwest and hyper do it; print the whole chain (`{:#}` with anyhow,
//! or a loop over `source()`) to see it.

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
    /// The hold reached its maximum hold
    /// ([`AcquireOptions::with_max_hold`](crate::AcquireOptions::with_max_hold), or the
    /// provider's `max_hold` setting): renewal stopped, and its record expires with its lease.
    MaxHoldReached,
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
            Self::MaxHoldReached => f.write_str(
                "the hold reached its maximum hold and renewal stopped; release the lock sooner, or raise max_hold (AcquireOptions::with_max_hold, or the provider's max_hold option)",
            ),
            Self::Other(why) => f.write_str(why),
        }
    }
}

/// Every way a lockkit operation can fail.
///
/// The enum is `#[non_exhaustive]`: match the variants you act on and keep a catch-all arm.
/// [`Error::is_retryable`] says whether a new attempt may succeed, and
/// [`Error::is_connect`] whether the store could not be reached (a [`Timeout`](Self::Timeout)
/// whose wait ended while the store was unreachable included).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock was not granted before the timeout passed. Nothing is left queued.
    ///
    /// When the wait ended while the store was failing, `source` is the last failure: a
    /// timeout against an unreachable store says so, and [`is_connect`](Self::is_connect)
    /// is true.
    #[error("{backend}: timed out after {waited:?} waiting for lock {:?}{}", .lock.as_str(), timeout_cause(.source.as_deref()))]
    Timeout {
        /// The backend that was asked.
        backend: &'static str,
        /// The lock that was waited for.
        lock: LockName,
        /// How long the caller waited.
        waited: Duration,
        /// The last failure of the store during the wait, when the wait ended on one.
        #[source]
        source: Option<Box<Error>>,
    },
    /// The hold can no longer be guaranteed; another owner may hold the lock now.
    #[error("{backend}: lock {:?} was lost: {reason}", .lock.as_str())]
    LockLost {
        /// The backend that held the lock.
        backend: &'static str,
        /// The lock that was lost.
        lock: LockName,
        /// Why the hold ended.
        reason: LossReason,
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
    /// The backend does not offer what was asked (a kind of hold it does not declare in its
    /// [`Capabilities`](crate::Capabilities), or an operation such as `inspect`). Retrying
    /// will not help; another backend might.
    #[error("{backend}: {what} is not supported by this backend{}", lock_suffix(.lock.as_ref()))]
    Unsupported {
        /// The backend that was asked.
        backend: &'static str,
        /// The lock concerned, when there was one.
        lock: Option<LockName>,
        /// What is not supported, as a noun phrase ("a read hold", "inspect").
        what: String,
    },
    /// The request conflicts with how the lock is held or used: an upgrade from a read hold
    /// to a write hold, a semaphore asked for with another permit count than the one in use,
    /// a name in use as another kind of lock. Retrying the same request will not help; the
    /// message says what to change.
    #[error("{backend}: conflict{}: {what}", lock_suffix(.lock.as_ref()))]
    Conflict {
        /// The backend that was asked.
        backend: &'static str,
        /// The lock concerned, when there was one.
        lock: Option<LockName>,
        /// What conflicts and what to do instead.
        what: String,
    },
    /// The store could not be reached or the connection broke. Retrying may succeed.
    #[error("{backend}: connection problem{}{}{}", server_suffix(.server.as_deref()), lock_suffix(.lock.as_ref()), context_suffix(.context.as_deref()))]
    Connection {
        /// The backend whose connection failed.
        backend: &'static str,
        /// The store's address without credentials, when the backend has one.
        server: Option<String>,
        /// The lock being operated on, when there was one.
        lock: Option<LockName>,
        /// What was being done, when it adds to the source.
        context: Option<String>,
        /// The underlying failure.
        #[source]
        source: BoxError,
    },
    /// The store answered with an error that retrying will not fix.
    #[error("{backend}: store error{}{}{}", server_suffix(.server.as_deref()), lock_suffix(.lock.as_ref()), context_suffix(.context.as_deref()))]
    Backend {
        /// The backend that failed.
        backend: &'static str,
        /// The store's address without credentials, when the backend has one.
        server: Option<String>,
        /// The lock being operated on, when there was one.
        lock: Option<LockName>,
        /// What was being done, when it adds to the source.
        context: Option<String>,
        /// The underlying failure.
        #[source]
        source: BoxError,
    },
}

fn lock_suffix(lock: Option<&LockName>) -> String {
    lock.map(|lock| format!(" on lock {:?}", lock.as_str())).unwrap_or_default()
}

fn server_suffix(server: Option<&str>) -> String {
    server.map(|server| format!(" with {server}")).unwrap_or_default()
}

fn context_suffix(context: Option<&str>) -> String {
    context.map(|context| format!(": {context}")).unwrap_or_default()
}

fn timeout_cause(source: Option<&Error>) -> &'static str {
    match source {
        None => "",
        Some(error) if error.is_connect() => "; the store was unreachable",
        Some(_) => "; the store failed",
    }
}

impl Error {
    /// Whether a new attempt of the same operation may succeed: connection trouble and
    /// timeouts. A lost lock, a bad name, bad configuration, an unsupported request or an
    /// error the store answered with will not go away by trying again.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Connection { .. } | Self::Timeout { .. })
    }

    /// Whether the store could not be reached: a [`Connection`](Self::Connection) error, or
    /// a [`Timeout`](Self::Timeout) whose wait ended while the store was unreachable. A
    /// command-line tool tells "unreachable" from "busy" with it.
    pub fn is_connect(&self) -> bool {
        match self {
            Self::Connection { .. } => true,
            Self::Timeout { source: Some(source), .. } => source.is_connect(),
            _ => false,
        }
    }

    /// Whether this is a [`Timeout`](Self::Timeout).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout { .. })
    }

    /// The lock this error concerns, when it concerns one.
    pub fn lock(&self) -> Option<&LockName> {
        match self {
            Self::Timeout { lock, .. } | Self::LockLost { lock, .. } => Some(lock),
            Self::Connection { lock, .. }
            | Self::Backend { lock, .. }
            | Self::Unsupported { lock, .. }
            | Self::Conflict { lock, .. } => lock.as_ref(),
            Self::InvalidName { .. } | Self::InvalidConfig { .. } => None,
        }
    }

    /// What to change, for an [`Error::InvalidConfig`] (its message); `None` for any other
    /// error.
    pub fn config_message(&self) -> Option<&str> {
        match self {
            Self::InvalidConfig { message, .. } => Some(message),
            _ => None,
        }
    }

    /// The name of the backend this error comes from (`"lockkit"` for a bad lock name,
    /// which no backend was asked about).
    pub fn backend_name(&self) -> &'static str {
        match self {
            Self::Timeout { backend, .. }
            | Self::LockLost { backend, .. }
            | Self::InvalidConfig { backend, .. }
            | Self::Unsupported { backend, .. }
            | Self::Conflict { backend, .. }
            | Self::Connection { backend, .. }
            | Self::Backend { backend, .. } => backend,
            Self::InvalidName { .. } => "lockkit",
        }
    }

    /// Builds an [`Error::Connection`] from any error of a client library.
    pub fn connection(backend: &'static str, lock: Option<&LockName>, source: impl Into<BoxError>) -> Self {
        Self::Connection { backend, server: None, lock: lock.cloned(), context: None, source: source.into() }
    }

    /// Builds an [`Error::Backend`] from any error of a client library.
    pub fn backend(backend: &'static str, lock: Option<&LockName>, source: impl Into<BoxError>) -> Self {
        Self::Backend { backend, server: None, lock: lock.cloned(), context: None, source: source.into() }
    }

    /// Builds an [`Error::Connection`] when `retryable` (the connection broke, the store is
    /// unavailable or shedding load: trying again may succeed), else an [`Error::Backend`]:
    /// how a backend maps its client library's errors, after classifying them.
    pub fn from_client(
        backend: &'static str,
        lock: Option<&LockName>,
        source: impl Into<BoxError>,
        retryable: bool,
    ) -> Self {
        if retryable { Self::connection(backend, lock, source) } else { Self::backend(backend, lock, source) }
    }

    /// Builds an [`Error::Unsupported`]: `what` is a noun phrase such as "a read hold".
    pub fn unsupported(backend: &'static str, lock: Option<&LockName>, what: impl Into<String>) -> Self {
        Self::Unsupported { backend, lock: lock.cloned(), what: what.into() }
    }

    /// Builds an [`Error::Conflict`]: `what` says what conflicts and what to do instead.
    pub fn conflict(backend: &'static str, lock: Option<&LockName>, what: impl Into<String>) -> Self {
        Self::Conflict { backend, lock: lock.cloned(), what: what.into() }
    }

    /// Builds an [`Error::InvalidConfig`] whose message says what to change.
    pub fn invalid_config(backend: &'static str, message: impl Into<String>) -> Self {
        Self::InvalidConfig { backend, message: message.into() }
    }

    /// Builds an [`Error::LockLost`].
    pub fn lost(backend: &'static str, lock: &LockName, reason: LossReason) -> Self {
        Self::LockLost { backend, lock: lock.clone(), reason }
    }

    /// Builds an [`Error::Timeout`] after a wait of `waited`, carrying the store's last
    /// failure when the wait ended on one.
    pub fn timeout(backend: &'static str, lock: &LockName, waited: Duration, last: Option<Error>) -> Self {
        Self::Timeout { backend, lock: lock.clone(), waited, source: last.map(Box::new) }
    }

    /// Says what was being done when a [`Connection`](Self::Connection) or
    /// [`Backend`](Self::Backend) error happened ("open lock file /run/lock/a.lock"), next to
    /// the typed source. Other variants are returned unchanged.
    #[must_use]
    pub fn with_context(mut self, what: impl Into<String>) -> Self {
        if let Self::Connection { context, .. } | Self::Backend { context, .. } = &mut self {
            *context = Some(what.into());
        }
        self
    }

    /// Names the store's address (already redacted) in a [`Connection`](Self::Connection) or
    /// [`Backend`](Self::Backend) error that does not name one yet, and in the source of a
    /// [`Timeout`](Self::Timeout). Other variants are returned unchanged.
    #[must_use]
    pub fn with_server(mut self, address: Option<&str>) -> Self {
        let Some(address) = address else { return self };
        match &mut self {
            Self::Connection { server, .. } | Self::Backend { server, .. } if server.is_none() => {
                *server = Some(address.to_owned());
            }
            Self::Timeout { source, .. } => {
                *source = source.take().map(|inner| Box::new(inner.with_server(Some(address))));
            }
            _ => {}
        }
        self
    }
}

/// How a name is in use, as a backend's records of it say: as a lock (a mutex or a
/// read-write lock, whose writer a mutex is), as a semaphore of a given count, or as an
/// election. Two uses of one name at once are a conflict; [`NameUse::conflict_with`] says it
/// in the words every backend uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameUse {
    /// A mutex or a read-write lock.
    Lock,
    /// A semaphore of this many permits.
    Permits(std::num::NonZeroU32),
    /// An election.
    Election,
}

impl NameUse {
    /// What [`Error::Conflict`] says to a contender of this use behind a holder or waiter of
    /// use `current`: what is in the way and what to change.
    pub fn conflict_with(self, current: NameUse) -> String {
        match (self, current) {
            (NameUse::Permits(asked), NameUse::Permits(current)) => format!(
                "the semaphore is in use with {current} permits and this handle asks for {asked}; every user of a semaphore must give the same count"
            ),
            (NameUse::Permits(_), NameUse::Lock) => {
                "the name is in use as a lock (a mutex or a read-write lock); give the semaphore another name"
                    .to_owned()
            }
            (NameUse::Lock, NameUse::Permits(current)) => {
                format!("the name is in use as a semaphore of {current} permits; give the lock another name")
            }
            (NameUse::Election, NameUse::Lock) => {
                "the name is in use as a lock (a mutex or a read-write lock); give the election another name".to_owned()
            }
            (NameUse::Election, NameUse::Permits(current)) => {
                format!("the name is in use as a semaphore of {current} permits; give the election another name")
            }
            (NameUse::Lock, NameUse::Election) => {
                "the name is in use as an election; give the lock another name".to_owned()
            }
            (NameUse::Permits(_), NameUse::Election) => {
                "the name is in use as an election; give the semaphore another name".to_owned()
            }
            (NameUse::Lock, NameUse::Lock) | (NameUse::Election, NameUse::Election) => {
                "the name is in use as another kind of lock; give this one another name".to_owned()
            }
        }
    }
}

/// `error` with its sources, `: `-separated: the whole story of a client library's error,
/// whose `Display` often names only the kind, for a backend that reads it (a hint from a
/// server's message) or a program that shows it. A source whose message is already in the text
/// (a wrapper that repeats its cause) is left out, so that nothing is said twice.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::error::Error as _;

    use super::*;

    fn chain(error: &dyn std::error::Error) -> Vec<String> {
        std::iter::successors(Some(error), |&error| error.source()).map(ToString::to_string).collect()
    }

    #[test]
    fn the_chain_says_each_cause_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("handshake failed: {0}")]
        struct Repeats(#[source] std::io::Error);
        let expired = std::io::Error::other("certificate expired");
        let error = Error::connection("redis", None, Repeats(expired));
        assert_eq!(error_chain(&error), "redis: connection problem: handshake failed: certificate expired");
    }

    #[test]
    fn messages_do_not_repeat_their_source() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let lock = LockName::new("orders/42").unwrap();
        let error = Error::connection("redis", Some(&lock), refused).with_server(Some("redis://127.0.0.1:6379"));
        let lines = chain(&error);
        assert_eq!(lines[0], "redis: connection problem with redis://127.0.0.1:6379 on lock \"orders/42\"");
        assert_eq!(lines.len(), 2);
        assert!(!lines[0].contains(&lines[1]), "{lines:?}");
        assert!(error.source().unwrap().downcast_ref::<std::io::Error>().is_some(), "the source stays typed");
    }

    #[test]
    fn a_timeout_keeps_the_stores_last_failure() {
        let lock = LockName::new("a").unwrap();
        let refused =
            Error::connection("redis", Some(&lock), std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let timeout =
            Error::timeout("redis", &lock, Duration::from_millis(300), Some(refused)).with_server(Some("redis://h:1"));
        assert!(timeout.is_timeout() && timeout.is_connect() && timeout.is_retryable());
        assert!(timeout.to_string().ends_with("the store was unreachable"), "{timeout}");
        assert_eq!(chain(&timeout).len(), 3, "{:?}", chain(&timeout));
        assert!(chain(&timeout)[1].contains("redis://h:1"));
        let plain = Error::timeout("redis", &lock, Duration::from_millis(300), None);
        assert!(!plain.is_connect() && plain.source().is_none());
    }

    #[test]
    fn context_sits_between_the_message_and_the_source() {
        let error = Error::backend("file", None, std::io::Error::from(std::io::ErrorKind::PermissionDenied))
            .with_context("open lock file /run/x.lock");
        assert_eq!(error.to_string(), "file: store error: open lock file /run/x.lock");
        assert!(!error.is_retryable() && !error.is_connect());
    }
}
