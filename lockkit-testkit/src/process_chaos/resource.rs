//! The resource the workers of a multi-process run write to: one fenced counter per lock name.
//!
//! Two places for it:
//!
//! - **In the parent** ([`FencedSink`], [`MemorySink`]): a worker asks for the counter and
//!   asks the parent to write `counter + 1` with its token; the parent fences the write and
//!   classifies it in the order it saw it.
//! - **In a real store, through a real fence** ([`StoreWriter`], a run with
//!   [`ProcessChaosConfig::sink`](super::ProcessChaosConfig::sink)): each worker reads and
//!   writes the counter itself through the [`FenceSink`] the test's opener returns
//!   (lockkit-fence on PostgreSQL, Redis, files), so a paused worker's late write travels the
//!   real path: its own connection, its own transaction, the store's own check when it
//!   resumes. The value written is `COUNTER UID`: the write's id beside the counter, so that
//!   the parent can walk the store's surviving history back from the final value (each write
//!   announced the id it read) and tell which accepted writes were overwritten unseen.
//!
//! The testkit knows lockkit-fence's trait only: the test opens the concrete sink (and, for
//! the planted bug, one that bypasses the fence), so the kit needs no store client.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::{FencingToken, LockName};
use lockkit_fence::{Fence, FenceError, FenceMode, FenceSink, LockId};

use super::protocol::{now_ns, say};
use crate::rng::Rng;

/// What a sink says of a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SinkWrite {
    /// Written: no higher token had written to that name before.
    Accepted,
    /// Refused: a higher token had written to that name (the writer's hold is stale).
    Stale,
}

/// One fenced counter per lock name (names are indexes in the run's list of names).
pub(crate) trait FencedSink: Send + fmt::Debug {
    /// The counter of `name` now; `None` for a name the run does not have.
    fn read(&mut self, name: usize) -> Option<u64>;

    /// Writes `counter` to `name` with `token`, unless a higher token wrote to `name` before;
    /// `None` for a name the run does not have.
    fn write(&mut self, name: usize, token: u64, counter: u64) -> Option<SinkWrite>;
}

/// The default sink: the counters in the parent's memory, fenced as a store with fencing does
/// (a token below the highest seen is refused; an equal one is the same hold writing again).
#[derive(Debug, Default)]
pub(crate) struct MemorySink {
    /// Per name: the highest token that wrote, and the counter.
    names: Vec<(u64, u64)>,
}

impl MemorySink {
    /// Counters at zero for `names` names.
    pub(crate) fn new(names: usize) -> Self {
        Self { names: vec![(0, 0); names] }
    }
}

impl FencedSink for MemorySink {
    fn read(&mut self, name: usize) -> Option<u64> {
        self.names.get(name).map(|&(_, counter)| counter)
    }

    fn write(&mut self, name: usize, token: u64, counter: u64) -> Option<SinkWrite> {
        let (highest, value) = self.names.get_mut(name)?;
        if token < *highest {
            return Some(SinkWrite::Stale);
        }
        (*highest, *value) = (token, counter);
        Some(SinkWrite::Accepted)
    }
}

/// Opens the sink of a fenced run from its target and whether the fence is bypassed (the
/// planted bug); the test's opener, boxed.
pub(crate) type Opener =
    Arc<dyn Fn(String, bool) -> Pin<Box<dyn Future<Output = Result<Arc<dyn FenceSink>, String>> + Send>> + Send + Sync>;

/// Boxes the test's opener.
pub(crate) fn opener<O, Fut>(open: O) -> Opener
where
    O: Fn(String, bool) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Arc<dyn FenceSink>, String>> + Send + 'static,
{
    Arc::new(move |target, bypassed| Box::pin(open(target, bypassed)))
}

/// The value a fenced run writes: the counter and the write's id.
pub(crate) fn encode(counter: u64, uid: u64) -> Vec<u8> {
    format!("{counter} {uid}").into_bytes()
}

/// The counter and the id of the write that wrote `value` (`(0, 0)` before the first write).
///
/// # Errors
///
/// What the value holds instead, when it is not a run's value.
pub(crate) fn decode(value: Option<&[u8]>) -> Result<(u64, u64), String> {
    let Some(value) = value else { return Ok((0, 0)) };
    let text = String::from_utf8_lossy(value);
    let mut words = text.split_whitespace().map(str::parse::<u64>);
    match (words.next(), words.next(), words.next()) {
        (Some(Ok(counter)), Some(Ok(uid)), None) => Ok((counter, uid)),
        _ => Err(format!("the store holds {text:?}, not a run's COUNTER UID")),
    }
}

/// A fresh write id: random, never 0 (0 is "no write").
fn fresh_uid() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0 | 1
}

/// The longest a sink call (or an open) may take before the worker gives up on it and opens
/// the sink again: well past a paused store (up to a lease) or a restart.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How one read-modify-write through a store ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cycle {
    /// Written: the hold may write again.
    Written,
    /// The store refused the read or the write as stale (or of another lock): the hold is
    /// over, as a real worker stops.
    Refused,
    /// The store failed or did not answer in time (the write may have landed): the sink is
    /// opened again at the next use; the hold stops.
    Failed,
    /// The parent is gone.
    Gone,
}

/// A worker's (or a `lockkit run` command's) way to the store of a fenced run: the sink,
/// opened on first use and again after a failure.
pub(crate) struct StoreWriter {
    open: Opener,
    target: String,
    bypassed: bool,
    sink: Option<Arc<dyn FenceSink>>,
}

impl StoreWriter {
    /// A writer to `target` through `open`.
    pub(crate) fn new(open: Opener, target: String, bypassed: bool) -> Self {
        Self { open, target, bypassed, sink: None }
    }

    async fn sink(&mut self) -> Result<Arc<dyn FenceSink>, String> {
        if let Some(sink) = &self.sink {
            return Ok(Arc::clone(sink));
        }
        let opened = tokio::time::timeout(CALL_TIMEOUT, (self.open)(self.target.clone(), self.bypassed))
            .await
            .map_err(|_| format!("opening the sink of {} took over {} s", self.target, CALL_TIMEOUT.as_secs()))??;
        self.sink = Some(Arc::clone(&opened));
        Ok(opened)
    }

    /// One read-modify-write of `resource` (the run's name `index`) under `fence`: reads the
    /// counter, works 5 to 60 ms (where a pause hurts), writes `counter + 1`. Says `write
    /// NAME TOKEN COUNTER UID PREV CHECKED SENT VALID` before the write (so that the parent
    /// knows every write that may reach the store, a killed worker's too) and `wrote NAME
    /// TOKEN UID OUTCOME REPLIED` after, OUTCOME `ok`, `stale`, `foreign` or `error`; a read
    /// refused as stale is `readrefused NAME TOKEN`. `checked` is when the hold was last seen
    /// valid, `valid` gives the hold's deadline at the write (`-` for none).
    pub(crate) async fn cycle(
        &mut self,
        index: usize,
        resource: &str,
        fence: &Fence,
        checked: u64,
        valid: impl Fn() -> String,
        rng: &mut Rng,
    ) -> Cycle {
        let token = fence.token().get();
        let sink = match self.sink().await {
            Ok(sink) => sink,
            Err(error) => {
                eprintln!("fenced writer: {error}");
                return Cycle::Failed;
            }
        };
        let read = tokio::time::timeout(CALL_TIMEOUT, sink.read(resource, fence)).await;
        let (counter, prev) = match read {
            Ok(Ok(value)) => match decode(value.as_deref()) {
                Ok(read) => read,
                Err(error) => {
                    eprintln!("fenced writer: {error}");
                    return Cycle::Failed;
                }
            },
            Ok(Err(FenceError::Stale { .. } | FenceError::ForeignLock { .. })) => {
                return if say(&format!("readrefused {index} {token}")) { Cycle::Refused } else { Cycle::Gone };
            }
            Ok(Err(_)) | Err(_) => {
                self.sink = None;
                return Cycle::Failed;
            }
        };
        tokio::time::sleep(rng.between(Duration::from_millis(5), Duration::from_millis(60))).await;
        let uid = fresh_uid();
        let counter = counter + 1;
        let sent = now_ns();
        if !say(&format!("write {index} {token} {counter} {uid} {prev} {checked} {sent} {}", valid())) {
            return Cycle::Gone;
        }
        let started = Instant::now();
        let written = tokio::time::timeout(CALL_TIMEOUT, sink.write(resource, fence, &encode(counter, uid))).await;
        let replied = now_ns();
        let (outcome, cycle) = match written {
            Ok(Ok(())) => ("ok", Cycle::Written),
            Ok(Err(FenceError::Stale { .. })) => ("stale", Cycle::Refused),
            Ok(Err(FenceError::ForeignLock { .. })) => ("foreign", Cycle::Refused),
            Ok(Err(error)) => {
                eprintln!("fenced writer: the write failed after {:?}: {error}", started.elapsed());
                self.sink = None;
                ("error", Cycle::Failed)
            }
            Err(_) => {
                self.sink = None;
                ("error", Cycle::Failed)
            }
        };
        if !say(&format!("wrote {index} {token} {uid} {outcome} {replied}")) {
            return Cycle::Gone;
        }
        cycle
    }
}

/// The final value of each of `names` in a fenced run's store, read through `sink` with a
/// read fence at the highest token the fence keeps (or, before any fenced write, of a lock of
/// the parent's own: no fence refuses a read of an unfenced resource).
pub(crate) async fn final_values(sink: &dyn FenceSink, names: &[String]) -> Vec<Result<(u64, u64), String>> {
    let mut finals = Vec::with_capacity(names.len());
    for name in names {
        let read = async {
            let fence = match sink.state(name).await.map_err(|error| error.to_string())? {
                Some(state) => {
                    let lock: LockId = state
                        .lock
                        .parse()
                        .map_err(|error| format!("the fence keeps lock {:?}: {error}", state.lock))?;
                    Fence::new(lock, state.highest, FenceMode::Read)
                }
                None => {
                    let name = LockName::new(name).map_err(|error| error.to_string())?;
                    let lock = LockId::new("process-chaos://final-read", name).map_err(|error| error.to_string())?;
                    Fence::new(lock, FencingToken::new(0), FenceMode::Read)
                }
            };
            let value =
                sink.read(name, &fence).await.map_err(|error| format!("reading the final value failed: {error}"))?;
            decode(value.as_deref())
        };
        finals.push(match tokio::time::timeout(CALL_TIMEOUT, read).await {
            Ok(last) => last,
            Err(_) => Err(format!("reading the final value took over {} s", CALL_TIMEOUT.as_secs())),
        });
    }
    finals
}

impl fmt::Debug for StoreWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreWriter").field("target", &self.target).field("bypassed", &self.bypassed).finish()
    }
}

impl Default for Box<dyn FencedSink> {
    fn default() -> Self {
        Box::new(MemorySink::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_sink_refuses_a_token_below_the_highest_that_wrote() {
        let mut sink = MemorySink::new(2);
        assert_eq!(sink.write(0, 5, 1), Some(SinkWrite::Accepted));
        assert_eq!(sink.write(0, 5, 2), Some(SinkWrite::Accepted));
        assert_eq!(sink.write(0, 4, 3), Some(SinkWrite::Stale));
        assert_eq!(sink.read(0), Some(2));
        // Names are independent.
        assert_eq!(sink.write(1, 1, 7), Some(SinkWrite::Accepted));
        assert_eq!((sink.read(1), sink.read(2), sink.write(2, 1, 1)), (Some(7), None, None));
    }

    #[test]
    fn values_carry_the_counter_and_the_write() {
        assert_eq!(decode(None), Ok((0, 0)));
        assert_eq!(decode(Some(&encode(7, 42))), Ok((7, 42)));
        assert!(decode(Some(b"7")).unwrap_err().contains("COUNTER UID"));
        assert_ne!(fresh_uid(), 0);
    }
}
