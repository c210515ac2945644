//! The data path's checks: Produce (Write on each topic, and on the transactional id of a
//! transactional one), Fetch (Read), ListOffsets (Describe), Metadata (Describe; Create on
//! the cluster or the topic to auto-create one; the topics listed are those the principal
//! may describe).

use kafka_protocol::messages::{
    FetchRequest, ListOffsetsRequest, MetadataRequest, ProduceRequest, RequestKind, ResponseKind, fetch_response,
    list_offsets_response, metadata_response, produce_response,
};

use super::{Authz, Screened, code};
use crate::security::acl::{Operation, ResourceType};

/// A topic's name, also when the request names it only by id (an unknown id: `None`).
fn topic_name(authz: &Authz, name: &str, id: uuid::Uuid) -> Option<String> {
    if !name.is_empty() || id.is_nil() {
        return Some(name.to_string());
    }
    authz.ctx()?.engine.topic_name(crate::topic::meta::TopicId(id))
}

pub(super) fn produce(authz: &Authz, mut r: ProduceRequest) -> Screened {
    let txn_ok = match &r.transactional_id {
        Some(id) => authz.allows(Operation::Write, ResourceType::TransactionalId, id.0.as_str()),
        None => true,
    };
    let mut denied = Vec::new();
    r.topic_data.retain(|t| {
        let name = topic_name(authz, t.name.0.as_str(), t.topic_id);
        let ok = txn_ok && name.is_none_or(|n| authz.allows(Operation::Write, ResourceType::Topic, &n));
        if !ok {
            let error = if txn_ok { code::TOPIC } else { code::TRANSACTIONAL_ID };
            denied.push((
                t.name.clone(),
                t.topic_id,
                t.partition_data.iter().map(|p| p.index).collect::<Vec<_>>(),
                error,
            ));
        }
        ok
    });
    if denied.is_empty() {
        return Screened::Go(Box::new(RequestKind::Produce(r)), None);
    }
    let patch = move |resp: &mut ResponseKind| {
        let ResponseKind::Produce(resp) = resp else { return };
        for (name, id, partitions, error) in denied {
            let mut t = produce_response::TopicProduceResponse::default();
            t.name = name;
            t.topic_id = id;
            t.partition_responses = partitions
                .into_iter()
                .map(|index| {
                    let mut p = produce_response::PartitionProduceResponse::default();
                    p.index = index;
                    p.error_code = error;
                    p.base_offset = -1;
                    p.log_append_time_ms = -1;
                    p.log_start_offset = -1;
                    p
                })
                .collect();
            resp.responses.push(t);
        }
    };
    Screened::Go(Box::new(RequestKind::Produce(r)), Some(Box::new(patch)))
}

pub(super) fn fetch(authz: &Authz, mut r: FetchRequest) -> Screened {
    let mut denied = Vec::new();
    r.topics.retain(|t| {
        let name = topic_name(authz, t.topic.0.as_str(), t.topic_id);
        let ok = name.is_none_or(|n| authz.allows(Operation::Read, ResourceType::Topic, &n));
        if !ok {
            denied.push((t.topic.clone(), t.topic_id, t.partitions.iter().map(|p| p.partition).collect::<Vec<_>>()));
        }
        ok
    });
    if denied.is_empty() {
        return Screened::Go(Box::new(RequestKind::Fetch(r)), None);
    }
    let patch = move |resp: &mut ResponseKind| {
        let ResponseKind::Fetch(resp) = resp else { return };
        for (name, id, partitions) in denied {
            let mut t = fetch_response::FetchableTopicResponse::default();
            t.topic = name;
            t.topic_id = id;
            t.partitions = partitions
                .into_iter()
                .map(|index| {
                    let mut p = fetch_response::PartitionData::default();
                    p.partition_index = index;
                    p.error_code = code::TOPIC;
                    p.high_watermark = -1;
                    p.last_stable_offset = -1;
                    p.log_start_offset = -1;
                    p
                })
                .collect();
            resp.responses.push(t);
        }
    };
    Screened::Go(Box::new(RequestKind::Fetch(r)), Some(Box::new(patch)))
}

pub(super) fn list_offsets(authz: &Authz, mut r: ListOffsetsRequest) -> Screened {
    let mut denied = Vec::new();
    r.topics.retain(|t| {
        let ok = authz.allows(Operation::Describe, ResourceType::Topic, t.name.0.as_str());
        if !ok {
            denied.push((t.name.clone(), t.partitions.iter().map(|p| p.partition_index).collect::<Vec<_>>()));
        }
        ok
    });
    if denied.is_empty() {
        return Screened::Go(Box::new(RequestKind::ListOffsets(r)), None);
    }
    let patch = move |resp: &mut ResponseKind| {
        let ResponseKind::ListOffsets(resp) = resp else { return };
        for (name, partitions) in denied {
            let mut t = list_offsets_response::ListOffsetsTopicResponse::default();
            t.name = name;
            t.partitions = partitions
                .into_iter()
                .map(|index| {
                    let mut p = list_offsets_response::ListOffsetsPartitionResponse::default();
                    p.partition_index = index;
                    p.error_code = code::TOPIC;
                    p.timestamp = -1;
                    p.offset = -1;
                    p.leader_epoch = -1;
                    p
                })
                .collect();
            resp.topics.push(t);
        }
    };
    Screened::Go(Box::new(RequestKind::ListOffsets(r)), Some(Box::new(patch)))
}

pub(super) fn metadata(authz: &Authz, mut r: MetadataRequest) -> Screened {
    let filter = authz.clone();
    // Every topic asked for: answered for those the principal may describe.
    let keep_listed = move |resp: &mut ResponseKind| {
        let ResponseKind::Metadata(resp) = resp else { return };
        resp.topics.retain(|t| {
            t.error_code == code::TOPIC
                || t.name
                    .as_ref()
                    .is_none_or(|n| filter.quietly_allows(Operation::Describe, ResourceType::Topic, n.0.as_str()))
        });
    };
    let Some(topics) = r.topics.as_mut() else {
        return Screened::Go(Box::new(RequestKind::Metadata(r)), Some(Box::new(keep_listed)));
    };
    let existing = authz.ctx().map(|c| c.engine.list_topics()).unwrap_or_default();
    let auto_create = r.allow_auto_topic_creation;
    let mut denied = Vec::new();
    topics.retain(|t| {
        let Some(name) = t.name.as_ref().map(|n| n.0.to_string()).or_else(|| topic_name(authz, "", t.topic_id)) else {
            return true; // an unknown id: the handler says so
        };
        let may_describe = authz.allows(Operation::Describe, ResourceType::Topic, &name);
        let missing = !existing.contains(&name);
        let may_create =
            !(missing && auto_create) || authz.allows_on_cluster_or(Operation::Create, ResourceType::Topic, &name);
        if !(may_describe && may_create) {
            denied.push((t.name.clone(), t.topic_id));
        }
        may_describe && may_create
    });
    let patch = move |resp: &mut ResponseKind| {
        keep_listed(resp);
        let ResponseKind::Metadata(resp) = resp else { return };
        for (name, id) in denied {
            let mut t = metadata_response::MetadataResponseTopic::default();
            t.error_code = code::TOPIC;
            t.name = name;
            t.topic_id = id;
            resp.topics.push(t);
        }
    };
    Screened::Go(Box::new(RequestKind::Metadata(r)), Some(Box::new(patch)))
}
