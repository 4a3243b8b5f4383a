//! The client side of a [`ZkLockProvider`](crate::ZkLockProvider)'s backend ([`ZkBackend`]):
//! its session (opened on the home runtime, a new one once it ended) and the lock parents
//! it knows exist. The recipe is in recipe.rs and held.rs; the `LockBackend` in backend.rs.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use lockkit_core::sync::lock_or_recover;
use lockkit_core::{Error, LockName, Result};
use zookeeper_client as zk;

use crate::config::ZkConfig;
use crate::error::BACKEND;
use crate::session::Session;

/// Lock parents this provider created or found, so that later acquisitions skip the create.
const KNOWN_PARENTS_LIMIT: usize = 4096;

/// The ZooKeeper backend: one provider's current session and the recipe.
pub(crate) struct ZkBackend {
    /// This backend, for the holds and pending nodes that may need a new session later.
    pub(crate) me: Weak<ZkBackend>,
    pub(crate) config: Arc<ZkConfig>,
    /// The session in use; `None` until the first use.
    current: Mutex<Option<Arc<Session>>>,
    /// Taken while a session is being opened, so that one is opened at a time.
    opening: tokio::sync::Mutex<()>,
    known_parents: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkBackend")
            .field("address", &self.config.address())
            .field("root", &self.config.root)
            .field("session", &*self.current())
            .finish_non_exhaustive()
    }
}

impl ZkBackend {
    /// A backend with no session yet: no I/O.
    pub(crate) fn new(config: ZkConfig) -> Arc<ZkBackend> {
        Arc::new_cyclic(|me| ZkBackend {
            me: me.clone(),
            config: Arc::new(config),
            current: Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
            known_parents: Mutex::new(HashSet::new()),
        })
    }

    fn current(&self) -> MutexGuard<'_, Option<Arc<Session>>> {
        lock_or_recover(&self.current)
    }

    /// The session in use, if it is alive.
    pub(crate) fn live(&self) -> Option<Arc<Session>> {
        self.current().as_ref().filter(|session| session.is_alive()).cloned()
    }

    /// The session timeout the server granted to the session in use (or the last one).
    pub(crate) fn negotiated_session_timeout(&self) -> Option<Duration> {
        self.current().as_ref().map(|session| session.timeout)
    }

    /// The live session, or a new one on the home runtime when there is none yet or the last
    /// one ended (expired or closed). The opening runs on the home runtime, its turn taken
    /// there too: a caller on a runtime that stops being driven halfway holds up nobody.
    pub(crate) async fn session(&self, lock: Option<&LockName>) -> Result<Arc<Session>> {
        if let Some(live) = self.live() {
            return Ok(live);
        }
        let Some(me) = self.me.upgrade() else {
            // Only while the provider is being dropped.
            return Err(
                Error::connection(BACKEND, lock, "the provider is being dropped").with_context("open a session")
            );
        };
        let lock = lock.cloned();
        lockkit_core::home::run(async move { me.open_session(lock.as_ref()).await }).await
    }

    /// Opens a new session unless another opening made one meanwhile (on the home runtime).
    async fn open_session(&self, lock: Option<&LockName>) -> Result<Arc<Session>> {
        let _turn = self.opening.lock().await;
        if let Some(live) = self.live() {
            return Ok(live);
        }
        if let Some(ended) = self.current().as_ref() {
            let why = if ended.is_cut_off() { "its runtime shut down" } else { "it ended" };
            tracing::info!(backend = BACKEND, session = %ended.client.session_id(), "the zk session is unusable ({why}); opening a new one");
        }
        let fresh = Session::open(&self.config, lock).await?;
        *self.current() = Some(Arc::clone(&fresh));
        self.parents().clear();
        Ok(fresh)
    }

    /// The client of the live session.
    pub(crate) async fn zk_client(&self) -> Result<zk::Client> {
        Ok(self.session(None).await?.client.clone())
    }

    fn parents(&self) -> MutexGuard<'_, HashSet<String>> {
        lock_or_recover(&self.known_parents)
    }

    pub(crate) fn parent_known(&self, parent: &str) -> bool {
        self.parents().contains(parent)
    }

    pub(crate) fn remember_parent(&self, parent: &str, exists: bool) {
        let mut parents = self.parents();
        if !exists {
            parents.remove(parent);
            return;
        }
        if parents.len() >= KNOWN_PARENTS_LIMIT {
            parents.clear();
        }
        parents.insert(parent.to_owned());
    }
}
