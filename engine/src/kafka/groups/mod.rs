//! Kafka's classic consumer group protocol over the engine's coordinator.
//!
//! The engine computes assignments itself (as KIP-848 does), so the listener never
//! elects a client as leader: JoinGroup names no leader, every member sends an empty
//! SyncGroup, and SyncGroup answers each with the coordinator's assignment for it in the
//! consumer protocol's format. The assignor is the first of the member's protocols the
//! engine knows (`range`, `roundrobin`, `sticky`). Membership changes make a new
//! generation at once; a member still at an older one is told REBALANCE_IN_PROGRESS on its
//! next heartbeat or sync and rejoins; the commit it makes as it gives up its partitions
//! is accepted (as Kafka accepts it during a rebalance), one from a member no longer in
//! the group is refused (UNKNOWN_MEMBER_ID). As in Kafka, a JoinGroup is answered only
//! once every member of its generation has joined at it, or after the client's rebalance
//! timeout (`requests::await_rejoins`): the members that were in the group have given their
//! partitions up and committed before any member learns the new assignment, so no
//! partition is read by two members at once and the next owner starts at the last
//! committed position.
//!
//! Subscriptions and assignments are parsed and written here, with bounds checks on every
//! count, rather than with the protocol crate (whose decoder allocates what a count
//! claims before reading it).

pub(crate) mod requests;

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_fetch_response::{OffsetFetchResponsePartition, OffsetFetchResponseTopic};
use kafka_protocol::messages::{
    DescribeGroupsRequest, DescribeGroupsResponse, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
    SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use sluice_io::Offset;

use crate::error::EngineError;
use crate::group::assignor::{ASSIGNOR_NAMES, MemberId, TopicPartition};
use crate::group::coordinator::JoinRequest;

use super::errors::{self, code};

/// The protocol type of consumer groups.
const CONSUMER: &str = "consumer";
/// Session timeouts accepted, in milliseconds (Kafka's broker defaults are 6 s to 30 min;
/// the lower bound here is lower so tests can run fast).
const SESSION_TIMEOUT_MS: std::ops::RangeInclusive<i32> = 1_000..=1_800_000;

fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// Why a consumer protocol subscription could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubscriptionError {
    /// It ends in the middle of a field.
    #[error("subscription truncated")]
    Truncated,
    /// A negative version.
    #[error("subscription version {0}")]
    Version(i16),
    /// More topics than its bytes could hold.
    #[error("subscription claims {count} topics in {bytes} bytes")]
    Count {
        /// The claimed count.
        count: i32,
        /// The subscription's size.
        bytes: usize,
    },
    /// A null topic name.
    #[error("a null topic name in a subscription")]
    NullName,
    /// A topic name that is not UTF-8.
    #[error("a topic name that is not UTF-8")]
    NotUtf8,
}

/// Reads the topics of a consumer protocol subscription (any version: the topic list
/// comes first in all of them; what follows is not needed).
pub fn parse_subscription(bytes: &[u8]) -> Result<Vec<String>, SubscriptionError> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], SubscriptionError> {
        let end = at.checked_add(n).filter(|&e| e <= bytes.len()).ok_or(SubscriptionError::Truncated)?;
        let s = &bytes[at..end];
        at = end;
        Ok(s)
    };
    let version = i16::from_be_bytes(take(2)?.try_into().map_err(|_| SubscriptionError::Truncated)?);
    if version < 0 {
        return Err(SubscriptionError::Version(version));
    }
    let count = i32::from_be_bytes(take(4)?.try_into().map_err(|_| SubscriptionError::Truncated)?);
    if count < 0 || count as usize > bytes.len() / 2 {
        return Err(SubscriptionError::Count { count, bytes: bytes.len() });
    }
    let mut topics = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = i16::from_be_bytes(take(2)?.try_into().map_err(|_| SubscriptionError::Truncated)?);
        let len = usize::try_from(len).map_err(|_| SubscriptionError::NullName)?;
        let name = std::str::from_utf8(take(len)?).map_err(|_| SubscriptionError::NotUtf8)?;
        topics.push(name.to_string());
    }
    Ok(topics)
}

/// Writes a consumer protocol subscription (version 0) of `topics`.
pub fn encode_subscription(topics: &[String]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(topics.len() as i32);
    for t in topics {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
    }
    b.put_i32(-1); // no user data
    b.freeze()
}

/// Writes a consumer protocol assignment (version 0) of `partitions`.
pub fn encode_assignment(partitions: &[TopicPartition]) -> Bytes {
    let mut by_topic: Vec<(&str, Vec<i32>)> = Vec::new();
    for tp in partitions {
        match by_topic.iter_mut().find(|(t, _)| *t == tp.topic) {
            Some((_, ps)) => ps.push(tp.partition.get() as i32),
            None => by_topic.push((&tp.topic, vec![tp.partition.get() as i32])),
        }
    }
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(by_topic.len() as i32);
    for (t, ps) in by_topic {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
        b.put_i32(ps.len() as i32);
        for p in ps {
            b.put_i32(p);
        }
    }
    b.put_i32(-1); // no user data
    b.freeze()
}

fn member_of(id: &StrBytes) -> Option<MemberId> {
    (!id.is_empty()).then(|| MemberId::new(id.as_str()))
}

/// The longest a join waits for the other members to rejoin, whatever the client asks.
const MAX_REBALANCE_TIMEOUT_MS: i32 = 300_000;
/// How often a waiting join looks at the group again.
const REJOIN_POLL: Duration = Duration::from_millis(20);

/// Kafka's join barrier for one group: who has joined at its newest generation, and who
/// has ever joined through this listener.
#[derive(Debug, Default)]
pub(crate) struct JoinBarrier {
    generation: u32,
    joined: std::collections::HashSet<MemberId>,
    /// Members of the listener's clients. A member the engine's own consumers hold
    /// (`GroupConsumer`) never joins here, so the barrier does not wait for it.
    clients: std::collections::HashSet<MemberId>,
    /// The assignment each member got from its last SyncGroup. A member handed only part
    /// of its share (another still held the rest: one that did not rejoin in time) is
    /// told to rejoin once the coordinator would hand it more.
    synced: std::collections::HashMap<MemberId, Vec<TopicPartition>>,
}

impl JoinBarrier {
    /// Notes that `member` has joined at `generation`; false if that generation is
    /// already older than the barrier's (the member must join again).
    fn arrive(&mut self, member: &MemberId, generation: u32) -> bool {
        if generation > self.generation {
            self.generation = generation;
            self.joined.clear();
        }
        self.clients.insert(member.clone());
        if generation == self.generation {
            self.joined.insert(member.clone());
        }
        generation == self.generation
    }

    /// Whether every listener member among `members` (the group's, at the barrier's
    /// generation) has joined at that generation. Forgets members no longer in it.
    fn complete(&mut self, members: &[MemberId]) -> bool {
        self.clients.retain(|m| members.contains(m));
        self.synced.retain(|m, _| members.contains(m));
        members.iter().all(|m| !self.clients.contains(m) || self.joined.contains(m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_round_trip_and_lies_are_refused() {
        let topics = vec!["orders".to_string(), "a.b-c_d".to_string()];
        assert_eq!(parse_subscription(&encode_subscription(&topics)), Ok(topics));
        assert!(parse_subscription(&[0, 0, 0x7f, 0xff, 0xff, 0xff]).is_err());
        assert!(parse_subscription(&[0, 1, 0, 0, 0, 1, 0, 9, b'x']).is_err());
        assert!(parse_subscription(&[0]).is_err());
    }

    #[test]
    fn the_join_barrier_waits_for_every_listener_member_of_the_newest_generation() {
        let (a, b, embedded) = (MemberId::new("a"), MemberId::new("b"), MemberId::new("embedded"));
        let mut barrier = JoinBarrier::default();
        assert!(barrier.arrive(&a, 1));
        assert!(barrier.complete(&[a.clone(), embedded.clone()]), "the engine's own members are not waited for");
        // b joins: generation 2; a, still at 1, has not rejoined yet.
        assert!(barrier.arrive(&b, 2));
        assert!(!barrier.complete(&[a.clone(), b.clone(), embedded.clone()]));
        assert!(!barrier.arrive(&a, 1), "a join at an older generation must be renewed");
        assert!(barrier.arrive(&a, 2));
        assert!(barrier.complete(&[a.clone(), b.clone(), embedded]));
        // b leaves: generation 3 holds a alone (await_rejoins renews a's join on seeing it).
        assert!(barrier.arrive(&a, 3));
        assert_eq!(barrier.joined.len(), 1, "a new generation starts with no one joined");
        assert!(barrier.complete(&[a]));
        assert!(!barrier.clients.contains(&b), "members gone from the group are forgotten");
    }

    #[test]
    fn assignments_group_partitions_by_topic() {
        let a = encode_assignment(&[
            TopicPartition::new("t", sluice_io::PartitionId(0)),
            TopicPartition::new("u", sluice_io::PartitionId(3)),
            TopicPartition::new("t", sluice_io::PartitionId(2)),
        ]);
        let mut want = BytesMut::new();
        want.put_i16(0);
        want.put_i32(2);
        for (t, ps) in [("t", &[0, 2][..]), ("u", &[3][..])] {
            want.put_i16(1);
            want.put_slice(t.as_bytes());
            want.put_i32(ps.len() as i32);
            for p in ps {
                want.put_i32(*p);
            }
        }
        want.put_i32(-1);
        assert_eq!(a, want.freeze());
    }
}
