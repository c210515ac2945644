//! The group coordinator: members, generations and assignments of consumer groups.
//!
//! As in Kafka's current consumer protocol (KIP-848), the coordinator computes the
//! assignment itself with the group's assignor whenever membership changes, and members
//! learn it from their join and heartbeats. Each change of membership (a join, a leave,
//! an eviction after a missed session timeout, a member changing its subscription) starts
//! a new generation; within one generation every partition of the subscribed topics is
//! owned by exactly one member. As in KIP-848, a partition moving to another member is
//! handed to it only once the member that held it has heard of the new generation (its
//! heartbeat, sync or rejoin) and so let it go, or has left the group: no partition is
//! held by two members at once, across generations too.
//!
//! This is a pure state machine: time comes in as `now`, partition counts as a map. It
//! lives on the shard that owns the group's partition of the offsets topic.
//!
//! Kafka clients' groups run Kafka's classic protocol instead ([`classic`], where a
//! client leader assigns), or KIP-848's ([`consumer`], where this coordinator assigns).
//! A group id is of one kind while it has members: an engine consumer cannot join a group
//! with Kafka client members, nor a Kafka client one with engine consumers
//! (INCONSISTENT_GROUP_PROTOCOL for the client), because neither kind can take part in
//! the other's assignment; a classic JoinGroup to a KIP-848 group with members gets
//! INCONSISTENT_GROUP_PROTOCOL, a ConsumerGroupHeartbeat to a group of another kind with
//! members GROUP_ID_NOT_FOUND, as from Kafka (whose online migration between the two
//! protocols is not carried). Committed offsets are shared: a group emptied of one kind
//! may be joined by another (the empty group is converted: forgotten, offsets kept) and
//! resumes at its offsets.
//!
//! [`classic`]: crate::group::classic
//! [`consumer`]: crate::group::consumer

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::error::{EngineError, GroupError, Result};
use crate::group::assignor::{Assignment, MemberId, Subscription, TopicPartition, by_name};
use crate::group::classic::{ClassicGroups, ClassicJoin, Ticket};
use crate::group::consumer::{ConsumerAnswer, ConsumerGroups, ConsumerHeartbeat};

/// A member's view after a join or a heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberState {
    /// The member's id (issued by the coordinator on its first join).
    pub member: MemberId,
    /// The group's generation.
    pub generation: u32,
    /// The partitions this member owns in that generation.
    pub assignment: Vec<TopicPartition>,
}

/// A group as `describe` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDescription {
    /// The group.
    pub group: String,
    /// The generation.
    pub generation: u32,
    /// The assignor.
    pub assignor: String,
    /// Members with their subscriptions and partitions.
    pub members: Vec<(MemberId, Vec<String>, Vec<TopicPartition>)>,
}

/// A group as the Kafka listener's DescribeGroups, OffsetDelete and DeleteGroups see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupView {
    /// The engine consumers' group, if the coordinator knows one.
    pub engine: Option<GroupDescription>,
    /// The Kafka clients' group, if the coordinator knows one.
    pub classic: Option<crate::group::classic::ClassicDescription>,
    /// The KIP-848 group of Kafka clients, if the coordinator knows one.
    pub consumer: Option<crate::group::consumer::ConsumerGroupDescription>,
    /// Whether the group has committed offsets.
    pub has_offsets: bool,
}

impl GroupView {
    /// Whether the group exists: known to the coordinator, or holding offsets.
    #[must_use]
    pub fn exists(&self) -> bool {
        self.engine.is_some() || self.classic.is_some() || self.consumer.is_some() || self.has_offsets
    }
}

/// A group as ListGroups shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupOverview {
    /// The group.
    pub group: String,
    /// Kafka's name of its state (`Empty`, `Stable`, ...).
    pub state: &'static str,
    /// Its members' protocol type (`consumer` for the engine's own; empty for a group with
    /// committed offsets only).
    pub protocol_type: String,
    /// Kafka's group type: `consumer` for a KIP-848 group, `classic` for every other.
    pub group_type: &'static str,
}

#[derive(Debug)]
struct Member {
    topics: Vec<String>,
    session_timeout: Duration,
    last_seen: Instant,
}

#[derive(Debug)]
struct Group {
    generation: u32,
    assignor: String,
    members: BTreeMap<MemberId, Member>,
    assignment: Assignment,
    partitions: BTreeMap<String, u32>,
    next_member: u64,
    /// What each member was last handed: the partitions it may be reading now.
    held: BTreeMap<MemberId, Vec<TopicPartition>>,
}

/// Every group this shard coordinates.
#[derive(Debug, Default)]
pub struct GroupCoordinator {
    groups: HashMap<String, Group>,
    /// The groups of Kafka clients.
    pub classic: ClassicGroups,
    /// The KIP-848 groups of Kafka clients.
    pub consumer: ConsumerGroups,
}

/// Who commits offsets, which decides how the commit is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommitAuth {
    /// Not a member (Kafka's generation -1): accepted while the group has no members.
    Standalone,
    /// A member, at the generation it is in (and, if static, with its instance id).
    Member {
        /// The member.
        member: MemberId,
        /// Its generation; negative for none (then accepted while the group is empty).
        generation: i32,
        /// Its instance id, if static.
        instance: Option<String>,
    },
    /// Offsets a committed transaction carries: written as decided, unchecked (as Kafka
    /// writes them when the transaction commits).
    Transaction,
}

impl CommitAuth {
    /// The engine consumer's form: a member and generation, or none.
    #[must_use]
    pub fn of(member: Option<(&MemberId, u32)>) -> CommitAuth {
        match member {
            None => CommitAuth::Standalone,
            Some((m, g)) => CommitAuth::Member {
                member: m.clone(),
                generation: i32::try_from(g).unwrap_or(i32::MAX),
                instance: None,
            },
        }
    }
}

/// Parameters of a join.
#[derive(Clone, Debug)]
pub struct JoinRequest {
    /// The member's id from an earlier join, to rejoin as the same member.
    pub member: Option<MemberId>,
    /// Topics to consume.
    pub topics: Vec<String>,
    /// How long without a heartbeat before the member is evicted.
    pub session_timeout: Duration,
    /// `range`, `roundrobin` or `sticky`; every member of a group must use the same.
    pub assignor: String,
}

impl GroupCoordinator {
    /// A member joins (or rejoins): a new generation with it included.
    pub fn join(
        &mut self,
        group: &str,
        req: JoinRequest,
        partitions: BTreeMap<String, u32>,
        now: Instant,
    ) -> Result<MemberState> {
        if by_name(&req.assignor).is_none() {
            return Err(EngineError::InvalidConfig(format!(
                "unknown assignor {:?}: use range, roundrobin or sticky",
                req.assignor
            )));
        }
        if req.topics.is_empty() {
            return Err(EngineError::InvalidConfig("a member must subscribe to at least one topic".into()));
        }
        if self.classic.has_members(group) || self.consumer.has_members(group) {
            return Err(EngineError::Group {
                group: group.to_string(),
                source: GroupError::InconsistentProtocol(
                    "the group's members are Kafka clients; an engine consumer cannot join it".into(),
                ),
            });
        }
        let g = self.groups.entry(group.to_string()).or_insert_with(|| Group {
            generation: 0,
            assignor: req.assignor.clone(),
            members: BTreeMap::new(),
            assignment: Assignment::new(),
            partitions: BTreeMap::new(),
            next_member: 0,
            held: BTreeMap::new(),
        });
        if g.members.is_empty() {
            g.assignor = req.assignor.clone();
        } else if g.assignor != req.assignor {
            return Err(EngineError::InvalidConfig(format!(
                "group {group:?} uses the {} assignor; this member asked for {}",
                g.assignor, req.assignor
            )));
        }
        let member = match req.member {
            Some(m) if g.members.contains_key(&m) => m,
            _ => {
                g.next_member += 1;
                MemberId::new(format!("{group}-member-{}", g.next_member))
            }
        };
        let mut topics = req.topics;
        topics.sort();
        topics.dedup();
        let changed = g.members.get(&member).is_none_or(|m| m.topics != topics);
        g.members.insert(member.clone(), Member { topics, session_timeout: req.session_timeout, last_seen: now });
        g.partitions = partitions;
        if changed {
            g.rebalance();
        }
        Ok(g.state_of(&member))
    }

    /// A member fetches its assignment for `generation` (Kafka's SyncGroup): refused as
    /// stale if the group has moved on since the member joined or last synced.
    pub fn sync(&mut self, group: &str, member: &MemberId, generation: u32, now: Instant) -> Result<MemberState> {
        let g = self.group_mut(group)?;
        let m = g.members.get_mut(member).ok_or_else(|| unknown_member(group, member))?;
        m.last_seen = now;
        if generation != g.generation {
            return Err(EngineError::StaleGeneration {
                group: group.to_string(),
                member: member.to_string(),
                got: generation,
                current: g.generation,
            });
        }
        Ok(g.state_of(member))
    }

    /// A member says it is alive; returns the current generation and its assignment (a
    /// new generation means the member must adopt the new assignment).
    pub fn heartbeat(
        &mut self,
        group: &str,
        member: &MemberId,
        partitions: BTreeMap<String, u32>,
        now: Instant,
    ) -> Result<MemberState> {
        let g = self.group_mut(group)?;
        let m = g.members.get_mut(member).ok_or_else(|| unknown_member(group, member))?;
        m.last_seen = now;
        if partitions != g.partitions {
            // Partitions were added to a subscribed topic: assign them.
            g.partitions = partitions;
            g.rebalance();
        }
        Ok(g.state_of(member))
    }

    /// A member leaves: a new generation without it.
    pub fn leave(&mut self, group: &str, member: &MemberId) -> Result<()> {
        let g = self.group_mut(group)?;
        if g.members.remove(member).is_none() {
            return Err(unknown_member(group, member));
        }
        g.held.remove(member);
        g.rebalance();
        Ok(())
    }

    /// Evicts members whose session timed out; returns them by group.
    pub fn expire(&mut self, now: Instant) -> Vec<(String, MemberId)> {
        let mut evicted = self.consumer.expire(now);
        for (name, g) in &mut self.groups {
            let gone: Vec<MemberId> = g
                .members
                .iter()
                .filter(|(_, m)| now.saturating_duration_since(m.last_seen) > m.session_timeout)
                .map(|(id, _)| id.clone())
                .collect();
            if gone.is_empty() {
                continue;
            }
            for id in gone {
                g.members.remove(&id);
                g.held.remove(&id);
                evicted.push((name.clone(), id));
            }
            g.rebalance();
        }
        evicted
    }

    /// A Kafka client's JoinGroup (see [`ClassicGroups::join`]); refused at once if engine
    /// consumers hold the group.
    pub fn classic_join(
        &mut self,
        group: &str,
        req: ClassicJoin,
        ticket: Ticket,
        now: Instant,
    ) -> std::result::Result<(), GroupError> {
        if self.groups.get(group).is_some_and(|g| !g.members.is_empty()) {
            return Err(GroupError::InconsistentProtocol(
                "the group's members are the engine's own consumers; a Kafka client cannot join it".into(),
            ));
        }
        if self.consumer.has_members(group) {
            return Err(GroupError::InconsistentProtocol(format!(
                "Group {group} is a consumer group (KIP-848) with members; a classic member cannot join it"
            )));
        }
        self.consumer.forget_if_empty(group);
        self.classic.join(group, req, ticket, now);
        Ok(())
    }

    /// A KIP-848 ConsumerGroupHeartbeat (see [`ConsumerGroups::heartbeat`]); refused with
    /// GROUP_ID_NOT_FOUND if members of another kind hold the group. An empty classic
    /// group is converted (forgotten; its offsets stay), as Kafka converts one.
    pub fn consumer_heartbeat(
        &mut self,
        group: &str,
        req: ConsumerHeartbeat,
        topics: &BTreeMap<String, u32>,
        now: Instant,
    ) -> std::result::Result<ConsumerAnswer, GroupError> {
        if self.groups.get(group).is_some_and(|g| !g.members.is_empty()) || self.classic.has_members(group) {
            return Err(GroupError::OtherKind(format!("Group {group} is not a consumer group.")));
        }
        self.classic.forget_if_empty(group);
        self.consumer.heartbeat(group, req, topics, now)
    }

    /// Checks a commit as Kafka does: from a current member at the current generation, or
    /// from outside the group (no generation) while it has no members. A member's commit
    /// keeps its session alive.
    pub fn check_commit(&mut self, group: &str, auth: &CommitAuth, now: Instant) -> Result<()> {
        let (member, instance, generation) = match auth {
            CommitAuth::Transaction => return Ok(()),
            CommitAuth::Standalone => (None, None, -1),
            CommitAuth::Member { member, generation, instance } => (Some(member), instance.as_deref(), *generation),
        };
        if let Some(r) = self.consumer.check_offsets(group, member, generation) {
            return r.map_err(|source| EngineError::Group { group: group.to_string(), source });
        }
        let engine_members = self.groups.get(group).is_some_and(|g| !g.members.is_empty());
        if !engine_members && let Some(r) = self.classic.check_commit(group, member, instance, generation, now) {
            return r.map_err(|source| EngineError::Group { group: group.to_string(), source });
        }
        let member = member.filter(|_| generation >= 0).map(|m| (m, generation as u32));
        let g = self.groups.get(group);
        match (g, member) {
            (None, None) => Ok(()),
            (Some(g), None) if g.members.is_empty() => Ok(()),
            (Some(_), None) => {
                Err(EngineError::Group { group: group.to_string(), source: GroupError::UnknownMember(String::new()) })
            }
            (None, Some((m, _))) => Err(unknown_member(group, m)),
            (Some(g), Some((m, generation))) => {
                if !g.members.contains_key(m) {
                    return Err(unknown_member(group, m));
                }
                if generation != g.generation {
                    return Err(EngineError::StaleGeneration {
                        group: group.to_string(),
                        member: m.to_string(),
                        got: generation,
                        current: g.generation,
                    });
                }
                Ok(())
            }
        }
    }

    /// Whether the group has members, of either kind.
    #[must_use]
    pub fn has_members(&self, group: &str) -> bool {
        self.groups.get(group).is_some_and(|g| !g.members.is_empty())
            || self.classic.has_members(group)
            || self.consumer.has_members(group)
    }

    /// Forgets a group with no members (DeleteGroups); false if it has members.
    pub fn forget(&mut self, group: &str) -> bool {
        if self.has_members(group) {
            return false;
        }
        self.groups.remove(group);
        self.classic.forget_if_empty(group);
        self.consumer.forget_if_empty(group);
        true
    }

    /// Whether the coordinator knows the group, of either kind, with members or not.
    #[must_use]
    pub fn knows(&self, group: &str) -> bool {
        self.groups.contains_key(group) || self.classic.contains(group) || self.consumer.contains(group)
    }

    /// A group's members and assignment, if the coordinator knows it.
    #[must_use]
    pub fn describe(&self, group: &str) -> Option<GroupDescription> {
        let g = self.groups.get(group)?;
        Some(GroupDescription {
            group: group.to_string(),
            generation: g.generation,
            assignor: g.assignor.clone(),
            members: g
                .members
                .iter()
                .map(|(id, m)| (id.clone(), m.topics.clone(), g.assignment.get(id).cloned().unwrap_or_default()))
                .collect(),
        })
    }

    /// The groups this coordinator knows.
    pub fn groups(&self) -> impl Iterator<Item = &str> {
        self.groups.keys().map(String::as_str)
    }

    /// Every engine consumers' group's id, member count and generation (for metrics:
    /// nothing cloned).
    pub fn sizes(&self) -> impl Iterator<Item = (&str, usize, u32)> {
        self.groups.iter().map(|(n, g)| (n.as_str(), g.members.len(), g.generation))
    }

    fn group_mut(&mut self, group: &str) -> Result<&mut Group> {
        self.groups.get_mut(group).ok_or_else(|| EngineError::UnknownGroup(group.to_string()))
    }
}

fn unknown_member(group: &str, member: &MemberId) -> EngineError {
    EngineError::UnknownMember { group: group.to_string(), member: member.to_string() }
}

impl Group {
    fn rebalance(&mut self) {
        self.generation += 1;
        let assignor = by_name(&self.assignor).expect("checked on join");
        let subscriptions: Vec<Subscription> = self
            .members
            .iter()
            .map(|(id, m)| {
                let owned = self.assignment.get(id).cloned().unwrap_or_default();
                Subscription::new(id.clone(), m.topics.clone()).with_owned(owned)
            })
            .collect();
        let known: BTreeMap<String, u32> = self
            .partitions
            .iter()
            .filter(|(t, _)| self.members.values().any(|m| m.topics.contains(t)))
            .map(|(t, &n)| (t.clone(), n))
            .collect();
        self.assignment = assignor.assign(&known, &subscriptions);
    }

    /// The member's state: of its assignment in the current generation, the partitions
    /// no other member still holds (it has not heard of the generation yet, or not given
    /// them up); the rest come with a later heartbeat, once their holder has let go. What
    /// the member is handed becomes what it holds, so what it no longer owns is freed.
    fn state_of(&mut self, member: &MemberId) -> MemberState {
        let target = self.assignment.get(member).cloned().unwrap_or_default();
        let granted: Vec<TopicPartition> = target
            .into_iter()
            .filter(|tp| !self.held.iter().any(|(other, held)| other != member && held.contains(tp)))
            .collect();
        self.held.insert(member.clone(), granted.clone());
        MemberState { member: member.clone(), generation: self.generation, assignment: granted }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts() -> BTreeMap<String, u32> {
        [("a".to_string(), 4), ("b".to_string(), 2)].into_iter().collect()
    }

    fn join(c: &mut GroupCoordinator, member: Option<MemberId>, now: Instant) -> MemberState {
        let req = JoinRequest {
            member,
            topics: vec!["a".into(), "b".into()],
            session_timeout: Duration::from_millis(100),
            assignor: "sticky".into(),
        };
        c.join("g", req, parts(), now).unwrap()
    }

    /// Within the current generation every partition has exactly one owner.
    fn check_exclusive(c: &GroupCoordinator) {
        let d = c.describe("g").unwrap();
        let mut owned: Vec<TopicPartition> = d.members.iter().flat_map(|m| m.2.clone()).collect();
        owned.sort();
        let all: Vec<TopicPartition> = parts()
            .iter()
            .flat_map(|(t, &n)| (0..n).map(move |p| TopicPartition::new(t.clone(), sluice_io::PartitionId(p))))
            .collect();
        if d.members.is_empty() {
            assert!(owned.is_empty());
        } else {
            assert_eq!(owned, all, "generation {}: none owned twice, none orphaned", d.generation);
        }
        // What members were handed, across generations, never overlaps.
        let mut held: Vec<&TopicPartition> = c.groups["g"].held.values().flatten().collect();
        let n = held.len();
        held.sort();
        held.dedup();
        assert_eq!(held.len(), n, "a partition held by two members: {:?}", c.groups["g"].held);
    }

    #[test]
    fn generations_follow_membership() {
        let mut c = GroupCoordinator::default();
        let t0 = Instant::now();
        let a = join(&mut c, None, t0);
        assert_eq!((a.generation, a.assignment.len()), (1, 6));
        let b = join(&mut c, None, t0);
        assert_eq!(b.generation, 2);
        // a still holds every partition: b is handed none of its share yet.
        assert!(b.assignment.is_empty(), "{b:?}");
        check_exclusive(&c);
        // Syncing at the old generation is stale; at the new one it gives the assignment.
        assert!(matches!(c.sync("g", &a.member, 1, t0), Err(EngineError::StaleGeneration { got: 1, current: 2, .. })));
        assert_eq!(c.sync("g", &b.member, 2, t0).unwrap(), b);
        // a hears of generation 2 and lets b's share go; b's next sync or heartbeat has it.
        let a2 = c.heartbeat("g", &a.member, parts(), t0).unwrap();
        assert_eq!(a2.generation, 2);
        let b2 = c.sync("g", &b.member, 2, t0).unwrap();
        assert_eq!(a2.assignment.len() + b2.assignment.len(), 6);
        assert!(!a2.assignment.is_empty() && !b2.assignment.is_empty());
        assert!(a2.assignment.iter().all(|tp| !b2.assignment.contains(tp)));
        // A rejoin with the same subscription is not a rebalance.
        assert_eq!(join(&mut c, Some(a.member.clone()), t0).generation, 2);
        // Stale commits are refused, current ones accepted.
        let commit = |m: &MemberId, g| CommitAuth::of(Some((m, g)));
        assert!(matches!(c.check_commit("g", &commit(&a.member, 1), t0), Err(EngineError::StaleGeneration { .. })));
        c.check_commit("g", &commit(&a.member, 2), t0).unwrap();
        assert!(c.check_commit("g", &CommitAuth::Standalone, t0).is_err(), "standalone commits only when empty");
        c.check_commit("g", &CommitAuth::Transaction, t0).unwrap();
        // Session timeout: b stops heartbeating and is evicted.
        let later = t0 + Duration::from_millis(150);
        c.heartbeat("g", &a.member, parts(), t0 + Duration::from_millis(90)).unwrap();
        let evicted = c.expire(later);
        assert_eq!(evicted, vec![("g".to_string(), b.member.clone())]);
        check_exclusive(&c);
        let a3 = c.heartbeat("g", &a.member, parts(), later).unwrap();
        assert_eq!((a3.generation, a3.assignment.len()), (3, 6));
        assert!(matches!(c.heartbeat("g", &b.member, parts(), later), Err(EngineError::UnknownMember { .. })));
        c.leave("g", &a.member).unwrap();
        check_exclusive(&c);
        c.check_commit("g", &CommitAuth::Standalone, later).unwrap();
    }

    #[test]
    fn added_partitions_are_assigned_on_the_next_heartbeat() {
        let mut c = GroupCoordinator::default();
        let t0 = Instant::now();
        let a = join(&mut c, None, t0);
        let mut more = parts();
        more.insert("a".into(), 6);
        let s = c.heartbeat("g", &a.member, more, t0).unwrap();
        assert_eq!((s.generation, s.assignment.len()), (2, 8));
    }

    #[test]
    fn a_group_is_run_by_engine_consumers_or_by_kafka_clients_not_both() {
        use crate::group::classic::{ClassicJoin, Outcome, Protocol};
        let mut c = GroupCoordinator::default();
        let t0 = Instant::now();
        let kafka = |member: Option<MemberId>| ClassicJoin {
            member,
            instance: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_millis(100),
            rebalance_timeout: Duration::from_millis(100),
            protocol_type: "consumer".into(),
            protocols: vec![Protocol { name: "range".into(), metadata: bytes::Bytes::new() }],
            require_known_member: false,
            supports_skip_assignment: false,
            initial_rebalance_delay: Duration::ZERO,
        };
        let a = join(&mut c, None, t0);
        assert!(matches!(c.classic_join("g", kafka(None), 1, t0), Err(GroupError::InconsistentProtocol(_))));
        c.leave("g", &a.member).unwrap();
        // Emptied, the group takes a Kafka client; then engine consumers are refused.
        c.classic_join("g", kafka(None), 2, t0).unwrap();
        let joined = c.classic.take_completions();
        assert!(matches!(&joined[0].outcome, Outcome::Join(Ok(r)) if r.generation == 1), "{joined:?}");
        let refused = c.join(
            "g",
            JoinRequest {
                member: None,
                topics: vec!["a".into()],
                session_timeout: Duration::from_secs(1),
                assignor: "range".into(),
            },
            parts(),
            t0,
        );
        assert!(matches!(refused, Err(EngineError::Group { source: GroupError::InconsistentProtocol(_), .. })));
        // Commits are checked by the classic group now.
        assert!(c.check_commit("g", &CommitAuth::Standalone, t0).is_err());
        assert!(c.has_members("g") && !c.forget("g"));
    }

    #[test]
    fn bad_joins_are_typed() {
        let mut c = GroupCoordinator::default();
        let t0 = Instant::now();
        let req = |assignor: &str, topics: Vec<String>| JoinRequest {
            member: None,
            topics,
            session_timeout: Duration::from_secs(1),
            assignor: assignor.into(),
        };
        assert!(c.join("g", req("nope", vec!["a".into()]), parts(), t0).is_err());
        assert!(c.join("g", req("range", vec![]), parts(), t0).is_err());
        c.join("g", req("range", vec!["a".into()]), parts(), t0).unwrap();
        assert!(c.join("g", req("sticky", vec!["a".into()]), parts(), t0).is_err());
        assert!(matches!(c.heartbeat("other", &MemberId::new("x"), parts(), t0), Err(EngineError::UnknownGroup(_))));
    }
}
