//! The clients of a chaos run: each picks a name, acquires one of four ways, makes fenced
//! read-modify-writes while its guard is valid, and ends the hold; what they share.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkit_core::{Error, HoldKind, LockGuard, LockHandle};

use super::config::{ChaosConfig, Primitive};
use super::report::ChaosReport;
use crate::FencedResource;
use crate::harness::TestClient;
use crate::history::{History, Hold};
use crate::rng::Rng;
use crate::sync::locked;

/// One accepted or refused write, as the resource stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) client: usize,
    /// The hold's id in the run (an index into `Shared::holds`).
    pub(super) hold: usize,
    pub(super) token: u64,
    /// The client's write sequence number.
    pub(super) seq: u64,
    /// The counter read before the write, plus one.
    pub(super) counter: u64,
}

/// How a write went, as the writer saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WriteOutcome {
    /// Accepted, and the guard was still valid right after.
    Valid,
    /// Accepted, but the guard was no longer valid right after.
    Late,
    /// Refused as stale while the guard was still valid after: a violation.
    RefusedWhileValid,
    /// Refused as stale after the guard stopped being valid: fencing at work.
    Refused,
}

#[derive(Clone, Debug)]
pub(super) struct WriteRecord {
    pub(super) name: usize,
    pub(super) entry: Entry,
    pub(super) outcome: WriteOutcome,
    pub(super) at: Instant,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) acquisitions: AtomicU64,
    pub(super) busy: AtomicU64,
    pub(super) timeouts: AtomicU64,
    pub(super) cancelled: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) releases: AtomicU64,
    pub(super) drops: AtomicU64,
    pub(super) losses: AtomicU64,
    pub(super) expired_on_arrival: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// What the workers share.
pub(super) struct Shared {
    pub(super) names: Vec<String>,
    pub(super) resources: Vec<FencedResource<Entry>>,
    pub(super) history: History,
    /// Every hold by id, filled in when it ends; also recorded in `history`.
    pub(super) holds: Mutex<Vec<Option<Hold>>>,
    pub(super) writes: Mutex<Vec<WriteRecord>>,
    pub(super) stop: AtomicBool,
    pub(super) counters: Counters,
    /// The last acquisition of each client.
    pub(super) progress: Vec<Mutex<Option<Instant>>>,
    /// Whether each client holds a lock right now: `NOT_HOLDING`, `SHORT_HOLD` or `LONG_HOLD`
    /// (client faults aim at holders, long ones first).
    pub(super) holding: Vec<AtomicU8>,
    /// The current client of each worker, with its generation (bumped on replacement).
    pub(super) slots: Vec<Mutex<(TestClient, u32)>>,
    pub(super) max_hold: Duration,
    pub(super) long_hold_every: u64,
    pub(super) long_hold: (Duration, Duration),
    pub(super) op_limit: Duration,
    pub(super) primitive: Primitive,
    /// Reads made by readers while their guard was valid, and those refused as stale then
    /// (a violation: a writer wrote while the reader held).
    pub(super) reads: AtomicU64,
    pub(super) reads_refused_while_valid: Mutex<Vec<String>>,
}

pub(super) const NOT_HOLDING: u8 = 0;
pub(super) const SHORT_HOLD: u8 = 1;
pub(super) const LONG_HOLD: u8 = 2;

impl Shared {
    /// What the clients of a run on `names` share, with `clients` connected already.
    pub(super) fn new(
        names: Vec<String>,
        clients: Vec<TestClient>,
        config: &ChaosConfig,
        lease: Option<Duration>,
        op_limit: Duration,
    ) -> Self {
        let count = clients.len();
        Self {
            resources: names.iter().map(|_| FencedResource::new()).collect(),
            names,
            history: History::new(),
            holds: Mutex::new(Vec::new()),
            writes: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            counters: Counters::default(),
            progress: (0..count).map(|_| Mutex::new(None)).collect(),
            holding: (0..count).map(|_| AtomicU8::new(NOT_HOLDING)).collect(),
            slots: clients.into_iter().map(|client| Mutex::new((client, 0))).collect(),
            max_hold: config.max_hold,
            long_hold_every: config.long_hold_every,
            long_hold: match lease {
                Some(lease) => (lease / 2, lease * 2),
                None => (config.max_hold * 2, config.max_hold * 8),
            },
            op_limit,
            primitive: config.primitive,
            reads: AtomicU64::new(0),
            reads_refused_while_valid: Mutex::new(Vec::new()),
        }
    }
}

impl Counters {
    /// Copies the counts into `report`.
    pub(super) fn fill(&self, report: &mut ChaosReport) {
        report.acquisitions = self.acquisitions.load(Ordering::Relaxed);
        report.busy = self.busy.load(Ordering::Relaxed);
        report.timeouts = self.timeouts.load(Ordering::Relaxed);
        report.cancelled = self.cancelled.load(Ordering::Relaxed);
        report.errors = self.errors.load(Ordering::Relaxed);
        report.releases = self.releases.load(Ordering::Relaxed);
        report.drops = self.drops.load(Ordering::Relaxed);
        report.losses = self.losses.load(Ordering::Relaxed);
        report.expired_on_arrival = self.expired_on_arrival.load(Ordering::Relaxed);
    }
}

/// The handles of one name for one client: the one to acquire most of the time, and for a
/// read-write lock the writer.
struct Handles {
    main: LockHandle,
    writer: Option<LockHandle>,
}

impl Handles {
    fn new(client: &TestClient, name: &str, primitive: Primitive) -> lockkit_core::Result<Self> {
        Ok(match primitive {
            Primitive::Mutex => Self { main: client.provider.lock(name)?, writer: None },
            Primitive::ReadWrite => {
                let rw = client.provider.rw_lock(name)?;
                Self { main: rw.reader().clone(), writer: Some(rw.writer().clone()) }
            }
            Primitive::Semaphore(permits) => Self { main: client.provider.semaphore(name, permits)?, writer: None },
            Primitive::Election => {
                let identity = format!("chaos-candidate-{}", uuid::Uuid::new_v4().simple());
                Self { main: client.provider.election(name)?.candidate(identity)?, writer: None }
            }
        })
    }

    /// The handle for the next acquisition: the writer one time in four, else the main one.
    fn pick(&self, rng: &mut Rng) -> &LockHandle {
        match &self.writer {
            Some(writer) if rng.below(4) == 0 => writer,
            _ => &self.main,
        }
    }
}

/// One client's loop: pick a name, acquire one of four ways, write while valid, end the hold.
pub(super) async fn worker(index: usize, shared: Arc<Shared>, mut rng: Rng) {
    let mut handles: Vec<Option<Handles>> = (0..shared.names.len()).map(|_| None).collect();
    let mut generation = u32::MAX;
    let mut seq = 0u64;
    while !shared.stop.load(Ordering::SeqCst) {
        let (client, current) = {
            let slot = locked(&shared.slots[index]);
            (slot.0.clone(), slot.1)
        };
        if current != generation {
            generation = current;
            handles.iter_mut().for_each(|h| *h = None);
        }
        let name = rng.below(shared.names.len() as u64) as usize;
        if handles[name].is_none() {
            match Handles::new(&client, &shared.names[name], shared.primitive) {
                Ok(handle) => handles[name] = Some(handle),
                Err(_) => {
                    bump(&shared.counters.errors);
                    backoff(&mut rng).await;
                    continue;
                }
            }
        }
        let Some(lock) = handles[name].as_ref().map(|handles| handles.pick(&mut rng).clone()) else { continue };
        let Some(guard) = acquire(&lock, &shared, &mut rng).await else { continue };
        let start = Instant::now();
        let mut seen = Seen { start, held: guard.is_held().then_some(start) };
        let id = {
            let mut holds = locked(&shared.holds);
            holds.push(None);
            holds.len() - 1
        };
        bump(&shared.counters.acquisitions);
        *locked(&shared.progress[index]) = Some(start);
        hold_and_write(index, name, id, &guard, &shared, &mut rng, &mut seq, &mut seen).await;
        shared.holding[index].store(NOT_HOLDING, Ordering::SeqCst);
        let label = format!("client {index} (gen {generation}) hold #{id}");
        end_hold(id, label, guard, &shared, &mut rng, seen).await;
    }
}

/// The moments a hold was seen valid.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// When the acquisition returned.
    start: Instant,
    /// The latest instant at which the guard said it was held (taken before asking, so the
    /// hold was valid then: `is_held` only ever goes from true to false).
    held: Option<Instant>,
}

impl Seen {
    /// Asks the guard and notes the instant when it says it is held.
    fn check(&mut self, guard: &LockGuard) -> bool {
        let now = Instant::now();
        let held = guard.is_held();
        if held {
            self.held = Some(now);
        }
        held
    }
}

async fn backoff(rng: &mut Rng) {
    tokio::time::sleep(rng.between(Duration::from_millis(20), Duration::from_millis(100))).await;
}

/// One acquisition, drawn among `try_acquire`, `acquire_timeout`, a cancelled `acquire` and a
/// plain `acquire` (bounded, so a dead client cannot hang the run).
async fn acquire(lock: &LockHandle, shared: &Shared, rng: &mut Rng) -> Option<LockGuard> {
    let c = &shared.counters;
    let outcome = match rng.below(10) {
        0 | 1 => match tokio::time::timeout(shared.op_limit, lock.try_acquire()).await {
            Ok(Ok(None)) => {
                bump(&c.busy);
                backoff(rng).await;
                return None;
            }
            Ok(Ok(Some(guard))) => Ok(guard),
            Ok(Err(error)) => Err(error),
            Err(_) => {
                bump(&c.cancelled);
                return None;
            }
        },
        2 | 3 => {
            let wait = rng.between(Duration::from_millis(20), Duration::from_millis(600));
            match tokio::time::timeout(wait + shared.op_limit, lock.acquire_timeout(wait)).await {
                Ok(result) => result,
                Err(_) => {
                    bump(&c.cancelled);
                    return None;
                }
            }
        }
        4 => {
            // Cancel the acquisition mid-wait by dropping its future.
            let wait = rng.between(Duration::from_millis(1), Duration::from_millis(250));
            match tokio::time::timeout(wait, lock.acquire()).await {
                Ok(result) => result,
                Err(_) => {
                    bump(&c.cancelled);
                    return None;
                }
            }
        }
        _ => match tokio::time::timeout(shared.op_limit, lock.acquire()).await {
            Ok(result) => result,
            Err(_) => {
                bump(&c.cancelled);
                return None;
            }
        },
    };
    match outcome {
        Ok(guard) => Some(guard),
        Err(Error::Timeout { .. }) => {
            bump(&c.timeouts);
            None
        }
        Err(_) => {
            bump(&c.errors);
            backoff(rng).await;
            None
        }
    }
}

/// Holds for a random short time, making one to three read-modify-write steps on the name's
/// resource while the guard is valid.
#[allow(clippy::too_many_arguments)]
async fn hold_and_write(
    client: usize,
    name: usize,
    hold: usize,
    guard: &LockGuard,
    shared: &Shared,
    rng: &mut Rng,
    seq: &mut u64,
    seen: &mut Seen,
) {
    let resource = &shared.resources[name];
    let long = shared.long_hold_every > 0 && rng.below(shared.long_hold_every) == 0;
    let (steps, total) = if long {
        (3 + rng.below(6), rng.between(shared.long_hold.0, shared.long_hold.1))
    } else {
        (1 + rng.below(3), rng.between(Duration::ZERO, shared.max_hold))
    };
    shared.holding[client].store(if long { LONG_HOLD } else { SHORT_HOLD }, Ordering::SeqCst);
    for step in 0..steps {
        if step > 0 {
            let gap = total / steps as u32;
            tokio::select! {
                () = tokio::time::sleep(gap) => {}
                _ = guard.lost() => return,
            }
        }
        if !seen.check(guard) {
            return;
        }
        match guard.kind() {
            HoldKind::Read => {
                let read = resource.read(guard.token());
                if seen.check(guard) {
                    bump(&shared.reads);
                    if let Err(stale) = read {
                        locked(&shared.reads_refused_while_valid)
                            .push(format!("client {client} hold #{hold} on name {name}: {stale}"));
                        return;
                    }
                }
                continue;
            }
            HoldKind::Permit { .. } => continue,
            _ => {}
        }
        *seq += 1;
        let counter = resource.accepted().last().map_or(0, |(_, e)| e.counter) + 1;
        let entry = Entry { client, hold, token: guard.token().get(), seq: *seq, counter };
        let result = resource.write(guard.token(), entry.clone());
        let valid = seen.check(guard);
        let outcome = match (result.is_ok(), valid) {
            (true, true) => WriteOutcome::Valid,
            (true, false) => WriteOutcome::Late,
            (false, true) => WriteOutcome::RefusedWhileValid,
            (false, false) => WriteOutcome::Refused,
        };
        locked(&shared.writes).push(WriteRecord { name, entry, outcome, at: Instant::now() });
        if result.is_err() {
            return;
        }
    }
    let rest = rng.between(Duration::ZERO, shared.max_hold / 4);
    tokio::select! {
        () = tokio::time::sleep(rest) => {}
        _ = guard.lost() => {}
    }
}

/// Ends a hold: records it, then releases or drops the guard.
///
/// The recorded end is now when the guard is still held, else the last instant it was seen
/// held: the recorded hold is then a subset of the real one (a loss is signalled at some
/// instant between the two, which the client cannot observe), so an overlap the checker
/// reports is real.
async fn end_hold(id: usize, client: String, guard: LockGuard, shared: &Shared, rng: &mut Rng, mut seen: Seen) {
    let c = &shared.counters;
    let lost = !seen.check(&guard);
    if lost {
        bump(&c.losses);
    }
    let hold = Hold {
        client,
        lock: guard.name().as_str().to_owned(),
        token: guard.token().get(),
        kind: guard.kind().clone(),
        start: seen.start,
        end: Some(seen.held.unwrap_or(seen.start)),
        valid_until: guard.valid_until(),
    };
    // A guard that was not held at its first look (its deadline passed before the acquisition
    // returned, as after a stall of the client) had an empty validity: it was never a hold,
    // and its holder did nothing under it. The history gets the holds that were valid.
    if seen.held.is_some() {
        shared.history.record(hold.clone());
    } else {
        bump(&c.expired_on_arrival);
    }
    if let Some(slot) = locked(&shared.holds).get_mut(id) {
        *slot = Some(hold);
    }
    if rng.below(4) == 0 {
        bump(&c.drops);
        drop(guard);
        return;
    }
    bump(&c.releases);
    match tokio::time::timeout(shared.op_limit, guard.release()).await {
        Ok(Ok(()) | Err(Error::LockLost { .. })) => {}
        Ok(Err(_)) | Err(_) => bump(&c.errors),
    }
}
