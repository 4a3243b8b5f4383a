//! The backend behind a [`ZkLockProvider`](crate::ZkLockProvider): its configuration, its
//! current session (opened lazily, and again after it ended), and the [`LockBackend`] seam.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lockkit_core::backend::{
    AcquireRequest, Backoff, Deadline, Grant, HolderInfo, LeaderEvents, LockBackend, LockInfo, OwnerMeta,
};
use lockkit_core::{Capabilities, Error, FencingToken, LockName, Result};
use tracing::Instrument;
use zookeeper_client as zk;

use crate::client::ZkBackend;
use crate::error::{BACKEND, Failure, is_loss};
use crate::held::RETRIES;
use crate::names::{Contender, NodeKind, queue};
use crate::record::{created_at, term_began_at};
use crate::session::Session;
use crate::{judge, record};

/// The first pause before an acquisition tries again after a connection failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// The longest pause between two tries of an acquisition after connection failures.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

impl ZkBackend {
    /// Runs acquisition attempts until one is granted, refused or fails for good. A
    /// connection failure (no server answers, the session expired or went with its runtime)
    /// is retried, with a growing pause, while the acquisition may wait: until its deadline,
    /// or for one session timeout after the failures began when it waits without one. Each
    /// such failure is noted on the request, so that a timeout says the store was unreachable.
    async fn acquire_retrying(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        let mut failing_since: Option<Instant> = None;
        let mut round = 0_u32;
        loop {
            let mut reached = false;
            let error = match self.acquire_once(request, round, &mut reached).await {
                Err(error) if error.is_retryable() => error,
                other => return other,
            };
            round = round.saturating_add(1);
            let now = Instant::now();
            if reached {
                failing_since = None;
                backoff.reset();
            }
            let since = *failing_since.get_or_insert(now);
            let until = match request.deadline {
                Deadline::Now => return Err(error),
                Deadline::At(at) => at,
                Deadline::Never => lockkit_core::backend::deadline_after(since, self.config.session_timeout),
            };
            if now >= until {
                if matches!(request.deadline, Deadline::Never) {
                    return Err(error);
                }
                // Not granted in time: the core makes it a timeout that carries the failure.
                request.note_failure(error);
                return Ok(None);
            }
            let pause = backoff.next_delay();
            tracing::debug!(backend = BACKEND, %error, ?pause, "acquisition failed; trying again while it may wait");
            request.note_failure(error);
            tokio::time::sleep_until(until.min(lockkit_core::backend::deadline_after(now, pause)).into()).await;
        }
    }

    /// The session for one acquisition attempt. While a new session is being opened, the
    /// acquisition counts the store as unreachable, so that a deadline passing meanwhile gives
    /// a timeout that says so; once a server answered, it does not.
    async fn attempt_session(&self, request: &AcquireRequest, reached: &mut bool) -> Result<Arc<Session>> {
        if let Some(live) = self.live() {
            return Ok(live);
        }
        request.note_failure(
            Error::connection(BACKEND, Some(&request.lock), Failure::NoAnswerYet).with_context("open a session"),
        );
        let session = self.session(Some(&request.lock)).await?;
        *reached = true;
        request.note_reached();
        Ok(session)
    }

    /// One acquisition attempt on the live session (see the recipe module).
    async fn acquire_once(&self, request: &AcquireRequest, round: u32, reached: &mut bool) -> Result<Option<Grant>> {
        let session = self.attempt_session(request, reached).await?;
        // A later round gets a node name of its own, never mistaken for an earlier round's
        // node that is still being deleted.
        let attempt = if round == 0 { request.attempt } else { uuid::Uuid::new_v4() };
        self.acquire_in(&session, request, attempt, reached).await
    }
}

/// A holder as its node tells: the owner line of its data, else its attempt id and creation
/// time. A candidate's term began, as the store knows it, when its node came to lead: its
/// `since` is [`term_began_at`] (the server's clock), as [`observe`](LockBackend::observe) says.
fn describe(contender: &Contender, data: &[u8], stat: &zk::Stat) -> HolderInfo {
    let token = FencingToken::new(u64::try_from(stat.czxid).unwrap_or(0));
    let since = if contender.kind == NodeKind::Candidate { term_began_at(stat) } else { created_at(stat) };
    let holder = match std::str::from_utf8(data).ok().and_then(OwnerMeta::decode) {
        Some(meta) if contender.kind != NodeKind::Candidate => return meta.holder(token),
        Some(meta) => meta.holder(token),
        None => HolderInfo::new(token, contender.attempt.to_string()),
    };
    match since {
        Some(since) => holder.with_since(since),
        None => holder,
    }
}

impl ZkBackend {
    /// The nodes that hold `lock` now, with their paths and what they say of their holders,
    /// and how many nodes wait: what [`inspect`](LockBackend::inspect) shows and
    /// [`break_lock`](LockBackend::break_lock) deletes.
    async fn holding(&self, session: &Session, lock: &LockName) -> Result<(Vec<(String, HolderInfo)>, usize)> {
        let parent = self.config.lock_path(lock);
        'look: for _ in 0..RETRIES {
            let (children, _) = self.list(session, lock, &parent).await?;
            let queue = queue(&children);
            let Some(head) = queue.first() else { return Ok((Vec::new(), 0)) };
            // The nodes that hold: those the recipe grants, where a write node first in the
            // queue may have been downgraded to a read, which its data says (read first).
            let head_path = format!("{parent}/{}", head.name);
            let mut head_data = None;
            if head.kind == NodeKind::Write {
                match session.client.get_data(&head_path).await {
                    Ok(found) => head_data = Some(found),
                    Err(zk::Error::NoNode) => continue,
                    Err(ref error) if is_loss(error) => continue,
                    Err(error) => return Err(session.error(error, Some(lock))),
                }
            }
            let head_is_read = head_data.as_ref().is_some_and(|(data, _)| record::says_read(data));
            let holding: Vec<&Contender> = (0..queue.len())
                .filter(|&i| judge::holds(&queue, i, head_is_read))
                .filter_map(|i| queue.get(i))
                .collect();
            // Every holder's data in one round trip (the head's is known when it was read).
            let reads: Vec<_> = holding
                .iter()
                .map(|c| {
                    let known = (c.name == head.name).then(|| head_data.take()).flatten();
                    let read = known.is_none().then(|| session.client.get_data(&format!("{parent}/{}", c.name)));
                    (c, read, known)
                })
                .collect();
            let mut holders = Vec::with_capacity(reads.len());
            for (contender, read, known) in reads {
                let (data, stat) = match (known, read) {
                    (Some(found), _) => found,
                    (None, Some(read)) => match read.await {
                        Ok(found) => found,
                        // Gone meanwhile: look again.
                        Err(zk::Error::NoNode) => continue 'look,
                        Err(ref error) if is_loss(error) => continue 'look,
                        Err(error) => return Err(session.error(error, Some(lock))),
                    },
                    (None, None) => continue 'look,
                };
                let holder = describe(contender, &data, &stat).with_kind(contender.kind.hold_kind(&data));
                holders.push((format!("{parent}/{}", contender.name), holder));
            }
            let waiters = queue.len() - holders.len();
            return Ok((holders, waiters));
        }
        Err(Error::connection(BACKEND, Some(lock), Failure::QueueKeptChanging).with_context("inspect the lock"))
    }
}

#[async_trait]
impl LockBackend for ZkBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    // ZooKeeper keeps every guarantee lockkit names: the conformance kit checks each flag,
    // including one the core adds later.
    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    fn renewal_interval(&self) -> Option<Duration> {
        // The session task renews every hold every third of the session timeout.
        Some(self.config.session_timeout / 3)
    }

    fn address(&self) -> Option<String> {
        Some(self.config.address())
    }

    /// `zk://hosts/chroot/base`: the servers and the znode under which every lock lives.
    fn store_identity(&self) -> Option<String> {
        let address = format!("zk://{}{}", self.config.connect_string(), self.config.root);
        lockkit_core::config::StoreUrl::parse(&address).ok().map(|url| url.identity(&[]))
    }

    async fn acquire(&self, request: AcquireRequest) -> Result<Option<Grant>> {
        let span = tracing::debug_span!("lockkit.zk.acquire", lock = %request.lock, attempt = %request.attempt);
        self.acquire_retrying(&request).instrument(span).await
    }

    async fn inspect(&self, lock: &LockName) -> Result<LockInfo> {
        let session = self.session(Some(lock)).await?;
        let (holders, waiters) = self.holding(&session, lock).await?;
        Ok(LockInfo::new(holders.into_iter().map(|(_, holder)| holder).collect(), Some(waiters)))
    }

    async fn break_lock(&self, lock: &LockName) -> Result<Vec<HolderInfo>> {
        let session = self.session(Some(lock)).await?;
        let (holders, _) = self.holding(&session, lock).await?;
        // Every holder's node at once: each deletion fires the holder's deletion watch (its
        // guard reports RecordGone) and the watches of the waiters behind it.
        let deletes: Vec<_> = holders.iter().map(|(path, _)| session.client.delete(path, None)).collect();
        let mut broken = Vec::with_capacity(holders.len());
        for ((path, holder), delete) in holders.into_iter().zip(deletes) {
            match delete.await {
                Ok(()) => broken.push(holder),
                // Released (or broken by someone else) meanwhile: nothing of ours to report.
                Err(zk::Error::NoNode) => {}
                Err(error) => {
                    return Err(session.error(error, Some(lock)).with_context(format!(
                        "break the lock: delete {path} (needs the DELETE permission on its parent)"
                    )));
                }
            }
        }
        Ok(broken)
    }

    fn observe(&self, lock: &LockName) -> Result<LeaderEvents> {
        // `self` is borrowed from the provider's `Arc`, so this always upgrades.
        let Some(backend) = self.me.upgrade() else {
            return Err(Error::connection(BACKEND, Some(lock), Failure::RuntimeGone));
        };
        Ok(crate::observe::observe(backend, lock.clone()))
    }
}
