//! The live holds of one session ([`HoldTable`]): their signals, renewed and lost together,
//! and, while the session watches its base path recursively, the path of each hold's node
//! registered meanwhile, so that one watch tells all their deletions (see the session
//! module). No I/O.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use lockkit_core::backend::HoldSignal;
use lockkit_core::{HoldCoverage, LossReason};

/// How many deletions of nodes that are no hold's the table remembers: a node deleted
/// between its create's reply and its hold's registration (the watch's event and the grant
/// run on different tasks) is then still found at the registration.
const RECENT_DELETIONS: usize = 256;

/// One live hold.
struct Entry {
    signal: HoldSignal,
    /// Whether the session's recursive watch tells its node's deletion (else its own task does).
    watched: bool,
}

/// The live holds of a session, by their node's path (unique: a node name carries its
/// acquisition's id).
#[derive(Default)]
pub(crate) struct HoldTable {
    /// Whether the session's recursive watch is set: holds registered now are watched by it.
    pub(crate) watching: bool,
    holds: HashMap<Arc<str>, Entry>,
    /// How many live holds the recursive watch covers.
    watched: usize,
    /// The latest deletions of nodes that were no hold's, oldest first.
    deleted: VecDeque<Arc<str>>,
}

impl HoldTable {
    /// Adds a live hold of the node at `path`, watched by the session's recursive watch if it
    /// is set. Returns whether the recursive watch covers it, and whether its node was
    /// deleted already (the hold is then lost).
    pub(crate) fn insert(&mut self, signal: HoldSignal, path: &Arc<str>) -> (bool, bool) {
        let watched = self.watching;
        let gone = watched && self.deleted.iter().any(|deleted| deleted == path);
        if let Some(old) = self.holds.insert(Arc::clone(path), Entry { signal, watched })
            && old.watched
        {
            self.watched -= 1;
        }
        if watched {
            self.watched += 1;
        }
        (watched, gone)
    }

    /// Moves every live hold onto the recursive watch, now set: those that watched their own
    /// node stop doing so (the session's `take_over_holds`), which frees their task and watch.
    pub(crate) fn cover_all(&mut self) {
        for entry in self.holds.values_mut() {
            entry.watched = true;
        }
        self.watched = self.holds.len();
    }

    /// Whether the hold of the node at `path` is live and covered by the recursive watch.
    pub(crate) fn is_watched(&self, path: &str) -> bool {
        self.holds.get(path).is_some_and(|entry| entry.watched)
    }

    /// Forgets a hold (released or lost).
    pub(crate) fn remove(&mut self, path: &str) -> Option<HoldSignal> {
        let entry = self.holds.remove(path)?;
        if entry.watched {
            self.watched -= 1;
        }
        Some(entry.signal)
    }

    pub(crate) fn len(&self) -> usize {
        self.holds.len()
    }

    /// How the live holds hear of their node's deletion.
    pub(crate) fn coverage(&self) -> HoldCoverage {
        HoldCoverage {
            store_wide_watch: self.watching,
            store_wide: self.watched,
            per_hold: self.holds.len() - self.watched,
        }
    }

    /// Every live hold's signal.
    pub(crate) fn signals(&self) -> Vec<HoldSignal> {
        self.holds.values().map(|entry| entry.signal.clone()).collect()
    }

    /// Every live hold the recursive watch covers, with its node.
    pub(crate) fn watched(&self) -> Vec<(Arc<str>, HoldSignal)> {
        self.holds
            .iter()
            .filter(|(_, entry)| entry.watched)
            .map(|(path, entry)| (Arc::clone(path), entry.signal.clone()))
            .collect()
    }

    /// Takes every hold out: the session lost them all. Each comes with its node when the
    /// recursive watch covers it (the session deletes such nodes if the loss leaves them).
    pub(crate) fn drain(&mut self) -> Vec<(HoldSignal, Option<Arc<str>>)> {
        self.watched = 0;
        self.holds.drain().map(|(path, entry)| (entry.signal, entry.watched.then_some(path))).collect()
    }

    /// The node at `path` was deleted: its hold, taken out, if the recursive watch covers it
    /// (a hold that watches its own node hears it there); remembered for a registration that
    /// may come if it is no hold's.
    pub(crate) fn node_deleted(&mut self, path: &str) -> Option<HoldSignal> {
        match self.holds.get(path) {
            Some(entry) if entry.watched => self.remove(path),
            Some(_) => None,
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
        let ended: Vec<Arc<str>> = self
            .holds
            .iter()
            .filter(|(_, entry)| entry.watched && !entry.signal.is_held())
            .map(|(path, _)| Arc::clone(path))
            .collect();
        let mut left = Vec::new();
        for path in ended {
            if let Some(signal) = self.remove(&path)
                && leaves_node(signal.loss().as_ref())
            {
                left.push(path);
            }
        }
        left
    }

    /// Stops covering new holds with the recursive watch when it covers none and fewer than
    /// `below` holds are live; whether it did (the watch can go).
    pub(crate) fn stop_watching(&mut self, below: usize) -> bool {
        if self.watching && self.watched == 0 && self.holds.len() < below {
            self.watching = false;
            return true;
        }
        false
    }
}

/// Whether a hold lost for `reason` may leave its node behind, to be deleted: not when the
/// node is gone, the session ended (its nodes with it) or the session's tasks are gone, nor
/// for a hold released (no loss).
pub(crate) fn leaves_node(reason: Option<&LossReason>) -> bool {
    !matches!(reason, Some(LossReason::RecordGone | LossReason::SessionExpired | LossReason::ClientClosed) | None)
}
