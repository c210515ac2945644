//! Metadata, CreateTopics, DeleteTopics, FindCoordinator and InitProducerId (the
//! transactional kind in [`transactions`](super::transactions)).
//!
//! sluice is a one-node cluster to Kafka clients: node [`NODE_ID`] at the advertised
//! address leads every partition, with itself as the only replica, and coordinates every
//! group. Topic names from clients are checked by the engine with Kafka's rule.

use std::sync::Arc;

use sluice_io::FsyncPolicy;

use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, CreateTopicsResponse, DeleteRecordsRequest, DeleteRecordsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, FindCoordinatorRequest, FindCoordinatorResponse, InitProducerIdRequest,
    InitProducerIdResponse, MetadataRequest, MetadataResponse, ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::config::TopicConfig;
use crate::error::EngineError;
use crate::topic::names::validate_name;

use super::NODE_ID;
use super::context::Context;
use super::errors::{self, code};

fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

fn topic_metadata(ctx: &Context, name: &str) -> MetadataResponseTopic {
    let mut t = MetadataResponseTopic::default();
    t.name = Some(TopicName(str_bytes(name)));
    match ctx.engine.describe_topic(name) {
        Ok(d) => {
            t.partitions = (0..d.shards.len())
                .map(|p| {
                    let mut mp = MetadataResponsePartition::default();
                    mp.partition_index = p as i32;
                    mp.leader_id = BrokerId(NODE_ID);
                    mp.replica_nodes = vec![BrokerId(NODE_ID)];
                    mp.isr_nodes = vec![BrokerId(NODE_ID)];
                    mp
                })
                .collect();
        }
        Err(e) => t.error_code = errors::of(&e),
    }
    t
}

/// Handles a Metadata request: the node, and the topics asked for (all when the list is
/// null; a missing one is created when the client allows and the listener is set to).
pub(crate) async fn metadata(ctx: &Arc<Context>, req: MetadataRequest, version: i16) -> MetadataResponse {
    let mut resp = MetadataResponse::default();
    let mut broker = MetadataResponseBroker::default();
    broker.node_id = BrokerId(NODE_ID);
    broker.host = str_bytes(ctx.advertised.0.clone());
    broker.port = ctx.advertised.1;
    resp.brokers = vec![broker];
    if version >= 2 {
        resp.cluster_id = Some(str_bytes("sluice"));
    }
    resp.controller_id = BrokerId(NODE_ID);
    // Metadata v0 has no null list: an empty one means all topics there.
    let names: Vec<String> = match req.topics {
        None => ctx.engine.list_topics(),
        Some(ref ts) if ts.is_empty() && version == 0 => ctx.engine.list_topics(),
        Some(ts) => ts.into_iter().filter_map(|t| t.name.map(|n| n.0.as_str().to_string())).collect(),
    };
    // Before v4 a client could not say, and Kafka created topics asked for.
    let allow_create = version < 4 || req.allow_auto_topic_creation;
    for name in names {
        if let Err(e) = validate_name("topic", &name) {
            let mut t = MetadataResponseTopic::default();
            t.name = Some(TopicName(str_bytes(name)));
            t.error_code = errors::of(&EngineError::InvalidName(e));
            resp.topics.push(t);
            continue;
        }
        if allow_create
            && let Some(partitions) = ctx.config.auto_create_partitions
            && matches!(ctx.engine.describe_topic(&name), Err(EngineError::UnknownTopic(_)))
        {
            match ctx.engine.create_topic(&name, partitions, None).await {
                Ok(_) | Err(EngineError::TopicExists(_)) => {}
                Err(e) => {
                    ctx.errors.report(format_args!("auto-creating topic {name:?}: {e}"));
                }
            }
        }
        resp.topics.push(topic_metadata(ctx, &name));
    }
    resp
}

/// Why a CreateTopics setting was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum ConfigRefused {
    #[error("config {0} has no value")]
    NoValue(String),
    #[error("config {key}={value:?} is not a non-negative number")]
    NotANumber { key: String, value: String },
    #[error("{key}={value} does not fit this machine's sizes")]
    TooLarge { key: String, value: String },
    #[error("config {key}={value:?} is not a value sluice takes")]
    Invalid { key: String, value: String },
    #[error("config {0} is not supported by sluice")]
    Unsupported(String),
}

/// A topic setting from CreateTopics, applied to sluice's topic configuration.
fn apply_config(config: &mut TopicConfig, key: &str, value: Option<&str>) -> Result<(), ConfigRefused> {
    let value = value.ok_or_else(|| ConfigRefused::NoValue(key.into()))?;
    let number = |v: &str| v.parse::<u64>().map_err(|_| ConfigRefused::NotANumber { key: key.into(), value: v.into() });
    match key {
        "cleanup.policy" => {
            config.cleanup =
                value.parse().map_err(|_| ConfigRefused::Invalid { key: key.into(), value: value.into() })?;
        }
        "retention.ms" => config.retention_ms = if value == "-1" { None } else { Some(number(value)?) },
        "retention.bytes" => config.retention_bytes = if value == "-1" { None } else { Some(number(value)?) },
        "segment.bytes" => config.segment_bytes = number(value)?,
        "segment.ms" => config.segment_ms = Some(number(value)?),
        "delete.retention.ms" => config.delete_retention_ms = number(value)?,
        "min.cleanable.dirty.ratio" => {
            config.min_cleanable_dirty_ratio = value
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| ConfigRefused::Invalid { key: key.into(), value: value.into() })?;
        }
        "max.message.bytes" => {
            config.max_record_bytes = usize::try_from(number(value)?)
                .map_err(|_| ConfigRefused::TooLarge { key: key.into(), value: value.into() })?;
        }
        "compression.type" => {
            config.compression =
                value.parse().map_err(|_| ConfigRefused::Invalid { key: key.into(), value: value.into() })?;
        }
        "flush.messages" if value == "1" => config.fsync = FsyncPolicy::Always,
        "flush.ms" => {
            let ms = number(value)?;
            if ms == 0 {
                return Err(ConfigRefused::Invalid { key: key.into(), value: value.into() });
            }
            config.fsync = FsyncPolicy::Interval(std::time::Duration::from_millis(ms));
        }
        _ => return Err(ConfigRefused::Unsupported(key.into())),
    }
    Ok(())
}

/// Handles a CreateTopics request.
pub(crate) async fn create_topics(ctx: &Arc<Context>, req: CreateTopicsRequest, version: i16) -> CreateTopicsResponse {
    let mut resp = CreateTopicsResponse::default();
    for t in req.topics {
        let name = t.name.0.as_str().to_string();
        let mut r = CreatableTopicResult::default();
        r.name = t.name.clone();
        let outcome: Result<u32, (i16, String)> = async {
            validate_name("topic", &name).map_err(|e| (code::INVALID_TOPIC_EXCEPTION, e.to_string()))?;
            if !matches!(t.replication_factor, -1 | 1) {
                return Err((
                    code::INVALID_REPLICATION_FACTOR,
                    format!("replication factor {} asked for; sluice keeps one copy", t.replication_factor),
                ));
            }
            if !t.assignments.is_empty() {
                return Err((code::INVALID_REQUEST, "manual replica assignments are not supported".into()));
            }
            let partitions = match t.num_partitions {
                -1 => ctx.config.auto_create_partitions.unwrap_or(1),
                n if n > 0 => n as u32,
                n => return Err((code::INVALID_PARTITIONS, format!("{n} partitions"))),
            };
            let mut config = TopicConfig::default();
            for c in &t.configs {
                apply_config(&mut config, c.name.as_str(), c.value.as_ref().map(StrBytes::as_str))
                    .map_err(|m| (code::INVALID_CONFIG, m.to_string()))?;
            }
            config.log_config().map_err(|e| (code::INVALID_CONFIG, e.to_string()))?;
            if req.validate_only {
                return match ctx.engine.describe_topic(&name) {
                    Ok(_) => Err((code::TOPIC_ALREADY_EXISTS, format!("topic {name:?} already exists"))),
                    Err(_) => Ok(partitions),
                };
            }
            let d = ctx.engine.create_topic(&name, partitions, Some(config)).await.map_err(|e| {
                let c = match &e {
                    EngineError::InvalidConfig(_) => code::INVALID_PARTITIONS,
                    e => errors::of(e),
                };
                (c, e.to_string())
            })?;
            Ok(d.partitions())
        }
        .await;
        match outcome {
            Ok(partitions) => {
                if version >= 5 {
                    r.num_partitions = partitions as i32;
                    r.replication_factor = 1;
                }
            }
            Err((c, message)) => {
                r.error_code = c;
                r.error_message = Some(str_bytes(message));
                if version >= 5 {
                    r.num_partitions = -1;
                    r.replication_factor = -1;
                }
            }
        }
        resp.topics.push(r);
    }
    resp
}

/// Handles a DeleteTopics request (by name; topic ids are not supported).
pub(crate) async fn delete_topics(ctx: &Arc<Context>, req: DeleteTopicsRequest, version: i16) -> DeleteTopicsResponse {
    let names: Vec<Option<TopicName>> = if version >= 6 {
        req.topics.into_iter().map(|t| t.name).collect()
    } else {
        req.topic_names.into_iter().map(Some).collect()
    };
    let mut resp = DeleteTopicsResponse::default();
    for name in names {
        let mut r = DeletableTopicResult::default();
        match name {
            None => {
                r.error_code = code::UNKNOWN_TOPIC_ID;
                if version >= 5 {
                    r.error_message = Some(str_bytes("topic ids are not supported: delete by name"));
                }
            }
            Some(name) => {
                if let Err(e) = ctx.engine.delete_topic(name.0.as_str()).await {
                    r.error_code = match &e {
                        EngineError::InvalidConfig(_) => code::INVALID_TOPIC_EXCEPTION,
                        e => errors::of(e),
                    };
                    if version >= 5 {
                        r.error_message = Some(str_bytes(e.to_string()));
                    }
                }
                r.name = Some(name);
            }
        }
        resp.responses.push(r);
    }
    resp
}

/// Handles a DeleteRecords request: each partition's start offset moves to the offset
/// asked (-1: the high watermark), and the answer is the new start (the low watermark).
pub(crate) async fn delete_records(ctx: &Arc<Context>, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let mut resp = DeleteRecordsResponse::default();
    for t in req.topics {
        let topic = t.name.0.as_str();
        let mut tr = DeleteRecordsTopicResult::default();
        for p in t.partitions {
            let mut pr = DeleteRecordsPartitionResult::default();
            pr.partition_index = p.partition_index;
            pr.low_watermark = -1;
            let moved = async {
                let partition = sluice_io::PartitionId::try_from(p.partition_index)
                    .map_err(|_| code::UNKNOWN_TOPIC_OR_PARTITION)?;
                let before = match p.offset {
                    -1 => ctx.engine.offsets(topic, partition).await.map_err(|e| errors::of(&e))?.1,
                    o => sluice_io::Offset(u64::try_from(o).map_err(|_| code::OFFSET_OUT_OF_RANGE)?),
                };
                ctx.engine.delete_records(topic, partition, before).await.map_err(|e| errors::of(&e))
            };
            match moved.await {
                Ok(start) => pr.low_watermark = start.0 as i64,
                Err(code) => pr.error_code = code,
            }
            tr.partitions.push(pr);
        }
        tr.name = t.name;
        resp.topics.push(tr);
    }
    resp
}

/// Handles a FindCoordinator request: this node coordinates every group and every
/// transactional id (key type 1).
pub(crate) fn find_coordinator(
    ctx: &Arc<Context>,
    req: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let mut resp = FindCoordinatorResponse::default();
    let (c, message) = match req.key_type {
        0 => match validate_name("group", req.key.as_str()) {
            Ok(()) => (code::NONE, None),
            Err(e) => (code::INVALID_GROUP_ID, Some(e.to_string())),
        },
        1 if req.key.is_empty() => (code::INVALID_REQUEST, Some("an empty transactional id".to_string())),
        1 => (code::NONE, None),
        k => (code::INVALID_REQUEST, Some(format!("coordinator key type {k}"))),
    };
    resp.error_code = c;
    if version >= 1 {
        resp.error_message = message.map(str_bytes);
    }
    if c == code::NONE {
        resp.node_id = BrokerId(NODE_ID);
        resp.host = str_bytes(ctx.advertised.0.clone());
        resp.port = ctx.advertised.1;
    } else {
        resp.node_id = BrokerId(-1);
        resp.port = -1;
    }
    resp
}

/// Handles an InitProducerId request: a new idempotent producer id at epoch 0, or for a
/// transactional id, its producer id at a new epoch (see
/// [`transactions`](super::transactions)).
pub(crate) async fn init_producer_id(
    ctx: &Arc<Context>,
    req: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    if let Some(tid) = &req.transactional_id {
        return super::transactions::requests::init_producer_id(ctx, &req, tid.0.as_str(), version).await;
    }
    let mut resp = InitProducerIdResponse::default();
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    match ctx.engine.init_producer_id().await {
        Ok(id) => {
            resp.producer_id = ProducerId(id.0);
            resp.producer_epoch = 0;
        }
        Err(e) => resp.error_code = errors::of(&e),
    }
    resp
}
