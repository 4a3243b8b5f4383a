//! One lease per provider, kept alive by one task (the watchdog), with the signals and keys
//! of every hold bound to it.
//!
//! The session follows each hold's key, so that a hold costs no task and no watch event of
//! its own (a task per hold, spawned at the grant and aborted at the release, woke another
//! worker twice per cycle; a watch that includes the own key hears the own release):
//! - **A key deleted behind the hold's back** is a loss ([`LossReason::RecordGone`]). After
//!   each acknowledged keep-alive the watchdog asks etcd which keys are bound to the lease
//!   (`LeaseTimeToLive` with keys, one request for every hold of the provider); a hold whose
//!   key is not among them is lost. So a deletion is signalled within a third of the TTL
//!   (plus a round trip), well within the contract's bound of a lease, and at once when the
//!   provider watches that lock's deletions anyway because one of its acquisitions waits on
//!   it (watch.rs hands every deletion it hears to [`Session::key_deleted`]). The reply lists
//!   every key bound to the lease; when the holds' keys would not fit in one reply the client
//!   decodes (4 MiB; some 40,000 holds of short names), the check reads the holds' keys
//!   instead, in key order, by pages of up to 3 MiB, and a key not bound to the lease is gone.
//!   With [`MANY_HOLDS`](crate::config::MANY_HOLDS) holds or more, the session watches the deletions under its whole
//!   prefix instead ([`PrefixWatch`]): once one listing sent after the watch was set found
//!   the holds of then, the watch tells every later deletion, and the listing stops (a watch
//!   set again after it ended needs one listing again, and so does a hold that registers
//!   after the watch may have missed its key's deletion: its key put before the watch's
//!   creation, or one of the provider's keys deleted after the hold's put while no hold had
//!   it, the race of a grant and a deletion). Every deletion under the prefix,
//!   other providers' releases too, then reaches this provider; with fewer holds the listing
//!   is one request and the watch not worth it. The watch goes when fewer than half as many
//!   holds are left. A hidden builder setting lowers the threshold, for tests; at one, the
//!   watch is set as the session opens, before any hold (a session whose watch is not set
//!   within the connect timeout fails to open), so that it covers every hold with no listing
//!   at all, and stays. [`EtcdLockProvider::hold_coverage`](crate::EtcdLockProvider::hold_coverage)
//!   tells tests which way follows the holds.
//! - **A hold lost on its own** (its maximum hold reached) while the lease lives has its key
//!   deleted at the next check, and again at each check until etcd answers: the lease, kept
//!   alive by the provider's other holds, would otherwise keep the key, and a stuck holder
//!   never drops its guard.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, KvClient, LeaseKeepAliveStream, LeaseKeeper, LeaseTimeToLiveOptions, Txn,
    TxnOp,
};
use lockkit_core::backend::{HoldSignal, lease_deadline};
use lockkit_core::config::Credentials;
use lockkit_core::{LossReason, Result};
use tokio::runtime::Handle;
use tracing::Instrument;

use crate::config::EtcdConfig;
use crate::deletions::PrefixWatch;
use crate::error::{connect_error, is_token_refused};
use crate::watch::LockWatches;
use lockkit_core::HoldCoverage;

/// What one reply of the holds' check may carry, in bytes: below the client's 4 MiB limit on
/// a message it decodes, with room for the reply's own fields.
const REPLY_BUDGET: usize = 3 << 20;

/// The bytes a key adds to a reply beyond its own (a reply of a range read carries its
/// revisions, version and lease too).
const KEY_OVERHEAD: usize = 48;

/// How long the watchdog pauses before opening its keep-alive stream again after an error.
const RETRY: Duration = Duration::from_millis(100);

/// A token renewed this recently is not renewed again (the requests refused with the old one
/// all retry with the new one), and a renewal that failed this recently is not tried again
/// (each is a password check on the server, which etcd makes costly on purpose).
const TOKEN_RENEWAL_SPACING: Duration = Duration::from_secs(1);

/// A client, its lease and the holds bound to it.
pub(crate) struct Session {
    pub(crate) client: Client,
    /// The client's key-value service alone, for the requests on an acquisition's and a
    /// release's path: one channel handle to clone per request where a [`Client`] clones one
    /// per service (eight) and its connect options.
    pub(crate) kv: KvClient,
    pub(crate) lease: i64,
    pub(crate) ttl: Duration,
    drift: Duration,
    /// The watches of the locks this session's waits and holds use, on one stream.
    pub(crate) keys: Arc<LockWatches>,
    /// The watch of every deletion under the prefix, set while the session has many holds.
    prefix_watch: Arc<PrefixWatch>,
    /// How many holds at once make the session set the prefix watch ([`MANY_HOLDS`](crate::config::MANY_HOLDS) unless the
    /// builder says otherwise).
    many_holds_at: usize,
    /// The key the prefix watch names: the prefix and `/`.
    watch_key: String,
    /// The provider's part of its keys' names (`<lock prefix><id>-<n>`, client.rs), to tell its
    /// own keys among the deletions the watches hear.
    id: String,
    /// The session itself, for the prefix watch's callback.
    me: Weak<Session>,
    /// The runtime the client's connections and the watchdog run on.
    pub(crate) runtime: Handle,
    state: Mutex<State>,
    /// Cleared when the watchdog task is dropped (its runtime shut down) or ends.
    watchdog_alive: Arc<AtomicBool>,
    /// Set while a check of the holds' keys runs ([`Session::check_holds`]).
    checking: AtomicBool,
    /// The bound of one request.
    timeout: Duration,
    /// The user and password the client authenticated with, for a new token
    /// ([`Session::renew_token`]); `None` without authentication.
    credentials: Option<Credentials>,
    /// When the token was last renewed, or a renewal last failed; taken while a renewal runs,
    /// so that one runs at a time.
    token_renewal: tokio::sync::Mutex<TokenRenewal>,
}

/// The last outcomes of [`Session::renew_token`].
#[derive(Default)]
struct TokenRenewal {
    renewed: Option<Instant>,
    failed: Option<Instant>,
}

struct State {
    valid_until: Instant,
    ended: Option<LossReason>,
    /// The hold of each key (a key names one hold at a time: its slot is taken while held),
    /// shared with the hold's [`EtcdHeld`](crate::held::EtcdHeld): one map, one copy of the key.
    holds: HashMap<Arc<str>, Hold>,
    /// The generation of the prefix watch that a listing of the holds' keys sent after its
    /// creation completed for: while that watch runs, no listing is needed.
    covered: Option<u64>,
    /// The latest revision at which a watch heard one of this provider's keys deleted while no
    /// hold of that key was registered (its own release, or a deletion that came before the
    /// grant of a hold it was about to register).
    unmatched: i64,
    /// Counts the holds registered after a deletion of their key may have gone unheard
    /// ([`Session::register`]): a listing sent before the latest of them does not cover them.
    uncovered: u64,
}

/// A hold bound to the lease (its key is the map's): its signal, and the create revision it
/// was granted at (the key's incarnation).
struct Hold {
    signal: HoldSignal,
    revision: i64,
    /// When it was registered: a check of the lease's keys sent before this cannot see it.
    since: Instant,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("lease", &self.lease).field("ttl", &self.ttl).finish_non_exhaustive()
    }
}

/// Clears the flag when dropped: the watchdog holds one, so a runtime that shuts down and
/// drops the task marks the session dead.
struct AliveFlag(Arc<AtomicBool>);

impl Drop for AliveFlag {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Session {
    /// Connects, grants the lease and starts its watchdog on the current runtime, for the
    /// provider whose keys carry `id`.
    pub(crate) async fn open(config: &EtcdConfig, id: &str) -> Result<Arc<Session>> {
        let mut options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_timeout(config.connect_timeout)
            .with_keep_alive(Duration::from_secs(1).min(config.ttl / 4), config.connect_timeout);
        if let Some(credentials) = &config.credentials {
            options = options.with_user(credentials.user(), credentials.password());
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &config.tls {
            options = options.with_tls(crate::tls::options(tls));
        }
        let connect = Client::connect(config.endpoints.clone(), Some(options));
        let mut client = tokio::time::timeout(config.connect_timeout, connect)
            .await
            .map_err(|_| crate::error::unreachable(config, None))?
            .map_err(|e| connect_error(e, config))?;
        crate::access::check(&mut client, config).await?;
        let sent = Instant::now();
        let ttl_secs = i64::try_from(config.ttl.as_secs()).unwrap_or(i64::MAX);
        let grant = tokio::time::timeout(config.connect_timeout, client.lease_grant(ttl_secs, None))
            .await
            .map_err(|_| crate::error::unreachable(config, None))?
            .map_err(|e| connect_error(e, config))?;
        let granted = Duration::from_secs(u64::try_from(grant.ttl()).unwrap_or(0));
        // A lease the server lengthened is still kept by our deadline, which counts from ours.
        let ttl = if granted > Duration::ZERO { granted.min(config.ttl) } else { config.ttl };
        if granted != config.ttl {
            tracing::warn!(asked = ?config.ttl, ?granted, "etcd granted another lease TTL than asked");
        }
        let lease = grant.id();
        let (keeper, stream) = match client.lease_keep_alive(lease).await {
            Ok(pair) => pair,
            Err(e) => {
                let _ = client.lease_revoke(lease).await;
                return Err(connect_error(e, config));
            }
        };
        let alive = Arc::new(AtomicBool::new(true));
        let session = Arc::new_cyclic(|me: &Weak<Session>| {
            let session_of_watch = me.clone();
            let deleted = move |key: &str, revision: i64| {
                if let Some(session) = session_of_watch.upgrade() {
                    session.key_deleted(key, revision);
                }
            };
            let keys = Arc::new(LockWatches::new(client.clone(), &config.prefix, config.connect_timeout, deleted));
            Session {
                keys,
                prefix_watch: Arc::new(PrefixWatch::default()),
                many_holds_at: config.many_holds,
                watch_key: format!("{}/", config.prefix),
                id: id.to_owned(),
                me: me.clone(),
                kv: client.kv_client(),
                client,
                lease,
                ttl,
                drift: config.drift,
                runtime: Handle::current(),
                state: Mutex::new(State {
                    valid_until: lease_deadline(sent, ttl, config.drift),
                    ended: None,
                    holds: HashMap::new(),
                    covered: None,
                    unmatched: 0,
                    uncovered: 0,
                }),
                watchdog_alive: Arc::clone(&alive),
                checking: AtomicBool::new(false),
                timeout: config.connect_timeout,
                credentials: config.credentials.clone(),
                token_renewal: tokio::sync::Mutex::new(TokenRenewal::default()),
            }
        });
        lockkit_core::home::spawn(watchdog(Arc::downgrade(&session), keeper, stream, AliveFlag(alive)));
        if session.many_holds_at <= 1 {
            // Every hold is to be covered by the prefix watch, the first one too: the watch is
            // set before the session serves any acquisition, and, there being no hold at its
            // creation, no listing is needed for it.
            // That threshold is the tests' way onto the prefix watch, so a session whose
            // watch is not set in time fails to open rather than falling back to the listing
            // unseen (dropped, it revokes its lease).
            session.start_prefix_watch();
            let Ok(generation) = tokio::time::timeout(config.connect_timeout, session.prefix_watch.created()).await
            else {
                return Err(crate::error::unreachable(config, None).with_context(format!(
                    "set the watch of the deletions under {} that a many-holds threshold of 1 asks for",
                    session.watch_key
                )));
            };
            let mut state = session.state();
            if state.holds.is_empty() {
                state.covered = Some(generation);
            }
        }
        Ok(session)
    }

    /// Authenticates again when `error` is a refusal of the client's token
    /// ([`is_token_refused`]); true when the client now has a new token (from this call, or
    /// from one made just before for another refused request), so that the request may be
    /// sent again. etcd-client authenticates once, when it connects, and never again.
    pub(crate) async fn renew_token_after(&self, error: &etcd_client::Error) -> bool {
        self.token_refused(error) && self.renew_token().await
    }

    /// Whether `error` refused a request of this session for its token: [`is_token_refused`],
    /// or, with credentials, a request that went without a token while a renewal was under
    /// way (`etcdserver: user name is empty`; without credentials that error is what it says).
    pub(crate) fn token_refused(&self, error: &etcd_client::Error) -> bool {
        is_token_refused(error)
            || (self.has_credentials()
                && matches!(error, etcd_client::Error::GRpcStatus(status) if status.message().contains("user name is empty")))
    }

    /// Whether the client authenticated (with a user and password).
    pub(crate) fn has_credentials(&self) -> bool {
        self.credentials.is_some()
    }

    /// Authenticates again with the session's credentials and hands the new token to every
    /// service of the client (they share it): once for all the requests refused together.
    pub(crate) async fn renew_token(&self) -> bool {
        let Some(credentials) = &self.credentials else { return false };
        let mut last = self.token_renewal.lock().await;
        let recent = |at: Option<Instant>| at.is_some_and(|at| at.elapsed() < TOKEN_RENEWAL_SPACING);
        if recent(last.renewed) {
            return true;
        }
        if recent(last.failed) {
            return false;
        }
        let span = tracing::info_span!("lockkit.etcd.renew_token", backend = crate::BACKEND, lease = self.lease);
        let mut auth = self.client.auth_client();
        // etcd refuses even the authentication of a request that carries an expired token:
        // the request goes without one. Requests sent meanwhile are refused as anonymous
        // ("user name is empty", see token_refused) and sent again with the new token.
        auth.remove_client_auth();
        let renewal = auth.set_client_auth(credentials.user().to_owned(), credentials.password().to_owned());
        match tokio::time::timeout(self.timeout, renewal).instrument(span).await {
            Ok(Ok(())) => {
                tracing::info!(backend = crate::BACKEND, "etcd refused the authentication token; authenticated again");
                last.renewed = Some(Instant::now());
                true
            }
            Ok(Err(error)) => {
                tracing::warn!(backend = crate::BACKEND, %error, "etcd refused the authentication token, and authenticating again failed");
                last.failed = Some(Instant::now());
                false
            }
            Err(_) => {
                tracing::warn!(
                    backend = crate::BACKEND,
                    "etcd refused the authentication token, and authenticating again timed out"
                );
                last.failed = Some(Instant::now());
                false
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding this lock; recover the data if something ever did.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the lease is kept alive: not ended, its deadline not passed, its watchdog running.
    pub(crate) fn is_alive(&self) -> bool {
        let state = self.state();
        state.ended.is_none() && Instant::now() < state.valid_until && self.watchdog_alive.load(Ordering::SeqCst)
    }

    /// Whether the runtime of the client and the watchdog still runs: a client whose runtime
    /// shut down can send nothing more.
    pub(crate) fn runtime_alive(&self) -> bool {
        self.watchdog_alive.load(Ordering::SeqCst)
    }

    /// The local deadline of every hold bound to the lease.
    pub(crate) fn valid_until(&self) -> Instant {
        self.state().valid_until
    }

    /// Binds `signal` to the lease and follows `key`, granted at create revision `revision`:
    /// renewals extend the signal, the end of the lease or the key's deletion loses it. False
    /// (and the signal lost) when the lease has ended already.
    pub(crate) fn register(&self, signal: &HoldSignal, key: &Arc<str>, revision: i64) -> bool {
        let mut state = self.state();
        if let Some(reason) = state.ended.clone() {
            drop(state);
            signal.lose(reason);
            return false;
        }
        let hold = Hold { signal: signal.clone(), revision, since: Instant::now() };
        let replaced = state.holds.insert(Arc::clone(key), hold);
        // The prefix watch may have missed this key's deletion: one that came before its
        // creation (no listing sent since then counts this hold), or one it handed on before
        // this registration (the key was not ours to lose then). The next check lists the
        // holds' keys again. Under the same lock as `key_deleted`'s look-up, so a deletion is
        // either matched there or counted in `unmatched` here.
        if revision < state.unmatched.max(self.prefix_watch.created_at()) {
            state.covered = None;
            state.uncovered += 1;
        }
        let many = state.holds.len() >= self.many_holds_at;
        drop(state);
        if let Some(old) = replaced
            && old.revision != revision
        {
            // An older incarnation of the key, still registered: the key was put anew since.
            old.signal.lose(LossReason::RecordGone);
        }
        if many && !self.prefix_watch.is_running() {
            self.start_prefix_watch();
        }
        true
    }

    /// Starts the prefix watch, unless it runs: every deletion it hears goes to
    /// [`Session::key_deleted`].
    fn start_prefix_watch(&self) {
        let me = self.me.clone();
        let deleted = move |key: &str, revision: i64| {
            if let Some(session) = me.upgrade() {
                session.key_deleted(key, revision);
            }
        };
        self.prefix_watch.start(&self.runtime, self.keys.hub(), self.watch_key.clone(), deleted);
    }

    /// Stops the prefix watch when fewer than half of the threshold's holds are left (never
    /// with a threshold of one).
    fn few_holds_left(&self) {
        if self.prefix_watch.is_running() && self.state().holds.len() < self.many_holds_at / 2 {
            self.prefix_watch.stop();
            self.state().covered = None;
        }
    }

    /// How the live holds hear of their key's deletion: from the prefix watch alone when it
    /// runs and needs no listing ([`check_holds`] then sends none), else from the listing.
    pub(crate) fn coverage(&self) -> HoldCoverage {
        let generation = self.prefix_watch.generation();
        let state = self.state();
        let holds = state.holds.len();
        let by_watch = generation.is_some() && state.covered == generation;
        HoldCoverage {
            store_wide_watch: generation.is_some(),
            store_wide: if by_watch { holds } else { 0 },
            per_hold: if by_watch { 0 } else { holds },
        }
    }

    /// Unbinds the hold of `key` granted at `revision`, released (or whose key the session
    /// deleted); a later incarnation of the key stays.
    pub(crate) fn unregister(&self, key: &str, revision: i64) {
        let mut state = self.state();
        if state.holds.get(key).is_some_and(|hold| hold.revision == revision) {
            state.holds.remove(key);
        }
    }

    /// A watch heard `key` deleted at `revision`: the hold of that key, if it was granted
    /// before, is lost. A released hold was unbound before its delete was sent, so its own
    /// release is no loss.
    pub(crate) fn key_deleted(&self, key: &str, revision: i64) {
        let signal = {
            let mut state = self.state();
            let signal = state.holds.get(key).filter(|hold| hold.revision < revision).map(|hold| hold.signal.clone());
            if signal.is_none() && self.is_own(key) {
                state.unmatched = state.unmatched.max(revision);
            }
            signal
        };
        if let Some(signal) = signal
            && signal.lose(LossReason::RecordGone)
        {
            tracing::debug!(backend = crate::BACKEND, %key, revision, "a held key was deleted");
        }
    }

    /// Whether `key` is one of this provider's (`<lock prefix><id>-<n>`).
    fn is_own(&self, key: &str) -> bool {
        key.rsplit_once('/')
            .and_then(|(_, last)| last.strip_prefix(self.id.as_str()))
            .is_some_and(|n| n.starts_with('-'))
    }

    /// Starts a check of the holds' keys in the background ([`check_holds`]), unless one runs.
    fn start_check(self: &Arc<Self>) {
        let any = !self.state().holds.is_empty();
        if any && !self.checking.swap(true, Ordering::SeqCst) {
            let session = Arc::clone(self);
            lockkit_core::home::spawn(async move {
                check_holds(&session).await;
                session.checking.store(false, Ordering::SeqCst);
            });
        }
    }

    fn renewed(&self, valid_until: Instant) {
        let signals: Vec<HoldSignal> = {
            let mut state = self.state();
            state.valid_until = state.valid_until.max(valid_until);
            state.holds.values().map(|hold| hold.signal.clone()).collect()
        };
        for signal in signals {
            signal.extend(valid_until);
        }
    }

    /// Ends the lease locally: every hold bound to it is lost with `reason`.
    pub(crate) fn end(&self, reason: LossReason) {
        let signals: Vec<HoldSignal> = {
            let mut state = self.state();
            if state.ended.is_some() {
                return;
            }
            state.ended = Some(reason.clone());
            state.holds.drain().map(|(_, hold)| hold.signal).collect()
        };
        for signal in signals {
            signal.lose(reason.clone());
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Nothing is bound to the lease any more: revoke it rather than let it run out.
        if self.watchdog_alive.load(Ordering::SeqCst) {
            let mut client = self.client.clone();
            let lease = self.lease;
            self.runtime.spawn(async move {
                let _ = client.lease_revoke(lease).await;
            });
        }
    }
}

/// The watchdog: a keep-alive every third of the TTL; each acknowledged one moves the
/// deadline of every hold to its send time plus the TTL minus the drift. A lease the server
/// reports gone, or a deadline that passes without an acknowledgement, ends the session.
async fn watchdog(session: Weak<Session>, mut keeper: LeaseKeeper, mut stream: LeaseKeepAliveStream, flag: AliveFlag) {
    let _flag = flag;
    loop {
        let Some(interval) = session.upgrade().map(|s| s.ttl / 3) else { return };
        tokio::time::sleep(interval).await;
        loop {
            let Some(s) = session.upgrade() else { return };
            let sent = Instant::now();
            let until = s.valid_until();
            let exchange = async {
                keeper.keep_alive().await?;
                stream.message().await
            };
            match tokio::time::timeout_at(until.into(), exchange).await {
                Ok(Ok(Some(reply))) if reply.ttl() > 0 => {
                    s.renewed(lease_deadline(sent, s.ttl, s.drift));
                    s.keys.sweep();
                    s.few_holds_left();
                    s.start_check();
                    break;
                }
                Ok(Ok(Some(_))) => {
                    tracing::warn!(lease = s.lease, "etcd reports the lease gone");
                    s.end(LossReason::SessionExpired);
                    return;
                }
                Ok(Ok(None) | Err(_)) => {
                    // The stream broke: open another one until the deadline passes.
                    tokio::time::sleep(RETRY).await;
                    let mut client = s.client.clone();
                    match tokio::time::timeout_at(until.into(), client.lease_keep_alive(s.lease)).await {
                        Ok(Ok((k, st))) => {
                            keeper = k;
                            stream = st;
                        }
                        Ok(Err(error)) => {
                            s.renew_token_after(&error).await;
                        }
                        Err(_) => {}
                    }
                    if Instant::now() >= until {
                        s.end(LossReason::DeadlineExpired);
                        return;
                    }
                }
                Err(_) => {
                    s.end(LossReason::DeadlineExpired);
                    return;
                }
            }
        }
    }
}

/// Whether a hold lost for `reason` may still have its key in the store, bound to a lease that
/// lives: a loss the hold's own side decided (its maximum hold reached, its deadline passed
/// just before a late keep-alive was acknowledged), not one the store or the lease's end made.
fn key_may_remain(reason: &LossReason) -> bool {
    !matches!(reason, LossReason::RecordGone | LossReason::SessionExpired | LossReason::ClientClosed)
}

/// Checks the keys of the session's holds against the store, once: a hold whose key is no
/// longer bound to the lease is lost ([`LossReason::RecordGone`]), and the key of a hold lost
/// on its own is deleted (only the incarnation the hold created; unbound once etcd answered,
/// tried again at the next check otherwise). Every request is bounded by the request timeout;
/// a check that fails changes nothing.
async fn check_holds(session: &Arc<Session>) {
    let mut client = session.client.clone();
    let timeout = session.timeout;
    let lost: Vec<(Arc<str>, i64)> = {
        let state = session.state();
        state
            .holds
            .iter()
            .filter(|(_, hold)| hold.signal.loss().as_ref().is_some_and(key_may_remain))
            .map(|(key, hold)| (Arc::clone(key), hold.revision))
            .collect()
    };
    for (key, revision) in lost {
        tracing::debug!(backend = crate::BACKEND, %key, "deleting the key of a hold lost on its own");
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_bytes(), CompareOp::Equal, revision)])
            .and_then([TxnOp::delete(key.as_bytes(), None)]);
        // Deleted, or gone already (the condition names this incarnation only).
        match tokio::time::timeout(timeout, client.txn(txn)).await {
            Ok(Ok(_)) => session.unregister(&key, revision),
            Ok(Err(error)) => {
                session.renew_token_after(&error).await;
            }
            Err(_) => {}
        }
    }
    // While the prefix watch runs and a listing after its creation found the holds of then,
    // it tells every deletion: no listing.
    let generation = session.prefix_watch.generation();
    if generation.is_some() && session.state().covered == generation {
        return;
    }
    let sent = Instant::now();
    let (mut keys, uncovered): (Vec<Arc<str>>, u64) = {
        let state = session.state();
        (state.holds.keys().cloned().collect(), state.uncovered)
    };
    // One reply lists every key bound to the lease, a few bytes more than the key each: past
    // what the client decodes (4 MiB, not settable on etcd-client's lease client) the holds'
    // keys are read instead, in key order, by pages that fit (several round trips, each for
    // thousands of holds; keys of others between ours come along and are skipped).
    let listed: usize = keys.iter().map(|key| key.len() + KEY_OVERHEAD).sum();
    let bound: std::collections::HashSet<Vec<u8>> = if listed <= REPLY_BUDGET {
        let options = LeaseTimeToLiveOptions::new().with_keys();
        let reply = match tokio::time::timeout(timeout, client.lease_time_to_live(session.lease, Some(options))).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(error)) => {
                session.renew_token_after(&error).await;
                return;
            }
            Err(_) => return,
        };
        // A lease the server no longer knows is the watchdog's to end (its keep-alive says so).
        if reply.ttl() <= 0 {
            return;
        }
        reply.keys().iter().cloned().collect()
    } else {
        keys.sort_unstable();
        let longest = keys.iter().map(|key| key.len()).max().unwrap_or(0) + KEY_OVERHEAD;
        let page = i64::try_from((REPLY_BUDGET / longest).max(1)).unwrap_or(i64::MAX);
        let Some(last) = keys.last() else { return };
        let end = format!("{last}\0");
        let mut from = keys.first().map(|key| key.as_bytes().to_vec()).unwrap_or_default();
        let mut bound = std::collections::HashSet::new();
        loop {
            let options = GetOptions::new().with_range(end.clone()).with_keys_only().with_limit(page);
            let reply = match tokio::time::timeout(timeout, client.get(from.clone(), Some(options))).await {
                Ok(Ok(reply)) => reply,
                Ok(Err(error)) => {
                    session.renew_token_after(&error).await;
                    return;
                }
                Err(_) => return,
            };
            bound.extend(reply.kvs().iter().filter(|kv| kv.lease() == session.lease).map(|kv| kv.key().to_vec()));
            match reply.kvs().last() {
                Some(kv) if reply.more() => {
                    from = kv.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        bound
    };
    let gone: Vec<(Arc<str>, HoldSignal)> = {
        let state = session.state();
        state
            .holds
            .iter()
            .filter(|(key, hold)| hold.since < sent && hold.signal.is_held() && !bound.contains(key.as_bytes()))
            .map(|(key, hold)| (Arc::clone(key), hold.signal.clone()))
            .collect()
    };
    for (key, signal) in gone {
        if signal.lose(LossReason::RecordGone) {
            tracing::debug!(backend = crate::BACKEND, %key, "a held key is no longer bound to the lease");
        }
    }
    if generation.is_some() && session.prefix_watch.generation() == generation {
        let mut state = session.state();
        // Unless a hold registered since needs a listing sent after it.
        if state.uncovered == uncovered {
            state.covered = generation;
        }
    }
}

#[cfg(test)]
mod tests;
