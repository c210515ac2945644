//! Kafka's consumer group protocol of KIP-848 (ConsumerGroupHeartbeat), run as a Kafka
//! broker runs it, for Kafka clients with `group.protocol=consumer`.
//!
//! The coordinator assigns: each member says what it subscribes to (topic names, or a
//! regular expression) and, optionally, which server-side assignor it prefers (`uniform`,
//! the default, or `range`, Kafka's names; `uniform` is Kafka's homogeneous uniform
//! assignor when every member subscribes to the same topics and the sticky assignor of
//! [`assignor`](crate::group::assignor) otherwise, `range` is its range assignor). Any change of
//! membership, subscriptions or the subscribed topics' partitions bumps the group epoch,
//! and the target assignment for that epoch is computed at once. Each member then
//! reconciles towards its target in steps, by heartbeats (Kafka's `CurrentAssignmentBuilder`):
//! first it is told to revoke what its target no longer holds, keeping its epoch; once a
//! heartbeat shows it owns none of those, it moves to the target epoch and is handed the
//! partitions of its target that no other member still holds (assigned or being revoked);
//! the rest come with a later heartbeat, once their holders let go. So no partition is held
//! by two members at once.
//!
//! Members are fenced (removed, their partitions freed, the group epoch bumped) when their
//! session times out (the listener's `group.consumer.session.timeout.ms`), or when they do
//! not revoke within their rebalance timeout. A request with an epoch the member does not
//! have is FENCED_MEMBER_EPOCH, except its previous epoch with owned partitions within its
//! assignment (a lost response), as in Kafka. Static members (`group.instance.id`) that leave
//! with epoch -2 keep their partitions until their session times out; a new member with
//! that instance id takes their place, epoch and assignment, without a rebalance.
//!
//! A subscription's regex is resolved against the topics at every heartbeat of the group,
//! for every member, except in the heartbeat that brings a regex the group does not
//! resolve yet: as Kafka resolves regexes asynchronously, for the whole group, a member's
//! named topics are assigned first and its new regex's topics from the group's next
//! heartbeat (librdkafka's test 0045 expects exactly that), and once resolved a regex
//! counts for every member that uses it at once (so that a topic created later is spread
//! over them in one assignment, without a revocation: librdkafka's 0113 n_wildcard).
//!
//! A pure state machine like the rest of `group/`: time comes in as `now`, the topics as a
//! map of partition counts, and names stay names (the listener turns them into topic ids).

mod group;
#[cfg(test)]
mod tests;
mod uniform;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use self::group::Group;
use crate::error::GroupError;
use crate::group::assignor::{MemberId, TopicPartition};

/// The epoch a member leaves with.
pub const LEAVE_EPOCH: i32 = -1;
/// The epoch a static member leaves with, to come back under its instance id.
pub const STATIC_LEAVE_EPOCH: i32 = -2;
/// The server-side assignor a group uses when no member names one (Kafka's default).
pub const DEFAULT_ASSIGNOR: &str = "uniform";
/// The server-side assignors, by Kafka's names.
pub const ASSIGNORS: [&str; 2] = ["uniform", "range"];

/// The engine assignor that computes a server-side assignor's targets.
pub(crate) fn engine_assignor(name: &str) -> Option<&'static str> {
    match name {
        "uniform" => Some("sticky"),
        "range" => Some("range"),
        _ => None,
    }
}

/// A ConsumerGroupHeartbeat, with topics by name. `None` fields are unchanged since the
/// member's last heartbeat.
#[derive(Clone, Debug)]
pub struct ConsumerHeartbeat {
    /// The member id (the client's own from v1; the listener makes one for a v0 join).
    pub member: MemberId,
    /// 0 to join, -1 to leave, -2 for a static member to leave for now, else its epoch.
    pub epoch: i32,
    /// The static member's instance id.
    pub instance: Option<String>,
    /// The member's rack.
    pub rack: Option<String>,
    /// How long the member may take to revoke partitions.
    pub rebalance_timeout: Option<Duration>,
    /// The topics it subscribes to.
    pub topics: Option<Vec<String>>,
    /// A regular expression its topics match (the empty string: none).
    pub regex: Option<String>,
    /// Its preferred server-side assignor.
    pub assignor: Option<String>,
    /// The partitions it owns now (topics the coordinator does not know are left out).
    pub owned: Option<Vec<TopicPartition>>,
    /// The client's id.
    pub client_id: String,
    /// The client's address, as Kafka writes it (`/127.0.0.1`).
    pub client_host: String,
    /// How long the member may stay silent (the listener's setting).
    pub session_timeout: Duration,
}

/// A ConsumerGroupHeartbeat's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerAnswer {
    /// The member id.
    pub member: MemberId,
    /// The member's epoch (-1 or -2 after a leave).
    pub epoch: i32,
    /// The partitions the member is to own, when it must hear them (a join, a change, a
    /// full request); `None` otherwise.
    pub assignment: Option<Vec<TopicPartition>>,
}

/// A member as ConsumerGroupDescribe shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerMemberDescription {
    /// Its id.
    pub member: MemberId,
    /// Its instance id, if static.
    pub instance: Option<String>,
    /// Its rack.
    pub rack: Option<String>,
    /// Its epoch.
    pub epoch: i32,
    /// Its client id.
    pub client_id: String,
    /// Its address.
    pub client_host: String,
    /// The topics it subscribes to by name.
    pub topics: Vec<String>,
    /// Its regular expression, if any.
    pub regex: Option<String>,
    /// What it owns now.
    pub assignment: Vec<TopicPartition>,
    /// What it is reconciling towards.
    pub target: Vec<TopicPartition>,
}

/// A group as ConsumerGroupDescribe shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerGroupDescription {
    /// Kafka's name of its state: `Empty`, `Reconciling` or `Stable`.
    pub state: &'static str,
    /// The group epoch.
    pub epoch: i32,
    /// The epoch of the target assignment.
    pub assignment_epoch: i32,
    /// The server-side assignor.
    pub assignor: String,
    /// The members.
    pub members: Vec<ConsumerMemberDescription>,
}

/// Every KIP-848 group one shard coordinates.
#[derive(Debug, Default)]
pub struct ConsumerGroups {
    groups: HashMap<String, Group>,
}

impl ConsumerGroups {
    /// A ConsumerGroupHeartbeat of `group`, with the partition counts of every topic a
    /// member may subscribe to (internal ones left out).
    pub fn heartbeat(
        &mut self,
        group: &str,
        req: ConsumerHeartbeat,
        topics: &BTreeMap<String, u32>,
        now: Instant,
    ) -> Result<ConsumerAnswer, GroupError> {
        check(group, &req)?;
        if req.epoch != 0 && !self.groups.contains_key(group) {
            return Err(GroupError::UnknownMember(req.member.to_string()));
        }
        let g = self.groups.entry(group.to_string()).or_default();
        g.heartbeat(req, topics, now)
    }

    /// Fences members whose session or revocation time is up; returns them by group.
    pub fn expire(&mut self, now: Instant) -> Vec<(String, MemberId)> {
        let mut gone = Vec::new();
        for (name, g) in &mut self.groups {
            gone.extend(g.expire(now).into_iter().map(|m| (name.clone(), m)));
        }
        gone
    }

    /// Checks an OffsetCommit, TxnOffsetCommit or OffsetFetch naming `member` at `epoch`
    /// (`None` when the coordinator has no such group, so other kinds decide): from
    /// outside the group (a negative epoch, no member) only while it has no members,
    /// otherwise from a member at its current epoch (STALE_MEMBER_EPOCH for another).
    #[must_use]
    pub fn check_offsets(&self, group: &str, member: Option<&MemberId>, epoch: i32) -> Option<Result<(), GroupError>> {
        let g = self.groups.get(group)?;
        let member = member.filter(|m| !m.as_str().is_empty());
        Some(match member {
            None if epoch < 0 && g.is_empty() => Ok(()),
            None => Err(GroupError::UnknownMember(String::new())),
            Some(m) => match g.epoch_of(m) {
                None => Err(GroupError::UnknownMember(m.to_string())),
                Some(current) if current != epoch => Err(GroupError::StaleMemberEpoch { got: epoch, current }),
                Some(_) => Ok(()),
            },
        })
    }

    /// Whether the group has members.
    #[must_use]
    pub fn has_members(&self, group: &str) -> bool {
        self.groups.get(group).is_some_and(|g| !g.is_empty())
    }

    /// Whether the coordinator knows the group.
    #[must_use]
    pub fn contains(&self, group: &str) -> bool {
        self.groups.contains_key(group)
    }

    /// Forgets the group if it has no members.
    pub fn forget_if_empty(&mut self, group: &str) {
        if !self.has_members(group) {
            self.groups.remove(group);
        }
    }

    /// The topics the group's members subscribe to now (names and regex matches).
    #[must_use]
    pub fn subscribed(&self, group: &str) -> Option<Vec<String>> {
        self.groups.get(group).map(Group::subscribed)
    }

    /// The group as ConsumerGroupDescribe shows it.
    #[must_use]
    pub fn describe(&self, group: &str) -> Option<ConsumerGroupDescription> {
        self.groups.get(group).map(Group::describe)
    }

    /// Every group with its state.
    pub fn overview(&self) -> impl Iterator<Item = (&str, &'static str)> {
        self.groups.iter().map(|(name, g)| (name.as_str(), g.state()))
    }
}

/// Kafka's checks of a heartbeat's fields, before the group is looked at.
fn check(group: &str, req: &ConsumerHeartbeat) -> Result<(), GroupError> {
    let invalid = |m: &str| Err(GroupError::InvalidRequest(m.to_string()));
    if group.is_empty() {
        return invalid("GroupId can't be empty.");
    }
    if req.instance.as_deref() == Some("") {
        return invalid("InstanceId can't be empty.");
    }
    if req.rack.as_deref() == Some("") {
        return invalid("RackId can't be empty.");
    }
    if req.member.as_str().is_empty() {
        return invalid("MemberId can't be empty.");
    }
    match req.epoch {
        0 => {
            if req.rebalance_timeout.is_none() {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if req.owned.as_ref().is_none_or(|o| !o.is_empty()) {
                return invalid("TopicPartitions must be empty when (re-)joining.");
            }
            if req.topics.is_none() && req.regex.is_none() {
                return invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.");
            }
        }
        STATIC_LEAVE_EPOCH if req.instance.is_none() => return invalid("InstanceId can't be null."),
        e if e < STATIC_LEAVE_EPOCH => return invalid(&format!("MemberEpoch {e} is invalid.")),
        _ => {}
    }
    if let Some(a) = &req.assignor
        && engine_assignor(a).is_none()
    {
        return Err(GroupError::UnsupportedAssignor(a.clone()));
    }
    if let Some(re) = req.regex.as_deref().filter(|r| !r.is_empty()) {
        group::compile(re)?;
    }
    Ok(())
}
