//! The admin and config APIs through the listener over raw TCP (requests encoded and
//! responses decoded with the `kafka-protocol` crate): DescribeConfigs, AlterConfigs,
//! IncrementalAlterConfigs, CreatePartitions, DescribeCluster, CreateTopics' replica
//! assignments and configs, and the broker settings (`num_partitions`,
//! `auto_create_topics`, `transaction_max_timeout_ms`). Bad input gets Kafka's error code
//! with a message naming what was wrong, and nothing stored changes.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::kafka::{RawClient, Served};
use futures_lite::future::block_on;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use sluice_engine::TopicConfig;
use sluice_engine::kafka::KafkaConfig;
use sluice_engine::topic::partitioner::partition_for_key;
use sluice_io::{CleanupPolicy, FsyncPolicy, PartitionId, Timestamp};

const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const MESSAGE_TOO_LARGE: i16 = 10;
const INVALID_TOPIC_EXCEPTION: i16 = 17;
const INVALID_PARTITIONS: i16 = 37;
const INVALID_REPLICATION_FACTOR: i16 = 38;
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const INVALID_CONFIG: i16 = 40;
const INVALID_REQUEST: i16 = 42;
const INVALID_TRANSACTION_TIMEOUT: i16 = 50;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const GROUP: i8 = 32;

const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const DEFAULT_CONFIG: i8 = 5;

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_string())
}

impl Served {
    fn start(name: &str) -> Served {
        Served::with(name, KafkaConfig::new("127.0.0.1:0".parse().expect("address")))
    }

    fn with(name: &str, kafka: KafkaConfig) -> Served {
        Served::launch("kafka_admin", name, 2, kafka)
    }

    fn connect(&self) -> Client {
        RawClient::connect(self.addr(), "test")
    }
}

/// The raw client of `common::kafka`, with this file's requests.
type Client = RawClient;

impl Client {
    /// DescribeConfigs of one resource at `version`, with synonyms and (v3+) docs.
    fn describe(
        &mut self,
        kind: i8,
        name: &str,
        keys: Option<&[&str]>,
        version: i16,
    ) -> describe_configs_response::DescribeConfigsResult {
        let mut res = describe_configs_request::DescribeConfigsResource::default();
        res.resource_type = kind;
        res.resource_name = s(name);
        res.configuration_keys = keys.map(|ks| ks.iter().map(|k| s(k)).collect());
        let mut r = DescribeConfigsRequest::default();
        r.resources = vec![res];
        r.include_synonyms = true;
        r.include_documentation = version >= 3;
        let mut resp: DescribeConfigsResponse = self.call(ApiKey::DescribeConfigs, version, &r);
        assert_eq!(resp.results.len(), 1);
        resp.results.remove(0)
    }

    /// A topic's configs as (value, source), by name.
    fn topic_configs(&mut self, topic: &str) -> std::collections::BTreeMap<String, (String, i8)> {
        let r = self.describe(TOPIC, topic, None, 4);
        assert_eq!(r.error_code, NONE, "{:?}", r.error_message);
        r.configs
            .iter()
            .map(|c| {
                (
                    c.name.as_str().to_string(),
                    (c.value.as_ref().map_or("", |v| v.as_str()).to_string(), c.config_source),
                )
            })
            .collect()
    }

    /// AlterConfigs of one resource: its error code and message.
    fn alter(&mut self, kind: i8, name: &str, configs: &[(&str, Option<&str>)], validate_only: bool) -> (i16, String) {
        let mut res = alter_configs_request::AlterConfigsResource::default();
        res.resource_type = kind;
        res.resource_name = s(name);
        res.configs = configs
            .iter()
            .map(|(k, v)| {
                let mut c = alter_configs_request::AlterableConfig::default();
                c.name = s(k);
                c.value = v.map(s);
                c
            })
            .collect();
        let mut r = AlterConfigsRequest::default();
        r.resources = vec![res];
        r.validate_only = validate_only;
        let resp: AlterConfigsResponse = self.call(ApiKey::AlterConfigs, 2, &r);
        let r = &resp.responses[0];
        assert_eq!((r.resource_type, r.resource_name.as_str()), (kind, name));
        (r.error_code, r.error_message.as_ref().map_or("", |m| m.as_str()).to_string())
    }

    /// IncrementalAlterConfigs of one resource (op codes: 0 SET, 1 DELETE, 2 APPEND, 3
    /// SUBTRACT): its error code and message.
    fn incremental(
        &mut self,
        kind: i8,
        name: &str,
        ops: &[(&str, i8, Option<&str>)],
        validate_only: bool,
    ) -> (i16, String) {
        let mut res = incremental_alter_configs_request::AlterConfigsResource::default();
        res.resource_type = kind;
        res.resource_name = s(name);
        res.configs = ops
            .iter()
            .map(|(k, op, v)| {
                let mut c = incremental_alter_configs_request::AlterableConfig::default();
                c.name = s(k);
                c.config_operation = *op;
                c.value = v.map(s);
                c
            })
            .collect();
        let mut r = IncrementalAlterConfigsRequest::default();
        r.resources = vec![res];
        r.validate_only = validate_only;
        let resp: IncrementalAlterConfigsResponse = self.call(ApiKey::IncrementalAlterConfigs, 1, &r);
        let r = &resp.responses[0];
        (r.error_code, r.error_message.as_ref().map_or("", |m| m.as_str()).to_string())
    }

    /// CreatePartitions of one topic: its error code and message.
    fn create_partitions(
        &mut self,
        topic: &str,
        count: i32,
        assignment: Option<&[&[i32]]>,
        validate_only: bool,
    ) -> (i16, String) {
        let mut t = create_partitions_request::CreatePartitionsTopic::default();
        t.name = TopicName(s(topic));
        t.count = count;
        t.assignments = assignment.map(|a| {
            a.iter()
                .map(|brokers| {
                    let mut x = create_partitions_request::CreatePartitionsAssignment::default();
                    x.broker_ids = brokers.iter().map(|&b| BrokerId(b)).collect();
                    x
                })
                .collect()
        });
        let mut r = CreatePartitionsRequest::default();
        r.topics = vec![t];
        r.timeout_ms = 5000;
        r.validate_only = validate_only;
        let resp: CreatePartitionsResponse = self.call(ApiKey::CreatePartitions, 3, &r);
        let r = &resp.results[0];
        assert_eq!(r.name.0.as_str(), topic);
        (r.error_code, r.error_message.as_ref().map_or("", |m| m.as_str()).to_string())
    }

    /// CreateTopics of one topic: its error code, message and partition count.
    fn create_topic(
        &mut self,
        topic: &str,
        partitions: i32,
        replication: i16,
        assignment: &[&[i32]],
        configs: &[(&str, &str)],
    ) -> (i16, String, i32) {
        let mut t = create_topics_request::CreatableTopic::default();
        t.name = TopicName(s(topic));
        t.num_partitions = partitions;
        t.replication_factor = replication;
        t.assignments = assignment
            .iter()
            .enumerate()
            .map(|(i, brokers)| {
                let mut a = create_topics_request::CreatableReplicaAssignment::default();
                a.partition_index = i as i32;
                a.broker_ids = brokers.iter().map(|&b| BrokerId(b)).collect();
                a
            })
            .collect();
        t.configs = configs
            .iter()
            .map(|(k, v)| {
                let mut c = create_topics_request::CreatableTopicConfig::default();
                c.name = s(k);
                c.value = Some(s(v));
                c
            })
            .collect();
        let mut r = CreateTopicsRequest::default();
        r.topics = vec![t];
        r.timeout_ms = 5000;
        let resp: CreateTopicsResponse = self.call(ApiKey::CreateTopics, 7, &r);
        let r = &resp.topics[0];
        (r.error_code, r.error_message.as_ref().map_or("", |m| m.as_str()).to_string(), r.num_partitions)
    }

    /// The partitions Metadata (v9) reports for `topic`, or its error code.
    fn partitions(&mut self, topic: &str, allow_create: bool) -> Result<usize, i16> {
        let mut t = metadata_request::MetadataRequestTopic::default();
        t.name = Some(TopicName(s(topic)));
        let mut r = MetadataRequest::default();
        r.topics = Some(vec![t]);
        r.allow_auto_topic_creation = allow_create;
        let resp: MetadataResponse = self.call(ApiKey::Metadata, 9, &r);
        let t = &resp.topics[0];
        if t.error_code != NONE { Err(t.error_code) } else { Ok(t.partitions.len()) }
    }
}

#[test]
fn describe_configs_reports_a_topics_settings_with_sources_synonyms_and_docs() {
    let s = Served::start("describe");
    let h = s.handle();
    let config = TopicConfig { retention_ms: Some(60_000), cleanup: CleanupPolicy::Compact, ..TopicConfig::default() };
    block_on(h.create_topic("t", 2, Some(config))).expect("topic");
    let mut c = s.connect();
    for version in 1..=4 {
        let r = c.describe(TOPIC, "t", None, version);
        assert_eq!(r.error_code, NONE, "v{version}: {:?}", r.error_message);
        let get = |name: &str| r.configs.iter().find(|e| e.name.as_str() == name).unwrap_or_else(|| panic!("{name}"));
        let retention = get("retention.ms");
        assert_eq!(retention.value.as_ref().map(|v| v.as_str()), Some("60000"));
        assert_eq!(retention.config_source, DYNAMIC_TOPIC_CONFIG);
        assert!(!retention.read_only && !retention.is_sensitive);
        let names: Vec<&str> = retention.synonyms.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["retention.ms", "log.retention.ms"], "v{version}");
        assert_eq!(retention.synonyms[1].value.as_ref().map(|v| v.as_str()), Some("-1"));
        assert_eq!(retention.synonyms[1].source, DEFAULT_CONFIG);
        assert_eq!(get("cleanup.policy").value.as_ref().map(|v| v.as_str()), Some("compact"));
        let segment = get("segment.bytes");
        assert_eq!(segment.config_source, DEFAULT_CONFIG);
        assert_eq!(segment.value.as_ref().map(|v| v.as_str()), Some("268435456"));
        assert_eq!(get("flush.ms").value.as_ref().map(|v| v.as_str()), Some("5"), "interval:5 is flush.ms=5");
        if version >= 3 {
            assert_eq!(segment.config_type, 3, "INT");
            assert_eq!(get("cleanup.policy").config_type, 7, "LIST");
            assert!(segment.documentation.as_ref().is_some_and(|d| d.contains("roll")), "{segment:?}");
        }
    }
    // Only the keys asked for (unknown ones are left out, as Kafka does).
    let r = c.describe(TOPIC, "t", Some(&["retention.ms", "no.such.config"]), 4);
    let names: Vec<&str> = r.configs.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["retention.ms"]);
    // An empty list means every key, as a null one does.
    assert_eq!(c.describe(TOPIC, "t", Some(&[]), 4).configs.len(), c.describe(TOPIC, "t", None, 4).configs.len());
    // Unknown and invalid topics, other resource types, other brokers.
    let r = c.describe(TOPIC, "nope", None, 4);
    assert_eq!(r.error_code, UNKNOWN_TOPIC_OR_PARTITION, "{:?}", r.error_message);
    let r = c.describe(TOPIC, "../etc", None, 4);
    assert_eq!(r.error_code, INVALID_TOPIC_EXCEPTION);
    let r = c.describe(GROUP, "g", None, 4);
    assert_eq!(r.error_code, INVALID_REQUEST);
    assert!(r.error_message.as_ref().is_some_and(|m| m.contains("resource type 32")), "{r:?}");
    let r = c.describe(BROKER, "7", None, 4);
    assert_eq!(r.error_code, INVALID_REQUEST);
}

#[test]
fn the_broker_resource_reports_the_serve_settings_read_only_and_refuses_changes() {
    let mut kafka = KafkaConfig::new("127.0.0.1:0".parse().expect("address"));
    kafka.num_partitions = 3;
    kafka.auto_create_topics = false;
    kafka.transaction_max_timeout_ms = 60_000;
    let s = Served::with("broker", kafka);
    let mut c = s.connect();
    for name in ["0", ""] {
        let r = c.describe(BROKER, name, None, 4);
        assert_eq!(r.error_code, NONE, "{:?}", r.error_message);
        let get = |n: &str| {
            let e = r.configs.iter().find(|e| e.name.as_str() == n).unwrap_or_else(|| panic!("{n} reported"));
            assert!(e.read_only, "{n} is read-only");
            e.value.as_ref().map(|v| v.as_str().to_string()).unwrap_or_default()
        };
        assert_eq!(get("num.partitions"), "3");
        assert_eq!(get("auto.create.topics.enable"), "false");
        assert_eq!(get("transaction.max.timeout.ms"), "60000");
        assert_eq!(get("log.retention.ms"), "-1");
        assert_eq!(get("log.cleanup.policy"), "delete");
        assert_eq!(get("broker.id"), "0");
    }
    let (code, message) = c.alter(BROKER, "0", &[("num.partitions", Some("5"))], false);
    assert_eq!(code, INVALID_REQUEST);
    assert!(message.contains("num.partitions"), "{message}");
    let (code, _) = c.incremental(BROKER, "0", &[("log.cleanup.policy", 2, Some("compact"))], false);
    assert_eq!(code, INVALID_REQUEST);
    let (code, _) = c.alter(BROKER, "3", &[], false);
    assert_eq!(code, INVALID_REQUEST, "another broker id");
}

#[test]
fn alter_configs_replaces_the_settings_checks_them_and_applies_them_to_every_partition() {
    let s = Served::start("alter");
    let h = s.handle();
    block_on(h.create_topic("t", 3, None)).expect("topic");
    let mut c = s.connect();
    let before = h.describe_topic("t").expect("topic").config;

    // Refused: an unknown name, a bad value, an unknown topic; nothing changes.
    let (code, message) = c.alter(TOPIC, "t", &[("retention.ms", Some("1000")), ("no.such.config", Some("1"))], false);
    assert_eq!(code, INVALID_CONFIG);
    assert!(message.contains("no.such.config"), "{message}");
    let (code, message) = c.alter(TOPIC, "t", &[("retention.ms", Some("soon"))], false);
    assert_eq!(code, INVALID_CONFIG);
    assert!(message.contains("retention.ms") && message.contains("soon"), "{message}");
    let (code, _) = c.alter(TOPIC, "t", &[("segment.bytes", Some("12"))], false);
    assert_eq!(code, INVALID_CONFIG);
    let (code, _) = c.alter(TOPIC, "missing", &[("retention.ms", Some("1000"))], false);
    assert_eq!(code, UNKNOWN_TOPIC_OR_PARTITION);
    let (code, message) = c.alter(TOPIC, "t", &[("retention.ms", Some("1")), ("retention.ms", Some("2"))], false);
    assert_eq!(code, INVALID_REQUEST, "{message}");
    let (code, _) = c.alter(TOPIC, "__consumer_offsets", &[("retention.ms", Some("1000"))], false);
    assert_eq!(code, INVALID_REQUEST, "internal topics keep their settings");
    // validate_only checks and stores nothing.
    let (code, message) = c.alter(TOPIC, "t", &[("retention.ms", Some("1000"))], true);
    assert_eq!((code, message.as_str()), (NONE, ""));
    assert_eq!(h.describe_topic("t").expect("topic").config, before, "nothing changed");

    // Accepted: stored, described, and in force on every partition.
    let (code, message) = c.alter(
        TOPIC,
        "t",
        &[("retention.ms", Some("1000")), ("flush.messages", Some("1")), ("max.message.bytes", Some("100"))],
        false,
    );
    assert_eq!((code, message.as_str()), (NONE, ""));
    let after = h.describe_topic("t").expect("topic").config;
    assert_eq!((after.retention_ms, after.fsync, after.max_record_bytes), (Some(1000), FsyncPolicy::Always, 100));
    let configs = c.topic_configs("t");
    assert_eq!(configs["retention.ms"], ("1000".into(), DYNAMIC_TOPIC_CONFIG));
    assert_eq!(configs["flush.messages"], ("1".into(), DYNAMIC_TOPIC_CONFIG));
    assert_eq!(configs["segment.bytes"].1, DEFAULT_CONFIG);
    let refused = block_on(h.send("t", Some(b"k"), &[b'x'; 200], Timestamp(1)));
    assert!(refused.is_err(), "200 bytes over max.message.bytes=100: {refused:?}");
    for i in 0..6 {
        block_on(h.send("t", Some(format!("k{i}").as_bytes()), b"small", Timestamp(1))).expect("a small record");
    }
    // AlterConfigs replaces: what a request leaves out goes back to the default.
    let (code, _) = c.alter(TOPIC, "t", &[("segment.bytes", Some("1048576"))], false);
    assert_eq!(code, NONE);
    let after = h.describe_topic("t").expect("topic").config;
    assert_eq!(after, TopicConfig { segment_bytes: 1 << 20, ..TopicConfig::default() });
}

#[test]
fn incremental_alter_configs_sets_deletes_appends_and_subtracts() {
    let s = Served::start("incremental");
    let h = s.handle();
    block_on(h.create_topic("t", 1, None)).expect("topic");
    let mut c = s.connect();
    let ok = |r: (i16, String)| assert_eq!((r.0, r.1.as_str()), (NONE, ""));
    ok(c.incremental(TOPIC, "t", &[("retention.ms", 0, Some("5000")), ("cleanup.policy", 2, Some("compact"))], false));
    let config = h.describe_topic("t").expect("topic").config;
    assert_eq!((config.retention_ms, config.cleanup), (Some(5000), CleanupPolicy::CompactDelete));
    assert_eq!(c.topic_configs("t")["cleanup.policy"].0, "compact,delete");
    ok(c.incremental(TOPIC, "t", &[("cleanup.policy", 3, Some("delete")), ("retention.ms", 1, None)], false));
    let config = h.describe_topic("t").expect("topic").config;
    assert_eq!((config.retention_ms, config.cleanup), (None, CleanupPolicy::Compact));
    // The fsync policy by Kafka's names, in one request, whatever the order.
    ok(c.incremental(TOPIC, "t", &[("flush.ms", 0, Some("250"))], false));
    assert_eq!(h.describe_topic("t").expect("topic").config.fsync, FsyncPolicy::Interval(Duration::from_millis(250)));

    let before = h.describe_topic("t").expect("topic").config;
    for (ops, want) in [
        (vec![("retention.ms", 2, Some("5"))], INVALID_CONFIG),
        (vec![("cleanup.policy", 3, Some("compact"))], INVALID_CONFIG),
        (vec![("no.such", 0, Some("1"))], INVALID_CONFIG),
        (vec![("min.cleanable.dirty.ratio", 0, Some("2"))], INVALID_CONFIG),
        (vec![("retention.ms", 0, Some("5000")), ("flush.messages", 0, Some("7"))], INVALID_CONFIG),
        (vec![("flush.messages", 0, Some("1")), ("flush.ms", 0, Some("100"))], INVALID_CONFIG),
        (vec![("retention.ms", 9, Some("5"))], INVALID_REQUEST),
        (vec![("retention.ms", 0, None)], INVALID_REQUEST),
        (vec![("retention.ms", 0, Some("1")), ("retention.ms", 1, None)], INVALID_REQUEST),
    ] {
        let (code, message) = c.incremental(TOPIC, "t", &ops, false);
        assert_eq!(code, want, "{ops:?}: {message}");
        assert!(!message.is_empty());
        assert_eq!(h.describe_topic("t").expect("topic").config, before, "{ops:?} changed nothing");
    }
    let (code, message) = c.incremental(TOPIC, "t", &[("retention.ms", 0, Some("-7"))], false);
    assert!(code == INVALID_CONFIG && message.contains("retention.ms"), "{code} {message}");
    let (code, _) = c.incremental(TOPIC, "gone", &[("retention.ms", 0, Some("1"))], false);
    assert_eq!(code, UNKNOWN_TOPIC_OR_PARTITION);
    ok(c.incremental(TOPIC, "t", &[("retention.ms", 0, Some("1"))], true));
    assert_eq!(h.describe_topic("t").expect("topic").config, before, "validate_only");
}

#[test]
fn create_partitions_grows_a_topic_and_refuses_shrinking_with_kafkas_messages() {
    let s = Served::start("partitions");
    let h = s.handle();
    block_on(h.create_topic("t", 2, None)).expect("topic");
    let mut c = s.connect();
    let (code, message) = c.create_partitions("t", 1, None, false);
    assert_eq!(code, INVALID_PARTITIONS);
    assert_eq!(message, "Topic currently has 2 partitions, which is higher than the requested 1.");
    let (code, message) = c.create_partitions("t", 2, None, false);
    assert_eq!((code, message.as_str()), (INVALID_PARTITIONS, "Topic already has 2 partitions."));
    let (code, _) = c.create_partitions("t", -4, None, false);
    assert_eq!(code, INVALID_PARTITIONS);
    let (code, _) = c.create_partitions("nope", 4, None, false);
    assert_eq!(code, UNKNOWN_TOPIC_OR_PARTITION);
    let (code, message) = c.create_partitions("t", 4, Some(&[&[0], &[1]]), false);
    assert_eq!(code, INVALID_REPLICA_ASSIGNMENT, "{message}");
    let (code, message) = c.create_partitions("t", 4, Some(&[&[0]]), false);
    assert_eq!(code, INVALID_REPLICA_ASSIGNMENT, "one assignment for two new partitions: {message}");
    let (code, _) = c.create_partitions("t", 4, Some(&[&[0, 0], &[0]]), false);
    assert_eq!(code, INVALID_REPLICA_ASSIGNMENT);
    let (code, _) = c.create_partitions("__consumer_offsets", 100, None, false);
    assert_eq!(code, INVALID_PARTITIONS, "internal topics keep their count");
    let (code, _) = c.create_partitions("t", 4, None, true);
    assert_eq!(code, NONE);
    assert_eq!(c.partitions("t", false), Ok(2), "validate_only");

    let (code, message) = c.create_partitions("t", 4, Some(&[&[0], &[0]]), false);
    assert_eq!((code, message.as_str()), (NONE, ""));
    assert_eq!(c.partitions("t", false), Ok(4), "visible in Metadata at once");
    let (code, _) = c.create_partitions("t", 5, None, false);
    assert_eq!(code, NONE);
    assert_eq!(c.partitions("t", false), Ok(5));
    // Keys hash over the new count, and the new partitions take records.
    let mut landed = std::collections::BTreeSet::new();
    for i in 0..100 {
        let key = format!("key-{i}");
        let (p, _) = block_on(h.send("t", Some(key.as_bytes()), b"v", Timestamp(1))).expect("send");
        assert_eq!(p, partition_for_key(key.as_bytes(), 5), "{key}");
        landed.insert(p.0);
    }
    assert!((2..5).all(|p| landed.contains(&p)), "records reached the new partitions: {landed:?}");
    for p in 2..5 {
        let (start, end) = block_on(h.offsets("t", PartitionId(p))).expect("offsets");
        assert!(start.0 == 0 && end.0 > 0, "partition {p}: [{start}, {end})");
    }
}

#[test]
fn create_topics_takes_single_replica_assignments_and_every_named_config() {
    let s = Served::start("create");
    let mut c = s.connect();
    let (code, message, n) = c.create_topic("assigned", -1, -1, &[&[0], &[0], &[0]], &[]);
    assert_eq!((code, message.as_str(), n), (NONE, "", 3));
    let (code, _, _) = c.create_topic("two-replicas", -1, -1, &[&[0, 1]], &[]);
    assert_eq!(code, INVALID_REPLICA_ASSIGNMENT);
    let (code, _, _) = c.create_topic("elsewhere", -1, -1, &[&[2]], &[]);
    assert_eq!(code, INVALID_REPLICA_ASSIGNMENT);
    let (code, _, _) = c.create_topic("rf3", 1, 3, &[], &[]);
    assert_eq!(code, INVALID_REPLICATION_FACTOR);
    let all = [
        ("cleanup.policy", "compact,delete"),
        ("retention.ms", "3600000"),
        ("retention.bytes", "1000000"),
        ("segment.bytes", "1048576"),
        ("segment.ms", "60000"),
        ("delete.retention.ms", "1000"),
        ("min.cleanable.dirty.ratio", "0.25"),
        ("max.message.bytes", "2000000"),
        ("message.timestamp.type", "CreateTime"),
        ("flush.messages", "9223372036854775807"),
        ("flush.ms", "1000"),
    ];
    let (code, message, n) = c.create_topic("configured", -1, 1, &[], &all);
    assert_eq!((code, message.as_str(), n), (NONE, "", 1), "num.partitions is 1 by default");
    let configs = c.topic_configs("configured");
    for (name, value) in all {
        assert_eq!(configs[name].0, value, "{name}");
    }
    let (code, message, _) = c.create_topic("bad", 1, 1, &[], &[("retention.ms", "later")]);
    assert!(code == INVALID_CONFIG && message.contains("retention.ms"), "{code} {message}");
    let (code, message, _) = c.create_topic("bad", 1, 1, &[], &[("unclean.leader.election.enable", "true")]);
    assert!(code == INVALID_CONFIG && message.contains("unclean.leader.election.enable"), "{code} {message}");
    assert_eq!(c.partitions("bad", false), Err(UNKNOWN_TOPIC_OR_PARTITION), "nothing created");
}

#[test]
fn describe_cluster_names_this_node_as_broker_and_controller() {
    let s = Served::start("cluster");
    let mut c = s.connect();
    for version in 0..=2 {
        let mut r = DescribeClusterRequest::default();
        r.include_cluster_authorized_operations = true;
        let resp: DescribeClusterResponse = c.call(ApiKey::DescribeCluster, version, &r);
        assert_eq!(resp.error_code, NONE);
        assert_eq!(resp.cluster_id.as_str(), "sluice");
        assert_eq!(resp.controller_id, BrokerId(0));
        assert_eq!(resp.brokers.len(), 1);
        assert_eq!((resp.brokers[0].broker_id, resp.brokers[0].port), (BrokerId(0), i32::from(s.addr().port())));
        // Everything Kafka supports on the cluster, as a broker without an authorizer:
        // CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
        // IDEMPOTENT_WRITE.
        let cluster = [5, 7, 8, 9, 10, 11, 12].iter().fold(0, |bits, op| bits | (1 << op));
        assert_eq!(resp.cluster_authorized_operations, cluster);
    }
    // Metadata v8-v10 asked for them: a topic's operations too (READ, WRITE, CREATE,
    // DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS), not unless asked.
    block_on(s.handle().create_topic("t", 1, None)).expect("topic");
    for (asked, version) in [(true, 9), (false, 9), (true, 8)] {
        let mut t = metadata_request::MetadataRequestTopic::default();
        t.name = Some(TopicName(self::s("t")));
        let mut r = MetadataRequest::default();
        r.topics = Some(vec![t]);
        r.include_topic_authorized_operations = asked;
        r.include_cluster_authorized_operations = asked;
        let resp: MetadataResponse = c.call(ApiKey::Metadata, version, &r);
        let topic = [3, 4, 5, 6, 7, 8, 10, 11].iter().fold(0, |bits, op| bits | (1 << op));
        let cluster = [5, 7, 8, 9, 10, 11, 12].iter().fold(0, |bits, op| bits | (1 << op));
        let (want_topic, want_cluster) = if asked { (topic, cluster) } else { (i32::MIN, i32::MIN) };
        assert_eq!(resp.topics[0].topic_authorized_operations, want_topic, "v{version} asked {asked}");
        assert_eq!(resp.cluster_authorized_operations, want_cluster, "v{version} asked {asked}");
    }
}

#[test]
fn broker_settings_decide_auto_creation_default_partitions_and_the_transaction_timeout_limit() {
    let mut kafka = KafkaConfig::new("127.0.0.1:0".parse().expect("address"));
    kafka.num_partitions = 4;
    let s = Served::with("settings_on", kafka.clone());
    let mut c = s.connect();
    assert_eq!(c.partitions("auto", true), Ok(4), "auto-created with num.partitions");
    assert_eq!(c.partitions("never-asked", false), Err(UNKNOWN_TOPIC_OR_PARTITION), "the client did not allow it");
    let (code, _, n) = c.create_topic("defaulted", -1, -1, &[], &[]);
    assert_eq!((code, n), (NONE, 4), "CreateTopics with -1 partitions");
    drop(s);

    kafka.auto_create_topics = false;
    kafka.transaction_max_timeout_ms = 10_000;
    let s = Served::with("settings_off", kafka);
    let mut c = s.connect();
    assert_eq!(c.partitions("auto", true), Err(UNKNOWN_TOPIC_OR_PARTITION), "auto-creation off");
    assert!(s.handle().describe_topic("auto").is_err());
    let init = |c: &mut Client, timeout_ms: i32| {
        let mut r = InitProducerIdRequest::default();
        r.transactional_id = Some(TransactionalId(StrBytes::from_static_str("tx")));
        r.transaction_timeout_ms = timeout_ms;
        r.producer_id = ProducerId(-1);
        r.producer_epoch = -1;
        let resp: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &r);
        resp.error_code
    };
    assert_eq!(init(&mut c, 10_001), INVALID_TRANSACTION_TIMEOUT);
    assert_eq!(init(&mut c, 10_000), NONE);
    // A record over a topic's limit, set by a client, gets MESSAGE_TOO_LARGE.
    let (code, _, _) = c.create_topic("small", 1, 1, &[], &[("max.message.bytes", "64")]);
    assert_eq!(code, NONE);
    let e = block_on(s.handle().send("small", None, &[0u8; 65], Timestamp(1))).expect_err("too large");
    assert_eq!(sluice_engine::kafka::errors::of(&e), MESSAGE_TOO_LARGE);
}

#[test]
fn a_config_request_with_a_lying_count_closes_the_connection_and_the_listener_keeps_serving() {
    let s = Served::start("lying");
    // DescribeConfigs v1 claiming 2^31-1 resources in a 4-byte body.
    let mut frame = Vec::new();
    frame.extend_from_slice(&32i16.to_be_bytes());
    frame.extend_from_slice(&1i16.to_be_bytes());
    frame.extend_from_slice(&1i32.to_be_bytes());
    frame.extend_from_slice(&(-1i16).to_be_bytes());
    frame.extend_from_slice(&i32::MAX.to_be_bytes());
    let mut out = (frame.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&frame);
    let mut raw = TcpStream::connect(s.addr()).expect("connects");
    raw.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    raw.write_all(&out).expect("send");
    let mut buf = [0u8; 8];
    assert!(matches!(raw.read(&mut buf), Ok(0) | Err(_)), "closed without an answer");
    let mut c = s.connect();
    assert_eq!(c.describe(BROKER, "0", Some(&["broker.id"]), 1).configs.len(), 1, "still serving");
}
