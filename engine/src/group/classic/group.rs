//! One classic group's state machine: Kafka's `GroupCoordinator` logic for a single
//! group (joins, the vote, the leader's assignment, static members, the clocks).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{
    CONSUMER_PROTOCOL_TYPE, ClassicDescription, ClassicJoin, ClassicMember, ClassicSync, Completion, GroupState,
    JoinResult, JoinedMember, Leaving, NEW_MEMBER_JOIN_TIMEOUT, Outcome, Protocol, SyncResult, Ticket,
};
use crate::error::GroupError;
use crate::group::assignor::MemberId;
use crate::group::consumer_protocol::parse_subscription;

pub(super) use super::member::Member;

#[derive(Debug)]
pub(super) struct Group {
    pub(super) name: String,
    pub(super) state: GroupState,
    pub(super) generation: i32,
    pub(super) protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<MemberId>,
    pub(super) members: BTreeMap<MemberId, Member>,
    /// Instance id -> the member that holds it.
    statics: HashMap<String, MemberId>,
    /// New members told MEMBER_ID_REQUIRED, until they join with the id or expire.
    pub(super) pending: HashMap<MemberId, Instant>,
    /// Members of a new generation that have not sent their SyncGroup yet.
    pending_sync: BTreeSet<MemberId>,
    /// When a rebalance stops waiting for members to rejoin.
    join_deadline: Option<Instant>,
    /// When members that have not synced are removed.
    sync_deadline: Option<Instant>,
    subscribed: Option<BTreeSet<String>>,
    /// The first rebalance of an empty group, while it waits for more members (Kafka's
    /// `InitialDelayedJoin`).
    initial: Option<InitialDelay>,
    /// A new member joined during the current initial delay: it is extended.
    new_member_added: bool,
}

/// The join phase of an empty group's first rebalance waits `delay` (Kafka's
/// `group.initial.rebalance.delay.ms`), however many members have joined, so that
/// members starting together share the first generation instead of each joining a
/// new one; as long as members keep arriving it waits `delay` again, until the
/// rebalance timeout is spent (`remaining`).
#[derive(Clone, Copy, Debug)]
struct InitialDelay {
    delay: Duration,
    remaining: Duration,
}

/// A fresh member id: `{prefix}-` and 128 random bits written as a UUID, as Kafka makes
/// them (the prefix is the client id, or the instance id of a static member).
fn new_member_id(prefix: &str) -> MemberId {
    use std::hash::{BuildHasher, Hasher};
    // Each `RandomState` is seeded from the OS once per thread and then stepped, so two
    // hashes of one value under fresh states are two random words.
    let word = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x5eed);
        h.finish()
    };
    let (a, b) = (word(), word());
    MemberId::new(format!(
        "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    ))
}

impl Group {
    pub(super) fn new(name: &str) -> Group {
        Group {
            name: name.to_string(),
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            statics: HashMap::new(),
            pending: HashMap::new(),
            pending_sync: BTreeSet::new(),
            join_deadline: None,
            sync_deadline: None,
            subscribed: None,
            initial: None,
            new_member_added: false,
        }
    }

    fn join_answer(&self, done: &mut Vec<Completion>, ticket: Ticket, r: Result<JoinResult, GroupError>) {
        done.push(Completion { group: self.name.clone(), ticket, outcome: Outcome::Join(r) });
    }

    fn sync_answer(&self, done: &mut Vec<Completion>, ticket: Ticket, r: Result<SyncResult, GroupError>) {
        done.push(Completion { group: self.name.clone(), ticket, outcome: Outcome::Sync(r) });
    }

    /// Kafka's `supportsProtocols`: an empty group takes any non-empty protocol type and
    /// list; otherwise the type must be the group's and one protocol every member's.
    pub(super) fn supports_protocols(&self, protocol_type: &str, protocols: &[Protocol]) -> bool {
        if self.state == GroupState::Empty {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|p| self.members.values().all(|m| m.protocols.iter().any(|q| q.name == p.name)))
    }

    /// Kafka's vote: among the protocols every member supports, each member votes for the
    /// first of its own list; the most votes win (a tie goes to the leader's preference).
    fn select_protocol(&self) -> Option<String> {
        let all = |name: &str| self.members.values().all(|m| m.protocols.iter().any(|p| p.name == name));
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(p) = m.protocols.iter().find(|p| all(&p.name)) {
                *votes.entry(p.name.as_str()).or_default() += 1;
            }
        }
        let most = votes.values().copied().max()?;
        let leader = self.leader.as_ref().and_then(|l| self.members.get(l));
        let tied: Vec<&str> = votes.iter().filter(|&(_, &n)| n == most).map(|(p, _)| *p).collect();
        let preferred = leader.and_then(|l| l.protocols.iter().map(|p| p.name.as_str()).find(|p| tied.contains(p)));
        preferred.or(tied.first().copied()).map(str::to_string)
    }

    pub(super) fn validate_member(&self, member: &MemberId, instance: Option<&str>) -> Result<(), GroupError> {
        if let Some(instance) = instance {
            return match self.statics.get(instance) {
                Some(holder) if holder != member => Err(GroupError::FencedInstance(instance.to_string())),
                Some(_) => Ok(()),
                None => Err(GroupError::UnknownMember(member.to_string())),
            };
        }
        if self.members.contains_key(member) { Ok(()) } else { Err(GroupError::UnknownMember(member.to_string())) }
    }

    pub(super) fn join_new(&mut self, req: ClassicJoin, ticket: Ticket, now: Instant, done: &mut Vec<Completion>) {
        let prefix = req.instance.as_deref().unwrap_or(&req.client_id);
        let id = new_member_id(prefix);
        match req.instance.clone() {
            Some(instance) => match self.statics.get(&instance).cloned() {
                Some(old) => self.replace_static(instance, old, id, req, ticket, now, done),
                None => self.add_member(id, req, ticket, now, done),
            },
            None if req.require_known_member => {
                self.pending.insert(id.clone(), now + req.session_timeout);
                self.join_answer(done, ticket, Err(GroupError::MemberIdRequired(id.to_string())));
            }
            None => self.add_member(id, req, ticket, now, done),
        }
    }

    pub(super) fn join_known(
        &mut self,
        id: MemberId,
        req: ClassicJoin,
        ticket: Ticket,
        now: Instant,
        done: &mut Vec<Completion>,
    ) {
        if self.pending.contains_key(&id) {
            if req.instance.is_some() {
                // A pending member is never static: an id handed out for a dynamic join.
                return self.join_answer(done, ticket, Err(GroupError::UnknownMember(id.to_string())));
            }
            return self.add_member(id, req, ticket, now, done);
        }
        if let Err(e) = self.validate_member(&id, req.instance.as_deref()) {
            return self.join_answer(done, ticket, Err(e));
        }
        let is_leader = self.leader.as_ref() == Some(&id);
        let matches = self.members.get(&id).is_some_and(|m| m.matches(&req.protocols));
        match self.state {
            GroupState::PreparingRebalance => self.update_member(&id, req, ticket, now, done),
            GroupState::CompletingRebalance if matches => {
                // The same metadata: it missed the answer of its join; give it again.
                let r = self.join_result(&id, false, is_leader);
                self.members.get_mut(&id).expect("validated").heard(now);
                self.join_answer(done, ticket, Ok(r));
            }
            GroupState::Stable if matches && !is_leader => {
                let r = self.join_result(&id, false, false);
                self.members.get_mut(&id).expect("validated").heard(now);
                self.join_answer(done, ticket, Ok(r));
            }
            // Changed metadata, or the leader asking for a rebalance (the consumer's way of
            // acting on metadata changes): a new rebalance.
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.update_member(&id, req, ticket, now, done);
                self.prepare_rebalance(now, done);
            }
            GroupState::Empty => self.join_answer(done, ticket, Err(GroupError::UnknownMember(id.to_string()))),
        }
    }

    /// The JoinGroup answer for `member` in the current generation.
    fn join_result(&self, member: &MemberId, skip_assignment: bool, with_members: bool) -> JoinResult {
        let members = if with_members {
            self.members
                .iter()
                .map(|(id, m)| JoinedMember {
                    member: id.clone(),
                    instance: m.instance.clone(),
                    metadata: m.metadata(self.protocol.as_deref()),
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinResult {
            member: member.clone(),
            generation: self.generation,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            skip_assignment,
            members,
        }
    }

    fn add_member(&mut self, id: MemberId, req: ClassicJoin, ticket: Ticket, now: Instant, done: &mut Vec<Completion>) {
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(id.clone());
        }
        if let Some(instance) = &req.instance {
            self.statics.insert(instance.clone(), id.clone());
        }
        self.pending.remove(&id);
        let initial_delay = req.initial_rebalance_delay;
        if self.initial.is_some() {
            self.new_member_added = true;
        }
        let was_empty = self.state == GroupState::Empty;
        self.members.insert(
            id,
            Member {
                instance: req.instance,
                client_id: req.client_id,
                client_host: req.client_host,
                session_timeout: req.session_timeout,
                rebalance_timeout: req.rebalance_timeout,
                protocols: req.protocols,
                assignment: Bytes::new(),
                awaiting_join: Some(ticket),
                awaiting_sync: None,
                is_new: true,
                expires: now + NEW_MEMBER_JOIN_TIMEOUT,
            },
        );
        self.maybe_prepare_rebalance(now, done);
        if was_empty && !initial_delay.is_zero() {
            // Kafka's InitialDelayedJoin: the whole delay first, then as much again while
            // members keep joining, within what the rebalance timeout leaves.
            let timeout = self.members.values().map(|m| m.rebalance_timeout).max().unwrap_or_default();
            self.initial =
                Some(InitialDelay { delay: initial_delay, remaining: timeout.saturating_sub(initial_delay) });
            self.new_member_added = false;
            self.join_deadline = Some(now + initial_delay);
        }
    }

    /// A known member's join: its new protocols and timeouts, waiting for the rebalance.
    fn update_member(
        &mut self,
        id: &MemberId,
        req: ClassicJoin,
        ticket: Ticket,
        now: Instant,
        done: &mut Vec<Completion>,
    ) {
        let m = self.members.get_mut(id).expect("validated");
        m.protocols = req.protocols;
        m.session_timeout = req.session_timeout;
        m.rebalance_timeout = req.rebalance_timeout;
        m.client_id = req.client_id;
        m.client_host = req.client_host;
        m.heard(now);
        // A join sent again replaces the one waiting (its client gave up on it).
        if let Some(old) = m.awaiting_join.replace(ticket) {
            self.join_answer(done, old, Err(GroupError::RebalanceInProgress));
        }
    }

    /// A static member joining with no member id while its instance id is held: the new
    /// member id replaces the old (which is fenced from now on). In a stable group whose
    /// protocol would not change, it gets the old member's place and assignment back with
    /// no rebalance.
    #[allow(clippy::too_many_arguments)]
    fn replace_static(
        &mut self,
        instance: String,
        old: MemberId,
        id: MemberId,
        req: ClassicJoin,
        ticket: Ticket,
        now: Instant,
        done: &mut Vec<Completion>,
    ) {
        let current_leader = self.leader.clone();
        let mut m = self.members.remove(&old).expect("a static member is a member");
        // Whatever the old member id still waits for, it is fenced now.
        if let Some(t) = m.awaiting_join.take() {
            self.join_answer(done, t, Err(GroupError::FencedInstance(instance.clone())));
        }
        if let Some(t) = m.awaiting_sync.take() {
            self.sync_answer(done, t, Err(GroupError::FencedInstance(instance.clone())));
        }
        m.is_new = false;
        self.members.insert(id.clone(), m);
        if self.leader.as_ref() == Some(&old) {
            self.leader = Some(id.clone());
        }
        if self.pending_sync.remove(&old) {
            self.pending_sync.insert(id.clone());
        }
        self.statics.insert(instance, id.clone());
        let supports_skip = req.supports_skip_assignment;
        self.update_member(&id, req, ticket, now, done);
        match self.state {
            GroupState::Stable if self.select_protocol() == self.protocol => {
                let is_leader = self.leader.as_ref() == Some(&id);
                let r = if supports_skip {
                    // The leader learns it leads, and is told not to assign: a stable
                    // group would not pass a new assignment on.
                    self.join_result(&id, is_leader, is_leader)
                } else {
                    // Before v9: name the old leader, so the rejoined leader does not
                    // believe it leads and compute an assignment no one would get.
                    JoinResult { leader: current_leader, ..self.join_result(&id, false, false) }
                };
                self.members.get_mut(&id).expect("just inserted").awaiting_join = None;
                self.join_answer(done, ticket, Ok(r));
            }
            GroupState::Stable | GroupState::CompletingRebalance => self.prepare_rebalance(now, done),
            GroupState::PreparingRebalance | GroupState::Empty => {}
        }
    }

    fn maybe_prepare_rebalance(&mut self, now: Instant, done: &mut Vec<Completion>) {
        if self.state != GroupState::PreparingRebalance {
            self.prepare_rebalance(now, done);
        }
    }

    /// Starts a rebalance: members waiting for an assignment are told to rejoin, and the
    /// join phase waits up to the largest rebalance timeout of the members.
    fn prepare_rebalance(&mut self, now: Instant, done: &mut Vec<Completion>) {
        if self.state == GroupState::CompletingRebalance {
            self.reset_assignments(done);
        }
        self.pending_sync.clear();
        self.sync_deadline = None;
        let timeout = self.members.values().map(|m| m.rebalance_timeout).max().unwrap_or_default();
        self.join_deadline = Some(now + timeout);
        self.state = GroupState::PreparingRebalance;
    }

    /// Every member's assignment is dropped and those waiting in SyncGroup are told to
    /// rejoin (REBALANCE_IN_PROGRESS).
    fn reset_assignments(&mut self, done: &mut Vec<Completion>) {
        let mut answers = Vec::new();
        for m in self.members.values_mut() {
            m.assignment = Bytes::new();
            if let Some(t) = m.awaiting_sync.take() {
                answers.push(t);
            }
        }
        for t in answers {
            self.sync_answer(done, t, Err(GroupError::RebalanceInProgress));
        }
    }

    /// Completes the join phase once every member (and pending member) has joined, or its
    /// deadline passed; an empty group's first rebalance only at the end of its initial
    /// delay, extended while new members join.
    pub(super) fn try_complete_join(&mut self, now: Instant, done: &mut Vec<Completion>) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        let all_joined = self.pending.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some());
        let timed_out = self.join_deadline.is_some_and(|d| now >= d);
        if let Some(initial) = self.initial {
            if !timed_out {
                return;
            }
            if self.new_member_added && !initial.remaining.is_zero() {
                let delay = initial.delay.min(initial.remaining);
                self.initial = Some(InitialDelay { delay: initial.delay, remaining: initial.remaining - delay });
                self.new_member_added = false;
                self.join_deadline = Some(now + delay);
                return;
            }
            self.initial = None;
            self.new_member_added = false;
            return self.complete_join(now, done);
        }
        if all_joined || timed_out {
            self.complete_join(now, done);
        }
    }

    /// Kafka's `onCompleteJoin`: dynamic members that did not rejoin are removed, a leader
    /// among those that did is kept or elected, and a new generation starts, with every
    /// waiting join answered (the leader's with every member's metadata).
    fn complete_join(&mut self, now: Instant, done: &mut Vec<Completion>) {
        let gone: Vec<MemberId> = self
            .members
            .iter()
            .filter(|(_, m)| m.awaiting_join.is_none() && m.instance.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.remove_entry(&id, done);
        }
        if !self.members.is_empty() && !self.elect_joined_leader() {
            // Only static members that have not rejoined are left: wait again for them to
            // come back or for their sessions to expire.
            let timeout = self.members.values().map(|m| m.rebalance_timeout).max().unwrap_or_default();
            self.join_deadline = Some(now + timeout);
            return;
        }
        self.generation += 1;
        self.join_deadline = None;
        if self.members.is_empty() {
            self.protocol = None;
            self.leader = None;
            self.subscribed = None;
            self.state = GroupState::Empty;
            return;
        }
        self.protocol = self.select_protocol();
        self.subscribed = self.subscribed_topics();
        self.state = GroupState::CompletingRebalance;
        let ids: Vec<MemberId> = self.members.keys().cloned().collect();
        for id in ids {
            let is_leader = self.leader.as_ref() == Some(&id);
            let r = self.join_result(&id, false, is_leader);
            let m = self.members.get_mut(&id).expect("listed");
            m.heard(now);
            m.is_new = false;
            if let Some(t) = m.awaiting_join.take() {
                self.join_answer(done, t, Ok(r));
            }
            self.pending_sync.insert(id);
        }
        let timeout = self.members.values().map(|m| m.rebalance_timeout).max().unwrap_or_default();
        self.sync_deadline = Some(now + timeout);
    }

    /// Keeps the leader if it rejoined, else makes any rejoined member the leader; false if
    /// no member rejoined.
    fn elect_joined_leader(&mut self) -> bool {
        let joined = |id: &MemberId| self.members.get(id).is_some_and(|m| m.awaiting_join.is_some());
        if self.leader.as_ref().is_some_and(joined) {
            return true;
        }
        match self.members.iter().find(|(_, m)| m.awaiting_join.is_some()).map(|(id, _)| id.clone()) {
            Some(id) => {
                self.leader = Some(id);
                true
            }
            None => false,
        }
    }

    /// The topics the members subscribe to, if every member's metadata is a consumer
    /// subscription.
    fn subscribed_topics(&self) -> Option<BTreeSet<String>> {
        if self.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL_TYPE) {
            return None;
        }
        let mut topics = BTreeSet::new();
        for m in self.members.values() {
            topics.extend(parse_subscription(&m.metadata(self.protocol.as_deref())).ok()?);
        }
        Some(topics)
    }

    pub(super) fn sync(&mut self, req: ClassicSync, ticket: Ticket, now: Instant, done: &mut Vec<Completion>) {
        let checked = self.validate_member(&req.member, req.instance.as_deref()).and_then(|()| {
            if req.generation != self.generation {
                return Err(GroupError::IllegalGeneration { got: req.generation, current: self.generation });
            }
            let type_differs = req.protocol_type.as_ref().is_some_and(|t| self.protocol_type.as_ref() != Some(t));
            let name_differs = req.protocol.as_ref().is_some_and(|p| self.protocol.as_ref() != Some(p));
            if type_differs || name_differs {
                return Err(GroupError::InconsistentProtocol(format!(
                    "the group's protocol is {:?} of type {:?}",
                    self.protocol.as_deref().unwrap_or(""),
                    self.protocol_type.as_deref().unwrap_or("")
                )));
            }
            Ok(())
        });
        if let Err(e) = checked {
            return self.sync_answer(done, ticket, Err(e));
        }
        match self.state {
            GroupState::Empty => self.sync_answer(done, ticket, Err(GroupError::UnknownMember(req.member.to_string()))),
            GroupState::PreparingRebalance => self.sync_answer(done, ticket, Err(GroupError::RebalanceInProgress)),
            GroupState::CompletingRebalance => {
                let m = self.members.get_mut(&req.member).expect("validated");
                m.heard(now);
                if let Some(old) = m.awaiting_sync.replace(ticket) {
                    self.sync_answer(done, old, Err(GroupError::RebalanceInProgress));
                }
                self.synced(&req.member);
                if self.leader.as_ref() == Some(&req.member) {
                    // Members the leader left out get an empty assignment, as in Kafka.
                    let mut given: HashMap<MemberId, Bytes> = req.assignments.into_iter().collect();
                    for (id, m) in &mut self.members {
                        m.assignment = given.remove(id).unwrap_or_default();
                    }
                    self.state = GroupState::Stable;
                    self.propagate(now, done);
                }
            }
            GroupState::Stable => {
                let m = self.members.get_mut(&req.member).expect("validated");
                m.heard(now);
                let r = SyncResult {
                    protocol_type: self.protocol_type.clone().unwrap_or_default(),
                    protocol: self.protocol.clone().unwrap_or_default(),
                    assignment: m.assignment.clone(),
                };
                self.synced(&req.member);
                self.sync_answer(done, ticket, Ok(r));
            }
        }
    }

    fn synced(&mut self, member: &MemberId) {
        self.pending_sync.remove(member);
        if self.pending_sync.is_empty() {
            self.sync_deadline = None;
        }
    }

    /// Hands every member waiting in SyncGroup its assignment.
    fn propagate(&mut self, now: Instant, done: &mut Vec<Completion>) {
        let (protocol_type, protocol) =
            (self.protocol_type.clone().unwrap_or_default(), self.protocol.clone().unwrap_or_default());
        let mut answers = Vec::new();
        for m in self.members.values_mut() {
            if let Some(t) = m.awaiting_sync.take() {
                m.heard(now);
                answers.push((
                    t,
                    SyncResult {
                        protocol_type: protocol_type.clone(),
                        protocol: protocol.clone(),
                        assignment: m.assignment.clone(),
                    },
                ));
            }
        }
        for (t, r) in answers {
            self.sync_answer(done, t, Ok(r));
        }
    }

    pub(super) fn leave(&mut self, l: &Leaving, now: Instant, done: &mut Vec<Completion>) -> Result<(), GroupError> {
        let id = match &l.member {
            // An administrator removing a static member by its instance id.
            None => {
                let instance = l.instance.as_deref().unwrap_or_default();
                self.statics.get(instance).cloned().ok_or_else(|| GroupError::UnknownMember(String::new()))?
            }
            Some(id) if self.pending.remove(id).is_some() => {
                self.try_complete_join(now, done);
                return Ok(());
            }
            Some(id) => {
                self.validate_member(id, l.instance.as_deref())?;
                id.clone()
            }
        };
        self.remove_member(&id, now, done);
        Ok(())
    }

    pub(super) fn check_commit(
        &mut self,
        member: &MemberId,
        instance: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Result<(), GroupError> {
        self.validate_member(member, instance)?;
        if generation != self.generation {
            return Err(GroupError::IllegalGeneration { got: generation, current: self.generation });
        }
        match self.state {
            GroupState::CompletingRebalance => Err(GroupError::RebalanceInProgress),
            GroupState::Empty => Ok(()),
            GroupState::Stable | GroupState::PreparingRebalance => {
                // A member may commit while the group prepares a rebalance: that is how it
                // gives its partitions up before it rejoins.
                if let Some(m) = self.members.get_mut(member) {
                    m.heard(now);
                }
                Ok(())
            }
        }
    }

    /// Removes a member from the group's books, answering what it still waits for.
    fn remove_entry(&mut self, id: &MemberId, done: &mut Vec<Completion>) {
        let Some(m) = self.members.remove(id) else { return };
        if let Some(t) = m.awaiting_join {
            self.join_answer(done, t, Err(GroupError::UnknownMember(id.to_string())));
        }
        if let Some(t) = m.awaiting_sync {
            self.sync_answer(done, t, Err(GroupError::UnknownMember(id.to_string())));
        }
        if let Some(instance) = &m.instance
            && self.statics.get(instance) == Some(id)
        {
            self.statics.remove(instance);
        }
        if self.leader.as_ref() == Some(id) {
            self.leader = self.members.keys().next().cloned();
        }
        self.pending_sync.remove(id);
    }

    /// A member leaves or is removed: the others rebalance. As in Kafka, the rebalance
    /// completes at once if every member left has rejoined already: when the last member
    /// leaves, the group is Empty as soon as the leave is answered.
    fn remove_member(&mut self, id: &MemberId, now: Instant, done: &mut Vec<Completion>) {
        self.remove_entry(id, done);
        match self.state {
            GroupState::Empty => {}
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(now, done);
                self.try_complete_join(now, done);
            }
            GroupState::PreparingRebalance => self.try_complete_join(now, done),
        }
    }

    pub(super) fn tick(&mut self, now: Instant, done: &mut Vec<Completion>) {
        let before = self.pending.len();
        self.pending.retain(|_, deadline| now < *deadline);
        if self.pending.len() != before {
            self.try_complete_join(now, done);
        }
        let expired: Vec<MemberId> = self
            .members
            .iter()
            .filter(|(_, m)| now >= m.expires && !m.kept_alive())
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.remove_member(&id, now, done);
        }
        self.try_complete_join(now, done);
        if self.sync_deadline.is_some_and(|d| now >= d)
            && matches!(self.state, GroupState::CompletingRebalance | GroupState::Stable)
            && !self.pending_sync.is_empty()
        {
            let late: Vec<MemberId> = std::mem::take(&mut self.pending_sync).into_iter().collect();
            for id in &late {
                self.remove_entry(id, done);
            }
            self.prepare_rebalance(now, done);
            self.try_complete_join(now, done);
        }
    }

    pub(super) fn describe(&self) -> ClassicDescription {
        let stable = self.state == GroupState::Stable;
        ClassicDescription {
            state: self.state,
            generation: self.generation,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: if stable { self.protocol.clone() } else { None },
            leader: self.leader.clone(),
            members: self
                .members
                .iter()
                .map(|(id, m)| ClassicMember {
                    member: id.clone(),
                    instance: m.instance.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable { m.metadata(self.protocol.as_deref()) } else { Bytes::new() },
                    assignment: if stable { m.assignment.clone() } else { Bytes::new() },
                })
                .collect(),
            subscribed: self.subscribed.clone(),
        }
    }
}
