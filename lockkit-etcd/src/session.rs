//! One lease per provider, kept alive by one task (the watchdog), with the signals of every
//! hold bound to it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use lockkit_core::backend::{HoldSignal, lease_deadline};
use lockkit_core::{LossReason, Result};
use tokio::runtime::Handle;

use crate::config::EtcdConfig;
use crate::error::connect_error;
use crate::watch::LockWatches;

/// How long the watchdog pauses before opening its keep-alive stream again after an error.
const RETRY: Duration = Duration::from_millis(100);

/// A client, its lease and the holds bound to it.
pub(crate) struct Session {
    pub(crate) client: Client,
    pub(crate) lease: i64,
    pub(crate) ttl: Duration,
    drift: Duration,
    /// The watches of the locks this session's waits and holds use, on one stream.
    pub(crate) keys: Arc<LockWatches>,
    /// The runtime the client's connections and the watchdog run on.
    pub(crate) runtime: Handle,
    state: Mutex<State>,
    /// Cleared when the watchdog task is dropped (its runtime shut down) or ends.
    watchdog_alive: Arc<AtomicBool>,
}

struct State {
    valid_until: Instant,
    ended: Option<LossReason>,
    next_id: u64,
    holds: HashMap<u64, HoldSignal>,
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
    /// Connects, grants the lease and starts its watchdog on the current runtime.
    pub(crate) async fn open(config: &EtcdConfig) -> Result<Arc<Session>> {
        let mut options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_timeout(config.connect_timeout)
            .with_keep_alive(Duration::from_secs(1).min(config.ttl / 4), config.connect_timeout);
        if let Some((user, password)) = &config.credentials {
            options = options.with_user(user.clone(), password.clone());
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
        let keys = Arc::new(LockWatches::new(client.clone(), &config.prefix, config.connect_timeout));
        let session = Arc::new(Session {
            keys,
            client,
            lease,
            ttl,
            drift: config.drift,
            runtime: Handle::current(),
            state: Mutex::new(State {
                valid_until: lease_deadline(sent, ttl, config.drift),
                ended: None,
                next_id: 0,
                holds: HashMap::new(),
            }),
            watchdog_alive: Arc::clone(&alive),
        });
        tokio::spawn(watchdog(Arc::downgrade(&session), keeper, stream, AliveFlag(alive)));
        Ok(session)
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

    /// Binds `signal` to the lease: renewals extend it, the end of the lease loses it. `None`
    /// (and the signal lost) when the lease has ended already.
    pub(crate) fn register(&self, signal: &HoldSignal) -> Option<u64> {
        let mut state = self.state();
        if let Some(reason) = state.ended.clone() {
            drop(state);
            signal.lose(reason);
            return None;
        }
        let id = state.next_id;
        state.next_id += 1;
        state.holds.insert(id, signal.clone());
        Some(id)
    }

    /// Unbinds a hold that was released.
    pub(crate) fn unregister(&self, id: Option<u64>) {
        if let Some(id) = id {
            self.state().holds.remove(&id);
        }
    }

    fn renewed(&self, valid_until: Instant) {
        let signals: Vec<HoldSignal> = {
            let mut state = self.state();
            state.valid_until = state.valid_until.max(valid_until);
            state.holds.values().cloned().collect()
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
            state.holds.drain().map(|(_, signal)| signal).collect()
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
                    if let Ok(Ok((k, st))) =
                        tokio::time::timeout_at(until.into(), client.lease_keep_alive(s.lease)).await
                    {
                        keeper = k;
                        stream = st;
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
