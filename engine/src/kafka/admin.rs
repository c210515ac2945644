//! Metadata, CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, DescribeCluster,
//! FindCoordinator and InitProducerId (the transactional kind in
//! [`transactions`](super::transactions)).
//!
//! sluice is a one-node cluster to Kafka clients: node [`NODE_ID`] at the advertised
//! address leads every partition, with itself as the only replica, and coordinates every
//! group. Topic names from clients are checked by the engine with Kafka's rule. A manual
//! replica assignment (CreateTopics, CreatePartitions) is taken when it puts each
//! partition's one replica on node 0, and refused otherwise.

use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteRecordsRequest, DeleteRecordsResponse, DeleteTopicsRequest, DeleteTopicsResponse, DescribeClusterRequest,
    DescribeClusterResponse, FindCoordinatorRequest, FindCoordinatorResponse, InitProducerIdRequest,
    InitProducerIdResponse, MetadataRequest, MetadataResponse, ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::error::EngineError;
use crate::topic::configs::{self, ConfigOp};
use crate::topic::meta::TopicId;
use crate::topic::names::validate_name;

use super::context::Context;
use super::errors::{self, code};
use super::{CLUSTER_ID, NODE_ID};

fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

fn topic_metadata(ctx: &Context, name: &str) -> MetadataResponseTopic {
    let mut t = MetadataResponseTopic::default();
    t.name = Some(TopicName(str_bytes(name)));
    match ctx.engine.describe_topic(name) {
        Ok(d) => {
            t.topic_id = d.id.0;
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

/// A topic a Metadata request names: by name, or (v12) by id.
enum Asked {
    Name(String),
    Id(TopicId),
    /// What it names cannot be answered (an id before v12, or neither name nor id).
    Invalid(MetadataResponseTopic),
}

fn asked(topic: MetadataRequestTopic, version: i16) -> Asked {
    let id = TopicId(topic.topic_id);
    match (topic.name, id.is_none()) {
        // Kafka reads a request's ids from v12 on; before, a topic is named by name.
        // (A name beside the id is not read, as Kafka's broker does not.)
        (_, false) if version >= 12 => Asked::Id(id),
        (Some(n), true) => Asked::Name(n.0.as_str().to_string()),
        (name, _) => {
            let mut t = MetadataResponseTopic::default();
            t.name = name;
            t.topic_id = topic.topic_id;
            t.error_code = code::INVALID_REQUEST;
            Asked::Invalid(t)
        }
    }
}

/// Handles a Metadata request: the node, and the topics asked for (all when the list is
/// null; a missing one is created when the client allows and the listener is set to).
/// From v10 each topic carries its id; from v12 a topic may be asked for by id (an
/// unknown id gets UNKNOWN_TOPIC_ID; ids are never auto-created), as Kafka's broker
/// answers; before v12 a request naming an id gets INVALID_REQUEST for that topic.
pub(crate) async fn metadata(ctx: &Arc<Context>, req: MetadataRequest, version: i16) -> MetadataResponse {
    let mut resp = MetadataResponse::default();
    let mut broker = MetadataResponseBroker::default();
    broker.node_id = BrokerId(NODE_ID);
    broker.host = str_bytes(ctx.advertised.0.clone());
    broker.port = ctx.advertised.1;
    resp.brokers = vec![broker];
    if version >= 2 {
        resp.cluster_id = Some(str_bytes(CLUSTER_ID));
    }
    resp.controller_id = BrokerId(NODE_ID);
    // Metadata v0 has no null list: an empty one means all topics there.
    let asked_for: Vec<Asked> = match req.topics {
        None => ctx.engine.list_topics().into_iter().map(Asked::Name).collect(),
        Some(ref ts) if ts.is_empty() && version == 0 => {
            ctx.engine.list_topics().into_iter().map(Asked::Name).collect()
        }
        Some(ts) => ts.into_iter().map(|t| asked(t, version)).collect(),
    };
    // Before v4 a client could not say, and Kafka created topics asked for.
    let allow_create = version < 4 || req.allow_auto_topic_creation;
    for asked in asked_for {
        let name = match asked {
            Asked::Name(name) => name,
            Asked::Invalid(t) => {
                resp.topics.push(t);
                continue;
            }
            Asked::Id(id) => {
                match ctx.engine.topic_name(id) {
                    Some(name) => resp.topics.push(topic_metadata(ctx, &name)),
                    None => {
                        let mut t = MetadataResponseTopic::default();
                        t.name = None;
                        t.topic_id = id.0;
                        t.error_code = code::UNKNOWN_TOPIC_ID;
                        resp.topics.push(t);
                    }
                }
                continue;
            }
        };
        if let Err(e) = validate_name("topic", &name) {
            let mut t = MetadataResponseTopic::default();
            t.name = Some(TopicName(str_bytes(name)));
            t.error_code = errors::of(&EngineError::InvalidName(e));
            resp.topics.push(t);
            continue;
        }
        if allow_create
            && ctx.config.auto_create_topics
            && matches!(ctx.engine.describe_topic(&name), Err(EngineError::UnknownTopic(_)))
        {
            match ctx.engine.create_topic(&name, ctx.config.num_partitions, None).await {
                Ok(_) | Err(EngineError::TopicExists(_)) => {}
                Err(e) => {
                    ctx.errors.report(format_args!("auto-creating topic {name:?}: {e}"));
                }
            }
        }
        resp.topics.push(topic_metadata(ctx, &name));
    }
    // v8+: what this client may do, asked for; without an authorizer, everything.
    if version >= 8 && req.include_topic_authorized_operations {
        for t in &mut resp.topics {
            t.topic_authorized_operations = TOPIC_OPERATIONS;
        }
    }
    if (8..=10).contains(&version) && req.include_cluster_authorized_operations {
        resp.cluster_authorized_operations = CLUSTER_OPERATIONS;
    }
    resp
}

/// A manual replica assignment, checked: each partition's replicas must be exactly node
/// 0 (sluice keeps one copy, on itself). Returns how many partitions it assigns.
fn check_assignment<'a>(partitions: impl Iterator<Item = (Option<i32>, &'a [BrokerId])>) -> Result<u32, (i16, String)> {
    let mut count = 0u32;
    for (i, (index, brokers)) in partitions.enumerate() {
        if let Some(index) = index
            && index != i as i32
        {
            return Err((
                code::INVALID_REPLICA_ASSIGNMENT,
                format!("Partitions should be a consecutive 0-based integer sequence; found {index} at position {i}"),
            ));
        }
        let unknown: Vec<String> = brokers.iter().filter(|b| b.0 != NODE_ID).map(|b| b.0.to_string()).collect();
        if !unknown.is_empty() {
            return Err((
                code::INVALID_REPLICA_ASSIGNMENT,
                format!(
                    "Unknown broker(s) in replica assignment: {} (sluice is the one node, {NODE_ID})",
                    unknown.join(", ")
                ),
            ));
        }
        match brokers.len() {
            1 => {}
            0 => return Err((code::INVALID_REPLICA_ASSIGNMENT, format!("partition {i} has no replica"))),
            _ => {
                return Err((
                    code::INVALID_REPLICA_ASSIGNMENT,
                    format!("Duplicate brokers not allowed in replica assignment: {brokers:?} (sluice keeps one copy)"),
                ));
            }
        }
        count += 1;
    }
    Ok(count)
}

/// Handles a CreateTopics request.
pub(crate) async fn create_topics(ctx: &Arc<Context>, req: CreateTopicsRequest, version: i16) -> CreateTopicsResponse {
    let mut resp = CreateTopicsResponse::default();
    for t in req.topics {
        let name = t.name.0.as_str().to_string();
        let mut r = CreatableTopicResult::default();
        r.name = t.name.clone();
        let outcome: Result<(u32, TopicId), (i16, String)> = async {
            validate_name("topic", &name).map_err(|e| (code::INVALID_TOPIC_EXCEPTION, e.to_string()))?;
            if !matches!(t.replication_factor, -1 | 1) {
                return Err((
                    code::INVALID_REPLICATION_FACTOR,
                    format!("replication factor {} asked for; sluice keeps one copy", t.replication_factor),
                ));
            }
            let partitions = if t.assignments.is_empty() {
                match t.num_partitions {
                    -1 => ctx.config.num_partitions,
                    n if n > 0 => n as u32,
                    n => {
                        return Err((
                            code::INVALID_PARTITIONS,
                            format!("Number of partitions must be larger than 0, not {n}."),
                        ));
                    }
                }
            } else {
                let assigned = t.assignments.iter().map(|a| (Some(a.partition_index), a.broker_ids.as_slice()));
                let n = check_assignment(assigned)?;
                if !matches!(t.num_partitions, -1) && t.num_partitions != n as i32 {
                    return Err((
                        code::INVALID_REQUEST,
                        format!("{} partitions asked for beside an assignment of {n}", t.num_partitions),
                    ));
                }
                n
            };
            if partitions > crate::engine::PARTITIONS_MAX {
                return Err((
                    code::INVALID_PARTITIONS,
                    format!(
                        "Number of partitions must be at most {}, not {partitions}.",
                        crate::engine::PARTITIONS_MAX
                    ),
                ));
            }
            let mut changes = Vec::with_capacity(t.configs.len());
            for c in &t.configs {
                let name = c.name.as_str().to_string();
                match &c.value {
                    Some(v) => changes.push((name, ConfigOp::Set(v.as_str().to_string()))),
                    None => {
                        return Err((
                            code::INVALID_CONFIG,
                            format!("Null value not supported for topic configs: {name}"),
                        ));
                    }
                }
            }
            let defaults = ctx.engine.topic_defaults();
            let config =
                configs::apply(&defaults, &defaults, &changes).map_err(|e| (code::INVALID_CONFIG, e.message))?;
            if req.validate_only {
                return match ctx.engine.describe_topic(&name) {
                    Ok(_) => Err((code::TOPIC_ALREADY_EXISTS, format!("topic {name:?} already exists"))),
                    Err(_) => Ok((partitions, TopicId::NONE)),
                };
            }
            let d = ctx
                .engine
                .create_topic(&name, partitions, Some(config))
                .await
                .map_err(|e| (errors::of(&e), e.to_string()))?;
            Ok((d.partitions(), d.id))
        }
        .await;
        match outcome {
            Ok((partitions, id)) => {
                r.topic_id = id.0;
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

/// Handles a DeleteTopics request. From v6 a topic is named by name or by id, not both
/// (INVALID_REQUEST, as Kafka answers); an unknown id gets UNKNOWN_TOPIC_ID. The answer
/// carries the deleted topic's name and (v6) its id.
pub(crate) async fn delete_topics(ctx: &Arc<Context>, req: DeleteTopicsRequest, version: i16) -> DeleteTopicsResponse {
    let asked: Vec<(Option<TopicName>, TopicId)> = if version >= 6 {
        req.topics.into_iter().map(|t| (t.name, TopicId(t.topic_id))).collect()
    } else {
        req.topic_names.into_iter().map(|n| (Some(n), TopicId::NONE)).collect()
    };
    let mut resp = DeleteTopicsResponse::default();
    for (name, id) in asked {
        let mut r = DeletableTopicResult::default();
        r.topic_id = id.0;
        let outcome: Result<(), (i16, String)> = async {
            let name = match (name, id.is_none()) {
                (Some(name), true) => {
                    r.name = Some(name.clone());
                    name.0.as_str().to_string()
                }
                (Some(name), false) => {
                    r.name = Some(name);
                    return Err((code::INVALID_REQUEST, "You may not specify both topic name and topic id.".into()));
                }
                (None, _) => {
                    let name = ctx
                        .engine
                        .topic_name(id)
                        .ok_or_else(|| (code::UNKNOWN_TOPIC_ID, format!("no topic has the id {id}")))?;
                    r.name = Some(TopicName(str_bytes(name.clone())));
                    name
                }
            };
            if let Some(known) = ctx.engine.topic_id(&name) {
                r.topic_id = known.0;
            }
            ctx.engine.delete_topic(&name).await.map_err(|e| {
                let c = match &e {
                    EngineError::InvalidConfig(_) => code::INVALID_TOPIC_EXCEPTION,
                    e => errors::of(e),
                };
                (c, e.to_string())
            })
        }
        .await;
        if let Err((c, message)) = outcome {
            r.error_code = c;
            if version >= 5 {
                r.error_message = Some(str_bytes(message));
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
        // Any group id, as Kafka: it is hashed to an offsets partition, never a path.
        0 => (code::NONE, None),
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

/// Handles a CreatePartitions request: each topic grows to its new count (shrinking, or
/// the same count, is INVALID_PARTITIONS with Kafka's message); a manual assignment must
/// put each new partition's one replica on node 0.
pub(crate) async fn create_partitions(ctx: &Arc<Context>, req: CreatePartitionsRequest) -> CreatePartitionsResponse {
    let mut resp = CreatePartitionsResponse::default();
    let mut seen = std::collections::HashMap::new();
    for t in &req.topics {
        *seen.entry(t.name.0.as_str().to_string()).or_insert(0) += 1;
    }
    for t in req.topics {
        let name = t.name.0.as_str().to_string();
        let outcome: Result<(), (i16, String)> = async {
            if seen[&name] > 1 {
                return Err((code::INVALID_REQUEST, "Duplicate topic in request.".to_string()));
            }
            validate_name("topic", &name).map_err(|e| (code::INVALID_TOPIC_EXCEPTION, e.to_string()))?;
            let count = u32::try_from(t.count).map_err(|_| {
                (code::INVALID_PARTITIONS, format!("Number of partitions must be positive, not {}.", t.count))
            })?;
            ctx.engine.check_add_partitions(&name, count).map_err(|e| (errors::of(&e), e.to_string()))?;
            // An empty list is no assignment (the protocol crate's default is one).
            if let Some(assignments) = t.assignments.as_ref().filter(|a| !a.is_empty()) {
                let have = ctx.engine.describe_topic(&name).map_err(|e| (errors::of(&e), e.to_string()))?.partitions();
                let n = check_assignment(assignments.iter().map(|a| (None, a.broker_ids.as_slice())))?;
                if n != count - have {
                    return Err((
                        code::INVALID_REPLICA_ASSIGNMENT,
                        format!(
                            "Increasing the number of partitions by {} but {n} assignments provided.",
                            count - have
                        ),
                    ));
                }
            }
            if req.validate_only {
                return Ok(());
            }
            ctx.engine.add_partitions(&name, count).await.map(|_| ()).map_err(|e| (errors::of(&e), e.to_string()))
        }
        .await;
        let mut r = CreatePartitionsTopicResult::default();
        r.name = t.name;
        if let Err((c, message)) = outcome {
            r.error_code = c;
            r.error_message = Some(str_bytes(message));
        }
        resp.results.push(r);
    }
    resp
}

/// Handles a DescribeCluster request: this one node, the cluster id, and node 0 as the
/// controller (for either endpoint type: sluice is broker and controller in one).
/// Authorized operations, when asked, are all of the cluster's: sluice has no ACLs.
pub(crate) fn describe_cluster(ctx: &Arc<Context>, req: DescribeClusterRequest) -> DescribeClusterResponse {
    let mut resp = DescribeClusterResponse::default();
    resp.endpoint_type = req.endpoint_type;
    resp.cluster_id = str_bytes(CLUSTER_ID);
    resp.controller_id = BrokerId(NODE_ID);
    let mut broker = DescribeClusterBroker::default();
    broker.broker_id = BrokerId(NODE_ID);
    broker.host = str_bytes(ctx.advertised.0.clone());
    broker.port = ctx.advertised.1;
    resp.brokers = vec![broker];
    if req.include_cluster_authorized_operations {
        resp.cluster_authorized_operations = CLUSTER_OPERATIONS;
    }
    resp
}

/// The operations Kafka supports on the cluster resource, all of them allowed as a broker
/// without an authorizer answers, as DescribeCluster's and Metadata's bit field (bit n
/// for Kafka's `AclOperation` code n): CREATE 5, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
/// DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12 (Kafka's
/// `AclEntry.supportedOperations(CLUSTER)`; the token operations are on user resources).
const CLUSTER_OPERATIONS: i32 = (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12);

/// The operations Kafka supports on a topic, all allowed (no authorizer): READ 3,
/// WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, DESCRIBE_CONFIGS 10,
/// ALTER_CONFIGS 11.
const TOPIC_OPERATIONS: i32 = (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11);
