//! Wake-ups for waiters: one pub/sub connection per provider, shared by all its waiters.
//!
//! The release script publishes on the lock's channel. A waiter registers its interest in
//! that channel ([`Subscriber::watch`]), which subscribes once per channel and per provider
//! and waits for the server's confirmation, then retries its acquisition whenever the
//! channel fires. Pub/sub is at-most-once, so every path that may have missed a message
//! wakes the waiters to look again:
//!
//! - The connection is RESP3 under a [`ConnectionManager`], which reconnects on its own and
//!   subscribes again to every channel; the `Disconnection` push wakes every waiter of the
//!   provider, and each channel's renewed subscription confirmation wakes its waiters again,
//!   so a release during the gap is seen.
//! - While the connection is down or a subscription is unconfirmed, waiters poll (see
//!   [`Interest::is_live`]); a keeper pings the dead connection so it is rebuilt even when no
//!   command would otherwise touch it.
//! - The caller bounds every wait by the holder's remaining lease, so a holder that died is
//!   noticed when its key expires even though no message is ever sent for an expiry.
//!
//! The connection, its push routing and its keeper live on lockkit's home runtime
//! ([`lockkit_core::home`]), whatever runtime the waiters run on: a wake-up never depends on a
//! runtime that shut down or is not being driven. Every command on the link (SUBSCRIBE,
//! UNSUBSCRIBE, the keeper's PING) is sent from there too, so that the connection manager's
//! reconnections also happen there.
//!
//! The same connection carries the keyspace channels of held records, where the server
//! publishes them (see the `keyspace` module): their events and their (re)confirmed
//! subscriptions make the record a suspect for the watchdog to read.
//!
//! Addressed wake-ups for the fair lock: each provider also listens on a wake channel of its
//! own, named in the queue entries of its waiters. The release of a fair lock with waiters
//! hands the lock over to the head of the queue and tells it so there, with the grant's token
//! and server time ([`Woken::HandedOver`]); it tells the next two that it is another's turn
//! ([`Woken::OthersTurn`]): they look again only if that hand-over may expire unconfirmed. No
//! other provider hears of it, so a hand-off wakes one waiter, not all. The wake channel is
//! subscribed once per provider and link, and kept; queued waiters register by queue member
//! ([`Subscriber::watch_queued`]), at no cost once it is subscribed.
//!
//! Fairness of the unfair lock: Redis (7.0) delivers a message to a channel's subscribers in the order they
//! subscribed, and the first woken waiter usually wins the race for the lock. When the last
//! waiter of a provider leaves a channel (typically because it won), the subscription is
//! marked for repositioning: the provider's next wait on it unsubscribes and subscribes
//! again (unless the background unsubscribe did already), so the latest winner goes to
//! the back of the delivery order and the waiters that waited longest are woken first.
//!
//! On a Redis Cluster the link is a plain connection to one node of the URL (classic pub/sub
//! is cluster-wide: a node forwards every `PUBLISH` to all the others over the cluster bus),
//! and when that node stops answering the next link is made to the next node of the URL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::watch;
use uuid::Uuid;

use crate::keyspace::{Keyspace, Suspects};
use crate::settings::Settings;
use crate::wake::{Handover, Wake, Woken};
use lockkit_core::sync::lock_or_recover;

/// How often a dead subscriber connection is poked so that it reconnects.
const KEEPER_INTERVAL: Duration = Duration::from_millis(200);

/// The pub/sub side of one provider.
#[derive(Debug)]
pub(crate) struct Subscriber {
    client: redis::Client,
    /// The settings (for RESP3), when the server is the primary the sentinels name: each
    /// link is made to the primary they name at the time.
    sentinel: Option<Box<Settings>>,
    /// On a cluster: the nodes of the URL (RESP3), one of which carries the link, and the
    /// index of the node the next link tries first.
    cluster: Option<(Vec<redis::Client>, AtomicU64)>,
    shared: Arc<Shared>,
    /// Taken while a link is being made, so that one is made at a time.
    building: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct Shared {
    channels: Mutex<HashMap<String, Arc<Channel>>>,
    /// Bumped whenever messages may have been missed by every channel at once.
    epoch: watch::Sender<u64>,
    /// The current link. Held here, where only the provider's side keeps it alive, so that
    /// dropping the provider closes the connection.
    link: Mutex<Option<Arc<Link>>>,
    /// The generation of the last link made; links count from 1, and 0 means "none".
    generations: AtomicU64,
    /// This provider's wake channel, subscribed at the first queued wait and kept.
    wake_channel: Arc<Channel>,
    /// The queued waiters of this provider by queue member, and the senders of their
    /// wake-ups.
    queued: Mutex<HashMap<String, watch::Sender<Wake>>>,
    response_timeout: Duration,
    /// Whether links are made to the primary the sentinels name, or to a node of a cluster
    /// (and made again, asking again or to another node, when it stops answering).
    moves_on: bool,
    /// The names of the record channels.
    keyspace: Arc<Keyspace>,
    /// Where the events of record channels go.
    suspects: Arc<Suspects>,
}

/// One pub/sub connection, on the home runtime (where its driver, its push routing and its
/// keeper run).
#[derive(Debug)]
struct Link {
    connection: ConnectionManager,
    state: Arc<LinkState>,
}

impl Link {
    /// Sends SUBSCRIBE (`subscribe`) or UNSUBSCRIBE for `channel` from the home runtime,
    /// within `timeout`; true when the server confirmed it.
    async fn send(&self, subscribe: bool, channel: &str, timeout: Duration) -> bool {
        let mut connection = self.connection.clone();
        let channel = channel.to_owned();
        let sent = lockkit_core::home::run(async move {
            let command = async {
                if subscribe { connection.subscribe(&channel).await } else { connection.unsubscribe(&channel).await }
            };
            match tokio::time::timeout(timeout, command).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(error.to_string()),
                Err(_) => Err("timed out".to_owned()),
            }
        });
        match sent.await {
            Ok(()) => true,
            Err(error) => {
                let what = if subscribe { "subscribing" } else { "unsubscribing" };
                tracing::debug!(%error, "{what} failed");
                false
            }
        }
    }
}

/// What the pushes of one link tell, shared with its push router and its keeper.
#[derive(Debug)]
struct LinkState {
    generation: u64,
    /// Whether the connection is believed up (false from a `Disconnection` push until the
    /// next confirmation or reply).
    connected: AtomicBool,
    keeper_running: AtomicBool,
    /// Set by the keeper of a link to a sentinel-named primary that stopped answering: the
    /// next use makes a new link to the primary the sentinels name then.
    stale: AtomicBool,
}

#[derive(Debug)]
struct Channel {
    name: String,
    /// Waiters of this provider interested in the channel; changed under the map's lock.
    interest: Mutex<usize>,
    /// Sent on every message and every (re)confirmed subscription.
    wake: watch::Sender<Wake>,
    /// The generation of the link on which the server confirmed the subscription (0: not
    /// subscribed); the async lock orders SUBSCRIBE and UNSUBSCRIBE of one channel.
    subscribed: tokio::sync::Mutex<u64>,
    /// Set when the last waiter left: the next wait subscribes again, at the back of the
    /// server's delivery order.
    reposition: AtomicBool,
    /// Whether the delivery order matters (a lock's channel), so that the channel is
    /// repositioned; it does not for the wake channel and record channels.
    repositions: bool,
}

impl Shared {
    /// The current link, unless it went stale.
    fn live_link(&self) -> Option<Arc<Link>> {
        lock_or_recover(&self.link).as_ref().filter(|link| !link.state.stale.load(Ordering::Acquire)).cloned()
    }
}

impl Subscriber {
    /// A subscriber on the server of `connection`; nothing connects before the first wait.
    /// The events of record channels go to `suspects`.
    pub(crate) fn new(
        settings: &Settings,
        keyspace: Arc<Keyspace>,
        suspects: Arc<Suspects>,
    ) -> redis::RedisResult<Self> {
        let connection = &settings.connection;
        let resp3 = connection.redis_settings().clone().set_protocol(redis::ProtocolVersion::RESP3);
        let client = crate::client::open(&settings.tls, connection.clone().set_redis_settings(resp3.clone()))?;
        let sentinel = settings.sentinel.is_some().then(|| {
            let mut settings = settings.clone();
            settings.connection = settings.connection.set_redis_settings(resp3);
            Box::new(settings)
        });
        let cluster = match &settings.cluster {
            Some(cluster) => {
                let nodes = cluster
                    .nodes
                    .iter()
                    .map(|(_, info)| {
                        let resp3 = info.redis_settings().clone().set_protocol(redis::ProtocolVersion::RESP3);
                        crate::client::open(&settings.tls, info.clone().set_redis_settings(resp3))
                    })
                    .collect::<redis::RedisResult<Vec<_>>>()?;
                Some((nodes, AtomicU64::new(0)))
            }
            None => None,
        };
        let (epoch, _) = watch::channel(0);
        let wake_channel = Channel::new(format!("{}:wake:{}", settings.prefix, Uuid::new_v4().simple()), false);
        Ok(Self {
            client,
            sentinel,
            cluster,
            shared: Arc::new(Shared {
                channels: Mutex::new(HashMap::new()),
                epoch,
                link: Mutex::new(None),
                generations: AtomicU64::new(0),
                wake_channel: Arc::new(wake_channel),
                queued: Mutex::new(HashMap::new()),
                response_timeout: settings.response_timeout,
                moves_on: settings.sentinel.is_some() || settings.cluster.is_some(),
                keyspace,
                suspects,
            }),
            building: tokio::sync::Mutex::new(()),
        })
    }

    /// Registers interest in `channel` (a lock's channel, or a record's keyspace channel) and
    /// subscribes to it unless this provider already is. When subscribing fails the interest
    /// is still returned, not live, and the waiter polls instead.
    pub(crate) async fn watch(self: &Arc<Self>, channel: &str) -> Interest {
        let entry = {
            let mut channels = lock_or_recover(&self.shared.channels);
            let repositions = self.shared.keyspace.key_of(channel).is_none();
            let entry = channels
                .entry(channel.to_owned())
                .or_insert_with(|| Arc::new(Channel::new(channel.to_owned(), repositions)));
            *lock_or_recover(&entry.interest) += 1;
            Arc::clone(entry)
        };
        let mut interest = Interest {
            wake: entry.wake.subscribe(),
            epoch: self.shared.epoch.subscribe(),
            channel: entry,
            member: None,
            owner: Arc::downgrade(&self.shared),
            link: None,
            confirmed: false,
        };
        self.confirm(&mut interest).await;
        interest
    }

    /// This provider's wake channel, which the queue members of its waiters name.
    pub(crate) fn wake_channel(&self) -> &str {
        &self.shared.wake_channel.name
    }

    /// Registers the queued waiter `member` for wake-ups addressed to it, subscribing the
    /// wake channel unless it is already. `None` when `only_if_subscribed` and it is not:
    /// registering then costs nothing, which suits a waiter's first try.
    pub(crate) async fn watch_queued(self: &Arc<Self>, member: &str, only_if_subscribed: bool) -> Option<Interest> {
        let channel = Arc::clone(&self.shared.wake_channel);
        // Known subscribed on a live link, the registration is local: no lock is awaited, so
        // that thousands of acquisitions at once do not queue on the channel's subscription
        // lock.
        let live = self.shared.live_link();
        let subscribed = live.as_ref().is_some_and(|link| {
            channel.subscribed.try_lock().is_ok_and(|subscribed| *subscribed == link.state.generation)
        });
        if only_if_subscribed && !subscribed {
            return None;
        }
        let (sender, wake) = watch::channel(Wake::default());
        lock_or_recover(&self.shared.queued).insert(member.to_owned(), sender);
        let mut interest = Interest {
            wake,
            epoch: self.shared.epoch.subscribe(),
            channel,
            member: Some(member.to_owned()),
            owner: Arc::downgrade(&self.shared),
            link: None,
            confirmed: false,
        };
        if subscribed {
            interest.link = live;
            interest.confirmed = true;
        } else {
            self.confirm(&mut interest).await;
        }
        Some(interest)
    }

    /// Subscribes the interest's channel on the current link unless it already is.
    async fn confirm(self: &Arc<Self>, interest: &mut Interest) {
        let link = match self.link().await {
            Ok(link) => link,
            Err(error) => {
                tracing::debug!(%error, "the pub/sub connection could not be made; polling");
                return;
            }
        };
        let generation = link.state.generation;
        let response_timeout = self.shared.response_timeout;
        let mut subscribed = interest.channel.subscribed.lock().await;
        if *subscribed == generation && interest.channel.reposition.swap(false, Ordering::AcqRel) {
            // Back of the delivery order (see the module docs). Until the new confirmation the
            // interest is not live, and the caller tries again after this returns.
            if link.send(false, &interest.channel.name, response_timeout).await {
                *subscribed = 0;
            }
        }
        if *subscribed != generation && link.send(true, &interest.channel.name, response_timeout).await {
            *subscribed = generation;
        }
        interest.confirmed = *subscribed == generation;
        interest.link = Some(link);
    }

    /// The pub/sub link: made on first use, on the home runtime, and made again when it went
    /// stale. Its pushes are routed by a `PushRouter`. The turn to make it is taken on the
    /// home runtime too: a caller on a runtime that stops being driven holds up nobody.
    async fn link(self: &Arc<Self>) -> redis::RedisResult<Arc<Link>> {
        if let Some(link) = self.shared.live_link() {
            return Ok(link);
        }
        let me = Arc::clone(self);
        lockkit_core::home::run(async move { me.make_link().await }).await
    }

    /// Makes the pub/sub link unless another call made one meanwhile (on the home runtime).
    async fn make_link(&self) -> redis::RedisResult<Arc<Link>> {
        let _building = self.building.lock().await;
        if let Some(link) = self.shared.live_link() {
            return Ok(link);
        }
        let generation = self.shared.generations.fetch_add(1, Ordering::AcqRel) + 1;
        let state = Arc::new(LinkState {
            generation,
            connected: AtomicBool::new(true),
            keeper_running: AtomicBool::new(false),
            stale: AtomicBool::new(false),
        });
        let response_timeout = self.shared.response_timeout;
        let router = PushRouter { shared: Arc::downgrade(&self.shared), state: Arc::clone(&state) };
        let config = ConnectionManagerConfig::new()
            .set_push_sender(router)
            .set_automatic_resubscription()
            .set_connection_timeout(Some(response_timeout))
            .set_response_timeout(Some(response_timeout))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500));
        let client = match self.sentinel.as_deref() {
            Some(settings) => {
                let Some(sentinel) = settings.sentinel.as_ref() else {
                    return Err(redis::RedisError::from((redis::ErrorKind::Io, "sentinel settings without sentinels")));
                };
                let primary =
                    crate::sentinel::discover(&settings.connection, &settings.tls, sentinel, response_timeout, None)
                        .await
                        .map_err(|e| {
                            redis::RedisError::from((
                                redis::ErrorKind::Io,
                                "the sentinels named no primary",
                                e.to_string(),
                            ))
                        })?;
                crate::client::open(&settings.tls, primary)?
            }
            None => self.client.clone(),
        };
        let connection = match &self.cluster {
            Some((nodes, next)) => self.cluster_link(nodes, next, config).await?,
            None => connect(client, config, response_timeout).await?,
        };
        let link = Arc::new(Link { connection, state });
        let previous = lock_or_recover(&self.shared.link).replace(Arc::clone(&link));
        if previous.is_some() {
            // The previous link went stale, and its subscriptions with it: wake every waiter
            // to look again (and subscribe again, on this link), and subscribe the record
            // channels of the holds again (nobody waits on those).
            tracing::debug!(generation, "the pub/sub connection went stale; connected again");
            self.shared.epoch.send_modify(|epoch| *epoch += 1);
            let records: Vec<Arc<Channel>> = lock_or_recover(&self.shared.channels)
                .values()
                .filter(|channel| !channel.repositions && *lock_or_recover(&channel.interest) > 0)
                .cloned()
                .collect();
            if !records.is_empty() {
                lockkit_core::home::spawn(subscribe_again(Arc::clone(&link), records, response_timeout));
            }
        }
        Ok(link)
    }

    /// A connection to a node of the cluster: the node tried first is the one after the node
    /// of the last link (which stopped answering), then the others in the URL's order.
    async fn cluster_link(
        &self,
        nodes: &[redis::Client],
        next: &AtomicU64,
        config: ConnectionManagerConfig,
    ) -> redis::RedisResult<ConnectionManager> {
        let count = u64::try_from(nodes.len()).unwrap_or(1).max(1);
        let first = next.fetch_add(1, Ordering::AcqRel);
        let mut last_error = redis::RedisError::from((redis::ErrorKind::Io, "the URL names no cluster node"));
        for offset in 0..count {
            let at = usize::try_from((first + offset) % count).unwrap_or(0);
            let Some(client) = nodes.get(at) else { continue };
            let response_timeout = self.shared.response_timeout;
            match connect(client.clone(), config.clone(), response_timeout).await {
                Ok(connection) => {
                    // The next link, if this one goes stale, starts at the node after it.
                    next.store(first + offset, Ordering::Release);
                    return Ok(connection);
                }
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    /// Retries the subscription of an interest that is not live.
    pub(crate) async fn revive(self: &Arc<Self>, interest: &mut Interest) {
        if !interest.is_live() {
            self.confirm(interest).await;
        }
    }
}

impl Channel {
    fn new(name: String, repositions: bool) -> Self {
        let (wake, _) = watch::channel(Wake::default());
        Self {
            name,
            interest: Mutex::new(0),
            wake,
            subscribed: tokio::sync::Mutex::new(0),
            reposition: AtomicBool::new(false),
            repositions,
        }
    }
}

/// Makes a pub/sub connection with `client`, within `timeout`; called on the home runtime,
/// where its driver task and its push routing then live.
async fn connect(
    client: redis::Client,
    config: ConnectionManagerConfig,
    timeout: Duration,
) -> redis::RedisResult<ConnectionManager> {
    match tokio::time::timeout(timeout, client.get_connection_manager_with_config(config)).await {
        Ok(result) => result,
        Err(_) => Err(redis::RedisError::from((redis::ErrorKind::Io, "connecting timed out"))),
    }
}

/// Subscribes `channels` on a new `link`, unless a waiter did already.
async fn subscribe_again(link: Arc<Link>, channels: Vec<Arc<Channel>>, response_timeout: Duration) {
    let generation = link.state.generation;
    for channel in channels {
        let mut subscribed = channel.subscribed.lock().await;
        if *subscribed == generation || *lock_or_recover(&channel.interest) == 0 {
            continue;
        }
        if link.send(true, &channel.name, response_timeout).await {
            *subscribed = generation;
        }
    }
}

/// One waiter's registration on a lock's channel, or, for a queued waiter, on its provider's
/// wake channel. Dropping it withdraws the interest: the last interest of a lock's channel
/// unsubscribes it (in the background); the wake channel stays.
#[derive(Debug)]
pub(crate) struct Interest {
    channel: Arc<Channel>,
    /// The queue member of a queued waiter.
    member: Option<String>,
    wake: watch::Receiver<Wake>,
    epoch: watch::Receiver<u64>,
    owner: Weak<Shared>,
    /// The link the subscription was confirmed on.
    link: Option<Arc<Link>>,
    confirmed: bool,
}

impl Interest {
    /// Marks everything received so far as seen: call it right before each acquisition
    /// attempt, so that a release published while the attempt is under way still wakes
    /// the next [`wait`](Self::wait).
    pub(crate) fn arm(&mut self) {
        self.wake.borrow_and_update();
        self.epoch.borrow_and_update();
    }

    /// Whether wake-ups can be trusted: the subscription is confirmed, and its connection is
    /// up. When not, the waiter should poll at a short interval.
    pub(crate) fn is_live(&self) -> bool {
        self.confirmed && self.link.as_ref().is_some_and(|link| link.state.connected.load(Ordering::Acquire))
    }

    /// The latest hand-over addressed to this queued waiter, whether or not a wait saw it.
    pub(crate) fn handover(&self) -> Option<Handover> {
        self.wake.borrow().handover
    }

    /// Waits until the channel fires, messages may have been missed (the connection dropped,
    /// or went stale), or `at_most` passes, and says whether to look at the lock, whether it
    /// is another waiter's turn, or whether the lock was handed over to this waiter.
    pub(crate) async fn wait(&mut self, at_most: Duration) -> Woken {
        tokio::select! {
            changed = self.wake.changed() => match changed {
                Ok(()) => self.wake.borrow_and_update().woken,
                Err(_) => Woken::Look,
            },
            _ = self.epoch.changed() => Woken::Look,
            () = tokio::time::sleep(at_most) => Woken::Look,
        }
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        if let Some(member) = &self.member {
            if let Some(shared) = self.owner.upgrade() {
                lock_or_recover(&shared.queued).remove(member);
            }
            return;
        }
        let last = {
            let mut interest = lock_or_recover(&self.channel.interest);
            *interest = interest.saturating_sub(1);
            *interest == 0
        };
        let Some(shared) = self.owner.upgrade() else { return };
        if !last {
            return;
        }
        if self.channel.repositions {
            self.channel.reposition.store(true, Ordering::Release);
        }
        lockkit_core::home::spawn(unsubscribe_if_unused(shared, Arc::clone(&self.channel)));
    }
}

/// Unsubscribes a channel nobody waits on any more, and forgets it.
async fn unsubscribe_if_unused(shared: Arc<Shared>, channel: Arc<Channel>) {
    let mut subscribed = channel.subscribed.lock().await;
    if *lock_or_recover(&channel.interest) > 0 {
        return;
    }
    if *subscribed != 0 {
        match shared.live_link() {
            Some(link) if link.state.generation == *subscribed => {
                if !link.send(false, &channel.name, shared.response_timeout).await {
                    // The subscription stays (it is harmless: a wake-up nobody waits for).
                    return;
                }
                *subscribed = 0;
            }
            // Subscribed on a link that went stale: nothing is left to undo.
            _ => *subscribed = 0,
        }
    }
    // Forget the channel only while holding its subscription lock with nobody interested:
    // a newcomer then either found this entry (and waits for the lock, and subscribes
    // again) or makes a new one after the UNSUBSCRIBE was answered.
    let mut channels = lock_or_recover(&shared.channels);
    if *lock_or_recover(&channel.interest) == 0
        && channels.get(&channel.name).is_some_and(|entry| Arc::ptr_eq(entry, &channel))
    {
        channels.remove(&channel.name);
    }
}

/// Routes the pushes of one link's connection to the waiters as they are read, in the
/// connection's own task: a wake-up takes no task hop of ours. Holds the provider's side
/// weakly, so that the connection does not keep it alive.
struct PushRouter {
    shared: Weak<Shared>,
    state: Arc<LinkState>,
}

impl redis::aio::AsyncPushSender for PushRouter {
    fn send(&self, push: PushInfo) -> Result<(), redis::aio::SendError> {
        // Refusing a push once the provider is gone tells the connection that nobody listens.
        let shared = self.shared.upgrade().ok_or(redis::aio::SendError)?;
        route(&shared, &self.state, push);
        Ok(())
    }
}

/// Routes one push: a message to the waiters it wakes, a (re)confirmed subscription to its
/// channel's waiters, a disconnection to everyone. Never blocks.
fn route(shared: &Arc<Shared>, state: &Arc<LinkState>, push: PushInfo) {
    match push.kind {
        PushKind::Message => {
            state.connected.store(true, Ordering::Release);
            let text =
                |value: Option<&Value>| value.and_then(|value| redis::from_redis_value_ref::<String>(value).ok());
            match text(push.data.first()) {
                Some(name) if name == shared.wake_channel.name => wake_queued(shared, text(push.data.get(1))),
                Some(name) if shared.keyspace.key_of(&name).is_some() => {
                    // Our own renewals are the only `expire` events, and additions to a set of
                    // readers or permit holders (`zadd`: other holders joining, or our own
                    // renewals) remove nobody; anything else may have ended the hold.
                    if !matches!(text(push.data.get(1)).as_deref(), Some("expire" | "zadd"))
                        && let Some(key) = shared.keyspace.key_of(&name)
                    {
                        shared.suspects.add(key);
                        // Observers of an election watch their leader's record too.
                        wake_channel(shared, push.data.first());
                    }
                }
                _ => wake_channel(shared, push.data.first()),
            }
        }
        PushKind::Subscribe => {
            state.connected.store(true, Ordering::Release);
            let name = push.data.first().and_then(|value| redis::from_redis_value_ref::<String>(value).ok());
            match name.as_deref().and_then(|name| shared.keyspace.key_of(name)) {
                // Events before the subscription, or during a gap of the connection, were missed.
                Some(key) => {
                    shared.suspects.add(key);
                    wake_channel(shared, push.data.first());
                }
                None => wake_channel(shared, push.data.first()),
            }
        }
        PushKind::Disconnection => {
            tracing::debug!("the pub/sub connection dropped; waking every waiter to look again");
            state.connected.store(false, Ordering::Release);
            shared.epoch.send_modify(|epoch| *epoch += 1);
            if !state.keeper_running.swap(true, Ordering::AcqRel) {
                lockkit_core::home::spawn(keep_alive(Arc::downgrade(shared), Arc::clone(state)));
            }
        }
        _ => {}
    }
}

/// Wakes every waiter of channel `name` to look (a message, or a renewed subscription).
fn wake_channel(shared: &Shared, name: Option<&Value>) {
    let Some(name) = name.and_then(|value| redis::from_redis_value_ref::<String>(value).ok()) else {
        return;
    };
    if name == shared.wake_channel.name {
        // The wake channel subscribed again: messages may have been missed.
        for sender in lock_or_recover(&shared.queued).values() {
            deliver(sender, Woken::Look);
        }
        return;
    }
    let channel = lock_or_recover(&shared.channels).get(&name).cloned();
    if let Some(channel) = channel {
        channel.wake.send_replace(Wake::default());
    }
}

/// Routes a message of the wake channel, `grant:<token>:<server ms>:<window ms>:<member>` or
/// `next:<member>`, to the queued waiter it names; a waiter that left already is not there
/// to hear it.
fn wake_queued(shared: &Shared, payload: Option<String>) {
    let Some((woken, member)) = payload.as_deref().and_then(parse_wake) else { return };
    if let Some(sender) = lock_or_recover(&shared.queued).get(member) {
        deliver(sender, woken);
    }
}

/// Reads a message of the wake channel: what it says, and to which queue member.
fn parse_wake(payload: &str) -> Option<(Woken, &str)> {
    if let Some(member) = payload.strip_prefix("next:") {
        return Some((Woken::OthersTurn, member));
    }
    let mut fields = payload.strip_prefix("grant:")?.splitn(4, ':');
    let token = fields.next()?.parse().ok()?;
    let server_ms = fields.next()?.parse().ok()?;
    let window = Duration::from_millis(fields.next()?.parse().ok()?);
    Some((Woken::HandedOver(Handover { token, server_ms, window }), fields.next()?))
}

/// Wakes a queued waiter with `woken`, keeping the latest hand-over (by token) for it to
/// take: a later wake-up does not bury it, nor does an older hand-over arriving late.
fn deliver(sender: &watch::Sender<Wake>, woken: Woken) {
    sender.send_modify(|current| {
        current.woken = woken;
        if let Woken::HandedOver(new) = woken
            && current.handover.is_none_or(|held| new.token > held.token)
        {
            current.handover = Some(new);
        }
    });
}

/// Pokes a dropped connection until it answers, so that it is rebuilt (and its channels
/// subscribed again) even when nothing else uses it. Ends when the connection is up again,
/// when its link was replaced, or with the provider.
async fn keep_alive(shared: Weak<Shared>, state: Arc<LinkState>) {
    loop {
        tokio::time::sleep(KEEPER_INTERVAL).await;
        if state.connected.load(Ordering::Acquire) {
            state.keeper_running.store(false, Ordering::Release);
            return;
        }
        let Some(link) = shared.upgrade().and_then(|shared| shared.live_link()) else {
            return;
        };
        if link.state.generation != state.generation {
            return;
        }
        let mut connection = link.connection.clone();
        drop(link);
        let ping = redis::cmd("PING");
        let ping = tokio::time::timeout(KEEPER_INTERVAL * 5, ping.query_async::<Value>(&mut connection));
        let answered = matches!(ping.await, Ok(Ok(_)));
        let Some(shared) = shared.upgrade() else { return };
        if answered {
            state.connected.store(true, Ordering::Release);
            shared.epoch.send_modify(|epoch| *epoch += 1);
        } else if shared.moves_on {
            // The primary may have been failed over: the next use asks the sentinels again
            // (and subscribes again on the new link); the waiters poll meanwhile.
            tracing::debug!("the pub/sub connection's primary does not answer; asking the sentinels again");
            state.stale.store(true, Ordering::Release);
            state.keeper_running.store(false, Ordering::Release);
            shared.epoch.send_modify(|epoch| *epoch += 1);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_messages_are_parsed_with_members_that_contain_colons() {
        let member = "app:wake:abc\nowner:with:colons";
        let grant = format!("grant:1763700000000001:1763700000000:250:{member}");
        let handover =
            Handover { token: 1_763_700_000_000_001, server_ms: 1_763_700_000_000, window: Duration::from_millis(250) };
        assert_eq!(parse_wake(&grant), Some((Woken::HandedOver(handover), member)));
        assert_eq!(parse_wake(&format!("next:{member}")), Some((Woken::OthersTurn, member)));
        for bad in ["turn:x", "grant:x:1:2:m", "grant:1:x:2:m", "grant:1:2:x:m", "grant:1:2:3", ""] {
            assert_eq!(parse_wake(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_handover_is_kept_through_later_wake_ups_and_not_replaced_by_an_older_one() {
        const W: Duration = Duration::from_millis(200);
        let (sender, mut receiver) = watch::channel(Wake::default());
        let first = Handover { token: 7, server_ms: 1, window: W };
        deliver(&sender, Woken::HandedOver(first));
        deliver(&sender, Woken::OthersTurn);
        assert!(receiver.has_changed().unwrap(), "each delivery wakes");
        assert_eq!(*receiver.borrow_and_update(), Wake { woken: Woken::OthersTurn, handover: Some(first) });
        deliver(&sender, Woken::HandedOver(Handover { token: 6, server_ms: 2, window: W }));
        assert_eq!(receiver.borrow_and_update().handover, Some(first), "an older hand-over arriving late is ignored");
        let newer = Handover { token: 8, server_ms: 3, window: W };
        deliver(&sender, Woken::HandedOver(newer));
        assert_eq!(*receiver.borrow_and_update(), Wake { woken: Woken::HandedOver(newer), handover: Some(newer) });
    }
}
