//! Topic ids through the listener over raw TCP: every topic has a random id that
//! Metadata (v10-v12), CreateTopics v7, DeleteTopics v6 and Fetch (v13-v16) carry; a
//! request naming a topic by id reaches it; an id no topic has (one of a deleted topic,
//! whose name was taken again) gets UNKNOWN_TOPIC_ID; ids survive a restart.

mod common;

use common::kafka::{RawClient, Served};
use futures_lite::future::block_on;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use sluice_engine::kafka::KafkaConfig;
use sluice_engine::{OwnedRecord, TopicId};
use sluice_io::{BatchMeta, PartitionId, Timestamp};
use uuid::Uuid;

const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_REQUEST: i16 = 42;
const UNKNOWN_TOPIC_ID: i16 = 100;

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_string())
}

fn served(name: &str) -> Served {
    Served::launch("kafka_topic_ids", name, 2, KafkaConfig::new("127.0.0.1:0".parse().expect("address")))
}

fn client(served: &Served) -> RawClient {
    RawClient::connect(served.addr(), "topic-ids-test")
}

/// Metadata for topics by name (`Some`) or by id.
fn metadata(c: &mut RawClient, version: i16, asked: &[(Option<&str>, Uuid)]) -> MetadataResponse {
    let mut r = MetadataRequest::default();
    r.topics = Some(
        asked
            .iter()
            .map(|(name, id)| {
                let mut t = metadata_request::MetadataRequestTopic::default();
                t.name = name.map(|n| TopicName(s(n)));
                t.topic_id = *id;
                t
            })
            .collect(),
    );
    c.call(ApiKey::Metadata, version, &r)
}

fn create(c: &mut RawClient, name: &str, partitions: i32) -> create_topics_response::CreatableTopicResult {
    let mut t = create_topics_request::CreatableTopic::default();
    t.name = TopicName(s(name));
    t.num_partitions = partitions;
    t.replication_factor = 1;
    let mut r = CreateTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 5000;
    let mut resp: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &r);
    resp.topics.remove(0)
}

fn delete(c: &mut RawClient, name: Option<&str>, id: Uuid) -> delete_topics_response::DeletableTopicResult {
    let mut t = delete_topics_request::DeleteTopicState::default();
    t.name = name.map(|n| TopicName(s(n)));
    t.topic_id = id;
    let mut r = DeleteTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 5000;
    let mut resp: DeleteTopicsResponse = c.call(ApiKey::DeleteTopics, 6, &r);
    resp.responses.remove(0)
}

/// Fetch of partitions 0..partitions of the topic with `id`, from offset 0.
fn fetch(c: &mut RawClient, version: i16, id: Uuid, partitions: i32) -> FetchResponse {
    let mut t = fetch_request::FetchTopic::default();
    t.topic_id = id;
    t.partitions = (0..partitions)
        .map(|p| {
            let mut fp = fetch_request::FetchPartition::default();
            fp.partition = p;
            fp.partition_max_bytes = 1 << 20;
            fp
        })
        .collect();
    let mut r = FetchRequest::default();
    r.replica_id = BrokerId(-1);
    r.max_wait_ms = 0;
    r.min_bytes = 1;
    r.max_bytes = 1 << 20;
    r.topics = vec![t];
    c.call(ApiKey::Fetch, version, &r)
}

/// The values of the records in a partition's fetched batches (Kafka batch v2, one
/// uncompressed record each as `fill` appends them).
fn record_count(records: &bytes::Bytes) -> usize {
    let mut n = 0;
    let mut at = 0usize;
    while at + 61 <= records.len() {
        let len = i32::from_be_bytes(records[at + 8..at + 12].try_into().unwrap()) as usize;
        n += i32::from_be_bytes(records[at + 57..at + 61].try_into().unwrap()) as usize;
        at += 12 + len;
    }
    n
}

fn fill(served: &Served, topic: &str, partitions: u32, per_partition: usize) {
    let h = served.handle();
    for p in PartitionId::all(partitions) {
        for i in 0..per_partition {
            let record = OwnedRecord::new(None, format!("{topic}-{p}-{i}").into_bytes(), Timestamp(1000));
            block_on(h.append(topic, p, vec![record], BatchMeta::default())).expect("append");
        }
    }
}

#[test]
fn metadata_carries_each_topics_id_and_v12_finds_a_topic_by_id() {
    let served = served("metadata");
    let mut c = client(&served);
    let created = create(&mut c, "orders", 3);
    assert_eq!(created.error_code, NONE, "{:?}", created.error_message);
    assert!(!created.topic_id.is_nil(), "CreateTopics v7 answers the new topic's id");
    assert_eq!(served.handle().describe_topic("orders").expect("topic").id, TopicId(created.topic_id));
    for version in [10, 11, 12] {
        let resp = metadata(&mut c, version, &[(Some("orders"), Uuid::nil())]);
        assert_eq!(resp.topics.len(), 1);
        assert_eq!(resp.topics[0].error_code, NONE);
        assert_eq!(resp.topics[0].topic_id, created.topic_id, "v{version}");
        assert_eq!(resp.topics[0].partitions.len(), 3);
    }
    // Before v10 there is no id to carry.
    let resp = metadata(&mut c, 9, &[(Some("orders"), Uuid::nil())]);
    assert_eq!(resp.topics[0].topic_id, Uuid::nil());

    // v12: by id, with the name in the answer.
    let resp = metadata(&mut c, 12, &[(None, created.topic_id)]);
    assert_eq!(resp.topics.len(), 1);
    assert_eq!(resp.topics[0].error_code, NONE);
    assert_eq!(resp.topics[0].name.as_ref().map(|n| n.0.as_str()), Some("orders"));
    assert_eq!(resp.topics[0].partitions.len(), 3);

    // An id no topic has: UNKNOWN_TOPIC_ID, and nothing is created.
    let stranger = Uuid::new_v4();
    let resp = metadata(&mut c, 12, &[(None, stranger)]);
    assert_eq!(resp.topics[0].error_code, UNKNOWN_TOPIC_ID);
    assert_eq!(resp.topics[0].topic_id, stranger);
    assert!(resp.topics[0].name.is_none());
    assert_eq!(served.handle().list_topics(), vec!["orders".to_string()]);

    // Before v12 a topic cannot be asked for by id.
    let resp = metadata(&mut c, 11, &[(None, created.topic_id)]);
    assert_eq!(resp.topics[0].error_code, INVALID_REQUEST);

    // All topics (a null list) carry their ids too.
    let mut all = MetadataRequest::default();
    all.topics = None;
    let resp: MetadataResponse = c.call(ApiKey::Metadata, 12, &all);
    assert_eq!(resp.topics.len(), 1);
    assert_eq!(resp.topics[0].topic_id, created.topic_id);
}

#[test]
fn ids_survive_a_restart_and_a_recreated_topic_gets_a_new_one() {
    let mut served = served("restart");
    let mut c = client(&served);
    let first = create(&mut c, "events", 2).topic_id;
    let other = create(&mut c, "other", 1).topic_id;
    assert_ne!(first, other);
    served.restart();
    let mut c = client(&served);
    let resp = metadata(&mut c, 12, &[(Some("events"), Uuid::nil()), (Some("other"), Uuid::nil())]);
    assert_eq!(resp.topics[0].topic_id, first, "the id is stored with the topic");
    assert_eq!(resp.topics[1].topic_id, other);

    // DeleteTopics v6 by id; the answer names the topic it deleted.
    let deleted = delete(&mut c, None, first);
    assert_eq!(deleted.error_code, NONE, "{:?}", deleted.error_message);
    assert_eq!(deleted.name.as_ref().map(|n| n.0.as_str()), Some("events"));
    assert_eq!(deleted.topic_id, first);
    assert!(served.handle().describe_topic("events").is_err());

    let second = create(&mut c, "events", 2).topic_id;
    assert!(!second.is_nil());
    assert_ne!(second, first, "a topic created again under a name gets a new id");
    fill(&served, "events", 2, 3);
    // The old id names nothing any more: Metadata, Fetch and DeleteTopics say so.
    let resp = metadata(&mut c, 12, &[(None, first)]);
    assert_eq!(resp.topics[0].error_code, UNKNOWN_TOPIC_ID);
    let resp = fetch(&mut c, 13, first, 2);
    assert_eq!(resp.responses.len(), 1);
    assert_eq!(resp.responses[0].topic_id, first);
    for p in &resp.responses[0].partitions {
        assert_eq!(p.error_code, UNKNOWN_TOPIC_ID);
        assert_eq!(record_count(p.records.as_ref().expect("records")), 0);
    }
    let again = delete(&mut c, None, first);
    assert_eq!(again.error_code, UNKNOWN_TOPIC_ID);
    assert!(again.error_message.is_some());
    // The new id reads the new topic.
    let resp = fetch(&mut c, 13, second, 2);
    let counts: Vec<usize> =
        resp.responses[0].partitions.iter().map(|p| record_count(p.records.as_ref().expect("records"))).collect();
    assert_eq!(counts, vec![3, 3]);

    // A name and an id together are refused, and nothing is deleted.
    let both = delete(&mut c, Some("events"), second);
    assert_eq!(both.error_code, INVALID_REQUEST);
    assert!(served.handle().describe_topic("events").is_ok());
    // By name at v6 still works, and answers the id.
    let by_name = delete(&mut c, Some("events"), Uuid::nil());
    assert_eq!(by_name.error_code, NONE);
    assert_eq!(by_name.topic_id, second);
    let missing = delete(&mut c, Some("events"), Uuid::nil());
    assert_eq!(missing.error_code, UNKNOWN_TOPIC_OR_PARTITION);
}

#[test]
fn fetch_v13_to_v16_reads_topics_by_id() {
    let served = served("fetch");
    let mut c = client(&served);
    let id = create(&mut c, "reads", 2).topic_id;
    fill(&served, "reads", 2, 5);
    for version in 13..=16 {
        let resp = fetch(&mut c, version, id, 2);
        assert_eq!(resp.error_code, NONE);
        assert_eq!(resp.responses.len(), 1, "v{version}");
        let t = &resp.responses[0];
        assert_eq!(t.topic_id, id, "v{version}: the answer names the topic by id");
        assert_eq!(t.partitions.len(), 2);
        for p in &t.partitions {
            assert_eq!(p.error_code, NONE, "v{version}");
            assert_eq!(p.high_watermark, 5);
            assert_eq!(record_count(p.records.as_ref().expect("records")), 5, "v{version}");
        }
    }
    // A partition the topic does not have is refused as before.
    let resp = fetch(&mut c, 16, id, 3);
    assert_eq!(resp.responses[0].partitions[2].error_code, UNKNOWN_TOPIC_OR_PARTITION);
    // An unknown id next to a known one: each answered for itself.
    let mut known = fetch_request::FetchTopic::default();
    known.topic_id = id;
    let mut p0 = fetch_request::FetchPartition::default();
    p0.partition_max_bytes = 1 << 20;
    known.partitions = vec![p0.clone()];
    let mut unknown = fetch_request::FetchTopic::default();
    unknown.topic_id = Uuid::new_v4();
    unknown.partitions = vec![p0];
    let mut r = FetchRequest::default();
    r.replica_id = BrokerId(-1);
    r.max_bytes = 1 << 20;
    r.min_bytes = 1;
    r.topics = vec![unknown.clone(), known];
    let resp: FetchResponse = c.call(ApiKey::Fetch, 16, &r);
    assert_eq!(resp.responses.len(), 2);
    assert_eq!(resp.responses[0].topic_id, unknown.topic_id);
    assert_eq!(resp.responses[0].partitions[0].error_code, UNKNOWN_TOPIC_ID);
    assert_eq!(resp.responses[1].topic_id, id);
    assert_eq!(resp.responses[1].partitions[0].error_code, NONE);
    assert_eq!(record_count(resp.responses[1].partitions[0].records.as_ref().expect("records")), 5);
}
