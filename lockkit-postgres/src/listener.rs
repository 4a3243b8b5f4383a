//! Wake-ups: one dedicated `LISTEN` connection per provider, on three channels of the schema
//! and one of its own. Every owner id of the provider's lock acquisitions starts with the
//! provider's tag (`<tag>.<attempt>`), and a release that hands the lock over `NOTIFY`s the
//! provider's own channel `<schema>_g_<tag>` with `<token>:<server µs>:<owner id>` as payload:
//! only that provider's connection hears it, and its task (which polls
//! `Connection::poll_message`) wakes that one waiter, which confirms the grant with its next
//! try. (Owner ids without a tag, from providers of an earlier version, are handed over on
//! `<schema>_granted` as `<token>:<owner id>`, as before; a provider listens there too, for
//! the functions of an earlier version.) A release that hands over nothing `NOTIFY`s
//! `<schema>_released` with the lock's name, and every waiter of that name wakes. The elections' channel carries payloads
//! (`%e/<name>`, see `election_sql.rs`) that wake the waiting candidates and the observers of
//! that election. When the connection ends every waiter wakes (and looks again), and the next
//! waiter opens a new one. The connection and its task live on lockkit's home runtime
//! ([`lockkit_core::home`]), whatever runtime the waiters run on.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use lockkit_core::Result;
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Client};

use crate::sql::TAG_LEN;
use crate::store::Store;

type Slots = Arc<Mutex<Registry>>;

/// The waiters of this provider, by lock name and by owner id (with the last hand-over
/// announced to that owner).
#[derive(Debug, Default)]
struct Registry {
    next: u64,
    by_name: HashMap<String, HashMap<u64, Arc<Notify>>>,
    by_owner: HashMap<String, (Arc<Notify>, HandedSlot)>,
}

/// Where the last hand-over announced to a waiter waits to be taken.
type HandedSlot = Arc<Mutex<Option<Handed>>>;

/// A hand-over as its notification announced it: the token of the row the release made for
/// the waiter and the server time (µs since the epoch, as `floor(extract(epoch FROM …) *
/// 1000000)`) at which the row's lease began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Handed {
    pub(crate) token: u64,
    pub(crate) at_us: i64,
}

impl Registry {
    fn wake_name(&self, name: &str) {
        for notify in self.by_name.get(name).into_iter().flat_map(HashMap::values) {
            notify.notify_one();
        }
    }

    /// A hand-over: `<token>:<server µs>:<owner>`, `<token>:<owner>` (on the schema's shared
    /// channel), or the owner alone (as the first functions announced it).
    /// The token and server time of a `<token>:<server µs>:<owner>` payload are kept for the
    /// waiter (the latest hand-over, if several came), which may take the grant from them.
    fn wake_owner(&self, payload: &str) {
        let (head, owner) = payload.rsplit_once(':').unwrap_or(("", payload));
        if let Some((notify, handed)) = self.by_owner.get(owner) {
            if let Some((token, at_us)) = head.split_once(':')
                && let (Ok(token), Ok(at_us)) = (token.parse::<u64>(), at_us.parse::<i64>())
            {
                let mut handed = handed.lock().unwrap_or_else(PoisonError::into_inner);
                if handed.is_none_or(|last| last.at_us < at_us) {
                    *handed = Some(Handed { token, at_us });
                }
            }
            notify.notify_one();
        }
    }

    fn wake_all(&self) {
        for notify in self.by_name.values().flat_map(HashMap::values) {
            notify.notify_one();
        }
    }
}

/// The listening connection and the waiters by lock name.
#[derive(Debug)]
pub(crate) struct Wakeups {
    slots: Slots,
    link: Arc<tokio::sync::Mutex<Option<Link>>>,
    /// The provider's tag: ten random lower-case hex digits, the prefix of its owner ids and
    /// the suffix of its hand-over channel.
    tag: String,
}

impl Default for Wakeups {
    fn default() -> Self {
        let mut tag = uuid::Uuid::new_v4().simple().to_string();
        tag.truncate(TAG_LEN);
        Self { slots: Slots::default(), link: Arc::default(), tag }
    }
}

#[derive(Debug)]
struct Link {
    /// Kept so that the connection lives; the task ends when it breaks.
    _client: Client,
    task: JoinHandle<()>,
}

/// A waiter's registration, under its lock name and its owner id; unregisters on drop.
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Slots,
    id: u64,
    name: String,
    /// The owner id a hand-over is announced to (`None`: a campaign or an observer, which
    /// wake by name only).
    owner: Option<String>,
    notify: Arc<Notify>,
    /// The last hand-over announced to `owner` with its server time, not yet taken.
    handed: HandedSlot,
}

impl Slot {
    /// The last hand-over announced to this waiter since the last call, if any.
    pub(crate) fn take_handed(&self) -> Option<Handed> {
        self.handed.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// The wake-up of this waiter. A wake-up that comes while the waiter is not waiting is
    /// kept (a permit), so none is lost between two waits.
    pub(crate) fn notify(&self) -> Arc<Notify> {
        Arc::clone(&self.notify)
    }

    /// The next wake-up of this waiter, armed now: one that comes from here on completes it,
    /// even before it is awaited.
    pub(crate) fn armed(&self) -> Pin<Box<OwnedNotified>> {
        let mut notified = Box::pin(self.notify().notified_owned());
        notified.as_mut().enable();
        notified
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(waiters) = slots.by_name.get_mut(&self.name) {
            waiters.remove(&self.id);
            if waiters.is_empty() {
                slots.by_name.remove(&self.name);
            }
        }
        if let Some(owner) = &self.owner {
            slots.by_owner.remove(owner);
        }
    }
}

impl Wakeups {
    /// The owner id of a lock acquisition of this provider: `<tag>.<attempt>`, from which the
    /// release's hand-over derives the channel this provider listens on.
    pub(crate) fn owner_id(&self, attempt: &uuid::Uuid) -> String {
        format!("{}.{attempt}", self.tag)
    }

    /// The channel of this provider's hand-overs: `<schema>_g_<tag>`.
    pub(crate) fn own_channel(&self, store: &Store) -> String {
        format!("{}_g_{}", store.sql.schema, self.tag)
    }

    /// Registers a waiter of the lock stored as `name` (or of an election's wake key), and
    /// under `owner` when a release may hand it the lock.
    pub(crate) fn register(&self, name: &str, owner: Option<&str>) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.next += 1;
        let id = slots.next;
        let notify = Arc::new(Notify::new());
        let handed = Arc::new(Mutex::new(None));
        slots.by_name.entry(name.to_owned()).or_default().insert(id, Arc::clone(&notify));
        if let Some(owner) = owner {
            slots.by_owner.insert(owner.to_owned(), (Arc::clone(&notify), Arc::clone(&handed)));
        }
        Slot {
            slots: Arc::clone(&self.slots),
            id,
            name: name.to_owned(),
            owner: owner.map(str::to_owned),
            notify,
            handed,
        }
    }

    /// Whether the listening connection is up now.
    pub(crate) async fn is_up(&self) -> bool {
        self.link.lock().await.as_ref().is_some_and(|link| !link.task.is_finished())
    }

    /// Makes sure the listening connection is up and `LISTEN`ing (on the home runtime);
    /// once this returns `Ok`, every later release of a lock is delivered.
    pub(crate) async fn ensure(&self, store: &Arc<Store>) -> Result<()> {
        if self.is_up().await {
            return Ok(());
        }
        let (link, slots, own, store) =
            (Arc::clone(&self.link), Arc::clone(&self.slots), self.own_channel(store), Arc::clone(store));
        // The turn to open is taken on the home runtime too: a caller on a runtime that stops
        // being driven halfway holds up nobody.
        lockkit_core::home::run(async move {
            let mut link = link.lock().await;
            if link.as_ref().is_some_and(|link| !link.task.is_finished()) {
                return Ok(());
            }
            *link = None;
            *link = Some(listen(store, slots, own).await?);
            Ok(())
        })
        .await
    }
}

/// Opens a `LISTEN` connection on the current runtime (the home runtime), whose task wakes the
/// waiters in `slots`.
async fn listen(store: Arc<Store>, slots: Slots, own: String) -> Result<Link> {
    {
        let connect = store.settings.tls.connect(&store.settings.config);
        let timeout = store.settings.response_timeout;
        let (client, mut connection) = match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(pair)) => pair,
            Ok(Err(error)) => {
                return Err(store.classify_connect(error).with_context("open the LISTEN connection"));
            }
            Err(_) => {
                return Err(store.connection_error(None, format!("no answer within {timeout:?} while connecting")));
            }
        };
        let granted = store.sql.granted.clone();
        let own_listen = own.clone();
        let task = tokio::spawn(async move {
            loop {
                match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(note))) => {
                        let slots = slots.lock().unwrap_or_else(PoisonError::into_inner);
                        if note.channel() == own || note.channel() == granted {
                            slots.wake_owner(note.payload());
                        } else {
                            slots.wake_name(note.payload());
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => {
                        tracing::debug!(%error, "postgres LISTEN connection broke");
                        break;
                    }
                    None => break,
                }
            }
            // Everyone looks again: a release or a hand-over may have gone unheard.
            slots.lock().unwrap_or_else(PoisonError::into_inner).wake_all();
        });
        let listen = format!(
            "LISTEN {own_listen}; LISTEN {}; LISTEN {}; LISTEN {}",
            store.sql.channel, store.sql.granted, store.sql.election.channel
        );
        match tokio::time::timeout(timeout, client.batch_execute(&listen)).await {
            Ok(Ok(())) => Ok(Link { _client: client, task }),
            Ok(Err(error)) => {
                task.abort();
                Err(store.connection_error(None, error).with_context("LISTEN"))
            }
            Err(_) => {
                task.abort();
                Err(store.connection_error(None, format!("no answer to LISTEN within {timeout:?}")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `slot` holds a wake-up permit (taking it).
    fn woken(slot: &Slot) -> bool {
        let notify = slot.notify();
        let notified = std::pin::pin!(notify.notified());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        notified.poll(&mut cx).is_ready()
    }

    #[test]
    fn a_hand_over_wakes_the_owner_it_names() {
        let wakeups = Wakeups::default();
        let a = wakeups.register("orders/42", Some("owner-a"));
        let b = wakeups.register("orders/42", Some("owner-b"));
        let c = wakeups.register("orders/42", Some("owner-c"));
        let registry = wakeups.slots.lock().unwrap_or_else(PoisonError::into_inner);
        registry.wake_owner("1795658598646614:1795658598646600:owner-a");
        // An older function's payloads, `<token>:<owner>` and the owner alone, wake it too; an
        // owner not registered here wakes nobody.
        registry.wake_owner("1795658598646614:owner-b");
        registry.wake_owner("owner-b");
        registry.wake_owner("7:owner-d");
        drop(registry);
        assert!(woken(&a) && woken(&b));
        assert!(!woken(&c));
        // Only the payload with the server time is kept for taking, the latest one.
        assert_eq!(a.take_handed(), Some(Handed { token: 1_795_658_598_646_614, at_us: 1_795_658_598_646_600 }));
        assert_eq!(a.take_handed(), None);
        assert_eq!(b.take_handed(), None);
        let registry = wakeups.slots.lock().unwrap_or_else(PoisonError::into_inner);
        registry.wake_owner("9:20:owner-c");
        registry.wake_owner("8:10:owner-c");
        registry.wake_owner("x:30:owner-c");
        drop(registry);
        assert_eq!(c.take_handed(), Some(Handed { token: 9, at_us: 20 }));
    }
}
