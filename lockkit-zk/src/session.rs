//! One ZooKeeper session of a provider: its client, its live holds, and the one task that
//! watches the session state and keeps the holds' local deadlines moving.
//!
//! # How a hold's deadline is kept
//!
//! The server expires a session no earlier than the session timeout `T` after it last heard
//! from the client, and it heard from us after we sent any request it answered. So when a
//! request sent at `s` is answered, every hold of the session is guaranteed until
//! `s + T - drift` ([`lease_deadline`]), `T` being the timeout the server *granted* (it clamps
//! the one asked to its own range). While holds are live, the session task sends a cheap
//! `exists` on the base path every `T/3` and extends every hold from its send time.
//!
//! # How a hold's deletion is seen
//!
//! A session with few holds lets each hold watch its own node (see the held module): a task
//! and a data watch per hold, and no event about anyone else's nodes. Once a session has
//! [`MANY_HOLDS`](crate::config::MANY_HOLDS) holds at once, it sets one persistent recursive watch on its base path
//! (ZooKeeper 3.6 and later), and the holds granted from then on cost an entry in its
//! [`HoldTable`] and no request, task or watch of their own: the deletion of any node below
//! the base path reaches the session task, which loses the hold of that node, if it is one's.
//! The holds that watched their own node until then move onto it (their tasks and watches
//! end; one `exists` each finds a deletion their own watch heard but had not told yet).
//! The price is that the session hears of every change below its base path, other clients'
//! included, which is why it is not set for a few holds; it is removed once no hold uses it
//! and fewer than half as many holds are left. Events that happen while the connection is down
//! are not replayed when it comes back (ZOOKEEPER-4698), so after a reconnection the session
//! asks once whether each of those holds' nodes still exists. A hidden builder setting lowers
//! the threshold, for tests; at one, the watch is set as the session opens (a session that
//! cannot set it fails to open), so that it covers every hold, the first included, and stays.
//! [`ZkLockProvider::hold_coverage`](crate::ZkLockProvider::hold_coverage) tells tests how
//! many holds each way covers.
//!
//! Session states drive the rest: `Disconnected` suspends the holds (no renewal can be
//! answered, so the deadline keeps running; with [`DisconnectPolicy::LoseOnDisconnect`] they
//! are lost at once), `SyncConnected` renews at once, and the terminal states (`Expired`,
//! `Closed`, `AuthFailed`) lose every hold.
//!
//! # Runtimes
//!
//! zookeeper-client runs a session's connection as a task on the Tokio runtime where the
//! session was opened, and the session task of this module runs beside it. Sessions are
//! opened on lockkit's home runtime ([`lockkit_core::home`]), which nothing but lockkit drives
//! and which never shuts down: the session's pings, its renewals and its state changes never
//! depend on the runtime the provider is used from. Requests from any runtime reach the
//! session's connection task through the client's channel. Should the session's tasks still
//! go (a process without a home thread, whose fallback runtime shut down), the session task's
//! `JoinHandle` tells: [`Session::is_alive`] is false once it finished, the holds of the session
//! are lost at that moment ([`LossReason::ClientClosed`]), and the provider opens a new session.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use lockkit_core::backend::{HoldSignal, lease_deadline};
use lockkit_core::{Error, LockName, LossReason, Result};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use zookeeper_client as zk;

use crate::config::{DisconnectPolicy, ZkConfig, check_drift};
use crate::error::{BACKEND, Failure, is_connection, is_loss, loss_for_state, map};
use crate::holds::{HoldTable, leaves_node};
use lockkit_core::HoldCoverage;

/// How long the probe waits for a TCP connection to one server at most.
const PROBE_LIMIT: Duration = Duration::from_secs(2);

/// The shortest renewal period, whatever the server granted.
const MIN_RENEW_EVERY: Duration = Duration::from_millis(1);

/// How many times one step is retried after a lost connection before giving up.
pub(crate) const RETRIES: usize = 8;

/// How many `exists` requests on the holds' nodes are in flight at once after a reconnection.
const CHECKS_IN_FLIGHT: usize = 1000;

/// One ZooKeeper session and the holds it carries.
pub(crate) struct Session {
    pub(crate) client: zk::Client,
    /// The negotiated session timeout: the lease of every hold of this session.
    pub(crate) timeout: Duration,
    /// The drift margin of this session's holds.
    drift: Duration,
    /// The runtime the session's client and tasks run on: the home runtime.
    pub(crate) runtime: Handle,
    /// The ACL entries of every node we create.
    pub(crate) acls: Vec<zk::Acl>,
    /// The base path, renewed against.
    root: String,
    policy: DisconnectPolicy,
    /// How many holds at once make the session watch its base path recursively
    /// ([`MANY_HOLDS`](crate::config::MANY_HOLDS) unless the builder says otherwise).
    many_holds_at: usize,
    holds: Mutex<HoldTable>,
    /// Tells the session task that the session has many holds: time for the recursive watch.
    many_holds: Arc<tokio::sync::Notify>,
    /// Woken when the recursive watch took over the holds that watched their own node.
    taken_over: tokio::sync::Notify,
    /// The session task: finished when the session ended or its runtime shut down.
    task: OnceLock<JoinHandle<()>>,
    /// Set when a request or watch failed as only a session whose tasks are gone fails.
    broken: AtomicBool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.client.session_id())
            .field("timeout", &self.timeout)
            .field("state", &self.client.state())
            .field("alive", &self.is_alive())
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Opens a new session on the home runtime: fails fast when every server refuses TCP
    /// connections, connects, checks the granted session timeout, makes sure the base path
    /// exists, and starts the session task.
    ///
    /// Errors name the store's address; `lock` is the lock being acquired, if any.
    pub(crate) async fn open(config: &Arc<ZkConfig>, lock: Option<&LockName>) -> Result<Arc<Session>> {
        let address = config.address();
        let (config, lock) = (Arc::clone(config), lock.cloned());
        lockkit_core::home::run(async move { Self::open_here(&config, lock.as_ref()).await })
            .await
            .map_err(|error| error.with_server(Some(&address)))
    }

    async fn open_here(config: &ZkConfig, lock: Option<&LockName>) -> Result<Arc<Session>> {
        let runtime = Handle::try_current()
            .map_err(|_| Error::connection(BACKEND, lock, Failure::NoRuntime).with_context("open a session"))?;
        refuse_fast_when_no_server_listens(config, lock).await?;
        let mut connector = zk::Client::connector().with_session_timeout(config.session_timeout);
        if let Some(timeout) = config.connect_timeout {
            connector = connector.with_connection_timeout(timeout);
        }
        if let Some(credentials) = &config.credentials {
            let digest = format!("{}:{}", credentials.user(), credentials.password());
            connector = connector.with_auth("digest", digest.as_bytes());
        }
        // The client's connection task is spawned on the current runtime, the session's home.
        let client = connector
            .connect(&config.connect_string())
            .await
            .map_err(|e| map(e, lock).with_context("open a session"))?;
        let timeout = client.session_timeout();
        if timeout != config.session_timeout {
            tracing::warn!(
                backend = BACKEND,
                asked = ?config.session_timeout,
                granted = ?timeout,
                "the ZooKeeper server granted another session timeout than asked (it clamps it to its \
                 [minSessionTimeout, maxSessionTimeout]); holds use the granted one"
            );
        }
        let drift = match config.drift {
            Some(drift) => check_drift(drift, timeout, "granted by the server")?,
            None => config.drift_for(timeout),
        };
        let acls = config.acls();
        let root = config.root.clone();
        ensure_path(&client, &root, &acls, lock).await?;
        let session = Arc::new(Session {
            client,
            timeout,
            drift,
            runtime: runtime.clone(),
            acls,
            root,
            policy: config.disconnect_policy,
            many_holds_at: config.many_holds,
            holds: Mutex::new(HoldTable::default()),
            many_holds: Arc::new(tokio::sync::Notify::new()),
            taken_over: tokio::sync::Notify::new(),
            task: OnceLock::new(),
            broken: AtomicBool::new(false),
        });
        // With a threshold of one, every hold is to be covered, the first one too: the watch is
        // set before the session serves any acquisition. That threshold is the tests' way onto
        // the recursive watch, so a session that cannot set it fails to open rather than
        // falling back to a watch per hold unseen.
        let recursive = if session.many_holds_at <= 1 {
            let watcher = add_recursive_watch(&session).await.map_err(|error| {
                session.error(error, lock).with_context(format!(
                    "set the recursive watch on {} that a many-holds threshold of 1 asks for (ZooKeeper 3.6 or later)",
                    session.root
                ))
            })?;
            session.holds().watching = true;
            Some(watcher)
        } else {
            None
        };
        let states = session.client.state_watcher();
        let many = Arc::clone(&session.many_holds);
        let task = runtime.spawn(watch_session(Arc::downgrade(&session), states, many, recursive));
        let _ = session.task.set(task);
        tracing::debug!(backend = BACKEND, session = %session.client.session_id(), ?timeout, "zk session opened");
        Ok(session)
    }

    /// Whether the session can still be used: not ended (expired, closed, refused), and not
    /// [cut off](Self::is_cut_off).
    pub(crate) fn is_alive(&self) -> bool {
        !self.client.state().is_terminated() && !self.is_cut_off()
    }

    /// Whether the session can no longer send anything though it has not ended: its tasks
    /// were dropped with the runtime they ran on (its client still reports the state it saw
    /// last), or a request or watch failed as only such a session fails. Its nodes stay on
    /// the server until it expires the session; another session may delete them.
    pub(crate) fn is_cut_off(&self) -> bool {
        let gone = self.broken.load(Ordering::SeqCst) || self.task.get().is_some_and(JoinHandle::is_finished);
        gone && !self.client.state().is_terminated()
    }

    /// Records that a request or watch of this session failed as only a session whose tasks
    /// are gone fails: the provider opens a new session for what comes next.
    pub(crate) fn mark_broken(&self) {
        if !self.broken.swap(true, Ordering::SeqCst) {
            tracing::debug!(backend = BACKEND, session = %self.client.session_id(), "the zk session is cut off");
        }
    }

    /// Sends a request made by `call` again while its connection is lost, at most
    /// [`RETRIES`] times: its answer, the error it ended with mapped by
    /// [`error`](Self::error), or the last loss with `context` (what was being done).
    pub(crate) async fn retry_on_loss<T, F, Fut>(
        &self,
        lock: &LockName,
        context: &'static str,
        mut call: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        let mut last = zk::Error::ConnectionLoss;
        for _ in 0..RETRIES {
            match call().await {
                Ok(answer) => return Ok(answer),
                Err(error) if is_loss(&error) => last = error,
                Err(error) => return Err(self.error(error, Some(lock))),
            }
        }
        Err(self.error(last, Some(lock)).with_context(context))
    }

    /// Maps a client error of a request on this session: as [`map`], except that the odd
    /// errors of a session whose tasks are gone (zookeeper-client reports them as
    /// `UnexpectedError`) are a retryable connection error, after which the session is no
    /// longer used.
    pub(crate) fn error(&self, error: zk::Error, lock: Option<&LockName>) -> Error {
        if is_connection(&error) {
            return map(error, lock);
        }
        if self.is_cut_off() {
            return Error::connection(BACKEND, lock, Failure::RuntimeGone);
        }
        if matches!(error, zk::Error::UnexpectedError(_)) {
            self.mark_broken();
            return Error::connection(BACKEND, lock, error).with_context("the session broke");
        }
        map(error, lock)
    }

    /// The local deadline of a hold confirmed by a request sent at `sent_at`.
    pub(crate) fn deadline_from(&self, sent_at: Instant) -> Instant {
        lease_deadline(sent_at, self.timeout, self.drift)
    }

    fn holds(&self) -> std::sync::MutexGuard<'_, HoldTable> {
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a live hold of the node at `path`, to be renewed and told of the session's loss;
    /// returns whether the session's recursive watch tells its node's deletion (when not, the
    /// hold must watch its node itself).
    pub(crate) fn register(&self, signal: HoldSignal, path: &Arc<str>) -> bool {
        let (watched, gone, count) = {
            let mut holds = self.holds();
            let (watched, gone) = holds.insert(signal.clone(), path);
            (watched, gone, holds.len())
        };
        if !watched && count >= self.many_holds_at {
            self.many_holds.notify_one();
        }
        if gone {
            // Deleted by someone else between our create and this grant.
            self.unregister(path);
            signal.lose(LossReason::RecordGone);
        }
        if !self.is_alive() {
            // The session ended while the grant was being made: nothing will renew the hold.
            self.lose_all(&LossReason::ClientClosed);
        }
        watched
    }

    /// Forgets the hold of the node at `path` (released or lost).
    pub(crate) fn unregister(&self, path: &str) {
        self.holds().remove(path);
    }

    /// The recursive watch is set: it covers the holds registered from now on and, from here,
    /// those that watched their own node too, whose tasks end (freeing a task and a watch
    /// each, [`taken_over`](Self::taken_over)). One `exists` per hold then finds a node
    /// deleted before the watch was set whose own watch's event was not handled yet.
    fn take_over_holds(self: &Arc<Self>) {
        {
            let mut holds = self.holds();
            holds.watching = true;
            holds.cover_all();
        }
        self.taken_over.notify_waiters();
        self.check_nodes();
    }

    /// Resolves once the hold of the node at `path` is covered by the recursive watch (after
    /// [`take_over_holds`](Self::take_over_holds)): its own watch may go.
    pub(crate) async fn taken_over(&self, path: &str) {
        loop {
            let notified = self.taken_over.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check, so that a take-over between the two is not missed.
            notified.as_mut().enable();
            if self.holds().is_watched(path) {
                return;
            }
            notified.await;
        }
    }

    /// How many holds are live.
    pub(crate) fn hold_count(&self) -> usize {
        self.holds().len()
    }

    /// How the live holds hear of their node's deletion, from the table of holds.
    pub(crate) fn coverage(&self) -> HoldCoverage {
        self.holds().coverage()
    }

    /// Extends every live hold to the deadline of a request sent at `sent_at` and answered.
    fn renew_all(&self, sent_at: Instant) {
        let deadline = self.deadline_from(sent_at);
        let holds = self.holds().signals();
        for signal in holds {
            signal.extend(deadline);
        }
    }

    /// Declares every live hold lost; the nodes of watched holds that this leaves behind are
    /// returned, to be deleted once the session answers again.
    fn lose_all(&self, reason: &LossReason) -> Vec<Arc<str>> {
        let holds = self.holds().drain();
        let mut left = Vec::new();
        for (signal, path) in holds {
            signal.lose(reason.clone());
            if let Some(path) = path
                && leaves_node(Some(reason))
            {
                left.push(path);
            }
        }
        left
    }

    /// The node at `path` was deleted: its hold, if it is one's, is lost. Only a contender
    /// node (`root/lock/node`) can be a hold's: the deletion of anything else, such as the
    /// server's clean-up of empty lock znodes (containers, up to 10,000 a minute after many
    /// locks were used), is dropped here, without taking the table's lock or taking a place
    /// among its recent deletions.
    fn node_deleted(&self, path: &str) {
        if !is_contender_path(&self.root, path) {
            return;
        }
        let signal = self.holds().node_deleted(path);
        if let Some(signal) = signal {
            tracing::debug!(backend = BACKEND, %path, "a held node was deleted");
            signal.lose(LossReason::RecordGone);
        }
    }

    /// Deletes one of our nodes, retrying while the connection breaks; a missing node is fine.
    pub(crate) async fn delete_node(&self, path: &str) {
        for _ in 0..RETRIES {
            match self.client.delete(path, None).await {
                Err(ref error) if is_loss(error) => continue,
                Ok(()) => {
                    tracing::debug!(backend = BACKEND, %path, "deleted an abandoned or lost node");
                    return;
                }
                Err(_) => return,
            }
        }
    }

    /// Deletes, in the background, nodes of holds lost while their nodes stayed.
    fn free_nodes(self: &Arc<Self>, paths: Vec<Arc<str>>) {
        if paths.is_empty() {
            return;
        }
        let session = Arc::clone(self);
        drop(self.runtime.spawn(async move {
            for path in paths {
                session.delete_node(&path).await;
            }
        }));
    }

    /// Asks whether each watched hold's node still exists, after a reconnection (the events
    /// of the time the connection was down are not replayed): a hold whose node is gone is lost.
    fn check_nodes(self: &Arc<Self>) {
        let holds = self.holds().watched();
        if holds.is_empty() {
            return;
        }
        let session = Arc::clone(self);
        drop(self.runtime.spawn(async move {
            for chunk in holds.chunks(CHECKS_IN_FLIGHT) {
                // zookeeper-client sends a request when its future is made: all go out at once.
                let checks: Vec<_> = chunk.iter().map(|(path, _)| session.client.check_stat(path)).collect();
                for (check, (path, signal)) in checks.into_iter().zip(chunk) {
                    if let Ok(None) = check.await
                        && signal.is_held()
                    {
                        session.node_deleted(path);
                    }
                }
            }
        }));
    }

    /// Runs `future` in the background on the session's runtime; when called on that runtime,
    /// its first poll happens right here, so that the ZooKeeper requests it makes first are
    /// sent now, in order with the caller's.
    pub(crate) fn spawn_now(&self, future: impl Future<Output = ()> + Send + 'static) {
        spawn_now(&self.runtime, future);
    }
}

/// Whether `path` names a contender node under `root`: `root/lock/node`.
fn is_contender_path(root: &str, path: &str) -> bool {
    path.strip_prefix(root)
        .and_then(|rest| rest.strip_prefix('/'))
        .and_then(|rest| rest.split_once('/'))
        .is_some_and(|(lock, node)| !lock.is_empty() && !node.is_empty() && !node.contains('/'))
}

/// Runs `future` on `runtime`, polling it once right here first when the caller runs on that
/// same runtime (anything it creates there, a timer say, then belongs to the runtime it will
/// keep running on). A runtime that has shut down drops it without panicking.
pub(crate) fn spawn_now(runtime: &Handle, future: impl Future<Output = ()> + Send + 'static) {
    let mut future = Box::pin(future);
    let here = Handle::try_current().is_ok_and(|current| current.id() == runtime.id());
    if here && future.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_ready() {
        return;
    }
    drop(runtime.spawn(future));
}

/// Fails at once when every server of the connect string refuses TCP connections.
/// zookeeper-client would otherwise keep trying until the session timeout; its eager mode
/// fails fast too, but also stops cycling through the servers on later reconnects. A server
/// that is slow to answer is left to the client.
async fn refuse_fast_when_no_server_listens(config: &ZkConfig, lock: Option<&LockName>) -> Result<()> {
    let wait = config.connect_timeout.unwrap_or(config.session_timeout / 5).min(PROBE_LIMIT);
    let mut last = None;
    for host in &config.hosts {
        match tokio::time::timeout(wait, tokio::net::TcpStream::connect(host.as_str())).await {
            Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused => last = Some(error),
            // Accepted, slow, or another failure (such as a name that does not resolve
            // yet): the client decides.
            _ => return Ok(()),
        }
    }
    match last {
        Some(refused) => Err(Error::connection(BACKEND, lock, refused)
            .with_context(format!("no ZooKeeper server accepts connections ({} refused)", config.hosts.join(", ")))),
        None => Ok(()),
    }
}

/// Makes sure the base path exists, creating it (with its missing ancestors) if not.
async fn ensure_path(client: &zk::Client, path: &str, acls: &[zk::Acl], lock: Option<&LockName>) -> Result<()> {
    let context = || format!("create the base path {path}");
    if client.check_stat(path).await.map_err(|e| map(e, lock).with_context(context()))?.is_some() {
        return Ok(());
    }
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::new(acls));
    match client.mkdir(path, &options).await {
        Ok(()) | Err(zk::Error::NodeExists) => Ok(()),
        Err(error) => Err(map(error, lock).with_context(context())),
    }
}

/// Remakes the base path after an administrator deleted it.
pub(crate) async fn remake_root(session: &Session, lock: &LockName) -> Result<()> {
    ensure_path(&session.client, &session.root, &session.acls, Some(lock)).await
}

type Renewal = Pin<Box<dyn Future<Output = (Instant, std::result::Result<Option<zk::Stat>, zk::Error>)> + Send>>;

fn start_renewal(session: &Arc<Session>) -> Renewal {
    let session = session.clone();
    Box::pin(async move {
        let sent_at = Instant::now();
        let outcome = session.client.check_stat(&session.root).await;
        (sent_at, outcome)
    })
}

async fn next_renewal(renewal: &mut Option<Renewal>) -> (Instant, std::result::Result<Option<zk::Stat>, zk::Error>) {
    match renewal.as_mut() {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

/// Loses the holds of a session whose task is dropped: when the runtime the session runs on
/// shuts down, nothing will renew them any more.
struct LoseOnDrop(Weak<Session>);

impl Drop for LoseOnDrop {
    fn drop(&mut self) {
        if let Some(session) = self.0.upgrade() {
            // Empty when the session ended normally (the task lost its holds already).
            session.lose_all(&LossReason::ClientClosed);
        }
    }
}

type AddWatch = Pin<Box<dyn Future<Output = std::result::Result<zk::PersistentWatcher, zk::Error>> + Send>>;

/// Sets the persistent recursive watch on the session's base path.
fn add_recursive_watch(session: &Session) -> AddWatch {
    let (client, root) = (session.client.clone(), session.root.clone());
    Box::pin(async move { client.watch(&root, zk::AddWatchMode::PersistentRecursive).await })
}

async fn next_added(adding: &mut Option<AddWatch>) -> std::result::Result<zk::PersistentWatcher, zk::Error> {
    match adding.as_mut() {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

/// The next event of the session's recursive watch; pending for ever without one.
async fn next_node_event(recursive: &mut Option<zk::PersistentWatcher>) -> zk::WatchedEvent {
    match recursive.as_mut() {
        Some(watcher) => watcher.changed().await,
        None => std::future::pending().await,
    }
}

/// The session task: follows the session state, renews the holds every third of the session
/// timeout, and, with the recursive watch on the base path, loses a hold whose node is
/// deleted. Ends with the session, or when the session is dropped; dropped with the runtime
/// it runs on, it loses the holds of the session.
async fn watch_session(
    session: Weak<Session>,
    mut states: zk::StateWatcher,
    many_holds: Arc<tokio::sync::Notify>,
    mut recursive: Option<zk::PersistentWatcher>,
) {
    let _lose_on_drop = LoseOnDrop(session.clone());
    let Some((every, policy, id)) =
        session.upgrade().map(|s| ((s.timeout / 3).max(MIN_RENEW_EVERY), s.policy, s.client.session_id().to_string()))
    else {
        return;
    };
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut connected = true;
    let mut renewal: Option<Renewal> = None;
    // Nodes of holds lost at a disconnection, deleted once the session is connected again.
    let mut left_behind: Vec<Arc<str>> = Vec::new();
    let mut adding: Option<AddWatch> = None;
    // Not before this instant is the recursive watch asked for again (after a failure), and
    // never again once the server said it has no such watch (before ZooKeeper 3.6).
    let mut retry_at = Instant::now();
    let mut refused = false;
    loop {
        tokio::select! {
            () = many_holds.notified(), if recursive.is_none() && adding.is_none() => {
                let Some(session) = session.upgrade() else { return };
                if !refused && connected && Instant::now() >= retry_at {
                    adding = Some(add_recursive_watch(&session));
                }
            }
            added = next_added(&mut adding) => {
                adding = None;
                let Some(session) = session.upgrade() else { return };
                match added {
                    Ok(watcher) => {
                        session.take_over_holds();
                        recursive = Some(watcher);
                        tracing::debug!(backend = BACKEND, session = %id, "watching the base path recursively");
                    }
                    Err(error) => {
                        // A server before 3.6 never will: holds keep watching their nodes.
                        refused = matches!(error, zk::Error::Unimplemented);
                        retry_at = Instant::now() + every;
                        tracing::debug!(backend = BACKEND, session = %id, %error, "no recursive watch: holds watch their nodes");
                    }
                }
            }
            event = next_node_event(&mut recursive) => {
                let Some(session) = session.upgrade() else { return };
                match event.event_type {
                    zk::EventType::NodeDeleted => session.node_deleted(&event.path),
                    zk::EventType::Session if event.session_state.is_terminated() => {
                        // The watcher panics when polled after a terminal event: end here.
                        session.lose_all(&loss_for_state(event.session_state));
                        return;
                    }
                    _ => {}
                }
            }
            state = states.changed() => {
                let Some(session) = session.upgrade() else { return };
                tracing::debug!(backend = BACKEND, session = %id, ?state, "zk session state");
                lockkit_core::metrics::session_state(BACKEND, &state);
                match state {
                    zk::SessionState::Disconnected => {
                        connected = false;
                        renewal = None;
                        if policy == DisconnectPolicy::LoseOnDisconnect {
                            left_behind.extend(session.lose_all(&LossReason::ConnectionLost));
                        }
                    }
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                        if !connected {
                            session.check_nodes();
                        }
                        connected = true;
                        session.free_nodes(std::mem::take(&mut left_behind));
                        if session.hold_count() > 0 {
                            renewal = Some(start_renewal(&session));
                        }
                    }
                    terminal => {
                        if terminal.is_terminated() {
                            session.lose_all(&loss_for_state(terminal));
                            return;
                        }
                    }
                }
            }
            _ = ticks.tick() => {
                let Some(session) = session.upgrade() else { return };
                let state = session.client.state();
                if state.is_terminated() {
                    session.lose_all(&loss_for_state(state));
                    return;
                }
                let left = session.holds().sweep();
                if recursive.is_some() && session.holds().stop_watching(session.many_holds_at / 2) {
                    // Dropped, the watcher asks the server to remove the watch.
                    recursive = None;
                    tracing::debug!(backend = BACKEND, session = %id, "no longer watching the base path");
                }
                if connected {
                    session.free_nodes(left);
                } else {
                    left_behind.extend(left);
                }
                if connected && renewal.is_none() && session.hold_count() > 0 {
                    renewal = Some(start_renewal(&session));
                }
            }
            (sent_at, outcome) = next_renewal(&mut renewal) => {
                renewal = None;
                let Some(session) = session.upgrade() else { return };
                match outcome {
                    Ok(_) => {
                        session.renew_all(sent_at);
                        tracing::trace!(backend = BACKEND, session = %id, holds = session.hold_count(), "lockkit.zk.renew");
                    }
                    Err(error) => tracing::debug!(backend = BACKEND, session = %id, %error, "zk renewal not answered"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_contender_path;

    #[test]
    fn only_contender_nodes_can_be_holds() {
        assert!(is_contender_path("/app/lockkit", "/app/lockkit/orders%2F42/lock-x-0000000001"));
        assert!(!is_contender_path("/app/lockkit", "/app/lockkit/orders%2F42"));
        assert!(!is_contender_path("/app/lockkit", "/app/lockkit"));
        assert!(!is_contender_path("/app/lockkit", "/app/lockkitx/a/b"));
        assert!(!is_contender_path("/app/lockkit", "/app/lockkit/a/b/c"));
        assert!(!is_contender_path("/app/lockkit", "/other/a/b"));
    }
}
