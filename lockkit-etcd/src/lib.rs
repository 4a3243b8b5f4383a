//! The etcd backend of lockkit: mutexes on lease-bound keys ordered by etcd's global
//! revision, with fencing tokens, loss signals and the whole lock contract.
//!
//! # How it works
//!
//! - **One lease per provider.** The provider grants one lease (TTL 10 s by default) and one
//!   task, the watchdog, sends a keep-alive every third of the TTL. Every key of every hold
//!   is bound to that lease. The guard's deadline runs from the *send* time of the last
//!   acknowledged keep-alive plus the TTL minus a drift margin, so a holder that is cut off
//!   or paused is signalled lost before the server can expire the lease and grant the lock
//!   to someone else. A lease the server reports gone ends every hold at once.
//! - **A key per attempt.** Each acquisition writes `<prefix>/<escaped name>/<attempt id>`
//!   in one transaction (put if absent, read the own key and the first-created key). The
//!   lock is granted when no key with a lower create revision remains; a waiter watches the
//!   deletion of the key just ahead of it only (no herd), and re-checks, in a transaction
//!   guarded by its own key's create revision, that nothing is left ahead. So a grant is
//!   confirmed against the own key after every wait, and a waiter is granted in arrival
//!   order (the lock is fair).
//! - **Fencing.** The token is the own key's create revision: etcd's revision increases
//!   with every write of the cluster and is kept across restarts, so tokens keep increasing.
//! - **Lost replies.** The attempt id is in the key, so a retry after a lost reply finds its
//!   own key (the put is conditioned on the key being absent) and never leaks a second one.
//! - **Release and cancellation.** A release deletes the own key conditioned on its create
//!   revision, never by name alone. An acquisition dropped at any await point deletes its
//!   key in the background. `try_acquire` puts its key only when no key is under the lock's
//!   prefix, in the same transaction, so a refusal leaves nothing behind.
//!
//! # Why the KV API and not the Lock service
//!
//! etcd's `Lock` service (v3lock) runs the same recipe on the server, but a `Lock` call blocks
//! until the lock is granted and only then returns the key: an acquisition dropped while it
//! waits (a timeout, a cancelled task) leaves a key that the client never learnt, which holds
//! its place in the queue until the whole lease expires, and a lost reply has the same hole.
//! That breaks cancel safety (behaviour 7 of the contract) and hides waiters from `inspect`.
//! With the KV API the key is chosen by the client (the attempt id), so a dropped or retried
//! acquisition always knows which key to delete or find again.
//!
//! # URLs and settings
//!
//! `etcd://[user:password@]host:port[,host:port…][/prefix][?option=value&…]`, with the
//! options of [`EtcdLockProviderBuilder::option`] ([`OPTIONS`]): `ttl` (whole seconds, from
//! 2 s, etcd's shortest lease, to a day), `drift`, `connect_timeout`, `prefix`.
//!
//! # Credentials
//!
//! `etcd://user:password@…` authenticates as `user` (etcd's Auth API). When it connects, the
//! provider checks that it may read, write and delete the keys under its prefix, with one
//! transaction that writes nothing (its comparison is always false; etcd checks the
//! permissions of both branches first). So a wrong password or an unknown user, a user
//! without readwrite permission on the prefix, credentials for members without
//! authentication, and no credentials for members with it are each an
//! [`Error::Backend`](lockkit_core::Error::Backend) at connect that says what to change, and
//! nothing is left in the store (the lease is granted only after the check).
//!
//! # TLS
//!
//! `etcds://…` connects to every member with TLS (feature `tls`; without it an `etcds://` URL
//! is refused with an error naming the feature). The transport is etcd-client's `tls-roots`:
//! rustls with ring, the same stack as lockkit-redis's `tls`, pure Rust with no system
//! OpenSSL to build against (etcd-client's `tls-openssl` would need one). The members'
//! certificates are checked against the CA in URL option `tls_root_certificate` (the path
//! of a PEM file; [`EtcdLockProviderBuilder::tls_root_certificate`] takes the PEM itself), or
//! the system's trust store when none is given; members started with `--client-cert-auth`
//! get the client certificate of `tls_client_certificate` and `tls_client_key`. All members
//! of a URL use its scheme: a URL mixing `etcd://` and `etcds://` members is refused. An
//! untrusted member certificate is an [`Error::Backend`](lockkit_core::Error::Backend) that
//! names `tls_root_certificate`; a member that wants a client certificate it did not get, a
//! retryable connection error that names `tls_client_certificate`.
//!
//! # What is not there yet
//!
//! Read-write locks, semaphores and election: the capabilities do not declare them, and the
//! core refuses them with `Unsupported`.

mod access;
mod backend;
mod config;
mod error;
mod provider;
mod session;
#[cfg(feature = "tls")]
mod tls;

pub use etcd_client;

pub use crate::config::{DEFAULT_PREFIX, DEFAULT_TTL, EtcdLockProviderBuilder, MIN_TTL, OPTIONS};
pub use crate::provider::{EtcdLockProvider, SCHEME};

/// The backend's name in errors and spans.
pub const BACKEND: &str = "etcd";
