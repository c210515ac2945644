//! Kafka's classic group protocol, run as a Kafka broker runs it, for the groups whose
//! members are Kafka clients (the listener's JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup).
//!
//! The coordinator does not assign partitions here: it elects a leader member, picks the
//! group's protocol among those every member supports (each member votes for the first
//! of its own protocols that all support), hands the leader every member's metadata in
//! its JoinGroup answer, and hands each member the assignment the leader's client
//! computed in its SyncGroup answer. Protocol names and metadata are opaque: any name the
//! members share is accepted (`range`, `cooperative-sticky`, an assignor of the client's
//! own), with any protocol type.
//!
//! A group moves through Kafka's states: `Empty`; `PreparingRebalance`, where JoinGroup
//! answers wait until every member has joined again or the rebalance timeout (the largest
//! of the members') passes, after which the members that did not rejoin are removed (static
//! ones are kept) — the first rebalance of an empty group waits instead for the initial
//! delay (`group.initial.rebalance.delay.ms`), again while members keep joining, within
//! the rebalance timeout, so consumers started together share a first generation; `CompletingRebalance`, a new generation whose members wait in SyncGroup
//! for the leader's assignment (members that do not sync within the rebalance timeout are
//! removed); `Stable`. So a member learns its partitions of a new generation only after
//! every other member rejoined (and gave its partitions up) or was removed. Static members
//! (KIP-345, `group.instance.id`) keep their place across a restart: a rejoin under the
//! same instance id within the session timeout replaces the member id and, in a stable
//! group, hands back the old assignment without a rebalance; the old member id is fenced.
//!
//! A pure state machine, as the rest of `group/`: time comes in as `now`; a request that
//! must wait is registered under a [`Ticket`] and its answer comes out later, with those
//! of the requests it completed, from [`ClassicGroups::take_completions`]. It lives on the
//! shard that coordinates the group.

mod group;
mod member;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;

use self::group::Group;
use crate::error::GroupError;
use crate::group::assignor::MemberId;

/// Names a waiting JoinGroup or SyncGroup; its answer comes back under it.
pub type Ticket = u64;

/// The most members a group may have, pending ones included (Kafka's `group.max.size`).
pub const GROUP_MEMBERS_MAX: usize = 10_000;

/// How long a new member's first JoinGroup may wait before it is dropped (Kafka's
/// `NewMemberJoinTimeoutMs`): a client that gave up on its join must not hold the
/// rebalance back for a whole rebalance timeout.
pub const NEW_MEMBER_JOIN_TIMEOUT: Duration = Duration::from_secs(300);

/// The protocol type of Kafka consumers, whose metadata is a consumer subscription.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// One protocol a member supports (Kafka's assignor name) and its metadata for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protocol {
    /// The name (`range`, `cooperative-sticky`, ...).
    pub name: String,
    /// Opaque to the coordinator (a consumer's subscription, for type `consumer`).
    pub metadata: Bytes,
}

/// A JoinGroup.
#[derive(Clone, Debug)]
pub struct ClassicJoin {
    /// The member id from an earlier join; `None` for a new member.
    pub member: Option<MemberId>,
    /// The static member's instance id (`group.instance.id`).
    pub instance: Option<String>,
    /// The client's id, as its requests carry it.
    pub client_id: String,
    /// The client's address, as Kafka writes it (`/127.0.0.1`).
    pub client_host: String,
    /// Removed after this long without a heartbeat.
    pub session_timeout: Duration,
    /// How long a rebalance waits for this member to rejoin.
    pub rebalance_timeout: Duration,
    /// The protocol type (`consumer`, `connect`, ...); a group's members share one.
    pub protocol_type: String,
    /// The protocols the member supports, most preferred first.
    pub protocols: Vec<Protocol>,
    /// A new member must first fetch its member id (MEMBER_ID_REQUIRED, JoinGroup v4+).
    pub require_known_member: bool,
    /// The client understands `skip_assignment` (JoinGroup v9+).
    pub supports_skip_assignment: bool,
    /// How long the first rebalance of an empty group this join starts waits for more
    /// members (the listener's `group.initial.rebalance.delay.ms`; zero answers a lone
    /// member at once).
    pub initial_rebalance_delay: Duration,
}

/// A JoinGroup's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinResult {
    /// The member's id.
    pub member: MemberId,
    /// The generation it joined.
    pub generation: i32,
    /// The group's protocol type.
    pub protocol_type: String,
    /// The protocol chosen.
    pub protocol: Option<String>,
    /// The leader; `None` when there is none.
    pub leader: Option<MemberId>,
    /// The leader must not compute an assignment (a static leader's rejoin, v9+).
    pub skip_assignment: bool,
    /// Every member's metadata for the chosen protocol: for the leader only.
    pub members: Vec<JoinedMember>,
}

/// A member as the leader's JoinGroup answer lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinedMember {
    /// Its id.
    pub member: MemberId,
    /// Its instance id, if static.
    pub instance: Option<String>,
    /// Its metadata for the chosen protocol.
    pub metadata: Bytes,
}

/// A SyncGroup.
#[derive(Clone, Debug)]
pub struct ClassicSync {
    /// The member.
    pub member: MemberId,
    /// Its instance id, if static.
    pub instance: Option<String>,
    /// The generation it joined.
    pub generation: i32,
    /// The protocol type it expects (SyncGroup v5+).
    pub protocol_type: Option<String>,
    /// The protocol it expects (SyncGroup v5+).
    pub protocol: Option<String>,
    /// From the leader: every member's assignment.
    pub assignments: Vec<(MemberId, Bytes)>,
}

/// A SyncGroup's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncResult {
    /// The group's protocol type.
    pub protocol_type: String,
    /// The group's protocol.
    pub protocol: String,
    /// The member's assignment, as the leader wrote it.
    pub assignment: Bytes,
}

/// A member leaving (LeaveGroup): by member id, or by instance id alone (an
/// administrator removing a static member).
#[derive(Clone, Debug)]
pub struct Leaving {
    /// The member id; `None` to name the member by `instance`.
    pub member: Option<MemberId>,
    /// The instance id, if static.
    pub instance: Option<String>,
}

/// The answer of a waiting request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// To a JoinGroup.
    Join(Result<JoinResult, GroupError>),
    /// To a SyncGroup.
    Sync(Result<SyncResult, GroupError>),
}

/// A waiting request's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The group.
    pub group: String,
    /// The request.
    pub ticket: Ticket,
    /// Its answer.
    pub outcome: Outcome,
}

/// A group's state, named as Kafka names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupState {
    /// No members.
    Empty,
    /// Waiting for the members to rejoin.
    PreparingRebalance,
    /// A new generation waits for the leader's assignment.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
}

impl GroupState {
    /// Kafka's name of the state (`ListGroups`, `DescribeGroups`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

/// A group as DescribeGroups shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassicDescription {
    /// Its state.
    pub state: GroupState,
    /// Its generation.
    pub generation: i32,
    /// Its members' protocol type.
    pub protocol_type: String,
    /// The protocol of the current generation (when stable, as Kafka reports it).
    pub protocol: Option<String>,
    /// The leader.
    pub leader: Option<MemberId>,
    /// The members.
    pub members: Vec<ClassicMember>,
    /// The topics the members subscribe to, when their protocol is the consumer one and
    /// every subscription reads (`None`: unknown, which counts as every topic).
    pub subscribed: Option<BTreeSet<String>>,
}

/// A member as DescribeGroups shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassicMember {
    /// Its id.
    pub member: MemberId,
    /// Its instance id, if static.
    pub instance: Option<String>,
    /// Its client's id.
    pub client_id: String,
    /// Its client's address (`/127.0.0.1`).
    pub client_host: String,
    /// Its metadata for the group's protocol (empty unless the group is stable).
    pub metadata: Bytes,
    /// Its assignment (empty unless the group is stable).
    pub assignment: Bytes,
}

/// Every classic group a shard coordinates.
#[derive(Debug, Default)]
pub struct ClassicGroups {
    groups: HashMap<String, Group>,
    done: Vec<Completion>,
}

impl ClassicGroups {
    /// The answers of waiting requests that completed since the last call.
    pub fn take_completions(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.done)
    }

    /// A JoinGroup; its answer comes out under `ticket`, now or once the rebalance completes.
    pub fn join(&mut self, group: &str, req: ClassicJoin, ticket: Ticket, now: Instant) {
        let Self { groups, done } = self;
        let answer = |done: &mut Vec<Completion>, r| {
            done.push(Completion { group: group.to_string(), ticket, outcome: Outcome::Join(r) });
        };
        let g = match (groups.get_mut(group), &req.member) {
            (Some(g), _) => g,
            (None, None) => groups.entry(group.to_string()).or_insert_with(|| Group::new(group)),
            (None, Some(m)) => return answer(done, Err(GroupError::UnknownMember(m.to_string()))),
        };
        let size = g.members.len() + g.pending.len();
        let known = req.member.as_ref().is_some_and(|m| g.members.contains_key(m) || g.pending.contains_key(m));
        if !known && size >= GROUP_MEMBERS_MAX {
            return answer(done, Err(GroupError::MaxSize(GROUP_MEMBERS_MAX)));
        }
        if !g.supports_protocols(&req.protocol_type, &req.protocols) {
            return answer(
                done,
                Err(GroupError::InconsistentProtocol(format!(
                    "the group's members use protocol type {:?} and share none of the protocols {:?}",
                    g.protocol_type.as_deref().unwrap_or(""),
                    req.protocols.iter().map(|p| p.name.as_str()).collect::<Vec<_>>()
                ))),
            );
        }
        match req.member.clone() {
            None => g.join_new(req, ticket, now, done),
            Some(m) => g.join_known(m, req, ticket, now, done),
        }
        g.try_complete_join(now, done);
    }

    /// A SyncGroup; its answer comes out under `ticket`, now or once the leader's
    /// assignment arrives.
    pub fn sync(&mut self, group: &str, req: ClassicSync, ticket: Ticket, now: Instant) {
        let Self { groups, done } = self;
        match groups.get_mut(group) {
            Some(g) => g.sync(req, ticket, now, done),
            None => done.push(Completion {
                group: group.to_string(),
                ticket,
                outcome: Outcome::Sync(Err(GroupError::UnknownMember(req.member.to_string()))),
            }),
        }
    }

    /// A Heartbeat: `Ok` while the member's generation is current and stable (or waiting
    /// for its assignment); REBALANCE_IN_PROGRESS asks it to rejoin.
    pub fn heartbeat(
        &mut self,
        group: &str,
        member: &MemberId,
        instance: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Result<(), GroupError> {
        let g = self.groups.get_mut(group).ok_or_else(|| GroupError::UnknownMember(member.to_string()))?;
        g.validate_member(member, instance)?;
        if generation != g.generation {
            return Err(GroupError::IllegalGeneration { got: generation, current: g.generation });
        }
        let state = g.state;
        if let Some(m) = g.members.get_mut(member) {
            m.heard(now);
        }
        match state {
            GroupState::Empty => Err(GroupError::UnknownMember(member.to_string())),
            GroupState::PreparingRebalance => Err(GroupError::RebalanceInProgress),
            GroupState::CompletingRebalance | GroupState::Stable => Ok(()),
        }
    }

    /// A LeaveGroup of several members: each one's result.
    pub fn leave(&mut self, group: &str, leaving: &[Leaving], now: Instant) -> Vec<Result<(), GroupError>> {
        let Self { groups, done } = self;
        let Some(g) = groups.get_mut(group) else {
            return leaving
                .iter()
                .map(|l| Err(GroupError::UnknownMember(l.member.as_ref().map(ToString::to_string).unwrap_or_default())))
                .collect();
        };
        leaving.iter().map(|l| g.leave(l, now, done)).collect()
    }

    /// Checks an offset commit against the group as Kafka does: a commit with no
    /// generation (`-1`) is accepted while the group is empty; otherwise the member must
    /// be in the group (and hold its instance id) at the current generation, and not be
    /// waiting for its assignment. `None` if the coordinator has no such group.
    pub fn check_commit(
        &mut self,
        group: &str,
        member: Option<&MemberId>,
        instance: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Option<Result<(), GroupError>> {
        let g = self.groups.get_mut(group)?;
        if generation < 0 && g.state == GroupState::Empty {
            return Some(Ok(()));
        }
        let Some(member) = member else { return Some(Err(GroupError::UnknownMember(String::new()))) };
        Some(g.check_commit(member, instance, generation, now))
    }

    /// Whether the group exists here with members (not counting new members told to
    /// come back with their member id: Kafka deletes a group they wait to join).
    #[must_use]
    pub fn has_members(&self, group: &str) -> bool {
        self.groups.get(group).is_some_and(|g| !g.members.is_empty())
    }

    /// Whether the coordinator knows the group (in any state).
    #[must_use]
    pub fn contains(&self, group: &str) -> bool {
        self.groups.contains_key(group)
    }

    /// Forgets an empty group (DeleteGroups, or an empty group with nothing committed);
    /// a member id handed out to come back with is forgotten with it.
    pub fn forget_if_empty(&mut self, group: &str) -> bool {
        let empty = self.groups.get(group).is_some_and(|g| g.state == GroupState::Empty);
        if empty {
            self.groups.remove(group);
        }
        empty
    }

    /// The group as DescribeGroups shows it.
    #[must_use]
    pub fn describe(&self, group: &str) -> Option<ClassicDescription> {
        self.groups.get(group).map(Group::describe)
    }

    /// Every group's id, member count and generation (for metrics: nothing cloned).
    pub fn sizes(&self) -> impl Iterator<Item = (&str, usize, i32)> {
        self.groups.iter().map(|(n, g)| (n.as_str(), g.members.len(), g.generation))
    }

    /// Every group with its state and protocol type.
    pub fn overview(&self) -> impl Iterator<Item = (&str, GroupState, &str)> {
        self.groups.iter().map(|(n, g)| (n.as_str(), g.state, g.protocol_type.as_deref().unwrap_or("")))
    }

    /// Runs the clocks: removes members whose session expired and pending members that
    /// never came back, completes rebalances whose timeout passed, and removes members that
    /// did not sync in time. Returns the empty groups (for the caller to forget if nothing
    /// else keeps them).
    pub fn tick(&mut self, now: Instant) -> Vec<String> {
        let Self { groups, done } = self;
        let mut empty = Vec::new();
        for g in groups.values_mut() {
            g.tick(now, done);
            if g.state == GroupState::Empty && g.pending.is_empty() {
                empty.push(g.name.clone());
            }
        }
        empty
    }
}
