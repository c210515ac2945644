//! The processor on the log: topic sources and sinks against a real engine on disk, run by
//! real pipelines at one and two shards.
//!
//! A topic-to-topic pipeline must deliver every record exactly once and keep each key's
//! order; sources must start where they are told (earliest, latest, a time, chosen
//! offsets, a group's committed offsets), stop at the ends seen when opened when bounded,
//! and follow new records otherwise; bad topics, partitions, offsets and group names are
//! typed errors before anything runs.
//!
//! The randomized case prints `SEED=<n>`; `SEED=<n> cargo test -p sluice-engine --test
//! dataflow_topic` replays it.

mod common;
use common::Rng;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use sluice_engine::dataflow::topic::{StartFrom, TopicRecord, TopicSink, TopicSource};
use sluice_engine::dataflow::{Pipeline, PipelineConfig, WatermarkStrategy};
use sluice_engine::topic::partitioner::partition_for_key;
use sluice_engine::{
    Consumer, Engine, EngineConfig, EngineError, EngineHandle, OffsetReset, OwnedHeader, OwnedRecord, SeekTo,
    TopicConfig,
};
use sluice_io::{BatchMeta, EventTime, Offset, PartitionId, Timestamp};

fn open(name: &str) -> (common::TestDir, Engine) {
    let dir = common::data_dir("dataflow_topic", name);
    let engine = block_on(Engine::open(EngineConfig { shards: Some(2), ..EngineConfig::new(&*dir as &Path) })).unwrap();
    (dir, engine)
}

/// A record to produce: key, value, event time.
type Input = (String, String, i64);

/// Appends `records` in order, each to its key's partition, in batches of up to 100 per
/// partition; returns each record's (partition, offset).
fn produce(h: &EngineHandle, topic: &str, records: &[Input]) -> Vec<(PartitionId, Offset)> {
    let partitions = h.describe_topic(topic).unwrap().partitions();
    let mut placed = Vec::with_capacity(records.len());
    let mut next: HashMap<PartitionId, Offset> = HashMap::new();
    for chunk in records.chunks(400) {
        let mut by_partition: BTreeMap<PartitionId, Vec<OwnedRecord>> = BTreeMap::new();
        for (key, value, time) in chunk {
            let p = partition_for_key(key.as_bytes(), partitions);
            let at = *next.entry(p).or_insert_with(|| block_on(h.offsets(topic, p)).unwrap().1);
            let list = by_partition.entry(p).or_default();
            placed.push((p, at.plus(list.len() as u64)));
            list.push(OwnedRecord::new(Some(key.clone().into_bytes()), value.clone().into_bytes(), Timestamp(*time)));
        }
        for (p, list) in by_partition {
            let n = list.len() as u64;
            let info = block_on(h.append(topic, p, list, BatchMeta::default())).unwrap();
            let start = next.get_mut(&p).unwrap();
            assert_eq!(info.base_offset, *start, "appends to {topic}-{p} land where expected");
            *start = start.plus(n);
        }
    }
    placed
}

/// Every record of a topic, read with the engine's consumer from the earliest offsets.
fn consume_all(h: &EngineHandle, topic: &str) -> Vec<TopicRecord> {
    block_on(async {
        let mut consumer = Consumer::new(h.clone(), 1 << 16);
        let partitions = consumer.partitions_of(topic).unwrap();
        consumer.assign(&partitions, SeekTo::Earliest).await.unwrap();
        let mut ends = BTreeMap::new();
        for (t, p) in &partitions {
            ends.insert((t.clone(), *p), h.offsets(t, *p).await.unwrap().1);
        }
        let mut out = Vec::new();
        while consumer.positions() != &ends {
            for polled in consumer.poll(Duration::from_millis(100)).await.unwrap() {
                for r in polled.batches.records() {
                    let r = r.unwrap();
                    out.push(TopicRecord {
                        partition: polled.partition,
                        offset: r.offset(),
                        key: r.key().map(<[u8]>::to_vec),
                        value: r.value().map(<[u8]>::to_vec),
                        time: r.event_time(),
                        headers: r.headers().map(|h| OwnedHeader::from_header(&h)).collect(),
                    });
                }
            }
        }
        out
    })
}

/// Runs a bounded pipeline reading `source` on `shards` shards and returns what it read.
fn read_with_pipeline(source: TopicSource, shards: usize) -> Vec<TopicRecord> {
    let read = Arc::new(Mutex::new(Vec::new()));
    let sink = read.clone();
    Pipeline::new(PipelineConfig::with_shards(shards))
        .run(move |scope| {
            let sink = sink.clone();
            scope
                .topic_source(&source, WatermarkStrategy::monotonous(TopicRecord::event_time))
                .for_each(move |e| sink.lock().unwrap().push(e.value));
        })
        .unwrap();
    let mut read = std::mem::take(&mut *read.lock().unwrap());
    read.sort_by_key(|r| (r.partition, r.offset));
    read
}

/// The (partition, offset) of each record read, in order.
fn positions(records: &[TopicRecord]) -> Vec<(u32, u64)> {
    records.iter().map(|r| (r.partition.get(), r.offset.0)).collect()
}

/// `records` at 4 partitions of "in": key `k{i % keys}`, value `k..:n` (the n-th of its
/// key), event time `i * 10`.
fn numbered(count: usize, keys: usize) -> Vec<Input> {
    let mut seen = vec![0usize; keys];
    (0..count)
        .map(|i| {
            let k = i % keys;
            seen[k] += 1;
            (format!("k{k}"), format!("k{k}:{}", seen[k] - 1), i as i64 * 10)
        })
        .collect()
}

#[test]
fn topic_to_topic_delivers_every_record_once_in_key_order() {
    let mut rng = Rng::from_env();
    for shards in [1, 2] {
        let (_dir, engine) = open(&format!("pipe{shards}"));
        let h = engine.handle();
        block_on(h.create_topic("in", 4, None)).unwrap();
        // Small output batches: many appends per partition, so appends queue behind each
        // other and the sink holds the sources back.
        let out_config = TopicConfig { batch_records: 16, ..TopicConfig::default() };
        block_on(h.create_topic("out", 3, Some(out_config))).unwrap();
        let n = 2000 + rng.below(2000) as usize;
        let keys = 1 + rng.below(60) as usize;
        let mut counts = vec![0usize; keys];
        let records: Vec<Input> = (0..n)
            .map(|i| {
                let k = rng.below(keys as u64) as usize;
                counts[k] += 1;
                (format!("key-{k}"), format!("{}", counts[k] - 1), i as i64)
            })
            .collect();
        produce(&h, "in", &records);

        let source = block_on(TopicSource::open(&h, "in", StartFrom::Earliest)).unwrap().bounded();
        let sink = TopicSink::open(&h, "out").unwrap();
        Pipeline::new(PipelineConfig::with_shards(shards))
            .run(move |scope| {
                scope
                    .topic_source(&source, WatermarkStrategy::monotonous(TopicRecord::event_time))
                    .map(|r| {
                        let key = String::from_utf8(r.key.expect("keyed")).unwrap();
                        let value = format!("{key}/{}", String::from_utf8(r.value.unwrap_or_default()).unwrap());
                        (key, value)
                    })
                    .key_by(|(key, _)| key.clone())
                    .into_stream()
                    .to_topic(&sink, |(key, value)| (Some(key.into_bytes()), value.into_bytes()));
            })
            .unwrap();

        let out = consume_all(&h, "out");
        assert_eq!(out.len(), n, "{shards} shards: every record once, none more");
        let time_of: HashMap<String, i64> = records.iter().map(|(k, v, t)| (format!("{k}/{v}"), *t)).collect();
        let mut next_of_key: HashMap<String, usize> = HashMap::new();
        for r in &out {
            let key = String::from_utf8(r.key.clone().unwrap()).unwrap();
            let value = String::from_utf8(r.value.clone().unwrap_or_default()).unwrap();
            assert_eq!(r.partition, partition_for_key(key.as_bytes(), 3), "placed by the engine's partitioner");
            assert_eq!(Some(&r.time.millis()), time_of.get(&value), "{value}: the event time travels with the record");
            // Records come partition by partition in offset order, and a key lives in one
            // partition: each key's records must be numbered 0, 1, 2, ... in that order.
            let (prefix, n) = value.split_once('/').unwrap();
            assert_eq!(prefix, key);
            let expected = next_of_key.entry(key.clone()).or_insert(0);
            assert_eq!(n.parse::<usize>().unwrap(), *expected, "{shards} shards: key {key} out of order or repeated");
            *expected += 1;
        }
        for (k, &count) in counts.iter().enumerate() {
            assert_eq!(next_of_key.get(&format!("key-{k}")).copied().unwrap_or(0), count);
        }
    }
}

#[test]
fn starts_at_earliest_latest_and_a_timestamp() {
    let (_dir, engine) = open("times");
    let h = engine.handle();
    block_on(h.create_topic("in", 4, None)).unwrap();
    let records = numbered(800, 37);
    let placed = produce(&h, "in", &records);

    for shards in [1, 2] {
        let all =
            read_with_pipeline(block_on(TopicSource::open(&h, "in", StartFrom::Earliest)).unwrap().bounded(), shards);
        let mut want: Vec<(u32, u64)> = placed.iter().map(|(p, o)| (p.get(), o.0)).collect();
        want.sort_unstable();
        assert_eq!(positions(&all), want, "earliest at {shards} shards: everything, once");
        for r in &all {
            let i = placed.iter().position(|&(p, o)| p == r.partition && o == r.offset).unwrap();
            let (key, value, time) = &records[i];
            assert_eq!(
                (r.key.as_deref(), r.value.as_deref().unwrap_or_default(), r.time),
                (Some(key.as_bytes()), value.as_bytes(), Timestamp(*time))
            );
        }

        let latest = block_on(TopicSource::open(&h, "in", StartFrom::Latest)).unwrap().bounded();
        assert!(read_with_pipeline(latest, shards).is_empty(), "latest, bounded: nothing to read");

        // Times grow with the input order, so within each partition too: from a time, a
        // partition is read from its first record at or after it.
        let from = EventTime::from_millis(5000);
        let timed = read_with_pipeline(
            block_on(TopicSource::open(&h, "in", StartFrom::Timestamp(from))).unwrap().bounded(),
            shards,
        );
        let mut want: Vec<(u32, u64)> = placed
            .iter()
            .zip(&records)
            .filter(|(_, (_, _, t))| *t >= from.millis())
            .map(|((p, o), _)| (p.get(), o.0))
            .collect();
        want.sort_unstable();
        assert_eq!(positions(&timed), want, "from {from} at {shards} shards");
    }
}

#[test]
fn starts_at_chosen_offsets_and_refuses_bad_ones() {
    let (_dir, engine) = open("offsets");
    let h = engine.handle();
    block_on(h.create_topic("in", 4, None)).unwrap();
    let placed = produce(&h, "in", &numbered(400, 41));
    let ends: Vec<u64> = PartitionId::all(4).map(|p| block_on(h.offsets("in", p)).unwrap().1.0).collect();
    assert!(ends.iter().all(|&e| e > 10), "every partition has records: {ends:?}");

    let chosen = BTreeMap::from([(PartitionId(0), Offset(5)), (PartitionId(2), Offset(ends[2]))]);
    let source = block_on(TopicSource::open(&h, "in", StartFrom::Offsets(chosen))).unwrap().bounded();
    assert_eq!(source.start_offsets(), vec![Offset(5), Offset(0), Offset(ends[2]), Offset(0)]);
    assert_eq!(source.end_offsets(), ends.iter().map(|&e| Offset(e)).collect::<Vec<_>>());
    let read = read_with_pipeline(source, 2);
    let mut want: Vec<(u32, u64)> = placed
        .iter()
        .filter(|(p, o)| match p.get() {
            0 => o.0 >= 5,
            2 => false,
            _ => true,
        })
        .map(|(p, o)| (p.get(), o.0))
        .collect();
    want.sort_unstable();
    assert_eq!(positions(&read), want);

    let bad_partition = BTreeMap::from([(PartitionId(4), Offset(0))]);
    assert!(matches!(
        block_on(TopicSource::open(&h, "in", StartFrom::Offsets(bad_partition))),
        Err(EngineError::PartitionOutOfRange { partition: PartitionId(4), partitions: 4, .. })
    ));
    let past_end = BTreeMap::from([(PartitionId(1), Offset(ends[1] + 1))]);
    assert!(matches!(
        block_on(TopicSource::open(&h, "in", StartFrom::Offsets(past_end))),
        Err(EngineError::OffsetOutOfRange { partition: PartitionId(1), .. })
    ));
}

#[test]
fn starts_at_a_groups_committed_offsets() {
    let (_dir, engine) = open("committed");
    let h = engine.handle();
    block_on(h.create_topic("in", 4, None)).unwrap();
    let placed = produce(&h, "in", &numbered(600, 43));
    let ends: Vec<u64> = PartitionId::all(4).map(|p| block_on(h.offsets("in", p)).unwrap().1.0).collect();
    // Partitions 0..3 committed halfway (2 at its end); partition 3 never committed.
    let committed: Vec<(String, PartitionId, Offset)> = [(0, ends[0] / 2), (1, ends[1] / 2), (2, ends[2])]
        .iter()
        .map(|&(p, o)| ("in".into(), PartitionId(p), Offset(o)))
        .collect();
    block_on(h.commit_offsets("billing", None, &committed)).unwrap();

    for (reset, from_uncommitted) in [(OffsetReset::Earliest, 0), (OffsetReset::Latest, ends[3])] {
        let start = StartFrom::Committed { group: "billing".into(), reset };
        let source = block_on(TopicSource::open(&h, "in", start)).unwrap().bounded();
        assert_eq!(
            source.start_offsets(),
            vec![Offset(ends[0] / 2), Offset(ends[1] / 2), Offset(ends[2]), Offset(from_uncommitted)]
        );
        let read = read_with_pipeline(source, 2);
        let mut want: Vec<(u32, u64)> = placed
            .iter()
            .filter(|(p, o)| match p.get() {
                3 => o.0 >= from_uncommitted,
                _ => o.0 >= committed[p.index()].2.0,
            })
            .map(|(p, o)| (p.get(), o.0))
            .collect();
        want.sort_unstable();
        assert_eq!(positions(&read), want, "committed offsets, uncommitted per {reset:?}");
    }

    // A group that never committed starts every partition per its reset policy.
    let fresh = StartFrom::Committed { group: "fresh".into(), reset: OffsetReset::Earliest };
    let source = block_on(TopicSource::open(&h, "in", fresh)).unwrap();
    assert_eq!(source.start_offsets(), vec![Offset(0); 4]);
}

#[test]
fn unknown_topics_and_bad_groups_are_errors() {
    let (_dir, engine) = open("unknown");
    let h = engine.handle();
    block_on(h.create_topic("in", 2, None)).unwrap();
    assert!(matches!(
        block_on(TopicSource::open(&h, "nope", StartFrom::Earliest)),
        Err(EngineError::UnknownTopic(t)) if t == "nope"
    ));
    assert!(matches!(TopicSink::open(&h, "nope"), Err(EngineError::UnknownTopic(t)) if t == "nope"));
    // Group ids are any string, as Kafka's: one with a slash has simply committed nothing.
    let odd_group = StartFrom::Committed { group: "a/../b".into(), reset: OffsetReset::Earliest };
    assert!(block_on(TopicSource::open(&h, "in", odd_group)).is_ok());
    // The same topic opened properly works.
    assert_eq!(TopicSink::open(&h, "in").unwrap().partitions(), 2);
}

#[test]
fn an_unbounded_source_follows_new_records_until_stopped() {
    let (_dir, engine) = open("follow");
    let h = engine.handle();
    block_on(h.create_topic("in", 4, None)).unwrap();
    // Written before the source opens at the latest offsets: never read.
    produce(&h, "in", &numbered(100, 29));
    let source =
        block_on(TopicSource::open(&h, "in", StartFrom::Latest)).unwrap().fetch_max_wait(Duration::from_millis(50));
    let read = Arc::new(Mutex::new(Vec::new()));
    let sink = read.clone();
    let running = Pipeline::new(PipelineConfig::with_shards(2))
        .spawn(move |scope| {
            let sink = sink.clone();
            scope
                .topic_source(
                    &source,
                    WatermarkStrategy::monotonous(TopicRecord::event_time).with_idle_timeout(Duration::from_millis(50)),
                )
                .for_each(move |e| sink.lock().unwrap().push(e.value));
        })
        .unwrap();

    // Written while the pipeline waits at the ends, in a few rounds.
    let mut placed = Vec::new();
    let later: Vec<Input> = numbered(300, 31).into_iter().map(|(k, v, t)| (k, format!("new-{v}"), t)).collect();
    for round in later.chunks(100) {
        std::thread::sleep(Duration::from_millis(30));
        placed.extend(produce(&h, "in", round));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while read.lock().unwrap().len() < later.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    running.stop(true);
    running.join().unwrap();

    let mut read = std::mem::take(&mut *read.lock().unwrap());
    read.sort_by_key(|r| (r.partition, r.offset));
    placed.sort_unstable();
    let want: Vec<(u32, u64)> = placed.iter().map(|(p, o)| (p.get(), o.0)).collect();
    assert_eq!(positions(&read), want, "exactly the records written after the source opened");
    assert!(read.iter().all(|r| r.value.as_deref().unwrap_or_default().starts_with(b"new-")));
}

#[test]
fn an_append_the_engine_refuses_fails_the_pipeline() {
    let (_dir, engine) = open("refused");
    let h = engine.handle();
    block_on(h.create_topic("in", 4, None)).unwrap();
    let small = TopicConfig { max_record_bytes: 64, ..TopicConfig::default() };
    block_on(h.create_topic("out", 2, Some(small))).unwrap();
    produce(&h, "in", &numbered(200, 17));
    let source = block_on(TopicSource::open(&h, "in", StartFrom::Earliest)).unwrap().bounded();
    let sink = TopicSink::open(&h, "out").unwrap();
    let in_pipeline = sink.clone();
    let result = Pipeline::new(PipelineConfig::with_shards(2)).run(move |scope| {
        let sink = &in_pipeline;
        scope
            .topic_source(&source, WatermarkStrategy::monotonous(TopicRecord::event_time))
            .key_by(|r| r.key.clone())
            .into_stream()
            .to_topic(sink, |r| (r.key, vec![b'x'; 100]));
    });
    assert!(matches!(result, Err(EngineError::Pipeline(_))), "a 100-byte record in a topic that takes 64: {result:?}");
    // The pipeline's error only says a shard failed; the sink kept the engine's.
    assert!(matches!(
        sink.take_error(),
        Some(EngineError::RecordTooLarge { topic, bytes: 102, limit: 64 }) if topic == "out"
    ));
    assert!(sink.take_error().is_none(), "taken once");
    assert!(consume_all(&h, "out").is_empty());
}

#[test]
fn a_fetch_the_engine_refuses_fails_the_pipeline() {
    let (_dir, engine) = open("deleted");
    let h = engine.handle();
    block_on(h.create_topic("in", 2, None)).unwrap();
    produce(&h, "in", &numbered(50, 19));
    let source =
        block_on(TopicSource::open(&h, "in", StartFrom::Earliest)).unwrap().fetch_max_wait(Duration::from_millis(20));
    let in_pipeline = source.clone();
    let running = Pipeline::new(PipelineConfig::with_shards(2))
        .spawn(move |scope| {
            scope.topic_source(&in_pipeline, WatermarkStrategy::monotonous(TopicRecord::event_time)).for_each(|_| {});
        })
        .unwrap();
    // The source follows the topic; deleting it makes the next fetch fail.
    std::thread::sleep(Duration::from_millis(50));
    block_on(h.delete_topic("in")).unwrap();
    let result = running.join();
    assert!(matches!(result, Err(EngineError::Pipeline(_))), "{result:?}");
    assert!(matches!(source.take_error(), Some(EngineError::UnknownTopic(t)) if t == "in"));
}

#[test]
fn headers_and_null_values_pass_through_a_pipeline() {
    let (_dir, engine) = open("headers");
    let h = engine.handle();
    block_on(h.create_topic("in", 2, None)).unwrap();
    block_on(h.create_topic("out", 2, None)).unwrap();
    let records: Vec<OwnedRecord> = (0..200)
        .map(|i| {
            let key = format!("k{}", i % 9).into_bytes();
            let record = if i % 5 == 0 {
                OwnedRecord::tombstone(key, Timestamp(i))
            } else {
                OwnedRecord::new(
                    Some(key),
                    if i % 7 == 0 { Vec::new() } else { format!("v{i}").into_bytes() },
                    Timestamp(i),
                )
            };
            record.with_header("i", Some(i.to_string().into_bytes())).with_header("null", None)
        })
        .collect();
    for r in &records {
        block_on(h.send_record("in", r.clone())).unwrap();
    }
    let source = block_on(TopicSource::open(&h, "in", StartFrom::Earliest)).unwrap().bounded();
    let sink = TopicSink::open(&h, "out").unwrap();
    Pipeline::new(PipelineConfig::with_shards(2))
        .run(move |scope| {
            scope.topic_source(&source, WatermarkStrategy::monotonous(TopicRecord::event_time)).to_topic_records(
                &sink,
                |r: TopicRecord, time| OwnedRecord {
                    key: r.key,
                    value: r.value,
                    event_time: time,
                    headers: [r.headers, vec![OwnedHeader::new("via", "pipeline")]].concat(),
                },
            );
        })
        .unwrap();
    let mut out: Vec<OwnedRecord> = consume_all(&h, "out")
        .into_iter()
        .map(|r| OwnedRecord { key: r.key, value: r.value, event_time: r.time, headers: r.headers })
        .collect();
    out.sort_by_key(|r| r.event_time);
    let want: Vec<OwnedRecord> =
        records.into_iter().map(|r| r.with_header("via", Some(b"pipeline".to_vec()))).collect();
    assert_eq!(out, want, "keys, values (null and empty apart), headers and times kept");
}
