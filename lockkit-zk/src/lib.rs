//! The ZooKeeper backend of lockkit: mutexes, read-write locks, counting semaphores and
//! leader election.
//!
//! [`ZkLockProvider`] is a ZooKeeper client that hands out lock handles. Each lock name is a
//! znode under a base path; each acquisition creates an EPHEMERAL_SEQUENTIAL child of it
//! whose name says what it asks for, and the children in sequence order are the queue:
//! whether a node holds follows from the nodes ahead of it, so waiters are granted in arrival
//! order, whatever they ask for. A waiter watches a few nodes ahead of it, never the whole
//! queue, so a release wakes the waiters it lets in, most often with one notification and no
//! read, and the others at most strike a node off (see [Waiting](#waiting)).
//!
//! - **Fencing token:** the czxid of the holder's node, the ensemble-wide zxid of its create:
//!   strictly increasing across clients, parent re-creation and server restarts, and every
//!   grant (a mutex, a writer, each reader, each permit) has a node and a token of its own.
//! - **Protected names:** each node's name carries the acquisition's attempt id, so a create
//!   whose reply was lost is found again, never leaked.
//! - **Loss:** a hold lives in its session. It is guaranteed until the send time of the last
//!   answered request plus the session timeout the server granted, minus a drift margin, and
//!   renewed every third of that timeout; `Disconnected` suspends it, an expired or closed
//!   session or the deletion of its node loses it (see [`DisconnectPolicy`]). The same for
//!   every kind of hold: a dead reader's share or holder's permit comes back when the server
//!   expires its session, not before.
//! - **Maximum hold:** a hold acquired with a maximum hold
//!   ([`AcquireOptions::with_max_hold`](lockkit_core::AcquireOptions::with_max_hold), or
//!   builder method / URL option `max_hold`) is lost at its cap
//!   ([`LossReason::MaxHoldReached`](lockkit_core::LossReason::MaxHoldReached)), and its node
//!   is deleted then: the session, which carries the provider's other holds, goes on, so the
//!   node has no lease of its own that would run out. The next owner is granted the lock
//!   after the guard was told; its fencing token (a later czxid) refuses the stuck holder's
//!   writes. The cap is at least a third of the session timeout.
//! - **Cancel safety:** an acquisition dropped at any point deletes its node in the
//!   background; `try_acquire` and timeouts leave no node behind.
//! - **Connection trouble:** an acquisition that may wait retries past a connection failure
//!   (no server answers, its session expired), queueing again, at
//!   the back, on a new session: until its timeout, which then says the store was unreachable
//!   ([`Error::is_connect`](lockkit_core::Error::is_connect)), or for one session timeout when
//!   it waits without one. `try_acquire` does not retry.
//! - **Housekeeping:** lock znodes are CONTAINER nodes, deleted by the server once empty.
//! - **Security:** with digest credentials, every node is creator-only by default, so a
//!   client with other credentials can neither take, delete nor break a held lock ([`LockAcl`]).
//! - **Breaking:** [`break_lock`](lockkit_core::LockProvider::break_lock) deletes the nodes
//!   that hold (as `inspect` finds them), all at once: each holder's deletion watch signals
//!   `RecordGone` at once, and the node behind is granted as by a release, with a greater czxid.
//!
//! # Nodes
//!
//! The node of an acquisition is `{base_path}/{lock}/_c_{attempt}-{kind}-{sequence}`, where
//! `{lock}` is the lock name escaped into one znode name ([`encode_name`]), `{attempt}` the
//! acquisition's id, `{sequence}` the 10-digit sequence ZooKeeper appends, and `{kind}`:
//!
//! | `{kind}`     | asked by                              | holds when                                       |
//! |--------------|---------------------------------------|--------------------------------------------------|
//! | `lock`       | a mutex                               | no node is ahead of it                           |
//! | `write`      | the write side of a read-write lock   | no node is ahead of it                           |
//! | `read`       | the read side                         | no `lock` or `write` node is ahead of it, but one downgraded to a read |
//! | `permit-{N}` | a permit of a semaphore of N permits  | fewer than N nodes are ahead of it               |
//! | `candidate`  | a candidate of an election            | no node is ahead of it: it leads                 |
//!
//! A node's data is the owner line of
//! [`OwnerMeta`](lockkit_core::backend::OwnerMeta) (`lockkit1 attempt host pid since_ms`, what
//! [`inspect`](lockkit_core::LockProvider::inspect) reports); a state the node reaches later
//! is a `key=value` field appended to that line, which readers of the line ignore: `mode=read`
//! for a write hold downgraded to a read, `held=1` for a granted permit a waiter may be
//! watching, and, written at the create, `identity=…` for a candidate (see
//! [Elections](#elections)). The mutex keeps the `-lock-` name of earlier releases, so
//! mutexes of this release and of earlier ones exclude each other; earlier releases ignore the
//! other kinds, so do not use a name as a read-write lock, semaphore or election while
//! clients older than this release use it as a mutex.
//!
//! # Read-write locks
//!
//! [`provider.rw_lock(name)`](lockkit_core::LockProvider::rw_lock) is ZooKeeper's shared-lock
//! recipe. A writer waits behind every node ahead of it, as a mutex does; a reader waits
//! only behind the `lock` and `write` nodes ahead of it, and watches the last of them (never
//! a writer behind it: a reader that waited for a later writer deadlocked with it in kazoo,
//! [kazoo#649](https://github.com/python-zk/kazoo/issues/649)). A mutex node counts as a
//! writer, so a mutex and a read-write lock of one name exclude each other.
//!
//! **Fairness:** a reader that arrives after a queued writer queues behind it, so a stream of
//! readers cannot starve a writer; the writer holds once the readers ahead of it are gone.
//! Every reader has its own node and token; a resource compares a reader's token with the
//! highest *write* token it has seen (two readers may come back in either order: a reader
//! that learns of its grant late, on a slow link, may carry a token below that of a reader
//! that came and went meanwhile, never below a write before it).
//!
//! **Downgrade:** when the last write guard of a hold goes while read guards of it live
//! ([`LockGuard::read`](lockkit_core::LockGuard::read)), the hold becomes a read hold in
//! place: one `setData` appends `mode=read` to its node's data. The node keeps its sequence,
//! so no writer queued behind it can slip in before the last read goes, and its czxid, so the
//! token stays. The readers queued right behind it watch it as the last writer ahead of them:
//! the data change wakes them, they read the node once, see a read, and hold beside it (a
//! reader arriving later reads it likewise). Writers queued behind it keep waiting for the
//! node to go. The request is sent when the write guard goes, before anything the holder
//! sends after, and survives a reconnect within the session like the hold itself.
//!
//! # Semaphores
//!
//! [`provider.semaphore(name, permits)`](lockkit_core::LockProvider::semaphore) gives
//! permits on the same queue: a `permit-{N}` node holds when fewer than N nodes are ahead of
//! it, so at most N hold at once, and waiters are granted permits in arrival order.
//!
//! **The permit count belongs to the semaphore:** it is written in the name of every node,
//! so every contender sees the count in use in the list it reads anyway, at no extra cost.
//!
//! # Elections
//!
//! [`provider.election(name)`](lockkit_core::LockProvider::election) is ZooKeeper's leader
//! election recipe (Curator's `LeaderLatch` layout) on the same queue: each campaign creates
//! a `candidate` node, and the lowest candidate leads.
//!
//! - **Term:** the czxid of the leader's node, so every term is strictly greater than the
//!   ones before it, as every fencing token is; the leadership guard's
//!   [`token`](lockkit_core::LockGuard::token) is the term.
//! - **Identity:** written in the node's data at its create, as one more field of the owner
//!   line: `lockkit1 attempt host pid since_ms identity=<escaped>`, where every byte outside
//!   ASCII's printable characters, and `%`, `=`, is written `%XX`. The line stays one line
//!   of space-separated fields, so readers of the owner line (earlier releases, status
//!   displays) still read it, and `host:port` reads as it is.
//! - **Who leads:** [`Election::leader`](lockkit_core::Election::leader) is one
//!   [`inspect`](lockkit_core::LockProvider::inspect): the first node, if it is a candidate,
//!   reported as a holder of kind [`HoldKind::Candidate`](lockkit_core::HoldKind) with its
//!   identity, its term and, as `since`, its node's creation time (the server's clock); the
//!   other candidates are the waiters.
//! - **Campaigns are acquisitions:** waiting, protected names (a campaign whose create reply
//!   was lost finds its own candidacy again, never leaving a second one), cancel safety (a
//!   campaign dropped at any point deletes its node) and loss (a suspended session keeps the
//!   deadline running; an expired one is a loss signalled before another candidate can lead)
//!   are the mutex's, on the same code. Resigning is one delete: the candidate behind watches
//!   the leader's node and leads on its notification, with no list. Leadership is only ever
//!   declared on a node of the campaign's own session: the node comes from this session's
//!   create reply, or, after a lost reply, from a lookup that checks the node's
//!   `ephemeralOwner` is this session (the guard of Curator's
//!   [PR #500](https://github.com/apache/curator/pull/500)); a retry on a new session uses a
//!   new attempt id, so it never finds a node of an earlier session.
//!
//! **Observing** ([`Election::observe`](lockkit_core::Election::observe)) is driven by
//! watches, never by polling: the observer keeps a data watch on every candidate it has seen
//! (set by the read that gives its identity and term) and a watch on the list of candidates.
//! It first yields the current state (the leader, or [`LeaderEvent::Vacant`](lockkit_core::LeaderEvent)),
//! then each change as the notifications come: when the leader's node goes, the next
//! candidate it knows leads at once; a new candidacy is read when the list's watch fires.
//! ZooKeeper notifies a client of changes in their order, so on a healthy connection the
//! observer sees every term in order. A change it cannot tell is said with
//! [`LeaderEvent::Gap`](lockkit_core::LeaderEvent) before the state that follows, never
//! skipped in silence:
//!
//! - its session expired (the watches went with it) or went with its runtime: the observer
//!   continues on the provider's session (a new one when need be), with a gap;
//! - its connection dropped and came back within the session: the watches are set again and
//!   the server replays those that fired, in no order; the observer takes them as one batch
//!   with its next list, and says a gap only if the leader and the candidate right behind it
//!   both went meanwhile (that one may have led for a moment);
//! - a candidate came and went between two lists while no candidate it knew was left (the
//!   znode's `cversion` counts every child created and deleted, so such a node is noticed);
//! - the consumer fell 256 events behind.
//!
//! The observer runs as one task on lockkit's home runtime, started at the stream's first
//! poll; dropping the stream ends the task and its watches. It opens no session of its own: it
//! uses the provider's.
//!
//! # Conflicts
//!
//! A contender that finds, ahead of it in the queue, a node of another use of the name (a
//! semaphore node while it asks for a mutex or a read or write hold, or the reverse, or a
//! semaphore node of another permit count, or a candidate while it asks for a lock or a
//! permit, or the reverse) deletes its node and fails with
//! [`Error::Conflict`](lockkit_core::Error::Conflict), saying what to change. Of two uses of
//! one name, the later arrival is refused, and two uses never hold at once: the later one
//! lists the queue after its create, so it sees the earlier one for as long as it exists.
//! Once every node of the old use is gone, the name is free for another.
//!
//! # Waiting
//!
//! A waiter sets data watches (`getData`, which leaves no watch on a node already gone) on a
//! bounded set of nodes ahead of it, and lists the queue again only when the watched nodes do
//! not tell it enough:
//!
//! - a mutex or writer within 16 of the head watches every node ahead of it (and its own) and
//!   holds, with no list, when the last one goes; further back it watches its predecessor;
//! - a reader watches the last `lock` or `write` node ahead of it, and holds when it goes or
//!   says `mode=read`, with no list when it was the only one;
//! - a permit waiter within 16 of the head watches every node ahead of it and counts
//!   deletions down, holding, with no list, when fewer than N remain. Further back, the
//!   first waiter of a semaphore of more than 16 permits watches the list of children (it is
//!   the only one that does), and every other waiter watches its predecessor, which writes
//!   `held=1` into its node when it is granted if a waiter may be watching it: that data
//!   change sends the waiter to watch the nodes that now hold. So the release of any holder
//!   ahead reaches the waiter it lets in within a few round trips.
//!
//! # Making a provider
//!
//! - [`ZkLockProvider::connect`] takes a `zk://` URL and connects **eagerly**: it checks
//!   every setting, opens the session and creates the base path, so a provider it returns has
//!   reached its store. When every server refuses connections it fails at once with a
//!   retryable [`Error::Connection`](lockkit_core::Error::Connection) naming them.
//! - [`ZkLockProvider::builder`]`()…`[`build`](ZkLockProviderBuilder::build)`()` is
//!   synchronous and **lazy**: it checks every setting and does no I/O; the first session
//!   opens at the provider's first use, and its failures come back from that use.
//! - [`SCHEME`] is the `zk` entry of lockkit's scheme table, which `lockkit::connect(url)`
//!   dispatches on.
//!
//! A URL names the servers, the chroot and the credentials, and takes the options of
//! [`OPTIONS`], spelled as the builder's methods:
//! `zk://locker:secret@zk1:2181,zk2:2181,zk3:2181/myapp?session_timeout=6s&base_path=/locks`.
//!
//! ```no_run
//! use std::time::Duration;
//! use lockkit_zk::ZkLockProvider;
//!
//! # async fn demo() -> lockkit_core::Result<()> {
//! let provider = ZkLockProvider::connect("zk://zk1:2181,zk2:2181,zk3:2181/myapp?session_timeout=6s").await?;
//! let lock = provider.lock("reports/daily")?;
//! if let Some(guard) = lock.try_acquire().await? {
//!     // ... work, sending guard.token() with every write ...
//!     guard.release().await?;
//! }
//!
//! // The same settings with the builder, connecting at first use.
//! let lazy = ZkLockProvider::builder()
//!     .connect_string("zk1:2181,zk2:2181,zk3:2181/myapp")
//!     .session_timeout(Duration::from_secs(6))
//!     .build()?;
//! let guard = lazy.lock("reports/daily")?.acquire_timeout(Duration::from_secs(30)).await?;
//! guard.release().await?;
//!
//! // Readers of a configuration while a writer may migrate it.
//! let config = provider.rw_lock("config/pricing")?;
//! let read = config.read().await?;
//! // ... read, checking read.token() against the last write's ...
//! read.release().await?;
//!
//! // At most three workers calling a rate-limited API, fleet-wide.
//! let slots = provider.semaphore("api/partner", 3)?;
//! let permit = slots.acquire().await?;
//! permit.release().await?;
//!
//! // One scheduler at a time; the others follow who leads.
//! let election = provider.election("services/scheduler")?;
//! let mut changes = election.observe()?;
//! let leadership = election.campaign("10.0.0.7:8080").await?;
//! // ... lead while leadership.is_held(), stamping writes with leadership.token() ...
//! leadership.resign().await?;
//! while let Some(change) = changes.next().await {
//!     match change? {
//!         lockkit_core::LeaderEvent::Elected(leader) => println!("{:?} leads", leader.identity_str()),
//!         lockkit_core::LeaderEvent::Gap => println!("changes passed unseen; the leader now follows"),
//!         _ => println!("nobody leads"),
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Runtime
//!
//! lockkit-zk runs on Tokio 1.x with the time and I/O drivers enabled, and works from any
//! runtime: one provider may be used from several. Its session (the client's connection task,
//! which pings the server, and the task that renews its holds and follows its state) and an
//! election's observer run on lockkit's home runtime ([`lockkit_core::home`]), which nothing
//! but lockkit drives and which never shuts down: a hold is kept, and a dropped guard's node
//! deleted, whatever happens to the runtime that granted it or the one it is used from. Calls
//! from any runtime reach the session through the client's channel (a thread hop each way;
//! docs/PERFORMANCE.md has what it costs). A session that still went (it expired, say) loses
//! its holds, and the next use of the provider opens a new one.
//!
//! # The `zookeeper_client` re-export
//!
//! [`ZkLockProvider::zk_client`] hands out the client of the provider's session, for requests
//! of your own; its type comes from [zookeeper-client](https://docs.rs/zookeeper-client),
//! re-exported as [`zookeeper_client`] so that you get the matching version. That crate is at
//! 0.x: **the re-export and `zk_client` are exempt from lockkit's semver promise**, and a
//! minor release of lockkit-zk may move to a newer zookeeper-client. Everything else of this
//! crate follows semver.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod config;
mod error;
mod hold;
mod names;
mod observe;
mod provider;
mod recipe;
mod record;
mod session;

pub use config::{
    DEFAULT_BASE_PATH, DEFAULT_SESSION_TIMEOUT, DisconnectPolicy, LockAcl, OPTIONS, ZkLockProviderBuilder,
};
pub use names::encode_name;
pub use provider::{SCHEME, ZkLockProvider};
/// The ZooKeeper client library this backend is built on, re-exported so that
/// [`ZkLockProvider::zk_client`] comes with a matching version.
///
/// **Outside lockkit's semver promise:** zookeeper-client is at 0.x, and a minor release of
/// lockkit-zk may move to a newer one. Depend on it directly (the same version) if you need
/// a stable name for it.
pub use zookeeper_client;
