//! OffsetCommit, OffsetFetch and OffsetDelete: committed offsets with their metadata and
//! leader epochs, in the offsets topic.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest,
    OffsetFetchResponse, TopicName,
};
use sluice_io::{Offset, PartitionId};

use super::{member_of, opt_str, str_bytes};
use crate::group::coordinator::CommitAuth;
use crate::group::offsets::{CommittedDetails, CommittedOffset, METADATA_MAX_BYTES};
use crate::kafka::context::Context;
use crate::kafka::errors::{self, code};

/// The partition, if the topic exists and has it.
fn existing(ctx: &Context, topic: &str, partition: i32) -> Option<PartitionId> {
    let count = ctx.engine.describe_topic(topic).ok()?.shards.len();
    PartitionId::try_from(partition).ok().filter(|p| p.index() < count)
}

/// Handles an OffsetCommit request, from a member (its id, generation and, if static,
/// instance id) or standalone (generation -1, no member id) while the group has no
/// members. Each partition gets its own error: an unknown one UNKNOWN_TOPIC_OR_PARTITION,
/// metadata over 4 KiB OFFSET_METADATA_TOO_LARGE; the others are committed together.
pub(crate) async fn commit(ctx: &Arc<Context>, req: OffsetCommitRequest, version: i16) -> OffsetCommitResponse {
    let group = req.group_id.0.as_str();
    let instance = if version >= 7 { opt_str(req.group_instance_id.as_ref()) } else { None };
    let generation = req.generation_id_or_member_epoch;
    let auth = match member_of(&req.member_id) {
        None if generation < 0 && instance.is_none() => CommitAuth::Standalone,
        member => CommitAuth::Member {
            member: member.unwrap_or_else(|| crate::group::assignor::MemberId::new("")),
            generation,
            instance,
        },
    };
    let mut codes: BTreeMap<(usize, usize), i16> = BTreeMap::new();
    let mut offsets = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        let topic = t.name.0.as_str();
        for (pi, p) in t.partitions.iter().enumerate() {
            let c = match (existing(ctx, topic, p.partition_index), u64::try_from(p.committed_offset)) {
                (None, _) => code::UNKNOWN_TOPIC_OR_PARTITION,
                (_, Err(_)) => code::INVALID_REQUEST,
                (Some(_), _) if p.committed_metadata.as_ref().is_some_and(|m| m.len() > METADATA_MAX_BYTES) => {
                    code::OFFSET_METADATA_TOO_LARGE
                }
                (Some(pid), Ok(o)) => {
                    let leader_epoch =
                        (version >= 6 && p.committed_leader_epoch >= 0).then_some(p.committed_leader_epoch);
                    let metadata = p.committed_metadata.as_ref().map(|m| m.as_str().to_string()).unwrap_or_default();
                    offsets.push((
                        topic.to_string(),
                        pid,
                        CommittedOffset { offset: Offset(o), leader_epoch, metadata },
                    ));
                    continue;
                }
            };
            codes.insert((ti, pi), c);
        }
    }
    let shared = if offsets.is_empty() {
        code::NONE
    } else {
        match ctx.engine.commit_offsets_as(group, auth, offsets).await {
            Ok(()) => code::NONE,
            Err(e) => errors::of(&e),
        }
    };
    let mut resp = OffsetCommitResponse::default();
    for (ti, t) in req.topics.into_iter().enumerate() {
        let mut tr = OffsetCommitResponseTopic::default();
        for (pi, p) in t.partitions.iter().enumerate() {
            let mut pr = OffsetCommitResponsePartition::default();
            pr.partition_index = p.partition_index;
            pr.error_code = codes.get(&(ti, pi)).copied().unwrap_or(shared);
            tr.partitions.push(pr);
        }
        tr.name = t.name;
        resp.topics.push(tr);
    }
    resp
}

/// One partition's committed position as OffsetFetch reports it: -1 with empty metadata
/// where nothing is committed.
struct Fetched {
    offset: i64,
    leader_epoch: i32,
    metadata: String,
}

/// The (topic, partitions) asked for, or every committed one if `None`.
fn asked(committed: &CommittedDetails, topics: Option<Vec<(String, Vec<i32>)>>) -> Vec<(String, Vec<(i32, Fetched)>)> {
    let topics = topics.unwrap_or_else(|| {
        let mut all: Vec<(String, Vec<i32>)> = Vec::new();
        for (topic, p) in committed.keys() {
            match all.last_mut() {
                Some((t, ps)) if t == topic => ps.push(p.get() as i32),
                _ => all.push((topic.clone(), vec![p.get() as i32])),
            }
        }
        all
    });
    topics
        .into_iter()
        .map(|(topic, partitions)| {
            let fetched = partitions
                .into_iter()
                .map(|p| {
                    let c = PartitionId::try_from(p).ok().and_then(|pi| committed.get(&(topic.clone(), pi)));
                    let f = match c {
                        Some(c) => Fetched {
                            offset: c.offset.0 as i64,
                            leader_epoch: c.leader_epoch.unwrap_or(-1),
                            metadata: c.metadata.clone(),
                        },
                        None => Fetched { offset: -1, leader_epoch: -1, metadata: String::new() },
                    };
                    (p, f)
                })
                .collect();
            (topic, fetched)
        })
        .collect()
}

/// Handles an OffsetFetch request: one group before v8, several from v8 (each with its
/// own error code; from v9 a group may name the asking member and its epoch).
pub(crate) async fn fetch(ctx: &Arc<Context>, req: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
    let mut resp = OffsetFetchResponse::default();
    if version < 8 {
        let topics =
            req.topics.map(|ts| ts.into_iter().map(|t| (t.name.0.as_str().to_string(), t.partition_indexes)).collect());
        let committed = match ctx.engine.committed_details(req.group_id.0.as_str()).await {
            Ok(c) => c,
            Err(e) => {
                resp.error_code = errors::of(&e);
                return resp;
            }
        };
        for (topic, partitions) in asked(&committed, topics) {
            let mut tr = OffsetFetchResponseTopic::default();
            for (p, f) in partitions {
                let mut pr = OffsetFetchResponsePartition::default();
                pr.partition_index = p;
                pr.committed_offset = f.offset;
                if version >= 5 {
                    pr.committed_leader_epoch = f.leader_epoch;
                }
                pr.metadata = Some(str_bytes(f.metadata));
                tr.partitions.push(pr);
            }
            tr.name = TopicName(str_bytes(topic));
            resp.topics.push(tr);
        }
        return resp;
    }
    for g in req.groups {
        let mut gr = OffsetFetchResponseGroup::default();
        let topics =
            g.topics.map(|ts| ts.into_iter().map(|t| (t.name.0.as_str().to_string(), t.partition_indexes)).collect());
        // From v9 a member names itself and its epoch (KIP-848): checked as a commit is
        // (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH), as Kafka checks it.
        if version >= 9
            && let Some(member) = g.member_id.as_ref()
        {
            let auth = CommitAuth::Member {
                member: crate::group::assignor::MemberId::new(member.as_str()),
                generation: g.member_epoch,
                instance: None,
            };
            if let Err(e) = ctx.engine.check_commit(g.group_id.0.as_str(), auth).await {
                gr.error_code = errors::of(&e);
                gr.group_id = g.group_id;
                resp.groups.push(gr);
                continue;
            }
        }
        match ctx.engine.committed_details(g.group_id.0.as_str()).await {
            Err(e) => gr.error_code = errors::of(&e),
            Ok(committed) => {
                for (topic, partitions) in asked(&committed, topics) {
                    let mut tr = OffsetFetchResponseTopics::default();
                    for (p, f) in partitions {
                        let mut pr = OffsetFetchResponsePartitions::default();
                        pr.partition_index = p;
                        pr.committed_offset = f.offset;
                        pr.committed_leader_epoch = f.leader_epoch;
                        pr.metadata = Some(str_bytes(f.metadata));
                        tr.partitions.push(pr);
                    }
                    tr.name = TopicName(str_bytes(topic));
                    gr.topics.push(tr);
                }
            }
        }
        gr.group_id = g.group_id;
        resp.groups.push(gr);
    }
    resp
}

/// Handles an OffsetDelete request: the group's offsets of partitions it does not
/// consume are deleted (GROUP_SUBSCRIBED_TO_TOPIC for the others); a group error
/// (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP for a non-consumer group with members) answers
/// with no partitions, as Kafka does.
pub(crate) async fn delete(ctx: &Arc<Context>, req: OffsetDeleteRequest) -> OffsetDeleteResponse {
    let mut resp = OffsetDeleteResponse::default();
    let group = req.group_id.0.as_str();
    if group.is_empty() {
        resp.error_code = code::INVALID_GROUP_ID;
        return resp;
    }
    let mut codes: BTreeMap<(usize, usize), i16> = BTreeMap::new();
    let mut partitions = Vec::new();
    let mut slots = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        for (pi, p) in t.partitions.iter().enumerate() {
            match existing(ctx, t.name.0.as_str(), p.partition_index) {
                None => {
                    codes.insert((ti, pi), code::UNKNOWN_TOPIC_OR_PARTITION);
                }
                Some(pid) => {
                    partitions.push((t.name.0.as_str().to_string(), pid));
                    slots.push((ti, pi));
                }
            }
        }
    }
    match ctx.engine.delete_offsets(group, partitions).await {
        Err(e) => {
            resp.error_code = errors::of(&e);
            return resp;
        }
        Ok(results) => {
            for (slot, r) in slots.into_iter().zip(results) {
                codes.insert(slot, r.map_or_else(|e| errors::of_group(&e), |()| code::NONE));
            }
        }
    }
    for (ti, t) in req.topics.into_iter().enumerate() {
        let mut tr = OffsetDeleteResponseTopic::default();
        for (pi, p) in t.partitions.iter().enumerate() {
            let mut pr = OffsetDeleteResponsePartition::default();
            pr.partition_index = p.partition_index;
            pr.error_code = codes.get(&(ti, pi)).copied().unwrap_or(code::NONE);
            tr.partitions.push(pr);
        }
        tr.name = t.name;
        resp.topics.push(tr);
    }
    resp
}
