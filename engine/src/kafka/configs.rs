//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.
//!
//! Topic resources: the settings of [`TOPIC_CONFIGS`](crate::topic::configs::TOPIC_CONFIGS)
//! by Kafka's names, each reported with its source (DYNAMIC_TOPIC_CONFIG when it differs
//! from the engine's default, DEFAULT_CONFIG otherwise), its broker-level synonym, type and
//! documentation when asked. Alterations are checked as a whole and refused with
//! INVALID_CONFIG naming the setting (nothing changes), then stored and applied on every
//! shard that owns a partition ([`EngineHandle::alter_topic_config`]); `validate_only`
//! checks without storing. AlterConfigs replaces every named setting (those left out go
//! back to the default), IncrementalAlterConfigs changes only those given (SET, DELETE
//! back to the default, APPEND and SUBTRACT for lists). Internal topics are described, not
//! altered.
//!
//! The broker resource (`"0"`, or `""` for the cluster default) describes `sluice serve`'s
//! settings, read-only: they are its command-line options and cannot be altered (INVALID_REQUEST
//! names them). Other resource types (groups, broker loggers, client metrics) get
//! INVALID_REQUEST.
//!
//! [`EngineHandle::alter_topic_config`]: crate::EngineHandle::alter_topic_config

use std::collections::HashSet;
use std::sync::Arc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, alter_configs_response,
    incremental_alter_configs_response,
};
use kafka_protocol::protocol::StrBytes;

use crate::config::TopicConfig;
use crate::error::EngineError;
use crate::topic::configs::{self, ConfigOp, ConfigType, TOPIC_CONFIGS};
use crate::topic::names::validate_name;

use super::context::Context;
use super::errors::{self, code};
use super::{CLUSTER_ID, NODE_ID};

/// Kafka's resource type codes.
pub mod resource {
    /// A topic.
    pub const TOPIC: i8 = 2;
    /// A broker (by id, or `""` for the cluster-wide default).
    pub const BROKER: i8 = 4;
}

/// Kafka's config source codes (DescribeConfigs v1+).
pub mod source {
    /// Set on the topic.
    pub const DYNAMIC_TOPIC_CONFIG: i8 = 1;
    /// Set in the broker's own configuration (for sluice: `sluice serve`'s options).
    pub const STATIC_BROKER_CONFIG: i8 = 4;
    /// The built-in default.
    pub const DEFAULT_CONFIG: i8 = 5;
}

fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// One setting as DescribeConfigs reports it.
struct Entry {
    name: String,
    value: String,
    source: i8,
    read_only: bool,
    kind: ConfigType,
    doc: &'static str,
    /// Less specific sources of the same setting, most specific first (after the entry's own).
    synonyms: Vec<(String, String, i8)>,
}

impl Entry {
    fn encode(self, synonyms: bool, docs: bool) -> DescribeConfigsResourceResult {
        let mut r = DescribeConfigsResourceResult::default();
        r.name = s(self.name.clone());
        r.value = Some(s(self.value.clone()));
        r.read_only = self.read_only;
        r.config_source = self.source;
        r.is_sensitive = false;
        r.config_type = self.kind as i8;
        r.documentation = docs.then(|| s(self.doc));
        if synonyms {
            let own = std::iter::once((self.name, self.value, self.source));
            r.synonyms = own
                .chain(self.synonyms)
                .map(|(name, value, source)| {
                    let mut syn = DescribeConfigsSynonym::default();
                    syn.name = s(name);
                    syn.value = Some(s(value));
                    syn.source = source;
                    syn
                })
                .collect();
        }
        r
    }
}

/// A topic's settings, or the error code and message for the resource.
fn topic_entries(ctx: &Context, name: &str) -> Result<Vec<Entry>, (i16, String)> {
    validate_name("topic", name).map_err(|e| (code::INVALID_TOPIC_EXCEPTION, e.to_string()))?;
    let topic = ctx.engine.describe_topic(name).map_err(|e| (errors::of(&e), e.to_string()))?;
    let defaults = ctx.engine.topic_defaults();
    Ok(configs::describe(&topic.config, &defaults)
        .into_iter()
        .map(|d| {
            let is_default = d.is_default();
            Entry {
                name: d.def.name.to_string(),
                source: if is_default { source::DEFAULT_CONFIG } else { source::DYNAMIC_TOPIC_CONFIG },
                read_only: crate::engine::is_internal(name),
                kind: d.def.kind,
                doc: d.def.doc,
                synonyms: vec![(d.def.broker_name.to_string(), d.default.clone(), broker_source(&d.default, d.def))],
                value: d.value,
            }
        })
        .collect())
}

/// The source of a topic setting's broker-level default: sluice's built-in default, or a
/// default the engine was started with.
fn broker_source(value: &str, def: &configs::TopicConfigDef) -> i8 {
    if value == (def.get)(&TopicConfig::default()) { source::DEFAULT_CONFIG } else { source::STATIC_BROKER_CONFIG }
}

/// A broker setting: name, value, built-in default, type, doc.
type BrokerRow = (&'static str, String, String, ConfigType, &'static str);

/// The broker's settings (all read-only): `sluice serve`'s options and the topic defaults.
fn broker_entries(ctx: &Context) -> Vec<Entry> {
    let mut entries: Vec<Entry> = broker_rows(ctx)
        .into_iter()
        .map(|(name, value, default, kind, doc)| Entry {
            source: if value == default { source::DEFAULT_CONFIG } else { source::STATIC_BROKER_CONFIG },
            name: name.to_string(),
            value,
            read_only: true,
            kind,
            doc,
            synonyms: Vec::new(),
        })
        .collect();
    let defaults = ctx.engine.topic_defaults();
    entries.extend(TOPIC_CONFIGS.iter().map(|def| {
        let value = (def.get)(&defaults);
        Entry {
            name: def.broker_name.to_string(),
            source: broker_source(&value, def),
            value,
            read_only: true,
            kind: def.kind,
            doc: def.doc,
            synonyms: Vec::new(),
        }
    }));
    entries
}

/// `sluice serve`'s options as Kafka's broker settings, with their built-in defaults.
fn broker_rows(ctx: &Context) -> Vec<BrokerRow> {
    use ConfigType::{Boolean, Int, Long, String as Text};
    let c = &ctx.config;
    let built_in = super::KafkaConfig::new(c.listen);
    let listener: Vec<String> = ctx.listeners.iter().map(|(p, addr, _)| format!("{p}://{addr}")).collect();
    let listener = listener.join(",");
    let advertised: Vec<String> =
        ctx.listeners.iter().map(|(p, _, (host, port))| format!("{p}://{host}:{port}")).collect();
    let advertised = advertised.join(",");
    let retention_check = ctx.engine.retention_check().as_millis().to_string();
    vec![
        ("broker.id", NODE_ID.to_string(), NODE_ID.to_string(), Int, "This node's id: the one broker of its cluster."),
        ("node.id", NODE_ID.to_string(), NODE_ID.to_string(), Int, "This node's id (KRaft's name)."),
        (
            "cluster.id",
            CLUSTER_ID.into(),
            CLUSTER_ID.into(),
            Text,
            "The cluster's id, as Metadata and DescribeCluster report it.",
        ),
        (
            "listeners",
            listener.clone(),
            listener,
            Text,
            "The addresses `sluice serve --listen` binds, with their security protocols.",
        ),
        (
            "advertised.listeners",
            advertised.clone(),
            advertised,
            Text,
            "The addresses clients of each listener are told to connect to (`sluice serve --advertise`).",
        ),
        (
            "num.partitions",
            c.num_partitions.to_string(),
            built_in.num_partitions.to_string(),
            Int,
            "Partitions of a topic created without a count: auto-created, or CreateTopics with -1 (`sluice serve --num-partitions`).",
        ),
        (
            "auto.create.topics.enable",
            c.auto_create_topics.to_string(),
            built_in.auto_create_topics.to_string(),
            Boolean,
            "Whether a Metadata request for an unknown topic creates it (`sluice serve --auto-create-topics`).",
        ),
        (
            "transaction.max.timeout.ms",
            c.transaction_max_timeout_ms.to_string(),
            built_in.transaction_max_timeout_ms.to_string(),
            Int,
            "The longest transaction timeout InitProducerId accepts (`sluice serve --transaction-max-timeout-ms`).",
        ),
        (
            "group.initial.rebalance.delay.ms",
            c.group_initial_rebalance_delay.as_millis().to_string(),
            built_in.group_initial_rebalance_delay.as_millis().to_string(),
            Int,
            "How long an empty consumer group's first rebalance waits for more members (`sluice serve --group-initial-rebalance-delay-ms`).",
        ),
        ("default.replication.factor", "1".into(), "1".into(), Int, "sluice keeps one copy of each partition."),
        ("min.insync.replicas", "1".into(), "1".into(), Int, "The one copy is the in-sync replica."),
        (
            "log.retention.check.interval.ms",
            retention_check,
            "300000".into(),
            Long,
            "How often each shard applies retention, compaction and segment.ms rolls (`sluice serve --retention-check-ms`).",
        ),
        (
            "socket.request.max.bytes",
            c.max_request_bytes.to_string(),
            built_in.max_request_bytes.to_string(),
            Int,
            "The largest request accepted; a larger one closes the connection.",
        ),
        (
            "connections.max.idle.ms",
            c.idle_timeout.as_millis().to_string(),
            built_in.idle_timeout.as_millis().to_string(),
            Long,
            "A connection with no request for this long is closed.",
        ),
    ]
}

/// The broker resource's name must be this node's id, or empty (the cluster default).
fn check_broker(name: &str) -> Result<(), (i16, String)> {
    if name.is_empty() || name == NODE_ID.to_string() {
        return Ok(());
    }
    Err((
        code::INVALID_REQUEST,
        format!("Unexpected broker id, expected {NODE_ID} or empty string, but received {name}"),
    ))
}

fn unsupported_type(t: i8) -> (i16, String) {
    (
        code::INVALID_REQUEST,
        format!("sluice's configs are those of topics (2) and of the broker (4), not of resource type {t}"),
    )
}

/// Handles a DescribeConfigs request.
pub(crate) fn describe_configs(ctx: &Arc<Context>, req: DescribeConfigsRequest) -> DescribeConfigsResponse {
    let mut resp = DescribeConfigsResponse::default();
    for r in req.resources {
        let mut result = DescribeConfigsResult::default();
        result.resource_type = r.resource_type;
        result.resource_name = r.resource_name.clone();
        let name = r.resource_name.as_str();
        let entries = match r.resource_type {
            resource::TOPIC => topic_entries(ctx, name),
            resource::BROKER => check_broker(name).map(|()| broker_entries(ctx)),
            t => Err(unsupported_type(t)),
        };
        match entries {
            Ok(entries) => {
                // A null list means every key, and so does an empty one (Kafka's
                // ConfigHelper reads both alike).
                let keys: Option<HashSet<&str>> = r
                    .configuration_keys
                    .as_ref()
                    .filter(|ks| !ks.is_empty())
                    .map(|ks| ks.iter().map(StrBytes::as_str).collect());
                result.configs = entries
                    .into_iter()
                    .filter(|e| keys.as_ref().is_none_or(|ks| ks.contains(e.name.as_str())))
                    .map(|e| e.encode(req.include_synonyms, req.include_documentation))
                    .collect();
            }
            Err((c, message)) => {
                result.error_code = c;
                result.error_message = Some(s(message));
            }
        }
        resp.results.push(result);
    }
    resp
}

/// Resources named more than once in one request: Kafka refuses each of them.
fn duplicates<'a>(resources: impl Iterator<Item = (i8, &'a str)>) -> HashSet<(i8, String)> {
    let mut seen = HashSet::new();
    let mut twice = HashSet::new();
    for (t, name) in resources {
        if !seen.insert((t, name.to_string())) {
            twice.insert((t, name.to_string()));
        }
    }
    twice
}

/// Changes a topic's settings with `change` (from its current ones), or only checks that
/// it would; the error code and message otherwise.
async fn alter_topic(
    ctx: &Context,
    name: &str,
    validate_only: bool,
    change: impl FnOnce(&TopicConfig, &TopicConfig) -> Result<TopicConfig, configs::ConfigRefused>,
) -> Result<(), (i16, String)> {
    validate_name("topic", name).map_err(|e| (code::INVALID_TOPIC_EXCEPTION, e.to_string()))?;
    if crate::engine::is_internal(name) {
        return Err((
            code::INVALID_REQUEST,
            format!("{name} is internal: its configs are sluice's and cannot be altered"),
        ));
    }
    let defaults = ctx.engine.topic_defaults();
    let change = |current: &TopicConfig| change(current, &defaults).map_err(|e| EngineError::InvalidConfig(e.message));
    match ctx.engine.alter_topic_config(name, change, validate_only).await {
        Ok(_) => Ok(()),
        Err(EngineError::InvalidConfig(message)) => Err((code::INVALID_CONFIG, message)),
        Err(e) => Err((errors::of(&e), e.to_string())),
    }
}

/// Why a broker resource's alteration is refused (none is possible: they are options).
fn refuse_broker(name: &str, configs: &[String]) -> Result<(), (i16, String)> {
    check_broker(name)?;
    if configs.is_empty() {
        return Ok(());
    }
    Err((
        code::INVALID_REQUEST,
        format!(
            "sluice's broker configs are `sluice serve`'s command-line options and cannot be altered: {}",
            configs.join(", ")
        ),
    ))
}

/// Handles an AlterConfigs request: each resource's named settings are replaced as a
/// whole (a setting left out, or given a null value, goes back to the default).
pub(crate) async fn alter_configs(ctx: &Arc<Context>, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut resp = AlterConfigsResponse::default();
    let twice = duplicates(req.resources.iter().map(|r| (r.resource_type, r.resource_name.as_str())));
    for r in req.resources {
        let name = r.resource_name.as_str();
        let names: Vec<String> = r.configs.iter().map(|c| c.name.as_str().to_string()).collect();
        let outcome = if twice.contains(&(r.resource_type, name.to_string())) {
            Err((code::INVALID_REQUEST, format!("resource {name:?} is named more than once in the request")))
        } else if names.iter().collect::<HashSet<_>>().len() < names.len() {
            Err((code::INVALID_REQUEST, "Error due to duplicate config keys".to_string()))
        } else {
            match r.resource_type {
                resource::TOPIC => {
                    let changes: Vec<(String, ConfigOp)> = r
                        .configs
                        .iter()
                        .filter_map(|c| {
                            c.value
                                .as_ref()
                                .map(|v| (c.name.as_str().to_string(), ConfigOp::Set(v.as_str().to_string())))
                        })
                        .collect();
                    alter_topic(ctx, name, req.validate_only, |current, defaults| {
                        configs::apply(&configs::reset(current, defaults), defaults, &changes)
                    })
                    .await
                }
                resource::BROKER => refuse_broker(name, &names),
                t => Err(unsupported_type(t)),
            }
        };
        let mut result = alter_configs_response::AlterConfigsResourceResponse::default();
        result.resource_type = r.resource_type;
        result.resource_name = r.resource_name;
        if let Err((c, message)) = outcome {
            result.error_code = c;
            result.error_message = Some(s(message));
        }
        resp.responses.push(result);
    }
    resp
}

/// Handles an IncrementalAlterConfigs request: each resource's settings change as its
/// operations say (SET, DELETE, APPEND, SUBTRACT), the others keep their values.
pub(crate) async fn incremental_alter_configs(
    ctx: &Arc<Context>,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut resp = IncrementalAlterConfigsResponse::default();
    let twice = duplicates(req.resources.iter().map(|r| (r.resource_type, r.resource_name.as_str())));
    for r in req.resources {
        let name = r.resource_name.as_str();
        let names: Vec<String> = r.configs.iter().map(|c| c.name.as_str().to_string()).collect();
        let ops: Result<Vec<(String, ConfigOp)>, (i16, String)> = r
            .configs
            .iter()
            .map(|c| {
                let key = c.name.as_str().to_string();
                let value = || {
                    c.value
                        .as_ref()
                        .map(|v| v.as_str().to_string())
                        .ok_or_else(|| (code::INVALID_REQUEST, format!("Null value not supported for : {key}")))
                };
                let op = match c.config_operation {
                    0 => ConfigOp::Set(value()?),
                    1 => ConfigOp::Delete,
                    2 => ConfigOp::Append(value()?),
                    3 => ConfigOp::Subtract(value()?),
                    op => return Err((code::INVALID_REQUEST, format!("Unknown config operation {op} for {key}"))),
                };
                Ok((key, op))
            })
            .collect();
        let outcome = if twice.contains(&(r.resource_type, name.to_string())) {
            Err((code::INVALID_REQUEST, format!("resource {name:?} is named more than once in the request")))
        } else if names.iter().collect::<HashSet<_>>().len() < names.len() {
            Err((code::INVALID_REQUEST, "Error due to duplicate config keys".to_string()))
        } else {
            match (r.resource_type, ops) {
                (_, Err(e)) => Err(e),
                (resource::TOPIC, Ok(ops)) => {
                    alter_topic(ctx, name, req.validate_only, |current, defaults| {
                        configs::apply(current, defaults, &ops)
                    })
                    .await
                }
                (resource::BROKER, Ok(_)) => refuse_broker(name, &names),
                (t, Ok(_)) => Err(unsupported_type(t)),
            }
        };
        let mut result = incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        result.resource_type = r.resource_type;
        result.resource_name = r.resource_name;
        if let Err((c, message)) = outcome {
            result.error_code = c;
            result.error_message = Some(s(message));
        }
        resp.responses.push(result);
    }
    resp
}
