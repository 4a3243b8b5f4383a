//! One watch stream per session, and on it one kept watch per lock in use, shared by every
//! wait of the lock in the provider.
//!
//! etcd serves any number of watches on one gRPC `Watch` stream, each with its own id.
//! [`Watches`] opens one stream per session (client and lease) and adds watches to it with a
//! create request naming the id (etcd 3.4 and later honour the id the client picks),
//! acknowledged by a created reply, and removes them with a cancel request: no HTTP/2 stream
//! (and no pair of goroutines on the server) per watch, and nothing reset when thousands are
//! removed at once (which made the client's HTTP/2 layer end the connection, `GOAWAY`).
//!
//! [`LockWatches`] keeps one watch per lock prefix on that stream (deletions only; a second
//! one with puts for readers that wait for a downgrade), created at its first use and kept
//! while used. Waits *register* keys with it and hear their changes; no watch is created on a
//! wait's path (see [`LockWatches`] for why that matters beyond the round trip). Every deletion
//! a lock's watch hears is also handed to the session, which signals the hold of that key lost
//! (session.rs); holds do not register, so that a release is no event for its own provider.
//!
//! When the stream breaks (the connection was cut, the member restarted), every watch on it
//! ends and every registration hears [`KeyNotice::Ended`]; the next registration opens a new
//! stream. A waiter then reads the queue again, so that a deletion during the break is not
//! missed (a hold's key is checked by the session after each keep-alive).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use etcd_client::{Client, Event, WatchOptions};
use tokio::sync::{mpsc, oneshot};

/// The id of the watch that opens a stream (on a key nobody writes); the others count up
/// from it.
const OPENER: i64 = 1;

/// What etcd answers to a watch it refuses for the caller's permissions; also the answer to
/// every watch created on a stream whose authentication token has expired since the stream
/// was opened (etcd checks the stream's token at each creation). A stream that hears it is
/// closed, so that the next watch opens one with the client's current token.
pub(crate) const WATCH_DENIED: &str = "permission denied";

/// What a subscription hears.
#[derive(Debug)]
pub(crate) enum Notice {
    /// Events of one revision on what the watch covers.
    Events(Vec<Event>),
    /// The watch ended (its stream broke, or the server cancelled it, e.g. after a
    /// compaction): what it covered must be read again.
    Ended,
}

/// A request for the task that owns a stream.
enum Command {
    Create { id: i64, key: String, options: WatchOptions },
    Cancel(i64),
}

/// One watch on the stream, as the hub knows it.
struct Entry {
    notices: mpsc::UnboundedSender<Notice>,
    /// Told when the server acknowledges the watch (with the revision after which it sees
    /// every event), or refuses it.
    created: Option<oneshot::Sender<Result<i64, String>>>,
}

/// The hub's state: the open stream and the watches on it.
struct State {
    next_id: i64,
    /// The command channel of the task that owns the open stream; `None` when none is open.
    stream: Option<mpsc::UnboundedSender<Command>>,
    entries: HashMap<i64, Entry>,
}

/// The shared watch stream of one session.
pub(crate) struct Watches {
    client: Client,
    /// The key the stream's first watch names: under the provider's prefix, never written.
    opener_key: String,
    timeout: Duration,
    state: Arc<Mutex<State>>,
    /// Taken while a stream is being opened, so that one is opened at a time.
    opening: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Watches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watches").finish_non_exhaustive()
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // Nothing panics while holding this lock; recover the data if something ever did.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why a watch could not be added.
#[derive(Debug)]
pub(crate) enum WatchError {
    /// The stream could not be opened: the client's error.
    Open(etcd_client::Error),
    /// The server refused the watch (its reason), or the stream broke before it answered.
    Refused(String),
    /// No answer within the request timeout.
    Timeout,
}

impl Watches {
    /// The hub of a session's client; the stream opens with the first watch.
    pub(crate) fn new(client: Client, prefix: &str, timeout: Duration) -> Watches {
        Watches {
            client,
            opener_key: format!("{prefix}/%watch"),
            timeout,
            state: Arc::new(Mutex::new(State { next_id: OPENER + 1, stream: None, entries: HashMap::new() })),
            opening: tokio::sync::Mutex::new(()),
        }
    }

    /// The command channel of the open stream, opening one if none is.
    async fn stream(&self) -> Result<mpsc::UnboundedSender<Command>, WatchError> {
        if let Some(stream) = lock(&self.state).stream.clone().filter(|s| !s.is_closed()) {
            return Ok(stream);
        }
        let _opening = self.opening.lock().await;
        if let Some(stream) = lock(&self.state).stream.clone().filter(|s| !s.is_closed()) {
            return Ok(stream);
        }
        let mut client = self.client.clone();
        // A first watch that never fires (both event types filtered out) opens the stream.
        let options = WatchOptions::new()
            .with_watch_id(OPENER)
            .with_filters([etcd_client::WatchFilterType::NoPut, etcd_client::WatchFilterType::NoDelete]);
        let (watcher, stream) =
            tokio::time::timeout(self.timeout, client.watch(self.opener_key.clone(), Some(options)))
                .await
                .map_err(|_| WatchError::Timeout)?
                .map_err(WatchError::Open)?;
        let (commands, receiver) = mpsc::unbounded_channel();
        lock(&self.state).stream = Some(commands.clone());
        lockkit_core::home::spawn(run(Arc::clone(&self.state), watcher, stream, receiver));
        Ok(commands)
    }

    /// Adds a watch of `key` with `options` (its id is set here) and returns at once; the
    /// subscription's [`created`](Subscription::created) says when the server has it.
    pub(crate) async fn subscribe(&self, key: String, options: WatchOptions) -> Result<Subscription, WatchError> {
        let stream = self.stream().await?;
        let (notices, receiver) = mpsc::unbounded_channel();
        let (created, acknowledged) = oneshot::channel();
        let id = {
            let mut state = lock(&self.state);
            let id = state.next_id;
            state.next_id += 1;
            state.entries.insert(id, Entry { notices, created: Some(created) });
            id
        };
        let subscription = Subscription {
            id,
            state: Arc::clone(&self.state),
            commands: stream.clone(),
            notices: receiver,
            acknowledged: Some(acknowledged),
            timeout: self.timeout,
        };
        // A stream that ended meanwhile ends the subscription: no created reply will come.
        if stream.send(Command::Create { id, key, options: options.with_watch_id(id) }).is_err() {
            lock(&self.state).entries.remove(&id);
        }
        Ok(subscription)
    }
}

impl Drop for Watches {
    fn drop(&mut self) {
        // The stream's task ends once the subscriptions still open are dropped too.
        lock(&self.state).stream = None;
    }
}

/// One watch on the shared stream; dropping it cancels the watch.
pub(crate) struct Subscription {
    id: i64,
    state: Arc<Mutex<State>>,
    commands: mpsc::UnboundedSender<Command>,
    notices: mpsc::UnboundedReceiver<Notice>,
    acknowledged: Option<oneshot::Receiver<Result<i64, String>>>,
    timeout: Duration,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").field("id", &self.id).finish_non_exhaustive()
    }
}

impl Subscription {
    /// Waits until the server has the watch, and returns the server's revision then: the
    /// watch sees every event after it. Once only.
    pub(crate) async fn created(&mut self) -> Result<i64, WatchError> {
        let Some(acknowledged) = self.acknowledged.take() else {
            return Err(WatchError::Refused("the creation of the watch was awaited twice".to_owned()));
        };
        match tokio::time::timeout(self.timeout, acknowledged).await {
            Ok(Ok(Ok(revision))) => Ok(revision),
            Ok(Ok(Err(reason))) => Err(WatchError::Refused(reason)),
            Ok(Err(_)) => Err(WatchError::Refused("the watch stream broke".to_owned())),
            Err(_) => Err(WatchError::Timeout),
        }
    }

    /// The next notice; [`Notice::Ended`] once the watch has ended.
    pub(crate) async fn next(&mut self) -> Notice {
        self.notices.recv().await.unwrap_or(Notice::Ended)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if lock(&self.state).entries.remove(&self.id).is_some() {
            let _ = self.commands.send(Command::Cancel(self.id));
        }
    }
}

/// Owns one stream: sends the creates and cancels, hands each reply to its watch, and ends
/// every watch of the stream when it breaks.
async fn run(
    state: Arc<Mutex<State>>,
    mut watcher: etcd_client::Watcher,
    mut stream: etcd_client::WatchStream,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    // The watches created on this stream: they end with it.
    let mut mine: HashSet<i64> = HashSet::new();
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Create { id, key, options }) => {
                    mine.insert(id);
                    if watcher.watch(key, Some(options)).await.is_err() {
                        break;
                    }
                }
                Some(Command::Cancel(id)) => {
                    mine.remove(&id);
                    if watcher.cancel_by_id(id).await.is_err() {
                        break;
                    }
                }
                // The hub is gone (its session was dropped).
                None => break,
            },
            message = stream.message() => match message {
                Ok(Some(reply)) => {
                    if dispatch(&state, &reply) {
                        tracing::debug!(backend = crate::BACKEND, "a watch was denied: opening a new stream for the next one");
                        break;
                    }
                }
                Ok(None) | Err(_) => break,
            },
        }
    }
    // Refuse new commands (the next subscription opens another stream), and end every watch
    // of this stream, those whose create was still queued included.
    commands.close();
    while let Ok(command) = commands.try_recv() {
        if let Command::Create { id, .. } = command {
            mine.insert(id);
        }
    }
    let ended: Vec<Entry> = {
        let mut state = lock(&state);
        if state.stream.as_ref().is_some_and(mpsc::UnboundedSender::is_closed) {
            state.stream = None;
        }
        mine.iter().filter_map(|id| state.entries.remove(id)).collect()
    };
    for entry in ended {
        let _ = entry.notices.send(Notice::Ended);
    }
}

/// Hands one reply of the stream to the watch it is for; true when it refused a watch for
/// permissions ([`WATCH_DENIED`]: the stream's token may have expired).
fn dispatch(state: &Mutex<State>, reply: &etcd_client::WatchResponse) -> bool {
    let id = reply.watch_id();
    let mut state = lock(state);
    let denied = reply.created() && reply.canceled() && reply.cancel_reason().contains(WATCH_DENIED);
    if reply.created() {
        let refused = reply.canceled().then(|| reply.cancel_reason().to_owned());
        let entry = if refused.is_some() { state.entries.remove(&id) } else { None };
        if let Some(created) = state.entries.get_mut(&id).and_then(|e| e.created.take()) {
            let _ = created.send(Ok(reply.header().map_or(0, etcd_client::ResponseHeader::revision)));
        }
        if let Some(mut entry) = entry {
            let reason = refused.unwrap_or_default();
            if let Some(created) = entry.created.take() {
                let _ = created.send(Err(reason));
            }
            let _ = entry.notices.send(Notice::Ended);
        }
    } else if reply.canceled() || reply.compact_revision() != 0 {
        // Cancelled by the server (a compaction passed it): read again. The reply to our own
        // cancel finds no entry (it was removed when the subscription was dropped).
        if let Some(entry) = state.entries.remove(&id) {
            let _ = entry.notices.send(Notice::Ended);
        }
    } else if !reply.events().is_empty()
        && let Some(entry) = state.entries.get(&id)
    {
        let _ = entry.notices.send(Notice::Events(reply.events().to_vec()));
    }
    denied
}

/// What a registration hears of the keys it named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyNotice {
    /// One of the keys was written (`deleted: false`) or deleted, at `revision`.
    Changed { deleted: bool, revision: i64 },
    /// The lock's watch ended (its stream broke, or the server cancelled it): read again,
    /// then register again.
    Ended,
}

/// Who listens to which key of one lock's watch.
#[derive(Default)]
struct Interests {
    next_id: u64,
    by_key: HashMap<String, Vec<(u64, mpsc::UnboundedSender<KeyNotice>)>>,
    /// Registrations now.
    count: usize,
    /// Set by a sweep that found no registration; cleared by a registration.
    idle: bool,
    ended: bool,
    /// The latest changes, for registrations that read the queue before they registered:
    /// every change after revision `floor` is here.
    recent: VecDeque<(String, KeyNotice)>,
    floor: i64,
}

/// How many of its latest changes a lock's watch keeps for late registrations.
const RECENT: usize = 128;

/// One watch on the prefix of one lock (its deletions, or its puts and deletions), shared by every wait and
/// of that lock's waits in the provider, and kept between them (see [`LockWatches::sweep`]).
struct LockWatch {
    /// The server's revision when it created the watch, once it did: the watch sees every
    /// event after it. `Err` when it refused it or the stream broke first.
    created: tokio::sync::watch::Receiver<Option<Result<i64, String>>>,
    interests: Mutex<Interests>,
    /// Dropped with the lock watch: ends its task (and so the watch).
    _stop: oneshot::Sender<()>,
}

fn interests(watch: &LockWatch) -> MutexGuard<'_, Interests> {
    // Nothing panics while holding this lock; recover the data if something ever did.
    watch.interests.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The watches of the locks a provider's session uses, on its one stream.
///
/// A wait *registers* the keys it cares about with the watch of its lock's prefix:
/// the first registration of a lock opens that watch (at the server's current revision),
/// later ones reuse it, so in the steady state a wait adds no watch at all, and no
/// watch is created on a wait's path. That matters beyond the round trip: etcd turns a watch
/// "from now" into one from the revision it read just before registering it, and a write
/// landing in between puts the watch in its "unsynced" group, which a loop catches up every
/// 100 ms; a wait whose watch is new can so sit out that period (see docs/PERFORMANCE.md).
/// A lock's watch is dropped after a full sweep period with no registration.
pub(crate) struct LockWatches {
    hub: Arc<Watches>,
    /// Told of every deletion a lock's watch hears (the session's holds, session.rs).
    deleted: Deleted,
    /// By lock prefix, and whether the watch reports puts too (see [`register`](Self::register)).
    locks: Mutex<HashMap<(String, bool), Arc<LockWatch>>>,
}

impl std::fmt::Debug for LockWatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockWatches").finish_non_exhaustive()
    }
}

/// What a lock's watch tells of each deletion it hears: the key and the revision.
type Deleted = Arc<dyn Fn(&str, i64) + Send + Sync>;

impl LockWatches {
    /// The lock watches of a session's client; `deleted` hears every deletion they hear.
    pub(crate) fn new(
        client: Client,
        prefix: &str,
        timeout: Duration,
        deleted: impl Fn(&str, i64) + Send + Sync + 'static,
    ) -> LockWatches {
        LockWatches {
            hub: Arc::new(Watches::new(client, prefix, timeout)),
            deleted: Arc::new(deleted),
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// The session's watch stream, for a watch of its own (the prefix watch, deletions.rs).
    pub(crate) fn hub(&self) -> Arc<Watches> {
        Arc::clone(&self.hub)
    }

    fn locks(&self) -> MutexGuard<'_, HashMap<(String, bool), Arc<LockWatch>>> {
        // Nothing panics while holding this lock; recover the data if something ever did.
        self.locks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `keys` (under the lock prefix `prefix`) with the lock's watch, opening it
    /// if need be, and hands it the changes of them after revision `after` that the watch
    /// heard already. The registration's [`from`](Registration::from) says from which
    /// revision on it hears every change of them.
    ///
    /// A lock has up to two watches: one of deletions only, which nearly every
    /// wait uses (a release or a loss is a deletion), and, with `puts`, one of puts too, for
    /// a reader behind a writer that may be downgraded in place (its key's value rewritten).
    /// So an acquisition's put costs no event on the common watch.
    pub(crate) fn register(&self, prefix: &str, keys: Vec<String>, after: i64, puts: bool) -> Registration {
        let (sender, receiver) = mpsc::unbounded_channel();
        let mut locks = self.locks();
        let id = (prefix.to_owned(), puts);
        let watch = match locks.get(&id).filter(|w| !interests(w).ended) {
            Some(watch) => Arc::clone(watch),
            None => {
                let watch = self.open(prefix.to_owned(), puts);
                locks.insert(id, Arc::clone(&watch));
                watch
            }
        };
        drop(locks);
        let id = {
            let mut interests = interests(&watch);
            let id = interests.next_id;
            interests.next_id += 1;
            interests.count += 1;
            interests.idle = false;
            for key in &keys {
                interests.by_key.entry(key.clone()).or_default().push((id, sender.clone()));
            }
            for (key, notice) in &interests.recent {
                if let KeyNotice::Changed { revision, .. } = notice
                    && *revision > after
                    && keys.contains(key)
                {
                    let _ = sender.send(*notice);
                }
            }
            if interests.ended {
                let _ = sender.send(KeyNotice::Ended);
            }
            (id, interests.floor)
        };
        let (id, floor) = id;
        Registration { watch, id, keys, puts, notices: receiver, floor }
    }

    /// A new watch of the lock prefix `prefix`, and its task.
    fn open(&self, prefix: String, puts: bool) -> Arc<LockWatch> {
        let (set_created, created) = tokio::sync::watch::channel(None);
        let (stop, stopped) = oneshot::channel();
        let watch = Arc::new(LockWatch { created, interests: Mutex::new(Interests::default()), _stop: stop });
        let options = if puts {
            WatchOptions::new().with_prefix()
        } else {
            WatchOptions::new().with_prefix().with_filters([etcd_client::WatchFilterType::NoPut])
        };
        let deleted = Arc::clone(&self.deleted);
        lockkit_core::home::spawn(follow(
            Arc::clone(&self.hub),
            prefix,
            options,
            Arc::downgrade(&watch),
            set_created,
            stopped,
            deleted,
        ));
        watch
    }

    /// Drops the lock watches that had no registration since the previous sweep (the
    /// watchdog sweeps every third of the TTL).
    pub(crate) fn sweep(&self) {
        self.locks().retain(|_, watch| {
            let mut interests = interests(watch);
            if interests.ended {
                return false;
            }
            if interests.count > 0 {
                interests.idle = false;
                return true;
            }
            let keep = !interests.idle;
            interests.idle = true;
            keep
        });
    }
}

/// Runs one lock's watch: creates it, hands each event to the registrations of its key, and
/// ends them all when the watch ends.
async fn follow(
    hub: Arc<Watches>,
    prefix: String,
    options: WatchOptions,
    watch: std::sync::Weak<LockWatch>,
    set_created: tokio::sync::watch::Sender<Option<Result<i64, String>>>,
    mut stopped: oneshot::Receiver<()>,
    deleted: Deleted,
) {
    let subscription = match hub.subscribe(prefix, options).await {
        Ok(mut subscription) => match subscription.created().await {
            Ok(revision) => {
                set_created.send_replace(Some(Ok(revision)));
                Some(subscription)
            }
            Err(e) => {
                set_created.send_replace(Some(Err(e.to_string())));
                None
            }
        },
        Err(e) => {
            set_created.send_replace(Some(Err(e.to_string())));
            None
        }
    };
    if let Some(mut subscription) = subscription {
        loop {
            let notice = tokio::select! {
                notice = subscription.next() => notice,
                _ = &mut stopped => return,
            };
            let Notice::Events(events) = notice else { break };
            let Some(watch) = watch.upgrade() else { return };
            for event in &events {
                if event.event_type() == etcd_client::EventType::Delete
                    && let Some(kv) = event.kv()
                    && let Ok(key) = std::str::from_utf8(kv.key())
                {
                    deleted(key, kv.mod_revision());
                }
            }
            let mut interests = interests(&watch);
            for event in &events {
                let Some(kv) = event.kv() else { continue };
                let Ok(key) = std::str::from_utf8(kv.key()) else { continue };
                let notice = KeyNotice::Changed {
                    deleted: event.event_type() == etcd_client::EventType::Delete,
                    revision: kv.mod_revision(),
                };
                if interests.recent.len() == RECENT
                    && let Some((_, KeyNotice::Changed { revision, .. })) = interests.recent.pop_front()
                {
                    interests.floor = interests.floor.max(revision);
                }
                interests.recent.push_back((key.to_owned(), notice));
                for (_, listener) in interests.by_key.get(key).into_iter().flatten() {
                    let _ = listener.send(notice);
                }
            }
        }
    }
    // Ended: every registration reads again and registers again (on a new watch).
    let Some(watch) = watch.upgrade() else { return };
    let mut interests = interests(&watch);
    interests.ended = true;
    for (_, listener) in interests.by_key.values().flatten() {
        let _ = listener.send(KeyNotice::Ended);
    }
}

/// A wait's interest in some keys of one lock; dropping it withdraws it.
pub(crate) struct Registration {
    watch: Arc<LockWatch>,
    id: u64,
    keys: Vec<String>,
    /// Whether the watch reports puts too.
    puts: bool,
    notices: mpsc::UnboundedReceiver<KeyNotice>,
    /// Every change after this revision that the watch heard before the registration was
    /// handed to it.
    floor: i64,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration").field("keys", &self.keys).finish_non_exhaustive()
    }
}

impl Registration {
    /// The keys registered.
    pub(crate) fn keys(&self) -> &[String] {
        &self.keys
    }

    /// Whether the registration hears puts too.
    pub(crate) fn puts(&self) -> bool {
        self.puts
    }

    /// The revision after which the registration hears every change of its keys: the
    /// server's revision when it created the lock's watch, or a later one when the watch has
    /// forgotten older changes since. `Err` with the reason when the watch could not be
    /// created.
    pub(crate) async fn from(&self) -> Result<i64, String> {
        let mut created = self.watch.created.clone();
        let value = created.wait_for(Option::is_some).await.map_err(|_| "the watch was dropped".to_owned())?;
        let created = value.clone().unwrap_or_else(|| Err("the watch was not created".to_owned()))?;
        Ok(created.max(self.floor))
    }

    /// The next change of a registered key, or [`KeyNotice::Ended`].
    pub(crate) async fn next(&mut self) -> KeyNotice {
        self.notices.recv().await.unwrap_or(KeyNotice::Ended)
    }

    /// Whether the lock's watch ended (register again).
    pub(crate) fn ended(&self) -> bool {
        interests(&self.watch).ended
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut interests = interests(&self.watch);
        interests.count = interests.count.saturating_sub(1);
        for key in &self.keys {
            if let Some(listeners) = interests.by_key.get_mut(key) {
                listeners.retain(|(id, _)| *id != self.id);
                if listeners.is_empty() {
                    interests.by_key.remove(key);
                }
            }
        }
    }
}

impl std::fmt::Display for WatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WatchError::Open(e) => write!(f, "cannot open a watch stream: {e}"),
            WatchError::Refused(reason) => write!(f, "the watch was refused: {reason}"),
            WatchError::Timeout => f.write_str("no answer to a watch request in time"),
        }
    }
}
