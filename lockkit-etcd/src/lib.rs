//! The etcd backend of lockkit: mutexes, read-write locks, counting semaphores and elections
//! on lease-bound keys ordered by etcd's global revision, with fencing tokens, loss signals
//! and the whole lock contract.
//!
//! # How it works
//!
//! - **One lease per provider.** The provider grants one lease (TTL 10 s by default) and one
//!   task, the watchdog, sends a keep-alive every third of the TTL. Every key of every hold
//!   is bound to that lease. The guard's deadline runs from the *send* time of the last
//!   acknowledged keep-alive plus the TTL minus a drift margin, so a holder that is cut off
//!   or paused is signalled lost before the server can expire the lease and grant the lock
//!   to someone else. A lease the server reports gone ends every hold at once.
//! - **A key per acquisition.** Each acquisition writes its own key,
//!   `<prefix>/<escaped name>/<provider id>-<n>`, in one transaction (put if absent, and
//!   read the queue of keys), with the owner line (the attempt id among it) as its value.
//!   `n` is the smallest number that no other acquisition of the lock in the provider uses:
//!   names are reused, because etcd keeps an index entry for every key ever written under a
//!   prefix until a compaction and every read of the queue walks them all, so a new name per
//!   acquisition made each cycle of a lock slower than the one before. The
//!   lock is granted when no key with a lower create revision remains; a waiter waits for
//!   the deletion of the key just ahead of it only (no herd: nothing else wakes it, and no
//!   request follows another key's change), and re-checks, in a transaction guarded by its
//!   own key's create revision, that nothing is left ahead. So a grant is confirmed against
//!   the own key after every wait, and a waiter is granted in arrival order (the lock is
//!   fair).
//! - **Watches.** A provider opens one watch stream (per lease) and, on it, one watch per
//!   lock it uses: of the lock's prefix, deletions only, created when the lock is first used
//!   and kept while it is in use (dropped after a watchdog period unused). Every wait of that
//!   lock in the provider registers the keys it waits for with it (the key just ahead), so no
//!   watch is created on a wait's path. A new watch would cost a round trip, and worse: etcd starts a
//!   watch "from now" at the revision it read just before registering it, and a write
//!   landing in between puts the watch in its "unsynced" group, caught up by a loop every
//!   100 ms, so under a stream of writes a wait on a new watch now and then sat out that
//!   period. A lock's watch keeps its latest changes, so a wait that read the queue just
//!   before registering misses nothing; when the watch is newer than the read, the queue is
//!   read again. A reader behind a writer that may be downgraded in place registers with a
//!   second watch of the lock that reports puts too. When the stream breaks, every wait
//!   reads the queue again, on a new stream.
//! - **Holds cost no task and no watch.** The session keeps each hold's key and create
//!   revision. After each acknowledged keep-alive the watchdog asks etcd, in one
//!   `LeaseTimeToLive` request with keys, which keys are bound to the lease: a hold whose key
//!   is gone (deleted behind its back, broken) is signalled lost, within a third of the TTL;
//!   at once when the provider watches that lock anyway for a wait of its own (every deletion
//!   a lock's watch hears is checked against the holds). A hold lost on its own (its maximum
//!   hold reached) while the lease lives has its key deleted at the same checks, until etcd
//!   answers. A hold that registered with the lock's watch instead (as until this release)
//!   made every release an event on the provider's watch stream, and a task per hold woke
//!   another worker at each grant and release: the uncontended cycle was a few per cent
//!   slower than etcd's own `Lock`/`Unlock`.
//! - **Fencing.** The token is the own key's create revision: etcd's revision increases
//!   with every write of the cluster and is kept across restarts, so tokens keep increasing.
//! - **Lost replies.** The key's name is the acquisition's own until its key is known gone,
//!   so a retry after a lost reply finds its own key (the put is conditioned on the key being
//!   absent, and the value found must be its own) and never leaks a second one.
//! - **Read-write locks and semaphores.** Every kind queues its keys under the same prefix;
//!   the key's value says what it asks for (`kind=read`, `kind=write`, `kind=permit-N`; a
//!   mutex key says nothing). A reader is granted when no mutex or writer key with a lower
//!   create revision remains, and watches the nearest such key ahead (its deletion, or its
//!   downgrade); a writer, like a mutex, when no key at all is ahead, watching the key just
//!   ahead; a permit of N when fewer than N keys are ahead, counting the deletions of the keys
//!   ahead on one watch of the prefix. So a reader that arrives after a queued writer waits
//!   behind it (writers are not starved), and permits go in arrival order. Every grant is its
//!   own key, so its own token. A downgrade rewrites the own key's value to `kind=read` in a
//!   transaction conditioned on its create revision: the key keeps its place and token, no
//!   queued writer slips in, and the readers queued behind it are woken by the change.
//! - **Conflicts.** A mutex is the writer of the read-write lock of its name. A key with a key
//!   of another use ahead of it (a semaphore behind a lock, a semaphore of another permit
//!   count) is refused with [`Error::Conflict`](lockkit_core::Error::Conflict), saying what to
//!   change, and deleted: of two uses of one name the later arrival is refused, as on Redis
//!   and ZooKeeper.
//! - **Breaking a lock.** [`break_lock`](lockkit_core::LockProvider::break_lock) deletes the
//!   key of every holder (a mutex or writer, every reader, every permit holder), each
//!   conditioned on its create revision; the holder is signalled lost at its provider's next
//!   check of its keys (at once when that provider watches the lock for a wait), and the
//!   waiters behind, whose keys were created later, are woken as by a release.
//! - **Release and cancellation.** A release deletes the own key conditioned on its create
//!   revision, never by name alone. An acquisition dropped at any await point deletes its
//!   key in the background, and goes on trying while the provider's lease lives (the lease
//!   would otherwise keep a key it failed to delete). `try_acquire` puts its key only when no
//!   key is under the lock's prefix, in the same transaction, so a refusal leaves nothing
//!   behind. An acquisition that gives up after a try's reply was lost, or is dropped while a
//!   try is under way, also writes its void key (`<prefix>/%void/<attempt>`, bound to the
//!   lease, deleted after five minutes) with that delete, and every put of the attempt is
//!   conditioned on the void key's absence: a put held by a partition and delivered later, or
//!   served after the delete on another stream of the connection, is refused instead of
//!   leaving a key behind.
//!
//! # Elections
//!
//! A campaign ([`Election::campaign`](lockkit_core::Election::campaign)) is an acquisition of
//! kind [`HoldKind::Candidate`](lockkit_core::HoldKind::Candidate), granted exactly like the
//! mutex: the candidate's key is put under the election's prefix, the key with the lowest
//! create revision leads, and the term is that create revision. The key's value is the owner
//! line with the identity as one more field (`identity=<escaped>`, every byte outside ASCII's
//! printable characters, and `%`, `=` and space, written `%XX`), so
//! [`Election::leader`](lockkit_core::Election::leader) (and `inspect`) reads who leads, its
//! term and since when the candidacy stands (the candidate's clock: etcd keeps no time). So a
//! campaign has every property of an acquisition: a lost reply finds its own key, a dropped
//! campaign deletes its key, a leader learns of its loss as a holder does, and resigning is a
//! release that hands leadership to the next key in one watch notification. Unlike etcd's own
//! `Campaign`, leadership is confirmed against the own key after every wait.
//!
//! An observer ([`Election::observe`](lockkit_core::Election::observe)) reads every key under
//! the prefix, hands out the current state, and watches the prefix from the next revision:
//! etcd replays every put and delete since, in revision order, so the observer hands out every
//! term and every vacancy (a key at the head that is not a candidate's, a mutex of the same
//! name, means nobody leads). A broken watch is made again from the revision after the last
//! one seen, so a reconnect loses nothing. When those revisions were compacted meanwhile,
//! etcd cancels the watch with the compact revision: the observer says
//! [`LeaderEvent::Gap`](lockkit_core::LeaderEvent::Gap), reads the prefix again and hands out
//! the current state. Nothing is polled.
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
//! 2 s, etcd's shortest lease, to a day), `drift`, `connect_timeout`, `prefix`, `max_hold`, and
//! the TLS files (below); the options table of `lockkit::connect` lists each with its type, default and range; a
//! setting takes the last value given, by URL option or by method, see `lockkit_core::config`.
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
//! etcd-client authenticates once, when it connects, and etcd's token does not last: a simple
//! token is forgotten once unused for the member's `--auth-token-ttl` (300 s by default; a
//! provider's keep-alives do not use it), a JWT expires at its `ttl`, and a change of users or
//! roles outdates every token. etcd then refuses each request ("invalid auth token", "revision
//! of auth store is old"), the authentication with the old token included, and denies each
//! new watch on a stream opened with it. So the provider authenticates again when a request
//! is refused for its token (one renewal for all the requests refused together; the renewal
//! goes without the old token), sends the refused request once more (it was not applied), and
//! closes a watch stream on which a watch was denied, so that the next watch opens one with the
//! new token. Tested with a one-second token TTL: a try, a wait on an old watch stream,
//! `inspect`, a release and a hold, each after an idle time (tests/auth.rs).
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

mod access;
mod backend;
mod config;
mod election;
mod error;
mod observe;
mod provider;
mod queue;
mod session;
#[cfg(feature = "tls")]
mod tls;
mod watch;

pub use etcd_client;

pub use crate::config::{DEFAULT_PREFIX, DEFAULT_TTL, EtcdLockProviderBuilder, MIN_TTL, OPTIONS};
pub use crate::provider::{EtcdLockProvider, SCHEME};

/// The backend's name in errors and spans.
pub const BACKEND: &str = "etcd";
