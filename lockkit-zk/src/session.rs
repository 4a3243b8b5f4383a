//! One ZooKeeper session of a provider: its client, its live holds, and the one task that
//! watches the session state and keeps the holds' local deadlines moving.
//!
//! # How a hold's deadline is kept
//!
//! The server expires a session no earlier than the session timeout `T` after it last heard
//! from the client, and it heard from us after we sent any request it answered. So when a
//! request sent at `s` is answered, every hold of the session is guaranteed until
//! `s + T - drift` ([`lease_deadline`]). While holds are live, the session task sends a cheap
//! `exists` on the base path every `T/3` and extends every hold from its send time.
//!
//! Session states drive the rest: `Disconnected` suspends the holds (no renewal can be
//! answered, so the deadline keeps running; with [`DisconnectPolicy::LoseOnDisconnect`] they
//! are lost at once), `SyncConnected` renews at once, and the terminal states (`Expired`,
//! `Closed`, `AuthFailed`) lose every hold. The provider opens a new session for later
//! acquisitions once this one has ended.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use lockkit_core::{Error, HoldSignal, LossReason, Result, lease_deadline};
use tokio::runtime::Handle;
use zookeeper_client as zk;

use crate::config::{DisconnectPolicy, ZkConfig};
use crate::error::{BACKEND, map};

/// One ZooKeeper session and the holds it carries.
pub(crate) struct Session {
    pub(crate) client: zk::Client,
    pub(crate) config: Arc<ZkConfig>,
    /// The negotiated session timeout: the lease of every hold of this session.
    pub(crate) timeout: Duration,
    /// The runtime the session's client and tasks run on.
    pub(crate) runtime: Handle,
    /// The ACL entries of every node we create.
    pub(crate) acls: Vec<zk::Acl>,
    holds: Mutex<HashMap<u64, HoldSignal>>,
    next_hold: AtomicU64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.client.session_id())
            .field("timeout", &self.timeout)
            .field("state", &self.client.state())
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Connects a new session on `runtime` (so that the client's own task lives there, not on
    /// a caller's short-lived runtime), makes sure the base path exists, and starts the
    /// session task.
    pub(crate) async fn open(config: Arc<ZkConfig>, runtime: Handle) -> Result<Arc<Session>> {
        let task = runtime.spawn(Self::open_here(config, runtime.clone()));
        match task.await {
            Ok(result) => result,
            Err(join) => Err(Error::connection(BACKEND, None, format!("the connecting task failed: {join}"))),
        }
    }

    async fn open_here(config: Arc<ZkConfig>, runtime: Handle) -> Result<Arc<Session>> {
        let mut connector = zk::Client::connector().with_session_timeout(config.session_timeout);
        if let Some(timeout) = config.connect_timeout {
            connector = connector.with_connection_timeout(timeout);
        }
        if let Some((user, password)) = &config.credentials {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let client = connector.connect(&config.hosts).await.map_err(|e| map(e, None))?;
        let timeout = client.session_timeout();
        if timeout <= config.drift * 3 {
            return Err(Error::invalid_config(
                BACKEND,
                format!(
                    "the server granted a session timeout of {timeout:?} (it clamps the {:?} asked for), \
                     too short for the drift margin {:?}: ask for a longer session timeout or a smaller drift",
                    config.session_timeout, config.drift
                ),
            ));
        }
        let acls = config.acls();
        if client.check_stat(&config.root).await.map_err(|e| map(e, None))?.is_none() {
            let options = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acls));
            client.mkdir(&config.root, &options).await.map_err(|e| {
                Error::backend(BACKEND, None, format!("cannot create the base path {}: {e}", config.root))
            })?;
        }
        let states = client.state_watcher();
        let session = Arc::new(Session {
            client,
            config,
            timeout,
            runtime: runtime.clone(),
            acls,
            holds: Mutex::new(HashMap::new()),
            next_hold: AtomicU64::new(0),
        });
        tracing::debug!(backend = BACKEND, session = %session.client.session_id(), ?timeout, "zk session opened");
        runtime.spawn(watch_session(Arc::downgrade(&session), states));
        Ok(session)
    }

    /// Whether the session has ended (expired, closed or refused): a new one is needed.
    pub(crate) fn is_ended(&self) -> bool {
        self.client.state().is_terminated()
    }

    /// The local deadline of a hold confirmed by a request sent at `sent_at`.
    pub(crate) fn deadline_from(&self, sent_at: Instant) -> Instant {
        lease_deadline(sent_at, self.timeout, self.config.drift)
    }

    fn holds(&self) -> std::sync::MutexGuard<'_, HashMap<u64, HoldSignal>> {
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a live hold, to be renewed and told of session loss; returns its id.
    pub(crate) fn register(&self, signal: HoldSignal) -> u64 {
        let id = self.next_hold.fetch_add(1, Ordering::Relaxed);
        self.holds().insert(id, signal);
        id
    }

    /// Forgets a hold (released or lost).
    pub(crate) fn unregister(&self, id: u64) {
        self.holds().remove(&id);
    }

    /// How many holds are live.
    pub(crate) fn hold_count(&self) -> usize {
        self.holds().len()
    }

    /// Extends every live hold to the deadline of a request sent at `sent_at` and answered.
    fn renew_all(&self, sent_at: Instant) {
        let deadline = self.deadline_from(sent_at);
        let holds: Vec<HoldSignal> = self.holds().values().cloned().collect();
        for signal in holds {
            signal.extend(deadline);
        }
    }

    /// Declares every live hold lost.
    fn lose_all(&self, reason: &LossReason) {
        let holds: Vec<(u64, HoldSignal)> = self.holds().drain().collect();
        for (_, signal) in holds {
            signal.lose(reason.clone());
        }
    }

    /// Runs `future` at once (its first poll sends its requests, in order with the caller's),
    /// then finishes it in the background on the session's runtime.
    pub(crate) fn spawn_now(&self, future: impl Future<Output = ()> + Send + 'static) {
        spawn_now(&self.runtime, future);
    }
}

/// Polls `future` once right here, so the ZooKeeper requests it makes first are sent now, and
/// spawns the rest on `runtime` (a runtime that has shut down drops it without panicking).
pub(crate) fn spawn_now(runtime: &Handle, future: impl Future<Output = ()> + Send + 'static) {
    let mut future = Box::pin(future);
    if future.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending() {
        drop(runtime.spawn(future));
    }
}

type Renewal = Pin<Box<dyn Future<Output = (Instant, std::result::Result<Option<zk::Stat>, zk::Error>)> + Send>>;

fn start_renewal(session: &Arc<Session>) -> Renewal {
    let session = session.clone();
    Box::pin(async move {
        let sent_at = Instant::now();
        let outcome = session.client.check_stat(&session.config.root).await;
        (sent_at, outcome)
    })
}

async fn next_renewal(renewal: &mut Option<Renewal>) -> (Instant, std::result::Result<Option<zk::Stat>, zk::Error>) {
    match renewal.as_mut() {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

/// The session task: follows the session state and renews the holds every third of the
/// session timeout. Ends with the session, or when the session is dropped.
async fn watch_session(session: Weak<Session>, mut states: zk::StateWatcher) {
    let Some((every, policy, id)) =
        session.upgrade().map(|s| (s.timeout / 3, s.config.disconnect_policy, s.client.session_id().to_string()))
    else {
        return;
    };
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut connected = true;
    let mut renewal: Option<Renewal> = None;
    loop {
        tokio::select! {
            state = states.changed() => {
                let Some(session) = session.upgrade() else { return };
                tracing::debug!(backend = BACKEND, session = %id, ?state, "zk session state");
                match state {
                    zk::SessionState::Disconnected => {
                        connected = false;
                        renewal = None;
                        if policy == DisconnectPolicy::LoseOnDisconnect {
                            session.lose_all(&LossReason::ConnectionLost);
                        }
                    }
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                        connected = true;
                        if session.hold_count() > 0 {
                            renewal = Some(start_renewal(&session));
                        }
                    }
                    terminal => {
                        if terminal.is_terminated() {
                            session.lose_all(&crate::error::loss_for_state(terminal));
                            return;
                        }
                    }
                }
            }
            _ = ticks.tick() => {
                let Some(session) = session.upgrade() else { return };
                if session.is_ended() {
                    session.lose_all(&crate::error::loss_for_state(session.client.state()));
                    return;
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
