//! Renewals and checks of many holds at once: one pipeline per server, or on a cluster one per
//! node (grouped by the slot map), sent concurrently.

use lockkit_core::sync::lock_or_recover;
use lockkit_core::{Error, Result};
use redis::cluster_routing::SingleNodeRoutingInfo;
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use super::connection::{Connection, Store, key_slot};
use super::kinds::{HoldTarget, Kind, Ownership};
use super::reply::{map_error, parse};
use super::scripts::{RENEW, RENEW_LEADER, RENEW_MANY, RENEW_PERMIT, RENEW_RW};
use crate::BACKEND;
use crate::error::Failure;

/// Where a hold's renewals go, for batching: on a cluster, the primary that owns its hash
/// slot as the last `CLUSTER SLOTS` read said, or the slot itself while that is not known;
/// elsewhere, the one server.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Group {
    /// The one server (or the primary the sentinels name).
    Server,
    /// A cluster node, by host and port.
    Node(String, u16),
    /// A hash slot whose node is not known.
    Slot(u16),
}

impl Store {
    /// Where `hold`'s renewals go (see [`Group`]).
    pub(crate) fn group_of(&self, hold: &HoldTarget) -> Group {
        if self.cluster.is_none() {
            return Group::Server;
        }
        // Every key of a lock is in the slot of its record (they share its hash tag).
        let slot = key_slot(hold.keys().record().as_bytes());
        let map = lock_or_recover(&self.slot_map).clone();
        map.and_then(|map| {
            map.iter()
                .find(|(first, last, _, _)| (*first..=*last).contains(&slot))
                .map(|(_, _, host, port)| Group::Node(host.clone(), *port))
        })
        .unwrap_or(Group::Slot(slot))
    }

    /// Renews a batch of holds of any kinds in one pipeline (one round trip, and one script
    /// call per hold, of its kind, so that it runs unchanged on Redis Cluster). Returns one
    /// answer per hold, in order, and whether the renewals count: with `replicas` set, the
    /// pipeline ends with a `WAIT`, and renewals that not enough replicas acknowledged
    /// (the error says how many did) must not extend the holds' deadlines.
    pub(crate) async fn renew_batch(
        &self,
        holds: &[&HoldTarget],
        lease_ms: u64,
    ) -> Result<(Vec<Ownership>, Result<()>)> {
        let mut answers = self.hold_pipeline(holds, Some(lease_ms)).await?;
        let acknowledged = if self.replicas > 0 {
            let acked = match answers.pop() {
                Some(answer) => parse::<i64>(answer?)?,
                None => 0,
            };
            if acked < i64::from(self.replicas) {
                Err(Error::connection(
                    BACKEND,
                    None,
                    Failure::NotReplicated {
                        what: "the renewal",
                        acked,
                        wanted: self.replicas,
                        timeout: self.replicas_timeout,
                    },
                ))
            } else {
                Ok(())
            }
        } else {
            Ok(())
        };
        let owned =
            answers.into_iter().map(|answer| Ok(Ownership::from_code(parse(answer?)?))).collect::<Result<_>>()?;
        Ok((owned, acknowledged))
    }

    /// Reads whether each of `holds` is still there, in one pipeline, changing nothing (a
    /// `GET` of a mutex record; the renew script of the other kinds with no lease, which only
    /// drops a hold whose lease ran out). Returns one answer per hold, in order.
    pub(crate) async fn check(&self, holds: &[&HoldTarget]) -> Result<Vec<Ownership>> {
        let answers = self.hold_pipeline(holds, None).await?;
        holds
            .iter()
            .zip(answers)
            .map(|(hold, answer)| {
                let answer = answer?;
                Ok(match hold.kind {
                    Kind::Exclusive => match parse::<Option<String>>(answer)? {
                        Some(value) if value == hold.owner() => Ownership::Ours,
                        Some(_) => Ownership::Other,
                        None => Ownership::Gone,
                    },
                    _ => Ownership::from_code(parse(answer)?),
                })
            })
            .collect()
    }

    /// Sends the renew script of each hold's kind (with `lease_ms`, or, for `None`, the check
    /// described at [`check`](Self::check)) in one pipeline; when the server lost its script
    /// cache (a restart, `SCRIPT FLUSH`), loads the scripts and sends it again. Returns one
    /// reply per hold.
    pub(super) async fn hold_pipeline(
        &self,
        holds: &[&HoldTarget],
        lease_ms: Option<u64>,
    ) -> Result<Vec<Result<Value>>> {
        let answers = self.send_hold_pipeline(holds, lease_ms).await?;
        let lost_scripts = answers
            .iter()
            .any(|answer| matches!(answer, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)));
        let answers = if lost_scripts {
            self.run(None, |mut connection| async move {
                for script in [&*RENEW, &*RENEW_MANY, &*RENEW_RW, &*RENEW_PERMIT, &*RENEW_LEADER] {
                    script.prepare_invoke().load_async(&mut connection).await?;
                }
                Ok(())
            })
            .await?;
            self.send_hold_pipeline(holds, lease_ms).await?
        } else {
            answers
        };
        Ok(answers
            .into_iter()
            .map(|answer| {
                answer.map_err(|e| {
                    self.note_error(&e);
                    map_error(e, None)
                })
            })
            .collect())
    }

    pub(super) async fn send_hold_pipeline(
        &self,
        holds: &[&HoldTarget],
        lease_ms: Option<u64>,
    ) -> Result<Vec<std::result::Result<Value, RedisError>>> {
        if self.cluster.is_some() {
            return self.send_slot_pipelines(holds, lease_ms).await;
        }
        self.send_one_pipeline(holds, lease_ms, None).await
    }

    /// On a cluster: one pipeline per node, or per hash slot where the node is not known (see
    /// [`Group`]; the cluster connection refuses a pipeline routed by keys that span slots,
    /// so a node's pipeline is sent to it by address), sent concurrently; the replies in
    /// the order of `holds`. The holds that got no answer from their node (a slot that moved
    /// since the map was read answers `MOVED`, without running the script; a node that
    /// failed over or is not connected yet fails its whole pipeline) are sent once more at
    /// once, one pipeline per slot, which the cluster connection routes by its own slot map.
    /// With `replicas` set, each pipeline ends with its own `WAIT`, and the last reply is the
    /// fewest acknowledgements any of the pipelines that answered got (0 when one failed).
    pub(super) async fn send_slot_pipelines(
        &self,
        holds: &[&HoldTarget],
        lease_ms: Option<u64>,
    ) -> Result<Vec<std::result::Result<Value, RedisError>>> {
        type Answer = std::result::Result<Value, RedisError>;
        let waits = self.replicas > 0 && lease_ms.is_some();
        let mut answers: Vec<Option<Answer>> = (0..holds.len()).map(|_| None).collect();
        let mut fewest: Option<i64> = None;
        let mut pending: Vec<usize> = (0..holds.len()).collect();
        for by_node in [true, false] {
            if pending.is_empty() {
                break;
            }
            let mut groups: std::collections::HashMap<Group, Vec<usize>> = std::collections::HashMap::new();
            for &at in &pending {
                let Some(hold) = holds.get(at) else { continue };
                let group = match self.group_of(hold) {
                    Group::Node(..) if !by_node => Group::Slot(key_slot(hold.keys().record().as_bytes())),
                    group => group,
                };
                groups.entry(group).or_default().push(at);
            }
            let sent_by_node = groups.keys().any(|group| matches!(group, Group::Node(..)));
            let groups: Vec<(Group, Vec<usize>)> = groups.into_iter().collect();
            let sends = groups.iter().map(|(group, members)| async move {
                let holds: Vec<&HoldTarget> = members.iter().filter_map(|&at| holds.get(at).copied()).collect();
                match group {
                    Group::Node(host, port) => self.send_one_pipeline(&holds, lease_ms, Some((host, *port))).await,
                    _ => self.send_one_pipeline(&holds, lease_ms, None).await,
                }
            });
            let replies = futures_util::future::join_all(sends).await;
            let last_pass = !by_node || !sent_by_node;
            let mut failed = Vec::new();
            for ((_, members), reply) in groups.iter().zip(replies) {
                match reply {
                    Ok(mut values) => {
                        if waits {
                            let acked = match values.pop() {
                                Some(Ok(value)) => redis::from_redis_value_ref::<i64>(&value).unwrap_or(0),
                                _ => 0,
                            };
                            fewest = Some(fewest.map_or(acked, |f| f.min(acked)));
                        }
                        for (&at, value) in members.iter().zip(values) {
                            if value.is_err() && !last_pass {
                                failed.push(at);
                            } else if let Some(answer) = answers.get_mut(at) {
                                *answer = Some(value);
                            }
                        }
                    }
                    Err(error) if !last_pass => {
                        tracing::debug!(%error, holds = members.len(), "a node's renewal pipeline failed; sending per slot");
                        failed.extend(members.iter().copied());
                    }
                    Err(error) => {
                        let error = RedisError::from(std::io::Error::other(error.to_string()));
                        for &at in members {
                            if let Some(answer) = answers.get_mut(at) {
                                *answer = Some(Err(error.clone()));
                            }
                        }
                        if waits {
                            fewest = Some(0);
                        }
                    }
                }
            }
            if !failed.is_empty() {
                // The map was stale: the next round reads it again.
                *lock_or_recover(&self.slot_map) = None;
            }
            pending = failed;
        }
        let mut answers: Vec<Answer> = answers
            .into_iter()
            .map(|answer| answer.unwrap_or_else(|| Err(RedisError::from((ErrorKind::Io, "no reply in the pipeline")))))
            .collect();
        if waits {
            answers.push(Ok(Value::Int(fewest.unwrap_or(0))));
        }
        Ok(answers)
    }

    /// Sends the holds' pipeline (see [`hold_pipeline`](Self::hold_pipeline)) in one round trip.
    /// On a cluster, `node` (host and port) is the node to send it to, whatever the slots of
    /// its keys; without it, the cluster connection sends it to the primary of its first key.
    /// Elsewhere, the renewals of the mutex holds go in one call of `renew_many.lua` at the
    /// end of the pipeline (a script call costs the server more than the renewal in it), whose
    /// codes are put back in the holds' order.
    pub(super) async fn send_one_pipeline(
        &self,
        holds: &[&HoldTarget],
        lease_ms: Option<u64>,
        node: Option<(&String, u16)>,
    ) -> Result<Vec<std::result::Result<Value, RedisError>>> {
        let mut pipeline = redis::pipe();
        pipeline.ignore_errors();
        let together = self.cluster.is_none() && lease_ms.is_some();
        // Where each hold's answer is: its own reply, or its place in the one call's codes.
        let mut places = Vec::with_capacity(holds.len());
        let (mut own, mut mutexes) = (0, Vec::new());
        for hold in holds {
            if together && hold.kind == Kind::Exclusive {
                places.push(Place::Together(mutexes.len()));
                mutexes.push(*hold);
                continue;
            }
            places.push(Place::Own(own));
            own += 1;
            match (hold.kind, lease_ms) {
                (Kind::Exclusive, None) => {
                    pipeline.cmd("GET").arg(hold.keys().record());
                }
                (_, lease_ms) => {
                    pipeline
                        .cmd("EVALSHA")
                        .arg(hold.renew_script().get_hash())
                        .arg(hold.renew_keys())
                        .arg(hold.owner())
                        .arg(lease_ms.unwrap_or(0));
                    if hold.kind == Kind::Candidate {
                        // Where it finds the leader gone, it hands over (see renew_leader.lua).
                        pipeline.arg(self.claim_ms);
                    }
                    // A renewal keeps the fence counter of an exclusive hold (see renew.lua).
                    pipeline.arg(self.fence_retention_ms);
                }
            }
        }
        if !mutexes.is_empty() {
            let call = pipeline.cmd("EVALSHA").arg(RENEW_MANY.get_hash()).arg(mutexes.len() * 2);
            for hold in &mutexes {
                call.arg(hold.mutex_keys());
            }
            call.arg(lease_ms.unwrap_or(0)).arg(self.fence_retention_ms);
            for hold in &mutexes {
                call.arg(hold.owner());
            }
        }
        if self.replicas > 0 && lease_ms.is_some() {
            // The renewals count once the replicas have them (see renew_batch).
            pipeline.cmd("WAIT").arg(self.replicas).arg(lockkit_core::config::millis(self.replicas_timeout));
        }
        let replies = self
            .run(None, |connection| async move {
                match (connection, node) {
                    (Connection::Cluster(mut connection), Some((host, port))) => {
                        let route = SingleNodeRoutingInfo::ByAddress { host: host.clone(), port };
                        let count = pipeline.cmd_iter().count();
                        let values = connection.route_pipeline(pipeline, 0, count, route).await?;
                        Ok(values.into_iter().map(Value::extract_error).collect())
                    }
                    (mut connection, _) => pipeline.query_async(&mut connection).await,
                }
            })
            .await?;
        if mutexes.is_empty() {
            return Ok(replies);
        }
        Ok(spread(replies, &places, own))
    }
}

/// Where a hold's renewal answer is in a pipeline's replies (see
/// [`send_one_pipeline`](Store::send_one_pipeline)).
#[derive(Clone, Copy, Debug)]
enum Place {
    /// Its own reply, at this index.
    Own(usize),
    /// This index in the codes of the one call of `renew_many.lua`, the reply after the
    /// holds' own.
    Together(usize),
}

/// The replies of a pipeline with one call of `renew_many.lua` after `own` replies of their
/// own (and a `WAIT`'s, maybe, after it), put back as one reply per hold in order, then the
/// `WAIT`'s. A failed call fails each of its holds.
fn spread(
    replies: Vec<std::result::Result<Value, RedisError>>,
    places: &[Place],
    own: usize,
) -> Vec<std::result::Result<Value, RedisError>> {
    let mut replies = replies.into_iter();
    let mut owns: Vec<Option<std::result::Result<Value, RedisError>>> = replies.by_ref().take(own).map(Some).collect();
    let together = match replies.next() {
        Some(Ok(Value::Array(codes))) => Ok(codes),
        Some(Ok(other)) => {
            Err(RedisError::from((ErrorKind::Parse, "renew_many.lua answered no array", format!("{other:?}"))))
        }
        Some(Err(error)) => Err(error),
        None => Err(RedisError::from((ErrorKind::Io, "no reply in the pipeline"))),
    };
    let missing = || RedisError::from((ErrorKind::Io, "no reply in the pipeline"));
    let mut answers: Vec<std::result::Result<Value, RedisError>> = places
        .iter()
        .map(|place| match *place {
            Place::Own(at) => owns.get_mut(at).and_then(Option::take).unwrap_or_else(|| Err(missing())),
            Place::Together(at) => match &together {
                Ok(codes) => codes.get(at).cloned().ok_or_else(missing),
                Err(error) => Err(error.clone()),
            },
        })
        .collect();
    // The WAIT's reply, when there is one.
    answers.extend(replies);
    answers
}
