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
//! Addressed wake-ups for the fair lock: each provider also listens on a wake channel of its
//! own, named in the queue entries of its waiters. The release of a fair lock with waiters
//! hands the lock over to the head of the queue and tells it so there, with the grant's token
//! and server time ([`Woken::HandedOver`]); it tells the next two that it is another's turn
//! ([`Woken::OthersTurn`]): they look again only if that hand-over may expire unconfirmed. No
//! other provider hears of it, so a hand-off wakes one waiter, not all. The wake channel is
//! subscribed once per provider and kept; queued waiters register by queue member
//! ([`Subscriber::watch_queued`]), at no cost once it is subscribed.
//!
//! Fairness of the unfair lock: Redis (7.0) delivers a message to a channel's subscribers in the order they
//! subscribed, and the first woken waiter usually wins the race for the lock. When the last
//! waiter of a provider leaves a channel (typically because it won), the subscription is
//! marked for repositioning: the provider's next wait on it unsubscribes and subscribes
//! again (unless the background unsubscribe did already), so the latest winner goes to
//! the back of the delivery order and the waiters that waited longest are woken first.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{OnceCell, watch};
use uuid::Uuid;

use crate::builder::Settings;
use crate::util::lock;

/// How often a dead subscriber connection is poked so that it reconnects.
const KEEPER_INTERVAL: Duration = Duration::from_millis(200);

/// Why a wait ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A release for everyone, a renewed subscription, messages that may have been missed,
    /// or the time given: look at the lock again.
    #[default]
    Look,
    /// A release whose turn is another queued waiter's.
    OthersTurn,
    /// A release handed the lock over to this queued waiter.
    HandedOver(Handover),
}

/// The latest wake-up of a waiter, and the latest hand-over addressed to it, which stays
/// when later wake-ups come.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Wake {
    woken: Woken,
    handover: Option<Handover>,
}

/// A hand-over of a fair lock to the head of its queue, as the release announced it: the
/// head holds the lock, for `window` from `server_ms` on, unless it was already handed over
/// to it earlier and lost meanwhile (which the token tells).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Handover {
    /// The grant's fencing token.
    pub(crate) token: u64,
    /// The server's clock when the grant was made, in milliseconds.
    pub(crate) server_ms: u64,
    /// How long the grant lasts unless confirmed: the releaser's claim window.
    pub(crate) window: Duration,
}

/// The pub/sub side of one provider.
#[derive(Debug)]
pub(crate) struct Subscriber {
    client: redis::Client,
    connection: OnceCell<ConnectionManager>,
    shared: Arc<Shared>,
    response_timeout: Duration,
}

#[derive(Debug)]
struct Shared {
    channels: Mutex<HashMap<String, Arc<Channel>>>,
    /// Bumped whenever messages may have been missed by every channel at once.
    epoch: watch::Sender<u64>,
    /// Whether the connection is believed up (false from a `Disconnection` push until the
    /// next confirmation or reply).
    connected: AtomicBool,
    keeper_running: AtomicBool,
    /// The connection, for the keeper. Held here, where only the provider's side keeps it
    /// alive, so that dropping the provider closes the connection.
    connection: std::sync::OnceLock<ConnectionManager>,
    /// This provider's wake channel, subscribed at the first queued wait and kept.
    wake_channel: Arc<Channel>,
    /// The queued waiters of this provider by queue member, and the senders of their
    /// wake-ups.
    queued: Mutex<HashMap<String, watch::Sender<Wake>>>,
}

#[derive(Debug)]
struct Channel {
    name: String,
    /// Waiters of this provider interested in the channel; changed under the map's lock.
    interest: Mutex<usize>,
    /// Sent on every message and every (re)confirmed subscription.
    wake: watch::Sender<Wake>,
    /// Whether the server confirmed the subscription; the async lock orders SUBSCRIBE and
    /// UNSUBSCRIBE of one channel.
    subscribed: tokio::sync::Mutex<bool>,
    /// Set when the last waiter left: the next wait subscribes again, at the back of the
    /// server's delivery order.
    reposition: AtomicBool,
}

impl Subscriber {
    /// A subscriber on the server of `connection`; nothing connects before the first wait.
    pub(crate) fn new(settings: &Settings) -> redis::RedisResult<Self> {
        let connection = &settings.connection;
        let resp3 = connection.redis_settings().clone().set_protocol(redis::ProtocolVersion::RESP3);
        let client = crate::client::open(settings, connection.clone().set_redis_settings(resp3))?;
        let response_timeout = settings.response_timeout;
        let (epoch, _) = watch::channel(0);
        let wake_channel = Channel::new(format!("{}:wake:{}", settings.prefix, Uuid::new_v4().simple()));
        Ok(Self {
            client,
            connection: OnceCell::new(),
            shared: Arc::new(Shared {
                channels: Mutex::new(HashMap::new()),
                epoch,
                connected: AtomicBool::new(true),
                keeper_running: AtomicBool::new(false),
                connection: std::sync::OnceLock::new(),
                wake_channel: Arc::new(wake_channel),
                queued: Mutex::new(HashMap::new()),
            }),
            response_timeout,
        })
    }

    /// Registers interest in `channel` and subscribes to it unless this provider already
    /// is. When subscribing fails the interest is still returned, not live, and the waiter
    /// polls instead.
    pub(crate) async fn watch(&self, channel: &str) -> Interest {
        let entry = {
            let mut channels = lock(&self.shared.channels);
            let entry =
                channels.entry(channel.to_owned()).or_insert_with(|| Arc::new(Channel::new(channel.to_owned())));
            *lock(&entry.interest) += 1;
            Arc::clone(entry)
        };
        let mut interest = Interest {
            wake: entry.wake.subscribe(),
            epoch: self.shared.epoch.subscribe(),
            channel: entry,
            member: None,
            owner: Arc::downgrade(&self.shared),
            connection: None,
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
    pub(crate) async fn watch_queued(&self, member: &str, only_if_subscribed: bool) -> Option<Interest> {
        let channel = Arc::clone(&self.shared.wake_channel);
        // Known subscribed, the registration is local: no lock is awaited, so that thousands
        // of acquisitions at once do not queue on the channel's subscription lock.
        let subscribed = channel.subscribed.try_lock().is_ok_and(|subscribed| *subscribed);
        if only_if_subscribed && !subscribed {
            return None;
        }
        let (sender, wake) = watch::channel(Wake::default());
        lock(&self.shared.queued).insert(member.to_owned(), sender);
        let mut interest = Interest {
            wake,
            epoch: self.shared.epoch.subscribe(),
            channel,
            member: Some(member.to_owned()),
            owner: Arc::downgrade(&self.shared),
            connection: None,
            confirmed: false,
        };
        match self.connection.get() {
            Some(connection) if subscribed => {
                interest.connection = Some(connection.clone());
                interest.confirmed = true;
            }
            _ => self.confirm(&mut interest).await,
        }
        Some(interest)
    }

    /// Subscribes the interest's channel unless it already is.
    async fn confirm(&self, interest: &mut Interest) {
        let Ok(connection) = self.connection().await else {
            return;
        };
        interest.connection = Some(connection.clone());
        let mut subscribed = interest.channel.subscribed.lock().await;
        if *subscribed && interest.channel.reposition.swap(false, Ordering::AcqRel) {
            // Back of the delivery order (see the module docs). Until the new confirmation the
            // interest is not live, and the caller tries again after this returns.
            let mut connection = connection.clone();
            let attempt = tokio::time::timeout(self.response_timeout, connection.unsubscribe(&interest.channel.name));
            if let Ok(Ok(())) = attempt.await {
                *subscribed = false;
            }
        }
        if !*subscribed {
            let mut connection = connection;
            let attempt = tokio::time::timeout(self.response_timeout, connection.subscribe(&interest.channel.name));
            match attempt.await {
                Ok(Ok(())) => *subscribed = true,
                Ok(Err(error)) => {
                    tracing::debug!(%error, channel = %interest.channel.name, "subscribing failed; polling")
                }
                Err(_) => tracing::debug!(channel = %interest.channel.name, "subscribing timed out; polling"),
            }
        }
        interest.confirmed = *subscribed;
    }

    /// The pub/sub connection, made on first use; its pushes are routed by a `PushRouter`.
    async fn connection(&self) -> redis::RedisResult<ConnectionManager> {
        let connection = self
            .connection
            .get_or_try_init(|| async {
                let config = ConnectionManagerConfig::new()
                    .set_push_sender(PushRouter(Arc::downgrade(&self.shared)))
                    .set_automatic_resubscription()
                    .set_connection_timeout(Some(self.response_timeout))
                    .set_response_timeout(Some(self.response_timeout))
                    .set_number_of_retries(2)
                    .set_min_delay(Duration::from_millis(20))
                    .set_max_delay(Duration::from_millis(500));
                let attempt =
                    tokio::time::timeout(self.response_timeout, self.client.get_connection_manager_with_config(config));
                let connection = match attempt.await {
                    Ok(result) => result?,
                    Err(_) => return Err(redis::RedisError::from((redis::ErrorKind::Io, "connecting timed out"))),
                };
                let _ = self.shared.connection.set(connection.clone());
                Ok(connection)
            })
            .await?;
        Ok(connection.clone())
    }

    /// Retries the subscription of an interest that is not live.
    pub(crate) async fn revive(&self, interest: &mut Interest) {
        if !interest.confirmed {
            self.confirm(interest).await;
        }
    }
}

impl Channel {
    fn new(name: String) -> Self {
        let (wake, _) = watch::channel(Wake::default());
        Self {
            name,
            interest: Mutex::new(0),
            wake,
            subscribed: tokio::sync::Mutex::new(false),
            reposition: AtomicBool::new(false),
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
    connection: Option<ConnectionManager>,
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

    /// Whether wake-ups can be trusted: the subscription is confirmed and the connection up.
    /// When not, the waiter should poll at a short interval.
    pub(crate) fn is_live(&self) -> bool {
        self.confirmed && self.owner.upgrade().is_some_and(|shared| shared.connected.load(Ordering::Acquire))
    }

    /// The latest hand-over addressed to this queued waiter, whether or not a wait saw it.
    pub(crate) fn handover(&self) -> Option<Handover> {
        self.wake.borrow().handover
    }

    /// Waits until the channel fires, messages may have been missed, or `at_most` passes,
    /// and says whether to look at the lock, whether it is another waiter's turn, or
    /// whether the lock was handed over to this waiter.
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
                lock(&shared.queued).remove(member);
            }
            return;
        }
        let last = {
            let mut interest = lock(&self.channel.interest);
            *interest = interest.saturating_sub(1);
            *interest == 0
        };
        let (Some(shared), Some(connection)) = (self.owner.upgrade(), self.connection.take()) else {
            return;
        };
        if !last {
            return;
        }
        self.channel.reposition.store(true, Ordering::Release);
        // Without a runtime the subscription simply stays: harmless, and dropped with the
        // provider.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            drop(runtime.spawn(unsubscribe_if_unused(shared, Arc::clone(&self.channel), connection)));
        }
    }
}

/// Unsubscribes a channel nobody waits on any more, and forgets it.
async fn unsubscribe_if_unused(shared: Arc<Shared>, channel: Arc<Channel>, mut connection: ConnectionManager) {
    let mut subscribed = channel.subscribed.lock().await;
    if *lock(&channel.interest) > 0 {
        return;
    }
    if *subscribed {
        match connection.unsubscribe(&channel.name).await {
            Ok(()) => *subscribed = false,
            Err(error) => {
                tracing::debug!(%error, channel = %channel.name, "unsubscribing failed; the subscription stays");
                return;
            }
        }
    }
    // Forget the channel only while holding its subscription lock with nobody interested:
    // a newcomer then either found this entry (and waits for the lock, and subscribes
    // again) or makes a new one after the UNSUBSCRIBE was answered.
    let mut channels = lock(&shared.channels);
    if *lock(&channel.interest) == 0 && channels.get(&channel.name).is_some_and(|entry| Arc::ptr_eq(entry, &channel)) {
        channels.remove(&channel.name);
    }
}

/// Routes the pushes of the pub/sub connection to the waiters as they are read, in the
/// connection's own task: a wake-up takes no task hop of ours. Holds the provider's side
/// weakly, so that the connection does not keep it alive.
struct PushRouter(Weak<Shared>);

impl redis::aio::AsyncPushSender for PushRouter {
    fn send(&self, push: PushInfo) -> Result<(), redis::aio::SendError> {
        // Refusing a push once the provider is gone tells the connection that nobody listens.
        let shared = self.0.upgrade().ok_or(redis::aio::SendError)?;
        route(&shared, push);
        Ok(())
    }
}

/// Routes one push: a message to the waiters it wakes, a (re)confirmed subscription to its
/// channel's waiters, a disconnection to everyone. Never blocks.
fn route(shared: &Arc<Shared>, push: PushInfo) {
    match push.kind {
        PushKind::Message => {
            shared.connected.store(true, Ordering::Release);
            let text =
                |value: Option<&Value>| value.and_then(|value| redis::from_redis_value_ref::<String>(value).ok());
            match text(push.data.first()) {
                Some(name) if name == shared.wake_channel.name => wake_queued(shared, text(push.data.get(1))),
                _ => wake_channel(shared, push.data.first()),
            }
        }
        PushKind::Subscribe => {
            shared.connected.store(true, Ordering::Release);
            wake_channel(shared, push.data.first());
        }
        PushKind::Disconnection => {
            tracing::debug!("the pub/sub connection dropped; waking every waiter to look again");
            shared.connected.store(false, Ordering::Release);
            shared.epoch.send_modify(|epoch| *epoch += 1);
            if let Ok(runtime) = tokio::runtime::Handle::try_current()
                && !shared.keeper_running.swap(true, Ordering::AcqRel)
            {
                drop(runtime.spawn(keep_alive(Arc::downgrade(shared))));
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
        for sender in lock(&shared.queued).values() {
            deliver(sender, Woken::Look);
        }
        return;
    }
    let channel = lock(&shared.channels).get(&name).cloned();
    if let Some(channel) = channel {
        channel.wake.send_replace(Wake::default());
    }
}

/// Routes a message of the wake channel, `grant:<token>:<server ms>:<window ms>:<member>` or
/// `next:<member>`, to the queued waiter it names; a waiter that left already is not there
/// to hear it.
fn wake_queued(shared: &Shared, payload: Option<String>) {
    let Some((woken, member)) = payload.as_deref().and_then(parse_wake) else { return };
    if let Some(sender) = lock(&shared.queued).get(member) {
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
/// subscribed again) even when nothing else uses it.
async fn keep_alive(shared: Weak<Shared>) {
    loop {
        tokio::time::sleep(KEEPER_INTERVAL).await;
        let Some(state) = shared.upgrade() else {
            return;
        };
        if state.connected.load(Ordering::Acquire) {
            state.keeper_running.store(false, Ordering::Release);
            return;
        }
        let Some(mut connection) = state.connection.get().cloned() else {
            return;
        };
        drop(state);
        let ping = redis::cmd("PING");
        let ping = tokio::time::timeout(KEEPER_INTERVAL * 5, ping.query_async::<Value>(&mut connection));
        if let Ok(Ok(_)) = ping.await
            && let Some(state) = shared.upgrade()
        {
            state.connected.store(true, Ordering::Release);
            state.epoch.send_modify(|epoch| *epoch += 1);
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
