//! The resource the workers of a multi-process run write to: one fenced counter per lock name,
//! behind [`FencedSink`], so that a run can write through a real fence (a table, a key, a file)
//! instead of the parent's memory.
//!
//! The parent calls the sink for every `read` and `write` line a worker sends, under the lock
//! of the run's bookkeeping, so that a write and its classification (valid, late, lost) are
//! one step in the order the sink saw them. A sink that does I/O keeps each call short.

use std::fmt;

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
}
