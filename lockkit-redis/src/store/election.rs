//! What the scripts tell of a lock and its election: inspect and break (the holders), and
//! observe (the leader, and the changes of leader since a stream id), with a candidate's
//! identity carried in its owner id.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::backend::{HolderInfo, LockInfo, OwnerMeta};
use lockkit_core::{Error, FencingToken, LockName, Result};
use redis::Value;

use super::connection::Store;
use super::kinds::{Kind, candidate_identity};
use super::scripts::{BREAK, INSPECT, OBSERVE, ScriptCall};
use crate::BACKEND;
use crate::error::Failure;
use crate::keys::LockKeys;

impl Store {
    /// Reads the holders of a name (of every kind) and, for a fair provider
    /// (`count_waiters`), the number of waiters in its queue.
    pub(crate) async fn inspect(&self, lock: &LockName, keys: &LockKeys, count_waiters: bool) -> Result<LockInfo> {
        let reply: Vec<Value> = self
            .run(Some(lock), |mut connection| async move {
                ScriptCall::queue(&INSPECT, keys.view(), keys.record(), false).invoke(&mut connection).await
            })
            .await?;
        holders_reply(lock, &reply, count_waiters, "the inspect script")
    }

    /// Breaks every hold of a name (see `break.lua`) and returns the holds broken.
    pub(crate) async fn break_lock(&self, lock: &LockName, keys: &LockKeys) -> Result<Vec<HolderInfo>> {
        let reply: Vec<Value> = self
            .run(Some(lock), |mut connection| async move {
                ScriptCall::queue(&BREAK, keys.view(), keys.record(), false)
                    .arg(self.claim_ms)
                    .invoke(&mut connection)
                    .await
            })
            .await?;
        let broken = holders_reply(lock, &reply, false, "the break script")?.holders;
        if self.replicas > 0 && !broken.is_empty() {
            // As a grant does: a break the replicas missed could be undone by a failover.
            self.replicated_as(lock, keys, "the break").await?;
        }
        Ok(broken)
    }

    /// Runs the observe script for an observer of the election of `keys` that has seen the
    /// journal up to entry `seen` (none yet: `None`).
    pub(crate) async fn observe(&self, lock: &LockName, keys: &LockKeys, seen: Option<&str>) -> Result<Observed> {
        let reply: Vec<Value> = self
            .run(Some(lock), |mut connection| async move {
                ScriptCall::queue(&OBSERVE, keys.view(), keys.record(), false)
                    .arg(seen.unwrap_or(""))
                    .arg(self.claim_ms)
                    .invoke(&mut connection)
                    .await
            })
            .await?;
        Observed::parse(&reply).ok_or_else(|| {
            Error::backend(
                BACKEND,
                Some(lock),
                Failure::UnexpectedReply { command: "the observe script", reply: format!("{reply:?}") },
            )
        })
    }
}

/// Reads what the inspect and break scripts return: `[waiters, permits, since, (kind, owner,
/// ms left, token)...]`; the waiter count only when `count_waiters` (a fair provider).
pub(super) fn holders_reply(
    lock: &LockName,
    reply: &[Value],
    count_waiters: bool,
    command: &'static str,
) -> Result<LockInfo> {
    let unexpected = || {
        Error::backend(
            BACKEND,
            Some(lock),
            Failure::UnexpectedReply {
                command,
                reply: format!("{reply:?} instead of [waiters, permits, since, (kind, owner, ms left, token)...]"),
            },
        )
    };
    let [waiters, count, since, holders @ ..] = reply else { return Err(unexpected()) };
    if holders.len() % 4 != 0 {
        return Err(unexpected());
    }
    let number = |value: &Value| redis::from_redis_value_ref::<i64>(value).ok();
    let text = |value: &Value| redis::from_redis_value_ref::<String>(value).ok();
    let waiters = number(waiters).and_then(|n| usize::try_from(n).ok()).filter(|_| count_waiters);
    let count = number(count).and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
    // When the holder of the mutex record was granted it, in server time (elections).
    let since = number(since).and_then(|ms| u64::try_from(ms).ok()).filter(|&ms| ms > 0).map(server_time);
    let holders = holders
        .chunks_exact(4)
        .map(|holder| {
            let [kind, owner, left, token] = holder else { return Err(unexpected()) };
            let owner = text(owner).unwrap_or_default();
            let token = FencingToken::new(text(token).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0));
            // Records written by lockkit carry who took them; anything else is shown as is.
            let mut info = match OwnerMeta::decode(&owner) {
                Some(meta) => meta.holder(token),
                None => HolderInfo::new(token, owner.clone()),
            };
            let letter = text(kind).unwrap_or_default();
            info = info.with_kind(Kind::hold_kind(&letter, &owner, count));
            if let (Some(since), "x") = (since, letter.as_str()) {
                info = info.with_since(since);
            }
            if let Some(left) = number(left).and_then(|left| u64::try_from(left).ok()) {
                info = info.with_lease_left(Duration::from_millis(left));
            }
            Ok(info)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(LockInfo::new(holders, waiters))
}
/// A time the server gave in milliseconds since the epoch.
pub(super) fn server_time(ms: u64) -> std::time::SystemTime {
    std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}
/// A leader as the journal or the record tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Term {
    pub(crate) term: FencingToken,
    pub(crate) identity: Arc<[u8]>,
    pub(crate) since: Option<std::time::SystemTime>,
}
impl Term {
    /// The leader of owner id `owner` for `term`, granted at server ms `since` (0: unknown);
    /// `None` when the owner is no candidate's.
    pub(super) fn new(owner: &str, term: i64, since: i64) -> Option<Self> {
        let identity = candidate_identity(owner)?;
        let since = u64::try_from(since).ok().filter(|&ms| ms > 0).map(server_time);
        Some(Self { term: FencingToken::new(u64::try_from(term).ok()?), identity, since })
    }
}
/// One change in the journal of an election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    Elected(Term),
    /// The leader of this term no longer leads.
    Vacant(FencingToken),
}
/// What the observe script read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Observed {
    /// The current state rather than the changes since the entry the observer saw: its first
    /// read, or the entry is gone (trimmed, or the journal with it).
    pub(crate) restart: bool,
    /// The id of the last entry read (`None`: the journal is empty).
    pub(crate) last_id: Option<String>,
    /// How long the current leader's record lives, when somebody leads.
    pub(crate) leader_ttl: Option<Duration>,
    /// For a restart: the current leader, if any.
    pub(crate) leader: Option<Term>,
    /// Otherwise: the changes since the entry the observer saw, in journal order.
    pub(crate) changes: Vec<Change>,
}
impl Observed {
    pub(super) fn parse(reply: &[Value]) -> Option<Self> {
        let number = |value: &Value| redis::from_redis_value_ref::<i64>(value).ok();
        let text = |value: &Value| redis::from_redis_value_ref::<String>(value).ok();
        let [status, last_id, ttl, owner, term, since, entries @ ..] = reply else { return None };
        let last_id = text(last_id)?;
        let restart = number(status)? == 1;
        let mut changes = Vec::new();
        if entries.len() % 5 != 0 {
            return None;
        }
        for entry in entries.chunks_exact(5) {
            let [_, kind, term, owner, since] = entry else { return None };
            let term_number = number(term)?;
            match text(kind)?.as_str() {
                "e" => changes.extend(Term::new(&text(owner)?, term_number, number(since)?).map(Change::Elected)),
                "v" => changes.push(Change::Vacant(FencingToken::new(u64::try_from(term_number).ok()?))),
                _ => {}
            }
        }
        Some(Self {
            restart,
            last_id: (!last_id.is_empty()).then_some(last_id),
            leader_ttl: u64::try_from(number(ttl)?).ok().map(Duration::from_millis),
            leader: Term::new(&text(owner)?, number(term)?, number(since)?),
            changes,
        })
    }
}
