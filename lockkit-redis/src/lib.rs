//! The Redis backend of lockkit.
//!
//! [`RedisLockProvider`] keeps the whole lockkit contract on one Redis server (6.0 or
//! later), a Sentinel-managed primary, or a Redis Cluster (the same scripts: all keys of a
//! lock share a hash tag; see [Redis Cluster](#redis-cluster)),
//! for mutexes, read-write locks, counting semaphores and leader elections. It dereferences to lockkit's
//! [`LockProvider`](lockkit_core::LockProvider), so every operation is an inherent method
//! that needs no trait import:
//!
//! ```no_run
//! use std::time::Duration;
//! use lockkit_redis::RedisLockProvider;
//!
//! # async fn run() -> lockkit_core::Result<()> {
//! // Eager: parses the URL, checks every setting, sends one PING.
//! let provider = RedisLockProvider::connect("redis://127.0.0.1:6379/0?lease=10s").await?;
//! let guard = provider.lock("orders/42")?.acquire().await?;
//! println!("holding orders/42 with token {}", guard.token());
//! guard.release().await?;
//!
//! // Lazy: checks every setting and connects on first use.
//! let lazy = RedisLockProvider::builder()
//!     .url("redis://app:secret@127.0.0.1:6379/2")
//!     .key_prefix("billing")
//!     .lease(Duration::from_secs(10))
//!     .build()?;
//! let locks: lockkit_core::LockProvider = lazy.into(); // for code that picks backends at run time
//! # let _ = locks;
//!
//! // Readers share, a writer excludes them; a read taken from the write guard keeps the hold
//! // when the write guard goes (a downgrade in place).
//! let config = provider.rw_lock("config")?;
//! let write = config.write().await?;
//! let read = write.read()?;
//! write.release().await?; // now a read hold, same token; queued readers join it
//! read.release().await?;
//!
//! // At most three holders at once, each with a token of its own.
//! let permit = provider.semaphore("rate-limited-api", 3)?.acquire().await?;
//! permit.release().await?;
//!
//! // One leader at a time; its term is its fencing token; anyone can follow the changes.
//! let election = provider.election("services/scheduler")?;
//! let mut changes = election.observe()?;
//! let leadership = election.campaign("10.0.0.7:8080").await?;
//! let _current = changes.next().await; // Vacant or the leader, then every change in term order
//! leadership.resign().await?;
//! # Ok(()) }
//! ```
//!
//! # Settings and URLs
//!
//! Every setting has one name, the same as a builder method and as a URL option
//! ([`OPTIONS`]): `lease`, `renew_every`, `response_timeout`, `drift`, `key_prefix`, `fair`,
//! `claim_window`, `replicas`, `replicas_timeout`, `fence_retention`, as in `redis://host:6379/0?lease=10s&fair=false`. Every duration is
//! range-checked when the provider is built (see the builder's methods; none exceeds a day),
//! so that a bad value is an [`InvalidConfig`](lockkit_core::Error::InvalidConfig) naming the
//! option and its range, never a server error later. [`SCHEME`] registers `redis://`,
//! `rediss://`, `redis+sentinel://`, `rediss+sentinel://`, `redis+cluster://` and
//! `rediss+cluster://` with `lockkit_core::config::register`, which is how the `lockkit`
//! facade's `connect` reaches this crate.
//!
//! # How it works
//!
//! - **Acquire** is one Lua script: `SET lock owner NX PX lease` and, when granted, the next
//!   value of the lock's fence counter, `max(counter + 1, server time in µs)`, which is the
//!   fencing token (see [Fencing tokens and server restarts](#fencing-tokens-and-server-restarts)).
//!   On contention it returns the holder's remaining lease. One round trip when the lock is
//!   free. The script starts with the lean path of that common case (a free mutex that nobody
//!   waits for and no other kind uses: five server calls, before any of the queue's Lua
//!   functions is made) and falls through, in the same call, to the whole logic otherwise;
//!   the release script likewise.
//! - **Fair waiting** (the default): a waiting acquisition joins the lock's wait queue, two
//!   sorted sets kept by the scripts with the server's clock, and a free lock belongs to the
//!   head of the queue. The release hands the lock over: it grants it to the head for a
//!   claim window ([`claim_window`](RedisLockProviderBuilder::claim_window), 200 ms by
//!   default), with a fresh token, and tells only the head, over pub/sub on its
//!   provider's own wake channel. The head takes the hold without another round trip and has
//!   it renewed to a full lease at once; a head that died lets the hand-over expire, and the
//!   next waiter's turn comes. Queue entries expire after two leases in any case. Nobody
//!   starves, and a hand-off is one round trip and one message. With
//!   [`fair(false)`](RedisLockProviderBuilder::fair) there is no queue: every waiter of the
//!   lock's channel retries on a release and the first wins.
//! - **Waiting** is driven by pub/sub: one subscriber connection per provider. A waiter also
//!   wakes when the holder's lease runs out (a dead holder publishes nothing) and polls
//!   while the subscriber connection is down.
//! - **Release** is one Lua script that deletes the record only when it holds our owner id,
//!   hands the lock over to the head of the queue or publishes on the lock's channel, and
//!   tells apart released / gone / held by another.
//! - **Renewal**: one watchdog per provider renews all its holds every `renew_every`
//!   (default a third of the lease), a pipeline of up to a thousand compare-and-`PEXPIRE`
//!   scripts per round trip (of every kind: see below). A hold's local deadline is the send time of its last
//!   confirmed renewal plus the lease minus the drift margin, so the guard reports the loss
//!   before the key can expire on the server.
//! - **A deleted record** (an operator's `DEL`, an eviction) is noticed at the next renewal,
//!   at most `renew_every` later; at once (about a round trip) when the server publishes
//!   keyspace events (`notify-keyspace-events` with `K` and one of `g`, `x`, `e`, `A`): each
//!   hold's record channel `__keyspace@<db>__:<record key>` is then subscribed on the
//!   provider's pub/sub connection (for a read-write lock's hold the writer record's and the
//!   readers'; for a permit the permit holders'), and an event on it (but the `expire` and
//!   `zadd` of renewals and of other holders joining) makes the watchdog read the hold and
//!   signal the loss if it is not there any more. The server's setting is read with
//!   `CONFIG GET` (at the first hold, then at most once a minute); without it, or for an ACL
//!   user that may not read it, nothing more is sent. `FLUSHALL` publishes no per-key events
//!   and is noticed at the next renewal.
//! - **Breaking** ([`break_lock`](lockkit_core::LockProvider::break_lock), `break.lua`): one
//!   script deletes every hold of the name (the mutex or leader record, the writer, every
//!   reader and permit holder with their tokens) and the holders' own queue entries, then
//!   hands over to the head of the queue as a release does; a broken leader's vacancy goes
//!   in the journal. The fence counter stays, so the next token is greater. A broken holder
//!   learns of it at its next renewal (at once with keyspace events). It needs no command
//!   beyond [`ACL_COMMANDS`]. With `replicas` set, a break counts only once the replicas
//!   acknowledged it, as a grant does (else a retryable error, the break applied on the
//!   primary).
//! - **Unknown outcomes** (a timeout, a dropped connection) are resolved by owner id, never
//!   by a blind second `SET`; see the `lock` module docs.
//!
//! # Read-write locks and semaphores
//!
//! The same scripts grant every kind of hold (the kind is an argument), through the same
//! queue, hand-over, fence counter, watchdog, wake-ups and abandon:
//!
//! - **Readers and permit holders** are members of a sorted set (the readers, or the permit
//!   holders) scored by the server time at which each hold expires, as madelson's
//!   `RedisSemaphorePrimitive` keeps them, and not by a client's clock (Redisson's
//!   permit-expirable semaphore trusts the client's). Each has its own owner id and its own
//!   fencing token (kept in a hash next to the set). A renewal re-scores only its own member,
//!   so a reader or permit holder that dies frees its share when its own lease runs out,
//!   neither before nor later. Every script that decides on a set first drops its expired
//!   members (at most a hundred per call), and the renew scripts drop their own member when
//!   its lease ran out; `inspect` leaves the expired ones out.
//! - **The writer** has a record of its own, a string like the mutex record. A writer is
//!   granted when nobody holds the name; a reader when no writer (nor mutex) does; a permit
//!   while fewer holders than the count hold it.
//! - **Tokens:** every grant, a reader's and a permit's included, increments the one fence
//!   counter of the name, so every token is greater than every token issued before it for the
//!   name. A release that hands over to a run of readers issues one token per reader.
//! - **The permit count** is stored with the semaphore (a key kept while a permit is held or
//!   waited for, and deleted with the last of them). A handle that asks with another count
//!   while the semaphore is in use gets [`Error::Conflict`](lockkit_core::Error::Conflict);
//!   once nobody holds or waits, the next user's count is the count.
//! - **One name, one kind, or exclusion:** a mutex and a read-write lock of one name exclude
//!   each other, the mutex counting as a writer (a mutex waits for the readers, readers and
//!   writers wait for the mutex, and one queue serves them all). A semaphore of a name in use
//!   as a lock, and a lock of a name in use as a semaphore, are a
//!   [`Conflict`](lockkit_core::Error::Conflict). Each kind keeps its own keys, of one Redis
//!   type each, so no script meets a key of another type (`WRONGTYPE`); every script that
//!   grants looks at the keys of the other kinds.
//! - **The mutex stays as cheap as it was:** every key a script takes is a string Lua makes
//!   at each call, and a name used by mutexes alone needs only seven of the twelve. So a
//!   marker of the other kinds (`…:kinds`) lives at least as long as any writer, reader,
//!   permit or waiter of another kind (each script that makes or renews one extends it, and
//!   the script that frees the last of them deletes it); the mutex's acquire and release send
//!   the seven keys, and only when they find the marker do they change nothing and ask for
//!   all twelve (one more round trip, for names used by several kinds at once).
//! - **Downgrade:** when the last write guard of a hold goes while read guards of it live,
//!   one script turns the write hold into a read hold in place: the writer record goes and
//!   the owner joins the readers in the same step, with its token and the write hold's
//!   remaining lease, so no writer or mutex queued meanwhile can be granted in between; the
//!   readers at the head of the queue (up to the first queued writer or mutex) are handed
//!   their share at once. The hold's renewals, release and keyspace watch cover both forms,
//!   so a downgrade whose reply is lost changes nothing else.
//! - **Hand-over:** the script that frees capacity (a release, a downgrade, an abandoned
//!   acquisition that was granted, or a try that finds a holder's lease ran out) grants it to
//!   the waiters at the head of the queue that fit: one writer or mutex; or the run of readers
//!   up to the first queued writer or mutex; or as many permit waiters as permits are free.
//!   Each gets its own token, its own claim window and its own wake message, and confirms its
//!   grant as a mutex waiter does.
//! - **Renewal:** each kind has its renew script (`renew.lua` for a mutex, `renew_rw.lua` for
//!   a read-write lock's hold, write or read, `renew_permit.lua` for a permit), and the one
//!   watchdog sends them all in the same pipelines: a tick costs as many round trips for a
//!   thousand holds of any kinds as for a thousand mutexes. A renewal that finds the hold gone
//!   is a loss.
//! - **Lost replies and cancellation:** an acquisition of any kind keeps its owner id across
//!   its tries, and a try finds the hold an earlier one was granted (a reader or permit by its
//!   member in the set, with the token it was granted). The abandon script and the void
//!   marker work for every kind.
//!
//! # Elections
//!
//! A candidate is an exclusive hold on the election's name, granted through the mutex's
//! machinery: the same queue, hand-over, fence counter, claim window, abandon, void marker,
//! watchdog and keyspace watch; the term of a leader is its fencing token.
//!
//! - **The leader** holds the mutex record (`lockkit:{name}`), whose value, the owner id,
//!   carries the candidate's identity after the usual owner line (a field `c:<identity in
//!   hex>`, so any bytes fit and a reader of the owner line ignores it). So a mutex and an
//!   election of one name exclude each other, as a mutex and a writer do, and a semaphore of
//!   that name is a [`Conflict`](lockkit_core::Error::Conflict). The mutex's seven-key fast
//!   path is unchanged: candidates are always asked with every key, and candidates waiting
//!   keep the marker of the other kinds.
//! - **The journal** `lockkit:{name}:terms` is a Redis stream of the election's changes,
//!   capped at about the last thousand entries (`XADD … MAXLEN ~ 1000`): `k=e t=<term>
//!   o=<owner id> s=<server ms of the grant>` when a candidate comes to lead, `k=v t=<term>`
//!   when that term ends. The scripts that grant (acquire, and every script that hands over)
//!   write the term in the same step as the grant; the release, the abandon of a granted
//!   campaign, a renewal that finds the leader's record gone and an observer's read that finds
//!   it gone (expired, deleted) write the vacancy, once: only while the last entry names a
//!   leader whose record is not there, so every observer sees the same vacancy, with the term
//!   that ended, and the next term always comes after it. Each entry's id is published on the
//!   channel of the same name. `leader()` is `inspect`: the record's holder, its term (the
//!   fence counter), and since when (the journal's last entry, in server time).
//! - **Observers** subscribe to the journal's channel on their provider's pub/sub connection
//!   and read (one script) the current state first, then, at each message, the entries after
//!   the last one they read (`XRANGE` with an exclusive start). Nothing is read at an
//!   interval: a renewed subscription (the connection dropped) makes them read again; a
//!   leader whose lease runs out runs no script, so they also read once when the leader's
//!   record expires on the server (its `PTTL`: a deadline from the lease, not a poll), and at
//!   once on the record's keyspace events where the server publishes them; that read writes
//!   the vacancy and hands the leadership to the next candidate queued.
//! - **The gap rule:** when the entry an observer read last is no longer in the journal
//!   (trimmed while it was cut off, or the journal gone with a `FLUSHALL` or a restart
//!   without persistence), it reports [`LeaderEvent::Gap`](lockkit_core::LeaderEvent::Gap)
//!   and then the current state; otherwise it replays every term it missed, in order.
//!
//! # Fairness of each kind
//!
//! With [`fair(true)`](RedisLockProviderBuilder::fair) (the default) every kind waits in one
//! queue per name, in arrival order: a writer (or mutex) is granted when it is at the head and
//! nobody holds the name; readers are granted together while no writer or mutex is queued
//! before them, so a reader that arrives after a queued writer waits behind it and a stream
//! of readers cannot starve a writer; permit waiters are granted in arrival order as permits
//! come back. With `fair(false)` no kind queues: every waiter retries when the name's channel
//! tells of a release (or when the holds in its way expire) and the first to ask wins; readers
//! may then overtake a waiting writer for as long as readers keep coming, as any waiter of an
//! unfair lock may be overtaken.
//!
//! # Keys
//!
//! With the default prefix, lock `orders/42` uses `lockkit:{orders/42}` (the mutex record),
//! `lockkit:{orders/42}:fence` (the counter), the wait queue `lockkit:{orders/42}:queue` and
//! `lockkit:{orders/42}:queue:expiry` (present only while somebody waits), and the channel
//! `lockkit:{orders/42}:released`; each provider listens on `lockkit:wake:<random id>`.
//! A read-write lock adds `…:writer` (the writer record, a string), `…:readers` (a sorted
//! set of owner ids by expiry) and `…:tokens` (a hash of the readers' tokens); a semaphore
//! `…:permits` (a sorted set of owner ids by expiry), `…:tokens` and `…:permits:count` (its
//! permit count); both, the marker `…:kinds`. An election adds its journal `…:terms` (a
//! stream, also the name of the channel its changes are published on), which is kept: an
//! observer that comes back after any time replays what it missed. Each other key is present
//! only while in use, and expires with the last hold or waiter that keeps it.
//!
//! The fence counter expires too, [`fence_retention`](RedisLockProviderBuilder::fence_retention)
//! after the last grant or renewal of its lock (default ten leases, at least a minute: five
//! minutes with the default lease). Every grant sets its expiry, and every renewal of a
//! mutex, a writer or a leader extends it (their token is the counter's value, which
//! `inspect` and `leader()` read), so a name that is no longer used leaves no key behind
//! once the retention has passed: locking `orders/<id>` for millions of ids does not fill the
//! server with counters. Tokens still never go back: the next grant of a name whose counter
//! expired issues the server time in µs, which is above every token issued before (see
//! below; this is the clock assumption that already covers restarts and failovers). The
//! retention is at least the lease plus the claim window, the time within which a grant whose
//! reply was lost, or a hand-over, is confirmed with the token the counter holds; a longer
//! one also covers a server clock that steps back by less than the retention between two
//! uses of a name. A counter written before this version has no expiry until its next grant.
//!
//! # Fencing tokens and server restarts
//!
//! Every grant's token is `max(counter + 1, server time in µs)`, read with one `TIME` in the
//! granting script, and the fence counter keeps it. So tokens strictly increase on one
//! server, and do not go back when the counter does. Plainly:
//!
//! - With AOF persistence and `appendfsync always`, the counter survives restarts and
//!   tokens never repeat, whatever the clock does.
//! - Without persistence (or with `appendfsync everysec`, which can lose the last second),
//!   a restart loses the counter and every hold. The holds are signalled lost at their next
//!   renewal. Tokens still increase, because the last token was at most the server time of
//!   its grant (or a few more than it, for grants within one microsecond) and the next
//!   grant's clock is later: this rests on **the server's clock not stepping back** across
//!   the restart.
//! - After a failover to a replica that missed the last grants of the old primary (Redis
//!   replication is asynchronous), the promoted server's counter is behind. Its first token
//!   is still above every token the old primary issued as long as **the promoted server's
//!   clock is not behind the old primary's by more than the failover took** (the time from
//!   the old primary's last grant to the new primary's first): the clock term then exceeds
//!   every earlier token. Keep the servers' clocks synchronised (NTP); a skew of
//!   milliseconds is covered by any real failover, which takes seconds.
//! - The counter term still matters: it keeps tokens increasing when grants come faster than
//!   the clock's microseconds (a hand-over granting several waiters in one script), and
//!   when a server's clock is behind the tokens already issued.
//! - An expired counter (see [Keys](#keys)) is a counter that went back to nothing, as after
//!   a restart without persistence: the next token is the server time in µs, above every
//!   earlier token under the same assumption.
//! - Eviction: use the `noeviction` policy on a server that holds locks. Under any other
//!   `maxmemory` policy Redis may evict a lock record: every record has an expiry, so the
//!   `volatile-*` policies pick them too, and an evicted record is a lock that another client
//!   can take at once while its holder learns of the loss only at its next renewal (or a
//!   keyspace event), which breaks exclusion. `connect` logs a warning when the server has
//!   a memory limit and another policy. For tokens alone an evicted fence counter is the
//!   same as an expired one, covered by the clock term above.
//!
//! A server whose clock is set back, beyond what a failover took, can repeat tokens.
//!
//! # Replicas and failover
//!
//! Holds themselves do not survive a failover reliably: Redis replicates asynchronously, so
//! a grant that had not reached the promoted replica is gone. Its holder learns it at its
//! next renewal (the hold is signalled lost), by which time another client may hold the
//! lock; the tokens, which never go back, tell their writes apart.
//!
//! [`replicas(n)`](RedisLockProviderBuilder::replicas) (URL option `replicas`, with
//! `replicas_timeout`) narrows that window: every grant is followed by `WAIT n` and counts
//! only when `n` replicas acknowledged it (otherwise it is released and the acquisition
//! retries, then fails with a retryable connection error saying how many replicas
//! acknowledged), and every renewal round ends with the same `WAIT`: a renewal that is not
//! acknowledged does not extend the hold's local deadline, so a hold whose replicas fall
//! behind runs out, and is signalled lost, at the deadline its last acknowledged renewal
//! gave it. It cannot make replication synchronous: `WAIT` does not say that the replica
//! promoted at a failover is one that acknowledged, nor that a replica keeps what it
//! acknowledged across its own restart. The provider checks when it connects that the
//! server is a primary with at least `n` replicas connected, and refuses with an
//! [`InvalidConfig`](lockkit_core::Error::InvalidConfig) naming both numbers otherwise.
//! Each grant costs one more round trip (the `WAIT`); a renewal round costs none (the
//! `WAIT` ends its pipeline).
//!
//! # Sentinel
//!
//! `redis+sentinel://[user:password@]s1:26379,s2:26379/MASTER_NAME[?options]` (and
//! `rediss+sentinel://` with the `tls` feature) names the sentinels of a Sentinel-managed
//! primary instead of a server. Both of the provider's connections (commands and pub/sub)
//! ask the sentinels, in the order written, for the primary's address whenever they are
//! made, and a connection whose server is not the primary (`INFO replication`) is not kept.
//! The command connection is made again, asking the sentinels again, after an error that
//! says the primary may have changed: no answer, a dropped or refused connection, or a
//! `READONLY` refusal from a primary demoted to a replica. So after a failover, commands go
//! to the new primary within a retry or two. A hold granted on the old primary is renewed on
//! the new one when the grant reached it (which [`replicas`](RedisLockProviderBuilder::replicas)
//! makes sure of), and is signalled lost at its next renewal otherwise; tokens keep
//! increasing either way (see above). A master name the sentinels do not monitor, and hosts
//! that are not sentinels, are an [`InvalidConfig`](lockkit_core::Error::InvalidConfig) at
//! the first use, naming what to change; sentinels that cannot be reached are a retryable
//! connection error. The pub/sub connection stays on a demoted primary while it answers
//! (published wake-ups reach it through replication); when it drops and its server does not
//! answer again, it is made again to the primary the sentinels name (waiters poll
//! meanwhile).
//!
//! # Redis Cluster
//!
//! `redis+cluster://[user:password@]h1:p1,h2:p2[?options]` (and `rediss+cluster://` with the
//! `tls` feature; or [`cluster`](RedisLockProviderBuilder::cluster) on the builder) names some
//! nodes of a Redis Cluster (7.0 or later was tested): any reachable ones, since the client
//! learns the others and the slot map from them. The command connection is the redis crate's
//! cluster connection, which sends each script to the primary of its keys' slot: every key of
//! a lock shares the hash tag `{name}`, so every script touches one slot, and the scripts are
//! the same as on one server. At connect the provider reads `CLUSTER INFO` and keeps the
//! connection only with `cluster_state:ok` (else a retryable connection error: a failover or
//! a reconfiguration is under way); a node with cluster support disabled is an
//! [`InvalidConfig`](lockkit_core::Error::InvalidConfig) that says to use `redis://`, and so
//! is a path (Redis Cluster has database 0 only). With
//! [`replicas(n)`](RedisLockProviderBuilder::replicas) every primary that owns slots must
//! have `n` replicas connected (`CLUSTER NODES`), and the `WAIT` after a grant goes to the
//! primary of the lock's slot.
//!
//! - **Redirections and failovers.** The cluster connection does not retry on its own: a
//!   `MOVED` or `ASK` (a slot that moved or is moving), a dropped connection or a missing
//!   reply is a retryable connection error of that call, whose outcome lockkit treats as
//!   unknown, exactly as a lost reply on one server: an acquisition retries with the same
//!   owner id and finds its own grant, or abandons it; a release retries and accepts "gone"
//!   after a failed attempt. The connection refreshes its slot map after a `MOVED`, so the
//!   retry goes to the new owner of the slot.
//! - **Renewals** are batched per node: each round reads the slot map (`CLUSTER SLOTS`, one
//!   round trip) and sends one pipeline (of up to a thousand renewals) to each primary by
//!   address, concurrently (the redis crate refuses a pipeline routed by keys that span
//!   slots). A renewal that a node refuses because its slot moved (`MOVED`, the script did
//!   not run) and the renewals of a node whose pipeline failed are sent again at once, one
//!   pipeline per slot, routed by the connection's own slot map; a batch per node also keeps a
//!   primary that fails over from holding up the renewals on the others. With `replicas` set
//!   each pipeline ends with its own `WAIT`.
//! - **Wake-ups** use classic pub/sub, which is cluster-wide (each node forwards a `PUBLISH`
//!   to every other over the cluster bus): the provider's pub/sub connection is a plain
//!   connection to one node of the URL, and to the next node of the URL when that one stops
//!   answering (waiters poll meanwhile). Sharded pub/sub (`SPUBLISH`) is not used: the fair
//!   lock's hand-over is published on the waiting provider's own wake channel, which is not
//!   in the lock's slot, and a script may only publish on shard channels of its own slot.
//!   Every message therefore crosses the cluster bus once per node.
//! - **Keyspace notifications** are off on a cluster (each node publishes the events of its
//!   own keys only); a deleted record is noticed at the next renewal.
//! - A hold survives a failover of its slot's primary when the grant and the renewals
//!   reached the promoted replica (which `replicas` narrows, as on one server), and is
//!   signalled lost at its next renewal otherwise; a hold whose slot migrates to another
//!   primary is renewed there once the migration ends (renewals during the migration are
//!   refused with `ASK` or `TRYAGAIN` and retried until the hold's deadline). Tokens keep
//!   increasing across both (see above).
//!
//! # Runtime
//!
//! lockkit-redis runs on Tokio with the time and I/O drivers enabled (`#[tokio::main]` and
//! `#[tokio::test]` do both), and a provider works from any runtime. Each runtime it is used
//! on gets a command connection of its own, so a call takes no thread hop. What keeps holds
//! and wakes waiters runs on lockkit's home runtime ([`lockkit_core::home`]), whatever runtime
//! granted the hold and whether or not that runtime still runs or is being driven: the renewal
//! watchdog, the pub/sub connection with its push routing and its reconnect keeper, the
//! confirmations of hand-overs, the releases of dropped guards and the abandons of cancelled
//! acquisitions (each on the home runtime's command connection).
//!
//! # Cancel safety
//!
//! Every future of the provider and of its handles and guards may be dropped at any await
//! point. An acquisition dropped while its call was in flight (or after a call whose outcome
//! was unknown) is abandoned in the background: its owner id is voided so that a delayed
//! call can never grant it, and a grant it already had is freed; a queued waiter leaves the
//! queue. See the `# Cancel safety` section of each method.
//!
//! # Features
//!
//! - `tls`: `rediss://` URLs with rustls (the `redis-tls` feature of the `lockkit` crate),
//!   and the builder's `tls_root_certificate` and `tls_client_certificate` (methods that
//!   exist with the feature on).
//!   rustls needs a process-wide crypto provider: building a provider for a `rediss://` URL
//!   installs rustls's ring provider as the process default **only when none is installed
//!   yet** (`CryptoProvider::get_default()` is `None`). An application that wants its own
//!   provider installs it before it builds a `rediss://` provider; one that installs its own
//!   later must not `.expect()` `install_default` to succeed. Without the feature, a
//!   `rediss://` URL is an `InvalidConfig` that names the feature to enable.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod builder;
mod client;
mod cluster;
mod error;
mod keys;
mod keyspace;
mod lock;
mod observe;
mod provider;
mod sentinel;
mod store;
mod subscriber;
mod util;
mod watchdog;

pub use builder::{
    DEFAULT_CLAIM_WINDOW, DEFAULT_LEASE, DEFAULT_PREFIX, DEFAULT_REPLICAS_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT,
    MAX_REPLICAS, MIN_CLAIM_WINDOW, MIN_DEFAULT_FENCE_RETENTION, MIN_LEASE, OPTIONS, RedisLockProviderBuilder,
};
use lockkit_core::config::Scheme;
pub use provider::{RedisLockProvider, RenewalStats};

/// The `redis`, `rediss`, `redis+sentinel` and `rediss+sentinel` URL schemes, for `lockkit_core::config::register` (the `lockkit`
/// facade registers it when its `redis` feature is on). Its `connect` reads the URL's
/// address, credentials and options ([`RedisLockProviderBuilder::from_url`]), checks every
/// setting, sends one PING, and returns the provider. `rediss` needs the `tls` feature.
pub const SCHEME: Scheme = Scheme {
    names: &["redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster"],
    backend: BACKEND,
    connect: provider::connect_url,
};

/// The sources of the mutex's acquire and release scripts, for benchmarks that time them raw,
/// with the key layout of earlier versions (acquire: record, fence counter, void marker,
/// queue, queue expiry times, channel; release: the same without the void marker). The
/// provider sends seven keys for a mutex (`layout.lua`); these copies make the seventh, the
/// marker of the other kinds, from the record's name, which a standalone server allows.
#[doc(hidden)]
pub mod scripts {
    pub use crate::store::{ACQUIRE_SCRIPT, RELEASE_SCRIPT};
}

/// The commands an ACL user of lockkit needs, as `ACL SETUSER` rules: the script calls,
/// the commands the scripts run, and the pub/sub commands of the waiters. Together with
/// key and channel patterns for the prefix (`~lockkit:* &lockkit:*`) this is all lockkit
/// needs:
///
/// ```text
/// ACL SETUSER locker on >password resetkeys ~lockkit:* resetchannels &lockkit:* -@all <ACL_COMMANDS>
/// ```
///
/// On a server that publishes keyspace events, `+config|get` and the channels
/// `&__keyspace@*` (both optional) let the provider learn of a deleted record at once instead
/// of at the next renewal (see the crate docs); without them it works as before.
pub const ACL_COMMANDS: &str = "+evalsha +eval +script|load +ping +hello +subscribe +unsubscribe \
    +set +get +mget +del +exists +incr +time +pexpire +pttl +publish +zadd +zrem +zrange +zrangebyscore +zscore \
    +zcount +zcard +hset +hget +hdel +xadd +xrange +xrevrange";

/// The backend's name in errors, spans and capability tables.
pub const BACKEND: &str = "redis";
