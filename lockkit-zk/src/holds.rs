//! The live holds of one session ([`HoldTable`]): their signals, renewed and lost together,
//! and, while the session watches its base path recursively, the path of each hold's node
//! registered meanwhile, so that one watch tells all their deletions (see the session
//! module). No I/O.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use lockkit_core::LossReason;
use lockkit_core::backend::HoldSignal;

/// How many deletions of nodes that are no hold's the table remembers: a node deleted
/// between its create's reply and its hold's registration (the watch's event and the grant
/// run on different tasks) is then still found at the registration.
const RECENT_DELETIONS: usize = 256;

/// One live hold.
struct Entry {
    signal: HoldSignal,
    /// The hold's node, when the session's recursive watch tells its deletion.
    path: Option<Arc<str>>,
}

/// The live holds of a session.
#[derive(Default)]
pub(crate) struct HoldTable {
    /// Whether the session's recursive watch is set: holds registered now are watched by it.
    pub(crate) watching: bool,
    holds: HashMap<u64, Entry>,
    /// The hold of each watched node.
    paths: HashMap<Arc<str>, u64>,
    /// The latest deletions of nodes that were no hold's, oldest first.
    deleted: VecDeque<Arc<str>>,
    next_id: u64,
}

impl HoldTable {
    /// Adds a live hold of the node at `path`, watched by the session's recursive watch if it
    /// is set. Returns its id, whether the recursive watch covers it, and whether its node was
    /// deleted already (the hold is then lost).
    pub(crate) fn insert(&mut self, signal: HoldSignal, path: &Arc<str>) -> (u64, bool, bool) {
        let id = self.next_id;
        self.next_id += 1;
        let watched = self.watching.then(|| Arc::clone(path));
        let gone = watched.is_some() && self.deleted.iter().any(|deleted| deleted == path);
        if let Some(path) = &watched {
            self.paths.insert(Arc::clone(path), id);
        }
        let covered = watched.is_some();
        self.holds.insert(id, Entry { signal, path: watched });
        (id, covered, gone)
    }

    /// Stops covering new holds with the recursive watch when it covers none and fewer than
    /// `below` holds are live; whether it did (the watch can go).
    pub(crate) fn stop_watching(&mut self, below: usize) -> bool {
        if self.watching && self.paths.is_empty() && self.holds.len() < below {
            self.watching = false;
            return true;
        }
        false
    }

    /// Forgets a hold (released or lost).
    pub(crate) fn remove(&mut self, id: u64) {
        if let Some(Entry { path: Some(path), .. }) = self.holds.remove(&id) {
            self.paths.remove(&path);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.holds.len()
    }

    /// Every live hold's signal.
    pub(crate) fn signals(&self) -> Vec<HoldSignal> {
        self.holds.values().map(|entry| entry.signal.clone()).collect()
    }

    /// Every live hold whose node is watched, with its node.
    pub(crate) fn watched(&self) -> Vec<(Arc<str>, HoldSignal)> {
        self.holds.values().filter_map(|entry| Some((Arc::clone(entry.path.as_ref()?), entry.signal.clone()))).collect()
    }

    /// Takes every hold out: the session lost them all. The nodes that may still exist (and
    /// block their queue) are returned when `reason` leaves them behind.
    pub(crate) fn drain(&mut self) -> Vec<(HoldSignal, Option<Arc<str>>)> {
        self.paths.clear();
        self.holds.drain().map(|(_, entry)| (entry.signal, entry.path)).collect()
    }

    /// The node at `path` was deleted: its hold, taken out, if it is one's; else remembered
    /// for a registration that may come.
    pub(crate) fn node_deleted(&mut self, path: &str) -> Option<HoldSignal> {
        match self.paths.remove(path) {
            Some(id) => self.holds.remove(&id).map(|entry| entry.signal),
            None => {
                if self.deleted.len() == RECENT_DELETIONS {
                    self.deleted.pop_front();
                }
                self.deleted.push_back(Arc::from(path));
                None
            }
        }
    }

    /// Takes out the watched holds that ended on their own (a passed deadline, the maximum
    /// hold, a guard dropped after its loss); the nodes among them that may still exist.
    pub(crate) fn sweep(&mut self) -> Vec<Arc<str>> {
        let ended: Vec<u64> = self
            .holds
            .iter()
            .filter(|(_, entry)| entry.path.is_some() && !entry.signal.is_held())
            .map(|(id, _)| *id)
            .collect();
        let mut left = Vec::new();
        for id in ended {
            if let Some(Entry { signal, path: Some(path) }) = self.holds.remove(&id) {
                self.paths.remove(&path);
                if leaves_node(signal.loss().as_ref()) {
                    left.push(path);
                }
            }
        }
        left
    }
}

/// Whether a hold lost for `reason` may leave its node behind, to be deleted: not when the
/// node is gone, the session ended (its nodes with it) or the session's tasks are gone, nor
/// for a hold released (no loss).
pub(crate) fn leaves_node(reason: Option<&LossReason>) -> bool {
    !matches!(reason, Some(LossReason::RecordGone | LossReason::SessionExpired | LossReason::ClientClosed) | None)
}
