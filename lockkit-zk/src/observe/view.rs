//! The view of an election that the follower keeps (see the module docs of `observe`): the
//! contender nodes seen and their watches, the last list, the events collected in a batch,
//! and what was handed out — the bookkeeping without I/O, driven by the follower in mod.rs
//! and by hand in the tests.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use lockkit_core::backend::Outbox;
use lockkit_core::{Error, FencingToken, Leader, LeaderEvent};
use zookeeper_client as zk;

use crate::error::BACKEND;
use crate::held::{NodeEvent, Watched};
use crate::names::{Contender, NodeKind};
use crate::record;
use crate::record::term_began_at;

/// Why a follower stopped following on its session.
pub(super) enum End {
    /// The session reached this terminal state (expired, closed, refused).
    Session(zk::SessionState),
    /// The session's tasks went with their runtime.
    Gone,
    /// A request failed otherwise; the error is for the consumer.
    Failed(Error),
}

/// A contender node of the view.
pub(super) struct Node {
    pub(super) name: String,
    pub(super) kind: NodeKind,
    /// The leader this node is while it heads the view: read with its data (candidates only).
    pub(super) leader: Option<Leader>,
    /// Whether its data was read (and its watch set) since it joined the view or changed.
    pub(super) read: bool,
    /// Whether its term was handed out.
    pub(super) shown: bool,
    /// Its data watch, until it fires.
    pub(super) watch: Option<NodeEvent>,
}

impl Node {
    pub(super) fn new(contender: Contender) -> Self {
        Node { name: contender.name, kind: contender.kind, leader: None, read: false, shown: false, watch: None }
    }
}

/// What a watch of the follower was set on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Target {
    /// A node of the view, by sequence.
    Node(i64),
    /// The election's znode: its children, or its existence while it is missing.
    Children,
}

/// A list of the children, as the follower last saw it.
pub(super) struct Listing {
    /// The czxid of the election's znode, `None` while it was missing.
    pub(super) parent: Option<i64>,
    /// How many children were created or deleted under it.
    pub(super) cversion: i32,
    /// Every child's name.
    pub(super) names: HashSet<String>,
}

/// What the follower last handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shown {
    Term(FencingToken),
    Vacant,
}

/// What the follower knows of the election, and what it owes the consumer: the bookkeeping of
/// the module docs, without I/O.
#[derive(Default)]
pub(super) struct View {
    /// A gap to hand out before the next state.
    pub(super) gap: bool,
    /// The view proper: the live contender nodes seen, by sequence.
    pub(super) nodes: BTreeMap<i64, Node>,
    pub(super) listing: Option<Listing>,
    /// Whether the view was empty at some moment since the last list.
    pub(super) emptied: bool,
    /// The watch on the children (or the existence) of the election's znode, until it fires.
    pub(super) children: Option<NodeEvent>,
    /// Events taken from the watches and not handled yet.
    pub(super) batch: Vec<(Target, Watched)>,
    /// The last event of the children watch, since the last list.
    pub(super) children_event: Option<Watched>,
    /// Whether the session state changed (a dropped connection) since the last list: then
    /// the notifications replayed since came in no order.
    pub(super) reconnected: bool,
    pub(super) last: Option<Shown>,
}

impl View {
    pub(super) fn new(gap: bool) -> Self {
        View { gap, emptied: true, ..View::default() }
    }

    /// The end a session event among the collected ones means, if any.
    pub(super) fn session_end(&self) -> std::result::Result<(), End> {
        for (_, event) in &self.batch {
            match event {
                Watched::SessionEnded(state) => return Err(End::Session(*state)),
                Watched::SessionGone => return Err(End::Gone),
                Watched::Deleted | Watched::Changed => {}
            }
        }
        Ok(())
    }

    /// Handles the collected events as one batch: deletions of nodes of the view, nodes whose
    /// data changed (read again with the next list), the children watch; then hands out the
    /// head's term if it changed (a state the next batch may end at once). Returns whether a
    /// list is needed.
    pub(super) fn apply(&mut self, outbox: &Outbox) -> std::result::Result<bool, End> {
        self.session_end()?;
        let mut gone = HashSet::new();
        let relist = self.take_batch(&mut gone);
        self.remove(&gone);
        self.settle(false, outbox);
        Ok(relist)
    }

    /// Takes the collected events: the sequences of deleted nodes go into `gone`, a node whose
    /// data changed is marked unread, a children event is kept. Returns whether a list is
    /// needed (a node's data or the children changed).
    fn take_batch(&mut self, gone: &mut HashSet<i64>) -> bool {
        let mut relist = false;
        for (target, event) in std::mem::take(&mut self.batch) {
            match (target, event) {
                (Target::Node(sequence), Watched::Deleted) => {
                    gone.insert(sequence);
                }
                (Target::Node(sequence), _) => {
                    if let Some(node) = self.nodes.get_mut(&sequence) {
                        node.read = false;
                    }
                    relist = true;
                }
                (Target::Children, event) => {
                    self.children_event = Some(event);
                    relist = true;
                }
            }
        }
        relist
    }

    /// Removes the nodes `gone` from the view, gone in an unknown order among themselves and
    /// after everything handled before. A gap is owed when a term may have passed unseen: the
    /// head went before its term was handed out, or a candidate right behind the head (with
    /// every node between them) went too, which may have led for a moment.
    pub(super) fn remove(&mut self, gone: &HashSet<i64>) {
        if gone.is_empty() {
            return;
        }
        let mut order = self.nodes.iter();
        if let Some((head_sequence, head)) = order.next()
            && gone.contains(head_sequence)
        {
            let head_unseen = head.kind == NodeKind::Candidate && !head.shown;
            let next_unseen = order
                .take_while(|(sequence, _)| gone.contains(sequence))
                .any(|(_, node)| node.kind == NodeKind::Candidate);
            if head_unseen || next_unseen {
                tracing::debug!(backend = BACKEND, head_unseen, next_unseen, "a term may have passed unseen");
                self.gap = true;
            }
        }
        self.nodes.retain(|sequence, _| !gone.contains(sequence));
        if self.nodes.is_empty() {
            self.emptied = true;
        }
    }

    /// Hands out the state the view shows, if it changed: the head's term, or a vacancy when
    /// the head is not a candidate, or when the view is empty and `complete` (no node can
    /// have come since the last list).
    pub(super) fn settle(&mut self, complete: bool, outbox: &Outbox) {
        let shown = match self.nodes.values_mut().next() {
            Some(head) if head.kind == NodeKind::Candidate => match &head.leader {
                Some(leader) => {
                    head.shown = true;
                    Some((Shown::Term(leader.term), LeaderEvent::Elected(leader.clone())))
                }
                // Not read yet: the list under way tells.
                None => None,
            },
            // A lock or semaphore uses the name: nobody leads.
            Some(_) => Some((Shown::Vacant, LeaderEvent::Vacant)),
            None if complete => Some((Shown::Vacant, LeaderEvent::Vacant)),
            None => None,
        };
        let Some((shown, event)) = shown else { return };
        if std::mem::take(&mut self.gap) {
            tracing::debug!(backend = BACKEND, "lockkit.zk.observe gap");
            outbox.push(Ok(LeaderEvent::Gap));
            self.last = None;
        }
        if self.last == Some(shown) {
            return;
        }
        let mut event = event;
        if self.last.is_some() {
            // A change this observer saw happen: the term began after the state shown last
            // ended, so not before now, whatever the node says yet (a leader that waited marks
            // its node when it comes to lead, which may not have been read yet).
            lockkit_core::backend::not_before_now(&mut event);
        }
        match &event {
            LeaderEvent::Elected(leader) => {
                tracing::debug!(backend = BACKEND, term = %leader.term, "lockkit.zk.observe elected");
            }
            _ => tracing::debug!(backend = BACKEND, "lockkit.zk.observe vacant"),
        }
        self.last = Some(shown);
        outbox.push(Ok(event));
    }

    /// Brings the view up to a list of the children `names` under a znode of czxid `parent`
    /// and `cversion`, after the batch of events that came with its reply was applied:
    /// `departed` are the nodes that batch removed (their deletion may postdate the list).
    /// The new contender nodes join the view, unread.
    pub(super) fn listed(
        &mut self,
        names: &HashSet<String>,
        parent: i64,
        cversion: i32,
        departed: &HashSet<String>,
        outbox: &Outbox,
    ) {
        // The nodes of the view missing from the list (their notification has not come, when
        // their watch had fired on a data change): gone in an unknown order.
        let mut gone: HashSet<i64> = HashSet::new();
        match self.listing.as_ref().and_then(|listing| listing.parent) {
            Some(czxid) if czxid != parent => {
                // The znode was deleted (so emptied) and made again, unseen: whatever came and
                // went in the old one cannot be told.
                tracing::debug!(backend = BACKEND, "the election's znode was made again");
                gone.extend(self.nodes.keys().copied());
                self.gap = true;
                self.listing = Some(Listing { parent: Some(parent), cversion: 0, names: HashSet::new() });
                self.emptied = true;
            }
            _ => gone.extend(self.nodes.iter().filter(|(_, n)| !names.contains(&n.name)).map(|(s, _)| *s)),
        }
        self.remove(&gone);
        self.settle(false, outbox);

        // Nodes that came and went between the two lists, unseen: they may have led if the
        // view was empty at some moment.
        if let Some(listing) = &self.listing {
            let changes = i64::from(cversion) - i64::from(listing.cversion);
            let seen = names.symmetric_difference(&listing.names).count();
            if usize::try_from(changes) != Ok(seen) && self.emptied {
                tracing::debug!(
                    backend = BACKEND,
                    changes,
                    seen,
                    "nodes came and went unseen while nobody was known to lead"
                );
                self.gap = true;
            }
        }
        let contenders =
            names.iter().filter(|name| !departed.contains(*name)).filter_map(|name| Contender::parse(name));
        for contender in contenders {
            self.nodes.entry(contender.sequence).or_insert_with(|| Node::new(contender));
        }
    }

    /// The nodes to read (and watch): new, or changed since read.
    pub(super) fn unread(&self) -> Vec<(i64, String)> {
        self.nodes
            .iter()
            .filter(|(_, node)| !node.read)
            .map(|(sequence, node)| (*sequence, node.name.clone()))
            .collect()
    }

    /// Records the read of the node `sequence`: its data and stat, and its new watch.
    pub(super) fn read(&mut self, sequence: i64, data: &[u8], stat: &zk::Stat, watch: NodeEvent) {
        if let Some(node) = self.nodes.get_mut(&sequence) {
            node.leader = (node.kind == NodeKind::Candidate).then(|| leader_of(data, stat));
            node.read = true;
            node.watch = Some(watch);
        }
    }

    /// Ends a list: `gone` (found gone by the reads) and the notifications that came during
    /// the reads, one batch; then the list becomes the last one. Returns whether another
    /// list is needed at once (the children changed meanwhile, or a node's data).
    pub(super) fn reads_done(
        &mut self,
        mut gone: HashSet<i64>,
        listing: Listing,
        outbox: &Outbox,
    ) -> std::result::Result<bool, End> {
        self.session_end()?;
        let again = self.take_batch(&mut gone);
        self.remove(&gone);
        self.listing = Some(listing);
        self.emptied = self.nodes.is_empty();
        if !again {
            self.children_event = None;
            self.reconnected = false;
        }
        self.settle(!again, outbox);
        Ok(again)
    }

    /// The election's znode is missing: every node of the view is gone with it, and nobody
    /// leads.
    pub(super) fn parent_missing(&mut self, outbox: &Outbox) {
        // Unseen changes are ruled out only when the znode was empty at the last list and the
        // first change the children watch reported since, live (not replayed after a
        // reconnect, in no order), was its deletion. Before the first list, nothing was seen.
        let clean = match &self.listing {
            None => true,
            Some(listing) => {
                listing.parent.is_some()
                    && listing.names.is_empty()
                    && self.children_event == Some(Watched::Deleted)
                    && !self.reconnected
            }
        };
        if !clean {
            tracing::debug!(backend = BACKEND, "the election's znode went, with what came and went in it unseen");
            self.gap = true;
        }
        let gone: HashSet<i64> = self.nodes.keys().copied().collect();
        self.remove(&gone);
        self.listing = Some(Listing { parent: None, cversion: 0, names: HashSet::new() });
        self.emptied = true;
        self.children_event = None;
        self.reconnected = false;
        self.settle(true, outbox);
    }

    /// Takes every event ready now, without waiting.
    pub(super) fn collect_ready(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        let _ = collect_now(&mut self.children, &mut self.nodes, &mut self.batch, &mut cx);
    }

    /// The names of the nodes of the view.
    pub(super) fn names(&self) -> HashSet<String> {
        self.nodes.values().map(|node| node.name.clone()).collect()
    }
}

/// The leader a candidate's node stands for: its identity, its czxid as the term, and when its
/// term began ([`term_began_at`]).
pub(super) fn leader_of(data: &[u8], stat: &zk::Stat) -> Leader {
    let identity = record::identity_field(data).unwrap_or_else(|| Arc::from(&[][..]));
    let term = FencingToken::new(u64::try_from(stat.czxid).unwrap_or(0));
    Leader::new(identity, term, term_began_at(stat))
}

/// Waits until some watch has fired, then takes every event ready (see [`collect_now`]).
pub(super) fn collect<'w>(
    children: &'w mut Option<NodeEvent>,
    nodes: &'w mut BTreeMap<i64, Node>,
    batch: &'w mut Vec<(Target, Watched)>,
) -> impl Future<Output = ()> + 'w {
    std::future::poll_fn(
        move |cx| if collect_now(children, nodes, batch, cx) { Poll::Ready(()) } else { Poll::Pending },
    )
}

/// Polls every watch, again and again until a round finds none newly ready, moving the events
/// into `batch`; whether any was. Every event taken came before every event left (see the
/// module docs).
pub(super) fn collect_now(
    children: &mut Option<NodeEvent>,
    nodes: &mut BTreeMap<i64, Node>,
    batch: &mut Vec<(Target, Watched)>,
    cx: &mut Context<'_>,
) -> bool {
    let mut any = false;
    loop {
        let mut found = false;
        if let Some(watch) = children.as_mut()
            && let Poll::Ready(event) = watch.as_mut().poll(cx)
        {
            *children = None;
            batch.push((Target::Children, event));
            found = true;
        }
        for (sequence, node) in nodes.iter_mut() {
            if let Some(watch) = node.watch.as_mut()
                && let Poll::Ready(event) = watch.as_mut().poll(cx)
            {
                node.watch = None;
                batch.push((Target::Node(*sequence), event));
                found = true;
            }
        }
        if !found {
            return any;
        }
        any = true;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::names::node_prefix;
    use lockkit_core::backend::OUTBOX_CAPACITY;

    /// A child name of `kind` with `sequence`.
    fn child(sequence: i64, kind: NodeKind) -> String {
        let prefix = node_prefix("/p", uuid::Uuid::new_v4(), kind);
        format!("{}{sequence:010}", prefix.trim_start_matches("/p/"))
    }

    fn candidate(sequence: i64) -> String {
        child(sequence, NodeKind::Candidate)
    }

    fn stat(czxid: i64) -> zk::Stat {
        zk::Stat {
            czxid,
            mzxid: czxid,
            pzxid: czxid,
            // In 2100: a change the observer saw reports a `since` not before now
            // (`not_before_now`), which leaves a future node time as it is, so the expected
            // events stay exact.
            ctime: 4_102_444_800_000,
            mtime: 4_102_444_800_000,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 1,
            data_length: 0,
            num_children: 0,
        }
    }

    fn drain(outbox: &Outbox) -> Vec<LeaderEvent> {
        outbox.take_ready().into_iter().map(|item| item.unwrap()).collect()
    }

    fn elected(term: i64) -> LeaderEvent {
        LeaderEvent::Elected(leader_of(
            format!("{} identity=n{term}", record::owner_record(uuid::Uuid::new_v4())).as_bytes(),
            &stat(term),
        ))
    }

    /// A follower's view driven by hand: lists, reads and notifications. A node's czxid (its
    /// term) is its sequence plus 100.
    struct Sim {
        view: View,
        outbox: Outbox,
        parent: i64,
    }

    impl Sim {
        fn new() -> Self {
            Sim { view: View::new(false), outbox: Outbox::new(BACKEND), parent: 7 }
        }

        /// A view that listed one candidate, node 0, which leads (its election drained).
        fn led_by_node_0() -> Self {
            let mut sim = Self::new();
            sim.list(&[&candidate(0)], 1, &[], &[], &[]);
            drain(&sim.outbox);
            sim
        }

        /// A list of `names` at `cversion`, with `with_reply` notified alongside its reply,
        /// every new node read but `vanished` (gone before its read), then `during_reads`
        /// notified. Returns whether another list is needed.
        fn list(
            &mut self,
            names: &[&String],
            cversion: i32,
            with_reply: &[i64],
            vanished: &[i64],
            during_reads: &[i64],
        ) -> bool {
            let before = self.view.names();
            self.deleted(with_reply);
            self.view.apply(&self.outbox).ok().unwrap();
            let now = self.view.names();
            let departed: HashSet<String> = before.into_iter().filter(|name| !now.contains(name)).collect();
            let names: HashSet<String> = names.iter().map(|name| (*name).clone()).collect();
            self.view.listed(&names, self.parent, cversion, &departed, &self.outbox);
            for (sequence, name) in self.view.unread() {
                if vanished.contains(&sequence) {
                    continue;
                }
                let data = format!("{} identity=n{}", record::owner_record(uuid::Uuid::new_v4()), sequence + 100);
                let _ = name;
                self.view.read(sequence, data.as_bytes(), &stat(sequence + 100), Box::pin(std::future::pending()));
            }
            self.deleted(during_reads);
            let listing = Listing { parent: Some(self.parent), cversion, names };
            self.view.reads_done(vanished.iter().copied().collect(), listing, &self.outbox).ok().unwrap()
        }

        fn deleted(&mut self, sequences: &[i64]) {
            self.view.batch.extend(sequences.iter().map(|s| (Target::Node(*s), Watched::Deleted)));
        }

        /// A batch of notifications: these nodes deleted, and the children watch. Returns
        /// whether a list is needed.
        fn notified(&mut self, sequences: &[i64]) -> bool {
            self.deleted(sequences);
            self.view.batch.push((Target::Children, Watched::Changed));
            self.view.apply(&self.outbox).ok().unwrap()
        }
    }

    #[test]
    fn each_change_in_its_own_batch_shows_every_term_in_order_with_no_gap() {
        let mut sim = Sim::new();
        let (a, b) = (candidate(0), candidate(1));
        assert!(!sim.list(&[&a, &b], 2, &[], &[], &[]));
        assert_eq!(drain(&sim.outbox), [elected(100)]);
        // a goes: b leads at once, before any list.
        assert!(sim.notified(&[0]));
        assert_eq!(drain(&sim.outbox), [elected(101)]);
        // b goes before the list's reply: its own batch.
        assert!(!sim.list(&[], 4, &[1], &[], &[]));
        assert_eq!(drain(&sim.outbox), [LeaderEvent::Vacant]);
    }

    #[test]
    fn the_leader_and_the_next_candidate_gone_in_one_batch_is_a_gap() {
        let mut sim = Sim::new();
        let (a, b, c) = (candidate(0), candidate(1), candidate(2));
        sim.list(&[&a, &b, &c], 3, &[], &[], &[]);
        drain(&sim.outbox);
        sim.notified(&[0, 1]);
        assert_eq!(drain(&sim.outbox), [LeaderEvent::Gap, elected(102)], "b may have led for a moment");
        // A waiting candidate that goes with nobody ahead gone is no gap.
        let d = candidate(3);
        sim.list(&[&c, &d], 5, &[], &[], &[]);
        sim.notified(&[3]);
        assert_eq!(drain(&sim.outbox), [], "c still leads");
        // A lock node at the head: nobody leads; the candidate behind it when it goes.
        let mut sim = Sim::new();
        let (lock, e) = (child(0, NodeKind::Lock), candidate(1));
        sim.list(&[&lock, &e], 2, &[], &[], &[]);
        assert_eq!(drain(&sim.outbox), [LeaderEvent::Vacant]);
        sim.notified(&[0]);
        assert_eq!(drain(&sim.outbox), [elected(101)]);
    }

    #[test]
    fn a_node_gone_after_the_list_is_not_taken_for_a_new_one() {
        let mut sim = Sim::new();
        let (a, b) = (candidate(0), candidate(1));
        sim.list(&[&a], 1, &[], &[], &[]);
        assert_eq!(drain(&sim.outbox), [elected(100)]);
        // The list shows a and b, and a's deletion came right after its reply.
        assert!(!sim.list(&[&a, &b], 2, &[0], &[], &[]));
        assert_eq!(drain(&sim.outbox), [elected(101)], "no gap: a was not read again as new");
    }

    #[test]
    fn a_head_gone_before_its_read_is_a_gap() {
        let mut sim = Sim::new();
        sim.list(&[], 0, &[], &[], &[]);
        assert_eq!(drain(&sim.outbox), [LeaderEvent::Vacant]);
        let (a, b) = (candidate(0), candidate(1));
        sim.notified(&[]);
        sim.list(&[&a, &b], 2, &[], &[0], &[]);
        assert_eq!(drain(&sim.outbox), [LeaderEvent::Gap, elected(101)], "a led unseen");
        // A waiting node gone before its read is no gap.
        let c = candidate(2);
        sim.notified(&[]);
        sim.list(&[&b, &c], 3, &[], &[2], &[]);
        assert_eq!(drain(&sim.outbox), []);
    }

    #[test]
    fn nodes_unseen_between_two_lists_are_a_gap_only_if_the_view_emptied() {
        let mut sim = Sim::new();
        let (a, c) = (candidate(0), candidate(5));
        sim.list(&[&a], 1, &[], &[], &[]);
        drain(&sim.outbox);
        // Behind a, which stays: b came and went, c came. b cannot have led.
        sim.notified(&[]);
        sim.list(&[&a, &c], 4, &[], &[], &[]);
        assert_eq!(drain(&sim.outbox), []);
        // a and c go (one at a time), then d comes and goes and e comes before the next list.
        assert!(sim.notified(&[0]));
        assert_eq!(drain(&sim.outbox), [elected(105)]);
        let e = candidate(9);
        sim.notified(&[5]);
        sim.list(&[&e], 9, &[], &[], &[]);
        assert_eq!(drain(&sim.outbox), [LeaderEvent::Gap, elected(109)], "d may have led");
        // The same with nothing unseen: no gap.
        let f = candidate(10);
        sim.notified(&[9]);
        sim.list(&[&f], 11, &[], &[], &[]);
        assert_eq!(drain(&sim.outbox), [elected(110)]);
    }

    #[test]
    fn an_empty_view_is_vacant_only_once_no_node_can_have_come() {
        let mut sim = Sim::led_by_node_0();
        // a goes, and the children watch fired: only a list can tell whether someone leads.
        assert!(sim.notified(&[0]));
        assert_eq!(drain(&sim.outbox), []);
        // The list is empty, but the children changed again before it ended: list again.
        sim.view.batch.push((Target::Children, Watched::Changed));
        let before = sim.view.names();
        sim.view.apply(&sim.outbox).ok().unwrap();
        let departed: HashSet<String> = before.difference(&sim.view.names()).cloned().collect();
        sim.view.listed(&HashSet::new(), sim.parent, 2, &departed, &sim.outbox);
        sim.view.batch.push((Target::Children, Watched::Changed));
        let listing = Listing { parent: Some(sim.parent), cversion: 2, names: HashSet::new() };
        assert!(sim.view.reads_done(HashSet::new(), listing, &sim.outbox).ok().unwrap(), "another list");
        assert_eq!(drain(&sim.outbox), [], "no vacancy while a node may have come");
        let b = candidate(1);
        assert!(!sim.list(&[&b], 3, &[], &[], &[]));
        assert_eq!(drain(&sim.outbox), [elected(101)]);
        sim.notified(&[1]);
        assert!(!sim.list(&[], 4, &[], &[], &[]));
        assert_eq!(drain(&sim.outbox), [LeaderEvent::Vacant]);
    }

    #[test]
    fn a_znode_made_again_unseen_is_a_gap_and_a_clean_deletion_is_not() {
        let mut sim = Sim::led_by_node_0();
        sim.parent = 9;
        let b = candidate(0);
        sim.notified(&[]);
        sim.list(&[&b], 1, &[], &[], &[]);
        assert_eq!(drain(&sim.outbox), [LeaderEvent::Gap, elected(100)]);

        // Empty at the last list, and the first change reported live is the deletion.
        let mut sim = Sim::new();
        sim.list(&[], 2, &[], &[], &[]);
        drain(&sim.outbox);
        sim.view.batch.push((Target::Children, Watched::Deleted));
        sim.view.apply(&sim.outbox).ok().unwrap();
        sim.view.parent_missing(&sim.outbox);
        assert_eq!(drain(&sim.outbox), [], "still vacant, no gap");
        // Deleted after a reconnect: what passed meanwhile is unknown.
        let mut sim = Sim::new();
        sim.list(&[], 2, &[], &[], &[]);
        drain(&sim.outbox);
        sim.view.reconnected = true;
        sim.view.batch.push((Target::Children, Watched::Deleted));
        sim.view.apply(&sim.outbox).ok().unwrap();
        sim.view.parent_missing(&sim.outbox);
        assert_eq!(drain(&sim.outbox), [LeaderEvent::Gap, LeaderEvent::Vacant]);
    }

    #[test]
    fn a_gap_restates_the_current_leader() {
        let mut sim = Sim::new();
        let (a, b) = (candidate(0), candidate(1));
        sim.list(&[&a, &b], 2, &[], &[], &[]);
        drain(&sim.outbox);
        sim.view.gap = true;
        sim.view.settle(true, &sim.outbox);
        assert_eq!(drain(&sim.outbox), [LeaderEvent::Gap, elected(100)]);
    }

    #[test]
    fn a_consumer_far_behind_gets_a_gap_and_the_state_now() {
        let outbox = Outbox::new(BACKEND);
        for term in 1..=(OUTBOX_CAPACITY as i64 + 10) {
            outbox.push(Ok(elected(term)));
        }
        let events = drain(&outbox);
        assert_eq!(events.first(), Some(&LeaderEvent::Gap));
        assert!(events.contains(&elected(OUTBOX_CAPACITY as i64 + 10)));
        assert!(events.len() <= OUTBOX_CAPACITY);
    }
}
