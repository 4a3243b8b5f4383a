//! Wake-ups: one dedicated `LISTEN` connection per provider. A release `NOTIFY`s the
//! schema's channel with the lock's name as payload; the connection's task, which polls
//! `Connection::poll_message`, wakes the waiters of that name. When the connection ends every
//! waiter wakes (and looks again), and the next waiter opens a new one. The same connection
//! `LISTEN`s on the elections' channel, whose payloads (`%e/<name>`, see `election_sql.rs`)
//! wake the waiting candidates and the observers of that election.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use lockkit_core::Result;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Client};

use crate::store::Store;

type Slots = Arc<Mutex<HashMap<String, (Arc<Notify>, usize)>>>;

/// The listening connection and the waiters by lock name.
#[derive(Debug, Default)]
pub(crate) struct Wakeups {
    slots: Slots,
    link: tokio::sync::Mutex<Option<Link>>,
}

#[derive(Debug)]
struct Link {
    /// Kept so that the connection lives; the task ends when it breaks.
    _client: Client,
    task: JoinHandle<()>,
}

/// A waiter's registration for one lock name; unregisters on drop.
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Slots,
    name: String,
    notify: Arc<Notify>,
}

impl Slot {
    /// The wake-up of this name, to be armed (`enable`d) before each attempt.
    pub(crate) fn notify(&self) -> Arc<Notify> {
        Arc::clone(&self.notify)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = slots.get_mut(&self.name) {
            entry.1 -= 1;
            if entry.1 == 0 {
                slots.remove(&self.name);
            }
        }
    }
}

impl Wakeups {
    /// Registers a waiter of `name`.
    pub(crate) fn register(&self, name: &str) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = slots.entry(name.to_owned()).or_insert_with(|| (Arc::new(Notify::new()), 0));
        entry.1 += 1;
        Slot { slots: Arc::clone(&self.slots), name: name.to_owned(), notify: Arc::clone(&entry.0) }
    }

    /// Whether the listening connection is up now.
    pub(crate) async fn is_up(&self) -> bool {
        self.link.lock().await.as_ref().is_some_and(|link| !link.task.is_finished())
    }

    /// Makes sure the listening connection is up and `LISTEN`ing (on the current runtime);
    /// once this returns `Ok`, every later release of a lock is delivered.
    pub(crate) async fn ensure(&self, store: &Store) -> Result<()> {
        let mut link = self.link.lock().await;
        if link.as_ref().is_some_and(|link| !link.task.is_finished()) {
            return Ok(());
        }
        *link = None;
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
        let slots = Arc::clone(&self.slots);
        let task = tokio::spawn(async move {
            loop {
                match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(note))) => {
                        let notify = slots
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .get(note.payload())
                            .map(|entry| Arc::clone(&entry.0));
                        if let Some(notify) = notify {
                            notify.notify_waiters();
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
            // Everyone looks again: a release may have gone unheard.
            let all: Vec<Arc<Notify>> = slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .values()
                .map(|entry| Arc::clone(&entry.0))
                .collect();
            for notify in all {
                notify.notify_waiters();
            }
        });
        let listen = format!("LISTEN {}; LISTEN {}", store.sql.channel, store.sql.election.channel);
        match tokio::time::timeout(timeout, client.batch_execute(&listen)).await {
            Ok(Ok(())) => {
                *link = Some(Link { _client: client, task });
                Ok(())
            }
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
