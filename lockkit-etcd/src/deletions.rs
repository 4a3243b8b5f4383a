//! One watch of deletions on the provider's whole prefix, for a session with many holds
//! ([`PrefixWatch`]): while it is set, every deletion of a key under the prefix reaches the
//! session, which loses the hold of that key, so that the session no longer needs to list its
//! holds' keys after each keep-alive (a read of every hold's key, every third of the TTL).
//!
//! The watch runs on the session's shared watch stream (watch.rs). It sees every deletion
//! after the revision at which it was created; a hold granted before that is covered once a
//! listing of the holds' keys sent after the creation found it (session.rs keeps track with
//! the watch's [`generation`](PrefixWatch::generation)). When the watch ends (its stream broke,
//! a compaction) it is set again, and that generation needs a listing of its own. A hold whose
//! key was put before the watch's creation but that registers after that listing was sent
//! needs one more listing (the session compares its create revision with
//! [`created_at`](PrefixWatch::created_at)).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use etcd_client::{EventType, WatchFilterType, WatchOptions};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::watch::{Notice, Watches};

/// How long the task pauses before setting the watch again after it ended or failed.
const RETRY: Duration = Duration::from_millis(200);

/// The prefix watch of one session.
#[derive(Default)]
pub(crate) struct PrefixWatch {
    /// Set while a created watch runs.
    active: AtomicBool,
    /// Counts the watches created: each needs one listing of the holds' keys.
    generation: AtomicU64,
    /// The revision the latest watch was created at: it hears the deletions after it only.
    created_at: AtomicI64,
    /// Set while the task runs (the fast check of [`PrefixWatch::is_running`]).
    running: AtomicBool,
    task: Mutex<Option<JoinHandle<()>>>,
    /// Woken each time a watch is created.
    created: tokio::sync::Notify,
}

impl PrefixWatch {
    /// The generation of the watch while one is set: every deletion after its creation reaches
    /// the session.
    pub(crate) fn generation(&self) -> Option<u64> {
        // Read the generation after `active`: a watch set again meanwhile reads as a newer one.
        let active = self.active.load(Ordering::SeqCst);
        let generation = self.generation.load(Ordering::SeqCst);
        active.then_some(generation)
    }

    /// The revision the latest watch was created at (0 before the first): a deletion at or
    /// before it reached the session only if a listing sent after the creation saw it.
    pub(crate) fn created_at(&self) -> i64 {
        self.created_at.load(Ordering::SeqCst)
    }

    /// Waits until a watch is set; its generation.
    pub(crate) async fn created(&self) -> u64 {
        loop {
            let notified = self.created.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check, so that a creation between the two is not missed.
            notified.as_mut().enable();
            if let Some(generation) = self.generation() {
                return generation;
            }
            notified.await;
        }
    }

    pub(crate) fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// Starts following the deletions under `key` (the prefix, ending in `/`) on `runtime`,
    /// unless it runs already; `deleted` hears each deleted key with its revision.
    pub(crate) fn start(
        self: &Arc<Self>,
        runtime: &Handle,
        hub: Arc<Watches>,
        key: String,
        deleted: impl Fn(&str, i64) + Send + Sync + 'static,
    ) {
        let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        if task.is_some() {
            return;
        }
        self.running.store(true, Ordering::SeqCst);
        *task = Some(runtime.spawn(follow(Arc::downgrade(self), hub, key, deleted)));
    }

    /// Stops following (the session has few holds left): the watch is cancelled.
    pub(crate) fn stop(&self) {
        if let Some(task) = self.task.lock().unwrap_or_else(PoisonError::into_inner).take() {
            task.abort();
        }
        self.active.store(false, Ordering::SeqCst);
        self.running.store(false, Ordering::SeqCst);
    }
}

impl Drop for PrefixWatch {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sets the watch, hands every deletion it hears to `deleted`, and sets it again when it ends.
async fn follow(
    me: std::sync::Weak<PrefixWatch>,
    hub: Arc<Watches>,
    key: String,
    deleted: impl Fn(&str, i64) + Send + Sync + 'static,
) {
    loop {
        let options = WatchOptions::new().with_prefix().with_filters([WatchFilterType::NoPut]);
        match hub.subscribe(key.clone(), options).await {
            Ok(mut subscription) => match subscription.created().await {
                Ok(revision) => {
                    let Some(watch) = me.upgrade() else { return };
                    // Before the generation: a session that sees the new generation sees its
                    // revision too.
                    watch.created_at.store(revision, Ordering::SeqCst);
                    watch.generation.fetch_add(1, Ordering::SeqCst);
                    watch.active.store(true, Ordering::SeqCst);
                    watch.created.notify_waiters();
                    drop(watch);
                    tracing::debug!(backend = crate::BACKEND, %key, "watching the deletions of the whole prefix");
                    while let Notice::Events(events) = subscription.next().await {
                        for event in &events {
                            if event.event_type() == EventType::Delete
                                && let Some(kv) = event.kv()
                                && let Ok(key) = std::str::from_utf8(kv.key())
                            {
                                deleted(key, kv.mod_revision());
                            }
                        }
                    }
                    let Some(watch) = me.upgrade() else { return };
                    watch.active.store(false, Ordering::SeqCst);
                    tracing::debug!(backend = crate::BACKEND, %key, "the prefix watch ended; setting it again");
                }
                Err(error) => tracing::debug!(backend = crate::BACKEND, %key, %error, "the prefix watch was refused"),
            },
            Err(error) => tracing::debug!(backend = crate::BACKEND, %key, %error, "cannot set the prefix watch"),
        }
        tokio::time::sleep(RETRY).await;
    }
}
