//! The Kafka source and sink (`connectors::kafka`, feature `kafka-client`) against two
//! independent Kafka-protocol brokers: `sluice serve` (the library's listener over a fresh
//! engine) and librdkafka's in-process mock cluster. Every scenario runs on both.

mod common;

#[path = "../examples/kafka_windowed_count.rs"]
#[allow(dead_code)]
mod example;

use std::{
    collections::{BTreeMap, HashSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::kafka::Served;
use futures_lite::future::block_on;
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    mocking::MockCluster,
    producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer},
};
use sluice_engine::{
    connectors::kafka::{
        KafkaConnectorError, KafkaSinkConfig, KafkaSinkFactory, KafkaSourceConfig, KafkaSourceFactory, OutRecord,
    },
    dataflow::{
        CheckpointConfig, Event, Generator, Pipeline, PipelineConfig, RunningPipeline, WatermarkStrategy, Windows,
    },
    kafka::KafkaConfig,
};
use sluice_io::EventTime;

/// A broker the connector talks to.
enum Broker {
    Served(Box<Served>),
    Mock(MockCluster<'static, DefaultProducerContext>),
}

impl Broker {
    fn served(name: &str) -> Broker {
        Broker::Served(Box::new(Served::launch(
            "kafka_connector",
            name,
            1,
            KafkaConfig::new("127.0.0.1:0".parse().unwrap()),
        )))
    }

    fn mock() -> Broker {
        Broker::Mock(MockCluster::new(1).expect("mock cluster starts"))
    }

    fn bootstrap(&self) -> String {
        match self {
            Broker::Served(s) => s.addr().to_string(),
            Broker::Mock(m) => m.bootstrap_servers(),
        }
    }

    fn create_topic(&self, name: &str, partitions: u32) {
        match self {
            Broker::Served(s) => {
                block_on(s.handle().create_topic(name, partitions, None)).expect("topic created");
            }
            Broker::Mock(m) => m.create_topic(name, partitions as i32, 1).expect("topic created"),
        }
    }

    fn producer(&self) -> BaseProducer {
        ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .set("partitioner", "murmur2_random")
            .create()
            .expect("producer")
    }

    /// Produces records `i` in `range` to `topic`: key `k{i % keys}`, value `i`, timestamp
    /// `BASE_MS + i`.
    fn produce(&self, topic: &str, range: std::ops::Range<u64>, keys: u64) {
        self.produce_to(topic, range, keys, None);
    }

    /// As [`Broker::produce`], all to `partition` if given.
    fn produce_to(&self, topic: &str, range: std::ops::Range<u64>, keys: u64, partition: Option<i32>) {
        let producer = self.producer();
        for i in range {
            let (key, value) = (format!("k{}", i % keys), i.to_string());
            let mut record = BaseRecord::to(topic).key(&key).payload(&value).timestamp(BASE_MS + i as i64);
            if let Some(p) = partition {
                record = record.partition(p);
            }
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((_, back)) => {
                        record = back;
                        producer.poll(Duration::from_millis(5));
                    }
                }
            }
        }
        producer.flush(Duration::from_secs(30)).expect("flushed");
    }

    fn consumer(&self, group: &str) -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .expect("consumer")
    }

    /// Every record a `read_committed` consumer sees in `topic`, as (partition, key, value).
    fn read_committed(&self, topic: &str) -> Vec<(i32, String, String)> {
        let consumer = self.consumer("kafka-connector-reader");
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
        let mut tpl = TopicPartitionList::new();
        let mut ends = BTreeMap::new();
        for p in metadata.topics().iter().flat_map(|t| t.partitions()) {
            tpl.add_partition_offset(topic, p.id(), Offset::Beginning).unwrap();
            ends.insert(p.id(), consumer.fetch_watermarks(topic, p.id(), Duration::from_secs(10)).unwrap().1);
        }
        consumer.assign(&tpl).unwrap();
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let positions = consumer.position().unwrap();
            if ends.iter().all(|(&p, &end)| {
                positions.find_partition(topic, p).is_some_and(|e| e.offset().to_raw().unwrap_or(-1) >= end)
            }) {
                return out;
            }
            assert!(Instant::now() < deadline, "reading {topic} back: positions {positions:?}, ends {ends:?}");
            if let Some(m) = consumer.poll(Duration::from_millis(50)) {
                let m = m.expect("a record");
                let text = |b: Option<&[u8]>| String::from_utf8(b.unwrap_or_default().to_vec()).unwrap();
                out.push((m.partition(), text(m.key()), text(m.payload())));
            }
        }
    }

    /// The committed offsets of `group` on `topic`'s partitions `0..partitions`.
    fn committed(&self, group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
        let consumer = self.consumer(group);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_range(topic, 0, partitions - 1);
        let committed = consumer.committed_offsets(tpl, Duration::from_secs(10)).expect("committed offsets");
        committed.elements().iter().map(|e| (e.partition(), e.offset().to_raw().unwrap_or(-1))).collect()
    }
}

const BASE_MS: i64 = 1_700_000_000_000;

fn pipeline(shards: usize) -> Pipeline {
    Pipeline::new(PipelineConfig { pin: false, ..PipelineConfig::with_shards(shards) })
}

/// `key -> k{n}` parsed back to `n`.
fn key_number(key: Option<&[u8]>) -> u64 {
    std::str::from_utf8(key.unwrap_or_default())
        .ok()
        .and_then(|k| k.strip_prefix('k'))
        .and_then(|n| n.parse().ok())
        .unwrap()
}

// ---- the source ----

/// N keyed records, read by a pipeline of 1 and then 2 shards through a group each time,
/// counted per key in 100 ms tumbling windows of their Kafka timestamps.
fn source_counts_per_key(broker: &Broker) {
    const N: u64 = 3_000;
    const KEYS: u64 = 7;
    broker.create_topic("events", 4);
    broker.produce("events", 0..N, KEYS);
    let mut want = BTreeMap::new();
    for i in 0..N {
        let t = BASE_MS + i as i64;
        *want.entry((i % KEYS, t - t.rem_euclid(100))).or_insert(0u64) += 1;
    }
    for shards in [1, 2] {
        let source = KafkaSourceFactory::new(
            // As in the other group tests: a member that never got its partitions (seen once
            // on the mock cluster) is evicted and its share reassigned within seconds, not
            // after librdkafka's default 45 s session timeout.
            KafkaSourceConfig::new(broker.bootstrap(), format!("count-{shards}"), "events")
                .bounded()
                .set("heartbeat.interval.ms", "100")
                .set("session.timeout.ms", "6000"),
        )
        .unwrap();
        assert_eq!(source.end_offsets().unwrap().values().filter(|&&e| e > 0).sum::<i64>(), N as i64);
        let got = Arc::new(Mutex::new(BTreeMap::new()));
        let sink = got.clone();
        pipeline(shards)
            .run(move |scope| {
                let sink = sink.clone();
                let records =
                    source.instance(scope.shard(), |r| (key_number(r.key), r.timestamp)).expect("consumer starts");
                scope
                    .source(
                        records,
                        WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(10), |r: &(u64, EventTime)| {
                            r.1
                        }),
                    )
                    .key_by(|r| r.0)
                    .window(Windows::tumbling(Duration::from_millis(100)))
                    .count()
                    .for_each(move |e| {
                        let r = e.value;
                        assert!(sink.lock().unwrap().insert((r.key, r.window.start.millis()), r.value).is_none());
                    });
            })
            .unwrap();
        assert_eq!(*got.lock().unwrap(), want, "windowed counts at {shards} shards");
    }
}

#[test]
fn source_counts_per_key_at_1_and_2_shards_on_sluice_serve() {
    source_counts_per_key(&Broker::served("counts"));
}

#[test]
fn source_counts_per_key_at_1_and_2_shards_on_the_mock_cluster() {
    source_counts_per_key(&Broker::mock());
}

/// Runs a 1-shard pipeline reading `topic` unbounded as `group`, recording every
/// (partition, offset) it emits.
fn recording_pipeline(broker: &Broker, group: &str, topic: &str, seen: Arc<Mutex<Vec<(i32, i64)>>>) -> RunningPipeline {
    let config = KafkaSourceConfig {
        commit_interval: Duration::from_millis(100),
        ..KafkaSourceConfig::new(broker.bootstrap(), group, topic)
    }
    .set("heartbeat.interval.ms", "100")
    .set("session.timeout.ms", "6000");
    let source = KafkaSourceFactory::new(config).unwrap();
    pipeline(1)
        .spawn(move |scope| {
            let seen = seen.clone();
            let records = source.instance(scope.shard(), |r| (r.partition, r.offset)).expect("consumer starts");
            scope
                .source(records, WatermarkStrategy::processing_time())
                .for_each(move |e| seen.lock().unwrap().push(e.value));
        })
        .unwrap()
}

/// Two pipelines (two "processes") in one group: once both have joined, they split the
/// partitions and together see every record exactly once.
fn two_pipelines_split_a_group(broker: &Broker) {
    broker.create_topic("shared", 4);
    let (a, b) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
    let pa = recording_pipeline(broker, "two", "shared", a.clone());
    let pb = recording_pipeline(broker, "two", "shared", b.clone());
    // Warm up until both have been given partitions, then let the group settle for many
    // heartbeats: a coordinator may tell the old owner of a partition late.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut warm = 0;
    while a.lock().unwrap().is_empty() || b.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "both pipelines receive records within 30 s");
        for p in 0..4 {
            broker.produce_to("shared", warm..warm + 1, 8, Some(p));
            warm += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let settled: (usize, usize) = (a.lock().unwrap().len(), b.lock().unwrap().len());
    let warm_records: usize = settled.0 + settled.1;
    const N: u64 = 2_000;
    broker.produce("shared", warm..warm + N, 16);
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.lock().unwrap().len() + b.lock().unwrap().len() < warm_records + N as usize {
        assert!(Instant::now() < deadline, "both pipelines together read all {N} records within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    pa.stop(true);
    pb.stop(true);
    pa.join().unwrap();
    pb.join().unwrap();
    let (a, b) = (a.lock().unwrap()[settled.0..].to_vec(), b.lock().unwrap()[settled.1..].to_vec());
    assert!(!a.is_empty() && !b.is_empty(), "both pipelines read part of the input: {} and {}", a.len(), b.len());
    let pa: HashSet<i32> = a.iter().map(|r| r.0).collect();
    let pb: HashSet<i32> = b.iter().map(|r| r.0).collect();
    assert!(pa.is_disjoint(&pb), "the pipelines hold different partitions: {pa:?} and {pb:?}");
    let all: Vec<(i32, i64)> = a.iter().chain(&b).copied().collect();
    let unique: HashSet<(i32, i64)> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "no record read twice");
    assert_eq!(all.len(), N as usize, "every record read");
}

#[test]
fn two_pipelines_in_one_group_split_the_partitions_on_sluice_serve() {
    two_pipelines_split_a_group(&Broker::served("split"));
}

#[test]
fn two_pipelines_in_one_group_split_the_partitions_on_the_mock_cluster() {
    two_pipelines_split_a_group(&Broker::mock());
}

/// With checkpoints, a completed checkpoint commits the positions it holds: after the
/// final checkpoint of a bounded read, the group's committed offsets are the end offsets.
fn checkpoint_commits_positions(broker: &Broker, name: &str) {
    const N: u64 = 2_000;
    broker.create_topic("positions", 3);
    broker.produce("positions", 0..N, 5);
    let dir = common::data_dir("kafka_connector", name);
    let source = KafkaSourceFactory::new(
        // A short session bounds how long a member that has gone quiet holds up a
        // rebalance at the end (librdkafka's mock cluster waits out the session).
        KafkaSourceConfig::new(broker.bootstrap(), "ckpt", "positions").bounded().set("session.timeout.ms", "6000"),
    )
    .unwrap();
    let ends = source.end_offsets().unwrap().clone();
    let total = Arc::new(Mutex::new(0u64));
    let sink = total.clone();
    let running = pipeline(2)
        .checkpointing(CheckpointConfig::new(&*dir).interval(Duration::from_millis(20)))
        .spawn(move |scope| {
            let sink = sink.clone();
            let records = source.instance(scope.shard(), |r| (key_number(r.key), r.timestamp)).unwrap();
            scope
                .source(
                    records,
                    WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(10), |r: &(u64, EventTime)| r.1),
                )
                .key_by(|r| r.0)
                .window(Windows::tumbling(Duration::from_millis(500)))
                .count()
                .for_each(move |e| *sink.lock().unwrap() += e.value.value);
        })
        .unwrap();
    running.join().unwrap();
    assert_eq!(*total.lock().unwrap(), N, "every record counted once");
    let committed = broker.committed("ckpt", "positions", 3);
    let want: BTreeMap<i32, i64> = ends.iter().map(|(&p, &e)| (p, e)).filter(|(_, e)| *e > 0).collect();
    let got: BTreeMap<i32, i64> = committed.into_iter().filter(|(p, _)| want.contains_key(p)).collect();
    assert_eq!(got, want, "committed offsets are the final checkpoint's positions");
}

#[test]
fn a_completed_checkpoint_commits_the_source_positions_on_sluice_serve() {
    checkpoint_commits_positions(&Broker::served("positions"), "positions-served");
}

#[test]
fn a_completed_checkpoint_commits_the_source_positions_on_the_mock_cluster() {
    checkpoint_commits_positions(&Broker::mock(), "positions-mock");
}

// ---- the sink ----

/// A checkpointed pipeline writes 0..N through the exactly-once sink; it is stopped after
/// a few checkpoints and restarted from the last: the restored run commits the restored
/// transactions again, the markers make it skip those already written, and a
/// `read_committed` consumer sees every number exactly once.
///
/// librdkafka's mock cluster accepts TxnOffsetCommit but does not store the offsets
/// (`rd_kafka_mock_handle_TxnOffsetCommit` only validates them), so it cannot hold the
/// markers: there (`restore == false`) the pipeline runs to its end once, checkpointing,
/// and the output is checked the same way.
fn exactly_once_across_a_restore(broker: &Broker, name: &str, restore: bool) {
    const N: u64 = 20_000;
    broker.create_topic("numbers", 3);
    let dir = common::data_dir("kafka_connector", name);
    let run = |stop_after: Option<usize>| {
        let sink = KafkaSinkFactory::new(KafkaSinkConfig::new(broker.bootstrap(), "numbers", "eos-test")).unwrap();
        let factory = sink.clone();
        let running = pipeline(2)
            .checkpointing(CheckpointConfig::new(&*dir).interval(Duration::from_millis(15)))
            .spawn(move |scope| {
                let sink = factory
                    .instance(scope.shard(), |e: Event<u64>| {
                        OutRecord::new(
                            Some(format!("k{}", e.value % 10).into_bytes()),
                            e.value.to_string().into_bytes(),
                        )
                        .at(e.time)
                    })
                    .expect("producer starts");
                scope
                    .source(
                        Generator::new(scope.shard(), scope.shards(), N, |i| i),
                        WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis(*i as i64)),
                    )
                    .map(|i| {
                        let until = Instant::now() + Duration::from_micros(20);
                        while Instant::now() < until {}
                        i
                    })
                    .to_two_phase_commit(sink);
            })
            .unwrap();
        if let Some(k) = stop_after {
            let deadline = Instant::now() + Duration::from_secs(30);
            while running.checkpoints().len() < k {
                assert!(Instant::now() < deadline, "{k} checkpoints in 30 s");
                std::thread::sleep(Duration::from_millis(1));
            }
            running.stop(false);
        }
        let restored = running.restored_from();
        running.join().unwrap();
        (restored, sink.finish().unwrap())
    };
    if restore {
        let (restored, first) = run(Some(3));
        assert_eq!(restored, None);
        assert!(first.epochs_committed > 0, "the first run committed epochs: {first:?}");
        let partial = broker.read_committed("numbers").len();
        assert!((partial as u64) < N, "the first run stopped before the end ({partial} records)");
        eprintln!("first run: {first:?}, {partial} records visible");
        let (restored, second) = run(None);
        eprintln!("second run restored from {restored:?}: {second:?}");
        assert!(restored.is_some(), "the second run restores");
        assert!(second.epochs_skipped > 0, "the restored transactions were found committed and skipped: {second:?}");
    } else {
        let (_, stats) = run(None);
        assert!(stats.epochs_committed > 2, "one transaction per shard and checkpoint: {stats:?}");
        assert_eq!(stats.records_committed, N);
    }
    let got = broker.read_committed("numbers");
    let mut values: Vec<u64> = got.iter().map(|(_, _, v)| v.parse().unwrap()).collect();
    values.sort_unstable();
    if values.len() as u64 != N {
        let present: HashSet<u64> = values.iter().copied().collect();
        let missing: Vec<u64> = (0..N).filter(|v| !present.contains(v)).collect();
        eprintln!("missing {} values: first {:?} last {:?}", missing.len(), missing.first(), missing.last());
    }
    assert_eq!(values.len() as u64, N, "no record lost or duplicated ({} records)", values.len());
    assert!(values.iter().copied().eq(0..N), "exactly 0..{N}");
    // Keys go where Kafka's murmur2 partitioner puts them.
    for (p, k, _) in &got {
        assert_eq!(
            *p as u32,
            sluice_engine::topic::partitioner::partition_for_key(k.as_bytes(), 3).get(),
            "partition of key {k}"
        );
    }
}

#[test]
fn exactly_once_sink_survives_a_restore_without_duplicates_on_sluice_serve() {
    exactly_once_across_a_restore(&Broker::served("eos"), "eos-served", true);
}

#[test]
fn exactly_once_sink_writes_each_record_once_on_the_mock_cluster() {
    exactly_once_across_a_restore(&Broker::mock(), "eos-mock", false);
}

/// Without checkpoints the at-least-once sink writes every record (once, as nothing fails).
fn at_least_once_writes_everything(broker: &Broker) {
    const N: u64 = 5_000;
    broker.create_topic("alo", 2);
    let sink =
        KafkaSinkFactory::new(KafkaSinkConfig::new(broker.bootstrap(), "alo", "alo-test").at_least_once()).unwrap();
    pipeline(2)
        .run(move |scope| {
            let sink = sink
                .instance(scope.shard(), |e: Event<u64>| OutRecord::new(None, e.value.to_string().into_bytes()))
                .expect("producer starts");
            scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), N, |i| i),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis(*i as i64)),
                )
                .to_two_phase_commit(sink);
        })
        .unwrap();
    let mut values: Vec<u64> = broker.read_committed("alo").iter().map(|(_, _, v)| v.parse().unwrap()).collect();
    values.sort_unstable();
    assert!(values.iter().copied().eq(0..N), "every record written once");
}

#[test]
fn at_least_once_sink_writes_every_record_on_sluice_serve() {
    at_least_once_writes_everything(&Broker::served("alo"));
}

#[test]
fn at_least_once_sink_writes_every_record_on_the_mock_cluster() {
    at_least_once_writes_everything(&Broker::mock());
}

/// The sink writes headers, null keys and null values; the source reads them back as
/// written, null apart from empty.
fn headers_and_nulls_round_trip(broker: &Broker) {
    const N: u64 = 300;
    broker.create_topic("whole", 2);
    let record = |i: u64| {
        let key = (!i.is_multiple_of(4)).then(|| format!("k{}", i % 5).into_bytes());
        let r = match (key, i % 3) {
            (Some(k), 0) => OutRecord::tombstone(k),
            (key, 1) => OutRecord::new(key, Vec::new()),
            (key, _) => OutRecord::new(key, i.to_string().into_bytes()),
        };
        r.with_header("i", Some(i.to_string().into_bytes()))
            .with_header("null", None)
            .with_header("empty", Some(vec![]))
    };
    let sink =
        KafkaSinkFactory::new(KafkaSinkConfig::new(broker.bootstrap(), "whole", "whole").at_least_once()).unwrap();
    pipeline(1)
        .run(move |scope| {
            let sink = sink.instance(scope.shard(), move |e: Event<u64>| record(e.value)).expect("producer starts");
            scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), N, |i| i),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis(*i as i64)),
                )
                .to_two_phase_commit(sink);
        })
        .unwrap();
    let source =
        KafkaSourceFactory::new(KafkaSourceConfig::new(broker.bootstrap(), "whole-read", "whole").bounded()).unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let out = got.clone();
    pipeline(1)
        .run(move |scope| {
            let out = out.clone();
            let records = source
                .instance(scope.shard(), |r| {
                    let headers: Vec<_> = r.headers().map(|h| sluice_engine::OwnedHeader::from_header(&h)).collect();
                    OutRecord {
                        key: r.key.map(<[u8]>::to_vec),
                        value: r.value.map(<[u8]>::to_vec),
                        timestamp: None,
                        headers,
                        partition: None,
                    }
                })
                .expect("consumer starts");
            scope
                .source(records, WatermarkStrategy::monotonous(|_: &OutRecord| EventTime::from_millis(0)))
                .for_each(move |e| out.lock().unwrap().push(e.value));
        })
        .unwrap();
    let mut got = std::mem::take(&mut *got.lock().unwrap());
    let index = |r: &OutRecord| -> u64 {
        std::str::from_utf8(r.headers[0].value.as_deref().unwrap()).unwrap().parse().unwrap()
    };
    got.sort_by_key(index);
    let want: Vec<OutRecord> = (0..N).map(record).collect();
    assert_eq!(got, want, "keys, values and headers as written, null apart from empty");
}

#[test]
fn headers_null_keys_and_null_values_round_trip_through_sink_and_source_on_sluice_serve() {
    headers_and_nulls_round_trip(&Broker::served("whole"));
}

// ---- configuration ----

#[test]
fn bad_configs_get_typed_errors() {
    let e = KafkaSourceFactory::new(KafkaSourceConfig::new("", "g", "t")).unwrap_err();
    assert!(matches!(e, KafkaConnectorError::Config(_)), "{e}");
    let e = KafkaSourceFactory::new(KafkaSourceConfig::new("127.0.0.1:1", "g", "bad topic!")).unwrap_err();
    assert!(matches!(e, KafkaConnectorError::Name(_)), "{e}");
    let e = KafkaSourceFactory::new(KafkaSourceConfig::new("127.0.0.1:1", "", "t")).unwrap_err();
    assert!(matches!(e, KafkaConnectorError::Name(_)), "{e}");
    let e = KafkaSourceFactory::new(KafkaSourceConfig {
        static_member: Some("bad member!".into()),
        ..KafkaSourceConfig::new("127.0.0.1:1", "g", "t")
    })
    .unwrap_err();
    assert!(matches!(e, KafkaConnectorError::Name(_)), "{e}");
    let e = KafkaSinkFactory::new(KafkaSinkConfig::new("127.0.0.1:1", "t", "")).unwrap_err();
    assert!(matches!(e, KafkaConnectorError::Name(_)), "{e}");
    let e = KafkaSinkFactory::new(KafkaSinkConfig {
        commit_queue_txns: 0,
        ..KafkaSinkConfig::new("127.0.0.1:1", "t", "p")
    })
    .unwrap_err();
    assert!(matches!(e, KafkaConnectorError::Config(_)), "{e}");
    // A bounded read of a topic the cluster does not have fails at start, not later.
    let broker = Broker::mock();
    let e = KafkaSourceFactory::new(
        KafkaSourceConfig {
            request_timeout: Duration::from_secs(5),
            ..KafkaSourceConfig::new(broker.bootstrap(), "g", "nope")
        }
        .set("allow.auto.create.topics", "false")
        .bounded(),
    )
    .unwrap_err();
    assert!(matches!(e, KafkaConnectorError::Topic { .. } | KafkaConnectorError::Client { .. }), "{e}");
}

// ---- the example ----

#[test]
fn the_windowed_count_example_runs_between_two_sluice_serve_listeners() {
    let dir = common::data_dir("kafka_connector", "example");
    let summary = example::run(None, None, &dir).expect("the example succeeds");
    assert_eq!(summary.counts, example::expected_counts());
    assert!(summary.epochs_committed > 0);
}
