//! Kafka's consumer groups for Kafka clients, over the engine's group coordinator.
//!
//! Membership runs Kafka's classic protocol as a broker does (the coordinator's
//! [`classic`](crate::group::classic) groups): JoinGroup elects a leader and answers it
//! with every member's metadata once every member has rejoined (or the rebalance timeout
//! passed), the group's protocol is the one the members' vote picks among those all of
//! them support (any name: the client's assignor computes the assignment), the leader's
//! SyncGroup carries the assignment and each member's SyncGroup answers with its own
//! share. Static members (`group.instance.id`), MEMBER_ID_REQUIRED (JoinGroup v4+) and
//! batch LeaveGroup (v3+) are Kafka's. A group held by the engine's own `GroupConsumer`s
//! is refused to Kafka clients with INCONSISTENT_GROUP_PROTOCOL (and the other way
//! round): the two kinds cannot share an assignment.
//!
//! Kafka clients with `group.protocol=consumer` run KIP-848's protocol instead (the
//! coordinator's [`consumer`](crate::group::consumer) groups: the coordinator assigns,
//! members reconcile by heartbeats).
//!
//! - [`membership`]: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.
//! - [`consumer`]: ConsumerGroupHeartbeat, ConsumerGroupDescribe (KIP-848).
//! - [`offsets`]: OffsetCommit (with metadata and leader epoch), OffsetFetch (one group,
//!   or several from v8), OffsetDelete.
//! - [`admin`]: ListGroups (state and type filters), DescribeGroups (members' client id
//!   and host, metadata and assignment), DeleteGroups.
//!
//! Group ids are any string (Kafka's rule), empty only where Kafka takes it (offsets,
//! DescribeGroups, DeleteGroups); they are never part of a path.

pub(crate) mod admin;
pub(crate) mod consumer;
pub(crate) mod membership;
pub(crate) mod offsets;

use std::sync::Arc;

use kafka_protocol::protocol::StrBytes;

use crate::group::assignor::MemberId;
pub use crate::group::consumer_protocol::{
    SubscriptionError, encode_assignment, encode_subscription, parse_subscription,
};

/// The protocol type of consumer groups.
const CONSUMER: &str = crate::group::classic::CONSUMER_PROTOCOL_TYPE;

/// Session timeouts accepted, in milliseconds (Kafka's broker defaults are 6 s to 30 min;
/// the lower bound here is lower so tests can run fast).
const SESSION_TIMEOUT_MS: std::ops::RangeInclusive<i32> = 1_000..=1_800_000;

/// The client a request came from, as DescribeGroups reports it.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    /// The request header's client id.
    pub(crate) id: String,
    /// The connection's peer address, as Kafka writes it (`/127.0.0.1`).
    pub(crate) host: Arc<str>,
}

fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

fn member_of(id: &StrBytes) -> Option<MemberId> {
    (!id.is_empty()).then(|| MemberId::new(id.as_str()))
}

fn opt_str(s: Option<&StrBytes>) -> Option<String> {
    s.map(|s| s.as_str().to_string())
}
