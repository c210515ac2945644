//! KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe, over the coordinator's
//! [`consumer`](crate::group::consumer) groups. Topics travel by id on the wire and by
//! name in the coordinator: owned partitions of an id no topic has are left out (the
//! member let go of a deleted topic), and an assignment names each topic by its id now.

use std::sync::Arc;

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member, TopicPartitions as DescribedPartitions,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, TopicName,
};
use sluice_io::PartitionId;

use super::{Client, opt_str, str_bytes};
use crate::error::{EngineError, GroupError};
use crate::group::assignor::{MemberId, TopicPartition};
use crate::group::consumer::ConsumerHeartbeat;
use crate::kafka::context::Context;
use crate::kafka::errors::{self, code};
use crate::topic::meta::TopicId;

/// What a client may do to a group, reported when asked: with no authorizer, everything
/// a group supports (Kafka's READ 3, DELETE 6 and DESCRIBE 8).
const GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8);

/// The partitions of `parts`, grouped by topic (they come sorted by topic).
fn by_topic(parts: &[TopicPartition]) -> Vec<(&str, Vec<i32>)> {
    let mut out: Vec<(&str, Vec<i32>)> = Vec::new();
    for tp in parts {
        let p = tp.partition.get() as i32;
        match out.last_mut() {
            Some((t, ps)) if *t == tp.topic => ps.push(p),
            _ => out.push((&tp.topic, vec![p])),
        }
    }
    out
}

/// Handles a ConsumerGroupHeartbeat: the member's epoch and, when it must hear it, its
/// assignment by topic id, with the listener's heartbeat interval.
pub(crate) async fn heartbeat(
    ctx: &Arc<Context>,
    req: ConsumerGroupHeartbeatRequest,
    version: i16,
    client: &Client,
) -> ConsumerGroupHeartbeatResponse {
    let mut resp = ConsumerGroupHeartbeatResponse::default();
    let mut member = req.member_id.as_str().to_string();
    // v0: the coordinator names a joining member; from v1 the client does.
    if version == 0 && req.member_epoch == 0 && member.is_empty() {
        member = uuid::Uuid::new_v4().simple().to_string();
    }
    let owned = req.topic_partitions.map(|tps| {
        let mut owned = Vec::new();
        for t in tps {
            let Some(name) = ctx.engine.topic_name(TopicId(t.topic_id)) else { continue };
            for p in t.partitions {
                if let Ok(p) = PartitionId::try_from(p) {
                    owned.push(TopicPartition::new(name.clone(), p));
                }
            }
        }
        owned
    });
    let hb = ConsumerHeartbeat {
        member: MemberId::new(member),
        epoch: req.member_epoch,
        instance: opt_str(req.instance_id.as_ref()),
        rack: opt_str(req.rack_id.as_ref()),
        rebalance_timeout: u64::try_from(req.rebalance_timeout_ms).ok().map(std::time::Duration::from_millis),
        topics: req.subscribed_topic_names.map(|ts| ts.into_iter().map(|t| t.0.as_str().to_string()).collect()),
        regex: opt_str(req.subscribed_topic_regex.as_ref()),
        assignor: opt_str(req.server_assignor.as_ref()),
        owned,
        client_id: client.id.clone(),
        client_host: client.host.to_string(),
        session_timeout: ctx.config.consumer_session_timeout,
    };
    match ctx.engine.consumer_heartbeat(req.group_id.0.as_str(), hb).await {
        Ok(answer) => {
            resp.member_id = Some(str_bytes(answer.member.as_str()));
            resp.member_epoch = answer.epoch;
            resp.heartbeat_interval_ms =
                i32::try_from(ctx.config.consumer_heartbeat_interval.as_millis()).unwrap_or(i32::MAX);
            resp.assignment = answer.assignment.map(|parts| {
                let mut a = Assignment::default();
                for (topic, partitions) in by_topic(&parts) {
                    let Some(id) = ctx.engine.topic_id(topic) else { continue };
                    let mut tp = TopicPartitions::default();
                    tp.topic_id = id.0;
                    tp.partitions = partitions;
                    a.topic_partitions.push(tp);
                }
                a
            });
        }
        Err(e) => {
            resp.error_code = match &e {
                // An empty group id is Kafka's INVALID_REQUEST here, not INVALID_GROUP_ID.
                EngineError::InvalidName(_) => code::INVALID_REQUEST,
                e => errors::of(e),
            };
            resp.error_message = Some(str_bytes(match e {
                EngineError::Group { source, .. } => source.to_string(),
                e => e.to_string(),
            }));
        }
    }
    resp
}

fn described(ctx: &Context, parts: &[TopicPartition]) -> DescribedAssignment {
    let mut a = DescribedAssignment::default();
    for (topic, partitions) in by_topic(parts) {
        let mut tp = DescribedPartitions::default();
        tp.topic_id = ctx.engine.topic_id(topic).unwrap_or(TopicId::NONE).0;
        tp.topic_name = TopicName(str_bytes(topic));
        tp.partitions = partitions;
        a.topic_partitions.push(tp);
    }
    a
}

/// Handles a ConsumerGroupDescribe: each KIP-848 group with its epochs, assignor and
/// members (what each owns and its target); GROUP_ID_NOT_FOUND for a group the
/// coordinator does not know as one (a classic group: clients then ask DescribeGroups).
pub(crate) async fn describe(
    ctx: &Arc<Context>,
    req: ConsumerGroupDescribeRequest,
    version: i16,
) -> ConsumerGroupDescribeResponse {
    let mut resp = ConsumerGroupDescribeResponse::default();
    for group in req.group_ids {
        let mut dg = DescribedGroup::default();
        let name = group.0.as_str().to_string();
        dg.group_id = group;
        dg.authorized_operations = if req.include_authorized_operations { GROUP_OPERATIONS } else { i32::MIN };
        let view = match ctx.engine.group_view(&name).await {
            Ok(v) => v,
            Err(e) => {
                dg.error_code = errors::of(&e);
                dg.error_message = Some(str_bytes(e.to_string()));
                resp.groups.push(dg);
                continue;
            }
        };
        let Some(d) = view.consumer else {
            dg.error_code = errors::of_group(&GroupError::NotFound);
            dg.error_message = Some(str_bytes(format!("Group {name} not found, or not a consumer group.")));
            resp.groups.push(dg);
            continue;
        };
        dg.group_state = str_bytes(d.state);
        dg.group_epoch = d.epoch;
        dg.assignment_epoch = d.assignment_epoch;
        dg.assignor_name = str_bytes(d.assignor);
        for m in d.members {
            let mut dm = Member::default();
            dm.member_id = str_bytes(m.member.as_str());
            dm.instance_id = m.instance.map(str_bytes);
            dm.rack_id = m.rack.map(str_bytes);
            dm.member_epoch = m.epoch;
            dm.client_id = str_bytes(m.client_id);
            dm.client_host = str_bytes(m.client_host);
            dm.subscribed_topic_names = m.topics.into_iter().map(|t| TopicName(str_bytes(t))).collect();
            dm.subscribed_topic_regex = m.regex.map(str_bytes);
            dm.assignment = described(ctx, &m.assignment);
            dm.target_assignment = described(ctx, &m.target);
            if version >= 1 {
                // Kafka's member type: 1, a member of the consumer protocol.
                dm.member_type = 1;
            }
            dg.members.push(dm);
        }
        resp.groups.push(dg);
    }
    resp
}
