//! Who holds, from the queue of contender nodes alone: [`judge`] says whether a node holds,
//! waits (and on which nodes ahead), or is refused for a conflict of uses. No I/O; the
//! recipe (recipe.rs) acts on the verdict.
//!
//! [`judge`] is the whole driver, after Curator's `getsTheLock` and kazoo's exclude lists:
//!
//! - a mutex (`lock`), writer (`write`) or election candidate (`candidate`) node holds when no
//!   node is ahead of it (a candidate that holds leads);
//! - a reader (`read`) holds when no `lock` or `write` node is ahead of it, a write node
//!   downgraded to a read excepted (its data says so, and only the first node can be one);
//!   nodes behind it never count ([kazoo#649](https://github.com/python-zk/kazoo/issues/649):
//!   a reader that waited for a later writer deadlocked with it);
//! - a permit of N (`permit-N`) holds when fewer than N nodes are ahead of it;
//! - a node with a node of another use ahead of it (a semaphore node behind a mutex or
//!   read-write node, or behind a semaphore node of another count, a candidate behind any
//!   other kind, and the reverses) is refused with `Error::Conflict` and deleted: of two uses
//!   of one name, the later arrival is refused,
//!   and no two uses ever hold at once (the later one lists after its create, so it sees the
//!   earlier one while it exists).
//!

use crate::names::{Contender, NodeKind};
use crate::record;

/// Up to how many nodes ahead of ours are all watched, so that the deletions that free our
/// turn grant it without listing the queue. Each watch costs the server one read when we
/// queue and one notification per deletion; watching everyone ahead at every depth would make
/// a queue of n waiters cost O(n²) reads and notifications. 16 covers the queues lockkit is
/// tuned for (a handful of contenders per lock) at a bounded 17 reads per wait; a deeper
/// waiter watches one node and lists when it changes, and watches all once it is within the
/// bound.
pub(crate) const WATCH_ALL_AHEAD: usize = 16;

/// What the queue says about one contender node.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The node holds.
    Holds,
    /// A node of another use of the name is ahead of it; the text says what to change.
    Conflict(String),
    /// The node waits, watching as the plan says.
    Waits(Plan),
}

/// What a waiting node watches.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Data watches on some nodes ahead.
    Nodes(Watch),
    /// A watch on the list of children: the first waiter of a semaphore of more permits than
    /// [`WATCH_ALL_AHEAD`].
    Children,
}

/// Data watches on nodes ahead of a waiting node.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Watch {
    /// The names of the nodes ahead to watch, in queue order.
    pub(crate) ahead: Vec<String>,
    /// Up to how many of them may still block when the wait ends: 0 for a lock, N - 1 for a
    /// permit of N.
    pub(crate) may_remain: usize,
    /// Whether they are every node that blocks ours: then once no more than `may_remain` of
    /// them block, ours holds, with no list.
    pub(crate) complete: bool,
    /// What a watched node's data means.
    pub(crate) rule: DataRule,
}

/// What the data of a watched node ahead means to a waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DataRule {
    /// Nothing: only its deletion counts.
    Ignore,
    /// A node whose data says it became a read no longer blocks (a reader behind a write hold
    /// that was downgraded).
    ReadClears,
    /// A node whose data says it was granted ends the wait, to list again (a semaphore waiter
    /// behind a waiting predecessor).
    HeldRelooks,
}

/// What a watched node's data says to a waiter.
pub(crate) enum Class {
    Blocks,
    Clear,
    Relook,
}

impl DataRule {
    pub(crate) fn classify(self, data: &[u8]) -> Class {
        match self {
            Self::ReadClears if record::says_read(data) => Class::Clear,
            Self::HeldRelooks if record::says_held(data) => Class::Relook,
            _ => Class::Blocks,
        }
    }
}

/// Whether the node at `position` of `queue` (in queue order) holds, conflicts, or waits, and
/// then what it watches. A reader behind a write node that may have become a read waits on
/// it with [`DataRule::ReadClears`]: the node's data decides.
pub(crate) fn judge(queue: &[Contender], position: usize) -> Verdict {
    let (Some(ahead), Some(me)) = (queue.get(..position), queue.get(position)) else {
        return Verdict::Holds;
    };
    if let Some(other) = ahead.iter().find(|c| c.kind.usage() != me.kind.usage()) {
        return Verdict::Conflict(me.kind.usage().conflict_with(other.kind.usage()));
    }
    let all = |ahead: &[Contender]| ahead.iter().map(|c| c.name.clone()).collect();
    let watch = |ahead: Vec<String>, may_remain: usize, complete: bool, rule: DataRule| {
        Verdict::Waits(Plan::Nodes(Watch { ahead, may_remain, complete, rule }))
    };
    match me.kind {
        NodeKind::Lock | NodeKind::Write | NodeKind::Candidate => match ahead {
            [] => Verdict::Holds,
            _ if ahead.len() <= WATCH_ALL_AHEAD => watch(all(ahead), 0, true, DataRule::Ignore),
            [.., last] => watch(vec![last.name.clone()], 0, false, DataRule::Ignore),
        },
        NodeKind::Read => {
            let mut writers = ahead.iter().filter(|c| c.kind.is_exclusive());
            match writers.next_back() {
                None => Verdict::Holds,
                Some(last) => {
                    // Only a write node can become a read (a mutex is never downgraded).
                    let rule = if last.kind == NodeKind::Write { DataRule::ReadClears } else { DataRule::Ignore };
                    watch(vec![last.name.clone()], 0, writers.next().is_none(), rule)
                }
            }
        }
        NodeKind::Permit(permits) => {
            let permits = usize::try_from(permits.get()).unwrap_or(usize::MAX);
            match ahead {
                _ if ahead.len() < permits => Verdict::Holds,
                _ if ahead.len() <= WATCH_ALL_AHEAD => watch(all(ahead), permits - 1, true, DataRule::Ignore),
                _ if ahead.len() == permits => Verdict::Waits(Plan::Children),
                [] => Verdict::Holds,
                [.., last] => watch(vec![last.name.clone()], 0, false, DataRule::HeldRelooks),
            }
        }
    }
}

/// Whether the node at `position` holds, given whether the first node's data says it is a read
/// (for `inspect`).
pub(crate) fn holds(queue: &[Contender], position: usize, head_is_read: bool) -> bool {
    match judge(queue, position) {
        Verdict::Holds => true,
        Verdict::Waits(Plan::Nodes(watch)) => {
            head_is_read
                && watch.complete
                && watch.rule == DataRule::ReadClears
                && queue.first().is_some_and(|head| watch.ahead == [head.name.as_str()])
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::num::NonZeroU32;

    use uuid::Uuid;

    use super::*;
    use crate::names::{node_prefix, queue};

    /// A queue of nodes of these kinds, with sequences 0, 1, 2, ...
    fn queue_of(kinds: &[NodeKind]) -> Vec<Contender> {
        let children: Vec<String> = kinds
            .iter()
            .enumerate()
            .map(|(i, kind)| {
                let prefix = node_prefix("/p", Uuid::new_v4(), *kind);
                format!("{}{i:010}", prefix.trim_start_matches("/p/"))
            })
            .collect();
        queue(&children)
    }

    fn permits(n: u32) -> NodeKind {
        NodeKind::Permit(NonZeroU32::new(n).unwrap())
    }

    fn watching(queue: &[Contender], indices: &[usize], may_remain: usize, complete: bool, rule: DataRule) -> Verdict {
        let ahead = indices.iter().map(|&i| queue[i].name.clone()).collect();
        Verdict::Waits(Plan::Nodes(Watch { ahead, may_remain, complete, rule }))
    }

    use NodeKind::{Candidate, Lock, Read, Write};

    #[test]
    fn mutexes_and_writers_hold_alone_and_watch_everyone_ahead() {
        let q = queue_of(&[Read, Lock, Write]);
        assert_eq!(judge(&q, 0), Verdict::Holds);
        assert_eq!(judge(&q, 1), watching(&q, &[0], 0, true, DataRule::Ignore), "a mutex waits for a reader");
        assert_eq!(judge(&q, 2), watching(&q, &[0, 1], 0, true, DataRule::Ignore));
        let deep = queue_of(&[Write; WATCH_ALL_AHEAD + 2]);
        assert_eq!(
            judge(&deep, WATCH_ALL_AHEAD),
            watching(&deep, &(0..WATCH_ALL_AHEAD).collect::<Vec<_>>(), 0, true, DataRule::Ignore)
        );
        assert_eq!(
            judge(&deep, WATCH_ALL_AHEAD + 1),
            watching(&deep, &[WATCH_ALL_AHEAD], 0, false, DataRule::Ignore),
            "further back, the predecessor only"
        );
    }

    #[test]
    fn readers_wait_only_for_the_last_writer_ahead_never_for_one_behind() {
        let q = queue_of(&[Read, Read, Write, Read, Lock, Read, Write]);
        assert_eq!(judge(&q, 1), Verdict::Holds, "readers share, and the writer behind does not count (kazoo#649)");
        assert_eq!(judge(&q, 3), watching(&q, &[2], 0, true, DataRule::ReadClears), "the one writer ahead");
        assert_eq!(
            judge(&q, 5),
            watching(&q, &[4], 0, false, DataRule::Ignore),
            "the last of two writers ahead (a mutex counts as one, and is never a read): list again when it goes"
        );
    }

    #[test]
    fn permits_count_the_nodes_ahead() {
        let three = permits(3);
        let q = queue_of(&[three; WATCH_ALL_AHEAD + 3]);
        assert_eq!(judge(&q, 2), Verdict::Holds);
        assert_eq!(judge(&q, 3), watching(&q, &[0, 1, 2], 2, true, DataRule::Ignore), "any one of three to go");
        assert_eq!(judge(&q, 5), watching(&q, &[0, 1, 2, 3, 4], 2, true, DataRule::Ignore));
        assert_eq!(
            judge(&q, WATCH_ALL_AHEAD + 1),
            watching(&q, &[WATCH_ALL_AHEAD], 0, false, DataRule::HeldRelooks),
            "deep in the queue: the predecessor, until it is granted"
        );
        let many = permits(20);
        let q = queue_of(&[many; 22]);
        assert_eq!(judge(&q, 19), Verdict::Holds);
        assert_eq!(judge(&q, 20), Verdict::Waits(Plan::Children), "the first waiter of 20 permits watches the list");
        assert_eq!(judge(&q, 21), watching(&q, &[20], 0, false, DataRule::HeldRelooks));
    }

    #[test]
    fn a_node_behind_another_use_of_the_name_conflicts_and_the_earlier_one_does_not() {
        let q = queue_of(&[Lock, permits(2), Read]);
        assert_eq!(judge(&q, 0), Verdict::Holds);
        let Verdict::Conflict(what) = judge(&q, 1) else { panic!("a permit behind a mutex") };
        assert!(what.contains("in use as a lock") && what.contains("another name"), "{what}");
        let Verdict::Conflict(what) = judge(&q, 2) else { panic!("a reader behind a permit") };
        assert!(what.contains("semaphore of 2 permits"), "{what}");
        let q = queue_of(&[permits(3), permits(2)]);
        let Verdict::Conflict(what) = judge(&q, 1) else { panic!("another count") };
        assert!(what.contains("in use with 3 permits") && what.contains("asks for 2"), "{what}");
        let q = queue_of(&[permits(2), Lock]);
        assert_eq!(judge(&q, 0), Verdict::Holds, "the earlier user is not refused for a later one");
        let q = queue_of(&[Candidate, Lock, permits(2), Read]);
        for (i, use_) in [(1, "a lock"), (2, "a semaphore"), (3, "a lock")] {
            let Verdict::Conflict(what) = judge(&q, i) else { panic!("{use_} behind a candidate") };
            assert!(what.contains("in use as an election") && what.contains("another name"), "{what}");
        }
        for ahead in [Lock, Write, Read, permits(3)] {
            let q = queue_of(&[ahead, Candidate]);
            let Verdict::Conflict(what) = judge(&q, 1) else { panic!("a candidate behind {ahead:?}") };
            assert!(what.contains("give the election another name"), "{what}");
        }
    }

    #[test]
    fn the_first_candidate_leads_and_the_others_watch_as_a_mutex_does() {
        let q = queue_of(&[Candidate, Candidate, Candidate]);
        assert_eq!(judge(&q, 0), Verdict::Holds);
        assert_eq!(judge(&q, 2), watching(&q, &[0, 1], 0, true, DataRule::Ignore));
        assert!(holds(&q, 0, false) && !holds(&q, 1, false));
    }

    #[test]
    fn a_reader_right_behind_a_downgraded_write_holds_and_a_writer_does_not() {
        let q = queue_of(&[Write, Read, Read, Write, Read]);
        assert!(holds(&q, 0, true) && holds(&q, 1, true) && holds(&q, 2, true));
        assert!(
            !holds(&q, 3, true) && !holds(&q, 4, true),
            "a writer waits for the read, and readers behind it for the writer"
        );
        assert!(holds(&q, 0, false) && !holds(&q, 1, false) && !holds(&q, 2, false));
        let q = queue_of(&[Lock, Read]);
        assert!(!holds(&q, 1, true), "only a write node can be downgraded; a mutex is never read");
    }
}
