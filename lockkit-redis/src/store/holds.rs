//! The scripts of one hold's life: acquire (with the wait queue and hand-overs), release,
//! downgrade, and abandon (an acquisition whose outcome is unknown).

use std::time::Duration;

use lockkit_core::{Error, FencingToken, LockName, Result};

use super::connection::Store;
use super::kinds::{AcquireReply, Conflict, Contender, Kind, Ownership, QueueMark, Queueing, Refusal};
use super::scripts::{ABANDON, ACQUIRE, DOWNGRADE, RELEASE, ScriptCall};
use crate::BACKEND;
use crate::error::Failure;
use crate::keys::{Keys, LockKeys};

impl Store {
    /// Runs the acquire script for `contender` with a lease of `lease_ms`, in or out of the
    /// lock's wait queue as `queueing` says.
    pub(crate) async fn acquire(
        &self,
        lock: &LockName,
        keys: &LockKeys,
        contender: &Contender,
        lease_ms: u64,
        queueing: Queueing,
    ) -> Result<AcquireReply> {
        // A mutex is asked with the short layout first (see `layout.lua`), and again with all
        // the keys when other kinds use the name.
        let mut short = contender.kind == Kind::Exclusive;
        let (code, value, fence, server_ms) = loop {
            let reply: AcquireCode = self
                .run(Some(lock), |mut connection| async move {
                    let mut call = ScriptCall::queue(&ACQUIRE, keys.view(), &contender.void, short);
                    call.arg(&contender.owner)
                        .arg(lease_ms)
                        .arg(if queueing.join { "1" } else { "0" })
                        .arg(queueing.entry_ttl_ms)
                        .arg(self.claim_ms)
                        .arg(&contender.member)
                        .arg(self.fence_retention_ms);
                    if contender.kind != Kind::Exclusive {
                        call.arg(contender.kind.letter()).arg(contender.kind.permits());
                    }
                    call.invoke(&mut connection).await
                })
                .await?;
            if reply.0.0 == -3 && short {
                short = false;
                continue;
            }
            break reply.0;
        };
        match code {
            1 => match u64::try_from(value) {
                Ok(token) => Ok(AcquireReply::Granted(FencingToken::new(token))),
                Err(_) => Err(Error::backend(
                    BACKEND,
                    Some(lock),
                    Failure::UnexpectedReply {
                        command: "the acquire script",
                        reply: format!("the token {value} from the fence counter {}", keys.fence()),
                    },
                )),
            },
            0 => Ok(AcquireReply::Busy(Refusal {
                left: u64::try_from(value).ok().map(Duration::from_millis),
                mark: match (u64::try_from(fence), u64::try_from(server_ms)) {
                    (Ok(fence), Ok(server_ms)) if queueing.join => Some(QueueMark { fence, server_ms }),
                    _ => None,
                },
            })),
            -2 => {
                let count = u64::try_from(fence).unwrap_or(0);
                Ok(AcquireReply::Conflict(match value {
                    1 => Conflict::Semaphore(count),
                    2 => Conflict::Count(count),
                    _ => Conflict::Lock,
                }))
            }
            _ => Ok(AcquireReply::Void),
        }
    }

    /// Runs the release script: frees `owner`'s hold of `kind` and hands what it freed over to
    /// the head of the queue, or wakes every waiter when nobody is queued.
    pub(crate) async fn release(&self, lock: &LockName, keys: Keys<'_>, owner: &str, kind: Kind) -> Result<Ownership> {
        // A mutex is released with the short layout first (see `layout.lua`), and again with
        // all the keys when other kinds use the name and waiters are queued.
        let mut short = kind == Kind::Exclusive;
        loop {
            let code: i64 = self
                .run(Some(lock), |mut connection| async move {
                    let mut call = ScriptCall::queue(&RELEASE, keys, keys.record(), short);
                    call.arg(owner).arg(self.claim_ms);
                    if kind != Kind::Exclusive {
                        call.arg(kind.letter());
                    }
                    call.invoke(&mut connection).await
                })
                .await?;
            if code == -3 && short {
                short = false;
                continue;
            }
            return Ok(Ownership::from_code(code));
        }
    }

    /// Runs the downgrade script: turns `owner`'s write hold (of token `token`) into a read
    /// hold in place, and hands the readers at the head of the queue their share.
    pub(crate) async fn downgrade(
        &self,
        lock: &LockName,
        keys: Keys<'_>,
        owner: &str,
        token: FencingToken,
    ) -> Result<Ownership> {
        let code: i64 = self
            .run(Some(lock), |mut connection| async move {
                ScriptCall::queue(&DOWNGRADE, keys, keys.record(), false)
                    .arg(owner)
                    .arg(self.claim_ms)
                    .arg(token.get())
                    .invoke(&mut connection)
                    .await
            })
            .await?;
        Ok(Ownership::from_code(code))
    }

    /// Runs the abandon script: `contender` leaves the wait queue and frees its hold if it was
    /// granted (a try in doubt, or a hand-over); when `void_ms` is not zero (its outcome is in
    /// doubt) it is also voided for `void_ms`. Returns whether it freed a grant.
    pub(crate) async fn abandon(
        &self,
        lock: &LockName,
        keys: &LockKeys,
        contender: &Contender,
        void_ms: u64,
    ) -> Result<bool> {
        let code: i64 = self
            .run(Some(lock), |mut connection| async move {
                ScriptCall::queue(&ABANDON, keys.view(), &contender.void, false)
                    .arg(&contender.owner)
                    .arg(void_ms)
                    .arg(self.claim_ms)
                    .arg(&contender.member)
                    .arg(contender.kind.letter())
                    .invoke(&mut connection)
                    .await
            })
            .await?;
        Ok(code == 1)
    }
}

/// The reply of the acquire script as `(code, value, fence, server ms)` (see `acquire.lua`):
/// its lean path replies with the token alone, an integer, which is `(1, token, 0, 0)`.
struct AcquireCode((i64, i64, i64, i64));

impl redis::FromRedisValue for AcquireCode {
    fn from_redis_value(value: redis::Value) -> Result<Self, redis::ParsingError> {
        match value {
            redis::Value::Int(token) => Ok(Self((1, token, 0, 0))),
            other => Ok(Self(redis::FromRedisValue::from_redis_value(other)?)),
        }
    }
}
