//! The analysis of a fenced run: the workers wrote to a real store through a real fence, so
//! the store's history, not the parent's order of messages, says which writes survived.
//!
//! Every write is announced before it is sent (`write … UID PREV …`: its id and the id of the
//! write it read) and its outcome said after (`wrote … UID OUTCOME REPLIED`). At the end the
//! parent reads each counter's final value (`COUNTER UID`) and walks the chain of writes back
//! from it through the ids each write read: that chain is the surviving history, in the
//! store's order. Then:
//!
//! - **accepted**: acknowledged (`ok`) or on the chain (a write whose worker was killed before
//!   the reply, or whose reply was lost, counts when the store kept it);
//! - **lost**: accepted, off the chain (overwritten by a write that had not read it), and
//!   acknowledged before its hold's deadline: must be 0;
//! - **stale accepted**: accepted although a write of the same name with a greater token had
//!   been acknowledged before this one was sent; a fence must refuse it, so it must be 0
//!   (sound, as the times compared are the reply of one and the send of the other);
//! - **refused**: `stale` outcomes, and reads refused as stale apart;
//! - **outcome unknown**: a store error or a call that timed out, off the chain.

use std::collections::{HashMap, HashSet};

use super::State;

/// How a write ended, as its worker said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    Stale,
    Foreign,
    Error,
}

/// One write of a fenced run.
#[derive(Clone, Debug)]
struct WriteRecord {
    worker: u64,
    name: usize,
    token: u64,
    counter: u64,
    prev: u64,
    /// When the writer last saw its hold valid, before it read.
    checked: u64,
    /// Just before the write was sent.
    sent: u64,
    /// The hold's deadline when the write was sent.
    valid: Option<u64>,
    /// The writer's hold (an index in `State::holds`).
    hold: Option<usize>,
    outcome: Option<Outcome>,
    replied: Option<u64>,
}

/// What the parent keeps of a fenced run's writes.
#[derive(Debug, Default)]
pub(in super::super) struct FencedLog {
    writes: Vec<WriteRecord>,
    /// Write id → index in `writes`.
    by_uid: HashMap<u64, usize>,
    /// Per name: the final value read from the store (counter, write id), or why it could
    /// not be read.
    pub(in super::super) finals: Vec<Result<(u64, u64), String>>,
}

impl State {
    /// The stale writes and reads the fence refused so far (0 in a run without a fence).
    pub(in super::super) fn refusals(&self) -> u64 {
        let stale = self
            .fenced
            .as_ref()
            .map_or(0, |log| log.writes.iter().filter(|write| write.outcome == Some(Outcome::Stale)).count());
        u64::try_from(stale).unwrap_or(u64::MAX).saturating_add(self.report.reads_refused)
    }

    /// Handles a line of a fenced run's writer (`write`, `wrote`, `readrefused`); `None` for
    /// another line or a malformed one.
    pub(super) fn handle_fenced(&mut self, id: u64, line: &str) -> Option<()> {
        let mut words = line.split_whitespace();
        let verb = words.next()?;
        let mut number = || words.next().and_then(|w| w.parse::<u64>().ok());
        match verb {
            "write" => {
                let (name, token, counter, uid, prev) = (number()?, number()?, number()?, number()?, number()?);
                let (checked, sent) = (number()?, number()?);
                let valid = number();
                let name = usize::try_from(name).ok()?;
                let hold = self.open.get(&(id, name, token)).copied();
                if let Some(record) = hold.and_then(|index| self.holds.get_mut(index)) {
                    record.valid = valid;
                }
                let log = self.fenced.as_mut()?;
                log.by_uid.insert(uid, log.writes.len());
                log.writes.push(WriteRecord {
                    worker: id,
                    name,
                    token,
                    counter,
                    prev,
                    checked,
                    sent,
                    valid,
                    hold,
                    outcome: None,
                    replied: None,
                });
            }
            "wrote" => {
                let (_name, _token, uid) = (number()?, number()?, number()?);
                let outcome = match words.next()? {
                    "ok" => Outcome::Ok,
                    "stale" => Outcome::Stale,
                    "foreign" => Outcome::Foreign,
                    _ => Outcome::Error,
                };
                let replied = words.next().and_then(|w| w.parse::<u64>().ok());
                let log = self.fenced.as_mut()?;
                let index = *log.by_uid.get(&uid)?;
                let record = log.writes.get_mut(index)?;
                (record.outcome, record.replied) = (Some(outcome), replied);
            }
            "readrefused" => self.report.reads_refused += 1,
            _ => return None,
        }
        Some(())
    }
}

/// The writes of `name` that survive in the store, walked back from its final value; errors
/// for a history that does not hold together.
fn chain(log: &FencedLog, name: usize, (counter, uid): (u64, u64), errors: &mut Vec<String>) -> HashSet<u64> {
    let mut chain = HashSet::new();
    let (mut at, mut expect) = (uid, counter);
    while at != 0 {
        let Some(write) = log.by_uid.get(&at).and_then(|&index| log.writes.get(index)) else {
            errors.push(format!("name {name}: the store holds write {at:x}, which no writer announced"));
            return chain;
        };
        if write.name != name || write.counter != expect || !chain.insert(at) {
            errors.push(format!(
                "name {name}: the store's history does not hold together at write {at:x} (counter {}, expected {expect})",
                write.counter
            ));
            return chain;
        }
        (at, expect) = (write.prev, expect.saturating_sub(1));
    }
    if expect != 0 {
        errors.push(format!("name {name}: the store's history starts at counter {expect}, not 0"));
    }
    chain
}

/// Classifies the writes of a fenced run into the report (and `State::lost`, which `finish`
/// counts); does nothing for a run whose counters lived in the parent.
pub(super) fn analyse(state: &mut State) {
    let Some(log) = state.fenced.take() else { return };
    let mut errors = Vec::new();
    let mut survivors: HashSet<u64> = HashSet::new();
    for (name, last) in log.finals.iter().enumerate() {
        match last {
            Ok(last) => survivors.extend(chain(&log, name, *last, &mut errors)),
            Err(error) => errors.push(format!("name {name}: {error}")),
        }
    }
    let uid_of: HashMap<usize, u64> = log.by_uid.iter().map(|(&uid, &index)| (index, uid)).collect();
    let on_chain = |index: usize| uid_of.get(&index).is_some_and(|uid| survivors.contains(uid));
    // Per name, the acknowledged writes as (replied, token), for the stale check.
    let mut acknowledged: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
    for write in &log.writes {
        if let (Some(Outcome::Ok), Some(replied)) = (write.outcome, write.replied) {
            acknowledged.entry(write.name).or_default().push((replied, write.token));
        }
    }
    // Taken out while the loop reads the rest of the state; put back below.
    let mut report = std::mem::take(&mut state.report);
    for (index, write) in log.writes.iter().enumerate() {
        let survived = on_chain(index);
        match write.outcome {
            Some(Outcome::Stale) => {
                report.writes_refused += 1;
                let replied = write.replied.unwrap_or(u64::MAX);
                let resumed = state
                    .pauses
                    .get(&write.worker)
                    .is_some_and(|pauses| pauses.iter().any(|&(_, end)| end >= write.checked && end <= replied));
                if resumed {
                    report.writes_refused_after_resume += 1;
                }
                if state.lockkit_pauses.contains_key(&write.worker) {
                    report.writes_refused_lockkit_paused += 1;
                }
                continue;
            }
            Some(Outcome::Foreign) => {
                errors.push(format!("a write of name {} was refused as of another lock", write.name));
                continue;
            }
            Some(Outcome::Error) | None if !survived => {
                report.writes_unknown += 1;
                continue;
            }
            _ => {}
        }
        report.writes_accepted += 1;
        let newer_before = acknowledged
            .get(&write.name)
            .is_some_and(|acks| acks.iter().any(|&(replied, token)| token > write.token && replied < write.sent));
        if newer_before {
            report.stale_writes_accepted += 1;
        }
        let Some(replied) = write.replied.filter(|_| write.outcome == Some(Outcome::Ok)) else { continue };
        let start = write.hold.and_then(|hold| state.holds.get(hold)).map_or(0, |hold| hold.start);
        let made_while_valid = state.capped(write.worker, start, write.valid).is_none_or(|valid| replied <= valid);
        if !made_while_valid {
            report.late_writes += 1;
        } else if !survived {
            state.lost.push((write.hold, None));
        }
    }
    report.errors.extend(errors);
    state.report = report;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::{Duration, Instant};

    use super::super::finish;
    use super::*;
    use crate::process_chaos::ProcessChaosConfig;
    use crate::process_chaos::protocol::now_ns;

    const SECOND: u64 = 1_000_000_000;

    fn state() -> State {
        let config = ProcessChaosConfig::new(1, "redis://unused", "unused")
            .with_lease(Duration::from_secs(1))
            .with_sink("unused");
        State::new(&config)
    }

    /// Worker 1 (token 100) reads 0 and is paused; worker 2 (token 200) writes 1; worker 1
    /// resumes and writes 1 too: `accepted` says whether the store took it.
    fn paused_writer(accepted: bool) -> crate::process_chaos::ProcessChaosReport {
        let mut state = state();
        let base = now_ns() - 10 * SECOND;
        let far = base + 60 * SECOND;
        state.handle(1, &format!("acquired 0 100 {base} {}", base + SECOND));
        state.handle(2, &format!("acquired 0 200 {} {far}", base + 2 * SECOND));
        state.handle(2, &format!("write 0 200 1 22 0 {0} {0} {far}", base + 2 * SECOND));
        state.handle(2, &format!("wrote 0 200 22 ok {}", base + 2 * SECOND + 1000));
        state.handle(1, &format!("write 0 100 1 11 0 {base} {} {}", base + 3 * SECOND, base + SECOND));
        let outcome = if accepted { "ok" } else { "stale" };
        state.handle(1, &format!("wrote 0 100 11 {outcome} {}", base + 3 * SECOND + 1000));
        state.handle(1, &format!("ended 0 100 {} {}", base + 3 * SECOND + 2000, base + SECOND));
        state.handle(2, &format!("ended 0 200 {} {far}", base + 4 * SECOND));
        let last = if accepted { (1, 11) } else { (1, 22) };
        state.fenced.as_mut().unwrap().finals = vec![Ok(last)];
        finish(&mut state, &["fenced/0".to_owned()], Instant::now())
    }

    #[test]
    fn a_fence_refuses_the_resumed_writer() {
        let report = paused_writer(false);
        assert_eq!((report.writes_accepted, report.writes_refused, report.stale_writes_accepted), (1, 1, 0));
        assert_eq!(report.lost_writes, 0, "{report}");
        assert!(report.is_ok(), "{report}");
    }

    #[test]
    fn a_bypassed_fence_shows_the_stale_write_landing() {
        let report = paused_writer(true);
        assert_eq!((report.writes_accepted, report.stale_writes_accepted), (2, 1), "{report}");
        assert!(!report.is_ok(), "{report}");
    }

    #[test]
    fn a_valid_write_overwritten_unseen_is_lost_and_a_killed_writers_kept_write_counts() {
        let mut state = state();
        let base = now_ns() - 10 * SECOND;
        let far = base + 60 * SECOND;
        state.handle(1, &format!("acquired 0 100 {base} {far}"));
        state.handle(1, &format!("write 0 100 1 11 0 {base} {base} {far}"));
        state.handle(1, &format!("wrote 0 100 11 ok {}", base + 1000));
        // Worker 2 read 0 (not 11) and its write won: 11 is lost while valid.
        state.handle(2, &format!("write 0 100 1 22 0 {base} {base} {far}"));
        // Worker 3 was killed before its reply; the store kept its write.
        state.handle(3, &format!("write 0 100 2 33 22 {base} {base} {far}"));
        state.fenced.as_mut().unwrap().finals = vec![Ok((2, 33))];
        let report = finish(&mut state, &["fenced/0".to_owned()], Instant::now());
        assert_eq!((report.writes_accepted, report.lost_writes), (3, 1), "{report}");
        assert!(report.errors.is_empty(), "{report}");
    }

    #[test]
    fn a_history_that_does_not_hold_together_is_an_error() {
        let mut state = state();
        state.fenced.as_mut().unwrap().finals = vec![Ok((3, 99))];
        let report = finish(&mut state, &["fenced/0".to_owned()], Instant::now());
        assert!(report.errors.iter().any(|e| e.contains("no writer announced")), "{report}");
    }
}
