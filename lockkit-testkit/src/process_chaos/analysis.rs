//! The parent's bookkeeping of a multi-process run, and the analysis at its end.
//!
//! Every protocol line of a worker lands in [`State`]: holds (grant, end, the guard's local
//! deadline, in wall-clock nanoseconds comparable across the processes of one machine), reads
//! and writes through the run's [`FencedSink`], the faults applied, the deaths. [`finish`]
//! turns the holds into a [`History`] and checks it, and classifies the lost writes.

mod fenced;

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lockkit_core::HoldKind;

use super::config::ProcessChaosConfig;
use super::protocol::now_ns;
use super::report::ProcessChaosReport;
use super::resource::{FencedSink, MemorySink, SinkWrite};
use crate::history::{History, Hold, Violation};
use crate::sync::locked;
pub(super) use fenced::FencedLog;

/// [`run_cli`](super::run_cli): a pause of `lockkit` that ended less than this before its
/// command reported the hold may have come between the grant and the command's start, so it
/// bounds the hold.
const SPAWN_WINDOW: Duration = Duration::from_millis(250);

/// One hold as the workers reported it (wall nanoseconds).
#[derive(Clone, Debug)]
pub(super) struct HoldRecord {
    worker: u64,
    name: usize,
    token: u64,
    start: u64,
    end: Option<u64>,
    valid: Option<u64>,
    /// The deadline the worker reported with the grant: the store granted the hold no earlier
    /// than a lease before it (a guard's deadline never passes the store's expiry).
    first_valid: Option<u64>,
}

/// The last accepted write of a name.
#[derive(Clone, Copy, Debug)]
struct LastWrite {
    counter: u64,
    /// Accepted while its hold was valid.
    valid: bool,
    /// The writer's hold (an index in `State::holds`).
    hold: Option<usize>,
}

/// What the parent tracks while the workers run.
#[derive(Debug, Default)]
pub(super) struct State {
    holds: Vec<HoldRecord>,
    /// (worker, name, token) → index in `holds`.
    open: HashMap<(u64, usize, u64), usize>,
    /// What the workers write to.
    pub(super) sink: Box<dyn FencedSink>,
    /// Per name: its last accepted write.
    last: Vec<Option<LastWrite>>,
    /// Per worker: its pauses (start, end) in wall nanoseconds.
    pub(super) pauses: HashMap<u64, Vec<(u64, u64)>>,
    /// [`run_cli`]: per worker (one `lockkit run`), the pauses of its `lockkit` (start, end
    /// once resumed), in wall nanoseconds. One that was not over some time before the hold
    /// started ([`SPAWN_WINDOW`]) ends the hold's validity half a lease after its start (see
    /// `cli.rs`).
    pub(super) lockkit_pauses: HashMap<u64, Vec<(u64, Option<u64>)>>,
    /// [`run_cli`]: half the lease, in nanoseconds, when the store has a lease.
    half_lease: Option<u64>,
    /// The store's restarts (start, end once it serves again), in wall nanoseconds.
    pub(super) restarts: Vec<(u64, Option<u64>)>,
    /// The store's faults, pauses and restarts (start, end once over), in wall nanoseconds.
    /// [`run_cli`] bounds a hold by them as by a pause of its `lockkit`: nothing renews the
    /// hold during one, and a command cannot see its hold's deadline.
    pub(super) store_faults: Vec<(u64, Option<u64>)>,
    /// Lost writes: the hold of the overwritten write and the hold of the one that overwrote
    /// it (indexes in `holds`), classified at the end.
    lost: Vec<(Option<usize>, Option<usize>)>,
    /// The lease in nanoseconds, if the store has one.
    lease: Option<u64>,
    /// Workers that died (were killed), and when.
    dead: HashMap<u64, u64>,
    /// See [`ProcessChaosConfig::restart_loses_data`].
    restart_loses_data: bool,
    /// A fenced run ([`ProcessChaosConfig::sink`]): the writes the workers made to the store
    /// themselves, classified at the end against the store's history.
    pub(super) fenced: Option<FencedLog>,
    pub(super) report: ProcessChaosReport,
}

/// Locks the run's bookkeeping (a task that panicked holding it leaves it usable).
pub(super) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    locked(state)
}

impl State {
    /// The state of a run through `lockkit run` ([`run_cli`](super::run_cli)) with `config`:
    /// a hold counts as valid until at most half a lease after a pause of its `lockkit` or a
    /// store fault began (see `lockkit_pauses`).
    pub(super) fn new_cli(config: &ProcessChaosConfig) -> State {
        // lockkit renews every third of a lease: its last renewal started at most a third of a
        // lease (and some lateness) before a pause, so the store keeps the hold until at least
        // half a lease after the pause's start.
        let half_lease = config.lease.map(|lease| u64::try_from((lease / 2).as_nanos()).unwrap_or(u64::MAX));
        State { half_lease, ..State::new(config) }
    }

    /// The state of a run with `config`, before its first worker starts.
    pub(super) fn new(config: &ProcessChaosConfig) -> State {
        State {
            sink: Box::new(MemorySink::new(config.names)),
            last: vec![None; config.names],
            report: ProcessChaosReport {
                label: config.label.clone(),
                seed: config.seed,
                planted_bug: config.planted_bug,
                restart_loses_data: config.restart_loses_data,
                fence_bypassed: config.fence_bypassed,
                ..ProcessChaosReport::default()
            },
            fenced: config.sink.as_ref().map(|_| FencedLog::default()),
            lease: config.lease.map(|lease| u64::try_from(lease.as_nanos()).unwrap_or(u64::MAX)),
            restart_loses_data: config.restart_loses_data,
            ..State::default()
        }
    }

    /// Whether the store may have granted `hold` before a restart was over, while the hold was
    /// still valid when the restart began: a restart that loses data may have lost its record
    /// (the server stops some time after the restart began, Redis at its next tick, and grants
    /// until then). The grant came no earlier than a lease before the first deadline the
    /// worker reported (without one, than the hold's start), and the hold was valid until
    /// `valid` (without one, until its end).
    pub(super) fn spans_restart(&self, hold: &HoldRecord, valid: Option<u64>) -> bool {
        let granted_after = match (hold.first_valid, self.lease) {
            (Some(first), Some(lease)) => first.saturating_sub(lease).min(hold.start),
            _ => hold.start,
        };
        let valid_end = valid.or(hold.end).unwrap_or(u64::MAX);
        self.restarts.iter().any(|&(start, end)| granted_after < end.unwrap_or(u64::MAX) && valid_end > start)
    }

    /// Handles one line from worker `id`; returns the answer to send, if any.
    pub(super) fn handle(&mut self, id: u64, line: &str) -> Option<String> {
        let mut words = line.split_whitespace();
        let verb = words.next()?;
        if self.fenced.is_some() && matches!(verb, "write" | "wrote" | "readrefused" | "read") {
            self.handle_fenced(id, line);
            return None;
        }
        let mut number = || words.next().and_then(|w| w.parse::<u64>().ok());
        match verb {
            "acquired" => {
                let (name, token, start) = (number()?, number()?, number()?);
                let valid = number();
                let name = usize::try_from(name).ok()?;
                self.report.acquisitions += 1;
                let end = self.dead.get(&id).map(|&died| died.max(start));
                self.holds.push(HoldRecord { worker: id, name, token, start, end, valid, first_valid: valid });
                if end.is_none() {
                    self.open.insert((id, name, token), self.holds.len() - 1);
                }
                None
            }
            "read" => {
                let name = usize::try_from(number()?).ok()?;
                Some(format!("value {}", self.sink.read(name)?))
            }
            "write" => {
                let (name, token, counter, checked) = (number()?, number()?, number()?, number()?);
                let valid = number();
                let start = self.open.get(&(id, usize::try_from(name).unwrap_or(usize::MAX), token));
                let start = start.and_then(|&index| self.holds.get(index)).map_or(0, |hold| hold.start);
                let capped = self.capped(id, start, valid);
                let name = usize::try_from(name).ok()?;
                let received = now_ns();
                let index = self.open.get(&(id, name, token)).copied();
                if let Some(hold) = index.and_then(|index| self.holds.get_mut(index)) {
                    hold.valid = valid;
                }
                let resumed = self
                    .pauses
                    .get(&id)
                    .is_some_and(|pauses| pauses.iter().any(|&(_, end)| end >= checked && end <= received));
                if self.sink.write(name, token, counter)? == SinkWrite::Stale {
                    self.report.writes_refused += 1;
                    if resumed {
                        self.report.writes_refused_after_resume += 1;
                    }
                    if self.lockkit_pauses.contains_key(&id) {
                        self.report.writes_refused_lockkit_paused += 1;
                    }
                    return Some("stale".to_owned());
                }
                let made_while_valid = capped.is_none_or(|valid| received <= valid);
                if !made_while_valid {
                    self.report.late_writes += 1;
                }
                let last = self.last.get_mut(name)?;
                // The write read `counter - 1`: an accepted write it did not see is lost.
                if let Some(previous) = *last
                    && counter.saturating_sub(1) < previous.counter
                    && previous.valid
                {
                    self.lost.push((previous.hold, index));
                }
                *last = Some(LastWrite { counter, valid: made_while_valid, hold: index });
                self.report.writes_accepted += 1;
                Some("ok".to_owned())
            }
            "ended" => {
                let (name, token, end) = (number()?, number()?, number()?);
                let valid = number();
                let name = usize::try_from(name).ok()?;
                if let Some(index) = self.open.remove(&(id, name, token))
                    && let Some(hold) = self.holds.get_mut(index)
                {
                    hold.end = Some(end);
                    hold.valid = valid;
                }
                None
            }
            _ => None,
        }
    }

    /// Ends the open holds of a worker that died at `at`: its process is gone, and with it
    /// its session or file lock (a lease still bounds a Redis hold through `valid`). For a
    /// kill, `at` is when `SIGKILL` was sent: the worker runs nothing after it, and its lock
    /// may be free (a file lock is, as soon as the process is gone) before the parent reaps
    /// it. A hold the worker reported before it died but the parent reads only later ends
    /// there too.
    pub(super) fn died(&mut self, id: u64, at: u64) {
        self.dead.entry(id).or_insert(at);
        let open: Vec<(u64, usize, u64)> = self.open.keys().filter(|(worker, _, _)| *worker == id).copied().collect();
        for key in open {
            if let Some(index) = self.open.remove(&key)
                && let Some(hold) = self.holds.get_mut(index)
            {
                // A kill is dated when SIGKILL was sent; the command may still have reported
                // its hold just after (it dies with `lockkit` a moment later): such a hold
                // ends where it started, never before.
                hold.end = Some(at.max(hold.start));
            }
        }
    }

    /// `valid`, the deadline worker `id` reported for its hold that started at `start`,
    /// bounded by the pauses of its `lockkit` (see `lockkit_pauses`) and, in [`run_cli`], by
    /// the store's faults (see `store_faults`).
    pub(super) fn capped(&self, id: u64, start: u64, valid: Option<u64>) -> Option<u64> {
        let Some(half) = self.half_lease else { return valid };
        let window = u64::try_from(SPAWN_WINDOW.as_nanos()).unwrap_or(u64::MAX);
        let cap = self
            .lockkit_pauses
            .get(&id)
            .into_iter()
            .flatten()
            .chain(&self.store_faults)
            .filter(|(_, end)| end.is_none_or(|end| end.saturating_add(window) >= start))
            .map(|(begin, _)| begin.saturating_add(half))
            .min();
        match (valid, cap) {
            (Some(valid), Some(cap)) => Some(valid.min(cap)),
            (None, cap) => cap,
            (valid, None) => valid,
        }
    }

    /// Whether worker `id` holds a lock now.
    pub(super) fn holds_now(&self, id: u64) -> bool {
        self.open.keys().any(|(worker, _, _)| *worker == id)
    }
}

/// Checks the recorded holds as a [`History`] and returns the report.
pub(super) fn finish(state: &mut State, names: &[String], began: Instant) -> ProcessChaosReport {
    fenced::analyse(state);
    let history = History::new();
    let (base_instant, base_wall) = (Instant::now(), now_ns());
    let instant = |ns: u64| {
        if ns >= base_wall {
            base_instant + Duration::from_nanos(ns - base_wall)
        } else {
            base_instant.checked_sub(Duration::from_nanos(base_wall - ns)).unwrap_or(began)
        }
    };
    let mut never_valid = 0;
    // (client, lock, token) → whether the hold spans a restart that lost its record.
    let mut excused: HashMap<(String, String, u64), bool> = HashMap::new();
    for hold in &state.holds {
        let valid = state.capped(hold.worker, hold.start, hold.valid);
        if state.half_lease.is_some() && valid.is_some_and(|valid| valid <= hold.start) {
            never_valid += 1;
            continue;
        }
        let client = format!("worker {}", hold.worker);
        let name = names.get(hold.name).cloned().unwrap_or_default();
        excused.insert(
            (client.clone(), name.clone(), hold.token),
            state.restart_loses_data && state.spans_restart(hold, valid),
        );
        history.record(Hold {
            client,
            lock: name,
            token: hold.token,
            kind: HoldKind::Exclusive,
            start: instant(hold.start),
            end: hold.end.map(instant),
            valid_until: valid.map(instant),
        });
    }
    state.report.holds_never_valid = never_valid;
    let (by_design, violations): (Vec<Violation>, Vec<Violation>) =
        history.check().err().unwrap_or_default().into_iter().partition(|violation| match violation {
            Violation::Overlap { first, .. } => {
                excused.get(&(first.client.clone(), first.lock.clone(), first.token)).copied().unwrap_or(false)
            }
            Violation::TokenRegression { .. } => false,
        });
    state.report.violations = violations;
    state.report.by_design = by_design;
    let spans = |index: Option<usize>| {
        state.restart_loses_data
            && index
                .and_then(|index| state.holds.get(index))
                .is_some_and(|hold| state.spans_restart(hold, state.capped(hold.worker, hold.start, hold.valid)))
    };
    let by_design = state.lost.iter().filter(|&&(lost, by)| spans(lost) || spans(by)).count();
    state.report.lost_by_design = by_design as u64;
    state.report.lost_writes = (state.lost.len() - by_design) as u64;
    state.report.elapsed = began.elapsed();
    std::mem::take(&mut state.report)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const SECOND: u64 = 1_000_000_000;

    /// One worker, a lease of a second, and restarts that lose the store's records or not.
    fn restarting(loses_data: bool) -> ProcessChaosConfig {
        ProcessChaosConfig::new(1, "redis://unused", "unused")
            .with_lease(Duration::from_secs(1))
            .with_restart_loses_data(loses_data)
    }

    /// Worker 1 holds from before a restart (valid long after it), worker 2 is granted after the
    /// restart while worker 1 still writes: an overlap and a lost write, both involving a hold
    /// the restart may have lost.
    fn across_a_restart(loses_data: bool) -> ProcessChaosReport {
        let config = restarting(loses_data);
        let mut state = State::new(&config);
        let base = now_ns();
        let far = base + 60 * SECOND;
        state.restarts.push((base - SECOND / 2, Some(base - 2 * SECOND / 5)));
        assert_eq!(state.handle(1, &format!("acquired 0 100 {} {far}", base - SECOND)), None);
        assert_eq!(state.handle(2, &format!("acquired 0 200 {} {far}", base - SECOND / 4)), None);
        assert_eq!(state.handle(2, "read 0 200").as_deref(), Some("value 0"));
        assert_eq!(state.handle(1, &format!("write 0 100 1 {base} {far}")).as_deref(), Some("ok"));
        // Worker 2 read 0 before worker 1's write landed: worker 1's write is lost.
        assert_eq!(state.handle(2, &format!("write 0 200 1 {base} {far}")).as_deref(), Some("ok"));
        finish(&mut state, &["process-chaos/test/0".to_owned()], Instant::now())
    }

    #[test]
    fn a_restart_that_loses_data_excuses_what_involves_a_hold_it_may_have_lost() {
        let report = across_a_restart(true);
        assert_eq!((report.by_design.len(), report.lost_by_design), (1, 1), "{report}");
        assert_eq!((report.overlaps(), report.lost_writes), (0, 0), "{report}");
        assert!(report.is_ok(), "{report}");
    }

    #[test]
    fn without_restart_loses_data_the_same_run_fails() {
        let report = across_a_restart(false);
        assert_eq!((report.overlaps(), report.lost_writes), (1, 1), "{report}");
        assert!(report.by_design.is_empty() && report.lost_by_design == 0, "{report}");
        assert!(!report.is_ok(), "{report}");
    }

    #[test]
    fn a_hold_granted_after_the_restart_is_not_excused() {
        let config = restarting(true);
        let mut state = State::new(&config);
        let base = now_ns();
        let far = base + 60 * SECOND;
        state.restarts.push((base - 3 * SECOND, Some(base - 2 * SECOND)));
        // Both granted after the restart was over (the first deadline minus a lease is later).
        state.handle(1, &format!("acquired 0 100 {} {far}", base - SECOND));
        state.handle(2, &format!("acquired 0 200 {} {far}", base - SECOND / 2));
        let report = finish(&mut state, &["process-chaos/test/0".to_owned()], Instant::now());
        assert_eq!((report.overlaps(), report.by_design.len()), (1, 0), "{report}");
    }

    #[test]
    fn a_killed_workers_hold_ends_when_it_was_killed_even_when_read_later() {
        let config = ProcessChaosConfig::new(1, "file:///unused", "unused");
        let mut state = State::new(&config);
        let base = now_ns();
        state.handle(1, &format!("acquired 0 100 {} -", base - 2 * SECOND));
        state.died(1, base - SECOND);
        // A grant the worker reported before it died, read after.
        state.handle(1, &format!("acquired 1 101 {} -", base - SECOND - SECOND / 2));
        // The next holders start after the kill: no overlap.
        state.handle(2, &format!("acquired 0 200 {} -", base - SECOND / 2));
        state.handle(2, &format!("acquired 1 201 {} -", base - SECOND / 2));
        let names = ["process-chaos/test/0".to_owned(), "process-chaos/test/1".to_owned()];
        let report = finish(&mut state, &names, Instant::now());
        assert!(report.violations.is_empty(), "{report}");
        assert!(state.holds.iter().filter(|hold| hold.worker == 1).all(|hold| hold.end == Some(base - SECOND)));
    }

    /// `lockkit run` killed at `base - 1 s` while its command, alive a moment longer, reported
    /// a grant dated `base` that the parent read before the kill was recorded (cli chaos on
    /// files, seed 398: the hold ended before it started and was then its own predecessor).
    #[test]
    fn a_hold_reported_after_the_kill_was_sent_ends_where_it_started() {
        let config = ProcessChaosConfig::new(1, "file:///unused", "unused");
        let mut state = State::new(&config);
        let base = now_ns();
        state.handle(14, &format!("acquired 0 100 {base} -"));
        state.died(14, base - SECOND);
        state.handle(15, &format!("acquired 0 200 {} -", base + SECOND));
        let report = finish(&mut state, &["process-chaos/test/0".to_owned()], Instant::now());
        assert!(report.violations.is_empty(), "{report}");
        assert_eq!(state.holds.first().and_then(|hold| hold.end), Some(base));
    }
}
