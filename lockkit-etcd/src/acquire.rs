//! One try of an acquisition: put the own key if absent, find its place in the queue, wait
//! for the keys ahead of it (through the lock's shared watch), and grant it. The loop of tries
//! is [`LockBackend::acquire`](lockkit_core::backend::LockBackend::acquire) in backend.rs.

use std::sync::{Arc, Mutex};

use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};
use lockkit_core::backend::{AcquireRequest, Deadline, Grant, HoldSignal};
use lockkit_core::{Error, FencingToken, LockName, LossReason, Result};

use crate::BACKEND;
use crate::client::{EtcdBackend, in_queue_order, send_txn};
use crate::error::unreachable;
use crate::held::EtcdHeld;
use crate::pending::{Pending, forget_void};
use crate::queue::{Entry, KeyKind, Verdict, Wait, may_be_granted};
use crate::session::Session;
use crate::watch::{KeyNotice, Registration, WATCH_DENIED};

/// What one try of an acquisition came to.
pub(crate) enum Try {
    Granted(Grant),
    Refused,
    /// The own key went (its lease ended) while waiting: start again with a new key.
    Vanished,
    /// The key's name holds another acquisition's key (never expected: a slot is reused only
    /// once its key is gone): start again under another name.
    Taken,
    /// etcd refused the put for the client's authentication token, which is renewed now: send
    /// it again at once (it was not applied).
    Again,
}

/// How a wait for the keys ahead ended.
enum Waited {
    /// The acquisition's deadline came first.
    DeadlinePassed,
    /// What was watched changed (or the safety net fired, or the lock's watch ended): read
    /// the queue again.
    Changed,
}

/// What sending a try's transaction came to.
enum Put {
    /// etcd answered: the put was made or refused, and the queue read.
    Answered(TxnResponse),
    /// The try is over without an answer to go on with.
    Over(Try),
}

/// Where the own key stands in the queue.
enum Placed {
    /// It is this try's, created at this revision.
    At(i64),
    /// It is not (not put, another's, on an ended lease): the try comes to this.
    Over(Try),
}

/// A registration with the lock's watch and the revision the watch hears changes from.
struct Registered {
    registration: Registration,
    from_revision: i64,
}

/// The queue a try's transaction read (its one `Get`). `op_responses` copies the replies
/// once; the queue is taken out of that copy.
fn queue_of(reply: TxnResponse) -> Vec<KeyValue> {
    reply
        .op_responses()
        .into_iter()
        .find_map(|op| match op {
            TxnOpResponse::Get(mut get) => Some(get.take_kvs()),
            _ => None,
        })
        .unwrap_or_default()
}

impl EtcdBackend {
    /// One try: put the own key if absent, then wait until the keys created before it allow
    /// its kind to be granted (see the queue module): [`put_own_key`](Self::put_own_key),
    /// [`own_place`](Self::own_place), then [`wait_turn`](Self::wait_turn).
    pub(crate) async fn try_once(&self, request: &AcquireRequest, pending: &mut Pending) -> Result<Try> {
        let session = self.session().await?;
        pending.session = Some(Arc::clone(&session));
        let kind = KeyKind::of(&request.kind);
        // The owner line with the kind's field, and a candidate's identity (election.rs).
        let value = crate::election::with_identity(kind.value(&pending.owner), &request.kind);
        let reply = match self.put_own_key(request, pending, &session, &kind, &value).await? {
            Put::Answered(reply) => reply,
            Put::Over(outcome) => return Ok(outcome),
        };
        request.note_reached();
        let read_revision = reply.header().map_or(0, etcd_client::ResponseHeader::revision);
        let kvs = queue_of(reply);
        let all: Vec<Entry> = kvs.iter().map(Entry::of).collect();
        let rev = match self.own_place(&request.lock, pending, &session, &kind, &value, &kvs, &all).await? {
            Placed::At(rev) => rev,
            Placed::Over(outcome) => return Ok(outcome),
        };
        let ahead: Vec<Entry> = all.into_iter().filter(|entry| entry.create_revision < rev).collect();
        self.wait_turn(request, pending, &session, kind, rev, ahead, read_revision).await
    }

    /// The transaction of a try: put the own key if absent (with no wait allowed, for a kind
    /// that excludes every other, only if nobody is there) and read the queue; refused for an
    /// attempt that was given up.
    fn put_txn(
        &self,
        request: &AcquireRequest,
        pending: &Pending,
        session: &Session,
        kind: &KeyKind,
        value: &str,
    ) -> Txn {
        let prefix = self.config.lock_prefix(&request.lock);
        let key = pending.key.clone();
        let put = TxnOp::put(key.clone(), value, Some(PutOptions::new().with_lease(session.lease)));
        // The queue, read after the put, holds the own key (or the one an earlier try put).
        let queue = TxnOp::get(prefix.clone(), Some(in_queue_order()));
        // With no wait allowed, a lock's key is put only when nobody is there: one round trip,
        // no trace. A reader or a permit may be granted beside others, so it puts its key and
        // deletes it again when it is refused.
        let exclusive = matches!(kind, KeyKind::Exclusive | KeyKind::Write | KeyKind::Candidate);
        let condition = match request.deadline {
            Deadline::Now if exclusive => Compare::create_revision(prefix, CompareOp::Equal, 0).with_prefix(),
            Deadline::Now | Deadline::At(_) | Deadline::Never => Compare::create_revision(key, CompareOp::Equal, 0),
        };
        // A try of an attempt that was given up is refused: the void key (see Pending::give_up).
        let not_void = Compare::version(pending.void_key.clone(), CompareOp::Equal, 0);
        Txn::new().when([condition, not_void]).and_then([put, queue.clone()]).or_else([queue])
    }

    /// Sends the try's transaction ([`put_txn`](Self::put_txn)), keeping `pending`'s account
    /// of whether a put may have been sent and whether one is in doubt.
    async fn put_own_key(
        &self,
        request: &AcquireRequest,
        pending: &mut Pending,
        session: &Session,
        kind: &KeyKind,
        value: &str,
    ) -> Result<Put> {
        let lock = &request.lock;
        let txn = self.put_txn(request, pending, session, kind, value);
        let mut client = session.kv.clone();
        let sent_before = std::mem::replace(&mut pending.sent, true);
        // Until the reply comes, the put is in doubt: an acquisition cancelled now gives up in
        // the background with a delete that etcd may apply before the put still on its way (two
        // streams of one connection are served concurrently), so its give-up must void the
        // attempt too, or the late put leaves a key bound to the provider's lease.
        let doubt_before = std::mem::replace(&mut pending.doubt, true);
        match tokio::time::timeout(self.config.connect_timeout, client.txn(txn)).await {
            Ok(Ok(reply)) => {
                pending.doubt = doubt_before;
                Ok(Put::Answered(reply))
            }
            Ok(Err(error)) if is_lease_gone(&error) => {
                // Revoked or expired before the watchdog noticed: end it, and try on a new one.
                session.end(LossReason::SessionExpired);
                pending.sent = false;
                pending.doubt = doubt_before;
                Ok(Put::Over(Try::Vanished))
            }
            Ok(Err(error)) if session.token_refused(&error) => {
                // Refused before it was proposed: as if never sent.
                pending.sent = sent_before;
                pending.doubt = doubt_before;
                if session.renew_token().await {
                    return Ok(Put::Over(Try::Again));
                }
                Err(self.error(error, lock))
            }
            Ok(Err(error)) => {
                pending.doubt = true;
                Err(self.error(error, lock))
            }
            Err(_) => {
                pending.doubt = true;
                Err(unreachable(&self.config, Some(lock)))
            }
        }
    }

    /// Finds the own key in the queue read with the put (`kvs`, as entries `all`): its create
    /// revision, or what the try comes to when it is not there as this try's.
    #[allow(clippy::too_many_arguments)]
    async fn own_place(
        &self,
        lock: &LockName,
        pending: &mut Pending,
        session: &Session,
        kind: &KeyKind,
        value: &str,
        kvs: &[KeyValue],
        all: &[Entry],
    ) -> Result<Placed> {
        let key = pending.key.clone();
        let Some(own) = kvs.iter().find(|kv| kv.key() == key.as_bytes()) else {
            // Not put (someone is there and no wait is allowed), and no earlier try of ours put
            // it: a lock of another use of the name is a conflict, anything else a refusal.
            pending.sent = false;
            if let Verdict::Conflict(what) = may_be_granted(kind, all) {
                return Err(Error::conflict(BACKEND, Some(lock), what));
            }
            return Ok(Placed::Over(Try::Refused));
        };
        let rev = own.create_revision();
        if own.value() != value.as_bytes() {
            tracing::warn!(backend = BACKEND, %key, "a key of the provider's holds another acquisition's value");
            pending.sent = false;
            return Ok(Placed::Over(Try::Taken));
        }
        if own.lease() != session.lease {
            // An earlier try put it on a lease that has ended since: it is going; start over.
            pending.delete_now(&self.config).await;
            return Ok(Placed::Over(Try::Vanished));
        }
        pending.revision = Some(rev);
        tracing::trace!(%key, rev, queue = all.len(), "put");
        Ok(Placed::At(rev))
    }

    /// Waits until the keys `ahead` of the own key (created at `rev`) allow its kind, reading
    /// them again after every change, and grants it then.
    ///
    /// The wait registers the keys it waits for with the watch of the lock's prefix, which
    /// this provider's waits and holds of the lock share and keep (watch.rs): no watch is
    /// created on a wait's path once the lock's watch exists. The watch hears every change
    /// after the revision it was created at; when that is later than the last read of the
    /// queue, the queue is read again first, so that nothing between is missed.
    #[allow(clippy::too_many_arguments)]
    async fn wait_turn(
        &self,
        request: &AcquireRequest,
        pending: &mut Pending,
        session: &Arc<Session>,
        kind: KeyKind,
        rev: i64,
        mut ahead: Vec<Entry>,
        mut read_revision: i64,
    ) -> Result<Try> {
        let lock = &request.lock;
        let prefix = self.config.lock_prefix(lock);
        let key = pending.key.clone();
        let mut registration: Option<Registration> = None;
        loop {
            let wait = match may_be_granted(&kind, &ahead) {
                Verdict::Holds => {
                    let voided = self.void_late_puts(session, pending).await;
                    return Ok(Try::Granted(self.grant(request, session, pending, rev, kind, voided)));
                }
                Verdict::Conflict(what) => {
                    tracing::debug!(backend = BACKEND, %lock, %what, "the name is in use otherwise");
                    pending.give_up(&self.config).await;
                    return Err(Error::conflict(BACKEND, Some(lock), what));
                }
                Verdict::Waits(wait) => wait,
            };
            if request.deadline == Deadline::Now {
                pending.give_up(&self.config).await;
                return Ok(Try::Refused);
            }
            let mut registered =
                self.register(session, &prefix, &wait, registration.take(), read_revision, lock).await?;
            if registered.from_revision <= read_revision {
                tracing::trace!(%key, "waiting");
                match self.wait(&mut registered.registration, wait, read_revision, session, request.deadline).await {
                    Waited::DeadlinePassed => {
                        pending.give_up(&self.config).await;
                        return Ok(Try::Refused);
                    }
                    Waited::Changed => {}
                }
            }
            registration = Some(registered.registration);
            let reply = match self.read_ahead(request, pending, session, &kind, rev).await? {
                Some(reply) => reply,
                None => {
                    pending.sent = false;
                    return Ok(Try::Vanished);
                }
            };
            read_revision = reply.header().map_or(read_revision, etcd_client::ResponseHeader::revision);
            ahead = reply
                .op_responses()
                .into_iter()
                .filter_map(|op| match op {
                    TxnOpResponse::Get(get) => Some(get.kvs().iter().map(Entry::of).collect()),
                    _ => None,
                })
                .next_back()
                .unwrap_or_default();
            tracing::trace!(%key, ahead = ahead.len(), "read the keys ahead");
        }
    }

    /// The registration of the keys `wait` names with the lock's watch: `kept` when it names
    /// the same keys and lives, else a new one; and the revision the watch hears changes from.
    async fn register(
        &self,
        session: &Session,
        prefix: &str,
        wait: &Wait,
        kept: Option<Registration>,
        read_revision: i64,
        lock: &LockName,
    ) -> Result<Registered> {
        let (keys, puts) = match wait {
            Wait::Key { key, or_put } => (vec![key.clone()], *or_put),
            Wait::Deletions { keys, .. } => (keys.clone(), false),
        };
        let registration = match kept {
            Some(registration)
                if registration.keys() == keys.as_slice() && registration.puts() == puts && !registration.ended() =>
            {
                registration
            }
            _ => session.keys.register(prefix, keys, read_revision, puts),
        };
        match registration.from().await {
            Ok(from_revision) => Ok(Registered { registration, from_revision }),
            Err(reason) => {
                if reason.contains(WATCH_DENIED) {
                    // The stream's token may have expired (the watch hub opens a new
                    // stream with the current token): renew it first, then try again.
                    session.renew_token().await;
                }
                Err(Error::connection(BACKEND, Some(lock), format!("cannot watch the lock's keys: {reason}"))
                    .with_server(self.addr()))
            }
        }
    }

    /// Reads the keys ahead of the own key again, in a transaction that checks the own key is
    /// still ours (a grant is confirmed against the own key after every wait); `None` when it
    /// is gone. A candidate that comes to lead now (no key ahead) writes when in the same
    /// step: its value's `since` is then the start of its term, not of its campaign.
    async fn read_ahead(
        &self,
        request: &AcquireRequest,
        pending: &Pending,
        session: &Session,
        kind: &KeyKind,
        rev: i64,
    ) -> Result<Option<TxnResponse>> {
        let lock = &request.lock;
        let prefix = self.config.lock_prefix(lock);
        let key = pending.key.clone();
        let read_ahead = TxnOp::get(prefix.clone(), Some(in_queue_order().with_max_create_revision(rev - 1)));
        let ours = Compare::create_revision(key.clone(), CompareOp::Equal, rev);
        if *kind == KeyKind::Candidate {
            let first = Compare::create_revision(prefix, CompareOp::Greater, rev - 1).with_prefix();
            let value = crate::election::with_identity(
                kind.value(&crate::election::leading_now(&pending.owner)),
                &request.kind,
            );
            let lead = TxnOp::put(key.clone(), value, Some(PutOptions::new().with_lease(session.lease)));
            let own = TxnOp::get(key, None);
            let txn = Txn::new().when([ours, first]).and_then([lead, read_ahead.clone()]).or_else([own, read_ahead]);
            let reply = self.txn(session, txn, lock).await?;
            let own_gone = !reply.succeeded()
                && reply.op_responses().first().is_none_or(|op| {
                    !matches!(op, TxnOpResponse::Get(get) if get.kvs().first().is_some_and(|kv| kv.create_revision() == rev))
                });
            Ok((!own_gone).then_some(reply))
        } else {
            let reply = self.txn(session, Txn::new().when([ours]).and_then([read_ahead]), lock).await?;
            Ok(reply.succeeded().then_some(reply))
        }
    }

    /// Waits on `registration` for what `wait` names, among the changes after revision
    /// `after` (the last read of the queue), until the deadline.
    async fn wait(
        &self,
        registration: &mut Registration,
        wait: Wait,
        after: i64,
        session: &Session,
        deadline: Deadline,
    ) -> Waited {
        // A permit waiter counts the deletions of the keys ahead of it that it read, and
        // ignores the others (no request per deletion).
        let (mut deletions, or_put) = match wait {
            Wait::Key { or_put, .. } => (1, or_put),
            Wait::Deletions { deletions, .. } => (deletions, false),
        };
        // A safety net only: the key's lease bounds how long it can outlive its owner.
        let wake = tokio::time::sleep(session.ttl);
        tokio::pin!(wake);
        loop {
            tokio::select! {
                notice = registration.next() => match notice {
                    KeyNotice::Ended => return Waited::Changed,
                    // Already in the queue read (a registration kept from an earlier wait).
                    KeyNotice::Changed { revision, .. } if revision <= after => {}
                    KeyNotice::Changed { deleted: false, .. } if or_put => return Waited::Changed,
                    KeyNotice::Changed { deleted: false, .. } => {}
                    KeyNotice::Changed { deleted: true, .. } => {
                        // A key put again by a retry of its attempt and deleted again counts
                        // twice: an early wake-up, which the read that follows corrects.
                        deletions = deletions.saturating_sub(1);
                        if deletions == 0 {
                            return Waited::Changed;
                        }
                    }
                },
                () = &mut wake => return Waited::Changed,
                () = sleep_until(deadline) => return Waited::DeadlinePassed,
            }
        }
    }

    /// Voids the attempt of `pending` when one of its tries had its reply lost (`doubt`): that
    /// try's put may still be on its way (held by the network, its cancellation not yet
    /// seen) and land after this hold's key is gone (released, broken, expired), creating a
    /// key nobody holds, bound to the provider's lease, which its other holds keep alive: an
    /// orphan that blocks the lock for as long as the provider lives. Every put of the attempt
    /// is conditioned on the void key's absence, so the late put is refused. True when there
    /// was nothing to void or the void key is written; false when it could not be, and the
    /// release writes it instead.
    async fn void_late_puts(&self, session: &Arc<Session>, pending: &Pending) -> bool {
        if !pending.doubt {
            return true;
        }
        let mut client = session.kv.clone();
        let put = TxnOp::put(pending.void_key.clone(), "", Some(PutOptions::new().with_lease(session.lease)));
        match send_txn(session, &mut client, Txn::new().and_then([put]), self.config.connect_timeout).await {
            Some(Ok(_)) => {
                tracing::debug!(backend = BACKEND, key = %pending.key, "voided the attempt's tries in doubt");
                lockkit_core::home::spawn(forget_void(Arc::clone(session), client, pending.void_key.clone()));
                true
            }
            _ => false,
        }
    }

    fn grant(
        &self,
        request: &AcquireRequest,
        session: &Arc<Session>,
        pending: &mut Pending,
        rev: i64,
        kind: KeyKind,
        voided: bool,
    ) -> Grant {
        tracing::trace!(key = %pending.key, rev, "granted");
        pending.armed = false;
        let signal = HoldSignal::new(BACKEND, request.lock.clone(), Some(session.valid_until()));
        // The session follows the key from now on (session.rs): a deletion behind the hold's
        // back is a loss, and a hold lost on its own has its key deleted; no task per hold.
        let key: Arc<str> = Arc::from(pending.key.as_str());
        let registered = session.register(&signal, &key, rev);
        let token = FencingToken::new(u64::try_from(rev).unwrap_or(0));
        let held = EtcdHeld {
            backend: self.me.clone(),
            backend_config: Arc::clone(&self.config),
            session: Arc::clone(session),
            lock: request.lock.clone(),
            key,
            revision: rev,
            read_value: (kind == KeyKind::Write).then(|| KeyKind::Read.value(&pending.owner)),
            void_key: (!voided).then(|| pending.void_key.clone()),
            registered,
            slot: Mutex::new(pending.slot.take()),
        };
        Grant::new(token, signal, Box::new(held))
    }
}

/// Whether etcd refused a request because the lease it names is gone.
fn is_lease_gone(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status)
        if status.code() == tonic::Code::NotFound && status.message().contains("lease not found"))
}

async fn sleep_until(deadline: Deadline) {
    match deadline {
        Deadline::At(at) => tokio::time::sleep_until(at.into()).await,
        Deadline::Now | Deadline::Never => std::future::pending().await,
    }
}
